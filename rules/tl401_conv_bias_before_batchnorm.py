from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import CallTable, argument, literal_bool
from torchlint.nodes import iter_children, walk_nodes


class _Layer(NamedTuple):
    kind: str  # "conv", "bn", "seq" or "odict"
    cls: str = ""  # the class name, e.g. "Conv2d"
    dim: Optional[int] = None  # spatial dimensionality; None for SyncBatchNorm
    bias_pos: int = 7  # 0-based position of `bias` among the positional parameters


_LAYERS: Dict[str, _Layer] = {}
for _d in (1, 2, 3):
    for _base, _pos in (("Conv", 7), ("ConvTranspose", 7), ("LazyConv", 6), ("LazyConvTranspose", 6)):
        _name = f"{_base}{_d}d"
        _layer = _Layer("conv", _name, _d, _pos)
        _LAYERS[f"torch.nn.{_name}"] = _layer
        _LAYERS[f"torch.nn.modules.conv.{_name}"] = _layer
    for _base in ("BatchNorm", "LazyBatchNorm"):
        _name = f"{_base}{_d}d"
        _layer = _Layer("bn", _name, _d)
        _LAYERS[f"torch.nn.{_name}"] = _layer
        _LAYERS[f"torch.nn.modules.batchnorm.{_name}"] = _layer
_LAYERS["torch.nn.SyncBatchNorm"] = _LAYERS["torch.nn.modules.batchnorm.SyncBatchNorm"] = _Layer(
    "bn", "SyncBatchNorm", None
)
_LAYERS["torch.nn.Sequential"] = _LAYERS["torch.nn.modules.container.Sequential"] = _Layer("seq")
_LAYERS["collections.OrderedDict"] = _LAYERS["typing.OrderedDict"] = _Layer("odict")

_LAYER_CALLS = CallTable(_LAYERS)

# Attributes of a convolution module whose use the fix could break.
_BIAS_SENSITIVE_ATTRIBUTES = frozenset({"bias", "forward", "__call__", "_conv_forward"})

_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)

_BAD = None


class _Neutral:
    pass


_NEUTRAL = _Neutral()

# What a use of the convolution resolves to: the BatchNorm it feeds
# (class name, how the code refers to it), harmless, or None (anything else).
_Bn = Tuple[str, Optional[str]]
_Use = Union[_Bn, _Neutral, None]

_OPAQUE = object()


