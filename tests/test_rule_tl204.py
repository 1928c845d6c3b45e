"""Unit tests for TL204 (copy-without-non-blocking)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability

HEADER = "import torch\nfrom torch.utils.data import DataLoader\n"
PINNED = "loader = DataLoader(train_set, batch_size=32, num_workers=4, pin_memory=True)\n"


def _lint(code: str, path: str = "train.py"):
    return lint(code, select=["TL204"], path=path)


def _positions(code: str):
    return [(d.line, d.column) for d in _lint(code)]


def _fixed(code: str, unsafe: bool = False) -> str:
    result = fix(code, select=["TL204"], unsafe=unsafe)
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=["TL204"], unsafe=unsafe)
    assert again.text == result.text, "fixing must be idempotent"
    assert again.applied == {}
    return result.text


def _in_loop(body: str, loop: str = "for x, y in loader:") -> str:
    return HEADER + PINNED + loop + "\n" + textwrap.indent(textwrap.dedent(body), "    ")


SAFE, UNSAFE = Applicability.SAFE, Applicability.UNSAFE


@pytest.mark.parametrize(
    "move, applicability",
    [
        # a device from elsewhere may be MPS (see test_destination_decides_the_fix_safety)
        ("x.to(device)", UNSAFE),
        ("x.to(self.device)", UNSAFE),
        ("x.to(args.device)", UNSAFE),
        ('x.to("cuda")', SAFE),
        ('x.to("cuda:1")', SAFE),
        ('x.to(torch.device("cuda", 0))', SAFE),
        ("x.to(device=device)", UNSAFE),
        ("x.to(device, torch.float16)", UNSAFE),
        ("x.to(device, dtype=torch.float16)", UNSAFE),
        ('x.to("cuda", torch.float16)', SAFE),
        ("x.cuda()", SAFE),
        ("x.cuda(0)", SAFE),
        ("x.cuda(device=rank)", SAFE),
        ("x.cuda(rank)", SAFE),
        ("x.data.cuda()", SAFE),
    ],
)
def test_copies_without_non_blocking(move, applicability):
    (d,) = _lint(_in_loop(f"x = {move}\n"))
    assert (d.line, d.column) == (5, 9)
    assert d.fix is not None and d.fix.applicability is applicability
    assert "non_blocking=True" in d.message and "pin_memory=True" in d.message


@pytest.mark.parametrize(
    "move",
    [
        "x.to(device, non_blocking=True)",
        "x.cuda(non_blocking=True)",
        "x.to(device, non_blocking=args.async_copy)",
        "x.cuda(0, True)",
        "x.to(device, torch.float16, True)",
        "x.to(device, True)",
        "x.to(device, **copy_kwargs)",
        "x.cuda(*gpu)",
        "x.to(torch.float16)",
        "x.to(x.dtype)",
        "x.to(other)",
        'x.to("cpu")',
        'x.to("mps")',
        'x.to(torch.device("mps"))',
        'x.to("meta")',
        "x.float().cuda()",
        "x.pin_memory().cuda()",
        "(x * 2).to(device)",
        "torch.cat([x, y]).to(device)",
        "features.to(device)",
    ],
)
def test_silent_copies(move):
    assert _lint(_in_loop(f"z = {move}\n")) == []


def test_explicit_false_gets_an_unsafe_fix():
    code = _in_loop("x = x.to(device, non_blocking=False)\n")
    (d,) = _lint(code)
    assert d.fix.applicability is Applicability.UNSAFE
    assert _fixed(code) == code
    assert "x = x.to(device, non_blocking=True)" in _fixed(code, unsafe=True)


@pytest.mark.parametrize(
    "loop",
    [
        "for x, y in loader:",
        "for i, (x, y) in enumerate(loader):",
        "for i, (x, y) in enumerate(loader, start=1):",
        "for x, y in tqdm(loader):",
        "for x, y in tqdm(loader, desc='train', leave=False):",
        "for i, (x, y) in enumerate(tqdm(loader)):",
        "for i, (x, y) in tqdm(enumerate(loader), total=len(loader)):",
        "for x, y in iter(loader):",
        "for [x, y] in loader:",
    ],
)
def test_loop_forms(loop):
    code = "from tqdm import tqdm\n" + _in_loop("x = x.to(device)\n", loop)
    assert codes(_lint(code)) == ["TL204"]


@pytest.mark.parametrize(
    "imports, wrapper",
    [
        ("import tqdm", "tqdm.tqdm"),
        ("from tqdm.auto import tqdm", "tqdm"),
        ("from tqdm.notebook import tqdm as progress", "progress"),
    ],
)
def test_tqdm_imports(imports, wrapper):
    code = f"{imports}\n" + _in_loop("x = x.cuda()\n", f"for x, y in {wrapper}(loader):")
    assert codes(_lint(code)) == ["TL204"]


@pytest.mark.parametrize(
    "loop",
    [
        "for x, y in zip(loader, other):",
        "for x, y in progress(loader):",  # unknown wrapper
        "for x, y in enumerate(loader):",  # `x` is the index
        "for *x, y in enumerate(loader):",
    ],
)
def test_other_iterables(loop):
    assert _lint(_in_loop("x = x.cuda()\n", loop)) == []


@pytest.mark.parametrize(
    "body",
    [
        "images = batch['image'].to(device)\n",
        "images = batch[0].cuda()\n",
        "images = batch.image.cuda()\n",
        "images, labels = batch\nimages = images.to(device)\n",
        "images = batch['image']\nimages = images.to(device)\n",
        "inputs = {k: v.to(device) for k, v in batch.items()}\n",
        "inputs = [t.to(device) for t in batch]\n",
        "inputs = tuple(t.cuda() for t in batch.values())\n",
        "for key in batch:\n    batch[key] = batch[key].to(device)\n",
        "for name, value in batch.items():\n    value = value.cuda()\n",
        "batch = batch.to(device)\n",
        "x, (y, z) = batch['a'], batch['b']\ny.cuda()\n",
    ],
)
def test_the_loops_data(body):
    code = _in_loop(body, "for step, batch in enumerate(loader):")
    assert codes(_lint(code)) == ["TL204"]


@pytest.mark.parametrize(
    "body",
    [
        "batch = preprocess(batch)\nbatch.to(device)\n",
        "batch = batch.to(device, non_blocking=True)\nbatch.to(device)\n",
        "images = normalize(batch['image'])\nimages.cuda()\n",
        "inputs = {k: v.to(device, non_blocking=True) for k, v in batch.items()}\n",
        "inputs = {k: k.to(device) for k, v in batch.items()}\n",
        "inputs = [t.to(device) for t in other_batch]\n",
        "for step in range(3):\n    step.cuda()\n",
        "def move(t):\n    return t.to(device)\nmove(batch)\n",
        "apply = lambda t: t.cuda()\n",
        "model.to(device)\n",
        "with open(path) as batch:\n    batch.cuda()\n",
        "with torch.cuda.stream(copy_stream):\n    nxt = batch.cuda()\n",
    ],
)
def test_not_the_loops_data(body):
    code = _in_loop(body, "for step, batch in enumerate(loader):")
    assert _lint(code) == []


def test_rebinding_then_copy_is_silent_but_earlier_copy_is_reported():
    code = _in_loop("y = x.cuda()\nx = model(x)\nz = x.cuda()\n")
    assert _positions(code) == [(5, 9)]


@pytest.mark.parametrize(
    "loader",
    [
        "DataLoader(train_set)",
        "DataLoader(train_set, pin_memory=False)",
        "DataLoader(train_set, pin_memory=use_cuda)",
        "DataLoader(train_set, pin_memory=torch.cuda.is_available())",
        "DataLoader(train_set, **loader_kwargs)",
        "make_loader(train_set)",
        "accelerator.prepare(DataLoader(train_set, pin_memory=True))",
    ],
)
def test_loaders_not_known_to_be_pinned(loader):
    code = HEADER + f"pin_memory = True\nloader = {loader}\nfor x, y in loader:\n    x = x.cuda()\n"
    assert _lint(code) == []


def test_positional_pin_memory():
    code = HEADER + "# pin_memory\nloader = DataLoader(ds, 8, True, None, None, 4, None, True)\nfor x in loader:\n    x.cuda()\n"
    assert codes(_lint(code)) == ["TL204"]


def test_loader_bound_twice_or_to_none():
    twice = HEADER + PINNED + "loader = accelerator.prepare(loader)\nfor x, y in loader:\n    x.cuda()\n"
    assert _lint(twice) == []
    maybe = HEADER + "loader = None\nif train:\n    " + PINNED + "for x, y in loader:\n    x.cuda()\n"
    assert codes(_lint(maybe)) == ["TL204"]
    rebound = HEADER + PINNED + "for loader in (loader, other):\n    for x, y in loader:\n        x.cuda()\n"
    assert _lint(rebound) == []


def test_module_level_loader_used_in_a_function():
    code = HEADER + """
