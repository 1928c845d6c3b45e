"""Unit tests for TL603 (ddp-find-unused-parameters)."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

HEADER = "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"


def _lint(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL603"], path=path)


def test_reported_at_the_keyword():
    code = HEADER + "model = DDP(model, device_ids=[rank], find_unused_parameters=True)\n"
    (d,) = _lint(code)
    assert (d.line, d.column) == (3, 39)
    assert (d.end_line, d.end_column) == (3, 66)
    assert "static_graph=True" in d.message
    assert "autograd graph" in d.message
    assert d.fix is None


@pytest.mark.parametrize(
    "imports, func",
    [
        ("import torch", "torch.nn.parallel.DistributedDataParallel"),
        ("import torch as T", "T.nn.parallel.DistributedDataParallel"),
        ("from torch import nn", "nn.parallel.DistributedDataParallel"),
        ("from torch.nn.parallel import DistributedDataParallel", "DistributedDataParallel"),
        ("from torch.nn.parallel import DistributedDataParallel as DDP", "DDP"),
        ("from torch.nn.parallel.distributed import DistributedDataParallel as D", "D"),
        ("import torch.nn.parallel as par", "par.DistributedDataParallel"),
    ],
)
def test_import_forms(imports, func):
    code = f"{imports}\nmodel = {func}(model, find_unused_parameters=True)\n"
    assert codes(_lint(code)) == ["TL603"]


@pytest.mark.parametrize(
    "args",
    [
        "model",
        "model, find_unused_parameters=False",
        "model, find_unused_parameters=args.find_unused_parameters",
        "model, find_unused_parameters=cfg['find_unused']",
        "model, find_unused_parameters=not frozen",
        "model, find_unused_parameters=1",
        "model, find_unused_parameters=True, static_graph=True",
        "model, find_unused_parameters=True, static_graph=use_static",
        "model, find_unused_parameters=True, **ddp_kwargs",
        "*args, find_unused_parameters=True",
        # positional: the parameter's position changed between torch versions
        "model, None, None, 0, True, None, 25, True",
    ],
)
def test_silent_cases(args):
    assert _lint(HEADER + f"model = DDP({args})\n") == []


def test_static_graph_false_says_the_graph_changes():
    # (nnUNet's staged fine-tuning trainers: the author declares the graph dynamic)
    code = HEADER + "model = DDP(model, find_unused_parameters=True, static_graph=False)\n"
    assert codes(_lint(code)) == []


SWITCHED = HEADER + """
class Trainer:
    def init(self):
        self.model_ddp = DDP(self.model, device_ids=[self.rank], find_unused_parameters=True)

    def train_mat(self, src):
        return self.model_ddp(src)[0]

    def train_seg(self, img):
        return self.model_ddp(img, segmentation_pass=True)[0]
"""


def test_a_wrapped_model_run_through_another_branch_needs_the_flag():
    assert codes(_lint(SWITCHED)) == []


def test_the_same_model_always_run_the_same_way_is_reported():
    code = SWITCHED.replace("segmentation_pass=True", "downsample_ratio=0.25")
    assert codes(_lint(code)) == ["TL603"]


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nfrom lightning.pytorch.strategies import DDPStrategy\ns = DDPStrategy(find_unused_parameters=True)\n",
        "import torch\nfrom apex.parallel import DistributedDataParallel\nm = DistributedDataParallel(model, find_unused_parameters=True)\n",
        "import torch\nclass DistributedDataParallel:\n    def __init__(self, m, find_unused_parameters=False):\n        self.m = m\n"
        "m = DistributedDataParallel(model, find_unused_parameters=True)\n",
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nm = FSDP(model, find_unused_parameters=True)\n",
        "import torch\nkwargs = dict(find_unused_parameters=True)\n",
    ],
)
def test_other_constructors_are_silent(code):
    assert _lint(code) == []


def test_silent_in_test_files_like_every_rule_but_tl001():
    # A test builds DDP once, for a few steps: the traversal costs nothing
    # that matters there (Rule.in_tests is False for TL603).
    code = HEADER + "model = DDP(model, find_unused_parameters=True)\n"
    assert _lint(code, path="tests/test_ddp.py") == []
    assert codes(_lint(code, path="train_ddp.py")) == ["TL603"]
