"""Precision on set TT's leftovers (course notebooks: an MNIST VAE, a linear
regression built from raw parameters, word2vec; video inpainting that writes
its frames; a deployment notebook that times each prediction; synthetic
examples written here, not their code).  Each with the near-miss that must
still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


WHOLE_PROGRAM = "TL503,TL504,TL505"

TRAIN = """
model = Model().to("cuda")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for epoch in range(100):
    for x, y in loader:
        loss = loss_fn(model(x.to("cuda")), y.to("cuda"))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

# An MNIST VAE: 784-400-40 encoder, 20-400-784 decoder (650k weights).
VAE = """
import torch
from torch import nn

d = 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, d ** 2), nn.ReLU(), nn.Linear(d ** 2, d * 2))
        self.decoder = nn.Sequential(nn.Linear(d, d ** 2), nn.ReLU(), nn.Linear(d ** 2, 784), nn.Sigmoid())
""" + TRAIN


def test_an_mnist_vae_is_tiny():
    assert found(VAE, WHOLE_PROGRAM) == []


def test_a_wide_mlp_is_not_tiny():
    # 784-4096-4096-784: 22M weights, where tensor cores and the compiler pay off
    code = VAE.replace("d = 20", "d = 64")
    assert [c for c, _ in found(code, WHOLE_PROGRAM)] == ["TL503", "TL504", "TL505"]


# A linear regression from raw parameters (a course's first model).
PARAMETERS = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, requires_grad=True))
        self.bias = nn.Parameter(torch.randn(1, requires_grad=True))

    def forward(self, x):
        return self.weight * x + self.bias
""" + TRAIN


def test_a_model_of_raw_parameters_is_sized_by_their_shapes():
    assert found(PARAMETERS, WHOLE_PROGRAM) == []


def test_raw_parameters_of_unknown_or_large_shape_are_not_tiny():
    # (TL503 asks for matmul layers, which raw parameters are not)
    unknown = PARAMETERS.replace("torch.randn(1, requires_grad=True)", "torch.randn(n_in, n_out)")
    assert [c for c, _ in found(unknown, WHOLE_PROGRAM)] == ["TL504", "TL505"]
    large = PARAMETERS.replace("torch.randn(1, requires_grad=True)", "torch.randn(2048, 2048)")
    assert [c for c, _ in found(large, WHOLE_PROGRAM)] == ["TL504", "TL505"]
    loaded = PARAMETERS.replace("torch.randn(1, requires_grad=True)", "torch.load('w.pt')")
    assert [c for c, _ in found(loaded, WHOLE_PROGRAM)] == ["TL504", "TL505"]


# word2vec with negative sampling: the vocabulary comes from the data.
EMBEDDINGS = """
import torch
from torch import nn

n_vocab = len(vocab_to_int)


class Model(nn.Module):
    def __init__(self, n_vocab, n_embed):
        super().__init__()
        self.in_embed = nn.Embedding(n_vocab, n_embed)
        self.out_embed = nn.Embedding(n_vocab, n_embed)


model = Model(n_vocab, 300)
""" + TRAIN.replace("model = Model()", "model = model")


def test_an_embeddings_vocabulary_does_not_size_its_cost():
    assert found(EMBEDDINGS, WHOLE_PROGRAM) == []


def test_an_embedding_of_unknown_width_is_not_tiny():
    code = EMBEDDINGS.replace("Model(n_vocab, 300)", "Model(n_vocab, args.dim)")
    assert [c for c, _ in found(code, WHOLE_PROGRAM)] == ["TL504", "TL505"]


# Video inpainting: predicted frames scaled to pixels and composited on the host.
FRAMES = """
import numpy as np
import torch


def inpaint(model, clips, frames, masks):
    out = []
    with torch.no_grad():
        for f, clip in enumerate(clips):
            pred = model(clip.cuda())
            pred = pred.cpu().permute(0, 2, 3, 1).numpy() * 255
            out.append(pred.astype(np.uint8) * masks[f] + frames[f] * (1 - masks[f]))
    return out


