"""`python lessons/NN_name.py` as a student runs it: with a Python that lacks bytesup, with no
server running (one is started for the run and stopped after it), and with --no-start-server.

The lesson scripts run as subprocesses. Where a test needs "nothing answers at the default URL",
the subprocess moves the default URL to a free port first (`DEFAULT_AT`), so a server that a
developer keeps on 8099 is neither used nor disturbed. Servers started for a run load the fast
synthetic `tiny-q8_0` (BYTESUP_MODEL), whatever the default model is.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from bytesup.llama import client
from bytesup.cli.app import app
from bytesup.llama.process import free_port
from bytesup.errors import BytesupError, ServerUnreachable
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from conftest import SMALL_READING, load_fixture
from lessonkit import recorded
from test_runner import LESSON_TOKENS

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
TEST_MODEL = "tiny-q8_0"

# Run a lesson script as __main__ with the default server URL moved to argv[1].
DEFAULT_AT = ("import runpy, sys, bytesup.llama.client as c; c.DEFAULT_URL = sys.argv[1]; "
              "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def lesson_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BYTESUP_SERVER", "BYTESUP_REEXEC")}
    return {**env, "BYTESUP_MODEL": TEST_MODEL, "COLUMNS": "200", **extra}


def run_lesson(lesson: str, *args: str, default_url: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DEFAULT_AT, default_url, str(LESSONS / f"{lesson}.py"), *args],
                          capture_output=True, text=True, env=lesson_env(), timeout=timeout)


def servers_on(port: int) -> list[psutil.Process]:
    """bytesup.llama.embedded processes listening on `port`, whoever their parent is now."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "bytesup.llama.embedded" in cmdline and str(port) in cmdline:
            found.append(proc)
    return found


def state_folder(port: int) -> Path:
    return Path(os.environ["BYTESUP_STATE"]) / f"server-{port}"


# --- a Python without bytesup ----------------------------------------------------------------

def project_copy(tmp_path: Path, venv_python: list[str] | None) -> Path:
    """lessons/ (one lesson and the guard's helper) in a folder of its own, with a .venv/bin/python
    that runs the command `venv_python` when given."""
    root = tmp_path / "project"
    (root / "lessons").mkdir(parents=True)
    for name in ("_venv.py", "02_tokens_and_embeddings.py"):
        shutil.copy(LESSONS / name, root / "lessons" / name)
    if venv_python is not None:
        python = root / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f"#!/bin/sh\nexec {shlex.join(venv_python)} \"$@\"\n")
        python.chmod(0o755)
    return root


