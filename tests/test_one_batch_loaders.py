"""TL202 and TL203 stay silent on a loader that only fetches a batch or two,
and still report one that is iterated however it is spelled."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes, lint

HEAD = """\
import torch
import torchvision
from torch.utils.data import DataLoader

device = torch.device("cuda")
dataset = torchvision.datasets.CIFAR10("data", transform=torchvision.transforms.ToTensor())
"""

ONE_BATCH = {
    "next-iter": """\
        loader = DataLoader(dataset, batch_size=64)
        images, labels = next(iter(loader))
        images = images.to(device)
        """,
    "iterator-next-method": """\
        sample_loader = DataLoader(dataset, batch_size=64)
        dataiter = iter(sample_loader)
        images, labels = dataiter.next()
        images = images.to(device)
        """,
    "iterator-next-twice": """\
        loader = DataLoader(dataset, batch_size=8)
        it = iter(loader)
        first = next(it)[0].to(device)
        second = next(it)[0].to(device)
        """,
    "in-a-function": """\
        def show_batch():
            loader = DataLoader(dataset, batch_size=64, shuffle=True)
            images, _ = next(iter(loader))
            return images.to(device)
        """,
}

ITERATED = {
    "for-loop-too": """\
        loader = DataLoader(dataset, batch_size=64)
        images, labels = next(iter(loader))
        for x, y in loader:
            x = x.to(device)
        """,
    "infinite-iterator": """\
        loader = DataLoader(dataset, batch_size=64)
        it = iter(loader)
        while True:
            x, y = next(it)
            x = x.to(device)
        """,
    "next-iter-in-a-loop": """\
        loader = DataLoader(dataset, batch_size=64)
        for step in range(1000):
            x, y = next(iter(loader))
            x = x.to(device)
        """,
    "iterator-passed-on": """\
        loader = DataLoader(dataset, batch_size=64)
        it = iter(loader)
        x = next(it)[0].to(device)
        train(model, it)
        """,
    "loader-passed-on": """\
        loader = DataLoader(dataset, batch_size=64)
        x = next(iter(loader))[0].to(device)
        train(model, loader)
        """,
}


@pytest.mark.parametrize("body", ONE_BATCH.values(), ids=ONE_BATCH.keys())
def test_one_batch_is_not_reported(body):
    code = HEAD + textwrap.dedent(body)
    assert codes(lint(code, select=["TL202", "TL203"])) == []
    # with workers (TL202 looks only at loaders that have them)
    assert codes(lint(code.replace("batch_size=", "num_workers=2, batch_size="), select=["TL202"])) == []


@pytest.mark.parametrize("body", ITERATED.values(), ids=ITERATED.keys())
def test_iterated_loader_is_reported(body):
    code = HEAD + textwrap.dedent(body)
    # loading in the main process: TL203; pinning would buy nothing there yet
    assert codes(lint(code, select=["TL202", "TL203"])) == ["TL203"]
    # with workers: TL202
    with_workers = code.replace("batch_size=", "num_workers=2, batch_size=")
    assert codes(lint(with_workers, select=["TL202", "TL203"])) == ["TL202"]
