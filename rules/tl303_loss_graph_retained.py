from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.names import dotted_name
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._accumulation import (
    accumulation,
    accumulator_key,
    detached_names,
    kept_occurrence,
    mentions_key,
    names_flowing_into,
    target_keys,
)
from torchlint.rules._helpers import keyword, method_name, positional, receiver
from torchlint.rules._training import (
    backward_loss, backward_keeps_graph, in_grad_off_block, is_backward, is_optimizer_step,
)

_LOOPS = (cst.For, cst.While)


class _Scope:
    """What one function (or the module's top level) does, for the decision at its end."""

    __slots__ = ("losses", "backpropagated", "assignments", "accumulations", "retained", "bindings", "resets",
                 "assigned_in_loops", "stepping")

    def __init__(self) -> None:
        # loops whose backward call keeps the graph (`retain_graph=`, `create_graph=`)
        self.retained: Set[int] = set()
        # (name, whether the new value is arithmetic on the old one) for every
        # binding of a name in the function: `loss = f(x)`, `loss /= n`, `for loss in ...`
        self.bindings: List[Tuple[str, bool]] = []
        # loop -> the loss expressions (dotted names) backpropagated in it
        self.losses: Dict[int, Set[str]] = {}
        # expressions handed to backward()/autograd.grad(), in full
        self.backpropagated: List[cst.BaseExpression] = []
        # (target, value) of every assignment, examined only when needed
        self.assignments: List[Tuple[cst.BaseExpression, cst.BaseExpression]] = []
        # (loop, accumulator key, accumulator as written, accumulated expression)
        self.accumulations: List[Tuple[cst.CSTNode, str, cst.BaseExpression, cst.BaseExpression]] = []
        # accumulator key -> ids of the loops around a statement that starts it afresh
        # (`running_loss = 0`, `losses = []`, `losses.clear()`)
        self.resets: Dict[str, Set[int]] = {}
        # Assignments in a loop that may start an accumulator afresh: (key, value,
        # ids of the loops around it); whether the value reads the key is only
        # asked for the few keys that turn out to be accumulators.
        self.assigned_in_loops: List[Tuple[str, cst.BaseExpression, Tuple[int, ...]]] = []
        # ids of the loops whose own body (not an inner loop) steps an optimizer
        self.stepping: Set[int] = set()


