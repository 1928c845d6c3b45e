"""The benchmark script runs (its figures are read by people, not asserted)."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_script_runs_on_the_demo():
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), str(ROOT / "examples"), "--repeat", "1"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "ratio check / parse floor:" in result.stdout
    check = subprocess.run(
        [sys.executable, "-m", "torchlint", "check", "--output-format", "json", str(ROOT / "examples")],
        capture_output=True, text=True, timeout=120,
    )
    expected = len(json.loads(check.stdout))
    assert expected > 0
    assert re.search(rf"\b{expected} diagnostics\b", result.stdout), result.stdout


def test_compare_script_measures_two_revisions_alternately():
    pytest = __import__("pytest")
    try:
        import setuptools  # noqa: F401  (the script installs each revision with it)
    except ImportError:
        pytest.skip("setuptools is needed to install a revision")
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare.py"), "HEAD", str(ROOT / "examples"), "--rounds", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rounds = re.findall(r"^round (\d) (base|new) ", result.stdout, re.MULTILINE)
    assert rounds == [("1", "base"), ("1", "new"), ("2", "new"), ("2", "base")]
    assert re.search(r"ratio new / base: \d+\.\d\dx", result.stdout)
