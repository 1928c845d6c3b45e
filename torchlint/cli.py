"""The ``torchlint`` command line: check, fix, rule."""

from __future__ import annotations

import os
from functools import partial
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import click

from torchlint import __version__
from torchlint.config import (
    OUTPUT_FORMATS,
    ConfigError,
    ConfigOverrides,
    Overrides,
    Profile,
    Resolver,
    Settings,
    parse_override,
    parse_version,
    validate_selector,
)
from torchlint.discovery import PathPatterns, discover
from torchlint.model import Diagnostic, Kind
from torchlint.inputs import input_for
from torchlint.source import SourceError, text_hash

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _split_codes(values: Sequence[str]) -> Optional[Tuple[str, ...]]:
    if not values:
        return None
    out: List[str] = []
    for value in values:
        out.extend(part.strip().upper() for part in value.split(",") if part.strip())
    return tuple(out)


def _fail(message: str) -> "click.exceptions.Exit":
    click.echo(f"torchlint: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_ERROR)


@dataclass
class Run:
    """One command's files and configuration.

    Each file is checked with its own configuration (``resolver.for_file``);
    ``settings`` and ``codes`` are the current directory's, which decide what
    concerns the run as a whole: the output format and ``unsafe-fixes``.
    """

    settings: Settings
    codes: List[str]
    paths: List[str]
    stdin_filename: Optional[str]
    force_exclude: bool
    resolver: Resolver
    # YAML files the directory walk found (displays), for the project index
    # (``torchlint.project.unreferenced``); filled by ``_targets``.
    configs: Tuple[str, ...] = ()

    @property
    def reads_stdin(self) -> bool:
        return self.paths == ["-"]

    def profile(self, path: Optional[Path]) -> Profile:
        """The settings and rules of the file ``path`` (None: standard input)."""
        if path is None:
            if self.stdin_filename:
                return self.resolver.for_file(Path(self.stdin_filename))
            return self.resolver.run_profile
        return self.resolver.for_file(path)


def _selectors(values: Sequence[str], option: str) -> Optional[Tuple[str, ...]]:
    from torchlint.registry import all_codes

    codes = _split_codes(values)
    for selector in codes or ():
        try:
            validate_selector(selector, all_codes())
        except ConfigError as exc:
            raise ConfigError(f"{option}: {exc}") from None
    return codes


def _config_arguments(config: Union[None, str, Sequence[str]]) -> Tuple[Optional[Path], ConfigOverrides]:
    """``--config`` values, as Ruff reads them: an existing file is the configuration
    file (at most one); anything else must be a TOML ``KEY = VALUE`` override."""
    values = [config] if isinstance(config, str) else list(config or ())
    path: Optional[Path] = None
    table = []
    for value in values:
        if os.path.isfile(value):
            if path is not None:
                raise ConfigError(f"--config: only one configuration file may be given ({path}, {value})")
            path = Path(value)
        elif "=" not in value:
            raise ConfigError(
                f"configuration file {value} does not exist (--config takes a file or a TOML `KEY = VALUE`)"
            )
        else:
            table.append(parse_override(value))
    return path, ConfigOverrides(tuple(table))


def _patterns(values: Sequence[str]) -> List[str]:
    """``--exclude``/``--extend-exclude`` values: comma-separated or repeated."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _prepare(
    paths: Sequence[str],
    select: Sequence[str],
    ignore: Sequence[str],
    extend_select: Sequence[str],
    config: Union[None, str, Sequence[str]],
    output_format: Optional[str],
    target_torch: Optional[str],
    stdin_filename: Optional[str],
    force_exclude: bool,
    unsafe_fixes: Optional[bool] = None,
    exclude: Sequence[str] = (),
    extend_exclude: Sequence[str] = (),
) -> Run:
    paths = list(paths) or ["."]
    if "-" in paths and len(paths) > 1:
        raise _fail("`-` (standard input) cannot be combined with other paths")
    try:
        config_path, config_overrides = _config_arguments(config)
        overrides = Overrides(
            select=_selectors(select, "--select"),
            ignore=_selectors(ignore, "--ignore") or (),
            extend_select=_selectors(extend_select, "--extend-select") or (),
            target_torch=None if target_torch is None else parse_version(target_torch, "--target-torch"),
            output_format=output_format,
            unsafe_fixes=unsafe_fixes,
            exclude=tuple(_patterns(exclude)) if exclude else None,
            extend_exclude=tuple(_patterns(extend_exclude)),
            config=config_overrides,
        )
        resolver = Resolver(overrides, config_path)
        profile = resolver.run_profile
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    return Run(profile.settings, list(profile.codes), paths, stdin_filename, force_exclude, resolver)


def _display(path: Path) -> str:
    text = str(path)
    if path.is_absolute():
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return text
    return os.path.normpath(text)


@dataclass
class Target:
    display: str
    path: Optional[Path]  # None for standard input
    profile: Optional[Profile] = None  # the file's settings and rules
    walked: bool = False  # found by walking a directory, not named on the command line


def _walked(targets: Sequence[Target]) -> FrozenSet[str]:
    """The displays of the files found by walking a directory."""
    return frozenset(t.display for t in targets if t.walked)


def _targets(run: Run) -> Tuple[List[Target], List[str]]:
    """The files to process (each with its configuration), and messages for
    paths that do not exist.  Raises a usage error for an invalid configuration."""
    try:
        return _find_targets(run)
    except ConfigError as exc:
        raise _fail(str(exc)) from None


def _find_targets(run: Run) -> Tuple[List[Target], List[str]]:
    if run.reads_stdin:
        return [Target(run.stdin_filename or "-", None, run.profile(None))], []
    patterns: Dict[Settings, PathPatterns] = {}

    def excludes(settings: Settings) -> PathPatterns:
        found = patterns.get(settings)
        if found is None:
            found = patterns[settings] = PathPatterns((*settings.exclude, *settings.extend_exclude), settings.root)
        return found

    # A directory's entries are excluded by the configuration that applies in it
    # (a subproject's `exclude` covers its own tree).
    found = discover(
        [Path(p) for p in run.paths],
        excludes_for=lambda directory: excludes(run.resolver.for_directory(directory).settings),
    )
    problems = [f"{_display(p)}: {why}" for p, why in found.errors]
    run.configs = tuple(_display(p) for p in found.configs)
    targets = []
    for f in found.files:
        profile = run.profile(f)
        if run.force_exclude and excludes(profile.settings).matches_any_component(f.resolve()):
            continue
        targets.append(Target(_display(f), f, profile, f in found.walked))
    return targets, problems


def _warn(warnings: Sequence[str]) -> None:
    """Warnings about suppression comments, on standard error (already in path order)."""
    for warning in warnings:
        click.echo(warning, err=True)


def _emit(text: str, *, err: bool = False, color: Optional[bool] = None, file=None) -> None:
    if text:
        if file is not None:
            file.write(text)
        else:
            click.echo(text, nl=False, err=err, color=color)


_COLOR = {"mode": "auto"}  # --color of the running command


def _set_color(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> Optional[str]:
    _COLOR["mode"] = value or "auto"
    return value


def _use_color(err: bool = False) -> bool:
    """--color always/never; with auto: NO_COLOR (non-empty) turns colour off,
    FORCE_COLOR or CLICOLOR_FORCE (non-empty, not 0) turn it on, else a terminal does."""
    mode = _COLOR["mode"]
    if mode != "auto":
        return mode == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if any(os.environ.get(name, "0") not in ("", "0") for name in ("FORCE_COLOR", "CLICOLOR_FORCE")):
        return True
    stream = sys.stderr if err else sys.stdout
    return hasattr(stream, "isatty") and stream.isatty()


_COLOR_OPTION = click.option(
    "--color", type=click.Choice(("auto", "always", "never")), default=None, expose_value=False,
    callback=_set_color, is_eager=True,
    help="Colour the output: auto (default: on a terminal, unless NO_COLOR; FORCE_COLOR or "
    "CLICOLOR_FORCE force it), always or never.",
)


def _report(
    diagnostics: List[Diagnostic],
    sources: Dict[str, str],
    settings: Settings,
    show_statistics: bool,
    err: bool = False,
    file=None,
    edits=None,
) -> None:
    from torchlint import reporters

    fmt = settings.output_format
    color = _use_color(err) and file is None
    if show_statistics:
        _emit(reporters.statistics(diagnostics, bool(settings.unsafe_fixes), fmt), err=err, color=color, file=file)
        return
    if fmt == "json":
        _emit(reporters.format_json(diagnostics, sources, color, edits), err=err, color=color, file=file)
        return
    _emit(reporters.FORMATTERS[fmt](diagnostics, sources, color), err=err, color=color, file=file)


# -- shared options ------------------------------------------------------------


def _common_options(func: Callable) -> Callable:
    options = [
        click.argument("paths", nargs=-1, type=click.Path()),
        click.option("--select", multiple=True, metavar="CODES",
                     help="Rules to enable (codes or prefixes like TL2, or ALL); replaces the configured "
                     "selection. Opt-in rules (TL5xx, TL001) are enabled only by ALL or a selector with a digit "
                     "(TL5, TL503): TL alone means the default rules."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Rules to disable."),
        click.option("--extend-select", multiple=True, metavar="CODES",
                     help="Rules to enable on top of the selection (e.g. the opt-in rules: TL5)."),
        click.option("--config", multiple=True, metavar="FILE|KEY=VALUE",
                     help="A pyproject.toml or torchlint.toml to use for every file instead of each "
                     "file's nearest one, or a TOML `KEY = VALUE` that overrides a setting of every "
                     "configuration (e.g. \"select = ['TL1']\"); repeatable."),
        click.option("--exclude", multiple=True, metavar="PATTERNS",
                     help="Patterns to exclude; replace the configured `exclude` (comma-separated or repeated)."),
        click.option("--extend-exclude", multiple=True, metavar="PATTERNS",
                     help="Patterns to exclude on top of `exclude` and the configured `extend-exclude`."),
        click.option("--output-format", type=click.Choice(OUTPUT_FORMATS), default=None,
                     help="How to print diagnostics (default: full)."),
        click.option("--target-torch", default=None, metavar="VERSION",
                     help="The oldest torch version the code must support (default 2.0)."),
        click.option("--stdin-filename", default=None, metavar="PATH",
                     help="The file name to use for code read from `-` (standard input)."),
        click.option("--force-exclude", is_flag=True,
                     help="Apply exclusions to files named on the command line too (for pre-commit)."),
        click.option("--statistics", "show_statistics", is_flag=True,
                     help="Print the number of diagnostics per rule instead of the diagnostics."),
        click.option("--exit-zero", is_flag=True, help="Exit with 0 even when diagnostics remain."),
        click.option("--no-cache", is_flag=True, help="Do not read or write the result cache."),
        _COLOR_OPTION,
    ]
    for option in reversed(options):
        func = option(func)
    return func


_UNSAFE_FIXES_OPTION = click.option(
    "--unsafe-fixes/--no-unsafe-fixes", "unsafe_fixes", default=None,
    help="Include fixes that may change behaviour (see each rule's Fix safety); overrides `unsafe-fixes`.",
)


def _program_options(func: Callable, *, tolerances: bool = True) -> Callable:
    """The options of running a program (`verify SCRIPT`, `fix --verify SCRIPT`)."""
    options = [
        click.option("--steps", type=click.IntRange(min=0), default=10, show_default=True,
                     help="Program mode: steps to time after the warm-up (a step is a backward() call, or a "
                     "call of the top-level model without one); 0 runs and times the whole program."),
        click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
                     help="Program mode: steps run (and compared) before the timed ones."),
    ]
    if tolerances:
        options += [
            click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
                         help="Seconds allowed for each run of the program."),
            click.option("--rtol", type=float, default=None, help="Relative tolerance of the comparison (with --atol)."),
            click.option("--atol", type=float, default=None, help="Absolute tolerance of the comparison (with --rtol)."),
        ]
    for option in reversed(options):
        func = option(func)
    return func


class _Group(click.Group):
    """The command group; Ctrl-C ends a run with a message and exit code 130
    (128 + SIGINT, as shells report it), never a traceback. Files are written
    atomically, so each one is either fully fixed or untouched."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("torchlint: interrupted", err=True)
            raise click.exceptions.Exit(130) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="torchlint")
