"""The project index: what one module of the run establishes about another.

Rules see one file.  Some of their facts live in other files: a function that
nothing in its own module calls (``MetricLogger.update``) runs every step
because the training loop of another module calls it.  The index connects
them, on demand, after every file has been checked once:

1. While checking a file, a rule that stays silent *only* because the module
   does not show how often a function runs notes the function
   (``Context.pending``, kept with the file's result and in the cache).
2. For each noted function, the index looks for its callers among the other
   Python files of the run: what the file's calls can reach, from its first
   parse (``hooks.could_reach``: a callee resolving to the function, or a
   method of that name on a class the file builds), and a cheap textual test
   (the file names the function and its module) first, then the rules' own
   resolution of the calls
   (``rules/_project.py``, through the registry: the engine knows no rule) and
   how often each call runs, by the caller's own frequency model.  A caller
   whose own frequency is unknown is followed the same way (up to three hops).
   The rules may also ask what kind of module a caller is (``traits``: one
   that wraps a model in DDP), a fact about the function under
   ``hooks.trait_key(name, trait)``.  A noted name may itself carry a
   question (``hooks.split_note``: what do the callers do with the loader the
   function returns?); each call site then answers with facts for the
   function's file or for the caller's own (``Site``'s last element), and no
   frequency is derived for it.
3. A file whose functions are called every step (or once) from elsewhere is
   checked again with those facts (``Context.project["frequency"]``), and its
   result replaces the first one.  Diagnostics name the call site that made the
   code hot (``runs every step: called from engine.py:58``).

One question needs no caller: a whole-program rule (TL501, TL503-TL505) about
to report a training program notes ``hooks.PROGRAM_NOTE``, and the index reads
the import statements of the run's files (``hooks.ImportGraph``, textually) to
tell which settings the program makes in other modules: on import of the
modules the file imports, in the functions it calls from them, in the modules
that import it (``hooks.program_facts``).

The facts are derived from file contents only, so they are cached: the index
of a run is stored under a key made of every file's path and text hash, and a
re-checked file's result under its own text hash and the hash of its facts.
Editing a caller changes the key, so the files whose facts depend on it are
re-derived.

Only the files of the run are indexed: with pre-commit, which passes only the
changed files, a function whose per-step caller is in an unchanged file keeps
its single-module answer (silent: precision first) until a full run.
Notebooks are neither indexed nor given facts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

Facts = Dict[str, Tuple[int, str]]  # qualified name -> (level, "path:line")
# A trait of a function's callers is a fact too, under the key the rules'
# hooks make of it (``hooks.trait_key``): a caller module that wraps a model in
# DDP (``hooks.traits``), every call passing only host values (``hooks.HOST_ARGS``).
MAX_HOPS = 3


# A fact about a whole file: the module-level names it defines that no other
# file of the run mentions, and the methods (``Class.method``) that no file
# calls (value: (0, the names, space-separated)); the rules decide which of
# them never run (``rules/_reach.py``).
UNREFERENCED = "<unreferenced>"
# The index says so only in runs of at least this many files (a directory of
# two modules is not a project whose every user is in sight).
MIN_FILES_FOR_REACH = 5
_WORD = re.compile(r"[A-Za-z_]\w*")
_TOP_LEVEL = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)|^class[ \t]+(\w+)", re.M)
# Import statements (one line, or a parenthesised list): importing a name is not using it.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+import[ \t]*\([^)]*\)|(?:from[ \t]+[\w.]+[ \t]+)?import[ \t][^\n]*)",
                     re.M)


def unreferenced(candidates: Dict[str, Sequence[int]], files: Sequence[str],
                 read: Callable[[str], Optional[str]], configs: Sequence[str] = (),
                 scan: Optional[Callable[..., Sequence[Optional[Scan]]]] = None,
                 ) -> Dict[str, Facts]:
    """For each of ``candidates`` (files of the run), the module-level names it
    defines (``def``/``class`` at the start of a line) that no other of
    ``files`` mentions as a word outside its import statements (code,
    strings, comments: any such mention keeps a name alive; importing a name
    alone does not), as a fact under UNREFERENCED.  The words of ``configs``
    (YAML, TOML and ``.cfg`` files of the walk) count as mentions (``target:
    ldm.models.diffusion.ddpm.LatentDiffusion``).  A package's public
    interface stays alive: a name its ``__init__.py`` imports (re-exports), a
    public name of a module that an ``__init__.py`` imports with ``*``, a name
    imported under another name (``from helper.loops import train_vanilla as
    train``: used by its alias), and so does every public name of a module
    that some file looks names up in (``getattr(models, args.arch)``,
    ``models.__dict__[name]``).  ``candidates`` maps each file to the lines
    of its findings: a file gets the fact only when one of them lies in a
    definition whose name no other file mentions (the definition's extent is
    taken from the text: up to the next line that starts at column 0).  A
    module named as superseded (``_SUPERSEDED``: ``modeling_llama_kv_legacy.py``,
    ``old/``) that no other file (nor ``configs``) imports or names, and that
    is no script (``_runs_as_script``), gets ``WHOLE_MODULE``: none of it runs;
    so does every file of a folder at least two levels below the run's
    common folder (``lavis/common/annotator/mlsd/``: a vendored copy) that no
    file outside it names (imports, strings, comments, configuration files)
    and that holds no script (a module its package's ``__init__.py`` names is
    none, whatever its top level does: ``_exported_module``): nothing can
    import its modules (``_orphans``);
    not when some file imports modules by computed names (``_DYNAMIC_IMPORT``).

    Nothing at all unless the run holds a program (a file with an ``if
    __name__ == "__main__":`` block, or a notebook): without one, the code's
    users are not in sight; nor when a file builds objects from names given
    in configuration files (``instantiate_from_config(config)`` of a YAML
    ``target:``, Hydra's ``_target_``) and the walk found no YAML file.
    Every file is read once, none is parsed, and only the candidates' texts
    are kept.  ``scan(files, stems, methods, asked)``: each file's ``scan_file`` (None: not
    scanned), from the run's worker processes; without it (or for a None)
    the file is scanned here."""
    if len(files) < MIN_FILES_FOR_REACH or not candidates:
        return {}
    wanted = set(candidates)
    # (only modules named as superseded can be whole-module dead: the others need no search)
    plain = {path: module_stem(path) for path in wanted if _plain_module(path) and _SUPERSEDED.search(path)}
    # ... and the files of a folder deep in the project that no file outside it names
    folders = _inner_folders(wanted, files)
    stems = sorted(set(plain.values()) | {folder.rpartition("/")[2] for folder in folders})
    texts: Dict[str, str] = {}
    for path in sorted(wanted):
        text = read(path)
        if text is not None:
            texts[path] = text
    # the methods of the candidates' classes that the findings lie in, and those that call them
    asked = {path: _methods_asked(text, candidates[path]) for path, text in texts.items()}
    methods = sorted({name for spans, mentions in asked.values() for name in mentions})
    callers: Counter = Counter()  # a method's name -> the files that call it (not only define it)
    privately: Dict[str, List[str]] = {}  # a private method's name -> the files that call it and define their own
    stem_mentions: Counter = Counter()  # a candidate module's name -> files that mention it (imports count)
    dynamic = False  # some file imports modules by computed names
    yaml = any(config.endswith((".yaml", ".yml")) for config in configs)
    occurs: Counter = Counter()
    own: Dict[str, Tuple[str, set]] = {}
    starred: set = set()  # files whose public names an `__init__.py` imports with `*`
    looked_up: set = set()  # module names that some file looks names up in
    imported: Dict[str, List[set]] = {}  # name -> for each file that imports and uses it, the modules it names
    defines: Counter = Counter()  # name -> how many files define it at module level (and so mention it)
    program = by_string = False
    naming: Dict[str, List[str]] = {}  # a candidate folder's name -> the files (and configs) that name it
    scripts: List[str] = []  # files that run as scripts
    packages: Dict[str, FrozenSet[str]] = {}  # a folder with an `__init__.py` -> that file's words
    importers: List[str] = []  # files that import modules by computed names
    for config in configs:  # a YAML file's words are mentions (`target: ...ddpm.LatentDiffusion`)
        try:
            with open(config, encoding="utf-8", errors="replace") as handle:
                said = _words(handle.read(CONFIG_MAX_CHARS))
        except OSError:
            continue
        occurs.update(said)
        callers.update(said.intersection(methods))
        stem_mentions.update(said)
        for stem in said.intersection(stems):
            naming.setdefault(stem, []).append(config.replace("\\", "/"))
    # The words whose mentions count: the names the candidates define at
    # module level, the methods asked about, and the pieces of those that a
    # computed name may complete (``_built``).
    spans_of = {path: _top_level_spans(text) for path, text in texts.items()}
    asked_words = {name for spans in spans_of.values() for name in spans} | set(methods)
    for name in methods:
        asked_words.update(piece for at in range(1, len(name) - 1) if name[at] == "_"
                           for piece in (name[:at + 1], name[at:]))
    interesting = frozenset(asked_words)
    scans = scan(files, stems, methods, interesting) if scan is not None else [None] * len(files)
    defining: List[Tuple[str, FrozenSet[str]]] = []  # each file with the names it defines at module level
    for path, scanned in zip(files, scans):
        text = None
        if scanned is None or path in wanted:
            text = texts.get(path) if path in wanted else read(path)
            if text is None:
                continue
            if scanned is None:
                scanned = scan_file(path, text, stems, methods, interesting)
        (is_program, is_dynamic, configured, looks_up, mentioned, words, imports, stars, defined, script,
         calls, own_too) = scanned
        callers.update(calls)
        for name in own_too:
            privately.setdefault(name, []).append(path)
        if defined:
            defining.append((path, defined))
        program = program or is_program
        dynamic = dynamic or is_dynamic
        if folders:
            posix = path.replace("\\", "/")
            for stem in mentioned:
                naming.setdefault(stem, []).append(posix)
            if script:
                scripts.append(posix)
            if posix.endswith("/__init__.py"):
                packages[posix[:-len("/__init__.py")]] = words
            if is_dynamic:
                importers.append(posix)
        mentioned = set(mentioned)
        mentioned.discard(plain.get(path))  # (a module naming itself)
        stem_mentions.update(mentioned)
        by_string = by_string or (not yaml and configured)
        looked_up.update(looks_up)
        for name, modules in imports:
            imported.setdefault(name, []).append(modules)
        if stars:
            starred.update(_star_targets(path, stars, files))
        occurs.update(words)
        defines.update(defined)
        if path in wanted:
            own[path] = (text, words)
    if not program:
        return {}  # no program in sight (a library, a handful of modules): their users are elsewhere
    if by_string:
        return {}  # objects built from dotted names in configuration files, and none in sight
    found: Dict[str, Facts] = {}
    if folders and importers:
        # A file that imports modules by computed names turns the test off unless
        # it lies in a folder that no file outside names: its folders are asked
        # about too, whichever files have findings (the answer must not depend
        # on the rules selected).
        extra = sorted({folder for folder in _inner_folders(importers, files) if folder not in folders})
        if extra:
            _name_folders(extra, files, read, naming, scripts)
            folders = sorted(set(folders) | set(extra))
    orphans = _orphans(folders, naming, [script for script in scripts if not _exported_module(script, packages)],
                       importers)
    for path, lines in candidates.items():
        if path not in own:
            continue
        text, words = own[path]
        if orphans and any(folder in orphans for folder in _folders_of(path)):
            # A folder of the project that no file outside it imports or names,
            # and that holds no script: none of its code runs.
            found[path] = {UNREFERENCED: (0, WHOLE_MODULE)}
            continue
        stem = module_stem(path)
        if stem in looked_up or "globals()[" in text:
            continue
        if path in plain and not dynamic and stem_mentions[stem] == 0 and not _runs_as_script(text):
            # A module left behind: no other file imports or names it, and it is no script.
            found[path] = {UNREFERENCED: (0, WHOLE_MODULE)}
            continue
        spans = spans_of[path]
        alone = {name for name in spans
                 if occurs[name] - defines[name] - sum(stem not in stems for stems in imported.get(name, ())) <= 0
                 and (path not in starred or name.startswith("_"))}
        idle = _idle_methods(path, text, words, lines, asked[path], callers, privately, occurs, defining, read)
        if idle or any(start <= line <= end for name in alone for start, end in spans[name] for line in lines):
            found[path] = {UNREFERENCED: (0, " ".join(sorted(alone | idle)))}
    return found


def _folders_of(path: str) -> List[str]:
    """The folders a file lies in, innermost last (``a/b/c.py`` -> ``a``, ``a/b``)."""
    parts = path.replace("\\", "/").split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _inner_folders(wanted: Sequence[str], files: Sequence[str]) -> List[str]:
    """The folders of ``wanted`` files that may be left behind: at least two
    levels below the folder that holds every file of the run (a project's
    top-level package or ``src/`` is its users' to import), named as a
    Python package can be (a folder named otherwise is no import's: its
    files are scripts or on ``sys.path``)."""
    common = _folders_of(files[0]) if files else []
    for path in files:
        mine = set(_folders_of(path))
        common = [folder for folder in common if folder in mine]
    depth = len(common)
    found = set()
    for path in wanted:
        for folder in _folders_of(path)[depth + 1:]:
            if folder.rpartition("/")[2].isidentifier():
                found.add(folder)
    return sorted(found)


def _name_folders(folders: Sequence[str], files: Sequence[str], read: Callable[[str], Optional[str]],
                  naming: Dict[str, List[str]], scripts: List[str]) -> None:
    """What ``scan_file`` tells ``unreferenced`` about candidate folders, for
    ``folders`` found after the scan (the folders of the files that import
    modules by computed names): which files name each (``naming``) and which
    of the files inside them run as scripts (``scripts``).  (The scan already
    kept every ``__init__.py``'s words.)  Reads the files again, so it runs
    only when such a file lies outside every folder asked about before."""
    stems = sorted({folder.rpartition("/")[2] for folder in folders})
    inside = tuple(folder + "/" for folder in folders)
    for path in files:
        text = read(path)
        if text is None:
            continue
        posix = path.replace("\\", "/")
        for stem in _named_stems(text, stems):
            naming.setdefault(stem, []).append(posix)
        if posix.startswith(inside) and posix not in scripts and (path.endswith(".ipynb") or _runs_as_script(text)):
            scripts.append(posix)


def _named_stems(text: str, stems: Sequence[str]) -> FrozenSet[str]:
    """The ``stems`` (module or folder names) that ``text`` names as words."""
    return frozenset(stem for stem in stems if stem in text and _mentions(text, stem))


def _exported_module(path: str, packages: Dict[str, FrozenSet[str]]) -> bool:
    """Whether the ``__init__.py`` of a module's folder names it: a module
    of its package's interface (``from .collect_env import collect_env``), so
    what it does at its top level (a registry's ``NORM_LAYERS.register_module(
    ...)``, a demo under ``if __name__ == "__main__":``) makes no entry point
    of it."""
    folder, _, name = path.rpartition("/")
    stem = name.rpartition(".")[0]
    return stem in packages.get(folder, ())


def _orphans(folders: Sequence[str], naming: Dict[str, List[str]], scripts: Sequence[str],
             importers: Sequence[str]) -> set:
    """The ``folders`` that no file outside names (imports count, and so do
    strings, comments and configuration files: ``sys.path.append("mlsd")``)
    and that hold no script; none when a file imports modules by computed
    names (a plugin folder is named by no one), unless that file lies in a
    folder that no file outside names (a vendored library's own registry)."""
    unnamed = [folder for folder in folders
               if all(path.startswith(folder + "/") for path in naming.get(folder.rpartition("/")[2], ()))]
    if any(not any(path.startswith(folder + "/") for folder in unnamed) for path in importers):
        return set()
    return {folder for folder in unnamed if not any(script.startswith(folder + "/") for script in scripts)}


# What ``unreferenced`` needs of one file (``scan_file``): whether it is a
# program, imports modules by computed names, builds objects named in
# configuration files; the modules it looks names up in; which of the
# superseded modules' names it mentions; its words outside import statements
# (only those ``unreferenced`` asks about, but every word of an ``__init__.py``);
# the names it imports and uses, each with the modules it imports them from;
# an ``__init__.py``'s star imports; the names it defines at module level and
# uses; whether it runs as a script (or is a notebook); which of the methods
# asked about it calls (a mention other than a ``def`` of that name), and which
# of those it also defines.
Scan = Tuple[bool, bool, bool, FrozenSet[str], FrozenSet[str], FrozenSet[str],
             Tuple[Tuple[str, FrozenSet[str]], ...], Tuple[Tuple[str, str], ...], FrozenSet[str], bool,
             FrozenSet[str], FrozenSet[str]]


def scan_file(path: str, text: str, stems: Sequence[str] = (), methods: Sequence[str] = (),
              asked: Optional[FrozenSet[str]] = None) -> Scan:
    """One file's part of ``unreferenced`` (in a worker process for large
    runs); ``stems``: the names of the candidate modules named as superseded
    and of the candidate folders; ``methods``: the names of the methods
    asked about; ``asked``: the words whose mentions are counted (None:
    all), so that a file's whole vocabulary need not travel back."""
    posix = path.replace("\\", "/")
    stems_set = frozenset(stems)
    package = posix.endswith("/__init__.py") or path == "__init__.py"
    imports: List[Tuple[str, FrozenSet[str]]] = []
    if package or "import" not in text:
        words = _words(text)  # (a package's imports are its interface)
    else:
        statements: List[str] = []
        words = _words(_IMPORT.sub(lambda m: statements.append(m.group()) or "", text))
        for statement in statements:
            if "as" in statement:
                words.update(_ALIASED.findall(statement))
        # A name imported from a module is that module's: `from utils_simmim
        # import get_grad_norm` does not use utils.py's get_grad_norm.
        imports = [(name, frozenset(modules)) for name, modules in _imported_names(text).items() if name in words]
    return (
        path.endswith(".ipynb") or _MAIN.search(text) is not None,
        _imports_dynamically(text),
        _names_configured_objects(text),
        frozenset(_looked_up(text)),
        _named_stems(text, stems),
        frozenset(words) if asked is None or package else frozenset(words.intersection(asked)),
        tuple(item for item in imports if asked is None or item[0] in asked),
        tuple(_STAR.findall(text)) if package and "*" in text else (),
        # (a file that defines a name of its own means its own by it)
        frozenset({a or b for a, b in _TOP_LEVEL.findall(text)} & words),
        # (asked only of the files in a candidate folder: the test reads the whole text)
        path.endswith(".ipynb") or bool(stems) and not stems_set.isdisjoint(posix.split("/")[:-1]) and _runs_as_script(
            text),
        *_method_uses(text, words, methods),
    )


# -- methods that nothing calls ---------------------------------------------------------

# A method (``Class.method`` in the UNREFERENCED fact) never runs when no file
# of the run mentions its name but to define a method of that name (a
# configuration file's word counts), its own module mentions it only in
# methods that never run either, and the class derives only from classes of
# the project and generic bases (``nn.Module``: a framework's base may call it
# by name).  A private method (``_name``) called by another file that defines
# its own ``_name`` is that file's (unless the file defines a base of the
# class); a name that some file builds (``getattr(self, f"forward_{mode}")``:
# the word ``forward_``) stays alive.  The module decides the rest
# (``_reach.never_run``: decorators, the methods a generic base calls).


def _method_spans(text: str) -> List[Tuple[str, str, int, int, Tuple[str, ...]]]:
    """(class, method, first line, last line, decorators) of each method of a
    module-level class, from the text: a method ends before the next line of
    code that is no deeper than its ``def``."""
    found: List[Tuple[str, str, int, int, Tuple[str, ...]]] = []
    cls: Optional[str] = None
    body: Optional[int] = None  # the indentation of the class's body
    current: Optional[list] = None  # [class, name, first line, indentation, decorators]
    decorators: List[str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#)]}\"'":
            continue
        indent = len(line) - len(stripped)
        if current is not None and indent <= current[3]:
            found.append((current[0], current[1], current[2], number - 1, tuple(current[4])))
            current = None
        if indent == 0:
            match = _CLASS_HEAD.match(line)
            cls, body, decorators = (match.group(1) if match else None), None, []
            continue
        if cls is None:
            continue
        if body is None:
            body = indent
        if indent != body or current is not None:
            continue
        if stripped.startswith("@"):
            decorators.append(_DECORATOR.match(stripped).group(1).rpartition(".")[2])
            continue
        match = _DEF_HEAD.match(stripped)
        if match:
            current = [cls, match.group(1), number, indent, decorators]
        decorators = []
    if current is not None:
        found.append((current[0], current[1], current[2], len(lines), tuple(current[4])))
    return found


_CLASS_HEAD = re.compile(r"class[ \t]+(\w+)")
_DEF_HEAD = re.compile(r"(?:async[ \t]+)?def[ \t]+(\w+)")
_DECORATOR = re.compile(r"@[ \t]*([\w.]*)")
_HEAD_BEFORE = re.compile(r"[ \t]*(?:async[ \t]+)?def[ \t]+")


def _mention_lines(text: str, name: str) -> Tuple[int, List[int]]:
    """How many ``def name`` heads ``text`` has, and the lines of its other
    mentions of ``name`` as a word (code, strings and comments alike)."""
    heads = 0
    lines: List[int] = []
    for at in _word_positions(text, name):
        if _HEAD_BEFORE.fullmatch(text, text.rfind("\n", 0, at) + 1, at):
            heads += 1
        else:
            lines.append(text.count("\n", 0, at) + 1)
    return heads, lines


def _method_uses(text: str, words, methods: Sequence[str]) -> Tuple[FrozenSet[str], FrozenSet[str]]:
    """Which of ``methods`` the file calls (mentions other than ``def``
    heads), and which of those it also defines."""
    calls, own = [], []
    for name in methods:
        if name in words:
            heads, lines = _mention_lines(text, name)
            if lines:
                calls.append(name)
                if heads:
                    own.append(name)
    return frozenset(calls), frozenset(own)


def _judged(span: Tuple[str, str, int, int, Tuple[str, ...]], hooks) -> bool:
    """Whether a method runs only when called by name: not a dunder, not one
    that a generic base calls, no decorator that may register it."""
    name = span[1]
    return not (name.startswith("_") and name.endswith("_")) and name not in hooks.PROTOCOL and all(
        decorator in hooks.PLAIN_DECORATORS for decorator in span[4])


def _methods_asked(text: str, lines: Sequence[int]):
    """The methods of ``text``'s classes that a finding (``lines``) lies in,
    and the methods that mention those, in turn, of those that run only when
    called by name (``_judged``): (their spans, each of their names -> the
    lines of its mentions other than ``def`` heads)."""
    if "class" not in text:
        return [], {}
    from torchlint.registry import project_text_hooks

    hooks = project_text_hooks()
    judged = [span for span in _method_spans(text) if _judged(span, hooks)]
    todo = [span[1] for span in judged if any(span[2] <= line <= span[3] for line in lines)]
    mentions: Dict[str, List[int]] = {}
    while todo:
        name = todo.pop()
        if name in mentions:
            continue
        mentions[name] = _mention_lines(text, name)[1]
        for line in mentions[name]:
            for span in judged:
                if span[2] <= line <= span[3] and span[1] not in mentions:
                    todo.append(span[1])
    return [span for span in judged if span[1] in mentions], mentions


def _idle_methods(path: str, text: str, words, lines: Sequence[int], asked, callers: Counter,
                  privately: Dict[str, List[str]], occurs: Counter, defining: List[Tuple[str, FrozenSet[str]]],
                  read: Callable[[str], Optional[str]]) -> set:
    """The methods (``Class.method``) of a candidate file that may never run
    (see above), when a finding of it (``lines``) lies in one; ``words``: the
    file's own (its scan's)."""
    spans, mentions = asked
    if not mentions:
        return set()
    from torchlint.registry import project_text_hooks

    hooks = project_text_hooks()
    lineage: Dict[str, Optional[set]] = {}
    entries = []
    for span in spans:
        if span[0] not in lineage:
            lineage[span[0]] = _ancestry(span[0], path, text, defining, read, hooks.GENERIC_BASES, hooks.MODEL_BASES)
        if lineage[span[0]] is not None:
            entries.append(span)
    idle = set()
    for name in mentions:
        outside = callers[name] - (1 if mentions[name] and name in words else 0)  # (as its scan counted it)
        if name.startswith("_"):
            bases = set().union(*(lineage[span[0]] or () for span in entries if span[1] == name))
            outside -= sum(1 for other in privately.get(name, ()) if other != path and other not in bases)
        if outside <= 0 and not _built(name, occurs):
            idle.add(name)
    entries = [span for span in entries if span[1] in idle]
    while True:  # a method mentioned only in methods that never run never runs either
        keep = [span for span in entries
                if all(any(other[2] <= line <= other[3] for other in entries) for line in mentions[span[1]])]
        if len(keep) == len(entries):
            break
        entries = keep
    if not any(span[2] <= line <= span[3] for span in entries for line in lines):
        return set()
    return {f"{span[0]}.{span[1]}" for span in entries}


def _built(name: str, occurs: Counter) -> bool:
    """Whether some file holds a piece of ``name`` that a computed name may
    complete (``forward_`` of ``getattr(self, f"forward_{mode}")``, ``_step``)."""
    for at in range(1, len(name) - 1):
        if name[at] == "_" and (occurs[name[:at + 1]] or occurs[name[at:]]):
            return True
    return False


def _ancestry(cls: str, path: str, text: str, defining: List[Tuple[str, FrozenSet[str]]],
              read: Callable[[str], Optional[str]], generic, models) -> Optional[set]:
    """The files that define the classes ``cls`` derives from, when each of
    them is a class of the run or a generic base and one is a model's
    (``nn.Module``: a plain class may be handed to a library that calls its
    methods by name, as BEIR calls ``encode_queries``); None when one is
    another library's (a framework that may call methods by name) or cannot be
    read, or none is a model's."""
    model = False
    files: set = set()
    seen: set = set()
    todo = [(cls, path, text)]
    while todo:
        name, where, source = todo.pop()
        if (name, where) in seen:
            continue
        seen.add((name, where))
        if len(seen) > 32:
            return None
        bases = _bases_of(source, name)
        if bases is None:
            return None
        for base in bases:
            if base is None:
                return None
            if base in generic:
                model = model or base in models
                continue
            if _bases_of(source, base) is not None:
                files.add(where)
                todo.append((base, where, source))
                continue
            homes = [other for other, names in defining if base in names and other != where]
            if not homes:
                return None
            for home in homes:
                other_text = read(home)
                if other_text is None:
                    return None
                files.add(home)
                todo.append((base, home, other_text))
    return files if model else None


def _bases_of(text: str, cls: str) -> Optional[List[Optional[str]]]:
    """The last names of the bases of module-level class ``cls`` in ``text``
    (None for a base that is no dotted name, a keyword included); None when
    the text defines no such class."""
    found = None
    for match in re.finditer(r"^class[ \t]+%s\b[ \t]*(?:\(([^)]*)\))?[ \t]*:" % re.escape(cls), text, re.M):
        found = found or []
        for part in (match.group(1) or "").split(","):
            part = part.strip()
            if part:
                found.append(part.rpartition(".")[2] if _DOTTED.fullmatch(part) else None)
    return found


_DOTTED = re.compile(r"[A-Za-z_][\w.]*")


def _plain_module(path: str) -> bool:
    """A ``.py`` file that other modules would import to use (not a package's
    ``__init__``, ``__main__``, ``setup.py``, ``conftest.py`` or
    ``hubconf.py``, which ``torch.hub`` loads)."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.endswith(".py") and name not in ("__init__.py", "__main__.py", "setup.py", "conftest.py", "hubconf.py")


def _runs_as_script(text: str) -> bool:
    """Whether a module does something when run as a file: a ``__main__``
    block, a loop, ``with`` block or bare call at its top level (``main()``,
    ``fire.Fire(...)``), or command-line parsing."""
    return _MAIN.search(text) is not None or _SCRIPT.search(text) is not None


def _names_configured_objects(text: str) -> bool:
    """``_BY_STRING``, after a cheap test of the words it needs."""
    return ("instantiate" in text or "get_obj_from_str" in text or "locate(" in text or "_target_" in text) and (
        _BY_STRING.search(text) is not None)


# Building objects from a dotted name given in a configuration file
# (latent-diffusion's `instantiate_from_config` of a YAML `target:`, Hydra's
# `"_target_"` and `instantiate(cfg)`, `pydoc.locate(name)`).  Not
# `importlib.import_module(name)` (the module's names are then used as
# attributes, mentions of their own) nor `eval(name)` (the names it is given
# sit in the code's strings: `eval(n)(num_classes=1000)` over a list of names).
_BY_STRING = re.compile(r"""\b(?:instantiate_from_config|get_obj_from_str|instantiate|locate)\(|["']_target_["']""")
CONFIG_MAX_CHARS = 256 * 1024
_MAIN = re.compile(r"""__name__\s*==\s*["']__main__["']""")
_SCRIPT = re.compile(r"^(?:for|while|with|async[ \t]+(?:for|with))\b|^[\w.]+\(|parse_args\(|\bsys\.argv\b", re.M)
# Importing modules by computed names (plugins, registries that scan a directory).
_DYNAMIC_IMPORT = re.compile(r"\b(?:import_module|__import__|spec_from_file_location|load_source|iter_modules"
                             r"|walk_packages|run_path|run_module)\(")
WHOLE_MODULE = "*"  # the UNREFERENCED fact of a module nothing imports: none of it runs
# A module (or directory) named as superseded: a module of a package that no file
# imports is often its public interface (a library's variants, imported by its
# users: `from denoising_diffusion_pytorch.repaint import ...`), one named so is not.
_SUPERSEDED = re.compile(r"(?:^|[/\\_.-])(?:legacy|old|deprecated|backup|bak|unused|archived?)(?:$|[/\\_.\d-])",
                         re.IGNORECASE)
_GETATTR = re.compile(r"getattr\(\s*([\w.]+)\s*,\s*(?![\"'\s])")  # (after a word boundary: see _looked_up)
_WORD_CHAR = re.compile(r"\w")
_DICT_LOOKUP = re.compile(r"\.__dict__\[")
_LAST_WORD = re.compile(r"\w+$")
_DYNAMIC_WORDS = ("import_module(", "__import__(", "spec_from_file_location(", "load_source(", "iter_modules(",
                  "walk_packages(", "run_path(", "run_module(")


def _mentions(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` as a word (``\\bword\\b``)."""
    if not word.isidentifier():
        return re.search(r"\b%s\b" % re.escape(word), text) is not None
    return next(_word_positions(text, word), None) is not None


def _word_positions(text: str, word: str):
    """Where the identifier ``word`` starts in ``text`` as a word (``\\bword\\b``),
    found with ``str.find`` rather than a pattern compiled for it."""
    at = text.find(word)
    size = len(word)
    while at >= 0:
        end = at + size
        if (not at or not _WORD_CHAR.match(text, at - 1)) and (end == len(text) or not _WORD_CHAR.match(text, end)):
            yield at
        at = text.find(word, end)


def _imports_dynamically(text: str) -> bool:
    """``_DYNAMIC_IMPORT``, after a cheap test of the words it needs."""
    return any(word in text for word in _DYNAMIC_WORDS) and _DYNAMIC_IMPORT.search(text) is not None


def _looked_up(text: str) -> set:
    """The (last parts of the) module names a file looks names up in:
    ``getattr(models, args.arch)``, ``models.__dict__[name]``."""
    found = set()
    if "getattr(" in text:
        # (the boundary is tested here: a pattern that starts with a literal is searched much faster)
        found.update(match.group(1).rpartition(".")[2] for match in _GETATTR.finditer(text)
                     if not match.start() or not _WORD_CHAR.match(text, match.start() - 1))
    if "__dict__[" in text:
        for match in _DICT_LOOKUP.finditer(text):  # (the word before `.__dict__[`)
            word = _LAST_WORD.search(text, max(0, match.start() - 200), match.start())
            if word is not None or match.start() and text[match.start() - 1] == ".":
                found.add(word.group() if word is not None else "")
    return found


# Every ASCII character that cannot be part of a word, as a space: an ASCII
# text's words are then its split, each without its leading digits.
_NOT_WORD = {i: " " for i in range(128) if not (chr(i).isalnum() or chr(i) == "_")}
_DIGITS = "0123456789"


def _words(text: str) -> set:
    """``set(_WORD.findall(text))``, faster: the text is split at its ASCII
    characters that cannot be part of a word, and only a piece that holds
    other characters is searched with the pattern (no match can span two
    pieces)."""
    words = set(text.translate(_NOT_WORD).split())
    if not text.isascii():
        other = {word for word in words if not word.isascii()}
        words -= other
        for word in other:
            words.update(_WORD.findall(word))
    numeric = {word for word in words if word[0] in _DIGITS}
    if numeric:
        words -= numeric
        words.update(word for word in (w.lstrip(_DIGITS) for w in numeric) if word)
    return words


def module_stem(path: str) -> str:
    """``pkg/models.py`` -> ``models``; ``pkg/models/__init__.py`` -> ``models``."""
    parts = path.replace("\\", "/").split("/")
    last = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
    return parts[-2] if last == "__init__" and len(parts) > 1 else last


def _top_level_spans(text: str) -> Dict[str, List[Tuple[int, int]]]:
    """Each module-level ``def``/``class`` name -> its lines (first, last): from
    its ``def``/``class`` line up to the line before the
    next one that starts at column 0 with code (not a comment, not a closing
    bracket).  Textual, for deciding which files to re-check only."""
    lines = text.splitlines()
    starts = []  # (line number, name or None) of each statement starting at column 0
    for number, line in enumerate(lines, 1):
        if not line or line[0] in " \t#)]}\"'":
            continue
        match = _TOP_LEVEL.match(line)
        starts.append((number, (match.group(1) or match.group(2)) if match else None))
    spans: Dict[str, List[Tuple[int, int]]] = {}
    for (number, name), following in zip(starts, [*starts[1:], (len(lines) + 1, None)]):
        if name is not None:
            spans.setdefault(name, []).append((number, following[0] - 1))
    return spans


_ALIASED = re.compile(r"(\w+)[ \t]+as[ \t]+\w+")
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)", re.M)


def _imported_names(text: str) -> Dict[str, set]:
    """Each name a file imports with ``from module import name`` (also ``name
    as alias``) -> the last parts of the modules it imports it from."""
    found: Dict[str, set] = {}
    for module, names in _FROM_IMPORT.findall(text):
        stem = module.rpartition(".")[2]
        if not stem:
            continue  # `from . import x`: x is a module
        for item in names.strip("()").split(","):
            name = item.split("#")[0].split()
            if name and name[0] != "*":
                found.setdefault(name[0], set()).add(stem)
    return found
_STAR = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\*", re.M)


def _star_targets(init: str, stars: Sequence[Tuple[str, str]], files: Sequence[str]) -> List[str]:
    """The files of the run that the ``__init__.py`` ``init`` imports with ``*``
    (``from .style_melgan import *``, ``from pkg.models.hifigan import *``;
    ``stars``: its ``_STAR`` matches)."""
    folder = init.replace("\\", "/").rpartition("/")[0]
    found = []
    for dots, dotted in stars:
        tail = dotted.replace(".", "/")
        if dots:
            base = folder
            for _ in range(len(dots) - 1):
                base = base.rpartition("/")[0]
            stems = [f"{base}/{tail}" if base else tail]
        else:
            stems = [tail]
        for path in files:
            posix = path.replace("\\", "/")
            for stem in stems:
                if posix == f"{stem}.py" or posix.endswith(f"/{stem}.py") and not dots:
                    found.append(path)
    return found


def facts_digest(facts: Facts) -> str:
    blob = json.dumps(sorted((k, list(v)) for k, v in facts.items())).encode()
    return hashlib.blake2b(blob, digest_size=8).hexdigest()


def run_key(files: Sequence[Tuple[str, str]], pending: Dict[str, Sequence[str]]) -> str:
    """A key for the whole run's index: every (path, text hash) and the noted functions."""
    blob = json.dumps([sorted(files), sorted((k, sorted(v)) for k, v in pending.items())]).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


# (level, line, calling function, passes only host values, facts the site
# establishes for a noted question: ("callee" | "caller", fact key))
Site = Tuple[int, int, Optional[str], bool, Tuple[Tuple[str, str], ...]]
# A caller file, what other files established about it (its facts: they decide
# how often its own functions run), and what to look for in it:
# [(file of the function, qualified name)].
Query = Tuple[str, Optional[Facts], Sequence[Tuple[str, str]]]
Answers = Dict[Tuple[str, str], List[Site]]


def sites_in(display: str, text: Optional[str], wanted: Sequence[Tuple[str, str]],
             external: Optional[Facts] = None) -> Answers:
    """The call sites in one file of each wanted function (run in a worker
    process for large runs): parse once, answer every question."""
    from torchlint.registry import project_hooks

    hooks = project_hooks()
    found = hooks.finder(text, display, external or None) if text is not None else None
    if found is None:
        return {}
    return {(path, qualname): hooks.call_sites(found, path, qualname) for path, qualname in wanted}


def derive(
    pending: Dict[str, Sequence[str]],
    files: Sequence[str],
    read: Callable[[str], Optional[str]],
    ask: Optional[Callable[[List[Query]], Dict[str, Answers]]] = None,
    calls: Optional[Dict[str, object]] = None,
) -> Dict[str, Facts]:
    """Facts for the files in ``pending`` (path -> noted functions), from the
    other ``files`` of the run (paths), read with ``read`` (None: unreadable).
    ``calls``: what each file's calls can reach, from the run's first parse of
    it (``hooks.could_reach``; a file not in it is asked, as before): a file
    that passes the textual test but cannot call the function is not parsed
    again.

    Each round gathers every question first and asks them together: ``ask``
    (the run's worker pool, or the editor's cache) answers them caller file by
    caller file; without it they are answered here.  Only the cheap textual
    questions (which file might call which function) need no parse, so this
    process never parses a file when ``ask`` is given."""
    from torchlint.registry import project_text_hooks

    hooks = project_text_hooks()
    unknown = hooks.UNKNOWN_LEVEL
    texts: Dict[str, Optional[str]] = {}
    facts: Dict[str, Facts] = {}
    answers: Dict[Tuple[str, str], Answers] = {}  # (caller file, its facts' digest) -> answers

    def text_of(path: str) -> Optional[str]:
        if path not in texts:
            texts[path] = read(path)
        return texts[path]

    if ask is None:
        ask = _asker(text_of)

    normalised = frozenset(f.replace("\\", "/") for f in files)

    def callers(path: str, qualname: str) -> List[str]:
        found = []
        for other in files:
            if other == path:
                continue
            if not hooks.could_reach(calls.get(other) if calls else None, path, qualname):
                continue  # known from its first parse, without reading it again
            text = text_of(other)
            if text is not None and hooks.might_call(text, path, qualname) and not hooks.shadowed(
                    other, path, normalised, text):
                found.append(other)  # (not a caller that imports a same-named module of its own)
        return hooks.narrow(path, qualname, found, text_of)

    # Whole-program questions (``hooks.PROGRAM_NOTE``): answered from the
    # import statements of the files, with no parse and no hops.
    graph = None
    for path, names in sorted(pending.items()):
        if hooks.PROGRAM_NOTE in names:
            if graph is None:
                graph = hooks.ImportGraph([*files, *([path] if path not in files else [])], text_of)
            for key, where in hooks.program_facts(path, graph):
                facts.setdefault(path, {})[key] = (0, where)
    wanted: List[Tuple[str, str]] = [(p, q) for p, names in pending.items() for q in names if q != hooks.PROGRAM_NOTE]
    asked = set(wanted)
    originals = set(wanted)
    # Questions asked of a caller on behalf of a site (``hooks.FOLLOW``): each
    # question -> [(the caller's question, the site's own facts, "path:line")],
    # and the traits ("no_grad", ...) that a followed question's own sites gave.
    through: Dict[Tuple[str, str], List[Tuple[Tuple[str, str], Tuple[Tuple[str, str], ...], str]]] = {}
    gathered: Dict[Tuple[str, str], set] = {}
    candidates: Dict[Tuple[str, str], List[str]] = {}
    given: set = set()  # caller files that a noted question gave facts
    for _ in range(MAX_HOPS):
        # Every question of this round, asked at once.
        queries: Dict[Tuple[str, str], List[Tuple[str, str]]] = {}
        digests: Dict[str, str] = {}  # each caller file's facts as this round asks with them
        for path, qualname in wanted:
            if (path, qualname) not in candidates:
                candidates[path, qualname] = callers(path, qualname)
            for other in candidates[path, qualname]:
                if other not in digests:
                    digests[other] = facts_digest(facts.get(other, {}))
                key = (other, digests[other])
                if (path, qualname) not in answers.get(key, {}):
                    queries.setdefault(key, []).append((path, qualname))
        if queries:
            batch = [(other, facts.get(other) or None, q) for (other, _), q in sorted(queries.items())]
            replies = ask(batch)
            for (other, digest), q in queries.items():
                got = replies.get(other, {})
                entry = answers.setdefault((other, digest), {})
                for item in q:
                    entry[item] = got.get(item, [])
        changed = False
        follow: List[Tuple[str, str]] = []
        for path, qualname in wanted:
            if hooks.split_note(qualname)[1] is not None:
                # A question about what callers do with the function's result
                # (a loader: are its batches copied?): facts for the function's
                # file (where the caller is) and for the caller's (where the
                # function is).  No frequency.  A site that says its answer is
                # its caller's (``hooks.FOLLOW``) asks the same question of the
                # caller in the next round; its traits are settled at the end.
                original = (path, qualname) in originals
                for other in candidates[path, qualname]:
                    for site in answers[other, digests[other]].get((path, qualname), []):
                        where = f"{other}:{site[1]}"
                        own = tuple((whose, key) for whose, key in site[4] if whose != hooks.FOLLOW)
                        followed = next((key for whose, key in site[4] if whose == hooks.FOLLOW), None)
                        if followed is not None:
                            entry = ((other, followed), own, where)
                            if entry not in through.setdefault((path, qualname), []):
                                through[path, qualname].append(entry)
                                changed = True
                            if (other, followed) not in asked:
                                asked.add((other, followed))
                                follow.append((other, followed))
                            continue
                        gathered.setdefault((path, qualname), set()).update(
                            key.rpartition("|")[2] for whose, key in own if whose == "callee")
                        if not original:
                            continue  # (a followed question: its traits are settled at the end)
                        for whose, key in own:
                            owner, at = (path, where) if whose == "callee" else (other, path)
                            if key not in facts.get(owner, {}):
                                facts.setdefault(owner, {})[key] = (0, at)
                                given.add(owner)
                                changed = True
                continue
            best: Optional[Tuple[int, str]] = facts.get(path, {}).get(qualname)
            host_only: Optional[str] = None  # a call site, while every call passes only host values
            tensor_maybe = False
            for other in candidates[path, qualname]:
                found_sites = answers[other, digests[other]].get((path, qualname), [])
                if found_sites:
                    for trait in hooks.traits(text_of(other) or ""):
                        key = hooks.trait_key(qualname, trait)
                        if key not in facts.get(path, {}):
                            facts.setdefault(path, {})[key] = (0, f"{other}:{found_sites[0][1]}")
                            changed = True
                for level, line, caller, host_args, _ in found_sites:
                    if host_args:
                        host_only = host_only or f"{other}:{line}"
                    else:
                        tensor_maybe = True
                    if level == unknown:
                        if caller is not None and (other, caller) not in asked:
                            asked.add((other, caller))
                            follow.append((other, caller))  # how often does the caller run?
                        continue
                    if best is None or level > best[0]:
                        best = (level, f"{other}:{line}")
            if best is not None and facts.get(path, {}).get(qualname) != best:
                facts.setdefault(path, {})[qualname] = best
                changed = True
            key = hooks.trait_key(qualname, hooks.HOST_ARGS)
            if host_only is not None and not tensor_maybe and key not in facts.get(path, {}):
                facts.setdefault(path, {})[key] = (0, host_only)  # every caller passes host values
                changed = True
        if follow:
            wanted = wanted + follow
        elif not changed:
            break
    if through:
        _settle(through, gathered, originals, facts, given, hooks)
    return {path: found for path, found in facts.items() if (path in pending or path in given) and found}


def _settle(through, gathered, originals, facts: Dict[str, Facts], given: set, hooks) -> None:
    """The facts of the sites whose answer was their caller's (``derive``): a
    site gives the traits its caller's question settled on, through any number
    of followed callers; its own facts where that question found no site (no
    caller in the run, a cycle, or the hops ran out)."""

    def traits(question: Tuple[str, str], seen: frozenset) -> set:
        if question in seen:
            return set()
        found = set(gathered.get(question, ()))
        for followed, own, _ in through.get(question, ()):
            found |= traits(followed, seen | {question}) or {
                key.rpartition("|")[2] for whose, key in own if whose == "callee"}
        return found

    for (path, qualname), entries in sorted(through.items()):
        if (path, qualname) not in originals:
            continue
        name = hooks.split_note(qualname)[0]
        for followed, own, where in entries:
            settled = traits(followed, frozenset({(path, qualname)}))
            keys = [hooks.trait_key(name, trait) for trait in sorted(settled)] if settled else [
                key for whose, key in own if whose == "callee"]
            for key in keys:
                if key not in facts.get(path, {}):
                    facts.setdefault(path, {})[key] = (0, where)
                    given.add(path)


def _asker(text_of: Callable[[str], Optional[str]]) -> Callable[[List[Query]], Dict[str, Answers]]:
    """Answers in this process, one parse per caller file and set of facts."""
    from torchlint.registry import project_hooks

    hooks = project_hooks()
    finders: Dict[Tuple[str, str], object] = {}

    def ask(queries: List[Query]) -> Dict[str, Answers]:
        out: Dict[str, Answers] = {}
        for other, known, wanted in queries:
            key = (other, facts_digest(known or {}))
            if key not in finders:
                text = text_of(other)
                finders[key] = hooks.finder(text, other, known or None) if text is not None else None
            found = finders[key]
            out[other] = {} if found is None else {(p, q): hooks.call_sites(found, p, q) for p, q in wanted}
        return out

    return ask
