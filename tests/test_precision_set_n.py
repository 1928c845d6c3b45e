"""Precision on a further set of projects never seen before (pytorch-GAT,
EfficientDet, pytorch-retinanet, EDM, the LoRA repository's copy of the
transformers examples; synthetic examples written here, not their code): a
scikit-learn metric fed every batch, a finite guard written with `or`,
conversion scripts, NVlabs' `ddp_sync` helper, a host loader under any name,
a loader never used, an interactive viewer, thresholded predictions and an
evaluation loop that disables gradients in its body.  Each with the
near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- a scikit-learn metric on every batch: the loop waits for its copies by design ------------

SKLEARN = """
import torch
from sklearn.metrics import f1_score


def train(model, loader, optimizer, writer, device):
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        out = model(x)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        pred = (out > 0).float().cpu().numpy()
        gt = y.cpu().numpy()
        micro_f1 = f1_score(gt, pred, average="micro")
        writer.add_scalar("loss", loss.item(), step)
"""


def test_copies_for_a_sklearn_metric_every_batch_are_silent():
    assert found(SKLEARN, "TL101,TL102") == []


def test_a_sklearn_metric_every_n_steps_leaves_the_per_step_reads_reported():
    code = SKLEARN.replace(
        '        micro_f1 = f1_score(gt, pred, average="micro")\n',
        '        if step % 100 == 0:\n            micro_f1 = f1_score(gt, pred, average="micro")\n',
    )
    assert found(code, "TL101,TL102") == [("TL102", 14), ("TL102", 15), ("TL101", 18)]


def test_copies_for_numpy_code_are_still_reported_in_training():
    code = SKLEARN.replace("f1_score(gt, pred", "np_f1(gt, pred").replace(
        "from sklearn.metrics import f1_score\n", ""
    )
    assert found(code, "TL101,TL102") == [("TL102", 13), ("TL102", 14), ("TL101", 16)]


# -- a finite guard written `if loss == 0 or not torch.isfinite(loss): continue` ------------------

GUARD = """
import torch


def train(model, loader, optimizer, device):
    for imgs, annot in loader:
        imgs = imgs.to(device, non_blocking=True)
        cls_loss, reg_loss = model(imgs, annot)
        loss = cls_loss.mean() + reg_loss.mean()
        if loss == 0 or not torch.isfinite(loss):
            continue
        loss.backward()
        optimizer.step()
        print(cls_loss.item(), loss.item())
"""


def test_a_loop_that_tests_a_tensor_in_the_right_operand_of_or_is_silent():
    assert found(GUARD, "TL101") == []


def test_the_right_operand_of_and_may_not_run_so_the_reads_are_reported():
    code = GUARD.replace("if loss == 0 or not", "if loss == 0 and not")
    assert found(code, "TL101") == [("TL101", 14), ("TL101", 14)]


def test_an_or_of_host_tests_is_no_wait():
    code = GUARD.replace("if loss == 0 or not torch.isfinite(loss):", "if imgs is None or not annot:")
    assert found(code, "TL101") == [("TL101", 14), ("TL101", 14)]


# -- TL302: a conversion script runs once -------------------------------------------------------

CONVERT = """
import torch


def convert_checkpoint(path, dump_path, loader):
    model = load_original(path)
    model.eval()
    ours = MyModel.from_original(model)
    ours.eval()
    for x in loader:
        assert torch.allclose(model(x), ours(x), atol=1e-3)
    torch.save(ours.state_dict(), dump_path)
"""


def test_a_conversion_script_is_silent():
    assert found(CONVERT, "TL302", path="convert_original_checkpoint.py") == []


def test_the_same_function_in_a_training_module_is_reported():
    assert found(CONVERT, "TL302", path="utils.py") == [("TL302", 5)]


# -- TL602: NVlabs' `misc.ddp_sync(module, sync)` wraps no_sync() -------------------------------

ACCUMULATE = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_utils import misc


def train(net, loader, optimizer, rounds, device):
    ddp = DDP(net, device_ids=[device])
    it = iter(loader)
    for step in range(1000):
        optimizer.zero_grad(set_to_none=True)
        for round_idx in range(rounds):
            with misc.ddp_sync(ddp, round_idx == rounds - 1):
                images = next(it).to(device)
                loss = ddp(images).sum()
                loss.backward()
        optimizer.step()
"""


def test_accumulation_under_ddp_sync_is_silent():
    assert found(ACCUMULATE, "TL602") == []


