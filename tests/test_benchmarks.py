"""The benchmark scripts run (their figures are read by people, not asserted)."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_script_runs_on_the_demo():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), str(ROOT / "examples"), "--repeat", "1",
         "--no-torchfix"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for figure in ("parse floor", "cold check", "warm check", "one file", "python -c pass"):
        assert re.search(rf"^{figure} +\d+\.\d{{3}} s  \(\d+\.\d{{3}}-\d+\.\d{{3}}\)", result.stdout, re.M), figure
    assert re.search(r"^ratio cold / parse floor: \d+\.\d\dx", result.stdout, re.M)
    assert re.search(r"^ratio warm / cold: \d+\.\d%", result.stdout, re.M)
    assert re.search(r"peak RSS \d+ MiB", result.stdout)
    assert "torchfix                  not run" in result.stdout
    check = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--output-format", "json", str(ROOT / "examples")],
        capture_output=True, text=True, timeout=120,
    )
    expected = len(json.loads(check.stdout))
    assert expected > 0
    # The cold and the warm (cached) runs both found what `check` finds.
    assert re.search(rf"lines/s, {expected} diagnostics\b", result.stdout), result.stdout
    assert re.search(rf"^warm check .* {expected} diagnostics\b", result.stdout, re.M), result.stdout


def test_compare_script_measures_two_revisions_alternately():
    pytest = __import__("pytest")
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "HEAD", str(ROOT / "examples"), "--rounds", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rounds = re.findall(r"^round (\d) (base|new) ", result.stdout, re.MULTILINE)
    assert rounds == [("1", "base"), ("1", "new"), ("2", "new"), ("2", "base")]
    check = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--output-format", "json", str(ROOT / "examples")],
        capture_output=True, text=True, timeout=120,
    )
    expected = len(json.loads(check.stdout))
    assert len(re.findall(rf"check +\d+\.\d+ s  \({expected} diagnostics\)", result.stdout)) == 4
    assert re.search(r"ratio new / base: \d+\.\d\dx", result.stdout)
