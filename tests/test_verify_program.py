"""``torchlint verify SCRIPT`` and ``torchlint fix --verify SCRIPT``: program mode.

The programs are the multi-module projects in tests/fixtures/programs (copied to
a temporary directory, which is the current directory of the run).  Each run of
a program is a fresh subprocess that imports torch, so the tests use few steps
and tiny models; the bisection and the import hook are also tested without runs.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from torchlint.cli import main
from torchlint.config import Settings
from torchlint.registry import all_rules
from torchlint.verify.program import Project, ProjectFile, bisect_culprits, step_time
from torchlint.verify.program_report import format_program

torch = pytest.importorskip("torch")

PROGRAMS = Path(__file__).parent / "fixtures" / "programs"
JSON_KEYS = {"target", "steps", "device", "fixes", "before", "after", "speedup", "speedup_range", "match",
             "first_mismatch", "error"}


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One intra-op thread in the runs: on a small, busy machine torch's thread
    pool otherwise makes each step many times slower (see test_verify.py)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")


def program(tmp_path: Path, monkeypatch, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(PROGRAMS / name, target)
    monkeypatch.chdir(target)
    return target


def run_json(runner, script: str, *args: str, rounds: int = 1):
    result = runner.invoke(main, ["verify", script, "--output-format", "json", "--rounds", str(rounds), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result, json.loads(result.output)


# -- without runs ---------------------------------------------------------------------------


def test_bisection_finds_each_culprit_without_trying_every_subset():
    bad = {3, 11}
    calls = []

    def test(subset):
        calls.append(list(subset))
        hit = sorted(bad & set(subset))
        return (not hit, 7 if hit else None, None)

    candidates = list(range(16))
    culprits, kept = bisect_culprits(candidates, test, (False, 7, None))
    assert [c[0] for c in culprits] == [3, 11]
    assert all(c[1] == 7 for c in culprits)
    assert kept == [i for i in candidates if i not in bad]
    assert len(calls) <= 2 * 5 + 2  # about log2(16) runs per culprit, and a check of the rest
    assert test(kept)[0]


def test_bisection_of_a_matching_set_runs_nothing():
    culprits, kept = bisect_culprits([0, 1, 2], lambda s: pytest.fail("no run needed"), (True, None, None))
    assert culprits == [] and kept == [0, 1, 2]


def test_step_time_quartiles_and_a_single_sample():
    assert step_time([]) is None
    one = step_time([2.0])
    assert one == {"median": 2.0, "iqr": 0.0, "samples": 1}  # no quartiles: no speedup range
    four = step_time([1.0, 2.0, 3.0, 4.0])
    assert four["median"] == 2.5 and four["p25"] == 1.75 and four["p75"] == 3.25


def test_project_fixes_span_modules_and_subsets_change_only_their_lines(tmp_path, monkeypatch):
    root = program(tmp_path, monkeypatch, "cnn")
    codes = [c for c, r in all_rules().items() if r.default]
    files = [ProjectFile(p.resolve(), p.name, Settings(root=root, unsafe_fixes=True), codes)
             for p in sorted(root.glob("*.py"))]
    project = Project(files, unsafe=True)
    found = {(u.code, u.file.display) for u in project.units}
    assert {("TL401", "model.py"), ("TL302", "model.py"), ("TL301", "train.py"), ("TL202", "data.py")} <= found
    assert project.trains()
    zero_grad = next(u for u in project.units if u.code == "TL301")
    only = project.sources([zero_grad.index])
    assert list(only) == [str(root / "train.py")]
    original = (root / "train.py").read_text().splitlines()
    changed = [i + 1 for i, (a, b) in enumerate(zip(original, only[str(root / "train.py")].splitlines())) if a != b]
    assert changed == [zero_grad.line]
    assert "set_to_none=True" in only[str(root / "train.py")]
    assert "loss.detach()" not in only[str(root / "train.py")]  # TL101 and TL303 are not in the subset


# -- programs ---------------------------------------------------------------------------------


def test_cnn_unsafe_fix_that_changes_the_losses_is_named(runner, tmp_path, monkeypatch):
    program(tmp_path, monkeypatch, "cnn")
    result, report = run_json(runner, "train.py", "--steps", "2", "--unsafe-fixes", "--", "--epochs", "1")
    assert result.exit_code == 1
    assert JSON_KEYS <= set(report)
    assert report["mode"] == "training" and report["device"] == "cpu" and report["steps"] == 2
    assert report["match"] is False and report["first_mismatch"] == 1
    assert [(f["code"], f["path"]) for f in report["failing_fixes"]] == [("TL401", "model.py")]
    executed = {(f["code"], f["path"]): f["executed"] for f in report["fixes"]}
    assert executed[("TL302", "model.py")] is False  # model.predict is never called
    assert executed[("TL401", "model.py")] and executed[("TL301", "train.py")] and executed[("TL202", "data.py")]
    assert len(report["before"]["losses"]) == 3 and report["before"]["step_time"]["samples"] == 2
    assert report["before"]["peak_memory"] > 0 and report["after"]["peak_memory"] > 0
    text = format_program(report)
    assert "TL401 at model.py:9: changes results at step 1" in text


def test_fix_verify_drops_the_unsafe_fix_that_changes_results_and_writes_the_rest(runner, tmp_path, monkeypatch):
    root = program(tmp_path, monkeypatch, "cnn")
    model_before = (root / "model.py").read_text()
    result = runner.invoke(main, ["fix", "--verify", "train.py", "--steps", "2", "--unsafe-fixes", "--",
                                  "--epochs", "1"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    rows = {line.split()[0] + " " + line.split()[2]: line for line in result.output.splitlines()
            if line.strip().startswith("TL")}
    assert "dropped: changed results at step 1" in rows["TL401 model.py:9"]
    assert "kept" in rows["TL301 train.py:20"] and "kept" in rows["TL101 train.py:21"]
    assert "kept" in rows["TL202 data.py:23"]
    assert "not executed: not applied" in rows["TL302 model.py:25"]
    assert (root / "model.py").read_text() == model_before  # TL401 dropped, TL302 untested
    train = (root / "train.py").read_text()
    assert "set_to_none=True" in train and "running += loss.detach()" in train
    assert "pin_memory=True" in (root / "data.py").read_text()


def test_language_model_reads_a_relative_data_path_and_each_fix_alone(runner, tmp_path, monkeypatch):
    program(tmp_path, monkeypatch, "lm")
    result, report = run_json(runner, "train.py", "--steps", "2", "--unsafe-fixes", "--each", "--",
                              "--iters", "3", "--eval-every", "100")
    assert result.exit_code == 0, report
    assert report["match"] is True and report["error"] is None
    assert report["before"]["losses"] == report["after"]["losses"] and len(report["before"]["losses"]) == 3
    assert {f["code"] for f in report["fixes"]} >= {"TL201", "TL301"}
    assert {(row["code"], row["match"]) for row in report["each"]} == {(f["code"], True) for f in report["fixes"]}


def test_relative_data_path_is_read_from_the_current_directory(runner, tmp_path, monkeypatch):
    root = program(tmp_path, monkeypatch, "lm")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result, report = run_json(runner, str(root / "train.py"), "--steps", "1", "--unsafe-fixes", "--",
                              "--iters", "2")
    assert result.exit_code == 1
    assert "FileNotFoundError" in report["error"] and "data/input.txt" in report["error"]


def test_inference_script_is_timed_per_model_call_or_as_a_whole_run(runner, tmp_path, monkeypatch):
    program(tmp_path, monkeypatch, "infer")
    result, report = run_json(runner, "predict.py", "--steps", "3", "--unsafe-fixes", "--", "12", rounds=2)
    assert result.exit_code == 0, report
    assert report["mode"] == "inference" and report["match"] is True
    assert report["before"]["step_kind"] == "output"
    # two alternated runs of each version, their step times pooled; one traced run more
    assert report["before"]["runs"] == report["after"]["runs"] == 2 and report["runs"] == 5
    assert report["before"]["step_time"]["samples"] == 6 and len(report["before"]["losses"]) == 4
    assert "pooled over 2 runs of the original and 2 of the fixed" in format_program(report)
    result, report = run_json(runner, "predict.py", "--steps", "0", "--unsafe-fixes", "--", "5")
    assert result.exit_code == 0, report
    assert report["mode"] == "whole run" and report["match"] is True
    assert report["before"]["step_time"]["samples"] == 1 and len(report["before"]["losses"]) == 5
    assert report["speedup_range"] is None  # one sample: no range, so no claim of a speedup
    assert "the whole run is timed (--steps 0)" in format_program(report)


def test_spawned_workers_see_served_code(tmp_path, monkeypatch):
    """A spawn-context DataLoader: the worker process re-imports data.py, and gets
    the served text (its batches, so the losses, differ from the file's)."""
    from torchlint.verify.program import Launcher, ProgramOptions

    root = program(tmp_path, monkeypatch, "cnn")
    data = root / "data.py"
    launcher = Launcher((root / "train.py").resolve(), ["--epochs", "1", "--workers", "1", "--context", "spawn"],
                        root, "training", ProgramOptions(steps=1, warmup=0))
    plain = launcher.run("file", {})
    served = data.read_text().replace("return self.images[index], self.labels[index]",
                                      "return self.images[index] * 0, self.labels[index]")
    changed = launcher.run("served", {str(data.resolve()): served}, expected=plain.values)
    assert plain.error is None and changed.error is None, (plain.output_tail, changed.output_tail)
    assert changed.result["match"] is False and changed.result["first_mismatch"] == 1


def test_failing_program_is_an_error_not_a_traceback(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fails.py").write_text(textwrap.dedent("""\
        import torch


        def step(model, opt):
            opt.zero_grad(set_to_none=False)
            model(torch.randn(2, 4)).sum().backward()
            opt.step()


        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step(model, opt)
        raise RuntimeError("out of data")
    """))
    result = runner.invoke(main, ["verify", "fails.py", "--steps", "3", "--unsafe-fixes", "--rounds", "1"])
    assert result.exit_code == 1
    assert "FAILED: the program as written raised RuntimeError: out of data" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    result = runner.invoke(main, ["fix", "--verify", "fails.py", "--unsafe-fixes"])
    assert result.exit_code == 1 and "Nothing was written." in result.output
    assert "set_to_none=False" in (tmp_path / "fails.py").read_text()


def test_hanging_program_times_out(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hangs.py").write_text(textwrap.dedent("""\
        import time

        import torch


        def step(model, opt):
            opt.zero_grad(set_to_none=False)
            model(torch.randn(2, 4)).sum().backward()
            opt.step()


        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step(model, opt)
        while True:
            time.sleep(0.1)
    """))
    result, report = run_json(runner, "hangs.py", "--steps", "3", "--unsafe-fixes", "--timeout", "3")
    assert result.exit_code == 1
    # (on a loaded machine even the first step may not come within the 3 s)
    assert report["error"].startswith("the program as written timed out after 3 s (--timeout)")


def test_usage_errors(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(main, ["verify", "missing.py", "--steps", "2"])
    assert result.exit_code == 2 and "missing.py: no such file" in result.output
    result = runner.invoke(main, ["fix", "--verify", "missing.py", "--diff"])
    assert result.exit_code == 2 and "cannot be combined" in result.output


def test_nothing_to_fix_runs_nothing(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "clean.py").write_text("import torch\nprint(torch.ones(2))\n")
    result = runner.invoke(main, ["verify", "clean.py"])
    assert result.exit_code == 0
    assert "nothing to verify" in result.output
