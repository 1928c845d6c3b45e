"""Codemods for TL401 (conv-bias-before-batchnorm)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods._util import add_keyword, set_argument


def disable_bias(call: cst.Call, arg: Optional[cst.Arg]) -> cst.Call:
    """``nn.Conv2d(a, b, k)`` -> ``nn.Conv2d(a, b, k, bias=False)``.

    ``arg`` is the call's literal ``bias=True`` argument (keyword or positional),
    which becomes ``False`` in place; without one, ``bias=False`` is appended.
    """
    if arg is not None:
        return set_argument(call, arg, cst.Name("False"))
    return add_keyword(call, "bias", cst.Name("False"))
