"""docs/rules.md is generated from the rules' docstrings and must be up to date."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_readme_table_is_regenerated_between_its_markers():
    from torchlint.docs import TABLE_END, TABLE_START, readme_table, with_readme_table

    rules = list(all_rules().values())
    stale = f"# Title\n\n{TABLE_START}\n| TL999 | gone | on | none | x |\n{TABLE_END}\n\nMore.\n"
    fresh = with_readme_table(stale, rules)
    assert fresh == f"# Title\n\n{TABLE_START}\n{readme_table(rules)}{TABLE_END}\n\nMore.\n"
    assert "TL999" not in fresh and f"| TL101 | {all_rules()['TL101'].name} |" in fresh
    assert with_readme_table(fresh, rules) == fresh
    with pytest.raises(ValueError, match="lacks"):
        with_readme_table("# no table\n", rules)


def test_check_mode_covers_the_readme(tmp_path, monkeypatch):
    import torchlint.docs as docs

    readme = tmp_path / "README.md"
    readme.write_text(f"{docs.TABLE_START}\nold\n{docs.TABLE_END}\n")
    monkeypatch.setattr(docs, "README_PATH", readme)
    monkeypatch.setattr(docs, "DEFAULT_PATH", tmp_path / "rules.md")
    assert main(["--check"]) == 1
    assert main([]) == 0
    assert main(["--check"]) == 0
    assert "| TL101 |" in readme.read_text()
