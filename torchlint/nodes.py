"""Cheap access to a syntax tree's nodes: the children rules care about, and
a walk over every node below one.

LibCST's own visitor rebuilds each node as it goes; reading the dataclass
fields directly is about ten times cheaper and skips whitespace and token
nodes that no rule looks at.  Both the walker (``torchlint/walker.py``) and
the rule base (``torchlint/rule.py``) use this module, which imports neither.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from typing import Dict, Iterable, List, Tuple

import libcst as cst

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


# The fields of each node type that may hold a node (its child fields, less
# those declared ``str`` or ``bool``): none for a leaf (``Name``, numbers,
# strings), a third of all nodes.
_NODE_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _node_fields(node_type: type) -> Tuple[str, ...]:
    fields = _NODE_FIELDS.get(node_type)
    if fields is None:
        types = {f.name: f.type for f in dataclasses.fields(node_type)}
        fields = _NODE_FIELDS[node_type] = tuple(
            name for name in _child_fields(node_type) if types[name] not in (str, bool)
        )
    return fields


# How ``iter_children`` reads each of a node type's fields that may hold a
# node, by its declared type: one node class (the field holds that node), a
# sequence (of nodes), or anything else (optional, a union, a sentinel: the
# value is tested).
_ONE, _SEQUENCE, _TESTED = 0, 1, 2
_READS: Dict[type, Tuple[Tuple[str, int], ...]] = {}


def _reads(node_type: type) -> Tuple[Tuple[str, int], ...]:
    """``(field, how it is read)`` for each field of ``_node_fields(node_type)``."""
    reads = _READS.get(node_type)
    if reads is None:
        types = {f.name: f.type for f in dataclasses.fields(node_type)}
        reads = _READS[node_type] = tuple((name, _read_of(types[name])) for name in _node_fields(node_type))
    return reads


def _read_of(declared: object) -> int:
    """How a field declared with the type ``declared`` is read."""
    if isinstance(declared, type) and cst.CSTNode in declared.__mro__:
        return _ONE
    if typing.get_origin(declared) is collections.abc.Sequence:
        return _SEQUENCE
    return _TESTED


def iter_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The children of ``node`` that rules care about (no whitespace or tokens), in field order."""
    children: List[cst.CSTNode] = []
    add = children.append
    kind = type(node)
    reads = _READS.get(kind)
    if reads is None:
        reads = _reads(kind)
    for name, read in reads:
        value = getattr(node, name)
        if read == _ONE:
            add(value)
        elif read == _SEQUENCE:
            children += value
        else:
            vkind = type(value)
            if vkind is tuple or vkind is list:
                children += [item for item in value if _is_node(item)]
            elif _is_node(value):
                add(value)
    return children


def inner_children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """``iter_children`` less the leaves (``Name``, numbers, strings, ``pass``):
    for a walk that does nothing at a leaf, a third of the nodes it need not visit."""
    fields_of = _NODE_FIELDS.get
    inner = []
    for child in iter_children(node):
        fields = fields_of(type(child))
        if fields is None:
            fields = _node_fields(type(child))
        if fields:
            inner.append(child)
    return inner


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


def target_names(target: cst.BaseExpression) -> List[str]:
    """The names a loop target binds (``i``, ``(i, (x, y))``, ``*rest``)."""
    names: List[str] = []
    todo: List[cst.CSTNode] = [target]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            names.append(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            todo.extend(e.value for e in node.elements)
        elif isinstance(node, cst.StarredElement):
            todo.append(node.value)
    return names
