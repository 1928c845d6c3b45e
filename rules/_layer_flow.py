"""Layer flow: which layer's output feeds which, in the code that builds and
calls ``torch.nn`` layers (the layers themselves are ``rules/_layers.py``).

``LayerFlow(layers, module, sensitive).follower(call, accepts)`` answers, for
the constructor call of a layer, the layer that *every* use of its output goes
straight into, when ``accepts`` says yes to it:

* adjacent arguments of ``nn.Sequential(...)``, adjacent entries of an
  ``OrderedDict`` given to it, adjacent elements of a list passed as
  ``nn.Sequential(*layers)`` and built in the same function (``layers = [...]``,
  ``layers += [...]``, ``layers.extend([...])``, consecutive
  ``layers.append(...)`` statements);
* ``bn(conv(x))``, or ``y = conv(x)`` followed in the same block by ``bn(y)``,
  where ``conv`` and ``bn`` are modules assigned once in the same function, or
  attributes (``self.conv``, ``self.bn``) assigned once in the same class (and
  not used by a subclass in the module).

A layer referred to by a name or an attribute has a follower only when every
use of it feeds that layer; reading one of its ``sensitive`` attributes, or
any other use, means none.  The answer is ``(layer, label)``: the following
``Layer`` and how the code refers to it (``"self.bn"``; None for a call in
place).
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import libcst as cst

from torchlint.nodes import iter_children, walk_nodes
from torchlint.rules._layers import Layer
from torchlint.semantic import Binding, Location, SemanticModel, location_of

_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Module, cst.Lambda)

_BAD = None


class _Neutral:
    pass


_NEUTRAL = _Neutral()

# The layer a use of another resolves to (the Layer, how the code refers to it),
# harmless, or None (anything else).
Follower = Tuple[Layer, Optional[str]]
Accepts = Callable[[Layer], bool]
_Use = Union[Follower, _Neutral, None]

_OPAQUE = object()


class LayerFlow:
    """Data-flow questions about the layers of one module, answered from a
    parent map (build one only for a file that has layers to ask about).

    ``layers`` maps ``id(call)`` to the ``Layer`` each constructor call of the
    module builds; ``sensitive`` are the attributes of a layer (``conv.bias``)
    whose use makes its output matter elsewhere; which value a name or a
    ``self.attr`` holds is the module's ``semantic`` model's answer."""

    def __init__(
        self, layers: Dict[int, Layer], module: cst.Module, sensitive: FrozenSet[str], semantic: SemanticModel
    ) -> None:
        self.layers = layers
        self.sensitive = sensitive
        self.semantic = semantic
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
    def follower(self, call: cst.Call, accepts: Accepts) -> Optional[Follower]:
        """The accepted layer that every use of the layer built by ``call`` feeds, if any."""
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
            found: Optional[Follower] = None
            for mention in mentions:
                if mention is target:
                    continue
                use = self.classify_use(mention, accepts)
                if use is None:
                    return None
                if found is None and not isinstance(use, _Neutral):
                    found = use
            return found
        in_sequence, bn = self.next_in_sequence(call, accepts)
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
    def classify_use(self, expr: cst.BaseExpression, accepts: Accepts) -> _Use:
        in_sequence, bn = self.next_in_sequence(expr, accepts)
        if in_sequence:
            return bn
        p = self.parent(expr)
        if isinstance(p, cst.Call) and p.func is expr:
            return self.call_feeds(p, accepts)
        if isinstance(p, cst.Attribute) and p.value is expr:
            return _BAD if p.attr.value in self.sensitive else _NEUTRAL
        return _BAD

    def call_feeds(self, call: cst.Call, accepts: Accepts) -> Optional[Follower]:
        """``bn(conv(x))`` or ``y = conv(x)`` then ``bn(y)``: the accepted layer ``bn``."""
        p = self.parent(call)
        if isinstance(p, cst.Arg):
            return self._sole_argument_of(p, accepts)
        if (
            isinstance(p, cst.Assign)
            and p.value is call
            and len(p.targets) == 1
            and isinstance(p.targets[0].target, cst.Name)
        ):
            return self._temporary_feeds(p, p.targets[0].target.value, accepts)
        return None

    def _sole_argument_of(self, arg: cst.Arg, accepts: Accepts) -> Optional[Follower]:
        """When ``arg`` is the only argument of a call of an accepted layer, that layer."""
        if arg.keyword is not None or arg.star:
            return None
        owner = self.parent(arg)
        if not isinstance(owner, cst.Call) or len(owner.args) != 1:
            return None
        return self.resolve(owner.func, accepts)

    def _temporary_feeds(self, assign: cst.Assign, var: str, accepts: Accepts) -> Optional[Follower]:
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
            bn = self._sole_argument_of(p, accepts) if isinstance(p, cst.Arg) else None
            if bn is None:
                return None
            if rebinds or len(self.name_mentions(scope, var)) == 2:
                return bn
            return None
        return None

    def resolve(self, expr: cst.BaseExpression, accepts: Accepts) -> Optional[Follower]:
        """The accepted layer that ``expr`` refers to (a constructor call, or a name or
        ``self.attr`` assigned one once), and how the code refers to it."""
        label: Optional[str] = None
        if isinstance(expr, cst.Call):
            value: Optional[cst.CSTNode] = expr
        elif isinstance(expr, cst.Name):
            scope = self.scope_of(expr)
            if isinstance(scope, cst.Lambda):
                return None
            if not self._followed(scope, expr.value):
                return None
            chain, bindings = self.semantic.lookup(expr.value, self.location(expr))
            if chain is None or chain[-1] is not scope:
                return None  # bound in an enclosing scope, or nowhere
            value = _sole_value(bindings)
            label = expr.value
        elif (
            isinstance(expr, cst.Attribute)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == "self"
        ):
            cls = self.method_class(self.scope_of(expr))
            if cls is None:
                return None
            attr = expr.attr.value
            stores = [a for a in self.attr_mentions(cls, attr) if self._is_attr_store(a)]
            bindings = self.semantic.attribute_bindings(cls, Location(self.location(cls).scopes, ())).get(attr, [])
            value = _sole_value(bindings)
            # The model sees `self.<attr> = ...` in the methods only: the one it
            # sees must be the class's only store of the attribute.
            if len(stores) != 1 or value is None or not _contains(self.parent(value), stores[0], self):
                return None
            label = f"self.{attr}"
        else:
            return None
        layer = self.layers.get(id(value)) if isinstance(value, cst.Call) else None
        if layer is None or not accepts(layer):
            return None
        return layer, label

    def location(self, node: cst.CSTNode) -> Location:
        """Where ``node`` is, for the semantic model's questions."""
        stack: List[cst.CSTNode] = []
        current: Optional[cst.CSTNode] = node
        while current is not None:
            stack.append(current)
            current = self.parent(current)
        stack.reverse()
        return location_of(stack)

    def _followed(self, scope: cst.CSTNode, name: str) -> bool:
        """Whether the model sees every binding of ``name``: not when a nested
        scope declares it ``global``/``nonlocal`` (and so may rebind it), or
        when it is deleted."""
        return not any(isinstance(self.parent(n), (cst.NameItem, cst.Del)) for n in self.name_mentions(scope, name))

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
    def next_in_sequence(self, expr: cst.BaseExpression, accepts: Accepts) -> Tuple[bool, Optional[Follower]]:
        """Whether ``expr`` is a layer of an ``nn.Sequential`` (directly, through a
        list given to it, or an ``OrderedDict``), and the accepted layer right after it."""
        p = self.parent(expr)
        if isinstance(p, cst.Arg):
            owner = self.parent(p)
            if not isinstance(owner, cst.Call) or p.star:
                return False, None
            if p.keyword is None:
                if self.kind(owner) == "seq":
                    return True, self._after(owner.args, p, accepts, positional=True)
                statement = self.parent(owner)
                if isinstance(statement, cst.Expr) and self._list_name(statement) is not None:
                    return True, self._next_in_run(expr, statement, accepts)
                return False, None
            if self.kind(owner) == "odict" and self._sole_sequential_argument(owner):
                return True, self._after(owner.args, p, accepts, positional=False)
            return False, None
        if not isinstance(p, cst.Element):
            return False, None
        literal = self.parent(p)
        holder = self.parent(literal) if literal is not None else None
        if not isinstance(literal, (cst.List, cst.Tuple)):
            return False, None
        if isinstance(holder, cst.Arg) and holder.star == "*" and self.kind(self.parent(holder)) == "seq":
            return True, self._after(literal.elements, p, accepts, positional=True)
        if isinstance(literal, cst.Tuple) and isinstance(holder, cst.Element):
            return self._ordered_dict_item(literal, p, holder, accepts)
        statement = self._contribution_statement(literal)
        if statement is not None:
            return True, self._next_in_run(expr, statement, accepts)
        return False, None

    def _after(self, items: Sequence[cst.CSTNode], item: cst.CSTNode, accepts: Accepts, *, positional: bool) -> Optional[Follower]:
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
        return self.resolve(following.value, accepts)

    def _sole_sequential_argument(self, call: cst.Call) -> bool:
        arg = self.parent(call)
        if not isinstance(arg, cst.Arg) or arg.keyword is not None or arg.star:
            return False
        owner = self.parent(arg)
        return isinstance(owner, cst.Call) and self.kind(owner) == "seq" and len(owner.args) == 1

    def _ordered_dict_item(
        self, pair: cst.Tuple, element: cst.Element, holder: cst.Element, accepts: Accepts
    ) -> Tuple[bool, Optional[Follower]]:
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
        return True, self.resolve(following.elements[1].value, accepts)

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

    def _next_in_run(self, expr: cst.BaseExpression, statement: cst.CSTNode, accepts: Accepts) -> Optional[Follower]:
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
                    return self.resolve(layers[i + 1], accepts)  # type: ignore[arg-type]
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


def _contains(ancestor: cst.CSTNode, node: cst.CSTNode, flow: LayerFlow) -> bool:
    current: Optional[cst.CSTNode] = node
    while current is not None:
        if current is ancestor:
            return True
        current = flow.parent(current)
    return False


def _sole_value(bindings: Sequence[Binding]) -> Optional[cst.CSTNode]:
    """The value of the only binding, when it assigns one (``x = v``, ``x: T = v``)."""
    if len(bindings) != 1 or bindings[0].kind != "value":
        return None
    return bindings[0].value
