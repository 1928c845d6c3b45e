"""What a training step looks like: backward calls, their loss, optimizer steps,
grad-mode blocks.

Shared by the rules that reason about training loops (TL301, TL302, TL303, TL602, the
opt-in TL5xx).  The questions are answered from the syntax of one call (or, for
a grad-mode block, from the ancestors of the visited node); only
``uses_grad_after`` walks a tree (a loop's body).

Gradients of parameters: ``is_grad`` (``p.grad``, ``p.grad.data``),
``is_parameter_iterable`` (``m.parameters()``, ``group["params"]``),
``grad_none_test`` (``p.grad is None``) and ``uses_grad_after`` (a loop that
reads a gradient after zeroing it).

Grad mode: ``grad_mode`` (one expression: ``torch.no_grad()``...),
``with_grad_modes`` (a ``with`` statement), ``decorator_grad_mode`` (a
function's decorators), ``grad_mode_statement`` (``torch.set_grad_enabled(False)``
as a statement), ``needs_gradients`` (a call that needs them) and
``called_without_gradients`` (every call site of a function, followed a few
callers up, runs without gradients).

DDP and gradient accumulation: ``DDP_CLASSES``, ``wraps_in_ddp`` (a helper
named to wrap a model in DDP), ``SYNC_CONTROL`` (words that show gradient
synchronisation handled by hand), ``says_every_n`` (a condition that says
"every N micro-batches") and ``scaler_accumulates`` (timm's loss scaler told
to step every N calls).

Idioms recognised as "a backward call on ``loss``":
  ``loss.backward()``, ``(loss / accum_steps).backward()``,
  ``(loss * weight).backward()``, ``scaler.scale(loss).backward()``,
  ``loss.mean().backward()``, ``torch.autograd.backward(loss)``,
  ``accelerator.backward(loss)`` (Hugging Face Accelerate),
  ``fabric.backward(loss)`` and ``self.manual_backward(loss)`` (Lightning).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import libcst as cst

from torchlint.rule import Context, contains_modulo
from torchlint.rules._project_text import is_ddp_helper
from torchlint.nodes import walk_nodes
from torchlint.rules._helpers import keyword, last_name, literal_bool, method_name, positional, receiver, string_value

# Wrappers that take the loss and hand back something to call backward() on.
_WRAPPER_OWNERS = re.compile(r"^_?(grad_?)?scaler$|_scaler$", re.IGNORECASE)
# Objects whose ``.backward(loss)`` runs ``loss.backward()`` for the user.
_BACKWARD_OWNERS = re.compile(r"^_?(accelerator|fabric)$", re.IGNORECASE)
# Reductions that keep the graph of the tensor they reduce.
_REDUCTIONS = frozenset({"mean", "sum"})

_OPTIMIZER = re.compile(r"^_?(opt|optim|optimizer|optimiser)s?(_\w+)?$|_(opt|optim|optimizer|optimiser)$|optimizer", re.IGNORECASE)


def is_backward(call: cst.Call, ctx: Context) -> bool:
    """Whether ``call`` runs backpropagation (see the module docstring)."""
    name = method_name(call)
    if name == "backward" or name == "manual_backward":
        return True
    return ctx.qualname(call.func) == "torch.autograd.backward"


def is_framework_backward(call: cst.Call) -> bool:
    """``accelerator.backward(loss)``, ``fabric.backward(loss)``,
    ``self.manual_backward(loss)``: a framework runs the backward (and owns
    mixed precision, gradient synchronization and the like)."""
    name = method_name(call)
    return name == "manual_backward" or (
        name == "backward" and bool(_BACKWARD_OWNERS.match(last_name(receiver(call)) or ""))
    )


def backward_loss(call: cst.Call, ctx: Context) -> Optional[cst.BaseExpression]:
    """The loss expression a backward call differentiates, or None.

    ``(loss / n).backward()`` -> ``loss``; ``scaler.scale(loss).backward()`` ->
    ``loss``; ``accelerator.backward(loss)`` -> ``loss``.  The result is the
    innermost operand as written (a Name, an Attribute, a Subscript...).
    """
    if ctx.qualname(call.func) == "torch.autograd.backward":
        arg = keyword(call, "tensors")
        if arg is None:
            args = positional(call)
            arg = args[0] if args else None
        return unwrap_loss(arg.value) if arg is not None else None
    name = method_name(call)
    if is_framework_backward(call):
        args = positional(call)
        return unwrap_loss(args[0].value) if args else None
    if name == "backward":
        return unwrap_loss(receiver(call))
    return None


def unwrap_loss(expr: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """Strip parentheses, scaling, ``scaler.scale(...)`` and reductions."""
    while expr is not None:
        if isinstance(expr, cst.BinaryOperation) and isinstance(
            expr.operator, (cst.Divide, cst.Multiply)
        ):
            left, right = expr.left, expr.right
            if isinstance(expr.operator, cst.Multiply) and _is_scalar_like(left) and not _is_scalar_like(right):
                expr = right
            else:
                expr = left
            continue
        if isinstance(expr, cst.Call):
            name = method_name(expr)
            owner = last_name(receiver(expr)) or ""
            if name == "scale" and _WRAPPER_OWNERS.search(owner):
                args = positional(expr)
                expr = args[0].value if args else None
                continue
            if name in _REDUCTIONS and not expr.args:
                expr = receiver(expr)
                continue
        return expr
    return None


def _is_scalar_like(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float))


def is_optimizer_step(call: cst.Call) -> bool:
    """``optimizer.step()``, ``self.opt.step()``, ``scaler.step(optimizer)``.

    The owner is recognised by its name (``opt``, ``optim``, ``optimizer``,
    ``g_optimizer``, ``optimizer_d``...), so ``scheduler.step()`` and
    ``env.step(action)`` are not optimizer steps.
    """
    if method_name(call) != "step":
        return False
    owner = last_name(receiver(call)) or ""
    if _OPTIMIZER.search(owner):
        return True  # ``optimizer.step(closure)`` (LBFGS) included
    if _WRAPPER_OWNERS.search(owner):
        args = positional(call)
        return bool(args) and bool(_OPTIMIZER.search(last_name(args[0].value) or ""))
    return False


GRAD_OFF = "off"
GRAD_ON = "on"


def grad_mode(expr: cst.BaseExpression, ctx: Context) -> Optional[str]:
    """``"off"`` for ``torch.no_grad()``/``torch.inference_mode()``/
    ``torch.set_grad_enabled(<not True>)``, ``"on"`` for ``torch.enable_grad()``/
    ``set_grad_enabled(True)``/``inference_mode(False)``, else None."""
    call = expr if isinstance(expr, cst.Call) else None
    func = call.func if call is not None else expr
    q = ctx.qualname(func)
    if q is not None and (q == "torch" or q.startswith("torch.")):
        last = q.rsplit(".", 1)[-1]
        if last == "no_grad":
            return GRAD_OFF
        if last == "enable_grad":
            return GRAD_ON
        if last in ("inference_mode", "set_grad_enabled"):
            if call is None:
                return GRAD_OFF if last == "inference_mode" else None
            arg = keyword(call, "mode")
            if arg is None:
                args = positional(call)
                arg = args[0] if args else None
            value = literal_bool(arg.value) if arg is not None else None
            if last == "inference_mode":
                return GRAD_ON if value is False else GRAD_OFF
            if value is True:
                return GRAD_ON
            # set_grad_enabled(False) or set_grad_enabled(phase == "train"):
            # the author chose when gradients are recorded.
            return GRAD_OFF
        return None
    # A helper of one's own: `@no_grad_wrapper`, `with inference_context():`.
    name = last_name(func) or ""
    lowered = name.lower()
    if "grad" in lowered or "inference" in lowered:
        return GRAD_OFF
    if call is not None and name:
        return _own_context_grad_mode(call, name, ctx)
    return None


def _own_context_grad_mode(call: cst.Call, name: str, ctx: Context) -> Optional[str]:
    """The grad mode a context manager of the module chooses around its
    ``yield`` (``@contextmanager def _mode(self, training): ... with
    torch.set_grad_enabled(training): yield``, entered as ``with
    self._mode(False):``): ``"on"`` where the call passes a literal True for
    the parameter ``set_grad_enabled`` is given, ``"off"`` where any grad-off
    block holds the ``yield`` (as for ``set_grad_enabled(flag)`` itself);
    None where some definition of the name is no such context manager."""
    resolving = ctx.shared.setdefault("grad-context-resolving", set())
    if name in resolving:
        return None  # (a context manager that enters itself, or one of its callers: `super()._mode()`)
    resolving.add(name)
    try:
        return _context_grad_mode(call, name, ctx)
    finally:
        resolving.discard(name)


def _context_grad_mode(call: cst.Call, name: str, ctx: Context) -> Optional[str]:
    found = ctx.semantic.definitions(name)
    modes = set()
    for occurrence in found:
        fn = occurrence.node
        if not isinstance(fn, cst.FunctionDef) or not any(
                last_name(d.decorator) == "contextmanager" for d in fn.decorators):
            return None
        mode = None
        for node in walk_nodes(fn.body):
            if type(node) is cst.With and any(type(n) is cst.Yield for n in walk_nodes(node.body)):
                for item in node.items:
                    if grad_mode(item.item, ctx) == GRAD_OFF:
                        mode = _chosen_by_argument(item.item, fn, call) or GRAD_OFF
                        break
            if mode is not None:
                break
        if mode is None:
            return None
        modes.add(mode)
    return modes.pop() if len(modes) == 1 else None


def _chosen_by_argument(item: cst.BaseExpression, fn: cst.FunctionDef, call: cst.Call) -> Optional[str]:
    """For ``set_grad_enabled(param)`` in ``fn``, the mode that ``call``'s
    literal argument for ``param`` chooses (``"on"`` for True, ``"off"`` for
    False); None otherwise."""
    args = positional(item) if isinstance(item, cst.Call) else []
    if len(args) != 1 or not isinstance(args[0].value, cst.Name):
        return None
    param = args[0].value.value
    names = [p.name.value for p in fn.params.params]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    given = keyword(call, param)
    if given is None and param in names and names.index(param) < len(positional(call)):
        given = positional(call)[names.index(param)]
    value = literal_bool(given.value) if given is not None else None
    return None if value is None else GRAD_ON if value else GRAD_OFF


def decorator_grad_mode(function: cst.FunctionDef, ctx: Context) -> Optional[str]:
    """The grad mode the decorators of ``function`` choose: ``"off"`` when one
    turns gradients off (``@torch.no_grad()``, ``@torch.inference_mode()``,
    ``@torch.set_grad_enabled(...)``, ``@smart_inference_mode()``), ``"on"``
    when they only turn them on (``@torch.enable_grad()``), else None."""
    modes = {grad_mode(decorator.decorator, ctx) for decorator in function.decorators}
    if GRAD_OFF in modes:
        return GRAD_OFF
    return GRAD_ON if GRAD_ON in modes else None


def grad_mode_statement(call: cst.Call, ctx: Context) -> Optional[str]:
    """For ``set_grad_enabled(...)`` called as a statement
    (``torch.set_grad_enabled(False)``), the grad mode it sets for the rest of
    its function (or module): ``"off"`` or ``"on"``; else None."""
    q = ctx.qualname(call.func)
    if q is None or q.rsplit(".", 1)[-1] != "set_grad_enabled" or not isinstance(ctx.parent, cst.Expr):
        return None
    return GRAD_OFF if grad_mode(call, ctx) == GRAD_OFF else GRAD_ON


def called_without_gradients(
    function: Any, call_sites: Dict[str, List[Tuple[bool, Any]]], seen: frozenset = frozenset(),
    elsewhere: Optional[Callable[[Any], bool]] = None,
) -> bool:
    """Whether every call site of ``function`` (an object with the function's
    ``name`` and ``node``) in a module runs without gradients: under a
    grad-disabling block or decorator there, or in a function all of whose own
    call sites do (a few levels up).  ``call_sites`` maps a name to its call
    sites, ``(without gradients?, calling function)``; a calling function's
    ``node`` is None for module-level code.  A function the module never calls
    is asked to ``elsewhere`` (its callers in other modules), when given."""
    sites = call_sites.get(function.name)
    if len(seen) > 4 or id(function) in seen:
        return False
    if not sites:
        return elsewhere is not None and elsewhere(function)
    seen = seen | {id(function)}
    return all(
        covered or (caller.node is not None and called_without_gradients(caller, call_sites, seen, elsewhere))
        for covered, caller in sites
    )


# Functions whose name says they train or compute a loss (`forward`,
# `train_step`, `compute_loss`): a call from one feeds a training step, and a
# `.eval()` in one freezes a submodule (a teacher) inside the step.
TRAINING_NAME = re.compile(r"^(forward|__call__)$|train|loss", re.IGNORECASE)
# Function names that say "this runs a model for evaluation or inference"
# (`evaluate`, `validate`, `test_epoch`, `predict`, `inference`).
EVALUATION_NAME = re.compile(r"^_*(eval|valid|test|predict|infer)", re.IGNORECASE)


# Attributes whose mention says the code wants gradients (saliency maps,
# adversarial examples, gradient penalties, test-time training...).
_GRADIENT_ATTRIBUTES = frozenset(
    {
        "backward", "manual_backward", "grad", "requires_grad", "requires_grad_", "retain_grad",
        "enable_grad", "zero_grad", "autograd", "jacobian", "hessian", "vjp", "jvp", "jacrev",
        "jacfwd", "grad_fn",
    }
)


def is_gradient_attribute(name: str) -> bool:
    """``x.grad``, ``loss.backward``, ``torch.autograd``, ``x.requires_grad_``..."""
    return name in _GRADIENT_ATTRIBUTES


def requests_grad(call: cst.Call) -> bool:
    """A call given ``requires_grad=`` anything but a literal False."""
    return any(
        arg.keyword is not None and arg.keyword.value == "requires_grad" and literal_bool(arg.value) is not False
        for arg in call.args
    )


def is_functional_transform(qualified: str) -> bool:
    """``torch.func.*`` (``grad``, ``vjp``, ``jacrev``...), ``functorch.grad``/``vmap``."""
    return qualified.startswith("torch.func.") or qualified in ("functorch.grad", "functorch.vmap")


def needs_gradients(call: cst.Call, ctx: Context) -> bool:
    """A call that needs gradients: given ``requires_grad=`` (anything but a
    literal False), an optimizer step, or a ``torch.func``/``functorch``
    transform."""
    if requests_grad(call) or is_optimizer_step(call):
        return True
    q = ctx.qualname(call.func)
    return q is not None and is_functional_transform(q)


def with_grad_modes(node: cst.With, ctx: Context) -> Tuple[bool, bool]:
    """``(enables, disables)`` for a ``with`` statement: whether an item turns
    gradients on before any item turns them off (``with torch.enable_grad():``),
    and whether an item turns them off (``with torch.no_grad(), ctx:``)."""
    enables = False
    for item in node.items:
        mode = grad_mode(item.item, ctx)
        if mode == GRAD_ON:
            enables = True
        elif mode == GRAD_OFF:
            return enables, True
    return enables, False


# Lightning hooks, which Lightning runs under no_grad/inference_mode.
_LIGHTNING_EVAL_HOOK = re.compile(
    r"^(on_)?(validation|val|test|predict)_(step|batch|epoch|model|start|end|dataloader)"
    r"|_(step|epoch)_end$"
)


def is_lightning_eval_hook(name: str) -> bool:
    """``validation_step``, ``test_step``, ``on_validation_epoch_end``, ``*_epoch_end``..."""
    return bool(_LIGHTNING_EVAL_HOOK.search(name))


# OpenMMLab's runners (MMEngine's `ValLoop`/`TestLoop.run_iter`, its
# `BaseInferencer.forward`; mmcv's `single_gpu_test` for the 2.x codebases) call
# a model's `predict` (`simple_test`, `aug_test`) under `torch.no_grad()`.
_OPENMMLAB_EVAL_METHODS = frozenset({"predict", "simple_test", "aug_test"})
_OPENMMLAB_IMPORT = re.compile(
    r"^[ \t]*(?:from|import)[ \t]+(?:mmengine|mmcv|mmdet|mmdet3d|mmocr|mmseg|mmsegmentation|mmpretrain|mmcls"
    r"|mmaction|mmpose|mmrotate|mmtrack|mmagic|mmedit|mmflow|mmfewshot|mmselfsup|mmrazor|mmyolo|mmgen"
    r"|mmhuman3d)\b",
    re.M,
)


def is_metric_class(cls: cst.ClassDef) -> bool:
    """A class named for a metric, or derived from one (``BaseMetric``,
    ``torchmetrics.Metric``, ``ICallbackLoaderMetric``)."""
    if "Metric" in cls.name.value:
        return True
    return any("Metric" in (last_name(base.value) or "") for base in cls.bases)


def imports_openmmlab(ctx: Context) -> bool:
    """Whether the module imports ``mmengine``, ``mmcv`` or an ``mm*`` package
    of OpenMMLab (its own included): a module of an OpenMMLab codebase."""
    found = ctx.shared.get("openmmlab")
    if found is None:
        found = ctx.shared["openmmlab"] = _OPENMMLAB_IMPORT.search(ctx.source) is not None
    return found


def collects_metric_results(ctx: Context) -> bool:
    """Whether the node being visited is in the ``process`` method of an
    OpenMMLab metric (``class AccMetric(BaseMetric)``): MMEngine collects its
    ``self.results`` on the host, across processes by pickling, so the
    per-sample conversions there are the point."""
    function = ctx.enclosing_function()
    if function is None or function.name.value != "process" or not imports_openmmlab(ctx):
        return False
    cls = ctx.enclosing_class()
    return cls is not None and is_metric_class(cls)


def framework_runs_without_grad(name: str, ctx: Context) -> bool:
    """A method that a framework runs without gradients: a Lightning hook
    (``is_lightning_eval_hook``), or a model's ``predict`` (``simple_test``,
    ``aug_test``) in a module of an OpenMMLab codebase (it imports
    ``mmengine``, ``mmcv`` or one of the ``mm*`` packages, its own included),
    which the framework's evaluation loops and inferencers run under
    ``torch.no_grad()``."""
    return is_lightning_eval_hook(name) or name in _OPENMMLAB_EVAL_METHODS and imports_openmmlab(ctx)


def in_grad_off_block(ctx: Context) -> bool:
    """Whether the node being visited is in a ``with`` block of its function
    that turns gradients off (``with torch.no_grad():``)."""
    for ancestor in ctx.ancestors():
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.With):
            if any(grad_mode(item.item, ctx) == GRAD_OFF for item in ancestor.items):
                return True
    return False


def backward_keeps_graph(call: cst.Call) -> bool:
    """A backward call given ``retain_graph=``/``create_graph=`` (anything but a
    literal False or None), or those by position (``loss.backward(grad, True)``)."""
    for name in ("retain_graph", "create_graph"):
        arg = keyword(call, name)
        if arg is not None and not (isinstance(arg.value, cst.Name) and arg.value.value in ("False", "None")):
            return True
    return any(arg.star for arg in call.args) or len(positional(call)) > 2 or (
        method_name(call) == "backward" and len(positional(call)) > 1
    )


# DistributedDataParallel: is_ddp_helper and text_wraps_in_ddp live in rules/_project_text.py
# (the project index asks the latter of caller files without LibCST).


# -- gradients of parameters -------------------------------------------------------
def is_grad(expr: cst.BaseExpression) -> bool:
    """``x.grad`` or ``x.grad.data``."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        expr = expr.value
    return isinstance(expr, cst.Attribute) and expr.attr.value == "grad"


