"""File discovery: directories are walked for ``.py``/``.pyi``/``.ipynb`` files, honouring
``.gitignore`` files and the ``exclude``/``extend-exclude`` settings; a file
named explicitly is always checked."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

from torchlint.config import Settings

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".cfg")  # configurations, and packaging (entry points)
CONFIG_MAX_BYTES = 256 * 1024


def glob_to_regex(pattern: str) -> str:
    """Translate a glob (``*``, ``**``, ``?``, ``[...]``) to a regex over ``/`` paths."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    out.append("(?:.*/)?")
                    i += 1
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


class PathPatterns:
    """Ruff-style exclude patterns: a pattern without ``/`` matches any path
    component (``build``, ``*_pb2.py``); one with ``/`` matches the path relative
    to the configuration's directory (``scripts/*.py``)."""

    def __init__(self, patterns: Sequence[str], root: Path) -> None:
        self.root = root
        names, paths = [], []
        for p in patterns:
            p = p.replace("\\", "/").rstrip("/")
            if p.startswith("./"):
                p = p[2:]
            if "/" in p:
                paths.append(glob_to_regex(p.lstrip("/")))
            else:
                names.append(glob_to_regex(p))
        self._names = re.compile("^(?:" + "|".join(names) + ")$") if names else None
        self._paths = re.compile("^(?:" + "|".join(paths) + ")(?:/.*)?$") if paths else None

    def matches(self, path: Path) -> bool:
        if self._names is not None and self._names.match(path.name):
            return True
        if self._paths is not None:
            rel = relative_posix(path, self.root)
            if rel is not None and self._paths.match(rel):
                return True
        return False

    def matches_any_component(self, path: Path) -> bool:
        """For explicitly named files: excluded if the file or a parent matches."""
        if self._names is not None:
            rel = relative_posix(path, self.root)
            parts = rel.split("/") if rel is not None else [path.name]
            if any(self._names.match(part) for part in parts):
                return True
        return self.matches(path)


def relative_posix(path: Path, root: Path) -> Optional[str]:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return None


# -- .gitignore ---------------------------------------------------------------


@dataclass
class _IgnoreRule:
    regex: "re.Pattern[str]"
    negated: bool
    dir_only: bool


class GitIgnore:
    """The patterns of one ``.gitignore`` file, relative to its directory."""

    def __init__(self, base: Path, lines: Iterable[str]) -> None:
        self.base = base
        self.rules: List[_IgnoreRule] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip("\r")
            if not line or line.startswith("#"):
                continue
            if not line.endswith("\\ "):
                line = line.rstrip(" ")
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            elif line.startswith("\\"):
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            if not line:
                continue
            anchored = "/" in line
            line = line.lstrip("/")
            body = glob_to_regex(line)
            regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "$")
            self.rules.append(_IgnoreRule(regex, negated, dir_only))

    @classmethod
    def load(cls, directory: Path) -> Optional["GitIgnore"]:
        path = directory / ".gitignore"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        ignore = cls(directory, text.splitlines())
        return ignore if ignore.rules else None

    def verdict(self, path: Path, is_dir: bool) -> Optional[bool]:
        """True: ignored, False: re-included by ``!``, None: no pattern applies."""
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        result = None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                result = not rule.negated
        return result


def _is_ignored(path: Path, is_dir: bool, ignores: Sequence[GitIgnore]) -> bool:
    ignored = False
    for ignore in ignores:
        verdict = ignore.verdict(path, is_dir)
        if verdict is not None:
            ignored = verdict
    return ignored


def _parent_ignores(directory: Path) -> List[GitIgnore]:
    """``.gitignore`` files above ``directory``, up to the enclosing git repository."""
    found: List[GitIgnore] = []
    for parent in directory.parents:
        ignore = GitIgnore.load(parent)
        if ignore is not None:
            found.append(ignore)
        if (parent / ".git").exists():
            break
    else:
        return []  # not inside a git repository: only the tree's own files count
    return list(reversed(found))


# -- walking ------------------------------------------------------------------


@dataclass
class Discovery:
    files: List[Path]
    errors: List[Tuple[Path, str]]
    walked: FrozenSet[Path] = frozenset()  # the files found by walking a directory (not named)
    # YAML configuration files found by the same walk (at most CONFIG_MAX_BYTES each):
    # the project index reads the names they mention (a `target:` class).
    configs: Tuple[Path, ...] = ()


