"""The semantic model of a module: scopes, the bindings of names in them, and
which bindings reach a use.

Rules ask it instead of keeping binding tables of their own, so that one
question has one answer:

* ``location(stack)``: where the node being visited is (its scopes and its
  place among the statements of its function), from the walker's stack;
* ``lookup(name, location)``: the scope that binds ``name`` as Python resolves
  it (local, enclosing functions, module; class bodies are skipped from inside
  their methods) and its bindings there; a module's name is also bound by the
  assignments of every function that declares it ``global``;
* ``reaching(name, location)``: the bindings that may give ``name`` its value
  at that location, flow-sensitively where the code allows it: the latest
  assignment that runs on every path to the use (same block or an enclosing
  one, earlier) together with any assignment between it and the use (in a
  branch, or later in a loop around the use); every binding of the scope when
  no assignment dominates the use;
* ``attribute_bindings(cls)``: ``self.attr = value`` in the methods of a class;
* ``returns(function)``: the values a function returns, ``is_generator(function)``:
  whether it yields;
* ``block(block_id)``: the block a step of a path names (to read the statements
  between a binding and a use);
* ``definitions(name)`` and ``occurrences(name)``: every ``def``/``class``
  named ``name`` anywhere in the module, and every place the identifier is
  written, whatever the scope: lexical questions, for answers that must hold
  for any function of that name or prove that a name is not used elsewhere.

A binding records its *kind* (``value``: ``name = value`` or ``name: T =
value`` or ``(name := value)``; ``aug``: ``name op= value``; ``part``: one
target of ``a, b = value``, with its ``index`` in a flat target without a
starred element; ``iter``/``iter_part``: ``for name in value``;
``with``: ``with value as name``; ``param``: a parameter, with its annotation
as value; ``def``/``class``: a definition, the statement being the value;
``unknown``: anything else: imports, ``global``, starred targets,
``except ... as``), the value expression, and its own location, so a
question about a name in that value is asked where the value is computed.

The tables of a scope are built the first time a question concerns it, by a
walk of that scope alone (nested functions and classes are separate scopes),
so files whose rules never ask pay nothing.  The model knows no library: what
a value *is* (a tensor on the device, a NumPy array) is for the rules' shared
modules to say.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import libcst as cst

from torchlint.nodes import inner_children, iter_children

# One entry per block on the way from the scope's body to a statement, outermost
# first: (id(block), index of the statement in it, the block is one line of
# small statements `a = 1; b = a`, the block is a loop's body).
Step = Tuple[int, int, bool, bool]
Path = Tuple[Step, ...]

SCOPE_TYPES = frozenset(
    {cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp}
)
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})
_NESTED = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda, *_COMPREHENSIONS})
_BLOCKS = frozenset({cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine})
_LOOP_TYPES = frozenset({cst.For, cst.While})


class Location(NamedTuple):
    scopes: Tuple[cst.CSTNode, ...]  # outermost (the module) first
    path: Path

    @property
    def scope(self) -> cst.CSTNode:
        return self.scopes[-1]


class Binding(NamedTuple):
    name: str
    kind: str
    value: Optional[cst.CSTNode]
    location: Location
    index: Optional[int] = None  # ``part``/``iter_part``: which element of the unpacked value


class _ScopeTable(NamedTuple):
    names: Dict[str, List[Binding]]
    declared_global: frozenset
    declared_nonlocal: frozenset


def _body(block: cst.CSTNode) -> Sequence[cst.CSTNode]:
    body = getattr(block, "body", ())
    return body if isinstance(body, (list, tuple)) else ()


def location_of(stack: Sequence[cst.CSTNode]) -> Location:
    """Where ``stack[-1]`` is: the scope nodes around it and its path of statements."""
    scopes: List[cst.CSTNode] = []
    start = 0
    for i, node in enumerate(stack[:-1]):
        if type(node) in SCOPE_TYPES:
            if type(node) is cst.ClassDef and i + 1 < len(stack) and stack[i + 1] is not node.body:
                continue  # a decorator or base of the class: the enclosing scope
            if type(node) in (cst.FunctionDef, cst.Lambda) and not _in_own_body(node, stack[i + 1]):
                continue  # a default, decorator or annotation: evaluated outside
            scopes.append(node)
            start = i
    if not scopes or type(stack[0]) is not cst.Module:
        scopes.insert(0, stack[0])
    path: List[Step] = []
    for i in range(start, len(stack) - 1):
        node = stack[i]
        if type(node) in _BLOCKS:
            child = stack[i + 1]
            for index, item in enumerate(_body(node)):
                if item is child:
                    owner = stack[i - 1] if i > 0 else None
                    loop = type(owner) in _LOOP_TYPES and owner.body is node
                    path.append((id(node), index, type(node) is cst.SimpleStatementLine, loop))
                    break
    return Location(tuple(scopes), tuple(path))


def _in_own_body(node: cst.CSTNode, child: cst.CSTNode) -> bool:
    if type(node) is cst.FunctionDef:
        return child is node.body
    return child is node.body or child is node.params  # a lambda's parameters are its own


class SemanticModel:
    def __init__(self, module: cst.Module, source: Optional[str] = None) -> None:
        self.module = module
        # Functions that rebind a module's name (`global`) are found by a walk
        # of the statements, done only for a module whose text says `global`.
        self._declares_global = source is None or "global" in source
        self._rebound: Dict[str, List[Binding]] = {}
        self._tables: Dict[int, _ScopeTable] = {}
        self._attributes: Dict[int, Dict[str, List[Binding]]] = {}
        self._functions: Dict[int, Tuple[List[Tuple[cst.BaseExpression, Path]], bool]] = {}
        self._blocks: Dict[int, cst.CSTNode] = {}  # every block the walks of scopes passed
        self._lexical: Optional[Dict[str, List["Occurrence"]]] = None
        self._definitions: Optional[Dict[str, List["Occurrence"]]] = None
        self._globals: Optional[List[Tuple[cst.Global, Tuple[cst.CSTNode, ...]]]] = None

    # -- tables ------------------------------------------------------------------
    def table(self, scopes: Tuple[cst.CSTNode, ...]) -> _ScopeTable:
        scope = scopes[-1]
        table = self._tables.get(id(scope))
        if table is None:
            table = self._tables[id(scope)] = _collect(scopes, self._blocks)
        return table

    def lookup(self, name: str, location: Location) -> Tuple[Optional[Tuple[cst.CSTNode, ...]], List[Binding]]:
        """The scopes (outermost first, ending with the binding scope) where
        ``name`` resolves from ``location``, and its bindings there; ``(None, [])``
        for a name bound nowhere in the module (a builtin, or undefined)."""
        scopes = location.scopes
        innermost = True
        for depth in range(len(scopes), 0, -1):
            chain = scopes[:depth]
            scope = chain[-1]
            if type(scope) is cst.ClassDef and not innermost:
                continue  # class bodies are not visible from their methods
            table = self.table(chain)
            if name in table.declared_global:
                module_chain = scopes[:1]
                return module_chain, [*self.table(module_chain).names.get(name, []), *self.rebound_globally(name)]
            if name in table.declared_nonlocal:
                innermost = False
                continue
            found = table.names.get(name)
            if depth == 1:
                found = [*(found or ()), *self.rebound_globally(name)]
            if found:
                return chain, found
            innermost = False
        return None, []

    def rebound_globally(self, name: str) -> List[Binding]:
        """The assignments to ``name`` in the functions that declare it
        ``global``: they rebind the module's name whenever they run, so a
        question about the module's name must count them."""
        found = self._rebound.get(name)
        if found is None:
            found = self._rebound[name] = []
            if self._declares_global:
                for statement, scopes in self._global_statements():
                    for item in statement.names:
                        if item.name.value == name:
                            found.extend(self.table(scopes).names.get(name, ()))
        return found

    def _global_statements(self) -> List[Tuple[cst.Global, Tuple[cst.CSTNode, ...]]]:
        """Every ``global`` statement of the module, in textual order, with the
        scopes around it (the module, then each function or class whose body
        holds it): one walk of the statements alone, as an expression holds
        none (iterative, as the lexical index)."""
        if self._globals is None:
            self._globals = []
            todo: List[Tuple[cst.CSTNode, Tuple[cst.CSTNode, ...]]] = [(self.module, (self.module,))]
            while todo:
                node, scopes = todo.pop()
                kind = type(node)
                if kind is cst.Global:
                    self._globals.append((node, scopes))
                    continue
                inner = (*scopes, node) if kind is cst.FunctionDef or kind is cst.ClassDef else scopes
                for child in reversed(iter_children(node)):
                    if not _is_expression(type(child)):
                        todo.append((child, inner))
        return self._globals

    def bindings(self, name: str, location: Location) -> List[Binding]:
        return self.lookup(name, location)[1]

    def reaching(self, name: str, location: Location) -> List[Binding]:
        """The bindings that may give ``name`` its value at ``location``."""
        chain, everywhere = self.lookup(name, location)
        if not everywhere or chain is None or chain[-1] is not location.scope:
            return everywhere  # a closure's or the module's variable: any binding may reach
        # A function's assignment to the global may run at any time.
        found = [b for b in everywhere if b.location.scope is location.scope]
        elsewhere = [b for b in everywhere if b.location.scope is not location.scope]
        use = location.path
        latest: Optional[Binding] = None
        for b in found:
            if _dominates(b, use) and (latest is None or _order(b.location.path) > _order(latest.location.path)):
                latest = b
        if latest is None:
            return everywhere
        start, end = _order(latest.location.path), _order(use)
        kills = {step[0] for step in latest.location.path}
        loops = [step[0] for step in use if step[3] and step[0] not in kills]
        reaching = [latest]
        for b in found:
            if b is latest:
                continue
            at = _order(b.location.path)
            if start < at < end:
                reaching.append(b)  # between the dominating binding and the use
            elif at >= end and any(step[0] in loops for step in b.location.path):
                reaching.append(b)  # later in a loop around the use: the next iteration sees it
        return reaching + elsewhere

    def attribute_bindings(self, cls: cst.ClassDef, location: Location) -> Dict[str, List[Binding]]:
        """``attr -> bindings`` for ``self.attr = value`` (and ``+=``, annotated)
        in the methods of ``cls`` (``self`` being each method's first parameter);
        ``location`` is where ``cls`` is (its scopes)."""
        found = self._attributes.get(id(cls))
        if found is not None:
            return found
        found = self._attributes[id(cls)] = {}
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for statement in body:
            if not isinstance(statement, cst.FunctionDef):
                continue
            params = statement.params.params or statement.params.posonly_params
            if not params:
                continue
            me = params[0].name.value
            scopes = (*location.scopes, cls, statement)
            for node, path in _scope_walk(statement, self._blocks):
                targets: List[Tuple[cst.BaseExpression, str, Optional[cst.CSTNode], Optional[int]]] = []
                if isinstance(node, cst.Assign):
                    for target in node.targets:
                        t = target.target
                        if isinstance(t, (cst.Tuple, cst.List)):
                            # `self.a, self.b = value`: parts of the value, by
                            # position when no element is starred
                            flat = not any(isinstance(e, cst.StarredElement) for e in t.elements)
                            for i, e in enumerate(t.elements):
                                part = flat and not isinstance(e.value, (cst.Tuple, cst.List))
                                targets.append((e.value, "part", node.value, i) if part else (e.value, "unknown", None, None))
                        else:
                            targets.append((t, "value", node.value, None))
                elif isinstance(node, cst.AugAssign):
                    targets.append((node.target, "aug", node.value, None))
                elif isinstance(node, cst.AnnAssign) and node.value is not None:
                    targets.append((node.target, "value", node.value, None))
                for target, kind, value, index in targets:
                    if (
                        isinstance(target, cst.Attribute)
                        and isinstance(target.value, cst.Name)
                        and target.value.value == me
                    ):
                        attr = target.attr.value
                        found.setdefault(attr, []).append(Binding(attr, kind, value, Location(scopes, path), index))
        return found

    def returns(self, function: cst.FunctionDef) -> List[cst.BaseExpression]:
        """The values of the function's own ``return value`` statements (not
        those of nested functions; a bare ``return`` gives none)."""
        return [value for value, _ in self._function(function)[0]]

    def is_generator(self, function: cst.FunctionDef) -> bool:
        """Whether the function's own code yields (its returns then end the
        iteration, they are not what a call gives)."""
        return self._function(function)[1]

    def returned(self, function: cst.FunctionDef, scopes: Tuple[cst.CSTNode, ...]) -> List[Tuple[cst.BaseExpression, Location]]:
        """:meth:`returns`, each value with its location (``scopes``: those
        around the ``def``, as its binding's location has them)."""
        inner = (*scopes, function)
        return [(value, Location(inner, path)) for value, path in self._function(function)[0]]

    def _function(self, function: cst.FunctionDef) -> Tuple[List[Tuple[cst.BaseExpression, Path]], bool]:
        found = self._functions.get(id(function))
        if found is None:
            values: List[Tuple[cst.BaseExpression, Path]] = []
            yields = False
            for node, path in _scope_walk(function, self._blocks):
                if type(node) is cst.Return and node.value is not None:
                    values.append((node.value, path))
                elif type(node) is cst.Yield:
                    yields = True
            found = self._functions[id(function)] = (values, yields)
        return found

    def block(self, block_id: int) -> Optional[cst.CSTNode]:
        """The block (module, indented block or line of small statements)
        that a step of a path names, once a question has been asked about the
        scope that holds it (a binding's path, or the use's scope)."""
        return self._blocks.get(block_id)

    def definitions(self, name: str) -> List["Occurrence"]:
        """Every ``def name``/``class name`` statement of the module, in any
        scope (``Occurrence.node`` is the statement)."""
        if self._definitions is None:
            self._definitions = self._definition_index()
        return self._definitions.get(name, [])

    def _definition_index(self) -> Dict[str, List["Occurrence"]]:
        """Every ``def``/``class`` statement by name, the first time one is
        asked for: a walk of the statements only (a ``def`` or ``class`` lies
        in no expression and no simple statement), each with its ancestors
        as ``_lexical_index`` chains them."""
        definitions: Dict[str, List[Occurrence]] = {}
        todo: List[Tuple[cst.CSTNode, Optional[tuple]]] = [(self.module, None)]
        while todo:
            node, chain = todo.pop()
            kind = type(node)
            if kind is cst.FunctionDef or kind is cst.ClassDef:
                definitions.setdefault(node.name.value, []).append(Occurrence(node, chain))
            inner = (node, chain)
            for child in reversed(iter_children(node)):
                if _holds_statements(type(child)):
                    todo.append((child, inner))
        return definitions

    def occurrences(self, name: str) -> List["Occurrence"]:
        """Every ``Name`` node spelled ``name`` in the module, in any scope:
        uses, bindings, parameters, keyword names of calls, parts of imports;
        not the attribute of ``x.name``.  Its length proves that a name is
        used nowhere else than where a question expects it."""
        return self._lexical_index().get(name, [])

    def _lexical_index(self) -> Dict[str, List["Occurrence"]]:
        """Every ``Name`` node by its name: one walk of the whole module, the
        first time ``occurrences`` is asked (iterative: a long ``a + b + ...``
        chain nests deeper than Python's recursion limit)."""
        if self._lexical is None:
            names: Dict[str, List[Occurrence]] = {}
            todo: List[Tuple[cst.CSTNode, Optional[tuple]]] = [(self.module, None)]
            while todo:
                node, chain = todo.pop()
                kind = type(node)
                if kind is cst.Name:
                    names.setdefault(node.value, []).append(Occurrence(node, chain))
                    continue
                inner = (node, chain)
                attr = node.attr if kind is cst.Attribute else None
                for child in reversed(iter_children(node)):
                    if child is not attr:
                        todo.append((child, inner))
            self._lexical = names
        return self._lexical