def main() -> None:
    """torchlint: find and fix PyTorch performance anti-patterns."""


@main.command()
@_common_options
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes for large runs (default: the number of CPUs; 1: none).")
@_UNSAFE_FIXES_OPTION
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Report only findings that are not in this baseline (a JSON file written by --update-baseline).")
@click.option("--update-baseline", is_flag=True,
              help="Write the --baseline file: every finding when it does not exist yet; otherwise drop the "
              "entries no longer found (new findings are never added to an existing baseline).")
@click.option("--fix", "apply_fixes", is_flag=True, help="Apply fixes, then report what remains (as `torchlint fix`).")
@click.option("--fix-only", is_flag=True,
              help="Apply fixes but do not report the findings that remain (exit 0 unless --exit-non-zero-on-fix).")
@click.option("--diff", is_flag=True, help="Print a unified diff of the fixes and write nothing (as `fix --diff`).")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="With --fix or --fix-only: exit with 1 when any file was changed.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True), default=None, metavar="FILE",
              help="Write the report to FILE instead of standard output.")
@click.option("-q", "--quiet", is_flag=True, help="Print the diagnostics, but no summary.")
@click.option("--silent", is_flag=True, help="Print nothing; the exit status still says whether findings remain.")
@click.option("--show-files", is_flag=True, help="List the files that would be checked, and check nothing.")
@click.option("--show-settings", is_flag=True,
              help="Print the settings that apply to the first file (configuration file, selection, "
              "excludes...), and check nothing.")
