"""Precision on projects never seen before (BLIP, stable-baselines3, yolov7,
CenterNet, DomainBed, score_sde, efficientvit; synthetic examples written
here, not their code): host values that pass through a logger's iterator or
`zip`, arrays updated in place, a dataset's items, offloaded features,
empty tensors, export-only ops, per-item loops of a timed batch loop, and
TL302's one-batch samples, mode-switching helpers, training callers, class
constructors and models run by another runtime.  Each with the near-miss
that must still be reported."""

from __future__ import annotations

from tests.helpers import lint
from tests.test_cli import run


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- TL101: values the loader collated, through a logger's iterator and `zip` -------------

CAPTIONS = """
import torch


def evaluate(model, data_loader, metric_logger, device):
    result = []
    for image, image_id in metric_logger.log_every(data_loader, 50, "Eval:"):
        image = image.to(device)
        captions = model.generate(image)
        for caption, img_id in zip(captions, image_id):
            result.append({"image_id": img_id.item(), "caption": caption})
    return result
"""


def test_ids_from_the_loader_through_log_every_and_zip_are_host_values():
    assert found(CAPTIONS, "TL101") == []


def test_ids_moved_to_the_device_are_still_reported():
    code = CAPTIONS.replace("        image = image.to(device)\n", "        image, image_id = image.to(device), image_id.to(device)\n")
    assert found(code, "TL101") == [("TL101", 11)]


def test_the_zipped_model_output_is_not_a_host_value():
    code = CAPTIONS.replace("zip(captions, image_id)", "zip(image_id, model(image))")
    assert found(code, "TL101") == [("TL101", 11)]


def test_the_counter_of_enumerate_is_a_host_value_and_its_items_follow_the_iterable():
    code = """
import torch


def evaluate(model, data_loader, device):
    out = []
    for image, ids in data_loader:
        scores = model(image.to(device))
        for i, img_id in enumerate(ids):
            out.append((img_id.item(), scores[i].item()))
    return out
"""
    assert found(code, "TL101") == [("TL101", 10)]


# -- TL101: arrays updated in place stay where they are -----------------------------------

DRAW = """
import numpy as np
import torch


def collect_boxes(model, loader, ratio, found):
    for batch in loader:
        outputs = model(batch.cuda(non_blocking=True))
        box = np.array([1.0, 2.0, 3.0, 4.0])
        box -= np.array([0.5, 0.5, 0.5, 0.5])
        box /= ratio
        found.append(box.round().astype(np.int32).sum().item())
"""


def test_a_numpy_array_divided_in_place_stays_on_the_host():
    assert found(DRAW, "TL101") == []


def test_a_device_tensor_divided_in_place_stays_on_the_device():
    code = DRAW.replace("np.array([1.0, 2.0, 3.0, 4.0])", "outputs.mean(0)").replace(
        "box.round().astype(np.int32)", "box.round()")
    assert found(code, "TL101") == [("TL101", 12)]


def test_a_python_number_takes_the_device_value_added_to_it():
    code = """
import torch


def train(model, loader):
    for batch in loader:
        total = 0
        total += model(batch.cuda()).sum()
        print(total.item())
"""
    assert found(code, "TL101") == [("TL101", 9)]


# -- TL101: a dataset handed to a function yields host samples ----------------------------

TABLE = """
import torch


def create_table(self, dataset, rows):
    for si, (img, labels, paths, shapes) in enumerate(dataset):
        count = labels[:, 1:].sum().item()
        rows.append((si, count))
"""


def test_the_items_of_a_dataset_parameter_are_host_values():
    assert found(TABLE, "TL101") == []


def test_other_iterables_are_not_assumed_to_be_on_the_host():
    code = TABLE.replace("dataset", "batches")
    assert found(code, "TL101") == [("TL101", 7)]


def test_a_dataset_built_in_the_function_yields_host_samples_too():
    code = TABLE.replace("def create_table(self, dataset, rows):\n", "def create_table(self, make, rows):\n    dataset = make()\n")
    assert found(code, "TL101") == []


# -- TL101: per-item loops of a batch loop that synchronizes to time itself ---------------

