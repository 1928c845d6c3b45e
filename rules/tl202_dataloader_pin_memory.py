from __future__ import annotations

from typing import List, Optional

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._helpers import (
    argument,
    device_kind,
    device_type,
    keyword,
    literal_bool,
    literal_number,
    method_name,
    moves_to_device,
    positional,
)
from torchlint.rules._loaders import (
    DATALOADERS,
    DEVICE,
    HOST,
    IN_MEMORY_DATASETS,
    SUBSETS,
    dataset_argument,
    itemless_dataset,
    loads_in_main_process,
    unpinnable_batches,
    kwargs_keyword,
    placement,
    returned_by,
)
from torchlint.rules._project import COPIED, caller_trait
from torchlint.rules._project_text import LOADER, trait_key
from torchlint.rules._one_batch import in_dataset_demo, loader_fetches_one_batch
from torchlint.rules._program import demonstration

# Device types for which pinned host memory does not help (MPS shares memory
# with the host and does not support pinning; meta tensors hold no data).
_NOT_PINNABLE = ("meta", "mps")



def _written_out(expr: cst.BaseExpression, context) -> bool:
    """``torch.tensor([[-1.2, 3.1], [0.5, 2.0]])``: a tensor of numbers written in the code."""
    if not isinstance(expr, cst.Call) or not expr.args or context.qualname(expr.func) not in (
        "torch.tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor"
    ):
        return False
    todo = [expr.args[0].value]
    while todo:
        node = todo.pop()
        if isinstance(node, (cst.List, cst.Tuple)):
            todo.extend(e.value for e in node.elements)
        elif isinstance(node, cst.UnaryOperation):
            todo.append(node.expression)
        elif not isinstance(node, (cst.Integer, cst.Float)):
            return False
    return True

