"""The rules: one detector per module, ``tlNNN_<name>.py``.

``CATALOG`` maps every rule's code to its module and whether it is enabled by
default, so that a selection (``--select TL2``) can be resolved, and a run
whose results are all cached can finish, without importing any rule (and
LibCST).  It is found, not written: the code and the module come from the
file name (``tl202_dataloader_pin_memory.py`` is TL202), the default state
from the class's ``default = False`` line (without one, the rule is on).  So a
rule module dropped into this directory is registered, and nothing else lists
it; ``tests/test_registry.py`` checks the catalog against the rule classes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Tuple

_RULE_MODULE = re.compile(r"tl(\d{3})_[a-z0-9_]+\.py")
_DEFAULT = re.compile(r"^    default = (True|False)\b", re.M)


def _catalog() -> Dict[str, Tuple[str, bool]]:
    found: Dict[str, Tuple[str, bool]] = {}
    for path in sorted(Path(__file__).resolve().parent.glob("tl*.py")):
        match = _RULE_MODULE.fullmatch(path.name)
        if match is None:
            continue
        code = f"TL{match.group(1)}"
        if code in found:
            raise RuntimeError(f"two rule modules for {code}: {found[code][0]}.py and {path.name}")
        default = _DEFAULT.search(path.read_text(encoding="utf-8"))
        found[code] = (path.stem, default is None or default.group(1) == "True")
    return found


# code: (module, enabled by default)
CATALOG: Dict[str, Tuple[str, bool]] = _catalog()
