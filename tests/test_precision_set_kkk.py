"""Precision on projects never seen before (set KKK: LAVIS, InternImage,
EasyMocap, RVC, tortoise-tts, vall-e, nerfstudio...; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint

# -- a model file's `example_usage()`, run from its `__main__` block ---------------------

AR = """\
import torch
from torch import nn


class AR(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.emb = nn.Embedding(n, 4096)
        self.head = nn.Linear(4096, n)

    def forward(self, x):
        return self.head(self.emb(x))


def {name}():
    device = "cuda"
    model = AR(1024).to(device)
    x = torch.tensor([1, 2, 3], device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    for i in range(100):
        optimizer.zero_grad()
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        optimizer.step()
        if i % 20 == 0:
            print(i, loss.item())
        print(loss.item())


if __name__ == "__main__":
    {name}()
"""


def test_a_model_files_example_fitting_toy_inputs_is_not_the_programs_training():
    # vall-e's ar.py: `example_usage()` overfits two toy sequences for 100 steps
    for name in ("example_usage", "demo", "sanity_check", "_smoke_test", "run_demo"):
        assert codes(lint(AR.format(name=name), select=["TL101", "TL504", "TL505"])) == [], name


def test_a_function_named_otherwise_or_called_elsewhere_still_trains():
    # `main()` is the program's training; `test()` is too common a name to say "demonstration"
    # (run long: a hundred steps are a short run, which TL505 leaves alone whatever the name)
    long = AR.replace("for i in range(100):", "for i in range(100_000):")
    for name in ("main", "train", "test"):
        assert codes(lint(long.format(name=name), select=["TL101", "TL504", "TL505"])) == ["TL504", "TL505", "TL101"], name
        assert codes(lint(AR.format(name=name), select=["TL101", "TL504", "TL505"])) == ["TL504", "TL101"], name
    called_twice = long.format(name="example_usage") + "\n\ndef fit():\n    example_usage()\n"
    assert codes(lint(called_twice, select=["TL504", "TL505"])) == ["TL504", "TL505"]


# -- a conv's bias before BatchNorm in a module that loads a checkpoint strictly ---------

HAND = """\
import torch
import torch.nn as nn


class Hand2D:
    def __init__(self, ckpt):
        checkpoint = torch.load(ckpt, map_location="cpu")["state_dict"]
        head = nn.Sequential(
            nn.Conv2d(270, 270, kernel_size=1),
            nn.BatchNorm2d(270),
            nn.ReLU(inplace=True),
            nn.Conv2d(270, 21, kernel_size=1),
        )
        {load}
        self.model = head.eval()
"""


def test_a_head_loaded_from_a_checkpoint_strictly_keeps_its_bias():
    # EasyMocap's hand2d.py: the checkpoint holds the bias, and BatchNorm in eval mode does not cancel it
    for load in ('head.load_state_dict(checkpoint, strict=True)',
                 'self.load_checkpoint(head, checkpoint, prefix="keypoint_head.final_layer.", strict=True)',
                 'load_checkpoint(head, ckpt, map_location=dict(cuda="cpu"), strict=True)'):
        assert codes(lint(HAND.format(load=load), select=["TL401"])) == [], load


def test_a_head_loaded_leniently_or_not_at_all_is_reported():
    for load in ("head.load_state_dict(checkpoint, strict=False)", "head.load_state_dict(checkpoint)", "pass"):
        assert codes(lint(HAND.format(load=load), select=["TL401"])) == ["TL401"], load


# -- cuDNN's autotuner off behind a `fix_random` switch -------------------------------

NEURALBODY = """\
import torch
from models import Net


def train(cfg):
    model = Net().cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for batch in cfg.loader:
        loss = model(batch.cuda()).mean()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    cfg = load()
    {guard}
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    train(cfg)
"""


def test_the_autotuner_off_behind_a_fix_random_switch_is_the_users_choice():
    # EasyMocap's neuralbody train_pl.py: `if cfg.fix_random:` turns on reproducible mode
    for guard in ("if cfg.fix_random:", "if args.fixed_random:", "if cfg.fix_randomness:"):
        assert codes(lint(NEURALBODY.format(guard=guard), select=["TL501"])) == [], guard
    assert codes(lint(NEURALBODY.format(guard="if cfg.fast:"), select=["TL501"])) == ["TL501"]


# -- batches bucketed by length: shapes change from batch to batch ---------------------

VITS = """\
import torch
from torch.utils.data import DataLoader
from data_utils import TextAudioLoader, TextAudioCollate, {sampler}
from models import SynthesizerTrn


def main():
    dataset = TextAudioLoader("filelists/train.txt")
    sampler = {sampler}(dataset, 8, [32, 300, 400, 500, 600, 700, 800, 900, 1000], shuffle=True)
    loader = DataLoader(dataset, num_workers=4, collate_fn=TextAudioCollate(), batch_sampler=sampler)
    net_g = SynthesizerTrn().cuda()
    optim_g = torch.optim.AdamW(net_g.parameters(), 2e-4)
    for epoch in range(1000):
        for x, x_lengths, spec, spec_lengths in loader:
            loss = net_g(x.cuda(), x_lengths.cuda(), spec.cuda(), spec_lengths.cuda())
            optim_g.zero_grad()
            loss.backward()
            optim_g.step()


if __name__ == "__main__":
    main()
"""


def test_a_program_that_buckets_its_batches_is_not_told_to_compile():
    # RVC's train.py, VITS: DistributedBucketSampler groups utterances of similar length
    assert codes(lint(VITS.format(sampler="DistributedBucketSampler"), select=["TL505"])) == []


def test_a_program_with_a_plain_sampler_is_told_to_compile():
    assert codes(lint(VITS.format(sampler="DistributedSampler"), select=["TL505"])) == ["TL505"]
    # `torch.bucketize` (a tensor op) and YOLOv5's `--bucket` (a gsutil storage bucket) name no buckets of batches
    assert codes(lint(VITS.format(sampler="DistributedSampler") + "\nif opt.bucket:\n    upload(opt.bucket)\n",
                      select=["TL505"])) == ["TL505"]
    assert codes(lint(VITS.format(sampler="DistributedSampler") + "\nidx = torch.bucketize(x, edges)\n",
                      select=["TL505"])) == ["TL505"]
