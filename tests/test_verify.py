"""``torchlint verify``: entry-point mode, rule mode, failures, usage errors.

The runs start a real subprocess that imports torch (CPU), with tiny
``--min-run-time`` values so the whole file stays fast.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchlint.cli import main
from torchlint.config import Settings
from torchlint.engine import fix_text
from torchlint.model import FixAvailability
from torchlint.registry import all_rules
from torchlint.verify.rule_mode import benchmarks
from torchlint.verify.entry import EntryOptions, _top_level_names, verify_entry

torch = pytest.importorskip("torch")

FAST = ["--min-run-time", "0.01"]


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One intra-op thread in the verifier's subprocess: on a small, busy CI
    machine torch's thread pool otherwise makes each call many times slower."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")


def write(directory: Path, name: str, code: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(code))
    return path


def verify(runner, *args: str):
    return runner.invoke(main, ["verify", *args])


# A training step with two unsafe fixes (TL301 and TL101), same values after.
TRAIN = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
data = torch.randn(8, 4)


def train(steps=3):
    total = 0.0
    for _ in range(steps):
        model.zero_grad(set_to_none=False)
        loss = model(data).square().mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        total += loss.item()
    return total, {"weight": model.weight.detach()}
"""

# Code that reads `.grad` after zeroing: TL301's unsafe fix changes it.
GRADS = """\
import time

import torch

model = torch.nn.Linear(4, 2)
data = torch.randn(3, 4)
model(data).sum().backward()


def grad_tensor():
    model.zero_grad(set_to_none=False)
    return model.weight.grad


def grad_sum():
    model.zero_grad(set_to_none=False)
    return model.weight.grad.sum()


def wait_for_grad():
    model.zero_grad(set_to_none=False)
    while model.weight.grad is None:
        time.sleep(0.05)
    return 1


def with_accumulator():
    total = 0.0
    for row in model(data):
        total += row.sum().item()
    model.zero_grad(set_to_none=False)
    return total, model.weight.grad
"""


# -- the rule benchmarks, statically ------------------------------------------


def test_every_fixable_rule_has_a_benchmark():
    fixable = {code for code, rule in all_rules().items() if rule.fix is not FixAvailability.NONE}
    assert fixable, "no fixable rule registered"
    fixable.discard("TL001")  # its fix edits `# noqa` comments only: nothing runs differently
    missing = sorted(fixable - set(benchmarks()))
    assert not missing, f"fixable rules without a BENCHMARK: {missing}"


@pytest.mark.parametrize("code", sorted(benchmarks()))
def test_benchmark_after_is_the_output_of_the_fix(code):
    if code not in all_rules():
        pytest.skip(f"{code} is not registered yet")
    benchmark = benchmarks()[code]
    # Fixed as a training script: a file named benchmark*.py is measurement
    # code, where the per-step rules stay silent.
    result = fix_text(benchmark.before, "train.py", Settings(), [code], unsafe=True)
    assert result.applied.get(code), f"{code} does not fire on its benchmark"
    assert result.text == benchmark.after
    # The `after` module has nothing left for that rule to fix.
    again = fix_text(benchmark.after, "train.py", Settings(), [code], unsafe=True)
    assert again.text == benchmark.after