def test_accumulation_without_it_is_reported():
    code = ACCUMULATE.replace("misc.ddp_sync(ddp, round_idx == rounds - 1)", 'torch.autocast("cuda")').replace(
        "from torch_utils import misc\n", ""
    )
    assert found(code, "TL602") == [("TL602", 15)]


# -- TL101: a DataLoader's batches are host tensors whatever the loader is called ---------------

LENGTHS = """
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm


def get_lens(ds, pad):
    dl = tqdm(DataLoader(ds, batch_size=512, num_workers=8, collate_fn=ds.collate_fn))
    max_lens = []
    for batch in dl:
        longest = batch["input_ids"].ne(pad).sum(1).max().item()
        max_lens.append(longest)
    return max_lens
"""


def test_lengths_of_a_host_loaders_batches_are_silent():
    assert found(LENGTHS, "TL101") == []


def test_lengths_of_batches_moved_to_the_device_are_reported():
    code = LENGTHS.replace('batch["input_ids"].ne(pad)', 'batch["input_ids"].cuda(non_blocking=True).ne(pad)')
    assert found(code, "TL101") == [("TL101", 11)]


# -- TL202/TL203: a loader that a function builds and never uses --------------------------------

UNUSED_LOADER = """
import torch
from torch.utils.data import DataLoader


def main(train_set, val_set, model, optimizer):
    train_loader = DataLoader(train_set, batch_size=8, num_workers=4, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=4, num_workers=3)
    for data in train_loader:
        loss = model(data.cuda(non_blocking=True))
        loss.backward()
        optimizer.step()
    evaluate(val_set, model)
"""


def test_a_loader_never_used_is_silent():
    assert found(UNUSED_LOADER, "TL202,TL203") == []


def test_the_same_loader_used_is_reported():
    code = UNUSED_LOADER.replace("evaluate(val_set, model)", "evaluate(val_loader, model)")
    assert found(code, "TL202") == [("TL202", 8)]


def test_a_module_level_loader_is_reported_even_if_unused_here():
    # (another module may import it)
    code = """
import torch
from torch.utils.data import DataLoader

val_loader = DataLoader(val_set, batch_size=4, num_workers=2)


def train(model, loader):
    for x in loader:
        model(x.cuda())
"""
    assert found(code, "TL202") == [("TL202", 5)]


# -- TL102: an interactive viewer waits for a key press every image ------------------------------

VIEWER = """
import cv2
import numpy as np
import torch


def show(model, images):
    kept = []
    for image in images:
        scores, boxes = model(image.cuda().float())
        kept.append(scores.cpu())
        cv2.imshow("detections", draw(image, boxes))
        cv2.waitKey(0)
    return torch.cat(kept)
"""


def test_a_viewer_that_waits_for_a_key_is_silent():
    assert found(VIEWER, "TL102") == []


def test_a_video_loop_that_waits_a_millisecond_is_reported():
    assert found(VIEWER.replace("cv2.waitKey(0)", "cv2.waitKey(1)"), "TL102") == [("TL102", 11)]


# -- TL102 in evaluation: thresholded predictions, and `with torch.no_grad()` in the loop ----------

EVALUATE = """
import numpy as np
import torch


def evaluate(model, loader, criterion, device):
    preds = None
    for batch in loader:
        with torch.no_grad():
            logits = model(batch[0].to(device))
        if preds is None:
            preds = torch.sigmoid(logits).detach().cpu().numpy() > 0.5
        else:
            preds = np.append(preds, torch.sigmoid(logits).detach().cpu().numpy() > 0.5, axis=0)
    return preds
"""


def test_thresholded_predictions_collected_on_the_host_are_silent():
    assert found(EVALUATE, "TL102") == []


def test_a_metric_compared_on_the_host_is_still_reported():
    # (the labels come from the loader: already on the host, their `.cpu()` is no copy)
    # (copied without waiting: a blocking copy at the start of the iteration
    # would wait for the same work as the read at its end)
    code = EVALUATE.replace(
        "torch.sigmoid(logits).detach().cpu().numpy() > 0.5, axis=0",
        "logits.argmax(1).cpu().numpy() == batch[1].cpu().numpy(), axis=0",
    ).replace("batch[0].to(device)", "batch[0].to(device, non_blocking=True)")
    assert found(code, "TL102") == [("TL102", 14)]


