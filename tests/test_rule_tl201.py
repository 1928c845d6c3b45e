"""Unit tests for TL201 (create-then-move)."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import replace

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability


_LOOP = "for step in range(steps):\n"


def _in_step(code: str) -> str:
    """The snippet's statements in a training loop (its imports stay on top): TL201
    reports only code that runs every step."""
    lines = textwrap.dedent(code).splitlines(keepends=True)
    head = 0
    while head < len(lines) and (lines[head].startswith(("import ", "from ")) or not lines[head].strip()):
        head += 1
    return "".join(lines[:head]) + _LOOP + "".join(("    " + l if l.strip() else l) for l in lines[head:])


def _out_of_step(code: str) -> str:
    head, _, body = code.partition(_LOOP)
    return head + "".join(l[4:] if l.startswith("    ") else l for l in body.splitlines(keepends=True))


def _lint(code: str, wrap: bool = True):
    """Diagnostics of a snippet run in a training loop; lines and columns as in the snippet."""
    found = lint(_in_step(code) if wrap else code, select=["TL201"])
    if wrap:
        found = [replace(d, line=d.line - 1, end_line=d.end_line - 1, column=d.column - 4,
                         end_column=d.end_column - 4) for d in found]
    return found


def _fixed(code: str, unsafe: bool = False, wrap: bool = True) -> str:
    text = _in_step(code) if wrap else code
    result = fix(text, select=["TL201"], unsafe=unsafe)
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=["TL201"], unsafe=unsafe)
    assert again.text == result.text, "fixing must be idempotent"
    return _out_of_step(result.text) if wrap else result.text


def _applicability(code: str):
    (d,) = _lint(code)
    return None if d.fix is None else d.fix.applicability


@pytest.mark.parametrize(
    "before, after",
    [
        ("torch.zeros(3, 4).cuda()", 'torch.zeros(3, 4, device="cuda")'),
        ("torch.zeros(3).cuda(None)", 'torch.zeros(3, device="cuda")'),
        ("torch.zeros(3).cuda(0)", 'torch.zeros(3, device="cuda:0")'),
        ("torch.zeros(3).cuda(device=1)", 'torch.zeros(3, device="cuda:1")'),
        ('torch.zeros(3).cuda("cuda:1")', 'torch.zeros(3, device="cuda:1")'),
        ('torch.zeros(3).cuda(torch.device("cuda", 1))', 'torch.zeros(3, device=torch.device("cuda", 1))'),
        ("torch.ones(3).cuda(non_blocking=True)", 'torch.ones(3, device="cuda")'),
        ("torch.ones(3).to(device)", "torch.ones(3, device=device)"),
        ("torch.ones(3).to(self.device)", "torch.ones(3, device=self.device)"),
        ("torch.ones(3).to(x.device, non_blocking=True, copy=True)", "torch.ones(3, device=x.device)"),
        ("torch.ones(3).to(device, torch.float16, True)", "torch.ones(3, device=device, dtype=torch.float16)"),
        ("torch.ones(3).to(device=dev, dtype=x.dtype)", "torch.ones(3, device=dev, dtype=x.dtype)"),
        ('torch.eye(3).to("cuda:0")', 'torch.eye(3, device="cuda:0")'),
        ("torch.zeros_like(h.cpu()).cuda()", 'torch.zeros_like(h.cpu(), device="cuda")'),
        ("torch.empty_like(torch.from_numpy(a)).to(device)", "torch.empty_like(torch.from_numpy(a), device=device)"),
        ("torch.arange(n).to(device)", "torch.arange(n, device=device)"),
        ("torch.zeros(*shape).cuda()", 'torch.zeros(*shape, device="cuda")'),
        ("(torch.zeros(3).cuda())", '(torch.zeros(3, device="cuda"))'),
        ("torch.zeros(3, dtype=torch.half).to(device)", "torch.zeros(3, dtype=torch.half, device=device)"),
    ],
)
def test_safe_fix(before, after):
    code = f"import torch\nx = {before}\n"
    assert _applicability(code) is Applicability.SAFE
    assert _fixed(code) == f"import torch\nx = {after}\n"


@pytest.mark.parametrize(
    "before, after",
    [
        ("torch.rand(3).cuda()", 'torch.rand(3, device="cuda")'),
        ("torch.randn(3).to(device)", "torch.randn(3, device=device)"),
        ("torch.randint(0, 10, (3,)).to(device)", "torch.randint(0, 10, (3,), device=device)"),
        ("torch.randperm(n).cuda()", 'torch.randperm(n, device="cuda")'),
        ("torch.rand_like(h.cpu()).cuda()", 'torch.rand_like(h.cpu(), device="cuda")'),
        ("torch.randn_like(torch.zeros(3)).to(device)", "torch.randn_like(torch.zeros(3), device=device)"),
        ("torch.linspace(0, 1, 5).cuda()", 'torch.linspace(0, 1, 5, device="cuda")'),
        ("torch.logspace(0, 1, 5).cuda()", 'torch.logspace(0, 1, 5, device="cuda")'),
        ("torch.arange(0, 1, 0.1).cuda()", 'torch.arange(0, 1, 0.1, device="cuda")'),
        ("torch.arange(n / 2).cuda()", 'torch.arange(n / 2, device="cuda")'),
        ("torch.full((3,), 0.1).to(device, torch.float64)", "torch.full((3,), 0.1, device=device, dtype=torch.float64)"),
        ("torch.full((1,), 0.1).to(device, dtype=torch.float64)", "torch.full((1,), 0.1, device=device, dtype=torch.float64)"),
        ("torch.zeros(3, requires_grad=True).cuda()", 'torch.zeros(3, requires_grad=True, device="cuda")'),
        ("torch.zeros(3).cuda(args.gpu)", "torch.zeros(3, device=args.gpu)"),
        ("torch.zeros(3).cuda(device)", "torch.zeros(3, device=device)"),
    ],
)
def test_unsafe_fix(before, after):
    code = f"import torch\nx = {before}\n"
    assert _applicability(code) is Applicability.UNSAFE
    assert _fixed(code) == code
    assert _fixed(code, unsafe=True) == f"import torch\nx = {after}\n"


@pytest.mark.parametrize(
    "expr",
    [
        "torch.zeros(3, out=buf).cuda()",
        "torch.empty(3, pin_memory=True).cuda(non_blocking=True)",
        'torch.zeros(3, device="cpu").cuda()',
        'torch.zeros(3, device=torch.device("cpu")).to(device)',
        "torch.zeros(3, dtype=torch.float32).to(device, torch.float16)",
        "torch.zeros(3).to(device, memory_format=torch.channels_last)",
        "torch.zeros(3).cuda(memory_format=torch.channels_last)",
        "torch.zeros(3).cuda(*gpu)",
        'torch.zeros(3).cuda("cpu")',
    ],
)
def test_reported_without_fix(expr):
    code = f"import torch\nx = {expr}\n"
    assert _applicability(code) is None
    assert _fixed(code, unsafe=True) == code


@pytest.mark.parametrize(
    "expr",
    [
        "torch.zeros(3).to(torch.float32)",
        "torch.zeros(3).to(dtype=torch.float16)",
        "torch.zeros(3).to(x.dtype)",
        "torch.zeros(3).to(dtype)",
        "torch.zeros(3).to(other)",
        "torch.zeros(3).to(rank)",
        'torch.zeros(3).to("cpu")',
        'torch.zeros(3).to(torch.device("cpu"))',
        "torch.zeros(3).to(*args)",
        "torch.zeros(3).to(**kwargs)",
        "torch.zeros(3).float().cuda()",
        "torch.zeros(3)",
        "torch.zeros(3, device=device).to(device)",
        'torch.zeros(3, device="cuda").cuda()',
        "torch.zeros(3, **factory_kwargs).cuda()",
        "torch.from_numpy(a).cuda()",
        "torch.as_tensor(a).to(device)",
        "torch.rand(3, generator=g).cuda()",
        "torch.randint(0, 10, (3,), generator=torch.Generator().manual_seed(0)).to(device)",
        'torch.randn(3, device="cpu").to(device)',
        'torch.rand(3, device=torch.device("cpu")).cuda()',
        "torch.zeros_like(x).cuda()",
        "torch.randn_like(latents).to(device, torch.float16)",
        "torch.ones_like(mask).to(device=device)",
        "torch.zeros_like(x.cuda()).to(device)",
        "x.new_zeros(3).cuda()",
        "torch.cat([a, b]).cuda()",
        "zeros(3).cuda()",
        "np.zeros(3).cuda()",
    ],
)
def test_near_misses(expr):
    assert _lint(f"import torch\nimport numpy as np\nx = {expr}\n") == []


def test_user_function_named_like_a_factory_shadows_the_import():
    code = """
        from torch import zeros

        def zeros(n):
            return [0] * n

        for step in range(steps):
            x = zeros(3).cuda()
    """
    assert _lint(code, wrap=False) == []


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch as T", "T.ones(2).cuda()"),
        ("from torch import ones", "ones(2).cuda()"),
        ("from torch import ones as o", "o(2).cuda()"),
        ("from torch import *", "ones(2).cuda()"),
    ],
)
def test_import_aliases(imports, call):
    assert codes(_lint(f"{imports}\nx = {call}\n")) == ["TL201"]


def test_import_inside_function():
    code = """
        import os

        def forward():
            import torch as th
            return th.zeros(3).cuda()

        def training_step():
            return th.zeros(3).cuda()
    """
    diagnostics = _lint(code, wrap=False)
    assert [(d.line, d.column) for d in diagnostics] == [(6, 12)]


def test_reported_at_the_start_of_the_chain():
    code = "import torch\ny = 1 + torch.zeros(3).to(device)\n"
    (d,) = _lint(code)
    assert (d.line, d.column) == (2, 9)
    assert "`torch.zeros(...)`" in d.message and "device=" in d.message


def test_multiline_layout_and_comments_are_kept():
    code = textwrap.dedent(
        """\
        import torch
        x = torch.zeros(
            batch,  # rows
            dim,  # columns
        ).to(device)
        y = torch.ones(batch,
                       dim  # columns
                       ).cuda()
        """
    )
    assert _fixed(code) == textwrap.dedent(
        """\
        import torch
        x = torch.zeros(
            batch,  # rows
            dim,  # columns
            device=device,
        )
        y = torch.ones(batch,
                       dim,  # columns
                       device="cuda"
                       )
        """
    )


def test_multiline_without_trailing_comma_gets_own_line():
    code = textwrap.dedent(
        """\
        import torch
        x = torch.zeros(
            batch,
            dim  # columns
        ).to(device, torch.float16)
        """
    )
    assert _fixed(code) == textwrap.dedent(
        """\
        import torch
        x = torch.zeros(
            batch,
            dim,  # columns
            device=device,
            dtype=torch.float16
        )
        """
    )


def test_comment_inside_the_move_makes_the_fix_unsafe():
    code = "import torch\nx = torch.zeros(3).to(\n    device,  # gpu\n)\n"
    assert _applicability(code) is Applicability.UNSAFE


def test_chained_moves_are_fixed_once_and_idempotent():
    code = "import torch\nx = torch.zeros(3).to(device).to(torch.float16)\n"
    assert _fixed(code) == "import torch\nx = torch.zeros(3, device=device).to(torch.float16)\n"


def test_like_factory_of_a_name_assigned_on_the_host():
    code = """
        import numpy as np
        import torch

        def training_step(path, device):
            table = torch.from_numpy(np.load(path))
            return torch.ones_like(table).to(device)

        def eval_step(n, device):
            buffer = torch.empty(n, 4)
            return torch.zeros_like(buffer).cuda()
    """
    assert [(d.line, d.column) for d in _lint(code, wrap=False)] == [(7, 12), (11, 12)]


def test_like_factory_of_a_name_that_may_live_on_the_device_is_not_reported():
    code = """
        import torch

        def forward(latents, device):
            return torch.randn_like(latents).to(device)

        def reassigned(model, loader, device):
            state = torch.zeros(4)
            for x in loader:
                noise = torch.randn_like(state).to(device)
                state = model(x, noise)

        def unpacked_step(pair, device):
            a, b = pair
            return torch.zeros_like(a).to(device)

        def moved_step(n, device):
            weights = torch.ones(n, device=device)
            return torch.zeros_like(weights).to(device)

        def same_device_step(n):
            host = torch.zeros(n)
            return torch.zeros_like(host).to(host.device)
    """
    assert _lint(code) == []


@pytest.mark.parametrize("path", ["tests/test_model.py", "test_ops.py", "pkg/ops_test.py", "conftest.py"])
def test_test_files_are_skipped(path):
    code = _in_step("import torch\ntorch.manual_seed(0)\nx = torch.randn(2, 3).to(device)\ny = torch.zeros(3).cuda()\n")
    assert lint(code, select=["TL201"], path=path) == []
    assert codes(lint(code, select=["TL201"], path="pkg/ops.py")) == ["TL201", "TL201"]


def test_torch_tensor_of_host_data_is_not_reported():
    # PyTorch builds `torch.tensor(data)` on the host and copies it even with
    # `device=`: the rewrite buys nothing a maintainer would take.
    assert _lint(_in_step("import torch\nx = torch.tensor([1, 2, 3]).cuda()\ny = torch.tensor(sizes).to(device)\n")) == []
    (z,) = _lint(_in_step("import torch\nx = torch.zeros(3).cuda()\n"))
    assert "create it there directly" in z.message


@pytest.mark.parametrize(
    "factory, applicability",
    [
        # only `end`: the values are the indices 0, 1, 2, ... on every device
        ("torch.arange(n)", Applicability.SAFE),
        ("torch.arange(end=n)", Applicability.SAFE),
        # every argument visibly an integer: an int64 result, computed exactly
        ("torch.arange(0, len(tokens), 2)", Applicability.SAFE),
        ("torch.arange(x.size(1) - 1, -1, -1)", Applicability.SAFE),
        ("torch.arange(1, x.shape[0] + 1)", Applicability.SAFE),
        ("torch.arange(start, stop, dtype=torch.long)", Applicability.SAFE),
        # `start`/`step` that may be floats: `start + i * step` is computed with
        # the device's float arithmetic, which may round differently
        ("torch.arange(start, stop)", Applicability.UNSAFE),
        ("torch.arange(0, n, step)", Applicability.UNSAFE),
        ("torch.arange(0, n, step=delta)", Applicability.UNSAFE),
        ("torch.arange(lo, hi, dtype=torch.float32)", Applicability.UNSAFE),
        ("torch.arange(*bounds)", Applicability.UNSAFE),
    ],
)
def test_arange_is_safe_only_when_its_values_are_exact(factory, applicability):
    code = _in_step(f"import torch\nx = {factory}.to(device)\n")
    assert _applicability(code) is applicability


def test_reported_only_where_it_runs_every_step():
    code = """
        import torch

        MASK = torch.ones(8).cuda()

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = torch.ones(1).cuda()

            def forward(self, x):
                return x * self.window(x)

            def window(self, x):
                return torch.ones(x.shape[-1]).to(x.device)

        def helper(n, device):
            return torch.zeros(n).to(device)

        def train_one_epoch(model, loader, device):
            weights = torch.ones(10).to(device)
            for x, y in loader:
                noise = torch.zeros(x.shape).to(device)
                if step % 100 == 0:
                    probe = torch.zeros(3).to(device)

        def export(model, device):
            dummy = torch.zeros(1, 3, 224, 224).to(device)
            torch.onnx.export(model, dummy, "model.onnx")

        def main():
            model = Net()
            for epoch in range(10):
                train_one_epoch(model, loader, "cuda")
            export(model, "cuda")

        if __name__ == "__main__":
            main()
            demo = torch.zeros(4).cuda()
    """
    # forward's helper (per step through `self.window`) and the batch loop only.
    assert [d.line for d in _lint(code, wrap=False)] == [15, 23]
