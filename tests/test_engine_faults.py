"""Faults of issue 12 around the processes bytesup starts: servers of a lesson's own stopped on
any exit (7), pid files checked before anyone is signalled (8), the API key kept out of argv (9),
the start/stop scripts finding bytesup wherever it is installed (13)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from gguf import GGMLQuantizationType as QT

from bytesup.llama import process
from bytesup.llama.process import free_port

from conftest import load_fixture
from fakes import FakeServer, fake_engine
from test_gguf_read import write_model

ROOT = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Path:
    """LLAMA_SERVER points at a llama-server stand-in; a small GGUF passes the model check."""
    path = fake_engine(tmp_path)
    monkeypatch.setenv("LLAMA_SERVER", str(path))
    return path


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "small.gguf"
    write_model(path, QT.F16)
    return path


# --- 7. servers of a lesson's own never outlive the run ------------------------------------------

LESSON_OWN = '''"""Starts a server of its own and uses it for a while."""
import os, time
from pathlib import Path
TITLE = "Own server (test)"
def main(ctx):
    with ctx.local_server("own", Path(os.environ["FAKE_MODEL"]), []) as own:
        own.health()
        Path(os.environ["MARK"]).write_text(own.base_url)
        time.sleep(60)
    return ctx.finish()
'''

USER_SERVER = {p: (200, load_fixture(n)["response"]) for n, p in
               [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models")]}


@pytest.mark.parametrize("when", ["starting", "serving"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_a_lessons_own_server_is_stopped_on_a_signal(tmp_path, fake, model, when, sig):
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "07_own.py").write_text(LESSON_OWN)
    state = Path(os.environ["BYTESUP_STATE"])
    mark = tmp_path / "mark"
    env = {**os.environ, "BYTESUP_LESSONS": str(lessons), "FAKE_MODEL": str(model), "MARK": str(mark),
           "FAKE_START_DELAY": "60" if when == "starting" else "0"}
    out = tmp_path / "run"
    with FakeServer(USER_SERVER) as user:
        run = subprocess.Popen([sys.executable, "-m", "bytesup", "run", "07_own", "--server", user.url, "--out", str(out)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: any(state.glob("server-*/pid")) if when == "starting" else mark.exists())
            pid_file = next(state.glob("server-*/pid"))
            server_pid = int(pid_file.read_text().split()[0])
            assert alive(server_pid)
            run.send_signal(sig)
            code = run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
    output = run.stdout.read()
    wait_for(lambda: not alive(server_pid), timeout=10)  # SIGKILL: the kernel stops it (PDEATHSIG)
    if sig == signal.SIGKILL:
        return  # nothing runs in a killed process; the server is gone all the same
    assert code == (143 if sig == signal.SIGTERM else 130), output
    assert not pid_file.parent.exists(), output  # its .run/server-<port>/ folder removed
    entry = json.loads((out / "manifest.json").read_text())["lessons"]["07_own"]
    assert entry["status"] == "interrupted" and ("SIGTERM" in entry["error"] or "Ctrl-C" in entry["error"])


LESSON_DROPS_A_STOP = '''"""Starts a server of its own; while it waits for it, a Ctrl-C's exception is dropped by Python."""
import os, signal, time
from pathlib import Path
TITLE = "Drops a stop while its server starts (test)"
class Sends:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, inside __del__: its exception is printed and dropped
def main(ctx):
    cycle = Sends()
    cycle.me = cycle  # freed by the garbage collector, whenever it runs next: during the start's readiness polls
    del cycle
    with ctx.local_server("own", Path(os.environ["FAKE_MODEL"]), []) as own:
        own.health()
    return ctx.finish()
