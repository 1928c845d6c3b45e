"""Precision on sets FFF and GGG (code that nothing in the project runs; a
repository of several projects with same-named modules; greedy decoding that
branches on the token it read; a training loop that flattens every gradient
for an all-reduce of its own; an option off by default; a DDIM sampler's
setup; synthetic examples written here, not the projects' code).  Each with
the near-miss that must still be reported."""

from __future__ import annotations

from tests.test_cli import run
from tests.test_precision_set_aaa import _concise, found


# -- the project index: each script imports its own folder's module ---------------

ENGINE = """\
import torch


def train_one_epoch(model, loader, optimizer, accum_iter):
    for step, (x, y) in enumerate(loader):
        loss = model(x, y) / accum_iter
        loss.backward()
        if (step + 1) % accum_iter == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

MAIN_DDP = """\
import torch
from engine_finetune import train_one_epoch


def main(model, loader, optimizer, rank):
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    train_one_epoch(model, loader, optimizer, 4)
"""

MAIN_FSDP = """\
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from engine_finetune import train_one_epoch


def main(model, loader, optimizer):
    model = FSDP(model)
    train_one_epoch(model, loader, optimizer, 4)
"""


def test_tl602_each_script_reaches_the_engine_beside_it(runner, workdir):
    for project, main in (("adapter", MAIN_DDP), ("gorilla/finetune", MAIN_FSDP)):
        (workdir / project).mkdir(parents=True)
        (workdir / project / "engine_finetune.py").write_text(ENGINE)
        (workdir / project / "main_finetune.py").write_text(main)
    # FSDP's project: its engine is not called by the other project's DDP script
    assert _concise(runner, "--select", "TL602", ".") == ["adapter/engine_finetune.py:7:9: TL602"]


def test_tl602_a_script_that_imports_the_other_folders_module_by_its_path(runner, workdir):
    (workdir / "gorilla" / "finetune").mkdir(parents=True)
    (workdir / "gorilla" / "__init__.py").write_text("")
    (workdir / "gorilla" / "finetune" / "__init__.py").write_text("")
    (workdir / "gorilla" / "finetune" / "engine_finetune.py").write_text(ENGINE)
    (workdir / "engine_finetune.py").write_text(ENGINE)
    (workdir / "main_finetune.py").write_text(
        MAIN_DDP.replace("from engine_finetune", "from gorilla.finetune.engine_finetune"))
    # the import names the package's module, not the one beside the script
    assert _concise(runner, "--select", "TL602", ".") == ["gorilla/finetune/engine_finetune.py:7:9: TL602"]


# -- TL101: greedy decoding branches on the token it read --------------------------

GREEDY = """\
import torch


def greedy_search(model, encoder_out, blank):
    hyps = []
    pred = torch.tensor([[blank]], device=encoder_out.device)
    for t in range(encoder_out.size(1)):
        probs = model.joint(encoder_out[:, t], model.predictor(pred)).log_softmax(dim=-1)
        token = probs.argmax(dim=-1).squeeze()
        if token != blank:
            hyps.append(token.item())
            pred = token.reshape(1, 1)
    return hyps
"""


def test_tl101_greedy_decoding_waits_on_its_token_every_step():
    assert found(GREEDY, "TL101") == []


def test_tl101_the_same_read_without_the_branch_is_reported():
    code = GREEDY.replace("        if token != blank:\n            hyps.append", "        hyps.append").replace(
        "            pred = token", "        pred = token")
    assert found(code, "TL101") == [("TL101", 10)]


def test_tl101_a_branch_on_a_host_value_does_not_wait():
    assert found(GREEDY.replace("if token != blank:", "if t != 0:"), "TL101") == [("TL101", 11)]


# -- TL301: gradients flattened for an all-reduce of the loop's own ----------------

FLAT = """\
import torch


def training_loop(phases, loader, num_gpus):
    for batch in loader:
        for phase in phases:
            phase.opt.zero_grad(set_to_none=False)
            phase.loss(batch).backward()
            params = [p for p in phase.module.parameters() if p.grad is not None]
            flat = torch.cat([p.grad.flatten() for p in params])
            if num_gpus > 1:
                torch.distributed.all_reduce(flat)
            phase.opt.step()
