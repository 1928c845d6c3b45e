"""Codemods for TL202 (dataloader-pin-memory)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods._util import add_keyword, set_argument


def pin_memory_true(call: cst.Call, arg: Optional[cst.Arg]) -> cst.Call:
    """``DataLoader(ds)`` -> ``DataLoader(ds, pin_memory=True)``;
    ``pin_memory=False`` (keyword or positional) -> ``True``."""
    if arg is None:
        return add_keyword(call, "pin_memory", cst.Name("True"))
    return set_argument(call, arg, cst.Name("True"))
