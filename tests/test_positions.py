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
