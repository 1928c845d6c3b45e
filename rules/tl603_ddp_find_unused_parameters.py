from __future__ import annotations

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import has_star, keyword, literal_bool
from torchlint.rules._training import DDP_CLASSES

class DdpFindUnusedParameters(Rule):
    """
    ## What it does
    Reports the keyword `find_unused_parameters=True` given to
    `torch.nn.parallel.DistributedDataParallel(...)`, however the class is
    imported (`from torch.nn.parallel import DistributedDataParallel as DDP`,
    `nn.parallel.DistributedDataParallel`).

    Only the literal `True` is reported: `find_unused_parameters=args.flag` or
    any other expression is unknown and stays silent, and so does a call that
    also passes `static_graph=True` (DDP then stops searching the graph after
    the first iterations) or a `static_graph=` that is not a literal. A call
    with `*args`/`**kwargs` is not reported, since they may set
    `static_graph`. The keyword given positionally is not reported either: its
    position changed between torch versions (an `init_sync` parameter was
    inserted before it). Other libraries' options of the same name, such as
    Lightning's `DDPStrategy(find_unused_parameters=True)`, are not torch's
    constructor and are not reported.

    ## Why is this bad?
    With `find_unused_parameters=True`, DDP walks the autograd graph from the
    forward pass's outputs after *every* forward pass to find the parameters
    that will receive no gradient, so it can mark them ready for all-reduce
    without waiting for them. That traversal costs time in each iteration and
    keeps extra bookkeeping; when every parameter is used it buys nothing, and
    torch itself warns at run time that the flag "results in an extra traversal
    of the autograd graph every iteration, which can adversely affect
    performance". The flag is often set "just in case" to silence the error
    raised by models that do leave parameters unused.

    ## Example
    ```python
    model = DistributedDataParallel(model, device_ids=[local_rank], find_unused_parameters=True)
    ```

    ## Use instead
    ```python
    # every parameter takes part in each forward pass
    model = DistributedDataParallel(model, device_ids=[local_rank])
    # or, if the same parameters are unused in every iteration
    model = DistributedDataParallel(model, device_ids=[local_rank], static_graph=True)
    ```

    ## Fix safety
    There is no fix: whether some parameters really go unused (a branch taken
    only sometimes, a frozen head, an auxiliary loss computed every other step)
    is known only at run time, and removing the flag from a model that needs it
    makes DDP raise an error in the following iteration.

    ## References
    - PyTorch Performance Tuning Guide, "Distributed optimizations", section "Match the order of layers in constructors and during the execution if using DistributedDataParallel(find_unused_parameters=True)"
    - `torch.nn.parallel.DistributedDataParallel` documentation, parameters `find_unused_parameters` and `static_graph`
    - PyTorch Distributed Overview / "Distributed Data Parallel" design note, section "Internal Design" (unused parameters)
    """

    code = "TL603"
    name = "ddp-find-unused-parameters"
    summary = "DDP searches the autograd graph for unused parameters every iteration"
    fix = FixAvailability.NONE
    needs = ("find_unused_parameters",)

    VALID = [
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank])
            """
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, find_unused_parameters=args.find_unused)
            """
        ),
        Valid(
            """
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, find_unused_parameters=True, static_graph=True)
            """
        ),
        Valid(
            """
            import torch
            from lightning.pytorch.strategies import DDPStrategy
            strategy = DDPStrategy(find_unused_parameters=True)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
            """,
        ),
    ]

    _MESSAGE = (
        "`find_unused_parameters=True` makes DDP traverse the autograd graph after every "
        "forward pass to find parameters that get no gradient; remove it if every "
        "parameter is used in each iteration, or pass `static_graph=True` if the same "
        "ones are unused every time"
    )

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute):
            if func.attr.value != "DistributedDataParallel":
                return
        elif not isinstance(func, cst.Name):
            return
        if self.context.qualname(func) not in DDP_CLASSES:
            return
        arg = keyword(node, "find_unused_parameters")
        if arg is None or literal_bool(arg.value) is not True or has_star(node):
            return
        static = keyword(node, "static_graph")
        if static is not None and literal_bool(static.value) is not False:
            return
        self.report(arg, self._MESSAGE)
