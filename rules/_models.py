"""'This is a model': the names and classes that denote a neural network.

The one place for the vocabulary the rules use to recognise a model without
types:

* ``names_a_module(expr)``: the last snake_case word of a name denotes an
  ``nn.Module`` (``model``, ``self.ema_model``, ``text_encoder``, ``resnet``;
  not ``model_output``, which is data): a receiver of ``.cpu()``, a ``del``;
* ``names_a_model(name)``: a callee named like a network (``model``,
  ``netG``, ``text_encoder``, ``model_without_ddp``), the stricter test of
  "this call runs a model", which excludes factories and helpers named with
  a verb (``get_model``, ``build_net``, ``load_model``);
* ``module_like_base(expr, ctx)``: a class base that makes the class an
  ``nn.Module`` (``torch.nn.*``, Lightning, a ``*Module``/``*Model``/``*Net``
  base of one's own);
* ``is_model_call(ctx, key, evaluated, by_name, module_class)``: a call of a
  dotted name runs a model (it was put in eval mode, or, judged by name,
  ``self`` in a module class or a name that says it is a network);
  ``FORWARD_METHODS``: the methods of a model that run its forward pass;
* ``MODEL_WORDS``: substrings of a callee that say it runs a model, for the
  loose question "does this loop run a model";
* ``MODULE_COLLECTIONS``: words of an iterable of modules (``models``,
  ``ensemble``, ``self.modules()``);
* ``module_method_follows(stack, top_index)``: a method chain goes on with a
  method only an ``nn.Module`` has (``m.cpu().state_dict()``);
* ``runs_on_dummy_inputs(call, ctx, location)``: a call whose inputs are all made up on
  the spot (``model(torch.randn(2, 3, 32, 32))``): a probe of output shapes.
"""

from __future__ import annotations

import re
from typing import Set

import libcst as cst

from torchlint.rule import Context
from torchlint.rules._factories import RANDOM_FACTORIES
from torchlint.rules._helpers import last_name, method_name, positional
from torchlint.semantic import Location

