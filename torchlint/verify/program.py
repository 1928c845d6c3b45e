"""Program mode: ``torchlint verify train.py --steps N [-- ARGS]`` and ``torchlint fix --verify``.

The parent side (no torch here).  It finds the fixes torchlint would make in
every module of the project, runs the program as written and with fixes, each
run in a fresh ``python _program_child.py`` subprocess from the user's working
directory, compares the recorded steps and attributes a difference to fixes by
bisection.  The fixed modules are served from memory by an import hook
(``_import_hook.py``, installed in every process of the run by
``_bootstrap/sitecustomize.py``); nothing on disk changes, except that
``fix --verify`` writes the fixes it keeps.

Runs of one verification: the original with line tracing (which fixes run,
and the first of two runs that must agree for the comparison to mean
anything), the original timed, the program with every fix; with ``--each``
every executed fix alone; after a mismatch, the bisection's runs.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Tuple

from torchlint.config import Settings
from torchlint.source import SourceError, encode, read_source, write_atomic
from torchlint.verify import UsageError
from torchlint.verify._import_hook import ENV, key
from torchlint.verify.report import speedup_of
from torchlint.verify.runner import STARTUP_TIMEOUT, _keep_tail, _read_lines, _without_noise

CHILD = Path(__file__).with_name("_program_child.py")
BOOTSTRAP = Path(__file__).with_name("_bootstrap")
SEED = 0
EXIT_GRACE = 10.0  # seconds a run may take to exit once it has reported its result

Progress = Optional[Callable[[Optional[str], str], None]]


@dataclass(frozen=True)
class ProgramOptions:
    steps: int = 10
    warmup: int = 1
    each: bool = False
    rtol: Optional[float] = None
    atol: Optional[float] = None
    timeout: float = 300.0
    unsafe: bool = False
    rounds: int = 2  # runs of each version, alternated, whose step times are pooled


@dataclass
class ProjectFile:
    """A module of the project, with the settings ``check`` would use for it."""

    path: Path  # absolute
    display: str
    settings: Settings
    codes: Sequence[str]
    facts: Optional[Dict[str, Any]] = None  # the project index's facts (see cli._project_facts)


@dataclass
class Unit:
    """One fix: the fixes of one rule on one line of one module."""

    index: int
    file: ProjectFile
    code: str
    name: str
    line: int
    end_line: int
    applicability: str
    message: str
    executed: Optional[bool] = None

    @property
    def label(self) -> str:
        return f"{self.code} {self.file.display}:{self.line}"

    def as_json(self) -> Dict[str, Any]:
        return {"code": self.code, "name": self.name, "path": self.file.display, "line": self.line,
                "applicability": self.applicability, "message": self.message, "executed": self.executed}


# -- the project and its fixes ---------------------------------------------------------------


class Project:
    """The fixes of the project's modules, and the modules' texts with any subset of them."""

    def __init__(self, files: Sequence[ProjectFile], unsafe: bool) -> None:
        self.unsafe = unsafe
        self.texts: Dict[Path, str] = {}
        self.units: List[Unit] = []
        self.errors: List[str] = []
        self._fixed: Dict[Path, str] = {}
        self._cache: Dict[Tuple[Path, frozenset], str] = {}
        self._header_lines: Dict[Path, set] = {}
        for file in files:
            self._add(file)

    def _add(self, file: ProjectFile) -> None:
        from torchlint.engine import fix_text

        try:
            text = read_source(file.path).text
        except SourceError:
            return
        self.texts[file.path] = text
        result = fix_text(text, file.display, file.settings, file.codes, self.unsafe, project=file.facts)
        self.errors.extend(f"{file.display}:{d.line}: {d.message}" for d in result.errors)
        if result.text == text:
            return
        self._fixed[file.path] = result.text
        seen: Dict[Tuple[str, int], Unit] = {}
        for edit in result.edits:
            d = edit.diagnostic
            line = edit.original_line or d.line
            if (edit.code, line) in seen or d.fix is None:
                continue
            unit = Unit(len(self.units), file, edit.code, d.name or "", line, line + max(0, d.end_line - d.line),
                        d.fix.applicability.value, d.fix.message)
            seen[(edit.code, line)] = unit
            self.units.append(unit)

    def sources(self, chosen: Iterable[int]) -> Dict[str, str]:
        """{absolute path: text} of the modules that the fixes ``chosen`` (unit indices) change."""
        by_file: Dict[Path, set] = {}
        for index in chosen:
            unit = self.units[index]
            by_file.setdefault(unit.file.path, set()).add((unit.code, unit.line))
        return {str(path): self._text(path, frozenset(keys)) for path, keys in by_file.items()}

    def _text(self, path: Path, keys: frozenset) -> str:
        everything = {(u.code, u.line) for u in self.units if u.file.path == path}
        if keys == everything:
            return self._fixed[path]
        found = self._cache.get((path, keys))
        if found is None:
            from torchlint.engine import fix_text

            file = next(u.file for u in self.units if u.file.path == path)
            found = fix_text(self.texts[path], file.display, file.settings, file.codes, self.unsafe,
                             project=file.facts, select=lambda code, line: (code, line) in keys).text
            self._cache[(path, keys)] = found
        return found

    def run_lines(self, unit: Unit) -> List[int]:
        """The lines whose running shows that ``unit``'s fix runs: its lines, less
        the headers of the functions and classes in it (a ``def`` line runs when
        the module is imported, its body only when the function is called)."""
        lines = set(range(unit.line, unit.end_line + 1))
        body = lines - self._headers(unit.file.path)
        return sorted(body or lines)

    def _headers(self, path: Path) -> set:
        found = self._header_lines.get(path)
        if found is None:
            import ast

            found = set()
            try:
                tree = ast.parse(self.texts[path])
            except (SyntaxError, ValueError):
                tree = None
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                    found.update(range(first, node.body[0].lineno))
            self._header_lines[path] = found
        return found

    def trains(self) -> bool:
        """Whether the program calls ``backward()`` (training) or not (inference)."""
        pattern = re.compile(r"\.backward\s*\(|\bautograd\s*\.\s*backward\b|\bfrom\s+torch\.autograd\s+import\b[^\n]*\bbackward\b")
        return any(pattern.search(text) for text in self.texts.values())


# -- one run ----------------------------------------------------------------------------------


@dataclass
class Run:
    """What one run of the program reported."""

    label: str
    result: Dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None
    traceback: Optional[str] = None
    output_tail: str = ""

    @property
    def values(self) -> List[List[float]]:
        return self.result.get("values") or []

    @property
    def matches(self) -> bool:
        return self.error is None and self.result.get("match") is True


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the run and everything it started (DataLoader workers), even once it has exited."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        elif process.poll() is None:  # pragma: no cover - Windows
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass


class Launcher:
    """Starts the runs of one program."""

    def __init__(self, script: Path, args: Sequence[str], cwd: Path, mode: str, options: ProgramOptions,
                 progress: Progress = None) -> None:
        self.script, self.args, self.cwd, self.mode = script, list(args), cwd, mode
        self.options = options
        self.progress = progress
        self.count = 0

    def run(self, label: str, sources: Dict[str, str], trace: Optional[Dict[str, List[int]]] = None,
            expected: Optional[List[List[float]]] = None) -> Run:
        self.count += 1
        if self.progress is not None:
            self.progress(None, f"run {self.count}: {label}")
        main_source = next((text for path, text in sources.items() if key(path) == key(str(self.script))), None)
        job = {
            "script": str(self.script), "args": self.args, "cwd": str(self.cwd), "seed": SEED,
            "steps": self.options.steps, "warmup": self.options.warmup, "mode": self.mode,
            "trace": trace, "expected": expected, "rtol": self.options.rtol, "atol": self.options.atol,
            "main_source": main_source,
        }
        with tempfile.TemporaryDirectory(prefix="torchlint-verify-") as scratch:
            job_path = os.path.join(scratch, "job.json")
            sources_path = os.path.join(scratch, "sources.json")
            with open(job_path, "w", encoding="utf-8") as f:
                json.dump(job, f)
            with open(sources_path, "w", encoding="utf-8") as f:
                json.dump({"sources": sources}, f)
            return self._start(label, job_path, sources_path)

    def _environment(self, sources_path: str) -> Dict[str, str]:
        env = dict(os.environ)
        env.pop("PYTHONSTARTUP", None)
        env["PYTHONUNBUFFERED"] = "1"
        env[ENV] = sources_path
        env["PYTHONPATH"] = os.pathsep.join([str(BOOTSTRAP)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        return env

    def _start(self, label: str, job_path: str, sources_path: str) -> Run:
        run = Run(label)
        process = subprocess.Popen(
            [sys.executable, str(CHILD), job_path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=str(self.cwd), env=self._environment(sources_path),
            start_new_session=os.name == "posix",
        )
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        tail: Deque[bytes] = collections.deque()
        readers = [threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True),
                   threading.Thread(target=_keep_tail, args=(process.stderr, tail), daemon=True)]
        for reader in readers:
            reader.start()
        steps = 0
        try:
            deadline = time.monotonic() + max(self.options.timeout, STARTUP_TIMEOUT)
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    done = f"; {steps} step{'s' if steps != 1 else ''} recorded" if steps else ""
                    run.error = f"timed out after {self.options.timeout:g} s (--timeout){done}"
                    break
                if line is None:
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("event")
                if kind == "started":
                    deadline = time.monotonic() + self.options.timeout
                elif kind == "step":
                    steps = event.get("n", steps)
                elif kind == "result":
                    run.result = {k: v for k, v in event.items() if k != "event"}
                    break
            if run.result:
                try:
                    process.wait(timeout=EXIT_GRACE)
                except subprocess.TimeoutExpired:
                    pass
        except BaseException:  # Ctrl-C: the run is in its own session and would go on
            _kill_group(process)
            raise
        finally:
            _kill_group(process)
            process.wait()
            for reader in readers:
                reader.join(timeout=5)
        run.output_tail = b"".join(tail).decode("utf-8", "replace")
        if run.result.get("error"):
            run.error = run.result["error"]
            run.traceback = run.result.get("traceback")
        elif not run.result and run.error is None:
            run.error = self._died(process.returncode, run.output_tail)
        return run

    @staticmethod
    def _died(returncode: Optional[int], output: str) -> str:
        if returncode is not None and returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-returncode).name}"
            except ValueError:
                how = f"was killed by signal {-returncode}"
        else:
            how = f"ended (exit status {returncode}) without reporting its steps"
        last = [line for line in _without_noise(output.strip().splitlines()) if line.strip()][-10:]
        detail = ("; the last lines it wrote:\n" + "\n".join(last)) if last else ""
        return f"{how}{detail}"


# -- statistics ---------------------------------------------------------------------------------


def _quantile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_time(times: List[float]) -> Optional[Dict[str, Any]]:
    """median, iqr and the quartiles of ``times``; no quartiles for one sample
    (then no speedup range can be given)."""
    if not times:
        return None
    if len(times) == 1:
        return {"median": times[0], "iqr": 0.0, "samples": 1}
    p25, p75 = _quantile(times, 0.25), _quantile(times, 0.75)
    return {"median": _quantile(times, 0.5), "iqr": p75 - p25, "p25": p25, "p75": p75, "samples": len(times)}


def _side(run: Run) -> Optional[Dict[str, Any]]:
    if not run.result:
        return None
    values = run.values
    return {
        "step_time": step_time(run.result.get("times") or []),
        "peak_memory": run.result.get("peak_memory"),
        "memory_kind": run.result.get("memory_kind"),
        "losses": [v[0] if v else None for v in values],
        "step_kind": run.result.get("step_kind"),
        "steps_recorded": run.result.get("recorded", 0),
        "error": run.error,
    }


def _pooled(runs: List[Run]) -> Optional[Dict[str, Any]]:
    """One side of the report from its runs (alternated with the other side's):
    the step times of every run together, the highest peak memory."""
    sides = [side for side in (_side(run) for run in runs) if side is not None]
    if not sides:
        return None
    pooled = dict(sides[0])
    times = [t for run in runs for t in (run.result.get("times") or [])]
    pooled["step_time"] = step_time(times)
    memories = [side["peak_memory"] for side in sides if side.get("peak_memory") is not None]
    pooled["peak_memory"] = max(memories) if memories else None
    pooled["runs"] = len(sides)
    return pooled


# -- attributing a mismatch -------------------------------------------------------------------


Test = Callable[[List[int]], Tuple[bool, Optional[int], Optional[str]]]


def bisect_culprits(candidates: List[int], test: Test,
                    full: Tuple[bool, Optional[int], Optional[str]]) -> Tuple[List[Tuple[int, Optional[int], Optional[str]]], List[int]]:
    """The fixes among ``candidates`` that change results, by bisection.

    ``test(subset)`` runs the program with the fixes ``subset`` and says
    (matches, first differing step, why); ``full`` is its answer for all of
    ``candidates``.  Repeatedly finds the shortest failing prefix of the fixes
    left (the empty prefix is the original, which matches), whose last fix is a
    culprit, and takes it out, until the rest matches: about log2(n) runs per
    culprit, never every subset.  Returns ([(culprit, step, why)], the fixes kept).
    """
    kept = list(candidates)
    culprits: List[Tuple[int, Optional[int], Optional[str]]] = []
    ok, step, why = full
    while not ok and kept:
        low, high = 0, len(kept)  # prefix `low` matches, prefix `high` does not
        while high - low > 1:
            middle = (low + high) // 2
            ok_middle, step_middle, why_middle = test(kept[:middle])
            if ok_middle:
                low = middle
            else:
                high, step, why = middle, step_middle, why_middle
        culprits.append((kept[high - 1], step, why))
        del kept[high - 1]
        if not kept:
            break
        ok, step, why = test(kept)
    return culprits, kept


# -- verification -----------------------------------------------------------------------------


class Verification:
    """The runs of one program and what they show."""

    def __init__(self, script: Path, args: Sequence[str], files: Sequence[ProjectFile], options: ProgramOptions,
                 progress: Progress = None, cwd: Optional[Path] = None) -> None:
        if not script.is_file():
            raise UsageError(f"{script}: no such file")
        if options.steps < 0 or options.warmup < 0:
            raise UsageError("--steps and --warmup cannot be negative")
        self.script = script.resolve()
        self.args = list(args)
        self.options = options
        self.project = Project(files, options.unsafe)
        self.mode = "training" if self.project.trains() else "inference"
        self.launcher = Launcher(self.script, args, (cwd or Path.cwd()).resolve(), self.mode, options, progress)
        self.reference: Optional[Run] = None  # the timed run of the original
        self.notes: List[str] = list(self.project.errors)
        self.traceback: Optional[str] = None
        self.failed: Optional[Run] = None  # the traced run, when it failed

    @property
    def units(self) -> List[Unit]:
        return self.project.units

    def executed(self) -> List[int]:
        return [u.index for u in self.units if u.executed]

    def test(self, subset: List[int], label: Optional[str] = None) -> Tuple[bool, Optional[int], Optional[str]]:
        assert self.reference is not None
        names = ", ".join(self.units[i].label for i in subset) or "no fix"
        run = self.launcher.run(label or f"with {names}", self.project.sources(subset), expected=self.reference.values)
        if run.error:
            return False, None, f"the program {run.error}"
        return run.matches, run.result.get("first_mismatch"), run.result.get("mismatch")

    def original(self) -> Optional[str]:
        """The traced and the timed run of the program as written; an error, or None."""
        wanted: Dict[str, List[int]] = {}
        for unit in self.units:
            wanted.setdefault(str(unit.file.path), []).extend(self.project.run_lines(unit))
        traced = self.launcher.run("the original, traced", {}, trace=wanted)
        if traced.error:
            self.traceback = traced.traceback
            self.failed = traced
            return f"the program as written {traced.error}"
        hits = {(name, line) for name, lines in (traced.result.get("lines") or {}).items() for line in lines}
        for unit in self.units:
            name = key(str(unit.file.path))
            unit.executed = any((name, line) in hits for line in self.project.run_lines(unit))
        self.reference = self.launcher.run("the original", {}, expected=traced.values)
        if self.reference.error:
            self.traceback = self.reference.traceback
            return f"the program as written {self.reference.error} (on its second run)"
        if self.reference.result.get("match") is False:
            return ("the program as written gives different results on two runs with the same seeds "
                    f"({self.reference.result.get('mismatch')}): it is not deterministic, so no fix can be "
                    "judged by its results; loosen --rtol/--atol or make it deterministic "
                    "(torch.use_deterministic_algorithms, DataLoader worker seeds)")
        if self.options.steps and self.reference.result.get("recorded", 0) <= self.options.warmup:
            what = "backward() calls" if self.mode == "training" else "calls of a top-level nn.Module"
            self.notes.append(
                f"the program made {self.reference.result.get('recorded', 0)} {what}, not more than the "
                f"{self.options.warmup} warm-up step(s): the whole run is timed instead")
        elif self.options.steps and self.reference.result.get("recorded", 0) < self.options.steps + self.options.warmup:
            self.notes.append(f"the program ended after {self.reference.result.get('recorded')} steps, "
                              f"before the {self.options.steps + self.options.warmup} asked for")
        return None

    def fixed(self, subset: List[int], label: str) -> Run:
        assert self.reference is not None
        return self.launcher.run(label, self.project.sources(subset), expected=self.reference.values)


def _base_report(verification: Verification, target: str) -> Dict[str, Any]:
    options = verification.options
    return {
        "target": target, "args": verification.args, "steps": options.steps, "warmup": options.warmup,
        "mode": None, "device": None, "device_name": None, "torch": None, "unsafe_fixes": options.unsafe,
        "fixes": [u.as_json() for u in verification.units], "before": None, "after": None,
        "speedup": None, "speedup_range": None, "match": None, "first_mismatch": None, "mismatch": None,
        "error": None, "traceback": None, "failing_fixes": [], "notes": verification.notes,
        "rounds": options.rounds, "runs": 0,
    }


def verify_program(script: Path, args: Sequence[str], files: Sequence[ProjectFile], options: ProgramOptions,
                   progress: Progress = None) -> Dict[str, Any]:
    """``torchlint verify SCRIPT --steps N [-- ARGS]``: the report (see ``format_program``)."""
    verification = Verification(script, args, files, options, progress)
    report = _base_report(verification, str(script))
    if options.each:
        report["each"] = []
    if not verification.units:
        report["notes"].insert(0, "torchlint has no fix to apply to the project's modules; nothing to verify")
        return report
    error = verification.original()
    reference = verification.reference or verification.failed
    if reference is not None and reference.result:
        report.update({k: reference.result.get(k) for k in ("mode", "device", "device_name", "torch")})
        if reference is verification.reference:
            report["before"] = _side(reference)
    report["fixes"] = [u.as_json() for u in verification.units]
    if error is not None:
        report["error"] = error
        report["traceback"] = verification.traceback
        report["runs"] = verification.launcher.count
        return report
    everything = [u.index for u in verification.units]
    befores, afters = [verification.reference], []
    for round_ in range(1, options.rounds + 1):
        if round_ > 1:
            again = verification.launcher.run(f"the original (round {round_})", {},
                                              expected=verification.reference.values)
            if again.error or again.result.get("match") is False:
                report["error"] = ("the program as written " + (again.error or "gives different results on "
                                   f"another run with the same seeds ({again.result.get('mismatch')})"))
                report["traceback"] = again.traceback
                break
            befores.append(again)
        after = verification.fixed(everything, "with every fix" + (f" (round {round_})" if options.rounds > 1 else ""))
        afters.append(after)
        if after.error or after.result.get("match") is False:
            break
    report["before"] = _pooled(befores)
    report["after"] = _pooled(afters)
    before_time, after_time = report["before"]["step_time"], (report["after"] or {}).get("step_time")
    report["speedup"], report["speedup_range"] = speedup_of(before_time, after_time)
    if report["error"]:
        report["runs"] = verification.launcher.count
        return report
    after = afters[-1]
    if after.error:
        report["error"] = f"with the fixes, the program {after.error}"
        report["traceback"] = after.traceback
        report["match"] = False
    else:
        report["match"] = after.result.get("match")
        report["first_mismatch"] = after.result.get("first_mismatch")
        report["mismatch"] = after.result.get("mismatch")
    executed = verification.executed()
    if not executed:
        report["notes"].append("the program ran none of the fixed lines: any difference measured is noise")
    if options.each and len(executed) > 1:  # (one executed fix alone runs as the fixed program)
        for index in executed:
            unit = verification.units[index]
            run = verification.fixed([index], f"with only {unit.label}")
            side = _side(run) or {}
            speedup, spread = speedup_of(before_time, side.get("step_time"))
            report["each"].append({
                "code": unit.code, "path": unit.file.display, "line": unit.line, "step_time": side.get("step_time"),
                "peak_memory": side.get("peak_memory"), "speedup": speedup, "speedup_range": spread,
                "match": None if run.error else run.result.get("match"),
                "first_mismatch": run.result.get("first_mismatch"), "error": run.error,
            })
    if report["match"] is False:
        report["failing_fixes"] = _blame(verification, executed, (False, report["first_mismatch"], report["mismatch"] or report["error"]))
    report["runs"] = verification.launcher.count
    return report


def _blame(verification: Verification, executed: List[int], full: Tuple[bool, Optional[int], Optional[str]]) -> List[Dict[str, Any]]:
    if len(executed) != len(verification.units):
        full = verification.test(executed, "with the executed fixes")
        if full[0]:
            verification.notes.append(
                "the executed fixes alone give the same results: the difference comes from fixes not seen "
                "running in the program's own process (code run only in DataLoader worker processes?)")
            return []
    culprits, _ = bisect_culprits(executed, verification.test, full)
    out = []
    for index, step, why in culprits:
        unit = verification.units[index]
        out.append({"code": unit.code, "path": unit.file.display, "line": unit.line, "step": step, "why": why})
    return out


# -- fix --verify -------------------------------------------------------------------------------


def fix_verified(script: Path, args: Sequence[str], files: Sequence[ProjectFile], options: ProgramOptions,
                 progress: Progress = None, write: bool = True) -> Dict[str, Any]:
    """``torchlint fix --verify SCRIPT``: keep the fixes that keep results, write them.

    Every unit gets an ``outcome``: ``kept``, ``dropped`` (with the step where
    it changed results, or the error it caused), or ``not executed`` (applied
    when safe, as ``fix`` would; left out when unsafe, since nothing tested it).
    """
    verification = Verification(script, args, files, options, progress)
    report = _base_report(verification, str(script))
    report["written"] = []
    if not verification.units:
        report["notes"].insert(0, "torchlint has no fix to apply to the project's modules")
        return report
    error = verification.original()
    if error is not None:
        report["error"] = error
        report["traceback"] = verification.traceback
        return report
    report["mode"] = verification.reference.result.get("mode") if verification.reference else None
    executed = verification.executed()
    outcomes: Dict[int, Dict[str, Any]] = {}
    if executed:
        full = verification.test(executed, "with every executed fix")
        report["match"] = full[0]
        report["first_mismatch"] = full[1]
        culprits, kept = bisect_culprits(executed, verification.test, full)
        for index, step, why in culprits:
            outcomes[index] = {"outcome": "dropped", "step": step, "why": why}
        for index in kept:
            outcomes[index] = {"outcome": "kept"}
    chosen = [i for i in executed if outcomes[i]["outcome"] == "kept"]
    for unit in verification.units:
        if not unit.executed:
            applied = unit.applicability == "safe"
            outcomes[unit.index] = {"outcome": "not executed", "applied": applied}
            if applied:
                chosen.append(unit.index)
    fixes = []
    for unit in verification.units:
        row = dict(unit.as_json(), **outcomes[unit.index])
        row.setdefault("applied", row["outcome"] == "kept")
        fixes.append(row)
    report["fixes"] = fixes
    report["runs"] = verification.launcher.count
    if write:
        report["written"] = _write(verification.project, sorted(chosen), report["notes"])
    return report


def _write(project: Project, chosen: List[int], notes: List[str]) -> List[str]:
    written = []
    for path_text, text in project.sources(chosen).items():
        path = Path(path_text)
        try:
            source = read_source(path)
            if source.text != project.texts[path]:
                notes.append(f"{path}: changed on disk during the verification; not written")
                continue
            write_atomic(path, encode(source, text))
        except (OSError, SourceError, UnicodeEncodeError) as exc:
            notes.append(f"{path}: cannot write the fixed file: {exc}")
            continue
        written.append(next(u.file.display for u in project.units if u.file.path == path))
    return sorted(written)
