"""One walk of the syntax tree that drives every enabled rule.

LibCST's own visitor rebuilds each node as it goes; walking the dataclass
fields directly is about ten times cheaper and skips whitespace and token
nodes that no rule looks at.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, List, Tuple

import libcst as cst

from torchlint.rule import Context, Rule

_SKIPPED_FIELDS = frozenset(
    {
        "lpar", "rpar", "leading_lines", "lines_after_decorators", "header", "footer",
        "comma", "equal", "semicolon", "colon", "operator", "dot", "asynchronous",
        "newline", "arrow", "indent", "default_indent", "default_newline", "encoding",
        "has_trailing_newline", "star", "whitespace",
    }
)

_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _child_fields(node_type: type) -> Tuple[str, ...]:
    fields = _FIELDS.get(node_type)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(node_type)
            if f.name not in _SKIPPED_FIELDS and not f.name.startswith("whitespace")
        )
        _FIELDS[node_type] = fields
    return fields


# (`CSTNode in __mro__` rather than `issubclass`: ABCMeta's check took 6 ms
# of every start-up here.)
_NODE_TYPES: Dict[str, type] = {
    name: obj
    for name, obj in vars(cst).items()
    if isinstance(obj, type) and cst.CSTNode in obj.__mro__
}

# ``isinstance(x, cst.CSTNode)`` goes through ABCMeta's slow path; the walk
# asks it millions of times, so the answer is cached per type.
_IS_NODE: Dict[type, bool] = {}


def _is_node(value: object) -> bool:
    kind = type(value)
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = isinstance(value, cst.CSTNode)
    return known


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


def iter_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The children of ``node`` that rules care about (no whitespace or tokens), in field order."""
    children: List[cst.CSTNode] = []
    add = children.append
    is_node = _IS_NODE.get
    kind = type(node)
    for name in _FIELDS.get(kind) or _child_fields(kind):
        value = getattr(node, name)
        vkind = type(value)
        if vkind is tuple or vkind is list:
            for item in value:
                known = is_node(type(item))
                if known or (known is None and _is_node(item)):
                    add(item)
        else:
            known = is_node(vkind)
            if known or (known is None and _is_node(value)):
                add(value)
    return children


def walk_nodes(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """Every node below ``node`` (itself included), cheaply, in field order."""
    todo = [node]
    pop = todo.pop
    extend = todo.extend
    while todo:
        current = pop()
        yield current
        children = iter_children(current)
        children.reverse()
        extend(children)
