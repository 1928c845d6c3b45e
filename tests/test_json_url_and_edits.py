"""JSON diagnostics with the rule's `url` and the fix's `edits`, SARIF rules with
`helpUri`, as Ruff's (#16)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.test_add_noqa import _notebook
from tests.test_cli import run
from torchlint.fix_edits import text_edit
from torchlint.reporters import docs_url, rule_url

ROOT = Path(__file__).resolve().parent.parent

SOURCE = """\
import torch
from torch.utils.data import DataLoader


def train(dataset, device):
    loader = DataLoader(dataset, batch_size=8, num_workers=4)
    total = 0.0
    for batch in loader:
        noise = torch.zeros(3).to(device)
        total += noise.sum().item()
        x = batch.to(device)
"""


def _apply(text: str, edits: list) -> str:
    """Apply Ruff-style edits (rows and columns from 1, end exclusive)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(point):
        return starts[point["row"] - 1] + point["column"] - 1

    for edit in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        text = text[: offset(edit["location"])] + edit["content"] + text[offset(edit["end_location"]):]
    return text


def test_each_edit_applied_alone_gives_what_its_fix_gives(runner, workdir):
    (workdir / "train.py").write_text(SOURCE)
    items = json.loads(run(runner, "check", "--output-format", "json", "train.py").output)
    fixable = [item for item in items if item["fix"] is not None]
    assert {item["code"] for item in fixable} == {"TL201", "TL202", "TL101"}
    for item in fixable:
        edits = item["fix"]["edits"]
        assert edits, item["code"]
        fixed = _apply(SOURCE, edits)
        if item["code"] == "TL201":
            # the span that changes: `).to(` becomes `, device=`
            assert edits == [{"content": ", device=", "location": {"row": 9, "column": 30},
                              "end_location": {"row": 9, "column": 35}}]
            assert "noise = torch.zeros(3, device=device)\n" in fixed
        if item["code"] == "TL202":
            assert "DataLoader(dataset, batch_size=8, num_workers=4, pin_memory=True)" in fixed
            compile(fixed, "train.py", "exec")
    # The unsafe fix gets its edits too (the JSON says it is unsafe).
    (unsafe,) = [item for item in fixable if item["code"] == "TL101"]
    assert unsafe["fix"]["applicability"] == "unsafe"


def test_json_url_points_at_the_rules_section(runner, workdir):
    (workdir / "train.py").write_text(SOURCE)
    items = json.loads(run(runner, "check", "--output-format", "json", "train.py").output)
    for item in items:
        assert item["url"] == rule_url(item["code"], item["name"])
        assert item["url"].endswith(f"#{item['code'].lower()}-{item['name']}")
    rules_md = (ROOT / "docs" / "rules.md").read_text()
    for item in items:
        anchor = item["url"].split("#", 1)[1]
        assert f"](#{anchor})" in rules_md  # the generated index links to the same anchor


def test_docs_url_is_where_this_torchlint_comes_from():
    url = docs_url()
    parsed = urlparse(url)
    if parsed.scheme == "file":  # a checkout (this one: an editable install or the source tree)
        assert Path(unquote(parsed.path)) == ROOT / "docs" / "rules.md"
    else:
        assert parsed.scheme == "https" and url.endswith("/docs/rules.md"), url


def test_noqa_row_is_where_a_noqa_goes(runner, workdir):
    (workdir / "train.py").write_text(
        'import torch\n\n\ndef train(loader, device):\n    for batch in loader:\n'
        '        noise = torch.zeros(len("""\n1\n""")).to(device)\n'
    )
    (item,) = json.loads(run(runner, "check", "--output-format", "json", "train.py").output)
    assert item["location"]["row"] == 6 and item["noqa_row"] == 8


def test_notebook_edits_are_in_the_cell(runner, workdir):
    (workdir / "nb.ipynb").write_text(_notebook("import torch", "for b in loader:\n    x = torch.zeros(3).cuda()"))
    (item,) = json.loads(run(runner, "check", "--output-format", "json", "nb.ipynb").output)
    assert item["cell"] == 2
    assert item["fix"]["edits"] == [{"content": ", device=\"cuda\"", "cell": 2,
                                     "location": {"row": 2, "column": 22}, "end_location": {"row": 2, "column": 29}}]


