"""What the server does with a document, without the protocol.

A ``Document`` is what torchlint analyses for one editor document: a Python
file's text, or a notebook's code cells joined into one program
(``torchlint.notebook``: magics masked, positions mapped back to the cells).
The ``Checker`` lints it with the configuration of its path and the facts the
workspace index establishes about it, and computes code actions as
(document URI, text before, text after) triples that the protocol layer turns
into minimal edits.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple
from urllib.parse import unquote, urlparse

from torchlint.config import Resolver, Settings
from torchlint.discovery import PathPatterns
from torchlint.engine import codes_for_path, fix_text, lint_text, single_fixes
from torchlint.model import Applicability, Diagnostic
from torchlint.notebook import Notebook, from_cells
from torchlint.server.incremental import IncrementalParser
from torchlint.server.index import WorkspaceIndex
from torchlint.server.text import split_lines, with_noqa

FIX_ALL_KIND = "source.fixAll.torchlint"
QUICK_FIX = "quickfix"


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a document is analysed: parsing
    allocates hundreds of thousands of objects, and each full collection on
    the way walks every object of the process (what is garbage is collected
    afterwards)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def path_of(uri: str) -> Optional[Path]:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


@dataclass(frozen=True)
class Cell:
    number: int  # counting every cell of the notebook, from 1
    uri: str
    text: str


@dataclass
class Document:
    """A file's text, or a notebook's code cells, with what applies to it."""

    uri: str
    path: Optional[Path]
    display: str
    settings: Settings
    codes: List[str]
    program: str
    texts: Dict[str, str]  # document URI -> its text (the file, or each code cell)
    notebook: Optional[Notebook] = None
    cell_uris: Dict[int, str] = field(default_factory=dict)

    def place(self, d: Diagnostic) -> Tuple[str, Diagnostic]:
        """The URI of the document a diagnostic of the program lies in, and the
        diagnostic positioned in that document's own text."""
        if self.notebook is None:
            return self.uri, d
        located = self.notebook.locate(d, self.program)
        return self.cell_uris.get(located.cell or 0, self.uri), located

    def split(self, program: str) -> Optional[Dict[str, str]]:
        """Document URI -> new text for each document a changed program changes;
        None when it no longer maps onto the notebook's cells."""
        if self.notebook is None:
            return {self.uri: program} if program != self.program else {}
        sources = self.notebook.split(program)
        if sources is None:
            return None
        return {self.cell_uris[n]: text for n, text in sources.items()
                if n in self.cell_uris and text != self.texts[self.cell_uris[n]]}

    def accepts(self, program: str) -> bool:
        return self.notebook is None or self.notebook.accepts(program)


@dataclass(frozen=True)
class Action:
    """A code action: a title and the documents it rewrites, (URI, before, after)."""

    title: str
    kind: str
    changes: Tuple[Tuple[str, str, str], ...]
    preferred: bool = False
    answers: Optional[Tuple[str, int]] = None  # (code, 0-based row) of the diagnostic it fixes


