"""``python -m torchlint.new_rule CODE NAME`` scaffolds a rule that the catalog,
the docs, the examples, the fixture and the benchmark checks accept at once.

The scaffolder runs in a copy of the package (``torchlint/`` with ``rules/`` and
``codemods/`` inside it, the README, ``docs/``, an empty ``tests/fixtures/``),
imported from there in subprocesses, so the repository is not touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from torchlint.new_rule import class_name, module_name

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "torchlint", tmp_path / "torchlint", ignore=ignore)
    shutil.copytree(ROOT / "rules", tmp_path / "torchlint" / "rules", ignore=ignore)
    shutil.copytree(ROOT / "codemods", tmp_path / "torchlint" / "codemods", ignore=ignore)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "tests" / "fixtures").mkdir(parents=True)
    return tmp_path


def python(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=300)


# Run in the copy after scaffolding: every check the suite makes of a rule,
# through the same functions (catalog, docs, examples, fixture, benchmark).
CHECKS = r"""
import sys
from pathlib import Path

import torchlint
assert Path(torchlint.__file__).parent.parent == Path.cwd(), torchlint.__file__
from torchlint.docs import README_PATH, render, with_readme_table, DEFAULT_PATH
from torchlint.engine import fix_text, lint_text
from torchlint.fixtures import render as render_fixture
from torchlint.registry import all_codes, all_rules, default_codes
from torchlint.rules import CATALOG
from torchlint.config import Settings

code, module = sys.argv[1], sys.argv[2]
rules = all_rules()
rule = rules[code]
assert CATALOG[code] == (module, rule.default) and rule.__module__ == "torchlint.rules." + module
assert sorted(CATALOG) == sorted(rules) == all_codes() and code not in default_codes()
assert DEFAULT_PATH.read_text() == render(rules.values())
assert with_readme_table(README_PATH.read_text(), rules.values()) == README_PATH.read_text()
assert "| " + code + " | " + rule.name + " |" in README_PATH.read_text()
for example in rule.VALID:
    assert lint_text(example.code, "snippet.py", Settings(), [code]).diagnostics == []
for example in rule.INVALID:
    found = lint_text(example.code, "snippet.py", Settings(), [code]).diagnostics
    assert [d.code for d in found] == [code] * example.findings
    assert fix_text(example.code, "snippet.py", Settings(), [code], True).text == example.expected_fix
case = Path("tests/fixtures") / code
assert render_fixture(case) == (case / "expected.txt").read_text()
assert "[unsafe]" in (case / "expected.txt").read_text()
bench = rule.BENCHMARK
assert fix_text(bench.before, "benchmark.py", Settings(), [code], True).text == bench.after
print("ok")
"""


def test_scaffolded_rule_passes_the_rule_checks(copy: Path) -> None:
    before = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    result = python(copy, "-m", "torchlint.new_rule", "TL998", "scaffolded-example")
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and "Traceback" not in result.stderr
    after = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    written = after - before
    module = module_name("TL998", "scaffolded-example")
    # Two files written by hand later (the rule and its fixture's input), and
    # the fixture's rendered expectations; the docs are regenerated in place.
    assert written == {
        Path("torchlint/rules") / f"{module}.py",
        Path("tests/fixtures/TL998/input.py"),
        Path("tests/fixtures/TL998/expected.txt"),
    }
    assert f"class {class_name('scaffolded-example')}(Rule)" in (copy / "torchlint/rules" / f"{module}.py").read_text()
    checks = python(copy, "-c", CHECKS, "TL998", module)
    assert checks.returncode == 0 and checks.stdout.strip() == "ok", checks.stderr
    # The docs check passes, and the CLI knows the rule without other registration.
    assert python(copy, "-m", "torchlint.docs", "--check").returncode == 0
    shown = python(copy, "-m", "torchlint", "rule", "TL998")
    assert shown.returncode == 0 and "scaffolded-example" in shown.stdout
    shutil.copy(copy / "tests/fixtures/TL998/input.py", copy / "train.py")  # not a test file
    checked = python(copy, "-m", "torchlint", "check", "--no-cache", "--select", "TL998",
                     "--output-format", "concise", "train.py")
    assert checked.returncode == 1 and checked.stdout.count("TL998") == 3, checked.stdout + checked.stderr


def test_scaffolder_refuses_bad_or_taken_codes_and_names(copy: Path) -> None:
    for args, message in [
        (["TL1", "x-y"], "not a rule code"),
        (["TL998", "Bad_Name"], "kebab-case"),
        (["TL101", "new-name"], "TL101 is taken"),
        (["TL998", "item-in-loop"], "name item-in-loop is taken"),
        (["TL998"], "usage"),
    ]:
        result = python(copy, "-m", "torchlint.new_rule", *args)
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (copy / "tests" / "fixtures" / "TL998").exists()
