"""Precision on sets AAA and BBB (model files saved with a training run's
checkpoints; MDETR's batches and evaluators; a backbone's self-test; a test
loop that empties the cache before each image; index compression in pieces;
an empty-input branch; synthetic examples written here, not their code).
Each with the near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint
from tests.test_cli import run


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


def _concise(runner, *args) -> list:
    result = run(runner, "check", "--no-cache", "--output-format", "concise", *args)
    return [line.split(" ")[0] + " " + line.split(" ")[1] for line in result.stdout.splitlines() if ": TL" in line]


# -- discovery: copies of the model saved with a run ------------------------------

NET = """\
import torch
from torch import nn


class Net(nn.Module):
    def forward(self, xyz):
        return xyz + torch.zeros(xyz.shape[0], 3).to(xyz.device)
"""


def test_model_files_copied_into_a_runs_log_folder_are_not_checked(runner, workdir):
    (workdir / "models").mkdir()
    (workdir / "models" / "net.py").write_text(NET)
    run_dir = workdir / "log" / "classification" / "run1"
    run_dir.mkdir(parents=True)
    (run_dir / "net.py").write_text(NET.replace("3)", "3, )"))  # an older copy
    assert _concise(runner, "--select", "TL201", ".") == ["models/net.py:7:22: TL201"]
    # named explicitly, the copy is checked like any file
    assert _concise(runner, "--select", "TL201", "log/classification/run1/net.py") == [
        "log/classification/run1/net.py:7:22: TL201"]


def test_a_log_folder_with_code_of_its_own_is_checked(runner, workdir):
    (workdir / "models").mkdir()
    (workdir / "models" / "net.py").write_text(NET)
    (workdir / "logs").mkdir()
    # a module no other folder has: the project's code, not a copy
    (workdir / "logs" / "sampler.py").write_text(NET)
    assert _concise(runner, "--select", "TL201", ".") == ["logs/sampler.py:7:22: TL201", "models/net.py:7:22: TL201"]
    # a package (it has an __init__.py) is imported, not saved
    (workdir / "logs" / "sampler.py").rename(workdir / "logs" / "net.py")
    (workdir / "logs" / "__init__.py").write_text("")
    assert _concise(runner, "--select", "TL201", ".") == ["logs/net.py:7:22: TL201", "models/net.py:7:22: TL201"]


# -- TL202: MDETR's collate_fn, bound with partial, builds NestedTensor by a classmethod

MISC = """\
import torch


class NestedTensor(object):
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def to(self, device):
        return NestedTensor(self.tensors.to(device), self.mask.to(device))

    @classmethod
    def from_tensor_list(cls, tensor_list, do_round=False):
        tensor = torch.stack(tensor_list)
        return cls(tensor, torch.zeros_like(tensor, dtype=torch.bool))


def collate_fn(do_round, batch):
    batch = list(zip(*batch))
    return {"samples": NestedTensor.from_tensor_list(batch[0], do_round), "targets": batch[1]}
"""

MDETR_MAIN = """\
from functools import partial

import torch
from torch.utils.data import DataLoader
import util.misc as utils


def main(dataset, model, device):
    loader = DataLoader(dataset, batch_size=2, collate_fn=partial(utils.collate_fn, False), num_workers=2)
    for batch in loader:
        samples = batch["samples"].to(device)
        model(samples)


if __name__ == "__main__":
    main(make_dataset(), make_model(), "cuda")
"""


def test_tl202_a_collate_fn_bound_with_partial_that_builds_an_unpinnable_class(runner, workdir):
    (workdir / "util").mkdir()
    (workdir / "util" / "__init__.py").write_text("")
    (workdir / "util" / "misc.py").write_text(MISC)
    (workdir / "main.py").write_text(MDETR_MAIN)
    assert _concise(runner, "--select", "TL202", ".") == []
    # a class that pins itself: pinning reaches the images
    (workdir / "util" / "misc.py").write_text(MISC.replace(
        "    def to(self, device):", "    def pin_memory(self):\n        return self\n\n    def to(self, device):"))
    assert _concise(runner, "--select", "TL202", ".") == ["main.py:9:14: TL202"]


def test_tl202_the_same_module_partial_and_classmethod():
    local = MISC + "\n\n" + MDETR_MAIN.replace("import util.misc as utils\n", "").replace("utils.collate_fn", "collate_fn")
    assert found(local, "TL202") == []
    plain = local.replace("NestedTensor.from_tensor_list(batch[0], do_round)", "torch.stack(batch[0])")
    assert found(plain, "TL202") == [("TL202", 29)]


# -- TL101: evaluators of the DETR family ------------------------------------------

EVALUATE = """\
import torch


