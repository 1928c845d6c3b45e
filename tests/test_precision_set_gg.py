"""Precision on sets GG and HH (RepVGG, PVT, SimMIM, ViT-pytorch, StyleTTS2,
contrastive-unpaired-translation, byol-pytorch, MobileSAM; glow-pytorch,
BicycleGAN, ASL, ConViT, XMem, lightweight-gan, YOLOP, Uformer; synthetic
examples written here, not their code): a loop that stops itself after a few
iterations, the ``__call__`` of an exporter and of a job object, one forward
pass in a script that runs once, and a loader of one sample per batch.  Each
with the near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


EXAMPLES = """
import torch


def train(model, loader, lengths, optimizer, writer, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x.cuda()).mean()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for bib in range(len(y)):
                n = int(lengths[bib].item())
                y_rec = model(x[bib, :n])
                writer.add_audio("eval/y" + str(bib), y_rec, epoch)
                if bib >= 5:
                    break
"""


def test_a_loop_that_breaks_after_a_few_iterations_runs_a_few_times():
    assert found(EXAMPLES, "TL101") == []


def test_the_same_loop_over_the_whole_batch_is_reported():
    code = EXAMPLES.replace("                if bib >= 5:\n                    break\n", "")
    assert found(code, "TL101") == [("TL101", 13)]


def test_a_break_under_a_large_bound_or_another_name_is_not_a_cap():
    assert found(EXAMPLES.replace("bib >= 5", "bib >= 500"), "TL101") == [("TL101", 13)]
    assert found(EXAMPLES.replace("bib >= 5", "epoch >= 5"), "TL101") == [("TL101", 13)]


EXPORTER = """
import torch


class Exporter:
    def __call__(self, model=None):
        im = torch.zeros(self.args.batch, 3, 640, 640).to(self.device)
        return self.export_onnx(model, im)
"""


def test_the_call_of_an_exporter_runs_once():
    assert found(EXPORTER, "TL201") == []


def test_the_call_of_a_transform_runs_per_sample():
    assert found(EXPORTER.replace("class Exporter:", "class Letterbox:"), "TL201") == [("TL201", 7)]


JOB = """
import torch


class Trainer:
    def __init__(self, args):
        self.args = args

    def __call__(self):
        mask = torch.ones(self.args.size).cuda()
        run(self.args, mask)
"""


def test_a_call_that_takes_nothing_is_a_job_not_a_step():
    assert found(JOB, "TL201") == []


def test_a_call_handed_data_is_a_step():
    code = JOB.replace("def __call__(self):", "def __call__(self, batch):")
    assert found(code, "TL201") == [("TL201", 10)]


ONE_IMAGE = """
import torch


def main():
    model = create_model(args).cuda()
    model.load_state_dict(torch.load(args.model_path))
    model.eval()
    image = load_image(args.pic_path)
    output = model(image.cuda())
    print(output.argmax())


if __name__ == "__main__":
    main()
"""


def test_one_forward_pass_in_a_script_that_runs_once():
    assert found(ONE_IMAGE, "TL302", path="infer.py") == []


def test_a_script_that_runs_the_model_over_many_images_is_reported():
    code = ONE_IMAGE.replace(
        "    image = load_image(args.pic_path)\n    output = model(image.cuda())\n    print(output.argmax())\n",
        "    for path in args.paths:\n        output = model(load_image(path).cuda())\n        print(output.argmax())\n",
    )
    assert found(code, "TL302", path="infer.py") == [("TL302", 5)]


ONE_SAMPLE = """
import torch
from torch.utils.data import DataLoader


def evaluate(model, videos):
    for reader in videos:
        loader = DataLoader(reader, batch_size=1, shuffle=False, num_workers=2)
        for data in loader:
            rgb = data["rgb"].cuda()
            model.step(rgb)
"""


def test_an_evaluation_loader_of_one_sample_per_batch():
    assert found(ONE_SAMPLE, "TL202", path="eval.py") == []


def test_larger_batches_or_a_shuffled_loader_are_reported():
    assert found(ONE_SAMPLE.replace("batch_size=1", "batch_size=4"), "TL202", path="eval.py") == [("TL202", 8)]
    assert found(ONE_SAMPLE.replace("shuffle=False", "shuffle=True"), "TL202", path="eval.py") == [("TL202", 8)]


# Set II (Wav2Lip, first-order-model, RobustVideoMatting, edge-connect,
# HigherHRNet, EfficientFormer, conformer, FUNIT).

TIMED = """
import torch


