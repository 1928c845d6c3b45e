"""Ruff's command-line habits (#16): --show-fixes, --color, --show-settings,
--exclude/--extend-exclude and --config KEY=VALUE."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import CONV_BN_MODULE, ZERO_GRAD_STEP
from tests.test_cli import run

# TL401 (unsafe fix) and TL301 (unsafe fix) in one file, and a safe TL201 in a loop.
SOURCE = CONV_BN_MODULE + "\n\n" + ZERO_GRAD_STEP
LOOP = """\
import torch


def train(loader, device):
    for batch in loader:
        noise = torch.zeros(3).to(device)
        mask = torch.ones(3).to(device)
"""


def _write(workdir: Path, name: str = "train.py", text: str = SOURCE) -> Path:
    path = workdir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- --show-fixes ----------------------------------------------------------------


def test_show_fixes_lists_the_fixes_applied_per_file_and_rule(runner, workdir):
    _write(workdir, "a.py", LOOP)
    _write(workdir, "b.py", LOOP.replace("mask = torch.ones(3).to(device)", "pass"))
    result = run(runner, "check", "--fix", "--show-fixes", "a.py", "b.py")
    assert result.exit_code == 0, result.output
    assert result.output.endswith(
        "Fixed 3 errors:\n- a.py:\n    2 × TL201 (create-then-move)\n- b.py:\n    1 × TL201 (create-then-move)\n\n"
        "Found 3 errors (3 fixed, 0 remaining).\n"
    )


def test_show_fixes_without_fix_lists_what_fix_would_apply(runner, workdir):
    _write(workdir, "a.py", LOOP)
    result = run(runner, "check", "--show-fixes", "--output-format", "concise", "a.py")
    assert result.exit_code == 1
    assert "Would fix 2 errors:\n- a.py:\n    2 × TL201 (create-then-move)\n\nFound 2 errors.\n" in result.output
    assert "a.py" in result.output and (workdir / "a.py").read_text() == LOOP  # nothing written
    # Only the fixes that apply: TL301's and TL401's are unsafe.
    _write(workdir, "b.py")
    unsafe_only = run(runner, "check", "--show-fixes", "b.py")
    assert "Would fix" not in unsafe_only.output
    assert "Would fix 2 errors:" in run(runner, "check", "--show-fixes", "--unsafe-fixes", "b.py").output


def test_fix_lists_its_fixes_unless_no_show_fixes(runner, workdir):
    _write(workdir, "a.py", LOOP)
    assert "Would fix 2 errors:\n- a.py:" in run(runner, "fix", "--diff", "a.py").output
    quiet = run(runner, "fix", "--no-show-fixes", "a.py")
    assert quiet.output == "Found 2 errors (2 fixed, 0 remaining).\n"


def test_fix_and_check_fix_print_the_same_summary(runner, workdir):
    path = _write(workdir)
    check = run(runner, "check", "--fix", "train.py")
    path.write_text(SOURCE)
    fix = run(runner, "fix", "--no-show-fixes", "train.py")
    assert check.output == fix.output
    assert check.output.endswith("Found 2 errors.\n2 unsafe fixes available with `--fix --unsafe-fixes`.\n")


def test_fix_only_and_diff_summaries_are_ruffs(runner, workdir):
    _write(workdir, "a.py", LOOP)
    _write(workdir, "b.py")
    diff = run(runner, "check", "--diff", "a.py", "b.py")
    assert diff.exit_code == 1
    assert diff.output.endswith("Would fix 2 errors (2 additional fixes available with `--unsafe-fixes`).\n")
    fixed = run(runner, "check", "--fix-only", "a.py", "b.py")
    assert fixed.output == "Fixed 2 errors (2 additional fixes available with `--unsafe-fixes`).\n"
    assert run(runner, "check", "--fix-only", "a.py").output == ""  # nothing to say, as Ruff


# -- --color ---------------------------------------------------------------------

ESC = "\x1b["


@pytest.mark.parametrize(
    ("args", "env", "colored"),
    [
        ([], {}, False),  # not a terminal
        (["--color", "always"], {}, True),
        (["--color", "never"], {"FORCE_COLOR": "1"}, False),  # the option beats the environment
        ([], {"FORCE_COLOR": "1"}, True),
        ([], {"CLICOLOR_FORCE": "1"}, True),
        ([], {"CLICOLOR_FORCE": "0"}, False),
        ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins over auto
        (["--color", "always"], {"NO_COLOR": "1"}, True),
    ],
)
def test_color_option_and_environment(runner, workdir, monkeypatch, args, env, colored):
    for name in ("NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _write(workdir, "a.py", LOOP)
    check = run(runner, "check", *args, "a.py")
    assert (ESC in check.output) is colored
    if colored:
        assert "\x1b[31m\x1b[1mTL201" in check.output or "\x1b[1m\x1b[31mTL201" in check.output
    fix = run(runner, "fix", "--diff", *args, "a.py")
    assert (ESC in fix.output) is colored
    rule = run(runner, "rule", *args, "TL201")
    assert (ESC in rule.output) is colored
    assert rule.output.replace("\x1b[1m", "").replace("\x1b[0m", "") == run(
        runner, "rule", "--color", "never", "TL201").output


def test_color_never_leaves_a_file_report_plain(runner, workdir):
    _write(workdir, "a.py", LOOP)
    run(runner, "check", "--color", "always", "-o", "report.txt", "a.py")
    assert ESC not in (workdir / "report.txt").read_text()


def test_bad_color_value_is_a_usage_error(runner, workdir):
    result = run(runner, "check", "--color", "sometimes")
    assert result.exit_code == 2 and "sometimes" in result.output


# -- --show-settings -------------------------------------------------------------


def test_show_settings_prints_the_first_files_settings(runner, workdir):
    (workdir / "base.toml").write_text('select = ["TL1", "TL2", "TL4"]\nextend-ignore = ["TL101"]\n')
    project = workdir / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.torchlint]\nextend = "../base.toml"\nextend-ignore = ["TL203"]\ntarget-torch = "2.1"\n'
        '[tool.torchlint.per-file-ignores]\n"scripts/*" = ["TL4"]\n'
    )
    _write(project, "scripts/run.py", LOOP)
    _write(project, "train.py", LOOP)
    result = run(runner, "check", "--show-settings", "--config", "extend-select = ['TL601']", "project/scripts")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith('Resolved settings for: "project/scripts/run.py"\n')
    assert f'Settings path: "{project / "pyproject.toml"}"\n' in out
    assert f'Extends: ["{workdir / "base.toml"}"]\n' in out
    assert "Command-line overrides: extend-select = [\"TL601\"]\n" in out
    assert 'select = ["TL1", "TL2", "TL4"]\n' in out
    assert 'extend-ignore = ["TL101", "TL203"]\n' in out
    assert 'per-file-ignores = {"scripts/*" = ["TL4"]}\n' in out
    assert 'target-torch = "2.1"\n' in out
    assert "unsafe-fixes = false  # not set" in out
    # The rules enabled for this file: per-file-ignores took TL4 away.
    assert 'enabled = ["TL102", "TL103", "TL201", "TL202", "TL204", "TL601"]\n' in out
    assert run(runner, "check", "--show-settings", "--config", "extend-select = ['TL601']",
               "project/scripts").output == out  # deterministic
    other = run(runner, "check", "--show-settings", "project/train.py").output
    assert '"TL401", "TL402"' in other
    assert (project / "train.py").read_text() == LOOP


def test_show_settings_without_configuration(runner, workdir):
    result = run(runner, "check", "--show-settings")
    assert result.exit_code == 0
    assert "Resolved settings for: (the current directory)\nSettings path: (none: the defaults)\n" in result.output
    assert "select = (the default rules)" in result.output


# -- --exclude / --extend-exclude on the command line --------------------------------


def test_exclude_and_extend_exclude_options(runner, workdir):
    (workdir / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["legacy"]\n')
    for name in ("src/a.py", "src/gen_pb2.py", "legacy/old.py", "build/out.py", "tools/x.py"):
        _write(workdir, name, LOOP)

    def files(*args):
        return sorted(run(runner, "check", "--show-files", *args).output.split())

    assert files() == ["src/a.py", "src/gen_pb2.py", "tools/x.py"]
    assert files("--extend-exclude", "*_pb2.py") == ["src/a.py", "tools/x.py"]
    assert files("--extend-exclude", "*_pb2.py,tools/") == ["src/a.py"]
    assert files("--extend-exclude", "*_pb2.py", "--extend-exclude", "tools") == ["src/a.py"]
    # --exclude replaces the default and configured `exclude` (build/ comes back),
    # and the configured extend-exclude still applies.
    assert files("--exclude", "tools") == ["build/out.py", "src/a.py", "src/gen_pb2.py"]


def test_command_line_patterns_with_a_slash_are_relative_to_the_current_directory(runner, workdir, monkeypatch):
    (workdir / "pyproject.toml").write_text("[tool.torchlint]\n")
    _write(workdir, "pkg/sub/a.py", LOOP)
    _write(workdir, "pkg/b.py", LOOP)
    monkeypatch.chdir(workdir / "pkg")
    listed = run(runner, "check", "--show-files", "--extend-exclude", "sub/*.py", ".").output.split()
    assert listed == ["b.py"]


# -- --config KEY=VALUE ----------------------------------------------------------------


def test_config_overrides_a_setting(runner, workdir):
    _write(workdir)
    everything = run(runner, "check", "--output-format", "concise", "train.py").output
    assert "TL401" in everything and "TL301" in everything
    only = run(runner, "check", "--output-format", "concise", "--config", "select = ['TL3']", "train.py")
    assert "TL401" not in only.output and "TL301" in only.output
    fmt = run(runner, "check", "--config", "output-format='concise'", "--config", "extend-ignore=['TL301']",
               "train.py")
    assert fmt.output.splitlines()[0].startswith("train.py:") and "TL301" not in fmt.output


def test_config_override_applies_over_each_files_configuration(runner, workdir):
    (workdir / "torchlint.toml").write_text('select = ["TL4"]\n')
    _write(workdir)
    assert "TL401" in run(runner, "check", "train.py").output
    # target-torch in TOML syntax, as Ruff's example
    (workdir / "old.py").write_text(
        "import torch\n\n\ndef step(optimizer, model, batch):\n    optimizer.zero_grad()\n"
        "    model(batch).backward()\n    optimizer.step()\n"
    )
    assert run(runner, "check", "--config", "select=['TL301']", "old.py").exit_code == 0
    assert run(runner, "check", "--config", "select=['TL301']", "--config", "target-torch='1.13'",
               "old.py").exit_code == 1


def test_config_file_and_overrides_together(runner, workdir):
    (workdir / "other.toml").write_text('select = ["TL3", "TL4"]\n')
    _write(workdir)
    result = run(runner, "check", "--config", "other.toml", "--config", "ignore = ['TL401']",
                 "--output-format", "concise", "train.py")
    assert "TL301" in result.output and "TL401" not in result.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nope = 1", "--config: unknown option `nope`"),
        ("select = 'TL1'", "--config: `select` must be a list of strings"),
        ("select = ['XX9']", "unknown rule selector `XX9`"),
        ("select = [", "is neither an existing configuration file nor a TOML `KEY = VALUE` override"),
        ("target-torch = 'two'", "`target-torch` must be a version"),
        ("select = []\nignore = []", "must set exactly one option"),
        ("extend = 'x.toml'", "`extend` cannot be set on the command line"),
        ("missing.toml", "configuration file missing.toml does not exist"),
        ("select = []", "--config: no rules selected"),
    ],
)
def test_bad_config_values_are_usage_errors(runner, workdir, value, message):
    _write(workdir)
    result = run(runner, "check", "--config", value, "train.py")
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_two_config_files_are_refused(runner, workdir):
    (workdir / "a.toml").write_text("")
    (workdir / "b.toml").write_text("")
    result = run(runner, "check", "--config", "a.toml", "--config", "b.toml")
    assert result.exit_code == 2 and "only one configuration file" in result.output
