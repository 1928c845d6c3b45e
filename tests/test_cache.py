"""The result cache: hits skip the analysis; any change that matters is a miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import torchlint.cache
import torchlint.parallel
from tests.test_cli import BAD, GOOD, run

OTHER = """\
import torch


def make():
    return torch.randn(3).cuda()
"""


@pytest.fixture
def project(workdir: Path, monkeypatch) -> Path:
    (workdir / "bad.py").write_text(BAD)
    (workdir / "ok.py").write_text(GOOD)
    (workdir / "other.py").write_text(OTHER)
    (workdir / "pyproject.toml").write_text("[tool.torchlint]\n")
    # The cache's default place (the project root), not the test suite's private one.
    monkeypatch.delenv("TORCHLINT_CACHE_DIR", raising=False)
    return workdir


@pytest.fixture
def analysed(monkeypatch):
    """The displayed paths of the files actually analysed (not taken from the cache)."""
    seen: list = []
    real = torchlint.parallel.analyse_file

    def counting(display, path, settings, codes, *rest):
        seen.append(display)
        return real(display, path, settings, codes, *rest)

    monkeypatch.setattr(torchlint.parallel, "analyse_file", counting)
    return seen


def check(runner, *args):
    return run(runner, "check", *args)


def _namespace_files(project: Path):
    from torchlint.cache import FORMAT

    return sorted((project / ".torchlint_cache" / FORMAT).glob("*.json"))


def test_unchanged_tree_is_not_analysed_again_and_reports_the_same(runner, project, analysed):
    first = check(runner, ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]
    assert first.exit_code == 1
    analysed.clear()
    second = check(runner, ".")
    assert analysed == []
    assert second.output == first.output  # excerpts included
    assert second.exit_code == 1
    json_first = check(runner, "--output-format", "json", ".")
    assert analysed == []
    assert json.loads(json_first.output) and "TL301" in json_first.output


def test_cache_directory_is_ignored_by_git_and_tagged(runner, project, analysed):
    check(runner, ".")
    cache = project / ".torchlint_cache"
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert len(_namespace_files(project)) == 1


def test_hits_come_from_the_cache(runner, project, analysed):
    check(runner, ".")
    (ns,) = _namespace_files(project)
    data = json.loads(ns.read_text())
    data["entries"]["bad.py"][1][0][4] = "served from the cache"
    ns.write_text(json.dumps(data))
    assert "served from the cache" in check(runner, "--output-format", "concise", ".").output
    assert analysed == ["bad.py", "ok.py", "other.py"]  # only the first run


def test_edited_file_is_checked_again(runner, project, analysed):
    check(runner, ".")
    analysed.clear()
    (project / "bad.py").write_text(GOOD)
    result = check(runner, ".")
    assert analysed == ["bad.py"]
    assert "TL301" not in result.output
    analysed.clear()
    (project / "bad.py").write_text(BAD)  # one entry per file: the latest text
    assert "TL301" in check(runner, ".").output
    assert analysed == ["bad.py"]


@pytest.mark.parametrize(
    "config",
    [
        '[tool.torchlint]\ntarget-torch = "1.13"\n',
        '[tool.torchlint]\nselect = ["TL3"]\n',
        '[tool.torchlint]\nextend-select = ["TL5"]\n',
        '[tool.torchlint]\nper-file-ignores = { "bad.py" = ["TL301"] }\n',
    ],
)
def test_changed_configuration_checks_again(runner, project, analysed, config):
    check(runner, ".")
    analysed.clear()
    (project / "pyproject.toml").write_text(config)
    check(runner, ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]


def test_changed_selection_on_the_command_line_checks_again(runner, project, analysed):
    check(runner, ".")
    analysed.clear()
    result = check(runner, "--ignore", "TL301", ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]
    assert "TL301" not in result.output
    analysed.clear()
    check(runner, ".")  # the first selection's namespace is still there
    assert analysed == []


def test_new_version_checks_again(runner, project, analysed, monkeypatch):
    check(runner, ".")
    analysed.clear()
    monkeypatch.setattr(torchlint.cache, "__version__", "99.0.0")
    check(runner, ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]


def test_edited_torchlint_code_checks_again(runner, project, analysed, monkeypatch):
    check(runner, ".")
    analysed.clear()
    monkeypatch.setattr(torchlint.cache, "_code_fingerprint", lambda: "an edited rule")
    check(runner, ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]


@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00\xff not json", b"[1, 2, 3]", b'{"entries": {"bad.py": 7, "other.py": ["x"]}}',
     b'{"entries": {"bad.py": ["%s", [["a"]]]}}'],
)
def test_corrupt_cache_is_a_miss_and_is_repaired(runner, project, analysed, garbage):
    expected = check(runner, ".").output
    (ns,) = _namespace_files(project)
    if b"%s" in garbage:
        digest = json.loads(ns.read_text())["entries"]["bad.py"][0]
        garbage = garbage.replace(b"%s", digest.encode())
    ns.write_bytes(garbage)
    analysed.clear()
    result = check(runner, ".")
    assert result.output == expected
    assert "bad.py" in analysed
    analysed.clear()
    assert check(runner, ".").output == expected
    assert analysed == []


def test_no_cache_reads_and_writes_nothing(runner, project, analysed):
    result = check(runner, "--no-cache", ".")
    assert not (project / ".torchlint_cache").exists()
    check(runner, ".")
    (ns,) = _namespace_files(project)
    data = json.loads(ns.read_text())
    data["entries"]["bad.py"][1][0][4] = "served from the cache"
    ns.write_text(json.dumps(data))
    before = ns.read_bytes()
    analysed.clear()
    again = check(runner, "--no-cache", ".")
    assert sorted(analysed) == ["bad.py", "ok.py", "other.py"]
    assert again.output == result.output
    assert ns.read_bytes() == before


def test_internal_errors_are_not_cached(runner, project, analysed, monkeypatch):
    import torchlint.engine as engine

    real = engine.lint_text

    def flaky(text, path, settings, codes):
        if path == "other.py":
            raise RuntimeError("boom")
        return real(text, path, settings, codes)

    monkeypatch.setattr(engine, "lint_text", flaky)
    result = check(runner, ".")
    assert "torchlint crashed on this file (RuntimeError: boom)" in result.output
    assert result.exit_code == 2
    monkeypatch.setattr(engine, "lint_text", real)
    analysed.clear()
    result = check(runner, ".")
    assert analysed == ["other.py"]
    assert "crashed" not in result.output


def test_cache_dir_environment_variable(runner, project, analysed, tmp_path_factory, monkeypatch):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.setenv("TORCHLINT_CACHE_DIR", str(elsewhere))
    check(runner, ".")
    assert not (project / ".torchlint_cache").exists()
    assert (elsewhere / ".gitignore").is_file()
    analysed.clear()
    check(runner, ".")
    assert analysed == []


def test_unwritable_cache_is_not_an_error(runner, project, analysed, monkeypatch):
    (project / ".torchlint_cache").write_text("a file where the directory should be")
    expected = check(runner, "--no-cache", ".")
    result = check(runner, ".")
    assert result.output == expected.output
    assert result.exit_code == expected.exit_code


def test_deleted_files_are_dropped_from_the_cache(runner, project, analysed):
    check(runner, ".")
    (project / "other.py").unlink()
    (project / "bad.py").write_text(BAD + "\n")  # a change, so the namespace is written
    check(runner, ".")
    (ns,) = _namespace_files(project)
    assert sorted(json.loads(ns.read_text())["entries"]) == ["bad.py", "ok.py"]


def test_standard_input_is_never_cached(runner, project, analysed):
    check(runner, "-", "--stdin-filename", "x.py")
    assert not (project / ".torchlint_cache").exists()


def test_fix_reports_what_remains_without_using_the_cache(runner, project, analysed):
    check(runner, ".")
    (ns,) = _namespace_files(project)
    data = json.loads(ns.read_text())
    data["entries"]["bad.py"][1][0][4] = "served from the cache"
    ns.write_text(json.dumps(data))
    result = run(runner, "fix", "--diff", "--unsafe-fixes", ".")
    assert "served from the cache" not in result.output
    assert "set_to_none=True" in result.output


def test_concurrent_runs_leave_a_valid_cache(project, analysed):
    import subprocess
    import sys

    for i in range(30):
        (project / f"m{i}.py").write_text(OTHER + f"\nX = {i}\n")
    command = [sys.executable, "-m", "torchlint", "check", "-j", "1", "--output-format", "concise", "."]
    runs = [subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [r.communicate()[0] for r in runs]
    assert len(set(outputs)) == 1
    (ns,) = _namespace_files(project)
    entries = json.loads(ns.read_text())["entries"]
    assert len(entries) == 33
    assert not list(ns.parent.glob(".tmp-*"))
    again = subprocess.run(command, cwd=project, capture_output=True, text=True)
    assert again.stdout == outputs[0]
