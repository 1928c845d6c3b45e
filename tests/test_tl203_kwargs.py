"""TL203 reads `DataLoader(ds, **kw)` like TL202/TL204 do: a dict built in the
same scope (with its updates) says whether `num_workers` is set; a dict it
cannot follow keeps TL203 silent (precision first)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import lint

CODE = """
import torch
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder


def main(cuda, base, args):
    train_set = ImageFolder("data/train", transform=augment)
    {binding}
    {update}
    loader = DataLoader(train_set, **kw)
    for x, y in loader:
        step(x, y)
"""


def _lines(binding: str, update: str = "pass"):
    code = textwrap.dedent(CODE.format(binding=binding, update=update))
    return [(d.line, d.message) for d in lint(code, select=["TL203"], path="train.py")]


@pytest.mark.parametrize(
    "binding, update, given",
    [
        ("kw = dict(batch_size=64, shuffle=True)", "pass", "without"),
        ('kw = {"batch_size": 64, "shuffle": True}', "pass", "without"),
        ("kw = dict(batch_size=64, num_workers=0)", "pass", "dict"),
        ("kw = dict(batch_size=64, num_workers=8)", "kw.update(num_workers=0)", "dict"),
        ("kw = dict(batch_size=64, num_workers=8)", 'kw["num_workers"] = 0', "dict"),
    ],
)
def test_a_dict_of_the_same_scope_without_workers_is_reported(binding, update, given):
    ((line, message),) = _lines(binding, update)
    assert line == 11
    if given == "dict":
        assert "whose dict sets `num_workers=0`" in message
    else:
        assert "without `num_workers`" in message


@pytest.mark.parametrize(
    "binding, update",
    [
        # workers are set
        ("kw = dict(batch_size=64, num_workers=4)", "pass"),
        ('kw = {"num_workers": 4}', "pass"),
        ("kw = dict(batch_size=64)", "kw.update(num_workers=4)"),
        ("kw = dict(batch_size=64)", 'kw["num_workers"] = args.workers'),
        # the dict cannot be followed: it may set them
        ("kw = dict(batch_size=64)", "if cuda: kw.update(num_workers=4)"),
        ("kw = dict(batch_size=64)", "configure(kw)"),
        ("kw = dict(batch_size=64)", "kw.update(base)"),
        ("kw = dict(batch_size=64, **base)", "pass"),
        ("kw = vars(args)", "pass"),
        ("kw = dict(batch_size=64, num_workers=args.workers)", "pass"),
        # a collate function the rule cannot see might put batches on a device
        ("kw = dict(batch_size=64, collate_fn=collate)", "pass"),
    ],
)
def test_a_dict_that_sets_workers_or_cannot_be_read_is_silent(binding, update):
    assert _lines(binding, update) == []


def test_an_unknown_kwargs_parameter_stays_silent():
    code = textwrap.dedent("""
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder

        def make(**kw):
            return DataLoader(ImageFolder("data", transform=tf), **kw)
    """)
    assert lint(code, select=["TL203"], path="train.py") == []


def test_a_dict_is_still_judged_by_its_dataset():
    """Main-process loading of a `TensorDataset` costs nothing: not reported,
    whatever the dict says."""
    code = textwrap.dedent("""
        from torch.utils.data import DataLoader, TensorDataset
        kw = dict(batch_size=64)
        loader = DataLoader(TensorDataset(x, y), **kw)
    """)
    assert lint(code, select=["TL203"], path="train.py") == []


def test_a_module_level_dict():
    code = textwrap.dedent("""
        from torch.utils.data import DataLoader
        from torchvision.datasets import ImageFolder
        loader_args = dict(batch_size=64, shuffle=True)
        loader = DataLoader(ImageFolder("data", transform=tf), **loader_args)
    """)
    assert [d.line for d in lint(code, select=["TL203"], path="train.py")] == [5]