EVAL_IN_TRAINING_FUNCTION = """
import numpy as np
import torch


def main(model, train_loader, eval_loader, optimizer, device):
    for batch in train_loader:
        loss = model(*[t.to(device) for t in batch])[0]
        loss.backward()
        optimizer.step()
    model.eval()
    for batch in eval_loader:
        input_ids, labels = (t.to(device) for t in batch)
        with torch.no_grad():
            logits = model(input_ids)[1]
        logits = logits.detach().cpu().numpy()
        labels = labels.to("cpu").numpy()
        accuracy = np.sum(np.argmax(logits, axis=1) == labels)
"""


def test_an_evaluation_loop_with_no_grad_in_its_body_feeds_numpy_metrics():
    assert found(EVAL_IN_TRAINING_FUNCTION, "TL102") == []


def test_the_same_copies_in_the_training_loop_are_reported():
    code = EVAL_IN_TRAINING_FUNCTION.replace(
        "        optimizer.step()\n", "        optimizer.step()\n        lg = loss.detach().cpu().numpy()\n"
    )
    assert found(code, "TL102") == [("TL102", 11)]


# -- TL201: an evaluator's `__call__(net, dl)` is a whole pass, not a step ------------------------
# (from a later set, BiSeNet: a confusion matrix made once per evaluation)

EVALUATOR = """
import torch
import torch.distributed as dist
from tqdm import tqdm


class MscEval(object):

    def __init__(self, n_classes):
        self.n_classes = n_classes

    @torch.no_grad()
    def __call__(self, net, dl):
        hist = torch.zeros(self.n_classes, self.n_classes).cuda()
        if dist.is_initialized() and dist.get_rank() != 0:
            diter = enumerate(dl)
        else:
            diter = enumerate(tqdm(dl))
        for i, (imgs, label) in diter:
            label = label.squeeze(1).cuda()
            probs = torch.zeros(label.shape).cuda()
            hist += update(net(imgs.cuda()), probs)
        return hist
"""


def test_the_evaluators_setup_runs_once_per_pass_and_its_loop_per_step():
    assert found(EVALUATOR, "TL201") == [("TL201", 21)]


def test_a_call_method_given_a_batch_is_still_a_step():
    code = EVALUATOR.replace("def __call__(self, net, dl):", "def __call__(self, net, batch):").replace(
        "(dl)", "(batch)"
    )
    assert found(code, "TL201") == [("TL201", 14), ("TL201", 21)]


# -- TL503/TL504: a graph network: tensor cores do not set its pace ---------------------------

GRAPH = """
import torch
from models.definitions.GAT import GAT


def train(config, node_features, node_labels, edge_index, train_idx):
    gat = GAT(num_of_layers=2, num_heads_per_layer=[8, 1]).cuda()
    optimizer = torch.optim.Adam(gat.parameters(), lr=5e-3)
    for epoch in range(config["num_of_epochs"]):
        scores = gat((node_features, edge_index))[0]
        loss = torch.nn.functional.cross_entropy(scores[train_idx], node_labels[train_idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_graph_network_is_silent():
    assert found(GRAPH, "TL503,TL504") == []


def test_the_same_loop_on_another_model_is_reported():
    code = GRAPH.replace("from models.definitions.GAT import GAT", "from models import Net").replace(
        "GAT(", "Net("
    ).replace("edge_index", "mask")
    assert found(code, "TL504") == [("TL504", 13)]


# -- a CPU-only program: no accelerator to wait for (a later set: d2l, MorvanZhou's tutorials) ------

CPU_SCRIPT = """
import torch
import torch.utils.data as Data
import torchvision