class DataLoaderPinMemory(Rule):
    """
    ## What it does
    Reports a `torch.utils.data.DataLoader(...)` whose `pin_memory` is absent
    or `False`, in a module that copies data to an accelerator (it calls
    `.cuda(...)` or `.to(<device>)`, or passes `device="cuda"`).

    The loader is often built in one module and iterated in another: a
    `build_loader()` of `data.py` that returns `DataLoader(ds, ...)`, called
    by `train.py`, whose loop copies the batches. In a module that copies
    nothing, a `DataLoader` that a module-level function returns (directly or
    through a name bound only to it) is reported when the project index finds
    a caller among the other files of the run that iterates the returned
    loader (`for x, y in build_loader(...)`, through `enumerate`/`tqdm`, or a
    name or `self.attr` bound only to such calls) and copies the loop's data to
    an accelerator (`.cuda()`, `.to(device)`, `.to("cuda")`, with or without
    `non_blocking`; not `.to(torch.float16)`, `"cpu"` or `"mps"`). The finding
    names that call (`build_loader` returns it to `train.py:12`). A caller
    that does not copy the batches, or a function of the same name in another
    module, does not count. Only the files of the run are indexed: pre-commit,
    which passes only the changed files, gives each file its single-module
    answer (silent) until a full run.

    `DataLoader(ds, **kw)` is judged by the dict when `kw` is built in the
    same function or module (`dict(num_workers=4)` or `{"num_workers": 4}`)
    and otherwise only updated with `kw.update(pin_memory=...)` or
    `kw["pin_memory"] = ...` (an update in the same block, before the loader,
    replaces the value; one under a branch must agree with it) or unpacked
    (`**kw`). Such a finding has no fix: the dict may already hold the
    keyword, and the call cannot take it twice.

    ## Why is this bad?
    A host-to-device copy from ordinary (pageable) memory is staged by the
    driver through a pinned buffer, costing an extra copy, and it cannot run
    asynchronously. With `pin_memory=True` the loader's worker thread puts each
    batch in page-locked memory, so `.to(device, non_blocking=True)` copies it
    with direct memory access while the GPU keeps computing.

    Measured with `torchlint verify --rules TL202` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu, a busy machine; no GPU was available): 6.32 ms
    before, 6.29 ms after, **no measurable change** (quartile range 0.93-2.04x). Pinning
    needs CUDA: on a CPU the loader does not pin and both versions do the same work. Run
    the same command on a GPU machine for the figure that matters there.

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
    `pin_memory=True` makes the loader pass every batch through
    `torch.utils.data._utils.pin_memory.pin_memory`, which calls
    `Tensor.pin_memory()` on each tensor it finds (inside dicts, lists,
    tuples and namedtuples, or through an object's own `pin_memory()` method).
    For a tensor that is already on a device this raises `RuntimeError:
    cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned`
    on the first batch. So the rule stays silent where the dataset visibly
    yields device tensors (see below), and its fix is safe only where the
    dataset is known to yield host tensors. Then the batches hold the same
    values, only in page-locked memory. On a machine without an accelerator,
    or on MPS, the loader does not pin and warns ("'pin_memory' argument is
    set as true but no accelerator is found") each time iteration starts
    (`torch/utils/data/dataloader.py`); the fix counts that as no change in
    behaviour, like Ruff's safe fixes, but a program that turns warnings
    into errors (`python -W error`, pytest's `filterwarnings = error`) on
    such a machine would stop there.

    Adding `pin_memory=True` where the keyword is absent is safe when:
    - the dataset is a `torchvision.datasets` dataset (it reads and decodes
      files on the host) whose other arguments, such as `transform=`, are
      visibly on the host (`transforms.Compose([...])`, a function of this
      file that moves nothing);
    - or a `TensorDataset` of tensors visibly created on the host (a factory
      such as `torch.randn(n, 3)` without `device=`, `torch.from_numpy(...)`,
      `x.cpu()`, names assigned such values), in a file that does not change
      the default device (`torch.set_default_device`, `with torch.device(...)`);
    - or an instance of a dataset class of this file whose code (every
      method: `__init__`, `__getitem__`, `__iter__`, helpers) never moves data
      to a device, whose bases are torch's `Dataset`/`IterableDataset` (or
      such classes of this file), and whose constructor arguments are
      visibly on the host (literals, host tensors as above);
    - or a `random_split`/`Subset`/`ConcatDataset` of such datasets;
    - and there is no `collate_fn=`, or it is torch's `default_collate`, or a
      function or lambda of this file that moves nothing and returns a tuple,
      list or dict display or a torch call (`torch.stack(...)`). Without a
      `collate_fn`, `default_collate` builds the batch from tensors, numbers,
      strings, dicts, lists, tuples and namedtuples (it raises for anything
      else), and pinning walks into exactly those containers the same way.

    It is unsafe otherwise, because the rule cannot see what the batches
    hold:
    - a dataset it cannot see into (a function parameter, `self.train_set`,
      a class imported from another module) may yield CUDA tensors, and
      pinning them raises (a `TensorDataset` of such tensors is not reported
      at all, see below);
    - a `collate_fn` it cannot see into (imported, or returning an object of
      a class of its own) may build the batch on a device; a batch of a class
      of its own is pinned only through its `pin_memory()` method, which the
      fix would start calling;
    - a `pin_memory_device=` names a device of its own (deprecated and
      ignored since PyTorch 2.6, where the current accelerator is used);
    - an explicit `pin_memory=False`: the author may have turned pinning off
      on purpose, for instance because page-locked memory is scarce on the
      host (every worker's prefetched batches stay pinned) or because a
      custom batch type cannot be pinned.

    A `DataLoader` given `*args` or any other `**kwargs` that may set
    `pin_memory` (a dict passed to a function, built by one, updated with
    another dict, or holding a `collate_fn`), or a `pin_memory=` whose value
    is not a literal, is not reported. Neither is a module that never moves
    data to an accelerator, or that only names `"mps"`, unless the project
    index finds a caller that copies the batches (above).

    Also not reported, because pinning would not help or would break:
    - a loader that loads in the main process (`num_workers` absent, the
      literal `0`, or a name every binding of which is `0`: `num_workers = 0`
      ... `num_workers=num_workers`): the pinning copy then runs in the same thread that loads,
      decodes and copies each batch, so it buys nothing until workers load
      ahead; TL203 reports such a loader, and once it has workers this rule
      applies;
    - a dataset that visibly yields device tensors: a dataset class of this
      file whose code calls `.cuda()`, `.to(<device>)` (`self.device`,
      `"cuda"`, not `"cpu"` or a dtype) or creates tensors with `device=`
      something other than the CPU (in `__getitem__`, in an
      `IterableDataset`'s `__iter__` generator, in `__init__`, or in a helper
      method or base class), or that calls a function of this file that does
      (a generator `rollout(env)` that yields `obs.cuda()`), or that hands a
      device to another call (`rollout(self.env, self.device)`; printing or
      logging it does not count); a dataset built by a function of this file
      that moves data; a `TensorDataset` of moved tensors; a torchvision
      dataset whose transform moves to a device; or a subset of one:
      pinning such a batch raises;
    - a `collate_fn` that takes a device (`partial(collate, device=device)`, a
      lambda passing one, or a function of this file with a `device`
      parameter) or visibly moves the batch (`torch.stack(b).cuda()`): it
      builds the batch on the accelerator already, and the loader cannot pin
      tensors that are not on the host (it raises an error);
    - a `TensorDataset` (or a subset of one) of tensors not visibly created
      on the host (computed by a function, loaded, passed in): the program
      decided where they live (features extracted on the GPU, a
      `--features-device` option), so pinning may raise, and it helps only if
      they happen to be on the host;
    - a dataset whose items hold no data to copy: `range(...)`, or an instance
      of a class of this file whose `__getitem__` returns only the index and
      attributes of the dataset itself (a dataset that repeats a prompt N
      times to generate N images);
    - a dataset of tensors written out in the code (`ToyDataset(X_train,
      y_train)` or `TensorDataset(X, y)` where `X_train = torch.tensor([[-1.2,
      3.1], ...])`): a handful of numbers, copied in no time either way;
    - a loader only used to fetch a batch or two outside any loop
      (`loader = DataLoader(...)` then `next(iter(loader))`, or `it =
      iter(loader)` then `next(it)` / `it.next()`, to show sample images):
      there is no stream of copies to overlap (showing the loader does not
      count: a notebook cell's `train_loader, test_loader`, `len(loader)`,
      `print(loader)`; nor does a function's parameter of the same name, or
      the name bound again to another loader in another branch), or read one
      batch every N steps (`next(test_iter)` under `if step % 100 == 0:`); a
      loader that is also iterated, passed on, or read with `next(it)` every
      iteration of a loop is still reported;
    - an evaluation loader of one sample per batch (the literal
      `batch_size=1`, `shuffle` absent or not `True`: a video evaluated
      frame by frame, a few audio clips generated one at a time): each copy
      is one sample, small next to the model run on it, so there is little
      for pinning to speed up or overlap;
    - a loader that a function (or a notebook's cell) binds to a name and
      never uses again (a
      validation loader built beside an evaluation that reads the dataset
      itself);
    - a loader built in the `if __name__ == "__main__":` block of a dataset
      module (it defines a `__getitem__` and trains nothing), a block that
      moves nothing to a device: the module's demo, which prints a few
      shapes or plots a few samples, once, by hand;
    - a loader whose `collate_fn` builds the batch around an object of a
      class of its own module that has no `pin_memory()` method, itself or
      through a function of that module that returns one (DETR's
      `collate_fn`, whose `nested_tensor_from_tensor_list` wraps the images
      in a `NestedTensor`): pinning calls an object's `pin_memory()` or
      leaves it as it is, so the images would stay pageable and the flag
      buys nothing. A `collate_fn` of this file is read here, an imported
      one through the project index (the run's module that defines it);
      and a loader with a `collate_fn` over a torchvision dataset whose items
      stay PIL images (`datasets.ImageFolder(root)`, `transform=None`, or a
      transform that only resizes): the batches are lists of images, which
      pinning does not touch (facenet-pytorch's face cropping with MTCNN);
    - a module that uses `torch_xla`: TPU input pipelines copy batches with
      their own device loader, and pinning is a CUDA feature;
    - a module that tells a trainer to run at most 20 batches or steps, as a
      literal (Composer's `train_subset_num_batches=5`, Lightning's
      `limit_train_batches=10` or `fast_dev_run=True`): a
      demonstration of an API, with no stream of copies worth overlapping;
    - a module that makes its data with scikit-learn's synthetic generators
      or loads one of its toy datasets (`make_regression(2000)`,
      `make_moons(...)`, `load_iris()`; not 100,000 samples or more by a
      literal): a demonstration whose whole run takes seconds;
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, `tests/`): a
      `DataLoader` there runs a few tiny batches to check the loader or the
      training loop, usually on a CPU-only runner where pinning only warns, and
      its arguments are often what the test is about, so there is no transfer
      worth speeding up.

    ## References
    - PyTorch Performance Tuning Guide, "Use pinned memory for faster host to device transfers"
    - `torch.utils.data.DataLoader` documentation, "Memory Pinning"
    - PyTorch source, `torch/utils/data/_utils/pin_memory.py` (`pin_memory()`
      calls `Tensor.pin_memory()` on every tensor of a batch) and
      `torch/utils/data/dataloader.py` (pinning happens only when an
      accelerator is available)
    """

    code = "TL202"
    name = "dataloader-pin-memory"
    summary = "DataLoader without pinned memory in code that copies to the GPU"
    fix = FixAvailability.SOMETIMES_SAFE
    fix_enables = ("TL204",)  # copies of a pinned loader's batches

    VALID = [
        Valid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds, pin_memory=True)
            model.cuda()
            """
        ),
        Valid(
            """
            import torch
            class Samples(torch.utils.data.Dataset):
                def __getitem__(self, i):
                    return self.x[i].to(self.device)
            loader = torch.utils.data.DataLoader(Samples())
            model.cuda()
            """
        ),
        Valid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds)
            """
        ),
        Valid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds, batch_size=64)
            model.cuda()
            """
        ),
        Valid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds, num_workers=0)
            model.cuda()
            """
        ),
        Valid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds, **kw)
            model.cuda()
            """
        ),
        Valid(
            """
            import torch
            class DataLoader: ...
            loader = DataLoader(ds)
            model.cuda()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            loader = torch.utils.data.DataLoader(ds, num_workers=4)
            model.cuda()
            """,
            expected_fix="""
            import torch
            loader = torch.utils.data.DataLoader(ds, num_workers=4, pin_memory=True)
            model.cuda()
            """,
        ),
        Invalid(
            """
            import torch
            x = torch.randn(64, 3)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), num_workers=4)
            model.cuda()
            """,
            expected_fix="""
            import torch
            x = torch.randn(64, 3)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), num_workers=4, pin_memory=True)
            model.cuda()
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, num_workers=args.workers, pin_memory=False)
            x.to('cuda')
            """,
            expected_fix="""
            from torch.utils.data import DataLoader
            loader = DataLoader(ds, num_workers=args.workers, pin_memory=True)
            x.to('cuda')
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="`DataLoader` copying batches to the device, without vs with `pin_memory=True`",
        before="""
            import torch

            device = torch.device(DEVICE)
            from torch.utils.data import DataLoader, TensorDataset

            dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
            loader = DataLoader(dataset, batch_size=128, num_workers=1, persistent_workers=True)


            def run():
                total = torch.zeros((), device=device)
                for x, y in loader:
                    x = x.to(device)
                    total += x.sum()
                return total
            """,
        after="""
            import torch

            device = torch.device(DEVICE)
            from torch.utils.data import DataLoader, TensorDataset

            dataset = TensorDataset(torch.randn(512, 1024), torch.randint(0, 10, (512,)))
            loader = DataLoader(dataset, batch_size=128, num_workers=1, persistent_workers=True, pin_memory=True)


            def run():
                total = torch.zeros((), device=device)
                for x, y in loader:
                    x = x.to(device)
                    total += x.sum()
                return total
            """,
        cpu_note="pinning needs CUDA: on a CPU the loader does not pin and both versions do the same work",
    )

    _MESSAGE = (
        "`DataLoader` without `pin_memory=True` in code that copies batches to the GPU: "
        "pinned host memory makes the copy faster and lets it overlap compute "
        "(`non_blocking=True`)"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        # Test files are skipped; so is a file that never says `DataLoader`.
        self._off = context.is_test_file or "DataLoader" not in context.source or demonstration(context)
        if self._off:
            self.walks = False
        # (call, its `pin_memory` argument if given, where it is, `num_workers`
        # as a `**kw` dict of the scope gives it, if so); names, classes and
        # collate functions are looked up afterwards (`Placement`,
        # rules/_loaders.py).
        self._candidates: List[tuple] = []
        self._moves = False

    def visit_Call(self, node: cst.Call) -> None:
        if self._off:
            return
        if self.context.qualname(node.func) in DATALOADERS:
            known, arg = argument(node, "pin_memory", 7)
            given = arg.value if arg is not None else None
            kwargs = None
            location = self.context.location()
            if not known:  # `**kw`: a dict built in this scope says (no fix: the keyword would be given twice)
                known, given = kwargs_keyword(node, "pin_memory", location, self.context)
                kwargs = kwargs_keyword(node, "num_workers", location, self.context)
            if not known or given is not None and literal_bool(given) is not False:
                return
            if loader_fetches_one_batch(node, self.context) or in_dataset_demo(self.context):
                return  # `next(iter(loader))`, a dataset module's `__main__` demo: nothing to overlap
            self._candidates.append((node, arg, location, kwargs))
            return
        if not self._moves and self._is_move(node):
            self._moves = True

    def visit_Arg(self, node: cst.Arg) -> None:
        if self._off or self._moves or node.keyword is None or node.keyword.value != "device":
            return
        if _accelerator(node.value, self.context):
            self._moves = True

    def _holds_no_data(self, expr: Optional[cst.BaseExpression], location, where, depth: int = 0) -> bool:
        """A dataset whose items hold no tensors worth pinning."""
        if expr is None or depth > 4:
            return False
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name):
            name = expr.func.value
            if name in ("range", "list") and name not in self.context.imports.defined:
                if name == "range":
                    return True
                args = positional(expr)
                return len(args) == 1 and self._holds_no_data(args[0].value, location, where, depth + 1)
            classes = [d.node for d in where.semantic.definitions(name) if isinstance(d.node, cst.ClassDef)]
            if bool(classes) and all(itemless_dataset(klass) for klass in classes):
                return True
            return self._hand_written(expr, location, where)
        if isinstance(expr, cst.Name):
            values = where.values_of(expr.value, location)
            return bool(values) and all(
                v is not None and self._holds_no_data(v, at, where, depth + 1) for v, at in values
            )
        return False

    def _hand_written(self, call: cst.Call, location, where) -> bool:
        """``ToyDataset(X_train, y_train)`` or ``TensorDataset(X, y)`` whose
        arguments are all names bound to tensors written out in the code
        (``X_train = torch.tensor([[-1.2, 3.1], [-0.9, 2.9]])``): a handful of
        numbers, copied in no time whether pinned or not."""
        args = positional(call)
        if not args or len(args) != len(call.args):
            return False
        for arg in args:
            if not isinstance(arg.value, cst.Name):
                return False
            values = where.values_of(arg.value.value, location)
            if not values or not all(v is not None and _written_out(v, self.context) for v, _ in values):
                return False
        return True

    def leave_Module(self, node: cst.Module) -> None:
        if self._off or not self._candidates or "torch_xla" in self.context.source:
            return
        for call, arg, location, kwargs in self._candidates:
            # A module that copies nothing: a loader that a function returns may
            # still be copied by its callers in other modules (the project index).
            factory = None if self._moves else returned_by(call, location, self.context)
            if not self._moves and factory is None:
                continue
            where = placement(self.context)
            if loads_in_main_process(call, kwargs, location, where):
                continue  # loads in the main process: TL203's finding; pinning buys nothing yet
            if _one_sample_batches(call):
                continue  # an evaluation loader of one sample per batch: a copy small next to the model run on it
            dataset = dataset_argument(call)
            if self._holds_no_data(dataset, location, where):
                continue
            # A dataset or collate function that visibly puts tensors on a
            # device: `Tensor.pin_memory()` would raise on the first batch.
            items, batch = where.loader(call, location)
            if DEVICE in (items, batch):
                continue
            if unpinnable_batches(call, self.context, location, where):
                continue  # a batch class of its own without `pin_memory()`: pinning leaves it alone
            if items != HOST and self._in_memory(dataset, location, where):
                # A `TensorDataset` of tensors the program computed where it
                # chose (`--features-device cuda`): pinning helps only if they
                # are on the host, and raises if they are not.
                continue
            copied = None
            if factory is not None:
                self.context.pending.add(trait_key(factory, LOADER))  # do callers copy its batches?
                copied = caller_trait(self.context, factory, COPIED)
                if copied is None:
                    continue
            safe = (
                arg is None
                and items == HOST
                and batch == HOST
                and keyword(call, "pin_memory_device") is None
            )
            self.report(
                call,
                self._MESSAGE if copied is None else f"{self._MESSAGE} (`{factory}` returns it to {copied}, which copies its batches)",
                fix=None if kwargs else Fix(
                    Applicability.SAFE if safe else Applicability.UNSAFE,
                    "Pass `pin_memory=True`",
                    lambda call=call, arg=arg: calls.set_keyword(call, "pin_memory", "True", arg),
                ),
            )

    def _in_memory(self, expr, location, where, depth: int = 0) -> bool:
        """Whether the dataset is a `TensorDataset` (or a subset of one): tensors
        already in memory, wherever the program put them."""
        if expr is None or depth > 4:
            return False
        if isinstance(expr, cst.Call):
            qualified = self.context.qualname(expr.func)
            if qualified in IN_MEMORY_DATASETS:
                return True
            if qualified in SUBSETS:
                first = positional(expr)
                inner = keyword(expr, "dataset") or (first[0] if first else None)
                return inner is not None and self._in_memory(inner.value, location, where, depth + 1)
            return False
        if isinstance(expr, cst.Name):
            values = where.values_of(expr.value, location)
            return bool(values) and all(v is not None and self._in_memory(v, at, where, depth + 1) for v, at in values)
        return False

    def _is_move(self, node: cst.Call) -> bool:
        name = method_name(node)
        if name == "cuda":
            return True
        if name != "to" or moves_to_device(node, self.context) is None:
            return False
        dev = keyword(node, "device")
        value = dev.value if dev is not None else positional(node)[0].value
        return not _names_unpinnable(value, self.context)


def _one_sample_batches(call: cst.Call) -> bool:
    """``DataLoader(ds, batch_size=1, shuffle=False)`` (``shuffle`` absent or
    not the literal ``True``): one sample per batch, in order."""
    size, shuffle = argument(call, "batch_size", 1)[1], argument(call, "shuffle", 2)[1]
    one = size is not None and isinstance(size.value, cst.Integer) and literal_number(size.value) == 1
    return one and (shuffle is None or literal_bool(shuffle.value) is not True)


def _names_unpinnable(expr: cst.BaseExpression, ctx) -> bool:
    return device_type(expr, ctx) in _NOT_PINNABLE


def _accelerator(expr: cst.BaseExpression, ctx) -> bool:
    return device_kind(expr, ctx) == "accelerator" and not _names_unpinnable(expr, ctx)
