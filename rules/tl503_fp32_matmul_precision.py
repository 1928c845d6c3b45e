from __future__ import annotations

from torchlint.model import FixAvailability
from torchlint.rule import Invalid, Valid
from torchlint.rules._program import ProgramFacts, ProgramRule


class Fp32MatmulPrecision(ProgramRule):
    """
    ## What it does
    Reports, once per module and outside test files and benchmark scripts
    (`bench` in the file or a directory name: a benchmark measures one
    configuration on purpose, such as a float32 baseline), a program that
    trains in float32 on CUDA without allowing TF32 for matrix
    multiplications: a module that

    - is a program's entry point (an `if __name__ == "__main__":` block, a
      top-level loop, `with` block or bare call such as `main()`, or a
      notebook),
    - uses CUDA (`.cuda()`, a `"cuda..."` device string,
      `torch.cuda.set_device(...)`, `cudnn` settings),
    - contains a training step (a function, or top-level code, that calls
      `backward()` and `optimizer.step()`),
    - and never mentions a float32 matmul precision setting:
      `torch.set_float32_matmul_precision(...)`,
      `torch.backends.cuda.matmul.allow_tf32`,
      `torch.backends.cudnn.allow_tf32`, the newer `fp32_precision`
      attributes, or a switch named like them (`args.tf32`).

    It is reported at the `backward()` call of the first training step.

    Choices where the catalog is silent:
    - Any mention counts as a decision, including
      `set_float32_matmul_precision("highest")` or `allow_tf32 = False`: the
      module chose its precision on purpose.
    - `torch.backends.cudnn.allow_tf32` (convolutions; already `True` by
      default) counts as a decision too, although the advice is about
      matmuls: a module that sets it has thought about TF32.
    - A module that trains in reduced precision is not reported: under
      `torch.autocast` (bf16/fp16) matmuls already run on tensor cores and TF32
      would only affect the few float32 matmuls left. So any mention of
      autocast, AMP, a `GradScaler`, `half`/`float16`/`bfloat16`, apex or
      DeepSpeed keeps the rule silent.
    - Training steps driven by Accelerate, Lightning Fabric or
      `manual_backward` are not reported (their precision is a framework
      option, often set outside the module).
    - Only a matmul-heavy model is reported: the module names a model of
      the transformer family (`GPT`, `Bert...`, `Llama...`, `vit_...`,
      `swin_...`, as a name or a model string such as
      `create_model("vit_base_patch16_224")`), or it builds matmul layers or
      operations (`nn.Linear`, attention, `torch.matmul`, `@`, ...) and no
      convolution, nor a convolutional network named by its family
      (`resnet50`, `vgg19`, `efficientnet_b0`, ...: `models.resnet50()`,
      `--arch resnet50`). cuDNN convolutions already use TF32 by default, so a
      convolutional network with a linear classifier head gains little, and
      a model built elsewhere under another name is not reported.
    - Only entry modules are reported (a library module that defines
      `train_one_epoch` leaves process-wide settings to the program), and
      only modules that put work on CUDA (`torch.cuda.is_available()` alone
      does not count).
    - A program whose every `DataLoader` loads in the main process
      (`num_workers` absent or `0`) is not reported: its steps wait for data,
      so TF32 would not change their pace; TL203 reports those loaders.
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
      policy networks, where TF32 buys nothing measurable; nor one that
      imports a Gaussian-splatting rasterizer (`diff_gaussian_rasterization`,
      `diff_surfel_rasterization`, `gsplat`), whose step time is the
      rasterizer's own CUDA kernels, or MinkowskiEngine (its own sparse
      convolution kernels).
    - A program that fits Gaussian processes (it imports `gpytorch`,
      `botorch` or `linear_operator`) is not reported: its Cholesky
      factorizations and conjugate-gradient solves on kernel matrices need
      float32 (often float64), and TF32 would make them fail or drift.
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
      it chose reproducibility over speed, and TF32 would change its
      results from run to run or against its reference.
    - A graph neural network (the program names `edge_index`, `GAT`, `GCN`,
      `GCNConv`, `MessagePassing`, `torch_geometric`, `dgl`, ...) is not
      reported: gathers and scatters over edges set its pace, and its
      matmuls are small, so TF32 buys nothing measurable. (A linear probe
      or a small MLP is reported: from the code alone it cannot be told
      from a wide MLP that is matmul-bound, such as NeRF's.)

    Known limitation: how big the model and its inputs are is not in the
    code. On small models (a LeNet or a GAN on 28x28 MNIST, a linear probe, a
    256-unit character RNN, a toy example), whose steps are bound by kernel
    launches, TF32 buys nothing measurable and the finding is noise
    (docs/precision.md). It is why the rule is opt-in.

    ## Why is this bad?
    On NVIDIA GPUs since Ampere (A100, RTX 30xx and later), float32 matrix
    multiplications can run on tensor cores in TF32, which keeps float32's
    range with a 10-bit mantissa and is several times faster. PyTorch keeps
    matmuls in full float32 by default (`"highest"`), so a float32 training
    run leaves most of the GPU's matmul throughput unused unless it opts in.
    Deep-learning training is rarely sensitive to the reduced mantissa.

    This is advice about the whole program. A setting made in another module
    of the run counts (the project index reads the top-level code of the
    modules this one imports, the functions it calls from them, and the
    modules that import it); one made where the run cannot see it needs
    `# noqa: TL503` on the reported line.

    ## Example
    ```python
    import torch

    for x, y in loader:
        loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    import torch

    torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere+
    for x, y in loader:
        loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    No fix is offered: TF32 changes the numerical results (a shorter
    mantissa in matmul inputs), which is a choice the author must make.

    ## References
    - PyTorch documentation, "CUDA semantics", section "TensorFloat-32 (TF32) on Ampere (and later) devices"
    - `torch.set_float32_matmul_precision` documentation
    - Hugging Face single-GPU training guide, section "Mixed precision training", subsection "TF32"
    """

    code = "TL503"
    name = "fp32-matmul-precision"
    summary = "Float32 training without TF32 matmuls"
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
            torch.set_float32_matmul_precision('high')
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
            def train(model, loader, optimizer):
                for x in loader:
                    model(x.cuda()).sum().backward()
                    optimizer.step()
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            model = torch.nn.Linear(1024, 1024).cuda()
            for x in loader:
                model(x.cuda()).sum().backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import torch
            model = GPT(config).cuda()
            def train(model, loader, optimizer):
                for x in loader:
                    model(x.cuda()).sum().backward()
                    optimizer.step()

            if __name__ == '__main__':
                train(model, loader, optimizer)
            """,
        ),
    ]

    def decide(self, facts: ProgramFacts) -> None:
        if facts.tf32_set or facts.reduced_precision or not (facts.entry and facts.uses_cuda):
            return
        if facts.quiet_reason() or facts.float64():
            return  # input- or simulator-bound, or a program that chose reproducible kernels
        if not facts.matmul_heavy():
            return  # a convolutional network: cuDNN convolutions use TF32 by default
        self.report_at_first_step(
            facts,
            "this program trains in float32 but never allows TF32 matmuls, so on Ampere and "
            "newer GPUs its matrix multiplications run in full float32 instead of on tensor "
            "cores, several times slower; call `torch.set_float32_matmul_precision(\"high\")` "
            "once at start-up",
        )
