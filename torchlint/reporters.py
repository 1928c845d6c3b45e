"""Output formats: full, concise, grouped, json, github, gitlab, junit, sarif."""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import click

from torchlint import __version__
from torchlint.model import Applicability, Diagnostic, Kind

INFORMATION_URI = "https://pypi.org/project/torchlint/"


def rule_url(code: str, name: Optional[str]) -> str:
    """The rule's documentation: its section of docs/rules.md (see ``docs_url``)."""
    from torchlint.registry import rule_anchor

    return f"{docs_url()}#{rule_anchor(code, name or '')}"


@functools.lru_cache(maxsize=1)
def docs_url() -> str:
    """docs/rules.md where this torchlint came from: in the repository it was
    installed from, at the commit installed (pip's ``direct_url.json``), or in
    the checkout it runs from; else the project page."""
    import json as _json
    from importlib import metadata

    try:
        direct = _json.loads(metadata.distribution("torchlint").read_text("direct_url.json") or "null")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        direct = None
    if isinstance(direct, dict) and isinstance(direct.get("url"), str):
        url = direct["url"].rstrip("/")
        vcs = direct.get("vcs_info") or {}
        ref = vcs.get("commit_id") or vcs.get("requested_revision") or "main"
        if url.startswith("https://github.com/"):
            return f"{url.removesuffix('.git')}/blob/{ref}/docs/rules.md"
        if url.startswith("https://gitlab.com/"):
            return f"{url.removesuffix('.git')}/-/blob/{ref}/docs/rules.md"
        if url.startswith("file://"):  # installed from a clone (`pip install ./torchlint`)
            from urllib.request import url2pathname

            installed_from = Path(url2pathname(url[len("file://"):])) / "docs" / "rules.md"
            if installed_from.is_file():
                return installed_from.as_uri()
    local = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    if local.is_file():
        return local.as_uri()
    return INFORMATION_URI


def _fix_mark(d: Diagnostic) -> str:
    if d.fix is not None and d.fix.applicability is Applicability.SAFE:
        return " [*]"
    return ""


def _header(d: Diagnostic, color: bool) -> str:
    location = f"{d.location}:"
    label = d.label + (":" if d.code is None else "")
    if color:
        location = click.style(location, bold=True)
        label = click.style(label, fg="red", bold=True)
    return f"{location} {label}{_fix_mark(d)} {d.message}"


