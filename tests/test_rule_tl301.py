"""Unit tests for TL301 (zero-grad-set-to-none)."""

from __future__ import annotations

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability


def _lint(code: str, path: str = "snippet.py", **overrides):
    return lint(code, select=["TL301"], path=path, **overrides)


def test_bare_zero_grad_depends_on_target_torch():
    code = "import torch\nfor x in loader:\n    opt.zero_grad()\n    step(x)\n"
    assert _lint(code) == []
    assert codes(_lint(code, target_torch=(1, 13))) == ["TL301"]


def test_manual_zeroing_needs_a_loop_over_parameters():
    code = """
        import torch

        def reset(model, buffers):
            for p in model.parameters():
                p.grad.data.zero_()
            for b in buffers:
                b.grad.zero_()
            model.weight.grad.zero_()
    """
    assert [d.line for d in _lint(code)] == [6]


def test_module_that_accumulates_into_gradients_is_silent():
    code = """
        import torch

        def accumulate(model, grads):
            for p, g in zip(model.parameters(), grads):
                p.grad.add_(g)

        def reset(model):
            for p in model.parameters():
                p.grad.zero_()
    """
    assert _lint(code) == []


def test_fix_is_unsafe():
    code = "import torch\nopt.zero_grad(set_to_none=False)\n"
    (d,) = _lint(code)
    assert d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    result = fix(code, select=["TL301"], unsafe=True)
    assert result.text == "import torch\nopt.zero_grad(set_to_none=True)\n"


@pytest.mark.parametrize("path", ["tests/test_wrappers.py", "test_optim.py", "pkg/optim_test.py", "conftest.py"])
def test_test_files_are_skipped(path):
    # a test that checks that `set_to_none` is passed on to the optimizer
    code = """
        import torch

        def test_wrapper_forwards_set_to_none(wrapped, spy):
            wrapped.zero_grad(set_to_none=False)
            spy.assert_called_with(set_to_none=False)
            for p in wrapped.parameters():
                p.grad.zero_()
    """
    assert _lint(code, path=path) == []
    assert codes(_lint(code, path="pkg/optim.py")) == ["TL301", "TL301"]


def test_creating_a_missing_gradient_is_not_zeroing():
    # an optimizer's step (pytorch_optimizer's Muon): a parameter without a
    # gradient gets a zero one, which the step then reads; `None` would crash it
    code = """
        import torch

        class Muon(torch.optim.Optimizer):
            @torch.no_grad()
            def step(self):
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                        grad = p.grad
                        if grad.is_sparse:
                            raise RuntimeError("sparse gradients are not supported")

        def init_grads(model):
            for p in model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
    """
    assert _lint(code) == []


def test_gradient_read_after_zeroing_is_not_reported_but_read_before_is():
    uses_after = """
        import torch

        def seed_grads(model, norms):
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
                norms.append(p.grad.norm())
    """
    assert _lint(uses_after) == []
    step_then_zero = """
        import torch

        def manual_step(model, lr):
            for p in model.parameters():
                if p.grad is not None:
                    p.data.add_(p.grad, alpha=-lr)
                    p.grad.detach_()
                    p.grad.zero_()
    """
    assert codes(_lint(step_then_zero)) == ["TL301"]
