"""Host or device: one shared answer to "is this value certainly not a device tensor?"

TL101 asks it of the value whose ``.item()`` it is about to report; other rules
ask it of a tensor they would move (TL201's ``*_like`` input).  The answer
follows values through the module's semantic model (``torchlint/semantic.py``):
names by the bindings that reach the use (so ``m = torch.from_numpy(a)`` after
``m = masks.argmax(-1)`` is a host value from there on), ``self.attr`` by the
class's assignments, helper functions of the project by their arguments.

A value is on the host when it is, or is computed only from: Python literals
and builtins (``len``, ``range``, ``int``...), NumPy/pandas/SciPy/``math``
values, ``torch.from_numpy``, ``torch.tensor(data)``/factories without a device
(unless the program changes the default device), ``.cpu()``/``.numpy()``/
``.tolist()``/``.item()`` results, ``.to("cpu")``, tokenizer outputs, what
an environment step given host actions returns (``envs.step(np_actions)``), a
parameter annotated as a host type or converted under
``isinstance(x, torch.Tensor)``, the batches a loader yields (also through
``metric_logger.log_every(loader, ...)`` and the matching part of a ``zip`` or
``enumerate``), the items of a dataset (a parameter, or a name bound to the
call that builds it: ``dataset[i]``), an array updated in place
(``box /= ratio``), and methods, indexes and arithmetic of such
values.  Anything else (a parameter, a model's output, a value moved with
``.cuda()``/``.to(device)``) may be on the device, and the answer is no.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Set

import libcst as cst

from torchlint.rule import Context
from torchlint.rules._factories import HOST_DEFAULT_FACTORIES
from torchlint.rules._helpers import (
    device_kind,
    keyword,
    last_name,
    method_name,
    positional,
    receiver,
)
from torchlint.nodes import target_names, walk_nodes
from torchlint.rules._loaders import PinnedLoaders, is_dataloader
from torchlint.rules._models import names_a_module
from torchlint.rules._sync import is_env_step_call, isinstance_tensor_subject
from torchlint.semantic import Binding, Location, SemanticModel

# How far the host-value analysis follows expressions and bindings.
_MAX_DEPTH = 10
_LITERALS = (
    cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString,
)
_HOST_MODULE_ROOTS = ("numpy", "pandas", "scipy", "math", "array")
# Methods whose result is on the host whatever the receiver was.
_HOST_METHODS = frozenset({"numpy", "to_numpy", "tolist", "cpu", "item", "to_list", "to_dict", "to_pandas"})
# Methods that may move a host value to a device.
_DEVICE_METHODS = frozenset({"cuda", "to", "type", "xpu", "mps", "to_device", "as_subclass", "new"})
# torch functions whose result is on the device of their first argument.
_SAME_DEVICE_OPS = frozenset(
    {
        "multinomial", "max", "min", "argmax", "argmin", "amax", "amin", "sum", "mean",
        "std", "var", "prod", "nonzero", "unique", "sort", "argsort", "topk", "bincount",
        "cumsum", "clamp", "abs", "sqrt", "exp", "log", "round", "floor", "ceil", "flatten",
        "reshape", "squeeze", "unsqueeze", "count_nonzero", "median", "quantile", "kthvalue", "mode",
    }
)
# `torch.return_types` producers: their `.values` is a tensor.
_RETURN_TYPES = frozenset(
    {"max", "min", "topk", "sort", "mode", "median", "nanmedian", "kthvalue", "cummax", "cummin", "aminmax", "unique"}
)
# Methods that may reduce a tensor to a scalar (a 0-dim host copy combines with device tensors).
_REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "norm", "prod", "std", "var", "item",
                         "median", "logsumexp", "all", "any", "count_nonzero", "nansum", "nanmean", "dot", "squeeze"})
_HOST_BUILTINS = frozenset({"len", "int", "float", "bool", "str", "range", "list", "dict", "sorted"})
# Builtins whose elements are those of their (first) iterable arguments.
_ITERATION_BUILTINS = frozenset({"enumerate", "zip", "reversed", "sorted", "iter", "list", "tuple"})
# Methods that yield the items of their first argument, timing or logging each
# (the `MetricLogger.log_every` of DeiT, DINO, MAE, BLIP...; `rich.progress.track`).
_PASS_THROUGH_ITERATORS = frozenset({"log_every", "track"})
# Functions named like these may move their result to a device (or are models).
_MOVING_WORDS = ("device", "cuda", "gpu", "accelerat", "move", "load", "model")
# Mappings of these are long (one entry per parameter): not a few named values.


def _is_host_module(qualname: str) -> bool:
    root = qualname.split(".", 1)[0]
    return root in _HOST_MODULE_ROOTS



_COMPREHENSION_SCOPES = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


class HostValues:
    """The answers for one file (see ``host_values``)."""

    def __init__(self, ctx: Context) -> None:
        self.context = ctx
        self.semantic: SemanticModel = ctx.semantic
        source = ctx.source
        self.default_device_changed = "set_default_device" in source or bool(
            re.search(r"with\s+\w+(\.\w+)*\.device\(", source)
        )
        self._converted_by_scope: Dict[int, Set[str]] = {}
        self._loops_by_scope: Dict[int, Dict[int, cst.For]] = {}
        # Accelerate's and Fabric's prepared loaders move their batches to the device.
        self.prepares_loaders = ".prepare(" in source or "setup_dataloaders" in source

    # -- the questions ---------------------------------------------------------------
    def is_host(self, expr: cst.BaseExpression, at: Location) -> bool:
        """Whether ``expr``, evaluated at ``at``, is certainly not a device tensor."""
        return self._is_host(expr, at, 0, set())

    def is_host_iterable(self, expr: cst.BaseExpression, at: Location) -> bool:
        """Whether every element of the iterable ``expr`` is a host value."""
        return self._iterable_is_host(expr, at, 0, set())

    def _converted(self, at: Location) -> Set[str]:
        """Parameters of ``at``'s function rebound under ``if isinstance(x, torch.Tensor):``."""
        scope = at.scope
        found = self._converted_by_scope.get(id(scope))
        if found is None:
            found = self._converted_by_scope[id(scope)] = _converted_parameters(scope)
        return found

    def _progress_bar(self, name: str, at: Optional[Location]) -> bool:
        """A local name bound only to ``tqdm if is_main_process() else iter``
        (YOLOX's evaluators): it yields what it is given."""
        if at is None:
            return False
        bindings = self.semantic.reaching(name, at)

        def passes(expr: cst.BaseExpression) -> bool:
            if isinstance(expr, cst.IfExp):
                return passes(expr.body) and passes(expr.orelse)
            q = self.context.qualname(expr)
            return (isinstance(expr, cst.Name) and expr.value in ("iter", "list") and q is None) or (
                q is not None and q.split(".", 1)[0] == "tqdm")

        return bool(bindings) and all(b.kind == "value" and b.value is not None and passes(b.value) for b in bindings)

    def _is_host(self, expr: cst.BaseExpression, at: Location, depth: int, seen: Set[tuple]) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return all(
                not isinstance(e, cst.StarredElement) and self._is_host(e.value, at, depth + 1, seen)
                for e in expr.elements
            )
        if isinstance(expr, _LITERALS):
            return True
        # Containers hold what their elements are: `[{k: v.to(device)} ...]` holds device tensors.
        if isinstance(expr, cst.Dict):
            return all(
                isinstance(e, cst.DictElement) and self._is_host(e.value, at, depth + 1, seen) for e in expr.elements
            )
        if isinstance(expr, cst.DictComp):
            return self._is_host(expr.value, _inside(expr, at), depth + 1, seen)
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self._is_host(expr.elt, _inside(expr, at), depth + 1, seen)
        ctx = self.context
        if isinstance(expr, cst.Name):
            if expr.value in ("None", "True", "False"):
                return True
            q = ctx.qualname(expr)
            if q is not None:
                return _is_host_module(q)
            return self._name_is_host(expr.value, at, depth, seen)
        if isinstance(expr, cst.Attribute):
            q = ctx.qualname(expr)
            if q is not None:
                return _is_host_module(q)
            if expr.attr.value == "batch_sizes":
                return True  # a `PackedSequence`'s `batch_sizes` is always a CPU tensor (stanza's packed LSTM)
            if expr.attr.value == "values":
                # pandas' `.values`; but `t.max(dim=1).values` is a tensor.
                inner = expr.value
                if isinstance(inner, cst.Call) and last_name(inner.func) in _RETURN_TYPES:
                    return self._is_host(inner, at, depth + 1, seen)
                return True
            attribute = self._self_attribute_is_host(expr, at, depth, seen)
            if attribute is not None:
                return attribute
            return self._is_host(expr.value, at, depth + 1, seen)
        if isinstance(expr, cst.Subscript):
            if _optimizer_setting(expr):
                return True
            if isinstance(expr.value, cst.Name) and self._is_dataset(expr.value.value, at):
                return True  # `sample = dataset[i]`: a Dataset's `__getitem__` builds it on the host
            return self._is_host(expr.value, at, depth + 1, seen)
        if isinstance(expr, cst.BinaryOperation):
            left = self._is_host(expr.left, at, depth + 1, seen)
            right = self._is_host(expr.right, at, depth + 1, seen)
            # With a host copy of a tensor on one side (`rgb_map.cpu() - gt_rgb`), the
            # result is on the host whatever the other side is (or the operation raises).
            return (left and right) or (left and self._host_copy(expr.left, at, depth)) or (
                right and self._host_copy(expr.right, at, depth))
        if isinstance(expr, cst.UnaryOperation):
            return self._is_host(expr.expression, at, depth + 1, seen)
        if isinstance(expr, cst.IfExp):  # `a.numpy() if cpu else a.cpu().numpy()`: host if both are
            return self._is_host(expr.body, at, depth + 1, seen) and self._is_host(expr.orelse, at, depth + 1, seen)
        if isinstance(expr, cst.Call):
            return self._call_is_host(expr, at, depth, seen)
        return False

    def _host_copy(self, expr: cst.BaseExpression, at, depth: int) -> bool:
        """Whether ``expr`` is a host copy of a tensor that is not a reduced
        scalar (``x.reshape(h, w, 3).cpu()``, or a name every reaching binding
        gives one, unpacked ones included): a 0-dim CPU tensor would combine
        with a device tensor, a larger one cannot."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name) and at is not None:
            bindings = self.semantic.reaching(expr.value, at)
            return bool(bindings) and all(self._bound_host_copy(b, depth + 1) for b in bindings)
        if not (isinstance(expr, cst.Call) and method_name(expr) == "cpu"):
            return False
        node = receiver(expr)
        while isinstance(node, cst.Call):
            if method_name(node) in _REDUCTIONS:
                return False
            node = receiver(node)
        return True

    def _bound_host_copy(self, b: Binding, depth: int) -> bool:
        value = b.value
        if b.kind == "part" and isinstance(value, (cst.Tuple, cst.List)) and b.index is not None:
            elements = value.elements
            value = elements[b.index].value if b.index < len(elements) else None
        elif b.kind != "value":
            return False
        return value is not None and self._host_copy(value, b.location, depth)

    def _self_attribute_is_host(self, expr: cst.Attribute, at, depth: int, seen: Set[tuple]) -> Optional[bool]:
        """``self.sigmas`` in a method: decided by every ``self.sigmas = ...`` in
        the class's methods (None when there is none, or not a method)."""
        if at is None or not isinstance(expr.value, cst.Name):
            return None
        scopes = at.scopes
        i = len(scopes) - 1
        while i > 0 and type(scopes[i]) in _COMPREHENSION_SCOPES:
            i -= 1  # `[self.x[i].item() for i in ...]` reads the method's `self`
        if i < 1:
            return None
        method, cls = scopes[i], scopes[i - 1]
        if not isinstance(method, cst.FunctionDef) or not isinstance(cls, cst.ClassDef):
            return None
        params = method.params.params or method.params.posonly_params
        if not params or params[0].name.value != expr.value.value:
            return None
        bindings = self.semantic.attribute_bindings(cls, Location(scopes[: i - 1], ())).get(expr.attr.value)
        if not bindings:
            return None
        key = ("attr", id(cls), expr.attr.value)
        if key in seen:
            return True
        seen = seen | {key}
        return all(
            b.kind in ("value", "aug") and self._is_host(b.value, b.location, depth + 1, seen) for b in bindings
        )

    def _call_is_host(self, call: cst.Call, at, depth: int, seen: Set[tuple]) -> bool:
        ctx = self.context
        func = call.func
        if _names_tokenizer(func):
            # `tokenizer(text, return_tensors="pt")`, `tokenizer.encode(text)`:
            # tokenizers build their output on the host.
            return True
        q = ctx.qualname(func)
        if q is not None:
            if q.split(".", 1)[0] == "safetensors":
                # `safe_open(path, framework="pt")`, `load_file(path)`: on the CPU
                # unless a device is given.
                device = keyword(call, "device")
                return device is None or device_kind(device.value, ctx) == "cpu"
            if _is_host_module(q):
                return True
            if q.startswith("torch."):
                return self._torch_call_is_host(call, q[len("torch."):], at, depth, seen)
            return self._helper_is_host(call, q.rsplit(".", 1)[-1], at, depth, seen)
        if isinstance(func, cst.Name):
            name = func.value
            if ctx.imports.resolve(name) is None and name not in ctx.imports.defined and name in _HOST_BUILTINS:
                return True
            return self._helper_is_host(call, name, at, depth, seen)
        name = method_name(call)
        if name in _HOST_METHODS:
            return True
        if is_env_step_call(call) and call.args and all(self._is_host(a.value, at, depth + 1, seen) for a in call.args):
            # `s, r, d, info = envs.step(np_actions)`: an environment that takes
            # host actions (Gym, envpool) answers with NumPy arrays (one that
            # takes device actions, such as Isaac Gym, may answer on the device)
            return True
        returned = self._method_result_is_host(call, at, depth, seen)
        if returned is not None:
            return returned
        if name == "to":
            target = keyword(call, "device")
            args = positional(call)
            if target is None and args:
                target = args[0]
            if target is None:
                return False
            kind = device_kind(target.value, ctx)
            # `.to(self._cpu_device)`: a device named after the CPU
            return kind == "cpu" or (kind == "device" and "cpu" in (last_name(target.value) or "").lower())
        if name in _DEVICE_METHODS or not isinstance(func, cst.Attribute):
            # `nn.CrossEntropyLoss()(out, y)`, `fns[i](x)`: a call of a call's
            # result says nothing about where the result lives.
            return False
        return self._is_host(func.value, at, depth + 1, seen)  # a method of a host value

    def _method_result_is_host(self, call: cst.Call, at, depth: int, seen: Set[tuple]) -> Optional[bool]:
        """``self.method(...)`` of the enclosing class, every ``return`` of which
        gives back either an argument (``return mask_data`` after updating it:
        host when that argument is) or a name the method converted in place
        before returning it (``data.to_numpy()`` ... ``return data``: a results
        container the project moves to the host itself).  None when the call is
        not such a method, or its returns are anything else."""
        func = call.func
        if at is None or not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                              and func.value.value == "self"):
            return None
        cls = next((scope for scope in reversed(at.scopes) if isinstance(scope, cst.ClassDef)), None)
        if cls is None or not isinstance(cls.body, cst.IndentedBlock):
            return None
        methods = [m for m in cls.body.body if isinstance(m, cst.FunctionDef) and m.name.value == func.attr.value]
        if len(methods) != 1:
            return None
        method = methods[0]
        values = self.semantic.returns(method)
        if not values:
            return None
        params = [p.name.value for p in method.params.params]
        if not any(isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod" for d in method.decorators):
            params = params[1:]
        args = positional(call)
        for value in values:
            if not isinstance(value, cst.Name):
                return None
            if value.value in params:
                i = params.index(value.value)
                arg = keyword(call, value.value) or (args[i] if i < len(args) else None)
                if arg is None or not self._is_host(arg.value, at, depth + 1, seen):
                    return False
            elif not _converted_in_place(method, value.value):
                return None
        return True

    def _helper_is_host(self, call: cst.Call, name: str, at, depth: int, seen: Set[tuple]) -> bool:
        """A function of the project (``xyxy2xywh(torch.tensor(box))``) given
        only host values, at least one of them a host array or tensor: PyTorch
        and NumPy operations return their result where their inputs live.  Not
        a function named after a device or a move (``to_device``), nor a model."""
        lowered = name.lower()
        if lowered.startswith("to_") or any(word in lowered for word in _MOVING_WORDS) or names_a_module(call.func):
            return False
        if not call.args or any(a.star for a in call.args):
            return False
        values = [a.value for a in call.args]
        return all(self._is_host(v, at, depth + 1, seen) for v in values) and any(
            self._is_host_array(v, at, depth + 1, set()) for v in values
        )

    def _is_host_array(self, expr: cst.BaseExpression, at, depth: int, seen: Set[tuple]) -> bool:
        """Whether ``expr`` is (built from) an array or tensor rather than a plain
        Python value: ``torch.tensor(...)``, a NumPy call, ``x.cpu()``,
        ``x.numpy()``, or a method, index or arithmetic of one.  Whether it is on
        the host is asked separately (``_is_host``)."""
        if depth > _MAX_DEPTH:
            return False
        ctx = self.context
        if isinstance(expr, cst.Call):
            func = expr.func
            q = ctx.qualname(func)
            if q is not None:
                if _is_host_module(q):
                    return True
                if q.startswith("torch."):
                    name = q[len("torch."):]
                    return name in ("tensor", "as_tensor", "from_numpy") or name in HOST_DEFAULT_FACTORIES or name in _SAME_DEVICE_OPS
                return any(self._is_host_array(a.value, at, depth + 1, seen) for a in expr.args)
            if isinstance(func, cst.Name):
                if func.value in _HOST_BUILTINS:
                    return False
                return any(self._is_host_array(a.value, at, depth + 1, seen) for a in expr.args)
            name = method_name(expr)
            if name in ("cpu", "numpy"):
                return True
            if name in _HOST_METHODS or not isinstance(func, cst.Attribute):
                return False
            if self._method_result_is_host(expr, at, depth + 1, seen):
                return True  # a container the method converted to NumPy (`data.to_numpy()`)
            return self._is_host_array(func.value, at, depth + 1, seen)
        if isinstance(expr, cst.Attribute):
            if ctx.qualname(expr) is not None:
                return False
            return self._is_host_array(expr.value, at, depth + 1, seen)
        if isinstance(expr, cst.Subscript):
            return self._is_host_array(expr.value, at, depth + 1, seen)
        if isinstance(expr, cst.BinaryOperation):
            return self._is_host_array(expr.left, at, depth + 1, seen) or self._is_host_array(
                expr.right, at, depth + 1, seen
            )
        if isinstance(expr, cst.UnaryOperation):
            return self._is_host_array(expr.expression, at, depth + 1, seen)
        if isinstance(expr, cst.Name) and at is not None:
            key = ("array", id(at.scope), at.path, expr.value)
            if key in seen:
                return False
            seen = seen | {key}
            for b in self.semantic.reaching(expr.value, at):
                if b.kind in ("value", "aug", "part", "with", "iter", "iter_part") and self._is_host_array(
                    b.value, b.location, depth + 1, seen
                ):
                    return True
                if b.kind == "param" and b.value is not None:
                    annotation = b.value.value if isinstance(b.value, cst.Subscript) else b.value
                    q = ctx.qualname(annotation)
                    if q is not None and _is_host_module(q):
                        return True
        return False

    def _torch_call_is_host(self, call: cst.Call, name: str, at, depth: int, seen: Set[tuple]) -> bool:
        if name == "from_numpy":
            return True
        if name == "as_tensor" or name in _SAME_DEVICE_OPS:
            # `as_tensor` returns a tensor argument as it is; most operations
            # return their result on the device of their input.
            args = positional(call)
            if not args or not self._is_host(args[0].value, at, depth + 1, seen):
                return False
        elif name != "tensor" and name not in HOST_DEFAULT_FACTORIES:
            # `torch.tensor(data)` copies `data` to the default device.
            return False
        if any(a.star for a in call.args):
            return False
        device = keyword(call, "device")
        if device is None:
            return not self.default_device_changed
        return device_kind(device.value, self.context) == "cpu"

    def _iterable_is_host(self, expr: cst.BaseExpression, at, depth: int, seen: Set[tuple]) -> bool:
        """Whether every element of the iterable ``expr`` is a host value."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return self._is_host(expr, at, depth + 1, seen)
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self._is_host(expr.elt, _inside(expr, at), depth + 1, seen)
        if isinstance(expr, (cst.Dict, cst.DictComp)):
            return False  # keys are, values may not be
        ctx = self.context
        if isinstance(expr, cst.Call):
            func = expr.func
            args = positional(expr)
            if any(a.star for a in expr.args):
                return False
            name = None
            if isinstance(func, cst.Name) and ctx.imports.resolve(func.value) is None and func.value not in ctx.imports.defined:
                name = func.value
            q = ctx.qualname(func)
            if name == "range" or (not self.prepares_loaders and is_dataloader(expr, ctx)):
                return True  # (`dl = tqdm(DataLoader(ds, ...))`: batches collated in host memory, whatever the name)
            if name in _ITERATION_BUILTINS or (q is not None and q.split(".", 1)[0] == "tqdm") or (
                    name is not None and self._progress_bar(name, at)):
                if name == "enumerate":
                    args = args[:1]
                return bool(args) and all(self._iterable_is_host(a.value, at, depth + 1, seen) for a in args)
            if isinstance(func, cst.Attribute) and func.attr.value in ("items", "values", "keys"):
                return False
            if isinstance(func, cst.Attribute) and func.attr.value in _PASS_THROUGH_ITERATORS and args:
                # `metric_logger.log_every(data_loader, print_freq, header)` yields the loader's batches
                return self._iterable_is_host(args[0].value, at, depth + 1, seen)
            if (isinstance(func, cst.Attribute) and not args and _names_a_loader(func.value)
                    and not _MOVING_LOADER.search(func.attr.value) and self._yields_host_batches(func.value, at)):
                return True  # `for data in data_loader.load_data():` the loader's own batches
            return self._is_host(expr, at, depth + 1, seen)
        if _names_a_loader(expr) and self._yields_host_batches(expr, at):
            return True  # a DataLoader collates its batches in host memory
        if isinstance(expr, cst.Name) and self._is_dataset(expr.value, at):
            return True  # `for img, labels in dataset:` a Dataset's `__getitem__` builds its samples on the host
        if isinstance(expr, cst.Name) and at is not None and ctx.qualname(expr) is None:
            bindings = self.semantic.reaching(expr.value, at)
            if not bindings:
                return self._is_host(expr, at, depth + 1, seen)
            key = ("iter", id(at.scope), at.path, expr.value)
            if key in seen:
                return True
            seen = seen | {key}
            return all(self._binding_is_host(b, depth, seen, iterable=True) for b in bindings)
        return self._is_host(expr, at, depth + 1, seen)

    def _yields_host_batches(self, expr: cst.BaseExpression, at) -> bool:
        """A loader named so (``val_loader``, ``self.train_loader``) that is a
        parameter, an attribute, or bound only to ``DataLoader(...)``: its
        batches are host tensors (a loader that moves them, such as a CUDA
        prefetcher, is named or built otherwise; in a module that calls
        ``accelerator.prepare(...)`` or ``fabric.setup_dataloaders(...)``,
        only a ``DataLoader(...)`` built there counts)."""
        prepared = self.prepares_loaders  # then only a DataLoader built here counts
        if not isinstance(expr, cst.Name):
            return not prepared
        if at is None:
            return False
        bindings = self.semantic.reaching(expr.value, at)
        if not bindings:
            return False
        if all((b.kind == "param" and not prepared)
               or (b.kind == "value" and isinstance(b.value, cst.Call) and is_dataloader(b.value, self.context))
               for b in bindings):
            return True
        # `train_loader, test_loader = load_data(path, bs)`: a function of this
        # module that returns loaders built there, or an imported one named so
        return not prepared and all(b.kind in ("value", "part") for b in bindings) and PinnedLoaders(
            self.context, pinned_only=False).pinned(expr, at) is not None

    def _is_dataset(self, name: str, at) -> bool:
        """A name that says it holds a dataset (``dataset``, ``val_dataset``)
        and is a parameter or built by a call that moves nothing
        (``dataset = dataset_dict[name](**kwargs)``; not ``x.to(device)``)."""
        if at is None or not _DATASET_NAME.search(name):
            return False
        bindings = self.semantic.reaching(name, at)
        return bool(bindings) and all(
            b.kind == "param"
            or (b.kind == "value" and isinstance(b.value, cst.Call) and method_name(b.value) not in _DEVICE_METHODS)
            for b in bindings
        )

    def _name_is_host(self, name: str, at, depth: int, seen: Set[tuple]) -> bool:
        if at is None:
            return False
        bindings = self.semantic.reaching(name, at)
        if not bindings:
            return False
        key = (id(at.scope), at.path, name)  # the same name elsewhere may have other bindings
        if key in seen:
            return True  # a cycle adds nothing: the other bindings decide
        seen = seen | {key}
        return all(self._binding_is_host(b, depth, seen) for b in bindings)

    def _binding_is_host(self, b: Binding, depth: int, seen: Set[tuple], iterable: bool = False) -> bool:
        """Whether one binding gives its name a host value (with ``iterable``: a
        value whose elements are all host values); asked where the binding is."""
        kind, value, at = b.kind, b.value, b.location
        if kind in ("value", "aug", "with"):
            if iterable:
                return self._iterable_is_host(value, at, depth + 1, seen)
            if kind == "aug":
                # `box /= ratio` leaves a NumPy array or host tensor where it is;
                # a Python number takes the other operand's type instead
                # (`total = 0; total += loss` is a device tensor from there on)
                if not self._is_host(value, at, depth + 1, seen):
                    return self._updates_host_array(b, depth + 1, seen)
                before = [x for x in self.semantic.reaching(b.name, at) if x is not b]
                return all(self._binding_is_host(x, depth + 1, seen) for x in before)
            return self._is_host(value, at, depth + 1, seen)
        if kind == "part":  # `a, b = value`
            if isinstance(value, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
                value = value.elt
            return self._is_host(value, at, depth + 1, seen)
        if kind in ("iter", "iter_part"):  # `for name in value`, `for name, other in value`
            if kind == "iter_part" and b.index is not None:
                part = self._zipped_part(value, b.index)
                if part is not None:  # `for caption, img_id in zip(captions, image_ids)`: img_id is an image_ids item
                    return part is True or self._iterable_is_host(part, at, depth + 1, seen)
            if self._iterable_is_host(value, at, depth + 1, seen):
                return True
            return kind == "iter_part" and self._sibling_moved(at.scope, value, b.name)
        if kind == "param":
            if b.name in self._converted(at):
                return True  # `if isinstance(x, torch.Tensor): x = x.cpu().numpy()`
            return value is not None and self._annotation_is_host(value)
        return False

    def _sibling_moved(self, scope: cst.CSTNode, iterable: Optional[cst.CSTNode], name: str) -> bool:
        """Whether the ``for`` statement over ``iterable`` in ``scope`` unpacks
        ``name`` with other parts of which a statement of its body moves one to
        a device (``for (x, y) in iterator:`` then ``x = x.to(device)``; not a
        cast, ``x.to(torch.float32)``, nor a prefetcher's batches): the iterable
        yields host tensors, so ``name``, never moved, is one of them."""
        loops = self._loops_by_scope.get(id(scope))
        if loops is None:
            loops = self._loops_by_scope[id(scope)] = {
                id(n.iter): n for n in walk_nodes(scope) if isinstance(n, cst.For)}
        loop = loops.get(id(iterable))
        if loop is None or not isinstance(loop.body, cst.IndentedBlock):
            return False
        if any(isinstance(n, (cst.Name, cst.Attribute)) and _MOVING_LOADER.search(
                n.value if isinstance(n, cst.Name) else n.attr.value) for n in walk_nodes(loop.iter)):
            return False  # a CUDA prefetcher: its batches are on the device already
        siblings = set(target_names(loop.target)) - {name}
        for stmt in loop.body.body:
            for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name) and isinstance(small.value, cst.Call)):
                    continue
                moved, base, call = small.targets[0].target.value, receiver(small.value), small.value
                if not (moved in siblings and isinstance(base, cst.Name) and base.value == moved):
                    continue
                if method_name(call) == "cuda":
                    return True
                target = keyword(call, "device") or (positional(call)[0] if positional(call) else None)
                if method_name(call) == "to" and target is not None and device_kind(
                        target.value, self.context) in ("accelerator", "device"):
                    return True  # (not a cast: `x = x.to(torch.float32)`)
        return False

    def _updates_host_array(self, b: Binding, depth: int, seen: Set[tuple]) -> bool:
        """Whether the in-place update ``b`` (``box /= ratio``) applies to a
        NumPy array or host tensor: every binding before it is one (assigned,
        or itself updated in place)."""
        if depth > _MAX_DEPTH:
            return False
        before = [x for x in self.semantic.reaching(b.name, b.location) if x is not b]
        return bool(before) and all(
            self._updates_host_array(x, depth + 1, seen) if x.kind == "aug"
            else x.kind == "value" and self._is_host_array(x.value, x.location, depth + 1, set())
            and self._binding_is_host(x, depth + 1, seen)
            for x in before
        )

    def _zipped_part(self, value: Optional[cst.CSTNode], index: int):
        """For ``for a, b in zip(xs, ys)`` the iterable whose items the
        ``index``-th target takes (``ys`` for ``b``); True for the counter of
        ``enumerate(xs)``; None when the value is neither."""
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name) or any(a.star for a in value.args):
            return None
        name = value.func.value
        if name in self.context.imports.defined or self.context.imports.resolve(name) is not None:
            return None
        args = positional(value)
        if name == "zip" and index < len(args) and len(args) == len(value.args):
            return args[index].value
        if name == "enumerate" and args:
            return True if index == 0 else args[0].value if index == 1 else None
        return None

    def _annotation_is_host(self, annotation: cst.BaseExpression) -> bool:
        if isinstance(annotation, cst.Subscript):
            annotation = annotation.value
        q = self.context.qualname(annotation)
        if q is not None:
            return _is_host_module(q)
        return isinstance(annotation, cst.Name) and annotation.value in ("int", "float", "bool", "str", "list", "dict", "List", "Dict")



_LOADER_NAME = re.compile(r"(?:^|_)(?:data)?loader$", re.IGNORECASE)
# A dataset handed to a function (`def create_dataset_table(self, dataset, ...)`).
_DATASET_NAME = re.compile(r"(?:^|_)dataset$", re.IGNORECASE)
_MOVING_LOADER = re.compile(r"prefetch|device|cuda|gpu", re.IGNORECASE)


def _names_a_loader(expr: cst.BaseExpression) -> bool:
    """``loader``, ``val_loader``, ``self.train_dataloader``,
    ``data_loaders["train_loader"]``, ``dataloaders[phase]`` (an entry of a
    mapping, under a key that names one, or of one named for loaders); not a
    prefetcher or a device loader (``cuda_loader``, ``DeviceLoader``)."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        name = key.evaluated_value if isinstance(key, cst.SimpleString) else ""
        if not isinstance(name, str) or not name:  # `dataloaders[phase]`
            name = expr.value.value if isinstance(expr.value, cst.Name) else ""
            name = name[:-1] if name.endswith("s") else ""
    else:
        name = expr.value if isinstance(expr, cst.Name) else expr.attr.value if isinstance(expr, cst.Attribute) else ""
    return bool(_LOADER_NAME.search(name)) and not _MOVING_LOADER.search(name)


def _inside(comprehension: cst.CSTNode, at: Optional[Location]) -> Optional[Location]:
    """The location of a comprehension's element: its own scope."""
    if at is None:
        return None
    return Location((*at.scopes, comprehension), ())


def _converted_parameters(scope: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()
    if not isinstance(scope, cst.FunctionDef):
        return found
    for node in walk_nodes(scope.body):
        if isinstance(node, cst.If):
            subject = isinstance_tensor_subject(node.test)
            if isinstance(subject, cst.Name) and _assigns(node.body, subject.value):
                found.add(subject.value)
    return found


def _assigns(block: cst.BaseSuite, name: str) -> bool:
    """Whether a block has a statement ``name = ...`` of its own."""
    statements = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for statement in statements:
        smalls = statement.body if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else ()
        for small in smalls:
            if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
            ):
                return True
    return False


# An optimizer's settings in its `param_groups`: a Python number, or a tensor that
# PyTorch's optimizers keep on the CPU (a tensor learning rate for a compiled step).
_OPTIMIZER_SETTINGS = frozenset({"lr", "initial_lr", "weight_decay", "momentum", "eps", "betas"})


def _optimizer_setting(expr: cst.Subscript) -> bool:
    """``group["lr"]``, ``pg["weight_decay"]``, ``optimizer.param_groups[0]["lr"]``."""
    if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
        return False
    key = expr.slice[0].slice.value
    return isinstance(key, cst.SimpleString) and key.value[1:-1] in _OPTIMIZER_SETTINGS


def _names_tokenizer(func: cst.BaseExpression) -> bool:
    """``tokenizer``, ``self.tokenizer``, ``tokenizer.encode``, ``tokenize``."""
    for part in (func, func.value if isinstance(func, cst.Attribute) else None):
        name = last_name(part) if part is not None else None
        if name is not None and "tokeniz" in name.lower():
            return True
    return False


def computes_with_torch(ctx: Context) -> bool:
    """Whether the module imports PyTorch for more than TensorBoard logging (a
    JAX or NumPy program that imports only ``torch.utils.tensorboard`` holds no
    torch tensors of its own)."""
    found = ctx.shared.get("computes-with-torch")
    if found is None:
        imported = [q for scope in ctx.imports.scopes for q in scope.values() if q]
        torch_names = [q for q in imported if q == "torch" or q.startswith("torch.")]
        found = not torch_names or any(not q.startswith("torch.utils.tensorboard") for q in torch_names)
        ctx.shared["computes-with-torch"] = found
    return found


def host_values(ctx: Context) -> HostValues:
    """The file's answers, made on the first question."""
    found = ctx.shared.get("host-values")
    if found is None:
        found = ctx.shared["host-values"] = HostValues(ctx)
    return found


# Methods of a results container that move its tensors to the host in place
# (segment-anything's `MaskData.to_numpy()`, `results.cpu()` on a container).
_IN_PLACE_TO_HOST = frozenset({"to_numpy", "numpy", "cpu"})


def _converted_in_place(function: cst.FunctionDef, name: str) -> bool:
    """Whether ``function``'s own body (not under a condition) has the
    statement ``name.to_numpy()`` (or ``.numpy()``/``.cpu()``) whose result is
    discarded: the container converted itself."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else ()
    for line in body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            value = small.value if isinstance(small, cst.Expr) else None
            if (
                isinstance(value, cst.Call)
                and not value.args
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _IN_PLACE_TO_HOST
                and isinstance(value.func.value, cst.Name)
                and value.func.value.value == name
            ):
                return True
    return False
