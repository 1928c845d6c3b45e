"""Facts across modules: who calls a function of another module, and how often.

The engine's project index (``torchlint/project.py``) knows no rule and no
torch; it asks this module one question: in this file, which calls reach the
function ``qualname`` defined in module ``target`` (a dotted path such as
``util.misc``), and how often does each call run?

A call reaches the function when its callee resolves, through the file's
imports (absolute and relative, at module or function level), to that module
and name:

* ``f(...)`` / ``mod.f(...)`` for a function ``f``;
* ``Class(...)`` is not a call of a method; ``obj.m(...)`` is a call of
  ``Class.m`` when ``obj`` is visibly an instance of ``Class``: a name whose
  binding that reaches the call is ``Class(...)``, ``self.attr`` assigned
  ``Class(...)`` in the class's methods, or a name bound to the result of a
  method of this module whose every ``return`` is ``Class(...)``
  (``posterior = self.encode(x)``; ``posterior.sample()``).

Receivers of unknown type are not guessed (no "every method named ``m``"):
precision first.  The one exception is TL302's question (GRADS: does every
call run without gradients, does one feed a training step?): there
``self.policy.predict_values(...)`` with ``self.policy`` of unknown class
counts as a call of ``ActorCriticPolicy.predict_values``, in any module of the
run that calls a method of that name (``network.predict(x)`` in a helper that
is handed the algorithm) while at most a few do (``_project_text.narrow``).  A wrong guess can only keep the
finding (a call with gradients on) or drop it where every call of that name
runs without gradients anyway.  How often a call runs is the caller module's own frequency
model (``rules/_frequency.py``), so a call in a training loop, in a
``forward`` or in a function its module calls every step counts as per step.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.nodes import iter_children, target_names, walk_nodes
from torchlint.parsing import parse_module
from torchlint.rules._frequency import FrequencyModel, non_finite_test, qualified_name, runs_once_by_path
from torchlint.rules._copies import batches_copied
from torchlint.rules._reach import never_run  # noqa: F401 - for the engine (UNREFERENCED)
from torchlint.rules._project_text import (  # noqa: F401 - DDP, HOST_ARGS: for caller_trait's users
    COPIED,
    DDP,
    FOLLOW,
    CallsSummary,
    GRADS,
    HOST_ARGS,
    NO_GRAD,
    PINNED,
    PINNED_CALL,
    TRAINS,
    WITH_GRAD,
    distinctive,
    module_parts,
    names_in_module,
    split_note,
    trait_key,
)
from torchlint.rules._sync import ends_with_exit
from torchlint.rules._training import TRAINING_NAME
from torchlint.semantic import Location, SemanticModel, location_of

# (level, line, qualified name of the calling function, whether every argument
# is visibly a host value: a number, `x.item()`, `float(...)`, a learning rate,
# the facts the call establishes for a noted loader: ("callee" | "caller", key))
Site = Tuple[int, int, Optional[str], bool, Tuple[Tuple[str, str], ...]]


class _Imports:
    """Local names bound by imports -> the dotted name they stand for,
    relative imports resolved against the file's own package."""

    def __init__(self, module: cst.Module, path: str, imports: Optional[Sequence[cst.CSTNode]] = None) -> None:
        """``imports``: the module's import statements in the order of a walk,
        when a walk has collected them already (else found here)."""
        self.package = module_parts(path)[:-1]
        self.names: Dict[str, str] = {}
        stars: List[str] = []  # `from utils import *` (not torch's): a bare name may come from there
        for node in _statements(module) if imports is None else imports:
            if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar):
                base = _dotted(node.module) if node.module is not None and not node.relative else None
                if base is not None and base.split(".", 1)[0] != "torch":
                    stars.append(base)
                continue
            if isinstance(node, cst.Import):
                for alias in node.names:
                    full = _dotted(alias.name)
                    if full is None:
                        continue
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        self.names[alias.asname.name.value] = full
                    else:
                        self.names.setdefault(full.split(".", 1)[0], full.split(".", 1)[0])
            elif isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
                base = _dotted(node.module) if node.module is not None else ""
                if base is None:
                    continue
                if node.relative:
                    up = len(node.relative) - 1
                    package = self.package[: len(self.package) - up] if up else self.package
                    base = ".".join([*package, *([base] if base else [])])
                for alias in node.names:
                    if not isinstance(alias.name, cst.Name):
                        continue
                    local = alias.name.value
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        local = alias.asname.name.value
                    self.names[local] = f"{base}.{alias.name.value}" if base else alias.name.value
        self.star = stars[0] if len(stars) == 1 else None
        self.bound: Set[str] = set()  # the module's own top-level definitions and assignments
        if self.star is not None:
            for stmt in module.body:
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                    self.bound.add(stmt.name.value)
                elif isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, cst.Assign):
                            self.bound.update(n for t in small.targets for n in target_names(t.target))

    def resolve(self, expr: cst.BaseExpression) -> Optional[str]:
        """``mod.sub.f`` -> the dotted name through the imports, or None.  A
        bare name that nothing in the module binds, in a module with one star
        import (``from utils import *``), is that module's."""
        parts: List[str] = []
        while isinstance(expr, cst.Attribute):
            parts.append(expr.attr.value)
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return None
        if expr.value not in self.names:
            if self.star is None or parts or expr.value in self.bound:
                return None
            return f"{self.star}.{expr.value}"
        return ".".join([self.names[expr.value], *reversed(parts)])