@click.option("--show-fixes/--no-show-fixes", default=False,
              help="List the fixes per file and rule: those applied (with --fix), or those --fix would apply.")
@click.option("--add-noqa", is_flag=True,
              help="Add a `# noqa: CODE` comment to every line with a finding (merged into an existing one).")
def check(paths, select, ignore, extend_select, config, exclude, extend_exclude, output_format, target_torch,
          stdin_filename, force_exclude, show_statistics, exit_zero, no_cache, jobs, unsafe_fixes,
          baseline_file, update_baseline, apply_fixes, fix_only, diff, exit_non_zero_on_fix,
          output_file, quiet, silent, show_files, show_settings, show_fixes, add_noqa) -> None:
    """Report performance anti-patterns in PATHS (default: the current directory).

    Use `-` to read from standard input.  `--unsafe-fixes` counts the unsafe
    fixes as fixable in the summary and statistics (as `fix --unsafe-fixes`
    would apply them).  `--fix`, `--fix-only` and `--diff` fix as Ruff's
    options of the same names do.
    """
    if update_baseline and not baseline_file:
        raise _fail("--update-baseline needs --baseline FILE")
    if baseline_file and (apply_fixes or fix_only or diff):
        raise _fail("--baseline cannot be combined with --fix, --fix-only or --diff")
    if add_noqa and (apply_fixes or fix_only or diff or baseline_file):
        raise _fail("--add-noqa cannot be combined with --fix, --fix-only, --diff or --baseline")
    run = _prepare(paths, select, ignore, extend_select, config, output_format, target_torch,
                   stdin_filename, force_exclude, unsafe_fixes, exclude, extend_exclude)
    if apply_fixes or fix_only or diff:
        _run_fixes(run, diff, show_statistics, exit_zero, fix_only, exit_non_zero_on_fix, use_cache=not no_cache,
                   show_fixes=show_fixes, jobs=jobs)
    baseline = _load_baseline(baseline_file, update_baseline)
    targets, problems = _targets(run)
    if show_settings:
        _show_settings(run, targets, problems)
    if add_noqa:
        _add_noqa(run, targets, problems, use_cache=not no_cache)
    if show_files:
        for target in targets:
            click.echo(target.display)
        for problem in problems:
            click.echo(f"torchlint: error: {problem}", err=True)
        raise click.exceptions.Exit(EXIT_ERROR if problems else EXIT_OK)
    counts: Dict[str, int] = {}
    warnings: List[str] = []
    facts: Optional[Dict[str, dict]] = {} if run.settings.output_format == "json" else None
    # The fixes' edits JSON shows, computed by the analyses themselves (by file).
    analysed_edits: Optional[Dict[str, dict]] = {} if facts is not None and not silent else None
    diagnostics, sources = _check_all(targets, run, jobs, use_cache=not no_cache, stats=counts, warnings=warnings,
                                      facts_out=facts, edits_out=analysed_edits)
    if not silent:
        _warn(warnings)
    if baseline is not None:
        diagnostics = _apply_baseline(baseline, diagnostics, sources, targets, update_baseline, counts)
    from torchlint.reporters import TEXT_FORMATS, check_summary

    out = None
    try:
        if output_file is not None and not silent:
            out = open(output_file, "w", encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {output_file}: {exc.strerror or exc}") from None
    try:
        if not silent:
            edits = (_fix_edits(diagnostics, sources, targets, run, facts, use_cache=not no_cache,
                                computed=analysed_edits)
                     if facts is not None else None)
            _report(diagnostics, sources, run.settings, show_statistics, file=out, edits=edits)
        if run.settings.output_format in TEXT_FORMATS and not show_statistics and not quiet and not silent:
            _emit(check_summary(diagnostics, run.settings.unsafe_fixes, counts.get("fix_total"), show_fixes,
                                # (not "All checks passed!" over an error)
                                with_counts=bool(diagnostics or not problems), color=_use_color() and out is None),
                  file=out)
    finally:
        if out is not None:
            out.close()
    for problem in problems:
        click.echo(f"torchlint: error: {problem}", err=True)
    if not targets and not problems and not run.reads_stdin:
        click.echo("torchlint: warning: no Python files found", err=True)
    raise click.exceptions.Exit(_exit_code(diagnostics, problems, exit_zero))


# -- fixes listed, and their edits (JSON) ----------------------------------------


def _fix_edits(diagnostics: Sequence[Diagnostic], sources: Dict[str, str], targets: Sequence[Target], run: Run,
               facts: Dict[str, dict], use_cache: bool = False,
               computed: Optional[Dict[str, dict]] = None) -> Dict[Tuple, list]:
    """The edits of each fixable diagnostic (JSON's ``fix.edits``): what applying
    only its fix changes, in the diagnostic's own coordinates (a notebook's cell).
    A Python file's text is the one checked (``sources``, standard input too);
    a notebook is read again for its JSON.  With ``use_cache``, a file's edits
    are kept in the result cache under its text and facts.  ``computed``: the
    edits the check's analyses gave already, by file (``check_files``'
    ``edits_out``); the other files are analysed again here."""
    from torchlint import fix_edits
    from torchlint.cache import Cache
    from torchlint.project import facts_digest

    stores: Dict[int, Cache] = {}

    by_display = {t.display: t for t in targets}
    wanted = sorted({d.path for d in diagnostics if d.fix is not None and d.code})
    out: Dict[Tuple, list] = {}
    for display in wanted:
        target = by_display.get(display)
        if target is None:
            continue
        text = input_for(display, target.path).edit_text(sources)
        if text is None:
            continue
        profile = target.profile or run.profile(target.path)
        store = None
        if use_cache and target.path is not None:
            store = stores.get(id(profile))
            if store is None:
                store = stores[id(profile)] = Cache.for_run(profile.settings, profile.codes)
        digest = f"{text_hash(text)}#{facts_digest((facts.get(display) or {}).get('frequency', {}))}"
        cached = store.get_edits(display, digest) if store is not None else None
        if cached is not None:
            out.update({tuple(k): v for k, v in cached})
            continue
        found = (computed or {}).get(display)
        if found is None:
            found = fix_edits.for_file(text, display, profile.settings, profile.codes, facts.get(display))
        out.update(found)
        if store is not None:
            store.put_edits(display, digest, [[list(k), v] for k, v in found.items()])
    for store in stores.values():
        store.save()
    return out


# -- --show-settings and --add-noqa --------------------------------------------


def _show_settings(run: Run, targets: List[Target], problems: List[str]) -> None:
    """Ruff's ``--show-settings``: the resolved settings of the first file."""
    from torchlint.settings_view import render

    for problem in problems:
        click.echo(f"torchlint: error: {problem}", err=True)
    target = targets[0] if targets else None
    profile = (target.profile or run.profile(target.path)) if target is not None else run.resolver.run_profile
    _emit(render(target.display if target is not None else None, profile, run.resolver.overrides))
    raise click.exceptions.Exit(EXIT_ERROR if problems else EXIT_OK)


def _add_noqa(run: Run, targets: List[Target], problems: List[str], use_cache: bool) -> None:
    """``check --add-noqa``: a ``# noqa`` for every finding, in the files themselves."""
    from torchlint.threads import on_large_stack

    if run.reads_stdin:
        raise _fail("--add-noqa edits files in place; it cannot read standard input")
    facts = _project_facts(targets, run, use_cache)
    added, errors = on_large_stack(_add_noqa_all, targets, run, facts)
    for problem in [*errors, *problems]:
        click.echo(f"torchlint: error: {problem}", err=True)
    click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
    raise click.exceptions.Exit(EXIT_ERROR if errors or problems else EXIT_OK)


def _still_parses(before: str, after: str) -> bool:
    """Whether ``after`` parses as Python when ``before`` did."""
    import ast
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for text in (before, after):
            try:
                ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                if text is before:
                    return True  # nothing to compare with
                return False
    return True


def _add_noqa_all(targets: List[Target], run: Run, facts: Dict[str, dict]) -> Tuple[int, List[str]]:
    from torchlint.engine import UNUSED_NOQA, lint_text
    from torchlint.noqa import add_noqa
    from torchlint.notebook import NotebookError

    added, errors = 0, []
    for target in targets:
        profile = target.profile or run.profile(target.path)
        item = input_for(target.display, target.path)
        try:
            source = item.read()
            program = item.program(source.text)
        except (SourceError, NotebookError) as exc:
            errors.append(f"{target.display}: {exc}")
            continue
        found = lint_text(program, target.display, profile.settings, profile.codes,
                          project=facts.get(target.display)).diagnostics
        wanted: Dict[int, set] = {}
        for d in found:
            if d.kind is Kind.RULE and d.code and d.code != UNUSED_NOQA:
                wanted.setdefault(d.line, set()).add(d.code)
        new_program, count = add_noqa(program, wanted)
        if not count:
            continue
        if not _still_parses(program, new_program):  # never expected: a comment where none can go
            errors.append(f"{target.display}: the `# noqa` comments would not parse; nothing was written")
            continue
        text = item.with_program(source.text, new_program)
        if text is None:
            errors.append(f"{target.display}: the comments do not fit the notebook's cells; nothing was written")
            continue
        try:
            item.write(source, text)
        except (OSError, UnicodeEncodeError) as exc:
            errors.append(f"{target.display}: cannot write: {exc}")
            continue
        added += count
    return added, errors


# -- the baseline (torchlint/baseline.py) --------------------------------------


def _load_baseline(path: Optional[str], update: bool):
    if path is None:
        return None
    from torchlint.baseline import Baseline, BaselineError

    try:
        baseline = Baseline.load(path)
    except BaselineError as exc:
        raise _fail(str(exc)) from None
    if not baseline.exists and not update:
        raise _fail(f"baseline {path} does not exist; write it with `--baseline {path} --update-baseline`")
    return baseline


def _apply_baseline(baseline, diagnostics, sources, targets, update: bool, counts: Dict[str, int]):
    """The findings to report: those not in the baseline.  With ``update``,
    writes the baseline first (see torchlint/baseline.py for the ratchet)."""
    from torchlint.baseline import BaselineError

    if update:
        created = not baseline.exists
        baseline = baseline.updated(diagnostics, sources, [t.display for t in targets])
        try:
            baseline.save()
        except BaselineError as exc:
            raise _fail(str(exc)) from None
        n = len(baseline.entries)
        verb = "wrote" if created else "updated"
        click.echo(f"torchlint: {verb} baseline {baseline.path} ({n} finding{'s' if n != 1 else ''})", err=True)
    new, old = baseline.match(diagnostics, sources)
    if old:
        counts.pop("fix_total", None)  # counted over every finding; recounted from what is shown
        click.echo(
            f"torchlint: {len(old)} finding{'s' if len(old) != 1 else ''} in the baseline not shown", err=True
        )
    return new


# -- speed: the result cache and worker processes (torchlint/parallel.py) --------


def _check_all(
    targets: List[Target], run: Run, jobs: Optional[int] = 1, use_cache: bool = False,
    stats: Optional[Dict[str, int]] = None,
    warnings: Optional[List[str]] = None,
    facts_out: Optional[Dict[str, dict]] = None,
    edits_out: Optional[Dict[str, dict]] = None,
) -> Tuple[List[Diagnostic], Dict[str, str]]:
    """Diagnostics (sorted by path and position) and the texts of the files that have some.

    Cached results are used when ``use_cache``; the files left are analysed
    by ``jobs`` worker processes (None: one per CPU) when there are enough.
    """
    from torchlint.parallel import check_files, default_jobs

    bar: list = []
    try:
        return check_files(
            [(t.display, t.path, t.profile or run.profile(t.path)) for t in targets],
            jobs=default_jobs() if jobs is None else jobs, use_cache=use_cache,
            progress=_progress(run, bar), stats=stats, warnings=warnings, facts_out=facts_out,
            edits_out=edits_out, walked=_walked(targets), configs=run.configs,
        )
    finally:
        for b in bar:
            b.close()


def _progress(run: Run, bar: list):
    """The progress callback of a run of ``n`` files (on a terminal, for many files)."""
    from torchlint.parallel import PROGRESS_MIN_FILES, TerminalProgress
    from torchlint.reporters import TEXT_FORMATS

    def progress(n: int):
        if n >= PROGRESS_MIN_FILES and run.settings.output_format in TEXT_FORMATS and sys.stderr.isatty():
            bar.append(TerminalProgress())
            return bar[0]
        return None

    return progress


# -- end of speed --------------------------------------------------------------


def _exit_code(diagnostics: Sequence[Diagnostic], problems: Sequence[str], exit_zero: bool) -> int:
    if problems or any(d.kind is Kind.INTERNAL_ERROR for d in diagnostics):
        return EXIT_ERROR
    if diagnostics and not exit_zero:
        return EXIT_FINDINGS
    return EXIT_OK


@main.command()
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="Use this configuration file for every document (default: each file's nearest).")
def server(config) -> None:
    """Run the language server (LSP over standard input/output) for editors.

    Needs pygls: `pip install pygls` (or the `server` extra).
    """
    try:
        import pygls  # noqa: F401
    except ImportError:
        raise _fail("`torchlint server` needs pygls: pip install 'pygls>=2'") from None
    from torchlint.server import serve

    serve(Path(config) if config else None)


