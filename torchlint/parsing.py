"""LibCST's parse, with a way around one of its bugs.

LibCST (1.x) refuses valid Python where a keyword is followed directly by a
parenthesized conditional expression or lambda: ``assert(a if c else b)``,
``return(lambda: x)``, ``x = not(a if c else b)``.  Its native parser builds the
statement before it attaches the parentheses, so the node's own validation
sees a keyword without the space it requires and raises (``CSTValidationError``,
or a ``TypeError`` for a lambda).  Such files are valid Python and real
projects have them (an ``assert(...)`` in a training script), so instead of
giving up on the whole file, :func:`parse_module` parses the text again with a
space after each such keyword, then takes those spaces out of the tree (past
the validation that refuses them): the
module it returns gives back exactly the original text (``module.code``), so
positions, fixes and the unchanged rest of the file stay the user's own.
"""

from __future__ import annotations

import dataclasses
import io
import keyword
import tokenize
import warnings
from typing import Dict, List, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

_KEYWORDS = frozenset(keyword.kwlist)


def parse_module(text: str) -> cst.Module:
    """``libcst.parse_module(text)``, raising what it raises, except for the
    valid Python its validation refuses (above)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return cst.parse_module(text)
        except (cst.CSTValidationError, TypeError) as exc:
            module = _parse_spaced(text)
            if module is None:
                raise exc
            return module


def _keywords_by_brackets(text: str) -> List[Tuple[int, int]]:
    """(line, column) of each place where a keyword touches a bracket: just
    after a keyword that a ``(`` follows directly, just before one that a
    closing bracket precedes directly (``(a)if(b)else(c)``)."""
    found: List[Tuple[int, int]] = []
    previous = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if previous is not None and previous.end == token.start:
                if (token.type == tokenize.OP and token.string == "("
                        and previous.type == tokenize.NAME and previous.string in _KEYWORDS):
                    found.append(previous.end)
                elif (token.type == tokenize.NAME and token.string in _KEYWORDS
                        and previous.type == tokenize.OP and previous.string in ")]}"):
                    found.append(token.start)
            previous = token
    except (tokenize.TokenError, SyntaxError):
        return []
    return found


class _Spaces(cst.CSTVisitor):
    """The (node, field) of each one-space whitespace that starts where a space was added."""

    def __init__(self, positions, added: Set[Tuple[int, int]]) -> None:
        super().__init__()
        self.positions = positions
        self.added = added
        self.found: List[Tuple[cst.CSTNode, str]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        for field in dataclasses.fields(node):
            value = getattr(node, field.name)
            if isinstance(value, cst.SimpleWhitespace) and value.value == " ":
                span = self.positions.get(value)
                if span is not None and (span.start.line, span.start.column) in self.added:
                    self.found.append((node, field.name))
        return True


def _parse_spaced(text: str):
    """The module of ``text`` parsed with a space where a keyword touches a
    bracket, then those spaces taken out; None when that does not give the
    text back."""
    points = _keywords_by_brackets(text)
    if not points:
        return None
    lines = text.splitlines(keepends=True)
    per_line: Dict[int, List[int]] = {}
    for line, column in points:
        per_line.setdefault(line, []).append(column)
    added: Set[Tuple[int, int]] = set()
    for line, columns in per_line.items():
        source = lines[line - 1]
        for shift, column in enumerate(sorted(columns)):
            added.add((line, column + shift))  # where the space lands in the new text
        for column in sorted(columns, reverse=True):
            source = source[:column] + " " + source[column:]
        lines[line - 1] = source
    try:
        wrapper = MetadataWrapper(cst.parse_module("".join(lines)), unsafe_skip_copy=True)
        positions = wrapper.resolve(PositionProvider)
        spaces = _Spaces(positions, added)
        wrapper.module.visit(spaces)
    except (cst.ParserSyntaxError, cst.CSTValidationError, TypeError, ValueError):
        return None
    for node, field in spaces.found:
        # Past the nodes' validation, which is what refuses the original text.
        object.__setattr__(node, field, cst.SimpleWhitespace(""))
    module = wrapper.module
    return module if module.code == text else None
