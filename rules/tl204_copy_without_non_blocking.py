from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import (
    argument,
    device_type,
    has_star,
    keyword,
    last_name,
    literal_bool,
    method_name,
    moves_to_device,
    positional,
    receiver,
)
from torchlint.rules._loaders import DEVICE, HOST, LoaderIndex, placement

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_STATEMENTS = (cst.BaseSmallStatement, cst.BaseCompoundStatement)
# Device types that do not take pinned host memory.
_UNPINNABLE = ("mps", "meta", "cpu")
# In-place methods that do not write into the tensor's data.
_METADATA_ONLY = frozenset({"requires_grad_", "share_memory_", "record_stream"})

_Event = Tuple

# Methods whose result shares memory with the receiver: writing into the
# result writes into the batch.
_ALIASING_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "t",
        "narrow", "select", "expand", "expand_as", "unfold", "split", "chunk", "unbind", "numpy",
        "detach", "as_strided", "contiguous", "movedim", "swapaxes", "diagonal", "values", "items",
        "get", "pin_memory",
    }
)
# Builtins whose result holds the argument's tensors themselves.
_ALIASING_BUILTINS = frozenset(
    {"list", "tuple", "dict", "sorted", "reversed", "zip", "enumerate", "iter", "next", "min", "max", "getattr"}
)
# Builtins that neither write into their arguments nor return them.
_PURE_BUILTINS = frozenset(
    {
        "len", "print", "isinstance", "type", "id", "repr", "str", "format", "hash", "bool", "int",
        "float", "hasattr", "any", "all", "sum", "callable",
    }
)
# Attributes that only describe a tensor (reading them cannot write data).
_METADATA = frozenset(
    {"shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_sparse", "names"}
)


class _Loop:
    """A `for` over something that may be a pinned loader, with what happens
    in its body, in source order."""

    __slots__ = ("node", "loader", "target", "scope", "events")

    def __init__(self, node: cst.For, loader: cst.BaseExpression, target: cst.BaseExpression, scope) -> None:
        self.node = node
        self.loader = loader
        self.target = target
        self.scope = scope
        self.events: List[_Event] = []


