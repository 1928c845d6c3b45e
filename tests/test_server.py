"""`torchlint server`: a real editor session over LSP (JSON-RPC on stdio).

The client here speaks the protocol by hand (Content-Length framing), as an
editor does, against `torchlint server` in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import queue
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.helpers import CONV_BN_MODULE

pytest.importorskip("pygls")

from torchlint.server import _minimal_edit, utf16_column  # noqa: E402

SOURCE = CONV_BN_MODULE


class Client:
    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torchlint", "server"], cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.messages: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.messages.put(json.loads(out.read(length)))

    def send(self, message: Dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            m = self.messages.get(timeout=60)
            if m.get("id") == self.next_id and "method" not in m:
                assert "error" not in m, m
                return m.get("result")

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def wait_for(self, method: str) -> Dict[str, Any]:
        while True:
            m = self.messages.get(timeout=60)
            if m.get("method") == method:
                return m["params"]

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture
def client(tmp_path: Path):
    c = Client(tmp_path)
    c.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
    c.notify("initialized", {})
    yield c
    c.close()


def _open(client: Client, path: Path, text: str, version: int = 1) -> List[Dict[str, Any]]:
    path.write_text(text)
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": path.as_uri(), "languageId": "python", "version": version, "text": text}})
    return client.wait_for("textDocument/publishDiagnostics")["diagnostics"]


def test_findings_are_published_on_open_and_change(client, tmp_path):
    path = tmp_path / "model.py"
    found = _open(client, path, SOURCE)
    assert [(d["code"], d["range"]["start"]) for d in found] == [("TL401", {"line": 7, "character": 20})]
    assert found[0]["source"] == "torchlint"
    client.notify("textDocument/didChange", {
        "textDocument": {"uri": path.as_uri(), "version": 2},
        "contentChanges": [{"range": {"start": {"line": 7, "character": 37}, "end": {"line": 7, "character": 38}},
                            "text": ", bias=False)"}],
    })
    assert client.wait_for("textDocument/publishDiagnostics")["diagnostics"] == []


def test_quick_fix_and_noqa_actions(client, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.torchlint]\nunsafe-fixes = true\n")
    path = tmp_path / "model.py"
    found = _open(client, path, SOURCE)
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": path.as_uri()}, "range": found[0]["range"], "context": {"diagnostics": found},
    })
    titles = [a["title"] for a in actions]
    assert "Pass `bias=False` (TL401) (unsafe)" in titles, titles
    assert "Disable TL401 for this line" in titles
    fix = next(a for a in actions if a["title"].endswith("(unsafe)"))
    assert not fix.get("isPreferred")
    edit = fix["edit"]["documentChanges"][0]["edits"][0]
    lines = SOURCE.split("\n")
    start, end = edit["range"]["start"], edit["range"]["end"]
    assert start["line"] == end["line"] == 7
    fixed_line = lines[7][:start["character"]] + edit["newText"] + lines[7][end["character"]:]
    assert fixed_line == "        self.conv = nn.Conv2d(3, 8, 3, bias=False)"


def test_unsafe_fixes_are_not_offered_unless_configured(client, tmp_path):
    path = tmp_path / "model.py"
    found = _open(client, path, SOURCE)
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": path.as_uri()}, "range": found[0]["range"], "context": {"diagnostics": found},
    })
    assert [a["title"] for a in actions] == ["Disable TL401 for this line"]


def test_configuration_of_the_file_applies(client, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[tool.torchlint]\nignore = ["TL401"]\n')
    assert _open(client, tmp_path / "sub" / "model.py", SOURCE) == []


def test_syntax_errors_are_diagnostics_not_crashes(client, tmp_path):
    found = _open(client, tmp_path / "broken.py", "import torch\ndef f(:\n")
    assert [d["code"] for d in found] == ["SyntaxError"]
    assert found[0]["severity"] == 1
    # The server is still alive.
    assert _open(client, tmp_path / "model.py", SOURCE, version=1)


def test_utf16_columns():
    assert utf16_column("x = 1", 4) == 4
    assert utf16_column("s = '😀'; y", 9) == 10  # the emoji is two UTF-16 units
    assert _minimal_edit("abcdef", "abXYef") == (2, 4, "XY")
    assert _minimal_edit("same", "same") == (4, 4, "")


def test_without_pygls_the_command_says_what_to_install(tmp_path):
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def fake(name, *a, **k):\n"
        "    if name.startswith('pygls'):\n"
        "        raise ImportError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = fake\n"
        "from torchlint.cli import main\n"
        "sys.argv = ['torchlint', 'server']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2
    assert "needs pygls" in result.stderr
    assert "Traceback" not in result.stderr
