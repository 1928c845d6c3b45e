"""Measure torchlint against the LibCST parse floor, its own cache and TorchFix.

    python benchmarks/bench.py PATHS... [--jobs N] [--repeat N] [--torchfix CMD | --no-torchfix]

Every figure is the wall time of a fresh process (start-up included), run on
the same files, in rounds (alternating the order from one round to the next,
so that a change in the machine's load hits every figure alike):

  parse floor  -- discover the files as torchlint does, read them, and
                  parse every one that mentions torch as torchlint does
                  (`torchlint.parsing.parse_module`: LibCST's parse, which
                  must not give up on valid Python LibCST refuses), in
                  N worker processes (the same pool and chunking as torchlint)
  cold check   -- `torchlint check --no-cache -j N` with the default rules
  warm check   -- `torchlint check -j N` again over the unchanged files, with
                  the cache filled beforehand (in a temporary directory, via
                  TORCHLINT_CACHE_DIR: your tree is not written to)
  torchfix     -- `torchfix --select ALL -j N` (when TorchFix is installed)
  one file     -- `torchlint check --no-cache FILE` for one file, next to
                  `python -c pass` and `python -c "import libcst"`

Every process runs with its modules' bytecode written once, as an installed
package has it (a PYTHONDONTWRITEBYTECODE of the shell is dropped for the
children unless --keep-env).

It prints the median and the spread (min-max) of each, the ratios the
design's budget is written in (cold / parse floor, warm / cold, torchfix /
cold), and the peak resident memory of the cold run's largest process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torchlint

ROOT = Path(__file__).resolve().parent.parent

# When this script runs against an installed copy of torchlint that is not the
# editable one (benchmarks/compare.py does that), the child processes must
# import that same copy.
_EDITABLE = any("editable" in repr(f).lower() for f in sys.meta_path) or any(
    "__editable__" in name for name in sys.modules
)
_SITE = str(Path(torchlint.__file__).resolve().parent.parent)
_BOOT = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
    f"sys.path.insert(0, {_SITE!r})\n"
)


def _python(code: str) -> list:
    prefix = "" if _EDITABLE else _BOOT
    return [sys.executable, "-c", prefix + code]


def torchlint_command(*args: str) -> list:
    return _python("import sys; from torchlint.cli import main; main(sys.argv[1:], prog_name='torchlint')") + list(args)


def timed(command: list, env=None) -> tuple:
    """(seconds, peak RSS of the largest process in KiB, stdout)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return elapsed, usage.ru_maxrss, out.read().decode("utf-8", "replace"), process.returncode


# -- the parse floor (runs in a child process: python bench.py --parse-floor N PATHS) --


def _parse_chunk(items):
    import libcst as cst

    from torchlint.engine import could_concern_torch
    from torchlint.parsing import parse_module
    from torchlint.source import SourceError, read_source

    parsed = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, path in items:
            try:
                text = read_source(Path(path)).text
            except SourceError:
                continue
            if could_concern_torch(text):
                try:
                    parse_module(text)  # (torchlint's parse: it takes the valid Python LibCST refuses)
                except (cst.ParserSyntaxError, RecursionError):
                    pass
                parsed += 1
    return parsed


def parse_floor_main(jobs: int, paths) -> int:
    from torchlint.config import Settings
    from torchlint.discovery import discover
    from torchlint.parallel import _chunks, _context

    settings = Settings(root=Path.cwd().resolve())
    items = [(str(f), str(f)) for f in discover([Path(p) for p in paths], settings).files]
    if jobs == 1:
        parsed = _parse_chunk(items)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs, mp_context=_context()) as pool:
            parsed = sum(pool.map(_parse_chunk, _chunks(items, jobs)))
    print(parsed)
    return 0


# -- the benchmark ----------------------------------------------------------------------


def describe(paths) -> tuple:
    from torchlint.config import Settings
    from torchlint.discovery import discover
    from torchlint.engine import could_concern_torch
    from torchlint.source import SourceError, read_source

    files = discover([Path(p) for p in paths], Settings(root=Path.cwd().resolve())).files
    lines = torch_files = 0
    for f in files:
        try:
            text = read_source(f).text
        except SourceError:
            continue
        lines += text.count("\n")
        torch_files += could_concern_torch(text)
    return len(files), torch_files, lines


def _spread(values) -> str:
    return f"{statistics.median(values):8.3f} s  ({min(values):.3f}-{max(values):.3f})"


