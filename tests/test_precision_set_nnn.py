"""Precision on projects never seen before (sets LLL, NNN and OOO; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint
from tests.test_add_noqa import _notebook
from tests.test_cli import run

# -- a sampler's schedule, built in a loop before its denoising loop -----------------------

RESTART = """\
import torch


def sample_restart(model, x, sigmas, restart_list):
    def heun_step(x, old_sigma, new_sigma):
        denoised = model(x, old_sigma)
        return x + (new_sigma - old_sigma) * denoised

    step_list = []
    for i in range(len(sigmas) - 1):
        step_list.append((sigmas[i], sigmas[i + 1]))
        if i + 1 in restart_list:
            lo, hi = sigmas[i + 1].item(), sigmas[-1].item()
            step_list.append((lo, hi))
    for old_sigma, new_sigma in step_list:
        x = heun_step(x, old_sigma, new_sigma)
    return x
"""


def test_a_samplers_schedule_loop_runs_once_per_pass():
    # the `.item()`s build the step list before any model work is queued: once
    # per sampling run, not per step (Fooocus's restart sampler)
    assert "TL101" not in codes(lint(RESTART))


@pytest.mark.parametrize("change", [
    # the read inside the loop that runs the model: every sampling step waits
    ("        x = heun_step(x, old_sigma, new_sigma)\n",
     "        x = heun_step(x, old_sigma, new_sigma)\n        print(x.norm().item())\n"),
    # the helper runs no model: no sampling loop, the loops are the steps
    ("        denoised = model(x, old_sigma)\n", "        denoised = x * old_sigma\n"),
])
def test_a_read_in_a_samplers_model_loop_is_reported(change):
    assert "TL101" in codes(lint(RESTART.replace(*change)))


SOLVER = """\
import torch


class Solver:
    def __init__(self, model_fn):
        self.model_fn = model_fn

    def data_prediction(self, x, t):
        return self.model_fn(x, t)

    def update(self, x, s, t):
        return x + (t - s) * self.data_prediction(x, s)

    def solve(self, x, timesteps):
        bounds = []
        for t in timesteps:
            bounds.append(t.item())
        for step in range(len(timesteps) - 1):
            x = self.update(x, timesteps[step], timesteps[step + 1])
        return x, bounds
"""


def test_a_solvers_setup_loop_runs_once_per_pass_through_its_methods():
    # the loop runs the model through two methods of the class: a solver, whose
    # setup loop before it runs once per sampling run
    assert "TL101" not in codes(lint(SOLVER))
    # the methods run no model: no sampler, the setup loop's reads are the finding
    assert "TL101" in codes(lint(SOLVER.replace("return self.model_fn(x, t)", "return x * t")))


# -- DataParallel in a notebook: DDP would need processes a notebook cannot launch -------------

DP_TRAINING = """\
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(8, 2)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_data_parallel_in_a_notebook_is_not_reported(runner, workdir):
    (workdir / "train.ipynb").write_text(_notebook("import torch\nloader = []", DP_TRAINING))
    (workdir / "train.py").write_text(DP_TRAINING)
    output = run(runner, "check", "--select", "TL601", "--no-cache", "--output-format", "concise", ".").output
    # the same training as a script: torchrun can launch it with DDP
    assert "train.py:4:" in output and "TL601" in output
    assert "train.ipynb" not in output


# -- an OpenMMLab model's `predict`: the framework's loops run it without gradients --------

MM_RECOGNIZER = """\
import torch
from mmocr.registry import MODELS
from .base import BaseRecognizer


@MODELS.register_module()
class EncoderDecoderRecognizer(BaseRecognizer):
    def loss(self, inputs, data_samples):
        feat = self.extract_feat(inputs)
        return self.decoder.loss(feat, data_samples)

    def predict(self, inputs, data_samples):
        self.model.eval()
        feat = self.model(inputs)
        return self.decoder.predict(feat, data_samples)
"""


def test_an_openmmlab_models_predict_runs_without_gradients():
    # MMEngine's ValLoop/TestLoop and inferencers call `predict` under `torch.no_grad()`
    assert "TL302" not in codes(lint(MM_RECOGNIZER))


