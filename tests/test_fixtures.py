"""Golden tests: one directory per rule under ``tests/fixtures/``.

Each ``tests/fixtures/<CODE>[-variant]/`` holds
  input.py            positives, then a ``# --- near-misses ---`` line and code
                      that must not be reported
  expected.txt        the diagnostics, then the expected fixes as diffs from
                      the input (``torchlint/fixtures.py`` says the format;
                      ``python -m torchlint.fixtures DIR`` writes it)
  torchlint.toml      optional settings for the variant
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchlint.engine import fix_text, lint_text
from torchlint.fixtures import NEAR_MISS_MARKER, SAFE_TITLE, UNSAFE_TITLE, diff, outputs, render, settings_of

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CASES = sorted(p for p in FIXTURES.iterdir() if p.is_dir() and (p / "input.py").exists())


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_diagnostics_and_fixes_are_as_expected(case: Path) -> None:
    assert render(case) == (case / "expected.txt").read_text(), (
        f"{case.name}: run `python -m torchlint.fixtures {case.relative_to(FIXTURES.parent.parent)}` "
        "and review the diff if the change is intended"
    )


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_near_misses_are_present_and_silent(case: Path) -> None:
    settings, codes = settings_of(case)
    text = (case / "input.py").read_text()
    assert NEAR_MISS_MARKER in text, "every rule fixture needs near-misses"
    marker_line = text.splitlines().index(NEAR_MISS_MARKER) + 1
    near_misses = text.split(NEAR_MISS_MARKER, 1)[1]
    assert len([l for l in near_misses.splitlines() if l.strip() and not l.strip().startswith("#")]) >= 5
    diagnostics = lint_text(text, "input.py", settings, codes).diagnostics
    assert [d for d in diagnostics if d.line > marker_line] == []
    assert [d for d in diagnostics if d.line < marker_line], "a fixture needs positives"


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_fixed_output_parses_and_is_stable(case: Path, unsafe: bool) -> None:
    settings, codes = settings_of(case)
    _, _, safe, all_fixes = outputs(case)
    fixed = all_fixes if unsafe else safe
    ast.parse(fixed)
    again = fix_text(fixed, "input.py", settings, codes, unsafe)
    assert again.text == fixed, "fixing must be idempotent"
    assert again.applied == {}


def test_expected_fixes_are_diffs_not_copies():
    for case in CASES:
        assert not (case / "fixed.py").exists() and not (case / "fixed_unsafe.py").exists(), case.name


def test_snapshot_format(tmp_path):
    case = tmp_path / "TL301"
    case.mkdir()
    source = "import torch\nfor x in loader:\n    opt.zero_grad(set_to_none=False)\n    step(x)\n"
    (case / "input.py").write_text(source)
    fixed = source.replace("=False", "=True")
    assert render(case) == (
        f"3:5: TL301 [unsafe]\n{UNSAFE_TITLE}\n@@ -1,4 +1,4 @@\n import torch\n for x in loader:\n"
        "-    opt.zero_grad(set_to_none=False)\n+    opt.zero_grad(set_to_none=True)\n     step(x)\n"
    )
    assert diff(source, fixed) in render(case) and SAFE_TITLE + "\n" not in render(case)
    assert diff("a\n", "a\nb") == "@@ -1 +1,2 @@\n a\n+b\n\\ No newline at end of file\n"
