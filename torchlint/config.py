"""Configuration: ``[tool.torchlint]`` in ``pyproject.toml``, or ``torchlint.toml``."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OUTPUT_FORMATS = ("full", "concise", "json", "github", "sarif")

DEFAULT_EXCLUDE = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints",
    ".mypy_cache", ".nox", ".pants.d", ".pytype", ".ruff_cache", ".svn", ".torchlint_cache",
    ".tox", ".venv", "__pypackages__", "_build", "buck-out", "build", "dist",
    "node_modules", "site-packages", "venv",
)


class ConfigError(Exception):
    """Invalid configuration or selection: reported as a usage error (exit 2)."""


@dataclass(frozen=True)
class Settings:
    select: Optional[Tuple[str, ...]] = None
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    exclude: Tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: Tuple[str, ...] = ()
    target_torch: Tuple[int, int] = (2, 0)
    unsafe_fixes: bool = False
    output_format: str = "full"
    root: Path = field(default_factory=Path.cwd)
    config_path: Optional[Path] = None

    def with_overrides(self, **overrides: Any) -> "Settings":
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


# -- loading ------------------------------------------------------------------

_KEYS = {
    "select", "ignore", "extend-select", "per-file-ignores", "exclude",
    "extend-exclude", "target-torch", "unsafe-fixes", "output-format",
}


def find_config(start: Path) -> Optional[Path]:
    """The nearest ``torchlint.toml``, or ``pyproject.toml`` with ``[tool.torchlint]``."""
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for directory in (start, *start.parents):
        candidate = directory / "torchlint.toml"
        if candidate.is_file():
            return candidate
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                # A broken pyproject.toml that may not concern us: only an
                # error if it is the one we read (see load_config).
                if "[tool.torchlint" in _read_quietly(candidate):
                    return candidate
                continue
            if "torchlint" in data.get("tool", {}):
                return candidate
    return None


def _read_quietly(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def load_config(path: Path) -> Settings:
    """Read and validate a configuration file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("torchlint", {})
        where = f"[tool.torchlint] in {path}"
    else:
        table = data.get("tool", {}).get("torchlint", data)
        where = str(path)
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    return settings_from_table(table, where, path.parent.resolve(), path)


def settings_from_table(
    table: Dict[str, Any], where: str, root: Path, config_path: Optional[Path] = None
) -> Settings:
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option `{unknown[0]}` "
            f"(known options: {', '.join(sorted(_KEYS))})"
        )
    values: Dict[str, Any] = {"root": root, "config_path": config_path}
    for key in ("select", "ignore", "extend-select", "exclude", "extend-exclude"):
        if key in table:
            values[key.replace("-", "_")] = tuple(_string_list(table[key], key, where))
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of pattern = [codes]")
        values["per_file_ignores"] = tuple(
            (pattern, tuple(_string_list(codes, f"per-file-ignores.{pattern}", where)))
            for pattern, codes in pfi.items()
        )
    if "target-torch" in table:
        values["target_torch"] = parse_version(table["target-torch"], where)
    if "unsafe-fixes" in table:
        if not isinstance(table["unsafe-fixes"], bool):
            raise ConfigError(f"{where}: `unsafe-fixes` must be true or false")
        values["unsafe_fixes"] = table["unsafe-fixes"]
    if "output-format" in table:
        fmt = table["output-format"]
        if fmt not in OUTPUT_FORMATS:
            raise ConfigError(
                f"{where}: `output-format` must be one of {', '.join(OUTPUT_FORMATS)}, not {fmt!r}"
            )
        values["output_format"] = fmt
    return Settings(**values)


def _string_list(value: Any, key: str, where: str) -> List[str]:
    if isinstance(value, str) or not isinstance(value, list) or not all(
        isinstance(v, str) for v in value
    ):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.\d+)?\s*$")


def parse_version(value: Any, where: str = "target-torch") -> Tuple[int, int]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    match = _VERSION.match(value) if isinstance(value, str) else None
    if not match:
        raise ConfigError(f"{where}: `target-torch` must be a version like \"2.0\", not {value!r}")
    return int(match.group(1)), int(match.group(2))


# -- rule selection -----------------------------------------------------------

_SELECTOR = re.compile(r"^(ALL|[A-Z]+[0-9]*)$")


def resolve_selection(
    settings: Settings, all_codes: Sequence[str], default_codes: Sequence[str]
) -> List[str]:
    """The enabled rule codes: (select or the defaults) + extend-select - ignore."""
    for selector in (*(settings.select or ()), *settings.ignore, *settings.extend_select):
        validate_selector(selector, all_codes)
    selected = set(
        default_codes if settings.select is None else _matching(settings.select, all_codes)
    )
    selected |= set(_matching(settings.extend_select, all_codes))
    selected -= set(_matching(settings.ignore, all_codes))
    return sorted(selected)


def validate_selector(selector: str, all_codes: Sequence[str]) -> None:
    if not _SELECTOR.match(selector) or not _matching([selector], all_codes):
        raise ConfigError(f"unknown rule selector `{selector}` (see `torchlint rule --all`)")


def _matching(selectors: Sequence[str], all_codes: Sequence[str]) -> List[str]:
    out = []
    for code in all_codes:
        if any(s == "ALL" or code.startswith(s) for s in selectors):
            out.append(code)
    return out