def format_concise(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    return "".join(_header(d, color) + "\n" for d in diagnostics)


def format_grouped(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    """Ruff's ``grouped``: a heading per file, then ``line:col CODE message`` rows."""
    out: List[str] = []
    current = None
    for d in diagnostics:
        if d.path != current:
            if current is not None:
                out.append("")
            current = d.path
            out.append(click.style(f"{d.path}:", bold=True, underline=True) if color else f"{d.path}:")
        cell = "" if d.cell is None else f"cell {d.cell}:"
        label = click.style(d.label, fg="red", bold=True) if color else d.label
        out.append(f"  {cell}{d.line}:{d.column} {label}{_fix_mark(d)} {d.message}")
    return "\n".join(out) + ("\n\n" if out else "")


def fingerprints(diagnostics: Sequence[Diagnostic], sources: Dict[str, str]) -> List[str]:
    """A fingerprint per diagnostic that survives edits elsewhere in the file (the
    baseline's: code, path, collapsed source line), made unique within the run by
    an occurrence count (code scanning and GitLab need one issue per fingerprint)."""
    from torchlint.baseline import entry_for

    root = Path.cwd()
    seen: Counter = Counter()
    out = []
    for d in diagnostics:
        base = entry_for(d, sources, root).fingerprint if d.code else f"{d.label}:{d.path}:{d.line}"
        seen[base] += 1
        out.append(f"{base}:{seen[base]}")
    return out


def format_full(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    out: List[str] = []
    for d in diagnostics:
        out.append(_header(d, color))
        excerpt = _excerpt(d, sources.get(d.source_key))
        if excerpt:
            out.extend(excerpt)
        if d.runs is not None and d.via:
            out.append(f"  = note: {runs_note(d)}")  # only when a call makes it so
        if d.fix is not None:
            hint = f"help: {d.fix.message}"
            if d.fix.applicability is Applicability.UNSAFE:
                hint += " (unsafe fix: apply with `torchlint fix --unsafe-fixes`)"
            out.append(f"  = {hint}")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def runs_note(d: Diagnostic) -> str:
    """``runs every step: called from engine.py:58`` (rules that report only per-step code)."""
    runs = "runs every step" if d.runs == "per step" else f"runs {d.runs}"
    return f"{runs}: called from {d.via}" if d.via else runs


_EXCERPT_WIDTH = 160


def _window(line: str, offset: int) -> str:
    """``line`` from ``offset``, at most ``_EXCERPT_WIDTH`` characters, with
    "…" where it was cut."""
    if len(line) <= _EXCERPT_WIDTH and not offset:
        return line
    shown = line[offset:offset + _EXCERPT_WIDTH]
    return ("…" if offset else "") + shown + ("…" if offset + _EXCERPT_WIDTH < len(line) else "")


def _excerpt(d: Diagnostic, text: Optional[str]) -> List[str]:
    if text is None:
        return []
    lines = text.splitlines()
    if not 1 <= d.line <= len(lines):
        return []
    first = max(1, d.line - 1)
    last = min(len(lines), d.end_line if d.end_line >= d.line else d.line)
    last = min(last, d.line + 3)
    width = len(str(last))
    pad = " " * width
    rows = [f"{pad} |"]
    # A very long line (generated code, minified data) is shown as a window
    # around the reported column rather than in full.
    offset = max(0, d.column - 1 - _EXCERPT_WIDTH // 2) if len(lines[d.line - 1]) > _EXCERPT_WIDTH else 0
    for number in range(first, last + 1):
        rows.append(f"{number:>{width}} | {_window(lines[number - 1], offset if number == d.line else 0)}")
        if number == d.line:
            line_text = lines[number - 1]
            start = d.column - 1
            end = d.end_column - 1 if d.end_line == d.line else len(line_text)
            end = max(end, start + 1)
            lead = 1 if offset else 0  # the "…" that opens a shifted window
            start, end = start - offset + lead, min(end - offset + lead, _EXCERPT_WIDTH + lead)
            caret = " " * start + "^" * max(1, end - start)
            rows.append(f"{pad} | {caret} {d.label}")
    rows.append(f"{pad} |")
    return rows


def format_json(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool,
                edits: Optional[Dict[tuple, list]] = None) -> str:
    """Ruff's JSON: a list of diagnostics, each with its rule's ``url`` and its fix's
    ``edits`` (given by the caller, see torchlint/fix_edits.py) and ``noqa_row``,
    the line where a ``# noqa`` for it goes."""
    from torchlint.fix_edits import key
    from torchlint.noqa import noqa_rows, rows_needed

    lines: Dict[str, List[int]] = {}
    for d in diagnostics:
        if d.code:
            lines.setdefault(d.source_key, []).append(d.line)
    rows: Dict[str, Dict[int, int]] = {}
    for source_key, found in lines.items():
        text = sources.get(source_key)
        # (tokenizing a file costs more than the rest of a cached run's output)
        rows[source_key] = noqa_rows(text) if text is not None and rows_needed(text, found) else {}
    items = []
    for d in diagnostics:
        items.append(
            {
                "code": d.code,
                "name": d.name,
                "kind": d.kind.value,
                "message": d.message,
                "filename": d.path,
                # In a notebook: the cell (from 1, counting every cell), and rows within it.
                "cell": d.cell,
                "location": {"row": d.line, "column": d.column},
                "end_location": {"row": d.end_line, "column": d.end_column},
                "fix": None
                if d.fix is None
                else {"applicability": d.fix.applicability.value, "message": d.fix.message,
                      "edits": (edits or {}).get(key(d), [])},
                "noqa_row": rows.get(d.source_key, {}).get(d.line, d.line),
                "url": rule_url(d.code, d.name) if d.code else None,
                # For the rules that report only code running every step: how often
                # it runs, and the call that makes it so ("path:line") when inferred.
                "frequency": d.runs,
                "via": d.via,
            }
        )
    return json.dumps(items, indent=2) + "\n"


def _file_region(d: Diagnostic):
    """(line, column, end_line, end_column) in the file's own text: for a notebook
    cell, the same characters in the .ipynb file's JSON."""
    if d.file_location is not None:
        return d.file_location
    return d.line, d.column, d.end_line, d.end_column


def _escape_github(value: str, *, property_: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_:
        value = value.replace(":", "%3A").replace(",", "%2C")
    return value


def format_github(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    out = []
    for d in diagnostics:
        title = f"torchlint ({d.label})"
        line, column, end_line, end_column = _file_region(d)
        props = ",".join(
            [
                f"title={_escape_github(title, property_=True)}",
                f"file={_escape_github(d.path, property_=True)}",
                f"line={line}",
                f"col={column}",
                f"endLine={end_line}",
                f"endColumn={end_column}",
            ]
        )
        message = f"{d.location}: {d.label} {d.message}"
        out.append(f"::error {props}::{_escape_github(message)}\n")
    return "".join(out)


def format_sarif(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    from torchlint.registry import all_rules

    rules = []
    index = {}
    for code, rule in all_rules().items():
        index[code] = len(rules)
        rules.append(
            {
                "id": code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary or rule.name},
                "fullDescription": {"text": rule.documentation()},
                "help": {"text": rule.documentation(), "markdown": rule.documentation()},
                "helpUri": rule_url(code, rule.name),
                "defaultConfiguration": {"enabled": rule.default, "level": "warning"},
                "properties": {"fix": rule.fix.value},
            }
        )
    results = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, sources)):
        line, column, end_line, end_column = _file_region(d)
        message = d.message if d.cell is None else f"cell {d.cell}:{d.line}:{d.column}: {d.message}"
        artifact = {"uri": d.path.replace("\\", "/")}
        if not os.path.isabs(d.path):
            artifact["uriBaseId"] = "%SRCROOT%"
        location = {
            "physicalLocation": {
                "artifactLocation": artifact,
                "region": {
                    "startLine": line,
                    "startColumn": column,
                    "endLine": end_line,
                    "endColumn": end_column,
                },
            }
        }
        result = {
            "ruleId": d.code or d.kind.value,
            "level": "warning" if d.kind is Kind.RULE else "error",
            "message": {"text": message},
            "locations": [location],
        }
        if d.cell is not None:
            # The region is in the notebook's JSON text; the cell position is here too.
            location["logicalLocations"] = [{"name": f"cell {d.cell}", "kind": "module"}]
            result["properties"] = {
                "cell": d.cell,
                "cellLocation": {"row": d.line, "column": d.column},
                "cellEndLocation": {"row": d.end_line, "column": d.end_column},
            }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        # Code scanning tracks an alert across commits by this, not by its line.
        result["partialFingerprints"] = {"torchlintFingerprint/v1": fingerprint}
        if d.runs is not None:
            result.setdefault("properties", {})["frequency"] = d.runs
            if d.via:
                result["properties"]["via"] = d.via
                result["message"]["text"] += f" ({runs_note(d)})"
        results.append(result)
    sarif = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torchlint",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": rules,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                "results": results,
            }
        ],
    }
    return json.dumps(sarif, indent=2) + "\n"


def format_gitlab(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    """GitLab Code Quality: a JSON list of issues, each with a unique fingerprint."""
    items = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, sources)):
        line, _, end_line, _ = _file_region(d)
        where = "" if d.cell is None else f" (cell {d.cell}:{d.line}:{d.column})"
        items.append({
            "description": f"{d.label}: {d.message}{where}",
            "check_name": d.label,
            "fingerprint": fingerprint,
            "severity": "major" if d.kind is Kind.RULE else "blocker",
            "location": {"path": d.path.replace("\\", "/"), "lines": {"begin": line, "end": end_line}},
        })
    return json.dumps(items, indent=2) + "\n"


