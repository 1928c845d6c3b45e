"""Jupyter notebooks (``.ipynb``): their code cells as one Python program.

The engine lints and fixes Python text; this module turns a notebook into such
a text and back, and knows no rule.

- **The program.** Every code cell, in order, is one part of a single program
  (an import in cell 2 resolves a name in cell 5).  Each part starts with a
  marker comment line (``# torchlint-notebook-cell N``) so that positions map
  back to cells, and a fixed program splits back into cells exactly.  Markdown
  and raw cells are left out, and so are cells of a notebook whose kernel is
  not Python.
- **IPython syntax.** Lines that are not Python are masked by a placeholder of
  one line each (a comment, or ``pass`` with a comment where the line sits in
  an indented block), so line numbers do not move: line magics (``%time
  f()``), shell escapes (``!pip install ...``), ``x = !cmd`` and ``x = %magic``
  assignments, help (``?obj``, ``obj?``), a line magic written without its
  ``%`` (IPython's automagic: ``cd ZoeDepth``, ``pip install timm``, ``ls -la``;
  a line that is Python, such as ``time = 5``, stays Python), and the
  continuation lines of such a line ending in ``\\``.  Only the start of a logical line counts: a ``%`` line
  inside brackets or a triple-quoted string is Python.  A cell magic whose body
  is Python (``%%time``, ``%%timeit``, ``%%capture``, ``%%prun``, ``%%debug``,
  ``%%memit``, ``%%mprun``) has its first line masked and its body analysed;
  any other cell magic (``%%bash``, ``%%writefile``, ``%%html``, ...) makes the
  cell not Python, and it is left out.
- **Positions.** Diagnostics carry the cell number (counting every cell,
  markdown and raw ones too, from 1) and a line and column within the cell,
  plus the position of that character in the ``.ipynb`` file's own JSON text
  (``Diagnostic.file_location``) for the GitHub and SARIF formats.
- **Fixes** are computed on the program by the engine, which asks
  ``Notebook.accepts`` about every candidate text: an edit that would change a
  masked line or a cell marker is not applied.  Changed cells are written back
  by replacing only their ``source`` values in the JSON text; every other byte
  (outputs, metadata, key order, indentation, unchanged source lines) stays.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

from torchlint.model import Diagnostic, Kind
from torchlint.source import is_notebook  # noqa: F401 (part of this module's interface)

SUFFIX = ".ipynb"

_MARKER = "# torchlint-notebook-cell {}\n"
_MARKER_RE = re.compile(r"^# torchlint-notebook-cell (\d+)\n", re.M)
_MAGIC_TAG = "# torchlint-notebook-magic"

# Cell magics whose body is Python run in the notebook's namespace.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "memit", "mprun"})

_NEWLINE = re.compile(r"\r\n|\r|\n")
_ASSIGN_MAGIC = re.compile(r"[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*,?\s*=\s*[!%]")
_HELP_END = re.compile(r"[A-Za-z_*][\w.*]*\?{1,2}\s*$")
# IPython's automagic: a line magic written without its `%` (`cd ZoeDepth`,
# `pip install timm`, `ls -la`, `matplotlib inline`), which IPython runs when
# the line is not Python (or passes an option).  Its argument starts like a word, a
# path, an option or a string: `env = {` or `time (a,` opening a statement is Python.
_AUTOMAGIC = re.compile(
    r"(?:cd|ls|pwd|pip|conda|mkdir|rmdir|rm|cp|mv|cat|env|load_ext|reload_ext|autoreload|matplotlib|time|timeit|"
    r"run|history|who|whos|reset|pdb|precision|tensorflow_version|set_env)[ \t]+(?P<rest>[\w\-./~\"'$].*)$"
)
_WS = re.compile(r"[ \t\n\r]*")
_ESCAPED_NON_ASCII = re.compile(r"(?<!\\)\\u(?:00[89a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F]{2})[0-9a-fA-F]")


class NotebookError(Exception):
    """A file that is not a readable notebook; the message says why."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


def read_error(path: str, exc: NotebookError) -> Diagnostic:
    return Diagnostic(
        path, exc.line, exc.column, exc.line, exc.column,
        f"cannot read notebook: {exc}", kind=Kind.IO_ERROR,
    )


# -- IPython syntax -----------------------------------------------------------------


