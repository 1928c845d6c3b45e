"""Edits of calls and expressions: small, formatting-preserving builders that
rules call in their fixes (``set_keyword(call, "pin_memory", "True")``).

A value is given as source text (``"True"``, ``"None"``) or as a LibCST
expression.  Every builder returns a new node; none searches the tree: the
rule hands over what it found.
"""

from __future__ import annotations

import io
import tokenize
from typing import Optional, Sequence, Tuple, Union

import libcst as cst

Value = Union[str, cst.BaseExpression]


def expression(value: Value) -> cst.BaseExpression:
    """``"True"`` -> ``Name("True")``; a node is returned as it is."""
    return cst.parse_expression(value) if isinstance(value, str) else value


def _no_space_equal() -> cst.AssignEqual:
    return cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name), equal=_no_space_equal())


_Whitespace = Union[cst.SimpleWhitespace, cst.ParenthesizedWhitespace]


def _line_start(ws: object) -> Optional[Tuple[bool, cst.SimpleWhitespace]]:
    """``(indent, last_line)`` of a whitespace that ends a line, else None."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.indent, ws.last_line
    return None


def _argument_indentation(call: cst.Call) -> Optional[Tuple[bool, cst.SimpleWhitespace]]:
    """How the arguments of a call laid out one per line are indented."""
    args = call.args
    if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
        return _line_start(args[-2].comma.whitespace_after)
    if len(args) == 1:
        return _line_start(call.whitespace_before_args)
    return None


def _newline(indent: bool, last_line: cst.SimpleWhitespace) -> cst.ParenthesizedWhitespace:
    """A line break without comment, followed by the given indentation."""
    return cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), empty_lines=[], indent=indent, last_line=last_line
    )


def add_keyword(call: cst.Call, name: str, value: Value) -> cst.Call:
    """Append ``name=value`` to a call, keeping its layout and its comments.

    ``f(a, b)`` -> ``f(a, b, name=value)``.  In a call laid out one argument per
    line, the new argument gets a line of its own with the same indentation,
    the trailing comma (if any) is kept, and a comment written after the old
    last argument stays on that argument's line.
    """
    new = keyword_arg(name, expression(value))
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    trailing = last.comma if isinstance(last.comma, cst.Comma) else None
    tail: _Whitespace = trailing.whitespace_after if trailing is not None else last.whitespace_after_arg
    indentation = _argument_indentation(call) if isinstance(tail, cst.ParenthesizedWhitespace) else None
    if isinstance(tail, cst.ParenthesizedWhitespace) and indentation is not None:
        # One argument per line: the old last argument keeps its end-of-line
        # comment; the new one follows it, and comment lines that stood before
        # the closing parenthesis stay there.
        separator = cst.Comma(
            whitespace_before=trailing.whitespace_before if trailing is not None else cst.SimpleWhitespace(""),
            whitespace_after=tail.with_changes(
                empty_lines=[], indent=indentation[0], last_line=indentation[1]
            ),
        )
        closing = _newline(tail.indent, tail.last_line).with_changes(empty_lines=tail.empty_lines)
        if trailing is not None:
            args[-1] = last.with_changes(comma=separator)
            args.append(new.with_changes(comma=cst.Comma(whitespace_after=closing)))
        else:
            args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
            args.append(new.with_changes(whitespace_after_arg=closing))
        return call.with_changes(args=args)
    separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if trailing is not None:
        args[-1] = last.with_changes(comma=separator)
        args.append(new.with_changes(comma=trailing))
    else:
        args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(new.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)


def set_argument(call: cst.Call, arg: cst.Arg, value: Value) -> cst.Call:
    """Replace the value of one argument of ``call`` (identified by identity)."""
    new = expression(value)
    return call.with_changes(
        args=[a.with_changes(value=new) if a is arg else a for a in call.args]
    )


def set_keyword(call: cst.Call, name: str, value: Value, arg: Optional[cst.Arg] = None) -> cst.Call:
    """Give the parameter ``name`` of ``call`` the value ``value``.

    ``arg`` is the argument the rule found for that parameter (a keyword, or a
    positional argument in its place): its value is replaced.  Without one,
    a ``name=`` keyword of the call is replaced, or ``name=value`` is appended
    (``add_keyword``).  ``DataLoader(ds)`` -> ``DataLoader(ds, pin_memory=True)``;
    ``zero_grad(set_to_none=False)`` -> ``zero_grad(set_to_none=True)``.
    """
    if arg is None:
        arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    if arg is not None:
        return set_argument(call, arg, value)
    return add_keyword(call, name, value)


def add_keywords(call: cst.Call, keywords: Sequence[Tuple[str, Value]]) -> cst.Call:
    """``add_keyword`` for each ``(name, value)``, in order."""
    for name, value in keywords:
        call = add_keyword(call, name, value)
    return call


def rename_method(call: cst.Call, name: str) -> cst.Call:
    """``<expr>.item()`` -> ``<expr>.detach()``: only the method's name changes."""
    func = call.func
    assert isinstance(func, cst.Attribute), "a method call"
    return call.with_changes(func=func.with_changes(attr=func.attr.with_changes(value=name)))


def call_method(expr: cst.BaseExpression, name: str) -> cst.Call:
    """``loss`` -> ``loss.detach()``.  Parentheses written around ``expr`` stay
    around it (``(loss)`` -> ``(loss).detach()``): the same expression, then the call."""
    return cst.Call(func=cst.Attribute(value=expr, attr=cst.Name(name)))


def parenthesized_like(original: cst.BaseExpression, replacement: cst.BaseExpression) -> cst.BaseExpression:
    """``replacement`` inside the parentheses written around ``original``, if any."""
    if original.lpar:
        return replacement.with_changes(lpar=original.lpar, rpar=original.rpar)
    return replacement


def method_call_has_comment(call: cst.Call) -> bool:
    """Whether the part of ``<receiver>.method(...)`` outside the receiver has a
    comment (replacing the call by its edited receiver would delete it)."""
    func = call.func
    assert isinstance(func, cst.Attribute)
    stripped = call.with_changes(func=func.with_changes(value=cst.Name("_")), lpar=[], rpar=[])
    code = "(" + cst.Module(body=[]).code_for_node(stripped) + "\n)"
    if "#" not in code:
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return True
    return any(t.type == tokenize.COMMENT for t in tokens)


def remove_args(call: cst.Call, remove: "list[cst.Arg]") -> cst.Call:
    """Drop some arguments, keeping the commas of the others consistent."""
    kept = [a for a in call.args if not any(a is r for r in remove)]
    if not kept:
        return call.with_changes(args=[])
    if len(kept) < len(call.args) and call.args[-1] is not kept[-1]:
        # The old last argument's comma (trailing or not) moves to the new last.
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=kept)
