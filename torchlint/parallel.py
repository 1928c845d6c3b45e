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

import os
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from torchlint.config import Profile
from torchlint.model import Diagnostic, Kind
from torchlint.source import SourceError, is_notebook, read_source, text_hash

# Below this many files to analyse a pool costs more than it saves (starting
# the workers, shipping results back), whatever ``jobs`` says.
MIN_FILES_FOR_POOL = 24
# Caller files the project index parses in worker processes rather than here.
MIN_CALLERS_FOR_POOL = 4
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
    path: Optional[str] = None  # the file on disk (None: standard input)


Progress = Callable[[int, int], None]


# -- analysing one file (in this process or in a worker) -------------------------


def _io_error(display: str, message: str) -> Diagnostic:
    return Diagnostic(display, 1, 1, 1, 1, f"cannot read file: {message}", kind=Kind.IO_ERROR)


def read_text(display: str, path: Path) -> str:
    """A file's text: a Python file decoded as Python does, a notebook as UTF-8 JSON."""
    if is_notebook(display):
        from torchlint.notebook import read_notebook

        return read_notebook(path).text
    return read_source(path).text


def excerpt_sources(display: str, text: str) -> Dict[str, str]:
    """What the reporters show excerpts from: the text, or a notebook's cells."""
    if is_notebook(display):
        from torchlint.notebook import NotebookError, parse

        try:
            return parse(text).sources(display)
        except NotebookError:
            return {}
    return {display: text}


def analyse_text(text: str, display: str, settings, codes: Sequence[str], digest: Optional[str],
                 project: Optional[dict] = None) -> FileResult:
    from torchlint.engine import crashed, lint_text

    from torchlint.noqa import warning_text

    sources: Optional[Dict[str, str]] = None
    warnings: List[str] = []
    pending: List[str] = []
    try:
        if is_notebook(display):
            from torchlint.notebook import lint_notebook

            linted = lint_notebook(text, display, settings, codes)
            found, sources, warnings = linted.diagnostics, linted.sources, linted.warnings
        else:
            result = (lint_text(text, display, settings, codes, project) if project
                      else lint_text(text, display, settings, codes))
            found = result.diagnostics
            pending = result.pending
            warnings = [warning_text(display, w.line, w.message) for w in result.warnings]
            sources = {display: text}
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        found = [crashed(display, exc)]
        sources = {display: text}
    return FileResult(display, found, sources if found else None, digest, warnings,
                      fix_total=fix_total(text, display, settings, codes, found, project), pending=pending)


@lru_cache(maxsize=8)
def _enabling(codes: Tuple[str, ...]) -> frozenset:
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
    if not any(d.code in _enabling(tuple(codes)) for d in applicable):
        return len(applicable)  # no fix here can make another possible
    try:
        if is_notebook(display):
            from torchlint.notebook import fix_notebook

            return sum(fix_notebook(text, display, settings, codes, unsafe).applied.values())
        from torchlint.engine import fix_text

        return fix_text(text, display, settings, codes, unsafe, project=project).fixed_count
    except Exception:  # noqa: BLE001 - a count for the summary; `fix` reports its own errors
        return None


def analyse_file(display: str, path: str, settings, codes: Sequence[str]) -> FileResult:
    try:
        text = read_text(display, Path(path))
    except SourceError as exc:
        return FileResult(display, [_io_error(display, str(exc))])
    result = analyse_text(text, display, settings, codes, text_hash(text))
    result.path = path
    return result


# An item to analyse: (display, path, index of its profile in the run's profiles).
Item = Tuple[str, str, int]


def _analyse_item(item: Item, profiles: Sequence[Profile]) -> FileResult:
    display, path, index = item
    profile = profiles[index]
    result = analyse_file(display, path, profile.settings, profile.codes)
    result.profile = index
    return result


def _analyse_many(items: Sequence[Item], profiles: Sequence[Profile]) -> List[FileResult]:
    return [_analyse_item(item, profiles) for item in items]


# -- worker processes ------------------------------------------------------------

_worker_profiles: Sequence[Profile] = ()


def _worker_init(profiles: Sequence[Profile]) -> None:
    global _worker_profiles
    import torchlint.threads as threads

    # A forked worker inherits the parent's handle on its large-stack thread
    # but not the thread itself: start its own on first use.
    threads._executor = None
    _worker_profiles = tuple(profiles)


