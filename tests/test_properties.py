"""Property-based tests: whatever the input, `check` and `fix` never crash,
fixed code parses, fixing is idempotent and untouched input is never rewritten.

Three sources of input:
- arbitrary bytes, through the same decoding the CLI uses;
- arbitrary valid Python from hypothesmith's grammar-based generator, with
  `import torch` in front so that the torch pre-filter lets it through;
- generated PyTorch programs: every rule's anti-patterns (and near-misses)
  placed at random in loops, functions, classes, `with` blocks and branches,
  with comments, blank lines and odd formatting, so that the fixes run too.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import List

import libcst as cst
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from torchlint.config import Settings  # noqa: E402
from torchlint.engine import fix_text, lint_text  # noqa: E402
from torchlint.model import Kind  # noqa: E402
from torchlint.registry import all_codes  # noqa: E402
from torchlint.source import SourceError, decode  # noqa: E402

SETTINGS = Settings(root=Path.cwd())
ALL = list(all_codes())
COMMON = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    derandomize=True,
)


def _no_internal_errors(diagnostics) -> None:
    internal = [d for d in diagnostics if d.kind is Kind.INTERNAL_ERROR]
    assert not internal, internal


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def _check_fix_properties(text: str, path: str = "generated.py") -> None:
    """The invariants of `check` and `fix` on one source text."""
    result = lint_text(text, path, SETTINGS, ALL)
    _no_internal_errors(result.diagnostics)
    compiled = _parses(text)
    for unsafe in (False, True):
        fixed = fix_text(text, path, SETTINGS, ALL, unsafe)
        assert not fixed.errors, fixed.errors
        if not fixed.applied:
            assert fixed.text == text, "input without an applied fix must come back untouched"
            continue
        cst.parse_module(fixed.text)
        if compiled:
            assert _parses(fixed.text), "a file that compiled before fix must compile after it"
        again = fix_text(fixed.text, path, SETTINGS, ALL, unsafe)
        assert again.text == fixed.text, "fixing must be idempotent"
        assert not again.applied
        _no_internal_errors(lint_text(fixed.text, path, SETTINGS, ALL).diagnostics)


# -- arbitrary bytes ----------------------------------------------------------


@settings(COMMON, max_examples=150)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_crash(raw):
    try:
        source = decode(b"import torch\n" + raw)
    except SourceError:
        return  # reported to the user as an unreadable file
    _check_fix_properties(source.text)


@settings(COMMON, max_examples=150)
@given(st.text(alphabet=st.sampled_from(list("torch.cuda()[]{}:=+-*/%@\n\t #'\"\\,xyz0123456789if for in while def class with as return lambda item")), max_size=300))
def test_python_looking_noise_never_crashes(noise):
    _check_fix_properties("import torch\n" + noise)


# -- arbitrary valid Python ------------------------------------------------------


hypothesmith = pytest.importorskip("hypothesmith")


@settings(COMMON, max_examples=60)
@given(hypothesmith.from_grammar())
def test_generated_python_never_crashes(code):
    _check_fix_properties("import torch\n" + code)


@settings(COMMON, max_examples=30)
@given(hypothesmith.from_node())
def test_generated_syntax_trees_never_crash(code):
    _check_fix_properties("import torch\nfrom torch import nn\n" + code)


# -- generated PyTorch programs ------------------------------------------------------

# Statements that each rule reports (or deliberately does not), in one line each,
# so they can be dropped into any block.
STATEMENTS = [
    "total += loss.item()",
    "running_loss += loss.item()  # noqa: TL101",
    "losses.append(loss.item())",
    "x = torch.zeros(4, 8).cuda()",
    "x = torch.rand(3, 4).to(device)",
    "x = torch.ones(n, dtype=torch.float16).to(device, non_blocking=True)",
    "y = torch.randn(2, 2, generator=g).to(device)",
    "optimizer.zero_grad(set_to_none=False)",
    "optimizer.zero_grad()",
    "for p in model.parameters(): p.grad = None",
    "x = x.to(device)",
    "x, y = x.cuda(), y.cuda(non_blocking=False)",
    "batch = {k: v.to(device) for k, v in batch.items()}",
    "out = model(x).cpu().numpy()",
    "torch.cuda.synchronize()",
    "torch.cuda.empty_cache()",
    "torch.autograd.set_detect_anomaly(True)",
    "total_loss += loss",
    "total_loss = total_loss + criterion(out, y)",
    "loss.backward()",
    "(loss / accum).backward()",
    "scaler.scale(loss).backward()",
    "optimizer.step()",
    "model.eval()",
    "pred = model(x)",
    "print(x.cpu())",
    "attn = (q @ k.transpose(-2, -1) * scale).softmax(dim=-1) @ v",
    "torch.backends.cudnn.benchmark = False",
    "torch.use_deterministic_algorithms(True)",
    "model = nn.DataParallel(model)",
    "model = DDP(model, find_unused_parameters=True)",
    "a = 1; b = torch.empty(3).cuda(); c = 2",
    "z = (torch.arange(10)\n    .to(device))",
    "pass",
    # Whole blocks, in the shapes the fixable rules need.
    "running_loss = 0.0\nfor images, labels in loader:\n    loss = F.cross_entropy(model(images), labels)\n"
    "    loss.backward()\n    running_loss += loss.item()",
    "total_loss = 0.0\nfor images, labels in loader:\n    loss = F.cross_entropy(model(images), labels)\n"
    "    loss.backward()\n    total_loss += loss",
    "def evaluate(model, loader):\n    model.eval()\n    correct = 0\n    for images, labels in loader:\n"
    "        correct += (model(images).argmax(dim=1) == labels).sum()\n    return correct",
    "pinned = DataLoader(dataset, batch_size=8, pin_memory=True)\nfor xb, yb in pinned:\n    xb = xb.to(device)",
]

EXPRESSIONS_OF_STATEMENTS_WITH_BLOCKS = [
    "for step, (x, y) in enumerate(loader):",
    "for x in tqdm(loader):",
    "while step < max_steps:",
    "with torch.no_grad():",
    "with torch.autograd.detect_anomaly():",
    "if step % 100 == 0:",
    "if rank == 0:",
    "try:",
    "def train_step(model, x, y, optimizer):",
    "def evaluate(model, loader):",
    "@torch.no_grad()\ndef predict(model, x):",
    "class Trainer:\n    def fit(self, loader):",
]

HEADER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
device = torch.device("cuda")
loader = DataLoader(dataset, batch_size=32, num_workers=2)
model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
"""


