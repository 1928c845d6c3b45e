from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from torchlint.codemods import item_in_loop as codemod
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Rule, contains_modulo
from torchlint.rules._helpers import (
    device_kind,
    keyword,
    last_name,
    literal_number,
    method_name,
    positional,
    receiver,
)


class ItemInLoop(Rule):
    """
    ## What it does
    Reports `<tensor>.item()` and `<tensor>.tolist()` called in a loop: in the
    body of a `for`/`while` statement or of a comprehension, in the same
    function, and not under a periodic guard such as `if step % log_every == 0:`.

    Receivers that are certainly not device tensors are not reported: NumPy and
    pandas values (`np.argmax(a).item()`, `x.cpu().numpy().tolist()`,
    `df["col"].values.tolist()`, a local name assigned only such values), data
    already copied to the host (`x.cpu().item()`, reported by TL102 at the
    `.cpu()`), tensors built on the CPU (`torch.randperm(n).tolist()`), and
    literals. A call that runs at most once per loop (in a `return` or `raise`,
    or in a block that ends with `break`/`return`/`raise`) is not reported either.

    ## Why is this bad?
    CUDA kernels run asynchronously: the host queues work and moves on while the
    device computes. `.item()` and `.tolist()` must hand back a Python value,
    so the host stops and waits until the device has finished *all* the work
    queued so far, then copies the result back. Done every iteration, this
    serialises host and device: the device idles while the host prepares the
    next step, and the host idles while the device drains its queue. The PyTorch
    Performance Tuning Guide lists these calls among the unnecessary CPU-GPU
    synchronizations to avoid.

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
        "import torch\nvalues = [t.item() for t in tensors]\n",
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
        self._bindings: Dict[int, Dict[str, List[tuple]]] = {}
        source = context.source
        self._default_device_changed = "set_default_device" in source or bool(
            re.search(r"with\s+\w+(\.\w+)*\.device\(", source)
        )

    def visit_Call(self, node: cst.Call) -> None:
        name = method_name(node)
        if name not in ("item", "tolist") or node.args:
            return
        ctx = self.context
        loop = ctx.enclosing_loop()
        if loop is None:
            return
        if self._runs_once(loop):
            return
        scope = self._scope()
        recv = receiver(node)
        assert recv is not None
        if self._is_host(recv, scope, 0, set()):
            return
        self.report(node, self._MESSAGES[name], fix=self._accumulation_fix(node, recv, loop, scope))

    # -- runs at most once per loop -------------------------------------------
    def _runs_once(self, loop: cst.CSTNode) -> bool:
        for ancestor in self.context.ancestors():
            if ancestor is loop:
                return False
            if isinstance(ancestor, (cst.Return, cst.Raise)):
                return True
            if isinstance(ancestor, (cst.IndentedBlock, cst.SimpleStatementSuite)) and _ends_with_exit(ancestor):
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

    def _scope_bindings(self, scope: cst.CSTNode) -> Dict[str, List[tuple]]:
        cached = self._bindings.get(id(scope))
        if cached is None:
            cached = _collect_bindings(scope)
            self._bindings[id(scope)] = cached
        return cached

    # -- is the value certainly not a device tensor? ---------------------------
    def _is_host(self, expr: cst.BaseExpression, scope: Optional[cst.CSTNode], depth: int, seen: Set[tuple]) -> bool:
        if depth > 6:
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

    def _call_is_host(self, call: cst.Call, scope, depth: int, seen: Set[tuple]) -> bool:
        ctx = self.context
        func = call.func
        q = ctx.qualname(func)
        if q is not None:
            if _is_host_module(q):
                return True
            if q.startswith("torch."):
                return self._torch_call_is_host(call, q[len("torch."):], scope, depth, seen)
            return False
        if isinstance(func, cst.Name):
            name = func.value
            return name in _HOST_BUILTINS and ctx.imports.resolve(name) is None and name not in ctx.imports.defined
        name = method_name(call)
        if name in _HOST_METHODS:
            return True
        if name == "to":
            target = keyword(call, "device")
            args = positional(call)
            if target is None and args:
                target = args[0]
            return target is not None and device_kind(target.value, ctx) == "cpu"
        if name in _DEVICE_METHODS or not isinstance(func, cst.Attribute):
            # `nn.CrossEntropyLoss()(out, y)`, `fns[i](x)`: a call of a call's
            # result says nothing about where the result lives.
            return False
        return self._is_host(func.value, scope, depth + 1, seen)  # a method of a host value

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

    def _name_is_host(self, name: str, scope, depth: int, seen: Set[tuple]) -> bool:
        if scope is None:
            return False
        key = (id(scope), name)
        if key in seen:
            return True  # a cycle adds nothing: the other bindings decide
        bindings = self._scope_bindings(scope).get(name)
        if not bindings and not isinstance(scope, cst.Module):
            scope = self.context.module
            key = (id(scope), name)
            if key in seen:
                return True
            bindings = self._scope_bindings(scope).get(name) if scope is not None else None
        if not bindings:
            return False
        seen = seen | {key}
        for kind, value in bindings:
            if kind in ("value", "aug"):
                ok = self._is_host(value, scope, depth + 1, seen)
            elif kind == "iter":
                ok = not isinstance(value, _COLLECTION_LITERALS) and self._is_host(value, scope, depth + 1, seen)
            elif kind == "param":
                ok = value is not None and self._annotation_is_host(value)
            else:
                ok = False
            if not ok:
                return False
        return True

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


def _is_host_module(qualname: str) -> bool:
    root = qualname.split(".", 1)[0]
    return root in _HOST_MODULE_ROOTS


def _ends_with_exit(block: cst.CSTNode) -> bool:
    """Whether a block's last statement is ``break``, ``return`` or ``raise``."""
    body = block.body
    if not body:
        return False
    last = body[-1]
    if isinstance(block, cst.SimpleStatementSuite):
        return isinstance(last, (cst.Break, cst.Return, cst.Raise))
    return isinstance(last, cst.SimpleStatementLine) and isinstance(
        last.body[-1], (cst.Break, cst.Return, cst.Raise)
    )


