"""Shared questions about `torch.utils.data.DataLoader` calls (TL202, TL203, TL204)."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from torchlint.names import dotted_name
from torchlint.nodes import target_names
from torchlint.rule import Context
from torchlint.rules._helpers import (
    argument,
    device_kind,
    is_docstring,
    keyword,
    literal_bool,
    literal_number,
    method_name,
    moves_to_device,
    positional,
    receiver,
    string_value,
)
from torchlint.rules._project_text import (
    COLLATE_SUBJECT,
    PINNED_CALL,
    PROGRAM_NOTE,
    builds_unpinnable_batches,
    trait_key,
)
from torchlint.semantic import Binding, Location

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})

__all__ = [
    "DATALOADERS", "IN_MEMORY_DATASETS", "ITERABLE_DATASETS", "SUBSETS", "dataset_argument",
    "PinnedLoaders", "method_class", "attribute_bindings", "indexes_memory_only", "is_dataloader", "pins_memory",
    "HOST", "DEVICE", "UNKNOWN", "Placement", "placement",
    "returned_by", "pinned_elsewhere", "kwargs_dict", "kwargs_keyword",
    "FILE_DATASETS", "has_transform", "subset_source", "itemless_dataset",
]

# Datasets whose items are slices of tensors that already sit in memory.
IN_MEMORY_DATASETS = frozenset(
    {"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"}
)


def is_dataloader(call: cst.Call, ctx: Context) -> bool:
    return ctx.qualname(call.func) in DATALOADERS


def pins_memory(call: cst.Call, kwargs: Optional[Tuple[bool, Optional[cst.BaseExpression]]] = None) -> Optional[bool]:
    """For a `DataLoader(...)` call: True for a literal `pin_memory=True`
    (keyword or 8th positional argument), False when it is absent or `False`,
    None when it cannot be known (a variable, `*args`/`**kwargs`).  ``kwargs``:
    what a `**kw` dict of the call's scope gives (``kwargs_keyword``)."""
    known, arg = argument(call, "pin_memory", 7)
    if not known:
        if kwargs is None or not kwargs[0]:
            return None
        return False if kwargs[1] is None else literal_bool(kwargs[1])
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
        # a random start to slice from (`self.data[start:start + n]`)
        "torch.randint", "random.randint", "random.randrange", "numpy.random.randint",
    }
)
_CHEAP_BUILTINS = frozenset({"len", "int", "float", "bool", "min", "max", "slice", "tuple", "list", "range"})
_CHEAP_METHODS = frozenset(
    {
        "float", "long", "int", "double", "half", "bool", "type", "clone", "detach", "unsqueeze", "squeeze",
        "view", "reshape", "flatten", "permute", "transpose", "contiguous", "astype", "copy",
        "item", "size", "numel",
    }
)


