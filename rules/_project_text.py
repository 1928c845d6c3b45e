"""The project index's textual questions: no parse, no LibCST.

The run's main process asks these of every file of the run while the worker
processes parse (``torchlint/project.py``): which files might call a function
(a cheap test on the text), what kind of module a caller is (``traits``), and
the keys under which the index records traits of a function's callers.  Kept
free of LibCST so that the main process never imports it for them.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

UNKNOWN_LEVEL = 0  # how often a call runs when its module does not say: rules/_frequency.py's UNKNOWN


@functools.lru_cache(maxsize=8192)
def module_parts(path: str) -> Tuple[str, ...]:
    """``pkg/sub/mod.py`` -> ``("pkg", "sub", "mod")`` (``__init__`` names its package)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p and p != "."]
    if not parts:
        return ()
    last = parts[-1]
    if last.endswith(".py"):
        last = last[:-3]
    parts[-1] = last
    if parts[-1] == "__init__":
        parts.pop()
    return tuple(parts)


def names_module(dotted: str, target: Sequence[str]) -> bool:
    """Whether the dotted module name (from an import) can be the file ``target``
    (its path's parts): a component-wise suffix of the path."""
    wanted = tuple(p for p in dotted.split(".") if p)
    return bool(wanted) and len(wanted) <= len(target) and tuple(target[-len(wanted):]) == wanted


# A helper whose name says that it wraps a model in DDP (`smart_DDP(model)`,
# `wrap_ddp(model)`, `to_ddp(model)`): the wrap often sits in a utility module.
_DDP_HELPER = re.compile(r"(?:^|_)(?:ddp|DDP)(?:$|_)")
_NOT_A_WRAP = ("is_", "unwrap", "de_")
# The same, in a module's text: a call of DistributedDataParallel or of such a helper.
_DDP_WRAP_TEXT = re.compile(r"\b(DistributedDataParallel|\w*(?:ddp|DDP)\w*)\s*\(")


def is_ddp_helper(name: str) -> bool:
    """``smart_DDP``, ``wrap_ddp``; not ``is_ddp`` or ``unwrap_ddp``."""
    return not name.startswith(_NOT_A_WRAP) and _DDP_HELPER.search(name) is not None


def text_wraps_in_ddp(text: str) -> bool:
    """Whether a module's text calls ``DistributedDataParallel(...)`` or a
    helper whose name says it wraps in DDP (a cheap test on the text: the
    project index asks it of the modules that call a function)."""
    if "DDP" not in text and "ddp" not in text and "DistributedDataParallel" not in text:
        return False
    for match in _DDP_WRAP_TEXT.finditer(text):
        name = match.group(1)
        if name == "DistributedDataParallel" or is_ddp_helper(name):
            return True
    return False


HOST_ARGS = "host_args"  # every call passes only host values, or sits in a loop that waits every iteration
DDP = "ddp"  # a caller module wraps a model in DistributedDataParallel
# Loaders built in one module and iterated in another (TL202, TL204).  A rule
# notes ``trait_key(function, LOADER)`` for a function that returns a
# `DataLoader` without `pin_memory`, ``trait_key(function, PINNED)`` for one
# that returns a `DataLoader(..., pin_memory=True)`; the index then asks each
# caller whether it iterates the returned loader and copies the batches to a
# device.  Where one does, the function's file gets ``trait_key(function,
# COPIED)`` (where the copy is), and for a pinned loader the caller's file gets
# ``trait_key(<the callee as written there>, PINNED_CALL)`` (the function's file).
LOADER = "loader"
PINNED = "pinned"
COPIED = "copied"
PINNED_CALL = "pinned_call"
# Evaluation functions called from another module (TL302): a rule notes
# ``trait_key(function, GRADS)``; each call site then gives the function's file
# ``trait_key(function, NO_GRAD)`` when it runs without gradients (under
# ``with torch.no_grad():`` or in a function decorated so), else
# ``trait_key(function, WITH_GRAD)``.
# A call with gradients on in a function that trains (backpropagates, steps an
# optimizer, or is named `forward`/`*train*`/`*loss*`) also gives
# ``trait_key(function, TRAINS)``: the function's result feeds a training step.
GRADS = "grads"
NO_GRAD = "no_grad"
WITH_GRAD = "with_grad"
TRAINS = "trains"
# A call site whose answer is its calling function's (a call with no grad mode
# around it, in a function that nothing in its own module calls: LAVIS's
# `valid_step` calling `model.predict_answers(...)`, itself called only from a
# runner's `@torch.no_grad()` loop in another module) gives, besides its own
# facts, ``(FOLLOW, trait_key(caller, GRADS))``: the index asks the same
# question of the caller, and the site gives the traits that question's sites
# give (its own facts when none is found).
FOLLOW = "follow"
_NOTES = (LOADER, PINNED, GRADS)