@pytest.mark.parametrize("change", [
    # no OpenMMLab import: who calls `predict` is not known to run without gradients
    ("from mmocr.registry import MODELS\n", "from registry import MODELS\n"),
    # another method name: not one the framework's evaluation loops call
    ("def predict(self, inputs, data_samples):", "def evaluate(self, inputs, data_samples):"),
])
def test_a_predict_outside_openmmlab_is_reported(change):
    assert "TL302" in codes(lint(MM_RECOGNIZER.replace(*change)))


# -- a loop that shows each frame: its host copy waits every iteration ----------------------

SHOW = """\
import cv2
import numpy as np
import torch


def optimize(model, renderer, ref, optimizer, steps):
    for i in range(steps):
        optimizer.zero_grad()
        result = renderer(model())
        result_im = (result.cpu().detach().numpy() * 255).astype(np.uint8)
        cv2.imshow("opt", result_im[:, :, ::-1])
        cv2.waitKey(1)
        loss = ((result - ref) ** 2).sum()
        print("loss %d: %f" % (i, loss.item()))
        loss.backward()
        optimizer.step()
"""


def test_a_loop_that_shows_a_host_copy_of_each_frame_waits_every_iteration():
    # pytorch3d's pulsar examples: the frame is copied to the host and shown every
    # iteration, so one more read of the loss adds no wait
    assert "TL101" not in codes(lint(SHOW))


@pytest.mark.parametrize("change", [
    # shown only now and then: most iterations do not wait
    ('        cv2.imshow("opt", result_im[:, :, ::-1])\n',
     '        if i % 10 == 0:\n            cv2.imshow("opt", result_im[:, :, ::-1])\n'),
    # a frame that was never on the device: showing it waits for nothing
    ('        cv2.imshow("opt", result_im[:, :, ::-1])\n', '        cv2.imshow("opt", np.zeros((8, 8)))\n'),
])
def test_a_loop_without_a_shown_copy_is_reported(change):
    assert "TL101" in codes(lint(SHOW.replace(*change)))


# -- a metric's summary runs once per evaluation ----------------------------------------

METRIC = """\
import torch


class AUCMetric(ICallbackLoaderMetric):
    def update(self, scores, targets):
        self.scores.append(scores.cpu().detach())
        self.targets.append(targets.cpu().detach())

    def compute(self):
        scores = torch.cat(self.scores)
        targets = torch.cat(self.targets)
        return [auc(scores[:, i], targets[:, i]) for i in range(scores.shape[1])]

    def compute_key_value(self):
        per_class = self.compute()
        return {f"auc/class_{i:02d}": value.item() for i, value in enumerate(per_class)}

    def forward(self, x):
        return {f"auc/class_{i:02d}": value.item() for i, value in enumerate(x)}
"""


def test_a_metrics_summary_runs_once_per_evaluation():
    # catalyst's, torchmetrics' and MMEngine's loops call `compute`/`compute_metrics`/
    # `compute_key_value` once per evaluation, after `update` saw every batch
    found = [d for d in lint(METRIC) if d.code == "TL101"]
    assert [d.line for d in found] == [19]  # the per-step `forward` stays reported


def test_a_compute_method_of_another_class_is_per_step_if_called_so():
    plain = METRIC.replace("class AUCMetric(ICallbackLoaderMetric):", "class AUCHead(nn.Module):")
    assert len([d for d in lint(plain) if d.code == "TL101"]) == 2


# -- a diagnostic view behind a parameter off by default ----------------------------------

VIEW = """\
import torch


def eval_batch(model, batch, visualize: bool = False):
    results = {}
    for name, target in batch.items():
        err = (model(target) - target).abs().mean()
        results[name] = err
        if visualize:
            print(name, err.item())
    return results


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return [eval_batch(model, batch) for batch in loader]
"""


def test_a_diagnostic_view_off_by_default_is_not_a_step():
    assert "TL101" not in codes(lint(VIEW))


@pytest.mark.parametrize("change", [
    # a call of the module turns the view on
    ("[eval_batch(model, batch) for", "[eval_batch(model, batch, visualize=True) for"),
    # a feature switch, not a view: callers elsewhere may wire it to the configuration
    ("visualize", "include_extra"),
])
def test_a_view_turned_on_or_a_feature_switch_is_reported(change):
    assert "TL101" in codes(lint(VIEW.replace(*change)))