def train(model):
    for x, y in train_loader:
        model(x.to(device))

if __name__ == "__main__":
    train_loader = DataLoader(train_set, batch_size=32, pin_memory=True)
    train(model)
"""
    assert _positions(code) == [(6, 15)]


def test_global_statement_makes_it_unknown():
    code = HEADER + """
train_loader = DataLoader(train_set, pin_memory=True)

def reset():
    global train_loader
    train_loader = make_other()

def train(model):
    for x, y in train_loader:
        model(x.to(device))
"""
    assert _lint(code) == []


def test_self_attribute_of_the_same_class():
    code = HEADER + """
class Trainer:
    def __init__(self, train_set):
        self.train_loader = None
        self.eval_loader = make_eval_loader()

    def setup(self, train_set):
        self.train_loader = DataLoader(train_set, pin_memory=True)

    def fit(self):
        for x, y in self.train_loader:
            x = x.to(self.device)
        for x, y in self.eval_loader:
            x = x.to(self.device)

class Other:
    def fit(self):
        for x, y in self.train_loader:
            x = x.to(self.device)
"""
    assert _positions(code) == [(14, 17)]


def test_factory_functions_and_methods():
    code = HEADER + """
def make_loaders(train_set, val_set):
    train = DataLoader(train_set, shuffle=True, pin_memory=True)
    val = DataLoader(val_set, pin_memory=True)
    return train, val