def trait_key(qualname: str, trait: str) -> str:
    """The fact key under which the index records a trait of ``qualname``'s callers."""
    return f"{qualname}|{trait}"


def split_note(name: str) -> Tuple[str, Optional[str]]:
    """A noted name -> (the function's qualified name, the question asked
    about its callers: LOADER, PINNED, GRADS; None for a plain function, whose
    callers tell how often it runs)."""
    qualname, sep, trait = name.partition("|")
    return (qualname, trait) if sep and trait in _NOTES else (name, None)


def traits(text: str) -> Tuple[str, ...]:
    """What kind of module a caller is, for the rules that ask (TL602: a module
    that wraps a model in DDP runs the functions it calls on a DDP model)."""
    return (DDP,) if text_wraps_in_ddp(text) else ()


_IMPORT_LINES: Dict[str, "re.Pattern[str]"] = {}


def might_call(text: str, target_path: str, qualname: str) -> bool:
    """The cheap textual test before parsing: the file calls something by the
    function's (or method's) name and has an import line naming the target
    module (``from pkg.misc import ...``, ``import pkg.misc as m``,
    ``from pkg import misc``, ``from . import misc``, ``from .misc import ...``).
    For a loader's question (``split_note``) the file must also copy something
    (``.cuda(`` or ``.to(``).  For TL302's question about a method (GRADS), a
    call ``.m(`` is enough: the receiver may be of unknown class
    (``_project.Finder._reaches``)."""
    qualname, note = split_note(qualname)
    if note in (LOADER, PINNED) and ".cuda(" not in text and ".to(" not in text:
        return False  # a loader's batches are copied nowhere in this file
    parts = module_parts(target_path)
    if not parts:
        return False
    name = qualname.rsplit(".", 1)[-1]
    if f"{name}(" not in text:
        return False
    if "." in qualname and (note == GRADS or note is None and distinctive(name)):
        # a method called on a receiver of unknown class (`network.predict(x)`
        # with `network` a parameter) needs no import of the class's module
        # (but see `narrow`)
        return f".{name}(" in text
    return _imports_module(text, parts[-1])


def distinctive(method: str) -> bool:
    """A method name of three words or more (``apply_max_norm_regularization``):
    a call of it on a receiver of unknown class (a network built from a module
    the command line names) is a call of the project's method of that name,
    for the question how often it runs (``Finder._reaches``)."""
    return not method.startswith("__") and len([w for w in method.split("_") if w]) >= 3


def shadowed(caller: str, target_path: str, files: FrozenSet[str], text: str) -> bool:
    """Whether ``caller`` (its ``text``) imports a module of its own by the
    target's name: a file of the run at the same path relative to the
    caller's folder as the target's last parts, imported by exactly that
    dotted name (``imagebind_LLM/main_finetune.py``'s ``from engine_finetune
    import train_one_epoch`` finds ``imagebind_LLM/engine_finetune.py``, not
    ``gorilla/finetune/engine_finetune.py``: the script's folder leads
    ``sys.path``).  In a repository of several projects with same-named
    modules such a caller does not reach the target.  ``files``: the run's
    files, with ``/`` separators."""
    folder = caller.replace("\\", "/").rpartition("/")[0]
    parts = target_path.replace("\\", "/").split("/")
    for k in range(1, len(parts)):
        tail = "/".join(parts[-k:])
        own = f"{folder}/{tail}" if folder else tail
        if own == "/".join(parts):
            return False  # the caller's own folder holds the target
        dotted = ".".join(module_parts(tail))
        if own in files and dotted and re.search(
                rf"^[ \t]*(?:from[ \t]+{re.escape(dotted)}[ \t]+import\b|import[ \t]+{re.escape(dotted)}\b(?!\.))",
                text, re.M):
            return True
    return False