@main.command()
@_common_options
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes for large runs (default: the number of CPUs; 1: none).")
@_UNSAFE_FIXES_OPTION
@click.option("--diff", is_flag=True, help="Print a unified diff of the fixes and write nothing.")
@click.option("--fix-only", is_flag=True,
              help="Apply fixes but do not report the findings that remain (exit 0 unless --exit-non-zero-on-fix).")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="Exit with 1 when any file was changed.")
@click.option("--show-fixes/--no-show-fixes", default=True, show_default=True,
              help="List the fixes applied per file and rule.")
@click.option("--verify", "verify_script", default=None, metavar="SCRIPT",
              help="Fix SCRIPT's project, keeping only the fixes that keep the results of running it "
              "(PATHS are then SCRIPT's arguments; needs PyTorch; see `torchlint verify`).")
@_program_options
def fix(paths, select, ignore, extend_select, config, exclude, extend_exclude, output_format, target_torch,
        stdin_filename, force_exclude, show_statistics, exit_zero, no_cache, jobs, unsafe_fixes, diff,
        fix_only, exit_non_zero_on_fix, show_fixes, verify_script, steps, warmup, timeout, rtol, atol) -> None:
    """Apply fixes to PATHS (default: the current directory), then report what remains.

    Safe fixes only, unless --unsafe-fixes.  Use `-` to fix standard input
    (the fixed code goes to standard output).  The same as `check --fix`.
    `fix --verify train.py [--steps N] [-- ARGS]` runs the program with the
    fixes and applies only those that keep its results.
    """
    if verify_script is not None:
        if diff or stdin_filename or force_exclude:
            raise _fail("--verify cannot be combined with --diff, --stdin-filename or --force-exclude")
        _fix_verified(verify_script, paths, select, ignore, config, unsafe_fixes, steps, warmup, timeout, rtol, atol)
    run = _prepare(paths, select, ignore, extend_select, config, output_format, target_torch,
                   stdin_filename, force_exclude, unsafe_fixes, exclude, extend_exclude)
    _run_fixes(run, diff, show_statistics, exit_zero, fix_only, exit_non_zero_on_fix, use_cache=not no_cache,
               show_fixes=show_fixes, jobs=jobs)