"""


def test_tl301_gradients_flattened_for_an_all_reduce_stay_tensors():
    assert found(FLAT, "TL301") == []


def test_tl301_the_same_loop_without_the_flattening_is_reported():
    code = FLAT.replace("            flat = torch.cat([p.grad.flatten() for p in params])\n", "").replace(
        "all_reduce(flat)", "barrier()")
    assert found(code, "TL301") == [("TL301", 7)]


# -- code that nothing in the project runs -----------------------------------------

SAMPLER = """\
import torch
import torch.distributed as dist


def create_named_schedule_sampler(name, diffusion):
    if name == "uniform":
        return UniformSampler(diffusion)
    return LossSecondMomentResampler(diffusion)


class UniformSampler:
    def __init__(self, diffusion):
        self.diffusion = diffusion


class LossAwareSampler:
    def update_with_local_losses(self, local_ts, local_losses):
        gathered = [torch.zeros_like(local_losses) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, local_losses)
        losses = [x.item() for y in gathered for x in y]
        self.update_with_all_losses(local_ts, losses)


class LossSecondMomentResampler(LossAwareSampler):
    def update_with_all_losses(self, ts, losses):
        self.history = (ts, losses)
"""

TRAIN = """\
import torch
from diffusion.timestep_sampler import UniformSampler


def main(model, loader, diffusion):
    sampler = UniformSampler(diffusion)
    for x in loader:
        loss = model(x, sampler)
        loss.backward()
        if hasattr(sampler, "update_with_local_losses"):
            sampler.update_with_local_losses(x, loss.detach())


if __name__ == "__main__":
    main(None, [], None)
"""


def _project(workdir, train: str = TRAIN, sampler: str = SAMPLER) -> None:
    (workdir / "diffusion").mkdir(exist_ok=True)
    (workdir / "diffusion" / "__init__.py").write_text("")
    (workdir / "diffusion" / "timestep_sampler.py").write_text(sampler)
    (workdir / "diffusion" / "gaussian.py").write_text("def q_sample(x, t):\n    return x\n")
    (workdir / "models.py").write_text("import torch\n\n\nclass DiT(torch.nn.Module):\n    pass\n")
    (workdir / "sample.py").write_text("from models import DiT\n\nmodel = DiT()\n")
    (workdir / "train.py").write_text(train)


def test_a_sampler_that_no_program_builds_never_runs(runner, workdir):
    _project(workdir)
    assert _concise(runner, "--select", "TL101", ".") == []


def test_the_same_sampler_built_by_the_training_script_is_reported(runner, workdir):
    _project(workdir, TRAIN.replace("UniformSampler\n", "create_named_schedule_sampler\n").replace(
        "UniformSampler(diffusion)", 'create_named_schedule_sampler("loss-second-moment", diffusion)'))
    assert _concise(runner, "--select", "TL101", ".") == ["diffusion/timestep_sampler.py:20:19: TL101"]


def test_a_file_named_on_the_command_line_is_judged_alone(runner, workdir):
    # pre-commit names the changed files: their users may not be in the run
    _project(workdir)
    assert _concise(runner, "--select", "TL101", "diffusion/timestep_sampler.py", "train.py", "models.py",
                    "sample.py", "diffusion/gaussian.py") == ["diffusion/timestep_sampler.py:20:19: TL101"]


def test_a_noqa_comment_in_code_that_never_runs_is_still_used(runner, workdir):
    _project(workdir, sampler=SAMPLER.replace("for x in y]", "for x in y]  # noqa: TL101"))
    assert _concise(runner, "--select", "TL101,TL001", ".") == []


DROP = """\
import torch


def drop_block_2d(x, block_size):
    H, W = x.shape[2:]
    w_i, h_i = torch.meshgrid(torch.arange(W).to(x.device), torch.arange(H).to(x.device))
    return x * (w_i < block_size)


class DropBlock2d(torch.nn.Module):
    def forward(self, x):
        return drop_block_2d(x, 7)


class DropPath(torch.nn.Module):
    def forward(self, x):
        return x
