"""Configuration: ``[tool.torchlint]`` in ``pyproject.toml``, or ``torchlint.toml``."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

if sys.version_info >= (3, 11):  # pragma: no cover - version dependent
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

OUTPUT_FORMATS = ("full", "concise", "grouped", "json", "github", "gitlab", "junit", "sarif")

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
    extend_ignore: Tuple[str, ...] = ()
    per_file_ignores: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    exclude: Tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: Tuple[str, ...] = ()
    target_torch: Tuple[int, int] = (2, 0)
    # None: not set anywhere, so the summary hints at the unsafe fixes (Ruff's "hint").
    unsafe_fixes: Optional[bool] = None
    output_format: str = "full"
    root: Path = field(default_factory=Path.cwd)
    config_path: Optional[Path] = None
    extends: Tuple[Path, ...] = ()  # the files ``extend`` read, nearest first

    def with_overrides(self, **overrides: Any) -> "Settings":
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


# -- loading ------------------------------------------------------------------

_KEYS = {
    "select", "ignore", "extend-select", "extend-ignore", "per-file-ignores", "exclude",
    "extend-exclude", "target-torch", "unsafe-fixes", "output-format", "extend",
}

# Keys whose values add up along an ``extend`` chain (the base's, then the file's own).
_ADDITIVE = ("extend-select", "extend-ignore", "extend-exclude")

# Keys holding path patterns: those with a ``/`` are relative to the directory of the
# file that sets them (or to the current directory, on the command line).
_PATTERN_KEYS = ("exclude", "extend-exclude")


def find_config(start: Path) -> Optional[Path]:
    """The nearest ``torchlint.toml``, or ``pyproject.toml`` with ``[tool.torchlint]``."""
    start = start.resolve()
    if start.is_file():
        start = start.parent
    for directory in (start, *start.parents):
        found = config_in(directory)
        if found is not None:
            return found
    return None


def _read_quietly(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def load_config(path: Path, extra: Optional["ConfigOverrides"] = None) -> Settings:
    """Read and validate a configuration file, with the files it ``extend``s
    and the command line's ``--config KEY=VALUE`` overrides (``extra``) on top."""
    path = Path(os.path.abspath(path))
    table, where, chain = _load_table(path, ())
    root = path.parent.resolve()
    if extra is not None:
        table = _merge(table, extra.rebased(root))
        where = f"{where} (with --config overrides)"
    return settings_from_table(table, where, root, path, tuple(chain[1:]))


def _read_table(path: Path) -> Tuple[Dict[str, Any], str]:
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
    return table, where


def _load_table(path: Path, seen: Tuple[Path, ...]) -> Tuple[Dict[str, Any], str, List[Path]]:
    """A file's table merged over the tables it ``extend``s (as Ruff: relative to
    the file, chains allowed, cycles refused); its name; the files read, from ``path`` on."""
    resolved = path.resolve()
    if resolved in seen:
        cycle = " -> ".join(str(p) for p in (*seen, resolved))
        raise ConfigError(f"`extend` forms a cycle: {cycle}")
    table, where = _read_table(path)
    base = table.get("extend")
    if base is None:
        return table, where, [path]
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{where}: `extend` must be the path of another configuration file")
    base_path = Path(os.path.abspath(path.parent / os.path.expanduser(base)))
    if not base_path.is_file():
        raise ConfigError(f"{where}: extend: configuration file {base_path} does not exist")
    parent, parent_where, chain = _load_table(base_path, (*seen, resolved))
    own = {k: v for k, v in table.items() if k != "extend"}
    settings_from_table(parent, parent_where, base_path.parent)  # its errors name the base file
    parent = _rebase_patterns(parent, base_path.parent.resolve(), path.parent.resolve())
    return _merge(parent, own), where, [path, *chain]


def _merge(base: Dict[str, Any], top: Dict[str, Any]) -> Dict[str, Any]:
    """``top`` over ``base``: its keys replace the base's, except the ``extend-*``
    lists, which add up."""
    merged = dict(base)
    for key, value in top.items():
        if key in _ADDITIVE and key in base and isinstance(base[key], list) and isinstance(value, list):
            merged[key] = [*base[key], *value]
        else:
            merged[key] = value
    return merged


