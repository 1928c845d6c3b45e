"""Focused tests for TL602 (ddp-accumulation-without-no-sync)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import lint

WRAP = "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(net, device_ids=[0])\n"


def tl602(code: str):
    return lint(code, select=["TL602"])


def lines(code: str):
    return [d.line for d in tl602(code)]


def script(body: str, wrap: str = WRAP) -> str:
    return "import torch\n" + wrap + textwrap.dedent(body).lstrip("\n")


ACCUMULATION = """
for i, (x, y) in enumerate(loader):
    loss = model(x).sub(y).pow(2).mean() / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""

NANOGPT_STYLE = """
def train(model, get_batch, optimizer, scaler, max_iters, ddp):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            if ddp:
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            x, y = get_batch("train")
            loss = model(x, y) / gradient_accumulation_steps
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
"""


def test_classic_accumulation_reported_at_backward() -> None:
    (d,) = tl602(script(ACCUMULATION))
    assert (d.line, d.column) == (6, 5)
    assert d.fix is None
    assert "no_sync" in d.message


@pytest.mark.parametrize(
    "wrap",
    [
        "import torch.nn.parallel\nmodel = torch.nn.parallel.DistributedDataParallel(net)\n",
        "from torch.nn.parallel import DistributedDataParallel\nmodel = DistributedDataParallel(net)\n",
        "from torch import nn\nmodel = nn.parallel.DistributedDataParallel(net)\n",
        "import torch.nn as nn\nif distributed:\n    model = nn.parallel.DistributedDataParallel(model)\n",
        "def wrap(m):\n    from torch.nn.parallel import DistributedDataParallel as D\n    return D(m)\n",
    ],
)
def test_ddp_spellings(wrap: str) -> None:
    assert len(tl602(script(ACCUMULATION, wrap))) == 1


@pytest.mark.parametrize(
    "wrap",
    [
        "",  # no DDP in the module
        "from mylib import DistributedDataParallel\nmodel = DistributedDataParallel(net)\n",
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nmodel = FSDP(net)\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nassert isinstance(model, DDP)\n",
        # DDP mentioned only in a comment: DistributedDataParallel
        "# model = DistributedDataParallel(net)\n",
    ],
)
def test_no_ddp_wrap_is_silent(wrap: str) -> None:
    assert tl602(script(ACCUMULATION, wrap)) == []


@pytest.mark.parametrize(
    "control",
    [
        "ctx = model.no_sync if (i + 1) % accum_steps else contextlib.nullcontext\n",
        "model.require_backward_grad_sync = (i + 1) % accum_steps == 0\n",
        "sync_ctx = getattr(model, 'no_sync')\n",
    ],
)
def test_sync_control_in_the_module_is_silent(control: str) -> None:
    body = ACCUMULATION.replace("    loss.backward()\n", "    " + control + "    loss.backward()\n")
    assert tl602(script(body)) == []


def test_accelerate_accumulate_is_silent() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        with accelerator.accumulate(model):
            loss = model(x).mean()
            accelerator.backward(loss)
            if (i + 1) % accum_steps == 0:
                optimizer.step()
    """
    assert tl602(script(body)) == []


def test_no_sync_defined_in_a_helper_elsewhere_in_the_module_is_silent() -> None:
    body = ACCUMULATION + "\ndef maybe_no_sync(m, sync):\n    return contextlib.nullcontext() if sync else m.no_sync()\n"
    assert tl602(script(body)) == []


def test_nanogpt_style_inner_loop_with_require_backward_grad_sync_is_silent() -> None:
    assert tl602(script(NANOGPT_STYLE)) == []


def test_inner_micro_batch_loop_without_sync_control_is_reported() -> None:
    body = "\n".join(l for l in NANOGPT_STYLE.splitlines() if "ddp:" not in l and "require_backward" not in l)
    assert lines(script(body)) == [9]


@pytest.mark.parametrize(
    "condition",
    [
        "if (i + 1) % accum_steps == 0:",
        "if i % args.grad_accum_steps == args.grad_accum_steps - 1:",
        "if is_accumulation_boundary:",
        "if do_update:",
        "if (i + 1) % accum_steps == 0 or (i + 1) == len(loader):",
        "if sync_gradients:",
    ],
)
def test_accumulation_conditions(condition: str) -> None:
    body = ACCUMULATION.replace("if (i + 1) % accum_steps == 0:", condition)
    assert lines(script(body)) == [6], condition


@pytest.mark.parametrize(
    "condition",
    [
        "if torch.isfinite(loss):",
        "if not args.dry_run:",
        "if scaler is None:",
    ],
)
def test_other_conditions_are_silent(condition: str) -> None:
    body = ACCUMULATION.replace("if (i + 1) % accum_steps == 0:", condition)
    assert tl602(script(body)) == []


def test_step_in_both_branches_is_unconditional() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        loss = model(x).mean()
        loss.backward()
        if i % 2 == 0:
            optimizer.step()
        else:
            scaler.step(optimizer)
    """
    assert tl602(script(body)) == []


