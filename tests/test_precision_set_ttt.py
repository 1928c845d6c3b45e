"""Precision on projects never seen before (set TTT; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL101: a periodic guard behind a helper that returns the test ------------------------------

STATS_CALLBACK = """\
import torch


class TrainingStats:
    def __init__(self, log_every=100):
        self.log_every = log_every
        self.step_count = 0

    def _should_log(self):
        \"\"\"Whether this step logs.\"\"\"
        return self.step_count % self.log_every == 0

    def _log_weights(self, module):
        for name, param in module.named_parameters():
            self.log(name + "/norm", param.norm().item())

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if self._should_log():
            self._log_weights(module)
            for name, param in module.named_parameters():
                self.log(name + "/max", param.abs().max().item())
        self.step_count += 1
"""


def test_tl101_under_a_helper_that_returns_a_periodic_test_is_periodic():
    # `if self._should_log():` holds every `log_every` steps, in the method and in its callee
    assert codes(lint(STATS_CALLBACK, select=["TL101"])) == []


def test_tl101_under_a_module_function_that_returns_a_periodic_test_is_periodic():
    code = """\
    import torch

    def should_log(step, every):
        return step % every == 0

    def train(model, loader, opt):
        for step, (x, y) in enumerate(loader):
            loss = model(x.cuda()).sum()
            loss.backward()
            opt.step()
            if should_log(step, 50) and torch.distributed.get_rank() == 0:
                for p in model.parameters():
                    print(p.grad.norm().item())
    """
    assert codes(lint(code, select=["TL101"])) == []


@pytest.mark.parametrize("change", [
    # the helper returns a flag, not a periodic test
    ("return self.step_count % self.log_every == 0", "return self.enabled"),
    # the helper does more than return the test
    ("return self.step_count % self.log_every == 0",
     "self.step_count += 1\n        return self.step_count % self.log_every == 0"),
])
def test_tl101_under_a_helper_that_is_no_periodic_test_is_reported(change):
    changed = STATS_CALLBACK.replace(*change)
    assert changed != STATS_CALLBACK
    assert codes(lint(changed, select=["TL101"])) == ["TL101", "TL101"]


# -- a package's folder of unit tests ---------------------------------------------------------

MODEL_TEST = """\
import torch


class BaseModelTests:
    def test_cross_frame_grad(self, model, batches):
        for batch in batches:
            out = model(batch.cuda())
            grads = torch.autograd.grad(out.sum(), batch)[0]
            assert grads.abs().max().item() == 0
"""


def test_test_mixins_in_a_unittests_folder_are_tests():
    assert codes(lint(MODEL_TEST, select=["TL101"], path="pkg/utils/unittests/model_tests_basic.py")) == []


def test_the_same_code_outside_a_test_folder_is_reported():
    assert codes(lint(MODEL_TEST, select=["TL101"], path="pkg/utils/units/model_checks.py")) == ["TL101"]


# -- TL302: a context manager of the class that turns gradients off --------------------------

MODEL_WRAPPER = """\
import contextlib
import torch


class Model:
    @contextlib.contextmanager
    def _set_training_mode(self, training):
        old = self.network.training
        self.network.train(training)
        with torch.set_grad_enabled(training):
            yield
        self.network.train(old)

    def predict_on_batch(self, x):
        with self._set_training_mode(False):
            x = x.to(self.device)
            return self.network(x)
"""


def test_tl302_inside_the_class_context_that_turns_gradients_off_is_silent():
    assert codes(lint(MODEL_WRAPPER, select=["TL302"])) == []


@pytest.mark.parametrize("change", [
    # another context manager, not the one that turns gradients off
    ("with self._set_training_mode(False):", "with self._timed(\"predict\"):"),
    # the context manager only switches the module's mode
    ("        with torch.set_grad_enabled(training):\n            yield\n", "        yield\n"),
])
def test_tl302_inside_a_context_that_keeps_gradients_is_reported(change):
    # (entered with a literal True, the context turns gradients on, as `torch.enable_grad()`
    # does: the author asked for them, and the rule is silent)
    changed = MODEL_WRAPPER.replace(*change)
    assert changed != MODEL_WRAPPER
    assert codes(lint(changed, select=["TL302"])) == ["TL302"]


def test_tl302_a_context_manager_that_enters_its_own_name_is_read_without_end():
    code = """\
    import contextlib
    import torch

    class Strategy(Base):
        @contextlib.contextmanager
        def model_sharded_context(self):
            with super().model_sharded_context():
                yield

        def predict(self, model, x):
            with self.model_sharded_context():
                return model(x.to(self.device))
    """
    assert codes(lint(code, select=["TL302"])) == ["TL302"]


# -- TL102: results handed to ASE -------------------------------------------------------------

ASE_CALCULATOR = """\
import torch
from ase.calculators.calculator import Calculator


