"""`check --baseline FILE` / `--update-baseline`: adopt torchlint on existing code.

The fingerprints must survive edits that move code (lines added above a
finding, a function moved down the file, a cell inserted above in a notebook),
tell a new copy of an accepted line from the accepted ones, and ratchet: a
finding that disappears leaves the baseline and is never re-admitted.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import ZERO_GRAD_STEP
from tests.test_cli import run

STEP = ZERO_GRAD_STEP

EVAL = """\
def evaluate(model, batch):
    optimizer.zero_grad(set_to_none=False)
    return model(batch)
"""

CONV = """\
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x))
"""


def _write(path: Path, *parts: str) -> None:
    path.write_text("import torch\nimport torch.nn as nn\n\n\n" + "\n\n".join(parts))


def _create(runner, *paths: str, baseline: str = "baseline.json"):
    result = run(runner, "check", *paths, "--baseline", baseline, "--update-baseline")
    assert result.exit_code == 0, result.output
    return json.loads(Path(baseline).read_text())


def _codes_and_lines(output: str):
    return [
        (line.split(" ")[1], int(line.split(":")[1]))
        for line in output.splitlines()
        if line.startswith("train.py:")
    ]


def test_update_writes_every_finding_and_check_then_passes(runner, workdir):
    _write(workdir / "train.py", STEP, CONV)
    data = _create(runner, "train.py")
    assert data["version"] == 1
    assert sorted(e["code"] for e in data["findings"]) == ["TL301", "TL401"]
    assert {e["path"] for e in data["findings"]} == {"train.py"}
    result = run(runner, "check", "train.py", "--baseline", "baseline.json")
    assert result.exit_code == 0, result.output
    assert "All checks passed!" in result.stdout
    assert "2 findings in the baseline not shown" in result.stderr


def test_code_moved_by_edits_above_is_still_baselined(runner, workdir):
    _write(workdir / "train.py", STEP, CONV)
    _create(runner, "train.py")
    # New code above both findings, and the two blocks swapped.
    helper = "def helper(x):\n    # a comment\n    y = x + 1\n    return y\n"
    _write(workdir / "train.py", helper, CONV, STEP)
    result = run(runner, "check", "train.py", "--baseline", "baseline.json")
    assert result.exit_code == 0, result.output


def test_a_new_copy_of_an_accepted_line_is_reported_and_only_it(runner, workdir):
    _write(workdir / "train.py", STEP)
    _create(runner, "train.py")
    _write(workdir / "train.py", STEP, EVAL)  # the same zero_grad line, in a new function
    result = run(runner, "check", "train.py", "--baseline", "baseline.json", "--output-format", "concise")
    assert result.exit_code == 1
    # The copy in `evaluate` (line 12) is the new one: its context is not the accepted one's.
    assert _codes_and_lines(result.stdout) == [("TL301", 12)]
    assert "1 finding in the baseline not shown" in result.stderr


def test_new_copy_above_the_accepted_one_is_the_one_reported(runner, workdir):
    _write(workdir / "train.py", STEP)
    _create(runner, "train.py")
    _write(workdir / "train.py", EVAL, STEP)
    result = run(runner, "check", "train.py", "--baseline", "baseline.json", "--output-format", "concise")
    assert _codes_and_lines(result.stdout) == [("TL301", 6)]


def test_other_findings_are_reported_with_the_usual_exit_code(runner, workdir):
    _write(workdir / "train.py", STEP)
    _create(runner, "train.py")
    _write(workdir / "train.py", STEP, CONV)
    result = run(runner, "check", "train.py", "--baseline", "baseline.json", "--output-format", "json")
    assert result.exit_code == 1
    assert [d["code"] for d in json.loads(result.stdout)] == ["TL401"]


def test_ratchet_removes_fixed_findings_and_never_readmits_them(runner, workdir):
    _write(workdir / "train.py", STEP, CONV)
    _create(runner, "train.py")
    _write(workdir / "train.py", CONV)  # the zero_grad finding is fixed
    data = _create(runner, "train.py")
    assert [e["code"] for e in data["findings"]] == ["TL401"]
    _write(workdir / "train.py", STEP, CONV)  # ... and comes back
    result = run(runner, "check", "train.py", "--baseline", "baseline.json", "--update-baseline")
    assert result.exit_code == 1  # reported, not admitted
    assert "TL301" in result.stdout
    assert [e["code"] for e in json.loads(Path("baseline.json").read_text())["findings"]] == ["TL401"]


def test_update_of_some_files_keeps_the_entries_of_the_others(runner, workdir):
    _write(workdir / "train.py", STEP)
    _write(workdir / "model.py", CONV)
    _create(runner, "train.py", "model.py")
    _write(workdir / "train.py", "x = 1\n")  # fixed
    data = _create(runner, "train.py")  # pre-commit style: only the changed file
    assert [(e["code"], e["path"]) for e in data["findings"]] == [("TL401", "model.py")]


def test_paths_are_relative_to_the_baseline_file(runner, workdir):
    (workdir / "src").mkdir()
    _write(workdir / "src" / "train.py", STEP)
    data = _create(runner, "src/train.py", baseline="src/baseline.json")
    assert [e["path"] for e in data["findings"]] == ["train.py"]
    import os

    os.chdir(workdir / "src")
    result = run(runner, "check", "train.py", "--baseline", "baseline.json")
    assert result.exit_code == 0, result.output


def test_notebook_findings_survive_a_cell_inserted_above(runner, workdir):
    def notebook(*cells: str) -> str:
        return json.dumps({
            "cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                      for c in cells],
            "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5,
        })

    (workdir / "nb.ipynb").write_text(notebook("import torch\n", STEP))
    _create(runner, "nb.ipynb")
    (workdir / "nb.ipynb").write_text(notebook("import torch\n", "x = 1\n", STEP))
    result = run(runner, "check", "nb.ipynb", "--baseline", "baseline.json")
    assert result.exit_code == 0, result.output


def test_syntax_errors_are_never_baselined(runner, workdir):
    (workdir / "broken.py").write_text("import torch\ndef f(:\n")
    result = run(runner, "check", "broken.py", "--baseline", "baseline.json", "--update-baseline")
    assert result.exit_code == 1  # reported, as without a baseline (Ruff's exit code too)
    assert "SyntaxError" in result.stdout
    assert json.loads(Path("baseline.json").read_text())["findings"] == []


def test_bad_baseline_usage_is_a_clear_error(runner, workdir):
    _write(workdir / "train.py", STEP)
    missing = run(runner, "check", "train.py", "--baseline", "nope.json")
    assert missing.exit_code == 2
    assert "baseline nope.json does not exist" in missing.output
    assert "Traceback" not in missing.output
    Path("bad.json").write_text("{not json")
    bad = run(runner, "check", "train.py", "--baseline", "bad.json")
    assert bad.exit_code == 2 and "not valid JSON" in bad.output
    Path("other.json").write_text('{"version": 9, "findings": []}')
    other = run(runner, "check", "train.py", "--baseline", "other.json")
    assert other.exit_code == 2 and "is not a torchlint baseline" in other.output
    alone = run(runner, "check", "train.py", "--update-baseline")
    assert alone.exit_code == 2 and "--update-baseline needs --baseline" in alone.output
