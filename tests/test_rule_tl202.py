"""Unit tests for TL202 (dataloader-pin-memory)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability


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
    code = f"import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=8)\n{evidence}\n"
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
    code = f"import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=8)\n{other}\n"
    assert _lint(code) == []


def test_evidence_before_or_after_the_loader_and_in_other_functions():
    code = """
        import torch
        from torch.utils.data import DataLoader

        def step(model, x):
            return model(x.cuda())

        def loaders(n):
            ds = torch.utils.data.TensorDataset(torch.randn(n, 3))
            return DataLoader(ds, num_workers=2), DataLoader(ds, num_workers=2, pin_memory=False)
    """
    diagnostics = _lint(code)
    assert [(d.line, d.column) for d in diagnostics] == [(10, 12), (10, 43)]
    assert [d.fix.applicability for d in diagnostics] == [Applicability.SAFE, Applicability.UNSAFE]
    assert "pin_memory=True" in diagnostics[0].message


@pytest.mark.parametrize(
    "call",
    [
        "DataLoader(ds, **kwargs)",
        "DataLoader(*args)",
        "DataLoader(ds, num_workers=2, pin_memory=True)",
        "DataLoader(ds, num_workers=2, pin_memory=cfg.pin_memory)",
        "DataLoader(ds, num_workers=2, pin_memory=use_cuda)",
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

        loader = DataLoader(ds, num_workers=2)
        model.cuda()
    """
    assert _lint(code) == []


def test_other_library_dataloader_is_silent():
    code = """
        import torch
        from torch_geometric.loader import DataLoader

        loader = DataLoader(ds, num_workers=2)
        model.cuda()
    """
    assert _lint(code) == []


@pytest.mark.parametrize(
    "imports, call",
    [
        ("from torch.utils.data import DataLoader as DL", "DL(ds, num_workers=2)"),
        ("from torch.utils import data", "data.DataLoader(ds, num_workers=2)"),
        ("import torch.utils.data as tud", "tud.DataLoader(ds, num_workers=2)"),
        ("from torch.utils.data.dataloader import DataLoader", "DataLoader(ds, num_workers=2)"),
        ("import torch as T", "T.utils.data.DataLoader(ds, num_workers=2)"),
    ],
)
def test_import_aliases(imports, call):
    code = f"import torch\n{imports}\nloader = {call}\nmodel.cuda()\n"
    assert codes(_lint(code)) == ["TL202"]


@pytest.mark.parametrize("workers", ["", ", num_workers=0", ", 8, True, None, None, 0"])
def test_loader_without_workers_is_left_to_tl203(workers):
    """Loading in the main process: pinning would run in the same thread,
    before the copy it is meant to speed up (TL203 reports the loader)."""
    code = f"import torch\nloader = torch.utils.data.DataLoader(ds{workers})\nmodel.cuda()\n"
    assert _lint(code) == []
    assert codes(_lint(code.replace(workers, ", num_workers=4") if workers else code.replace("(ds)", "(ds, num_workers=4)"))) == ["TL202"]


def test_import_inside_function():
    code = """
        import torch

        def make(ds):
            from torch.utils.data import DataLoader as Loader
            return Loader(ds, batch_size=4, num_workers=2)

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
        ds = torch.utils.data.TensorDataset(torch.zeros(8, 3))
        a = DataLoader(ds, num_workers=2, batch_size=8)
        b = DataLoader(ds, num_workers=2, pin_memory=False)
        c = DataLoader(ds, 8, True, None, None, 2, None, False)
        d = DataLoader(ds, num_workers=2)
        model.cuda()
        """
    )
    safe = _fixed(code)
    assert safe == code.replace(
        "a = DataLoader(ds, num_workers=2, batch_size=8)", "a = DataLoader(ds, num_workers=2, batch_size=8, pin_memory=True)"
    ).replace("d = DataLoader(ds, num_workers=2)", "d = DataLoader(ds, num_workers=2, pin_memory=True)")
    unsafe = _fixed(code, unsafe=True)
    assert "b = DataLoader(ds, num_workers=2, pin_memory=True)" in unsafe
    assert "c = DataLoader(ds, 8, True, None, None, 2, None, True)" in unsafe
    assert "False" not in unsafe


