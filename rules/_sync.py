"""Shared questions of the "in a loop" rules TL101, TL102, TL103 and TL702, and the
statement a reported call makes up (which TL701 and TL702 hand to the
``codemods.statements.remove_statement``).

Also what a host copy (``.cpu()``, ``.to("cpu")``) is for, which TL102 asks:
copies that are the point (written, drawn, decoded, handed to an environment
step or a parameter, serialised), copies of weights or in loops over modules,
and the copies the device could spare (operands of host arithmetic, results
gathered for ``torch.cat``).

Everything here looks at the ancestry the walker already holds
(``Context.stack``) or walks one loop body once (cached per loop); only the
questions about a list a copy is gathered into walk the enclosing function
(``feeds_host_sink`` with ``gathered=True``, and ``gathered_for_concatenation``,
which caches its answer per function), and ``feeds_host_api`` reads the
module's top-level imports (cached per module).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Collection, Dict, List, Optional, Tuple, Union

import libcst as cst

from torchlint.rule import Context, own_callee
from torchlint.nodes import inner_children, iter_children, target_names, walk_nodes
from torchlint.rules._helpers import (
    blocking_flag, equality_sides, is_docstring, keyword, last_name, literal_number, method_name, moves_to_device,
    names_anywhere, receiver, source_mentions, statement_position, string_value,
)
from torchlint.rules._models import MODULE_COLLECTIONS, names_a_module
from torchlint.rules._training import is_backward, is_optimizer_step, with_grad_modes

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)

# Clocks whose reading is only meaningful once the device has caught up.
CLOCKS = frozenset(
    {
        "time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns",
        "time.monotonic", "time.monotonic_ns", "time.process_time", "time.process_time_ns",
        "timeit.default_timer", "datetime.datetime.now", "datetime.datetime.utcnow",
    }
)
# Calls that wait for all work queued on the device.
DEVICE_SYNCS = frozenset(
    {
        "torch.cuda.synchronize", "torch.accelerator.synchronize", "torch.xpu.synchronize",
        "torch.mps.synchronize",
    }
)
# Timers by name: `meter.iter_tic()`/`iter_toc()`, `timer.tic()`/`toc()` (a
# stopwatch object whose reading needs the device to have caught up), and the
# detection codebases' `time_synchronized()`/`time_sync()`, which synchronize the
# device and then read the clock.
_TIMER_CALL = re.compile(r"^(?:\w+_)?(?:tic|toc)$")
# A timer object built or entered in the loop (`with Timer("update: %f"):`,
# `CudaTimer()`, `stopwatch()`): it reads a clock around the region.
_TIMER_OBJECT = re.compile(r"(?:^|_|[a-z])(?:timer|timing|stopwatch)$", re.IGNORECASE)
# `profiler.tick("Loss")`: a profiler that times each stage of the step.
_PROFILER = re.compile(r"profil|timer", re.IGNORECASE)
_SYNCED_CLOCK = re.compile(r"^time_sync(?:hronized)?$")
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


def _last_small_statement(block: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The last simple statement of a block (``break``, ``x = 1``, ``f()``), or None
    when the block is empty or ends with a compound statement."""
    body = getattr(block, "body", ())
    if not body:
        return None
    last = body[-1]
    if isinstance(block, cst.SimpleStatementSuite):
        return last
    if isinstance(last, cst.SimpleStatementLine):
        return last.body[-1]
    return None


def ends_with_exit(block: cst.CSTNode, *, leaving=(cst.Break, cst.Return, cst.Raise)) -> bool:
    """Whether a block's last statement is ``break``, ``return``, ``raise`` (the
    kinds in ``leaving``) or a call that ends the process (``sys.exit(1)``,
    ``exit()``, ``os._exit(1)``)."""
    small = _last_small_statement(block)
    if small is None:
        return False
    if isinstance(small, leaving):
        return True
    return isinstance(small, cst.Expr) and _exits_process(small.value)


def runs_one_iteration(loop: cst.CSTNode) -> bool:
    """A ``for``/``while`` loop whose body ends with an unconditional
    ``break``, ``return`` or ``raise``: it runs its body once (one batch for a
    data-dependent initialisation, ``for x in loader: ...; break``)."""
    return isinstance(loop, (cst.For, cst.While)) and ends_with_exit(loop.body)


# Calls that wait for the whole device: `torch.cuda.empty_cache()` frees the
# cached blocks only after synchronizing.
_DEVICE_WAITS = frozenset({"torch.cuda.synchronize", "torch.cuda.empty_cache", "torch.cuda.ipc_collect"})


def empties_device_every_iteration(ctx: Context, loop: cst.CSTNode) -> bool:
    """A ``for``/``while`` loop whose body waits for the whole device every
    iteration by design, in a statement of its own at the body's top level:
    ``torch.cuda.empty_cache()`` or ``torch.cuda.synchronize()`` (MPRNet's test
    loop empties the cache before each image).  A copy into it has no queued
    work to wait for."""
    body = getattr(loop, "body", None)
    if not isinstance(loop, (cst.For, cst.While)) or not isinstance(body, cst.IndentedBlock):
        return False
    for statement in body.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if type(small) is cst.Expr and type(small.value) is cst.Call and ctx.qualname(
                        small.value.func) in _DEVICE_WAITS:
                    return True
    return False


_FEW_ITERATIONS = 16  # `if i >= 16: break` still caps a loop at "a few"


def breaks_after_few(loop: cst.CSTNode) -> bool:
    """A ``for`` loop whose body has, as a statement of its own, ``if i >= 6:
    break`` (or ``>``, ``==``) with ``i`` its counter (``range``/``enumerate``)
    and a small integer: it runs a few times whatever it iterates over (a few
    reconstructions written out after an evaluation)."""
    counters = loop_counters(loop)
    body = getattr(loop, "body", None)
    if not counters or not isinstance(body, cst.IndentedBlock):
        return False
    for statement in body.body:
        if not isinstance(statement, cst.If) or statement.orelse is not None:
            continue
        test = statement.test
        if not (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.left, cst.Name)
            and test.left.value in counters
            and isinstance(test.comparisons[0].operator, (cst.GreaterThan, cst.GreaterThanEqual, cst.Equal))
        ):
            continue
        comparator = test.comparisons[0].comparator
        bound = literal_number(comparator) if isinstance(comparator, cst.Integer) else None
        block = statement.body
        if (
            bound is not None
            and bound <= _FEW_ITERATIONS
            and isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite))
            and len(block.body) == 1
            and _only_break(block.body[0])
        ):
            return True
    return False


def few_range(iterable: cst.BaseExpression) -> bool:
    """``range(5)``, ``range(1, 4)``: a count of at most a few, written as
    integer literals (``for SAMPLE in range(5):``, a few samples printed after
    training)."""
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
        return False
    args = iterable.args
    if not 1 <= len(args) <= 2 or any(a.keyword is not None or a.star for a in args):
        return False
    bounds = [literal_number(a.value) if isinstance(a.value, cst.Integer) else None for a in args]
    if any(b is None for b in bounds):
        return False
    start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
    return stop - start <= _FEW_ITERATIONS


def _only_break(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        return len(statement.body) == 1 and isinstance(statement.body[0], cst.Break)
    return isinstance(statement, cst.Break)


def _exits_process(expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    if isinstance(func, cst.Name):
        return func.value in ("exit", "quit")
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        return (func.value.value, func.attr.value) in (("sys", "exit"), ("os", "_exit"))
    return False


def loop_counters(loop: cst.CSTNode) -> List[str]:
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
    sides = equality_sides(test)
    if sides is None:
        return False
    return any(isinstance(a, cst.Name) and a.value in counters for a in sides) and any(
        isinstance(b, (cst.Integer, cst.BinaryOperation)) for b in sides
    )


def runs_once(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited runs at most once per loop (or a fixed
    number of times): it is part of a ``return``/``raise``, of a block (inside
    the loop) that ends the loop or the process (``break``/``return``/``raise``,
    ``sys.exit(...)``), of the body of an ``if`` that compares the loop's
    counter with a constant (``if i == 0:``), of the body of an ``if`` that
    caps how often it runs (``if shown < 3:`` whose body does ``shown += 1``),
    or of the body of a periodic guard kept with a counter (``if seen == k:``
    whose body resets ``seen = 0``)."""
    counters = loop_counters(loop)
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        ancestor = stack[i]
        if ancestor is loop:
            return False
        if isinstance(ancestor, (cst.Return, cst.Raise)):
            return True
        if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)) and ends_with_exit(ancestor):
            return True
        if (
            counters
            and isinstance(ancestor, cst.If)
            and stack[i + 1] is ancestor.body
            and _compares_counter_to_literal(ancestor.test, counters)
        ):
            return True
        if isinstance(ancestor, cst.If) and stack[i + 1] is ancestor.body and (
            _capped(ancestor) or _counted(ancestor) or capped_by_loop(ancestor, loop)
        ):
            return True
    return False


def capped_by_loop(node: cst.If, loop: cst.CSTNode) -> bool:
    """``if num_total < 10:`` (or ``<=``) where the loop's own body increments
    ``num_total`` every iteration (``num_total += 1`` as a statement of the
    body, not under a condition): the block runs for the first few iterations
    only (a debug print of the first examples)."""
    body = getattr(loop, "body", None)
    if not isinstance(loop, (cst.For, cst.While)) or not isinstance(body, cst.IndentedBlock):
        return False
    names = [n for n in _test_names(node.test, (cst.LessThan, cst.LessThanEqual)) if _compared_with_integer(node.test, n)]
    for statement in body.body:
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign)
            and isinstance(small.target, cst.Name) and small.target.value in names
            for small in statement.body
        ):
            return True
    return False


def _test_names(test: cst.BaseExpression, operators) -> List[str]:
    """Names compared (``name <op> <anything>``) in a test or its ``and`` operands."""
    names: List[str] = []
    todo: List[cst.BaseExpression] = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
            todo.extend((node.left, node.right))
        elif (
            isinstance(node, cst.Comparison)
            and len(node.comparisons) == 1
            and isinstance(node.comparisons[0].operator, operators)
            and isinstance(node.left, cst.Name)
        ):
            names.append(node.left.value)
    return names


def _body_assigns(node: cst.If, names: List[str], *, increment: bool) -> bool:
    """Whether the ``if`` body has ``name += 1`` (``increment``) or ``name = 0``
    as a statement of its own, for one of ``names``."""
    if not names or not isinstance(node.body, cst.IndentedBlock):
        return False
    for statement in node.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if increment:
                if (
                    isinstance(small, cst.AugAssign)
                    and isinstance(small.operator, cst.AddAssign)
                    and isinstance(small.target, cst.Name)
                    and small.target.value in names
                ):
                    return True
            elif (
                isinstance(small, cst.Assign)
                and isinstance(small.value, cst.Integer)
                and small.value.value == "0"
                and any(isinstance(t.target, cst.Name) and t.target.value in names for t in small.targets)
            ):
                return True
    return False


def _counted(node: cst.If) -> bool:
    """``if seen == every:`` (or ``>=``) whose body resets ``seen = 0``: a
    periodic guard written with a counter instead of ``%``."""
    return _body_assigns(node, _test_names(node.test, (cst.Equal, cst.GreaterThanEqual)), increment=False)


def _capped(node: cst.If) -> bool:
    """``if ... shown < 3:`` (or ``<=``, possibly one operand of ``and``) whose
    body increments ``shown``: the block runs at most a fixed number of times."""
    names = [
        n
        for n in _test_names(node.test, (cst.LessThan, cst.LessThanEqual))
        if _compared_with_integer(node.test, n)
    ]
    return _body_assigns(node, names, increment=True)


def _compared_with_integer(test: cst.BaseExpression, name: str) -> bool:
    todo: List[cst.BaseExpression] = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.BooleanOperation):
            todo.extend((node.left, node.right))
        elif (
            isinstance(node, cst.Comparison)
            and isinstance(node.left, cst.Name)
            and node.left.value == name
            and isinstance(node.comparisons[0].comparator, cst.Integer)
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


def is_epoch_loop(loop: cst.CSTNode, facts: Optional["LoopFacts"] = None) -> bool:
    """``for epoch in ...``/``for epoch_idx, ... in ...`` (a loop variable whose
    name contains ``epoch``): one iteration is a whole pass over the data, so a
    per-iteration cost is paid once per epoch.  Given the loop's ``facts``, a
    loop that itself runs a training step (``loss.backward()`` in its own body,
    not in an inner loop: full-batch training, where an "epoch" is one step)
    is not an epoch loop."""
    if not isinstance(loop, (cst.For, cst.While)):
        return False
    if not (isinstance(loop, cst.For) and any("epoch" in n.lower() for n in target_names(loop.target))
            or _runs_an_epoch(loop)):
        return False
    return facts is None or not facts.steps_directly


# `train_epoch`, `train_one_epoch`, `run_epoch`, `_train_epoch`, `fit_epoch`, `epoch_train`.
_EPOCH_CALL = re.compile(r"^_?(?:(?:train|run|fit)_(?:one_)?epoch|epoch_(?:train|run))$", re.IGNORECASE)
# `epoch`, `self.epoch_num`, `cur_epoch`, `n_epochs`, `epoch_idx`: a name for the epoch count.
_EPOCH_COUNT = re.compile(r"^(?:\w+_)?epochs?(?:_(?:num|idx|id|count|counter|no))?$", re.IGNORECASE)


def _runs_an_epoch(loop: cst.CSTNode) -> bool:
    """A loop whose body, in statements of its own that run every iteration,
    calls a function that runs an epoch (``self.train_epoch()``,
    ``train_one_epoch(...)``) or counts epochs (``self.epoch_num += 1``): each
    iteration is a whole pass (rl_games's ``while True:`` around
    ``train_epoch``)."""
    body = getattr(loop, "body", None)
    for statement in getattr(body, "body", ()):
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for small in statement.body:
            if type(small) is cst.AugAssign and type(small.operator) is cst.AddAssign and literal_number(
                    small.value) == 1 and _EPOCH_COUNT.match(last_name(small.target) or ""):
                return True  # `self.epoch_num += 1`
            value = getattr(small, "value", None)
            if type(value) is cst.Call and _EPOCH_CALL.match(last_name(value.func) or ""):
                return True  # `losses = self.train_epoch()`
    return False


def is_streaming_loop(loop: cst.CSTNode) -> bool:
    """``for token in generate_text_stream(...)``: a loop over a generator whose
    name says it streams (``stream`` in the called name); each value is wanted
    on the host as soon as it is produced, to be shown or sent on."""
    if not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Call):
        return False
    func = loop.iter.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return "stream" in name.lower()


def runs_once_per_pass(ctx: Context, loop: cst.CSTNode, cache: Dict[int, "LoopFacts"]) -> bool:
    """Whether one iteration of ``loop`` is a whole pass of work, so that a cost
    paid once per iteration is negligible: a loop over epochs (that does not
    itself step), a loop over a streaming generator, a loop whose body runs a
    whole text generation (``model.generate(...)``) or, outside training, a
    whole sampler (``runs_sampler``), an interactive loop that waits for
    ``input()``, or a walk over a model's parameters once per epoch."""
    if is_streaming_loop(loop) or _walks_parameters_per_epoch(ctx, loop, cache):
        return True
    facts = loop_facts(ctx, loop, cache)
    return is_epoch_loop(loop, facts) or facts.generates or facts.prompts_user or (
        not facts.optimizes and runs_sampler(loop))


_PARAMETER_WALKS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children"})


def _walks_parameters_per_epoch(ctx: Context, loop: cst.CSTNode, cache: Dict[int, "LoopFacts"]) -> bool:
    """``for p in net.parameters():`` (or ``named_parameters()``, ``modules()``)
    whose nearest enclosing loop is an epoch loop: it runs once per epoch,
    after the epoch's steps (a gradient norm logged per epoch), not per step;
    the same walk in an optimizer's ``step()`` runs every step."""
    if type(loop) is not cst.For or type(loop.iter) is not cst.Call or type(loop.iter.func) is not cst.Attribute:
        return False
    if loop.iter.func.attr.value not in _PARAMETER_WALKS:
        return False
    loops = list(ctx.enclosing_loops(periodic_guard=False))
    index = next((i for i, outer in enumerate(loops) if outer is loop), None)
    if index is None or index + 1 >= len(loops):
        return False
    outer = loops[index + 1]
    return is_epoch_loop(outer, loop_facts(ctx, outer, cache))


_SAMPLER_CALL = re.compile(r"^(?:sampling|run_sampling|\w*sample_loop|sample_\w*loop)$")


def runs_sampler(loop: cst.CSTNode) -> bool:
    """Whether each iteration of ``loop`` runs a whole sampler: a call in its
    body, not under a condition, of a function named for one (``sampling(...)``,
    ``p_sample_loop(...)``, ``ddim_sampler.sample(S=50, ...)``), also inside a retry
    loop (``while predictions is None: try: ... = sampling(...)``): each
    iteration runs the model many times over (DiffDock's evaluation, one
    reverse diffusion per complex), so a copy or read per iteration is noise."""
    if not isinstance(loop, (cst.For, cst.While)):
        return False  # (a comprehension)
    todo = list(getattr(loop.body, "body", ()))
    while todo:
        node = todo.pop()
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                value = getattr(small, "value", None)
                if isinstance(value, cst.Call) and _names_sampler(value):
                    return True
        elif isinstance(node, (cst.With, cst.Try)) or isinstance(node, cst.While) and _tests_none(node.test):
            todo.extend(getattr(node.body, "body", ()))
    return False


def _names_sampler(call: cst.Call) -> bool:
    """``sampling(...)``, ``p_sample_loop(...)``; ``sampler.sample(S=50, ...)``
    only with a number of steps (not mmdet's ``bbox_sampler.sample(...)``)."""
    func = call.func
    if isinstance(func, cst.Name):
        return _SAMPLER_CALL.match(func.value) is not None
    if isinstance(func, cst.Attribute):
        return _SAMPLER_CALL.match(func.attr.value) is not None or (
            func.attr.value == "sample" and "sampler" in (last_name(func.value) or "").lower()
            and any(a.keyword is not None and _STEPS_KEYWORD.match(a.keyword.value) for a in call.args))
    return False


_STEPS_KEYWORD = re.compile(r"^(?:S|steps|\w*_steps|timesteps|num_timesteps)$")


def _tests_none(test: cst.BaseExpression) -> bool:
    """``x is None``, ``x == None``, ``not x``: a loop that retries until it has a result."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return isinstance(test.expression, cst.Name)
    return (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, (cst.Is, cst.Equal))
            and isinstance(test.comparisons[0].comparator, cst.Name) and test.comparisons[0].comparator.value == "None")


def converts_any_value(ctx: Context, loop: cst.CSTNode, cache: Dict[int, "LoopFacts"]) -> bool:
    """Whether the node being visited is in a branch taken only for tensors
    (``if isinstance(v, torch.Tensor):``, ``v.item() if torch.is_tensor(v) else
    v``) inside ``loop``, and the loop runs no training step: code that turns
    values which may or may not be tensors into host values (a logger, a results
    table, input normalisation), not a step of the computation."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        node = stack[i]
        if node is loop:
            return False
        child = stack[i + 1]
        if isinstance(node, (cst.If, cst.IfExp)) and child is node.body and isinstance_tensor_subject(node.test) is not None:
            return not loop_facts(ctx, loop, cache).trains
    return False


def isinstance_tensor_subject(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """``x`` in ``isinstance(x, torch.Tensor)``, ``isinstance(x, (Tensor, ...))``,
    ``torch.is_tensor(x)``, also as an operand of ``and``."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return isinstance_tensor_subject(test.left) or isinstance_tensor_subject(test.right)
    if not isinstance(test, cst.Call) or not test.args:
        return None
    subject = test.args[0].value
    func = test.func
    if isinstance(func, cst.Attribute) and func.attr.value == "is_tensor":
        return subject
    if isinstance(func, cst.Name) and func.value == "isinstance" and len(test.args) == 2:
        kinds = test.args[1].value
        options = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if any(isinstance(o, (cst.Name, cst.Attribute)) and _last(o) == "Tensor" for o in options):
            return subject
    return None


def _last(expr: cst.BaseExpression) -> str:
    return expr.value if isinstance(expr, cst.Name) else expr.attr.value if isinstance(expr, cst.Attribute) else ""


def in_data_pipeline(ctx: Context) -> bool:
    """Inside a ``torch.utils.data`` ``Dataset`` or ``Sampler`` subclass, a
    collate function or collator class (``def collate_fn``, ``class
    MultiModalCollator``), a module-level function that only such classes of
    the module use (the shuffling helper of a ``samplers.py``), or a module
    under a ``dataset``/``datasets``/``transforms`` directory that never names a device:
    data loading runs on the host (often in worker processes)."""
    for node in ctx.stack:
        if isinstance(node, cst.ClassDef) and (_is_data_class(ctx, node) or _COLLATOR.search(node.name.value)):
            return True
        if isinstance(node, cst.FunctionDef) and "collate" in node.name.value.lower():
            return True
    if _in_dataset_directory(ctx):
        return True
    function = ctx.stack[1] if len(ctx.stack) > 1 and ctx.module is not None else None
    if not isinstance(function, cst.FunctionDef) or ctx.stack[0] is not ctx.module:
        return False
    cache = ctx.shared.setdefault("data-helpers", {})
    found = cache.get(id(function))
    if found is None:
        found = cache[id(function)] = _data_helper(ctx, function.name.value)
    return found


# A collate function's class: `MultiModalCollator`, `DataCollatorWithPadding`, `PadCollate`.
_COLLATOR = re.compile(r"Collat(?:or|e)(?:Fn)?$")
_DATASET_DIRECTORY = frozenset({"dataset", "datasets", "transforms"})


def _in_dataset_directory(ctx: Context) -> bool:
    """A module under a ``dataset``/``datasets``/``transforms`` directory
    that never names a device (``cuda``, ``device``): the data pipeline's
    transforms and helpers, which run on the host."""
    found = ctx.shared.get("dataset-directory")
    if found is None:
        parts = ctx.path.replace("\\", "/").split("/")[:-1]
        found = ctx.shared["dataset-directory"] = any(p in _DATASET_DIRECTORY for p in parts) and not (
            "cuda" in ctx.source or "device" in ctx.source
        )
    return found


def _data_helper(ctx: Context, name: str) -> bool:
    """Whether the module names ``name`` only inside its data classes, and at least once."""
    inside = False
    for statement in ctx.module.body:
        data = isinstance(statement, cst.ClassDef) and _is_data_class(ctx, statement)
        roots = [statement] if not isinstance(statement, cst.FunctionDef) else [statement.body]
        used = any(names_anywhere(root, name) for root in roots)
        if used and not data:
            return False
        inside = inside or used
    return inside


def _is_data_class(ctx: Context, node: cst.ClassDef) -> bool:
    for base in node.bases:
        q = ctx.qualname(base.value)
        if q is not None and q.startswith("torch.utils.data.") and q.endswith(("Dataset", "Sampler")):
            return True
    return False


# Words of a function name that says it draws or shows its inputs
# (`visualize_assign_result`, `draw_one_frame`, `perform_wrong_prediction_vis`,
# `plot_samples`), or converts results for a host evaluation API
# (`convert_to_coco_format`, `to_voc_results`, `lvis_json`).
_DRAWING_WORDS = r"vis|visuali[sz]e\w*|plot\w*|draw\w*"
_HOST_WORK_WORDS = re.compile(rf"(?:^|_)(?:{_DRAWING_WORDS}|coco|voc|lvis)(?:$|_)")
_DRAWING = re.compile(rf"(?:^|_)(?:{_DRAWING_WORDS})(?:$|_)")


def draws(name: str) -> bool:
    """Whether a function's name says it draws (``visualize_dev``,
    ``plot_samples``, ``draw_boxes``, ``vis_batch``)."""
    return _DRAWING.search(name.lower().strip("_")) is not None


def one_off_function(name: str) -> bool:
    """A function that builds a state dict or checkpoint, saves or exports
    (``save_progress``, ``export_to_ply``), sets up (``__init__``,
    ``init_weights``, ``loftq_init``), asserts (``assert_close_outputs``),
    draws (``draw_one_frame``, ``visualize_assign_result``) or
    converts results for a host evaluation API (``convert_to_coco_format``):
    its host copies and reads are the work itself, or run once."""
    lowered = name.lower()
    if any(word in lowered for word in ("state_dict", "checkpoint", "ckpt")):
        return True
    stripped = lowered.strip("_")
    if _HOST_WORK_WORDS.search(stripped):
        return True
    return (
        stripped.startswith(("save", "export", "init", "assert"))
        or "_save" in stripped
        or "_export" in stripped
        or stripped.endswith("_init")
    )


def enclosing_function_is_one_off(ctx: Context) -> bool:
    """Whether the innermost function around the node being visited is a
    :func:`one_off_function`."""
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.FunctionDef):
            return one_off_function(node.name.value)
    return False


_PICKLE = frozenset({"pickle.dumps", "pickle.loads", "pickle.dump", "pickle.load"})


def exchanges_pickled_objects(ctx: Context) -> bool:
    """Whether the innermost function around the node being visited pickles or
    unpickles Python objects (``pickle.dumps(data)`` ... ``pickle.loads(buf)``):
    an ``all_gather`` of arbitrary objects through byte tensors, whose reads
    of sizes and bytes are the protocol itself (the host needs them to
    unpickle); or a function that ``all_gather``s sizes in a module that
    pickles them (detectron2's ``_pad_to_largest_tensor``, a helper of the
    module's gather of pickled objects), or that encodes or decodes the
    buffers there (UNITER's ``_decode(buffer_, enc_byte)``, which reads the
    size header).  Cached per function in
    ``ctx.shared``."""
    function = ctx.enclosing_function()
    if function is None:
        return False
    cache = ctx.shared.setdefault("pickles", {})
    found = cache.get(id(function))
    if found is None:
        calls = [ctx.qualname(n.func) for n in walk_nodes(function.body) if isinstance(n, cst.Call)]
        found = any(q in _PICKLE for q in calls) or (
            (any(q is not None and q.endswith("distributed.all_gather") for q in calls)
             or any(w in function.name.value.lower() for w in ("encode", "decode")))
            and _module_pickles(ctx)
        )
        cache[id(function)] = found
    return found


_SIZE_WORDS = ("size", "shape", "len", "numel", "count", "num_")


def exchanges_sizes(ctx: Context, recv: cst.BaseExpression) -> bool:
    """Whether ``recv`` is a size (its root name says so: ``size[0]``,
    ``ls_size[i]``, ``local_count``, or it is the variable of a loop or
    comprehension over such a name: ``[a.item() for a in num_anchors_full]``)
    read in a function that ``all_gather``s: gathering tensors of different
    shapes pads each rank's to the largest, and the host needs every rank's
    size to pad and slice (``t[:size[0].item()]``); the exchange is the
    protocol."""
    root = _root_name(recv)
    if root is None:
        return False
    names = [root]
    for loop in ctx.enclosing_loops():
        for clause in loop_clauses(loop):
            if root in target_names(clause.target):
                names.append(_last(clause.iter))
    if not any(word in name.lower() for name in names for word in _SIZE_WORDS):
        return False
    function = ctx.enclosing_function()
    if function is None:
        return False
    cache = ctx.shared.setdefault("gathers", {})
    found = cache.get(id(function))
    if found is None:
        found = cache[id(function)] = any(
            isinstance(n, cst.Call) and last_name(n.func) == "all_gather" for n in walk_nodes(function.body))
    return found


def _module_pickles(ctx: Context) -> bool:
    found = ctx.shared.get("module-pickles")
    if found is None:
        found = ctx.shared["module-pickles"] = ctx.module is not None and "pickle" in ctx.source and any(
            isinstance(n, cst.Call) and ctx.qualname(n.func) in _PICKLE for n in walk_nodes(ctx.module)
        )
    return found


# -- loops over a few named values ---------------------------------------------------------

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def loop_clauses(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The ``for`` clauses (target and iterable) of a loop: a ``for``
    statement's, a comprehension clause's, or every clause of a comprehension
    (the element is not a descendant of the ``CompFor`` nodes)."""
    if isinstance(node, (cst.For, cst.CompFor)):
        return [node]
    if isinstance(node, _COMPREHENSIONS):
        clauses: List[cst.CSTNode] = []
        clause = node.for_in
        while clause is not None:
            clauses.append(clause)
            clause = clause.inner_for_in
        return clauses
    return []


# Builtins that go over their (first) argument's items in some order.
_ORDER_WRAPPERS = frozenset({"enumerate", "sorted", "list", "reversed", "tuple"})


def unwrap_iterable(expr: cst.BaseExpression, wrappers: frozenset) -> cst.BaseExpression:
    """The iterable inside calls of ``wrappers`` (``enumerate(sorted(d.keys()))``
    -> ``d.keys()``), following each call's first argument."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in wrappers and expr.args:
        expr = expr.args[0].value
    return expr


_CHUNKING = frozenset({"split", "chunk", "tensor_split"})
_CHUNK_WRAPPERS = _ORDER_WRAPPERS | {"tqdm"}


def iterates_chunks(loop: cst.CSTNode) -> bool:
    """A ``for`` loop over the pieces of one tensor (``for batch in
    embs.split(1 << 18)``, ``torch.chunk(x, n)``, also in ``enumerate``/``tqdm``):
    work cut into pieces to bound device memory, whose results go to the host
    piece by piece (ColBERT's index compression) on purpose."""
    if not isinstance(loop, cst.For):
        return False
    expr = unwrap_iterable(loop.iter, _CHUNK_WRAPPERS)
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _CHUNKING


def iterates_mapping(expr: cst.BaseExpression) -> bool:
    """``d.items()``/``d.values()``/``d.keys()``, a name ending in ``dict``
    (``loss_dict``, ``self.eval_dict``), or ``kwargs``; also inside
    ``enumerate(...)``, ``sorted(...)``, ``list(...)``, ``reversed(...)``."""
    expr = unwrap_iterable(expr, _ORDER_WRAPPERS)
    if isinstance(expr, cst.Call):
        return (
            isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in ("items", "values", "keys")
            and not expr.args
        )
    lowered = _last(expr).lower()
    return lowered.endswith("dict") or lowered == "kwargs"


def is_constant_display(expr: cst.BaseExpression) -> bool:
    """``["train", "val"]``, ``(100, 1000)``, ``"RGB"``: literals to go over."""
    if isinstance(expr, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    return (
        isinstance(expr, (cst.List, cst.Tuple, cst.Set))
        and bool(expr.elements)
        and all(isinstance(e.value, (cst.SimpleString, cst.Integer, cst.Float)) for e in expr.elements)
    )


def mentions(expr: cst.CSTNode, words) -> bool:
    """Whether a name or attribute in a (small) expression contains one of ``words``."""
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name):
            if any(word in node.value.lower() for word in words):
                return True
        elif isinstance(node, cst.Attribute):
            if any(word in node.attr.value.lower() for word in words):
                return True
            todo.append(node.value)
        elif isinstance(node, cst.Call):
            todo.append(node.func)
            todo.extend(arg.value for arg in node.args)
        elif isinstance(node, (cst.Tuple, cst.List)):
            todo.extend(e.value for e in node.elements)
        elif isinstance(node, (cst.StarredElement, cst.Subscript)):
            todo.append(node.value)
    return False


# -- what a loop body does (one walk per loop, cached) -------------------------------


@dataclass
class LoopFacts:
    reads_clock: bool = False
    """Reads a wall clock, CUDA event timings or a timer (``meter.iter_toc()``,
    ``timer.tic()``, ``time_synchronized()``): a timing or benchmark loop."""
    collects_garbage: bool = False
    """Calls ``gc.collect()``: releases memory on purpose between heavy iterations."""
    reads_memory_stats: bool = False
    """Reads or resets allocator statistics: measures memory per iteration."""
    retries_on_oom: bool = False
    """Has a ``try`` whose handler catches an out-of-memory error."""
    deletes_model: bool = False
    """``del model``: each iteration builds and drops a whole model."""
    generates: bool = False
    """Calls ``generate(...)`` (``model.generate``, ``generate_text(...)``) in its
    own body and not under a condition: each iteration runs a whole
    autoregressive generation."""
    trains: bool = False
    """Calls ``.backward()`` or ``.step()`` anywhere in the body: a training (or
    environment) step loop."""
    prompts_user: bool = False
    """Calls ``input()`` or ``cv2.waitKey(0)``: an interactive loop that waits
    for the user each time."""
    disables_grad: bool = False
    """Has a ``with torch.no_grad():`` (or ``inference_mode``) block in its own
    body: with no training step, an evaluation loop."""
    steps_directly: bool = False
    """Calls ``.backward()`` in its own body, outside any inner loop or
    comprehension: each iteration is a training step."""
    synchronizes: bool = False
    """Calls ``torch.cuda.synchronize()`` (or another whole-device sync) in its
    own body and not under a condition: it waits for the device every
    iteration already, so one more read of a value there costs nothing (the
    sync itself is TL103's finding)."""
    assigns: List[cst.CSTNode] = field(default_factory=list)
    """The ``a = ...`` and ``a += ...`` statements of its own body (not of a
    loop inside it)."""
    exits_on_read: bool = False
    """Ends the loop on a value its body read earlier (``token = ....item()``
    ... ``if token == eos: break``), or builds the next input from it
    (``output.append(y.argmax().item())`` ... ``torch.tensor([output[-1]])``);
    ``loop_facts`` counts it as
    ``exits_on_value`` for a loop that counts or runs until told (``for _ in
    range(max_len)``, ``while True``) or goes over a loader (a learning-rate
    finder's stop on the smoothed loss), not for one over a tensor's items,
    whose values could be read in one go before the loop."""
    stops_on_read: bool = False
    """The exit part of ``exits_on_read`` alone (not a value fed back into
    the next input)."""
    exits_on_value: bool = False
    """Ends the loop (``break``/``return``, not an error exit) on a device value
    read in its own body (``if token.item() in stop_tokens: break``):
    token-by-token decoding and the like, which wait for the device every
    iteration by design."""
    optimizes: bool = False
    """Runs a training step somewhere in its body: a backward
    (``loss.backward()``, ``accelerator.backward(loss)``), an optimizer step
    (``optimizer.step()``, ``scaler.step(optimizer)``), or a call of a step
    function named so (``step(batch)``, ``train_step(...)``,
    ``self.optimize_parameters()``).
    ``scheduler.step()`` and ``env.step(action)`` are not training steps."""
    waits_on_data: bool = False
    """Waits for the device every iteration by design, in its own body and not
    under a condition, with an operation whose result size or control flow
    depends on device values: ``nonzero()``, ``unique()``,
    ``masked_select()``, a one-argument ``torch.where(mask)``, or an
    ``if``/``while``/``assert`` test on a tensor (``if (x > 0).any():``,
    ``assert torch.isfinite(loss).all()``), or a loop over an RL data
    collector (``for data in collector:``), or a Pyro inference step
    (``svi.step(x)``, which answers with a float; ``elbo.differentiable_loss(...)``,
    which tests the loss for NaN).  None of these is a finding of
    the sync rules; one more read of a value there adds no new wait."""
    writes_output: bool = False
    """Writes or saves something in its own body and not under a condition
    (``writer.write_frame(output)``, ``cv2.imwrite(path, img)``,
    ``save_image(x, path)``; not a console write): each iteration's results
    reach host memory before the next one starts."""
    guards_finite: bool = False
    """Stops the run on a non-finite value read from the device, in its own
    body and not under a condition (``loss_value = loss.item()`` ... ``if not
    math.isfinite(loss_value): sys.exit(1)``, ``total += loss.item()`` ...
    ``assert not np.isnan(total)``): it waits for the device every iteration
    by design, so other reads there add no new wait."""
    round_trips: bool = False
    """Hands a host copy of device values to host code every iteration and
    needs its answer: an environment step in its own body and not under a
    condition (``envs.step(action.cpu().numpy())``, or ``actions =
    ....cpu().numpy()`` earlier in the body), or a call given a host copy
    whose result the body turns back into a tensor (``out, _ =
    host_model.forecast(inputs=x.cpu().numpy().tolist())`` ...
    ``torch.Tensor(out)``).  The host waits for the device there every
    iteration by design, in this loop and in the loops inside it."""


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


_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_CONDITIONS = (cst.If, cst.IfExp, cst.ExceptHandler, cst.BooleanOperation)


def _generates(func: cst.BaseExpression) -> bool:
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name == "generate" or name.startswith("generate_text") or name.endswith("_generate")


# The same sets, as concrete types for ``type(node) in ...`` (LibCST's node
# classes are never subclassed, and ``isinstance`` against them goes through
# ABCMeta's slow path: ``_scan`` asks it of every node of every loop body).
_SCOPE_TYPES = frozenset(_SCOPES)
_LOOP_TYPES = frozenset(_LOOPS)
_CONDITION_TYPES = frozenset(_CONDITIONS)
_TRY_TYPES = frozenset({cst.Try, getattr(cst, "TryStar", cst.Try)})
_TESTED_TYPES = frozenset({cst.If, cst.While, cst.Assert})


def _scan(ctx: Context, roots: List[cst.CSTNode]) -> LoopFacts:
    facts = LoopFacts()
    body = _BodyFacts()
    stores: set = set()  # subscripts assigned to
    # (node, in the loop's own body (not an inner loop), and not under a condition)
    todo: List[Tuple[cst.CSTNode, bool, bool]] = [(root, True, True) for root in roots]
    while todo:
        node, direct, always = todo.pop()
        kind = type(node)
        if kind in _SCOPE_TYPES:
            continue  # a function defined in the loop does not run there
        if direct:
            body.see(node, always)
        if kind is cst.Call:
            func = node.func
            q = ctx.qualname(func)
            attr = func.attr.value if type(func) is cst.Attribute else None
            name = attr if attr is not None else func.value if type(func) is cst.Name else ""
            if q in CLOCKS or attr == "elapsed_time" or _TIMER_CALL.match(name) or _TIMER_OBJECT.search(name) or (
                attr == "tick" and _PROFILER.search(last_name(func.value) or "")
            ):
                facts.reads_clock = True
                if attr == "elapsed_time" and node.args:
                    # `start.elapsed_time(end)` raises unless `end` has completed: the
                    # iteration waits for the device before it, by design
                    facts.synchronizes = facts.synchronizes or (always and direct)
            elif _SYNCED_CLOCK.match(name):
                facts.reads_clock = True
                facts.synchronizes = facts.synchronizes or (always and direct)
            elif q == "gc.collect":
                facts.collects_garbage = True
            elif q is not None and q.startswith("torch.") and q.rsplit(".", 1)[-1] in _MEMORY_STATS:
                facts.reads_memory_stats = True
            elif attr in ("backward", "step"):
                facts.trains = True
                if attr == "step" and always and direct and "svi" in (last_name(func.value) or "").lower():
                    facts.waits_on_data = True  # Pyro's `svi.step(x)` answers with a Python float
                # `scheduler.step()` once per epoch is not a training step
                facts.steps_directly = facts.steps_directly or (direct and attr == "backward")
                facts.optimizes = facts.optimizes or is_backward(node, ctx) or is_optimizer_step(node)
            elif _TRAIN_STEP.match(name) or q == "torch.autograd.backward" or (
                q is None and type(func) is cst.Name and func.value == "step"
            ):
                facts.optimizes = True
            elif always and direct and q is not None and q.startswith(_HOST_LIBRARIES):
                body.steps.append(node)  # `f1_score(gt, pred)`: takes host arrays, like an environment
            elif always and direct and (
                    _waits_on_data(node, name, q) or q is None and _callee_waits(ctx, func) or _solves_adaptively(node, q)
                    or name in _CHECKED_LOSSES and (q is None or q.startswith("pyro.")) or _checked_loss_name(ctx, func)
                    or name == "next" and q is None and node.args and _next_from_collector(ctx, node.args[0].value)):
                # `idx = mask.nonzero()`, `self._check_nan(loss)`, `elbo.differentiable_loss(...)`, `next(batches)`
                facts.waits_on_data = True
            elif always and direct and (q in DEVICE_SYNCS or type(func) is cst.Name and func.value in _sync_helpers(ctx)):
                facts.synchronizes = True
            elif always and direct and _writes(func, name):
                facts.writes_output = True
            elif always and _generates(func):
                facts.generates = True
            elif (type(func) is cst.Name and func.value == "input" and q is None) or (
                q == "cv2.waitKey" and (not node.args or literal_number(node.args[0].value) == 0)
            ):
                facts.prompts_user = True  # `input()`, `cv2.waitKey(0)`: waits for a key press
        elif kind is cst.If and direct and (_ends_loop(node.body) or type(node.orelse) is cst.Else and _ends_loop(
                node.orelse.body)):  # (`if wrong.sum().item() > 0: resample ... else: break`)
            if _reads_value(node.test):
                facts.exits_on_value = True
            else:
                body.exits.append(node)  # `if token == eos: break`, `token` read earlier in the body?
        elif kind is cst.If and not direct and _returns_within(node.body):
            # `for i, seq in enumerate(stop_tokens): if token == seq[progress[i]]: ... return`:
            # a stop sequence matched in an inner loop ends the generation
            body.exits.append(node)
        elif kind is cst.Del:
            target = node.target
            targets = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            if any(names_a_module(t) for t in targets):
                facts.deletes_model = True
        elif kind is cst.With and direct and with_grad_modes(node, ctx)[1]:
            facts.disables_grad = True
        elif kind is cst.Subscript and always and direct and id(node) not in stores and (
                _masks(node, ctx) or _indexes_with_array(node, ctx)):
            facts.waits_on_data = True  # `labels[labels != ignore]`: the result's size is read on the host
        elif kind in _TRY_TYPES:
            if any(_is_oom_handler(ctx, h) for h in node.handlers):
                facts.retries_on_oom = True
        elif kind is cst.Assign or kind is cst.AugAssign:
            for target in (node.targets if kind is cst.Assign else [node]):
                stores.add(id(target.target))  # `x[x >= 0.5] = 1.0` is a masked fill, no read
        if kind in _TESTED_TYPES and direct and always and _tests_tensor(ctx, node.test):
            facts.waits_on_data = True  # `if (x > 0).any():`, `assert torch.isfinite(loss).all()`
        inner = direct and kind not in _LOOP_TYPES
        plain = always and inner and kind not in _CONDITION_TYPES
        for child in inner_children(node):  # nothing above is done at a leaf
            todo.append((child, inner, plain))
    facts.round_trips = body.round_trips()
    facts.guards_finite = body.guards_finite()
    facts.stops_on_read = body.exits_on_read()
    facts.exits_on_read = facts.stops_on_read or body.feeds_back()
    facts.assigns = body.assigns
    return facts


# torchdiffeq's solvers with adaptive step sizes: each step accepts or rejects
# itself on the error estimate, a device value the host reads (`odeint`'s default
# is `dopri5`); the fixed-grid ones (`euler`, `rk4`...) read nothing.
_ODE_SOLVES = frozenset({"torchdiffeq.odeint", "torchdiffeq.odeint_adjoint", "torchdiffeq.odeint_event"})
_ADAPTIVE_METHODS = frozenset({"dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun"})


def _solves_adaptively(call: cst.Call, qualname: Optional[str]) -> bool:
    """``odeint(func, y0, t)`` (torchdiffeq) with an adaptive method: the
    default, or one named by a literal."""
    if qualname not in _ODE_SOLVES:
        return False
    method = keyword(call, "method")
    if method is None:
        return True
    return string_value(method.value) in _ADAPTIVE_METHODS


def _callee_waits(ctx: Context, func: cst.BaseExpression) -> bool:
    """Whether ``func`` (``self._check_nan``, ``check_finite``) names functions
    of this module, every one of which opens with a test of a tensor's truth
    value (``if torch.isnan(loss): raise ValueError(...)``, ``assert
    torch.isfinite(x).all()``), or reads a tensor on the host in a statement
    of its own body that runs on every call (``return int(total.cpu().item())``,
    ``ids = torch.unique(asym_id)``; not under an ``if``, a loop or a ``try``):
    each call waits for the device there.  Cached per name."""
    name = own_callee(func, ("self",))
    if name is None:
        return False
    cache = ctx.shared.setdefault("callee-waits", {})
    if name not in cache:
        definitions = [d.node for d in ctx.semantic.definitions(name)]
        cache[name] = bool(definitions) and all(
            type(d) is cst.FunctionDef and (_opens_with_tensor_test(ctx, d) or _always_reads(ctx, d))
            for d in definitions)
    return cache[name]


def _always_reads(ctx: Context, function: cst.FunctionDef) -> bool:
    """Whether a statement of ``function``'s own body (or of a ``with`` block
    in it) that every call runs reads a tensor on the host: ``.item()``,
    ``.tolist()``, ``.cpu().numpy()``, or an operation whose output size
    depends on the values (``torch.unique(x)``, ``mask.nonzero()``)."""
    todo = list(function.body.body) if type(function.body) is cst.IndentedBlock else []
    while todo:
        statement = todo.pop()
        if type(statement) is cst.With:
            todo.extend(statement.body.body if type(statement.body) is cst.IndentedBlock else ())
            continue
        if type(statement) is not cst.SimpleStatementLine:
            continue
        for node in walk_nodes(statement):
            if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
                continue
            name = node.func.attr.value
            if name in ("item", "tolist") and not node.args or name == "numpy" and _after_cpu(node.func.value):
                return True
            if name in _DATA_DEPENDENT and _waits_on_data(node, name, ctx.qualname(node.func)):
                return True
    return False


def _after_cpu(expr: cst.BaseExpression) -> bool:
    """``x.cpu()`` (also ``x.detach().cpu()``), the receiver of a ``.numpy()``."""
    return type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value == "cpu"


def _opens_with_tensor_test(ctx: Context, function: cst.FunctionDef) -> bool:
    body = function.body.body if type(function.body) is cst.IndentedBlock else ()
    for statement in body:
        if type(statement) is cst.If:
            return _tests_tensor(ctx, statement.test, comparisons=False)
        if type(statement) is cst.SimpleStatementLine and type(statement.body[0]) is cst.Assert:
            return _tests_tensor(ctx, statement.body[0].test, comparisons=False)
        if not is_docstring(statement):
            return False
    return False


def _masks(node: cst.Subscript, ctx: Context) -> bool:
    """Boolean-mask indexing written with a comparison (``labels[labels !=
    IGNORE_INDEX]``, ``idx[idx[:, 0] == i, 1]``) or with a mask named so
    (``rewards[done]``, ``x[~mask]``, ``_named_mask``): how many elements it keeps
    depends on the values, which the host waits for (not a NumPy array's:
    ``mask_idc[mask_idc < sz]`` after ``mask_idc = np.asarray(...)``)."""
    if not any(type(e.slice) is cst.Index and (type(e.slice.value) is cst.Comparison or _named_mask(e.slice.value))
               for e in node.slice):
        return False
    from torchlint.rules._device import host_values  # (it builds on this module)

    return not host_values(ctx).is_host(node.value, ctx.location())


# A boolean mask by its name: `done`, `dones`, `mask`, `valid_mask`, `terminated`, `is_pos`.
_MASK_NAME = re.compile(r"^(?:dones?|masks?|\w+_masks?|masks?_\w+|terminated|truncated|valid|\w+_valid|is_\w+)$")


def _named_mask(index: cst.BaseExpression) -> bool:
    """An index named as a boolean mask, or its negation: ``rewards[done]``,
    ``x[~mask]``, ``td["next", "episode_reward"][td["next", "done"]]`` (a
    TensorDict entry under such a key)."""
    if type(index) is cst.UnaryOperation and type(index.operator) is cst.BitInvert:
        index = index.expression
    if type(index) is cst.Subscript:
        last = index.slice[-1].slice  # (`td["next", "done"]` has two elements)
        key = last.value if type(last) is cst.Index else None
        return type(key) is cst.SimpleString and bool(_MASK_NAME.match(str(key.evaluated_value)))
    return type(index) in (cst.Name, cst.Attribute) and bool(_MASK_NAME.match(last_name(index) or ""))


def _indexes_with_array(node: cst.Subscript, ctx: Context) -> bool:
    """A device tensor indexed with a NumPy array: ``b_obs[mb_inds]`` with
    ``mb_inds = b_inds[start:end]`` and ``b_inds = np.arange(batch_size)``, ``obs
    = torch.zeros(...).to(device)`` and ``b_obs = obs.reshape(...)`` (the PPO
    minibatch of CleanRL and its many copies).  PyTorch copies the index to
    the device with a blocking copy (pageable memory): the host waits for the
    device at every such read."""
    if len(node.slice) != 1 or type(node.slice[0].slice) is not cst.Index:
        return False
    index = node.slice[0].slice.value
    if type(index) is not cst.Name:
        return False
    location = ctx.location()
    return _numpy_indices(ctx, index.value, location, 0) and _on_device(ctx, node.value, location, 0)


# NumPy functions that give an array of indices.
_INDEX_ARRAYS = frozenset({"arange", "permutation", "choice", "argsort", "flatnonzero", "nonzero", "where", "array",
                           "asarray", "concatenate"})


def _numpy_indices(ctx: Context, name: str, location, depth: int) -> bool:
    """Whether every binding of ``name`` is a NumPy array of indices (``np.arange(n)``,
    ``np.random.permutation(n)``), a slice of one (``b_inds[start:end]``) or a
    reshape of one (``flatinds[:, envinds].ravel()``)."""
    bindings = ctx.semantic.bindings(name, location) if depth < 3 else []
    return bool(bindings) and all(
        b.kind == "value" and b.value is not None and _numpy_array(ctx, b.value, b.location, depth) for b in bindings)


def _numpy_array(ctx: Context, expr: cst.BaseExpression, location, depth: int) -> bool:
    if type(expr) is cst.Subscript:  # `b_inds[start:end]`, `np.where(mask)[0]`
        return _numpy_array(ctx, expr.value, location, depth)
    if type(expr) is cst.Name:
        return _numpy_indices(ctx, expr.value, location, depth + 1)
    if type(expr) is not cst.Call:
        return False
    q = ctx.qualname(expr.func)
    if q is not None:
        return q.startswith("numpy.") and q.rsplit(".", 1)[-1] in _INDEX_ARRAYS
    return method_name(expr) in _RESHAPES and type(expr.func) is cst.Attribute and _numpy_array(
        ctx, expr.func.value, location, depth)


_RESHAPES = frozenset({"ravel", "flatten", "reshape", "copy"})


def _on_device(ctx: Context, expr: cst.BaseExpression, location, depth: int) -> bool:
    """Whether ``expr`` is a tensor put on the device: ``torch.zeros(...).to(device)``,
    ``x.cuda()``, ``torch.zeros(..., device=device)``, a reshape or index of
    one, a name every binding of which is one."""
    if depth > 4:
        return False
    if type(expr) is cst.Subscript:
        return _on_device(ctx, expr.value, location, depth + 1)
    if type(expr) is cst.Call:
        name = method_name(expr)
        if name in ("to", "cuda") and type(expr.func) is cst.Attribute:
            return moves_to_device(expr, ctx) is not None  # (not a cast: `.to(torch.float32)`)
        q = ctx.qualname(expr.func)
        if q is not None and q.startswith("torch."):
            return any(a.keyword is not None and a.keyword.value == "device" for a in expr.args)
        if name in _SAME_TENSOR and type(expr.func) is cst.Attribute:
            return _on_device(ctx, expr.func.value, location, depth + 1)
        return False
    if type(expr) is cst.Name:
        bindings = ctx.semantic.bindings(expr.value, location)
        return bool(bindings) and all(
            b.kind == "value" and b.value is not None and _on_device(ctx, b.value, b.location, depth + 1)
            for b in bindings)
    return False


# Methods that give a view or reshaped copy on the tensor's own device.
_SAME_TENSOR = frozenset({"reshape", "view", "flatten", "long", "float", "int", "squeeze", "unsqueeze", "detach",
                          "contiguous", "permute", "transpose"})


def _reads_item(expr: cst.CSTNode) -> bool:
    """Whether ``expr`` reads a tensor's value with ``.item()`` or ``.tolist()``."""
    return any(
        isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in ("item", "tolist")
        for n in walk_nodes(expr)
    )


_TO_TENSOR = frozenset({"Tensor", "tensor", "as_tensor", "from_numpy", "FloatTensor", "LongTensor"})


class _BodyFacts:
    """Collects, in the walk of one loop body (its own statements, not inner
    loops'), the few nodes that ``LoopFacts.round_trips`` and
    ``LoopFacts.guards_finite`` need, and answers from them once the walk is
    done (most loops have no candidate, and then nothing more is looked at)."""

    def __init__(self) -> None:
        self.assigns: List[cst.CSTNode] = []  # `a = ...` and `a += ...`
        self.steps: List[cst.Call] = []  # environment steps and host-library calls, not under a condition
        self.tensors: set = set()  # names given to `torch.Tensor(...)`/`torch.tensor(...)`
        self.guards: List[cst.CSTNode] = []  # `if`/`assert` statements not under a condition
        self.exits: List[cst.If] = []  # `if ...: break` whose test reads no device value itself
        self.read_lists: set = set()  # lists appended a value read from the device: `out.append(y.item())`
        self.rebuilt: set = set()  # names a tensor is built from: `torch.tensor([out[-1]])`, `.fill_(tok)`

    def see(self, node: cst.CSTNode, always: bool) -> None:
        kind = type(node)
        if kind is cst.Assign or kind is cst.AugAssign:
            self.assigns.append(node)
        elif kind is cst.Call:
            func = node.func
            if type(func) is cst.Attribute and func.attr.value == "step":
                if always and _is_env_step(func):
                    self.steps.append(node)
            elif always and type(func) is cst.Attribute and func.attr.value == "imshow" and last_name(func.value) == "cv2":
                self.steps.append(node)  # `cv2.imshow(win, frame)`: each iteration shows a host array
            elif last_name(func) in _TO_TENSOR and node.args:
                first = node.args[0].value
                if type(first) is cst.Name:
                    self.tensors.add(first.value)
                self.rebuilt.update(n.value for n in walk_nodes(first) if type(n) is cst.Name)
            elif type(func) is cst.Attribute and node.args:
                attr = func.attr.value
                if attr == "append" and _reads_item(node.args[0].value) and type(func.value) is cst.Name:
                    self.read_lists.add(func.value.value)
                elif attr == "fill_" and type(node.args[0].value) is cst.Name:
                    self.rebuilt.add(node.args[0].value.value)
        elif always and (kind is cst.If or kind is cst.Assert):
            self.guards.append(node)

    def exits_on_read(self) -> bool:
        """An exit whose test names a value the body read from the device
        (``pred_token = output.argmax(1).item()`` ... ``if pred_token == eos:
        break``): greedy decoding, which waits for each token by design."""
        if not self.exits:
            return False
        read = self.derived_read_names
        return bool(read) and any(mentions_name(e.test, read) for e in self.exits)

    def feeds_back(self) -> bool:
        """A value read from the device in the body (``tok = out.argmax().item()``,
        ``output.append(int(y.argmax().item()))``) that the body builds a tensor
        from (``torch.tensor([output[-1]], device=device)``, ``.fill_(tok)``):
        autoregressive decoding, whose next step needs each token by design."""
        if not self.rebuilt:
            return False
        return bool((self.read_names | self.read_lists) & self.rebuilt)

    @cached_property
    def read_names(self) -> set:
        """The names the body assigns a value read from the device (``tok = out.item()``)."""
        return {n for a in self.assigns if type(a) is cst.Assign and _reads_item(a.value)
                for t in a.targets for n in target_names(t.target)}

    @cached_property
    def derived_read_names(self) -> set:
        """:attr:`read_names` and the names the body computes from them
        (``avg = beta * avg + loss.item()`` then ``smoothed = avg / (1 - beta
        ** n)``), for the exits: a learning-rate finder stops on the smoothed loss."""
        names = set(self.read_names)
        for _ in range(3):
            more = {n for a in self.assigns if type(a) is cst.Assign and names and mentions_name(a.value, names)
                    for t in a.targets for n in target_names(t.target)} - names
            if not more:
                break
            names |= more
        return names

    def round_trips(self) -> bool:
        """An environment step or a host-library call (``f1_score(gt, pred)``)
        given a host copy, or a call given one whose result the body turns
        into a tensor."""
        if not self.steps and not self.tensors:
            return False
        copies = {n for a in self.assigns if type(a) is cst.Assign and _holds_host_copy(a.value)
                  for t in a.targets for n in target_names(t.target)}

        def given_copy(call: cst.Call) -> bool:
            return any(_holds_host_copy(arg.value) or mentions_name(arg.value, copies) for arg in call.args)

        if any(given_copy(step) for step in self.steps):
            return True
        return any(
            type(a) is cst.Assign and len(a.targets) == 1 and type(a.value) is cst.Call
            and not is_env_step_call(a.value) and self.tensors.intersection(target_names(a.targets[0].target))
            and given_copy(a.value)
            for a in self.assigns
        )

    def guards_finite(self) -> bool:
        """A stop on a non-finite value read from the device in the body."""
        guards = [g for g in self.guards if _finite_guard(g)]
        if not guards:
            return False
        reads = sorted({n for a in self.assigns if _reads_item(a.value)
                        for t in (a.targets if type(a) is cst.Assign else [a]) for n in target_names(t.target)})
        return any(_finite_guard(g, reads) or _reads_item(g.test) for g in guards)


# Libraries whose functions take host arrays only: a copy handed to one every
# iteration (a scikit-learn metric on each batch) is a round trip by design.
_HOST_LIBRARIES = ("sklearn.",)


def is_env_step_call(call: cst.Call) -> bool:
    """``env.step(action)``, ``self.envs.step(actions)``."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "step" and _is_env_step(call.func)


def _copies_to_host(expr: cst.BaseExpression) -> bool:
    """A chain that copies a tensor to host memory: ``x.cpu()...``,
    ``x.detach().cpu().numpy()``, ``x.to("cpu")``, ``x.tolist()``."""
    node = expr
    while True:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "tolist" or _link_moves_to_host(node):
                return True
            node = node.func.value
        elif isinstance(node, cst.Subscript):  # `x.cpu().numpy()[0]`
            node = node.value
        else:
            return False


def _holds_host_copy(expr: cst.BaseExpression) -> bool:
    """An expression with a host copy in it: ``x.cpu().numpy()``,
    ``(x.cpu().numpy() * 255).astype(np.uint8)``, ``frame[:, :, ::-1]`` of one."""
    return any(type(n) is cst.Call and _copies_to_host(n) for n in walk_nodes(expr))


def waits_every_iteration(ctx: Context, loop: cst.CSTNode, cache: Dict[int, LoopFacts]) -> bool:
    """Whether ``loop`` waits for the device every iteration by design: an
    operation on device values that the host must see (``LoopFacts.waits_on_data``),
    a stop on a non-finite value read every iteration (``LoopFacts.guards_finite``),
    or a host round trip (``LoopFacts.round_trips``) in it or in a loop around it
    in the same function (a rollout loop stepping an environment on the
    policy's actions, with an update loop inside it); for a comprehension, any
    of these in a loop around it.  One more read of a value there adds no new
    wait."""
    facts = loop_facts(ctx, loop, cache)
    if facts.waits_on_data or facts.guards_finite:
        return True
    comprehension = isinstance(loop, _COMPREHENSIONS)
    for outer in ctx.enclosing_loops(periodic_guard=False):
        around = loop_facts(ctx, outer, cache)
        if around.round_trips or (comprehension and (around.waits_on_data or around.guards_finite)):
            # (a comprehension queues no work of its own between its reads: in a
            # loop that waits every iteration, only its first read may wait)
            return True
    return False


_READS = frozenset({"item", "tolist", "cpu", "numpy", "any", "all", "equal"})


# A training step called by its name: `train_step(...)`, `self.training_step(batch)`,
# `train_one_batch(...)`, `model.optimize_parameters()` (the CycleGAN/pix2pix idiom).
_TRAIN_STEP = re.compile(
    r"^_?(?:train|training|optimi[sz]e)(?:_one)?_(?:step|batch|iter|iteration|parameters)$", re.IGNORECASE
)
# Pyro's ELBO losses, which test the loss for NaN on the host (`warn_if_nan`)
# and validate each distribution's arguments as they build the trace.
_CHECKED_LOSSES = frozenset({"differentiable_loss", "loss_and_grads"})
# Operations whose output size depends on device values: the host waits for them.
_DATA_DEPENDENT = frozenset({"nonzero", "unique", "unique_consecutive", "masked_select", "argwhere"})
# Reductions whose truth value an `if`/`while`/`assert` reads on the host.
_TRUTH_READS = frozenset({"any", "all", "equal", "allclose", "isclose", "isfinite", "isnan", "isinf"})


def _waits_on_data(call: cst.Call, name: str, qualname: Optional[str]) -> bool:
    """``torch.nonzero(m)``, ``m.nonzero()`` (a method of unknown owner), ``torch.where(m)``."""
    if name in _DATA_DEPENDENT:
        return qualname.startswith("torch.") if qualname is not None else isinstance(call.func, cst.Attribute)
    return qualname == "torch.where" and len(call.args) == 1


def _tests_tensor(ctx: Context, test: cst.BaseExpression, comparisons: bool = True) -> bool:
    """A test that reads a tensor's truth value (``(x > 0).any()``,
    ``torch.isfinite(loss).all()``, ``torch.equal(a, b)``); not ``.item()`` or
    ``.tolist()``, which are the sync rules' own findings, and not the
    builtins ``any``/``all`` or ``math``/``numpy`` tests on host numbers."""
    todo: List[cst.CSTNode] = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.BooleanOperation):
            todo.append(node.left)  # the right operand may be skipped (`shown < 3 and not x.all()`)
            if type(node.operator) is cst.Or:
                todo.append(node.right)  # unless the left is true: `if loss == 0 or not torch.isfinite(loss):`
            continue
        if comparisons and isinstance(node, cst.Comparison) and _compares_tensor(ctx, node):
            return True  # `while error > tolerance:` with `error = torch.linalg.vector_norm(...)`
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _TRUTH_READS:
            qualname = ctx.qualname(node.func)
            inner = node.func.value
            if qualname is None and isinstance(inner, cst.Call):
                qualname = ctx.qualname(inner.func)  # `np.isnan(v).any()` is a host test
            if qualname is None or qualname.startswith("torch."):
                return True
        if not isinstance(node, _SCOPES):
            todo.extend(iter_children(node))
    return False


# torch functions that answer with Python values, not tensors.
_HOST_ANSWERS = re.compile(r"^torch\.(cuda|distributed|backends|utils|jit|onnx|cpu|mps|accelerator)\.|"
                           r"\.(is_\w+|get_\w+|numel|device_count|manual_seed\w*|initial_seed)$")


def _compares_tensor(ctx: Context, node: cst.Comparison) -> bool:
    """A comparison of a name that every binding the function gives it sets to
    a tensor: an order comparison (``<``, ``>``, ``<=``, ``>=``) of a torch
    call's result (``error = torch.linalg.vector_norm(M - I, torch.inf)`` ...
    ``while error > tolerance:``, or the call itself: ``if torch.abs(loss) >
    high_loss:``), any comparison (``==``, ``!=`` too) of a sum or count
    (``if torch.sum(weights) == 0:``), or of a
    method chain that names a dimension (``token = probs.argmax(dim=-1).squeeze()``
    ... ``if token != blank:``, greedy decoding): its truth value is read on
    the host."""
    order = all(type(p.operator) in _ORDER for p in node.comparisons)
    if not order and not all(type(p.operator) in _EQUALITY for p in node.comparisons):
        return False
    location = None
    for side in (node.left, *(p.comparator for p in node.comparisons)):
        if type(side) is cst.Call:
            q = ctx.qualname(side.func) or ""
            if order and q.startswith("torch.") and not _HOST_ANSWERS.search(q):
                return True  # `if torch.abs(loss) > high_loss:`
            if q in _COUNTS:
                return True  # `if torch.sum(weights) == 0:` (nothing left to sample)
            continue
        if type(side) is not cst.Name:
            continue
        location = location or ctx.location()
        bindings = ctx.semantic.bindings(side.value, location)
        if bindings and all(
            b.kind == "value" and type(b.value) is cst.Call and (
                order and (ctx.qualname(b.value.func) or "").startswith("torch.")
                and not _HOST_ANSWERS.search(ctx.qualname(b.value.func) or "")
                or _names_dimension(b.value))
            for b in bindings
        ):
            return True
    return False


def _names_dimension(call: cst.Call) -> bool:
    """A chain of method calls one of which passes ``dim=`` (a tensor's
    reduction or search: ``probs.argmax(dim=-1).squeeze()``; NumPy says
    ``axis=``), ending in a method that answers with a tensor (not ``.item()``
    or ``.tolist()``)."""
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in _READS:
        return False
    node: cst.BaseExpression = call
    while type(node) is cst.Call and type(node.func) is cst.Attribute:
        if any(a.keyword is not None and a.keyword.value == "dim" for a in node.args):
            return True
        node = node.func.value
    return False


_EQUALITY = (cst.Equal, cst.NotEqual)
# Reductions that count or add up a tensor (a comparison of their result with
# a number, `== 0` too, reads it on the host).
_COUNTS = frozenset({"torch.sum", "torch.count_nonzero"})
_ORDER = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _timed_iterable(expr: cst.BaseExpression) -> bool:
    """``metric_logger.log_every(loader, 10, header)`` (also inside
    ``enumerate(...)``): the MetricLogger of the torchvision references and
    the DETR/DeiT/DINO/MAE family reads the clock around every iteration it
    yields, to log the iteration and data times."""
    while isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "log_every":
            return True
        if isinstance(func, cst.Name) and func.value == "enumerate" and expr.args:
            expr = expr.args[0].value
            continue
        return False
    return False


def _counts_to_its_test(loop: cst.While, assigns: List[cst.CSTNode]) -> bool:
    """Whether the body assigns a value read from the device (``n +=
    int(ok.sum().item())``, or a name computed from one) to a name that the
    ``while`` test reads: a rejection sampler counts its accepted samples on
    the host, and must, to know whether to go on."""
    tested = {n.value for n in walk_nodes(loop.test) if type(n) is cst.Name}
    if not tested or not assigns:
        return False
    read = {n for a in assigns if _reads_item(a.value) for n in _assigned_names(a)}
    for _ in range(2):
        read |= {n for a in assigns if mentions_name(a.value, read) for n in _assigned_names(a)}
    return not tested.isdisjoint(read)


def _assigned_names(statement: cst.CSTNode) -> List[str]:
    if type(statement) is cst.AugAssign:
        return list(target_names(statement.target))
    return [n for t in statement.targets for n in target_names(t.target)]


def _ends_loop(block: cst.CSTNode) -> bool:
    """A block whose last statement is ``break`` or ``return``: the loop ends
    normally there (a ``raise`` or ``sys.exit`` is an error guard, such as a
    check for a NaN loss, which could be made less often)."""
    return isinstance(_last_small_statement(block), (cst.Break, cst.Return))


def _returns_within(block: cst.CSTNode) -> bool:
    """Whether a ``return`` lies anywhere in ``block`` (not in a function defined there)."""
    todo: List[cst.CSTNode] = [block]
    while todo:
        node = todo.pop()
        if type(node) is cst.Return:
            return True
        if type(node) not in _SCOPE_TYPES and not isinstance(node, cst.BaseExpression):
            todo.extend(iter_children(node))
    return False


def _reads_value(test: cst.BaseExpression) -> bool:
    """Whether a test reads a tensor's value on the host (``x.item()``, ``(x == y).all()``)."""
    todo: List[cst.CSTNode] = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _READS:
            return True
        if not isinstance(node, _SCOPES):
            todo.extend(iter_children(node))
    return False


def loop_facts(ctx: Context, loop: cst.CSTNode, cache: Dict[int, LoopFacts]) -> LoopFacts:
    """What the body of ``loop`` does (its test too, for a ``while``).  A
    comprehension is scanned whole.  Names resolve as at the node being
    visited, so call this during the walk."""
    facts = cache.get(id(loop))
    if facts is None:
        if isinstance(loop, (cst.For, cst.FunctionDef)):
            roots: List[cst.CSTNode] = [loop.body]
        elif isinstance(loop, cst.While):
            roots = [loop.test, loop.body]
        else:
            roots = [loop]
        facts = _scan(ctx, roots)
        if isinstance(loop, cst.While) and _tests_tensor(ctx, loop.test):
            facts.waits_on_data = True  # `while not done.all():`
        if isinstance(loop, cst.While) and _counts_to_its_test(loop, facts.assigns):
            facts.exits_on_value = True  # `while n < num_samples: ... n += accepted.sum().item()`
        if isinstance(loop, cst.For) and _timed_iterable(loop.iter):
            facts.reads_clock = True
        if isinstance(loop, cst.For) and _collects_from_environments(loop.iter):
            facts.waits_on_data = True  # `for data in collector:` each batch is stepped in environments
        if facts.exits_on_read and (isinstance(loop, cst.While) or (
            isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call) and last_name(loop.iter.func) == "range"
        ) or (isinstance(loop, cst.For) and facts.stops_on_read and _names_loader(loop.iter))):
            # greedy decoding: each token decides whether to go on; a learning-rate
            # finder stops on the smoothed loss of each batch
            facts.exits_on_value = True
        cache[id(loop)] = facts
    return facts


def _collects_from_environments(expr: cst.BaseExpression) -> bool:
    """An RL data collector (TorchRL's ``SyncDataCollector``, ``Collector``,
    named ``collector``, also under ``enumerate``/``tqdm``): each batch it
    yields was made by stepping environments on the policy's actions, host
    simulators that wait for the device at every step; a read per batch adds
    no wait."""
    while type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value in ("enumerate", "tqdm", "iter") and (
            expr.args):
        expr = expr.args[0].value
    if type(expr) is cst.Call:
        return (last_name(expr.func) or "").endswith("Collector")
    return "collector" in (last_name(expr) or "").lower()


def _checked_loss_name(ctx: Context, func: cst.BaseExpression) -> bool:
    """``loss_fn(model, guide, x)`` with ``loss_fn =
    Trace_ELBO().differentiable_loss``: a Pyro loss (``_CHECKED_LOSSES``)."""
    if type(func) is not cst.Name or ctx.qualname(func) is not None:
        return False
    bindings = ctx.semantic.bindings(func.value, ctx.location())
    return bool(bindings) and all(
        b.kind == "value" and type(b.value) is cst.Attribute and b.value.attr.value in _CHECKED_LOSSES
        for b in bindings)


def _next_from_collector(ctx: Context, expr: cst.BaseExpression) -> bool:
    """``next(c_iter)`` with ``c_iter = iter(collector)``: a batch from an RL
    data collector (``_collects_from_environments``)."""
    if _collects_from_environments(expr):
        return True
    if type(expr) is not cst.Name:
        return False
    bindings = ctx.semantic.bindings(expr.value, ctx.location())
    return bool(bindings) and all(b.kind == "value" and b.value is not None and _collects_from_environments(b.value)
                                  for b in bindings)


def _names_loader(expr: cst.BaseExpression) -> bool:
    """Whether a name or attribute in ``expr`` says it is a data loader
    (``tqdm(iter(self.loader))``): its batches cannot be read before the loop."""
    return any(isinstance(n, (cst.Name, cst.Attribute))
               and "loader" in (n.value if isinstance(n, cst.Name) else n.attr.value).lower()
               for n in walk_nodes(expr))


def copies_out_every_iteration(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether a ``for``/``while`` loop hands device values to host code in
    every iteration: a statement of its own body (or of a ``with`` block in it),
    not under a condition, copies a value out with ``.tolist()`` or
    ``.cpu()...numpy()``, and the copy is neither an operand of a comparison or
    arithmetic nor read with ``.item()`` (those could stay on the device).  In
    evaluation or inference code that prints, draws or writes each sample
    (``''.join(S[t] for t in out[n].tolist())``, ``pitch =
    pred[i].detach().cpu().numpy()`` before a plot), the host waits for the
    device every iteration by design; one more read adds no wait.  Cached per
    loop."""
    cache = ctx.shared.setdefault("copies-out", {})
    key = id(loop)
    if key not in cache:
        cache[key] = _copies_out(ctx, loop)
    return cache[key]


def _copies_out(ctx: Context, loop: cst.CSTNode) -> bool:
    body = getattr(loop, "body", None)
    if type(loop) not in (cst.For, cst.While) or not isinstance(body, cst.IndentedBlock):
        return False
    from torchlint.rules._device import host_values  # (it builds on this module)

    statements = list(body.body)
    while statements:
        statement = statements.pop()
        if type(statement) is cst.With and isinstance(statement.body, cst.IndentedBlock):
            statements.extend(statement.body.body)
        if type(statement) is not cst.SimpleStatementLine:
            continue  # a condition, an inner loop, a `try`
        todo: List[Tuple[cst.CSTNode, Optional[cst.CSTNode]]] = [(statement, None)]
        while todo:
            node, parent = todo.pop()
            kind = type(node)
            if kind in _SCOPE_TYPES:
                continue
            if kind is cst.Call and type(node.func) is cst.Attribute and not node.args:
                attr = node.func.attr.value
                source = node.func.value if attr == "tolist" else _copied_to_cpu(node.func.value) if attr == "numpy" else None
                if (
                    source is not None
                    and type(parent) not in (cst.Comparison, cst.ComparisonTarget, cst.BinaryOperation)
                    and not host_values(ctx).is_host(source, ctx.location())
                ):
                    return True
            todo.extend((child, node) for child in iter_children(node))
    return False


def _copied_to_cpu(expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """What ``.cpu()`` copies in a chain (``x`` in ``x.detach().cpu()``), or None."""
    while True:
        if type(expr) is cst.Call:
            func = expr.func
            if type(func) is not cst.Attribute:
                return None
            if func.attr.value == "cpu":
                return func.value
            expr = func.value
        elif type(expr) is cst.Attribute:
            expr = expr.value
        else:
            return None


def in_training_code(ctx: Context, cache: Dict[int, LoopFacts]) -> bool:
    """Whether the node being visited runs as part of training: a loop around
    it (in its function) runs a training step (``LoopFacts.optimizes``), or its
    function is one, by name (``train_step``), by its role (the ``backward``
    of a ``torch.autograd.Function``, run by every step's backward pass) or
    by its body (a backward or an
    optimizer step outside any loop, such as a ``training_step`` that one loop
    calls per batch).  A loop that runs no training step itself, inside a
    ``with torch.no_grad():`` block or with one in its body, is evaluation
    even in a function that also trains (a validation pass between epochs)."""
    if _evaluation_loop(ctx, cache):
        return False
    for loop in ctx.enclosing_loops(periodic_guard=False):
        if loop_facts(ctx, loop, cache).optimizes:
            return True
    function = ctx.enclosing_function()
    if function is None:
        return False
    if _TRAIN_STEP.match(function.name.value) or _autograd_backward(ctx, function):
        return True
    return loop_facts(ctx, function, cache).optimizes


def _autograd_backward(ctx: Context, function: cst.FunctionDef) -> bool:
    """The ``backward`` of a ``torch.autograd.Function`` subclass: it runs
    inside every training step's backward pass."""
    cls = ctx.enclosing_class() if function.name.value == "backward" else None
    return cls is not None and any(last_name(base.value) == "Function" for base in cls.bases)


def _evaluation_loop(ctx: Context, cache: Dict[int, LoopFacts]) -> bool:
    """Whether the innermost loop around the node being visited runs no
    training step and sits in a grad-disabling ``with`` block of its function,
    or has one in its own body, or in the body of a loop around it that runs
    no training step either (a loop over one evaluation batch's items)."""
    stack = ctx.stack
    looped = False
    for i in range(len(stack) - 2, -1, -1):
        node = stack[i]
        kind = type(node)
        if kind in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
        if kind is cst.For or kind is cst.While:
            facts = loop_facts(ctx, node, cache)
            if facts.optimizes:
                return False
            if facts.disables_grad:
                # `for batch in loader: with torch.no_grad(): out = model(...)`, also
                # around a loop over the batch's items (SQuAD's per-example results)
                return True
            looped = True
        elif looped and kind is cst.With and with_grad_modes(node, ctx)[1]:
            return True
    return False


# -- a guard that stops on a non-finite loss ---------------------------------------------

_FINITE_CHECKS = frozenset({"isfinite", "isnan", "isinf"})


def _finite_guard(node: cst.CSTNode, names: Optional[List[str]] = None) -> bool:
    """An ``if`` that stops the run on a non-finite value (``if not
    math.isfinite(loss_value): sys.exit(1)``), or an ``assert`` on one
    (``assert not np.isnan(total_loss)``), testing one of ``names`` (any value
    when None)."""
    if isinstance(node, cst.Assert):
        test = node.test
    elif isinstance(node, cst.If) and ends_with_exit(node.body):
        test = node.test
    else:
        return False
    for n in walk_nodes(test):
        if type(n) is cst.Call:
            func = n.func
            name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
            if name in _FINITE_CHECKS and (
                names is None or any(mentions_name(a.value, names) for a in n.args)
            ):  # `math.isnan(loss_value)`, `math.isnan(sum(losses.values()))`
                return True
    return False


def feeds_finite_guard(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the value read by the node being visited decides a per-step stop
    on a non-finite loss: read in the guard's test (``if not
    math.isfinite(loss.item()):``), or assigned to a name that such a guard in
    the loop tests (``loss_value = loss.item()`` ... ``if not
    math.isfinite(loss_value): sys.exit(1)``, or ``total += loss.item()`` ...
    ``assert not np.isnan(total)``). The run needs the host value every step
    for that decision, by design."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        ancestor = stack[i]
        if ancestor is loop:
            break
        if isinstance(ancestor, (cst.If, cst.Assert)) and stack[i + 1] is ancestor.test:
            return _finite_guard(ancestor)
        if isinstance(ancestor, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            statement = stack[i + 1]
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                target = statement.targets[0].target
            elif isinstance(statement, cst.AugAssign):
                target = statement.target  # `total_loss += loss.item()` ... `assert not np.isnan(total_loss)`
            else:
                return False
            if not isinstance(target, cst.Name):
                return False
            return any(_finite_guard(n, [target.value]) for n in walk_nodes(loop))
    return False


# -- host copies that are the point -----------------------------------------------------

# Calls that take host data to write, draw, decode or tabulate it: a copy made for
# them is the work itself (an image or audio file, a plot, text for a reward).
_SINK_WORDS = ("decode", "plot", "save", "write", "fromarray", "figure", "image", "draw", "dataframe",
               "dump", "savetxt", "imshow", "wav")
_STATEMENTS = (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.For, cst.While, cst.If, cst.With,
               cst.Try, cst.FunctionDef, cst.ClassDef)


def _is_sink(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    lowered = name.lower()
    if name == "step" and isinstance(func, cst.Attribute):
        return _is_env_step(func)
    if name == "write" and isinstance(func, cst.Attribute) and _is_console(func.value):
        return False  # `sys.stdout.write(...)` is a log line, like `print`
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "cv2":
        return True  # OpenCV draws and writes host arrays (`cv2.circle(image, (x.item(), y.item()), ...)`)
    return any(word in lowered for word in _SINK_WORDS)


def _writes(func: cst.BaseExpression, name: str) -> bool:
    """``writer.write_frame(...)``, ``imwrite(...)``, ``save_image(...)``,
    ``np.save(...)``; not ``sys.stdout.write(...)`` (a log line)."""
    lowered = name.lower()
    if "write" not in lowered and "save" not in lowered:
        return False
    return not (isinstance(func, cst.Attribute) and _is_console(func.value))


def _is_env_step(func: cst.Attribute) -> bool:
    """``env.step``, ``self.envs.step``: an environment step, which takes host
    arrays (a simulator), given ``func`` the attribute ``<owner>.step``."""
    return "env" in (last_name(func.value) or "").lower()


def _is_console(owner: cst.BaseExpression) -> bool:
    """``sys.stdout``, ``sys.stderr``, ``tqdm`` (``tqdm.write``)."""
    if isinstance(owner, cst.Attribute) and isinstance(owner.value, cst.Name):
        return owner.value.value == "sys" and owner.attr.value in ("stdout", "stderr")
    return isinstance(owner, cst.Name) and owner.value == "tqdm"


# (and ASE, the Atomic Simulation Environment: a calculator's `results` and an
# `Atoms` object hold NumPy arrays; only its import statements count, so its
# words are the statements' starts)
_HOST_APIS = re.compile(r"\b(?:pycocotools|lvis|panopticapi|cityscapesscripts|ase)\b")
_HOST_API_WORDS = ("pycocotools", "lvis", "panopticapi", "cityscapesscripts", "import ase", "from ase")


def _sync_helpers(ctx: Context) -> frozenset:
    """The module's functions that only synchronize the device (``def
    sync(device): if device.type == "cuda": torch.cuda.synchronize(device)``,
    a profiling helper): calling one is a synchronization (cached per module)."""
    found = ctx.shared.get("sync-helpers")
    if found is None:
        names = set()
        if "synchronize" in ctx.source and ctx.module is not None:
            for node in ctx.module.body:
                if isinstance(node, cst.FunctionDef) and _only_synchronizes(ctx, node.body):
                    names.add(node.name.value)
        found = ctx.shared["sync-helpers"] = frozenset(names)
    return found


def _only_synchronizes(ctx: Context, block: cst.BaseSuite) -> bool:
    """A body whose only calls, statements of their own (possibly under an
    ``if`` without ``else``, after a docstring), are device synchronizations."""
    syncs = 0
    todo: List[cst.CSTNode] = [block]
    while todo:
        node = todo.pop()
        if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            todo.extend(node.body)
        elif isinstance(node, cst.If) and node.orelse is None:
            todo.append(node.body)
        elif isinstance(node, cst.SimpleStatementLine):
            todo.extend(node.body)
        elif isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and ctx.qualname(node.value.func) in DEVICE_SYNCS:
            syncs += 1
        elif not (isinstance(node, cst.Pass) or isinstance(node, cst.Expr) and isinstance(node.value, cst.SimpleString)):
            return False
    return syncs > 0


def feeds_host_api(ctx: Context) -> bool:
    """Whether the module is built around an evaluation API that takes host
    lists (pycocotools, LVIS, the COCO panoptic API, Cityscapes scripts), or
    around ASE, whose calculators and ``Atoms`` hold NumPy arrays: it
    imports one at its top level (also under ``try:``), so its conversions to
    Python values are the point, not a slip.  A script that imports one inside
    a function, for a final scoring step, is not such a module."""
    found = ctx.shared.get("feeds-host-api")
    if found is None:
        found = False
        if source_mentions(ctx.source, _HOST_APIS, _HOST_API_WORDS) and ctx.module is not None:
            todo: List[cst.CSTNode] = list(ctx.module.body)
            while todo and not found:
                node = todo.pop()
                if isinstance(node, (cst.Try, cst.If)):
                    todo.extend(node.body.body)
                    continue
                if isinstance(node, cst.SimpleStatementLine):
                    for small in node.body:
                        if isinstance(small, (cst.Import, cst.ImportFrom)):
                            text = cst.Module([]).code_for_node(small)
                            found = found or bool(_HOST_APIS.search(text))
        ctx.shared["feeds-host-api"] = found
    return found


# An evaluator of a host evaluation API, called or fed in a loop: `coco_evaluator.update(res)`,
# `COCOeval(...)`, `panoptic_evaluator.update(...)`, `lvis_eval(...)`, and the
# plain `evaluator` of the DETR family and detectron2 (`for evaluator in
# evaluator_list: evaluator.update(res)`, `evaluator.process(inputs, outputs)`),
# whose `update`/`process` turns each batch's results into host lists.
_EVALUATOR = re.compile(r"(?i)(?:coco|lvis|panoptic|cityscapes)\w*eval|^evaluators?$")


def feeds_host_evaluator(ctx: Context, cache: Dict[int, "LoopFacts"]) -> bool:
    """Whether the loop around the node being visited hands results to an
    evaluator of a host evaluation API in its body (``coco_evaluator.update(res)``
    in a DETR-style ``evaluate``): the evaluator turns each batch's results
    into lists, so the loop waits for them every iteration by design, and a
    read beside it (``target["image_id"].item()``, also in a comprehension or
    in a loop over that iteration's results) adds no wait.  A COCO scoring
    after the loop does not count."""
    loops = [n for n in ctx.enclosing_loops() if type(n) in (cst.For, cst.While)]
    for k, loop in enumerate(loops):
        if _feeds_evaluator(ctx, loop):
            return True
        if k + 1 == len(loops) or not over_iteration_results(loop, loops[k + 1], loop_facts(ctx, loops[k + 1], cache)):
            return False
    return False


def _feeds_evaluator(ctx: Context, loop: cst.CSTNode) -> bool:
    cache = ctx.shared.setdefault("host-evaluator", {})
    found = cache.get(id(loop))
    if found is None:
        found = cache[id(loop)] = any(
            type(n) is cst.Call and (_EVALUATOR.search(last_name(n.func) or "") is not None or (
                type(n.func) is cst.Attribute and _EVALUATOR.search(last_name(n.func.value) or "") is not None))
            for n in walk_nodes(loop.body)
        )
    return found


def decides_a_raise(ctx: Context) -> bool:
    """Whether the node being visited is read only to check and fail: in an
    ``assert``'s message (``assert t.max() < 2**15, t.max().item()``: built
    only when the check fails), or in the test of an ``if`` whose body raises
    or exits (``if any(v.item() != h for v in gathered): raise ...``, a
    consistency check that needs the value by design)."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        node, child = stack[i], stack[i + 1]
        if isinstance(node, cst.Assert):
            return child is node.msg
        if isinstance(node, cst.If):
            return child is node.test and ends_with_exit(node.body, leaving=cst.Raise)
        if isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
    return False


def decides_the_step(ctx: Context) -> bool:
    """Whether the node being visited is in the test of an ``if`` that decides
    whether the training step runs (``if loss.item() < skip_threshold *
    error_last: loss.backward(); optimizer.step()``, a batch skipped when its
    loss spikes): the host needs the value to choose, by design; or in the
    arguments of a learning-rate scheduler's call (``self.last_lr =
    self.scheduler.update(lr, ..., kl.item())``, an adaptive KL schedule per
    minibatch): the rate it sets is a Python number the next step uses."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        node, child = stack[i], stack[i + 1]
        if type(node) is cst.Arg and type(stack[i - 1]) is cst.Call and _calls_scheduler(stack[i - 1]):
            return True
        if isinstance(node, cst.If):
            if child is not node.test:
                return False
            branches = [node.body] + ([node.orelse] if node.orelse is not None else [])
            return any(
                isinstance(n, cst.Call) and (is_backward(n, ctx) or is_optimizer_step(n))
                for branch in branches for n in walk_nodes(branch)
            )
        if isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
    return False


def _calls_scheduler(call: cst.Call) -> bool:
    func = call.func
    return type(func) is cst.Attribute and "sched" in (last_name(func.value) or "").lower()


def named_for_host_work(ctx: Context) -> bool:
    """Whether the innermost function's name says it works on the host: the word ``cpu``
    (``fill_indices_cpu``, ``cpu_nms``): the host implementation of an
    operation, given host tensors; or the word ``beam`` (``generate_beam``,
    ``beam_search``): a beam search keeps its hypotheses on the host and
    needs each step's scores there, so it waits once per step by design and
    further reads of the same step find the device idle."""
    function = ctx.enclosing_function()
    words = function.name.value.lower().strip("_").split("_") if function is not None else ()
    return "cpu" in words or "beam" in words


def feeds_host_sink(ctx: Context, top_index: int, loop: cst.CSTNode, gathered: bool = False) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` goes
    to a call that writes, draws, decodes or tabulates host data, in the same
    statement (``tokenizer.decode(ids.tolist())``) or through a name assigned
    there and handed to such a call later in ``loop``'s body
    (``img = x.cpu().numpy()`` then ``Image.fromarray(img).save(path)``)."""
    stack = ctx.stack
    names: List[str] = []
    collected: List[str] = []  # `results.append(x.cpu().numpy())`: the list it goes into
    for i in range(top_index - 1, -1, -1):
        node = stack[i]
        if isinstance(node, cst.Call) and _is_sink(node):
            return True
        if isinstance(node, cst.CompFor) and stack[i + 1] is node.iter and i > 0 and _labels_items(stack[i - 1], node):
            return True  # `[label2ans[i] for i in scores.argmax(-1).cpu().tolist()]`: answers written out
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in ("append", "extend")
            and isinstance(node.func.value, cst.Name)
        ):
            collected = [node.func.value.value]
        if isinstance(node, cst.Assign):
            names = [n for t in node.targets for n in target_names(t.target)]
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            names = target_names(node.target)
        if isinstance(node, _STATEMENTS):
            break
    if gathered and collected and _saved_after(ctx, collected):
        # Host copies of tensors gathered to be written out (samples,
        # predictions): keeping them on the device until then would hold
        # device memory.  (Not for scalars: `losses.append(loss.item())` for a
        # plot after training is better kept on the device and converted once.)
        return True
    if not names:
        return False
    body = loop.body if isinstance(loop, (cst.For, cst.While)) else loop
    sinks: List[cst.Call] = []
    assigns: List[Tuple[cst.BaseExpression, List[str]]] = []
    loops: List[cst.For] = []
    todo: List[cst.CSTNode] = [body]
    while todo:
        node = todo.pop()
        kind = type(node)
        if kind in _SCOPE_TYPES:
            continue
        if kind is cst.Call and _is_sink(node):
            sinks.append(node)
        elif kind is cst.Assign:
            assigns.append((node.value, [n for t in node.targets for n in target_names(t.target)]))
        elif kind is cst.For:
            loops.append(node)
        todo.extend(iter_children(node))
    # A name that looks the value up in a host table counts too (`word_id =
    # ....item()`, `word = vocab[word_id]`, then `f.write(word)`: a sampled token
    # written out); not any value computed from it (a running sum, a checkpoint).
    # So do the items of a loop over the copy (`for p, f in zip(pred, frames):`
    # then `cv2.resize(p, ...)`: each frame written out).
    derived = set(names)
    grown = True
    while grown:
        grown = False
        for value, targets in assigns:
            if not derived.issuperset(targets) and (_looks_up(value, list(derived)) or _formats(value, list(derived))):
                derived.update(targets)
                grown = True
        for inner in loops:
            targets = _items_of(inner, list(derived))
            if not derived.issuperset(targets):
                derived.update(targets)
                grown = True
    found = list(derived)
    return any(
        any(mentions_name(arg.value, found) for arg in call.args)
        or (isinstance(call.func, cst.Attribute) and mentions_name(call.func.value, found))
        for call in sinks
    )


def _labels_items(comprehension: cst.CSTNode, clause: cst.CompFor) -> bool:
    """A comprehension that turns each item into a label: looks it up in a
    host table (``label2ans[i]``), formats it, or picks one of two strings
    with it (``'True' if i == 1 else 'False'``)."""
    element = getattr(comprehension, "elt", None) or getattr(comprehension, "value", None)
    names = target_names(clause.target)
    if element is None or not names:
        return False
    if isinstance(element, cst.IfExp):
        strings = (cst.SimpleString, cst.FormattedString)
        return isinstance(element.body, strings) and isinstance(element.orelse, strings) and mentions_name(element.test, names)
    return _looks_up(element, names) or _formats(element, names)


def _items_of(loop: cst.For, names: List[str]) -> List[str]:
    """The loop variables that take the items of one of ``names``: all of
    them for ``for p in pred:``, the matching one for ``for p, f in zip(pred,
    frames):``, the second for ``for i, p in enumerate(pred):``."""
    iterable, target = loop.iter, loop.target
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and isinstance(target, (cst.Tuple, cst.List)):
        func, args, elements = iterable.func.value, iterable.args, target.elements
        if func == "zip" and len(args) == len(elements):
            return [n for a, e in zip(args, elements) if mentions_name(a.value, names) for n in target_names(e.value)]
        if func == "enumerate" and len(elements) == 2 and args and mentions_name(args[0].value, names):
            return target_names(elements[1].value)
    if isinstance(iterable, cst.Name) and iterable.value in names:
        return target_names(target)
    return []


def _formats(expr: cst.CSTNode, names: List[str]) -> bool:
    """Whether ``expr`` builds text from one of ``names`` (``"\\n".join(f"{p[j]:.2f}"
    for j in top5)``, ``f"{label}: {score}"``, ``"%d" % idx``)."""
    if isinstance(expr, cst.FormattedString):
        return mentions_name(expr, names)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("join", "format"):
        return isinstance(expr.func.value, (cst.SimpleString, cst.FormattedString)) and mentions_name(expr, names)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
        return isinstance(expr.left, (cst.SimpleString, cst.ConcatenatedString)) and mentions_name(expr.right, names)
    return False


def _looks_up(expr: cst.CSTNode, names: List[str]) -> bool:
    """Whether ``expr`` indexes something with one of ``names`` (``vocab[i]``,
    ``itos[int(i)]``)."""
    return any(
        isinstance(node, cst.Subscript)
        and any(isinstance(e.slice, cst.Index) and mentions_name(e.slice.value, names) for e in node.slice)
        for node in walk_nodes(expr)
    )


def _saved_after(ctx: Context, names: List[str]) -> bool:
    """Whether the enclosing function (or module) hands the list ``names[0]``, or
    a value computed from it (``arr = np.concatenate(all_images)``), to a call
    that writes, draws or tabulates host data (``np.savez(path, arr)``)."""
    scope: cst.CSTNode = ctx.module
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.FunctionDef):
            scope = node
            break
    derived = list(names)
    sinks: List[cst.Call] = []
    todo: List[cst.CSTNode] = [scope]
    while todo:
        node = todo.pop()
        if node is not scope and isinstance(node, _SCOPES):
            continue
        if isinstance(node, cst.Assign) and mentions_name(node.value, derived):
            derived.extend(n for t in node.targets for n in target_names(t.target))
        if isinstance(node, cst.Call) and _is_sink(node):
            sinks.append(node)
        todo.extend(reversed(iter_children(node)))
    return any(
        any(mentions_name(arg.value, derived) for arg in call.args)
        or (isinstance(call.func, cst.Attribute) and mentions_name(call.func.value, derived))
        for call in sinks
    )


def mentions_name(expr: cst.CSTNode, names: Collection[str]) -> bool:
    todo: List[cst.CSTNode] = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.Name) and node.value in names:
            return True
        if not isinstance(node, _SCOPES):
            todo.extend(iter_children(node))
    return False


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


# -- loops that wait anyway, copies that normalise placement ------------------------------


def in_timing_loop(ctx: Context, step: cst.CSTNode, cache: Dict[int, LoopFacts]) -> bool:
    """Whether the loop ``step`` around the node being visited, or a loop
    between them, times its iterations: it synchronizes the device in its own
    body, unconditionally, and reads a clock or a timer.  Every iteration of
    ``step`` waits for the device anyway, to time it, so one more read there
    (also in a comprehension inside it) costs nothing; the sync itself is
    TL103's question.  (A loop *around* ``step`` that times whole passes does
    not make ``step``'s iterations wait.)"""
    past_step = False
    loops = list(ctx.enclosing_loops())
    for k, loop in enumerate(loops):
        facts = loop_facts(ctx, loop, cache)
        if facts.synchronizes and facts.reads_clock:
            return True
        if (loop is step and facts.reads_clock and not facts.trains and _between_clock_reads(ctx, loop)
                and not in_training_code(ctx, cache)):
            return True
        past_step = past_step or loop is step
        if past_step and not only_reads(loop):
            if k + 1 < len(loops) and not facts.trains and over_iteration_results(
                loop, loops[k + 1], loop_facts(ctx, loops[k + 1], cache)
            ):
                continue  # `for si, pred in enumerate(out):` the items of what this iteration computed
            break  # (a comprehension that only reads runs within one iteration of the loop around it)
    return False


_GRADIENT_CALLS = frozenset({"torch.autograd.grad", "torch.autograd.backward"})


def sets_up_a_gradient_loop(ctx: Context) -> bool:
    """Whether the node being visited lies in no loop of its function, and a
    statement of the function after it runs a loop that computes gradients
    every iteration (``.backward()``, ``torch.autograd.grad(...)``, an
    optimizer's ``step()``): it is that loop's set-up, run once per call."""
    stack = ctx.stack
    at = next((i for i in range(len(stack) - 1, -1, -1) if type(stack[i]) in (cst.FunctionDef, cst.Lambda)), None)
    if at is None or type(stack[at]) is not cst.FunctionDef or at + 2 >= len(stack):
        return False
    if any(type(n) in (cst.For, cst.While) or isinstance(n, _COMPREHENSIONS) for n in stack[at + 1:]):
        return False
    statements, here = statement_position(stack[at + 1], stack[at + 2])
    if here is None:
        return False
    for statement in statements[here + 1:]:
        for node in walk_nodes(statement):
            if type(node) in (cst.For, cst.While) and _gradient_work(ctx, node):
                return True
    return False


# A call whose name says it computes gradients (`get_diff_logits_grads_batch`,
# `compute_grad`), not one that sets a gradient mode or clears gradients.
_GRADIENT_HELPER = re.compile(r"(?i)(?:^|_)grads?(?:$|_)")
_GRADIENT_MODES = frozenset({"zero_grad", "no_grad", "enable_grad", "requires_grad_", "set_grad_enabled"})


def _gradient_work(ctx: Context, loop: cst.CSTNode) -> bool:
    for node in walk_nodes(loop.body):
        if type(node) is cst.Call:
            name = last_name(node.func) or ""
            if name in ("backward", "step") and type(node.func) is cst.Attribute or (
                    ctx.qualname(node.func) in _GRADIENT_CALLS) or (
                    name not in _GRADIENT_MODES and _GRADIENT_HELPER.search(name) is not None):
                return True
    return False


def timed_repetition(ctx: Context, loop: cst.CSTNode, cache: Dict[int, LoopFacts]) -> bool:
    """A benchmark's loop: ``for _ in range(n_runs):`` that trains nothing,
    with a clock read by the statement right before it or right after it
    (``start = time.time()`` / ``elapsed = time.time() - start``; a warm-up
    loop ends where the clock starts).  Each iteration is one measured
    repetition of the same work: a synchronization in it makes the figure a
    latency, and removing it changes what is measured."""
    if type(loop) is not cst.For or type(loop.target) is not cst.Name or type(loop.iter) is not cst.Call or type(
            loop.iter.func) is not cst.Name or loop.iter.func.value != "range" or loop_facts(ctx, loop, cache).trains:
        return False
    stack = ctx.stack
    index = next((i for i in range(len(stack) - 1, 0, -1) if stack[i] is loop), None)
    if index is None:
        return False
    siblings, here = statement_position(stack[index - 1], loop)
    if here is None:
        return False
    return any(_reads_clock(ctx, stmt) for stmt in siblings[max(here - 1, 0):here] + siblings[here + 1:here + 2])


def _reads_clock(ctx: Context, statement: cst.CSTNode) -> bool:
    """A simple statement that calls a clock (``start = time.time()``)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(n, cst.Call) and ctx.qualname(n.func) in CLOCKS for n in walk_nodes(statement))


def _between_clock_reads(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited runs after a clock is started in an
    iteration of ``loop`` and before it is read again (``start = timer()``
    ... ``pred.cpu()`` ... ``end = timer()``, also inside a ``with`` block of
    the body): an inference loop that times each prediction, where the read is
    the wait that makes the timing honest (without it the clock would measure
    only the launches).  The meters of a training loop (``data_time.update(
    time.time() - end)`` ... ``end = time.time()``) start no clock before the
    read."""
    if not isinstance(loop, (cst.For, cst.While)):
        return False
    flat: List[cst.CSTNode] = []
    todo = list(reversed(loop.body.body)) if isinstance(loop.body, cst.IndentedBlock) else []
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock):
            todo.extend(reversed(stmt.body.body))
        else:
            flat.append(stmt)
    on_stack = {id(node) for node in ctx.stack}
    here = next((k for k, stmt in enumerate(flat) if id(stmt) in on_stack), None)
    if here is None:
        return False

    def starts_clock(stmt: cst.CSTNode) -> bool:  # `start = timer()`
        return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
                and isinstance(stmt.body[0].value, cst.Call) and ctx.qualname(stmt.body[0].value.func) in CLOCKS)

    return any(starts_clock(stmt) for stmt in flat[:here]) and any(_reads_clock(ctx, stmt) for stmt in flat[here + 1:])


def over_iteration_results(inner: cst.CSTNode, outer: cst.CSTNode, outer_facts: LoopFacts) -> bool:
    """Whether ``inner`` is a ``for`` over values that the body of the loop
    ``outer`` around it computes (``out = nms(model(img))`` ... ``for si, pred
    in enumerate(out):``): it walks the per-item results of one iteration, so
    when ``outer`` waits for the device every iteration, the reads in
    ``inner`` find the results ready and wait only for the small work queued
    since (not for a step).  ``outer_facts``: ``outer``'s loop facts."""
    if not isinstance(inner, cst.For) or not isinstance(outer, (cst.For, cst.While)):
        return False
    iterable = inner.iter
    parts = [iterable]
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value in ("enumerate", "zip"):
        parts = [a.value for a in iterable.args if not a.keyword]
    roots = [_root_name(p) for p in parts]
    if not roots or None in roots:
        return False
    assigned = {n for a in outer_facts.assigns if type(a) is cst.Assign for t in a.targets for n in target_names(t.target)}
    return all(r in assigned for r in roots)


# Words of a test that asks whether the code runs on (or the value lives on) an accelerator.
_DEVICE_TEST_WORDS = ("cuda", "gpu", "device", "accelerator")


def _tests_device(test: cst.BaseExpression) -> bool:
    for node in walk_nodes(test):
        name = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else None
        if name is not None and any(word in name.lower() for word in _DEVICE_TEST_WORDS):
            return True
    return False


def _root_name(expr: cst.BaseExpression) -> Optional[str]:
    while isinstance(expr, (cst.Attribute, cst.Subscript, cst.Call)):
        expr = expr.func if isinstance(expr, cst.Call) else expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def normalises_to_host(ctx: Context, top_index: int) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is
    ``x = x.cpu()`` (or ``xs[i] = xs[i].cpu()``) in the body of an ``if`` that
    asks about the device (``if cfg.NUM_GPUS:``, ``if x.is_cuda:``, ``if
    x.device != torch.device("cpu"):``): the code brings its values to the host
    only when they are elsewhere, because what follows is host code (a meter, an
    evaluator, a drawing).  The copy is where the host code starts, not a slip;
    keeping the values on the device would need that host code rewritten."""
    stack = ctx.stack
    if top_index < 1:
        return False
    assign = stack[top_index - 1]
    if not (isinstance(assign, cst.Assign) and assign.value is stack[top_index] and len(assign.targets) == 1):
        return False
    target = _root_name(assign.targets[0].target)
    if target is None or target != _root_name(stack[top_index]):
        return False
    crossed = False
    for i in range(top_index - 2, -1, -1):
        node = stack[i]
        if isinstance(node, cst.For) and not crossed and mentions_name(node.iter, [target]):
            crossed = True  # `for i in range(len(xs)): xs[i] = xs[i].cpu()`: the list, item by item
            continue
        if isinstance(node, (*_SCOPES, *_LOOPS)):
            return False
        if isinstance(node, cst.If) and stack[i + 1] is node.body and _tests_device(node.test):
            return True
    return False


# Builtins and methods that only read or convert values on the host.
_HOST_ONLY_CALLS = frozenset({"int", "float", "bool", "str", "round", "len", "item", "tolist", "append", "extend",
                              "numpy", "cpu", "print", "format", "isinstance"})


def only_reads(loop: cst.CSTNode) -> bool:
    """Whether a comprehension over a list of values (a name or attribute)
    does nothing but read them to the host (``[int(s.item()) for s in
    sizes]``, the sizes ``all_gather`` filled): it queues no device work
    between its reads, so only the first read waits; the cost is one wait
    where the comprehension runs, not one per item."""
    if isinstance(loop, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
        body: List[cst.CSTNode] = [loop.elt]
    elif isinstance(loop, cst.DictComp):
        body = [loop.key, loop.value]
    else:
        return False
    clause = loop.for_in
    if clause.inner_for_in is not None or clause.ifs or not isinstance(clause.iter, (cst.Name, cst.Attribute)):
        # `for y in ys for x in y[:n]`, `for x in t[:n]`: one read per element
        # of a tensor, each its own copy; only a walk over a list of values
        # (`for s in sizes`) reads a few values once they are ready.
        return False
    for root in body:
        for node in walk_nodes(root):
            if isinstance(node, (cst.BinaryOperation, cst.Comparison, cst.UnaryOperation)):
                return False
            if isinstance(node, cst.Call):
                func = node.func
                name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
                if name not in _HOST_ONLY_CALLS:
                    return False
    return True


def reading_loops(ctx: Context) -> frozenset:
    """The loops around the node being visited that only read values (by id):
    how often the read waits is how often the code around them runs."""
    return frozenset(id(loop) for loop in ctx.enclosing_loops() if only_reads(loop))


def _moves_to_host(call: cst.Call) -> bool:
    """``x.cpu()``, ``x.to("cpu")`` (a chain containing one)."""
    node: cst.BaseExpression = call
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if _link_moves_to_host(node):
            return True
        node = node.func.value
    return False


def _link_moves_to_host(call: cst.Call) -> bool:
    """``.cpu()`` or ``.to("cpu")`` itself (``call.func`` an attribute)."""
    name = call.func.attr.value  # type: ignore[union-attr]
    return name == "cpu" or (name == "to" and bool(call.args) and isinstance(call.args[0].value, cst.SimpleString)
                             and "cpu" in call.args[0].value.value)


def offloads_state(loop: cst.CSTNode, cache: Dict[int, bool]) -> bool:
    """Whether ``loop`` keeps its state on the host on purpose: it appends host
    copies to a list and, in the same body, moves an item of that list back to
    the device (``xs.append(x_next.to("cpu"))`` ... ``x = xs[-1].to("cuda")``,
    a sampler that offloads its trajectory to bound device memory).  Keeping
    those copies on the device, as TL102 advises, is what the loop avoids."""
    found = cache.get(id(loop))
    if found is not None:
        return found
    body = loop.body if isinstance(loop, (cst.For, cst.While)) else loop
    appended: set = set()
    read_back: set = set()
    for node in walk_nodes(body):
        if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
            continue
        name = node.func.attr.value
        owner = node.func.value
        if name == "append" and isinstance(owner, cst.Name) and node.args:
            value = node.args[0].value
            if isinstance(value, cst.Call) and _moves_to_host(value):
                appended.add(owner.value)
        elif name in ("to", "cuda") and isinstance(owner, cst.Subscript) and isinstance(owner.value, cst.Name):
            if not (name == "to" and node.args and isinstance(node.args[0].value, cst.SimpleString)
                    and "cpu" in node.args[0].value.value):
                read_back.add(owner.value.value)
    found = cache[id(loop)] = bool(appended & read_back)
    return found


def appended_to_offloaded_state(ctx: Context, top_index: int, loop: cst.CSTNode, cache: Dict[int, bool]) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is
    appended to a list (``xs.append(x.to("cpu"))``) in a loop that offloads
    its state (:func:`offloads_state`)."""
    stack = ctx.stack
    if top_index < 2:
        return False
    call = stack[top_index - 2]
    return (
        isinstance(stack[top_index - 1], cst.Arg)
        and isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "append"
        and offloads_state(loop, cache)
    )


# -- what a host copy is for: weights, modules, host consumers ----------------------------

# Loops over these copy weights, not per-step data.
_WEIGHT_WORDS = ("param", "state_dict", "weight", "buffer", "grad", "ckpt", "checkpoint")
# Joins of a list of tensors: results gathered for one of these can be joined on the device.
CONCATENATIONS = frozenset(
    {"torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.vstack", "torch.hstack"}
)
# Modules that run models with ONNX Runtime, TensorRT, Triton or OpenVINO.
_RUNTIMES = re.compile(r"\b(?:onnxruntime|OnnxRuntimeModel|InferenceSession|tensorrt|tritonclient|openvino)\b")
_RUNTIME_WORDS = ("onnxruntime", "OnnxRuntimeModel", "InferenceSession", "tensorrt", "tritonclient", "openvino")
# Names in a test that switches between the device and the host: `if args.use_cuda:`,
# `if not use_gpu:`, and `if use_torch:` (pytorch-ddpm's Inception score: torch on
# the device, or NumPy).
_DEVICE_SWITCH = re.compile(r"cuda|gpu|^use_torch$", re.IGNORECASE)


def feeds_model_runtime(source: str) -> bool:
    """Whether a module runs models outside PyTorch (ONNX Runtime, TensorRT,
    Triton, OpenVINO): it hands them host arrays."""
    return source_mentions(source, _RUNTIMES, _RUNTIME_WORDS)


def iterates_modules(ctx: Context, recv: cst.BaseExpression) -> bool:
    """Whether ``recv`` is the variable of a loop over modules in the function
    around the node being visited: ``for m in models: m.cpu()``,
    ``[m.cpu() for m in self.modules()]``."""
    if not isinstance(recv, cst.Name):
        return False
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, _SCOPES):
            return False
        for loop in loop_clauses(node):
            if recv.value in target_names(loop.target):
                return mentions(loop.iter, MODULE_COLLECTIONS)
    return False


def copies_weights(ctx: Context) -> bool:
    """Whether the node being visited is in a loop over parameters, buffers,
    gradients or a state dict (its iterable or variables mention ``param``,
    ``state_dict``, ``weight``, ``buffer``, ``grad``, ``ckpt`` or
    ``checkpoint``), or in a :func:`one_off_function`: copying weights to the
    host is the work itself (saving, comparing, sending them)."""
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, cst.FunctionDef):
            return one_off_function(node.name.value)
        if isinstance(node, (cst.Lambda, cst.ClassDef)):
            return False
        for clause in loop_clauses(node):
            if mentions(clause.iter, _WEIGHT_WORDS) or mentions(clause.target, _WEIGHT_WORDS):
                return True
    return False


def host_consumer(ctx: Context, top_index: int) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is an
    argument, in its statement, of a call that needs host data every time: an
    environment step (``env.step(action.cpu().numpy())``) or a new parameter
    (``nn.Parameter``, ``bnb.nn.Int8Params(w.to("cpu"))``: weights are built,
    and quantized, from host memory)."""
    stack = ctx.stack
    for i in range(top_index - 1, -1, -1):
        node = stack[i]
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
        if isinstance(node, cst.Call) and any(stack[i + 1] is arg for arg in node.args):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
            if "param" in name.lower():
                return True
            if name == "step" and isinstance(func, cst.Attribute) and _is_env_step(func):
                return True
    return False


def stored_in_host_buffer(ctx: Context, top_index: int, loop: cst.CSTNode, is_host) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is
    written into a tensor or array allocated in host memory, directly
    (``buf[i] = x.cpu()``) or through a name the loop body writes there later
    (``logits = out.cpu()`` ... ``aux_pi[:, idx] = f(logits)``), where ``buf``
    is bound only to an allocation that ``is_host(expr, location)`` places on
    the host (``torch.zeros(shape)`` without a device, ``np.empty(shape)``):
    the program keeps those results in host memory on purpose (a rollout or
    feature buffer sized for the whole run)."""
    stack = ctx.stack
    statement = next(
        (stack[i] for i in range(top_index - 1, -1, -1) if isinstance(stack[i], cst.BaseSmallStatement)), None
    )
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
        return False
    target = statement.targets[0].target
    if isinstance(target, cst.Subscript):
        return _host_buffer(ctx, target, is_host)
    names = target_names(target)
    if not names:
        return False
    body = loop.body if isinstance(loop, (cst.For, cst.While)) else loop
    return any(
        type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Subscript
        and mentions_name(node.value, names) and _host_buffer(ctx, node.targets[0].target, is_host)
        for node in walk_nodes(body)
    )


def _host_buffer(ctx: Context, target: cst.Subscript, is_host) -> bool:
    owner = target.value
    if not isinstance(owner, cst.Name):
        return False
    location = ctx.location()
    bindings = ctx.semantic.bindings(owner.value, location)
    return bool(bindings) and all(
        b.kind == "value" and isinstance(b.value, cst.Call) and is_host(b.value, b.location) for b in bindings
    )


def serialised(ctx: Context, top_index: int) -> bool:
    """Whether the chain's outermost call, ``ctx.stack[top_index]``, is
    ``.tobytes()`` (``t.cpu().numpy().tobytes()``: bytes for pickling or
    storage), or the chain is handed to ``memoryview(...)``/``bytes(...)``
    (a frame's bytes for a viewer: Gaussian splatting's network GUI)."""
    top = ctx.stack[top_index]
    if isinstance(top, cst.Call) and method_name(top) == "tobytes":
        return True
    if top_index >= 2 and isinstance(ctx.stack[top_index - 1], cst.Arg):
        call = ctx.stack[top_index - 2]
        return (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)
                and call.func.value in ("memoryview", "bytes") and ctx.qualname(call.func) is None)
    return False


def host_branch_of_device_switch(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited is, inside ``loop``, in the branch that a
    device switch takes to keep data on the host: the ``else`` of ``if
    args.use_cuda:`` or the body of ``if not use_gpu:`` (a feature bank too
    large for the GPU), or the ``else`` of ``if use_torch:`` (a NumPy path)."""
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        node = stack[i]
        if node is loop:
            return False
        if not isinstance(node, cst.If):
            continue
        test, child = node.test, stack[i + 1]
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        subject = test.expression if negated else test
        names = [n.value for n in walk_nodes(subject) if isinstance(n, cst.Name)]
        if not any(_DEVICE_SWITCH.search(name) for name in names) or isinstance(subject, cst.Call):
            continue
        if (negated and child is node.body) or (not negated and child is node.orelse):
            return True
    return False


# -- host copies the device could spare ----------------------------------------------------


def host_arithmetic(ctx: Context, top_index: int) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is an
    operand of a comparison or arithmetic (``(pred.cpu().numpy() ==
    y.cpu().numpy()).sum()``): a metric computed on the host that the device
    computes as well, without the copy.  Not a threshold against a number
    (``probs.cpu().numpy() > 0.5``): predictions kept whole, not a metric; nor
    a scaling to a pixel or sample range in a function that casts to
    ``uint8``/``int16`` (``img.cpu().numpy() * 255`` ... ``.astype(np.uint8)``:
    pixels for a frame or a file; ``* 2``, an offset such as ``5 +
    labels.cpu().numpy()``, or scaled values only summed are arithmetic)."""
    parent = ctx.stack[top_index - 1] if top_index else None
    if isinstance(parent, cst.Comparison):
        return not all(literal_number(c.comparator) is not None for c in parent.comparisons)
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, (cst.Multiply, cst.Divide)):
        other = parent.right if parent.left is ctx.stack[top_index] else parent.left
        if literal_number(other) not in _SAMPLE_RANGES:
            return True
        # `img.cpu().numpy() * 255` later cast to `uint8`: pixels (or 16-bit audio
        # samples) for a file or a frame, not a metric
        scope = ctx.enclosing_function() or ctx.module
        text = cst.Module([]).code_for_node(scope) if scope is not None else ""
        return "uint8" not in text and "int16" not in text
    return isinstance(parent, (cst.ComparisonTarget, cst.BinaryOperation))


# The ranges a copy is scaled to for an image or a sound file.
_SAMPLE_RANGES = frozenset({255, 255.0, 256, 127.5, 32767, 32768, 65535})


def gathered_for_concatenation(ctx: Context, top_index: int, cache: Dict[int, set]) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is
    appended to a list (``preds.append(out.cpu())``) that the function (or
    module) around it joins with ``torch.cat``/``torch.stack``: the results are
    collected to be joined as tensors, which works as well on the device, with
    one copy after the loop.  ``cache`` keeps, per scope, the sources of the
    joined expressions."""
    owner = _appended_to(ctx, top_index)
    scope = ctx.enclosing_function() or ctx.module
    if owner is None or scope is None:
        return False
    joined = cache.get(id(scope))
    if joined is None:
        joined = set()
        for node in walk_nodes(scope):
            if isinstance(node, cst.Call) and node.args and ctx.qualname(node.func) in CONCATENATIONS:
                joined.add(cst.Module([]).code_for_node(node.args[0].value))
        cache[id(scope)] = joined
    return cst.Module([]).code_for_node(owner) in joined


def _appended_to(ctx: Context, top_index: int) -> Optional[cst.BaseExpression]:
    """The list that the host copy whose chain ends at ``ctx.stack[top_index]``
    is appended to (``preds`` in ``preds.append(out.cpu())``), or None."""
    stack = ctx.stack
    if top_index < 2:
        return None
    arg, call = stack[top_index - 1], stack[top_index - 2]
    if not (isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and method_name(call) in ("append", "extend")):
        return None
    return receiver(call)


def offloaded_and_restored(ctx: Context, top_index: int) -> bool:
    """Whether the host copy whose chain ends at ``ctx.stack[top_index]`` is
    appended to a list whose items the function moves back to the device
    later, piece by piece (``feats.append(f.cpu())`` ... ``feats =
    torch.cat(feats)`` ... ``feats[i].to(device)``): the results are parked in
    host memory because all of them would not fit on the device (every
    image's patch features for a retrieval re-ranking).  The copy is the
    point."""
    owner = _appended_to(ctx, top_index)
    scope = ctx.enclosing_function()
    if not isinstance(owner, cst.Name) or scope is None:
        return False
    name = owner.value
    for node in walk_nodes(scope):
        if isinstance(node, cst.Call) and method_name(node) in ("to", "cuda"):
            part = receiver(node)
            while isinstance(part, (cst.Call, cst.Attribute, cst.Subscript)):
                if isinstance(part, cst.Subscript) and isinstance(part.value, cst.Name) and part.value.value == name:
                    return True
                part = part.func if isinstance(part, cst.Call) else part.value
    return False


def gathered_once(ctx: Context, loop: cst.CSTNode, recv: cst.BaseExpression) -> bool:
    """Whether ``loop`` is a comprehension outside any loop statement whose
    copy's receiver ``recv`` is one concatenated tensor per element
    (``[torch.cat(parts).cpu() for parts in zip(*results)]``): the
    copy-once-after-the-loop form applied to several result lists."""
    if not isinstance(loop, (*_COMPREHENSIONS, cst.CompFor)):
        return False
    if not (isinstance(recv, cst.Call) and ctx.qualname(recv.func) in CONCATENATIONS):
        return False
    for node in reversed(ctx.stack[:-1]):
        if isinstance(node, (cst.For, cst.While)):
            return False
        if isinstance(node, _SCOPES):
            break
    return True


def blocking_copy_in(ctx: Context, loop: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The blocking copy with which a ``for`` loop over host batches (a
    ``DataLoader``'s, as ``HostValues.is_host_iterable`` knows them) moves the
    iteration's data to the device before it queues any work, or None: its body
    opens with ``x, y = x.to(device), y.to(device)``, ``data = data.to(device)``,
    ``batch = {k: v.cuda() for k, v in batch.items()}``, ``out =
    model(x.cuda())`` (or an ``if`` on the device holding such copies), after
    nothing but unpacking the batch, ``optimizer.zero_grad()``,
    ``model.train()`` and a meter given the loading time
    (``data_time.update(time.time() - end)``).  A copy without ``non_blocking=True`` ends with
    ``cudaStreamSynchronize``: it waits for all the work queued before it, the
    previous iteration's included, so a read of a value in the loop only moves
    that wait earlier; the host runs ahead of the device only once both go
    (``non_blocking=True`` from pinned memory, and the read out of the loop).
    A copy with ``non_blocking=True``, or one a helper makes, is not one.
    Cached per loop."""
    if type(loop) is not cst.For or type(loop.body) is not cst.IndentedBlock:
        return None
    cache = ctx.shared.setdefault("blocking-copy-in", {})
    key = id(loop)
    if key not in cache:
        copy = _opening_copy(ctx, loop)
        cache[key] = copy if copy is not None and _iterates_host_batches(ctx, loop) else None
    return cache[key]


def waits_at_copy_anyway(ctx: Context, loop: cst.CSTNode) -> bool:
    """Whether the node being visited, in ``loop``, lies in the tail of an
    iteration that starts with a blocking copy of its batch
    (``blocking_copy_in``): after the statement holding it, to the end of the
    body, nothing queues a model's or a training step's work (no
    ``backward()``, ``step()``, ``zero_grad()``, ``forward``/``generate``, no
    call of a model, loss or criterion, no inner loop).  A read there waits for
    what the next iteration's copy would wait for anyway: removing it only
    moves the wait by the host work in between (the next batch's fetch, which
    loader workers have done already).  A read earlier in the iteration, with
    the backward pass or a second model still to queue, keeps the host from
    queueing that work while the device runs; it is reported."""
    body = getattr(loop, "body", None)
    if blocking_copy_in(ctx, loop) is None or body is None:
        return False
    stack = ctx.stack
    for i in range(len(stack) - 2, -1, -1):
        if stack[i] is body:
            # after the statement holding the read, at every level of the body
            # down to it (`with torch.no_grad():` ... the read ... `out = model(x)`)
            for j in range(i, len(stack) - 1):
                if type(stack[j]) is not cst.IndentedBlock:
                    continue
                statements, index = statement_position(stack[j], stack[j + 1])
                if index is None or any(_queues_step_work(st) for st in statements[index + 1:]):
                    return False
            return True
    return False


_STEP_WORK = frozenset({"backward", "step", "zero_grad", "forward", "generate"})


def _queues_step_work(statement: cst.CSTNode) -> bool:
    for node in walk_nodes(statement):
        kind = type(node)
        if kind is cst.For or kind is cst.While:
            return True
        if kind is cst.Call:
            name = last_name(node.func) or ""
            lowered = name.lower()
            if name in _STEP_WORK or names_a_module(node.func) or "loss" in lowered or "criterion" in lowered:
                return True
    return False


def _iterates_host_batches(ctx: Context, loop: cst.For) -> bool:
    from torchlint.rules._device import host_values  # (it builds on this module)
    from torchlint.semantic import location_of

    stack = ctx.stack
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is loop:
            return host_values(ctx).is_host_iterable(loop.iter, location_of(stack[:i + 1]))
    return False


# Context managers that only set a mode for the statements they hold.
_MODE_CONTEXTS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.enable_grad", "torch.set_grad_enabled",
                            "torch.autograd.no_grad", "torch.autocast", "torch.amp.autocast",
                            "torch.cuda.amp.autocast"})

# Calls a loop may make before its copy without queueing work that matters.
_BEFORE_COPY = frozenset({"zero_grad", "train", "eval", "len", "isinstance"})


def _opening_copy(ctx: Context, loop: cst.For) -> Optional[cst.BaseExpression]:
    data = set(target_names(loop.target))
    for statement in loop.body.body:
        kind = _opening_statement(ctx, statement, data)
        if kind != "host":
            return kind
    return None


def _opening_statement(ctx: Context, statement: cst.CSTNode, data: set):
    """The copy when ``statement`` copies the loop's data to the device with a
    blocking copy before anything else, "host" for one that only unpacks the
    batch or makes an allowed call, None otherwise."""
    if type(statement) is cst.If and statement.orelse is None and _tests_device(statement.test) and (
            type(statement.body) is cst.IndentedBlock):
        kinds = [_opening_statement(ctx, s, data) for s in statement.body.body]
        return kinds[0] if kinds and all(k is not None and k != "host" for k in kinds) else None
    if type(statement) is cst.With and type(statement.body) is cst.IndentedBlock and all(
            type(item.item) is cst.Call and ctx.qualname(item.item.func) in _MODE_CONTEXTS for item in statement.items):
        # `with torch.no_grad(): images = images.to(DEVICE)`: the copy still opens the iteration
        for inner in statement.body.body:
            kind = _opening_statement(ctx, inner, data)
            if kind != "host":
                return kind
        return "host"
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if type(small) is cst.Expr:
        value, targets = small.value, []
    elif type(small) is cst.Assign:
        value, targets = small.value, [t.target for t in small.targets]
    else:
        return None
    parts = list(value.elements) if type(value) in (cst.Tuple, cst.List) else [value]
    parts = [p.value if isinstance(p, cst.BaseElement) else p for p in parts]
    copies = [p for p in parts if _blocking_copy_of(ctx, p, data)]
    if copies and all(p in copies or _root_name(p) in data and not _calls(p) for p in parts):
        return copies[0]
    first = _first_call(value)
    if first is not None and _blocking_copy_of(ctx, first, data):
        return first  # `out = model(x.to(device))`: the copy runs before the model queues its work
    if all(not _calls(p) or (type(p) is cst.Call and (last_name(p.func) in _BEFORE_COPY or _times_loading(ctx, p)))
           for p in parts) and (not targets or all(_root_name(p) in data for p in parts)):
        for target in targets:
            data.update(target_names(target))  # `images, labels = batch`
        return "host"
    return None


_CLOCKS = frozenset({"time.time", "time.perf_counter", "time.monotonic"})


def _times_loading(ctx: Context, call: cst.Call) -> bool:
    """``data_time.update(time.time() - end)``: a meter given the time the
    batch took to load, every call in its arguments a clock's (host work)."""
    if last_name(call.func) not in ("update", "append") or type(call.func) is not cst.Attribute:
        return False
    calls = [n for arg in call.args for n in walk_nodes(arg.value) if type(n) is cst.Call]
    return bool(calls) and all(ctx.qualname(n.func) in _CLOCKS for n in calls)


def _first_call(expr: cst.CSTNode) -> Optional[cst.Call]:
    """The call of ``expr`` that completes first: the leftmost innermost one
    (``model(x.cuda())`` -> ``x.cuda()``); None past a conditional, a lambda or
    a comprehension, whose order is not the source's."""
    if type(expr) in (cst.IfExp, cst.Lambda, cst.BooleanOperation) or isinstance(expr, _COMPREHENSIONS):
        return None
    for child in iter_children(expr):
        if isinstance(child, cst.BaseExpression) or type(child) is cst.Arg:
            found = _first_call(child)
            if found is not None or _calls(child):
                return found
    return expr if type(expr) is cst.Call else None


def _calls(expr: cst.BaseExpression) -> bool:
    return any(type(n) is cst.Call for n in walk_nodes(expr))