def make_plain(ds):
    return DataLoader(ds)

def stream(ds):
    yield DataLoader(ds, pin_memory=True)

class Module:
    def loader(self):
        return DataLoader(self.ds, pin_memory=True)

    def fit(self):
        for x in self.loader():
            x.cuda()

train_loader, val_loader = make_loaders(a, b)
for x in val_loader:
    x.cuda()
for x in make_plain(a):
    x.cuda()
for x in stream(a):
    x.cuda()
"""
    assert _positions(code) == [(21, 13), (25, 5)]


def test_parameter_filled_by_every_call_in_the_module():
    code = HEADER + """
def train_epoch(model, loader, device):
    for x, y in loader:
        x = x.to(device)

def evaluate(model, loader):
    for x, y in loader:
        x = x.to(device)

def main():
    train_loader = DataLoader(train_set, pin_memory=True)
    val_loader = DataLoader(val_set)
    for epoch in range(10):
        train_epoch(model, train_loader, device)
        train_epoch(model, loader=train_loader, device=device)
    evaluate(model, train_loader)
    evaluate(model, val_loader)
"""
    assert _positions(code) == [(6, 13)]


def test_parameter_of_a_function_used_elsewhere_is_silent():
    passed_around = HEADER + """
def train_epoch(model, loader):
    for x, y in loader:
        x = x.to(device)

loader = DataLoader(train_set, pin_memory=True)
train_epoch(model, loader)
callbacks = [train_epoch]
"""
    assert _lint(passed_around) == []
    never_called = HEADER + "def train_epoch(model, loader):\n    for x, y in loader:\n        x = x.to(device)\n"
    assert _lint(never_called + "loader = DataLoader(ds, pin_memory=True)\n") == []
    star_call = HEADER + """
def train_epoch(model, loader):
    for x, y in loader:
        x = x.to(device)

train_epoch(*args)
"""
    assert _lint(star_call + "# pin_memory\n") == []


def test_constructor_parameter_stored_on_self():
    code = HEADER + """
class Trainer:
    def __init__(self, model, train_data, gpu):
        self.model = model
        self.train_data = train_data

    def run_epoch(self):
        for source, targets in self.train_data:
            source = source.to(self.device)

def prepare(ds):
    return DataLoader(ds, batch_size=32, pin_memory=True)

def main():
    data = prepare(ds)
    trainer = Trainer(model, data, 0)
"""
    assert _positions(code) == [(11, 22)]


def test_custom_collate_fn_whole_batch_is_silent():
    code = HEADER + """
loader = DataLoader(ds, collate_fn=collator, pin_memory=True)
for batch in loader:
    batch = batch.to(device)
for batch in loader:
    ids = batch["input_ids"].to(device)
