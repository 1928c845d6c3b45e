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
