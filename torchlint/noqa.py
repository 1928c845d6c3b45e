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
from typing import Collection, Dict, FrozenSet, Iterator, List, Optional, Tuple

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


@dataclass
class Suppressions:
    file: FrozenSet[str] = frozenset()
    lines: Dict[int, FrozenSet[str]] = field(default_factory=dict)
    warnings: List[NoqaWarning] = field(default_factory=list)

    def suppresses(self, code: Optional[str], line: int) -> bool:
        if code is None:
            return False
        if "*" in self.file or code in self.file:
            return True
        codes = self.lines.get(line)
        return codes is not None and ("*" in codes or code in codes)

    @property
    def whole_file(self) -> bool:
        return "*" in self.file


def _lex_codes(rest: str) -> Tuple[List[str], List[str]]:
    """The code-shaped words after ``noqa:`` (upper-cased), and the words that stand
    where a code must be but are not codes."""
    codes: List[str] = []
    invalid: List[str] = []
    need = True  # right after the colon or a comma, a code must follow
    i, n = 0, len(rest)
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
    return codes, invalid


def _known_codes() -> FrozenSet[str]:
    from torchlint.registry import all_codes

    return frozenset(all_codes())


def parse_suppressions(text: str, known: Optional[Collection[str]] = None) -> Suppressions:
    """The suppression comments of ``text``; ``known``: torchlint's rule codes
    (default: every registered rule)."""
    sup = Suppressions()
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