DETECTION_EVAL = """
import torch
from utils import time_synchronized, non_max_suppression


def test(model, dataloader, stats, device):
    t0 = 0.0
    for batch_i, (img, targets) in enumerate(dataloader):
        img, targets = img.to(device), targets.to(device)
        with torch.no_grad():
            t = time_synchronized()
            out = model(img)
            t0 += time_synchronized() - t
            out = non_max_suppression(out)
        for si, pred in enumerate(out):
            labels = targets[targets[:, 0] == si, 1:]
            tcls = labels[:, 0].sum().item()
            stats.append((pred[:, 4].cpu(), tcls))
"""


def test_reads_in_a_loop_over_one_timed_iterations_results_are_free():
    assert found(DETECTION_EVAL, "TL101") == []
    # the timing alone makes them free, without the mask's own wait
    assert found(DETECTION_EVAL.replace("targets[targets[:, 0] == si, 1:]", "targets[si, 1:]"), "TL101") == []


def test_without_the_timing_the_per_item_reads_are_reported():
    code = DETECTION_EVAL.replace("            t = time_synchronized()\n", "").replace(
        "            t0 += time_synchronized() - t\n", "")
    # (selecting the image's targets with a mask waits every iteration anyway)
    assert found(code, "TL101") == []
    code = code.replace("targets[targets[:, 0] == si, 1:]", "targets[si, 1:]")
    assert found(code, "TL101") == [("TL101", 15)]


def test_a_loop_over_something_else_than_this_iterations_results_is_still_reported():
    code = DETECTION_EVAL.replace("for si, pred in enumerate(out):", "for si, pred in enumerate(stats):")
    code = code.replace("targets[targets[:, 0] == si, 1:]", "targets[si, 1:]")
    assert found(code, "TL101") == [("TL101", 17)]


# -- TL102: features offloaded to host memory and moved back piece by piece ---------------

RETRIEVAL = """
import torch


def evaluation(model, data_loader, device, k):
    feats = []
    for image in data_loader:
        feat = model.visual_encoder(image.to(device, non_blocking=True))
        feats.append(feat.cpu())
    feats = torch.cat(feats, dim=0)
    scores = []
    for i in range(len(feats)):
        out = feats[i].repeat(k, 1, 1).to(device)
        scores.append(model.head(out))
    return scores
"""


def test_features_parked_on_the_host_and_moved_back_are_the_point():
    assert found(RETRIEVAL, "TL102") == []


def test_features_only_joined_are_still_reported():
    code = RETRIEVAL.replace("        out = feats[i].repeat(k, 1, 1).to(device)\n", "        out = feats[i].repeat(k, 1, 1)\n")
    assert found(code, "TL102") == [("TL102", 9)]


# -- TL201: an empty tensor copies nothing; export-only ops run when tracing ---------------

def test_an_empty_tensor_moved_to_the_device_copies_nothing():
    code = """
import torch


class MultiCrop(torch.nn.Module):
    def forward(self, x):
        output = torch.empty(0).to(x[0].device)
        ones = torch.zeros((0, 4)).to(x[0].device)
        real = torch.zeros(4, 0 + 1).to(x[0].device)
        return output, ones, real
"""
    assert found(code, "TL201") == [("TL201", 9)]


EXPORT_OP = """
import torch


class ORT_NMS(torch.autograd.Function):
    @staticmethod
    def forward(ctx, boxes, scores):
        device = boxes.device
        return torch.zeros((100,), dtype=torch.int64).to(device)

    @staticmethod
    def symbolic(g, boxes, scores):
        return g.op("NonMaxSuppression", boxes, scores)
"""


def test_the_forward_of_an_export_only_op_runs_once_when_tracing():
    assert found(EXPORT_OP, "TL201") == []


def test_an_autograd_function_without_symbolic_runs_every_step():
    code = EXPORT_OP.split("\n    @staticmethod\n    def symbolic")[0] + "\n"
    assert found(code, "TL201") == [("TL201", 9)]


# -- TL302 ---------------------------------------------------------------------------------

