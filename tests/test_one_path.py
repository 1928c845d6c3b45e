"""`check` and `fix` take every file along one path (torchlint/parallel.py's
``process``): the same worker pool, the same cache, the same inputs
(torchlint/inputs.py), whatever the mode."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import torchlint.parallel as parallel
from tests.test_cli import BAD, GOOD, run
from torchlint.inputs import NotebookInput, PythonInput, input_for
from torchlint.source import SourceError

N_FILES = 2 * parallel.MIN_FILES_FOR_POOL

NOTEBOOK = json.dumps({
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import torch\n", "%matplotlib inline\n"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["def step(optimizer):\n", "    optimizer.zero_grad(set_to_none=False)\n"]},
    ],
    "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5,
}, indent=1) + "\n"


def _tree(root: Path) -> Path:
    """Many files, some with a fix (unsafe: TL301), some without, one broken, a notebook."""
    for i in range(N_FILES):
        package = root / f"pkg{i % 3}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"mod{i:03}.py").write_text((BAD, GOOD, "x = 1\n")[i % 3] + "\n" * (i % 4))
    (root / "broken.py").write_text("import torch\ndef f(:\n")
    (root / "train.ipynb").write_text(NOTEBOOK, encoding="utf-8")
    return root


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and ".torchlint_cache" not in p.parts}


@pytest.fixture
def trees(tmp_path: Path, monkeypatch) -> tuple:
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    return one, two


@pytest.mark.parametrize("args", [
    ("fix", "--unsafe-fixes"),
    ("fix", "--unsafe-fixes", "--diff"),
    ("check", "--fix-only", "--unsafe-fixes"),
    ("fix", "--output-format", "json", "--unsafe-fixes"),
])
def test_fix_in_the_pool_matches_one_process(runner, trees, monkeypatch, args):
    one, two = trees
    monkeypatch.chdir(one)
    serial = run(runner, *args, "--no-cache", "-j", "1", ".")
    monkeypatch.chdir(two)
    pooled = run(runner, *args, "--no-cache", "-j", "2", ".")
    assert serial.exit_code == pooled.exit_code
    assert serial.output == pooled.output
    assert _snapshot(one) == _snapshot(two)
    if "--diff" not in args:
        fixed = (one / "pkg0" / "mod000.py").read_text()
        assert "set_to_none=True" in fixed
        assert "set_to_none=True" in (one / "train.ipynb").read_text()
        assert "%matplotlib inline" in (one / "train.ipynb").read_text()


def test_fix_uses_the_worker_pool_for_a_large_run(runner, trees, monkeypatch):
    one, _ = trees
    monkeypatch.chdir(one)
    pools = []
    real = parallel._run_pool

    def spy(items, profiles, jobs, progress, task=parallel.Task(), workers=None):
        pools.append((len(items), task.mode))
        return real(items, profiles, jobs, progress, task, workers)

    monkeypatch.setattr(parallel, "_run_pool", spy)
    result = run(runner, "fix", "--no-cache", "-j", "2", "--unsafe-fixes", ".")
    assert result.exit_code == 1  # the syntax error remains
    assert pools == [(N_FILES + 2, parallel.FIX)]  # one pass: analysed and fixed in the workers


def test_fix_skips_files_whose_cached_findings_have_no_fix(runner, trees, monkeypatch):
    one, _ = trees
    monkeypatch.chdir(one)
    analysed, fixed = [], []
    real_analyse, real_fix = parallel.analyse_file, parallel.fix_source
    monkeypatch.setattr(parallel, "analyse_file", lambda *a: analysed.append(a[0]) or real_analyse(*a))
    monkeypatch.setattr(parallel, "fix_source", lambda result, *a, **k: fixed.append(result.display)
                        or real_fix(result, *a, **k))
    assert run(runner, "check", "-j", "1", ".").exit_code == 1  # fills the cache
    analysed.clear()
    before = _snapshot(one)
    result = run(runner, "fix", "-j", "1", ".")  # safe fixes only: TL301's is unsafe
    assert analysed == []  # every file came from the cache
    assert fixed == []  # and none has a fix to apply
    assert _snapshot(one) == before
    assert "Found" in result.output
    assert run(runner, "check", "-j", "1", "--unsafe-fixes", ".").exit_code == 1  # its own cache namespace
    analysed.clear()
    run(runner, "fix", "-j", "1", "--unsafe-fixes", ".")
    assert analysed == []  # from the cache, fixed in the second stage
    expected = sorted(f"pkg0/mod{i:03}.py" for i in range(0, N_FILES, 3)) + ["train.ipynb"]
    assert sorted(d.replace("\\", "/") for d in fixed) == expected
    assert "set_to_none=True" in (one / "pkg0" / "mod000.py").read_text()


def test_fix_reports_what_check_reports_when_nothing_is_fixed(runner, trees, monkeypatch):
    one, _ = trees
    monkeypatch.chdir(one)
    checked = run(runner, "check", "--no-cache", "--output-format", "concise", ".")
    fixed = run(runner, "fix", "--no-cache", "--output-format", "concise", ".")
    assert checked.exit_code == fixed.exit_code == 1
    assert [line for line in checked.output.splitlines() if ":" in line and "error" not in line.lower()] == \
        [line for line in fixed.output.splitlines() if ":" in line and "error" not in line.lower()]


def test_fix_stdin_passes_its_input_through_one_path(runner, workdir):
    result = run(runner, "fix", "--unsafe-fixes", "-", input=BAD)
    assert "set_to_none=True" in result.output
    result = run(runner, "fix", "-", input=GOOD)
    assert result.output.startswith(GOOD)
    result = run(runner, "fix", "--unsafe-fixes", "--stdin-filename", "nb.ipynb", "-", input=NOTEBOOK)
    assert '"    optimizer.zero_grad(set_to_none=True)\\n"' in result.output


def test_process_check_and_fix_of_one_file(workdir):
    from torchlint.config import Resolver, Overrides

    (workdir / "bad.py").write_text(BAD)
    profile = Resolver(Overrides(unsafe_fixes=True), None).run_profile
    item = ("bad.py", str(workdir / "bad.py"), 0)
    checked = parallel.process(item, [profile], parallel.Task())
    assert checked.fix is None and [d.code for d in checked.diagnostics] == ["TL301"]
    fixed = parallel.process(item, [profile], parallel.Task(parallel.DIFF, unsafe=True))
    assert fixed.fix is not None and fixed.fix.changed
    assert fixed.fix.fixed.applied == Counter({"TL301": 1})
    assert fixed.fix.fixed.diff_text.startswith("--- a/bad.py\n+++ b/bad.py\n")
    assert (workdir / "bad.py").read_text() == BAD  # process never writes
    safe = parallel.process(item, [profile], parallel.Task(parallel.FIX, unsafe=False))
    assert safe.fix is None  # an unsafe fix only: nothing to do


def test_inputs_pick_their_kind_from_the_name(workdir):
    assert isinstance(input_for("a.py", None), PythonInput)
    assert isinstance(input_for("b.IPYNB", workdir / "b.IPYNB"), NotebookInput)
    assert input_for("a.py", None).indexed and not input_for("b.ipynb", None).indexed
    (workdir / "latin.py").write_bytes(b"# -*- coding: latin-1 -*-\nx = '\xe9'\n")
    item = input_for("latin.py", workdir / "latin.py")
    source = item.read()
    assert source.encoding == "iso-8859-1" and "\u00e9" in source.text
    item.write(source, source.text + "y = 1\n")
    assert (workdir / "latin.py").read_bytes() == b"# -*- coding: latin-1 -*-\nx = '\xe9'\ny = 1\n"
    with pytest.raises(SourceError):
        input_for("gone.py", workdir / "gone.py").read()


def test_a_notebooks_program_and_its_cells(workdir):
    notebook = input_for("t.ipynb", workdir / "t.ipynb")
    program = notebook.program(NOTEBOOK)
    assert "optimizer.zero_grad(set_to_none=False)" in program and "%matplotlib" not in program
    edited = notebook.with_program(NOTEBOOK, program.replace("False)", "False)  # noqa: TL301"))
    assert edited is not None and "# noqa: TL301" in json.loads(edited)["cells"][2]["source"][1]
    assert notebook.excerpts(NOTEBOOK) and set(notebook.excerpts(NOTEBOOK)) <= {"t.ipynb:cell 2", "t.ipynb:cell 3"}
    assert notebook.excerpts("{not json") == {}
