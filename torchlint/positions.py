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
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst
from libcst.metadata.position_provider import PositionProvidingCodegenState

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
