"""A rule module holds its documentation, metadata and policy; the analysis
it shares with other rules lives in the shared modules (``rules/_*.py``).

The measure is the rule's code: its lines without docstrings, comments,
blank lines and the ``VALID``/``INVALID``/``BENCHMARK`` examples, which are
documentation too.  The bound (200) is where a rule's policy stops being
readable in one sitting; TL101 alone was 900 lines before the shared modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULES = sorted((ROOT / "rules").glob("tl[0-9][0-9][0-9]_*.py"))
EXAMPLES = {"VALID", "INVALID", "BENCHMARK"}
LIMIT = 200


def code_lines(text: str) -> int:
    tree = ast.parse(text)
    dropped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                dropped.update(range(body[0].lineno, body[0].end_lineno + 1))
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in EXAMPLES for t in targets):
                dropped.update(range(node.lineno, node.end_lineno + 1))
    return sum(
        1
        for number, line in enumerate(text.splitlines(), 1)
        if number not in dropped and line.strip() and not line.strip().startswith("#")
    )


def test_the_counter_skips_documentation_and_examples():
    text = '''"""Module docs."""
import x

# a comment
class R:
    """Rule docs,
    two lines."""

    VALID = [
        "example",
    ]

    def f(self):
        """Method docs."""
        return 1
'''
    assert code_lines(text) == 4  # import, class, def, return


@pytest.mark.parametrize("path", RULES, ids=lambda p: p.stem[:5].upper())
def test_a_rule_module_is_its_policy(path: Path):
    lines = code_lines(path.read_text(encoding="utf-8"))
    assert lines <= LIMIT, f"{path.name}: {lines} code lines; move shared analysis to a rules/_*.py module"
