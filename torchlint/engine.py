"""Linting and fixing one source text: parse once, walk once, report, rewrite.

The large-stack thread these run on is ``torchlint.threads``; the screening
before the parse and the engine's own diagnostics (syntax and internal errors)
are ``torchlint.screen``.  Both are re-exported here for library callers.
"""

from __future__ import annotations

import ast
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import libcst as cst

from torchlint.config import Settings
from torchlint.model import Applicability, Diagnostic, Finding, FixInfo
from torchlint.noqa import NoqaWarning, Suppressions, parse_suppressions
from torchlint.parsing import parse_module
from torchlint.positions import Positions, every_child, paths_to
from torchlint.registry import all_rules, project_hooks
from torchlint.rule import Context
from torchlint.screen import (  # noqa: F401 - re-exported for library callers
    DEEP_BRACKETS,
    UNUSED_NOQA,
    codes_for_path,
    could_concern_torch,
    crashed,
    explain_syntax_error,
    internal_error,
    many_operators,
    refused_by_python,
    syntax_error,
)
from torchlint.threads import CANCELLED, on_large_stack  # noqa: F401 - re-exported
from torchlint.walker import Walker

MAX_FIX_ROUNDS = 10


@dataclass
class LintResult:
    diagnostics: List[Diagnostic]
    module: Optional[cst.Module] = None
    findings: List[Finding] = field(default_factory=list)
    positions: Optional[Positions] = None
    """The positions of the findings' nodes (others computed when asked: ``Positions``)."""
    warnings: List[NoqaWarning] = field(default_factory=list)
    """Suppression comments that do not do what they seem to (see torchlint.noqa)."""
    pending: List[str] = field(default_factory=list)
    """Functions whose frequency the module alone does not show (``Context.pending``)."""
    calls: Any = None
    """The module's calls, collected during the walk (the rules' ``CallCollector``): what
    they can reach tells the project index, without a second parse, that this file
    calls no function asked about (``PythonInput.analyse`` makes the summary)."""


def lint_text(text: str, path: str, settings: Settings, codes: Sequence[str],
              project: Optional[Dict[str, Any]] = None,
              parse: Optional[Callable[[str], cst.Module]] = None) -> LintResult:
    """Every diagnostic of the enabled rules ``codes`` for one source text;
    ``project``: what other modules of the run establish about it
    (``torchlint.project``); ``parse``: how to parse the text, instead of
    ``libcst.parse_module`` (the editor's incremental parse: the same module,
    raising the same errors)."""
    if not codes or not could_concern_torch(text, codes):
        return LintResult([])
    return on_large_stack(_lint_text, text, path, settings, codes, project, parse)


def _lint_text(text: str, path: str, settings: Settings, codes: Sequence[str],
               project: Optional[Dict[str, Any]] = None,
               parse: Optional[Callable[[str], cst.Module]] = None) -> LintResult:
    # The callers (lint_text, fix_text) have already applied the textual pre-filter.
    suppressions = parse_suppressions(text)
    result = _lint_suppressed(text, path, settings, codes, suppressions, project, parse)
    result.warnings = suppressions.warnings
    return result


