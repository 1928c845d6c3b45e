"""torchlint verify's start-up hook for the processes of a verified program.

Its directory is put first on ``PYTHONPATH`` for the program (and so for the
processes it spawns, e.g. ``DataLoader`` workers with the "spawn" method):
Python imports this ``sitecustomize`` at start-up, which installs the import
hook that serves the fixed modules (``../_import_hook.py``), takes its
directory off ``sys.path`` again, and then runs the ``sitecustomize`` that
this one shadows, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _start():
    here = os.path.dirname(os.path.abspath(__file__))
    hook = _load("_torchlint_verify_import_hook", os.path.join(os.path.dirname(here), "_import_hook.py"))
    sys.modules["_torchlint_verify_import_hook"] = hook
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    hook.install_from_environment()
    shadowed = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if shadowed is not None and shadowed.origin and os.path.dirname(os.path.abspath(shadowed.origin)) != here:
        module = importlib.util.module_from_spec(shadowed)
        sys.modules["sitecustomize"] = module
        shadowed.loader.exec_module(module)


_start()
