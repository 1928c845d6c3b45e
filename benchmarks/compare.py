"""Compare the check time of two torchlint revisions on the same files, in one run.

    python benchmarks/compare.py BASE_REV [NEW_REV] PATHS... [--rounds N]

Each revision (any git revision; NEW_REV defaults to the working tree) is
installed without dependencies into its own temporary directory, then
``benchmarks/bench.py`` (this checkout's copy) runs once per round for each
revision, alternating, so that both see the same machine load. It prints each
round's check time and the ratio of the medians, new / base (below 1.00x:
the new revision is faster).

Use it to answer "is the checker slower than before this change?": the
machine's speed and load cancel out of the ratio, which single timings taken
at different moments cannot promise.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench.py"

# Run bench.py against one installed copy: drop an editable install's import
# hook (it would shadow the copy) and put the copy first on the path.
_BOOTSTRAP = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[1])
import torchlint
assert torchlint.__file__.startswith(sys.argv[1]), torchlint.__file__
bench = sys.argv[2]
sys.argv = [bench] + sys.argv[3:]
runpy.run_path(bench, run_name="__main__")
"""

_CHECK = re.compile(r"^check\s+([0-9.]+) s", re.MULTILINE)
_FLOOR = re.compile(r"^parse floor\s+([0-9.]+) s", re.MULTILINE)


def _install(revision: str | None, work: Path, label: str) -> Path:
    """Install ``revision`` (None: the working tree) into ``work/label``; return the directory."""
    source = ROOT
    if revision is not None:
        source = work / f"{label}-src"
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    target = work / label
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True,
    )
    return target


def _bench(site: Path, paths: list) -> tuple:
    result = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, str(site), str(BENCH), *paths, "--repeat", "1"],
        capture_output=True, text=True, check=True,
    )
    check, floor = _CHECK.search(result.stdout), _FLOOR.search(result.stdout)
    if check is None or floor is None:
        raise SystemExit(f"unexpected bench.py output:\n{result.stdout}{result.stderr}")
    return float(check.group(1)), float(floor.group(1))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git revision to compare against")
    parser.add_argument("rest", nargs="+", metavar="[NEW_REV] PATHS")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    new_rev = None
    paths = args.rest
    probe = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{paths[0]}^{{commit}}"],
        capture_output=True,
    )
    if probe.returncode == 0 and not Path(paths[0]).exists() and len(paths) > 1:
        new_rev, paths = paths[0], paths[1:]
    with tempfile.TemporaryDirectory(prefix="torchlint-compare-") as tmp:
        work = Path(tmp)
        sites = {"base": _install(args.base, work, "base"), "new": _install(new_rev, work, "new")}
        times = {"base": [], "new": []}
        for n in range(args.rounds):
            order = ("base", "new") if n % 2 == 0 else ("new", "base")
            for label in order:
                check, floor = _bench(sites[label], paths)
                times[label].append(check)
                print(f"round {n + 1} {label:4}  check {check:7.3f} s  (parse floor {floor:7.3f} s)", flush=True)
    base, new = statistics.median(times["base"]), statistics.median(times["new"])
    print(f"base {args.base}: median check {base:.3f} s")
    print(f"new  {new_rev or 'working tree'}: median check {new:.3f} s")
    print(f"ratio new / base: {new / base:.2f}x (median of {args.rounds} alternating rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
