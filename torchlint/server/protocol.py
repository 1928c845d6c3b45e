"""The Language Server Protocol side of ``torchlint server`` (pygls 2)."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from torchlint import __version__
from torchlint.config import ConfigError
from torchlint.model import Applicability, Diagnostic, Kind
from torchlint.server.analysis import FIX_ALL_KIND, Action, Cell, Checker, Document, path_of, rule_documentation
from torchlint.server.text import minimal_edit, row_and_column, split_lines, units

SOURCE = "torchlint"
DEBOUNCE_SECONDS = 0.25
CONFIG_NAMES = ("pyproject.toml", "torchlint.toml")
logger = logging.getLogger(__name__)


class Session:
    """The server's state: open documents' pending analyses and what was published."""

    def __init__(self, server: LanguageServer, checker: Checker) -> None:
        self.server = server
        self.checker = checker
        # Every analysis and code action runs on this one thread, in order: the
        # checker's caches are never shared between threads, and the protocol
        # keeps reading messages (a new change cancels a pending analysis).
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchlint-server")
        self.tasks: Dict[str, asyncio.Task] = {}
        self.published: Dict[str, List[lsp.Diagnostic]] = {}  # document URI -> its diagnostics
        self.cells_of: Dict[str, Set[str]] = {}  # notebook URI -> cell URIs with published diagnostics

    @property
    def workspace(self):
        return self.server.workspace

    @property
    def encoding(self) -> str:
        return str(self.workspace.position_encoding or "utf-16")

    # -- documents ----------------------------------------------------------------

    def is_python(self, uri: str) -> bool:
        doc = self.workspace.text_documents.get(uri)
        if doc is None or self.workspace.get_notebook_document(cell_uri=uri) is not None:
            return False
        language = getattr(doc, "language_id", None)
        return (language in (None, "", "python") and not uri.endswith(".ipynb")) or uri.endswith((".py", ".pyi"))

    def snapshot(self, uri: str) -> Optional[Tuple[Any, Document]]:
        """(version, Document) of an open file or notebook, taken on the protocol's thread."""
        notebook = self.workspace.notebook_documents.get(uri)
        if notebook is not None:
            return notebook.version, self._notebook(uri, notebook)
        if not self.is_python(uri):
            return None
        doc = self.workspace.get_text_document(uri)
        return doc.version, (uri, doc.source)

    def _notebook(self, uri: str, notebook) -> Tuple[str, List[Cell], int]:
        cells = []
        for number, cell in enumerate(notebook.cells, 1):
            doc = self.workspace.text_documents.get(cell.document)
            if cell.kind == lsp.NotebookCellKind.Code and doc is not None and doc.language_id in (None, "python"):
                cells.append(Cell(number, cell.document, doc.source))
        return uri, cells, len(notebook.cells)

    def version(self, uri: str) -> Any:
        notebook = self.workspace.notebook_documents.get(uri)
        if notebook is not None:
            return notebook.version
        doc = self.workspace.text_documents.get(uri)
        return None if doc is None else doc.version

    def document(self, taken) -> Document:
        """The analysable Document of a snapshot (on the analysis thread)."""
        if len(taken) == 3:
            return self.checker.notebook(*taken)
        return self.checker.file(*taken)

    # -- analysis -----------------------------------------------------------------

    def schedule(self, uri: str, delay: float = 0.0) -> None:
        """Analyse ``uri`` after ``delay`` seconds; a later call cancels this one."""
        pending = self.tasks.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self.tasks[uri] = asyncio.ensure_future(self._analyse(uri, delay))

    def schedule_open(self, delay: float = DEBOUNCE_SECONDS, but: Optional[str] = None) -> None:
        """Analyse every open file and notebook again (their facts or configuration changed)."""
        uris = [u for u in self.workspace.text_documents if self.is_python(u)]
        uris += list(self.workspace.notebook_documents)
        for uri in uris:
            if uri != but:
                self.schedule(uri, delay)

    async def _analyse(self, uri: str, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            taken = self.snapshot(uri)
            if taken is None:
                return
            version, state = taken
            loop = asyncio.get_running_loop()
            try:
                placed = await loop.run_in_executor(self.executor, self._placed, state)
            except ConfigError as exc:
                self.server.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error,
                                                                      message=f"torchlint: {exc}"))
                placed = {u: [] for u in self._uris_of(state)}
            if self.version(uri) != version:
                return  # the document changed meanwhile; its own analysis is scheduled
            self.publish(uri, placed, version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - report it, keep serving
            logger.exception("torchlint server: analysis of %s failed", uri)
            self.server.window_log_message(lsp.LogMessageParams(
                type=lsp.MessageType.Error, message=f"torchlint: analysis of {uri} failed: {exc!r}"))
        finally:
            if self.tasks.get(uri) is asyncio.current_task():
                del self.tasks[uri]

    @staticmethod
    def _uris_of(state) -> List[str]:
        return [c.uri for c in state[1]] if len(state) == 3 else [state[0]]

    def _placed(self, state) -> Dict[str, Tuple[str, List[Diagnostic]]]:
        doc = self.document(state)
        return {uri: (doc.texts[uri], found) for uri, found in self.checker.placed(doc).items() if uri in doc.texts}

    def publish(self, uri: str, placed: Dict[str, Any], version: Any) -> None:
        notebook = uri in self.workspace.notebook_documents
        for target, entry in placed.items():
            text, found = entry if isinstance(entry, tuple) else ("", entry)
            lines = split_lines(text)
            path = path_of(uri)
            folder = self.checker.index.folder_of(path) if path is not None else None
            converted = [self.to_lsp(d, lines, folder) for d in found]
            self.published[target] = converted
            cell_version = None
            if notebook:
                cell = self.workspace.text_documents.get(target)
                cell_version = None if cell is None else cell.version
            self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
                uri=target, version=cell_version if notebook else version, diagnostics=converted))
        if notebook:
            for gone in self.cells_of.get(uri, set()) - set(placed):
                self.clear(gone)
            self.cells_of[uri] = set(placed)

    def clear(self, uri: str) -> None:
        self.published.pop(uri, None)
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # -- conversions --------------------------------------------------------------

    def to_lsp(self, d: Diagnostic, lines: List[str], folder: Optional[Path] = None) -> lsp.Diagnostic:
        return to_lsp(d, lines, self.encoding, folder)

    def edit(self, changes: Sequence[Tuple[str, str, str]]) -> lsp.WorkspaceEdit:
        edits = []
        for uri, before, after in changes:
            start, end, new = minimal_edit(before, after)
            doc = self.workspace.text_documents.get(uri)
            edits.append(lsp.TextDocumentEdit(
                text_document=lsp.OptionalVersionedTextDocumentIdentifier(
                    uri=uri, version=None if doc is None else doc.version),
                edits=[lsp.TextEdit(range=lsp.Range(start=self._offset(before, start),
                                                    end=self._offset(before, end)), new_text=new)],
            ))
        return lsp.WorkspaceEdit(document_changes=edits)

    def _offset(self, text: str, offset: int) -> lsp.Position:
        row, column, line = row_and_column(text, offset)
        return lsp.Position(line=row, character=units(line, column, self.encoding))

    def code_action(self, action: Action, diagnostics: Sequence[lsp.Diagnostic]) -> lsp.CodeAction:
        answered = [d for d in diagnostics if action.answers is not None
                    and (d.code, d.range.start.line) == action.answers]
        return lsp.CodeAction(title=action.title, kind=action.kind, edit=self.edit(action.changes),
                              diagnostics=answered or None, is_preferred=action.preferred or None)

    # -- hover ----------------------------------------------------------------------

    def hover(self, uri: str, at: lsp.Position) -> Optional[lsp.Hover]:
        here = [d for d in self.published.get(uri, []) if _contains(d.range, at.line, at.character)]
        parts, codes = [], []
        for d in here:
            code = str(d.code)
            text = rule_documentation(code) if code not in codes else None
            if text is not None:
                codes.append(code)
                parts.append(text)
        if not parts:
            return None
        first = here[0].range
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value="\n---\n\n".join(parts)),
                         range=first)


