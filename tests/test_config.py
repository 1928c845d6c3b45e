"""Configuration files, selection, exclusion and suppression comments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import BAD, GOOD, run


@pytest.fixture
def project(workdir: Path) -> Path:
    (workdir / "bad.py").write_text(BAD)
    return workdir


def test_pyproject_ignore(runner, project):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    assert run(runner, "check", ".").exit_code == 0


def test_torchlint_toml_beats_pyproject_in_same_directory(runner, project):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    (project / "torchlint.toml").write_text('select = ["TL3"]\n')
    assert run(runner, "check", ".").exit_code == 1


def test_nearest_config_is_found_from_a_subdirectory(runner, project):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    sub = project / "pkg" / "sub"
    sub.mkdir(parents=True)
    (sub / "bad.py").write_text(BAD)
    assert run(runner, "check", "pkg/sub/bad.py").exit_code == 0


def test_cli_select_beats_config(runner, project):
    (project / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    assert run(runner, "check", "--select", "TL301", ".").exit_code == 1


def test_output_format_from_config(runner, project):
    (project / "pyproject.toml").write_text('[tool.torchlint]\noutput-format = "concise"\n')
    result = run(runner, "check", ".")
    assert result.output.startswith("bad.py:5:5: TL301")
    result = run(runner, "check", "--output-format", "json", ".")
    assert result.output.startswith("[")


@pytest.mark.parametrize(
    "body, message",
    [
        ('select = "TL301"', "`select` must be a list of strings"),
        ('colour = "red"', "unknown option `colour`"),
        ('select = ["TL999"]', "unknown rule selector `TL999`"),
        ('target-torch = "two"', "`target-torch` must be a version"),
        ('output-format = "xml"', "`output-format` must be one of"),
        ('unsafe-fixes = "yes"', "`unsafe-fixes` must be true or false"),
        ('per-file-ignores = ["x"]', "`per-file-ignores` must be a table"),
        ("select = [", "is not valid TOML"),
    ],
)
def test_invalid_configuration(runner, project, body, message):
    (project / "pyproject.toml").write_text(f"[tool.torchlint]\n{body}\n")
    result = run(runner, "check", ".")
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_explicit_config_option(runner, project):
    (project / "other.toml").write_text('ignore = ["TL301"]\n')
    assert run(runner, "check", "--config", "other.toml", ".").exit_code == 0
    missing = run(runner, "check", "--config", "missing.toml", ".")
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_target_torch_config_enables_bare_zero_grad(runner, project):
    (project / "bad.py").write_text(GOOD)
    assert run(runner, "check", ".").exit_code == 0
    (project / "pyproject.toml").write_text('[tool.torchlint]\ntarget-torch = "1.13"\n')
    assert run(runner, "check", ".").exit_code == 1
    assert run(runner, "check", "--target-torch", "2.1", ".").exit_code == 0


def test_per_file_ignores(runner, project):
    (project / "scripts").mkdir()
    (project / "scripts" / "bench.py").write_text(BAD)
    (project / "pyproject.toml").write_text(
        '[tool.torchlint]\nper-file-ignores = { "scripts/*" = ["TL3"], "bad.py" = ["TL301"] }\n'
    )
    assert run(runner, "check", ".").exit_code == 0


def test_exclude_and_extend_exclude(runner, project):
    (project / "gen").mkdir()
    (project / "gen" / "x.py").write_text(BAD)
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["bad.py", "gen"]\n')
    result = run(runner, "check", ".")
    assert result.exit_code == 0
    # A file named explicitly is still checked, unless --force-exclude.
    assert run(runner, "check", "gen/x.py").exit_code == 1
    assert run(runner, "check", "--force-exclude", "gen/x.py").exit_code == 0


def test_default_excludes(runner, project):
    for name in (".venv", "build", "node_modules", ".git"):
        (project / name).mkdir()
        (project / name / "x.py").write_text(BAD)
    (project / "bad.py").unlink()
    assert run(runner, "check", ".").exit_code == 0


def test_gitignore_is_respected(runner, project):
    (project / ".git").mkdir()
    (project / ".gitignore").write_text("# generated\n/out/\n*_gen.py\n!keep_gen.py\n")
    (project / "bad.py").unlink()
    (project / "out").mkdir()
    (project / "out" / "a.py").write_text(BAD)
    (project / "model_gen.py").write_text(BAD)
    (project / "keep_gen.py").write_text(BAD)
    (project / "sub").mkdir()
    (project / "sub" / ".gitignore").write_text("local.py\n")
    (project / "sub" / "local.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "concise", ".")
    files = sorted({line.split(":")[0] for line in result.output.splitlines() if "TL301" in line})
    assert files == ["keep_gen.py"]
    # The parent's .gitignore applies when a subdirectory is checked...
    (project / "sub" / "model_gen.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "concise", "sub")
    assert "TL301" not in result.output
    # ...but a directory named explicitly is checked, like a file named explicitly.
    result = run(runner, "check", "--output-format", "concise", "out")
    assert "out/a.py:5:5: TL301" in result.output


def test_symlink_loop_is_not_followed_forever(runner, project):
    (project / "pkg").mkdir()
    (project / "pkg" / "loop").symlink_to(project / "pkg")
    (project / "pkg" / "m.py").write_text(BAD)
    result = run(runner, "check", "--output-format", "concise", "pkg")
    assert result.output.count("TL301") == 1


# -- suppression ----------------------------------------------------------------

NOQA_CASES = [
    ("optimizer.zero_grad(set_to_none=False)  # noqa: TL301", 0),
    ("optimizer.zero_grad(set_to_none=False)  # noqa", 0),
    ("optimizer.zero_grad(set_to_none=False)  # NOQA:TL101,TL301", 0),
    ("optimizer.zero_grad(set_to_none=False)  # noqa: TL101", 1),
    ("optimizer.zero_grad(set_to_none=False); s = '# noqa'", 1),
]


@pytest.mark.parametrize("line, expected", NOQA_CASES)
def test_line_noqa(runner, project, line, expected):
    (project / "bad.py").write_text(f"import torch\n{line}\n")
    result = run(runner, "check", "--output-format", "concise", "bad.py")
    assert result.output.count("TL301") == expected


@pytest.mark.parametrize(
    "header, expected",
    [("# torchlint: noqa", 0), ("# torchlint: noqa: TL301", 0), ("# torchlint: noqa: TL101", 1)],
)
def test_file_level_noqa(runner, project, header, expected):
    (project / "bad.py").write_text(f"{header}\n{BAD}")
    result = run(runner, "check", "--output-format", "concise", "bad.py")
    assert result.output.count("TL301") == expected
