"""Unit tests for TL203 (dataloader-num-workers)."""

from __future__ import annotations

import pytest

from tests.helpers import codes, fix, lint

HEADER = (
    "import torch\n"
    "from torch.utils.data import DataLoader, TensorDataset, Subset, random_split\n"
    "from torchvision.datasets import ImageFolder\n"
)


def _lint(code: str, path: str = "train.py"):
    return lint(code, select=["TL203"], path=path)


def _positions(code: str, path: str = "train.py"):
    return [(d.line, d.column) for d in _lint(code, path)]


@pytest.mark.parametrize(
    "call, explicit",
    [
        ("DataLoader(train_set, batch_size=8)", False),
        ("DataLoader(train_set, batch_size=8, num_workers=0)", True),
        ("DataLoader(train_set, 8, True, None, None, 0)", True),
        ("DataLoader(dataset=train_set, shuffle=True)", False),
        ("DataLoader(train_set, 8, True, None, None, 0, *rest)", True),
    ],
)
def test_absent_or_zero_is_reported(call, explicit):
    code = HEADER + f"train_set = ImageFolder('data', transform=tf)\nloader = {call}\n"
    (d,) = _lint(code)
    assert (d.line, d.column) == (5, 10)
    assert d.fix is None
    assert "os.cpu_count() // num_gpus" in d.message and "measure" in d.message
    assert ("`DataLoader(num_workers=0)`" in d.message) is explicit


@pytest.mark.parametrize(
    "call",
    [
        "DataLoader(train_set, num_workers=4)",
        "DataLoader(train_set, num_workers=args.workers)",
        "DataLoader(train_set, num_workers=os.cpu_count() // 2)",
        "DataLoader(train_set, num_workers=0 if debug else 8)",
        "DataLoader(train_set, 8, True, None, None, 2)",
        "DataLoader(train_set, **loader_kwargs)",
        "DataLoader(*loader_args)",
        "DataLoader(train_set, 8, *rest)",
    ],
)
def test_workers_set_or_unknown_is_silent(call):
    code = HEADER + f"train_set = ImageFolder('data', transform=tf)\nloader = {call}\n"
    assert _lint(code) == []


@pytest.mark.parametrize(
    "dataset",
    [
        "ImageFolder('data/train', transform=tf)",
        "torchvision.datasets.CIFAR10('data', train=True)",
        "datasets.MNIST('data', download=True)",
        "torchaudio.datasets.SPEECHCOMMANDS('data')",
        "MyImages(paths, transform=augment)",
        "MyImages(paths, target_transform=encode)",
        "random_split(ImageFolder('data', transform=tf), [0.9, 0.1])[0]",
    ],
)
def test_datasets_that_work_per_item(dataset):
    code = (
        "import torch, torchvision, torchaudio\nfrom torchvision import datasets\n"
        "from torch.utils.data import DataLoader, random_split\nfrom torchvision.datasets import ImageFolder\n"
        f"loader = DataLoader({dataset}, batch_size=32)\n"
    )
    # a subscript of random_split is not followed: only the first six are visible
    expected = [] if dataset.startswith("random_split") else ["TL203"]
    assert codes(_lint(code)) == expected


@pytest.mark.parametrize(
    "dataset",
    [
        "dataset",  # a parameter: the caller decides
        "MyImages(paths)",  # imported from elsewhere, no transform
        "MyImages(paths, transform=None)",
        "TensorDataset(x, y)",
        "load_dataset('imdb')['train']",
        "train_iter",
        "valid_iterator",
    ],
)
def test_datasets_the_rule_cannot_show_are_slow(dataset):
    code = HEADER + f"def make(dataset, paths, x, y, train_iter, valid_iterator):\n    return DataLoader({dataset}, batch_size=32)\n"
    assert _lint(code) == []


def test_names_and_splits_are_followed():
    code = HEADER + """
def loaders(root):
    full = ImageFolder(root, transform=tf)
    train_part, val_part = random_split(full, [0.9, 0.1])
    head = Subset(full, range(100))
    a = DataLoader(train_part, batch_size=8)
    b = DataLoader(head, batch_size=8)
    c = DataLoader(full, batch_size=8)
    return a, b, c
"""
    assert _positions(code) == [(9, 9), (10, 9), (11, 9)]


def test_module_level_name_and_parameter_shadowing():
    code = HEADER + """
train_set = ImageFolder("data", transform=tf)
loader = DataLoader(train_set, batch_size=8)

def make(train_set):
    return DataLoader(train_set, batch_size=8)

def uses_global():
    return DataLoader(train_set, batch_size=8)
"""
    assert _positions(code) == [(6, 10), (12, 12)]