"""
    assert _positions(code) == [(8, 11)]


def test_host_write_after_the_copy_makes_the_fix_unsafe():
    code = _in_loop("xg = x.to('cuda')\nx[x < 0] = 0\nyg = y.cuda()\n")
    assert [d.fix.applicability for d in _lint(code)] == [Applicability.UNSAFE, Applicability.SAFE]
    for later in ("x += 1\n", "y.clamp_(0, 1)\n", "x.copy_(noise)\n"):
        (d,) = _lint(_in_loop("xg = x.to('cuda')\n" + later))
        assert d.fix.applicability is Applicability.UNSAFE, later
    for harmless in ("x.requires_grad_()\n", "batch = {}\n", "xg.add_(1)\n"):
        (d,) = _lint(_in_loop("xg = x.to('cuda')\n" + harmless))
        assert d.fix.applicability is Applicability.SAFE, harmless


def test_dict_entry_replacement_keeps_the_fix_safe():
    code = _in_loop('batch["x"] = batch["x"].cuda()\n', "for batch in loader:")
    (d,) = _lint(code)
    assert d.fix.applicability is Applicability.SAFE


def test_users_own_dataloader_and_other_libraries():
    own = "import torch\nclass DataLoader:\n    pass\n" + PINNED + "for x in loader:\n    x.cuda()\n"
    assert _lint(own) == []
    other = "import torch\nfrom torch_geometric.loader import DataLoader\n" + PINNED + "for x in loader:\n    x.cuda()\n"
    assert _lint(other) == []
    aliased = "import torch.utils.data as tud\nloader = tud.DataLoader(ds, pin_memory=True)\nfor x in loader:\n    x.cuda()\n"
    assert codes(_lint(aliased)) == ["TL204"]


def test_not_reported_in_test_files():
    # No rule but TL001 checks test files (Rule.in_tests): a test runs its inputs once.
    assert codes(_lint(_in_loop("x.cuda()\n"), path="tests/test_train.py")) == []
    assert codes(_lint(_in_loop("x.cuda()\n"), path="train.py")) == ["TL204"]


def test_fix_keeps_layout_and_comments():
    code = _in_loop(
        """\
        z = x.cuda(
            0
        )
        x = x.to(device)  # the inputs
        y = y.to(
            device,  # labels
            torch.long,
        )
        """
    )
    fixed = _fixed(code, unsafe=True)  # `device` is unknown: those two fixes are unsafe
    assert _fixed(code).count("non_blocking=True") == 1
    assert fixed == _in_loop(
        """\
        z = x.cuda(
            0,
            non_blocking=True
        )
        x = x.to(device, non_blocking=True)  # the inputs
        y = y.to(
            device,  # labels
            torch.long,
            non_blocking=True,
        )
        """
    )


def test_one_report_per_copy_in_nested_loops():
    code = HEADER + PINNED + """
for epoch in range(3):
    for x, y in loader:
        for _ in range(2):
            x.cuda()
