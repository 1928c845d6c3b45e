"""Worker processes: the same output as one process, sorted, and robust to a dying worker."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torchlint.parallel as parallel
from tests.test_cli import BAD, GOOD, run

OTHER = """\
import torch


def make():
    return torch.randn(3).cuda()
"""

N_FILES = 3 * parallel.MIN_FILES_FOR_POOL


@pytest.fixture
def tree(workdir: Path) -> Path:
    """Many files in nested packages, findings spread over them, some without torch."""
    for i in range(N_FILES):
        package = workdir / f"pkg{i % 4}" / ("sub" if i % 3 else "")
        package.mkdir(parents=True, exist_ok=True)
        body = (BAD, GOOD, OTHER, "x = 1\n")[i % 4]
        (package / f"mod{i:03}.py").write_text(body + "\n" * (i % 5) + (BAD if i % 7 == 0 else ""))
    (workdir / "broken.py").write_text("import torch\ndef f(:\n")
    return workdir


def check(runner, *args):
    return run(runner, "check", "--no-cache", *args)


@pytest.mark.parametrize("fmt", ["concise", "json", "full"])
def test_one_and_two_workers_give_identical_output(runner, tree, fmt):
    one = check(runner, "-j", "1", "--output-format", fmt, ".")
    two = check(runner, "-j", "2", "--output-format", fmt, ".")
    assert one.exit_code == two.exit_code == 1
    assert one.output == two.output
    assert "SyntaxError" in one.output or "syntax-error" in one.output


def test_output_is_sorted_by_path_then_position(runner, tree):
    result = check(runner, "-j", "2", "--output-format", "json", ".")
    found = json.loads(result.output)
    keys = [(d["filename"], d["location"]["row"], d["location"]["column"]) for d in found]
    assert keys == sorted(keys)
    assert len({k[0] for k in keys}) > N_FILES // 4


def test_the_pool_is_used_for_many_files_only(runner, tree, monkeypatch):
    pools = []
    real = parallel._run_pool

    def spy(items, *args):
        pools.append(len(items))
        return real(items, *args)

    monkeypatch.setattr(parallel, "_run_pool", spy)
    check(runner, "-j", "2", ".")
    assert pools == [N_FILES + 1]
    check(runner, "-j", "1", ".")
    check(runner, "-j", "2", "pkg0/mod000.py", "pkg1/sub/mod001.py")
    assert pools == [N_FILES + 1]


def test_chunks_cover_every_file_once_largest_first(tree):
    items = [(str(p), str(p)) for p in sorted(tree.rglob("*.py"))]
    chunks = parallel._chunks(items, 2)
    flat = [item for chunk in chunks for item in chunk]
    assert sorted(flat) == sorted(items)
    sizes = [sum(os.path.getsize(p) for _, p in chunk) / len(chunk) for chunk in chunks]
    assert sizes[0] >= sizes[-1]


def test_exception_in_a_worker_is_an_internal_error_for_that_file(runner, tree, monkeypatch):
    import torchlint.engine as engine

    real = engine.lint_text

    def flaky(text, path, settings, codes):
        if path.endswith("mod005.py"):
            raise RuntimeError("boom")
        return real(text, path, settings, codes)

    monkeypatch.setattr(engine, "lint_text", flaky)  # forked workers inherit it
    monkeypatch.setenv("TORCHLINT_START_METHOD", "fork")
    result = check(runner, "-j", "2", "--output-format", "concise", ".")
    assert result.exit_code == 2
    crashed = [line for line in result.output.splitlines() if "crashed" in line]
    assert len(crashed) == 1 and "mod005.py" in crashed[0]
    assert "TL301" in result.output


def test_a_dying_worker_costs_only_its_file(runner, tree, monkeypatch):
    import torchlint.engine as engine

    real = engine.lint_text

    def dies(text, path, settings, codes):
        if path.endswith("mod010.py"):
            os._exit(3)  # as a crash in native code would
        return real(text, path, settings, codes)

    expected = check(runner, "-j", "1", "--output-format", "concise", ".").output.splitlines()
    monkeypatch.setattr(engine, "lint_text", dies)
    monkeypatch.setenv("TORCHLINT_START_METHOD", "fork")
    result = check(runner, "-j", "2", "--output-format", "concise", ".")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    died = [line for line in lines if "worker process analysing this file died" in line]
    assert len(died) == 1 and "mod010.py" in died[0]
    # Every other file's diagnostics are there, in order.
    others = [line for line in expected if "mod010.py" not in line and ":" in line and "Found" not in line]
    assert [line for line in lines if "mod010.py" not in line and line in others] == others


@pytest.mark.parametrize("method", ["spawn"])
def test_spawned_workers_give_the_same_output(tree, method):
    env = dict(os.environ, TORCHLINT_START_METHOD=method)
    args = [sys.executable, "-m", "torchlint", "check", "--no-cache", "--output-format", "concise", "."]
    one = subprocess.run(args + ["-j", "1"], cwd=tree, capture_output=True, text=True, env=env)
    two = subprocess.run(args + ["-j", "2"], cwd=tree, capture_output=True, text=True, env=env)
    assert one.returncode == two.returncode == 1, two.stderr
    assert one.stdout == two.stdout
    assert two.stderr == ""


def test_jobs_must_be_positive(runner, tree):
    result = runner.invoke(__import__("torchlint.cli", fromlist=["main"]).main, ["check", "-j", "0", "."])
    assert result.exit_code == 2


def test_progress_is_drawn_on_a_terminal_only(runner, tree):
    # CliRunner's standard error is not a terminal: nothing but the report.
    result = check(runner, "-j", "2", "--output-format", "concise", ".")
    assert "checked" not in result.output
    stream = io.StringIO()
    bar = parallel.TerminalProgress(stream)
    bar(1, 300)
    bar(2, 300)  # within 0.1 s of the last redraw: skipped
    bar(300, 300)
    bar.close()
    assert stream.getvalue() == (
        "\rtorchlint: checked 1/300 files\rtorchlint: checked 300/300 files\r\x1b[K"
    )


def test_warm_run_with_workers_matches_the_cold_run(runner, tree):
    cold = run(runner, "check", "-j", "2", "--output-format", "json", ".")
    warm = run(runner, "check", "-j", "2", "--output-format", "json", ".")
    assert cold.output == warm.output
    assert cold.output == check(runner, "-j", "1", "--output-format", "json", ".").output


def test_no_process_pool_on_this_system_means_one_process(runner, tree, monkeypatch):
    expected = check(runner, "-j", "1", "--output-format", "concise", ".").output

    def no_pool(*args, **kwargs):
        raise OSError("no semaphores here")

    monkeypatch.setattr("concurrent.futures.ProcessPoolExecutor", no_pool)
    assert check(runner, "-j", "2", "--output-format", "concise", ".").output == expected
