"""Whole-program settings made in another module of the run (TL501, TL503-TL505).

The project index reads the top-level code of the modules a file imports, the
functions it calls from them, and the modules that import it
(``rules/_project_text.program_facts``).
"""

from __future__ import annotations

import pytest

from tests.test_cli import run

TRAIN = """\
import torch
from torch import nn
from distributed import parallelize_model


def main():
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
    model = parallelize_model(model)
    optimizer = torch.optim.AdamW(model.parameters())
    loader = torch.utils.data.DataLoader(make_dataset(), batch_size=64, num_workers=4)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
"""

# FSDP2's mixed precision and `model.compile()`, as lingua's `parallelize_model` does.
DISTRIBUTED = """\
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def parallelize_model(model, compile=True):
    fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
    if compile:
        model.compile()
    return model


def unrelated(text):
    return text.upper()
"""

SELECT = ("--select", "TL503,TL504,TL505", "--output-format", "concise")


def _codes(result) -> list:
    return sorted(line.split(": ")[1].split(" ")[0] for line in result.stdout.splitlines() if ": TL" in line)


def test_settings_made_by_a_function_the_script_calls(runner, workdir):
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "distributed.py").write_text(DISTRIBUTED)
    # alone, the script shows no setting: all three report
    assert _codes(run(runner, "check", *SELECT, "train.py")) == ["TL503", "TL504", "TL505"]
    # with the module whose `parallelize_model` it calls: bfloat16 parameters
    # (so no float32 matmuls for TF32 to speed up either), compiled
    assert _codes(run(runner, "check", *SELECT, ".")) == []
    full = run(runner, "check", *SELECT, "--output-format", "json", ".").stdout
    assert full.strip() == "[]"


def test_a_function_imported_but_never_called_says_nothing(runner, workdir):
    (workdir / "train.py").write_text(TRAIN.replace("    model = parallelize_model(model)\n", ""))
    (workdir / "distributed.py").write_text(DISTRIBUTED)
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]


def test_a_called_function_that_sets_nothing_says_nothing(runner, workdir):
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "distributed.py").write_text(
        "import re\n\n\ndef parallelize_model(model):\n"
        "    pattern = re.compile('amp_to_db')  # amplitude, not AMP; a regex, not compilation\n"
        "    half_width = 3\n    return model\n"
    )
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]


def test_settings_made_on_import(runner, workdir):
    # `import setup_env` runs its top-level code: TF32 on for the program
    (workdir / "setup_env.py").write_text("import torch\n\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    (workdir / "distributed.py").write_text("def parallelize_model(model):\n    return model\n")
    (workdir / "train.py").write_text(TRAIN.replace("import torch\n", "import torch\nimport setup_env\n", 1))
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL504", "TL505"]


def test_a_function_compiled_on_import_is_not_the_model(runner, workdir):
    (workdir / "distributed.py").write_text(
        "import torch\n\n\ndef attention(q, k, v):\n    return q\n\n\nattention = torch.compile(attention)\n\n\n"
        "def parallelize_model(model):\n    return model\n"
    )
    (workdir / "train.py").write_text(TRAIN)
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]


AGENT = """\
import torch
import torch.nn.functional as F


class Agent:
    def __init__(self, policy, optimizer):
        self.policy, self.optimizer = policy.cuda(), optimizer

    def update(self, states, targets):
        loss = F.mse_loss(self.policy(states.cuda()), targets.cuda())
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
"""


def test_the_program_that_imports_the_step_steps_a_simulator(runner, workdir):
    (workdir / "agent.py").write_text(AGENT)
    (workdir / "main.py").write_text(
        "import gym\nfrom agent import Agent\n\nenv = gym.make('HalfCheetah-v2')\nagent = Agent(policy, optimizer)\n"
    )
    assert _codes(run(runner, "check", "--select", "TL504", "--output-format", "concise", "agent.py")) == ["TL504"]
    # its step time is the simulator's: autocast buys nothing measurable
    assert _codes(run(runner, "check", "--select", "TL504", "--output-format", "concise", ".")) == []


def test_an_importer_without_a_simulator_leaves_the_finding(runner, workdir):
    (workdir / "agent.py").write_text(AGENT)
    (workdir / "main.py").write_text("from agent import Agent\n\nagent = Agent(policy, optimizer)\n")
    assert _codes(run(runner, "check", "--select", "TL504", "--output-format", "concise", ".")) == ["TL504"]


def test_the_nearest_module_of_a_name_is_the_one_imported(runner, workdir):
    # `from models import Net` in a script resolves to the script's own
    # directory's models.py, not to a package's `fp16/models.py`
    (workdir / "fp16").mkdir()
    (workdir / "fp16" / "models.py").write_text("import torch\n\ntorch.set_default_dtype(torch.float16)\n")
    (workdir / "models.py").write_text("from torch import nn\n\nNet = nn.Linear\n")
    (workdir / "distributed.py").write_text("def parallelize_model(model):\n    return model\n")
    (workdir / "train.py").write_text(TRAIN.replace("import torch\n", "import torch\nfrom models import Net\n", 1))
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]


def test_the_cache_follows_the_other_module(runner, workdir):
    (workdir / "train.py").write_text(TRAIN)
    (workdir / "distributed.py").write_text("def parallelize_model(model):\n    return model\n")
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]
    (workdir / "distributed.py").write_text(DISTRIBUTED)  # the script itself is unchanged
    assert _codes(run(runner, "check", *SELECT, ".")) == []
    (workdir / "distributed.py").write_text("def parallelize_model(model):\n    return model\n")
    assert _codes(run(runner, "check", *SELECT, ".")) == ["TL503", "TL504", "TL505"]


