"""`torchlint server`: findings in the editor, over the Language Server Protocol.

The server speaks LSP on standard input and output (pygls).  It checks a
Python file, or the code cells of a notebook (LSP 3.17 notebook documents),
when it is opened or saved, and shortly after it changes (debounced: a change
within ``DEBOUNCE_SECONDS`` of the previous one cancels the pending analysis),
with the configuration that applies to the document's path (the nearest
``pyproject.toml`` / ``torchlint.toml``, as ``check`` finds it,
``per-file-ignores`` included), and publishes the findings.  Each carries its
code, a link to the rule's documentation (``codeDescription``) and whether it
has a safe or an unsafe fix (``data``); hovering over one shows the rule's
documentation.

Code actions: for a finding under the cursor, its fix (safe fixes always;
unsafe ones, marked "(unsafe)" and never preferred, only where
``unsafe-fixes`` is configured, as Ruff's server does), a ``# noqa: CODE`` for
the line, and "fix all safe fixes in this file"; the source action
``source.fixAll.torchlint`` applies every safe fix, as ``torchlint fix`` would.
In a notebook the same actions edit the cells they concern.

Cross-module facts (``torchlint.server.index``): a function of the open file
that its own module never calls gets how often it runs from its callers among
the workspace folder's files, refreshed when a file is saved or the editor's
file watcher reports a change.

Modules: ``analysis`` (documents, linting, code actions; no protocol),
``incremental`` (parsing again only the statements an edit touched),
``index`` (the workspace's cross-module facts), ``text`` (positions and
edits), ``protocol`` (pygls handlers).  Not covered: documents that are not
files (``untitled:``) are checked with the configuration of the current
directory and get no cross-module facts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from torchlint.server.text import minimal_edit as _minimal_edit  # noqa: F401 (tests)
from torchlint.server.text import utf16_column  # noqa: F401 (part of this package's interface)


def build_server(config: Optional[Path] = None):
    from torchlint.server.protocol import build_server as build

    return build(config)


def serve(config: Optional[Path] = None) -> None:
    build_server(config).start_io()