def format_junit(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], color: bool) -> str:
    """JUnit XML as Ruff writes it: a test suite per file, a failed test case per finding."""
    from xml.sax.saxutils import escape, quoteattr  # here: it imports urllib.request (25 ms a start)

    by_file: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(d.path, []).append(d)
    n = len(diagnostics)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name="torchlint" tests="{n}" failures="{n}" errors="0">']
    for path, found in by_file.items():
        out.append(f'  <testsuite name={quoteattr(path)} tests="{len(found)}" disabled="0" errors="0" '
                   f'failures="{len(found)}" package="org.torchlint">')
        for d in found:
            cell = "" if d.cell is None else f"cell {d.cell}, "
            out.append(f'    <testcase name={quoteattr("org.torchlint." + d.label)} '
                       f'classname={quoteattr(os.path.splitext(path)[0])} line="{d.line}" column="{d.column}">')
            out.append(f'      <failure message={quoteattr(d.message)}>'
                       f'{escape(f"{cell}line {d.line}, col {d.column}, {d.message}")}</failure>')
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    return "\n".join(out) + "\n"


FORMATTERS: Dict[str, Callable[[Sequence[Diagnostic], Dict[str, str], bool], str]] = {
    "full": format_full,
    "concise": format_concise,
    "grouped": format_grouped,
    "json": format_json,
    "github": format_github,
    "gitlab": format_gitlab,
    "junit": format_junit,
    "sarif": format_sarif,
}

