"""One run of a verified program: ``python _program_child.py JOB.json``.

Started by ``torchlint.verify.program`` with ``_bootstrap`` first on
``PYTHONPATH``, so the import hook that serves the fixed modules is already
installed (``_import_hook.py``; also in the processes the program spawns).
Standard library and torch only, like ``_child.py``.

It imports torch, seeds ``random``, torch and NumPy, and runs the script as
``__main__`` with its arguments, from the job's working directory.  The
script's steps are recorded through hooks:

- training (the project calls ``backward()``): ``torch.Tensor.backward`` and
  ``torch.autograd.backward`` record each loss value and the time since the
  previous step ended;
- inference: ``torch.nn.Module.__call__`` records, for each outermost call
  (the model, not its layers), its duration and a checksum of its outputs.

After ``warmup + steps`` steps the hook raises ``_Stop`` (a ``BaseException``,
so the program's ``except Exception`` does not catch it), which ends the
program; ``steps == 0`` lets it run to its end and times the whole run.  With
``expected`` (an earlier run's values) the run compares its own with
``torch.testing.assert_close`` and reports the first step that differs.

Events go to the original standard output, one JSON object per line:
``started`` once torch is imported, ``step`` after each recorded step,
``result`` at the end.  The program's own output goes to standard error.
"""

from __future__ import annotations

import builtins
import gc
import json
import math
import os
import random
import sys
import time
import traceback
import types
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

_THIS_FILE = os.path.abspath(__file__)
_MAX_TRACEBACK_LINES = 30
_MAX_MESSAGE_CHARS = 3000

torch: Any = None


class _Stop(BaseException):
    """Raised by a hook once the run has recorded enough steps."""


class _Events:
    """The event stream on the real standard output (the user's prints go to
    standard error).  The same as ``_child._Events``: this file runs as a
    standalone script and imports nothing from torchlint."""

    def __init__(self) -> None:
        fd = os.dup(1)
        os.dup2(2, 1)
        self._stream = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        sys.stdout = sys.stderr

    def send(self, **event: Any) -> None:
        self._stream.write(json.dumps(event, default=str) + "\n")
        self._stream.flush()


def _key(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


# -- which lines run ------------------------------------------------------------


class _SetTraceLines:
    """The lines of ``wanted`` ({file key: lines}) that run (``sys.settrace``;
    frames of other files are not traced line by line)."""

    def __init__(self, wanted: Dict[str, Set[int]]) -> None:
        self.wanted = wanted
        self.hits: Set[Tuple[str, int]] = set()
        self._files: Dict[str, Optional[str]] = {}

    def _file(self, filename: str) -> Optional[str]:
        found = self._files.get(filename, "")
        if found == "":
            found = self._files[filename] = _key(filename) if _key(filename) in self.wanted else None
        return found

    def _global(self, frame, event, arg):
        name = self._file(frame.f_code.co_filename)
        if name is None:
            return None
        lines = self.wanted[name]

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno in lines:
                self.hits.add((name, frame.f_lineno))
            return local

        if frame.f_lineno in lines:
            self.hits.add((name, frame.f_lineno))
        return local

    def start(self) -> None:
        import threading

        threading.settrace(self._global)
        sys.settrace(self._global)

    def stop(self) -> None:
        import threading

        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]


class _MonitoringLines(_SetTraceLines):
    """The same with ``sys.monitoring`` (Python 3.12+): every code location is
    reported once and then disabled, so the program runs at full speed."""

    def start(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        self.tool = next(i for i in range(1, 6) if monitoring.get_tool(i) is None)
        monitoring.use_tool_id(self.tool, "torchlint verify")

        def line(code, number):
            name = self._file(code.co_filename)
            if name is not None and number in self.wanted[name]:
                self.hits.add((name, number))
            return monitoring.DISABLE

        monitoring.register_callback(self.tool, monitoring.events.LINE, line)
        monitoring.set_events(self.tool, monitoring.events.LINE)

    def stop(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        monitoring.set_events(self.tool, 0)
        monitoring.register_callback(self.tool, monitoring.events.LINE, None)
        monitoring.free_tool_id(self.tool)


def line_tracer(wanted: Dict[str, List[int]]) -> _SetTraceLines:
    sets = {_key(path): set(lines) for path, lines in wanted.items()}
    if sys.version_info >= (3, 12) and hasattr(sys, "monitoring"):
        return _MonitoringLines(sets)
    return _SetTraceLines(sets)


# -- recording steps ------------------------------------------------------------


def _peak_memory() -> Tuple[Optional[int], str]:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.max_memory_allocated()), "CUDA max allocated"
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None, "unknown"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024), "peak RSS"