# Whether a node type is an expression (``isinstance`` against LibCST's
# abstract classes goes through ABCMeta's slow path; the answer is kept per type).
_EXPRESSIONS: Dict[type, bool] = {}


def _is_expression(kind: type) -> bool:
    known = _EXPRESSIONS.get(kind)
    if known is None:
        known = _EXPRESSIONS[kind] = cst.BaseExpression in kind.__mro__
    return known


_STATEMENT_HOLDERS: Dict[type, bool] = {}


def _holds_statements(kind: type) -> bool:
    """A node type that is or may hold a compound statement: a block, a
    compound statement, or one of their clauses (``else``, ``except``,
    ``finally``, a ``match`` case); not an expression or a simple statement."""
    known = _STATEMENT_HOLDERS.get(kind)
    if known is None:
        known = _STATEMENT_HOLDERS[kind] = kind is cst.IndentedBlock or any(
            base in kind.__mro__ for base in (cst.BaseCompoundStatement, cst.Else, cst.ExceptHandler, cst.Finally,
                                              getattr(cst, "ExceptStarHandler", cst.ExceptHandler),
                                              getattr(cst, "MatchCase", cst.Else)))
    return known


class Occurrence:
    """A node found by a lexical question, with its ancestors kept as a linked
    chain so that its location is computed only when it is asked for."""

    __slots__ = ("node", "_chain")

    def __init__(self, node: cst.CSTNode, chain: Optional[tuple]) -> None:
        self.node = node
        self._chain = chain

    @property
    def parent(self) -> Optional[cst.CSTNode]:
        return self._chain[0] if self._chain is not None else None

    @property
    def location(self) -> Location:
        stack: List[cst.CSTNode] = [self.node]
        chain = self._chain
        while chain is not None:
            stack.append(chain[0])
            chain = chain[1]
        stack.reverse()
        return location_of(stack)