def _run_fixes(run: Run, diff: bool, show_statistics: bool, exit_zero: bool, fix_only: bool = False,
               exit_non_zero_on_fix: bool = False, use_cache: bool = True, show_fixes: bool = False,
               jobs: Optional[int] = None) -> None:
    """`fix`, `check --fix`, `check --fix-only` and `check --diff`."""
    from torchlint.parallel import DIFF, FIX, FIX_ONLY

    unsafe = run.settings.unsafe_fixes
    targets, problems = _targets(run)
    remaining: List[Diagnostic] = []
    sources: Dict[str, str] = {}
    fixed: Dict[str, Counter] = {}
    warnings: List[str] = []
    facts: Dict[str, dict] = {}
    mode = DIFF if diff else FIX_ONLY if fix_only else FIX
    changed_files = _fix_all(targets, run, mode, jobs, use_cache, remaining, sources, fixed, warnings, facts)
    changed, last, passes = changed_files, fixed, 1
    while mode != DIFF and changed and passes < _FIX_PASSES and _fixed_for_other_files(last, targets, run):
        # A fix that can make another possible was written (`pin_memory=True` on a
        # loader): the project index's facts about the other files came from the
        # texts before it (the copies of that loader's batches in another module),
        # so the files are fixed again, until a pass changes nothing.
        last, remaining, sources, facts_again = {}, [], {}, {}
        changed = _fix_all(targets, run, mode, jobs, use_cache, remaining, sources, last, warnings, facts_again)
        warnings[:] = list(dict.fromkeys(warnings))
        facts.update(facts_again)
        for display, counts in last.items():
            fixed[display] = fixed.get(display, Counter()) + counts
        changed_files += changed
        passes += 1
    remaining.sort(key=Diagnostic.sort_key)
    _warn(warnings)
    left = remaining  # what the summary counts (the unsafe fixes not applied)
    if fix_only:  # Ruff's --fix-only: the findings left are neither printed nor counted
        remaining = [d for d in remaining if d.kind is not Kind.RULE]

    to_stderr = diff or run.reads_stdin
    from torchlint.reporters import TEXT_FORMATS, fix_run_summary

    if not diff:
        edits = (_fix_edits(remaining, sources, targets, run, facts)
                 if run.settings.output_format == "json" else None)  # of the fixes not applied
        _report(remaining, sources, run.settings, show_statistics, err=run.reads_stdin, edits=edits)
    if run.settings.output_format in TEXT_FORMATS or to_stderr:
        err = to_stderr or run.settings.output_format not in TEXT_FORMATS
        color = _use_color(err)
        _emit(fix_run_summary(fixed, remaining, left, unsafe, mode, show_fixes, color), err=err, color=color)
    for problem in problems:
        click.echo(f"torchlint: error: {problem}", err=True)
    if diff:
        code = EXIT_ERROR if problems else (EXIT_FINDINGS if changed_files else EXIT_OK)
        raise click.exceptions.Exit(code)
    code = _exit_code(remaining, problems, exit_zero)
    if code == EXIT_OK and exit_non_zero_on_fix and changed_files:
        code = EXIT_FINDINGS
    raise click.exceptions.Exit(code)


