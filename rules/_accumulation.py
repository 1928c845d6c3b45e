"""Loop accumulators: values carried from one iteration of a loop to the next.

An *accumulation* adds something to a value that outlives the iteration:
``total += x``, ``total = total + x`` (or ``x + total``), ``history.append(x)``.
The accumulator is named by its *key*, the dotted name of the container
(``total``, ``self.stats``; ``stats["loss"]`` is ``stats``). Rules ask:

* what a statement accumulates, into what (``accumulation``), and where in
  the added expression a given value is kept (``kept_occurrence``: through
  arithmetic, tuples, lists and dicts, not into calls);
* whether a value is detached from autograd or converted to a host number
  (``is_detaching``: ``.item()``, ``.detach()``, ``float(x)``...);
* which names flow into some expressions through assignments
  (``names_flowing_into``: ``total = sum(losses)`` ... ``total.backward()``
  makes ``losses`` flow into the backward call);
* for a number accumulated in a loop, whether it is a plain local number
  initialised before the loop (``number_initialised_before``, answered by the
  semantic model) and read nowhere else in the loop (``read_elsewhere_in_loop``).

Shared by TL101 (its ``acc += t.item()`` fix) and TL303 (a loss accumulated
with its autograd graph).
"""

from __future__ import annotations

from typing import Iterable, Iterator, List, Optional, Set, Tuple

import libcst as cst

from torchlint.names import dotted_name
from torchlint.nodes import iter_children, walk_nodes
from torchlint.rule import Context, contains_modulo
from torchlint.rules._helpers import literal_number, method_name, positional, receiver
from torchlint.semantic import location_of

# Calls whose result no longer holds the autograd graph of their argument.
_DETACHING_METHODS = frozenset({"item", "detach", "tolist", "cpu", "numpy", "detach_"})
_DETACHING_FUNCTIONS = frozenset({"float", "int", "bool", "str", "round"})
# Operators through which an accumulated expression still holds a value.
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Power)


# -- accumulators ----------------------------------------------------------------------


def accumulator_key(expr: Optional[cst.BaseExpression]) -> Optional[str]:
    """``total`` -> ``"total"``; ``self.stats`` -> ``"self.stats"``;
    ``stats["loss"]`` -> ``"stats"`` (the container)."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    return dotted_name(expr) if expr is not None else None


def target_keys(target: cst.BaseExpression) -> Iterator[str]:
    """The accumulator keys an assignment target binds (tuples unpacked)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from target_keys(element.value)
        return
    key = accumulator_key(target)
    if key is not None:
        yield key


def mentions_key(expr: cst.BaseExpression, key: str) -> bool:
    """Whether ``expr`` reads the accumulator ``key`` (``acc + loss`` does; ``0`` does not)."""
    return any(
        isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)) and accumulator_key(node) == key
        for node in walk_nodes(expr)
    )


def accumulation(node: cst.CSTNode) -> Optional[Tuple[str, cst.BaseExpression, cst.BaseExpression]]:
    """``(key, accumulator as written, added expression)`` for ``acc += x``,
    ``acc = acc + x`` (or ``x + acc``) and ``acc.append(x)``; else None."""
    if isinstance(node, cst.AugAssign):
        if not isinstance(node.operator, cst.AddAssign):
            return None
        key = accumulator_key(node.target)
        return (key, node.target, node.value) if key is not None else None
    if isinstance(node, cst.Assign):
        value = node.value
        if len(node.targets) != 1 or not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
            return None
        target = node.targets[0].target
        key = accumulator_key(target)
        if key is None:
            return None
        if accumulator_key(value.left) == key:
            return key, target, value.right
        if accumulator_key(value.right) == key:
            return key, target, value.left
        return None
    if isinstance(node, cst.Call) and method_name(node) == "append":
        args = positional(node)
        if len(args) != 1 or len(node.args) != 1:
            return None
        container = receiver(node)
        key = accumulator_key(container)
        return (key, container, args[0].value) if key is not None and container is not None else None
    return None


def kept_occurrence(expr: cst.BaseExpression, keys: Set[str]) -> Optional[cst.BaseExpression]:
    """The occurrence of one of ``keys`` in ``expr`` that an accumulation of
    ``expr`` keeps, looking through arithmetic and containers but not into calls."""
    if isinstance(expr, (cst.Name, cst.Attribute)):
        return expr if dotted_name(expr) in keys else None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, _ARITHMETIC):
        return kept_occurrence(expr.left, keys) or kept_occurrence(expr.right, keys)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return kept_occurrence(expr.expression, keys)
    if isinstance(expr, (cst.Tuple, cst.List)):
        for element in expr.elements:
            if not isinstance(element, cst.StarredElement):
                found = kept_occurrence(element.value, keys)
                if found is not None:
                    return found
        return None
    if isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement):
                found = kept_occurrence(element.value, keys)
                if found is not None:
                    return found
    return None


# -- detached values ---------------------------------------------------------------------