def is_parameter_iterable(expr: cst.BaseExpression) -> bool:
    """``m.parameters()``, ``m.named_parameters()``, ``group["params"]``, or
    ``filter(..., m.parameters())``."""
    if isinstance(expr, cst.Call):
        name = method_name(expr)
        if name in ("parameters", "named_parameters"):
            return True
        if isinstance(expr.func, cst.Name) and expr.func.value == "filter" and len(expr.args) == 2:
            return is_parameter_iterable(expr.args[1].value)
        return False
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if isinstance(index, cst.Index):
            return string_value(index.value) == "params"
    return False


def _grad_of(node: cst.CSTNode, param: str) -> bool:
    """``param.grad``."""
    return (
        type(node) is cst.Attribute
        and node.attr.value == "grad"
        and type(node.value) is cst.Name
        and node.value.value == param
    )


def grad_none_test(comparison: cst.CSTNode, param: str, operator: type) -> bool:
    """``param.grad is None`` (``operator`` ``cst.Is``) or ``is not None`` (``cst.IsNot``)."""
    return (
        type(comparison) is cst.Comparison
        and _grad_of(comparison.left, param)
        and len(comparison.comparisons) == 1
        and type(comparison.comparisons[0].operator) is operator
        and type(comparison.comparisons[0].comparator) is cst.Name
        and comparison.comparisons[0].comparator.value == "None"
    )


