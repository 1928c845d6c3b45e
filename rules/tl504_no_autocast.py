from __future__ import annotations

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Valid
from torchlint.rules._program import ProgramFacts, ProgramRule


class NoAutocast(ProgramRule):
    """
    ## What it does
    Reports, once per module and outside test files and benchmark scripts
    (`bench` in the file or a directory name: a benchmark measures one
    configuration on purpose, such as a float32 baseline), a training step
    that runs in full float32 on CUDA: a module that uses CUDA (`.cuda()`, a
    `"cuda..."` device string, `torch.cuda.set_device(...)`, `cudnn`
    settings; `torch.cuda.is_available()` alone does not count), contains a
    training step (a function, or top-level code, that calls `backward()`
    and `optimizer.step()`), and never mentions mixed or reduced precision
    anywhere: no `torch.autocast`,
    `torch.amp.autocast` or `torch.cuda.amp.autocast` (as a `with`, a
    decorator, or a value such as `partial(torch.autocast, ...)`), no
    `GradScaler` or loss scaler, no `half`/`float16`/`bfloat16`, no AMP switch
    (`args.amp`, `use_amp`, `mixed_precision`), no apex or DeepSpeed.

    It is reported at the `backward()` call of the first training step.

    Choices where the catalog is silent:
    - The whole module is searched, not only the step's function: the step is
      often a helper (`train_one_epoch`) called under `with autocast():` by
      its caller, or the autocast context is built once (`ctx =
      torch.autocast(...)`) and used by name.
    - A module that casts its model to `half`/`bfloat16` trains in reduced
      precision without autocast and is not reported.
    - Training steps driven by Accelerate, Lightning Fabric or
      `manual_backward` are not reported: mixed precision is the framework's
      option (`Accelerator(mixed_precision="bf16")`,
      `Fabric(precision="bf16-mixed")`, `Trainer(precision=...)`).
    - A program whose every `DataLoader` loads in the main process
      (`num_workers` absent or `0`) is not reported: its steps wait for data,
      so autocast would not change their pace; TL203 reports those loaders.
    - Nor is a program whose model is visibly tiny: a script or notebook that
      builds every layer itself with sizes written as numbers, under 1,000,000
      weights in all and convolutions at most 32 channels out, and takes no
      model from elsewhere (the full test is in `docs/precision.md`, "a
      visibly tiny model"): a course notebook's linear regression or 2-10-10-1
      MLP, whose steps are launch-bound.
    - A program that imports a reinforcement-learning simulator (`gym`,
      `gymnasium`, `envpool`, `procgen`, `dm_control`, TorchRL's
      `torchrl.envs`, ...) is not reported:
      its step time is spent stepping environments on the host and in small
      policy networks, where autocast buys nothing measurable. Nor is one that
      imports a Gaussian-splatting rasterizer (`diff_gaussian_rasterization`,
      `diff_surfel_rasterization`, `gsplat`): its step time is the
      rasterizer's own float32 CUDA kernels, which autocast does not touch;
      nor one that imports MinkowskiEngine, whose sparse convolutions have no
      half-precision kernels (under autocast they fail with a type mismatch).
    - A program that fits Gaussian processes (it imports `gpytorch`,
      `botorch` or `linear_operator`) is not reported: its Cholesky
      factorizations and conjugate-gradient solves on kernel matrices need
      float32 (often float64), and autocast would make them fail or drift.
    - A program that trains in float64 on purpose (`model = model.double()`,
      `model.to(torch.float64)` on a model whose `.parameters()` it reads, or
      `torch.set_default_dtype(torch.float64)`) is not reported: autocast
      leaves float64 operations alone, and TF32 is a float32 mode.
    - A program on scikit-learn's synthetic or toy data (`make_regression(2000)`,
      `make_moons(...)`, `load_iris()`; not 100,000 samples or more by a
      literal) is not reported: its whole run takes seconds.
    - A program that asks for reproducible kernels (`cudnn.deterministic =
      ...` or `torch.use_deterministic_algorithms(...)` with anything but the
      literal `False`, often `args.torch_deterministic`) is not reported:
      it chose reproducibility over speed, and autocast would change its
      results from run to run or against its reference.
    - A graph neural network (the program names `edge_index`, `GAT`, `GCN`,
      `GCNConv`, `MessagePassing`, `torch_geometric`, `dgl`, ...) is not
      reported: gathers and scatters over edges set its pace, and its
      matmuls are small, so autocast buys nothing measurable. (A linear probe
      or a small MLP is reported: from the code alone it cannot be told
      from a wide MLP that is matmul-bound, such as NeRF's.)
    - A fit of a few parameters through elementwise math is not reported:
      the program names no matrix product, convolution, recurrent layer,
      attention or model anywhere (`conv`, `linear`, `matmul`, `@`, `lstm`,
      `model`, `net`, `encoder`, ..., in any spelling), builds none, and takes
      none from elsewhere (an imported class, a `build_model(...)`-like
      helper, a hub or pretrained model): autocast changes only the
      precision of matmuls and convolutions, so it has nothing to speed up
      (kaolin's lighting tutorials).
    - A module that never mentions CUDA is not reported (CPU autocast
      exists, but the documented gains are on GPUs with tensor cores).
    - Unlike the other whole-program rules, the module need not be an entry
      point: autocast belongs in the step itself.

    Known limitation: how big the model and its inputs are is not in the
    code. On small models (a LeNet or a GAN on 28x28 MNIST, a linear probe, a
    256-unit character RNN, a toy example), whose steps are bound by kernel
    launches, autocast buys nothing measurable and the finding is noise; on the
    8 tutorial-heavy projects of the last precision set, 4 of 17 TL504
    findings were worth acting on (docs/precision.md). It is why the rule is
    opt-in.

    ## Why is this bad?
    On GPUs with tensor cores, matrix multiplications and convolutions in
    float16 or bfloat16 run several times faster than in float32, and
    activations take half the memory, which allows larger batches.
    `torch.autocast` runs each eligible operation in reduced precision while
    keeping precision-sensitive ones (reductions, softmax, losses) in
    float32, so most models train to the same accuracy. The PyTorch
    Performance Tuning Guide reports up to 3x speed-ups on Volta and newer
    GPUs.

    This is advice about the whole program. Reduced precision set up in
    another module of the run counts (an FSDP `MixedPrecisionPolicy` in the
    `parallelize_model()` the script calls, autocast in the script that
    imports the module with the step, a simulator it steps: the project
    index reads the top-level code of the modules this one imports, the
    functions it calls from them, and the modules that import it); set up
    where the run cannot see it, it needs `# noqa: TL504` on the reported
    line.

    ## Example
    ```python
    import torch

    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    import torch

    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()  # outside autocast
        optimizer.step()
    ```
    With `float16`, also scale the loss with `torch.amp.GradScaler("cuda")`.

    ## Fix safety
    No fix is offered: where the autocast region starts and ends, which dtype
    to use (bfloat16 needs Ampere or newer; float16 needs a `GradScaler`),
    and whether the model tolerates reduced precision are the author's
    decisions.

    ## References
    - PyTorch Performance Tuning Guide, "Use mixed precision and AMP"
    - PyTorch documentation, "Automatic Mixed Precision examples"
    - Hugging Face single-GPU training guide, section "Mixed precision training"
    """

    code = "TL504"
    name = "no-autocast"
    summary = "Training step without autocast (mixed precision)"
    default = False
    fix = FixAvailability.NONE

    VALID = [
        Valid(
            """
            import gymnasium as gym
            import torch
            envs = gym.make('CartPole-v1')
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            torch.backends.cudnn.deterministic = args.torch_deterministic
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                with torch.autocast('cuda', dtype=torch.bfloat16):
                    loss = model(x.cuda()).sum()
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            scaler = torch.amp.GradScaler('cuda')
            for x in loader:
                scaler.scale(model(x.cuda()).sum()).backward()
                scaler.step(optimizer)
            """
        ),
        Valid(
            """
            import torch
            for x in loader:
                accelerator.backward(model(x.cuda()).sum())
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            for x in loader:
                loss = model(x.cuda()).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            def train_step(model, x, optimizer):
                loss = model(x.to('cuda')).sum()
                loss.backward()
                optimizer.step()
            """,
        ),
    ]

    def decide(self, facts: ProgramFacts) -> None:
        if facts.reduced_precision or not facts.uses_cuda or facts.quiet_reason() or facts.float64():
            return
        if facts.no_tensor_core_work():
            return  # elementwise math only: autocast has no matmul or convolution to run in half precision
        self.report_at_first_step(
            facts,
            "this training step runs in full float32: without `torch.autocast` its matmuls and "
            "convolutions cannot use the GPU's tensor cores in bfloat16/float16, which the "
            "Tuning Guide measures at up to 3x faster; run the forward pass and loss under "
            "`with torch.autocast(\"cuda\", dtype=torch.bfloat16):`",
        )
