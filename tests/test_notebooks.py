"""Jupyter notebooks: check, fix, positions in every output format, noqa,
malformed notebooks, discovery, standard input.

``fixtures/notebooks/training.ipynb`` is a notebook as Jupyter writes it
(nbformat 4.5, one-space indent, sources as lists of lines, outputs with text
and an image, execution counts, cell ids): markdown cells, ``%matplotlib
inline``, ``!pip install``, ``files = !ls``, a ``%%time`` cell, a raw cell, a
``%%bash`` cell, help (``torch.save?``) and a training loop whose imports are
in cell 2, model in cell 3, loader in cell 5 and loop in cell 7.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import codes_for, settings_for
from torchlint.cli import main
from torchlint.notebook import fix_notebook, lint_notebook, mask_cell, parse

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "notebooks" / "training.ipynb"
TRAINING = FIXTURE.read_text(encoding="utf-8")

# Cell 7's `losses.append(loss.item())` ends a step that starts with blocking copies of the
# batch: TL101 reports it only once `fix` has made those copies non-blocking (see below).
EXPECTED_CONCISE = [
    "training.ipynb:cell 3:4:5: TL401",
    "training.ipynb:cell 5:4:10: TL202 [*]",
    "training.ipynb:cell 7:5:9: TL301",
    "training.ipynb:cell 8:2:9: TL201 [*]",
]


def run(runner: CliRunner, *args: str, input: str | None = None):
    return runner.invoke(main, list(args), input=input, catch_exceptions=False)


def code(source: str, count=None, outputs=()) -> dict:
    return {"cell_type": "code", "execution_count": count, "metadata": {},
            "outputs": list(outputs), "source": source.splitlines(True)}


def markdown(source: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source.splitlines(True)}


def notebook(*cells: dict, **metadata) -> str:
    nb = {"cells": list(cells), "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def cell_sources(text: str) -> dict:
    return {i: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for i, c in enumerate(json.loads(text)["cells"], 1)}


def outside_sources(text: str) -> list:
    """The JSON text around the code cells' ``source`` values."""
    nb = parse(text)
    pieces, last = [], 0
    for cell in nb.cells:
        pieces.append(nb.raw[last:cell.span[0]])
        last = cell.span[1]
    pieces.append(nb.raw[last:])
    return pieces


@pytest.fixture
def project(workdir: Path) -> Path:
    (workdir / "training.ipynb").write_text(TRAINING, encoding="utf-8")
    return workdir


# -- check ----------------------------------------------------------------------------


def test_check_reports_positions_in_cells(runner, project):
    result = run(runner, "check", "--output-format", "concise", "training.ipynb")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith("training.ipynb")]
    assert [line.split(" `")[0].split(" torch")[0] for line in lines] == EXPECTED_CONCISE
    # Magics, shell escapes, help and the %%bash cell are neither errors nor analysed.
    assert "SyntaxError" not in result.output


def test_cells_are_one_program():
    """TL202 in cell 5 needs the DataLoader import of cell 2 and the copies of cell 7."""
    settings = settings_for(["TL202"])
    cells = [markdown("# Data\n"), code("from torch.utils.data import DataLoader\nimport torch"),
             code("loader = DataLoader(train_set, batch_size=2, num_workers=2)"),
             code("for x in loader:\n    x = x.cuda()")]
    found = lint_notebook(notebook(*cells), "nb.ipynb", settings, codes_for(settings)).diagnostics
    assert [(d.code, d.cell, d.line, d.column) for d in found] == [("TL202", 3, 1, 10)]
    # Without the import, `DataLoader` is not torch's: nothing to report.
    cells[1] = code("import torch")
    found = lint_notebook(notebook(*cells), "nb.ipynb", settings, codes_for(settings)).diagnostics
    assert found == []


def test_full_format_shows_the_cell_source(runner, project):
    result = run(runner, "check", "--select", "TL401", "training.ipynb")
    assert result.exit_code == 1
    assert result.output.startswith(
        "training.ipynb:cell 3:4:5: TL401 `Conv2d` has a bias"
    )
    # The excerpt is the cell's own text (row 3 is the cell's, with its %%time line above).
    assert "3 | model = nn.Sequential(\n4 |     nn.Conv2d(3, 16, 3, bias=True),\n" in result.output
    assert "torchlint-notebook" not in result.output