class Checker:
    """Configuration per path, the workspace index, linting and code actions."""

    def __init__(self, config: Optional[Path] = None) -> None:
        self.config = config
        self.resolver = Resolver(config=config)
        self.index = WorkspaceIndex(self._excludes)
        self.parser = IncrementalParser()
        self._patterns: Dict[Settings, PathPatterns] = {}
        self._frozen = False

    def forget(self, uri: str) -> None:
        """A document was closed."""
        self.parser.forget(uri)

    def reload(self) -> None:
        """Forget what was read of configuration files (one changed)."""
        self.resolver = Resolver(config=self.config)
        self._patterns.clear()
        self.index.changed()

    def _excludes(self, directory: Path) -> PathPatterns:
        settings = self.resolver.for_directory(directory).settings
        found = self._patterns.get(settings)
        if found is None:
            found = self._patterns[settings] = PathPatterns((*settings.exclude, *settings.extend_exclude),
                                                            settings.root)
        return found

    def _display(self, path: Optional[Path], default: str) -> str:
        if path is None:
            return default
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)

    def _document(self, uri: str, default: str, program: str, texts: Dict[str, str]) -> Document:
        path = path_of(uri)
        profile = self.resolver.for_file(path) if path is not None else self.resolver.run_profile
        display = self._display(path, default)
        codes = codes_for_path(display, profile.settings, profile.codes)
        return Document(uri, path, display, profile.settings, codes, program, texts)

    def file(self, uri: str, text: str) -> Document:
        return self._document(uri, "untitled.py", text, {uri: text})

    def notebook(self, uri: str, cells: Sequence[Cell], cell_count: int) -> Document:
        notebook = from_cells([(c.number, c.text) for c in cells], cell_count)
        doc = self._document(uri, "untitled.ipynb", notebook.program, {c.uri: c.text for c in cells})
        doc.notebook = notebook
        doc.cell_uris = {c.number: c.uri for c in cells}
        return doc

    def _unsafe(self, doc: Document) -> bool:
        return doc.settings.unsafe_fixes

    def _project(self, doc: Document) -> Optional[dict]:
        facts = self.index.known(doc.path) if doc.notebook is None and doc.path is not None else None
        return {"frequency": facts} if facts else None

    def lint(self, doc: Document) -> List[Diagnostic]:
        """The diagnostics of the program, with the workspace's cross-module facts
        for a file in a workspace folder (notebooks get none, as with ``check``)."""
        project = self._project(doc)
        parse = partial(self.parser.parse, doc.uri)  # only what the edit touched
        result = lint_text(doc.program, doc.display, doc.settings, doc.codes, project, parse)
        if doc.notebook is None and doc.path is not None and result.pending:
            facts = self.index.facts(doc.path, result.pending)
            if facts and {"frequency": facts} != project:
                project = {"frequency": facts}
                result = lint_text(doc.program, doc.display, doc.settings, doc.codes, project, parse)
        return result.diagnostics

    def check(self, uri: str, text: str) -> List[Diagnostic]:
        """A Python file's diagnostics (positions in its text)."""
        return self.lint(self.file(uri, text))

    def placed(self, doc: Document) -> Dict[str, List[Diagnostic]]:
        """Document URI -> its diagnostics, positioned in its own text (every
        document of ``doc`` has an entry, so stale findings are cleared)."""
        out: Dict[str, List[Diagnostic]] = {uri: [] for uri in doc.texts}
        with paused_gc():
            found = self.lint(doc)
        for d in found:
            uri, located = doc.place(d)
            out.setdefault(uri, []).append(located)
        if not self._frozen:
            # What is alive after the first analysis (the modules, the rules)
            # lives as long as the server: no later collection walks it again.
            self._frozen = True
            gc.collect()
            gc.freeze()
        return out

    # -- code actions -----------------------------------------------------------

    def _fixed_all(self, doc: Document) -> Optional[Dict[str, str]]:
        result = fix_text(doc.program, doc.display, doc.settings, doc.codes, unsafe=False,
                          accept=doc.accepts, project=self._project(doc))
        return doc.split(result.text) if result.text != doc.program else {}

    def _changes(self, doc: Document, new: Dict[str, str]) -> Tuple[Tuple[str, str, str], ...]:
        return tuple((uri, doc.texts[uri], text) for uri, text in sorted(new.items()))

    def fix_all(self, doc: Document) -> Optional[Action]:
        """Every safe fix, as ``torchlint fix`` applies them (the source action)."""
        new = self._fixed_all(doc)
        if not new:
            return None
        return Action("torchlint: apply every safe fix", FIX_ALL_KIND, self._changes(doc, new))

    def quick_fixes(self, doc: Document, uri: str, wanted: Set[Tuple[str, int]]) -> List[Action]:
        """For the diagnostics ``wanted`` ((code, 0-based row) in document ``uri``):
        each one's own fix (unsafe ones where ``unsafe-fixes`` is configured,
        marked), a ``# noqa`` for its line, and every safe fix of the file."""
        if not wanted:
            return []
        actions: List[Action] = []
        unsafe = self._unsafe(doc)
        any_safe = False
        for d, fixed in single_fixes(doc.program, doc.display, doc.settings, doc.codes, unsafe, self._project(doc)):
            at, located = doc.place(d)
            if d.fix is None:
                continue
            safe = d.fix.applicability is Applicability.SAFE
            any_safe = any_safe or safe
            if at != uri or (d.code, located.line - 1) not in wanted or fixed is None:
                continue
            new = doc.split(fixed)
            if not new:
                continue  # the fix would change a masked line or a cell boundary
            actions.append(Action(
                f"{d.fix.message} ({d.code})" + ("" if safe else " (unsafe)"), QUICK_FIX,
                self._changes(doc, new), preferred=safe, answers=(d.code or "", located.line - 1),
            ))
        actions.extend(self._noqa_actions(doc, uri, wanted))
        if any_safe:
            new = self._fixed_all(doc)
            if new:
                label = "notebook" if doc.notebook is not None else "file"
                actions.append(Action(f"Fix all safe torchlint fixes in this {label}", QUICK_FIX,
                                      self._changes(doc, new)))
        return actions

    def _noqa_actions(self, doc: Document, uri: str, wanted: Set[Tuple[str, int]]) -> List[Action]:
        text = doc.texts.get(uri)
        if text is None:
            return []
        actions = []
        for code, row in sorted(wanted):
            lines = split_lines(text)
            if not code.startswith("TL") or row >= len(lines):
                continue
            line = with_noqa(lines[row], code)
            if line is None:
                continue
            new = "\n".join([*lines[:row], line, *lines[row + 1:]])
            actions.append(Action(f"Disable {code} for this line", QUICK_FIX, ((uri, text, new),),
                                  answers=(code, row)))
        return actions


def rule_documentation(code: str) -> Optional[str]:
    """The Markdown that ``torchlint rule CODE`` prints, with the link to it."""
    from torchlint.docs import rule_section
    from torchlint.registry import all_rules
    from torchlint.reporters import rule_url

    rule = all_rules().get(code)
    if rule is None:
        return None
    return rule_section(rule, level=1) + f"\n[{code} in the documentation]({rule_url(code, rule.name)})\n"