def test_fix_keeps_comments_and_layout():
    code = textwrap.dedent(
        """\
        import torch
        ds = torch.utils.data.TensorDataset(torch.zeros(8, 3))
        loader = torch.utils.data.DataLoader(
            ds,  # training split
            batch_size=8,  # per device
            num_workers=4,
            # more options later
        )
        other = torch.utils.data.DataLoader(ds,
                                            num_workers=4,
                                            batch_size=8  # per device
                                            )
        model.cuda()
        """
    )
    assert _fixed(code) == textwrap.dedent(
        """\
        import torch
        ds = torch.utils.data.TensorDataset(torch.zeros(8, 3))
        loader = torch.utils.data.DataLoader(
            ds,  # training split
            batch_size=8,  # per device
            num_workers=4,
            pin_memory=True,
            # more options later
        )
        other = torch.utils.data.DataLoader(ds,
                                            num_workers=4,
                                            batch_size=8,  # per device
                                            pin_memory=True
                                            )
        model.cuda()
        """
    )


def test_multiline_call_with_a_trailing_comma():
    code = "import torch\nloader = torch.utils.data.DataLoader(\n    ds,\n    num_workers=2,\n)\nmodel.cuda()\n"
    assert _fixed(code) == code  # `ds` is unknown: the fix is unsafe
    assert _fixed(code, unsafe=True) == (
        "import torch\nloader = torch.utils.data.DataLoader(\n    ds,\n    num_workers=2,\n    pin_memory=True,\n)\n"
        "model.cuda()\n"
    )


