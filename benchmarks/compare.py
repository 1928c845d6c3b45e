"""Compare the check time of two torchlint revisions on the same files, in one run.

    python benchmarks/compare.py BASE_REV [NEW_REV] PATHS... [--rounds N]

Each revision (any git revision; NEW_REV defaults to the working tree) is
copied (its packages laid out as installed; no build step) into its own
temporary directory, then its
``torchlint check --no-cache --output-format json`` runs on PATHS (in a fresh
process, start-up included) once per round for each revision, alternating, so
that both see the same machine load. It prints each round's check time and
the ratio of the medians, new / base (below 1.00x: the new revision is
faster). Both run in one process (``--jobs 1``, for revisions that have
worker processes) unless ``--jobs N`` says otherwise.

Use it to answer "is the checker slower than before this change?": the
machine's speed and load cancel out of the ratio, which single timings taken
at different moments cannot promise.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

# Run one installed copy's command line: drop an editable install's import
# hook (it would shadow the copy) and put the copy first on the path.
_BOOTSTRAP = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, sys.argv[1])
import torchlint
assert torchlint.__file__.startswith(sys.argv[1]), torchlint.__file__
from torchlint.cli import main
main(sys.argv[2:], prog_name="torchlint")
"""


def _install(revision: str | None, work: Path, label: str) -> Path:
    """Lay ``revision`` (None: the working tree) out as an importable tree in ``work/label``.

    torchlint is pure Python, so "installing" a revision is copying each
    package of its ``[tool.setuptools] packages`` list from the directory its
    ``package-dir`` names. No build step: nothing depends on the setuptools or
    wheel of the running environment (a fresh venv has no ``wheel``).
    """
    source = ROOT
    if revision is not None:
        source = work / f"{label}-src"
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    setuptools = tomllib.loads((source / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {})
    target = work / label
    for package in sorted(setuptools["packages"], key=lambda name: name.count(".")):
        origin = source / package_dir.get(package, package.replace(".", "/"))
        destination = target / package.replace(".", "/")
        shutil.copytree(
            origin, destination, dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    return target


def _check_command(site: Path, paths: list, jobs: int) -> list:
    """The revision's ``check`` command line, with the options it knows."""
    usage = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, str(site), "check", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout
    options = ["--output-format", "json", "--exit-zero"]
    if "--no-cache" in usage:
        options.append("--no-cache")
    if re.search(r"--jobs\b", usage):
        options += ["--jobs", str(jobs)]
    return [sys.executable, "-c", _BOOTSTRAP, str(site), "check", *options, *paths]


def _bench(command: list) -> tuple:
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
    return elapsed, len(json.loads(result.stdout))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="git revision to compare against")
    parser.add_argument("rest", nargs="+", metavar="[NEW_REV] PATHS")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1,
                        help="worker processes, for revisions that have them (default 1)")
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
        commands = {label: _check_command(site, paths, args.jobs) for label, site in sites.items()}
        times = {"base": [], "new": []}
        for n in range(args.rounds):
            order = ("base", "new") if n % 2 == 0 else ("new", "base")
            for label in order:
                check, found = _bench(commands[label])
                times[label].append(check)
                print(f"round {n + 1} {label:4}  check {check:7.3f} s  ({found} diagnostics)", flush=True)
    base, new = statistics.median(times["base"]), statistics.median(times["new"])
    print(f"base {args.base}: median check {base:.3f} s")
    print(f"new  {new_rev or 'working tree'}: median check {new:.3f} s")
    print(f"ratio new / base: {new / base:.2f}x (median of {args.rounds} alternating rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
