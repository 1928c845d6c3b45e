"""The diagnostic and fix model shared by the engine, the rules and the reporters."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover - LibCST is imported only where code is parsed
    import libcst as cst


class Applicability(str, enum.Enum):
    """How safe a fix is, following Ruff's definition."""

    SAFE = "safe"
    """Keeps runtime behaviour: values, ``state_dict`` keys, RNG streams, exceptions."""

    UNSAFE = "unsafe"
    """Keeps valid syntax but may change behaviour; applied only with ``--unsafe-fixes``."""


class FixAvailability(str, enum.Enum):
    """What a rule's documentation says about its fixes (``torchlint rule --all``)."""

    NONE = "none"
    SAFE = "safe"
    UNSAFE = "unsafe"
    SOMETIMES_SAFE = "safe or unsafe"
    """Safe in some cases, unsafe in others; the rule's docs say which."""


Replacement = Union["cst.CSTNode", "cst.RemovalSentinel", "cst.FlattenSentinel"]


@dataclass(frozen=True)
class Fix:
    """A rewrite attached to a diagnostic.

    ``target`` is the node that is replaced (by default the reported node);
    ``build`` is the codemod, called only when the fix is applied, that returns
    the replacement node.
    """

    applicability: Applicability
    message: str
    build: Callable[[], Replacement]
    target: Optional[cst.CSTNode] = None


class Kind(str, enum.Enum):
    RULE = "rule"
    SYNTAX_ERROR = "syntax-error"
    IO_ERROR = "io-error"
    INTERNAL_ERROR = "internal-error"


@dataclass(frozen=True)
class FixInfo:
    applicability: Applicability
    message: str

    def applies(self, unsafe: bool) -> bool:
        """Whether ``torchlint fix`` applies this fix (with ``--unsafe-fixes`` when ``unsafe``)."""
        return unsafe or self.applicability is Applicability.SAFE


@dataclass(frozen=True)
class Diagnostic:
    """A reported problem, as plain data (picklable, serialisable).

    ``line`` is 1-based; ``column`` is 1-based and counts characters.  In a
    notebook, ``cell`` is the cell's number (counting every cell from 1), the
    line and column are within the cell, and ``file_location`` is
    ``(line, column, end_line, end_column)`` of the same characters in the
    ``.ipynb`` file's JSON text (for formats that cannot name a cell).
    """

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    code: Optional[str] = None
    name: Optional[str] = None
    fix: Optional[FixInfo] = None
    kind: Kind = Kind.RULE
    cell: Optional[int] = None
    file_location: Optional[Tuple[int, int, int, int]] = None
    # How often the reported code runs ("per step"), for the rules that report
    # only code running every step, and the call that makes it so ("path:line"),
    # when that was inferred through a call.
    runs: Optional[str] = None
    via: Optional[str] = None

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column, self.code or "", self.message)

    @property
    def source_key(self) -> str:
        """The key of the text that ``line`` counts in (reporters' excerpts)."""
        return self.path if self.cell is None else f"{self.path}:cell {self.cell}"

    @property
    def location(self) -> str:
        """``path:line:column`` or, in a notebook, ``path:cell N:line:column``."""
        cell = "" if self.cell is None else f"cell {self.cell}:"
        return f"{self.path}:{cell}{self.line}:{self.column}"

    @property
    def label(self) -> str:
        """The code, or a name for diagnostics that are not a rule's."""
        if self.code:
            return self.code
        return {
            Kind.SYNTAX_ERROR: "SyntaxError",
            Kind.IO_ERROR: "IOError",
            Kind.INTERNAL_ERROR: "InternalError",
        }.get(self.kind, "Error")


@dataclass
class Finding:
    """A diagnostic while the engine still holds its node (not picklable)."""

    code: str
    name: str
    node: cst.CSTNode
    message: str
    fix: Optional[Fix] = None
    diagnostic: Optional[Diagnostic] = field(default=None)
    runs: Optional[str] = None  # how often the code runs, when the rule relied on it
    via: Optional[object] = None  # the call that makes it so: a node of this module, or "path:line"
