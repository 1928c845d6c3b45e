"""Codemod for TL302 (eval-without-no-grad): decorate a function with ``@<torch>.no_grad()``."""

from __future__ import annotations

import libcst as cst


def no_grad_decorator(torch_alias: str, attribute: bool = True) -> cst.Decorator:
    """``@T.no_grad()`` for ``import torch as T`` (or ``@no_grad()`` when
    ``no_grad`` itself was imported and ``attribute`` is False)."""
    func: cst.BaseExpression = (
        cst.Attribute(value=cst.Name(torch_alias), attr=cst.Name("no_grad"))
        if attribute
        else cst.Name(torch_alias)
    )
    return cst.Decorator(decorator=cst.Call(func=func))


def add_no_grad(function: cst.FunctionDef, torch_alias: str, attribute: bool = True) -> cst.FunctionDef:
    """Add ``@<torch_alias>.no_grad()`` as the innermost decorator of ``function``.

    Innermost, so that ``@staticmethod``, ``@classmethod`` or ``@property``
    above it still receive a plain function.  Comments above the function and
    between its decorators stay where they are; no import is added (the caller
    passes a name the module already binds to ``torch``).
    """
    decorators = list(function.decorators)
    decorators.append(no_grad_decorator(torch_alias, attribute))
    return function.with_changes(decorators=decorators)