_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


def _children(node: cst.CSTNode) -> List[cst.CSTNode]:
    return list(node.children)


def _scope_nodes(scope: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk of a scope's body, not entering nested functions or classes
    (which are yielded themselves)."""
    body = scope.body
    todo: List[cst.CSTNode] = [body] if isinstance(body, cst.CSTNode) else list(reversed(body))
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, _NESTED_SCOPES):
            continue
        todo.extend(reversed(_children(node)))


def _collect_bindings(scope: cst.CSTNode) -> Dict[str, List[tuple]]:
    """``name -> [(kind, value)]`` for every binding of a name in a scope.

    kinds: ``value`` (``name = value``), ``aug`` (``name op= value``), ``iter``
    (``for name in value``), ``param`` (value: the annotation or None),
    ``unknown`` (anything else: unpacking, ``with ... as``, ``global``...).
    """
    found: Dict[str, List[tuple]] = {}

    def add(name: str, kind: str, value) -> None:
        found.setdefault(name, []).append((kind, value))

    def add_target(target: cst.BaseExpression, kind: str, value) -> None:
        if isinstance(target, cst.Name):
            add(target.value, kind, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                add_target(element.value, "unknown", None)
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
        if isinstance(node, cst.Assign):
            for target in node.targets:
                add_target(target.target, "value", node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                add_target(node.target, "value", node.value)
        elif isinstance(node, cst.AugAssign):
            add_target(node.target, "aug", node.value)
        elif isinstance(node, (cst.For, cst.CompFor)):
            add_target(node.target, "iter", node.iter)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            add(node.name.value, "unknown", None)
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            for item in node.names:
                add(item.name.value, "unknown", None)
        elif isinstance(node, cst.AsName):
            add_target(node.name, "unknown", None)
        elif isinstance(node, cst.NamedExpr):
            add_target(node.target, "value", node.value)
        elif isinstance(node, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(node, "names", None), cst.ImportStar):
            for alias in node.names:
                if alias.asname is None:
                    name = alias.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    if isinstance(name, cst.Name):
                        add(name.value, "unknown", None)
    return found


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
        todo.extend(_children(node))
    return False
