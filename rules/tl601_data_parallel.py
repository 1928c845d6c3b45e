from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.nodes import walk_nodes
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._frequency import runs_once_by_path
from torchlint.rules._helpers import CallTable, argument, literal_number, method_name, statement_position
from torchlint.rules._program import named_for_inference
from torchlint.rules._training import EVALUATION_NAME, is_backward

# The class and the functional form (`data_parallel(module, inputs)`), which
# replicates, scatters and gathers in the same way on every call.
_DATA_PARALLEL = {
    "torch.nn.DataParallel": "DataParallel",
    "torch.nn.parallel.DataParallel": "DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "DataParallel",
    "torch.nn.parallel.data_parallel": "data_parallel",
    "torch.nn.parallel.data_parallel.data_parallel": "data_parallel",
}
_DATA_PARALLEL_CALLS = CallTable(_DATA_PARALLEL)

_DDP_NAMES = ("DistributedDataParallel", "init_process_group", "DistributedSampler")
_DDP_HELPER = re.compile(r"(^|_)ddp($|_)|ddp_|_ddp", re.IGNORECASE)
# A training library's implementation of the data-parallel strategy a user picks
# (Lightning's `DataParallelStrategy`, `Trainer(strategy="dp")`).
_STRATEGY_CLASS = re.compile(r"^(DP|DataParallel)\w*(Strategy|Plugin)$", re.IGNORECASE)


def _offers_ddp(call: cst.Call, context) -> bool:
    """A call that shows the module runs with DDP too."""
    qualified = context.qualname(call.func)
    if qualified is not None and qualified.rsplit(".", 1)[-1] in _DDP_NAMES:
        return True
    func = call.func
    name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
    return name in _DDP_NAMES or bool(_DDP_HELPER.search(name)) or name.lower() == "ddp"


