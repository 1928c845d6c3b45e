"""The README's promises: its two commands, and its rule table."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from torchlint.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
COMMANDS = re.findall(r"```bash\n(.*?)\n```", README, re.S)


def test_first_command_checks_the_demo_script():
    first = COMMANDS[0]
    assert first == "pip install -e . && torchlint check examples/"
    # The install half has already happened in this environment; run the rest.
    command = first.split("&&", 1)[1].split()
    exe = shutil.which("torchlint")
    argv = [exe, *command[1:]] if exe else [sys.executable, "-m", "torchlint", *command[1:]]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    found = set(re.findall(r"^examples/\w+\.py:\d+:\d+: (TL\d{3})", result.stdout, re.M))
    default_rules = {code for code, rule in all_rules().items() if rule.default}
    assert found == default_rules, "the demo scripts should show every default rule"
    assert "Traceback" not in result.stdout + result.stderr


def test_ci_runs_the_readme_test_command():
    second = COMMANDS[1]
    assert second == 'pip install -e ".[test]" && python -m pytest'
    ci = (ROOT / ".ci" / "run").read_text()
    lines = ci.splitlines()
    # Both README commands run verbatim, in a venv without torch (a newcomer's),
    # before torch is installed; then the suite runs again with torch.
    first = COMMANDS[0]
    assert any(line.startswith(first) for line in lines)
    assert second in lines
    install_torch = next(i for i, line in enumerate(lines) if "pip install" in line and "torch==2.13.0" in line)
    assert lines.index(second) < install_torch
    assert "python -m pytest" in lines[install_torch + 1:]


def test_rule_table_lists_every_rule():
    for code, rule in all_rules().items():
        default = "on" if rule.default else "opt-in"
        row = f"| {code} | {rule.name} | {default} | {rule.fix.value} |"
        assert row in README, f"README rule table lacks: {row}"
