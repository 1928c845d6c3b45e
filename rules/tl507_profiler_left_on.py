from __future__ import annotations

import re
from pathlib import PurePath

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import argument, literal_bool
from torchlint.rules._program import under_switch

# qualified name -> (what to call it, whether it has an `enabled` first parameter)
_APIS = {
    "torch.autograd.profiler.profile": ("torch.autograd.profiler.profile", True),
    "torch.autograd.profiler_legacy.profile": ("torch.autograd.profiler.profile", True),
    "torch.autograd.profiler.emit_nvtx": ("torch.autograd.profiler.emit_nvtx", True),
    "torch.autograd.gradcheck": ("torch.autograd.gradcheck", False),
    "torch.autograd.gradgradcheck": ("torch.autograd.gradgradcheck", False),
    "torch.autograd.gradcheck.gradcheck": ("torch.autograd.gradcheck", False),
    "torch.autograd.gradcheck.gradgradcheck": ("torch.autograd.gradgradcheck", False),
}
_TAILS = frozenset({"profile", "emit_nvtx", "gradcheck", "gradgradcheck"})

# A run-time switch (`if args.profile:`), a function or a file whose purpose
# is profiling or checking.
_SWITCH = re.compile(r"prof|nvtx|debug|trace|gradcheck", re.IGNORECASE)
_PURPOSE = re.compile(r"^_*(test|check(?!point))|prof|bench|debug|gradcheck", re.IGNORECASE)


class ProfilerLeftOn(Rule):
    """
    ## What it does
    Reports, outside test files, a call of a debugging API that slows every
    operation down: the legacy autograd profiler
    `torch.autograd.profiler.profile(...)`,
    `torch.autograd.profiler.emit_nvtx(...)`, and the gradient checkers
    `torch.autograd.gradcheck(...)` and `torch.autograd.gradgradcheck(...)`.
    It is reported at the call.

    Not reported (choices where the catalog is silent):
    - a profiler whose `enabled` argument is not the literal `True` or
      absent: `enabled=False`, or `enabled=args.profile`, a switch the user
      controls; a call with `**kwargs`, which may hide it;
    - a call inside an `if` whose test names a profiling or debugging switch
      (`if args.profile:`, `if cfg.debug:`, `if use_nvtx:`);
    - a call in a function, a class or a file whose purpose is profiling,
      benchmarking or checking (`def profile_step()`, `def check_grads()`,
      `class AutogradProfiler` (a hook that profiles the steps its user
      selects), `benchmark.py`, `profile_model.py`): there it is not "left
      on";
    - the modern `torch.profiler.profile` (use its `schedule=` to limit the
      profiled steps), and `record_function`, which is cheap when no
      profiler is running;
    - a reference that is not a call (`isinstance(p, profiler.profile)`).

    ## Why is this bad?
    The legacy autograd profiler records an event, with timestamps (and with
    `use_cuda=True`, CUDA events) for every operator; `emit_nvtx` pushes and
    pops an NVTX range around every operator; `gradcheck` and `gradgradcheck`
    run the function many times in double precision to compare numerical and
    analytical gradients. All are meant for a debugging session, and left in
    a training or inference script they slow every step down. The PyTorch
    Performance Tuning Guide lists them under "Disable debugging APIs".

    ## Example
    ```python
    import torch

    with torch.autograd.profiler.profile(use_cuda=True) as prof:
        train_one_epoch(model, loader, optimizer)
    ```

    ## Use instead
    ```python
    import torch

    with torch.autograd.profiler.profile(enabled=args.profile, use_cuda=True) as prof:
        train_one_epoch(model, loader, optimizer)
    ```
    Or profile a few steps with `torch.profiler.profile(schedule=...)`, and
    move gradient checks into tests.

    ## Fix safety
    No fix is offered: the profiler's result (`prof`) and the gradient
    check's return value are often used by the code that follows.

    ## References
    - PyTorch Performance Tuning Guide, "Disable debugging APIs"
    - PyTorch documentation, "Automatic differentiation package - torch.autograd", section "Profiler"
    """

    code = "TL507"
    name = "profiler-left-on"
    summary = "Legacy autograd profiler or gradient check left in non-test code"
    default = False
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            import torch
            with torch.autograd.profiler.profile(enabled=args.profile) as prof:
                step()
            """
        ),
        Valid(
            """
            import torch
            with torch.profiler.profile() as prof:
                step()
            """
        ),
        Valid(
            """
            import torch
            with torch.autograd.profiler.record_function('forward'):
                step()
            """
        ),
        Valid(
            """
            import torch
            if args.profile:
                with torch.autograd.profiler.emit_nvtx():
                    step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            with torch.autograd.profiler.profile(use_cuda=True) as prof:
                step()
            """,
        ),
        Invalid(
            """
            from torch.autograd import gradcheck
            ok = gradcheck(layer, (x,))
            """,
        ),
        Invalid(
            """
            import torch
            with torch.autograd.profiler.emit_nvtx():
                step()
            """,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        ctx = self.context
        self._off = ctx.is_test_file or bool(_PURPOSE.search(PurePath(ctx.path.replace("\\", "/")).stem))

    def visit_Call(self, node: cst.Call) -> None:
        if self._off:
            return
        func = node.func
        tail = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if tail not in _TAILS:
            return
        ctx = self.context
        api = _APIS.get(ctx.qualname(func) or "")
        if api is None:
            return
        label, has_enabled = api
        if has_enabled:
            known, arg = argument(node, "enabled", 0)
            if not known:  # `**kwargs` may hide it
                return
            if arg is not None and literal_bool(arg.value) is not True:
                return
        function = ctx.enclosing_function()
        if function is not None and _PURPOSE.search(function.name.value):
            return
        owner = ctx.enclosing_class()
        if owner is not None and _PURPOSE.search(owner.name.value):
            return
        if under_switch(ctx, _SWITCH):
            return
        if label.endswith("check"):
            message = (
                f"`{label}` evaluates the function many times in double precision to compare "
                "gradients, a debugging check that slows the program down; move it into a test"
            )
        else:
            message = (
                f"`{label}` instruments every autograd operator, a debugging aid that slows "
                "every step down; remove it, put it behind a switch (`enabled=args.profile`), or "
                "profile a few steps with `torch.profiler.profile(schedule=...)`"
            )
        self.report(node, message)