def _position(lines: List[str], line: int, column: int, encoding: str) -> lsp.Position:
    row = max(line - 1, 0)
    text = lines[row] if row < len(lines) else ""
    return lsp.Position(line=row, character=units(text, max(column - 1, 0), encoding))


def to_lsp(d: Diagnostic, lines: List[str], encoding: str = "utf-16", folder: Optional[Path] = None) -> lsp.Diagnostic:
    """A diagnostic in LSP's terms; ``lines``: the text of its document."""
    from torchlint.reporters import rule_url, runs_note

    fixable = None if d.fix is None else d.fix.applicability.value
    note = runs_note(d) if d.runs is not None and d.via else None
    return lsp.Diagnostic(
        range=lsp.Range(start=_position(lines, d.line, d.column, encoding),
                        end=_position(lines, d.end_line, d.end_column, encoding)),
        message=d.message if note is None else f"{d.message}\n{note}",
        related_information=_call_site(d.via, note, folder) if note else None,
        severity=lsp.DiagnosticSeverity.Error if d.kind is not Kind.RULE else lsp.DiagnosticSeverity.Warning,
        code=d.code or d.label,
        code_description=lsp.CodeDescription(href=rule_url(d.code, d.name)) if d.code else None,
        source=SOURCE,
        data={"fixable": fixable, "fix": None if d.fix is None else d.fix.message,
              "unsafe": d.fix is not None and d.fix.applicability is Applicability.UNSAFE},
    )


