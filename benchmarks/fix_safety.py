"""Prove `torchlint fix` safe on a real library with the library's own tests.

    python benchmarks/fix_safety.py LIBRARY_DIR --package PKG --tests TESTS_DIR
                                    [--unsafe-fixes] [--select CODES] [-- PYTEST_ARGS...]

LIBRARY_DIR is a source checkout of a library with a CPU test suite (for
example pytorch/ignite: `--package ignite --tests tests/ignite`, which needs
`pip install pytest-xdist` for its distributed fixtures). The script:
  1. copies the checkout twice (the original is never touched);
  2. runs `torchlint fix` (safe fixes unless `--unsafe-fixes`) on PKG in the second copy;
  3. finds the test modules for the modules that changed: `TESTS/<dir>/test_<name>.py`
     mirroring `PKG/<dir>/<name>.py`, plus every test module that imports a changed
     module by its dotted name;
  4. runs those tests against each copy (`python -m pytest`, JUnit XML) and compares
     the outcome of every test.
It prints the applied fixes, the tests run and both outcomes, and exits 1 when a
test that passed before the fixes does not pass after them (0 otherwise; 2 when
there was nothing to compare).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Dict, List, Sequence


def _copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))


def _changed_modules(before: Path, after: Path, package: str) -> List[Path]:
    changed = []
    for path in sorted((after / package).rglob("*.py")):
        relative = path.relative_to(after)
        if (before / relative).read_bytes() != path.read_bytes():
            changed.append(relative)
    return changed


def _tests_for(root: Path, tests: str, package: str, modules: Sequence[Path]) -> List[Path]:
    found = set()
    test_root = root / tests
    for module in modules:
        inside = module.relative_to(package)
        mirror = test_root / inside.parent / f"test_{inside.stem}.py"
        if mirror.exists():
            found.add(mirror.relative_to(root))
        dotted = ".".join(module.with_suffix("").parts)
        pattern = re.compile(rf"\b(import|from)\s+{re.escape(dotted)}\b")
        for test in test_root.rglob("test_*.py"):
            if pattern.search(test.read_text(encoding="utf-8", errors="replace")):
                found.add(test.relative_to(root))
    return sorted(found)


def _run_tests(root: Path, tests: Sequence[Path], extra: Sequence[str], label: str) -> Dict[str, str]:
    report = root / f".fix-safety-{label}.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
               *map(str, tests), *extra]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True)
    if not report.exists():
        raise SystemExit(f"pytest produced no report ({label}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    outcomes: Dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped":
                status = "skipped"
        outcomes[name] = status
    print(f"{label}: " + ", ".join(f"{n} {s}" for s, n in sorted(_count(outcomes).items())), flush=True)
    return outcomes


def _count(outcomes: Dict[str, str]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for status in outcomes.values():
        counts[status] = counts.get(status, 0) + 1
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("--package", required=True, help="the package directory inside LIBRARY_DIR")
    parser.add_argument("--tests", required=True, help="the tests directory inside LIBRARY_DIR")
    parser.add_argument("--unsafe-fixes", action="store_true")
    parser.add_argument("--select", default=None)
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    library = args.library.resolve()
    if not (library / args.package).is_dir() or not (library / args.tests).is_dir():
        print(f"{library} has no {args.package}/ or {args.tests}/", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="torchlint-fix-safety-") as tmp:
        before, after = Path(tmp) / "before", Path(tmp) / "after"
        _copy(library, before)
        _copy(library, after)
        command = [sys.executable, "-m", "torchlint", "fix", "--output-format", "concise", args.package]
        if args.unsafe_fixes:
            command.append("--unsafe-fixes")
        if args.select:
            command += ["--select", args.select]
        fixed = subprocess.run(command, cwd=after, capture_output=True, text=True)
        print(fixed.stdout.strip() or "(torchlint fix printed nothing)")
        modules = _changed_modules(before, after, args.package)
        if not modules:
            print("no module changed: nothing to compare")
            return 2
        for module in modules:
            diff = difflib.unified_diff(
                (before / module).read_text().splitlines(True), (after / module).read_text().splitlines(True),
                f"a/{module}", f"b/{module}",
            )
            sys.stdout.writelines(diff)
        tests = _tests_for(after, args.tests, args.package, modules)
        if not tests:
            print("no test module covers the changed modules: nothing to compare")
            return 2
        print("tests: " + " ".join(map(str, tests)), flush=True)
        outcome_before = _run_tests(before, tests, args.pytest_args, "before")
        outcome_after = _run_tests(after, tests, args.pytest_args, "after")

    broken = sorted(n for n, s in outcome_before.items() if s == "passed" and outcome_after.get(n) != "passed")
    repaired = sorted(n for n, s in outcome_after.items() if s == "passed" and outcome_before.get(n) != "passed")
    passed = sum(1 for s in outcome_before.values() if s == "passed")
    print(f"{len(modules)} module(s) fixed; {passed} test(s) passed before the fixes; "
          f"{passed - len(broken)} of them pass after; {len(broken)} broken, {len(repaired)} newly passing")
    for name in broken:
        print(f"  BROKEN: {name}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
