"""Golden tests: one directory per rule under ``tests/fixtures/``.

Each ``tests/fixtures/<CODE>[-variant]/`` holds
  input.py            positives, then a ``# --- near-misses ---`` line and code
                      that must not be reported
  expected.txt        one ``LINE:COL: CODE`` line per diagnostic, with `` [*]``
                      for a safe fix and `` [unsafe]`` for an unsafe one
  fixed.py            the result of ``torchlint fix`` (absent: nothing changes)
  fixed_unsafe.py     the result with ``--unsafe-fixes`` (absent: as fixed.py)
  torchlint.toml      optional settings for the variant
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import codes_for, settings_for
from torchlint.engine import fix_text, lint_text
from torchlint.model import Applicability

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NEAR_MISS_MARKER = "# --- near-misses ---"
CASES = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and (p / "input.py").exists())


def _settings(case: Path):
    code = case.name.split("-", 1)[0]
    config = case / "torchlint.toml"
    return settings_for([code], config if config.exists() else None)


def _render(diagnostics) -> str:
    lines = []
    for d in diagnostics:
        mark = ""
        if d.fix is not None:
            mark = " [*]" if d.fix.applicability is Applicability.SAFE else " [unsafe]"
        lines.append(f"{d.line}:{d.column}: {d.code or d.kind.value}{mark}")
    return "\n".join(lines) + ("\n" if lines else "")


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_diagnostics(case: Path) -> None:
    settings = _settings(case)
    text = (case / "input.py").read_text()
    diagnostics = lint_text(text, "input.py", settings, codes_for(settings)).diagnostics
    assert _render(diagnostics) == (case / "expected.txt").read_text()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_near_misses_are_present_and_silent(case: Path) -> None:
    settings = _settings(case)
    text = (case / "input.py").read_text()
    assert NEAR_MISS_MARKER in text, "every rule fixture needs near-misses"
    marker_line = text.splitlines().index(NEAR_MISS_MARKER) + 1
    near_misses = text.split(NEAR_MISS_MARKER, 1)[1]
    assert len([l for l in near_misses.splitlines() if l.strip() and not l.strip().startswith("#")]) >= 5
    diagnostics = lint_text(text, "input.py", settings, codes_for(settings)).diagnostics
    assert [d for d in diagnostics if d.line > marker_line] == []
    assert [d for d in diagnostics if d.line < marker_line], "a fixture needs positives"


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_fix(case: Path, unsafe: bool) -> None:
    settings = _settings(case)
    codes = codes_for(settings)
    text = (case / "input.py").read_text()
    expected_path = case / ("fixed_unsafe.py" if unsafe else "fixed.py")
    if not expected_path.exists() and unsafe:
        expected_path = case / "fixed.py"
    expected = expected_path.read_text() if expected_path.exists() else text
    result = fix_text(text, "input.py", settings, codes, unsafe)
    assert result.errors == []
    assert result.text == expected
    ast.parse(result.text)
    again = fix_text(result.text, "input.py", settings, codes, unsafe)
    assert again.text == result.text, "fixing must be idempotent"
    assert again.applied == {}
