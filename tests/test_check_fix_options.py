"""Ruff's fixing options on `check`: `--fix`, `--fix-only`, `--diff`,
`--exit-non-zero-on-fix` (#16), and the same on `fix`."""

from __future__ import annotations

from pathlib import Path

from tests.test_cli import run
from tests.helpers import CONV_BN_MODULE, ZERO_GRAD_STEP

SOURCE = CONV_BN_MODULE + "\n\n" + ZERO_GRAD_STEP


def _project(workdir: Path) -> Path:
    path = workdir / "train.py"
    path.write_text(SOURCE)
    return path


def test_check_fix_is_fix(runner, workdir):
    path = _project(workdir)
    result = run(runner, "check", "--fix", "--unsafe-fixes", "--select", "TL401", "train.py")
    assert result.exit_code == 0, result.output
    assert "bias=False" in path.read_text()
    assert "Found 1 error (1 fixed, 0 remaining)." in result.output
    assert "Fixed 1 error:" not in result.output  # the list is --show-fixes's, as in Ruff
    # Without the unsafe fixes nothing changes and what remains is reported, with exit 1.
    path.write_text(SOURCE)
    plain = run(runner, "check", "--fix", "train.py", "--output-format", "concise")
    assert plain.exit_code == 1
    assert path.read_text() == SOURCE
    assert "train.py:16:5: TL301" in plain.output
    assert "Found 2 errors.\n2 unsafe fixes available with `--fix --unsafe-fixes`.\n" in plain.output


def test_fix_only_does_not_report_what_remains(runner, workdir):
    path = _project(workdir)
    result = run(runner, "check", "--fix-only", "--unsafe-fixes", "--select", "TL401", "train.py")
    assert result.exit_code == 0
    assert "bias=False" in path.read_text()
    nothing_left_to_fix = run(runner, "check", "--fix-only", "train.py")
    assert nothing_left_to_fix.exit_code == 0  # the TL301 finding remains, unreported
    assert "TL301" not in nothing_left_to_fix.output
    assert nothing_left_to_fix.output == "No errors fixed (1 fix available with `--unsafe-fixes`).\n"


def test_exit_non_zero_on_fix(runner, workdir):
    _project(workdir)
    changed = run(runner, "check", "--fix-only", "--exit-non-zero-on-fix", "--unsafe-fixes", "train.py")
    assert changed.exit_code == 1
    unchanged = run(runner, "check", "--fix-only", "--exit-non-zero-on-fix", "--unsafe-fixes", "train.py")
    assert unchanged.exit_code == 0
    also_on_fix = run(runner, "fix", "--fix-only", "--exit-non-zero-on-fix", "train.py")
    assert also_on_fix.exit_code == 0


def test_check_diff_writes_nothing(runner, workdir):
    path = _project(workdir)
    result = run(runner, "check", "--diff", "--unsafe-fixes", "train.py")
    assert result.exit_code == 1
    assert "-        self.conv = nn.Conv2d(3, 8, 3)" in result.stdout
    assert "+        self.conv = nn.Conv2d(3, 8, 3, bias=False)" in result.stdout
    assert path.read_text() == SOURCE


def test_syntax_errors_are_still_reported_with_fix_only(runner, workdir):
    (workdir / "broken.py").write_text("import torch\ndef f(:\n")
    result = run(runner, "check", "--fix-only", "broken.py")
    assert result.exit_code == 1
    assert "SyntaxError" in result.output


def test_baseline_and_fix_do_not_mix(runner, workdir):
    _project(workdir)
    result = run(runner, "check", "--fix", "--baseline", "b.json", "train.py")
    assert result.exit_code == 2
    assert "cannot be combined" in result.output
