"""`torchlint server`: a real editor session over LSP (JSON-RPC on stdio).

The client here speaks the protocol by hand (Content-Length framing), as an
editor does, against `torchlint server` in a subprocess: Python files and
notebook documents (LSP 3.17), hover, code actions applied to the text,
debounced changes, and the workspace's cross-module facts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import queue
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.helpers import CONV_BN_MODULE

pytest.importorskip("pygls")

from torchlint.reporters import rule_url  # noqa: E402
from torchlint.server import _minimal_edit, utf16_column  # noqa: E402
from torchlint.server.text import characters, units, with_noqa  # noqa: E402

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

    def wait_for(self, method: str, timeout: float = 60) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            m = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            if m.get("method") == method:
                return m["params"]

    def diagnostics_of(self, uri: str, timeout: float = 60) -> Dict[str, Any]:
        """The next diagnostics published for ``uri`` (skipping other documents')."""
        while True:
            params = self.wait_for("textDocument/publishDiagnostics", timeout)
            if params["uri"] == uri:
                return params

    def quiet(self, seconds: float) -> List[Dict[str, Any]]:
        """Every message that arrives within ``seconds``."""
        out, deadline = [], time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                out.append(self.messages.get(timeout=left))
            except queue.Empty:
                break
        return out

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


# -- applying what the server sends -------------------------------------------------


def _offset(text: str, position: Dict[str, int]) -> int:
    lines = text.split("\n")
    return sum(len(line) + 1 for line in lines[:position["line"]]) + position["character"]  # ASCII texts


def _apply(texts: Dict[str, str], edit: Dict[str, Any]) -> Dict[str, str]:
    out = dict(texts)
    for change in edit["documentChanges"]:
        uri = change["textDocument"]["uri"]
        text = out[uri]
        for e in sorted(change["edits"], key=lambda e: _offset(text, e["range"]["start"]), reverse=True):
            start, end = _offset(text, e["range"]["start"]), _offset(text, e["range"]["end"])
            text = text[:start] + e["newText"] + text[end:]
        out[uri] = text
    return out


def _actions(client: Client, uri: str, diagnostics, only=None) -> List[Dict[str, Any]]:
    context: Dict[str, Any] = {"diagnostics": diagnostics}
    if only is not None:
        context["only"] = only
    rng = diagnostics[0]["range"] if diagnostics else {"start": {"line": 0, "character": 0},
                                                       "end": {"line": 0, "character": 0}}
    return client.request("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": rng,
                                                      "context": context})


LOOP = """\
import torch


def train(model, loader, optimizer, device):
    for x in loader:
        mask = torch.ones(4).to(device)
        loss = model(x * mask).sum()
        loss.backward()
        optimizer.zero_grad(set_to_none=False)
        optimizer.step()
"""


def test_diagnostics_carry_code_link_and_fixability(client, tmp_path):
    found = _open(client, tmp_path / "train.py", LOOP)
    by_code = {d["code"]: d for d in found}
    assert set(by_code) == {"TL201", "TL301"}
    assert by_code["TL201"]["codeDescription"]["href"] == rule_url("TL201", "create-then-move")
    assert rule_url("TL201", "create-then-move").endswith("docs/rules.md#tl201-create-then-move")
    assert by_code["TL201"]["data"] == {"fixable": "safe", "fix": "Pass `device=` to `torch.ones`", "unsafe": False}
    assert by_code["TL301"]["data"]["fixable"] == "unsafe" and by_code["TL301"]["data"]["unsafe"] is True