def _call_site(via: str, note: str, folder: Optional[Path]) -> Optional[List[lsp.DiagnosticRelatedInformation]]:
    """The call that makes the code hot ("path:line": relative to the workspace
    folder for another file's call), as a location the editor can open."""
    name, _, line = via.rpartition(":")
    path = next((p for p in ((folder / name) if folder else None, Path(name).resolve())
                 if p is not None and p.is_file()), None)
    if path is None or not line.isdigit():
        return None
    start = lsp.Position(line=max(int(line) - 1, 0), character=0)
    return [lsp.DiagnosticRelatedInformation(
        location=lsp.Location(uri=path.as_uri(), range=lsp.Range(start=start, end=start)), message=note)]


def _contains(r: lsp.Range, line: int, character: int) -> bool:
    after_start = (line, character) >= (r.start.line, r.start.character)
    before_end = (line, character) <= (r.end.line, r.end.character)
    return after_start and before_end


def _folders(params: lsp.InitializeParams) -> List[Path]:
    uris = [f.uri for f in params.workspace_folders or []]
    if not uris and params.root_uri:
        uris = [params.root_uri]
    if not uris and params.root_path:
        return [Path(params.root_path)]
    return [p for p in (path_of(u) for u in uris) if p is not None]


def build_server(config: Optional[Path] = None) -> LanguageServer:
    notebooks = lsp.NotebookDocumentSyncOptions(
        notebook_selector=[lsp.NotebookDocumentFilterWithCells(
            notebook="*", cells=[lsp.NotebookCellLanguage(language="python")])],
        save=True,
    )
    server = LanguageServer(SOURCE, __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
                            notebook_document_sync=notebooks)
    session = Session(server, Checker(config))
    _text_features(server, session)
    _notebook_features(server, session)
    _workspace_features(server, session)
    _action_features(server, session)
    return server


