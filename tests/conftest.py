from pathlib import Path

import pytest
from click.testing import CliRunner


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    """An empty temporary directory that is also the current directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