def _worker_chunk(items: Sequence[Item]) -> List[FileResult]:
    from torchlint.threads import on_large_stack

    return on_large_stack(_analyse_many, items, _worker_profiles)


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


def _run_pool(items: Sequence[Item], profiles: Sequence[Profile], jobs: int,
              progress: Optional[Progress]) -> List[FileResult]:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    chunks = _chunks(items, jobs)
    results: List[FileResult] = []
    done_files = 0
    unfinished: List[Item] = []
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(chunks)), mp_context=_context(),
        initializer=_worker_init, initargs=(tuple(profiles),),
    )
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
        # Ctrl-C: stop the workers now rather than wait for their chunks (a
        # check writes nothing, so there is nothing to finish).
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    if unfinished:
        results.extend(_isolate(unfinished, profiles))
    return results


def _isolate(items: Sequence[Item], profiles: Sequence[Profile]) -> List[FileResult]:
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
                    initializer=_worker_init, initargs=(tuple(profiles),),
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


def check_files(
    targets: Sequence[Tuple[str, Optional[Path], Profile]],
    *,
    jobs: int = 1,
    use_cache: bool = True,
    read_stdin: Optional[Callable[[], str]] = None,
    progress: Optional[Callable[[int], Optional[Progress]]] = None,
    stats: Optional[Dict[str, int]] = None,
    warnings: Optional[List[str]] = None,
    facts_out: Optional[Dict[str, dict]] = None,
) -> Tuple[List[Diagnostic], Dict[str, str]]:
    """Diagnostics (sorted) and the texts of the files that have some.

    ``targets`` are ``(display, path, profile)``: each file is checked with its
    own configuration and rules; a ``None`` path is standard input, read with
    ``read_stdin`` and never cached.  Each configuration has its own cache
    namespace (in the cache directory of its root).  ``progress(n)`` may return
    a callback for a run that analyses ``n`` files.  ``stats`` (if given)
    receives ``cached`` and ``analysed`` counts, and ``fix_total``: how many
    fixes ``torchlint fix`` would apply (see ``fix_total``); ``warnings`` (if given) the
    warnings about suppression comments, by path and line.  ``facts_out`` (if
    given) receives, per file, the facts other files established about it (the
    project index), as the engine's ``project`` argument takes them.
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
    inline: List[Tuple[str, str, Optional[str], int]] = []  # (display, text, digest, profile): stdin
    for display, path, profile in targets:
        i = index(profile)
        if path is None:
            assert read_stdin is not None
            try:
                inline.append((display, read_stdin(), None, i))
            except SourceError as exc:
                results.append(FileResult(display, [_io_error(display, str(exc))], profile=i))
            continue
        cache = cache_of(i)
        if cache is None:
            pending.append((display, str(path), i))
            continue
        try:
            text = read_text(display, path)
        except SourceError as exc:
            results.append(FileResult(display, [_io_error(display, str(exc))], profile=i))
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
    if pending or inline:
        from torchlint.threads import on_large_stack

        if jobs > 1 and len(pending) >= MIN_FILES_FOR_POOL:
            results.extend(on_large_stack(_serial, [], inline, profiles, None))
            try:
                results.extend(_run_pool(pending, profiles, jobs, callback))
            except (OSError, NotImplementedError, ImportError):
                # No process pool on this system (e.g. a sandbox without POSIX
                # semaphores): analyse everything here instead.
                results.extend(on_large_stack(_serial, pending, [], profiles, callback))
        else:
            results.extend(on_large_stack(_serial, pending, inline, profiles, callback))

    replaced, with_facts = _project_index(results, profiles, cache_of if use_cache else (lambda i: None), facts_out,
                                          jobs if len(targets) >= MIN_FILES_FOR_POOL else 1)

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

    diagnostics: List[Diagnostic] = []
    sources: Dict[str, str] = {}
    for result in results:
        if result.diagnostics:
            diagnostics.extend(result.diagnostics)
            if result.sources:
                sources.update(result.sources)
    diagnostics.sort(key=Diagnostic.sort_key)
    if stats is not None:
        stats["fix_total"] = sum(r.fix_total or 0 for r in results)
    if warnings is not None:
        # Stable: each file's warnings stay in the order of their lines.
        for result in sorted(results, key=lambda r: r.display):
            warnings.extend(result.warnings)
    return diagnostics, sources


def _prefetch(by_display: Dict[str, FileResult], jobs: int):
    """The index's first round in worker processes when there are enough
    caller files to parse (None: in this process)."""
    if jobs <= 1:
        return None

    def run(queries):
        if len(queries) < MIN_CALLERS_FOR_POOL:
            return {}
        from concurrent.futures import ProcessPoolExecutor

        answers: Dict[str, dict] = {}
        try:
            with ProcessPoolExecutor(max_workers=min(jobs, len(queries)), mp_context=_context()) as pool:
                futures = {
                    display: pool.submit(_sites_in_file, display, by_display[display].path, wanted)
                    for display, wanted in queries
                }
                for display, future in futures.items():
                    answers[display] = future.result()
        except Exception:  # noqa: BLE001 - no pool here: the index asks in this process instead
            return {}
        return answers

    return run


def _sites_in_file(display: str, path: Optional[str], wanted):
    from torchlint.threads import on_large_stack
    from torchlint.project import sites_in

    try:
        text = read_text(display, Path(path)) if path is not None else None
    except SourceError:
        text = None
    return on_large_stack(sites_in, display, text, wanted)


def _project_index(
    results: List[FileResult], profiles: Sequence[Profile], cache_of, facts_out: Optional[Dict[str, dict]] = None,
    jobs: int = 1,
) -> Tuple[Dict[str, FileResult], List[Tuple[str, FileResult]]]:
    """Facts across modules (torchlint/project.py): the files whose functions
    other files of the run call (every step, or once), checked again with those
    facts.  Returns display -> the result that replaces the first one, and the
    new results to cache under "<path>#<facts hash>"."""
    from torchlint import project

    files = [r for r in results if r.path is not None and r.digest is not None and not is_notebook(r.display)]
    noted = {r.display: r.pending for r in files if r.pending}
    if not noted or len(files) < 2:
        return {}, []
    by_display = {r.display: r for r in files}

    def read(display: str) -> Optional[str]:
        try:
            return read_text(display, Path(by_display[display].path))
        except SourceError:
            return None

    key = project.run_key([(r.display, r.digest or "") for r in files], noted)
    store = cache_of(files[0].profile)
    facts = store.get_index(key) if store is not None else None
    if facts is None:
        from torchlint.threads import on_large_stack

        facts = on_large_stack(project.derive, noted, [r.display for r in files], read,
                               _prefetch(by_display, jobs))
        if store is not None:
            store.put_index(key, facts)
    if facts_out is not None:
        facts_out.update({display: {"frequency": found} for display, found in facts.items()})
    replaced: Dict[str, FileResult] = {}
    to_cache: List[Tuple[str, FileResult]] = []
    for display, found in sorted(facts.items()):
        first = by_display.get(display)
        if first is None:
            continue
        profile = profiles[first.profile]
        entry = f"{display}#{project.facts_digest(found)}"
        cache = cache_of(first.profile)
        hit = cache.get(entry, first.digest) if cache is not None else None
        text = read(display)
        if text is None:
            continue
        if hit is not None:
            diagnostics, total, warned, _ = hit
            result = FileResult(display, diagnostics, excerpt_sources(display, text) if diagnostics else None,
                                None, warned, first.profile, total, path=first.path)
        else:
            from torchlint.threads import on_large_stack

            result = on_large_stack(analyse_text, text, display, profile.settings, profile.codes, first.digest,
                                    {"frequency": found})
            result.profile, result.path = first.profile, first.path
            to_cache.append((entry, result))
        replaced[display] = result
    return replaced, to_cache


def _serial(pending: Sequence[Item], inline, profiles: Sequence[Profile],
            progress: Optional[Progress]) -> List[FileResult]:
    from torchlint.threads import CANCELLED

    results = []
    for display, text, digest, i in inline:
        result = analyse_text(text, display, profiles[i].settings, profiles[i].codes, digest)
        result.profile = i
        results.append(result)
    for n, item in enumerate(pending, 1):
        if CANCELLED.is_set():
            break  # Ctrl-C: the main thread is already on its way out
        results.append(_analyse_item(item, profiles))
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
