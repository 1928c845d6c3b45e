"""Focused tests for TL102 (host-copy-in-loop)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes, lint


def tl102(code: str, path: str = "snippet.py"):
    return lint(code, select=["TL102"], path=path)


def positions(code: str, path: str = "snippet.py"):
    return [(d.line, d.column) for d in tl102(code, path)]


def test_one_report_per_chain_at_its_outermost_call() -> None:
    code = """
    import torch
    for x in loader:
        optimizer.step()
        a = model(x).detach().cpu().numpy().tolist()
        b = x.cpu().numpy(force=True)
        c, d = x.cpu(), y.cpu()
    """
    diagnostics = tl102(code)
    assert [(d.line, d.column) for d in diagnostics] == [(5, 9), (6, 9), (7, 12), (7, 21)]
    # the first report spans the whole chain, up to `.tolist()`
    first = diagnostics[0]
    assert (first.end_line, first.end_column) == (5, 49)


def test_chains_ending_in_item_or_tolist_are_reported_once_between_tl101_and_tl102() -> None:
    code = """
    import torch
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.step()
        a = loss.cpu().item()
        b = loss.to("cpu").tolist()
        c = loss.item()
    """
    diagnostics = lint(code, select=["TL101", "TL102"])
    assert [(d.line, d.code) for d in diagnostics] == [(6, "TL102"), (7, "TL102"), (8, "TL101")]


@pytest.mark.parametrize(
    "copy",
    [
        'y = x.to("cpu")',
        'y = x.to("cpu:0")',
        'y = x.to(device="cpu")',
        'y = x.to(torch.device("cpu"))',
        'y = x.to("cpu", non_blocking=False)',
        "y = x.numpy(force=True)",
        "y = x.cpu(memory_format=torch.contiguous_format)",
    ],
)
def test_kinds_of_host_copy(copy: str) -> None:
    assert codes(tl102(f"import torch\nfor x in loader:\n    optimizer.step()\n    {copy}\n")) == ["TL102"]


@pytest.mark.parametrize(
    "line",
    [
        "y = x.numpy()",
        "y = x.detach().numpy()",
        "y = x.numpy(force=False)",
        'y = x.to("cpu", non_blocking=True)',
        'y = x.to("cpu", non_blocking=flag)',
        "y = x.to(device)",
        "y = x.to(torch.float16)",
        "y = x.to(*args)",
        "y = x.to(other)",
        "y = x.cuda()",
        "x.cpu()",
        "model.cpu()",
        "y = self.model.cpu()",
        "y = ema_model.to('cpu')",
        "y = backbone.cpu()",
        "y = resnet.cpu()",
        "params = list(m.cpu().parameters())",
        "y = model2.cpu()",
        "y = self.text_encoder.to('cpu')",
    ],
)
def test_not_a_host_copy_of_data(line: str) -> None:
    assert tl102(f"import torch\nfor x in loader:\n    {line}\n") == []


def test_loops_over_modules() -> None:
    code = """
    import torch
    def offload(models, net):
        moved = [m.cpu() for m in models]
        for child in net.children():
            kept = child.cpu()
        for name, sub in net.named_modules():
            kept = sub.cpu()
        for batch in loader:
            optimizer.step()
            out = net(batch).cpu()
    """
    assert positions(code) == [(11, 15)]


def test_outside_a_loop_and_periodic_guard() -> None:
    code = """
    import torch
    def training_step(self, x):
        y = x * 2
        for i in range(x.cpu().shape[0]):
            self.optimizer.step()
            if i % 10 == 0:
                log(x.cpu())
            else:
                log(y.cpu())
    """
    assert positions(code) == [(10, 17)]


def test_while_loop_and_comprehensions() -> None:
    code = """
    import torch
    while running:
        optimizer.step()
        out = model(next(it)).cpu()
    arrays = [t.detach().cpu().numpy() for t in outputs]
    total = sum(t.cpu().sum() for t in outputs)
    """
    # (the comprehensions at the top level run once: only the `while`, which runs a model, is a loop of steps)
    assert positions(code) == [(5, 11)]


def test_runs_once_per_loop() -> None:
    code = """
    import torch
    def search(model, loader, target):
        for i, x in enumerate(loader):
            out = model(x)
            optimizer.step()
            if i == 0:
                first = out.cpu()
            if i == len(loader) - 1:
                last = out.cpu()
            if is_bad(out):
                raise ValueError(out.cpu())
            if out.max() > target:
                best = out.cpu()
                break
        for label in labels:
            optimizer.step()
            if label == 0:
                zeros = label.cpu()
    """
    # `label == 0` is a value test, not the loop counter: it can hold many times
    assert positions(code) == [(19, 21)]


def test_epoch_loops_are_not_per_step() -> None:
    code = """
    import torch
    def fit(model, loader, epochs):
        for epoch in range(epochs):
            for x in loader:
                model(x).backward()
                per_step = model.weight.grad.norm().cpu()
            per_epoch = model.head(x).cpu()
        for epoch_idx, batch in enumerate(loader):
            per_epoch = batch.cpu()
    """
    assert positions(code) == [(7, 24)]


@pytest.mark.parametrize(
    "loop",
    [
        "for name, p in model.named_parameters():\n        host[name] = p.detach().cpu()",
        "for k, v in state_dict.items():\n        host[k] = v.cpu()",
        "for key, tensor in ckpt['model'].items():\n        host[key] = tensor.cpu()",
        "for g in grads:\n        host.append(g.cpu())",
        "for p0, p1 in zip(params_before, params_after):\n        same = torch.equal(p0.cpu(), p1.cpu())",
        "host = {k: v.cpu() for k, v in module.state_dict().items()}",
        "host = [b.cpu() for b in net.buffers()]",
    ],
)
def test_copying_weights_is_the_work(loop: str) -> None:
    code = f"import torch\ndef export(model, module, net, state_dict, ckpt, grads, host):\n    {loop}\n"
    assert tl102(code) == []


def test_functions_that_build_checkpoints() -> None:
    code = """
    import torch
    def full_optimizer_state_dict(sharded):
        for group, tensors in sharded.items():
            for key, value in tensors.items():
                out[key] = value.full_tensor().cpu()
    def save_checkpoint(shards):
        return {key: shard.cpu() for key, shard in shards.items()}
    def training_step(shards):
        return [shard.cpu() for shard in shards]
    """
    assert positions(code) == [(10, 13)]


def test_standalone_comprehension_of_concatenations() -> None:
    code = """
    import torch
    def finish(stats, loader):
        arrays = [torch.cat(column, 0).cpu().numpy() for column in zip(*stats)]
        for x in loader:
            optimizer.step()
            parts = [torch.cat(p).cpu() for p in x]
    """
    assert positions(code) == [(7, 18)]


def test_test_files_are_skipped() -> None:
    # tests copy results to compare them with reference values (often computed
    # with NumPy or scikit-learn); a per-iteration wait costs only test time
    code = """
    import torch
    def test_round_trip(model, loader, expected):
        for x, y in loader:
            y = y.to(device, non_blocking=True)
            optimizer.step()
            same = torch.allclose(model(x).cpu(), y)
            reference = sklearn_metric(y.cpu().numpy(), model(x).cpu().numpy())
            out = model(x).cpu()
    """
    assert positions(code, "tests/test_model.py") == []
    assert positions(code, "src/pkg/test_model.py") == []
    assert len(positions(code, "train.py")) == 4


def test_nested_function_in_loop_is_its_own_scope() -> None:
    code = """
    import torch
    for x in loader:
        def to_host(t):
            return t.cpu()
        handler = lambda t: t.cpu()
    """
    assert tl102(code) == []


@pytest.mark.parametrize("name", ["model_output", "encoder_out", "net_input", "head_logits", "layer_acts"])
def test_data_named_after_a_module_is_still_data(name: str) -> None:
    assert codes(tl102(f"import torch\nfor x in loader:\n    optimizer.step()\n    y = {name}.cpu()\n")) == ["TL102"]


def test_host_consumers_and_one_off_functions() -> None:
    code = """
    import torch
    import bitsandbytes as bnb
    def rollout(agent, env, obs, steps):
        for _ in range(steps):
            obs, *_ = env.step(agent(obs).cpu().numpy())
    def merge(layer, names):
        for name in names:
            layer.weight = bnb.nn.Int8Params(layer.delta(name).to("cpu"), requires_grad=False)
    def save_progress(encoder, tokens):
        for t in tokens:
            torch.save(encoder(t).detach().cpu(), t)
    def export_mesh(mesh):
        return [mesh.channels[c].cpu().numpy() for c in "RGB"]
    class Head:
        def __init__(self, layers):
            self.bias = [l.bias.detach().cpu() for l in layers]
    def assert_outputs_close(a, b):
        for x, y in zip(a, b):
            print(x.cpu(), y.cpu())
    def train(model, loader, log, storage):
        for x in loader:
            out = model(x)
            optimizer.step()
            log.append(out.cpu())
            storage.write(out.cpu().numpy().tobytes())
    """
    assert positions(code) == [(25, 20)]


def test_mappings_conversions_pipelines_and_interactive_loops() -> None:
    code = """
    import torch
    from torch.utils.data import Dataset
    def log_metrics(metrics, writer):
        for key, value in metrics.items():
            writer.add(key, value.cpu())
    def prepare(images):
        arrays = []
        for img in images:
            if isinstance(img, torch.Tensor):
                img = img.cpu().numpy()
            arrays.append(img)
        return arrays
    class Images(Dataset):
        def __init__(self, raw):
            self.items = [(r * 255).byte().cpu() for r in raw]
    def chat(model, tok):
        while True:
            ids = model(tok(input("> ")))
            print(ids.cpu())
    def train(model, loader, history):
        for x in loader:
            terms = model(x)
            optimizer.step()
            history.append({k: v.cpu() for k, v in terms.items()})
    """
    assert positions(code) == [(25, 28)]


def test_modules_running_onnx_or_tensorrt_models() -> None:
    code = """
    import torch
    import onnxruntime
    def denoise(session, latents, timesteps):
        for t in timesteps:
            latents = session.run(None, {"x": latents.cpu().numpy()})[0]
    """
    assert tl102(code) == []


# -- host copies that are the point, code that runs once (precision review) -------------


def test_copy_written_to_an_image_file_is_silent():
    code = """
        import numpy as np
        import torch
        from PIL import Image

        def sample(model, loader, outdir):
            for i, x in enumerate(loader):
                images = model(x)
                for j, image in enumerate(images):
                    array = (255 * image.cpu().numpy()).astype(np.uint8)
                    Image.fromarray(array).save(f"{outdir}/{i}_{j}.png")
    """
    assert tl102(code) == []


def test_copy_handed_to_a_plot_in_the_same_statement_is_silent():
    code = """
        import torch

        def validate(model, loader, writer, step):
            for j, (x, y) in enumerate(loader):
                y_hat = model(x)
                writer.add_figure(f"gen/{j}", plot_spectrogram(y_hat.cpu().numpy()), step)
    """
    assert tl102(code) == []


def test_copy_kept_for_later_is_reported_in_a_training_loop_only():
    code = """
        import torch

        def predict(model, loader):
            outputs = []
            for x in loader:
                y = model(x)
                outputs.append(y.cpu())
            return outputs
    """
    # Inference collects its outputs for host code: the copy is the point.
    assert positions(code) == []
    training = code.replace("y = model(x)", "y = model(x)\n                loss_fn(y).backward()")
    assert positions(training) == [(9, 24)]


def test_setup_snapshot_is_silent():
    # Runs once before training, in a loop over a few grid cells.
    code = """
        import torch

        def training_loop(G, loader, opt, grid_z):
            images = [G(z).cpu() for z in grid_z]
            save_grid(images, "fakes_init.png")
            for x in loader:
                loss = G.loss(x)
                loss.backward()
                opt.step()

        if __name__ == "__main__":
            training_loop(G, loader, opt, grid_z)
    """
    assert tl102(code) == []


def test_actions_copied_for_an_environment_step_later_in_the_loop():
    # The copy is assigned first and handed to `envs.step` a few lines later.
    code = """
        import torch
        def rollout(envs, q_network, obs, device, steps):
            for step in range(steps):
                q_values = q_network(torch.Tensor(obs).to(device))
                actions = torch.argmax(q_values, dim=1).cpu().numpy()
                next_obs, rewards, dones, infos = envs.step(actions)
                obs = next_obs
    """
    assert lint(textwrap.dedent(code), select=["TL102"]) == []
    # The same copy in a loop that also trains, kept in a replay buffer: reported.
    trained = textwrap.dedent(code).replace("envs.step(actions)", "buffer.add(actions)").replace(
        "obs = next_obs", "obs = next_obs\n        optimizer.step()")
    assert codes(lint(trained, select=["TL102"])) == ["TL102"]


def test_copies_gathered_to_be_saved_after_the_loop():
    code = """
        import numpy as np
        import torch
        def sample(model, batches, out_path):
            all_images = []
            for noise in batches:
                images = model(noise)
                all_images.extend([img.cpu().numpy() for img in images])
            arr = np.concatenate(all_images, axis=0)
            np.savez(out_path, arr)
    """
    assert lint(textwrap.dedent(code), select=["TL102"]) == []
    # Gathered but not written out: the copies are only waiting for the device.
    kept = textwrap.dedent(code).replace("    np.savez(out_path, arr)\n", "    return arr.mean()\n").replace(
        "images = model(noise)", "images = model(noise)\n        loss_fn(images).backward()")
    assert codes(lint(kept, select=["TL102"])) == ["TL102"]


def test_evaluation_metrics_on_host_copies_are_reported_host_functions_are_not():
    code = """
        import numpy as np
        import torch

        @torch.no_grad()
        def evaluate(model, loader):
            correct = 0
            for images, labels in loader:
                labels = labels.to(images.device, non_blocking=True)
                predictions = model(images).argmax(dim=1)
                correct += int((predictions.cpu().numpy() == labels.cpu().numpy()).sum())
                classes = np.unique(predictions.cpu().numpy())
                save_image(tensor2img(images.cpu()), "out.png")
            return correct
    """
    # the comparison could run on the device; NumPy's unique and the image helpers need the host
    assert positions(code) == [(11, 25), (11, 54)]



def test_a_host_copy_at_the_end_of_a_loop_that_starts_with_a_blocking_copy() -> None:
    code = """
    import torch
    def train(model, loader, optimizer, device):
        losses = []
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().cpu())
        return losses
    """
    # the next iteration's blocking copy waits for the same work
    assert lint(code, select=["TL102"]) == []
    # a copy that does not wait: the host copy is the loop's wait
    (d,) = lint(code.replace("x.to(device)", "x.to(device, non_blocking=True)"), select=["TL102"])
    assert d.line == 10
