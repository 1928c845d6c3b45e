"""The output formats users bring from Ruff and CI systems (#16): grouped,
junit, gitlab; SARIF fingerprints that code scanning can track across commits;
`rule` as JSON and by name."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.helpers import CONV_BN_MODULE, ZERO_GRAD_STEP
from tests.test_cli import run

SOURCE = CONV_BN_MODULE + "\n\n" + ZERO_GRAD_STEP + """\n\ndef step2(optimizer, model, batch):
    optimizer.zero_grad(set_to_none=False)
"""


def _check(runner, fmt: str, *paths: str):
    result = run(runner, "check", *paths, "--output-format", fmt)
    assert result.exit_code == 1, result.output
    return result.stdout


def test_grouped(runner, workdir):
    (workdir / "a.py").write_text(SOURCE)
    (workdir / "b.py").write_text(SOURCE)
    out = _check(runner, "grouped", "a.py", "b.py")
    assert out.startswith("a.py:\n  8:21 TL401 ")
    assert "\n  16:5 TL301 " in out
    assert "\n\nb.py:\n  8:21 TL401 " in out
    assert "Found 6 errors." in out


def test_junit_is_valid_xml_with_a_failure_per_finding(runner, workdir):
    (workdir / "a.py").write_text(SOURCE)
    root = ET.fromstring(_check(runner, "junit", "a.py"))
    assert root.tag == "testsuites" and root.get("tests") == "3" and root.get("failures") == "3"
    (suite,) = root
    assert suite.get("name") == "a.py"
    cases = [(c.get("name"), c.get("line")) for c in suite]
    assert cases == [("org.torchlint.TL401", "8"), ("org.torchlint.TL301", "16"), ("org.torchlint.TL301", "22")]
    assert "set_to_none" in suite[1][0].get("message")


def test_gitlab_fingerprints_are_unique_and_survive_edits_above(runner, workdir):
    (workdir / "a.py").write_text(SOURCE)
    before = json.loads(_check(runner, "gitlab", "a.py"))
    fingerprints = [i["fingerprint"] for i in before]
    assert len(set(fingerprints)) == 3  # the two identical zero_grad lines get two
    assert before[0]["location"] == {"path": "a.py", "lines": {"begin": 8, "end": 8}}
    assert before[0]["check_name"] == "TL401"
    (workdir / "a.py").write_text("# a new header comment\n\n" + SOURCE)
    after = json.loads(_check(runner, "gitlab", "a.py"))
    assert [i["fingerprint"] for i in after] == fingerprints
    assert after[0]["location"]["lines"]["begin"] == 10


def test_sarif_partial_fingerprints_and_base_uri(runner, workdir):
    (workdir / "a.py").write_text(SOURCE)
    sarif = json.loads(_check(runner, "sarif", "a.py"))
    run_ = sarif["runs"][0]
    assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == Path.cwd().as_uri() + "/"
    result = run_["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "a.py", "uriBaseId": "%SRCROOT%"}
    first = [r["partialFingerprints"]["torchlintFingerprint/v1"] for r in run_["results"]]
    (workdir / "a.py").write_text("import os\n" + SOURCE)
    moved = json.loads(_check(runner, "sarif", "a.py"))["runs"][0]["results"]
    assert [r["partialFingerprints"]["torchlintFingerprint/v1"] for r in moved] == first
    # A changed line is a new alert.
    (workdir / "a.py").write_text(SOURCE.replace("nn.Conv2d(3, 8, 3)", "nn.Conv2d(3, 16, 3)").replace(
        "BatchNorm2d(8)", "BatchNorm2d(16)"))
    changed = json.loads(_check(runner, "sarif", "a.py"))["runs"][0]["results"]
    assert changed[0]["partialFingerprints"] != run_["results"][0]["partialFingerprints"]


def test_output_format_from_configuration(runner, workdir):
    (workdir / "pyproject.toml").write_text('[tool.torchlint]\noutput-format = "junit"\n')
    (workdir / "a.py").write_text(SOURCE)
    assert _check(runner, "junit", "a.py").startswith("<?xml")
    result = run(runner, "check", "a.py")
    assert result.stdout.startswith("<?xml")


def test_rule_by_name_and_as_json(runner):
    by_name = run(runner, "rule", "create-then-move")
    assert by_name.exit_code == 0 and "TL201" in by_name.output
    as_json = json.loads(run(runner, "rule", "TL201", "--output-format", "json").output)
    assert as_json["code"] == "TL201" and as_json["name"] == "create-then-move"
    assert "## Fix safety" in as_json["explanation"]
    everything = json.loads(run(runner, "rule", "--all", "--output-format", "json").output)
    assert len(everything) >= 24 and {"code", "name", "default", "fix"} <= set(everything[0])
    unknown = run(runner, "rule", "no-such-rule")
    assert unknown.exit_code == 2 and "unknown rule `no-such-rule`" in unknown.output
