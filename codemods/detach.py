"""Codemod for TL303 (loss-graph-retained): accumulate ``loss.detach()`` instead of ``loss``."""

from __future__ import annotations

import libcst as cst


def detach(expr: cst.BaseExpression) -> cst.Call:
    """``loss`` -> ``loss.detach()``; ``outputs.loss`` -> ``outputs.loss.detach()``.

    Parentheses written around the expression stay around it (``(loss)`` ->
    ``(loss).detach()``), so the result is the same expression, detached.
    """
    return cst.Call(func=cst.Attribute(value=expr, attr=cst.Name("detach")))
