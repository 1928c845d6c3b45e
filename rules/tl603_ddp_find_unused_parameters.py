from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import has_star, keyword, literal_bool, method_name
from torchlint.rules._program import named_for_inference, named_for_training
from torchlint.rules._training import DDP_CLASSES, is_backward

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
    the first iterations), `static_graph=False` (the author says the graph
    changes from step to step: staged fine-tuning, switched heads), or a
    `static_graph=` that is not a literal. Nor is the flag reported when the
    module calls the wrapped model with a `True`/`False` keyword
    (`self.model_ddp(img, segmentation_pass=True)` beside plain calls): the
    forward takes other branches on some steps, whose parameters then get no
    gradient, and DDP needs the flag there. A call
    with `*args`/`**kwargs` is not reported, since they may set
    `static_graph`. The keyword given positionally is not reported either: its
    position changed between torch versions (an `init_sync` parameter was
    inserted before it). Other libraries' options of the same name, such as
    Lightning's `DDPStrategy(find_unused_parameters=True)`, are not torch's
    constructor and are not reported.

    Nor is the flag in an inference script: a module that runs no backward
    pass and puts no model in train mode, whose name does not say it trains
    (`run_class_finetuning.py` trains through another module), and that puts
    a model in eval mode or is named for evaluation or inference
    (`run_test_cls.py`, `run_infer_msg.py`, `eval_*.py`, `predict.py`, a
    module under `eval/`; see TL601). The search for unused parameters prepares the backward pass;
    a script that only runs forward passes, under `torch.no_grad()` as
    evaluation does, never pays for it.

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

    def __init__(self, context) -> None:
        super().__init__(context)
        self._found: List[Tuple[cst.Arg, Optional[str]]] = []  # the keyword, and what the wrapped model is bound to
        self._switched: Set[str] = set()  # callees given a True/False keyword
        # Whether the module trains (a backward pass, `.train()`) or puts a model in eval mode.
        self._trains = self._evaluates = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = method_name(node)
        if any(a.keyword is not None and literal_bool(a.value) is not None for a in node.args):
            self._switched.add(_code(func))  # `model_ddp(x, segmentation_pass=True)`: another branch of forward
        if name == "eval" and not node.args:
            self._evaluates = True
        elif name == "train" or (name == "backward" and is_backward(node, self.context)):
            self._trains = True
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
        if keyword(node, "static_graph") is not None:
            return  # `static_graph=True` stops the search; `False` says the graph changes from step to step
        parent = self.context.parent
        target = parent.targets[0].target if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
        self._found.append((arg, _code(target) if target is not None else None))

    def leave_Module(self, node: cst.Module) -> None:
        path = self.context.path
        if not self._trains and not named_for_training(path) and (self._evaluates or named_for_inference(path)):
            return  # forward passes only: the search prepares a backward pass that never comes
        for arg, target in self._found:
            if target is None or target not in self._switched:
                self.report(arg, self._MESSAGE)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
