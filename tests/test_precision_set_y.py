"""Precision on set Y (ALBEF, Mask2Former, VideoMAE, fastMRI,
improved-diffusion, GroundingDINO, SwinIR, mamba; synthetic examples written
here, not their code): lazy initialisation (`if len(state) == 0:` in an
optimizer, `if grid is None:` before the first batch), loops of a function
that draws, a loop over a mapping's sorted keys, and a notebook's model run
once for a Grad-CAM picture.  Each with the near-miss that must still be
reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str = "TL201", path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- lazy initialisation runs once ----------------------------------------------------------------

OPTIMIZER = """
import torch


class NovoGrad(torch.optim.Optimizer):
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros([]).to(p.device)
                norm = torch.zeros([]).to(p.device)
"""


def test_optimizer_state_made_on_the_first_step_is_silent():
    # the state of each parameter is made once; the near-miss below the guard runs every step
    assert found(OPTIMIZER) == [("TL201", 13)]


def test_the_other_spellings_of_a_lazy_state():
    for test in ('"exp_avg_sq" not in state', "not state"):
        assert found(OPTIMIZER.replace("len(state) == 0", test)) == [("TL201", 13)]


def test_a_guard_on_something_else_is_per_step():
    code = OPTIMIZER.replace("len(state) == 0", "group['amsgrad']")
    assert found(code) == [("TL201", 12), ("TL201", 13)]


GRID = """
import torch


def evaluate(model, loader, device, size):
    grid = None
    for batch in loader:
        output = model(batch.to(device))
        if grid is None:
            grid = torch.zeros(size, output.shape[1]).to(device)
        grid[: len(output)] = output
"""


def test_a_buffer_made_before_the_first_batch_is_made_once():
    assert found(GRID) == []


def test_a_value_missing_again_every_iteration_is_per_step():
    code = GRID.replace("        output = model(batch.to(device))\n",
                        "        output = model(batch.to(device))\n        grid = batch.get('grid')\n")
    assert found(code) == [("TL201", 11)]


def test_a_default_none_parameter_is_missing_every_call():
    code = """
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, x, mask=None):
        if mask is None:
            mask = torch.ones(x.shape[:-1]).to(x.device)
        return x * mask[..., None]
"""
    assert found(code) == [("TL201", 9)]


def test_state_kept_on_the_object_is_made_once():
    code = """
import torch
from torch import nn


class Head(nn.Module):
    def forward(self, x):
        if self.positions is None:
            self.positions = torch.arange(x.shape[1]).to(x.device)
        if not hasattr(self, "scale"):
            self.scale = torch.ones(x.shape[-1]).to(x.device)
        return x + self.positions[:, None] * self.scale
"""
    assert found(code) == []


# -- a function that draws goes over a few batches ----------------------------------------------

VISUALIZE = """
import torch


class Trainer:
    def visualize_dev(self, epoch):
        for batch in self.display_loader:
            output = self.model(batch.to(self.device))
            grid = torch.zeros(8, *output.shape[1:]).to(self.device)
            self.writer.add_images("dev", grid, epoch)

    def end_of_epoch(self, epoch):
        self.visualize_dev(epoch)
"""


def test_the_loop_of_a_function_that_draws_is_not_per_step():
    assert found(VISUALIZE) == []


def test_the_same_loop_in_an_evaluation_is_per_step():
    assert found(VISUALIZE.replace("visualize_dev", "evaluate_dev")) == [("TL201", 9)]


# -- a loop over a mapping's sorted keys goes over a few values ----------------------------------

AVERAGE = """
import torch
import torch.distributed as dist


class Trainer:
    def stats(self, epoch, loader):
        losses = self.compute_stats(epoch, loader)
        losses_tensor = torch.zeros(len(losses), device=self.device)
        dist.all_reduce(losses_tensor)
        for i, k in enumerate(sorted(losses.keys())):
            losses[k] = losses_tensor[i].item() / len(loader.dataset)
        return losses

    def run(self):
        for epoch in range(self.epochs):
            self.train_epoch(epoch)
            self.stats(epoch, self.dev_loader)
"""


def test_a_loop_over_sorted_keys_runs_as_often_as_its_function():
    assert found(AVERAGE, "TL101") == []


def test_the_same_loop_over_the_batches_is_per_step():
    code = AVERAGE.replace("enumerate(sorted(losses.keys()))", "enumerate(loader)")
    assert found(code, "TL101") == [("TL101", 12)]


# -- a notebook's model run once for a picture ----------------------------------------------------

GRADCAM = """
import torch
from torch import nn


class ITM(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(16, 16)

    def forward(self, image):
        embeds = self.encoder(image)
        atts = torch.ones(embeds.shape[:-1], dtype=torch.long).to(image.device)
        return embeds * atts[..., None]


model = ITM()
model.eval()
model.cuda()
image = torch.rand(1, 4, 16).cuda()
output = model(image)
output.sum().backward()
cams = model.encoder.weight.grad
"""


def test_a_notebooks_model_run_once_for_grad_cam_is_silent():
    assert found(GRADCAM, path="visualization.ipynb") == []


def test_a_notebook_that_trains_the_model_is_per_step():
    code = GRADCAM.replace("output = model(image)\noutput.sum().backward()\n",
                           "for step in range(100):\n    output = model(image)\n    output.sum().backward()\n"
                           "    optimizer.step()\n")
    assert found(code, path="visualization.ipynb") == [("TL201", 13)]


def test_the_same_model_in_a_script_is_per_step():
    assert found(GRADCAM, path="visualization.py") == [("TL201", 13)]
