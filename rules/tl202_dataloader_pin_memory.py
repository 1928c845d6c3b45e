from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from torchlint.codemods import dataloader as codemod
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Rule
from torchlint.rules._helpers import (
    argument,
    device_kind,
    keyword,
    literal_bool,
    method_name,
    moves_to_device,
    positional,
    string_value,
)

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})

# Device types for which pinned host memory does not help (MPS shares memory
# with the host and does not support pinning; meta tensors hold no data).
_NOT_PINNABLE = ("meta", "mps")


class DataLoaderPinMemory(Rule):
    """
    ## What it does
    Reports a `torch.utils.data.DataLoader(...)` whose `pin_memory` is absent
    or `False`, in a module that copies data to an accelerator (it calls
    `.cuda(...)` or `.to(<device>)`, or passes `device="cuda"`).

    ## Why is this bad?
    A host-to-device copy from ordinary (pageable) memory is staged by the
    driver through a pinned buffer, costing an extra copy, and it cannot run
    asynchronously. With `pin_memory=True` the loader's worker thread puts each
    batch in page-locked memory, so `.to(device, non_blocking=True)` copies it
    with direct memory access while the GPU keeps computing.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    ```

    ## Fix safety
    Adding `pin_memory=True` where the keyword is absent is safe: the batches
    hold the same values, only in page-locked memory (on a machine without
    CUDA the loader warns once and does not pin).

    Changing an explicit `pin_memory=False` to `True` is unsafe: the author may
    have turned pinning off on purpose, for instance because page-locked
    memory is scarce on the host (every worker's prefetched batches stay
    pinned) or because a custom batch type cannot be pinned.

    A `DataLoader` given `**kwargs` or `*args` that may set `pin_memory`, or a
    `pin_memory=` whose value is not a literal, is not reported. Neither is a
    module that never moves data to an accelerator, or that only names `"mps"`.

    ## References
    - PyTorch Performance Tuning Guide, "Use pinned memory for faster host to device transfers"
    - `torch.utils.data.DataLoader` documentation, "Memory Pinning"
    """

    code = "TL202"
    name = "dataloader-pin-memory"
    summary = "DataLoader without pinned memory in code that copies to the GPU"
    fix = FixAvailability.SOMETIMES_SAFE

    VALID = [
        "import torch\nloader = torch.utils.data.DataLoader(ds, pin_memory=True)\nmodel.cuda()\n",
        "import torch\nloader = torch.utils.data.DataLoader(ds)\n",
        "import torch\nloader = torch.utils.data.DataLoader(ds, **kw)\nmodel.cuda()\n",
        "import torch\nclass DataLoader: ...\nloader = DataLoader(ds)\nmodel.cuda()\n",
    ]
    INVALID = [
        "import torch\nloader = torch.utils.data.DataLoader(ds)\nmodel.cuda()\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=False)\nx.to('cuda')\n",
    ]

    _MESSAGE = (
        "`DataLoader` without `pin_memory=True` in code that copies batches to the GPU: "
        "pinned host memory makes the copy faster and lets it overlap compute "
        "(`non_blocking=True`)"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._candidates: List[Tuple[cst.Call, Optional[cst.Arg]]] = []
        self._moves = False

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.qualname(node.func) in DATALOADERS:
            known, arg = argument(node, "pin_memory", 7)
            if not known:
                return
            if arg is not None and literal_bool(arg.value) is not False:
                return
            self._candidates.append((node, arg))
            return
        if not self._moves and self._is_move(node):
            self._moves = True

    def visit_Arg(self, node: cst.Arg) -> None:
        if self._moves or node.keyword is None or node.keyword.value != "device":
            return
        if _accelerator(node.value, self.context):
            self._moves = True

    def leave_Module(self, node: cst.Module) -> None:
        if not self._moves:
            return
        for call, arg in self._candidates:
            self.report(
                call,
                self._MESSAGE,
                fix=Fix(
                    Applicability.SAFE if arg is None else Applicability.UNSAFE,
                    "Pass `pin_memory=True`",
                    lambda call=call, arg=arg: codemod.pin_memory_true(call, arg),
                ),
            )

    def _is_move(self, node: cst.Call) -> bool:
        name = method_name(node)
        if name == "cuda":
            return True
        if name != "to" or moves_to_device(node, self.context) is None:
            return False
        dev = keyword(node, "device")
        value = dev.value if dev is not None else positional(node)[0].value
        return not _names_unpinnable(value, self.context)


def _device_type(expr: cst.BaseExpression, ctx) -> Optional[str]:
    """``"cuda"`` for ``"cuda:0"`` or ``torch.device("cuda", 0)``, else None."""
    text = string_value(expr)
    if text is None and isinstance(expr, cst.Call) and ctx.qualname(expr.func) == "torch.device":
        args = positional(expr)
        if args:
            text = string_value(args[0].value)
    if text is None:
        return None
    return text.split(":", 1)[0].strip()


def _names_unpinnable(expr: cst.BaseExpression, ctx) -> bool:
    return _device_type(expr, ctx) in _NOT_PINNABLE


def _accelerator(expr: cst.BaseExpression, ctx) -> bool:
    return device_kind(expr, ctx) == "accelerator" and not _names_unpinnable(expr, ctx)