# Node types a statement never sits below: imports are statements, and no
# expression holds one (nor does a small statement hold another).
_NO_STATEMENT_BELOW: Dict[type, bool] = {}


def _statements(module: cst.Module):
    """The module's nodes that are or hold statements (every import, at any
    depth), in ``walk_nodes``' order, without descending into expressions: the
    import table needs only these, and the expressions are most of a tree."""
    todo: List[cst.CSTNode] = [module]
    pop, extend = todo.pop, todo.extend
    leaf = _NO_STATEMENT_BELOW
    while todo:
        node = pop()
        yield node
        kind = type(node)
        stop = leaf.get(kind)
        if stop is None:
            stop = leaf[kind] = issubclass(kind, (cst.BaseExpression, cst.BaseSmallStatement))
        if not stop:
            children = iter_children(node)
            children.reverse()
            extend(children)


def _dotted(expr) -> Optional[str]:
    parts: List[str] = []
    while isinstance(expr, cst.Attribute):
        parts.append(expr.attr.value)
        expr = expr.value
    if not isinstance(expr, cst.Name):
        return None
    parts.append(expr.value)
    return ".".join(reversed(parts))


class Finder:
    """One file's answers (parsed once, asked about several functions).

    Most files the textual test lets through call no function asked about
    (a method name such as ``update`` is common), so the frequency and
    semantic models are built only for a question that some call of the
    module may answer (``sites``)."""

    def __init__(self, path: str, module: cst.Module, external: Optional[Dict[str, Tuple[int, str]]] = None,
                 text: str = "") -> None:
        self.path = path
        self.text = text
        self.module = module
        self.external = external
        self.imports = _Imports(module, path)
        self.parents: Dict[int, cst.CSTNode] = {}

    @cached_property
    def frequency(self) -> FrequencyModel:
        return FrequencyModel(self.module, self.semantic.definitions, self.external, source=self.text or None)

    @cached_property
    def semantic(self) -> SemanticModel:
        return SemanticModel(self.module, self.text or None)

    def sites(self, target: Sequence[str], qualname: str, note: Optional[str] = None) -> List[Site]:
        cls_name, _, method = qualname.rpartition(".")
        # A call site reaches the function only through a callee written with
        # its name (``f(...)``, ``mod.f(...)``, ``obj.method(...)``); the
        # frequency model's sites are some of the module's calls, so when none
        # of the calls so named reaches it, no site does.
        untyped = note == GRADS or note is None and distinctive(method)
        if not any(self._reaches(call, target, qualname, cls_name, method, None, untyped)
                   for call in self._calls_named(method)):
            return []
        found: List[Site] = []
        for site in self.frequency.sites:
            call = site.call
            if not self._reaches(call, target, qualname, cls_name, method, site.caller, untyped):
                continue
            level = self.frequency._site_level(site.caller, site.loops)
            caller = None
            if site.caller is not None:
                info = self.frequency.functions.get(site.caller)
                caller = qualified_name(info) if info is not None else None
            if note == GRADS:
                facts: Tuple[Tuple[str, str], ...] = (("callee", trait_key(qualname, NO_GRAD)),)
                mode = self._grad_mode(call)
                if mode is None and site.caller is not None and self._reached_without_gradients(site.caller):
                    mode = False  # `evaluate` calls `self._valid_batch_loop()` under `no_grad`, which calls this
                if mode is not False:
                    facts = (("callee", trait_key(qualname, WITH_GRAD)),)
                    if site.caller is not None and _trains(site.caller):
                        facts += (("callee", trait_key(qualname, TRAINS)),)
                    elif mode is None and caller is not None and not self._called_here(site.caller):
                        # no grad mode here, in a function nothing in this module calls: its callers decide
                        facts += ((FOLLOW, trait_key(caller, GRADS)),)
                found.append((level, self._line(call), caller, False, facts))
            elif note is not None:
                found.append((level, self._line(call), caller, False, self._loader_facts(call, qualname, note)))
            else:
                host = self._host_args(call) or _waits_every_iteration(site.loops)
                found.append((level, self._line(call), caller, host, ()))
        return found

    def _loader_facts(self, call: cst.Call, qualname: str, note: str) -> Tuple[Tuple[str, str], ...]:
        """For a function noted as returning a loader: where this call's loader
        is iterated and its batches copied to a device, the function's file
        learns it (COPIED), and for a pinned loader this file learns that the
        callee, as written here, returns one (PINNED_CALL)."""
        stack = self._stack_of(call)
        if stack is None or not batches_copied(call, stack, self.semantic):
            return ()
        facts = [("callee", trait_key(qualname, COPIED))]
        if note == PINNED:
            facts.append(("caller", trait_key(cst.Module([]).code_for_node(call.func), PINNED_CALL)))
        return tuple(facts)

    def _grad_mode(self, call: cst.Call) -> Optional[bool]:
        """The innermost grad mode around ``call`` (a ``with`` item or a
        decorator of an enclosing function): False where it turns gradients
        off (``torch.no_grad()``, ``torch.inference_mode()``,
        ``torch.set_grad_enabled(False)``), True where it turns them on
        (``torch.enable_grad()``), None where there is none."""
        stack = self._stack_of(call)
        for node in reversed(stack or []):
            modes: List[Optional[bool]] = []
            if isinstance(node, cst.With):
                modes = [self._grad_enabled(item.item) for item in node.items]
            elif isinstance(node, cst.FunctionDef):
                modes = [self._grad_enabled(d.decorator) for d in node.decorators]
            chosen = [m for m in modes if m is not None]
            if chosen:
                return chosen[-1]
        return None

    def _reached_without_gradients(self, fn: cst.FunctionDef, depth: int = 0) -> bool:
        """Whether ``fn`` is called in this module, every such call runs
        without gradients (under ``no_grad`` there, or in a function of which
        the same holds, a few levels up), and the module's text names it
        nowhere else (a call on a receiver of unknown class, a callback)."""
        sites = self._calls_of(fn)
        if not sites or not self.text or depth > 2 or self._other_mentions(fn) > len(sites):
            return False
        for site in sites:
            mode = self._grad_mode(site.call)
            if mode is False:
                continue
            if mode is True or site.caller is None or not self._reached_without_gradients(site.caller, depth + 1):
                return False
        return True

    def _called_here(self, fn: cst.FunctionDef) -> bool:
        """Whether a call in this module (outside ``fn``) reaches ``fn``, or the
        module's text names it other than in the definitions of that name
        (a call on a receiver of unknown class, a callback, a comment)."""
        return bool(self._calls_of(fn)) or not self.text or self._other_mentions(fn) > 0

    def _calls_of(self, fn: cst.FunctionDef) -> list:
        """The module's call sites (outside ``fn``) that reach ``fn``."""
        return [site for site in self.frequency.sites if fn in site.callees and site.caller is not fn]

    def _other_mentions(self, fn: cst.FunctionDef) -> int:
        """How many times the module's text names ``fn`` other than in the
        definitions of that name (calls, callbacks, comments)."""
        name = fn.name.value
        return len(re.findall(r"\b%s\b" % re.escape(name), self.text)) - len(self.semantic.definitions(name))

    def _grad_enabled(self, expr: cst.BaseExpression) -> Optional[bool]:
        """False for a context or decorator that turns gradients off, True for
        one that turns them on, None for anything else."""
        func = expr.func if isinstance(expr, cst.Call) else expr
        dotted = self.imports.resolve(func)
        if dotted is None:
            return None
        last = dotted.rsplit(".", 1)[-1]
        if not dotted.startswith("torch.") or last not in _GRAD_MODES:
            return None
        if last == "set_grad_enabled":
            args = expr.args if isinstance(expr, cst.Call) else ()
            if not args or not isinstance(args[0].value, cst.Name) or args[0].value.value not in ("True", "False"):
                return None
            return args[0].value.value == "True"
        return _GRAD_MODES[last]

    def _host_args(self, call: cst.Call) -> bool:
        """Whether every argument of ``call`` is visibly a host value (so a
        function that converts what it is given, `MetricLogger.update`, has
        nothing to wait for): see :meth:`_host_value`."""
        if not call.args or any(arg.star == "*" for arg in call.args):
            return False
        location = None
        for arg in call.args:
            if arg.star == "**":  # `**{key: value.item() for ...}`, `**{"loss0": loss.item()}`
                value = arg.value
                if isinstance(value, cst.DictComp) and _host_expr(value.value):
                    continue
                if isinstance(value, cst.Dict) and value.elements and all(
                        isinstance(e, cst.DictElement) and _host_expr(e.value) for e in value.elements):
                    continue
                return False
            if _host_expr(arg.value):
                continue
            if location is None:
                stack = self._stack_of(call)
                if stack is None:
                    return False
                location = location_of(stack)
            if not self._host_value(arg.value, location, set()):
                return False
        return True

    def _host_value(self, value: cst.BaseExpression, location, seen: set) -> bool:
        """Literals, ``x.item()``, ``float(...)``, ``len(...)``, clock reads
        (``time.time()``) and arithmetic of such values (``time.time() -
        model_time``), ``optimizer.param_groups[0]["lr"]``, ``group["lr"]`` in a loop over
        ``optimizer.param_groups``, ``max``/``min``/``abs`` of such values, or
        a name every reaching binding of which is one of those (``max_lr =
        max(max_lr, group["lr"])`` folds the name into itself)."""
        if _host_expr(value):
            return True
        if isinstance(value, cst.BinaryOperation):  # `time.time() - model_time`
            return self._host_value(value.left, location, seen) and self._host_value(value.right, location, seen)
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in _HOST_FOLDS:
            return bool(value.args) and not any(a.star for a in value.args) and all(
                self._host_value(a.value, location, seen) for a in value.args)
        root = value
        while isinstance(root, cst.Subscript):
            root = root.value
        if root is not value:  # `group["lr"]`
            return isinstance(root, cst.Name) and self._bound_to_param_groups(root.value, location)
        if not isinstance(value, cst.Name) or len(seen) > 8:
            return False
        if value.value in seen:
            return True  # the fold's own earlier value, judged by its other bindings
        bindings = self.semantic.reaching(value.value, location)
        inner = seen | {value.value}
        return bool(bindings) and all(
            b.kind == "value" and b.value is not None and self._host_value(b.value, b.location, inner)
            for b in bindings)

    def _bound_to_param_groups(self, name: str, location) -> bool:
        """Whether ``name`` is the target of a loop over ``....param_groups``."""
        bindings = self.semantic.reaching(name, location)
        return bool(bindings) and all(
            b.kind == "iter" and isinstance(b.value, cst.Attribute) and b.value.attr.value == "param_groups"
            for b in bindings)

    def _reaches(self, call: cst.Call, target, qualname, cls_name, method, caller, untyped=False) -> bool:
        """Whether ``call`` calls the function; ``untyped``: also a call of the
        method's name on a receiver of unknown class (TL302's question)."""
        func = call.func
        if not cls_name:  # a function
            dotted = self.imports.resolve(func)
            return dotted is not None and names_in_module(dotted, target, qualname)
        if not isinstance(func, cst.Attribute) or func.attr.value != method:
            return False
        classes = self._classes_of(func.value, call)
        if not classes:
            return untyped
        return any(names_in_module(dotted, target, cls_name) for dotted in classes)

    def _classes_of(self, expr: cst.BaseExpression, at_node: cst.CSTNode, depth: int = 0) -> List[str]:
        """The dotted names of the imported classes ``expr`` is visibly an instance of."""
        if depth > 3:
            return []
        if isinstance(expr, cst.Call):
            dotted = self.imports.resolve(expr.func)
            if dotted is not None:
                return [dotted]
            return self._returned_classes(expr, at_node, depth)
        stack = self._stack_of(at_node)
        if stack is None:
            return []
        at = location_of(stack)
        if isinstance(expr, cst.Name):
            found: List[str] = []
            for b in self.semantic.reaching(expr.value, at):
                if b.kind != "value" or not isinstance(b.value, cst.Call):
                    return []
                classes = self._classes_of(b.value, b.value, depth + 1)
                if not classes:
                    return []
                found.extend(classes)
            return found
        if (
            isinstance(expr, cst.Attribute)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == "self"
            and len(at.scopes) >= 2
            and isinstance(at.scopes[-2], cst.ClassDef)
        ):
            cls = at.scopes[-2]
            bindings = self.semantic.attribute_bindings(cls, Location(at.scopes[:-2], ())).get(expr.attr.value, [])
            found = []
            for b in bindings:
                if b.kind != "value" or not isinstance(b.value, cst.Call):
                    return []
                dotted = self.imports.resolve(b.value.func)
                if dotted is None:
                    return []
                found.append(dotted)
            return found
        return []

    def _returned_classes(self, call: cst.Call, at_node: cst.CSTNode, depth: int) -> List[str]:
        """``self.encode(x)`` / ``helper(x)`` of this module, every ``return`` of
        which is an instance of an imported class (built there, or a name bound
        to one)."""
        func = call.func
        candidates: List[cst.FunctionDef] = []
        if isinstance(func, cst.Name):
            candidates = [f for f in self.frequency.by_name.get(func.value, ())
                          if self.frequency.functions[f].cls is None]
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            stack = self._stack_of(at_node) or []
            cls = next((n for n in reversed(stack) if isinstance(n, cst.ClassDef)), None)
            candidates = [f for f in self.frequency.by_name.get(func.attr.value, ())
                          if cls is not None and self.frequency.functions[f].cls is cls]
        if len(candidates) != 1:
            return []
        values = self.semantic.returns(candidates[0])
        found: List[str] = []
        for value in values:
            classes = self._classes_of(value, value, depth + 1)
            if not classes:
                return []
            found.extend(classes)
        return found

    def _stack_of(self, node: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
        """The ancestors of ``node`` (module first), for the semantic model."""
        if not self.parents:
            # ``walk_nodes``' order, each node's children listed once.
            parents = self.parents
            todo: List[cst.CSTNode] = [self.module]
            while todo:
                parent = todo.pop()
                children = iter_children(parent)
                for child in children:
                    parents[id(child)] = parent
                children.reverse()
                todo.extend(children)
        chain = [node]
        while chain[-1] is not self.module:
            parent = self.parents.get(id(chain[-1]))
            if parent is None:
                return None
            chain.append(parent)
        chain.reverse()
        return chain

    def _calls_named(self, tail: str) -> List[cst.Call]:
        """The module's calls whose callee ends in ``tail``, in source order
        (one walk of the module, on the first question)."""
        if not hasattr(self, "_calls_by_tail"):
            calls: Dict[str, List[cst.Call]] = {}
            for n in walk_nodes(self.module):
                if isinstance(n, cst.Call):
                    calls.setdefault(_tail(n.func), []).append(n)
            self._calls_by_tail = calls
        return self._calls_by_tail.get(tail, [])

    def _line(self, call: cst.Call) -> int:
        """The call's line: found in the text when its callee is written once
        there (the common case, and no pass over the tree), else from positions."""
        code_for = cst.Module([]).code_for_node
        callee = code_for(call.func)
        text = self.text
        at = text.find(callee + "(")
        if at >= 0 and text.find(callee + "(", at + 1) < 0:
            return text.count("\n", 0, at) + 1
        # The whole call as written (LibCST keeps the source text): its n-th
        # occurrence in the text is the n-th such call in the tree, when the
        # counts agree (no copy in a comment or string).
        written = code_for(call)
        starts = []
        at = text.find(written)
        while at >= 0:
            starts.append(at)
            at = text.find(written, at + 1)
        same = [n for n in self._calls_named(_tail(call.func)) if n is call or code_for(n) == written] if starts else []
        if starts and len(same) == len(starts):
            return text.count("\n", 0, starts[[id(n) for n in same].index(id(call))]) + 1
        from torchlint.positions import Positions

        if not hasattr(self, "_positions"):
            self._positions = Positions(self.module, self.text)  # each call placed from its statement
        span = self._positions.get(call)
        return span[0][0] if span is not None else 1


# A function that trains: it backpropagates or steps an optimizer (or a grad
# scaler), or is named `forward`/`__call__`/`*train*`/`*loss*` (TRAINING_NAME,
# as TL302 judges its own module's callers).
_TRAINING_CALL = re.compile(r"\.backward\(|\b(optim\w*|scaler)\.step\(", re.IGNORECASE)


def _waits_every_iteration(loops) -> bool:
    """Whether the innermost loop around a call waits for the device every
    iteration by design, in its own body: it stops the run on a value it reads
    every iteration (``if not math.isfinite(loss_value): sys.exit(1)``, DETR's
    and MAE's training loop), or hands every batch's results to an evaluator
    (``coco_evaluator.update(res)``, also under ``if coco_evaluator is not
    None:`` or an opt-out flag negated, or in a loop over the evaluators: MDETR's
    ``if not args.no_detection: ... for evaluator in evaluator_list:
    evaluator.update(res)``), which converts them on the host.  A callee that
    converts what it is given there (``metric_logger.update(**loss_dict)``)
    adds no wait; the index counts such a site as one that passes host values."""
    loop = next((m for m in reversed(loops) if type(m) in (cst.For, cst.While)), None)
    body = getattr(loop, "body", None)
    if not isinstance(body, cst.IndentedBlock):
        return False
    statements = list(body.body)
    while statements:
        statement = statements.pop()
        if type(statement) is cst.If and (_tests_presence(statement.test) or _tests_setting(statement.test)) and isinstance(
                statement.body, cst.IndentedBlock):
            statements.extend(statement.body.body)  # `if coco_evaluator is not None:`, `if not args.no_detection:`
        elif type(statement) is cst.If:
            if non_finite_test(statement.test) and ends_with_exit(statement.body, leaving=(cst.Raise,)):
                return True
        elif (type(statement) is cst.SimpleStatementLine or (
                type(statement) is cst.For and "evaluator" in _tail(statement.iter).lower())) and any(
            type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "update"
            and "evaluator" in _tail(node.func.value).lower()
            for node in walk_nodes(statement)
        ):
            return True  # `for evaluator in evaluator_list:` (its branches too)
    return False


def _tests_presence(test: cst.BaseExpression) -> bool:
    """``x is not None``: a test of a setting, not of data."""
    return (type(test) is cst.Comparison and len(test.comparisons) == 1
            and type(test.comparisons[0].operator) is cst.IsNot
            and type(test.comparisons[0].comparator) is cst.Name and test.comparisons[0].comparator.value == "None")


def _tests_setting(test: cst.BaseExpression) -> bool:
    """``not args.no_detection``, ``not cfg.skip_eval``: an opt-out flag of the
    run negated, a branch that runs unless the user turns it off (``if
    args.verbose:`` may be off)."""
    if type(test) is not cst.UnaryOperation or type(test.operator) is not cst.Not:
        return False
    flag = _tail(test.expression)
    return type(test.expression) in (cst.Name, cst.Attribute) and flag.startswith(("no_", "skip_", "disable_"))


def _trains(function: cst.FunctionDef) -> bool:
    return bool(TRAINING_NAME.search(function.name.value)) or bool(
        _TRAINING_CALL.search(cst.Module([]).code_for_node(function.body))
    )


# Grad-mode contexts and decorators -> whether they leave gradients on.
_GRAD_MODES = {"no_grad": False, "inference_mode": False, "enable_grad": True, "set_grad_enabled": None}


def _tail(func: cst.BaseExpression) -> str:
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


_HOST_CALLS = frozenset({"float", "int", "len", "round", "bool", "str"})
_HOST_METHODS = frozenset({"item", "tolist"})
_HOST_FOLDS = frozenset({"max", "min", "abs"})  # of host values: a host value
_CLOCKS = frozenset({"time", "perf_counter", "monotonic", "process_time"})


def _host_expr(expr: cst.CSTNode) -> bool:
    """A value that is visibly on the host: a literal, ``x.item()``,
    ``float(...)``, ``len(...)``, a subscript of ``optimizer.param_groups``."""
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)):
        return True
    if isinstance(expr, cst.Name):
        return expr.value in ("True", "False", "None")
    if isinstance(expr, cst.UnaryOperation):
        return _host_expr(expr.expression)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name):
            return func.value in _HOST_CALLS
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "time":
            return func.attr.value in _CLOCKS and not expr.args  # `time.time()`: a clock read is a float
        return isinstance(func, cst.Attribute) and func.attr.value in _HOST_METHODS and not expr.args
    if isinstance(expr, cst.Subscript):
        root = expr.value
        while isinstance(root, cst.Subscript):
            root = root.value
        return isinstance(root, cst.Attribute) and root.attr.value == "param_groups"
    return False


