"""`DataLoader(ds, **kw)` where `kw` is a dict built in the same scope
(TL202, TL204): its `pin_memory` (and `num_workers`) are read from the dict,
its updates included; a dict the rules cannot follow stays silent."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import lint


def _found(code: str):
    return [(d.code, d.line) for d in lint(textwrap.dedent(code), select=["TL202", "TL204"])]


LOOP = """
import torch
from torch.utils.data import DataLoader


def train(ds, model, device, cuda):
    {binding}
    {update}
    for x, y in DataLoader(ds, **kw):
        x = x.to(device)
        model(x)
"""


@pytest.mark.parametrize(
    "binding, update, expected",
    [
        # pinned: TL204 reports the copy
        ("kw = dict(batch_size=8, num_workers=4, pin_memory=True)", "", [("TL204", 10)]),
        ('kw = {"batch_size": 8, "num_workers": 4, "pin_memory": True}', "", [("TL204", 10)]),
        ("kw = dict(num_workers=4)", "kw.update(pin_memory=True)", [("TL204", 10)]),
        ("kw = dict(num_workers=4)", 'kw["pin_memory"] = True', [("TL204", 10)]),
        ("kw = dict(num_workers=4, pin_memory=True)", "kw.update(pin_memory=True)", [("TL204", 10)]),
        # not pinned: TL202 reports the loader (without a fix)
        ("kw = dict(batch_size=8, num_workers=4)", "", [("TL202", 9)]),
        ("kw = dict(num_workers=4, pin_memory=True)", 'kw["pin_memory"] = False', [("TL202", 9)]),
        # main-process loading: TL203's finding, not TL202's
        ("kw = dict(batch_size=8, num_workers=0)", "", []),
        # unknown: silent
        ("kw = dict(num_workers=4)", "if cuda: kw.update(pin_memory=True)", []),
        ("kw = dict(num_workers=4)", "configure(kw)", []),
        ("kw = dict(num_workers=4)", "kw.update(other)", []),
        ("kw = dict(num_workers=4)", "kw = dict(kw, pin_memory=True)", []),
        ("kw = dict(num_workers=4, pin_memory=cuda)", "", []),
        ("kw = dict(num_workers=4, collate_fn=collate)", "", []),
        ("kw = make_kwargs()", "", []),
        ("kw = dict(num_workers=4, **base)", "", []),
    ],
)
def test_a_kwargs_dict_of_the_same_scope(binding, update, expected):
    assert _found(LOOP.format(binding=binding, update=update or "pass")) == expected


def test_a_module_level_dict():
    code = """
    import torch
    from torch.utils.data import DataLoader

    loader_args = dict(batch_size=64, num_workers=4, pin_memory=True)
    loader = DataLoader(ds, **loader_args)
    for x, y in loader:
        x = x.to(device)
    """
    assert _found(code) == [("TL204", 8)]


def test_no_fix_for_a_loader_configured_by_a_dict():
    """Adding `pin_memory=True` next to `**kw` would give the keyword twice
    if the dict has it: the finding has no fix."""
    code = LOOP.format(binding="kw = dict(num_workers=4, pin_memory=False)", update="pass")
    (diagnostic,) = lint(textwrap.dedent(code), select=["TL202"])
    assert diagnostic.fix is None
