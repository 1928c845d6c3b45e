"""Facts across modules (torchlint/project.py): a function that its own module
never calls runs every step because another module of the run calls it there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import run

OPS = """\
import torch


def make_mask(n, device):
    return torch.ones(n, n).to(device)


def unused_helper(device):
    return torch.zeros(4).to(device)
"""

TRAIN = """\
import torch
from ops import make_mask


def train(model, loader, device):
    for x, y in loader:
        mask = make_mask(x.shape[1], device)
        model(x * mask).sum().backward()
"""

ONCE = """\
import torch
from ops import make_mask


def build(device):
    return make_mask(8, device)
"""

METRICS = """\
import torch


class Logger:
    def __init__(self):
        self.values = {}

    def update(self, **kwargs):
        for name, value in kwargs.items():
            if isinstance(value, torch.Tensor):
                value = value.item()
            self.values[name] = value
"""

LOOP_WITH_LOGGER = """\
import torch
from metrics import Logger


def train(model, loader, optimizer):
    logger = Logger()
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        logger.update(loss=loss)
"""


def _concise(runner, *args):
    result = run(runner, "check", "--output-format", "concise", "--select", "TL101,TL201", *args)
    return [line.split(" ")[0] + " " + line.split(" ")[1] for line in result.stdout.splitlines() if ": TL" in line]


def test_a_helper_called_every_step_from_another_module(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    assert _concise(runner, ".") == ["ops.py:5:12: TL201"]  # not `unused_helper`: nobody calls it
    full = run(runner, "check", "--select", "TL201", ".").stdout
    assert "= note: runs every step: called from train.py:7" in full


def test_a_helper_called_once_from_another_module_is_silent(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "setup.py").write_text(ONCE)
    assert _concise(runner, ".") == []


def test_each_file_alone_knows_nothing_of_the_other(runner, workdir):
    # pre-commit passes only the changed files: the index covers the files of the run.
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    assert _concise(runner, "ops.py") == []


def test_a_method_of_an_instance_built_from_an_imported_class(runner, workdir):
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "train.py").write_text(LOOP_WITH_LOGGER)
    # A logger converting whatever it is given is silent on its own (usually
    # called every N steps); called every step from the training loop, it syncs
    # every step.
    assert _concise(runner, "metrics.py") == []
    assert _concise(runner, ".") == ["metrics.py:11:25: TL101"]


def test_two_hops_and_a_method_returning_an_imported_class(runner, workdir):
    (workdir / "pkg").mkdir()
    (workdir / "pkg" / "__init__.py").write_text("")
    (workdir / "pkg" / "distributions.py").write_text(
        "import torch\n\n\nclass Gaussian:\n    def __init__(self, mean):\n        self.mean = mean\n\n"
        "    def sample(self):\n        return self.mean + torch.randn(self.mean.shape).to(self.mean.device)\n"
    )
    (workdir / "pkg" / "autoencoder.py").write_text(
        "import torch\nfrom .distributions import Gaussian\n\n\nclass AutoEncoder(torch.nn.Module):\n"
        "    def encode(self, x):\n        return Gaussian(self.encoder(x))\n\n"
        "    def forward(self, x):\n        posterior = self.encode(x)\n        return self.decoder(posterior.sample())\n"
    )
    assert _concise(runner, ".") == ["pkg/distributions.py:9:28: TL201"]
    (workdir / "pkg" / "helpers.py").write_text(
        "from pkg.distributions import Gaussian\n\n\ndef draw(mean):\n    return Gaussian(mean).sample()\n"
    )
    (workdir / "pkg" / "autoencoder.py").write_text(
        "import torch\nfrom .helpers import draw\n\n\nclass AutoEncoder(torch.nn.Module):\n"
        "    def forward(self, x):\n        return self.decoder(draw(self.encoder(x)))\n"
    )
    # forward -> helpers.draw -> Gaussian.sample: `draw` alone is of unknown frequency.
    assert _concise(runner, ".") == ["pkg/distributions.py:9:28: TL201"]


def test_the_cache_follows_the_callers(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    assert _concise(runner, ".") == ["ops.py:5:12: TL201"]
    assert _concise(runner, ".") == ["ops.py:5:12: TL201"]  # warm
    # Only the caller changes: the helper is called once now.
    (workdir / "train.py").write_text(TRAIN.replace("    for x, y in loader:\n", "    if loader:\n        x = loader\n"))
    assert _concise(runner, ".") == []
    (workdir / "train.py").write_text(TRAIN)
    assert _concise(runner, ".") == ["ops.py:5:12: TL201"]


def test_worker_processes_see_the_same_facts(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    for i in range(40):
        (workdir / f"filler{i}.py").write_text(f"import torch\nx{i} = torch.zeros(2)\n")
    serial = _concise(runner, "-j", "1", "--no-cache", ".")
    pooled = _concise(runner, "-j", "2", "--no-cache", ".")
    assert serial == pooled == ["ops.py:5:12: TL201"]


def test_a_large_run_asks_the_index_in_the_same_warm_workers(runner, workdir, monkeypatch):
    from torchlint import parallel

    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "loop.py").write_text(LOOP_WITH_LOGGER)
    for i in range(40):
        (workdir / f"filler{i}.py").write_text(f"import torch\nx{i} = torch.zeros(2)\n")
    started, mapped = [], []
    real_executor, real_map = parallel.Workers.executor, parallel.Workers.map

    def executor(self):
        if self.pool is None:
            started.append(self)
        return real_executor(self)

    def spy_map(self, function, calls):
        mapped.append((function.__name__, len(calls)))
        return real_map(self, function, calls)

    monkeypatch.setattr(parallel.Workers, "executor", executor)
    monkeypatch.setattr(parallel.Workers, "map", spy_map)
    found = _concise(runner, "-j", "2", "--no-cache", ".")
    assert found == ["metrics.py:11:25: TL101", "ops.py:5:12: TL201"]
    assert len(started) == 1  # one pool for the whole run
    assert [name for name, _ in mapped] == ["_sites_in_file", "_recheck"]
    assert dict(mapped)["_recheck"] == 2


def main_process_output(workdir, select: str) -> str:
    """A pooled run (with 40 more files) of ``workdir``'s files in a fresh
    process, whose last line says whether that process imported libcst."""
    import subprocess
    import sys

    for i in range(40):
        (workdir / f"filler{i}.py").write_text(f"import torch\nx{i} = torch.zeros(2)\n")
    code = (
        "import sys\nfrom torchlint.cli import main\n"
        f"try:\n    main(['check', '--no-cache', '-j', '2', '--select', '{select}', '--output-format', 'concise', '.'])\n"
        "except SystemExit:\n    pass\n"
        "print('libcst' in sys.modules)\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=120).stdout


def test_the_main_process_asks_its_questions_without_libcst(workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    output = main_process_output(workdir, "TL201")
    assert "ops.py:5:12: TL201" in output
    assert output.strip().splitlines()[-1] == "False"


def test_the_textual_hooks_agree_with_the_frequency_model():
    from torchlint.rules import _frequency, _project_text

    assert _project_text.UNKNOWN_LEVEL == _frequency.UNKNOWN


def test_json_and_sarif_carry_the_frequency_and_the_call(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    (item,) = json.loads(run(runner, "check", "--select", "TL201", "--output-format", "json", ".").stdout)
    assert (item["frequency"], item["via"]) == ("per step", "train.py:7")
    sarif = json.loads(run(runner, "check", "--select", "TL201", "--output-format", "sarif", ".").stdout)
    (result,) = sarif["runs"][0]["results"]
    assert result["properties"]["frequency"] == "per step" and result["properties"]["via"] == "train.py:7"


def test_fix_sees_the_same_facts_as_check(runner, workdir):
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN)
    result = run(runner, "fix", "--select", "TL201", ".")
    assert result.exit_code == 0, result.output
    assert "torch.ones(n, n, device=device)" in (workdir / "ops.py").read_text()
    assert "torch.zeros(4).to(device)" in (workdir / "ops.py").read_text()  # unused_helper: untouched


def test_a_module_imported_from_its_package(runner, workdir):
    (workdir / "training").mkdir()
    (workdir / "training" / "__init__.py").write_text("")
    (workdir / "training" / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN.replace("from ops import make_mask", "from training import ops").replace(
        "make_mask(x.shape[1], device)", "ops.make_mask(x.shape[1], device)"))
    assert _concise(runner, ".") == ["training/ops.py:5:12: TL201"]


TRAIN_CALLS_TWICE = """\
import torch
from ops import make_mask