def test_name_bound_to_different_datasets_is_silent():
    code = HEADER + """
def make(fast):
    if fast:
        ds = TensorDataset(x, y)
    else:
        ds = ImageFolder("data", transform=tf)
    return DataLoader(ds, batch_size=8)
"""
    assert _lint(code) == []


def test_self_attributes_in_the_same_class():
    code = HEADER + """
class Module:
    def setup(self):
        self.train_set, self.val_set = random_split(ImageFolder("data", transform=tf), [0.9, 0.1])
        self.tensors = TensorDataset(x, y)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=8)

    def small_dataloader(self):
        return DataLoader(self.tensors, batch_size=8)

class Other:
    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)
"""
    assert _positions(code) == [(11, 16), (14, 16)]


def test_classes_of_this_module():
    code = HEADER + """
class Pairs(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, i):
        \"\"\"Index the tensors held in memory.\"\"\"
        start = i * self.block
        return torch.tensor(self.x[start:start + self.block]), self.y[i].long()

class Frames(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return decode(self.paths[i])

class Tokens(torch.utils.data.Dataset):
    def __getitem__(self, i):
        ids = self.tokenizer.encode(self.texts[i])
        return ids

class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield from read_shards(self.urls)

a = DataLoader(Pairs(x, y), batch_size=8)
b = DataLoader(Frames(paths), batch_size=8)
c = DataLoader(Tokens(texts), batch_size=8, num_workers=0)
d = DataLoader(Stream(urls), batch_size=8)
"""
    assert _positions(code) == [(28, 5), (29, 5)]


def test_items_gathered_in_a_local_dict():
    code = HEADER + """
class Prompts(torch.utils.data.Dataset):
    def __getitem__(self, index):
        example = {}
        example["prompt"] = self.prompt
        example["index"] = index
        return example

class Captions(torch.utils.data.Dataset):
    def __getitem__(self, index):
        example = {}
        example["image"] = Image.open(self.paths[index])
        return example

class Stored(torch.utils.data.Dataset):
    def __getitem__(self, index):
        self.cache[index] = self.load(index)
        return self.cache[index]

a = DataLoader(Prompts(), batch_size=4)
b = DataLoader(Captions(), batch_size=4)
c = DataLoader(Stored(), batch_size=4)
"""
    assert [line for line, _ in _positions(code)] == [24, 25]


def test_collate_fn_that_builds_batches_on_the_device():
    code = HEADER + """
from functools import partial

def pad(batch, device="cpu"):
    return torch.stack(batch).to(device)

def stack(batch):
    return torch.stack(batch)

collate = partial(stack, device=device)
train_set = ImageFolder("data", transform=tf)
a = DataLoader(train_set, batch_size=8, collate_fn=pad)
b = DataLoader(train_set, batch_size=8, collate_fn=collate)
c = DataLoader(train_set, batch_size=8, collate_fn=partial(pad, device="cuda"))
d = DataLoader(train_set, batch_size=8, collate_fn=stack)
"""
    assert _positions(code) == [(18, 5)]


def test_one_batch_preview_is_silent():
    code = HEADER + """
train_set = ImageFolder("data", transform=tf)
images, labels = next(iter(DataLoader(train_set, batch_size=16)))
batches = iter(DataLoader(train_set, batch_size=16))
"""
    assert _positions(code) == [(7, 16)]


@pytest.mark.parametrize("path", ["tests/test_data.py", "test_loader.py", "loader_test.py", "conftest.py", "test/data.py"])
def test_test_files_are_skipped(path):
    code = HEADER + "loader = DataLoader(ImageFolder('data', transform=tf))\n"
    assert _lint(code, path=path) == []
    assert codes(_lint(code, path="src/data.py")) == ["TL203"]


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
    code = f"import torch\n{imports}\nfrom torchvision.datasets import ImageFolder\nds = ImageFolder('x', transform=tf)\nloader = {call}\n"
    assert codes(_lint(code)) == ["TL203"]


def test_import_inside_function_and_other_libraries():
    code = """
import torch
from torchvision.datasets import ImageFolder

def make(root):
    from torch.utils.data import DataLoader
    return DataLoader(ImageFolder(root, transform=tf))

def graphs(root):
    from torch_geometric.loader import DataLoader
    return DataLoader(ImageFolder(root, transform=tf))
"""
    assert _positions(code) == [(7, 12)]


def test_users_own_dataloader_is_silent():
    code = """
import torch
from torchvision.datasets import ImageFolder

class DataLoader:
    def __init__(self, dataset, batch_size=1):
        self.dataset = dataset

loader = DataLoader(ImageFolder("data", transform=tf))
"""
    assert _lint(code) == []


def test_file_without_dataloader_is_not_examined():
    assert _lint("import torch\nloader = make_loader(ImageFolder('x', transform=tf))\n") == []