def _lines(text: str) -> List[str]:
    """``text`` split into lines that keep their line ending (as Python counts lines)."""
    out, start = [], 0
    for m in _NEWLINE.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _body(line: str) -> str:
    return line.rstrip("\r\n")


@dataclass
class _Scan:
    """Where the previous lines left the tokenizer: in a string, in brackets, continued."""

    quote: Optional[str] = None
    depth: int = 0
    continued: bool = False

    @property
    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.continued

    def feed(self, line: str) -> None:
        text = _body(line)
        quote, depth, i, n = self.quote, self.depth, 0, len(text)
        comment = False
        while i < n:
            c = text[i]
            if quote is not None:
                if c == "\\":
                    i += 2
                    continue
                if text.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    continue
                i += 1
                continue
            if c == "#":
                comment = True
                break
            if c in "\"'":
                quote = c * 3 if text.startswith(c * 3, i) else c
                i += len(quote)
                continue
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
            i += 1
        ends_with_backslash = not comment and text.endswith("\\")
        if quote is not None and len(quote) == 1 and not ends_with_backslash:
            quote = None  # an unterminated one-line string: the line is broken anyway
        self.quote, self.depth = quote, depth
        self.continued = ends_with_backslash and quote is None


def _is_magic(stripped: str) -> bool:
    if not stripped:
        return False
    first = stripped[0]
    if first in "%!?":
        return True
    return bool(_ASSIGN_MAGIC.match(stripped) or _HELP_END.match(stripped) or _is_automagic(stripped))


def _is_automagic(stripped: str) -> bool:
    found = _AUTOMAGIC.match(stripped.rstrip())
    if found is None:
        return False
    if re.match(r"-[A-Za-z]", found.group("rest")):
        return True  # `ls -la`, `pip -q install x`: an option (`x -y` would be Python)
    try:
        compile(stripped, "<cell>", "exec")
    except SyntaxError:
        return True  # `cd ZoeDepth`: not Python, so IPython runs the magic
    except (ValueError, MemoryError, RecursionError, OverflowError):
        return False
    return False  # `time = 5`, `run -1`: Python


