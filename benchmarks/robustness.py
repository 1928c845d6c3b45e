"""Run `check` and `fix --unsafe-fixes` over real projects and prove the fixes safe.

    python benchmarks/robustness.py PROJECT_DIR... [--select ALL]

For each project (a directory; it is copied to a temporary directory first,
the original is never touched):
  1. `torchlint check --output-format json` : findings per rule, internal errors;
  2. every `.py` file is compiled (`compile()`), and notebooks' JSON loaded;
  3. `torchlint fix --unsafe-fixes` on the copy;
  4. every file that compiled before must compile after (notebooks must stay
     valid JSON), and the run must report no internal error;
  5. a second `fix --unsafe-fixes` must change nothing (idempotence).
It prints one row per project (files, lines, findings, fixes, time, problems)
and the findings per rule, and exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def _torchlint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torchlint", *args], cwd=cwd, capture_output=True, text=True
    )


def _compiles(path: Path) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, UnicodeDecodeError, OverflowError, MemoryError, RecursionError):
        return False
    return True


def _valid_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _snapshot(root: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in (".py", ".ipynb")}


def check_project(project: Path, select: str, work: Path) -> dict:
    copy = work / project.name
    shutil.copytree(project, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    files = [p for p in copy.rglob("*") if p.is_file() and p.suffix in (".py", ".ipynb")]
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    problems = []

    start = time.perf_counter()
    checked = _torchlint("check", "--select", select, "--output-format", "json", "--exit-zero", ".", cwd=copy)
    check_time = time.perf_counter() - start
    if checked.returncode not in (0, 1, 2) or "Traceback" in checked.stderr:
        problems.append(f"check crashed: {checked.stderr[-400:]}")
    findings = json.loads(checked.stdout or "[]")
    per_rule = collections.Counter(f["code"] for f in findings if f.get("code"))
    internal = [f for f in findings if f.get("kind") == "internal-error"]
    problems += [f"internal error: {f['filename']}:{f['location']['row']}: {f['message']}" for f in internal]

    compiled_before = {p for p in files if p.suffix == ".py" and _compiles(p)}
    json_before = {p for p in files if p.suffix == ".ipynb" and _valid_json(p)}
    before = _snapshot(copy)

    start = time.perf_counter()
    fixed = _torchlint("fix", "--select", select, "--unsafe-fixes", "--output-format", "json", ".", cwd=copy)
    fix_time = time.perf_counter() - start
    if "Traceback" in fixed.stderr:
        problems.append(f"fix crashed: {fixed.stderr[-400:]}")
    after = _snapshot(copy)
    changed = [p for p in after if before.get(p) != after[p]]
    for path in compiled_before:
        if not _compiles(path):
            problems.append(f"no longer compiles after fix: {path.relative_to(copy)}")
    for path in json_before:
        if not _valid_json(path):
            problems.append(f"no longer valid JSON after fix: {path.relative_to(copy)}")
    remaining = json.loads(fixed.stdout or "[]")
    problems += [
        f"fix reported: {f['filename']}:{f['location']['row']}: {f['message']}"
        for f in remaining if f.get("kind") == "internal-error"
    ]

    again = _torchlint("fix", "--select", select, "--unsafe-fixes", ".", cwd=copy)
    if _snapshot(copy) != after:
        problems.append("a second fix changed files: " + ", ".join(
            str(p.relative_to(copy)) for p, data in _snapshot(copy).items() if after.get(p) != data
        ))
    if "Traceback" in again.stderr:
        problems.append(f"second fix crashed: {again.stderr[-400:]}")
    shutil.rmtree(copy, ignore_errors=True)
    return {
        "project": project.name, "files": len(files), "lines": lines, "findings": len(findings) - len(internal),
        "per_rule": per_rule, "changed_files": len(changed), "check_s": check_time, "fix_s": fix_time,
        "problems": problems,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="+", type=Path)
    parser.add_argument("--select", default="ALL")
    args = parser.parse_args(argv)
    totals = collections.Counter()
    per_rule = collections.Counter()
    failed = False
    print(f"{'project':44} {'files':>6} {'lines':>9} {'findings':>8} {'fixed files':>11} {'check s':>8} {'fix s':>7}  problems")
    with tempfile.TemporaryDirectory(prefix="torchlint-robustness-") as tmp:
        for project in args.projects:
            row = check_project(project.resolve(), args.select, Path(tmp))
            per_rule.update(row["per_rule"])
            for key in ("files", "lines", "findings", "changed_files", "check_s", "fix_s"):
                totals[key] += row[key]
            print(
                f"{row['project'][:44]:44} {row['files']:>6} {row['lines']:>9,} {row['findings']:>8} "
                f"{row['changed_files']:>11} {row['check_s']:>8.1f} {row['fix_s']:>7.1f}  {len(row['problems'])}",
                flush=True,
            )
            for problem in row["problems"]:
                failed = True
                print(f"    {problem}")
    print(
        f"{'total':44} {totals['files']:>6} {totals['lines']:>9,} {totals['findings']:>8} "
        f"{totals['changed_files']:>11} {totals['check_s']:>8.1f} {totals['fix_s']:>7.1f}"
    )
    print("findings per rule: " + ", ".join(f"{code} {n}" for code, n in sorted(per_rule.items())))
    print("FAILED" if failed else "all checks passed: no internal error, fixed files compile, a second fix is a no-op")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
