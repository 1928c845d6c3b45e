"""The rule base class and the per-file context handed to rules.

A rule is a class in ``torchlint.rules`` with a code, a kebab-case name, a
default state, a docstring (its documentation) and ``visit_<Node>`` /
``leave_<Node>`` methods named after LibCST node classes.  One instance is made
per file; every enabled rule is driven by a single walk of the syntax tree.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst

from torchlint.model import Finding, Fix, FixAvailability
from torchlint.names import ImportTable
from torchlint.nodes import iter_children, target_names, walk_nodes
from torchlint.semantic import Location, SemanticModel, location_of

if TYPE_CHECKING:  # pragma: no cover
    from torchlint.config import Settings


# Sets of concrete node types, tested with ``type(node) in ...``: LibCST's
# node classes are never subclassed, and ``isinstance`` against them goes
# through ABCMeta's slow path, which the ancestry walks below ask often.
_FUNCTION_BOUNDARIES = frozenset({cst.FunctionDef, cst.Lambda, cst.ClassDef})
_COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp})


def contains_modulo(node: cst.CSTNode) -> bool:
    """Whether an expression uses the ``%`` operator anywhere, or calls a
    helper named for it (``divisible_by(step, every)``, ``is_divisible``,
    ``every(pbar, percent=35)``, ``every_n_steps(...)``)."""
    for n in walk_nodes(node):
        kind = type(n)
        if kind is cst.BinaryOperation and type(n.operator) is cst.Modulo:
            return True
        if kind is cst.Call:
            func = n.func
            name = func.value if type(func) is cst.Name else func.attr.value if type(func) is cst.Attribute else ""
            lowered = name.lower()
            if "divisible" in lowered or lowered == "every" or lowered.startswith("every_"):
                return True
    return False


_STEP_COUNTER = re.compile(r"(?:^|_)(?:step|steps|iter|iters|iteration|iterations|epoch|epochs)$", re.IGNORECASE)


def tests_listed_step(test: cst.BaseExpression) -> bool:
    """Whether ``test`` holds only at the steps a collection lists:
    ``global_step in cfg.pg_scale``, ``epoch in milestones``, ``iteration in
    saving_iterations`` (a step counter's name ``in`` a collection), alone or
    in an ``and``."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return tests_listed_step(test.left) or tests_listed_step(test.right)
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, right = test.left, test.comparisons[0].comparator
    if isinstance(right, cst.Call) and isinstance(right.func, cst.Name) and right.func.value == "range":
        return False  # `step in range(warmup, total)`: a span of steps, not a few
    name = left.value if isinstance(left, cst.Name) else left.attr.value if isinstance(left, cst.Attribute) else ""
    return isinstance(test.comparisons[0].operator, cst.In) and _STEP_COUNTER.search(name) is not None


def _flag_names(test: cst.BaseExpression) -> List[str]:
    """The bare names a test requires: ``flag``, ``flag and rank == 0``."""
    if isinstance(test, cst.Name):
        return [test.value]
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _flag_names(test.left) + _flag_names(test.right)
    return []


def _periodic_flags(scope: cst.CSTNode) -> frozenset:
    """Names that every assignment in ``scope`` (not in nested functions) gives
    an expression with ``%``: flags such as ``log_now = step % every == 0``."""
    modulo: Dict[str, bool] = {}
    todo = list(iter_children(scope))
    while todo:
        node = todo.pop()
        kind = type(node)
        if kind in _FUNCTION_BOUNDARIES:
            continue
        if kind is cst.Assign:
            for target in node.targets:
                for name in target_names(target.target):
                    modulo[name] = modulo.get(name, True) and contains_modulo(node.value)
        elif kind in (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr):
            for name in target_names(node.target):
                modulo[name] = False
        todo.extend(iter_children(node))
    return frozenset(name for name, all_modulo in modulo.items() if all_modulo)


def tests_periodic_flag(test: cst.BaseExpression, scope: cst.CSTNode, cache: Dict[int, frozenset]) -> bool:
    """Whether ``test`` requires a flag (``if log_now:``, ``if log_now and rank
    == 0:``) that ``scope`` (not its nested functions) only ever assigns an
    expression with ``%`` (``log_now = step % every == 0``), or is an ``or``
    of such flags and tests (``if early_phase or late_phase:``, each one
    periodic).  ``cache`` keeps each scope's flags, by id: the Context and the
    frequency model share it."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return all(
            contains_modulo(side) or tests_periodic_flag(side, scope, cache) for side in (test.left, test.right)
        )
    names = _flag_names(test)
    if not names:
        return False
    periodic = cache.get(id(scope))
    if periodic is None:
        periodic = cache[id(scope)] = _periodic_flags(scope)
    return any(name in periodic for name in names)


def own_callee(func: cst.BaseExpression, receivers: Tuple[str, ...] = ("self", "cls")) -> Optional[str]:
    """The name that a call of a function or method of the module itself
    goes by: ``name(...)``, or ``self.name(...)`` for one of ``receivers``;
    None for any other callee."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in receivers:
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


def asks_periodic_helper(test: cst.BaseExpression, definitions: Callable[[str], Sequence[Any]]) -> bool:
    """``if self._should_log():``, ``if should_log(step) and rank == 0:``: a
    call of a function of the module, every definition of which
    (``definitions(name)``: occurrences with a ``node``) only returns a
    periodic test (``return self.step % self.every == 0``)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return asks_periodic_helper(test.left, definitions) or asks_periodic_helper(test.right, definitions)
    name = own_callee(test.func) if isinstance(test, cst.Call) else None
    if name is None:
        return False
    found = definitions(name)
    return bool(found) and all(_returns_periodic_test(occurrence.node) for occurrence in found)


def _returns_periodic_test(definition: cst.CSTNode) -> bool:
    """A ``def`` whose body (after a docstring) is one ``return`` of a test
    with ``%`` or of a step listed in a collection."""
    if not isinstance(definition, cst.FunctionDef) or not isinstance(definition.body, cst.IndentedBlock):
        return False
    body = list(definition.body.body)
    if body and definition.get_docstring() is not None:
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return False
    statement = body[0].body[0]
    return isinstance(statement, cst.Return) and statement.value is not None and (
        contains_modulo(statement.value) or tests_listed_step(statement.value))


_TEST_FILE = re.compile(r"^(test_.*\.pyi?|.*_test\.pyi?|.*_test_utils\.py|conftest\.py)$")


# Directories of tests and of the helpers that only tests use (torchrec's
# `distributed/test_utils/`, AllenNLP's `common/testing/`).
_TEST_DIRS = frozenset({"tests", "test", "test_utils", "testing", "testutils", "test_helpers", "unittests"})


def is_test_path(path: str) -> bool:
    """``test_*.py``, ``*_test.py``, ``*_test_utils.py``, ``conftest.py``, or
    under ``tests/``/``test/``, a ``*_tests/`` directory (``gpu_tests/``), or a
    directory of test helpers (``test_utils/``, ``testing/``, ``testutils/``,
    ``test_helpers/``), or of unit tests (``unittests/``: the test mixins
    that NequIP's package ships)."""
    p = PurePath(path.replace("\\", "/"))
    if _TEST_FILE.match(p.name):
        return True
    return any(part in _TEST_DIRS or part.endswith("_tests") for part in p.parts[:-1])


class Context:
    """What a rule can ask about the file and the node being visited."""

    def __init__(self, path: str, source: str, settings: "Settings") -> None:
        self.path = path
        self.source = source
        self.settings = settings
        self.is_test_file = is_test_path(path)
        self.imports = ImportTable()
        self.stack: List[cst.CSTNode] = []
        self.findings: List[Finding] = []
        self.module: Optional[cst.Module] = None
        # Per-file state that several rules share (e.g. facts about the whole
        # module gathered once for all the rules that need them).
        self.shared: Dict[str, Any] = {}
        # Facts about this module that other modules of the run establish (the
        # project index, torchlint/project.py), by kind: e.g. "frequency" ->
        # {qualified function name: (level, "path:line" of the call)}.
        self.project: Dict[str, Any] = {}
        # Functions (qualified names) where a rule stayed silent only because
        # the module does not show how often they run: the index looks for
        # their callers in the other modules.
        self.pending: Set[str] = set()
        # The path from the module down to each node reported while it or a
        # node in it was being visited (by id): the walk's stack, which
        # positions need and would otherwise find again (``Positions.prepare``'s
        # ``known``).
        self.paths: Dict[int, Tuple[cst.CSTNode, ...]] = {}
        # Whether the test of an `if` holds once every N iterations, by the
        # test's id (``is_periodic_test``: asked at every call under it).
        self._periodic_tests: Dict[int, bool] = {}

    # -- names ----------------------------------------------------------------
    def qualname(self, node: Optional[cst.BaseExpression]) -> Optional[str]:
        """Fully qualified name of a Name/Attribute chain rooted in an import."""
        return self.imports.qualname(node)

    @property
    def target_torch(self) -> Tuple[int, int]:
        return self.settings.target_torch

    # -- ancestry -------------------------------------------------------------
    @property
    def semantic(self) -> SemanticModel:
        """The module's semantic model (scopes, bindings), built on the first question."""
        model = self.shared.get("semantic")
        if model is None:
            assert self.module is not None
            model = self.shared["semantic"] = SemanticModel(self.module, self.source)
        return model

    def location(self) -> Location:
        """Where the node being visited is, for the semantic model's questions."""
        return location_of(self.stack)

    @property
    def parent(self) -> Optional[cst.CSTNode]:
        """Parent of the node being visited."""
        return self.stack[-2] if len(self.stack) >= 2 else None

    def ancestors(self) -> Sequence[cst.CSTNode]:
        """Ancestors of the node being visited, innermost first."""
        return self.stack[-2::-1]

    def enclosing_function(self) -> Optional[cst.FunctionDef]:
        stack = self.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            kind = type(node)
            if kind is cst.FunctionDef:
                return node
            if kind is cst.Lambda or kind is cst.ClassDef:
                return None
        return None

    def enclosing_class(self) -> Optional[cst.ClassDef]:
        stack = self.stack
        for i in range(len(stack) - 2, -1, -1):
            if type(stack[i]) is cst.ClassDef:
                return stack[i]
        return None

    def enclosing_loop(self, *, periodic_guard: bool = True) -> Optional[cst.CSTNode]:
        """The loop whose every iteration runs the node being visited.

        "In a loop" means lexically inside the body of a ``for``/``while`` or a
        comprehension, within the same function.  A ``for``'s iterable and
        ``else`` run once and do not count.  With ``periodic_guard``, code in the
        body of an ``if`` whose test uses ``%`` (``if step % 100 == 0:``) runs
        once every N iterations and is not in the loop.
        """
        for loop in self.enclosing_loops(periodic_guard=periodic_guard):
            return loop
        return None

    def enclosing_loops(self, *, periodic_guard: bool = True) -> Iterator[cst.CSTNode]:
        """Every loop that runs the node being visited, innermost first, as
        :meth:`enclosing_loop` finds the first: within the same function, and
        none beyond a periodic guard (``if step % 100 == 0:``)."""
        stack = self.stack
        for i in range(len(stack) - 2, -1, -1):
            node = stack[i]
            child = stack[i + 1]
            kind = type(node)
            if kind in _FUNCTION_BOUNDARIES:
                return
            if kind is cst.For:
                if child is node.body:
                    yield node
            elif kind is cst.While:
                if child is node.body or child is node.test:
                    yield node
            elif kind is cst.If:
                if periodic_guard and child is node.body and self.is_periodic_test(node.test, i):
                    return
            elif kind in _COMPREHENSIONS:
                if child is not node.for_in:
                    yield node
            elif kind is cst.CompFor:
                outermost = i > 0 and type(stack[i - 1]) in _COMPREHENSIONS
                if child is node.iter and outermost:
                    continue
                if child is node.iter or child is node.inner_for_in or any(child is c for c in node.ifs):
                    yield node

    def is_periodic_test(self, test: cst.BaseExpression, index: int) -> bool:
        """Whether ``test``, of an ``if`` at ``self.stack[index]``, holds once
        every N iterations: ``i % n == 0``, ``epoch in milestones``
        (``tests_listed_step``), or a flag the enclosing function
        only ever assigns such a test (``do_log = step % every == 0`` ...
        ``if do_log:``), alone or in an ``and``."""
        known = self._periodic_tests.get(id(test))
        if known is None:
            known = self._periodic_tests[id(test)] = self._is_periodic_test(test, index)
        return known

    def _is_periodic_test(self, test: cst.BaseExpression, index: int) -> bool:
        if contains_modulo(test) or tests_listed_step(test) or asks_periodic_helper(test, self.semantic.definitions):
            return True
        function = next((n for n in reversed(self.stack[:index]) if type(n) in _FUNCTION_BOUNDARIES), self.module)
        if function is None:
            return False
        return tests_periodic_flag(test, function, self.shared.setdefault("periodic_flags", {}))

    def in_loop(self) -> bool:
        return self.enclosing_loop() is not None


def example_text(text: str) -> str:
    """The code of an example or benchmark as written in a rule's class body:
    dedented, without the line break after the opening quotes (Fixit's style)."""
    text = textwrap.dedent(text)
    return text[1:] if text.startswith("\n") else text


@dataclass(frozen=True)
class Valid:
    """Code the rule must not report (``tests/test_rule_docs.py`` checks it)."""

    code: str
    path: str = "snippet.py"

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", example_text(self.code))


@dataclass(frozen=True)
class Invalid:
    """Code the rule must report, ``findings`` times, and what its fix makes of it.

    ``expected_fix`` is the code after ``torchlint fix --unsafe-fixes`` with
    only this rule selected; ``None`` means the rule offers no fix there (the
    code stays as it is).
    """

    code: str
    expected_fix: Optional[str] = None
    findings: int = 1
    path: str = "snippet.py"

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", example_text(self.code))
        if self.expected_fix is not None:
            object.__setattr__(self, "expected_fix", example_text(self.expected_fix))


@dataclass(frozen=True)
class Benchmark:
    """A fixable rule's before/after benchmark for ``torchlint verify --rules``.

    ``before`` and ``after`` are module sources (plain text: nothing here
    imports torch), each defining a zero-argument ``run()``; the verifier
    injects ``DEVICE`` (``"cuda"`` when available, else ``"cpu"``) into their
    globals, runs both with the same seeds, compares the results with
    ``torch.testing.assert_close`` and times them.  ``after`` is the literal
    output of ``torchlint fix --unsafe-fixes --select CODE`` on ``before``
    (``tests/test_verify.py`` checks it), so a benchmark measures exactly what
    the fix does.  The registry fills in ``code``.
    """

    title: str  # what is compared, in a few words
    before: str
    after: str
    rtol: Optional[float] = None  # tolerances for the before/after comparison
    atol: Optional[float] = None  # (None: torch.testing.assert_close's defaults)
    comparison: str = "values"  # what the comparison means, for the docs
    cpu_note: str = ""  # why the figure means little on a CPU, if it does
    code: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "before", example_text(self.before))
        object.__setattr__(self, "after", example_text(self.after))


class Rule:
    """Base class of every rule.  Subclasses live in ``torchlint.rules``.

    Class attributes:
      code, name      -- e.g. ``"TL101"``, ``"item-in-loop"``
      summary         -- one line: the README's rule table and ``docs/rules.md``
                         show it (``python -m torchlint.docs`` writes them)
      default         -- on unless deselected (False: opt-in); written
                         ``default = False`` in the class body, where the
                         catalog reads it without importing the rule
      fix             -- what the docs say about fixes (FixAvailability)
      fix_enables     -- codes whose fixes this rule's fix can make possible
                         (TL202's ``pin_memory=True`` makes TL204's copies
                         fixable); ``check`` counts such follow-on fixes by
                         running the fixer only on files with such a fix
      VALID, INVALID  -- ``Valid``/``Invalid`` examples, with the expected fixes;
                         ``tests/test_rule_docs.py`` runs them
      BENCHMARK       -- a fixable rule's ``Benchmark`` for ``verify --rules``
    The module's file name is ``tlNNN_<name with underscores>.py``: the
    catalog (``rules/__init__.py``) finds the rule by it.
    The class docstring is the rule's user-facing documentation, in the
    sections What it does / Why is this bad? / Example / Use instead /
    Fix safety / References.
    """

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    default: ClassVar[bool] = True
    fix: ClassVar[FixAvailability] = FixAvailability.NONE
    fix_enables: ClassVar[Tuple[str, ...]] = ()
    VALID: ClassVar[Sequence[Valid]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()
    BENCHMARK: ClassVar[Optional[Benchmark]] = None
    # Words of which the source must contain at least one for the rule to
    # find anything (``("DataLoader",)``): a file without any is not walked.
    needs: ClassVar[Tuple[str, ...]] = ()
    # False when nothing in this file can concern the rule (no word of
    # ``needs``, or a test of the path a subclass makes in ``__init__``): the
    # walker then calls none of its hooks, ``leave_Module`` included.
    walks: bool = True
    # Whether the rule checks test files (``is_test_path``). Most do not: a test
    # runs its inputs once, so a cost per step or per run there buys nothing.
    in_tests: ClassVar[bool] = False

    def __init__(self, context: Context) -> None:
        self.context = context
        needs = self.needs
        if (needs and not any(word in context.source for word in needs)) or (
            context.is_test_file and not self.in_tests
        ):
            self.walks = False

    def report(self, node: cst.CSTNode, message: str, *, fix: Optional[Fix] = None,
               frequency: Optional[Any] = None) -> None:
        """Report ``node``; ``frequency`` (a rule that reports only code running
        every step passes what it relied on) is shown to the user: how often the
        code runs and, when that comes from a call, where the call is."""
        runs = via = None
        if frequency is not None:
            runs = str(frequency)
            via = getattr(frequency, "via_text", None)
            call = getattr(frequency, "via", None)
            if via is None and call is not None:
                via = call  # a call in this module: its line is known once positions are
        context = self.context
        stack = context.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is node:  # the node being visited, or one around it
                context.paths[id(node)] = tuple(stack[:i + 1])
                break
        context.findings.append(
            Finding(code=self.code, name=self.name, node=node, message=message, fix=fix, runs=runs, via=via)
        )

    @classmethod
    def documentation(cls) -> str:
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")
