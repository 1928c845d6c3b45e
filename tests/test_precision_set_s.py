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
        loss_dict = model(x.cuda(non_blocking=True))
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
            top1 = p.argmax().item()
            text = f"{p[top1]:.2f} {names[top1]}"
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


# -- set T (nanoGPT, LLMs-from-scratch, CLIP, SlowFast, YOLOX, Lightning, generative-models,
# segment-anything): a teaching notebook's toy attention module, a benchmark notebook's
# baselines, a loop over a few named keys, a pickled gather's size exchange, the DP strategy

ATTENTION = """
import torch
from torch import nn


class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.q = nn.Linear(d_in, d_out)
        self.k = nn.Linear(d_in, d_out)
        self.v = nn.Linear(d_in, d_out)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = q @ k.transpose(1, 2)
        weights = torch.softmax(scores / k.shape[-1] ** 0.5, dim=-1)
        return weights @ v


class Wrapper(nn.Module):
    def __init__(self, d_in, d_out, heads):
        super().__init__()
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out) for _ in range(heads)])

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)


batch = torch.rand(2, 6, 3)
"""

DEMO = ATTENTION + """ca = CausalAttention(3, 2).to("cuda")
print(ca(batch.cuda()).shape)
mha = Wrapper(3, 2, heads=2)
print(mha)
context = mha(batch)
"""


def test_a_notebooks_toy_attention_run_once_is_silent():
    assert found(DEMO, "TL402", path="ch03.ipynb") == []


def test_the_same_module_in_a_script_is_reported():
    assert found(DEMO, "TL402", path="ch03.py") == [("TL402", 16)]


def test_a_module_called_in_a_loop_of_the_notebook_is_reported():
    code = DEMO + "for _ in range(100):\n    context = mha(batch)\n"
    assert found(code, "TL402", path="ch03.ipynb") == [("TL402", 16)]


def test_a_module_handed_to_a_function_is_reported():
    code = DEMO + "generate(mha, batch, max_new_tokens=200)\n"
    assert found(code, "TL402", path="ch03.ipynb") == [("TL402", 16)]


def test_a_notebook_that_trains_is_reported():
    code = DEMO + "context.sum().backward()\noptimizer.step()\n"
    assert found(code, "TL402", path="ch03.ipynb") == [("TL402", 16)]


def test_a_backward_pass_without_an_optimizer_step_trains_nothing():
    # Grad-CAM or a saliency map: gradients of one input, read once
    code = DEMO + "context.sum().backward()\n"
    assert found(code, "TL402", path="ch03.ipynb") == []


def test_a_notebook_comparing_with_sdpa_keeps_its_baselines():
    code = ATTENTION + (
        "def fused(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"
        "def bench(fn):\n    for _ in range(100):\n        fn(batch)\n"
        "bench(CausalAttention(3, 2))\n"
    )
    assert found(code, "TL402", path="mha-implementations.ipynb") == []
    assert found(code, "TL402", path="mha_implementations.py") == [("TL402", 16)]


KEYS = """
import torch


def do_sample(model, batch, batch2model_input, num_samples):
    inputs = {}
    for k in batch2model_input:
        if k == "image_only_indicator":
            inputs[k] = torch.zeros(num_samples).to("cuda")
        else:
            inputs[k] = batch[k]
    return model.sample(**inputs)


def train(model, loader):
    for batch in loader:
        do_sample(model, batch, ["image_only_indicator"], 4)


if __name__ == "__main__":
    train(build_model(), build_loader())
"""


def test_a_loop_over_a_few_named_keys_is_not_a_step_loop():
    assert found(KEYS.replace("def train(model, loader):\n    for batch in loader:\n        do_sample",
                              "def train(model, batch):\n    if True:\n        do_sample"), "TL201") == []


def test_a_loop_over_tokens_compared_with_a_string_is_still_a_step_loop():
    code = KEYS.replace("for k in batch2model_input:", "for token in batch2model_input:").replace(
        'if k == "image_only_indicator":', 'if token == "<eos>":').replace("inputs[k]", "inputs[token]")
    code = code.replace("def train(model, loader):\n    for batch in loader:\n        do_sample",
                        "def train(model, batch):\n    if True:\n        do_sample")
    assert found(code, "TL201") == [("TL201", 9)]


GATHER = """
import pickle
import torch
import torch.distributed as dist


def _serialize(data, group):
    return torch.ByteTensor(torch.ByteStorage.from_buffer(pickle.dumps(data)))


def _pad_to_largest(tensor, group):
    world_size = dist.get_world_size(group=group)
    local = torch.tensor([tensor.numel()], dtype=torch.int64, device=tensor.device)
    sizes = [torch.zeros([1], dtype=torch.int64, device=tensor.device) for _ in range(world_size)]
    dist.all_gather(sizes, local, group=group)
    sizes = [int(size.item()) for size in sizes]
    return sizes, tensor


def forward_step(model, batch, group):
    out = model(batch)
    _pad_to_largest(_serialize(out, group), group)
"""


def test_the_size_exchange_of_a_pickled_gather_is_silent():
    assert found(GATHER, "TL101", path="comm.py") == []


def test_an_all_gather_of_sizes_in_a_module_without_pickle_is_the_protocol_too():
    # (set AA: gathering tensors of different shapes needs each rank's size on the host)
    code = GATHER.replace("pickle.dumps(data)", "bytes(data)").replace("import pickle\n", "")
    assert found(code, "TL101", path="comm.py") == []


def test_other_reads_in_a_gathering_module_without_pickle_are_reported():
    code = GATHER.replace("pickle.dumps(data)", "bytes(data)").replace("import pickle\n", "")
    code = code.replace("sizes = [int(size.item()) for size in sizes]", "sizes = [int(v.item()) for v in parts]")
    assert found(code, "TL101", path="comm.py") == [("TL101", 15)]


TOY = """
import torch
from torch.utils.data import DataLoader, Dataset

X_train = torch.tensor([[-1.2, 3.1], [-0.9, 2.9], [2.3, -1.1]])
y_train = torch.tensor([0, 0, 1])


class ToyDataset(Dataset):
    def __init__(self, X, y):
        self.features, self.labels = X, y

    def __getitem__(self, index):
        return self.features[index], self.labels[index]

    def __len__(self):
        return len(self.labels)


loader = DataLoader(ToyDataset(X_train, y_train), batch_size=2, num_workers=1)
for x, y in loader:
    model(x.to("cuda")).sum().backward()
"""


def test_a_dataset_written_out_in_the_code_is_not_worth_pinning():
    assert found(TOY, "TL202") == []


def test_a_dataset_of_loaded_tensors_is_reported():
    code = TOY.replace("torch.tensor([[-1.2, 3.1], [-0.9, 2.9], [2.3, -1.1]])", 'torch.load("x.pt")')
    assert found(code, "TL202") == [("TL202", 20)]
