"""`check --add-noqa` and the unused-`noqa` rule TL001 (#16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import fix, lint
from tests.test_cli import run

LOOP = """\
import torch


def train(loader, device):
    for batch in loader:
        noise = torch.zeros(3).to(device)
        mask = torch.ones(3).to(device)  # a remark
        other = torch.ones(3).to(device)  # noqa: E501
        total = noise.sum().item()
"""

EXPECTED = """\
import torch


def train(loader, device):
    for batch in loader:
        noise = torch.zeros(3).to(device)  # noqa: TL201
        mask = torch.ones(3).to(device)  # a remark  # noqa: TL201
        other = torch.ones(3).to(device)  # noqa: E501, TL201
        total = noise.sum().item()  # noqa: TL101
"""


def test_add_noqa_adds_merges_and_is_idempotent(runner, workdir):
    path = workdir / "train.py"
    path.write_text(LOOP)
    result = run(runner, "check", "--add-noqa", "train.py")
    assert result.exit_code == 0, result.output
    assert "Added 4 noqa directives." in result.output
    assert path.read_text() == EXPECTED
    assert run(runner, "check", "train.py").output == "All checks passed!\n"
    again = run(runner, "check", "--add-noqa", "train.py")
    assert "Added 0 noqa directives." in again.output
    assert path.read_text() == EXPECTED


def test_add_noqa_merges_into_an_existing_torchlint_directive(runner, workdir):
    path = workdir / "train.py"
    path.write_text(
        "import torch\n\n\ndef train(loader):\n    for batch in loader:\n"
        "        x = torch.zeros(3).cuda().item()  # noqa: TL101 the sync is intended\n"
    )
    run(runner, "check", "--add-noqa", "train.py")
    assert "  # noqa: TL101, TL201 the sync is intended\n" in path.read_text()


def test_add_noqa_after_a_multi_line_string(runner, workdir):
    path = workdir / "train.py"
    path.write_text(
        'import torch\n\n\ndef train(loader, device):\n    for batch in loader:\n'
        '        noise = torch.zeros(len("""\n1 2 3\n""")).to(device)\n'
        '        mask = torch.ones(3) \\\n            .to(device)\n'
    )
    result = run(runner, "check", "--add-noqa", "train.py")
    assert "Added 2 noqa directives." in result.output
    text = path.read_text()
    # never inside the string: on its last line, where Python allows a comment
    assert '\n1 2 3\n""")).to(device)  # noqa: TL201\n' in text
    assert "        mask = torch.ones(3) \\\n            .to(device)  # noqa: TL201\n" in text
    compile(text, "train.py", "exec")
    assert run(runner, "check", "train.py").exit_code == 0  # the comments suppress them there
    assert run(runner, "check", "--add-noqa", "train.py").output.endswith("Added 0 noqa directives.\n")


