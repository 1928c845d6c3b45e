"""The engine's layers import each other in one direction only (no cycles),
and the engine knows no rule."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Set

ROOT = Path(__file__).resolve().parent.parent


def _type_checking_blocks(tree: ast.AST) -> Set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _imports(path: Path, package: str) -> Set[str]:
    """The ``package.*`` modules ``path`` imports, at any depth of the file
    (imports inside functions count: they run), except type-checking imports."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_blocks(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            found.add(node.module)
            for alias in node.names:  # `from torchlint import cache`
                found.add(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(package))
    return found


def _graph() -> Dict[str, Set[str]]:
    modules = {}
    for path in (ROOT / "torchlint").glob("*.py"):
        modules[f"torchlint.{path.stem}"] = path
    return {name: {m for m in _imports(path, "torchlint") if m in modules and m != name}
            for name, path in modules.items()}


def test_engine_modules_have_no_import_cycle():
    graph = _graph()
    state: Dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(trail + [node, nxt]))
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_engine_imports_no_rule():
    # The registry is the one bridge: it loads the catalog.
    for path in (ROOT / "torchlint").rglob("*.py"):
        if path.name == "registry.py":
            continue
        imported = _imports(path, "torchlint.rules")
        assert not imported, f"{path.relative_to(ROOT)} imports {sorted(imported)}"


def test_rules_do_not_import_each_other():
    # Shared knowledge lives in rules/_*.py; a rule module is imported only by the registry.
    for path in (ROOT / "rules").glob("tl*.py"):
        imported = {m for m in _imports(path, "torchlint.rules") if m.rsplit(".", 1)[-1].startswith("tl")}
        assert not imported, f"{path.name} imports {sorted(imported)}"


# What a rule may use of the engine: the rule base class and the analysis it
# offers (names, nodes, positions, the semantic model, the diagnostic model).
RULE_API = {
    "torchlint.rule", "torchlint.model", "torchlint.names", "torchlint.nodes",
    "torchlint.positions", "torchlint.semantic", "torchlint.parsing",
}


def _outside(imported: Set[str], allowed: Set[str], prefixes: tuple) -> Set[str]:
    return {m for m in imported if m not in allowed and not m.startswith(prefixes)}


def test_rules_use_only_the_rule_api_codemods_and_shared_rule_modules():
    for path in (ROOT / "rules").glob("*.py"):
        imported = _imports(path, "torchlint")
        # `from torchlint.rule import Rule` also records `torchlint.rule.Rule`.
        modules = {m for m in imported if not any(m.startswith(a + ".") for a in RULE_API)}
        extra = _outside(modules, RULE_API, ("torchlint.codemods", "torchlint.rules._", "torchlint.rules"))
        assert not extra, f"rules/{path.name} imports {sorted(extra)} (the engine's drivers are not a rule's business)"


def test_codemods_use_only_libcst_and_each_other():
    for path in (ROOT / "codemods").glob("*.py"):
        imported = _imports(path, "torchlint")
        extra = {m for m in imported if not m.startswith("torchlint.codemods")}
        assert not extra, f"codemods/{path.name} imports {sorted(extra)}"