"""


def test_a_layer_imported_but_never_used_never_runs(runner, workdir):
    _project(workdir)
    (workdir / "layers").mkdir()
    (workdir / "layers" / "drop.py").write_text(DROP)
    (workdir / "backbone.py").write_text("from layers.drop import (\n    DropBlock2d,\n    DropPath,\n)\n\nblock = DropPath()\n")
    assert _concise(runner, "--select", "TL201", ".") == []
    # a backbone that uses it
    (workdir / "backbone.py").write_text("from layers.drop import DropBlock2d\n\nblock = DropBlock2d()\n")
    assert _concise(runner, "--select", "TL201", ".") == ["layers/drop.py:6:31: TL201", "layers/drop.py:6:61: TL201"]


def test_a_packages_interface_is_alive(runner, workdir):
    # a library's users are not in the run: what its __init__.py exports lives
    _project(workdir)
    (workdir / "layers").mkdir()
    (workdir / "layers" / "drop.py").write_text(DROP)
    for init in ("from .drop import DropBlock2d, DropPath\n", "from .drop import *  # noqa\n",
                 "from layers.drop import *\n"):
        (workdir / "layers" / "__init__.py").write_text(init)
        assert _concise(runner, "--select", "TL201", ".") == [
            "layers/drop.py:6:31: TL201", "layers/drop.py:6:61: TL201"], init


def test_a_function_imported_under_another_name_is_used(runner, workdir):
    _project(workdir)
    (workdir / "layers").mkdir()
    (workdir / "layers" / "drop.py").write_text(DROP)
    (workdir / "backbone.py").write_text("from layers.drop import drop_block_2d as drop\n\ny = drop(x, 3)\n")
    assert _concise(runner, "--select", "TL201", ".") == ["layers/drop.py:6:31: TL201", "layers/drop.py:6:61: TL201"]


VARIANT = """\
from torch import nn
from nets.base import BaseNet


class VariantNet(BaseNet):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU())
"""


def test_a_subclass_of_an_imported_class_may_be_picked_by_name(runner, workdir):
    # nnU-Net finds `-tr PretrainedTrainer_X` by searching its trainers' classes
    _project(workdir)
    (workdir / "nets").mkdir()
    (workdir / "nets" / "variant.py").write_text(VARIANT)
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant.py:8:35: TL401"]
    # a plain module that nothing builds
    (workdir / "nets" / "variant.py").write_text(VARIANT.replace("(BaseNet)", "(nn.Module)"))
    assert _concise(runner, "--select", "TL401", ".") == []


def test_a_legacy_module_that_no_file_imports_never_runs(runner, workdir):
    # Medusa's modeling_llama_kv_legacy.py: left behind when its successor took over
    _project(workdir)
    (workdir / "nets").mkdir()
    (workdir / "nets" / "variant_legacy.py").write_text(VARIANT)
    assert _concise(runner, "--select", "TL401", ".") == []
    # not named so, a module nothing imports may be a package's interface (a library's variant)
    (workdir / "nets" / "variant_legacy.py").rename(workdir / "nets" / "variant.py")
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant.py:8:35: TL401"]
    (workdir / "nets" / "variant.py").rename(workdir / "nets" / "variant_legacy.py")
    assert _concise(runner, "--select", "TL401", ".") == []
    # named anywhere (an import, a string, a YAML file), it may run
    (workdir / "configs.yaml").write_text("model: nets.variant_legacy.VariantNet\n")
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant_legacy.py:8:35: TL401"]
    (workdir / "configs.yaml").unlink()
    (workdir / "pyproject.toml").write_text('[project.scripts]\nvariant = "nets.variant_legacy:VariantNet"\n')
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant_legacy.py:8:35: TL401"]
    (workdir / "pyproject.toml").unlink()
    # and so does every module when some file imports modules by computed names
    (workdir / "registry.py").write_text("import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n")
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant_legacy.py:8:35: TL401"]
    (workdir / "registry.py").unlink()
    # and a script runs: top-level code, not only a `__main__` block
    (workdir / "nets" / "variant_legacy.py").write_text(VARIANT + "\nVariantNet().cuda()\n")
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant_legacy.py:8:35: TL401"]


def test_a_registered_layer_is_alive(runner, workdir):
    # a registry builds it from a configuration the run may not hold
    _project(workdir)
    (workdir / "layers").mkdir()
    (workdir / "layers" / "drop.py").write_text(DROP.replace("class DropBlock2d", "@LAYERS.register_module()\nclass DropBlock2d"))
    assert _concise(runner, "--select", "TL201", ".") == ["layers/drop.py:6:31: TL201", "layers/drop.py:6:61: TL201"]


def test_the_cache_follows_a_change_in_another_file(runner, workdir):
    _project(workdir)

    def cached():
        result = run(runner, "check", "--output-format", "concise", "--select", "TL101", ".")
        return [line.split(" ")[0] for line in result.stdout.splitlines() if ": TL" in line]

    assert cached() == [] and cached() == []
    (workdir / "train.py").write_text(TRAIN.replace("UniformSampler\n", "create_named_schedule_sampler\n").replace(
        "UniformSampler(diffusion)", 'create_named_schedule_sampler("loss-second-moment", diffusion)'))
    assert cached() == ["diffusion/timestep_sampler.py:20:19:"]
    assert cached() == ["diffusion/timestep_sampler.py:20:19:"]
    (workdir / "train.py").write_text(TRAIN)
    assert cached() == []


MODELS = """\
from torch import nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU())
"""


def test_a_model_picked_by_a_name_from_the_command_line_is_alive(runner, workdir):
    _project(workdir)
    (workdir / "models.py").write_text(MODELS)
    (workdir / "sample.py").write_text("import models\n\n\ndef build(args):\n    return getattr(models, args.arch)()\n")
    assert _concise(runner, "--select", "TL401", ".") == ["models.py:7:35: TL401"]
    # no lookup by name: nothing builds it
    (workdir / "sample.py").write_text("import models\n\n\ndef build(args):\n    return models\n")
    assert _concise(runner, "--select", "TL401", ".") == []


# -- TL101: a branch the code turns off unless an option asks for it ----------------

TRIGRAMS = """\
import torch


