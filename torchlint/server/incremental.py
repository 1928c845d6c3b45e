"""Parsing a document again after an edit, one top-level statement at a time.

A keystroke changes one place of a file; parsing the whole file again costs as
much as the rest of the analysis.  The server keeps, per document, the last
text, its module and where each top-level statement starts, and parses only
the statements that an edit touches (with one more on each side), as a module
of their own with the file's parser configuration, then splices them into the
previous module.

This gives the module that parsing the whole text gives: the text before the
re-parsed statements is unchanged and ends at the start of a top-level
statement (the tokenizer's state there is empty: no open bracket, string or
indented block), the re-parsed text is complete statements (it parsed on its
own), and the text after starts again at a top-level statement.  Blank lines
and comments before a statement are its ``leading_lines`` (a piece's own
``header`` is moved there), and the file's ``header`` and ``footer`` are taken
from a piece that starts at the file's start or ends at its end.  Where that
reasoning does not hold the whole text is parsed: no previous module, an edit
the pieces cannot hold (the re-parsed text does not parse on its own: an open
bracket or string swallows what follows), a line after the piece that starts
indented (a comment that could belong to the piece's last block), or a text
that the engine refuses to parse as it is (see ``engine._lint_suppressed``).
tests/test_server.py compares the result with a full parse over many edits.
"""

from __future__ import annotations

import bisect
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional

import libcst as cst

from torchlint.parsing import parse_module


@dataclass
class Parsed:
    text: str
    module: cst.Module
    starts: List[int]  # offset of each top-level statement, then of the footer (or the end)
    first_block: int  # the first statement with an indented block (the file's first INDENT)


def _has_block(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.SimpleStatementLine):
        return False
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.IndentedBlock):
            return True
        stack.extend(current.children)
    return False


def _first_block(statements) -> int:
    return next((i for i, s in enumerate(statements) if _has_block(s)), len(statements))


def common_prefix(a: str, b: str) -> int:
    """The length of the common prefix of ``a`` and ``b`` (slices compared in C)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the common suffix of ``a`` and ``b``, at most ``limit``."""
    low, high = 0, min(len(a), len(b), limit)
    while low < high:
        middle = (low + high + 1) // 2
        if a[len(a) - middle:len(a) - low] == b[len(b) - middle:len(b) - low]:
            low = middle
        else:
            high = middle - 1
    return low


def _parse(text: str) -> cst.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_module(text)


def _starts(module: cst.Module, offset: int, statements) -> List[int]:
    """The start offset of each of ``statements``, the first at ``offset``, then the end."""
    out = [offset]
    for statement in statements:
        offset += len(module.code_for_node(statement))
        out.append(offset)
    return out


def full(text: str) -> Parsed:
    module = _parse(text)
    header = sum(len(module.code_for_node(line)) for line in module.header)
    starts = _starts(module, header, module.body)
    footer = sum(len(module.code_for_node(line)) for line in module.footer)
    first_block = _first_block(module.body)
    if starts[-1] + footer - (0 if module.has_trailing_newline else 1) != len(text):
        # LibCST does not give this text back as it was (a lone `\` line): the
        # offsets would drift, so the next edit parses the whole text again.
        first_block = len(module.body)
    return Parsed(text, module, starts, first_block)


class IncrementalParser:
    """The last parse of each document, and the next one from it."""

    def __init__(self) -> None:
        self._last: Dict[str, Parsed] = {}
        self.reparsed = 0  # statements parsed again, and full parses (tests, benchmarks)
        self.full_parses = 0

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)

    def parse(self, uri: str, text: str) -> cst.Module:
        """The module of ``text``; raises as ``libcst.parse_module`` does."""
        previous = self._last.get(uri)
        parsed = None
        if previous is not None:
            parsed = previous if previous.text == text else self._splice(previous, text)
        if parsed is None:
            self.full_parses += 1
            parsed = full(text)
        self._last[uri] = parsed
        return parsed.module

    def _splice(self, old: Parsed, text: str) -> Optional[Parsed]:
        body = old.module.body
        if not body:
            return None
        prefix = common_prefix(old.text, text)
        suffix = common_suffix(old.text, text, min(len(old.text), len(text)) - prefix)
        edit_start, edit_end = prefix, len(old.text) - suffix  # in the old text
        starts = old.starts
        first = max(bisect.bisect_right(starts, edit_start) - 2, 0)
        last = min(bisect.bisect_left(starts, edit_end) + 1, len(body))  # statements [first, last)
        if edit_start < starts[0]:
            first = 0
        if first <= old.first_block:
            # LibCST takes the file's indentation unit from its first indented
            # block, and marks every block that differs: it must stay as it was.
            return None
        begin = 0 if first == 0 else starts[first]
        end_old = len(old.text) if last == len(body) else starts[last]
        if end_old < edit_end:
            return None
        delta = len(text) - len(old.text)
        end_new = end_old + delta
        if last < len(body) and _indented_comment_follows(text, end_new):
            return None
        source = text[begin:end_new]
        try:
            piece = _parse(source)
        except (cst.ParserSyntaxError, RecursionError, ValueError):
            return None
        if piece.code != source:
            return None  # not given back as it was (see ``full``)
        statements = list(piece.body)
        config = old.module
        if piece.default_newline != config.default_newline or (
            piece.default_indent != config.default_indent and _first_block(statements) < len(statements)
        ):
            return None  # the piece's blocks would be read against another indentation
        if last < len(body) and piece.footer:
            return None  # lines after the last statement: the next statement's, in a full parse
        changes: Dict[str, object] = {}
        if piece.header:
            if not statements:
                return None
            statements[0] = statements[0].with_changes(
                leading_lines=[*piece.header, *statements[0].leading_lines])
        if last == len(body):
            changes["footer"] = piece.footer
            changes["has_trailing_newline"] = piece.has_trailing_newline
        module = old.module.with_changes(body=[*body[:first], *statements, *body[last:]], **changes)
        offset = sum(len(piece.code_for_node(line)) for line in piece.header) if first == 0 else begin
        placed = _starts(module, offset, statements)  # the new statements, then their end
        if last < len(body):
            new_starts = starts[:first] + placed[:-1] + [s + delta for s in starts[last:]]
        else:
            new_starts = starts[:first] + placed
        self.reparsed += len(statements)
        return Parsed(text, module, new_starts, old.first_block)


def _indented_comment_follows(text: str, offset: int) -> bool:
    """Whether the blank and comment lines from ``offset`` include an indented one
    (which a full parse could give to the block before it)."""
    while offset < len(text):
        end = text.find("\n", offset)
        line = text[offset:] if end < 0 else text[offset:end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return False
        if stripped and line[0] in " \t\f":
            return True
        if end < 0:
            return False
        offset = end + 1
    return False

