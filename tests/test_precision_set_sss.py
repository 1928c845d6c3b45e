"""Precision on projects never seen before (set SSS; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL101: a step that copies its inputs by key with a blocking copy -------------------------

TRAINER = """\
import torch


class Trainer:
    def __call__(self, net, data_loaders, input_names, optimizer):
        for epoch_no in range(self.epochs):
            epoch_loss = 0.0
            batches = iter(data_loaders["full_batch_loader"])
            for i, data_entry in enumerate(batches):
                inputs = [data_entry[k].to(self.device) for k in input_names]
                loss = self.inference(net, inputs)
                loss.backward()
                epoch_loss += loss.item()
            with torch.no_grad():
                for i, data_entry in enumerate(data_loaders["validation_data_loader"]):
                    inputs = [data_entry[k].to(self.device) for k in input_names]
                    loss = self.inference(net, inputs)
                    validation_loss += loss.item()
"""


def test_tl101_reads_after_a_blocking_copy_of_the_batch_by_key_add_no_wait():
    # the next iteration's `data_entry[k].to(device)` waits for the same work
    assert codes(lint(TRAINER, select=["TL101"])) == []


@pytest.mark.parametrize("change", [
    # the copies do not wait
    ("data_entry[k].to(self.device) for k in input_names]\n                loss",
     "data_entry[k].to(self.device, non_blocking=True) for k in input_names]\n                loss"),
    # the read comes before the backward pass
    ("                loss.backward()\n                epoch_loss += loss.item()\n",
     "                epoch_loss += loss.item()\n                loss.backward()\n"),
])
def test_tl101_reads_where_the_copy_does_not_wait_or_before_the_backward_are_reported(change):
    changed = TRAINER.replace(*change)
    assert changed != TRAINER
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


MAPPING_LOADERS = """\
import torch


def train(model, dataloaders, criterion, optimizer, device):
    for phase in ["train", "val"]:
        for i, batch in enumerate(dataloaders[phase]):
            inputs = batch["input"].to(device)
            outputs = batch["output"].to(device)
            optimizer.zero_grad()
            preds = model(inputs)
            loss = criterion(preds, outputs)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
"""


def test_tl101_a_loader_taken_from_a_mapping_of_loaders_yields_host_batches():
    assert codes(lint(MAPPING_LOADERS, select=["TL101"])) == []
    # a mapping that is not named for loaders says nothing about its batches
    assert codes(lint(MAPPING_LOADERS.replace("dataloaders", "sources"), select=["TL101"])) == ["TL101"]


# -- TL101: a walk over the parameters once per epoch -----------------------------------------

PER_EPOCH_NORM = """\
import torch