class CopyWithoutNonBlocking(Rule):
    """
    ## What it does
    Inside `for ... in <loader>`, where `<loader>` is a
    `torch.utils.data.DataLoader` built with `pin_memory=True` in the same
    module, reports a copy of the loop's data to a device with `.to(<device>)`,
    `.to(device=...)` or `.cuda(...)` that does not pass `non_blocking=True`.

    The loop may be written `for batch in loader`, `for i, batch in
    enumerate(loader)` or `for x, y in tqdm(loader)`. The loader may be a
    local or module-level name, `self.train_loader` assigned in a method of
    the same class, the result of a function of the module that returns it,
    or a parameter of a module-level function (or of a class's `__init__`)
    to which every call in the module passes such a loader. The loop's data
    are the loop's target names (`x`, `y` in `for i, (x, y) in
    enumerate(loader)`), their items and attributes (`batch["input_ids"]`,
    `batch.x`), names unpacked or assigned from them in the body
    (`images, target = batch`), and the variables of a comprehension over
    them (`{k: v.to(device) for k, v in batch.items()}`).

    ## Why is this bad?
    The loader's `pin_memory=True` puts each batch in page-locked host memory
    so that the copy to the GPU can run asynchronously, by direct memory
    access, while the host goes on queuing work. A copy without
    `non_blocking=True` throws this away: after queuing the copy, PyTorch
    synchronizes the stream, so the host waits until the GPU has finished
    every kernel queued before the copy and the copy itself, and only then
    prepares the next step. The pinning buys a faster copy, but not an
    overlapped one, and the GPU idles while the host catches up.

    Measured with `torchlint verify --rules TL204` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 4.48 ms before,
    4.46 ms after, **1.01x**. A copy to the CPU is no copy and memory is not pinned
    without CUDA, so both versions do the same work on a CPU; the gain is
    copy/compute overlap on a GPU. Run the same command on a GPU machine for the
    figure that matters there.

    ## Example
    ```python
    loader = DataLoader(train_set, batch_size=64, num_workers=8, pin_memory=True)
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
    ```

    ## Use instead
    ```python
    loader = DataLoader(train_set, batch_size=64, num_workers=8, pin_memory=True)
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = criterion(model(images), labels)
    ```

    ## Fix safety
    Adding `non_blocking=True` to a host-to-CUDA copy of a pinned batch is
    safe. The copy is queued on the current CUDA stream, so every kernel
    queued after it on that stream (the forward pass) sees the copied data;
    the source is a pinned batch that the loader does not reuse, and
    PyTorch's pinned-memory allocator does not hand its memory out again
    until the copy has finished, even if the batch is freed. The only way to
    observe the difference would be to read the destination from the host
    before the copy has finished, which a device tensor does not allow
    without synchronizing (`.item()`, `.cpu()` and printing wait for the
    stream). When the destination turns out to be the CPU (no GPU), a copy of
    a host tensor to the CPU is no copy and the flag does nothing.

    The batch is known to hold host tensors: with `pin_memory=True` the
    loader calls `Tensor.pin_memory()` on every tensor of the batch, which
    raises for a tensor already on a device (`torch/utils/data/_utils/
    pin_memory.py`), so a loader whose dataset or `collate_fn` visibly makes
    device tensors is not reported at all (TL202 asks the same question).

    The fix is therefore safe only when the destination is visibly CUDA or
    the CPU: `.cuda(...)`, `"cuda:0"`, `torch.device("cuda", i)`, or a name
    assigned only such devices in the module (`device =
    torch.device("cuda" if torch.cuda.is_available() else "cpu")`). It is
    unsafe when:
    - the device comes from elsewhere (a parameter, `self.device`,
      `args.device`, a call) or may be MPS: the loader does not pin on MPS,
      and a non-blocking copy from pageable memory to MPS can read the batch
      after it has been freed and silently copy other data
      (pytorch/pytorch#139550, #189690);
    - the destination may be the CPU and the loader has a `collate_fn` whose
      batches the rule cannot see: an object of a class of its own is not
      pinned (`pin_memory()` returns it unchanged) and may hold CUDA tensors,
      and a non-blocking device-to-host copy gives a tensor the host may read
      before the data has arrived;
    - `non_blocking=False` is written explicitly: the author may have chosen
      it on purpose;
    - after the copy, the loop writes into the batch on the host, directly
      (`x += 1`, `x.mul_(2)`, `x[mask] = 0`), through a view or alias of it
      (`v = x.view(-1); v.zero_()`, `a = x.numpy(); a[:] = 0`, `list(x)`), or
      possibly through a call that is given it (`augment(x)`,
      `F.relu(x, inplace=True)`, `torch.add(x, 1, out=x)`; torch functions
      without `out=`/`inplace=` and builtins such as `len` or `print` are
      known not to write): an asynchronous copy may read the source after
      that write.

    Not reported: a copy inside `with torch.cuda.stream(...)` (a prefetcher
    manages its own streams and events), a `non_blocking=` whose value is not
    a literal, `non_blocking` given positionally (`.cuda(device, True)`,
    `.to(device, dtype, True)`), `*args`/`**kwargs`, a device written as
    `"mps"` or `"meta"`, a copy of something computed from the batch
    (`x.float().cuda()` copies a new, unpinned tensor), a whole batch moved
    with `batch.to(device)` when the loader has a custom `collate_fn` (the
    batch may be a class of its own whose `.to` has no `non_blocking`), and a
    loader whose `pin_memory` is not the literal `True` or that cannot be
    traced to its `DataLoader(...)` call in the module (a function parameter
    filled by code elsewhere, an import). A copy made in a helper function
    that the loop calls is not followed.

    ## References
    - PyTorch Performance Tuning Guide, "Enable asynchronous data loading and augmentation"
      (pinned memory "enables faster and asynchronous memory copy from the host to the GPU")
    - Hugging Face single-GPU training guide, "Data preloading"
    - PyTorch documentation, "CUDA semantics", section "Use pinned memory buffers"
    - PyTorch tutorial "A guide on good usage of non_blocking and pin_memory() in PyTorch"
    """

    code = "TL204"
    name = "copy-without-non-blocking"
    summary = "Copy of a pinned batch to the GPU without `non_blocking=True`"
    fix = FixAvailability.SOMETIMES_SAFE

    VALID = [
        Valid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for x, y in loader:
                x = x.to(device, non_blocking=True)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds)
            for x, y in loader:
                x = x.to(device)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for x, y in loader:
                x = x.to(torch.float16)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for x, y in loader:
                x = x.float().cuda()
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            def train(loader):
                for x, y in loader:
                    x = x.cuda()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for x, y in loader:
                x = x.to(device)
            """,
            expected_fix="""
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for x, y in loader:
                x = x.to(device, non_blocking=True)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for step, batch in enumerate(loader):
                ids = batch['input_ids'].cuda()
            """,
            expected_fix="""
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, pin_memory=True)
            for step, batch in enumerate(loader):
                ids = batch['input_ids'].cuda(non_blocking=True)
            """,
        ),
        Invalid(
            """
            import torch
            class Trainer:
                def __init__(self, ds):
                    self.loader = torch.utils.data.DataLoader(ds, pin_memory=True)
                def fit(self):
                    for x, y in self.loader:
                        x, y = x.to(self.device), y.to(self.device)
            """,
            expected_fix="""
            import torch
            class Trainer:
                def __init__(self, ds):
                    self.loader = torch.utils.data.DataLoader(ds, pin_memory=True)
                def fit(self):
                    for x, y in self.loader:
                        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            """,
            findings=2,
        ),
    ]

    BENCHMARK = Benchmark(
        title="copies from a pinned `DataLoader` without vs with `non_blocking=True`",
        before="""
            import torch

            device = torch.device(DEVICE)
            from torch.utils.data import DataLoader, TensorDataset

            dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
            loader = DataLoader(dataset, batch_size=128, pin_memory=True)
            weight = torch.randn(1024, 256, device=device)


            def run():
                total = torch.zeros((), device=device)
                for x, y in loader:
                    x = x.to(device)
                    total += (x @ weight).relu().sum()
                return total
            """,
        after="""
            import torch

            device = torch.device(DEVICE)
            from torch.utils.data import DataLoader, TensorDataset

            dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
            loader = DataLoader(dataset, batch_size=128, pin_memory=True)
            weight = torch.randn(1024, 256, device=device)


            def run():
                total = torch.zeros((), device=device)
                for x, y in loader:
                    x = x.to(device, non_blocking=True)
                    total += (x @ weight).relu().sum()
                return total
            """,
        cpu_note=(
            "a copy to the CPU is no copy and memory is not pinned without CUDA: both versions do the same "
            "work"
        ),
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        source = context.source
        # Without a literal `pin_memory` there is no pinned loader to find
        # (`pin_memory=True` is essentially never written positionally).
        self._active = "DataLoader" in source and "pin_memory" in source
        if not self._active:
            self.walks = False
        self._index = LoaderIndex(context)
        self._frames: List[List[_Loop]] = [[]]
        self._loops: List[_Loop] = []

    # -- scopes ------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        if self._active:
            self._index.enter_module(node)

    def _enter(self, node) -> None:
        if self._active:
            self._index.enter(node)
            self._frames.append([])

    def _leave(self, node) -> None:
        if self._active:
            self._index.leave()
            self._frames.pop()

    visit_FunctionDef = _enter
    visit_ClassDef = _enter
    visit_Lambda = _enter
    leave_FunctionDef = _leave
    leave_ClassDef = _leave
    leave_Lambda = _leave

    # -- bindings ----------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if self._active:
            for target in node.targets:
                self._index.assign(target.target, node.value)

    def leave_Assign(self, node: cst.Assign) -> None:
        if self._active and self._frames[-1]:
            targets = [t.target for t in node.targets]
            self._event(("assign", targets, node.value))
            for target in targets:
                if isinstance(target, cst.Subscript) and not _string_key(target):
                    self._event(("mutate", target.value))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self._active and node.value is not None:
            self._index.assign(node.target, node.value)

    def leave_AnnAssign(self, node: cst.AnnAssign) -> None:
        if self._active and self._frames[-1] and node.value is not None:
            self._event(("assign", [node.target], node.value))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if self._active:
            self._index.assign(node.target, None)
            if self._frames[-1]:
                self._event(("mutate", node.target))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if self._active:
            self._index.assign(node.target, None)

    def leave_NamedExpr(self, node: cst.NamedExpr) -> None:
        if self._active and self._frames[-1]:
            self._event(("kill", node.target))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if self._active and node.asname is not None:
            self._index.assign(node.asname.name, None)
            if self._frames[-1]:
                self._event(("kill", node.asname.name))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if self._active and node.name is not None:
            self._index.assign(node.name.name, None)

    def visit_Del(self, node: cst.Del) -> None:
        if self._active:
            self._index.assign(node.target, None)

    def visit_Import(self, node: cst.Import) -> None:
        if self._active:
            for alias in node.names:
                if alias.asname is not None:
                    self._index.assign(alias.asname.name, None)
                else:
                    head = alias.name
                    while isinstance(head, cst.Attribute):
                        head = head.value
                    self._index.assign(head, None)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if self._active and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                self._index.assign(alias.asname.name if alias.asname is not None else alias.name, None)

    def visit_Global(self, node: cst.Global) -> None:
        if self._active:
            for item in node.names:
                self._index.declare_global(item.name.value)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        if self._active:
            for item in node.names:
                self._index.declare_global(item.name.value)

    def visit_Return(self, node: cst.Return) -> None:
        if self._active:
            self._index.add_return(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        if self._active:
            self._index.add_yield()

    # -- loops and copies --------------------------------------------------------
    def visit_For(self, node: cst.For) -> None:
        if not self._active:
            return
        self._index.assign(node.target, None)
        frame = self._frames[-1]
        if frame:
            self._event(("for", node.target, node.iter))
        unwrapped = self._unwrap(node.iter, node.target)
        if unwrapped is not None:
            loop = _Loop(node, unwrapped[0], unwrapped[1], self._index.scope)
            frame.append(loop)
            self._loops.append(loop)

    def leave_For(self, node: cst.For) -> None:
        if self._active:
            frame = self._frames[-1]
            if frame and frame[-1].node is node:
                frame.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._active:
            return
        self._index.add_call(node)
        if not self._frames[-1]:
            return
        name = method_name(node)
        if name in ("to", "cuda"):
            if moves_to_device(node, self.context) is not None:
                self._event(("move", node, self._comprehension_binds(), self._on_side_stream()))
        elif name is not None and name.endswith("_") and not name.startswith("__") and name not in _METADATA_ONLY:
            self._event(("mutate", receiver(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        """A call that takes the loop's data as an argument and may write into
        it (`augment(x)`, `F.relu(x, inplace=True)`, `torch.add(x, 1, out=x)`),
        recorded after its arguments (a copy among them runs first)."""
        if not self._active or not self._frames[-1] or not original_node.args:
            return
        if self._leaves_arguments_alone(original_node):
            return
        for arg in original_node.args:
            value = arg.value
            if isinstance(value, cst.Attribute) and value.attr.value in _METADATA:
                continue
            if isinstance(value, (cst.Name, cst.Attribute, cst.Subscript)):
                self._event(("mutate", value))

    def _leaves_arguments_alone(self, call: cst.Call) -> bool:
        func = call.func
        if isinstance(func, cst.Name) and _builtin(func.value, self.context):
            return func.value in _PURE_BUILTINS or func.value in _ALIASING_BUILTINS
        qualified = self.context.qualname(func)
        if qualified is None or not qualified.startswith("torch.") or qualified.endswith("_"):
            return False
        if keyword(call, "out") is not None:
            return False
        inplace = keyword(call, "inplace")
        if inplace is not None and literal_bool(inplace.value) is not False:
            return False
        if qualified.startswith("torch.nn.functional.") and len(positional(call)) > 1:
            return False  # `F.relu(x, True)`: `inplace` given by position
        return True

    def _event(self, event: _Event) -> None:
        for loop in self._frames[-1]:
            loop.events.append(event)

    def _unwrap(
        self, iterable: cst.BaseExpression, target: cst.BaseExpression
    ) -> Optional[Tuple[cst.BaseExpression, cst.BaseExpression]]:
        """``enumerate(tqdm(loader))`` -> ``(loader, <the data part of target>)``."""
        ctx = self.context
        for _ in range(4):
            if not isinstance(iterable, cst.Call):
                break
            func = iterable.func
            pos = positional(iterable)
            first = pos[0].value if pos and not iterable.args[0].star else None
            if isinstance(func, cst.Name) and func.value in ("enumerate", "iter") and _builtin(func.value, ctx):
                if first is None:
                    return None
                if func.value == "enumerate":
                    if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 2:
                        return None
                    if any(isinstance(e, cst.StarredElement) for e in target.elements):
                        return None
                    target = target.elements[1].value
                iterable = first
                continue
            qualified = ctx.qualname(func)
            if qualified is not None and qualified.split(".", 1)[0] == "tqdm" and qualified.endswith(".tqdm"):
                if first is None:
                    return None
                iterable = first
                continue
            break
        if isinstance(iterable, (cst.Name, cst.Attribute)):
            return iterable, target
        if isinstance(iterable, cst.Call) and not (isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
            return iterable, target
        return None

    def _comprehension_binds(self) -> List[Tuple[cst.BaseExpression, cst.BaseExpression]]:
        """The ``for`` clauses of the comprehensions around the node being visited,
        outermost first."""
        binds: List[Tuple[cst.BaseExpression, cst.BaseExpression]] = []
        stack = self.context.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            if isinstance(node, _STATEMENTS):
                break
            if isinstance(node, _COMPREHENSIONS):
                chain = []
                clause: Optional[cst.CompFor] = node.for_in
                while clause is not None:
                    chain.append((clause.target, clause.iter))
                    clause = clause.inner_for_in
                binds = chain + binds
        return binds

    def _on_side_stream(self) -> bool:
        """Inside ``with torch.cuda.stream(...)`` (or any ``with ....stream(...)``)."""
        for node in self.context.ancestors():
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            if isinstance(node, cst.With):
                for item in node.items:
                    call = item.item
                    if isinstance(call, cst.Call) and last_name(call.func) in ("stream", "StreamContext"):
                        return True
        return False

    # -- deciding ------------------------------------------------------------------
    def leave_Module(self, node: cst.Module) -> None:
        if not self._active:
            return
        reported = set()
        for loop in self._loops:
            loaders = self._index.pinned(loop.loader, loop.scope)
            if not loaders:
                continue
            where = placement(self.context)  # built once per file, on first need
            kinds = [where.loader(l) for l in loaders]
            if any(DEVICE in pair for pair in kinds):
                continue  # pinning a batch of device tensors raises before any copy
            host_batches = all(batch == HOST for _, batch in kinds)
            whole_batch_ok = all(keyword(l, "collate_fn") is None and not has_star(l) for l in loaders)
            for call, arg, safe in self._copies(loop, whole_batch_ok):
                if id(call) in reported:
                    continue
                reported.add(id(call))
                safe = safe and self._destination(call, loop.scope, host_batches)
                self._report(call, arg, safe)

    # -- where the copy goes ---------------------------------------------------------
    def _destination(self, call: cst.Call, scope, host_batches: bool) -> bool:
        """Whether `non_blocking=True` is safe for where this copy goes: a
        CUDA device (`.cuda()`, `"cuda:0"`), or a name assigned only CUDA or
        CPU devices in this module (`torch.device("cuda" if ... else "cpu")`).
        A device from elsewhere may be MPS, where a non-blocking copy from
        pageable memory (the loader does not pin on MPS) can read the batch
        after it is freed. A CPU destination is safe only for host batches:
        a batch object of its own is not pinned and may hold CUDA tensors, and
        a non-blocking device-to-host copy is read before it has arrived."""
        if method_name(call) == "cuda":
            return True
        _, device = argument(call, "device", 0)
        if device is None:
            return False
        kinds = self._device_kinds(device.value, scope, 0)
        if kinds is None:
            return False
        return "cpu" not in kinds or host_batches

    def _device_kinds(self, expr: cst.BaseExpression, scope, depth: int) -> Optional[set]:
        """The device types ``expr`` may be, when only "cuda" and "cpu"."""
        if depth > 6:
            return None
        if isinstance(expr, cst.Integer):
            return {"cuda"}
        if isinstance(expr, cst.FormattedString):
            first = expr.parts[0] if expr.parts else None
            if isinstance(first, cst.FormattedStringText) and first.value.startswith("cuda"):
                return {"cuda"}
            return None
        kind = device_type(expr, self.context)
        if kind is not None:
            return {kind} if kind in ("cuda", "cpu") else None
        if isinstance(expr, cst.IfExp):
            body = self._device_kinds(expr.body, scope, depth + 1)
            orelse = self._device_kinds(expr.orelse, scope, depth + 1)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(expr, cst.Call) and self.context.qualname(expr.func) == "torch.device":
            pos = positional(expr)
            if pos and not expr.args[0].star:
                return self._device_kinds(pos[0].value, scope, depth + 1)
            return None
        if isinstance(expr, cst.Name):
            bindings = self._index.lookup(expr.value, scope)
            if not bindings:
                return None
            kinds: set = set()
            for binding in bindings:
                if binding.kind != "assign" or binding.index is not None:
                    return None
                found = self._device_kinds(binding.value, binding.scope, depth + 1)
                if found is None:
                    return None
                kinds |= found
            return kinds
        return None

    def _copies(self, loop: _Loop, whole_batch_ok: bool) -> List[list]:
        """Replay the loop body: which copies take the loop's data, and whether
        the data is written in place afterwards."""
        data: Dict[str, str] = {}
        if isinstance(loop.target, cst.Name):
            data[loop.target.value] = "whole"
        else:
            _bind_names(data, loop.target, "part")
        found: List[list] = []
        for event in loop.events:
            kind = event[0]
            if kind == "assign":
                for target in event[1]:
                    _bind(data, target, event[2])
            elif kind == "for":
                _bind_iteration(data, event[1], event[2])
            elif kind == "kill":
                _bind_names(data, event[1], None)
            elif kind == "mutate":
                if event[1] is not None and _root(event[1]) in data:
                    for item in found:
                        item[2] = False
            elif kind == "move":
                call, binds, side_stream = event[1], event[2], event[3]
                if side_stream:
                    continue
                local = data
                if binds:
                    local = dict(data)
                    for target, iterable in binds:
                        _bind_iteration(local, target, iterable)
                verdict = self._missing_non_blocking(call, local, whole_batch_ok)
                if verdict is not None:
                    found.append([call, verdict[1], verdict[1] is None])
        return found

    def _missing_non_blocking(
        self, call: cst.Call, data: Dict[str, str], whole_batch_ok: bool
    ) -> Optional[Tuple[str, Optional[cst.Arg]]]:
        """``("absent", None)`` or ``("false", arg)`` for a copy of the loop's
        data without ``non_blocking=True``; None otherwise."""
        recv = receiver(call)
        if recv is None:
            return None
        root = _root(recv)
        if root is None or root not in data or data[root] == "alias":
            return None
        if isinstance(recv, cst.Name) and data[root] == "whole" and not whole_batch_ok:
            return None
        if has_star(call):
            return None
        name = method_name(call)
        pos = positional(call)
        device = keyword(call, "device")
        if device is None and pos:
            device = pos[0]
        if device is not None and device_type(device.value, self.context) in _UNPINNABLE:
            return None
        flag = keyword(call, "non_blocking")
        if flag is not None:
            return ("false", flag) if literal_bool(flag.value) is False else None
        if name == "cuda" and len(pos) >= 2:
            return None
        if name == "to" and (len(pos) >= 3 or (len(pos) == 2 and literal_bool(pos[1].value) is not None)):
            return None
        return ("absent", None)

    def _report(self, call: cst.Call, arg: Optional[cst.Arg], safe: bool) -> None:
        method = method_name(call)
        self.report(
            call,
            f"`.{method}(...)` copies a batch from a `pin_memory=True` loader without "
            "`non_blocking=True`, so the host waits until the GPU has finished all queued "
            "work and the copy; pass `non_blocking=True` to let the copy overlap with compute",
            fix=Fix(
                Applicability.SAFE if safe else Applicability.UNSAFE,
                "Pass `non_blocking=True`",
                lambda: calls.set_keyword(call, "non_blocking", "True", arg),
            ),
        )


# -- the loop's data ------------------------------------------------------------------


def _root(expr: cst.BaseExpression) -> Optional[str]:
    """``batch["x"].y`` -> ``"batch"``; a call or anything else -> None."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _kind(expr: cst.BaseExpression, data: Dict[str, str]) -> Optional[str]:
    """``"whole"`` for a name holding a whole batch, ``"part"`` for anything
    taken from the loop's data, ``"alias"`` for a value that shares memory
    with it without being a batch of the loader (``x.view(-1)``,
    ``x.numpy()``, ``list(batch)``: writing into it writes into the batch,
    but it is not reported as a copy), None otherwise."""
    if isinstance(expr, cst.Name):
        return data.get(expr.value)
    if isinstance(expr, (cst.Attribute, cst.Subscript)):
        root = _root(expr)
        if root not in data:
            return None
        return "alias" if data[root] == "alias" else "part"
    if isinstance(expr, cst.Call):
        name = method_name(expr)
        if name in _ALIASING_METHODS:
            source = receiver(expr)
            return "alias" if source is not None and _kind(source, data) else None
        if isinstance(expr.func, cst.Name) and expr.func.value in _ALIASING_BUILTINS:
            if any(_kind(arg.value, data) for arg in expr.args):
                return "alias"
    return None


