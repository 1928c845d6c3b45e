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
