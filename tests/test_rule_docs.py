"""Every rule: documentation in the fixed sections, and its own examples."""

from __future__ import annotations

import re

import pytest

from tests.helpers import fix, lint
from torchlint.model import FixAvailability
from torchlint.registry import all_rules
from torchlint.rule import Invalid, Valid

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


def _examples(kind):
    return list(_each_example(kind))


def _each_example(kind):
    for rule in RULES:
        for i, example in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, example, id=f"{rule.code}-{kind}[{i}]")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_every_rule_has_examples(rule):
    assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"
    assert all(type(e) is Valid for e in rule.VALID), f"{rule.code}: VALID holds Valid(...) examples"
    assert all(type(e) is Invalid for e in rule.INVALID), f"{rule.code}: INVALID holds Invalid(...) examples"
    fixes = [e.expected_fix for e in rule.INVALID if e.expected_fix is not None]
    if rule.fix is FixAvailability.NONE:
        assert not fixes, f"{rule.code} has no fix, so no example has an expected fix"
    else:
        assert fixes, f"{rule.code} has a fix: show it on an INVALID example (expected_fix=...)"


@pytest.mark.parametrize(("rule", "example"), _examples("VALID"))
def test_valid_example_is_silent(rule, example):
    assert lint(example.code, [rule.code], path=example.path) == [], f"reported:\n{example.code}"


@pytest.mark.parametrize(("rule", "example"), _examples("INVALID"))
def test_invalid_example_is_reported_and_fixed(rule, example):
    found = [d.code for d in lint(example.code, [rule.code], path=example.path)]
    assert found == [rule.code] * example.findings, f"{found} for:\n{example.code}"
    result = fix(example.code, [rule.code], unsafe=True, path=example.path)
    assert result.errors == []
    expected = example.code if example.expected_fix is None else example.expected_fix
    assert result.text == expected
    if example.expected_fix is not None:
        again = fix(result.text, [rule.code], unsafe=True, path=example.path)
        assert again.text == result.text, "fixing must be idempotent"