def _text_features(server: LanguageServer, session: Session) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: lsp.DidOpenTextDocumentParams) -> None:
        session.schedule(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: lsp.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        notebook = session.workspace.get_notebook_document(cell_uri=uri)
        session.schedule(notebook.uri if notebook is not None else uri, DEBOUNCE_SECONDS)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        session.schedule(uri)
        if uri.endswith((".py", ".pyi")):
            # Other files' facts may come from this one (on the analysis thread,
            # before the analyses scheduled here).
            session.executor.submit(session.checker.index.changed)
            session.schedule_open(but=uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: lsp.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        task = session.tasks.pop(uri, None)
        if task is not None:
            task.cancel()
        session.executor.submit(session.checker.forget, uri)
        session.clear(uri)


def _notebook_features(server: LanguageServer, session: Session) -> None:
    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def did_open(params: lsp.DidOpenNotebookDocumentParams) -> None:
        session.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def did_change(params: lsp.DidChangeNotebookDocumentParams) -> None:
        session.schedule(params.notebook_document.uri, DEBOUNCE_SECONDS)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def did_save(params: lsp.DidSaveNotebookDocumentParams) -> None:
        session.schedule(params.notebook_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def did_close(params: lsp.DidCloseNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        task = session.tasks.pop(uri, None)
        if task is not None:
            task.cancel()
        session.executor.submit(session.checker.forget, uri)
        published = {c.uri for c in params.cell_text_documents if c.uri in session.published}
        for cell in sorted(published | session.cells_of.pop(uri, set())):
            session.clear(cell)


def _workspace_features(server: LanguageServer, session: Session) -> None:
    @server.feature(lsp.INITIALIZE)
    def initialize(params: lsp.InitializeParams) -> None:
        session.checker.index.set_folders(_folders(params))

    @server.feature(lsp.INITIALIZED)
    async def initialized(params: lsp.InitializedParams) -> None:
        workspace = server.client_capabilities.workspace
        watched = workspace.did_change_watched_files if workspace is not None else None
        if watched is None or not watched.dynamic_registration:
            return
        watchers = [lsp.FileSystemWatcher(glob_pattern=p) for p in ("**/*.py", "**/pyproject.toml", "**/torchlint.toml")]
        await server.client_register_capability_async(lsp.RegistrationParams(registrations=[lsp.Registration(
            id="torchlint-watched-files", method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(watchers=watchers))]))

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(params: lsp.DidChangeWatchedFilesParams) -> None:
        names = [(path_of(c.uri) or Path(c.uri)).name for c in params.changes]
        if any(name in CONFIG_NAMES for name in names):
            session.executor.submit(session.checker.reload)
        elif names:
            session.executor.submit(session.checker.index.changed)
        if names:
            session.schedule_open()

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        folders = [p for p in (path_of(f.uri) for f in session.workspace.folders.values()) if p is not None]
        session.executor.submit(session.checker.index.set_folders, folders)
        session.schedule_open()


def _action_features(server: LanguageServer, session: Session) -> None:
    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(params: lsp.HoverParams) -> Optional[lsp.Hover]:
        return session.hover(params.text_document.uri, params.position)

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    async def code_action(params: lsp.CodeActionParams) -> List[lsp.CodeAction]:
        uri = params.text_document.uri
        notebook = session.workspace.get_notebook_document(cell_uri=uri)
        taken = session.snapshot(notebook.uri if notebook is not None else uri)
        if taken is None:
            return []
        only = [str(k) for k in params.context.only] if params.context.only is not None else None
        quick = only is None or any(lsp.CodeActionKind.QuickFix.value.startswith(k) for k in only)
        fix_all = only is not None and any(FIX_ALL_KIND.startswith(k) for k in only)
        wanted = {(str(d.code), d.range.start.line) for d in params.context.diagnostics if d.source == SOURCE}

        def compute() -> List[Action]:
            doc = session.document(taken[1])
            found = session.checker.quick_fixes(doc, uri, wanted) if quick else []
            whole = session.checker.fix_all(doc) if fix_all else None
            return found + ([whole] if whole is not None else [])

        actions = await asyncio.get_running_loop().run_in_executor(session.executor, compute)
        if session.version(notebook.uri if notebook is not None else uri) != taken[0]:
            return []  # the document changed meanwhile: these edits would not apply
        return [session.code_action(a, params.context.diagnostics) for a in actions]


def serve(config: Optional[Path] = None) -> None:
    build_server(config).start_io()
