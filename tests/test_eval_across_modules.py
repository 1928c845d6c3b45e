"""An evaluation function whose callers live in another module (TL302): the
project index asks each call site whether it runs without gradients."""

from __future__ import annotations

import pytest

from tests.test_cli import run

EVAL = """\
import torch


def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += (model(x).argmax(-1) == y).sum()
    return total


def _predict(model, x):
    model.eval()
    return model(x)


def predict_all(model, xs):
    return [_predict(model, x) for x in xs]
"""

TRAIN = """\
import torch
from evaluation import evaluate, predict_all


def fit(model, loader, val_loader, optimizer):
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
    with torch.no_grad():
        acc = evaluate(model, val_loader)
        preds = predict_all(model, [x])
    return acc, preds
"""


def _codes(runner, *args):
    result = run(runner, "check", "--select", "TL302", "--output-format", "concise", *args)
    return [line.split(" ")[0] for line in result.stdout.splitlines() if ": TL" in line]


def test_functions_called_elsewhere_only_without_gradients_are_silent(runner, workdir):
    (workdir / "evaluation.py").write_text(EVAL)
    (workdir / "train.py").write_text(TRAIN)
    # `evaluate` directly, `_predict` through `predict_all`, its only caller in the module
    assert _codes(runner, ".") == []


@pytest.mark.parametrize(
    "train",
    [
        TRAIN.replace("    with torch.no_grad():\n        acc", "    if True:\n        acc"),
        TRAIN.replace("    with torch.no_grad():\n", "    with torch.no_grad():\n        pass\n    if True:\n"),
        # one caller with gradients on is enough
        TRAIN + "\n\ndef report(model, val_loader):\n    return evaluate(model, val_loader), predict_all(model, [])\n",
        # gradients turned back on inside the no_grad block
        TRAIN.replace("        acc = evaluate", "        with torch.enable_grad():\n            acc = evaluate").replace(
            "        preds = predict_all", "            preds = predict_all"),
    ],
    ids=["no-block", "after-the-block", "another-caller", "enable-grad"],
)
def test_a_caller_with_gradients_on_keeps_the_finding(runner, workdir, train):
    (workdir / "evaluation.py").write_text(EVAL)
    (workdir / "train.py").write_text(train)
    assert _codes(runner, ".") == ["evaluation.py:4:1:", "evaluation.py:12:1:"]


def test_a_caller_decorated_with_no_grad(runner, workdir):
    (workdir / "evaluation.py").write_text(EVAL)
    (workdir / "train.py").write_text(
        "import torch\nfrom evaluation import evaluate, predict_all\n\n\n@torch.inference_mode()\n"
        "def validate(model, loader):\n    return evaluate(model, loader), predict_all(model, [])\n"
    )
    assert _codes(runner, ".") == []


def test_without_the_callers_file_the_finding_stays(runner, workdir):
    # pre-commit passes only the changed files: the callers are not seen
    (workdir / "evaluation.py").write_text(EVAL)
    (workdir / "train.py").write_text(TRAIN)
    assert _codes(runner, "evaluation.py") == ["evaluation.py:4:1:", "evaluation.py:12:1:"]


# -- a call whose grad mode is its callers', a few modules up -------------------------

CAPTIONER = """\
import torch
from torch import nn


class Captioner(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 8)

    def forward(self, x):
        return self.net(x)

    def predict_answers(self, samples):
        logits = self.net(samples["image"])
        return logits.argmax(-1)
"""

BASE_TASK = """\
class BaseTask:
    def valid_step(self, model, samples):
        raise NotImplementedError

    def evaluation(self, model, data_loader):
        results = []
        for samples in data_loader:
            results.extend(self.valid_step(model=model, samples=samples))
        return results
"""

VQA_TASK = """\
from base_task import BaseTask


class VQATask(BaseTask):
    def valid_step(self, model, samples):
        answers = model.predict_answers(samples=samples)
        return [int(a) for a in answers]
"""