def _order(path: Path) -> Tuple[int, ...]:
    """Textual order of statements: their indexes, block by block."""
    return tuple(step[1] for step in path)


def _dominates(b: Binding, use: Path) -> bool:
    """Whether ``b`` runs on every path to ``use``, before it: in the same block
    or an enclosing one, earlier (only lines of small statements deeper down);
    a parameter; or the loop or ``with`` statement whose body holds the use."""
    path = b.location.path
    k = 0
    while k < len(path) and k < len(use) and path[k] == use[k]:
        k += 1
    if k == len(path):
        return b.kind in ("iter", "iter_part", "with")  # the statement around the use binds it first
    if k == len(use) or path[k][0] != use[k][0] or path[k][1] >= use[k][1]:
        return False
    return all(step[2] for step in path[k + 1:])


def _scope_walk(scope: cst.CSTNode, blocks: Dict[int, cst.CSTNode]) -> Iterator[Tuple[cst.CSTNode, Path]]:
    """Pre-order walk of a scope's own code with each node's statement path;
    nested scopes are yielded (so their names are bound) but not entered,
    except a comprehension's first iterable, which runs in the enclosing scope.
    The leaves below the roots (names, numbers, strings, ``pass``: a third of
    the nodes) are not yielded: none binds a name, returns or yields.  The
    blocks it passes are noted in ``blocks`` by id."""
    if type(scope) is cst.Module:
        roots: List[Tuple[cst.CSTNode, Path]] = [(scope, ())]
    elif type(scope) in (cst.FunctionDef, cst.ClassDef):
        roots = [(scope.body, ())]
    elif type(scope) is cst.Lambda:
        roots = [(scope.body, ())]
    else:  # a comprehension: its targets, conditions and element
        roots = [(child, ()) for child in inner_children(scope)]
    todo = list(reversed(roots))
    loop_bodies: set = set()
    while todo:
        node, path = todo.pop()
        yield node, path
        kind = type(node)
        if node is not scope and kind in _NESTED:
            if kind in _COMPREHENSIONS:
                first = node.for_in
                todo.append((first.iter, path))
            continue
        children = inner_children(node)
        if kind in _BLOCKS:
            blocks[id(node)] = node
            body = _body(node)
            ids = {id(item): i for i, item in enumerate(body)}
            line = kind is cst.SimpleStatementLine
            loop = id(node) in loop_bodies
            for child in reversed(children):
                i = ids.get(id(child))
                todo.append((child, path if i is None else (*path, (id(node), i, line, loop))))
        else:
            if kind in _LOOP_TYPES:
                loop_bodies.add(id(node.body))
            for child in reversed(children):
                todo.append((child, path))


