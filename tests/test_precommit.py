"""The pre-commit hooks, exercised by a real `pre-commit run` in another git
repository that points at this one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SLOW = 'import torch\n\nfor batch in loader:\n    x = torch.zeros(8).cuda()\n'
SLOW_FIXED = 'import torch\n\nfor batch in loader:\n    x = torch.zeros(8, device="cuda")\n'
UNSAFE_ONLY = "import torch\n\n\ndef step(opt):\n    opt.zero_grad(set_to_none=False)\n"


def _notebook(*sources: str) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": source.splitlines(True)} for source in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


NOTEBOOK = _notebook("%matplotlib inline\nimport torch", "for batch in loader:\n    x = torch.zeros(8).cuda()")
NOTEBOOK_FIXED = _notebook("%matplotlib inline\nimport torch", 'for batch in loader:\n    x = torch.zeros(8, device="cuda")')


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def _head() -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs this project's git checkout")
    head = _git(ROOT, "rev-parse", "HEAD")
    tracked = _git(ROOT, "ls-tree", "-r", "--name-only", "HEAD")
    if ".pre-commit-hooks.yaml" not in tracked.split():
        pytest.skip(".pre-commit-hooks.yaml is not committed yet")
    return head


def test_pre_commit_run(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    rev = _head()
    repo = tmp_path / "user-project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n"
        f"  - repo: {ROOT.as_posix()}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: torchlint-fix\n"
        "      - id: torchlint\n"
    )
    (repo / "slow.py").write_text(SLOW)
    (repo / "unsafe.py").write_text(UNSAFE_ONLY)
    (repo / "plain.py").write_text("print('no torch here')\n")
    (repo / "train.ipynb").write_text(NOTEBOOK)
    _git(repo, "add", "-A")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    # The fixing hook rewrote the safe case and left the unsafe one alone...
    assert (repo / "slow.py").read_text() == SLOW_FIXED, output
    assert (repo / "unsafe.py").read_text() == UNSAFE_ONLY
    assert (repo / "train.ipynb").read_text() == NOTEBOOK_FIXED, output  # `types_or: [..., jupyter]`
    assert "files were modified by this hook" in output
    # ...and the checking hook reports what remains.
    assert "unsafe.py:5:5: TL301" in output
    # ... once: the fixing hook does not print what it leaves (#16).
    assert output.count("unsafe.py:5:5: TL301") == 1, output
    assert "slow.py:4:9: TL201" not in output

    # Once the remaining problem is fixed, both hooks pass.
    (repo / "unsafe.py").write_text(UNSAFE_ONLY.replace("False", "True"))
    _git(repo, "add", "-A")
    again = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )
    assert again.returncode == 0, again.stdout + again.stderr
