"""Input screening and the engine's own diagnostics.

Before a text reaches LibCST: the cheap textual test (no ``torch``: nothing to
report), the codes that apply to a path (``per-file-ignores``), and the texts
LibCST's parser would take too long or too much memory over (``refused_by_python``).
And the diagnostics that are not a rule's: syntax errors, internal errors, a
file that cannot be read.  LibCST is imported only where a parse error is explained.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from torchlint.config import Settings
from torchlint.discovery import PathPatterns
from torchlint.model import Diagnostic, Kind


def _cst():
    import libcst

    return libcst


def could_concern_torch(text: str, codes: Sequence[str] = ()) -> bool:
    """The cheap textual test: a file that never says ``torch`` has nothing to
    report (but a ``# noqa`` comment in it, when TL001 judges those)."""
    return "torch" in text or (UNUSED_NOQA in codes and "noqa" in text.lower())


UNUSED_NOQA = "TL001"  # reported here, once the other rules have run (rules/tl001_unused_noqa.py)


@lru_cache(maxsize=64)
def _per_file_ignores(settings: Settings) -> Tuple[Tuple[PathPatterns, Tuple[str, ...]], ...]:
    return tuple(
        (PathPatterns([pattern], settings.root), codes)
        for pattern, codes in settings.per_file_ignores
    )


def codes_for_path(path: str, settings: Settings, codes: Sequence[str]) -> List[str]:
    """The enabled codes minus what ``per-file-ignores`` removes for this path."""
    if not settings.per_file_ignores:
        return list(codes)
    p = Path(path)
    ignored: List[str] = []
    for patterns, ignore_codes in _per_file_ignores(settings):
        if patterns.matches_any_component(p):
            ignored.extend(ignore_codes)
    if not ignored:
        return list(codes)
    return [c for c in codes if not any(s == "ALL" or c.startswith(s) for s in ignored)]


def syntax_error(path: str, exc: Exception) -> Diagnostic:
    line, column, message = 1, 1, str(exc)
    if isinstance(exc, _cst().ParserSyntaxError):
        line, column, message = exc.raw_line, exc.raw_column + 1, exc.message
    elif isinstance(exc, SyntaxError):
        line, column, message = exc.lineno or 1, (exc.offset or 1), exc.msg
    message = " ".join(message.split())
    return Diagnostic(path, line, column, line, column, message, kind=Kind.SYNTAX_ERROR)


def _python_parse(text: str) -> ast.Module:
    """``ast.parse`` without the SyntaxWarnings (invalid escapes...) it may print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text)


def explain_syntax_error(text: str, path: str, exc: Exception) -> Diagnostic:
    """Python's own message and position are clearer than the CST parser's."""
    try:
        _python_parse(text)
    except SyntaxError as py_exc:
        return syntax_error(path, py_exc)
    except (ValueError, RecursionError, MemoryError):
        pass
    diagnostic = syntax_error(path, exc)
    return replace(
        diagnostic, message=f"torchlint's parser (LibCST) cannot parse this file: {diagnostic.message}"
    )


# A hundred brackets opened with none closed in between. LibCST's parser needs
# time and memory quadratic in bracket depth (1.5 GB for `f(f(...))` 800 deep),
# while CPython refuses more than 200 levels outright; such files are asked of
# Python's own (fast) parser first and reported as the syntax error they are.
DEEP_BRACKETS = re.compile(r"[(\[{](?:[^()\[\]{}]*[(\[{]){99}")


# LibCST's parser also takes time quadratic in the length of a chain of binary
# operators (`1 + 1 + ...`: 0.7 s for 2,000 terms, about 40 s for 10,000).
# Files with that many operator characters are measured with Python's parser,
# and a chain longer than this is not analysed.
_MAX_OPERATOR_CHAIN = 2_500


def many_operators(text: str) -> bool:
    return len(text) > 10_000 and sum(text.count(op) for op in "+-*/%|&^@") > _MAX_OPERATOR_CHAIN


def refused_by_python(text: str, path: str) -> Optional[Diagnostic]:
    """A diagnostic when Python's own parser refuses the file, or when it holds
    an operator chain too long for LibCST; None when LibCST may parse it."""
    try:
        tree = _python_parse(text)
    except SyntaxError as exc:
        return syntax_error(path, exc)
    except (ValueError, RecursionError, MemoryError):
        return internal_error(path, "the file is too deeply nested to analyse")
    inner = set()
    for node in ast.walk(tree):
        if type(node) is ast.BinOp and id(node) not in inner:
            length, current = 1, node.left
            while type(current) is ast.BinOp:
                inner.add(id(current))
                length, current = length + 1, current.left
            if length > _MAX_OPERATOR_CHAIN:
                return internal_error(
                    path,
                    f"an expression here chains {length:,} binary operators, more than torchlint's "
                    f"parser handles in reasonable time ({_MAX_OPERATOR_CHAIN:,}); the file was not "
                    "analysed (exclude it, e.g. with `extend-exclude`)",
                    node.lineno,
                    node.col_offset + 1,
                )
    return None


def internal_error(path: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    return Diagnostic(path, line, column, line, column, message, kind=Kind.INTERNAL_ERROR)


def crashed(path: str, exc: Exception) -> Diagnostic:
    """An unexpected exception while processing one file (the run goes on)."""
    return internal_error(
        path, f"torchlint crashed on this file ({type(exc).__name__}: {exc}); please report this"
    )


def io_error(path: str, message: str) -> Diagnostic:
    """A file that cannot be read (or decoded)."""
    return Diagnostic(path, 1, 1, 1, 1, f"cannot read file: {message}", kind=Kind.IO_ERROR)
