"""Every rule: documentation in the fixed sections, and its own examples."""

from __future__ import annotations

import re

import pytest

from tests.helpers import lint
from torchlint.model import FixAvailability
from torchlint.registry import all_rules

RULES = list(all_rules().values())
SECTIONS = ["## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety", "## References"]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_documentation_sections(rule):
    doc = rule.documentation()
    positions = [doc.find(section) for section in SECTIONS]
    assert all(p >= 0 for p in positions), f"{rule.code} lacks a section"
    assert positions == sorted(positions), f"{rule.code}: sections out of order"
    assert re.fullmatch(r"TL\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.summary
    safety = doc.split("## Fix safety", 1)[1].split("## References", 1)[0].lower()
    if rule.fix is not FixAvailability.NONE:
        assert "safe" in safety or "unsafe" in safety


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_examples(rule):
    assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"
    for code in rule.VALID:
        assert [d for d in lint(code, [rule.code])] == [], f"{rule.code} VALID example reported:\n{code}"
    for code in rule.INVALID:
        assert [d.code for d in lint(code, [rule.code])], f"{rule.code} INVALID example silent:\n{code}"