def discover(
    paths: Sequence[Path],
    settings: Optional[Settings] = None,
    *,
    excludes_for: Optional[Callable[[Path], PathPatterns]] = None,
) -> Discovery:
    """The source files under ``paths``.  A directory's entries are matched
    against ``excludes_for(directory)`` (each directory's own configuration),
    or against the excludes of ``settings`` everywhere."""
    if excludes_for is None:
        settings = settings if settings is not None else Settings(root=Path.cwd().resolve())
        single = PathPatterns((*settings.exclude, *settings.extend_exclude), settings.root)
        excludes_for = lambda directory: single  # noqa: E731
    files: List[Path] = []
    errors: List[Tuple[Path, str]] = []
    seen_dirs: set = set()
    named: set = set()
    configs: List[Path] = []
    for given in paths:
        if given.is_dir():
            root = given.resolve()
            ignores = _parent_ignores(root)
            found_configs: List[Path] = []
            walked = list(_walk(root, excludes_for, ignores, seen_dirs, errors, found_configs))
            configs.extend(_display_path(given, root, p) for p in found_configs)
            copies = run_copies([p.relative_to(root) for p in walked])
            for path in walked:
                if path.relative_to(root) not in copies:
                    files.append(_display_path(given, root, path))
        elif given.exists() or given.is_symlink():
            files.append(given)
            named.add(given)
        else:
            errors.append((given, "No such file or directory"))
    unique = sorted(set(files), key=lambda p: p.as_posix())
    return Discovery(unique, errors, frozenset(f for f in unique if f not in named), tuple(sorted(set(configs))))


# Folders a training run writes its outputs to; research code often copies the
# model's modules there next to the checkpoints (`log/classification/<run>/`).
# (Not `exp`/`experiments`: those usually hold the experiments' own configurations.)
RUN_OUTPUT_DIRS = frozenset({
    "log", "logs", "runs", "output", "outputs", "checkpoints", "ckpt", "ckpts", "save", "saved",
    "work_dirs", "wandb", "lightning_logs", "mlruns",
})


def run_copies(files: Sequence[Path]) -> set:
    """The files (paths relative to a searched directory) that are copies of the
    project's modules saved with a training run: every Python file of their
    folder, which sits under a run-output folder (``RUN_OUTPUT_DIRS``, matched
    case-insensitively) and is not a package (no ``__init__.py``), is named like
    a module of the project outside such folders.  The run never imports them,
    and a finding there is a finding in the module they copy."""
    def in_run_output(path: Path) -> bool:
        return any(part.lower() in RUN_OUTPUT_DIRS for part in path.parts[:-1])

    outside = set()
    folders: dict = {}
    for p in files:
        if in_run_output(p):
            folders.setdefault(p.parent, []).append(p)
        elif p.suffix == ".py":
            outside.add(p.name)
    copies = set()
    for members in folders.values():
        python = [p for p in members if p.suffix in (".py", ".pyi")]
        if python and len(python) == len(members) and all(
                p.name != "__init__.py" and p.name in outside for p in python):
            copies.update(python)
    return copies


def _display_path(given: Path, root: Path, path: Path) -> Path:
    return given / path.relative_to(root)


def _walk(
    directory: Path,
    excludes_for: Callable[[Path], PathPatterns],
    ignores: List[GitIgnore],
    seen_dirs: set,
    errors: List[Tuple[Path, str]],
    configs: Optional[List[Path]] = None,
) -> Iterator[Path]:
    try:
        stat = directory.stat()
    except OSError as exc:
        errors.append((directory, exc.strerror or str(exc)))
        return
    key = (stat.st_dev, stat.st_ino)
    if key in seen_dirs:
        return  # a symlink loop, or a directory reached twice
    seen_dirs.add(key)
    own = GitIgnore.load(directory)
    if own is not None:
        ignores = [*ignores, own]
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        errors.append((directory, exc.strerror or str(exc)))
        return
    excludes = excludes_for(directory)
    for entry in entries:
        path = directory / entry.name
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if excludes.matches(path) or _is_ignored(path, is_dir, ignores):
            continue
        if is_dir:
            yield from _walk(path, excludes_for, ignores, seen_dirs, errors, configs)
        elif entry.name.endswith(SOURCE_SUFFIXES):
            yield path
        elif configs is not None and entry.name.endswith(CONFIG_SUFFIXES):
            try:
                if entry.stat().st_size <= CONFIG_MAX_BYTES:
                    configs.append(path)
            except OSError:
                continue
