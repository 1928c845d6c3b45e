"""Source positions of syntax-tree nodes, computed in one lean code generation.

LibCST's ``PositionProvider`` (through ``MetadataWrapper``) regenerates the
module while recording a ``CodeRange`` for every node; its bookkeeping (a
generator-based context manager per node, a regex split per token, metadata
dispatch) costs about four times a parse.  The same positions can be recorded
with plain tuples and a slotted context manager for about 15% of that, which
matters because positions are needed for every file with a finding.

The result maps each node to ``((line, column), (end_line, end_column))``,
lines 1-based and columns 0-based, exactly as ``PositionProvider`` computes
them (syntactic positions: without the surrounding whitespace a node owns).

Most files with findings have a few, so ``Positions`` generates only the
top-level statements that hold the nodes asked about (see its docstring).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import libcst as cst
from libcst.metadata.position_provider import PositionProvidingCodegenState

from torchlint.nodes import iter_children

Point = Tuple[int, int]
Span = Tuple[Point, Point]


class _Recorder:
    """``record_syntactic_position`` without a generator per call."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: "_LeanState", node, start_node, end_node) -> None:
        self.state = state
        self.node = node
        self.start_node = start_node
        self.end_node = end_node

    def __enter__(self) -> None:
        self.start = (self.state.line, self.state.column)

    def __exit__(self, *exc_info) -> bool:
        state = self.state
        computed = state.provider._computed
        start = computed[self.start_node][0] if self.start_node is not None else self.start
        end = computed[self.end_node][1] if self.end_node is not None else (state.line, state.column)
        computed[self.node] = (start, end)
        return False


class _Computed:
    __slots__ = ("_computed",)

    def __init__(self) -> None:
        self._computed: Dict[cst.CSTNode, Span] = {}


