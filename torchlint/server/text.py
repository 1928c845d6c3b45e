"""Positions and edits in an editor's terms.

torchlint counts lines from 1 and columns in characters from 1; LSP counts
both from 0, and columns in the code units of the position encoding the client
and server agreed on (UTF-16 unless the client offers another), so columns are
converted per line (a line with an emoji before a finding still gets the right
range).
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from torchlint.fix_edits import changed_span

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def utf16_column(line: str, column: int) -> int:
    """The UTF-16 offset of the 0-based character ``column`` in ``line``."""
    return units(line, column, UTF16)


def units(line: str, column: int, encoding: str = UTF16) -> int:
    """The offset, in code units of ``encoding``, of the 0-based character
    ``column`` in ``line`` (past the end: one unit per missing character)."""
    prefix = line[:column]
    beyond = max(0, column - len(line))
    if encoding == UTF32:
        return len(prefix) + beyond
    if encoding == UTF8:
        return len(prefix.encode("utf-8", "surrogatepass")) + beyond
    return len(prefix.encode("utf-16-le", "surrogatepass")) // 2 + beyond


def characters(line: str, offset: int, encoding: str = UTF16) -> int:
    """The 0-based character column of the code-unit ``offset`` in ``line``
    (the inverse of ``units``; an offset inside a character counts as that
    character)."""
    if encoding == UTF32:
        return offset
    count = 0
    for index, char in enumerate(line):
        if count >= offset:
            return index
        code = ord(char)
        if encoding == UTF8:
            count += 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
        else:
            count += 2 if code >= 0x10000 else 1
    return len(line) + max(0, offset - count)


def minimal_edit(before: str, after: str) -> Tuple[int, int, str]:
    """(start, end, replacement) in character offsets of ``before``."""
    start, end_b, end_a = changed_span(before, after)
    return start, end_b, after[start:end_a]


def row_and_column(text: str, offset: int) -> Tuple[int, int, str]:
    """The 0-based row and character column of ``offset`` in ``text``, and that row's text."""
    row = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", start)
    return row, offset - start, text[start:] if end < 0 else text[start:end]


def split_lines(text: str) -> List[str]:
    """The lines of ``text`` as positions count them (without line endings)."""
    return text.split("\n")


# `# noqa: CODES` (codes separated by commas or spaces; the list ends at the
# first word that is not a code) and a bare `# noqa`.
_NOQA = re.compile(r"#\s*noqa(?::[ \t]*(?P<codes>[A-Z]+[0-9]+(?:(?:[ \t]*,[ \t]*|[ \t]+)[A-Z]+[0-9]+)*))?",
                   re.IGNORECASE)


def with_noqa(line: str, code: str) -> Optional[str]:
    """``line`` with ``code`` added to its ``# noqa`` comment (a new comment at
    the end when there is none); None when the line's ``# noqa`` already
    covers it (bare, or naming the code)."""
    body = line.rstrip("\r")
    ending = line[len(body):]
    for match in _NOQA.finditer(body):
        codes = match.group("codes")
        if codes is None:
            if body[match.end():match.end() + 1] != ":":
                return None  # a bare `# noqa` suppresses every rule
            continue
        if code.upper() in {c.upper() for c in re.split(r"[\s,]+", codes)}:
            return None
        return body[:match.end()] + f", {code}" + body[match.end():] + ending
    return f"{body.rstrip()}  # noqa: {code}{ending}" if body.strip() else None