# -- a pass over a video's frames is no sampler ---------------------------------------------

FRAMES = """\
import torch


class Captioner:
    def encode(self, frames):
        return self.visual_encoder(frames)

    def generate(self, data, modalities):
        embeds = []
        for j in range(data.size(2)):
            embeds.append(self.encode(data[:, :, j]))
        atts = {}
        for modality in modalities:
            atts[modality] = torch.ones(embeds[0].size()[:-1], dtype=torch.long).to(self.device)
        return self.llm(embeds, atts)
"""


def test_a_pass_over_frames_is_not_a_samplers_setup():
    # each frame is encoded once, nothing fed back: the masks are made with the
    # same pass's work, per call, not once per many model steps
    train = ("\n\ndef train(model, loader, opt):\n    c = Captioner()\n    for data in loader:\n"
             "        c.generate(data, ['video']).sum().backward()\n        opt.step()\n")
    assert "TL201" in codes(lint(FRAMES + train))


# -- set OOO: a threshold test on a tensor element, then its read-------------------------------

THRESHOLD = """\
import torch


def detect(model, frames, proposals, thr):
    predictions = []
    for frame in frames:
        with torch.no_grad():
            scores = model(frame.cuda())
        prediction = [[] for _ in range(proposals.shape[0])]
        for i in range(scores.shape[1]):
            for j in range(proposals.shape[0]):
                if scores[j][i] > thr:
                    prediction[j].append((i, scores[j][i].item()))
        predictions.append(prediction)
    return predictions
"""


def test_a_threshold_test_on_a_tensor_does_not_excuse_its_read():
    # mmaction2's demos: `if scores[j][i] > thr:` is itself a read per element;
    # converting `scores` once removes it and the `.item()` (a choice: the
    # reviewers of set OOO counted these false positives, those of older sets
    # counted the same shape in decoding loops right)
    assert "TL101" in codes(lint(THRESHOLD))


def test_a_loop_that_already_waits_on_a_tensor_test_is_silent():
    # a test on a whole tensor's truth value (`.any()`) every iteration: waits anyway
    changed = THRESHOLD.replace("if scores[j][i] > thr:", "if (scores > thr).any():")
    assert "TL101" not in codes(lint(changed))


# -- set OOO: an OpenMMLab metric's `process` keeps its results on the host ------------------

MM_METRIC = """\
import copy

import torch
from mmengine.evaluator import BaseMetric


class AccMetric(BaseMetric):
    def process(self, data_batch, data_samples):
        data_samples = copy.deepcopy(data_samples)
        for data_sample in data_samples:
            result = dict()
            pred = data_sample['pred_score']
            label = data_sample['gt_label']
            if isinstance(pred, dict):
                for name, score in pred.items():
                    pred[name] = score.cpu().numpy()
            else:
                pred = pred.cpu().numpy()
            result['pred'] = pred
            if label.size(0) == 1:
                result['label'] = label.item()
            else:
                result['label'] = label.cpu().numpy()
            self.results.append(result)
"""


def test_an_openmmlab_metrics_process_collects_on_the_host():
    assert not {"TL101", "TL102"} & set(codes(lint(MM_METRIC)))


@pytest.mark.parametrize("change", [
    ("from mmengine.evaluator import BaseMetric", "from metrics import BaseMetric"),
    ("def process(self", "def update(self"),
])
def test_a_read_outside_an_openmmlab_metrics_process_is_reported(change):
    assert "TL101" in codes(lint(MM_METRIC.replace(*change)))


# -- set OOO: a cached property runs once ---------------------------------------------------

CACHED = """\
from functools import cached_property

import torch


class Embedder:
    @cached_property
    def min_num_samples(self):
        lower, upper = 2, 8000
        while lower + 1 < upper:
            middle = (lower + upper) // 2
            try:
                self.model(torch.rand(1, middle).to(self.device))
                upper = middle
            except RuntimeError:
                lower = middle
        return upper

    def __call__(self, waveforms):
        return self.model(waveforms)
"""