def _indent(lines: List[str], by: str) -> List[str]:
    return [by + line if line.strip() else line for line in lines]


@st.composite
def programs(draw, depth: int = 0) -> List[str]:
    lines: List[str] = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 3 and draw(st.integers(0, 2)) == 0:
            header = draw(st.sampled_from(EXPRESSIONS_OF_STATEMENTS_WITH_BLOCKS))
            body = draw(programs(depth + 1))
            header_lines = header.split("\n")
            lines.extend(header_lines)
            # A class header ends inside a method: its body is indented twice.
            indent = "        " if header.startswith("class ") else "    "
            lines.extend(_indent(body, indent))
            if header == "try:":
                lines.extend(["except RuntimeError:", "    pass"])
        else:
            statement = draw(st.sampled_from(STATEMENTS))
            if draw(st.integers(0, 5)) == 0:
                lines.append("# a comment about the next line")
            lines.extend(statement.split("\n"))
            if draw(st.integers(0, 6)) == 0:
                lines.append("")
    return lines


@settings(COMMON, max_examples=200)
@given(programs(), st.sampled_from(["\n", "\r\n"]), st.sampled_from(["train.py", "tests/test_train.py"]))
def test_generated_pytorch_programs(lines, newline, path):
    text = (HEADER + "\n".join(lines) + "\n").replace("\n", newline)
    assert _parses(text), text
    _check_fix_properties(text, path)
    if newline == "\r\n":
        fixed = fix_text(text, path, SETTINGS, ALL, True).text
        assert "\n" not in fixed.replace("\r\n", ""), "fix must keep CRLF line endings"


FIXABLE = ["TL101", "TL201", "TL202", "TL204", "TL301", "TL302", "TL303", "TL401", "TL701", "TL702"]


