from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import argument, literal_number
from torchlint.rules._loaders import (
    DATALOADERS,
    DEVICE,
    IN_MEMORY_DATASETS,
    ITERABLE_DATASETS,
    FILE_DATASETS,
    SUBSETS,
    attribute_bindings,
    dataset_argument,
    has_transform,
    kwargs_keyword,
    loads_in_main_process,
    subset_source,
    indexes_memory_only,
    placement,
)
from torchlint.semantic import Location
from torchlint.rules._one_batch import in_dataset_demo, loader_fetches_one_batch
from torchlint.rules._program import demonstration, runs_on_host_only

# A dataset named like an iterator (`train_iter`, `valid_iterator`): by
# convention an iterable-style dataset (torchtext, datapipes).
_ITERATOR_NAME = re.compile(r"(^|_)iter(ator)?($|_)", re.IGNORECASE)

_MAX_DEPTH = 6


class DataLoaderNumWorkers(Rule):
    """
    ## What it does
    Reports a `torch.utils.data.DataLoader(...)` whose `num_workers` is absent
    or the literal `0` (given by keyword, as the 6th positional argument, or
    through a `**kwargs` dict built in the same scope: `kw = dict(batch_size=64)`
    or `{"batch_size": 64}`, with its `kw.update(...)`/`kw["key"] = ...`
    read as TL202 and TL204 read them), when its dataset visibly does work
    for every item:
    - a `torchvision.datasets`/`torchaudio.datasets` dataset (they read and
      decode files), e.g. `ImageFolder(root, transform=tf)`;
    - any dataset built with a per-item `transform=`/`transforms=`/
      `target_transform=`;
    - an instance of a dataset class defined in the same file whose
      `__getitem__` does more than index data it already holds (it opens
      files, decodes, tokenizes, calls a transform);
    - a name or `self.attr` assigned only such datasets (in the same function,
      the module, or the same class), or a `random_split`/`Subset` of one.

    ## Why is this bad?
    With `num_workers=0` (the default) every batch is read, decoded, augmented
    and collated in the main process, between two training steps: the
    accelerator sits idle while the host prepares the next batch. With worker
    processes, batches are prepared in parallel and ahead of time
    (`prefetch_factor` batches per worker), so data loading overlaps with
    compute. The PyTorch Performance Tuning Guide recommends
    `num_workers > 0` for asynchronous data loading.

    There is no single right value: start from the number of CPU cores per GPU
    (`os.cpu_count() // torch.cuda.device_count()`), measure the time per step,
    and lower it if the host runs out of memory or cores. Add
    `persistent_workers=True` so workers are not restarted every epoch.

    ## Example
    ```python
    train_set = ImageFolder("data/train", transform=augment)
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    ```

    ## Use instead
    ```python
    train_set = ImageFolder("data/train", transform=augment)
    loader = DataLoader(
        train_set, batch_size=64, shuffle=True,
        num_workers=8, persistent_workers=True,  # measured on this machine
    )
    ```

    ## Fix safety
    There is no fix: the right number of workers depends on the machine (CPU
    cores, host memory, GPUs per host) and on the dataset, and worker processes
    change behaviour that code may rely on (each worker has its own copy of the
    dataset object and its own random state; a `torch.utils.data.IterableDataset`
    must shard itself with `torch.utils.data.get_worker_info()` or every worker
    yields the whole dataset; where processes are spawned rather than forked,
    as on macOS and Windows, the dataset must be picklable and a dataset class
    defined in a notebook must move to an importable module).

    Not reported, because workers would not help or the rule cannot tell:
    - any loader of a CPU-only program (a notebook, or a script with an `if
      __name__ == "__main__":` block or a top-level loop, that builds its own
      model or data, such as `nn.Linear(...)`, a class of `nn.Module`,
      parameters with `requires_grad=True`, a `DataLoader(...)` or a
      `datasets.MNIST(...)`, and never names an accelerator: no `cuda`,
      `device`, `gpu`, `mps`, `xla`, `.to(...)`, `distributed`, and no framework
      that moves batches for it, such as Lightning, Accelerate, Fabric,
      DeepSpeed, Ignite or a `Trainer`):
      no accelerator waits for its batches, and workers would compete with
      the training for the same cores;
    - a dataset whose items cost nothing to produce: a `TensorDataset`, or a
      class of this file whose `__getitem__` only indexes what it holds
      (`return self.x[i], self.y[i]`, with at most conversions such as
      `torch.tensor(...)` or `.float()`, a random start to slice from, `start
      = torch.randint(0, n, (1,)).item()` then `return self.data[start:start +
      n].long()`, possibly gathered in a local dict:
      `item = {}; item["prompt"] = self.prompt; return item`), or is still a
      template to fill in (`pass`); workers only add inter-process copies;
    - a dataset the rule cannot see: a function parameter, a class imported
      from another module without a `transform=`, anything computed (this is
      the rule's main trade-off: it reports only what it can show is slow);
    - an iterable-style dataset (a class of this file deriving from
      `IterableDataset`, or a name like `train_iter`), where workers duplicate
      the data unless it shards itself;
    - a dataset or `collate_fn` that visibly puts tensors on a device: a
      dataset class of this file whose code calls `.cuda()`, `.to(<device>)`
      or creates tensors with a non-CPU `device=` (in `__getitem__`, an
      `IterableDataset`'s `__iter__`, `__init__` or a helper), a torchvision
      dataset whose transform moves to a device, or a `collate_fn` that takes
      a device (`partial(collate, device=device)`, a function of this file
      with a `device` parameter) or moves the batch: worker processes cannot
      make CUDA tensors (with the default `fork` start method CUDA cannot be
      re-initialised in a worker). This is the same question TL202 asks
      before adding `pin_memory=True`, answered by the same code;
    - a loader only used to fetch a batch or two outside any loop:
      `next(iter(DataLoader(...)))`, `loader = DataLoader(...)` then
      `next(iter(loader))`, or `it = iter(loader)` then `next(it)` /
      `it.next()` (a grid of sample images), or one batch every N steps
      (`next(test_iter)` under `if step % 100 == 0:`): starting workers costs
      more than it saves; a loader that is also iterated, passed on, or read
      with `next(it)` every iteration of a loop is still reported;
    - a loader that a function (or a notebook's cell) binds to a name and
      never uses again;
    - a module that tells a trainer to run at most 20 batches or steps, as a
      literal (Composer's `train_subset_num_batches=5`, Lightning's
      `limit_train_batches=10` or `fast_dev_run=True`): a
      demonstration of an API, where starting workers costs about what they
      save;
    - a module that makes its data with scikit-learn's synthetic generators
      or loads one of its toy datasets (`make_regression(2000)`,
      `make_moons(...)`, `load_iris()`; not 100,000 samples or more by a
      literal): a demonstration whose whole run takes seconds;
    - a loader built in the `if __name__ == "__main__":` block of a dataset
      module (it defines a `__getitem__` and trains nothing), a block that
      moves nothing to a device: the module's demo, which prints a few
      shapes or plots a few samples, once, by hand;
    - a `num_workers` given as a variable or expression (`num_workers=args.workers`),
      unless it is a name every binding of which is the literal 0
      (`num_workers = 0` ... `DataLoader(ds, num_workers=num_workers)`: reported),
      or a call with `*args`, or a `**kwargs` the rule cannot read (a
      parameter, a dict from a call, one updated under a condition or passed
      elsewhere, one holding a `collate_fn`), any of which may set it;
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, `tests/`): tests load
      tiny datasets and keep `num_workers=0` on purpose (fast start-up,
      determinism, no subprocesses in the test runner);
    - a class of your own named `DataLoader`, or another library's.

    ## References
    - PyTorch Performance Tuning Guide, "Enable asynchronous data loading and augmentation"
    - Hugging Face single-GPU training guide, "Data preloading"
    - `torch.utils.data` documentation, "Single- and Multi-process Data Loading"
    """

    code = "TL203"
    name = "dataloader-num-workers"
    summary = "DataLoader prepares batches in the main process (`num_workers` absent or 0)"
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            from torch.utils.data import DataLoader
            from torchvision.datasets import MNIST
            loader = DataLoader(MNIST('data', transform=tf), num_workers=4)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            from torchvision.datasets import MNIST
            loader = DataLoader(MNIST('data', transform=tf), num_workers=args.workers)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader
            from torchvision.datasets import MNIST
            loader = DataLoader(MNIST('data', transform=tf), **loader_kwargs)
            """
        ),
        Valid(
            """
            from torch.utils.data import DataLoader, TensorDataset
            loader = DataLoader(TensorDataset(x, y), batch_size=32)
            """
        ),
        Valid(
            """
            import torch
            from torchvision.datasets import MNIST
            class DataLoader: ...
            loader = DataLoader(MNIST('data', transform=tf))
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            from torch.utils.data import DataLoader
            from torchvision import datasets
            train_set = datasets.ImageFolder('data/train', transform=augment)
            loader = DataLoader(train_set, batch_size=32, shuffle=True)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(Images(paths, transform=tf), batch_size=32, num_workers=0)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            from torchvision.datasets import MNIST
            loader_args = dict(batch_size=64, shuffle=True)
            loader = DataLoader(MNIST('data', transform=tf), **loader_args)
            """,
        ),
        Invalid(
            """
            from torch.utils.data import DataLoader
            loader = DataLoader(Images(paths, transform=tf), 32, True, None, None, 0)
            """,
        ),
    ]

    _ADVICE = (
        "so the accelerator waits while each batch is prepared; set `num_workers` "
        "(start from the CPU cores per GPU, `os.cpu_count() // num_gpus`, and measure)"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        # A file that never says `DataLoader` cannot call it; tests are skipped.
        self._active = not context.is_test_file and "DataLoader" in context.source and not runs_on_host_only(
            context) and not demonstration(context)
        if not self._active:
            self.walks = False
        # (call, where it is, how `num_workers` is given: "keyword", "dict" or None)
        self._candidates: List[Tuple[cst.Call, Location, Optional[str]]] = []
        self._kinds: Dict[int, Optional[str]] = {}  # id(class) -> "memory" / "iterable" / "work" / None

    # -- collecting ------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        if not self._active:
            return
        ctx = self.context
        if ctx.qualname(node.func) not in DATALOADERS:
            return
        known, arg = argument(node, "num_workers", 5)
        location = ctx.location()
        given = "keyword" if arg is not None else None
        workers = arg.value if arg is not None else None
        if not known and any(a.star == "**" for a in node.args):
            # `**kw`: a dict built in this scope says (see `kwargs_dict`)
            known, workers = kwargs_keyword(node, "num_workers", location, ctx)
            given = "dict" if workers is not None else None
        if known and isinstance(workers, cst.Name) and given == "keyword":
            given = "variable"  # `num_workers=num_workers`: decided at the end, from its bindings
        elif not known or workers is not None and literal_number(workers) != 0:
            return
        if self._one_batch(node) or loader_fetches_one_batch(node, ctx) or in_dataset_demo(ctx):
            return  # (a dataset module's `__main__` demo loads a few samples to look at, once)
        self._candidates.append((node, location, given))

    def _one_batch(self, node: cst.Call) -> bool:
        """`next(iter(DataLoader(...)))`: one batch, where starting workers costs
        more than it saves."""
        stack = self.context.stack
        if len(stack) < 5:
            return False
        arg, inner, outer_arg, outer = stack[-2], stack[-3], stack[-4], stack[-5]
        return (
            isinstance(arg, cst.Arg)
            and isinstance(inner, cst.Call)
            and isinstance(inner.func, cst.Name)
            and inner.func.value == "iter"
            and isinstance(outer_arg, cst.Arg)
            and isinstance(outer, cst.Call)
            and isinstance(outer.func, cst.Name)
            and outer.func.value == "next"
        )

    # -- deciding ----------------------------------------------------------------
    def leave_Module(self, node: cst.Module) -> None:
        if not self._candidates:
            return
        where = placement(self.context)
        for call, location, given in self._candidates:
            if given == "variable" and not loads_in_main_process(call, None, location, where):
                continue  # a variable that may hold a worker count
            if not self._works_per_item(dataset_argument(call), location, 0):
                continue
            # Items or batches put on a device (the same question TL202 asks):
            # worker processes cannot make CUDA tensors.
            if DEVICE in where.loader(call, location):
                continue
            what = {
                "keyword": "`DataLoader(num_workers=0)`",
                "dict": "`DataLoader(**kwargs)` whose dict sets `num_workers=0`",
                "variable": "`DataLoader(num_workers=...)` with a worker count set to 0",
                None: "`DataLoader` without `num_workers`",
            }[given]
            self.report(call, f"{what} loads every batch in the main process, {self._ADVICE}")

    def _class_kind(self, klass: cst.ClassDef) -> Optional[str]:
        """"iterable" for a subclass of `IterableDataset`, else "memory" or
        "work" by what its `__getitem__` does (None without one)."""
        if id(klass) not in self._kinds:
            kind: Optional[str] = None
            if any(self.context.qualname(base.value) in ITERABLE_DATASETS for base in klass.bases):
                kind = "iterable"
            elif isinstance(klass.body, cst.IndentedBlock):
                for stmt in klass.body.body:
                    if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__getitem__":
                        kind = "memory" if indexes_memory_only(stmt, self.context) else "work"
            self._kinds[id(klass)] = kind
        return self._kinds[id(klass)]

    def _works_per_item(self, expr: Optional[cst.BaseExpression], location: Location, depth: int) -> bool:
        """Whether producing an item of the dataset visibly costs work: reading
        or decoding files, or a per-item transform."""
        if expr is None or depth > _MAX_DEPTH:
            return False
        ctx = self.context
        if isinstance(expr, cst.Call):
            qualified = ctx.qualname(expr.func)
            if qualified in SUBSETS:
                return self._works_per_item(subset_source(expr), location, depth + 1)
            if qualified is not None:
                if qualified in IN_MEMORY_DATASETS or qualified in ITERABLE_DATASETS:
                    return False
                if qualified.startswith(FILE_DATASETS):
                    return True
            elif isinstance(expr.func, cst.Name):
                klass = placement(ctx).defined(expr.func.value, location, "class")
                kind = self._class_kind(klass.value) if klass is not None else None
                if kind is not None:
                    return kind == "work"
            return has_transform(expr)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            name = expr.value if isinstance(expr, cst.Name) else expr.attr.value
            if _ITERATOR_NAME.search(name):
                return False
        semantic = ctx.semantic
        if isinstance(expr, cst.Name):
            bindings = semantic.bindings(expr.value, location)
        else:
            bindings = attribute_bindings(expr, location, semantic)
        # Every binding must be an assignment of such a dataset (a parameter,
        # a loop variable or an import may be anything).
        if not bindings or any(b.kind not in ("value", "part") for b in bindings):
            return False
        for b in bindings:
            if b.kind == "part":
                ok = (
                    isinstance(b.value, cst.Call)
                    and ctx.qualname(b.value.func) in SUBSETS
                    and self._works_per_item(subset_source(b.value), b.location, depth + 1)
                )
            else:
                ok = self._works_per_item(b.value, b.location, depth + 1)
            if not ok:
                return False
        return True
