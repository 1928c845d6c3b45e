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
that holds no script (a module that its package's ``__init__.py`` imports is
a library module whatever its top level does: mmcv's registries, mmseg's
``collect_env.py`` with its demo block): nothing can import its modules
(LAVIS's vendored ``lavis/common/annotator/mlsd/`` and ``uniformer/``, whose
own imports name packages LAVIS does not have).  A file that imports by
computed names keeps every folder alive, unless it lies in such a folder
itself (``project._orphans``).

Methods too (``Class.method`` in the fact): LAVIS's BLIP-2 models keep a
``predict_class`` that no task calls, and the ``_predict_class`` behind it.
The index names a method when no other file mentions its name but to define
a method of that name (a configuration file's word counts), no file holds a
piece of it that a computed name may complete (``f"predict_{kind}"``), its
own text mentions it only in methods named so too, and its class is a model
deriving only from classes of the run and generic bases, ``nn.Module`` among
them (a framework's base, Lightning's or Hugging Face's, may call any method
by name, and so may a library handed a plain object: BEIR calls an encoder's
``encode_queries``).  A library's public method that nothing in the run calls
counts as unused, as a module-level function does (``sample_using_dpmpp`` of
denoising-diffusion-pytorch's ``ElucidatedDiffusion``).  A private method
(``_name``) that another file calls is that file's when the file defines its
own ``_name`` and no base of the class.  Here a method never runs when no
code that runs mentions its name, unless a generic base calls it
(``forward``, ``extra_repr``, ``_load_from_state_dict``, an autograd
function's ``backward``: ``_project_text.PROTOCOL``), it is a dunder, or a
decorator other than a descriptor's or a grad mode's may register it.

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
from torchlint.rules._project_text import GENERIC_BASES as _GENERIC_BASES
from torchlint.rules._project_text import PLAIN_DECORATORS as _PLAIN_DECORATORS
from torchlint.rules._project_text import PROTOCOL as _PROTOCOL

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
    nothing runs, and the methods, given the module-level names no other file
    of the run mentions and the methods (``Class.method``) that no other file
    calls (``unreferenced``).  (A whole module that nothing runs is the
    engine's to drop: ``project.WHOLE_MODULE``.)"""
    candidates = {name for name in unreferenced if "." not in name}
    wanted: Dict[str, Set[str]] = {}  # class -> its methods that may never run
    for name in unreferenced:
        if "." in name:
            owner, _, method = name.partition(".")
            wanted.setdefault(owner, set()).add(method)
    if not candidates and not wanted:
        return []
    definitions: Dict[str, List[cst.CSTNode]] = {}
    methods: Dict[str, List[cst.CSTNode]] = {}  # a method that may never run, by name
    words: Dict[int, Set[str]] = {}  # what a definition refers to, but its methods that may never run
    roots: Set[str] = set()
    for statement in module.body:
        if type(statement) in _DEFINITIONS:
            name = statement.name.value
            definitions.setdefault(name, []).append(statement)
            if statement.decorators or name not in candidates or name.startswith("__"):
                roots.add(name)
            judged = _judged_methods(statement, wanted.get(name, ()))
            if judged:
                for method in judged:
                    methods.setdefault(method.name.value, []).append(method)
                words[id(statement)] = _words_of_class(statement, judged)
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
    said: Set[str] = set()  # the words of the code that runs
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in said:
            continue
        said.add(name)
        found: List[cst.CSTNode] = []
        if name in definitions and name not in alive:
            alive.add(name)
            found.extend(definitions[name])
            todo.extend(subclasses.get(name, ()))
        found.extend(methods.pop(name, ()))
        for definition in found:
            todo.extend(word for word in words.get(id(definition)) or _words_of(definition) if word not in said)
    dead: List[cst.CSTNode] = [node for name, nodes in definitions.items() if name not in alive for node in nodes]
    return dead + [node for nodes in methods.values() for node in nodes]


def _judged_methods(node: cst.CSTNode, names) -> List[cst.FunctionDef]:
    """The methods of class ``node`` named in ``names`` that run only when
    called by name: not one that a generic base calls (``forward``,
    ``extra_repr``, ``_load_from_state_dict``, a dunder), nor one with a
    decorator other than a descriptor's or a grad mode's (a decorator may
    register it)."""
    if type(node) is not cst.ClassDef or not names or type(node.body) is not cst.IndentedBlock:
        return []
    found = []
    for statement in node.body.body:
        if type(statement) is not cst.FunctionDef or statement.name.value not in names:
            continue
        name = statement.name.value
        if name in _PROTOCOL or name.startswith("_") and name.endswith("_"):
            continue
        if all(_decorator_name(d.decorator) in _PLAIN_DECORATORS for d in statement.decorators):
            found.append(statement)
    return found


def _decorator_name(expr: cst.BaseExpression):
    if type(expr) is cst.Call:
        expr = expr.func
    return last_name(expr)


def _words_of_class(node: cst.ClassDef, judged: Sequence[cst.FunctionDef]) -> Set[str]:
    """The words of a class but those of its methods being judged (their names included)."""
    skip = set(map(id, judged))
    found = _words_of(node.name)
    for part in (*node.bases, *node.keywords, *node.decorators):
        found |= _words_of(part)
    for statement in node.body.body if type(node.body) is cst.IndentedBlock else ():
        if id(statement) not in skip:
            found |= _words_of(statement)
    return found
