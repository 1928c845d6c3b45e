"""Hostile inputs, concurrent runs and interruption: a clear message or a
correct result, never a traceback, and never a half-written file."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_cli import run
from torchlint.config import Settings
from torchlint.engine import fix_text
from torchlint.registry import default_codes

FIXABLE = "import torch\n\ndef forward(n):\n    return torch.zeros(n).cuda()\n"  # per step by its role
FIXED = 'import torch\n\ndef forward(n):\n    return torch.zeros(n, device="cuda")\n'


def _torchlint(*args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torchlint", *args], cwd=cwd, capture_output=True, text=True, timeout=300, **kwargs
    )


# -- encodings, line endings, indentation ------------------------------------------


def test_bom_and_crlf_are_kept_by_fix(runner, workdir):
    (workdir / "bom.py").write_bytes(b"\xef\xbb\xbf" + FIXABLE.replace("\n", "\r\n").encode())
    result = run(runner, "check", "--output-format", "concise", "bom.py")
    assert "bom.py:4:12: TL201" in result.output  # the BOM does not shift columns
    run(runner, "fix", "bom.py")
    assert (workdir / "bom.py").read_bytes() == b"\xef\xbb\xbf" + FIXED.replace("\n", "\r\n").encode()


def test_tabs_are_kept_by_fix(runner, workdir):
    (workdir / "tabs.py").write_text(FIXABLE.replace("    ", "\t"))
    run(runner, "fix", "tabs.py")
    assert (workdir / "tabs.py").read_text() == FIXED.replace("    ", "\t")


def test_null_bytes_are_a_syntax_error(runner, workdir):
    (workdir / "nul.py").write_bytes(b"import torch\nx = 1\x00\n")
    result = run(runner, "check", "nul.py")
    assert result.exit_code == 1
    assert "SyntaxError: source code string cannot contain null bytes" in result.output


# -- size and depth ----------------------------------------------------------------------


def test_fifty_thousand_line_file(workdir):
    body = "".join(f"value_{i} = {i} * 2\n" for i in range(50_000))
    (workdir / "big.py").write_text("import torch\n" + body + "for b in loader:\n    x = torch.ones(4).cuda()\n")
    result = _torchlint("check", "--output-format", "concise", "big.py", cwd=workdir)
    assert result.returncode == 1, result.stderr
    assert "big.py:50003:9: TL201" in result.stdout


@pytest.mark.parametrize("opening, closing", [("f(", ")"), ("[", "]"), ("(", ")")])
def test_brackets_nested_beyond_pythons_limit_are_a_syntax_error(runner, workdir, opening, closing):
    """CPython refuses more than 200 levels; LibCST would need time and memory
    quadratic in the depth (1.5 GB at 800), so Python's parser decides first."""
    depth = 1000
    (workdir / "deep.py").write_text("import torch\nx = " + opening * depth + "1" + closing * depth + "\n")
    result = run(runner, "check", "deep.py")
    assert result.exit_code == 1
    assert "deep.py:2:" in result.output and "SyntaxError: too many nested parentheses" in result.output
    # The excerpt shows a window of the 3,000-character line, not all of it.
    assert max(len(line) for line in result.output.splitlines()) < 250


def test_deep_but_valid_nesting_is_analysed(runner, workdir):
    (workdir / "deep.py").write_text("import torch\nfor b in loader:\n    x = " + "(" * 150 + "torch.zeros(3).cuda()" + ")" * 150 + "\n")
    result = run(runner, "check", "--output-format", "concise", "deep.py")
    assert "deep.py:3:159: TL201" in result.output


def test_long_sum_is_analysed(runner, workdir):
    (workdir / "sum.py").write_text("import torch\nx = " + " + ".join(["1"] * 2_000) + "\nfor b in loader:\n    y = torch.zeros(3).cuda()\n")
    result = run(runner, "check", "--output-format", "concise", "sum.py")
    assert "sum.py:4:9: TL201" in result.output