def mask_cell(source: str) -> Tuple[Optional[str], List[Tuple[str, str]]]:
    """The Python text of one code cell, and (placeholder, original line) for
    each line it masks.

    Returns ``(None, [])`` for a cell that is not Python (a ``%%bash`` cell);
    otherwise the text has as many lines as the cell, the ``k``-th masked line
    being a placeholder that names ``k`` (1-based).
    """
    lines = _lines(source)
    masked: List[str] = []
    originals: List[Tuple[str, str]] = []
    scan = _Scan()
    seen_code = False
    in_magic = False  # the previous line was a magic ending with a backslash
    magic_indent = ""  # the indentation of the magic line a continuation belongs to

    def placeholder(line: str, indent: str) -> str:
        stmt = "pass  " if indent and seen_code else ""
        body = f"{indent}{stmt}{_MAGIC_TAG} {len(originals) + 1}"
        originals.append((body, _body(line)))
        return body + line[len(_body(line)):]

    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].strip()[2:].split(None, 1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return None, []
    for number, line in enumerate(lines):
        text = _body(line)
        stripped = text.lstrip()
        indent = text[: len(text) - len(stripped)]
        if in_magic or (scan.at_statement_start and (
            _is_magic(stripped) or (number == first and stripped.startswith("%%"))
        )):
            if not in_magic:
                magic_indent = indent
            # a continuation line of `!cmd \` is part of the command: it takes
            # the command's indentation, whatever its own
            masked.append(placeholder(line, magic_indent))
            in_magic = text.endswith("\\")
            continue
        masked.append(line)
        scan.feed(line)
        if stripped and not stripped.startswith("#"):
            seen_code = True
    return "".join(masked), originals


def _unmask(masked: str, originals: Sequence[Tuple[str, str]]) -> Optional[str]:
    """The cell text with its placeholders replaced by the original lines, or
    None when a placeholder was changed (re-indented too), moved out of order,
    or lost."""
    if masked.count(_MAGIC_TAG) != len(originals):
        return None
    out: List[str] = []
    expected = 1
    for line in _lines(masked):
        body = _body(line)
        if _MAGIC_TAG in body:
            if expected > len(originals) or body != originals[expected - 1][0]:
                return None
            out.append(originals[expected - 1][1] + line[len(body):])
            expected += 1
        else:
            out.append(line)
    return "".join(out)


# -- JSON ---------------------------------------------------------------------------


def _ws(s: str, i: int) -> int:
    return _WS.match(s, i).end()  # type: ignore[union-attr]


def _members(s: str, i: int, decoder) -> List[Tuple[str, int, int, object]]:
    """The members ``(key, start, end, value)`` of the JSON object at ``s[i]``."""
    from json.decoder import scanstring

    out = []
    i = _ws(s, i + 1)
    if s[i] == "}":
        return out
    while True:
        key, i = scanstring(s, i + 1)
        i = _ws(s, _ws(s, i) + 1)  # past ':'
        value, end = decoder.raw_decode(s, i)
        out.append((key, i, end, value))
        i = _ws(s, end)
        if s[i] == "}":
            return out
        i = _ws(s, i + 1)  # past ','


def _elements(s: str, i: int, decoder) -> List[Tuple[int, int, object]]:
    """The elements ``(start, end, value)`` of the JSON array at ``s[i]``."""
    out = []
    i = _ws(s, i + 1)
    if s[i] == "]":
        return out
    while True:
        value, end = decoder.raw_decode(s, i)
        out.append((i, end, value))
        i = _ws(s, end)
        if s[i] == "]":
            return out
        i = _ws(s, i + 1)


def _decoded_offsets(s: str, start: int, end: int) -> List[int]:
    """For the JSON string literal ``s[start:end]``: the offset in ``s`` of each
    decoded character, plus the offset of the closing quote."""
    out, i = [], start + 1
    while i < end - 1:
        out.append(i)
        if s[i] != "\\":
            i += 1
        elif s[i + 1] != "u":
            i += 2
        else:
            code = int(s[i + 2:i + 6], 16)
            i += 6
            if 0xD800 <= code < 0xDC00 and s.startswith("\\u", i):
                low = int(s[i + 2:i + 6], 16)
                if 0xDC00 <= low < 0xE000:
                    i += 6
    out.append(end - 1)
    return out


# -- the notebook -------------------------------------------------------------------


@dataclass
class CodeCell:
    number: int  # counting every cell of the notebook, from 1
    source: str  # as in the notebook, lines joined
    masked: str  # Python text: as many lines as ``source``
    originals: List[Tuple[str, str]]  # (placeholder, original line), by placeholder number - 1
    span: Tuple[int, int]  # where the ``source`` value lies in the JSON text
    literals: List[Tuple[int, int]]  # the JSON string literals of the source
    values: List[str]  # their decoded values

    def json_offset(self, raw: str, offset: int) -> int:
        """The offset in the JSON text of the character ``offset`` of ``source``."""
        if not self.literals:
            return self.span[0]
        for (start, end), value in zip(self.literals, self.values):
            if offset < len(value):
                return _decoded_offsets(raw, start, end)[offset]
            offset -= len(value)
        start, end = self.literals[-1]
        return end - 1


@dataclass
class Notebook:
    raw: str  # the JSON text, without a byte-order mark
    bom: bool
    cells: List[CodeCell]  # the code cells that are analysed
    program: str
    cell_count: int
    _line_starts: Dict[int, List[int]] = field(default_factory=dict)
    _layout: Optional[Tuple[str, List[Tuple[int, int]]]] = None

    # -- positions ------------------------------------------------------------------

    def cell(self, number: int) -> CodeCell:
        return next(c for c in self.cells if c.number == number)

    def _cell_line_starts(self, cell: CodeCell) -> List[int]:
        starts = self._line_starts.get(cell.number)
        if starts is None:
            starts = [0]
            for m in _NEWLINE.finditer(cell.source):
                starts.append(m.end())
            self._line_starts[cell.number] = starts
        return starts

    def _file_point(self, cell: CodeCell, line: int, column: int) -> Tuple[int, int]:
        starts = self._cell_line_starts(cell)
        line = min(max(line, 1), len(starts))
        offset = min(starts[line - 1] + column - 1, len(cell.source))
        at = cell.json_offset(self.raw, offset)
        json_line = self.raw.count("\n", 0, at) + 1
        json_column = at - (self.raw.rfind("\n", 0, at) + 1) + 1
        return json_line, json_column

    def locate(self, diagnostic: Diagnostic, program: Optional[str] = None) -> Diagnostic:
        """``diagnostic`` (positioned in ``program``, by default this notebook's) in
        its cell."""
        program = self.program if program is None else program
        if self._layout is None or self._layout[0] is not program:
            self._layout = (program, _layout(program))
        layout = self._layout[1]
        if not layout:
            return diagnostic
        number, line = _cell_line(layout, diagnostic.line)
        column = diagnostic.column if line > 0 else 1
        line = max(line, 1)
        end_number, end_line = _cell_line(layout, diagnostic.end_line)
        end_column = diagnostic.end_column
        cell = self.cell(number)
        if end_number != number or end_line < line:
            # A node over several cells (a whole-module report): end with the cell.
            last = _lines(cell.source)
            end_line = max(len(last), 1)
            end_column = len(_body(last[-1])) + 1 if last else 1
            if end_line == line:
                end_column = max(end_column, column)
        file_location = None
        if self.raw:  # not for a notebook made from_cells
            file_location = (*self._file_point(cell, line, column), *self._file_point(cell, end_line, end_column))
        via = diagnostic.via
        if via is not None and via.startswith(f"{diagnostic.path}:"):
            via = None  # a line of the cells' program, not of the notebook
        return replace(
            diagnostic, line=line, column=column, end_line=end_line, end_column=end_column,
            cell=number, file_location=file_location, via=via,
        )

    def sources(self, display: str) -> Dict[str, str]:
        """The cells' texts, under the keys that reporters look up (``Diagnostic.source_key``)."""
        return {cell_key(display, c.number): c.source for c in self.cells}

    # -- fixing ---------------------------------------------------------------------

    def split(self, program: str) -> Optional[Dict[int, str]]:
        """Cell number -> its new source, from a (fixed) program; None when the
        program no longer splits into this notebook's cells with every masked line
        as it was."""
        pieces = _MARKER_RE.split(program)
        if pieces[0] != "":
            return None
        numbers = [int(n) for n in pieces[1::2]]
        if numbers != [c.number for c in self.cells]:
            return None
        out: Dict[int, str] = {}
        for cell, masked in zip(self.cells, pieces[2::2]):
            text = _unmask(masked, cell.originals)
            if text is None:
                return None
            if masked and not cell.masked.endswith("\n") and text.endswith("\n"):
                text = text[:-1]  # the line ending that joining the cells added
            out[cell.number] = text
        return out

    def accepts(self, program: str) -> bool:
        """Whether a fixed program still maps onto the cells (engine hook)."""
        return self.split(program) is not None

    def render(self, sources: Dict[int, str]) -> str:
        """The notebook's JSON text with the ``source`` of the given cells replaced."""
        import json

        raw = self.raw
        ensure_ascii = not re.search(r"[^\x00-\x7f]", raw) and bool(_ESCAPED_NON_ASCII.search(raw))
        pieces: List[str] = []
        last = 0
        for cell in self.cells:
            if cell.number not in sources or sources[cell.number] == cell.source:
                continue
            start, end = cell.span
            pieces.append(raw[last:start])
            pieces.append(_render_source(raw, cell, sources[cell.number], ensure_ascii, json))
            last = end
        pieces.append(raw[last:])
        return "".join(pieces)


def cell_key(display: str, number: int) -> str:
    return f"{display}:cell {number}"


def _layout(program: str) -> List[Tuple[int, int]]:
    """(first program line of the cell's text, cell number) for each cell."""
    out = []
    for m in _MARKER_RE.finditer(program):
        line = program.count("\n", 0, m.start()) + 1
        out.append((line + 1, int(m.group(1))))
    return out


def _cell_line(layout: List[Tuple[int, int]], line: int) -> Tuple[int, int]:
    """The cell and line in it of a program line; a marker line is line 0 of the next cell."""
    import bisect

    index = bisect.bisect_right([first for first, _ in layout], line) - 1
    if index < 0:
        first, number = layout[0]
        return number, 0
    first, number = layout[index]
    if index + 1 < len(layout) and line == layout[index + 1][0] - 1:
        return layout[index + 1][1], 0
    return number, line - first + 1


def _render_source(raw: str, cell: CodeCell, new: str, ensure_ascii: bool, json) -> str:
    start, end = cell.span
    if raw[start] != "[":
        return json.dumps(new, ensure_ascii=ensure_ascii)
    parts = new.splitlines(True)  # as nbformat splits a source into lines
    if not parts:
        return "[]"
    kept = {value: raw[s:e] for (s, e), value in zip(cell.literals, cell.values)}
    items = [kept.get(part) or json.dumps(part, ensure_ascii=ensure_ascii) for part in parts]
    lits = cell.literals
    if not lits:
        return "[" + ", ".join(items) + "]"
    opening = raw[start + 1:lits[0][0]]
    closing = raw[lits[-1][1]:end - 1]
    if len(lits) >= 2:
        separator = raw[lits[0][1]:lits[1][0]]
    else:
        separator = "," + opening if "\n" in opening else ", "
    return "[" + opening + separator.join(items) + closing + "]"


def parse(text: str) -> Notebook:
    """Read a notebook's JSON text; NotebookError when it is not a notebook."""
    import json

    bom = text.startswith("\ufeff")
    raw = text[1:] if bom else text
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                            exc.lineno, exc.colno) from None
    except (ValueError, RecursionError) as exc:
        raise NotebookError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise NotebookError("not a notebook: the JSON text is not an object")
    if "cells" not in data:
        if "worksheets" in data:
            raise NotebookError("nbformat 3 notebooks are not supported (no `cells`); convert "
                                "with `jupyter nbconvert --to notebook`")
        raise NotebookError("not a notebook: no `cells` list")
    if not isinstance(data["cells"], list):
        raise NotebookError("not a notebook: `cells` is not a list")
    for number, cell in enumerate(data["cells"], 1):
        if not isinstance(cell, dict):
            raise NotebookError(f"cell {number} is not a JSON object")
        source = cell.get("source", "")
        if not (isinstance(source, str) or (
            isinstance(source, list) and all(isinstance(s, str) for s in source)
        )):
            raise NotebookError(f"cell {number}: `source` is not a string or a list of strings")
    cells: List[CodeCell] = []
    if _is_python(data):
        decoder = json.JSONDecoder()
        top = {key: (s, e) for key, s, e, _ in _members(raw, _ws(raw, 0), decoder)}
        cells_start = top["cells"][0]
        for number, (s, e, value) in enumerate(_elements(raw, cells_start, decoder), 1):
            if value.get("cell_type") != "code":
                continue
            members = {key: (ms, me, mv) for key, ms, me, mv in _members(raw, s, decoder)}
            if "source" not in members:
                continue
            ms, me, mv = members["source"]
            if isinstance(mv, list):
                elements = _elements(raw, ms, decoder)
                literals = [(a, b) for a, b, _ in elements]
                values = [v for _, _, v in elements]
            else:
                literals, values = [(ms, me)], [mv]
            source = "".join(values)
            masked, originals = mask_cell(source)
            if masked is None:
                continue
            cells.append(CodeCell(number, source, masked, originals, (ms, me), literals, values))
    return Notebook(raw, bom, cells, _program(cells), len(data["cells"]))