class Trainer:
    def __call__(self, net, loader, optimizer, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                loss = net(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            grad_norm = 0.0
            for p in net.parameters():
                if p.grad is None:
                    continue
                grad_norm += torch.norm(p.grad.data).item()
"""


def test_tl101_a_walk_over_the_parameters_once_per_epoch_is_not_per_step():
    assert codes(lint(PER_EPOCH_NORM, select=["TL101"])) == []


def test_tl101_the_same_walk_in_every_step_is_reported():
    per_step = PER_EPOCH_NORM.replace(
        "                optimizer.zero_grad()\n            grad_norm",
        "                optimizer.zero_grad()\n                grad_norm",
    ).replace("            for p in net.parameters():\n                if p.grad is None:\n                    continue\n"
              "                grad_norm",
              "                for p in net.parameters():\n                    if p.grad is None:\n"
              "                        continue\n                    grad_norm")
    assert per_step != PER_EPOCH_NORM
    assert codes(lint(per_step, select=["TL101"])) == ["TL101"]


OPTIMIZER_STEP = """\
import torch


class Lamb(torch.optim.Optimizer):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                w_norm = p.norm(2.0).item()
                p.add_(p.grad, alpha=-group["lr"] * w_norm)
"""


def test_tl101_a_read_per_parameter_in_an_optimizer_step_is_reported():
    assert codes(lint(OPTIMIZER_STEP, select=["TL101"])) == ["TL101"]


# -- TL101/TL102: RL data collectors and masks named as such ----------------------------------

COLLECTOR = """\
import torch


def train(collector, replay_buffer, loss_module, optimizer, logger, num_updates):
    for i, tensordict in enumerate(collector):
        replay_buffer.extend(tensordict.reshape(-1))
        for _ in range(num_updates):
            loss = loss_module(replay_buffer.sample()).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        logger.log_scalar("reward", tensordict["next", "reward"].mean().item(), i)
"""


def test_tl101_a_read_per_batch_of_an_rl_collector_adds_no_wait():
    # each batch was made by stepping host environments on the policy's actions
    assert codes(lint(COLLECTOR, select=["TL101"])) == []
    by_next = COLLECTOR.replace("    for i, tensordict in enumerate(collector):\n",
                                "    batches = iter(collector)\n    for i in range(10):\n"
                                "        tensordict = next(batches)\n")
    assert codes(lint(by_next, select=["TL101"])) == []


def test_tl101_a_read_per_batch_of_a_loader_is_reported():
    loader = COLLECTOR.replace("enumerate(collector)", "enumerate(loader)")
    assert codes(lint(loader, select=["TL101"])) == ["TL101"]


EVALUATE = """\
import torch


def eval_model(actor, test_env, num_episodes=3):
    test_rewards = []
    for _ in range(num_episodes):
        td_test = test_env.rollout(policy=actor, max_steps=10000)
        reward = td_test["next", "episode_reward"][td_test["next", "done"]]
        test_rewards.append(reward.cpu())
    return torch.cat(test_rewards, 0).mean()
"""


@pytest.mark.parametrize("index", ['td_test["next", "done"]', "~mask", "valid_mask", "dones"])
def test_tl102_indexing_with_a_mask_named_so_already_waits(index):
    # how many elements a boolean mask keeps is read on the host
    source = EVALUATE.replace('td_test["next", "done"]', index, 1)
    assert codes(lint(source, select=["TL102"])) == []


@pytest.mark.parametrize("index", ['td_test["next", "step_count"]', "idx", "-1"])
def test_tl102_indexing_with_other_indices_is_reported(index):
    source = EVALUATE.replace('td_test["next", "done"]', index, 1)
    assert codes(lint(source, select=["TL102"])) == ["TL102"]


# -- TL101: Pyro's inference steps --------------------------------------------------------------

PYRO = """\
import torch
from pyro.infer import SVI, Trace_ELBO


def train(model, guide, optimizer, loader, device):
    svi = SVI(model, guide, optimizer, loss=Trace_ELBO())
    loss_fn = Trace_ELBO().differentiable_loss
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        epoch_loss = svi.step(x)
        penalty = model.penalty(x)
        total += penalty.item()
"""


def test_tl101_a_pyro_svi_step_waits_every_iteration():
    assert codes(lint(PYRO, select=["TL101"])) == []


def test_tl101_a_pyro_differentiable_loss_waits_every_iteration():
    source = PYRO.replace("epoch_loss = svi.step(x)", "loss = loss_fn(model, guide, x)")
    assert source != PYRO
    assert codes(lint(source, select=["TL101"])) == []


def test_tl101_a_step_of_another_kind_is_no_wait():
    source = PYRO.replace("epoch_loss = svi.step(x)", "optimizer.step()")
    assert source != PYRO
    assert codes(lint(source, select=["TL101"])) == ["TL101"]


# -- TL101: a host default tensor type ---------------------------------------------------------

NOTEBOOK_CELL = """\
import torch
torch.set_default_tensor_type({kind})

X = torch.linspace(0.0, 5.0, 20)
y = 0.5 * torch.sin(3 * X)
w = torch.zeros(1, requires_grad=True)
optimizer = torch.optim.Adam([w], lr=0.01)
losses = []
for i in range(2000):
    optimizer.zero_grad()
    loss = ((w * X - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
"""


def test_tl101_a_program_with_a_host_default_tensor_type_runs_on_the_host():
    source = NOTEBOOK_CELL.format(kind="torch.DoubleTensor")
    assert codes(lint(source, select=["TL101"], path="gp.py")) == []


def test_tl101_a_program_with_a_cuda_default_tensor_type_is_reported():
    source = NOTEBOOK_CELL.format(kind="torch.cuda.DoubleTensor")
    assert codes(lint(source, select=["TL101"], path="gp.py")) == ["TL101"]
    source = NOTEBOOK_CELL.format(kind="tensor_type")  # the rule cannot tell which
    assert codes(lint(source, select=["TL101"], path="gp.py")) == ["TL101"]


# -- TL505: TorchRL's environments ----------------------------------------------------------------

RL_PROGRAM = """\
import torch
from torch import nn
from torchrl.envs import GymEnv


def main():
    env = GymEnv("CartPole-v1", device="cuda")
    policy = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2)).cuda()
    optimizer = torch.optim.Adam(policy.parameters())
    for batch in env.rollout(1000, policy):
        loss = policy(batch).sum()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_tl505_a_program_that_steps_torchrl_environments_is_not_told_to_compile():
    assert codes(lint(RL_PROGRAM, select=["TL505"], path="train.py")) == []


def test_tl505_a_program_that_uses_other_parts_of_torchrl_is_reported():
    source = RL_PROGRAM.replace("from torchrl.envs import GymEnv", "from torchrl.objectives import DQNLoss")
    assert codes(lint(source, select=["TL505"], path="train.py")) == ["TL505"]


# -- every rule: a file that never says torch -----------------------------------------------------

MXNET = """\
import mxnet as mx


class Predictor:
    def predict(self, dataset):
        self.prediction_net.eval()
        outputs = []
        for batch in dataset:
            outputs.append(self.model(batch))  # noqa: E501
        return outputs
"""


def test_a_file_that_never_says_torch_gets_no_finding_even_with_a_noqa_comment():
    # a `noqa` comment makes the file worth reading for TL001 alone
    assert codes(lint(MXNET)) == []
    assert codes(lint(MXNET.replace("import mxnet as mx", "import torch"), select=["TL302"])) == ["TL302"]


def test_tl001_still_judges_the_comments_of_a_file_that_never_says_torch():
    source = MXNET.replace("# noqa: E501", "# noqa: TL302")
    found = lint(source)
    assert codes(found) == ["TL001"]
    assert "unused: `TL302`" in found[0].message


# -- TL101: a test of a torch function's result ------------------------------------------------

MINIBATCHES = """\
import torch


def update(model, minibatches, optimizer, log):
    for mb in minibatches:
        loss = model(mb)
        if torch.abs(loss) > 30.0:
            log.warning("high loss")
        kl = model.kl(mb)
        recent_kls.append(kl.mean().item())
        loss.backward()
        optimizer.step()
"""


def test_tl101_a_loop_that_tests_a_torch_result_every_iteration_already_waits():
    assert codes(lint(MINIBATCHES, select=["TL101"])) == []


def test_tl101_a_loop_that_tests_a_host_value_is_reported():
    source = MINIBATCHES.replace("if torch.abs(loss) > 30.0:", "if abs(step) > 30.0:")
    assert source != MINIBATCHES
    assert codes(lint(source, select=["TL101"])) == ["TL101"]