@pytest.mark.parametrize("path", ["tests/test_train.py", "test_loader.py", "pkg/loader_test.py", "conftest.py"])
def test_test_files_are_skipped(path):
    code = "import torch\nloader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=4)\nmodel.cuda()\n"
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

        loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn={collate})
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
            DataLoader(prompts, num_workers=2, batch_size=4),
            DataLoader(Pairs(), num_workers=2, batch_size=4),
            DataLoader(range(100), num_workers=2, batch_size=4),
            DataLoader(list(range(100)), num_workers=2, batch_size=4),
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
            DataLoader(Tokens(), num_workers=2, batch_size=4),
            DataLoader(Images(), num_workers=2, batch_size=4),
            DataLoader(range(100), num_workers=2, batch_size=4),
        ]
        model.cuda()
    """
    assert codes(_lint(code)) == ["TL202"] * 3


def test_tpu_programs_are_silent():
    code = """
        import torch
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
        loader = torch.utils.data.DataLoader(ds, num_workers=2, batch_size=8)
        model.to(device)
    """
    assert _lint(code) == []


# -- datasets that yield device tensors, and which fixes are safe ---------------------
#
# `pin_memory=True` calls `Tensor.pin_memory()` on every tensor of every batch
# (torch/utils/data/_utils/pin_memory.py), which raises "cannot pin
# 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned" for a tensor on
# a device: the rule must stay silent there, and its fix may be safe only where
# the dataset is known to yield host tensors.


def _one(code: str):
    diagnostics = _lint(code)
    assert codes(diagnostics) == ["TL202"], diagnostics
    return diagnostics[0].fix.applicability


DEVICE_DATASETS = {
    "iterable dataset yielding x.to(device)": """
        class Rollouts(IterableDataset):
            def __init__(self, buffer, device):
                self.buffer, self.device = buffer, device

            def __iter__(self):
                for obs, act in self.buffer:
                    yield obs.to(self.device), act.to(self.device)

        def make(buffer, device):
            return DataLoader(Rollouts(buffer, device), num_workers=2, batch_size=64)
    """,
    "getitem moving to self.device": """
        class Samples(Dataset):
            def __init__(self, x, device):
                self.x, self.device = x, device

            def __getitem__(self, i):
                return self.x[i].to(self.device)

        loader = DataLoader(Samples(torch.randn(10, 3), "cuda"), num_workers=2, batch_size=4)
    """,
    "getitem calling .cuda()": """
        class Samples(Dataset):
            def __getitem__(self, i):
                return torch.tensor([i]).float().cuda()

        loader = DataLoader(Samples(), num_workers=2, batch_size=4)
    """,
    "getitem creating tensors with device=": """
        class Noise(Dataset):
            def __init__(self, device):
                self.device = device

            def __getitem__(self, i):
                return torch.randn(3, device=self.device)

        loader = DataLoader(Noise(device), num_workers=2, batch_size=4)
    """,
    "data moved to the GPU in __init__": """
        class OnGpu(Dataset):
            def __init__(self, x):
                self.x = x.cuda()

            def __getitem__(self, i):
                return self.x[i]

        loader = DataLoader(OnGpu(torch.randn(10, 3)), num_workers=2, batch_size=4)
    """,
    "a helper method that moves": """
        class Samples(Dataset):
            def load(self, i):
                return torch.load(self.paths[i]).to(device)

            def __getitem__(self, i):
                return self.load(i)

        loader = DataLoader(Samples(), num_workers=2, batch_size=4)
    """,
    "subclass of a dataset class that moves": """
        class Base(Dataset):
            def __getitem__(self, i):
                return self.x[i].cuda()

        class Child(Base):
            pass

        loader = DataLoader(Child(), num_workers=2, batch_size=4)
    """,
    "TensorDataset of moved tensors": """
        x = torch.randn(100, 3).to(device)
        loader = DataLoader(TensorDataset(x, torch.zeros(100).cuda()), num_workers=2, batch_size=4)
    """,
    "TensorDataset of tensors created on the device": """
        loader = DataLoader(TensorDataset(torch.randn(100, 3, device="cuda")), num_workers=2, batch_size=4)
    """,
    "a random_split of such a dataset": """
        full = TensorDataset(torch.randn(100, 3).cuda())
        train, val = random_split(full, [80, 20])
        loader = DataLoader(Subset(full, range(10)), num_workers=2, batch_size=4)
    """,
    "iterable dataset delegating to a generator given the device": """
        def rollout(env, device):
            for obs in env:
                yield torch.as_tensor(obs, device=device)

        class Buffer(IterableDataset):
            def __init__(self, env, device):
                self.env, self.device = env, device

            def __iter__(self):
                return rollout(self.env, self.device)

        loader = DataLoader(Buffer(env, device), num_workers=2, batch_size=64)
    """,
    "iterable dataset yielding from a generator of this file that moves": """
        def frames(paths):
            for path in paths:
                yield load(path).cuda()

        class Clips(IterableDataset):
            def __iter__(self):
                yield from frames(self.paths)

        loader = DataLoader(Clips(), num_workers=2, batch_size=4)
    """,
    "a dataset built by a function of this file that moves": """
        def make_dataset(x):
            return TensorDataset(x.cuda())

        loader = DataLoader(make_dataset(features), num_workers=2, batch_size=4)
    """,
    "a collate function that moves the batch in a helper": """
        def to_gpu(t):
            return t.cuda(non_blocking=True)

        def collate(samples):
            return [to_gpu(s) for s in samples]

        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, collate_fn=collate)
    """,
    "a collate function that moves the batch": """
        def collate(samples):
            return torch.stack(samples).to(device)

        loader = DataLoader(TensorDataset(torch.randn(100, 3)), num_workers=2, batch_size=4, collate_fn=collate)
    """,
    "a lambda collate that moves the batch": """
        loader = DataLoader(ds, num_workers=2, batch_size=4, collate_fn=lambda b: torch.stack(b).cuda())
    """,
    "a torchvision dataset whose transform moves to the GPU": """
        to_gpu = transforms.Lambda(lambda x: x.cuda())
        loader = DataLoader(datasets.MNIST("data", transform=to_gpu), num_workers=2, batch_size=4)
    """,
}

_PRELUDE = """
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, Subset, random_split
    from torchvision import datasets, transforms