def _derived(kind: Optional[str]) -> Optional[str]:
    """The kind of a part of a value of kind ``kind``."""
    if kind is None:
        return None
    return "alias" if kind == "alias" else "part"


def _bind_names(data: Dict[str, str], target: cst.BaseExpression, kind: Optional[str]) -> None:
    if isinstance(target, cst.Name):
        if kind is None:
            data.pop(target.value, None)
        else:
            data[target.value] = kind
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind_names(data, element.value, kind)
    elif isinstance(target, cst.StarredElement):
        _bind_names(data, target.value, kind)


def _bind(data: Dict[str, str], target: cst.BaseExpression, value: cst.BaseExpression) -> None:
    """``target = value``."""
    if isinstance(target, (cst.Tuple, cst.List)):
        if (
            isinstance(value, (cst.Tuple, cst.List))
            and len(value.elements) == len(target.elements)
            and not any(isinstance(e, cst.StarredElement) for e in (*value.elements, *target.elements))
        ):
            for t, v in zip(target.elements, value.elements):
                _bind(data, t.value, v.value)
            return
        _bind_names(data, target, _derived(_kind(value, data)))
    elif isinstance(target, (cst.Name, cst.StarredElement)):
        _bind_names(data, target, _kind(value, data))


def _bind_iteration(data: Dict[str, str], target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
    """``for target in iterable`` (a statement or a comprehension clause)."""
    if isinstance(iterable, cst.Call) and not iterable.args and method_name(iterable) in ("items", "values"):
        source = receiver(iterable)
        kind = _kind(source, data) if source is not None else None
        if kind:
            if method_name(iterable) == "values":
                _bind_names(data, target, _derived(kind))
                return
            if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
                _bind_names(data, target.elements[0].value, None)
                _bind_names(data, target.elements[1].value, _derived(kind))
                return
    _bind_names(data, target, _derived(_kind(iterable, data)))


def _string_key(target: cst.Subscript) -> bool:
    """``batch["image"] = ...`` replaces an entry of a mapping; it does not
    write into a tensor."""
    return len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index) and isinstance(
        target.slice[0].slice.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
    )


def _builtin(name: str, ctx) -> bool:
    return name not in ctx.imports.defined and ctx.imports.resolve(name) is None
