"""Precision on set MM (Pytorch-UNet, monodepth2, FixMatch-pytorch,
FastSpeech2, ECCV2022-RIFE, AnimateDiff, RWKV-LM, CvT; synthetic examples
written here, not their code): a check of a few samples printed once after
training (``for sample in range(5):``), a logging step under an ``or`` of two
periodic flags, and a loop that copies each sample's outputs to the host to
print or draw them.  Each with the near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# A script: the training loop at top level, then a check on five samples.
SCRIPT = """
import torch
import torch.nn.functional as F

model = torch.nn.Linear(8, 8).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(steps):
    x, y = batch()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()

with torch.no_grad():
    for sample in range(5):
        x, y = batch()
        z = model(x).argmax(-1)
        diff = ''.join('.' if z[0, i].item() == y[0, i].item() else '^' for i in range(y.size(1)))
        print(diff)
"""


def test_a_few_samples_checked_after_training_run_once():
    assert found(SCRIPT, "TL101") == []


def test_the_same_check_over_a_whole_dataset_is_reported():
    code = SCRIPT.replace("for sample in range(5):", "for sample in range(num_samples):")
    assert found(code, "TL101") == [("TL101", 17), ("TL101", 17)]


def test_a_literal_count_beyond_a_few_is_a_loop_of_steps():
    code = SCRIPT.replace("for sample in range(5):", "for sample in range(1, 100):")
    assert found(code, "TL101") == [("TL101", 17), ("TL101", 17)]


def test_a_few_iterations_inside_the_step_still_run_every_step():
    code = """
import torch


def train(model, loader, optimizer, meter):
    for x, y in loader:
        losses = model(x.cuda(), y.cuda())
        for k in range(3):
            meter.update(losses[k].item())
        losses.sum().backward()
        optimizer.step()
"""
    assert found(code, "TL101") == [("TL101", 9)]


LOGGING = """
import torch


def train(model, loader, optimizer, log, opt):
    step = 0
    for batch_idx, (x, y) in enumerate(loader):
        loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        early_phase = batch_idx % opt.log_frequency == 0 and step < 2000
        late_phase = step % 2000 == 0
        if early_phase or late_phase:
            log(batch_idx, loss.cpu().data)
        step += 1
"""


def test_an_or_of_periodic_flags_is_a_periodic_guard():
    assert found(LOGGING, "TL102") == []


def test_an_or_with_a_flag_that_is_not_periodic_is_not():
    code = LOGGING.replace("late_phase = step % 2000 == 0", "late_phase = opt.verbose")
    assert found(code, "TL102") == [("TL102", 15)]


SYNTH = """
import torch
import matplotlib.pyplot as plt


def synthesize(model, loader, path):
    with torch.no_grad():
        for batch in loader:
            out = model(batch.cuda())
            for i in range(len(out[0])):
                mel_len = out[1][i].item()
                mel = out[0][i, :mel_len].detach().cpu().numpy()
                plt.imshow(mel)
                plt.savefig(f"{path}/{i}.png")
"""


def test_a_loop_that_copies_each_sample_out_to_draw_it_waits_anyway():
    assert found(SYNTH, "TL101") == []


def test_a_loop_whose_copy_is_only_compared_is_reported():
    code = SYNTH.replace(
        "                mel = out[0][i, :mel_len].detach().cpu().numpy()\n",
        "                hits += (out[0][i].cpu().numpy() > 0).sum()\n",
    )
    assert found(code, "TL101") == [("TL101", 11)]


def test_a_copy_under_a_condition_does_not_silence_the_loop():
    code = SYNTH.replace(
        "                mel = out[0][i, :mel_len].detach().cpu().numpy()\n",
        "                if i == 0:\n                    mel = out[0][i, :mel_len].detach().cpu().numpy()\n",
    )
    assert found(code, "TL101") == [("TL101", 11)]


def test_training_loops_that_copy_out_are_still_reported():
    code = """
import torch


def train(model, loader, optimizer, history):
    for x, y in loader:
        out = model(x.cuda(non_blocking=True))
        loss = (out - y.cuda(non_blocking=True)).pow(2).mean()
        loss.backward()
        optimizer.step()
        history.append(out.detach().cpu().numpy())
        print(loss.item())
"""
    assert found(code, "TL101") == [("TL101", 12)]


# Set NN (ParallelWaveGAN, LightGlue, BiRefNet, Vim, mar, once-for-all,
# transfuser, DIS): a generator's `inference` that, in its own module, only
# another model method reaches (the scripts that call it disable gradients).
VOCODER = """
import torch


class Generator(torch.nn.Module):
    def forward(self, c):
        return self.net(c)

    def inference(self, c):
        return self.forward(c.unsqueeze(0)).squeeze(0)


class DurationGenerator(Generator):
    def synthesis(self, c):
        return self.duration_predictor.inference(c)

    def inference(self, c, ds=None):
        if ds is None:
            c, ds = self.synthesis(c)
        return self.forward(c.repeat_interleave(ds, dim=0))
"""


def test_a_model_method_reached_only_through_uncalled_model_methods_is_the_callers_business():
    assert found(VOCODER, "TL302", path="models/hifigan.py") == []


def test_the_same_method_called_by_a_plain_function_with_gradients_is_reported():
    code = VOCODER + """

def vocode(model, mels):
    return [model.inference(m) for m in mels]
"""
    assert [code for code, _ in found(code, "TL302", path="models/hifigan.py")] == ["TL302", "TL302"]


# once-for-all's progressive shrinking: several sampled subnets backpropagated
# one after another, then one optimizer step; the list of their losses is
# started afresh every step.
SUBNETS = """
import torch