def _rebase(pattern: str, directory: Path, root: Path) -> str:
    """A pattern with a ``/`` (relative to ``directory``) made relative to ``root``."""
    posix = pattern.replace("\\", "/")
    if "/" not in posix.rstrip("/") or directory == root:
        return pattern
    trailing = "/" if posix.endswith("/") else ""
    target = os.path.normpath(os.path.join(str(directory), posix.lstrip("/").removeprefix("./")))
    return Path(os.path.relpath(target, str(root))).as_posix() + trailing


def _rebase_patterns(table: Dict[str, Any], directory: Path, root: Path) -> Dict[str, Any]:
    if directory == root:
        return table
    out = dict(table)
    for key in _PATTERN_KEYS:
        if isinstance(out.get(key), list):
            out[key] = [_rebase(p, directory, root) if isinstance(p, str) else p for p in out[key]]
    if isinstance(out.get("per-file-ignores"), dict):
        out["per-file-ignores"] = {_rebase(k, directory, root): v for k, v in out["per-file-ignores"].items()}
    return out


def _check_keys(table: Dict[str, Any], where: str) -> None:
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option `{unknown[0]}` "
            f"(known options: {', '.join(sorted(_KEYS))})"
        )


@dataclass(frozen=True)
class ConfigOverrides:
    """``--config KEY=VALUE`` options (TOML), applied over every file's configuration."""

    table: Tuple[Tuple[str, Any], ...] = ()
    cwd: Path = field(default_factory=Path.cwd)

    def __bool__(self) -> bool:
        return bool(self.table)

    def as_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in self.table}

    def rebased(self, root: Path) -> Dict[str, Any]:
        """The overrides, their path patterns made relative to ``root``."""
        return _rebase_patterns(self.as_dict(), self.cwd.resolve(), root)


def parse_override(text: str) -> Tuple[str, Any]:
    """One ``--config`` ``KEY=VALUE`` (TOML syntax: ``select=['TL1']``,
    ``target-torch='2.1'``), validated; ConfigError otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"--config: `{text}` is neither an existing configuration file nor a TOML `KEY = VALUE` "
            f"override ({exc}); e.g. --config \"select = ['TL1']\""
        ) from None
    if len(data) != 1:
        raise ConfigError(f"--config: `{text}` must set exactly one option (KEY = VALUE)")
    (key, value), = data.items()
    if key == "tool" and isinstance(value, dict) and set(value) == {"torchlint"}:
        raise ConfigError(f"--config: write the option without `tool.torchlint.`: `{text}`")
    if key == "extend":
        raise ConfigError("--config: `extend` cannot be set on the command line (use --config FILE)")
    _check_keys({key: value}, "--config")
    settings_from_table({key: value}, "--config", Path.cwd())  # the value's type and content
    return key, value


def settings_from_table(
    table: Dict[str, Any], where: str, root: Path, config_path: Optional[Path] = None,
    extends: Tuple[Path, ...] = (),
) -> Settings:
    _check_keys(table, where)
    values: Dict[str, Any] = {"root": root, "config_path": config_path, "extends": extends}
    for key in ("select", "ignore", "extend-select", "extend-ignore", "exclude", "extend-exclude"):
        if key in table:
            values[key.replace("-", "_")] = tuple(_string_list(table[key], key, where))
    for key in ("select", "ignore", "extend-select", "extend-ignore"):
        for selector in table.get(key, ()):
            _check_selector(selector, f"{where}: {key}")
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of pattern = [codes]")
        entries = []
        for pattern, codes in pfi.items():
            key = f"per-file-ignores.{_toml_key(pattern)}"
            codes = _string_list(codes, key, where)
            for selector in codes:
                _check_selector(selector, f"{where}: {key}")
            entries.append((pattern, tuple(codes)))
        values["per_file_ignores"] = tuple(entries)
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


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it can be, quoted otherwise (``"train.py"``)."""
    return key if _BARE_KEY.match(key) else '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_selector(selector: str, where: str) -> None:
    """A usage error naming ``where`` (a file and key, or an option) for an unknown selector."""
    from torchlint.registry import all_codes

    try:
        validate_selector(selector, all_codes())
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


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
#
# A selector is ``ALL``, a rule's code (``TL503``) or a prefix of codes (``TL``,
# ``TL2``, ``TL50``).  ``select`` and ``extend-select`` enable the rules whose codes
# start with a selector, except that an opt-in rule (off by default: TL5xx, TL001) is
# enabled only by ``ALL`` or by a selector with at least one digit (its family,
# ``TL5``, or anything more specific): ``select = ["TL"]`` means the default rules.
# ``ignore`` and ``per-file-ignores`` remove every rule whose code starts with a
# selector (``ALL``: every rule).

