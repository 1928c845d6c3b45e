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


def changed_span(before: str, after: str) -> Tuple[int, int, int]:
    """``(start, end in before, end in after)``: the span between the common
    beginning and the common end of two texts, in character offsets."""
    limit = min(len(before), len(after))
    start = _longest(limit, lambda n: before[:n] == after[:n])
    end_before, end_after = len(before), len(after)
    # the common end, not overlapping the common beginning
    common = _longest(limit - start, lambda n: before[end_before - n:] == after[end_after - n:])
    return start, end_before - common, end_after - common


def _longest(limit: int, holds) -> int:
    """The largest ``n <= limit`` for which ``holds(n)``, given that it holds
    for 0 and, when it holds for some ``n``, for every smaller one: a bisection
    of slice comparisons, not a loop over the characters of the file."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if holds(middle):
            low = middle
        else:
            high = middle - 1
    return low


def line_starts(text: str) -> List[int]:
    """The offset of each line's first character (lines end at ``\\n``)."""
    starts = [0]
    at = text.find("\n")
    while at != -1:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


def text_edit(before: str, after: str) -> Optional[Dict[str, Any]]:
    """The one replacement that turns ``before`` into ``after`` (the span between
    their common beginning and common end); None when they are equal."""
    if before == after:
        return None
    start, end_before, end_after = changed_span(before, after)
    # Whole words: `True` for `False`, not `Tru` for `Fals`.
    while start > 0 and start < end_before and _word(before[start - 1]) and _word(before[start]):
        start -= 1
    while end_before < len(before) and _word(before[end_before]) and (
            end_before > start and _word(before[end_before - 1])):
        end_before += 1
        end_after += 1
    starts = line_starts(before)
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
    if is_notebook(display):
        return _for_notebook(text, display, settings, codes)
    return _edits(text, alone(text, display, settings, codes, project))


def of_analysis(text: str, result) -> Dict[Key, List[Dict[str, Any]]]:
    """``for_file`` of a Python text from its analysis (``engine.lint_text``'s
    result with the same settings, codes and project facts): the check's worker
    gives the edits of the tree it has just analysed, without a second parse."""
    return _edits(text, _alone_in(text, result))


def _edits(text: str, pairs: List[Tuple[Diagnostic, Optional[str]]]) -> Dict[Key, List[Dict[str, Any]]]:
    out: Dict[Key, List[Dict[str, Any]]] = {}
    for diagnostic, fixed in pairs:
        edit = None if fixed is None else text_edit(text, fixed)
        out[key(diagnostic)] = [] if edit is None else [edit]
    return out


def alone(text: str, display: str, settings, codes: Sequence[str],
          project: Optional[Dict[str, Any]] = None) -> List[Tuple[Diagnostic, Optional[str]]]:
    """Each fixable diagnostic with the text that applying only its fix gives
    (None when the fix raises or gives code that does not parse), as
    ``engine.single_fixes``; an expression replaced by one line of code is
    spliced into the text instead of regenerating the whole module."""
    from torchlint.screen import could_concern_torch
    from torchlint.threads import on_large_stack

    if not codes or not could_concern_torch(text, codes):
        return []
    return on_large_stack(_alone, text, display, settings, codes, project)


def _alone(text, display, settings, codes, project) -> List[Tuple[Diagnostic, Optional[str]]]:
    from torchlint import engine

    return _alone_in(text, engine._lint_text(text, display, settings, codes, project))


def _alone_in(text: str, result) -> List[Tuple[Diagnostic, Optional[str]]]:
    import ast

    import libcst as cst

    from torchlint import engine

    if result.module is None or result.positions is None:
        return []
    starts = line_starts(text)
    tree = _syntax_tree(text, ast)  # None: the text does not compile, LibCST judges the fixes
    out: List[Tuple[Diagnostic, Optional[str]]] = []
    for finding in result.findings:
        if finding.fix is None or finding.diagnostic is None:
            continue
        try:
            replacement = finding.fix.build()
        except Exception:  # noqa: BLE001 - a broken codemod is fix_text's to report
            out.append((finding.diagnostic, None))
            continue
        target = finding.fix.target if finding.fix.target is not None else finding.node
        fixed = _splice(text, starts, result, target, replacement, cst)
        if fixed is None:
            fixed = _splice_statement(text, result.module, target, replacement, engine)
        if fixed is None:
            fixed = engine._applied(result.module, [(finding, replacement)])
        if fixed is None:  # a statement LibCST cannot rebuild (torchlint.parsing)
            out.append((finding.diagnostic, None))
            continue
        if tree is not None:
            valid = fixed != text and _fix_parses(text, fixed, tree, starts, ast)
        else:
            valid = engine._valid(fixed, False)
        out.append((finding.diagnostic, fixed if valid and fixed != text else None))
    out.sort(key=lambda pair: pair[0].sort_key())
    return out


def _splice(text: str, starts: List[int], result, target, replacement, cst) -> Optional[str]:
    """``text`` with ``target`` (an expression on one line) replaced by one line of
    code; None when the replacement is not that simple (a statement, a removal,
    several lines: their code depends on the indentation around them)."""
    if not isinstance(target, cst.BaseExpression) or not isinstance(replacement, cst.BaseExpression):
        return None
    (line, column), (end_line, end_column) = result.positions[target]
    if line != end_line:
        return None
    code = result.module.code_for_node(replacement)
    if "\n" in code or "\r" in code:
        return None
    start, end = starts[line - 1] + column, starts[line - 1] + end_column
    return text[:start] + code + text[end:]