MASK = make_mask(4, "cpu")  # once, at import


def train(model, loader, device):
    # mask = make_mask(x.shape[1], device)
    for x, y in loader:
        mask = make_mask(x.shape[1], device)
        model(x * mask).sum().backward()
"""


def test_the_call_that_makes_it_hot_is_named_by_its_own_line(runner, workdir):
    """The callee is written three times (once in a comment): `via` names the
    line of the call in the loop, not the first text that looks like it."""
    (workdir / "ops.py").write_text(OPS)
    (workdir / "train.py").write_text(TRAIN_CALLS_TWICE)
    (item,) = json.loads(run(runner, "check", "--select", "TL201", "--output-format", "json", ".").stdout)
    assert (item["frequency"], item["via"]) == ("per step", "train.py:10")


ENGINE_ACCUMULATES = """\
import torch


def train_one_epoch(model, loader, optimizer, update_freq):
    for i, (x, y) in enumerate(loader):
        loss = model(x.cuda()).sub(y.cuda()).pow(2).mean() / update_freq
        loss.backward()
        if (i + 1) % update_freq == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

MAIN_WRAPS_IN_DDP = """\
import torch
from engine import train_one_epoch


def main(args, model, loader, optimizer):
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, args.update_freq)
"""


def test_accumulation_on_a_model_wrapped_in_ddp_by_the_calling_module(runner, workdir):
    """TL602: the DDP wrap is in main.py, the accumulation loop in engine.py."""
    (workdir / "engine.py").write_text(ENGINE_ACCUMULATES)
    (workdir / "main.py").write_text(MAIN_WRAPS_IN_DDP)
    result = run(runner, "check", "--select", "TL602", "--output-format", "concise", ".")
    (line,) = [line for line in result.stdout.splitlines() if ": TL" in line]
    assert line.startswith("engine.py:7:9: TL602") and "wrapped in DDP in main.py:8" in line
    # engine.py alone does not know; a caller without DDP does not make it so
    assert "TL602" not in run(runner, "check", "--select", "TL602", "engine.py").stdout
    (workdir / "main.py").write_text(MAIN_WRAPS_IN_DDP.replace(
        "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])", "model = model.cuda()"))
    assert "TL602" not in run(runner, "check", "--select", "TL602", ".").stdout  # the cache follows main.py