class DataParallel(Rule):
    """
    ## What it does
    Reports calls of `torch.nn.DataParallel(...)`, however it is imported
    (`nn.DataParallel`, `torch.nn.parallel.DataParallel`,
    `from torch.nn import DataParallel as DP`), and of its functional form
    `torch.nn.parallel.data_parallel(module, inputs)`.

    The functional form is not reported in a function that neither trains
    (runs a backward or an optimizer step) nor is a module's `forward`: there
    it is one forward over the GPUs for sampling or evaluation
    (`G_z = data_parallel(G, (z, y))` to draw a sample sheet), which DDP, a
    training wrapper, does not replace. In `forward` (the DCGAN generator's
    `data_parallel(self.main, noise, ...)`) it runs every training step.

    Only calls are reported: `isinstance(model, nn.DataParallel)`,
    `type(m) is DataParallel`, unwrapping `model.module`, annotations and
    subclass definitions (`class MyDP(nn.DataParallel)`) name the class without
    using it, and code that handles a model wrapped elsewhere is not the place to
    change. A class of your own named `DataParallel`, or another library's, is
    not reported; neither is a call of your own subclass of it (the rule does
    not follow class hierarchies).

    Nor is a `DataParallel` over one device (`device_ids=[0]`,
    `device_ids=opt.gpu_ids[0:1]`): the wrapper then only forwards the call
    (it is kept for its `.module` attribute, next to wrappers over several
    GPUs), and DDP would change nothing.

    Nor is a model wrapped only to load a checkpoint saved from a wrapped one
    (`m = nn.DataParallel(m)`, then only `m.load_state_dict(ckpt)` until
    `m = m.module`): the wrapper never runs.

    Nor is `DataParallel` in an export, conversion or benchmark script
    (`convert_*.py`, `export.py`, `*_to_onnx.py`, `bench*.py`, an `export/`
    or `benchmarks/` directory): it runs once, and often wraps a model only to
    load a checkpoint saved from a wrapped one (its `module.` prefixes).

    Nor is `DataParallel` in a module that also offers DDP: one that calls
    `DistributedDataParallel` (however imported), `init_process_group`, a
    `DistributedSampler`, or a helper of its own whose name says DDP
    (`smart_DDP(model)`, `wrap_ddp(...)`). There `DataParallel` is the
    fallback a user gets by not launching with `torchrun` (often next to a
    warning that recommends DDP); the program already has the better path,
    and the choice is the user's at launch, not the code's.

    Nor is `DataParallel` in an inference module: one that never puts a
    model in train mode (`.train()`) nor runs a backward pass, and either puts
    one in eval mode (`.eval()`: an offline FID or feature-extraction script)
    or is a script named for evaluation or inference (`tools/test.py`,
    `eval_*.py`, `run_test_cls.py`, `run_infer_msg.py`, `inference.py`,
    `predict.py`, `demo.py`, `sample.py`, a module under an `eval/`,
    `evaluation/` or `inference/` directory; not `train_and_eval.py`),
    whose evaluation loop may live in another module. DDP is a
    training wrapper (it synchronises gradients); splitting inference over
    GPUs without `DataParallel` means one process per GPU and a rewrite,
    which a script that runs once per evaluation does not repay.

    The same holds for a function of a module that trains elsewhere: a
    `DataParallel` in a function that puts the model in eval mode and neither
    trains nor runs a backward pass itself (a `sample()` or `test()` method
    next to `train()`) is not reported; in a function named for evaluation
    (`validate`, `eval*`, `test*`, `predict*`, `infer*`), a `.train()` that
    picks the mode (`if train_mode: net.train() else: net.eval()`, once-for-all's
    `validate`) is not training either. Nor is a `DataParallel` in the branch
    of `if isinstance(module, nn.DataParallel):`: it mirrors how a model given
    to the code was wrapped (an EMA copy), and the place to change is where
    that model was wrapped, which is reported there (`if not
    isinstance(model, nn.DataParallel): model = nn.DataParallel(model)` at
    the start of a training function is that place, and is reported).

    Nor is the `DataParallel` of a training library's data-parallel
    strategy (a class named `DataParallelStrategy`, `DPStrategy`,
    `DataParallelPlugin`: Lightning's `Trainer(strategy="dp")`): it carries
    out the choice the user made, which is where to change it.

    Nor is `DataParallel` in a notebook: a notebook is one process, and DDP
    needs one process per GPU, launched with `torchrun` or spawned from
    functions a child process can import, which a notebook's cells are not
    (a Colab notebook that drives a library's trainer over two GPUs);
    `DataParallel` is how a notebook uses several GPUs, and moving to DDP
    means moving the code out of the notebook.

    Test files (`test_*.py`, `*_test.py`, `conftest.py`, `tests/`) are not
    checked: a test wraps a model in `DataParallel` to check that the code
    under test handles such a model (unwrapping `.module`, `state_dict` keys
    with a `module.` prefix, checkpoints), not to train with it.

    ## Why is this bad?
    `DataParallel` is single-process and multi-threaded: on every forward pass
    it copies the model's parameters and buffers from the first GPU to every
    other GPU, splits the batch, runs one Python thread per GPU (contending for
    the GIL), and gathers the outputs back on the first GPU, which therefore
    holds more memory and does more work than the others. `DistributedDataParallel`
    runs one process per GPU, replicates the model once, and overlaps gradient
    all-reduce with the backward pass; the PyTorch documentation recommends it
    over `DataParallel` even on a single machine ("significantly faster ... for
    single-node multi-GPU data parallel training"), and the Performance Tuning
    Guide names it the efficient data-parallel backend.

    ## Example
    ```python
    model = Net().cuda()
    model = torch.nn.DataParallel(model)
    for x, y in loader:
        loss_fn(model(x.cuda()), y.cuda()).backward()
    ```

    ## Use instead
    ```python
    # launched with `torchrun --nproc_per_node=NUM_GPUS train.py`
    torch.distributed.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DistributedDataParallel(Net().cuda(), device_ids=[local_rank])
    sampler = DistributedSampler(dataset)  # each process reads its own shard
    ```

    ## Fix safety
    There is no fix: moving to `DistributedDataParallel` changes how the
    program is launched (one process per GPU, `torchrun`), how data is sharded
    (`DistributedSampler`), the per-process batch size, and where logging and
    checkpointing happen (rank 0 only).

    ## References
    - PyTorch Performance Tuning Guide, "Distributed optimizations", section "Use efficient data-parallel backend"
    - PyTorch documentation, "CUDA semantics", section "Use nn.parallel.DistributedDataParallel instead of multiprocessing or nn.DataParallel"
    - `torch.nn.DataParallel` documentation (the warning that recommends `DistributedDataParallel`)
    - PyTorch tutorial, "Getting Started with Distributed Data Parallel", section "Comparison between DataParallel and DistributedDataParallel"
    """

    code = "TL601"
    name = "data-parallel"
    summary = "`nn.DataParallel` instead of `DistributedDataParallel`"
    fix = FixAvailability.NONE
    needs = ("DataParallel", "data_parallel")

    VALID = [
        Valid(
            """
            import torch
            inception = torch.nn.DataParallel(load_inception()).eval().cuda()
            with torch.no_grad():
                for x in loader:
                    feats.append(inception(x.cuda()))
            """
        ),
        Valid(
            """
            import torch
            if isinstance(model, torch.nn.DataParallel):
                model = model.module
            """
        ),
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            model = DDP(model, device_ids=[rank])
            """
        ),
        Valid(
            """
            import torch
            class DataParallel:
                def __init__(self, m):
                    self.m = m
            wrapped = DataParallel(model)
            """
        ),
        # A program that also runs with DDP: DataParallel is its fallback.
        Valid(
            """
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            if distributed:
                model = DDP(model, device_ids=[rank])
            else:
                model = torch.nn.DataParallel(model)
            """
        ),
        Valid(
            """
            import torch
            from utils import smart_DDP
            if RANK == -1 and torch.cuda.device_count() > 1:
                model = torch.nn.DataParallel(model)
            if RANK != -1:
                model = smart_DDP(model)
            """
        ),
        Valid(
            """
            import torch
            class DataParallelStrategy(ParallelStrategy):
                def setup_module(self, module):
                    return torch.nn.DataParallel(module=module, device_ids=self.parallel_devices)
            """
        ),
        # An evaluation script whose loop lives in another module.
        Valid(
            """
            import torch.nn as nn
            from core.function import testval
            model = nn.DataParallel(build_model(cfg), device_ids=gpus).cuda()
            testval(cfg, test_dataset, testloader, model)
            """,
            path="tools/test.py",
        ),
    ]
    INVALID = [
        # A strategy class of another kind wraps as usual.
        Invalid(
            """
            import torch
            class SingleDeviceStrategy:
                def setup_module(self, module):
                    return torch.nn.DataParallel(module)
            """,
        ),
        # The same wrap in a script not named for evaluation: it may train elsewhere.
        Invalid(
            """
            import torch.nn as nn
            from core.function import train
            model = nn.DataParallel(build_model(cfg), device_ids=gpus).cuda()
            train(cfg, train_loader, model)
            """,
            path="tools/train.py",
        ),
        Invalid(
            """
            import torch
            model = torch.nn.DataParallel(model).cuda()
            model.eval()
            validate(model)
            model.train()
            for x, y in loader:
                loss_fn(model(x), y).backward()
            """,
        ),
        Invalid(
            """
            import torch
            model = torch.nn.DataParallel(model)
            """,
        ),
        Invalid(
            """
            import torch
            if torch.cuda.device_count() > 1:
                model = torch.nn.DataParallel(model)
            model = add_dropout(model)
            """,
        ),
        Invalid(
            """
            from torch.nn import DataParallel as DP
            model = DP(model, device_ids=[0, 1])
            """,
        ),
    ]

    _MESSAGES = {
        "DataParallel": (
            "`DataParallel` is single-process and multi-threaded: it copies the model "
            "to every GPU on each forward pass, gathers outputs on the first GPU and is "
            "bound by the GIL; use `DistributedDataParallel` with one process per GPU "
            "(`torchrun`), as the PyTorch docs recommend even on one machine"
        ),
        "data_parallel": (
            "`data_parallel(...)` copies the model to every GPU on each call, runs the "
            "replicas in threads bound by the GIL and gathers outputs on the first GPU; "
            "use `DistributedDataParallel` with one process per GPU (`torchrun`), as the "
            "PyTorch docs recommend even on one machine"
        ),
    }

    def __init__(self, context) -> None:
        super().__init__(context)
        # (an export, conversion or benchmark script wraps a model once, often only to
        # load a checkpoint saved from a wrapped one: `module.` prefixes)
        # a notebook runs in one process: DDP needs one per GPU, launched with
        # `torchrun` or spawned from importable functions, which a notebook's
        # cells are not; `DataParallel` is how a notebook uses several GPUs
        self._off = context.is_test_file or runs_once_by_path(context.path) or context.path.endswith(".ipynb")
        self._found: List[Tuple[cst.Call, str, Optional[cst.FunctionDef]]] = []
        # Per function: whether it puts a model in eval mode, and whether it trains.
        self._functions: Dict[int, List[bool]] = {}
        self._offers_ddp = False
        # An inference module: it puts a model in eval mode, never in train mode,
        # and never runs a backward pass.
        self._evaluates = self._trains = False

    def visit_Call(self, node: cst.Call) -> None:
        if self._off:
            return
        kind = _DATA_PARALLEL_CALLS.lookup(node, self.context)
        if kind is not None:
            if not self._mirrors_a_wrap() and not self._in_strategy_class() and not _one_device(node) and (
                    not self._unwrapped_after_loading(node)):
                self._found.append((node, kind, self.context.enclosing_function()))
            return
        name = method_name(node)
        if name == "eval" and not node.args:
            self._evaluates = True
            self._function_flags()[0] = True
        elif name == "train" or (name == "backward" and is_backward(node, self.context)) or (
            name == "step" and self.context.enclosing_loop() is not None
        ):
            self._trains = self._trains or name != "step"
            function = self.context.enclosing_function()
            if not (name == "train" and function is not None and EVALUATION_NAME.match(function.name.value)):
                self._function_flags()[1] = True  # (`if train_mode: net.train()` in `validate`: not training)
        elif not self._offers_ddp and _offers_ddp(node, self.context):
            self._offers_ddp = True

    def leave_Module(self, node: cst.Module) -> None:
        if self._offers_ddp:
            return  # DataParallel is the fallback of a program that also runs with DDP
        if not self._trains and (self._evaluates or named_for_inference(self.context.path)):
            return  # inference only: DDP is for training, and nothing here trains
        for call, kind, function in self._found:
            flags = self._functions.get(id(function), [False, False])
            if function is not None and flags == [True, False]:
                continue  # this function only evaluates: inference, though the module trains elsewhere
            if kind == "data_parallel" and function is not None and not flags[1] and function.name.value not in (
                "forward", "__call__"
            ):
                continue  # a functional forward outside training: sampling or evaluation
            self.report(call, self._MESSAGES[kind])

    def _function_flags(self) -> List[bool]:
        function = self.context.enclosing_function()
        return self._functions.setdefault(id(function), [False, False])

    def _in_strategy_class(self) -> bool:
        return any(isinstance(n, cst.ClassDef) and _STRATEGY_CLASS.match(n.name.value) for n in self.context.stack)

    def _mirrors_a_wrap(self) -> bool:
        """In the body of ``if isinstance(x, nn.DataParallel):`` (not of ``if
        not isinstance(...)``, which wraps a model that is not wrapped yet)."""
        stack = self.context.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                return False
            if isinstance(node, cst.If) and stack[i + 1] is node.body:
                negated = {id(n) for u in walk_nodes(node.test) if type(u) is cst.UnaryOperation
                           and type(u.operator) is cst.Not for n in walk_nodes(u.expression)}
                for n in walk_nodes(node.test):
                    if (isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "isinstance"
                            and id(n) not in negated and len(n.args) == 2
                            and "DataParallel" in _names(n.args[1].value)):
                        return True
        return False

    def _unwrapped_after_loading(self, call: cst.Call) -> bool:
        """``m = nn.DataParallel(m)``, then only ``m.load_state_dict(...)``
        until ``m = m.module``: wrapped to load a checkpoint saved from a
        wrapped model (its ``module.`` prefixes), never run."""
        stack = self.context.stack
        if len(stack) < 4 or not isinstance(stack[-2], cst.Assign) or stack[-2].value is not call:
            return False
        targets = stack[-2].targets
        if len(targets) != 1 or not isinstance(targets[0].target, cst.Name):
            return False
        name, line, block = targets[0].target.value, stack[-3], stack[-4]
        statements, at = statement_position(block, line)
        for statement in statements[at + 1:] if at is not None else ():
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            value = getattr(small, "value", None)
            if isinstance(small, cst.Assign) and isinstance(value, cst.Attribute) and value.attr.value == "module" and (
                    isinstance(value.value, cst.Name) and value.value.value == name):
                return True
            if not (isinstance(small, cst.Expr) and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                    and value.func.attr.value == "load_state_dict" and isinstance(value.func.value, cst.Name)
                    and value.func.value.value == name):
                return False
        return False


def _names(expr: cst.BaseExpression) -> List[str]:
    """The names and attribute names in ``expr`` (``(nn.DataParallel, DDP)``)."""
    return [n.value if isinstance(n, cst.Name) else n.attr.value
            for n in walk_nodes(expr) if isinstance(n, (cst.Name, cst.Attribute))]


def _one_device(call: cst.Call) -> bool:
    """``DataParallel(model, device_ids=[0])`` or ``device_ids=gpu_ids[0:1]``:
    one device, where the wrapper only forwards the call (kept for its
    ``.module`` attribute); DDP would change nothing."""
    arg = argument(call, "device_ids", 1)[1]
    value = arg.value if arg is not None else None
    if isinstance(value, (cst.List, cst.Tuple)):
        return len(value.elements) == 1 and not isinstance(value.elements[0], cst.StarredElement)
    if isinstance(value, cst.Subscript) and len(value.slice) == 1 and isinstance(value.slice[0].slice, cst.Slice):
        piece = value.slice[0].slice
        lower = 0 if piece.lower is None else literal_number(piece.lower)
        upper = literal_number(piece.upper) if piece.upper is not None else None
        return piece.step is None and lower is not None and upper is not None and upper - lower == 1
    return False
