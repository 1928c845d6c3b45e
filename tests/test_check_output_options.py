"""Ruff's output options on `check` (#16): -q/--quiet, --silent,
-o/--output-file, --show-files."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import CONV_BN_MODULE
from tests.test_cli import run


def _project(workdir: Path) -> None:
    (workdir / "model.py").write_text(CONV_BN_MODULE)
    (workdir / "clean.py").write_text("import torch\n\nx = torch.zeros(3)\n")
    (workdir / "notes.txt").write_text("not python\n")


def test_quiet_prints_the_diagnostics_without_the_summary(runner, workdir):
    _project(workdir)
    result = run(runner, "check", "-q", "--output-format", "concise", ".")
    assert result.exit_code == 1
    assert result.stdout.startswith("model.py:8:21: TL401")
    assert "Found" not in result.stdout
    clean = run(runner, "check", "--quiet", "clean.py")
    assert clean.exit_code == 0 and clean.stdout == ""


def test_silent_prints_nothing_and_keeps_the_exit_status(runner, workdir):
    _project(workdir)
    result = run(runner, "check", "--silent", ".")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
    assert run(runner, "check", "--silent", "clean.py").exit_code == 0


def test_output_file_gets_the_report(runner, workdir):
    _project(workdir)
    result = run(runner, "check", "-o", "report.json", "--output-format", "json", ".")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert '"code": "TL401"' in (workdir / "report.json").read_text()
    text = run(runner, "check", "--output-file", "report.txt", ".")
    assert text.stdout == ""
    assert "Found 1 error." in (workdir / "report.txt").read_text()
    (workdir / "dir").mkdir()
    bad = run(runner, "check", "-o", "dir", ".")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_show_files_lists_what_would_be_checked(runner, workdir):
    _project(workdir)
    result = run(runner, "check", "--show-files", ".")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["clean.py", "model.py"]
