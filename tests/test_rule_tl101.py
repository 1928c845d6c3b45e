"""Focused tests for TL101 (item-in-loop)."""

from __future__ import annotations

import ast

import pytest

from tests.helpers import fix, lint
from torchlint.model import Applicability


def tl101(code: str):
    return lint(code, select=["TL101"])


def positions(code: str):
    return [(d.line, d.column) for d in tl101(code)]


def test_while_loop_body_and_test() -> None:
    code = """
    import torch
    def run(model, x):
        while model(x).abs().max().item() > 1.0:
            x = x / 2
            print(x.sum().item())
    """
    assert positions(code) == [(4, 11), (6, 15)]


def test_comprehensions_and_generators() -> None:
    code = """
    import torch
    def training_step(outputs, matrix):
        values = [t.item() for t in outputs]
        nested = [[v for v in row.tolist()] for row in matrix]
        total = sum(t.item() for t in outputs)
    """
    # the outermost iterable of a comprehension runs once: `row.tolist()` is
    # in the outer comprehension's element, so it runs per row.
    assert positions(code) == [(4, 15), (5, 27), (6, 17)]


def test_outermost_comprehension_iterable_runs_once() -> None:
    code = """
    import torch
    values = [v * 2 for v in scores.tolist()]
    """
    assert tl101(code) == []


def test_periodic_guard_with_and_or_else() -> None:
    code = """
    import torch
    for step, x in enumerate(loader):
        loss = model(x)
        if rank == 0 and step % 50 == 0:
            print(loss.item())
        if step % 50 == 0:
            pass
        else:
            print(loss.item())
    """
    # the `else` branch of a periodic guard runs on the other iterations
    assert positions(code) == [(10, 15)]


def test_items_and_calls_with_arguments_are_not_matched() -> None:
    code = """
    import torch
    for x in loader:
        for k, v in x.items():
            pass
        a = arr.item(0)
        b = t.tolist(1)
    """
    assert tl101(code) == []


def test_runs_once_per_loop() -> None:
    code = """
    import torch
    def search(model, loader):
        for x in loader:
            out = model(x)
            if out.isnan().any():
                raise ValueError(f"nan at {out.sum().item()}")
            if out.mean() > 0:
                best = out.mean().item()
                break
            return out.max().item()
    """
    assert tl101(code) == []


def test_host_values_are_not_reported() -> None:
    code = """
    import numpy as onp
    import pandas
    import torch
    def f(loader, table: pandas.DataFrame, arr: onp.ndarray):
        preds = None
        for x in loader:
            a = onp.mean(x).item()
            b = table["col"].tolist()
            c = arr[0].item()
            d = x.detach().cpu().item()
            e = x.to("cpu").tolist()
            preds = x.numpy()
            g = preds.tolist()
            h = torch.from_numpy(arr).sum().item()
            i = torch.arange(10, device="cpu").tolist()
            j = (2.0).real
            k = [1, 2, 3]
    """
    assert tl101(code) == []


def test_name_with_a_tensor_binding_is_reported() -> None:
    code = """
    import numpy as np
    import torch
    def f(loader, device):
        for x in loader:
            y = np.asarray(x)
            y = torch.from_numpy(y).to(device)
            print(y.sum().item())
            z = torch.zeros(3, device=device)
            print(z.item())
            v = z.max(dim=0).values.item()
    """
    assert positions(code) == [(8, 15), (10, 15), (11, 13)]


def test_default_device_changed_makes_factories_unknown() -> None:
    code = """
    import torch
    torch.set_default_device("cuda")
    for x in loader:
        print(torch.rand(3).sum().item())
    """
    assert positions(code) == [(5, 11)]


def test_nested_function_in_loop_is_its_own_scope() -> None:
    code = """
    import torch
    for x in loader:
        def value(t):
            return float(t.item())
        handler = lambda t: t.tolist()
    """
    assert tl101(code) == []


# -- the fix -----------------------------------------------------------------


def fix_of(code: str):
    (diagnostic,) = tl101(code)
    return diagnostic.fix


ACCUMULATION = """
import torch
def train(model, loader):
    total = 0
    for x in loader:
        total += model(x).sum().item()
    return total
"""