def train(trainer, loader, config):
    for it, (co_data, cl_data) in enumerate(loader):
        with Timer("Elapsed time in update: %f"):
            trainer.dis_update(co_data, cl_data, config)
            trainer.gen_update(co_data, cl_data, config)
            torch.cuda.synchronize()
"""


def test_a_synchronize_inside_a_timer_block_is_the_measurement():
    assert found(TIMED, "TL103") == []


def test_the_same_synchronize_without_the_timer_is_reported():
    code = TIMED.replace('        with Timer("Elapsed time in update: %f"):\n', '        if True:\n')
    assert found(code, "TL103") == [("TL103", 10)]


SUMMARY = """
import torch


def get_model_summary(model, *input_tensors):
    hooks = []
    model.apply(lambda m: hooks.append(m.register_forward_hook(record)))
    model.eval()
    model(*input_tensors)
    for hook in hooks:
        hook.remove()
"""


def test_a_model_summary_runs_one_forward_to_count():
    assert found(SUMMARY, "TL302", path="utils.py") == []


def test_an_evaluation_with_the_same_body_is_reported():
    assert found(SUMMARY.replace("get_model_summary", "evaluate_model"), "TL302", path="utils.py") == [("TL302", 5)]


SAMPLE = """
import torch


class EdgeConnect:
    def train(self):
        for epoch in range(self.epochs):
            for items in self.train_loader:
                self.model.process(*items)
                if self.iteration % self.config.SAMPLE_INTERVAL == 0:
                    self.sample()

    def sample(self):
        self.model.eval()
        items = next(self.sample_iterator)
        outputs = self.model(*items)
        self.save(outputs)
"""


def test_one_batch_from_an_iterator_every_n_steps():
    assert found(SAMPLE, "TL302") == []


def test_a_sample_over_the_whole_iterator_is_reported():
    code = SAMPLE.replace(
        "        items = next(self.sample_iterator)\n        outputs = self.model(*items)\n        self.save(outputs)\n",
        "        for items in self.sample_iterator:\n            outputs = self.model(*items)\n            self.save(outputs)\n",
    )
    assert found(code, "TL302") == [("TL302", 13)]


FRAMES = """
import cv2
import numpy as np
import torch


def generate(model, batches, out):
    for img_batch, mel_batch, frames, coords in batches:
        with torch.no_grad():
            pred = model(mel_batch.cuda(), img_batch.cuda())
        pred = pred.cpu().numpy().transpose(0, 2, 3, 1) * 255.
        for p, f, c in zip(pred, frames, coords):
            y1, y2, x1, x2 = c
            p = cv2.resize(p.astype(np.uint8), (x2 - x1, y2 - y1))
            f[y1:y2, x1:x2] = p
            out.write(f)
"""


def test_predicted_frames_copied_to_be_written_out():
    assert found(FRAMES, "TL102", path="inference.py") == []


def test_predictions_copied_only_to_be_summed_are_reported():
    code = FRAMES.replace(
        "        for p, f, c in zip(pred, frames, coords):\n"
        "            y1, y2, x1, x2 = c\n"
        "            p = cv2.resize(p.astype(np.uint8), (x2 - x1, y2 - y1))\n"
        "            f[y1:y2, x1:x2] = p\n"
        "            out.write(f)\n",
        "        for p, c in zip(pred, coords):\n            total += p.sum()\n        out.write(frames)\n",
    )
    assert found(code, "TL102", path="inference.py") == [("TL102", 11)]


# Set JJ (RCAN, Real-Time-Voice-Cloning, torch-ngp, nnUNet, YOLOv6, votenet,
# flowtron, Pointnet2_PyTorch).

SKIP = """
import torch


