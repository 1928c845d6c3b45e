"""Finds the rule classes in ``torchlint.rules`` (the engine knows no rule)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import TYPE_CHECKING, Dict, List, Type

if TYPE_CHECKING:  # pragma: no cover
    from torchlint.rule import Rule


@lru_cache(maxsize=1)
def all_rules() -> Dict[str, Type["Rule"]]:
    import torchlint.rules as package
    from torchlint.rule import Rule

    found: Dict[str, Type[Rule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj.code and obj.__module__ == module.__name__:
                if obj.code in found:
                    raise RuntimeError(f"duplicate rule code {obj.code}")
                found[obj.code] = obj
    return dict(sorted(found.items()))


# The codes and default states come from the rules package's catalog, which
# imports no rule: resolving a selection costs no LibCST import.


def all_codes() -> List[str]:
    from torchlint.rules import CATALOG

    return sorted(CATALOG)


def default_codes() -> List[str]:
    from torchlint.rules import CATALOG

    return sorted(code for code, (_, default) in CATALOG.items() if default)


def project_hooks():
    """The rules' answers for the project index (``torchlint/project.py``)
    that need a parse: ``finder`` and ``call_sites``."""
    from torchlint.rules import _project

    return _project


def project_text_hooks():
    """The rules' textual answers for the project index, without LibCST:
    ``might_call``, ``narrow``, ``traits``, ``trait_key``, ``HOST_ARGS`` and ``UNKNOWN_LEVEL``."""
    from torchlint.rules import _project_text

    return _project_text


def rule_anchor(code: str, name: str) -> str:
    """The anchor of a rule's section in docs/rules.md (``tl201-create-then-move``)."""
    return f"{code}-{name}".lower()