def _lint_suppressed(
    text: str, path: str, settings: Settings, codes: Sequence[str], suppressions: Suppressions,
    project: Optional[Dict[str, Any]] = None, parse: Optional[Callable[[str], cst.Module]] = None,
) -> LintResult:
    if suppressions.whole_file:
        return LintResult([])
    codes = [c for c in codes if c not in suppressions.file]
    codes = codes_for_path(path, settings, codes)
    if not codes:
        return LintResult([])
    if DEEP_BRACKETS.search(text) or many_operators(text):
        refused = refused_by_python(text, path)
        if refused is not None:
            return LintResult([refused])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = (parse or parse_module)(text)
    except cst.ParserSyntaxError as exc:
        return LintResult([explain_syntax_error(text, path, exc)])
    except RecursionError:
        return LintResult([internal_error(path, "the file is too deeply nested to analyse")])

    registry = all_rules()
    context = Context(path, text, settings)
    if project:
        context.project = project
    # A file that never says `torch` is read only for TL001 (`could_concern_torch`):
    # no other rule runs there, and TL001 judges its comments against the
    # enabled codes all the same (each of them is then unused).
    running = codes if "torch" in text else [c for c in codes if c == UNUSED_NOQA]
    rules = [registry[code](context) for code in running]
    calls = project_hooks().CallCollector()
    try:
        Walker(context, [*rules, calls]).run(module)
    except RecursionError:
        return LintResult([internal_error(path, "the file is too deeply nested to analyse")])
    pending = sorted(context.pending)
    if not context.findings and (UNUSED_NOQA not in codes or not suppressions.directives):
        return LintResult([], module, pending=pending, calls=calls)

    positions = Positions(module, text)
    never = _never_run(module, project)
    positions.prepare([*(n for f in context.findings for n in (f.node, f.via)), *never], context.paths)
    spans = [(positions[n][0][0], positions[n][1][0]) for n in never]
    kept: List[Finding] = []
    diagnostics: List[Diagnostic] = []
    seen = set()
    for finding in context.findings:
        (line, column), (end_line, end_column) = positions[finding.node]
        column += 1
        if suppressions.suppresses(finding.code, line):
            continue
        if spans and any(start <= line <= end for start, end in spans):
            continue  # in code that nothing in the project runs (after the noqa check: the comment is used)
        key = (finding.code, line, column)
        if key in seen:  # one report per rule and position
            continue
        seen.add(key)
        fix_info = None
        if finding.fix is not None:
            fix_info = FixInfo(finding.fix.applicability, finding.fix.message)
        via = finding.via
        if isinstance(via, cst.CSTNode):
            span = positions.get(via)
            via = f"{path}:{span[0][0]}" if span is not None else None
        diagnostic = Diagnostic(
            path, line, column, end_line, end_column + 1, finding.message,
            code=finding.code, name=finding.name, fix=fix_info, runs=finding.runs, via=via,
        )
        finding.diagnostic = diagnostic
        kept.append(finding)
        diagnostics.append(diagnostic)
    if UNUSED_NOQA in codes:
        for finding in _unused_noqa(module, positions, suppressions, codes):
            (line, column), (end_line, end_column) = positions[finding.node]
            if suppressions.suppresses(UNUSED_NOQA, line):
                continue
            assert finding.fix is not None
            finding.diagnostic = Diagnostic(
                path, line, column + 1, end_line, end_column + 1, finding.message, code=finding.code,
                name=finding.name, fix=FixInfo(finding.fix.applicability, finding.fix.message),
            )
            kept.append(finding)
            diagnostics.append(finding.diagnostic)
    diagnostics.sort(key=Diagnostic.sort_key)
    return LintResult(diagnostics, module, kept, positions, pending=pending, calls=calls)


def _never_run(module: cst.Module, project: Optional[Dict[str, Any]]) -> List[cst.CSTNode]:
    """The module's definitions that nothing in the project runs, when the
    project index said which of its names no other file mentions
    (``torchlint.project.UNREFERENCED``)."""
    from torchlint.project import UNREFERENCED, WHOLE_MODULE

    fact = ((project or {}).get("frequency") or {}).get(UNREFERENCED)
    if not fact:
        return []
    if fact[1] == WHOLE_MODULE:  # no other file imports or names the module: none of it runs
        return list(module.body)
    return project_hooks().never_run(module, fact[1].split())


# -- TL001: `# noqa` codes that suppress nothing -----------------------------------