# At most this many files are taken as callers of a method by its name alone
# (TL302's question); when more call a method of that name, only those that
# import the method's module are (a common name says little).
_GUESSED_CALLERS = 6


def narrow(target_path: str, qualname: str, found: List[str], text_of) -> List[str]:
    """The callers ``might_call`` found for a question, kept whole unless they
    were guessed by a method's name alone and are too many to be telling."""
    qualname, note = split_note(qualname)
    parts = module_parts(target_path)
    untyped = note == GRADS or note is None and distinctive(qualname.rsplit(".", 1)[-1])
    if not untyped or "." not in qualname or len(found) <= _GUESSED_CALLERS or not parts:
        return found
    return [other for other in found if _imports_module(text_of(other) or "", parts[-1])]


def _imports_module(text: str, stem: str) -> bool:
    """Whether ``text`` has an import line naming the module ``stem``."""
    if stem not in text:
        return False
    pattern = _IMPORT_LINES.get(stem)
    if pattern is None:
        pattern = _IMPORT_LINES[stem] = re.compile(
            rf"^[ \t]*(?:from[ \t]+[\w.]*\b{re.escape(stem)}\b|from[ \t]+[\w.]+[ \t]+import[^\n]*\b{re.escape(stem)}\b"
            rf"|import[ \t]+[\w.]*\b{re.escape(stem)}\b)",
            re.M,
        )
    return pattern.search(text) is not None


# What a file's calls can reach (``_project.CallCollector.summary``, made in
# the first pass from its parse): the dotted names its callees resolve to
# through its imports, and the method names it calls.
CallsSummary = Tuple[FrozenSet[str], FrozenSet[str]]


def could_reach(summary: Optional[CallsSummary], target_path: str, qualname: str) -> bool:
    """Whether a file with these calls (``summary``; None: not known, so
    perhaps) can call ``qualname`` of the file ``target_path``: a function
    only through a callee that resolves to it, a method only through a call
    of that name on an instance of a class the file calls by a resolved name
    (``_project.Finder._reaches``).  False spares the index a second parse of
    a file that the textual test (``might_call``) lets through."""
    if summary is None:
        return True
    resolved, methods = summary
    qualname, note = split_note(qualname)
    cls_name, _, method = qualname.rpartition(".")
    if cls_name:
        if method not in methods:
            return False
        if note == GRADS or note is None and distinctive(method):
            return True  # a receiver of unknown class may be one (``Finder._reaches``)
        qualname = cls_name
    if qualname.rpartition(".")[2] not in _last_parts(resolved):
        return False  # (no callee ends with the name: the usual answer, without a scan)
    target = module_parts(target_path)
    return any(names_in_module(dotted, target, qualname) for dotted in resolved)


@functools.lru_cache(maxsize=4096)
def _last_parts(resolved: FrozenSet[str]) -> FrozenSet[str]:
    """The last parts of a file's resolved callees (``pkg.misc.helper`` -> ``helper``),
    once per file of the run (a frozenset's hash is kept)."""
    return frozenset(dotted.rpartition(".")[2] for dotted in resolved)


def names_in_module(dotted: str, target: Sequence[str], qualname: str) -> bool:
    """Whether ``dotted`` names ``qualname`` of the module ``target``."""
    suffix = "." + qualname
    return dotted.endswith(suffix) and names_module(dotted[: -len(suffix)], target)


