"""The shared recognisers of training-step idioms (rules/_training.py)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from torchlint.config import Settings
from torchlint.rule import Context
from torchlint.names import dotted_name
from torchlint.rules._training import backward_loss, is_backward, is_optimizer_step


def _call(source: str, imports: str = "import torch\n"):
    module = cst.parse_module(imports + source + "\n")
    ctx = Context("snippet.py", imports + source, Settings(root=Path.cwd()))
    ctx.imports.scan_module(module)
    call = module.body[-1].body[0].value
    assert isinstance(call, cst.Call)
    return call, ctx


@pytest.mark.parametrize(
    "source, loss",
    [
        ("loss.backward()", "loss"),
        ("loss.backward(retain_graph=True)", "loss"),
        ("(loss / accum_steps).backward()", "loss"),
        ("(loss / self.accum).backward()", "loss"),
        ("(0.5 * loss).backward()", "loss"),
        ("(loss * weight).backward()", "loss"),
        ("scaler.scale(loss).backward()", "loss"),
        ("self.scaler.scale(loss / n).backward()", "loss"),
        ("loss.mean().backward()", "loss"),
        ("outputs.loss.backward()", "outputs.loss"),
        ("accelerator.backward(loss)", "loss"),
        ("self.fabric.backward(loss)", "loss"),
        ("self.manual_backward(loss)", "loss"),
        ("torch.autograd.backward(loss)", "loss"),
        ("torch.autograd.backward(tensors=total)", "total"),
    ],
)
def test_backward_loss(source, loss):
    call, ctx = _call(source)
    assert is_backward(call, ctx)
    assert dotted_name(backward_loss(call, ctx)) == loss


@pytest.mark.parametrize("source", ["loss.detach()", "model.forward(x)", "backward(loss)", "autograd.grad(loss, x)"])
def test_not_backward(source):
    call, ctx = _call(source)
    assert not is_backward(call, ctx)
    assert backward_loss(call, ctx) is None


@pytest.mark.parametrize(
    "source",
    ["optimizer.step()", "self.optimizer.step()", "opt.step()", "optim.step()", "g_optimizer.step()",
     "optimizer_d.step()", "scaler.step(optimizer)", "self.scaler.step(self.opt)", "optimizer.step(closure)"],
)
def test_optimizer_step(source):
    call, _ = _call(source)
    assert is_optimizer_step(call)


@pytest.mark.parametrize(
    "source",
    ["scheduler.step()", "lr_scheduler.step()", "env.step(action)", "self.step()", "scaler.step(scheduler)", "optimizer.zero_grad()"],
)
def test_not_optimizer_step(source):
    call, _ = _call(source)
    assert not is_optimizer_step(call)
