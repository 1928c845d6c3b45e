"""Precision on sets QQ-SS (DiffBIR, LaTeX-OCR, NeuS, lingua, gmflow,
temporal-shift-module, pretrained-models.pytorch, VQGAN-CLIP, st-gcn,
pytorch-dc-tts, ...; synthetic examples written here, not their code): a
guard that holds at one iteration of the loop (``if i == max_iterations:``), a
loop over the machine's GPUs, a loss rebound to a number by a tuple
assignment, and a model that loads a published checkpoint whole.  Each with
the near-miss that must still be reported.  The cross-module facts of these
sets are tested in tests/test_program_across_modules.py."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str, path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# An optimisation loop that reports at its last iteration (VQGAN-CLIP).
LAST_ITERATION = """
import torch


def checkin(i, losses):
    print(i, ", ".join(f"{loss.item():g}" for loss in losses))


def run(z, opt, max_iterations, display_freq):
    for i in range(1, max_iterations + 1):
        opt.zero_grad(set_to_none=True)
        losses = ascend(z)
        sum(losses).backward()
        opt.step()
        if i == max_iterations:
            checkin(i, losses)
"""


def test_a_guard_that_holds_at_one_iteration_runs_once():
    assert found(LAST_ITERATION, "TL101") == []
    code = LAST_ITERATION.replace("for i in range(1, max_iterations + 1):", "for i, batch in enumerate(loader):")
    assert found(code, "TL101") == []


def test_a_guard_on_something_else_than_the_loop_index_is_every_step():
    # `flag == 1` holds at any number of iterations
    code = LAST_ITERATION.replace("if i == max_iterations:", "if flag == 1:")
    assert found(code, "TL101") == [("TL101", 6)]
    # the index compared with itself (`i == i // 1`) says nothing
    code = LAST_ITERATION.replace("if i == max_iterations:", "if i == i // 1:")
    assert found(code, "TL101") == [("TL101", 6)]


# A start-up helper that touches every GPU (st-gcn's torchlight).
OCCUPY = """
import torch


def occupy_gpu(gpus=None):
    if gpus is None:
        torch.zeros(1).cuda()
    else:
        for g in gpus:
            torch.zeros(1).cuda(g)
        for i in range(torch.cuda.device_count()):
            torch.ones(1).cuda(i)
"""


def test_a_loop_over_the_gpus_runs_a_handful_of_times():
    assert found(OCCUPY, "TL201") == []


def test_a_loop_over_batches_in_the_same_helper_is_every_step():
    code = OCCUPY + """

def warm(loader):
    for batch in loader:
        torch.zeros(1).cuda()
"""
    assert found(code, "TL201") == [("TL201", 17)]


# Training loop that turns its losses into numbers in one tuple assignment (dc-tts).
TUPLE_ITEMS = """
import torch


def train(model, loader, optimizer):
    running_loss = 0
    for x, y in loader:
        l1_loss, att_loss = model(x.cuda(), y.cuda())
        loss = l1_loss + att_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss, l1_loss, att_loss = loss.item(), l1_loss.item(), att_loss.item()
        running_loss += loss
    return running_loss
"""


def test_a_loss_rebound_to_a_number_by_a_tuple_assignment_holds_no_graph():
    assert found(TUPLE_ITEMS, "TL303") == []


def test_a_tuple_assignment_that_keeps_the_tensor_is_still_reported():
    code = TUPLE_ITEMS.replace(
        "loss, l1_loss, att_loss = loss.item(), l1_loss.item(), att_loss.item()",
        "loss, l1_loss = loss, l1_loss.item()",
    )
    assert found(code, "TL303") == [("TL303", 14)]


# A port of published weights (pretrained-models.pytorch's BN-Inception).
PORT = """
import torch.nn as nn
import torch.utils.model_zoo as model_zoo


class BNInception(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3)
        self.conv1_bn = nn.BatchNorm2d(64)

    def forward(self, x):
        return self.conv1_bn(self.conv1(x))


def bninception(pretrained=True):
    model = BNInception()
    if pretrained:
        model.load_state_dict(model_zoo.load_url("https://example.org/bninception.pth"))
    return model
"""


def test_tl401_a_port_of_published_weights_keeps_its_biases():
    assert found(PORT, "TL401", path="bninception.py") == []


def test_tl401_a_model_that_loads_pretrained_weights_leniently_is_reported():
    # filtered or non-strict loading: dropping the bias loses nothing the load needs
    code = PORT.replace('model_zoo.load_url("https://example.org/bninception.pth")',
                        'model_zoo.load_url("https://example.org/bninception.pth"), strict=False')
    assert found(code, "TL401", path="bninception.py") == [("TL401", 9)]
    code = PORT.replace('model.load_state_dict(model_zoo.load_url("https://example.org/bninception.pth"))',
                        'state = model_zoo.load_url("https://example.org/x.pth")')
    assert found(code, "TL401", path="bninception.py") == [("TL401", 9)]


# A table of attention implementations (DiffBIR): vanilla, xFormers, SDPA.
ATTENTION_TABLE = """
import torch
import torch.nn.functional as F
from torch import nn