RUNNER = """\
import torch


class Runner:
    def __init__(self, task, model, loader):
        self.task, self.model, self.loader = task, model, loader

    @torch.no_grad()
    def eval_epoch(self):
        self.model.eval()
        return self.task.evaluation(self.model, self.loader)


if __name__ == "__main__":
    Runner(None, None, None).eval_epoch()
"""


def _tasks(workdir, runner_text=RUNNER, base_task=BASE_TASK, extra=None):
    for name, text in {"models.py": CAPTIONER, "base_task.py": base_task, "vqa.py": VQA_TASK,
                       "runner.py": runner_text, **(extra or {})}.items():
        (workdir / name).write_text(text)


def test_a_call_under_no_grad_three_modules_up_is_silent(runner, workdir):
    # LAVIS: `model.predict_answers` in a task's `valid_step`, which `BaseTask.evaluation`
    # calls, which the runner's `@torch.no_grad()` `eval_epoch` calls; none in its own module
    _tasks(workdir)
    assert _codes(runner, ".") == []


@pytest.mark.parametrize("case", ["no-decorator", "a-caller-with-gradients", "called-in-its-module", "a-script"])
def test_a_chain_with_gradients_somewhere_keeps_the_finding(runner, workdir, case):
    if case == "no-decorator":
        _tasks(workdir, runner_text=RUNNER.replace("    @torch.no_grad()\n", ""))
    elif case == "a-caller-with-gradients":  # another caller of `evaluation`, with gradients on
        _tasks(workdir, extra={"debug.py": "def debug(task, model, loader):\n"
                                           "    return task.evaluation(model, loader)\n"})
    elif case == "a-script":  # a script calls the task's `valid_step` itself, with gradients on
        _tasks(workdir, extra={"debug.py": "from vqa import VQATask\nfrom models import Captioner\n\n"
                                           "print(VQATask().valid_step(Captioner(), {'image': None}))\n"})
    else:  # its own module calls `evaluation` too: the index does not follow that function
        _tasks(workdir, base_task=BASE_TASK + "\n    def evaluate_all(self, model, loaders):\n"
                                              "        return [self.evaluation(model, l) for l in loaders]\n")
    assert _codes(runner, ".") == ["models.py:13:5:"]


ENGINE = """\
import torch


class Trainer:
    def evaluate(self, epoch):
        self.model.eval()
        with torch.no_grad():
            self._valid_batch_loop(epoch)

    def _valid_batch_loop(self, epoch):
        for batch in self.valid_loader:
            self._validate(*batch)

    def _validate(self, *data):
        raise NotImplementedError
"""

SUBCLASS = """\
import torch
from engine import Trainer


class AttentionTrainer(Trainer):
    def _validate(self, x, y):
        self.model.eval()
        loss = self.model(x, y)
        self.meter.update(loss.item())
"""


def test_a_hook_the_base_class_calls_under_no_grad_two_calls_up_is_silent(runner, workdir):
    # a template method: the base class's `evaluate` disables gradients around
    # `_valid_batch_loop`, its only caller in the module, which calls the hook
    (workdir / "engine.py").write_text(ENGINE)
    (workdir / "attention.py").write_text(SUBCLASS)
    assert _codes(runner, ".") == []


@pytest.mark.parametrize("engine", [
    ENGINE.replace("        with torch.no_grad():\n            self._valid_batch_loop(epoch)",
                   "        self._valid_batch_loop(epoch)"),
    ENGINE + "\n    def debug(self):\n        self._valid_batch_loop(0)\n",  # another caller, with gradients on
    ENGINE + "\n\nHOOKS = [Trainer._valid_batch_loop]\n",  # named elsewhere in the module: unknown callers
])
def test_a_hook_reached_with_gradients_on_keeps_the_finding(runner, workdir, engine):
    (workdir / "engine.py").write_text(engine)
    (workdir / "attention.py").write_text(SUBCLASS)
    assert _codes(runner, ".") == ["attention.py:6:5:"]
