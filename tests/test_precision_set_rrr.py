"""Precision on projects never seen before (set RRR; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL101/TL102: a read at the end of a step that starts with a blocking copy ----------------

TRAIN = """\
import torch


def train(model, criterion, optimizer, train_loader, device):
    losses = []
    top1 = []
    for i, (images, target) in enumerate(train_loader):
        images = images.to(device)
        target = target.to(device)
        output = model(images)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        preds = output.detach().cpu().numpy()
        top1.append((preds.argmax(1) == target.cpu().numpy()).mean())
        losses.append(loss.item())
    return losses, top1
"""


def test_reads_at_the_end_of_a_step_that_starts_with_a_blocking_copy_add_no_wait():
    # opacus's CIFAR-10 example: the next batch's `images.to(device)` waits for the same work
    assert codes(lint(TRAIN, select=["TL101", "TL102"])) == []


@pytest.mark.parametrize("change", [
    # the copies do not wait: the reads are the loop's waits
    ("images = images.to(device)\n        target = target.to(device)",
     "images = images.to(device, non_blocking=True)\n        target = target.to(device, non_blocking=True)"),
    # a read before the step's backward pass keeps the host from queueing it
    ("        loss.backward()\n", "        print(loss.item())\n        loss.backward()\n"),
])
def test_reads_in_a_step_whose_copies_do_not_wait_or_before_the_backward_are_reported(change):
    changed = TRAIN.replace(*change)
    assert changed != TRAIN
    assert "TL101" in codes(lint(changed, select=["TL101", "TL102"]))


# -- TL101: a loop that waits in a helper of the class ----------------------------------------

TRAINER = """\
import torch


class Trainer:
    def _check_nan(self, loss):
        if torch.isnan(loss):
            raise ValueError("Training loss is nan")

    def _train_epoch(self, train_data):
        total = None
        for interaction in train_data:
            losses = self.model.calculate_loss(interaction)
            loss = sum(losses)
            loss_tuple = tuple(per_loss.item() for per_loss in losses)
            total = loss_tuple if total is None else tuple(map(sum, zip(total, loss_tuple)))
            self._check_nan(loss)
            loss.backward()
            self.optimizer.step()
        return total
"""


def test_tl101_a_loop_that_calls_a_nan_check_of_its_class_waits_anyway():
    # RecBole's trainer: `_check_nan(loss)` reads the loss's truth value every step
    assert codes(lint(TRAINER, select=["TL101"])) == []


def test_tl101_a_helper_that_tests_a_flag_first_does_not_wait():
    changed = TRAINER.replace("if torch.isnan(loss):", "if self.strict:")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


# -- TL101: a value a learning-rate scheduler needs before the next step ----------------------

PPO = """\
import torch


class Agent:
    def train_epoch(self, dataset):
        for i in range(len(dataset)):
            loss, kl = self.calc_gradients(dataset[i])
            loss.backward()
            self.optimizer.step()
            self.last_lr = self.scheduler.update(self.last_lr, self.epoch_num, kl.item())
            self.update_lr(self.last_lr)
            self.writer.add_scalar("info/kl", kl.item(), self.frame)
"""


def test_tl101_a_read_handed_to_the_learning_rate_scheduler_is_needed_before_the_next_step():
    # rl_games's adaptive KL schedule per minibatch: the rate is a Python float in param_groups
    found = lint(PPO, select=["TL101"])
    assert [d.line for d in found] == [12]  # the TensorBoard read stays reported


# -- TL505: Opacus ----------------------------------------------------------------------------

DP = """\
import torch
from opacus import PrivacyEngine

model = Net().to("cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = PrivacyEngine().make_private(
    module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0)
for epoch in range(args.epochs):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to("cuda")), y.to("cuda"))
        loss.backward()
        optimizer.step()
