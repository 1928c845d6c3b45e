"""Entry-point mode: ``torchlint verify path/to/module.py::function``."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from torchlint.config import Settings
from torchlint.model import Applicability
from torchlint.source import SourceError, read_source
from torchlint.verify import UsageError
from torchlint.verify.report import speedup_of
from torchlint.verify.runner import run_job

SEED = 0
CASE = "entry"


@dataclass(frozen=True)
class EntryOptions:
    unsafe: bool = False
    each: bool = False
    rtol: Optional[float] = None
    atol: Optional[float] = None
    min_run_time: float = 0.2
    timeout: float = 300.0


@dataclass(frozen=True)
class _Target:
    spec: str
    path: Path
    function: str


@dataclass
class _Fix:
    code: str
    name: str
    line: int
    column: int
    applicability: str
    message: str
    text: Optional[str]  # the module with only this fix applied
    end_line: int = 0  # the last line of what the fix changes, in the original module
    after: List[str] = field(default_factory=list)  # the fixes it needs first, when it has no text
    executed: Optional[bool] = None  # whether calling the function ran its line (None: not known)

    def as_json(self) -> Dict[str, Any]:
        return {
            "code": self.code, "name": self.name, "line": self.line, "column": self.column,
            "applicability": self.applicability, "message": self.message, "executed": self.executed,
        }


# -- the target ---------------------------------------------------------------


def parse_target(spec: str) -> _Target:
    if "::" not in spec:
        raise UsageError(
            f"`{spec}` does not name a function: give `path/to/module.py::function`, "
            "a program `train.py` to run as a whole, or `--rules` to run the rule benchmarks"
        )
    path_text, function = spec.rsplit("::", 1)
    function = function.strip()
    if not path_text:
        raise UsageError(f"`{spec}` names no file before `::`")
    if not function or not all(part.isidentifier() for part in function.split(".")):
        raise UsageError(f"`{function}` in `{spec}` is not a function name")
    path = Path(path_text)
    if not path.exists():
        raise UsageError(f"{path_text}: no such file")
    if path.is_dir():
        raise UsageError(f"{path_text}: is a directory; give a Python file")
    if path.suffix == ".ipynb":
        raise UsageError(f"{path_text}: verify runs Python modules, not notebooks")
    return _Target(spec, path, function)


def _top_level_names(tree: ast.Module) -> Optional[set]:
    """Names bound at module level, or None when that cannot be known (``import *``)."""
    names: set = set()

    def targets(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                names.add(sub.id)

    def block(statements: Sequence[ast.stmt]) -> bool:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in getattr(node, "targets", None) or [node.target]:
                    targets(target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                for target in ([node.target] if isinstance(node, (ast.For, ast.AsyncFor)) else
                               [i.optional_vars for i in node.items if i.optional_vars is not None]):
                    targets(target)
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(node, field, None)
                if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    if not block(inner):
                        return False
            for handler in getattr(node, "handlers", None) or []:
                if handler.name:
                    names.add(handler.name)
                if not block(handler.body):
                    return False
            for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ():
                if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                    names.add(sub.target.id)
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("globals", "exec", "setattr"):
                    return False
        return True

    return names if block(tree.body) else None


def _read_module(target: _Target) -> str:
    try:
        text = read_source(target.path).text
    except SourceError as exc:
        raise UsageError(f"{target.path}: {exc}") from None
    try:
        tree = ast.parse(text, filename=str(target.path))
    except SyntaxError as exc:
        where = f"{target.path}:{exc.lineno or 1}:{exc.offset or 1}"
        raise UsageError(f"{where}: the module has a syntax error: {exc.msg}") from None
    names = _top_level_names(tree)
    head = target.function.split(".")[0]
    if names is not None and head not in names:
        raise UsageError(f"{target.path}: the module defines no `{head}`")
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == head]
    if head == target.function and defs:
        _check_signature(defs[-1], target)
    return text


def _check_signature(node, target: _Target) -> None:
    """The same checks as the subprocess's, before starting it."""
    if isinstance(node, ast.AsyncFunctionDef):
        raise UsageError(f"{target.spec}: `{node.name}` is a coroutine function; verify calls plain functions")
    args = node.args
    positional = args.posonlyargs + args.args
    required = [a.arg for a in positional[: len(positional) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if required:
        raise UsageError(
            f"{target.spec}: `{node.name}` takes arguments ({', '.join(required)}); verify calls a "
            "zero-argument function: wrap the call in one (e.g. `def bench(): return train_step(batch)`)"
        )


def _package_of(path: Path) -> Tuple[List[str], str]:
    """The ``sys.path`` entries the module needs, and its package ('' if none)."""
    directory = path.parent
    parts: List[str] = []
    root = directory
    while (root / "__init__.py").is_file():
        parts.insert(0, root.name)
        root = root.parent
    entries = [str(directory)]
    if parts and str(root) not in entries:
        entries.append(str(root))
    package = ".".join(parts) if all(p.isidentifier() for p in parts) else ""
    return entries, package


# -- the fixes ----------------------------------------------------------------


def _fixes(text: str, display: str, settings: Settings, codes: Sequence[str], unsafe: bool) -> Tuple[str, List[_Fix], List[str], int]:
    """(fixed text, the fixes, the engine's errors, diagnostics left with an unsafe fix).

    The fixes are those ``fix_text`` applied, in its order, each at its line in
    the original module (a later round's fix is mapped back through the
    earlier rounds' edits). Each carries the module with only that fix applied
    (for ``--each`` and for finding which fix changes results) when the fix
    exists on the original text, which includes a fix that only waited a round
    because its edit overlapped another's; a fix that exists only once another
    is in (TL204's `non_blocking=True` after TL202's `pin_memory=True`) has no
    such variant, and ``after`` names the fixes it waited for.
    """
    from torchlint.engine import fix_text, single_fixes

    result = fix_text(text, display, settings, codes, unsafe)
    errors = [f"{d.label} at line {d.line}: {d.message}" for d in result.errors]
    hidden = sum(
        1 for d in result.remaining
        if not unsafe and d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    )
    if result.text == text:
        return text, [], errors, hidden
    singles: Dict[Tuple[Any, ...], List[Tuple[Any, Optional[str]]]] = {}
    for d, single in single_fixes(text, display, settings, codes, unsafe):
        singles.setdefault((d.code, d.line, d.message), []).append((d, single))
    fixes: List[_Fix] = []
    for edit in result.edits:
        d = edit.diagnostic
        line = edit.original_line or d.line
        found = singles.get((d.code, line, d.message), [])
        if edit.round == 0:
            found = [pair for pair in found if pair[0].column == d.column] or found
        single = found.pop(0)[1] if found else None
        fix = _as_fix(d, single, line)
        if single is None and edit.round > 0:
            fix.after = [f"{e.code} (line {e.original_line or e.diagnostic.line})"
                         for e in result.edits if e.round < edit.round]
        fixes.append(fix)
    return result.text, fixes, errors, hidden


def _as_fix(d, single: Optional[str], line: Optional[int] = None) -> _Fix:
    assert d.fix is not None
    first = line or d.line
    return _Fix(d.code or "", d.name or "", first, d.column, d.fix.applicability.value, d.fix.message, single,
                end_line=first + max(0, d.end_line - d.line))


# -- running ------------------------------------------------------------------


def _variant(key: str, label: str, module: str, file: Path, filename: str, source: str) -> Dict[str, Any]:
    return {"key": key, "label": label, "module": module, "file": str(file), "filename": filename, "source": source}


def verify_entry(
    spec: str,
    settings: Settings,
    codes: Sequence[str],
    options: EntryOptions,
    progress: Optional[Callable[[Optional[str], str], None]] = None,
) -> Dict[str, Any]:
    """Verify the fixes of one module by calling ``function`` before and after.

    Returns the report (see ``report.format_entry``); raises ``UsageError``.
    """
    target = parse_target(spec)
    text = _read_module(target)
    display = os.path.normpath(str(target.path))
    fixed_text, fixes, engine_errors, hidden = _fixes(text, display, settings, codes, options.unsafe)
    report: Dict[str, Any] = {
        "target": spec,
        "device": None,
        "device_name": None,
        "torch": None,
        "unsafe_fixes": options.unsafe,
        "fixes": [f.as_json() for f in fixes],
        "before": None,
        "after": None,
        "speedup": None,
        "speedup_range": None,
        "match": None,
        "mismatch": None,
        "error": None,
        "traceback": None,
        "failing_fixes": [],
        "notes": list(engine_errors),
    }
    if options.each:
        report["each"] = []
    if fixed_text == text:
        why = "torchlint has no fix to apply to this module"
        if hidden:
            why += f" ({hidden} diagnostic{'s' if hidden != 1 else ''} with an unsafe fix: add `--unsafe-fixes`)"
        report["notes"].insert(0, why + "; nothing to verify")
        return report

    absolute = target.path.resolve()
    sys_path, package = _package_of(absolute)
    stem = absolute.stem if absolute.stem.isidentifier() else "module"
    prefix = f"{package}." if package else ""
    variants = [
        _variant("original", "original", f"{prefix}__torchlint_original__{stem}", absolute, str(absolute), text),
        _variant("fixed", "fixed", f"{prefix}__torchlint_fixed__{stem}", absolute,
                 f"{absolute} (fixed by torchlint)", fixed_text),
    ]
    singles: List[str] = []
    for i, fix in enumerate(fixes):
        if fix.text is None:
            if options.each:
                needs = ", ".join(fix.after) if fix.after else "another fix"
                report["notes"].append(
                    f"{fix.code} (line {fix.line}) exists only once {needs} "
                    f"{'is' if len(fix.after) <= 1 else 'are'} in (that fix makes it possible): "
                    "it is measured as part of the fixed version, not on its own"
                )
            continue
        if len(fixes) == 1 and fix.text == fixed_text:
            continue
        key = f"fix{i}"
        singles.append(key)
        variants.append(_variant(
            key, f"{fix.code} (line {fix.line}) only", f"{prefix}__torchlint_{key}__{stem}", absolute,
            f"{absolute} (only {fix.code} at line {fix.line})", fix.text,
        ))
    case = {
        "id": CASE,
        "function": target.function,
        "package": package,
        "seed": SEED,
        "rtol": options.rtol,
        "atol": options.atol,
        "variants": variants,
        "original": "original",
        "fixed": "fixed",
        "blame": singles if len(fixes) > 1 else [],
        "each": singles if options.each else [],
        "time": ["original", "fixed"] + (singles if options.each else []),
        "trace": True,  # which fixes' lines the function runs
    }
    outcome = run_job([case], min_run_time=options.min_run_time, timeout=options.timeout,
                      sys_path=sys_path, argv0=str(absolute), progress=progress)
    report.update({k: outcome.info.get(k) for k in ("device", "device_name", "torch")})
    results = outcome.results.get(CASE, {})
    _settle(report, fixes, singles, results, outcome.errors.get(CASE), options)
    return report


def _timing(time: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if not time:
        return None
    return {k: time[k] for k in ("median", "iqr", "runs", "number_per_run") if k in time}


def _settle(report: Dict[str, Any], fixes: List[_Fix], singles: List[str], results: Dict[str, Any],
            runner_error: Optional[Tuple[str, Optional[str]]], options: EntryOptions) -> None:
    results = {k: dict(v) for k, v in results.items()}
    if runner_error is not None:
        message, key = runner_error
        if key is None:  # before any variant ran (starting Python, importing torch)
            report["error"] = message
            return
        variant = results.setdefault(key, {})
        if not variant.get("error"):
            variant.update(error=message, stopped=True)
    original = results.get("original", {})
    fixed = results.get("fixed", {})
    if "lines" in original:
        ran = set(original["lines"])
        for fix, shown in zip(fixes, report["fixes"]):
            fix.executed = any(line in ran for line in range(fix.line, fix.end_line + 1))
            shown["executed"] = fix.executed
        idle = [f"{f.code} (line {f.line})" for f in fixes if not f.executed]
        if idle and len(idle) == len(fixes):
            report["notes"].append(
                "the function ran none of the fixed lines: the fixes cannot change its time, "
                "and any difference measured is noise"
            )
        elif idle:
            report["notes"].append(
                f"not executed by the function: {', '.join(idle)}; the change is due to the other fixes"
            )
    report["before"] = _timing(original.get("time"))
    report["after"] = _timing(fixed.get("time"))
    report["speedup"], report["speedup_range"] = speedup_of(original.get("time"), fixed.get("time"))
    by_key = {f"fix{i}": fix for i, fix in enumerate(fixes)}

    if options.each:
        for key in singles:
            fix = by_key[key]
            result = results.get(key, {})
            speedup, spread = speedup_of(original.get("time"), result.get("time"))
            report["each"].append({
                "code": fix.code, "line": fix.line, "time": _timing(result.get("time")),
                "speedup": speedup, "speedup_range": spread, "match": result.get("match"),
                "mismatch": result.get("mismatch"), "error": result.get("error"),
            })

    usage = next((r["error"] for r in (original, fixed) if r.get("usage")), None)
    if usage:
        report["error"] = usage
        report["usage_error"] = True
        return
    if original.get("error"):
        report["error"] = _error_text("original", original)
        report["traceback"] = original.get("traceback")
        if "match" not in fixed:
            report["error"] += "; nothing to compare against"
            return
    report["match"] = fixed.get("match")
    if fixed.get("error"):
        report["error"] = _error_text("fixed", fixed)
        report["traceback"] = fixed.get("traceback")
        if report["match"] is None:
            report["match"] = False
    report["mismatch"] = fixed.get("mismatch")
    if report["match"] is not False:
        return
    # Which fix is to blame.
    if len(fixes) == 1:
        report["failing_fixes"] = [{"code": fixes[0].code, "line": fixes[0].line}]
        return
    failing = []
    for key in singles:
        result = results.get(key, {})
        if result.get("error") or result.get("match") is False:
            fix = by_key[key]
            failing.append({
                "code": fix.code, "line": fix.line,
                "error": result.get("error"), "mismatch": result.get("mismatch"),
            })
    report["failing_fixes"] = failing
    if not failing and singles and all(results.get(k, {}).get("match") for k in singles):
        report["notes"].append("each fix alone gives the same values: only their combination differs")


def _error_text(which: str, result: Dict[str, Any]) -> str:
    if result.get("stopped"):  # the runner's own words: "timed out after 5 s while ..."
        return result["error"]
    what = "module" if result.get("on_import") else "function"
    return f"the {which} {what} {result['error']}"
