"""End-to-end tests of the command line through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from torchlint import __version__
from torchlint.cli import main

BAD = """\
import torch


def step(optimizer, model, batch):
    optimizer.zero_grad(set_to_none=False)
    model(batch).sum().backward()
    optimizer.step()
"""

GOOD = """\
import torch


def step(optimizer):
    optimizer.zero_grad()
"""


@pytest.fixture
def project(workdir: Path) -> Path:
    return workdir


def run(runner: CliRunner, *args: str, input: str | None = None):
    return runner.invoke(main, list(args), input=input, catch_exceptions=False)


def test_version(runner):
    result = run(runner, "--version")
    assert result.exit_code == 0
    assert __version__ in result.output


def test_clean_file_exits_zero(runner, project):
    (project / "ok.py").write_text(GOOD)
    result = run(runner, "check", "ok.py")
    assert result.exit_code == 0
    assert "All checks passed!" in result.output


def test_findings_exit_one_and_concise_format(runner, project):
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "concise", ".")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("bad.py:5:5: TL301 `zero_grad(set_to_none=False)`")
    assert "Found 1 error." in result.output


def test_full_format_shows_excerpt_and_hint(runner, project):
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "bad.py")
    assert "5 |     optimizer.zero_grad(set_to_none=False)" in result.output
    assert "  |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ TL301" in result.output
    assert "= help: Pass `set_to_none=True` (unsafe fix" in result.output


def test_exit_zero(runner, project):
    (project / "bad.py").write_text(BAD)
    assert run(runner, "check", "--exit-zero", "bad.py").exit_code == 0


def test_json_format(runner, project):
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "json", "bad.py")
    data = json.loads(result.output)
    assert len(data) == 1
    item = data[0]
    assert item["code"] == "TL301"
    assert item["filename"] == "bad.py"
    assert item["location"] == {"row": 5, "column": 5}
    assert item["end_location"] == {"row": 5, "column": 43}
    assert item["fix"] == {
        "applicability": "unsafe", "message": "Pass `set_to_none=True`",
        # Ruff's `edits`: what applying only this fix replaces (end exclusive)
        "edits": [{"content": "True", "location": {"row": 5, "column": 37}, "end_location": {"row": 5, "column": 42}}],
    }
    assert isinstance(item["message"], str)


def test_sarif_format(runner, project):
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "sarif", "bad.py")
    sarif = json.loads(result.output)
    assert sarif["version"] == "2.1.0"
    run0 = sarif["runs"][0]
    assert run0["tool"]["driver"]["name"] == "torchlint"
    rule_ids = [r["id"] for r in run0["tool"]["driver"]["rules"]]
    assert "TL301" in rule_ids
    (res,) = run0["results"]
    assert res["ruleId"] == "TL301"
    assert rule_ids[res["ruleIndex"]] == "TL301"
    region = res["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (5, 5)


def test_github_format(runner, project):
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "github", "bad.py")
    line = result.output.splitlines()[0]
    assert line.startswith("::error title=torchlint (TL301),file=bad.py,line=5,col=5,endLine=5,endColumn=43::")


def test_statistics(runner, project):
    (project / "a.py").write_text(BAD)
    (project / "b.py").write_text(BAD)
    result = run(runner, "check", "--statistics", ".")
    assert result.exit_code == 1
    assert result.output.split() == ["2", "TL301", "zero-grad-set-to-none"]


def test_unknown_selector_is_usage_error(runner, project):
    (project / "bad.py").write_text(BAD)
    for option in ("--select", "--ignore", "--extend-select"):
        result = run(runner, "check", option, "TL999", "bad.py")
        assert result.exit_code == 2
        assert "unknown rule selector `TL999`" in result.output


def test_select_ignore_prefixes(runner, project):
    (project / "bad.py").write_text(BAD)
    assert run(runner, "check", "--ignore", "TL3", "bad.py").exit_code == 0
    assert run(runner, "check", "--select", "TL3", "bad.py").exit_code == 1
    assert run(runner, "check", "--select", "ALL", "--ignore", "TL301", "bad.py").exit_code == 0
    assert run(runner, "check", "--select", "tl301", "bad.py").exit_code == 1


def test_stdin(runner, project):
    result = run(runner, "check", "--stdin-filename", "pkg/train.py", "-", input=BAD)
    assert result.exit_code == 1
    assert "pkg/train.py:5:5: TL301" in result.output


def test_syntax_error_is_reported_and_run_continues(runner, project):
    (project / "broken.py").write_text("import torch\ndef f(:\n")
    (project / "bad.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "concise", ".")
    assert result.exit_code == 1
    assert "broken.py:2:7: SyntaxError:" in result.output
    assert "bad.py:5:5: TL301" in result.output
    assert "Traceback" not in result.output


def test_non_utf8_file_gets_clear_message(runner, project):
    (project / "latin.py").write_bytes(b"import torch\nname = '\xe9t\xe9'\n")
    result = run(runner, "check", "--output-format", "concise", ".")
    assert result.exit_code == 1
    assert "latin.py:1:1: IOError: cannot read file: not valid UTF-8" in result.output


def test_declared_encoding_is_honoured(runner, project):
    (project / "latin.py").write_bytes(
        b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9'\n" + BAD.split("\n", 1)[1].encode()
    )
    result = run(runner, "check", "--output-format", "concise", "latin.py")
    assert "TL301" in result.output and "IOError" not in result.output


def test_missing_path_is_an_error(runner, project):
    result = run(runner, "check", "nope.py")
    assert result.exit_code == 2
    assert "nope.py: No such file or directory" in result.output
    assert "All checks passed!" not in result.output


def test_unreadable_file(runner, project, monkeypatch):
    path = project / "secret.py"
    path.write_text(BAD)
    original = Path.read_bytes

    def deny(self):
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied")
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", deny)
    result = run(runner, "check", "--output-format", "concise", "secret.py")
    assert result.exit_code == 1
    assert "secret.py:1:1: IOError: cannot read file: Permission denied" in result.output


def test_directory_without_python_files(runner, project):
    (project / "empty").mkdir()
    result = run(runner, "check", "empty")
    assert result.exit_code == 0
    assert "no Python files found" in result.output


def test_output_is_sorted(runner, project):
    for name in ("z.py", "a.py", "m.py"):
        (project / name).write_text(BAD + BAD.replace("import torch\n", ""))
    result = run(runner, "check", "--output-format", "concise", ".")
    lines = [l for l in result.output.splitlines() if "TL301" in l]
    keys = [(l.split(":")[0], int(l.split(":")[1])) for l in lines]
    assert keys == sorted(keys) and len(keys) == 6


def test_rule_docs(runner):
    result = run(runner, "rule", "TL301")
    assert result.exit_code == 0
    for section in ("## What it does", "## Why is this bad?", "## Fix safety"):
        assert section in result.output
    listing = run(runner, "rule", "--all")
    assert "TL301  zero-grad-set-to-none" in listing.output
    unknown = run(runner, "rule", "TL999")
    assert unknown.exit_code == 2
    assert "unknown rule `TL999`" in unknown.output


def test_python_m_and_no_torch_import(project):
    import subprocess
    import sys

    (project / "bad.py").write_text(BAD)
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['torchlint', 'check', 'bad.py']\n"
        "try:\n    runpy.run_module('torchlint', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "assert 'torch' not in sys.modules, 'the checker imported torch'\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "bad.py:5:5: TL301" in result.stdout
