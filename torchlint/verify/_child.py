"""The verifier's worker: runs in a fresh ``python`` subprocess, imports torch.

Started by ``torchlint.verify.runner`` as ``python _child.py JOB.json``.  It
depends on the standard library and torch only (not on torchlint, which need
not be importable from the child's ``sys.path``).

For each case of the job it loads the variants of a module (the original, the
fixed one, each fix alone) from source strings under distinct module names,
calls the zero-argument function of each with the same seeds, compares the
results with ``torch.testing.assert_close`` and times them with
``torch.utils.benchmark.Timer.blocked_autorange``.

It talks to the parent through the original standard output, one JSON object
per line: ``step`` before each step (so the parent's per-step timeout knows
what is running), ``info`` once, ``case`` with each case's results, ``done``.
Whatever the user's code prints goes to standard error.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import linecache
import math
import os
import random
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional

_THIS_FILE = os.path.abspath(__file__)
_MAX_TRACEBACK_LINES = 40
_MAX_MESSAGE_CHARS = 4000

torch: Any = None  # imported in main(), after the first `step` event


class _Events:
    def __init__(self) -> None:
        # Keep the real standard output for the events, and send fd 1 (and
        # sys.stdout) to standard error, so the user's prints cannot corrupt
        # the stream.
        fd = os.dup(1)
        os.dup2(2, 1)
        self._stream = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        sys.stdout = sys.stderr

    def send(self, **event: Any) -> None:
        self._stream.write(json.dumps(event, default=str) + "\n")
        self._stream.flush()


class UsageProblem(Exception):
    """The target cannot be verified as given (reported as a usage error)."""


# -- errors -------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return _clip(text)


def _clip(text: str) -> str:
    if len(text) > _MAX_MESSAGE_CHARS:
        return text[: _MAX_MESSAGE_CHARS - 20] + "\n... (truncated)"
    return text


def _user_traceback(exc: BaseException) -> str:
    """The traceback without this file's own frames."""
    summary = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in summary if os.path.abspath(f.filename) != _THIS_FILE]
    lines = ["Traceback (most recent call last):\n"]
    lines.extend(traceback.format_list(frames))
    lines.extend(traceback.format_exception_only(type(exc), exc))
    text = "".join(lines).rstrip("\n").splitlines()
    if len(text) > _MAX_TRACEBACK_LINES:
        text = text[:4] + ["  ..."] + text[-(_MAX_TRACEBACK_LINES - 5):]
    return _clip("\n".join(text))


# -- seeds and global torch state ---------------------------------------------


def _seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy
    except Exception:  # noqa: BLE001 - NumPy is optional
        return
    numpy.random.seed(seed)


