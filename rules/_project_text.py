"""The project index's textual questions: no parse, no LibCST.

The run's main process asks these of every file of the run while the worker
processes parse (``torchlint/project.py``): which files might call a function
(a cheap test on the text), what kind of module a caller is (``traits``), and
the keys under which the index records traits of a function's callers.  Kept
free of LibCST so that the main process never imports it for them.
"""

from __future__ import annotations

import functools
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
    if note == GRADS and "." in qualname:
        # a method called on a receiver of unknown class (`network.predict(x)`
        # with `network` a parameter) needs no import of the class's module
        # (but see `narrow`)
        return f".{name}(" in text
    return _imports_module(text, parts[-1])


# At most this many files are taken as callers of a method by its name alone
# (TL302's question); when more call a method of that name, only those that
# import the method's module are (a common name says little).
_GUESSED_CALLERS = 6


def narrow(target_path: str, qualname: str, found: List[str], text_of) -> List[str]:
    """The callers ``might_call`` found for a question, kept whole unless they
    were guessed by a method's name alone and are too many to be telling."""
    qualname, note = split_note(qualname)
    parts = module_parts(target_path)
    if note != GRADS or "." not in qualname or len(found) <= _GUESSED_CALLERS or not parts:
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
    target = module_parts(target_path)
    qualname, note = split_note(qualname)
    cls_name, _, method = qualname.rpartition(".")
    if cls_name:
        if method not in methods:
            return False
        if note == GRADS:
            return True  # a receiver of unknown class may be one (``Finder._reaches``)
        qualname = cls_name
    return any(names_in_module(dotted, target, qualname) for dotted in resolved)


def names_in_module(dotted: str, target: Sequence[str], qualname: str) -> bool:
    """Whether ``dotted`` names ``qualname`` of the module ``target``."""
    suffix = "." + qualname
    return dotted.endswith(suffix) and names_module(dotted[: -len(suffix)], target)
