"""Every input as one abstraction: a Python file, a notebook, standard input.

As Ruff's ``SourceKind``: an input knows how to read its text, analyse it,
fix it, give the texts excerpts are shown from, show a fix as a diff, and
write the fixed text back.  ``input_for(display, path)`` picks the kind from
the displayed name (a ``.ipynb`` is a notebook, also on standard input with
``--stdin-filename``); the rest of the engine never asks which kind it holds.

    PythonInput    source decoded as Python does (PEP 263, BOM), written back
                   in its encoding; the whole text is one excerpt source
    NotebookInput  UTF-8 JSON; its code cells are analysed as one program,
                   positions and excerpts are per cell, fixes edit only cells

A ``None`` path is standard input: read from ``sys.stdin`` and never written.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torchlint.model import Diagnostic
from torchlint.source import Source, decode, encode, is_notebook, read_source, write_atomic


@dataclass
class Analysis:
    """What checking one text found."""

    diagnostics: List[Diagnostic]
    sources: Dict[str, str]  # the texts excerpts are taken from (the text, or a notebook's cells)
    warnings: List[str] = field(default_factory=list)  # about suppression comments, located
    pending: List[str] = field(default_factory=list)  # functions the project index may answer for
    calls: Any = None  # what the file's calls can reach, for the project index (None: not known)
    # Each fixable diagnostic's JSON edits (torchlint/fix_edits.py), when asked
    # and the input gives them from its analysis (None: not computed).
    edits: Optional[dict] = None


@dataclass
class Fixed:
    """What fixing one text gave."""

    text: str  # the fixed text (the input's own format: a notebook's JSON)
    applied: Counter
    remaining: List[Diagnostic]
    errors: List[Diagnostic]  # fixes dropped because they broke the code
    sources: Dict[str, str]  # excerpt sources of the fixed text
    warnings: List[str]
    diff_text: str = ""  # a unified diff of the fixes (computed on request)


class Input:
    """One input to check or fix; ``path`` None is standard input."""

    def __init__(self, display: str, path: Optional[Path]) -> None:
        self.display = display
        self.path = path

    # Whether the project index (torchlint/project.py) reads this input.
    indexed = True

    @property
    def is_stdin(self) -> bool:
        return self.path is None

    def read(self) -> Source:
        """The input's text and encoding; a :class:`SourceError` says why it cannot be read."""
        if self.path is None:
            return self.decode(sys.stdin.buffer.read())
        return self.read_path(self.path)

    def decode(self, raw: bytes) -> Source:
        raise NotImplementedError

    def read_path(self, path: Path) -> Source:
        raise NotImplementedError

    def analyse(self, text: str, settings, codes: Sequence[str], project: Optional[dict] = None,
                edits: bool = False) -> Analysis:
        """``edits``: also give the fixes' edits (``Analysis.edits``) where that
        needs no second analysis."""
        raise NotImplementedError

    def fix(self, text: str, settings, codes: Sequence[str], unsafe: bool, project: Optional[dict] = None,
            diff: bool = False) -> Fixed:
        raise NotImplementedError

    def excerpts(self, text: str) -> Dict[str, str]:
        """What the reporters show excerpts from."""
        raise NotImplementedError

    def edit_text(self, sources: Dict[str, str]) -> Optional[str]:
        """The text the edits of single fixes are computed on (JSON's ``fix.edits``),
        given the excerpt sources of the check; None when there is none."""
        raise NotImplementedError

    def program(self, text: str) -> str:
        """The Python program the rules see in ``text`` (a notebook's code cells, joined)."""
        raise NotImplementedError

    def with_program(self, text: str, program: str) -> Optional[str]:
        """``text`` with its program replaced by ``program`` (an edit of the program's
        comments only); None when it does not fit (a notebook's cells)."""
        raise NotImplementedError

    def write(self, source: Source, text: str) -> None:
        """Replace the file with ``text`` atomically, in the encoding it was read in."""
        assert self.path is not None, "standard input is never written"
        write_atomic(self.path, encode(source, text))