def _tensors(value: Any, out: List[Any], depth: int = 0) -> None:
    if depth > 4 or len(out) > 64:
        return
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, out, depth + 1)


class Recorder:
    """The hooks and what they record."""

    def __init__(self, mode: str, limit: int, events: _Events) -> None:
        self.mode = mode  # "training" or "inference"
        self.limit = limit  # steps to record before stopping (0: run to the end)
        self.events = events
        self.values: List[List[float]] = []
        self.times: List[float] = []
        self.dtype: Optional[str] = None
        self.inside = False
        self.depth = 0
        self.cuda = False
        self.last = 0.0
        self.started = 0.0
        self.ended = 0.0
        self.stopping = False

    def _now(self) -> float:
        if self.cuda or (torch.cuda.is_available() and torch.cuda.is_initialized()):
            self.cuda = True
            torch.cuda.synchronize()
        return time.perf_counter()

    def start(self) -> None:
        self.started = self.last = time.perf_counter()

    def _step(self, values: List[float], dtype: Any, elapsed: float) -> None:
        self.values.append(values)
        self.times.append(elapsed)
        if self.dtype is None:
            self.dtype = str(dtype).replace("torch.", "")
        self.events.send(event="step", n=len(self.values))
        if self.limit and len(self.values) >= self.limit and not self.stopping:
            self.stopping = True
            raise _Stop()

    def _backward_done(self, tensors: List[Any]) -> None:
        now = self._now()
        elapsed, self.last = now - self.last, now
        floats = [t.detach() for t in tensors if isinstance(t, torch.Tensor)]
        value = sum(float(t.double().sum()) for t in floats)
        self._step([value], floats[0].dtype if floats else torch.float32, elapsed)

    def install(self) -> None:
        if self.mode == "training":
            self._install_backward()
        else:
            self._install_call()

    def _install_backward(self) -> None:
        tensor_backward = torch.Tensor.backward
        autograd_backward = torch.autograd.backward
        recorder = self

        def backward(self, *args, **kwargs):
            if recorder.inside or recorder.stopping:
                return tensor_backward(self, *args, **kwargs)
            recorder.inside = True
            try:
                result = tensor_backward(self, *args, **kwargs)
            finally:
                recorder.inside = False
            recorder._backward_done([self])
            return result

        def autograd(tensors, *args, **kwargs):
            if recorder.inside or recorder.stopping:
                return autograd_backward(tensors, *args, **kwargs)
            recorder.inside = True
            try:
                result = autograd_backward(tensors, *args, **kwargs)
            finally:
                recorder.inside = False
            recorder._backward_done(list(tensors) if isinstance(tensors, (list, tuple)) else [tensors])
            return result

        torch.Tensor.backward = backward
        torch.autograd.backward = autograd

    def _install_call(self) -> None:
        call = torch.nn.Module.__call__
        recorder = self

        def outermost_call(self, *args, **kwargs):
            if recorder.depth or recorder.stopping:
                return call(self, *args, **kwargs)
            begin = recorder._now()
            recorder.depth += 1
            try:
                output = call(self, *args, **kwargs)
            finally:
                recorder.depth -= 1
            end = recorder._now()
            found: List[Any] = []
            _tensors(output, found)
            checksum: List[float] = []
            dtype = None
            for t in found:
                t = t.detach()
                if t.is_complex():
                    t = torch.view_as_real(t)
                if t.is_floating_point() and dtype is None:
                    dtype = t.dtype
                checksum += [float(t.double().sum()), float(t.double().abs().sum())]
            recorder._step(checksum, dtype or torch.float32, end - begin)
            return output

        torch.nn.Module.__call__ = outermost_call

    def finish(self) -> None:
        self.ended = self._now()


# -- comparing with an earlier run ----------------------------------------------------------


def compare(values: List[List[float]], expected: List[List[float]], dtype: str,
            rtol: Optional[float], atol: Optional[float]) -> Tuple[bool, Optional[int], Optional[str]]:
    """(match, the first step that differs (1-based) or None, what differs)."""
    kind = getattr(torch, dtype or "float32", torch.float32)
    if not isinstance(kind, torch.dtype) or not kind.is_floating_point:
        kind = torch.float64
    for i, (got, want) in enumerate(zip(values, expected)):
        if len(got) != len(want):
            return False, i + 1, f"{len(want)} values before, {len(got)} after"
        try:
            torch.testing.assert_close(
                torch.tensor(got, dtype=torch.float64).to(kind), torch.tensor(want, dtype=torch.float64).to(kind),
                rtol=rtol, atol=atol, equal_nan=True,
            )
        except AssertionError as exc:
            detail = str(exc).strip().splitlines()
            return False, i + 1, f"{_short(want)} before, {_short(got)} after" + (
                f" ({detail[0]})" if detail else "")
    if len(values) != len(expected):
        step = min(len(values), len(expected)) + 1
        return False, step, f"this run recorded {len(values)} steps, the other {len(expected)}"
    return True, None, None