def _program(cells: Sequence[CodeCell]) -> str:
    return "".join(
        _MARKER.format(c.number) + c.masked + ("\n" if c.masked and not c.masked.endswith("\n") else "")
        for c in cells
    )


def from_cells(sources: Sequence[Tuple[int, str]], cell_count: int) -> Notebook:
    """A notebook made of code cells' texts, (cell number, source) each, as an
    editor holds them (LSP notebook documents) rather than as JSON: the same
    program, masking and ``locate``; no JSON text, so no ``file_location`` and
    no ``render``."""
    cells: List[CodeCell] = []
    for number, source in sources:
        masked, originals = mask_cell(source)
        if masked is not None:
            cells.append(CodeCell(number, source, masked, originals, (0, 0), [], []))
    return Notebook("", False, cells, _program(cells), cell_count)


def _is_python(data: dict) -> bool:
    """False for a notebook whose kernel says it is another language (R, Julia)."""
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for key, sub in (("kernelspec", "language"), ("language_info", "name")):
        info = metadata.get(key)
        if isinstance(info, dict) and isinstance(info.get(sub), str):
            return info[sub].lower() in ("python", "python3", "python2", "ipython")
    return True


# -- check and fix --------------------------------------------------------------------


@dataclass
class NotebookLint:
    diagnostics: List[Diagnostic]
    sources: Dict[str, str]
    warnings: List[str] = field(default_factory=list)  # suppression comments, located in cells
    # The parsed notebook and the analysis of its program (``engine.lint_text``'s
    # result), for the fixes' JSON edits (``fix_edits.of_notebook_analysis``).
    notebook: Optional["Notebook"] = None
    result: object = None