_RESETS = frozenset({"detach_", "requires_grad_", "zero_"})


def uses_grad_after(loop: cst.For, param: str, zeroed: cst.BaseExpression) -> bool:
    """Whether the loop body reads ``param.grad`` after zeroing it, other than
    to test it against None or reset it again (`if p.grad is None: p.grad =
    zeros_like(p)` followed by `grad = p.grad`: the code needs a tensor)."""

    after = False
    skip: set = set()
    for node in walk_nodes(loop.body):
        if node is zeroed:
            after = True
            continue
        if not after or id(node) in skip:
            continue
        if type(node) is cst.Comparison and (
            grad_none_test(node, param, cst.Is) or grad_none_test(node, param, cst.IsNot)
        ):
            skip.add(id(node.left))
        elif type(node) is cst.AssignTarget and _grad_of(node.target, param):
            skip.add(id(node.target))
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and _grad_of(node.func.value, param):
            if node.func.attr.value in _RESETS:
                skip.add(id(node.func.value))
        elif _grad_of(node, param):
            return True
    return False


# -- DDP and gradient accumulation ------------------------------------------------
DDP_CLASSES = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
# Words in a condition that say "every N micro-batches".
ACCUMULATION_WORDS = re.compile(r"accum|micro|sync|update", re.IGNORECASE)
# Any of these in the module means the author handles gradient synchronisation.
# (Lightning Fabric's `fabric.no_backward_sync(model)` included.)
SYNC_CONTROL = ("no_sync", "no_backward_sync", "require_backward_grad_sync", ".accumulate(", "ddp_sync(")


