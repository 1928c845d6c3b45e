from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods import calls, statements
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.nodes import walk_nodes
from torchlint.rules._helpers import argument, literal_bool, literal_number, method_name
from torchlint.rules._training import grad_none_test, is_grad, is_parameter_iterable, uses_grad_after


class ZeroGradSetToNone(Rule):
    """
    ## What it does
    Reports gradients that are zeroed by writing zeros instead of being reset to
    `None`: `zero_grad(set_to_none=False)`, a bare `zero_grad()` when the
    configured `target-torch` is below 2.0 (where `set_to_none` defaulted to
    `False`), and manual zeroing in a loop over parameters (`p.grad.zero_()`,
    `p.grad.data.zero_()`, `p.grad.fill_(0)`, `p.grad = torch.zeros_like(p)`).

    ## Why is this bad?
    Zeroing runs a memset kernel over every gradient on every step, and the next
    backward pass then reads those zeros back to accumulate into them. Setting
    the gradients to `None` skips the memset and lets backward write the
    gradient with a plain assignment, saving a full pass over the gradient
    memory each step. Since PyTorch 2.0 `zero_grad()` does this by default.

    Measured with `torchlint verify --rules TL301` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 6.42 ms before,
    5.67 ms after, **1.13x**. The memset over every gradient is skipped even on a
    CPU. Run the same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)  # the default since torch 2.0
        loss_fn(model(x), y).backward()
        optimizer.step()
    ```

    ## Fix safety
    The fix is unsafe: after it, a gradient is `None` rather than a tensor of
    zeros until the next backward pass, so code that reads `.grad` in between
    (gradient logging, a custom all-reduce, `p.grad.add_(...)` into a
    pre-allocated buffer, a parameter that received no gradient) can fail or
    behave differently. Optimizers also skip parameters whose gradient is
    `None`, which differs from stepping on zeros for optimizers with momentum or
    weight decay.

    Not reported, because the code evidently needs gradients to be tensors:
    implementations of `zero_grad` itself (a function named `zero_grad`, or a
    branch on `set_to_none`), gradients initialised in `__init__` or created
    where they are missing (`if p.grad is None: p.grad = torch.zeros_like(p)`,
    as optimizers do before reading them), a loop that reads `p.grad` after
    zeroing it, and any
    module that writes into gradients in place (`p.grad += g`,
    `p.grad.add_(g)`, `p.grad.copy_(g)`), as parameter servers and manual
    gradient accumulation do, or that flattens the gradients into one buffer
    (`torch.cat([p.grad.flatten() for p in params])`, StyleGAN-style
    training loops, then one all-reduce of the buffer: with gradients set to
    `None`, a parameter that received none on one process would drop out of
    its buffer there, and the processes' buffers would no longer match).

    Test files (`test_*.py`, `*_test.py`, `conftest.py`, `tests/`) are not
    checked either: a test calls `zero_grad(set_to_none=False)` to check that
    the argument is passed on, or zeroes gradients to compare them with
    expected values, and runs a handful of steps where the memory pass costs
    nothing.

    ## References
    - PyTorch Performance Tuning Guide, "Use parameter.grad = None instead of model.zero_grad() or optimizer.zero_grad()"
    - `torch.optim.Optimizer.zero_grad` documentation
    """

    code = "TL301"
    name = "zero-grad-set-to-none"
    summary = "Gradients zeroed in place instead of set to None"
    fix = FixAvailability.UNSAFE
    needs = ("zero_", "fill_")

    VALID = [
        Valid(
            """
            import torch
            opt = torch.optim.SGD([], lr=0.1)
            opt.zero_grad()
            """
        ),
        Valid(
            """
            import torch
            opt.zero_grad(set_to_none=True)
            """
        ),
        Valid(
            """
            import torch
            for p in model.parameters():
                p.grad = None
            """
        ),
        Valid(
            """
            import torch
            for b in buffers:
                b.grad.zero_()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            opt.zero_grad(set_to_none=False)
            """,
            expected_fix="""
            import torch
            opt.zero_grad(set_to_none=True)
            """,
        ),
        Invalid(
            """
            import torch
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.zero_()
            """,
            expected_fix="""
            import torch
            for p in model.parameters():
                if p.grad is not None:
                    p.grad = None
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="training steps with `zero_grad(set_to_none=False)` vs `set_to_none=True`",
        before="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(32, 512, device=device)
            targets = torch.randint(0, 10, (32,), device=device)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
            ).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


            def run():
                for _ in range(4):
                    optimizer.zero_grad(set_to_none=False)
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
                for _ in range(4):
                    optimizer.zero_grad(set_to_none=True)
                    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                return loss.detach()
            """,
        comparison="values (plain SGD: stepping on zeroed and on fresh gradients gives the same weights)",
    )

    _MESSAGE = (
        "{what} fills every gradient with zeros each step; {instead} to skip "
        "that memory pass (the next backward writes the gradient directly)"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._pending: list = []
        self._writes_into_grad = False
        self._off = context.is_test_file

    def _defer(self, node: cst.CSTNode, message: str, *, fix: Optional[Fix] = None) -> None:
        # Held until the end of the module: a module that writes into
        # gradients in place needs them to be tensors, and is not reported.
        self._pending.append((node, message, fix))

    def leave_Module(self, node: cst.Module) -> None:
        if not self._writes_into_grad and not self._off:
            for pending_node, message, fix in self._pending:
                self.report(pending_node, message, fix=fix)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if is_grad(node.target):
            self._writes_into_grad = True

    def visit_Call(self, node: cst.Call) -> None:
        if self._off:
            return
        name = method_name(node)
        if name == "zero_grad":
            self._zero_grad_call(node)
        elif name in ("zero_", "fill_"):
            self._manual_zeroing_call(node, name)
        elif name in ("add_", "copy_") and is_grad(node.func.value):
            self._writes_into_grad = True
        elif name == "cat" and any(is_grad(n) for n in walk_nodes(node) if type(n) is cst.Attribute):
            self._writes_into_grad = True  # every gradient flattened into one buffer (for an all-reduce of its own)

    def _zero_grad_call(self, node: cst.Call) -> None:
        known, arg = argument(node, "set_to_none", 0)
        if not known:
            return
        if arg is not None:
            if literal_bool(arg.value) is not False:
                return
            what = "`zero_grad(set_to_none=False)`"
        elif self.context.target_torch < (2, 0):
            what = "`zero_grad()` on torch < 2.0 (the configured `target-torch`)"
        else:
            return
        self._defer(
            node,
            self._MESSAGE.format(what=what, instead="pass `set_to_none=True`"),
            fix=Fix(
                Applicability.UNSAFE,
                "Pass `set_to_none=True`",
                lambda: calls.set_keyword(node, "set_to_none", "True", arg),
            ),
        )

    def _manual_zeroing_call(self, node: cst.Call, name: str) -> None:
        if name == "zero_" and node.args:
            return
        if name == "fill_":
            if len(node.args) != 1 or node.args[0].keyword is not None:
                return
            if literal_number(node.args[0].value) != 0:
                return
        func = node.func
        assert isinstance(func, cst.Attribute)
        grad = func.value
        if isinstance(grad, cst.Attribute) and grad.attr.value == "data":
            grad = grad.value
        param = self._grad_of_loop_parameter(grad)
        if param is None:
            return
        parent = self.context.parent
        fix = None
        if isinstance(parent, cst.Expr) and parent.value is node:
            target = grad
            fix = Fix(
                Applicability.UNSAFE,
                f"Set `{param}.grad = None`",
                lambda: statements.assign(target, "None"),
                target=parent,
            )
        self._defer(
            node,
            self._MESSAGE.format(
                what=f"`{param}.grad.{'data.' if grad is not func.value else ''}{name}({'0' if name == 'fill_' else ''})`",
                instead=f"set `{param}.grad = None`",
            ),
            fix=fix,
        )

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._off or len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return
        if self.context.qualname(node.value.func) not in ("torch.zeros_like",):
            return
        param = self._grad_of_loop_parameter(node.targets[0].target)
        if param is None:
            return
        self._defer(
            node,
            self._MESSAGE.format(
                what=f"`{param}.grad = torch.zeros_like(...)`", instead=f"set `{param}.grad = None`"
            ),
            fix=Fix(
                Applicability.UNSAFE,
                f"Set `{param}.grad = None`",
                lambda: statements.set_value(node, "None"),
            ),
        )

    # -- helpers -------------------------------------------------------------
    def _grad_of_loop_parameter(self, expr: cst.BaseExpression) -> Optional[str]:
        """``p`` when ``expr`` is ``p.grad`` and ``p`` iterates over parameters."""
        if not (isinstance(expr, cst.Attribute) and expr.attr.value == "grad"):
            return None
        if not isinstance(expr.value, cst.Name):
            return None
        param = expr.value.value
        ctx = self.context
        function = ctx.enclosing_function()
        if function is not None and (
            "zero_grad" in function.name.value or function.name.value == "__init__"
        ):
            return None  # an implementation of zero_grad, or initialisation
        loop = ctx.enclosing_loop(periodic_guard=False)
        if not isinstance(loop, cst.For) or param not in _target_names(loop.target):
            return None
        if not is_parameter_iterable(loop.iter):
            return None
        for ancestor in ctx.ancestors():
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and _mentions(ancestor.test, "set_to_none"):
                return None
            if isinstance(ancestor, cst.If) and grad_none_test(ancestor.test, param, cst.Is):
                return None  # `if p.grad is None: p.grad = zeros`: creating a missing gradient
        if uses_grad_after(loop, param, expr):
            return None  # the loop goes on to use the zeroed gradient as a tensor
        return param


def _target_names(target: cst.BaseExpression) -> set:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        names = set()
        for element in target.elements:
            names |= _target_names(element.value)
        return names
    return set()


def _mentions(expr: cst.BaseExpression, name: str) -> bool:
    from torchlint.nodes import walk_nodes

    return any(
        (isinstance(n, cst.Name) and n.value == name)
        or (isinstance(n, cst.Attribute) and n.attr.value == name)
        for n in walk_nodes(expr)
    )
