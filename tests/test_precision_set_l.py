"""Precision on a further set of projects never seen before (pytorch-seq2seq,
pytorch-semseg, Pointnet; synthetic examples written here, not their code):
greedy decoding, evaluation passes inside the training function, a dataset
module's demo, and deterministic cuDNN in a program without convolutions.
Each with the near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- TL101: greedy decoding reads each token to decide whether to go on --------------------

DECODE = """
import torch


def translate(model, src, sos, eos, device, max_len=50):
    model.eval()
    memory = model.encoder(src)
    tokens = [sos]
    for i in range(max_len):
        trg = torch.LongTensor(tokens).unsqueeze(0).to(device)
        with torch.no_grad():
            output = model.decoder(trg, memory)
        token = output.argmax(2)[:, -1].item()
        tokens.append(token)
        if token == eos:
            break
    return tokens
"""


def test_greedy_decoding_that_breaks_on_the_token_is_silent():
    assert found(DECODE, "TL101") == []


def test_a_while_loop_decoding_until_told_is_silent_too():
    code = DECODE.replace("    for i in range(max_len):", "    while True:")
    assert found(code, "TL101") == []


def test_a_loop_that_never_stops_on_the_token_is_reported():
    code = DECODE.replace("        if token == eos:\n            break\n", "")
    assert found(code, "TL101") == [("TL101", 13)]


def test_a_loop_over_a_tensors_items_that_breaks_on_one_is_reported():
    code = """
import torch


def combine(scores, masks, thresh):
    kept = []
    for i in torch.argsort(-scores):
        score = scores[i].item()
        if score < thresh:
            break
        kept.append(masks[i])
    return kept
"""
    assert found(code, "TL101") == [("TL101", 8)]


# -- TL102: a validation pass inside the function that trains ----------------------------

TRAIN_AND_VALIDATE = """
import numpy as np
import torch


def main(model, trainloader, valloader, optimizer, metrics, epochs):
    for epoch in range(epochs):
        for images, labels in trainloader:
            loss = model(images.cuda(), labels.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for images, labels in valloader:
                outputs = model(images.cuda())
                pred = outputs.max(1)[1].cpu().numpy()
                metrics.update(labels.numpy(), pred)
        model.train()
"""


def test_copies_for_numpy_metrics_in_a_validation_pass_under_no_grad_are_silent():
    assert found(TRAIN_AND_VALIDATE, "TL102") == []


def test_the_same_copy_in_the_training_loop_is_reported():
    code = TRAIN_AND_VALIDATE.replace(
        "            optimizer.step()\n",
        "            optimizer.step()\n            acc = (loss.argmax(1).cpu() == labels).float().mean()\n",
    )
    assert found(code, "TL102") == [("TL102", 13)]


def test_a_no_grad_block_inside_the_training_loop_is_still_training():
    code = TRAIN_AND_VALIDATE.replace(
        "            optimizer.step()\n",
        "            optimizer.step()\n            with torch.no_grad():\n"
        "                acc = (loss.argmax(1).cpu() == labels).float().mean()\n",
    )
    assert found(code, "TL102") == [("TL102", 14)]


# -- TL202/TL203: a dataset module's own demo ----------------------------------------------

DATASET_MODULE = """
import torch
from torch.utils import data


class CamVid(data.Dataset):
    def __init__(self, root, transform=None):
        self.files = sorted(root)
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        return self.transform(self.files[index])


if __name__ == "__main__":
    dst = CamVid("/data/camvid", transform=lambda f: f)
    loader = data.DataLoader(dst, batch_size=4)
    for i, sample in enumerate(loader):
        print(sample.shape)
"""


def test_a_dataset_modules_demo_is_silent():
    assert found(DATASET_MODULE, "TL202,TL203", path="ptsemseg/loader/camvid_loader.py") == []


def test_a_demo_that_moves_batches_to_the_device_is_reported():
    code = DATASET_MODULE.replace("        print(sample.shape)", "        print(model(sample.cuda()).shape)")
    assert found(code, "TL202,TL203", path="ptsemseg/loader/camvid_loader.py") == [("TL203", 20)]


def test_a_script_that_trains_is_reported():
    code = DATASET_MODULE.replace("        print(sample.shape)", "        loss = sample.cuda().sum()\n        loss.backward()")
    assert found(code, "TL203", path="ptsemseg/loader/camvid_loader.py") == [("TL203", 20)]


# -- TL502: deterministic cuDNN where nothing convolves ------------------------------------

SEQ2SEQ = """
import random

import numpy as np
import torch
import torch.nn as nn

seed = 1234
random.seed(seed)
torch.manual_seed(seed)
torch.backends.cudnn.deterministic = True


class Encoder(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden)

    def forward(self, src):
        return self.rnn(self.embedding(src))
"""


def test_deterministic_cudnn_in_a_program_without_convolutions_is_silent():
    assert found(SEQ2SEQ, "TL502") == []


def test_a_program_with_a_convolution_is_reported():
    code = SEQ2SEQ.replace("self.rnn = nn.LSTM(hidden, hidden)", "self.rnn = nn.Conv1d(hidden, hidden, 3)")
    assert found(code, "TL502") == [("TL502", 11)]


def test_a_program_that_imports_its_models_is_reported():
    code = SEQ2SEQ.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom models import Seq2Seq\n")
    assert found(code, "TL502") == [("TL502", 12)]


def test_a_program_using_a_model_zoo_is_reported():
    code = SEQ2SEQ.replace("import torch.nn as nn\n", "import torch.nn as nn\nimport torchvision\n")
    assert found(code, "TL502") == [("TL502", 12)]


# -- set M: a dataset's items, and a factory verb -----------------------------------------

RENDER_EVAL = """
import numpy as np
import torch


def evaluate(models, dataset_dict, name, psnr, render):
    dataset = dataset_dict[name](split="test")
    psnrs = []
    for i in range(len(dataset)):
        sample = dataset[i]
        pred = render(models, sample["rays"].cuda()).cpu().numpy()
        psnrs.append(psnr(sample["rgbs"], pred).item())
    return np.mean(psnrs)
"""


def test_an_item_of_a_dataset_is_a_host_value():
    assert found(RENDER_EVAL, "TL101") == []


# (the rendering kept on the device: a loop that copies each one out waits anyway)
RENDER_ON_DEVICE = RENDER_EVAL.replace('sample["rays"].cuda()).cpu().numpy()', 'sample["rays"].cuda())')


def test_an_item_moved_to_the_device_is_not():
    code = RENDER_ON_DEVICE.replace('psnr(sample["rgbs"], pred)', 'psnr(sample["rgbs"].cuda(), pred)')
    assert found(code, "TL101") == [("TL101", 12)]


def test_a_dataset_moved_to_the_device_is_not_a_host_source():
    code = RENDER_ON_DEVICE.replace('dataset = dataset_dict[name](split="test")', 'dataset = dataset_dict[name](split="test").to("cuda")')
    assert found(code, "TL101") == [("TL101", 12)]


def test_cloning_an_averaged_model_runs_no_model():
    code = """
import torch


def eval_model(model, ema, x, clone_as_averaged_model):
    model = clone_as_averaged_model(model, ema)
    model.eval()
    with torch.no_grad():
        return model.incremental_forward(x)
"""
    assert found(code, "TL302") == []
