"""Precision on projects never seen before (set VVV; docs/precision.md).
Synthetic examples written for these tests, each with the near-miss that
must still be reported."""

from __future__ import annotations

from tests.helpers import codes, lint

# -- TL101: loaders returned by a function, copies under `torch.no_grad()` ---------------------

LOADERS_FROM_A_FUNCTION = """\
import torch
from torchvision import datasets

DEVICE = torch.device("cuda")


def load_data(path, batch_size):
    train_set = datasets.MNIST(path, train=True)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True)
    test_loader = torch.utils.data.DataLoader(datasets.MNIST(path, train=False), batch_size=batch_size)
    return train_loader, test_loader


def main(model, optimizer):
    train_loader, test_loader = load_data("data", 32)
    for epoch in range(10):
        for i, (images, labels) in enumerate(train_loader):
            model.train()
            images = images.to(DEVICE)
            labels = labels.to(DEVICE)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            print(loss.item())
"""


def test_a_read_at_the_end_of_a_step_over_a_loader_a_function_of_the_module_returns_is_silent():
    # the next iteration's blocking copy waits for the same work
    assert codes(lint(LOADERS_FROM_A_FUNCTION, select=["TL101"])) == []


def test_a_read_before_the_step_is_queued_is_still_reported():
    changed = LOADERS_FROM_A_FUNCTION.replace(
        "            loss.backward()\n            optimizer.step()\n            print(loss.item())\n",
        "            print(loss.item())\n            loss.backward()\n            optimizer.step()\n",
    )
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


def test_a_function_that_returns_a_prefetcher_is_no_loader_of_host_batches():
    changed = LOADERS_FROM_A_FUNCTION.replace(
        "    return train_loader, test_loader\n", "    return CudaPrefetcher(train_loader), test_loader\n"
    )
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


IMPORTED_LOADER = """\
import torch
from mypkg.utils import get_mnist_test_loader

device = torch.device("cuda")


def evaluate(model):
    test_loader = get_mnist_test_loader(100)
    total = 0.0
    for data, target in test_loader:
        data, target = data.to(device), target.to(device)
        with torch.no_grad():
            output = model(data)
        total += output.max(1)[1].eq(target).sum().item()
    return total
"""


def test_a_loader_from_an_imported_function_named_for_one_yields_host_batches():
    assert codes(lint(IMPORTED_LOADER, select=["TL101"])) == []


def test_an_imported_loader_function_given_a_device_may_yield_device_batches():
    changed = IMPORTED_LOADER.replace("get_mnist_test_loader(100)", "get_mnist_test_loader(100, device=device)")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


COPY_UNDER_NO_GRAD = """\
import torch

DEVICE = torch.device("cuda")


def evaluate(model, dataset):
    loader = torch.utils.data.DataLoader(dataset, batch_size=32)
    correct = 0
    for images, labels in loader:
        model.eval()
        with torch.no_grad():
            images = images.to(DEVICE)
            labels = labels.to(DEVICE)
            outputs = model(images)
            correct += (outputs.argmax(1) == labels).sum().item()
    return correct
"""


def test_a_blocking_copy_under_no_grad_still_opens_the_iteration():
    assert codes(lint(COPY_UNDER_NO_GRAD, select=["TL101"])) == []


def test_a_read_inside_the_block_with_work_after_it_is_reported():
    changed = COPY_UNDER_NO_GRAD.replace(
        "            correct += (outputs.argmax(1) == labels).sum().item()\n",
        "            correct += (outputs.argmax(1) == labels).sum().item()\n            refine(model, images)\n",
    ).replace("refine(model, images)", "model(images).sum()")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


# -- TL103: a benchmark's repetitions between two clock readings -------------------------------

BENCHMARK = """\
import time
import torch


def bench(model, x, n_runs):
    with torch.no_grad():
        for _ in range(10):  # warm up
            model(x)
            torch.cuda.synchronize()
        start = time.time()
        for _ in range(n_runs):
            model(x)
            torch.cuda.synchronize()
        took = time.time() - start
    print(took / n_runs)
"""


