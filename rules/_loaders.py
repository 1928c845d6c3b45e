"""Shared questions about `torch.utils.data.DataLoader` calls (TL203, TL204)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.rule import Context
from torchlint.rules._helpers import argument, is_docstring, literal_bool, positional
from torchlint.rules.tl202_dataloader_pin_memory import DATALOADERS

__all__ = [
    "DATALOADERS", "IN_MEMORY_DATASETS", "ITERABLE_DATASETS", "SUBSETS", "dataset_argument",
    "LoaderIndex", "indexes_memory_only", "is_dataloader", "pins_memory",
]

# Datasets whose items are slices of tensors that already sit in memory.
IN_MEMORY_DATASETS = frozenset(
    {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
)


def is_dataloader(call: cst.Call, ctx: Context) -> bool:
    return ctx.qualname(call.func) in DATALOADERS


def pins_memory(call: cst.Call) -> Optional[bool]:
    """For a `DataLoader(...)` call: True for a literal `pin_memory=True`
    (keyword or 8th positional argument), False when it is absent or `False`,
    None when it cannot be known (a variable, `*args`/`**kwargs`)."""
    known, arg = argument(call, "pin_memory", 7)
    if not known:
        return None
    if arg is None:
        return False
    return literal_bool(arg.value)


def dataset_argument(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The `dataset` given to a `DataLoader(...)` call, if visible."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dataset":
            return arg.value
    pos = positional(call)
    if pos and not (call.args and call.args[0].star):
        return pos[0].value
    return None


# Iterable-style datasets: every worker runs the whole `__iter__` unless the
# dataset shards itself with `get_worker_info()`.
ITERABLE_DATASETS = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)

# Functions that return parts of a dataset without loading anything new.
SUBSETS = frozenset(
    {
        "torch.utils.data.random_split", "torch.utils.data.dataset.random_split",
        "torch.utils.data.Subset", "torch.utils.data.dataset.Subset",
    }
)


# Calls that only convert or reshape an item already in memory.
_CHEAP_FUNCTIONS = frozenset(
    {
        "torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.LongTensor",
        "torch.FloatTensor", "numpy.array", "numpy.asarray",
    }
)
_CHEAP_BUILTINS = frozenset({"len", "int", "float", "bool", "min", "max", "slice", "tuple", "list", "range"})
_CHEAP_METHODS = frozenset(
    {
        "float", "long", "int", "double", "half", "bool", "clone", "detach", "unsqueeze", "squeeze",
        "view", "reshape", "flatten", "permute", "transpose", "contiguous", "astype", "copy",
    }
)


def _indexing_only(expr: Optional[cst.BaseExpression], ctx: Context) -> bool:
    """Names, attributes, subscripts, arithmetic, literals and conversions: no
    work beyond indexing data that is already in memory."""
    if expr is None:
        return True
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Attribute):
        return _indexing_only(expr.value, ctx)
    if isinstance(expr, cst.Subscript):
        if not _indexing_only(expr.value, ctx):
            return False
        for element in expr.slice:
            index = element.slice
            if isinstance(index, cst.Index):
                if index.star is not None or not _indexing_only(index.value, ctx):
                    return False
            elif isinstance(index, cst.Slice):
                if not all(_indexing_only(part, ctx) for part in (index.lower, index.upper, index.step)):
                    return False
            else:
                return False
        return True
    if isinstance(expr, cst.BinaryOperation):
        return _indexing_only(expr.left, ctx) and _indexing_only(expr.right, ctx)
    if isinstance(expr, cst.UnaryOperation):
        return _indexing_only(expr.expression, ctx)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(isinstance(e, cst.Element) and _indexing_only(e.value, ctx) for e in expr.elements)
    if isinstance(expr, cst.Dict):
        return all(
            isinstance(e, cst.DictElement) and _indexing_only(e.key, ctx) and _indexing_only(e.value, ctx)
            for e in expr.elements
        )
    if isinstance(expr, cst.Call):
        if any(arg.star for arg in expr.args):
            return False
        if not all(_indexing_only(arg.value, ctx) for arg in expr.args):
            return False
        func = expr.func
        qualified = ctx.qualname(func)
        if qualified is not None:
            return qualified in _CHEAP_FUNCTIONS
        if isinstance(func, cst.Name):
            return func.value in _CHEAP_BUILTINS and func.value not in ctx.imports.defined
        if isinstance(func, cst.Attribute):
            return func.attr.value in _CHEAP_METHODS and _indexing_only(func.value, ctx)
    return False


def indexes_memory_only(getitem: cst.FunctionDef, ctx: Context) -> bool:
    """Whether a `__getitem__` only indexes data held by the dataset object
    (`return self.x[i], self.y[i]`, `a = self.data[i]; return a, a + 2`,
    `item = {}; item["prompt"] = self.prompt; return item`): assignments (to
    names, or to items of a local built in the function) and a final `return`
    of names, attributes, subscripts, arithmetic and conversions such as
    `torch.tensor(...)` or `.float()`."""
    body = getitem.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    statements = list(body.body)
    if is_docstring(statements[0]):
        statements = statements[1:]
    if not statements:
        return False
    local: set = set()  # names assigned so far: `item = {}` then `item["k"] = ...`
    for i, stmt in enumerate(statements):
        if not isinstance(stmt, cst.SimpleStatementLine):
            return False
        for j, small in enumerate(stmt.body):
            last = i == len(statements) - 1 and j == len(stmt.body) - 1
            if isinstance(small, cst.Return):
                if not last or small.value is None or not _indexing_only(small.value, ctx):
                    return False
            elif isinstance(small, cst.Assign):
                if last or not _indexing_only(small.value, ctx):
                    return False
                for t in small.targets:
                    if _names_only(t.target):
                        local.update(_target_names(t.target))
                    elif not _item_of_local(t.target, local, ctx):
                        return False
            else:
                return False
    return True


def _target_names(target: cst.BaseExpression) -> List[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []


def _item_of_local(target: cst.BaseExpression, local: set, ctx: Context) -> bool:
    """``item["prompt"] = ...`` into a dict (or list) built in the function."""
    return (
        isinstance(target, cst.Subscript)
        and isinstance(target.value, cst.Name)
        and target.value.value in local
        and _indexing_only(target, ctx)
    )


def _names_only(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return True
    if isinstance(target, (cst.Tuple, cst.List)):
        return all(isinstance(e, cst.Element) and _names_only(e.value) for e in target.elements)
    return False


# -- which expressions are pinned DataLoaders (TL204) ---------------------------

_Scope = cst.CSTNode  # a Module, FunctionDef, ClassDef or Lambda
_MAX_DEPTH = 8


class _Binding:
    """One binding of a name: ``kind`` is ``assign`` (``value``, ``index`` for
    one element of an unpacked value), ``param`` (``function``, ``param``),
    ``def``/``class`` (``value`` is the definition) or ``other``."""

    __slots__ = ("kind", "value", "index", "scope", "param")

    def __init__(self, kind: str, value=None, index: Optional[int] = None, scope=None, param=None) -> None:
        self.kind = kind
        self.value = value
        self.index = index
        self.scope = scope
        self.param = param


class LoaderIndex:
    """Bindings, definitions, returns and calls of one module, collected during
    the walk, to answer afterwards: is this expression a `DataLoader` built with
    `pin_memory=True` in this module?

    It follows a name assigned in the same scope (or an enclosing one), an
    element of a tuple, `self.attr` assigned in a method of the same class, a
    function or method of this module that returns such a loader, and a
    parameter of a module-level function (or of a module-level class's
    `__init__`) whose every call in this module passes one.  Anything else
    (a name bound several ways, imports, `global`) is unknown.
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.module: Optional[cst.Module] = None
        self.scopes: List[_Scope] = []
        self.parent: Dict[int, _Scope] = {}
        self.bindings: Dict[Tuple[int, str], List[_Binding]] = {}
        self.attrs: Dict[Tuple[int, str], List[_Binding]] = {}
        self.returns: Dict[int, List[Optional[cst.BaseExpression]]] = {}
        self.generators: set = set()
        self.calls: Dict[str, List[Tuple[cst.Call, _Scope]]] = {}
        self._names: Optional[Dict[str, int]] = None
        self._busy: set = set()

    # -- collecting ------------------------------------------------------------
    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    def enter_module(self, node: cst.Module) -> None:
        self.module = node
        self.scopes = [node]

    def enter(self, node: _Scope) -> None:
        """A def, class or lambda starts (after its name is bound outside)."""
        if isinstance(node, cst.FunctionDef):
            self._bind(node.name.value, _Binding("def", node))
        elif isinstance(node, cst.ClassDef):
            self._bind(node.name.value, _Binding("class", node))
        self.parent[id(node)] = self.scope
        self.scopes.append(node)
        if isinstance(node, cst.FunctionDef):
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self._bind(param.name.value, _Binding("param", node, param=param))
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self._bind(star.name.value, _Binding("other"))
        elif isinstance(node, cst.Lambda):
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self._bind(param.name.value, _Binding("other"))

    def leave(self) -> None:
        self.scopes.pop()

    def _bind(self, name: str, binding: _Binding) -> None:
        binding.scope = self.scope
        self.bindings.setdefault((id(self.scope), name), []).append(binding)

    def _method_class(self, scope: _Scope) -> Optional[cst.ClassDef]:
        """The class of a method (a def directly in a class body)."""
        if isinstance(scope, cst.FunctionDef):
            owner = self.parent.get(id(scope))
            if isinstance(owner, cst.ClassDef):
                return owner
        return None

    def _self_attr(self, target: cst.BaseExpression) -> Optional[Tuple[int, str]]:
        """``self.x`` in a method, as ``(id(class), "x")``."""
        scope = self.scope
        owner = self._method_class(scope)
        if owner is None or not isinstance(target, cst.Attribute) or not isinstance(target.value, cst.Name):
            return None
        params = (*scope.params.posonly_params, *scope.params.params)
        if not params or params[0].name.value != target.value.value:
            return None
        return id(owner), target.attr.value

    def assign(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression], index: Optional[int] = None) -> None:
        """``target = value`` (``value`` None: bound some other way)."""
        if isinstance(target, cst.Name):
            if value is None:
                self._bind(target.value, _Binding("other"))
            else:
                self._bind(target.value, _Binding("assign", value, index))
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = target.elements
            starred = any(isinstance(e, cst.StarredElement) for e in elements)
            for i, element in enumerate(elements):
                if starred or index is not None or isinstance(element, cst.StarredElement):
                    self.assign(element.value, None)
                else:
                    self.assign(element.value, value, i)
        elif isinstance(target, cst.StarredElement):
            self.assign(target.value, None)
        elif isinstance(target, cst.Attribute):
            key = self._self_attr(target)
            if key is not None:
                binding = _Binding("assign", value, index) if value is not None else _Binding("other")
                binding.scope = self.scope
                self.attrs.setdefault(key, []).append(binding)

    def bind_other(self, name: str) -> None:
        self._bind(name, _Binding("other"))

    def declare_global(self, name: str) -> None:
        """``global``/``nonlocal``: the name is rebound from elsewhere."""
        self._bind(name, _Binding("other"))
        module = self.module
        self.bindings.setdefault((id(module), name), []).append(_Binding("other", scope=module))

    def add_return(self, value: Optional[cst.BaseExpression]) -> None:
        if isinstance(self.scope, cst.FunctionDef):
            self.returns.setdefault(id(self.scope), []).append(value)

    def add_yield(self) -> None:
        if isinstance(self.scope, cst.FunctionDef):
            self.generators.add(id(self.scope))

    def add_call(self, call: cst.Call) -> None:
        if isinstance(call.func, cst.Name):
            self.calls.setdefault(call.func.value, []).append((call, self.scope))

    # -- resolving ---------------------------------------------------------------
    def lookup(self, name: str, scope: _Scope) -> Optional[List[_Binding]]:
        """The bindings of ``name`` seen from ``scope`` (class bodies are not
        enclosing scopes for the functions inside them)."""
        current: Optional[_Scope] = scope
        while current is not None:
            if current is scope or not isinstance(current, cst.ClassDef):
                found = self.bindings.get((id(current), name))
                if found is not None:
                    return found
            current = self.parent.get(id(current))
        return None

    def pinned(self, expr: cst.BaseExpression, scope: _Scope, depth: int = 0) -> Optional[List[cst.Call]]:
        """The `DataLoader(..., pin_memory=True)` calls ``expr`` may evaluate
        to, or None when it may be anything else."""
        if depth > _MAX_DEPTH:
            return None
        key = (id(expr), id(scope))
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return self._pinned(expr, scope, depth)
        finally:
            self._busy.discard(key)

    def _pinned(self, expr: cst.BaseExpression, scope: _Scope, depth: int) -> Optional[List[cst.Call]]:
        if isinstance(expr, cst.Call):
            if is_dataloader(expr, self.ctx):
                return [expr] if pins_memory(expr) is True else None
            function = self._callee(expr, scope)
            return self._factory(function, None, depth) if function is not None else None
        if isinstance(expr, cst.Name):
            return self._all(self.lookup(expr.value, scope), depth)
        if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
            owner = self._method_class(scope)
            if owner is None:
                return None
            params = (*scope.params.posonly_params, *scope.params.params)
            if not params or params[0].name.value != expr.value.value:
                return None
            return self._all(self.attrs.get((id(owner), expr.attr.value)), depth)
        return None

    def _all(self, bindings: Optional[List[_Binding]], depth: int) -> Optional[List[cst.Call]]:
        """Every binding (but ``= None``) is a pinned loader: the loaders, else None."""
        if not bindings:
            return None
        found: List[cst.Call] = []
        for binding in bindings:
            if binding.kind == "assign":
                if binding.index is None and _is_none(binding.value):
                    continue
                result = self._indexed(binding.value, binding.index, binding.scope, depth + 1)
            elif binding.kind == "param":
                result = self._parameter(binding.value, binding.param, depth + 1)
            else:
                result = None
            if result is None:
                return None
            found.extend(result)
        return found or None

    def _indexed(
        self, value: cst.BaseExpression, index: Optional[int], scope: _Scope, depth: int
    ) -> Optional[List[cst.Call]]:
        if index is None:
            return self.pinned(value, scope, depth)
        if isinstance(value, (cst.Tuple, cst.List)):
            elements = value.elements
            if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements):
                return self.pinned(elements[index].value, scope, depth)
            return None
        if isinstance(value, cst.Call):
            function = self._callee(value, scope)
            return self._factory(function, index, depth) if function is not None else None
        return None

    def _callee(self, call: cst.Call, scope: _Scope) -> Optional[cst.FunctionDef]:
        """The function of this module a call runs: ``f(...)`` for a def seen
        from ``scope``, or ``self.f(...)`` for a method of the same class."""
        func = call.func
        if isinstance(func, cst.Name):
            bindings = self.lookup(func.value, scope)
            if bindings and len(bindings) == 1 and bindings[0].kind == "def":
                return bindings[0].value
            return None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            owner = self._method_class(scope)
            if owner is None:
                return None
            params = (*scope.params.posonly_params, *scope.params.params)
            if not params or params[0].name.value != func.value.value:
                return None
            bindings = self.bindings.get((id(owner), func.attr.value))
            if bindings and len(bindings) == 1 and bindings[0].kind == "def":
                return bindings[0].value
        return None

    def _factory(self, function: cst.FunctionDef, index: Optional[int], depth: int) -> Optional[List[cst.Call]]:
        """A function whose every `return` gives a pinned loader (or a tuple
        with one at ``index``)."""
        if id(function) in self.generators:
            return None
        values = [v for v in self.returns.get(id(function), ()) if v is not None and not _is_none(v)]
        if not values:
            return None
        found: List[cst.Call] = []
        for value in values:
            result = self._indexed(value, index, function, depth + 1)
            if result is None:
                return None
            found.extend(result)
        return found

    def _parameter(self, function: cst.FunctionDef, param: cst.Param, depth: int) -> Optional[List[cst.Call]]:
        """A parameter that every call in this module fills with a pinned loader."""
        owner = self.parent.get(id(function))
        module = self.module
        offset = 0
        if owner is module:
            name, definition = function.name.value, function
        elif (
            isinstance(owner, cst.ClassDef)
            and function.name.value == "__init__"
            and self.parent.get(id(owner)) is module
        ):
            name, definition, offset = owner.name.value, owner, 1
        else:
            return None
        bindings = self.bindings.get((id(module), name))
        if not bindings or len(bindings) != 1 or bindings[0].value is not definition:
            return None
        sites = self.calls.get(name, [])
        # Every mention of the name is its definition or one of these calls:
        # it is not passed around, exported or called with other loaders.
        if not sites or self._mentions(name) != len(sites) + 1:
            return None
        params = function.params
        positional_params = [*params.posonly_params, *params.params]
        position = None
        if any(p is param for p in positional_params):
            position = next(i for i, p in enumerate(positional_params) if p is param) - offset
            if position < 0:
                return None
        found: List[cst.Call] = []
        for call, scope in sites:
            if any(arg.star for arg in call.args):
                return None
            arg = None
            for candidate in call.args:
                if candidate.keyword is not None and candidate.keyword.value == param.name.value:
                    arg = candidate
            if arg is None and position is not None:
                pos = positional(call)
                if position < len(pos):
                    arg = pos[position]
            if arg is None:
                return None
            result = self.pinned(arg.value, scope, depth + 1)
            if result is None:
                return None
            found.extend(result)
        return found

    def _mentions(self, name: str) -> int:
        """How many times ``name`` occurs as an identifier in the module (one
        walk of the module, done only when a parameter is followed)."""
        if self._names is None:
            from torchlint.walker import walk_nodes

            counts: Dict[str, int] = {}
            for node in walk_nodes(self.module):
                if isinstance(node, cst.Name):
                    counts[node.value] = counts.get(node.value, 0) + 1
            self._names = counts
        return self._names.get(name, 0)


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"