def test_a_cached_propertys_probe_runs_once():
    # pyannote: a binary search for the model's minimum input length, computed
    # once and kept
    assert "TL201" not in codes(lint(CACHED))
    # the same probe in a method run at every call: it runs each time
    plain = CACHED.replace("    @cached_property\n", "").replace("def min_num_samples(self)", "def forward(self)")
    assert "TL201" in codes(lint(plain))


# -- set OOO: state on the object filled lazily by a method of the class --------------------

NCM = """\
import torch
from torch import nn


class NCMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.class_means_dict = {}
        self.max_class = -1

    def init_missing_classes(self, classes, class_size, device):
        for k in classes:
            if k not in self.class_means_dict:
                self.class_means_dict[k] = torch.zeros(class_size).to(device)

    def forward(self, x):
        if self.class_means_dict == {}:
            self.init_missing_classes(range(self.max_class + 1), x.shape[1], x.device)
        means = torch.stack(list(self.class_means_dict.values()))
        return x @ means.T
"""


def test_state_filled_lazily_by_a_method_is_made_once():
    # avalanche's NCM and FeCAM classifiers: the first forward fills the class
    # means, later ones find them
    assert "TL201" not in codes(lint(NCM))


def test_a_method_called_whatever_the_state_is_per_step():
    always = NCM.replace("        if self.class_means_dict == {}:\n            self.init",
                         "        if x.shape[0] > 0:\n            self.init")
    assert "TL201" in codes(lint(always))


# -- TL505: a demonstration's short, fixed run ----------------------------------------------

PULSAR = """\
import torch
from tqdm import tqdm


def cli():
    renderer = Renderer(1024, 1024, 100).cuda()
    optimizer = torch.optim.SGD(renderer.parameters(), lr=0.1)
    n_iter = 300
    for i in tqdm(range(n_iter)):
        image = renderer(positions, colors)
        loss = ((image - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    cli()
"""


def test_tl505_a_demos_few_hundred_steps_do_not_repay_compilation():
    # pytorch3d's pulsar examples and tutorials fit a scene in 300 to 2000 steps
    assert "TL505" not in codes(lint(PULSAR))


@pytest.mark.parametrize("count", ["args.iters", "300000", "n_iter * 1000"])
def test_tl505_a_run_whose_length_is_not_a_small_literal_is_reported(count):
    code = PULSAR.replace("def cli():", "def cli(args):").replace("n_iter = 300", f"n_iter = {count}")
    assert "TL505" in codes(lint(code))


def test_tl505_a_while_loop_is_no_short_run():
    code = PULSAR.replace("for i in tqdm(range(n_iter)):", "while True:")
    assert "TL505" in codes(lint(code))


FULL_BATCH = """\
import torch

model = Net().cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    model.train()
    optimizer.zero_grad()
    out = model(data.x)
    loss = loss_fn(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
    return float(loss)


for epoch in range(1, 201):
    loss = train()
"""


def test_tl505_a_step_function_called_a_few_hundred_times_is_a_short_run():
    # a full-batch fit: 200 steps, counted around the call of the step function
    assert "TL505" not in codes(lint(FULL_BATCH, select=["TL505"]))


@pytest.mark.parametrize("change", [
    ("for epoch in range(1, 201):", "for epoch in range(1, args.epochs + 1):"),
    ("for epoch in range(1, 201):", "for epoch in range(1, 200_001):"),
    ("    optimizer.zero_grad()\n", "    for data in loader:\n        optimizer.zero_grad()\n"),
    ("    loss = train()\n", "    loss = train()\nwhile True:\n    train()\n"),
])
def test_tl505_a_step_function_with_a_long_or_unknown_run_is_reported(change):
    code = FULL_BATCH.replace(*change)
    if "for data in loader" in code:  # (the step's body moves into the loop over the loader)
        code = code.replace("\n    out = model", "\n        out = model").replace("\n    loss = loss_fn", "\n        loss = loss_fn")
        code = code.replace("\n    loss.backward()", "\n        loss.backward()").replace("\n    optimizer.step()", "\n        optimizer.step()")
    assert "TL505" in codes(lint(code, select=["TL505"]))