def train(model, loader, optimizer, loss_fn, args):
    error_last = 1.0
    for lr, hr in loader:
        sr = model(lr.cuda(non_blocking=True))
        loss = loss_fn(sr, hr.cuda())
        if loss.item() < args.skip_threshold * error_last:
            loss.backward()
            optimizer.step()
"""


def test_a_read_that_decides_whether_the_step_runs():
    assert found(SKIP, "TL101") == []


def test_a_read_that_decides_only_a_print_is_reported():
    code = SKIP.replace("            loss.backward()\n            optimizer.step()\n", "            print('low')\n")
    code = code.replace("        if loss.item()", "        loss.backward()\n        optimizer.step()\n        if loss.item()")
    assert found(code, "TL101") == [("TL101", 12)]


PROFILED = """
import torch


def sync(device):
    # For correct profiling (cuda operations are async)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(model, loader, optimizer, profiler, vis, device):
    for step, batch in enumerate(loader):
        sync(device)
        profiler.tick("Blocking, waiting for batch")
        loss = model(batch.to(device)).mean()
        sync(device)
        profiler.tick("Forward pass")
        loss.backward()
        optimizer.step()
        vis.update(loss.item(), step)
"""


def test_a_profiled_loop_that_synchronizes_through_a_helper():
    assert found(PROFILED, "TL101") == []


def test_a_helper_that_does_more_than_synchronize_is_not_a_sync():
    code = PROFILED.replace("        torch.cuda.synchronize(device)\n", "        torch.cuda.synchronize(device)\n    log(device)\n")
    assert found(code, "TL101") == [("TL101", 21)]


UPSAMPLE = """
import numpy as np
import torch


class Trainer:
    def train_one_epoch(self, loader):
        for data in loader:
            loss = self.train_step(data)
            self.global_step += 1
            if self.global_step in self.opt.upsample_model_steps:
                aabb = self.model.aabb_train.cpu().numpy()
                reso = ((aabb[3:] - aabb[:3]) / 0.1).astype(np.int32).tolist()
                self.model.upsample_model(reso)
"""


def test_code_at_a_few_listed_steps_runs_rarely():
    assert found(UPSAMPLE, "TL102") == []


def test_the_same_code_at_every_step_is_reported():
    code = UPSAMPLE.replace("            if self.global_step in self.opt.upsample_model_steps:\n",
                            "            if self.global_step not in self.opt.upsample_model_steps:\n")
    assert found(code, "TL102") == [("TL102", 12)]


FUSE = """
def fuse(ops):
    amax = -1
    for op in ops:
        amax = max(amax, op._amax.detach().item())
    for op in ops:
        op._amax.fill_(amax)


for names in fusion_lists:
    ops = [get_module(model_ptq, name) for name in names]
    fuse(ops)
"""


def test_a_loop_that_looks_modules_up_by_name_does_not_run_them():
    assert found("import torch\n" + FUSE, "TL101", path="partial_quant.py") == []


def test_a_loop_that_runs_the_model_is_a_step_loop():
    code = "import torch\n" + FUSE.replace("    fuse(ops)\n", "    fuse(ops)\n    model_ptq(images)\n")
    assert found(code, "TL101", path="partial_quant.py") == [("TL101", 6)]


UNCALLED = """
import torch
from torch import nn


class Flow(nn.Module):
    def forward(self, x):
        return self.net(x)

    def test_invertibility(self, x):
        z = self.net(x)
        return self.net.reverse(z) - x
"""


def test_a_models_method_nobody_calls():
    assert found(UNCALLED, "TL302", path="flowtron.py") == []


def test_the_same_method_called_with_gradients_is_reported():
    code = UNCALLED + "\n\ndef check(model, x):\n    return model.test_invertibility(x)\n"
    assert found(code, "TL302", path="flowtron.py") == [("TL302", 10)]


# Set KK (vid2vid, style-based-gan-pytorch, UNITER, CodeT5, GroupViT,
# denoising-diffusion-gan, Latte, omnivore).

ANSWERS = """
import torch


def evaluate(model, loader, label2ans, results):
    for batch in loader:
        scores = model(batch)
        answers = [label2ans[i] for i in scores.max(dim=-1, keepdim=False)[1].cpu().tolist()]
        results.extend(zip(batch["qids"], answers))
