"""Whole-module facts for the opt-in whole-program rules (TL501, TL503-TL505).

Those rules ask questions about a module as a whole: does it contain a training
step, is it a program's entry point, does it ever mention autocast, a
reduced-precision dtype, ``torch.compile``, TF32, ``cudnn.benchmark``?  The
answers are collected once per file, during the engine's single walk, into a
:class:`ProgramFacts` shared by every such rule enabled for the file (the first
of them feeds it, the others' hooks do nothing), and the rules decide in
``leave_Module``.

A *training step* is a function (or the module's top-level code) that calls a
backward (``_training.is_backward``) and an optimizer step
(``_training.is_optimizer_step``).  A backward inside a function nested in it
(an LBFGS ``closure``) counts for the enclosing function; a class body is a
boundary.  A step is located at its first backward call, or at its first one
inside a loop when there is one (a notebook may call ``loss.backward()`` once
to show autograd long before its training loop); the whole-program rules report
there, once per module, at the first step in source order.

A module is a program's *entry point* when it is a notebook, has an ``if
__name__ == "__main__":`` block, a top-level ``for``/``while``/``with`` block, a
bare top-level call (``main()``, ``train(cfg)``; not the library set-up calls
``warnings.filterwarnings(...)``, ``logging.basicConfig(...)``,
``sys.path.append(...)``, ``torch.manual_seed(...)``), or a training loop at
the top level.  Process-wide settings (TF32, cuDNN autotuner) and compilation
belong there, so TL501's module check, TL503 and TL505 look only at entry
points; a library module that defines ``train_one_epoch`` is left alone.

Mentions are recognised by identifier, which covers aliases, configuration
switches and helpers defined elsewhere: ``args.amp``, ``use_amp``,
``maybe_autocast()``, ``cfg.compile``, ``--tf32`` read as ``args.tf32``.  A
mention makes a rule stay silent: the module has already made its choice, or
may have, and the rule cannot tell which.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Callable, Dict, List, Optional, Tuple

import libcst as cst

from torchlint.names import dotted_name
from torchlint.nodes import iter_children, walk_nodes
from torchlint.rule import Context, Rule
from torchlint.rules._helpers import (
    argument,
    is_main_guard,
    literal_bool,
    literal_int,
    literal_number,
    method_name,
    names_anywhere,
)
from torchlint.rules._loaders import DATALOADERS
from torchlint.rules._project_text import (
    BENCHMARK,
    COMPILE,
    DOUBLE_BACKWARD,
    DOUBLE_BACKWARD_CODE,
    PROGRAM_NOTE,
    PROGRAM_SUBJECT,
    REDUCED,
    SIMULATOR,
    SIMULATORS,
    TF32,
    imported_names,
    trait_key,
)
from torchlint.rules._factories import RANDOM_FACTORIES
from torchlint.rules._training import is_backward, is_framework_backward, is_optimizer_step


# Identifiers (names and attribute names) are matched by one expression; a
# name may say several things:
# - reduced: the module deals with reduced precision (autocast, AMP, a
#   GradScaler or loss scaler, half/bfloat16 weights, apex, DeepSpeed, a switch);
# - tf32: it chose a float32 matmul precision (`allow_tf32`, `args.tf32`);
# - compile: it compiles, or has a switch for it (`args.compile`);
# - benchmark: a switch for the cuDNN autotuner (`args.cudnn_benchmark`);
# - cuda: it configures cuDNN, so it runs on a GPU.
_MENTION = re.compile(
    r"(?P<reduced>autocast|(?:^|_)amp(?:$|_)|scaler|half|bfloat16|float16|(?:^|_)(?:fp|bf)16(?:$|_)"
    r"|mixed_?precision|apex|deepspeed)"
    r"|(?P<tf32>tf32|matmul_precision|fp32_precision)"
    r"|(?P<compile>compile|dynamo|inductor)"
    r"|(?P<benchmark>cudnn_?benchmark)"
    r"|(?P<cuda>^cudnn$)",
    re.IGNORECASE,
)
_MENTIONS_SEEN: Dict[str, Tuple[str, ...]] = {}


def _mentions(identifier: str) -> Tuple[str, ...]:
    """The kinds of mention in an identifier (memoised: names repeat a lot)."""
    kinds = _MENTIONS_SEEN.get(identifier)
    if kinds is None:
        kinds = tuple(m.lastgroup or "" for m in _MENTION.finditer(identifier))
        if len(_MENTIONS_SEEN) > 100_000:
            _MENTIONS_SEEN.clear()
        _MENTIONS_SEEN[identifier] = kinds
    return kinds


# The source's string literals (any prefix, triple-quoted or not) and comments,
# in one expression: what is left between them is code, whose words are its
# names and keywords (a keyword says nothing here).  The fields of an
# f-string (`f"{args.amp}"`) are code too.
_LITERAL_OR_COMMENT = re.compile(
    r"#[^\r\n]*"
    r"|(?<!\w)([rRbBuUfF]{0,2})("
    r'"""(?:[^"\\]|\\[\s\S]|"(?!""))*"""'
    r"|'''(?:[^'\\]|\\[\s\S]|'(?!''))*'''"
    r'|"(?:[^"\\\r\n]|\\[\s\S])*"'
    r"|'(?:[^'\\\r\n]|\\[\s\S])*'"
    r")"
)
_FIELD = re.compile(r"(?<!\{)\{([^{}]*)\}")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_REGEX_COMPILE = re.compile(r"\b(?:re|regex)\s*\.\s*compile\b")
_COMPILE = re.compile(r"\bcompile\b")


def _tokens(source: str) -> Tuple[set, List[str], str]:
    """The distinct words of a module's code (its names: what the tree's
    ``Name`` nodes hold, plus keywords), its string literals other than
    f-strings (prefix and quotes included, as ``SimpleString.value``), and
    its code with literals and comments blanked out."""
    strings: List[str] = []
    fields: List[str] = []

    def blank(match: "re.Match[str]") -> str:
        if match.group(2) is None:
            return " "  # a comment
        prefix = match.group(1)
        if "f" in prefix or "F" in prefix:
            fields.extend(_FIELD.findall(match.group(2)))
        else:
            strings.append(prefix + match.group(2))
        return " "

    code = _LITERAL_OR_COMMENT.sub(blank, source)
    return set(_IDENTIFIER.findall(code)) | set(_IDENTIFIER.findall(" ".join(fields))), strings, code


def _compiles_other_than_regex(code: str) -> bool:
    """Whether the word ``compile`` occurs in ``code`` other than as a regular
    expression's (``re.compile(...)``, ``regex.compile(...)``)."""
    return len(_COMPILE.findall(code)) > len(_REGEX_COMPILE.findall(code))


_REDUCED_PRECISION_STRING = re.compile(r"^(bf16|fp16|bfloat16|float16|half)\b|-mixed$", re.IGNORECASE)

_CONV_LAYERS = frozenset(
    f"{prefix}{base}{dim}d"
    for prefix in ("torch.nn.", "torch.nn.modules.conv.")
    for base in ("Conv", "ConvTranspose", "LazyConv", "LazyConvTranspose")
    for dim in (1, 2, 3)
)
# The cuDNN switches and the determinism calls (TL501, TL502 and the program facts).
CUDNN_BENCHMARK = "torch.backends.cudnn.benchmark"
CUDNN_DETERMINISTIC = "torch.backends.cudnn.deterministic"
USE_DETERMINISTIC = frozenset({"torch.use_deterministic_algorithms", "torch.set_deterministic"})


# Names of transformer-family models and their builders (word parts).
_TRANSFORMER = re.compile(
    r"(?:^|_)(?:gpt\d?|transformer|bert|llama\d?|vit|mistral|mixtral|gemma\d?|qwen\d?|bloom|deit|swin)(?:$|_|\d)"
    r"|GPT|Transformer|Bert|Llama|Mistral|Gemma|Qwen|Bloom",
    re.IGNORECASE,
)


# Convolutional network families (torchvision, timm names, U-Net).
_CONVNET = re.compile(
    r"^(?:resnet|resnext|wide_resnet|vgg|densenet|efficientnet|mobilenet|convnext|regnet|inception"
    r"|alexnet|squeezenet|shufflenet|mnasnet|googlenet|unet)(?:\d|_|v\d|$)",
    re.IGNORECASE,
)
_GRAPH = re.compile(
    r"^(?:edge_index|GAT|GCN|GIN|GraphSAGE|\w*(?:GCN|GAT|SAGE|GIN|Graph)Conv|MessagePassing|torch_geometric|dgl"
    r"|torch_scatter)$"
)
# A sampler or configuration that groups samples into buckets of similar length or
# resolution (VITS-style `DistributedBucketSampler`, Open-Sora's `bucket_config`).
# (Not a bare `bucket`: YOLOv5's `--bucket` names a gsutil storage bucket.)
_BUCKETS = re.compile(
    r"Bucket\w*(?:Sampler|Iterator|Batch)|(?i:(?:^|_)(?:buckets|bucket_(?:config|boundaries|sizes?|sampler|batch\w*))(?:$|_))")
