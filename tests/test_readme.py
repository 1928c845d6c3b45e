"""The README's promises: its two commands, and its rule table."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from torchlint.docs import with_readme_table
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
        row = f"| {code} | {rule.name} | {default} | {rule.fix.value} | {rule.summary} |"
        assert row in README, f"README rule table lacks: {row}"
    # The table is generated from the rules, and nothing else is in it.
    assert with_readme_table(README, all_rules().values()) == README, (
        "the README's rule table is out of date: run `python -m torchlint.docs`"
    )


def _torchlint(args, cwd):
    exe = shutil.which("torchlint")
    argv = [exe, *args] if exe else [sys.executable, "-m", "torchlint", *args]
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sample_output_is_what_the_command_prints():
    (command, shown), = re.findall(r"\(`(torchlint check [^`]+)`\):\n\n```\n(.*?)```", README, re.S)
    result = _torchlint(command.split()[1:], ROOT)
    assert result.returncode == 1, result.stderr
    assert result.stdout == shown


def test_own_code_commands_run(tmp_path):
    block = re.search(r"Then, on your own code:\n\n```\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.strip()]
    assert len(commands) == 6
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    before = (tmp_path / "examples" / "train.py").read_text()
    for command in commands:
        assert command[0] == "torchlint"
        result = _torchlint(command[1:], tmp_path)
        assert result.returncode in (0, 1), (command, result.stderr)
        assert "Traceback" not in result.stdout + result.stderr
        if command[1:3] == ["fix", "--diff"]:
            assert "+++ b/examples/train.py" in result.stdout
            assert (tmp_path / "examples" / "train.py").read_text() == before
        if command[1:] == ["fix", "."]:
            assert (tmp_path / "examples" / "train.py").read_text() != before
        if command[1:] == ["rule", "TL201"]:
            assert result.stdout.startswith("# TL201: create-then-move")


def test_documentation_links_resolve():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for target in re.findall(r"\]\(((?!https?:|#)[^)#]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_pre_commit_snippet_names_this_release():
    from torchlint import __version__

    (rev,) = re.findall(r"^\s+rev: (\S+)", README, re.M)
    assert rev == f"v{__version__}"
    tags = subprocess.run(["git", "-C", str(ROOT), "tag", "--list"], capture_output=True, text=True)
    if tags.returncode == 0 and tags.stdout.strip():
        # A checkout that carries tags (a clone, not an archive) has the release tag.
        assert rev in tags.stdout.split()


def test_readme_is_for_users():
    # Internals, robustness and performance figures live in docs/, not here.
    # (Raised from 20,000 when the baseline, the GitHub Action and the editor
    # server arrived: each gets a few lines here and its details in docs/.)
    assert len(README.encode()) < 22_000
    for heading in ("## Install", "## Quick start", "## Rules", "## Configuration",
                    "## Suppressing a finding", "## pre-commit", "## Jupyter notebooks",
                    "## Verifying fixes", "## In CI"):
        assert f"\n{heading}\n" in README, heading
