"""Loops that wait for the device anyway, reads that wait once, copies that
start host code, and benchmark scripts (TL101, TL102, TL103): the shared
answers in rules/_sync.py and rules/_frequency.py, with their near-misses."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str = "TL101,TL102,TL103", path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


TIMED_BY_METER = """
import torch


def train_epoch(loader, model, optimizer, meter):
    meter.iter_tic()
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).sum()
        loss.backward()
        optimizer.step()
        loss_value, grad = loss.item(), model.weight.grad.norm().item()
        meter.update_stats(loss_value, grad)
        meter.iter_toc()
        torch.cuda.synchronize()
        meter.iter_tic()
"""


def test_a_loop_timed_by_a_meters_tic_and_toc_waits_anyway():
    # The sync brackets the meter's per-iteration timing: TL103 is silent (timing), and
    # the reads cost nothing more in a loop that waits every iteration.
    assert found(TIMED_BY_METER) == []


def test_a_sync_without_a_timer_is_still_reported():
    code = TIMED_BY_METER.replace("meter.iter_toc()", "meter.log()").replace("meter.iter_tic()", "meter.reset()")
    assert found(code) == [("TL101", 11), ("TL101", 11), ("TL103", 14)]


def test_time_synchronized_both_waits_and_reads_the_clock():
    code = """
    import torch
    from utils import time_synchronized


    def evaluate(loader, model, results):
        for imgs, _ in loader:
            start = time_synchronized()
            outputs = model(imgs.cuda())
            infer_time = time_synchronized() - start
            results.append((outputs.cpu(), infer_time))
    """
    assert found(code) == []
    # Untimed, in a loop that also trains: the copy waits for the device each step.
    untimed = code.replace("start = time_synchronized()", "start = 0").replace(
        "infer_time = time_synchronized() - start", "infer_time = 0").replace(
        "outputs = model(imgs.cuda())", "outputs = model(imgs.cuda())\n            optimizer.step()")
    assert found(untimed) == [("TL102", 12)]


def test_a_loop_around_the_step_loop_that_times_whole_passes_does_not_excuse_it():
    code = """
    import time
    import torch


    def profile(model, batches, optimizer):
        for stage, steps in enumerate([10, 20]):
            torch.cuda.synchronize()
            t0 = time.time()
            for k in range(steps):
                loss = model(batches[k]).sum()
                loss.backward()
                optimizer.step()
                print(loss.item())
            torch.cuda.synchronize()
            print(time.time() - t0)
    """
    assert found(code) == [("TL101", 14)]


def test_reading_a_gathered_list_waits_once_where_it_runs():
    code = """
    import torch
    import torch.distributed as dist


    def pad_to_largest(tensor, group):
        world = dist.get_world_size(group=group)
        local = torch.tensor([tensor.numel()], device=tensor.device)
        sizes = [torch.zeros([1], device=tensor.device) for _ in range(world)]
        dist.all_gather(sizes, local, group=group)
        sizes = [int(size.item()) for size in sizes]
        return max(sizes)
    """
    assert found(code) == []


def test_reading_a_list_of_losses_inside_the_step_loop_is_still_per_step():
    code = """
    import torch


    def train(loader, model, optimizer, log):
        for x in loader:
            losses = model(x)
            sum(losses).backward()
            optimizer.step()
            log([one.item() for one in losses])
    """
    assert found(code) == [("TL101", 10)]


def test_reading_every_element_of_a_tensor_is_one_copy_per_element():
    code = """
    import torch


    def train(loader, model, optimizer, sampler):
        for x, t in loader:
            losses = model(x, t)
            losses.mean().backward()
            optimizer.step()
            sampler.update([v.item() for v in losses[: len(t)]])
    """
    assert found(code) == [("TL101", 10)]


DEVICE_NORMALISED = """
import torch