def test_importing_the_verifier_does_not_import_torch():
    probe = (
        "import sys\n"
        "import torchlint.verify, torchlint.verify.entry, torchlint.verify.rule_mode\n"
        "import torchlint.verify.report, torchlint.verify.runner\n"
        "assert torchlint.verify.rule_mode.benchmarks(), 'no rule benchmark found'\n"
        "assert 'torch' not in sys.modules, 'the verifier imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_fixes_that_appear_after_other_fixes_are_listed():
    from torchlint.verify.entry import _fixes

    code = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        device = torch.device("cuda")


        def run(dataset):
            loader = DataLoader(TensorDataset(torch.randn(64, 3)), batch_size=16, num_workers=2)
            for x in loader:
                x = x.to(device)
        """)
    fixed, fixes, errors, hidden = _fixes(code, "m.py", Settings(), ["TL202", "TL204"], unsafe=False)
    assert "pin_memory=True" in fixed and "non_blocking=True" in fixed and not errors
    assert [(f.code, f.line, f.text is not None) for f in fixes] == [("TL202", 8, True), ("TL204", 10, False)]


def test_top_level_names():
    import ast

    tree = ast.parse("import a.b as c\nfrom d import e\nx, (y, z) = 1, (2, 3)\nif t:\n    def f(): g = 1\nclass K: h = 2\n")
    assert _top_level_names(tree) == {"c", "e", "x", "y", "z", "f", "K"}
    assert _top_level_names(ast.parse("from m import *\n")) is None


# -- comparison semantics (in this process) -----------------------------------


def test_compare_numbers_tensors_and_containers():
    from torchlint.verify import _child

    _child.load_torch()
    compare = _child.compare
    assert compare(3.5, torch.tensor(3.5)) is None  # TL101: a number becomes a 0-dim tensor
    assert compare(torch.tensor(3.5), 3.5) is None
    assert compare(4, torch.tensor(4)) is None
    assert "shape (2,)" in compare(3.0, torch.tensor([3.0, 3.0]))
    assert compare({"a": [1, (torch.ones(2), None)]}, {"a": [1, (torch.ones(2), None)]}) is None
    problem = compare({"a": [1, (torch.ones(2), None)]}, {"a": [1, (torch.zeros(2), None)]})
    assert problem.startswith("result['a'][1][0]: Tensor-likes are not close!")
    assert "missing keys ['b']" in compare({"a": 1, "b": 2}, {"a": 1})
    assert "a list in the original, a tuple" in compare([1], (1,))
    assert compare(torch.ones(3), torch.ones(3) + 1e-3) is not None
    assert compare(torch.ones(3), torch.ones(3) + 1e-3, rtol=1e-2, atol=1e-2) is None
    assert "a Tensor in the original, a NoneType" in compare(torch.zeros(2), None)
    assert compare(float("nan"), float("nan")) is None


# -- entry-point mode ---------------------------------------------------------


def test_entry_point_match_each_and_json(runner, workdir):
    write(workdir, "train.py", TRAIN)
    result = verify(runner, "train.py::train", "--unsafe-fixes", "--each", "--output-format", "json", *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["target"] == "train.py::train"
    assert report["device"] == "cpu"
    assert [(f["code"], f["line"]) for f in report["fixes"]] == [("TL301", 11), ("TL101", 17)]
    assert report["match"] is True and report["error"] is None
    for key in ("before", "after"):
        assert report[key]["median"] > 0 and report[key]["iqr"] >= 0
    assert report["speedup"] == pytest.approx(report["before"]["median"] / report["after"]["median"])
    assert [(row["code"], row["line"], row["match"]) for row in report["each"]] == [
        ("TL301", 11, True), ("TL101", 17, True)
    ]
    assert all(row["time"]["median"] > 0 and row["speedup"] > 0 for row in report["each"])
    assert (workdir / "train.py").read_text() == TRAIN  # nothing on disk changes


def test_entry_point_safe_fixes_only_by_default(runner, workdir):
    write(workdir, "train.py", TRAIN)
    result = verify(runner, "train.py::train")
    assert result.exit_code == 0, result.output
    assert "nothing to verify" in result.output
    assert "2 diagnostics with an unsafe fix: add `--unsafe-fixes`" in result.output


def test_mismatch_names_the_fix_and_what_differs(runner, workdir):
    write(workdir, "grads.py", GRADS)
    result = verify(runner, "grads.py::with_accumulator", "--unsafe-fixes", *FAST)
    assert result.exit_code == 1, result.output
    assert "FAILED: the fixed function returns different values:" in result.output
    assert "result[1]: a Tensor in the original, a NoneType in the fixed version" in result.output
    out = result.output
    assert out.startswith("torchlint verify grads.py::with_accumulator\n  device: cpu")
    assert "  fixes applied (5):\n    line 11: TL301 zero-grad-set-to-none (unsafe): Pass `set_to_none=True`" in out
    assert "line 30: TL101 item-in-loop (unsafe)" in out
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split() == ["median", "±", "iqr", "speedup", "match"]
    assert table[1].split()[0] == "original" and table[2].split()[0] == "fixed" and table[2].endswith("NO")
    # Five fixes apply to the module; only TL301's in this function changes the values.
    assert "caused by (each of these fails on its own):\n    TL301 at line 31: result[1]: a Tensor in" in out
    assert "TL101 at line" not in out.split("caused by")[1]


def test_exception_in_the_fixed_version(runner, workdir):
    write(workdir, "grads.py", GRADS)
    result = verify(runner, "grads.py::grad_sum", "--unsafe-fixes", "--select", "TL301",
                    "--output-format", "json", *FAST)
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["match"] is False
    assert report["error"].startswith("the fixed function raised AttributeError: 'NoneType' object has no attribute 'sum'")
    assert "return model.weight.grad.sum()" in report["traceback"]
    assert "(fixed by torchlint)" in report["traceback"]
    assert "_child.py" not in report["traceback"]
    # Four TL301 fixes in the module, one per function: only grad_sum's breaks it.
    assert [(f["code"], f["line"]) for f in report["fixes"]] == [("TL301", n) for n in (11, 16, 21, 31)]
    assert [(f["code"], f["line"]) for f in report["failing_fixes"]] == [("TL301", 16)]
    assert report["failing_fixes"][0]["error"].startswith("the fixed function raised AttributeError") or \
        "AttributeError" in report["failing_fixes"][0]["error"]
    assert report["before"] is not None and report["after"] is None


def test_timeout_stops_a_runaway_fixed_function(workdir):
    write(workdir, "grads.py", GRADS)
    steps = []
    options = EntryOptions(unsafe=True, min_run_time=0.01, timeout=2)
    report = verify_entry("grads.py::wait_for_grad", Settings(root=workdir), ["TL301"], options,
                          progress=lambda case, step: steps.append(step))
    assert report["error"] == "timed out after 2 s while calling the fixed function"
    assert report["match"] is False
    assert steps[:3] == ["importing torch", "importing the original module", "calling the original function"]
    assert steps[-1] == "calling the fixed function"


@pytest.mark.parametrize(
    "args, message",
    [
        (["train"], "does not name a function"),  # (`train.py` alone is a program: test_verify_program.py)
        (["missing.py::f"], "missing.py: no such file"),
        (["train.py::nope"], "the module defines no `nope`"),
        (["train.py::1x"], "is not a function name"),
        (["broken.py::f"], "broken.py:2:7: the module has a syntax error"),
        (["train.py::train", "--rtol", "1e-3"], "give both --rtol and --atol"),
        ([], "give one `path/to/module.py::function`"),
        (["--rules", "TL999"], "no rule benchmark matches `TL999`"),
        (["--rules", "TL102"], "TL102 has no fix, so it has no benchmark"),
        (["train.py::train", "--select", "TL999"], "unknown rule selector `TL999`"),
    ],
)
def test_usage_errors(runner, workdir, args, message):
    write(workdir, "train.py", TRAIN)
    write(workdir, "broken.py", "import torch\ndef f(:\n")
    if "TL102" in args and "TL102" not in all_rules():
        pytest.skip("TL102 is not registered")
    result = verify(runner, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_function_that_takes_arguments_is_a_usage_error(runner, workdir):
    write(workdir, "step.py", "import torch\n\ndef step(model, *, lr=0.1):\n    model.zero_grad(set_to_none=False)\n")
    result = verify(runner, "step.py::step", "--unsafe-fixes", *FAST)
    assert result.exit_code == 2, result.output
    assert "`step` takes arguments (model); verify calls a zero-argument function" in result.output


def test_function_checked_in_the_subprocess_too(runner, workdir):
    """A function the parent cannot see statically (made by a decorator, a
    factory) is checked where it is called."""
    write(workdir, "made.py", """\
        import functools

        import torch

        model = torch.nn.Linear(2, 2)


        def make():
            def step(batch):
                model.zero_grad(set_to_none=False)
            return step


        step = make()
        """)
    result = verify(runner, "made.py::step", "--unsafe-fixes", "--output-format", "json", *FAST)
    assert result.exit_code == 2, result.output
    assert "takes arguments (batch)" in json.loads(result.output)["error"]


def test_torch_missing(runner, workdir, monkeypatch):
    write(workdir, "train.py", TRAIN)
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails, find_spec says None
    for args in (["train.py::train"], ["--rules"]):
        result = verify(runner, *args)
        assert result.exit_code == 2, result.output
        # Never an unpinned install that would fetch the multi-GB CUDA build unannounced.
        assert "--index-url https://download.pytorch.org/whl/cpu" in result.output
        assert "CUDA build, several GB" in result.output
        assert "torchlint[verify]" not in result.output


def test_terminal_progress_line():
    import io

    from torchlint.verify.report import TerminalProgress

    stream = io.StringIO()
    progress = TerminalProgress(stream)
    progress(None, "importing torch")
    progress("TL201", "timing the TL201 after function")
    progress.close()
    assert stream.getvalue() == (
        "\r\033[Ktorchlint verify: importing torch..."
        "\r\033[Ktorchlint verify: [TL201] timing the TL201 after function..."
        "\r\033[K"
    )


# -- rule mode ----------------------------------------------------------------


def test_rule_mode_runs_every_benchmark(tmp_path):
    """Through a real `python -m torchlint` process: every benchmark agrees on CPU."""
    result = subprocess.run(
        [sys.executable, "-m", "torchlint", "verify", "--rules", "--output-format", "json", *FAST],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, env=os.environ,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["device"] == "cpu"
    rows = {row["code"]: row for row in report["rows"]}
    assert set(rows) == set(benchmarks())
    for row in rows.values():
        assert row["match"] is True and row["error"] is None, row
        assert row["device"] == "cpu"
        assert row["before"]["median"] > 0 and row["after"]["median"] > 0
        assert row["speedup"] == pytest.approx(row["before"]["median"] / row["after"]["median"])
    assert "pinning needs CUDA" in rows["TL202"]["note"]
    assert result.stderr == ""  # progress only on a terminal


def test_rule_mode_table_mismatch_and_timeout(runner, workdir, monkeypatch):
    found = benchmarks()
    tl201, tl401 = found["TL201"], found["TL401"]
    # TL201's `after` gives other values; TL401's `after` never returns.
    monkeypatch.setitem(found, "TL201", dataclasses.replace(tl201, after=tl201.after.replace("zeros", "ones")))
    hang = "\n\ndef run():\n    import time\n    while True:\n        time.sleep(0.05)\n"
    monkeypatch.setitem(found, "TL401", dataclasses.replace(tl401, after=tl401.after + hang))
    result = verify(runner, "--rules", "TL201,TL401", "TL702", "--timeout", "2", *FAST)
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("torchlint verify --rules: cpu")
    assert lines[2].split() == ["code", "device", "before", "after", "speedup", "(quartiles)", "match"]
    assert lines[3].startswith("TL201  cpu") and lines[3].endswith("NO")
    assert lines[4].startswith("TL401  cpu") and lines[4].endswith("error")
    # The child was stopped during TL401; TL702 ran in a fresh one.
    assert lines[5].startswith("TL702  cpu") and lines[5].endswith("yes")
    assert "TL201: FAILED: before and after differ:\n    result: Tensor-likes are not close!" in result.output
    assert "TL401: FAILED: timed out after 2 s while calling the TL401 after function" in result.output