def train_one_epoch(net, loader, optimizer, criterion, n_subnets, meter):
    for images, labels in loader:
        net.zero_grad()
        loss_of_subnets = []
        for _ in range(n_subnets):
            net.sample_active_subnet()
            loss = criterion(net(images), labels)
            loss_of_subnets.append(loss)
            loss.backward()
        optimizer.step()
        meter.update(sum(l.item() for l in loss_of_subnets) / n_subnets)
"""


def test_a_list_started_afresh_at_every_optimizer_step_is_bounded():
    assert found(SUBNETS, "TL303") == []


def test_a_list_started_afresh_once_per_epoch_is_reported():
    code = """
import torch


def train(net, loader, optimizer, criterion, epochs):
    for epoch in range(epochs):
        history = []
        for images, labels in loader:
            loss = criterion(net(images), labels)
            history.append(loss)
            loss.backward()
            optimizer.step()
"""
    assert found(code, "TL303") == [("TL303", 10)]


# Set OO (PixArt-alpha, SparseR-CNN, YOLOS, AST, deep-person-reid, ESM,
# pixel-nerf, SuperGlue): detections copied with `.cpu().tolist()` for a JSON
# results file, and a training function that wraps its model in
# DataParallel unless it already is (a recall fix).
COCO_JSON = """
import torch


@torch.no_grad()
def generate(model, loader, postprocess, results):
    for samples, targets in loader:
        outputs = model(samples.cuda())
        for res in postprocess(outputs):
            scores = res["scores"].cpu().tolist()
            labels = res["labels"].cpu().tolist()
            results.append({"scores": scores, "labels": labels})
"""


def test_results_listed_for_a_json_file_are_the_point():
    assert found(COCO_JSON, "TL102") == []


def test_the_same_copy_in_a_training_loop_is_reported():
    code = """
import torch


def train(model, loader, optimizer, history):
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True), y.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
        history.append(loss.detach().cpu().tolist())
"""
    assert found(code, "TL102") == [("TL102", 10)]


WRAP = """
import torch.nn as nn


def train(audio_model, train_loader, optimizer):
    if not isinstance(audio_model, nn.DataParallel):
        audio_model = nn.DataParallel(audio_model)
    audio_model.train()
    for x, y in train_loader:
        loss = audio_model(x.cuda()).sub(y.cuda()).pow(2).mean()
        loss.backward()
        optimizer.step()
"""


def test_wrapping_a_model_that_is_not_wrapped_yet_is_reported():
    assert found(WRAP, "TL601") == [("TL601", 7)]


def test_mirroring_how_a_given_model_was_wrapped_is_not():
    code = WRAP.replace("if not isinstance(", "if isinstance(")
    assert found(code, "TL601") == []


AUTOGRAD = """
import torch


class HostReference(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        gx = torch.zeros_like(x)
        for b in range(x.shape[0]):
            bits = x[b].tolist()
            gx[b] = gy[b] * len(bits)
        return gx
"""


def test_a_custom_backward_runs_every_training_step():
    assert found(AUTOGRAD, "TL101") == [("TL101", 16)]


def test_the_same_loop_in_an_evaluation_function_hands_results_to_host_code():
    code = AUTOGRAD.replace("def backward(ctx, gy):", "def describe(ctx, gy):")
    assert found(code, "TL101") == []


# Set PP (BigVGAN, T2I-Adapter, instruct-pix2pix, AudioMAE, zero123, Stark,
# XLM, pytorch-fid): a periodic helper named `every`, and a beam search.
def test_a_helper_named_every_is_a_periodic_guard():
    code = """
import torch


def train(model, optim, pbar, batches):
    for batch in batches:
        loss = model(batch.cuda()).mean()
        loss.backward()
        optim.step()
        if every(pbar, percent=35):
            target = (model.grid_size * 1.3).int().tolist()
            model.resample(target)
"""
    assert found(code, "TL101") == []
    assert found(code.replace("if every(pbar, percent=35):", "if everything_ready(pbar):"), "TL101") == [("TL101", 11)]


BEAM = """
import torch


def {name}(self, src, beam_size, max_len):
    generated_hyps = [Hypotheses(beam_size) for _ in range(len(src))]
    cur_len = 1
    while cur_len < max_len:
        scores = self.step(src, cur_len)
        next_scores, next_words = torch.topk(scores, 2 * beam_size, dim=1)
        for sent_id in range(len(src)):
            generated_hyps[sent_id].add(next_words[sent_id], next_scores[sent_id].max().item())
        cur_len += 1
    return generated_hyps
"""


def test_a_beam_search_keeps_its_hypotheses_on_the_host():
    assert found(BEAM.format(name="generate_beam"), "TL101") == []


def test_the_same_reads_in_another_function_are_reported():
    assert found(BEAM.format(name="score_sentences"), "TL101") == [("TL101", 12)]


INFERENCE_SCRIPT = """
import torch

torch.backends.cudnn.benchmark = False


def inference(a, generator, mels):
    generator.eval()
    with torch.no_grad():
        for mel in mels:
            audio = generator(mel.cuda())
            write(audio.squeeze().cpu().numpy())


if __name__ == "__main__":
    inference(parse_args(), build_generator(), load_mels())
"""


def test_an_inference_script_may_leave_the_autotuner_off():
    assert found(INFERENCE_SCRIPT, "TL501", path="inference.py") == []
    assert found(INFERENCE_SCRIPT, "TL501", path="demo/app.py") == []


def test_the_same_setting_in_a_training_script_is_reported():
    assert found(INFERENCE_SCRIPT, "TL501", path="train.py") == [("TL501", 4)]