def eval_epoch(loader, model, meter, cfg):
    model.eval()
    with torch.no_grad():
        for inputs, meta in loader:
            preds = model(inputs.cuda(non_blocking=True))
            boxes = meta["boxes"]
            if cfg.NUM_GPUS:
                preds = preds.cpu()
                boxes = boxes.cpu()
                if isinstance(inputs, list):
                    for i in range(len(inputs)):
                        inputs[i] = inputs[i].cpu()
            meter.update_stats(preds, boxes, inputs)
"""


def test_a_copy_made_only_when_the_values_live_on_the_device_starts_host_code():
    assert found(DEVICE_NORMALISED, "TL102") == []
    heatmap = """
    import torch


    def render(self, batches):
        for x in batches:
            heat = self.model(x)
            if heat.device != torch.device("cpu"):
                heat = heat.cpu()
            yield self.colormap(heat)
    """
    assert found(heatmap, "TL102") == []


def test_the_same_copies_under_a_test_that_is_not_about_the_device_are_reported():
    # (in a loop that trains: an evaluation loop's copies feed host code anyway)
    code = DEVICE_NORMALISED.replace("if cfg.NUM_GPUS:", "if cfg.verbose:").replace(
        'boxes = meta["boxes"]', 'boxes = meta["boxes"]\n            optimizer.step()')
    # (`boxes` and `inputs` are parts of the loader's batch, never moved: host
    # values, whose `.cpu()` copies nothing)
    assert found(code, "TL102") == [("TL102", 13)]
    # a copy into another name is not the value brought to the host for what follows
    other = DEVICE_NORMALISED.replace("preds = preds.cpu()", "host_preds = preds.cpu()").replace(
        'boxes = meta["boxes"]', 'boxes = meta["boxes"]\n            optimizer.step()')
    assert found(other, "TL102") == [("TL102", 13)]


BENCH_LOOP = """
import torch


def run(model, batches, optimizer):
    for k in range(len(batches)):
        loss = model(batches[k]).sum()
        loss.backward()
        optimizer.step()
        print(f"{k} loss: {loss.item():.4f}")
"""


def test_a_benchmark_script_measures_on_purpose():
    for path in ("bench.py", "benchmarks/train_speed.py", "tools/benchmark_inference.py", "speed_bench.py"):
        assert found(BENCH_LOOP, path=path) == [], path


def test_the_same_loop_in_a_training_script_is_reported():
    for path in ("train.py", "workbench/train.py", "benchmarking_utils_are_not_a_bench/train.py"):
        assert found(BENCH_LOOP, path=path) == [("TL101", 10)], path


CONTAINER = """
import torch


class MaskGenerator:
    def generate(self, image):
        data = self._generate(image)
        data = self._filter(data, 0.5)
        anns = []
        for idx in range(len(data["scores"])):
            anns.append({"score": data["scores"][idx].item(), "area": box_area(data["boxes"][idx]).item()})
        return anns

    def _generate(self, image):
        data = self.model(image.cuda())
        data.to_numpy()
        return data

    @staticmethod
    def _filter(data, threshold):
        if len(data["scores"]) == 0:
            return data
        data.filter(data["scores"] > threshold)
        return data
"""


def test_a_results_container_the_project_converted_in_place_is_on_the_host():
    assert found(CONTAINER, "TL101", path="generator.py") == []


def test_the_same_container_converted_only_sometimes_may_be_on_the_device():
    code = CONTAINER.replace("        data.to_numpy()\n", "        if self.to_host:\n            data.to_numpy()\n")
    assert found(code, "TL101", path="generator.py") == [("TL101", 11), ("TL101", 11)]
    returned_new = CONTAINER.replace("        data.to_numpy()\n        return data\n", "        return data.clone()\n")
    assert found(returned_new, "TL101", path="generator.py") == [("TL101", 11), ("TL101", 11)]


def test_functions_that_draw_or_convert_for_an_evaluation_api_need_the_host():
    template = """
    import torch


    def {name}(self, outputs, labels):
        rows = []
        for out in outputs:
            out = self.head(out)
            rows.append(out.cpu().numpy())
            labels.append(out.argmax().item())
        return rows
    """
    for name in ("visualize_assign_result", "draw_one_frame", "perform_wrong_prediction_vis", "plot_samples",
                 "convert_to_coco_format", "to_voc_results"):
        assert found(template.format(name=name), "TL101,TL102") == [], name
    for name in ("encode_vocab", "revisit_batches", "forward_visible"):
        # (TL102 reports only code that trains: these functions do not)
        # (without the copy of each row: a loop that copies every item out waits anyway)
        unsaved = template.replace("rows.append(out.cpu().numpy())", "rows.append(out)")
        assert sorted(found(unsaved.format(name=name), "TL101,TL102")) == [("TL101", 10)], name
    assert sorted(found(template.format(name="training_step"), "TL101,TL102")) == [("TL101", 10), ("TL102", 9)]


SAMPLER = """
import torch


