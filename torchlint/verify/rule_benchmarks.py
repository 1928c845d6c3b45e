"""A small before/after benchmark for every fixable rule (``torchlint verify --rules``).

Plain data, no torch import: each benchmark is the source of a module before
and after the rule's fix, both defining a zero-argument ``run()``.  The
verifier injects ``DEVICE`` (``"cuda"`` when available, else ``"cpu"``) into
each module's globals before executing it, and loads, calls, compares and times
the two versions exactly as ``torchlint verify module.py::run`` would: same
seeds before the import and before each call, results compared with
``torch.testing.assert_close``, times from ``Timer.blocked_autorange``.

``after`` is the literal output of ``torchlint fix --unsafe-fixes --select CODE``
on ``before`` (a test checks it for every registered rule), so a benchmark
measures exactly what the fix does.  Each runs in well under a second on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

_PREAMBLE = "import torch\n\ndevice = torch.device(DEVICE)\n"


@dataclass(frozen=True)
class RuleBenchmark:
    code: str
    title: str  # what is compared, in a few words
    before: str  # module source; defines `run()`
    after: str  # the same module after the rule's fix
    rtol: Optional[float] = None  # tolerances for the before/after comparison
    atol: Optional[float] = None  # (None: torch.testing.assert_close's defaults)
    comparison: str = "values"  # what the comparison means, for the docs
    cpu_note: str = ""  # why the figure means little on a CPU, if it does


BENCHMARKS: Dict[str, RuleBenchmark] = {}


def _add(benchmark: RuleBenchmark) -> None:
    BENCHMARKS[benchmark.code] = benchmark


_add(RuleBenchmark(
    code="TL101",
    title="`.item()` every step vs a detached device accumulator",
    before=_PREAMBLE + '''
values = torch.randn(200, 64, device=device)


def run():
    total = 0.0
    for row in values:
        total += (row * row).mean().item()
    return total
''',
    after=_PREAMBLE + '''
values = torch.randn(200, 64, device=device)


def run():
    total = 0.0
    for row in values:
        total += (row * row).mean().detach()
    return total
''',
    rtol=1e-4,
    atol=1e-4,
    comparison=(
        "values, within 1e-4: the fixed accumulator sums in float32 on the device, "
        "the original in float64 on the host (a number and a 0-dim tensor compare as equal)"
    ),
    cpu_note="`.item()` does not wait for anything on a CPU; the fix's gain is the synchronization it removes on a GPU",
))

_add(RuleBenchmark(
    code="TL201",
    title="factory then `.to(device)` vs the factory with `device=`",
    before=_PREAMBLE + '''

def train_step():  # runs every step: TL201 reports only there
    return torch.zeros(1024, 1024).to(device)


def run():
    return train_step()
''',
    after=_PREAMBLE + '''

def train_step():  # runs every step: TL201 reports only there
    return torch.zeros(1024, 1024, device=device)


def run():
    return train_step()
''',
    cpu_note="`.to(\"cpu\")` of a CPU tensor is free, so both versions do the same work on a CPU",
))

_add(RuleBenchmark(
    code="TL202",
    title="`DataLoader` copying batches to the device, without vs with `pin_memory=True`",
    before=_PREAMBLE + '''from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
loader = DataLoader(dataset, batch_size=128, num_workers=1, persistent_workers=True)


def run():
    total = torch.zeros((), device=device)
    for x, y in loader:
        x = x.to(device)
        total += x.sum()
    return total
''',
    after=_PREAMBLE + '''from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
loader = DataLoader(dataset, batch_size=128, num_workers=1, persistent_workers=True, pin_memory=True)


def run():
    total = torch.zeros((), device=device)
    for x, y in loader:
        x = x.to(device)
        total += x.sum()
    return total
''',
    cpu_note="pinning needs CUDA: on a CPU the loader does not pin and both versions do the same work",
))

_add(RuleBenchmark(
    code="TL204",
    title="copies from a pinned `DataLoader` without vs with `non_blocking=True`",
    before=_PREAMBLE + '''from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
loader = DataLoader(dataset, batch_size=128, pin_memory=True)
weight = torch.randn(1024, 256, device=device)


def run():
    total = torch.zeros((), device=device)
    for x, y in loader:
        x = x.to(device)
        total += (x @ weight).relu().sum()
    return total
''',
    after=_PREAMBLE + '''from torch.utils.data import DataLoader, TensorDataset

dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
loader = DataLoader(dataset, batch_size=128, pin_memory=True)
weight = torch.randn(1024, 256, device=device)


def run():
    total = torch.zeros((), device=device)
    for x, y in loader:
        x = x.to(device, non_blocking=True)
        total += (x @ weight).relu().sum()
    return total
''',
    cpu_note="a copy to the CPU is no copy and memory is not pinned without CUDA: both versions do the same work",
))

_MODEL = '''
inputs = torch.randn(32, 512, device=device)
targets = torch.randint(0, 10, (32,), device=device)
model = torch.nn.Sequential(
    torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
'''

_add(RuleBenchmark(
    code="TL301",
    title="training steps with `zero_grad(set_to_none=False)` vs `set_to_none=True`",
    before=_PREAMBLE + _MODEL + '''

def run():
    for _ in range(4):
        optimizer.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.detach()
''',
    after=_PREAMBLE + _MODEL + '''

def run():
    for _ in range(4):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
    return loss.detach()
''',
    comparison="values (plain SGD: stepping on zeroed and on fresh gradients gives the same weights)",
))

_add(RuleBenchmark(
    code="TL302",
    title="an evaluation function without vs with `@torch.no_grad()`",
    before=_PREAMBLE + _MODEL + '''

def run():
    model.eval()
    return model(inputs).softmax(dim=1)
''',
    after=_PREAMBLE + _MODEL + '''

@torch.no_grad()
def run():
    model.eval()
    return model(inputs).softmax(dim=1)
''',
))

_add(RuleBenchmark(
    code="TL303",
    title="accumulating the loss tensor (keeping every graph) vs `loss.detach()`",
    before=_PREAMBLE + _MODEL + '''

def run():
    total = 0.0
    for _ in range(4):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss
    return total
''',
    after=_PREAMBLE + _MODEL + '''

def run():
    total = 0.0
    for _ in range(4):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total
''',
    comparison="values (the accumulated losses; the original's result also carries a graph, ignored)",
))

_add(RuleBenchmark(
    code="TL401",
    title="Conv2d with vs without bias before BatchNorm2d (forward and backward, train mode)",
    before=_PREAMBLE + '''
inputs = torch.randn(8, 16, 32, 32, device=device)
model = torch.nn.Sequential(
    torch.nn.Conv2d(16, 32, 3, padding=1),
    torch.nn.BatchNorm2d(32),
    torch.nn.ReLU(),
).to(device)


def run():
    out = model(inputs)
    out.sum().backward()
    return out.detach()
''',
    after=_PREAMBLE + '''
inputs = torch.randn(8, 16, 32, 32, device=device)
model = torch.nn.Sequential(
    torch.nn.Conv2d(16, 32, 3, padding=1, bias=False),
    torch.nn.BatchNorm2d(32),
    torch.nn.ReLU(),
).to(device)


def run():
    out = model(inputs)
    out.sum().backward()
    return out.detach()
''',
    comparison=(
        "values, within float32 tolerances: in train mode BatchNorm subtracts the batch mean, "
        "so the bias cancels (the weights are the same because the bias is initialised after them)"
    ),
))

_add(RuleBenchmark(
    code="TL701",
    title="training steps with vs without `torch.autograd.set_detect_anomaly(True)`",
    before=_PREAMBLE + '''
torch.autograd.set_detect_anomaly(True)
''' + _MODEL + '''

def run():
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.detach()
''',
    after=_PREAMBLE + _MODEL + '''

def run():
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.detach()
''',
    comparison="values (anomaly mode only adds checks); the verifier gives each version its own anomaly setting",
))

_add(RuleBenchmark(
    code="TL702",
    title="a loop with vs without `torch.cuda.empty_cache()` every iteration",
    before=_PREAMBLE + '''
weight = torch.randn(256, 256, device=device)


def run():
    outs = []
    for _ in range(8):
        x = torch.randn(64, 256, device=device)
        outs.append((x @ weight).relu().sum())
        torch.cuda.empty_cache()
    return torch.stack(outs)
''',
    after=_PREAMBLE + '''
weight = torch.randn(256, 256, device=device)


def run():
    outs = []
    for _ in range(8):
        x = torch.randn(64, 256, device=device)
        outs.append((x @ weight).relu().sum())
    return torch.stack(outs)
''',
    cpu_note="`torch.cuda.empty_cache()` does nothing without CUDA: both versions do the same work on a CPU",
))
