"""The textual scan behind ``project.unreferenced`` (names no other file
mentions): its fast forms answer exactly as the plain regular expressions do,
and a scan made in the worker processes gives the same facts as one made here."""

from __future__ import annotations

import re

import pytest

from tests.test_cli import run
from tests.test_precision_set_aaa import _concise
from tests.test_precision_set_fff import VARIANT, _project
from torchlint import parallel, project

TEXTS = [
    "",
    "x = 1\n",
    "def train_step(model):\n    return model(x2) + 3.5e-4 * y_1\n",
    "a = 0x1f + 2foo + 1_000 + _private + __dunder__ + b3\n",
    "# see `train_step`—it calls helper’s loss (naïve_fn)\nvalue = naïve_fn(x)\n",  # not ASCII
    "s = 'getattr(models, name)'  # 12abc_def 9\n",
    "from a.b import (c as d,\n    e)\nimport f.g as h\n",
    "\t\tindented\ttabs\x0bvertical\x0cfeed\r\nend",
    "x = 1２3abc，def é_ok naïve—fn 中文名 = 3 α1 _β 9ünï x²y\n",  # wide digits, CJK, punctuation
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_words_of_a_text_are_those_of_the_word_pattern(text):
    assert project._words(text) == set(re.findall(r"[A-Za-z_]\w*", text))


LOOKUPS = [
    ("model = getattr(models, args.arch)()", {"models"}),
    ("model = getattr(pkg.models, name)", {"models"}),
    ("x = mygetattr(models, name)", set()),  # not `getattr`
    ("x = self.getattr(models, name)", {"models"}),  # (the boundary is a dot: as `\\b` says)
    ("x = getattr(self, 'weight')", set()),  # a literal attribute
    ("x = getattr(cfg,\n  key)", {"cfg"}),
    ("net = models.__dict__[args.arch]()", {"models"}),
    ("net = a.b.__dict__[k]", {"b"}),
    ("net = f().__dict__[k]", set()),
    ("net = x..__dict__[k]", {""}),
    ("nothing here", set()),
]


@pytest.mark.parametrize("text, names", LOOKUPS)
def test_the_modules_a_file_looks_names_up_in(text, names):
    old = re.compile(r"\bgetattr\(\s*([\w.]+)\s*,\s*(?![\"'\s])|\b([\w.]+)\.__dict__\[")
    assert project._looked_up(text) == names == {(a or b).rpartition(".")[2] for a, b in old.findall(text)}


@pytest.mark.parametrize("text, word, said", [
    ("import old_model\n", "old_model", True),
    ("import old_model_v2\n", "old_model", False),
    ("x = my_old_model\n", "old_model", False),
    ("cfg: nets.old_model.Net", "old_model", True),
    ("old_model", "old_model", True),
    ("run my-old.py", "my-old", True),  # not an identifier: the regular expression
    ("run my-older.py", "my-old", False),
])
def test_a_module_name_is_mentioned_as_a_word(text, word, said):
    assert project._mentions(text, word) is said


def test_a_scan_made_elsewhere_gives_the_same_facts(tmp_path):
    files = {
        "train.py": "from nets.variant import VariantNet\nif __name__ == '__main__':\n    VariantNet()\n",
        "nets/__init__.py": "from .blocks import *\n",
        "nets/blocks.py": "def block():\n    pass\n\n\ndef _hidden():\n    pass\n",
        "nets/variant.py": "class VariantNet:\n    pass\n\n\nclass Unused:\n    pass\n",
        "nets/variant_legacy.py": "class OldNet:\n    pass\n",
        "registry.py": "net = getattr(zoo, name)\n",
        "zoo.py": "def resnet():\n    pass\n",
    }
    candidates = {"nets/variant.py": [5], "nets/blocks.py": [5], "nets/variant_legacy.py": [1], "zoo.py": [1]}
    order = sorted(files)
    asked = []

    def scan(paths, stems, methods, words=None):
        asked.append(list(stems))
        return [project.scan_file(p, files[p], stems, methods, words) if p != "zoo.py" else None for p in paths]

    here = project.unreferenced(candidates, order, files.get)
    elsewhere = project.unreferenced(candidates, order, files.get, scan=scan)
    assert here == elsewhere == {
        "nets/variant.py": {project.UNREFERENCED: (0, "Unused")},
        "nets/blocks.py": {project.UNREFERENCED: (0, "_hidden")},
        "nets/variant_legacy.py": {project.UNREFERENCED: (0, project.WHOLE_MODULE)},
    }
    assert asked == [["variant_legacy"]]


def test_one_and_two_workers_find_the_same_code_that_never_runs(runner, workdir, monkeypatch):
    scanners = []
    real = parallel._pool_scanner
    monkeypatch.setattr(parallel, "_pool_scanner", lambda *args: scanners.append(real(*args)) or scanners[-1])
    _project(workdir)
    (workdir / "nets").mkdir()
    (workdir / "nets" / "variant_legacy.py").write_text(VARIANT)
    (workdir / "nets" / "variant.py").write_text(VARIANT.replace("VariantNet", "OtherNet"))
    for i in range(parallel.MIN_FILES_FOR_POOL):  # (enough files for the pool)
        (workdir / f"extra{i}.py").write_text(f"import torch\n\n\ndef f{i}(x):\n    return x\n")
    one = run(runner, "check", "--no-cache", "-j", "1", "--output-format", "json", "--select", "TL401", ".")
    two = run(runner, "check", "--no-cache", "-j", "2", "--output-format", "json", "--select", "TL401", ".")
    assert one.output == two.output
    assert [scanner is not None for scanner in scanners] == [False, True]  # (-j 2 scanned in the workers)
    assert _concise(runner, "--select", "TL401", ".") == ["nets/variant.py:8:35: TL401"]


# -- a folder deep in the project that no file outside it names ----------------------

_LARGE = "import torch.nn as nn\n\n\nclass Large(nn.Module):\n    pass\n"
_FOLDER_FILES = {
    "train.py": "from pkg.models import Net\nif __name__ == '__main__':\n    Net()\n",
    "pkg/__init__.py": "",
    "pkg/models.py": "from pkg.common.annotator.canny import edges\n\n\nclass Net:\n    pass\n",
    "pkg/common/annotator/canny/__init__.py": "def edges(x):\n    return x\n",
    "pkg/common/annotator/mlsd/__init__.py": "from .models.large import Large\n",
    "pkg/common/annotator/mlsd/models/large.py": _LARGE,
}


def _folder_facts(extra=None, candidate="pkg/common/annotator/mlsd/models/large.py", configs=(), tmp=None):
    files = {**_FOLDER_FILES, **(extra or {})}
    order = sorted(files)
    here = project.unreferenced({candidate: [4]}, order, files.get, configs)
    elsewhere = project.unreferenced({candidate: [4]}, order, files.get, configs,
                                     scan=lambda paths, stems, methods, asked=None: [project.scan_file(p, files[p], stems, methods, asked)
                                                                         for p in paths])
    assert here == elsewhere
    return here.get(candidate, {}).get(project.UNREFERENCED)


def test_a_folder_that_no_file_outside_names_never_runs():
    assert _folder_facts() == (0, project.WHOLE_MODULE)
    # (a vendored library's own registry, which imports by computed names, does not keep it alive)
    assert _folder_facts({"pkg/common/annotator/mlsd/registry.py": "import importlib\nm = importlib.import_module(n)\n"}
                         ) == (0, project.WHOLE_MODULE)


def test_a_registry_in_another_folder_that_no_file_names_does_not_keep_it_alive():
    # LAVIS: the vendored uniformer's registry imports by computed names; the
    # answer for mlsd must not depend on whether the uniformer files have
    # findings (which rules are selected)
    registry = {"pkg/common/annotator/uniformer/registry.py": "import importlib\nm = importlib.import_module(n)\n"}
    assert _folder_facts(registry) == (0, project.WHOLE_MODULE)
    # (named from outside, the registry's folder may run, and its computed imports may reach mlsd)
    named = {**registry, "pkg/app.py": "from pkg.common.annotator.uniformer import registry\n"}
    assert _folder_facts(named) != (0, project.WHOLE_MODULE)


@pytest.mark.parametrize("extra", [
    # a module of its package's interface with a demo block (mmseg's `utils/collect_env.py`)
    {"pkg/common/annotator/mlsd/utils/__init__.py": "from .collect_env import collect_env\n",
     "pkg/common/annotator/mlsd/utils/collect_env.py":
         "def collect_env():\n    return {}\n\n\nif __name__ == '__main__':\n    print(collect_env())\n"},
    # a registry filled at import time (mmcv's `cnn/bricks/norm.py`)
    {"pkg/common/annotator/mlsd/bricks/__init__.py": "from .norm import build_norm\n",
     "pkg/common/annotator/mlsd/bricks/norm.py":
         "NORM.register_module('BN', module=BN)\nfor name in NAMES:\n    NORM.register_module(name)\n"},
])
def test_a_module_its_package_exports_is_no_script_of_the_folder(extra):
    assert _folder_facts(extra) == (0, project.WHOLE_MODULE)
    # (the same modules, not named by their package's `__init__.py`, are scripts)
    alone = {path: ("" if path.endswith("__init__.py") else text) for path, text in extra.items()}
    assert _folder_facts(alone) != (0, project.WHOLE_MODULE)


@pytest.mark.parametrize("extra", [
    {"pkg/tools.py": "import sys\nsys.path.append('pkg/common/annotator/mlsd')\n"},  # named in a string
    {"pkg/app.py": "# the line detector lives in annotator/mlsd\n"},  # named in a comment
    {"pkg/demo.py": "from pkg.common.annotator.mlsd import Large\n"},  # imported
    {"pkg/common/annotator/mlsd/run.py": "import sys\nprint(sys.argv)\n"},  # a script of its own
    {"pkg/plugins.py": "import importlib\nmodule = importlib.import_module(name)\n"},  # imports by computed names
])
def test_a_folder_named_elsewhere_or_holding_a_script_may_run(extra):
    assert _folder_facts(extra) != (0, project.WHOLE_MODULE)


def test_a_folder_named_in_a_configuration_file_may_run(tmp_path):
    config = tmp_path / "detect.yaml"
    config.write_text("detector: pkg.common.annotator.mlsd.Large\n")
    assert _folder_facts(configs=[str(config)]) != (0, project.WHOLE_MODULE)


def test_a_top_level_folder_or_one_no_import_can_name_is_not_judged():
    # `pkg/` (and `pkg/common/`) are the project's packages, its users' to import
    assert _folder_facts({"pkg/large.py": _LARGE}, candidate="pkg/large.py") != (0, project.WHOLE_MODULE)
    # a folder named so that no import can name it holds scripts or `sys.path` entries
    assert _folder_facts({"pkg/common/my-lib/large.py": _LARGE},
                         candidate="pkg/common/my-lib/large.py") != (0, project.WHOLE_MODULE)