"""
    assert _positions(code) == [(8, 13)]


# -- where the copy goes, and what may write into the batch after it -------------------


@pytest.mark.parametrize(
    "choice, applicability",
    [
        ('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")', SAFE),
        ('device = "cuda:0" if torch.cuda.is_available() else "cpu"', SAFE),
        ('device = torch.device(f"cuda:{rank}")', SAFE),
        ('device = torch.device("cuda", local_rank)', SAFE),
        # MPS: the loader does not pin there, and a non-blocking copy from pageable
        # memory can read the batch after it is freed (pytorch/pytorch#189690)
        ('device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"', UNSAFE),
        ("device = get_device()", UNSAFE),
        ("device = accelerator.device", UNSAFE),
        ('device = torch.device("cuda")\nif args.cpu:\n    device = pick()', UNSAFE),
    ],
)
def test_destination_decides_the_fix_safety(choice, applicability):
    code = HEADER + choice + "\n" + PINNED + "for x, y in loader:\n    x = x.to(device)\n"
    (d,) = _lint(code)
    assert d.fix.applicability is applicability


def test_device_parameter_makes_the_fix_unsafe():
    code = HEADER + PINNED + "def train(model, device):\n    for x, y in loader:\n        x = x.to(device)\n        y = y.cuda()\n"
    assert [d.fix.applicability for d in _lint(code)] == [UNSAFE, SAFE]


@pytest.mark.parametrize(
    "collate, applicability",
    [
        ("collate_fn=imported_collate", UNSAFE),
        ("collate_fn=make_batch", UNSAFE),  # returns a `Batch` object: not pinned, may hold CUDA tensors
        ("collate_fn=stack_pairs", SAFE),
        ("", SAFE),
    ],
)
def test_a_destination_that_may_be_the_cpu_needs_host_batches(collate, applicability):
    code = HEADER + textwrap.dedent(
        f"""\
        from mypkg import imported_collate

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

        def stack_pairs(samples):
            xs, ys = zip(*samples)
            return torch.stack(xs), torch.stack(ys)

        def make_batch(samples):
            return Batch(samples)

        loader = DataLoader(train_set, batch_size=32, pin_memory=True, {collate})
        for x, y in loader:
            x = x.to(device)
            y = y.cuda()
        """
    )
    assert [d.fix.applicability for d in _lint(code)] == [applicability, SAFE]


def test_loader_of_device_tensors_is_silent():
    """Pinning a batch of CUDA tensors raises before any copy (TL202's question)."""
    code = HEADER + textwrap.dedent(
        """\
        from torch.utils.data import TensorDataset

        class OnGpu(torch.utils.data.Dataset):
            def __getitem__(self, i):
                return self.x[i].cuda(), self.y[i]

        a = DataLoader(TensorDataset(torch.randn(8, 3).cuda()), pin_memory=True)
        b = DataLoader(OnGpu(), pin_memory=True)
        c = DataLoader(TensorDataset(torch.randn(8, 3)), pin_memory=True)
        for loader in (a, b, c):
            pass
        for x, in a:
            x = x.cuda()
        for x, y in b:
            y = y.cuda()
        for x, in c:
            x = x.cuda()
        """
    )
    assert [d.line for d in _lint(code)] == [19]


@pytest.mark.parametrize(
    "later",
    [
        "v = x.view(-1)\nv.zero_()\n",
        "a = x.numpy()\na[:] = 0\n",
        "parts = list(x)\nparts[0].mul_(2)\n",
        "augment(x)\n",
        "normalize_(batch_stats, x)\n",
        "torch.nn.functional.relu(x, inplace=True)\n",
        "torch.nn.functional.relu(x, True)\n",
        "torch.add(x, 1, out=x)\n",
        "torch.clamp_(x, 0, 1)\n",
        "self.transform(x[0])\n",
    ],
)
def test_write_through_an_alias_or_a_call_after_the_copy_makes_the_fix_unsafe(later):
    (d,) = _lint(_in_loop("xg = x.cuda()\n" + later))
    assert d.fix.applicability is UNSAFE


@pytest.mark.parametrize(
    "other",
    [
        "print(x.shape, len(x))\n",
        "s = torch.sum(x)\n",
        "out = model(xg)\n",
        "n = x.size(0)\n",
        "v = x.view(-1)\nw = v.float()\n",
        "logger.info(x.dtype)\n",
    ],
)
def test_reads_after_the_copy_keep_the_fix_safe(other):
    (d,) = _lint(_in_loop("xg = x.cuda()\n" + other))
    assert d.fix.applicability is SAFE


def test_a_call_before_the_copy_does_not_matter():
    (d,) = _lint(_in_loop("augment(x)\nxg = x.cuda()\nout = model(xg)\n"))
    assert d.fix.applicability is SAFE


def test_an_alias_is_not_reported_as_a_copy():
    assert _lint(_in_loop("v = x.view(-1)\nvg = v.cuda()\n")) == []


def test_loader_parameter_of_a_function_named_like_a_module_method():
    """`encoder.train()` is a method of another object, not a call of the
    module's own `train(loader, ...)`: the loader is still traced."""
    code = (
        "import torch\n"
        "from torch.utils.data import DataLoader\n"
        "\n"
        "device = torch.device('cuda')\n"
        "\n"
        "\n"
        "def train(loader, encoder, decoder):\n"
        "    encoder.train()\n"
        "    decoder.train()\n"
        "    for imgs, caps in loader:\n"
        "        imgs = imgs.to(device)\n"
        "        decoder(encoder(imgs), caps)\n"
        "\n"
        "\n"
        "def main(ds, encoder, decoder):\n"
        "    loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)\n"
        "    train(loader, encoder, decoder)\n"
    )
    assert [(d.code, d.line) for d in lint(code, select=["TL204"])] == [("TL204", 11)]
    # `train` passed around (not only called) keeps the rule silent, as before
    passed = code + "\n\nCALLBACKS = [train]\n"
    assert lint(passed, select=["TL204"]) == []


def test_attributes_assigned_by_unpacking_a_factorys_tuple():
    """`self.train_loader, self.val_loader = make_loaders()`: each attribute
    is the element of the returned tuple at its position."""
    code = HEADER + """
def make_loaders():
    train = DataLoader(train_set, batch_size=32, num_workers=4, pin_memory=True)
    val = DataLoader(val_set, batch_size=32, num_workers=4)
    return train, val

class Trainer:
    def __init__(self):
        self.train_loader, self.val_loader = make_loaders()

    def fit(self, model):
        for x, y in self.train_loader:
            model(x.to(device))
        for x, y in self.val_loader:
            model(x.to(device))
"""
    assert _positions(code) == [(15, 19)]
