"""Small, shared questions about call sites that several rules ask."""

from __future__ import annotations

import re
from typing import Dict, Generic, List, Optional, Tuple, TypeVar

import libcst as cst

from torchlint.names import dotted_name
from torchlint.nodes import walk_nodes
from torchlint.rule import Context

TORCH_DTYPES = frozenset(
    {
        "float", "float32", "float64", "double", "float16", "half", "bfloat16",
        "float8_e4m3fn", "float8_e5m2", "complex64", "complex128", "cfloat", "cdouble",
        "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool",
        "uint16", "uint32", "uint64", "quint8", "qint8", "qint32",
    }
)

ACCELERATOR_TYPES = ("cuda", "mps", "xpu", "hip", "npu", "xla", "meta")


def source_mentions(source: str, pattern: "re.Pattern[str]", words: Tuple[str, ...]) -> bool:
    """Whether ``pattern`` matches ``source``, tried only when one of ``words`` occurs.

    A regular expression that starts with ``\\b`` and an alternation scans a
    whole module slowly (about 25 us per kB); plain substring tests rule most
    modules out first. ``words`` must be substrings of every match.
    """
    return any(word in source for word in words) and pattern.search(source) is not None


T = TypeVar("T")


class CallTable(Generic[T]):
    """Values keyed by the qualified names of callables (``torch.nn.Conv2d``),
    looked up for a call with a cheap test first: ``x.Name(...)`` whose last
    name is in no key is rejected before the (costlier) import resolution; a
    bare name may be an alias (``from torch.nn import Conv2d as C``) and is
    always resolved."""

    def __init__(self, table: Dict[str, T]) -> None:
        self.table = table
        self.last_names = frozenset(q.rsplit(".", 1)[-1] for q in table)

    def lookup(self, call: cst.Call, ctx: Context) -> Optional[T]:
        func = call.func
        if type(func) is cst.Attribute:
            if func.attr.value not in self.last_names:
                return None
        elif type(func) is not cst.Name:
            return None
        return self.table.get(ctx.qualname(func) or "")


def method_name(call: cst.Call) -> Optional[str]:
    """``x.foo(...)`` -> ``"foo"``."""
    func = call.func
    if type(func) is cst.Attribute:  # not isinstance: ABC checks are slow
        return func.attr.value
    return None


def receiver(call: cst.Call) -> Optional[cst.BaseExpression]:
    """``x.foo(...)`` -> ``x``."""
    func = call.func
    if type(func) is cst.Attribute:
        return func.value
    return None


def has_star(call: cst.Call) -> bool:
    """Whether the call passes ``*args`` or ``**kwargs`` (keywords we cannot see)."""
    return any(arg.star for arg in call.args)


