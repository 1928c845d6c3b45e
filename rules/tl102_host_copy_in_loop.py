from __future__ import annotations

from typing import Dict, Optional, Set

import libcst as cst

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Rule, Valid
from torchlint.rules._helpers import device_kind, has_star, keyword, literal_bool, method_name, positional, receiver
from torchlint.rules._device import host_values
from torchlint.rules._frequency import per_step_here
from torchlint.rules._models import module_method_follows, names_a_module
from torchlint.rules._program import fits_gaussian_processes, runs_on_host_only, trains_on_toy_data
from torchlint.rules._training import collects_metric_results
from torchlint.rules._sync import (
    LoopFacts,
    appended_to_offloaded_state,
    chain_top,
    converts_any_value,
    copies_weights,
    expression_statement,
    feeds_host_api,
    feeds_host_sink,
    feeds_model_runtime,
    gathered_for_concatenation,
    gathered_once,
    host_arithmetic,
    host_branch_of_device_switch,
    host_consumer,
    in_data_pipeline,
    in_timing_loop,
    in_training_code,
    is_constant_display,
    iterates_chunks,
    iterates_mapping,
    iterates_modules,
    loop_clauses,
    loop_facts,
    normalises_to_host,
    offloaded_and_restored,
    reading_loops,
    runs_once,
    runs_once_per_pass,
    serialised,
    stored_in_host_buffer,
    waits_every_iteration,
    waits_at_copy_anyway,
)


