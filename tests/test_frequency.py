"""How often code runs (rules/_frequency.py): once, per epoch, per step, unknown."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from torchlint.config import Settings
from torchlint.rule import Context, Rule
from torchlint.rules._frequency import ONCE, PER_EPOCH, PER_STEP, UNKNOWN, frequency_here
from torchlint.walker import Walker


class _Probe(Rule):
    """Records the frequency of every `probe(...)` call, keyed by its first argument."""

    code = "TL999"
    found: dict = {}

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "probe":
            label = node.args[0].value.value.strip("'\"")
            where = frequency_here(self.context)
            via = None if where.via is None else self.context.module.code_for_node(where.via)
            _Probe.found[label] = (where.level, via)


def frequencies(source: str) -> dict:
    source = textwrap.dedent(source)
    _Probe.found = {}
    ctx = Context("train.py", source, Settings())
    Walker(ctx, [_Probe(ctx)]).run(cst.parse_module(source))
    return {label: level for label, (level, _) in _Probe.found.items()}


def test_training_script():
    found = frequencies(
        """
        import torch

        probe("top")

        class Net(torch.nn.Module):
            def __init__(self):
                probe("init")

            def forward(self, x):
                probe("forward")
                return self.head(x)

            def head(self, x):
                probe("method called from forward")

        def helper(n):
            probe("helper nobody calls")

        def train_one_epoch(model, loader):
            probe("epoch setup")
            for i, (x, y) in enumerate(loader):
                probe("batch")
                if i % 100 == 0:
                    probe("every 100 steps")
                for name in ["a", "b"]:
                    probe("literal loop in a step")
                log(model)

        def log(model):
            probe("called from a step loop")

        def main():
            model = Net()
            probe("main")
            for name, p in model.named_parameters():
                probe("parameter walk in setup")
            for epoch in range(10):
                probe("epoch loop")
                train_one_epoch(model, loader)

        if __name__ == "__main__":
            main()
            probe("main block")
            for batch in loader:
                probe("loop in the main block")
        """
    )
    assert found == {
        "top": ONCE,
        "init": ONCE,
        "forward": PER_STEP,
        "method called from forward": PER_STEP,
        "helper nobody calls": UNKNOWN,
        "epoch setup": PER_EPOCH,
        "batch": PER_STEP,
        "every 100 steps": PER_EPOCH,
        "literal loop in a step": PER_STEP,
        "called from a step loop": PER_STEP,
        "main": ONCE,
        "parameter walk in setup": ONCE,
        "epoch loop": PER_EPOCH,
        "loop in the main block": PER_STEP,
        "main block": ONCE,
    }


def test_roles_that_run_every_step():
    found = frequencies(
        """
        import torch

        class Data(torch.utils.data.Dataset):
            def __getitem__(self, i):
                probe("getitem")

        class Lit:
            def training_step(self, batch, i):
                probe("training_step")

        def collate(batch):
            probe("collate")

        def hook(module, args, out):
            probe("hook")

        def setup(model):
            loader = DataLoader(ds, collate_fn=collate)
            model.register_forward_hook(hook)
            probe("setup")
        """
    )
    assert found == {
        "getitem": PER_STEP, "training_step": PER_STEP, "collate": PER_STEP, "hook": PER_STEP,
        "setup": ONCE,
    }


def test_export_script_runs_once():
    found = frequencies(
        """
        import torch

        def export_onnx(model, path):
            probe("dummy input")
            torch.onnx.export(model, dummy, path)

        def run(weights):
            model = load(weights)
            export_onnx(model, "m.onnx")
            probe("run")

        if __name__ == "__main__":
            run("w.pt")
        """
    )
    assert found == {"dummy input": ONCE, "run": ONCE}


def test_a_call_in_a_loop_raises_a_once_role():
    # `build_mask` sounds like setup, but forward calls it every step.
    found = frequencies(
        """
        import torch

        def build_mask(n):
            probe("mask")

        class Net(torch.nn.Module):
            def forward(self, x):
                return x * build_mask(x.shape[0])
        """
    )
    assert found == {"mask": PER_STEP}


def test_recursion_and_cycles_terminate():
    found = frequencies(
        """
        def a(n):
            probe("a")
            return b(n - 1)

        def b(n):
            return a(n - 1) if n else 0

        for step in range(steps):
            a(3)
        """
    )
    assert found == {"a": PER_STEP}


def test_the_call_that_makes_it_hot_is_named():
    source = textwrap.dedent(
        """
        def post(x):
            probe("post")

        def evaluate(loader):
            for x in loader:
                post(x)
        """
    )
    _Probe.found = {}
    ctx = Context("e.py", source, Settings())
    Walker(ctx, [_Probe(ctx)]).run(cst.parse_module(source))
    assert _Probe.found["post"] == (PER_STEP, "post(x)")


@pytest.mark.parametrize("depth", [50, 95])
def test_deep_nesting(depth):
    body = "x = 1\n"
    for i in range(depth):
        body = f"if c{i}:\n" + textwrap.indent(body, "    ")
    source = "def forward(self):\n" + textwrap.indent(body.replace("x = 1", 'probe("deep")'), "    ")
    assert frequencies(source) == {"deep": PER_STEP}


def test_loops_in_code_that_runs_rarely_count_only_over_data():
    found = frequencies(
        """
        def setup(model, loader, settings):
            for key in sorted(settings):
                probe("settings loop")
            for x in loader:
                probe("data loop in setup code")
            for i in range(n):
                model(i)
                probe("loop that runs a model")
            for i in range(3):
                model(i)
                probe("a few runs of a model")
            names = [probe("comprehension in setup") for n in settings]

        def grads(model):
            return {n: probe("mapping of gradients") for n, g in model.grads.items()}

        def fit(model, x, y, epochs):
            for epoch in range(epochs):
                loss = model(x, y)
                loss.backward()
                probe("full-batch epoch")
        """
    )
    assert found == {
        "settings loop": ONCE,
        "data loop in setup code": PER_STEP,
        "loop that runs a model": PER_STEP,
        "a few runs of a model": ONCE,
        "comprehension in setup": ONCE,
        "mapping of gradients": PER_STEP,
        "full-batch epoch": PER_STEP,
    }


def test_a_batch_loop_with_a_loop_over_its_images_is_still_per_step():
    found = frequencies(
        """
        def process(detections, labels):
            for i in range(10):
                probe("per image, per threshold")

        def run(model, loader):
            for batch_i, (im, targets) in enumerate(pbar):
                preds = model(im)
                for si, pred in enumerate(preds):
                    process(pred, targets)

        if __name__ == "__main__":
            run(model, loader)
        """
    )
    assert found == {"per image, per threshold": PER_STEP}


# -- whole files that run once ---------------------------------------------------------

import pytest as _pytest  # noqa: E402

from tests.helpers import codes, lint  # noqa: E402
from torchlint.rules._frequency import runs_once_by_path  # noqa: E402


@_pytest.mark.parametrize("path, once", [
    ("torchtune/modules/_export/attention.py", True),
    ("export.py", True),
    ("tools/export_onnx.py", True),
    ("scripts/convert_checkpoint.py", True),
    ("model_to_onnx.py", True),
    ("lib/exporters/base.py", True),
    ("tests/models/reference_attention.py", True),
    ("test_model.py", True),
    ("train.py", False),
    ("models/expert.py", False),            # a mixture-of-experts layer, not an export
    ("serve/onnxruntime_session.py", False),  # inference with an exported model runs every step
    ("deploy/tensorrt_infer.py", False),
    ("data/exported_features.py", False),  # a module about exported data, not an exporter
])
def test_files_that_run_once_by_their_path(path, once):
    assert runs_once_by_path(path) is once


def test_per_step_rules_are_silent_in_export_modules():
    loop = "import torch\n\ndef trace(model, xs):\n    for x in xs:\n        print(model(x).sum().item())\n"
    assert codes(lint(loop, select=["TL101"], path="pkg/_export/trace.py")) == []
    assert codes(lint(loop, select=["TL101"], path="pkg/export.py")) == []
    assert codes(lint(loop, select=["TL101"], path="pkg/trace.py")) == ["TL101"]


def test_a_loop_that_builds_a_loader_each_iteration_is_an_outer_loop():
    code = """
        import torch
        def run(models, dataset_names):
            for name in dataset_names:
                loader = make_eval_data_loader(name)
                results = evaluate(models, loader)
                for key, value in results.items():
                    print(value.item())
    """
    assert codes(lint(textwrap.dedent(code), select=["TL101"])) == []
    per_batch = textwrap.dedent(code).replace("loader = make_eval_data_loader(name)", "loader = name")
    assert codes(lint(per_batch, select=["TL101"])) == ["TL101"]


def test_a_training_loop_with_a_periodic_validation_loop_inside_is_the_step_loop():
    code = """
        import torch
        def train(model, loader, val_loader, optimizer, steps):
            for epoch in range(10):
                for batch in loader:
                    loss = model(batch)
                    loss.backward()
                    optimizer.step()
                    print(loss.item())
                    if steps % 1000 == 0:
                        for val_batch in val_loader:
                            model(val_batch)
    """
    assert codes(lint(textwrap.dedent(code), select=["TL101"])) == ["TL101"]


def test_code_after_a_progress_continue_runs_once_per_tick():
    code = """
        import torch
        def training_loop(model, batches, kimg_per_tick):
            cur_nimg = 0
            tick_start_nimg = 0
            while True:
                batch = next(batches)
                loss = model(batch)
                loss.backward()
                cur_nimg += batch.shape[0]
                if cur_nimg < tick_start_nimg + kimg_per_tick * 1000:
                    continue
                print(loss.item())
                tick_start_nimg = cur_nimg
    """
    assert codes(lint(textwrap.dedent(code), select=["TL101"])) == []
    every_step = textwrap.dedent(code).replace("        if cur_nimg < tick_start_nimg + kimg_per_tick * 1000:\n            continue\n", "")
    assert "continue" not in every_step
    assert codes(lint(every_step, select=["TL101"])) == ["TL101"]
