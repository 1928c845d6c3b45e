"""`torchlint verify`: fixes at their lines in the original module, fixes delayed by an
overlapping edit timed on their own, which fixes the function ran, spawned DataLoader
workers, and the child's environment noise kept out of the report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from torchlint.cli import main
from torchlint.config import Settings
from torchlint.registry import default_codes
from torchlint.verify.entry import _fixes
from torchlint.verify.runner import _died

# A multi-line DataLoader call: TL202's `pin_memory=True` goes on a line of its own,
# which moves every later line down by one in the partly fixed text.
FOLLOW_ON = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def bench():
    data = TensorDataset(torch.randn(64, 3), torch.randn(64))
    loader = DataLoader(
        data,
        batch_size=8, num_workers=2,
    )
    total = 0.0
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        total += float(x.sum())
    return total
"""

# TL101's edit contains TL201's: TL101 waits a round, but it exists on the original text.
OVERLAP = """\
import torch

device = torch.device("cpu")


def bench():
    total = 0.0
    for i in range(20):
        total += torch.zeros(64).to(device).sum().item()
    return total


def unused():
    out = []
    for i in range(30):
        out.append(torch.ones(4).to(device))
    return out
"""


def test_later_round_fixes_are_listed_at_their_line_in_the_original():
    fixed, fixes, errors, _ = _fixes(FOLLOW_ON, "m.py", Settings(), default_codes(), True)
    assert errors == []
    assert [(f.code, f.line) for f in fixes] == [("TL202", 7), ("TL204", 13), ("TL204", 13)]
    assert FOLLOW_ON.splitlines()[13 - 1].strip() == "x, y = x.cuda(), y.cuda()"
    # TL204 exists only once TL202 is in: no variant of its own, and it says which.
    assert [f.after for f in fixes if f.code == "TL204"] == [["TL202 (line 7)"], ["TL202 (line 7)"]]
    assert "non_blocking=True" in fixed


def test_a_fix_delayed_by_an_overlapping_edit_has_its_own_variant():
    _, fixes, _, _ = _fixes(OVERLAP, "m.py", Settings(), default_codes(), True)
    by_code = {(f.code, f.line): f for f in fixes}
    assert set(by_code) == {("TL201", 9), ("TL101", 9), ("TL201", 16)}
    assert by_code[("TL101", 9)].text is not None and by_code[("TL101", 9)].after == []
    assert ".detach()" in by_code[("TL101", 9)].text and ".to(device)" in by_code[("TL101", 9)].text


def test_died_message_leaves_out_known_environment_noise():
    tail = (
        "/x/torch/_subclasses/functional_tensor.py:368: UserWarning: Failed to initialize NumPy: "
        "No module named 'numpy' (Triggered internally at /w/torch/csrc/utils/tensor_numpy.cpp:84.)\n"
        "  cpu = _conversion_method_template(device=torch.device(\"cpu\"))\n"
        "Segmentation fault in user code\n"
    )
    message = _died(-11, "calling the fixed function", tail)
    assert "Segmentation fault in user code" in message
    assert "NumPy" not in message and "_conversion_method_template" not in message


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the verifier's runs need torch")


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _verify(runner, *args):
    result = runner.invoke(main, ["verify", "--min-run-time", "0.02", "--output-format", "json", *args],
                           catch_exceptions=False)
    return result, json.loads(result.output)


@needs_torch
def test_each_times_a_delayed_fix_and_says_which_fixes_ran(runner, workdir):
    (workdir / "m.py").write_text(OVERLAP)
    result, report = _verify(runner, "m.py::bench", "--unsafe-fixes", "--each")
    assert result.exit_code == 0, result.output
    assert report["match"] is True
    assert sorted((e["code"], e["line"]) for e in report["each"]) == [("TL101", 9), ("TL201", 9), ("TL201", 16)]
    assert not [n for n in report["notes"] if "exists only once" in n]
    executed = {(f["code"], f["line"]): f["executed"] for f in report["fixes"]}
    assert executed == {("TL201", 9): True, ("TL101", 9): True, ("TL201", 16): False}
    assert any("not executed by the function: TL201 (line 16)" in n for n in report["notes"])


@needs_torch
def test_a_function_that_runs_no_fix_is_said_to(runner, workdir):
    (workdir / "m.py").write_text(OVERLAP.replace("def bench():", "def bench():\n    return 0.0\n\n\ndef old():"))
    result, report = _verify(runner, "m.py::bench", "--unsafe-fixes")
    assert result.exit_code == 0, result.output
    assert all(f["executed"] is False for f in report["fixes"])
    assert any("ran none of the fixed lines" in n for n in report["notes"])
    table = runner.invoke(main, ["verify", "--min-run-time", "0.02", "--unsafe-fixes", "m.py::bench"])
    assert "[not executed]" in table.output


SPAWN = """\
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i * i))


def bench():
    loader = DataLoader(Squares(), batch_size=4, num_workers=1, multiprocessing_context="spawn")
    total = torch.zeros(2)
    for batch in loader:
        total = total + batch.sum(0)
    for i in range(3):
        total = total + torch.zeros(2).to(device)
    return total


device = torch.device("cpu")
"""


@needs_torch
def test_spawned_dataloader_workers_import_the_fixed_module(runner, workdir):
    (workdir / "spawned.py").write_text(SPAWN)
    result = runner.invoke(main, ["verify", "--min-run-time", "0.01", "--timeout", "120", "--output-format", "json",
                                  "spawned.py::bench"], catch_exceptions=False)
    report = json.loads(result.output)
    assert report["error"] is None, report["error"]
    assert report["match"] is True
    assert result.exit_code == 0