"""


@pytest.mark.parametrize("body", DEVICE_DATASETS.values(), ids=DEVICE_DATASETS.keys())
def test_dataset_that_yields_device_tensors_is_silent(body):
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body) + "model.cuda()\n"
    assert _lint(code) == []


SAFE_DATASETS = {
    "getitem on the host": """
        class Shapes(Dataset):
            def __getitem__(self, i):
                image = torch.zeros(3, 8, 8)
                image[:, i % 8] = 1.0
                return image, i % 10

        loader = DataLoader(Shapes(), num_workers=2, batch_size=4)
    """,
    "getitem that casts with .to(dtype) and .to('cpu')": """
        class Samples(Dataset):
            def __getitem__(self, i):
                return torch.arange(4).to(torch.float32), torch.ones(2).to("cpu")

        loader = DataLoader(Samples(), num_workers=2, batch_size=4)
    """,
    "a dataset that only reports its device": """
        class Samples(Dataset):
            def __init__(self):
                print("device", device)
                logger.info("device %s", device)

            def __getitem__(self, i):
                return torch.full((3,), i)

        loader = DataLoader(Samples(), num_workers=2, batch_size=4)
    """,
    "iterable dataset yielding host tensors": """
        class Stream(IterableDataset):
            def __iter__(self):
                for i in range(100):
                    yield torch.full((3,), i)

        loader = DataLoader(Stream(), num_workers=2, batch_size=4)
    """,
    "torchvision dataset": """
        tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
        loader = DataLoader(datasets.CIFAR10(args.data, train=True, download=True, transform=tf), num_workers=2, batch_size=4)
    """,
    "TensorDataset of host tensors": """
        x = torch.randn(100, 3)
        y = torch.from_numpy(labels).long()
        loader = DataLoader(TensorDataset(x, y), num_workers=2, batch_size=4)
    """,
    "random_split of a host dataset": """
        full = TensorDataset(torch.randn(100, 3))
        train, val = random_split(full, [80, 20])
        loader = DataLoader(Subset(full, range(10)), num_workers=2, batch_size=4)
    """,
    "a collate function of this file returning tensors": """
        def collate(samples):
            xs, ys = zip(*samples)
            return torch.stack(xs), torch.tensor(ys)

        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, collate_fn=collate)
    """,
}


@pytest.mark.parametrize("body", SAFE_DATASETS.values(), ids=SAFE_DATASETS.keys())
def test_dataset_known_to_yield_host_tensors_gets_a_safe_fix(body):
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body) + "model.cuda()\n"
    assert _one(code) is Applicability.SAFE


UNSAFE_DATASETS = {
    "a function parameter": """
        def make(dataset):
            return DataLoader(dataset, num_workers=2, batch_size=4)
    """,
    "an imported class": """
        from mypkg.data import Replay
        loader = DataLoader(Replay(capacity=1000), num_workers=2, batch_size=4)
    """,
    "an attribute": """
        class Trainer:
            def loader(self):
                return DataLoader(self.train_set, num_workers=2, batch_size=4)
    """,
    "a TensorDataset of unknown tensors": """
        def make(x, y):
            return DataLoader(TensorDataset(x, y), num_workers=2, batch_size=4)
    """,
    "a dataset class of this file given unknown tensors": """
        class Pairs(Dataset):
            def __init__(self, x):
                self.x = x

            def __getitem__(self, i):
                return self.x[i]

        def make(x):
            return DataLoader(Pairs(x), num_workers=2, batch_size=4)
    """,
    "a dataset class with a base from elsewhere": """
        from mypkg.data import BaseDataset

        class Mine(BaseDataset):
            def __getitem__(self, i):
                return torch.zeros(3)

        loader = DataLoader(Mine(), num_workers=2, batch_size=4)
    """,
    "a torchvision dataset with a transform from a parameter": """
        def make(tf):
            return DataLoader(datasets.MNIST("data", transform=tf), num_workers=2, batch_size=4)
    """,
    "a collate function imported from elsewhere": """
        from mypkg.data import collate
        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, collate_fn=collate)
    """,
    "a collate function returning a batch object": """
        class Batch:
            def __init__(self, x):
                self.x = x

            def pin_memory(self):
                self.x = self.x.pin_memory()
                return self

        def collate(samples):
            return Batch(torch.stack(samples))

        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, collate_fn=collate)
    """,
    "a custom pin_memory_device": """
        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, pin_memory_device="cuda:1")
    """,
    "a torch.load without map_location": """
        loader = DataLoader(TensorDataset(torch.load("x.pt")), num_workers=2, batch_size=4)
    """,
    "factories under a changed default device": """
        torch.set_default_device("cuda")
        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4)
    """,
}


# A TensorDataset holds tensors the program already computed, wherever it chose
# to put them (features extracted on the GPU under a `--features-device`
# option): TL202 is silent unless they are visibly on the host (issue #13).
IN_MEMORY_UNKNOWN = ("a TensorDataset of unknown tensors", "a torch.load without map_location",
                     "factories under a changed default device")


@pytest.mark.parametrize(
    "body", [v for k, v in UNSAFE_DATASETS.items() if k not in IN_MEMORY_UNKNOWN],
    ids=[k for k in UNSAFE_DATASETS if k not in IN_MEMORY_UNKNOWN],
)
def test_dataset_that_may_yield_device_tensors_gets_an_unsafe_fix(body):
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body) + "model.cuda()\n"
    assert _one(code) is Applicability.UNSAFE


@pytest.mark.parametrize("name", IN_MEMORY_UNKNOWN)
def test_tensors_in_memory_of_unknown_device_are_not_reported(name):
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(UNSAFE_DATASETS[name]) + "model.cuda()\n"
    assert _lint(code) == []
    # The same loader over tensors visibly made on the host is reported, with the safe fix.
    host = textwrap.dedent(_PRELUDE) + "loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4)\nmodel.cuda()\n"
    assert _one(host) is Applicability.SAFE


def test_only_the_safe_fix_is_applied_by_default():
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(
        """
        def make(dataset, n):
            known = DataLoader(TensorDataset(torch.randn(n, 3)), num_workers=2, batch_size=4)
            unknown = DataLoader(dataset, num_workers=2, batch_size=4)
            return known, unknown

        model.cuda()
        """
    )
    safe = _fixed(code)
    assert "known = DataLoader(TensorDataset(torch.randn(n, 3)), num_workers=2, batch_size=4, pin_memory=True)" in safe
    assert "unknown = DataLoader(dataset, num_workers=2, batch_size=4)\n" in safe
    assert "unknown = DataLoader(dataset, num_workers=2, batch_size=4, pin_memory=True)" in _fixed(code, unsafe=True)


def test_a_batch_object_that_pinning_leaves_alone_is_not_reported():
    # pinning calls a batch object's `pin_memory()`, or leaves it as it is: a
    # class without one stays pageable whatever the flag says (DETR's NestedTensor)
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(
        """
        class Batch:
            def __init__(self, x):
                self.x = x

        def collate(samples):
            return Batch(torch.stack(samples))

        loader = DataLoader(TensorDataset(torch.randn(10, 3)), num_workers=2, batch_size=4, collate_fn=collate)
        """
    ) + "model.cuda()\n"
    assert _lint(code) == []
