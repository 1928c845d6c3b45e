"""Codemods for TL204 (copy-without-non-blocking)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods._util import add_keyword, set_argument


def non_blocking_true(call: cst.Call, arg: Optional[cst.Arg]) -> cst.Call:
    """``x.to(device)`` -> ``x.to(device, non_blocking=True)``;
    an explicit ``non_blocking=False`` -> ``non_blocking=True``."""
    if arg is None:
        return add_keyword(call, "non_blocking", cst.Name("True"))
    return set_argument(call, arg, cst.Name("True"))
