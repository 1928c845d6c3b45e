"""Focused tests for TL101 (item-in-loop)."""

from __future__ import annotations

import ast

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability
from torchlint.registry import all_rules

RULE = all_rules()["TL101"]


def tl101(code: str):
    return lint(code, select=["TL101"])


def positions(code: str):
    return [(d.line, d.column) for d in tl101(code)]


@pytest.mark.parametrize("example", RULE.INVALID)
def test_invalid_examples_are_reported(example: str) -> None:
    assert "TL101" in codes(tl101(example))


@pytest.mark.parametrize("example", RULE.VALID)
def test_valid_examples_are_silent(example: str) -> None:
    assert tl101(example) == []


def test_while_loop_body_and_test() -> None:
    code = """
    import torch
    def run(model, x):
        while model(x).abs().max().item() > 1.0:
            x = x / 2
            print(x.sum().item())
    """
    assert positions(code) == [(4, 11), (6, 15)]


def test_comprehensions_and_generators() -> None:
    code = """
    import torch
    values = [t.item() for t in outputs]
    nested = [[v for v in row.tolist()] for row in matrix]
    total = sum(t.item() for t in outputs)
    """
    # the outermost iterable of a comprehension runs once: `row.tolist()` is
    # in the outer comprehension's element, so it runs per row.
    assert positions(code) == [(3, 11), (4, 23), (5, 13)]


def test_outermost_comprehension_iterable_runs_once() -> None:
    code = """
    import torch
    values = [v * 2 for v in scores.tolist()]
    """
    assert tl101(code) == []


def test_periodic_guard_with_and_or_else() -> None:
    code = """
    import torch
    for step, x in enumerate(loader):
        loss = model(x)
        if rank == 0 and step % 50 == 0:
            print(loss.item())
        if step % 50 == 0:
            pass
        else:
            print(loss.item())
    """
    # the `else` branch of a periodic guard runs on the other iterations
    assert positions(code) == [(10, 15)]


def test_items_and_calls_with_arguments_are_not_matched() -> None:
    code = """
    import torch
    for x in loader:
        for k, v in x.items():
            pass
        a = arr.item(0)
        b = t.tolist(1)
    """
    assert tl101(code) == []


def test_runs_once_per_loop() -> None:
    code = """
    import torch
    def search(model, loader):
        for x in loader:
            out = model(x)
            if out.isnan().any():
                raise ValueError(f"nan at {out.sum().item()}")
            if out.mean() > 0:
                best = out.mean().item()
                break
            return out.max().item()
    """
    assert tl101(code) == []


def test_host_values_are_not_reported() -> None:
    code = """
    import numpy as onp
    import pandas
    import torch
    def f(loader, table: pandas.DataFrame, arr: onp.ndarray):
        preds = None
        for x in loader:
            a = onp.mean(x).item()
            b = table["col"].tolist()
            c = arr[0].item()
            d = x.detach().cpu().item()
            e = x.to("cpu").tolist()
            preds = x.numpy()
            g = preds.tolist()
            h = torch.from_numpy(arr).sum().item()
            i = torch.arange(10, device="cpu").tolist()
            j = (2.0).real
            k = [1, 2, 3]
    """
    assert tl101(code) == []


def test_name_with_a_tensor_binding_is_reported() -> None:
    code = """
    import numpy as np
    import torch
    def f(loader, device):
        for x in loader:
            y = np.asarray(x)
            y = torch.from_numpy(y).to(device)
            print(y.sum().item())
            z = torch.zeros(3, device=device)
            print(z.tolist())
            v = x.max(dim=1).values.tolist()
    """
    assert positions(code) == [(8, 15), (10, 15), (11, 13)]


def test_default_device_changed_makes_factories_unknown() -> None:
    code = """
    import torch
    torch.set_default_device("cuda")
    for _ in range(10):
        print(torch.rand(3).tolist())
    """
    assert positions(code) == [(5, 11)]


def test_nested_function_in_loop_is_its_own_scope() -> None:
    code = """
    import torch
    for x in loader:
        def value(t):
            return float(t.item())
        handler = lambda t: t.tolist()
    """
    assert tl101(code) == []


# -- the fix -----------------------------------------------------------------


def fix_of(code: str):
    (diagnostic,) = tl101(code)
    return diagnostic.fix


ACCUMULATION = """
import torch
def train(model, loader):
    total = 0
    for x in loader:
        total += model(x).sum().item()
    return total
"""