def bare_python(script: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The script run by a Python that cannot import bytesup: -I -S leaves out every site-packages."""
    assert subprocess.run([sys.executable, "-I", "-S", "-c", "import bytesup"], capture_output=True).returncode != 0
    return subprocess.run([sys.executable, "-I", "-S", str(script), *args], capture_output=True, text=True,
                          env=env or lesson_env(), timeout=300)


def test_without_bytesup_the_lesson_reruns_with_the_projects_venv(tmp_path):
    root = project_copy(tmp_path, venv_python=[sys.executable])
    out = tmp_path / "run"
    lesson = root / "lessons" / "02_tokens_and_embeddings.py"
    res = bare_python(lesson, "--replay", str(recorded("02_tokens_and_embeddings")), "--out", str(out),
                      env=lesson_env(BYTESUP_LESSONS=str(root / "lessons")))
    assert res.returncode == 0, res.stderr
    first = res.stderr.splitlines()[0]
    assert first.startswith("bytesup is not installed for ") and f"with {root / '.venv' / 'bin' / 'python'}" in first
    assert "Tokens and embeddings" in res.stdout  # the lesson's tables, printed
    assert (out / "02_tokens_and_embeddings.json").is_file()
    assert "Traceback" not in res.stderr


def test_without_bytesup_or_venv_it_says_what_to_run(tmp_path):
    root = project_copy(tmp_path, venv_python=None)
    res = bare_python(root / "lessons" / "02_tokens_and_embeddings.py", "--print")
    assert res.returncode == 1
    assert "make install" in res.stderr and "activate" in res.stderr and str(root) in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_a_venv_without_bytesup_is_tried_once_then_explained(tmp_path):
    # The .venv's Python cannot import bytesup either: one re-run, then the explanation, no loop.
    root = project_copy(tmp_path, venv_python=[sys.executable, "-I", "-S"])
    res = bare_python(root / "lessons" / "02_tokens_and_embeddings.py")
    assert res.returncode == 1
    assert res.stderr.count("bytesup is not installed for") == 1
    assert "cannot import bytesup" in res.stderr and "make install" in res.stderr
    assert "Traceback" not in res.stderr


# --- no server running -----------------------------------------------------------------------

@pytest.mark.integration
def test_nothing_listening_a_server_is_started_for_the_run_and_stopped(tmp_path):
    nobody = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "run"
    began = time.monotonic()
    res = run_lesson("02_tokens_and_embeddings", "--out", str(out), default_url=nobody)
    elapsed = time.monotonic() - began
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if line.startswith("No server answers")]
    assert len(said) == 1 and nobody in said[0] and "for this run" in said[0]
    assert "Text → tokens → text" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    eng = manifest["engine"]
    assert eng["started_for_run"] is True and eng["engine"] in ("embedded", "llama-server")
    assert eng["model"].endswith(f"{TEST_MODEL}.gguf") and manifest["model"]["path"] == eng["model"]
    port = int(eng["flags"]["--port"])
    assert eng["url"] == f"http://127.0.0.1:{port}" and eng["url"] != nobody
    assert manifest["lessons"]["02_tokens_and_embeddings"]["status"] == "ok"
    # Nothing is left: no server process, no state folder.
    assert not servers_on(port)
    assert not (psutil.pid_exists(eng["pid"]) and "bytesup.llama.embedded" in psutil.Process(eng["pid"]).cmdline())
    assert not state_folder(port).exists()
    print(f"lesson 02 with a server started for the run: {elapsed:.1f} s")


def _measuring(out: Path, lesson_id: str, port: int) -> bool:
    """Whether the run's manifest (written whole, so never read half-done) says the lesson runs, and the server's
    /metrics counters have seen its first prompt."""
    try:
        if json.loads((out / "manifest.json").read_text())["lessons"][lesson_id]["status"] != "running":
            return False
        with client.LlamaServer(f"http://127.0.0.1:{port}", timeout=5) as server:
            seen = server.metrics()
    except (OSError, ValueError, KeyError, BytesupError):
        return False
    return seen.get("llamacpp:prompt_tokens_total", 0) > 0


@pytest.mark.integration
def test_sigterm_mid_lesson_stops_the_server_started_for_the_run(tmp_path):
    nobody = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "run"
    # the run's bandwidth reading comes before the lesson's first prompt: the small one (see conftest)
    proc = subprocess.Popen([sys.executable, "-c", f"{SMALL_READING}; {DEFAULT_AT}", nobody, str(LESSONS / "06_attention_kv_cache.py"),
                             "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=lesson_env())
    try:
        said = ""
        while not said.startswith("No server answers"):
            said = proc.stderr.readline()
            assert said or proc.poll() is None, "the lesson ended before it started a server"
        servers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "bytesup.llama.embedded" in p.cmdline()]
        assert len(servers) == 1
        port = int(servers[0].cmdline()[servers[0].cmdline().index("--port") + 1])
        assert state_folder(port).is_dir()
        deadline = time.monotonic() + 60
        while not _measuring(out, "06_attention_kv_cache", port):  # into the lesson's measurements
            assert time.monotonic() < deadline and proc.poll() is None, "the lesson never started its measurements"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, rest  # 128 + SIGTERM, as a shell reports it
    assert not servers_on(port) and not servers[0].is_running()
    assert not state_folder(port).exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lessons"]["06_attention_kv_cache"]["status"] == "interrupted"
    assert manifest["engine"]["started_for_run"] is True


def test_no_start_server_gives_the_clear_error(tmp_path):
    port = free_port()
    res = run_lesson("02_tokens_and_embeddings", "--out", str(tmp_path / "run"), "--no-start-server",
                     default_url=f"http://127.0.0.1:{port}", timeout=120)
    assert res.returncode == 1
    assert f"No llama.cpp server answers at http://127.0.0.1:{port}" in res.stderr
    assert "No server answers" not in res.stderr and "Traceback" not in res.stderr
    assert not any(Path(os.environ["BYTESUP_STATE"]).glob("server-*"))


# --- the same for `bytesup run-all`, in-process -------------------------------------------------



@pytest.fixture
def one_lesson(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_tokens.py").write_text(LESSON_TOKENS)  # the runner tests' tokens lesson
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    return folder


@pytest.mark.integration
def test_run_all_starts_and_stops_a_server_when_none_answers(one_lesson, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "DEFAULT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("BYTESUP_MODEL", TEST_MODEL)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run-all", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "No server answers" in res.output
    eng = json.loads((out / "manifest.json").read_text())["engine"]
    assert eng["started_for_run"] is True
    port = int(eng["flags"]["--port"])
    assert not servers_on(port) and not state_folder(port).exists()
    assert signal.getsignal(signal.SIGTERM) is before


# --- when no server is started (no real server needed) ------------------------------------------

def no_start(*args, **kwargs):
    raise AssertionError("a server was started")


def test_a_server_that_answers_is_used_as_it_is(one_lesson, tmp_path, monkeypatch, httpx_mock):
    monkeypatch.setattr("bytesup.run.runner.start_run_server", no_start)
    for name, path in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models"), ("tokenize_paris", "/tokenize")]:
        httpx_mock.add_response(url=client.DEFAULT_URL + path, json=load_fixture(name)["response"], is_reusable=True, is_optional=True)
    out = tmp_path / "run"
    assert run_lessons(["01_tokens"], RunOptions(out=out, command=["test"])) == 0
    eng = json.loads((out / "manifest.json").read_text())["engine"]
    assert eng["started_for_run"] is False and eng["url"] == client.DEFAULT_URL


@pytest.mark.parametrize("given", ["option", "environment"])
def test_a_server_given_is_never_replaced(given, one_lesson, tmp_path, monkeypatch):
    monkeypatch.setattr("bytesup.run.runner.start_run_server", no_start)
    url = f"http://127.0.0.1:{free_port()}"
    if given == "environment":
        monkeypatch.setenv("BYTESUP_SERVER", url)
    options = RunOptions(server_url=url if given == "option" else None, out=tmp_path / "run", command=["test"])
    with pytest.raises(ServerUnreachable, match=url):
        run_lessons(["01_tokens"], options)


def test_a_replay_never_starts_a_server(tmp_path, monkeypatch):
    monkeypatch.setattr("bytesup.run.runner.start_run_server", no_start)
    monkeypatch.setattr(client, "DEFAULT_URL", f"http://127.0.0.1:{free_port()}")
    source = recorded("02_tokens_and_embeddings")
    assert run_lessons(["02_tokens_and_embeddings"], RunOptions(replay=source, out=tmp_path / "run", command=["test"])) == 0


def test_an_unknown_bytesup_model_is_a_clear_error(one_lesson, tmp_path, monkeypatch):
    monkeypatch.setattr(client, "DEFAULT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("BYTESUP_MODEL", "no-such-preset")
    with pytest.raises(BytesupError, match="BYTESUP_MODEL=no-such-preset is neither a GGUF file nor a model preset"):
        run_lessons(["01_tokens"], RunOptions(out=tmp_path / "run", command=["test"]))
    assert not any(Path(os.environ["BYTESUP_STATE"]).glob("server-*"))
