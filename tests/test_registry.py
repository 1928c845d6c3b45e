"""The rules package's catalog, found from the rule modules' file names and
``default`` lines, matches the rule classes (selection never imports rules)."""

import subprocess
import sys

from torchlint.registry import all_codes, all_rules, default_codes
from torchlint.rules import CATALOG


def test_catalog_lists_every_rule_with_its_module_and_default():
    rules = all_rules()
    assert sorted(CATALOG) == sorted(rules)
    for code, (module, default) in CATALOG.items():
        assert rules[code].__module__ == f"torchlint.rules.{module}", (
            f"{code} lives in {rules[code].__module__}: a rule's module is named tlNNN_<name>.py after its code"
        )
        assert rules[code].default is default, f"{code}: write `default = False` in the rule's class body"
        assert module == f"{code.lower()}_{rules[code].name.replace('-', '_')}", f"{code}: module named after the rule"


def test_codes_and_defaults_come_from_the_catalog():
    assert all_codes() == sorted(all_rules())
    assert default_codes() == [code for code, rule in all_rules().items() if rule.default]


def test_resolving_a_selection_imports_no_rule_and_no_libcst():
    code = (
        "import sys\n"
        "from torchlint.registry import all_codes, default_codes\n"
        "from torchlint.model import Diagnostic\n"
        "import torchlint.cache, torchlint.parallel, torchlint.reporters, torchlint.cli\n"
        "assert all_codes() and default_codes()\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('libcst', 'torchlint.rules.', 'torch.', 'torchlint.engine')) or m == 'torch')\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
