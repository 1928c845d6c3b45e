"""Precision on projects never seen before (set JJJ: sd-scripts, threestudio,
CogVideo, Open-Sora, Wonder3D, IP-Adapter, StableCascade, SAM 2...;
docs/precision.md).  Synthetic examples written for these tests, each with the
near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint
from tests.test_precision_set_aaa import _concise

# -- a library module's `__main__` self-test: a few steps on random inputs -------------

UNET = """\
import time

import torch
from torch import nn


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x, t, ctx):
        return self.conv(x)


if __name__ == "__main__":
    unet = UNet().to("cuda")
    unet.train()
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    steps = 10
    for step in range(steps):
        if step == 1:
            time_start = time.perf_counter()
        x = torch.randn(1, 4, 128, 128).cuda()
        t = torch.randint(low=0, high=10, size=(1,), device="cuda")
        ctx = torch.randn(1, 77, 2048).cuda()
        output = unet(x, t, ctx)
        loss = torch.nn.functional.mse_loss(output, torch.randn_like(output))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(time.perf_counter() - time_start)
"""


def test_a_model_files_self_test_on_random_inputs_is_not_the_programs_training():
    # sd-scripts' sdxl_original_unet.py: the program imports the class; the block checks its memory
    assert codes(lint(UNET, select=["TL201", "TL501", "TL505"])) == []


def test_a_training_script_on_random_data_still_trains():
    # no class of its own: the script is the program (a synthetic benchmark that users run)
    script = "import time\n\nimport torch\nfrom models import UNet\n\n" + UNET[UNET.index("if __name__"):]
    assert codes(lint(script, select=["TL201"])) == ["TL201", "TL201"]


def test_a_self_test_over_a_loader_is_a_loop_over_data():
    over_data = UNET.replace("for step in range(steps):", "for step, batch in enumerate(loader):")
    assert codes(lint(over_data, select=["TL201"])) == ["TL201", "TL201"]


def test_a_self_test_without_random_inputs_is_not_made_up():
    # the loop reads real inputs (a file per step): its copies are the block's work
    real = UNET.replace("x = torch.randn(1, 4, 128, 128).cuda()", "x = torch.load(f'x{step}.pt').cuda()").replace(
        "ctx = torch.randn(1, 77, 2048).cuda()", "ctx = torch.zeros(1, 77, 2048).cuda()").replace(
        'torch.randint(low=0, high=10, size=(1,), device="cuda")', "step").replace(
        "torch.randn_like(output)", "output.detach()")
    assert "randn" not in real and "randint" not in real
    assert codes(lint(real, select=["TL201"])) == ["TL201"]


def test_a_training_loop_outside_the_main_block_still_counts():
    in_function = UNET.replace('if __name__ == "__main__":', "def main():") + '\n\nif __name__ == "__main__":\n    main()\n'
    assert codes(lint(in_function, select=["TL201"])) == ["TL201", "TL201"]
    # (ten steps are a short run, which compiling does not repay: TL505 needs a long one)
    assert codes(lint(in_function, select=["TL501", "TL505"])) == ["TL501"]
    longer = in_function.replace("steps = 10", "steps = 100_000")
    assert codes(lint(longer, select=["TL501", "TL505"])) == ["TL501", "TL505"]


# -- a command-line option that is off unless the user gives it ---------------------

OPTION = """\
import argparse

import torch


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--noise_offset", type=float, default=None)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--debias", action="store_true")
    parser.add_argument("--keep", action="store_false")
    parser.add_argument("steps", type=int)
    return parser.parse_args()


def train(args, model, loader, optimizer, device):
    for latents in loader:
        latents = latents.to(device)
        noise = torch.randn_like(latents)
        if args.noise_offset:
            noise += args.noise_offset * torch.randn((latents.shape[0], 4, 1, 1)).to(device)
        if args.debias and args.noise_offset is not None:
            noise -= torch.randn((latents.shape[0], 4, 1, 1)).to(device)
        if args.log_every > 0:
            noise *= torch.ones(latents.shape[0]).to(device).mean()
        if args.keep:
            noise *= torch.ones(latents.shape[0]).to(device).mean()
        if args.steps:
            noise *= torch.ones(latents.shape[0]).to(device).mean()
        model(latents + noise).backward()
        optimizer.step()