class CrossAttention(nn.Module):
    def forward(self, q, k, v):
        sim = torch.einsum("b i d, b j d -> b i j", q, k) * self.scale
        sim = sim.softmax(dim=-1)
        return torch.einsum("b i j, b j d -> b i d", sim, v)


class MemoryEfficientCrossAttention(nn.Module):
    def forward(self, q, k, v):
        return xformers.ops.memory_efficient_attention(q, k, v)


class SDPCrossAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class BasicTransformerBlock(nn.Module):
    ATTENTION_MODES = {
        "vanilla": CrossAttention,
        "xformers": MemoryEfficientCrossAttention,
        "sdp": SDPCrossAttention,
    }
"""


def test_tl402_the_fallback_of_a_table_with_an_sdpa_entry():
    assert found(ATTENTION_TABLE, "TL402", path="attention.py") == []


def test_tl402_a_table_whose_only_fused_entry_is_xformers_keeps_the_finding():
    # latent-diffusion's table: without xFormers installed, the written-out class runs
    code = ATTENTION_TABLE.replace('        "sdp": SDPCrossAttention,\n', "")
    assert found(code, "TL402", path="attention.py") == [("TL402", 10)]


# A model converted from a Torch7 file by convert_torch_to_pytorch (DAIN's MegaDepth).
CONVERTED = """
import torch
import torch.nn as nn
from functools import reduce


class LambdaBase(nn.Sequential):
    def __init__(self, fn, *args):
        super(LambdaBase, self).__init__(*args)
        self.lambda_func = fn


class LambdaReduce(LambdaBase):
    def forward(self, input):
        return reduce(self.lambda_func, self.forward_prepare(input))


hourglass = nn.Sequential(
    nn.Conv2d(3, 128, (7, 7), (1, 1), (3, 3)),
    nn.BatchNorm2d(128, 1e-05, 0.1, False),
    nn.ReLU(),
)
"""


def test_tl401_a_model_converted_from_torch7_keeps_its_biases():
    assert found(CONVERTED, "TL401", path="pytorch_DIW_scratch.py") == []


def test_tl401_a_class_merely_named_lambdabase_is_not_a_conversion():
    code = CONVERTED.replace("class LambdaReduce(LambdaBase):", "class Reduce(LambdaBase):")
    assert found(code, "TL401", path="pytorch_DIW_scratch.py") == [("TL401", 19)]


# A script whose worker count is a variable set to 0 (Udacity's notebooks).
WORKERS = """
import torch
from torch.utils.data import DataLoader

num_workers = 0
train_loader = DataLoader(train_data, batch_size=20, sampler=train_sampler, num_workers=num_workers)
model = Net().cuda()
for data, target in train_loader:
    data, target = data.cuda(), target.cuda()
    model(data)
"""


def test_tl202_a_worker_count_variable_of_zero_loads_in_the_main_process():
    assert found(WORKERS, "TL202") == []


def test_tl202_a_worker_count_variable_above_zero_is_reported():
    assert found(WORKERS.replace("num_workers = 0", "num_workers = 4"), "TL202") == [("TL202", 6)]


# A loader built to show one batch; the training function's parameter has its name.
SHOWN = """
import torch
from torch.utils.data import DataLoader

train_dataloader = DataLoader(train_data, batch_size=1, num_workers=1, shuffle=True)
train_dataloader, len(train_dataloader)
print(len(train_dataloader))
img, label = next(iter(train_dataloader))


def train_step(model, train_dataloader, device):
    for X, y in train_dataloader:
        X, y = X.to(device), y.to(device)
        model(X)
"""


def test_tl202_a_loader_only_shown_and_peeked_fetches_one_batch():
    assert found(SHOWN, "TL202") == []


def test_tl202_a_shown_loader_that_is_also_passed_on_is_reported():
    code = SHOWN + "\ntrain_step(model, train_dataloader, 'cuda')\n"
    assert found(code, "TL202") == [("TL202", 5)]


# Per-class accuracy on NumPy values chosen by a conditional expression (Udacity).
NUMPY_BRANCHES = """
import numpy as np
import torch


def test(model, loader, train_on_gpu):
    for data, target in loader:
        data, target = data.cuda(), target.cuda()
        output = model(data)
        _, pred = torch.max(output, 1)
        correct_tensor = pred.eq(target.data.view_as(pred))
        correct = np.squeeze(correct_tensor.numpy()) if not train_on_gpu else np.squeeze(correct_tensor.cpu().numpy())
        for i in range(target.size(0)):
            class_correct[target.data[i]] += correct[i].item()