def test_repetitions_timed_by_the_statements_around_the_loop_are_silent():
    assert codes(lint(BENCHMARK, select=["TL103"])) == []


def test_a_loop_over_inputs_with_no_clock_around_it_is_reported():
    changed = BENCHMARK.replace("        start = time.time()\n", "").replace(
        "        took = time.time() - start\n", "        took = 1.0\n").replace(
        "        for _ in range(10):  # warm up\n            model(x)\n            torch.cuda.synchronize()\n", "")
    assert codes(lint(changed, select=["TL103"])) == ["TL103"]


def test_a_timed_training_loop_is_still_reported():
    changed = BENCHMARK.replace(
        "        for _ in range(n_runs):\n            model(x)\n",
        "        for _ in range(n_runs):\n            model(x).sum().backward()\n            opt.step()\n",
    ).replace("    with torch.no_grad():\n", "    if True:\n")
    assert codes(lint(changed, select=["TL103"])) == ["TL103"]


# -- MinkowskiEngine: sparse convolutions with a changing number of points ---------------------

SPARSE = """\
import MinkowskiEngine as ME
import torch
from torch import nn


def train(net, loader, optimizer, device):
    net.train()
    for coords, feats, labels in loader:
        sin = ME.SparseTensor(feats.to(device), coordinates=coords.to(device))
        loss = nn.functional.cross_entropy(net(sin).F, labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()


def main():
    net = MinkUNet14(3, 20).cuda()
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=4, pin_memory=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(100):
        train(net, loader, optimizer, torch.device("cuda"))
"""


def test_a_minkowski_engine_program_gets_no_autocast_compile_or_empty_cache_advice():
    assert codes(lint(SPARSE, select=["TL504", "TL505", "TL702"])) == []


def test_the_same_program_without_minkowski_engine_is_reported():
    changed = SPARSE.replace("import MinkowskiEngine as ME\n", "from mylib import sparse as ME\n")
    assert sorted(codes(lint(changed, select=["TL504", "TL505", "TL702"]))) == ["TL504", "TL702"]


# -- TL302: a function that shows its inputs ---------------------------------------------------

VISUALIZE = """\
import torch
import open3d as o3d


def visualize(net, dataloader, device):
    net.eval()
    for i, batch in enumerate(dataloader):
        out = net(batch["coords"].to(device))
        o3d.visualization.draw_geometries([to_cloud(out)])
        if i > 5:
            break
"""


def test_a_function_named_for_drawing_is_not_asked_for_no_grad():
    assert codes(lint(VISUALIZE, select=["TL302"])) == []


def test_an_evaluation_function_is_still_reported():
    changed = VISUALIZE.replace("def visualize(", "def evaluate(")
    assert codes(lint(changed, select=["TL302"])) == ["TL302"]


# -- TL601: wrapped only to load a checkpoint saved from a wrapped model -----------------------

LOAD_WRAPPED = """\
import torch
import torch.nn as nn


def load_flexible(model, path):
    checkpoint = torch.load(path)
    if "module." in next(iter(checkpoint)):
        model = nn.DataParallel(model)
        model.load_state_dict(checkpoint)
        model = model.module
    return model


def train(model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
"""


def test_a_wrap_undone_right_after_loading_is_silent():
    assert codes(lint(LOAD_WRAPPED, select=["TL601"])) == []


def test_a_wrap_that_is_kept_is_reported():
    changed = LOAD_WRAPPED.replace("        model = model.module\n", "")
    assert codes(lint(changed, select=["TL601"])) == ["TL601"]


# -- TL201: a vector of per-sample numbers set up before an attack's steps ---------------------