def test_backward_under_condition_is_silent() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        loss = model(x).mean()
        if loss.isfinite():
            loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
    """
    assert tl602(script(body)) == []


def test_backward_in_try_body_runs_every_iteration_but_not_in_handler() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        try:
            model(x).mean().backward()
        except RuntimeError:
            model(x[:1]).mean().backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
    """
    assert lines(script(body)) == [6]


def test_unconditional_step_and_scheduler_are_silent() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        model(x).mean().backward()
        optimizer.step()
        if (i + 1) % 100 == 0:
            scheduler.step()
            lr_scheduler.step()
    """
    assert tl602(script(body)) == []


def test_step_inside_inner_loop_is_not_an_accumulation() -> None:
    body = """
    for z, real in loader:
        for _ in range(n_critic):
            discriminator(real).mean().backward()
            opt_d.step()
        generator(z).mean().backward()
        opt_g.step()
    """
    assert tl602(script(body)) == []


def test_step_before_the_inner_loop_does_not_count() -> None:
    body = """
    def train(model, batches, optimizer):
        for batch in batches:
            optimizer.step()
            for micro in batch.chunk(4):
                model(micro).mean().backward()
    """
    assert tl602(script(body)) == []


def test_steps_in_other_functions_do_not_count() -> None:
    body = """
    def accumulate(model, chunks):
        for micro in chunks:
            model(micro).mean().backward()

    def train(model, batches, optimizer):
        for batch in batches:
            accumulate(model, batch)
            optimizer.step()
    """
    assert tl602(script(body)) == []


def test_comprehension_backward_is_ignored() -> None:
    body = """
    for i, batch in enumerate(loader):
        [model(x).mean().backward() for x in batch]
        if (i + 1) % 4 == 0:
            optimizer.step()
    """
    assert tl602(script(body)) == []


def test_noqa() -> None:
    body = ACCUMULATION.replace("loss.backward()", "loss.backward()  # noqa: TL602")
    assert tl602(script(body)) == []


def test_backward_and_step_under_the_same_configuration_branch() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        loss = model(x).mean()
        if cfg.accumulate:
            loss.backward()
            if (i + 1) % cfg.steps == 0:
                optimizer.step()
        else:
            loss.backward()
            optimizer.step()
    """
    assert lines(script(body)) == [7]


def test_backward_and_step_in_different_branches_is_silent() -> None:
    body = """
    for i, (x, y) in enumerate(loader):
        loss = model(x).mean()
        if warmup:
            loss.backward()
        else:
            if (i + 1) % 4 == 0:
                optimizer.step()
    """
    assert tl602(script(body)) == []


@pytest.mark.parametrize("backward", ["accelerator.backward(loss)", "fabric.backward(loss)", "self.manual_backward(loss)"])
def test_framework_backward_is_silent(backward: str) -> None:
    body = ACCUMULATION.replace("loss.backward()", backward)
    assert tl602(script(body)) == []


def test_fabric_no_backward_sync_is_silent() -> None:
    body = ACCUMULATION.replace(
        "    loss.backward()\n",
        "    with fabric.no_backward_sync(model, enabled=(i + 1) % accum_steps != 0):\n        loss.backward()\n",
    )
    assert tl602(script(body)) == []