# -- whole-program facts across modules (TL501, TL503-TL505) -------------------
# A program's settings often live in another module of the project than its
# training step: FSDP's `MixedPrecisionPolicy` and `model.compile()` in the
# `parallelize_model()` that the entry script calls, `cudnn.benchmark = True`
# at the top of a `setup.py` it imports, a gym environment stepped by the
# script that imports the agent whose `update()` trains.  A whole-program rule
# about to report notes PROGRAM_NOTE (``_program.ProgramRule``); the index then
# reads, textually,
#
# - the top-level code (outside functions and classes: what runs on import) of
#   the modules the file imports, transitively up to MAX_IMPORT_DEPTH;
# - the functions and classes the file imports from modules of the run and
#   calls (`parallelize_model(...)`, `mod.setup(...)`), one level deep;
# - the whole text of the modules that import the file (the programs that use
#   it),
#
# and records under ``trait_key(PROGRAM_SUBJECT, kind)`` (the module that says
# it) each kind of setting they make: REDUCED (autocast, a gradient scaler,
# bfloat16/float16, a mixed-precision policy, DeepSpeed), TF32, COMPILE
# (`torch.compile`, `model.compile()`, `torch._dynamo`, a switch named
# `compile`), BENCHMARK (`cudnn.benchmark = True`, a `cudnn_benchmark` switch)
# and SIMULATOR (an imported reinforcement-learning environment, or a
# Gaussian-splatting rasterizer: ``SIMULATORS``).  The file is
# then checked again with those facts, as if it made the settings itself.
# The words are stricter than a module's own (``_program._MENTION``): in
# another module `amp` is as often an amplitude, `half` a half width, and a
# library class that supports AMP says nothing about this program.
PROGRAM = "program"
PROGRAM_SUBJECT = "<program>"
PROGRAM_NOTE = f"{PROGRAM_SUBJECT}|{PROGRAM}"
REDUCED = "reduced"
TF32 = "tf32"
COMPILE = "compile"
BENCHMARK = "benchmark"
SIMULATOR = "simulator"
DOUBLE_BACKWARD = "double_backward"  # a gradient of a gradient (`autograd.grad(..., create_graph=True)`)
DOUBLE_BACKWARD_CODE = r"\bcreate_graph\s*=\s*True\b"  # (the code that takes one)
# A module that imports this one puts every BatchNorm of its model in eval
# mode whenever it trains (`def train(self, mode=True):` looping over
# `self.modules()` with `isinstance(m, nn.BatchNorm2d)` and `m.eval()`: TSN's
# and TSM's "partial BN", mmdet's `norm_eval`): the running statistics are
# frozen, so a convolution's bias before them no longer cancels (TL401).
FROZEN_BN = "frozen_bn"
MAX_IMPORT_DEPTH = 3
_TRAIN_OVERRIDE = re.compile(r"^([ \t]+)def train\(\s*self\b[^\n]*\n((?:\1[ \t]+[^\n]*\n|[ \t]*\n)*)", re.M)
_FREEZES_BN = re.compile(
    r"isinstance\(\s*\w+\s*,\s*\(?\s*(?:torch\.)?(?:nn\.)?(?:modules\.batchnorm\.)?(?:_BatchNorm|BatchNorm[123]?d|SyncBatchNorm)\b"
    r"[^\n]*\n(?:[^\n]*\n){0,6}?[^\n]*\.eval\(\)"
)


def freezes_batchnorm(text: str) -> bool:
    """Whether a module's classes put their BatchNorms in eval mode in their own ``train()``."""
    if "def train(" not in text:
        return False
    return any(_FREEZES_BN.search(match.group(2)) for match in _TRAIN_OVERRIDE.finditer(text))

# `model.load_state_dict(model_zoo.load_url(url))`: the module loads published
# weights into its own model, strictly; the layers are fixed by the checkpoint.
_LOADS_PUBLISHED_WEIGHTS = re.compile(
    r"\.load_state_dict\(\s*(?:[\w.]+\.)?(?:load_url|load_state_dict_from_url)\((?![^\n]*strict\s*=\s*False)"
)


# The helper classes that `convert_torch_to_pytorch` writes into every model it
# converts from a Torch7 file (`class LambdaBase(nn.Sequential)`, `LambdaMap`,
# `LambdaReduce`): the layers mirror the converted checkpoint's.
_CONVERTED_FROM_TORCH7 = re.compile(r"^class LambdaBase\(nn\.Sequential\):", re.M)


# `self.load_checkpoint(head, checkpoint, prefix="keypoint_head.", strict=True)`:
# a checkpoint that must match the layers exactly, said so in the call.
_LOADS_STRICTLY = re.compile(r"\bload_(?:state_dict|checkpoint)\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*\bstrict\s*=\s*True\b")