class LossGraphRetained(Rule):
    """
    ## What it does
    Reports a loss tensor accumulated across the iterations of a training loop
    with its autograd graph attached. In a `for`/`while` loop that calls
    `<loss>.backward()` (also `(loss / n).backward()`,
    `scaler.scale(loss).backward()`, `accelerator.backward(loss)`...), it
    reports the same loss (the same name, e.g. `loss` or `outputs.loss`)
    when it is accumulated in that loop:

    - `acc += <expr>`, `acc = acc + <expr>` (or `<expr> + acc`),
    - `acc_list.append(<expr>)`,

    where `<expr>` is the loss itself or arithmetic on it (`loss * x.size(0)`,
    `loss / n`, `-loss`), or a tuple, list or dict holding it
    (`history.append((step, loss))`). The report is at the loss inside the
    accumulated expression, e.g. the `loss` of `epoch_loss += loss * n`.
    "In that loop" means in the body of the innermost `for`/`while` around
    the backward call, before or after it, including under a periodic guard
    such as `if step % 100 == 0:` (one graph kept every 100 steps still
    grows without bound).

    Not reported: a detached or converted value (`loss.item()`,
    `loss.detach()`, `float(loss)`; `.item()` in a loop is TL101's business);
    an accumulator that is itself backpropagated later in the same function
    (`total.backward()`, `torch.stack(losses).sum().backward()`, also through
    intermediate assignments such as `total = sum(losses)`); an accumulation
    under `torch.no_grad()`/`inference_mode()` (no graph is recorded); a loss
    name that is assigned a detached value anywhere in the function
    (`loss = loss.item()`, also element by element in a tuple assignment:
    `loss, l1 = loss.item(), l1.item()`), since the name may then hold a
    number; a different
    name (`acc += ce_loss` while `loss = ce_loss + aux` is backpropagated: it
    also holds the graph, but the rule only follows the backpropagated name);
    accumulations in a different loop than the backward call (e.g. an
    epoch loop appending the last batch's loss); and an accumulator that is
    started afresh inside that loop (`running_loss = 0` after each optimizer
    step of a gradient-accumulation loop, `losses = []`, `losses.clear()`):
    it then holds the graphs of a few micro-batches at most, whose saved
    tensors `backward()` has already freed, so nothing grows. The same holds
    for an accumulator started afresh in a loop around that one whose own
    body steps the optimizer (`loss_of_subnets = []`, then a loop that
    backpropagates one sampled subnet after another, then
    `optimizer.step()`: once-for-all's progressive shrinking); started
    afresh in an epoch loop, it keeps every step of the epoch and is
    reported.

    ## Why is this bad?
    A loss tensor references the autograd graph that produced it. Adding it to
    a running total (`total_loss += loss`) makes the total a tensor whose own
    graph links every step's graph, and appending it to a list keeps each
    step's graph reachable, so nothing of those graphs can be freed until the
    accumulator goes away: memory grows with every iteration, and every
    accumulation records one more autograd node. The PyTorch FAQ's first
    advice for out-of-memory errors is exactly this: "Don't accumulate history
    across your training loop".

    Measured with `torchlint verify --rules TL303` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 5.69 ms before,
    5.69 ms after, **1.00x**. What the fix saves is memory (every step's graph stays
    alive as long as the accumulator), not time; the benchmark checks that both
    versions compute the same total. Run the same command on a GPU machine for the
    figure that matters there.

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.detach()  # no graph, and no host-device sync
    ```

    ## Fix safety
    The fix replaces the accumulated loss by `loss.detach()`. It is safe when
    the rule can show that the accumulated name holds the very tensor that
    was backpropagated, and that its graph is not kept for later use:
    - `detach()` returns a tensor with the same values, dtype, device and
      storage, only without autograd history, so every number read from the
      accumulator (`.item()`, `float()`, printing, dividing by the step count)
      is the same;
    - the history could only be used by a backward pass through the
      accumulator; the rule checks that none happens in the function (it is
      then not reported), and the loop's own `backward()` call, given no
      `retain_graph=`/`create_graph=`, frees the saved tensors of each
      step's graph, so a later backward through the accumulator elsewhere
      (after it is returned, or from an attribute) would already have
      raised "Trying to backward through the graph a second time" (checked
      with torch 2.13 for `m(x).pow(2).mean()` and even `(w * 2).sum()`).
      The one exception is a graph that saves no tensor at all, such as
      `(w + 1).sum()`, a loss with a constant gradient, which no training
      loop minimises; for it a second backward through the accumulator
      outside the function would find no gradient after the fix. What
      still changes is the accumulator's autograd metadata
      (`requires_grad` is False, `grad_fn` is None), and code that raised
      because of it (`.numpy()` on a tensor that requires grad) now works;
    - `detach()` is preferred to `.item()`/`float()`, which would block the
      host until the device has finished, every iteration.

    The fix is unsafe when:
    - the loop's backward call keeps the graph (`retain_graph=` or
      `create_graph=` anything but `False`, given by position, or hidden in
      `**kwargs`): a second backward through the accumulator may be the
      point, and it would then miss those steps' gradients;
    - the loss name (or the object it is an attribute of, `outputs` in
      `outputs.loss`) is bound more than once in the function other than by
      arithmetic on itself (`loss = loss / n`, `loss /= n` keep a tensor a
      tensor): at the accumulation it may hold something else, such as a
      number from a meter, which has no `.detach()` (the fixed code would
      raise `AttributeError`); a parameter of the same name counts as a
      binding.

    ## References
    - PyTorch documentation, "Frequently Asked Questions", section "My model
      reports 'cuda runtime error(2): out of memory'": "Don't accumulate
      history across your training loop"
    - PyTorch documentation, "Autograd mechanics"
    - PyTorch Performance Tuning Guide, "Avoid unnecessary CPU-GPU
      synchronization" (why `detach()` rather than `.item()`)
    """

    code = "TL303"
    name = "loss-graph-retained"
    summary = "A backpropagated loss accumulated with its autograd graph keeps every step's graph alive"
    fix = FixAvailability.SOMETIMES_SAFE
    needs = ("backward", "grad(")

    VALID = [
        Valid(
            """
            import torch
            total = 0.0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss.item()
            """
        ),
        Valid(
            """
            import torch
            total = 0.0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss.detach()
            """
        ),
        Valid(
            """
            import torch
            losses = []
            for x in loader:
                loss = model(x)
                loss.backward()
                losses.append(float(loss))
            """
        ),
        Valid(
            """
            import torch
            total = 0.0
            for x in loader:
                loss = model(x)
                total += loss
            total.backward()
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                loss = model(x)
                loss.backward()
                with torch.no_grad():
                    running += loss
            """
        ),
        # Gradient accumulation whose running loss is started afresh at every optimizer step.
        Valid(
            """
            import torch
            running = 0
            for i, x in enumerate(loader):
                loss = model(x)
                running += loss
                loss.backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    log(running)
                    running = 0
            """
        ),
        Valid(
            """
            import torch
            losses = []
            for i, x in enumerate(loader):
                loss = model(x)
                loss.backward()
                losses.append(loss)
                if len(losses) == 8:
                    report(losses)
                    losses.clear()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            total = 0.0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss
            """,
            expected_fix="""
            import torch
            total = 0.0
            for x in loader:
                loss = model(x)
                loss.backward()
                total += loss.detach()
            """,
        ),
        Invalid(
            """
            import torch
            losses = []
            for x in loader:
                loss = model(x)
                (loss / 4).backward()
                losses.append(loss)
            """,
            expected_fix="""
            import torch
            losses = []
            for x in loader:
                loss = model(x)
                (loss / 4).backward()
                losses.append(loss.detach())
            """,
        ),
        Invalid(
            """
            import torch
            epoch_loss = 0
            for x, y in loader:
                loss = model(x)
                loss.backward()
                epoch_loss = epoch_loss + loss * x.size(0)
            """,
            expected_fix="""
            import torch
            epoch_loss = 0
            for x, y in loader:
                loss = model(x)
                loss.backward()
                epoch_loss = epoch_loss + loss.detach() * x.size(0)
            """,
        ),
        # Started afresh once per epoch only: every step of the epoch is kept.
        Invalid(
            """
            import torch
            for epoch in range(9):
                total = 0.0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    total += loss
            """,
            expected_fix="""
            import torch
            for epoch in range(9):
                total = 0.0
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    total += loss.detach()
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="accumulating the loss tensor (keeping every graph) vs `loss.detach()`",
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
                total = 0.0
                for _ in range(4):
                    optimizer.zero_grad()
                    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                    total += loss
                return total
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
                total = 0.0
                for _ in range(4):
                    optimizer.zero_grad()
                    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                    loss.backward()
                    optimizer.step()
                    total += loss.detach()
                return total
            """,
        comparison="values (the accumulated losses; the original's result also carries a graph, ignored)",
    )

    _MESSAGE = (
        "`{loss}` is accumulated into `{acc}` with its autograd graph, which keeps every "
        "step's graph alive (memory grows each iteration, the PyTorch FAQ's \"don't "
        "accumulate history across your training loop\"); accumulate `{loss}.detach()` instead"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._scopes: List[_Scope] = [_Scope()]

    # -- scopes ------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        scope = _Scope()
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            scope.bindings.append((param.name.value, False))
        self._scopes.append(scope)

    def visit_For(self, node: cst.For) -> None:
        self._rebind(node.target, None)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._rebind(node.target, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._rebind(node.asname.name, None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._rebind(node.target, None)

    def _rebind(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression]) -> None:
        """Record a binding of every name in ``target`` (``value``: what is assigned)."""
        for key in target_keys(target):
            arithmetic = isinstance(value, (cst.BinaryOperation, cst.UnaryOperation)) and (
                kept_occurrence(value, {key}) is not None
            )
            self._scopes[-1].bindings.append((key, arithmetic))

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._decide(self._scopes.pop())

    def leave_Module(self, node: cst.Module) -> None:
        self._decide(self._scopes[0])

    # -- collection ------------------------------------------------------------
    def _loop(self) -> Optional[cst.CSTNode]:
        loop = self.context.enclosing_loop(periodic_guard=False)
        return loop if isinstance(loop, _LOOPS) else None

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.context
        scope = self._scopes[-1]
        if is_backward(node, ctx):
            for arg in (receiver(node), *(a.value for a in node.args)):
                if arg is not None:
                    scope.backpropagated.append(arg)
            loss = backward_loss(node, ctx)
            key = dotted_name(loss) if loss is not None else None
            loop = self._loop()
            if key is not None and loop is not None:
                scope.losses.setdefault(id(loop), set()).add(key)
                if backward_keeps_graph(node):
                    scope.retained.add(id(loop))
            return
        if is_optimizer_step(node):
            loop = self._loop()
            if loop is not None:
                scope.stepping.add(id(loop))
        name = method_name(node)
        if name == "clear" and not node.args:
            self._record_reset(accumulator_key(receiver(node)))
            return
        if name == "append":
            self._record_accumulation(node)
            return
        if name == "grad" or name is None:
            q = ctx.qualname(node.func)
            if q in ("torch.autograd.grad", "torch.autograd.backward"):
                outputs = keyword(node, "outputs") or keyword(node, "tensors")
                if outputs is None:
                    args = positional(node)
                    outputs = args[0] if args else None
                if outputs is not None:
                    scope.backpropagated.append(outputs.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for key in target_keys(node.target):
            self._scopes[-1].bindings.append((key, True))  # `loss /= n` keeps a tensor a tensor
        self._record_accumulation(node)

    def _record_accumulation(self, node: cst.CSTNode) -> None:
        """``acc += x``, ``acc = acc + x``, ``acc.append(x)`` in a loop, with gradients on."""
        found = accumulation(node)
        loop = self._loop() if found is not None else None
        if loop is not None and not in_grad_off_block(self.context):
            self._scopes[-1].accumulations.append((loop, *found))  # type: ignore[misc]

    def _record_reset(self, acc: Optional[str]) -> None:
        if acc is None:
            return
        loops = self.context.enclosing_loops(periodic_guard=False)
        self._scopes[-1].resets.setdefault(acc, set()).update(id(loop) for loop in loops)

    def visit_Assign(self, node: cst.Assign) -> None:
        scope = self._scopes[-1]
        for target in node.targets:
            scope.assignments.append((target.target, node.value))
            self._rebind(target.target, node.value)
            key = accumulator_key(target.target)
            if key is not None:
                loops = tuple(id(loop) for loop in self.context.enclosing_loops(periodic_guard=False))
                if loops:
                    scope.assigned_in_loops.append((key, node.value, loops))
        self._record_accumulation(node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._scopes[-1].assignments.append((node.target, node.value))
            self._rebind(node.target, node.value)

    # -- decision ----------------------------------------------------------------
    def _decide(self, scope: _Scope) -> None:
        if not scope.losses or not scope.accumulations:
            return
        candidates = []
        for loop, acc, written, added in scope.accumulations:
            keys = scope.losses.get(id(loop))
            if not keys:
                continue
            fresh = {id(loop)} | scope.stepping  # the loop, or one around it that steps the optimizer
            if not fresh.isdisjoint(scope.resets.get(acc, ())) or any(
                key == acc and not fresh.isdisjoint(loops) and not mentions_key(value, acc)
                for key, value, loops in scope.assigned_in_loops
            ):
                continue  # started afresh inside the loop: the history it keeps is bounded
            occurrence = kept_occurrence(added, keys)
            if occurrence is not None:
                candidates.append((loop, acc, written, occurrence))
        if not candidates:
            return
        detached = detached_names(scope.assignments)
        backpropagated = names_flowing_into(scope.backpropagated, scope.assignments)
        for loop, acc, written, occurrence in candidates:
            loss = dotted_name(occurrence)
            assert loss is not None
            if loss in detached or acc in backpropagated:
                continue
            text = cst.Module([]).code_for_node(written)
            if len(text) > 40 or "\n" in text:
                text = acc
            # Safe only when the accumulated name surely holds the tensor that
            # was backpropagated and its graph is not kept for later use.
            rebound = sum(
                1 for key, arithmetic in scope.bindings
                if not arithmetic and (key == loss or loss.startswith(key + "."))
            )
            safe = id(loop) not in scope.retained and rebound <= 1
            self.report(
                occurrence,
                self._MESSAGE.format(loss=loss, acc=text),
                fix=Fix(
                    Applicability.SAFE if safe else Applicability.UNSAFE,
                    f"Accumulate `{loss}.detach()`",
                    lambda occurrence=occurrence: calls.call_method(occurrence, "detach"),
                ),
            )
