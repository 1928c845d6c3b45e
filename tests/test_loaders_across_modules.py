"""Loaders built in one module and iterated in another (TL202, TL204): the
project index (torchlint/project.py) asks the callers of a function that
returns a `DataLoader` whether they copy its batches to a device."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    "train, start, words",
    [
        # TL202 reports the DataLoader in data.py and names the caller
        (TRAIN, "data.py:5:12: TL202", "`build_loader` returns it to train.py:6, which copies its batches"),
        # pinned in data.py: TL202 is silent, TL204 reports the copy in train.py
        (TRAIN_PINNED, "train.py:7:13: TL204", "(built in data.py)"),
    ],
)
def test_one_finding_that_names_the_other_module(runner, workdir, train, start, words):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(train)
    (line,) = _lines(runner, ".")
    assert line.startswith(start) and words in line


@pytest.mark.parametrize(
    "body, copies",
    [
        ("z = x.cuda()", True),
        ("z = x.to('cuda:0')", True),
        ("z = x.to(args.device)", True),
        ("z = x.to(device, non_blocking=True)", True),  # the copy cannot overlap without pinned memory
        ("z = {k: v.to(device) for k, v in x.items()}", True),
        ("model(x).sum().backward()", False),  # never copies
        ("x = x.to(torch.float16)", False),  # a cast
        ("x = x.to('cpu')", False),
        ("x = x.to('mps')", False),
        ("y = model.to(device)", False),  # copies something, not the batches
    ],
)
def test_what_counts_as_copying_the_batches(runner, workdir, body, copies):
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN.replace("x, y = x.to(device), y.to(device)", body))
    assert _codes(runner, ".") == (["data.py:5:12: TL202"] if copies else [])


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


@pytest.mark.parametrize("command", [("fix",), ("check", "--fix")])
def test_one_fix_run_also_fixes_the_copies_a_pin_in_another_module_makes_fixable(runner, workdir, command):
    # pinning the loader in data.py makes TL204 report (and fix) its batches' copies in
    # train.py: the project index's facts came from the texts before the pin, so the
    # files are fixed again, and a second run changes nothing
    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    args = (*command, "--select", "TL202,TL204", "--unsafe-fixes", ".")
    run(runner, *args)
    assert "batch_size=batch_size, num_workers=4, pin_memory=True)" in (workdir / "data.py").read_text()
    fixed = (workdir / "train.py").read_text()
    assert "x.to(device, non_blocking=True), y.to(device, non_blocking=True)" in fixed
    files = {name: (workdir / name).read_text() for name in ("data.py", "train.py")}
    run(runner, *args)
    assert {name: (workdir / name).read_text() for name in files} == files


def test_the_main_process_does_not_import_libcst(workdir):
    from tests.test_project_index import main_process_output

    (workdir / "data.py").write_text(DATA)
    (workdir / "train.py").write_text(TRAIN)
    output = main_process_output(workdir, "TL202")
    assert "data.py:5:12: TL202" in output
    assert output.strip().splitlines()[-1] == "False"
