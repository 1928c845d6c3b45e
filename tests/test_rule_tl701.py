"""Focused tests for TL701 (anomaly-detection-enabled)."""

from __future__ import annotations

import pytest

from tests.helpers import codes, fix, lint
from torchlint.model import Applicability


def tl701(code: str, path: str = "train.py"):
    return lint(code, select=["TL701"], path=path)


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ntorch.autograd.set_detect_anomaly(True)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(mode=True)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(True, check_nan=False)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(True, False)\n",
        "import torch\ntorch.autograd.anomaly_mode.set_detect_anomaly(True)\n",
        "import torch as T\nT.autograd.set_detect_anomaly(True)\n",
        "from torch.autograd import set_detect_anomaly as anomaly\nanomaly(True)\n",
        "import torch\ndef main():\n    from torch.autograd import detect_anomaly\n    with detect_anomaly():\n        step()\n",
        "import torch\nwith torch.autograd.detect_anomaly(check_nan=False):\n    step()\n",
        "import torch\nwith torch.autograd.set_detect_anomaly(True):\n    step()\n",
        "import torch\nif __name__ == '__main__':\n    torch.autograd.set_detect_anomaly(True)\n",
        "import torch\nfor x in loader:\n    with torch.autograd.detect_anomaly():\n        step(x)\n",
    ],
)
def test_reported(code: str) -> None:
    assert codes(tl701(code)) == ["TL701"]


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ntorch.autograd.set_detect_anomaly(False)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(mode=False, check_nan=True)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(args.debug)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(*flags)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(**options)\n",
        "import torch\ntorch.autograd.set_detect_anomaly(check_nan=True)\n",
        "import torch\nif args.debug:\n    torch.autograd.set_detect_anomaly(True)\n",
        "import torch\nif debug:\n    pass\nelse:\n    torch.autograd.set_detect_anomaly(True)\n",
        "import torch\nenabled = torch.autograd.set_detect_anomaly(True) if debug else None\n",
        "import torch\nanomaly = torch.autograd.detect_anomaly()\n",
        "import torch\nok = torch.is_anomaly_enabled()\n",
        "import torch\ndef set_detect_anomaly(flag):\n    pass\nset_detect_anomaly(True)\n",
        "import torch\nwith detect_anomaly():\n    step()\n",
        "import torch\ntry:\n    step()\nexcept FloatingPointError:\n    torch.autograd.set_detect_anomaly(True)\n    step()\n",
        "import torch\nmatch mode:\n    case 'debug':\n        torch.autograd.set_detect_anomaly(True)\n",
    ],
)
def test_silent(code: str) -> None:
    assert tl701(code) == []


@pytest.mark.parametrize("path", ["tests/test_nan.py", "test_model.py", "model_test.py", "conftest.py", "test/debug.py"])
def test_test_files_are_skipped(path: str) -> None:
    code = "import torch\ntorch.autograd.set_detect_anomaly(True)\nwith torch.autograd.detect_anomaly():\n    step()\n"
    assert tl701(code, path) == []
    assert len(tl701(code, "src/train.py")) == 2


def test_fix_is_unsafe_and_only_for_statements_and_unbound_with_items() -> None:
    code = """
    import torch
    torch.autograd.set_detect_anomaly(True)
    mode = torch.autograd.set_detect_anomaly(True)
    print(torch.autograd.set_detect_anomaly(True))
    with torch.autograd.detect_anomaly() as anomaly:
        step()
    with torch.autograd.detect_anomaly():
        step()
    """
    diagnostics = tl701(code)
    assert [(d.line, d.fix is not None) for d in diagnostics] == [
        (3, True), (4, False), (5, False), (6, False), (8, True),
    ]
    assert all(d.fix.applicability is Applicability.UNSAFE for d in diagnostics if d.fix)
    assert fix(code, select=["TL701"]).text == fix(code, select=["TL701"], unsafe=False).text
    assert not fix(code, select=["TL701"]).applied


def test_report_position_is_the_call() -> None:
    code = "import torch\nwith torch.autocast('cuda'), torch.autograd.detect_anomaly():\n    step()\n"
    assert [(d.line, d.column) for d in tl701(code)] == [(2, 30)]
