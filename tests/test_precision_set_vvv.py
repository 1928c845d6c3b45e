"""Precision on projects never seen before (set VVV; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint

# -- MinkowskiEngine: sparse convolutions with a changing number of points ---------------------

SPARSE = """\
import MinkowskiEngine as ME
import torch
from torch import nn


def train(net, loader, optimizer, device):
    net.train()
    for coords, feats, labels in loader:
        sin = ME.SparseTensor(feats.to(device), coordinates=coords.to(device))
        loss = nn.functional.cross_entropy(net(sin).F, labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()


def main():
    net = MinkUNet14(3, 20).cuda()
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=4, pin_memory=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(100):
        train(net, loader, optimizer, torch.device("cuda"))
"""


def test_a_minkowski_engine_program_gets_no_autocast_compile_or_empty_cache_advice():
    assert codes(lint(SPARSE, select=["TL504", "TL505", "TL702"])) == []


def test_the_same_program_without_minkowski_engine_is_reported():
    changed = SPARSE.replace("import MinkowskiEngine as ME\n", "from mylib import sparse as ME\n")
    assert sorted(codes(lint(changed, select=["TL504", "TL505", "TL702"]))) == ["TL504", "TL702"]


# -- TL302: a function that shows its inputs ---------------------------------------------------

VISUALIZE = """\
import torch
import open3d as o3d


def visualize(net, dataloader, device):
    net.eval()
    for i, batch in enumerate(dataloader):
        out = net(batch["coords"].to(device))
        o3d.visualization.draw_geometries([to_cloud(out)])
        if i > 5:
            break
"""


def test_a_function_named_for_drawing_is_not_asked_for_no_grad():
    assert codes(lint(VISUALIZE, select=["TL302"])) == []


def test_an_evaluation_function_is_still_reported():
    changed = VISUALIZE.replace("def visualize(", "def evaluate(")
    assert codes(lint(changed, select=["TL302"])) == ["TL302"]


# -- TL601: wrapped only to load a checkpoint saved from a wrapped model -----------------------

LOAD_WRAPPED = """\
import torch
import torch.nn as nn


def load_flexible(model, path):
    checkpoint = torch.load(path)
    if "module." in next(iter(checkpoint)):
        model = nn.DataParallel(model)
        model.load_state_dict(checkpoint)
        model = model.module
    return model


def train(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
"""


def test_a_wrap_undone_right_after_loading_is_silent():
    assert codes(lint(LOAD_WRAPPED, select=["TL601"])) == []


def test_a_wrap_that_is_kept_is_reported():
    changed = LOAD_WRAPPED.replace("        model = model.module\n", "")
    assert codes(lint(changed, select=["TL601"])) == ["TL601"]