inpaint(net, clips, frames, masks)
"""


def test_tl102_frames_scaled_to_pixels_on_the_host_are_the_point():
    assert found(FRAMES, "TL102", path="inference.py") == []


def test_tl102_a_metric_against_device_values_is_still_reported():
    code = FRAMES.replace("pred.cpu().permute(0, 2, 3, 1).numpy() * 255", "pred.cpu().numpy() * target.cpu().numpy()")
    assert found(code, "TL102", path="inference.py") == [("TL102", 11), ("TL102", 11)]
    # an offset by a number is an index or a shift, not pixels
    code = FRAMES.replace("pred.cpu().permute(0, 2, 3, 1).numpy() * 255", "5 + pred.cpu().numpy()")
    assert found(code, "TL102", path="inference.py") == [("TL102", 11)]


# A deployment notebook that times each prediction.
TIMED = """
import torch
from timeit import default_timer as timer


def pred_and_store(paths, model, transform, device):
    results = []
    for path in paths:
        start_time = timer()
        image = transform(Image.open(path)).unsqueeze(0).to(device)
        with torch.inference_mode():
            prob = torch.softmax(model(image), dim=1)
            results.append({"prob": prob.max().cpu().item()})
            end_time = timer()
        results[-1]["time"] = end_time - start_time
    return results


pred_and_store(test_paths, model, transform, "cuda")
"""


def test_tl102_a_prediction_timed_between_two_clock_reads_must_finish():
    assert found(TIMED, "TL102", path="predict.py") == []


def test_tl102_a_copy_outside_the_timed_span_or_in_training_is_reported():
    # read after the clock stops: nothing times it
    code = TIMED.replace(
        '            results.append({"prob": prob.max().cpu().item()})\n            end_time = timer()\n',
        '            end_time = timer()\n            results.append({"prob": prob.max().cpu().item()})\n',
    )
    assert found(code, "TL102", path="predict.py") == [("TL102", 14)]
    # a training loop's meters start no clock before the read (its copies do not
    # wait: a blocking copy at the start of the iteration would wait for the read's
    # work anyway, which TL102 leaves alone)
    meters = """
import time
import torch


def train(loader, model, optimizer):
    end = time.time()
    for x, y in loader:
        data_time.update(time.time() - end)
        loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        hits.update(loss.detach().cpu().numpy())
        batch_time.update(time.time() - end)
        end = time.time()
"""
    assert found(meters, "TL102", path="train.py") == [("TL102", 14)]
    # the same timing in a loop that trains: not a latency measurement
    trains = meters.replace("        data_time.update(time.time() - end)\n", "        start = time.time()\n")
    assert found(trains, "TL102", path="train.py") == [("TL102", 14)]
    # with blocking copies after the loading time's meter, the read only moves the next copy's wait
    blocking = meters.replace("x.cuda(non_blocking=True), y.cuda(non_blocking=True)", "x.cuda(), y.cuda()")
    assert found(blocking, "TL102", path="train.py") == []


# Set UU (bentrevett's image classification notebooks, DLRM; synthetic examples).
PREDICTIONS = """
import torch


def get_predictions(model, iterator, device):
    model.eval()
    labels, probs = [], []
    with torch.no_grad():
        for (x, y) in iterator:
            x = x.to(device)
            y_prob = torch.softmax(model(x), dim=-1)
            labels.append(y.cpu())
            probs.append(y_prob.cpu())
    return torch.cat(labels), torch.cat(probs)


get_predictions(model, test_iterator, "cuda")
"""


def test_tl102_the_part_of_a_batch_left_on_the_host_copies_nothing():
    # `x` is moved first thing, so the iterable yields host tensors: `y.cpu()` copies nothing
    assert found(PREDICTIONS, "TL102", path="predict.py") == [("TL102", 13)]


def test_tl102_a_part_whose_sibling_is_not_moved_is_still_reported():
    # nothing says what the iterable yields: `y` may be a device tensor
    code = PREDICTIONS.replace("            x = x.to(device)\n", "")
    assert found(code, "TL102", path="predict.py") == [("TL102", 11), ("TL102", 12)]
    # moved under another name: `x` itself stays what the iterable gave
    code = PREDICTIONS.replace("x = x.to(device)", "inputs = x.to(device)")
    assert found(code, "TL102", path="predict.py") == [("TL102", 12), ("TL102", 13)]


SEEDED = """
import random
import torch
import torch.nn as nn
import torchvision.transforms as transforms
import torchvision.datasets as datasets

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)
"""


def test_tl502_an_mlp_that_takes_only_data_from_torchvision_has_no_convolution():
    assert found(SEEDED, "TL502", path="mlp.py") == []
    code = SEEDED.replace(
        "import torchvision.transforms as transforms\nimport torchvision.datasets as datasets\n",
        "from torchvision import datasets, transforms\n",
    )
    assert found(code, "TL502", path="mlp.py") == []


def test_tl502_a_model_from_torchvision_may_have_convolutions():
    code = SEEDED.replace("import torchvision.datasets as datasets", "import torchvision.models as models")
    assert found(code, "TL502", path="mlp.py") == [("TL502", 9)]
    code = SEEDED.replace("import torchvision.datasets as datasets", "import torchvision")
    assert found(code, "TL502", path="mlp.py") == [("TL502", 9)]


DEBUG_DUMP = """
import torch