class ConvBiasBeforeBatchNorm(Rule):
    """
    ## What it does
    Reports a convolution (`torch.nn.Conv1d`/`Conv2d`/`Conv3d`, the
    `ConvTranspose` and `Lazy` variants too) that has a bias (no `bias`
    argument, or `bias=True`) and whose output goes straight into a BatchNorm of
    the same dimensionality (`BatchNorm1d`/`2d`/`3d`, or `SyncBatchNorm`):

    - adjacent arguments of `nn.Sequential(...)`, adjacent entries of an
      `OrderedDict` given to it, or adjacent elements of a list passed as
      `nn.Sequential(*layers)` and built in the same function (`layers = [...]`,
      `layers += [...]`, `layers.extend([...])`, consecutive
      `layers.append(...)` statements);
    - `bn(conv(x))`, or `y = conv(x)` followed in the same block by `bn(y)`,
      where `conv` and `bn` are modules assigned once in the same function, or
      attributes (`self.conv`, `self.bn`) assigned once in the same class.

    A module referred to by a name or an attribute is reported only when every
    use of it in that scope feeds the BatchNorm: if its output is also used
    elsewhere (or its `.bias` is read), removing the bias would change that
    other use. An activation or any other layer between the two breaks the
    pattern, and so does an `nn.ModuleList` (its order says nothing about data
    flow). A user's own `Conv2d` class is not reported.

    ## Why is this bad?
    BatchNorm subtracts the per-channel mean of its input, so a constant added
    to each channel just before it cancels out: the convolution's bias has no
    effect on the output, and BatchNorm's own `bias` (beta) already provides
    the per-channel offset. The redundant bias still costs a parameter tensor,
    its gradient and optimizer state, and an extra elementwise add (or a less
    efficient fused kernel) in every forward and backward pass.

    Measured with `torchlint verify --rules TL401` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 2.76 ms before,
    2.59 ms after, **1.06x**. The bias add and its gradient are skipped. Run the
    same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    stem = nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    )
    ```

    ## Use instead
    ```python
    stem = nn.Sequential(
        nn.Conv2d(3, 64, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
    )
    ```

    ## Fix safety
    The fix (`bias=False`, or a literal `bias=True` turned into `False`) is
    unsafe: the module's `state_dict` no longer has the `<conv>.bias` key, so
    loading a checkpoint saved before the change with the default
    `load_state_dict(strict=True)` fails with `Unexpected key(s) in state_dict:
    "...bias"`.

    For a model trained from scratch after the change, the outputs are
    mathematically the same in train mode (batch statistics) and in eval mode
    (BatchNorm's running mean then simply tracks a mean without the bias). But
    in an already-trained checkpoint, the convolution's bias is folded into the
    BatchNorm's `running_mean`: dropping the bias and loading the remaining
    weights non-strictly changes the eval-mode outputs, unless the bias is
    first folded in (`running_mean -= conv.bias`).

    ## References
    - PyTorch Performance Tuning Guide, "Disable bias for convolutions directly followed by a batch norm"
    - Ioffe & Szegedy, "Batch Normalization: Accelerating Deep Network Training by Reducing Internal Covariate Shift" (2015), section 3.2
    """

    code = "TL401"
    name = "conv-bias-before-batchnorm"
    summary = "Convolution bias cancelled by the following BatchNorm"
    fix = FixAvailability.UNSAFE
    needs = ("BatchNorm",)

    VALID = [
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv1d(3, 8, 3), nn.BatchNorm2d(8))
            """
        ),
        Valid(
            """
            import torch.nn as nn
            m = nn.ModuleList([nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)])
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
            """,
            expected_fix="""
            import torch.nn as nn
            m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))
            """,
        ),
        Invalid(
            """
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3)
                    self.bn = nn.BatchNorm2d(8)

                def forward(self, x):
                    return self.bn(self.conv(x))
            """,
            expected_fix="""
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3, bias=False)
                    self.bn = nn.BatchNorm2d(8)

                def forward(self, x):
                    return self.bn(self.conv(x))
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="Conv2d with vs without bias before BatchNorm2d (forward and backward, train mode)",
        before="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(8, 16, 32, 32, device=device)
            model = torch.nn.Sequential(
                torch.nn.Conv2d(16, 32, 3, padding=1),
                torch.nn.BatchNorm2d(32),
                torch.nn.ReLU(),
            ).to(device)


            def run():
                out = model(inputs)
                out.sum().backward()
                return out.detach()
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(8, 16, 32, 32, device=device)
            model = torch.nn.Sequential(
                torch.nn.Conv2d(16, 32, 3, padding=1, bias=False),
                torch.nn.BatchNorm2d(32),
                torch.nn.ReLU(),
            ).to(device)


            def run():
                out = model(inputs)
                out.sum().backward()
                return out.detach()
            """,
        comparison=(
            "values, within float32 tolerances: in train mode BatchNorm subtracts the batch mean, so the bias "
            "cancels (the weights are the same because the bias is initialised after them)"
        ),
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._layers: Dict[int, _Layer] = {}
        self._convs: List[cst.Call] = []
        self._has_bn = False

    def visit_Call(self, node: cst.Call) -> None:
        layer = _LAYER_CALLS.lookup(node, self.context)
        if layer is None:
            return
        self._layers[id(node)] = layer
        if layer.kind == "conv":
            self._convs.append(node)
        elif layer.kind == "bn":
            self._has_bn = True

    def leave_Module(self, node: cst.Module) -> None:
        if not self._convs or not self._has_bn:
            return
        analysis = _Analysis(self._layers, node)
        for call in self._convs:
            self._check(analysis, call)

    def _check(self, analysis: "_Analysis", call: cst.Call) -> None:
        layer = self._layers[id(call)]
        known, arg = argument(call, "bias", layer.bias_pos)
        if not known or (arg is not None and literal_bool(arg.value) is not True):
            return
        bn = analysis.feeds_batchnorm(call, layer.dim)
        if bn is None:
            return
        bn_cls, label = bn
        where = f" (`{label}`)" if label else ""
        self.report(
            call,
            f"`{layer.cls}` has a bias that the following `{bn_cls}`{where} cancels out "
            "(it subtracts the per-channel mean); pass `bias=False` to save the "
            "parameter and the add",
            fix=Fix(
                Applicability.UNSAFE,
                "Pass `bias=False`",
                lambda call=call, arg=arg: calls.set_keyword(call, "bias", "False", arg),
            ),
        )


class _Analysis:
    """Data-flow questions about one module, answered from a parent map built
    only for files that have both a convolution and a BatchNorm."""

    def __init__(self, layers: Dict[int, _Layer], module: cst.Module) -> None:
        self.layers = layers
        self.parents: Dict[int, cst.CSTNode] = {}
        self.classes: List[cst.ClassDef] = []
        self._names: Dict[int, Dict[str, List[cst.Name]]] = {}
        self._attrs: Dict[int, Dict[str, List[cst.Attribute]]] = {}
        self._lists: Dict[Tuple[int, str], bool] = {}
        self._build(module)

    # -- the tree ---------------------------------------------------------------
    def _build(self, module: cst.Module) -> None:
        parents = self.parents
        todo: List[cst.CSTNode] = [module]
        pop, extend, classes = todo.pop, todo.extend, self.classes
        while todo:
            node = pop()
            if type(node) is cst.ClassDef:
                classes.append(node)
            children = iter_children(node)
            for child in children:
                parents[id(child)] = node
            extend(children)

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def kind(self, node: Optional[cst.CSTNode]) -> Optional[str]:
        layer = self.layers.get(id(node)) if isinstance(node, cst.Call) else None
        return layer.kind if layer is not None else None

    def scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        current = self.parent(node)
        while current is not None and not isinstance(current, _SCOPES):
            current = self.parent(current)
        assert current is not None
        return current

    def method_class(self, scope: cst.CSTNode) -> Optional[cst.ClassDef]:
        """The class of which ``scope`` is a method (defined directly in its body)."""
        if not isinstance(scope, cst.FunctionDef):
            return None
        block = self.parent(scope)
        owner = self.parent(block) if block is not None else None
        return owner if isinstance(owner, cst.ClassDef) else None

    def name_mentions(self, scope: cst.CSTNode, name: str) -> List[cst.Name]:
        """Every Name ``name`` in ``scope`` (nested scopes included), reads and stores."""
        index = self._names.get(id(scope))
        if index is None:
            index = {}
            for node in walk_nodes(scope):
                if not isinstance(node, cst.Name) or node is getattr(scope, "name", None):
                    continue
                p = self.parent(node)
                if isinstance(p, cst.Attribute) and p.attr is node:
                    continue
                if isinstance(p, cst.Arg) and p.keyword is node:
                    continue
                index.setdefault(node.value, []).append(node)
            self._names[id(scope)] = index
        return index.get(name, [])

    def attr_mentions(self, cls: cst.ClassDef, attr: str) -> List[cst.Attribute]:
        """Every ``self.<attr>`` in the class."""
        index = self._attrs.get(id(cls))
        if index is None:
            index = {}
            for node in walk_nodes(cls):
                if (
                    isinstance(node, cst.Attribute)
                    and isinstance(node.value, cst.Name)
                    and node.value.value == "self"
                ):
                    index.setdefault(node.attr.value, []).append(node)
            self._attrs[id(cls)] = index
        return index.get(attr, [])

    def is_store(self, name: cst.Name) -> bool:
        node: cst.CSTNode = name
        p = self.parent(node)
        while isinstance(p, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
            node, p = p, self.parent(p)
        if isinstance(p, cst.AssignTarget):
            return True
        if isinstance(p, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr)):
            return p.target is node
        return isinstance(
            p, (cst.Param, cst.AsName, cst.ImportAlias, cst.NameItem, cst.Del, cst.FunctionDef, cst.ClassDef)
        )

    def block_slots(self, small: cst.CSTNode) -> Optional[Tuple[List[cst.CSTNode], int]]:
        """The statements of the block holding the small statement ``small``,
        with compound statements as single slots, and its index there."""
        line = self.parent(small)
        if isinstance(line, cst.SimpleStatementSuite):
            slots = list(line.body)
        elif isinstance(line, cst.SimpleStatementLine):
            block = self.parent(line)
            if not isinstance(block, (cst.IndentedBlock, cst.Module)):
                return None
            slots = []
            for statement in block.body:
                if isinstance(statement, cst.SimpleStatementLine):
                    slots.extend(statement.body)
                else:
                    slots.append(statement)
        else:
            return None
        for i, slot in enumerate(slots):
            if slot is small:
                return slots, i
        return None

    # -- entry point --------------------------------------------------------------
    def feeds_batchnorm(self, call: cst.Call, dim: Optional[int]) -> Optional[_Bn]:
        """The BatchNorm that every use of the convolution ``call`` feeds, if any."""
        p = self.parent(call)
        if isinstance(p, cst.Assign) and p.value is call:
            if len(p.targets) != 1:
                return None
            target = p.targets[0].target
            scope = self.scope_of(p)
            cls = self.method_class(scope)
            if isinstance(target, cst.Name):
                if not isinstance(scope, (cst.FunctionDef, cst.Module)):
                    return None
                mentions: Sequence[cst.BaseExpression] = self.name_mentions(scope, target.value)
            elif (
                isinstance(target, cst.Attribute)
                and isinstance(target.value, cst.Name)
                and target.value.value == "self"
                and cls is not None
            ):
                attr = target.attr.value
                if self._subclass_uses(cls, attr):
                    return None
                mentions = self.attr_mentions(cls, attr)
            else:
                return None
            found: Optional[_Bn] = None
            for mention in mentions:
                if mention is target:
                    continue
                use = self.classify_use(mention, dim)
                if use is None:
                    return None
                if found is None and not isinstance(use, _Neutral):
                    found = use
            return found
        in_sequence, bn = self.next_in_sequence(call, dim)
        return bn if in_sequence else None

    def _subclass_uses(self, cls: cst.ClassDef, attr: str) -> bool:
        """Whether a subclass of ``cls`` in the module mentions ``self.<attr>``."""
        for other in self.classes:
            if other is cls:
                continue
            for base in other.bases:
                value = base.value
                name = value.attr.value if isinstance(value, cst.Attribute) else getattr(value, "value", None)
                if name == cls.name.value and self.attr_mentions(other, attr):
                    return True
        return False

    # -- uses ---------------------------------------------------------------------
    def classify_use(self, expr: cst.BaseExpression, dim: Optional[int]) -> _Use:
        in_sequence, bn = self.next_in_sequence(expr, dim)
        if in_sequence:
            return bn
        p = self.parent(expr)
        if isinstance(p, cst.Call) and p.func is expr:
            return self.call_feeds_bn(p, dim)
        if isinstance(p, cst.Attribute) and p.value is expr:
            return _BAD if p.attr.value in _BIAS_SENSITIVE_ATTRIBUTES else _NEUTRAL
        return _BAD

    def call_feeds_bn(self, call: cst.Call, dim: Optional[int]) -> Optional[_Bn]:
        """``bn(conv(x))`` or ``y = conv(x)`` then ``bn(y)``."""
        p = self.parent(call)
        if isinstance(p, cst.Arg):
            return self._bn_argument(p, dim)
        if (
            isinstance(p, cst.Assign)
            and p.value is call
            and len(p.targets) == 1
            and isinstance(p.targets[0].target, cst.Name)
        ):
            return self._temporary_feeds_bn(p, p.targets[0].target.value, dim)
        return None

    def _bn_argument(self, arg: cst.Arg, dim: Optional[int]) -> Optional[_Bn]:
        """When ``arg`` is the only argument of a call of a BatchNorm module."""
        if arg.keyword is not None or arg.star:
            return None
        owner = self.parent(arg)
        if not isinstance(owner, cst.Call) or len(owner.args) != 1:
            return None
        return self.resolve_bn(owner.func, dim)

    def _temporary_feeds_bn(self, assign: cst.Assign, var: str, dim: Optional[int]) -> Optional[_Bn]:
        located = self.block_slots(assign)
        if located is None:
            return None
        slots, index = located
        scope = self.scope_of(assign)
        for slot in slots[index + 1:]:
            mentions = [
                n for n in self.name_mentions(scope, var) if n is not slot and _contains(slot, n, self)
            ]
            if not mentions:
                continue
            if not isinstance(slot, cst.BaseSmallStatement):
                return None
            rebinds = (
                isinstance(slot, cst.Assign)
                and len(slot.targets) == 1
                and isinstance(slot.targets[0].target, cst.Name)
                and slot.targets[0].target.value == var
            )
            reads = [n for n in mentions if not (rebinds and n is slot.targets[0].target)]
            if len(reads) != 1:
                return None
            p = self.parent(reads[0])
            bn = self._bn_argument(p, dim) if isinstance(p, cst.Arg) else None
            if bn is None:
                return None
            if rebinds or len(self.name_mentions(scope, var)) == 2:
                return bn
            return None
        return None

    def resolve_bn(self, expr: cst.BaseExpression, dim: Optional[int]) -> Optional[_Bn]:
        """The BatchNorm of matching dimensionality that ``expr`` refers to."""
        label: Optional[str] = None
        if isinstance(expr, cst.Call):
            value: Optional[cst.CSTNode] = expr
        elif isinstance(expr, cst.Name):
            scope = self.scope_of(expr)
            if isinstance(scope, cst.Lambda):
                return None
            stores = [n for n in self.name_mentions(scope, expr.value) if self.is_store(n)]
            value = self._single_assigned_value(stores)
            label = expr.value
        elif (
            isinstance(expr, cst.Attribute)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == "self"
        ):
            cls = self.method_class(self.scope_of(expr))
            if cls is None:
                return None
            stores = [a for a in self.attr_mentions(cls, expr.attr.value) if self._is_attr_store(a)]
            value = self._single_assigned_value(stores)
            label = f"self.{expr.attr.value}"
        else:
            return None
        layer = self.layers.get(id(value)) if isinstance(value, cst.Call) else None
        if layer is None or layer.kind != "bn":
            return None
        if layer.dim is not None and layer.dim != dim:
            return None
        return layer.cls, label

    def _single_assigned_value(self, stores: Sequence[cst.CSTNode]) -> Optional[cst.CSTNode]:
        if len(stores) != 1:
            return None
        target = self.parent(stores[0])
        assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        return assign.value

    def _is_attr_store(self, attr: cst.Attribute) -> bool:
        node: cst.CSTNode = attr
        p = self.parent(node)
        while isinstance(p, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
            node, p = p, self.parent(p)
        if isinstance(p, cst.AssignTarget):
            return True
        if isinstance(p, (cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.NamedExpr, cst.Del)):
            return p.target is node
        return isinstance(p, cst.AsName)

    # -- sequences of layers ----------------------------------------------------------
    def next_in_sequence(self, expr: cst.BaseExpression, dim: Optional[int]) -> Tuple[bool, Optional[_Bn]]:
        """Whether ``expr`` is a layer of an ``nn.Sequential`` (directly, through a
        list given to it, or an ``OrderedDict``), and the BatchNorm right after it."""
        p = self.parent(expr)
        if isinstance(p, cst.Arg):
            owner = self.parent(p)
            if not isinstance(owner, cst.Call) or p.star:
                return False, None
            if p.keyword is None:
                if self.kind(owner) == "seq":
                    return True, self._after(owner.args, p, dim, positional=True)
                statement = self.parent(owner)
                if isinstance(statement, cst.Expr) and self._list_name(statement) is not None:
                    return True, self._next_in_run(expr, statement, dim)
                return False, None
            if self.kind(owner) == "odict" and self._sole_sequential_argument(owner):
                return True, self._after(owner.args, p, dim, positional=False)
            return False, None
        if not isinstance(p, cst.Element):
            return False, None
        literal = self.parent(p)
        holder = self.parent(literal) if literal is not None else None
        if not isinstance(literal, (cst.List, cst.Tuple)):
            return False, None
        if isinstance(holder, cst.Arg) and holder.star == "*" and self.kind(self.parent(holder)) == "seq":
            return True, self._after(literal.elements, p, dim, positional=True)
        if isinstance(literal, cst.Tuple) and isinstance(holder, cst.Element):
            return self._ordered_dict_item(literal, p, holder, dim)
        statement = self._contribution_statement(literal)
        if statement is not None:
            return True, self._next_in_run(expr, statement, dim)
        return False, None

    def _after(self, items: Sequence[cst.CSTNode], item: cst.CSTNode, dim: Optional[int], *, positional: bool) -> Optional[_Bn]:
        for i, current in enumerate(items):
            if current is item:
                break
        else:
            return None
        if i + 1 >= len(items):
            return None
        following = items[i + 1]
        if isinstance(following, cst.Arg):
            if following.star or (following.keyword is None) != positional:
                return None
        elif not isinstance(following, cst.Element):
            return None
        return self.resolve_bn(following.value, dim)

    def _sole_sequential_argument(self, call: cst.Call) -> bool:
        arg = self.parent(call)
        if not isinstance(arg, cst.Arg) or arg.keyword is not None or arg.star:
            return False
        owner = self.parent(arg)
        return isinstance(owner, cst.Call) and self.kind(owner) == "seq" and len(owner.args) == 1

    def _ordered_dict_item(
        self, pair: cst.Tuple, element: cst.Element, holder: cst.Element, dim: Optional[int]
    ) -> Tuple[bool, Optional[_Bn]]:
        """``OrderedDict([("conv", <expr>), ("bn", BatchNorm2d(...))])`` in a Sequential."""
        if len(pair.elements) != 2 or pair.elements[1] is not element:
            return False, None
        items = self.parent(holder)
        arg = self.parent(items) if items is not None else None
        odict = self.parent(arg) if arg is not None else None
        if not (
            isinstance(items, (cst.List, cst.Tuple))
            and isinstance(arg, cst.Arg)
            and arg.keyword is None
            and not arg.star
            and isinstance(odict, cst.Call)
            and self.kind(odict) == "odict"
            and len(odict.args) == 1
            and self._sole_sequential_argument(odict)
        ):
            return False, None
        for i, current in enumerate(items.elements):
            if current is holder:
                break
        if i + 1 >= len(items.elements):
            return True, None
        following = items.elements[i + 1].value
        if not isinstance(following, cst.Tuple) or len(following.elements) != 2:
            return True, None
        return True, self.resolve_bn(following.elements[1].value, dim)

    # -- lists built for nn.Sequential(*layers) --------------------------------------
    def _list_name(self, statement: cst.CSTNode) -> Optional[str]:
        """``L`` when ``statement`` adds layers to a list ``L``, else None."""
        if isinstance(statement, cst.Assign):
            if len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name):
                if isinstance(statement.value, cst.List):
                    return statement.targets[0].target.value
            return None
        if isinstance(statement, cst.AnnAssign):
            if isinstance(statement.target, cst.Name) and isinstance(statement.value, cst.List):
                return statement.target.value
            return None
        if isinstance(statement, cst.AugAssign):
            if (
                isinstance(statement.operator, cst.AddAssign)
                and isinstance(statement.target, cst.Name)
                and isinstance(statement.value, (cst.List, cst.Tuple))
            ):
                return statement.target.value
            return None
        if isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Call):
            call = statement.value
            func = call.func
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
                return None
            if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
                return None
            if func.attr.value == "append":
                return func.value.value
            if func.attr.value == "extend" and isinstance(call.args[0].value, (cst.List, cst.Tuple)):
                return func.value.value
        return None

    def _contribution_statement(self, literal: cst.CSTNode) -> Optional[cst.CSTNode]:
        p = self.parent(literal)
        if isinstance(p, cst.Arg):
            p = self.parent(self.parent(p))  # Arg -> Call -> Expr
        if p is not None and self._list_name(p) is not None:
            return p
        return None

    def _added(self, statement: cst.CSTNode) -> List[object]:
        """The layers a contribution statement adds, in order."""
        if isinstance(statement, cst.Expr):
            call = statement.value
            assert isinstance(call, cst.Call)
            value = call.args[0].value
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "append":
                return [value]
        else:
            value = statement.value  # type: ignore[attr-defined]
        assert isinstance(value, (cst.List, cst.Tuple))
        return [e.value if isinstance(e, cst.Element) else _OPAQUE for e in value.elements]

    def _next_in_run(self, expr: cst.BaseExpression, statement: cst.CSTNode, dim: Optional[int]) -> Optional[_Bn]:
        name = self._list_name(statement)
        assert name is not None
        scope = self.scope_of(statement)
        if not self._list_feeds_sequential(scope, name):
            return None
        located = self.block_slots(statement)
        if located is None:
            return None
        slots, index = located

        def adds(slot: cst.CSTNode) -> bool:
            return self._list_name(slot) == name

        def resets(slot: cst.CSTNode) -> bool:
            return isinstance(slot, (cst.Assign, cst.AnnAssign))

        start = index
        while start > 0 and not resets(slots[start]) and adds(slots[start - 1]):
            start -= 1
        end = index
        while end + 1 < len(slots) and adds(slots[end + 1]) and not resets(slots[end + 1]):
            end += 1
        layers: List[object] = []
        for slot in slots[start:end + 1]:
            layers.extend(self._added(slot))
        for i, layer in enumerate(layers):
            if layer is expr:
                if i + 1 < len(layers) and isinstance(layers[i + 1], cst.BaseExpression):
                    return self.resolve_bn(layers[i + 1], dim)  # type: ignore[arg-type]
                return None
        return None

    def _list_feeds_sequential(self, scope: cst.CSTNode, name: str) -> bool:
        """Whether the list ``name`` is only built up and given to ``nn.Sequential(*name)``."""
        key = (id(scope), name)
        cached = self._lists.get(key)
        if cached is not None:
            return cached
        result = False
        for mention in self.name_mentions(scope, name):
            p = self.parent(mention)
            if isinstance(p, cst.AssignTarget):
                ok = self._list_name(self.parent(p)) == name  # type: ignore[arg-type]
            elif isinstance(p, (cst.AnnAssign, cst.AugAssign)):
                ok = p.target is mention and self._list_name(p) == name
            elif isinstance(p, cst.Attribute) and p.value is mention:
                call = self.parent(p)
                statement = self.parent(call) if isinstance(call, cst.Call) and call.func is p else None
                ok = statement is not None and self._list_name(statement) == name
            elif isinstance(p, cst.Arg) and p.keyword is None:
                owner = self.parent(p)
                if p.star == "*" and self.kind(owner) == "seq":
                    ok = result = True
                else:
                    ok = (
                        not p.star
                        and isinstance(owner, cst.Call)
                        and isinstance(owner.func, cst.Name)
                        and owner.func.value == "len"
                    )
            else:
                ok = False
            if not ok:
                result = False
                break
        self._lists[key] = result
        return result


def _contains(ancestor: cst.CSTNode, node: cst.CSTNode, analysis: _Analysis) -> bool:
    current: Optional[cst.CSTNode] = node
    while current is not None:
        if current is ancestor:
            return True
        current = analysis.parent(current)
    return False