def sample(model, feats, opt={}):
    block_trigrams = opt.get("block_trigrams", 0)
    seq = feats.new_zeros(feats.size(0), 16, dtype=torch.long)
    for t in range(16):
        logprobs = model(feats, seq[:, :t])
        if block_trigrams and t >= 3:
            for i in range(feats.size(0)):
                prev = (seq[i, t - 2].item(), seq[i, t - 1].item())
                logprobs[i] = logprobs[i] - len(prev)
        seq[:, t] = logprobs.argmax(-1)
    return seq
"""


def test_tl101_a_branch_an_option_turns_on_runs_only_when_asked():
    assert found(TRIGRAMS, "TL101") == []
    assert found(TRIGRAMS.replace('opt.get("block_trigrams", 0)', 'getattr(opt, "block_trigrams", False)'),
                 "TL101") == []


def test_tl101_an_option_on_by_default_or_an_optional_input_is_reported():
    on = TRIGRAMS.replace('opt.get("block_trigrams", 0)', 'opt.get("block_trigrams", 1)')
    assert found(on, "TL101") == [("TL101", 11), ("TL101", 11)]
    given = TRIGRAMS.replace('opt.get("block_trigrams", 0)', 'opt.get("block_trigrams", None)')
    assert found(given, "TL101") == [("TL101", 11), ("TL101", 11)]


GRAD_NORM = """\
import torch


def get_grad_norm(parameters):
    total = 0
    for p in parameters:
        total += p.grad.norm().item() ** 2
    return total ** 0.5
"""


def test_a_function_left_behind_by_a_same_named_copy_never_runs(runner, workdir):
    # Swin: main_simmim_pt.py imports get_grad_norm from utils_simmim, not from utils
    _project(workdir)
    (workdir / "utils.py").write_text(GRAD_NORM)
    (workdir / "utils_simmim.py").write_text(GRAD_NORM)
    (workdir / "main_simmim.py").write_text(
        "from utils_simmim import get_grad_norm\n\n\ndef step(model, loader, opt):\n    for x in loader:\n"
        "        model(x).backward()\n        norm = get_grad_norm(model.parameters())\n        opt.step()\n")
    assert _concise(runner, "--select", "TL101", ".") == ["utils_simmim.py:7:18: TL101"]
    (workdir / "main.py").write_text(
        "from utils import get_grad_norm\n\n\ndef step(model, loader, opt):\n    for x in loader:\n"
        "        model(x).backward()\n        norm = get_grad_norm(model.parameters())\n        opt.step()\n")
    assert _concise(runner, "--select", "TL101", ".") == ["utils.py:7:18: TL101", "utils_simmim.py:7:18: TL101"]


# -- set GGG: TL203 on tensors already in memory; a DDIM sampler's setup -------------

INSTRUCTIONS = """\
import torch
from torch.utils.data import DataLoader, Dataset