_SELECTOR = re.compile(r"^(ALL|[A-Z]+[0-9]*)$")


def resolve_selection(
    settings: Settings, all_codes: Sequence[str], default_codes: Sequence[str]
) -> List[str]:
    """The enabled rule codes: (select or the defaults) + extend-select - ignore - extend-ignore."""
    for selector in (*(settings.select or ()), *settings.ignore, *settings.extend_select,
                     *settings.extend_ignore):
        validate_selector(selector, all_codes)
    opt_in = set(all_codes) - set(default_codes)
    selected = set(
        default_codes if settings.select is None else _enabled_by(settings.select, all_codes, opt_in)
    )
    selected |= set(_enabled_by(settings.extend_select, all_codes, opt_in))
    selected -= set(_matching((*settings.ignore, *settings.extend_ignore), all_codes))
    return sorted(selected)


def validate_selector(selector: str, all_codes: Sequence[str]) -> None:
    if not _SELECTOR.match(selector) or not _matching([selector], all_codes):
        raise ConfigError(f"unknown rule selector `{selector}` (see `torchlint rule --all`)")


def _matching(selectors: Sequence[str], all_codes: Sequence[str]) -> List[str]:
    """Every code that a selector names or is a prefix of (for ``ignore``)."""
    out = []
    for code in all_codes:
        if any(s == "ALL" or code.startswith(s) for s in selectors):
            out.append(code)
    return out


def _enabled_by(selectors: Sequence[str], all_codes: Sequence[str], opt_in: Set[str]) -> List[str]:
    """The codes that ``select``/``extend-select`` selectors enable: opt-in rules
    only by ``ALL`` or a selector with a digit (``TL5``, ``TL50``, ``TL503``)."""
    out = []
    for code in all_codes:
        for s in selectors:
            if s == "ALL" or (
                code.startswith(s) and (code not in opt_in or any(ch.isdigit() for ch in s))
            ):
                out.append(code)
                break
    return out


# -- the configuration of each file ----------------------------------------------


@dataclass(frozen=True)
class Overrides:
    """What the command line sets on top of every file's configuration."""

    select: Optional[Tuple[str, ...]] = None
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    extend_ignore: Tuple[str, ...] = ()
    target_torch: Optional[Tuple[int, int]] = None
    output_format: Optional[str] = None
    unsafe_fixes: Optional[bool] = None
    exclude: Optional[Tuple[str, ...]] = None  # --exclude: replaces the configured exclude
    extend_exclude: Tuple[str, ...] = ()
    config: ConfigOverrides = ConfigOverrides()  # --config KEY=VALUE

    @property
    def selects(self) -> bool:
        return self.select is not None or bool(self.ignore) or bool(self.extend_select)

    def apply(self, settings: Settings) -> Settings:
        if self.select is not None:
            # The command line's --select replaces the configuration's selection.
            settings = replace(settings, select=self.select, ignore=(), extend_select=(), extend_ignore=())
        cwd = self.config.cwd.resolve()
        if self.exclude is not None:
            settings = replace(settings, exclude=tuple(_rebase(p, cwd, settings.root) for p in self.exclude))
        if self.extend_exclude:
            settings = replace(settings, extend_exclude=settings.extend_exclude + tuple(
                _rebase(p, cwd, settings.root) for p in self.extend_exclude))
        if self.ignore:
            settings = replace(settings, ignore=settings.ignore + self.ignore)
        if self.extend_select:
            settings = replace(settings, extend_select=settings.extend_select + self.extend_select)
        return settings.with_overrides(
            target_torch=self.target_torch, output_format=self.output_format,
            unsafe_fixes=self.unsafe_fixes,
        )


@dataclass(frozen=True)
class Profile:
    """A file's settings (its configuration with the overrides) and enabled rules."""

    settings: Settings
    codes: Tuple[str, ...]