ATTACK = """\
import torch


class PGD:
    def __init__(self, model, eps, steps, device):
        self.model, self.eps, self.steps, self.device = model, eps, steps, device

    def __call__(self, images, labels):
        return self.forward(images, labels)

    def forward(self, images, labels):
        x = images.clone().detach().to(self.device)
        step = self.eps * torch.ones([x.shape[0], 1, 1, 1]).to(self.device)
        best = torch.zeros(len(images)).to(self.device)
        for _ in range(self.steps):
            x.requires_grad = True
            cost = torch.nn.functional.cross_entropy(self.model(x), labels)
            grad = torch.autograd.grad(cost, x)[0]
            x = (x + step * grad.sign()).detach()
        return x, best


def train(model, loader, optimizer, device):
    attack = PGD(model, 8 / 255, 10, device)
    for images, labels in loader:
        adv, _ = attack(images.to(device), labels.to(device))
        loss = torch.nn.functional.cross_entropy(model(adv), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_per_sample_vectors_made_once_before_the_steps_loop_are_silent():
    assert codes(lint(ATTACK, select=["TL201"])) == []


def test_a_batch_sized_random_start_before_the_loop_is_still_reported():
    changed = ATTACK.replace(
        "        best = torch.zeros(len(images)).to(self.device)\n",
        "        best = torch.zeros(len(images)).to(self.device)\n        x = x + torch.rand(x.shape).to(self.device)\n",
    )
    assert codes(lint(changed, select=["TL201"])) == ["TL201"]


def test_a_vector_made_inside_the_steps_loop_is_still_reported():
    changed = ATTACK.replace(
        "            x = (x + step * grad.sign()).detach()\n",
        "            x = (x + step * grad.sign() * torch.ones([x.shape[0], 1, 1, 1]).to(self.device)).detach()\n",
    )
    assert codes(lint(changed, select=["TL201"])) == ["TL201"]


def test_a_vector_made_before_a_loop_without_gradients_is_still_reported():
    changed = ATTACK.replace("            grad = torch.autograd.grad(cost, x)[0]\n", "            grad = cost\n")
    assert codes(lint(changed, select=["TL201"])) == ["TL201", "TL201"]


# -- TL101: a loop that tests a sum of a tensor every iteration --------------------------------

SAMPLER = """\
import torch


class Sampler:
    def sample(self):
        weights_all = self.degrees.detach().clone()
        picked = torch.zeros(self.degrees.shape[0], dtype=torch.bool)
        result = []
        for _ in range(self.batch_size):
            weights = weights_all * picked
            if torch.sum(weights) == 0:
                chosen = torch.randint(len(picked), size=())
            else:
                chosen = torch.multinomial(weights.float(), num_samples=1)[0]
            picked[chosen] = True
            result.append(self.degrees[chosen].item())
        return result
"""


def test_a_loop_that_tests_a_sum_every_iteration_already_waits():
    assert codes(lint(SAMPLER, select=["TL101"])) == []


def test_a_test_on_a_host_number_does_not_wait():
    changed = SAMPLER.replace("if torch.sum(weights) == 0:", "if len(result) == 0:")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


# -- scikit-learn's synthetic data: a demonstration whose whole run takes seconds --------------

TOY = """\
import torch
from sklearn.datasets import make_regression
from torch.utils.data import DataLoader, TensorDataset

X, y = make_regression(n_samples=2000, n_features=10)
device = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters())
loader = DataLoader(TensorDataset(torch.tensor(X).float(), torch.tensor(y).float()), batch_size=128)

if __name__ == "__main__":
    for epoch in range(5):
        total = 0.0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb.to(device)).squeeze(-1), yb.to(device))
            total += loss.item()
            loss.backward()
            optimizer.step()
            noise = torch.randn(64, 10).to(device)
"""


def test_a_program_on_scikit_learns_synthetic_data_is_not_reported():
    assert codes(lint(TOY, select=["TL101", "TL201", "TL202", "TL203"])) == []


def test_the_same_program_asking_for_a_million_samples_is_reported():
    changed = TOY.replace("n_samples=2000", "n_samples=1_000_000")
    assert sorted(codes(lint(changed, select=["TL101", "TL201", "TL202", "TL203"]))) == ["TL101", "TL201"]


# -- set WWW: reads the loop's own control needs, tensor tests, float64, verbosity -------------

REJECTION = """\
import torch


