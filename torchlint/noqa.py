"""Suppression comments: ``# noqa``, ``# noqa: TL101, TL201`` and the file-level
``# torchlint: noqa`` (optionally ``# torchlint: noqa: TL101``)."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional

_CODES = r"[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+)*"
_FILE = re.compile(r"#\s*torchlint\s*:\s*noqa(?:\s*:\s*(?P<codes>" + _CODES + r"))?", re.I)
_LINE = re.compile(r"#\s*noqa(?::\s*(?P<codes>" + _CODES + r"))?", re.I)

ALL: FrozenSet[str] = frozenset({"*"})


def _codes(text: Optional[str]) -> FrozenSet[str]:
    if not text:
        return ALL
    return frozenset(c.strip().upper() for c in text.split(","))


@dataclass
class Suppressions:
    file: FrozenSet[str] = frozenset()
    lines: Dict[int, FrozenSet[str]] = field(default_factory=dict)

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


def parse_suppressions(text: str) -> Suppressions:
    sup = Suppressions()
    if "noqa" not in text and "NOQA" not in text and "Noqa" not in text:
        return sup
    file_codes: set = set()
    for line, comment in _comments(text):
        m = _FILE.search(comment)
        if m:
            file_codes |= _codes(m.group("codes"))
            continue
        m = _LINE.search(comment)
        if m:
            sup.lines[line] = sup.lines.get(line, frozenset()) | _codes(m.group("codes"))
    sup.file = frozenset(file_codes)
    return sup


def _comments(text: str):
    """(line, comment) pairs; comments only, so a ``# noqa`` in a string is not one."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Fall back to a textual scan for files the tokenizer rejects.
        for number, line in enumerate(text.splitlines(), 1):
            if "#" in line:
                yield number, line[line.index("#"):]