# How many times `fix` goes over the files at most (see `_fixed_for_other_files`).
_FIX_PASSES = 3


def _fixed_for_other_files(fixed: Dict[str, Counter], targets: List[Target], run: Run) -> bool:
    """Whether a pass's fixes (``fixed``) include one whose rule can make an
    enabled rule's fix possible (``parallel.fixes_enabling``: ``Rule.fix_enables``),
    in a run of several files the project index reads: the index's facts about
    the other files may have changed with it."""
    from torchlint.parallel import fixes_enabling

    indexed = [t for t in targets if t.path is not None and input_for(t.display, t.path).indexed]
    if len(indexed) < 2:
        return False
    profiles = {t.profile or run.profile(t.path) for t in indexed}
    enabling = frozenset().union(*(fixes_enabling(tuple(p.codes)) for p in profiles))
    return any(code in enabling for counts in fixed.values() for code in counts)


def _project_facts(targets: List[Target], run: Run, use_cache: bool) -> Dict[str, dict]:
    """What the project index establishes about each file (torchlint/project.py),
    so that `fix` reports and fixes what `check` does: a check of the files
    (from the cache when it is warm) that keeps the index's facts."""
    files = [t for t in targets if t.path is not None and input_for(t.display, t.path).indexed]
    if len(files) < 2:
        return {}
    facts: Dict[str, dict] = {}
    _check_all(files, run, None, use_cache=use_cache, facts_out=facts)
    return facts


def _fix_all(targets: List[Target], run: Run, mode: str, jobs: Optional[int], use_cache: bool,
             remaining: List[Diagnostic], sources: Dict[str, str], fixed: Dict[str, Counter],
             warnings: List[str], facts: Dict[str, dict]) -> int:
    """Fix every target through the run's one path (``parallel.process_files``:
    the cache, the worker pool, the project index), then, in the targets'
    order, show each diff or write each fixed file (standard input: the fixed
    text on standard output).  Returns the number of changed files; the rest
    is collected in ``remaining``, ``sources``, ``fixed`` and ``warnings``
    (the warnings about suppression comments in the fixed texts), and the
    index's facts in ``facts``."""
    from torchlint.parallel import Task, default_jobs, process_files
    from torchlint.threads import on_large_stack

    bar: list = []
    try:
        results = process_files(
            [(t.display, t.path, t.profile or run.profile(t.path)) for t in targets],
            task=Task(mode, bool(run.settings.unsafe_fixes)), jobs=default_jobs() if jobs is None else jobs,
            use_cache=use_cache, progress=_progress(run, bar), facts_out=facts, walked=_walked(targets),
            configs=run.configs,
        )
    finally:
        for b in bar:
            b.close()
    # On the large-stack thread, as the files' analysis: Ctrl-C then stops the
    # writes between two files (the one being written is finished).
    return on_large_stack(_write_fixes, targets, results, mode, remaining, sources, fixed, warnings)