"""


def test_tl505_a_program_that_trains_with_opacus_is_not_told_to_compile():
    # per-sample gradients from hooks on every layer: Opacus does not run under torch.compile
    assert "TL505" not in codes(lint(DP, select=["TL505"]))


def test_tl505_the_same_program_without_opacus_is_reported():
    plain = DP.replace("from opacus import PrivacyEngine\n", "").replace(
        "model, optimizer, loader = PrivacyEngine().make_private(\n"
        "    module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0)\n", "")
    assert "TL505" in codes(lint(plain, select=["TL505"]))


def test_tl101_a_read_in_the_statement_that_computes_the_loss_at_the_end_of_the_step():
    # opacus's MNIST test loop: `test_loss += F.nll_loss(output, target).item()` then host counting
    code = """\
import torch
import torch.nn.functional as F


@torch.no_grad()
def test(model, device, test_loader):
    test_loss = 0
    for data, target in test_loader:
        data, target = data.to(device), target.to(device)
        output = model(data)
        test_loss += F.nll_loss(output, target, reduction="sum").item()
        {after}
    return test_loss
"""
    assert codes(lint(code.format(after="pass"), select=["TL101"])) == []
    # a model still to run after the read: the read keeps the host from queueing it
    assert codes(lint(code.format(after="model(data)"), select=["TL101"])) == ["TL101"]


# -- TL101: a loop whose every iteration is an epoch ------------------------------------------

EPOCHS = """\
import torch


class SACAgent:
    def train(self):
        while True:
            self.epoch_num += 1
            actor_losses, critic_losses = self.train_epoch()
            self.writer.add_scalar("losses/a_loss", torch.stack(actor_losses).mean().item(), self.frame)
            self.writer.add_scalar("losses/c_loss", torch.stack(critic_losses).mean().item(), self.frame)
            if self.epoch_num >= self.max_epochs:
                break
"""


@pytest.mark.parametrize("change", [
    ("", ""),
    ("            self.epoch_num += 1\n", ""),  # the call of `train_epoch` alone says it
    ("actor_losses, critic_losses = self.train_epoch()", "actor_losses, critic_losses = train_one_epoch(self)"),
])
def test_tl101_reads_once_per_iteration_of_a_loop_that_runs_an_epoch_each_time(change):
    # rl_games's SAC agent: the means of the epoch's losses, logged once per epoch
    assert codes(lint(EPOCHS.replace(*change), select=["TL101"])) == []


def test_tl101_a_loop_that_runs_steps_is_no_epoch_loop():
    steps = EPOCHS.replace("            self.epoch_num += 1\n", "").replace(
        "actor_losses, critic_losses = self.train_epoch()", "actor_losses, critic_losses = self.train_step()")
    assert codes(lint(steps, select=["TL101"])) == ["TL101", "TL101"]


# -- TL504: a fit with no operation that reduced precision speeds up ---------------------------

FIT = """\
import torch

azimuth = torch.zeros(1, device="cuda", requires_grad=True)
elevation = torch.full((1,), 0.5, device="cuda", requires_grad=True)
optimizer = torch.optim.Adam([azimuth, elevation], lr=0.05)
for it in range(args.iterations):
    optimizer.zero_grad()
    directions = torch.stack([torch.cos(azimuth) * torch.sin(elevation), torch.cos(elevation)], dim=-1)
    irradiance = (normals * directions).sum(-1).clamp(min=0.0) * albedo
    loss = torch.nn.functional.l1_loss(irradiance[mask], target[mask])
    loss.backward()
    optimizer.step()
"""


def test_tl504_a_fit_of_a_few_parameters_through_elementwise_math_is_not_told_to_autocast():
    # kaolin's lighting tutorials: no matmul, convolution or recurrent layer for autocast to speed up
    assert "TL504" not in codes(lint(FIT, select=["TL504"]))


@pytest.mark.parametrize("change", [
    ("(normals * directions).sum(-1)", "(normals @ directions.T).squeeze(-1)"),  # a matrix product
    ("import torch\n", "import torch\nfrom shading import Renderer\n"),  # a model from elsewhere
    ("irradiance = (", "irradiance = torch.nn.functional.conv2d(image, kernel).mean() + ("),
])
def test_tl504_the_same_fit_with_tensor_core_work_is_reported(change):
    changed = FIT.replace(*change)
    assert changed != FIT
    assert "TL504" in codes(lint(changed, select=["TL504"]))
