"""Per-keystroke latency of `torchlint server`, against the LibCST parse floor.

    python benchmarks/server_latency.py [FILE | --generated [--lines N]] [--rounds N] [--select CODES] [--profile]

After each change (once the debounce delay has passed) the server analyses
the whole document again.  This script measures that analysis, in one
process, on a ~1,000-line file, beside `libcst.parse_module` of the same text
(the floor: torchlint cannot analyse a file without parsing it), and prints
the ratio; the target (issue 16) is at most about 2x the parse.

The default file is `benchmarks/data/training_program.py`: 937 lines of a
training program as people keep one in a file (configuration, data, a ResNet
and a small transformer, the training loop, evaluation, checkpoints), with 9
findings where a user keeps such a file (it is analysed as `train.py` in a
temporary directory: under `benchmarks/` the rules treat a script as
measurement code).  `--generated` builds the worst case instead (in a temporary
directory): the examples and every rule fixture's input (`examples/*.py`,
`tests/fixtures/*/input.py`), each under a comment naming it, concatenated
until at least `--lines` lines: a loop or a finding every few lines, so most
rules do most of their work.

Each round makes one keystroke (the next digit in a literal of the file's
middle line, so no text is seen twice), then times, in alternating order:

  parse     -- `libcst.parse_module(text)`
  analysis  -- what the server does for the new text: the document for its
               path (configuration lookup), the incremental parse (only the
               statements the keystroke touched), the lint with the selected
               rules (default: the configuration's), diagnostics positioned in
               the document, and their conversion to LSP diagnostics

Both run with the cyclic garbage collector paused, as the server analyses
(and after the server's first analysis has frozen the long-lived heap).

It prints the median and quartiles of each, the ratio of the medians, and
the number of diagnostics.  `--profile` prints the analysis's top functions
(cProfile, cumulative time) afterwards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Tuple

ROOT = Path(__file__).resolve().parent.parent


def generated(lines: int) -> str:
    sources = sorted((ROOT / "examples").glob("*.py")) + sorted((ROOT / "tests" / "fixtures").glob("*/input.py"))
    parts: List[str] = []
    count = 0
    while count < lines:
        for path in sources:
            text = path.read_text()
            parts.append(f"# ---- {path.relative_to(ROOT)}\n{text}\n")
            count += text.count("\n") + 2
            if count >= lines:
                break
    return "".join(parts)


def keystrokes(text: str) -> Callable[[int], str]:
    """The text after the n-th keystroke: a literal on the middle line grows by one digit each time."""
    lines = text.split("\n")
    middle = len(lines) // 2
    while middle < len(lines) and (not lines[middle].strip() or lines[middle].rstrip().endswith(("\\", ":"))
                                   or '"""' in lines[middle] or "'''" in lines[middle]):
        middle += 1
    indent = lines[middle][: len(lines[middle]) - len(lines[middle].lstrip())]
    before = "\n".join(lines[:middle])

    def nth(n: int) -> str:
        typed = f"{indent}_keystroke = {n}\n"
        return f"{before}\n{typed}" + "\n".join(lines[middle:])

    return nth


def quartiles(values: List[float]) -> Tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="a Python file (default: benchmarks/data/training_program.py)")
    parser.add_argument("--generated", action="store_true", help="concatenate the examples and rule fixtures instead")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--select", help="rules to run (default: the configuration's selection)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)

    import libcst as cst

    try:
        from torchlint.server.analysis import Checker, paused_gc
        from torchlint.server.protocol import to_lsp
    except ImportError as exc:
        print(f"server_latency: needs pygls ({exc}): pip install 'pygls>=2'", file=sys.stderr)
        return 2
    from torchlint.server.text import split_lines

    with tempfile.TemporaryDirectory() as tmp:
        if not args.generated:
            path = Path(args.file).resolve() if args.file else ROOT / "benchmarks" / "data" / "training_program.py"
            if not path.is_file():
                print(f"server_latency: {path}: no such file", file=sys.stderr)
                return 2
            text = path.read_text()
            if not args.file:
                # Analysed where a user keeps such a program: under benchmarks/
                # the rules treat a script as measurement code and stay silent
                # on its per-step findings.
                path = Path(tmp) / "train.py"
                path.write_text(text)
        else:
            text = generated(args.lines)
            path = Path(tmp) / "generated.py"
            path.write_text(text)
        config = None
        if args.select:  # the file's own configuration, but for these rules
            config = Path(tmp) / "torchlint.toml"
            config.write_text(f"select = {json.dumps(args.select.split(','))}\n")
        checker = Checker(config)
        uri = path.as_uri()

        def analyse(current: str) -> int:
            doc = checker.file(uri, current)
            placed = checker.placed(doc)
            lines = split_lines(current)
            return sum(len([to_lsp(d, lines) for d in found]) for found in placed.values())

        nth = keystrokes(text)
        count = analyse(nth(0))  # warm: rules imported, configuration read
        before = checker.parser.full_parses
        cst.parse_module(nth(0))
        parse: List[float] = []
        lint: List[float] = []
        for n in range(1, args.rounds + 1):
            current = nth(n)
            order = [("parse", lambda: cst.parse_module(current)), ("analysis", lambda: analyse(current))]
            for name, run in order if n % 2 else reversed(order):
                with paused_gc():  # as the server analyses: the same for both
                    start = time.perf_counter()
                    run()
                    (parse if name == "parse" else lint).append(time.perf_counter() - start)
        full_parses = checker.parser.full_parses - before
        if args.profile:
            import cProfile
            import pstats

            import threading

            # The engine analyses on its large-stack thread; a thread of that name
            # analyses inline, where the profiler sees it.
            main_thread = threading.current_thread()
            name, main_thread.name = main_thread.name, "torchlint-file-profiled"
            profiler = cProfile.Profile()
            try:
                profiler.runcall(analyse, nth(args.rounds + 1))
            finally:
                main_thread.name = name
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)

    line_count = text.count("\n") + 1
    print(f"file      {line_count} lines, {count} diagnostics, {args.rounds} keystrokes "
          f"({args.rounds - full_parses} parsed incrementally)")
    for name, values in (("parse", parse), ("analysis", lint)):
        low, mid, high = quartiles(values)
        print(f"{name:<9} {mid * 1000:7.1f} ms  (quartiles {low * 1000:.1f}-{high * 1000:.1f})")
    print(f"ratio analysis / parse: {statistics.median(lint) / statistics.median(parse):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
