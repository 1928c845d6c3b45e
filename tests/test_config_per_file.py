"""Each file is checked with its nearest configuration (as Ruff does), whatever
else is on the command line; configuration errors name the file and key; an
empty selection is a usage error; what `TL` and `TL5` select."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import BAD, run
from torchlint.config import ConfigError, Overrides, Resolver, Settings, resolve_selection
from torchlint.registry import all_codes, default_codes

# TL301 (zero_grad(set_to_none=False)) and TL102 (.cpu() in a loop).
TWO_RULES = """\
import torch


def step(optimizer, model, loader):
    optimizer.zero_grad(set_to_none=False)
    for x in loader:
        y = model(x).cpu()
        optimizer.step()
"""


def codes_by_file(result) -> dict:
    assert result.exit_code in (0, 1), result.output
    found: dict = {}
    for d in json.loads(result.stdout):
        found.setdefault(d["filename"].replace("\\", "/"), []).append(d["code"])
    return {k: sorted(v) for k, v in found.items()}


@pytest.fixture
def monorepo(workdir: Path) -> Path:
    """A root configuration that selects TL1 and TL3, and a subproject that ignores TL301."""
    (workdir / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL1", "TL3"]\n')
    (workdir / "other.py").write_text(TWO_RULES)
    sub = workdir / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL1", "TL3"]\nignore = ["TL301"]\n')
    (sub / "a.py").write_text(TWO_RULES)
    return workdir


def test_a_file_gets_its_own_configuration_whatever_else_is_checked(runner, monorepo):
    alone = codes_by_file(run(runner, "check", "--output-format", "json", "sub/a.py"))
    together = codes_by_file(run(runner, "check", "--output-format", "json", "sub/a.py", "other.py"))
    everything = codes_by_file(run(runner, "check", "--no-cache", "--output-format", "json", "."))
    assert alone["sub/a.py"] == ["TL102"]
    assert together["sub/a.py"] == ["TL102"]
    assert everything["sub/a.py"] == ["TL102"]
    assert together["other.py"] == everything["other.py"] == ["TL102", "TL301"]


def test_the_same_with_worker_processes(runner, monorepo):
    for i in range(30):  # enough files for the pool
        (monorepo / "sub" / f"m{i:02}.py").write_text(TWO_RULES)
        (monorepo / f"r{i:02}.py").write_text(TWO_RULES)
    found = codes_by_file(run(runner, "check", "--no-cache", "-j", "2", "--output-format", "json", "."))
    assert found["sub/m07.py"] == ["TL102"]
    assert found["r07.py"] == ["TL102", "TL301"]


def test_a_pyproject_without_a_torchlint_table_is_skipped(runner, monorepo):
    (monorepo / "sub" / "pyproject.toml").write_text('[project]\nname = "sub"\n')
    alone = codes_by_file(run(runner, "check", "--output-format", "json", "sub/a.py"))
    assert alone["sub/a.py"] == ["TL102", "TL301"]  # the root's configuration


def test_cli_options_apply_on_top_of_each_files_configuration(runner, monorepo):
    found = codes_by_file(run(runner, "check", "--output-format", "json", "--ignore", "TL102", "."))
    assert "sub/a.py" not in found  # TL301 ignored by sub, TL102 by the command line
    assert found["other.py"] == ["TL301"]
    found = codes_by_file(run(runner, "check", "--output-format", "json", "--select", "TL301", "."))
    assert found["sub/a.py"] == ["TL301"]  # --select replaces every configured selection


def test_config_option_applies_to_every_file(runner, monorepo):
    (monorepo / "only.toml").write_text('select = ["TL301"]\n')
    found = codes_by_file(run(runner, "check", "--config", "only.toml", "--output-format", "json", "."))
    assert found == {"other.py": ["TL301"], "sub/a.py": ["TL301"]}


def test_per_file_ignores_are_relative_to_their_configuration(runner, monorepo):
    (monorepo / "sub" / "pyproject.toml").write_text(
        '[tool.torchlint]\nselect = ["TL1", "TL3"]\nper-file-ignores = { "a.py" = ["TL102"] }\n'
    )
    (monorepo / "a.py").write_text(TWO_RULES)  # the root's a.py: not the pattern's
    found = codes_by_file(run(runner, "check", "--output-format", "json", "sub/a.py", "a.py"))
    assert found == {"a.py": ["TL102", "TL301"], "sub/a.py": ["TL301"]}


def test_a_subprojects_exclude_covers_its_tree(runner, monorepo):
    (monorepo / "sub" / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["gen"]\n')
    (monorepo / "sub" / "gen").mkdir()
    (monorepo / "sub" / "gen" / "x.py").write_text(BAD)
    (monorepo / "gen").mkdir()
    (monorepo / "gen" / "y.py").write_text(BAD)  # not the subproject's: still checked
    result = run(runner, "check", "--output-format", "concise", ".")
    assert "sub/gen/x.py" not in result.output
    assert "gen/y.py" in result.output
    result = run(runner, "check", "--output-format", "concise", "--force-exclude", "sub/gen/x.py", "gen/y.py")
    assert "sub/gen/x.py" not in result.output and "gen/y.py" in result.output


def test_output_format_comes_from_the_current_directorys_configuration(runner, monorepo, monkeypatch):
    (monorepo / "sub" / "pyproject.toml").write_text('[tool.torchlint]\noutput-format = "json"\n')
    from_root = run(runner, "check", "sub/a.py")
    assert not from_root.stdout.startswith("[")  # the root's configuration: full
    monkeypatch.chdir(monorepo / "sub")
    from_sub = run(runner, "check", "a.py")
    assert from_sub.stdout.startswith("[")


def test_a_broken_subproject_configuration_is_a_usage_error(runner, monorepo):
    (monorepo / "sub" / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["NOPE1"]\n')
    result = run(runner, "check", ".")
    assert result.exit_code == 2
    assert "sub" in result.output and "select: unknown rule selector `NOPE1`" in result.output
    assert "Traceback" not in result.output
    assert run(runner, "check", "other.py").exit_code == 1  # the subproject is not involved


def test_changing_a_subprojects_configuration_rechecks_its_files_only(runner, monorepo, monkeypatch):
    import torchlint.parallel

    seen: list = []
    real = torchlint.parallel.analyse_file

    def counting(display, path, settings, codes, *rest):
        seen.append(display.replace("\\", "/"))
        return real(display, path, settings, codes, *rest)

    monkeypatch.setattr(torchlint.parallel, "analyse_file", counting)
    first = run(runner, "check", "--output-format", "json", ".")
    assert sorted(seen) == ["other.py", "sub/a.py"]
    seen.clear()
    (monorepo / "sub" / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL1", "TL3"]\n')
    second = run(runner, "check", "--output-format", "json", ".")
    assert seen == ["sub/a.py"]
    assert codes_by_file(second)["sub/a.py"] == ["TL102", "TL301"]
    assert codes_by_file(first)["other.py"] == codes_by_file(second)["other.py"]


def test_resolver_memoizes_per_directory(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    import torchlint.config as config

    looked: list = []
    real = config.config_in
    monkeypatch.setattr(config, "config_in", lambda d: looked.append(d) or real(d))
    resolver = Resolver(cwd=tmp_path)
    assert resolver.config_for(deep) == tmp_path / "pyproject.toml"
    assert resolver.config_for(deep) == tmp_path / "pyproject.toml"
    assert resolver.config_for(tmp_path / "a") == tmp_path / "pyproject.toml"
    assert len(looked) == 4  # c, b, a, the root: once each
    assert resolver.for_file(deep / "x.py") is resolver.for_file(tmp_path / "y.py")


# -- errors name the file and key ------------------------------------------------


@pytest.mark.parametrize(
    "body, where",
    [
        ('per-file-ignores = { "train.py" = ["TL1", "NOPE1"] }', 'per-file-ignores."train.py": unknown rule selector `NOPE1`'),
        ('per-file-ignores = { scripts = ["nope"] }', "per-file-ignores.scripts: unknown rule selector `nope`"),
        ('select = ["TL1", "NOPE1"]', "select: unknown rule selector `NOPE1`"),
        ('ignore = ["NOPE1"]', "ignore: unknown rule selector `NOPE1`"),
        ('extend-select = ["NOPE1"]', "extend-select: unknown rule selector `NOPE1`"),
    ],
)
def test_unknown_codes_in_configuration_name_the_file_and_key(runner, workdir, body, where):
    (workdir / "pyproject.toml").write_text(f"[tool.torchlint]\n{body}\n")
    (workdir / "train.py").write_text(BAD)
    result = run(runner, "check", "train.py")
    assert result.exit_code == 2
    assert f"[tool.torchlint] in {workdir / 'pyproject.toml'}: {where}" in result.output
    assert "Traceback" not in result.output


def test_unknown_codes_in_torchlint_toml_name_the_file(runner, workdir):
    (workdir / "torchlint.toml").write_text('[per-file-ignores]\n"train.py" = ["NOPE1"]\n')
    (workdir / "train.py").write_text(BAD)
    result = run(runner, "check", "train.py")
    assert result.exit_code == 2
    assert f'{workdir / "torchlint.toml"}: per-file-ignores."train.py": unknown rule selector `NOPE1`' in result.output


@pytest.mark.parametrize("option", ["--select", "--ignore", "--extend-select"])
def test_unknown_codes_on_the_command_line_name_the_option(runner, workdir, option):
    (workdir / "train.py").write_text(BAD)
    result = run(runner, "check", option, "TL1,NOPE1", "train.py")
    assert result.exit_code == 2
    assert f"{option}: unknown rule selector `NOPE1`" in result.output


# -- an empty selection ----------------------------------------------------------


@pytest.mark.parametrize(
    "args", [["--select", ""], ["--select", "TL101", "--ignore", "TL101"], ["--ignore", "ALL"]]
)
def test_an_empty_selection_on_the_command_line_is_a_usage_error(runner, workdir, args):
    (workdir / "train.py").write_text(BAD)
    result = run(runner, "check", *args, "train.py")
    assert result.exit_code == 2
    assert "no rules selected" in result.output
    fixed = run(runner, "fix", *args, "train.py")
    assert fixed.exit_code == 2 and "no rules selected" in fixed.output


@pytest.mark.parametrize("body", ['select = []', 'select = ["TL101"]\nignore = ["TL1"]'])
def test_an_empty_selection_in_configuration_is_a_usage_error(runner, workdir, body):
    (workdir / "pyproject.toml").write_text(f"[tool.torchlint]\n{body}\n")
    (workdir / "train.py").write_text(BAD)
    result = run(runner, "check", "train.py")
    assert result.exit_code == 2
    assert f"[tool.torchlint] in {workdir / 'pyproject.toml'}: no rules selected" in result.output


def test_a_selection_emptied_only_for_some_files_by_per_file_ignores_is_fine(runner, workdir):
    (workdir / "pyproject.toml").write_text('[tool.torchlint]\nper-file-ignores = { "train.py" = ["ALL"] }\n')
    (workdir / "train.py").write_text(BAD)
    assert run(runner, "check", "train.py").exit_code == 0


# -- what a prefix selects -------------------------------------------------------


def _selected(**kwargs) -> set:
    settings = Settings(root=Path.cwd(), **kwargs)
    return set(resolve_selection(settings, all_codes(), default_codes()))


def test_prefixes_without_a_digit_select_only_default_rules():
    defaults = set(default_codes())
    opt_in = set(all_codes()) - defaults
    # The opt-in rules: the TL5xx family, TL001 (unused `noqa` codes), and new
    # rules, which start opt-in.
    tl5 = {c for c in all_codes() if c.startswith("TL5")}
    assert tl5 and tl5 <= opt_in and "TL001" in opt_in
    assert _selected(select=("TL",)) == defaults
    assert _selected(select=("TL5",)) == tl5
    assert _selected(select=("TL50",)) == {c for c in tl5 if c.startswith("TL50")} == tl5
    assert _selected(select=("TL503",)) == {"TL503"}
    assert _selected(select=("TL0",)) == {"TL001"}
    assert _selected(select=("ALL",)) == set(all_codes())
    assert _selected(extend_select=("TL5",)) == defaults | tl5
    assert _selected(extend_select=("TL",)) == defaults
    assert _selected(select=("ALL",), ignore=("TL",)) == set()  # ignore removes every match
    assert _selected(select=("TL5",), ignore=("TL50",)) == set()


def test_select_tl_does_not_enable_opt_in_rules_on_the_command_line(runner, workdir):
    source = Path(__file__).parent / "fixtures" / "TL507" / "input.py"
    (workdir / "train.py").write_text(source.read_text())
    for args, expected in [
        (["--select", "TL"], False),
        (["--select", "TL5"], True),
        (["--extend-select", "TL5"], True),
        (["--select", "ALL"], True),
        ([], False),
    ]:
        result = run(runner, "check", "--output-format", "concise", *args, "train.py")
        assert ("TL507" in result.output) is expected, args
    (workdir / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL"]\n')
    assert "TL507" not in run(runner, "check", "--output-format", "concise", "train.py").output


def test_overrides_apply_keeps_the_file_settings():
    base = Settings(root=Path("/x"), ignore=("TL301",), extend_select=("TL5",))
    assert Overrides(ignore=("TL102",)).apply(base).ignore == ("TL301", "TL102")
    replaced = Overrides(select=("TL1",)).apply(base)
    assert replaced.select == ("TL1",) and replaced.ignore == () and replaced.extend_select == ()
    with pytest.raises(ConfigError):
        Resolver(Overrides(select=()), cwd=Path("/")).run_profile


def test_fix_uses_each_files_configuration(runner, monorepo):
    result = run(runner, "fix", "--unsafe-fixes", "sub/a.py", "other.py")
    assert result.exit_code == 1, result.output  # TL102 has no fix
    assert "set_to_none=False" in (monorepo / "sub" / "a.py").read_text()  # sub ignores TL301
    assert "set_to_none=False" not in (monorepo / "other.py").read_text()


def test_unsafe_fixes_come_from_the_current_directorys_configuration(runner, monorepo):
    (monorepo / "pyproject.toml").write_text('[tool.torchlint]\nselect = ["TL1", "TL3"]\nunsafe-fixes = true\n')
    assert run(runner, "fix", "other.py").exit_code == 1
    assert "set_to_none=False" not in (monorepo / "other.py").read_text()