class MLCalculator(Calculator):
    def calculate(self, atoms=None, properties=("energy",), system_changes=()):
        Calculator.calculate(self, atoms)
        outputs = self.model(self.converter(atoms).to(self.device))
        results = {}
        for prop in properties:
            results[prop] = outputs[prop].detach().cpu().numpy() * self.units[prop]
        self.results = results
"""


def test_tl102_results_of_an_ase_calculator_are_host_arrays_by_design():
    assert codes(lint(ASE_CALCULATOR, select=["TL102"])) == []


def test_tl102_the_same_loop_in_a_module_without_ase_is_reported():
    changed = ASE_CALCULATOR.replace("from ase.calculators.calculator import Calculator",
                                     "from .calculator import Calculator")
    assert codes(lint(changed, select=["TL102"])) == ["TL102"]


# -- TL202/TL203: a demonstration that runs a few batches ---------------------------------------

DEMO = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from composer import Trainer

train_set = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
train_loader = DataLoader(train_set, batch_size=128)
trainer = Trainer(
    model=model,
    train_dataloader=train_loader,
    max_duration="2ep",
    train_subset_num_batches=5,
    device="gpu",
)
trainer.fit()
"""


@pytest.mark.parametrize("limit", [
    "train_subset_num_batches=5", "limit_train_batches=10", "fast_dev_run=True", "eval_subset_num_batches=20",
])
def test_loaders_of_a_demo_that_runs_a_few_batches_are_not_reported(limit):
    code = DEMO.replace("train_subset_num_batches=5", limit)
    assert codes(lint(code, select=["TL202", "TL203"])) == []


@pytest.mark.parametrize("limit", [
    # a fraction of the epoch, many batches, or no literal
    "limit_train_batches=0.25", "train_subset_num_batches=500", "limit_train_batches=args.limit",
    # (`max_steps=` also bounds decoding loops: not a demonstration's mark)
    "max_steps=3",
    "train_subset_num_batches=0",
])
def test_loaders_of_a_run_that_is_not_limited_to_a_few_batches_are_reported(limit):
    code = DEMO.replace("train_subset_num_batches=5", limit)
    assert codes(lint(code, select=["TL202", "TL203"])) == ["TL203"]


MANUAL_DEMO = """\
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

device = torch.device("cuda")
loader = DataLoader(datasets.MNIST("data", transform=transforms.ToTensor()), batch_size=64, num_workers=4)
for step, (x, y) in enumerate(loader):
    if step >= 3:
        break
    loss = model(x.to(device)).sum()
    loss.backward()
"""


def test_tl202_a_module_whose_trainer_runs_one_batch_is_a_demonstration():
    demo = MANUAL_DEMO + "trainer = Trainer(model, fast_dev_run=True)\n"
    assert codes(lint(demo, select=["TL202"])) == []
    assert codes(lint(MANUAL_DEMO, select=["TL202"])) == ["TL202"]


# -- TL101: a helper of the module that reads a tensor on every call ---------------------------

HELPER_READS = """\
import torch
import torch.distributed as dist


class Trainer:
    def _accumulate_samples(self, n):
        total = torch.tensor([n], device=self.device)
        dist.all_reduce(total)
        return int(total.cpu().item())

    def fit(self, loader):
        for x, y in loader:
            loss = self.model(x.to(self.device, non_blocking=True)).sum()
            loss.backward()
            self.optimizer.step()
            self.samples += self._accumulate_samples(len(x))
            self.losses.append(loss.item())
"""


def test_tl101_a_loop_that_calls_a_helper_which_reads_a_tensor_every_call_already_waits():
    assert codes(lint(HELPER_READS, select=["TL101"])) == []


@pytest.mark.parametrize("change", [
    # the helper reads only under a condition
    ("        return int(total.cpu().item())",
     "        if self.verbose:\n            print(total.cpu().item())\n        return n"),
    # the helper is called only on some iterations
    ("            self.samples += self._accumulate_samples(len(x))",
     "            if self.log_now:\n                self.samples += self._accumulate_samples(len(x))"),
])
def test_tl101_a_helper_that_does_not_read_every_iteration_leaves_the_read_reported(change):
    changed = HELPER_READS.replace(*change)
    assert changed != HELPER_READS
    assert "TL101" in codes(lint(changed, select=["TL101"]))
