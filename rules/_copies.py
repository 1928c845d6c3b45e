"""Host-to-device copies of a loader's batches (TL204; asked by the project
index too): which `for` loops iterate something that may be a loader, what
their bodies do with the loop's data in source order (copies with `.to(...)`
/ `.cuda(...)`, writes into the batch, rebinding), and whether a copy passes
`non_blocking=True` and where it goes.

``CopyLoops`` is a mixin for a rule: its visitor methods record the loops and
the events of their bodies; the rule decides in ``leave_Module`` with
``_copies`` and ``_destination``, asking the semantic model (through
``PinnedLoaders``, rules/_loaders.py) what the loops iterate.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.rules._helpers import (
    argument,
    blocking_flag,
    device_type,
    has_star,
    is_accelerator_string,
    keyword,
    last_name,
    literal_bool,
    method_name,
    moves_to_device,
    positional,
    receiver,
    string_value,
)
from torchlint.rules._loaders import PinnedLoaders, is_dataloader
from torchlint.rules._project_text import PINNED, PINNED_CALL, trait_key
from torchlint.semantic import Location, location_of

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_STATEMENTS = (cst.BaseSmallStatement, cst.BaseCompoundStatement)
# Device types that do not take pinned host memory.
_UNPINNABLE = ("mps", "meta", "cpu")
# In-place methods that do not write into the tensor's data.
_METADATA_ONLY = frozenset({"requires_grad_", "share_memory_", "record_stream"})

_Event = Tuple

# Methods whose result shares memory with the receiver: writing into the
# result writes into the batch.
_ALIASING_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t",
        "narrow", "select", "expand", "expand_as", "unfold", "split", "chunk", "unbind", "numpy",
        "detach", "as_strided", "contiguous", "movedim", "swapaxes", "diagonal", "values", "items",
        "get", "pin_memory",
    }
)
# Builtins whose result holds the argument's tensors themselves.
_ALIASING_BUILTINS = frozenset(
    {"list", "tuple", "dict", "sorted", "reversed", "zip", "enumerate", "iter", "next", "min", "max", "getattr"}
)
# Builtins that neither write into their arguments nor return them.
_PURE_BUILTINS = frozenset(
    {
        "len", "print", "isinstance", "type", "id", "repr", "str", "format", "hash", "bool", "int",
        "float", "hasattr", "any", "all", "sum", "callable",
    }
)
# Attributes that only describe a tensor (reading them cannot write data).
_METADATA = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_sparse", "names"}
)


class _Loop:
    """A `for` over something that may be a pinned loader, with what happens
    in its body, in source order."""

    __slots__ = ("node", "loader", "target", "location", "events")

    def __init__(self, node: cst.For, loader: cst.BaseExpression, target: cst.BaseExpression, location: Location) -> None:
        self.node = node
        self.loader = loader
        self.target = target
        self.location = location
        self.events: List[_Event] = []



class CopyLoops:
    """Visitor methods that record, for a rule, the loops over possible
    loaders and the events of their bodies (``self._loops``).  The rule sets
    ``self._active``."""

    def __init__(self, context) -> None:
        super().__init__(context)
        self._frames: List[List[_Loop]] = [[]]
        self._loops: List[_Loop] = []
        self._active = True

    def _note_pinned_factories(self, module: cst.Module, pinned: PinnedLoaders) -> None:
        """Ask the project index about the module-level functions that return a
        `DataLoader(..., pin_memory=True)` of this module: their callers in
        other modules may copy its batches."""
        for statement in module.body:
            if isinstance(statement, cst.FunctionDef):
                loaders = pinned.factory(statement, (module,))
                if loaders and all(is_dataloader(loader, self.context) for loader, _ in loaders):
                    self.context.pending.add(trait_key(statement.name.value, PINNED))

    # -- scopes ------------------------------------------------------------------
    def _enter(self, node) -> None:
        if self._active:
            self._frames.append([])

    def _leave(self, node) -> None:
        if self._active:
            self._frames.pop()

    visit_FunctionDef = _enter
    visit_ClassDef = _enter
    visit_Lambda = _enter
    leave_FunctionDef = _leave
    leave_ClassDef = _leave
    leave_Lambda = _leave

    # -- events ------------------------------------------------------------------
    def leave_Assign(self, node: cst.Assign) -> None:
        if self._active and self._frames[-1]:
            targets = [t.target for t in node.targets]
            self._event(("assign", targets, node.value))
            for target in targets:
                if isinstance(target, cst.Subscript) and not _string_key(target):
                    self._event(("mutate", target.value))

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self._active and self._frames[-1] and node.value is not None:
            self._event(("assign", [node.target], node.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self._active and self._frames[-1]:
            self._event(("mutate", node.target))

    def leave_NamedExpr(self, node: cst.NamedExpr) -> None:
        if self._active and self._frames[-1]:
            self._event(("kill", node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if self._active and node.asname is not None and self._frames[-1]:
            self._event(("kill", node.asname.name))

    # -- loops and copies --------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        if not self._active:
            return
        frame = self._frames[-1]
        if frame:
            self._event(("for", node.target, node.iter))
        unwrapped = self._unwrap(node.iter, node.target)
        if unwrapped is not None:
            loop = _Loop(node, unwrapped[0], unwrapped[1], self.context.location())
            frame.append(loop)
            self._loops.append(loop)

    def leave_For(self, node: cst.For) -> None:
        if self._active:
            frame = self._frames[-1]
            if frame and frame[-1].node is node:
                frame.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._active:
            return
        if not self._frames[-1]:
            return
        name = method_name(node)
        if name in ("to", "cuda"):
            if moves_to_device(node, self.context) is not None:
                self._event(("move", node, self._comprehension_binds(), self._on_side_stream()))
        elif name is not None and name.endswith("_") and not name.startswith("__") and name not in _METADATA_ONLY:
            self._event(("mutate", receiver(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        """A call that takes the loop's data as an argument and may write into
        it (`augment(x)`, `F.relu(x, inplace=True)`, `torch.add(x, 1, out=x)`),
        recorded after its arguments (a copy among them runs first)."""
        if not self._active or not self._frames[-1] or not original_node.args:
            return
        if self._leaves_arguments_alone(original_node):
            return
        for arg in original_node.args:
            value = arg.value
            if isinstance(value, cst.Attribute) and value.attr.value in _METADATA:
                continue
            if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)):
                self._event(("mutate", value))

    def _leaves_arguments_alone(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Name) and _builtin(func.value, self.context):
            return func.value in _PURE_BUILTINS or func.value in _ALIASING_BUILTINS
        qualified = self.context.qualname(func)
        if qualified is None or not qualified.startswith("torch.") or qualified.endswith("_"):
            return False
        if keyword(call, "out") is not None:
            return False
        inplace = keyword(call, "inplace")
        if inplace is not None and literal_bool(inplace.value) is not False:
            return False
        if qualified.startswith("torch.nn.functional.") and len(positional(call)) > 1:
            return False  # `F.relu(x, True)`: `inplace` given by position
        return True

    def _event(self, event: _Event) -> None:
        for loop in self._frames[-1]:
            loop.events.append(event)

    def _unwrap(
        self, iterable: cst.BaseExpression, target: cst.BaseExpression
    ) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
        """``enumerate(tqdm(loader))`` -> ``(loader, <the data part of target>)``."""
        ctx = self.context
        for _ in range(4):
            if not isinstance(iterable, cst.Call):
                break
            func = iterable.func
            pos = positional(iterable)
            first = pos[0].value if pos and not iterable.args[0].star else None
            if isinstance(func, cst.Name) and func.value in ("enumerate", "iter") and _builtin(func.value, ctx):
                if first is None:
                    return None
                if func.value == "enumerate":
                    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 2:
                        return None
                    if any(isinstance(e, cst.StarredElement) for e in target.elements):
                        return None
                    target = target.elements[1].value
                iterable = first
                continue
            qualified = ctx.qualname(func)
            if qualified is not None and qualified.split(".", 1)[0] == "tqdm" and qualified.endswith(".tqdm"):
                if first is None:
                    return None
                iterable = first
                continue
            break
        if isinstance(iterable, (cst.Name, cst.Attribute)):
            return iterable, target
        if isinstance(iterable, cst.Call) and not (isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
            return iterable, target
        return None

    def _comprehension_binds(self) -> List[Tuple[cst.BaseExpression, cst.BaseExpression]]:
        """The ``for`` clauses of the comprehensions around the node being visited,
        outermost first."""
        binds: List[Tuple[cst.BaseExpression, cst.BaseExpression]] = []
        stack = self.context.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if isinstance(node, _STATEMENTS):
                break
            if isinstance(node, _COMPREHENSIONS):
                chain = []
                clause: Optional[cst.CompFor] = node.for_in
                while clause is not None:
                    chain.append((clause.target, clause.iter))
                    clause = clause.inner_for_in
                binds = chain + binds
        return binds

    def _on_side_stream(self) -> bool:
        """Inside ``with torch.cuda.stream(...)`` (or any ``with ....stream(...)``)."""
        for node in self.context.ancestors():
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(node, cst.With):
                for item in node.items:
                    call = item.item
                    if isinstance(call, cst.Call) and last_name(call.func) in ("stream", "StreamContext"):
                        return True
        return False

    # -- deciding ------------------------------------------------------------------

    def _destination(self, call: cst.Call, location: Location, host_batches: bool) -> bool:
        """Whether `non_blocking=True` is safe for where this copy goes: a
        CUDA device (`.cuda()`, `"cuda:0"`), or a name assigned only CUDA or
        CPU devices in this module (`torch.device("cuda" if ... else "cpu")`).
        A device from elsewhere may be MPS, where a non-blocking copy from
        pageable memory (the loader does not pin on MPS) can read the batch
        after it is freed. A CPU destination is safe only for host batches:
        a batch object of its own is not pinned and may hold CUDA tensors, and
        a non-blocking device-to-host copy is read before it has arrived."""
        if method_name(call) == "cuda":
            return True
        _, device = argument(call, "device", 0)
        if device is None:
            return False
        kinds = self._device_kinds(device.value, location, 0)
        if kinds is None:
            return False
        return "cpu" not in kinds or host_batches

    def _device_kinds(self, expr: cst.BaseExpression, location: Location, depth: int) -> Optional[set]:
        """The device types ``expr`` may be, when only "cuda" and "cpu"."""
        if depth > 6:
            return None
        if isinstance(expr, cst.Integer):
            return {"cuda"}
        if isinstance(expr, cst.FormattedString):
            first = expr.parts[0] if expr.parts else None
            if isinstance(first, cst.FormattedStringText) and first.value.startswith("cuda"):
                return {"cuda"}
            return None
        kind = device_type(expr, self.context)
        if kind is not None:
            return {kind} if kind in ("cuda", "cpu") else None
        if isinstance(expr, cst.IfExp):
            body = self._device_kinds(expr.body, location, depth + 1)
            orelse = self._device_kinds(expr.orelse, location, depth + 1)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(expr, cst.Call) and self.context.qualname(expr.func) == "torch.device":
            pos = positional(expr)
            if pos and not expr.args[0].star:
                return self._device_kinds(pos[0].value, location, depth + 1)
            return None
        if isinstance(expr, cst.Name):
            bindings = self.context.semantic.bindings(expr.value, location)
            if not bindings:
                return None
            kinds: set = set()
            for binding in bindings:
                if binding.kind != "value":
                    return None
                found = self._device_kinds(binding.value, binding.location, depth + 1)
                if found is None:
                    return None
                kinds |= found
            return kinds
        return None

    def _copies(self, loop: _Loop, whole_batch_ok: bool) -> List[list]:
        """Replay the loop body: which copies take the loop's data, and whether
        the data is written in place afterwards."""
        data: Dict[str, str] = {}
        if isinstance(loop.target, cst.Name):
            data[loop.target.value] = "whole"
        else:
            _bind_names(data, loop.target, "part")
        found: List[list] = []
        for event in loop.events:
            kind = event[0]
            if kind == "assign":
                for target in event[1]:
                    _bind(data, target, event[2])
            elif kind == "for":
                _bind_iteration(data, event[1], event[2])
            elif kind == "kill":
                _bind_names(data, event[1], None)
            elif kind == "mutate":
                if event[1] is not None and _root(event[1]) in data:
                    for item in found:
                        item[2] = False
            elif kind == "move":
                call, binds, side_stream = event[1], event[2], event[3]
                if side_stream:
                    continue
                local = data
                if binds:
                    local = dict(data)
                    for target, iterable in binds:
                        _bind_iteration(local, target, iterable)
                verdict = self._missing_non_blocking(call, local, whole_batch_ok)
                if verdict is not None:
                    found.append([call, verdict[1], verdict[1] is None])
        return found

    def _missing_non_blocking(
        self, call: cst.Call, data: Dict[str, str], whole_batch_ok: bool
    ) -> Optional[Tuple[str, Optional[cst.Arg]]]:
        """``("absent", None)`` or ``("false", arg)`` for a copy of the loop's
        data without ``non_blocking=True``; None otherwise."""
        recv = receiver(call)
        if recv is None:
            return None
        root = _root(recv)
        if root is None or root not in data or data[root] == "alias":
            return None
        if isinstance(recv, cst.Name) and data[root] == "whole" and not whole_batch_ok:
            return None
        if has_star(call):
            return None
        pos = positional(call)
        device = keyword(call, "device")
        if device is None and pos:
            device = pos[0]
        if device is not None and device_type(device.value, self.context) in _UNPINNABLE:
            return None
        return blocking_flag(call)


# -- the loop's data ------------------------------------------------------------------


def _root(expr: cst.BaseExpression) -> Optional[str]:
    """``batch["x"].y`` -> ``"batch"``; a call or anything else -> None."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _kind(expr: cst.BaseExpression, data: Dict[str, str]) -> Optional[str]:
    """``"whole"`` for a name holding a whole batch, ``"part"`` for anything
    taken from the loop's data, ``"alias"`` for a value that shares memory
    with it without being a batch of the loader (``x.view(-1)``,
    ``x.numpy()``, ``list(batch)``: writing into it writes into the batch,
    but it is not reported as a copy), None otherwise."""
    if isinstance(expr, cst.Name):
        return data.get(expr.value)
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        root = _root(expr)
        if root not in data:
            return None
        return "alias" if data[root] == "alias" else "part"
    if isinstance(expr, cst.Call):
        name = method_name(expr)
        if name in _ALIASING_METHODS:
            source = receiver(expr)
            return "alias" if source is not None and _kind(source, data) else None
        if isinstance(expr.func, cst.Name) and expr.func.value in _ALIASING_BUILTINS:
            if any(_kind(arg.value, data) for arg in expr.args):
                return "alias"
    return None


