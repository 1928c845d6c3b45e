from __future__ import annotations

import io
import tokenize
from typing import List, Optional, Tuple

import libcst as cst

from torchlint.codemods import create_on_device as codemod
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Rule
from torchlint.rules._helpers import (
    device_kind,
    has_star,
    keyword,
    literal_bool,
    method_name,
    moves_to_device,
    positional,
    string_value,
)

DETERMINISTIC_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "tensor",
        "zeros_like", "ones_like", "empty_like", "full_like",
    }
)
RANDOM_FACTORIES = frozenset({"rand", "randn", "randint", "randperm", "rand_like", "randn_like"})
FACTORIES = DETERMINISTIC_FACTORIES | RANDOM_FACTORIES

# Factories whose values are exactly 0, 1 or uninitialised: a dtype moved into
# them gives the same values as a cast afterwards.
_EXACT_IN_ANY_DTYPE = frozenset(
    {"zeros", "ones", "empty", "eye", "zeros_like", "ones_like", "empty_like"}
)
# Factories that compute floating-point values with the device's arithmetic.
_COMPUTED_ON_DEVICE = frozenset({"linspace", "logspace"})

# Keywords of `.to`/`.cuda` that mean nothing for a freshly created tensor.
_DROPPED = frozenset({"non_blocking", "copy"})


class _Move:
    """What a `.cuda(...)`/`.to(...)` call asks for, as factory keywords."""

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


