"""Precision on projects never seen before (set UUU; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL501/TL502: reproducible mode switched on for the final test, after training ---------------

FINAL_TEST = """\
import torch
from torch import nn
from torch.backends import cudnn


def main(args):
    device = torch.device("cuda")
    model = nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Conv2d(64, 10, 3)).to(device)
    if not args.disable_cudnn_benchmark:
        cudnn.benchmark = True
    for epoch in range(args.epochs):
        for x, y in train_loader:
            loss = criterion(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    cudnn.benchmark = False
    cudnn.deterministic = True
    evaluate(model, test_loader, device)


if __name__ == "__main__":
    main(parse_args())
"""


def test_reproducible_mode_for_the_final_test_after_training_with_the_autotuner_is_silent():
    assert codes(lint(FINAL_TEST, select=["TL501", "TL502"])) == []


def test_reproducible_mode_with_no_autotuner_before_it_is_reported():
    changed = FINAL_TEST.replace("    if not args.disable_cudnn_benchmark:\n        cudnn.benchmark = True\n", "")
    assert codes(lint(changed, select=["TL501", "TL502"])) == ["TL501", "TL502"]


def test_an_autotuner_set_in_another_function_does_not_count():
    changed = FINAL_TEST.replace(
        "    if not args.disable_cudnn_benchmark:\n        cudnn.benchmark = True\n", ""
    ).replace("def main(args):", "def setup():\n    cudnn.benchmark = True\n\n\ndef main(args):")
    assert codes(lint(changed, select=["TL501", "TL502"])) == ["TL501", "TL502"]


# -- TL401: a model whose published weights are merged into its state dict --------------------

PUBLISHED = """\
import torch.nn as nn
import torch.utils.model_zoo as model_zoo

model_urls = {"mlfn": "https://example.org/mlfn-9cb5a267.pth.tar"}


class Block(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return self.bn(self.conv(x))


def init_pretrained_weights(model, model_url):
    pretrain_dict = model_zoo.load_url(model_url)
    model_dict = model.state_dict()
    pretrain_dict = {k: v for k, v in pretrain_dict.items() if k in model_dict and model_dict[k].size() == v.size()}
    model_dict.update(pretrain_dict)
    model.load_state_dict(model_dict)
"""


def test_tl401_a_model_filled_with_downloaded_weights_keeps_its_biases():
    assert codes(lint(PUBLISHED, select=["TL401"])) == []


def test_tl401_a_model_that_loads_its_weights_non_strictly_is_reported():
    changed = PUBLISHED.replace("model.load_state_dict(model_dict)", "model.load_state_dict(model_dict, strict=False)")
    assert codes(lint(changed, select=["TL401"])) == ["TL401"]


def test_tl401_a_model_that_downloads_nothing_is_reported():
    changed = PUBLISHED.replace("pretrain_dict = model_zoo.load_url(model_url)", "pretrain_dict = torch.load(model_url)")
    assert codes(lint(changed, select=["TL401"])) == ["TL401"]


# -- TL101: a loop that times its loading before the blocking copy -----------------------------

TIMED_LOOP = """\
import time
import torch


def train(model, criterion, optimizer, dataset, use_gpu):
    trainloader = torch.utils.data.DataLoader(dataset, batch_size=32, num_workers=4, pin_memory=True)
    end = time.time()
    for batch_idx, data in enumerate(trainloader):
        data_time.update(time.time() - end)
        imgs, attrs = data[0], data[1]
        if use_gpu:
            imgs = imgs.cuda()
            attrs = attrs.cuda()
        optimizer.zero_grad()
        loss = criterion(model(imgs), attrs)
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), imgs.size(0))
"""


def test_tl101_a_meter_of_the_loading_time_comes_before_the_blocking_copy_that_waits_anyway():
    assert codes(lint(TIMED_LOOP, select=["TL101"])) == []


def test_tl101_a_meter_given_something_else_than_a_clock_may_queue_work_first():
    changed = TIMED_LOOP.replace("data_time.update(time.time() - end)", "data_time.update(model.step_time())")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


# -- TL101: a loop that solves an ODE with an adaptive solver every iteration ------------------

ODE_LOOP = """\
import torch
from torchdiffeq import odeint


def fit(func, optimizer, y0, t, y, niters):
    for itr in range(niters):
        optimizer.zero_grad()
        pred_y = odeint(func, y0, t)
        loss = torch.mean(torch.abs(pred_y - y))
        loss.backward()
        optimizer.step()
        loss_meter.update(loss.item())
"""


@pytest.mark.parametrize("method", [None, "'dopri5'"])
def test_tl101_an_adaptive_ode_solve_waits_every_iteration(method):
    code = ODE_LOOP if method is None else ODE_LOOP.replace("odeint(func, y0, t)", f"odeint(func, y0, t, method={method})")
    assert codes(lint(code, select=["TL101"])) == []


@pytest.mark.parametrize("method", ["'rk4'", "args.method"])
def test_tl101_a_fixed_grid_or_unknown_solver_leaves_the_read_reported(method):
    code = ODE_LOOP.replace("odeint(func, y0, t)", f"odeint(func, y0, t, method={method})")
    assert codes(lint(code, select=["TL101"])) == ["TL101"]