class PythonInput(Input):
    def decode(self, raw: bytes) -> Source:
        return decode(raw)

    def read_path(self, path: Path) -> Source:
        return read_source(path)

    def analyse(self, text, settings, codes, project=None, edits=False) -> Analysis:
        from torchlint.engine import lint_text
        from torchlint.noqa import warning_text

        result = (lint_text(text, self.display, settings, codes, project) if project
                  else lint_text(text, self.display, settings, codes))
        warnings = [warning_text(self.display, w.line, w.message) for w in result.warnings]
        calls = result.calls.summary(result.module, self.display) if result.calls is not None else None
        found = None
        if edits and any(d.fix is not None and d.code for d in result.diagnostics):
            from torchlint.fix_edits import of_analysis
            from torchlint.threads import on_large_stack

            found = on_large_stack(of_analysis, text, result)
        return Analysis(result.diagnostics, {self.display: text}, warnings, result.pending, calls, found)

    def fix(self, text, settings, codes, unsafe, project=None, diff=False) -> Fixed:
        from torchlint.engine import fix_text
        from torchlint.noqa import warning_text

        result = fix_text(text, self.display, settings, codes, unsafe, project=project)
        warnings = [warning_text(self.display, w.line, w.message) for w in result.warnings]
        return Fixed(result.text, result.applied, result.remaining, result.errors, {self.display: result.text},
                     warnings, unified_diff(text, result.text, self.display) if diff else "")

    def excerpts(self, text: str) -> Dict[str, str]:
        return {self.display: text}

    def edit_text(self, sources: Dict[str, str]) -> Optional[str]:
        return sources.get(self.display)

    def program(self, text: str) -> str:
        return text

    def with_program(self, text: str, program: str) -> Optional[str]:
        return program


class NotebookInput(Input):
    indexed = False  # the index relates modules; a notebook is nobody's module

    def decode(self, raw: bytes) -> Source:
        from torchlint.notebook import decode_notebook

        return decode_notebook(raw)

    def read_path(self, path: Path) -> Source:
        from torchlint.notebook import read_notebook

        return read_notebook(path)

    def analyse(self, text, settings, codes, project=None, edits=False) -> Analysis:
        from torchlint.notebook import lint_notebook

        linted = lint_notebook(text, self.display, settings, codes)
        found = None
        if edits and linted.result is not None and any(d.fix is not None and d.code for d in linted.result.diagnostics):
            from torchlint.fix_edits import of_notebook_analysis
            from torchlint.threads import on_large_stack

            found = on_large_stack(of_notebook_analysis, linted.notebook, linted.result)
        return Analysis(linted.diagnostics, linted.sources, linted.warnings, edits=found)

    def fix(self, text, settings, codes, unsafe, project=None, diff=False) -> Fixed:
        from torchlint.notebook import fix_notebook

        result = fix_notebook(text, self.display, settings, codes, unsafe)
        return Fixed(result.text, result.applied, result.remaining, result.errors, result.sources,
                     result.warnings, result.diff(self.display) if diff else "")

    def excerpts(self, text: str) -> Dict[str, str]:
        from torchlint.notebook import NotebookError, parse

        try:
            return parse(text).sources(self.display)
        except NotebookError:
            return {}

    def edit_text(self, sources: Dict[str, str]) -> Optional[str]:
        from torchlint.source import SourceError

        if self.path is None:  # the cells alone do not make the notebook's JSON
            return None
        try:
            return self.read().text
        except SourceError:
            return None

    def program(self, text: str) -> str:
        from torchlint.notebook import parse

        return parse(text).program  # a NotebookError says why it is not a notebook

    def with_program(self, text: str, program: str) -> Optional[str]:
        from torchlint.notebook import parse

        notebook = parse(text)
        cells = notebook.split(program)
        if cells is None:
            return None
        return ("\ufeff" if notebook.bom else "") + notebook.render(cells)


def input_for(display: str, path: Optional[Path]) -> Input:
    """The input named ``display`` (its kind follows the name) at ``path`` (None: standard input)."""
    kind = NotebookInput if is_notebook(display) else PythonInput
    return kind(display, path)


def unified_diff(before: str, after: str, display: str) -> str:
    """A unified diff of a Python file's fixes (empty when nothing changed)."""
    if before == after:
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        fromfile=display if os.path.isabs(display) else f"a/{display}",
        tofile=display if os.path.isabs(display) else f"b/{display}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