def _derived(kind: Optional[str]) -> Optional[str]:
    """The kind of a part of a value of kind ``kind``."""
    if kind is None:
        return None
    return "alias" if kind == "alias" else "part"


def _bind_names(data: Dict[str, str], target: cst.BaseExpression, kind: Optional[str]) -> None:
    if isinstance(target, cst.Name):
        if kind is None:
            data.pop(target.value, None)
        else:
            data[target.value] = kind
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind_names(data, element.value, kind)
    elif isinstance(target, cst.StarredElement):
        _bind_names(data, target.value, kind)


def _bind(data: Dict[str, str], target: cst.BaseExpression, value: cst.BaseExpression) -> None:
    """``target = value``."""
    if isinstance(target, (cst.Tuple, cst.List)):
        if (
            isinstance(value, (cst.Tuple, cst.List))
            and len(value.elements) == len(target.elements)
            and not any(isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements))
        ):
            for t, v in zip(target.elements, value.elements):
                _bind(data, t.value, v.value)
            return
        _bind_names(data, target, _derived(_kind(value, data)))
    elif isinstance(target, (cst.Name, cst.StarredElement)):
        _bind_names(data, target, _kind(value, data))


def _bind_iteration(data: Dict[str, str], target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
    """``for target in iterable`` (a statement or a comprehension clause)."""
    if isinstance(iterable, cst.Call) and not iterable.args and method_name(iterable) in ("items", "values"):
        source = receiver(iterable)
        kind = _kind(source, data) if source is not None else None
        if kind:
            if method_name(iterable) == "values":
                _bind_names(data, target, _derived(kind))
                return
            if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
                _bind_names(data, target.elements[0].value, None)
                _bind_names(data, target.elements[1].value, _derived(kind))
                return
    _bind_names(data, target, _derived(_kind(iterable, data)))


def _string_key(target: cst.Subscript) -> bool:
    """``batch["image"] = ...`` replaces an entry of a mapping; it does not
    write into a tensor."""
    return len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) and isinstance(
        target.slice[0].slice.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
    )


