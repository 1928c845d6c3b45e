"""Shared questions of the "in a loop" rules TL102, TL103 and TL702, and the
statement a reported call makes up (which TL701 and TL702 hand to the
``remove_statement`` codemod).

Everything here looks at the ancestry the walker already holds
(``Context.stack``) or walks one loop body once (cached per loop); nothing
walks a whole function or module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import libcst as cst

from torchlint.rule import Context
from torchlint.walker import iter_children

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)

# Clocks whose reading is only meaningful once the device has caught up.
CLOCKS = frozenset(
    {
        "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns",
        "time.monotonic", "time.monotonic_ns", "time.process_time", "time.process_time_ns",
        "timeit.default_timer", "datetime.datetime.now", "datetime.datetime.utcnow",
    }
)
# Allocator statistics: a loop that reads them measures memory per iteration.
_MEMORY_STATS = frozenset(
    {
        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_max_memory_cached",
        "reset_accumulated_memory_stats", "memory_stats", "memory_summary", "mem_get_info",
        "memory_cached", "max_memory_cached",
    }
)
# Exceptions that an out-of-memory retry loop catches.
_OOM_ERRORS = frozenset(
    {"torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError", "torch.cuda.memory.OutOfMemoryError"}
)
_OOM_BUILTINS = frozenset({"RuntimeError", "MemoryError"})


# -- where the node being visited runs ----------------------------------------------


def _ends_with_exit(block: cst.CSTNode) -> bool:
    """Whether a block's last statement is ``break``, ``return`` or ``raise``."""
    body = getattr(block, "body", ())
    if not body:
        return False
    last = body[-1]
    if isinstance(block, cst.SimpleStatementSuite):
        return isinstance(last, (cst.Break, cst.Return, cst.Raise))
    return isinstance(last, cst.SimpleStatementLine) and isinstance(
        last.body[-1], (cst.Break, cst.Return, cst.Raise)
    )


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


def _counters(loop: cst.CSTNode) -> List[str]:
    """The loop variable that counts iterations: ``i`` in ``for i in range(n)``
    and in ``for i, x in enumerate(xs)`` (its values never repeat)."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return []
    func = loop.iter.func
    if not isinstance(func, cst.Name):
        return []
    target = loop.target
    if func.value == "range" and isinstance(target, cst.Name):
        return [target.value]
    if func.value == "enumerate" and isinstance(target, (cst.Tuple, cst.List)) and target.elements:
        first = target.elements[0].value
        if isinstance(first, cst.Name):
            return [first.value]
    return []


def _compares_counter_to_literal(test: cst.BaseExpression, counters: List[str]) -> bool:
    """``i == 0`` / ``0 == i`` / ``i == n - 1`` where ``i`` is a loop variable:
    true on one iteration only."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return False
    sides = (test.left, target.comparator)
    return any(isinstance(a, cst.Name) and a.value in counters for a in sides) and any(
        isinstance(b, (cst.Integer, cst.BinaryOperation)) for b in sides
    )


def runs_once(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited runs at most once per loop: it is part of
    a ``return``/``raise``, of a block (inside the loop) that ends the loop
    with ``break``/``return``/``raise`` (as TL101 judges), or of the body of an
    ``if`` that compares the loop's counter with a constant (``if i == 0:``)."""
    counters = _counters(loop)
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        ancestor = stack[i]
        if ancestor is loop:
            return False
        if isinstance(ancestor, (cst.Return, cst.Raise)):
            return True
        if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)) and _ends_with_exit(ancestor):
            return True
        if (
            counters
            and isinstance(ancestor, cst.If)
            and stack[i + 1] is ancestor.body
            and _compares_counter_to_literal(ancestor.test, counters)
        ):
            return True
    return False