def test_sum_too_long_for_the_parser_is_skipped_with_a_message(runner, workdir):
    """LibCST needs time quadratic in an operator chain (about 40 s for
    10,000 terms): such a file is named and skipped instead."""
    (workdir / "sum.py").write_text("import torch\nx = " + " + ".join(["1"] * 10_000) + "\ny = torch.zeros(3).cuda()\n")
    (workdir / "ok.py").write_text(FIXABLE)
    result = run(runner, "check", "--output-format", "concise", ".")
    assert result.exit_code == 2
    assert "sum.py:2:5: InternalError: an expression here chains 9,999 binary operators" in result.output
    assert "ok.py:4:12: TL201" in result.output


# -- paths ------------------------------------------------------------------------------------


def test_dangling_symlink_in_a_directory_is_reported_and_the_run_goes_on(runner, workdir):
    (workdir / "pkg").mkdir()
    (workdir / "pkg" / "gone.py").symlink_to(workdir / "nowhere.py")
    (workdir / "pkg" / "ok.py").write_text(FIXABLE)
    result = run(runner, "check", "--output-format", "concise", "pkg")
    assert result.exit_code == 1
    assert "pkg/gone.py:1:1: IOError: cannot read file: No such file or directory" in result.output
    assert "pkg/ok.py:4:12: TL201" in result.output


def test_empty_directory_warns_and_passes(runner, workdir):
    (workdir / "empty").mkdir()
    result = run(runner, "check", "empty")
    assert result.exit_code == 0
    assert "no Python files found" in result.output


def test_directory_named_like_a_python_file(runner, workdir):
    (workdir / "weird.py").mkdir()
    (workdir / "weird.py" / "inner.py").write_text(FIXABLE)
    result = run(runner, "check", "--output-format", "concise", ".")
    assert "weird.py/inner.py:4:12: TL201" in result.output


# -- concurrency and interruption ----------------------------------------------------------------


def _tree(root: Path, files: int) -> str:
    """``files`` modules, each with TL201 findings to fix (safe fixes), some padding."""
    padding = "".join(f"def helper_{i}(x):\n    return x * {i} + sum(range({i}))\n\n" for i in range(60))
    text = FIXABLE + padding + "".join(f"t{i} = torch.rand(8).to('cuda')\n" for i in range(5))
    for i in range(files):
        folder = root / f"pkg{i % 10}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{i}.py").write_text(text)
    return text


def _assert_whole(root: Path, original: str, fixed: str, *, allow_original: bool) -> int:
    """Every module is the fixed text (or, after an interruption, the untouched
    original); no temporary file is left behind. Returns how many were fixed."""
    assert not [p for p in root.rglob("*") if p.name.endswith(".torchlint")]
    done = 0
    for path in root.rglob("*.py"):
        text = path.read_text()
        ast.parse(text)
        if text == fixed:
            done += 1
        else:
            assert allow_original and text == original, path
    return done


def test_two_fix_runs_at_once_leave_every_file_whole(workdir):
    original = _tree(workdir, 80)
    fixed = fix_text(original, "m.py", Settings(), default_codes(), False).text
    assert fixed != original
    command = [sys.executable, "-m", "torchlint", "fix", "."]
    runs = [subprocess.Popen(command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for process in runs:
        _, err = process.communicate(timeout=300)
        assert process.returncode in (0, 1), err.decode()
        assert b"Traceback" not in err
    assert _assert_whole(workdir, original, fixed, allow_original=False) == 80


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interrupted_fix_leaves_no_half_written_file(workdir):
    original = _tree(workdir, 400)
    fixed = fix_text(original, "m.py", Settings(), default_codes(), False).text
    process = subprocess.Popen(
        [sys.executable, "-m", "torchlint", "fix", "."], cwd=workdir,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # Interrupt once the first files have been written.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if any(p.read_text() == fixed for p in (workdir / "pkg0").glob("*.py")):
            break
        time.sleep(0.05)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert "Traceback" not in err
    done = _assert_whole(workdir, original, fixed, allow_original=True)
    if process.returncode == 130:
        assert "torchlint: interrupted" in err
        assert 0 < done < 400
    else:  # it finished before the signal came
        assert process.returncode in (0, 1) and done == 400