def _splice_statement(text: str, module, target, replacement, engine) -> Optional[str]:
    """``text`` with the innermost statement of a body that holds ``target``
    regenerated with ``target`` replaced (the same replacement as
    ``engine._apply`` over the whole module, which costs a transformation and a
    code generation of every node): the statement's code, with the indentation
    of the blocks around it, is found once at a line start in the text, and
    its new code goes there.  None when it is not found so (or the statement
    itself is removed), for the whole module to be regenerated."""
    import libcst as cst
    from libcst._nodes.internal import CodegenState

    from torchlint.positions import block_indent, found_once, paths_to

    path = paths_to(module, {id(target)}).get(id(target))
    if path is None or len(path) < 2 or not any(path[1] is top for top in module.body):
        return None
    indents: List[str] = []
    statement, around = path[1], []
    for i in range(2, len(path)):
        parent = path[i - 1]
        if type(parent) is cst.IndentedBlock:
            indents.append(block_indent(module, parent))
            statement, around = path[i], list(indents)

    def code_of(node) -> str:
        state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                             indent_tokens=list(around))
        node._codegen(state)
        return "".join(state.tokens)

    old = code_of(statement)
    at = found_once(text, old)
    if at is None:
        return None
    try:
        new = statement.visit(engine._Replacer({id(target): replacement}))
    except (cst.CSTValidationError, TypeError):
        return None  # a statement LibCST cannot rebuild (torchlint.parsing)
    if not isinstance(new, cst.CSTNode):
        return None
    return text[:at] + code_of(new) + text[at + len(old):]


def _parses(text: str, ast) -> bool:
    return _syntax_tree(text, ast) is not None


def _syntax_tree(text: str, ast):
    """``ast.parse(text)``, None when the text does not parse."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def _fix_parses(text: str, fixed: str, tree, starts: List[int], ast) -> bool:
    """Whether ``fixed``, ``text`` (which parses into ``tree``) with one span
    changed, parses.  Only the top-level statements around the span are parsed
    again: between two of them (``_cuts``) the tokenizer is at a line start with
    nothing open, so when these parse alone the whole text does too.  When they
    do not, the whole text is parsed (the change could join them to what
    follows).  A text with a ``\r``, which ``ast`` counts as a line break and
    ``starts`` does not, is parsed whole."""
    if "\r" in text:
        return _parses(fixed, ast)
    start, end, new_end = changed_span(text, fixed)
    cuts = _cuts(tree, text, starts)
    # The lines (from 1) of the span's first character and of the first one after
    # it: the line break that ends the piece is then not changed.
    first = bisect.bisect_right(starts, start)
    last = bisect.bisect_right(starts, end)
    before = cuts[bisect.bisect_left(cuts, first) - 1]  # the cuts around them
    after = cuts[bisect.bisect_left(cuts, last)]
    piece_start = starts[before]
    piece_end = (starts[after] if after < len(starts) else len(text)) + new_end - end
    return _parses(fixed[piece_start:piece_end], ast) or _parses(fixed, ast)


def _cuts(tree, text: str, starts: List[int]) -> List[int]:
    """0, the lines after which a top-level statement ends and the next one
    starts on a later line (the line not continued by a backslash), and the
    number of lines: the text between two of them is whole statements."""
    cuts = [0]
    body = tree.body
    for statement, following in zip(body, body[1:]):
        line = statement.end_lineno
        if following.lineno > line and text[starts[line] - 2:starts[line] - 1] != "\\":
            cuts.append(line)
    cuts.append(len(starts))
    return cuts


def _for_notebook(text: str, display: str, settings, codes: Sequence[str]) -> Dict[Key, List[Dict[str, Any]]]:
    from torchlint.notebook import NotebookError, parse

    try:
        notebook = parse(text)
    except NotebookError:
        return {}
    return _notebook_edits(notebook, alone(notebook.program, display, settings, codes))


def of_notebook_analysis(notebook, result) -> Dict[Key, List[Dict[str, Any]]]:
    """``for_file`` of a notebook from the analysis of its program
    (``engine.lint_text``'s result on ``notebook.program``, with the same
    settings and codes): the check's worker gives the edits, without a second
    analysis in the main process."""
    return _notebook_edits(notebook, _alone_in(notebook.program, result))


def _notebook_edits(notebook, pairs: List[Tuple[Diagnostic, Optional[str]]]) -> Dict[Key, List[Dict[str, Any]]]:
    out: Dict[Key, List[Dict[str, Any]]] = {}
    for diagnostic, fixed in pairs:
        located = notebook.locate(diagnostic)
        cells = None if fixed is None else notebook.split(fixed)
        edits = []
        for cell in notebook.cells if cells is not None else ():
            edit = text_edit(cell.source, cells[cell.number])
            if edit is not None:
                edits.append({**edit, "cell": cell.number})
        out[key(located)] = edits
    return out
