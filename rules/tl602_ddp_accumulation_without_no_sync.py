from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid, contains_modulo
from torchlint.rules._training import (
    DDP_CLASSES,
    SYNC_CONTROL,
    is_backward,
    is_framework_backward,
    is_optimizer_step,
    says_every_n,
    scaler_accumulates,
    wraps_in_ddp,
)
from torchlint.rules._project import DDP, caller_trait
from torchlint.nodes import walk_nodes

_LOOPS = (cst.For, cst.While)
_BOUNDARIES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
class _Site:
    """Where a backward call or an optimizer step sits in its function."""

    __slots__ = ("node", "function", "loop", "conditions", "order", "qualname")

    def __init__(self, node, function, loop, conditions, order, qualname=None) -> None:
        self.node = node
        self.function = function  # the enclosing FunctionDef (None: module level)
        self.qualname = qualname  # how other modules name it (`f`, `Class.method`; None if nested)
        self.loop = loop  # innermost for/while whose every iteration may run it
        self.conditions = conditions  # `if` statements between the loop and the node
        self.order = order


class DdpAccumulationWithoutNoSync(Rule):
    """
    ## What it does
    Reports a `backward()` call that runs on every iteration of a gradient
    accumulation loop, in a module that wraps a model in
    `torch.nn.parallel.DistributedDataParallel` (any alias), when nothing in
    the module controls DDP's gradient synchronisation. Two shapes are
    recognised:

    - in the innermost `for`/`while` body around the backward, an optimizer
      step (`optimizer.step()`, `scaler.step(optimizer)`) runs in the same
      branch as the backward but only under a further `if` whose test says
      "every N micro-batches" (it uses `%`, or mentions a name containing
      `accum`, `micro`, `sync` or `update`), and no other branch of that `if`
      steps. The backward itself may sit under a branch that does not change
      from one iteration to the next, as in
      `if cfg.accum_steps > 1: loss.backward(); if (i + 1) % n == 0: step`;
    - an inner micro-batch loop calls `backward()` outside any branch and
      contains no optimizer step, and a step follows the inner loop in the
      enclosing loop (or function). This is the shape of nanoGPT's loop,
      which is silent because it sets `require_backward_grad_sync`;
    - a loss scaler called every iteration with the loss and an
      `update_grad=` that says "every N micro-batches" (timm's
      `NativeScaler`, as DeiT, MAE, ConvNeXt and Swin call it:
      `loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0)`):
      it runs `backward()` on every call and steps only when `update_grad`
      is true.

    Not reported when the module mentions `no_sync` (`with model.no_sync():`,
    `ctx = model.no_sync if ... else nullcontext`, a helper of one's own),
    sets `require_backward_grad_sync` (nanoGPT's
    `model.require_backward_grad_sync = (micro_step == steps - 1)`, which is
    what `no_sync()` does), or uses Accelerate's `accelerator.accumulate(...)`
    (which calls `no_sync()` for you), Fabric's `no_backward_sync`, or the
    `misc.ddp_sync(module, sync)` helper of NVlabs' StyleGAN2-ADA, StyleGAN3
    and EDM code (a context manager around `no_sync()`); and
    `accelerator.backward(loss)`/`fabric.backward(loss)`/`manual_backward`,
    whose framework owns the synchronisation. This is checked for the whole module
    rather than only the loop, so a context manager built outside the loop
    counts. Also not reported: a `backward()` under an `if` that the step is
    not under too (`if loss.isfinite(): loss.backward()`: it does not run
    every iteration), a step in the same branch as the backward with no
    further condition (no accumulation, including `if (i + 1) % n == 0:
    loss.backward(); optimizer.step()`), a step under a condition unrelated
    to accumulation (`if torch.isfinite(loss):`, or `if use_amp:
    scaler.step(opt) else: opt.step()`, which steps either way), a backward in
    a comprehension, steps in another function than the backward, a module
    that neither calls `DistributedDataParallel(...)` nor a helper whose name
    says it wraps in DDP (`smart_DDP(model)`, `wrap_ddp(model)`, often defined
    in a utility module: a name with `ddp`/`DDP` as a word; not `is_ddp(...)`
    or `unwrap_ddp(...)`), unless another module of the run that does wrap in
    DDP calls the function with the loop (`main.py` wraps the model and calls
    `train_one_epoch` of `engine.py`: the project index finds the call, and
    the message names where), and `FullyShardedDataParallel`: FSDP's
    `no_sync()` keeps unsharded gradients in memory, so skipping the
    reduce-scatter is a memory trade-off rather than a plain win.

    ## Why is this bad?
    DDP all-reduces the gradients across processes during every `backward()`.
    With gradient accumulation, only the gradients of the last micro-batch
    before `optimizer.step()` need to be synchronised; every other all-reduce
    sends the whole gradient over the network for nothing, which can dominate
    the step time on multi-node jobs. `model.no_sync()` disables the all-reduce
    for the backward passes run inside it; the gradients accumulate locally
    and are synchronised by the first backward outside it.

    ## Example
    ```python
    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % accum_steps == 0
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = criterion(model(x), y) / accum_steps
            loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()
    ```
    The forward pass must be inside `no_sync()` too, as in the DDP
    documentation's example.

    ## Fix safety
    No fix is offered: the forward pass has to move into the `no_sync()`
    block with the backward, and which iterations synchronise depends on the
    loop's accumulation condition.

    ## References
    - DDP docs: `torch.nn.parallel.DistributedDataParallel.no_sync` ("Context
      manager to disable gradient synchronizations across DDP processes")
    - DDP docs: "Distributed Data Parallel" design notes, section "Internal
      Design" (gradients are all-reduced in buckets during `backward()`)
    - Hugging Face Accelerate, "Gradient accumulation" guide (why
      `no_sync()` matters when accumulating under DDP)
    """

    code = "TL602"
    name = "ddp-accumulation-without-no-sync"
    summary = "Gradient accumulation on a DDP model all-reduces on every micro-batch (no `no_sync()`)"
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss_scaler(loss, optimizer, parameters=model.parameters(), update_grad=True)
            """
        ),
        Valid(
            """
            from utils import unwrap_ddp
            net = unwrap_ddp(model)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """
        ),
        # no_sync around the micro-batches
        Valid(
            """
            import contextlib
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(net)
            for i, x in enumerate(loader):
                ctx = model.no_sync() if (i + 1) % 4 else contextlib.nullcontext()
                with ctx:
                    model(x).sum().backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
            """
        ),
        # no accumulation: step every iteration
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(net)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        # no DDP in the module
        Valid(
            """
            import torch
            for i, x in enumerate(loader):
                model(x).sum().backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / accum_iter
                loss_scaler(loss, optimizer, parameters=model.parameters(),
                            update_grad=(i + 1) % accum_iter == 0)
            """,
        ),
        Invalid(
            """
            from utils.torch_utils import smart_DDP
            model = smart_DDP(model)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if (i + 1) % accum_steps == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(net)
            for i, x in enumerate(loader):
                loss = model(x).sum() / 4
                loss.backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
        ),
        Invalid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(net)
            for batch in loader:
                for micro in batch.chunk(4):
                    model(micro).sum().backward()
                optimizer.step()
            """,
        ),
    ]

    _MESSAGE = (
        "`backward()` runs on every micro-batch but the optimizer steps only every few, "
        "and DDP all-reduces the gradients in every backward; wrap the forward and "
        "backward of the micro-batches that do not step in `with model.no_sync():` "
        "(DDP docs, `no_sync`) so only the last one synchronises"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        source = context.source
        # Without a DDP wrap in the module, a function whose callers in other
        # modules wrap one (the project index) may still accumulate on DDP.
        self._active = (
            "DistributedDataParallel" in source or "DDP" in source or "ddp" in source
            or (("backward" in source or "scaler" in source) and "step" in source)
        ) and not any(word in source for word in SYNC_CONTROL)
        if not self._active:
            self.walks = False
        self._has_ddp = False
        self._backwards: List[_Site] = []
        # Loss scalers that run the backward and step only when told
        # (timm's `loss_scaler(loss, optimizer, update_grad=(i + 1) % n == 0)`).
        self._scaled: List[_Site] = []
        self._steps: List[_Site] = []
        self._loop_end: Dict[int, int] = {}
        self._loop_parent: Dict[int, Optional[cst.CSTNode]] = {}
        self._order = 0

    # -- collection ---------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if not self._active:
            return
        ctx = self.context
        if ctx.qualname(node.func) in DDP_CLASSES or wraps_in_ddp(node):
            self._has_ddp = True
            return
        if scaler_accumulates(node):
            site = self._site(node)
            if site is not None and site.loop is not None and not any(
                isinstance(c, cst.If) and contains_modulo(c.test) for c, _ in site.conditions
            ):
                self._scaled.append(site)
            return
        if is_backward(node, ctx):
            if is_framework_backward(node):
                return  # Accelerate/Fabric/Lightning own gradient synchronisation
            site = self._site(node)
            if site is not None:
                self._backwards.append(site)
        elif is_optimizer_step(node):
            site = self._site(node)
            if site is not None:
                self._steps.append(site)

    def visit_For(self, node: cst.For) -> None:
        if self._active:
            self._record_loop(node)

    def visit_While(self, node: cst.While) -> None:
        if self._active:
            self._record_loop(node)

    def leave_For(self, node: cst.For) -> None:
        if self._active:
            self._order += 1
            self._loop_end[id(node)] = self._order

    def leave_While(self, node: cst.While) -> None:
        if self._active:
            self._order += 1
            self._loop_end[id(node)] = self._order

    def _record_loop(self, node: cst.CSTNode) -> None:
        site = self._site(node)
        self._loop_parent[id(node)] = site.loop if site is not None else None

    def _site(self, node: cst.CSTNode) -> Optional[_Site]:
        """The innermost loop body holding ``node`` and the branches in
        between, as ``(statement, branch)`` pairs; None inside a
        comprehension or a loop's header/else."""
        stack = self.context.stack
        conditions: List[Tuple[cst.CSTNode, cst.CSTNode]] = []
        loop = None
        function = None
        qualname = None
        for i in range(len(stack) - 2, -1, -1):
            ancestor, child = stack[i], stack[i + 1]
            if isinstance(ancestor, _BOUNDARIES):
                if not isinstance(ancestor, cst.FunctionDef):
                    return None
                function = ancestor
                qualname = _qualname(stack[:i], ancestor)
                break
            if isinstance(ancestor, _COMPREHENSIONS):
                return None
            if loop is not None:
                continue
            if isinstance(ancestor, _LOOPS):
                if child is not ancestor.body:
                    return None
                loop = ancestor
            elif isinstance(ancestor, (cst.If, cst.IfExp)):
                if child is not ancestor.test:
                    conditions.append((ancestor, child))
            elif isinstance(ancestor, cst.Try) and child is not ancestor.body:
                conditions.append((ancestor, child))  # an except/else/finally block
            elif isinstance(ancestor, cst.Match):
                conditions.append((ancestor, child))
        self._order += 1
        return _Site(node, function, loop, conditions, self._order, qualname)

    # -- decision ------------------------------------------------------------------
    def leave_Module(self, node: cst.Module) -> None:
        if not self._active:
            return
        accumulating = [b for b in self._backwards if b.loop is not None and self._accumulates(b)]
        for backward in sorted(accumulating + self._scaled, key=lambda site: site.order):
            if self._has_ddp:
                self.report(backward.node, self._MESSAGE)
                continue
            where = self._ddp_caller(backward.qualname)
            if where is not None:
                self.report(backward.node, f"{self._MESSAGE} (the model is wrapped in DDP in {where}, "
                            "which calls this function)")

    def _ddp_caller(self, name: Optional[str]) -> Optional[str]:
        """Where a module that wraps a model in DDP calls the function ``name``
        (the project index's answer); the function is noted for the index."""
        if name is None:
            return None
        ctx = self.context
        ctx.pending.add(name)
        return caller_trait(ctx, name, DDP)

    def _accumulates(self, backward: _Site) -> bool:
        loop = backward.loop
        branch = _branch_ids(backward)
        # Shape 1: a step in the same loop body and the same branch as the
        # backward (an `if config.accumulate:` around both is fine), that runs
        # only under a further "every N micro-batches" condition.
        same_branch = [
            s for s in self._steps if s.loop is loop and branch <= _branch_ids(s)
        ]
        if same_branch:
            if any(_branch_ids(s) == branch for s in same_branch):
                return False  # a step every time the backward runs
            return all(self._accumulation_condition(s, branch) for s in same_branch)
        if backward.conditions:
            return False  # the backward does not run on every iteration
        # Shape 2: an inner micro-batch loop; the step comes after it, in the
        # loop (or function) around it.
        if any(s.loop is not None and self._inside(s, loop) for s in self._steps):
            return False
        parent = self._loop_parent.get(id(loop))
        end = self._loop_end.get(id(loop), 0)
        return any(
            s.function is backward.function and s.loop is parent and s.order > end for s in self._steps
        )

    def _inside(self, step: _Site, loop: cst.CSTNode) -> bool:
        current = step.loop
        while current is not None:
            if current is loop:
                return True
            current = self._loop_parent.get(id(current))
        return False

    def _accumulation_condition(self, step: _Site, outer: FrozenSet[Tuple[int, int]]) -> bool:
        """Among the branches holding the step but not the backward, an `if`
        that says "every N micro-batches" and whose other branches do not step."""
        for condition, child in step.conditions:
            if (id(condition), id(child)) in outer or not isinstance(condition, cst.If):
                continue
            if says_every_n(condition.test):
                if not self._other_branch_steps(condition, child):
                    return True
        return False

    def _other_branch_steps(self, condition: cst.If, child: cst.CSTNode) -> bool:
        """Whether another branch of ``condition`` (elif/else) also steps."""
        others = {id(n) for n in walk_nodes(condition)} - {id(n) for n in walk_nodes(child)}
        return any(id(s.node) in others for s in self._steps)


def _branch_ids(site: _Site) -> FrozenSet[Tuple[int, int]]:
    return frozenset((id(node), id(child)) for node, child in site.conditions)


def _qualname(ancestors, function: cst.FunctionDef) -> Optional[str]:
    """``f`` for a module-level function, ``Class.method`` for a method of a
    module-level class, None for anything nested (as the project index names
    functions)."""
    scopes = [a for a in ancestors if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Lambda))]
    if not scopes:
        return function.name.value
    if len(scopes) == 1 and isinstance(scopes[0], cst.ClassDef):
        return f"{scopes[0].name.value}.{function.name.value}"
    return None