@pytest.mark.parametrize(
    "call, reported",
    [
        ("logger.update(loss=loss)", True),
        ("logger.update(loss=loss.item())", False),
        ("logger.update(loss=loss_value, lr=optimizer.param_groups[0]['lr'])", False),
        ("logger.update(loss=loss_value, grad=grad_norm)", True),
        ("logger.update(**losses)", True),
        ("logger.update(**{'loss': loss.item()})", False),
        ("logger.update(**{k: v.item() for k, v in losses.items()})", False),
        ("logger.update(**{k: v for k, v in losses.items()})", True),
    ],
)
def test_a_logger_whose_callers_pass_only_host_values(runner, workdir, call, reported):
    """MetricLogger.update converts what it is given: every step, but only
    tensors cost a wait; callers that pass floats (`loss.item()`, a learning
    rate) leave nothing to wait for."""
    loop = LOOP_WITH_LOGGER.replace(
        "        logger.update(loss=loss)\n",
        "        loss_value = loss.item()\n        grad_norm = clip(model)\n        losses = {'loss': loss}\n"
        f"        {call}\n",
    )
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "train.py").write_text(loop)
    found = [line for line in _concise(runner, ".") if line.startswith("metrics.py")]
    assert found == (["metrics.py:11:25: TL101"] if reported else [])



@pytest.mark.parametrize(
    "guard, reported",
    [
        # DETR's training loop: the loss is read every step to stop on a non-finite value
        ("        if not math.isfinite(loss_value):\n            sys.exit(1)\n", False),
        ("        if not math.isfinite(loss_value):\n            raise RuntimeError(loss_value)\n", False),
        # DETR's evaluation loop hands every batch's results to the COCO evaluator
        ("        if coco_evaluator is not None:\n            coco_evaluator.update(res)\n", False),
        # a guard that only prints, or a setting tested: no wait every iteration
        ("        if not math.isfinite(loss_value):\n            print(loss_value)\n", True),
        ("        if args.verbose:\n            coco_evaluator.update(res)\n", True),
    ],
)
def test_a_logger_called_from_a_loop_that_waits_anyway(runner, workdir, guard, reported):
    """MetricLogger.update given tensors, from a loop that already waits for the
    device every iteration by design: its conversions add no wait."""
    loop = LOOP_WITH_LOGGER.replace("import torch\n", "import math\nimport sys\n\nimport torch\n").replace(
        "        logger.update(loss=loss)\n",
        "        loss_value = loss.item()\n" + guard + "        logger.update(loss=loss)\n",
    )
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "train.py").write_text(loop)
    found = [line for line in _concise(runner, ".") if line.startswith("metrics.py")]
    assert found == (["metrics.py:11:25: TL101"] if reported else [])


