"""`torchlint fix`: writing, diffs, rounds, safety, encodings and line endings."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner

from tests.test_cli import BAD, run
from torchlint import engine
from torchlint.model import Applicability, Fix
from torchlint.registry import all_rules
from torchlint.rules import CATALOG
from torchlint.rule import Rule

FIXED = BAD.replace("set_to_none=False", "set_to_none=True")


@pytest.fixture
def project(workdir: Path) -> Path:
    (workdir / "bad.py").write_text(BAD)
    return workdir


def test_safe_fixes_only_by_default(runner, project):
    result = run(runner, "fix", "bad.py")
    assert (project / "bad.py").read_text() == BAD  # TL301's fix is unsafe
    assert result.exit_code == 1
    assert result.output.endswith(
        "Found 1 error.\n1 unsafe fix available with `--fix --unsafe-fixes`.\n"
    )


def test_unsafe_fixes_write_and_report(runner, project):
    result = run(runner, "fix", "--unsafe-fixes", "bad.py")
    assert (project / "bad.py").read_text() == FIXED
    assert result.exit_code == 0
    assert "Fixed 1 error:" in result.output
    assert "1 × TL301 (zero-grad-set-to-none)" in result.output
    assert "Found 1 error (1 fixed, 0 remaining)." in result.output
    again = run(runner, "fix", "--unsafe-fixes", "bad.py")
    assert again.exit_code == 0 and "All checks passed!" in again.output
    assert (project / "bad.py").read_text() == FIXED


def test_unsafe_fixes_from_config(runner, project):
    (project / "pyproject.toml").write_text("[tool.torchlint]\nunsafe-fixes = true\n")
    run(runner, "fix", "bad.py")
    assert (project / "bad.py").read_text() == FIXED
    (project / "bad.py").write_text(BAD)
    run(runner, "fix", "--no-unsafe-fixes", "bad.py")
    assert (project / "bad.py").read_text() == BAD


def test_diff_writes_nothing(runner, project):
    before = os.stat(project / "bad.py").st_mtime_ns
    result = run(runner, "fix", "--unsafe-fixes", "--diff", "bad.py")
    assert result.exit_code == 1
    assert "--- a/bad.py\n+++ b/bad.py\n" in result.output
    assert "-    optimizer.zero_grad(set_to_none=False)\n+    optimizer.zero_grad(set_to_none=True)\n" in result.output
    assert (project / "bad.py").read_text() == BAD
    assert os.stat(project / "bad.py").st_mtime_ns == before
    (project / "bad.py").write_text(FIXED)
    assert run(runner, "fix", "--unsafe-fixes", "--diff", "bad.py").exit_code == 0


def test_unchanged_file_is_not_written(runner, project):
    (project / "bad.py").write_text(FIXED)
    before = os.stat(project / "bad.py").st_mtime_ns
    run(runner, "fix", "--unsafe-fixes", ".")
    assert os.stat(project / "bad.py").st_mtime_ns == before


def test_stdin_fix_prints_code(runner, project):
    result = CliRunner().invoke(
        __import__("torchlint.cli", fromlist=["main"]).main,
        ["fix", "--unsafe-fixes", "-"], input=BAD, catch_exceptions=False,
    )
    assert result.stdout == FIXED


def test_encoding_line_endings_and_mode_are_kept(runner, project):
    crlf = BAD.replace("\n", "\r\n").encode("utf-8")
    (project / "crlf.py").write_bytes(crlf)
    bom = b"\xef\xbb\xbf" + BAD.encode("utf-8")
    (project / "bom.py").write_bytes(bom)
    latin = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + BAD.encode("utf-8")
    (project / "latin.py").write_bytes(latin)
    (project / "crlf.py").chmod(0o755)
    run(runner, "fix", "--unsafe-fixes", ".")
    assert (project / "crlf.py").read_bytes() == FIXED.replace("\n", "\r\n").encode("utf-8")
    assert (project / "bom.py").read_bytes() == b"\xef\xbb\xbf" + FIXED.encode("utf-8")
    assert (project / "latin.py").read_bytes() == b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + FIXED.encode("utf-8")
    assert stat.S_IMODE(os.stat(project / "crlf.py").st_mode) == 0o755
    assert not [p for p in project.iterdir() if p.name.endswith(".torchlint")]


def test_syntax_error_file_is_left_alone(runner, project):
    (project / "broken.py").write_text("import torch\ndef f(:\n")
    result = run(runner, "fix", "--unsafe-fixes", ".")
    assert (project / "broken.py").read_text() == "import torch\ndef f(:\n"
    assert (project / "bad.py").read_text() == FIXED
    assert result.exit_code == 1


class _BreaksCode(Rule):
    """A test-only rule whose fix would produce invalid code."""

    code = "TL999"
    name = "breaks-code"

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "step":
            self.report(
                node, "test",
                fix=Fix(Applicability.SAFE, "break", lambda: node.with_changes(func=cst.Name("lambda"))),
            )


def test_fix_producing_invalid_code_is_dropped(runner, project, monkeypatch):
    rules = dict(all_rules())
    rules["TL999"] = _BreaksCode
    monkeypatch.setitem(CATALOG, "TL999", ("test_fix", False))
    monkeypatch.setattr(engine, "all_rules", lambda: rules)
    monkeypatch.setattr("torchlint.registry.all_rules", lambda: rules)
    result = run(runner, "fix", "--select", "TL999,TL301", "--unsafe-fixes", "bad.py")
    # TL301 is still fixed; TL999's fix is dropped and reported as an internal error.
    assert (project / "bad.py").read_text() == FIXED
    assert "InternalError: the fix for TL999 would produce invalid code" in result.output
    assert result.exit_code == 2


def test_overlapping_fixes_take_several_rounds():
    from tests.helpers import fix

    # Two TL301 fixes on nested calls cannot be applied in one round.
    code = "import torch\nopt.zero_grad(set_to_none=False) or m.zero_grad(set_to_none=False)\n"
    result = fix(code, select=["TL301"], unsafe=True)
    assert result.text.count("set_to_none=True") == 2
    assert result.applied == {"TL301": 2}


class _RaisesInCodemod(_BreaksCode):
    code = "TL998"

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "step":
            self.report(node, "test", fix=Fix(Applicability.SAFE, "boom", lambda: 1 / 0))


def test_codemod_exception_is_an_internal_error(runner, project, monkeypatch):
    rules = dict(all_rules())
    rules["TL998"] = _RaisesInCodemod
    monkeypatch.setitem(CATALOG, "TL998", ("test_fix", False))
    monkeypatch.setattr(engine, "all_rules", lambda: rules)
    monkeypatch.setattr("torchlint.registry.all_rules", lambda: rules)
    result = run(runner, "fix", "--select", "TL998,TL301", "--unsafe-fixes", "bad.py")
    assert (project / "bad.py").read_text() == FIXED
    assert "the fix for TL998 raised ZeroDivisionError" in result.output
    assert "Traceback" not in result.output
    assert result.exit_code == 2


LOADER = '''\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda")


def run(dataset, model, optimizer):
    loader = DataLoader(TensorDataset(torch.randn(64, 3)), batch_size=16, num_workers=2)
    for x in loader:
        x = x.to(device)
        optimizer.zero_grad(set_to_none=False)
'''


def test_fix_result_lists_each_applied_fix_with_its_round():
    from torchlint.config import Settings

    result = engine.fix_text(LOADER, "m.py", Settings(), ["TL202", "TL204", "TL301"], unsafe=True)
    assert [(e.round, e.code, e.diagnostic.line) for e in result.edits] == [
        (0, "TL202", 8), (0, "TL301", 11), (1, "TL204", 10),
    ]
    assert sum(result.applied.values()) == len(result.edits)
    safe = engine.fix_text(LOADER, "m.py", Settings(), ["TL202", "TL204", "TL301"], unsafe=False)
    assert [e.code for e in safe.edits] == ["TL202", "TL204"]  # TL301's fix is unsafe


def test_single_fixes_apply_one_fix_each_to_the_original():
    from torchlint.config import Settings

    variants = engine.single_fixes(LOADER, "m.py", Settings(), ["TL202", "TL204", "TL301"], unsafe=True)
    assert [(d.code, d.line) for d, _ in variants] == [("TL202", 8), ("TL301", 11)]
    (_, pinned), (_, set_to_none) = variants
    assert pinned == LOADER.replace("num_workers=2)", "num_workers=2, pin_memory=True)")
    assert set_to_none == LOADER.replace("set_to_none=False", "set_to_none=True")
    assert engine.single_fixes(LOADER, "m.py", Settings(), ["TL202", "TL301"], unsafe=False)[0][0].code == "TL202"
    assert len(engine.single_fixes(LOADER, "m.py", Settings(), ["TL202", "TL301"], unsafe=False)) == 1
