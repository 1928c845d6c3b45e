"""The result cache: diagnostics of unchanged files are not computed again.

Layout (in ``.torchlint_cache`` at the project root: the directory of the
file's configuration file, or the current directory when there is none; the
``TORCHLINT_CACHE_DIR`` environment variable names another directory)::

    .torchlint_cache/
        .gitignore          "*": git never sees the cache
        CACHEDIR.TAG        backup tools skip it
        v3/<namespace>.json one file per namespace (the directory names the format)

A *namespace* is a hash of everything besides a file's own text that can
change its diagnostics: torchlint's version and a fingerprint of its installed
code (so an upgrade, or an edit of an editable install, starts afresh), the
LibCST and Python versions, the enabled rule codes, ``target-torch``,
``per-file-ignores`` and the project root they are relative to, ``unsafe-fixes``
(the fix total counts the fixes that `fix` would apply), and the
current directory (diagnostics carry paths relative to it, and some rules look
at a file's path). Each configuration file has its own namespace, in the cache
directory of its root, so files under different configurations never share
entries and editing one subproject's configuration re-checks only the files
under it. Inside a namespace, an entry is keyed by the file's displayed path
and holds the hash of the text that was analysed, the diagnostics found in it,
its fix total (how many fixes ``torchlint fix`` would apply, follow-on fixes
included; see ``parallel.fix_total``) and, when there are any, the warnings
about its suppression comments; a file whose text hash differs is a miss.

Robustness: a namespace file is replaced atomically (a temporary file, then
``os.replace``), so concurrent runs can only lose each other's new entries,
never corrupt the file; an unreadable or malformed cache is a miss, never an
error. Diagnostics that are internal errors are not stored. Growth is
bounded: entries for files that no longer exist are dropped when a namespace
is written, and namespace files unused for 30 days are deleted.

This module imports neither LibCST nor the rules, so that a run whose files
are all cached never pays for them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from torchlint import __version__
from torchlint.model import Applicability, Diagnostic, FixInfo, Kind
from torchlint.source import text_hash, write_atomic  # noqa: F401 (text_hash: the key)

CACHE_DIR_NAME = ".torchlint_cache"
ENV_CACHE_DIR = "TORCHLINT_CACHE_DIR"
FORMAT = "v4"
MAX_AGE_S = 30 * 24 * 3600

_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by torchlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def cache_dir(root: Path) -> Path:
    """Where the cache lives for a project whose root is ``root``."""
    override = os.environ.get(ENV_CACHE_DIR)
    return Path(override) if override else Path(root) / CACHE_DIR_NAME


def _code_fingerprint() -> str:
    """Sizes and modification times of torchlint's own modules (engine, rules, codemods).

    The version alone would miss an edited editable install; ``stat`` of a
    few dozen files costs well under a millisecond.
    """
    import torchlint

    package = Path(torchlint.__file__).parent
    roots = [package]
    for name in ("rules", "codemods"):
        spec_dir = _subpackage_dir(name)
        if spec_dir is not None:
            roots.append(spec_dir)
    parts: List[str] = []
    for root in roots:
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                parts.append(f"{root.name}/{entry.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()


def _subpackage_dir(name: str) -> Optional[Path]:
    # Find torchlint.rules / torchlint.codemods without importing them (their
    # directories are mapped by the packaging, see pyproject.toml).
    from importlib.util import find_spec

    try:
        spec = find_spec(f"torchlint.{name}")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _libcst_version() -> str:
    # The parser's version can change what parses; read it without importing LibCST.
    from importlib.util import find_spec

    try:
        spec = find_spec("libcst")
    except (ImportError, ValueError):
        return "?"
    if spec is None or not spec.origin:
        return "?"
    base = Path(spec.origin).parent
    for name in ("_version.py", "__init__.py"):
        try:
            st = (base / name).stat()
            return f"{name}:{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            continue
    return "?"


def namespace(settings, codes: Sequence[str], cwd: Optional[Path] = None) -> str:
    """The hash of everything except a file's text that its diagnostics depend on."""
    key = {
        "format": FORMAT,
        "torchlint": __version__,
        "code": _code_fingerprint(),
        "libcst": _libcst_version(),
        "python": sys.version_info[:2],
        "codes": sorted(codes),
        "target_torch": list(settings.target_torch),
        "per_file_ignores": [[p, list(c)] for p, c in settings.per_file_ignores],
        "unsafe_fixes": bool(settings.unsafe_fixes),  # the fix total counts what `fix` would apply
        "root": str(settings.root),
        "cwd": str(cwd if cwd is not None else Path.cwd()),
    }
    blob = json.dumps(key, sort_keys=True).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


# -- (de)serialising diagnostics ------------------------------------------------


def _encode(d: Diagnostic) -> list:
    fix = None if d.fix is None else [d.fix.applicability.value, d.fix.message]
    file_location = None if d.file_location is None else list(d.file_location)
    return [d.line, d.column, d.end_line, d.end_column, d.message, d.code, d.name, fix, d.kind.value,
            d.cell, file_location, d.runs, d.via]


def _decode(path: str, row: list) -> Diagnostic:
    line, column, end_line, end_column, message, code, name, fix, kind, cell, file_location, runs, via = row
    fix_info = None if fix is None else FixInfo(Applicability(fix[0]), fix[1])
    return Diagnostic(
        path, line, column, end_line, end_column, message, code, name, fix_info, Kind(kind),
        cell=cell, file_location=None if file_location is None else tuple(file_location), runs=runs, via=via,
    )