def test_accumulation_fix_is_unsafe_and_rewrites_only_the_method() -> None:
    info = fix_of(ACCUMULATION)
    assert info is not None and info.applicability is Applicability.UNSAFE
    assert "model(x).sum().detach()" in info.message and "`total`" in info.message
    assert fix(ACCUMULATION, select=["TL101"]).text == fix(ACCUMULATION, select=["TL101"], unsafe=False).text
    result = fix(ACCUMULATION, select=["TL101"], unsafe=True)
    assert result.text == ACCUMULATION.replace(".sum().item()", ".sum().detach()")
    ast.parse(result.text)
    again = fix(result.text, select=["TL101"], unsafe=True)
    assert again.text == result.text and not again.applied
    assert tl101(result.text) == []


def test_accumulation_fix_keeps_formatting() -> None:
    code = """
    import torch
    def train(model, loader):
        total = 0.0
        for x in loader:
            total += ( model(x)
                .sum() . item() )  # keep me
        return total
    """
    result = fix(code, select=["TL101"], unsafe=True)
    assert ".sum() . detach() )  # keep me" in result.text


def test_accumulation_fix_in_nested_loop_with_init_in_outer_loop() -> None:
    code = """
    import torch
    def train(model, loader, epochs):
        for epoch in range(epochs):
            epoch_loss = 0.0
            for x in loader:
                epoch_loss += model(x).item()
            print(epoch, epoch_loss / len(loader))
    """
    assert fix_of(code) is not None


@pytest.mark.parametrize(
    "body",
    [
        # attribute and subscript accumulators
        "self.total = 0.0\nfor x in loader:\n    self.total += model(x).item()\n",
        "stats = {'loss': 0.0}\nfor x in loader:\n    stats['loss'] += model(x).item()\n",
        # not a number literal, or no initialisation at all
        "total = torch.zeros(())\nfor x in loader:\n    total += model(x).item()\n",
        "total = start\nfor x in loader:\n    total += model(x).item()\n",
        "for x in loader:\n    total += model(x).item()\n",
        # initialised only after (or inside) the loop
        "for x in loader:\n    total = 0\n    total += model(x).item()\n",
        # global / nonlocal
        "global total\ntotal = 0\nfor x in loader:\n    total += model(x).item()\n",
        # not the whole right-hand side, not `+=`, not `.item()`
        "total = 0\nfor x in loader:\n    total += model(x).item() * 2\n",
        "total = 0\nfor x in loader:\n    total -= model(x).item()\n",
        "total = 0\nfor x in loader:\n    model(x).sum().backward()\n    total += model(x).tolist()\n",
        # read every iteration: the sync would only move
        "total = 0\nfor i, x in enumerate(loader):\n    total += model(x).item()\n    print(total / (i + 1))\n",
        "total = 0\nwhile step < 10:\n    total += model(x).item()\n    log(total)\n    step += 1\n",
    ],
)
def test_accumulation_fix_not_offered(body: str) -> None:
    indented = "".join("    " + line + "\n" for line in body.splitlines())
    code = "import torch\ndef f(self, model, loader, start):\n" + indented
    diagnostics = tl101(code)
    assert len(diagnostics) == 1
    assert diagnostics[0].fix is None


def test_accumulator_read_under_periodic_guard_still_fixed() -> None:
    code = """
    import torch
    def train(model, loader):
        total = 0.0
        for step, x in enumerate(loader):
            total += model(x).item()
            if step % 100 == 0:
                print(total / (step + 1))
    """
    assert fix_of(code) is not None


def test_module_level_accumulation() -> None:
    code = """
    import torch
    total = 0
    for x in loader:
        total += model(x).item()
    """
    result = fix(code, select=["TL101"], unsafe=True)
    assert "total += model(x).detach()" in result.text


def test_noqa_suppresses() -> None:
    code = """
    import torch
    for x in loader:
        print(x.item())  # noqa: TL101
    """
    assert tl101(code) == []


