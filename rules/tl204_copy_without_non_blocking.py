from __future__ import annotations

from typing import Optional

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._copies import CopyLoops, pinned_loaders_given
from torchlint.rules._helpers import has_star, keyword, method_name
from torchlint.rules._loaders import DEVICE, HOST, UNKNOWN, PinnedLoaders, is_dataloader, pinned_elsewhere, placement
from torchlint.rules._frequency import runs_once_by_path
from torchlint.rules._sync import empties_device_every_iteration, runs_one_iteration



class CopyWithoutNonBlocking(CopyLoops, Rule):
    """
    ## What it does
    Inside `for ... in <loader>`, where `<loader>` is a
    `torch.utils.data.DataLoader` built with `pin_memory=True` in the same
    module, reports a copy of the loop's data to a device with `.to(<device>)`,
    `.to(device=...)` or `.cuda(...)` that does not pass `non_blocking=True`.

    The loader may also come from another file of the run: a module-level
    function there (`build_loader()` of `data.py`) that returns a
    `DataLoader(..., pin_memory=True)`, called here (`loader =
    build_loader(...)`, `from data import build_loader` or `import data`).
    The project index asks the callers of such a function whether they
    iterate the loader and copy its batches, and tells this file that the
    loader is pinned; the finding names the file that builds it. A loader
    whose `pin_memory` is absent, `False` or not a literal there, a function
    of the same name in another module, or a run that passes only this file
    (pre-commit passes only the changed files) leaves the copy unreported.
    A `DataLoader(ds, **kw)` is pinned when `kw` is a dict of the same scope
    that sets `pin_memory=True` on every path (see TL202).

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
    traced to its `DataLoader(...)` call in the module or, as above, to a
    function of another file of the run (a function parameter filled by code
    elsewhere, an imported object). A whole batch from a loader built in
    another module (`batch.to(device)`) is not reported either, since its
    `collate_fn` is not seen here. A copy made in a helper function that the
    loop calls is not followed. Nor is a copy in a file that runs once or whose
    loops are a measurement (a test file, an export or conversion script, a
    benchmark or `measure_*.py` script, as in `docs/precision.md`). Nor is a
    loop that waits for the device every iteration by design, in a statement
    of its own (`torch.cuda.empty_cache()` or `torch.cuda.synchronize()`): the
    copy has no queued work to wait for. Nor is a loop whose body ends with an
    unconditional `break` (or `return`/`raise`): it copies one batch, once
    (a data-dependent initialisation, `for x, y in loader: model(x.cuda());
    break`).

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
        self._active = "DataLoader" in source and "pin_memory" in source or pinned_loaders_given(context)
        if runs_once_by_path(context.path):
            self._active = False  # a test, export or benchmark script: its loops run once or are the measurement
        if not self._active:
            self.walks = False

    # -- deciding ------------------------------------------------------------------
    def leave_Module(self, node: cst.Module) -> None:
        if not self._active:
            return
        pinned = PinnedLoaders(self.context)
        self._note_pinned_factories(node, pinned)
        reported = set()
        for loop in self._loops:
            if runs_one_iteration(loop.node) or empties_device_every_iteration(self.context, loop.node):
                continue  # `for x in loader: ...; break`: one batch, once; a loop that empties the cache
            found = pinned.pinned(loop.loader, loop.location)
            if not found:
                continue
            where = placement(self.context)
            loaders = [l for l, _ in found]
            # A loader built in another module (the project index): its dataset
            # and collate function are not seen here.
            elsewhere = [pinned_elsewhere(l, self.context) for l in loaders if not is_dataloader(l, self.context)]
            kinds = [where.loader(l, at) if is_dataloader(l, self.context) else (UNKNOWN, UNKNOWN) for l, at in found]
            if any(DEVICE in pair for pair in kinds):
                continue  # pinning a batch of device tensors raises before any copy
            host_batches = all(batch == HOST for _, batch in kinds)
            whole_batch_ok = not elsewhere and all(keyword(l, "collate_fn") is None and not has_star(l) for l in loaders)
            for call, arg, safe in self._copies(loop, whole_batch_ok):
                if id(call) in reported:
                    continue
                reported.add(id(call))
                safe = safe and self._destination(call, loop.location, host_batches)
                self._report(call, arg, safe, elsewhere[0] if elsewhere else None)

    def _report(self, call: cst.Call, arg: Optional[cst.Arg], safe: bool, built: Optional[str] = None) -> None:
        method = method_name(call)
        loader = "a `pin_memory=True` loader" if built is None else f"a `pin_memory=True` loader (built in {built})"
        self.report(
            call,
            f"`.{method}(...)` copies a batch from {loader} without "
            "`non_blocking=True`, so the host waits until the GPU has finished all queued "
            "work and the copy; pass `non_blocking=True` to let the copy overlap with compute",
            fix=Fix(
                Applicability.SAFE if safe else Applicability.UNSAFE,
                "Pass `non_blocking=True`",
                lambda: calls.set_keyword(call, "non_blocking", "True", arg),
            ),
        )
