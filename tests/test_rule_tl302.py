"""Focused tests for TL302 (eval-without-no-grad)."""

from __future__ import annotations

import ast

import pytest

from tests.helpers import fix, lint
from torchlint.model import Applicability


def tl302(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL302"], path=path)


def lines(code: str, path: str = "snippet.py"):
    return [d.line for d in tl302(code, path)]


def fixed(code: str) -> str:
    result = fix(code, select=["TL302"], unsafe=True)
    assert result.errors == []
    ast.parse(result.text)
    again = fix(result.text, select=["TL302"], unsafe=True)
    assert again.text == result.text and not again.applied
    return result.text


def test_reported_at_def_line_not_decorator() -> None:
    code = """
    import functools
    import torch

    class Wrapper:
        @functools.lru_cache(maxsize=None)
        def predict(self, model, x):
            return model(x)
    """
    (d,) = tl302(code)
    assert (d.line, d.column) == (7, 5)


def test_fix_is_unsafe_and_adds_decorator_without_import() -> None:
    code = """
    import torch

    def evaluate(model, loader):
        model.eval()
        return [model(x) for x in loader]
    """
    (d,) = tl302(code)
    assert d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    assert fix(code, select=["TL302"]).text == fix(code, select=["TL302"], unsafe=False).text
    out = fixed(code)
    assert "@torch.no_grad()\ndef evaluate(model, loader):" in out
    assert out.count("import") == 1


@pytest.mark.parametrize(
    "imports, decorator",
    [
        ("import torch as T", "@T.no_grad()"),
        ("import torch.nn as nn\nimport torch", "@torch.no_grad()"),
        ("import torch.nn", "@torch.no_grad()"),  # binds `torch`
        ("from torch import no_grad, nn", "@no_grad()"),
    ],
)
def test_fix_uses_the_modules_own_name(imports: str, decorator: str) -> None:
    code = imports + "\n\ndef validate(model, xs):\n    model.eval()\n    return [model(x) for x in xs]\n"
    assert decorator + "\ndef validate" in fixed(code)


def test_no_fix_without_a_torch_name() -> None:
    code = """
    from torch import nn

    def evaluate(model, xs):
        model.eval()
        return [model(x) for x in xs]
    """
    (d,) = tl302(code)
    assert d.fix is None


def test_no_fix_when_only_a_submodule_alias_is_bound() -> None:
    code = """
    import torch.nn.functional as F

    def evaluate(model, xs):
        model.eval()
        return [F.softmax(model(x), -1) for x in xs]
    """
    (d,) = tl302(code)
    assert d.fix is None


def test_local_import_inside_the_function_is_not_used_for_the_decorator() -> None:
    code = """
    from torch import nn

    def evaluate(model, xs):
        import torch
        model.eval()
        return [model(x) for x in xs]
    """
    (d,) = tl302(code)
    assert d.fix is None


def test_async_function_gets_no_fix() -> None:
    code = """
    import torch

    async def predict(model, x):
        return model(x)
    """
    (d,) = tl302(code)
    assert d.fix is None


@pytest.mark.parametrize(
    "decorator",
    [
        "@torch.no_grad()",
        "@torch.inference_mode()",
        "@torch.enable_grad()",
        "@torch.jit.script",
        "@torch.jit.ignore",
        "@smart_inference_mode()",
        "@torch.autograd.no_grad()",
    ],
)
def test_grad_mode_decorators_silence(decorator: str) -> None:
    code = f"import torch\n\n{decorator}\ndef evaluate(model, x):\n    model.eval()\n    return model(x)\n"
    assert tl302(code) == []


@pytest.mark.parametrize(
    "block",
    [
        "with torch.no_grad():",
        "with torch.inference_mode():",
        "with torch.inference_mode(mode=True):",
        "with torch.set_grad_enabled(False):",
        "with torch.set_grad_enabled(is_train):",
        "with torch.autocast('cuda'), torch.no_grad():",
    ],
)
def test_grad_disabling_blocks_silence(block: str) -> None:
    code = f"import torch\n\ndef evaluate(model, x, is_train):\n    model.eval()\n    {block}\n        return model(x)\n"
    assert tl302(code) == []


@pytest.mark.parametrize(
    "block", ["with torch.autocast('cuda'):", "with torch.enable_grad():", "with torch.inference_mode(False):"]
)
def test_other_blocks(block: str) -> None:
    code = f"import torch\n\ndef evaluate(model, x):\n    model.eval()\n    {block}\n        return model(x)\n"
    expected = [3] if "autocast" in block else []  # enable_grad: gradients wanted
    assert lines(code) == expected


def test_one_uncovered_call_is_enough() -> None:
    code = """
    import torch

    def evaluate(model, xs):
        model.eval()
        with torch.no_grad():
            first = model(xs[0])
        rest = [model(x) for x in xs[1:]]
        return first, rest
    """
    assert lines(code) == [4]


@pytest.mark.parametrize(
    "body",
    [
        "x.requires_grad_(True)\n    model(x).sum().backward()\n    return x.grad",
        "out = model(x)\n    return torch.autograd.grad(out.sum(), x)",
        "x = x.clone().requires_grad_()\n    return model(x)",
        "x.requires_grad = True\n    return model(x)",
        "z = torch.zeros(3, requires_grad=True)\n    return model(x + z)",
        "loss = model(x).mean()\n    loss.backward()\n    optimizer.step()",
        "model(x).sum().backward()",
        "optimizer.zero_grad()\n    return model(x)",
        "return torch.func.grad(lambda t: model(t).sum())(x)",
    ],
)
def test_functions_that_need_gradients_are_silent(body: str) -> None:
    code = f"import torch\n\ndef evaluate(model, x, optimizer):\n    model.eval()\n    {body}\n"
    assert tl302(code) == []


@pytest.mark.parametrize(
    "call",
    [
        "model(x)", "self.model(x)", "net(x)", "self.net(x)", "netG(x)", "self.backbone(x)",
        "text_encoder(x)", "ema_model(x)", "self.model.forward(x)",
        "model.module(x)", "self.teacher(x)", "model_without_ddp(x)",
    ],
)
def test_model_calls_in_named_functions(call: str) -> None:
    code = f"import torch\n\nclass Runner:\n    def predict(self, model, net, netG, text_encoder, ema_model, model_without_ddp, x):\n        return {call}\n"
    assert lines(code) == [4], call


@pytest.mark.parametrize(
    "call",
    [
        "compute_metrics(preds, labels)", "np.mean(preds)", "get_model(cfg)", "build_model(cfg)",
        "validate_network(loader, x)", "self.tokenizer(x)", "torch.softmax(x, -1)", "len(x)",
        "download_and_load_gpt2(x)", "model_summary.print(x)",
        # Hugging Face / LitGPT `generate` already runs without gradients
        "model.generate(x)",
    ],
)
def test_other_calls_are_not_model_calls(call: str) -> None:
    code = f"import numpy as np\nimport torch\n\ndef evaluate(cfg, preds, labels, loader, x):\n    return {call}\n"
    assert tl302(code) == []


def test_self_call_only_in_module_classes() -> None:
    # (the module class's method is called with gradients on: an uncalled one is silent, test_precision_set_gg.py)
    module_class = """
    import torch
    from torch import nn

    class Net(nn.Module):
        def predict(self, x):
            return self(x).argmax(-1)

    def serve(net, x):
        return net.predict(x)
    """
    plain_class = """
    import torch

    class Pipeline:
        def predict(self, x):
            return self(x)
    """
    assert lines(module_class) == [6]
    assert tl302(plain_class) == []


def test_eval_trigger_counts_only_calls_of_what_was_put_in_eval_mode() -> None:
    code = """
    import torch

    def run(model, student, x):
        model.eval()
        return student(x)

    def sample(decoder, z):
        decoder.to("cuda").eval()
        return decoder(z)
    """
    assert lines(code) == [8]


@pytest.mark.parametrize(
    "name",
    ["evaluate", "eval_epoch", "validate", "validation_loop", "test", "predict", "predict_proba",
     "infer", "inference", "_evaluate", "EvalModel"],
)
def test_evaluation_names(name: str) -> None:
    code = f"import torch\n\ndef {name}(model, x):\n    return model(x)\n"
    assert lines(code) == [3]


@pytest.mark.parametrize("name", ["run", "step", "forward", "compute", "generate_samples"])
def test_other_names_need_eval(name: str) -> None:
    code = f"import torch\n\ndef {name}(model, x):\n    return model(x)\n"
    assert tl302(code) == []


def test_mode_overrides_and_training_functions_with_eval() -> None:
    code = """
    import torch
    from torch import nn

    class Frozen(nn.Module):
        def train(self, mode=True):
            super().train(mode)
            self.encoder.eval()
            self.encoder(torch.zeros(1))
            return self

        def eval(self):
            return self.train(False)

        def forward(self, x):
            self.encoder.eval()
            return self.head(self.encoder(x))

        def compute_loss(self, x, y):
            self.teacher.eval()
            return (self.teacher(x) - y).pow(2).mean()
    """
    assert tl302(code) == []


def test_lightning_hooks_are_silent() -> None:
    code = """
    import torch
    import lightning as L

    class Module(L.LightningModule):
        def validation_step(self, batch, batch_idx):
            return self.model(batch)

        def test_step(self, batch, batch_idx):
            return self.model(batch)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return self.model(batch)

        def on_validation_epoch_end(self):
            self.model.eval()
            self.model(self.example)
    """
    assert tl302(code) == []


def test_pytest_tests_are_silent() -> None:
    code = """
    import torch

    def test_shapes():
        model = Net()
        model.eval()
        assert model(torch.zeros(1, 3)).shape == (1, 2)

    def helper(model, x):
        model.eval()
        return model(x)
    """
    # Test files are not checked at all (Rule.in_tests): a test runs its inputs once.
    assert lines(code, path="tests/test_model.py") == []
    # outside test files a `test*` name is a trigger, but a test with asserts is still a test
    assert lines(code, path="scripts/check.py") == [9]


def test_test_named_function_in_a_test_file_is_not_a_trigger() -> None:
    code = """
    import torch

    def test_loop(model, loader):
        return [model(x) for x in loader]
    """
    assert tl302(code, path="tests/test_model.py") == []
    assert lines(code, path="train.py") == [4]


def test_every_call_site_under_no_grad_silences() -> None:
    code = """
    import torch

    def predict_batch(model, batch):
        return model(batch)

    @torch.no_grad()
    def predict_all(model, loader):
        return [predict_batch(model, b) for b in loader]

    def main(model, loader):
        with torch.inference_mode():
            predict_batch(model, loader[0])
    """
    assert tl302(code) == []


def test_one_call_site_with_gradients_keeps_the_report() -> None:
    code = """
    import torch

    def predict_batch(model, batch):
        return model(batch)

    def main(model, loader):
        with torch.inference_mode():
            predict_batch(model, loader[0])
        for batch in loader:
            predict_batch(model, batch)
    """
    assert lines(code) == [4]


def test_named_function_feeding_a_training_step_is_silent() -> None:
    code = """
    import torch
    from torch import nn

    class Diffusion(nn.Module):
        def predict_noise(self, x, t):
            return self.unet(x, t)

        def p_losses(self, x, t, noise):
            return (self.predict_noise(x, t) - noise).pow(2).mean()

    def predict_start(model, x):
        return model(x)

    def step(model, x, optimizer):
        out = predict_start(model, x)
        out.sum().backward()
        optimizer.step()
    """
    assert tl302(code) == []


def test_module_level_set_grad_enabled_false() -> None:
    code = """
    import torch
    torch.set_grad_enabled(False)

    def evaluate(model, x):
        model.eval()
        return model(x)
    """
    assert tl302(code) == []


def test_set_grad_enabled_false_statement_in_function() -> None:
    code = """
    import torch

    def evaluate(model, x):
        torch.set_grad_enabled(False)
        model.eval()
        return model(x)
    """
    assert tl302(code) == []


def test_nested_functions_are_judged_on_their_own() -> None:
    code = """
    import torch

    def evaluate(model, loader):
        model.eval()
        def run(x):
            return model(x)
        with torch.no_grad():
            return [run(x) for x in loader]

    def outer(loader):
        def infer(model, x):
            return model(x)
        return infer

    def outer2(model, loader):
        def predict(x):
            return model(x)
        return [predict(x) for x in loader]
    """
    # `evaluate` calls the model only through `run`, which is called under
    # no_grad; `infer` is a closure handed to an unknown caller; `predict` is
    # called with gradients on
    assert lines(code) == [17]


def test_setup_functions_are_silent() -> None:
    code = """
    import torch

    def load(path):
        model = torch.load(path)
        model.eval()
        return model

    def evaluate_setup(model, device):
        model.eval()
        model.to(device)
        return model
    """
    assert tl302(code) == []


def test_user_class_named_like_torch_no_grad_does_not_count() -> None:
    code = """
    import torch
    from mylib import no_grad_if

    def evaluate(model, x):
        model.eval()
        with no_grad_if(True):
            return model(x)
    """
    # a helper of one's own that mentions grad counts as disabling it (silent)
    assert tl302(code) == []


def test_fix_keeps_comments_and_decorator_order() -> None:
    code = """
    import torch
    from torch import nn

    class Net(nn.Module):
        # probabilities, for serving
        @staticmethod  # keep
        def predict(model, x):
            return model(x).softmax(-1)

    def serve(net, x):
        return Net.predict(net, x)
    """
    out = fixed(code)
    assert "    # probabilities, for serving\n    @staticmethod  # keep\n    @torch.no_grad()\n    def predict" in out


def test_noqa() -> None:
    code = """
    import torch

    def evaluate(model, x):  # noqa: TL302
        model.eval()
        return model(x)
    """
    assert tl302(code) == []


def test_smoke_test_functions_without_parameters_are_silent() -> None:
    code = """
    import torch

    def test():
        net = Net()
        print(net(torch.randn(1, 3, 32, 32)).size())

    def test_loader(model, loader):
        return [model(x) for x in loader]
    """
    assert lines(code) == [8]


def test_call_sites_covered_transitively() -> None:
    code = """
    import torch

    class Scorer:
        def features(self, x):
            self.inception.eval()
            return self.inception(x)

        def reference(self, loader):
            return [self.features(x) for x in loader]

        @torch.inference_mode()
        def score(self, loader, fake):
            return self.reference(loader), self.features(fake)
    """
    assert tl302(code) == []
    uncovered = code + "\n    def other(self, x):\n        return self.reference(x)\n"
    assert lines(uncovered) == [5]


def test_exit_stack_enter_context_no_grad() -> None:
    code = """
    import contextlib
    import torch

    def inference_on_dataset(model, loader):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.inference_mode())
            return [model(x) for x in loader]
    """
    assert tl302(code) == []


WARM_UP = """
import torch


def evaluate(model, loader, trt_file=None):
    model.eval()
    if trt_file is not None:
        model(torch.ones(1, 3, 64, 64).cuda())  # warm-up before swapping in the engine
        model = load_engine(trt_file)
    results = []
    for imgs, _ in loader:
        with torch.no_grad():
            results.append(model(imgs.cuda()))
    return results
"""


def test_a_warm_up_call_beside_a_loop_that_runs_without_gradients_is_once():
    assert lint(WARM_UP, select=["TL302"]) == []


def test_the_loop_itself_with_gradients_on_is_still_reported():
    code = WARM_UP.replace("        with torch.no_grad():\n            results", "        if True:\n            results")
    assert [d.line for d in lint(code, select=["TL302"])] == [5]