def train(args, model, loader, optimizer):
    for j, (x, y) in enumerate(loader):
        out = model(x.cuda(non_blocking=True))
        loss = out.sum()
        loss.backward()
        optimizer.step()
        if args.debug_mode:
            print(out.detach().cpu())
            print(loss.item())
"""


def test_per_step_rules_leave_a_debug_mode_alone():
    assert found(DEBUG_DUMP, "TL101,TL102") == []


def test_per_step_rules_report_the_same_code_outside_a_debug_switch():
    code = DEBUG_DUMP.replace("if args.debug_mode:", "if args.verbose:")
    assert found(code, "TL101,TL102") == [("TL102", 12), ("TL101", 13)]
    # `if not args.debug:` is the normal run
    code = DEBUG_DUMP.replace("if args.debug_mode:", "if not args.debug_mode:")
    assert found(code, "TL101,TL102") == [("TL102", 12), ("TL101", 13)]
    # a word that only contains "debug" is not the switch
    code = DEBUG_DUMP.replace("if args.debug_mode:", "if args.debugger_attached_flag_x:")
    assert len(found(code, "TL101,TL102")) == 2


def test_tl101_a_timed_forward_in_a_function_that_trains_is_a_step():
    # open_lm's accumulation loop times its forward; the step is still training
    code = """
import time
import torch


def train_one_epoch(model, loader, optimizer, scaler, args):
    for inputs in loader:
        for ii in range(args.accum_freq):
            forward_start = time.time()
            out = model(inputs[ii].cuda())
            if args.log_logit_mean:
                logit_m.update(torch.mean(out).item())
            forward_total_time += time.time() - forward_start
            backward(out.mean(), scaler)
        optimizer.step()
"""
    assert found(code, "TL101") == [("TL101", 12)]


# Set WW (NCSN, d2l-pytorch, DeepSpeedExamples, Ignite's examples; synthetic examples).
RUNNER = """
import torch
from torch.utils.data import DataLoader


