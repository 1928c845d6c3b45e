"""The reports of program mode: ``verify SCRIPT`` and ``fix --verify SCRIPT``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from torchlint.verify.report import (
    EXIT_FAILED,
    EXIT_OK,
    _device,
    fix_lines,
    _indent,
    _table,
    _yes_no,
    as_json,
    measurable,
    ratio,
    seconds,
    speedup_text,
    timing,
)

_PROGRAM_JSON_KEYS = (
    "target", "args", "steps", "warmup", "mode", "device", "device_name", "torch", "unsafe_fixes", "fixes",
    "before", "after", "speedup", "speedup_range", "match", "first_mismatch", "mismatch", "error",
    "traceback", "failing_fixes", "each", "notes", "rounds", "runs", "written",
)


def program_exit_status(report: Dict[str, Any]) -> int:
    """0: the fixed program matched (or nothing to verify); 1: a mismatch, an error, a timeout."""
    if report.get("error") or report.get("match") is False:
        return EXIT_FAILED
    return EXIT_OK


def fix_exit_status(report: Dict[str, Any]) -> int:
    """0: the kept fixes were written (or there were none); 1: the verification could not run."""
    return EXIT_FAILED if report.get("error") else EXIT_OK


def memory(value: Optional[int]) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def what_is_timed(report: Dict[str, Any]) -> str:
    mode = report.get("mode")
    steps, warmup = report.get("steps"), report.get("warmup")
    if mode == "training":
        return f"training: a step is a backward() call; {steps} timed after {warmup} warm-up"
    if mode == "inference":
        return (f"inference (no backward()): a step is a call of the top-level nn.Module; "
                f"{steps} timed after {warmup} warm-up")
    if mode == "whole run":
        return "the whole run is timed" + (" (--steps 0)" if not steps else "")
    return "not run"


def rounds_text(report: Dict[str, Any]) -> str:
    runs = ((report.get("before") or {}).get("runs"), (report.get("after") or {}).get("runs"))
    if not all(runs) or runs == (1, 1):
        return ""
    return f" (timings pooled over {runs[0]} runs of the original and {runs[1]} of the fixed, alternated)"


def format_program(report: Dict[str, Any], fmt: str = "table") -> str:
    if fmt == "json":
        return as_json({k: report[k] for k in _PROGRAM_JSON_KEYS if k in report})
    target = " ".join([report["target"], *(["--", *report["args"]] if report.get("args") else [])])
    out = [f"torchlint verify {target}"]
    fixes = report["fixes"]
    if not fixes:
        out.extend(f"  {note}" for note in report.get("notes") or ["nothing to verify"])
        return "\n".join(out) + "\n"
    out.append(f"  device: {_device(report)}; {what_is_timed(report)}{rounds_text(report)}")
    out.append(f"  fixes ({len(fixes)}):")
    out.extend(fix_lines(fixes, lambda fix: f"{fix['path']}:{fix['line']}"))
    out.append("")
    before, after = report.get("before"), report.get("after")
    if before or after:
        rows = [["", "step time (median ± iqr)", "peak memory", "speedup", "match"]]
        rows.append(["original", timing((before or {}).get("step_time")), memory((before or {}).get("peak_memory")), "", ""])
        if after:
            rows.append(["fixed", timing(after.get("step_time")), memory(after.get("peak_memory")),
                         speedup_text(report.get("speedup"), report.get("speedup_range")),
                         "error" if after.get("error") else _yes_no(report.get("match"))])
        for row in report.get("each") or []:
            rows.append([f"only {row['code']} {row['path']}:{row['line']}", timing(row.get("step_time")),
                         memory(row.get("peak_memory")), speedup_text(row.get("speedup"), row.get("speedup_range")),
                         "error" if row.get("error") else _yes_no(row.get("match"))])
        out.extend("  " + line for line in _table(rows))
        kind = (before or {}).get("memory_kind")
        if kind:
            out.append(f"  (memory: {kind})")
        out.append("")
    out.extend(_verdict(report))
    for note in report.get("notes") or []:
        out.append(f"  note: {note}")
    return "\n".join(out) + "\n"


def _verdict(report: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    before = report.get("before") or {}
    recorded = before.get("steps_recorded") or 0
    if report.get("match") is True and not report.get("error"):
        spread = report.get("speedup_range")
        times = ""
        if report.get("speedup") is not None:
            b, a = before["step_time"]["median"], report["after"]["step_time"]["median"]
            times = (f"; speedup {ratio(report['speedup'])} ({seconds(b)} -> {seconds(a)})" if measurable(spread)
                     else f"; no measurable change in time ({seconds(b)} -> {seconds(a)})")
        what = before.get("step_kind") or "output"
        at = f"at all {recorded} steps" if recorded != 1 else "at its one step"
        out.append(f"OK: the fixed program's {what} values match the original's {at}{times}.")
        return out
    if report.get("match") is False and report.get("first_mismatch"):
        out.append(f"FAILED: the results differ from step {report['first_mismatch']}: {report.get('mismatch')}")
    if report.get("error"):
        first, *rest = report["error"].splitlines() or [""]
        out.append(f"FAILED: {first}")
        out.extend(_indent("\n".join(rest)))
    if not out:
        out.append("FAILED: the results could not be compared")
    failing = report.get("failing_fixes") or []
    if failing:
        out.append("  caused by (found by bisection over the executed fixes):")
        for f in failing:
            where = f"changes results at step {f['step']}" if f.get("step") else (f.get("why") or "").splitlines()[0]
            out.append(f"    {f['code']} at {f['path']}:{f['line']}: {where}")
    if report.get("traceback"):
        out.append("  traceback:")
        out.extend(_indent(report["traceback"]))
    return out


def format_fix_verified(report: Dict[str, Any]) -> str:
    target = " ".join([report["target"], *(["--", *report["args"]] if report.get("args") else [])])
    out = [f"torchlint fix --verify {target}"]
    fixes = report["fixes"]
    if not fixes:
        out.extend(f"  {note}" for note in report.get("notes") or [])
        return "\n".join(out) + "\n"
    if report.get("error"):
        first, *rest = report["error"].splitlines() or [""]
        out.append(f"FAILED: {first}")
        out.extend(_indent("\n".join(rest)))
        if report.get("traceback"):
            out.append("  traceback:")
            out.extend(_indent(report["traceback"]))
        out.append("Nothing was written.")
        return "\n".join(out) + "\n"
    out.append(f"  {what_is_timed(report)}")
    rows = [["fix", "where", "applicability", "outcome"]]
    for fix in fixes:
        rows.append([f"{fix['code']} {fix['name']}", f"{fix['path']}:{fix['line']}", fix["applicability"], _outcome(fix)])
    out.extend("  " + line for line in _table(rows))
    kept = sum(1 for f in fixes if f.get("applied"))
    written = report.get("written") or []
    out.append("")
    out.append(f"Applied {kept} of {len(fixes)} fixes" + (f" to {', '.join(written)}." if written else "."))
    for note in report.get("notes") or []:
        out.append(f"  note: {note}")
    return "\n".join(out) + "\n"


def _outcome(fix: Dict[str, Any]) -> str:
    outcome = fix.get("outcome")
    if outcome == "kept":
        return "kept: same results"
    if outcome == "dropped":
        if fix.get("step"):
            return f"dropped: changed results at step {fix['step']}"
        why = (fix.get("why") or "").splitlines()[0] if fix.get("why") else "failed"
        return f"dropped: {why}"
    if outcome == "not executed":
        return "not executed: applied (safe)" if fix.get("applied") else "not executed: not applied (unsafe, untested)"
    return "-"