def test_json_format_has_the_cell_and_cell_relative_location(runner, project):
    (project / "script.py").write_text("import torch\nfor b in loader:\n    x = torch.zeros(8).cuda()\n")
    result = run(runner, "check", "--output-format", "json", "--select", "TL201", ".")
    items = json.loads(result.output)
    by_file = {(i["filename"], i["cell"]): i for i in items}
    cell = by_file[("training.ipynb", 8)]
    assert cell["location"] == {"row": 2, "column": 9}
    assert cell["end_location"] == {"row": 2, "column": 30}
    assert cell["noqa_row"] == 2
    assert by_file[("script.py", None)]["location"] == {"row": 3, "column": 9}


def _json_line(text: str, line: int) -> str:
    return text.split("\n")[line - 1]


def test_github_format_points_into_the_notebook_json(runner, project):
    result = run(runner, "check", "--output-format", "github", "--select", "TL401", "training.ipynb")
    (line,) = result.output.splitlines()
    props, message = line[len("::error "):].split("::", 1)
    fields = dict(p.split("=", 1) for p in props.split(","))
    assert fields["file"] == "training.ipynb"
    json_line = _json_line(TRAINING, int(fields["line"]))
    # line/col name the character in the .ipynb file where the finding starts
    assert json_line[int(fields["col"]) - 1:].startswith("nn.Conv2d(3, 16, 3, bias=True)")
    assert json_line[int(fields["endColumn"]) - 1:].startswith(',\\n",')
    assert message.startswith("training.ipynb:cell 3:4:5: TL401 ")


def test_sarif_format_points_into_the_notebook_json(runner, project):
    result = run(runner, "check", "--output-format", "sarif", "--select", "TL201", "training.ipynb")
    (res,) = json.loads(result.output)["runs"][0]["results"]
    region = res["locations"][0]["physicalLocation"]["region"]
    json_line = _json_line(TRAINING, region["startLine"])
    assert json_line[region["startColumn"] - 1:].startswith("torch.zeros(8).cuda()")
    assert res["properties"]["cell"] == 8
    assert res["properties"]["cellLocation"] == {"row": 2, "column": 9}
    assert res["message"]["text"].startswith("cell 8:2:9: ")


def test_noqa_inside_cells():
    settings = settings_for(["TL201"])
    codes = codes_for(settings)
    base = [code("import torch"), code("for b in loader:\n    x = torch.zeros(8).cuda()  # noqa: TL201\n    y = torch.ones(8).cuda()")]
    found = lint_notebook(notebook(*base), "nb.ipynb", settings, codes).diagnostics
    assert [(d.cell, d.line) for d in found] == [(2, 3)]
    # A file-level comment in any cell covers the whole notebook, as in a .py file.
    for comment in ("# torchlint: noqa", "# torchlint: noqa: TL201"):
        cells = [*base, code(f"{comment}\nprint('done')")]
        assert lint_notebook(notebook(*cells), "nb.ipynb", settings, codes).diagnostics == []
    cells = [*base, code("# torchlint: noqa: TL101")]
    assert len(lint_notebook(notebook(*cells), "nb.ipynb", settings, codes).diagnostics) == 1


def test_syntax_error_is_positioned_in_its_cell(runner, workdir):
    (workdir / "nb.ipynb").write_text(notebook(code("import torch"), markdown("x"), code("x = (1,\ny = 2")))
    result = run(runner, "check", "--output-format", "concise", "nb.ipynb")
    assert result.exit_code == 1
    assert result.output.startswith("nb.ipynb:cell 3:1:")
    assert "SyntaxError" in result.output


def test_non_python_notebooks_and_cell_magics_are_skipped():
    settings = settings_for(["TL201"])
    bad = "import torch\nfor b in loader:\n    x = torch.zeros(8).cuda()"
    r_kernel = notebook(code(bad), kernelspec={"language": "R", "name": "ir"})
    assert lint_notebook(r_kernel, "nb.ipynb", settings, codes_for(settings)).diagnostics == []
    for magic in ("%%bash", "%%writefile train.py", "%%html"):
        nb = notebook(code(f"{magic}\n{bad}"))
        assert lint_notebook(nb, "nb.ipynb", settings, codes_for(settings)).diagnostics == []
    for magic in ("%%time", "%%timeit -n 3", "%%capture out"):
        nb = notebook(code(f"{magic}\n{bad}"))
        found = lint_notebook(nb, "nb.ipynb", settings, codes_for(settings)).diagnostics
        assert [(d.cell, d.line, d.column) for d in found] == [(1, 4, 9)], magic