'''


def test_a_stop_dropped_while_a_lessons_server_starts_stops_the_start(tmp_path, fake, model):
    """A stop signal whose exception Python dropped (it came inside a __del__) while the lesson's own server was
    starting: the start looks at the run's stop at each poll, so the run stops at once, where it went on waiting
    for the server (here 60 s, up to the start's 180 s) and ran the rest of the lesson before it noticed."""
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "07_drops.py").write_text(LESSON_DROPS_A_STOP)
    state = Path(os.environ["BYTESUP_STATE"])
    env = {**os.environ, "BYTESUP_LESSONS": str(lessons), "FAKE_MODEL": str(model), "FAKE_START_DELAY": "60"}
    out = tmp_path / "run"
    with FakeServer(USER_SERVER) as user:
        run = subprocess.Popen([sys.executable, "-m", "bytesup", "run", "07_drops", "--server", user.url, "--out", str(out)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            code = run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
    output = run.stdout.read()
    assert "Exception ignored" in output  # the case itself: Python dropped the handler's exception
    assert code == 130, output
    assert not list(state.glob("server-*")), output  # the half-started server stopped, its folder removed
    entry = json.loads((out / "manifest.json").read_text())["lessons"]["07_drops"]
    assert entry["status"] == "interrupted" and "Ctrl-C" in entry["error"]


# --- 8. a pid file is checked before anyone is signalled ------------------------------------------

def _stale_pid_file(port: int) -> subprocess.Popen:
    """A pid file that names an unrelated program: the pid was reused after our server died."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    state = process.state_dir_for(port)
    state.mkdir(parents=True)
    (state / "pid").write_text(f"{other.pid}\n")
    return other


def test_stop_never_signals_a_process_that_reused_the_pid(capsys):
    port = free_port()
    other = _stale_pid_file(port)
    try:
        assert process.main(["stop", "--port", str(port)]) == 0
        time.sleep(0.2)
        assert other.poll() is None  # still running
        err = capsys.readouterr().err
        assert "stale pid file" in err and f"pid {other.pid}" in err and "No process was signalled" in err
        assert not (process.state_dir_for(port) / "pid").exists()
    finally:
        other.kill()
        other.wait()


def test_start_replaces_a_stale_pid_file(fake, model, capsys):
    port = free_port()
    other = _stale_pid_file(port)
    try:
        started = process.start_server(model, ["--port", str(port)])
        assert "stale pid file" in capsys.readouterr().err
        assert process.stop_server(port)
        wait_for(lambda: not alive(started.pid), timeout=10)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_servers_pid_file_appears_whole(fake, model, monkeypatch):
    """Renamed into place once written: another bytesup that read an empty pid file would remove it as stale."""
    written: list[tuple[Path, str, bool]] = []
    real = process.write_text_atomic

    def spy(path: Path, text: str) -> None:
        written.append((path, text, path.exists()))
        real(path, text)

    monkeypatch.setattr(process, "write_text_atomic", spy)
    port = free_port()
    started = process.start_server(model, ["--port", str(port)])
    try:
        [(path, text, there_before)] = [w for w in written if w[0].name == "pid"]
        assert not there_before and path.read_text() == text and text.split()[0] == str(started.pid)
        assert process.owned_pid(port)[0] == started.pid
    finally:
        assert process.stop_server(port)


def test_a_stopped_server_whose_parent_never_reaps_it_counts_as_stopped_at_once():
    """scripts/start_server.sh leaves its server to the system; where the system's first process does not reap
    (a container's), the stopped server stays a zombie. Stopping it returns when it ended, not after the grace time."""
    keeper_code = ("import subprocess, time\n"
                   "child = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
                   "print(child.pid, flush=True)\ntime.sleep(60)")
    keeper = subprocess.Popen([sys.executable, "-c", keeper_code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(keeper.stdout.readline())
        began = time.monotonic()
        process._terminate(pid, grace_s=10.0)
        assert time.monotonic() - began < 5.0
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # ended; its exit is still unread by its parent
        assert not process._pid_alive(pid)
    finally:
        keeper.kill()
        keeper.wait()


# --- 9. the API key never on a command line -----------------------------------------------------

@pytest.mark.parametrize("kind", ["llama-server", "embedded"])
def test_the_api_key_reaches_the_engine_through_its_environment(fake, model, tmp_path, monkeypatch, kind):
    if kind == "embedded":  # the same start path, with the embedded engine's command
        choice = process.EngineChoice("embedded", [str(fake)], "embedded", "a test")
        monkeypatch.setattr(process, "choose_engine", lambda native=False: choice)
    record = tmp_path / "record.json"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    secret = "sk-made-up-0123456789"
    port = free_port()
    started = process.start_server(model, ["--port", str(port), "--api-key", secret])  # ready: the key was required
    try:
        seen = json.loads(record.read_text())
        assert seen["LLAMA_API_KEY"] == secret
        assert secret not in " ".join(seen["argv"]) and "--api-key" not in seen["argv"]
        assert secret not in " ".join(psutil.Process(started.pid).cmdline())
        assert started.info["flags"]["--api-key"] == "***"
        assert secret not in (started.state_dir / "engine.json").read_text()
    finally:
        process.stop_server(port)


def test_the_embedded_engine_reads_the_key_from_the_environment_or_a_file(tmp_path, monkeypatch):
    from bytesup.llama.embedded import api_keys, build_parser, make_params

    args = build_parser().parse_args(["-m", "x.gguf"])
    monkeypatch.setenv("LLAMA_API_KEY", "k1")
    assert list(make_params(args).api_keys) == ["k1"]
    keys = tmp_path / "keys"
    keys.write_text("k2\n\nk3\n")
    assert api_keys(build_parser().parse_args(["-m", "x.gguf", "--api-key-file", str(keys)]), {}) == ["k2", "k3"]


# --- 13. the scripts work wherever bytesup is installed ---------------------------------------------

@pytest.fixture
def checkout_without_venv(tmp_path) -> Path:
    """The scripts in a folder with no .venv, as in a clone used with pipx or another venv."""
    copy = tmp_path / "clone"
    (copy / "scripts").mkdir(parents=True)
    for name in ("start_server.sh", "stop_server.sh", "find_python.sh"):
        shutil.copy(ROOT / "scripts" / name, copy / "scripts" / name)
    return copy


def _python_wrapper(folder: Path) -> Path:
    """An interpreter that has bytesup, at a path of the test's choosing."""
    folder.mkdir(parents=True)
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def _stop(checkout: Path, env: dict) -> subprocess.CompletedProcess:
    port = str(free_port())
    return subprocess.run(["bash", str(checkout / "scripts" / "stop_server.sh"), "--port", port],
                          capture_output=True, text=True, env=env, timeout=60)


def _bare_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "BYTESUP_PYTHON")}
    # No python3 with bytesup on PATH: only what the test provides can be found.
    env["PATH"] = "/usr/bin:/bin"
    return {**env, **extra}


def test_the_scripts_use_an_activated_virtual_environment(checkout_without_venv, tmp_path):
    _python_wrapper(tmp_path / "venv" / "bin")
    res = _stop(checkout_without_venv, _bare_env(VIRTUAL_ENV=str(tmp_path / "venv")))
    assert res.returncode == 0 and "nothing to stop" in res.stdout, res.stderr


def test_the_scripts_use_the_python_of_a_bytesup_command_on_path(checkout_without_venv, tmp_path):
    wrapper = _python_wrapper(tmp_path / "pipx-venv" / "bin")
    bin_dir = tmp_path / "local-bin"
    bin_dir.mkdir()
    (bin_dir / "bytesup").write_text(f"#!{wrapper}\nfrom bytesup.cli.app import app\napp()\n")
    (bin_dir / "bytesup").chmod(0o755)
    env = _bare_env()
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    res = _stop(checkout_without_venv, env)
    assert res.returncode == 0 and "nothing to stop" in res.stdout, res.stderr


def test_the_scripts_say_what_to_do_when_no_bytesup_is_found(checkout_without_venv):
    res = _stop(checkout_without_venv, _bare_env())
    if res.returncode == 0:
        pytest.skip("the system python3 has bytesup installed")
    assert "no Python with bytesup installed was found" in res.stderr and "BYTESUP_PYTHON" in res.stderr


# --- IPv6 hosts ---------------------------------------------------------------------------------------------------

def ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback")
def test_an_ipv6_host_is_probed_with_an_ipv6_socket():
    import socket

    from bytesup.llama.process import free_port, port_is_free

    port = free_port("::1")
    assert port_is_free("::1", port) and port_is_free("[::1]", port)
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as taken:
        taken.bind(("::1", port))
        taken.listen()
        assert not port_is_free("::1", port)


def test_a_suggested_url_brackets_an_ipv6_host(monkeypatch, tmp_path):
    from bytesup.errors import ServerStartError

    monkeypatch.setenv("BYTESUP_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(process, "check_gguf", lambda path: None)
    monkeypatch.setattr(process, "port_is_free", lambda host, port: False)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(ServerStartError) as err:
        process.start_server(model, ["--host", "::1", "--port", "8403"])
    assert "--server http://[::1]:8404" in str(err.value)
    assert [process.url_host(h) for h in ("::1", "[::1]", "127.0.0.1", "localhost")] == ["[::1]", "[::1]", "127.0.0.1",
                                                                                        "localhost"]


# --- a server starting: stopped, or with nowhere to write -------------------------------------------------------------

def test_ctrl_c_while_start_server_sh_starts_one_leaves_nothing(tmp_path, fake, model):
    state = Path(os.environ["BYTESUP_STATE"])
    env = {**os.environ, "FAKE_START_DELAY": "60"}
    start = subprocess.Popen([sys.executable, "-m", "bytesup.llama.process", "start", str(model), "--port", "8431"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_file = state / "server-8431" / "pid"
    try:
        wait_for(lambda: pid_file.is_file() and pid_file.read_text().endswith("\n"), timeout=60)
        server_pid = int(pid_file.read_text().split()[0])
        time.sleep(0.3)
        start.send_signal(signal.SIGINT)
        code = start.wait(timeout=60)
    finally:
        if start.poll() is None:
            start.kill()
        if pid_file.is_file():  # a server the start left running, whatever went wrong: never kept for the next test
            with contextlib.suppress(ValueError, IndexError, psutil.Error):
                psutil.Process(int(pid_file.read_text().split()[0])).kill()
    said = start.stdout.read()
    assert code == 130 and "Traceback" not in said and "stopped by Ctrl-C" in said, said
    assert not (state / "server-8431").exists()
    wait_for(lambda: not psutil.pid_exists(server_pid) or psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE)


def test_a_state_folder_that_cannot_be_made_is_one_paragraph(tmp_path, fake, model, monkeypatch):
    from bytesup.errors import ServerStartError

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("BYTESUP_STATE", str(tmp_path / "a-file" / "run"))
    with pytest.raises(ServerStartError) as err:
        process.start_server(model, ["--port", "8432"])
    assert "Could not make the server's folder" in str(err.value) and "BYTESUP_STATE" in str(err.value)
    assert "Nothing was started" in str(err.value) and (tmp_path / "a-file").read_text() == "x"