def _state_accessors() -> List[tuple]:
    """(name, get, set) for process-wide torch settings a module may change.

    Each variant gets its own copy: what the original module switches on at
    import (anomaly detection, deterministic algorithms, ...) must not leak
    into the measurement of the fixed one.
    """
    cudnn = torch.backends.cudnn
    out = [
        ("grad", torch.is_grad_enabled, torch.set_grad_enabled),
        (
            "anomaly",
            lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
            lambda v: torch.autograd.set_detect_anomaly(v[0], check_nan=v[1]),
        ),
        (
            "deterministic",
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        ("cudnn.benchmark", lambda: cudnn.benchmark, lambda v: setattr(cudnn, "benchmark", v)),
        ("cudnn.deterministic", lambda: cudnn.deterministic, lambda v: setattr(cudnn, "deterministic", v)),
        ("matmul_precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        ("default_dtype", torch.get_default_dtype, torch.set_default_dtype),
    ]
    if hasattr(torch, "get_default_device"):
        out.append(("default_device", torch.get_default_device, torch.set_default_device))
    return out


class _GlobalState:
    def __init__(self) -> None:
        self._accessors = _state_accessors()

    def capture(self) -> Dict[str, Any]:
        values = {}
        for name, get, _ in self._accessors:
            try:
                values[name] = get()
            except Exception:  # noqa: BLE001 - a setting this torch does not have
                pass
        return values

    def restore(self, values: Dict[str, Any]) -> None:
        for name, get, put in self._accessors:
            if name not in values:
                continue
            try:
                if get() != values[name]:
                    put(values[name])
            except Exception:  # noqa: BLE001
                pass


# -- which lines a call runs ------------------------------------------------------


class _LineTrace:
    """Records the lines of one file that run while the block runs (``sys.settrace``;
    frames of other files are not traced line by line, so the cost stays small)."""

    def __init__(self, filename: str, lines: set) -> None:
        self.filename = filename
        self.lines = lines
        self.previous: Any = None

    def _global(self, frame, event, arg):
        if frame.f_code.co_filename != self.filename:
            return None
        self.lines.add(frame.f_lineno)
        return self._local

    def _local(self, frame, event, arg):
        if event == "line":
            self.lines.add(frame.f_lineno)
        return self._local

    def __enter__(self) -> "_LineTrace":
        self.previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.settrace(self.previous)


# -- loading ------------------------------------------------------------------


_SPAWN_DIR: Optional[str] = None


def _importable(name: str, source: str) -> None:
    """Write a top-level variant module (``__torchlint_fixed__train``) to a file in a
    private directory on ``sys.path``, so that a process started with the "spawn"
    method (a ``DataLoader`` worker with ``multiprocessing_context="spawn"``, the
    default on macOS and Windows), which unpickles the dataset by its module's
    name, can import the same code. Spawned processes get the parent's
    ``sys.path``. The directory is removed when the verification ends."""
    global _SPAWN_DIR
    if "." in name:
        return  # a module of a package: its name cannot be served from another directory
    if _SPAWN_DIR is None:
        import tempfile

        _SPAWN_DIR = tempfile.mkdtemp(prefix="torchlint-verify-modules-")
        sys.path.insert(0, _SPAWN_DIR)
    with open(os.path.join(_SPAWN_DIR, f"{name}.py"), "w", encoding="utf-8") as f:
        f.write(source)


class Variant:
    def __init__(self, spec: Dict[str, Any]) -> None:
        self.key: str = spec["key"]
        self.spec = spec
        self.module: Any = None
        self.function: Optional[Callable[[], Any]] = None
        self.state: Dict[str, Any] = {}
        self.result: Dict[str, Any] = {}

    def load(self, case: Dict[str, Any], baseline: Dict[str, Any], globals_state: _GlobalState) -> None:
        spec = self.spec
        name = spec["module"]
        filename = spec["filename"]
        source = spec["source"]
        if filename != spec.get("file"):
            # A file that does not exist on disk (the fixed source): make its
            # lines available to tracebacks and inspect.getsource.
            lines = source.splitlines(keepends=True)
            linecache.cache[filename] = (len(source), None, lines, filename)
        _importable(name, source)
        module_spec = importlib.util.spec_from_loader(name, loader=None, origin=spec.get("file"))
        module = importlib.util.module_from_spec(module_spec)
        if spec.get("file"):
            module.__file__ = spec["file"]
        if case.get("package"):
            module.__package__ = case["package"]
        module.__dict__.update(case.get("globals") or {})
        sys.modules[name] = module
        globals_state.restore(baseline)
        _seed(case["seed"])
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the user's own module, as asked
        self.state = globals_state.capture()
        self.module = module
        target: Any = module
        for part in case["function"].split("."):
            if not hasattr(target, part):
                raise UsageProblem(f"`{case['function']}` is not defined by the module")
            target = getattr(target, part)
        if not callable(target):
            raise UsageProblem(f"`{case['function']}` is not callable (it is a {type(target).__name__})")
        _check_zero_arguments(target, case["function"])
        self.function = target


def _check_zero_arguments(function: Callable, name: str) -> None:
    import inspect

    if inspect.iscoroutinefunction(function):
        raise UsageProblem(f"`{name}` is a coroutine function; verify calls plain functions")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return
    required = [
        p.name for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise UsageProblem(
            f"`{name}` takes arguments ({', '.join(required)}); verify calls a zero-argument "
            "function: wrap the call in one (e.g. `def bench(): return train_step(batch)`)"
        )


# -- comparing ----------------------------------------------------------------

_NUMBER = (bool, int, float, complex)


def snapshot(value: Any) -> Any:
    """A copy of the tensors in a result, safe from later in-place changes."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(snapshot(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, snapshot(v)) for k, v in value.items())
    return value


def _kind(value: Any) -> str:
    return type(value).__name__


def compare(expected: Any, actual: Any, rtol: Optional[float] = None, atol: Optional[float] = None, where: str = "result") -> Optional[str]:
    """None when ``actual`` matches ``expected``, else a message saying what differs."""
    tensor = torch.Tensor
    try:
        import numpy
        arrays: tuple = (tensor, numpy.ndarray)
    except Exception:  # noqa: BLE001
        arrays = (tensor,)

    if isinstance(expected, _NUMBER) and isinstance(actual, tensor) or (
        isinstance(actual, _NUMBER) and isinstance(expected, tensor)
    ):
        # The TL101 fix turns a Python number into a 0-dim tensor.
        number, t = (expected, actual) if isinstance(expected, _NUMBER) else (actual, expected)
        if t.dim() != 0:
            return (
                f"{where}: a {_kind(number)} in one version but a tensor of shape "
                f"{tuple(t.shape)} in the other"
            )
        t = t.detach().cpu()
        dtype = t.dtype
        if isinstance(number, float) and not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.float64
        if isinstance(number, complex) and not dtype.is_complex:
            dtype = torch.complex128
        as_tensor = torch.tensor(number, dtype=dtype)
        t = t.to(dtype)
        pair = (as_tensor, t) if isinstance(expected, _NUMBER) else (t, as_tensor)
        return _assert_close(pair[0], pair[1], rtol, atol, where)
    if isinstance(expected, arrays) and isinstance(actual, arrays):
        return _assert_close(expected, actual, rtol, atol, where)
    if isinstance(expected, arrays) or isinstance(actual, arrays):
        return f"{where}: a {_kind(expected)} in the original, a {_kind(actual)} in the fixed version"
    if isinstance(expected, _NUMBER) and isinstance(actual, _NUMBER):
        if isinstance(expected, bool) or isinstance(actual, bool):
            if expected != actual:
                return f"{where}: {expected!r} != {actual!r}"
            return None
        if type(expected) is not type(actual):
            return f"{where}: a {_kind(expected)} ({expected!r}) in the original, a {_kind(actual)} ({actual!r}) in the fixed version"
        return _assert_close(expected, actual, rtol, atol, where)
    if isinstance(expected, dict) and isinstance(actual, dict):
        if list(expected) != list(actual):
            missing = [k for k in expected if k not in actual]
            extra = [k for k in actual if k not in expected]
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"missing keys {missing!r}")
                if extra:
                    parts.append(f"extra keys {extra!r}")
                return f"{where}: {', '.join(parts)}"
        for key in expected:
            problem = compare(expected[key], actual[key], rtol, atol, f"{where}[{key!r}]")
            if problem:
                return problem
        return None
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if _kind(expected) != _kind(actual):
            return f"{where}: a {_kind(expected)} in the original, a {_kind(actual)} in the fixed version"
        if len(expected) != len(actual):
            return f"{where}: {len(expected)} elements in the original, {len(actual)} in the fixed version"
        for i, (e, a) in enumerate(zip(expected, actual)):
            problem = compare(e, a, rtol, atol, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if _kind(expected) != _kind(actual):
        return f"{where}: a {_kind(expected)} in the original, a {_kind(actual)} in the fixed version"
    if dataclasses.is_dataclass(expected) and dataclasses.is_dataclass(actual):
        for f in dataclasses.fields(expected):
            problem = compare(getattr(expected, f.name), getattr(actual, f.name), rtol, atol, f"{where}.{f.name}")
            if problem:
                return problem
        return None
    try:
        equal = expected == actual
        if isinstance(equal, bool) and equal:
            return None
    except Exception:  # noqa: BLE001 - objects that cannot be compared
        equal = False
    if hasattr(expected, "__dict__") and hasattr(actual, "__dict__") and type(expected) is not type(actual):
        # Instances of a class defined in the module: one class per variant.
        return compare(vars(expected), vars(actual), rtol, atol, f"{where}.__dict__")
    return f"{where}: {_short_repr(expected)} != {_short_repr(actual)}"


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001
        text = f"<{_kind(value)}>"
    return text if len(text) <= 200 else text[:197] + "..."


def _assert_close(expected: Any, actual: Any, rtol, atol, where: str) -> Optional[str]:
    if isinstance(expected, torch.Tensor):
        expected = expected.detach()
    if isinstance(actual, torch.Tensor):
        actual = actual.detach()
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        return _clip(f"{where}: {str(exc).strip()}")
    except Exception as exc:  # noqa: BLE001 - e.g. unsupported types
        return _clip(f"{where}: cannot compare ({_describe(exc)})")
    return None


# -- timing -------------------------------------------------------------------


def _quantile(sorted_values: List[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


ROUNDS = 3


def summarize(measurements: List[Any]) -> Dict[str, Any]:
    """Median, IQR and quartiles of the per-call times of one or more Measurements."""
    from torch.utils.benchmark import Measurement

    m = Measurement.merge(measurements)[0] if len(measurements) > 1 else measurements[0]
    times = sorted(m.times)
    return {
        "median": m.median,
        "iqr": m.iqr,
        "p25": _quantile(times, 0.25),
        "p75": _quantile(times, 0.75),
        "runs": len(times),
        "number_per_run": min(x.number_per_run for x in measurements),
    }


# -- the job ------------------------------------------------------------------


def _device() -> Dict[str, str]:
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        return {"device": "cuda", "device_name": torch.cuda.get_device_name(index)}
    return {"device": "cpu", "device_name": _cpu_name()}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


class Case:
    def __init__(self, spec: Dict[str, Any], job: Dict[str, Any], events: _Events, globals_state: _GlobalState) -> None:
        self.spec = spec
        self.id = spec["id"]
        self.events = events
        self.globals_state = globals_state
        self.min_run_time = job["min_run_time"]
        self.rtol = spec.get("rtol")
        self.atol = spec.get("atol")
        self.variants = {v["key"]: Variant(v) for v in spec["variants"]}
        self.baseline = globals_state.capture()
        self.expected: Any = None

    def step(self, what: str, key: Optional[str] = None) -> None:
        self.events.send(event="step", case=self.id, key=key, what=what)

    def report(self, key: str) -> None:
        self.events.send(event="result", case=self.id, key=key, result=self.variants[key].result)

    def label(self, key: str) -> str:
        return self.variants[key].spec.get("label", key)

    def load(self, key: str) -> bool:
        variant = self.variants[key]
        self.step(f"importing the {self.label(key)} module", key)
        try:
            variant.load(self.spec, self.baseline, self.globals_state)
        except UsageProblem as exc:
            variant.result.update(error=str(exc), usage=True)
        except BaseException as exc:  # noqa: BLE001 - the user's code may raise anything
            if isinstance(exc, KeyboardInterrupt):
                raise
            variant.result.update(
                error=f"raised on import: {_describe(exc)}", traceback=_user_traceback(exc), on_import=True
            )
        else:
            return True
        self.report(key)
        return False

    def call(self, key: str, trace: bool = False) -> tuple:
        """(ok, value) of one seeded call; with ``trace``, the lines of the
        variant's module that the call ran go to its result as ``lines``."""
        variant = self.variants[key]
        self.step(f"calling the {self.label(key)} function", key)
        self.globals_state.restore(variant.state)
        _seed(self.spec["seed"])
        lines: set = set()
        try:
            if trace:
                with _LineTrace(variant.spec["filename"], lines):
                    result = variant.function()
                variant.result["lines"] = sorted(lines)
            else:
                result = variant.function()
            value = snapshot(result)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            variant.result.update(error=f"raised {_describe(exc)}", traceback=_user_traceback(exc))
            self.report(key)
            return False, None
        finally:
            variant.state = self.globals_state.capture()
            self.globals_state.restore(self.baseline)
        return True, value

    def check(self, key: str) -> None:
        """Load and call a variant, and compare it with the original."""
        if not self.load(key):
            return
        ok, value = self.call(key)
        if not ok:
            return
        problem = compare(self.expected, value, self.rtol, self.atol)
        self.variants[key].result.update(match=problem is None, mismatch=problem)
        self.report(key)

    def time(self, keys: List[str]) -> None:
        """Time the variants in turn, ROUNDS times each, so that a change in the
        machine's load while measuring affects them alike."""
        from torch.utils.benchmark import Timer

        keys = [k for k in keys if self.variants[k].function is not None and not self.variants[k].result.get("error")]
        timers = {}
        measurements: Dict[str, List[Any]] = {k: [] for k in keys}
        for round_ in range(ROUNDS + 1):
            for key in list(keys):
                variant = self.variants[key]
                if round_ == 0:
                    self.step(f"warming up the {self.label(key)} function", key)
                else:
                    self.step(f"timing the {self.label(key)} function (round {round_} of {ROUNDS})", key)
                self.globals_state.restore(variant.state)
                try:
                    if round_ == 0:
                        variant.function()  # warm-up (the comparison call was the first)
                        timers[key] = Timer(
                            stmt="fn()", globals={"fn": variant.function}, num_threads=torch.get_num_threads()
                        )
                    else:
                        measurements[key].append(
                            timers[key].blocked_autorange(min_run_time=self.min_run_time / ROUNDS)
                        )
                except BaseException as exc:  # noqa: BLE001
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    variant.result.update(
                        error=f"raised while being timed: {_describe(exc)}", traceback=_user_traceback(exc)
                    )
                    keys.remove(key)
                    self.report(key)
                finally:
                    variant.state = self.globals_state.capture()
                    self.globals_state.restore(self.baseline)
        for key in keys:
            self.variants[key].result["time"] = summarize(measurements[key])
            self.report(key)

    def run(self) -> Dict[str, Any]:
        spec = self.spec
        original = spec["original"]
        fixed = spec["fixed"]
        if self.load(original):
            ok, value = self.call(original, trace=bool(spec.get("trace")))
            if ok:
                self.expected = value
                self.check(fixed)
                failed = self.variants[fixed].result.get("match") is not True
                blame = spec.get("blame") or []
                if failed and not self.variants[fixed].result.get("usage"):
                    for key in blame:
                        self.check(key)
                for key in spec.get("each") or []:
                    if key not in blame or not failed:
                        self.check(key)
                self.time(list(spec.get("time") or []))
        return {key: v.result for key, v in self.variants.items() if v.result}


def load_torch() -> Any:
    global torch
    import warnings

    # torch without NumPy warns at import; that is the environment, not the user's code.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch as _torch
    import torch.testing  # noqa: F401 - loaded now rather than during the first comparison
    import torch.utils.benchmark  # noqa: F401

    torch = _torch
    return torch


def main(argv: List[str]) -> int:
    events = _Events()
    with open(argv[1], encoding="utf-8") as f:
        job = json.load(f)
    sys.argv = [job["argv0"]] if job.get("argv0") else [""]
    if job.get("sys_path"):
        sys.path[0:1] = job["sys_path"]  # replaces this file's directory
    else:
        del sys.path[0]
    events.send(event="step", case=None, what="importing torch")
    load_torch()
    events.send(event="info", torch=torch.__version__, **_device())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    globals_state = _GlobalState()
    for spec in job["cases"]:
        spec.setdefault("globals", {})
        spec["globals"] = {k: (device if v == "$DEVICE" else v) for k, v in spec["globals"].items()}
        case = Case(spec, job, events, globals_state)
        results = case.run()
        events.send(event="case", case=spec["id"], results=results)
        for variant in case.variants.values():
            sys.modules.pop(variant.spec["module"], None)
    events.send(event="done")
    return 0


if __name__ == "__main__":
    try:
        status = main(sys.argv)
    finally:
        if _SPAWN_DIR is not None:
            import shutil

            shutil.rmtree(_SPAWN_DIR, ignore_errors=True)
    # Skip the interpreter's teardown, which takes seconds once torch._dynamo
    # is loaded (creating an optimizer loads it); every result has been sent.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(status)
