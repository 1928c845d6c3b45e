"""The edits of each fix, as Ruff's JSON output gives them (``fix.edits``).

A fix is a codemod applied to the syntax tree; its edit is what applying only
that fix changes in the text: the span of the original text it replaces
(``location`` to ``end_location``, rows and columns from 1, columns counting
characters, the end exclusive) and the new ``content``.  In a notebook the
positions are in the cell, as the diagnostic's own.
"""

from __future__ import annotations

import bisect
from typing import Any, Dict, List, Optional, Sequence, Tuple

from torchlint.model import Diagnostic
from torchlint.source import is_notebook

Key = Tuple[str, Optional[int], int, int, Optional[str]]


def key(d: Diagnostic) -> Key:
    return (d.path, d.cell, d.line, d.column, d.code)


def text_edit(before: str, after: str) -> Optional[Dict[str, Any]]:
    """The one replacement that turns ``before`` into ``after`` (the span between
    their common beginning and common end); None when they are equal."""
    if before == after:
        return None
    start = 0
    limit = min(len(before), len(after))
    while start < limit and before[start] == after[start]:
        start += 1
    end_before, end_after = len(before), len(after)
    while end_before > start and end_after > start and before[end_before - 1] == after[end_after - 1]:
        end_before -= 1
        end_after -= 1
    # Whole words: `True` for `False`, not `Tru` for `Fals`.
    while start > 0 and start < end_before and _word(before[start - 1]) and _word(before[start]):
        start -= 1
    while end_before < len(before) and _word(before[end_before]) and (
            end_before > start and _word(before[end_before - 1])):
        end_before += 1
        end_after += 1
    starts = [0] + [i + 1 for i, ch in enumerate(before) if ch == "\n"]
    return {
        "content": after[start:end_after],
        "location": _point(starts, start),
        "end_location": _point(starts, end_before),
    }


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _point(starts: List[int], offset: int) -> Dict[str, int]:
    row = bisect.bisect_right(starts, offset) - 1
    return {"row": row + 1, "column": offset - starts[row] + 1}


def for_file(text: str, display: str, settings, codes: Sequence[str],
             project: Optional[Dict[str, Any]] = None) -> Dict[Key, List[Dict[str, Any]]]:
    """Each fixable diagnostic of a file (``key``) -> its edits; every fix, safe or
    not (the JSON says which by ``applicability``)."""
    from torchlint.engine import single_fixes

    if is_notebook(display):
        return _for_notebook(text, display, settings, codes)
    out: Dict[Key, List[Dict[str, Any]]] = {}
    for diagnostic, fixed in single_fixes(text, display, settings, codes, True, project):
        edit = None if fixed is None else text_edit(text, fixed)
        out[key(diagnostic)] = [] if edit is None else [edit]
    return out


def _for_notebook(text: str, display: str, settings, codes: Sequence[str]) -> Dict[Key, List[Dict[str, Any]]]:
    from torchlint.engine import single_fixes
    from torchlint.notebook import NotebookError, parse

    try:
        notebook = parse(text)
    except NotebookError:
        return {}
    out: Dict[Key, List[Dict[str, Any]]] = {}
    for diagnostic, fixed in single_fixes(notebook.program, display, settings, codes, True):
        located = notebook.locate(diagnostic)
        cells = None if fixed is None else notebook.split(fixed)
        edits = []
        for cell in notebook.cells if cells is not None else ():
            edit = text_edit(cell.source, cells[cell.number])
            if edit is not None:
                edits.append({**edit, "cell": cell.number})
        out[key(located)] = edits
    return out
