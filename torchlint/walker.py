"""One walk of the syntax tree that drives every enabled rule.

LibCST's own visitor rebuilds each node as it goes; walking the dataclass
fields directly is about ten times cheaper and skips whitespace and token
nodes that no rule looks at.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Tuple

import libcst as cst

from torchlint.nodes import _FIELDS, _IS_NODE, _NODE_TYPES, _child_fields, _is_node
from torchlint.rule import Context, Rule

Callback = Callable[[cst.CSTNode], object]

_HOOKS: Dict[Tuple[type, str], Tuple[Tuple[type, str], ...]] = {}


def _hooks(rule_class: type, prefix: str) -> Tuple[Tuple[type, str], ...]:
    """``(node type, method name)`` of a rule class's visit_/leave_ methods."""
    key = (rule_class, prefix)
    hooks = _HOOKS.get(key)
    if hooks is None:
        found = []
        for attr in dir(rule_class):
            if attr.startswith(prefix):
                node_type = _NODE_TYPES.get(attr[len(prefix):])
                if node_type is None:
                    raise TypeError(f"{rule_class.__name__}.{attr}: no LibCST node named so")
                found.append((node_type, attr))
        hooks = _HOOKS[key] = tuple(found)
    return hooks


def _callbacks(rules: Iterable[Rule], prefix: str) -> Dict[type, List[Callback]]:
    table: Dict[type, List[Callback]] = {}
    for rule in rules:
        for node_type, attr in _hooks(type(rule), prefix):
            table.setdefault(node_type, []).append(getattr(rule, attr))
    return table


_SCOPES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})


class Walker:
    def __init__(self, context: Context, rules: List[Rule]) -> None:
        self.context = context
        rules = [rule for rule in rules if rule.walks]
        self.visit = _callbacks(rules, "visit_")
        self.leave = _callbacks(rules, "leave_")

    def run(self, module: cst.Module) -> None:
        ctx = self.context
        ctx.module = module
        ctx.imports.scan_module(module)
        self._walk(module)

    def _walk(self, node: cst.CSTNode) -> None:
        ctx = self.context
        stack = ctx.stack
        stack.append(node)
        node_type = type(node)
        scoped = node_type in _SCOPES
        if scoped:
            ctx.imports.push()
        elif (node_type is cst.Import or node_type is cst.ImportFrom) and len(ctx.imports.scopes) > 1:
            ctx.imports.bind_import(node)
        callbacks = self.visit.get(node_type)
        if callbacks:
            for callback in callbacks:
                callback(node)
        walk = self._walk
        is_node = _IS_NODE.get
        # `iter_children` inlined: this loop runs for every node of every file,
        # and building a child list per node made the bare walk ~25% slower.
        for name in _FIELDS.get(node_type) or _child_fields(node_type):
            value = getattr(node, name)
            kind = type(value)
            if kind is tuple or kind is list:
                for item in value:
                    known = is_node(type(item))
                    if known or (known is None and _is_node(item)):
                        walk(item)
            else:
                known = is_node(kind)
                if known or (known is None and _is_node(value)):
                    walk(value)
        callbacks = self.leave.get(node_type)
        if callbacks:
            for callback in callbacks:
                callback(node)
        if scoped:
            ctx.imports.pop()
        stack.pop()
