"""``check --show-settings``: the settings that apply to a file, as TOML-like lines."""

from __future__ import annotations

import json
from typing import Any, List, Optional


def _value(value: Any) -> str:
    """A value as TOML writes it (strings and lists of strings, booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def render(display: Optional[str], profile, overrides) -> str:
    """The resolved settings of ``display`` (None: the current directory's), with
    the configuration files they come from and the rules enabled for that file."""
    from torchlint.screen import codes_for_path

    settings = profile.settings
    lines: List[str] = [
        f"Resolved settings for: {_value(display) if display is not None else '(the current directory)'}",
        "Settings path: " + (_value(settings.config_path) if settings.config_path else "(none: the defaults)"),
    ]
    if settings.extends:
        lines.append("Extends: " + _value([str(p) for p in settings.extends]))
    if overrides.config:
        lines.append("Command-line overrides: " + ", ".join(
            f"{k} = {_value(v) if not isinstance(v, dict) else json.dumps(v)}" for k, v in overrides.config.table))
    lines.append("")
    lines.append(f"root = {_value(settings.root)}")
    lines.append(f"select = {_value(settings.select) if settings.select is not None else '(the default rules)'}")
    for key in ("extend_select", "ignore", "extend_ignore"):
        lines.append(f"{key.replace('_', '-')} = {_value(getattr(settings, key))}")
    lines.append("per-file-ignores = {" + ", ".join(
        f"{_value(pattern)} = {_value(codes)}" for pattern, codes in settings.per_file_ignores) + "}")
    lines.append(f"exclude = {_value(settings.exclude)}")
    lines.append(f"extend-exclude = {_value(settings.extend_exclude)}")
    lines.append(f"target-torch = {_value('.'.join(map(str, settings.target_torch)))}")
    unsafe = settings.unsafe_fixes
    lines.append(f"unsafe-fixes = {_value(bool(unsafe))}" + ("  # not set: the summary hints at them" if unsafe is None else ""))
    lines.append(f"output-format = {_value(settings.output_format)}")
    codes = codes_for_path(display, settings, profile.codes) if display is not None else list(profile.codes)
    lines.append("")
    lines.append(f"# The rules enabled{' for this file' if display is not None else ''} ({len(codes)}):")
    lines.append(f"enabled = {_value(codes)}")
    return "\n".join(lines) + "\n"
