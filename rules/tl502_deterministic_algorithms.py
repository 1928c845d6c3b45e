from __future__ import annotations

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import argument, literal_bool
from torchlint.rules._program import (
    CUDNN_BENCHMARK,
    CUDNN_DETERMINISTIC,
    REPRODUCIBILITY_PURPOSE,
    REPRODUCIBILITY_SWITCH,
    USE_DETERMINISTIC,
    function_set_before,
    in_scope_named,
    in_self_test,
    is_benchmark_path,
    runs_no_convolution,
    is_verification_path,
    notebook_trains_nothing,
    under_switch,
)


class DeterministicAlgorithms(Rule):
    """
    ## What it does
    Reports, outside test files, `torch.use_deterministic_algorithms(True)`
    (the older `torch.set_deterministic(True)` too) at the call, and an
    assignment of the literal `True` to `torch.backends.cudnn.deterministic`
    (also through `from torch.backends import cudnn`) at the assignment.

    Not reported:
    - a value that is not the literal `True` (`use_deterministic_algorithms(
      args.deterministic)` is a switch the user controls), or `False`;
    - a call or assignment inside an `if` whose test names a
      reproducibility switch (`if args.deterministic:`, `if seed is not
      None:`, `if cfg.reproducible:`): deterministic mode is then opt-in at
      run time and the fast path is the default;
    - a call or assignment inside a function or class whose name says that
      reproducibility is its purpose (`enable_full_determinism()`,
      `make_reproducible()`, `class DeterministicEngine`): calling it is the
      switch. A seeding helper (`seed_everything()`, `set_seed()`) is not one:
      it runs at the start of every run, so determinism hidden in it is
      always on;
    - test files, which legitimately ask for determinism to compare results;
      notebooks, and scripts named for inference (`inference.py`,
      `demo.py`, a `demo/` directory), that train nothing (no backward pass:
      a demo that loads a model and samples, seeded so that its pictures come
      out the same);
      a model module's self-test (an `if __name__ == "__main__":` block
      with no loop, in a file with no backward pass, that runs the model
      once on a dummy input);
      benchmark scripts (`bench` in the file or directory name), which
      measure one configuration on purpose, often comparing results between
      runs; and conversion or verification scripts (a file named
      `convert_*`, `compare_*`, `verify_*` or `check_*`), which run once and
      compare a model's outputs with a reference, bit for bit;
    - `with torch.backends.cudnn.flags(deterministic=True):`, a scoped
      setting used almost only in tests;
    - `cudnn.deterministic = True` after a statement of the same function
      that sets `cudnn.benchmark = True` (also under an `if`): the training
      ran with the fast kernels, and the final test is run reproducibly
      (torchdistill's examples);
    - `cudnn.deterministic = True` in a program that visibly has no
      convolution: it defines its own `nn.Module` models, never mentions a
      convolution (`Conv1d`/`Conv2d`/`conv2d`...), and imports only the
      standard library, torch and data, text or plotting libraries (no model
      zoo such as timm or torchvision's models, whose datasets, transforms and
      utils are data; no module of its own project), or is a
      text program (it uses a tokenizer from Hugging Face `transformers`,
      never says `conv` or `cnn`, and names no image, video, audio or vision
      model: a BERT or RoBERTa fine-tuning script): the flag restricts only
      cuDNN's convolution algorithms, so in an LSTM or Transformer program it
      changes nothing. (A text program whose own model module, imported from
      the project, holds a convolution without the script naming one is
      missed; the script is the one place the rule reads.)

    ## Why is this bad?
    Deterministic mode makes PyTorch choose, for every operation that has
    one, an algorithm that gives bitwise-identical results from run to run,
    and raise an error for operations that have none. Those algorithms are
    often slower: deterministic cuDNN convolutions exclude the fastest
    algorithms, and scatter/index operations that normally use atomic adds on
    the GPU fall back to slower sorted or serial implementations. The PyTorch
    Performance Tuning Guide lists it among the debugging settings to turn off
    for training runs. Reproducibility is a legitimate need; the advice is to
    enable it only in the runs that need it.

    ## Example
    ```python
    import torch

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    ```

    ## Use instead
    ```python
    import torch

    torch.manual_seed(0)
    if args.deterministic:  # only for runs that must be bitwise reproducible
        torch.use_deterministic_algorithms(True)
    ```

    ## Fix safety
    No fix is offered: removing deterministic mode changes results from run
    to run, which is exactly what the code asked not to happen.

    ## References
    - PyTorch documentation, "Reproducibility", sections "Avoiding nondeterministic algorithms" and "cuDNN"
    - PyTorch Performance Tuning Guide, "Disable debugging APIs" (the same advice for the other debugging settings) and "Enable cuDNN auto-tuner"
    - `torch.use_deterministic_algorithms` documentation
    """

    code = "TL502"
    name = "deterministic-algorithms"
    summary = "Deterministic algorithms forced on: slower kernels in every run"
    default = False
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            import torch
            torch.use_deterministic_algorithms(args.deterministic)
            """
        ),
        Valid(
            """
            import torch
            if args.deterministic:
                torch.use_deterministic_algorithms(True)
            """
        ),
        Valid(
            """
            import torch
            torch.backends.cudnn.deterministic = False
            """
        ),
        Valid(
            """
            import torch
            if args.seed is not None:
                torch.backends.cudnn.deterministic = True
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            torch.use_deterministic_algorithms(True)
            """,
        ),
        Invalid(
            """
            import torch
            torch.backends.cudnn.deterministic = True
            """,
        ),
        Invalid(
            """
            from torch.backends import cudnn
            def set_seed(seed):
                cudnn.deterministic = True
            """,
        ),
    ]

    def __init__(self, context) -> None:
        super().__init__(context)
        path = context.path
        self._off = (context.is_test_file or is_benchmark_path(path) or is_verification_path(path)
                     or notebook_trains_nothing(context))

    def _switched(self) -> bool:
        return under_switch(self.context, REPRODUCIBILITY_SWITCH) or in_scope_named(
            self.context, REPRODUCIBILITY_PURPOSE
        ) or in_self_test(self.context)

    def visit_Call(self, node: cst.Call) -> None:
        if self._off or not node.args:
            return
        if self.context.qualname(node.func) not in USE_DETERMINISTIC:
            return
        known, arg = argument(node, "mode", 0)
        if not known or arg is None or literal_bool(arg.value) is not True:
            return
        if self._switched():
            return
        self.report(
            node,
            "`use_deterministic_algorithms(True)` forces slower deterministic kernels (and errors "
            "for operations without one) in every run; enable it only behind a switch for the "
            "runs that must be bitwise reproducible",
        )

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._off or literal_bool(node.value) is not True:
            return
        if not any(self.context.qualname(t.target) == CUDNN_DETERMINISTIC for t in node.targets):
            return
        if self._switched() or runs_no_convolution(self.context.source):
            return  # (the flag restricts only convolution algorithms)
        if function_set_before(self.context, CUDNN_BENCHMARK, True):
            return  # the training ran with the autotuner; this switches for what follows (a final test)
        self.report(
            node,
            "`cudnn.deterministic = True` restricts cuDNN to deterministic convolution algorithms, "
            "which are often slower, in every run; set it only behind a switch for the runs "
            "that must be bitwise reproducible",
        )
