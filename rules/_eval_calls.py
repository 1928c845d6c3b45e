"""What TL302 learns about a function while it walks it, and the questions it
asks of its calls: which calls run a model, which ``self.name(...)`` calls
can reach a given class's method, and whether a one-batch sample runs rarely.

Kept apart from the rule so that the rule module holds only its policy."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.nodes import walk_nodes
from torchlint.rules._frequency import ONCE, PER_EPOCH, model_for
from torchlint.rules._helpers import has_parameters, is_docstring, last_name
from torchlint.rules._models import names_a_model
from torchlint.rules._training import GRAD_OFF, decorator_grad_mode, with_grad_modes
from torchlint.semantic import Location


class Frame:
    """One function being walked (``node`` None for module-level code)."""

    __slots__ = (
        "node", "name", "module_class", "method", "skip", "grad_off", "depth", "evals", "calls",
        "needs_grad", "torch_alias", "asserts", "nested", "has_params", "qualname", "one_batch", "batch_calls",
        "looped_model", "train_mode_at", "cls_name",
    )

    def __init__(self, node: Optional[cst.FunctionDef]) -> None:
        self.node = node
        self.name = node.name.value if node is not None else ""
        self.module_class = False  # a method of a class that looks like an nn.Module
        self.method = False
        self.skip = False  # never reported (decorators, name)
        self.grad_off = False  # the whole body runs without gradients
        self.depth = 0  # how many grad-disabling `with` blocks enclose the current node
        self.evals: set = set()
        # (callee key, method name or None, under no_grad, in a loop, call, its location outside loops)
        self.calls: List[Tuple[str, Optional[str], bool, bool, cst.Call, Optional[Location]]] = []
        self.needs_grad = False
        self.asserts = False
        self.nested = False  # defined inside another function
        self.has_params = node is not None and has_parameters(node.params)
        self.qualname: Optional[str] = None  # how other modules name it (`f`, `Class.m`); None when nested
        self.one_batch: set = set()  # names bound to a single batch: `imgs = next(iter(loader))`
        self.batch_calls: set = set()  # ids of calls in a loop over such a batch's items
        self.looped_model = False  # calls a model in a loop
        self.train_mode_at: Optional[int] = None  # len(calls) at its first `model.train()`
        self.cls_name: Optional[str] = None  # the class of a method
        # how the decorator spells torch: (`torch`, True) or (`no_grad`, False)
        self.torch_alias: Optional[Tuple[str, bool]] = None


class CallSites:
    """A module's call sites by callee name, ``(without gradients?, calling
    frame)``, with the ``self.name(...)`` ones marked and each class's bases,
    so that a method is asked only about the calls that can reach it."""

    def __init__(self) -> None:
        self.by_name: Dict[str, List[Tuple[bool, Frame]]] = {}
        self._self_calls: set = set()
        self._bases: Dict[str, List[str]] = {}
        self._modules: set = set()  # the module's classes that are models

    def add_class(self, node: cst.ClassDef, module: bool) -> bool:
        """Records a class and its bases; whether it is a model: ``module``
        (an ``nn.Module``-like base), or a subclass of a model class of this
        module (``class DurationGenerator(HiFiGANGenerator):``)."""
        name = node.name.value
        bases = [n for n in (last_name(a.value) for a in node.bases) if n]
        self._bases.setdefault(name, []).extend(bases)
        if module or any(base in self._modules for base in bases):
            self._modules.add(name)
            return True
        return False

    def add(self, callee: str, covered: bool, frame: Frame, on_self: bool) -> None:
        entry = (covered, frame)
        self.by_name.setdefault(callee, []).append(entry)
        if on_self:
            self._self_calls.add(id(entry))

    def of(self, frame: Frame) -> List[Tuple[bool, Frame]]:
        """The call sites by the function's name; for a method, a
        ``self.name(...)`` call counts only in its class, a base or a subclass
        of it (``self.predict(x)`` in another algorithm class calls that
        class's own ``predict``)."""
        sites = self.by_name.get(frame.name, [])
        if frame.cls_name is None:
            return sites
        related = self._lineage(frame.cls_name)
        return [e for e in sites if id(e) not in self._self_calls or e[1].cls_name in related]

    def from_outside(self, frame: Frame, seen: Optional[set] = None) -> bool:
        """Whether every call in the module that can reach ``frame`` comes from
        a method of a model class that nothing in the module calls, directly
        or through such methods (a vocoder's ``inference`` calling
        ``self.synthesis``, which calls ``self.duration_predictor.inference``):
        the grad mode of those calls is decided where that method is called,
        in another module.  True when there is no call at all."""
        seen = seen if seen is not None else set()
        seen.add(id(frame))
        return all(
            caller.module_class and (id(caller) in seen or self.from_outside(caller, seen))
            for _, caller in self.of(frame)
        )

    def _lineage(self, name: str) -> set:
        """The class, its bases and its subclasses, as far as this module defines them."""
        found = {name} | self._ancestors(name)
        found.update(cls for cls in self._bases if name in self._ancestors(cls))
        return found

    def _ancestors(self, name: str) -> set:
        seen: set = set()
        todo = [name]
        while todo:
            for base in self._bases.get(todo.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    todo.append(base)
        return seen


def runs_rarely(ctx, function: Optional[cst.FunctionDef], once: bool = False) -> bool:
    """Whether the function's callers run it once or every N steps (not per
    step, and known); with ``once``, only once (a demo at a module's top level)."""
    return function is not None and model_for(ctx).of_function(function).level in ((ONCE,) if once else (ONCE, PER_EPOCH))


# Methods of a model that set it up or move it rather than run it.
_SETUP_METHODS = re.compile(
    r"^_*(to|cuda|cpu|half|float|double|bfloat16|type|apply|eval|train|fuse|generate|share_memory"
    r"|requires_grad_|zero_grad|add_module|register_\w*|load\w*|save\w*|set_\w*|get_\w*_(config|params?)"
    r"|state_dict|parameters|named_\w*|modules|children|buffers|info|summary|compile)$"
)
# What reinforcement learning calls its network (`agent.get_action_and_value(obs)`).
_AGENTS = frozenset({"agent", "policy", "actor", "critic", "q_network", "qnetwork", "qf1", "qf2"})


def runs_evaluated(key: str, call: cst.Call, evaluated: set) -> bool:
    """``model.get_action(obs)`` after ``model.eval()``: a method of the model
    put in eval mode (named like a network, not an environment), given data
    (a positional argument that is not a literal), that is not one that sets
    the model up or moves it.  (Asked of calls in a loop of a function named
    like evaluation: an episode or data loop that runs the model through its
    own methods.)"""
    owner, _, method = key.rpartition(".")
    last = owner.rsplit(".", 1)[-1]
    if owner not in evaluated or not (names_a_model(last) or last.lower() in _AGENTS) or _SETUP_METHODS.match(method):
        return False  # (`env.eval()` then `env.step(action)`: an environment, not a model)
    return any(_is_data(a) for a in call.args)


def _is_data(arg: cst.Arg) -> bool:
    """A positional argument that is not a literal (a name other than
    ``True``/``False``/``None``, starred or not; any other expression, not starred)."""
    if arg.keyword is not None:
        return False
    if isinstance(arg.value, cst.Name):
        return arg.value.value not in ("True", "False", "None")
    return not arg.star and not isinstance(arg.value, (cst.SimpleString, cst.Integer, cst.Float))


def closure_under_no_grad(ctx, function: Optional[cst.FunctionDef]) -> bool:
    """Whether ``function`` is defined in the body of another function that
    disables gradients in a ``with`` block (airbench's ``infer``: the
    test-time-augmentation helpers ``infer_basic``/``infer_mirror`` are picked
    from a list and called under its ``torch.no_grad()``): a closure of that
    function runs where it disables them."""
    module = ctx.module
    if function is None or module is None:
        return False
    for outer in walk_nodes(module):
        if (isinstance(outer, cst.FunctionDef) and isinstance(outer.body, cst.IndentedBlock)
                and any(stmt is function for stmt in outer.body.body)):
            return any(isinstance(n, cst.With) and with_grad_modes(n, ctx)[1] for n in walk_nodes(outer.body))
    return False


_DEF = re.compile(r"\bdef\s+(\w+)")


def _defined_functions(ctx) -> frozenset:
    """The names after ``def`` in the module's text (a superset of its
    functions' names: comments and strings too), once per module."""
    found = ctx.shared.get("def-names")
    if found is None:
        found = ctx.shared["def-names"] = frozenset(_DEF.findall(ctx.source))
    return found


def helper_without_gradients(ctx, func: cst.BaseExpression) -> bool:
    """Whether ``func`` names a function of this module (its only definition)
    that disables gradients itself: decorated with ``@torch.no_grad()`` (or
    ``inference_mode``), or whose body is one ``with torch.no_grad():`` block
    after its docstring (stanza's ``model_predict(model, indices, sentences)``,
    called from ``evaluate_model``): the model runs inside it without a graph."""
    if type(func) is not cst.Name or func.value not in _defined_functions(ctx):
        return False  # (a cheap look at the text first: the module's lexical index is a walk of every node)
    found = ctx.semantic.definitions(func.value)
    if len(found) != 1 or type(found[0].node) is not cst.FunctionDef:
        return False
    function = found[0].node
    if decorator_grad_mode(function, ctx) == GRAD_OFF:
        return True
    body = function.body
    if not isinstance(body, cst.IndentedBlock):
        return False
    statements = [stmt for stmt in body.body if not is_docstring(stmt)]
    return bool(statements) and type(statements[0]) is cst.With and with_grad_modes(statements[0], ctx) == (False, True)

