"""Codemods for TL201 (create-then-move).
"""

from __future__ import annotations

from typing import Sequence, Tuple

import libcst as cst

from torchlint.codemods._util import add_keyword

def create_on_device(
    move: cst.Call,
    factory: cst.Call,
    keywords: Sequence[Tuple[str, cst.BaseExpression]],
) -> cst.BaseExpression:
    """``torch.zeros(3).cuda()`` -> ``torch.zeros(3, device="cuda")``.

    ``move`` is the ``.cuda(...)``/``.to(...)`` call whose receiver is
    ``factory``; ``keywords`` are the ``device=``/``dtype=`` arguments the rule
    took from ``move``, in order.
    """
    result = factory
    for name, value in keywords:
        result = add_keyword(result, name, value)
    if move.lpar:
        result = result.with_changes(lpar=move.lpar, rpar=move.rpar)
    return result
