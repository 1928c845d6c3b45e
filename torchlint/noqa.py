"""Suppression comments: ``# noqa``, ``# noqa: TL101, TL201`` and the file-level
``# torchlint: noqa`` (optionally ``# torchlint: noqa: TL101``).

The rules, following Ruff's:

- ``# noqa`` (no colon) suppresses every rule on its line.
- ``# noqa: CODES`` suppresses the torchlint rules it lists on its line.  Codes are
  separated by commas and/or spaces; a code is letters followed by digits
  (``TL101``, ``E501``, ``RUF100``; case does not matter).  The list ends at the first
  space-separated word that is not a code (``# noqa: TL101 long URL`` is TL101 and a
  remark) or at a ``#``.
- Another tool's code (``E501``: not starting with ``TL``) is that tool's business:
  it suppresses no torchlint rule, silently.  A ``TL`` code that is not a torchlint
  rule, a word that is not a code where a code must be (right after the colon or a
  comma: ``# noqa: create-then-move``), or a colon with no code after it suppresses
  nothing and gets a warning: it never means "every rule".
- ``# torchlint: noqa`` (optionally with codes, which must all be torchlint's) on a
  line of its own (nothing but the comment) covers the whole file.  At the end of a
  line of code it covers only that line, like a ``# noqa``, with a warning (Ruff does
  the same with ``# ruff: noqa``).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Collection, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

# `# noqa` or `# torchlint: noqa`, not followed by more of a word (`# noqanot`).
_DIRECTIVE = re.compile(r"#\s*(?P<file>torchlint\s*:\s*)?noqa(?![\w-])(?P<colon>\s*:)?", re.I)
_WORD = re.compile(r"[^\s,#]+")
_CODE = re.compile(r"^(?P<letters>[A-Za-z]+)[0-9]+$")

ALL: FrozenSet[str] = frozenset({"*"})

TORCHLINT_PREFIX = "TL"


@dataclass(frozen=True)
class NoqaWarning:
    """A suppression comment that does not do what it seems to (line in the text)."""

    line: int
    message: str


@dataclass(frozen=True)
class Directive:
    """A line's ``# noqa: CODES`` as written (codes upper-cased, torchlint's or not)."""

    line: int
    codes: Tuple[str, ...]
    comment: str  # the whole comment token


@dataclass
class Suppressions:
    file: FrozenSet[str] = frozenset()
    lines: Dict[int, FrozenSet[str]] = field(default_factory=dict)
    warnings: List[NoqaWarning] = field(default_factory=list)
    directives: List[Directive] = field(default_factory=list)
    text: str = ""
    used: Set[Tuple[int, str]] = field(default_factory=set)
    """(line, code) of every line directive that suppressed a finding."""
    _rows: Optional[Dict[int, int]] = None

    def suppresses(self, code: Optional[str], line: int) -> bool:
        """Whether a finding of ``code`` that starts on ``line`` is suppressed: by the
        file, by a ``noqa`` on its line, or by one on the line where a comment for
        it can go (the end of a multi-line string or of a backslash continuation)."""
        if code is None:
            return False
        if "*" in self.file or code in self.file:
            return True
        for row in (line, self.noqa_row(line)):
            codes = self.lines.get(row)
            if codes is not None and ("*" in codes or code in codes):
                self.used.add((row, code if code in codes else "*"))
                return True
        return False

    def noqa_row(self, line: int) -> int:
        if not self.lines:
            return line
        if self._rows is None:
            self._rows = noqa_rows(self.text)
        return self._rows.get(line, line)

    @property
    def whole_file(self) -> bool:
        return "*" in self.file


def _lex_codes(rest: str) -> Tuple[List[str], List[str]]:
    """The code-shaped words after ``noqa:`` (upper-cased), and the words that stand
    where a code must be but are not codes."""
    codes, invalid, _ = _lex_code_list(rest)
    return codes, invalid


def _lex_code_list(rest: str) -> Tuple[List[str], List[str], int]:
    """``_lex_codes``, and where the list of codes ends in ``rest``."""
    codes: List[str] = []
    invalid: List[str] = []
    need = True  # right after the colon or a comma, a code must follow
    i, n = 0, len(rest)
    end = 0
    while i < n:
        ch = rest[i]
        if ch.isspace():
            i += 1
            continue
        if ch == ",":
            need = True
            i += 1
            continue
        if ch == "#":
            break
        word = _WORD.match(rest, i)
        assert word is not None
        text = word.group()
        if _CODE.match(text):
            codes.append(text.upper())
        elif need:
            invalid.append(text)
        else:
            break  # a remark after the codes
        need = False
        i = word.end()
        end = i
    return codes, invalid, end


def _known_codes() -> FrozenSet[str]:
    from torchlint.registry import all_codes

    return frozenset(all_codes())


def parse_suppressions(text: str, known: Optional[Collection[str]] = None) -> Suppressions:
    """The suppression comments of ``text``; ``known``: torchlint's rule codes
    (default: every registered rule)."""
    sup = Suppressions(text=text)
    if "noqa" not in text and "NOQA" not in text and "Noqa" not in text:
        return sup
    if known is None:
        known = _known_codes()
    file_codes: set = set()
    for line, comment, alone in _comments(text):
        m = _DIRECTIVE.search(comment)
        if m is None:
            continue
        file_level = m.group("file") is not None
        if m.group("colon") is None:
            codes: FrozenSet[str] = ALL
        else:
            found, invalid = _lex_codes(comment[m.end():])
            if not file_level:
                sup.directives.append(Directive(line, tuple(found), comment))
            for word in invalid:
                sup.warnings.append(NoqaWarning(line, f"unknown code in noqa: {word}"))
            if not found and not invalid:
                sup.warnings.append(NoqaWarning(
                    line, "no codes after `noqa:` (write `# noqa` for every rule, or `# noqa: TL101`)"
                ))
            kept = set()
            for code in found:
                if code in known:
                    kept.add(code)
                elif file_level or _CODE.match(code).group("letters") == TORCHLINT_PREFIX:
                    sup.warnings.append(NoqaWarning(line, f"unknown code in noqa: {code}"))
                # else: another tool's code (E501), not ours to judge
            codes = frozenset(kept)
        if file_level and alone:
            file_codes |= codes
            continue
        if file_level:
            sup.warnings.append(NoqaWarning(
                line, "`# torchlint: noqa` at the end of a line of code suppresses only that line; "
                "put it on a line of its own to cover the file",
            ))
        sup.lines[line] = sup.lines.get(line, frozenset()) | codes
    sup.file = frozenset(file_codes)
    return sup


def _comments(text: str) -> Iterator[Tuple[int, str, bool]]:
    """(line, comment, alone) triples, ``alone`` when nothing but whitespace precedes
    the comment on its line; comments only, so a ``# noqa`` in a string is not one."""
    found: List[Tuple[int, str, bool]] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                found.append((tok.start[0], tok.string, not tok.line[: tok.start[1]].strip()))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Fall back to a textual scan for files the tokenizer rejects.
        found = []
        for number, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                at = line.index("#")
                found.append((number, line[at:], not line[:at].strip()))
    yield from found


