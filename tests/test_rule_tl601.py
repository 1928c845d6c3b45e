"""Unit tests for TL601 (data-parallel)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes, lint


def _lint(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL601"], path=path)


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch", "torch.nn.DataParallel(model)"),
        ("import torch as T", "T.nn.DataParallel(model)"),
        ("from torch import nn", "nn.DataParallel(model, device_ids=[0, 1])"),
        ("import torch.nn as nn", "nn.parallel.DataParallel(model)"),
        ("from torch.nn import DataParallel", "DataParallel(model)"),
        ("from torch.nn import DataParallel as DP", "DP(model)"),
        ("from torch.nn.parallel import DataParallel", "DataParallel(module=model)"),
        ("import torch.nn.parallel as par", "par.DataParallel(model)"),
        ("from torch.nn.parallel.data_parallel import DataParallel", "DataParallel(model)"),
        ("from torch.nn import *", "DataParallel(model)"),
        ("import torch", "torch.nn.parallel.data_parallel(model, inputs, range(2))"),
        ("from torch.nn.parallel import data_parallel", "data_parallel(model, inputs)"),
        ("from torch.nn.parallel.data_parallel import data_parallel as dp", "dp(model, inputs)"),
    ],
)
def test_import_forms(imports, call):
    diagnostics = _lint(f"{imports}\nmodel = {call}\n")
    assert codes(diagnostics) == ["TL601"]
    assert (diagnostics[0].line, diagnostics[0].column) == (2, 9)


def test_message_says_why_and_what_to_do():
    (d,) = _lint("import torch\nmodel = torch.nn.DataParallel(model)\n")
    assert "DistributedDataParallel" in d.message
    assert "GIL" in d.message
    (f,) = _lint("import torch\ny = torch.nn.parallel.data_parallel(model, x)\n")
    assert f.message.startswith("`data_parallel(...)`")


@pytest.mark.parametrize(
    "line",
    [
        "ok = isinstance(model, nn.DataParallel)",
        "ok = type(model) is nn.DataParallel",
        "inner = model.module if isinstance(model, nn.DataParallel) else model",
        "wrapper = nn.DataParallel if many else nn.Identity",
        "make = functools.partial(nn.DataParallel, device_ids=[0, 1])",
        "def unwrap(m: nn.DataParallel) -> nn.Module:\n    return m.module",
        "class Replicated(nn.DataParallel):\n    pass",
        "nn.DataParallel.__init__(self, module)",
        "model = nn.parallel.DistributedDataParallel(model)",
        "model = nn.parallel.replicate(model, [0, 1])",
    ],
)
def test_non_calls_and_other_wrappers_are_silent(line):
    assert _lint(f"import functools\nfrom torch import nn\n{line}\n") == []


def test_users_own_and_other_libraries_dataparallel_are_silent():
    code = """
        import torch
        from torch_geometric.nn import DataParallel as GeoDP

        class DataParallel:
            def __init__(self, module):
                self.module = module

        a = DataParallel(model)
        b = GeoDP(model)
    """
    assert _lint(code) == []


def test_import_inside_function_is_scoped():
    code = """
        import torch

        def wrap(model):
            from torch.nn import DataParallel
            return DataParallel(model)

        def other(model):
            return DataParallel(model)
    """
    diagnostics = _lint(code)
    assert [(d.line, d.column) for d in diagnostics] == [(6, 12)]


@pytest.mark.parametrize("path", ["tests/test_checkpoint.py", "test_utils.py", "pkg/wrap_test.py", "conftest.py"])
def test_test_files_are_skipped(path):
    # a test that checks that a wrapped model is unwrapped again
    code = """
        import torch

        def test_unwrap(model):
            wrapped = torch.nn.DataParallel(model)
            assert unwrap(wrapped) is model
    """
    assert _lint(code, path=path) == []
    assert codes(_lint(code, path="pkg/train.py")) == ["TL601"]


def test_no_fix_is_offered():
    (d,) = _lint("import torch\nmodel = torch.nn.DataParallel(model)\n")
    assert d.fix is None


def test_silent_where_the_program_also_offers_ddp():
    # (Moved out of the fixture: a module that constructs DDP anywhere is a
    # program with a DDP path, where DataParallel is the launch-time fallback.)
    code = (
        "import os\nimport torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def distributed(model):\n"
        "    local_rank = int(os.environ['LOCAL_RANK'])\n"
        "    return DDP(model.cuda(local_rank), device_ids=[local_rank])\n"
        "def single_node(model):\n"
        "    return torch.nn.DataParallel(model)\n"
    )
    assert lint(code, select=["TL601"]) == []
    assert codes(lint(code.replace("DDP(model", "wrap(model"), select=["TL601"])) == ["TL601"]


RUNNER = """
import torch


class Runner:
    def train(self, loader):
        model = torch.nn.DataParallel(Model().cuda())
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            model(x).mean().backward()
            optimizer.step()

    def sample(self, n):
        model = Model().cuda()
        model = torch.nn.DataParallel(model)
        model.eval()
        with torch.no_grad():
            return model(torch.randn(n, 3, 32, 32, device="cuda"))
"""


def test_a_sampling_function_of_a_module_that_trains_elsewhere_is_inference():
    assert [d.line for d in _lint(RUNNER)] == [7]


def test_the_same_function_that_trains_too_is_reported():
    code = RUNNER.replace("            return model(torch.randn(n, 3, 32, 32, device=\"cuda\"))",
                          "            out = model(torch.randn(n, 3, 32, 32, device=\"cuda\"))\n"
                          "        model.train()\n        return out")
    assert [d.line for d in _lint(code)] == [7, 15]


def test_a_copy_that_mirrors_how_its_input_was_wrapped_is_silent():
    code = """
    import copy
    import torch.nn as nn


    def ema_copy(module):
        if isinstance(module, nn.DataParallel):
            inner = copy.deepcopy(module.module)
            return nn.DataParallel(inner)
        return copy.deepcopy(module)


    def build(model):
        if isinstance(model, nn.Module):
            return nn.DataParallel(model)
        return model
    """
    assert [d.line for d in _lint(code)] == [15]


def test_functional_form_outside_training_is_a_sampling_forward():
    code = """
    import torch
    from torch import nn

    def sample_sheet(G, z, y):
        return nn.parallel.data_parallel(G, (z, G.shared(y))).data.cpu()

    def train(G, D, z, y, optimizer):
        loss = nn.parallel.data_parallel(D, (G(z), y)).mean()
        loss.backward()
        optimizer.step()
    """
    assert [d.line for d in _lint(textwrap.dedent(code))] == [9]
    # a module's forward runs every training step
    forward = code.replace("def sample_sheet(G, z, y):", "def forward(G, z, y):")
    assert [d.line for d in _lint(textwrap.dedent(forward))] == [6, 9]