"""


def test_code_under_an_option_off_by_default_runs_only_when_asked():
    # IP-Adapter's `if args.noise_offset:` with `default=None`; a store_true flag too
    assert [line for _, line in _found(OPTION, "TL201")] == [25, 27, 29]  # on by default, a store_false, positional


def test_the_options_a_module_turns_off(tmp_path):
    import libcst as cst

    from torchlint.rules._frequency import cli_options_off

    assert cli_options_off(cst.parse_module(OPTION)) == {"noise_offset", "debias"}
    assert cli_options_off(cst.parse_module(
        "p.add_argument('-n', '--num-noise', dest='nn', type=int, default=0)\n"
        "p.add_argument('--x', required=True)\np.add_argument('--y', default=0.5)\n"
        "p.add_argument('--z', action='count')\n")) == {"nn", "z"}


# -- a method called on a network the command line picks ------------------------------

NETWORK = """\
import torch


class LoRANetwork(torch.nn.Module):
    def apply_max_norm_regularization(self, max_norm_value, device):
        norms = []
        for i in range(len(self.keys)):
            norm = self.weights[i].norm()
            ratio = torch.clamp(norm, max=max_norm_value).cpu() / norm.cpu()
            norms.append((norm * ratio).item())
        return sum(norms) / len(norms), max(norms)
"""

TRAIN_NETWORK = """\
import argparse
import importlib


def train(args, loader, optimizer, accelerator):
    network_module = importlib.import_module(args.network_module)
    network = network_module.create_network()
    for batch in loader:
        network(batch).backward()
        optimizer.step()
        if args.scale_weight_norms:
            keys_scaled, mean_norm, maximum_norm = accelerator.unwrap_model(network).apply_max_norm_regularization(
                args.scale_weight_norms, accelerator.device)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale_weight_norms", type=float, default=None)
    parser.add_argument("--network_module", type=str, default="networks.lora")
    train(parser.parse_args(), [], None, None)
"""


def test_a_method_of_a_network_picked_by_name_runs_as_its_call_site_says(runner, workdir):
    # sd-scripts: `--scale_weight_norms` is off unless given, so the norms' syncs are too
    (workdir / "networks").mkdir()
    (workdir / "networks" / "lora.py").write_text(NETWORK)
    (workdir / "train_network.py").write_text(TRAIN_NETWORK)
    assert _concise(runner, "--select", "TL101,TL102", ".") == []
    # the same call every step: the method runs every step
    (workdir / "train_network.py").write_text(TRAIN_NETWORK.replace("        if args.scale_weight_norms:\n", "        if True:\n"))
    assert _concise(runner, "--select", "TL101,TL102", ".") == [
        "networks/lora.py:9:21: TL102", "networks/lora.py:9:67: TL102", "networks/lora.py:10:26: TL101"]


def test_a_short_method_name_is_no_evidence_of_the_receiver(runner, workdir):
    (workdir / "networks").mkdir()
    (workdir / "networks" / "lora.py").write_text(NETWORK.replace("apply_max_norm_regularization", "regularize"))
    (workdir / "train_network.py").write_text(TRAIN_NETWORK.replace("apply_max_norm_regularization", "regularize"))
    # (the method's own loop, of unknown frequency, still counts as a step loop, as before)
    assert len(_concise(runner, "--select", "TL101,TL102", ".")) == 3


# -- an error path -----------------------------------------------------------------------

LOAD = """\
import torch
from PIL import Image


def evaluate(model, names, transform):
    for name in names:
        try:
            img = transform(Image.open(name)).cuda()
        except Exception as e:
            print("Failed at loading %s" % name, e)
            img = torch.zeros(1, 3, 256, 256).cuda()
            raise
        model(img)
"""


def test_an_except_block_that_raises_runs_when_something_failed():
    assert _found(LOAD, "TL201") == []
    # one that carries on runs whenever the input is bad: every such step
    assert _found(LOAD.replace("            raise\n", ""), "TL201") == [("TL201", 11)]


# -- a comment that says why the autotuner is off -----------------------------------------

BENCHMARK_OFF = """\
import torch
from torch import nn

torch.backends.cudnn.benchmark = False  # True leads to slow down in conv3d


