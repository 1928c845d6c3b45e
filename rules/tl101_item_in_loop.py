from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from torchlint.codemods import calls
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._accumulation import number_initialised_before, read_elsewhere_in_loop
from torchlint.rules._helpers import method_name, receiver
from torchlint.rules._device import computes_with_torch, host_values
from torchlint.rules._frequency import model_for, per_step_here
from torchlint.rules._program import fits_gaussian_processes, runs_on_host_only, trains_on_toy_data
from torchlint.rules._training import collects_metric_results
from torchlint.rules._project import HOST_ARGS, caller_trait
from torchlint.rules._sync import (
    LoopFacts,
    waits_at_copy_anyway,
    loop_facts,
    waits_every_iteration,
    converts_any_value,
    copies_out_every_iteration,
    enclosing_function_is_one_off,
    exchanges_pickled_objects,
    exchanges_sizes,
    feeds_host_api,
    in_timing_loop,
    in_training_code,
    reading_loops,
    feeds_finite_guard,
    feeds_host_sink,
    in_data_pipeline,
    feeds_host_evaluator,
    named_for_host_work,
    decides_a_raise,
    decides_the_step,
    is_constant_display,
    iterates_mapping,
    loop_clauses,
    mentions,
    runs_once,
    runs_once_per_pass,
)


