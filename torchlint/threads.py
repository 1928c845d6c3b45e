"""The large-stack thread every file is analysed on, and the run's cancellation flag."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

# Deeply nested code (a sum of 10,000 terms, generated tables) overflows the
# default thread stack inside LibCST's native parser, which kills the process
# instead of raising.  Each file is therefore analysed on a thread with a large
# stack (reserved address space; only what is used is committed), with a Python
# recursion limit to match, so such files are handled or reported, never fatal.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 60_000


_executor: Optional[ThreadPoolExecutor] = None


def on_large_stack(function, *args):
    """Run ``function(*args)`` on the one long-lived large-stack worker thread.

    The command line runs its whole per-file loop through this once (a hop per
    file costs a thread hand-off, about 1 ms); library callers of ``lint_text``
    and ``fix_text`` hop per call.
    """
    global _executor
    if threading.current_thread().name.startswith("torchlint-file"):
        return function(*args)
    if _executor is None:
        if sys.getrecursionlimit() < _RECURSION_LIMIT:
            sys.setrecursionlimit(_RECURSION_LIMIT)
        previous = threading.stack_size(_STACK_BYTES)
        try:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchlint-file")
            future = _executor.submit(function, *args)  # starts the thread now
        finally:
            threading.stack_size(previous)
    else:
        future = _executor.submit(function, *args)
    try:
        return future.result()
    except KeyboardInterrupt:
        # Ctrl-C reaches the main thread only; the worker stops at the next
        # file boundary (the per-file loops check this), so a file being
        # written is finished and no further one is started.
        CANCELLED.set()
        raise


# Set when the user interrupts a run: the CLI's per-file loops stop at the
# next file.
CANCELLED = threading.Event()
