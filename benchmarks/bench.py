"""Measure torchlint's check throughput against the LibCST parse floor.

    python benchmarks/bench.py PATHS... [--repeat N]

Both measurements run in this process, on the same files, one after the other:
  parse floor  -- read + decode + `libcst.parse_module` of every file that
                  mentions torch (the files torchlint analyses)
  check        -- torchlint's `lint_text` with every default rule on every
                  discovered file (includes the text pre-filter, the walk,
                  positions and suppression handling)
and it prints both and their ratio (the design's budget: at most about 1.5x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import libcst as cst

from torchlint.config import Settings, resolve_selection
from torchlint.discovery import discover
from torchlint.engine import could_concern_torch, lint_text, on_large_stack
from torchlint.registry import all_codes, default_codes
from torchlint.source import SourceError, read_source


def load(paths):
    settings = Settings(root=Path.cwd().resolve())
    files = discover([Path(p) for p in paths], settings).files
    sources = []
    for f in files:
        try:
            sources.append((str(f), read_source(f).text))
        except SourceError:
            pass
    return settings, sources


def parse_floor(sources) -> float:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, text in sources:
            if could_concern_torch(text):
                try:
                    cst.parse_module(text)
                except cst.ParserSyntaxError:
                    pass
    return time.perf_counter() - start


def check(sources, settings, codes) -> tuple:
    start = time.perf_counter()
    found = 0
    for path, text in sources:
        found += len(lint_text(text, path, settings, codes).diagnostics)
    return time.perf_counter() - start, found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    settings, sources = load(args.paths)
    codes = resolve_selection(settings, all_codes(), default_codes())
    lines = sum(text.count("\n") for _, text in sources)
    torch_files = sum(1 for _, t in sources if could_concern_torch(t))
    print(f"{len(sources)} files ({torch_files} mention torch), {lines} lines; rules: {', '.join(codes)}")
    floors, checks = [], []
    found = 0
    for _ in range(args.repeat):
        floors.append(parse_floor(sources))
        # As the command line does: the whole loop on torchlint's worker thread.
        elapsed, found = on_large_stack(check, sources, settings, codes)
        checks.append(elapsed)
    floor, chk = statistics.median(floors), statistics.median(checks)
    print(f"parse floor  {floor:8.3f} s  ({lines / floor:,.0f} lines/s)")
    print(f"check        {chk:8.3f} s  ({lines / chk:,.0f} lines/s, {found} diagnostics)")
    print(f"ratio check / parse floor: {chk / floor:.2f}x (median of {args.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