def sample_steps(x, seq, model):
    xs, x0_preds = [x], []
    with torch.no_grad():
        for t in reversed(seq):
            xt = xs[-1].to("cuda")
            x0 = model(xt, t)
            x0_preds.append(x0.to("cpu"))
            xs.append((xt - x0).to("cpu"))
    return xs, x0_preds
"""


def test_a_sampler_that_offloads_its_trajectory_keeps_it_on_the_host_on_purpose():
    assert found(SAMPLER, "TL102") == []


def test_the_same_copies_without_the_round_trip_are_reported():
    # (in a loop that trains: a sampler's copies are its results)
    code = SAMPLER.replace('xt = xs[-1].to("cuda")', "xt = x\n            optimizer.step()")
    assert found(code, "TL102") == [("TL102", 12), ("TL102", 13)]


# -- loops that wait on data-dependent operations anyway (precision review) ----------


WAITS_ON_DATA = """
import torch


def sample_proposals(proposals, targets, labels):
    for proposals_per_image, targets_per_image in zip(proposals, targets):
        positive = torch.nonzero(labels >= 1).squeeze(1)
        num_pos = positive.numel()
        stats.append(targets_per_image.sum().item())
"""


def test_a_loop_that_waits_on_a_data_dependent_operation_is_silent():
    assert found(WAITS_ON_DATA, "TL101") == []
    for waits in ("positive = labels.nonzero()", "positive = torch.unique(labels)",
                  "assert torch.isfinite(labels).all()", "if (labels > 0).any(): continue"):
        code = WAITS_ON_DATA.replace("positive = torch.nonzero(labels >= 1).squeeze(1)", waits)
        assert found(code, "TL101") == [], waits


def test_the_same_loop_without_the_wait_or_with_it_conditional_is_reported():
    plain = WAITS_ON_DATA.replace("positive = torch.nonzero(labels >= 1).squeeze(1)", "positive = labels >= 1")
    assert found(plain, "TL101") == [("TL101", 9)]
    conditional = WAITS_ON_DATA.replace(
        "positive = torch.nonzero(labels >= 1).squeeze(1)", "if debug: positive = torch.nonzero(labels)")
    assert found(conditional, "TL101") == [("TL101", 9)]
    # host truth tests and short-circuited reads do not wait
    for test in ("if any(flags): continue", "if np.isnan(value).any(): continue",
                 "if shown < 3 and labels.any(): continue"):
        code = WAITS_ON_DATA.replace("positive = torch.nonzero(labels >= 1).squeeze(1)", test)
        assert found("import numpy as np\n" + code, "TL101") == [("TL101", 10)], test


# -- loops timed by a MetricLogger, flags of flags, helpers named after a model ------


LOG_EVERY = """
import torch


def train_one_epoch(student, data_loader, optimizer, metric_logger, header):
    for it, (images, _) in enumerate(metric_logger.log_every(data_loader, 10, header)):
        loss = student(images)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.synchronize()
        metric_logger.update(loss=loss.item())