def _write_fixes(targets: List[Target], results, mode: str, remaining: List[Diagnostic], sources: Dict[str, str],
                 fixed: Dict[str, Counter], warnings: List[str]) -> int:
    """Each file's fix, in the targets' order: its diff shown, or the file written
    (standard input: the fixed text printed); the number of changed files."""
    from torchlint.parallel import DIFF
    from torchlint.screen import internal_error
    from torchlint.threads import CANCELLED

    by_display = {r.display: r for r in results}
    diff = mode == DIFF
    changed_files = 0
    for target in targets:
        if CANCELLED.is_set():
            break
        result = by_display.get(target.display)
        if result is None:
            continue
        if result.fix is None:  # nothing to fix: what the check found remains
            warnings.extend(result.warnings)
            remaining.extend(result.diagnostics)
            if result.diagnostics and result.sources:
                sources.update(result.sources)
            continue
        source, done = result.fix.source, result.fix.fixed
        warnings.extend(done.warnings)
        remaining.extend(done.remaining)
        remaining.extend(done.errors)
        if done.remaining or done.errors:
            sources.update(done.sources)
        if done.applied:
            fixed[target.display] = done.applied
        if target.path is None:
            _emit(done.diff_text if diff else done.text)
            changed_files += result.fix.changed
            continue
        if not result.fix.changed:
            continue
        changed_files += 1
        if diff:
            _emit(done.diff_text)
            continue
        try:
            input_for(target.display, target.path).write(source, done.text)
        except (OSError, UnicodeEncodeError) as exc:
            remaining.append(internal_error(target.display, f"cannot write the fixed file: {exc}"))
    return changed_files


@main.command()
@click.argument("code", required=False)
@click.option("--all", "show_all", is_flag=True, help="List every rule.")
@click.option("--output-format", type=click.Choice(("text", "json")), default="text", show_default=True)
@_COLOR_OPTION
def rule(code: Optional[str], show_all: bool, output_format: str) -> None:
    """Show the documentation of the rule CODE (a code such as TL201 or a name
    such as create-then-move), or list all rules with --all."""
    import json

    from torchlint.docs import rule_section, state
    from torchlint.registry import all_rules

    rules = all_rules()

    def as_json(c: str, r) -> dict:
        return {"code": c, "name": r.name, "summary": r.summary or r.name, "default": r.default,
                "state": state(r), "fix": r.fix.value, "explanation": r.documentation()}

    if show_all:
        if output_format == "json":
            click.echo(json.dumps([as_json(c, r) for c, r in rules.items()], indent=2))
            return
        rows = [("Code", "Name", "Default", "Fix")]
        for c, r in rules.items():
            rows.append((c, r.name, state(r), r.fix.value))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        color = _use_color()
        for number, row in enumerate(rows):
            line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
            click.echo(click.style(line, bold=True) if color and number == 0 else line, color=color)
        return
    if code is None:
        raise _fail("give a rule code or name (e.g. `torchlint rule TL101`) or --all")
    wanted = code.strip()
    by_name = {r.name: c for c, r in rules.items()}
    found = wanted.upper() if wanted.upper() in rules else by_name.get(wanted.lower())
    if found is None:
        raise _fail(f"unknown rule `{wanted}` (see `torchlint rule --all`)")
    if output_format == "json":
        click.echo(json.dumps(as_json(found, rules[found]), indent=2))
        return
    text = rule_section(rules[found], level=1)
    color = _use_color()
    click.echo(_bold_headings(text) if color else text, nl=False, color=color)


def _bold_headings(markdown: str) -> str:
    """Markdown with its headings (not a code block's comments) in bold."""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = click.style(line, bold=True)
        out.append(line)
    return "\n".join(out)


def _is_program(target: Sequence[str]) -> bool:
    return bool(target) and "::" not in target[0] and target[0].endswith(".py")


def _program_files(script: str, select, ignore, config, unsafe_fixes):
    """(the script's settings, the project's modules): the tree of the script's
    configuration file, or the script's directory when it has none."""
    from torchlint import verify as verifier
    from torchlint.verify.program import ProjectFile

    if not verifier.torch_available():
        raise _fail(verifier.TORCH_MISSING)
    path = Path(script)
    if not path.is_file():
        raise _fail(f"{script}: no such file" if not path.exists() else f"{script}: not a file")
    run = _prepare([script], select, ignore, (), config, None, None, None, False, unsafe_fixes)
    try:
        profile = run.profile(path)
    except ConfigError as exc:
        raise _fail(str(exc)) from None
    settings = profile.settings
    root = settings.root if settings.config_path is not None else path.resolve().parent
    project = _prepare([str(root)], select, ignore, (), config, None, None, None, False, unsafe_fixes)
    targets, _ = _targets(project)
    targets = [t for t in targets if t.path is not None and input_for(t.display, t.path).indexed]
    if not any(t.path.resolve() == path.resolve() for t in targets):  # an excluded script is still run
        targets.append(Target(_display(path), path, profile))
    facts = _project_facts(targets, project, use_cache=True)
    files = [ProjectFile(t.path.resolve(), t.display, (t.profile or profile).settings, (t.profile or profile).codes,
                         facts.get(t.display)) for t in targets]
    return settings, files