class ItemInLoop(Rule):
    """
    ## What it does
    Reports `<tensor>.item()` and `<tensor>.tolist()` called in a loop: in the
    body of a `for`/`while` statement or of a comprehension, in the same
    function, and not under a periodic guard such as `if step % log_every == 0:`
    (or `if log_now:` where the function only ever assigns `log_now = step %
    log_every == 0`, or `if self._should_log():` where every definition of
    `_should_log` in the module only returns such a test).

    Nothing is reported in a CPU-only program (a notebook, or a script with an `if
    __name__ == "__main__":` block or a top-level loop, that builds its own
    model or data, such as `nn.Linear(...)`, a class of `nn.Module`,
    parameters with `requires_grad=True`, a `DataLoader(...)` or a
    `datasets.MNIST(...)`, and never names an accelerator: no `cuda`,
    `device`, `gpu`, `mps`, `xla`, `.to(...)`, `distributed`, and no framework
    that moves batches for it, such as Lightning, Accelerate, Fabric,
    DeepSpeed, Ignite or a `Trainer`; a host default tensor type,
    `torch.set_default_tensor_type(torch.DoubleTensor)`, names none): its tensors live in host
    memory, and `.item()` waits for nothing. A module without an entry point
    (a library function) may be handed device tensors, and is judged as usual.
    Nor in a module that fits Gaussian processes (it imports `gpytorch`,
    `botorch` or `linear_operator`): every call of such a model waits for the
    device inside (a Cholesky factorization's error check, a conjugate-gradient
    solve's convergence test, the variational strategies' own reads), so one
    more read per iteration adds no wait. Nor in a module that makes its data
    with scikit-learn's synthetic generators or loads one of its toy datasets
    (`make_regression(2000)`, `make_moons(...)`, `load_iris()`; not one that
    asks for 100,000 samples or more by a literal): a demonstration whose
    whole run takes seconds.

    Receivers that are certainly not device tensors are not reported: NumPy and
    pandas values (`np.argmax(a).item()`, `x.cpu().numpy().tolist()`,
    `df["col"].values.tolist()`, a local name assigned only such values, the
    elements of a loop over them), data already copied to the host
    (`x.cpu().item()`, reported by TL102 at the `.cpu()`; `x.to(self._cpu_device)`),
    tensors built on the CPU (`torch.randperm(n).tolist()`), tokenizer outputs
    (`tokenizer(text, return_tensors="pt")`), tensors read with `safetensors`
    without a device, a value a function of the project computes from host
    arrays only (`xyxy2xywh(torch.tensor(box))`; not a function named after a
    device or a move, nor a model), an attribute that every `self.attr = ...` of
    the class keeps on the host, a parameter converted first
    (`if isinstance(x, torch.Tensor): x = x.cpu().numpy()`), what an
    environment step given host actions returns (`s, r, d, info =
    envs.step(np_actions)`: Gym and envpool answer with NumPy arrays; an
    environment given device actions, such as Isaac Gym, may answer on the
    device), the batch parts a `DataLoader` collates (also through
    `metric_logger.log_every(loader, ...)`, `track(loader)` or a name bound to
    `tqdm if is_main_process() else iter`, which yield the loader's batches, and the matching part of a `zip(...)`/`enumerate(...)`
    over them: `for caption, img_id in zip(captions, image_ids)`), a part
    of a batch left where the iterable put it while the loop moves another
    part first thing (`for (x, y) in iterator:` then `x = x.to(device)`:
    `y` stays a host tensor), the items of
    a dataset handed to the function (a parameter named `dataset`: its
    `__getitem__` builds them on the host), a NumPy array or host tensor
    updated in place (`box /= ratio` leaves it on the host; a Python number
    updated with a tensor, `total = 0; total += loss`, becomes that tensor),
    and literals.

    Not reported either, because the wait is not paid once per step:
    - a call that runs at most once per loop or a fixed number of times: in a
      `return` or `raise`, in a block that ends with `break`/`return`/`raise` or
      `sys.exit(...)`, under `if i == 0:` on the loop counter, under a cap
      (`if shown < 3:` whose body does `shown += 1`), or under a periodic
      guard kept with a counter (`if seen == k:` whose body resets `seen = 0`);
    - a timing loop, which already waits for the device every iteration on
      purpose: its own body calls `torch.cuda.synchronize()` (or
      `torch.accelerator`/`xpu`/`mps` `synchronize()`) outside any condition
      and reads a clock (`time.time()`, `perf_counter()`, or iterates
      `metric_logger.log_every(...)`, which times each iteration); one more wait
      there costs nothing (a sync without a clock is TL103's finding, and
      the reads after it are reported: they become the wait once it goes);
      this holds in a loop inside it that walks the items of what the
      iteration computed (`out = nms(model(img))` ... `for si, pred in
      enumerate(out):` in a detector's validation), whose reads find the
      results ready and wait only for the little work queued since;
    - a loop that waits for the device every iteration anyway, in its own
      body and not under a condition, through an operation whose result size
      or control flow depends on device values (`idx = mask.nonzero()`,
      `torch.unique(labels)`, `labels[labels != ignore]`, `if (x > 0).any():`,
      `while not done.all():`, `while error > tol:` on `error = torch.linalg.norm(...)`,
      `if token != blank:` on `token = probs.argmax(dim=-1)` (greedy decoding),
      `assert torch.isfinite(loss).all()`, `if loss == 0 or not
      torch.isfinite(loss): continue`, `if torch.abs(loss) > 30:`, `if torch.sum(w) == 0:`, indexing
      with a mask named so (`rewards[done]`, `x[~mask]`, a TensorDict's
      `td["next", "done"]`), or a call of a function of the module
      that opens with such a test: `self._check_nan(loss)` whose body starts
      with `if torch.isnan(loss): raise ...`, or that reads a tensor on the
      host in a statement every call runs (`self._accumulate_samples(n)`
      whose body ends `return int(total.cpu().item())`, a helper that calls
      `torch.unique(ids)`; not under an `if`, a loop or a `try` there); Pyro's inference steps, which
      test the loss on the host: `svi.step(x)` answers with a float,
      `elbo.differentiable_loss(...)` checks it for NaN), or a loop over an
      RL data collector (`for data in collector:`, `next(iter(collector))`,
      TorchRL's `SyncDataCollector`: each batch was made by stepping host
      environments on the policy's actions), or an ODE solved with an
      adaptive step size (torchdiffeq's `odeint(func, y0, t)`, whose default
      `dopri5` accepts or rejects each step on a device value; not a
      fixed-grid `method="rk4"`); the right operand of `and` may not run
      and does not count, that of `or` runs whenever the left is false): one
      more read there adds little,
      and removing it would not remove the loop's wait;
    - a read at the end of an iteration that starts with a blocking copy of
      the loader's batch (`x, y = x.to(device), y.to(device)`, `data =
      data.cuda()`, `out = model(x.to(device))`, `inputs = [batch[k].to(device)
      for k in names]`, before any other work but a meter of the loading
      time, `data_time.update(time.time() - end)`; a loader is also an entry of
      a mapping named for loaders, `dataloaders[phase]`,
      `data_loaders["val_loader"]`; after
      the read no `backward()`, optimizer step, model, loss or inner loop is
      left to queue): a host-to-device copy without `non_blocking=True` ends
      with `cudaStreamSynchronize`, so the next iteration waits there for the
      same work, and removing the read only moves the wait by the host work
      in between (the next batch's fetch, already done by the loader's
      workers). Make the copy `non_blocking=True` from pinned memory first
      (TL202, TL204 report what they can see); the read then becomes the
      loop's wait, and is reported. A read earlier in the iteration, with
      the backward pass or another model still to queue, is reported: it
      keeps the host from queueing that work while the device runs;
    - a loop that decides on a value read in it whether to go on
      (`if token.item() == eos: break`, or `token = ....item()` then `if token
      == eos: break` in a `for _ in range(max_len)` or `while` loop): greedy
      decoding waits for each token by design (a loop over a tensor's items
      that breaks on one of them is reported: those values can be read in
      one go before the loop); so does a `for _ in range(n)` or `while` loop
      that builds a tensor from the value it read (`output.append(int(
      y.argmax(1).item()))` ... `torch.tensor([output[-1]], device=device)`,
      `ys.fill_(token)`): the next step's input is that token; and so does a
      loop whose `else` branch is the exit (`while True: if wrong.sum().item()
      > 0: resample ... else: break`), or a `while` loop that counts a value
      it read into a name its own test reads (`while n < num_samples: ...
      n += accepted.sum().item()`: a rejection sampler must know how many it
      has);
    - a loop that hands a host copy of device values to host code every
      iteration and needs the answer (`LoopFacts.round_trips`): an
      environment step on the policy's actions (`envs.step(a.cpu().numpy())`,
      or `actions = ....cpu().numpy()` stepped later in the body), a
      scikit-learn function given a host copy (`f1_score(y.cpu().numpy(),
      pred)` on every batch), a window that shows every frame
      (`cv2.imshow(name, (img.cpu().numpy() * 255).astype(np.uint8))`), or a call
      given a host copy whose result the body turns back into a tensor (a
      host model: `out = m.forecast(x.cpu().numpy())` ... `torch.Tensor(out)`);
      this holds in the loops inside it too (an update loop inside the
      rollout loop of an off-policy agent), not in a loop beside it (PPO's
      update epochs after the rollout);
    - a value read to stop the run on a non-finite loss (`if not
      math.isfinite(loss.item()): sys.exit(1)`, or `loss_value = loss.item()`
      tested so later in the loop, or `total += loss.item()` then `assert not
      np.isnan(total)`, or `reduced = {k: v.item() for ...}` then `if
      math.isnan(sum(reduced.values())): raise ...`): the guard needs the host
      value every step by design,
      so other reads in that loop (and in a comprehension inside it) add no
      new wait either, when the guard is not under a condition;
    - reads in a function that pickles or unpickles objects (`pickle.dumps`
      ... `pickle.loads`: an `all_gather` of arbitrary Python objects through
      byte tensors), or that `all_gather`s sizes in a module that does
      (`_pad_to_largest_tensor`) or encodes or decodes its buffers there
      (`_decode(buffer_, enc_byte)`): the host needs the sizes and bytes to
      unpickle; and a size read in a function that `all_gather`s
      (`t[:size[0].item()]` after `all_gather(ls_size, t_size)`): gathering
      tensors of different shapes pads them to the largest, and the host
      needs each rank's size to slice;
    - a loop whose iteration is a whole pass of work: over epochs
      (`for epoch in ...`, or a loop whose own statements run an epoch,
      `train_epoch()`, `train_one_epoch(...)`, `run_epoch()`, or count epochs,
      `self.epoch_num += 1`; unless the loop itself calls `.backward()`:
      full-batch training, where each "epoch" is one step), a walk over a
      model's parameters in an epoch loop (`for p in net.parameters():` after
      the epoch's steps: a gradient norm logged per epoch; the same walk in an
      optimizer's `step()` runs every step and is reported), over a streaming
      generator (`for token in generate_text_stream(...)`: each value is wanted
      as soon as it exists), a loop that runs a text generation every
      iteration (`model.generate(...)`), or an interactive loop (`input()`,
      `cv2.waitKey(0)`);
    - a loop over a mapping's entries (`for k, v in metrics.items()`,
      `{k: v.item() for k, v in logs.items()}`, `for key in loss_dict`) or over
      a display of constants (`for split in ["train", "val"]`): it goes over a
      few named values, so the loop around it decides, or, where there is none,
      how often the function runs: every step when it is a `forward`, a
      `*_step`, or a function that per-step code calls (in the module or, through
      the project index, in another module: `MetricLogger.update(**losses)`
      called from the training loop); a mapping of parameters, gradients or
      weights is not such a loop;
    - a conversion under `isinstance(v, torch.Tensor)` (or `torch.is_tensor`)
      in a loop that runs no training step (`.backward()`/`.step()`): loggers,
      results tables and input normalisation, which handle values that may not
      be tensors, unless a caller visibly runs it every step and not every
      caller passes only host values (`logger.update(loss=loss.item())`) or
      calls it from a loop that waits for the device every iteration anyway
      (DETR's training loop, which reads the loss to stop on a non-finite
      value with `sys.exit(1)`, and its evaluation loop, which hands every
      batch's results to `coco_evaluator.update(res)`; MDETR's, which does so
      in a loop over its evaluators under `if not args.no_detection:`, an
      opt-out flag);
    - a module that imports PyTorch only for TensorBoard logging
      (`from torch.utils.tensorboard import SummaryWriter` in a JAX program):
      its arrays are not torch tensors;
    - a value read to be written, drawn or decoded on the host (handed to a
      call named like `save`, `write`, `plot`, `imshow`, `fromarray`, `decode`,
      directly or through a name, also a name that looks the value up in a
      table: `word = vocab[word_id]` then `f.write(word)`, a sampled token
      written out, or text built from it: `text = "\\n".join(f"{p[j]:.2f}"
      for j in top5)` then `f.write(text)`), or to an environment's `step`; a console
      write (`sys.stdout.write(...)`, `tqdm.write(...)`) is a log line like
      `print` and does not count;
    - conversions in a module built around an evaluation API taking host
      lists (it imports `pycocotools`, `lvis`, `panopticapi` or
      `cityscapesscripts` at its top level), or around ASE, whose calculators'
      `results` and `Atoms` hold NumPy arrays (it imports `ase`; not a script importing one inside
      a function for a final score): the host values are the point; and reads
      in a loop that feeds an evaluator of such an API every iteration
      (`coco_evaluator.update(res)`, `COCOeval(...)`, a plain `evaluator`
      of the DETR family or detectron2: `for evaluator in evaluator_list:
      evaluator.update(res)`; also in a comprehension
      or a loop over that iteration's results inside it): the evaluator turns
      the results into lists every iteration, so the loop waits anyway (a
      scoring after the loop does not count);
    - code that runs once or once per epoch (see "How often code runs" in
      `docs/precision.md`), or in a function whose callers the run does not show,
      and code under a debug switch (`if args.debug_mode:`);
    - a value read from a state dict or checkpoint (`state_dict.pop(k).item()`,
      `ckpt["model"][k]`, a loop over `state_dict.values()`): checkpoints are
      loaded on the host and converted once; and any call in a function that
      builds a state dict or checkpoint, saves, exports, sets up or asserts
      (`save_*`, `*_save*`, `export*`, `__init__`, `init*`, `*_init`,
      `assert*`), or draws or converts for a host evaluation API (a name with
      the word `vis`, `visualize*`, `plot*`, `draw*`, `coco`, `voc` or `lvis`:
      `draw_one_frame`, `convert_to_coco_format`): one-off work, or the
      conversion is the work;
    - code in a `torch.utils.data` `Dataset` or `Sampler` subclass, a
      collate function or collator class (`def collate_fn`, `class
      MultiModalCollator`), a module-level function that only such classes of
      the module use (the shuffling helper of a `samplers.py`), or a module
      under a `dataset`/`datasets`/`transforms` directory that never names
      a device (its transforms): data loading runs on the host;
    - a read only to check and fail: in an `assert`'s message (built when
      the check fails), or in the test of an `if` whose body raises or exits
      (`if any(v.item() != plan_hash for v in gathered): raise ...`);
    - a read that decides whether the training step runs: in the test of an
      `if` whose body or `else` backpropagates or steps an optimizer (`if
      loss.item() < skip_threshold * error_last: loss.backward() ...`, a
      batch skipped when its loss spikes): the host needs it to choose; or
      one handed to a learning-rate scheduler (`self.scheduler.update(lr,
      ..., kl.item())`, an adaptive schedule per minibatch): the rate it sets
      is a Python number that the next step uses;
    - a function named for the CPU (the word `cpu` in its name:
      `fill_indices_cpu`, `cpu_nms`): the host implementation of an
      operation, given host tensors; or for a beam search (the word `beam`:
      XLM's `generate_beam`, `beam_search`): it keeps its hypotheses on the
      host and needs each step's scores there, so it waits once per step by
      design, and the other reads of that step find the device idle;
    - `.tolist()` outside training code (a loop that runs no training step,
      in a function that runs none: evaluation, inference, decoding, data
      processing): a list is made to hand a batch's results to host code
      (token ids to decode, n-grams to block, predictions to score or write),
      which needs them every iteration. Of the 41 `.tolist()` findings on
      fifteen sets of projects never seen before, none was worth changing;
      `.tolist()` in a training loop (per-sample losses logged every step)
      is reported like `.item()`;
    - any read in a loop outside training code whose own body (or a `with`
      block in it), not under a condition, hands device values to host code
      every iteration with `.tolist()` or `.cpu()...numpy()`, the copy not
      an operand of a comparison or arithmetic (`pitch =
      pred[i].detach().cpu().numpy()` before a plot, `''.join(S[t] for t in
      out[n].tolist())` printed, `pred = out.max(1)[1].cpu().numpy()` handed
      to a NumPy metric): the host waits for the device there every
      iteration by design, so one more read adds no wait (found on
      FastSpeech2's `synth_samples` and RWKV-LM's arithmetic checks); also
      in a loop inside such a loop of the same function (svox2's mask
      script reads each detection's score in a loop over one image's
      detections, then hands the image's mask to OpenCV: the first read is
      the image's wait, the others find the device idle);
    - test files (`test_*.py`, `*_test.py`, `conftest.py`, under `tests/`):
      tests read values to check them.

    ## Why is this bad?
    CUDA kernels run asynchronously: the host queues work and moves on while the
    device computes. `.item()` and `.tolist()` must hand back a Python value,
    so the host stops and waits until the device has finished *all* the work
    queued so far, then copies the result back. Done every iteration, this
    serialises host and device: the device idles while the host prepares the
    next step, and the host idles while the device drains its queue. The PyTorch
    Performance Tuning Guide lists these calls among the unnecessary CPU-GPU
    synchronizations to avoid.

    Measured with `torchlint verify --rules TL101` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 1.07 ms before,
    1.35 ms after, **0.80x**. On a CPU `.item()` waits for nothing, so the fix only
    adds a tensor addition per step and is slower; its gain is the per-step
    synchronization it removes on a GPU, which this machine could not measure. Run
    the same command on a GPU machine for the figure that matters there.

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
    print(total_loss / len(loader))
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss.detach()  # stays on the device, no wait
    print(total_loss.item() / len(loader))  # one synchronization
    ```
    Or log every N steps: `if step % log_every == 0: print(loss.item())`.

    ## Fix safety
    A fix is offered only for the accumulation `acc += <expr>.item()` into a
    local variable initialised to a number literal (`acc = 0.0`) before the
    loop and not otherwise used in the loop. It rewrites `.item()` to
    `.detach()`, and it is unsafe: `acc` becomes a 0-dim tensor on the device
    instead of a Python number. The synchronization moves to wherever `acc` is
    read, and code that expects a number may behave differently: `json.dump`
    and other serialisers reject it, `%d` formatting and `math.*` functions
    convert it (synchronizing there), `acc > best` yields a tensor, a value kept
    in a list or a dict keeps device memory alive, and an integer count
    (`correct += (pred == y).sum().item()`) becomes an integer tensor whose
    division and formatting follow tensor rules.

    ## References
    - PyTorch Performance Tuning Guide, "Avoid unnecessary CPU-GPU synchronization"
    - PyTorch documentation, "CUDA semantics", section "Asynchronous execution"
    - `torch.Tensor.item` and `torch.Tensor.tolist` documentation
    """

    code = "TL101"
    name = "item-in-loop"
    summary = "`.item()`/`.tolist()` in a loop synchronizes with the device every iteration"
    fix = FixAvailability.UNSAFE
    needs = ("item", "tolist")

    VALID = [
        Valid(
            """
            import torch
            for step, x in enumerate(loader):
                loss = model(x)
                log_now = step % 100 == 0
                if log_now and rank == 0:
                    print(loss.item())
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
                batch_time = time.time() - end
                logger.update(loss=loss.item())
            """
        ),
        Valid(
            """
            import math
            import sys
            import torch
            for x, y in loader:
                loss = model(x.cuda()).sum()
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    sys.exit(1)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            for k, v in metrics.items():
                print(k, v)
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                loss = model(x)
            print(loss.item())
            """
        ),
        Valid(
            """
            import torch
            for step, x in enumerate(loader):
                loss = model(x)
                if step % 100 == 0:
                    print(loss.item())
            """
        ),
        Valid(
            """
            import numpy as np
            import torch
            for row in rows:
                ids = np.array(row).tolist()
            """
        ),
        Valid(
            """
            import torch
            for i in range(n.item()):
                pass
            """
        ),
        Valid(
            """
            import torch
            predictions = []
            for x in loader:
                predictions.extend(model(x).argmax(-1).tolist())
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x, y in loader:
                loss = model(x.cuda()).sum()
                loss.backward()
                optimizer.step()
                torch.cuda.synchronize()
                logger.update(loss=loss.item())
            """,
        ),
        Invalid(
            """
            import sys
            import torch
            for x, y in loader:
                loss = model(x.cuda()).sum()
                loss.backward()
                optimizer.step()
                sys.stdout.write('loss %f' % loss.item())
            """,
        ),
        Invalid(
            """
            import torch
            total = 0.0
            for x in loader:
                total += model(x).item()
            """,
            expected_fix="""
            import torch
            total = 0.0
            for x in loader:
                total += model(x).detach()
            """,
        ),
        Invalid(
            """
            import torch
            for x, y in loader:
                losses = loss_fn(model(x), y)
                losses.mean().backward()
                optimizer.step()
                print(losses.tolist())
            """,
        ),
        Invalid(
            """
            import torch
            def training_step(tensors):
                values = [t.item() for t in tensors]
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="`.item()` every step vs a detached device accumulator",
        before="""
            import torch

            device = torch.device(DEVICE)

            values = torch.randn(200, 64, device=device)


            def run():
                total = 0.0
                for row in values:
                    total += (row * row).mean().item()
                return total
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            values = torch.randn(200, 64, device=device)


            def run():
                total = 0.0
                for row in values:
                    total += (row * row).mean().detach()
                return total
            """,
        rtol=0.0001,
        atol=0.0001,
        comparison=(
            "values, within 1e-4: the fixed accumulator sums in float32 on the device, the original in "
            "float64 on the host (a number and a 0-dim tensor compare as equal)"
        ),
        cpu_note=(
            "`.item()` does not wait for anything on a CPU; the fix's gain is the synchronization it removes "
            "on a GPU"
        ),
    )

    _MESSAGES = {
        "item": (
            "`.item()` in a loop blocks the host until the device has finished all "
            "queued work, every iteration; accumulate on the device (`.detach()`) and "
            "convert once after the loop, or log every N steps"
        ),
        "tolist": (
            "`.tolist()` in a loop blocks the host until the device has finished all "
            "queued work, every iteration; keep the results on the device (e.g. "
            "collect and `torch.cat` them) and convert once after the loop"
        ),
    }

    def __init__(self, context) -> None:
        super().__init__(context)
        self._facts: Dict[int, LoopFacts] = {}
        if runs_on_host_only(context) or fits_gaussian_processes(context) or trains_on_toy_data(context):
            self.walks = False  # a CPU-only program (its values are on the host already), or Gaussian processes (they wait inside)

    def visit_Call(self, node: cst.Call) -> None:
        name = method_name(node)
        if name not in ("item", "tolist") or node.args:
            return
        ctx = self.context
        if ctx.is_test_file:
            return
        loop = self._step_loop()
        if loop is None:
            # Only walks over a mapping or a few constants: they repeat the call
            # every step only in a function that itself runs every step (a
            # `MetricLogger.update(**losses)` called from the training loop),
            # which the frequency check below decides.
            loop = next(iter(ctx.enclosing_loops()), None)
            if loop is None or ctx.enclosing_function() is None:
                return
        if runs_once(ctx, loop) or runs_once_per_pass(ctx, loop, self._facts):
            return
        facts = loop_facts(ctx, loop, self._facts)
        if in_timing_loop(ctx, loop, self._facts):
            return  # a timing loop: it waits for the device every iteration anyway, to time it
        if facts.exits_on_value:
            return  # the loop waits for a device value every iteration anyway, to decide to stop
        if waits_every_iteration(ctx, loop, self._facts) or waits_at_copy_anyway(ctx, loop):
            return  # `idx = mask.nonzero()`, `envs.step(a.cpu().numpy())`, `x = x.to(device)`: it waits anyway
        if feeds_finite_guard(ctx, loop):
            return  # read to stop the run on a non-finite loss: needed every step, by design
        recv = receiver(node)
        assert recv is not None
        if in_data_pipeline(ctx) or enclosing_function_is_one_off(ctx) or self._reads_checkpoint(recv):
            return
        if decides_a_raise(ctx) or decides_the_step(ctx):
            return  # an assert's message, the test of a check that raises or of whether the step runs
        if (name == "tolist" or self._copied_out(loop)) and not in_training_code(ctx, self._facts):
            return  # a batch's results handed to host code (decoding, n-grams, scoring, printing): by design
        if named_for_host_work(ctx) or feeds_host_evaluator(ctx, self._facts) or collects_metric_results(ctx):
            return  # the host implementation (`fill_indices_cpu`), results handed to a COCO evaluator or kept by a metric
        if exchanges_pickled_objects(ctx) or exchanges_sizes(ctx, recv):
            return  # `all_gather` of pickled objects or of sizes: the host needs the sizes
        if host_values(ctx).is_host(recv, ctx.location()) or not computes_with_torch(ctx):
            return  # already on the host, or not a torch tensor: nothing waits for the device
        if feeds_host_sink(ctx, len(ctx.stack) - 1, loop) or feeds_host_api(ctx):
            return  # read to be written, drawn, decoded or handed to a host API (pycocotools)
        frequency = per_step_here(ctx, reading_loops(ctx))
        if frequency is None:
            return  # a loop in code that runs once or once per epoch (setup, logging, export)
        if converts_any_value(ctx, loop, self._facts) and (
            (frequency.via is None and frequency.via_text is None) or _callers_pass_host_values(ctx, frequency)
        ):
            # A logger that converts whatever it is given: usually called every N
            # steps, so reported only when a caller visibly runs it every step,
            # and not when every caller (project index) passes host values.
            return
        self.report(node, self._MESSAGES[name], fix=self._accumulation_fix(node, recv, loop),
                    frequency=frequency)

    # -- which loop repeats the call -------------------------------------------
    def _copied_out(self, loop: cst.CSTNode) -> bool:
        """Whether ``loop``, or a loop around it in the function, hands device
        values to host code every iteration (``copies_out_every_iteration``): a
        loop over one image's detections inside a loop that writes each
        image's mask with OpenCV waits once per image; its first read is
        that wait, the others find the device idle."""
        ctx = self.context
        reached = False
        for outer in ctx.enclosing_loops():  # (innermost first: `loop`, then the loops around it)
            reached = reached or outer is loop
            if reached and copies_out_every_iteration(ctx, outer):
                return True
        return False

    def _step_loop(self) -> Optional[cst.CSTNode]:
        """The innermost enclosing loop that is not a walk over a mapping's
        entries (``for k, v in metrics.items()``) or over a display of constants
        (``for split in ["train", "val"]``): such a loop goes over a few named
        values or settings, not over steps or data, so the question is asked of
        the loop around it."""
        for loop in self.context.enclosing_loops():
            clauses = loop_clauses(loop)
            if not clauses or not all(self._is_mapping(c.iter) or is_constant_display(c.iter) for c in clauses):
                return loop
        return None

    def _is_mapping(self, expr: cst.BaseExpression) -> bool:
        """``d.items()``/``d.values()``/``d.keys()``, a name ending in ``dict``,
        ``kwargs``, or a local name bound only to dict displays; not a mapping of
        parameters, gradients or weights (those can be long)."""
        if mentions(expr, _WEIGHT_WORDS):
            return False
        if iterates_mapping(expr):
            return True
        if not isinstance(expr, cst.Name):
            return False
        bindings = self.context.semantic.bindings(expr.value, self.context.location())
        return bool(bindings) and all(
            b.kind == "value"
            and (
                isinstance(b.value, (cst.Dict, cst.DictComp))
                or (isinstance(b.value, cst.Call) and isinstance(b.value.func, cst.Name) and b.value.func.value == "dict")
            )
            for b in bindings
        )

    # -- code whose values are not per-step device results ----------------------
    def _reads_checkpoint(self, recv: cst.BaseExpression) -> bool:
        """A value read from a state dict or checkpoint (``state_dict[k]``,
        ``ckpt.pop(k)``), or in a loop over one: loaded checkpoints live on the
        host, and reading one is a one-off conversion, not a training step."""
        if _chain_mentions(recv, _CHECKPOINT_WORDS):
            return True
        for node in reversed(self.context.stack[:-1]):
            if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                return False
            for clause in loop_clauses(node):
                if mentions(clause.iter, _CHECKPOINT_WORDS):
                    return True
        return False

    # -- the fix ---------------------------------------------------------------
    def _accumulation_fix(self, node: cst.Call, recv: cst.BaseExpression, loop: cst.CSTNode) -> Optional[Fix]:
        if method_name(node) != "item":
            return None
        parent = self.context.parent
        if not (
            isinstance(parent, cst.AugAssign)
            and parent.value is node
            and isinstance(parent.operator, cst.AddAssign)
            and isinstance(parent.target, cst.Name)
        ):
            return None
        if not isinstance(loop, (cst.For, cst.While)):
            return None
        acc = parent.target.value
        if not number_initialised_before(self.context, acc, loop) or read_elsewhere_in_loop(loop, acc, parent.target):
            return None
        text = cst.Module([]).code_for_node(recv)
        if len(text) > 40 or "\n" in text:
            text = "<expr>"
        return Fix(
            Applicability.UNSAFE,
            f"Accumulate `{text}.detach()` instead (sync once when `{acc}` is read)",
            lambda: calls.rename_method(node, "detach"),
        )


# -- module-level helpers ----------------------------------------------------------

# Mappings of these are long (one entry per parameter): not a few named values.
_WEIGHT_WORDS = ("param", "grad", "weight", "buffer")
# Values read from these come from a checkpoint.
_CHECKPOINT_WORDS = ("state_dict", "ckpt", "checkpoint")


def _chain_mentions(expr: cst.BaseExpression, words) -> bool:
    """Whether the receiver chain of ``expr`` (``state_dict.pop(k)``,
    ``ckpt["model"][k]``, ``self.sd[k]``) names one of ``words`` (or is a
    state dict abbreviated ``sd``/``*_sd``)."""
    node: Optional[cst.BaseExpression] = expr
    while node is not None:
        if isinstance(node, cst.Call):
            node = node.func
            continue
        if isinstance(node, cst.Subscript):
            node = node.value
            continue
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = (node.value if isinstance(node, cst.Name) else node.attr.value).lower()
            if any(word in name for word in words) or name == "sd" or name.endswith("_sd"):
                return True
            node = node.value if isinstance(node, cst.Attribute) else None
            continue
        return False
    return False


def _callers_pass_host_values(ctx, frequency) -> bool:
    """Whether the project index found that every call of the function passes
    only host values (``metric_logger.update(loss=loss.item(), lr=lr)``)."""
    fn = frequency.function
    name = model_for(ctx).qualified_name(fn) if fn is not None else None
    return name is not None and caller_trait(ctx, name, HOST_ARGS) is not None
