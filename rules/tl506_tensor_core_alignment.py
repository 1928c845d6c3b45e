from __future__ import annotations

from typing import List, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import argument
from torchlint.rules._layers import loads_published_weights

# Layer -> its size parameters as (keyword, position).
_LAYERS = {
    "Linear": (("in_features", 0), ("out_features", 1)),
    "Embedding": (("num_embeddings", 0), ("embedding_dim", 1)),
}
_QUALNAMES = {
    "torch.nn.Linear": "Linear",
    "torch.nn.modules.linear.Linear": "Linear",
    "torch.nn.Embedding": "Embedding",
    "torch.nn.modules.sparse.Embedding": "Embedding",
}
_MIN_SIZE = 1024
_ALIGNMENT = 64


class TensorCoreAlignment(Rule):
    """
    ## What it does
    Reports, outside test files, `nn.Linear(...)` and `nn.Embedding(...)`
    given a literal integer size of 1024 or more that is not a multiple of
    64: `in_features`/`out_features` of `Linear`, `num_embeddings`/
    `embedding_dim` of `Embedding`, positional or by keyword. The typical
    case is a vocabulary: GPT-2's 50257 tokens, padded to 50304 in nanoGPT.
    It is reported at the layer call, once, naming the offending sizes and
    the next multiple of 64.

    Not reported: sizes that are not integer literals (`nn.Linear(d,
    vocab_size)`, `nn.Linear(4 * 768, 768)`, a `**kwargs`), sizes below 1024
    (a 1000-class ImageNet head is a small matmul where padding gains
    nothing), other layers, a user's own class named `Linear`, and a module
    that loads downloaded weights whole into its model
    (`model.load_state_dict(model_zoo.load_url(url))`, without
    `strict=False`) or loads a checkpoint with an explicit `strict=True`:
    a port of a published checkpoint (PNASNet's 4320-wide classifier) must
    keep the checkpoint's sizes.

    ## Why is this bad?
    Tensor cores process matrix tiles; when a GEMM dimension is not a
    multiple of the tile size, cuBLAS falls back to slower kernels or pads
    and wastes work. NVIDIA's guidance asks for multiples of 8 (fp16) at
    least, and larger powers of two do better still: padding nanoGPT's
    vocabulary from 50257 to 50304 (a multiple of 64) sped up the whole
    model noticeably. For an `Embedding`, the vocabulary size matters when
    its weight is tied to the output projection, and the embedding width is
    the inner dimension of every matmul that follows.

    ## Example
    ```python
    from torch import nn

    lm_head = nn.Linear(768, 50257, bias=False)
    ```

    ## Use instead
    ```python
    from torch import nn

    lm_head = nn.Linear(768, 50304, bias=False)  # 50257 padded to a multiple of 64
    ```
    Mask or ignore the padding rows (e.g. tokens that never occur).

    ## Fix safety
    No fix is offered: the padded layer has another shape, so checkpoints
    no longer load, and padded vocabulary entries must be kept out of the
    loss and of sampling.

    ## References
    - NVIDIA Deep Learning Performance guide, "Matrix Multiplication Background", section "Tensor Core Requirements"
    - Hugging Face single-GPU training guide, section "Batch size choice" (multiples of 8/64 for tensor cores)
    - nanoGPT `model.py`: "GPT-2 vocab_size of 50257, padded up to nearest multiple of 64 for efficiency"
    """

    code = "TL506"
    name = "tensor-core-alignment"
    summary = "Large layer size that is not a multiple of 64 (tensor-core alignment)"
    default = False
    fix = FixAvailability.NONE
    needs = ("Linear", "Embedding")

    VALID = [
        Valid(
            """
            from torch import nn
            head = nn.Linear(768, 50304)
            """
        ),
        Valid(
            """
            from torch import nn
            head = nn.Linear(768, vocab_size)
            """
        ),
        Valid(
            """
            from torch import nn
            head = nn.Linear(2048, 1000)
            """
        ),
        Valid(
            """
            import torch
            class Linear:
                pass
            head = Linear(768, 50257)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch import nn
            head = nn.Linear(768, 50257)
            """,
        ),
        Invalid(
            """
            import torch.nn as nn
            wte = nn.Embedding(num_embeddings=50257, embedding_dim=768)
            """,
        ),
        Invalid(
            """
            from torch.nn import Linear
            proj = Linear(in_features=1000, out_features=1025)
            """,
        ),
    ]

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        tail = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if tail is None or ("Linear" not in tail and "Embedding" not in tail):
            return
        if self.context.is_test_file or loads_published_weights(self.context.source):
            return  # a port of published weights: its sizes are the checkpoint's
        layer = _QUALNAMES.get(self.context.qualname(func) or "")
        if layer is None:
            return
        bad: List[Tuple[str, int]] = []
        for keyword, position in _LAYERS[layer]:
            known, arg = argument(node, keyword, position)
            if not known or arg is None or not isinstance(arg.value, cst.Integer):
                continue
            try:
                size = int(arg.value.value.replace("_", ""), 0)
            except ValueError:
                continue
            if size >= _MIN_SIZE and size % _ALIGNMENT:
                bad.append((keyword, size))
        if not bad:
            return
        sizes = " and ".join(f"`{keyword}={size}`" for keyword, size in bad)
        padded = " and ".join(str(-(-size // _ALIGNMENT) * _ALIGNMENT) for _, size in bad)
        if layer == "Linear":
            what = "gives this matmul a shape that tensor cores tile poorly (cuBLAS falls back to slower kernels)"
        else:
            what = (
                "gives the matmuls that use this table (a tied output head, the layers fed by "
                "its width) a shape that tensor cores tile poorly"
            )
        self.report(
            node,
            f"`nn.{layer}` with {sizes}, not a multiple of 64, {what}; pad to {padded}, as "
            "nanoGPT pads GPT-2's 50257-token vocabulary to 50304",
        )
