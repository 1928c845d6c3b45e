"""Edits of statements: remove a call that is a statement of its own, unwrap a
``with`` block, add a decorator, assign a value.

The rules hand over the statement they found (``rules._sync.Statement``: the
line or one-line suite, the ``Expr`` in it and the block that holds the line),
the ``with`` statement and its item, or the function; nothing is searched again.

Removal keeps the code valid and its comments:
- ``a(); torch.cuda.empty_cache()`` loses only the call (and its ``;``);
- the only statement of a block becomes ``pass``;
- comment lines written above the removed line move to the next statement of
  the block (or stay at the end of the block); blank lines above it are kept
  when the next statement has none.
"""

from __future__ import annotations

from typing import List, Sequence, Union

import libcst as cst

from torchlint.codemods.calls import Value, expression

Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]


# -- removing a statement ---------------------------------------------------------------


def _has_comment(lines: Sequence[cst.EmptyLine]) -> bool:
    return any(line.comment is not None for line in lines)


def _merge_leading(removed: Sequence[cst.EmptyLine], following: Sequence[cst.EmptyLine]) -> List[cst.EmptyLine]:
    """The lines above a removed statement, joined to those of the statement after it."""
    if _has_comment(removed):
        return [*removed, *following]
    return list(following) if following else list(removed)


def _needs_block(statement) -> bool:
    """Whether removing the line must edit its block (to keep the lines above it)."""
    owner = statement.owner
    return (
        isinstance(owner, cst.SimpleStatementLine)
        and len(owner.body) == 1
        and statement.block is not None
        and len(statement.block.body) > 1
        and bool(owner.leading_lines)
    )


def removal_target(statement) -> cst.CSTNode:
    """The node that ``remove_statement`` replaces: the statement's line, or the
    block holding it when lines above it must move to the next statement."""
    return statement.block if _needs_block(statement) else statement.owner


def _without_small(owner, small: cst.BaseSmallStatement):
    """``owner`` (a line or a suite) without ``small``; semicolons stay consistent."""
    body = [s for s in owner.body if s is not small]
    if owner.body[-1] is small:
        body[-1] = body[-1].with_changes(semicolon=owner.body[-1].semicolon)
    return owner.with_changes(body=body)


def remove_statement(statement) -> Replacement:
    """The replacement for ``removal_target(statement)`` that removes the call."""
    owner, small, block = statement.owner, statement.small, statement.block
    if len(owner.body) > 1:
        return _without_small(owner, small)
    if isinstance(owner, cst.SimpleStatementSuite) or block is None or len(block.body) == 1:
        # The only statement of its block: keep the block valid.
        return owner.with_changes(body=[cst.Pass()])
    if not _needs_block(statement):
        return cst.RemovalSentinel.REMOVE
    body = list(block.body)
    index = next(i for i, s in enumerate(body) if s is owner)
    del body[index]
    if index < len(body):
        following = body[index]
        body[index] = following.with_changes(
            leading_lines=_merge_leading(owner.leading_lines, following.leading_lines)
        )
        return block.with_changes(body=body)
    # The last statement of the block: its comments end the block.
    kept = list(owner.leading_lines) if _has_comment(owner.leading_lines) else []
    return block.with_changes(body=body, footer=[*kept, *block.footer])


# -- unwrapping a `with` --------------------------------------------------------------------


def can_unwrap(with_node: cst.With, item: cst.WithItem) -> bool:
    """An item bound with ``as`` may be used in the body; ``async with`` is not ours."""
    return item.asname is None and with_node.asynchronous is None


def unwrap_with(with_node: cst.With, item: cst.WithItem) -> Replacement:
    """Drop ``item`` from ``with_node``; a ``with`` left without items is replaced
    by its body, dedented (LibCST indents blocks relative to their parent)."""
    items = [i for i in with_node.items if i is not item]
    if items:
        if with_node.items[-1] is item:
            items[-1] = items[-1].with_changes(comma=item.comma)
        return with_node.with_changes(items=items)
    body = with_node.body
    leading = list(with_node.leading_lines)
    if isinstance(body, cst.SimpleStatementSuite):
        return cst.SimpleStatementLine(
            body=body.body, leading_lines=leading, trailing_whitespace=body.trailing_whitespace
        )
    statements = list(body.body)
    header = body.header
    if header.comment is not None:
        # `with torch.autograd.detect_anomaly():  # note` keeps its note above the body.
        leading.append(cst.EmptyLine(indent=True, whitespace=cst.SimpleWhitespace(""), comment=header.comment))
    first = statements[0]
    statements[0] = first.with_changes(leading_lines=[*leading, *first.leading_lines])
    return cst.FlattenSentinel(statements)


# -- decorators and assignments -------------------------------------------------------------


def add_decorator(function: cst.FunctionDef, decorator: Value) -> cst.FunctionDef:
    """Add ``@decorator`` (source text such as ``"torch.no_grad()"``, or an
    expression) as the innermost decorator of ``function``.

    Innermost, so that ``@staticmethod``, ``@classmethod`` or ``@property``
    above it still receive a plain function.  Comments above the function and
    between its decorators stay where they are; no import is added (the rule
    passes names the module already binds).
    """
    return function.with_changes(
        decorators=[*function.decorators, cst.Decorator(decorator=expression(decorator))]
    )


def assign(target: cst.BaseAssignTargetExpression, value: Value) -> cst.Assign:
    """A statement ``target = value`` (``p.grad.zero_()`` -> ``p.grad = None``)."""
    return cst.Assign(targets=[cst.AssignTarget(target=target)], value=expression(value))


def set_value(statement: cst.Assign, value: Value) -> cst.Assign:
    """``p.grad = torch.zeros_like(p)`` -> ``p.grad = None``: only the value changes."""
    return statement.with_changes(value=expression(value))
