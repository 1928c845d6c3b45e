from __future__ import annotations

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Valid
from torchlint.rules._program import ProgramFacts, ProgramRule


class NoCompile(ProgramRule):
    """
    ## What it does
    Reports, once per module and outside test files and benchmark scripts
    (`bench` in the file or a directory name: a benchmark measures one
    configuration on purpose), a training program that never uses
    `torch.compile`: a module that

    - is a program's entry point (an `if __name__ == "__main__":` block, a
      top-level loop, `with` block or bare call such as `main()`, or a
      notebook),
    - uses CUDA (`.cuda()`, a `"cuda..."` device string,
      `torch.cuda.set_device(...)`, `cudnn` settings),
    - contains a training step (a function, or top-level code, that calls
      `backward()` and `optimizer.step()`),
    - and never mentions compilation: no `torch.compile` (a call such as
      `model = torch.compile(model)`, a `@torch.compile` decorator, a
      reference), no identifier containing `compile`, `dynamo` or `inductor`
      (a switch such as `args.compile`, a helper such as `compile_model`),
      and keeps no `torch.compile` call commented out (`# model =
      torch.compile(model)`: its author tried compilation and turned it off).
      `re.compile` does not count.

    It is reported at the `backward()` call of the first training step. It
    is silent when the configured `target-torch` is below 2.0, where
    `torch.compile` does not exist.

    Choices where the catalog is silent: training steps driven by Accelerate,
    Lightning Fabric or `manual_backward` are not reported (Accelerate compiles
    through its `dynamo_backend` option, and a LightningModule is usually
    compiled by the script that builds it); a module that never mentions CUDA is
    not reported (for a small model on a CPU the compile time is rarely repaid);
    only entry modules are reported, because the model is usually compiled where
    it is built; a program that imports a reinforcement-learning simulator
    (`gym`, `gymnasium`, `envpool`, `procgen`, `dm_control`, TorchRL's
    `torchrl.envs` and `torchrl.collectors`, ...) is not
    reported, since its step time is spent stepping environments on the host,
    nor one that imports a Gaussian-splatting rasterizer
    (`diff_gaussian_rasterization`, `diff_surfel_rasterization`, `gsplat`: its
    step time is the rasterizer's own CUDA kernels, which the compiler cannot
    trace into, and densification changes the number of Gaussians, so shapes
    change as it trains), nor one that imports MinkowskiEngine (its sparse
    convolutions run in its own C++ coordinate manager and kernels, and the
    number of points changes every batch),
    nor one whose every `DataLoader` loads in the main process (`num_workers`
    absent or `0`): its steps wait for data, which compiling does not change
    (TL203 reports those loaders), nor a module with recurrent layers
    (`nn.LSTM`, `nn.GRU`, `LSTMCell`, `pack_padded_sequence`): cuDNN's fused RNN
    kernels and variable sequence lengths leave little for the compiler to fuse
    and force recompilations; nor one whose model is visibly tiny: a script or notebook that builds
    every layer itself with sizes written as numbers, under 1,000,000 weights in
    all and convolutions at most 32 channels out, and takes no model from
    elsewhere (the full test is in `docs/precision.md`, "a visibly tiny
    model"): a course notebook's linear regression or 2-10-10-1 MLP, whose
    steps are launch-bound; nor a module whose loss takes a gradient of a
    gradient (`torch.autograd.grad(..., create_graph=True)`: an eikonal or
    gradient-penalty term, Wonder3D's NeuS), which compiled autograd does not
    support (double backward runs eagerly, or fails); nor one that batches by
    buckets of length or resolution (an identifier such as
    `DistributedBucketSampler` or `bucket_config`: VITS-style speech
    training, RVC, Open-Sora's multi-resolution video), whose shapes change
    from batch to batch, each new one another compilation; nor a graph
    neural network's example (the program names `edge_index`, `GCNConv`,
    `MessagePassing`, `torch_geometric`, `dgl`, `torch_scatter`, and trains
    for a number of epochs that literals set, `for epoch in range(1, 201):`):
    its batches of graphs differ in nodes and edges from one to the next
    (another shape to compile each time), its message passing is gathers and
    scatters that compiling does not fuse away, and PyTorch Geometric keeps
    compilation in examples of its own, with models rewritten to avoid graph
    breaks (a graph network trained for the epochs its options give, such as
    DiffDock's score model, is reported); nor a program that fits Gaussian
    processes (it imports `gpytorch`, `botorch` or `linear_operator`): its
    Cholesky retries and conjugate-gradient solvers branch on values they
    compute, breaking any compiled graph; nor a program on scikit-learn's
    synthetic or toy data (`make_regression(2000)`, `make_moons(...)`,
    `load_iris()`; not 100,000 samples or more by a literal), whose whole run
    takes seconds; nor a program that trains with
    Opacus (it imports `opacus`): its per-sample gradients come from forward
    and backward hooks on every layer and `grad_sample` bookkeeping, which
    Opacus does not run under `torch.compile`; nor a short run, whose every
    training step sits in loops that literals count, at most 5,000 steps in
    all (`for i in range(300):`, `Niter = 2000; for i in trange(Niter):`, a
    tutorial's or demo's fit), counting the loops around the step in its
    function and, for a step function, around every call of it in the module
    (`for epoch in range(1, 201): loss = train()`, a full-batch fit: 200
    steps). Compilation takes tens of seconds to minutes before the first
    step and a 1.3x speed-up saves about a quarter of each step, so a run of
    a few thousand steps of tens of milliseconds ends before it is repaid. A
    loop over a loader is no short run, whatever the number of passes (ten
    epochs of MNIST at 32 images a batch are 19,000 steps), nor a count read
    from the command line or a configuration (`range(args.epochs)`), a
    parameter, or a `while` loop.

    ## Why is this bad?
    `torch.compile` captures the model's forward and backward passes as
    graphs and generates fused kernels for them, removing Python overhead
    and most of the memory traffic between elementwise operations. On GPUs
    it commonly speeds up training by 1.3x to 2x with one line of code, and
    the eager model stays available for debugging.

    This is advice about the whole program. A model compiled in another
    module of the run counts (`model.compile()` in the `parallelize_model()`
    the script calls: the project index reads the functions this module
    calls from the modules it imports, and the modules that import it; a
    `torch.compile` that runs on import compiles a function, not the model,
    and does not count); compiled where the run cannot see it, it needs
    `# noqa: TL505` on the reported line.

    ## Example
    ```python
    import torch

    model = Net().cuda()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    import torch

    model = torch.compile(Net().cuda())
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    No fix is offered: compilation takes time at start-up (and again when
    input shapes change), can fail on code it cannot trace, and changes the
    low-order bits of results; whether it pays off is the author's call.

    ## References
    - PyTorch tutorial, "Introduction to torch.compile"
    - PyTorch Performance Tuning Guide, "Fuse operations"
    - Hugging Face single-GPU training guide, section "Using torch.compile"
    """

    code = "TL505"
    name = "no-compile"
    summary = "Training program that never uses torch.compile"
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
            model = torch.compile(Net().cuda())
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            if args.compile:
                model = compile_model(model)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import re
            import torch
            pattern = re.compile('x')
            def train(model, loader, optimizer):
                for x in loader:
                    model(x.cuda()).sum().backward()
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            model = Net().cuda()
            Niter = 2000
            for i in range(Niter):
                model(x).sum().backward()
                optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = Net().cuda()
            for epoch in range(10):
                for x in loader:
                    model(x).sum().backward()
                    optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            for epoch in range(10):
                for x in loader:
                    for chunk in x.split(8):
                        model(chunk).sum().backward()
                        optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            model = Net().cuda()
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import re
            import torch
            pattern = re.compile('x')
            model = Net().cuda()
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            """,
        ),
    ]

    def decide(self, facts: ProgramFacts) -> None:
        if facts.compiles or not (facts.entry and facts.uses_cuda) or facts.kernels_do_not_matter() or facts.recurrent:
            return
        if facts.declined_compile():
            return  # `# model = torch.compile(model)`: tried and turned off
        if facts.double_backward:
            return  # a gradient of a gradient (an eikonal loss): compiled autograd does not support it
        if facts.buckets:
            return  # batches bucketed by length or resolution: every bucket's shape is another compilation
        if facts.precise:
            return  # Gaussian processes: solvers that branch on values break compiled graphs
        if facts.per_sample_hooks:
            return  # Opacus: per-sample gradients from forward and backward hooks, which it does not compile
        if facts.graph and facts.literal_runs_only():
            return  # a graph network's example: hard-coded epochs, and each batch of graphs a new shape
        if facts.short_runs_only():
            return  # a demonstration's few hundred steps: compiling takes longer than it saves
        if self.context.target_torch < (2, 0):
            return
        self.report_at_first_step(
            facts,
            "this training program never uses `torch.compile`, so every step runs eagerly, "
            "one kernel per operation with Python overhead in between; compile the model "
            "(`model = torch.compile(model)`) to get fused kernels, often 1.3-2x faster on GPUs",
        )