def _notebook(*sources: str) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)} for i, source in enumerate(sources)]
    return json.dumps({"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def test_add_noqa_in_a_notebook_edits_the_cell(runner, workdir):
    path = workdir / "nb.ipynb"
    path.write_text(_notebook("%matplotlib inline\nimport torch", "for b in loader:\n    x = torch.zeros(3).cuda()"))
    result = run(runner, "check", "--add-noqa", "nb.ipynb")
    assert "Added 1 noqa directive." in result.output
    data = json.loads(path.read_text())
    assert data["cells"][1]["source"] == ["for b in loader:\n", "    x = torch.zeros(3).cuda()  # noqa: TL201"]
    assert data["cells"][0]["source"] == ["%matplotlib inline\n", "import torch"]
    assert run(runner, "check", "nb.ipynb").exit_code == 0
    before = path.read_text()
    run(runner, "check", "--add-noqa", "nb.ipynb")
    assert path.read_text() == before


def test_add_noqa_refuses_other_modes(runner, workdir):
    for args in (["--fix"], ["--diff"], ["--baseline", "b.json"]):
        result = run(runner, "check", "--add-noqa", *args)
        assert result.exit_code == 2 and "--add-noqa cannot be combined" in result.output
    stdin = run(runner, "check", "--add-noqa", "-", input="import torch\n")
    assert stdin.exit_code == 2 and "cannot read standard input" in stdin.output


# -- TL001 ---------------------------------------------------------------------------

NOQAS = """\
import torch


def train(loader, device):
    for batch in loader:
        noise = torch.zeros(3).to(device)  # noqa: TL201
        mask = batch.sum()  # noqa: TL201, E501 the remark stays
        other = batch.mean()  # a note  # noqa: TL999
        last = batch.max()  # noqa: TL505
        free = batch.min()  # noqa
"""


def test_tl001_is_off_by_default(runner, workdir):
    (workdir / "train.py").write_text(NOQAS)
    default = run(runner, "check", "train.py")
    assert default.exit_code == 0 and "TL001" not in default.output
    assert "TL001" not in run(runner, "check", "--select", "TL", "train.py").output


def test_tl001_reports_unused_unknown_and_non_enabled_codes():
    found = [(d.line, d.message) for d in lint(NOQAS, ["TL001", "TL201"])]
    assert found == [
        (7, "Unused `noqa` directive (unused: `TL201`)"),
        (8, "Unused `noqa` directive (unknown: `TL999`)"),
        (9, "Unused `noqa` directive (non-enabled: `TL505`)"),
    ]  # line 6's code is used; E501 and the blanket `# noqa` are another tool's business


def test_tl001_fix_removes_the_unused_codes(runner, workdir):
    result = fix(NOQAS, ["TL001", "TL201"])
    assert result.text == NOQAS.replace(
        "  # noqa: TL201, E501 the remark stays", "  # noqa: E501 the remark stays"
    ).replace("  # a note  # noqa: TL999", "  # a note").replace("  # noqa: TL505", "")
    assert result.remaining == []
    again = fix(result.text, ["TL001", "TL201"])
    assert again.text == result.text and not again.applied
    # from the command line: the fix is safe
    (workdir / "train.py").write_text(NOQAS)
    assert run(runner, "check", "--extend-select", "TL001", "--fix", "train.py").exit_code == 0


def test_tl001_counts_a_comment_after_a_multi_line_string_as_used():
    source = (
        'import torch\n\n\ndef train(loader, device):\n    for batch in loader:\n'
        '        noise = torch.zeros(len("""\n1\n""")).to(device)  # noqa: TL201\n'
    )
    assert lint(source, ["TL001", "TL201"]) == []
    assert [d.line for d in lint(source.replace("  # noqa: TL201", ""), ["TL201"])] == [6]


def test_tl001_judges_files_that_never_mention_torch():
    assert [d.code for d in lint("x = 1  # noqa: TL101\n", ["TL001", "TL101"])] == ["TL001"]


def test_tl001_can_be_suppressed_like_any_rule():
    assert lint("x = 1  # noqa: TL101, TL001\n", ["TL001", "TL101"]) == []


def test_noqa_rows_of_strings_and_continuations():
    from torchlint.noqa import add_noqa, noqa_rows

    text = 'x = f"""a {1}\nb\n""".upper()\ny = 1 + \\\n    2\nz = 3\n'
    assert noqa_rows(text) == {1: 3, 2: 3, 4: 5}
    new, count = add_noqa(text, {1: ["TL1"], 2: ["TL2"], 4: ["TL3"], 6: ["TL4"]})
    assert count == 3
    assert new == ('x = f"""a {1}\nb\n""".upper()  # noqa: TL1, TL2\ny = 1 + \\\n    2  # noqa: TL3\n'
                   'z = 3  # noqa: TL4\n')
    compile(new, "x.py", "exec")



@pytest.mark.parametrize(
    "text, line, needed",
    [
        ('x = f"""\n{loss.item()}\n"""\n', 2, True),  # code inside a triple-quoted f-string
        ('print(loss.item(), """a\nb""")\n', 1, True),  # a multi-line string starts on the line
        ("y = loss.item() + \\\n    1\n", 1, True),  # a backslash continues the line
        ('"""doc"""\ny = loss.item()\nz = 1\n', 2, False),  # nothing to map
        ("s = \'\'\'\nnot code\n\'\'\'\ny = loss.item()\n", 4, False),
    ],
)
def test_the_tokenizer_is_skipped_only_where_it_maps_nothing(text, line, needed):
    from torchlint.noqa import noqa_rows, rows_needed

    assert rows_needed(text, [line]) is needed
    if not needed:
        assert noqa_rows(text).get(line, line) == line
    else:
        assert noqa_rows(text).get(line, line) != line
