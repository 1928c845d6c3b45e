"""Loaders built in one module and iterated in another (TL202, TL204): the
project index (torchlint/project.py) asks the callers of a function that
returns a `DataLoader` whether they copy its batches to a device."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.test_cli import run

DATA = """\
from torch.utils.data import DataLoader


def build_loader(ds, batch_size):
    return DataLoader(ds, batch_size=batch_size, num_workers=4)


def build_pinned(ds):
    loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)
    return loader


def build_unknown(ds, args):
    return DataLoader(ds, num_workers=4, pin_memory=args.pin)
"""

TRAIN = """\
import torch
from data import build_loader


def train(model, ds, device):
    loader = build_loader(ds, 64)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        model(x).sum().backward()
"""

TRAIN_PINNED = """\
import torch
from data import build_pinned


def train(model, ds, device):
    for step, (x, y) in enumerate(build_pinned(ds)):
        x = x.to(device)
        y = y.to(device, non_blocking=True)
        model(x).sum().backward()
"""


def _lines(runner, *args):
    result = run(runner, "check", "--select", "TL202,TL204", "--output-format", "concise", *args)
    return [line for line in result.stdout.splitlines() if ": TL" in line]


def _codes(runner, *args):
    return [line.split(" ")[0] + " " + line.split(" ")[1] for line in _lines(runner, *args)]


def test_a_loader_whose_caller_copies_its_batches(runner, workdir):
    """TL202 reports the DataLoader in data.py, and names the caller."""
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    (line,) = _lines(runner, ".")
    assert line.startswith("data.py:5:12: TL202")
    assert "`build_loader` returns it to train.py:6, which copies its batches" in line


@pytest.mark.parametrize(
    "copy",
    [
        "x.cuda()",
        "x.to('cuda:0')",
        "x.to(self_device)",
        "x.to(device, non_blocking=True)",  # the copy cannot overlap without pinned memory
        "{k: v.to(device) for k, v in x.items()}",
    ],
)
def test_copies_that_count(runner, workdir, copy):
    (workdir / "data.py").write_text(DATA)
    train = TRAIN.replace("x, y = x.to(device), y.to(device)", f"z = {copy}")
    if "self_device" in copy:
        train = train.replace("self_device", "args.device")
    (workdir / "train.py").write_text(train)
    assert _codes(runner, ".") == ["data.py:5:12: TL202"]


@pytest.mark.parametrize(
    "body",
    [
        "model(x).sum().backward()",  # never copies
        "x = x.to(torch.float16)",  # a cast
        "x = x.to('cpu')",
        "x = x.to('mps')",
        "y = model.to(device)",  # copies something, not the batches
    ],
)
def test_a_caller_that_does_not_copy_the_batches(runner, workdir, body):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN.replace("x, y = x.to(device), y.to(device)", body))
    assert _codes(runner, ".") == []


def test_a_loader_pinned_in_the_other_module(runner, workdir):
    """TL202 is silent; TL204 reports the copy without non_blocking in train.py."""
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN_PINNED)
    (line,) = _lines(runner, ".")
    assert line.startswith("train.py:7:13: TL204")
    assert "(built in data.py)" in line


def test_a_pinned_loader_copied_with_non_blocking(runner, workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN_PINNED.replace("x.to(device)", "x.to(device, non_blocking=True)"))
    assert _codes(runner, ".") == []


@pytest.mark.parametrize("factory", ["build_loader", "build_unknown"])
def test_tl204_needs_a_loader_known_to_be_pinned(runner, workdir, factory):
    """Not pinned (TL202's finding instead), or unknown (silent)."""
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN_PINNED.replace("build_pinned", factory))
    found = _codes(runner, ".")
    assert not [code for code in found if "TL204" in code]
    assert found == (["data.py:5:12: TL202"] if factory == "build_loader" else [])


def test_a_loader_kept_in_an_attribute_of_a_trainer(runner, workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "trainer.py").write_text(
        "import torch\nimport data\n\n\nclass Trainer:\n"
        "    def __init__(self, ds):\n        self.loader = data.build_pinned(ds)\n\n"
        "    def fit(self, model):\n        for x, y in self.loader:\n"
        "            x = x.cuda()\n            model(x).sum().backward()\n"
    )
    assert _codes(runner, ".") == ["trainer.py:11:17: TL204"]


def test_relative_imports_in_a_package(runner, workdir):
    (workdir / "pkg").mkdir()
    (workdir / "pkg" / "__init__.py").write_text("")
    (workdir / "pkg" / "data.py").write_text(DATA)
    (workdir / "pkg" / "train.py").write_text(TRAIN.replace("from data import", "from .data import"))
    assert _codes(runner, ".") == ["pkg/data.py:5:12: TL202"]


def test_a_same_named_function_of_an_unrelated_module(runner, workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "other.py").write_text(
        "from torch.utils.data import DataLoader\n\n\ndef build_loader(ds, n):\n"
        "    return DataLoader(ds, batch_size=n, num_workers=2, pin_memory=True)\n"
    )
    (workdir / "train.py").write_text(TRAIN.replace("from data import", "from other import"))
    # train.py copies the batches of other.py's pinned loader: data.py's is not copied
    assert _codes(runner, ".") == ["train.py:8:16: TL204", "train.py:8:30: TL204"]


def test_pre_commit_passes_one_of_the_two_files(runner, workdir):
    """Only the files of the run are indexed: each file alone keeps its
    single-module answer (silent)."""
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "train_pinned.py").write_text(TRAIN_PINNED)
    for path in ("data.py", "train.py", "train_pinned.py"):
        assert _codes(runner, path) == []
    assert _codes(runner, "data.py", "train.py") == ["data.py:5:12: TL202"]


def test_the_cache_and_the_workers_follow_the_callers(runner, workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "train_pinned.py").write_text(TRAIN_PINNED)
    expected = ["data.py:5:12: TL202", "train_pinned.py:7:13: TL204"]
    assert _codes(runner, ".") == expected
    assert _codes(runner, ".") == expected  # from the cache
    assert _codes(runner, "-j", "2", "--no-cache", ".") == expected
    (workdir / "train.py").write_text(TRAIN.replace("x, y = x.to(device), y.to(device)", "pass"))
    (workdir / "train_pinned.py").write_text(TRAIN_PINNED.replace("x.to(device)", "x.to(device, non_blocking=True)"))
    assert _codes(runner, ".") == []


def test_fix_adds_pin_memory_where_check_reports_it(runner, workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    run(runner, "check", "--select", "TL202", "--fix", "--unsafe-fixes", ".")
    assert "batch_size=batch_size, num_workers=4, pin_memory=True)" in (workdir / "data.py").read_text()


def test_the_main_process_does_not_import_libcst(workdir):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    for i in range(40):
        (workdir / f"filler{i}.py").write_text(f"import torch\nx{i} = torch.zeros(2)\n")
    code = (
        "import sys\nfrom torchlint.cli import main\n"
        "try:\n    main(['check', '--no-cache', '-j', '2', '--select', 'TL202', '--output-format', 'concise', '.'])\n"
        "except SystemExit:\n    pass\n"
        "print('libcst' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, timeout=120)
    assert "data.py:5:12: TL202" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "False"