class _Comments(cst.CSTVisitor):
    """Every comment with the node that holds it (a line's trailing whitespace or an empty line)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: List[Tuple[cst.Comment, cst.CSTNode]] = []

    def visit_TrailingWhitespace(self, node: cst.TrailingWhitespace) -> None:
        if node.comment is not None:
            self.found.append((node.comment, node))

    def visit_EmptyLine(self, node: cst.EmptyLine) -> None:
        if node.comment is not None:
            self.found.append((node.comment, node))


def _unused_noqa(module: cst.Module, positions: Positions, suppressions: Suppressions,
                 codes: Sequence[str]) -> List[Finding]:
    """TL001's findings: the line directives' torchlint codes that suppressed nothing."""
    from torchlint.model import Fix
    from torchlint.noqa import TORCHLINT_PREFIX, without_codes
    from torchlint.registry import all_codes

    known, enabled = set(all_codes()), set(codes)
    by_line = {d.line: d for d in suppressions.directives}
    if not by_line:
        return []
    visitor = _Comments()
    module.visit(visitor)
    positions.prepare(comment for comment, _ in visitor.found)
    rule = all_rules()[UNUSED_NOQA]
    findings: List[Finding] = []
    for comment, holder in visitor.found:
        directive = by_line.get(positions[comment][0][0])
        if directive is None or comment.value != directive.comment:
            continue
        groups: Dict[str, List[str]] = {"unused": [], "non-enabled": [], "unknown": []}
        for code in directive.codes:
            if not code.startswith(TORCHLINT_PREFIX) or (directive.line, code) in suppressions.used:
                continue
            kind = "unknown" if code not in known else "non-enabled" if code not in enabled else "unused"
            groups[kind].append(code)
        bad = [code for kind in groups.values() for code in kind]
        if not bad:
            continue
        detail = "; ".join(f"{kind}: {', '.join(f'`{c}`' for c in found)}" for kind, found in groups.items() if found)
        new_value = without_codes(comment.value, bad)
        fix = Fix(Applicability.SAFE, "Remove unused `noqa` directive" if not new_value
                  else f"Remove unused code{'s' if len(bad) != 1 else ''} from the `noqa` directive",
                  _removal(comment, holder, new_value), holder if not new_value else comment)
        findings.append(Finding(UNUSED_NOQA, rule.name, comment, f"Unused `noqa` directive ({detail})", fix))
    return findings


def _removal(comment: cst.Comment, holder: cst.CSTNode, new_value: str) -> Callable[[], object]:
    """The codemod of TL001's fix: the comment rewritten, or gone with the space before it."""
    def build():
        if new_value:
            return comment.with_changes(value=new_value)
        if isinstance(holder, cst.TrailingWhitespace):
            return holder.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
        return cst.RemoveFromParent()  # an empty line that held only the directive

    return build


# -- fixing -------------------------------------------------------------------


class _Replacer(cst.CSTTransformer):
    """Replaces the nodes of ``replacements`` (by id) and rebuilds only their
    ancestors: LibCST rebuilds (and validates again) every node a transformer
    descends into, and the rest of the tree stays the parsed one
    (``torchlint.parsing``: trees its validation would refuse)."""

    def __init__(self, replacements: Dict[int, object]) -> None:
        super().__init__()
        self.replacements = replacements
        self.ancestors: Optional[set] = None

    def on_visit(self, node) -> bool:  # type: ignore[override]
        if self.ancestors is None:
            self.ancestors = _ancestors(node, set(self.replacements))
        return id(node) in self.ancestors

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        replacement = self.replacements.get(id(original_node))
        return updated_node if replacement is None else replacement


def _ancestors(root: cst.CSTNode, targets: set) -> set:
    """The ids of the nodes under ``root`` (itself included) that hold one of ``targets``."""
    return {id(node) for path in paths_to(root, targets, every_child).values() for node in path[:-1]}


def _apply(module: cst.Module, edits: Sequence[Tuple[Finding, object]]) -> str:
    replacements = {}
    for finding, replacement in edits:
        assert finding.fix is not None
        target = finding.fix.target if finding.fix.target is not None else finding.node
        replacements[id(target)] = replacement
    return module.visit(_Replacer(replacements)).code


def _applied(module: cst.Module, edits: Sequence[Tuple[Finding, object]]) -> Optional[str]:
    """``_apply``, or None where LibCST refuses to rebuild a node the edits
    change (a statement of the valid Python its parser refuses, ``torchlint.parsing``)."""
    try:
        return _apply(module, edits)
    except (cst.CSTValidationError, TypeError):
        return None


def _valid(text: str, must_compile: bool) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parse_module(text)
            if must_compile:
                ast.parse(text)
    except (SyntaxError, cst.ParserSyntaxError, ValueError, RecursionError):
        return False
    return True


def _target_range(finding: Finding, positions) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    target = finding.fix.target if finding.fix.target is not None else finding.node
    return positions[target]