def train(config, dataset, test_dataset, score, optimizer):
    dataloader = DataLoader(dataset, batch_size=128, shuffle=True, num_workers=4)
    test_loader = DataLoader(test_dataset, batch_size=128, shuffle=True, num_workers=4)
    test_iter = iter(test_loader)
    step = 0
    for epoch in range(100):
        for X, y in dataloader:
            step += 1
            loss = score(X.to(config.device)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                try:
                    test_X, test_y = next(test_iter)
                except StopIteration:
                    test_iter = iter(test_loader)
                    test_X, test_y = next(test_iter)
                test_loss = score(test_X.to(config.device)).mean()


def inpaint(config, dataset, score):
    if config.dataset == "CELEBA":
        dataloader = DataLoader(dataset, batch_size=20, shuffle=True, num_workers=4)
        refer_image, _ = next(iter(dataloader))
    else:
        dataloader = DataLoader(dataset, batch_size=20, shuffle=True, num_workers=4)
        data_iter = iter(dataloader)
        refer_image, _ = next(data_iter)
    return score(refer_image.to(config.device))
"""


def test_tl202_loaders_read_one_batch_or_one_every_n_steps_are_left_alone():
    # only the training loader, iterated every step, is reported
    assert found(RUNNER, "TL202", path="runner.py") == [("TL202", 7)]


def test_tl202_a_test_loader_read_every_step_is_reported():
    code = RUNNER.replace("if step % 100 == 0:", "if step > 100:")
    assert found(code, "TL202", path="runner.py") == [("TL202", 7), ("TL202", 8)]
    # a one-batch loader whose name is also iterated in a loop
    code = RUNNER.replace("    return score(refer_image.to(config.device))\n",
                          "    for x, _ in dataloader:\n        score(x.to(config.device))\n")
    assert found(code, "TL202", path="runner.py") == [("TL202", 7), ("TL202", 29), ("TL202", 32)]


SCRATCH = """
import torch
import d2l

train_iter, test_iter = d2l.load_data_fashion_mnist(256)
W = torch.normal(0, 0.01, (784, 10)).requires_grad_(True)


def train(net, train_iter, trainer, loss):
    total = 0.0
    for X, y in train_iter:
        l = loss(net(X), y).sum()
        l.backward()
        trainer.step(256)
        total += l.item()


if __name__ == "__main__":
    train(net, train_iter, trainer, loss)
"""


def test_tl101_a_cpu_notebook_with_an_optimizer_named_trainer_runs_on_the_host():
    assert found(SCRATCH, "TL101", path="softmax.py") == []


def test_tl101_a_framework_trainer_may_move_the_batches():
    code = SCRATCH.replace("import d2l\n", "import d2l\nfrom transformers import Trainer\n")
    assert found(code, "TL101") == [("TL101", 16)]
    code = SCRATCH.replace("l.backward()", "l.backward()\n        X = X.cuda()")
    assert found(code, "TL101") == [("TL101", 16)]


SQUAD = """
import torch


def main(args, model, optimizer, train_loader, eval_loader):
    for epoch in range(3):
        for batch in train_loader:
            loss = model(*batch)
            loss.backward()
            optimizer.step()
    all_results = []
    for input_ids, example_indices in eval_loader:
        with torch.no_grad():
            start_logits, end_logits = model(input_ids.cuda())
        for i, example_index in enumerate(example_indices):
            start = start_logits[i].detach().cpu().tolist()
            all_results.append(RawResult(example_index, start))
    write_predictions(all_results)
"""


def test_tl102_a_loop_over_an_evaluation_batchs_items_is_evaluation():
    assert found(SQUAD, "TL102", path="run_squad.py") == []


def test_tl102_the_same_loop_in_a_training_pass_is_reported():
    code = SQUAD.replace("        with torch.no_grad():\n            start_logits", "        if True:\n            start_logits")
    code = code.replace("            all_results.append(RawResult(example_index, start))\n",
                        "            all_results.append(RawResult(example_index, start))\n        optimizer.step()\n")
    assert found(code, "TL102", path="run_squad.py") == [("TL102", 16)]


# Set XX (Person_reID_baseline_pytorch, InsightFace_Pytorch, facenet-pytorch; synthetic examples).
REID = """
import torch

model = Net().cuda()
# model = torch.compile(model, mode="reduce-overhead", dynamic=True)  # pytorch 2.0
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(120):
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_tl505_compilation_tried_and_commented_out_is_the_authors_choice():
    assert found(REID, "TL505") == []


def test_tl505_a_comment_that_only_mentions_compiling_is_not_a_choice():
    code = REID.replace('# model = torch.compile(model, mode="reduce-overhead", dynamic=True)  # pytorch 2.0',
                        "# compile the model for speed")
    assert found(code, "TL505") == [("TL505", 11)]


LR_FINDER = """
import torch


def find_lr(model, loader, optimizer, beta=0.98):
    avg_loss, best_loss = 0.0, 0.0
    for batch_num, (imgs, labels) in enumerate(loader, 1):
        loss = model(imgs.cuda(), labels.cuda())
        avg_loss = beta * avg_loss + (1 - beta) * loss.item()
        smoothed_loss = avg_loss / (1 - beta ** batch_num)
        if batch_num > 1 and smoothed_loss > 4 * best_loss:
            return
        if smoothed_loss < best_loss or batch_num == 1:
            best_loss = smoothed_loss
        loss.backward()
        optimizer.step()
"""


def test_tl101_a_learning_rate_finder_stops_on_each_batchs_loss():
    assert found(LR_FINDER, "TL101") == []


def test_tl101_a_read_the_exit_does_not_depend_on_is_reported():
    code = LR_FINDER.replace("if batch_num > 1 and smoothed_loss > 4 * best_loss:", "if batch_num > 1000:")
    assert found(code, "TL101") == [("TL101", 9)]


FACES = """
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

dataset = datasets.ImageFolder(data_dir, transform=transforms.Resize((512, 512)))
loader = DataLoader(dataset, num_workers=4, batch_size=32, collate_fn=collate_pil)
for x, y in loader:
    mtcnn(x, save_path=y)

dataset = datasets.ImageFolder(data_dir, transform=transforms.Compose([transforms.ToTensor()]))
train_loader = DataLoader(dataset, num_workers=4, batch_size=32, collate_fn=collate_pil)
for x, y in train_loader:
    loss = model(x.cuda()).sum()
"""


def test_tl202_pil_images_batched_into_lists_cannot_be_pinned():
    # the first loader's items stay PIL images; the second's are tensors
    assert found(FACES, "TL202", path="finetune.py") == [("TL202", 11)]


def test_tl202_pil_images_without_a_collate_fn_or_an_unreadable_transform_are_reported():
    code = FACES.replace("batch_size=32, collate_fn=collate_pil)\nfor x, y in loader:",
                         "batch_size=32)\nfor x, y in loader:")
    assert found(code, "TL202", path="finetune.py") == [("TL202", 6), ("TL202", 11)]
    code = FACES.replace("transform=transforms.Resize((512, 512))", "transform=make_transform()")
    assert found(code, "TL202", path="finetune.py") == [("TL202", 6), ("TL202", 11)]


# Set YY (cifar10-airbench, stable-audio-tools, 4DGaussians; synthetic examples).
TTA = """
import torch


def infer(model, images, tta_level=0):
    def infer_basic(inputs, net):
        return net(inputs).clone()

    def infer_mirror(inputs, net):
        return 0.5 * net(inputs) + 0.5 * net(inputs.flip(-1))

    def infer_mirror_translate(inputs, net):
        logits = infer_mirror(inputs, net)
        return 0.5 * logits + 0.5 * infer_mirror(inputs.roll(1, -1), net)

    model.eval()
    infer_fn = [infer_basic, infer_mirror, infer_mirror_translate][tta_level]
    with torch.no_grad():
        return torch.cat([infer_fn(inputs, model) for inputs in images.split(2000)])
"""


def test_tl302_closures_of_a_function_that_disables_gradients_run_under_it():
    assert found(TTA, "TL302") == []


def test_tl302_the_same_closures_without_the_block_are_reported():
    code = TTA.replace("    with torch.no_grad():\n        return", "    if True:\n        return")
    assert found(code, "TL302") == [("TL302", 9)]


OFF_PERIOD = """
import torch


def train(loader, model, optimizer):
    for step, batch in enumerate(loader):
        loss = model(batch.cuda(non_blocking=True)).mean()
        loss.backward()
        optimizer.step()
        if step % 100 != 0:
            continue
        print(loss.item())
"""


def test_tl101_code_after_skipping_the_off_period_steps_runs_every_n_steps():
    assert found(OFF_PERIOD, "TL101") == []


def test_tl101_code_after_skipping_only_the_period_steps_runs_almost_every_step():
    code = OFF_PERIOD.replace("if step % 100 != 0:", "if step % 100 == 0:")
    assert found(code, "TL101") == [("TL101", 12)]


GUI = """
import torch


def training(gaussians, scene, opt):
    for iteration in range(opt.iterations):
        if network_gui.conn is not None:
            net_image = render(custom_cam, gaussians)["render"]
            net_image_bytes = memoryview((torch.clamp(net_image, 0, 1) * 255).byte().permute(1, 2, 0).cpu().numpy())
            network_gui.send(net_image_bytes, dataset.source_path)
        loss = render_loss(gaussians, scene)
        loss.backward()
        gaussians.optimizer.step()
"""


def test_tl102_a_frame_handed_to_memoryview_for_a_viewer_is_the_point():
    assert found(GUI, "TL102") == []


def test_tl102_the_same_frame_kept_as_an_array_is_reported():
    code = GUI.replace("memoryview((torch.clamp", "((torch.clamp")
    assert found(code, "TL102") == [("TL102", 9)]


def test_tl102_a_sibling_cast_to_another_dtype_is_not_moved():
    code = PREDICTIONS.replace("x = x.to(device)", "x = x.to(torch.float32)")
    assert found(code, "TL102", path="predict.py") == [("TL102", 12), ("TL102", 13)]