@pytest.mark.parametrize(
    "fold, reported",
    [
        ("max_lr = max(max_lr, group['lr'])", False),  # MAE's engine: the largest learning rate
        ("max_lr = max(max_lr, abs(group['lr']))", False),
        ("max_lr = max(max_lr, loss)", True),  # the loss tensor itself
        ("max_lr = max(max_lr, group['lr'] * loss)", True),
    ],
)
def test_a_logger_given_the_largest_learning_rate(runner, workdir, fold, reported):
    """A host value folded over the optimizer's parameter groups (`max_lr =
    max(max_lr, group["lr"])` in a loop over `optimizer.param_groups`) is a
    host value: a logger given only such values and `loss.item()` has nothing
    to wait for."""
    loop = LOOP_WITH_LOGGER.replace(
        "        logger.update(loss=loss)\n",
        "        logger.update(loss=loss.item())\n"
        "        max_lr = 0.0\n"
        "        for group in optimizer.param_groups:\n"
        f"            {fold}\n"
        "        logger.update(lr=max_lr)\n",
    )
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "train.py").write_text(loop)
    found = [line for line in _concise(runner, ".") if line.startswith("metrics.py")]
    assert found == (["metrics.py:11:25: TL101"] if reported else [])


def test_a_loop_over_other_groups_is_not_a_learning_rate(runner, workdir):
    loop = LOOP_WITH_LOGGER.replace(
        "        logger.update(loss=loss)\n",
        "        top = 0.0\n"
        "        for group in outputs:\n"
        "            top = max(top, group['score'])\n"
        "        logger.update(score=top)\n",
    ).replace("        loss = model(x).sum()\n", "        outputs = model(x)\n        loss = outputs[0]['score']\n")
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "train.py").write_text(loop)
    assert [line for line in _concise(runner, ".") if line.startswith("metrics.py")] == ["metrics.py:11:25: TL101"]

AUGMENT = """\
import torch


class Transform:
    def __init__(self, sigma):
        self.sigma = sigma

    def transform(self, x):
        return self.jitter(x)

    def jitter(self, x):
        return x + torch.randn(x.shape).to(x.device) * self.sigma
"""


@pytest.mark.parametrize(
    "caller, expected",
    [
        # `jitter` runs as often as `transform`, which only another module calls
        ("    def forward(self, x):\n        return self.net(self.aug.transform(x))\n", ["augment.py:12:20: TL201"]),
        ("    def setup(self, x):\n        self.x0 = self.aug.transform(x)\n", []),
    ],
    ids=["every-step", "once"],
)
def test_a_helper_of_a_function_that_only_another_module_calls(runner, workdir, caller, expected):
    (workdir / "augment.py").write_text(AUGMENT)
    (workdir / "model.py").write_text(
        "import torch\nfrom augment import Transform\n\n\nclass Model(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.aug = Transform(0.1)\n\n" + caller
    )
    assert _concise(runner, ".") == expected


# (caller path, caller text, file of the function, the function asked about,
# whether the first-pass summary lets the file be asked)
_REACH_CASES = [
    ("train.py", TRAIN, "ops.py", "make_mask", True),
    ("train.py", TRAIN, "ops.py", "unused_helper", False),
    ("train.py", LOOP_WITH_LOGGER, "metrics.py", "Logger.update", True),
    ("train.py", LOOP_WITH_LOGGER, "other/metrics.py", "Meter.update", False),
    ("train.py", "import torch\nimport ops\n\ndef f(loader):\n    for x in loader:\n        ops.make_mask(x)\n",
     "ops.py", "make_mask", True),
    # A call in a lambda is no call site (it runs whenever the lambda does): asked, nothing found.
    ("pkg/train.py", "import torch\nfrom . import ops as o\n\ndef f(loader):\n    for x in loader:\n"
     "        g = lambda: o.make_mask(x)\n        g()\n", "pkg/ops.py", "make_mask", True),
    ("train.py", "import torch\n\ndef f(loader):\n    from metrics import Logger\n    log = Logger()\n"
     "    for x in loader:\n        log.update(x=x)\n", "metrics.py", "Logger.update", True),
    ("train.py", "import torch\nfrom metrics import Logger\n\nclass T:\n    def __init__(self):\n"
     "        self.log = Logger()\n\n    def step(self, x):\n        self.log.update(x=x)\n",
     "metrics.py", "Logger.update", True),
    ("train.py", "import torch\nfrom metrics import Logger\n\ndef make():\n    return Logger()\n\n"
     "def f(loader):\n    for x in loader:\n        make().update(x=x)\n", "metrics.py", "Logger.update", True),
    ("train.py", "import torch\nfrom metrics import update\n\ndef f(loader, log):\n    for x in loader:\n"
     "        log.update(x=x)\n", "metrics.py", "Logger.update", False),
    ("train.py", "import torch\nfrom ops import make_mask\n\n@make_mask(3)\ndef f(loader):\n    pass\n",
     "ops.py", "make_mask", True),
]


