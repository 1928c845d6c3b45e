"""Layout and packaging: `rules/` and `codemods/` install under `torchlint.`,
never as top-level packages; runtime dependencies are libcst and click."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_runtime_dependencies():
    requires = metadata.requires("torchlint") or []
    runtime = sorted(
        r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip()
        for r in requires
        if "extra ==" not in r and "python_version" not in r
    )
    assert runtime == ["click", "libcst"]
    extras = {r.split("extra ==")[1].strip().strip("'\"") for r in requires if "extra ==" in r}
    assert {"test", "verify"} <= extras
    assert any(r.startswith("torch") and "verify" in r for r in requires)


def test_installed_namespace_from_another_directory(tmp_path):
    probe = (
        "import importlib.util, torchlint.rules, torchlint.codemods\n"
        "assert importlib.util.find_spec('rules') is None, 'top-level rules installed'\n"
        "assert importlib.util.find_spec('codemods') is None, 'top-level codemods installed'\n"
        "from torchlint.registry import all_rules\n"
        "print(len(all_rules()))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 5


@pytest.mark.slow
def test_wheel_layout(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    if result.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{result.stderr[-2000:]}")
    (wheel,) = tmp_path.glob("torchlint-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert not {"rules", "codemods", "tests"} & tops, tops
    assert "torchlint/rules/tl301_zero_grad_set_to_none.py" in names
    assert "torchlint/codemods/calls.py" in names
    assert "torchlint/cli.py" in names
    assert "torchlint/verify/_child.py" in names
    assert "torchlint/verify/_program_child.py" in names
    assert "torchlint/verify/_bootstrap/sitecustomize.py" in names  # package data
    assert "torchlint/docs.py" in names
    # The license that pyproject.toml declares ships in the wheel.
    assert any(n.endswith(".dist-info/LICENSE") or n.endswith("/licenses/LICENSE") for n in names), names


def test_license_file_matches_the_declared_license():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    license_text = (ROOT / "LICENSE").read_text()
    assert declared == {"text": "MIT"}
    assert license_text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in license_text
