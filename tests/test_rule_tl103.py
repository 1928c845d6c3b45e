"""Focused tests for TL103 (synchronize-in-loop)."""

from __future__ import annotations

import pytest

from tests.helpers import lint


def tl103(code: str):
    return lint(code, select=["TL103"])


def positions(code: str):
    return [(d.line, d.column) for d in tl103(code)]


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.cuda.synchronize()"),
        ("import torch", "torch.cuda.synchronize(device)"),
        ("import torch", "torch.cuda.synchronize(device='cuda:1')"),
        ("import torch as T", "T.cuda.synchronize()"),
        ("import torch.cuda", "torch.cuda.synchronize()"),
        ("from torch import cuda", "cuda.synchronize()"),
        ("from torch.cuda import synchronize as sync", "sync()"),
        ("import torch", "torch.accelerator.synchronize()"),
        ("import torch", "torch.xpu.synchronize()"),
        ("import torch", "torch.mps.synchronize()"),
        ("import torch", "torch.cuda.current_stream().synchronize()"),
        ("import torch", "torch.cuda.default_stream(device).synchronize()"),
    ],
)
def test_synchronizations(imports: str, call: str) -> None:
    code = f"{imports}\nfor x in loader:\n    model(x)\n    {call}\n"
    diagnostics = tl103(code)
    assert [(d.line, d.column) for d in diagnostics] == [(4, 5)]
    assert "synchronize()" in diagnostics[0].message


@pytest.mark.parametrize(
    "call",
    [
        "event.synchronize()",
        "stream.synchronize()",
        "torch.cuda.Event().synchronize()",
        "dist.barrier()",
        "xm.mark_step()",
        "synchronize()",
        "utils.synchronize()",
        "torch.cuda.current_stream().wait_stream(side)",
    ],
)
def test_other_waits_are_not_reported(call: str) -> None:
    assert tl103(f"import torch\nfor x in loader:\n    model(x)\n    {call}\n") == []


def test_user_function_named_synchronize_is_not_torch() -> None:
    code = """
    import torch
    def synchronize():
        pass
    for x in loader:
        synchronize()
    """
    assert tl103(code) == []


@pytest.mark.parametrize(
    "clock",
    [
        "import time\nCLOCK = time.time",
        "import time\nCLOCK = time.perf_counter",
        "import time\nCLOCK = time.monotonic",
        "from time import perf_counter\nCLOCK = perf_counter",
        "from timeit import default_timer\nCLOCK = default_timer",
    ],
)
def test_timing_loops_are_silent(clock: str) -> None:
    imports, name = clock.split("\nCLOCK = ")
    code = (
        f"{imports}\nimport torch\n"
        f"for _ in range(10):\n    t0 = {name}()\n    model(x)\n    torch.cuda.synchronize()\n"
        f"    times.append({name}() - t0)\n"
    )
    assert tl103(code) == []


def test_clock_read_only_in_an_outer_loop_does_not_excuse_the_inner_one() -> None:
    # (the clock is read in the outer loop, not right around the inner one)
    code = """
    import time
    import torch
    for stage in range(2):
        t0 = time.time()
        prepare(stage)
        for _ in range(steps):
            model(x)
            torch.cuda.synchronize()
        torch.cuda.synchronize()
        print(time.time() - t0)
    """
    assert positions(code) == [(9, 9)]


def test_repetitions_between_two_clock_readings_are_a_measurement() -> None:
    code = """
    import time
    import torch
    for stage in range(2):
        t0 = time.time()
        for _ in range(steps):
            model(x)
            torch.cuda.synchronize()
        print(time.time() - t0)
    """
    assert positions(code) == []


def test_cuda_event_timing_is_silent() -> None:
    code = """
    import torch
    for _ in range(10):
        start.record()
        model(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    """
    assert tl103(code) == []


def test_clock_in_a_nested_function_does_not_count() -> None:
    code = """
    import time
    import torch
    for x in loader:
        model(x)
        torch.cuda.synchronize()
        def now():
            return time.time()
    """
    assert positions(code) == [(6, 5)]


def test_outside_loops_guards_and_epochs() -> None:
    code = """
    import torch
    torch.cuda.synchronize()
    def train(loader, epochs):
        for epoch in range(epochs):
            for i, x in enumerate(loader):
                model(x)
                if i % 50 == 0:
                    torch.cuda.synchronize()
                if i == 0:
                    torch.cuda.synchronize()
                if x is None:
                    torch.cuda.synchronize()
                    return
            torch.cuda.synchronize()
        for x in loader:
            torch.cuda.synchronize()
    """
    assert positions(code) == [(17, 9)]


def test_while_loop_test_runs_every_iteration() -> None:
    code = """
    import torch
    while torch.cuda.synchronize() is None and running:
        step()
    """
    assert positions(code) == [(3, 7)]


def test_test_files_and_measuring_modules_are_skipped() -> None:
    code = """
    import torch
    def step_all(model, loader):
        for x in loader:
            model(x).backward()
            torch.cuda.synchronize()
    """
    assert lint(code, select=["TL103"], path="tests/test_sync.py") == []
    assert len(tl103(code)) == 1
    # a module that reads a clock and allocator statistics is a benchmark
    measuring = code + """
    def peak(model, x):
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        model(x)
        return time.perf_counter() - start, torch.cuda.max_memory_allocated()
    """
    assert tl103(measuring) == []


def test_passes_of_work_and_full_batch_epochs() -> None:
    code = """
    import torch
    def run(model, prompts, features, targets, optimizer, epochs):
        for prompt in prompts:
            model.generate(prompt)
            torch.cuda.synchronize()
        for epoch in range(epochs):
            model(features).sub(targets).pow(2).mean().backward()
            optimizer.step()
            torch.cuda.synchronize()
        seen = 0
        for x in prompts:
            model(x)
            seen += 1
            if seen == 50:
                torch.cuda.synchronize()
                seen = 0
    """
    # a generation per iteration is a whole pass; a full-batch "epoch" is a
    # step; a counter reset every 50 steps is a periodic guard
    assert positions(code) == [(10, 9)]