class HostCopyInLoop(Rule):
    """
    ## What it does
    Reports a copy of a tensor to host memory in a loop: `<tensor>.cpu()`,
    `<tensor>.to("cpu")` (or `.to(device="cpu")`, `.to(torch.device("cpu"))`)
    and `<tensor>.numpy(force=True)`, in the body of a `for`/`while` statement
    or of a comprehension, in the same function, and not under a periodic guard
    such as `if step % log_every == 0:`. A chain is reported once, at its
    outermost call: `out.detach().cpu().numpy()` is one diagnostic, and so is
    `loss.cpu().item()` (TL101 leaves chains that copy to the host first to
    this rule, so the two rules never report the same chain).

    Outside training (a loop that runs no backward or optimizer step, in a
    function that runs none and is not named like a training step, or a loop
    that runs none inside a `with torch.no_grad():` block or with one in its
    body, such as a validation pass in the function that trains, and a loop
    over one such pass's batch items), only the
    copies that the device could spare are reported: results appended to a
    list that the function later joins with `torch.cat`/`torch.stack` (the
    rule's example: one copy after the loop does the same; not in a loop over
    the pieces of one tensor, `for part in embs.split(1 << 18):`, which cuts
    the work to bound device memory and moves each piece's results out on
    purpose), a copy that is an
    operand of a comparison or arithmetic (`(pred.cpu().numpy() ==
    y.cpu().numpy()).sum()`: a metric the device computes as well; not a
    threshold against a number, `probs.cpu().numpy() > 0.5`, nor a scaling
    to a pixel or sample range in a function that casts to `uint8`/`int16`,
    `img.cpu().numpy() * 255` ... `.astype(np.uint8)`), and a
    chain that ends in `.item()` (`loss.cpu().item()`), as TL101
    reports a bare `.item()` (one that ends in `.tolist()`,
    `scores.cpu().tolist()` for a results file, hands a batch's results to
    host code, as TL101 leaves a bare `.tolist()` there; found on YOLOS's
    COCO JSON export). Other host copies in evaluation and inference
    code are handed to host code (a NumPy or SciPy function, a file, a
    drawing, a tokenizer, an evaluation API) and are the point there.

    Nothing is reported in a CPU-only program (a notebook, or a script with an `if
    __name__ == "__main__":` block or a top-level loop, that builds its own
    model or data, such as `nn.Linear(...)`, a class of `nn.Module`,
    parameters with `requires_grad=True`, a `DataLoader(...)` or a
    `datasets.MNIST(...)`, and never names an accelerator: no `cuda`,
    `device`, `gpu`, `mps`, `xla`, `.to(...)`, `distributed`, and no framework
    that moves batches for it, such as Lightning, Accelerate, Fabric,
    DeepSpeed, Ignite or a `Trainer`; a host default tensor type,
    `torch.set_default_tensor_type(torch.DoubleTensor)`, names none): `.cpu()` copies nothing there.
    Nor in a module that fits Gaussian processes (it imports `gpytorch`,
    `botorch` or `linear_operator`): every call of such a model waits for the
    device inside (a Cholesky factorization's error check, a conjugate-gradient
    solve's convergence test, the variational strategies' own reads), so one
    more read per iteration adds no wait. Nor in a module that makes its data
    with scikit-learn's synthetic generators or loads one of its toy datasets
    (`make_regression(2000)`, `make_moons(...)`, `load_iris()`; not one that
    asks for 100,000 samples or more by a literal): a demonstration whose
    whole run takes seconds.

    Not reported (where the copy is not a per-step cost, or is the work itself):
    - a copy in a loop that waits for the device every iteration anyway, to
      time it (it calls `torch.cuda.synchronize()` unconditionally and reads a
      clock or a timer: `time.time()`, `meter.iter_toc()`,
      `time_synchronized()`), including a comprehension inside such a loop;
    - `x = x.cpu()` (or `xs[i] = xs[i].cpu()`) under an `if` that asks about
      the device (`if cfg.NUM_GPUS:`, `if x.is_cuda:`, `if x.device !=
      torch.device("cpu"):`): the values are brought to the host only when
      they live elsewhere, because host code follows (a meter, an evaluator,
      a drawing); keeping them on the device would mean rewriting that code;
    - a comprehension that only copies the items of a list (`[t.cpu() for t
      in outputs]`) in a function not known to run every step: it queues no
      device work between copies, so only the first one waits, once where the
      comprehension runs (in a function that runs every step, such as
      `training_step` or one the training loop calls, it is reported);
    - a copy appended to a list in a loop that offloads its state to the
      host: it also moves an item of that list back to the device
      (`xs.append(x_next.to("cpu"))` ... `xt = xs[-1].to("cuda")`, a sampler
      keeping a long trajectory in host memory); keeping the copies on the
      device would hold every step's state in device memory;
    - a copy appended to a list whose items the function moves back to the
      device later (`feats.append(f.cpu())` ... `feats = torch.cat(feats)` ...
      `feats[i].to(device)`): every image's features for a retrieval
      re-ranking, parked in host memory because all of them would not fit on
      the device;
    - code in benchmark scripts (`bench.py`, `benchmark_*.py`, `*_bench.py`,
      a `benchmarks/` directory), as in tests and export scripts: their loops
      are the measurement;
    - a plain `<tensor>.numpy()`: it only works on a tensor that is already in
      host memory (it raises for a CUDA tensor), where it returns a view that
      shares the tensor's storage, without a copy or a wait; after `.cpu()` it
      is part of the chain's one report;
    - `.to("cpu", non_blocking=True)`: an asynchronous copy into pinned memory,
      the recommended way to move results without waiting;
    - moving a module rather than data: a `.cpu()`/`.to("cpu")` whose result is
      discarded (`model.cpu()` as a statement: only `nn.Module.cpu()` works in
      place), whose receiver is named like a module (`model`, `self.ema_model`,
      `net`, `backbone`, `text_encoder`, `pipeline`, ...; `model_output` is
      data) or is the variable of a loop over modules (`for m in models:`), or
      whose chain goes on with a module method (`m.cpu().state_dict()`);
    - copying weights: in a loop over parameters, buffers, gradients or a state
      dict (its iterable or variables mention `param`, `state_dict`, `weight`,
      `buffer`, `grad`, `ckpt` or `checkpoint`), a copy given to a parameter
      constructor (`nn.Parameter(...)`, `bnb.nn.Int8Params(w.to("cpu"))`), or
      any copy in a function whose name mentions `state_dict`, `checkpoint` or
      `ckpt`, or that saves, exports, sets up or asserts (`save_*`, `*_save*`,
      `export*`, `__init__`, `init*`, `*_init`, `assert*`), or that draws or
      converts for a host evaluation API (a name with the word `vis`,
      `visualize*`, `plot*`, `draw*`, `coco`, `voc` or `lvis`:
      `visualize_assign_result`, `convert_to_coco_format`): saving, sending,
      comparing or building weights on the host needs the copies, and set-up
      runs once;
    - a copy the next consumer needs on the host every step: an environment
      step (`env.step(action.cpu().numpy())`, or `actions = ....cpu().numpy()`
      handed to `envs.step(actions)` later in the loop), bytes to pickle, store
      or send (`t.cpu().numpy().tobytes()`, `memoryview(img.cpu().numpy())`), and any copy in a module that runs models
      with ONNX Runtime, TensorRT, Triton or OpenVINO;
    - a copy that is the point: written, drawn, decoded or tabulated on the
      host (`Image.fromarray(x.cpu().numpy()).save(path)`, through a name
      handed to such a call later in the loop, or text built from it and
      written: `text = ", ".join(...)` then `f.write(text)`; the items of a
      loop over the copy handed to such a call: `for p, f in zip(pred,
      frames): out.write(...)`), turned into labels by a comprehension over it
      (`[label2ans[i] for i in scores.argmax(-1).cpu().tolist()]`, `['True' if
      i == 1 else 'False' for i in ...]`), or gathered into a list that
      the function writes out after the loop (`all_images.extend(...)` then
      `np.savez(path, np.concatenate(all_images))`; a console write such as
      `sys.stdout.write(...)` is a log line like `print` and does not count),
      and conversions in a
      module built around `pycocotools`, LVIS or the panoptic API, or around
      ASE, whose calculators' `results` and `Atoms` hold NumPy arrays
      (imported at its top level);
    - a loop whose iteration is a whole pass of work: over epochs
      (`for epoch in ...`, unless the loop itself calls `.backward()`:
      full-batch training), over a streaming generator
      (`for token in generate_text_stream(...)`), a loop that runs a text
      generation every iteration (`model.generate(...)`), or an interactive
      loop (`input()`, `cv2.waitKey(0)`);
    - a loop over a mapping's entries (`for k, v in metrics.items()`) or over a
      display of constants (`for c in "RGB"`): the loop around it, if any,
      decides;
    - a conversion under `isinstance(v, torch.Tensor)` in a loop that runs no
      training step (loggers, input normalisation);
    - code in a `torch.utils.data` `Dataset` or `Sampler` subclass, a
      collate function or collator class, a module-level function that only
      such classes of the module use, or a module under a
      `dataset`/`datasets`/`transforms` directory that never names a device;
    - code that runs once or once per epoch, or in a function whose callers the
      run does not show (see "How often code runs" in `docs/precision.md`;
      callers in other modules of the run count, through the project index),
      and code under a debug switch (`if args.debug_mode:`);
    - a copy that runs at most once per loop or a fixed number of times: in a
      `return` or `raise`, in a block that ends with `break`/`return`/`raise`
      or `sys.exit(...)`, under `if i == 0:` on the loop counter
      (`for i in range(...)`, `for i, x in enumerate(...)`), under a cap
      (`if shown < 3:` incrementing `shown`), or under a counter reset
      (`if seen == k:` ... `seen = 0`);
    - a loop that waits for the device every iteration anyway, in its own
      body and not under a condition, through an operation whose result size
      or control flow depends on device values (`idx = mask.nonzero()`,
      `torch.unique(labels)`, `labels[labels != ignore]`, `if (x > 0).any():`,
      `if token != blank:` on `token = probs.argmax(dim=-1)`,
      `assert torch.isfinite(loss).all()`, `if loss == 0 or not
      torch.isfinite(loss): continue`, `if torch.abs(loss) > 30:`, `if torch.sum(w) == 0:`, indexing
      with a mask named so: `rewards[done]`, `x[~mask]`, a TensorDict's
      `td["next", "done"]`; Pyro's `svi.step(x)` and ELBO losses, which
      test the loss on the host; a loop over an RL data collector, `for
      data in collector:`, whose batches come from stepping host
      environments): one more wait there adds little;
    - a loop that hands a host copy of device values to host code every
      iteration and needs the answer: an environment step on the policy's
      actions, a scikit-learn function (`f1_score(gt, pred)` on each batch's
      copies: the copies are its input), or a call given a host copy whose result the body turns back
      into a tensor (`out, _ = host_model.forecast(inputs=x.cpu().numpy().tolist())`
      ... `torch.Tensor(out).to(device)`: a model that runs on the host);
      also in the loops inside such a loop (a per-episode report inside the
      rollout loop);
    - a copy of a value already in host memory (a part of a loader's batch
      that was never moved, a NumPy value; see TL101 for the full list): it
      copies nothing and waits for nothing;
    - a copy written into a tensor or array allocated in host memory
      (`aux_pi = torch.zeros(shape)` ... `aux_pi[:, idx] = logits.cpu()`, or
      through a name the body writes there): the program keeps those results
      on the host on purpose, to bound device memory;
    - a timing loop, which already waits for the device every iteration on
      purpose: its own body calls `torch.cuda.synchronize()` (or
      `torch.accelerator`/`xpu`/`mps` `synchronize()`) outside any condition
      and reads a clock (`time.time()`, `perf_counter()`, or iterates
      `metric_logger.log_every(...)`, which times each iteration); one more wait
      there costs nothing (a sync without a clock is TL103's finding, and
      the reads after it are reported: they become the wait once it goes);
    - a copy in the branch a device switch takes to keep data on the host
      (the `else` of `if args.use_cuda:` or of `if use_torch:`, the body of
      `if not use_gpu:`): a feature bank too large for the GPU, or a NumPy
      computation the user chose, is kept on the host on purpose;
    - a comprehension that is not inside a loop statement and copies one
      concatenated tensor per element (`[torch.cat(v).cpu() for v in zip(*results)]`):
      that is already the copy-once form;
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, under `tests/`):
      tests copy results to compare them;
    - a copy in the `for` statement's iterable, which runs once;
    - a copy in an inference loop that times each prediction: a clock is
      started in the iteration before it (`start = timer()`) and read after
      it (`end = timer()`); the copy is the wait that makes the timing honest
      (the meters of a training loop, `data_time.update(time.time() - end)`,
      start no clock there).

    ## Why is this bad?
    CUDA kernels run asynchronously: the host queues work and moves on while the
    device computes. A copy to ordinary host memory has to wait until the device
    has finished *all* the work queued before it, so the host stops every
    iteration, and the device then sits idle while the host prepares the next
    step. The PyTorch Performance Tuning Guide lists `tensor.cpu()` among the
    unnecessary CPU-GPU synchronizations to avoid; the copies themselves are
    also many small transfers instead of one large one.

    Not reported at the end of an iteration that starts with a blocking copy
    of the loader's batch to the device (`x = x.to(device)` without
    `non_blocking=True`, before any other work) when nothing after the copy
    to the host queues a model's or a training step's work: that copy waits
    for the queued work too (it ends with `cudaStreamSynchronize`), so the
    host copy adds no wait of its own (see TL101).

    ## Example
    ```python
    predictions = []
    for x, _ in loader:
        logits = model(x.to(device))
        predictions.append(logits.argmax(-1).cpu())
    predictions = torch.cat(predictions)
    ```

    ## Use instead
    ```python
    predictions = []
    for x, _ in loader:
        logits = model(x.to(device))
        predictions.append(logits.argmax(-1))  # stays on the device
    predictions = torch.cat(predictions).cpu()  # one copy, one wait
    ```
    If the results do not fit on the device, copy every N steps, or copy
    asynchronously into pinned memory (`.to("cpu", non_blocking=True)` into a
    pinned buffer, synchronizing once before the values are read).

    ## Fix safety
    There is no fix: where the results should live, and when it is safe to read
    them on the host, depends on the program.

    ## References
    - PyTorch Performance Tuning Guide, "Avoid unnecessary CPU-GPU synchronization"
    - PyTorch documentation, "CUDA semantics", section "Asynchronous execution"
    - `torch.Tensor.cpu` and `torch.Tensor.numpy` documentation
    """

    code = "TL102"
    name = "host-copy-in-loop"
    summary = "`.cpu()`/`.numpy(force=True)` in a loop copies to the host and waits every iteration"
    fix = FixAvailability.NONE
    needs = ("cpu", "force")

    VALID = [
        Valid(
            """
            import torch
            for x, idx in loader:
                feats = model(x.cuda())
                if args.use_cuda:
                    bank.index_copy_(0, idx.cuda(), feats)
                else:
                    bank.index_copy_(0, idx, feats.cpu())
            """
        ),
        Valid(
            """
            import time
            import torch
            for x, y in loader:
                loss = model(x.cuda()).sum()
                loss.backward()
                optimizer.step()
                torch.cuda.synchronize()
                batch_time = time.perf_counter() - end
                losses.append(loss.detach().cpu())
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                preds.append(model(x))
            all_preds = torch.cat(preds).cpu()
            """
        ),
        Valid(
            """
            import torch
            for step, x in enumerate(loader):
                out = model(x)
                if step % 100 == 0:
                    log(out.cpu())
            """
        ),
        Valid(
            """
            import torch
            for image in images:
                array = image.numpy()
            """
        ),
        Valid(
            """
            import torch
            for model in ensemble:
                model.cpu()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x in loader:
                preds.append(model(x).argmax(-1).cpu())
            all_preds = torch.cat(preds)
            """,
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                out = model(x)
                loss_fn(out, y).backward()
                optimizer.step()
                probs = out.softmax(-1).detach().cpu().numpy()
            """,
        ),
        Invalid(
            """
            import torch
            def training_step(outputs):
                arrays = [t.cpu().numpy() for t in outputs]
            """,
        ),
    ]

    _MESSAGE = (
        "{what} in a loop copies to host memory and waits for all queued device work, "
        "every iteration; keep the results on the device and copy once after the loop "
        "(e.g. `torch.cat(results).cpu()`), or copy every N steps"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._reported: Set[int] = set()
        self._facts: Dict[int, LoopFacts] = {}
        self._offloads: Dict[int, bool] = {}
        self._joined: Dict[int, Set[str]] = {}
        # A module that runs models outside PyTorch hands them host arrays.
        self._feeds_runtime = feeds_model_runtime(context.source)
        if runs_on_host_only(context) or fits_gaussian_processes(context) or trains_on_toy_data(context):
            self.walks = False  # a CPU-only program (`.cpu()` copies nothing), or Gaussian processes (they wait inside)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.context
        if ctx.is_test_file or self._feeds_runtime:
            return
        what = self._host_copy(node)
        if what is None:
            return
        loop = self._step_loop()
        if loop is None or runs_once(ctx, loop) or runs_once_per_pass(ctx, loop, self._facts):
            return
        facts = loop_facts(ctx, loop, self._facts)
        if in_timing_loop(ctx, loop, self._facts):
            return  # a timing loop: it waits for the device every iteration anyway, to time it
        if facts.exits_on_value or waits_every_iteration(ctx, loop, self._facts) or waits_at_copy_anyway(ctx, loop):
            return  # the loop waits for the device anyway
        recv = receiver(node)
        assert recv is not None
        if names_a_module(recv) or iterates_modules(ctx, recv):
            return
        if expression_statement(ctx) is not None and what != "`.numpy(force=True)`":
            return  # `model.cpu()` as a statement: moves a module in place
        top, index = chain_top(ctx)
        if id(top) in self._reported:
            return
        if (method_name(top) != "item" and not in_training_code(ctx, self._facts) and not host_arithmetic(ctx, index)
                and (iterates_chunks(loop) or not gathered_for_concatenation(ctx, index, self._joined))):
            return  # evaluation or inference: host copies feed host code (metrics, files, drawing), or pieces of a tensor
        if module_method_follows(ctx.stack, index):
            return  # `m.cpu().parameters()`: `m` is a module
        if copies_weights(ctx) or gathered_once(ctx, loop, recv):
            return
        if in_data_pipeline(ctx) or converts_any_value(ctx, loop, self._facts) or host_consumer(ctx, index):
            return
        if appended_to_offloaded_state(ctx, index, loop, self._offloads):
            return  # a sampler that keeps its trajectory on the host to bound device memory
        if feeds_host_sink(ctx, index, loop, gathered=True) or feeds_host_api(ctx) or collects_metric_results(ctx):
            return  # copied to be written, drawn or decoded on the host, or kept by a metric: the copy is the point
        if offloaded_and_restored(ctx, index):
            return  # parked in host memory and moved back piece by piece: it spares device memory
        if stored_in_host_buffer(ctx, index, loop, host_values(ctx).is_host):
            return  # `aux_pi[:, idx] = logits.cpu()`: results kept in a host buffer on purpose
        if serialised(ctx, index):
            return  # `t.cpu().numpy().tobytes()`: bytes for pickling or storage
        if normalises_to_host(ctx, index):
            return  # `if cfg.NUM_GPUS: preds = preds.cpu()`: host code follows
        if host_branch_of_device_switch(ctx, loop):
            return  # `if args.use_cuda: ... else: x.cpu()`: the host is the user's choice
        if host_values(ctx).is_host(recv, ctx.location()):
            return  # already in host memory (a batch part the loader yields): nothing to copy or wait for
        frequency = per_step_here(ctx, reading_loops(ctx))
        if frequency is None:
            return  # a loop in code that runs once or once per epoch (or whose callers are not seen)
        self._reported.add(id(top))
        self.report(top, self._MESSAGE.format(what=what), frequency=frequency)

    def _step_loop(self) -> Optional[cst.CSTNode]:
        """The innermost enclosing loop that is not a walk over a mapping's
        entries (``for k, v in metrics.items()``) or over a display of
        constants (``for c in "RGB"``): those go over a few named values, so the
        question is asked of the loop around them."""
        for loop in self.context.enclosing_loops():
            clauses = loop_clauses(loop)
            if not clauses or not all(iterates_mapping(c.iter) or is_constant_display(c.iter) for c in clauses):
                return loop
        return None

    def _host_copy(self, node: cst.Call) -> Optional[str]:
        """What kind of host copy the call is, or None."""
        name = method_name(node)
        if name == "cpu":
            return "`.cpu()`"
        if name == "numpy":
            arg = keyword(node, "force")
            if arg is not None and literal_bool(arg.value) is True:
                return "`.numpy(force=True)`"
            return None
        if name == "to":
            if has_star(node):
                return None
            args = positional(node)
            non_blocking = keyword(node, "non_blocking")
            if len(args) >= 3 or (non_blocking is not None and literal_bool(non_blocking.value) is not False):
                return None  # an asynchronous copy (into pinned memory): no wait
            target = keyword(node, "device")
            if target is None:
                target = args[0] if args else None
            if target is not None and device_kind(target.value, self.context) == "cpu":
                return '`.to("cpu")`'
        return None