def test_call_of_a_call_result_does_not_crash() -> None:
    # Found on real code (an evaluation script): a loss module built and
    # called in one expression, then `.item()` in the loop.
    code = """
    import torch.nn as nn
    for x, y in loader:
        loss = nn.CrossEntropyLoss()(model(x), y)
        print(loss.item())
        scores = (lambda t: t)(model(x))
        print(scores.item())
    """
    assert [d.line for d in tl101(code)] == [5, 7]


# -- what is not a per-step sync (found on real projects) ----------------------


def test_epoch_loops_are_not_per_step_but_full_batch_epochs_are() -> None:
    code = """
    import torch
    def fit(model, loader, optimizer, scheduler, epochs, x, y):
        for epoch in range(epochs):
            for batch in loader:
                loss = model(batch)
                loss.backward()
                print(loss.item())
            scheduler.step()
            print(epoch, loss.item())
        for epoch in range(epochs):
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            optimizer.step()
            print(epoch, loss.item())
    """
    # a scheduler step per epoch keeps it an epoch loop; `loss.backward()` in
    # the epoch loop's own body makes each "epoch" one training step
    assert positions(code) == [(8, 19), (15, 22)]


def test_test_files_are_skipped() -> None:
    code = """
    import torch
    def test_training_reduces_loss(model, loader):
        losses = []
        for x in loader:
            losses.append(model(x).item())
        assert losses[-1] < losses[0]
    """
    assert lint(code, select=["TL101"], path="tests/test_train.py") == []
    assert lint(code, select=["TL101"], path="pkg/test_train.py") == []
    assert len(lint(code, select=["TL101"], path="pkg/train.py")) == 1


def test_runs_once_before_the_process_exits() -> None:
    code = """
    import sys
    import torch
    def train(model, loader):
        for x in loader:
            loss = model(x)
            if loss.isnan():
                print("nan loss", loss.item())
                sys.exit(1)
            if loss.isinf():
                print(loss.item()); exit(2)
    """
    assert tl101(code) == []


def test_mapping_loops_defer_to_the_loop_around_them() -> None:
    code = """
    import torch
    def log_metrics(metrics, logger):
        for name, value in metrics.items():
            logger.log(name, value.item())
        counts = {"tokens": torch.tensor(0), "samples": torch.tensor(0)}
        for key in counts:
            print(key, counts[key].item())
        for key in self.loss_dict:
            print(self.loss_dict[key].item())
        return {k: v.item() for k, v in kwargs.items()}
    def train(model, loader, history):
        for x in loader:
            parts = model(x)
            history.append({k: v.item() for k, v in parts.items()})
            for k, v in parts.items():
                print(k, v.mean().item())
    def norms(grads, params):
        for name, g in grads.items():
            print(name, g.norm().item())
        return {n: p.abs().max().item() for n, p in params.items()}
    """
    # per step in `train`; a mapping of gradients or parameters is long
    assert positions(code) == [(15, 28), (17, 22), (20, 21), (21, 16)]


def test_generic_conversions_of_values_that_may_be_tensors() -> None:
    code = """
    import torch
    from torch import Tensor
    def rows(records, results):
        out = []
        for path, score in records:
            out.append(score.item() if isinstance(score, Tensor) else score)
        for result in results:
            val = result.get("acc")
            if isinstance(val, torch.Tensor) and val.numel() > 1:
                val = val.tolist()
            out.append(val)
        return out
    def train(model, loader, optimizer, clip):
        for x in loader:
            model(x).backward()
            norm = clip(model)
            optimizer.step()
            print(norm.item() if isinstance(norm, torch.Tensor) else norm)
    """
    # a training step loop still waits every step
    assert positions(code) == [(19, 15)]


def test_streaming_and_generation_loops() -> None:
    code = """
    import torch
    def show(model, tokenizer, prompts, ids):
        for token in generate_text_stream(model, ids):
            print(tokenizer.decode(token.tolist()), end="")
        for prompt in prompts:
            out = model.generate(tokenizer(prompt, return_tensors="pt").input_ids.cuda())
            print(tokenizer.decode(out[0].tolist()))
        for step, x in enumerate(ids):
            if step % 10 == 0:
                model.generate(x)
            print(model(x).argmax().item())
    """
    # a generation every 10 steps does not make every step heavy
    assert positions(code) == [(12, 15)]


