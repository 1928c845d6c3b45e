"""One walk of the syntax tree that drives every enabled rule.

LibCST's own visitor rebuilds each node as it goes; walking the dataclass
fields directly is about ten times cheaper and skips whitespace and token
nodes that no rule looks at.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional, Tuple

import dataclasses

import libcst as cst

from torchlint.nodes import _FIELDS, _NODE_TYPES, _child_fields, _is_node
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
_IMPORTS = frozenset({cst.Import, cst.ImportFrom})
# What the walk does at a node besides the rules' callbacks: open a scope of
# the import table, or bind an import in one.
_PLAIN, _SCOPE, _IMPORT = 0, 1, 2

# A node type's plan: (visit callbacks, leave callbacks, child fields, _PLAIN |
# _SCOPE | _IMPORT), the callbacks None when there are none.
Plan = Tuple[Optional[Tuple[Callback, ...]], Optional[Tuple[Callback, ...]], Tuple[str, ...], int]

_LEAVES: Dict[type, bool] = {}


def _is_leaf(node_type: type) -> bool:
    """Whether no node of this type holds a node the walk would enter (``Name``,
    ``Integer``, ``SimpleString``: their fields are strings), by the fields' types."""
    leaf = _LEAVES.get(node_type)
    if leaf is None:
        types = {f.name: f.type for f in dataclasses.fields(node_type)}
        leaf = _LEAVES[node_type] = all(types[name] in (str, bool) for name in _child_fields(node_type))
    return leaf


class Walker:
    def __init__(self, context: Context, rules: List[Rule]) -> None:
        self.context = context
        rules = [rule for rule in rules if rule.walks]
        self.visit = _callbacks(rules, "visit_")
        self.leave = _callbacks(rules, "leave_")

    def _plan(self, node_type: type) -> Plan:
        visit = self.visit.get(node_type)
        leave = self.leave.get(node_type)
        special = _SCOPE if node_type in _SCOPES else _IMPORT if node_type in _IMPORTS else _PLAIN
        return (tuple(visit) if visit else None, tuple(leave) if leave else None,
                _FIELDS.get(node_type) or _child_fields(node_type), special)

    def run(self, module: cst.Module) -> None:
        ctx = self.context
        ctx.module = module
        ctx.imports.scan_module(module)
        stack = ctx.stack
        plans: Dict[type, Plan] = {}
        plan_for = self._plan
        # Whether the walk enters a child of this type: a node, unless a leaf
        # (``Name``, numbers, strings: a third of all nodes) that no rule visits.
        enters: Dict[type, bool] = {}

        def entered(kind: type, value: object) -> bool:
            if not _is_node(value):
                return False
            visit, leave, _, special = plans.get(kind) or plan_for(kind)
            return bool(visit or leave or special or not _is_leaf(kind))

        # One call per node entered: everything the node type decides
        # (callbacks, child fields, scope or import) is looked up once, in
        # its plan, and the loop over the children is inlined (building a
        # child list per node made the bare walk ~25% slower).
        def walk(node: cst.CSTNode) -> None:
            node_type = type(node)
            plan = plans.get(node_type)
            if plan is None:
                plan = plans[node_type] = plan_for(node_type)
            visit, leave, fields, special = plan
            stack.append(node)
            if special:
                imports = ctx.imports
                if special == _SCOPE:
                    imports.push()
                elif len(imports.scopes) > 1:
                    imports.bind_import(node)
            if visit:
                for callback in visit:
                    callback(node)
            for name in fields:
                value = getattr(node, name)
                kind = type(value)
                if kind is tuple or kind is list:
                    for item in value:
                        kind = type(item)
                        enter = enters.get(kind)
                        if enter is None:
                            enter = enters[kind] = entered(kind, item)
                        if enter:
                            walk(item)
                else:
                    enter = enters.get(kind)
                    if enter is None:
                        enter = enters[kind] = entered(kind, value)
                    if enter:
                        walk(value)
            if leave:
                for callback in leave:
                    callback(node)
            if special == _SCOPE:
                ctx.imports.pop()
            stack.pop()

        walk(module)