SAMPLES = """
import torch


def sample_images(batches_done):
    generator.eval()
    imgs = next(iter(val_dataloader))
    rows = []
    for img_a, img_b in zip(imgs["A"], imgs["B"]):
        rows.append(generator(img_a.cuda()))
    save_image(torch.cat(rows), f"images/{batches_done}.png")
    generator.train()


def train(dataloader, optimizer):
    for i, batch in enumerate(dataloader):
        loss = generator(batch.cuda()).mean()
        loss.backward()
        optimizer.step()
        if i % 100 == 0:
            sample_images(i)
"""


def test_a_sample_of_one_batch_every_n_steps_is_silent():
    assert found(SAMPLES, "TL302") == []


def test_a_sample_taken_every_step_is_reported():
    code = SAMPLES.replace("        if i % 100 == 0:\n            sample_images(i)", "        sample_images(i)")
    assert found(code, "TL302") == [("TL302", 5)]


def test_a_loop_over_the_whole_validation_set_is_reported():
    code = SAMPLES.replace('    for img_a, img_b in zip(imgs["A"], imgs["B"]):', "    for img_a, img_b in val_dataloader:")
    assert found(code, "TL302") == [("TL302", 5)]


MODE_SWITCH = """
import torch


def get_model_fn(model, train=False):
    def model_fn(x, labels):
        if not train:
            model.eval()
            return model(x, labels)
        else:
            model.train()
            return model(x, labels)
    return model_fn
"""


def test_a_helper_that_switches_the_model_to_training_mode_and_runs_it_is_silent():
    assert found(MODE_SWITCH, "TL302") == []


def test_restoring_training_mode_at_the_end_is_not_a_training_path():
    code = """
import torch


def evaluate(model, loader):
    model.eval()
    total = sum(model(x).sum() for x in loader)
    model.train()
    return total
"""
    assert found(code, "TL302") == [("TL302", 5)]


def test_building_a_detector_from_its_class_runs_no_model():
    code = """
import torch


def test(opt, detector_factory, dataset):
    Detector = detector_factory[opt.task]
    detector = Detector(opt)
    return [detector.run(path) for path in dataset]
"""
    assert found(code, "TL302") == []


def test_an_evaluation_loop_running_the_model_through_its_methods_is_reported():
    code = """
import torch


def evaluate(model_path, envs, Model, episodes, device):
    agent = Model(envs).to(device)
    agent.load_state_dict(torch.load(model_path))
    agent.eval()
    returns = []
    obs = envs.reset()
    while len(returns) < episodes:
        actions = agent.get_action(torch.Tensor(obs).to(device))
        obs, reward, done, info = envs.step(actions.cpu().numpy())
        returns.append(reward)
    return returns
"""
    assert found(code, "TL302") == [("TL302", 5)]


def test_an_environment_put_in_evaluation_mode_is_not_a_model():
    code = """
import torch


def test(args, dqn, env):
    env.eval()
    rewards = []
    for _ in range(args.evaluation_episodes):
        state = env.reset()
        rewards.append(env.step(dqn.act(state)))
    return rewards
"""
    assert found(code, "TL302") == []


def test_a_module_that_runs_its_models_with_tensorrt_is_silent():
    code = """
import tensorrt as trt
import torch


class Predictor:
    def predict_torch(self, boxes):
        return self.decoder(self.features, torch.from_numpy(boxes).cuda())
"""
    assert found(code, "TL302") == []


SIBLINGS = """
import torch


class Algorithm(torch.nn.Module):
    pass


class ERM(Algorithm):
    def update(self, x, y, optimizer):
        loss = (self.predict(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()

    def predict(self, x):
        return self.network(x)


class SMA(Algorithm):
    def predict(self, x):
        self.network_sma.eval()
        return self.network_sma(x)
"""


def test_a_sibling_classs_self_calls_are_not_calls_of_this_method():
    # ERM's `self.predict` is ERM's own; SMA.predict is called nowhere here
    # (asked of the other modules, none in this run): reported.
    assert found(SIBLINGS, "TL302") == [("TL302", 20)]


def test_a_subclass_calling_the_method_with_gradients_keeps_it_reported():
    code = SIBLINGS + """

class SMAPlus(SMA):
    def score(self, x):
        return self.predict(x).sum()
"""
    assert found(code, "TL302") == [("TL302", 20)]


