from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._device import host_values
from torchlint.rules._factories import (
    COMPUTED_ON_DEVICE,
    EXACT_IN_ANY_DTYPE,
    FACTORIES,
    RANDOM_FACTORIES,
    MoveRequest,
    arange_exact,
    has_float,
    like_input,
    move_request,
    moves_next_to,
)
from torchlint.rules._frequency import per_step_here
from torchlint.rules._program import trains_on_toy_data
from torchlint.rules._sync import sets_up_a_gradient_loop
from torchlint.rules._helpers import device_kind, keyword, last_name, literal_bool, method_name, moves_to_device


class CreateThenMove(Rule):
    """
    ## What it does
    Reports a tensor factory (`torch.zeros`, `torch.ones`, `torch.empty`,
    `torch.full`, `torch.arange`, `torch.linspace`, `torch.logspace`,
    `torch.eye`, the `*_like` variants and the random factories `torch.rand`,
    `torch.randn`, `torch.randint`, `torch.randperm`) whose result is
    immediately moved to a device with `.cuda(...)`, `.to(<device>)` or
    `.to(device=...)`, in code that runs every step.

    It reports only code that runs every step (see "How often code runs" in
    `docs/precision.md`): in a training, evaluation or inference loop, or in a
    function that runs per step by its role (`forward`, `__getitem__`,
    `*_step`, a collate function, a hook) or because per-step code calls it,
    in the same module or in another module of the run (the project index:
    `DiagonalGaussianDistribution.sample()` called from an autoencoder's
    `forward` in another file). A tensor made once (module set-up, `__init__`, an
    `if __name__ == "__main__":` demo, an export script's dummy input, a
    `log_images` helper) or once per epoch costs microseconds once, and is not
    reported; nor is one in a function whose callers torchlint does not see
    (precision first), nor one under a debug switch (`if args.debug_mode:`).

    `torch.tensor(data).to(device)` is not reported either: `data` is host
    memory (a list, a number, a NumPy array), and PyTorch builds the tensor on
    the host and copies it to the device whether or not `device=` is given
    (see the note "torch.tensor, lift_fresh, and device movement" in
    PyTorch's `torch/csrc/utils/tensor_new.h`), so the rewrite saves only the
    separate `.to(...)` call, a few microseconds. (The catalog lists `tensor`
    among the factories; this is the one place the rule is narrower, because
    a maintainer would not take that change for its speed.)

    A `.to(<dtype>)` cast is not a move and is not reported, nor is a `.to(x)`
    whose argument may be a device or a dtype (a tensor, `*args`), nor
    `.to("cpu")`.

    Nor is a factory in a module that makes its data with scikit-learn's
    synthetic generators or loads one of its toy datasets
    (`make_regression(2000)`, `make_moons(...)`, `load_iris()`; not 100,000
    samples or more by a literal): a demonstration whose whole run takes
    seconds.

    Also not reported, because there the tensor is created on the host on
    purpose or is not copied at all:
    - a factory given `generator=`: a generator drives only factories on its
      own device, so a CPU generator is chosen on purpose, usually so that a
      seed gives the same values whatever the device (a CUDA generator could
      not run a CPU factory at all);
    - a random factory with an explicit `device="cpu"`: the CPU random
      stream is asked for by name;
    - a `*_like(x)` factory, unless `x` visibly lives on the host, as the
      shared host/device analysis (`rules/_device.py`) decides: `x.cpu()`, a
      factory call without `device=`, `torch.from_numpy(...)`, NumPy values,
      or a name whose assignments that reach the call are all such values:
      `*_like` creates the tensor on
      `x`'s device, and in practice `x` is nearly always on the accelerator
      already, where the `.to(device)` copies nothing;
    - a vector of per-sample numbers (a shape with at most one size that is
      not a literal 1: `torch.ones([B, 1, 1, 1])`, `torch.zeros(len(x))`,
      `torch.arange(B)`) made outside any loop of a function that then runs a
      loop of gradient work (`.backward()`, `torch.autograd.grad(...)`, an
      optimizer step): an attack's or an optimisation's set-up, one tiny copy
      per call next to every iteration of the loop after it (a batch-sized
      random start, `torch.rand(x.shape).to(device)`, stays reported);
    - a factory with a literal `0` in its shape (`torch.empty(0).to(device)`,
      `torch.zeros((0, 4)).cuda()`: an empty start for `torch.cat`): the tensor
      holds nothing, so the move copies nothing;
    - the `forward` of a class that also defines `symbolic` (a
      `torch.autograd.Function` standing for an ONNX or TensorRT op such as
      NMS while a model is exported): it only makes up outputs of the right
      shape for the tracer, once per export;
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, `tests/`): tensors
      built once as test inputs cost nothing worth optimising, and tests often
      draw random inputs on the CPU on purpose so that seeded values (and the
      expected outputs written down from them) are the same on every device.

    ## Why is this bad?
    The tensor is first allocated and filled in host memory, then a second
    allocation is made on the device and the data is copied over, which for a
    `.cuda()` of pageable memory is a synchronous copy. Passing `device=` to the
    factory allocates and fills the tensor directly on the device: one
    allocation, no host work and no transfer.

    Measured with `torchlint verify --rules TL201` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 47.6 µs before,
    47.1 µs after, **1.01x**. `.to("cpu")` of a CPU tensor is free, so both versions
    do the same work on a CPU; the gain is the host allocation and copy skipped on a
    GPU. Run the same command on a GPU machine for the figure that matters there.

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
    `full`, `eye`, the `*_like` variants, and `arange` when its
    values are exact: only `end` given, every argument visibly an integer
    such as `len(x)` or `x.size(0)`, or an integer `dtype=`). For every
    program the rule reports, the fixed expression evaluates to a tensor
    with the same device, dtype, shape, values, layout and memory format as
    the original: the original's result is the output of `.to(device)`/
    `.cuda()`, so it lives on that device in both versions, and whatever
    later code does with it (use it on the host after `.cpu()`, index it
    with a permutation drawn from a generator, compare it) sees the same
    tensor. A device that turns out to be the CPU gives the factory's own
    tensor in both versions (`.to("cpu")` of a CPU tensor returns it); a
    device that is not available raises the same exception in both (checked
    with torch 2.13 on a CPU-only build: `AssertionError: Torch not compiled
    with CUDA enabled` from `torch.ones(3).to("cuda")` and from
    `torch.ones(3, device="cuda")`); and `.cuda()` and `device="cuda"` both mean the
    current CUDA device. The contents of `torch.empty` are unspecified in
    both versions.

    It is unsafe when:
    - the factory is random (`rand`, `randn`, `randint`, `randperm`,
      `rand_like`, `randn_like`): the device has its own random number
      generator, so under the same seed the tensor gets other values;
    - the factory computes floating-point values (`linspace`, `logspace`,
      `arange` with a float argument, or with a `start`/`step` that may be a
      float, `torch.arange(lo, hi, step)`): the device computes
      `start + i * step` with its own arithmetic and may round some elements
      differently;
    - a dtype given to `.to` is moved into a factory whose values are not all
      0 or 1 (`full`, `arange`, ...): the values are then built in that
      dtype instead of being rounded through the default dtype
      (`torch.full((2,), 0.1).to(device, torch.float64)` differs from
      `torch.full((2,), 0.1, dtype=torch.float64, device=device)`);
    - the factory has `requires_grad=`: the moved tensor was a non-leaf copy,
      the fixed one is a leaf that receives `.grad`;
    - `.cuda(x)` is given a variable: `x` may be `None`, which `.cuda` takes as
      the current CUDA device but `device=` as the default (CPU) device;
    - the fix would delete a comment written inside the `.to(...)`/`.cuda(...)`.

    There is no fix when the factory has `out=`, `pin_memory=` or an explicit
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
    needs = ("cuda", ".to(")

    VALID = [
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3, device='cuda')
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3).to(torch.float16)
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3).to(other)
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3).to('cpu')
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.from_numpy(a).cuda()
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3).float().cuda()
            """
        ),
        Valid(
            """
            def zeros(n): ...
            import torch
            for x in loader:
                m = zeros(3).cuda()
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.randn(3, generator=g).to(device)
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                m = torch.zeros_like(y).to(device)
            """
        ),
        # Host data is copied whatever you write.
        Valid(
            """
            import torch
            for x in loader:
                ids = torch.tensor([1, 2, 3]).to(device)
            """
        ),
        # Runs once: module set-up, a constructor, an export script's dummy input.
        Valid(
            """
            import torch
            mask = torch.zeros(3).cuda()
            """
        ),
        Valid(
            """
            import torch
            class Net(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = torch.ones(3).cuda()
            """
        ),
        Valid(
            """
            import torch
            def export(model):
                dummy = torch.zeros(1, 3, 224, 224).to(device)
                torch.onnx.export(model, dummy, 'm.onnx')
            """
        ),
        # Once per epoch.
        Valid(
            """
            import torch
            for epoch in range(9):
                w = torch.ones(3).cuda()
                for x in loader:
                    step(x, w)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x in loader:
                m = torch.zeros(3).cuda()
            """,
            expected_fix="""
            import torch
            for x in loader:
                m = torch.zeros(3, device="cuda")
            """,
        ),
        Invalid(
            """
            import torch
            for x in loader:
                noise = torch.randn(3).to(device)
            """,
            expected_fix="""
            import torch
            for x in loader:
                noise = torch.randn(3, device=device)
            """,
        ),
        Invalid(
            """
            import torch
            class Net(torch.nn.Module):
                def forward(self, x):
                    return x + torch.arange(10).to(device=x.device)
            """,
            expected_fix="""
            import torch
            class Net(torch.nn.Module):
                def forward(self, x):
                    return x + torch.arange(10, device=x.device)
            """,
        ),
        Invalid(
            """
            import torch
            class Net(torch.nn.Module):
                def forward(self, x):
                    return x * self.mask(x)
                def mask(self, x):
                    return torch.ones(x.shape[-1]).to(x.device)
            """,
            expected_fix="""
            import torch
            class Net(torch.nn.Module):
                def forward(self, x):
                    return x * self.mask(x)
                def mask(self, x):
                    return torch.ones(x.shape[-1], device=x.device)
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="factory then `.to(device)` vs the factory with `device=`",
        before="""
            import torch

            device = torch.device(DEVICE)


            def train_step():  # runs every step: TL201 reports only there
                return torch.zeros(1024, 1024).to(device)


            def run():
                return train_step()
            """,
        after="""
            import torch

            device = torch.device(DEVICE)


            def train_step():  # runs every step: TL201 reports only there
                return torch.zeros(1024, 1024, device=device)


            def run():
                return train_step()
            """,
        cpu_note='`.to("cpu")` of a CPU tensor is free, so both versions do the same work on a CPU',
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._off = context.is_test_file or trains_on_toy_data(context)

    # -- the rule ------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if self._off:
            return
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
        if kind not in FACTORIES or kind == "tensor":
            return  # `torch.tensor(data)`: host data is copied whatever you write (see the docs)
        if moves_to_device(node, self.context) is None:
            return
        if _no_elements(factory, kind):
            return  # `torch.empty(0).to(device)`: an empty start for `torch.cat`, no bytes to copy
        if any(arg.star == "**" for arg in factory.args):
            return  # the keywords may already hold a device
        if keyword(factory, "generator") is not None:
            return  # a CPU generator, chosen on purpose (seeded values on every device)
        factory_device = keyword(factory, "device")
        if factory_device is not None:
            where = device_kind(factory_device.value, self.context)
            if where != "cpu":
                return  # created on a device already (or on one we cannot know)
            if kind in RANDOM_FACTORIES:
                return  # the CPU random stream, asked for by name
        like = kind.endswith("_like")
        if like:
            source = like_input(factory)
            if source is None or moves_next_to(node, source):
                return
            if not host_values(self.context).is_host(source, self.context.location()):
                return  # created on its input's device, probably the accelerator already

        where = "like its input" if like else "on the CPU"
        message = (
            f"`torch.{kind}(...)` is created {where} and then copied to the device with "
            f"`.{move}(...)`; create it there directly with `device=...`"
        )
        parts = move_request(node, self.context)
        fix = None
        if parts.fixable:
            fix = self._fix(node, factory, kind, parts, factory_device is not None)
        frequency = per_step_here(self.context)
        if frequency is None:
            return  # made once (set-up, export, a demo) or once per epoch: nothing to win
        if _one_dimension(factory, kind) and sets_up_a_gradient_loop(self.context):
            return  # `torch.ones([B, 1, 1, 1]).to(device)` once before an attack's steps: one tiny copy per call
        self.report(node, message, fix=fix, frequency=frequency)

    # -- the fix -----------------------------------------------------------------
    def _fix(
        self, node: cst.Call, factory: cst.Call, kind: str, parts: MoveRequest, has_device: bool
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
        if kind in COMPUTED_ON_DEVICE or (kind == "arange" and has_float(factory)):
            unsafe.append("float values are computed on the device")
        elif kind == "arange" and not arange_exact(factory):
            unsafe.append("`start`/`step` may be floats, computed with the device's arithmetic")
        if parts.dtype is not None and kind not in EXACT_IN_ANY_DTYPE:
            unsafe.append("values are built in the new dtype")
        requires_grad = keyword(factory, "requires_grad")
        if requires_grad is not None and literal_bool(requires_grad.value) is not False:
            unsafe.append("the tensor becomes a leaf")
        if calls.method_call_has_comment(node):
            unsafe.append("a comment is removed")
        applicability = Applicability.UNSAFE if unsafe else Applicability.SAFE
        names = " and ".join(f"`{name}=`" for name, _ in parts.keywords)
        keywords = list(parts.keywords)
        return Fix(
            applicability,
            f"Pass {names} to `torch.{kind}`",
            lambda: calls.parenthesized_like(node, calls.add_keywords(factory, keywords)),
        )


_SHAPED = frozenset({"empty", "zeros", "ones", "rand", "randn", "full"})


def _one_dimension(factory: cst.Call, kind: str) -> bool:
    """A shape with at most one size that is not a literal 1 (``[B, 1, 1, 1]``,
    ``len(images)``, ``torch.arange(batch_size)``): a vector of per-sample
    numbers, not a batch of data."""
    if kind in ("arange", "linspace", "logspace"):
        return True
    if kind not in _SHAPED or kind == "eye":
        return False
    args = [a for a in factory.args if a.keyword is None and not a.star]
    dims = args[:1] if kind == "full" else args
    if len(dims) == 1 and isinstance(dims[0].value, (cst.Tuple, cst.List)):
        dims = dims[0].value.elements
    if not dims or any(isinstance(d, cst.StarredElement) or not _a_size(d.value) for d in dims):
        return False
    return sum(not (isinstance(d.value, cst.Integer) and d.value.evaluated_value == 1) for d in dims) <= 1


def _a_size(expr: cst.BaseExpression) -> bool:
    """One size, not a whole shape (``x.shape``, ``size``, ``x.size()``):
    a number, ``len(x)``, ``x.shape[0]``, ``x.size(0)``, a name that does not
    say it holds a shape, or arithmetic on those."""
    if isinstance(expr, cst.BinaryOperation):
        return _a_size(expr.left) and _a_size(expr.right)
    if isinstance(expr, cst.Integer) or isinstance(expr, cst.Subscript):
        return True
    if isinstance(expr, cst.Call):
        name = last_name(expr.func)
        return name == "len" or name in ("size", "numel") and bool(expr.args)
    if isinstance(expr, (cst.Name, cst.Attribute)):
        name = (last_name(expr) or "").lower()
        return "shape" not in name and "size" not in name and "dims" not in name
    return False


def _no_elements(factory: cst.Call, kind: str) -> bool:
    """Whether the factory's shape has a literal 0 in it (``torch.empty(0)``,
    ``torch.zeros((0, 4))``): the tensor holds nothing, so moving it copies
    nothing."""
    if kind not in _SHAPED:
        return False
    args = [a for a in factory.args if a.keyword is None and not a.star]
    if not args:
        return False
    dims = args[:1] if kind == "full" else args
    if len(dims) == 1 and isinstance(dims[0].value, (cst.Tuple, cst.List)):
        dims = dims[0].value.elements
    return any(isinstance(d.value, cst.Integer) and d.value.evaluated_value == 0 for d in dims)