def _located_warnings(notebook: "Notebook", display: str, warnings, program: Optional[str] = None) -> List[str]:
    from torchlint.noqa import warning_text

    out = []
    for w in warnings:
        at = notebook.locate(Diagnostic(display, w.line, 1, w.line, 1, w.message), program)
        out.append(warning_text(display, at.line, w.message, at.cell))
    return out


def lint_notebook(text: str, display: str, settings, codes: Sequence[str]) -> NotebookLint:
    """The diagnostics of a notebook's code cells, positioned in their cells."""
    from torchlint.engine import lint_text

    try:
        notebook = parse(text)
    except NotebookError as exc:
        return NotebookLint([read_error(display, exc)], {})
    linted = lint_text(notebook.program, display, settings, codes)
    return NotebookLint(
        [notebook.locate(d) for d in linted.diagnostics], notebook.sources(display),
        _located_warnings(notebook, display, linted.warnings), notebook, linted,
    )


@dataclass
class NotebookFix:
    text: str  # the notebook's JSON text after the fixes
    applied: Counter
    remaining: List[Diagnostic]
    errors: List[Diagnostic]
    sources: Dict[str, str]
    changes: List[Tuple[int, str, str]]  # (cell number, before, after) of changed cells
    notebook: Optional[Notebook]
    warnings: List[str] = field(default_factory=list)  # suppression comments, located in cells

    def diff(self, display: str) -> str:
        """A unified diff per changed cell, with headers that name the cell."""
        out: List[str] = []
        for number, before, after in self.changes:
            name = f"{display}:cell {number}"
            lines = difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True),
                fromfile=f"a/{name}", tofile=f"b/{name}",
            )
            for line in lines:
                out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of cell\n")
        return "".join(out)


