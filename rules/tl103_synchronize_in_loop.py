from __future__ import annotations

import re
from typing import Dict, Optional

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import method_name, receiver, source_mentions
from torchlint.rules._sync import (
    DEVICE_SYNCS as _DEVICE_SYNCS,
    LoopFacts,
    loop_facts,
    runs_once,
    runs_once_per_pass,
    timed_repetition,
    waits_every_iteration,
)

# Reading a clock, and reading allocator statistics (see `__init__`).
_CLOCK_TEXT = re.compile(r"\b(?:perf_counter|monotonic|process_time|default_timer|elapsed_time)\b|\btime\.time\(")
_CLOCK_WORDS = ("perf_counter", "monotonic", "process_time", "default_timer", "elapsed_time", "time(")
_MEMORY_WORDS = ("memory_",)
_MEMORY_TEXT = re.compile(
    r"\b(?:memory_allocated|max_memory_allocated|memory_reserved|max_memory_reserved"
    r"|reset_peak_memory_stats|memory_stats)\b"
)
# `torch.cuda.current_stream().synchronize()`: waits for all work on that stream.
_STREAM_GETTERS = frozenset(
    {
        "torch.cuda.current_stream", "torch.cuda.default_stream",
        "torch.accelerator.current_stream", "torch.xpu.current_stream",
    }
)