def cacheable(diagnostics: Iterable[Diagnostic]) -> bool:
    """Internal errors (a crash, a worker that died) are never stored."""
    return all(d.kind is not Kind.INTERNAL_ERROR and d.kind is not Kind.IO_ERROR for d in diagnostics)


class Cache:
    """One namespace of the cache: load once, look up, record, write once."""

    def __init__(self, directory: Path, space: str) -> None:
        self.directory = Path(directory)
        self.file = self.directory / FORMAT / f"{space}.json"
        self.entries: Dict[str, list] = {}
        self.index: Optional[dict] = None  # the run's project index (torchlint/project.py)
        self.hits = 0
        self.misses = 0
        self._dirty = False
        self._load()

    @classmethod
    def for_run(cls, settings, codes: Sequence[str]) -> "Cache":
        return cls(cache_dir(settings.root), namespace(settings, codes))

    def _load(self) -> None:
        try:
            with open(self.file, "rb") as handle:
                data = json.loads(handle.read())
        except (OSError, ValueError):
            return
        entries = data.get("entries") if isinstance(data, dict) else None
        if isinstance(entries, dict):
            self.entries = entries
        index = data.get("index") if isinstance(data, dict) else None
        if isinstance(index, dict):
            self.index = index

    def get(self, path: str, digest: str) -> Optional[Tuple[List[Diagnostic], Optional[int], List[str], List[str]]]:
        """The cached diagnostics of ``path``, its fix total (see
        ``parallel.fix_total``), its warnings and its pending functions (see
        ``torchlint.project``), if its text hash is ``digest``.  ``path`` may
        carry ``#<facts hash>``: the result of checking it with those facts."""
        entry = self.entries.get(path)
        real = path.split("#", 1)[0]
        try:
            if entry is not None and entry[0] == digest:
                found = [_decode(real, row) for row in entry[1]]
                total = entry[2]
                if total is not None and not isinstance(total, int):
                    raise TypeError(total)
                warnings = list(entry[3]) if len(entry) > 3 else []
                pending = list(entry[4]) if len(entry) > 4 else []
                if not all(isinstance(w, str) for w in warnings + pending):
                    raise ValueError("malformed warnings")
                self.hits += 1
                return found, total, warnings, pending
        except (TypeError, ValueError, IndexError, KeyError):
            pass  # a malformed entry is a miss
        self.misses += 1
        return None

    def get_index(self, key: str) -> Optional[dict]:
        """The facts of the run's project index stored under ``key``."""
        if self.index is not None and self.index.get("key") == key and isinstance(self.index.get("facts"), dict):
            try:
                return {path: {name: (int(v[0]), str(v[1])) for name, v in found.items()}
                        for path, found in self.index["facts"].items()}
            except (TypeError, ValueError, IndexError, AttributeError):
                return None
        return None

    def put_index(self, key: str, facts: dict) -> None:
        index = {"key": key, "facts": {p: {n: list(v) for n, v in f.items()} for p, f in facts.items()}}
        if self.index != index:
            self.index = index
            self._dirty = True

    def get_edits(self, path: str, digest: str) -> Optional[list]:
        """The JSON edits of ``path``'s fixes (torchlint/fix_edits.py), if its
        text and facts hash to ``digest``."""
        entry = self.entries.get(f"{path}#edits")
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == digest and isinstance(entry[1], list):
            return entry[1]
        return None

    def put_edits(self, path: str, digest: str, edits: list) -> None:
        entry = [digest, edits]
        if self.entries.get(f"{path}#edits") != entry:
            self.entries[f"{path}#edits"] = entry
            self._dirty = True

    def put(self, path: str, digest: str, diagnostics: Sequence[Diagnostic],
            fix_total: Optional[int] = None, warnings: Sequence[str] = (), pending: Sequence[str] = ()) -> None:
        if not cacheable(diagnostics):
            self.entries.pop(path, None)
            self._dirty = True
            return
        entry = [digest, [_encode(d) for d in diagnostics], fix_total]
        if warnings or pending:
            entry.append(list(warnings))
        if pending:
            entry.append(list(pending))
        if self.entries.get(path) != entry:
            self.entries[path] = entry
            self._dirty = True

    def save(self) -> None:
        """Write the namespace (if it changed); failures are silent (a cache is optional)."""
        if not self._dirty:
            return
        try:
            self._prepare_directory()
            self.entries = {p: e for p, e in self.entries.items() if os.path.exists(p.split("#", 1)[0])}
            data: dict = {"entries": self.entries}
            if self.index is not None:
                data["index"] = self.index
            blob = json.dumps(data, separators=(",", ":")).encode()
            write_atomic(self.file, blob)
            self._dirty = False
            self._prune()
        except OSError:
            pass

    def _prepare_directory(self) -> None:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        for name, content in ((".gitignore", "# Created by torchlint.\n*\n"), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
            marker = self.directory / name
            if not marker.exists():
                marker.write_text(content, encoding="utf-8")

    def _prune(self) -> None:
        """Delete namespace files (other configurations, versions) unused for 30 days."""
        now = time.time()
        try:
            with os.scandir(self.file.parent) as entries:
                for entry in entries:
                    if entry.name.endswith(".json") and entry.path != str(self.file):
                        try:
                            if now - entry.stat().st_mtime > MAX_AGE_S:
                                os.unlink(entry.path)
                        except OSError:
                            pass
        except OSError:
            pass

