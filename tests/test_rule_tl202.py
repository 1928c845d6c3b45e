"""Unit tests for TL202 (dataloader-pin-memory)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability
from torchlint.registry import all_rules

RULE = all_rules()["TL202"]


def _lint(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL202"], path=path)


def _fixed(code: str, unsafe: bool = False) -> str:
    result = fix(code, select=["TL202"], unsafe=unsafe)
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=["TL202"], unsafe=unsafe)
    assert again.text == result.text, "fixing must be idempotent"
    assert again.applied == {}
    return result.text


@pytest.mark.parametrize("example", RULE.VALID)
def test_valid_examples(example):
    assert _lint(example) == []


@pytest.mark.parametrize("example", RULE.INVALID)
def test_invalid_examples(example):
    assert codes(_lint(example)) == ["TL202"]


@pytest.mark.parametrize(
    "evidence",
    [
        "model.cuda()",
        "x = batch.cuda(non_blocking=True)",
        "x = batch.to(device)",
        "x = batch.to(self.device)",
        'x = batch.to("cuda:0")',
        "x = batch.to(device=args.device)",
        'x = torch.zeros(3, device="cuda")',
        'x = torch.zeros(3, device=torch.device("cuda", 0))',
        'model = Net().to(torch.device("cuda"))',
        'x = batch.to("xpu")',
    ],
)
def test_module_that_moves_data(evidence):
    code = f"import torch\nloader = torch.utils.data.DataLoader(ds, batch_size=8)\n{evidence}\n"
    assert codes(_lint(code)) == ["TL202"]


@pytest.mark.parametrize(
    "other",
    [
        "",
        'x = batch.to("cpu")',
        "x = batch.to(torch.float16)",
        "x = batch.to(x.dtype)",
        "x = batch.to(other)",
        "x = batch.to(*args)",
        'x = batch.to("mps")',
        'x = torch.zeros(3, device="mps")',
        'x = torch.empty(3, device="meta")',
        'x = torch.zeros(3, device="cpu")',
        "x = torch.zeros(3, device=device)",
        "ok = torch.cuda.is_available()",
        "torch.cuda.synchronize()",
    ],
)
def test_module_that_never_moves_data_is_silent(other):
    code = f"import torch\nloader = torch.utils.data.DataLoader(ds, batch_size=8)\n{other}\n"
    assert _lint(code) == []


def test_evidence_before_or_after_the_loader_and_in_other_functions():
    code = """
        import torch
        from torch.utils.data import DataLoader

        def step(model, x):
            return model(x.cuda())

        def loaders(ds):
            return DataLoader(ds), DataLoader(ds, pin_memory=False)
    """
    diagnostics = _lint(code)
    assert [(d.line, d.column) for d in diagnostics] == [(9, 12), (9, 28)]
    assert [d.fix.applicability for d in diagnostics] == [Applicability.SAFE, Applicability.UNSAFE]
    assert "pin_memory=True" in diagnostics[0].message


@pytest.mark.parametrize(
    "call",
    [
        "DataLoader(ds, **kwargs)",
        "DataLoader(*args)",
        "DataLoader(ds, pin_memory=True)",
        "DataLoader(ds, pin_memory=cfg.pin_memory)",
        "DataLoader(ds, pin_memory=use_cuda)",
        "DataLoader(ds, 8, True, None, None, 2, None, True)",
        "DataLoader(ds, 8, True, None, None, 2, None, pin)",
    ],
)
def test_unknown_or_enabled_pin_memory_is_silent(call):
    code = f"import torch\nfrom torch.utils.data import DataLoader\nx = {call}\nmodel.cuda()\n"
    assert _lint(code) == []


def test_positional_star_after_index_seven_is_still_known():
    code = "import torch\nfrom torch.utils.data import DataLoader\nx = DataLoader(ds, 8, True, None, None, 2, None, False, *rest)\nmodel.cuda()\n"
    (d,) = _lint(code)
    assert d.fix.applicability is Applicability.UNSAFE


def test_users_own_dataloader_is_silent():
    code = """
        import torch

        class DataLoader:
            def __init__(self, ds):
                self.ds = ds

        loader = DataLoader(ds)
        model.cuda()
    """
    assert _lint(code) == []


def test_other_library_dataloader_is_silent():
    code = """
        import torch
        from torch_geometric.loader import DataLoader

        loader = DataLoader(ds)
        model.cuda()
    """
    assert _lint(code) == []


@pytest.mark.parametrize(
    "imports, call",
    [
        ("from torch.utils.data import DataLoader as DL", "DL(ds)"),
        ("from torch.utils import data", "data.DataLoader(ds)"),
        ("import torch.utils.data as tud", "tud.DataLoader(ds)"),
        ("from torch.utils.data.dataloader import DataLoader", "DataLoader(ds)"),
        ("import torch as T", "T.utils.data.DataLoader(ds)"),
    ],
)
def test_import_aliases(imports, call):
    code = f"import torch\n{imports}\nloader = {call}\nmodel.cuda()\n"
    assert codes(_lint(code)) == ["TL202"]


def test_import_inside_function():
    code = """
        import torch

        def make(ds):
            from torch.utils.data import DataLoader as Loader
            return Loader(ds, batch_size=4)

        def other(ds):
            return Loader(ds)

        model.to("cuda")
    """
    diagnostics = _lint(code)
    assert [(d.line, d.column) for d in diagnostics] == [(6, 12)]


def test_fix_adds_or_sets_pin_memory():
    code = textwrap.dedent(
        """\
        import torch
        from torch.utils.data import DataLoader
        a = DataLoader(ds, batch_size=8)
        b = DataLoader(ds, pin_memory=False)
        c = DataLoader(ds, 8, True, None, None, 2, None, False)
        d = DataLoader(ds)
        model.cuda()
        """
    )
    safe = _fixed(code)
    assert safe == code.replace(
        "a = DataLoader(ds, batch_size=8)", "a = DataLoader(ds, batch_size=8, pin_memory=True)"
    ).replace("d = DataLoader(ds)", "d = DataLoader(ds, pin_memory=True)")
    unsafe = _fixed(code, unsafe=True)
    assert "b = DataLoader(ds, pin_memory=True)" in unsafe
    assert "c = DataLoader(ds, 8, True, None, None, 2, None, True)" in unsafe
    assert "False" not in unsafe


def test_fix_keeps_comments_and_layout():
    code = textwrap.dedent(
        """\
        import torch
        loader = torch.utils.data.DataLoader(
            ds,  # training split
            batch_size=8,  # per device
            # more options later
        )
        other = torch.utils.data.DataLoader(ds,
                                            batch_size=8  # per device
                                            )
        model.cuda()
        """
    )
    assert _fixed(code) == textwrap.dedent(
        """\
        import torch
        loader = torch.utils.data.DataLoader(
            ds,  # training split
            batch_size=8,  # per device
            pin_memory=True,
            # more options later
        )
        other = torch.utils.data.DataLoader(ds,
                                            batch_size=8,  # per device
                                            pin_memory=True
                                            )
        model.cuda()
        """
    )


def test_single_argument_multiline_call():
    code = "import torch\nloader = torch.utils.data.DataLoader(\n    ds,\n)\nmodel.cuda()\n"
    assert _fixed(code) == (
        "import torch\nloader = torch.utils.data.DataLoader(\n    ds,\n    pin_memory=True,\n)\nmodel.cuda()\n"
    )


@pytest.mark.parametrize("path", ["tests/test_train.py", "test_loader.py", "pkg/loader_test.py", "conftest.py"])
def test_test_files_are_skipped(path):
    code = "import torch\nloader = torch.utils.data.DataLoader(ds, batch_size=4)\nmodel.cuda()\n"
    assert _lint(code, path=path) == []
    assert codes(_lint(code, path="pkg/train.py")) == ["TL202"]


@pytest.mark.parametrize(
    "collate",
    [
        "partial(collate, device=device)",
        "functools.partial(collate, pad_id=0, device=args.device)",
        "lambda b: collate(b, device)",
        "lambda b: collate(b, self.device)",
        "to_device_collate",
        "lambda b: to_device_collate(b)",
        "partial(to_device_collate, pad_id=0)",
        "on_device",
    ],
)
def test_collate_fn_that_takes_a_device_is_silent(collate):
    code = f"""
        import functools
        from functools import partial
        import torch

        def to_device_collate(batch, pad_id=0, device="cpu"):
            return torch.stack(batch).to(device)

        def build(ds, device, args):
            on_device = partial(collate, device=device)
            return torch.utils.data.DataLoader(ds, batch_size=8, collate_fn={collate})
    """
    assert _lint(code) == []


@pytest.mark.parametrize("collate", ["collate", "partial(collate, pad_id=0)", "lambda b: collate(b, tokenizer)"])
def test_collate_fn_on_the_host_is_still_reported(collate):
    code = f"""
        from functools import partial
        import torch

        def collate(batch, pad_id=0):
            return torch.stack(batch)

        loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn={collate})
        model.cuda()
    """
    assert codes(_lint(code)) == ["TL202"]


def test_dataset_whose_items_hold_no_data_is_silent():
    code = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class PromptDataset(Dataset):
            def __init__(self, prompt, n):
                self.prompt, self.n = prompt, n

            def __len__(self):
                return self.n

            def __getitem__(self, index):
                return {"prompt": self.prompt, "index": index}

        class Pairs(Dataset):
            def __getitem__(self, i):
                return self.prompt, i

        prompts = PromptDataset("a photo of a dog", 100)
        loaders = [
            DataLoader(prompts, batch_size=4),
            DataLoader(Pairs(), batch_size=4),
            DataLoader(range(100), batch_size=4),
            DataLoader(list(range(100)), batch_size=4),
        ]
        pipe.to("cuda")
    """
    assert _lint(code) == []


def test_dataset_that_indexes_its_data_is_still_reported():
    code = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Tokens(Dataset):
            def __getitem__(self, index):
                return {"input_ids": self.ids[index], "index": index}

        class Images(Dataset):
            def __getitem__(self, index):
                image = load(self.paths[index])
                return image, index

        def range(n):
            return torch.arange(n).float()

        loaders = [
            DataLoader(Tokens(), batch_size=4),
            DataLoader(Images(), batch_size=4),
            DataLoader(range(100), batch_size=4),
        ]
        model.cuda()
    """
    assert codes(_lint(code)) == ["TL202"] * 3


def test_tpu_programs_are_silent():
    code = """
        import torch
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
        loader = torch.utils.data.DataLoader(ds, batch_size=8)
        model.to(device)
    """
    assert _lint(code) == []