@torch.no_grad()
def evaluate(model, postprocessors, loader, evaluator_list, device):
    for samples, targets in loader:
        samples = samples.to(device)
        targets = [{k: v.to(device) for k, v in t.items()} for t in targets]
        outputs = model(samples)
        results = postprocessors["bbox"](outputs)
        res = {target["image_id"].item(): output for target, output in zip(targets, results)}
        for evaluator in evaluator_list:
            evaluator.update(res)
"""


def test_tl101_a_loop_that_feeds_plain_evaluators_waits_anyway():
    assert found(EVALUATE, "TL101") == []


def test_tl101_the_same_read_without_an_evaluator_is_reported():
    code = EVALUATE.replace("        for evaluator in evaluator_list:\n            evaluator.update(res)\n",
                            "        keep(res)\n")
    assert found(code, "TL101") == [("TL101", 11)]


METRICS = """\
import torch


class MetricLogger:
    def __init__(self):
        self.meters = {}

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                v = v.item()
            self.meters[k] = v
"""

ENGINE = """\
import torch
from metrics import MetricLogger


@torch.no_grad()
def evaluate(model, criterion, loader, evaluator_list, args):
    logger = MetricLogger()
    for samples, targets in loader:
        outputs = model(samples.cuda())
        loss = criterion(outputs, targets)
        logger.update(loss=loss)
        if not args.no_detection:
            res = {t["image_id"]: o for t, o in zip(targets, outputs)}
            for evaluator in evaluator_list:
                if isinstance(evaluator, FlickrEvaluator):
                    evaluator.update([])
                else:
                    evaluator.update(res)
"""


def test_tl101_a_logger_called_from_a_loop_that_feeds_evaluators_under_an_opt_out_flag(runner, workdir):
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "engine.py").write_text(ENGINE)
    assert _concise(runner, "--select", "TL101", ".") == []
    # a flag that may be off: the evaluators may not run every iteration
    (workdir / "engine.py").write_text(ENGINE.replace("if not args.no_detection:", "if args.detection:"))
    assert _concise(runner, "--select", "TL101", ".") == ["metrics.py:11:21: TL101"]


# -- TL502: a model file's self-test -----------------------------------------------

BACKBONE = """\
import torch
from torch import nn


class HRNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 32, 3)

    def forward(self, x):
        return self.conv(x)


if __name__ == "__main__":
    model = HRNet()
    if torch.cuda.is_available():
        torch.backends.cudnn.deterministic = True
    model.cuda()
    print(model(torch.ones(1, 3, 768, 768).cuda()).shape)
"""


def test_tl502_a_backbones_self_test_runs_the_model_once():
    assert found(BACKBONE, "TL502", path="hrnet.py") == []


def test_tl502_a_main_block_that_loops_over_data_is_reported():
    code = BACKBONE.replace("    print(model(torch.ones(1, 3, 768, 768).cuda()).shape)\n",
                            "    for x in loader:\n        print(model(x.cuda()).shape)\n")
    assert found(code, "TL502", path="hrnet.py") == [("TL502", 17)]


# -- TL204: a test loop that empties the cache before each image ----------------------

TEST_LOOP = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=1, num_workers=4, pin_memory=True)
with torch.no_grad():
    for ii, data in enumerate(loader):
        torch.cuda.empty_cache()
        restored = model(data[0].cuda())
        save(restored.cpu().numpy(), data[1])
"""


def test_tl204_a_loop_that_empties_the_cache_every_iteration_waits_anyway():
    assert found(TEST_LOOP, "TL204", path="run_deblur.py") == []


def test_tl204_the_same_loop_without_it_is_reported():
    code = TEST_LOOP.replace("        torch.cuda.empty_cache()\n", "")
    assert found(code, "TL204", path="run_deblur.py") == [("TL204", 7)]


# -- TL102: work cut into pieces to bound device memory ---------------------------------

COMPRESS = """\
import torch


class ResidualCodec:
    def compress(self, embs):
        codes, residuals = [], []
        for batch in embs.split(1 << 18):
            batch = batch.cuda().half()
            codes_ = self.compress_into_codes(batch)
            codes.append(codes_.cpu())
            residuals.append(self.binarize(batch - self.centroids[codes_]).cpu())
        return torch.cat(codes), torch.cat(residuals)


def index(codec, loader):
    for embs in loader:
        store(codec.compress(embs))
"""