def _builtin(name: str, ctx) -> bool:
    return name not in ctx.imports.defined and ctx.imports.resolve(name) is None


def pinned_loaders_given(context) -> bool:
    """Whether the project index told this file that a function of another
    module returns a pinned loader that it iterates (TL204 then walks it)."""
    suffix = trait_key("", PINNED_CALL)
    return any(key.endswith(suffix) for key in context.project.get("frequency", {}))


# -- across modules: does a caller copy the batches of the loader it gets? ----------

_LOOP_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "zip"})
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_NOT_PINNABLE = ("mps", "meta")  # devices that pinned memory does not help (TL202)


def batches_copied(call: cst.Call, stack: List[cst.CSTNode], semantic) -> bool:
    """Whether the loader that ``call`` returns is iterated by a ``for`` whose
    body copies the loop's data to a device (``.cuda(...)``, ``.to(<device>)``
    with or without ``non_blocking``), as the project index asks of the callers
    of a function that returns a `DataLoader` (``stack``: the call's ancestors,
    module first).  The loop is ``for b in call`` (through ``enumerate``,
    ``tqdm``, ``iter``), or over a name, or ``self.attr``, every binding of which
    in its scope (or the class's methods) is a call of the same callee."""
    node, i = call, len(stack) - 1
    while i >= 2 and isinstance(stack[i - 1], cst.Arg) and isinstance(stack[i - 2], cst.Call):
        outer = stack[i - 2]
        if last_name(outer.func) not in _LOOP_WRAPPERS or outer.args[0] is not stack[i - 1]:
            break
        node, i = outer, i - 2
    parent = stack[i - 1] if i >= 1 else None
    if isinstance(parent, cst.For) and parent.iter is node:
        return _loop_copies(parent, stack[: i - 1], semantic)
    if node is not call or not isinstance(parent, cst.Assign) or len(parent.targets) != 1:
        return False
    target = parent.targets[0].target
    callee = cst.Module([]).code_for_node(call.func)
    location = location_of(stack)
    if isinstance(target, cst.Name):
        bindings = semantic.bindings(target.value, location)
        scope = location.scope
        wanted = target.value
    elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
        cls = location.scopes[-2] if len(location.scopes) >= 2 else None
        if not isinstance(cls, cst.ClassDef):
            return False
        bindings = semantic.attribute_bindings(cls, Location(location.scopes[:-2], ())).get(target.attr.value, [])
        scope = cls
        wanted = f"self.{target.attr.value}"
    else:
        return False
    if not bindings or not all(
        b.kind == "value" and isinstance(b.value, cst.Call) and cst.Module([]).code_for_node(b.value.func) == callee
        for b in bindings
    ):
        return False
    at = next((n for n, node in enumerate(stack) if node is scope), None)
    for loop, loop_stack in _loops_in(scope, stack[: at + 1] if at is not None else [scope]):
        iterable = loop.iter
        while isinstance(iterable, cst.Call) and last_name(iterable.func) in _LOOP_WRAPPERS and iterable.args:
            iterable = iterable.args[0].value
        if isinstance(iterable, (cst.Name, cst.Attribute)) and cst.Module([]).code_for_node(iterable) == wanted:
            if _loop_copies(loop, loop_stack, semantic):
                return True
    return False


