"""The project index in the editor: facts about an open file from its callers
in the rest of its workspace folder (``torchlint/project.py``).

``check`` derives, for a function that its own module never calls, how often
it runs from the calls in the other files of the run.  The server does the
same for the open file, with the other Python files of the workspace folder
that holds it (as ``torchlint check`` run in that folder finds them: its
``exclude`` settings and ``.gitignore`` files apply) as the run:

- the other files are read **as saved on disk** (an unsaved edit of a caller
  counts once it is saved);
- what is derived is kept until a file of the workspace changes: a save in the
  editor, or a change the editor's file watcher reports
  (``workspace/didChangeWatchedFiles``); then the facts are derived again, and
  only the caller files whose text changed are parsed again (call sites are
  cached per file text hash);
- typing in the open file re-uses the facts unless it notes a function that
  was not asked about before;
- notebooks get no facts and give none (as with ``check``), and a folder of
  more than ``MAX_FILES`` Python files is not indexed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from torchlint.discovery import PathPatterns, discover
from torchlint.project import Answers, Facts, Query, derive, facts_digest, sites_in
from torchlint.source import SourceError, is_notebook, read_source, text_hash

MAX_FILES = 5_000
_MAX_SITES = 20_000  # cached (file, text hash, question) answers


class WorkspaceIndex:
    def __init__(self, excludes_for: Callable[[Path], PathPatterns]) -> None:
        self.excludes_for = excludes_for
        self.folders: List[Path] = []
        self.generation = 0
        self._files: Dict[Path, List[str]] = {}  # folder -> displays of its Python files
        self._texts: Dict[Path, Tuple[Tuple[int, int], Optional[str]]] = {}
        self._sites: Dict[tuple, Answers] = {}
        self._facts: Dict[Path, Tuple[int, FrozenSet[str], Facts]] = {}
        self.derivations = 0  # how many times facts were derived (tests, logs)

    def set_folders(self, folders: Sequence[Path]) -> None:
        self.folders = sorted({f.resolve() for f in folders}, key=lambda f: len(f.parts), reverse=True)
        self.changed()

    def changed(self) -> None:
        """A file of the workspace changed (or appeared, or went): derive again."""
        self.generation += 1
        self._files.clear()

    def folder_of(self, path: Path) -> Optional[Path]:
        resolved = path.resolve()
        return next((f for f in self.folders if f == resolved.parent or f in resolved.parents), None)

    def known(self, path: Path) -> Optional[Facts]:
        """The facts derived for ``path`` since the last change, if any."""
        entry = self._facts.get(path)
        return entry[2] or None if entry is not None and entry[0] == self.generation else None

    def facts(self, path: Path, pending: Sequence[str]) -> Optional[Facts]:
        """What the other files of the workspace folder establish about the
        functions ``pending`` of ``path`` (and those asked about before)."""
        folder = self.folder_of(path)
        if folder is None:
            return None
        asked = frozenset(pending)
        entry = self._facts.get(path)
        if entry is not None and entry[0] == self.generation:
            if asked <= entry[1]:
                return entry[2] or None
            asked |= entry[1]
        files = self._python_files(folder)
        found: Facts = {}
        if files is not None:
            from torchlint.threads import on_large_stack

            display = self._display(path.resolve(), folder)
            read = lambda name: self._read(folder / name)  # noqa: E731
            derived = on_large_stack(derive, {display: sorted(asked)}, [f for f in files if f != display], read,
                                     self._prefetch(read))
            found = derived.get(display, {})
            self.derivations += 1
        self._facts[path] = (self.generation, asked, found)
        return found or None

    # -- the files ----------------------------------------------------------------

    @staticmethod
    def _display(path: Path, folder: Path) -> str:
        return Path(os.path.relpath(path, folder)).as_posix()

    def _python_files(self, folder: Path) -> Optional[List[str]]:
        files = self._files.get(folder)
        if files is None:
            found = discover([folder], excludes_for=self.excludes_for).files
            files = [self._display(f, folder) for f in found if not is_notebook(f.name)]
            self._files[folder] = files
        return files if len(files) <= MAX_FILES else None

    def _read(self, path: Path) -> Optional[str]:
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._texts.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            text: Optional[str] = read_source(path).text
        except (OSError, SourceError):
            text = None
        self._texts[path] = (key, text)
        return text

    def _prefetch(self, read: Callable[[str], Optional[str]]):
        """``derive``'s questions, answered from the per-text cache of call sites."""

        def prefetch(queries: List[Query]) -> Dict[str, Answers]:
            out = {}
            for other, known, wanted in queries:
                text = read(other)
                key = (other, text_hash(text or ""), facts_digest(known or {}), tuple(wanted))
                hit = self._sites.get(key)
                if hit is None:
                    if len(self._sites) >= _MAX_SITES:
                        self._sites.clear()
                    hit = self._sites[key] = sites_in(other, text, wanted, known)
                out[other] = hit
            return out

        return prefetch