def _collect(scopes: Tuple[cst.CSTNode, ...], blocks: Dict[int, cst.CSTNode]) -> _ScopeTable:
    scope = scopes[-1]
    names: Dict[str, List[Binding]] = {}
    declared_global: set = set()
    declared_nonlocal: set = set()
    with_names: set = set()

    def add(name: str, kind: str, value, path: Path, index: Optional[int] = None) -> None:
        names.setdefault(name, []).append(Binding(name, kind, value, Location(scopes, path), index))

    def add_target(
        target: cst.BaseExpression, kind: str, value, path: Path, part_kind: str = "unknown", index: Optional[int] = None
    ) -> None:
        if isinstance(target, cst.Name):
            add(target.value, kind, value, path, index)
        elif isinstance(target, (cst.Tuple, cst.List)):
            # An element's position is known in a flat target without a
            # starred element (`a, b = f()`), not deeper (`(a, b), c = ...`).
            flat = kind != part_kind and not any(isinstance(e, cst.StarredElement) for e in target.elements)
            for i, element in enumerate(target.elements):
                add_target(element.value, part_kind, value, path, part_kind, i if flat else None)
        elif isinstance(target, cst.StarredElement):
            add_target(target.value, "unknown", None, path)

    kind = type(scope)
    if kind in (cst.FunctionDef, cst.Lambda):
        params = scope.params
        start: Path = ((id(scope.body), -1, False, False),) if kind is cst.FunctionDef else ()
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            add(param.name.value, "param", param.annotation.annotation if param.annotation else None, start)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                add(star.name.value, "unknown", None, start)
    for node, path in _scope_walk(scope, blocks):
        t = type(node)
        if node is scope:
            continue
        if t is cst.Assign:
            for target in node.targets:
                add_target(target.target, "value", node.value, path, "part")
        elif t is cst.AnnAssign:
            if node.value is not None:
                add_target(node.target, "value", node.value, path)
        elif t is cst.AugAssign:
            add_target(node.target, "aug", node.value, path)
        elif t is cst.For or t is cst.CompFor:
            add_target(node.target, "iter", node.iter, path, "iter_part")
        elif t is cst.FunctionDef:
            add(node.name.value, "def", node, path)
        elif t is cst.ClassDef:
            add(node.name.value, "class", node, path)
        elif t is cst.Global:
            declared_global.update(item.name.value for item in node.names)
        elif t is cst.Nonlocal:
            declared_nonlocal.update(item.name.value for item in node.names)
        elif t is cst.WithItem:
            if node.asname is not None and isinstance(node.asname.name, cst.Name):
                with_names.add(id(node.asname))
                add(node.asname.name.value, "with", node.item, path)
        elif t is cst.AsName:
            if id(node) not in with_names:
                add_target(node.name, "unknown", None, path)
        elif t is cst.NamedExpr:
            add_target(node.target, "value", node.value, path)
        elif (t is cst.Import or t is cst.ImportFrom) and not isinstance(getattr(node, "names", None), cst.ImportStar):
            for alias in node.names:
                if alias.asname is None:
                    name = alias.name
                    while isinstance(name, cst.Attribute):
                        name = name.value
                    if isinstance(name, cst.Name):
                        add(name.value, "unknown", None, path)
    return _ScopeTable(names, frozenset(declared_global), frozenset(declared_nonlocal))
