"""The composite GitHub Action (`action.yml`), its steps run locally.

GitHub runs each step's `run` in bash with the step's `env`, after evaluating
`${{ inputs.* }}` and the step's `if`.  This test does the same for the few
expression forms the action uses (and fails on any other), runs the check
steps for real on a small project with the torchlint installed here, and checks
the install step installs the action's own checkout, at the ref the workflow
named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from tests.helpers import CONV_BN_MODULE

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

BAD = CONV_BN_MODULE


def _value(expression: str, inputs: Dict[str, str]) -> str:
    m = re.fullmatch(r"inputs\.([\w-]+)", expression)
    if not m:
        raise AssertionError(f"expression this test does not know: {expression!r}")
    return inputs[m.group(1)]


def _condition(condition: str, inputs: Dict[str, str]) -> bool:
    m = re.fullmatch(r"inputs\.([\w-]+) != ''", condition.strip())
    if not m:
        raise AssertionError(f"condition this test does not know: {condition!r}")
    return inputs[m.group(1)] != ""


def _inputs(**given: str) -> Dict[str, str]:
    values = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    for name, value in given.items():
        name = name.replace("_", "-")
        assert name in values, name
        values[name] = value
    return values


def _run_steps(project: Path, **given: str) -> List[Tuple[str, subprocess.CompletedProcess]]:
    inputs = _inputs(**given)
    bin_dir = str(Path(sys.executable).parent)
    results = []
    for step in ACTION["runs"]["steps"]:
        if "if" in step and not _condition(step["if"], inputs):
            continue
        if "pip install" in step["run"]:
            continue  # installs the action's checkout (test below); torchlint is installed here already
        env = {**os.environ, "GITHUB_ACTION_PATH": str(ROOT), "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
        for key, value in (step.get("env") or {}).items():
            env[key] = EXPR.sub(lambda m: _value(m.group(1), inputs), str(value))
        results.append((step["name"], subprocess.run(
            ["bash", "-e", "-c", step["run"]], cwd=project, env=env, capture_output=True, text=True, timeout=300,
        )))
    return results


@pytest.fixture
def project(tmp_path: Path) -> Path:
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text(BAD)
    (tmp_path / "src" / "clean.py").write_text("import torch\n\nx = torch.zeros(3)\n")
    return tmp_path


def test_the_action_is_composite_and_installs_its_own_ref():
    assert ACTION["runs"]["using"] == "composite"
    install = ACTION["runs"]["steps"][0]
    assert install["run"] == 'python -m pip install --quiet "$GITHUB_ACTION_PATH"'
    # $GITHUB_ACTION_PATH is the action's checkout at the ref the workflow names, and
    # this repository root is what pip installs from there.
    assert (ROOT / "pyproject.toml").exists()


def test_inputs_reach_scripts_only_through_the_environment():
    # Interpolating ${{ inputs.* }} into `run` would let an input inject shell code.
    for step in ACTION["runs"]["steps"]:
        assert not EXPR.search(step["run"]), step["name"]
        for value in (step.get("env") or {}).values():
            for m in EXPR.finditer(str(value)):
                _value(m.group(1), _inputs())  # only known forms


def test_findings_annotate_and_fail_the_step(project):
    results = _run_steps(project, paths="src")
    assert [name for name, _ in results] == ["Check (annotations on the pull request)"]
    check = results[0][1]
    assert check.returncode == 1, check.stderr
    assert re.search(r"^::(error|warning) .*file=src/model\.py,line=8,.*TL401", check.stdout, re.M), check.stdout


def test_sarif_is_written_and_the_check_still_decides(project):
    results = _run_steps(project, paths="src", sarif_file="torchlint.sarif")
    names = [name for name, _ in results]
    assert names == ["Write SARIF", "Check (annotations on the pull request)"]
    assert results[0][1].returncode == 0, results[0][1].stderr
    sarif = json.loads((project / "torchlint.sarif").read_text())
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["TL401"]
    assert results[1][1].returncode == 1


def test_args_pass_options(project):
    results = _run_steps(project, paths="src", args="--ignore TL401")
    assert results[0][1].returncode == 0, results[0][1].stdout + results[0][1].stderr