def caller_trait(ctx, qualname: str, trait: str) -> Optional[str]:
    """Where (``path:line``) a caller with ``trait`` calls ``qualname``, as the
    project index found it for this file; None when it found none."""
    fact = ctx.project.get("frequency", {}).get(trait_key(qualname, trait))
    return fact[1] if fact else None


def called_elsewhere_for_training(ctx, qualname: Optional[str]) -> bool:
    """Whether the project index found a call of ``qualname`` in another
    module, with gradients on, in a function that trains (TRAINS): its result
    feeds a loss.  Asked after ``called_elsewhere_without_gradients``, which
    notes the question."""
    return qualname is not None and caller_trait(ctx, qualname, TRAINS) is not None


def called_elsewhere_with_gradients(ctx, qualname: Optional[str]) -> bool:
    """Whether the project index found a call of ``qualname`` in another
    module that runs with gradients on.  Asked after
    ``called_elsewhere_without_gradients``, which notes the question."""
    return qualname is not None and caller_trait(ctx, qualname, WITH_GRAD) is not None


def called_elsewhere_without_gradients(ctx, qualname: Optional[str]) -> bool:
    """Whether every call of ``qualname`` that the project index found in
    other modules runs without gradients (and it found at least one).  When
    the index has said nothing about it yet, the function is noted for it
    (``ctx.pending``) and the answer is no."""
    if qualname is None:
        return False
    without = caller_trait(ctx, qualname, NO_GRAD)
    with_grad = caller_trait(ctx, qualname, WITH_GRAD)
    if without is None and with_grad is None:
        ctx.pending.add(trait_key(qualname, GRADS))
        return False
    return with_grad is None


