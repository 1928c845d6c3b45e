"""Code that nothing in the project runs: definitions no one refers to.

Research repositories carry code that none of their programs reach: a
sampler copied from another project and never built (DiT's
``LossSecondMomentResampler``), a helper superseded by a newer one and left
behind (Swin's ``get_grad_norm``), a decoder of a model of which only the
encoder is used.  A finding there buys nothing, however per-step the code
looks.

The project index (``torchlint/project.py``) knows which module-level names
of a file no other file of the run mentions (``UNREFERENCED``: a textual
test, so any mention keeps a name alive: a call, an import of it used, a
string naming it in a configuration, a word in a comment).  Here the module
itself decides which of them run (``never_run``):

* alive are the module-level statements other than definitions and imports
  (they run on import or when the file runs as a script, ``if __name__ ==
  "__main__":`` blocks included), every definition with a decorator (a
  registry's ``@HEADS.register_module()``, ``@torch.jit.script``, a CLI
  command), every name in ``__all__``, every name another file mentions,
  dunder names, and whatever an alive definition refers to (its body, its
  bases, its decorators, its defaults; a string naming it too), in turn;
* a class derived from a class of the module lives with its base (a
  variant a framework may pick by name: nnU-Net's trainers), and one derived
  from an imported class other than a generic base (``nn.Module``,
  ``Dataset``, ``object``, ...) lives anyway;
* the rest never runs.  A definition inside an ``if``/``try`` at module level
  counts as module-level code (alive).

And a module named as superseded (``legacy``, ``old``, ``deprecated``, ...:
``project._SUPERSEDED``) that no other file of the run imports or names (its
name as a word anywhere, import statements and YAML files included) and that is
no script (no ``__main__`` block, no loop, ``with`` or bare call at its top
level, no command-line parsing) does not run at all (``project.WHOLE_MODULE``,
dropped by the engine):
Medusa's ``modeling_llama_kv_legacy.py``, left behind when its successor took
over.  Not when some file imports modules by computed names
(``importlib.import_module(name)``, ``__import__``, ``pkgutil`` scans).
Nor does a folder at least two levels below the run's common folder that no
file outside it names (imports, strings, comments, configuration files) and
that holds no script: nothing can import its modules (LAVIS's vendored
``lavis/common/annotator/mlsd/``, whose own imports name a package LAVIS does
not have).  A file that imports by computed names keeps every folder alive,
unless it lies in such a folder itself (``project._orphans``).

Only files that the run found by walking a directory get the fact, and the
index gives it only in a run of at least a few files that holds a program
(see ``project.unreferenced``): a file named on the command line (pre-commit
passes the changed files only) is judged alone.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Sequence, Set

import libcst as cst

from torchlint.nodes import walk_nodes
from torchlint.rules._helpers import last_name

_WORD = re.compile(r"[A-Za-z_]\w*")
_DEFINITIONS = (cst.FunctionDef, cst.ClassDef)


def _words_of(node: cst.CSTNode) -> Set[str]:
    """The names a piece of code refers to: its ``Name`` nodes and the words
    of its strings (``getattr(module, "helper")``, a registry's ``type="Head"``)."""
    found: Set[str] = set()
    for sub in walk_nodes(node):
        kind = type(sub)
        if kind is cst.Name:
            found.add(sub.value)
        elif kind is cst.SimpleString:
            found.update(_WORD.findall(sub.value))
    return found


def _exported(statement: cst.CSTNode) -> Set[str]:
    """The names of ``__all__ = [...]`` (also ``+=``)."""
    if type(statement) is not cst.SimpleStatementLine:
        return set()
    found: Set[str] = set()
    for small in statement.body:
        targets: Iterable[cst.BaseExpression] = ()
        if type(small) is cst.Assign:
            targets = [t.target for t in small.targets]
        elif type(small) in (cst.AugAssign, cst.AnnAssign):
            targets = [small.target]
        if any(type(t) is cst.Name and t.value == "__all__" for t in targets) and small.value is not None:
            found.update(_words_of(small.value))
    return found


def never_run(module: cst.Module, unreferenced: Sequence[str]) -> List[cst.CSTNode]:
    """The module-level function and class definitions of ``module`` that
    nothing runs, given the module-level names no other file of the run
    mentions (``unreferenced``).  (A whole module that nothing runs is the
    engine's to drop: ``project.WHOLE_MODULE``.)"""
    candidates = set(unreferenced)
    if not candidates:
        return []
    definitions: Dict[str, List[cst.CSTNode]] = {}
    roots: Set[str] = set()
    for statement in module.body:
        if type(statement) in _DEFINITIONS:
            name = statement.name.value
            definitions.setdefault(name, []).append(statement)
            if statement.decorators or name not in candidates or name.startswith("__"):
                roots.add(name)
            continue
        if type(statement) is cst.SimpleStatementLine and all(
                type(small) in (cst.Import, cst.ImportFrom) for small in statement.body):
            continue  # an import is not a use (`from .drop import DropBlock2d` in `__init__.py`)
        roots |= _exported(statement)
        roots |= _words_of(statement)
    # A class derived from a class of this module lives with it (a variant a
    # framework may pick by name, as nnU-Net picks its trainers); one derived
    # from an imported class other than a generic base lives anyway.
    subclasses: Dict[str, List[str]] = {}
    for name, nodes in definitions.items():
        for node in nodes:
            for base in getattr(node, "bases", ()):
                word = last_name(base.value)  # `Base`, `nn.Module` -> `Module`; None for anything else
                if word in definitions:
                    subclasses.setdefault(word, []).append(name)
                elif word is not None and word not in _GENERIC_BASES:
                    roots.add(name)
    alive: Set[str] = set()
    todo = [name for name in roots if name in definitions]
    while todo:
        name = todo.pop()
        if name in alive:
            continue
        alive.add(name)
        for definition in definitions[name]:
            todo.extend(word for word in _words_of(definition) if word in definitions and word not in alive)
        todo.extend(subclasses.get(name, ()))
    return [node for name, nodes in definitions.items() if name not in alive for node in nodes]


# Bases that say nothing about how a class is picked: a module, a dataset, an
# autograd function, a plain object.
_GENERIC_BASES = frozenset({
    "object", "Module", "Sequential", "ModuleList", "ModuleDict", "Dataset", "IterableDataset", "Function",
    "Exception", "ABC", "Enum", "NamedTuple",
})