class InstructionDataset(Dataset):
    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, i):
        input_ids = self._data[i]["input_ids"].type(torch.int64)
        labels = self._data[i]["labels"].type(torch.int64)
        return input_ids, labels


def train(model, optimizer, data):
    loader = DataLoader(InstructionDataset(data), batch_size=4, shuffle=True, pin_memory=True)
    for input_ids, labels in loader:
        loss = model(input_ids.cuda(non_blocking=True), labels.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
"""


def test_tl203_items_already_in_memory_converted_to_a_dtype():
    assert found(INSTRUCTIONS, "TL203") == []


def test_tl203_items_read_from_files_are_reported():
    code = INSTRUCTIONS.replace('self._data[i]["input_ids"].type(torch.int64)', 'torch.load(self._data[i])')
    assert found(code, "TL203") == [("TL203", 19)]


DDIM = """\
import torch


def compute_alpha(beta, t):
    beta = torch.cat([torch.zeros(1).to(beta.device), beta], dim=0)
    return (1 - beta).cumprod(dim=0).index_select(0, t + 1).view(-1, 1, 1, 1)


def generalized_steps(x, seq, model, b):
    init = torch.zeros(x.shape[0], x.shape[1] * x.shape[2]).to(x.device)
    seq_next = [-1] + list(seq[:-1])
    for i, j in zip(reversed(seq), reversed(seq_next)):
        t = (torch.ones(x.size(0), device=x.device) * i).long()
        at = compute_alpha(b, t)
        x = model(x + init.view_as(x), t) * at
    return x


def sample(model, loader, seq, b):
    for x in loader:
        yield generalized_steps(x.cuda(), seq, model, b)
"""


def test_tl201_a_ddim_samplers_setup_runs_once_per_pass():
    # its time steps go backwards through `zip(reversed(seq), reversed(seq_next))`
    assert found(DDIM, "TL201") == [("TL201", 5)]


def test_tl201_the_same_setup_in_a_function_without_the_sampling_loop_is_reported():
    code = DDIM.replace("    for i, j in zip(reversed(seq), reversed(seq_next)):", "    for i, j in [(seq[-1], seq_next[-1])]:")
    assert found(code, "TL201") == [("TL201", 5), ("TL201", 10)]


def test_without_a_program_in_the_run_nothing_is_judged_unreachable(runner, workdir):
    # a library: its users are elsewhere
    _project(workdir, TRAIN.replace('\n\nif __name__ == "__main__":\n    main(None, [], None)\n', "\n"))
    assert _concise(runner, "--select", "TL101", ".") == ["diffusion/timestep_sampler.py:20:19: TL101"]


def test_a_run_that_builds_objects_from_configured_names_judges_nothing_unreachable(runner, workdir):
    # latent-diffusion: `target: ldm.models.diffusion.ddpm.LatentDiffusion` in a YAML file
    _project(workdir)
    (workdir / "util.py").write_text(
        "import importlib\n\n\ndef instantiate_from_config(config):\n"
        "    module, cls = config['target'].rsplit('.', 1)\n"
        "    return getattr(importlib.import_module(module), cls)(**config.get('params', {}))\n")
    assert _concise(runner, "--select", "TL101", ".") == ["diffusion/timestep_sampler.py:20:19: TL101"]


def test_a_class_named_in_a_yaml_configuration_is_alive(runner, workdir):
    _project(workdir)
    (workdir / "configs").mkdir()
    (workdir / "configs" / "sampler.yaml").write_text(
        "sampler:\n  target: diffusion.timestep_sampler.LossSecondMomentResampler\n")
    assert _concise(runner, "--select", "TL101", ".") == ["diffusion/timestep_sampler.py:20:19: TL101"]
    # a configuration that names another class: the loss-aware sampler never runs
    (workdir / "configs" / "sampler.yaml").write_text("sampler:\n  target: diffusion.timestep_sampler.UniformSampler\n")
    (workdir / "util.py").write_text(
        "import importlib\n\n\ndef instantiate_from_config(config):\n"
        "    module, cls = config['target'].rsplit('.', 1)\n"
        "    return getattr(importlib.import_module(module), cls)(**config.get('params', {}))\n")
    assert _concise(runner, "--select", "TL101", ".") == []
