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


@pytest.fixture(autouse=True)
def _private_result_cache(tmp_path_factory, monkeypatch):
    """Each test gets its own result cache, so no test sees another's results.

    (tests/test_cache.py removes the variable where it tests the default location.)
    """
    monkeypatch.setenv("TORCHLINT_CACHE_DIR", str(tmp_path_factory.mktemp("torchlint-cache")))