@pytest.mark.parametrize("code", FIXABLE)
def test_generated_programs_exercise_every_fix(code):
    """The generator above reaches every codemod: otherwise its fix
    properties would hold vacuously."""

    def fixes_code(lines: List[str]) -> bool:
        text = HEADER + "\n".join(lines) + "\n"
        return fix_text(text, "train.py", SETTINGS, ALL, True).applied.get(code, 0) > 0

    found = hypothesis.find(programs(), fixes_code, settings=settings(COMMON, max_examples=2000))
    assert fixes_code(found)


# -- the command line on arbitrary files ---------------------------------------------


@settings(COMMON, max_examples=25)
@given(st.binary(max_size=200), st.sampled_from(["x.py", "x.pyi"]))
def test_cli_on_arbitrary_files_exits_cleanly(tmp_path_factory, raw, name):
    from click.testing import CliRunner

    from torchlint.cli import main

    folder = tmp_path_factory.mktemp("bytes")
    target = folder / name
    target.write_bytes(b"import torch\n" + raw)
    for args in (["check", str(target)], ["fix", "--unsafe-fixes", str(target)]):
        result = CliRunner().invoke(main, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        assert result.exit_code in (0, 1, 2)
        assert "Traceback" not in result.output


# -- generated notebooks ------------------------------------------------------------------

MAGICS = ["%matplotlib inline", "!pip install torch", "%time x = 1", "files = !ls", "%load_ext autoreload",
          "torch.save?"]


@st.composite
def notebooks(draw):
    """A notebook whose code cells split a generated PyTorch program, with
    magics, markdown cells, outputs and one of several JSON styles."""
    lines = HEADER.splitlines() + draw(programs())
    # Split only before top-level lines, so that every cell is a whole block.
    cuts = sorted(set(draw(st.lists(st.integers(1, len(lines) - 1), max_size=4))))
    cuts = [c for c in cuts if not lines[c].startswith((" ", "\t", "except"))]
    pieces, start = [], 0
    for cut in cuts + [len(lines)]:
        pieces.append(lines[start:cut])
        start = cut
    cells = []
    for n, piece in enumerate(pieces):
        if draw(st.booleans()):
            piece = [draw(st.sampled_from(MAGICS))] + piece
        if draw(st.integers(0, 3)) == 0:
            piece = ["%%time"] + piece
        source = "\n".join(piece)
        cells.append({
            "cell_type": "code", "execution_count": n + 1, "id": f"c{n}", "metadata": {},
            "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok é\n"]}],
            "source": source.splitlines(keepends=True) if draw(st.booleans()) else source,
        })
        if draw(st.integers(0, 2)) == 0:
            cells.append({"cell_type": "markdown", "id": f"m{n}", "metadata": {}, "source": "## Notes\n`x.cuda()`"})
    data = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}
    indent = draw(st.sampled_from([1, 2, 4]))
    return json.dumps(data, indent=indent, ensure_ascii=draw(st.booleans())) + "\n"


@settings(COMMON, max_examples=60)
@given(notebooks())
def test_generated_notebooks(text):
    from torchlint.notebook import fix_notebook, lint_notebook

    linted = lint_notebook(text, "nb.ipynb", SETTINGS, ALL)
    _no_internal_errors(linted.diagnostics)
    assert all(d.cell is not None for d in linted.diagnostics if d.code)
    for unsafe in (False, True):
        fixed = fix_notebook(text, "nb.ipynb", SETTINGS, ALL, unsafe)
        assert not fixed.errors, fixed.errors
        if not fixed.applied:
            assert fixed.text == text
            continue
        before, after = json.loads(text), json.loads(fixed.text)
        for old, new in zip(before["cells"], after["cells"]):
            source = lambda cell: "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
            if old["cell_type"] != "code":
                assert old == new
            for line in source(old).splitlines():
                if line.startswith(("%", "!")) or line.endswith("?") or "= !" in line:
                    assert line in source(new).splitlines(), "magic lines are kept"
        assert len(before["cells"]) == len(after["cells"])
        again = fix_notebook(fixed.text, "nb.ipynb", SETTINGS, ALL, unsafe)
        assert again.text == fixed.text and not again.applied