class CallCollector:
    """Collects a file's calls and imports during the first pass's walk (the
    engine adds it to the rules it walks with), for ``summary``."""

    walks = True

    def __init__(self) -> None:
        self.calls: List[cst.Call] = []
        self.imports: List[cst.CSTNode] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.append(node)

    def summary(self, module: cst.Module, path: str) -> CallsSummary:
        """What the file's calls can reach, as the index asks it
        (``_project_text.could_reach``): the dotted names that callees
        resolve to through the file's imports (a function reached, or the
        class of an instance whose method is called: ``Finder._classes_of``
        finds classes only as such callees), and the method names called."""
        imports = _Imports(module, path, self.imports)
        resolved = set()
        methods = set()
        for call in self.calls:
            func = call.func
            if type(func) is cst.Attribute:
                methods.add(func.attr.value)
            dotted = imports.resolve(func)
            if dotted is not None:
                resolved.add(dotted)
        return frozenset(resolved), frozenset(methods)


def finder(text: str, path: str, external: Optional[Dict[str, Tuple[int, str]]] = None) -> Optional[Finder]:
    """A file's finder (None for a test or export module, whose calls run once,
    or a file that does not parse); ``external``: what other modules established
    about how often its own functions run."""
    if runs_once_by_path(path):
        return None
    try:
        module = parse_module(text)
    except Exception:  # noqa: BLE001 - a file that does not parse calls nothing
        return None
    return Finder(path, module, external, text)


def call_sites(found: Finder, target_path: str, qualname: str) -> List[Site]:
    """The calls in ``found``'s file of ``qualname`` defined in the file
    ``target_path``: (how often each runs, its line, the calling function)."""
    qualname, note = split_note(qualname)
    target = module_parts(target_path)
    return found.sites(target, qualname, note) if target else []


