"""Codemods for TL301 (zero-grad-set-to-none)."""

from __future__ import annotations

import libcst as cst

from torchlint.codemods._util import add_keyword, set_argument


def set_to_none_true(call: cst.Call, arg: "cst.Arg | None") -> cst.Call:
    """``zero_grad(set_to_none=False)`` / ``zero_grad()`` -> ``zero_grad(set_to_none=True)``."""
    if arg is None:
        return add_keyword(call, "set_to_none", cst.Name("True"))
    return set_argument(call, arg, cst.Name("True"))


def grad_to_none_statement(grad: cst.BaseExpression) -> cst.Assign:
    """``p.grad.zero_()`` (a statement) -> ``p.grad = None``."""
    return cst.Assign(targets=[cst.AssignTarget(target=grad)], value=cst.Name("None"))


def grad_to_none_assignment(assign: cst.Assign) -> cst.Assign:
    """``p.grad = torch.zeros_like(p)`` -> ``p.grad = None``."""
    return assign.with_changes(value=cst.Name("None"))