def _loops_in(scope: cst.CSTNode, prefix: List[cst.CSTNode]):
    """The ``for`` statements of a scope (and, for a class, of its methods),
    not those of nested functions, with their ancestors."""
    from torchlint.nodes import iter_children

    todo = [(child, [*prefix, child]) for child in iter_children(scope)]
    while todo:
        node, chain = todo.pop()
        if isinstance(node, cst.For):
            yield node, chain[:-1]
        if isinstance(node, _NESTED_SCOPES) and not (
            isinstance(scope, cst.ClassDef) and any(node is n for n in _body_of(scope))
        ):
            continue
        todo.extend((child, [*chain, child]) for child in iter_children(node))


def _body_of(node: cst.CSTNode) -> List[cst.CSTNode]:
    body = getattr(node, "body", None)
    return list(getattr(body, "body", ()))


def _loop_copies(loop: cst.For, ancestors: List[cst.CSTNode], semantic) -> bool:
    """Whether the loop's body copies its data (the target's names, names
    assigned from them, comprehension variables over them) to a device."""
    from torchlint.nodes import iter_children

    data = set()
    _names_in(loop.target, data)
    todo = [(loop.body, [*ancestors, loop, loop.body])]
    while todo:
        node, chain = todo.pop(0)
        if isinstance(node, _NESTED_SCOPES):
            continue
        if isinstance(node, cst.Assign) and _data_root(node.value) in data:
            for target in node.targets:
                _names_in(target.target, data)
        elif isinstance(node, _COMPREHENSIONS):  # its `for` clauses before its element
            clause: Optional[cst.CompFor] = node.for_in
            while clause is not None:
                if _data_root(clause.iter) in data:
                    _names_in(clause.target, data)
                clause = clause.inner_for_in
        elif isinstance(node, cst.Call) and method_name(node) in ("to", "cuda"):
            recv = receiver(node)
            if recv is not None and _data_root(recv) in data and _to_a_device(node, chain, semantic):
                return True
        todo[:0] = [(child, [*chain, child]) for child in iter_children(node)]
    return False


