"""The verifier's reports: a readable table (default) or JSON."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable, Dict, List, Optional, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def exit_status(report: Dict[str, Any]) -> int:
    """0: every comparison matched (or nothing to verify); 1: a mismatch, an error, a timeout."""
    if report.get("usage_error"):
        return EXIT_USAGE
    if "rows" in report:
        bad = any(row.get("error") or row.get("match") is not True for row in report["rows"])
        return EXIT_FAILED if bad else EXIT_OK
    if report.get("error") or report.get("match") is False:
        return EXIT_FAILED
    if not report.get("fixes"):
        return EXIT_OK
    return EXIT_OK if report.get("match") is True else EXIT_FAILED


def as_json(report: Dict[str, Any]) -> str:
    clean = {k: v for k, v in report.items() if k != "usage_error"}
    return json.dumps(_finite(clean), indent=2, allow_nan=False, default=str) + "\n"


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# -- numbers ------------------------------------------------------------------


def seconds(value: Optional[float]) -> str:
    """``1.23 ms``: three significant digits in a unit that suits the value."""
    if value is None or not math.isfinite(value):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{_three(value / scale)} {unit}"
    return f"{_three(value / 1e-9)} ns"


def _three(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def timing(time: Optional[Dict[str, Any]]) -> str:
    if not time:
        return "-"
    return f"{seconds(time['median'])} ± {seconds(time['iqr'])}"


def speedup_of(before: Optional[Dict[str, Any]], after: Optional[Dict[str, Any]]) -> tuple:
    """(median speedup, [low, high]) from two timings with quartiles ``p25``/``p75``.

    The range pairs the slow quartile of one with the fast quartile of the
    other: a range that contains 1 means the difference is within the noise.
    """
    if not before or not after or not after.get("median"):
        return None, None
    speedup = before["median"] / after["median"]
    try:
        spread = [before["p25"] / after["p75"], before["p75"] / after["p25"]]
    except (KeyError, TypeError, ZeroDivisionError):
        spread = None
    return speedup, spread


def ratio(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def measurable(spread: Optional[List[float]]) -> bool:
    """Whether a speedup range (see ``speedup_of``) shows a change: False when
    the quartile ranges of before and after overlap, i.e. the range contains 1.
    Without a range nothing says the difference is more than noise."""
    if not spread:
        return False
    low, high = spread
    return not (low <= 1.0 <= high)


def speedup_text(speedup: Optional[float], spread: Optional[List[float]]) -> str:
    """``1.52x (1.40-1.65)`` for a change outside the noise, ``no measurable
    change (0.97-1.04)`` when the quartile ranges overlap, ``-`` without timings."""
    if speedup is None:
        return "-"
    if not spread:
        return f"{ratio(speedup)} (no range)"
    low, high = spread
    if not measurable(spread):
        return f"no measurable change ({low:.2f}-{high:.2f})"
    return f"{ratio(speedup)} ({low:.2f}-{high:.2f})"


def _yes_no(match: Optional[bool]) -> str:
    return {True: "yes", False: "NO", None: "-"}[match]


def _table(rows: List[List[str]]) -> List[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]


def _indent(text: str, prefix: str = "    ") -> List[str]:
    return [prefix + line for line in text.splitlines()]


def fix_lines(fixes: List[Dict[str, Any]], where: Callable[[Dict[str, Any]], str]) -> List[str]:
    """One line per fix of a report (``where`` says where it is), marked when
    the code that holds it never ran."""
    lines = []
    for fix in fixes:
        ran = {True: "", False: " [not executed]", None: ""}[fix.get("executed")]
        lines.append(f"    {where(fix)}: {fix['code']} {fix['name']} ({fix['applicability']}): {fix['message']}{ran}")
    return lines


def _device(report: Dict[str, Any]) -> str:
    if not report.get("device"):
        return "unknown device"
    text = report["device"]
    if report.get("device_name"):
        text += f" ({report['device_name']})"
    if report.get("torch"):
        text += f", torch {report['torch']}"
    return text


# -- entry-point mode ---------------------------------------------------------


def format_entry(report: Dict[str, Any], fmt: str = "table") -> str:
    if fmt == "json":
        return as_json(report)
    out = [f"torchlint verify {report['target']}"]
    fixes = report["fixes"]
    if not fixes:
        out.extend(f"  {note}" for note in report.get("notes") or ["nothing to verify"])
        return "\n".join(out) + "\n"
    out.append(f"  device: {_device(report)}")
    out.append(f"  fixes applied ({len(fixes)}):")
    out.extend(fix_lines(fixes, lambda fix: f"line {fix['line']}"))
    out.append("")

    rows = [["", "median ± iqr", "speedup", "match"]]
    if report.get("before") or report.get("after"):
        rows.append(["original", timing(report.get("before")), "", ""])
        speedup = speedup_text(report.get("speedup"), report.get("speedup_range"))
        rows.append(["fixed", timing(report.get("after")), speedup, _yes_no(report.get("match"))])
        for row in report.get("each") or []:
            rows.append([
                f"{row['code']} (line {row['line']}) only", timing(row.get("time")),
                speedup_text(row.get("speedup"), row.get("speedup_range")),
                "error" if row.get("error") else _yes_no(row.get("match")),
            ])
        out.extend("  " + line for line in _table(rows))
        out.append("")

    out.extend(_verdict(report))
    for note in report.get("notes") or []:
        out.append(f"  note: {note}")
    return "\n".join(out) + "\n"


def _verdict(report: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    match = report.get("match")
    error = report.get("error")
    if match is True and not error:
        speed = ""
        spread = report.get("speedup_range")
        if report.get("speedup") is not None:
            times = f"{seconds(report['before']['median'])} -> {seconds(report['after']['median'])}"
            if measurable(spread):
                speed = f"; speedup {ratio(report['speedup'])} ({times})"
            else:
                speed = f"; no measurable change in time ({times})"
        out.append(f"OK: the fixed function returns the same values{speed}.")
        if report.get("speedup") is not None and not measurable(spread) and spread:
            out.append(
                f"  The difference is within the spread of the measurements ({spread[0]:.2f}x to "
                f"{spread[1]:.2f}x between quartiles); try a longer --min-run-time or a quieter machine."
            )
        return out
    if match is False:
        if report.get("mismatch"):
            out.append("FAILED: the fixed function returns different values:")
            out.extend(_indent(report["mismatch"]))
        if error:
            out.extend(_failed(error))
        out.extend(_blame(report))
    elif error:
        out.extend(_failed(error))
    else:
        out.append("FAILED: the results could not be compared")
    if report.get("traceback"):
        out.append("  traceback:")
        out.extend(_indent(report["traceback"]))
    return out


def _failed(error: str) -> List[str]:
    first, *rest = error.splitlines() or [""]
    return [f"FAILED: {first}"] + _indent("\n".join(rest))


def _blame(report: Dict[str, Any]) -> List[str]:
    failing = report.get("failing_fixes") or []
    if not failing:
        return []
    if len(report["fixes"]) == 1:
        f = failing[0]
        return [f"  caused by the fix {f['code']} at line {f['line']}"]
    out = ["  caused by (each of these fails on its own):"]
    for f in failing:
        what = f.get("error") or (f.get("mismatch") or "").splitlines()[0]
        out.append(f"    {f['code']} at line {f['line']}: {what}")
    return out


# -- rule mode ----------------------------------------------------------------


def format_rules(report: Dict[str, Any], fmt: str = "table") -> str:
    if fmt == "json":
        return as_json(report)
    out = [f"torchlint verify --rules: {_device(report)}", ""]
    rows = [["code", "device", "before", "after", "speedup (quartiles)", "match"]]
    for row in report["rows"]:
        speedup = speedup_text(row.get("speedup"), row.get("speedup_range"))
        rows.append([
            row["code"], row.get("device") or "-", timing(row.get("before")), timing(row.get("after")),
            speedup, "error" if row.get("error") else _yes_no(row.get("match")),
        ])
    out.extend(_table(rows))
    details = []
    for row in report["rows"]:
        if row.get("error"):
            first, *rest = row["error"].splitlines() or [""]
            details.append(f"{row['code']}: FAILED: {first}")
            details.extend(_indent("\n".join(rest)))
        elif row.get("match") is False:
            details.append(f"{row['code']}: FAILED: before and after differ:")
            details.extend(_indent(row.get("mismatch") or ""))
        if row.get("note"):
            details.append(f"{row['code']}: {row['note']}")
    if details:
        out.append("")
        out.extend(details)
    return "\n".join(out) + "\n"


# -- progress -----------------------------------------------------------------


class TerminalProgress:
    """One status line on a terminal, rewritten at each step and cleared at the end."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stderr
        self.shown = False

    def __call__(self, case: Optional[str], step: str) -> None:
        label = f"[{case}] " if case and case != "entry" else ""
        self.stream.write(f"\r\033[Ktorchlint verify: {label}{step}...")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False