train_data = torchvision.datasets.MNIST(root="./mnist/", train=True, transform=torchvision.transforms.ToTensor())
train_loader = Data.DataLoader(dataset=train_data, batch_size=50, shuffle=True)
net = torch.nn.Linear(784, 10)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
losses = []
for epoch in range(2):
    for step, (x, y) in enumerate(train_loader):
        loss = torch.nn.functional.cross_entropy(net(x.view(-1, 784)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        preds = net(x.view(-1, 784)).cpu()
"""


def test_a_cpu_only_script_is_silent():
    assert found(CPU_SCRIPT, "TL101,TL102,TL203") == []


def test_the_same_script_on_the_gpu_is_reported():
    code = CPU_SCRIPT.replace("net(x.view(-1, 784)), y)", "net(x.cuda(non_blocking=True).view(-1, 784)), y.cuda(non_blocking=True))")
    assert found(code, "TL101,TL102,TL203") == [("TL203", 7), ("TL101", 17), ("TL102", 18)]


def test_a_library_function_without_an_entry_point_is_still_judged():
    code = '''
import torch


def evaluate(net, loader):
    total = 0.0
    for x, y in loader:
        total += (net(x).argmax(1) == y).float().sum().item()
    return total
'''
    assert found(code, "TL101") == [("TL101", 8)]


# -- TL101: autoregressive decoding builds the next input from the token it read ------------------

GENERATE = """
import torch


def predict_rnn(prefix, num_chars, model, device, idx_to_char, char_to_idx):
    state = None
    output = [char_to_idx[prefix[0]]]
    for t in range(num_chars + len(prefix) - 1):
        X = torch.tensor([output[-1]], device=device).view(1, 1)
        Y, state = model(X, state)
        if t < len(prefix) - 1:
            output.append(char_to_idx[prefix[t + 1]])
        else:
            output.append(int(Y.argmax(dim=1).item()))
    return "".join(idx_to_char[i] for i in output)
"""


def test_a_token_read_to_build_the_next_input_is_silent():
    assert found(GENERATE, "TL101") == []


def test_tokens_collected_but_not_fed_back_are_reported():
    code = GENERATE.replace("torch.tensor([output[-1]], device=device)", "torch.tensor([t], device=device)")
    assert found(code, "TL101") == [("TL101", 14)]


# -- TL302: a notebook's demo prediction on one example; TL502: `convert` is not a convolution ------

PREDICT = """def predict_sentiment(text, model, tokenizer, vocab, device):
    ids = vocab.lookup_indices(tokenizer(text))
    tensor = torch.LongTensor(ids).unsqueeze(dim=0).to(device)
    prediction = model(tensor).squeeze(dim=0)
    return prediction.argmax(-1).item()
"""


def _notebook_findings(runner, workdir, *sources):
    from tests.test_notebooks import code, notebook, run

    (workdir / "demo.ipynb").write_text(notebook(*(code(s) for s in sources)), encoding="utf-8")
    result = run(runner, "check", "--select", "TL302", "--output-format", "concise", "demo.ipynb")
    return [line.split(": ")[1].split(" ")[0] for line in result.stdout.splitlines() if ": TL" in line]


def test_a_notebooks_demo_prediction_run_once_is_silent(runner, workdir):
    assert _notebook_findings(runner, workdir, "import torch\n", PREDICT,
                              'predict_sentiment("This film is great", model, tokenizer, vocab, device)\n') == []


def test_the_same_prediction_over_a_dataset_is_reported(runner, workdir):
    loop = 'for text, label in test_dataset:\n    predict_sentiment(text, model, tokenizer, vocab, device)\n'
    assert _notebook_findings(runner, workdir, "import torch\n", PREDICT, loop) == ["TL302"]


def test_the_same_function_in_a_script_is_silent_once_and_reported_over_a_dataset():
    # (one forward pass in code that runs once: tests/test_precision_set_gg.py)
    once = "import torch\n\n\n" + PREDICT + '\n\nif __name__ == "__main__":\n    predict_sentiment("Great", model, tok, vocab, "cuda")\n'
    assert found(once, "TL302") == []
    looped = once.replace('    predict_sentiment("Great"', '    for text, label in test_dataset:\n        predict_sentiment(text')
    assert found(looped, "TL302") == [("TL302", 4)]


DETERMINISTIC_RNN = """
import random
import torch
import torch.nn as nn

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True


class RNN(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.rnn = nn.RNN(hidden, hidden)

    def forward(self, text):
        return self.rnn(self.embedding(text))[0]


tokens = [vocab.stoi[t] for t in sentence]  # convert the words to their indices
"""


def test_deterministic_cudnn_without_a_convolution_is_silent_even_if_it_converts_words():
    assert found(DETERMINISTIC_RNN, "TL502") == []


def test_with_a_convolution_it_is_reported():
    code = DETERMINISTIC_RNN.replace("nn.RNN(hidden, hidden)", "nn.Conv1d(hidden, hidden, 3)")
    assert found(code, "TL502") == [("TL502", 7)]


# -- TL601: a conversion script wraps a model once, to load a wrapped checkpoint -------------------

CONVERT_DP = """
import torch
from pose import models


def main(args):
    model = models.hg(num_stacks=2, num_blocks=1, num_classes=16)
    model = torch.nn.DataParallel(model).to("cuda")
    model.load_state_dict(torch.load(args.checkpoint)["state_dict"])
    torch.save(model.module.state_dict(), args.output)
"""


def test_dataparallel_in_a_conversion_script_is_silent():
    assert found(CONVERT_DP, "TL601", path="example/convert_checkpoint.py") == []


def test_the_same_wrap_in_a_training_script_is_reported():
    assert found(CONVERT_DP, "TL601", path="example/main.py") == [("TL601", 8)]