def _ratio(label: str, top, bottom, fmt: str, scale: float, budget: str) -> str:
    """The ratio of the medians, and the ratio within each round (same machine load)."""
    overall = fmt.format(scale * statistics.median(top) / statistics.median(bottom))
    rounds = ", ".join(fmt.format(scale * t / b) for t, b in zip(top, bottom))
    return f"{label}: {overall} ({budget}; per round: {rounds})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--jobs", "-j", type=int, default=None,
                        help="worker processes for every tool (default: the number of CPUs)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--torchfix", default=None, metavar="CMD",
                        help="the torchfix executable (default: `torchfix` on PATH)")
    parser.add_argument("--no-torchfix", action="store_true", help="do not run TorchFix")
    parser.add_argument("--one-file", default=str(ROOT / "examples" / "train.py"), metavar="FILE",
                        help="the file for the one-file start-up figure (default: examples/train.py)")
    parser.add_argument("--parse-floor", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep-env", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE (compile every module at every start)")
    args = parser.parse_args(argv)
    if args.parse_floor is not None:
        return parse_floor_main(args.parse_floor, args.paths)

    from torchlint.parallel import default_jobs

    jobs = args.jobs or default_jobs()
    torchfix = None if args.no_torchfix else (args.torchfix or shutil.which("torchfix"))
    n_files, torch_files, lines = describe(args.paths)
    print(f"{n_files} files ({torch_files} mention torch), {lines} lines; {jobs} job{'s' * (jobs != 1)}; "
          f"torchlint {torchlint.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

    floor_cmd = _python(
        f"import runpy, sys; sys.argv = [{str(Path(__file__).resolve())!r}] + sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    ) + ["--parse-floor", str(jobs), *args.paths]
    cold_cmd = torchlint_command("check", "--no-cache", "-j", str(jobs), "--output-format", "json",
                                 "--exit-zero", *args.paths)
    warm_cmd = torchlint_command("check", "-j", str(jobs), "--output-format", "json", "--exit-zero", *args.paths)
    one_file = Path(args.one_file)
    # Every process runs as from an installed package, with its modules'
    # bytecode written once (pip compiles it at install time); without
    # --keep-env a PYTHONDONTWRITEBYTECODE of the shell would have every start
    # compile torchlint's sources again.
    base = dict(os.environ)
    if not args.keep_env:
        base.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="torchlint-bench-cache-") as cache:
        env = dict(base, TORCHLINT_CACHE_DIR=cache)
        fill, _, filled, _ = timed(warm_cmd, env)
        steps = [("parse floor", floor_cmd, base), ("cold check", cold_cmd, base), ("warm check", warm_cmd, env)]
        if torchfix:
            steps.append(("torchfix", [torchfix, "--select", "ALL", "-j", str(jobs), *args.paths], None))
        if one_file.is_file():
            steps += [
                ("python -c pass", [sys.executable, "-c", "pass"], base),
                ("import libcst", [sys.executable, "-c", "import libcst"], base),
                ("one file", torchlint_command("check", "--no-cache", "--exit-zero", str(one_file)), base),
            ]
        times = {name: [] for name, _, _ in steps}
        rss = {name: 0 for name, _, _ in steps}
        outputs = {}
        for round_ in range(args.repeat):
            order = steps if round_ % 2 == 0 else list(reversed(steps))
            for name, command, step_env in order:
                elapsed, peak, out, code = timed(command, step_env)
                if (code not in (0, 1) or name == "parse floor" and code) and name != "torchfix":
                    raise SystemExit(f"{name}: {' '.join(command)} exited with {code}")
                times[name].append(elapsed)
                rss[name] = max(rss[name], peak)
                outputs[name] = out
    cold_found = len(json.loads(outputs["cold check"]))
    warm_found = len(json.loads(outputs["warm check"]))
    if warm_found != cold_found or len(json.loads(filled)) != cold_found:
        raise SystemExit(f"the warm run found {warm_found} diagnostics, the cold run {cold_found}")
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'':26}  median    (min-max of {args.repeat})")
    print(f"{'parse floor':26}{_spread(times['parse floor'])}  {lines / med['parse floor']:,.0f} lines/s")
    print(f"{'cold check':26}{_spread(times['cold check'])}  {lines / med['cold check']:,.0f} lines/s, "
          f"{cold_found} diagnostics, peak RSS {rss['cold check'] / 1024:.0f} MiB")
    print(f"{'warm check':26}{_spread(times['warm check'])}  {warm_found} diagnostics "
          f"(filling the cache took {fill:.3f} s)")
    if torchfix:
        print(f"{'torchfix --select ALL':26}{_spread(times['torchfix'])}  {lines / med['torchfix']:,.0f} lines/s")
    else:
        print("torchfix                  not run (not installed, or --no-torchfix)")
    print(_ratio("ratio cold / parse floor", times["cold check"], times["parse floor"], "{:.2f}x", 1, "budget 1.5x"))
    print(_ratio("ratio warm / cold", times["warm check"], times["cold check"], "{:.1f}%", 100, "budget 10%"))
    if torchfix:
        print(_ratio("ratio torchfix / cold", times["torchfix"], times["cold check"], "{:.1f}x", 1,
                     "target at least 15x"))
    if one_file.is_file():
        print(f"{'one file':26}{_spread(times['one file'])}  torchlint check --no-cache {one_file.name} "
              "(budget 0.35 s)")
        print(f"{'python -c pass':26}{_spread(times['python -c pass'])}")
        print(f"{'python -c import libcst':26}{_spread(times['import libcst'])}")
        if base.get("PYTHONDONTWRITEBYTECODE") or sys.flags.dont_write_bytecode:
            print("(PYTHONDONTWRITEBYTECODE is set: modules without a .pyc are compiled at every start)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