def test_accumulation_fix_is_unsafe_and_rewrites_only_the_method() -> None:
    info = fix_of(ACCUMULATION)
    assert info is not None and info.applicability is Applicability.UNSAFE
    assert "model(x).sum().detach()" in info.message and "`total`" in info.message
    assert fix(ACCUMULATION, select=["TL101"]).text == fix(ACCUMULATION, select=["TL101"], unsafe=False).text
    result = fix(ACCUMULATION, select=["TL101"], unsafe=True)
    assert result.text == ACCUMULATION.replace(".sum().item()", ".sum().detach()")
    ast.parse(result.text)
    again = fix(result.text, select=["TL101"], unsafe=True)
    assert again.text == result.text and not again.applied
    assert tl101(result.text) == []


def test_accumulation_fix_keeps_formatting() -> None:
    code = """
    import torch
    def train(model, loader):
        total = 0.0
        for x in loader:
            total += ( model(x)
                .sum() . item() )  # keep me
        return total
    """
    result = fix(code, select=["TL101"], unsafe=True)
    assert ".sum() . detach() )  # keep me" in result.text


def test_accumulation_fix_in_nested_loop_with_init_in_outer_loop() -> None:
    code = """
    import torch
    def train(model, loader, epochs):
        for epoch in range(epochs):
            epoch_loss = 0.0
            for x in loader:
                epoch_loss += model(x).item()
            print(epoch, epoch_loss / len(loader))
    """
    assert fix_of(code) is not None


@pytest.mark.parametrize(
    "body",
    [
        # attribute and subscript accumulators
        "self.total = 0.0\nfor x in loader:\n    self.total += model(x).item()\n",
        "stats = {'loss': 0.0}\nfor x in loader:\n    stats['loss'] += model(x).item()\n",
        # not a number literal, or no initialisation at all
        "total = torch.zeros(())\nfor x in loader:\n    total += model(x).item()\n",
        "total = start\nfor x in loader:\n    total += model(x).item()\n",
        "for x in loader:\n    total += model(x).item()\n",
        # initialised only after (or inside) the loop
        "for x in loader:\n    total = 0\n    total += model(x).item()\n",
        # global / nonlocal
        "global total\ntotal = 0\nfor x in loader:\n    total += model(x).item()\n",
        # not the whole right-hand side, not `+=`, not `.item()`
        "total = 0\nfor x in loader:\n    total += model(x).item() * 2\n",
        "total = 0\nfor x in loader:\n    total -= model(x).item()\n",
        "total = 0\nfor x in loader:\n    total += model(x).tolist()\n",
        # read every iteration: the sync would only move
        "total = 0\nfor i, x in enumerate(loader):\n    total += model(x).item()\n    print(total / (i + 1))\n",
        "total = 0\nwhile total < 10:\n    total += model(x).item()\n",
    ],
)
def test_accumulation_fix_not_offered(body: str) -> None:
    indented = "".join("    " + line + "\n" for line in body.splitlines())
    code = "import torch\ndef f(self, model, loader, start):\n" + indented
    diagnostics = tl101(code)
    assert len(diagnostics) == 1
    assert diagnostics[0].fix is None


def test_accumulator_read_under_periodic_guard_still_fixed() -> None:
    code = """
    import torch
    def train(model, loader):
        total = 0.0
        for step, x in enumerate(loader):
            total += model(x).item()
            if step % 100 == 0:
                print(total / (step + 1))
    """
    assert fix_of(code) is not None


def test_module_level_accumulation() -> None:
    code = """
    import torch
    total = 0
    for x in loader:
        total += model(x).item()
    """
    result = fix(code, select=["TL101"], unsafe=True)
    assert "total += model(x).detach()" in result.text


def test_noqa_suppresses() -> None:
    code = """
    import torch
    for x in loader:
        print(x.item())  # noqa: TL101
    """
    assert tl101(code) == []


def test_call_of_a_call_result_does_not_crash() -> None:
    # Found on real code (an evaluation script): a loss module built and
    # called in one expression, then `.item()` in the loop.
    code = """
    import torch.nn as nn
    for x, y in loader:
        loss = nn.CrossEntropyLoss()(model(x), y)
        print(loss.item())
        scores = (lambda t: t)(model(x))
        print(scores.item())
    """
    assert [d.line for d in tl101(code)] == [5, 7]
