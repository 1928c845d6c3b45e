"""Precision on the projects the precision issue names (DETR, DINOv2, MAE,
torchtune, YOLOv5, HiFi-GAN, latent diffusion, StyleGAN3; synthetic examples
written here, not their code): a NaN check on the sum of a dict of losses, an
evaluation loop that feeds a COCO evaluator every batch, the CPU
implementation of an operation, the helpers of a samplers module, per-image
results written as text.  Each with the near-miss that must still be
reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str = "TL101", path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- a NaN check on the sum of the losses read every step -------------------------------------

NAN_CHECK = """
import math
import torch


def train(model, loader, optimizer, logger):
    for x in loader:
        loss_dict = model(x.cuda())
        loss = sum(loss_dict.values())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        reduced = {k: v.item() for k, v in loss_dict.items()}
        if math.isnan(sum(reduced.values())):
            raise AssertionError("NaN detected")
        logger.update(**reduced)
"""


def test_reads_that_feed_a_nan_check_on_their_sum_are_silent():
    assert found(NAN_CHECK) == []


def test_the_same_reads_without_the_check_are_reported():
    code = NAN_CHECK.replace(
        '        if math.isnan(sum(reduced.values())):\n            raise AssertionError("NaN detected")\n', ""
    )
    assert found(code) == [("TL101", 13)]


def test_a_nan_check_that_only_logs_is_no_stop():
    code = NAN_CHECK.replace('raise AssertionError("NaN detected")', 'print("NaN detected")')
    assert found(code) == [("TL101", 13)]


# -- an evaluation loop that hands each batch's results to a COCO evaluator --------------------

COCO_LOOP = """
import torch
from datasets.coco_eval import CocoEvaluator


@torch.no_grad()
def evaluate(model, postprocess, loader, base_ds, device):
    coco_evaluator = CocoEvaluator(base_ds, ("bbox",))
    for samples, targets in loader:
        samples = samples.to(device)
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        results = postprocess(model(samples))
        res = {t["image_id"].item(): r for t, r in zip(targets, results)}
        coco_evaluator.update(res)
        for i, target in enumerate(targets):
            name = f"{target['image_id'].item():012d}.png"
    coco_evaluator.summarize()
"""


def test_reads_beside_a_coco_evaluator_fed_every_batch_are_silent():
    assert found(COCO_LOOP) == []


def test_a_coco_scoring_after_the_loop_leaves_the_reads_reported():
    code = COCO_LOOP.replace("        coco_evaluator.update(res)\n", "        outputs.append(res)\n").replace(
        "    coco_evaluator.summarize()\n", "    coco_evaluator.update(outputs)\n    coco_evaluator.summarize()\n"
    )
    assert found(code) == [("TL101", 13), ("TL101", 16)]


# -- the CPU implementation of an operation ---------------------------------------------------

FILL = """
import torch


def fill_indices_cpu(counts, offsets, experts):
    out = torch.full((int(counts.sum()),), -1, dtype=torch.int32)
    for e in range(experts):
        start = offsets[e].item()
        out[start] = e
    return out
"""


def test_a_function_named_for_the_cpu_is_silent():
    assert found(FILL) == []


def test_the_same_loop_in_a_device_function_is_reported():
    assert found(FILL.replace("fill_indices_cpu", "fill_indices")) == [("TL101", 8)]


def test_a_word_that_only_contains_cpu_is_not_the_cpu():
    assert found(FILL.replace("fill_indices_cpu", "_cpu_fill_indices")) == []
    assert found(FILL.replace("fill_indices_cpu", "fill_indices_cpus")) == [("TL101", 8)]
    assert found(FILL.replace("fill_indices_cpu", "fill_indicescpu")) == [("TL101", 8)]


# -- the helpers of a samplers module -----------------------------------------------------------

SAMPLERS = """
import numpy as np
import torch
from torch.utils.data import Sampler


def shuffle_slice(tensor, start, step, generator):
    result = np.empty(len(tensor) // step, dtype=np.int64)
    for i in range(len(result)):
        j = torch.randint(0, i + 1, (1,), generator=generator).item() if i > 0 else 0
        result[i] = result[j]
        result[j] = tensor[start + i * step].item()
    return result


class InfiniteSampler(Sampler):
    def __init__(self, size, seed=0):
        self.size = size
        self.seed = seed

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed)
        while True:
            yield from shuffle_slice(torch.randperm(self.size, generator=generator), 0, 1, generator)
"""


def test_a_helper_of_a_samplers_module_runs_on_the_host():
    assert found(SAMPLERS, path="samplers.py") == []


def test_a_helper_also_used_outside_the_data_classes_is_judged_as_usual():
    code = SAMPLERS + "\n\ndef train_order(indices, generator):\n    return shuffle_slice(indices, 0, 1, generator)\n"
    assert found(code, path="samplers.py") == [("TL101", 12)]


# -- per-image results written as text ---------------------------------------------------------

PREDICT = """
import torch


@torch.no_grad()
def predict(model, loader, names, out_dir):
    for path, im in loader:
        prob = torch.softmax(model(im.cuda()), 1)
        for i, p in enumerate(prob):
            top5 = p.argsort(0, descending=True)[:5].tolist()
            text = "\\n".join(f"{p[j]:.2f} {names[j]}" for j in top5)
            with open(f"{out_dir}/{i}.txt", "a") as f:
                f.write(text + "\\n")
"""


def test_results_written_as_text_are_the_point():
    assert found(PREDICT) == []


def test_results_only_kept_are_reported():
    code = PREDICT.replace(
        '            with open(f"{out_dir}/{i}.txt", "a") as f:\n                f.write(text + "\\n")\n',
        "            results.append(text)\n",
    )
    assert found(code) == [("TL101", 10)]
