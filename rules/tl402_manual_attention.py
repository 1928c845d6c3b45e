from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._attention import (
    FUSED_HINTS,
    SOFTMAX_FUNCTIONS,
    SOFTMAX_MODULES,
    Scope,
    fused_fallbacks,
    mentions_fused_path,
)
from torchlint.rules._helpers import has_star, keyword, literal_int, positional
from torchlint.rules._program import demonstrated_once

class _Candidate(NamedTuple):
    call: cst.Call
    scores: cst.BaseExpression  # the softmax's input
    dim: int
    chain: Tuple[cst.CSTNode, ...]  # small statement ... softmax call
    scope: cst.CSTNode  # the function (or module) whose statements hold it
    owner: cst.CSTNode  # where a fused path would be: outermost class, or the module
    module_attr: Optional[Tuple[int, str]] = None  # `self.attend(...)`: (class id, attribute)


class ManualAttention(Rule):
    """
    ## What it does
    Reports a softmax that computes attention weights by hand,
    `softmax(q @ k.transpose(-2, -1) * scale) @ v`, where
    `torch.nn.functional.scaled_dot_product_attention` (SDPA) would do. The
    softmax may be `torch.softmax`, `torch.nn.functional.softmax` (`F.softmax`),
    the tensor method `.softmax(dim)`, or an `nn.Softmax(dim=-1)` module
    assigned to `self.<name>` in the class (in a method above the call, and
    never assigned anything else); it must run over the last dimension
    (`dim=-1`, or the last index when the code shows the rank, e.g. `dim=3`
    after `k.transpose(2, 3)`).

    The pattern may be written across the statements of one function (or of a
    module's top-level code), as real code does: a local name is followed to
    its latest assignment above the use, e.g.
    `att = (q @ k.transpose(-2, -1)) * scale`, `att = att.masked_fill(mask == 0,
    float("-inf"))`, `att = F.softmax(att, dim=-1)`, `att = self.attn_drop(att)`,
    `y = att @ v`. Accepted between the product and the softmax: scaling by
    `*`/`/`, adding or subtracting a mask or bias (`+`, `-`, `+=`, `*=`, `/=`),
    `masked_fill` (also in place, `masked_fill_`), and casts (`.float()`,
    `.to(...)`, `.type_as(...)`); between the softmax and the values: dropout
    (a call whose name contains `drop`, or `F.dropout`) and casts. The products
    may be `@`, `torch.matmul`, `torch.bmm`, `.matmul`/`.bmm`, or `torch.einsum`
    of the exact forms `"...id,...jd->...ij"` and `"...ij,...jd->...id"`
    (any letters, spaces allowed). The key must be transposed over its last
    two dimensions: `.transpose(-2, -1)` (either order), `.transpose(1, 2)`
    (read as 3-D), `.transpose(2, 3)` (4-D), `torch.transpose(k, ...)`
    likewise, `.mT`, a `.permute(...)` that swaps only the last two dimensions,
    and `.T`/`.t()` (2-D), directly or through a local name. A layer's
    `.weight.T` is a projection, not a key, and is not accepted.

    The catalog writes the product with the values as optional; the rule
    requires it, because SDPA returns only that product: a softmax whose
    weights are not multiplied by values cannot be replaced by it.

    Not reported, because SDPA cannot replace the code or because the rule
    cannot be sure it is attention:
    - a fused path next to the manual one: the same class (for code outside
      classes, the same file) calls or names `scaled_dot_product_attention`
      (also through an alias), FlashAttention, xFormers or `flex_attention`, or
      has a flag such as `self.flash`/`self.fused_attn`/`use_sdpa` (in code or
      strings, not in comments or docstrings): the manual code is then the
      fallback or the reference; in a notebook, a fused path anywhere in it
      (a notebook comparing implementations keeps the manual ones as
      baselines); and a class that is one entry of a table of implementations
      (a dict, list or tuple display of class names: `{AttnMode.VANILLA:
      CrossAttention, AttnMode.SDP: SDPCrossAttention}`) in which another
      class of the file calls `scaled_dot_product_attention`: the written-out
      class is the fallback for a PyTorch without SDPA, which PyTorch 2 passes
      over (a table whose other entry is xFormers only, an optional package,
      keeps the finding);
    - weights used for anything but the product with the values: returned
      (`return out, attn`), stored (`self.attn_map = attn`), passed to another
      function, edited after the softmax (`masked_fill`, renormalisation, a
      gate), or never multiplied by values at all;
    - a softmax over something that is not a query-key product: classification
      logits, `softmax(x @ W)`, a router's gates, logits against tied embedding
      weights (`h @ wte.weight.T`), linear attention's `q.softmax(-1)`; or over
      another dimension, or with a non-literal `dim`;
    - other operations between the product and the softmax (talking-heads
      mixing, reshapes, soft-capping with `tanh`, helper functions),
      `einsum` forms other than the two above (multi-query layouts),
      `torch.baddbmm`, and values kept in attributes (`self.scores`);
    - channel ("transposed") attention, whose query is itself transposed
      over its last two dimensions (`q = q.transpose(-2, -1)`) or laid out with
      positions last (`rearrange(q, "b (head c) h w -> b head c (h w)")`,
      the qkv split `.reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 4,
      1)`, each of `q, k, v` transposed in a list) before the product,
      through normalisation, casts, `unbind` and tuple unpacking: XCiT's
      cross-covariance attention, EdgeNeXt's SDTA and Restormer's MDTA
      (mmpretrain's copies included). Their score matrix is
      channels by channels, small, and their "head dimension" is the number of
      positions, which SDPA's fused kernels do not take: it would save no
      memory;
    - code in a lambda, a class body or a compound statement's header;
    - a class that a notebook only demonstrates: the notebook trains nothing
      (no backward pass), instantiates the class only at its top level,
      outside loops and functions (`ca = CausalAttention(...)`, also as a
      part of another class so demonstrated), and only calls, reads or
      prints the instances there (`ca(batch)`): a teaching notebook's toy
      module runs once, and SDPA would buy nothing there.

    Branches are not told apart: the latest assignment above a use is the
    one followed, whichever branch it is in.

    Test files (`test_*.py`, `*_test.py`, `conftest.py`, under `tests/`) are
    not checked: attention written out there is a reference implementation
    kept on purpose to check a fused one against (replacing it with SDPA
    would defeat the test).

    ## Why is this bad?
    The written-out form materialises the whole `(L, S)` score matrix for
    every head in memory, then runs the scaling, masking, softmax, dropout and
    the second product as separate kernels that each read and write it. SDPA
    dispatches to fused kernels (FlashAttention, memory-efficient attention,
    cuDNN) that compute the same result block by block without storing the
    matrix: memory grows linearly instead of quadratically with the sequence
    length, and training and inference are typically several times faster on
    a GPU.

    ## Example
    ```python
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(causal_mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    att = self.attn_dropout(att)
    y = att @ v
    ```

    ## Use instead
    ```python
    y = F.scaled_dot_product_attention(
        q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
    )
    ```
    SDPA's default scale is `1 / sqrt(q.size(-1))` (pass `scale=` for another,
    torch >= 2.1); a boolean `attn_mask` marks the positions that *take part*
    (the opposite of `masked_fill`'s mask), and a float `attn_mask` is added to
    the scores like a relative-position bias.

    ## Fix safety
    There is no fix: the rewrite depends on facts the code does not show
    statically: whether the mask is causal (`is_causal=True`) or must be
    inverted and passed as a boolean `attn_mask`, whether the scale equals
    SDPA's default, how dropout is switched off in eval mode, and whether the
    numerics of the fused kernels (a different summation order, in reduced
    precision) are acceptable.

    ## References
    - PyTorch tutorial, "(Beta) Implementing High-Performance Transformers with Scaled Dot Product Attention (SDPA)"
    - `torch.nn.functional.scaled_dot_product_attention` documentation
    - Hugging Face single-GPU training guide ("Methods and tools for efficient training on a single GPU"), section "Using PyTorch native attention and Flash Attention"
    """

    code = "TL402"
    name = "manual-attention"
    summary = "Attention written out instead of `F.scaled_dot_product_attention`"
    fix = FixAvailability.NONE
    needs = ("softmax", "Softmax")

    VALID = [
        # the fused path exists; the manual one is its fallback
        Valid(
            """
            import torch.nn.functional as F
            def attend(q, k, v, flash):
                if flash:
                    return F.scaled_dot_product_attention(q, k, v)
                att = F.softmax(q @ k.transpose(-2, -1), dim=-1)
                return att @ v
            """
        ),
        # the weights are returned: SDPA does not give them
        Valid(
            """
            import torch
            def attend(q, k, v):
                att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
                return att @ v, att
            """
        ),
        # classification logits, not attention
        Valid(
            """
            import torch
            def predict(x, head):
                probs = torch.softmax(head(x), dim=-1)
                return probs.argmax(-1)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import math
            import torch.nn.functional as F
            def attend(q, k, v):
                att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
                att = F.softmax(att, dim=-1)
                return att @ v
            """,
        ),
        Invalid(
            """
            import torch
            def attend(q, k, v):
                return torch.matmul(torch.softmax(torch.matmul(q, k.mT), dim=-1), v)
            """,
        ),
    ]

    _MESSAGE = (
        "attention written out as `softmax(q @ k.T) @ v` stores the full score matrix "
        "and runs a kernel per step; use `F.scaled_dot_product_attention(q, k, v, ...)`, "
        "which computes the same with fused FlashAttention/memory-efficient kernels"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._candidates: List[_Candidate] = []
        # softmax modules by class: `self.attend = nn.Softmax(dim=-1)`, and the
        # attributes assigned anything else
        self._softmax_attrs: Dict[int, Dict[str, Optional[int]]] = {}
        self._other_attrs: Dict[int, Set[str]] = {}

    # -- collecting -------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1:
            return
        target = node.targets[0].target
        if not (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
        ):
            return
        cls = self.context.enclosing_class()
        if cls is None:
            return
        name = target.attr.value
        value = node.value
        if not isinstance(value, cst.Call) or self.context.qualname(value.func) not in SOFTMAX_MODULES:
            self._other_attrs.setdefault(id(cls), set()).add(name)
            return
        dim_arg = keyword(value, "dim")
        if dim_arg is None and not has_star(value):
            args = positional(value)
            dim_arg = args[0] if args else None
        dim = literal_int(dim_arg.value) if dim_arg is not None else None
        attrs = self._softmax_attrs.setdefault(id(cls), {})
        # assigned twice with different dims: unknown
        attrs[name] = dim if attrs.get(name, dim) == dim else None

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.is_test_file:
            return  # a reference implementation, kept on purpose
        func = node.func
        if isinstance(func, cst.Attribute):
            name = func.attr.value
            if isinstance(func.value, cst.Name) and func.value.value == "self":
                if self._softmax_attrs:
                    self._softmax_module_call(node, name)
            elif name == "softmax":
                self._softmax_call(node, func)
        elif isinstance(func, cst.Name) and self.context.qualname(func) in SOFTMAX_FUNCTIONS:
            self._functional(node)

    def _softmax_call(self, node: cst.Call, func: cst.Attribute) -> None:
        q = self.context.qualname(func)
        if q is None:
            # the tensor method `scores.softmax(dim)`
            if has_star(node) or any(a.keyword and a.keyword.value not in ("dim", "dtype") for a in node.args):
                return
            dim_arg = keyword(node, "dim")
            if dim_arg is None:
                args = positional(node)
                dim_arg = args[0] if args else None
            if dim_arg is None:
                return
            self._candidate(node, func.value, dim_arg.value)
        elif q in SOFTMAX_FUNCTIONS:
            self._functional(node)

    def _functional(self, node: cst.Call) -> None:
        if has_star(node) or any(
            a.keyword and a.keyword.value not in ("input", "dim", "dtype") for a in node.args
        ):
            return
        args = positional(node)
        scores = keyword(node, "input") or (args[0] if args else None)
        dim_arg = keyword(node, "dim") or (args[1] if len(args) > 1 and keyword(node, "input") is None else None)
        if scores is None or dim_arg is None:
            return
        self._candidate(node, scores.value, dim_arg.value)

    def _softmax_module_call(self, node: cst.Call, attr: str) -> None:
        cls = self.context.enclosing_class()
        if cls is None:
            return
        dim = self._softmax_attrs.get(id(cls), {}).get(attr)
        if dim is None or len(node.args) != 1 or node.args[0].keyword or node.args[0].star:
            return
        self._candidate(node, node.args[0].value, None, dim, (id(cls), attr))

    def _candidate(
        self,
        node: cst.Call,
        scores: cst.BaseExpression,
        dim_expr: Optional[cst.BaseExpression],
        dim: Optional[int] = None,
        module_attr: Optional[Tuple[int, str]] = None,
    ) -> None:
        if dim_expr is not None:
            dim = literal_int(dim_expr)
        if dim is None:
            return
        stack = self.context.stack
        start = None
        for i in range(len(stack) - 2, -1, -1):
            current = stack[i]
            if isinstance(current, cst.BaseSmallStatement):
                start = i
                break
            if isinstance(current, (cst.BaseCompoundStatement, cst.Lambda)):
                return
        if start is None:
            return
        scope: Optional[cst.CSTNode] = None
        owner: Optional[cst.CSTNode] = None
        for node_ in stack[:start]:
            if isinstance(node_, cst.ClassDef):
                owner = owner or node_
                scope = None
            elif isinstance(node_, cst.FunctionDef):
                scope = node_
            elif isinstance(node_, cst.Lambda):
                return
        if scope is None:
            if owner is not None:
                return  # a class body
            scope = self.context.module
        self._candidates.append(
            _Candidate(node, scores, dim, tuple(stack[start:]), scope, owner or self.context.module, module_attr)
        )

    # -- deciding ---------------------------------------------------------------
    def leave_Module(self, node: cst.Module) -> None:
        if not self._candidates:
            return
        source = self.context.source.lower()
        maybe_fused = any(hint in source for hint in FUSED_HINTS)
        fused: Dict[int, bool] = {}
        scopes: Dict[int, Scope] = {}
        fallbacks: Optional[Set[str]] = None
        for cand in self._candidates:
            if isinstance(cand.owner, cst.ClassDef) and demonstrated_once(self.context, cand.owner):
                continue  # a teaching notebook's module, run once on a toy input
            if isinstance(cand.owner, cst.ClassDef):
                fallbacks = fused_fallbacks(node) if fallbacks is None else fallbacks
                if cand.owner.name.value in fallbacks:
                    continue  # the fallback of a table whose SDPA class PyTorch 2 picks
            if cand.module_attr is not None:
                cls, attr = cand.module_attr
                if attr in self._other_attrs.get(cls, ()) or self._softmax_attrs[cls].get(attr) != cand.dim:
                    continue
            if maybe_fused:
                # a notebook is one document: a fused path anywhere in it
                owner = self.context.module if self.context.path.endswith(".ipynb") else cand.owner
                key = id(owner)
                if key not in fused:
                    fused[key] = mentions_fused_path(owner, self.context)
                if fused[key]:
                    continue
            scope = scopes.get(id(cand.scope))
            if scope is None:
                scope = scopes[id(cand.scope)] = Scope(cand.scope, self.context)
            at = scope.index.get(id(cand.chain[0]))
            if at is None:
                continue
            rank = scope.scores(cand.scores, at)
            if rank is False:
                continue
            if cand.dim != -1 and (rank is None or cand.dim != rank - 1):
                continue
            if scope.transposed_query(cand.scores, at):
                continue  # channel attention (XCiT, Restormer): a C x C score matrix, positions as head dim
            if not scope.weights_meet_values(cand.chain):
                continue
            self.report(cand.call, self._MESSAGE)