_RECURRENT = frozenset({"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "pack_padded_sequence"})


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def _imported_modules(node: cst.CSTNode) -> List[str]:
    if isinstance(node, cst.Import):
        return [n for n in (dotted_name(a.name) for a in node.names) if n]
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None:
        name = dotted_name(node.module)
        return [name] if name else []
    return []
# Layers and functions whose work is matrix multiplication (TF32 for matmuls
# matters to them; convolutions already use TF32 by default).
_MATMUL_TAILS = frozenset(
    {
        "Linear", "Bilinear", "LazyLinear", "MultiheadAttention", "Transformer",
        "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
        "TransformerDecoder", "linear", "bilinear", "matmul", "mm", "bmm", "einsum",
        "addmm", "baddbmm", "scaled_dot_product_attention",
    }
)
# Calls that place work on a CUDA device (a bare `torch.cuda.is_available()` does not).
_CUDA_CALLS = frozenset({"set_device", "current_device", "device"})
# `torch.autograd.grad(outputs, inputs, ..., create_graph=True)` outside a comment.
_DOUBLE_BACKWARD = re.compile(r"^[^#\n]*" + DOUBLE_BACKWARD_CODE, re.M)


class _Scope:
    __slots__ = ("backward", "order", "framework", "in_loop", "steps", "nested", "shape", "name")

    def __init__(self, nested: bool) -> None:
        # The first backward call, or the first one in a loop once there is one.
        self.backward: Optional[cst.Call] = None
        self.order = 0
        self.framework = False
        self.in_loop = False
        self.steps = False
        self.nested = nested  # a function inside a function: its backward counts outside
        self.shape: Optional[Shape] = None  # the run the backward's loops make (:func:`run_shape`)
        self.name: Optional[str] = None  # the function's name


class Step:
    """A training step: where it reports, and whether a framework drives it."""

    __slots__ = ("backward", "order", "framework", "shape", "name")

    def __init__(self, backward: cst.Call, order: int, framework: bool, shape: Optional["Shape"] = None,
                 name: Optional[str] = None) -> None:
        self.backward = backward
        self.order = order
        self.framework = framework
        self.shape = shape  # the run its loops make (:func:`run_shape`)
        self.name = name  # the step function's name (None: top-level code)


class ProgramFacts:
    """What the whole-program rules need to know about one module."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.steps: List[Step] = []
        self.entry = context.path.endswith(".ipynb")
        self.uses_cuda = False
        self.has_conv = False
        self.has_matmul = False
        self.benchmark_set = False
        self.reduced_precision = False
        self.tf32_set = False
        self.compiles = False
        # The program asked for reproducible kernels (`cudnn.deterministic =
        # ...`, `torch.use_deterministic_algorithms(...)`, not literally False).
        self.deterministic = False
        # The program fits Gaussian processes (GPyTorch, BoTorch): Cholesky
        # factorizations and conjugate gradients on kernel matrices, which need
        # float32 or float64 and branch on their own results.
        self.precise = False
        self.per_sample_hooks = False  # trains with Opacus: per-sample gradients from module hooks
        # The program steps a simulator (gym, Gymnasium, EnvPool, ...): its
        # step time is the environment's.
        self.simulator = False
        # DataLoader calls: loading in the main process (`num_workers` absent
        # or 0), and with workers (or a value the rule cannot read).
        self.main_process_loaders = 0
        self.worker_loaders = 0
        # A model of the transformer family is named (`GPT(...)`, `vit_b_16`,
        # `BertModel`): matmul-heavy even when its layers are built elsewhere.
        self.transformer = False
        # A convolutional network of a known family is named (`resnet50`,
        # `models.vgg19`): its cost is convolutions even when built elsewhere.
        self.convnet = False
        # Recurrent layers (`nn.LSTM`, `pack_padded_sequence`): cuDNN's fused RNN
        # kernels and variable lengths leave little for torch.compile.
        self.recurrent = False
        # A graph neural network is named (`edge_index`, `GAT`, `GCNConv`,
        # `torch_geometric`): gathers and scatters over edges set its pace.
        self.graph = False
        # Batches grouped by length or resolution (`DistributedBucketSampler`,
        # `bucket_config`): the shapes change from batch to batch.
        self.buckets = False
        # The loss takes a gradient of a gradient (`torch.autograd.grad(...,
        # create_graph=True)`: an eikonal or gradient-penalty term), here or in
        # what the program calls from the modules it imports.
        self.double_backward = "create_graph" in context.source and _DOUBLE_BACKWARD.search(context.source) is not None
        # One entry per function, lambda or class (None: a class body, where
        # no step is looked for); [0] is the module's top level.
        self._scopes: List[Optional[_Scope]] = [_Scope(nested=False)]
        self._counter = 0
        self._finished = False
        self._tiny: Optional[bool] = None
        # The runs that the loops around each call of a function of the module
        # make (``run_shape``), by the function's name; for a step's callers.
        self._call_shapes: Dict[str, List[Optional[Shape]]] = {}
        self._defined_steps: Optional[frozenset] = None
        self._feeder: Optional[int] = None

    def _step_names(self) -> frozenset:
        """The names of the module's functions (from the text), when the module
        calls a backward anywhere: a cheap superset of its step functions, whose
        calls are recorded for :meth:`_run_is` (the others' are never asked)."""
        if self._defined_steps is None:
            source = self.context.source
            self._defined_steps = frozenset(
                match.group(1) for match in _DEF.finditer(source)) if ".backward(" in source else frozenset()
        return self._defined_steps

    def claim(self, rule: Rule) -> bool:
        """Whether ``rule`` is the one that feeds these facts (the first to ask)."""
        if self._feeder is None:
            self._feeder = id(rule)
        return self._feeder == id(rule)

    # -- feeding (by one rule, during the walk) --------------------------------

    def visit_module(self, node: cst.Module) -> None:
        self.read_source(self.context.source)
        for stmt in node.body:
            if _is_entry_statement(stmt):
                self.entry = True
                break

    def enter_scope(self, node: cst.CSTNode) -> None:
        inside_function = isinstance(node, (cst.FunctionDef, cst.Lambda)) and len(self._scopes) > 1 and (
            self._scopes[-1] is not None
        )
        scope = _Scope(nested=inside_function) if not isinstance(node, cst.ClassDef) else None
        if scope is not None and isinstance(node, cst.FunctionDef):
            scope.name = node.name.value
        self._scopes.append(scope)

    def leave_scope(self, node: cst.CSTNode) -> None:
        scope = self._scopes.pop()
        if scope is None or scope.backward is None:
            return
        outer = self._scopes[-1]
        if scope.steps:
            self._add_step(scope)
        elif scope.nested and outer is not None and outer.backward is None:
            # An LBFGS closure, a helper defined in the step: its backward
            # belongs to the enclosing function.
            outer.backward, outer.order, outer.framework = scope.backward, scope.order, scope.framework
            outer.in_loop, outer.shape = False, None

    def visit_call(self, node: cst.Call) -> None:
        ctx = self.context
        scope = self._scopes[-1]
        name = method_name(node)
        if scope is not None:
            if is_backward(node, ctx):
                if in_synthetic_self_test(ctx):
                    return  # a library module's self-test on random inputs: not the program's training
                # Report at the first backward of the scope, but prefer one in a
                # loop: a notebook may call `loss.backward()` once to show
                # autograd long before its training loop.
                in_loop = ctx.enclosing_loop(periodic_guard=False) is not None
                if scope.backward is None or (in_loop and not scope.in_loop):
                    self._counter += 1
                    scope.backward, scope.order, scope.in_loop = node, self._counter, in_loop
                    # Backward run by a framework (Accelerate, Fabric, manual
                    # optimization): mixed precision, compilation and cuDNN
                    # settings are then its options, often set elsewhere.
                    scope.framework = is_framework_backward(node)
                    scope.shape = run_shape(ctx)
                return
            if is_optimizer_step(node):
                scope.steps = True
                return
        func = node.func
        if type(func) is cst.Name and ctx.qualname(func) is None and func.value in self._step_names():
            # a call of a step function of the module (`loss = train()`): the run its loops make
            self._call_shapes.setdefault(func.value, []).append(run_shape(ctx))
        if name == "cuda":
            self.uses_cuda = True
            return
        func = node.func
        tail = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
        if "Conv" in tail:
            if ctx.qualname(func) in _CONV_LAYERS:
                self.has_conv = True
        elif tail in _MATMUL_TAILS:
            q = ctx.qualname(func)
            if q is not None and q.startswith("torch.") and q.rsplit(".", 1)[1] in _MATMUL_TAILS:
                self.has_matmul = True
        elif tail in _CUDA_CALLS and ctx.qualname(func) == "torch.cuda." + tail:
            self.uses_cuda = True
        elif tail == "DataLoader" and ctx.qualname(func) in DATALOADERS:
            known, workers = argument(node, "num_workers", 5)
            if known and (workers is None or literal_number(workers.value) == 0):
                self.main_process_loaders += 1
            else:
                self.worker_loaders += 1
        elif tail == "use_deterministic_algorithms" and node.args and not _is_false(node.args[0].value):
            if ctx.qualname(func) == "torch.use_deterministic_algorithms":
                self.deterministic = True

    def visit_binary(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.MatrixMultiply):
            self.has_matmul = True

    def read_source(self, source: str) -> None:
        """The facts that names and string literals give, from the source's
        tokens (``_tokens``): one pass over the text instead of a callback at
        every name of the tree, which the walk can then skip."""
        identifiers, strings, code = _tokens(source)
        for value in identifiers:
            self._read_name(value, code)
        for value in strings:
            self._read_string(value)

    def _read_name(self, value: str, code: str) -> None:
        if not self.transformer and _TRANSFORMER.search(value):
            self.transformer = True
        if not self.convnet and _CONVNET.search(value):
            self.convnet = True
        if not self.recurrent and value in _RECURRENT:
            self.recurrent = True
        if not self.graph and _GRAPH.match(value):
            self.graph = True
        if not self.buckets and ("ucket" in value or "UCKET" in value) and _BUCKETS.search(value):
            self.buckets = True
        for kind in _mentions(value):
            if kind == "reduced":
                self.reduced_precision = True
            elif kind == "tf32":
                self.tf32_set = True
            elif kind == "compile":
                if value != "compile" or _compiles_other_than_regex(code):
                    self.compiles = True
            elif kind == "benchmark":
                self.benchmark_set = True
            else:
                self.uses_cuda = True

    def _read_string(self, value: str) -> None:
        text = value.lstrip("rRbBuUfF")
        text = text.strip("'\"")
        if text.startswith("cuda"):
            self.uses_cuda = True
        elif _REDUCED_PRECISION_STRING.search(text):
            self.reduced_precision = True
        elif len(text) < 64 and _TRANSFORMER.search(text):
            self.transformer = True  # a model name: `create_model("vit_base_patch16_224")`
        elif len(text) < 64 and _CONVNET.search(text):
            self.convnet = True  # `models.__dict__["resnet50"]`, `--arch resnet50`

    def visit_fstring(self, node: cst.FormattedString) -> None:
        if node.parts and isinstance(node.parts[0], cst.FormattedStringText):
            if node.parts[0].value.startswith("cuda"):
                self.uses_cuda = True

    def visit_assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            name = self.context.qualname(target.target)
            if name == CUDNN_BENCHMARK:
                self.benchmark_set = True
            elif name == CUDNN_DETERMINISTIC and not _is_false(node.value):
                self.deterministic = True

    def visit_import(self, node: cst.CSTNode) -> None:
        for module in _imported_modules(node):
            top = module.split(".", 1)[0]
            if top in SIMULATORS or ".".join(module.split(".", 2)[:2]) in SIMULATORS:
                self.simulator = True
            elif top in _PRECISE_LINEAR_ALGEBRA:
                self.precise = True
            elif top == "opacus":
                self.per_sample_hooks = True

    def kernels_do_not_matter(self) -> bool:
        """Whether the step time is not the kernels' to begin with: the program
        steps a simulator, or every loader it builds loads in the main process
        (input-bound; TL203 reports those loaders)."""
        return self.simulator or (self.main_process_loaders > 0 and self.worker_loaders == 0) or self.tiny_model() or (
            trains_on_toy_data(self.context))

    def tiny_model(self) -> bool:
        """Whether the module's model is visibly tiny (:func:`tiny_layers`) and no
        known architecture is named: its steps are launch-bound, and tensor
        cores, autotuned kernels or compilation have nothing to speed up."""
        if self._tiny is None:
            self._tiny = (
                self.entry
                and not (self.transformer or self.convnet)
                and self.context.module is not None
                and not _imports_a_class(self.context)
                and tiny_layers(self.context.module, self.context)
            )
        return self._tiny

    def quiet_reason(self) -> Optional[str]:
        """Why whole-program speed advice that changes numerics does not apply
        here: the kernels do not set the pace, the program asked for
        reproducible kernels, or it trains a graph network, whose message
        passing gathers and scatters over edges (tensor cores do not set its
        pace)."""
        if self.kernels_do_not_matter():
            return "input-bound"
        if self.deterministic:
            return "deterministic"
        if self.graph:
            return "graph"
        if self.precise:
            return "linear-algebra"
        return None

    def float64(self) -> bool:
        """Whether the program trains in float64 on purpose (``_trains_in_float64``)."""
        return _trains_in_float64(self.context.source)

    def no_tensor_core_work(self) -> bool:
        """Whether the program visibly runs no operation that reduced precision
        speeds up: no matrix multiplication, convolution, recurrent layer or
        attention, no named architecture, and no model from elsewhere (an
        imported class, a `build_model(...)`-like helper, a hub or pretrained
        model): a fit of a few parameters through elementwise math (kaolin's
        lighting tutorials)."""
        if self.has_matmul or self.has_conv or self.transformer or self.convnet or self.recurrent:
            return False
        source = self.context.source
        return (_TENSOR_CORE_WORDS.search(source) is None and _MODEL_FROM_ELSEWHERE.search(source) is None
                and _MODEL_HELPER.search(source) is None and not _imports_a_class(self.context))

    def matmul_heavy(self) -> bool:
        """Whether the model's work is mostly matrix multiplication: a
        transformer is named, or the module builds matmul layers or operations
        and no convolution (a conv net's few linear layers are not its cost)."""
        return self.transformer or (self.has_matmul and not self.has_conv and not self.convnet)

    # -- results ----------------------------------------------------------------
    def declined_compile(self) -> bool:
        """Whether the module keeps a ``torch.compile`` call commented out
        (``# model = torch.compile(model, mode="reduce-overhead")``): the
        author tried compilation and turned it off, a choice the advice to
        compile would only repeat."""
        return _COMMENTED_COMPILE.search(self.context.source) is not None

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._apply_project()
        module_scope = self._scopes[0]
        if module_scope is not None and module_scope.backward is not None and module_scope.steps:
            self.entry = True  # a training loop at the top level is a script
            self._add_step(module_scope)
        self.steps.sort(key=lambda step: step.order)

    def _apply_project(self) -> None:
        """What the modules this one imports, or that import it, say about the
        program (``_project_text.program_facts``), as if this module said it."""
        known = self.context.project.get("frequency", {})
        if not known:
            return
        said = {kind for kind in (REDUCED, TF32, COMPILE, BENCHMARK, SIMULATOR, DOUBLE_BACKWARD)
                if trait_key(PROGRAM_SUBJECT, kind) in known}
        self.double_backward |= DOUBLE_BACKWARD in said
        self.reduced_precision |= REDUCED in said
        self.tf32_set |= TF32 in said
        self.compiles |= COMPILE in said
        self.benchmark_set |= BENCHMARK in said
        self.simulator |= SIMULATOR in said

    def _add_step(self, scope: _Scope) -> None:
        assert scope.backward is not None
        self.steps.append(Step(scope.backward, scope.order, scope.framework, scope.shape, scope.name))

    def short_runs_only(self) -> bool:
        """Whether every training step no framework drives is a short run
        (:func:`is_short`): a demonstration's few hundred steps, in the step's
        own loops, or in the loops around every call of its function in the
        module (`for epoch in range(1, 201): loss = train()`)."""
        return self._every_run(is_short)

    def literal_runs_only(self) -> bool:
        """Whether every training step no framework drives runs a number of
        times that literals set (:func:`counted_by_literals`): ``for epoch in
        range(1, 201):`` around the step or its calls, not ``args.epochs``."""
        return self._every_run(counted_by_literals)

    def _every_run(self, test: Callable[[Optional["Shape"]], bool]) -> bool:
        self.finish()
        own = [step for step in self.steps if not step.framework]
        return bool(own) and all(self._run_is(step, test) for step in own)

    def _run_is(self, step: Step, test: Callable[[Optional["Shape"]], bool]) -> bool:
        if test(step.shape):
            return True
        calls = self._call_shapes.get(step.name or "")
        if step.shape is None or not calls:
            return False
        return all(outer is not None and test(combined(step.shape, outer)) for outer in calls)

    def first_step(self) -> Optional[Step]:
        """The first training step (by its backward call) that no framework drives."""
        self.finish()
        for step in self.steps:
            if not step.framework:
                return step
        return None


# A run of at most this many steps, counted from literals, is short (see is_short).
_SHORT_STEPS = 5000
_COUNTED = frozenset({"range", "trange", "tqdm", "enumerate"})
# Libraries whose training solves linear systems on kernel matrices (Gaussian
# processes): reduced precision breaks their factorizations, and their solvers'
# data-dependent loops break compiled graphs.
_PRECISE_LINEAR_ALGEBRA = frozenset({"gpytorch", "botorch", "linear_operator"})
_DEF = re.compile(r"^[ \t]*def[ \t]+(\w+)", re.M)


def _literal_count(expr: cst.BaseExpression, ctx: Context, depth: int = 0) -> Optional[int]:
    """How many times a ``for`` over ``expr`` runs, when literals say it:
    ``range(300)``, ``range(1, 11)``, ``trange(N)``, ``tqdm(range(N))``,
    ``enumerate(range(N))``, with ``N`` an integer literal or a name bound only
    to one (``Niter = 2000``, ``loop = tqdm(range(Niter))``)."""
    if isinstance(expr, cst.Integer):
        return literal_int(expr)
    if isinstance(expr, cst.Name):
        if depth > 2:
            return None
        bindings = ctx.semantic.reaching(expr.value, ctx.location())
        if len(bindings) != 1 or bindings[0].kind != "value" or bindings[0].value is None:
            return None
        value = bindings[0].value
        return _literal_count(value, ctx, depth + 1) if isinstance(value, cst.BaseExpression) else None
    if not isinstance(expr, cst.Call) or not expr.args or any(arg.keyword or arg.star for arg in expr.args[:2]):
        return None
    func = expr.func
    tail = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
    if tail not in _COUNTED:
        return None
    if tail in ("tqdm", "enumerate"):
        return _literal_count(expr.args[0].value, ctx, depth)
    if len(expr.args) > 2:
        return None  # a range with a step
    stop = _literal_count(expr.args[-1].value, ctx, depth)
    start = _literal_count(expr.args[0].value, ctx, depth) if len(expr.args) == 2 else 0
    return None if stop is None or start is None else max(stop - start, 0)


# A run: (steps that literals count, loops over data, loops counted by literals).
Shape = Tuple[int, int, int]


def run_shape(ctx: Context) -> Optional[Shape]:
    """The run that the loops around the node being visited make, within its
    function: the product of the counts that literals give (``for i in
    range(300):``, ``Niter = 2000; for i in range(Niter):``), the number of
    other loops (over data, or counted by the command line or a
    configuration), and the number of counted loops; None with a ``while``
    loop (no fixed count)."""
    steps, data_loops, counted = 1, 0, 0
    for loop in ctx.enclosing_loops(periodic_guard=False):
        if not isinstance(loop, cst.For):
            return None
        count = _literal_count(loop.iter, ctx)
        if count is None:
            data_loops += 1
        else:
            steps, counted = steps * count, counted + 1
    return steps, data_loops, counted


def combined(inner: Shape, outer: Shape) -> Shape:
    """The run of a step whose function makes ``inner`` and is called in loops that make ``outer``."""
    return inner[0] * outer[0], inner[1] + outer[1], inner[2] + outer[2]


def is_short(shape: Optional[Shape]) -> bool:
    """Whether a run is short, as a demonstration's or tutorial's is: every
    loop counted by literals, at most ``_SHORT_STEPS`` steps in all.  A loop
    over data is no short run whatever the number of passes (ten epochs of
    MNIST at 32 a batch are 19,000 steps), nor one whose count the command
    line or a configuration gives, nor a ``while`` loop."""
    if shape is None:
        return False
    steps, data_loops, counted = shape
    return bool(counted) and not data_loops and steps <= _SHORT_STEPS


def counted_by_literals(shape: Optional[Shape]) -> bool:
    """Whether a run's length is set by literals: some loop around the step is
    counted by them (``for epoch in range(1, 201):``, over a loader or not),
    and no ``while`` loop (a program whose number of epochs is hard-coded)."""
    return shape is not None and shape[2] > 0


_COMMENTED_COMPILE = re.compile(r"^[ \t]*#[^\n]*\btorch\.compile\(", re.M)


def _is_entry_statement(stmt: cst.CSTNode) -> bool:
    """A top-level statement that only a script has: an ``if __name__ ==
    "__main__":`` block, a loop or ``with`` block, or a bare call (``main()``)."""
    if isinstance(stmt, (cst.For, cst.While, cst.With)):
        return True
    if isinstance(stmt, cst.If):
        test = stmt.test
        return (
            isinstance(test, cst.Comparison)
            and isinstance(test.left, cst.Name)
            and test.left.value == "__name__"
        )
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                root = small.value.func
                while isinstance(root, cst.Attribute):
                    root = root.value
                if not (isinstance(root, cst.Name) and root.value in _SETUP_MODULES):
                    return True
    return False


# Modules whose top-level calls also occur in libraries (set-up, not a program).
_SETUP_MODULES = frozenset({"warnings", "logging", "sys", "os", "torch", "random", "np", "numpy"})


def facts_for(context: Context) -> ProgramFacts:
    facts = context.shared.get("program")
    if facts is None:
        facts = context.shared["program"] = ProgramFacts(context)
    return facts


class ProgramRule(Rule):
    """Base of the whole-program rules: feeds the shared :class:`ProgramFacts`.

    Subclasses implement ``decide(facts)`` (called once, at the end of the
    module, outside test files).
    """

    def __init__(self, context: Context) -> None:
        super().__init__(context)
        self.facts = facts_for(context)
        self._off = context.is_test_file or is_benchmark_path(context.path)
        # One rule feeds the shared facts; the others' hooks do nothing.
        self._feeds = not self._off and self.facts.claim(self)

    def visit_Module(self, node: cst.Module) -> None:
        if self._feeds:
            self.facts.visit_module(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._feeds:
            self.facts.enter_scope(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self._feeds:
            self.facts.leave_scope(node)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        if self._feeds:
            self.facts.enter_scope(node)

    def leave_Lambda(self, node: cst.Lambda) -> None:
        if self._feeds:
            self.facts.leave_scope(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self._feeds:
            self.facts.enter_scope(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        if self._feeds:
            self.facts.leave_scope(node)

    def visit_Call(self, node: cst.Call) -> None:
        if self._feeds:
            self.facts.visit_call(node)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if self._feeds:
            self.facts.visit_binary(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if self._feeds:
            self.facts.visit_fstring(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._feeds:
            self.facts.visit_assign(node)

    def visit_Import(self, node: cst.Import) -> None:
        if self._feeds:
            self.facts.visit_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if self._feeds:
            self.facts.visit_import(node)

    def leave_Module(self, node: cst.Module) -> None:
        if not self._off:
            self.facts.finish()
            self.decide(self.facts)

    def decide(self, facts: ProgramFacts) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def report_at_first_step(self, facts: ProgramFacts, message: str) -> None:
        """Report once per module, at the ``backward()`` of the first training
        step (nothing when the module has none)."""
        step = facts.first_step()
        if step is not None:
            self.report(step.backward, message)
            if not self.context.path.endswith(".ipynb"):
                # other modules of the run may make the setting (the index answers)
                self.context.pending.add(PROGRAM_NOTE)


def under_switch(context: Context, pattern: "re.Pattern[str]") -> bool:
    """Whether the node being visited runs under an ``if`` whose test mentions
    an identifier (or string) matching ``pattern``: a run-time switch such as
    ``if args.deterministic:`` or ``if args.seed is not None:``."""
    for ancestor in context.ancestors():
        if isinstance(ancestor, cst.If):
            for n in walk_nodes(ancestor.test):
                if isinstance(n, cst.Name) and pattern.search(n.value):
                    return True
                if isinstance(n, cst.SimpleString) and pattern.search(n.value):
                    return True
    return False


def other_branch_sets(context: Context, qualname: str, value: bool) -> bool:
    """Whether the node being visited sits in one branch of an ``if`` whose
    other branch assigns ``qualname = value``: ``if args.cudnn:
    cudnn.benchmark = True`` / ``else: cudnn.benchmark = False`` is a switch,
    and the ``else`` is what the user asked for."""
    stack = context.stack
    for i in range(len(stack) - 1, 0, -1):
        node = stack[i - 1]
        if not isinstance(node, cst.If):
            continue
        here = stack[i]
        other = node.orelse if here is node.body else node.body if here is node.orelse else None
        if other is None:
            continue
        for n in walk_nodes(other):
            if isinstance(n, cst.Assign) and literal_bool(n.value) is value and any(
                context.qualname(t.target) == qualname for t in n.targets
            ):
                return True
    return False


def _function_statements(context: Context) -> Tuple[List[cst.CSTNode], Optional[int]]:
    """The statements of the body of the function around the node being
    visited, and the index of the one that holds the node (None: not in a
    function with an indented body)."""
    function = context.enclosing_function()
    body = getattr(function, "body", None)
    if not isinstance(body, cst.IndentedBlock):
        return [], None
    statements = list(body.body)
    return statements, next((k for k, st in enumerate(statements) if any(n is st for n in context.stack)), None)


def function_restores(context: Context, qualname: str, value: bool) -> bool:
    """Whether the function around the node being visited also assigns
    ``qualname = value`` at its top level, after it: ``cudnn.benchmark = False``
    for a validation pass over inputs of every length, and ``True`` again at
    its end (MelGAN's ``validate``), is a scoped setting, not the run's."""
    statements, here = _function_statements(context)
    if here is None:
        return False
    for statement in statements[here + 1:]:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and literal_bool(small.value) is value and any(
                        context.qualname(t.target) == qualname for t in small.targets):
                    return True
    return False


def function_set_before(context: Context, qualname: str, value: bool) -> bool:
    """Whether a statement of the function around the node being visited
    that comes before it assigns ``qualname = value``, also under an ``if``:
    ``if not args.disable_cudnn_benchmark: cudnn.benchmark = True`` before
    the training, then ``cudnn.benchmark = False`` for the final test pass
    (torchdistill's examples) switches the setting for what follows, on
    purpose, and the training ran with the fast one."""
    statements, here = _function_statements(context)
    for statement in statements[:here or 0]:
        for n in walk_nodes(statement):
            if isinstance(n, cst.Assign) and literal_bool(n.value) is value and any(
                    context.qualname(t.target) == qualname for t in n.targets):
                return True
    return False


# A reproducibility switch: ``if args.deterministic:``, ``if seed is not None:``.
REPRODUCIBILITY_SWITCH = re.compile(r"determin|reproduc|seed|fix(?:ed)?_?random", re.IGNORECASE)


# A function or class whose purpose is reproducibility (``enable_full_determinism()``,
# ``make_reproducible()``, ``class DeterministicEngine``): calling it is the switch.
# Not ``seed``: a seeding helper runs in every run, and determinism hidden in it
# is then always on.
REPRODUCIBILITY_PURPOSE = re.compile(r"determin|reproduc", re.IGNORECASE)


def in_scope_named(context: Context, pattern: "re.Pattern[str]") -> bool:
    """Whether the node being visited is inside a function or class whose name
    matches ``pattern``."""
    for ancestor in context.ancestors():
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)) and pattern.search(ancestor.name.value):
            return True
    return False


_BENCHMARK_PATH = re.compile(r"bench", re.IGNORECASE)


def is_benchmark_path(path: str) -> bool:
    """A benchmark (``benchmarks/fp8/ddp.py``, ``benchmark_fp32.py``): it
    measures one configuration on purpose, so whole-program advice to change
    that configuration does not apply."""
    p = PurePath(path.replace("\\", "/"))
    return any(_BENCHMARK_PATH.search(part) for part in (*p.parts[:-1], p.stem))


# The words of a script's name, or of a directory's, that say it evaluates or
# runs a trained model (`tools/test.py`, `eval_coco.py`, `run_test_cls.py`,
# `run_infer_msg.py`, `inference.py`, `predict.py`, `demo.py`, `sample.py`,
# `models/eval/nn_metric.py`), and those that say it trains.
_INFERENCE_WORDS = frozenset(
    {"test", "eval", "evaluate", "evaluation", "infer", "inference", "predict", "demo", "sample"})
_TRAINING_WORD = re.compile(r"^(train|finetun|fine$|tun|pretrain|fit$)")


def named_for_training(path: str) -> bool:
    """Whether a word of a script's name says it trains (``train_net.py``,
    ``run_class_finetuning.py``, ``pretrain.py``)."""
    return any(_TRAINING_WORD.match(word) for word in PurePath(path.replace("\\", "/")).stem.lower().split("_"))


def named_for_inference(path: str) -> bool:
    """Whether a script's name (a word of it: ``run_test_cls.py``) or its
    directory (``eval/``, ``evaluation/``, ``inference/``) says it evaluates or
    runs a trained model, and no word of its name says it trains
    (``train_and_eval.py``).  Test files proper are not checked at all; a
    ``demo/`` directory counts (``demo/app.py``)."""
    if named_for_training(path):
        return False
    p = PurePath(path.replace("\\", "/"))
    return bool(set(p.stem.lower().split("_")) & _INFERENCE_WORDS) or any(
        part.lower() in ("eval", "evaluation", "inference", "demo", "demos") for part in p.parts[:-1])


_VERIFICATION_STEM = re.compile(r"^_*(convert|compare|verify|check(?!point))", re.IGNORECASE)


def notebook_trains_nothing(ctx: Context) -> bool:
    """A notebook, or a script named for inference (:func:`named_for_inference`:
    ``inference.py``, ``demo/app.py``, ``test.py``), with no backward pass: a
    demo that loads a trained model and samples or predicts, one input at a
    time (the settings it makes serve those runs, often on inputs of every
    size: one image or utterance after another)."""
    if "backward(" in ctx.source:
        return False
    return ctx.path.endswith(".ipynb") or named_for_inference(ctx.path)


def in_self_test(ctx: Context) -> bool:
    """Whether the node being visited is in the ``if __name__ == "__main__":``
    block of a module that trains nothing (no backward pass) and loops nowhere
    in that block: a model file's self-test that builds the model and runs it
    once on a dummy input (HRNet's ``model(torch.ones(1, 3, 768, 768))``)."""
    if "backward(" in ctx.source:
        return False
    for node in ctx.stack:
        if type(node) is cst.If and is_main_guard(node):
            return not any(type(n) in (cst.For, cst.While) for n in walk_nodes(node.body))
    return False


def in_synthetic_self_test(ctx: Context) -> bool:
    """Whether the node being visited is in a loop over a count (``for step
    in range(steps):``) of the ``if __name__ == "__main__":`` block of a module
    that defines classes (a model's or a library's file, which the program
    imports for them), a loop that makes up its inputs at random
    (``x = torch.randn(batch_size, 4, 128, 128).cuda()``): the module's
    self-test, a few steps on random data to check its memory or speed
    (sd-scripts' ``sdxl_original_unet.py``), not the program's steps.  So is
    any loop over a count in a module-level function named for a
    demonstration (``example_usage``, ``demo``, ``sanity_check``:
    ``_EXAMPLE``) that only the ``__main__`` block calls: vall-e's
    ``ar.py`` fits its model to two toy sequences for 100 steps."""
    if ctx.module is None or "__main__" not in ctx.source:
        return False
    stack = ctx.stack
    example = False  # in a module-level `def example_usage():` that only the `__main__` block calls
    for i, node in enumerate(stack):
        if type(node) is cst.If and is_main_guard(node):
            break
        if type(node) is cst.FunctionDef and i == 1 and _EXAMPLE.match(node.name.value) and _called_from_main(
                ctx, node.name.value):
            example = True
            break
    else:
        return False
    if not any(type(statement) is cst.ClassDef for statement in ctx.module.body):
        return False
    cache = ctx.shared.setdefault("synthetic-self-test", {})
    for node in stack[i + 1:]:
        if type(node) is cst.For:
            if example:
                if _counts(node.iter):
                    return True  # `for i in range(100):` fitting its toy inputs
                continue
            if id(node) not in cache:
                cache[id(node)] = _counts(node.iter) and any(
                    type(sub) is cst.Call and method_name(sub) in RANDOM_FACTORIES
                    and (ctx.qualname(sub.func) or "").startswith("torch.") for sub in walk_nodes(node.body))
            if cache[id(node)]:
                return True
    return False


# A function named for a demonstration (`example_usage`, `demo`, `sanity_check`,
# `smoke_test`): in a module of classes, run from its `__main__` block.
_EXAMPLE = re.compile(r"(?:_?(?:example|demo|sanity|smoke)(?:_\w*)?|\w*_(?:example|demo))$")


def _called_from_main(ctx: Context, name: str) -> bool:
    """Whether the module's ``if __name__ == "__main__":`` block calls ``name``
    and no other code of the module mentions it."""
    cache = ctx.shared.setdefault("called-from-main", {})
    if name not in cache:
        from_main = other = False
        for statement in ctx.module.body:
            if type(statement) is cst.If and is_main_guard(statement):
                from_main = from_main or any(type(sub) is cst.Name and sub.value == name
                                             for sub in walk_nodes(statement.body))
            elif not (type(statement) is cst.FunctionDef and statement.name.value == name):
                other = other or any(type(sub) is cst.Name and sub.value == name for sub in walk_nodes(statement))
        cache[name] = from_main and not other
    return cache[name]


def _counts(iterable: cst.BaseExpression) -> bool:
    """``range(...)``, ``tqdm(range(...))``, ``enumerate(range(...))``."""
    while type(iterable) is cst.Call and type(iterable.func) is cst.Name:
        if iterable.func.value == "range":
            return True
        if not iterable.args:
            return False
        iterable = iterable.args[0].value
    return False


def is_verification_path(path: str) -> bool:
    """A script that converts or checks a model and compares its outputs with a
    reference (``convert_checkpoint.py``, ``compare_outputs.py``,
    ``verify_export.py``): it runs once, and must be reproducible to compare."""
    return bool(_VERIFICATION_STEM.search(PurePath(path.replace("\\", "/")).stem))


# What a self-contained program without convolutions may import: the standard
# library, torch, and data, text or plotting libraries (no model zoo).
_PLAIN_IMPORTS = frozenset(
    {
        "__future__", "abc", "argparse", "collections", "contextlib", "copy", "csv", "dataclasses", "datasets",
        "enum", "evaluate", "functools", "glob", "gzip", "heapq", "io", "itertools", "json", "logging", "math",
        "matplotlib", "nltk", "numpy", "operator", "os", "pandas", "pathlib", "pickle", "random", "re",
        "scipy", "seaborn", "sentencepiece", "shutil", "sklearn", "spacy", "statistics", "string", "sys",
        "time", "tokenizers", "torch", "torchtext", "tqdm", "typing", "unicodedata", "urllib", "warnings",
        "zipfile",
    }
)
_IMPORT_ROOT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(\.*[\w]*)[^\n]*", re.M)
# torchvision for data only: `import torchvision.transforms as transforms`,
# `from torchvision import datasets, transforms` (not its models).
_DATA_ONLY_TORCHVISION = re.compile(
    r"(?:import[ \t]+torchvision\.(?:transforms|datasets|utils|io)\b[\w. \t]*"
    r"|from[ \t]+torchvision(?:\.(?:transforms|datasets|utils|io)\b[\w.]*)?[ \t]+import[ \t]+"
    r"(?:\(?[ \t]*(?:transforms|datasets|utils|io|[A-Z]\w*|to_\w+|make_grid|save_image)(?:[ \t]+as[ \t]+\w+)?[ \t]*,?[ \t]*)+\)?)"
    r"[ \t]*(?:#.*)?"
)
_OWN_MODEL = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\([^)]*Module[^)]*\)", re.M)


def runs_no_convolution(source: str) -> bool:
    """Whether a program visibly has no convolution.  It never says ``conv``
    (any case; ``convert`` does not count) or ``cnn``, and either defines its
    own ``nn.Module`` models and imports only the standard library, torch and
    data, text or plotting libraries (no model zoo, no module of its own
    project, whose models it cannot see), or is a text program: it imports
    from Hugging Face ``transformers`` and uses a tokenizer (``RobertaTokenizer``,
    ``AutoTokenizer``), and names no image, video, audio or vision model
    (``image``, ``pixel``, ``vision``, ``ViT``, ``CLIP``, ``audio``,
    ``speech``, ``wav2vec``, ``torchvision``, ``timm``, ``PIL``, ``cv2``):
    the text models of the Hub are made of embeddings, linear layers and
    attention."""
    if _CONVOLUTION_WORDS.search(source):
        return False
    if _OWN_MODEL.search(source):
        if all(m.group(1) in _PLAIN_IMPORTS
               or (m.group(1) == "torchvision" and _DATA_ONLY_TORCHVISION.fullmatch(m.group(0).strip()))
               for m in _IMPORT_ROOT.finditer(source)):
            return True
    return (
        _TRANSFORMERS_IMPORT.search(source) is not None
        and _TOKENIZER.search(source) is not None
        and _MEDIA_WORDS.search(source) is None
    )


_CONVOLUTION_WORDS = re.compile(r"conv(?!ert|ers)|cnn", re.IGNORECASE)
_TRANSFORMERS_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+transformers\b|import[ \t]+transformers\b)", re.M)
_TOKENIZER = re.compile(r"\w*Tokenizer\b")
# (word starts, or a capital inside a class name: `CLIPVisionModel`; not
# `division`, `revision` or `clip_grad_norm_`)
_MEDIA_WORDS = re.compile(
    r"(?i:image|pixel|video|audio|speech|wav2?vec|whisper|torchvision|timm|detr|segformer|mask2?former|yolo"
    r"|\bvision|\bvisual|\bPIL\b|\bcv2\b|\bclip(?!_grad)|\bvit\b|\bsam\b)"
    r"|Vision|Visual|CLIP|ViT"
)


# Words that say a program may put work on an accelerator, directly (`.cuda()`,
# `device`, `.to(...)`, `mps`, `xla`) or through a framework that moves batches
# for it (Lightning, Accelerate, Fabric, DeepSpeed, a `Trainer` class; not a variable
# named `trainer`, d2l's optimizer; Ignite moves batches only where it is given a
# `device`, and `ignite.distributed` says "distributed"; a default tensor type
# other than a host one: `set_default_tensor_type(torch.DoubleTensor)` is not).
# (The look-ahead for the words' first letters spares the regex engine trying
# every word at every character of the text: 2.5 times faster, the same matches.)
_ACCELERATOR_WORDS = re.compile(
    r"(?=[cdgmxthnalfis.])"
    r"(?:cuda|device|gpu|\b(?:mps|xla|tpu|xpu|hpu|npu)\b|accelerat|\.to\(|distributed|local_rank|lightning|fabric"
    r"|deepspeed|(?-i:Trainer)\b"
    # (`set_default_tensor_type(torch.DoubleTensor)` keeps tensors on the host)
    r"|set_default_tensor_type(?!\(\s*[\"']?torch\.(?:Double|Float|Half|BFloat16|Long|Int)Tensor\b))",
    re.IGNORECASE,
)
_ENTRY_LINE = re.compile(r"^(?:if __name__|for |while |with )", re.M)
# A program that builds its own model or data (a fragment that only uses a
# `model` and a `loader` defined elsewhere says nothing about where they live).
# (The look-ahead as in _ACCELERATOR_WORDS: twice as fast.)
_BUILDS_ITS_WORK = re.compile(
    r"(?=[n(Ddrt])"
    r"(?:\bnn\.(?!\w*Loss\()[A-Z]\w*\(|\(\s*(?:nn\.|torch\.nn\.)?Module\s*\)|DataLoader\(|datasets\.\w+\("
    r"|requires_grad(?:_\(|\s*=\s*True)"
    # data made with torch's factories (`train_x = torch.linspace(0, 1, 100)`: GPyTorch's tutorials)
    r"|\btorch\.(?:linspace|arange|randn|rand|randint|zeros|ones|tensor|Tensor|from_numpy)\()"
)


def runs_on_host_only(ctx: Context) -> bool:
    """Whether the module is a program that runs on the CPU alone: a notebook,
    or a script with an ``if __name__ == "__main__":`` block or a top-level
    loop, that builds its own model or data (``nn.Linear(...)``, a class of
    ``nn.Module``, parameters with ``requires_grad=True``, a
    ``DataLoader(...)``, a ``datasets.MNIST(...)``) and never names an
    accelerator or a framework that moves data for it.  Its tensors live in
    host memory: ``.item()`` and ``.cpu()`` wait for nothing, and no
    accelerator waits for its loaders.  (A module without an
    entry point may be handed device tensors by its callers, and is not
    judged so.)"""
    found = ctx.shared.get("host-only")
    if found is None:
        source = ctx.source
        entry = ctx.path.endswith(".ipynb") or bool(_ENTRY_LINE.search(source))
        found = ctx.shared["host-only"] = (
            entry and _BUILDS_ITS_WORK.search(source) is not None and not _ACCELERATOR_WORDS.search(source)
        )
    return found


# scikit-learn's synthetic generators and toy datasets: a few thousand rows
# at most, a whole run in seconds (a generator asked for 100,000 samples or
# more by a literal is not counted).
_TOY_DATA = re.compile(
    r"\b(?:make_(?:moons|circles|blobs|classification|regression|swiss_roll|s_curve|friedman[123])"
    r"|load_(?:iris|digits|wine|breast_cancer|diabetes|linnerud))\s*\(")
_MANY_SAMPLES = re.compile(r"\bn_samples\s*=\s*(\d[\d_]*)")


def trains_on_toy_data(ctx: Context) -> bool:
    """Whether the module makes its data with scikit-learn's synthetic
    generators or loads one of its toy datasets (``make_regression(2000)``,
    ``load_iris()``): a demonstration whose whole run takes seconds, where a
    wait per step or a loader's settings cost nothing anyone would notice."""
    found = ctx.shared.get("toy-data")
    if found is None:
        source = ctx.source
        found = "sklearn" in source and _TOY_DATA.search(source) is not None and not any(
            int(m.group(1).replace("_", "")) >= 100_000 for m in _MANY_SAMPLES.finditer(source))
        ctx.shared["toy-data"] = found
    return found


# A model cast to float64 (`nfm = nfm.double()`, `model.to(torch.float64)`), or
# float64 made the default dtype.
_TO_FLOAT64 = re.compile(r"\b(\w+)(?:\.\w+\([^()\n]*\))*\.(?:double\(\)|to\(\s*(?:dtype\s*=\s*)?torch\.(?:float64|double)\s*\))")
_DEFAULT_FLOAT64 = re.compile(r"set_default_dtype\(\s*torch\.(?:float64|double)\s*\)")


def _trains_in_float64(source: str) -> bool:
    """Whether the program makes float64 its default dtype, or casts a model
    to float64 (a name whose ``.parameters()`` it reads): autocast leaves
    float64 operations alone, and TF32 is a float32 mode."""
    if "float64" not in source and "double" not in source:
        return False
    if _DEFAULT_FLOAT64.search(source):
        return True
    return any(f"{m.group(1)}.parameters()" in source for m in _TO_FLOAT64.finditer(source))


def demonstration(ctx: Context) -> bool:
    """A module that runs a few batches (``runs_a_few_batches``) or trains on
    toy data (``trains_on_toy_data``): a loader's settings save nothing there."""
    return runs_a_few_batches(ctx) or trains_on_toy_data(ctx)


# A trainer told to run a few batches (Composer's `train_subset_num_batches=5`,
# Lightning's `limit_train_batches=10` or `fast_dev_run=True`): the program is a
# demonstration of an API, not a training run.  (Not `max_steps=`, which also
# bounds decoding loops.)
_FEW_BATCHES = re.compile(
    r"\b(?:(?:train|eval)_subset_num_batches|limit_(?:train|val|test|predict)_batches)\s*=\s*(\d+)\b(?![.\w])"
    r"|\bfast_dev_run\s*=\s*(True|\d+)\b"
)
_FEW = 20


def runs_a_few_batches(ctx: Context) -> bool:
    """Whether the module hands a trainer a literal limit of at most ``_FEW``
    batches or steps (``Trainer(..., train_subset_num_batches=5)``,
    ``limit_train_batches=10``, ``fast_dev_run=True``): a
    demonstration of an API that loads a few batches, where worker processes
    and pinned memory cost about what they save."""
    found = ctx.shared.get("few-batches")
    if found is None:
        source = ctx.source
        found = False
        if "_batches" in source or "fast_dev_run" in source:
            for match in _FEW_BATCHES.finditer(source):
                number = match.group(1) or match.group(2)
                if number == "True" or number != "0" and int(number) <= _FEW:
                    found = True
                    break
        ctx.shared["few-batches"] = found
    return found


_IMPORTS_GAUSSIAN_PROCESSES = re.compile(
    r"^[ \t]*(?:import|from)[ \t]+(?:%s)\b" % "|".join(sorted(_PRECISE_LINEAR_ALGEBRA)), re.M)


def fits_gaussian_processes(ctx: Context) -> bool:
    """Whether the module imports a Gaussian-process library (GPyTorch,
    BoTorch, linear_operator): every call of its models waits for the device
    inside (Cholesky's error check, conjugate gradients' convergence test, the
    variational strategies' reads), so one more read in the loop adds no wait."""
    found = ctx.shared.get("gaussian-processes")
    if found is None:
        source = ctx.source
        found = ctx.shared["gaussian-processes"] = any(name in source for name in _PRECISE_LINEAR_ALGEBRA) and (
            _IMPORTS_GAUSSIAN_PROCESSES.search(source) is not None)
    return found


# -- a class demonstrated once in a notebook ----------------------------------------------

_REPEATING = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp,
              cst.GeneratorExp)


def demonstrated_once(ctx: Context, cls: cst.ClassDef) -> bool:
    """Whether ``cls`` is a notebook's demonstration run once: the notebook
    trains nothing (no backward pass with an optimizer step), and the class is only instantiated at
    its top level (``ca = CausalAttention(d_in, d_out)``), outside any loop
    or function, with its instances only called, read or printed there
    (``ca(batch)``, ``ca.to(device)``), never handed to another call.  A
    class used inside another class counts when that one is demonstrated so
    too (depth 3).  A teaching notebook's toy attention module is such a
    class; one that a training loop or a generation function runs is not."""
    if not ctx.path.endswith(".ipynb") or ctx.module is None or ("backward(" in ctx.source and ".step(" in ctx.source):
        return False  # (a backward pass with no optimizer step trains nothing: Grad-CAM, saliency)
    cache = ctx.shared.setdefault("demonstrated-once", {})
    name = cls.name.value
    if name not in cache:
        cache[name] = _only_demonstrated(ctx.module, name, 0)
    return cache[name]


def _only_demonstrated(module: cst.Module, name: str, depth: int) -> bool:
    if depth > 3:
        return False
    instances: List[str] = []
    parts = False  # a part of another class so demonstrated
    for statement in module.body:
        if isinstance(statement, cst.ClassDef):
            if statement.name.value != name and names_anywhere(statement, name):
                if not _only_demonstrated(module, statement.name.value, depth + 1):
                    return False  # a part of another class: judged by that class
                parts = True
            continue
        for node, parent, repeated in _walk_with_parents(statement):
            if type(node) is not cst.Name or node.value != name:
                continue
            if repeated or not isinstance(statement, cst.SimpleStatementLine):
                return False
            instance = _instance_assigned(statement, name)
            if instance is None:
                return False
            instances.append(instance)
    if not instances:
        return parts
    for statement in module.body:
        if isinstance(statement, cst.ClassDef):
            continue
        for node, parent, repeated in _walk_with_parents(statement):
            if type(node) is cst.Name and node.value in instances and not (
                isinstance(parent, cst.AssignTarget) or (not repeated and _demonstration_use(node, parent))
            ):
                return False
    return True


def _instance_assigned(statement: cst.SimpleStatementLine, name: str) -> Optional[str]:
    """``x = Name(...)`` or ``x = Name(...).to(device)``: ``"x"``."""
    if len(statement.body) != 1 or not isinstance(statement.body[0], cst.Assign):
        return None
    assign = statement.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    value = assign.value
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        value = value.func.value  # `.to(device)`, `.eval()`
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == name):
        return None
    return assign.targets[0].target.value


def _demonstration_use(node: cst.Name, parent: Optional[cst.CSTNode]) -> bool:
    """``x(...)``, ``x.attr``, or ``print(x)``."""
    if isinstance(parent, cst.Call):
        return parent.func is node or (isinstance(parent.func, cst.Name) and parent.func.value == "print")
    if isinstance(parent, cst.Attribute):
        return parent.value is node
    return False


def _walk_with_parents(root: cst.CSTNode):
    """Each node under ``root`` with its parent (an ``Arg``'s call for its
    value) and whether a loop, comprehension or function around it (inside
    ``root``) may run it many times."""
    todo: List[Tuple[cst.CSTNode, Optional[cst.CSTNode], bool]] = [(root, None, False)]
    while todo:
        node, parent, repeated = todo.pop()
        yield node, parent, repeated
        inner = repeated or isinstance(node, _REPEATING)
        for child in iter_children(node):
            if isinstance(node, cst.Arg):
                todo.append((child, parent if child is node.value else node, inner))
            else:
                todo.append((child, node, inner))


# -- a visibly tiny model ------------------------------------------------------------------

# The size arguments of torch's layers: (keyword, position) of the input and output width.
_SIZED_LAYERS: Dict[str, Tuple[Tuple[str, int], Tuple[str, int]]] = {
    **{name: (("in_features", 0), ("out_features", 1)) for name in ("Linear",)},
    **{name: (("in_channels", 0), ("out_channels", 1))
       for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")},
    **{name: (("input_size", 0), ("hidden_size", 1)) for name in ("LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell")},
    **{name: (("num_embeddings", 0), ("embedding_dim", 1)) for name in ("Embedding",)},
}
_TINY_CHANNELS = 32  # most output channels of a convolution (its cost also grows with the image)
_TINY_PARAMETERS = 1_000_000
# A model that comes from elsewhere: its size is not in this module.
# Words of operations and layers that tensor cores run, in any spelling
# (`F.conv2d`, `nn.LSTM`, `torch.bmm`, `scaled_dot_product_attention`).
# A model named anywhere (`model(x)`, `self.net`, `generator`) may hold them too.
_TENSOR_CORE_WORDS = re.compile(r"conv|linear|matmul|\bmm\b|bmm|einsum|lstm|gru|rnn|attention|transformer|"
                                r"baddbmm|addmm|tensordot|model|net\b|network|backbone|encoder|decoder|"
                                r"generator|discriminator|policy|critic|actor|module", re.IGNORECASE)
# A helper that builds or loads a model (`build_model(cfg)`, `get_network()`, `load_model(path)`).
_MODEL_HELPER = re.compile(r"\b(?:build|create|get|load|make|init)_?(?:model|net|network|backbone)\w*\(",
                           re.IGNORECASE)
_MODEL_FROM_ELSEWHERE = re.compile(
    r"torchvision\.models|\btimm\.|from_pretrained|torch\.hub\.load|\bAutoModel"
)


# Libraries whose classes are not the model: `from torch.utils.data import
# DataLoader`, `from sklearn.datasets import make_circles`.
_NOT_MODELS = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchmetrics", "torchinfo", "sklearn", "numpy", "pandas",
    "PIL", "matplotlib", "typing", "collections", "dataclasses", "pathlib", "tqdm", "datetime", "argparse",
    "functools", "itertools", "enum", "abc", "timeit", "IPython", "mlxtend",
    "ignite", "tensorboardX", "wandb", "visdom", "clearml", "neptune", "mlflow",
})


def _imports_a_class(ctx: Context) -> bool:
    """Whether the module imports a class from a module of its own or a
    library that may hold its model (`from models import ResNet`)."""
    return any(
        name is not None and name[:1].isupper() and module.split(".", 1)[0] not in _NOT_MODELS
        for module, name, _ in imported_names(ctx.source, ctx.path)
    )


def tiny_layers(module: cst.Module, ctx: Context) -> bool:
    """Whether every layer the module builds has sizes written as numbers
    (literals, module-level constants, arithmetic on them; convolutions at
    most ``_TINY_CHANNELS`` channels out), with fewer than ``_TINY_PARAMETERS``
    weights in all (an embedding counts its width, the cost of a lookup
    whatever the vocabulary; ``nn.Parameter(torch.randn(1))`` its shape), and
    it loads no model from elsewhere: a course notebook's linear regression,
    its 2-10-10-1 MLP, NYU's spiral classifier, an MNIST VAE.  A size that
    comes from a constructor argument no instantiation in the module gives
    (``nn.Linear(d_model, d_ff)``) is unknown: not tiny."""
    source = ctx.source
    if _MODEL_FROM_ELSEWHERE.search(source):
        return False
    constants: Dict[str, int] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    name = small.targets[0].target.value
                    value = _constant(small.value, constants)
                    if value is None:
                        constants.pop(name, None)
                    elif name in constants and constants[name] != value:
                        constants[name] = max(constants[name], value)
                    else:
                        constants[name] = value
    # The constructor arguments of the module's classes, from their defaults
    # and from every instantiation in the module (`BlobModel(2, 4, hidden_units=8)`).
    scopes: List[Tuple[cst.CSTNode, Dict[str, int]]] = [(module, constants)]
    classes = {c.name.value: c for c in module.body if isinstance(c, cst.ClassDef)}
    calls = [n for n in walk_nodes(module) if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
             and n.func.value in classes]
    for name, cls in classes.items():
        init = next((f for f in cls.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"), None)
        if init is None:
            continue
        params = list(init.params.params)[1:]
        env = dict(constants)
        for k, param in enumerate(params):
            known = [_constant(param.default, constants)] if param.default is not None else []
            for call in calls:
                if call.func.value != name:
                    continue
                arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == param.name.value), None)
                positional = [a for a in call.args if a.keyword is None]
                if arg is None and k < len(positional) and not positional[k].star:
                    arg = positional[k]
                if arg is not None:
                    known.append(_constant(arg.value, constants))
            if known and None not in known:
                env[param.name.value] = max(known)
            else:
                env.pop(param.name.value, None)
        scopes.append((init, env))
    layers = 0
    parameters = 0
    seen: set = set()
    for scope, env in reversed(scopes):  # a constructor's layers with its arguments first
        for node in walk_nodes(scope):
            if not isinstance(node, cst.Call) or id(node) in seen:
                continue
            seen.add(id(node))
            verdict = _layer_size(node, env, ctx)
            if verdict is None:
                continue
            if verdict is False:
                return False
            layers += 1
            parameters += verdict
    return layers > 0 and parameters < _TINY_PARAMETERS


def _layer_size(node: cst.Call, constants: Dict[str, int], ctx: Context):
    """None for a call that is not a sized layer; False for one that is not
    tiny (or whose sizes are unknown); else its weight count."""
    q = ctx.qualname(node.func) or ""
    if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
        return _parameter_size(node, constants, ctx)
    if not q.startswith("torch.nn."):
        return None
    sizes = _SIZED_LAYERS.get(q.rsplit(".", 1)[-1])
    if sizes is None:
        return None
    values = []
    for keyword, position in sizes:
        known, arg = argument(node, keyword, position)
        value = _constant(arg.value, constants) if known and arg is not None else None
        if value is None and not (q.endswith("Embedding") and position == 0):
            return False
        values.append(value)
    width_in, width_out = values
    if width_in is None:  # an embedding's vocabulary: a lookup costs its width, whatever the rows
        return width_out
    if "Conv" in q and width_out > _TINY_CHANNELS:
        return False
    return width_in * width_out * (9 if "Conv" in q else 4 if q.rsplit(".", 1)[-1] in ("LSTM", "LSTMCell") else 1)


_SHAPED_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty"})


def _parameter_size(node: cst.Call, constants: Dict[str, int], ctx: Context):
    """The size of ``nn.Parameter(torch.randn(1, 4))``: a model built from raw
    tensors (a course's linear regression); False when its shape is unknown."""
    known, arg = argument(node, "data", 0)
    value = arg.value if known and arg is not None else None
    factory = (ctx.qualname(value.func) or "") if isinstance(value, cst.Call) else ""
    if not (factory.startswith("torch.") and factory.rsplit(".", 1)[-1] in _SHAPED_FACTORIES):
        return False
    size = 1
    for dim in value.args:
        if dim.keyword is not None:
            continue
        number = _constant(dim.value, constants) if not dim.star else None
        if number is None:
            return False
        size *= number
    return size


def _constant(expr: cst.BaseExpression, constants: Dict[str, int], depth: int = 0) -> Optional[int]:
    """An integer expression of literals and known constants (``28 * 28``, ``H``, ``d ** 2``)."""
    if depth > 8:
        return None
    if isinstance(expr, cst.Integer):
        return literal_number(expr)
    if isinstance(expr, cst.Name):
        return constants.get(expr.value)
    if isinstance(expr, cst.BinaryOperation):
        left, right = _constant(expr.left, constants, depth + 1), _constant(expr.right, constants, depth + 1)
        if left is None or right is None:
            return None
        op = type(expr.operator)
        if op is cst.Add:
            return left + right
        if op is cst.Subtract:
            return left - right
        if op is cst.Multiply:
            return left * right
        if op is cst.FloorDivide and right:
            return left // right
        if op is cst.Power and 0 <= right <= 8:
            return left ** right
    return None