def loads_published_weights(source: str) -> bool:
    """Whether a module holds a port of published weights: it loads a
    downloaded checkpoint whole into a model
    (``model.load_state_dict(model_zoo.load_url(url))``, without
    ``strict=False``: Caffe's BN-Inception, Torch7's ResNets), or loads a
    checkpoint with an explicit ``strict=True`` (``load_state_dict(ckpt,
    strict=True)``, mmcv's ``load_checkpoint(model, path, strict=True)``: an
    inference wrapper around pretrained heads), or it was generated by
    ``convert_torch_to_pytorch`` from a Torch7 model (MegaDepth's
    hourglass): its layers must keep every parameter the checkpoint has."""
    if "LambdaBase" in source and "LambdaReduce" in source and _CONVERTED_FROM_TORCH7.search(source):
        return True
    if "strict" in source and _LOADS_STRICTLY.search(source) is not None:
        return True
    return "load_state_dict" in source and _LOADS_PUBLISHED_WEIGHTS.search(source) is not None


# A module that imports this one downloads published weights and loads them
# whole into a model (`load_state_dict_from_url(...)`, `hf_hub_download(...)`
# and a `.load_state_dict(...)` without `strict=False`: kornia's SOLD2 around
# its backbone), or is itself such a port (`loads_published_weights`): the
# imported layers are fixed by that checkpoint (TL401).
PUBLISHED_WEIGHTS = "published_weights"
_DOWNLOADS_WEIGHTS = re.compile(r"\b(?:load_url|load_state_dict_from_url|hf_hub_download|download_url_to_file)\(")
_LOADS_WHOLE = re.compile(r"\.load_state_dict\((?![^\n]*strict\s*=\s*False)")


def loads_downloaded_weights(text: str) -> bool:
    """Whether a module downloads published weights and loads a state dict
    whole (``load_state_dict_from_url(url)`` ... ``model.load_state_dict(sd)``,
    not ``strict=False``), or holds a port of published weights."""
    if loads_published_weights(text):
        return True
    return _DOWNLOADS_WEIGHTS.search(text) is not None and _LOADS_WHOLE.search(text) is not None


# Modules whose import says the step time is not the GPU kernels' that the
# whole-program settings speed up.  Reinforcement-learning environments: a
# program that steps one spends its step time in the simulator on the host and
# in small policy networks, where kernel-level settings (autotuned convolutions,
# TF32, autocast, compilation) buy nothing measurable.  Gaussian-splatting
# rasterizers count the same: the step time is their own float32 CUDA kernels,
# which no such setting touches and torch.compile cannot trace into (and
# densification changes the number of Gaussians as it trains).  So does
# MinkowskiEngine: its sparse convolutions are its own CUDA kernels on a
# coordinate manager in C++, with no half-precision kernels (autocast makes
# them fail with a type mismatch) and a number of points that changes every
# batch (nothing for the compiler or the cuDNN autotuner).
SIMULATORS = frozenset(
    {"gym", "gymnasium", "envpool", "procgen", "dm_control", "pettingzoo", "mujoco",
     "isaacgym", "brax", "minigrid", "atari_py", "ale_py", "pybullet_envs", "stable_baselines3",
     "diff_gaussian_rasterization", "diff_surfel_rasterization", "gsplat", "MinkowskiEngine",
     # TorchRL's environments and collectors (`from torchrl.envs import GymEnv`)
     "torchrl.envs", "torchrl.collectors"}
)
_SETTING = re.compile(
    r"(?P<reduced>\bautocast\b|GradScaler|MixedPrecision\w*\(|\bmixed_precision\b|\b(?:torch\.)?(?:bfloat16|float16)\b"
    r"|\bdeepspeed\.initialize\b)"
    r"|(?P<tf32>\ballow_tf32\s*=\s*True\b|set_float32_matmul_precision\(\s*[\"'](?:high|medium)|fp32_precision\s*=)"
    r"|(?P<compile>\btorch\.compile\b|\btorch\._dynamo\b|(?<!\bre)(?<!\bregex)\.compile\(\s*(?:\)|mode|fullgraph|dynamic|backend|options)"
    r"|\b(?:args|cfg|config|opt|opts|hparams|params|\w+_args)\.(?:use_)?compile\b)"
    r"|(?P<benchmark>cudnn\.benchmark\s*=\s*True\b|\bcudnn_benchmark\b)"
    r"|(?P<double_backward>" + DOUBLE_BACKWARD_CODE + ")"
    r"|(?P<simulator>^[ \t]*(?:import|from)[ \t]+(?:" + "|".join(sorted(re.escape(name) for name in SIMULATORS)) + r")\b)",
    re.M,
)
_COMMENT = re.compile(r"#[^\n]*")
_IMPORT_STATEMENT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<dots>\.*)(?P<base>[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
    r"|import[ \t]+(?P<modules>[^\n#;]+))",
    re.M,
)
_DEFINITION = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)")


