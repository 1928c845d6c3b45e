"""Exit codes and counts: `fix - --diff`, `--statistics` (text and JSON), `check --unsafe-fixes`,
and a `check` summary that counts the fixes `fix` will really apply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tests.test_cli import BAD, run

# One safe TL201 fix (zeros() on the CPU, then moved) in a loop.
SAFE = """\
import torch


def train(steps):
    for _ in range(steps):
        x = torch.zeros(3).cuda()
"""

# Two findings of TL201: one with a safe fix (zeros), one with an unsafe one (rand: another RNG).
MIXED = SAFE + """\
        y = torch.rand(3).cuda()
"""


def test_fix_stdin_diff_exits_1_when_it_prints_a_diff(runner, workdir):
    result = run(runner, "fix", "--diff", "-", input=SAFE)
    assert "+        x = torch.zeros(3, device=\"cuda\")" in result.stdout
    assert result.exit_code == 1
    # The same as for a file path.
    (workdir / "a.py").write_text(SAFE)
    assert run(runner, "fix", "--diff", "a.py").exit_code == 1


def test_fix_stdin_diff_exits_0_without_fixes(runner, workdir):
    fixed = SAFE.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')
    result = run(runner, "fix", "--diff", "-", input=fixed)
    assert result.stdout == ""
    assert result.exit_code == 0


def test_fix_stdin_diff_in_a_real_process(workdir):
    result = subprocess.run(
        [sys.executable, "-m", "torchlint", "fix", "--diff", "-"], input=SAFE,
        capture_output=True, text=True, cwd=workdir, timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("--- a/-\n+++ b/-\n")


def test_statistics_one_row_per_code(runner, workdir):
    (workdir / "a.py").write_text(MIXED)
    result = run(runner, "check", "--statistics", "a.py")
    assert result.exit_code == 1
    rows = [line.split("\t") for line in result.output.splitlines()]
    # One row for TL201, whatever the fixability of its findings: [-] some are fixable.
    assert rows == [["2", "TL201", "[-] create-then-move"]]
    unsafe = run(runner, "check", "--statistics", "--unsafe-fixes", "a.py")
    assert unsafe.output.splitlines() == ["2\tTL201\t[*] create-then-move"]


def test_statistics_json_is_a_list(runner, workdir):
    (workdir / "a.py").write_text(MIXED)
    (workdir / "bad.py").write_text(BAD)
    result = run(runner, "check", "--statistics", "--output-format", "json", ".")
    assert result.exit_code == 1
    assert json.loads(result.output) == [
        {"code": "TL201", "name": "create-then-move", "count": 2, "fixable": False, "fixable_count": 1},
        {"code": "TL301", "name": "zero-grad-set-to-none", "count": 1, "fixable": False, "fixable_count": 0},
    ]
    empty = run(runner, "check", "--statistics", "--output-format", "json", "--select", "TL101", ".")
    assert empty.exit_code == 0 and json.loads(empty.output) == []


def test_check_accepts_unsafe_fixes(runner, workdir):
    (workdir / "a.py").write_text(MIXED)
    plain = run(runner, "check", "a.py")
    # Ruff's wording, word for word
    assert "[*] 1 fixable with `--fix` (1 unsafe fix available with `--fix --unsafe-fixes`).\n" in plain.output
    unsafe = run(runner, "check", "--unsafe-fixes", "a.py")
    assert unsafe.exit_code == 1
    assert "[*] 2 fixable with `--fix`.\n" in unsafe.output
    assert "hidden" not in unsafe.output
    # and `--no-unsafe-fixes` beats the configuration
    (workdir / "pyproject.toml").write_text("[tool.torchlint]\nunsafe-fixes = true\n")
    assert "[*] 2 fixable" in run(runner, "check", "a.py").output
    assert "[*] 1 fixable" in run(runner, "check", "--no-unsafe-fixes", "a.py").output


# pin_memory=True (TL202, safe) makes the copies of the loader's batches fixable (TL204):
# `check` sees one fixable diagnostic, `fix` applies three fixes.
FOLLOW_ON = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, optimizer):
    data = TensorDataset(torch.randn(64, 3), torch.randn(64))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def _notebook(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


def test_check_counts_the_fixes_that_become_possible(runner, workdir):
    (workdir / "train.py").write_text(FOLLOW_ON)
    hint = "[*] 1 fixable with `--fix`.\n2 more become fixable once these are applied.\n"
    cold = run(runner, "check", "train.py")
    assert "Found 1 error." in cold.output and hint in cold.output
    warm = run(runner, "check", "train.py")  # from the result cache
    assert warm.output == cold.output
    fixed = run(runner, "fix", "train.py")
    assert "Found 3 errors (3 fixed, 0 remaining)." in fixed.output
    assert run(runner, "check", "train.py").output == "All checks passed!\n"


def test_follow_on_count_in_a_notebook_and_on_stdin(runner, workdir):
    (workdir / "train.ipynb").write_text(_notebook(FOLLOW_ON))
    hint = "2 more become fixable once these are applied."
    assert hint in run(runner, "check", "train.ipynb").output
    assert hint in run(runner, "check", "-", input=FOLLOW_ON).output


def test_no_follow_on_note_when_fix_applies_exactly_the_fixable_ones(runner, workdir):
    (workdir / "a.py").write_text(SAFE)
    output = run(runner, "check", "a.py").output
    assert "[*] 1 fixable with `--fix`.\n" in output and "more become" not in output


def test_follow_on_count_is_the_same_with_worker_processes(runner, workdir):
    for i in range(30):  # enough files for the process pool
        (workdir / f"train_{i}.py").write_text(FOLLOW_ON)
    pooled = run(runner, "check", "--no-cache", "-j", "2", ".")
    serial = run(runner, "check", "--no-cache", "-j", "1", ".")
    assert pooled.output == serial.output
    assert "[*] 30 fixable with `--fix`.\n60 more become fixable once these are applied." in pooled.output


def _programs():
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "tests" / "fixtures").glob("*/input.py")):
        yield f"fixture {path.parent.name}", path.read_text()
    for path in sorted((root / "examples").glob("*.py")):
        yield f"examples/{path.name}", path.read_text()
    from torchlint.registry import all_rules

    for code, rule in all_rules().items():
        for i, example in enumerate(rule.INVALID):
            yield f"{code} INVALID[{i}]", example.code
    yield "follow-on", FOLLOW_ON


def test_fix_enables_declares_every_follow_on_fix():
    """The shortcut in `fix_total` (run the fixer only where a rule declares
    `fix_enables`) gives what running the fixer everywhere gives, on every
    program the tests know, for the default and the full selection, safe and unsafe."""
    from torchlint.config import Settings
    from torchlint.engine import fix_text, lint_text
    from torchlint.parallel import fix_total
    from torchlint.registry import all_codes, default_codes

    checked = 0
    for codes in (default_codes(), all_codes()):
        for unsafe in (False, True):
            settings = Settings(unsafe_fixes=unsafe)
            for label, text in _programs():
                found = lint_text(text, "train.py", settings, codes).diagnostics
                total = fix_total(text, "train.py", settings, codes, found)
                if total is None:
                    continue
                real = fix_text(text, "train.py", settings, codes, unsafe).fixed_count
                assert total == real, f"{label} (unsafe={unsafe}): check counts {total}, fix applies {real}"
                checked += 1
    assert checked > 50