@pytest.mark.parametrize("source, masked_lines", [
    ("%matplotlib inline\nimport torch", [1]),
    ("!pip install torch\n! ls\nfiles = !ls\na, b = %sx ls\nx = 1", [1, 2, 3, 4]),
    ("torch.save?\n?torch.load\nx = y  # really?\nprint('a?')", [1, 2]),
    ("for i in range(3):\n    %time f(i)\n    !echo hi", [2, 3]),
    ("%load_ext autoreload \\\n  --flag\nimport torch", [1, 2]),
    # a shell command continued over indented lines after code (fish-speech's inference notebook)
    ("src = 'a.wav'\n!python infer.py \\\n    -i {src} \\\n    -o out\nprint(src)", [2, 3, 4]),
    ("for i in range(3):\n    !echo \\\n        hi\n    x = i", [2, 3]),
    # Python, not IPython: % and ! inside strings and brackets, continued lines
    ("s = '''\n%d items\n!x\n'''\ny = (a\n     % b)\nz = a \\\n  % b", []),
    ("x = [\n    1,\n]\n%time f()", [4]),
    # IPython's automagic: a line magic without its `%` (ZoeDepth's quickstart: `cd ZoeDepth`)
    ("cd ZoeDepth\npip install timm\nls -la\nmatplotlib inline\nimport torch", [1, 2, 3, 4]),
    # ... but a line that is Python stays Python
    ("time = 5\nrun = time - 1\nls = [1]\ncd = ls\nenv (1)", []),
    ("env = {\n    'a': 1,\n}\ntime (a,\n      b)", []),
])
def test_mask_cell(source, masked_lines):
    masked, originals = mask_cell(source)
    lines, masked_text = source.splitlines(), masked.splitlines()
    assert len(masked_text) == len(lines)
    changed = [i for i, (a, b) in enumerate(zip(lines, masked_text), 1) if a != b]
    assert changed == masked_lines
    assert [original for _, original in originals] == [lines[i - 1] for i in masked_lines]
    compile(masked, "<cell>", "exec")  # the masked text is Python


# -- fix ------------------------------------------------------------------------------


def test_fix_rewrites_only_the_changed_cells(runner, project):
    result = run(runner, "fix", "--unsafe-fixes", "training.ipynb")
    assert result.exit_code == 1  # TL101 and TL203 remain
    assert "Fixed 6 errors" in result.output
    assert "training.ipynb:cell 7:9:23: TL101" in result.output
    after = (project / "training.ipynb").read_text(encoding="utf-8")
    before_cells, after_cells = cell_sources(TRAINING), cell_sources(after)
    changed = sorted(n for n in before_cells if before_cells[n] != after_cells[n])
    assert changed == [3, 5, 7, 8]
    assert after_cells[3].splitlines()[0] == "%%time"  # the magic line stays
    assert "    nn.Conv2d(3, 16, 3, bias=False)," in after_cells[3]
    assert "loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=2, pin_memory=True)" in after_cells[5]
    assert "images = images.to(device, non_blocking=True)" in after_cells[7]
    assert "optimizer.zero_grad(set_to_none=True)" in after_cells[7]
    assert after_cells[8] == 'for images, labels in loader:\n    x = torch.zeros(8, device="cuda")\nplt.plot(losses)'
    # Everything but the changed sources is as it was, byte for byte...
    assert outside_sources(after) == outside_sources(TRAINING)
    before_json, after_json = json.loads(TRAINING), json.loads(after)
    for cell in (*before_json["cells"], *after_json["cells"]):
        cell.pop("source")
    assert before_json == after_json
    # ...including unchanged lines of the changed cells (the diff is 6 lines).
    diff = [a for a, b in zip(TRAINING.splitlines(), after.splitlines()) if a != b]
    assert len(TRAINING.splitlines()) == len(after.splitlines()) and len(diff) == 6
    # A second fix changes nothing.
    again = run(runner, "fix", "--unsafe-fixes", "training.ipynb")
    assert "Fixed" not in again.output
    assert (project / "training.ipynb").read_text(encoding="utf-8") == after


@pytest.mark.parametrize("indent, ensure_ascii, as_string, newline", [
    (2, True, False, ""), (None, False, True, ""), (4, False, True, "\n"), (1, True, True, "\n"),
])
def test_fix_keeps_the_file_style(indent, ensure_ascii, as_string, newline):
    data = json.loads(TRAINING)
    if as_string:
        for cell in data["cells"]:
            cell["source"] = "".join(cell["source"])
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + newline
    settings = settings_for(["ALL"])
    result = fix_notebook(text, "nb.ipynb", settings, codes_for(settings), unsafe=True)
    expected = json.loads(TRAINING)
    for cell, fixed in zip(expected["cells"], json.loads(result.text)["cells"]):
        fixed_source = "".join(fixed["source"]) if isinstance(fixed["source"], list) else fixed["source"]
        cell["source"] = fixed_source
    # As if the fixed notebook had been written in the same style by json.dumps:
    if as_string:
        assert result.text == json.dumps(expected, indent=indent, ensure_ascii=ensure_ascii) + newline
    else:
        for cell in expected["cells"]:
            cell["source"] = cell["source"].splitlines(True)
        assert result.text == json.dumps(expected, indent=indent, ensure_ascii=ensure_ascii) + newline
    assert result.changes
    second = fix_notebook(result.text, "nb.ipynb", settings, codes_for(settings), unsafe=True)
    assert second.text == result.text and not second.changes


