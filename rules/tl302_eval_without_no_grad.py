from __future__ import annotations

import re
from typing import Dict, List, Tuple

import libcst as cst

from torchlint.codemods import statements
from torchlint.model import Applicability, Fix, FixAvailability
from torchlint.names import dotted_name
from torchlint.nodes import target_names
from torchlint.rule import Benchmark, Invalid, Rule, Valid
from torchlint.rules._eval_calls import (CallSites, Frame, closure_under_no_grad, helper_without_gradients,
                                         runs_evaluated, runs_rarely)
from torchlint.rules._frequency import runs_once_by_path
from torchlint.rules._helpers import chain_root, last_name, literal_bool, method_name
from torchlint.rules._models import FORWARD_METHODS, is_model_call, module_like_base, runs_on_dummy_inputs
from torchlint.rules._project import called_elsewhere_for_training, called_elsewhere_with_gradients, called_elsewhere_without_gradients
from torchlint.rules._sync import draws, feeds_model_runtime, mentions_name
from torchlint.rules._training import (
    GRAD_OFF,
    GRAD_ON,
    EVALUATION_NAME,
    TRAINING_NAME,
    called_without_gradients,
    decorator_grad_mode,
    framework_runs_without_grad,
    grad_mode,
    grad_mode_statement,
    is_gradient_attribute,
    needs_gradients,
    with_grad_modes,
)

# A function that measures the model once (`get_model_flops`, `get_model_complexity_info`, `get_model_summary`).
_MEASURES = re.compile(r"flops|complexity|macs|summary", re.IGNORECASE)