def main(loader):
    model = nn.Conv3d(3, 8, 3).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        model(x.cuda()).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main([])
"""


def test_a_benchmark_setting_with_its_reason_written_down_is_a_choice():
    assert _found(BENCHMARK_OFF, "TL501") == []
    above = BENCHMARK_OFF.replace("torch.backends.cudnn.benchmark = False  # True leads to slow down in conv3d",
                                  "# variable clip lengths: autotuning each one costs more\ntorch.backends.cudnn.benchmark = False")
    assert _found(above, "TL501") == []
    bare = BENCHMARK_OFF.replace("  # True leads to slow down in conv3d", "")
    assert _found(bare, "TL501") == [("TL501", 4)]


# -- a gradient of a gradient --------------------------------------------------------------

NEUS = """\
import torch
from torch import nn


class SDFNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(3, 1)

    def gradient(self, x):
        x.requires_grad_(True)
        y = self.net(x)
        return torch.autograd.grad(y, x, torch.ones_like(y), create_graph=True)[0]
"""

RUNNER = """\
import torch
from models.fields import SDFNetwork


def train(loader):
    sdf = SDFNetwork().cuda()
    optimizer = torch.optim.Adam(sdf.parameters())
    for x in loader:
        x = x.cuda()
        loss = (sdf.gradient(x).norm(dim=-1) - 1).pow(2).mean()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    train([])
"""


def test_an_eikonal_loss_is_no_program_to_compile(runner, workdir):
    # Wonder3D's NeuS: torch.compile does not support double backward
    (workdir / "models").mkdir()
    (workdir / "models" / "fields.py").write_text(NEUS)
    (workdir / "exp_runner.py").write_text(RUNNER)
    assert _concise(runner, "--select", "TL505", ".") == []
    (workdir / "models" / "fields.py").write_text(NEUS.replace("create_graph=True", "retain_graph=True"))
    assert _concise(runner, "--select", "TL505", ".") == ["exp_runner.py:11:9: TL505"]
    # and in the program's own module
    (workdir / "exp_runner.py").write_text(RUNNER + "\n\ndef penalty(y, x):\n    return torch.autograd.grad(y, x, create_graph=True)\n")
    assert _concise(runner, "--select", "TL505", ".") == []


def _found(code: str, select: str):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path="train.py")]


# -- a loop over one image's detections inside a loop that writes each image out -------------

MASKS = """\
import cv2
import torch


def write_masks(model, files, device):
    for name in files:
        im = cv2.imread(name)
        keep = torch.ones(im.shape[0], im.shape[1], device=device)
        pred = model([torch.from_numpy(im).to(device)])[0]
        for i in range(pred["masks"].size(0)):
            if pred["scores"][i].item() > 0.5 and pred["labels"][i].item() == 1:
                keep[pred["masks"][i, 0] > 0.5] = 0.0
        cv2.imwrite(name + ".png", keep.cpu().numpy())
"""


def test_reads_in_a_loop_inside_one_that_waits_for_each_image_add_no_wait():
    # svox2's run_colmap.py: the image's mask goes to OpenCV, so each image waits once anyway
    assert _found(MASKS, "TL101") == []
    # without the write-out, the detections' reads are the only waits: reported
    assert _found(MASKS.replace('        cv2.imwrite(name + ".png", keep.cpu().numpy())\n', ""), "TL101") == [
        ("TL101", 11), ("TL101", 11)]


# -- an option of a class that its constructor leaves off ------------------------------------

LOSS = """\
import torch


class DiffusionLoss(torch.nn.Module):
    def __init__(self, sigma_sampler, offset_noise_level=0.0):
        super().__init__()
        self.sigma_sampler = sigma_sampler
        self.offset_noise_level = offset_noise_level

    def forward(self, network, input):
        noise = torch.randn_like(input)
        if self.offset_noise_level > 0.0:
            noise = noise + torch.randn(input.shape[0]).to(input.device)[:, None] * self.offset_noise_level
        return (network(input + noise) - input).pow(2).mean()
"""


def test_a_constructor_default_is_no_evidence_that_an_option_is_off():
    # configuration files set them (WeNet's `n_negatives: 100` against `n_negatives=0`)
    assert _found(LOSS, "TL201") == [("TL201", 13)]