def test_data_pipeline_classes_and_checkpoints() -> None:
    code = """
    import torch
    from torch.utils.data import Dataset
    from torch.utils.data.sampler import Sampler
    class Pairs(Dataset):
        def __getitem__(self, i):
            return [self.labels[j].item() for j in self.pairs[i]]
    class Repeat(Sampler):
        def __iter__(self):
            while True:
                yield from self.indices[torch.randperm(self.n)].tolist()
    def convert(state_dict, sds_sd, keys, ckpt):
        for key in keys:
            a = state_dict.pop(key).item()
            b = sds_sd[key].item()
            c = ckpt["model"][key].tolist()
        return all(torch.all(p == 0).item() for p in state_dict.values())
    class Other:
        def __iter__(self):
            while True:
                yield self.indices[0].item()
    """
    assert positions(code) == [(21, 19)]


def test_more_host_values() -> None:
    code = """
    import numpy as np
    import torch
    from safetensors import safe_open
    from utils.boxes import xyxy2xywh
    def f(path, keys, det, shape, tokenizer, texts, mats, targets, loader, device):
        gain = torch.tensor(shape)[[1, 0, 1, 0]]
        for *xyxy, conf, cls in det.tolist():
            a = (xyxy2xywh(torch.tensor(xyxy).view(1, 4)) / gain).view(-1).tolist()
        with safe_open(path, framework="pt") as f:
            for key in keys:
                b = f.get_tensor(key).item()
        encoded = [tokenizer(t, return_tensors="pt") for t in texts]
        c = [e.input_ids.sum().item() for e in encoded]
        for i, (m, n) in enumerate(zip(np.cumsum(mats, 0), np.diff(mats, axis=0))):
            d = (m / n).tolist()
        if isinstance(targets, torch.Tensor):
            targets = targets.cpu().numpy()
        for row in targets:
            e = xyxy2xywh(row[2:6]).tolist()
        for x in loader:
            g = xyxy2xywh(x.to(device, non_blocking=True)).item()
            h = to_device(torch.tensor(x)).item()
            k = xyxy2xywh(len(x), 3).item()
    """
    # a helper given device data, a helper named after a move, a helper given
    # only plain numbers: the result may be on the device
    assert positions(code) == [(22, 13), (23, 13), (24, 13)]


def test_attributes_kept_on_the_host_by_the_class() -> None:
    code = """
    import torch
    class Schedule:
        def __init__(self, betas, device):
            self.levels = torch.cumsum(betas, 0).to("cpu")
            self.weights = betas.to(device)
            self._cpu_device = torch.device("cpu")
        def bounds(self, n):
            return [(self.levels[i].item(), self.weights[i].item()) for i in range(n)]
        def collect(self, outputs):
            return [o.to(self._cpu_device).tolist() for o in outputs]
    """
    assert positions(code) == [(9, 41)]


def test_element_loops_over_comprehension_results() -> None:
    code = """
    import torch
    def gather(world, device):
        sizes = [torch.zeros(1, device=device) for _ in range(world)]
        return max(s.item() for s in sizes)
    def train(loader, model, world):
        for x in loader:
            model(x).sum().backward()
            sizes = [torch.zeros(1, device=x.device) for _ in range(world)]
            print(max(s.item() for s in sizes))
    """
    # a list built by a comprehension holds what the comprehension made; reading
    # it item by item waits once, where the reading runs: in `gather` (how often
    # it runs is not known here) that is not a finding, in the training loop it is
    assert positions(code) == [(10, 19)]


def test_capped_and_counted_guards_are_not_per_iteration() -> None:
    code = """
    import torch
    def report(model, loader, every):
        shown = 0
        seen = 0
        for x, y in loader:
            out = model(x)
            if shown < 3 and not out.eq(y).all():
                shown += 1
                print(out.tolist(), y.tolist())
            seen += 1
            if seen == every:
                print(out.mean().item())
                seen = 0
            if seen == every:
                print(out.max().item())
    """
    # the last guard never resets its counter: it may hold on many iterations
    assert positions(code) == [(16, 19)]