def warning_text(path: str, line: int, message: str, cell: Optional[int] = None) -> str:
    """``path:line: warning: message`` (``path:cell N:line: ...`` in a notebook)."""
    where = f"cell {cell}:" if cell is not None else ""
    return f"{path}:{where}{line}: warning: {message}"


# -- where a `# noqa` goes ---------------------------------------------------------


def _tokens(text: str) -> List[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []


# Python 3.12 tokenizes an f-string in pieces (3.14 a t-string too).
_STRING_STARTS = {getattr(tokenize, name) for name in ("FSTRING_START", "TSTRING_START") if hasattr(tokenize, name)}
_STRING_ENDS = {getattr(tokenize, name) for name in ("FSTRING_END", "TSTRING_END") if hasattr(tokenize, name)}


# A triple-quoted f-string (or t-string): code inside it may span its lines.
# (The look-ahead for a prefix letter comes first: the engine skips the other
# characters without testing the look-behind there, twice as fast.)
_TRIPLE_FORMATTED = re.compile(r"""(?=[fFtTrR])(?<![\w])(?:[fFtT][rR]?|[rR][fFtT])(?:\"\"\"|\'\'\')""")


def rows_needed(text: str, lines: Iterable[int]) -> bool:
    """Whether ``noqa_rows`` can map any of ``lines`` (the first lines of code
    that diagnostics point at) elsewhere: when one of them has a quote (a
    multi-line string may start there) or ends with a backslash, or the text
    has a triple-quoted f-string (code inside one spans its lines).  Other
    lines of code hold their own comment, and the tokenizer is not needed."""
    if _TRIPLE_FORMATTED.search(text):
        return True
    split = text.splitlines()
    for line in lines:
        content = split[line - 1] if 0 < line <= len(split) else ""
        if "'" in content or '"' in content or content.rstrip().endswith("\\"):
            return True
    return False


def noqa_rows(text: str) -> Dict[int, int]:
    """Line -> the line whose end can hold a comment for it, for the lines that
    cannot (as Ruff's ``noqa_row``): a line inside a multi-line string maps to the
    string's last line, a line ended by a backslash to the continuation's last line.
    Lines not in the map hold their own comment."""
    rows: Dict[int, int] = {}
    tokens = _tokens(text)
    opened: List[int] = []  # the rows of the f-strings (t-strings) still open (Python 3.12+)
    for tok in tokens:
        end = None
        if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            start, end = tok.start[0], tok.end[0]
        elif tok.type in _STRING_STARTS:
            opened.append(tok.start[0])
        elif tok.type in _STRING_ENDS and opened:
            start, end = opened.pop(), tok.end[0]
        if end is not None and end > start:
            for row in range(start, end):
                rows[row] = end
    lines = text.splitlines()
    for previous, tok in zip(tokens, tokens[1:]):
        # A token on a later line with no NEWLINE/NL between: a backslash joined them.
        if (tok.start[0] > previous.end[0] and previous.type not in (tokenize.NEWLINE, tokenize.NL)
                and tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.DEDENT, tokenize.ENDMARKER)
                and previous.end[0] - 1 < len(lines) and lines[previous.end[0] - 1].rstrip().endswith("\\")):
            for row in range(previous.end[0], tok.start[0]):
                rows[row] = tok.start[0]
    # Follow chains (a string that ends on a continued line, and so on).
    resolved: Dict[int, int] = {}
    for row in sorted(rows, reverse=True):
        target = rows[row]
        resolved[row] = resolved.get(target, rows.get(target, target))
    return resolved


