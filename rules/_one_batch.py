"""Whether a `DataLoader` is only used to fetch a batch or two (TL202, TL203).

`images, labels = next(iter(loader))` to show a grid of samples, or
`dataiter = iter(loader)` followed by `dataiter.next()`, reads one batch outside
any loop (or under a periodic guard in one: `if step % 100 == 0:` then
`next(test_iter)`, a test batch every 100 steps). Pinned memory and worker processes pay off over many batches; for one,
starting workers costs more than it saves, so the loader rules stay silent.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import libcst as cst

from torchlint.nodes import iter_children
from torchlint.rules._helpers import is_main_guard

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_LOOPS = frozenset({cst.For, cst.While, *_COMPREHENSIONS})


def loader_fetches_one_batch(call: cst.Call, ctx) -> bool:
    """:func:`fetches_one_batch` for the ``DataLoader(...)`` call being visited."""
    assignment = ctx.parent
    if type(assignment) is not cst.Assign:
        return False
    scope = ctx.enclosing_function()
    if scope is None:
        if ctx.enclosing_class() is not None or ctx.module is None:
            return False  # a class attribute
        scope = ctx.module
    return fetches_one_batch(call, assignment, scope, importable=not ctx.path.endswith(".ipynb"))


def fetches_one_batch(call: cst.Call, assignment: Optional[cst.Assign], scope: cst.CSTNode,
                      importable: bool = True) -> bool:
    """Whether the loader made by ``call`` is only used for single fetches
    (or, in a function, not used at all: ``val_loader = DataLoader(...)`` built
    beside an evaluation that reads the dataset itself).

    ``assignment`` is the statement ``name = call`` (None when the call is not
    assigned to one name) and ``scope`` the function or module it is in; every
    other mention of the name in the scope (nested functions included) must be
    ``next(iter(name))``, ``iter(name).next()``, or ``it = iter(name)`` whose
    every use is ``next(it)`` / ``it.next()``, none of them in a loop.
    ``importable``: False for a notebook, whose names no other module imports
    (a loader its cells never use is dead there too).
    """
    if assignment is None or assignment.value is not call or len(assignment.targets) != 1:
        return False
    target = assignment.targets[0].target
    if type(target) is not cst.Name:
        return False
    uses = list(_mentions(scope, target.value, target))
    if not uses:  # never used: dead in a function or a notebook (a module's name might be imported elsewhere)
        return type(scope) is cst.FunctionDef or not importable
    for name, parents, in_loop in uses:
        if _only_shown(name, parents):
            continue  # `train_loader, test_loader` shown by a notebook cell, `len(loader)`
        if parents and type(parents[-1]) is cst.AssignTarget:
            continue  # the name bound again (another branch's loader): its uses are mentions too
        if in_loop:
            return False
        iterator = _iter_call(name, parents)
        if iterator is None:
            return False
        outer = parents[-3] if len(parents) >= 3 else None
        if _fetch(iterator, parents[:-2]):
            continue
        if type(outer) is cst.Assign and len(outer.targets) == 1 and type(outer.targets[0].target) is cst.Name:
            it = outer.targets[0].target
            it_uses = list(_mentions(scope, it.value, it))
            if it_uses and all(not loop and (_fetch(n, p) or type(p[-1]) is cst.AssignTarget) for n, p, loop in it_uses):
                continue
        return False
    return True


_SHOWING = frozenset({"len", "print", "type", "repr", "str", "display"})


def _only_shown(name: cst.Name, parents: List[cst.CSTNode]) -> bool:
    """The loader shown, not iterated: an expression statement of the name or
    of a tuple of names (a notebook cell's last line), or the argument of
    ``len``/``print``/``type``."""
    if not parents:
        return False
    parent = parents[-1]
    if type(parent) is cst.Expr:
        return True
    if type(parent) is cst.Element and len(parents) >= 3 and type(parents[-2]) is cst.Tuple \
            and type(parents[-3]) is cst.Expr:
        return all(type(e.value) is cst.Name or _shows(e.value) for e in parents[-2].elements)
    if type(parent) is cst.Arg and len(parents) >= 2 and type(parents[-2]) is cst.Call:
        func = parents[-2].func
        return type(func) is cst.Name and func.value in _SHOWING and parent.keyword is None and not parent.star
    return False


def _shows(expr: cst.BaseExpression) -> bool:
    """``len(x)``, ``print(x)``: a call that only shows its argument."""
    return type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value in _SHOWING


def _iter_call(name: cst.Name, parents: List[cst.CSTNode]) -> Optional[cst.Call]:
    """``iter(name)`` when ``name`` is its only argument."""
    if len(parents) < 2:
        return None
    arg, call = parents[-1], parents[-2]
    if type(arg) is cst.Arg and type(call) is cst.Call and len(call.args) == 1:
        func = call.func
        if type(func) is cst.Name and func.value == "iter" and arg.keyword is None and not arg.star:
            return call
    return None


def _fetch(node: cst.CSTNode, parents: List[cst.CSTNode]) -> bool:
    """``next(node)`` or ``node.next()`` / ``node.__next__()``."""
    if len(parents) < 2:
        return False
    first, second = parents[-1], parents[-2]
    if type(first) is cst.Arg and type(second) is cst.Call and second.args[0] is first:
        return type(second.func) is cst.Name and second.func.value == "next" and not first.star
    if type(first) is cst.Attribute and first.value is node and type(second) is cst.Call:
        return second.func is first and first.attr.value in ("next", "__next__") and not second.args
    return False


def _mentions(
    scope: cst.CSTNode, name: str, skip: cst.Name
) -> Iterator[Tuple[cst.Name, List[cst.CSTNode], bool]]:
    """Every ``Name`` ``name`` under ``scope`` but ``skip``: with its ancestors
    (outermost first) and whether a loop of the scope runs it. Attribute names
    (``x.name``) and keywords (``f(name=...)``) are not mentions."""
    todo: List[Tuple[cst.CSTNode, Tuple[cst.CSTNode, ...], bool]] = [(scope, (), False)]
    while todo:
        node, parents, in_loop = todo.pop()
        kind = type(node)
        if kind is cst.Name:
            if node.value == name and node is not skip:
                parent = parents[-1] if parents else None
                if type(parent) is cst.Attribute and parent.attr is node:
                    continue
                if type(parent) is cst.Arg and parent.keyword is node:
                    continue
                yield node, list(parents), in_loop
            continue
        if kind in (cst.FunctionDef, cst.Lambda) and _binds_parameter(node, name):
            continue  # a parameter of that name: another variable
        below = parents + (node,)
        looping = in_loop or kind in _LOOPS
        if kind is cst.If and _periodic(node.test):
            # `if step % 100 == 0: next(test_iter)`: a batch every N iterations, not one per iteration
            todo.append((node.test, below, in_loop))
            todo.append((node.body, below, False))
            if node.orelse is not None:
                todo.append((node.orelse, below, in_loop))
            continue
        if kind is cst.For:
            # The iterable is evaluated once, before the loop.
            todo.append((node.iter, below, in_loop))
            todo.extend((child, below, True) for child in iter_children(node) if child is not node.iter)
            continue
        if kind in _COMPREHENSIONS:
            # So is a comprehension's first iterable: `[x.cuda() for x in next(iter(loader))]`.
            first = node.for_in
            todo.append((first.iter, below + (first,), in_loop))
            todo.extend((child, below + (first,), True) for child in iter_children(first) if child is not first.iter)
            todo.extend((child, below, True) for child in iter_children(node) if child is not first)
            continue
        todo.extend((child, below, looping) for child in iter_children(node))


def _periodic(test: cst.BaseExpression) -> bool:
    """``step % 100 == 0`` (or ``not step % 100``): true every N iterations."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        test = test.expression
        return type(test) is cst.BinaryOperation and type(test.operator) is cst.Modulo
    return (type(test) is cst.Comparison and type(test.left) is cst.BinaryOperation
            and type(test.left.operator) is cst.Modulo and len(test.comparisons) == 1
            and type(test.comparisons[0].operator) is cst.Equal)


def _binds_parameter(function, name: str) -> bool:
    params = function.params
    return any(
        p.name.value == name
        for p in (*params.posonly_params, *params.params, *params.kwonly_params)
    ) or any(
        isinstance(p, cst.Param) and p.name.value == name for p in (params.star_arg, params.star_kwarg)
    )


def in_dataset_demo(ctx) -> bool:
    """Whether the node being visited is in the ``if __name__ == "__main__":``
    block of a module that defines a dataset (a ``__getitem__``) and trains
    nothing (no ``.backward(``), a block that moves nothing to a device: the
    module's own demo, which loads samples to print their shapes or plot a
    few, once, by hand (an evaluation script that defines its dataset moves
    its batches to the device)."""
    source = ctx.source
    if "__getitem__" not in source or ".backward(" in source or "__main__" not in source:
        return False
    for node in ctx.stack:
        if type(node) is cst.If and is_main_guard(node):
            code = cst.Module([]).code_for_node(node)
            return not any(word in code for word in (".cuda(", ".to(", "device"))
    return False
