"""Measure `torchlint fix` against `torchlint check` in the same run.

    python benchmarks/fix_vs_check.py CORPUS [--jobs N] [--repeat N] [--python PY]

The corpus is never written: every `fix` runs on a fresh copy of it in a
temporary directory (the copy is made before the clock starts).  Each round
times, in fresh processes and with `--no-cache`:

  check     -- `torchlint check --no-cache -j N COPY`
  fix-diff  -- `torchlint fix --no-cache -j N --diff COPY` (writes nothing)
  fix       -- `torchlint fix --no-cache -j N COPY` (writes the fixed files)

and prints the median of each and the ratios fix-diff / check and fix / check
(the median of the rounds' own ratios: a round's three runs share the machine's load).
`--python` runs another interpreter (e.g. with PYTHONPATH set to an older
checkout) to compare versions; a torchlint whose `fix` has no `--jobs` option
is run without it (it then uses one worker per CPU).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List


def _timed(command: List[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def _fix_takes_jobs(python: str) -> bool:
    out = subprocess.run([python, "-m", "torchlint", "fix", "--help"], capture_output=True, text=True).stdout
    return "--jobs" in out


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        parser.error(f"{args.corpus}: not a directory")
    jobs = ["-j", str(args.jobs)]
    fix_jobs = jobs if _fix_takes_jobs(args.python) else []
    base = [args.python, "-m", "torchlint"]
    times: Dict[str, List[float]] = {"check": [], "fix-diff": [], "fix": []}
    with tempfile.TemporaryDirectory(prefix="torchlint-fix-vs-check-") as tmp:
        for round_ in range(args.repeat):
            copy = Path(tmp) / f"corpus{round_}"
            shutil.copytree(args.corpus, copy)
            times["check"].append(_timed([*base, "check", "--no-cache", *jobs, str(copy)]))
            times["fix-diff"].append(_timed([*base, "fix", "--no-cache", *fix_jobs, "--diff", str(copy)]))
            times["fix"].append(_timed([*base, "fix", "--no-cache", *fix_jobs, str(copy)]))
            shutil.rmtree(copy)
    median = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        spread = f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""
        print(f"{name:9} {median[name]:7.2f} s{spread}")
    for name in ("fix-diff", "fix"):
        # Each round's own ratio (its runs back to back, under the same load), then their median.
        ratios = [value / check for value, check in zip(times[name], times["check"])]
        spread = f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
        print(f"{name + ' / check':17} {statistics.median(ratios):.2f}{spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
