"""docs/rules.md is generated from the rules' docstrings and must be up to date."""

from __future__ import annotations

import subprocess
import sys

from torchlint.docs import DEFAULT_PATH, main, render, rule_section
from torchlint.registry import all_rules


def test_generated_rules_md_is_up_to_date():
    expected = render(all_rules().values())
    assert DEFAULT_PATH.exists(), "run `python -m torchlint.docs` to generate docs/rules.md"
    assert DEFAULT_PATH.read_text(encoding="utf-8") == expected, (
        "docs/rules.md is out of date: run `python -m torchlint.docs`"
    )


def test_every_rule_has_a_section_and_an_index_row():
    text = DEFAULT_PATH.read_text(encoding="utf-8")
    for code, rule in all_rules().items():
        assert f"\n## {code}: {rule.name}\n" in text
        assert f"| [{code}](#{code.lower()}-{rule.name}) | {rule.name} |" in text


def test_headings_in_code_blocks_are_left_alone():
    class Demo:
        code, name, default = "TL999", "demo", True
        fix = all_rules()["TL101"].fix

        @staticmethod
        def documentation():
            return "## What it does\nx\n```python\n# a comment, not a heading\n```\n## References\n- y"

    section = rule_section(Demo)  # type: ignore[arg-type]
    assert "### What it does" in section and "### References" in section
    assert "\n# a comment, not a heading\n" in section


def test_check_mode_reports_stale_file(tmp_path):
    stale = tmp_path / "rules.md"
    stale.write_text("old\n")
    assert main(["--check", str(stale)]) == 1
    assert main([str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "torchlint.docs", "--check", str(tmp_path / "missing.md")],
        capture_output=True, text=True,
    )
    assert result.returncode == 1 and "out of date" in result.stderr
