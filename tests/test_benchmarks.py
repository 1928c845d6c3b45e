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
