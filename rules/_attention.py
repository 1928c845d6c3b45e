"""Local data flow for TL402 (manual-attention): is a softmax the middle of
``softmax(q @ kᵀ ...) @ v`` written out over a few statements?

Everything here works on one scope (a function body, or a module's top-level
code) that holds a softmax candidate; the scope's statements are listed once,
in textual order, and names are followed through their latest assignment
before the use.  No parent map of the file is built.

Also the vocabulary of attention: the softmax functions and modules
(``SOFTMAX_FUNCTIONS``, ``SOFTMAX_MODULES``) and the names of fused paths
(``FUSED_HINTS``, ``mentions_fused_path``).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.rule import Context
from torchlint.rules._helpers import last_name, literal_int, method_name, positional, string_value
from torchlint.nodes import iter_children

MATMULS = frozenset({"torch.matmul", "torch.bmm"})
SOFTMAX_FUNCTIONS = frozenset(
    {"torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax", "torch.Tensor.softmax"}
)
SOFTMAX_MODULES = frozenset({"torch.nn.Softmax", "torch.nn.modules.activation.Softmax"})

# Identifiers that show a fused attention path next to the manual one
# (`if self.flash: F.scaled_dot_product_attention(...) else: <manual>`).
FUSED_HINTS = (
    "scaled_dot_product",
    "sdpa",
    "flash",
    "fused_attn",
    "xformers",
    "memory_efficient_attention",
    "flex_attention",
)
EINSUMS = frozenset({"torch.einsum", "torch.functional.einsum"})

# Calls that leave the attention weights as they are, for SDPA's purposes.
_CASTS = frozenset({"float", "half", "bfloat16", "double", "type_as", "to", "contiguous"})

_MAX_DEPTH = 16

# Scores: the rank of ``q @ kᵀ`` when the code says it (``k.transpose(2, 3)``
# is 4-D), else None; ``False`` when the expression is not scores at all.
Rank = Optional[int]
_NOT = False


class Scope:
    """The statements of one function body (or of a module's top level)."""

    def __init__(self, body: cst.CSTNode, ctx: Context) -> None:
        self.ctx = ctx
        self.items: List[cst.CSTNode] = []
        self.index: Dict[int, int] = {}
        # name -> [(item index, value)], value None when the binding is opaque
        # (a tuple target, a loop variable); AugAssign nodes are kept as such.
        self.defs: Dict[str, List[Tuple[int, Optional[cst.CSTNode]]]] = {}
        # name -> [(item index, the unpacked value)] for a tuple target (`q, k, v = qkv.unbind(0)`)
        self.parts: Dict[str, List[Tuple[int, cst.CSTNode]]] = {}  # (a tuple's own element when it is one)
        self._block(body)

    # -- listing --------------------------------------------------------------
    def _block(self, block: cst.CSTNode) -> None:
        body = getattr(block, "body", ())
        if isinstance(body, cst.BaseSuite):
            self._block(body)
            return
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small)
            elif isinstance(stmt, cst.BaseSmallStatement):
                self._small(stmt)
            elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self._add(stmt)
                self._bind(stmt.name.value, None)
            else:
                self._compound(stmt)

    def _compound(self, stmt: cst.CSTNode) -> None:
        self._add(stmt)  # the header: uses in it are found by _header_parts
        if isinstance(stmt, cst.Match):
            for case in stmt.cases:
                self._add(case)
                self._block(case.body)
            return
        if isinstance(stmt, cst.For):
            self._bind_target(stmt.target)
        elif isinstance(stmt, cst.With):
            for item in stmt.items:
                if item.asname is not None:
                    self._bind_target(item.asname.name)
        self._block(stmt.body)
        if isinstance(stmt, cst.Try) or isinstance(stmt, getattr(cst, "TryStar", cst.Try)):
            for handler in stmt.handlers:
                self._add(handler)
                self._block(handler.body)
            if stmt.orelse is not None:
                self._block(stmt.orelse.body)
            if stmt.finalbody is not None:
                self._block(stmt.finalbody.body)
            return
        orelse = getattr(stmt, "orelse", None)
        while orelse is not None:
            if isinstance(orelse, cst.If):
                self._add(orelse)
                self._block(orelse.body)
                orelse = orelse.orelse
            else:
                self._block(orelse.body)
                orelse = None

    def _add(self, node: cst.CSTNode) -> int:
        self.index[id(node)] = len(self.items)
        self.items.append(node)
        return len(self.items) - 1

    def _bind(self, name: str, value: Optional[cst.CSTNode]) -> None:
        self.defs.setdefault(name, []).append((len(self.items) - 1, value))

    def _bind_target(self, target: cst.CSTNode, value: Optional[cst.CSTNode] = None) -> None:
        if isinstance(target, cst.Name):
            self._bind(target.value, value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value)

    def _small(self, small: cst.CSTNode) -> None:
        self._add(small)
        if isinstance(small, cst.Assign):
            for target in small.targets:
                single = isinstance(target.target, cst.Name) and len(small.targets) == 1
                self._bind_target(target.target, small.value if single else None)
                if isinstance(target.target, (cst.Tuple, cst.List)):
                    names = target.target.elements
                    values = small.value.elements if isinstance(small.value, (cst.Tuple, cst.List)) else None
                    for position, element in enumerate(names):
                        if isinstance(element.value, cst.Name):
                            part = values[position].value if values and len(values) == len(names) else small.value
                            self.parts.setdefault(element.value.value, []).append((len(self.items) - 1, part))
        elif isinstance(small, cst.AugAssign):
            if isinstance(small.target, cst.Name):
                self._bind(small.target.value, small)
        elif isinstance(small, cst.AnnAssign):
            if isinstance(small.target, cst.Name):
                self._bind(small.target.value, small.value)
        elif isinstance(small, cst.Del):
            self._bind_target(small.target)
        elif isinstance(small, (cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)):
            for child in iter_children(small):
                for node in _walk(child):
                    if isinstance(node, cst.Name):
                        self._bind(node.value, None)

    # -- reaching definitions -------------------------------------------------
    def reaching(self, name: str, before: int) -> Tuple[Optional[int], Optional[cst.CSTNode]]:
        """The latest binding of ``name`` in an item before ``before``."""
        best: Tuple[Optional[int], Optional[cst.CSTNode]] = (None, None)
        for index, value in self.defs.get(name, ()):
            if index < before:
                best = (index, value)
            else:
                break
        return best

    # -- backward: is this expression attention scores? ------------------------
    def scores(self, expr: cst.BaseExpression, at: int, depth: int = 0):
        """The rank hint of ``q @ kᵀ`` (scaled, masked, biased) or ``_NOT``."""
        if depth > _MAX_DEPTH:
            return _NOT
        ctx = self.ctx
        if isinstance(expr, cst.Name):
            index, value = self.reaching(expr.value, at)
            if index is None or value is None:
                return _NOT
            if isinstance(value, cst.AugAssign):
                if isinstance(value.operator, (cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign, cst.DivideAssign)):
                    return self.scores(expr, index, depth + 1)
                return _NOT
            return self.scores(value, index, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            op = expr.operator
            if isinstance(op, cst.MatrixMultiply):
                return self._qk(expr.right, at, depth)
            if isinstance(op, (cst.Multiply, cst.Add)):
                rank = self.scores(expr.left, at, depth + 1)
                if rank is _NOT:
                    rank = self.scores(expr.right, at, depth + 1)
                return rank
            if isinstance(op, (cst.Divide, cst.Subtract)):
                return self.scores(expr.left, at, depth + 1)
            return _NOT
        if isinstance(expr, cst.Call):
            name = method_name(expr)
            if name in ("masked_fill", "masked_fill_") or (name in _CASTS and len(expr.args) <= 1):
                if ctx.qualname(expr.func) is None:
                    return self.scores(expr.func.value, at, depth + 1)
                return _NOT
            pair = matmul_operands(expr, ctx)
            if pair is not None:
                return self._qk(pair[1], at, depth)
            spec = einsum_spec(expr, ctx)
            if spec is not None:
                return einsum_qk_rank(spec)
        return _NOT

    def transposed_query(self, expr: cst.BaseExpression, at: int, depth: int = 0) -> bool:
        """Whether the query of the scores ``expr`` was itself transposed over
        its last two dimensions (``q = q.transpose(-2, -1)``, ``q.mT``) or laid
        out with positions last (``rearrange(q, "b (head c) h w -> b head c (h
        w)")``), through normalisation and casts: channel ("transposed")
        attention, as in XCiT's cross-covariance attention or Restormer, whose
        score matrix is channels by channels and whose head dimension is the
        number of positions.  SDPA saves no memory there, and its fused kernels
        do not take such head dimensions."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            return self._through(expr, at, depth, self.transposed_query)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.MatrixMultiply):
                return self._transposed(expr.left, at, depth + 1)
            return self.transposed_query(expr.left, at, depth + 1) or self.transposed_query(expr.right, at, depth + 1)
        if isinstance(expr, cst.Call):
            pair = matmul_operands(expr, self.ctx)
            if pair is not None:
                return self._transposed(pair[0], at, depth + 1)
            name = method_name(expr)
            if name in ("masked_fill", "masked_fill_") or name in _CASTS:
                return isinstance(expr.func, cst.Attribute) and self.transposed_query(expr.func.value, at, depth + 1)
        return False

    def _through(self, name: cst.Name, at: int, depth: int, ask) -> bool:
        """``ask`` of the value last assigned to ``name`` before ``at`` (not an
        augmented assignment)."""
        index, value = self.reaching(name.value, at)
        return index is not None and value is not None and not isinstance(value, cst.AugAssign) and (
            ask(value, index, depth + 1))

    def _transposed(self, query: cst.BaseExpression, at: int, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(query, cst.Name):
            index, value = self.reaching(query.value, at)
            if index is not None and value is None:  # a part of an unpacked value
                whole = next((v for i, v in self.parts.get(query.value, ()) if i == index), None)
                return whole is not None and self._transposed(whole, index, depth + 1)
            return self._through(query, at, depth, self._transposed)
        if isinstance(query, cst.Attribute):
            return query.attr.value == "mT"
        if isinstance(query, cst.Subscript):  # `qkv[0]`
            return self._transposed(query.value, at, depth + 1)
        if isinstance(query, (cst.ListComp, cst.GeneratorExp)):
            # `q, k, v = [t.transpose(-2, -1) for t in (qkv[0], qkv[1], qkv[2])]` (EdgeNeXt)
            return self._transposed(query.elt, at, depth + 1)
        if not isinstance(query, cst.Call) or not query.args:
            return False
        name = last_name(query.func)
        if name in ("unbind", "chunk") and isinstance(query.func, cst.Attribute):  # `q, k, v = qkv.unbind(0)`
            return self._transposed(query.func.value, at, depth + 1)
        if name == "permute" and isinstance(query.func, cst.Attribute):
            # `.reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 4, 1)`: the
            # positions (axis 1) last, the channels before them (XCiT's XCA)
            return _permute_dims(query) == [2, 0, 3, 4, 1]
        if name == "transpose" and len(query.args) == 2 and isinstance(query.func, cst.Attribute):
            # (only `(-2, -1)`: `.transpose(1, 2)` is the usual split into heads)
            return {literal_int(query.args[0].value), literal_int(query.args[1].value)} == {-2, -1}
        if name == "rearrange":
            pattern = string_value(query.args[1].value) if len(query.args) > 1 else None
            return pattern is not None and "->" in pattern and pattern.split("->")[1].strip().endswith(")")
        if name in ("normalize", "contiguous", "float", "half", "to", "type_as"):
            inner = query.func.value if isinstance(query.func, cst.Attribute) and name != "normalize" else query.args[0].value
            return self._transposed(inner, at, depth + 1)
        return False

    def _qk(self, right: cst.BaseExpression, at: int, depth: int):
        """``right`` is a transposed key: ``k.transpose(-2, -1)``, ``k.mT``..."""
        if depth > _MAX_DEPTH:
            return _NOT
        if isinstance(right, cst.Name):
            index, value = self.reaching(right.value, at)
            if index is None or value is None or isinstance(value, cst.AugAssign):
                return _NOT
            return self._qk(value, index, depth + 1)
        if isinstance(right, cst.Attribute):
            if right.attr.value == "mT" and not _is_weight(right.value):
                return None
            if right.attr.value == "T" and not _is_weight(right.value):
                return 2
            return _NOT
        if not isinstance(right, cst.Call) or any(a.star or a.keyword for a in right.args):
            return _NOT
        ctx = self.ctx
        name = method_name(right)
        if name is None:
            return _NOT
        if ctx.qualname(right.func) == "torch.transpose":
            args = positional(right)
            if len(args) != 3 or _is_weight(args[0].value):
                return _NOT
            return _swap_rank(args[1].value, args[2].value)
        if ctx.qualname(right.func) is not None or _is_weight(right.func.value):
            return _NOT
        if name == "transpose" and len(right.args) == 2:
            return _swap_rank(right.args[0].value, right.args[1].value)
        if name == "t" and not right.args:
            return 2
        if name == "permute" and right.args:
            dims = _permute_dims(right)
            n = len(dims)
            if n >= 2 and dims == list(range(n - 2)) + [n - 1, n - 2]:
                return n
        return _NOT

    # -- forward: do the weights only meet the values? -------------------------
    def weights_meet_values(self, chain: Sequence[cst.CSTNode], depth: int = 0) -> bool:
        """``chain`` runs from a small statement down to the softmax call."""
        statement = chain[0]
        at = self.index.get(id(statement))
        if at is None:
            return False
        outcome = self._climb(chain, len(chain) - 1)
        if outcome == "values":
            return True
        if outcome == "statement" and isinstance(statement, cst.Assign) and len(statement.targets) == 1:
            target = statement.targets[0].target
            if isinstance(target, cst.Name):
                return self._flows(target.value, at, depth)
        return False

    def _climb(self, chain: Sequence[cst.CSTNode], i: int) -> str:
        """From ``chain[i]`` up through pass-through calls: ``"values"`` when it
        is the left operand of a product, ``"statement"`` when it is the
        value assigned by the statement, ``"other"`` otherwise."""
        ctx = self.ctx
        current = chain[i]
        i -= 1
        while i >= 0:
            parent = chain[i]
            if isinstance(parent, cst.Arg):
                if parent.keyword is not None or parent.star or i == 0:
                    return "other"
                call = chain[i - 1]
                if not isinstance(call, cst.Call):
                    return "other"
                args = positional(call)
                pair = matmul_operands(call, ctx)
                if pair is not None:
                    return "values" if pair[0] is current else "other"
                spec = einsum_spec(call, ctx)
                if spec is not None:
                    ok = len(args) == 3 and args[1] is parent and einsum_av(spec)
                    return "values" if ok else "other"
                if args and args[0] is parent and _is_dropout(call, ctx):
                    current = call
                    i -= 2
                    continue
                return "other"
            if isinstance(parent, cst.Attribute):
                if i == 0 or parent.value is not current:
                    return "other"
                call = chain[i - 1]
                if not isinstance(call, cst.Call) or call.func is not parent:
                    return "other"
                name = parent.attr.value
                if name in ("matmul", "bmm") and len(call.args) == 1 and not call.args[0].keyword:
                    return "values"
                if name in _CASTS and len(call.args) <= 1:
                    current = call
                    i -= 2
                    continue
                return "other"
            if isinstance(parent, cst.BinaryOperation):
                if isinstance(parent.operator, cst.MatrixMultiply) and parent.left is current:
                    return "values"
                return "other"
            if isinstance(parent, cst.Assign):
                return "statement" if parent.value is current and i == 0 else "other"
            return "other"
        return "other"

    def _flows(self, name: str, at: int, depth: int) -> bool:
        """Every later use of ``name`` (until it is rebound) multiplies the
        values, passes through dropout or a cast into such a use, and at least
        one product exists."""
        if depth > 4:
            return False
        found = False
        for j in range(at + 1, len(self.items)):
            item = self.items[j]
            rebound = False
            passthrough = False
            for chain in _occurrences(item, name):
                if _is_target(chain, item):
                    rebound = True
                    continue
                outcome = self._climb(chain, len(chain) - 1)
                if outcome == "values":
                    found = True
                elif outcome == "statement":
                    assert isinstance(item, cst.Assign)
                    targets = [t.target for t in item.targets]
                    if len(targets) != 1 or not isinstance(targets[0], cst.Name):
                        return False
                    if targets[0].value == name:
                        passthrough = True
                    elif self._flows(targets[0].value, j, depth + 1):
                        found = True
                    else:
                        return False
                else:
                    return False
            if not rebound and isinstance(item, cst.AugAssign):
                rebound = isinstance(item.target, cst.Name) and item.target.value == name
            if rebound:
                if passthrough:
                    continue
                # `attn += bias` changes the weights; any other binding ends them.
                return found and not isinstance(item, cst.AugAssign)
        return found


# -- recognisers ---------------------------------------------------------------
def matmul_operands(call: cst.Call, ctx: Context) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
    """``torch.matmul(a, b)``/``torch.bmm(a, b)``/``a.matmul(b)``/``a.bmm(b)``."""
    if any(a.star or a.keyword for a in call.args):
        return None
    func = call.func
    if not isinstance(func, (cst.Name, cst.Attribute)):
        return None
    q = ctx.qualname(func)
    if q in MATMULS and len(call.args) == 2:
        return call.args[0].value, call.args[1].value
    if q is None and isinstance(func, cst.Attribute) and func.attr.value in ("matmul", "bmm") and len(call.args) == 1:
        return func.value, call.args[0].value
    return None


def einsum_spec(call: cst.Call, ctx: Context) -> Optional[Tuple[List[str], List[str], List[str]]]:
    """``torch.einsum("...", a, b)`` -> the two operands' and the output's
    subscripts (``...`` as one entry), or None."""
    if ctx.qualname(call.func) not in EINSUMS:
        return None
    args = positional(call)
    if len(args) != 3 or len(args) != len(call.args):
        return None
    text = string_value(args[0].value)
    if text is None or "->" not in text:
        return None
    inputs, output = text.replace(" ", "").split("->", 1)
    operands = inputs.split(",")
    if len(operands) != 2:
        return None
    parsed = [_subscripts(s) for s in (operands[0], operands[1], output)]
    if any(p is None for p in parsed):
        return None
    return parsed[0], parsed[1], parsed[2]  # type: ignore[return-value]


def _subscripts(text: str) -> Optional[List[str]]:
    out: List[str] = []
    rest = text
    while rest:
        if rest.startswith("..."):
            out.append("...")
            rest = rest[3:]
        elif rest[0].isalpha():
            out.append(rest[0])
            rest = rest[1:]
        else:
            return None
    if len(set(out)) != len(out):
        return None
    return out


def einsum_qk_rank(spec) -> Rank:
    """``"...id,...jd->...ij"``: scores of queries and keys."""
    a, b, out = spec
    if len(a) < 2 or len(a) != len(b) or len(out) != len(a):
        return _NOT
    prefix = a[:-2]
    i, d = a[-2], a[-1]
    j, d2 = b[-2], b[-1]
    if b[:-2] != prefix or out[:-2] != prefix or d2 != d or out[-2:] != [i, j] or len({i, j, d}) != 3:
        return _NOT
    return None if "..." in out else len(out)


def einsum_av(spec) -> bool:
    """``"...ij,...jd->...id"``: weights times values."""
    a, b, out = spec
    if len(a) < 2 or len(a) != len(b) or len(out) != len(a):
        return False
    prefix = a[:-2]
    i, j = a[-2], a[-1]
    j2, d = b[-2], b[-1]
    return b[:-2] == prefix and out[:-2] == prefix and j2 == j and out[-2:] == [i, d] and len({i, j, d}) == 3


def _is_dropout(call: cst.Call, ctx: Context) -> bool:
    """``self.attn_drop(a)``, ``self.dropout(a)``, ``F.dropout(a, p, training)``."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
    if name is None:
        return False
    q = ctx.qualname(func)
    if q is not None:
        return q in ("torch.nn.functional.dropout", "torch.dropout")
    return "drop" in name.lower()


def _is_weight(expr: cst.BaseExpression) -> bool:
    """``self.fc.weight``: a layer's parameter, so ``x @ W.T`` is a projection."""
    return isinstance(expr, cst.Attribute) and expr.attr.value in ("weight", "weights")


def mentions_fused_path(owner: cst.CSTNode, ctx: Context) -> bool:
    """A name, attribute or string (not a docstring) in ``owner`` that names a
    fused attention path (``FUSED_HINTS``, or anything resolving to
    ``scaled_dot_product_attention``)."""
    todo = [owner]
    while todo:
        n = todo.pop()
        if isinstance(n, cst.Name):
            text = n.value.lower()
            if any(h in text for h in FUSED_HINTS):
                return True
            q = ctx.qualname(n)
            if q is not None and "scaled_dot_product" in q:
                return True
            continue
        if isinstance(n, cst.SimpleString):
            text = n.value.lower()
            if any(h in text for h in FUSED_HINTS):
                return True
            continue
        if isinstance(n, cst.Expr) and isinstance(n.value, (cst.SimpleString, cst.ConcatenatedString)):
            continue  # a docstring
        todo.extend(iter_children(n))
    return False


def _permute_dims(call: cst.Call) -> List[Optional[int]]:
    """The order ``x.permute(...)`` gives, written out (``permute(0, 2, 1, 3)``) or
    as one tuple or list (``permute((0, 2, 1, 3))``); None for a dimension that is
    no literal."""
    values = [a.value for a in call.args]
    if len(values) == 1 and isinstance(values[0], (cst.Tuple, cst.List)):
        values = [e.value for e in values[0].elements]
    return [literal_int(v) for v in values]


def _swap_rank(a: cst.BaseExpression, b: cst.BaseExpression):
    """The rank that ``transpose(a, b)`` swapping the last two dims implies."""
    pair = {literal_int(a), literal_int(b)}
    if pair == {-2, -1}:
        return None
    if pair == {1, 2}:
        return 3
    if pair == {2, 3}:
        return 4
    return _NOT


# -- walking -------------------------------------------------------------------
def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        todo.extend(iter_children(current))


def _header_parts(item: cst.CSTNode) -> Sequence[cst.CSTNode]:
    """The parts of an item that run when it is reached (not nested blocks)."""
    if isinstance(item, (cst.If, cst.While)):
        return (item.test,)
    if isinstance(item, cst.For):
        return (item.target, item.iter)
    if isinstance(item, cst.With):
        return tuple(item.items)
    if isinstance(item, cst.ExceptHandler):
        return (item.type, item.name) if item.type is not None else ()
    if isinstance(item, cst.Match):
        return (item.subject,)
    if isinstance(item, cst.MatchCase):
        return (item.pattern, item.guard) if item.guard is not None else (item.pattern,)
    if isinstance(item, (cst.Try, cst.Else, cst.Finally)):
        return ()
    return (item,)  # small statements, nested defs and classes: all of it


def _occurrences(item: cst.CSTNode, name: str) -> Iterator[List[cst.CSTNode]]:
    """Chains ``[item, ..., Name(name)]`` for each occurrence in ``item``."""
    for part in _header_parts(item):
        if part is None:
            continue
        prefix = [item] if part is not item else []
        stack: List[Tuple[cst.CSTNode, List[cst.CSTNode]]] = [(part, prefix)]
        while stack:
            node, path = stack.pop()
            path = path + [node]
            if isinstance(node, cst.Name):
                if node.value == name:
                    yield path
                continue
            if isinstance(node, cst.Attribute):
                # `x.attn` does not use a local named `attn`.
                stack.append((node.value, path))
                continue
            if isinstance(node, cst.Arg) and node.keyword is not None:
                stack.append((node.value, path))
                continue
            for child in iter_children(node):
                stack.append((child, path))


def _is_target(chain: Sequence[cst.CSTNode], item: cst.CSTNode) -> bool:
    """Whether the occurrence at the end of ``chain`` is a name being bound."""
    name = chain[-1]
    if isinstance(item, cst.Assign):
        return any(t.target is name or _in_target(t.target, name) for t in item.targets)
    if isinstance(item, (cst.AugAssign, cst.AnnAssign)):
        return item.target is name
    if isinstance(item, cst.For):
        return item.target is name or _in_target(item.target, name)
    if isinstance(item, cst.With):
        return any(i.asname is not None and (i.asname.name is name or _in_target(i.asname.name, name)) for i in item.items)
    return False


def _in_target(target: cst.CSTNode, name: cst.CSTNode) -> bool:
    if isinstance(target, (cst.Tuple, cst.List)):
        return any(e.value is name or _in_target(e.value, name) for e in target.elements)
    if isinstance(target, cst.StarredElement):
        return target.value is name
    return False


def fused_fallbacks(module: cst.Module) -> Set[str]:
    """The classes of the module that are one entry of a table of attention
    implementations (a dict, list or tuple display of class names:
    ``{AttnMode.VANILLA: CrossAttention, AttnMode.SDP: SDPCrossAttention}``)
    in which another class of the module calls ``scaled_dot_product_attention``:
    a written-out class there is the fallback for a PyTorch without SDPA,
    which every PyTorch 2 passes over."""
    classes = {c.name.value: c for c in module.body if isinstance(c, cst.ClassDef)}
    if len(classes) < 2:
        return set()
    fused: Dict[str, bool] = {}

    def calls_sdpa(name: str) -> bool:
        if name not in fused:
            fused[name] = any(
                isinstance(n, cst.Name) and n.value == "scaled_dot_product_attention" for n in _walk(classes[name])
            )
        return fused[name]

    found: Set[str] = set()
    for node in _walk(module):
        if isinstance(node, cst.Dict):
            values = [e.value for e in node.elements if isinstance(e, cst.DictElement)]
        elif isinstance(node, (cst.List, cst.Tuple)):
            values = [e.value for e in node.elements]
        else:
            continue
        names = {v.value for v in values if isinstance(v, cst.Name) and v.value in classes}
        if len(names) > 1 and any(calls_sdpa(n) for n in names):
            found.update(n for n in names if not calls_sdpa(n))
    return found