class CreateThenMove(Rule):
    """
    ## What it does
    Reports a tensor factory (`torch.zeros`, `torch.ones`, `torch.empty`,
    `torch.full`, `torch.arange`, `torch.linspace`, `torch.logspace`,
    `torch.eye`, `torch.tensor`, the `*_like` variants and the random
    factories `torch.rand`, `torch.randn`, `torch.randint`, `torch.randperm`)
    whose result is immediately moved to a device with `.cuda(...)`,
    `.to(<device>)` or `.to(device=...)`.

    A `.to(<dtype>)` cast is not a move and is not reported, nor is a `.to(x)`
    whose argument may be a device or a dtype (a tensor, `*args`), nor
    `.to("cpu")`.

    ## Why is this bad?
    The tensor is first allocated and filled in host memory, then a second
    allocation is made on the device and the data is copied over, which for a
    `.cuda()` of pageable memory is a synchronous copy. Passing `device=` to the
    factory allocates and fills the tensor directly on the device: one
    allocation, no host work and no transfer.

    ## Example
    ```python
    mask = torch.ones(seq_len, seq_len).cuda()
    noise = torch.randn(batch, dim).to(device, torch.float16)
    ```

    ## Use instead
    ```python
    mask = torch.ones(seq_len, seq_len, device="cuda")
    noise = torch.randn(batch, dim, device=device, dtype=torch.float16)
    ```

    ## Fix safety
    The fix moves the device (and a dtype given to `.to`) into the factory's
    keywords; `non_blocking=` and `copy=` are dropped since they mean nothing
    for a fresh tensor. `.cuda()` becomes `device="cuda"` and `.cuda(1)`
    becomes `device="cuda:1"`.

    The fix is safe for the deterministic factories (`zeros`, `ones`, `empty`,
    `full`, `eye`, `tensor`, `arange` with integer arguments, the `*_like`
    variants): the values are the same on every device.

    It is unsafe when:
    - the factory is random (`rand`, `randn`, `randint`, `randperm`,
      `rand_like`, `randn_like`): the device has its own random number
      generator, so under the same seed the tensor gets other values;
    - the factory computes floating-point values (`linspace`, `logspace`,
      `arange` with a float argument): the device's arithmetic may round some
      elements differently;
    - a dtype given to `.to` is moved into a factory whose values are not all
      0 or 1 (`full`, `tensor`, `arange`, ...): the values are then built in
      that dtype instead of being rounded through the default dtype
      (`torch.tensor([0.1]).to(device, torch.float64)` differs from
      `torch.tensor([0.1], dtype=torch.float64, device=device)`);
    - the factory has `requires_grad=`: the moved tensor was a non-leaf copy,
      the fixed one is a leaf that receives `.grad`;
    - `.cuda(x)` is given a variable: `x` may be `None`, which `.cuda` takes as
      the current CUDA device but `device=` as the default (CPU) device;
    - the fix would delete a comment written inside the `.to(...)`/`.cuda(...)`.

    There is no fix when the factory has `generator=` (a CPU generator cannot
    drive a device factory), `out=`, `pin_memory=` or an explicit
    `device="cpu"`, when both the factory and `.to` give a dtype, when the
    move has other arguments such as `memory_format=`, or `*args`. A factory
    that already has a `device=` other than the CPU, or `**kwargs`, is not
    reported.

    ## References
    - PyTorch Performance Tuning Guide, "Create tensors directly on the target device"
    - `torch.zeros` documentation (the `device` keyword)
    """

    code = "TL201"
    name = "create-then-move"
    summary = "Tensor created on the CPU and then moved to the device"
    fix = FixAvailability.SOMETIMES_SAFE

    VALID = [
        "import torch\nx = torch.zeros(3, device='cuda')\n",
        "import torch\nx = torch.zeros(3).to(torch.float16)\n",
        "import torch\nx = torch.zeros(3).to(other)\n",
        "import torch\nx = torch.zeros(3).to('cpu')\n",
        "import torch\nx = torch.from_numpy(a).cuda()\n",
        "import torch\nx = torch.zeros(3).float().cuda()\n",
        "def zeros(n): ...\nimport torch\nx = zeros(3).cuda()\n",
    ]
    INVALID = [
        "import torch\nx = torch.zeros(3).cuda()\n",
        "import torch\nx = torch.randn(3).to(device)\n",
        "import torch\nx = torch.arange(10).to(device=x.device)\n",
    ]

    def visit_Call(self, node: cst.Call) -> None:
        move = method_name(node)
        if move not in ("cuda", "to"):
            return
        factory = node.func.value  # type: ignore[union-attr]
        if not isinstance(factory, cst.Call):
            return
        qualified = self.context.qualname(factory.func)
        if qualified is None or not qualified.startswith("torch."):
            return
        kind = qualified[len("torch."):]
        if kind not in FACTORIES:
            return
        if moves_to_device(node, self.context) is None:
            return
        if any(arg.star == "**" for arg in factory.args):
            return  # the keywords may already hold a device
        factory_device = keyword(factory, "device")
        if factory_device is not None and device_kind(factory_device.value, self.context) != "cpu":
            return  # created on a device already (or on one we cannot know)

        parts = self._cuda_parts(node) if move == "cuda" else self._to_parts(node)
        fix = None
        if parts.fixable:
            fix = self._fix(node, factory, kind, parts, factory_device is not None)
        like = kind.endswith("_like")
        where = "like its input" if like else "on the CPU"
        self.report(
            node,
            f"`torch.{kind}(...)` is created {where} and then copied to the device with "
            f"`.{move}(...)`; create it there directly with `device=...`",
            fix=fix,
        )

    # -- what the move asks for ------------------------------------------------
    def _cuda_parts(self, call: cst.Call) -> _Move:
        """``.cuda(device=None, non_blocking=False, memory_format=...)``."""
        parts = _Move()
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
            if text is not None:
                if not text.startswith("cuda"):
                    parts.fixable = False
                value = device
            else:
                value = device
                if device_kind(device, self.context) != "accelerator":
                    parts.unsafe_reasons.append("`.cuda(x)` takes `x=None` as the current GPU")
        parts.keywords.append(("device", value))
        return parts

    def _to_parts(self, call: cst.Call) -> _Move:
        """``.to(device, dtype, non_blocking, copy)`` or the same by keyword."""
        parts = _Move()
        device: Optional[cst.BaseExpression] = None
        dtype: Optional[cst.BaseExpression] = None
        pos = positional(call)
        by_keyword = keyword(call, "device") is not None
        if by_keyword and pos:
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

    # -- the fix -----------------------------------------------------------------
    def _fix(
        self, node: cst.Call, factory: cst.Call, kind: str, parts: _Move, has_device: bool
    ) -> Optional[Fix]:
        if has_device:
            return None
        for blocker in ("generator", "out", "pin_memory"):
            arg = keyword(factory, blocker)
            if arg is not None and not (blocker == "pin_memory" and literal_bool(arg.value) is False):
                return None
        if parts.dtype is not None and keyword(factory, "dtype") is not None:
            return None
        unsafe = list(parts.unsafe_reasons)
        if kind in RANDOM_FACTORIES:
            unsafe.append("random values differ on the device")
        if kind in _COMPUTED_ON_DEVICE or (kind == "arange" and _has_float(factory)):
            unsafe.append("float values are computed on the device")
        if parts.dtype is not None and kind not in _EXACT_IN_ANY_DTYPE:
            unsafe.append("values are built in the new dtype")
        requires_grad = keyword(factory, "requires_grad")
        if requires_grad is not None and literal_bool(requires_grad.value) is not False:
            unsafe.append("the tensor becomes a leaf")
        if _drops_comment(node):
            unsafe.append("a comment is removed")
        applicability = Applicability.UNSAFE if unsafe else Applicability.SAFE
        names = " and ".join(f"`{name}=`" for name, _ in parts.keywords)
        keywords = list(parts.keywords)
        return Fix(
            applicability,
            f"Pass {names} to `torch.{kind}`",
            lambda: codemod.create_on_device(node, factory, keywords),
        )


def _has_float(call: cst.Call) -> bool:
    """Whether a factory's positional arguments include a float literal or a division."""
    from torchlint.walker import walk_nodes

    for arg in positional(call):
        for n in walk_nodes(arg.value):
            if isinstance(n, cst.Float):
                return True
            if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Divide):
                return True
    return False


def _drops_comment(move: cst.Call) -> bool:
    """Whether the part of ``factory(...).to(...)`` outside the factory has a comment."""
    func = move.func
    assert isinstance(func, cst.Attribute)
    stripped = move.with_changes(func=func.with_changes(value=cst.Name("_")), lpar=[], rpar=[])
    code = "(" + cst.Module(body=[]).code_for_node(stripped) + "\n)"
    if "#" not in code:
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return True
    return any(t.type == tokenize.COMMENT for t in tokens)
