"""Running verification cases in a fresh ``python`` subprocess, with a timeout.

The parent never imports torch.  It writes the job as JSON, starts
``sys.executable _child.py JOB``, and reads the child's events (one JSON object
per line on its standard output).  Every step the child starts (importing a
module, one call, one timing) must end within the timeout (importing torch
first gets at least ``STARTUP_TIMEOUT``);
otherwise the child's whole process group is killed and the case that was
running is reported as timed out.  The remaining cases run in a new child.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

CHILD = Path(__file__).with_name("_child.py")
_STDERR_TAIL_BYTES = 16 * 1024
STARTUP_TIMEOUT = 120.0  # seconds for Python to start and import torch


@dataclass
class Outcome:
    """What the child reported, case by case."""

    info: Dict[str, Any] = field(default_factory=dict)
    # case id -> variant key -> what the child said about it (partial if it stopped)
    results: Dict[str, Dict[str, Dict[str, Any]]] = field(default_factory=dict)
    # case id -> (why the child stopped during the case, the variant it was running or None)
    errors: Dict[str, Tuple[str, Optional[str]]] = field(default_factory=dict)
    stderr_tail: str = ""


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g} s"


def run_job(
    cases: List[Dict[str, Any]],
    *,
    min_run_time: float,
    timeout: float,
    cwd: Optional[Path] = None,
    sys_path: Optional[List[str]] = None,
    argv0: Optional[str] = None,
    progress: Optional[Callable[[Optional[str], str], None]] = None,
) -> Outcome:
    """Run ``cases``; a case whose step times out or whose child dies gets an error."""
    outcome = Outcome()
    remaining = list(cases)
    while remaining:
        job = {"min_run_time": min_run_time, "sys_path": sys_path or [], "argv0": argv0}
        done_ids = _run_child(remaining, job, timeout, cwd, progress, outcome)
        if not done_ids:  # pragma: no cover - defensive: never loop forever
            for case in remaining:
                outcome.errors.setdefault(case["id"], ("the verification process gave no result", None))
            break
        remaining = [c for c in remaining if c["id"] not in done_ids]
    return outcome


def _run_child(cases, job, timeout, cwd, progress, outcome: Outcome) -> set:
    """One child for ``cases``; returns the ids of the cases it settled."""
    job = dict(job, cases=cases)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="torchlint-verify-", delete=False, encoding="utf-8") as f:
        json.dump(job, f)
        job_path = f.name
    settled: set = set()
    try:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.pop("PYTHONSTARTUP", None)
        process = subprocess.Popen(
            [sys.executable, str(CHILD), job_path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(cwd) if cwd else None,
            env=env,
            start_new_session=os.name == "posix",
        )
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        tail: Deque[bytes] = collections.deque()
        readers = [
            threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True),
            threading.Thread(target=_keep_tail, args=(process.stderr, tail), daemon=True),
        ]
        for reader in readers:
            reader.start()
        current_case: Optional[str] = None  # None: before the first case (Python, torch)
        current_key: Optional[str] = None
        current_step = "starting Python"
        finished = timed_out = started = False
        try:
            while True:
                # Starting Python and importing torch is not the user's code:
                # it gets at least STARTUP_TIMEOUT, whatever --timeout says.
                wait = timeout if started else max(timeout, STARTUP_TIMEOUT)
                try:
                    line = lines.get(timeout=wait)
                except queue.Empty:
                    _kill(process)
                    timed_out = True
                    why = f"timed out after {_format_seconds(wait)} while {current_step}"
                    unsettled = [c["id"] for c in cases if c["id"] not in settled]
                    if current_case is None:
                        blamed = unsettled
                    else:
                        blamed = [current_case] if current_case in unsettled else unsettled[:1]
                    for case_id in blamed:
                        outcome.errors[case_id] = (why, current_key if case_id == current_case else None)
                        settled.add(case_id)
                    break
                if line is None:
                    break
                try:
                    event = json.loads(line.decode("utf-8", "replace"))
                except ValueError:
                    continue
                kind = event.get("event")
                if kind == "step":
                    current_case = event.get("case")
                    current_key = event.get("key")
                    current_step = event.get("what", "running")
                    if progress is not None:
                        progress(event.get("case"), current_step)
                elif kind == "info":
                    outcome.info = {k: v for k, v in event.items() if k != "event"}
                    started = True
                elif kind == "result":
                    outcome.results.setdefault(event["case"], {})[event["key"]] = event["result"]
                elif kind == "case":
                    outcome.results[event["case"]] = event["results"]
                    settled.add(event["case"])
                    current_key = None
                    current_step = "between cases"
                elif kind == "done":
                    finished = True
        except BaseException:  # Ctrl-C: the child is in its own session and would go on
            _kill(process)
            raise
        finally:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill(process)
                process.wait()
            for reader in readers:
                reader.join(timeout=5)
        outcome.stderr_tail = b"".join(tail).decode("utf-8", "replace")
        unsettled = [c["id"] for c in cases if c["id"] not in settled]
        if not finished and not timed_out and unsettled:
            # The child died (a crash, an exit in the user's code, torch
            # failing to import): blame the case that was running.
            why = _died(process.returncode, current_step, outcome.stderr_tail)
            blamed = unsettled if current_case is None else [current_case if current_case in unsettled else unsettled[0]]
            for case_id in blamed:
                outcome.errors[case_id] = (why, current_key if case_id == current_case else None)
                settled.add(case_id)
    finally:
        try:
            os.unlink(job_path)
        except OSError:
            pass
    return settled


def _died(returncode: Optional[int], step: str, stderr_tail: str) -> str:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        how = f"was killed by {name}"
    else:
        how = f"exited with status {returncode}"
    last = [line for line in _without_noise(stderr_tail.strip().splitlines()) if line.strip()][-15:]
    detail = ("; the last lines it wrote to standard error:\n" + "\n".join(last)) if last else ""
    return f"the verification process {how} while {step}{detail}"


# Warnings the environment makes, not the user's code: torch without NumPy warns
# "Failed to initialize NumPy" (with the source line that triggered it) on import.
_NOISE = ("Failed to initialize NumPy",)


def _without_noise(lines: List[str]) -> List[str]:
    out: List[str] = []
    skip_next = False
    for line in lines:
        if skip_next and line.startswith("  "):
            skip_next = False  # the source line Python's warning printer adds
            continue
        skip_next = False
        if any(noise in line for noise in _NOISE):
            skip_next = True
            continue
        out.append(line)
    return out


def _read_lines(stream, lines: "queue.Queue[Optional[bytes]]") -> None:
    try:
        for line in iter(stream.readline, b""):
            lines.put(line)
    finally:
        lines.put(None)


def _keep_tail(stream, tail: Deque[bytes]) -> None:
    size = 0
    for chunk in iter(lambda: stream.read1(8192) if hasattr(stream, "read1") else stream.read(8192), b""):
        tail.append(chunk)
        size += len(chunk)
        while size > _STDERR_TAIL_BYTES and len(tail) > 1:
            size -= len(tail.popleft())


def _kill(process: subprocess.Popen) -> None:
    """Kill the child and everything it started (DataLoader workers, ...)."""
    if process.poll() is not None:
        return
    try:
        if os.name == "posix":
            os.killpg(process.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass
