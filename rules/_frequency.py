"""How often code runs: once, once per epoch (or every N steps), or every step.

A cost paid per call (a host-to-device copy, a synchronization) matters only
where the code runs on every step of a training, evaluation or inference loop;
the same line in setup code, an export script or a ``__main__`` demo runs once
and costs microseconds.  This module answers "how often does the node being
visited run?" for the rules that need it, from the module alone:

* **Statements in a loop** run every iteration of it.  An iteration is a
  *step* unless the loop is an *outer* loop (its variable names an epoch, or
  its body holds a loop over data, a loader, batches or steps, or calls a
  function of the module that runs one): then the code directly in it runs
  once per epoch.  A loop over a
  few literal values, a mapping's items, a model's parameters or a few named
  entries (``for k in keys: if k == "crossattn":``), or, unless it is an
  outer loop, over a literal count of a few (``range(5)``, at most 16) or
  over the machine's GPUs (``for g in gpus:``, ``for i in
  range(torch.cuda.device_count()):``, ``range(num_gpus)``), in code that
  does not itself run per step, runs a handful of times; so does any loop in
  code known to run once or once per epoch, unless it looks like a training,
  evaluation or inference loop (it goes over a loader, a dataset, batches,
  steps, iterations or episodes, or its body runs a model, a backward pass,
  an optimizer step or a generation).  A loop in a function of unknown frequency counts as
  a step loop, as it always did.  Code under a
  periodic guard (``if step % 100 == 0:``) runs every N steps, which counts
  as per epoch, and so does the rest of a loop body after
  ``if <progress counter below a threshold>: continue`` (``if cur_nimg <
  tick_end: continue``: the code after it runs once per tick).  Code under a
  test that holds only for values that are not finite (``if
  torch.isnan(K).any():``, ``if not torch.isfinite(loss):``) is a recovery
  path that runs rarely, and counts the same; so does code at one step of
  the run: under ``if step == apply_step:`` (a progress counter named
  ``step``, ``*_step``, ``iteration``, ``it``, ``tick``, or such an attribute
  of ``self``, compared with ``==``, alone or in an ``and``), at a few steps
  (``if self.global_step in self.upsample_steps:``), or after ``if ... or step
  != apply_step: continue``; and so does code under ``if i == n_iter:`` (alone
  or in an ``and``) where ``i`` is the index of a loop around it (``for i in
  range(...)``, ``for i, x in enumerate(...)``) and ``n_iter`` does not
  mention it: each iteration has its own ``i``, so the test holds at one of
  them (a report after the last iteration).  A lazy initialisation (``if self.grid is None: self.grid =
  ...``, ``if len(state) == 0:`` on an optimizer's ``state = self.state[p]``)
  runs the first time only and counts the same; one of a local assigned
  before the loops around it (``grid = None`` ... ``if grid is None:``) runs
  once per run of its function (:func:`_lazy_init`).  The loops of a function
  that draws (``visualize_dev``, ``plot_*``, ``draw_*``) in code that runs
  once or per epoch are not step loops, and a loop whose body ends with an
  unconditional ``break``/``return``/``raise`` runs its body once
  (``_sync.runs_one_iteration``); one whose body stops it after a few
  iterations (``if i >= 6: break``, ``i`` its counter) runs a few times
  (``_sync.breaks_after_few``).
* **Functions** run as often as their most frequent caller in the module: a
  call in a step loop makes a function per step, and so does a call from a
  per-step function.  Some functions run per step by their role, whoever
  calls them: ``forward``, ``__call__`` (one that loops over a loader it is
  given, an evaluator's ``__call__(net, dl)``, runs once per pass; that of a
  class named for exporting or converting, ``Exporter``, runs once, and one
  that takes no argument, submitit's ``Trainer.__call__(self)``, has no
  role), ``__getitem__``/``__iter__``,
  ``*_step`` (``training_step``, ``train_step``), collate functions (passed
  as ``collate_fn=``) and hooks (passed to ``register_*hook``); not the
  methods of a notebook's class that the notebook only demonstrates once
  (``_program.demonstrated_once``).  Some run once
  by their role unless a step calls them: ``__init__``, ``main``,
  ``from_pretrained``/``from_config``, and names that build, set up, load,
  save, export or convert, log, plot, visualise, print or report.  A
  framework's epoch hook (``validation_epoch_end(self, outputs)``,
  ``on_train_epoch_end``) runs once per epoch, and so does a metric's summary
  (``compute``, ``compute_metrics``, ``compute_key_value`` of a class named for
  a metric or derived from one: ``_training.is_metric_class``), and its loops over the
  epoch's outputs (not over a loader or dataset) add nothing to that.
* **Benchmarks**: code in a loop, not over data, that synchronizes the
  device and reads a clock in its own body and trains nothing
  (``in_benchmark_loop``) is a measurement, not a step; an evaluation
  that times its batches is still an evaluation.
* **Once per pass of a sampler**: code outside the loops of a function (not
  ``forward``/``__call__``) that never trains and whose loop over a count or
  over time steps calls a model every iteration (``for step in range(order,
  steps + 1): ... self.model_fn(x, t)``; not a module picked by the counter)
  runs once per sampling run, however often the function is called
  (:func:`_runs_a_sampling_loop`); the model may be called through a helper
  defined in the function (Fooocus's ``heun_step``) or a method of its class
  that calls one (a solver's ``self.update(x, s, t)``), and code in the
  function's other loops (a schedule built step by step before the sampling
  loop, its outputs gathered after) runs once per pass too; so does an evaluation pass that re-ranks
  with a model for each item (BLIP's ``for i in track_iter_progress(range(n)):
  ... self.multimodal_backbone.bert(...)``: its score matrix is made once).
* **Module top-level code** (``if __name__ == "__main__":`` blocks included)
  runs once, apart from its loops.
* **Whole files** run once when their path says so: test files (``test_*.py``,
  ``*_test.py``, ``conftest.py``, under ``tests/``/``test/``) and export or
  conversion code (a directory named ``export``/``_export``/``exporters``, or a
  file such as ``export.py``, ``convert_*.py``, ``*_to_onnx.py``): their loops
  run once, at test or trace time.

A function that nothing in the module calls and whose role is unknown (a
helper another module may call) has an *unknown* frequency: rules that need
per-step code stay silent there (precision first), and note it, with the
functions of unknown frequency that call it in the module, for the project
index.  Calls are resolved by
name: ``f()`` to a function ``f`` of the module or of an enclosing function,
``self.m()``/``cls.m()``/``super().m()`` to a method ``m`` of the module's
classes, ``C()`` to ``C.__init__``.

The model is built once per file, on the first question (most files never
ask, so most files never pay for it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from torchlint.rule import Context, asks_periodic_helper, contains_modulo, is_test_path, tests_periodic_flag
from torchlint.rules._helpers import last_name, literal_number, string_value
from torchlint.rules._models import MODEL_WORDS
from torchlint.rules._program import demonstrated_once, in_synthetic_self_test
from torchlint.rules._training import is_metric_class, is_optimizer_step
from torchlint.rules._sync import (
    breaks_after_few, capped_by_loop, draws, few_range, loop_clauses, loop_counters, loop_facts, mentions_name,
    runs_one_iteration,
    target_names, unwrap_iterable,
)
from torchlint.nodes import inner_children, iter_children, walk_nodes

UNKNOWN, ONCE, PER_EPOCH, PER_STEP = 0, 1, 2, 3
NAMES = {UNKNOWN: "unknown", ONCE: "once", PER_EPOCH: "per epoch", PER_STEP: "per step"}

_PERIODIC = object()  # marks a periodic guard in a list of loops
_FIRST_PASS = object()  # marks a lazy initialisation of a local: once per run of the function
_OPTION_OFF = object()  # marks the body of an `if` on a command-line option that is off unless given

_STEP_ROLES = re.compile(
    r"^(forward|__call__|__getitem__|__getitems__|__iter__|__next__|step|_?\w*_step|"
    r"compute_loss|\w*collate\w*)$"
)
_ONCE_ROLES = re.compile(
    r"^(__init__|__post_init__|main|from_pretrained|from_config|from_checkpoint|"
    r"__str__|__repr__|__format__|extra_repr|to_string|\w+_(?:string|str|repr)|"
    r"_?(build|setup|set_up|init|initialize|create|load|save|export|"
    r"convert|prepare|configure|make|get_args|parse|log|plot|visuali[sz]e|show|dump|summar|print|report)\w*)$"
)
# Lightning's (and similar frameworks') hooks that run once per epoch: a loop in
# them over the epoch's outputs runs once per item, once per epoch.
_EPOCH_ROLES = re.compile(r"^(?:on_)?(?:train|training|validation|val|test|predict)_epoch_(?:end|start)$|^on_epoch_(?:end|start)$")
# A metric's summary over the evaluation (torchmetrics' and catalyst's `compute`,
# MMEngine's `compute_metrics(results)`, catalyst's `compute_key_value`, MONAI's
# `aggregate`): the framework calls it once per evaluation, after
# `update`/`process` (MONAI: `__call__`) saw each batch.
_METRIC_SUMMARY = frozenset({"compute", "compute_metrics", "compute_key_value", "aggregate"})


_CACHING_DECORATORS = frozenset({"cache", "lru_cache"})


def _cached(fn: cst.FunctionDef) -> bool:
    """``@cached_property``, or ``@functools.cache``/``@lru_cache`` on a
    function that takes nothing (but ``self``/``cls``): the body runs once
    (per instance) and its result is kept; a probe of the model's minimum
    input length made there is setup.  Not a cache keyed by arguments
    (``@lru_cache`` on ``predict(self, model, x)``): it runs for each new input."""
    params = fn.params
    takes_nothing = not (isinstance(params.star_arg, cst.Param) or params.kwonly_params or params.star_kwarg
                         or params.posonly_params) and all(
        p.name.value in ("self", "cls") for p in params.params)
    for decorator in fn.decorators:
        expr = decorator.decorator
        if type(expr) is cst.Call:
            expr = expr.func
        name = last_name(expr) or ""
        if name == "cached_property" or name in _CACHING_DECORATORS and takes_nothing:
            return True
    return False


# A class whose instances do a one-off job when called (`Exporter.__call__`).
_ONCE_CLASS = re.compile(r"Export|Convert", re.IGNORECASE)
_OUTER_LOOP_VARIABLE = re.compile(r"epoch", re.IGNORECASE)
_PARAMETER_WALKS = frozenset(
    {"parameters", "named_parameters", "modules", "named_modules", "children", "named_children",
     "buffers", "named_buffers", "items", "keys", "values", "state_dict"}
)
_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_LOADER_PARAMETER = re.compile(r"^(?:dl|\w*_dl|\w*loader)$", re.IGNORECASE)


def _takes_nothing(fn: cst.FunctionDef) -> bool:
    """``def __call__(self):``: a job object run once (submitit's
    ``Trainer()``), not a transform, loss or hook, which are handed data."""
    params = fn.params
    return (
        fn.name.value == "__call__" and len(params.params) <= 1 and not params.posonly_params
        and not params.kwonly_params and not isinstance(params.star_arg, cst.Param) and params.star_kwarg is None
    )


def _passes_over_loader(fn: cst.FunctionDef) -> bool:
    """A function that loops over a loader it is given (``def __call__(self,
    net, dl): ... for i, (imgs, label) in enumerate(dl):``, also through a
    name bound to ``enumerate(tqdm(dl))`` first): one call is a whole pass over
    the data, not a step."""
    loaders = {p.name.value for p in fn.params.params if _LOADER_PARAMETER.match(p.name.value)}
    if not loaders:
        return False
    todo: List[cst.CSTNode] = list(reversed(fn.body.body))
    while todo:
        node = todo.pop()  # (in source order: a binding before the loop that uses it)
        kind = type(node)
        if kind is cst.Assign and mentions_name(node.value, loaders):
            loaders |= {n for t in node.targets for n in target_names(t.target)}
        elif kind is cst.For and mentions_name(node.iter, loaders):
            return True
        elif kind in (cst.If, cst.Else, cst.With, cst.Try, cst.IndentedBlock, cst.SimpleStatementLine):
            todo.extend(reversed(iter_children(node)))
    return False



@dataclass(frozen=True)
class Frequency:
    level: int
    # The call (in the module) that makes a function run this often, when the
    # level was inferred through calls; None when it comes from the code's own
    # place (a loop, the module's top level) or its role.
    via: Optional[cst.Call] = None
    # The same, when the call is in another module of the project: "path:line".
    via_text: Optional[str] = None
    # The function the code is in (None at a module's top level).
    function: Optional[cst.FunctionDef] = None

    @property
    def per_step(self) -> bool:
        return self.level == PER_STEP

    def __str__(self) -> str:
        return NAMES[self.level]


@dataclass
class _Function:
    node: cst.FunctionDef
    cls: Optional[cst.ClassDef]  # the class it is a method of
    outer: Optional[cst.FunctionDef]  # the function it is nested in
    has_loop: bool = False
    data_loop: Optional[bool] = None  # see FrequencyModel._has_data_loop
    role: int = UNKNOWN
    level: int = UNKNOWN
    via: Optional[cst.Call] = None
    via_text: Optional[str] = None  # a call site in another module ("path:line")
    # Its name says it draws (`visualize_dev`): its loops go over the few
    # batches a picture needs, not over the data.
    draws: bool = False
    # A framework's epoch hook (`validation_epoch_end(self, outputs)`): its loops
    # go over the epoch's outputs, unless over a loader or dataset.
    epoch_hook: bool = False
    # Its result is cached (`@cached_property`, `@functools.cache`): its body,
    # loops included, runs once (a binary search probing the model's minimum
    # input length), unless a loop goes over data.
    cached: bool = False
    for_loops: List[cst.For] = field(default_factory=list)  # its own `for` statements (not nested functions')
    trains: bool = False  # calls `.backward()` or steps an optimizer in its own body


@dataclass
class _Site:
    call: cst.Call
    caller: Optional[cst.FunctionDef]
    cls: Optional[cst.ClassDef]
    loops: Tuple[object, ...]
    callees: List[cst.FunctionDef] = field(default_factory=list)
    per_step_reference: bool = False  # a collate function or a hook handed over here


class FrequencyModel:
    def __init__(self, module: cst.Module, definitions: Callable[[str], Sequence[Any]],
                 external: Optional[Dict[str, Tuple[int, str]]] = None,
                 flags: Optional[Dict[int, frozenset]] = None,
                 demonstrated: Optional[Callable[[cst.ClassDef], bool]] = None, source: Optional[str] = None) -> None:
        # `demonstrated`: whether a class of a notebook is only run once, on a
        # toy input (`_program.demonstrated_once`): its `forward` runs once.
        self._demonstrated = demonstrated
        # `external`: how often other modules of the project call this module's
        # functions, by qualified name ("f", "Class.method"): (level, "path:line").
        self.external = external or {}
        self.functions: Dict[cst.FunctionDef, _Function] = {}
        self.by_name: Dict[str, List[cst.FunctionDef]] = {}
        self.classes: Dict[str, List[cst.ClassDef]] = {}
        self.sites: List[_Site] = []
        self._outer_loops: Dict[int, bool] = {}
        self._displays: Dict[Tuple[int, str], bool] = {}  # see _over_displays
        self._sampling: Dict[cst.FunctionDef, bool] = {}  # see _samples
        self._helpers: Dict[cst.FunctionDef, "_Helpers"] = {}  # see _model_helpers
        self._class_helpers: Dict[Tuple[cst.ClassDef, str, int], bool] = {}  # see _runs_model_method
        self._denoising: Dict[cst.FunctionDef, bool] = {}  # see _denoises
        self._guards: Dict[int, Optional[object]] = {}  # `_guard_marker` of each `if`, by id
        self._callers: Optional[Dict[cst.FunctionDef, List[cst.FunctionDef]]] = None  # on demand
        # Periodic flags of each function, by id, computed on demand (shared with
        # the Context's periodic-guard test through `model_for`).
        self._flags: Dict[int, frozenset] = {} if flags is None else flags
        self._module = module
        # The module's `def`/`class` statements by name (its `SemanticModel.definitions`,
        # the one its rules ask): a periodic guard may call a helper (`if self._should_log():`).
        self._definitions = definitions
        # `cli_options_off`, on demand (none in a module whose `source` parses no arguments)
        self._options_off: Optional[frozenset] = None if source is None or "add_argument" in source else frozenset()
        self._collect(module)
        self._resolve()
        self._propagate()

    # -- collecting ------------------------------------------------------------------
    def _collect(self, module: cst.Module) -> None:
        # (node, enclosing function, enclosing class, loops) with an explicit stack:
        # deeply nested code must not exhaust Python's recursion limit.
        todo: List[Tuple[cst.CSTNode, Optional[cst.FunctionDef], Optional[cst.ClassDef], Tuple[object, ...]]]
        todo = [(module, None, None, ())]
        while todo:
            node, fn, cls, loops = todo.pop()
            kind = type(node)
            if kind is cst.FunctionDef:
                name = node.name.value
                info = _Function(node, cls, fn, draws=draws(name))
                if name == "forward" and cls is not None and _defines_symbolic(cls):
                    info.role = ONCE  # an export-only op (`symbolic` for ONNX): its forward runs when tracing
                elif _STEP_ROLES.match(name) and (name not in ("step",) or cls is not None) and not _takes_nothing(node):
                    # (an evaluator's `__call__(net, dl)` is a whole pass: its loop runs per step)
                    info.role = PER_EPOCH if name == "__call__" and _passes_over_loader(node) else PER_STEP
                    if name == "__call__" and cls is not None and _ONCE_CLASS.search(cls.name.value):
                        info.role = ONCE  # `Exporter()(model)`: one export per run
                    if cls is not None and self._demonstrated is not None and self._demonstrated(cls):
                        info.role = ONCE  # a notebook's module run once on a toy input
                elif _ONCE_ROLES.match(name) or _cached(node):
                    info.role = ONCE  # (a `@cached_property`, `@functools.cache`: computed once, then kept)
                    info.cached = _cached(node)
                elif _EPOCH_ROLES.match(name) and cls is not None or (
                        name in _METRIC_SUMMARY and cls is not None and is_metric_class(cls)):
                    info.role = PER_EPOCH  # `validation_epoch_end(self, outputs)`, `Metric.compute(self)`
                    info.epoch_hook = True
                self.functions[node] = info
                self.by_name.setdefault(name, []).append(node)
                todo.append((node.body, node, None, ()))
                continue
            if kind is cst.ClassDef:
                self.classes.setdefault(node.name.value, []).append(node)
                todo.append((node.body, fn, node, loops))
                continue
            if kind is cst.Lambda:
                continue  # runs whenever it is called: unknown
            if kind is cst.Call:
                self.sites.append(_Site(node, fn, cls if fn is None else self.functions[fn].cls, loops))
                if fn is not None and type(node.func) is cst.Attribute and (
                        node.func.attr.value == "backward" or is_optimizer_step(node)):
                    self.functions[fn].trains = True
            if kind in _LOOPS and fn is not None:
                self.functions[fn].has_loop = True
                if kind is cst.For:
                    self.functions[fn].for_loops.append(node)
            if kind is cst.IndentedBlock:
                # `_loop_marker`'s periodic `continue`, in one pass over the block
                # (not one pass over the statements before each statement)
                child_loops = loops
                for child in iter_children(node):
                    todo.append((child, fn, cls, child_loops))
                    if child_loops is loops and _periodic_continue(child):
                        child_loops = (*loops, _PERIODIC)  # after `if cur_nimg < tick_end: continue`
                continue
            flagged = kind is cst.If and fn is not None and (
                tests_periodic_flag(node.test, fn, self._flags) or asks_periodic_helper(node.test, self._definitions))
            lazy = self._guard(node, fn, loops) if kind is cst.If else None
            marks = kind in _MARKERS
            for child in inner_children(node):  # nothing above is done at a leaf
                child_loops = _loops_for_child(node, child, loops) if marks else loops
                if flagged and child is node.body and child_loops is loops:
                    child_loops = (*loops, _PERIODIC)  # `if log_now:` where `log_now = step % every == 0`
                elif lazy is not None and child is node.body and child_loops is loops:
                    child_loops = (*loops, lazy)  # `if buf is None: buf = ...`: the first time only
                todo.append((child, fn, cls if kind is not cst.FunctionDef else None, child_loops))

    # -- resolving calls -------------------------------------------------------------
    def _resolve(self) -> None:
        for site in self.sites:
            call = site.call
            func = call.func
            if isinstance(func, cst.Name):
                site.callees = self._named(func.value, site.caller)
                for cls in self.classes.get(func.value, ()):
                    site.callees.extend(self._methods(cls, "__init__"))
            elif isinstance(func, cst.Attribute):
                owner = func.value
                method = func.attr.value
                if (isinstance(owner, cst.Name) and owner.value in ("self", "cls")) or (
                    isinstance(owner, cst.Call) and isinstance(owner.func, cst.Name) and owner.func.value == "super"
                ):
                    own = self._methods(site.cls, method) if site.cls is not None else []
                    site.callees = own or [
                        f for f in self.by_name.get(method, ()) if self.functions[f].cls is not None
                    ]
                if "hook" in method.lower():
                    site.per_step_reference = True
            # Functions handed over: `collate_fn=collate`, `register_forward_hook(hook)`.
            for arg in call.args:
                target = _function_reference(arg.value)
                if target is None:
                    continue
                referenced = self._referenced(target, site)
                if arg.keyword is not None and "collate" in arg.keyword.value:
                    for f in referenced:
                        self._raise(f, PER_STEP, None)
                elif site.per_step_reference:
                    for f in referenced:
                        self._raise(f, PER_STEP, None)
                else:
                    site.callees.extend(referenced)  # called from here, as far as we can tell

    def _named(self, name: str, caller: Optional[cst.FunctionDef]) -> List[cst.FunctionDef]:
        scopes = set()
        while caller is not None:
            scopes.add(caller)
            caller = self.functions[caller].outer
        return [
            f for f in self.by_name.get(name, ())
            if self.functions[f].cls is None and (self.functions[f].outer is None or self.functions[f].outer in scopes)
        ]

    def _methods(self, cls: cst.ClassDef, name: str) -> List[cst.FunctionDef]:
        return [f for f in self.by_name.get(name, ()) if self.functions[f].cls is cls]

    def _referenced(self, target: Tuple[str, bool], site: _Site) -> List[cst.FunctionDef]:
        name, is_method = target
        if is_method:
            return self._methods(site.cls, name) if site.cls is not None else []
        return self._named(name, site.caller)

    # -- how often ----------------------------------------------------------------------
    def _raise(self, fn: cst.FunctionDef, level: int, via: Optional[cst.Call]) -> bool:
        info = self.functions[fn]
        if level > info.level:
            info.level, info.via = level, via
            return True
        return False

    def _propagate(self) -> None:
        for info in self.functions.values():
            if info.role > info.level:
                info.level = info.role
            if self.external:
                name = qualified_name(info)
                outside = self.external.get(name) if name is not None else None
                if outside is not None and outside[0] > info.level:
                    info.level, info.via, info.via_text = outside[0], None, outside[1]
        # Levels only grow and are bounded, so this ends; a few rounds suffice in practice.
        for _ in range(len(self.functions) + 1):
            changed = False
            for site in self.sites:
                if not site.callees:
                    continue
                level = self._site_level(site.caller, site.loops)
                for callee in site.callees:
                    if callee is site.caller:
                        continue  # recursion adds nothing
                    changed |= self._raise(callee, level, site.call)
            if not changed:
                break

    def _site_level(self, fn: Optional[cst.FunctionDef], loops: Sequence[object]) -> int:
        """How often code runs that sits in ``fn`` under ``loops`` (outermost first)."""
        level = ONCE if fn is None else self.functions[fn].level
        if fn is not None and self._once_per_pass(fn, level, loops):
            return PER_EPOCH
        drawing = fn is not None and self.functions[fn].draws
        hook = fn is not None and self.functions[fn].epoch_hook
        for loop in loops:
            if loop is _OPTION_OFF:
                level = min(level, PER_EPOCH)  # only in the runs that ask for it
            elif loop is _PERIODIC:
                if level == PER_STEP:
                    level = PER_EPOCH  # every N steps
            elif loop is _FIRST_PASS:
                level = ONCE if fn is None else self.functions[fn].level  # once per run of the function
            elif _few_values(loop):
                continue  # a handful of times per run of what is around it
            elif self._is_outer_loop(loop):
                level = max(level, PER_EPOCH)
            elif _few_count(loop):
                continue  # `for sample in range(5):` a handful of times (an epoch loop is outer, above)
            elif hook and level == PER_EPOCH and not _over_loader(loop):
                continue  # the epoch's outputs, gathered: once per item, once per epoch
            elif level in (ONCE, PER_EPOCH) and (drawing or not _steps(loop) or (
                    fn is not None and self.functions[fn].cached and not _over_data(loop))):
                # a loop in code known to run rarely, over something else than the
                # data, or in a function that draws (a few batches for a picture)
                continue
            elif self._over_displays(loop, fn):
                continue  # a handful of values written out (asked last: it walks the function)
            else:
                level = PER_STEP
        return level

    def _once_per_pass(self, fn: cst.FunctionDef, level: int, loops: Sequence[object]) -> bool:
        """Whether code of a sampler ``fn`` under ``loops`` runs once per pass: its
        setup outside the loops (when ``fn`` runs per step), or code in its loops
        that run no model (a schedule built before the sampling loop, the outputs
        gathered after it) when the sampling loop feeds the model's output back."""
        if not loops:
            return level == PER_STEP and self._samples(fn)
        return level != ONCE and self._samples(fn) and self._denoises(fn) and not any(
            type(loop) in (cst.For, cst.While) and self._runs_model(loop, fn) for loop in loops)

    def _samples(self, fn: cst.FunctionDef) -> bool:
        """:func:`_runs_a_sampling_loop`, once per function."""
        found = self._sampling.get(fn)
        if found is None:
            info = self.functions.get(fn)
            found = self._sampling[fn] = info is not None and _runs_a_sampling_loop(
                fn, info.for_loops, info.trains, lambda: self._model_helpers(fn))
        return found

    def _denoises(self, fn: cst.FunctionDef) -> bool:
        """Whether a loop of ``fn`` over a count or time steps feeds the model's
        output back into it (``x = heun_step(x, sigma, next_sigma)``, ``img =
        self.p_sample(img, t)``): a sampler's steps, each on the last one's
        result, not a pass over the frames of a video (``emb =
        self.visual_encoder(frame)`` for each frame), whose other loops are part
        of the same work."""
        found = self._denoising.get(fn)
        if found is None:
            found = self._denoising[fn] = self._feeds_model_back(fn)
        return found

    def _feeds_model_back(self, fn: cst.FunctionDef) -> bool:
        helpers = self._model_helpers(fn)
        info = self.functions.get(fn)
        for node in (info.for_loops if info is not None else ()):
            if not _counts_steps(node):
                continue
            for inner in _walk_shallow(node.body):
                if type(inner) is not cst.Assign or type(inner.value) is not cst.Call:
                    continue
                call = inner.value
                if not _calls_model_in(call, helpers):
                    continue
                names = {n for t in inner.targets for n in target_names(t.target)}
                if any(mentions_name(a.value, names) for a in call.args):
                    return True
        return False

    def _runs_model(self, loop: cst.CSTNode, fn: cst.FunctionDef) -> bool:
        """Whether a loop of ``fn`` calls a model (or a helper of ``fn`` that does)."""
        return _calls_a_model(loop, self._model_helpers(fn))

    def _model_helpers(self, fn: cst.FunctionDef) -> "_Helpers":
        """The callees, as written in ``fn``, that run a model: a function
        defined in ``fn`` (``def heun_step(x, ...): denoised = model(x, ...)``)
        or a method of its class (``self.dpm_solver_update(x, ...)``) whose
        body calls one, directly or through another such method (two levels);
        each name is judged when a loop calls it (:class:`_Helpers`)."""
        found = self._helpers.get(fn)
        if found is None:
            info = self.functions.get(fn)
            found = self._helpers[fn] = _Helpers(self, fn, info.cls if info is not None else None)
        return found

    def _runs_model_method(self, cls: cst.ClassDef, name: str, depth: int = 0) -> bool:
        """Whether the method ``name`` of ``cls`` calls a model, directly or
        through another method of the class (two levels), once per method."""
        key = (cls, name, depth)
        found = self._class_helpers.get(key)
        if found is None:
            method = next((f for f in _class_methods(cls) if f.name.value == name), None)
            found = method is not None and (_calls_model_in(method.body) or depth == 0 and any(
                type(n) is cst.Call and _self_method(n.func) not in (None, name)
                and self._runs_model_method(cls, _self_method(n.func), 1) for n in _walk_shallow(method.body)))
            self._class_helpers[key] = found
        return found

    def _guard(self, node: cst.If, fn: Optional[cst.FunctionDef], loops: Sequence[object]) -> Optional[object]:
        """:func:`_guard_marker`, once per ``if`` (the loops around it are the
        same whichever question asks)."""
        key = id(node)
        if key not in self._guards:
            self._guards[key] = self._option_marker(node) or _guard_marker(node, fn, loops, lambda: self._sibling_methods(fn))
        return self._guards[key]

    def _sibling_methods(self, fn: Optional[cst.FunctionDef]) -> Dict[str, cst.FunctionDef]:
        """The methods of ``fn``'s class by name (none for a function); read from
        the class's body, since ``_guard`` asks while the walk has not yet met
        every method (``self._methods`` answers only after it)."""
        info = self.functions.get(fn) if fn is not None else None
        if info is None or info.cls is None:
            return {}
        return {f.name.value: f for f in _class_methods(info.cls)}

    def _option_marker(self, node: cst.If) -> Optional[object]:
        """``_OPTION_OFF`` for an ``if`` on a command-line option of the module
        that is off unless given (``if args.scale_weight_norms:``).  Not a
        class's constructor default (``offset_noise_level=0.0``): the
        configuration files set those (WeNet's ``n_negatives: 100``)."""
        operands = [t for t in _and_operands(node.test) if type(t) in (cst.Attribute, cst.Comparison)]
        if not operands:
            return None
        if self._options_off is None:
            self._options_off = cli_options_off(self._module)
        if self._options_off and any(_reads_cli_option_off(t, self._options_off) for t in operands):
            return _OPTION_OFF
        return None

    def _over_displays(self, loop: object, fn: Optional[cst.FunctionDef]) -> bool:
        """A ``for`` over a local name that ``fn`` only ever assigns tuple or list
        displays (``models = ((self.vae, "vae"),)``, ``models = ((ema, "ema"),) +
        models``): a few values.  Cached per function and name."""
        if fn is None or not isinstance(loop, cst.For) or not isinstance(loop.iter, cst.Name):
            return False
        if any(word in loop.iter.value.lower() for word in _DATA_WORDS):
            return False  # `for batch in loader`: data, not written out
        key = (id(fn), loop.iter.value)
        found = self._displays.get(key)
        if found is None:
            found = self._displays[key] = _bound_to_displays(fn, loop.iter.value)
        return found

    def _is_outer_loop(self, loop: object) -> bool:
        """A loop whose iteration is a whole pass: its variable names an epoch, its
        body runs another loop (directly, or in a function of the module it calls),
        or its body builds a data loader (one per dataset or split)."""
        known = self._outer_loops.get(id(loop))
        if known is not None:
            return known
        outer = False
        if isinstance(loop, cst.For) and any(_OUTER_LOOP_VARIABLE.search(n) for n in target_names(loop.target)):
            # ... unless the "epoch" is itself a step: full-batch training calls
            # backward() in the loop's own body
            outer = not _backward_directly(loop.body)
        elif isinstance(loop, (cst.For, cst.While)) and not _backward_directly(loop.body):
            # (A loop that runs a backward pass itself is the step loop, even with
            # a validation loop inside it every N steps.)
            for node in _walk_shallow(loop.body):
                kind = type(node)
                if kind in (cst.For, cst.While) and _over_data(node):
                    outer = True
                elif kind is cst.Call and isinstance(node.func, cst.Name):
                    outer = any(self._has_data_loop(f) for f in self._named(node.func.value, None))
                if not outer and kind is cst.Call:
                    # Builds a data loader every iteration (`for name in test_datasets:
                    # loader = make_eval_data_loader(name)`): each iteration is a pass.
                    func = node.func
                    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
                    outer = "loader" in name.lower()
                if outer:
                    break
        self._outer_loops[id(loop)] = outer
        return outer

    def _has_data_loop(self, fn: cst.FunctionDef) -> bool:
        """Whether a function runs a loop over data (a loader, batches, steps) in its own body."""
        info = self.functions[fn]
        if info.data_loop is None:
            info.data_loop = info.has_loop and any(
                type(node) in (cst.For, cst.While) and _over_data(node) for node in _walk_shallow(fn.body)
            )
        return info.data_loop

    # -- questions -----------------------------------------------------------------------
    def here(self, ctx: Context, skip: frozenset = frozenset()) -> Frequency:
        """How often the node being visited runs (the loops in ``skip``, by id,
        not counted: loops that only read values, see ``_sync.only_reads``)."""
        stack = ctx.stack
        loops: List[object] = []
        fn: Optional[cst.FunctionDef] = None
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            child = stack[i + 1]
            kind = type(node)
            if kind is cst.FunctionDef:
                fn = node
                break
            if kind is cst.Lambda:
                return Frequency(UNKNOWN)
            marker = _loop_marker(node, child)
            if marker is None and kind is cst.If and child is node.body:
                # `if log_now:` where `log_now = step % every == 0`; else maybe a
                # lazy initialisation, decided below once the function is known
                marker = _PERIODIC if ctx.is_periodic_test(node.test, i) else node
            if marker is not None and id(marker) not in skip:
                loops.append(marker)
        loops.reverse()
        if fn is not None and fn not in self.functions:
            return Frequency(UNKNOWN)
        if any(type(m) is cst.If for m in loops):
            resolved: List[object] = []
            for marker in loops:
                if type(marker) is cst.If:
                    marker = self._guard(marker, fn, resolved) if not skip else (
                        self._option_marker(marker) or _guard_marker(marker, fn, resolved, lambda: self._sibling_methods(fn)))
                if marker is not None:
                    resolved.append(marker)
            loops = resolved
        level = self._site_level(fn, loops)
        via = via_text = None
        if fn is not None and (not loops or level == self.functions[fn].level):
            via, via_text = self.functions[fn].via, self.functions[fn].via_text
        return Frequency(level, via, via_text, fn)

    def of_function(self, fn: cst.FunctionDef) -> Frequency:
        info = self.functions.get(fn)
        if info is None:
            return Frequency(UNKNOWN)
        return Frequency(info.level, info.via, info.via_text, fn)

    def only_by_role(self, fn: cst.FunctionDef) -> bool:
        """Whether the function runs once only because its name says so (no
        call in the module made it run more or less often)."""
        info = self.functions.get(fn)
        return info is not None and info.role == ONCE and info.level == ONCE and info.via is None

    def unknown_callers(self, fn: cst.FunctionDef) -> List[cst.FunctionDef]:
        """The functions of unknown frequency that call ``fn`` in this module,
        directly or through others of unknown frequency (a few levels up): who
        calls *them* elsewhere decides how often ``fn`` runs (``debug_image``
        in ``utils.py``, called from the trainer every N steps, calls
        ``translate_using_latent`` of the same module)."""
        if self._callers is None:
            self._callers = {}
            for site in self.sites:
                for callee in site.callees:
                    if site.caller is not None and site.caller is not callee:
                        self._callers.setdefault(callee, []).append(site.caller)
        found: List[cst.FunctionDef] = []
        todo = [(fn, 0)]
        seen = {fn}
        while todo:
            current, depth = todo.pop()
            for caller in self._callers.get(current, ()):
                if caller in seen or self.functions[caller].level != UNKNOWN or depth >= 3:
                    continue
                seen.add(caller)
                found.append(caller)
                todo.append((caller, depth + 1))
        return found

    def qualified_name(self, fn: Optional[cst.FunctionDef]) -> Optional[str]:
        info = self.functions.get(fn) if fn is not None else None
        return qualified_name(info) if info is not None else None


def qualified_name(info: "_Function") -> Optional[str]:
    """How other modules name a function: ``f`` or ``Class.method`` (None for a
    nested function, which no other module can call)."""
    if info.outer is not None:
        return None
    if info.cls is not None:
        return f"{info.cls.name.value}.{info.node.name.value}"
    return info.node.name.value


def _defines_symbolic(cls: cst.ClassDef) -> bool:
    """Whether a class defines ``symbolic``: a `torch.autograd.Function` that
    stands for an ONNX or TensorRT op (NMS) while a model is exported; its
    ``forward`` only makes up outputs of the right shape for the tracer."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return any(type(s) is cst.FunctionDef and s.name.value == "symbolic" for s in body)


def _loops_for_child(node: cst.CSTNode, child: cst.CSTNode, loops: Tuple[object, ...]) -> Tuple[object, ...]:
    marker = _loop_marker(node, child)
    return loops if marker is None else (*loops, marker)


# The node types under which ``_loop_marker`` may find a marker, besides an
# ``IndentedBlock`` (which ``FrequencyModel._collect`` handles itself).
_MARKERS = frozenset({cst.For, cst.While, cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp, cst.If})


def _loop_marker(node: cst.CSTNode, child: cst.CSTNode) -> Optional[object]:
    """The loop (or periodic guard) that ``child`` of ``node`` runs under, if any."""
    kind = type(node)
    if kind is cst.For:
        return node if child is node.body and not runs_one_iteration(node) else None
    if kind is cst.While:
        return node if (child is node.body or child is node.test) and not runs_one_iteration(node) else None
    if kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
        return node if child is not node.for_in else None
    if kind is cst.If and child is node.body and (
        contains_modulo(node.test) or non_finite_test(node.test) or _at_one_step(node.test, cst.Equal, cst.And)
    ):
        return _PERIODIC
    if kind is cst.IndentedBlock:
        for statement in node.body:
            if statement is child:
                break
            if _periodic_continue(statement):
                return _PERIODIC  # after `if cur_nimg < tick_end: continue`: once per tick
    return None


_NON_FINITE = frozenset({"isnan", "isinf", "isposinf", "isneginf"})


def non_finite_test(test: cst.BaseExpression) -> bool:
    """A test that holds only when a value is not finite (``torch.isnan(K).any()``,
    ``math.isinf(loss)``, ``not torch.isfinite(x).all()``), alone or in an ``or``
    of such tests or an ``and`` with one: its body is a recovery path (replace
    a diverged matrix, skip a step) that runs rarely, not every step."""
    if type(test) is cst.BooleanOperation:
        if type(test.operator) is cst.Or:
            return non_finite_test(test.left) and non_finite_test(test.right)
        return non_finite_test(test.left) or non_finite_test(test.right)
    negated = False
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        negated, test = True, test.expression
    # `.any()`/`.all()` of the element-wise test, or `torch.any(...)`
    if type(test) is cst.Call and not test.args and type(test.func) is cst.Attribute and test.func.attr.value in ("any", "all"):
        test = test.func.value
    elif type(test) is cst.Call and len(test.args) == 1 and last_name(test.func) in ("any", "all"):
        test = test.args[0].value
    if type(test) is not cst.Call:
        return False
    name = last_name(test.func)
    return name == "isfinite" if negated else name in _NON_FINITE


_PROGRESS_WORDS = ("step", "tick", "nimg", "iter", "count", "seen", "accum")


def _periodic_continue(statement: cst.CSTNode) -> bool:
    """``if <a progress counter below a threshold>: continue`` (no else): the rest of
    the loop body runs once every so many iterations (a tick), not every one;
    also ``if step % every != 0: return`` (or ``continue``) ahead of a demo or
    logging hook's work (stable-audio-tools' ``on_train_batch_end``): the rest
    runs every ``every`` steps."""
    if type(statement) is not cst.If or statement.orelse is not None:
        return False
    body = statement.body
    lines = body.body if type(body) is cst.IndentedBlock else [body]
    if len(lines) != 1:
        return False
    line = lines[0]
    small = line.body if type(line) in (cst.SimpleStatementLine, cst.SimpleStatementSuite) else ()
    if len(small) != 1 or not (type(small[0]) is cst.Continue or (type(small[0]) is cst.Return and small[0].value is None)):
        return False
    if _skips_off_period(statement.test):
        return True  # after `if step % every != 0: return`: every `every` steps
    if type(small[0]) is cst.Return:
        return False
    if _at_one_step(statement.test, cst.NotEqual, cst.Or):
        return True  # after `if ... or step != apply_step: continue`: at that step only
    for node in _walk_shallow(statement.test):
        if type(node) is cst.Comparison and any(
            type(target.operator) in (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)
            for target in node.comparisons
        ) and _names_contain([node], _PROGRESS_WORDS):
            return True
    return False


def _skips_off_period(test: cst.BaseExpression) -> bool:
    """``step % every != 0`` (alone or in an ``or``): true except every ``every`` steps."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.Or:
        return _skips_off_period(test.left) or _skips_off_period(test.right)
    return (type(test) is cst.Comparison and len(test.comparisons) == 1
            and type(test.comparisons[0].operator) is cst.NotEqual
            and type(test.left) is cst.BinaryOperation and type(test.left.operator) is cst.Modulo)


def _at_one_step(test: cst.BaseExpression, operator: type, joins: type) -> bool:
    """``step == apply_step`` (``operator`` ``==``), or ``step != apply_step``
    (``!=``), alone or as an operand of ``joins`` (``and`` for ``==``, ``or``
    for ``!=``): a progress counter (``step``, ``global_step``,
    ``self.iteration``) compared with another value, which holds at one step of
    the run; with ``==``, also ``self.global_step in self.upsample_steps``
    (``not in`` with ``!=``): a few steps of the run."""
    if type(test) is cst.BooleanOperation:
        return type(test.operator) is joins and (
            _at_one_step(test.left, operator, joins) or _at_one_step(test.right, operator, joins))
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return False
    part = test.comparisons[0]
    if type(part.operator) is (cst.In if operator is cst.Equal else cst.NotIn):
        return _names_counter(test.left)
    return type(part.operator) is operator and (_names_counter(test.left) or _names_counter(part.comparator))


def _names_counter(side: cst.BaseExpression) -> bool:
    """``step``, ``global_step``, ``self.global_step``."""
    if type(side) is cst.Attribute and type(side.value) is cst.Name and side.value.value == "self":
        side = side.attr
    return type(side) is cst.Name and bool(_STEP_COUNTER.match(side.value))


def _guard_marker(node: cst.If, fn: Optional[cst.FunctionDef], loops: Sequence[object],
                  methods: Optional[Callable[[], Dict[str, cst.FunctionDef]]] = None) -> Optional[object]:
    """The marker for the body of an ``if`` that lets it run rarely: a lazy
    initialisation (:func:`_lazy_init`), or a cap on a counter the loop around
    it increments every iteration (``num_total += 1`` ... ``if num_total < 10:``,
    a debug print of the first examples): ``_PERIODIC``."""
    lazy = _lazy_init(node, fn, loops, methods)
    if lazy is not None:
        return lazy
    if _at_one_index(node.test, loops):
        return _PERIODIC
    loop = next((l for l in reversed(loops) if isinstance(l, (cst.For, cst.While))), None)
    return _PERIODIC if loop is not None and capped_by_loop(node, loop) else None


def _at_one_index(test: cst.BaseExpression, loops: Sequence[object]) -> bool:
    """``i == n_iter`` (alone or in an ``and``) where ``i`` counts the
    iterations of a loop around it (``for i in range(...)``, ``for i, x in
    enumerate(...)``) and ``n_iter`` does not mention it: each iteration has
    its own ``i``, so the body runs at one iteration of that loop (the last
    step's checkpoint, the first step's print)."""
    if type(test) is cst.BooleanOperation:
        return type(test.operator) is cst.And and (_at_one_index(test.left, loops) or _at_one_index(test.right, loops))
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    sides = (test.left, test.comparisons[0].comparator)
    counters = {name for loop in loops for name in loop_counters(loop)}
    for side, other in (sides, sides[::-1]):
        if type(side) is cst.Name and side.value in counters and not mentions_name(other, (side.value,)):
            return True
    return False


def _lazy_init(node: cst.If, fn: Optional[cst.FunctionDef], loops: Sequence[object],
               methods: Optional[Callable[[], Dict[str, cst.FunctionDef]]] = None) -> Optional[object]:
    """The marker for the body of a lazy initialisation, or None: ``if buf is
    None: buf = ...``, ``if not cache: cache[k] = ...``, ``if len(state) == 0:
    state["step"] = ...``, ``if "exp_avg" not in state: state["exp_avg"] = ...``
    or ``if not hasattr(self, "grid"): self.grid = ...``, whose body assigns
    what it tests.  State kept on the object (``self.grid``, an optimizer's
    ``state = self.state[p]``) or in a ``global`` is made once per run:
    ``_PERIODIC``.  A local assigned before the loops around the test (and
    not in them) is made once per run of the function: ``_FIRST_PASS``.  A
    parameter (``if mask is None: mask = torch.ones(...)``) or a local
    assigned again every iteration is not a lazy initialisation: its body
    runs whenever the value is missing.  State on the object may be filled
    by a method of the class that the body calls (``if self.means == {}:
    self.init_missing_classes(...)``, avalanche's NCM classifier)."""
    subject = _lazy_subject(node.test)
    if subject is None:
        return _PERIODIC if _clears_own_flag(node) else None
    if not _assigns(node.body, subject):
        if methods is None or type(subject) is cst.Name or not _rooted_at_self(subject):
            return None
        called = [_self_method(n.func) for n in _walk_shallow(node.body) if type(n) is cst.Call]
        siblings = methods() if any(called) else {}
        if not any(name in siblings and _assigns(siblings[name].body, subject) for name in called):
            return None
    if type(subject) is not cst.Name and _rooted_at_self(subject):
        return _PERIODIC
    if type(subject) is not cst.Name:
        return None
    name = subject.value
    if fn is None:
        return _FIRST_PASS
    params = fn.params
    if any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params)):
        return None
    outermost = next((loop for loop in loops if isinstance(loop, cst.CSTNode)), None)
    bound_outside = False
    for statement, inside in _bindings(fn.body, name, outermost, node):
        value = getattr(statement, "value", None)
        if isinstance(statement, (cst.Global, cst.Nonlocal)) or (value is not None and _rooted_at_self(value)):
            return _PERIODIC
        if inside:
            return None  # assigned again in the loop: missing again every iteration
        bound_outside = True
    return _FIRST_PASS if bound_outside else None


def _clears_own_flag(node: cst.If) -> bool:
    """``if self._has_uninitialized_output_dist:`` whose body sets that flag to
    ``False`` (torchrec's lazy output set-up): state on the object, so the body
    runs once per run."""
    test = node.test
    if type(test) is not cst.Attribute or not _rooted_at_self(test):
        return False
    for found in _walk_shallow(node.body):
        if type(found) is cst.Assign and type(found.value) is cst.Name and found.value.value == "False" \
                and any(t.target.deep_equals(test) for t in found.targets):
            return True
    return False


def _lazy_subject(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """What a lazy initialisation tests: ``x is None``, ``not x``, ``len(x) == 0``,
    ``"k" not in x``; ``not hasattr(self, "x")`` stands for ``self.x``."""
    kind = type(test)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        inner = test.expression
        if type(inner) is cst.Call and last_name(inner.func) == "hasattr" and len(inner.args) == 2:
            owner, attr = inner.args[0].value, inner.args[1].value
            if type(owner) is cst.Name and type(attr) is cst.SimpleString and attr.value[1:-1].isidentifier():
                return cst.Attribute(owner, cst.Name(attr.value[1:-1]))
            return None
        return inner if type(inner) in (cst.Name, cst.Attribute, cst.Subscript) else None
    if kind is not cst.Comparison or len(test.comparisons) != 1:
        return None
    part = test.comparisons[0]
    operator, right = type(part.operator), part.comparator
    if operator is cst.Is and type(right) is cst.Name and right.value == "None":
        return test.left
    if operator is cst.Equal and type(right) in (cst.Dict, cst.List, cst.Tuple) and not right.elements:
        return test.left  # `if self.class_means == {}:`
    if operator is cst.NotIn and type(test.left) is cst.SimpleString:
        return right
    left = test.left
    if operator is cst.Equal and type(right) is cst.Integer and right.value == "0" and type(left) is cst.Call \
            and type(left.func) is cst.Name and left.func.value == "len" and len(left.args) == 1:
        return left.args[0].value
    return None


def _assigns(body: cst.CSTNode, subject: cst.BaseExpression) -> bool:
    """Whether ``body`` assigns ``subject`` or one of its items (``subject[k] = ...``)."""
    for node in _walk_shallow(body):
        if type(node) is cst.AssignTarget or type(node) is cst.AnnAssign:
            target = node.target
            if type(target) is cst.Subscript and target.value.deep_equals(subject):
                return True
            if target.deep_equals(subject):
                return True
    return False


def _bindings(body: cst.CSTNode, name: str, loop: Optional[cst.CSTNode], skip: cst.CSTNode):
    """The statements of a function that bind ``name`` (assignments, ``global``
    and ``nonlocal``), outside ``skip``, each with whether it is inside ``loop``."""
    todo: List[Tuple[cst.CSTNode, bool]] = [(body, False)]
    while todo:
        node, inside = todo.pop()
        kind = type(node)
        if node is skip or kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        if kind in (cst.Global, cst.Nonlocal) and any(n.name.value == name for n in node.names):
            yield node, inside
        elif kind in (cst.Assign, cst.AnnAssign, cst.AugAssign):
            targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]
            if any(name in target_names(t) for t in targets):
                yield node, inside
        elif kind in (cst.For, cst.With) and name in _bound_names(node):
            yield node, inside
        inner = inside or node is loop
        todo.extend((child, inner) for child in iter_children(node))


def _bound_names(node: cst.CSTNode) -> List[str]:
    if type(node) is cst.For:
        return target_names(node.target)
    return [n for item in node.items if item.asname is not None for n in target_names(item.asname.name)]


def _rooted_at_self(value: cst.BaseExpression) -> bool:
    """``self.state[p]``, ``self.cache``: state kept on the object."""
    while type(value) in (cst.Attribute, cst.Subscript):
        value = value.value
    return type(value) is cst.Name and value.value in ("self", "cls")


_STEP_COUNTER = re.compile(r"^(\w+_)?(step|steps|iteration|iter|it|itr|tick)$")
_STEP_WORDS = ("loader", "dataset", "batch", "step", "iter", "episode")
# Calls that find, build or load a module rather than run one (`get_module(model, name)`).
_GETS = re.compile(r"^_?(get|load|build|make|create|init|set|named)_")
_STEP_CALLS = frozenset({"backward", "step", "generate", "forward", "predict", "inference", "infer"})


_DATA_WORDS = ("loader", "dataset", "batch", "step", "iter")


_SAMPLING_WORDS = ("timestep", "sigmas", "step_list")


def _class_methods(cls: cst.ClassDef) -> List[cst.FunctionDef]:
    """The functions defined in ``cls``'s body, in order."""
    body = cls.body
    return [f for f in (body.body if isinstance(body, cst.IndentedBlock) else ()) if type(f) is cst.FunctionDef]


def _nested_functions(fn: cst.FunctionDef) -> List[cst.FunctionDef]:
    """The functions defined directly in ``fn``'s body (not in nested ones)."""
    found: List[cst.FunctionDef] = []
    todo: List[cst.CSTNode] = [fn.body]
    while todo:
        node = todo.pop()
        kind = type(node)
        if kind is cst.FunctionDef:
            found.append(node)
            continue
        if kind is cst.ClassDef or kind is cst.Lambda or not isinstance(node, (cst.BaseSuite, cst.BaseCompoundStatement)):
            continue
        todo.extend(iter_children(node))
    return found


def _runs_a_sampling_loop(fn: cst.FunctionDef, loops: List[cst.For], trains: bool,
                          helpers: Callable[[], "_Helpers"]) -> bool:
    """A function other than ``forward``/``__call__`` that never trains (no
    ``.backward()``, no optimizer step) and holds a loop over a count (``for step in range(order, steps + 1):``,
    also through ``reversed``/``enumerate``/``tqdm``, or over time steps) that
    calls a model every iteration (a call named like one), not a module picked by the counter
    (``self.blocks[i](x)``, a forward over its layers): a sampler or solver,
    many model evaluations per call.  Its code outside that loop runs once per
    pass, however often the function is called.

    ``loops`` and ``trains``: its own ``for`` statements and whether it calls
    ``.backward()`` or steps an optimizer, from the frequency model's walk."""
    if fn.name.value in ("forward", "__call__") or trains:
        return False  # a module's decoding loop is part of its training step (teacher forcing)
    counted = [loop for loop in loops if _counts_steps(loop) and not _indexes_modules(loop)]
    if not counted:
        return False
    named = helpers()
    return any(_calls_a_model(loop, named) for loop in counted)


def _calls_a_model(loop: cst.CSTNode, helpers: Collection[str] = frozenset()) -> bool:
    """A call in the loop's body named like a model (``self.model_fn(x, t)``,
    ``self.unet(x, t)``, ``denoiser(x)``), not one that builds a module; or
    of one of ``helpers`` (``heun_step(x, ...)``, ``self.solver_update(...)``:
    written as called, see ``FrequencyModel._model_helpers``)."""
    return _calls_model_in(loop.body, helpers)


def _calls_model_in(root: cst.CSTNode, helpers: Collection[str] = frozenset()) -> bool:
    """:func:`_calls_a_model` for the calls under ``root`` (a function's body, one call)."""
    for n in _walk_shallow(root):
        if type(n) is not cst.Call:
            continue
        func = n.func
        if _names_a_model_run(last_name(func) or "", _MORE_MODEL_WORDS):
            return True
        if helpers and (type(func) is cst.Name and func.value in helpers
                        or _self_method(func) is not None and "self." + _self_method(func) in helpers):
            return True
    return False


class _Helpers:
    """The callees of a function that run a model (``FrequencyModel._model_helpers``),
    asked name by name as written (``heun_step``, ``self.update``) and judged
    on first asking: a search of the whole class for every function would
    cost more than the few names its loops call."""

    def __init__(self, model: "FrequencyModel", fn: cst.FunctionDef, cls: Optional[cst.ClassDef]) -> None:
        self._model, self._fn, self._cls = model, fn, cls
        self._known: Dict[str, bool] = {}
        self._nested: Optional[Dict[str, cst.FunctionDef]] = None

    def __bool__(self) -> bool:
        return True

    def __contains__(self, written: str) -> bool:
        found = self._known.get(written)
        if found is None:
            if written.startswith("self."):
                name = written[5:]
                found = self._cls is not None and name != self._fn.name.value and self._model._runs_model_method(
                    self._cls, name)
            else:
                if self._nested is None:
                    self._nested = {f.name.value: f for f in _nested_functions(self._fn)}
                nested = self._nested.get(written)
                found = nested is not None and _calls_model_in(nested.body)
            self._known[written] = found
        return found


def _self_method(func: cst.BaseExpression) -> Optional[str]:
    """``m`` for ``self.m``, else None."""
    if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
        return func.attr.value
    return None


def _names_a_model_run(name: str, more: Tuple[str, ...] = ()) -> bool:
    """A callee named like a model (``model_fn``, ``self.net``, ``unet``; or
    with one of the words ``more``); not a class (``Qwen2DecoderLayer(config,
    i)`` builds a module) nor a getter or builder (``get_module(model, name)``
    finds one)."""
    return not name[:1].isupper() and not _GETS.match(name) and any(
        word in name.lower() for word in (*MODEL_WORDS, *more))


# ... also in an evaluation pass that re-ranks: BLIP's runs `self.text_backbone(...)`,
# `self.multimodal_backbone.bert(...)` and `self.multimodal_head(...)` for each image.
_MORE_MODEL_WORDS = ("backbone", "bert", "head")


# Calls that go over a count's values in some order (`reversed(range(n))`).
_COUNT_WRAPPERS = frozenset({"enumerate", "reversed", "tqdm", "list", "track", "track_iter_progress",
                             "track_on_main_process"})  # (rich's and MMEngine's progress bars)


def _counts_steps(loop: cst.For) -> bool:
    iterable = unwrap_iterable(loop.iter, _COUNT_WRAPPERS)
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range":
        return True
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "zip" and (
            iterable.args and all(
                type(a.value) is cst.Call and type(a.value.func) is cst.Name and a.value.func.value == "reversed"
                and not a.star for a in iterable.args)):
        return True  # DDIM's `for i, j in zip(reversed(seq), reversed(seq_next)):`, the time steps backwards
    return _names_contain([loop.iter], _SAMPLING_WORDS)


def _indexes_modules(loop: cst.For) -> bool:
    """A call of something subscripted by the loop's counter (``self.layers[i](x)``)."""
    counters = target_names(loop.target)
    return any(
        isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)
        and any(isinstance(e.slice, cst.Index) and mentions_name(e.slice.value, counters) for e in node.func.slice)
        for node in _walk_shallow(loop.body)
    )


def _backward_directly(body: cst.CSTNode) -> bool:
    """Whether a loop body calls ``.backward()`` itself, outside inner loops."""
    todo: List[cst.CSTNode] = [body]
    while todo:
        node = todo.pop()
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda) or (node is not body and type(node) in _LOOPS):
            continue
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward":
            return True
        todo.extend(iter_children(node))
    return False


def _over_data(loop: cst.CSTNode) -> bool:
    """A ``for`` over a loader, a dataset, batches or steps (its iterable or
    variable says so), or a ``while`` whose test counts steps or iterations."""
    headers = [loop.iter, loop.target] if isinstance(loop, cst.For) else [loop.test]
    return _names_contain(headers, _DATA_WORDS)


def in_benchmark_loop(ctx: Context) -> bool:
    """Whether the node being visited runs in a benchmark: a loop around it,
    not over data (its header names no loader, dataset, batch, image...), that
    synchronizes the device and reads a clock in its own body and runs no
    training step (EAGLE's tuning of its draft length on load: five lengths,
    twenty timed forward passes each).  Its work is the measurement and its
    inputs, not a training or inference step."""
    could = ctx.shared.get("may_benchmark")
    if could is None:  # (a cheap test first: most modules never synchronize)
        source = ctx.source
        could = ctx.shared["may_benchmark"] = (
            "synchroniz" in source or "time_sync" in source or "elapsed_time" in source)
    if not could:
        return False
    cache = ctx.shared.setdefault("loop_facts", {})
    for loop in ctx.enclosing_loops():
        if not isinstance(loop, (cst.For, cst.While)) or _names_contain(
                [loop.iter, loop.target] if isinstance(loop, cst.For) else [loop.test], _BENCHMARKED_DATA_WORDS):
            continue  # an evaluation that times its batches is still an evaluation (YOLO's test loop)
        facts = loop_facts(ctx, loop, cache)
        if facts.synchronizes and facts.reads_clock and not facts.optimizes:
            return True
    return False


# What a timed loop goes over when it is an evaluation, not a benchmark.
_BENCHMARKED_DATA_WORDS = ("loader", "dataset", "batch", "data", "sample", "image", "img", "frame", "video", "episode")


def _names_contain(roots: List[cst.CSTNode], words: Tuple[str, ...]) -> bool:
    """Whether a name or attribute under ``roots`` contains one of ``words`` (lower case)."""
    for node in _walk_shallow(*roots):
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = (node.value if isinstance(node, cst.Name) else node.attr.value).lower()
            if any(word in name for word in words):
                return True
    return False


def _steps(loop: object) -> bool:
    """Whether a loop looks like a training, evaluation or inference loop: it goes
    over data (a loader, a dataset, batches, steps, iterations, episodes), or
    its body runs a model, a backward pass, an optimizer step or a generation."""
    if isinstance(loop, cst.For):
        headers: List[cst.CSTNode] = [loop.iter, loop.target]
        body: List[cst.CSTNode] = [loop.body]
    elif isinstance(loop, cst.While):
        headers, body = [loop.test], [loop.body]
    elif isinstance(loop, cst.DictComp):
        headers, body = [loop.for_in], [loop.key, loop.value]
    elif isinstance(loop, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
        headers, body = [loop.for_in], [loop.elt]
    else:
        return True
    if _names_contain(headers, _STEP_WORDS):
        return True
    for node in _walk_shallow(*body):
        if isinstance(node, cst.Call):
            name = last_name(node.func) or ""
            if name in _STEP_CALLS or _names_a_model_run(name):
                return True
    return False


def _over_loader(loop: object) -> bool:
    """Whether a loop's header names a loader or a dataset."""
    if isinstance(loop, cst.For):
        return _names_contain([loop.iter], ("loader", "dataset"))
    if isinstance(loop, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        return _names_contain([loop.for_in.iter], ("loader", "dataset"))
    return isinstance(loop, cst.While)


def _walk_shallow(*roots: cst.CSTNode):
    """The nodes under ``roots``, not entering function or class definitions."""
    todo = list(roots)
    while todo:
        node = todo.pop()
        if type(node) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            continue
        yield node
        todo.extend(iter_children(node))


def _few_values(loop: object) -> bool:
    """A loop over a few literal values, a mapping, a model's parameters, or
    a few names (:func:`_over_names`)."""
    if isinstance(loop, cst.For):
        if _over_names(loop) or breaks_after_few(loop):
            return True
        iterable = loop.iter
    elif isinstance(loop, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
        iterable = loop.for_in.iter
    else:
        return False
    if isinstance(iterable, (cst.List, cst.Tuple, cst.Set)):
        return True
    # (`enumerate(sorted(losses.keys()))`; `zip(a, b)` goes over its first)
    return _few_values_expression(unwrap_iterable(iterable, _ITERATION_WRAPPERS))


def _few_count(loop: object) -> bool:
    """A loop over a literal count of a few (``for sample in range(5):``), or
    over the machine's GPUs (``for g in gpus:``, ``for i in
    range(torch.cuda.device_count()):``): a handful of iterations."""
    clauses = loop_clauses(loop) if isinstance(loop, cst.CSTNode) else []
    if not clauses:
        return False
    iterable = unwrap_iterable(clauses[0].iter, _ITERATION_WRAPPERS)
    return few_range(iterable) or _over_devices(iterable)


# Names of the machine's devices: `gpus`, `gpu_ids`, `device_ids`, `devices`,
# `args.gpus`; and their counts in `range(...)`: `num_gpus`, `n_gpu`, `ngpus`,
# `world_size` is not one (a process count can be large).
_DEVICE_LIST = re.compile(r"^(?:gpus|gpu_ids|gpu_list|device_ids|devices|cuda_devices)$")
_DEVICE_COUNT = re.compile(r"^(?:num_gpus|n_gpus?|ngpus?|gpu_count|num_devices|n_devices|device_count)$")


def _over_devices(iterable: cst.BaseExpression) -> bool:
    name = last_name(iterable) if isinstance(iterable, (cst.Name, cst.Attribute)) else None
    if name is not None:
        return bool(_DEVICE_LIST.match(name))
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range" \
            and len(iterable.args) == 1:
        count = iterable.args[0].value
        if isinstance(count, cst.Call):
            return last_name(count.func) == "device_count"
        counted = last_name(count) if isinstance(count, (cst.Name, cst.Attribute)) else None
        return counted is not None and bool(_DEVICE_COUNT.match(counted))
    return False


def _bound_to_displays(fn: cst.FunctionDef, name: str) -> bool:
    """Whether every binding of ``name`` in ``fn`` assigns a tuple or list
    display, or such a display joined with ``+`` to the name itself."""
    found = False
    for statement, _ in _bindings(fn.body, name, None, None):
        if not (
            isinstance(statement, cst.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0].target, cst.Name)  # not `a, name = 0, tqdm(loader)`
            and _display_sum(statement.value, name)
        ):
            return False
        found = True
    return found


def _display_sum(expr: cst.BaseExpression, name: str) -> bool:
    if isinstance(expr, (cst.Tuple, cst.List)):
        return True
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return all(_display_sum(side, name) or (isinstance(side, cst.Name) and side.value == name)
                   for side in (expr.left, expr.right))
    return False


_KEY_TARGET = re.compile(r"^(k|key|name|\w+_(key|name))$")


def _over_names(loop: cst.For) -> bool:
    """``for k in batch2model_input: if k == "image_only_indicator": ...``: a
    loop whose target, named like a key (``k``, ``key``, ``name``,
    ``*_key``, ``*_name``), its body compares with a string literal (``==``,
    ``!=``, ``in ["crossattn", "concat"]``) goes over a few named entries,
    not over data."""
    target = loop.target
    if not isinstance(target, cst.Name) or not _KEY_TARGET.match(target.value):
        return False
    for node in _walk_shallow(loop.body):
        if type(node) is not cst.Comparison or type(node.left) is not cst.Name or node.left.value != target.value:
            continue
        for part in node.comparisons:
            other = part.comparator
            if isinstance(part.operator, (cst.Equal, cst.NotEqual)) and isinstance(other, cst.SimpleString):
                return True
            if isinstance(part.operator, (cst.In, cst.NotIn)) and isinstance(other, (cst.List, cst.Tuple, cst.Set)) \
                    and other.elements and all(isinstance(e.value, cst.SimpleString) for e in other.elements):
                return True
    return False


def _few_values_expression(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        method = expr.func.attr.value
        if method in ("items", "keys", "values"):
            # a mapping of settings or metrics is short; one of parameters or gradients is not
            return not _names_contain([expr.func.value], _WEIGHT_WORDS)
        return method in _PARAMETER_WALKS
    return False


_WEIGHT_WORDS = ("param", "grad", "weight", "buffer")
_ITERATION_WRAPPERS = frozenset({"enumerate", "zip", "sorted", "reversed", "list", "tuple"})


def _function_reference(expr: cst.BaseExpression) -> Optional[Tuple[str, bool]]:
    """``f`` -> ("f", False); ``self.f`` -> ("f", True)."""
    if isinstance(expr, cst.Name):
        return expr.value, False
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value, True
    return None


def model_for(ctx: Context) -> FrequencyModel:
    """The file's model, built on the first question."""
    model = ctx.shared.get("frequency")
    if model is None:
        assert ctx.module is not None
        demonstrated = (lambda cls: demonstrated_once(ctx, cls)) if ctx.path.endswith(".ipynb") else None
        model = ctx.shared["frequency"] = FrequencyModel(
            ctx.module, ctx.semantic.definitions, ctx.project.get("frequency"),
            ctx.shared.setdefault("periodic_flags", {}), demonstrated, ctx.source,
        )
    return model


# Modules whose code runs to export or convert a model, not to train or serve it:
# a directory or file named for export (`export.py`, `modules/_export/`,
# `exporters/`), or a conversion script (`convert_*.py`, `*_to_onnx.py`).
# Their loops run once, at trace time.  (Not `onnx*.py` or `tensorrt*.py`:
# those may run inference with the exported model, every step.)
_EXPORT_PART = re.compile(r"^_?(export|exporters?|exporting|conversion|\w+_conversion)$", re.IGNORECASE)
_EXPORT_FILE = re.compile(
    r"^(_?export(_\w+)?|\w*_export|convert(_\w+)?|\w*_to_(onnx|tensorrt|trt|coreml|tflite))\.py$",
    re.IGNORECASE,
)


# A benchmark script or directory (`bench.py`, `benchmark_inference.py`,
# `speed_bench.py`, `measure_vram.py`, `benchmarks/`): its loops are the measurement, run a fixed
# number of times on purpose; what they do per iteration is what is measured.
_BENCHMARK_PART = re.compile(r"^(bench|benchmarks?|benchmarking)$", re.IGNORECASE)
_BENCHMARK_FILE = re.compile(r"^(bench(mark)?(s|ing)?(_\w+)?|\w+_bench(mark)?s?|measure_\w+)\.py$", re.IGNORECASE)


def runs_once_by_path(path: str) -> bool:
    """Code in test files (a test runs its inputs once), in export or
    conversion modules and in benchmark scripts (their loops are the
    measurement, not a training or serving step) counts as running once,
    whatever its loops say."""
    if is_test_path(path):
        return True
    parts = PurePath(path.replace("\\", "/")).parts
    name = parts[-1] if parts else ""
    if _EXPORT_FILE.match(name) or _BENCHMARK_FILE.match(name):
        return True
    return any(_EXPORT_PART.match(part) or _BENCHMARK_PART.match(part) for part in parts[:-1])


def frequency_here(ctx: Context, skip: frozenset = frozenset()) -> Frequency:
    """How often the node being visited runs (see the module docstring; ``skip``:
    loops, by id, not to count)."""
    once = ctx.shared.get("frequency-by-path")
    if once is None:
        once = ctx.shared["frequency-by-path"] = runs_once_by_path(ctx.path)
    if once:
        return Frequency(ONCE)
    return model_for(ctx).here(ctx, skip)


_DEBUG_WORD = re.compile(r"(?:^|_)debug(?:$|_)", re.IGNORECASE)


def under_debug_switch(ctx: Context) -> bool:
    """Whether the node being visited is in the body of an ``if`` that asks
    for a debug mode (``if args.debug_mode:``, ``if DEBUG:``, ``if self.debug
    and step % 10 == 0:``, a detailed verbosity level: ``if verbose > 1:``;
    not ``if not args.debug:`` or its ``else``): the
    prints and checks there run when the user debugs, not in the run whose
    steps the rules speak of."""
    return _in_body_of_if(ctx, _names_debug)


def under_empty_case(ctx: Context) -> bool:
    """Whether the node being visited is in the body of an ``if`` that handles
    an empty input (``if approx_scores.shape[0] == 0:``, ``if len(boxes) ==
    0:``, ``if x.numel() == 0:``, ``if not len(pids):``): an edge case that
    the steps rarely take."""
    return _in_body_of_if(ctx, _tests_empty)


def under_option_off_by_default(ctx: Context) -> bool:
    """Whether the node being visited is in the body of an ``if`` on an option
    the code itself turns off unless asked (``block_trigrams =
    opt.get("block_trigrams", 0)`` ... ``if block_trigrams and t >= 3:``;
    ``getattr(cfg, "use_ema", False)``, also written in the test; a parameter
    named for a diagnostic view whose default is ``False`` and that no call of
    the module passes as ``True``: ``def eval_batch(..., visualize=False)`` ...
    ``if visualize:``):
    the steps take that branch only in the runs that ask for it.  A default of ``None``
    does not count (an optional input: ``past = kwargs.get("past", None)``)."""
    return _in_body_of_if(ctx, lambda test: _option_off_by_default(ctx, test))


def _option_off_by_default(ctx: Context, test: cst.BaseExpression) -> bool:
    if type(test) is cst.Name:
        bindings = ctx.semantic.bindings(test.value, ctx.location())
        if len(bindings) == 1 and bindings[0].kind == "param":
            return _parameter_off(ctx, test.value)
        return bool(bindings) and all(b.kind == "value" and _reads_option_off(b.value) for b in bindings)
    return _reads_option_off(test)


# A parameter that asks for pictures of the work (`visualize=False`, `vis`,
# `plot`, `show`): a diagnostic view, like a debug switch.
_VIEW_PARAMETER = re.compile(r"(?:^|_)(?:vis|visuali[sz]e|visuali[sz]ation|plot|show)(?:$|_)", re.IGNORECASE)


def _parameter_off(ctx: Context, name: str) -> bool:
    """A parameter of the enclosing function named for a diagnostic view
    (``_VIEW_PARAMETER``) whose default is ``False`` and that no call in the
    module sets to ``True`` by keyword (``def eval_batch(..., visualize: bool
    = False)`` ... ``if visualize:``).  Not any parameter off by default: a
    feature switch (``include_miscellaneous_atoms=False``) is wired to the
    configuration by callers in other modules, and its runs are steps too."""
    if not _VIEW_PARAMETER.search(name):
        return False
    fn = next((n for n in reversed(ctx.stack) if type(n) is cst.FunctionDef), None)
    if fn is None:
        return False
    params = fn.params
    param = next((p for p in (*params.params, *params.kwonly_params) if p.name.value == name), None)
    if param is None or type(param.default) is not cst.Name or param.default.value != "False":
        return False
    turned_on = ctx.shared.get("options-turned-on")
    if turned_on is None:
        turned_on = ctx.shared["options-turned-on"] = frozenset(
            a.keyword.value for n in walk_nodes(ctx.module) if type(n) is cst.Call for a in n.args
            if a.keyword is not None and type(a.value) is cst.Name and a.value.value == "True")
    return name not in turned_on


def _reads_option_off(expr) -> bool:
    """``x.get("name", 0)``, ``getattr(x, "name", False)``."""
    if type(expr) is not cst.Call or len(expr.args) < 2 or any(a.keyword is not None or a.star for a in expr.args):
        return False
    func = expr.func
    if type(func) is cst.Attribute and func.attr.value == "get" and len(expr.args) == 2:
        key, default = expr.args[0].value, expr.args[1].value
    elif type(func) is cst.Name and func.value == "getattr" and len(expr.args) == 3:
        key, default = expr.args[1].value, expr.args[2].value
    else:
        return False
    off = type(default) is cst.Name and default.value == "False" or type(default) is cst.Integer and default.value == "0"
    return off and type(key) is cst.SimpleString


def in_failure_handler(ctx: Context) -> bool:
    """Whether the node being visited is in an ``except`` block that ends by
    raising (``except Exception: print(...); img = torch.zeros(...).cuda();
    raise``): it runs when something has failed, and the run stops or the
    error goes on; not at the steps."""
    for node in reversed(ctx.stack):
        kind = type(node)
        if kind is cst.ExceptHandler:
            last = node.body.body[-1] if isinstance(node.body, cst.IndentedBlock) and node.body.body else None
            return type(last) is cst.SimpleStatementLine and any(type(small) is cst.Raise for small in last.body)
        if kind in (cst.FunctionDef, cst.Lambda, cst.ClassDef):
            return False
    return False


def cli_options_off(module: cst.Module) -> frozenset:
    """The destinations of the module's command-line options that are off
    unless the user gives them: ``parser.add_argument("--scale_weight_norms",
    type=float, default=None)``, ``action="store_true"``, a default of
    ``False`` or ``0`` (not a positional or required argument, not
    ``store_false``)."""
    found = set()
    for node in walk_nodes(module):
        if type(node) is not cst.Call or type(node.func) is not cst.Attribute or node.func.attr.value != "add_argument":
            continue
        flags = [string_value(a.value) for a in node.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        if not flags or not all(f and f.startswith("-") for f in flags):
            continue  # a positional argument (or flags the rule cannot read)
        if "required" in keywords and not (type(keywords["required"]) is cst.Name and keywords["required"].value == "False"):
            continue
        action = string_value(keywords["action"]) if "action" in keywords else None
        if "default" in keywords:
            default = keywords["default"]
            off = type(default) is cst.Name and default.value in ("None", "False") or literal_number(default) == 0
        else:
            off = action in (None, "store_true", "store", "count", "append")
        if not off:
            continue
        dest = string_value(keywords["dest"]) if "dest" in keywords else None
        if dest is None:
            longs = [f for f in flags if f.startswith("--")]
            dest = (longs[0] if longs else flags[0]).lstrip("-").replace("-", "_")
        found.add(dest)
    return frozenset(found)


def _reads_cli_option_off(test: cst.BaseExpression, off: frozenset) -> bool:
    """``args.x``, ``args.x is not None``, ``args.x > 0``, ``args.x != 0`` for
    an option ``x`` in ``off`` (``cli_options_off``)."""
    if type(test) is cst.Comparison:
        if len(test.comparisons) != 1:
            return False
        operator, right = type(test.comparisons[0].operator), test.comparisons[0].comparator
        if not (operator is cst.IsNot and type(right) is cst.Name and right.value == "None"
                or operator in (cst.GreaterThan, cst.NotEqual) and literal_number(right) == 0):
            return False
        test = test.left
    return type(test) is cst.Attribute and type(test.value) is cst.Name and test.attr.value in off


def _in_body_of_if(ctx: Context, asks) -> bool:
    """Whether the node being visited is in the body of an ``if`` one of whose
    ``and`` operands ``asks`` accepts."""
    stack = ctx.stack
    for i, node in enumerate(stack[:-1]):
        if type(node) is cst.If and stack[i + 1] is node.body and any(asks(t) for t in _and_operands(node.test)):
            return True
    return False


def _tests_empty(test: cst.BaseExpression) -> bool:
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _counts_items(test.expression)
    if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.comparisons[0].operator) is cst.Equal:
        zero = test.comparisons[0].comparator
        return type(zero) is cst.Integer and zero.value == "0" and _counts_items(test.left)
    return False


def _counts_items(expr: cst.BaseExpression) -> bool:
    """``len(x)``, ``x.numel()``, ``x.nelement()``, ``x.size(0)``, ``x.shape[0]``."""
    if type(expr) is cst.Call:
        func = expr.func
        if type(func) is cst.Name:
            return func.value == "len" and len(expr.args) == 1
        if type(func) is cst.Attribute:
            name = func.attr.value
            return name in ("numel", "nelement") and not expr.args or (
                name == "size" and len(expr.args) == 1 and type(expr.args[0].value) is cst.Integer
                and expr.args[0].value.value == "0")
    if type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":
        index = expr.slice[0].slice if len(expr.slice) == 1 else None
        return type(index) is cst.Index and type(index.value) is cst.Integer and index.value.value == "0"
    return False


def _and_operands(test: cst.BaseExpression) -> List[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _and_operands(test.left) + _and_operands(test.right)
    return [test]


def _names_debug(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _detailed_verbosity(test)
    name = last_name(test)
    return name is not None and _DEBUG_WORD.search(name) is not None


_VERBOSE_WORD = re.compile(r"(?:^|_)verbos(?:e|ity)(?:$|_)", re.IGNORECASE)


def _detailed_verbosity(test: cst.Comparison) -> bool:
    """``if verbose > 1:``, ``if self.verbosity >= 2:``: a level of detail
    above the usual one, a debugging aid (a plain ``if verbose:`` is not:
    libraries often print their progress by default)."""
    comparison = test.comparisons[0]
    level = comparison.comparator
    if not isinstance(level, cst.Integer):
        return False
    bound = int(level.evaluated_value)
    if not (isinstance(comparison.operator, cst.GreaterThan) and bound >= 1
            or isinstance(comparison.operator, cst.GreaterThanEqual) and bound >= 2):
        return False
    name = last_name(test.left)
    return name is not None and _VERBOSE_WORD.search(name) is not None


def per_step_here(ctx: Context, skip: frozenset = frozenset()) -> Optional[Frequency]:
    """The frequency of the node being visited when it runs every step, else
    None.  When it is unknown only because the module does not show who calls
    its function, the function is noted for the project index
    (``ctx.pending``): if another module of the run calls it every step, the
    file is checked again with that fact (see docs/precision.md)."""
    if under_debug_switch(ctx):
        return None  # `if args.debug_mode:` diagnostics the user turns on, not the run's steps
    if under_empty_case(ctx):
        return None  # `if boxes.shape[0] == 0:` an empty input, an edge case the steps rarely take
    if under_option_off_by_default(ctx):
        return None  # `if block_trigrams:` with `opt.get("block_trigrams", 0)`: only the runs that ask
    if in_benchmark_loop(ctx):
        return None  # a timed loop that trains nothing: the measurement and its inputs
    if in_synthetic_self_test(ctx):
        return None  # a library module's `__main__` self-test: a few steps on random inputs
    if in_failure_handler(ctx):
        return None  # `except ...: ... raise`: runs when something has failed, not at the steps
    frequency = frequency_here(ctx, skip)
    fn = frequency.function
    if frequency.per_step:
        if fn is not None and model_for(ctx).functions[fn].level == UNKNOWN and frequency.via_text is None:
            # Per step only because a loop of a function nobody in the module
            # calls (or only functions nobody calls) counts as a step loop: its
            # callers elsewhere may run it once.
            _note(ctx, fn)
        return frequency
    if fn is not None and (frequency.level == UNKNOWN or model_for(ctx).only_by_role(fn)):
        # Unknown, or "once" only because of its name (`make_mask`, `log_*`):
        # a caller in another module may run it every step.
        _note(ctx, fn)
    return None


def _note(ctx: Context, fn: cst.FunctionDef) -> None:
    """Note ``fn``, and the functions of unknown frequency that call it in the
    module, for the project index (``ctx.pending``)."""
    model = model_for(ctx)
    for function in (fn, *model.unknown_callers(fn)):
        name = model.qualified_name(function)
        if name is not None:
            ctx.pending.add(name)