def config_in(directory: Path) -> Optional[Path]:
    """``directory``'s own ``torchlint.toml``, or its ``pyproject.toml`` if that has
    ``[tool.torchlint]`` (a pyproject.toml without it does not count)."""
    candidate = directory / "torchlint.toml"
    if candidate.is_file():
        return candidate
    candidate = directory / "pyproject.toml"
    if not candidate.is_file():
        return None
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        # A broken pyproject.toml that may not concern us: only an error if it
        # seems to configure torchlint (load_config then says what is wrong).
        return candidate if "[tool.torchlint" in _read_quietly(candidate) else None
    tool = data.get("tool")
    return candidate if isinstance(tool, dict) and "torchlint" in tool else None


class Resolver:
    """The configuration of each file, as Ruff finds it: the nearest
    ``torchlint.toml`` or ``pyproject.toml`` with ``[tool.torchlint]`` above the
    file (looked up once per directory), or the file ``--config`` names for every
    file; the command line's ``overrides`` apply on top of each.  A file under no
    configuration gets the defaults, with the current directory as its root.

    The run as a whole (output format, unsafe fixes) follows ``run_profile``: the
    configuration of the current directory.
    """

    def __init__(self, overrides: Overrides = Overrides(), config: Optional[Path] = None,
                 cwd: Optional[Path] = None) -> None:
        self.overrides = overrides
        self.cwd = (cwd if cwd is not None else Path.cwd()).resolve()
        self.forced = config
        self._config_of: Dict[str, Optional[Path]] = {}  # directory -> its configuration file
        self._profiles: Dict[Optional[Path], Profile] = {}

    def config_for(self, directory: Path) -> Optional[Path]:
        """The configuration file that applies in ``directory`` (memoized)."""
        if self.forced is not None:
            return self.forced
        key = os.path.abspath(directory)
        if key in self._config_of:
            return self._config_of[key]
        start = Path(key)
        try:
            start = start.resolve()
        except OSError:
            pass
        visited: List[str] = [key]
        found: Optional[Path] = None
        for current in (start, *start.parents):
            name = str(current)
            if name in self._config_of and name != key:
                found = self._config_of[name]
                break
            visited.append(name)
            if current.is_dir():
                found = config_in(current)
                if found is not None:
                    break
        for name in visited:
            self._config_of.setdefault(name, found)
        self._config_of[key] = found
        return found

    def for_directory(self, directory: Path) -> Profile:
        return self._profile(self.config_for(directory))

    def for_file(self, path: Path) -> Profile:
        return self.for_directory(Path(os.path.abspath(path)).parent)

    @property
    def run_profile(self) -> Profile:
        return self.for_directory(self.cwd)

    def _profile(self, config: Optional[Path]) -> Profile:
        profile = self._profiles.get(config)
        if profile is None:
            profile = self._profiles[config] = self._load(config)
        return profile

    def _load(self, config: Optional[Path]) -> Profile:
        from torchlint.registry import all_codes, default_codes

        base = self._base(config)
        settings = self.overrides.apply(base)
        codes = resolve_selection(settings, all_codes(), default_codes())
        if not codes:
            raise ConfigError(_nothing_selected(self.overrides, base, config))
        return Profile(settings, tuple(codes))

    def _base(self, config: Optional[Path]) -> Settings:
        """The file's own settings (with ``--config KEY=VALUE``), before the other options."""
        extra = self.overrides.config
        if config is not None:
            return load_config(config, extra or None)
        if extra:
            return settings_from_table(extra.rebased(self.cwd), "--config", self.cwd)
        return Settings(root=self.cwd)


def _nothing_selected(overrides: Overrides, base: Settings, config: Optional[Path]) -> str:
    where = "--config" if overrides.config else None
    if config is not None:
        where = f"[tool.torchlint] in {config}" if config.name == "pyproject.toml" else str(config)
        if overrides.config:
            where += " (with --config overrides)"
    if overrides.select is not None or (overrides.selects and where is None):
        return ("no rules selected: --select, --ignore and --extend-select leave nothing to check "
                "(an empty --select selects nothing)")
    if overrides.selects:
        return (f"no rules selected: --ignore/--extend-select with the selection of {where} "
                "leave nothing to check")
    return (f"{where}: no rules selected: select, extend-select and ignore leave nothing to "
            "check (to skip files, use `exclude`)")
