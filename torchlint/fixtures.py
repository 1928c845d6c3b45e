"""A rule fixture's expected output, ``tests/fixtures/<CODE>[-variant]/expected.txt``.

A fixture is a directory holding ``input.py`` (positives, then a
``# --- near-misses ---`` line and code that must not be reported), an
optional ``torchlint.toml`` (settings of a variant) and ``expected.txt``,
which this module renders:

- one ``LINE:COL: CODE`` line per diagnostic, with `` [*]`` for a safe fix
  and `` [unsafe]`` for an unsafe one;
- then, if ``torchlint fix`` changes the input, a ``--- torchlint fix`` line
  and the unified diff from the input to its output;
- then, if ``--unsafe-fixes`` gives something else, a
  ``--- torchlint fix --unsafe-fixes, beyond the safe fixes`` line and the
  diff from the safe output to that output (what the unsafe fixes add).

The expected fixes are diffs, so a fixture does not copy its input.

    python -m torchlint.fixtures tests/fixtures/TL999    # write expected.txt

``tests/test_fixtures.py`` renders every fixture and compares; review the
written file before committing it (it records what the rule does now).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from torchlint.model import Applicability

NEAR_MISS_MARKER = "# --- near-misses ---"
SAFE_TITLE = "--- torchlint fix"
UNSAFE_TITLE = "--- torchlint fix --unsafe-fixes, beyond the safe fixes"


def settings_of(case: Path):
    """The settings and codes a fixture runs with: its rule (the directory's
    name up to the first ``-``), and its ``torchlint.toml`` if any."""
    from torchlint.config import Settings, load_config, resolve_selection
    from torchlint.registry import all_codes, default_codes

    code = case.name.split("-", 1)[0]
    config = case / "torchlint.toml"
    base = load_config(config) if config.exists() else Settings(root=Path.cwd())
    settings = base.with_overrides(select=(code,))
    return settings, resolve_selection(settings, all_codes(), default_codes())


def render_diagnostics(diagnostics) -> str:
    lines = []
    for d in diagnostics:
        mark = ""
        if d.fix is not None:
            mark = " [*]" if d.fix.applicability is Applicability.SAFE else " [unsafe]"
        lines.append(f"{d.line}:{d.column}: {d.code or d.kind.value}{mark}")
    return "\n".join(lines) + ("\n" if lines else "")


def diff(before: str, after: str) -> str:
    """The unified diff (no file names) from ``before`` to ``after``."""
    out: List[str] = []
    lines = list(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), n=2))
    for line in lines[2:]:  # after the two file-name lines
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def outputs(case: Path) -> Tuple[str, object, str, str]:
    """The input of a fixture, its diagnostics, and its safe and unsafe fixes."""
    from torchlint.engine import fix_text, lint_text

    settings, codes = settings_of(case)
    text = (case / "input.py").read_text()
    diagnostics = lint_text(text, "input.py", settings, codes).diagnostics
    safe = fix_text(text, "input.py", settings, codes, False)
    unsafe = fix_text(text, "input.py", settings, codes, True)
    errors = [*safe.errors, *unsafe.errors]
    if errors:
        raise ValueError(f"fixing failed: {errors}")
    return text, diagnostics, safe.text, unsafe.text


def render(case: Path) -> str:
    """What ``expected.txt`` of the fixture ``case`` holds."""
    text, diagnostics, safe, unsafe = outputs(case)
    out = render_diagnostics(diagnostics)
    if safe != text:
        out += f"{SAFE_TITLE}\n{diff(text, safe)}"
    if unsafe != safe:
        out += f"{UNSAFE_TITLE}\n{diff(safe, unsafe)}"
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    from torchlint.config import ConfigError

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m torchlint.fixtures FIXTURE_DIR...", file=sys.stderr)
        return 2
    for arg in args:
        case = Path(arg)
        if not (case / "input.py").is_file():
            print(f"{case}: no input.py (a fixture is a directory tests/fixtures/<CODE>/)", file=sys.stderr)
            return 2
        try:
            text = render(case)
        except (ValueError, ConfigError) as error:
            print(f"{case}: {error}", file=sys.stderr)
            return 1
        (case / "expected.txt").write_text(text)
        print(f"wrote {case / 'expected.txt'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
