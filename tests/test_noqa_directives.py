"""What a suppression comment suppresses, and the warnings about those that do
not do what they seem to (see torchlint/noqa.py for the rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import codes_for, settings_for
from tests.test_cli import run
from tests.test_notebooks import code, notebook
from torchlint.noqa import NoqaWarning, parse_suppressions

# Two TL301 findings, on lines 3 and 4.
TWO = """\
import torch
optimizer = torch.optim.SGD([], lr=0.1)
optimizer.zero_grad(set_to_none=False){first}
optimizer.zero_grad(set_to_none=False)
"""


def lines_reported(result) -> list:
    return [int(line.split(":")[1]) for line in result.stdout.splitlines() if ": TL301" in line]


def check(runner, *args):
    return run(runner, "check", "--output-format", "concise", *args)


def write(workdir: Path, first: str, name: str = "train.py") -> Path:
    path = workdir / name
    path.write_text(TWO.format(first=first))
    return path


# -- `# torchlint: noqa` ----------------------------------------------------------


def test_file_directive_at_the_end_of_a_code_line_covers_only_that_line(runner, workdir):
    write(workdir, "  # torchlint: noqa")
    result = check(runner, "train.py")
    assert lines_reported(result) == [4]
    assert result.exit_code == 1
    assert "train.py:3: warning: `# torchlint: noqa` at the end of a line of code" in result.stderr


def test_file_directive_with_codes_at_the_end_of_a_code_line(runner, workdir):
    write(workdir, "  # torchlint: noqa: TL301")
    assert lines_reported(check(runner, "train.py")) == [4]


@pytest.mark.parametrize("header", ["# torchlint: noqa", "    # torchlint: noqa: TL301", "#torchlint:noqa"])
def test_file_directive_on_a_line_of_its_own_covers_the_file(runner, workdir, header):
    (workdir / "train.py").write_text(header.strip() + "\n" + TWO.format(first=""))
    result = check(runner, "train.py")
    assert result.exit_code == 0 and lines_reported(result) == []
    assert "warning" not in result.stderr


def test_notebook_file_directive(runner, workdir):
    settings = settings_for(["TL201"])
    codes = codes_for(settings)
    from torchlint.notebook import lint_notebook

    base = [code("import torch"), code("for b in loader:\n    x = torch.zeros(8).cuda()\n    y = torch.ones(8).cuda()")]
    alone = notebook(*base, code("print(1)\n# torchlint: noqa"))
    assert lint_notebook(alone, "nb.ipynb", settings, codes).diagnostics == []
    trailing = notebook(code("import torch"), code(
        "for b in loader:\n    x = torch.zeros(8).cuda()  # torchlint: noqa\n    y = torch.ones(8).cuda()"))
    linted = lint_notebook(trailing, "nb.ipynb", settings, codes)
    assert [(d.cell, d.line) for d in linted.diagnostics] == [(2, 3)]
    assert len(linted.warnings) == 1 and linted.warnings[0].startswith("nb.ipynb:cell 2:2: warning: ")
    (workdir / "nb.ipynb").write_text(trailing)
    result = run(runner, "check", "--select", "TL201", "nb.ipynb")
    assert result.exit_code == 1 and "nb.ipynb:cell 2:2: warning:" in result.stderr


# -- `# noqa: CODES` ---------------------------------------------------------------


@pytest.mark.parametrize(
    "comment, suppressed, warning",
    [
        ("  # noqa: create-then-move", False, "unknown code in noqa: create-then-move"),
        ("  # noqa:zero-grad", False, "unknown code in noqa: zero-grad"),
        ("  # noqa: TL999", False, "unknown code in noqa: TL999"),
        ("  # noqa: TL3", False, "unknown code in noqa: TL3"),
        ("  # noqa: TL101, create-then-move", False, "unknown code in noqa: create-then-move"),
        ("  # noqa: TL301, create-then-move", True, "unknown code in noqa: create-then-move"),
        ("  # noqa:", False, "no codes after `noqa:`"),
        ("  # noqa: E501", False, None),  # another tool's code: not ours, and no warning
        ("  # noqa: E501, RUF100", False, None),
        ("  # noqa: E501 TL301", True, None),
        ("  # noqa: TL301 the optimizer is reused", True, None),  # a remark after the codes
        ("  # noqa: tl301", True, None),
        ("  # noqa", True, None),
        ("  # NOQA -- on purpose", True, None),
        ("  # type: ignore  # noqa: TL301", True, None),
        ("  # noqanot", False, None),
    ],
)
def test_line_noqa(runner, workdir, comment, suppressed, warning):
    write(workdir, comment)
    result = check(runner, "train.py")
    assert lines_reported(result) == ([4] if suppressed else [3, 4])
    if warning is None:
        assert "warning" not in result.stderr
    else:
        assert f"train.py:3: warning: {warning}" in result.stderr


def test_an_invalid_file_directive_suppresses_nothing(runner, workdir):
    (workdir / "train.py").write_text("# torchlint: noqa: create-then-move\n" + TWO.format(first=""))
    result = check(runner, "train.py")
    assert lines_reported(result) == [4, 5]
    assert "train.py:1: warning: unknown code in noqa: create-then-move" in result.stderr


def test_a_file_directive_takes_only_torchlint_codes(runner, workdir):
    (workdir / "train.py").write_text("# torchlint: noqa: E501\n" + TWO.format(first=""))
    result = check(runner, "train.py")
    assert lines_reported(result) == [4, 5]
    assert "train.py:1: warning: unknown code in noqa: E501" in result.stderr


def test_warnings_come_from_the_cache_and_the_workers_in_path_order(runner, workdir):
    for i in range(30):  # enough files for the worker pool
        write(workdir, "  # noqa: create-then-move", name=f"m{i:02}.py")
    expected = [f"m{i:02}.py:3: warning: unknown code in noqa: create-then-move" for i in range(30)]
    pooled = check(runner, "-j", "2", ".")
    assert [line for line in pooled.stderr.splitlines() if "warning" in line] == expected
    cached = check(runner, "-j", "2", ".")  # every file from the cache now
    assert cached.stderr == pooled.stderr and cached.stdout == pooled.stdout
    serial = check(runner, "--no-cache", "-j", "1", ".")
    assert serial.stderr == pooled.stderr


def test_fix_reports_the_warnings_too(runner, workdir):
    write(workdir, "  # noqa: create-then-move")
    result = run(runner, "fix", "--unsafe-fixes", "train.py")
    assert "train.py:3: warning: unknown code in noqa: create-then-move" in result.stderr


# -- the parser ----------------------------------------------------------------------


def test_parse_suppressions_units():
    known = {"TL101", "TL301"}
    sup = parse_suppressions(
        "x = 1  # noqa: TL101,TL301\n"
        "# torchlint: noqa: TL101\n"
        "y = 2  # noqa: create-then-move\n"
        "s = '# noqa'\n",
        known,
    )
    assert sup.file == frozenset({"TL101"})
    assert sup.lines == {1: frozenset({"TL101", "TL301"}), 3: frozenset()}
    assert sup.warnings == [NoqaWarning(3, "unknown code in noqa: create-then-move")]
    assert not sup.suppresses("TL301", 3) and sup.suppresses("TL301", 1) and sup.suppresses("TL101", 9)
    # A file the tokenizer rejects is scanned line by line, with the same rules.
    broken = parse_suppressions("x = (  # torchlint: noqa\n# torchlint: noqa: TL301\n", known)
    assert broken.file == frozenset({"TL301"}) and broken.lines == {1: frozenset({"*"})}
