"""Precision on projects never seen before (sets PPP and QQQ; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint

# -- TL302: an evaluation that runs the model through a helper that disables gradients -------

EVALUATE = """\
import torch


def model_predict(model, positions, sentences):
    \"\"\"Predict the class of each target token.\"\"\"
    with torch.no_grad():
        logits = model(positions, sentences)
        return torch.argmax(logits, dim=1)


def evaluate_model(model, dataset):
    model.eval()
    predictions = []
    for sentences, positions, labels in dataset:
        predictions += model_predict(model, positions, sentences).tolist()
    return predictions
"""


def test_tl302_a_helper_that_disables_gradients_itself_covers_the_call():
    # stanza's lemma classifier: evaluate_model runs the model only through model_predict
    assert "TL302" not in codes(lint(EVALUATE))


@pytest.mark.parametrize("change", [
    ("    with torch.no_grad():\n        logits = model(positions, sentences)\n        return",
     "    logits = model(positions, sentences)\n    if True:\n        return"),
    ("    with torch.no_grad():\n        logits", "    with torch.enable_grad():\n        logits"),
])
def test_tl302_a_helper_that_keeps_gradients_leaves_the_finding(change):
    assert "TL302" in codes(lint(EVALUATE.replace(*change)))


# -- a lazy set-up behind a flag that its body clears ---------------------------------------

LAZY_DIST = """\
import torch
from torch import nn


class ShardedTower(nn.Module):
    def __init__(self):
        super().__init__()
        self._has_uninitialized_output_dist = True

    def _create_output_dist(self, dims):
        splits = []
        for i in range(dims.shape[0]):
            splits.append(dims[i].item())
        self._output_dist = AllToAll(splits)

    def forward(self, features):
        dims = torch.tensor([f.shape[1] for f in features], device=features[0].device)
        if self._has_uninitialized_output_dist:
            self._create_output_dist(dims)
            self._has_uninitialized_output_dist = False
        return self._output_dist(features)
"""


def test_a_setup_behind_a_flag_its_body_clears_runs_once():
    # torchrec's embedding tower sharding: the output dist is built on the first forward
    assert "TL101" not in codes(lint(LAZY_DIST))


@pytest.mark.parametrize("change", [
    ("            self._has_uninitialized_output_dist = False\n", ""),
    ("self._has_uninitialized_output_dist = False\n        return", "self._has_uninitialized_output_dist = True\n        return"),
    ("        if self._has_uninitialized_output_dist:\n", "        if self.training:\n"),
])
def test_a_flag_the_body_does_not_clear_is_a_step(change):
    assert "TL101" in codes(lint(LAZY_DIST.replace(*change)))


# -- a metric's aggregate over the evaluation ------------------------------------------------

DICE = """\
import torch


class DiceMetric(CumulativeIterationMetric):
    def aggregate(self):
        data = self.get_buffer()
        f, not_nans = do_metric_reduction(data, self.reduction)
        per_label = {}
        for i in range(f.shape[0]):
            per_label[self.labels[i]] = round(f[i].item(), 4)
        return per_label
"""


def test_a_metrics_aggregate_runs_once_per_evaluation():
    # MONAI's DiceMetric: the evaluator calls aggregate() after the last batch
    assert "TL101" not in codes(lint(DICE))


def test_an_aggregate_of_a_class_that_is_no_metric_is_a_step():
    assert "TL101" in codes(lint(DICE.replace("class DiceMetric(CumulativeIterationMetric)", "class Dice(nn.Module)")))


# -- a PackedSequence's batch sizes ----------------------------------------------------------

PACKED = """\
import torch
from torch import nn


class PackedLSTM(nn.Module):
    def forward(self, input, states):
        for layer in self.layers:
            max_batch_size = input.batch_sizes[0].item()
            input, states = layer(input, states, max_batch_size)
        return input
"""


def test_a_packed_sequences_batch_sizes_are_on_the_host():
    # stanza's PackedLSTM: batch_sizes stays on the CPU whatever the data's device
    assert "TL101" not in codes(lint(PACKED))


def test_a_packed_sequences_data_is_not():
    assert "TL101" in codes(lint(PACKED.replace("input.batch_sizes[0]", "input.data[0]")))


# -- text for printing -------------------------------------------------------------------------

VALUES_STRING = """\
import torch