def _blocking_copy_of(ctx: Context, expr: cst.BaseExpression, data: set) -> bool:
    """``x.to(device)``/``x.cuda()`` without ``non_blocking`` on the loop's data
    (``batch["img"].to(device)``, ``x.float().cuda()``), or a comprehension of
    such copies over it (``{k: v.to(device) for k, v in batch.items()}``,
    ``tuple(t.cuda() for t in batch)``) or over the keys of it
    (``[batch[k].to(device) for k in input_names]``)."""
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value in ("tuple", "list") and (
            len(expr.args) == 1):
        expr = expr.args[0].value
    if type(expr) in (cst.ListComp, cst.GeneratorExp, cst.DictComp):
        clause = expr.for_in
        if clause.inner_for_in is not None:
            return False
        element = expr.value if type(expr) is cst.DictComp else expr.elt
        if _root_name(clause.iter) in data:
            return _blocking_copy_of(ctx, element, set(target_names(clause.target)))
        # `[batch[k].to(device) for k in input_names]`: the loop's data, indexed by the names
        return _blocking_copy_of(ctx, element, data - set(target_names(clause.target)))
    if type(expr) is not cst.Call or type(expr.func) is not cst.Attribute or moves_to_device(expr, ctx) is None:
        return False
    if blocking_flag(expr) is None:
        return False  # `non_blocking=True`, `.to(device, dtype, flag)`: it may not wait
    inner = expr.func.value
    while type(inner) is cst.Call and type(inner.func) is cst.Attribute and not inner.args:
        inner = inner.func.value  # `x.float().cuda()`
    return _root_name(inner) in data and not _calls(inner)