def test_tl102_results_of_a_tensors_pieces_moved_out_one_by_one():
    assert found(COMPRESS, "TL102", path="residual.py") == []


def test_tl102_the_same_results_gathered_over_a_loader_are_reported():
    code = COMPRESS.replace("for batch in embs.split(1 << 18):", "for batch in embs:")
    assert found(code, "TL102", path="residual.py") == [("TL102", 10), ("TL102", 11)]


# -- per-step rules: an empty input's branch -------------------------------------------

SEARCH = """\
import torch


def train(model, loader, optimizer):
    for pids, codes in loader:
        scores = []
        for idx in pids:
            approx = model(codes[idx].cuda())
            if approx.shape[0] == 0:
                scores.append(torch.zeros((len(idx),)).cuda())
                continue
            scores.append(approx)
        loss = torch.cat(scores).sum()
        loss.backward()
        optimizer.step()
"""


def test_tl201_a_branch_for_an_empty_input_is_an_edge_case():
    assert found(SEARCH, "TL201") == []
    assert found(SEARCH.replace("if approx.shape[0] == 0:", "if not len(approx):"), "TL201") == []


def test_tl201_a_branch_on_another_size_is_reported():
    assert found(SEARCH.replace("if approx.shape[0] == 0:", "if approx.shape[0] == 1:"), "TL201") == [("TL201", 10)]


# -- set CCC: a logger given a clock read; a NumPy path; a scoped autotuner switch ---------

EVAL_TIMED = """\
import time

import torch
from metrics import MetricLogger


@torch.no_grad()
def evaluate(model, loader, device):
    logger = MetricLogger()
    for image, targets in loader:
        model_time = time.time()
        outputs = model(image.to(device))
        model_time = time.time() - model_time
        logger.update(model_time=model_time)
"""


def test_tl101_a_logger_given_only_a_clock_read_has_nothing_to_wait_for(runner, workdir):
    (workdir / "metrics.py").write_text(METRICS)
    (workdir / "engine.py").write_text(EVAL_TIMED)
    assert _concise(runner, "--select", "TL101", ".") == []
    # the outputs themselves: tensors
    (workdir / "engine.py").write_text(EVAL_TIMED.replace("logger.update(model_time=model_time)",
                                                          "logger.update(score=outputs.max())"))
    assert _concise(runner, "--select", "TL101", ".") == ["metrics.py:11:21: TL101"]


INCEPTION = """\
import numpy as np
import torch


def get_inception_score(model, images, use_torch=False):
    preds = []
    for start in range(0, len(images), 50):
        batch = torch.from_numpy(images[start:start + 50]).cuda()
        pred = model(batch)[0]
        if use_torch:
            preds.append(pred)
        else:
            preds.append(pred.cpu().numpy())
    return torch.cat(preds) if use_torch else np.concatenate(preds)


def train(model, loader, optimizer, images):
    for x in loader:
        optimizer.zero_grad()
        model(x.cuda()).sum().backward()
        optimizer.step()
        get_inception_score(model, images)
"""


def test_tl102_the_numpy_branch_of_a_use_torch_switch_is_the_users_choice():
    assert found(INCEPTION, "TL102", path="score.py") == []


def test_tl102_the_same_copy_without_the_switch_is_reported():
    code = INCEPTION.replace("        if use_torch:\n            preds.append(pred)\n        else:\n            ",
                             "        ")
    assert found(code, "TL102", path="score.py") == [("TL102", 10)]


VALIDATE = """\
import torch


def validate(generator, valloader):
    generator.eval()
    torch.backends.cudnn.benchmark = False
    with torch.no_grad():
        for mel, audio in valloader:
            generator(mel.cuda())
    torch.backends.cudnn.benchmark = True


def train(generator, loader, optimizer, valloader):
    torch.backends.cudnn.benchmark = True
    for mel, audio in loader:
        optimizer.zero_grad()
        generator(mel.cuda()).mean().backward()
        optimizer.step()
    validate(generator, valloader)
"""


def test_tl501_the_autotuner_turned_off_for_one_validation_pass_only():
    assert found(VALIDATE, "TL501") == []


def test_tl501_turned_off_and_left_off_is_reported():
    code = VALIDATE.replace("    torch.backends.cudnn.benchmark = True\n\n\ndef train", "\n\ndef train")
    assert found(code, "TL501") == [("TL501", 6)]