def _non_overlapping(findings: Sequence[Finding], positions) -> List[Finding]:
    ranked = sorted(findings, key=lambda f: _target_range(f, positions))
    chosen: List[Finding] = []
    last_end = (0, 0)
    for finding in ranked:
        start, end = _target_range(finding, positions)
        if start >= last_end:
            chosen.append(finding)
            last_end = max(last_end, end)
    return chosen


def _bad_fix(path: str, finding: Finding, what: str) -> Diagnostic:
    d = finding.diagnostic
    return internal_error(
        path,
        f"the fix for {finding.code} {what} and was not applied; please report this",
        d.line if d else 1,
        d.column if d else 1,
    )


@dataclass(frozen=True)
class AppliedFix:
    """One fix that ``fix_text`` applied.

    ``round`` counts the rewrites made before it: a round-0 fix was reported
    on the original text and its diagnostic's positions are there; a later
    round's fix was reported only once earlier fixes were in (TL204 after
    TL202's ``pin_memory=True``), and its positions are in that round's text.
    """

    round: int
    diagnostic: Diagnostic
    # The diagnostic's first line in the text ``fix_text`` was given (for a
    # later round's fix, mapped back through the earlier rounds' edits).
    original_line: int = 0

    @property
    def code(self) -> str:
        return self.diagnostic.code or ""


@dataclass
class FixResult:
    text: str
    applied: Counter
    remaining: List[Diagnostic]
    errors: List[Diagnostic]
    edits: List[AppliedFix] = field(default_factory=list)
    """Every applied fix, in the order of rounds, then of position."""
    warnings: List[NoqaWarning] = field(default_factory=list)
    """The suppression-comment warnings of the final text."""

    @property
    def fixed_count(self) -> int:
        return sum(self.applied.values())


def fix_text(
    text: str, path: str, settings: Settings, codes: Sequence[str], unsafe: bool,
    accept: Optional[Callable[[str], bool]] = None, project: Optional[Dict[str, Any]] = None,
    select: Optional[Callable[[str, int], bool]] = None,
) -> FixResult:
    """Apply fixes in rounds until nothing more changes (at most MAX_FIX_ROUNDS).

    ``accept``, if given, is asked about every fixed text (a notebook refuses
    edits of its masked magic lines and cell boundaries).  ``select``, if
    given, is asked about every fix by its rule code and its first line in
    ``text`` (for a later round's fix, mapped back through the earlier
    rounds' edits): only the fixes it accepts are applied (the verifier's
    subsets of a file's fixes).
    """
    if not codes or not could_concern_torch(text, codes):
        return FixResult(text, Counter(), [], [])
    return on_large_stack(_fix_text, text, path, settings, codes, unsafe, accept, project, select)


