from __future__ import annotations

import re
from typing import Dict, Iterator, List, NamedTuple, Optional, Set

import libcst as cst

from torchlint.codemods import item_in_loop as codemod
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Rule, contains_modulo
from torchlint.walker import iter_children
from torchlint.rules._helpers import (
    device_kind,
    keyword,
    last_name,
    literal_number,
    method_name,
    positional,
    receiver,
)
from torchlint.rules._frequency import frequency_here
from torchlint.rules._sync import (
    LoopFacts,
    loop_facts,
    converts_any_value,
    enclosing_function_is_one_off,
    feeds_host_sink,
    in_data_pipeline,
    is_constant_display,
    isinstance_tensor_subject,
    iterates_mapping,
    loop_clauses,
    mentions,
    names_a_module,
    runs_once,
    runs_once_per_pass,
)


class ItemInLoop(Rule):
    """
    ## What it does
    Reports `<tensor>.item()` and `<tensor>.tolist()` called in a loop: in the
    body of a `for`/`while` statement or of a comprehension, in the same
    function, and not under a periodic guard such as `if step % log_every == 0:`.

    Receivers that are certainly not device tensors are not reported: NumPy and
    pandas values (`np.argmax(a).item()`, `x.cpu().numpy().tolist()`,
    `df["col"].values.tolist()`, a local name assigned only such values, the
    elements of a loop over them), data already copied to the host
    (`x.cpu().item()`, reported by TL102 at the `.cpu()`; `x.to(self._cpu_device)`),
    tensors built on the CPU (`torch.randperm(n).tolist()`), tokenizer outputs
    (`tokenizer(text, return_tensors="pt")`), tensors read with `safetensors`
    without a device, a value a function of the project computes from host
    arrays only (`xyxy2xywh(torch.tensor(box))`; not a function named after a
    device or a move, nor a model), an attribute that every `self.attr = ...` of
    the class keeps on the host, a parameter converted first
    (`if isinstance(x, torch.Tensor): x = x.cpu().numpy()`), and literals.

    Not reported either, because the wait is not paid once per step:
    - a call that runs at most once per loop or a fixed number of times: in a
      `return` or `raise`, in a block that ends with `break`/`return`/`raise` or
      `sys.exit(...)`, under `if i == 0:` on the loop counter, under a cap
      (`if shown < 3:` whose body does `shown += 1`), or under a periodic
      guard kept with a counter (`if seen == k:` whose body resets `seen = 0`);
    - a loop whose iteration is a whole pass of work: over epochs
      (`for epoch in ...`, unless the loop itself calls `.backward()`:
      full-batch training, where each "epoch" is one step), over a streaming
      generator (`for token in generate_text_stream(...)`: each value is wanted
      as soon as it exists), a loop that runs a text generation every
      iteration (`model.generate(...)`), or an interactive loop (`input()`);
    - a loop over a mapping's entries (`for k, v in metrics.items()`,
      `{k: v.item() for k, v in logs.items()}`, `for key in loss_dict`) or over
      a display of constants (`for split in ["train", "val"]`): it goes over a
      few named values that are all ready once the first one has been waited
      for, so the loop around it (if any) decides; a mapping of parameters,
      gradients or weights is not such a loop;
    - a conversion under `isinstance(v, torch.Tensor)` (or `torch.is_tensor`)
      in a loop that runs no training step (`.backward()`/`.step()`): loggers,
      results tables and input normalisation, which handle values that may not
      be tensors;
    - a value read from a state dict or checkpoint (`state_dict.pop(k).item()`,
      `ckpt["model"][k]`, a loop over `state_dict.values()`): checkpoints are
      loaded on the host and converted once; and any call in a function that
      builds a state dict or checkpoint, saves, exports, sets up or asserts
      (`save_*`, `*_save*`, `export*`, `__init__`, `init*`, `*_init`,
      `assert*`): one-off work, or the conversion is the work;
    - code in a `torch.utils.data` `Dataset` or `Sampler` subclass (data
      loading runs on the host);
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, under `tests/`):
      tests read values to check them.

    ## Why is this bad?
    CUDA kernels run asynchronously: the host queues work and moves on while the
    device computes. `.item()` and `.tolist()` must hand back a Python value,
    so the host stops and waits until the device has finished *all* the work
    queued so far, then copies the result back. Done every iteration, this
    serialises host and device: the device idles while the host prepares the
    next step, and the host idles while the device drains its queue. The PyTorch
    Performance Tuning Guide lists these calls among the unnecessary CPU-GPU
    synchronizations to avoid.

    Measured with `torchlint verify --rules TL101` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 1.07 ms before,
    1.35 ms after, **0.80x**. On a CPU `.item()` waits for nothing, so the fix only
    adds a tensor addition per step and is slower; its gain is the per-step
    synchronization it removes on a GPU, which this machine could not measure. Run
    the same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    print(total_loss / len(loader))
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.detach()  # stays on the device, no wait
    print(total_loss.item() / len(loader))  # one synchronization
    ```
    Or log every N steps: `if step % log_every == 0: print(loss.item())`.

    ## Fix safety
    A fix is offered only for the accumulation `acc += <expr>.item()` into a
    local variable initialised to a number literal (`acc = 0.0`) before the
    loop and not otherwise used in the loop. It rewrites `.item()` to
    `.detach()`, and it is unsafe: `acc` becomes a 0-dim tensor on the device
    instead of a Python number. The synchronization moves to wherever `acc` is
    read, and code that expects a number may behave differently: `json.dump`
    and other serialisers reject it, `%d` formatting and `math.*` functions
    convert it (synchronizing there), `acc > best` yields a tensor, a value kept
    in a list or a dict keeps device memory alive, and an integer count
    (`correct += (pred == y).sum().item()`) becomes an integer tensor whose
    division and formatting follow tensor rules.

    ## References
    - PyTorch Performance Tuning Guide, "Avoid unnecessary CPU-GPU synchronization"
    - PyTorch documentation, "CUDA semantics", section "Asynchronous execution"
    - `torch.Tensor.item` and `torch.Tensor.tolist` documentation
    """

    code = "TL101"
    name = "item-in-loop"
    summary = "`.item()`/`.tolist()` in a loop synchronizes with the device every iteration"
    fix = FixAvailability.UNSAFE

    VALID = [
        "import torch\nfor k, v in metrics.items():\n    print(k, v)\n",
        "import torch\nfor x in loader:\n    loss = model(x)\nprint(loss.item())\n",
        "import torch\nfor step, x in enumerate(loader):\n    loss = model(x)\n    if step % 100 == 0:\n        print(loss.item())\n",
        "import numpy as np\nimport torch\nfor row in rows:\n    ids = np.array(row).tolist()\n",
        "import torch\nfor i in range(n.item()):\n    pass\n",
    ]
    INVALID = [
        "import torch\ntotal = 0.0\nfor x in loader:\n    total += model(x).item()\n",
        "import torch\nfor x in loader:\n    print(model(x).tolist())\n",
        "import torch\ndef training_step(tensors):\n    values = [t.item() for t in tensors]\n",
    ]

    _MESSAGES = {
        "item": (
            "`.item()` in a loop blocks the host until the device has finished all "
            "queued work, every iteration; accumulate on the device (`.detach()`) and "
            "convert once after the loop, or log every N steps"
        ),
        "tolist": (
            "`.tolist()` in a loop blocks the host until the device has finished all "
            "queued work, every iteration; keep the results on the device (e.g. "
            "collect and `torch.cat` them) and convert once after the loop"
        ),
    }

    def __init__(self, context) -> None:
        super().__init__(context)
        self._bindings: Dict[int, "_Bindings"] = {}
        self._class_attrs: Dict[int, Dict[str, List[tuple]]] = {}
        self._facts: Dict[int, LoopFacts] = {}
        source = context.source
        self._default_device_changed = "set_default_device" in source or bool(
            re.search(r"with\s+\w+(\.\w+)*\.device\(", source)
        )

    def visit_Call(self, node: cst.Call) -> None:
        name = method_name(node)
        if name not in ("item", "tolist") or node.args:
            return
        ctx = self.context
        if ctx.is_test_file:
            return
        loop = self._step_loop()
        if loop is None:
            return
        if runs_once(ctx, loop) or runs_once_per_pass(ctx, loop, self._facts):
            return
        if loop_facts(ctx, loop, self._facts).exits_on_value:
            return  # the loop waits for a device value every iteration anyway, to decide to stop
        if not frequency_here(ctx).per_step:
            return  # a loop in code that runs once or once per epoch (setup, logging, export)
        recv = receiver(node)
        assert recv is not None
        if in_data_pipeline(ctx) or enclosing_function_is_one_off(ctx) or self._reads_checkpoint(recv):
            return
        if converts_any_value(ctx, loop, self._facts):
            return
        scope = self._scope()
        if self._is_host(recv, scope, 0, set()):
            return
        if feeds_host_sink(ctx, len(ctx.stack) - 1, loop):
            return  # read to be written, drawn or decoded on the host (`tokenizer.decode(ids.tolist())`)
        self.report(node, self._MESSAGES[name], fix=self._accumulation_fix(node, recv, loop, scope))

    # -- which loop repeats the call -------------------------------------------
    def _step_loop(self) -> Optional[cst.CSTNode]:
        """The innermost enclosing loop that is not a walk over a mapping's
        entries (``for k, v in metrics.items()``) or over a display of constants
        (``for split in ["train", "val"]``): such a loop goes over a few named
        values or settings, not over steps or data, so the question is asked of
        the loop around it."""
        for loop in self.context.enclosing_loops():
            clauses = loop_clauses(loop)
            if not clauses or not all(self._is_mapping(c.iter) or is_constant_display(c.iter) for c in clauses):
                return loop
        return None

    def _is_mapping(self, expr: cst.BaseExpression) -> bool:
        """``d.items()``/``d.values()``/``d.keys()``, a name ending in ``dict``,
        ``kwargs``, or a local name bound only to dict displays; not a mapping of
        parameters, gradients or weights (those can be long)."""
        if mentions(expr, _WEIGHT_WORDS):
            return False
        if iterates_mapping(expr):
            return True
        if not isinstance(expr, cst.Name):
            return False
        scope = self._scope()
        bindings = self._scope_bindings(scope).names.get(expr.value) if scope is not None else None
        return bool(bindings) and all(
            kind == "value"
            and (
                isinstance(value, (cst.Dict, cst.DictComp))
                or (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict")
            )
            for kind, value in bindings
        )

    # -- code whose values are not per-step device results ----------------------
    def _reads_checkpoint(self, recv: cst.BaseExpression) -> bool:
        """A value read from a state dict or checkpoint (``state_dict[k]``,
        ``ckpt.pop(k)``), or in a loop over one: loaded checkpoints live on the
        host, and reading one is a one-off conversion, not a training step."""
        if _chain_mentions(recv, _CHECKPOINT_WORDS):
            return True
        for node in reversed(self.context.stack[:-1]):
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            for clause in loop_clauses(node):
                if mentions(clause.iter, _CHECKPOINT_WORDS):
                    return True
        return False

    # -- scopes ----------------------------------------------------------------
    def _scope(self) -> Optional[cst.CSTNode]:
        """The innermost function (or the module); None inside a lambda or class body."""
        for node in reversed(self.context.stack[:-1]):
            if isinstance(node, cst.FunctionDef):
                return node
            if isinstance(node, (cst.Lambda, cst.ClassDef)):
                return None
        return self.context.module

    def _scope_bindings(self, scope: cst.CSTNode) -> "_Bindings":
        cached = self._bindings.get(id(scope))
        if cached is None:
            cached = _collect_bindings(scope)
            self._bindings[id(scope)] = cached
        return cached

    def _method_class(self, scope: Optional[cst.CSTNode]) -> Optional[cst.ClassDef]:
        """The class of which ``scope`` is a method (defined in the class body)."""
        stack = self.context.stack
        for i in range(len(stack) - 1, 1, -1):
            if stack[i] is scope:
                owner = stack[i - 2]
                return owner if isinstance(owner, cst.ClassDef) and stack[i - 1] is owner.body else None
        return None

    def _attribute_bindings(self, cls: cst.ClassDef) -> Dict[str, List[tuple]]:
        """``attr -> [(kind, value, method)]`` for ``self.attr = value`` in the
        methods of ``cls``."""
        cached = self._class_attrs.get(id(cls))
        if cached is None:
            cached = _collect_attribute_bindings(cls)
            self._class_attrs[id(cls)] = cached
        return cached

    # -- is the value certainly not a device tensor? ---------------------------
    def _is_host(self, expr: cst.BaseExpression, scope: Optional[cst.CSTNode], depth: int, seen: Set[tuple]) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return all(
                not isinstance(e, cst.StarredElement) and self._is_host(e.value, scope, depth + 1, seen)
                for e in expr.elements
            )
        if isinstance(expr, _LITERALS):
            return True
        ctx = self.context
        if isinstance(expr, cst.Name):
            if expr.value in ("None", "True", "False"):
                return True
            q = ctx.qualname(expr)
            if q is not None:
                return _is_host_module(q)
            return self._name_is_host(expr.value, scope, depth, seen)
        if isinstance(expr, cst.Attribute):
            q = ctx.qualname(expr)
            if q is not None:
                return _is_host_module(q)
            if expr.attr.value == "values":
                # pandas' `.values`; but `t.max(dim=1).values` is a tensor.
                inner = expr.value
                if isinstance(inner, cst.Call) and last_name(inner.func) in _RETURN_TYPES:
                    return self._is_host(inner, scope, depth + 1, seen)
                return True
            attribute = self._self_attribute_is_host(expr, scope, depth, seen)
            if attribute is not None:
                return attribute
            return self._is_host(expr.value, scope, depth + 1, seen)
        if isinstance(expr, cst.Subscript):
            return self._is_host(expr.value, scope, depth + 1, seen)
        if isinstance(expr, cst.BinaryOperation):
            return self._is_host(expr.left, scope, depth + 1, seen) and self._is_host(
                expr.right, scope, depth + 1, seen
            )
        if isinstance(expr, cst.UnaryOperation):
            return self._is_host(expr.expression, scope, depth + 1, seen)
        if isinstance(expr, cst.Call):
            return self._call_is_host(expr, scope, depth, seen)
        return False

    def _self_attribute_is_host(self, expr: cst.Attribute, scope, depth: int, seen: Set[tuple]) -> Optional[bool]:
        """``self.sigmas`` in a method: decided by every ``self.sigmas = ...`` in
        the class's methods (None when there is none, or not a method)."""
        if not isinstance(expr.value, cst.Name) or not isinstance(scope, cst.FunctionDef):
            return None
        params = scope.params.params or scope.params.posonly_params
        if not params or params[0].name.value != expr.value.value:
            return None
        cls = self._method_class(scope)
        if cls is None:
            return None
        bindings = self._attribute_bindings(cls).get(expr.attr.value)
        if not bindings:
            return None
        key = ("attr", id(cls), expr.attr.value)
        if key in seen:
            return True
        seen = seen | {key}
        return all(
            kind in ("value", "aug") and self._is_host(value, method, depth + 1, seen)
            for kind, value, method in bindings
        )

    def _call_is_host(self, call: cst.Call, scope, depth: int, seen: Set[tuple]) -> bool:
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
                return self._torch_call_is_host(call, q[len("torch."):], scope, depth, seen)
            return self._helper_is_host(call, q.rsplit(".", 1)[-1], scope, depth, seen)
        if isinstance(func, cst.Name):
            name = func.value
            if ctx.imports.resolve(name) is None and name not in ctx.imports.defined and name in _HOST_BUILTINS:
                return True
            return self._helper_is_host(call, name, scope, depth, seen)
        name = method_name(call)
        if name in _HOST_METHODS:
            return True
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
        return self._is_host(func.value, scope, depth + 1, seen)  # a method of a host value

    def _helper_is_host(self, call: cst.Call, name: str, scope, depth: int, seen: Set[tuple]) -> bool:
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
        return all(self._is_host(v, scope, depth + 1, seen) for v in values) and any(
            self._is_host_array(v, scope, depth + 1, set()) for v in values
        )

    def _is_host_array(self, expr: cst.BaseExpression, scope, depth: int, seen: Set[tuple]) -> bool:
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
                    return name in ("tensor", "as_tensor", "from_numpy") or name in _CPU_FACTORIES or name in _SAME_DEVICE_OPS
                return any(self._is_host_array(a.value, scope, depth + 1, seen) for a in expr.args)
            if isinstance(func, cst.Name):
                if func.value in _HOST_BUILTINS:
                    return False
                return any(self._is_host_array(a.value, scope, depth + 1, seen) for a in expr.args)
            name = method_name(expr)
            if name in ("cpu", "numpy"):
                return True
            if name in _HOST_METHODS or not isinstance(func, cst.Attribute):
                return False
            return self._is_host_array(func.value, scope, depth + 1, seen)
        if isinstance(expr, cst.Attribute):
            if ctx.qualname(expr) is not None:
                return False
            return self._is_host_array(expr.value, scope, depth + 1, seen)
        if isinstance(expr, cst.Subscript):
            return self._is_host_array(expr.value, scope, depth + 1, seen)
        if isinstance(expr, cst.BinaryOperation):
            return self._is_host_array(expr.left, scope, depth + 1, seen) or self._is_host_array(
                expr.right, scope, depth + 1, seen
            )
        if isinstance(expr, cst.UnaryOperation):
            return self._is_host_array(expr.expression, scope, depth + 1, seen)
        if isinstance(expr, cst.Name) and scope is not None:
            key = ("array", id(scope), expr.value)
            if key in seen:
                return False
            seen = seen | {key}
            for kind, value in self._scope_bindings(scope).names.get(expr.value, ()):
                if kind in ("value", "aug", "part", "with", "iter", "iter_part") and self._is_host_array(
                    value, scope, depth + 1, seen
                ):
                    return True
                if kind == "param" and value is not None:
                    annotation = value.value if isinstance(value, cst.Subscript) else value
                    q = ctx.qualname(annotation)
                    if q is not None and _is_host_module(q):
                        return True
        return False

    def _torch_call_is_host(self, call: cst.Call, name: str, scope, depth: int, seen: Set[tuple]) -> bool:
        if name == "from_numpy":
            return True
        if name == "as_tensor" or name in _SAME_DEVICE_OPS:
            # `as_tensor` returns a tensor argument as it is; most operations
            # return their result on the device of their input.
            args = positional(call)
            if not args or not self._is_host(args[0].value, scope, depth + 1, seen):
                return False
        elif name != "tensor" and name not in _CPU_FACTORIES:
            # `torch.tensor(data)` copies `data` to the default device.
            return False
        if any(a.star for a in call.args):
            return False
        device = keyword(call, "device")
        if device is None:
            return not self._default_device_changed
        return device_kind(device.value, self.context) == "cpu"

    def _iterable_is_host(self, expr: cst.BaseExpression, scope, depth: int, seen: Set[tuple]) -> bool:
        """Whether every element of the iterable ``expr`` is a host value."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return self._is_host(expr, scope, depth + 1, seen)
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
            return self._is_host(expr.elt, scope, depth + 1, seen)
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
            if name == "range":
                return True
            if name in _ITERATION_BUILTINS or (q is not None and q.split(".", 1)[0] == "tqdm"):
                if name == "enumerate":
                    args = args[:1]
                return bool(args) and all(self._iterable_is_host(a.value, scope, depth + 1, seen) for a in args)
            if isinstance(func, cst.Attribute) and func.attr.value in ("items", "values", "keys"):
                return False
            return self._is_host(expr, scope, depth + 1, seen)
        if isinstance(expr, cst.Name) and scope is not None and ctx.qualname(expr) is None:
            key = ("iter", id(scope), expr.value)
            if key in seen:
                return True
            bindings = self._scope_bindings(scope).names.get(expr.value)
            if not bindings:
                return self._is_host(expr, scope, depth + 1, seen)
            seen = seen | {key}
            return all(self._binding_is_host(expr.value, kind, value, scope, depth, seen, iterable=True) for kind, value in bindings)
        return self._is_host(expr, scope, depth + 1, seen)

    def _name_is_host(self, name: str, scope, depth: int, seen: Set[tuple]) -> bool:
        if scope is None:
            return False
        key = (id(scope), name)
        if key in seen:
            return True  # a cycle adds nothing: the other bindings decide
        bindings = self._scope_bindings(scope).names.get(name)
        if not bindings and not isinstance(scope, cst.Module):
            scope = self.context.module
            key = (id(scope), name)
            if key in seen:
                return True
            bindings = self._scope_bindings(scope).names.get(name) if scope is not None else None
        if not bindings:
            return False
        seen = seen | {key}
        return all(self._binding_is_host(name, kind, value, scope, depth, seen) for kind, value in bindings)

    def _binding_is_host(self, name: str, kind: str, value, scope, depth: int, seen: Set[tuple], iterable: bool = False) -> bool:
        """Whether one binding of ``name`` gives it a host value (with
        ``iterable``: a value whose elements are all host values)."""
        if kind in ("value", "aug", "with"):
            if iterable:
                return self._iterable_is_host(value, scope, depth + 1, seen)
            return self._is_host(value, scope, depth + 1, seen)
        if kind == "part":  # `a, b = value`
            if isinstance(value, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
                value = value.elt
            return self._is_host(value, scope, depth + 1, seen)
        if kind in ("iter", "iter_part"):  # `for name in value`, `for name, other in value`
            return self._iterable_is_host(value, scope, depth + 1, seen)
        if kind == "param":
            if name in self._scope_bindings(scope).converted:
                return True  # `if isinstance(x, torch.Tensor): x = x.cpu().numpy()`
            return value is not None and self._annotation_is_host(value)
        return False

    def _annotation_is_host(self, annotation: cst.BaseExpression) -> bool:
        if isinstance(annotation, cst.Subscript):
            annotation = annotation.value
        q = self.context.qualname(annotation)
        if q is not None:
            return _is_host_module(q)
        return isinstance(annotation, cst.Name) and annotation.value in ("int", "float", "bool", "str", "list", "dict", "List", "Dict")

    # -- the fix ---------------------------------------------------------------
    def _accumulation_fix(self, node: cst.Call, recv: cst.BaseExpression, loop: cst.CSTNode, scope) -> Optional[Fix]:
        if method_name(node) != "item":
            return None
        parent = self.context.parent
        if not (
            isinstance(parent, cst.AugAssign)
            and parent.value is node
            and isinstance(parent.operator, cst.AddAssign)
            and isinstance(parent.target, cst.Name)
        ):
            return None
        if not isinstance(loop, (cst.For, cst.While)) or scope is None:
            return None
        acc = parent.target.value
        if not _initialised_before(scope, acc, loop):
            return None
        if _used_elsewhere_in_loop(loop, acc, parent.target):
            return None
        text = cst.Module([]).code_for_node(recv)
        if len(text) > 40 or "\n" in text:
            text = "<expr>"
        return Fix(
            Applicability.UNSAFE,
            f"Accumulate `{text}.detach()` instead (sync once when `{acc}` is read)",
            lambda: codemod.item_to_detach(node),
        )


# -- module-level helpers ----------------------------------------------------------

# How far the host-value analysis follows expressions and bindings.
_MAX_DEPTH = 10
_LITERALS = (
    cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
    cst.FormattedString, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp,
)
_COLLECTION_LITERALS = (cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_HOST_MODULE_ROOTS = ("numpy", "pandas", "scipy", "math", "array")
# Methods whose result is on the host whatever the receiver was.
_HOST_METHODS = frozenset({"numpy", "to_numpy", "tolist", "cpu", "item", "to_list", "to_dict", "to_pandas"})
# Methods that may move a host value to a device.
_DEVICE_METHODS = frozenset({"cuda", "to", "type", "xpu", "mps", "to_device", "as_subclass", "new"})
# torch factories that build on the default device (the CPU) when given no device.
_CPU_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
        "linspace", "logspace", "eye",
    }
)
# torch functions whose result is on the device of their first argument.
_SAME_DEVICE_OPS = frozenset(
    {
        "multinomial", "max", "min", "argmax", "argmin", "amax", "amin", "sum", "mean",
        "std", "var", "prod", "nonzero", "unique", "sort", "argsort", "topk", "bincount",
        "cumsum", "clamp", "abs", "sqrt", "exp", "log", "round", "floor", "ceil", "flatten",
        "reshape", "squeeze", "unsqueeze", "count_nonzero", "median", "quantile",
    }
)
# `torch.return_types` producers: their `.values` is a tensor.
_RETURN_TYPES = frozenset(
    {"max", "min", "topk", "sort", "mode", "median", "nanmedian", "kthvalue", "cummax", "cummin", "aminmax", "unique"}
)
_HOST_BUILTINS = frozenset({"len", "int", "float", "bool", "str", "range", "list", "dict", "sorted"})
# Builtins whose elements are those of their (first) iterable arguments.
_ITERATION_BUILTINS = frozenset({"enumerate", "zip", "reversed", "sorted", "iter", "list", "tuple"})
# Functions named like these may move their result to a device (or are models).
_MOVING_WORDS = ("device", "cuda", "gpu", "accelerat", "move", "load", "model")
# Mappings of these are long (one entry per parameter): not a few named values.
_WEIGHT_WORDS = ("param", "grad", "weight", "buffer")
# Values read from these come from a checkpoint.
_CHECKPOINT_WORDS = ("state_dict", "ckpt", "checkpoint")


def _is_host_module(qualname: str) -> bool:
    root = qualname.split(".", 1)[0]
    return root in _HOST_MODULE_ROOTS


_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_NESTED_SCOPE_TYPES = frozenset(_NESTED_SCOPES)
# The node types `_collect_bindings` looks at; every other node is skipped
# with one set lookup instead of a chain of (slow, ABC) isinstance checks.
_BINDING_TYPES = frozenset(
    {
        cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.FunctionDef,
        cst.ClassDef, cst.Global, cst.Nonlocal, cst.WithItem, cst.AsName, cst.NamedExpr,
        cst.If, cst.Import, cst.ImportFrom,
    }
)


def _scope_nodes(scope: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk of a scope's body, not entering nested functions or classes
    (which are yielded themselves)."""
    body = scope.body
    todo: List[cst.CSTNode] = [body] if isinstance(body, cst.CSTNode) else list(reversed(body))
    while todo:
        node = todo.pop()
        yield node
        if type(node) in _NESTED_SCOPE_TYPES:
            continue
        children = iter_children(node)
        children.reverse()
        todo.extend(children)


class _Bindings(NamedTuple):
    names: Dict[str, List[tuple]]
    """``name -> [(kind, value)]`` for every binding of a name in a scope."""
    converted: Set[str]
    """Parameters rebound under ``if isinstance(x, torch.Tensor):``."""


def _collect_bindings(scope: cst.CSTNode) -> _Bindings:
    """Every binding of a name in a scope.

    kinds: ``value`` (``name = value``), ``aug`` (``name op= value``), ``part``
    (``name, other = value``), ``iter`` (``for name in value``), ``iter_part``
    (``for name, other in value``), ``with`` (``with value as name``), ``param``
    (value: the annotation or None), ``unknown`` (anything else: starred
    targets, ``global``, imports...).
    """
    found: Dict[str, List[tuple]] = {}
    converted: Set[str] = set()
    with_names: Set[int] = set()

    def add(name: str, kind: str, value) -> None:
        found.setdefault(name, []).append((kind, value))

    def add_target(target: cst.BaseExpression, kind: str, value, part_kind: str = "unknown") -> None:
        if isinstance(target, cst.Name):
            add(target.value, kind, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                add_target(element.value, part_kind, value, part_kind)
        elif isinstance(target, cst.StarredElement):
            add_target(target.value, "unknown", None)

    if isinstance(scope, cst.FunctionDef):
        params = scope.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            add(param.name.value, "param", param.annotation.annotation if param.annotation else None)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                add(star.name.value, "unknown", None)
    for node in _scope_nodes(scope):
        if type(node) not in _BINDING_TYPES:
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                add_target(target.target, "value", node.value, "part")
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                add_target(node.target, "value", node.value)
        elif isinstance(node, cst.AugAssign):
            add_target(node.target, "aug", node.value)
        elif isinstance(node, (cst.For, cst.CompFor)):
            add_target(node.target, "iter", node.iter, "iter_part")
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            add(node.name.value, "unknown", None)
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            for item in node.names:
                add(item.name.value, "unknown", None)
        elif isinstance(node, cst.WithItem):
            if node.asname is not None and isinstance(node.asname.name, cst.Name):
                with_names.add(id(node.asname))
                add(node.asname.name.value, "with", node.item)
        elif isinstance(node, cst.AsName):
            if id(node) not in with_names:
                add_target(node.name, "unknown", None)
        elif isinstance(node, cst.NamedExpr):
            add_target(node.target, "value", node.value)
        elif isinstance(node, cst.If):
            subject = _isinstance_tensor_name(node.test)
            if subject is not None and _assigns(node.body, subject):
                converted.add(subject)
        elif isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(node, "names", None), cst.ImportStar):
            for alias in node.names:
                if alias.asname is None:
                    name = alias.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    if isinstance(name, cst.Name):
                        add(name.value, "unknown", None)
    return _Bindings(found, converted)


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


def _collect_attribute_bindings(cls: cst.ClassDef) -> Dict[str, List[tuple]]:
    """``attr -> [(kind, value, method)]`` for every ``self.attr`` binding in the
    methods of a class (``self`` being each method's first parameter)."""
    found: Dict[str, List[tuple]] = {}
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for statement in body:
        if not isinstance(statement, cst.FunctionDef):
            continue
        params = statement.params.params or statement.params.posonly_params
        if not params:
            continue
        me = params[0].name.value

        def own(target: cst.BaseExpression) -> Optional[str]:
            if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == me:
                return target.attr.value
            return None

        for node in _scope_nodes(statement):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    attr = own(target.target)
                    if attr is not None:
                        found.setdefault(attr, []).append(("value", node.value, statement))
                    elif isinstance(target.target, (cst.Tuple, cst.List)):
                        for element in target.target.elements:
                            attr = own(element.value)
                            if attr is not None:
                                found.setdefault(attr, []).append(("unknown", None, statement))
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                attr = own(node.target)
                if attr is not None and node.value is not None:
                    found.setdefault(attr, []).append(("aug" if isinstance(node, cst.AugAssign) else "value", node.value, statement))
    return found


def _isinstance_tensor_name(test: cst.BaseExpression) -> Optional[str]:
    """The name tested by ``isinstance(name, torch.Tensor)`` (see
    ``isinstance_tensor_subject``), if it is a plain name."""
    subject = isinstance_tensor_subject(test)
    return subject.value if isinstance(subject, cst.Name) else None


def _names_tokenizer(func: cst.BaseExpression) -> bool:
    """``tokenizer``, ``self.tokenizer``, ``tokenizer.encode``, ``tokenize``."""
    for part in (func, func.value if isinstance(func, cst.Attribute) else None):
        name = last_name(part) if part is not None else None
        if name is not None and "tokeniz" in name.lower():
            return True
    return False


def _chain_mentions(expr: cst.BaseExpression, words) -> bool:
    """Whether the receiver chain of ``expr`` (``state_dict.pop(k)``,
    ``ckpt["model"][k]``, ``self.sd[k]``) names one of ``words`` (or is a
    state dict abbreviated ``sd``/``*_sd``)."""
    node: Optional[cst.BaseExpression] = expr
    while node is not None:
        if isinstance(node, cst.Call):
            node = node.func
            continue
        if isinstance(node, cst.Subscript):
            node = node.value
            continue
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = (node.value if isinstance(node, cst.Name) else node.attr.value).lower()
            if any(word in name for word in words) or name == "sd" or name.endswith("_sd"):
                return True
            node = node.value if isinstance(node, cst.Attribute) else None
            continue
        return False
    return False


def _initialised_before(scope: cst.CSTNode, name: str, loop: cst.CSTNode) -> bool:
    """``name = <number literal>`` in the scope before ``loop`` starts, and
    ``name`` not declared ``global``/``nonlocal`` there."""
    initialised = False
    for node in _scope_nodes(scope):
        if isinstance(node, (cst.Global, cst.Nonlocal)) and any(i.name.value == name for i in node.names):
            return False
        if node is loop:
            if not initialised:
                return False
        if (
            not initialised
            and isinstance(node, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
            and literal_number(node.value) is not None
        ):
            initialised = True
    return initialised


def _used_elsewhere_in_loop(loop: cst.CSTNode, name: str, target: cst.Name) -> bool:
    """Whether ``name`` occurs in the loop other than as ``target``, outside a
    periodic guard (a read there would synchronize every iteration anyway)."""
    roots: List[cst.CSTNode] = [loop.body]
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