def test_set_up_save_and_assert_functions() -> None:
    code = """
    import torch
    class Scheduler:
        def init_stages(self, n):
            return [self.sigmas[i].item() for i in range(n)]
        def __init__(self, levels):
            self.bounds = [levels[i].item() for i in range(len(levels))]
    def save_results(outputs, path):
        return [o.tolist() for o in outputs]
    def assert_all_finite(tensors):
        for t in tensors:
            assert t.isfinite().all().item()
    def training_step(outputs):
        return [o.tolist() for o in outputs]
    """
    assert positions(code) == [(14, 13)]


# -- how often the loop runs, loops that wait on purpose, host sinks (precision review) ----


def test_decoding_loop_that_stops_on_a_device_value_is_silent():
    # Token-by-token decoding reads the token every step to decide whether to stop;
    # one more `.item()` in that loop costs nothing.
    code = """
        import torch

        def generate(model, token, stop_tokens, max_new_tokens):
            out = []
            for _ in range(max_new_tokens):
                if token.item() in stop_tokens:
                    break
                token = model(token).argmax(-1)
                out.append(token.item())
            return out
    """
    assert tl101(code) == []


def test_loop_that_stops_on_a_host_counter_is_still_reported():
    code = """
        import torch

        def train(model, loader, opt, patience):
            seen = 0
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                opt.step()
                print(loss.item())
                seen += 1
                if seen > patience:
                    break
    """
    assert positions(code) == [(10, 15)]


def test_debug_table_built_every_n_steps_is_silent():
    # The caller's periodic guard makes the whole function run every N steps.
    code = """
        import torch

        class Trainer:
            def train_step(self, batch):
                loss = self.model(batch)
                loss.backward()
                if self.steps % self.log_every == 0:
                    self._debug_table(batch, loss)

            def _debug_table(self, batch, loss):
                rows = []
                for idx in range(self.num_rows):
                    rows.append((batch.lengths[idx].item(), loss[idx].item()))
                return rows
    """
    assert tl101(code) == []


def test_decoded_for_a_reward_is_silent():
    code = """
        import torch

        def rewards(tokenizer, completions, answers):
            scores = []
            for i in range(completions.shape[0]):
                text = tokenizer.decode(completions[i].tolist())
                scores.append(float(text == answers[i]))
            return scores
    """
    assert tl101(code) == []


def test_setup_loop_over_non_data_is_silent_but_the_training_loop_is_not():
    code = """
        import torch

        def main(model, loader, opt):
            for name in sorted(model.config):
                print(name, model.stats[name].item())
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                opt.step()
                print(loss.item())

        if __name__ == "__main__":
            main(model, loader, opt)
    """
    assert positions(code) == [(11, 15)]


def test_a_jax_program_that_imports_torch_only_for_tensorboard() -> None:
    code = """
    import jax.numpy as jnp
    from torch.utils.tensorboard import SummaryWriter
    def train(state, batches, writer):
        for batch in batches:
            loss = jnp.mean(state(batch))
            writer.add_scalar("loss", loss.item())
    """
    assert positions(code) == []
    assert positions(code.replace("import jax.numpy as jnp", "import torch")) == [(7, 35)]


def test_a_module_built_around_a_host_evaluation_api() -> None:
    # Converting predictions for pycocotools is the point of such a module...
    code = """
    import torch
    from pycocotools.coco import COCO
    class Evaluator:
        def forward(self, predictions):
            results = []
            for image_id, prediction in predictions:
                results.append({"image_id": image_id, "boxes": prediction["boxes"].item()})
            return results
    """
    assert positions(code) == []
    # ...but a script that imports it inside a function for a final scoring step is not.
    moved = code.replace("    from pycocotools.coco import COCO\n", "").replace(
        "    class Evaluator:", "    def score(path):\n        from pycocotools.coco import COCO\n        return COCO(path)\n    class Evaluator:")
    assert positions(moved) == [(10, 60)]