def test_hover_on_a_finding_shows_the_rule_documentation(client, tmp_path):
    path = tmp_path / "train.py"
    found = _open(client, path, LOOP)
    tl201 = next(d for d in found if d["code"] == "TL201")
    inside = {"line": tl201["range"]["start"]["line"], "character": tl201["range"]["start"]["character"] + 3}
    hover = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()}, "position": inside})
    text = hover["contents"]["value"]
    assert hover["contents"]["kind"] == "markdown"
    assert text.startswith("# TL201: create-then-move\n")
    assert "## What it does" in text and rule_url("TL201", "create-then-move") in text
    assert hover["range"] == tl201["range"]
    elsewhere = client.request("textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                      "position": {"line": 0, "character": 2}})
    assert elsewhere is None


def test_quick_fix_fix_all_and_noqa_apply(client, tmp_path):
    path = tmp_path / "train.py"
    uri = path.as_uri()
    found = _open(client, path, LOOP)
    tl201 = [d for d in found if d["code"] == "TL201"]
    actions = {a["title"]: a for a in _actions(client, uri, tl201)}
    fix = actions["Pass `device=` to `torch.ones` (TL201)"]
    assert fix["kind"] == "quickfix" and fix["isPreferred"] is True
    assert fix["diagnostics"] == tl201
    fixed = _apply({uri: LOOP}, fix["edit"])[uri]
    assert "mask = torch.ones(4, device=device)\n" in fixed
    # Every safe fix of the file, offered beside the finding's own (TL301's is unsafe: not applied).
    whole = _apply({uri: LOOP}, actions["Fix all safe torchlint fixes in this file"]["edit"])[uri]
    assert whole == fixed
    noqa = _apply({uri: LOOP}, actions["Disable TL201 for this line"]["edit"])[uri]
    assert "mask = torch.ones(4).to(device)  # noqa: TL201\n" in noqa
    # The source action applies the same safe fixes; the quick fixes are not in it.
    source = _actions(client, uri, [], only=["source.fixAll"])
    assert [a["kind"] for a in source] == ["source.fixAll.torchlint"]
    assert _apply({uri: LOOP}, source[0]["edit"])[uri] == fixed
    # The fixed text, sent back as an edit, has only the unsafe TL301 left.
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": fixed}]})
    assert [d["code"] for d in client.diagnostics_of(uri)["diagnostics"]] == ["TL301"]


def test_noqa_action_adds_to_an_existing_noqa_comment():
    assert with_noqa("x = f()  # noqa: TL101", "TL201") == "x = f()  # noqa: TL101, TL201"
    assert with_noqa("x = f()  # noqa: TL101 reason", "TL201") == "x = f()  # noqa: TL101, TL201 reason"
    assert with_noqa("x = f()  # noqa", "TL201") is None
    assert with_noqa("x = f()  # noqa: TL201", "TL201") is None
    assert with_noqa("x = f()   ", "TL201") == "x = f()  # noqa: TL201"
    assert with_noqa("x = f()\r", "TL201") == "x = f()  # noqa: TL201\r"


def test_changes_are_debounced(client, tmp_path):
    path = tmp_path / "train.py"
    uri = path.as_uri()
    _open(client, path, LOOP)
    text = LOOP
    for version in range(2, 7):  # five keystrokes, faster than the debounce delay
        text = text.replace("torch.ones(4)", f"torch.ones({version})")
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                 "contentChanges": [{"text": text}]})
    published = client.diagnostics_of(uri)
    assert published["version"] == 6  # only the last text was analysed
    assert [d["code"] for d in published["diagnostics"]] == ["TL201", "TL301"]
    later = [m for m in client.quiet(1.0) if m.get("method") == "textDocument/publishDiagnostics"]
    assert later == []


def test_a_change_is_not_analysed_before_the_debounce_delay(client, tmp_path):
    from torchlint.server.protocol import DEBOUNCE_SECONDS

    path = tmp_path / "train.py"
    uri = path.as_uri()
    _open(client, path, LOOP)
    sent = time.monotonic()
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": LOOP.replace("ones(4)", "ones(5)")}]})
    client.diagnostics_of(uri)
    assert time.monotonic() - sent >= DEBOUNCE_SECONDS
    # A save is analysed at once (and so is an open).
    sent = time.monotonic()
    client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    client.diagnostics_of(uri)
    assert time.monotonic() - sent < DEBOUNCE_SECONDS + 5


def test_columns_follow_the_negotiated_position_encoding(tmp_path):
    c = Client(tmp_path)
    try:
        result = c.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(),
                                          "capabilities": {"general": {"positionEncodings": ["utf-8"]}}})
        assert result["capabilities"]["positionEncoding"] == "utf-8"
        c.notify("initialized", {})
        text = LOOP.replace("        mask = torch", "        é = 1; mask = torch")
        found = _open(c, tmp_path / "train.py", text)
        tl201 = next(d for d in found if d["code"] == "TL201")
        line = text.split("\n")[5]
        assert tl201["range"]["start"]["character"] == len(line[:line.index("torch.ones")].encode("utf-8"))
    finally:
        c.close()


