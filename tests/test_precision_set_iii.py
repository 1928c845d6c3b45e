"""Precision on projects never seen before (set III: EAGLE, instant-nsr-pl,
NeRF++, VolSDF, Diffusion Policy...; docs/precision.md).  Synthetic examples
written for these tests, each with the near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint

# -- a benchmark run on load: its loops time the model, they are no steps -------------

TUNED_ON_LOAD = """\
import time

import torch


class DraftModel(torch.nn.Module):
    @classmethod
    def from_pretrained(cls, path, total_token=-1):
        model = cls()
        if total_token == -1:
            device = model.weight.device
            times = []
            for length in [40, 48, 50, 56, 60]:
                input_ids = torch.randint(0, 32000, (1, length)).to(device)
                torch.cuda.synchronize()
                start_time = time.time()
                for _ in range(20):
                    torch.cuda.synchronize()
                    with torch.no_grad():
                        model(input_ids)
                    torch.cuda.synchronize()
                torch.cuda.synchronize()
                times.append(time.time() - start_time)
            model.total_tokens = [40, 48, 50, 56, 60][times.index(min(times))]
        return model
"""


def test_a_timed_tuning_loop_is_a_measurement():
    assert codes(lint(TUNED_ON_LOAD, select=["TL201"])) == []
    # (nor are the syncs of the repetitions timed by the clock readings around
    # their loop: the per-iteration sync makes the figure a latency, on purpose)
    assert codes(lint(TUNED_ON_LOAD, select=["TL103"])) == []


TIMED_TRAINING = """\
import time

import torch


def train(model, loader, optimizer, device):
    for images, labels in loader:
        torch.cuda.synchronize()
        start = time.time()
        noise = torch.randn(images.shape).to(device)
        loss = model(images.to(device) + noise, labels.to(device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(time.time() - start)
"""


def test_a_timed_training_loop_still_is_a_step():
    # timing each training step does not make its work a benchmark
    assert codes(lint(TIMED_TRAINING, select=["TL201"])) == ["TL201"]
    # nor does timing each batch of an evaluation over a loader (YOLO's test loop)
    evaluation = TIMED_TRAINING.replace("        loss.backward()\n        optimizer.step()\n", "")
    assert codes(lint(evaluation, select=["TL201"])) == ["TL201"]
    # timing forward passes over a fixed count is a benchmark
    benchmark = evaluation.replace("    for images, labels in loader:\n", "    images, labels = next(iter(loader))\n"
                                   "    for _ in range(20):\n")
    assert benchmark != evaluation
    assert codes(lint(benchmark, select=["TL201"])) == []


# -- a framework's epoch hook: its loops go over the epoch's outputs --------------------

EPOCH_END = """\
import torch
import pytorch_lightning as pl


class NeRFSystem(pl.LightningModule):
    def validation_step(self, batch, batch_idx):
        out = self(batch)
        psnr = ((out - batch["rgb"]) ** 2).mean()
        return {"psnr": psnr, "index": batch["index"]}

    def validation_epoch_end(self, out):
        out = self.all_gather(out)
        out_set = {}
        for step_out in out:
            for oi, index in enumerate(step_out["index"]):
                out_set[index[0].item()] = {"psnr": step_out["psnr"][oi]}
        psnr = torch.mean(torch.stack([o["psnr"] for o in out_set.values()]))
        self.log("val/psnr", psnr)
"""


def test_item_over_the_gathered_outputs_at_the_end_of_an_epoch():
    assert codes(lint(EPOCH_END, select=["TL101"])) == []


def test_an_evaluation_over_a_loader_in_an_epoch_hook_is_per_step():
    over_loader = EPOCH_END.replace(
        "        for step_out in out:\n            for oi, index in enumerate(step_out[\"index\"]):\n"
        "                out_set[index[0].item()] = {\"psnr\": step_out[\"psnr\"][oi]}\n",
        "        for batch in self.trainer.val_dataloaders:\n"
        "            psnr = self.validation_step(batch.cuda(), 0)[\"psnr\"]\n"
        "            out_set[len(out_set)] = {\"psnr\": psnr.item()}\n")
    assert over_loader != EPOCH_END
    assert codes(lint(over_loader, select=["TL101"])) == ["TL101"]