class EvalWithoutNoGrad(Rule):
    """
    ## What it does
    Reports a function that runs a model for evaluation or inference without
    disabling gradient tracking. A function is a candidate when it puts a model
    in eval mode (`model.eval()`, `model.to(device).eval()`) or is named like
    evaluation (`eval*`, `valid*`, `predict*`, `infer*`, and `test*` outside
    test files; case and leading underscores ignored). It is reported when it
    also:

    - calls a model outside any `with torch.no_grad():`,
      `with torch.inference_mode():` or `with torch.set_grad_enabled(...):`
      block. "Calls a model" means calling (or calling `.forward(...)` on)
      something the function put in eval mode (`model.eval()` ... `model(x)`);
      in a function named like evaluation, also `self` in a class with an
      `nn.Module`-like base, a name that says it is a network (`model`,
      `self.net`, `netG`, `module`, `backbone`, `text_encoder`, `ema_model`,
      `model_without_ddp`...), and, in a loop, a method of the model put in
      eval mode given data (`agent.get_action(obs)` after `agent.eval()`;
      not one that sets it up or moves it: `load_state_dict`, `to`, `fuse`,
      `set_*`...). Other calls are not model calls:
      `compute_metrics(preds, labels)`, `np.mean(...)`, factories such as
      `get_model(cfg)`/`build_net()`, a class (`Detector(opt)` builds a
      model, it runs nothing), imported functions, a method of something else
      put in eval mode (`env.eval()` then `env.step(action)`), and
      `model.generate(...)` (Hugging Face's and LitGPT's `generate` already
      run without gradients);
    - does nothing that needs gradients: no `.backward()`, `torch.autograd.*`,
      `.grad`, `.requires_grad_()`/`.requires_grad = ...`,
      `requires_grad=True`, `torch.enable_grad()`, `torch.func` transforms,
      `zero_grad()` or optimizer step (saliency maps, adversarial examples,
      gradient penalties and test-time training stay silent).

    Not reported:
    - a function whose name says it draws or shows its inputs (`visualize`,
      `plot_samples`, `draw_*`, `vis_batch`): it runs a few inputs, each
      handed to a window or a figure, and the host sets its pace;
    - functions decorated with `@torch.no_grad()`, `@torch.inference_mode()`,
      `@torch.enable_grad()`, `@torch.set_grad_enabled(...)`, `@torch.jit.*`,
      or a decorator or context manager of one's own whose name mentions
      `grad` or `inference` (`@smart_inference_mode()`), or a
      `@contextmanager` of the module that yields inside a block turning
      gradients off (`with self._set_training_mode(False):` where
      `_set_training_mode(training)` yields inside
      `torch.set_grad_enabled(training)`; given a literal True there, it
      turns them on, like `torch.enable_grad()`); functions that call
      `torch.set_grad_enabled(False)` as a statement or
      `stack.enter_context(torch.no_grad())`; every function of a module that
      calls `torch.set_grad_enabled(False)` at the top level;
    - functions whose every call site in the same module runs without
      gradients: under `no_grad` there, or inside a function whose own call
      sites all do (followed a few levels up); for a method, a
      `self.name(...)` call counts only in its class, a base or a subclass
      (in another algorithm class, `self.predict(x)` is that class's own).
      A function called nowhere in
      its module (or only from such functions) is asked of the other modules
      of the run through the project index: silent when every call found
      there runs under `with torch.no_grad():`/`torch.inference_mode()` (the
      innermost grad mode around the call) or in a function decorated so, or
      in a function whose every call in its module does (followed a few
      levels up, its name written there only by its definitions and those
      calls: a base class's `evaluate` calls `self._valid_batch_loop()` under
      `no_grad`, which calls the subclass's `_validate` hook),
      or in a function that nothing in its own module calls (its name written
      there only by its definitions) and whose own callers elsewhere all do,
      followed across modules as far as the index's hops go (LAVIS: a
      task's `valid_step` calls `model.predict_answers(...)`,
      `BaseTask.evaluation` in another module calls `valid_step`, and the
      runner's `@torch.no_grad()` `eval_epoch` calls `evaluation`),
      and reported when one runs with gradients on or none is found (with
      pre-commit, which passes only the changed files, the callers may not be
      in the run; see docs/precision.md). For a method, the index also counts
      calls of its name on a receiver of unknown class
      (`self.policy.predict_values(obs)`, `network.predict(x)` in a helper
      handed the algorithm), in any module when at most six files call a
      method of that name, else only in those that import its module. A function known only by its name (no `.eval()`) that is
      called, with gradients on, from a training function (one that
      backpropagates or steps, or is named `forward`/`*train*`/`*loss*`), in
      its module or another, is
      not reported either: its result may feed a loss (`predict_noise` in a
      diffusion model, `evaluate_actions` in PPO's update). Nor is a method of
      an `nn.Module` class known only by its name (no `.eval()`) that no
      call with gradients on reaches, in its module or through the index (a
      model's `inference` or `test_invertibility` that nothing in the project
      calls: its caller, if any, owns the grad mode); in its module, calls
      from methods of model classes (a subclass of one included) that are
      themselves reached only that way count as no call (a vocoder's
      `inference` calling `self.synthesis`, which calls
      `self.duration_predictor.inference`: the decoding scripts that call
      the outermost one decide). Nor is a nested function known only by its name and
      never called in the module (a callback handed to an evaluator), nor one
      defined in a function that disables gradients in a `with` block
      (airbench's test-time-augmentation helpers, picked from a list and
      called under the enclosing `infer`'s `torch.no_grad()`); a call of a
      helper function of the module that disables gradients itself (decorated
      with `@torch.no_grad()`, or its body one `with torch.no_grad():` block:
      stanza's `model_predict(model, ...)`) counts as a call without them;
    - a function that switches the model to training mode and then runs it
      (`if train: model.train() ... else: model.eval()`, then `model(x)`): it
      serves training too (`model.train()` at the end, restoring the mode
      after evaluation, does not count);
    - a sample of one batch (`imgs = next(iter(val_loader))`, `items =
      next(self.sample_iterator)`, the model run
      on it or on its items, not over a loader) in a function whose callers
      run it once or every N steps: a few images to look at, a small graph
      freed when the function returns; and any function whose model calls
      are in no loop and that runs once (a script's `main` that classifies
      the one image it is given, a notebook function that only its cells'
      top level calls: `predict_sentiment(model, "This film is great")` in
      the last cell): one forward pass, its graph freed when the function
      returns;
    - modules that run their models with ONNX Runtime, TensorRT, Triton or
      OpenVINO (their engines record no autograd graph);
    - a function named for measuring the model (`flops`, `complexity`,
      `macs`, `summary`: `get_model_flops`, `get_model_complexity_info`,
      `get_model_summary`): one forward to count operations or parameters;
    - export, conversion and benchmark scripts (`export.py`, `convert_*.py`,
      `*_to_onnx.py`, `bench*.py`, an `export/` or `benchmarks/` directory):
      they run once (a checkpoint converted and its outputs compared), or their
      loops are the measurement;
    - `eval`/`train` methods (overrides of `nn.Module.eval`/`train`), and
      functions named `forward`, `__call__`, `*train*` or `*loss*` that call
      `.eval()` (they freeze a submodule, such as a teacher, inside a training
      step);
    - tests: test files (no rule but TL001 checks them), `test*` functions
      containing an `assert` anywhere, and
      parameterless `test*` functions (`def test(): net = Net();
      print(net(x).shape)`, a smoke test);
    - Lightning hooks (`validation_step`, `test_step`, `predict_step`,
      `on_validation_*`, `*_epoch_end`..., in classes), which Lightning
      already runs without gradients, and the `predict` (`simple_test`,
      `aug_test`) methods of an OpenMMLab codebase's models (a module that
      imports `mmengine`, `mmcv` or an `mm*` package, its own included),
      which MMEngine's `ValLoop`/`TestLoop` and inferencers (mmcv's
      `single_gpu_test`) run under `torch.no_grad()`; functions that only call `.eval()` and
      return (setup); module-level code (not a function);
    - a function whose loop over the data already calls the model without
      gradients, where the only calls with gradients on are outside any loop
      (a warm-up on a dummy input before swapping in a TensorRT engine): they
      run once per evaluation;
    - a call outside any loop whose inputs are all tensors made up on the spot
      (`torch.randn(2, 3, 32, 32)`, or a name bound only to such a factory
      call): a probe of the model's output shapes at setup, once, on a tiny
      batch.

    ## Why is this bad?
    Outside `no_grad`/`inference_mode`, every operation on a tensor that
    requires grad records an autograd graph and keeps the intermediate
    activations it needs for a backward pass that never comes. Evaluation then
    uses several times more memory (limiting the batch size) and spends time
    building the graph. `torch.inference_mode()` goes further and also skips
    version counting and view tracking. `model.eval()` alone does not disable
    gradients: it only switches dropout and batch normalization to inference
    behaviour.

    Measured with `torchlint verify --rules TL302` on a CPU (a 2-core AMD EPYC VM,
    `OMP_NUM_THREADS=1`, torch 2.13.0+cpu; no GPU was available): 468 µs before, 459
    µs after, **1.02x**. The small evaluation model records little graph; the saving
    grows with the activations a model keeps for backward. Run the same command on a
    GPU machine for the figure that matters there.

    ## Example
    ```python
    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum()
        return correct
    ```

    ## Use instead
    ```python
    @torch.no_grad()
    def evaluate(model, loader):
        model.eval()
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum()
        return correct
    ```
    (or `with torch.inference_mode():` around the loop, when the outputs are
    never used in autograd later).

    ## Fix safety
    The fix decorates the function with `@torch.no_grad()`, spelled with the
    module's own name for `torch` (`@T.no_grad()` after `import torch as T`,
    `@no_grad()` after `from torch import no_grad`), as the innermost
    decorator (below `@staticmethod`/`@property`). No import is added: when
    `torch` is not bound under a usable name (e.g. only `from torch import
    nn`), or the function is `async`, no fix is offered.

    It is unsafe: tensors returned by the function no longer carry autograd
    history and do not require grad, so a caller that backpropagates through
    the result (a `predict` used in a training loss, a knowledge-distillation
    teacher that is fine-tuned, a function that is also used for training)
    would silently get no gradient or fail with "element 0 of tensors does not
    require grad". Only the author knows how the result is used.

    ## References
    - PyTorch Performance Tuning Guide, "Disable gradient calculation for
      validation or inference"
    - PyTorch documentation, "Autograd mechanics", section "Locally disabling
      gradient computation" (`no_grad`, `inference_mode`, and why `eval()` is
      not a substitute)
    - `torch.no_grad` and `torch.inference_mode` documentation
    """

    code = "TL302"
    name = "eval-without-no-grad"
    summary = "Evaluation or inference function runs the model with gradient tracking on"
    fix = FixAvailability.UNSAFE
    needs = ("eval", "Eval", "EVAL", "valid", "Valid", "predict", "Predict", "infer", "Infer", "test", "Test")

    VALID = [
        Valid(
            """
            import torch
            @torch.no_grad()
            def evaluate(model, x):
                model.eval()
                return model(x)
            """
        ),
        Valid(
            """
            import torch
            def evaluate(model, x):
                model.eval()
                with torch.inference_mode():
                    return model(x)
            """
        ),
        Valid(
            """
            import torch
            def evaluate(preds, labels):
                return (preds == labels).float().mean()
            """
        ),
        Valid(
            """
            import torch
            def saliency(model, x):
                model.eval()
                x.requires_grad_()
                model(x).max().backward()
                return x.grad
            """
        ),
        Valid(
            """
            import torch
            def prepare(model):
                model.eval()
                return model
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            import torch
            def evaluate(model, x):
                model.eval()
                return model(x)
            """,
            expected_fix="""
            import torch
            @torch.no_grad()
            def evaluate(model, x):
                model.eval()
                return model(x)
            """,
        ),
        Invalid(
            """
            import torch
            def predict(model, loader):
                return [model(x).argmax(1) for x in loader]
            """,
            expected_fix="""
            import torch
            @torch.no_grad()
            def predict(model, loader):
                return [model(x).argmax(1) for x in loader]
            """,
        ),
        Invalid(
            """
            import torch
            def run(net, x):
                net.eval()
                return net(x).softmax(-1)
            """,
            expected_fix="""
            import torch
            @torch.no_grad()
            def run(net, x):
                net.eval()
                return net(x).softmax(-1)
            """,
        ),
    ]

    BENCHMARK = Benchmark(
        title="an evaluation function without vs with `@torch.no_grad()`",
        before="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(32, 512, device=device)
            targets = torch.randint(0, 10, (32,), device=device)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
            ).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


            def run():
                model.eval()
                return model(inputs).softmax(dim=1)
            """,
        after="""
            import torch

            device = torch.device(DEVICE)

            inputs = torch.randn(32, 512, device=device)
            targets = torch.randint(0, 10, (32,), device=device)
            model = torch.nn.Sequential(
                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
            ).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


            @torch.no_grad()
            def run():
                model.eval()
                return model(inputs).softmax(dim=1)
            """,
    )

    _MESSAGE = (
        "`{name}` {why} but runs the model with gradient tracking on, so autograd records "
        "a graph and keeps activations for a backward pass that never comes; decorate it "
        "with `@torch.no_grad()` or run the model under `with torch.inference_mode():`"
    )

    def __init__(self, context) -> None:
        super().__init__(context)
        self._frames: List[Frame] = [Frame(None)]
        self._candidates: List[Tuple[Frame, str]] = []
        self._call_sites = CallSites()  # by callee name: (without gradients?, calling function)
        self._module_grad_off = False
        self._class_is_module: Dict[int, bool] = {}

    # -- scopes ----------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._class_is_module[id(node)] = self._call_sites.add_class(node, any(module_like_base(a.value, self.context) for a in node.bases))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        ctx = self.context
        frame = Frame(node)
        stack = ctx.stack  # a method: its def is a statement of a class body
        in_class = len(stack) >= 3 and isinstance(ctx.parent, cst.IndentedBlock) and isinstance(stack[-3], cst.ClassDef)
        cls = stack[-3] if in_class else None
        frame.method = cls is not None
        frame.cls_name = cls.name.value if cls is not None else None
        frame.nested = self._frames[-1].node is not None
        frame.module_class = cls is not None and self._class_is_module.get(id(cls), False)
        if not frame.nested and (cls is None or len(stack) == 4):  # a module-level function or class's method
            frame.qualname = f"{cls.name.value}.{frame.name}" if cls is not None else frame.name
        mode = decorator_grad_mode(node, ctx)  # `@torch.no_grad()`, `@torch.enable_grad()`...
        frame.skip, frame.grad_off = mode is not None, mode == GRAD_OFF
        for decorator in node.decorators:
            expr = decorator.decorator
            q = ctx.qualname(expr.func if isinstance(expr, cst.Call) else expr)
            if q is not None and q.startswith("torch.jit."):
                frame.skip = True  # scripted or traced: not ours to decorate
        name = frame.name
        if name in ("eval", "train") and frame.method:
            frame.skip = True  # an override of nn.Module.eval/train: sets a mode
        if frame.method and framework_runs_without_grad(name, ctx):
            frame.skip = frame.grad_off = True  # Lightning (OpenMMLab's loops) run these without gradients
        if ctx.is_test_file and name.lower().lstrip("_").startswith("test"):
            frame.skip = True  # a pytest test
        if not frame.skip:
            frame.torch_alias = ctx.imports.outer_alias("torch", ("torch.no_grad", "torch.autograd.no_grad"))
        self._frames.append(frame)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        frame = self._frames.pop()
        # (a test, whose speed does not matter; `get_model_flops`: one forward to count
        # operations; `visualize(net, loader)`: a few inputs, each shown or plotted)
        if frame.skip or frame.needs_grad or _MEASURES.search(frame.name) or draws(frame.name) or frame.asserts and (
                self.context.is_test_file or frame.name.lower().lstrip("_").startswith("test")):
            return
        named = bool(EVALUATION_NAME.match(frame.name))
        if not named and (not frame.evals or TRAINING_NAME.search(frame.name)):
            return
        if named and not frame.evals and not frame.has_params and frame.name.lower().lstrip("_").startswith("test"):
            return  # `def test(): net = Net(); print(net(x).shape)`: a smoke test
        # A call on dummy inputs outside any loop (`model(torch.randn(2, 3, 32, 32))`
        # to read feature shapes) runs once, on a tiny batch: it costs nothing.
        runs = [i for i, (key, _, _, looped, call, _) in enumerate(frame.calls)
                if is_model_call(self.context, key, frame.evals, named, frame.module_class)
                or (named and looped and runs_evaluated(key, call, frame.evals))]
        model_calls = [(covered or (where is not None and runs_on_dummy_inputs(call, self.context, where)), looped)
                       for key, method, covered, looped, call, where in (frame.calls[i] for i in runs)]
        if frame.train_mode_at is not None and any(i >= frame.train_mode_at for i in runs):
            return  # `if train: model.train() ... else: model.eval()`, then the model: it serves training too
        frame.looped_model = any(frame.calls[i][3] and id(frame.calls[i][4]) not in frame.batch_calls for i in runs)
        if any(covered and looped for covered, looped in model_calls):
            # The loop over the data already runs without gradients: a call
            # outside it (a warm-up on a dummy input) runs once.
            model_calls = [(covered, looped) for covered, looped in model_calls if looped]
        if all(covered for covered, _ in model_calls):
            return
        why = (
            "puts a model in eval mode (`.eval()` does not disable gradients)"
            if frame.evals
            else "is named like evaluation or inference"
        )
        self._candidates.append((frame, why))

    def leave_Module(self, node: cst.Module) -> None:
        if self._module_grad_off or feeds_model_runtime(self.context.source) or runs_once_by_path(self.context.path):
            return  # (TensorRT or ONNX Runtime record no graph; a conversion script runs once)
        for frame, why in self._candidates:
            sites = self._call_sites.of(frame)
            elsewhere = lambda f: called_elsewhere_without_gradients(self.context, f.qualname)  # noqa: E731
            if called_without_gradients(frame, {**self._call_sites.by_name, frame.name: sites}, elsewhere=elsewhere):
                continue  # every caller (in this module, or through the project index) disabled gradients
            if frame.nested and (not frame.evals and not sites or closure_under_no_grad(self.context, frame.node)):
                continue  # a closure handed to someone else (a callback), or one of a function that disables gradients
            if not frame.looped_model and runs_rarely(self.context, frame.node, once=not frame.one_batch):
                continue  # one forward (one batch every N steps, a script's or notebook's run once): a graph freed at return
            if not frame.evals and (
                any(not covered and (caller.needs_grad or TRAINING_NAME.search(caller.name)) for covered, caller in sites)
                or called_elsewhere_for_training(self.context, frame.qualname)
                or frame.module_class and self._call_sites.from_outside(frame)
                and not called_elsewhere_with_gradients(self.context, frame.qualname)
            ):
                continue  # named like inference, but its result feeds a training step, or a model's method no one calls
            fix = None
            function = frame.node
            assert function is not None
            if frame.torch_alias is not None and function.asynchronous is None:
                alias, attribute = frame.torch_alias
                decorator = f"{alias}.no_grad()" if attribute else f"{alias}()"
                fix = Fix(
                    Applicability.UNSAFE,
                    f"Decorate `{frame.name}` with `@{decorator}`",
                    lambda function=function, decorator=decorator: statements.add_decorator(function, decorator),
                )
            self.report(function, self._MESSAGE.format(name=frame.name, why=why), fix=fix)

    # -- grad mode blocks ---------------------------------------------------------
    def visit_With(self, node: cst.With) -> None:
        (enables, disables), frame = with_grad_modes(node, self.context), self._frames[-1]
        frame.needs_grad, frame.depth = frame.needs_grad or enables, frame.depth + disables

    def leave_With(self, node: cst.With) -> None:
        self._frames[-1].depth -= with_grad_modes(node, self.context)[1]

    # -- what the function does -----------------------------------------------------
    def visit_Assert(self, node: cst.Assert) -> None:
        self._frames[-1].asserts = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if is_gradient_attribute(node.attr.value):
            self._frames[-1].needs_grad = True

    def visit_Call(self, node: cst.Call) -> None:
        frame = self._frames[-1]
        ctx = self.context
        func = node.func
        covered = frame.depth > 0 or frame.grad_off
        callee = last_name(func)
        if callee is not None:
            on_self = type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self"
            self._call_sites.add(callee, covered, frame, on_self)
        name = method_name(node)
        if (
            type(func) is cst.Name and func.value == "next" and node.args and (type(node.args[0].value) in (
                cst.Name, cst.Attribute) or type(node.args[0].value) is cst.Call and last_name(node.args[0].value.func) == "iter")
        ):  # `imgs = next(iter(loader))`, `items = next(self.sample_iterator)`: one batch
            assign = ctx.parent
            if type(assign) is cst.Assign:
                frame.one_batch.update(n for t in assign.targets for n in target_names(t.target))
        if name == "enter_context" and len(node.args) == 1 and grad_mode(node.args[0].value, ctx) == GRAD_OFF:
            frame.skip = frame.grad_off = True  # `stack.enter_context(torch.no_grad())`
            return
        if name == "eval" and not node.args:
            frame.evals.add(chain_root(func.value) or "")  # type: ignore[union-attr]
            return
        if name == "train" and frame.train_mode_at is None and (
            not node.args or literal_bool(node.args[0].value) is True
        ):
            frame.train_mode_at = len(frame.calls)  # `model.train()`: a model call after it trains
            return
        if needs_gradients(node, ctx):  # `requires_grad=True`, an optimizer step, a `torch.func` transform
            frame.needs_grad = True  # (the calls of a function that needs gradients are never looked at)
        mode = grad_mode_statement(node, ctx)  # `torch.set_grad_enabled(False)` as a statement
        if mode == GRAD_OFF and frame.node is None:
            self._module_grad_off = True
        elif mode == GRAD_OFF:
            frame.skip = frame.grad_off = True
        elif mode == GRAD_ON:
            frame.needs_grad = True
        if frame.node is None or ctx.qualname(func) is not None:
            return  # module-level code, or an imported callable
        looped = ctx.enclosing_loop() is not None
        key = dotted_name(func.value if name in FORWARD_METHODS else func)  # type: ignore[union-attr]
        covered = covered or helper_without_gradients(ctx, func)  # `model_predict(model, x)` disables them itself
        if key is not None:
            # Outside a loop, where it is kept to ask, once the function is known
            # to be a candidate, whether its inputs are dummies made up on the spot.
            loop = ctx.enclosing_loop() if looped and frame.one_batch else None
            if type(loop) is cst.For and mentions_name(loop.iter, list(frame.one_batch)):
                frame.batch_calls.add(id(node))  # `for a, b in zip(imgs["A"], imgs["B"]):`
            plain = node.args and all(type(a.value) in (cst.Name, cst.Call) for a in node.args if not a.keyword)
            where = ctx.location() if not covered and not looped and plain else None
            frame.calls.append((key, name if name in FORWARD_METHODS else None, covered, looped, node, where))