def test_sarif_rules_have_help_uri(runner, workdir):
    (workdir / "train.py").write_text(SOURCE)
    sarif = json.loads(run(runner, "check", "--output-format", "sarif", "train.py").output)
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    assert all(rule["helpUri"] == rule_url(rule["id"], rule["name"]) for rule in rules)


def test_text_edit_keeps_whole_words_and_positions():
    assert text_edit("a = f(x=False)\n", "a = f(x=True)\n") == {
        "content": "True", "location": {"row": 1, "column": 9}, "end_location": {"row": 1, "column": 14}}
    assert text_edit("a\nb\n", "a\nx\nb\n")["location"] == {"row": 2, "column": 1}
    assert text_edit("same", "same") is None
    deletion = text_edit("keep\ndrop\nkeep\n", "keep\nkeep\n")
    assert deletion["content"] == "" and _apply("keep\ndrop\nkeep\n", [deletion]) == "keep\nkeep\n"


def test_edits_for_standard_input(runner, workdir):
    code = "import torch\nfor b in loader:\n    x = torch.zeros(3).cuda()\n"
    (item,) = json.loads(run(runner, "check", "--output-format", "json", "-", input=code).output)
    assert _apply(code, item["fix"]["edits"]) == code.replace("torch.zeros(3).cuda()", 'torch.zeros(3, device="cuda")')


def test_fix_json_gives_the_edits_of_the_fixes_left(runner, workdir):
    path = workdir / "train.py"
    path.write_text(SOURCE)
    items = json.loads(run(runner, "fix", "--output-format", "json", "train.py").output)
    fixed = path.read_text()
    assert "torch.zeros(3, device=device)" in fixed  # the safe fix was applied
    left = {item["code"]: item for item in items if item["fix"] is not None}
    assert sorted(left) == ["TL101", "TL202"]  # unsafe here (the dataset is unknown)
    assert "total += noise.sum().detach()" in _apply(fixed, left["TL101"]["fix"]["edits"])
    assert "pin_memory=True" in _apply(fixed, left["TL202"]["fix"]["edits"])


def test_spliced_fixes_equal_the_whole_module_rewrite():
    """fix_edits.alone splices one-line expression fixes into the text; it must
    give exactly what engine.single_fixes (the whole module regenerated) gives."""
    from torchlint.config import Settings
    from torchlint.engine import single_fixes
    from torchlint.fix_edits import alone
    from torchlint.registry import all_codes

    paths = sorted(ROOT.glob("tests/fixtures/*/input.py")) + sorted(ROOT.glob("examples/*.py"))
    compared = 0
    for path in paths:
        text = path.read_text()
        expected = single_fixes(text, path.name, Settings(), all_codes(), True)
        assert alone(text, path.name, Settings(), all_codes()) == expected, path
        compared += sum(1 for _, fixed in expected if fixed is not None)
    assert compared > 50