def test_code_units():
    assert units("s = '😀'; y", 9, "utf-16") == 10
    assert units("s = '😀'; y", 9, "utf-8") == 12
    assert units("s = '😀'; y", 9, "utf-32") == 9
    for encoding in ("utf-8", "utf-16", "utf-32"):
        assert characters("s = '😀'; y", units("s = '😀'; y", 9, encoding), encoding) == 9


# -- notebooks ------------------------------------------------------------------------

CELLS = [
    (2, "%matplotlib inline\nimport torch\ndevice = 'cuda'"),
    (1, "# Training\nThe loop below."),
    (2, "for step in range(100):\n    !nvidia-smi\n    mask = torch.ones(4).to(device)"),
]


def _open_notebook(client: Client, path: Path, cells=CELLS):
    uri = path.as_uri()
    cell_uris = [f"vscode-notebook-cell:{path}#ch{i}" for i in range(len(cells))]
    client.notify("notebookDocument/didOpen", {
        "notebookDocument": {"uri": uri, "notebookType": "jupyter-notebook", "version": 1,
                             "cells": [{"kind": kind, "document": u} for (kind, _), u in zip(cells, cell_uris)]},
        "cellTextDocuments": [{"uri": u, "languageId": "python" if kind == 2 else "markdown", "version": 1,
                               "text": text} for (kind, text), u in zip(cells, cell_uris)],
    })
    return uri, cell_uris


def _cell_diagnostics(client: Client, cell_uris: List[str]) -> Dict[str, List[Dict[str, Any]]]:
    """The next diagnostics of each code cell of a notebook."""
    wanted = {cell_uris[0], cell_uris[2]}
    out: Dict[str, List[Dict[str, Any]]] = {}
    while set(out) != wanted:
        params = client.wait_for("textDocument/publishDiagnostics")
        out[params["uri"]] = params["diagnostics"]
    return out


def test_notebook_cells_get_their_own_diagnostics(client, tmp_path):
    nb_uri, cell_uris = _open_notebook(client, tmp_path / "train.ipynb")
    published = _cell_diagnostics(client, cell_uris)
    assert published[cell_uris[0]] == []
    (tl201,) = published[cell_uris[2]]
    assert tl201["code"] == "TL201"
    # In the cell's own coordinates: line 3 of cell 3, after the masked `!nvidia-smi`.
    assert tl201["range"]["start"] == {"line": 2, "character": 11}
    assert tl201["range"]["end"] == {"line": 2, "character": 35}
    # Editing a cell re-checks the notebook: the finding goes.
    client.notify("notebookDocument/didChange", {
        "notebookDocument": {"uri": nb_uri, "version": 2},
        "change": {"cells": {"textContent": [{
            "document": {"uri": cell_uris[2], "version": 2},
            "changes": [{"range": {"start": {"line": 2, "character": 11}, "end": {"line": 2, "character": 35}},
                         "text": "torch.ones(4, device=device)"}],
        }]}},
    })
    assert _cell_diagnostics(client, cell_uris)[cell_uris[2]] == []
    client.notify("notebookDocument/didClose", {"notebookDocument": {"uri": nb_uri},
                                                "cellTextDocuments": [{"uri": u} for u in cell_uris]})
    cleared = {client.wait_for("textDocument/publishDiagnostics")["uri"] for _ in range(2)}
    assert cleared == {cell_uris[0], cell_uris[2]}


def test_notebook_quick_fix_noqa_and_hover_inside_a_cell(client, tmp_path):
    nb_uri, cell_uris = _open_notebook(client, tmp_path / "train.ipynb")
    found = _cell_diagnostics(client, cell_uris)[cell_uris[2]]
    actions = {a["title"]: a for a in _actions(client, cell_uris[2], found)}
    texts = {u: text for u, (_, text) in zip(cell_uris, CELLS)}
    fixed = _apply(texts, actions["Pass `device=` to `torch.ones` (TL201)"]["edit"])
    assert fixed[cell_uris[2]] == "for step in range(100):\n    !nvidia-smi\n    mask = torch.ones(4, device=device)"
    assert fixed[cell_uris[0]] == texts[cell_uris[0]]  # other cells untouched
    assert _apply(texts, actions["Fix all safe torchlint fixes in this notebook"]["edit"]) == fixed
    noqa = _apply(texts, actions["Disable TL201 for this line"]["edit"])
    assert noqa[cell_uris[2]].endswith("mask = torch.ones(4).to(device)  # noqa: TL201")
    hover = client.request("textDocument/hover", {"textDocument": {"uri": cell_uris[2]},
                                                  "position": {"line": 2, "character": 14}})
    assert hover["contents"]["value"].startswith("# TL201: create-then-move")