def add_noqa(text: str, wanted: Dict[int, Iterable[str]]) -> Tuple[str, int]:
    """``text`` with ``# noqa: CODES`` for each line of ``wanted`` (line -> codes
    reported there), merged into a line's existing ``# noqa: ...``; lines inside a
    multi-line string or a backslash continuation get theirs where a comment can go.
    Returns the new text and the number of lines that got a directive or new codes."""
    rows = noqa_rows(text)
    by_row: Dict[int, Set[str]] = {}
    for line, codes in wanted.items():
        by_row.setdefault(rows.get(line, line), set()).update(codes)
    comments = {line: comment for line, comment, _ in _comments(text)}
    lines = text.splitlines(keepends=True)
    changed = 0
    for row, codes in sorted(by_row.items()):
        if not 1 <= row <= len(lines):
            continue
        body = lines[row - 1]
        ending = body[len(body.rstrip("\r\n")):]
        body = body[: len(body) - len(ending)]
        new_body = _with_codes(body, comments.get(row), sorted(codes))
        if new_body != body:
            lines[row - 1] = new_body + ending
            changed += 1
    return "".join(lines), changed


def _with_codes(body: str, comment: Optional[str], codes: List[str]) -> str:
    """A line (without its line ending) whose comment suppresses ``codes`` too."""
    if comment is not None and body.endswith(comment):
        m = _DIRECTIVE.search(comment)
        if m is not None and m.group("file") is None:
            if m.group("colon") is None:
                return body  # a blanket `# noqa` already covers every code
            rest = comment[m.end():]
            present, _, end = _lex_code_list(rest)
            missing = [c for c in codes if c not in present]
            if not missing:
                return body
            listed = ", ".join([*present, *missing])
            remark = rest[end:]
            new_comment = f"{comment[:m.end()]} {listed}{remark}"
            return body[: len(body) - len(comment)] + new_comment
    return f"{body.rstrip()}  # noqa: {', '.join(codes)}"


def without_codes(comment: str, codes: Collection[str]) -> str:
    """``comment`` with ``codes`` taken out of its ``# noqa: ...`` directive; the
    directive goes when no code is left (a comment before it, and a remark after
    the codes when some are left, stay); "" when nothing of the comment remains."""
    m = _DIRECTIVE.search(comment)
    if m is None or m.group("colon") is None:
        return comment
    rest = comment[m.end():]
    present, _, end = _lex_code_list(rest)
    kept = [c for c in present if c not in codes]
    before = comment[: m.start()].rstrip()
    if kept:
        return f"{comment[:m.end()]} {', '.join(kept)}{rest[end:]}"
    return before