def test_fix_diff_is_per_cell_and_writes_nothing(runner, project):
    result = run(runner, "fix", "--diff", "training.ipynb")
    assert result.exit_code == 1
    assert (project / "training.ipynb").read_text(encoding="utf-8") == TRAINING
    assert "--- a/training.ipynb:cell 5\n+++ b/training.ipynb:cell 5\n" in result.output
    assert "--- a/training.ipynb:cell 8\n+++ b/training.ipynb:cell 8\n" in result.output
    assert '-    x = torch.zeros(8).cuda()\n+    x = torch.zeros(8, device="cuda")\n' in result.output
    assert "cell 3" not in result.output  # TL401's fix is unsafe
    assert "Would fix 4 errors" in result.output


def test_a_fix_that_would_move_a_magic_is_not_applied():
    settings = settings_for(["TL701"])
    nb = notebook(
        code("import torch"),
        code("with torch.autograd.detect_anomaly():\n    %time y = f(x)\n    y.backward()"),
        code("with torch.autograd.detect_anomaly():\n    y = f(x)\n    y.backward()"),
    )
    result = fix_notebook(nb, "nb.ipynb", settings, codes_for(settings), unsafe=True)
    assert [n for n, _, _ in result.changes] == [3]
    assert cell_sources(result.text)[2] == cell_sources(nb)[2]
    assert [(d.code, d.cell) for d in result.remaining] == [("TL701", 2)]
    assert result.errors == []


def test_edits_across_cells_or_of_magics_are_refused():
    nb = parse(notebook(code("import torch\n%time f()"), markdown("x"), code("y = 1")))
    program = nb.program
    assert nb.accepts(program)
    assert nb.split(program) == {1: "import torch\n%time f()", 3: "y = 1"}
    assert nb.accepts(program.replace("y = 1", "y = 2"))
    assert not nb.accepts(program.replace("# torchlint-notebook-cell 3\n", ""))  # cells merged
    assert not nb.accepts(program.replace("import torch\n", "import torch\n\n"
                                          "# torchlint-notebook-cell 3\n", 1))  # reordered
    assert not nb.accepts(program.replace("# torchlint-notebook-magic 1", "    # torchlint-notebook-magic 1"))
    assert not nb.accepts(program.replace("# torchlint-notebook-magic 1", "pass"))


def test_fix_of_stdin_notebook(runner, workdir):
    result = run(runner, "fix", "-", "--stdin-filename", "nb.ipynb", input=TRAINING)
    fixed = json.loads(result.stdout)
    assert 'x = torch.zeros(8, device="cuda")' in cell_sources(json.dumps(fixed))[8]
    check = run(runner, "check", "--output-format", "concise", "-", "--stdin-filename", "nb.ipynb",
                input=TRAINING)
    assert "nb.ipynb:cell 8:2:9: TL201" in check.output


# -- malformed notebooks, discovery ---------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ('{"cells": [}', "nb.ipynb:1:12: IOError: cannot read notebook: invalid JSON: Expecting value"),
    ('{"metadata": {}, "nbformat": 4}', "nb.ipynb:1:1: IOError: cannot read notebook: not a notebook: no `cells` list"),
    ('{"cells": {}}', "not a notebook: `cells` is not a list"),
    ('[1, 2]', "not a notebook: the JSON text is not an object"),
    ('{"cells": [{"cell_type": "code", "source": 3}]}', "cell 1: `source` is not a string or a list of strings"),
    ('{"cells": [7]}', "cell 1 is not a JSON object"),
    ('{"worksheets": []}', "nbformat 3 notebooks are not supported"),
])
@pytest.mark.parametrize("command", ["check", "fix"])
def test_malformed_notebook_is_reported_and_the_run_goes_on(runner, workdir, text, message, command):
    (workdir / "nb.ipynb").write_text(text)
    (workdir / "other.py").write_text("import torch\nfor b in loader:\n    x = torch.zeros(8).cuda()\n")
    result = run(runner, command, "--output-format", "concise", ".")
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert (workdir / "nb.ipynb").read_text() == text
    if command == "check":
        assert "other.py:3:9: TL201" in result.output
    else:
        assert (workdir / "other.py").read_text() == 'import torch\nfor b in loader:\n    x = torch.zeros(8, device="cuda")\n'


