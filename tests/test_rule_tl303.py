"""Focused tests for TL303 (loss-graph-retained)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.helpers import fix, lint
from torchlint.model import Applicability


def tl303(code: str):
    return lint(code, select=["TL303"])


def positions(code: str):
    return [(d.line, d.column) for d in tl303(code)]


def fixed(code: str) -> str:
    result = fix(code, select=["TL303"])
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=["TL303"])
    assert again.text == result.text and not again.applied
    assert tl303(result.text) == []
    return result.text


def loop(body: str, after: str = "", header: str = "for x, y in loader:") -> str:
    """A training function whose loop body is ``body`` (and code after the loop)."""
    inner = textwrap.indent(textwrap.dedent(body).strip("\n"), "        ")
    tail = textwrap.indent(textwrap.dedent(after).strip("\n"), "    ") if after else ""
    return (
        "import torch\n\n"
        "def train(model, loader, optimizer, scaler, accelerator, acc, losses, stats):\n"
        f"    {header}\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        f"{inner}\n"
        f"{tail}\n"
    )


@pytest.mark.parametrize(
    "backward",
    [
        "loss.backward()",
        "loss.backward(retain_graph=False)",
        "(loss / 4).backward()",
        "scaler.scale(loss).backward()",
        "accelerator.backward(loss)",
        "torch.autograd.backward(loss)",
        "loss.mean().backward()",
    ],
)
def test_backward_idioms(backward: str) -> None:
    code = loop(f"{backward}\noptimizer.step()\nacc += loss\n")
    assert positions(code) == [(8, 16)]


@pytest.mark.parametrize(
    "accumulation, column",
    [
        ("acc += loss", 16),
        ("acc = acc + loss", 21),
        ("acc = loss + acc", 15),
        ("losses.append(loss)", 23),
        ("stats['loss'] += loss", 26),
        ("acc += loss * x.size(0)", 16),
        ("acc += x.size(0) * loss", 28),
        ("acc += -loss / 2", 17),
        ("losses.append((step, loss))", 30),
        ("losses.append({'loss': loss})", 32),
        ("losses.append([loss])", 24),
    ],
)
def test_accumulations(accumulation: str, column: int) -> None:
    code = loop(f"loss.backward()\n{accumulation}\n", header="for step, (x, y) in enumerate(loader):")
    assert positions(code) == [(7, column)]


@pytest.mark.parametrize(
    "accumulation",
    [
        "acc += loss.item()",
        "acc += loss.detach()",
        "acc += float(loss)",
        "acc += loss.detach().cpu()",
        "losses.append(loss.item())",
        "losses.append(loss.detach().clone())",
        "acc += other_loss",
        "acc -= loss",
        "acc *= loss",
        "acc = loss",
        "acc = max(acc, loss)",
        "losses.extend(loss)",
        "print(acc + loss)",
        "losses.append(loss, 1)",
    ],
)
def test_not_accumulations_of_the_graph(accumulation: str) -> None:
    code = loop(f"loss.backward()\n{accumulation}\n")
    assert tl303(code) == []


def test_accumulation_before_backward_and_under_periodic_guard() -> None:
    code = loop(
        """
        losses.append(loss)
        loss.backward()
        if step % 100 == 0:
            stats['history'].append(loss)
        """,
        header="for step, (x, y) in enumerate(loader):",
    )
    assert positions(code) == [(6, 23), (9, 37)]


def test_accumulator_backpropagated_later_is_silent() -> None:
    direct = loop("loss.backward(retain_graph=True)\nacc = acc + loss\n", after="acc.backward()")
    stacked = loop("loss.backward(retain_graph=True)\nlosses.append(loss)\n", after="torch.stack(losses).sum().backward()")
    via_name = loop(
        "loss.backward(retain_graph=True)\nlosses.append(loss)\n",
        after="total = sum(losses) / len(losses)\nobjective = total * 2\nobjective.backward()",
    )
    via_grad = loop("loss.backward(retain_graph=True)\nacc += loss\n", after="grads = torch.autograd.grad(acc, model.parameters())")
    for code in (direct, stacked, via_name, via_grad):
        assert tl303(code) == [], code


def test_loss_reassigned_to_a_number_is_silent() -> None:
    assert tl303(loop("loss.backward()\nloss = loss.item()\nacc += loss\n")) == []
    assert tl303(loop("loss.backward()\nloss = float(loss)\nlosses.append(loss)\n")) == []


def test_accumulation_under_no_grad_is_silent() -> None:
    code = loop(
        """
        loss.backward()
        with torch.no_grad():
            acc += loss
        with torch.inference_mode():
            losses.append(loss)
        """
    )
    assert tl303(code) == []


def test_loop_without_backward_is_silent() -> None:
    code = """
    import torch

    def validate(model, loader):
        total = 0.0
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            total += loss
        return total
    """
    assert tl303(code) == []


def test_backward_in_another_loop_is_silent() -> None:
    code = """
    import torch

    def train(model, loader, optimizer, epochs):
        history = []
        for epoch in range(epochs):
            for x, y in loader:
                loss = model(x).sub(y).pow(2).mean()
                loss.backward()
                optimizer.step()
            history.append(loss)
        for x, y in loader:
            loss = model(x).mean()
            history.append(loss)
        return history
    """
    assert tl303(code) == []


def test_nested_loop_with_backward_and_accumulation_in_the_inner_loop() -> None:
    code = """
    import torch

    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            epoch_loss = 0
            for x, y in loader:
                loss = model(x).sub(y).pow(2).mean()
                loss.backward()
                optimizer.step()
                epoch_loss += loss
            print(epoch, epoch_loss)
    """
    assert positions(code) == [(11, 27)]


def test_attribute_loss() -> None:
    code = loop("out = model(x, labels=y)\nout.loss.backward()\nstats['loss'] += out.loss\nacc += out.logits\n")
    assert positions(code) == [(8, 26)]


def test_module_level_loop_and_while_loop() -> None:
    code = """
    import torch
    losses = []
    step = 0
    while step < 10:
        loss = model(data[step]).mean()
        loss.backward()
        losses.append(loss)
        step += 1
    """
    assert positions(code) == [(8, 19)]


def test_separate_functions_do_not_mix() -> None:
    code = """
    import torch

    def train_step(model, x):
        loss = model(x).mean()
        loss.backward()
        return loss

    def train(model, loader):
        total = 0.0
        for x in loader:
            loss = train_step(model, x)
            total += loss
        return total
    """
    # the backward is in another function: not "a loop that calls backward"
    assert tl303(code) == []


def test_fix_is_safe_detach_and_keeps_layout() -> None:
    code = loop("loss.backward()\nacc += ( loss * x.size(0) )  # per sample\nlosses.append((loss))\n")
    (d1, d2) = tl303(code)
    assert d1.fix is not None and d1.fix.applicability is Applicability.SAFE
    out = fixed(code)
    assert "acc += ( loss.detach() * x.size(0) )  # per sample" in out
    assert "losses.append((loss).detach())" in out


def test_fix_on_attribute_loss() -> None:
    code = loop("out = model(x)\nout.loss.backward()\nacc = acc + out.loss\n")
    assert "acc = acc + out.loss.detach()" in fixed(code)


def test_noqa() -> None:
    code = loop("loss.backward()\nacc += loss  # noqa: TL303\n")
    assert tl303(code) == []


# -- when `.detach()` could change what the program does -------------------------------


def _applicability(code: str):
    (d,) = tl303(code)
    assert d.fix is not None
    return d.fix.applicability


@pytest.mark.parametrize(
    "backward, applicability",
    [
        ("loss.backward()", Applicability.SAFE),
        ("loss.backward(retain_graph=False)", Applicability.SAFE),
        # the graph is kept on purpose: another backward may go through the accumulator
        ("loss.backward(retain_graph=True)", Applicability.UNSAFE),
        ("loss.backward(create_graph=True)", Applicability.UNSAFE),
        ("loss.backward(retain_graph=keep)", Applicability.UNSAFE),
        ("loss.backward(None, True)", Applicability.UNSAFE),
        ("torch.autograd.backward(loss, None, True)", Applicability.UNSAFE),
        ("accelerator.backward(loss, **backward_kwargs)", Applicability.UNSAFE),
    ],
)
def test_a_graph_kept_for_later_makes_the_fix_unsafe(backward: str, applicability) -> None:
    assert _applicability(loop(f"{backward}\nacc += loss\n")) is applicability


@pytest.mark.parametrize(
    "rebinding, applicability",
    [
        ("", Applicability.SAFE),
        ("loss = loss / accumulation_steps\n", Applicability.SAFE),
        ("loss /= accumulation_steps\n", Applicability.SAFE),
        ("loss = -loss\n", Applicability.SAFE),
        # the name may hold something without `.detach()` (a number from a meter):
        # the fixed code would raise AttributeError
        ("loss = meter.avg\n", Applicability.UNSAFE),
        ("loss, parts = reduce(loss)\n", Applicability.UNSAFE),
        ("for loss in extra:\n    pass\n", Applicability.UNSAFE),
    ],
)
def test_a_rebound_loss_name_makes_the_fix_unsafe(rebinding: str, applicability) -> None:
    code = loop(f"loss.backward()\n{rebinding}acc += loss\n")
    assert _applicability(code) is applicability


def test_a_rebound_owner_of_an_attribute_loss_makes_the_fix_unsafe() -> None:
    safe = loop("out = model(x)\nout.loss.backward()\nacc += out.loss\n")
    assert _applicability(safe) is Applicability.SAFE
    unsafe = loop("out = model(x)\nout.loss.backward()\nout = postprocess(out)\nacc += out.loss\n")
    assert _applicability(unsafe) is Applicability.UNSAFE


def test_a_parameter_named_like_the_loss_counts_as_a_binding() -> None:
    code = textwrap.dedent(
        """\
        import torch

        def train(model, loader, loss, acc):
            for x in loader:
                loss = model(x).sum()
                loss.backward()
                acc += loss
        """
    )
    assert _applicability(code) is Applicability.UNSAFE
