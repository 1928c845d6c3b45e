"""Tensor factories: the torch functions that create a tensor, and what moving
a fresh one amounts to.

The vocabulary (one place for every rule):

* ``FACTORIES``: ``torch.zeros``, ``ones``, ``empty``, ``full``, ``arange``,
  ``linspace``, ``logspace``, ``eye``, ``tensor``, the ``*_like`` variants, and
  the ``RANDOM_FACTORIES`` (``rand``, ``randn``, ``randint``, ``randperm``,
  ``rand_like``, ``randn_like``), which draw from the generator of the device
  they run on;
* ``HOST_DEFAULT_FACTORIES``: those that build on the default device (the CPU)
  when given no ``device=`` and no input tensor;
* ``EXACT_IN_ANY_DTYPE``: factories whose values are exactly 0, 1 or
  uninitialised, so a dtype given at creation equals a cast afterwards;
  ``COMPUTED_ON_DEVICE``: factories that compute floating-point values with the
  arithmetic of the device they run on (``linspace``, ``logspace``; and
  ``arange`` unless ``arange_exact``).

And the questions about a factory call and the move that follows it:

* ``arange_exact(call)``/``has_float(call)``: whether ``torch.arange(...)``
  gives the same values on every device, whether arguments may be floats;
* ``move_request(call, ctx)``: the factory keywords (``device=``, ``dtype=``)
  that ``.cuda(...)``/``.to(...)`` asks for, whether they can be moved into the
  factory, and why that would be unsafe;
* ``like_input(call)``, ``moves_next_to(move, source)``: the tensor a
  ``*_like`` factory copies, and ``zeros_like(x).to(x.device)``.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from torchlint.nodes import walk_nodes
from torchlint.rule import Context
from torchlint.rules._helpers import argument, device_kind, has_star, keyword, method_name, positional, string_value

DETERMINISTIC_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor",
        "zeros_like", "ones_like", "empty_like", "full_like",
    }
)
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like"})
FACTORIES = DETERMINISTIC_FACTORIES | RANDOM_FACTORIES
HOST_DEFAULT_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
        "linspace", "logspace", "eye",
    }
)
EXACT_IN_ANY_DTYPE = frozenset({"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"})
COMPUTED_ON_DEVICE = frozenset({"linspace", "logspace"})

_INTEGER_DTYPES = frozenset(
    {"long", "int64", "int", "int32", "short", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "bool"}
)
# Keywords of `.to`/`.cuda` that mean nothing for a freshly created tensor.
_DROPPED = frozenset({"non_blocking", "copy"})


# -- values of a factory call ---------------------------------------------------------


def arange_exact(call: cst.Call) -> bool:
    """Whether ``torch.arange(...)`` gives the same values on every device:
    only ``end`` given (the values are the indices ``0, 1, 2, ...``, each
    rounded once to the dtype), an integer ``dtype=``, or every argument
    visibly an integer (an int64 result, computed exactly)."""
    if any(arg.star for arg in call.args):
        return False
    dtype = keyword(call, "dtype")
    if dtype is not None:
        value = dtype.value
        name = value.attr.value if isinstance(value, cst.Attribute) else None
        return name in _INTEGER_DTYPES
    pos = positional(call)
    named = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    if not named & {"start", "step"} and (len(pos) == 1 or (not pos and "end" in named)):
        return True
    values = [arg.value for arg in call.args if arg.keyword is None or arg.keyword.value in ("start", "end", "step")]
    return all(visibly_integer(v) for v in values)


def visibly_integer(expr: cst.BaseExpression) -> bool:
    """``3``, ``len(x)``, ``int(t)``, ``x.size(0)``, ``x.shape[1]``, ``x.numel()``
    and sums, differences, products, floor divisions of those."""
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        return visibly_integer(expr.expression)
    if isinstance(expr, cst.BinaryOperation) and isinstance(
        expr.operator, (cst.Add, cst.Subtract, cst.Multiply, cst.FloorDivide, cst.Modulo)
    ):
        return visibly_integer(expr.left) and visibly_integer(expr.right)
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Name) and expr.func.value in ("len", "int"):
            return True
        return method_name(expr) in ("size", "numel", "dim") and bool(expr.args) == (method_name(expr) == "size")
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute):
        return expr.value.attr.value == "shape"
    return False


def has_float(call: cst.Call) -> bool:
    """Whether a factory's positional arguments include a float literal or a division."""
    for arg in positional(call):
        for n in walk_nodes(arg.value):
            if isinstance(n, cst.Float):
                return True
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Divide):
                return True
    return False