def is_detaching(value: cst.BaseExpression) -> bool:
    """``x.item()``, ``x.detach()``, ``float(x)``, ``x.cpu().numpy()``, ``x.data``..."""
    if isinstance(value, cst.Call):
        if method_name(value) in _DETACHING_METHODS:
            return True
        func = value.func
        if isinstance(func, cst.Name) and func.value in _DETACHING_FUNCTIONS:
            return True
    return isinstance(value, cst.Attribute) and value.attr.value == "data"


def detached_names(assignments: Iterable[Tuple[cst.BaseExpression, cst.BaseExpression]]) -> Set[str]:
    """The dotted targets of ``(target, value)`` assignments whose value is detached."""
    names: Set[str] = set()
    for target, value in _pairs(assignments):
        if is_detaching(value):
            key = dotted_name(target)
            if key is not None:
                names.add(key)
    return names


def _pairs(
    assignments: Iterable[Tuple[cst.BaseExpression, cst.BaseExpression]]
) -> Iterator[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The assignments, a tuple assigned a tuple of as many values element by
    element (``loss, l1 = loss.item(), l1.item()``)."""
    for target, value in assignments:
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)) \
                and len(target.elements) == len(value.elements) \
                and not any(isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)):
            for t, v in zip(target.elements, value.elements):
                yield t.value, v.value
        else:
            yield target, value


# -- dataflow over dotted names -------------------------------------------------------------


def _prefixes(expr: cst.CSTNode) -> Iterator[str]:
    """Every dotted name mentioned in ``expr`` and its prefixes:
    ``torch.stack(self.losses)`` -> torch, torch.stack, self, self.losses."""
    for node in walk_nodes(expr):
        if isinstance(node, (cst.Attribute, cst.Name)):
            key = dotted_name(node)
            if key is not None:
                parts = key.split(".")
                for i in range(1, len(parts) + 1):
                    yield ".".join(parts[:i])


def names_flowing_into(
    exprs: Iterable[cst.BaseExpression], assignments: Iterable[Tuple[cst.BaseExpression, cst.BaseExpression]]
) -> Set[str]:
    """Names (and their dotted prefixes) whose value flows into ``exprs``,
    directly or through the ``(target, value)`` assignments of the function
    (``total = sum(losses)`` ... ``total.backward()`` marks ``losses``)."""
    names: Set[str] = set()
    for expr in exprs:
        names.update(_prefixes(expr))
    pending = [(list(target_keys(t)), v) for t, v in assignments]
    changed = True
    rounds = 0
    while changed and rounds < 8:
        changed = False
        rounds += 1
        remaining = []
        for keys, value in pending:
            if any(k in names for k in keys):
                before = len(names)
                names.update(_prefixes(value))
                changed = changed or len(names) != before
            else:
                remaining.append((keys, value))
        pending = remaining
    return names


# -- a number accumulated in a loop -----------------------------------------------------------


def number_initialised_before(ctx: Context, name: str, loop: cst.CSTNode) -> bool:
    """Whether ``name``, as seen from the node being visited (inside ``loop``),
    is a local of the innermost function (or of the module) that is assigned a
    number literal (``acc = 0.0``) before ``loop`` starts; not a ``global``/
    ``nonlocal`` name, nor one of a class body."""
    location = ctx.location()
    if type(location.scope) not in (cst.FunctionDef, cst.Module):
        return False
    chain, bindings = ctx.semantic.lookup(name, location)
    if chain is None or chain[-1] is not location.scope:
        return False  # bound in an enclosing scope (or declared global/nonlocal)
    index = next(i for i in range(len(ctx.stack) - 1, -1, -1) if ctx.stack[i] is loop)
    start = tuple(step[1] for step in location_of(ctx.stack[: index + 1]).path)
    return any(
        b.kind == "value"
        and b.value is not None
        and literal_number(b.value) is not None  # type: ignore[arg-type]
        and tuple(step[1] for step in b.location.path) < start
        for b in bindings
    )


def read_elsewhere_in_loop(loop: cst.CSTNode, name: str, target: cst.Name) -> bool:
    """Whether ``name`` occurs in the loop other than as ``target``, outside a
    periodic guard (a read there would synchronize every iteration anyway)."""
    roots: List[cst.CSTNode] = [loop.body]  # type: ignore[attr-defined]
    if isinstance(loop, cst.While):
        roots.append(loop.test)
    todo = list(roots)
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name) and node.value == name and node is not target:
            return True
        if isinstance(node, cst.If) and contains_modulo(node.test):
            todo.append(node.test)
            if node.orelse is not None:
                todo.append(node.orelse)
            continue
        if isinstance(node, cst.Attribute):
            todo.append(node.value)  # `self.acc` is another variable
            continue
        if isinstance(node, cst.Arg):
            todo.append(node.value)  # `f(acc=...)` names a parameter
            continue
        todo.extend(iter_children(node))
    return False