def _values_string(values, start, end):
    return "[" + ", ".join([str(value.item()) for value in values[start:end]]) + "]"


class Jagged:
    def __str__(self):
        return "".join(_values_string(self._values, a, b) for a, b in self._ranges)

    def forward_lengths(self):
        return [self._values[a:b].sum().item() for a, b in self._ranges]
"""


def test_text_built_for_printing_is_no_step():
    # torchrec's JaggedTensor.__str__: reading each value is the point, and it runs when printed
    assert "TL101" not in codes(lint(VALUES_STRING.split("    def forward_lengths")[0]))


def test_a_method_that_reads_values_for_a_computation_is_still_judged():
    found = lint(VALUES_STRING, select=["TL101"])
    assert [d.line for d in found] == [13]


# -- TL505 on graph networks ---------------------------------------------------------------

GNN = """\
import torch
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, global_add_pool

model = Net().to("cuda")
loader = DataLoader(dataset, batch_size=128, shuffle=True, num_workers=4)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(1, 201):
    for data in loader:
        data = data.to("cuda")
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index, data.batch), data.y)
        loss.backward()
        optimizer.step()
"""


def test_tl505_a_graph_networks_example_is_not_told_to_compile():
    # PyG's examples: hard-coded epochs, and batches of graphs change shape from one to the next
    assert "TL505" not in codes(lint(GNN, select=["TL505"]))


def test_tl505_a_graph_network_trained_for_the_epochs_its_options_give_is_reported():
    # DiffDock's score model (set HHH's review counted the advice right)
    configured = GNN.replace("for epoch in range(1, 201):", "for epoch in range(1, args.epochs + 1):")
    assert "TL505" in codes(lint(configured, select=["TL505"]))


def test_tl505_the_same_loop_over_images_is_reported():
    images = GNN.replace("from torch_geometric.loader import DataLoader\nfrom torch_geometric.nn import GINConv, global_add_pool\n",
                         "from torch.utils.data import DataLoader\n").replace("model(data.x, data.edge_index, data.batch)", "model(data.x)")
    assert "TL505" in codes(lint(images, select=["TL505"]))


# -- Gaussian processes ----------------------------------------------------------------------

GP = """\
import torch
import gpytorch

model = ExactGPModel(train_x, train_y, likelihood).cuda()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
for i in range(args.iterations):
    optimizer.zero_grad()
    loss = -mll(model(train_x), train_y)
    loss.backward()
    optimizer.step()
"""


def test_gaussian_processes_get_no_precision_or_compile_advice():
    # GPyTorch: Cholesky and CG on kernel matrices need float32 or float64
    assert codes(lint(GP, select=["TL503", "TL504", "TL505"])) == []


def test_the_same_program_without_gaussian_processes_gets_it():
    plain = GP.replace("import gpytorch\n", "").replace("gpytorch.mlls.ExactMarginalLogLikelihood", "Loss")
    assert codes(lint(plain, select=["TL503", "TL504", "TL505"])) == ["TL504", "TL505"]


GP_TUTORIAL = """\
import math
import torch

train_x = torch.linspace(0, 1, 100)
train_y = torch.sin(train_x * (2 * math.pi)) + torch.randn(train_x.size()) * 0.2
model = Model(train_x, train_y)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
for i in range(50):
    optimizer.zero_grad()
    loss = -objective(model(train_x), train_y)
    loss.backward()
    print("Iter %d - Loss: %.3f" % (i + 1, loss.item()))
    optimizer.step()
"""


def test_a_tutorial_that_makes_its_data_on_the_host_reads_nothing_from_a_device():
    # GPyTorch's CPU tutorials: data from torch's factories, no device anywhere
    assert "TL101" not in codes(lint(GP_TUTORIAL, path="tutorial.ipynb"))


def test_the_same_tutorial_on_a_gpu_is_reported():
    on_gpu = GP_TUTORIAL.replace("model = Model(train_x, train_y)", "train_x, train_y = train_x.cuda(), train_y.cuda()\nmodel = Model(train_x, train_y).cuda()")
    assert "TL101" in codes(lint(on_gpu, path="tutorial.ipynb"))
    # ... unless it fits Gaussian processes, whose every call waits for the device inside
    assert "TL101" not in codes(lint("import gpytorch\n" + on_gpu, path="tutorial.ipynb"))