# Names that denote an `nn.Module` (as a receiver of `.cpu()`, or in `del model`),
# as the last word of a snake_case name: `model`, `ema_model`, `text_encoder`.
_MODULE_NAMES = frozenset(
    {
        "model", "models", "module", "modules", "backbone", "encoder", "decoder", "classifier",
        "net", "network", "teacher", "student", "ema", "head", "layer", "layers", "block",
        "blocks", "critic", "actor", "policy", "discriminator", "unet", "vae", "generator",
        "submodule", "child", "wrapper", "pipeline", "pipe",
    }
)
# A callee named like a network: `model`, `self.net`, `netG`, `text_encoder`, `ema_model`.
_MODEL_NAME = re.compile(
    r"^module$|^(.*_)?(model|models|net|network|backbone|encoder|decoder|classifier|generator|discriminator"
    r"|teacher|student|transformer|unet|vae|gpt|llm|detector)(_.*|\d+)?$"
    r"|model$|^net[a-z]?$",
    re.IGNORECASE,
)
# `get_model(...)`, `build_net(...)`: factories, not models.
_FACTORY = re.compile(
    r"^_*(get|build|load|create|make|init|initialize|setup|save|prepare|restore|wrap|unwrap|export"
    r"|compile|configure|print|log|freeze|unfreeze|set|count|update|register|convert|replace|copy"
    r"|download|validate|evaluate|eval|test|train|run|check|compute|summarize|profile|benchmark"
    r"|plot|show|visualize|infer|predict|apply|fuse|quantize|prune|sync|average|merge|split|clone"
    r"|choose|select|switch|pick|swap|reset|move|change|use|add|remove|delete|clear|enable|disable)_",
    re.IGNORECASE,
)
# Substrings of a callee's name that say it runs a model.
MODEL_WORDS = ("model", "net", "module", "encoder", "decoder", "generator", "discriminator", "policy")
# Methods of a model that run its forward pass.
# (Not `generate`: Hugging Face's and LitGPT's `generate` already run without
# gradients, and hand-written ones are usually decorated where defined.)
FORWARD_METHODS = frozenset({"forward", "__call__"})
# Iterables of modules: `models`, `ensemble`, `self.modules()`, `net.children()`.
MODULE_COLLECTIONS = ("model", "module", "children", "ensemble", "nets", "networks")
# Methods only an `nn.Module` has: `x.cpu().parameters()` moved a module.
_MODULE_METHODS = frozenset(
    {
        "parameters", "named_parameters", "buffers", "named_buffers", "state_dict",
        "load_state_dict", "modules", "named_modules", "children", "named_children",
        "eval", "train", "apply",
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


# A CapWords name (`Detector`, `ResNet`): a class, whose call builds a model.
_CLASS_NAME = re.compile(r"^_*[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")


def names_a_model(name: str) -> bool:
    """A callee name that says it is a network, not a factory or helper of one,
    nor a pydantic model's method (``chunk.model_dump_json()``)."""
    return bool(_MODEL_NAME.match(name)) and not _FACTORY.match(name) and not _PYDANTIC.match(name)


# Pydantic's `BaseModel` API (v2): `response.model_dump()`, `Usage.model_validate(d)`.
_PYDANTIC = re.compile(r"^model_(dump|dump_json|validate|validate_json|validate_strings|copy|construct|json_schema"
                       r"|post_init|rebuild|parametrized_name)$")


def module_like_base(expr: cst.BaseExpression, ctx: Context) -> bool:
    """A class base that makes the class an ``nn.Module`` (or a Lightning module)."""
    q = ctx.qualname(expr)
    if q is not None and (q.startswith("torch.nn") or "lightning" in q):
        return True
    name = last_name(expr) or ""
    return bool(re.search(r"(Module|Model|Net|Network)$", name))


def is_model_call(ctx: Context, key: str, evaluated: Set[str], by_name: bool, module_class: bool) -> bool:
    """Whether a call of ``key`` (a dotted name: ``model``, ``self.net``) runs a
    model: ``key`` is one of ``evaluated`` (put in eval mode); judged
    ``by_name``, also ``self`` in a class with an ``nn.Module``-like base
    (``module_class``) or a name that says it is a network
    (:func:`names_a_model`) and is not imported (``from utils import model_fn``)."""
    if key in evaluated:
        return True
    if not by_name:
        return False
    if key == "self":
        return module_class
    last = key.rsplit(".", 1)[-1]
    if key.split(".", 1)[0] != "self" and ctx.imports.resolve(key.split(".", 1)[0]) is not None:
        return False  # an imported callable (`from utils import model_fn`)
    if _CLASS_NAME.match(last):
        return False  # `detector = Detector(opt)`: builds one, runs nothing
    return names_a_model(last)


def module_method_follows(stack, top_index: int) -> bool:
    """Whether a call in the chain above the node being visited (up to the chain's
    outermost call at ``stack[top_index]``) is a module-only method
    (``m.cpu().parameters()``: ``m`` is a module)."""
    for node in stack[top_index:-1]:
        if isinstance(node, cst.Call) and method_name(node) in _MODULE_METHODS:
            return True
    return False


# Factories that make up a dummy input (not `torch.tensor(data)`, which wraps real data).
_DUMMY_FACTORIES = RANDOM_FACTORIES | {"zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like"}


def runs_on_dummy_inputs(call: cst.Call, ctx: Context, location: Location) -> bool:
    """Whether every positional argument of ``call`` is a tensor made up on the
    spot: a factory call (``torch.randn(...)``, ``torch.zeros(...)``) or a
    local name of the function bound only to one (not a module-level input
    that every call of the function reuses); ``location``: the call's."""
    args = positional(call)
    if not args:
        return False
    for arg in args:
        values = [arg.value]
        if isinstance(arg.value, cst.Name):
            bindings = ctx.semantic.bindings(arg.value.value, location)
            if not bindings or any(b.kind != "value" or b.location.scope is not location.scope for b in bindings):
                return False
            values = [b.value for b in bindings]
        for value in values:
            q = ctx.qualname(value.func) if isinstance(value, cst.Call) else None
            if q is None or not q.startswith("torch.") or q[len("torch."):] not in _DUMMY_FACTORIES:
                return False
    return True