def test_no_fix_is_offered():
    code = HEADER + "loader = DataLoader(ImageFolder('data', transform=tf))\n"
    result = fix(code, select=["TL203"], unsafe=True)
    assert result.text == code
    assert result.applied == {}


def test_datasets_that_yield_device_tensors_are_silent():
    """Worker processes cannot make CUDA tensors (with the default `fork` start
    method CUDA cannot be re-initialised in a worker), and pinning them would
    raise: TL203 asks the same question as TL202 (`rules/_loaders.py`)."""
    code = HEADER + """
class Rollouts(torch.utils.data.IterableDataset):
    def __init__(self, env, device):
        self.env, self.device = env, device

    def __iter__(self):
        for obs in self.env.rollout():
            yield decode(obs).to(self.device)

class OnGpu(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return load(self.paths[i]).cuda()

class Noise(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return augment(torch.randn(3, device=self.device))

class OnHost(torch.utils.data.Dataset):
    def __getitem__(self, i):
        return load(self.paths[i]).to("cpu")

to_gpu = transforms.Lambda(lambda x: x.cuda())
a = DataLoader(Rollouts(env, device), batch_size=8)
b = DataLoader(OnGpu(), batch_size=8)
c = DataLoader(Noise(), batch_size=8)
d = DataLoader(ImageFolder("data", transform=to_gpu), batch_size=8)
e = DataLoader(OnHost(), batch_size=8)
f = DataLoader(ImageFolder("data", transform=tf), batch_size=8)
"""
    assert [line for line, _ in _positions(code)] == [30, 31]  # e and f


def test_collate_fn_that_moves_the_batch_is_silent():
    code = HEADER + """
def to_gpu(batch):
    return torch.stack(batch).cuda()

def stack(batch):
    return torch.stack(batch)

train_set = ImageFolder("data", transform=tf)
a = DataLoader(train_set, batch_size=8, collate_fn=to_gpu)
b = DataLoader(train_set, batch_size=8, collate_fn=lambda b: torch.stack(b).to(device))
c = DataLoader(train_set, batch_size=8, collate_fn=stack)
"""
    assert _positions(code) == [(14, 5)]  # c


# -- bindings as the semantic model answers them (one answer for TL202-TL204) ----------


def test_a_dataset_name_rebound_by_a_function_declaring_it_global_is_unknown():
    """`reload()` may run before the loader is built: the name is not only
    the `ImageFolder` assigned at the top level (TL204 answers the same)."""
    code = HEADER + (
        "train_set = ImageFolder('data', transform=tf)\n"
        "def reload(x, y):\n"
        "    global train_set\n"
        "    train_set = TensorDataset(x, y)\n"
        "loader = DataLoader(train_set, batch_size=8)\n"
    )
    assert _positions(code) == []


def test_a_dataset_name_also_bound_by_a_loop_is_unknown():
    code = HEADER + (
        "def main(folders):\n"
        "    train_set = ImageFolder('data', transform=tf)\n"
        "    for train_set in folders:\n"
        "        loader = DataLoader(train_set, batch_size=8)\n"
    )
    assert _positions(code) == []


def test_a_nested_function_reads_the_enclosing_functions_dataset():
    """Python resolves `train_set` in `make()` to `main`'s local."""
    code = HEADER + (
        "def main():\n"
        "    train_set = ImageFolder('data', transform=tf)\n"
        "    def make():\n"
        "        return DataLoader(train_set, batch_size=8)\n"
        "    return make()\n"
    )
    assert _positions(code) == [(7, 16)]


def test_self_attribute_read_in_a_function_nested_in_a_method():
    code = HEADER + (
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.train_set = ImageFolder('data', transform=tf)\n"
        "    def loaders(self):\n"
        "        make = lambda: DataLoader(self.train_set, batch_size=8)\n"
        "        return make()\n"
    )
    assert _positions(code) == [(8, 24)]


def test_a_dataset_template_still_to_fill_in_loads_nothing():
    from tests.helpers import lint

    code = """
import torch


class CustomDataset(torch.utils.data.Dataset):
    def __init__(self):
        pass

    def __getitem__(self, index):
        # TODO: read one item from file and preprocess it
        pass

    def __len__(self):
        return 0


loader = torch.utils.data.DataLoader(dataset=CustomDataset(), batch_size=64, shuffle=True)
"""
    assert [d.code for d in lint(code, select=["TL203"], path="train.py")] == []
    filled = code.replace("        pass\n\n    def __len__", "        return load_image(self.paths[index])\n\n    def __len__")
    assert [d.code for d in lint(filled, select=["TL203"], path="train.py")] == ["TL203"]
