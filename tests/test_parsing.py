"""Valid Python that LibCST's validation refuses (a keyword directly before a
parenthesized conditional expression or lambda): analysed and fixed like any
other file (torchlint.parsing), never an internal error."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from tests.helpers import codes, fix, lint
from torchlint.parsing import parse_module

REFUSED = [
    "assert(a if c else True)\n",
    "assert(lambda: 1)\n",
    "def f():\n    return(a if c else b)\n",
    "def f():\n    return(lambda: 1)\n",
    "raise(E if c else F)\n",
    "def f():\n    yield(a if c else b)\n",
    "async def f():\n    await(a if c else b)\n",
    "x = not(a if c else b)\n",
    "x = a not in(b if c else d)\n",
    "x = a and(b if c else d)\n",
    "if(a if c else b): pass\n",
    "while(a if c else b): pass\n",
    "for x in(a if c else b): pass\n",
    "x = [y for y in a if(b if c else d)]\n",
    "if a: pass\nelif(a if c else b): pass\n",
    "x = (a)if(b if c else d)else(e)\n",
    "assert(x if y else z), 'm'; assert(lambda: 1)\nassert(q)\n",
]


@pytest.mark.parametrize("text", REFUSED)
def test_refused_text_parses_and_gives_itself_back(text):
    ast.parse(text)
    with pytest.raises((cst.CSTValidationError, TypeError)):
        cst.parse_module(text)  # the LibCST bug this works around (fails once LibCST fixes it)
    assert parse_module(text).code == text


def test_syntax_errors_still_raise():
    with pytest.raises(cst.ParserSyntaxError):
        parse_module("def f(:\n    assert(a if b else c)\n")


def test_accepted_text_is_parsed_once_as_before():
    text = "assert (a if c else True)\nx = f'{a if(b) else c}'\n"
    assert parse_module(text).code == text


TRAIN = """\
import torch


def train(args, model, loader, opt):
    assert(args.dropout == 0 if args.model.startswith("convnext") else True)
    for x in loader:
        loss = model(x.cuda(non_blocking=True))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        noise = torch.randn(8).cuda()
        print(loss.item())
    return(loss if args.keep else None)
"""


def test_a_file_with_such_a_statement_is_analysed():
    found = lint(TRAIN, select=["TL101", "TL201", "TL301"])
    assert codes(found) == ["TL301", "TL201", "TL101"]
    assert [d.line for d in found] == [10, 11, 12]


def test_fixes_elsewhere_in_the_file_keep_the_statement_as_written():
    result = fix(TRAIN, unsafe=True)
    assert 'assert(args.dropout == 0 if args.model.startswith("convnext") else True)' in result.text
    assert "return(loss if args.keep else None)" in result.text
    assert "torch.randn(8, device=\"cuda\")" in result.text
    assert "set_to_none=True" in result.text
    ast.parse(result.text)
    assert fix(result.text, unsafe=True).text == result.text  # idempotent


def test_a_fix_inside_such_a_statement_is_refused_with_a_message():
    text = TRAIN.replace("        print(loss.item())\n", "        assert(torch.randn(8).cuda() if args.m else True)\n")
    result = fix(text, unsafe=True)
    assert "assert(torch.randn(8).cuda() if args.m else True)" in result.text
    assert "set_to_none=True" in result.text  # the other fixes still apply
    assert any("LibCST cannot rebuild" in d.message for d in result.errors)
    ast.parse(result.text)


def test_json_edits_for_a_file_with_such_a_statement(runner, workdir):
    import json

    from tests.test_cli import run
    from tests.test_json_url_and_edits import _apply

    text = TRAIN.replace("        print(loss.item())\n", "        assert(torch.randn(8).cuda() if args.m else True)\n")
    (workdir / "train.py").write_text(text)
    items = json.loads(run(runner, "check", "--output-format", "json", "--select", "TL201,TL301",
                           "--unsafe-fixes", "train.py").output)
    assert sorted(item["location"]["row"] for item in items) == [10, 11, 12]
    for item in items:  # every edit, the one inside the assert too, gives code that parses
        assert item["fix"] is not None and item["fix"]["edits"], item
        fixed = _apply(text, item["fix"]["edits"])
        ast.parse(fixed)
        assert parse_module(fixed).code == fixed
