"""The runtime verifier: ``torchlint verify``.

Proves on the user's machine that a fix keeps results and is faster.  This
package is the only part of torchlint that uses torch, and only in the
subprocess it starts (``_child.py``); importing it does not import torch.

- ``verify_entry``: entry-point mode, ``torchlint verify path/to/module.py::function``.
- ``verify_rules``: rule mode, ``torchlint verify --rules [CODES]``.
- ``program.verify_program`` / ``program.fix_verified``: program mode,
  ``torchlint verify train.py --steps N [-- ARGS]`` and ``torchlint fix --verify train.py``
  (the runs in ``_program_child.py``; the import hook in ``_import_hook.py``).
- ``format_entry`` / ``format_rules``: the table and JSON reports.
"""

from __future__ import annotations

import importlib.util


class UsageError(Exception):
    """The verification cannot start as asked (exit status 2); the message says why."""


TORCH_MISSING = (
    "`torchlint verify` needs PyTorch, which is not installed in this environment. "
    "Install the build for your machine (https://pytorch.org/get-started/locally/); "
    "the CPU-only build is `pip install torch --index-url https://download.pytorch.org/whl/cpu`. "
    "(A plain `pip install torch` on Linux downloads the CUDA build, several GB.)"
)


def torch_available() -> bool:
    """Whether ``import torch`` can work, without importing it."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def __getattr__(name: str):
    # The entry points live in submodules, loaded on first use.
    if name in ("verify_entry", "EntryOptions"):
        from torchlint.verify import entry

        return getattr(entry, name)
    if name in ("verify_rules", "select_benchmarks"):
        from torchlint.verify import rule_mode

        return getattr(rule_mode, name)
    if name in ("format_entry", "format_rules", "exit_status", "TerminalProgress"):
        from torchlint.verify import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