def test_a_noqa_in_a_cell_is_honoured(client, tmp_path):
    cells = [CELLS[0], CELLS[1], (2, CELLS[2][1] + "  # noqa: TL201")]
    _, cell_uris = _open_notebook(client, tmp_path / "train.ipynb", cells)
    assert _cell_diagnostics(client, cell_uris)[cell_uris[2]] == []


# -- the workspace's cross-module facts ---------------------------------------------------


def _facts_workspace(tmp_path: Path):
    from tests.test_project_index import OPS, TRAIN

    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "train.py").write_text(TRAIN)


def test_callers_in_other_files_make_a_function_hot_and_refresh(client, tmp_path):
    from tests.test_project_index import ONCE

    _facts_workspace(tmp_path)
    ops = tmp_path / "ops.py"
    found = _open(client, ops, ops.read_text())
    assert [(d["code"], d["range"]["start"]["line"]) for d in found] == [("TL201", 4)]
    assert found[0]["message"].endswith("\nruns every step: called from train.py:7")
    (site,) = found[0]["relatedInformation"]
    assert site["location"]["uri"] == (tmp_path / "train.py").as_uri()
    assert site["location"]["range"]["start"] == {"line": 6, "character": 0}
    # Its fix is offered too (the code actions use the same facts).
    titles = [a["title"] for a in _actions(client, ops.as_uri(), found)]
    assert "Pass `device=` to `torch.ones` (TL201)" in titles, titles
    # The caller changes on disk (the editor's file watcher says so): the finding goes.
    (tmp_path / "train.py").write_text(ONCE)
    client.notify("workspace/didChangeWatchedFiles", {"changes": [
        {"uri": (tmp_path / "train.py").as_uri(), "type": 2}]})
    assert client.diagnostics_of(ops.as_uri())["diagnostics"] == []


def test_saving_a_caller_in_the_editor_refreshes_the_open_file(client, tmp_path):
    from tests.test_project_index import ONCE, TRAIN

    _facts_workspace(tmp_path)
    (tmp_path / "train.py").write_text(ONCE)
    ops = tmp_path / "ops.py"
    assert _open(client, ops, ops.read_text()) == []
    train = tmp_path / "train.py"
    client.notify("textDocument/didOpen", {"textDocument": {"uri": train.as_uri(), "languageId": "python",
                                                            "version": 1, "text": ONCE}})
    client.diagnostics_of(train.as_uri())
    train.write_text(TRAIN)
    client.notify("textDocument/didChange", {"textDocument": {"uri": train.as_uri(), "version": 2},
                                             "contentChanges": [{"text": TRAIN}]})
    client.notify("textDocument/didSave", {"textDocument": {"uri": train.as_uri()}})
    assert [d["code"] for d in client.diagnostics_of(ops.as_uri())["diagnostics"]] == ["TL201"]


def test_file_watchers_are_registered_when_the_client_can(tmp_path):
    c = Client(tmp_path)
    try:
        c.request("initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {
            "workspace": {"didChangeWatchedFiles": {"dynamicRegistration": True}}}})
        c.notify("initialized", {})
        while True:
            m = c.messages.get(timeout=60)
            if m.get("method") == "client/registerCapability":
                break
        c.send({"id": m["id"], "result": None})
        (registration,) = m["params"]["registrations"]
        assert registration["method"] == "workspace/didChangeWatchedFiles"
        globs = [w["globPattern"] for w in registration["registerOptions"]["watchers"]]
        assert globs == ["**/*.py", "**/pyproject.toml", "**/torchlint.toml"]
    finally:
        c.close()


def test_a_changed_configuration_applies_to_open_files(client, tmp_path):
    path = tmp_path / "train.py"
    assert {d["code"] for d in _open(client, path, LOOP)} == {"TL201", "TL301"}
    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.torchlint]\nignore = ["TL301"]\n')
    client.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": config.as_uri(), "type": 1}]})
    assert [d["code"] for d in client.diagnostics_of(path.as_uri())["diagnostics"]] == ["TL201"]


# -- the incremental parse ------------------------------------------------------------