class _LeanState(PositionProvidingCodegenState):
    def _update_position(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
        else:
            super()._update_position(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._stack.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self._stack.pop()
        computed = self.provider._computed
        if node not in computed:  # a syntactic position was recorded already
            computed[node] = (start, (self.line, self.column))

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> _Recorder:  # type: ignore[override]
        return _Recorder(self, node, start_node, end_node)


def node_positions(module: cst.Module) -> Dict[cst.CSTNode, Span]:
    """Every node of ``module`` -> ``((line, column), (end_line, end_column))``."""
    computed = _Computed()
    state = _LeanState(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        provider=computed,  # type: ignore[arg-type]
    )
    module._codegen(state)
    return computed._computed


# Line breaks as the code generation counts them (LibCST's NEWLINE_RE).
_NEWLINE = re.compile(r"\r\n?|\n")
# The statements whose body's statements are placed on their own (a node in an
# `else`, `except` or `finally` block, or in a header, is placed from the whole
# statement).
_CONTAINERS = frozenset({cst.ClassDef, cst.FunctionDef, cst.If, cst.For, cst.While, cst.With, cst.Try})


def found_once(text: str, code: str) -> Optional[int]:
    """Where a statement's generated ``code`` is in ``text``: its only
    occurrence, at a line start; None when it is not found so."""
    at = text.find(code)
    if at < 0 or text.find(code, at + 1) >= 0 or (at > 0 and text[at - 1] not in "\r\n"):
        return None
    return at


def block_indent(module: cst.Module, block: cst.IndentedBlock) -> str:
    """The indentation a block adds to the blocks around it."""
    return module.default_indent if block.indent is None else block.indent


def paths_to(root: cst.CSTNode, wanted: set,
             children: Callable[[cst.CSTNode], Iterable[cst.CSTNode]] = iter_children,
             ) -> Dict[int, Tuple[cst.CSTNode, ...]]:
    """For each id in ``wanted`` of a node under ``root``: the nodes from
    ``root`` down to it (one walk, which stops once all are found).
    ``children``: the children a walk enters (the rules' nodes by default;
    whitespace and comments too with ``every_child``)."""
    found: Dict[int, Tuple[cst.CSTNode, ...]] = {}
    path: List[cst.CSTNode] = []
    todo: List[Tuple[cst.CSTNode, int]] = [(root, 0)]
    while todo:
        node, depth = todo.pop()
        del path[depth:]
        path.append(node)
        if id(node) in wanted:
            found[id(node)] = tuple(path)
            if len(found) == len(wanted):
                break
        todo.extend((child, depth + 1) for child in children(node))
    return found


def every_child(node: cst.CSTNode) -> List[cst.CSTNode]:
    """All of ``node``'s children, whitespace and comments included, read from
    its fields (not ``node.children``, which rebuilds the node, and so
    validates it again)."""
    found: List[cst.CSTNode] = []
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if isinstance(value, cst.CSTNode):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(item for item in value if isinstance(item, cst.CSTNode))
    return found


class Positions:
    """The positions of a module's nodes (``node_positions``' values), each
    computed from its statement alone.

    A statement starts a line, so its nodes' positions are those of its own
    code generation (with the indentation of the blocks around it) shifted by
    the lines before it; and LibCST gives back the text it parsed, so the
    statement's code is in the text: where it occurs once, at a line start,
    there it is.  A node in the body of a class, a function or a compound
    statement (`if`, `for`, `while`, `with`, `try`) is placed from its
    statement in that body, recursively (classes are most of a model file, and
    a script's training loop may be most of its `__main__` block), else from
    its top-level statement.  A node that is in no top-level
    statement (the module, its header and footer), not reached by the walk,
    or in a statement whose code is not found once at a line start (written
    twice, the module's last line without a newline), gets the whole module's
    positions, as before.

    ``prepare`` places many nodes at once.
    """

    def __init__(self, module: cst.Module, text: str) -> None:
        self.module = module
        self.text = text
        self._computed: Dict[cst.CSTNode, Span] = {}
        self._done: set = set()  # ids of the statements generated
        self._full = False

    def prepare(self, nodes: Iterable[Optional[cst.CSTNode]],
                known: Optional[Dict[int, Tuple[cst.CSTNode, ...]]] = None) -> None:
        """Compute the positions of ``nodes`` (None and non-nodes ignored);
        ``known``: the paths from the module down to some of them, by id (as
        ``paths_to`` gives them: the walk's stack where a rule reported them),
        so that only the others are looked for."""
        wanted = {id(n) for n in nodes if isinstance(n, cst.CSTNode) and n not in self._computed}
        if not wanted or self._full:
            return
        paths = {i: known[i] for i in wanted if i in known} if known else {}
        if len(paths) < len(wanted):
            paths.update(paths_to(self.module, wanted.difference(paths)))
        top = {id(statement) for statement in self.module.body}
        groups: Dict[int, List[Tuple[cst.CSTNode, ...]]] = {}
        for path in paths.values():
            if len(path) < 2 or id(path[1]) not in top:
                break  # the module itself, or its header or footer
            groups.setdefault(id(path[1]), []).append(path)
        else:
            if len(paths) == len(wanted) and all(self._place(group[0][1], 1, (), group) for group in groups.values()):
                return
        self._everything()  # some node is in no statement, not walked, or not found in the text

    def _place(self, statement: cst.CSTNode, depth: int, indents: Tuple[str, ...],
               paths: List[Tuple[cst.CSTNode, ...]]) -> bool:
        """Positions for the nodes at the end of ``paths``, all in ``statement``
        (``path[depth]``), whose blocks around it are indented by ``indents``:
        from the statements of its body when it is a class, a function or a
        compound statement and they hold them all, else from the statement itself."""
        body = getattr(statement, "body", None)
        if type(statement) in _CONTAINERS and type(body) is cst.IndentedBlock and all(
            len(path) > depth + 2 and path[depth + 1] is body for path in paths
        ):
            inner = (*indents, block_indent(self.module, body))
            children: Dict[int, List[Tuple[cst.CSTNode, ...]]] = {}
            for path in paths:
                children.setdefault(id(path[depth + 2]), []).append(path)
            if all(self._place(group[0][depth + 2], depth + 2, inner, group) for group in children.values()):
                return True
        return self._generate(statement, indents)

    def _generate(self, statement: cst.CSTNode, indents: Tuple[str, ...]) -> bool:
        """Positions for one statement; False when its code is not found once,
        at a line start, in the text."""
        if id(statement) in self._done:
            return True
        computed = _Computed()
        state = _LeanState(
            default_indent=self.module.default_indent,
            default_newline=self.module.default_newline,
            provider=computed,  # type: ignore[arg-type]
            indent_tokens=list(indents),
        )
        statement._codegen(state)
        code = "".join(state.tokens)
        at = found_once(self.text, code)
        if at is None:
            return False
        shift = len(_NEWLINE.findall(self.text, 0, at))
        for node, ((line, column), (end_line, end_column)) in computed._computed.items():
            self._computed[node] = ((line + shift, column), (end_line + shift, end_column))
        self._done.add(id(statement))
        return True

    def _everything(self) -> None:
        if not self._full:
            self._computed = node_positions(self.module)
            self._full = True

    def __getitem__(self, node: cst.CSTNode) -> Span:
        span = self.get(node)
        if span is None:
            raise KeyError(node)
        return span

    def get(self, node: object, default: Optional[Span] = None) -> Optional[Span]:
        span = self._computed.get(node)  # type: ignore[call-overload]
        if span is None and not self._full and isinstance(node, cst.CSTNode):
            self.prepare([node])
            span = self._computed.get(node)
        return span if span is not None else default

    def __contains__(self, node: object) -> bool:
        return self.get(node) is not None