"""


def test_predictions_turned_into_answers_are_the_point():
    assert found(ANSWERS, "TL102", path="inf_vqa.py") == []
    code = ANSWERS.replace("label2ans[i] for i", "'True' if i == 1 else 'False' for i")
    assert found(code, "TL102", path="inf_vqa.py") == []


def test_predictions_copied_to_be_compared_are_reported():
    code = ANSWERS.replace(
        "answers = [label2ans[i] for i in scores.max(dim=-1, keepdim=False)[1].cpu().tolist()]",
        "answers = (scores.max(dim=-1, keepdim=False)[1].cpu() == batch['labels']).sum()",
    )
    assert found(code, "TL102", path="inf_vqa.py") == [("TL102", 8)]


PICKLED = """
import pickle
import torch


def _decode(buffer_, enc_byte):
    size = sum(256 ** (enc_byte - i - 1) * buffer_[i].item() for i in range(enc_byte))
    return bytes(buffer_[enc_byte:enc_byte + size].tolist()), size + enc_byte


def all_gather_list(data):
    out_buffer = gather(pickle.dumps(data))
    results = []
    for _ in range(world_size()):
        bytes_list, shift = _decode(out_buffer, 4)
        out_buffer = out_buffer[shift:]
        results.append(pickle.loads(bytes_list))
    return results
"""


def test_the_size_header_of_pickled_buffers_is_the_protocol():
    assert found(PICKLED, "TL101", path="distributed.py") == []


def test_the_same_reads_in_a_module_that_pickles_nothing_are_reported():
    code = PICKLED.replace("pickle.dumps(data)", "data").replace("pickle.loads(bytes_list)", "bytes_list")
    assert found(code, "TL101", path="distributed.py") == [("TL101", 7)]


ONE_GPU = """
import torch
import torch.nn as nn


def create_model(opt, modelG, modelD, optimizer, loader):
    if opt.batchSize == 1:
        modelG = nn.DataParallel(modelG, device_ids=opt.gpu_ids[0:1])
    else:
        modelG = nn.DataParallel(modelG, device_ids=opt.gpu_ids[:2])
    for x in loader:
        modelG(x).mean().backward()
        optimizer.step()
"""


def test_data_parallel_over_one_device():
    assert found(ONE_GPU, "TL601") == [("TL601", 10)]
    assert found(ONE_GPU.replace("opt.gpu_ids[0:1]", "[0]"), "TL601") == [("TL601", 10)]


# Set LL (Microsoft Cream, DDSP-SVC, DiffusionDet, LaViLa, PyTorch-Encoding,
# TimeSformer, mdlm, starcoder).

SAMPLER = """
import torch
from torch import nn


class Solver:
    def time_steps(self, t_T, t_0, N, device):
        return torch.linspace(t_T, t_0, N + 1).to(device)

    def sample(self, x, steps, device):
        timesteps = self.time_steps(1.0, 1e-3, steps, device)
        for step in range(1, steps + 1):
            x = self.model_fn(x, timesteps[step])
        return x


class Diffusion(nn.Module):
    def forward(self, cond, infer=True):
        x = torch.randn(cond.shape, device=cond.device)
        return Solver().sample(x, 20, cond.device)
"""


def test_the_setup_of_a_many_step_sampler_runs_once_per_pass():
    assert found(SAMPLER, "TL201", path="solver.py") == []


def test_the_same_setup_inside_the_sampling_loop_is_reported():
    code = SAMPLER.replace("            x = self.model_fn(x, timesteps[step])\n",
                           "            x = self.model_fn(x, timesteps[step])\n"
                           "            noise = torch.randn(x.shape).to(device)\n")
    assert found(code, "TL201", path="solver.py") == [("TL201", 14)]


def test_a_forward_over_its_layers_keeps_its_setup_per_step():
    code = '''
import torch
from torch import nn


class Net(nn.Module):
    def forward(self, x):
        pos = torch.arange(x.shape[1]).to(x.device)
        for i in range(len(self.blocks)):
            x = self.blocks[i](x + pos)
        return x
'''
    assert found(code, "TL201", path="model.py") == [("TL201", 8)]
