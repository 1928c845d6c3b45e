"""`torchlint server`: findings in the editor, over the Language Server Protocol.

The server speaks LSP on standard input and output (pygls).  It checks a
Python document when it is opened, changed or saved, with the configuration
that applies to the document's path (the nearest ``pyproject.toml`` /
``torchlint.toml``, as ``check`` finds it, ``per-file-ignores`` included), and
publishes the findings.  Code actions offer, for a finding under the cursor,
its fix (safe fixes always; unsafe ones only where ``unsafe-fixes`` is
configured, as Ruff's server does) and a ``# noqa: CODE`` for the line; the
source action ``source.fixAll.torchlint`` applies every safe fix, as
``torchlint fix`` would.

Positions: torchlint counts columns in characters; LSP counts UTF-16 code
units, so columns are converted per line (a line with an emoji before a finding
still gets the right range).

Not covered: notebooks (LSP's notebook synchronisation is not implemented;
``check`` covers them), and documents that are not files (``untitled:``) are
checked with the configuration of the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from urllib.parse import unquote, urlparse

from torchlint import __version__
from torchlint.config import ConfigError, Resolver
from torchlint.engine import codes_for_path, fix_text, lint_text, single_fixes
from torchlint.model import Applicability, Diagnostic, Kind

SOURCE = "torchlint"
FIX_ALL_KIND = "source.fixAll.torchlint"


def _path_of(uri: str) -> Optional[Path]:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


def utf16_column(line: str, column: int) -> int:
    """The UTF-16 offset of the 0-based character ``column`` in ``line``."""
    prefix = line[:column]
    return len(prefix.encode("utf-16-le")) // 2 + max(0, column - len(line))


def _minimal_edit(before: str, after: str) -> Tuple[int, int, str]:
    """(start, end, replacement) in character offsets of ``before``."""
    start = 0
    limit = min(len(before), len(after))
    while start < limit and before[start] == after[start]:
        start += 1
    end_b, end_a = len(before), len(after)
    while end_b > start and end_a > start and before[end_b - 1] == after[end_a - 1]:
        end_b -= 1
        end_a -= 1
    return start, end_b, after[start:end_a]


class Checker:
    """What the server does, without the protocol (tested directly too)."""

    def __init__(self, config: Optional[Path] = None) -> None:
        self.resolver = Resolver(config=config)

    def profile(self, path: Optional[Path]):
        if path is None:
            return self.resolver.run_profile
        return self.resolver.for_file(path)

    def _display(self, path: Optional[Path]) -> str:
        if path is None:
            return "untitled.py"
        try:
            return os.path.relpath(path)
        except ValueError:
            return str(path)

    def check(self, uri: str, text: str) -> List[Diagnostic]:
        path = _path_of(uri)
        profile = self.profile(path)
        display = self._display(path)
        codes = codes_for_path(display, profile.settings, profile.codes)
        return lint_text(text, display, profile.settings, codes).diagnostics

    def single_fixes(self, uri: str, text: str) -> List[Tuple[Diagnostic, Optional[str]]]:
        path = _path_of(uri)
        profile = self.profile(path)
        display = self._display(path)
        codes = codes_for_path(display, profile.settings, profile.codes)
        return single_fixes(text, display, profile.settings, codes, profile.settings.unsafe_fixes)

    def fix_all(self, uri: str, text: str) -> str:
        path = _path_of(uri)
        profile = self.profile(path)
        display = self._display(path)
        codes = codes_for_path(display, profile.settings, profile.codes)
        return fix_text(text, display, profile.settings, codes, unsafe=False).text


def build_server(config: Optional[Path] = None):
    from lsprotocol import types as lsp
    from pygls.lsp.server import LanguageServer

    server = LanguageServer(SOURCE, __version__, text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
    checker = Checker(config)

    def is_python(doc) -> bool:
        language = getattr(doc, "language_id", None)
        return (language in (None, "", "python") and not doc.uri.endswith(".ipynb")) or doc.uri.endswith(".py")

    def position(lines: List[str], line: int, column: int):
        row = max(line - 1, 0)
        text = lines[row] if row < len(lines) else ""
        return lsp.Position(line=row, character=utf16_column(text, max(column - 1, 0)))

    def offset_position(text: str, offset: int):
        before = text[:offset]
        row = before.count("\n")
        start = before.rfind("\n") + 1
        line = text[start:].split("\n", 1)[0]
        return lsp.Position(line=row, character=utf16_column(line, offset - start))

    def to_lsp(d: Diagnostic, lines: List[str]):
        return lsp.Diagnostic(
            range=lsp.Range(start=position(lines, d.line, d.column), end=position(lines, d.end_line, d.end_column)),
            message=d.message,
            severity=lsp.DiagnosticSeverity.Error if d.kind is not Kind.RULE else lsp.DiagnosticSeverity.Warning,
            code=d.code or d.label,
            source=SOURCE,
        )

    def publish(uri: str) -> None:
        doc = server.workspace.get_text_document(uri)
        if not is_python(doc):
            return
        try:
            found = checker.check(uri, doc.source)
        except ConfigError as exc:
            server.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error, message=f"torchlint: {exc}"))
            found = []
        lines = doc.source.split("\n")
        server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, version=doc.version, diagnostics=[to_lsp(d, lines) for d in found])
        )

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: lsp.DidOpenTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: lsp.DidChangeTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: lsp.DidSaveTextDocumentParams) -> None:
        publish(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: lsp.DidCloseTextDocumentParams) -> None:
        server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    def replace(uri: str, version, before: str, after: str):
        start, end, new = _minimal_edit(before, after)
        edit = lsp.TextEdit(range=lsp.Range(start=offset_position(before, start), end=offset_position(before, end)),
                            new_text=new)
        return lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
            text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=[edit])])

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL_KIND]),
    )
    def code_action(params: lsp.CodeActionParams):
        uri = params.text_document.uri
        doc = server.workspace.get_text_document(uri)
        if not is_python(doc):
            return []
        text = doc.source
        only = params.context.only
        actions = []
        wanted = {(d.code, d.range.start.line) for d in params.context.diagnostics if d.source == SOURCE}
        if only is None or any(str(k).startswith(lsp.CodeActionKind.QuickFix) for k in only):
            lines = text.split("\n")
            for d, fixed in checker.single_fixes(uri, text):
                if (d.code, d.line - 1) not in wanted or fixed is None or d.fix is None:
                    continue
                unsafe = d.fix.applicability is Applicability.UNSAFE
                actions.append(lsp.CodeAction(
                    title=f"{d.fix.message} ({d.code}{', unsafe' if unsafe else ''})",
                    kind=lsp.CodeActionKind.QuickFix,
                    edit=replace(uri, doc.version, text, fixed),
                    is_preferred=not unsafe,
                ))
            for code, row in sorted(wanted):
                if code is None or not str(code).startswith("TL") or row >= len(lines):
                    continue
                line = lines[row]
                if "# noqa" in line:
                    continue
                end = lsp.Position(line=row, character=utf16_column(line, len(line)))
                actions.append(lsp.CodeAction(
                    title=f"Disable {code} for this line",
                    kind=lsp.CodeActionKind.QuickFix,
                    edit=lsp.WorkspaceEdit(document_changes=[lsp.TextDocumentEdit(
                        text_document=lsp.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc.version),
                        edits=[lsp.TextEdit(range=lsp.Range(start=end, end=end), new_text=f"  # noqa: {code}")],
                    )]),
                ))
        if only is not None and any(FIX_ALL_KIND.startswith(str(k)) for k in only):
            fixed_all = checker.fix_all(uri, text)
            if fixed_all != text:
                actions.append(lsp.CodeAction(
                    title="torchlint: apply every safe fix", kind=FIX_ALL_KIND,
                    edit=replace(uri, doc.version, text, fixed_all),
                ))
        return actions

    return server


def serve(config: Optional[Path] = None) -> None:
    build_server(config).start_io()
