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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

Facts = Dict[str, Tuple[int, str]]  # qualified name -> (level, "path:line")
# A trait of a function's callers is a fact too, under the key the rules'
# hooks make of it (``hooks.trait_key``): a caller module that wraps a model in
# DDP (``hooks.traits``), every call passing only host values (``hooks.HOST_ARGS``).
MAX_HOPS = 3


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

    def callers(path: str, qualname: str) -> List[str]:
        found = []
        for other in files:
            if other == path:
                continue
            if not hooks.could_reach(calls.get(other) if calls else None, path, qualname):
                continue  # known from its first parse, without reading it again
            text = text_of(other)
            if text is not None and hooks.might_call(text, path, qualname):
                found.append(other)
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
                # function is).  No frequency, no hops.
                for other in candidates[path, qualname]:
                    for site in answers[other, digests[other]].get((path, qualname), []):
                        for whose, key in site[4]:
                            owner, where = (path, f"{other}:{site[1]}") if whose == "callee" else (other, path)
                            if key not in facts.get(owner, {}):
                                facts.setdefault(owner, {})[key] = (0, where)
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
    return {path: found for path, found in facts.items() if (path in pending or path in given) and found}


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