def _short(values: List[float]) -> str:
    shown = ", ".join(f"{v:.8g}" for v in values[:4]) + (", ..." if len(values) > 4 else "")
    return shown if len(values) == 1 else f"[{shown}]"


# -- running the script -----------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text[:_MAX_MESSAGE_CHARS]


def _user_traceback(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) != _THIS_FILE]
    lines = ["Traceback (most recent call last):\n"]
    lines.extend(traceback.format_list(frames))
    lines.extend(traceback.format_exception_only(type(exc), exc))
    text = "".join(lines).rstrip("\n").splitlines()
    if len(text) > _MAX_TRACEBACK_LINES:
        text = text[:3] + ["  ..."] + text[-(_MAX_TRACEBACK_LINES - 4):]
    return "\n".join(text)[:_MAX_MESSAGE_CHARS]


def _seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
    except Exception:  # noqa: BLE001 - NumPy is optional
        return
    numpy.random.seed(seed)


def run_script(script: str, text: str, args: List[str]) -> Dict[str, Any]:
    """Run ``text`` as the ``__main__`` module of ``script``; what happened."""
    module = types.ModuleType("__main__")
    module.__dict__.update(__file__=script, __builtins__=builtins, __spec__=None, __loader__=None,
                           __package__=None, __cached__=None)
    sys.modules["__main__"] = module
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(script)
    try:
        code = compile(text, script, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return {"error": f"has a syntax error: {_describe(exc)}"}
    try:
        exec(code, module.__dict__)
    except _Stop as exc:
        exc.__traceback__ = None
        return {"stopped": True}
    except SystemExit as exc:
        if exc.code in (None, 0):
            return {}
        return {"error": f"exited with status {exc.code}", "exit_status": exc.code}
    except BaseException as exc:  # noqa: BLE001 - the program's error is the result
        return {"error": f"raised {_describe(exc)}", "traceback": _user_traceback(exc)}
    return {}


def main(job_path: str) -> int:
    events = _Events()
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    os.chdir(job["cwd"])
    global torch
    import torch as torch_module

    torch = torch_module
    events.send(event="started", torch=torch.__version__)
    script = job["script"]
    text = job.get("main_source")
    if text is None:
        with open(script, encoding="utf-8") as f:
            text = f.read()
    steps, warmup = job["steps"], job["warmup"]
    recorder = Recorder(job["mode"], warmup + steps if steps else 0, events)
    recorder.install()
    tracer = line_tracer(job["trace"]) if job.get("trace") else None
    _seed(job["seed"])
    recorder.start()
    if tracer is not None:
        tracer.start()
    try:
        outcome = run_script(script, text, job["args"])
    finally:
        if tracer is not None:
            tracer.stop()
    recorder.finish()
    gc.collect()  # the stopped program's DataLoader iterators shut their workers down
    result: Dict[str, Any] = dict(outcome)
    result.update(_measurements(recorder, steps, warmup))
    if tracer is not None:
        lines: Dict[str, List[int]] = {}
        for name, number in tracer.hits:
            lines.setdefault(name, []).append(number)
        result["lines"] = lines
    expected = job.get("expected")
    if expected is not None and not result.get("error"):
        match, step, detail = compare(recorder.values, expected, recorder.dtype or "float32", job.get("rtol"), job.get("atol"))
        result.update(match=match, first_mismatch=step, mismatch=detail)
    events.send(event="result", **result)
    return 0


def _measurements(recorder: Recorder, steps: int, warmup: int) -> Dict[str, Any]:
    memory, memory_kind = _peak_memory()
    recorded = len(recorder.values)
    if steps and recorded > warmup:
        timed = recorder.times[warmup:]
        mode = recorder.mode
    else:
        timed = [recorder.ended - recorder.started]
        mode = "whole run"
    device = "cuda" if recorder.cuda else "cpu"
    name = torch.cuda.get_device_name() if recorder.cuda else None
    return {
        "mode": mode, "step_kind": "loss" if recorder.mode == "training" else "output", "recorded": recorded, "values": recorder.values, "dtype": recorder.dtype,
        "times": [t for t in timed if math.isfinite(t)], "peak_memory": memory, "memory_kind": memory_kind,
        "device": device, "device_name": name, "torch": torch.__version__,
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