def fix_notebook(text: str, display: str, settings, codes: Sequence[str], unsafe: bool) -> NotebookFix:
    """Apply fixes to a notebook's code cells, editing only the cells that change."""
    from torchlint.engine import fix_text, internal_error, lint_text

    try:
        notebook = parse(text)
    except NotebookError as exc:
        return NotebookFix(text, Counter(), [read_error(display, exc)], [], {}, [], None)
    result = fix_text(notebook.program, display, settings, codes, unsafe, accept=notebook.accepts)
    new_sources = notebook.split(result.text)
    if new_sources is None:  # cannot happen: every applied edit was accepted
        error = internal_error(display, "the fixed notebook does not map onto its cells; nothing was written")
        remaining = lint_text(notebook.program, display, settings, codes).diagnostics
        return NotebookFix(text, Counter(), [notebook.locate(d) for d in remaining],
                           [error], notebook.sources(display), [], notebook)
    changes = [(c.number, c.source, new_sources[c.number])
               for c in notebook.cells if new_sources[c.number] != c.source]
    fixed = notebook
    remaining, errors = result.remaining, result.errors
    if changes:
        new_text = (("\ufeff" if notebook.bom else "") + notebook.render(new_sources))
        fixed = parse(new_text)
        if fixed.program != result.text:  # cannot happen either; positions from a fresh lint
            remaining = lint_text(fixed.program, display, settings, codes).diagnostics
            errors = []
        text = new_text
    return NotebookFix(
        text, result.applied,
        [fixed.locate(d) for d in remaining], [fixed.locate(d) for d in errors],
        fixed.sources(display), changes, fixed,
        _located_warnings(fixed, display, result.warnings),
    )


def read_notebook(path) -> "Source":
    """A notebook file's text (UTF-8, as nbformat writes it; a BOM is kept in the text)."""
    from torchlint.source import read_bytes

    return decode_notebook(read_bytes(path))


def decode_notebook(raw: bytes) -> "Source":
    from torchlint.source import Source, SourceError

    try:
        return Source(raw.decode("utf-8"), "utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(
            f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start} "
            "(a notebook is UTF-8 JSON)"
        ) from None
