"""Serving fixed modules from memory: the import hook of program verification.

Standard library only: it is loaded by path (``_bootstrap/sitecustomize.py``)
in every process of a verified program, the program's own and the processes
it spawns (``DataLoader`` workers with the "spawn" method), before the
program's code runs.  Nothing is written to disk.

The texts come from the JSON file named by ``TORCHLINT_VERIFY_SOURCES``:
``{"sources": {absolute path: fixed text}}``.  A module whose file is one of
those paths is compiled from the fixed text under its real file name (so
tracebacks, line tracing and pickling by module name work as usual); every
other module is imported as Python would.  A spawned process re-runs the
main script as ``__mp_main__`` through ``runpy.run_path``; that too is served
the fixed text.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import linecache
import os
import sys
import types
from typing import Any, Dict, Optional

ENV = "TORCHLINT_VERIFY_SOURCES"


def key(path: str) -> str:
    """How paths are compared: absolute, symbolic links resolved."""
    return os.path.normcase(os.path.realpath(path))


class FixedLoader(importlib.machinery.SourceFileLoader):
    """A source loader whose source is a string; it never reads or writes bytecode caches."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self.text = text

    def get_data(self, path: str) -> bytes:
        if key(path) == key(self.path):
            return self.text.encode("utf-8")
        return super().get_data(path)

    def get_source(self, fullname: str) -> str:
        return self.text

    def get_code(self, fullname: str) -> types.CodeType:
        return compile(self.text, self.path, "exec", dont_inherit=True)


class FixedFinder(importlib.abc.MetaPathFinder):
    """Finds modules as the path finder does, and serves the fixed ones from memory."""

    def __init__(self, sources: Dict[str, str]) -> None:
        self.sources = {key(path): text for path, text in sources.items()}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not spec.origin or not spec.has_location:
            return None
        text = self.sources.get(key(spec.origin))
        if text is None:
            return None
        spec.loader = FixedLoader(fullname, spec.origin, text)
        spec.cached = None
        return spec


def _remember_lines(sources: Dict[str, str]) -> None:
    """Tracebacks show the fixed lines: a linecache entry without a modification
    time is never checked against the file on disk."""
    for path, text in sources.items():
        linecache.cache[path] = (len(text), None, text.splitlines(True), path)


class _RunPath:
    """``runpy`` for ``multiprocessing.spawn``: re-running the main script in a
    spawned process uses its fixed text."""

    def __init__(self, sources: Dict[str, str], runpy: Any) -> None:
        self.sources = sources
        self.runpy = runpy

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runpy, name)

    def run_path(self, path_name: str, init_globals: Any = None, run_name: Optional[str] = None) -> Dict[str, Any]:
        text = self.sources.get(key(path_name)) if isinstance(path_name, str) else None
        if text is None:
            return self.runpy.run_path(path_name, init_globals, run_name)
        module = types.ModuleType(run_name or "<run_path>")
        module.__dict__.update(init_globals or {})
        module.__dict__.update(__file__=path_name, __cached__=None, __loader__=None, __spec__=None,
                               __package__="")
        saved = sys.modules.get(module.__name__)
        sys.modules[module.__name__] = module
        try:
            exec(compile(text, path_name, "exec", dont_inherit=True), module.__dict__)
        finally:
            if saved is None:
                sys.modules.pop(module.__name__, None)
            else:
                sys.modules[module.__name__] = saved
        return dict(module.__dict__)


def install(sources: Dict[str, str]) -> Optional[FixedFinder]:
    """Serve ``sources`` (absolute path -> text) to imports in this process and
    to the main script of processes it spawns.  Returns the finder (None when
    there is nothing to serve)."""
    if not sources:
        return None
    finder = FixedFinder(sources)
    _remember_lines(sources)
    # Before the path finder, after the built-in and frozen importers.
    position = next((i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder), 0)
    sys.meta_path.insert(position, finder)
    try:
        import multiprocessing.spawn as spawn
    except ImportError:  # pragma: no cover - a Python without multiprocessing
        return finder
    if not isinstance(spawn.runpy, _RunPath):
        spawn.runpy = _RunPath(finder.sources, spawn.runpy)
    return finder


def load(path: str) -> Dict[str, str]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return dict(data.get("sources") or {})


def install_from_environment() -> Optional[FixedFinder]:
    """What ``_bootstrap/sitecustomize.py`` runs at the start of every process."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        sources = load(path)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"torchlint verify: cannot read the fixed sources ({path}): {exc}\n")
        return None
    return install(sources)
