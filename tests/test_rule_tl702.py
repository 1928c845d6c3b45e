"""Focused tests for TL702 (empty-cache-in-loop)."""

from __future__ import annotations

import pytest

from tests.helpers import fix, lint
from torchlint.model import Applicability


def tl702(code: str):
    return lint(code, select=["TL702"])


def positions(code: str):
    return [(d.line, d.column) for d in tl702(code)]


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.cuda.empty_cache()"),
        ("import torch as T", "T.cuda.empty_cache()"),
        ("from torch.cuda import empty_cache", "empty_cache()"),
        ("import torch", "torch.cuda.memory.empty_cache()"),
        ("import torch", "torch.accelerator.empty_cache()"),
        ("import torch", "torch.mps.empty_cache()"),
        ("import torch", "torch.xpu.empty_cache()"),
    ],
)
def test_reported_in_a_loop(imports: str, call: str) -> None:
    code = f"{imports}\nfor x in loader:\n    loss_fn(model(x)).backward()\n    {call}\n"
    diagnostics = tl702(code)
    assert [(d.line, d.column) for d in diagnostics] == [(4, 5)]
    assert diagnostics[0].fix is not None and diagnostics[0].fix.applicability is Applicability.UNSAFE


def test_user_function_named_empty_cache_is_not_torch() -> None:
    code = """
    import torch
    from mylib import empty_cache
    for x in loader:
        empty_cache()
        cache.empty_cache()
    """
    assert tl702(code) == []


def test_except_clauses_are_silent_finally_is_not() -> None:
    code = """
    import torch
    for x in loader:
        try:
            step(x)
        except ValueError as error:
            if "nan" in str(error):
                torch.cuda.empty_cache()
        except (KeyError, IndexError):
            torch.cuda.empty_cache()
        finally:
            torch.cuda.empty_cache()
    """
    # `finally` runs on every iteration
    assert positions(code) == [(12, 9)]


def test_out_of_memory_recovery_idiom() -> None:
    code = """
    import torch
    for x in loader:
        try:
            step(x)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            continue
        finally:
            torch.cuda.empty_cache()
    """
    # a loop that handles out-of-memory errors releases memory on purpose
    assert tl702(code) == []


@pytest.mark.parametrize(
    "handler",
    [
        "torch.cuda.OutOfMemoryError",
        "torch.OutOfMemoryError",
        "RuntimeError",
        "MemoryError",
        "(RuntimeError, ValueError)",
    ],
)
def test_out_of_memory_retry_loops_are_silent(handler: str) -> None:
    code = (
        "import torch\nwhile batch_size:\n    torch.cuda.empty_cache()\n    try:\n        run(batch_size)\n"
        f"    except {handler}:\n        batch_size //= 2\n"
    )
    assert tl702(code) == []


def test_a_loop_catching_other_errors_is_still_reported() -> None:
    code = "import torch\nfor x in loader:\n    torch.cuda.empty_cache()\n    try:\n        step(x)\n    except KeyError:\n        pass\n"
    assert positions(code) == [(3, 5)]


@pytest.mark.parametrize(
    "extra",
    [
        "gc.collect()",
        "del model",
        "del model, optimizer",
        "del self.teacher",
        "torch.cuda.reset_peak_memory_stats()",
        "peak = torch.cuda.max_memory_allocated()",
        "used = torch.cuda.memory_reserved() / 2**30",
        "del pipeline",
        "del pipe, images",
        "del self.sd_pipeline",
        "if pipe is not None:\n        del pipe",
    ],
)
def test_deliberate_release_between_heavy_iterations(extra: str) -> None:
    code = f"import gc\nimport torch\nfor name in names:\n    run(name)\n    {extra}\n    torch.cuda.empty_cache()\n"
    assert tl702(code) == []


def test_del_of_data_is_still_reported() -> None:
    code = "import torch\nfor x, y in loader:\n    loss = step(x, y)\n    del loss, x, y\n    torch.cuda.empty_cache()\n"
    assert positions(code) == [(5, 5)]
    code = "import torch\nfor x in loader:\n    out = pipeline(x)\n    step(out)\n    del out, pipeline_output\n    torch.cuda.empty_cache()\n"
    assert positions(code) == [(6, 5)]


def test_pipeline_deleted_in_a_nested_function_does_not_count() -> None:
    code = "import torch\nfor x in loader:\n    def cleanup():\n        del pipeline\n    step(x)\n    torch.cuda.empty_cache()\n"
    assert positions(code) == [(6, 5)]


def test_runs_once_epochs_and_periodic_guard() -> None:
    code = """
    import torch
    for epoch in range(10):
        for i, x in enumerate(loader):
            step(x)
            if i % 100 == 0:
                torch.cuda.empty_cache()
            if i == 0:
                torch.cuda.empty_cache()
            if x is None:
                torch.cuda.empty_cache()
                break
        torch.cuda.empty_cache()
    """
    assert tl702(code) == []


def test_no_fix_when_not_a_statement_of_its_own() -> None:
    code = """
    import torch
    for x in loader:
        optimizer.step()
        cleanup = torch.cuda.empty_cache()
        callbacks.append(lambda: torch.cuda.empty_cache())
        results = [torch.cuda.empty_cache() for _ in range(2)]
    """
    diagnostics = tl702(code)
    assert [(d.line, d.fix) for d in diagnostics] == [(5, None), (7, None)]


def test_fix_removes_only_with_unsafe_fixes() -> None:
    code = "import torch\nfor x in loader:\n    step(x)\n    torch.cuda.empty_cache()\n"
    assert fix(code, select=["TL702"]).text == code
    result = fix(code, select=["TL702"], unsafe=True)
    assert result.text == "import torch\nfor x in loader:\n    step(x)\n"
    assert result.applied == {"TL702": 1}
    assert tl702(result.text) == []


def test_evaluation_and_inference_loops_are_silent() -> None:
    # Releasing memory between inputs of varying size (full-resolution images
    # in a validation loop) is deliberate; only a loop that trains repeats the
    # same allocations that the cache would have served.
    code = """
    import torch
    def validation(model, loader):
        for data in loader:
            with torch.no_grad():
                output = model(data["lq"])
            save(tensor2img(output))
            del output
            torch.cuda.empty_cache()
    """
    assert tl702(code) == []
    trains = code.replace('save(tensor2img(output))', 'loss_fn(output).backward()')
    assert positions(trains) == [(9, 9)]


def test_training_step_called_by_name_or_in_the_function() -> None:
    code = """
    import torch
    def train(model, loader):
        for data in loader:
            model.optimize_parameters(data)
            torch.cuda.empty_cache()
    """
    assert positions(code) == [(6, 9)]


def test_a_memory_saving_switch_is_silent_a_device_test_is_not() -> None:
    code = """
    import torch
    def train(model, loader, opt, args):
        for x in loader:
            opt.step()
            if args.release_memory:
                torch.cuda.empty_cache()
            if not self.cpu_cache and rank == 0:
                torch.cuda.empty_cache()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    """
    assert positions(code) == [(11, 13)]
