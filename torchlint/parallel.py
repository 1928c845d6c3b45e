"""Checking many files: the result cache, then a process pool for what is left.

``check_files`` is what ``torchlint check`` runs.  For each file it

1. reads the text and looks it up in the cache (when there is one): a hit
   costs a read and a hash, and needs neither LibCST nor the rules;
2. analyses the misses, in this process when there are few of them (or with
   ``jobs == 1``), otherwise in a pool of ``jobs`` worker processes fed with
   chunks of files, largest first, a bounded number of chunks in flight (so
   memory does not grow with the tree);
3. stores the new results in the cache, and returns every diagnostic sorted by
   path and position: the output does not depend on the worker count or on
   the order in which workers finish.

Each worker analyses its files on its own long-lived large-stack thread (see
``torchlint.threads.on_large_stack``), as the single-process path does.  A
Python exception while analysing a file is already an internal-error
diagnostic for that file (``analyse_text``); a worker process that dies (a
crash in native code, the out-of-memory killer) breaks the pool: the files
not yet done are then analysed again one at a time in a fresh one-worker pool,
so that the file that kills its worker is the one reported as an internal
error, and every other file gets its real result.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from torchlint.config import Profile
from torchlint.model import Diagnostic
from torchlint.inputs import Fixed, input_for
from torchlint.screen import io_error
from torchlint.source import Source, SourceError, text_hash

# Below this many files to analyse a pool costs more than it saves (starting
# the workers, shipping results back), whatever ``jobs`` says.
MIN_FILES_FOR_POOL = 24
# Chunks per worker: enough for the largest-first order to balance the load.
CHUNKS_PER_WORKER = 8
MAX_CHUNK_FILES = 32
# Progress is shown on a terminal when at least this many files are analysed.
PROGRESS_MIN_FILES = 200


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# What a run does with each file: report (check), or fix and report what
# remains: writing the files (fix), showing the fixes as a diff (diff), or
# writing them and reporting no finding (fix-only: the same work as fix).
CHECK, FIX, DIFF, FIX_ONLY = "check", "fix", "diff", "fix-only"
MODES = (CHECK, FIX, DIFF, FIX_ONLY)


@dataclass(frozen=True)
class Task:
    """What ``process`` does with every file of a run.

    ``unsafe``: whether ``fix`` applies unsafe fixes (the run's setting).
    ``facts``: set for the second stage of a fix run, after the project
    index: the files to fix, with what the index established about each.
    ``edits``: give each fixable diagnostic's JSON edits (``FileResult.edits``)
    from the file's own analysis, rather than have the main process analyse
    the file again for them after the run.
    """

    mode: str = CHECK
    unsafe: bool = False
    facts: Optional[Dict[str, Optional[dict]]] = None
    edits: bool = False

    @property
    def fixes(self) -> bool:
        return self.mode != CHECK


@dataclass
class FileFix:
    """What fixing a file gave: the text as read (and its encoding), and the fixes."""

    source: Source
    fixed: Fixed

    @property
    def changed(self) -> bool:
        return self.fixed.text != self.source.text


@dataclass
class FileResult:
    display: str
    diagnostics: List[Diagnostic]
    # The texts excerpts are taken from, under ``Diagnostic.source_key``: the
    # file's text, or a notebook's cells; kept only when there are diagnostics.
    sources: Optional[Dict[str, str]] = None
    digest: Optional[str] = None  # hash of the analysed text (None: not cacheable)
    # Warnings about the file's suppression comments (``path:line: warning: ...``),
    # in the order of their lines; cached with the diagnostics.
    warnings: List[str] = field(default_factory=list)
    profile: int = 0  # which of the run's configurations the file was checked with
    # How many fixes `torchlint fix` would apply to the file (with the run's
    # `unsafe-fixes`), counting those that only become possible after another
    # fix; None when no diagnostic has a fix that applies.
    fix_total: Optional[int] = None
    # Functions whose frequency the file alone does not show (torchlint/project.py).
    pending: List[str] = field(default_factory=list)
    # What the file's calls can reach, from its analysis (None: not known, e.g. a
    # cache hit): the project index then need not parse it again to learn that
    # it calls no function asked about (``project.derive``'s ``calls``).
    calls: object = None
    # Each fixable diagnostic's JSON edits, from the analysis (``Task.edits``;
    # None: not computed).
    edits: Optional[dict] = None
    path: Optional[str] = None  # the file on disk (None: standard input)
    # A fix run: what fixing the file gave (None: nothing to fix; the check's
    # findings are what remains).
    fix: Optional[FileFix] = None


Progress = Callable[[int, int], None]


# -- analysing one file (in this process or in a worker) -------------------------


def read_text(display: str, path: Path) -> str:
    """A file's text: a Python file decoded as Python does, a notebook as UTF-8 JSON."""
    return input_for(display, path).read().text


def excerpt_sources(display: str, text: str) -> Dict[str, str]:
    """What the reporters show excerpts from: the text, or a notebook's cells."""
    return input_for(display, None).excerpts(text)


@contextmanager
def gc_paused():
    """The cyclic garbage collector paused while one file is parsed and
    analysed: a LibCST tree is hundreds of thousands of objects, none of them
    in a cycle, which its collections would traverse again and again (about
    a tenth of a cold check); what the analysis leaves in cycles is collected
    once the file is done."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def analyse_text(text: str, display: str, settings, codes: Sequence[str], digest: Optional[str],
                 project: Optional[dict] = None, edits: bool = False) -> FileResult:
    from torchlint.screen import crashed

    source = input_for(display, None)
    pending: List[str] = []
    warnings: List[str] = []
    calls = fixes = None
    try:
        with gc_paused():
            analysis = source.analyse(text, settings, codes, project, edits)
        found, sources, warnings, pending, calls, fixes = (
            analysis.diagnostics, analysis.sources, analysis.warnings, analysis.pending, analysis.calls,
            analysis.edits)
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        found = [crashed(display, exc)]
        sources = {display: text}
    return FileResult(display, found, sources if found else None, digest, warnings,
                      fix_total=fix_total(text, display, settings, codes, found, project), pending=pending,
                      calls=calls, edits=fixes)


def needs_fix(diagnostics: Sequence[Diagnostic], unsafe: bool) -> bool:
    """Whether ``fix`` has anything to do in a file with these findings: a fix that
    applies (the fixer's first round; later rounds follow only from an applied fix)."""
    return any(d.fix is not None and d.fix.applies(unsafe) for d in diagnostics)


def fix_source(result: FileResult, source: Source, settings, codes: Sequence[str], task: Task,
               project: Optional[dict] = None) -> None:
    """Fix ``source`` (the text of ``result``'s file) and attach what it gave to ``result``."""
    from torchlint.screen import crashed

    item = input_for(result.display, None)
    try:
        fixed = item.fix(source.text, settings, codes, task.unsafe, project, diff=task.mode == DIFF)
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        fixed = Fixed(source.text, Counter(), [crashed(result.display, exc)], [], {}, [])
    result.fix = FileFix(source, fixed)

@lru_cache(maxsize=8)
def fixes_enabling(codes: Tuple[str, ...]) -> frozenset:
    """The enabled rules whose fix can make an enabled rule's fix possible (``Rule.fix_enables``)."""
    from torchlint.registry import all_rules

    rules = all_rules()
    return frozenset(c for c in codes if c in rules and set(rules[c].fix_enables) & set(codes))


def fix_total(text: str, display: str, settings, codes: Sequence[str], found: Sequence[Diagnostic],
              project: Optional[dict] = None) -> Optional[int]:
    """The number of fixes ``torchlint fix`` would apply to ``text``, or None when no
    diagnostic in ``found`` has a fix that applies (then there is nothing to run).

    A fix can make another possible (``pin_memory=True`` on a loader makes the
    copies of its batches fixable), which the diagnostics alone cannot show, so
    for a file with a fix of a rule that declares such follow-ons
    (``Rule.fix_enables``) this runs the fixer on the text in memory; for any
    other file it is the number of applicable fixes.
    """
    unsafe = settings.unsafe_fixes
    applicable = [d for d in found if d.fix is not None and d.fix.applies(unsafe)]
    if not applicable:
        return None
    if not any(d.code in fixes_enabling(tuple(codes)) for d in applicable):
        return len(applicable)  # no fix here can make another possible
    try:
        return sum(input_for(display, None).fix(text, settings, codes, unsafe, project).applied.values())
    except Exception:  # noqa: BLE001 - a count for the summary; `fix` reports its own errors
        return None


def analyse_file(display: str, path: str, settings, codes: Sequence[str], edits: bool = False) -> FileResult:
    try:
        text = read_text(display, Path(path))
    except SourceError as exc:
        return FileResult(display, [io_error(display, str(exc))])
    result = analyse_text(text, display, settings, codes, text_hash(text), edits=edits)
    result.path = path
    return result


# An item to process: (display, path, index of its profile in the run's profiles).
Item = Tuple[str, str, int]


def process(item: Item, profiles: Sequence[Profile], task: Task = Task()) -> FileResult:
    """One file through the run's ``task``: what ``check`` and ``fix`` both do.

    The first stage analyses the file (as ``check`` does) and, in a fix run,
    fixes it at once when it has a fix to apply and nothing for the project
    index to decide (no ``pending`` functions).  The second stage (``task.facts``
    set) fixes the files left, with the index's facts.  Nothing is written
    here: the fixed text comes back with the result.
    """
    display, path, index = item
    profile = profiles[index]
    if task.facts is not None:
        result = FileResult(display, [], profile=index, path=path)
        try:
            source = input_for(display, Path(path)).read()
        except SourceError:
            return result  # unreadable since its check: its findings stand
        fix_source(result, source, profile.settings, profile.codes, task, task.facts.get(display))
        return result
    result = analyse_file(display, path, profile.settings, profile.codes, task.edits)
    result.profile = index
    if task.fixes and result.path is not None and not result.pending and needs_fix(result.diagnostics, task.unsafe):
        try:
            source = input_for(display, Path(path)).read()
        except SourceError:
            return result
        fix_source(result, source, profile.settings, profile.codes, task)
    return result


def _process_many(items: Sequence[Item], profiles: Sequence[Profile], task: Task) -> List[FileResult]:
    return [process(item, profiles, task) for item in items]


# -- worker processes ------------------------------------------------------------

_worker_profiles: Sequence[Profile] = ()
_worker_task: Task = Task()


def _worker_init(profiles: Sequence[Profile], task: Task = Task()) -> None:
    global _worker_profiles, _worker_task
    import torchlint.threads as threads

    # A forked worker inherits the parent's handle on its large-stack thread
    # but not the thread itself: start its own on first use.
    threads._executor = None
    _worker_profiles = tuple(profiles)
    _worker_task = task


def _worker_chunk(items: Sequence[Item]) -> List[FileResult]:
    from torchlint.threads import on_large_stack

    return on_large_stack(_process_many, items, _worker_profiles, _worker_task)


def _context():
    import multiprocessing

    method = os.environ.get("TORCHLINT_START_METHOD")  # for measurements and tests
    if method is None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


def _chunks(items: Sequence[Item], jobs: int) -> List[List[Item]]:
    """Files grouped into chunks of similar size, largest chunks first."""

    def size(item: Item) -> int:
        try:
            return os.path.getsize(item[1])
        except OSError:
            return 0

    sized = sorted(((size(item), item) for item in items), key=lambda pair: -pair[0])
    total = sum(s for s, _ in sized) or 1
    target = max(1, total // (jobs * CHUNKS_PER_WORKER))
    chunks: List[List[Item]] = []
    current: List[Item] = []
    current_size = 0
    for s, item in sized:
        current.append(item)
        current_size += s
        if current_size >= target or len(current) >= MAX_CHUNK_FILES:
            chunks.append(current)
            current, current_size = [], 0
    if current:
        chunks.append(current)
    return chunks


class Workers:
    """The run's worker processes, started for the first pass and kept for the
    project index (its questions and re-checks go to the same warm processes:
    no second start-up, no LibCST import in this process)."""

    def __init__(self, profiles: Sequence[Profile], jobs: int, task: Task) -> None:
        self.profiles = tuple(profiles)
        self.jobs = jobs
        self.task = task
        self.pool = None
        self.broken = False

    def executor(self):
        if self.pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=_context(),
                initializer=_worker_init, initargs=(self.profiles, self.task),
            )
        return self.pool

    def map(self, function, calls: Sequence[tuple]) -> Optional[list]:
        """``function(*args)`` for each of ``calls`` in the workers, in order;
        None when the pool is (or becomes) unusable: the caller does the work."""
        if self.broken:
            return None
        try:
            futures = [self.executor().submit(function, *args) for args in calls]
            return [future.result() for future in futures]
        except Exception:  # noqa: BLE001 - a broken pool: the caller falls back to this process
            self.broken = True
            return None

    def close(self, now: bool = False) -> None:
        if self.pool is None:
            return
        if now:
            # Ctrl-C: stop the workers now rather than wait for their chunks (a
            # worker writes nothing, so there is nothing to finish).
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.terminate()
            self.pool.shutdown(wait=False, cancel_futures=True)
        else:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None


def _run_pool(items: Sequence[Item], profiles: Sequence[Profile], jobs: int,
              progress: Optional[Progress], task: Task = Task(), workers: Optional[Workers] = None) -> List[FileResult]:
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    chunks = _chunks(items, jobs)
    results: List[FileResult] = []
    done_files = 0
    unfinished: List[Item] = []
    own = workers is None
    if workers is None:
        workers = Workers(profiles, min(jobs, len(chunks)), task)
    pool = workers.executor()
    broken = False
    try:
        queue = list(reversed(chunks))  # pop() takes the largest first
        in_flight: Dict[object, List[Item]] = {}
        broken = False
        while queue or in_flight:
            while queue and len(in_flight) < 2 * jobs and not broken:
                chunk = queue.pop()
                try:
                    in_flight[pool.submit(_worker_chunk, chunk)] = chunk
                except BrokenProcessPool:
                    queue.append(chunk)
                    broken = True
            if not in_flight:
                break
            finished, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
            for future in finished:
                chunk = in_flight.pop(future)
                try:
                    results.extend(future.result())
                    done_files += len(chunk)
                    if progress is not None:
                        progress(done_files, len(items))
                except BrokenProcessPool:
                    broken = True
                    unfinished.extend(chunk)
            if broken:
                for future, chunk in in_flight.items():
                    try:
                        results.extend(future.result())
                    except Exception:  # noqa: BLE001 - the pool is broken
                        unfinished.extend(chunk)
                in_flight.clear()
                for chunk in queue:
                    unfinished.extend(chunk)
                queue.clear()
    except KeyboardInterrupt:
        workers.close(now=True)
        raise
    finally:
        if own or broken:
            workers.broken = workers.broken or broken
            workers.close()
    if unfinished:
        results.extend(_isolate(unfinished, profiles, task))
    return results


def _isolate(items: Sequence[Item], profiles: Sequence[Profile], task: Task = Task()) -> List[FileResult]:
    """After a worker died: each file alone in a one-worker pool; the killer is reported."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from torchlint.screen import internal_error

    results: List[FileResult] = []
    pool = None
    try:
        for display, path, index in sorted(items):
            if pool is None:
                pool = ProcessPoolExecutor(
                    max_workers=1, mp_context=_context(),
                    initializer=_worker_init, initargs=(tuple(profiles), task),
                )
            try:
                results.extend(pool.submit(_worker_chunk, [(display, path, index)]).result())
            except BrokenProcessPool:
                pool.shutdown(wait=True)
                pool = None
                results.append(FileResult(display, [internal_error(
                    display, "the worker process analysing this file died (a crash in native "
                    "code, or out of memory); please report this",
                )], profile=index))
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return results


# -- the whole run ---------------------------------------------------------------


def process_files(
    targets: Sequence[Tuple[str, Optional[Path], Profile]],
    *,
    task: Task = Task(),
    jobs: int = 1,
    use_cache: bool = True,
    progress: Optional[Callable[[int], Optional[Progress]]] = None,
    stats: Optional[Dict[str, int]] = None,
    facts_out: Optional[Dict[str, dict]] = None,
    edits_out: Optional[Dict[str, dict]] = None,
    walked: FrozenSet[str] = frozenset(),
    configs: Sequence[str] = (),
) -> List[FileResult]:
    """Every file of a run through ``process``: one result per file.

    ``targets`` are ``(display, path, profile)``: each file is processed with
    its own configuration and rules; a ``None`` path is standard input (read
    here, never cached).  Each configuration has its own cache namespace (in
    the cache directory of its root).  Cached results stand for the analysis
    (a file whose cached findings have no fix to apply is not touched by a
    fix run either); the rest is processed in worker processes when there
    are enough files, then the project index re-checks the files whose
    callers in other modules decide a finding, and a fix run fixes what is
    left to fix with the index's facts (``Task.facts``).

    ``progress(n)`` may return a callback for a run that analyses ``n``
    files.  ``stats`` (if given) receives ``cached`` and ``analysed`` counts,
    and ``fix_total``: how many fixes ``torchlint fix`` would apply (see
    ``fix_total``).  ``facts_out`` (if given) receives, per file, the facts
    other files established about it (the project index), as the engine's
    ``project`` argument takes them.  ``edits_out`` (if given; ``task.edits``
    should be set) receives, per analysed Python file with a fixable
    diagnostic, its fixes' JSON edits as ``fix_edits.for_file`` gives them
    with those facts.  ``walked``: the displays of the files found by walking
    a directory (only those may be judged code that nothing runs);
    ``configs``: the YAML, TOML and ``.cfg`` files of that walk, whose words count as mentions.
    """
    profiles: List[Profile] = []
    index_of: Dict[Profile, int] = {}
    caches: Dict[int, object] = {}

    def index(profile: Profile) -> int:
        found = index_of.get(profile)
        if found is None:
            found = index_of[profile] = len(profiles)
            profiles.append(profile)
        return found

    def cache_of(i: int):
        if not use_cache:
            return None
        if i not in caches:
            from torchlint.cache import Cache

            caches[i] = Cache.for_run(profiles[i].settings, profiles[i].codes)
        return caches[i]

    results: List[FileResult] = []
    pending: List[Item] = []
    inline: List[Tuple[str, Source, int]] = []  # (display, source, profile): standard input
    for display, path, profile in targets:
        i = index(profile)
        if path is None:
            try:
                inline.append((display, input_for(display, None).read(), i))
            except SourceError as exc:
                results.append(FileResult(display, [io_error(display, str(exc))], profile=i))
            continue
        cache = cache_of(i)
        if cache is None:
            pending.append((display, str(path), i))
            continue
        try:
            text = read_text(display, path)
        except SourceError as exc:
            results.append(FileResult(display, [io_error(display, str(exc))], profile=i))
            continue
        digest = text_hash(text)
        found = cache.get(display, digest)
        if found is None:
            pending.append((display, str(path), i))
        else:
            found_diagnostics, found_total, found_warnings, found_pending = found
            results.append(FileResult(
                display, found_diagnostics,
                excerpt_sources(display, text) if found_diagnostics else None,
                digest, warnings=found_warnings, profile=i, fix_total=found_total,
                pending=found_pending, path=str(path),
            ))
    if stats is not None:
        stats["cached"] = len(targets) - len(pending) - len(inline)
        stats["analysed"] = len(pending) + len(inline)

    callback = progress(len(pending)) if progress is not None else None
    workers = Workers(profiles, jobs, task) if jobs > 1 and len(pending) >= MIN_FILES_FOR_POOL else None
    try:
        if pending or inline:
            results.extend(_process_items(pending, inline, profiles, jobs, callback, task, workers))
        # The index meets the files in the run's order, not in the order the
        # workers finished them: which of two callers at the same frequency a
        # finding names (``via``) must not depend on the number of workers.
        order = {display: n for n, (display, _, _) in enumerate(targets)}
        known = facts_out if facts_out is not None else {}
        replaced, with_facts = _project_index(sorted(results, key=lambda r: order.get(r.display, -1)), profiles,
                                              cache_of if use_cache else (lambda i: None), known, workers,
                                              task.edits, walked, configs)
    except KeyboardInterrupt:
        if workers is not None:
            workers.close(now=True)
        raise
    finally:
        if workers is not None:
            workers.close()

    if use_cache:
        for result in results:
            cache = caches.get(result.profile)
            if cache is not None and result.digest is not None:
                cache.put(result.display, result.digest, result.diagnostics, result.fix_total, result.warnings,
                          result.pending)
        for key, result in with_facts:  # under "<path>#<facts hash>"
            cache = caches.get(result.profile)
            if cache is not None and result.digest is not None:
                cache.put(key, result.digest, result.diagnostics, result.fix_total, result.warnings)
        for i in sorted(caches):
            caches[i].save()
    results = [replaced.get(r.display, r) for r in results]
    if edits_out is not None:
        # A first analysis's edits stand where the index gave the file no
        # facts; the index's own analysis replaced the others (a result from
        # the cache has none: the caller computes those).
        edits_out.update({r.display: r.edits for r in results
                          if r.edits is not None and (r.display in replaced or r.display not in known)})
    if task.fixes:
        _fix_rest(results, profiles, jobs, task, facts_out or {})
    if stats is not None:
        stats["fix_total"] = sum(r.fix_total or 0 for r in results)
    return results


def _process_items(pending: Sequence[Item], inline, profiles: Sequence[Profile], jobs: int,
                   callback: Optional[Progress], task: Task, workers: Optional[Workers] = None) -> List[FileResult]:
    """``process`` over the items: in worker processes when there are enough of
    them (and ``jobs > 1``; ``workers``: the run's, kept for what follows),
    else here; standard input (``inline``) here."""
    from torchlint.threads import on_large_stack

    if jobs > 1 and len(pending) >= MIN_FILES_FOR_POOL:
        results = on_large_stack(_serial, [], inline, profiles, None, task)
        try:
            return results + _run_pool(pending, profiles, jobs, callback, task, workers)
        except (OSError, NotImplementedError, ImportError):
            # No process pool on this system (e.g. a sandbox without POSIX
            # semaphores): process everything here instead.
            return results + on_large_stack(_serial, pending, [], profiles, callback, task)
    return on_large_stack(_serial, pending, inline, profiles, callback, task)


def _fix_rest(results: List[FileResult], profiles: Sequence[Profile], jobs: int, task: Task,
              facts: Dict[str, dict]) -> None:
    """A fix run's second stage: fix the files not fixed yet that have a fix to
    apply (cache hits, and files the project index had to answer for first),
    each with the index's facts about it."""
    items = [(r.display, r.path, r.profile) for r in results
             if r.fix is None and r.path is not None and needs_fix(r.diagnostics, task.unsafe)]
    if not items:
        return
    stage = Task(task.mode, task.unsafe, {display: facts.get(display) for display, _, _ in items})
    fixed = {r.display: r for r in _process_items(items, [], profiles, jobs, None, stage)}
    for result in results:
        done = fixed.get(result.display)
        if done is None or result.path is None:
            continue
        if done.fix is not None:
            result.fix = done.fix
        else:  # its worker died: the internal error joins the findings
            result.diagnostics = [*result.diagnostics, *done.diagnostics]


def check_files(
    targets: Sequence[Tuple[str, Optional[Path], Profile]],
    *,
    jobs: int = 1,
    use_cache: bool = True,
    progress: Optional[Callable[[int], Optional[Progress]]] = None,
    stats: Optional[Dict[str, int]] = None,
    warnings: Optional[List[str]] = None,
    facts_out: Optional[Dict[str, dict]] = None,
    edits_out: Optional[Dict[str, dict]] = None,
    walked: FrozenSet[str] = frozenset(),
    configs: Sequence[str] = (),
) -> Tuple[List[Diagnostic], Dict[str, str]]:
    """Diagnostics (sorted) and the texts of the files that have some: ``check``
    (``process_files`` with the check task).  ``warnings`` (if given) receives
    the warnings about suppression comments, by path and line; ``edits_out``
    (if given) the fixes' JSON edits of the analysed files (``process_files``)."""
    results = process_files(targets, task=Task(edits=edits_out is not None), jobs=jobs, use_cache=use_cache,
                            progress=progress, stats=stats, facts_out=facts_out, edits_out=edits_out,
                            walked=walked, configs=configs)
    diagnostics: List[Diagnostic] = []
    sources: Dict[str, str] = {}
    for result in results:
        if result.diagnostics:
            diagnostics.extend(result.diagnostics)
            if result.sources:
                sources.update(result.sources)
    diagnostics.sort(key=Diagnostic.sort_key)
    if warnings is not None:
        # Stable: each file's warnings stay in the order of their lines.
        for result in sorted(results, key=lambda r: r.display):
            warnings.extend(result.warnings)
    return diagnostics, sources


def _pool_asker(workers: Optional[Workers], by_display: Dict[str, FileResult]):
    """The index's questions answered in the run's worker processes, caller
    file by caller file (None: in this process)."""
    if workers is None or workers.broken:
        return None
    from torchlint import project

    def ask(queries: List[project.Query]) -> Dict[str, project.Answers]:
        calls = [(other, by_display[other].path, wanted, known) for other, known, wanted in queries]
        answers = workers.map(_sites_in_file, calls)
        if answers is None:  # the pool broke: answer here
            answers = [_sites_in_file(*call) for call in calls]
        return {other: found for (other, _, _), found in zip(queries, answers)}

    return ask


def _pool_scanner(workers: Optional[Workers], everything: Dict[str, FileResult]):
    """``project.unreferenced``'s reading of every file of the run, in the run's
    worker processes, in chunks (None: in this process)."""
    if workers is None or workers.broken:
        return None

    def scan(files: Sequence[str], stems: Sequence[str], methods: Sequence[str], asked=None):
        chunks = [files[i::workers.jobs * 4] for i in range(workers.jobs * 4)]
        done = workers.map(_scan_files, [([(d, everything[d].path) for d in chunk], stems, methods, asked)
                                         for chunk in chunks])
        if done is None:  # the pool broke: scan here
            return [None] * len(files)
        by_display = {d: found for chunk, answers in zip(chunks, done) for d, found in zip(chunk, answers)}
        return [by_display[d] for d in files]

    return scan


def _scan_files(files: Sequence[Tuple[str, Optional[str]]], stems: Sequence[str], methods: Sequence[str],
                asked=None):
    from torchlint.project import scan_file

    found = []
    for display, path in files:
        text = _text_or_none(display, path)
        found.append(scan_file(display, text, stems, methods, asked) if text is not None else None)
    return found


def _text_or_none(display: str, path: Optional[str]) -> Optional[str]:
    """``read_text``, None for a file that cannot be read (the index's questions)."""
    try:
        return read_text(display, Path(path)) if path is not None else None
    except SourceError:
        return None


def _sites_in_file(display: str, path: Optional[str], wanted, external=None):
    from torchlint.threads import on_large_stack
    from torchlint.project import sites_in

    text = _text_or_none(display, path)
    with gc_paused():
        return on_large_stack(sites_in, display, text, wanted, external)


def _recheck(display: str, path: str, i: int, digest: Optional[str], facts: dict, edits: bool = False,
             profile: Optional[Profile] = None) -> Optional[FileResult]:
    """A file analysed again with what other files establish about it (in a
    worker, ``profile`` None: the worker's profile ``i``); ``edits``: as ``Task.edits``."""
    from torchlint.threads import on_large_stack

    try:
        text = read_text(display, Path(path))
    except SourceError:
        return None
    if profile is None:
        profile = _worker_profiles[i]
    result = on_large_stack(analyse_text, text, display, profile.settings, profile.codes, digest, {"frequency": facts},
                            edits)
    result.profile, result.path = i, path
    return result


def _project_index(
    results: List[FileResult], profiles: Sequence[Profile], cache_of, facts_out: Optional[Dict[str, dict]] = None,
    workers: Optional[Workers] = None, edits: bool = False, walked: FrozenSet[str] = frozenset(),
    configs: Sequence[str] = (),
) -> Tuple[Dict[str, FileResult], List[Tuple[str, FileResult]]]:
    """Facts across modules (torchlint/project.py): the files whose functions
    other files of the run call (every step, or once), and the files found by
    walking a directory (``walked``: displays) that define names no other
    file mentions, checked again with those facts.  Returns display -> the
    result that replaces the first one, and the new results to cache under
    "<path>#<facts hash>"."""
    from torchlint import project

    everything = {r.display: r for r in results if r.path is not None and r.digest is not None}
    files = [r for r in everything.values() if input_for(r.display, None).indexed]
    noted = {r.display: r.pending for r in files if r.pending}
    # Files whose findings may lie in code that nothing runs (``project.unreferenced``).
    reach = {r.display: sorted({d.line for d in r.diagnostics if d.code and d.code.startswith("TL") and d.code != "TL001"})
             for r in files if r.display in walked}
    reach = {display: lines for display, lines in reach.items() if lines}
    if not reach and (not noted or len(files) < 2):
        return {}, []
    by_display = {r.display: r for r in files}

    def read(display: str) -> Optional[str]:
        return _text_or_none(display, everything[display].path)

    # One index per run in the cache: the callers' facts and the names no other
    # file mentions, under one key.
    store = cache_of(files[0].profile) if files else None
    asked = {**noted, project.UNREFERENCED: [f"{d}:{','.join(map(str, lines))}" for d, lines in sorted(reach.items())]}
    key = project.run_key([(r.display, r.digest or "") for r in everything.values()], asked)
    facts: Optional[Dict[str, dict]] = store.get_index(key) if store is not None else None
    if facts is None:
        facts = {}
        if noted and len(files) >= 2:
            from torchlint.threads import on_large_stack

            facts.update(on_large_stack(project.derive, noted, [r.display for r in files], read,
                                        _pool_asker(workers, by_display), {r.display: r.calls for r in files}))
        if reach:
            for display, found in project.unreferenced(reach, sorted(everything), read, configs,
                                                       _pool_scanner(workers, everything)).items():
                facts[display] = {**facts.get(display, {}), **found}
        if store is not None:
            store.put_index(key, facts)
    if facts_out is not None:
        facts_out.update({display: {"frequency": found} for display, found in facts.items()})
    replaced: Dict[str, FileResult] = {}
    to_cache: List[Tuple[str, FileResult]] = []
    again: List[Tuple[str, str, int, Optional[str], dict, bool]] = []  # not in the cache: analysed again
    for display, found in sorted(facts.items()):
        first = by_display.get(display)
        if first is None or first.path is None:
            continue
        entry = f"{display}#{project.facts_digest(found)}"
        cache = cache_of(first.profile)
        hit = cache.get(entry, first.digest) if cache is not None else None
        if hit is None:
            again.append((display, first.path, first.profile, first.digest, found, edits))
            continue
        text = read(display)
        if text is None:
            continue
        diagnostics, total, warned, _ = hit
        replaced[display] = FileResult(display, diagnostics, excerpt_sources(display, text) if diagnostics else None,
                                       None, warned, first.profile, total, path=first.path)
    if workers is not None and len(again) > 1:  # the largest first: the workers finish together
        again.sort(key=lambda call: -_size(call[1]))
    done = workers.map(_recheck, again) if workers is not None and again else None
    if done is None:
        done = [_recheck(*call, profiles[call[2]]) for call in again]
    for (display, _, _, _, found, _), result in zip(again, done):
        if result is None:
            continue
        replaced[display] = result
        to_cache.append((f"{display}#{project.facts_digest(found)}", result))
    return replaced, to_cache


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _serial(pending: Sequence[Item], inline, profiles: Sequence[Profile],
            progress: Optional[Progress], task: Task = Task()) -> List[FileResult]:
    from torchlint.threads import CANCELLED

    results = []
    for display, source, i in inline:
        settings, codes = profiles[i].settings, profiles[i].codes
        result = analyse_text(source.text, display, settings, codes, None)
        result.profile = i
        if task.fixes:  # standard input is always passed through `fix`
            fix_source(result, source, settings, codes, task)
        results.append(result)
    for n, item in enumerate(pending, 1):
        if CANCELLED.is_set():
            break  # Ctrl-C: the main thread is already on its way out
        results.append(process(item, profiles, task))
        if progress is not None:
            progress(n, len(pending))
    return results


class TerminalProgress:
    """``checked 120/315 files`` on standard error, redrawn at most ten times a second."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        self.stream.write(f"\rtorchlint: checked {done}/{total} files")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