def test_edits_are_cached_with_the_results(runner, workdir, monkeypatch):
    """A warm JSON run takes the edits from the cache (no fix is run again),
    and a change to the file makes them new, from the file's analysis (the
    check does not analyse it a second time for them)."""
    from torchlint import fix_edits

    (workdir / "train.py").write_text(SOURCE)
    cold = run(runner, "check", "--output-format", "json", "train.py").output
    calls = []
    real, real_of_analysis = fix_edits.for_file, fix_edits.of_analysis
    monkeypatch.setattr(fix_edits, "for_file", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    monkeypatch.setattr(fix_edits, "of_analysis", lambda *a: calls.append("analysis") or real_of_analysis(*a))
    warm = run(runner, "check", "--output-format", "json", "train.py").output
    assert warm == cold and calls == []
    (workdir / "train.py").write_text(SOURCE.replace("batch_size=8", "batch_size=16"))
    changed = json.loads(run(runner, "check", "--output-format", "json", "train.py").output)
    assert calls == ["analysis"]
    (tl202,) = [item for item in changed if item["code"] == "TL202"]
    assert tl202["fix"]["edits"][0]["location"]["row"] == 6
    nocache = run(runner, "check", "--no-cache", "--output-format", "json", "train.py").output
    assert json.loads(nocache) == changed


def test_edits_from_the_checks_own_analysis_equal_a_second_analysis():
    """The check's workers give a file's edits from the analysis they have just
    made (fix_edits.of_analysis); the main process used to analyse the file
    again (fix_edits.for_file): both must give the same edits."""
    from torchlint.config import Settings
    from torchlint.engine import lint_text
    from torchlint.fix_edits import for_file, of_analysis
    from torchlint.registry import all_codes

    paths = sorted(ROOT.glob("tests/fixtures/*/input.py")) + sorted(ROOT.glob("examples/*.py"))
    compared = 0
    for path in paths:
        text = path.read_text()
        codes = sorted(all_codes())
        expected = for_file(text, path.name, Settings(), codes)
        assert of_analysis(text, lint_text(text, path.name, Settings(), codes)) == expected, path
        compared += sum(1 for edits in expected.values() if edits)
    assert compared > 50


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("indent", ["    ", "\t", "  "])
def test_statement_fixes_regenerate_only_their_statement(indent, newline):
    """A fix that replaces a statement (a decorator added to a method) is spliced
    from the innermost statement's own code, with the indentation around it;
    the result is what regenerating the whole module gives."""
    from torchlint import engine, fix_edits
    from torchlint.config import Settings
    from torchlint.engine import single_fixes
    from torchlint.registry import all_codes

    text = newline.join([
        "import torch",
        "",
        "",
        "class Runner:",
        f"{indent}# evaluation",
        f"{indent}def evaluate(self, model, loader):",
        f"{indent}{indent}model.eval()",
        f"{indent}{indent}for x in loader:",
        f"{indent}{indent}{indent}yield model(x)",
        "",
    ])
    expected = single_fixes(text, "train.py", Settings(), all_codes(), True)
    assert [fixed for _, fixed in expected if fixed is not None], "TL302 offers its decorator"
    assert fix_edits.alone(text, "train.py", Settings(), all_codes()) == expected
    result = engine._lint_text(text, "train.py", Settings(), ["TL302"])
    (finding,) = [f for f in result.findings if f.fix is not None]
    spliced = fix_edits._splice_statement(text, result.module, finding.node, finding.fix.build(), engine)
    assert spliced is not None and spliced == engine._apply(result.module, [(finding, finding.fix.build())])


_AROUND_CUTS = [
    "a = 1; \\\nb = 2\n",
    "x = 1 \\\n\ny = 2\n",
    "@d\ndef f():\n    pass\n\nx = 1\n",
    "if a:\n    b\nelse:\n    c\nd = 1\n",
    "try:\n    a\nexcept E:\n    b\nc\n",
    "x = '''\nabc\n'''\ny = 1\n",
    "class A:\n    x = 1\n# c\n\n    # d\nb = 2",
]
_INSERTED = ["(", ")", "\\", "'''", "if x: pass", "else:\n    pass\n", "\n  y = 2\n", "\t", "\\\n", "x; y", "\n", ""]


def test_a_fix_is_judged_as_a_parse_of_the_whole_text():
    """JSON's fix edits parse only the top-level statements around a fix's span
    again (fix_edits._fix_parses): that must say what a parse of the whole
    fixed text says, also for a change at the line breaks between statements."""
    import ast

    from torchlint.fix_edits import _fix_parses, _parses, _syntax_tree, line_starts

    for text in _AROUND_CUTS:
        tree, starts = _syntax_tree(text, ast), line_starts(text)
        for at in {min(len(text), max(0, s + d)) for s in starts for d in (-1, 0, 1)}:
            for width in (0, 1, 2):
                for new in _INSERTED:
                    fixed = text[:at] + new + text[at + width:]
                    if fixed != text:
                        assert _fix_parses(text, fixed, tree, starts, ast) == _parses(fixed, ast), (text, at, new)
