"""Configuration inheritance (`extend`) and `extend-ignore` (#16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import run
from torchlint.config import ConfigError, Resolver, load_config


def _toml(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_extend_ignore_adds_to_ignore(workdir):
    config = _toml(workdir / "torchlint.toml", 'ignore = ["TL1"]\nextend-ignore = ["TL2"]\n')
    profile = Resolver(config=config).run_profile
    assert not any(c.startswith(("TL1", "TL2")) for c in profile.codes)
    assert "TL301" in profile.codes


def test_extend_ignore_is_validated(runner, workdir):
    _toml(workdir / "torchlint.toml", 'extend-ignore = ["NOPE1"]\n')
    result = run(runner, "check", ".")
    assert result.exit_code == 2
    assert "torchlint.toml: extend-ignore: unknown rule selector `NOPE1`" in result.output


def test_extend_inherits_relative_to_the_file_and_chains(workdir):
    _toml(workdir / "org.toml", 'select = ["TL1", "TL2", "TL3"]\nextend-ignore = ["TL101"]\ntarget-torch = "1.13"\n')
    _toml(workdir / "team" / "base.toml", 'extend = "../org.toml"\nextend-ignore = ["TL102"]\n')
    project = _toml(workdir / "team" / "app" / "pyproject.toml",
                    '[tool.torchlint]\nextend = "../base.toml"\nextend-ignore = ["TL103"]\ntarget-torch = "2.1"\n')
    settings = load_config(project)
    assert settings.select == ("TL1", "TL2", "TL3")  # from two levels up
    assert settings.extend_ignore == ("TL101", "TL102", "TL103")  # extend-* add up, base first
    assert settings.target_torch == (2, 1)  # the file's own key wins
    assert settings.root == project.parent.resolve()
    assert settings.extends == (workdir / "team" / "base.toml", workdir / "org.toml")


def test_extend_replaces_plain_keys_and_adds_extend_lists(workdir):
    _toml(workdir / "base.toml", 'ignore = ["TL1"]\nextend-select = ["TL501"]\nextend-exclude = ["a"]\n')
    child = _toml(workdir / "sub" / "torchlint.toml",
                  'extend = "../base.toml"\nignore = ["TL2"]\nextend-select = ["TL502"]\nextend-exclude = ["b"]\n')
    settings = load_config(child)
    assert settings.ignore == ("TL2",)
    assert settings.extend_select == ("TL501", "TL502")
    assert settings.extend_exclude == ("a", "b")


def test_patterns_of_a_base_file_stay_relative_to_the_base(runner, workdir):
    # base.toml at the top excludes `project/generated/*.py`, a path relative to itself.
    _toml(workdir / "base.toml", 'extend-exclude = ["project/generated/*.py"]\n')
    _toml(workdir / "project" / "pyproject.toml", '[tool.torchlint]\nextend = "../base.toml"\n')
    for name in ("project/generated/x.py", "project/y.py"):
        _toml(workdir / name, "import torch\n")
    listed = run(runner, "check", "--show-files", "project").output.split()
    assert listed == ["project/y.py"]


def test_extend_cycle_is_a_clear_error(runner, workdir):
    _toml(workdir / "a.toml", 'extend = "b.toml"\n')
    _toml(workdir / "b.toml", 'extend = "./a.toml"\n')
    with pytest.raises(ConfigError, match="`extend` forms a cycle: .*a.toml -> .*b.toml -> .*a.toml"):
        load_config(workdir / "a.toml")
    _toml(workdir / "torchlint.toml", 'extend = "torchlint.toml"\n')
    result = run(runner, "check", ".")
    assert result.exit_code == 2 and "`extend` forms a cycle" in result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('extend = "missing.toml"', "extend: configuration file"),
        ("extend = 3", "`extend` must be the path of another configuration file"),
    ],
)
def test_bad_extend(runner, workdir, text, message):
    _toml(workdir / "torchlint.toml", text + "\n")
    result = run(runner, "check", ".")
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_an_error_in_the_base_names_the_base(runner, workdir):
    _toml(workdir / "base.toml", 'select = "TL1"\n')
    _toml(workdir / "torchlint.toml", 'extend = "base.toml"\n')
    result = run(runner, "check", ".")
    assert result.exit_code == 2
    assert f"{workdir / 'base.toml'}: `select` must be a list of strings" in result.output


def test_extend_a_pyproject(workdir):
    _toml(workdir / "shared" / "pyproject.toml", '[tool.torchlint]\nselect = ["TL6"]\n')
    child = _toml(workdir / "torchlint.toml", 'extend = "shared/pyproject.toml"\n')
    assert load_config(child).select == ("TL6",)