def _edits(text: str, rng) -> str:
    """One edit as people make them: a line added, removed or indented, a character typed or deleted."""
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    row = rng.randrange(len(starts))
    start = starts[row]
    end = starts[row + 1] if row + 1 < len(starts) else len(text)
    indent = text[start:end][: len(text[start:end]) - len(text[start:end].lstrip(" "))]
    kind = rng.random()
    if kind < 0.25:
        added = rng.choice(["y = 2", "# note", "pass", "z = f(1)", f"if a:\n{indent}    b = 1"])
        return text[:start] + indent + added + "\n" + text[start:]
    if kind < 0.4:
        return text[:start] + text[end:]
    if kind < 0.55:
        return text[:start] + rng.choice(["", "    ", "\n", "# c\n", "    # c\n", "def h():\n    return 1\n"]) + text[start:]
    at = rng.randrange(len(text) + 1)
    if kind < 0.9:
        return text[:at] + rng.choice(["x", "1", " ", "\n", "(", ")", ":", "#", '"', "\\", ",", "=", "\t"]) + text[at:]
    return text[:at] + text[at + rng.randrange(1, 4):]


def test_incremental_parse_gives_the_module_of_a_full_parse():
    import random

    import libcst as cst

    from torchlint.server.incremental import IncrementalParser

    root = Path(__file__).resolve().parent.parent
    files = sorted((root / "tests" / "fixtures").glob("*/input.py")) + [root / "benchmarks" / "data" / "training_program.py"]
    rng = random.Random(16)
    compared = spliced = 0
    for path in files:
        text = path.read_text()
        parser = IncrementalParser()
        parser.parse("doc", text)
        for _ in range(15 if len(text) < 10_000 else 6):  # deep_equals of a big module is slow
            edited = _edits(text, rng)
            try:
                expected = cst.parse_module(edited)
            except cst.ParserSyntaxError:
                continue  # mid-edit: the server parses the whole text, and reports it
            text = edited
            before = parser.full_parses
            got = parser.parse("doc", text)
            compared += 1
            spliced += parser.full_parses == before
            assert got.code == expected.code and got.deep_equals(expected), (path.name, text)
    assert compared > 150 and spliced > compared / 2, (compared, spliced)


def test_incremental_parse_falls_back_where_indentation_is_decided():
    from torchlint.server.incremental import IncrementalParser

    parser = IncrementalParser()
    text = "import torch\n\n\ndef f():\n    return 1\n\n\ndef g():\n    return 2\n\n\ndef h():\n    return 3\n"
    parser.parse("doc", text)
    # Within the last function: only it and its neighbour are parsed again.
    parser.parse("doc", text.replace("return 3", "return 4"))
    assert (parser.full_parses, parser.reparsed) == (1, 2)
    # The file's first block decides LibCST's indentation unit: parsed in full.
    module = parser.parse("doc", text.replace("    return 1", "  return 1"))
    assert parser.full_parses == 2 and module.default_indent == "  "


def test_latency_benchmark_runs():
    import re

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, str(root / "benchmarks" / "server_latency.py"), "--rounds", "3"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^file +938 lines, 8 diagnostics, 3 keystrokes \(3 parsed incrementally\)$", result.stdout, re.M), result.stdout
    assert re.search(r"^parse +\d+\.\d ms", result.stdout, re.M)
    assert re.search(r"^analysis +\d+\.\d ms", result.stdout, re.M)
    assert re.search(r"^ratio analysis / parse: \d+\.\d\dx$", result.stdout, re.M)


def test_an_evaluation_function_called_without_gradients_in_another_file(client, tmp_path):
    from tests.test_eval_across_modules import EVAL, TRAIN

    (tmp_path / "evaluation.py").write_text(EVAL)
    (tmp_path / "train.py").write_text(TRAIN)
    path = tmp_path / "evaluation.py"
    assert [d["code"] for d in _open(client, path, EVAL)] == []
    # The caller drops its `no_grad` block on disk: both functions are reported.
    (tmp_path / "train.py").write_text(TRAIN.replace("with torch.no_grad():", "if True:"))
    client.notify("workspace/didChangeWatchedFiles", {"changes": [
        {"uri": (tmp_path / "train.py").as_uri(), "type": 2}]})
    assert [d["code"] for d in client.diagnostics_of(path.as_uri())["diagnostics"]] == ["TL302", "TL302"]