"""


def test_tl101_numpy_values_from_either_branch_are_on_the_host():
    assert [f for f in found(NUMPY_BRANCHES, "TL101") if f[1] == 14] == []


def test_tl101_a_conditional_expression_with_a_device_branch_is_reported():
    code = NUMPY_BRANCHES.replace("else np.squeeze(correct_tensor.cpu().numpy())", "else correct_tensor")
    assert ("TL101", 14) in found(code, "TL101")


CIFAR_WORKERS = """
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

num_workers = 0
transform = transforms.Compose([transforms.ToTensor()])
train_data = datasets.CIFAR10("data", train=True, download=True, transform=transform)
train_loader = DataLoader(train_data, batch_size=20, num_workers=num_workers)
model = Net().cuda()
for data, target in train_loader:
    model(data.cuda())
"""


def test_tl203_reports_a_worker_count_variable_of_zero_instead():
    # the loader that TL202 leaves (no workers, so pinning buys nothing yet) is TL203's
    assert found(CIFAR_WORKERS, "TL202,TL203") == [("TL203", 9)]
    assert found(CIFAR_WORKERS.replace("num_workers = 0", "num_workers = 4"), "TL202,TL203") == [("TL202", 9)]
    two = CIFAR_WORKERS.replace("num_workers = 0", "num_workers = 0\nif fast:\n    num_workers = 8")
    assert found(two, "TL203") == []


SWITCH = """
import torch

if args.use_cudnn:
    print("cudnn is used")
    torch.backends.cudnn.benchmark = True
else:
    print("cudnn is not used")
    torch.backends.cudnn.benchmark = False
"""


def test_tl501_the_off_branch_of_a_users_switch_is_their_choice():
    assert found(SWITCH, "TL501", path="my_args.py") == []


def test_tl501_a_switch_whose_other_branch_sets_something_else_is_reported():
    code = SWITCH.replace("    torch.backends.cudnn.benchmark = True\n", "    torch.backends.cudnn.enabled = True\n")
    assert found(code, "TL501", path="my_args.py") == [("TL501", 9)]


# A course notebook's model (mrdbourke's circles classifier, NYU's spiral MLP).
TINY = """
import torch
from torch import nn

NUM_FEATURES = 2
H = 100


class CircleModel(nn.Module):
    def __init__(self, input_features, output_features, hidden_units=8):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features=input_features, out_features=hidden_units),
            nn.ReLU(),
            nn.Linear(in_features=hidden_units, out_features=output_features),
        )

    def forward(self, x):
        return self.layers(x)


model = CircleModel(input_features=NUM_FEATURES, output_features=4, hidden_units=H).to("cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(1000):
    loss = nn.functional.cross_entropy(model(X_train), y_train)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_whole_program_advice_is_silent_for_a_visibly_tiny_model():
    assert found(TINY, "TL503,TL504,TL505") == []


def test_a_model_whose_width_is_not_written_out_is_still_reported():
    # a width from the data (`len(classes)`) or a large one: the rules judge as usual
    # (over a long run: the notebook's 1,000 full-batch steps are a short one for TL505)
    long = TINY.replace("for epoch in range(1000):", "for epoch in range(100_000):")
    unknown = long.replace("output_features=4", "output_features=len(classes)")
    assert [code for code, _ in found(unknown, "TL503,TL504,TL505")] == ["TL503", "TL504", "TL505"]
    wide = long.replace("NUM_FEATURES = 2", "NUM_FEATURES = 1024").replace("H = 100", "H = 4096")
    assert [code for code, _ in found(wide, "TL503,TL504,TL505")] == ["TL503", "TL504", "TL505"]
    pretrained = long.replace("import torch\n", "import torch\nimport timm\n", 1) + "backbone = timm.create_model('x')\n"
    assert [code for code, _ in found(pretrained, "TL503,TL504,TL505")] == ["TL503", "TL504", "TL505"]


# PNASNet's published classifier (pretrained-models.pytorch): TL506 on a port.
PNASNET_HEAD = """
import torch.nn as nn
import torch.utils.model_zoo as model_zoo


class PNASNet5Large(nn.Module):
    def __init__(self, num_classes=1001):
        super().__init__()
        self.last_linear = nn.Linear(4320, num_classes)


def pnasnet5large(pretrained=True):
    model = PNASNet5Large()
    model.load_state_dict(model_zoo.load_url("https://example.org/pnasnet5large.pth"))
    return model
"""


def test_tl506_a_port_of_published_weights_keeps_its_sizes():
    assert found(PNASNET_HEAD, "TL506", path="pnasnet.py") == []


def test_tl506_the_same_layer_without_published_weights_is_reported():
    code = PNASNET_HEAD.replace('    model.load_state_dict(model_zoo.load_url("https://example.org/pnasnet5large.pth"))\n', "")
    assert found(code, "TL506", path="pnasnet.py") == [("TL506", 9)]
