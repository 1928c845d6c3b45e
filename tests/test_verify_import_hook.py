"""The import hook of program verification (``torchlint/verify/_import_hook.py``
and ``_bootstrap/sitecustomize.py``), without torch: fixed modules are served from
memory in the program's process and in the processes it spawns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchlint.verify._import_hook import ENV
from torchlint.verify.program import BOOTSTRAP

def _interpreters():
    """This Python, and Pythons 3.12+ found on PATH or in pyenv's versions (their tracer differs)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in (12, 13, 14)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(str(p) for p in pyenv.glob("3.1[2-9]*/bin/python3.1[2-9]"))
    found = [sys.executable]
    for path in candidates:
        if path and path not in found and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            found.append(path)
    return found


@pytest.fixture(params=_interpreters())
def python(request) -> str:
    return request.param


MAIN = """\
import multiprocessing as mp
import sys

import helper


def worker_value(_):
    import helper as h
    return (h.VALUE, where())


def where():
    return "disk"


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(1) as pool:
        spawned = pool.map(worker_value, [0])[0]
    print(helper.VALUE, where(), spawned[0], spawned[1], helper.__file__ == HELPER, sep=",")
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    main = tmp_path / "main.py"
    main.write_text(MAIN.replace("HELPER", repr(str(tmp_path / "helper.py"))))
    return main


def _run(tmp_path: Path, main: Path, sources: dict, python: str = sys.executable) -> subprocess.CompletedProcess:
    sources_file = tmp_path / "sources.json"
    sources_file.write_text(json.dumps({"sources": sources}))
    env = dict(os.environ, PYTHONPATH=str(BOOTSTRAP), **{ENV: str(sources_file)})
    return subprocess.run([python, str(main)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def test_fixed_modules_are_served_in_the_process_and_in_spawned_children(tmp_path, python):
    main = _project(tmp_path)
    fixed_main = main.read_text().replace('return "disk"', 'return "fixed"')
    # sitecustomize runs the served __main__ only for spawned processes; the
    # program's own __main__ is run by _program_child, so here run the fixed text.
    main.with_name("fixed_main.py").write_text(fixed_main)
    sources = {str(tmp_path / "helper.py"): "VALUE = 2\n", str(main.with_name("fixed_main.py")): fixed_main}
    result = _run(tmp_path, main.with_name("fixed_main.py"), sources, python)
    assert result.returncode == 0, result.stderr
    # helper is 2 in both processes, the spawned one re-ran the main script
    # from the served text, and helper kept its real file name.
    assert result.stdout.strip() == "2,fixed,2,fixed,True"
    assert (tmp_path / "helper.py").read_text() == "VALUE = 1\n"  # nothing written
    assert not list(tmp_path.rglob("helper*.pyc"))  # no bytecode cache of the served text either


def test_spawned_main_gets_the_served_text_not_the_file(tmp_path, python):
    main = _project(tmp_path)
    served = main.read_text().replace('return "disk"', 'return "served"')
    result = _run(tmp_path, main, {str(main): served}, python)
    assert result.returncode == 0, result.stderr
    # The parent ran main.py from disk (python runs it directly); the spawned
    # worker re-ran it as __mp_main__ from the served text.
    assert result.stdout.strip() == "1,disk,1,served,True"


def test_without_sources_nothing_changes_and_the_bootstrap_leaves_sys_path(tmp_path):
    main = _project(tmp_path)
    result = _run(tmp_path, main, {})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1,disk,1,disk,True"
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nprint(any('_bootstrap' in p for p in sys.path))\n")
    result = _run(tmp_path, probe, {})
    assert result.stdout.strip() == "False"


def test_a_shadowed_sitecustomize_still_runs(tmp_path):
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITECUSTOMIZE = True\n")
    probe = tmp_path / "probe.py"
    probe.write_text("import builtins\nprint(getattr(builtins, 'USER_SITECUSTOMIZE', False))\n")
    sources_file = tmp_path / "sources.json"
    sources_file.write_text(json.dumps({"sources": {}}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(BOOTSTRAP), str(own)]), **{ENV: str(sources_file)})
    result = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "True", result.stderr


def test_tracebacks_show_the_fixed_lines(tmp_path):
    # As the verifier formats them (the traceback module, which reads linecache).
    (tmp_path / "helper.py").write_text("def boom():\n    return 1\n")
    main = tmp_path / "main.py"
    main.write_text("import sys, traceback\nimport helper\ntry:\n    helper.boom()\n"
                    "except ValueError:\n    traceback.print_exc()\n    sys.exit(1)\n")
    served = textwrap.dedent("""\
        def boom():
            raise ValueError("served")
    """)
    result = _run(tmp_path, main, {str(tmp_path / "helper.py"): served})
    assert result.returncode == 1
    assert 'raise ValueError("served")' in result.stderr


TRACE_PROBE = """\
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("probe_child", sys.argv[1])
child = importlib.util.module_from_spec(spec)
spec.loader.exec_module(child)
import target
tracer = child.line_tracer({target.__file__: [2, 3, 6, 9]})
tracer.start()
target.used()
target.used()
tracer.stop()
target.unused()  # after stop: not recorded
print(type(tracer).__name__, json.dumps(sorted(line for _, line in tracer.hits)))
"""

TARGET = """\
def used():
    x = 1
    return x


def unused():
    return 2


y = 3
"""


def test_line_tracer_records_only_the_wanted_lines_that_run(tmp_path, python):
    """sys.settrace on Python 3.11, sys.monitoring on 3.12+ (where an interpreter is installed)."""
    from torchlint.verify import program

    (tmp_path / "target.py").write_text(TARGET)
    (tmp_path / "probe.py").write_text(TRACE_PROBE)
    child = Path(program.__file__).with_name("_program_child.py")
    result = subprocess.run([python, str(tmp_path / "probe.py"), str(child)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    kind, lines = result.stdout.split(" ", 1)
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True,
                             text=True).stdout.strip()
    assert kind == ("_MonitoringLines" if version == "True" else "_SetTraceLines")
    assert json.loads(lines) == [2, 3]  # not 6 (never called while tracing), not 9 (ran at import)