def sample(proposal, prior, num_samples):
    accepted = []
    num_remaining = num_samples
    while num_remaining > 0:
        candidates = proposal.sample((1000,))
        ok = prior.support.check(candidates)
        accepted.append(candidates)
        num_remaining -= ok.sum().item()
    return torch.cat(accepted)


def resample(neg_idx, pos_idx, sampler):
    while True:
        wrong = neg_idx == pos_idx.view(-1, 1)
        if wrong.sum().item() > 0:
            neg_idx = neg_idx + sampler(neg_idx)
        else:
            break
    return neg_idx
"""


def test_a_count_the_while_test_reads_and_a_read_that_decides_to_stop_are_silent():
    assert codes(lint(REJECTION, select=["TL101"])) == []


def test_a_count_the_test_does_not_read_is_reported():
    changed = REJECTION.replace("        num_remaining -= ok.sum().item()\n",
                                "        total += ok.sum().item()\n        num_remaining -= 1000\n")
    assert codes(lint(changed, select=["TL101"])) == ["TL101"]


THOMSON = """\
import torch


def solve(X, steps, verbose=0):
    optim = torch.optim.Adam([X])
    last = torch.tensor(float("inf"), device=X.device)
    best, best_X = last, X
    for i in range(steps):
        optim.zero_grad()
        U = energy(X)
        if verbose > 1:
            print(i, U.item())
        if torch.isclose(U, last):
            break
        last = U.detach()
        best_X = X.detach().cpu()
        U.backward()
        optim.step()
    return best_X
"""


def test_a_detailed_verbosity_level_and_a_loop_that_tests_isclose_are_silent():
    assert codes(lint(THOMSON, select=["TL101", "TL102"])) == []


def test_a_plain_verbose_switch_in_a_loop_with_no_tensor_test_is_reported():
    changed = THOMSON.replace("if verbose > 1:", "if verbose:").replace(
        "        if torch.isclose(U, last):\n            break\n", "")
    assert codes(lint(changed, select=["TL101", "TL102"])) == ["TL101", "TL102"]


FLOAT64 = """\
import torch

device = torch.device("cuda")
model = GPT(config).to(device)
model = model.double()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

if __name__ == "__main__":
    for it in range(20000):
        optimizer.zero_grad()
        loss = model.forward_kld(sample(512).double().to(device))
        loss.backward()
        optimizer.step()
"""


def test_a_program_that_trains_in_float64_gets_no_autocast_or_tf32_advice():
    assert codes(lint(FLOAT64, select=["TL503", "TL504"])) == []


def test_data_cast_to_float64_does_not_count():
    changed = FLOAT64.replace("model = model.double()\n", "")
    assert sorted(codes(lint(changed, select=["TL503", "TL504"]))) == ["TL503", "TL504"]


# -- TL203: a loader a notebook's cells never use ----------------------------------------------

NOTEBOOK_LOADERS = """\
import torch
from torchvision import datasets, transforms

device = torch.device("cuda")
tf = transforms.Compose([transforms.ToTensor(), transforms.RandomHorizontalFlip()])
train_loader = torch.utils.data.DataLoader(datasets.MNIST("data", transform=tf), batch_size=128, num_workers=4)
test_loader = torch.utils.data.DataLoader(datasets.MNIST("data", train=False, transform=tf), batch_size=128)
for x, y in train_loader:
    loss = model(x.to(device), y.to(device))
    loss.backward()
    optimizer.step()
"""


def test_a_loader_a_notebook_never_uses_is_not_reported():
    assert codes(lint(NOTEBOOK_LOADERS, select=["TL203"], path="vae.ipynb")) == []


def test_the_same_loader_in_a_module_may_be_imported_and_is_reported():
    assert codes(lint(NOTEBOOK_LOADERS, select=["TL203"], path="vae.py")) == ["TL203"]