def _names_in(target: cst.BaseExpression, into: set) -> None:
    if isinstance(target, cst.Name):
        into.add(target.value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _names_in(element.value, into)
    elif isinstance(target, cst.StarredElement):
        _names_in(target.value, into)


def _data_root(expr: cst.BaseExpression) -> Optional[str]:
    """``batch["x"].items()`` -> ``"batch"``: the name under items, attributes and methods."""
    while True:
        if isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        else:
            return expr.value if isinstance(expr, cst.Name) else None


def _to_a_device(call: cst.Call, chain: List[cst.CSTNode], semantic) -> bool:
    """``.cuda(...)``, or ``.to(...)`` given a device that is not the CPU, MPS
    or meta: ``"cuda:0"``, an ordinal, ``torch.device(...)``, a name such as
    ``device``/``self.device``/``args.device`` (and, for a name, no binding of
    it that is visibly such a string)."""
    if method_name(call) == "cuda":
        return True
    if has_star(call):
        return False
    _, arg = argument(call, "device", 0)
    if arg is None:
        return False
    expr = arg.value
    if isinstance(expr, cst.Call) and last_name(expr.func) == "device" and positional(expr):
        expr = positional(expr)[0].value
    text = string_value(expr)
    if text is not None:
        return is_accelerator_string(text) and text.split(":", 1)[0].strip() not in _NOT_PINNABLE
    if isinstance(expr, cst.Integer) or (isinstance(arg.value, cst.Call) and last_name(arg.value.func) == "device"):
        return True
    name = last_name(expr)
    lowered = (name or "").lower()
    if not (lowered in ("device", "dev", "_device") or lowered.endswith("_device") or lowered.startswith("device_")):
        return False
    if isinstance(expr, cst.Name):
        for b in semantic.bindings(expr.value, location_of(chain)):
            value = b.value
            if isinstance(value, cst.Call) and last_name(value.func) == "device" and positional(value):
                value = positional(value)[0].value
            literal = string_value(value) if value is not None else None
            if literal is not None and (
                not is_accelerator_string(literal) or literal.split(":", 1)[0].strip() in _NOT_PINNABLE
            ):
                return False
    return True