def wraps_in_ddp(node: cst.Call) -> bool:
    """``smart_DDP(model)``, ``utils.wrap_ddp(model, ...)``: a call, with the
    model as an argument, of a helper whose name says it wraps in DDP."""
    func = node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return bool(node.args) and is_ddp_helper(name)


def scaler_accumulates(node: cst.Call) -> bool:
    """A loss scaler called with the loss and an ``update_grad=`` that says
    "every N micro-batches" (``loss_scaler(loss, optimizer, ...,
    update_grad=(i + 1) % accum_iter == 0)``, timm's ``NativeScaler`` as DeiT,
    MAE, ConvNeXt and Swin call it): it runs ``backward()`` on every call and
    steps only when ``update_grad`` is true."""
    func = node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    if "scaler" not in name.lower() or not node.args:
        return False
    for arg in node.args:
        if arg.keyword is not None and arg.keyword.value == "update_grad":
            return says_every_n(arg.value)
    return False


def says_every_n(test: cst.BaseExpression) -> bool:
    """A test that says "every N micro-batches": it uses `%`, or names
    something with `accum`, `micro`, `sync` or `update` in it."""
    return contains_modulo(test) or any(
        isinstance(n, cst.Name) and ACCUMULATION_WORDS.search(n.value) for n in walk_nodes(test)
    )