def in_except_handler(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited is in an ``except`` clause inside ``loop``
    (it runs only when an iteration fails)."""
    for ancestor in ctx.ancestors():
        if ancestor is loop:
            return False
        if isinstance(ancestor, (cst.ExceptHandler, cst.ExceptStarHandler)):
            return True
    return False


def is_epoch_loop(loop: cst.CSTNode) -> bool:
    """``for epoch in ...``/``for epoch_idx, ... in ...`` (a loop variable whose
    name contains ``epoch``): one iteration is a whole pass over the data, so a
    per-iteration cost is paid once per epoch."""
    if not isinstance(loop, cst.For):
        return False
    return any("epoch" in n.lower() for n in target_names(loop.target))


# -- names -------------------------------------------------------------------------------

# Names that denote an `nn.Module` (as a receiver of `.cpu()`, or in `del model`),
# as the last word of a snake_case name: `model`, `ema_model`, `text_encoder`.
_MODULE_NAMES = frozenset(
    {
        "model", "models", "module", "modules", "backbone", "encoder", "decoder", "classifier",
        "net", "network", "teacher", "student", "ema", "head", "layer", "layers", "block",
        "blocks", "critic", "actor", "policy", "discriminator", "unet", "vae", "generator",
        "submodule", "child", "wrapper",
    }
)


def names_a_module(expr: cst.BaseExpression) -> bool:
    """``model``, ``self.model``, ``ema_model``, ``model2``, ``net``, ``resnet``,
    ``text_encoder``; not ``model_output`` or ``encoder_out`` (data)."""
    if isinstance(expr, cst.Name):
        name = expr.value
    elif isinstance(expr, cst.Attribute):
        name = expr.attr.value
    else:
        return False
    last = name.lower().strip("_").rsplit("_", 1)[-1].rstrip("0123456789")
    return last in _MODULE_NAMES or last.endswith("net") or last.endswith("model")


# -- what a loop body does (one walk per loop, cached) -------------------------------


@dataclass
class LoopFacts:
    reads_clock: bool = False
    """Reads a wall clock or CUDA event timings: a timing or benchmark loop."""
    collects_garbage: bool = False
    """Calls ``gc.collect()``: releases memory on purpose between heavy iterations."""
    reads_memory_stats: bool = False
    """Reads or resets allocator statistics: measures memory per iteration."""
    retries_on_oom: bool = False
    """Has a ``try`` whose handler catches an out-of-memory error."""
    deletes_model: bool = False
    """``del model``: each iteration builds and drops a whole model."""


def _is_oom_handler(ctx: Context, handler: cst.CSTNode) -> bool:
    kind = getattr(handler, "type", None)
    if kind is None:
        return False
    kinds = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
    for k in kinds:
        q = ctx.qualname(k)
        if q in _OOM_ERRORS:
            return True
        if q is None and isinstance(k, cst.Name) and k.value in _OOM_BUILTINS:
            return True
    return False


def _scan(ctx: Context, roots: List[cst.CSTNode]) -> LoopFacts:
    facts = LoopFacts()
    todo = list(roots)
    while todo:
        node = todo.pop()
        if isinstance(node, _SCOPES):
            continue  # a function defined in the loop does not run there
        if isinstance(node, cst.Call):
            func = node.func
            q = ctx.qualname(func)
            attr = func.attr.value if isinstance(func, cst.Attribute) else None
            if q in CLOCKS or attr == "elapsed_time":
                facts.reads_clock = True
            elif q == "gc.collect":
                facts.collects_garbage = True
            elif q is not None and q.startswith("torch.") and q.rsplit(".", 1)[-1] in _MEMORY_STATS:
                facts.reads_memory_stats = True
        elif isinstance(node, cst.Del):
            target = node.target
            targets = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            if any(names_a_module(t) for t in targets):
                facts.deletes_model = True
        elif isinstance(node, cst.Try) or isinstance(node, getattr(cst, "TryStar", cst.Try)):
            if any(_is_oom_handler(ctx, h) for h in node.handlers):
                facts.retries_on_oom = True
        todo.extend(iter_children(node))
    return facts


def loop_facts(ctx: Context, loop: cst.CSTNode, cache: Dict[int, LoopFacts]) -> LoopFacts:
    """What the body of ``loop`` does (its test too, for a ``while``).  A
    comprehension is scanned whole.  Names resolve as at the node being
    visited, so call this during the walk."""
    facts = cache.get(id(loop))
    if facts is None:
        if isinstance(loop, cst.For):
            roots: List[cst.CSTNode] = [loop.body]
        elif isinstance(loop, cst.While):
            roots = [loop.test, loop.body]
        else:
            roots = [loop]
        facts = _scan(ctx, roots)
        cache[id(loop)] = facts
    return facts


# -- the statement a call makes up ------------------------------------------------------

Block = Union[cst.IndentedBlock, cst.Module]


@dataclass(frozen=True)
class Statement:
    """A call that is a whole expression statement: ``owner`` is its line (or
    one-line suite), ``small`` the ``Expr`` in it, ``block`` the block that
    holds ``owner`` (None for a suite)."""

    owner: Union[cst.SimpleStatementLine, cst.SimpleStatementSuite]
    small: cst.Expr
    block: Optional[Block]


def expression_statement(ctx: Context) -> Optional[Statement]:
    """The statement made up of the call being visited alone, else None."""
    stack = ctx.stack
    if len(stack) < 3:
        return None
    call, expr, owner = stack[-1], stack[-2], stack[-3]
    if not (isinstance(expr, cst.Expr) and expr.value is call):
        return None
    if isinstance(owner, cst.SimpleStatementSuite):
        return Statement(owner, expr, None)
    if isinstance(owner, cst.SimpleStatementLine) and len(stack) >= 4:
        block = stack[-4]
        if isinstance(block, (cst.IndentedBlock, cst.Module)):
            return Statement(owner, expr, block)
    return None


def chain_top(ctx: Context) -> Tuple[cst.CSTNode, int]:
    """The outermost call of the method chain that the node being visited
    starts (``x.cpu().numpy().tolist()`` for ``x.cpu()``), and its index in
    ``ctx.stack``.  Attribute accesses between calls (``.data``) are part of
    the chain; a chain ends at anything else."""
    stack = ctx.stack
    i = len(stack) - 1
    while True:
        j = i
        while j - 1 >= 0 and isinstance(stack[j - 1], cst.Attribute) and stack[j - 1].value is stack[j]:
            j -= 1
        if j == i or j - 1 < 0:
            break
        parent = stack[j - 1]
        if isinstance(parent, cst.Call) and parent.func is stack[j]:
            i = j - 1
        else:
            break
    return stack[i], i