class SynchronizeInLoop(Rule):
    """
    ## What it does
    Reports a device synchronization in a loop: `torch.cuda.synchronize()`
    (with or without a device), `torch.accelerator.synchronize()`, their
    `torch.xpu`/`torch.mps` counterparts, and
    `torch.cuda.current_stream().synchronize()` /
    `torch.cuda.default_stream().synchronize()`, in the body of a `for`/`while`
    statement or of a comprehension, in the same function, and not under a
    periodic guard such as `if step % log_every == 0:`.

    Not reported:
    - a synchronization in a loop whose body reads a clock (`time.time()`,
      `time.perf_counter()`, `time.monotonic()`, `timeit.default_timer()`, ...)
      or CUDA event timings (`start.elapsed_time(end)`), or calls a timer
      (`meter.iter_tic()`/`iter_toc()`, `timer.tic()`/`toc()`,
      `time_synchronized()`), builds or enters a timer (`with
      Timer("update: %f"):`, `CudaTimer()`, `stopwatch()`), or iterates `metric_logger.log_every(...)` (the
      MetricLogger of the torchvision references and the DETR/DeiT/DINO family
      times every iteration it yields): a timing or benchmark loop needs the
      synchronization for its measurement to mean anything;
    - any synchronization in a module that reads both a clock and allocator
      statistics (`torch.cuda.max_memory_allocated()`, ...): a benchmark or
      profiling script, where waits make the measurements exact;
    - a loop whose iteration is a whole pass of work: over epochs
      (`for epoch in ...`, unless the loop itself calls `.backward()`:
      full-batch training), over a streaming generator, a loop that runs a
      text generation every iteration (`model.generate(...)`), or an
      interactive loop (`input()`);
    - a synchronization that runs at most once per loop or a fixed number of
      times: in a block that ends with `break`/`return`/`raise` or
      `sys.exit(...)`, under `if i == 0:` on the loop counter, under a cap
      (`if shown < 3:` incrementing `shown`), or under a counter reset
      (`if seen == k:` ... `seen = 0`);
    - a loop that waits for the device every iteration anyway: it writes or
      saves each iteration's results unconditionally
      (`writer.write_frame(output)`, `cv2.imwrite(path, img)`: they are in
      host memory by then), waits on a data-dependent operation
      (`mask.nonzero()`, `if (x > 0).any():`), or hands device results to host
      code and needs the answer (`envs.step(action.cpu().numpy())`; see
      TL101): the synchronization is then redundant but free, and removing it
      gains nothing;
    - `event.synchronize()` on a CUDA event, which waits only for the work
      recorded before that event;
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, under `tests/`).

    ## Why is this bad?
    CUDA kernels run asynchronously: the host queues work and moves on while the
    device computes, and that overlap is where much of the throughput comes
    from. A device-wide synchronization blocks the host until every queued
    kernel has finished, so each iteration the device drains its queue and then
    idles while the host prepares the next step. The PyTorch Performance Tuning
    Guide asks to avoid unnecessary CPU-GPU synchronizations "to let the CPU run
    ahead of the accelerator"; an explicit device-wide synchronization is the
    bluntest of them. PyTorch already synchronizes where it must (a copy to the
    host, `.item()`), so a manual one is rarely needed for correctness.

    ## Example
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        meter.update(loss.detach())
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        meter.update(loss.detach())  # no wait; read the meter every N steps
    ```
    To time a region, record CUDA events (`torch.cuda.Event(enable_timing=True)`)
    and read `elapsed_time` after one synchronization at the end, or use
    `torch.utils.benchmark`.

    ## Fix safety
    There is no fix: whether the synchronization is needed (for a measurement,
    for code that reads memory written by another stream or by a custom
    extension) depends on the program.

    ## References
    - PyTorch Performance Tuning Guide, "Avoid unnecessary CPU-GPU synchronization"
    - PyTorch documentation, "CUDA semantics", section "Asynchronous execution"
    - `torch.cuda.synchronize` documentation
    """

    code = "TL103"
    name = "synchronize-in-loop"
    summary = "`torch.cuda.synchronize()` in a loop stalls the host every iteration"
    fix = FixAvailability.NONE
    needs = ("synchronize",)

    VALID = [
        Valid(
            """
            import torch
            for x in loader:
                loss = model(x)
            torch.cuda.synchronize()
            """
        ),
        Valid(
            """
            import time
            import torch
            for _ in range(10):
                start = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            """
        ),
        Valid(
            """
            import torch
            for step, x in enumerate(loader):
                model(x)
                if step % 100 == 0:
                    torch.cuda.synchronize()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x in loader:
                model(x).backward()
                torch.cuda.synchronize()
            """,
        ),
        Invalid(
            """
            import torch
            while True:
                step()
                torch.cuda.current_stream().synchronize()
            """,
        ),
        Invalid(
            """
            from torch.cuda import synchronize
            for x in loader:
                model(x)
                synchronize()
            """,
        ),
    ]

    _MESSAGE = (
        "`{what}` in a loop blocks the host until every queued kernel has finished, "
        "every iteration, so the device idles while the host prepares the next step; "
        "remove it (copies to the host already wait where they must), or synchronize "
        "once after the loop"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._facts: Dict[int, LoopFacts] = {}
        source = context.source
        # A module that reads both a clock and allocator statistics measures
        # time and memory: a benchmark or profiling script.
        self._measures = source_mentions(source, _MEMORY_TEXT, _MEMORY_WORDS) and source_mentions(
            source, _CLOCK_TEXT, _CLOCK_WORDS
        )

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.context
        if ctx.is_test_file:
            return
        what = self._synchronization(node)
        if what is None:
            return
        if self._measures:
            return
        loop = ctx.enclosing_loop()
        if loop is None or runs_once(ctx, loop) or runs_once_per_pass(ctx, loop, self._facts):
            return
        facts = loop_facts(ctx, loop, self._facts)
        if facts.reads_clock or timed_repetition(ctx, loop, self._facts):
            return  # a timing loop: the measurement needs the wait
        if facts.writes_output or waits_every_iteration(ctx, loop, self._facts):
            return  # every iteration waits for the device anyway: this wait is free, and removing it gains nothing
        self.report(node, self._MESSAGE.format(what=what))

    def _synchronization(self, node: cst.Call) -> Optional[str]:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value != "synchronize":
            return None  # the cheap test first: most calls are other methods
        ctx = self.context
        q = ctx.qualname(func)
        if q in _DEVICE_SYNCS:
            return q + "()"
        if method_name(node) == "synchronize" and not node.args:
            stream = receiver(node)
            if isinstance(stream, cst.Call):
                getter = ctx.qualname(stream.func)
                if getter in _STREAM_GETTERS:
                    return getter + "().synchronize()"
        return None
