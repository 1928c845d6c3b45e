"""Precision on set EE (GLIP, nanoVLM, VideoMAEv2, DynamicViT, iTransformer,
stablediffusion, Neighborhood-Attention-Transformer, PaLM-pytorch; synthetic
examples written here, not their code): a threshold taken from a host copy,
values handed to OpenCV, the anchor count exchanged with all_gather, and a
memory measurement script.  Each with the near-miss that must still be
reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "inference.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


THRESHOLD = """
import torch


def select_top(results, k):
    for result in results:
        scores = result.get_field("scores")
        thresh, _ = torch.kthvalue(scores.cpu(), k)
        keep = scores >= thresh.item()
        result.keep(keep)
"""


def test_a_kthvalue_of_a_host_copy_is_a_host_value():
    assert found(THRESHOLD, "TL101") == []


def test_a_kthvalue_of_the_device_scores_is_reported():
    assert found(THRESHOLD.replace("scores.cpu()", "scores"), "TL101") == [("TL101", 9)]


DRAW = """
import cv2
import torch


class Demo:
    def overlay_centers(self, image, predictions):
        for cord in predictions.get_field("centers"):
            cord = cord.to(torch.int64)
            image = cv2.circle(image, (cord[0].item(), cord[1].item()), 2, (255, 0, 0), 20)
        return image
"""


def test_values_handed_to_opencv_are_the_point():
    assert found(DRAW, "TL101") == []


def test_the_same_values_kept_in_a_list_are_reported():
    code = DRAW.replace("image = cv2.circle(image, (cord[0].item(), cord[1].item()), 2, (255, 0, 0), 20)",
                        "self.points.append((cord[0].item(), cord[1].item()))")
    assert found(code, "TL101") == [("TL101", 10), ("TL101", 10)]


PAD = """
import torch
import torch.distributed as dist


def pad_anchors(positive_map, new_positive_indices, world_size, steps):
    for step in range(steps):
        max_len = max(len(p) for p in new_positive_indices)
        num_anchors = torch.tensor(max_len, device=positive_map.device)
        num_anchors_full = [torch.zeros_like(num_anchors) for _ in range(world_size)]
        dist.all_gather(num_anchors_full, num_anchors)
        max_anchor_num = max([anchor.item() for anchor in num_anchors_full])
        positive_map = positive_map[:, :max_anchor_num]
    return positive_map
"""


def test_a_count_exchanged_with_all_gather_is_the_protocol():
    assert found(PAD, "TL101") == []


def test_other_gathered_values_are_reported():
    code = PAD.replace("num_anchors_full", "gathered")
    assert found(code, "TL101") == [("TL101", 12)]


VRAM = """
import torch
from torch.utils.data import DataLoader


def measure(model, dataset, device, num_iterations):
    loader = DataLoader(dataset, batch_size=8, num_workers=2, pin_memory=True)
    for i, batch in enumerate(loader):
        if i >= num_iterations:
            break
        images = batch["image"].to(device)
        model(images).sum().backward()
    return torch.cuda.max_memory_allocated()
"""


def test_a_memory_measurement_script_is_the_measurement():
    assert found(VRAM, "TL204", path="eval/measure_vram.py") == []


def test_the_same_loop_in_a_training_script_is_reported():
    assert found(VRAM, "TL204", path="eval/train_vlm.py") == [("TL204", 11)]


# -- set FF (llm-awq, DINO, streaming-llm, MSN, ImageBind): layers built in a loop ---------------

LAYERS = """
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, config, max_len, device):
        super().__init__()
        self.cache_k = torch.zeros(config.batch, max_len, config.dim).to(device)


class Model(nn.Module):
    def __init__(self, config, device):
        super().__init__()
        self.layers = nn.ModuleList([Attention(config, 4096, device) for _ in range(config.n_layers)])
"""


def test_a_cache_allocated_while_building_layers_is_made_once():
    assert found(LAYERS, "TL201") == []


def test_a_loop_that_runs_the_layers_is_per_step():
    code = LAYERS + """
    def forward(self, x):
        for layer in self.layers:
            x = layer(x) + torch.zeros(x.shape).to(x.device)
        return x
"""
    assert found(code, "TL201") == [("TL201", 19)]