def test_a_subclass_calling_it_without_gradients_silences_it():
    code = SIBLINGS + """

class SMAPlus(SMA):
    def score(self, x):
        with torch.no_grad():
            return self.predict(x).sum()
"""
    assert found(code, "TL302") == []


# -- TL302 across modules: untyped receivers and training callers -------------------------

POLICIES = """\
import torch


class ActorCriticPolicy(torch.nn.Module):
    def evaluate_actions(self, obs, actions):
        return self.net(obs).log_prob(actions)

    def predict_values(self, obs):
        return self.value_net(obs)
"""

ALGORITHM = """\
import torch
from policies import ActorCriticPolicy


class PPO:
    def collect_rollouts(self, obs):
        with torch.no_grad():
            return self.policy.predict_values(obs)

    def train(self, batch):
        log_prob = self.policy.evaluate_actions(batch.obs, batch.actions)
        loss = -log_prob.mean()
        self.policy.optimizer.zero_grad()
        loss.backward()
        self.policy.optimizer.step()
"""


def _tl302(runner, workdir):
    result = run(runner, "check", "--select", "TL302", "--output-format", "concise", ".")
    return sorted(line.split(" ")[0] for line in result.stdout.splitlines() if ": TL" in line)


def test_methods_called_on_an_untyped_receiver_elsewhere_follow_those_calls(runner, workdir):
    (workdir / "policies.py").write_text(POLICIES)
    (workdir / "ppo.py").write_text(ALGORITHM)
    # predict_values: its one call runs without gradients; evaluate_actions feeds a loss
    assert _tl302(runner, workdir) == []


def test_a_call_with_gradients_outside_training_keeps_the_finding(runner, workdir):
    (workdir / "policies.py").write_text(POLICIES)
    (workdir / "ppo.py").write_text(
        ALGORITHM.replace("        with torch.no_grad():\n            return", "        if True:\n            return")
        .replace("        loss.backward()\n", "")
        .replace("        self.policy.optimizer.step()\n", "")
        .replace("    def train(self, batch):", "    def report(self, batch):")
    )
    assert _tl302(runner, workdir) == ["policies.py:5:5:", "policies.py:8:5:"]


def test_a_helper_handed_the_model_needs_no_import_of_its_module(runner, workdir):
    (workdir / "algorithms.py").write_text(
        "import torch\n\n\nclass SMA(torch.nn.Module):\n    def predict(self, x):\n"
        "        self.network_sma.eval()\n        return self.network_sma(x)\n"
    )
    (workdir / "misc.py").write_text(
        "import torch\n\n\ndef accuracy(network, loader):\n    network.eval()\n"
        "    with torch.no_grad():\n        return [network.predict(x) for x in loader]\n"
    )
    assert _tl302(runner, workdir) == []


def test_a_method_name_called_in_many_files_is_not_guessed(runner, workdir):
    # (DomainBed's algorithms are picked by name from a list of them: a class
    # nothing names would be code that never runs, docs/cli.md)
    (workdir / "algorithms.py").write_text(
        "import torch\n\n\nclass SMA(torch.nn.Module):\n    def predict(self, x):\n"
        "        self.network_sma.eval()\n        return self.network_sma(x)\n\n\nALGORITHMS = ['SMA']\n"
    )
    helper = (
        "import torch\n\n\ndef accuracy(network, loader):\n    network.eval()\n"
        "    with torch.no_grad():\n        return [network.predict(x) for x in loader]\n"
    )
    for i in range(7):  # `.predict(` in seven files: too common a name to say who calls SMA's
        (workdir / f"misc{i}.py").write_text(helper)
    assert _tl302(runner, workdir) == ["algorithms.py:5:5:"]
    # ... but a file that imports the method's module still counts (and the others do not)
    (workdir / "misc0.py").write_text("import algorithms\n" + helper)
    for i in range(1, 7):
        (workdir / f"misc{i}.py").write_text(helper.replace("    with torch.no_grad():\n        return", "    if True:\n        return"))
    assert _tl302(runner, workdir) == []
