"""Codemods for TL101 (item-in-loop)."""

from __future__ import annotations

import libcst as cst


def item_to_detach(call: cst.Call) -> cst.Call:
    """``<expr>.item()`` -> ``<expr>.detach()``, changing only the method name.

    Used for the accumulation ``acc += <expr>.item()``: ``acc`` then becomes a
    0-dim tensor on the device and the host waits only where ``acc`` is read.
    """
    func = call.func
    assert isinstance(func, cst.Attribute), "TL101 reports method calls only"
    return call.with_changes(func=func.with_changes(attr=func.attr.with_changes(value="detach")))