def test_undecodable_notebook(runner, workdir):
    (workdir / "nb.ipynb").write_bytes(b'{"cells": ["\xff"]}')
    result = run(runner, "check", "nb.ipynb")
    assert result.exit_code == 1
    assert "nb.ipynb:1:1: IOError: cannot read file: not valid UTF-8" in result.output


def test_discovery_finds_notebooks_and_respects_excludes(runner, project):
    (project / ".ipynb_checkpoints").mkdir()
    (project / ".ipynb_checkpoints" / "training-checkpoint.ipynb").write_text(TRAINING)
    (project / "drafts").mkdir()
    (project / "drafts" / "old.ipynb").write_text(TRAINING)
    (project / "pyproject.toml").write_text('[tool.torchlint]\nextend-exclude = ["drafts"]\n')
    result = run(runner, "check", "--output-format", "concise", "--select", "TL201", ".")
    assert result.output.splitlines()[0] == (
        "training.ipynb:cell 8:2:9: TL201 [*] `torch.zeros(...)` is created on the CPU and then "
        "copied to the device with `.cuda(...)`; create it there directly with `device=...`"
    )
    assert "Found 1 error." in result.output
    # --force-exclude applies to files named explicitly (as pre-commit names them)
    named = run(runner, "check", "--force-exclude", "drafts/old.ipynb")
    assert named.exit_code == 0


def test_bom_and_crlf_survive_a_fix(workdir):
    text = "\ufeff" + notebook(code("import torch\r\nfor b in loader:\r\n    x = torch.zeros(8).cuda()\r\n")).replace("\n", "\r\n")
    settings = settings_for(["TL201"])
    result = fix_notebook(text, "nb.ipynb", settings, codes_for(settings), unsafe=False)
    assert result.text == text.replace("torch.zeros(8).cuda()", 'torch.zeros(8, device=\\"cuda\\")')


# -- a real process -------------------------------------------------------------------


def test_subprocess_check_and_fix(tmp_path):
    target = tmp_path / "training.ipynb"
    target.write_text(TRAINING, encoding="utf-8")
    check = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--output-format", "concise", str(target.name)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert check.returncode == 1, check.stderr
    assert [line.split(" `")[0].split(" torch")[0] for line in check.stdout.splitlines()[:len(EXPECTED_CONCISE)]] == EXPECTED_CONCISE
    fix = subprocess.run(
        [sys.executable, "-m", "torchlint", "fix", target.name], cwd=tmp_path,
        capture_output=True, text=True, timeout=120,
    )
    assert fix.returncode == 1, fix.stderr
    assert "Fixed 4 errors" in fix.stdout  # TL201, TL202 and then TL204 twice
    json.loads(target.read_text(encoding="utf-8"))


# -- with the result cache and worker processes ----------------------------------------


def test_notebooks_through_worker_processes_and_the_cache(runner, workdir, monkeypatch):
    """Notebooks are analysed in the workers and cached with their cell
    positions: every way of running gives the same report."""
    import torchlint.parallel as parallel

    for i in range(parallel.MIN_FILES_FOR_POOL + 6):
        (workdir / f"nb{i:02}.ipynb").write_text(TRAINING, encoding="utf-8")
    (workdir / "broken.ipynb").write_text("{not json", encoding="utf-8")
    reports = {}
    for fmt in ("full", "json"):
        one = run(runner, "check", "--no-cache", "-j", "1", "--output-format", fmt, ".")
        two = run(runner, "check", "--no-cache", "-j", "2", "--output-format", fmt, ".")
        assert one.output == two.output
        reports[fmt] = one.output
    assert "nb00.ipynb:cell " in reports["full"] and "cannot read notebook" in reports["full"]
    assert all(d["cell"] is not None for d in json.loads(reports["json"]) if d["code"])

    analysed: list = []
    real = parallel.analyse_file
    monkeypatch.setattr(parallel, "analyse_file", lambda *a: analysed.append(a[0]) or real(*a))
    for fmt in ("full", "json"):
        cold = run(runner, "check", "-j", "1", "--output-format", fmt, ".")
        analysed.clear()
        warm = run(runner, "check", "-j", "1", "--output-format", fmt, ".")
        assert analysed == ["broken.ipynb"]  # read errors are never cached
        assert cold.output == warm.output == reports[fmt]
