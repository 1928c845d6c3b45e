"""Building blocks for codemods: small, formatting-preserving edits of calls."""

from __future__ import annotations

import libcst as cst


def _no_space_equal() -> cst.AssignEqual:
    return cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name), equal=_no_space_equal())


def add_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """Append ``name=value`` to a call, keeping its layout.

    ``f(a, b)`` -> ``f(a, b, name=value)``; in a call laid out one argument
    per line with a trailing comma, the new argument gets a line of its own.
    """
    new = keyword_arg(name, value)
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # Trailing comma: the new argument takes it (and its line break); the
        # previous last argument gets a separator like its neighbours'.
        if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
            separator = args[-2].comma
        else:
            separator = cst.Comma(whitespace_after=call.whitespace_before_args)
        args[-1] = last.with_changes(comma=separator)
        args.append(new.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        args.append(new)
    return call.with_changes(args=args)


def set_argument(call: cst.Call, arg: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    """Replace the value of one argument of ``call`` (identified by identity)."""
    return call.with_changes(
        args=[a.with_changes(value=value) if a is arg else a for a in call.args]
    )


def remove_args(call: cst.Call, remove: "list[cst.Arg]") -> cst.Call:
    """Drop some arguments, keeping the commas of the others consistent."""
    kept = [a for a in call.args if not any(a is r for r in remove)]
    if not kept:
        return call.with_changes(args=[])
    if len(kept) < len(call.args) and call.args[-1] is not kept[-1]:
        # The old last argument's comma (trailing or not) moves to the new last.
        kept[-1] = kept[-1].with_changes(comma=call.args[-1].comma)
    return call.with_changes(args=kept)
