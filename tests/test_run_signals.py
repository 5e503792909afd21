"""Stopping a run (bytesup.run.folder's signal handling, bytesup.run.runner): Ctrl-C, SIGTERM, a dying parent and
kill -9 never lose the manifest or leave the run's server behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from gguf import GGMLQuantizationType as QT

from fakes import fake_engine, FakeServer
from faultkit import lessons_dir, SERVER, start_run  # noqa: F401 (lessons_dir is a fixture)
from test_engine_faults import wait_for
from test_gguf_read import write_model


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


LESSON_SWALLOWS = '''"""Signals itself from inside a __del__, where Python drops the exception the handler raises."""
import os, signal, time
TITLE = "Swallows a stop (test)"
class Sends:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, inside __del__: its exception is printed and dropped
def main(ctx):
    Sends()
    return ctx.finish()
'''


@pytest.mark.parametrize("count", [3, 5])
def test_ctrl_c_pressed_again_and_again_never_undoes_the_cleanup(tmp_path, lessons_dir, count):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        try:
            for _ in range(count):
                run.send_signal(signal.SIGINT)
                time.sleep(0.001)
            code = run.wait(timeout=30)
        finally:
            if run.poll() is None:
                run.kill()
    output = run.stdout.read()
    assert code == 130, output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and manifest["lessons"]["01_sleeps"]["status"] == "interrupted"
    assert "continues it" in output and "--resume" in output and "Traceback" not in output


def test_sigterm_then_ctrl_c_still_saves_the_manifest(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        run.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # two signals pending at once are handled in signal-number order, SIGINT first
        run.send_signal(signal.SIGINT)
        code = run.wait(timeout=30)
    assert code == 143
    entry = json.loads((tmp_path / "run" / "manifest.json").read_text())["lessons"]["01_sleeps"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"]


def test_a_run_told_to_die_with_its_parent_stops_cleanly_when_the_parent_is_killed(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        shell = start_run(tmp_path, lessons_dir, server.url, parent=True, env={"BYTESUP_DIE_WITH_PARENT": "1"})
        run_pid = next(p.pid for p in psutil.Process(shell.pid).children() if "bytesup" in " ".join(p.cmdline()))
        shell.kill()  # kill -9 of the parent, as of make
        shell.wait()
        wait_for(lambda: not alive(run_pid))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    entry = manifest["lessons"]["01_sleeps"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"] and manifest["status"] == "incomplete"


def test_the_own_server_of_a_run_dies_with_it_even_on_kill_9(tmp_path, lessons_dir, monkeypatch):
    """--own-server (make run): the run's server is started for it and dies when the run is killed outright."""
    model = tmp_path / "small.gguf"
    write_model(model, QT.F16)
    env = {"LLAMA_SERVER": str(fake_engine(tmp_path)), "BYTESUP_MODEL": str(model)}
    mark = tmp_path / "mark"
    run = subprocess.Popen([sys.executable, "-m", "bytesup", "run", "01_sleeps", "--own-server", "--out", str(tmp_path / "run")],
                           env={**os.environ, "MARK": str(mark), **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(mark.exists)
        state = Path(os.environ["BYTESUP_STATE"])
        server_pid = int(next(state.glob("server-*/pid")).read_text().split()[0])
        assert alive(server_pid)
        run.kill()
        run.wait(timeout=30)
        wait_for(lambda: not alive(server_pid), timeout=15)  # PDEATHSIG
    finally:
        if run.poll() is None:
            run.kill()
    assert "The run has its own server" in run.stdout.read()


def test_a_stop_whose_exception_python_dropped_still_stops_the_run(tmp_path, lessons_dir):
    """SIGTERM while an exception cannot propagate (in a __del__): the lesson is interrupted, not ok, and the run
    ends with 143, where before it finished as if no signal had come (exit 0, status ok)."""
    (lessons_dir / "04_swallows.py").write_text(LESSON_SWALLOWS)
    with FakeServer(SERVER) as server:
        done = subprocess.run([sys.executable, "-m", "bytesup", "run", "04_swallows", "--server", server.url,
                               "--out", str(tmp_path / "run")], env=os.environ, capture_output=True, text=True,
                              timeout=60)
    assert "Exception ignored" in done.stderr  # the case itself: Python dropped the handler's exception
    assert done.returncode == 143, done.stdout + done.stderr
    entry = json.loads((tmp_path / "run" / "manifest.json").read_text())["lessons"]["04_swallows"]
    assert entry["status"] == "interrupted" and "SIGTERM" in entry["error"]