"""


def test_a_loop_over_log_every_that_synchronizes_is_a_timing_loop():
    # MetricLogger.log_every reads the clock around each iteration it yields:
    # the synchronize makes those times true, and the read after it waits for nothing more.
    assert found(LOG_EVERY, "TL101,TL103") == []
    plain = LOG_EVERY.replace("enumerate(metric_logger.log_every(data_loader, 10, header))", "enumerate(data_loader)")
    assert found(plain, "TL101,TL103") == [("TL103", 11), ("TL101", 12)]
    # without the synchronize, the read is the loop's wait: reported
    unsynced = LOG_EVERY.replace("        torch.cuda.synchronize()\n", "")
    assert found(unsynced, "TL101") == [("TL101", 11)]


def test_a_flag_made_of_a_periodic_test_and_another_flag_is_periodic():
    code = """
    import torch


    def train_one_epoch(model, dataloader, optimizer, args):
        for i, batch in enumerate(dataloader):
            losses = model(batch)
            losses["loss"].backward()
            optimizer.step()
            last_batch = i == len(dataloader) - 1
            is_console_step = (i % args.log_every == 0) or last_batch
            is_metric_step = (i % 10 == 0) or is_console_step
            if is_metric_step:
                for key, v in losses.items():
                    print(key, v.item())
    """
    assert found(code, "TL101") == []
    assert found(code.replace("if is_metric_step:", "if last_batch or True:"), "TL101") == [("TL101", 15)]


def test_a_method_that_chooses_a_model_is_not_a_model_call():
    code = """
    import torch


    class Predictor:
        def predict(self, img, scale):
            self.choose_model(scale)
            output, _ = self.upsampler.enhance(img, outscale=scale)
            return output
    """
    assert found(code, "TL302") == []
    assert found(code.replace("self.choose_model(scale)", "self.model(img)"), "TL302") == [("TL302", 6)]


def test_optimizer_settings_are_host_values_and_flagged_callers_are_periodic():
    code = """
    import torch


    def get_learning_rate(optimizer):
        lrs = [pg["lr"].item() if isinstance(pg["lr"], torch.Tensor) else pg["lr"] for pg in optimizer.param_groups]
        return max(lrs)


    def train_one_epoch(model, dataloader, optimizer, args):
        for i, batch in enumerate(dataloader):
            loss = model(batch)
            loss.backward()
            optimizer.step()
            is_console_step = i % args.log_every == 0
            if is_console_step:
                print(get_learning_rate(optimizer), loss.item())
    """
    assert found(code, "TL101") == []
    # a value that is not a setting, read by a caller that runs every step: reported
    per_step = code.replace('pg["lr"]', 'pg["grad_norm"]').replace("if is_console_step:", "if True:")
    assert ("TL101", 6) in found(per_step, "TL101")


def test_batch_parts_a_loader_yields_stay_on_the_host_until_moved():
    code = """
    import torch


    def validate(val_loader, decoder, device):
        references = []
        with torch.no_grad():
            for i, (imgs, caps, allcaps) in enumerate(val_loader):
                imgs = imgs.to(device, non_blocking=True)
                scores = decoder(imgs)
                for j in range(allcaps.shape[0]):
                    references.append(allcaps[j].sum().item())
                total = scores.sum().item()
                first = imgs[0].sum().item()
    """
    # allcaps is never moved: the loader collated it in host memory
    assert found(code, "TL101") == [("TL101", 13), ("TL101", 14)]
    # a loader that moves its batches (a CUDA prefetcher) yields device tensors
    prefetched = code.replace("enumerate(val_loader)", "enumerate(cuda_prefetcher)").replace(
        "def validate(val_loader,", "def validate(cuda_prefetcher,")
    assert ("TL101", 12) in found(prefetched, "TL101")


def test_a_module_that_prepares_its_loaders_moves_their_batches():
    code = """
    import torch


    def train(accelerator, model, optimizer, train_loader):
        for batch in train_loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            tokens = batch["attention_mask"].sum().item()


    def main(accelerator, model, optimizer, loader):
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        train(accelerator, model, optimizer, loader)
    """
    assert ("TL101", 10) in found(code, "TL101")
    plain = code.replace("model, optimizer, loader = accelerator.prepare(model, optimizer, loader)", "pass")
    assert ("TL101", 10) not in found(plain, "TL101")