def test_periodic_flag_assigned_a_modulo_test() -> None:
    """`if flag:` where the function only ever assigns `flag` a `%` test is a
    periodic guard; a flag assigned anything else is not."""
    code = (
        "import torch\n"
        "def train(loader, model, optimizer):\n"
        "    for i, x in enumerate(loader):\n"
        "        loss = model(x.cuda(non_blocking=True)).sum()\n"
        "        loss.backward()\n"
        "        optimizer.step()\n"
        "        regularize = i % 4 == 0\n"
        "        if regularize:\n"
        "            print(loss.item())\n"
        "        late = i > 10\n"
        "        if late:\n"
        "            print(loss.item())\n"
    )
    assert [d.line for d in lint(code, select=["TL101"])] == [12]
    reassigned = code.replace("        late = i > 10\n", "        late = i > 10\n        regularize = True\n")
    assert [d.line for d in lint(reassigned, select=["TL101"])] == [9, 13]



# -- a loop that waits at a blocking copy of its batch anyway ----------------------------

_COPY_FIRST = """
import torch
from torch.utils.data import DataLoader
def train(model, optimizer, dataset, device, args):
    loader = DataLoader(dataset, batch_size=64, num_workers=4)
    for {target} in loader:
{opening}
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        print(loss.item())
"""


@pytest.mark.parametrize(
    "target, opening",
    [
        ("x, y", "        x, y = x.to(device), y.to(device)"),
        ("x, y", "        optimizer.zero_grad()\n        x = x.cuda()"),
        ("batch", "        x, y = batch\n        x = x.float().to(device)"),
        ("batch", "        batch = {k: v.cuda() for k, v in batch.items()}\n        x = batch['x']"),
        ("x, y", "        if args.cuda:\n            x, y = x.cuda(), y.cuda()"),
        ("x, y", "        x = model.stem(x.to(device, non_blocking=False))"),
    ],
)
def test_a_read_at_the_end_of_an_iteration_that_starts_with_a_blocking_copy(target, opening) -> None:
    # the next iteration's copy waits for the same work: the read adds no wait
    assert tl101(_COPY_FIRST.format(target=target, opening=opening)) == []


@pytest.mark.parametrize(
    "target, opening",
    [
        # the copy does not wait: the read is the loop's only wait
        ("x, y", "        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"),
        ("x, y", "        x = x.cuda(non_blocking=True)"),
        # a helper copies: whether it waits is not visible here
        ("batch", "        x = to_device(batch, device)"),
        # work is queued before the copy: the copy waits for it, not for the last iteration only
        ("x, y", "        h = model.stem(x)\n        x = x.to(device)"),
        # the copy runs only on some iterations
        ("x, y", "        if x.dim() == 3:\n            x = x.to(device)"),
        # a cast, not a move
        ("x, y", "        x = x.to(torch.float16)"),
    ],
)
def test_a_read_in_a_loop_that_does_not_start_with_a_blocking_copy(target, opening) -> None:
    assert len(tl101(_COPY_FIRST.format(target=target, opening=opening))) == 1


def test_a_read_before_the_rest_of_the_step_is_queued_is_reported() -> None:
    code = """
    import torch
    def train(netD, netG, loader, optD, optG, device):
        for real, _ in loader:
            real = real.to(device)
            errD = netD(real).mean()
            errD.backward()
            optD.step()
            print(errD.item())
            errG = netD(netG(real)).mean()
            errG.backward()
            optG.step()
            print(errG.item())
    """
    # the first read keeps the host from queueing the generator's step while the device runs
    assert positions(code) == [(9, 15)]


def test_a_copy_of_values_that_are_not_the_loaders_batch_is_not_the_loops_wait() -> None:
    code = """
    import torch
    def train(model, optimizer, batches, device):
        for x in batches:
            x = x.to(device)
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            print(loss.item())
    """
    # `batches` may hold device tensors already: `.to(device)` then copies nothing and waits for nothing
    assert positions(code) == [(9, 15)]


def test_a_count_that_the_while_test_reads_is_not_reported() -> None:
    # (the loop needs the value on the host to know whether to go on)
    code = "import torch\ndef f(model, x):\n    total = 0\n    while total < 10:\n        total += model(x).item()\n"
    assert tl101(code) == []