def like_input(factory: cst.Call) -> Optional[cst.BaseExpression]:
    """The tensor a ``*_like`` factory copies its shape and device from."""
    arg = keyword(factory, "input")
    if arg is not None:
        return arg.value
    pos = positional(factory)
    return pos[0].value if pos else None


def moves_next_to(move: cst.Call, source: cst.BaseExpression) -> bool:
    """``torch.zeros_like(x).to(x.device)``: already on that device."""
    _, target = argument(move, "device", 0)
    if target is None:
        return False
    value = target.value
    return (
        isinstance(value, cst.Attribute)
        and value.attr.value == "device"
        and isinstance(value.value, cst.Name)
        and isinstance(source, cst.Name)
        and value.value.value == source.value
    )


# -- what a move asks for ------------------------------------------------------------------


class MoveRequest:
    """What a ``.cuda(...)``/``.to(...)`` call asks for, as factory keywords."""

    def __init__(self) -> None:
        self.keywords: List[Tuple[str, cst.BaseExpression]] = []
        self.fixable = True
        self.unsafe_reasons: List[str] = []

    @property
    def dtype(self) -> Optional[cst.BaseExpression]:
        for name, value in self.keywords:
            if name == "dtype":
                return value
        return None


def move_request(call: cst.Call, ctx: Context) -> MoveRequest:
    """The request of ``call``, a ``.cuda(...)`` or a ``.to(...)``."""
    return _cuda_request(call, ctx) if method_name(call) == "cuda" else _to_request(call)


def _cuda_request(call: cst.Call, ctx: Context) -> MoveRequest:
    """``.cuda(device=None, non_blocking=False, memory_format=...)``."""
    parts = MoveRequest()
    if has_star(call):
        parts.fixable = False
        return parts
    device: Optional[cst.BaseExpression] = None
    for index, arg in enumerate(positional(call)):
        if index == 0:
            device = arg.value
        elif index > 1:
            parts.fixable = False
    for arg in call.args:
        if arg.keyword is None:
            continue
        name = arg.keyword.value
        if name == "device":
            device = arg.value
        elif name not in _DROPPED:
            parts.fixable = False
    if device is None or (isinstance(device, cst.Name) and device.value == "None"):
        value: cst.BaseExpression = cst.SimpleString('"cuda"')
    elif isinstance(device, cst.Integer):
        value = cst.SimpleString(f'"cuda:{device.value}"')
    else:
        text = string_value(device)
        value = device
        if text is not None:
            if not text.startswith("cuda"):
                parts.fixable = False
        elif device_kind(device, ctx) != "accelerator":
            parts.unsafe_reasons.append("`.cuda(x)` takes `x=None` as the current GPU")
    parts.keywords.append(("device", value))
    return parts


def _to_request(call: cst.Call) -> MoveRequest:
    """``.to(device, dtype, non_blocking, copy)`` or the same by keyword."""
    parts = MoveRequest()
    device: Optional[cst.BaseExpression] = None
    dtype: Optional[cst.BaseExpression] = None
    pos = positional(call)
    if keyword(call, "device") is not None and pos:
        parts.fixable = False
    for index, arg in enumerate(pos):
        if index == 0:
            device = arg.value
        elif index == 1:
            dtype = arg.value
        elif index > 3:
            parts.fixable = False
    for arg in call.args:
        if arg.keyword is None:
            continue
        name = arg.keyword.value
        if name == "device":
            device = arg.value
        elif name == "dtype":
            if dtype is not None:
                parts.fixable = False
            dtype = arg.value
        elif name not in _DROPPED:
            parts.fixable = False
    if device is None:
        parts.fixable = False
    else:
        parts.keywords.append(("device", device))
    if dtype is not None:
        parts.keywords.append(("dtype", dtype))
    return parts
