"""The run folder's lock (bytesup.run.folder.RunLock) and what a manifest says of a run that is running, or
was killed: two runs never write one folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bytesup.errors import RunFolderError
from bytesup.options import RunOptions
from bytesup.run.folder import LOCK_FILE, RunLock
from bytesup.run.runner import run_lessons
from bytesup.store.runs import read_manifest

from conftest import load_fixture
from fakes import FakeServer
from faultkit import console, flat, lessons_dir, manifest_of, SERVER, start_run  # noqa: F401 (lessons_dir is a fixture)
from test_runner import LESSON_DECODE, lessons, serve, snapshot, URL  # noqa: F401 (lessons is a fixture)


LESSON_WATCH = '''"""Reads its own manifest entry while it runs."""
import json
TITLE = "Watch (test)"
def main(ctx):
    from bytesup.store.runs import read_manifest
    status = ctx.host("status", lambda: read_manifest(ctx.run.out).lessons["04_watch"].status)
    ctx.table("s", "Status", [("status", "")], [[status]])
    return ctx.finish()
'''


def test_a_second_run_into_a_running_folder_is_refused_naming_the_first(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out, command=["first"]))
    before = snapshot(out)
    with RunLock(out.resolve(), ["bytesup", "run-all", "--out", str(out)]) as held:
        held.acquire()
        with pytest.raises(RunFolderError) as refused:
            run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, force=True))
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message and "started 20" in message and "bytesup run-all" in message
    assert snapshot(out) == before  # nothing written, the first run's lock left alone


def test_a_lock_left_by_a_dead_run_is_taken_over(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "started_at": "2026-11-30T10:00:00+00:00"}))
    con, buf = console()
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out), console=con) == 0
    assert f"pid {dead.pid}" in buf.getvalue() and "taken over" in buf.getvalue()
    assert not (out / LOCK_FILE).exists()  # released at the end


def test_two_processes_into_one_folder_one_runs(lessons, tmp_path):
    """Two real processes started together: exactly one runs, the other names it and exits non-zero."""
    from fakes import FakeServer

    answers = {p: (200, load_fixture(n)["response"]) for n, p in
               [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models"), ("completion_decode", "/completion")]}
    # The lesson holds the folder until the test lets it go, once one of the two has exited (or after a minute).
    release = tmp_path / "release"
    wait = f"[__import__('time').sleep(0.02) for _ in range(3000) if not __import__('os').path.exists({str(release)!r})]"
    (lessons / "03_slow.py").write_text(LESSON_DECODE.replace("for _ in range(2)]", f"for _ in range(2)]; {wait}"))
    out = tmp_path / "run"
    with FakeServer(answers) as server:
        cmd = [sys.executable, "-m", "bytesup", "run", "03_slow", "--server", server.url, "--out", str(out)]
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
                 for _ in range(2)]
        deadline = time.monotonic() + 60
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        release.write_text("")
        results = [(p.wait(timeout=60), p.stdout.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    loser = next(text for code, text in results if code != 0)
    assert "in use by another bytesup run" in flat(loser) and "pid" in loser
    assert manifest_of(out)["lessons"]["03_slow"]["status"] == "ok"


def test_the_manifest_marks_a_lesson_running_while_it_runs(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    (lessons / "04_watch.py").write_text(LESSON_WATCH)
    out = tmp_path / "run"
    assert run_lessons(["04_watch"], RunOptions(server_url=URL, out=out)) == 0
    assert json.loads((out / "04_watch.json").read_text())["host_values"]["status"] == "running"


def test_a_run_killed_outright_reads_as_interrupted_not_running(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        run.kill()
        run.wait()
    folder = tmp_path / "run"
    assert json.loads((folder / "manifest.json").read_text())["lessons"]["01_sleeps"]["status"] == "running"  # as left
    entry = read_manifest(folder).lessons["01_sleeps"]
    assert entry.status == "interrupted" and "process is gone" in entry.error


def test_a_live_run_still_reads_as_running(tmp_path, lessons_dir):
    with FakeServer(SERVER) as server:
        run = start_run(tmp_path, lessons_dir, server.url)
        try:
            assert read_manifest(tmp_path / "run").lessons["01_sleeps"].status == "running"
        finally:
            run.kill()
            run.wait()