TEXT_FORMATS = ("full", "concise", "grouped")


def _applies(d: Diagnostic, unsafe_fixes: bool) -> bool:
    """Whether ``torchlint fix`` (with ``--unsafe-fixes`` when asked) would apply d's fix."""
    return d.fix is not None and d.fix.applies(unsafe_fixes)


def statistics(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False, fmt: str = "full") -> str:
    """One row per code (as Ruff): count, code, fixability, name; a JSON list for ``json``.

    The fix column is ``[*]`` when ``torchlint fix`` would fix every finding of
    the code, ``[-]`` when it would fix some of them, blank otherwise.
    """
    groups: Dict[str, List[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(d.label, []).append(d)
    rows = []
    for label, found in groups.items():
        fixable = sum(1 for d in found if _applies(d, unsafe_fixes))
        rows.append({
            "code": found[0].code, "label": label, "name": found[0].name or "",
            "count": len(found), "fixable": fixable,
        })
    rows.sort(key=lambda row: (-row["count"], row["label"]))
    if fmt == "json":
        listed = [
            {"code": row["code"] or row["label"], "name": row["name"] or None, "count": row["count"],
             "fixable": row["fixable"] == row["count"], "fixable_count": row["fixable"]}
            for row in rows
        ]
        return json.dumps(listed, indent=2) + "\n"
    if not rows:
        return ""
    width = max(len(str(row["count"])) for row in rows)
    code_width = max(len(row["label"]) for row in rows)
    lines = []
    for row in rows:
        mark = "[*]" if row["fixable"] == row["count"] else "[-]" if row["fixable"] else "   "
        lines.append(f"{row['count']:>{width}}\t{row['label']:<{code_width}}\t{mark} {row['name']}".rstrip())
    return "\n".join(lines) + "\n"


def _fixables(diagnostics: Sequence[Diagnostic], unsafe_fixes: Optional[bool]) -> Tuple[int, int]:
    """(fixes ``--fix`` would apply, unsafe fixes it would not), as Ruff counts them."""
    applicable = sum(1 for d in diagnostics if d.fix is not None and d.fix.applies(bool(unsafe_fixes)))
    hidden = sum(1 for d in diagnostics if d.fix is not None and not d.fix.applies(bool(unsafe_fixes))
                 and d.fix.applicability is Applicability.UNSAFE)
    return applicable, hidden


def _es(n: int) -> str:
    return "" if n == 1 else "es"


def summary(diagnostics: Sequence[Diagnostic], unsafe_fixes: Optional[bool], fix_total: Optional[int] = None,
            fixed: int = 0, color: bool = False) -> str:
    """Ruff's summary of ``check`` (and of ``check --fix``, ``fixed`` being the
    fixes applied), word for word as Ruff 0.17 prints it: ``Found N errors.`` and
    what ``--fix`` would do about them. ``unsafe_fixes`` None (not set anywhere)
    hints at the unsafe fixes, as Ruff does.

    ``fix_total`` is how many fixes ``--fix`` would apply in all; more than the
    fixable diagnostics when applying some makes others possible (said on a
    line of its own).
    """
    remaining = len(diagnostics)
    total = remaining + fixed
    if fixed:
        lines = [f"Found {total} error{'s' if total != 1 else ''} ({fixed} fixed, {remaining} remaining)."]
    elif remaining:
        lines = [f"Found {remaining} error{'s' if remaining != 1 else ''}."]
    else:
        lines = ["All checks passed!"]
    applicable, hidden = _fixables(diagnostics, unsafe_fixes)
    star = "[" + (click.style("*", fg="cyan") if color else "*") + "]"
    hint = unsafe_fixes is None and hidden  # Ruff hints only when unsafe-fixes is not set
    unsafe = f"{hidden} unsafe fix{_es(hidden)} available with `--fix --unsafe-fixes`"
    if applicable:
        lines.append(f"{star} {applicable} fixable with `--fix`" + (f" ({unsafe})." if hint else "."))
    elif hint:
        lines.append(f"{unsafe}.")
    more = (fix_total or 0) - applicable
    if applicable and more > 0:
        lines.append(f"{more} more become{'s' if more == 1 else ''} fixable once these are applied.")
    return "\n".join(lines) + "\n"


def fix_summary(fixed: Dict[str, Counter], remaining: Sequence[Diagnostic], unsafe_fixes: Optional[bool],
                diff: bool) -> str:
    """Ruff's line for ``--fix-only`` and ``--diff`` (which show no findings)."""
    n = sum(sum(c.values()) for c in fixed.values())
    _, unapplied = _fixables(remaining, unsafe_fixes)
    s = "" if n == 1 else "s"
    verb = f"Would fix {n} error{s}" if diff else f"Fixed {n} error{s}"
    if unapplied:
        if n:
            return f"{verb} ({unapplied} additional fix{_es(unapplied)} available with `--unsafe-fixes`).\n"
        none = "No errors would be fixed" if diff else "No errors fixed"
        return f"{none} ({unapplied} fix{_es(unapplied)} available with `--unsafe-fixes`).\n"
    return f"{verb}.\n" if n else ""


def fixable_counts(diagnostics: Sequence[Diagnostic], unsafe: Optional[bool]) -> Dict[str, Counter]:
    """Per file, per code: the diagnostics whose fix ``--fix`` would apply."""
    found: Dict[str, Counter] = {}
    for d in diagnostics:
        if d.code and d.fix is not None and d.fix.applies(bool(unsafe)):
            found.setdefault(d.path, Counter())[d.code] += 1
    return found


def fix_list(fixed: Dict[str, Counter], verb: str, color: bool = False) -> str:
    """Ruff's ``--show-fixes`` list: ``Fixed N errors:``, then per file the count
    of each rule (most first)."""
    from torchlint.registry import all_rules

    total = sum(sum(c.values()) for c in fixed.values())
    if not total:
        return ""
    rules = all_rules()
    width = len(str(max(n for c in fixed.values() for n in c.values())))
    label = f"{verb} {total} error{'s' if total != 1 else ''}:"
    lines = ["", click.style(label, fg="green", bold=True) if color else label]
    for display in sorted(fixed):
        lines.append(f"- {click.style(display, bold=True) if color else display}:")
        for code, n in sorted(fixed[display].items(), key=lambda item: (-item[1], item[0])):
            shown = click.style(code, fg="red", bold=True) if color else code
            lines.append(f"    {n:>{width}} × {shown} ({rules[code].name})")
    return "\n".join(lines) + "\n\n"


def check_summary(diagnostics: Sequence[Diagnostic], unsafe_fixes: Optional[bool], fix_total: Optional[int],
                  show_fixes: bool, with_counts: bool = True, color: bool = False) -> str:
    """What ``check`` prints after the findings (text formats): the fixes
    ``--fix`` would apply (``--show-fixes``), then the summary (``with_counts``)."""
    text = fix_list(fixable_counts(diagnostics, unsafe_fixes), "Would fix", color) if show_fixes else ""
    if with_counts:
        text += summary(diagnostics, unsafe_fixes, fix_total, color=color)
    return text


def fix_run_summary(fixed: Dict[str, Counter], shown: Sequence[Diagnostic], left: Sequence[Diagnostic],
                    unsafe_fixes: Optional[bool], mode: str, show_fixes: bool, color: bool = False) -> str:
    """What a fix run prints after the findings: the fixes applied (or, with
    ``--diff``, that would be), then Ruff's summary: the counts of the
    findings ``shown``, or for ``--fix-only`` and ``--diff`` (which show no
    findings) a line on the fixes only, counting the unsafe fixes ``left``."""
    diff = mode == "diff"
    text = fix_list(fixed, "Would fix" if diff else "Fixed", color) if show_fixes else ""
    if mode in ("diff", "fix-only"):
        return text + fix_summary(fixed, left, unsafe_fixes, diff)
    return text + summary(shown, unsafe_fixes, fixed=sum(sum(c.values()) for c in fixed.values()), color=color)