BACKBONE = """\
import torch.nn as nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2), nn.BatchNorm2d(64), nn.ReLU())

    def forward(self, x):
        return self.stem(x)
"""

PARTIAL_BN = """\
import torch.nn as nn
from backbone import Backbone


class VideoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.base_model = Backbone()

    def train(self, mode=True):
        super().train(mode)
        for m in self.base_model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
                m.weight.requires_grad = False
                m.bias.requires_grad = False
        return self
"""


def test_tl401_is_silent_where_the_importing_model_freezes_batchnorm(runner, workdir):
    (workdir / "backbone.py").write_text(BACKBONE)
    (workdir / "models.py").write_text(PARTIAL_BN)
    tl401 = ("--select", "TL401", "--output-format", "concise")
    assert _codes(run(runner, "check", *tl401, "backbone.py")) == ["TL401"]
    # partial BN: running statistics frozen while training, so the bias does not cancel
    assert _codes(run(runner, "check", *tl401, ".")) == []


def test_tl401_a_freeze_helper_that_may_never_run_leaves_the_finding(runner, workdir):
    (workdir / "backbone.py").write_text(BACKBONE)
    (workdir / "models.py").write_text(PARTIAL_BN.replace("def train(self, mode=True):", "def freeze_bn(self, mode=True):"))
    assert _codes(run(runner, "check", "--select", "TL401", "--output-format", "concise", ".")) == ["TL401"]


DETECTOR = """\
import torch
from torch.hub import load_state_dict_from_url
from backbone import Backbone

URL = "https://example.org/detector.pth"


class Detector(torch.nn.Module):
    def __init__(self, pretrained=True):
        super().__init__()
        self.model = Backbone()
        if pretrained:
            state = load_state_dict_from_url(URL, map_location="cpu")
            self.model.load_state_dict(state["model"])
        self.eval()
"""


def test_tl401_is_silent_where_an_importer_loads_downloaded_weights(runner, workdir):
    # kornia's SOLD2: the backbone's layers are fixed by the published checkpoint
    (workdir / "backbone.py").write_text(BACKBONE)
    (workdir / "detector.py").write_text(DETECTOR)
    assert _codes(run(runner, "check", "--select", "TL401", "--output-format", "concise", ".")) == []


@pytest.mark.parametrize("change", [
    ('self.model.load_state_dict(state["model"])', 'self.model.load_state_dict(state["model"], strict=False)'),
    ("state = load_state_dict_from_url(URL, map_location=\"cpu\")", "state = torch.load(URL)"),
])
def test_tl401_an_importer_that_loads_loosely_or_its_own_file_leaves_the_finding(runner, workdir, change):
    (workdir / "backbone.py").write_text(BACKBONE)
    (workdir / "detector.py").write_text(DETECTOR.replace(*change))
    assert _codes(run(runner, "check", "--select", "TL401", "--output-format", "concise", ".")) == ["TL401"]


MISC = """\
import torch


class NestedTensor(object):
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def to(self, device):
        return NestedTensor(self.tensors.to(device), self.mask.to(device))


def nested_tensor_from_tensor_list(tensor_list):
    tensor = torch.stack(tensor_list)
    return NestedTensor(tensor, torch.zeros_like(tensor, dtype=torch.bool))


def collate_fn(batch):
    batch = list(zip(*batch))
    batch[0] = nested_tensor_from_tensor_list(batch[0])
    return tuple(batch)
"""

DETR_MAIN = """\
import torch
from torch.utils.data import DataLoader
import util.misc as utils


def main(dataset, model, device):
    loader = DataLoader(dataset, batch_size=2, collate_fn=utils.collate_fn, num_workers=2)
    for samples, targets in loader:
        samples = samples.to(device)
        model(samples)


if __name__ == "__main__":
    main(make_dataset(), make_model(), "cuda")
"""


def test_tl202_a_batch_class_without_pin_memory_from_another_module(runner, workdir):
    (workdir / "util").mkdir()
    (workdir / "util" / "__init__.py").write_text("")
    (workdir / "util" / "misc.py").write_text(MISC)
    (workdir / "main.py").write_text(DETR_MAIN)
    tl202 = ("--select", "TL202", "--output-format", "concise")
    assert _codes(run(runner, "check", *tl202, "main.py")) == ["TL202"]
    # NestedTensor has no pin_memory(): pin_memory=True would leave the images pageable
    assert _codes(run(runner, "check", *tl202, ".")) == []


def test_tl202_a_batch_class_that_pins_itself_is_reported(runner, workdir):
    (workdir / "util").mkdir()
    (workdir / "util" / "__init__.py").write_text("")
    pinnable = MISC.replace(
        "    def to(self, device):",
        "    def pin_memory(self):\n        return NestedTensor(self.tensors.pin_memory(), self.mask.pin_memory())\n\n"
        "    def to(self, device):",
    )
    (workdir / "util" / "misc.py").write_text(pinnable)
    (workdir / "main.py").write_text(DETR_MAIN)
    assert _codes(run(runner, "check", "--select", "TL202", "--output-format", "concise", ".")) == ["TL202"]


def test_tl202_a_batch_class_of_the_same_module(runner, workdir):
    local = MISC + "\n\n" + DETR_MAIN.replace("import util.misc as utils\n", "").replace("utils.collate_fn", "collate_fn")
    (workdir / "main.py").write_text(local)
    assert _codes(run(runner, "check", "--select", "TL202", "--output-format", "concise", "main.py")) == []
    plain = local.replace("batch[0] = nested_tensor_from_tensor_list(batch[0])", "batch[0] = torch.stack(batch[0])")
    (workdir / "main.py").write_text(plain)
    assert _codes(run(runner, "check", "--select", "TL202", "--output-format", "concise", "main.py")) == ["TL202"]