def positional(call: cst.Call) -> List[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def keyword(call: cst.Call, name: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def argument(call: cst.Call, name: str, position: Optional[int]) -> Tuple[bool, Optional[cst.Arg]]:
    """Find a parameter given by keyword or at ``position`` (0-based).

    Returns ``(known, arg)``: ``known`` is False when ``*args``/``**kwargs`` may
    hide it, in which case a rule must stay silent.
    """
    arg = keyword(call, name)
    if arg is not None:
        return True, arg
    if position is not None:
        pos = positional(call)
        if len(pos) > position:
            return True, pos[position]
    if has_star(call):
        return False, None
    return True, None


def literal_bool(expr: cst.BaseExpression) -> Optional[bool]:
    """True/False for the literals ``True``/``False``, else None (unknown)."""
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return expr.value == "True"
    return None


def literal_number(expr: cst.BaseExpression) -> Optional[float]:
    if isinstance(expr, cst.Integer):
        try:
            return float(int(expr.value.replace("_", ""), 0))
        except ValueError:
            return None
    if isinstance(expr, cst.Float):
        try:
            return float(expr.value.replace("_", ""))
        except ValueError:
            return None
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = literal_number(expr.expression)
        return -inner if inner is not None else None
    return None


def literal_int(expr: cst.BaseExpression) -> Optional[int]:
    """The value of an integer literal (``3``, ``-1``), else None."""
    value = literal_number(expr)
    if value is None or not isinstance(expr, (cst.Integer, cst.UnaryOperation)) or value != int(value):
        return None
    return int(value)


def string_value(expr: cst.BaseExpression) -> Optional[str]:
    if isinstance(expr, cst.SimpleString):
        try:
            value = expr.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes
            return None
        return value if isinstance(value, str) else None
    return None


def last_name(expr: cst.BaseExpression) -> Optional[str]:
    """``x`` -> ``"x"``; ``a.b.x`` -> ``"x"``; anything else -> None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def is_accelerator_string(value: str) -> bool:
    return value.split(":", 1)[0].strip() in ACCELERATOR_TYPES


def device_type(expr: cst.BaseExpression, ctx: Context) -> Optional[str]:
    """The device type a literal names: ``"cuda"`` for ``"cuda:0"`` or
    ``torch.device("cuda", 0)``; None when it is not a literal."""
    text = string_value(expr)
    if text is None and isinstance(expr, cst.Call) and ctx.qualname(expr.func) == "torch.device":
        args = positional(expr)
        if args:
            text = string_value(args[0].value)
    if text is None:
        return None
    return text.split(":", 1)[0].strip()


def device_kind(expr: cst.BaseExpression, ctx: Context) -> Optional[str]:
    """Classify an argument of ``.to(...)``.

    ``"accelerator"``: certainly a non-CPU device (``"cuda"``, ``"cuda:0"``,
    ``torch.device("cuda")``); ``"device"``: a device whose type is not known
    statically, by its name (``device``, ``self.device``, ``x.device``,
    ``torch.device(...)``); ``"cpu"``; ``"dtype"`` (``torch.float16``,
    ``x.dtype``, ``dtype``); None when it could be anything (``.to(other)``).
    """
    text = string_value(expr)
    if text is not None:
        if is_accelerator_string(text):
            return "accelerator"
        if text.split(":", 1)[0].strip() == "cpu":
            return "cpu"
        return None
    if isinstance(expr, cst.Call):
        q = ctx.qualname(expr.func)
        if q == "torch.device":
            args = positional(expr)
            if args:
                inner = string_value(args[0].value)
                if inner is not None:
                    if is_accelerator_string(inner):
                        return "accelerator"
                    if inner.split(":", 1)[0].strip() == "cpu":
                        return "cpu"
            return "device"
        return None
    q = ctx.qualname(expr)
    if q is not None:
        if q.startswith("torch.") and q[len("torch."):] in TORCH_DTYPES:
            return "dtype"
        return None
    name = last_name(expr)
    if name is None:
        return None
    lowered = name.lower()
    if lowered in ("dtype", "_dtype") or lowered.endswith("_dtype") or lowered.startswith("dtype_"):
        return "dtype"
    if lowered in ("device", "dev", "_device") or lowered.endswith("_device") or lowered.startswith("device_"):
        return "device"
    return None


def moves_to_device(call: cst.Call, ctx: Context) -> Optional[cst.BaseExpression]:
    """For ``x.cuda(...)``/``x.to(<device>)``/``x.to(device=...)``, whether the call
    moves data to a device that may be an accelerator.  Returns the call itself
    or None.  A ``.to(<dtype>)`` cast, ``.to("cpu")`` or an argument that may be
    either (``.to(other)``, ``*args``) is not a move."""
    name = method_name(call)
    if name == "cuda":
        return call
    if name != "to":
        return None
    if any(a.star for a in call.args):
        return None
    dev = keyword(call, "device")
    if dev is not None:
        return call if device_kind(dev.value, ctx) in ("accelerator", "device") else None
    pos = positional(call)
    if pos and device_kind(pos[0].value, ctx) in ("accelerator", "device"):
        return call
    return None


def blocking_flag(call: cst.Call) -> Optional[Tuple[str, Optional[cst.Arg]]]:
    """For a ``.to(...)``/``.cuda(...)`` copy: ``("absent", None)`` when it
    passes no ``non_blocking``, ``("false", arg)`` when it passes the literal
    ``False``; None when it is non-blocking or may be (``non_blocking=True``,
    a variable, ``*args``, ``.to(device, dtype, flag)``, ``.to(x, True)``,
    ``.cuda(device, flag)``)."""
    if has_star(call):
        return None
    flag = keyword(call, "non_blocking")
    if flag is not None:
        return ("false", flag) if literal_bool(flag.value) is False else None
    pos = positional(call)
    name = method_name(call)
    if name == "cuda" and len(pos) >= 2:
        return None
    if name == "to" and (len(pos) >= 3 or (len(pos) == 2 and literal_bool(pos[1].value) is not None)):
        return None
    return ("absent", None)


def chain_root(expr: cst.BaseExpression) -> Optional[str]:
    """``model.to(device)`` -> ``"model"``: the dotted name at the root of a method chain."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        expr = expr.func.value
    return dotted_name(expr)


def has_parameters(params: cst.Parameters) -> bool:
    """Whether a function takes anything besides ``self``/``cls``."""
    named = (*params.posonly_params, *params.params, *params.kwonly_params)
    if any(p.name.value not in ("self", "cls") for p in named):
        return True
    return isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None


def statement_position(block: cst.CSTNode, statement: cst.CSTNode) -> Tuple[List[cst.CSTNode], Optional[int]]:
    """The statements of ``block`` (a module, an indented block) and the index
    of ``statement`` among them, by identity (None: not one of them)."""
    statements = list(getattr(block, "body", ()) or ())
    return statements, next((k for k, st in enumerate(statements) if st is statement), None)


def is_docstring(statement: cst.CSTNode) -> bool:
    """Whether a statement is a string literal on its own (a docstring)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def equality_sides(test: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The two operands of a single ``a == b`` test, or None for any other test."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return None
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return None
    return test.left, target.comparator


def names_anywhere(root: cst.CSTNode, name: str) -> bool:
    """Whether the name ``name`` occurs anywhere under ``root``, in nested
    functions and classes too (``_sync.mentions_name`` stops at scopes)."""
    return any(type(n) is cst.Name and n.value == name for n in walk_nodes(root))


def is_main_guard(node: cst.If) -> bool:
    """``if __name__ == "__main__":`` (either side of the ``==``)."""
    sides = equality_sides(node.test)
    return sides is not None and any(isinstance(s, cst.Name) and s.value == "__name__" for s in sides) and any(
        string_value(s) == "__main__" for s in sides
    )