@pytest.mark.parametrize("caller, text, target, qualname, asked", _REACH_CASES)
def test_the_first_pass_summary_never_rules_out_a_caller_the_parse_finds(caller, text, target, qualname, asked):
    """The index skips the second parse of a file whose first-pass summary
    says that none of its calls can reach the function (``could_reach``): that
    must never drop a call site the parse would find."""
    from torchlint.config import Settings
    from torchlint.engine import _lint_text
    from torchlint.project import sites_in
    from torchlint.registry import all_codes
    from torchlint.rules._project_text import could_reach

    result = _lint_text(text, caller, Settings(), sorted(all_codes()))
    summary = result.calls.summary(result.module, caller)
    found = sites_in(caller, text, [(target, qualname)])[target, qualname]
    assert could_reach(summary, target, qualname) is asked
    assert asked or not found


def test_the_call_named_does_not_depend_on_the_order_workers_finish(runner, workdir, monkeypatch):
    """Two callers at the same frequency: the finding names the first in the
    run's order, whatever order the analyses come back in (worker processes
    return them as they finish)."""
    from torchlint import parallel

    (workdir / "ops.py").write_text(OPS)
    (workdir / "a_train.py").write_text(TRAIN)
    (workdir / "b_train.py").write_text(TRAIN)
    in_order = run(runner, "check", "--select", "TL201", "--no-cache", ".").stdout
    assert "= note: runs every step: called from a_train.py:7" in in_order
    process_items = parallel._process_items
    monkeypatch.setattr(parallel, "_process_items", lambda *args: process_items(*args)[::-1])
    assert run(runner, "check", "--select", "TL201", "--no-cache", ".").stdout == in_order


METRIC_HELPERS = """\
import torch


def class_average_precision(scores, labels, n_classes, device):
    aps = []
    for c in range(1, n_classes):
        tp = torch.zeros(len(scores)).to(device)
        aps.append((tp * scores * (labels == c)).sum().item())
    return aps
"""

EVALUATE_WITH_STAR = """\
from utils import *


def evaluate(model, loader, n_classes, device):
    scores, labels = [], []
    for x, y in loader:
        scores.append(model(x.to(device)))
        labels.append(y.to(device))
    return class_average_precision(torch.cat(scores), torch.cat(labels), n_classes, device)


if __name__ == "__main__":
    evaluate(load_model(), load_data(), 21, "cuda")
"""


@pytest.mark.parametrize(
    "caller, expected",
    [
        (EVALUATE_WITH_STAR, []),  # `from utils import *`: called once, after the evaluation loop
        # the same helper called on every batch is reported
        (EVALUATE_WITH_STAR.replace(
            "        labels.append(y.to(device))\n",
            "        labels.append(y.to(device))\n        class_average_precision(scores[-1], labels[-1], n_classes, device)\n",
        ), ["utils.py:7:14: TL201", "utils.py:8:20: TL101"]),
        # a module that defines its own function of that name does not call the star-imported one
        (EVALUATE_WITH_STAR.replace(
            "def evaluate(", "def class_average_precision(*args):\n    return []\n\n\ndef evaluate("
        ), ["utils.py:7:14: TL201", "utils.py:8:20: TL101"]),
    ],
)
def test_a_function_called_through_a_star_import(runner, workdir, caller, expected):
    (workdir / "utils.py").write_text(METRIC_HELPERS)
    (workdir / "eval.py").write_text(caller)
    assert _concise(runner, ".") == expected
