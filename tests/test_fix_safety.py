"""benchmarks/fix_safety.py: a library's own tests, before and after `torchlint fix`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "fix_safety.py"

pytest.importorskip("torch")


def _library(root: Path) -> Path:
    """A tiny library with a CPU test suite: one module with a safe TL201 fix,
    one with an unsafe TL301 fix that its test can tell apart."""
    (root / "minilib").mkdir(parents=True)
    (root / "minilib" / "__init__.py").write_text("")
    (root / "minilib" / "ops.py").write_text(textwrap.dedent("""\
        import torch


        def ramp(n, device="cpu"):
            return torch.arange(n).to(device) * 2


        class Ramp(torch.nn.Module):
            def forward(self, n):  # per step: TL201 reports `ramp`, which it calls
                return ramp(n)
        """))
    (root / "minilib" / "training.py").write_text(textwrap.dedent("""\
        import torch


        def step(model, optimizer, x):
            optimizer.zero_grad(set_to_none=False)
            model(x).sum().backward()
            optimizer.step()


        def clear(model, optimizer):
            optimizer.zero_grad(set_to_none=False)
        """))
    (root / "tests").mkdir()
    (root / "tests" / "test_ops.py").write_text(textwrap.dedent("""\
        import torch
        from minilib.ops import ramp


        def test_ramp():
            assert ramp(4).tolist() == [0, 2, 4, 6]
        """))
    (root / "tests" / "test_training.py").write_text(textwrap.dedent("""\
        import torch
        from minilib.training import clear


        def test_clear_keeps_zero_gradients():
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(1, 2)).sum().backward()
            clear(model, optimizer)
            assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())
        """))
    return root


def _run(library: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(library), "--package", "minilib", "--tests", "tests", *extra],
        capture_output=True, text=True, timeout=600,
    )


def test_safe_fixes_keep_the_library_tests_passing(tmp_path):
    library = _library(tmp_path / "lib")
    result = _run(library)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "+    return torch.arange(n, device=device) * 2" in result.stdout
    assert "tests: tests/test_ops.py" in result.stdout
    assert "1 module(s) fixed; 1 test(s) passed before the fixes; 1 of them pass after; 0 broken" in result.stdout
    assert (library / "minilib" / "ops.py").read_text().count(".to(device)") == 1  # the original is untouched


def test_a_fix_that_changes_behaviour_is_caught(tmp_path):
    """TL301's fix is unsafe precisely because code may read the zeroed
    gradients; the library's own test shows it."""
    library = _library(tmp_path / "lib")
    result = _run(library, "--unsafe-fixes", "--select", "TL301")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN: tests.test_training::test_clear_keeps_zero_gradients" in result.stdout


@pytest.mark.skipif(
    not os.environ.get("TORCHLINT_IGNITE"),
    reason="set TORCHLINT_IGNITE to a pytorch/ignite checkout (and pip install pytest-xdist) to run",
)
def test_ignite_tests_pass_after_safe_fixes():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), os.environ["TORCHLINT_IGNITE"], "--package", "ignite", "--tests", "tests/ignite"],
        capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " 0 broken" in result.stdout