def setting_mentions(code: str) -> FrozenSet[str]:
    """The kinds of whole-program setting that a piece of code (comments
    removed: ``_COMMENT``) makes."""
    return frozenset(m.lastgroup or "" for m in _SETTING.finditer(code))


def _chunks(text: str) -> Tuple[str, Dict[str, str]]:
    """A module's text -> (its top-level code, {name: text} of each top-level
    function and class), by indentation."""
    top: List[str] = []
    defs: Dict[str, List[str]] = {}
    current: Optional[List[str]] = None
    decorators: List[str] = []
    for line in text.splitlines():
        if line[:1] not in ("", " ", "\t", "#", ")", "]", "}"):
            if line.startswith("@"):
                decorators.append(line)
                continue
            match = _DEFINITION.match(line)
            if match is not None:
                current = defs.setdefault(match.group(1), [])
                current.extend(decorators)
                current.append(line)
                decorators = []
                continue
            current = None
            top.extend(decorators)
            decorators = []
        (top if current is None else current).append(line)
    return "\n".join(top), {name: "\n".join(lines) for name, lines in defs.items()}


def imported_names(text: str, path: str) -> List[Tuple[str, Optional[str], str]]:
    """(dotted module, imported name or None, local name) for each import of a
    module, relative imports resolved against the file's package; `__future__`
    and torch left out.  ``from pkg import x`` gives (pkg, x, x): ``x`` may be
    a module or a name defined in ``pkg``."""
    package = module_parts(path)[:-1]
    found: List[Tuple[str, Optional[str], str]] = []
    for match in _IMPORT_STATEMENT.finditer(text):
        if match.group("modules") is not None:
            for item in match.group("modules").split(","):
                words = item.split()
                if words:
                    local = words[2] if len(words) == 3 and words[1] == "as" else words[0].split(".", 1)[0]
                    found.append((words[0], None, local))
            continue
        base = match.group("base") or ""
        dots = len(match.group("dots") or "")
        if dots:
            up = dots - 1
            parent = package[: len(package) - up] if up else package
            base = ".".join([*parent, *([base] if base else [])])
        if not base:
            continue
        for item in match.group("names").strip("()").replace("\\", " ").split(","):
            words = item.split()
            if words and words[0].isidentifier():
                found.append((base, words[0], words[2] if len(words) == 3 and words[1] == "as" else words[0]))
    return [item for item in found if item[0].split(".", 1)[0] not in ("__future__", "torch")]


