from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Valid
from torchlint.rules._helpers import literal_bool
from torchlint.rules._program import (
    CUDNN_BENCHMARK,
    CUDNN_DETERMINISTIC,
    REPRODUCIBILITY_PURPOSE,
    REPRODUCIBILITY_SWITCH,
    USE_DETERMINISTIC,
    ProgramFacts,
    ProgramRule,
    in_scope_named,
    is_verification_path,
    function_restores,
    function_set_before,
    notebook_trains_nothing,
    other_branch_sets,
    under_switch,
)


class CudnnBenchmarkDisabled(ProgramRule):
    """
    ## What it does
    Reports two things, outside test files and benchmark scripts (`bench` in
    the file or a directory name):

    - an assignment of the literal `False` to `torch.backends.cudnn.benchmark`
      (also through `from torch.backends import cudnn` or
      `import torch.backends.cudnn as cudnn`), reported at the assignment;
    - a module that is a program's entry point (it has an
      `if __name__ == "__main__":` block, a top-level loop, `with` block or
      bare call such as `main()`, or is a notebook), uses CUDA (`.cuda()`,
      a `"cuda..."` device string, `torch.cuda.set_device(...)`, `cudnn`
      settings; `torch.cuda.is_available()` alone does not count), builds
      convolution layers
      (`nn.Conv1d/2d/3d`, `nn.ConvTranspose1d/2d/3d` and their `Lazy`
      variants), contains a training step (a function, or top-level code,
      that calls `backward()` and `optimizer.step()`), and never assigns
      `torch.backends.cudnn.benchmark` at all. This is reported once per
      module, at the `backward()` call of the first training step.

    Where the same function (or the module's top level) also turns on
    deterministic mode (`cudnn.deterministic = True`,
    `torch.use_deterministic_algorithms(True)`), the message speaks of the
    reproducibility trade-off.

    Not reported: an assignment of anything but the literal `False`
    (`cudnn.benchmark = args.benchmark` is the user's choice); one in a
    branch of an `if` whose other branch sets it to `True` (`if
    args.use_cudnn: ... = True` / `else: ... = False`: the user's switch); one
    in a function that sets it back to `True` later in its body (a validation
    pass over inputs of every length turns the autotuner off for itself
    only, MelGAN's `validate`); one after a statement of the same function
    that sets it to `True`, also under an `if` (the training ran with the
    autotuner, and the final test is run reproducibly: torchdistill's
    examples); an
    assignment inside an `if` whose test names a reproducibility switch (`if
    args.deterministic:`, `if args.seed is not None:`, `if cfg.fix_random:`), since the fast path is
    then the default; an assignment inside a function or class whose name says
    that reproducibility is its purpose (`enable_full_determinism()`,
    `make_reproducible()`, `class DeterministicEngine`): calling it is the
    switch (a seeding helper such as `set_seed()` is not one, since it runs in
    every run); an assignment in a notebook, or a script named for inference
    (`inference.py`, `test.py`, `demo.py`, a `demo/` or `eval/` directory),
    that trains nothing (no backward pass: a demo that loads a model and
    samples, seeded so that its pictures come out the same, or runs one image
    or utterance after another, of every size, where autotuning each new
    shape costs more than it saves; on the projects reviewed, all nine such
    findings were false positives: CRAFT, MiniGPT-4, VAR, flowtron, BigVGAN);
    an assignment in a conversion or
    verification script (a file named `convert_*`, `compare_*`, `verify_*` or
    `check_*`), which runs once
    and compares outputs with a reference; benchmark scripts (`bench` in the
    file or directory name, such as `benchmarks/` or `benchmark_fp32.py`),
    which measure one configuration on purpose; a module with a
    `cudnn_benchmark` switch; training steps
    driven by Accelerate, Lightning Fabric or `manual_backward` (the framework
    has its own option, e.g. `Trainer(benchmark=True)`); modules that only
    import their model from elsewhere (no convolution layer built here); the
    scoped `with torch.backends.cudnn.flags(benchmark=False):`; an assignment
    that carries a comment on its line or the line above (Open-Sora's
    `cudnn.benchmark = False  # True leads to slow down in conv3d`: a choice
    written down, often measured on the project's own shapes).

    The module check (never sets it) is also silent for a program whose every
    `DataLoader` loads in the main process (`num_workers` absent or `0`: its
    steps wait for data; TL203 reports those loaders), for one that imports a
    reinforcement-learning simulator (`gym`, `gymnasium`, `envpool`, `procgen`,
    `dm_control`, `torchrl.envs`, ...: the step time is the environment's, on the host, and the
    policy networks are small) or a Gaussian-splatting rasterizer
    (`diff_gaussian_rasterization`, `diff_surfel_rasterization`, `gsplat`: the
    step time is the rasterizer's own CUDA kernels) or MinkowskiEngine (its
    sparse convolutions are its own kernels, not cuDNN's) and for one that asks for reproducible kernels
    anywhere (`cudnn.deterministic = ...` or
    `torch.use_deterministic_algorithms(...)` with anything but the literal
    `False`, often `args.torch_deterministic`): the autotuner picks algorithms
    by timing them, so results change from run to run; and for one whose model
    is visibly tiny: a script or notebook that builds every layer itself with
    sizes written as numbers, under 1,000,000 weights in all and convolutions
    at most 32 channels out, and takes no model from elsewhere (the full test
    is in `docs/precision.md`, "a visibly tiny model"): a course notebook's
    linear regression or 2-10-10-1 MLP, whose steps are launch-bound.

    ## Why is this bad?
    With `benchmark = True`, cuDNN times the available convolution algorithms
    the first time it sees an input shape and caches the fastest; with
    `False` (the default) it picks one by heuristics, which is often slower.
    For a convolutional network with a fixed input size this is a free
    speed-up after the first iteration.

    Two trade-offs, which the message mentions where they apply:
    - **Variable input sizes.** The autotuner runs again for every new shape.
      When shapes change from batch to batch (variable-length sequences,
      multi-scale detection, a last batch of another size that recurs), the
      repeated tuning can cost more than it saves; leave it off there.
    - **Reproducibility.** The autotuner may pick a different algorithm from
      run to run, so bitwise-reproducible runs need `benchmark = False`
      together with `cudnn.deterministic = True` (see TL502). That is a
      deliberate trade of speed for reproducibility: keep it behind a switch
      that is off for normal training runs.

    The module-wide check is advice about the whole program. A setting made
    in another module of the run counts (the project index reads the
    top-level code of the modules this one imports, the functions it calls
    from them, and the modules that import it: a shared `setup()` helper); one
    made where the run cannot see it (an installed package, a configuration
    file) needs `# noqa: TL501` on the reported line.

    ## Example
    ```python
    import torch
    from torch import nn

    torch.backends.cudnn.benchmark = False
    model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()
    ```

    ## Use instead
    ```python
    import torch
    from torch import nn

    torch.backends.cudnn.benchmark = True  # fixed input size: let cuDNN pick
    model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU()).cuda()
    ```

    ## Fix safety
    No fix is offered: whether the autotuner helps depends on whether the
    input shapes are fixed, and turning it on changes which algorithm runs
    (and so the low-order bits of the results) from run to run.

    ## References
    - PyTorch Performance Tuning Guide, "Enable cuDNN auto-tuner"
    - PyTorch documentation, "Reproducibility", section "cuDNN"
    """

    code = "TL501"
    name = "cudnn-benchmark-disabled"
    summary = "cuDNN autotuner disabled (or never enabled) for a convolutional network"
    default = False
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            import gym
            import torch
            from torch import nn

            model = nn.Conv2d(3, 64, 3).cuda()
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            model = nn.Conv2d(3, 64, 3).cuda()
            torch.use_deterministic_algorithms(args.deterministic)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            torch.backends.cudnn.benchmark = True
            """
        ),
        Valid(
            """
            import torch
            torch.backends.cudnn.benchmark = args.cudnn_benchmark
            """
        ),
        Valid(
            """
            import torch
            if args.deterministic:
                torch.backends.cudnn.benchmark = False
            """
        ),
        Valid(
            """
            import torch
            from torch import nn

            model = nn.Conv2d(3, 64, 3).cuda()
            torch.backends.cudnn.benchmark = True
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            torch.backends.cudnn.benchmark = False
            """,
        ),
        Invalid(
            """
            from torch.backends import cudnn
            cudnn.deterministic = True
            cudnn.benchmark = False
            """,
        ),
        Invalid(
            """
            import torch
            from torch import nn

            model = nn.Conv2d(3, 64, 3).cuda()
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        # `benchmark = False` assignments, with the function they are in; the
        # functions (None: the module's top level) that turn deterministic mode on.
        self._disabled: List[Tuple[cst.Assign, Optional[int]]] = []
        self._deterministic: Set[Optional[int]] = set()

    def _scope(self) -> Optional[int]:
        function = self.context.enclosing_function()
        return id(function) if function is not None else None

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        if self._off:
            return
        qualname = self.context.qualname
        for target in node.targets:
            q = qualname(target.target)
            if q == CUDNN_BENCHMARK:
                if (
                    literal_bool(node.value) is False
                    and not under_switch(self.context, REPRODUCIBILITY_SWITCH)
                    and not in_scope_named(self.context, REPRODUCIBILITY_PURPOSE)
                    and not is_verification_path(self.context.path)
                    and not notebook_trains_nothing(self.context)
                    and not other_branch_sets(self.context, CUDNN_BENCHMARK, True)  # a user's switch
                    and not function_restores(self.context, CUDNN_BENCHMARK, True)  # off for one pass only
                    and not function_set_before(self.context, CUDNN_BENCHMARK, True)  # on for training, off after
                    and not _explained(self.context)  # `= False  # True leads to slow down in conv3d`
                ):
                    self._disabled.append((node, self._scope()))
            elif q == CUDNN_DETERMINISTIC and literal_bool(node.value) is True:
                self._deterministic.add(self._scope())

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        if not self._off and node.args and self.context.qualname(node.func) in USE_DETERMINISTIC:
            if literal_bool(node.args[0].value) is True:
                self._deterministic.add(self._scope())

    def decide(self, facts: ProgramFacts) -> None:
        for node, scope in self._disabled:
            if scope in self._deterministic:
                message = (
                    "`cudnn.benchmark = False` (here paired with deterministic mode for "
                    "reproducibility) turns off cuDNN's autotuner, so convolutions run a "
                    "heuristically chosen algorithm instead of the fastest one for their shapes; "
                    "keep reproducible mode behind a switch that is off for normal training runs, "
                    "and set `benchmark = True` there when input shapes are fixed"
                )
            else:
                message = (
                    "`cudnn.benchmark = False` turns off cuDNN's autotuner, so convolutions run a "
                    "heuristically chosen algorithm instead of the fastest one for their shapes; "
                    "set it to `True` when input shapes are fixed (leave it off for inputs whose "
                    "size changes from batch to batch)"
                )
            self.report(node, message)
        if facts.benchmark_set or not (facts.has_conv and facts.entry and facts.uses_cuda):
            return
        if facts.quiet_reason():
            return  # input- or simulator-bound, or a program that chose reproducible kernels
        self.report_at_first_step(
            facts,
            "this program trains a convolutional network but never sets "
            "`torch.backends.cudnn.benchmark = True`, so cuDNN picks convolution algorithms by "
            "heuristics instead of timing the fastest one for each input shape; set it once at "
            "start-up when input shapes are fixed (not for inputs whose size varies)",
        )


def _explained(ctx) -> bool:
    """Whether the statement being visited carries a comment, on its line or
    on the line above (``cudnn.benchmark = False  # True leads to slow down in
    conv3d``): a choice the author made and wrote down, often measured."""
    for node in reversed(ctx.stack):
        if type(node) is cst.SimpleStatementLine:
            if node.trailing_whitespace.comment is not None:
                return True
            return bool(node.leading_lines) and node.leading_lines[-1].comment is not None
    return False
