from __future__ import annotations

import re
from typing import Dict, List

import libcst as cst

from torchlint.codemods import statements
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._sync import (
    LoopFacts,
    expression_statement,
    in_except_handler,
    in_training_code,
    is_epoch_loop,
    loop_facts,
    runs_once,
)

# A sparse-tensor library whose batches hold a different number of points
# every step and whose documentation asks for `empty_cache()` in the loop.
_SPARSE_POINTS = re.compile(r"^[ \t]*(?:import|from)[ \t]+MinkowskiEngine\b", re.M)

# Functions that hand the caching allocator's unused blocks back to the driver.
_EMPTY_CACHE = frozenset(
    {
        "torch.cuda.empty_cache", "torch.cuda.memory.empty_cache", "torch.accelerator.empty_cache",
        "torch.accelerator.memory.empty_cache", "torch.xpu.empty_cache", "torch.xpu.memory.empty_cache",
        "torch.mps.empty_cache",
    }
)


class EmptyCacheInLoop(Rule):
    """
    ## What it does
    Reports `torch.cuda.empty_cache()` (and `torch.accelerator.empty_cache()`,
    `torch.xpu.empty_cache()`, `torch.mps.empty_cache()`) called in a training
    loop: in the body of a `for`/`while` statement or of a comprehension, in
    the same function, and not under a periodic guard such as
    `if step % 100 == 0:`, where the loop (or its function) runs a backward or
    an optimizer step.

    Not reported, because there the call runs rarely or releases memory on
    purpose:
    - in an `except` clause (the out-of-memory recovery idiom
      `except torch.cuda.OutOfMemoryError: torch.cuda.empty_cache()`), and
      anywhere in a loop that retries on out-of-memory errors (a `try` in the
      loop catching `torch.cuda.OutOfMemoryError`, `RuntimeError` or
      `MemoryError`), such as a search for the largest batch size that fits;
    - in a loop that also calls `gc.collect()` or deletes a model (`del model`)
      or a pipeline of models (`del pipeline`, `del pipe`), which releases
      memory on purpose between heavy iterations (one model after another),
      or that reads or resets the allocator's statistics
      (`torch.cuda.max_memory_allocated()`, `torch.cuda.reset_peak_memory_stats()`:
      a memory measurement per run);
    - in a loop over epochs (`for epoch in ...`), where it runs once per pass
      over the data;
    - in code that does not train: a loop that runs no backward or optimizer
      step (and whose function runs none and is not named like a training
      step, `train_step`, `optimize_parameters`). Evaluation and inference
      loops release memory between inputs of varying size (full-resolution
      images, long sequences) on purpose, where peak memory matters more than
      a re-allocation; a training loop repeats the same allocations, which
      the cache would serve;
    - under an `if` whose test is a setting (`if self.cpu_cache:`,
      `if not args.keep_cache and rank == 0:`): a memory-saving mode the
      user turns on. A test about the device (`if torch.cuda.is_available():`)
      only guards the call and does not count;
    - where it runs at most once per loop: in a block that ends with
      `break`/`return`/`raise`, or under `if i == 0:` on the loop counter;
    - in a module that imports MinkowskiEngine: its sparse tensors hold a
      different number of points every batch, which fragments the cache, and
      its README asks for `torch.cuda.empty_cache()` at regular intervals to
      avoid running out of memory.

    ## Why is this bad?
    PyTorch's caching allocator keeps freed device memory to reuse it for the
    next tensors of the same size, because asking the driver for memory
    (`cudaMalloc`) is slow and `cudaFree` synchronizes the device.
    `empty_cache()` hands every unused cached block back to the driver, so the
    next iteration allocates all of it again, and the call itself waits for the
    device. It does not make more memory available to your own program: the
    tensors still alive keep their memory, and freed blocks were already
    reusable. The PyTorch documentation ("CUDA semantics", memory management)
    explains that the released memory only becomes available to *other*
    applications.

    Measured with `torchlint verify --rules TL702` on a CPU (a 2-core AMD EPYC VM,
    torch 2.13.0+cpu; no GPU was available), on a small training loop (a
    backward per iteration): the two versions do the same work there, since
    `torch.cuda.empty_cache()` does nothing without CUDA, and the timings
    differ only by noise (the quartile range spans 1x). On a GPU it forces the
    allocator to return and re-request memory from the driver every iteration;
    run the same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        del loss
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```
    If memory fragmentation is the problem, set
    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` instead.

    ## Fix safety
    The fix removes the statement (an `empty_cache()` that is the only
    statement of its block becomes `pass`); it is offered only when the call is
    a statement of its own. It is unsafe because the call does have effects:
    other processes on the same GPU (another training run, a second model
    server, a data-loading process using CUDA) can use the released memory and
    may run out of memory without it; `torch.cuda.memory_reserved()` and
    `nvidia-smi` report more memory in use; and a program that relies on it to
    recover from fragmentation before a large allocation, for example in a
    retry loop, may now raise an out-of-memory error.

    ## References
    - PyTorch documentation, "CUDA semantics", section "Memory management"
    - PyTorch Performance Tuning Guide, "Preallocate memory in case of variable
      input length" (releasing and re-allocating buffers every iteration is slow)
    - `torch.cuda.empty_cache` documentation ("doesn't increase the amount of GPU
      memory available for PyTorch")
    """

    code = "TL702"
    name = "empty-cache-in-loop"
    summary = "`torch.cuda.empty_cache()` in a loop throws away the allocator's cache every iteration"
    fix = FixAvailability.UNSAFE
    needs = ("empty_cache",)

    VALID = [
        Valid(
            """
            import torch
            for x in loader:
                step(x)
            torch.cuda.empty_cache()
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                try:
                    step(x)
                except torch.cuda.OutOfMemoryError:
                    torch.cuda.empty_cache()
            """
        ),
        Valid(
            """
            import torch
            for epoch in range(10):
                train(model)
                torch.cuda.empty_cache()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x in loader:
                step(x)
                torch.cuda.empty_cache()
            """,
            expected_fix="""
            import torch
            for x in loader:
                step(x)
            """,
        ),
        Invalid(
            """
            import torch
            while running:
                loss = model(next(it)).sum()
                loss.backward()
                del loss
                torch.cuda.empty_cache()
            """,
            expected_fix="""
            import torch
            while running:
                loss = model(next(it)).sum()
                loss.backward()
                del loss
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="a training loop with vs without `torch.cuda.empty_cache()` every iteration",
        before="""
            import torch

            device = torch.device(DEVICE)

            weight = torch.randn(256, 256, device=device, requires_grad=True)


            def run():
                weight.grad = None
                for _ in range(8):
                    x = torch.randn(64, 256, device=device)
                    (x @ weight).relu().sum().backward()
                    torch.cuda.empty_cache()
                return weight.grad
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            weight = torch.randn(256, 256, device=device, requires_grad=True)


            def run():
                weight.grad = None
                for _ in range(8):
                    x = torch.randn(64, 256, device=device)
                    (x @ weight).relu().sum().backward()
                return weight.grad
            """,
        cpu_note="`torch.cuda.empty_cache()` does nothing without CUDA: both versions do the same work on a CPU",
    )

    _MESSAGE = (
        "`{what}()` in a loop returns the allocator's cached memory to the "
        "driver every iteration, so the next iteration pays for slow, synchronizing "
        "allocations again; remove it (freed memory is already reused), or call it once "
        "outside the loop"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._facts: Dict[int, LoopFacts] = {}
        self._drops_pipeline: Dict[int, bool] = {}
        self._sparse_points = _SPARSE_POINTS.search(context.source) is not None

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value != "empty_cache":
            return  # the cheap test first: most calls are other methods
        ctx = self.context
        what = ctx.qualname(func)
        if what not in _EMPTY_CACHE:
            return
        loop = ctx.enclosing_loop()
        if self._sparse_points or loop is None or runs_once(ctx, loop) or is_epoch_loop(loop) or in_except_handler(
                ctx, loop):
            return
        facts = loop_facts(ctx, loop, self._facts)
        if facts.retries_on_oom or facts.collects_garbage or facts.reads_memory_stats or facts.deletes_model:
            return
        if not in_training_code(ctx, self._facts):
            return  # evaluation/inference: releasing memory between inputs of varying size is deliberate
        if _under_switch(ctx, loop):
            return  # `if self.cpu_cache:`: a memory-saving mode the user turns on
        if self._deletes_pipeline(loop):
            return
        fix = None
        statement = expression_statement(ctx)
        if statement is not None:
            fix = Fix(
                Applicability.UNSAFE,
                "Remove the `empty_cache()` call",
                lambda: statements.remove_statement(statement),
                target=statements.removal_target(statement),
            )
        self.report(node, self._MESSAGE.format(what=what), fix=fix)

    def _deletes_pipeline(self, loop: cst.CSTNode) -> bool:
        """Whether the loop's body has ``del pipeline`` (a pipeline of models,
        such as a diffusion pipeline loaded for one concept after another).
        Scanned once per loop, and only for a loop that empties the cache."""
        cached = self._drops_pipeline.get(id(loop))
        if cached is None:
            from torchlint.nodes import iter_children

            todo: List[cst.CSTNode] = [loop.body] if isinstance(loop, (cst.For, cst.While)) else [loop]
            cached = False
            while todo and not cached:
                node = todo.pop()
                if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                    continue
                if isinstance(node, cst.Del):
                    target = node.target
                    if isinstance(target, (cst.Tuple, cst.List)):
                        targets = [element.value for element in target.elements]
                    else:
                        targets = [target]
                    cached = any(_names_pipeline(t) for t in targets)
                todo.extend(iter_children(node))
            self._drops_pipeline[id(loop)] = cached
        return cached


def _under_switch(ctx, loop: cst.CSTNode) -> bool:
    """Whether the call is in the body of an ``if`` (inside the loop) whose
    test is a setting: a name or attribute (``if self.cpu_cache:``,
    ``if args.empty_cache and rank == 0:``), not a test of the device
    (``if torch.cuda.is_available():`` guards the call, it does not choose it)."""
    stack = ctx.stack
    start = next((i for i, n in enumerate(stack) if n is loop), len(stack))
    for index in range(start + 1, len(stack) - 1):
        node = stack[index]
        if isinstance(node, cst.If) and stack[index + 1] is node.body and _is_setting(node.test):
            return True
    return False


def _is_setting(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _is_setting(test.expression)
    if isinstance(test, cst.BooleanOperation):
        return _is_setting(test.left) or _is_setting(test.right)
    if isinstance(test, cst.Name):
        return test.value not in ("True", "False")
    if isinstance(test, cst.Attribute):
        text = cst.Module([]).code_for_node(test).lower()
        return not any(word in text for word in ("cuda", "device", "gpu"))
    return False


def _names_pipeline(expr: cst.BaseExpression) -> bool:
    """``pipeline``, ``pipe``, ``self.pipeline``, ``sd_pipeline``, ``pipe2``."""
    name = expr.value if isinstance(expr, cst.Name) else expr.attr.value if isinstance(expr, cst.Attribute) else ""
    last = name.lower().strip("_").rsplit("_", 1)[-1].rstrip("0123456789")
    return last in ("pipeline", "pipe")