def _fix_verified(script, args, select, ignore, config, unsafe_fixes, steps, warmup, timeout, rtol, atol) -> None:
    from torchlint.verify import TerminalProgress, UsageError
    from torchlint.verify.program import ProgramOptions, fix_verified
    from torchlint.verify.program_report import fix_exit_status, format_fix_verified

    if (rtol is None) != (atol is None):
        raise _fail("give both --rtol and --atol, or neither (torch.testing.assert_close needs both)")
    settings, files = _program_files(script, select, ignore, config, unsafe_fixes)
    options = ProgramOptions(steps=steps, warmup=warmup, rtol=rtol, atol=atol, timeout=timeout,
                             unsafe=settings.unsafe_fixes)
    progress = TerminalProgress() if sys.stderr.isatty() else None
    try:
        report = fix_verified(Path(script), list(args), files, options, progress)
    except UsageError as exc:
        raise _fail(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()
    _emit(format_fix_verified(report))
    raise click.exceptions.Exit(fix_exit_status(report))


@main.command()
@click.argument("target", nargs=-1)
@click.option("--rules", "rule_mode", is_flag=True,
              help="Run the benchmark of each fixable rule (or of the CODES given) instead of a TARGET.")
@click.option("--select", multiple=True, metavar="CODES", help="Rules whose fixes to verify (default: the configured selection).")
@click.option("--ignore", multiple=True, metavar="CODES", help="Rules whose fixes to leave out.")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help="Use this pyproject.toml or torchlint.toml instead of the nearest one.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", "unsafe_fixes", default=None,
              help="Also verify fixes that may change behaviour.")
@click.option("--each", is_flag=True, help="Also measure every fix on its own (the original plus only that fix).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance of the comparison (with --atol).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance of the comparison (with --rtol).")
@click.option("--min-run-time", type=click.FloatRange(min=0, min_open=True), default=0.2, show_default=True,
              help="Seconds of measurement per version (Timer.blocked_autorange).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
              help="Seconds allowed for each step (an import, a call, a timing) before the run is stopped; "
              "in program mode, for each run of the program.")
@click.option("--output-format", type=click.Choice(("table", "json")), default="table", show_default=True)
@partial(_program_options, tolerances=False)
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Program mode: runs of each version, alternated (original, fixed, original, ...), "
              "whose step times are pooled.")
def verify(target, rule_mode, select, ignore, config, unsafe_fixes, each, rtol, atol,
           min_run_time, timeout, output_format, steps, warmup, rounds) -> None:
    """Check that fixes keep results and measure their speedup (needs PyTorch).

    `torchlint verify path/to/module.py::function` runs the zero-argument
    function as written and as fixed, compares the results and times both.
    `torchlint verify train.py --steps N [-- ARGS]` runs the program as
    written and with the fixes of its project's modules, and compares the
    losses of its first steps.
    `torchlint verify --rules [CODES]` runs the rules' own benchmarks.
    Exit status: 0 verified, 1 a mismatch, an error or a timeout, 2 usage error.
    """
    from torchlint import verify as verifier

    if not verifier.torch_available():
        raise _fail(verifier.TORCH_MISSING)
    if (rtol is None) != (atol is None):
        raise _fail("give both --rtol and --atol, or neither (torch.testing.assert_close needs both)")
    if not rule_mode and _is_program(target):
        _verify_program(target, select, ignore, config, unsafe_fixes, each, rtol, atol, timeout,
                        output_format, steps, warmup, rounds)
    progress = verifier.TerminalProgress() if sys.stderr.isatty() else None
    try:
        if rule_mode:
            if select or ignore or each:
                raise verifier.UsageError("--select, --ignore and --each do not apply to --rules")
            report = verifier.verify_rules(_split_codes(target), min_run_time=min_run_time,
                                           timeout=timeout, progress=progress)
        else:
            if len(target) != 1:
                raise verifier.UsageError("give one `path/to/module.py::function` (or --rules)")
            path = target[0].rsplit("::", 1)[0]
            run = _prepare([path] if os.path.exists(path) else [], select, ignore, (), config, None, None,
                           None, False, unsafe_fixes)
            try:  # the module's own configuration, as `check` would use for it
                profile = run.profile(Path(path)) if os.path.exists(path) else run.resolver.run_profile
            except ConfigError as exc:
                raise _fail(str(exc)) from None
            options = verifier.EntryOptions(
                unsafe=bool(profile.settings.unsafe_fixes), each=each, rtol=rtol, atol=atol,
                min_run_time=min_run_time, timeout=timeout,
            )
            report = verifier.verify_entry(target[0], profile.settings, profile.codes, options, progress)
            if report.get("usage_error") and output_format == "table":
                raise verifier.UsageError(f"{target[0]}: {report['error']}")
    except verifier.UsageError as exc:
        if progress is not None:
            progress.close()
        raise _fail(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()
    formatter = verifier.format_rules if rule_mode else verifier.format_entry
    _emit(formatter(report, output_format))
    raise click.exceptions.Exit(verifier.exit_status(report))


def _verify_program(target, select, ignore, config, unsafe_fixes, each, rtol, atol, timeout,
                    output_format, steps, warmup, rounds) -> None:
    from torchlint.verify import TerminalProgress, UsageError
    from torchlint.verify.program import ProgramOptions, verify_program
    from torchlint.verify.program_report import format_program, program_exit_status

    settings, files = _program_files(target[0], select, ignore, config, unsafe_fixes)
    options = ProgramOptions(steps=steps, warmup=warmup, each=each, rtol=rtol, atol=atol, timeout=timeout,
                             unsafe=settings.unsafe_fixes, rounds=rounds)
    progress = TerminalProgress() if sys.stderr.isatty() else None
    try:
        report = verify_program(Path(target[0]), list(target[1:]), files, options, progress)
    except UsageError as exc:
        raise _fail(str(exc)) from None
    finally:
        if progress is not None:
            progress.close()
    _emit(format_program(report, output_format))
    raise click.exceptions.Exit(program_exit_status(report))


if __name__ == "__main__":  # pragma: no cover
    main()
