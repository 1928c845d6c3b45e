"""Methods that nothing calls (``project.unreferenced``'s ``Class.method``
facts, ``_reach.never_run``): LAVIS's BLIP-2 models keep a ``predict_class``
that no task calls, and the ``_predict_class`` behind it; a finding there buys
nothing.  The near misses: a call from another file (a loop of an evaluation
helper, a base class's template method, a configuration file naming it), a
name some file builds (``getattr(model, f"predict_{kind}")``), a framework's
base class, a decorator that may register the method, a method a generic
base calls (``forward``)."""

from __future__ import annotations

import pytest

from tests.test_precision_set_aaa import _concise
from torchlint import project

BASE = """\
import torch.nn as nn


class BaseModel(nn.Module):
    def load(self, path):
        return path
"""

CAPTIONER = """\
import torch
from base import BaseModel


class Captioner(BaseModel):
    def forward(self, images):
        return self.score(images)

    def score(self, images):
        return images.sum(1)

    def predict_class(self, images, candidates):
        return self._predict_class(images, candidates)

    def _predict_class(self, images, candidates):
        out = []
        for image in images:
            out.append(self.score(image).item())
        return out
"""

TRAIN = """\
import torch
from captioner import Captioner


def main(loader):
    model = Captioner()
    for images in loader:
        model(images).backward()


if __name__ == "__main__":
    main([])
"""

FINDING = ["captioner.py:18:24: TL101"]


def _project(workdir, extra=None, captioner=CAPTIONER, base=BASE):
    files = {"base.py": base, "captioner.py": captioner, "train.py": TRAIN,
             "util1.py": "def helper1(x):\n    return x\n", "util2.py": "def helper2(x):\n    return x\n",
             **(extra or {})}
    for name, text in files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text)


def test_a_method_that_nothing_calls_never_runs(runner, workdir):
    _project(workdir)
    assert _concise(runner, "--select", "TL101", ".") == []
    # (judged alone, as pre-commit passes it, the file's users are not in sight)
    assert _concise(runner, "--select", "TL101", "captioner.py") == FINDING


@pytest.mark.parametrize("extra", [
    {"evaluate.py": "def evaluate(model, loader):\n    return [model.predict_class(x, None) for x in loader]\n"},
    # a name built from a piece: `predict_` completes to `predict_class`
    {"evaluate.py": "def evaluate(model, kind, x):\n    return getattr(model, f'predict_{kind}')(x, None)\n"},
    # a configuration file naming it (`method: predict_class`)
    {"configs/eval.yaml": "method: predict_class\n"},
    # another file that defines its own `predict_class` and calls one (whose?)
    {"other.py": "class Other:\n    def predict_class(self, x):\n        return x\n\n\n"
                 "def run(model, x):\n    return model.predict_class(x)\n"},
])
def test_a_method_called_or_named_elsewhere_may_run(runner, workdir, extra):
    _project(workdir, extra)
    assert _concise(runner, "--select", "TL101", ".") == FINDING


def test_a_base_class_that_calls_the_method_keeps_it(runner, workdir):
    base = BASE + "\n    def run(self, images):\n        return self.predict_class(images, None)\n"
    _project(workdir, base=base)
    assert _concise(runner, "--select", "TL101", ".") == FINDING


def test_a_private_method_of_another_class_elsewhere_is_not_this_one(runner, workdir):
    # `other.py`'s `self._predict_class(...)` calls its own
    other = ("class Other:\n    def go(self, x):\n        return self._predict_class(x)\n\n"
             "    def _predict_class(self, x):\n        return x\n")
    _project(workdir, {"other.py": other})
    assert _concise(runner, "--select", "TL101", ".") == []
    # ... unless that class is a base of this one (its template method calls the override)
    base = BASE + "\n    def go(self, x):\n        return self._predict_class(x, None)\n"
    _project(workdir, base=base)
    assert _concise(runner, "--select", "TL101", ".") == FINDING


@pytest.mark.parametrize("captioner", [
    # a framework's base may call any method by name
    CAPTIONER.replace("from base import BaseModel", "from lightning import LightningModule").replace(
        "Captioner(BaseModel)", "Captioner(LightningModule)"),
    # a decorator may register the method
    CAPTIONER.replace("    def _predict_class", "    @hooks.register\n    def _predict_class"),
    # the module itself calls it where it runs
    CAPTIONER.replace("return self.score(images)", "return self.score(images), self.predict_class(images, 1)"),
])
def test_a_method_that_may_run_otherwise_keeps_its_findings(runner, workdir, captioner):
    _project(workdir, captioner=captioner)
    line = 19 if "@hooks" in captioner else 18
    assert _concise(runner, "--select", "TL101", ".") == [f"captioner.py:{line}:24: TL101"]


def test_a_method_a_generic_base_calls_is_alive(runner, workdir):
    # nothing mentions `forward`, `nn.Module.__call__` calls it
    captioner = CAPTIONER.replace("def _predict_class", "def forward").replace(
        "def forward(self, images):\n        return self.score(images)", "def first(self, images):\n        return 0")
    _project(workdir, captioner=captioner, extra={"train.py": TRAIN.replace("model(images).backward()",
                                                                            "model(images, None)")})
    assert _concise(runner, "--select", "TL101", ".") == FINDING
    spans = project._method_spans(captioner)
    assert [(cls, name) for cls, name, *_ in spans] == [
        ("Captioner", "first"), ("Captioner", "score"), ("Captioner", "predict_class"), ("Captioner", "forward")]
    assert project._methods_asked(captioner, [18]) == ([], {})


def test_the_method_spans_and_mentions_of_a_text():
    text = ("class A(Base):\n    @property\n    def size(self):\n        return 1\n\n"
            "    # a comment at the body's level\n    def run(self):\n        x = self.size\n"
            "        return x\n\n\ndef size_of(a):\n    return a.size\n")
    assert project._method_spans(text) == [("A", "size", 3, 6, ("property",)), ("A", "run", 7, 11, ())]
    assert project._mention_lines(text, "size") == (1, [8, 13])
    assert project._bases_of(text, "A") == ["Base"]
    assert project._bases_of("class A(nn.Module, metaclass=M):\n    pass\n", "A") == ["Module", None]
    assert project._bases_of(text, "B") is None


def test_a_plain_class_may_be_called_by_a_library(runner, workdir):
    # BEIR calls `model.encode_queries(...)` of the encoder it is handed: only a
    # model's (an `nn.Module`'s) methods are judged
    base = BASE.replace("import torch.nn as nn\n\n\n", "").replace("(nn.Module)", "")
    _project(workdir, base=base)
    assert _concise(runner, "--select", "TL101", ".") == FINDING


def test_the_index_names_only_methods_that_hold_a_finding():
    files = {"base.py": BASE, "captioner.py": CAPTIONER, "train.py": TRAIN,
             "util1.py": "def helper1(x):\n    return x\n", "util2.py": "def helper2(x):\n    return x\n"}
    order = sorted(files)

    def facts(lines):
        found = project.unreferenced({"captioner.py": lines}, order, files.get)
        return found.get("captioner.py", {}).get(project.UNREFERENCED)

    assert facts([18]) == (0, "Captioner._predict_class Captioner.predict_class")
    # a finding in `score`, which `forward` calls: no fact, no second analysis
    assert facts([10]) is None
    # the same from the scan made in the worker processes
    scanned = project.unreferenced(
        {"captioner.py": [18]}, order, files.get,
        scan=lambda paths, stems, methods, asked=None: [project.scan_file(p, files[p], stems, methods, asked) for p in paths])
    assert scanned["captioner.py"][project.UNREFERENCED] == facts([18])