def _indexing_only(expr: Optional[cst.BaseExpression], ctx: Context) -> bool:
    """Names, attributes, subscripts, arithmetic, literals and conversions: no
    work beyond indexing data that is already in memory."""
    if expr is None:
        return True
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Ellipsis)):
        return True  # (`self.theta[index, ...]`)
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
    `torch.tensor(...)` or `.float()`; or a placeholder still to fill in
    (only `pass` or `...`), which loads nothing."""
    body = getitem.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return False
    statements = list(body.body)
    if is_docstring(statements[0]):
        statements = statements[1:]
    if not statements:
        return False
    if all(isinstance(stmt, cst.SimpleStatementLine) and all(_placeholder(small) for small in stmt.body)
           for stmt in statements):
        return True  # a template still to fill in (`pass`, `...`): it loads nothing
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
                        local.update(target_names(t.target))
                    elif not _item_of_local(t.target, local, ctx):
                        return False
            else:
                return False
    return True


def _placeholder(small: cst.BaseSmallStatement) -> bool:
    return isinstance(small, cst.Pass) or (isinstance(small, cst.Expr) and isinstance(small.value, cst.Ellipsis))


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

_MAX_DEPTH = 8

# A `DataLoader(...)` call (or a call of a function of another module that
# returns one) and where it is.
Loaders = List[Tuple[cst.Call, Location]]


def method_class(name: str, location: Location, semantic) -> Optional[cst.ClassDef]:
    """The class whose instance ``name`` is at ``location``: the name is bound
    only as the first parameter of a method of that class (``self`` in a
    method, also read from a function or comprehension nested in it)."""
    bindings = semantic.bindings(name, location)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    scopes = bindings[0].location.scopes
    method, owner = scopes[-1], scopes[-2] if len(scopes) >= 2 else None
    if not isinstance(method, cst.FunctionDef) or not isinstance(owner, cst.ClassDef):
        return None
    params = (*method.params.posonly_params, *method.params.params)
    return owner if params and params[0].name.value == name else None


def attribute_bindings(expr: cst.BaseExpression, location: Location, semantic) -> Optional[List[Binding]]:
    """The bindings of ``self.attr`` read at ``location`` (every ``self.attr =
    ...`` in the methods of the class), None for any other expression."""
    if not isinstance(expr, cst.Attribute) or not isinstance(expr.value, cst.Name):
        return None
    owner = method_class(expr.value.value, location, semantic)
    if owner is None:
        return None
    at = semantic.bindings(expr.value.value, location)[0].location.scopes[:-2]
    return semantic.attribute_bindings(owner, Location(at, ())).get(expr.attr.value)


class PinnedLoaders:
    """Is this expression a `DataLoader` built with `pin_memory=True` in this
    module?  Asked of the semantic model after the walk.

    It follows every binding of a name (each but ``= None`` must give such a
    loader; a name bound any other way is unknown), an element of an unpacked
    tuple, ``self.attr`` assigned in the methods of the class, a function or
    method of this module whose every return gives such a loader (not a
    generator), and a parameter of a module-level function (or of a
    module-level class's ``__init__``) that every call in this module fills
    with one, when the function's name is used nowhere else.

    With ``pinned_only`` False it answers "is this a `DataLoader` built in
    this module" (any pinning: its batches are collated in host memory), and
    takes a call of another module's function whose name says it gives a
    loader (``get_mnist_test_loader(bs)``, not ``cuda_loader(...)``, no
    argument naming a device) for one.
    """

    def __init__(self, ctx: Context, pinned_only: bool = True) -> None:
        self.ctx = ctx
        self.semantic = ctx.semantic
        self.pinned_only = pinned_only
        self._busy: set = set()

    def pinned(self, expr: cst.BaseExpression, location: Location, depth: int = 0) -> Optional[Loaders]:
        """The pinned loaders ``expr`` (at ``location``) may evaluate to, or
        None when it may be anything else."""
        if depth > _MAX_DEPTH:
            return None
        key = (id(expr), id(location.scope))
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            return self._pinned(expr, location, depth)
        finally:
            self._busy.discard(key)

    def _pinned(self, expr: cst.BaseExpression, location: Location, depth: int) -> Optional[Loaders]:
        if isinstance(expr, cst.Call):
            if is_dataloader(expr, self.ctx):
                stars = any(arg.star == "**" for arg in expr.args)
                if not self.pinned_only:
                    return [(expr, location)]
                kwargs = kwargs_keyword(expr, "pin_memory", location, self.ctx) if stars else None
                return [(expr, location)] if pins_memory(expr, kwargs) is True else None
            callee = self._callee(expr, location)
            if callee is None and not self.pinned_only:
                return [(expr, location)] if _named_loader_factory(expr, self.ctx) else None
            if callee is None:  # a function of another module (the project index)
                return [(expr, location)] if pinned_elsewhere(expr, self.ctx) is not None else None
            return self.factory(*callee, None, depth)
        if isinstance(expr, cst.Name):
            return self._all(self.semantic.bindings(expr.value, location), depth)
        return self._all(attribute_bindings(expr, location, self.semantic), depth)

    def _all(self, bindings: Optional[List[Binding]], depth: int) -> Optional[Loaders]:
        """Every binding (but ``= None``) is a pinned loader: the loaders, else None."""
        if not bindings:
            return None
        found: Loaders = []
        for binding in bindings:
            if binding.kind == "value":
                if _is_none(binding.value):
                    continue
                result = self.pinned(binding.value, binding.location, depth + 1)
            elif binding.kind == "part" and binding.index is not None:
                result = self._indexed(binding.value, binding.index, binding.location, depth + 1)
            elif binding.kind == "param":
                result = self._parameter(binding, depth + 1)
            else:
                result = None
            if result is None:
                return None
            found.extend(result)
        return found or None

    def _indexed(self, value: cst.BaseExpression, index: Optional[int], location: Location, depth: int) -> Optional[Loaders]:
        if index is None:
            return self.pinned(value, location, depth)
        if isinstance(value, (cst.Tuple, cst.List)):
            elements = value.elements
            if index < len(elements) and not any(isinstance(e, cst.StarredElement) for e in elements):
                return self.pinned(elements[index].value, location, depth)
            return None
        if isinstance(value, cst.Call):
            callee = self._callee(value, location)
            return self.factory(*callee, index, depth) if callee is not None else None
        return None

    def _callee(self, call: cst.Call, location: Location) -> Optional[Tuple[cst.FunctionDef, Tuple[cst.CSTNode, ...]]]:
        """The function of this module a call runs (with the scopes around its
        ``def``): ``f(...)`` for a name bound only to a def, or ``self.f(...)``
        for a method of the same class."""
        func = call.func
        semantic = self.semantic
        if isinstance(func, cst.Name):
            bindings = semantic.bindings(func.value, location)
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            owner = method_class(func.value.value, location, semantic)
            if owner is None:
                return None
            method = semantic.bindings(func.value.value, location)[0].location.scopes
            bindings = semantic.table(method[:-1]).names.get(func.attr.value, [])
        else:
            return None
        if len(bindings) == 1 and bindings[0].kind == "def":
            return bindings[0].value, bindings[0].location.scopes
        return None

    def factory(
        self, function: cst.FunctionDef, scopes: Tuple[cst.CSTNode, ...], index: Optional[int] = None, depth: int = 0
    ) -> Optional[Loaders]:
        """The loaders a function gives when every `return` gives a pinned
        loader (or a tuple with one at ``index``); ``scopes``: those around
        its ``def``."""
        if self.semantic.is_generator(function):
            return None
        values = [(v, at) for v, at in self.semantic.returned(function, scopes) if not _is_none(v)]
        if not values:
            return None
        found: Loaders = []
        for value, at in values:
            result = self._indexed(value, index, at, depth + 1)
            if result is None:
                return None
            found.extend(result)
        return found

    def _parameter(self, binding: Binding, depth: int) -> Optional[Loaders]:
        """A parameter that every call in this module fills with a pinned loader."""
        scopes = binding.location.scopes
        function = scopes[-1]
        if not isinstance(function, cst.FunctionDef):
            return None
        offset = 0
        if len(scopes) == 2:
            name, definition = function.name.value, function
        elif len(scopes) == 3 and isinstance(scopes[1], cst.ClassDef) and function.name.value == "__init__":
            name, definition, offset = scopes[1].name.value, scopes[1], 1
        else:
            return None
        semantic = self.semantic
        bindings = semantic.bindings(name, Location(scopes[:1], ()))
        if len(bindings) != 1 or bindings[0].value is not definition:
            return None
        # Every mention of the name is its definition or a call of it: it is
        # not passed around, exported or called with other loaders.
        occurrences = semantic.occurrences(name)
        sites = [o for o in occurrences if isinstance(o.parent, cst.Call) and o.parent.func is o.node]
        if not sites or len(occurrences) != len(sites) + 1:
            return None
        params = function.params
        param = next(p for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == binding.name)
        positional_params = [*params.posonly_params, *params.params]
        position = None
        if any(p is param for p in positional_params):
            position = next(i for i, p in enumerate(positional_params) if p is param) - offset
            if position < 0:
                return None
        found: Loaders = []
        for site in sites:
            call = site.parent
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
            result = self.pinned(arg.value, site.location, depth + 1)
            if result is None:
                return None
            found.extend(result)
        return found


_LOADER_FACTORY = re.compile(r"(?i)loader")
_MOVES_BATCHES = re.compile(r"(?i)prefetch|device|cuda|gpu")


def _named_loader_factory(call: cst.Call, ctx: Context) -> bool:
    """``get_mnist_test_loader(bs)``, ``data.build_loader(cfg)``: an imported
    function (or one of another module) named for a loader, named and called
    without a device (``cuda_loader(...)``, ``make_loader(ds, device)`` may
    give batches already on it)."""
    func = call.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
    if name is None or not _LOADER_FACTORY.search(name) or _MOVES_BATCHES.search(name):
        return False
    if isinstance(func, cst.Name) and (func.value in ctx.imports.defined or ctx.imports.resolve(func.value) is None):
        return False  # not imported: a local (its bindings were asked) or unknown
    return not any(arg.star or _MOVES_BATCHES.search(cst.Module([]).code_for_node(arg)) for arg in call.args)


def _is_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


# -- where a loader's tensors live (TL202, TL203, TL204) ------------------------
#
# `pin_memory=True` makes the loader call `torch.utils.data._utils.pin_memory.
# pin_memory(batch)` on every batch, which calls `Tensor.pin_memory()` on each
# tensor it finds (in mappings, tuples and sequences, or an object's own
# `pin_memory()` method).  `Tensor.pin_memory()` raises "cannot pin
# 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned" for a tensor
# that is already on a device.  Worker processes cannot produce CUDA tensors
# either (CUDA cannot be re-initialised in a forked worker).  So every loader
# rule asks the same question: does the dataset (or the collate function)
# hand out host tensors, device tensors, or cannot it be told?

HOST = "host"
DEVICE = "device"
UNKNOWN = "unknown"

# `torch.utils.data.ConcatDataset([a, b])`, `ChainDataset([a, b])`.
_CONCATS = frozenset(
    {
        "torch.utils.data.ConcatDataset", "torch.utils.data.dataset.ConcatDataset",
        "torch.utils.data.ChainDataset", "torch.utils.data.dataset.ChainDataset",
    }
)
# Base classes a dataset class of this file may have without changing where
# its items live.
_DATASET_BASES = frozenset(
    {
        "torch.utils.data.Dataset", "torch.utils.data.dataset.Dataset",
        "torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset",
    }
)
# Collate functions of torch: they only stack what the samples hold, into
# standard containers (dict, list, tuple, namedtuple) that pinning walks.
_DEFAULT_COLLATES = frozenset(
    {
        "torch.utils.data.default_collate", "torch.utils.data.default_convert",
        "torch.utils.data.dataloader.default_collate", "torch.utils.data.dataloader.default_convert",
        "torch.utils.data._utils.collate.default_collate", "torch.utils.data._utils.collate.default_convert",
    }
)
# torch functions whose result is on the host whatever their arguments are:
# factories that take sizes or Python numbers (on the default device, the
# CPU, unless the program changes it) and conversions from host buffers.
_ALWAYS_HOST = frozenset(
    {"torch.from_numpy", "torch.frombuffer"}
    | {
        f"torch.{name}"
        for name in (
            "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye",
            "rand", "randn", "randint", "randperm",
        )
    }
)
# Ways a program makes torch's factories build on a device without `device=`.
_DEFAULT_DEVICE_CHANGES = ("set_default_device", "set_default_tensor_type", "with torch.device(")
# torch functions whose result may be on a device even without `device=`:
# `torch.load` restores tensors where they were saved unless `map_location=`
# says otherwise.
_MAYBE_DEVICE = frozenset({"torch.load", "torch.jit.load"})
# Methods whose result lives where their receiver lives.
_SAME_PLACE_METHODS = _CHEAP_METHODS | frozenset(
    {"to_dense", "type_as", "numpy", "tolist", "item", "split", "chunk", "unbind", "expand", "repeat"}
)
_DATASET_KEYWORDS_SKIPPED = frozenset({"root", "download", "train", "split"})
_MAX_PLACEMENT_DEPTH = 6


def _combine(kinds) -> str:
    """DEVICE if any part is on a device, HOST if all are on the host, else UNKNOWN."""
    kinds = list(kinds)
    if DEVICE in kinds:
        return DEVICE
    if all(kind == HOST for kind in kinds):
        return HOST
    return UNKNOWN


def moves_data(node: cst.CSTNode, ctx: Context) -> bool:
    """Whether code visibly puts tensors on a device: `.cuda(...)`,
    `.to(<device>)` (`device`, `self.device`, `"cuda"`; not `"cpu"` or a
    dtype), or a call given `device=` anything but a visible CPU
    (`torch.tensor(x, device=self.device)`, `collate(b, device=device)`)."""
    from torchlint.nodes import walk_nodes

    for sub in walk_nodes(node):
        if not isinstance(sub, cst.Call):
            continue
        if moves_to_device(sub, ctx) is not None:
            return True
        dev = keyword(sub, "device")
        if dev is not None and not _is_none(dev.value) and device_kind(dev.value, ctx) != "cpu":
            return True
    return False


def placement(ctx: Context) -> "Placement":
    """The module's :class:`Placement`, shared by every rule of the file (its
    answers are cached)."""
    found = ctx.shared.get("loader-placement")
    if found is None:
        found = ctx.shared["loader-placement"] = Placement(ctx)
    return found


class Placement:
    """Where the tensors of a dataset (or a collate function's batch) live:
    :data:`HOST`, :data:`DEVICE` (visibly moved to or created on a device,
    which pinning and worker processes cannot handle) or :data:`UNKNOWN`.

    Asked only for files that build a `DataLoader`, of expressions at a
    location: it follows the bindings of names (every one must be an
    assignment it can judge) through the semantic model; a parameter, an
    attribute, an import or anything computed by code it cannot see is
    UNKNOWN.  A function that a call may run is any `def` of that name in the
    module (all must move nothing for the call to move nothing).
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.semantic = ctx.semantic
        self._cache: Dict[int, str] = {}
        self._moving: Dict[int, bool] = {}

    def functions(self, name: str) -> List[cst.FunctionDef]:
        """Every ``def name`` of the module, in any scope."""
        return [d.node for d in self.semantic.definitions(name) if isinstance(d.node, cst.FunctionDef)]

    def moves(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """:func:`moves_data`, also through the functions of this module that
        ``node`` calls (`yield from rollout(self.env)` where `rollout` moves),
        and counting a device handed to another call (`rollout(self.env,
        self.device)`, `make_batch(samples, device)`): data is then made for
        that device."""
        from torchlint.nodes import walk_nodes

        key = id(node)
        known = self._moving.get(key)
        if known is not None:
            return known
        self._moving[key] = False  # a function that calls itself
        found = moves_data(node, self.ctx)
        if not found:
            for sub in walk_nodes(node):
                if not isinstance(sub, cst.Call) or _only_reports(sub):
                    continue
                if any(arg.keyword is None and _names_device(arg.value) for arg in sub.args):
                    found = True
                    break
                func = sub.func
                if (
                    depth < _MAX_PLACEMENT_DEPTH
                    and isinstance(func, cst.Name)
                    and self.ctx.qualname(func) is None
                    and any(self.moves(f, depth + 1) for f in self.functions(func.value))
                ):
                    found = True
                    break
        self._moving[key] = found
        return found

    def loader(self, call: cst.Call, location: Location) -> Tuple[str, str]:
        """For a `DataLoader(...)` call of this module (at ``location``):
        where its dataset's items and its `collate_fn`'s batches live."""
        collate = keyword(call, "collate_fn")
        return (
            self.dataset(dataset_argument(call), location),
            self.collate(collate.value if collate is not None else None, location),
        )

    def values_of(self, name: str, location: Location) -> Optional[List[Tuple[Optional[cst.BaseExpression], Location]]]:
        """What ``name`` is assigned, seen from ``location``, each value with
        its own location; the value is None for a binding of another kind (a
        parameter, a def, an import, a loop variable, a part of an unpacked
        value); None when the name is bound nowhere in the module."""
        bindings = self.semantic.bindings(name, location)
        if not bindings:
            return None
        return [(b.value if b.kind == "value" else None, b.location) for b in bindings]

    def defined(self, name: str, location: Location, kind: str):
        """The one ``def`` (``kind`` "def") or ``class`` (``kind`` "class") a
        name refers to, with its binding, when it is bound no other way."""
        bindings = self.semantic.bindings(name, location)
        if len(bindings) == 1 and bindings[0].kind == kind:
            return bindings[0]
        return None

    # -- datasets ------------------------------------------------------------------
    def dataset(self, expr: Optional[cst.BaseExpression], location: Location, depth: int = 0) -> str:
        """Where the items of the dataset ``expr`` (at ``location``) live."""
        if expr is None or depth > _MAX_PLACEMENT_DEPTH:
            return UNKNOWN
        ctx = self.ctx
        if isinstance(expr, cst.Call):
            if any(arg.star for arg in expr.args):
                return UNKNOWN
            qualified = ctx.qualname(expr.func)
            if qualified in SUBSETS:
                first = positional(expr)
                inner = keyword(expr, "dataset") or (first[0] if first else None)
                return self.dataset(inner.value if inner else None, location, depth + 1)
            if qualified in _CONCATS:
                parts = positional(expr)
                if len(parts) == 1 and isinstance(parts[0].value, (cst.List, cst.Tuple)):
                    elements = parts[0].value.elements
                    if elements and not any(isinstance(e, cst.StarredElement) for e in elements):
                        return _combine(self.dataset(e.value, location, depth + 1) for e in elements)
                return UNKNOWN
            if qualified in IN_MEMORY_DATASETS:
                return _combine(self.tensor(arg.value, location, depth + 1) for arg in expr.args)
            if qualified is not None and qualified.startswith("torchvision.datasets."):
                # Files are read and decoded on the host; only what the call is
                # given (a transform) could move them.
                return _combine(
                    self.tensor(arg.value, location, depth + 1)
                    for i, arg in enumerate(expr.args)
                    if not (i == 0 and arg.keyword is None)
                    and not (arg.keyword is not None and arg.keyword.value in _DATASET_KEYWORDS_SKIPPED)
                )
            if qualified is None and isinstance(expr.func, cst.Name):
                klass = self.defined(expr.func.value, location, "class")
                if klass is not None:
                    kind = self.dataset_class(klass.value, klass.location, depth + 1)
                    if kind == DEVICE:
                        return DEVICE
                    arguments = _combine(self.tensor(arg.value, location, depth + 1) for arg in expr.args)
                    return _combine([kind, arguments])
            if self.moves(expr):
                return DEVICE  # `MyData(x.cuda())`, `Imported(device=device)`, `make(device)`
            return UNKNOWN
        if isinstance(expr, (cst.List, cst.Tuple)):
            return self.tensor(expr, location, depth + 1)
        if isinstance(expr, cst.Name):
            values = self.values_of(expr.value, location)
            if not values or any(v is None for v, _ in values):
                return UNKNOWN
            return _combine(self.dataset(v, at, depth + 1) for v, at in values)
        return UNKNOWN

    def dataset_class(self, klass: cst.ClassDef, location: Location, depth: int = 0) -> str:
        """A dataset class of this module (defined at ``location``): DEVICE
        when any of its code moves data to a device (in `__init__`,
        `__getitem__`, `__iter__`, a helper method), HOST when none does and
        its bases are torch's `Dataset`/`IterableDataset` or such classes of
        this module, else UNKNOWN."""
        cached = self._cache.get(id(klass))
        if cached is not None:
            return cached
        self._cache[id(klass)] = UNKNOWN  # a class deriving from itself
        if self.moves(klass.body):
            kind = DEVICE
        else:
            kinds = []
            for base in klass.bases:
                if base.keyword is not None or base.star:
                    kinds.append(UNKNOWN)
                    continue
                qualified = self.ctx.qualname(base.value)
                if qualified in _DATASET_BASES or (isinstance(base.value, cst.Name) and base.value.value == "object"):
                    kinds.append(HOST)
                elif qualified is None and isinstance(base.value, cst.Name):
                    parent = self.defined(base.value.value, location, "class")
                    kinds.append(self.dataset_class(parent.value, parent.location, depth + 1) if parent else UNKNOWN)
                else:
                    kinds.append(UNKNOWN)
            kind = _combine(kinds)
        self._cache[id(klass)] = kind
        return kind

    # -- values handed to a dataset --------------------------------------------------
    def tensor(self, expr: Optional[cst.BaseExpression], location: Location, depth: int = 0) -> str:
        """Where a value (a tensor, a container of them, a transform) puts its
        data: HOST for literals, host factories (`torch.randn(3)`,
        `torch.from_numpy(a)`, `x.cpu()`), torchvision calls and functions
        that move nothing; DEVICE for `.cuda()`, `.to(device)`, `device=`;
        UNKNOWN for parameters, attributes and calls it cannot see into."""
        if expr is None:
            return HOST
        if depth > _MAX_PLACEMENT_DEPTH:
            return UNKNOWN
        ctx = self.ctx
        if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                             cst.FormattedString)):
            return HOST
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            return _combine(
                UNKNOWN if isinstance(e, cst.StarredElement) else self.tensor(e.value, location, depth + 1)
                for e in expr.elements
            )
        if isinstance(expr, cst.Dict):
            return _combine(
                _combine([self.tensor(e.key, location, depth + 1), self.tensor(e.value, location, depth + 1)])
                if isinstance(e, cst.DictElement) else UNKNOWN
                for e in expr.elements
            )
        if isinstance(expr, cst.Lambda):
            return DEVICE if self.moves(expr.body) else HOST
        if isinstance(expr, (cst.BinaryOperation,)):
            return _combine([self.tensor(expr.left, location, depth + 1), self.tensor(expr.right, location, depth + 1)])
        if isinstance(expr, cst.UnaryOperation):
            return self.tensor(expr.expression, location, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self.tensor(expr.value, location, depth + 1)
        if isinstance(expr, cst.Name):
            if expr.value in ("None", "True", "False"):
                return HOST
            defined = self.defined(expr.value, location, "def")
            if defined is not None:
                return DEVICE if self.moves(defined.value) else HOST  # a function used as a transform
            values = self.values_of(expr.value, location)
            if not values or any(v is None for v, _ in values):
                return UNKNOWN
            return _combine(self.tensor(v, at, depth + 1) for v, at in values)
        if isinstance(expr, cst.Call):
            if moves_to_device(expr, ctx) is not None:
                return DEVICE
            if any(arg.star for arg in expr.args):
                return UNKNOWN
            dev = keyword(expr, "device")
            if dev is not None and not _is_none(dev.value):
                return HOST if device_kind(dev.value, ctx) == "cpu" else DEVICE
            name = method_name(expr)
            if name == "cpu" or (name == "to" and _to_cpu(expr, ctx)):
                return HOST
            qualified = ctx.qualname(expr.func)
            arguments = [self.tensor(arg.value, location, depth + 1) for arg in expr.args]
            if qualified is not None:
                if qualified in _ALWAYS_HOST and qualified not in ("torch.from_numpy", "torch.frombuffer"):
                    if any(change in ctx.source for change in _DEFAULT_DEVICE_CHANGES):
                        return UNKNOWN  # the default device may not be the CPU
                    return HOST
                if qualified in _ALWAYS_HOST:
                    return HOST
                if qualified in _MAYBE_DEVICE:
                    where = keyword(expr, "map_location")
                    return HOST if where is not None and device_kind(where.value, ctx) == "cpu" else UNKNOWN
                root = qualified.split(".", 1)[0]
                if root in ("torch", "torchvision", "numpy", "math"):
                    # No `device=`: torch builds on the host or where its
                    # tensor arguments are; numpy and torchvision transforms
                    # stay on the host unless given device tensors.
                    return _combine(arguments)
                return UNKNOWN
            if name is not None and name in _SAME_PLACE_METHODS:
                return _combine([self.tensor(receiver(expr), location, depth + 1), *arguments])
            if isinstance(expr.func, cst.Name) and expr.func.value in _CHEAP_BUILTINS and expr.func.value not in ctx.imports.defined:
                return _combine(arguments)
            if self.moves(expr):
                return DEVICE
            return UNKNOWN
        return UNKNOWN

    # -- collate functions ---------------------------------------------------------
    def collate(self, expr: Optional[cst.BaseExpression], location: Location, depth: int = 0) -> str:
        """Where a `collate_fn` puts the batch: DEVICE when it takes a device
        (`partial(collate, device=device)`, a lambda passing one, a function
        of this module with a `device` parameter) or visibly moves data; HOST
        for torch's `default_collate`, or a function or lambda of this module
        that moves nothing and returns a tuple, list or dict display or a
        torch call (standard containers that pinning walks into); else
        UNKNOWN (a batch of a class of its own is pinned only through its
        `pin_memory()` method, and an imported function may do anything)."""
        if expr is None:
            return HOST
        if depth > _MAX_PLACEMENT_DEPTH:
            return UNKNOWN
        ctx = self.ctx
        if isinstance(expr, cst.Lambda):
            body = expr.body
            if self.moves(body):
                return DEVICE
            if isinstance(body, cst.Call) and any(
                arg.keyword is None and _names_device(arg.value) for arg in body.args
            ):
                return DEVICE  # `lambda b: collate(b, device)`
            if isinstance(body, cst.Call) and not (ctx.qualname(body.func) or "").startswith("torch."):
                inner = self.collate(body.func, location, depth + 1)
                return inner if inner == DEVICE else (HOST if inner == HOST else UNKNOWN)
            return HOST if _standard_batch(body, ctx) else UNKNOWN
        if isinstance(expr, cst.Call):
            if keyword(expr, "device") is not None:
                return DEVICE  # partial(collate, device=device)
            bound = partial_target(expr, ctx)
            if bound is not None:
                return self.collate(bound, location, depth + 1)
            return UNKNOWN
        qualified = ctx.qualname(expr)
        if qualified in _DEFAULT_COLLATES:
            return HOST
        if isinstance(expr, cst.Name):
            defined = self.defined(expr.value, location, "def")
            if defined is not None:
                return self._collate_function(defined.value)
            if self._takes_device(expr.value):
                return DEVICE
            values = self.values_of(expr.value, location)
            if not values or any(v is None for v, _ in values):
                return UNKNOWN
            return _combine(self.collate(v, at, depth + 1) for v, at in values)
        return UNKNOWN

    def _takes_device(self, name: str) -> bool:
        return any(_has_device_param(f) for f in self.functions(name))

    def _collate_function(self, function: cst.FunctionDef) -> str:
        from torchlint.nodes import walk_nodes

        if _has_device_param(function) or self.moves(function):
            return DEVICE
        returns = [n for n in walk_nodes(function.body) if isinstance(n, cst.Return)]
        if not returns or any(isinstance(n, (cst.Yield, cst.FunctionDef, cst.ClassDef)) for n in walk_nodes(function.body)):
            return UNKNOWN
        if all(r.value is not None and _standard_batch(r.value, self.ctx) for r in returns):
            return HOST
        return UNKNOWN


_REPORTING_FUNCTIONS = frozenset({"print", "str", "repr", "format", "isinstance", "getattr", "setattr", "hasattr"})
_REPORTING_METHODS = frozenset({"info", "debug", "warning", "warn", "error", "log", "format", "write"})


def _only_reports(call: cst.Call) -> bool:
    """``print(device)``, ``logger.info(...)``: naming a device there makes no data."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value in _REPORTING_FUNCTIONS
    return method_name(call) in _REPORTING_METHODS


def _standard_batch(expr: cst.BaseExpression, ctx: Context) -> bool:
    """A tuple, list or dict display, or a call of torch (`torch.stack(...)`,
    `default_collate(...)`): a batch that pinning walks into."""
    if isinstance(expr, (cst.Tuple, cst.List, cst.Dict)):
        return True
    if isinstance(expr, cst.Call):
        qualified = ctx.qualname(expr.func)
        return qualified is not None and qualified.startswith("torch.")
    return False


def _has_device_param(function: cst.FunctionDef) -> bool:
    params = function.params
    return any(p.name.value == "device" for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def _names_device(expr: cst.BaseExpression) -> bool:
    """``device``, ``self.device``, ``args.device``."""
    name = expr.value if isinstance(expr, cst.Name) else expr.attr.value if isinstance(expr, cst.Attribute) else ""
    return name == "device"


def _to_cpu(call: cst.Call, ctx: Context) -> bool:
    dev = keyword(call, "device")
    if dev is None:
        pos = positional(call)
        dev = pos[0] if pos else None
    return dev is not None and device_kind(dev.value, ctx) == "cpu"


# -- dataset helpers (TL203) -------------------------------------------------------

# Dataset families that read and decode files for every item.
FILE_DATASETS = ("torchvision.datasets.", "torchaudio.datasets.")
TRANSFORM_KEYWORDS = ("transform", "transforms", "target_transform")


def has_transform(call: cst.Call) -> bool:
    """A dataset built with a per-item transform (`transform=...`, not `None`)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in TRANSFORM_KEYWORDS:
            return not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
    return False


def subset_source(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The first argument (`dataset`) of `random_split`/`Subset`."""
    pos = positional(call)
    if pos and not call.args[0].star:
        return pos[0].value
    arg = keyword(call, "dataset")
    return arg.value if arg is not None else None


# -- datasets whose items hold no data (TL202) ----------------------------------------


def itemless_dataset(klass: cst.ClassDef) -> bool:
    """A dataset class whose `__getitem__` returns no data (see below)."""
    itemless = False
    if isinstance(klass.body, cst.IndentedBlock):
        for stmt in klass.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__getitem__":
                itemless = _items_hold_no_data(stmt)
    return itemless


def _items_hold_no_data(getitem: cst.FunctionDef) -> bool:
    """A `__getitem__(self, index)` that returns only the index and the
    dataset's own attributes (``return {"prompt": self.prompt, "index": index}``,
    also built up in a local dict): every item repeats the same values."""
    params = [*getitem.params.posonly_params, *getitem.params.params]
    body = getitem.body
    if len(params) != 2 or not isinstance(body, cst.IndentedBlock):
        return False
    owner, index = params[0].name.value, params[1].name.value
    local: Set[str] = set()

    def plain(expr: Optional[cst.BaseExpression]) -> bool:
        if expr is None:
            return True
        if isinstance(expr, cst.Name):
            return expr.value in (index, "None", "True", "False") or expr.value in local
        if isinstance(expr, cst.Attribute):
            return isinstance(expr.value, cst.Name) and expr.value.value == owner
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return True
        if isinstance(expr, (cst.Tuple, cst.List)):
            return all(isinstance(e, cst.Element) and plain(e.value) for e in expr.elements)
        if isinstance(expr, cst.Dict):
            return all(isinstance(e, cst.DictElement) and plain(e.key) and plain(e.value) for e in expr.elements)
        return False

    statements = list(body.body)
    if statements and is_docstring(statements[0]):
        statements = statements[1:]
    returned = False
    for stmt in statements:
        if returned or not isinstance(stmt, cst.SimpleStatementLine):
            return False
        for small in stmt.body:
            if returned:
                return False
            if isinstance(small, cst.Return):
                if small.value is None or not plain(small.value):
                    return False
                returned = True
            elif isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if not plain(small.value):
                    return False
                if isinstance(target, cst.Name) and target.value not in (owner, index):
                    local.add(target.value)
                elif not (
                    isinstance(target, cst.Subscript)
                    and isinstance(target.value, cst.Name)
                    and target.value.value in local
                ):
                    return False
            else:
                return False
    return returned


# -- loaders built in one module and iterated in another (the project index) ----------


def returned_by(call: cst.Call, location: Location, ctx: Context) -> Optional[str]:
    """The name of the module-level function that returns the `DataLoader(...)`
    ``call`` at ``location`` (``return DataLoader(...)``, or a name of the
    function bound only to it and returned), as the project index knows it;
    None otherwise."""
    function = location.scope
    if len(location.scopes) != 2 or not isinstance(function, cst.FunctionDef):
        return None
    semantic = ctx.semantic
    for value in semantic.returns(function):
        if value is call:
            return function.name.value
        if isinstance(value, cst.Name):
            bindings = semantic.bindings(value.value, location)
            if bindings and all(b.kind == "value" and b.value is call for b in bindings):
                return function.name.value
    return None


def pinned_elsewhere(call: cst.Call, ctx: Context) -> Optional[str]:
    """Where (the function's file) the loader that ``call`` returns is built
    with `pin_memory=True`, as the project index found it: a function of
    another module of the run whose callers here copy its batches."""
    key = trait_key(cst.Module([]).code_for_node(call.func), PINNED_CALL)
    fact = ctx.project.get("frequency", {}).get(key)
    return fact[1] if fact else None


# -- `DataLoader(ds, **kw)` where `kw` is a dict built in the same scope ----------------

_MAYBE = object()  # a key whose value depends on a branch (a conditional update)
# Keys that change what a batch holds: with one of them in the dict the rules
# would judge the batches without seeing it, so the dict is not read.
_HIDDEN_KEYS = frozenset({"collate_fn", "pin_memory_device", "dataset"})


def kwargs_keyword(call: cst.Call, name: str, location: Location, ctx: Context) -> Tuple[bool, Optional[cst.BaseExpression]]:
    """For ``DataLoader(ds, **kw)`` at ``location``: ``(True, value)`` when
    ``kw`` is a dict built in the same scope whose key ``name`` is ``value``
    on every path (None: never set), ``(False, None)`` when it cannot be
    known (see ``kwargs_dict``)."""
    keys = kwargs_dict(call, location, ctx)
    if keys is None or _HIDDEN_KEYS & keys.keys() or keys.get(name) is _MAYBE:
        return False, None
    if any(arg.keyword is not None and arg.keyword.value == name for arg in call.args):
        return False, None
    value = keys.get(name)
    return True, value if isinstance(value, cst.BaseExpression) else None


def kwargs_dict(call: cst.Call, location: Location, ctx: Context) -> Optional[Dict[str, object]]:
    """The keys of the dict ``kw`` in the call's only ``**kw`` (no ``*args``):
    bound once in the scope, to ``dict(a=1, ...)`` or ``{"a": 1, ...}``, and
    otherwise only updated (``kw.update(b=2)``, ``kw["b"] = 2``) or unpacked
    (``**kw``).  An update in the same block between the binding and the call
    replaces the value; one elsewhere (under an ``if``, after the call) makes
    the key ``_MAYBE`` unless it sets the same value.  None when anything else
    touches the name (it is passed on, popped, rebound, or used in a closure)."""
    stars = [arg for arg in call.args if arg.star]
    if len(stars) != 1 or stars[0].star != "**" or not isinstance(stars[0].value, cst.Name):
        return None
    name = stars[0].value.value
    semantic = ctx.semantic
    bindings = semantic.bindings(name, location)
    reaching = semantic.reaching(name, location)
    if len(bindings) != 1 or bindings[0].kind != "value" or len(reaching) != 1 or reaching[0].value is not bindings[0].value:
        return None
    binding = bindings[0]
    keys = _dict_display(binding.value)
    statements = [step for step in binding.location.path if not step[2]]  # not within a line `a = 1; b = 2`
    if keys is None or not statements:
        return None
    block_id, start = statements[-1][0], statements[-1][1]
    end = next((step[1] for step in location.path if step[0] == block_id), None)
    block = semantic.block(block_id)
    if end is None or block is None:
        return None
    in_order = {id(s) for s in block.body[start + 1:end]}
    maybe: List[Tuple[str, cst.BaseExpression]] = []
    for statement, updates in _mentions_of(binding.location.scope, name, binding):
        if updates is None:
            return None
        if id(statement) in in_order:
            keys.update(updates)
        else:
            maybe.extend(updates.items())
    code = cst.Module([]).code_for_node
    for key, value in maybe:
        current = keys.get(key)
        if not isinstance(current, cst.CSTNode) or code(current) != code(value):
            keys[key] = _MAYBE
    return keys


def _dict_display(value: Optional[cst.CSTNode]) -> Optional[Dict[str, object]]:
    """``dict(a=1)`` / ``{"a": 1}`` -> ``{"a": <1>}``; None for anything else."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict":
        if any(arg.keyword is None or arg.star for arg in value.args):
            return None
        return {arg.keyword.value: arg.value for arg in value.args}
    if isinstance(value, cst.Dict):
        keys: Dict[str, object] = {}
        for element in value.elements:
            key = string_value(element.key) if isinstance(element, cst.DictElement) else None
            if key is None:
                return None
            keys[key] = element.value
        return keys
    return None


def _mentions_of(scope: cst.CSTNode, name: str, binding):
    """Every statement of ``scope`` that mentions ``name`` besides its binding
    and ``**name`` unpackings: (the statement line, the keys it sets, or None
    for a use that may do anything)."""
    from torchlint.nodes import iter_children

    todo: List[Tuple[cst.CSTNode, Tuple[cst.CSTNode, ...]]] = [(scope, ())]
    while todo:
        node, chain = todo.pop()
        if isinstance(node, cst.Name) and node.value == name:
            parent = chain[-1] if chain else None
            line = next((n for n in reversed(chain) if isinstance(n, cst.SimpleStatementLine)), None)
            if isinstance(parent, cst.Arg) and parent.star == "**":
                continue
            if isinstance(parent, cst.AssignTarget) and isinstance(chain[-2], cst.Assign) and chain[-2].value is binding.value:
                continue
            yield line, _update(chain, line)
            continue
        todo.extend((child, (*chain, node)) for child in iter_children(node))


def _update(chain: Tuple[cst.CSTNode, ...], line: Optional[cst.CSTNode]) -> Optional[Dict[str, object]]:
    """``kw.update(a=1)`` or ``kw["a"] = 1`` as a statement of its own: its keys."""
    if line is None or len(line.body) != 1:
        return None
    statement = line.body[0]
    if (
        len(chain) >= 3
        and isinstance(chain[-1], cst.Attribute)
        and chain[-1].attr.value == "update"
        and isinstance(statement, cst.Expr)
        and statement.value is chain[-2]
        and isinstance(chain[-2], cst.Call)
        and all(arg.keyword is not None and not arg.star for arg in chain[-2].args)
    ):
        return {arg.keyword.value: arg.value for arg in chain[-2].args}
    if (
        isinstance(statement, cst.Assign)
        and len(statement.targets) == 1
        and isinstance(chain[-1], cst.Subscript)
        and statement.targets[0].target is chain[-1]
        and len(chain[-1].slice) == 1
        and isinstance(chain[-1].slice[0].slice, cst.Index)
    ):
        key = string_value(chain[-1].slice[0].slice.value)
        return {key: statement.value} if key is not None else None
    return None


def partial_target(expr: cst.BaseExpression, ctx: Context) -> Optional[cst.BaseExpression]:
    """The function ``functools.partial(f, ...)`` binds (``f``), or None."""
    if isinstance(expr, cst.Call) and ctx.qualname(expr.func) == "functools.partial":
        first = positional(expr)
        if first and not expr.args[0].star:
            return first[0].value
    return None


def unpinnable_batches(call: cst.Call, ctx: Context, location: Optional[Location] = None, where=None) -> bool:
    """Whether the loader's `collate_fn` builds the batch around an object that
    pinning leaves alone (a class of its module without a `pin_memory()`
    method: DETR's `NestedTensor`): for a function of this module from its
    text, for an imported one from the project index's facts (asked for here,
    ``PROGRAM_NOTE``: ``_project_text.program_facts``); or batches the PIL
    images of a torchvision dataset that makes no tensors (:func:`_yields_images`)."""
    collate = keyword(call, "collate_fn")
    if collate is None:
        return False
    if location is not None and where is not None and _yields_images(call, ctx, location, where):
        return True
    function = partial_target(collate.value, ctx) or collate.value  # `partial(utils.collate_fn, False)`
    if not isinstance(function, (cst.Name, cst.Attribute)):
        return False
    written = dotted_name(function)
    if written is None:
        return False
    if isinstance(function, cst.Name) and builds_unpinnable_batches(ctx.source, written):
        return True
    if trait_key(COLLATE_SUBJECT, written) in ctx.project.get("frequency", {}):
        return True
    if not ctx.path.endswith(".ipynb"):
        ctx.pending.add(PROGRAM_NOTE)
    return False


_MAKES_TENSORS = ("Tensor", "tensor", "ToImage", "float32", "Lambda", "lambda")


def _yields_images(call: cst.Call, ctx: Context, location: Location, where) -> bool:
    """Whether the loader's dataset is a torchvision dataset whose items stay
    PIL images (``datasets.ImageFolder(root)``, ``transform=None``, or a
    transform that only resizes: ``transforms.Resize((512, 512))``): a
    `collate_fn` batches them into lists (facenet-pytorch's face cropping with
    MTCNN), which pinning does not touch.  A transform it cannot read (a
    parameter, a function) may make tensors: not this."""
    dataset = dataset_argument(call)
    if not isinstance(dataset, cst.Name):
        return False
    values = [(b.value if b.kind == "value" else None, b.location)
              for b in where.semantic.reaching(dataset.value, location)]
    if not values:
        return False
    for value, at in values:
        if not (isinstance(value, cst.Call) and (ctx.qualname(value.func) or "").startswith("torchvision.datasets.")):
            return False
        if len([a for a in value.args if a.keyword is None]) > 1 or any(a.star for a in value.args):
            return False  # a positional transform, or arguments it cannot read
        transform = keyword(value, "transform")
        if transform is None or (isinstance(transform.value, cst.Name) and transform.value.value == "None"):
            continue
        expr = transform.value
        if isinstance(expr, cst.Name):
            bound = where.values_of(expr.value, at)
            if not bound or len(bound) != 1 or bound[0][0] is None:
                return False
            expr = bound[0][0]
        if not isinstance(expr, cst.Call):
            return False
        text = cst.Module([]).code_for_node(expr)
        if any(word in text for word in _MAKES_TENSORS) or "transforms." not in text:
            return False
    return True


def loads_in_main_process(call: cst.Call, kwargs, location: Location, where: "Placement") -> bool:
    """Whether the loader loads in the main process: ``num_workers`` absent,
    the literal ``0``, or a name every binding of which is the literal ``0``
    (``num_workers = 0`` ... ``DataLoader(ds, num_workers=num_workers)``).
    ``kwargs``: what a ``**kwargs`` dict gives (``kwargs_keyword``), if any."""
    known, workers = kwargs or argument(call, "num_workers", 5)
    workers = workers.value if isinstance(workers, cst.Arg) else workers
    if not known:
        return False
    if workers is None or literal_number(workers) == 0:
        return True
    if isinstance(workers, cst.Name):
        values = where.values_of(workers.value, location)
        return bool(values) and all(v is not None and literal_number(v) == 0 for v, _ in values)
    return False
