"""The lean position computation agrees with LibCST's PositionProvider."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from torchlint.positions import node_positions

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(
    [*ROOT.glob("examples/*.py"), *ROOT.glob("tests/fixtures/*/input.py"), ROOT / "torchlint" / "cli.py"]
)

EDGE_CASES = [
    "x = 1\r\ny = (\r\n    2)\r\n",  # CRLF
    "x = 1\ry = 2\r",  # old Mac line endings
    "@decorator\n@other(1)\ndef f(a, *, b=2):\n    '''doc\n    string'''\n    return a\n",
    "class A(B, metaclass=M):\n\tdef f(self): return [i for i in range(3) if i]\n",
    "s = f'{x!r:>{width}}' + 'é' * 3\nlambda: (yield)\n",
    "if a:\n    pass\nelif b:  # comment\n    pass\nelse:\n    pass\n",
    "with open(p) as f, g() as (a, b):\n    async def h(): await x\n",
]


def _expected(module: cst.Module):
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {
        node: ((r.start.line, r.start.column), (r.end.line, r.end.column))
        for node, r in positions.items()
    }


@pytest.mark.parametrize("text", EDGE_CASES + [p.read_text() for p in SOURCES],
                         ids=[f"edge{i}" for i in range(len(EDGE_CASES))] + [p.parent.name + "/" + p.name for p in SOURCES])
def test_same_positions_as_libcst(text):
    module = cst.parse_module(text)
    expected = _expected(module)
    got = node_positions(module)
    assert len(expected) > 0
    assert {n: got[n] for n in expected} == expected


# -- positions computed per top-level statement (torchlint.positions.Positions) --------

PARTIAL_CASES = [
    *EDGE_CASES,
    "x = 1\r\n\r\n# a comment\r\ndef f():\r\n    s = '''a\r\nb'''\r\n    return s\r\n",  # CRLF, string over lines
    "import torch\n\n\n@torch.no_grad()\n# between\n@other\ndef f(x):\n    return x.item()\n\n\n"
    "class A:\n    '''doc\n\nx = 1\n'''\n\n    def g(self):\n        return 1\n",
    'TEMPLATE = """\nx = 1\n"""\nx = 1\ny = 2  # trailing\n',  # a statement's code also in a string
    "x = 1\nx = 1\ny = x\n",  # a statement written twice: the whole module's positions
    "# header\n\nimport torch\nx = torch.ones(2).to('cuda')",  # no newline at the end
    "\ufeffimport torch\nx = 1\n",  # byte order mark
    "if x:\n    y = (\n        1 +\n\n        2)\n# footer comment\n",
    # The same method in two classes: placed from each class.
    "class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 1\n",
    # Blocks indented otherwise than the module's default; a method's decorator and comments.
    "class A:\n    x = 1\n\n    # about g\n    @staticmethod\n    def g():\n      if y:\n          return [\n  1]\n"
    "def h():\n\treturn 2\n",
]


def _notebook_program() -> str:
    from torchlint.notebook import read_notebook

    return read_notebook(ROOT / "tests" / "fixtures" / "notebooks" / "training.ipynb").text


def _partial_cases():
    from torchlint.notebook import parse

    program = parse(_notebook_program()).program
    return [*PARTIAL_CASES, program, *(p.read_text() for p in SOURCES)]


@pytest.mark.parametrize("text", _partial_cases())
def test_positions_per_statement_equal_the_whole_modules(text):
    from torchlint.nodes import walk_nodes
    from torchlint.positions import Positions

    module = cst.parse_module(text)
    full = node_positions(module)
    nodes = list(walk_nodes(module))
    # Asked one by one (each top-level statement generated alone when its
    # node is asked), then all at once on a fresh object.
    one_by_one = Positions(module, text)
    assert {n: one_by_one[n] for n in nodes} == {n: full[n] for n in nodes}
    together = Positions(module, text)
    together.prepare(nodes)
    assert {n: together.get(n) for n in full} == full


def test_a_node_of_one_statement_needs_only_that_statement():
    from torchlint.positions import Positions

    text = "import torch\n\n\ndef f(x):\n    return x\n\n\ndef g(y):\n    # note\n    return y.item()\n"
    module = cst.parse_module(text)
    target = module.body[2].body.body[0].body[0].value  # y.item()
    positions = Positions(module, text)
    assert positions[target] == node_positions(module)[target] == ((10, 11), (10, 19))
    assert not positions._full and module.body[1] not in positions._computed


def test_a_node_of_a_method_needs_only_its_statement():
    from torchlint.positions import Positions

    text = ("import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            "    def forward(self, x):\n        return x.item()\n")
    module = cst.parse_module(text)
    forward = module.body[1].body.body[1]
    target = forward.body.body[0].body[0].value  # x.item()
    positions = Positions(module, text)
    assert positions[target] == node_positions(module)[target] == ((9, 15), (9, 23))
    # Placed from its own statement in `forward`: neither the class nor `__init__` generated.
    assert not positions._full and target.func in positions._computed
    assert module.body[1] not in positions._computed and forward not in positions._computed
    assert module.body[1].body.body[0] not in positions._computed