class ImportGraph:
    """Which files of a run import which, and what they import from each
    (a textual reading of the import statements; a dotted name that several
    files can be is the one nearest the importer, a script's own directory
    first, as ``sys.path[0]``)."""

    def __init__(self, files: Sequence[str], text_of) -> None:
        self.files = list(files)
        self.text_of = text_of
        self._by_stem: Dict[str, List[str]] = {}
        for path in self.files:
            parts = module_parts(path)
            if parts:
                self._by_stem.setdefault(parts[-1], []).append(path)
        self._imports: Dict[str, List[Tuple[str, Optional[str], str]]] = {}
        self._chunks: Dict[str, Tuple[str, Dict[str, str]]] = {}
        self._importers: Optional[Dict[str, List[str]]] = None

    def _resolve(self, dotted: str, here: Tuple[str, ...], path: str) -> Optional[str]:
        wanted = dotted.split(".")
        candidates = [p for p in self._by_stem.get(wanted[-1], ()) if p != path and names_module(dotted, module_parts(p))]
        if not candidates:
            return None
        return min(candidates, key=lambda p: (-_common_prefix(here, module_parts(p)), len(module_parts(p)), p))

    def imports(self, path: str) -> List[Tuple[str, Optional[str], str]]:
        """(file of the run, name imported from it or None, local name) for
        each import of ``path`` that is a module of the run."""
        if path not in self._imports:
            here = module_parts(path)
            out: List[Tuple[str, Optional[str], str]] = []
            for dotted, name, local in imported_names(self.text_of(path) or "", path):
                if name is not None:
                    module = self._resolve(f"{dotted}.{name}", here, path)
                    if module is not None:  # `from pkg import mod`
                        out.append((module, None, local))
                        continue
                module = self._resolve(dotted, here, path)
                if module is not None:
                    out.append((module, name, local))
            self._imports[path] = out
        return self._imports[path]

    def chunks(self, path: str) -> Tuple[str, Dict[str, str]]:
        if path not in self._chunks:
            self._chunks[path] = _chunks(_COMMENT.sub("", self.text_of(path) or ""))
        return self._chunks[path]

    def importers(self, path: str) -> List[str]:
        """The files of the run that import ``path``."""
        if self._importers is None:
            self._importers = {}
            for other in self.files:
                for target in {module for module, _, _ in self.imports(other)}:
                    self._importers.setdefault(target, []).append(other)
        return self._importers.get(path, [])


def _common_prefix(a: Tuple[str, ...], b: Tuple[str, ...]) -> int:
    return len(os.path.commonprefix([a, b]))