def _fix_text(
    text: str, path: str, settings: Settings, codes: Sequence[str], unsafe: bool,
    accept: Optional[Callable[[str], bool]] = None, project: Optional[Dict[str, Any]] = None,
    select: Optional[Callable[[str, int], bool]] = None,
) -> FixResult:
    """Apply fixes in rounds until nothing more changes (at most MAX_FIX_ROUNDS).

    Overlapping edits wait for the next round; a fix whose result does not parse
    is dropped, reported as an internal error, and its rule is not fixed again
    in this file.  A fix whose result ``accept`` refuses is dropped silently
    (its diagnostic remains) and its rule is not fixed again in this file.
    """
    allowed = _allowed(unsafe)
    original = text
    applied: Counter = Counter()
    edits_made: List[AppliedFix] = []
    errors: List[Diagnostic] = []
    disabled: set = set()
    must_compile: Optional[bool] = None
    result = _lint_text(text, path, settings, codes, project)
    for _ in range(MAX_FIX_ROUNDS):
        if result.module is None:
            break
        candidates = [
            f for f in result.findings
            if f.fix is not None and f.fix.applicability in allowed and f.code not in disabled
        ]
        if select is not None:
            where = _line_map(text, original)
            candidates = [
                f for f in candidates
                if f.diagnostic is not None and select(f.code, where(f.diagnostic.line))
            ]
        if not candidates:
            break
        if must_compile is None:
            must_compile = _valid(text, True)
        edits = []
        for finding in _non_overlapping(candidates, result.positions):
            try:
                edits.append((finding, finding.fix.build()))
            except Exception as exc:  # noqa: BLE001 - a broken codemod must not stop the run
                disabled.add(finding.code)
                errors.append(_bad_fix(path, finding, f"raised {type(exc).__name__}: {exc}"))
        if not edits:
            continue
        new_text = _applied(result.module, edits)
        accepted = new_text is not None and (accept is None or accept(new_text))
        if not accepted or not _valid(new_text, must_compile):
            good = []
            for edit in edits:
                single = _applied(result.module, [edit])
                if single is None or not _valid(single, must_compile):
                    disabled.add(edit[0].code)
                    errors.append(_bad_fix(path, edit[0], "would produce invalid code" if single is not None
                                           else "would change a statement LibCST cannot rebuild"))
                elif accept is not None and not accept(single):
                    disabled.add(edit[0].code)
                else:
                    good.append(edit)
            edits = good
            new_text = _applied(result.module, edits) if edits else text
            if new_text is None or edits and not (_valid(new_text, must_compile)
                                                  and (accept is None or accept(new_text))):
                errors.append(internal_error(path, "fixes conflicted and were not applied"))
                break
        chosen = [finding for finding, _ in edits]
        if new_text == text:
            if not chosen:
                continue
            break
        to_original = _line_map(text, original)
        text = new_text
        applied.update(f.code for f in chosen)
        rewrite = len({e.round for e in edits_made})
        edits_made.extend(
            AppliedFix(rewrite, f.diagnostic, to_original(f.diagnostic.line))
            for f in sorted(chosen, key=lambda f: f.diagnostic.sort_key())
            if f.diagnostic is not None
        )
        result = _lint_text(text, path, settings, codes, project)
    return FixResult(text, applied, result.diagnostics, errors, edits_made, result.warnings)


def _line_map(current: str, original: str) -> Callable[[int], int]:
    """Maps a line of ``current`` (a partly fixed text) to the line of ``original``
    it comes from: lines the fixes left alone map exactly, a line a fix wrote
    maps to the first line of what that fix replaced."""
    if current == original:
        return lambda line: line
    import difflib

    opcodes = difflib.SequenceMatcher(
        None, current.splitlines(), original.splitlines(), autojunk=False
    ).get_opcodes()

    def to_original(line: int) -> int:
        index = line - 1
        for tag, i1, i2, j1, _ in opcodes:
            if i1 <= index < i2:
                return j1 + (index - i1 if tag == "equal" else 0) + 1
        return line

    return to_original


def _allowed(unsafe: bool) -> set:
    return {Applicability.SAFE, Applicability.UNSAFE} if unsafe else {Applicability.SAFE}


def single_fixes(
    text: str, path: str, settings: Settings, codes: Sequence[str], unsafe: bool,
    project: Optional[Dict[str, Any]] = None,
) -> List[Tuple[Diagnostic, Optional[str]]]:
    """Each fixable diagnostic of ``text`` with the text that applying only its
    fix gives: ``None`` when that fix alone changes nothing, raises, or makes
    code that does not parse (``fix_text`` reports those itself)."""
    if not codes or not could_concern_torch(text, codes):
        return []
    return on_large_stack(_single_fixes, text, path, settings, codes, unsafe, project)


def _single_fixes(text, path, settings, codes, unsafe, project=None) -> List[Tuple[Diagnostic, Optional[str]]]:
    result = _lint_text(text, path, settings, codes, project)
    if result.module is None:
        return []
    allowed = _allowed(unsafe)
    must_compile = _valid(text, True)
    variants: List[Tuple[Diagnostic, Optional[str]]] = []
    for finding in result.findings:
        if finding.fix is None or finding.fix.applicability not in allowed or finding.diagnostic is None:
            continue
        try:
            single: Optional[str] = _apply(result.module, [(finding, finding.fix.build())])
        except Exception:  # noqa: BLE001 - a broken codemod is fix_text's to report
            single = None
        if single is not None and (single == text or not _valid(single, must_compile)):
            single = None
        variants.append((finding.diagnostic, single))
    variants.sort(key=lambda pair: pair[0].sort_key())
    return variants