# A `collate_fn` that builds the batch around an object of a class of its own
# module with no `pin_memory()` method (DETR's `NestedTensor`, made by
# `nested_tensor_from_tensor_list`): `pin_memory=True` leaves that object, the
# images, unpinned, so TL202's advice buys nothing.  The fact is recorded under
# ``trait_key(COLLATE_SUBJECT, <the collate_fn as written>)``; a function bound
# with `partial` (MDETR's `collate_fn=partial(utils.collate_fn, False)`) is the
# function it binds.  A class's alternative constructor builds the class too
# (`NestedTensor.from_tensor_list(images)`).
COLLATE_SUBJECT = "<collate>"
_COLLATE_ARGUMENT = re.compile(r"\bcollate_fn\s*=\s*(?:(?:functools\.)?partial\(\s*)?([A-Za-z_][\w.]*)")
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?:\.[A-Za-z_]\w*)?\s*\(")
_RETURNED_CALL = re.compile(r"\breturn\s+([A-Za-z_]\w*)\s*\(")


def builds_unpinnable_batches(text: str, name: str) -> bool:
    """Whether the top-level function ``name`` of a module's ``text`` builds an
    object of a class of that module that has no ``pin_memory()`` method,
    itself or through a function of the module that returns one."""
    return _builds_unpinnable(_chunks(_COMMENT.sub("", text))[1], name)


def _builds_unpinnable(definitions: Dict[str, str], name: str) -> bool:
    """:func:`builds_unpinnable_batches` on a module's top-level definitions (``_chunks``)."""
    body = definitions.get(name)
    if body is None or _is_class(body):
        return False
    opaque = {n for n, code in definitions.items() if _is_class(code) and "def pin_memory(" not in code}
    if not opaque:
        return False
    for called in _CALLED.findall(body):
        if called in opaque:
            return True
        helper = definitions.get(called)
        if called != name and helper is not None and not _is_class(helper):
            if any(made in opaque for made in _RETURNED_CALL.findall(helper)):
                return True
    return False


def _is_class(code: str) -> bool:
    for line in code.splitlines():
        if not line.startswith("@"):
            return line.startswith("class ")
    return False


def _collate_facts(path: str, graph: ImportGraph) -> Dict[str, str]:
    """The imported `collate_fn`s of ``path`` that build unpinnable batches."""
    text = graph.text_of(path) or ""
    if "collate_fn" not in text:
        return {}
    out: Dict[str, str] = {}
    imports = graph.imports(path)
    for written in set(_COLLATE_ARGUMENT.findall(text)):
        head, _, rest = written.partition(".")
        for module, name, local in imports:
            if local != head:
                continue
            wanted = name if name is not None and not rest else rest if name is None and rest and "." not in rest else None
            if wanted and _builds_unpinnable(graph.chunks(module)[1], wanted):
                out[trait_key(COLLATE_SUBJECT, written)] = module
    return out


def program_facts(path: str, graph: ImportGraph) -> List[Tuple[str, str]]:
    """(fact key, the module that makes the setting) for each kind of
    whole-program setting made where the program's code runs: on import of
    the modules ``path`` imports, in what it calls from them, in the modules
    that import it."""
    pieces: List[Tuple[str, str, bool]] = []  # (module, code, whether it is code run on import)
    text = graph.text_of(path) or ""
    seen = {path}
    for module, name, local in graph.imports(path):
        definitions = graph.chunks(module)[1]
        if name is not None:
            called = name in definitions and re.search(rf"(?<![\w.]){re.escape(local)}\s*\(", text)
            if called:
                pieces.append((module, definitions[name], False))
        else:
            for attr in set(re.findall(rf"(?<![\w.]){re.escape(local)}\.(\w+)\s*\(", text)):
                if attr in definitions:
                    pieces.append((module, definitions[attr], False))
    frontier = [path]
    for _ in range(MAX_IMPORT_DEPTH):
        nxt: List[str] = []
        for current in frontier:
            for module, _, _ in graph.imports(current):
                if module not in seen:
                    seen.add(module)
                    pieces.append((module, graph.chunks(module)[0], True))
                    nxt.append(module)
        frontier = nxt
    out: Dict[str, str] = _collate_facts(path, graph)
    for other in graph.importers(path):
        if other != path:
            code = _COMMENT.sub("", graph.text_of(other) or "")
            pieces.append((other, code, False))
            if freezes_batchnorm(code):
                out.setdefault(trait_key(PROGRAM_SUBJECT, FROZEN_BN), other)
            if "load_state_dict" in code and loads_downloaded_weights(code):
                out.setdefault(trait_key(PROGRAM_SUBJECT, PUBLISHED_WEIGHTS), other)
    for module, code, on_import in pieces:
        for kind in sorted(setting_mentions(code)):
            if on_import and kind == COMPILE:
                continue  # compiled on import is a function (`torch.compile(flex_attention)`), not the model
            out.setdefault(trait_key(PROGRAM_SUBJECT, kind), module)
    return sorted(out.items())


# -- what a class's methods answer to (``project.unreferenced``, ``_reach.never_run``)

# Bases that say nothing about how a class is picked: a module, a dataset, an
# autograd function, a plain object.
GENERIC_BASES = frozenset({
    "object", "Module", "Sequential", "ModuleList", "ModuleDict", "Dataset", "IterableDataset", "Function",
    "Exception", "ABC", "Enum", "NamedTuple",
})
# ... of them, a model's: only a model's methods are judged (``project._ancestry``).
MODEL_BASES = frozenset({"Module", "Sequential", "ModuleList", "ModuleDict"})

# A method that these decorate still runs only when called by name.
PLAIN_DECORATORS = frozenset({
    "property", "setter", "getter", "deleter", "staticmethod", "classmethod", "abstractmethod", "cached_property",
    "lru_cache", "cache", "no_grad", "inference_mode", "enable_grad", "autocast",
})
# What a generic base calls by name: `nn.Module`'s methods (a subclass's
# `forward`, `extra_repr`, `train`, `_load_from_state_dict`, ...), an autograd
# function's.
PROTOCOL = frozenset({
    "_apply", "_call_impl", "_get_name", "_load_from_state_dict", "_named_members", "_register_load_state_dict_pre_hook",
    "_register_state_dict_hook", "_replicate_for_data_parallel", "_save_to_state_dict", "_slow_forward",
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half",
    "load_state_dict", "modules", "named_buffers", "named_children", "named_modules", "named_parameters",
    "parameters", "register_buffer", "register_module", "register_parameter", "requires_grad_", "set_extra_state",
    "share_memory", "state_dict", "to", "to_empty", "train", "type", "zero_grad",
    "backward", "setup_context", "jvp", "vjp", "vmap",
    # what training frameworks call on a model by name, with no base class of theirs
    # (MMCV's runners: `model.train_step(data, optimizer)`)
    "train_step", "val_step", "test_step",
})
