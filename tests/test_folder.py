"""Where a run writes (bytesup.run.folder): a folder that cannot be made or written is one paragraph, with
nothing written there or anywhere else. A read-only file system and a folder one may not write to are the
OSErrors the kernel gives (errno 30 and 13), raised where the run makes or opens its files."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.errors import RunFolderError
from bytesup.options import RunOptions
from bytesup.run import folder
from bytesup.run.runner import run_lessons

LESSON = '"""Asks nothing."""\nTITLE = "Quick (test)"\n\ndef main(ctx):\n    return ctx.finish()\n'


def words(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


def tree(top: Path) -> list[str]:
    return sorted(str(p.relative_to(top)) for p in top.rglob("*"))


@pytest.fixture
def lessons(tmp_path, monkeypatch) -> Path:
    lessons_dir = tmp_path / "lessons"
    lessons_dir.mkdir()
    (lessons_dir / "01_quick.py").write_text(LESSON)
    monkeypatch.setenv("BYTESUP_LESSONS", str(lessons_dir))
    monkeypatch.setenv("BYTESUP_STATE", str(tmp_path / "state"))
    return lessons_dir


def refuse_under(monkeypatch, top: Path, code: int) -> None:
    """os.mkdir and os.open fail with `code` for any path under `top`, as on a read-only mount or a 0555 folder."""
    real_mkdir, real_open = os.mkdir, os.open

    def under(path) -> bool:
        return Path(os.fspath(path)).resolve().is_relative_to(top.resolve())

    def mkdir(path, *args, **kwargs):
        if under(path):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(code, os.strerror(code), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
def test_out_on_a_read_only_file_system_is_one_paragraph(lessons, tmp_path, monkeypatch, exists):
    mount = tmp_path / "ro"
    mount.mkdir()
    out = mount / "run"
    if exists:
        out.mkdir()
    before = tree(tmp_path)
    refuse_under(monkeypatch, mount, errno.EROFS)
    with pytest.raises(RunFolderError) as err:
        run_lessons(["01_quick"], RunOptions(replay=None, out=out, server_url="http://127.0.0.1:9"))
    assert f"{out} is on a read-only file system" in str(err.value) and "--out" in str(err.value)
    monkeypatch.undo()
    assert tree(tmp_path) == before


def test_outputs_that_name_a_file_are_one_paragraph(lessons, tmp_path, monkeypatch):
    target = tmp_path / "a-file"
    target.write_text("not a folder")
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(target))
    before = tree(tmp_path)
    res = CliRunner().invoke(app, ["run", "01_quick", "--server", "http://127.0.0.1:9", "--no-start-server"])
    said = words(res.output)
    assert res.exit_code != 0 and "Traceback" not in res.output and "FileExistsError" not in said
    assert f"{target} (BYTESUP_OUTPUTS) is a file, not a folder" in said and "Set BYTESUP_OUTPUTS" in said
    assert tree(tmp_path) == before and target.read_text() == "not a folder"


def test_outputs_under_a_file_are_one_paragraph(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(tmp_path / "a-file" / "outputs"))
    with pytest.raises(RunFolderError, match="lies under a file, not a folder"):
        folder.new_run_dir(folder.outputs_root(), "2026-12-01")


@pytest.mark.parametrize("code,why", [(errno.EACCES, "is a folder you may not write to (permission denied)"),
                                      (errno.EROFS, "is on a read-only file system")])
def test_outputs_in_a_folder_one_may_not_write_are_one_paragraph(lessons, tmp_path, monkeypatch, code, why):
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(locked))
    before = tree(tmp_path)
    refuse_under(monkeypatch, locked, code)
    with pytest.raises(RunFolderError) as err:
        run_lessons(["01_quick"], RunOptions(out=None, server_url="http://127.0.0.1:9"))
    assert f"{locked} (BYTESUP_OUTPUTS) {why}" in str(err.value) and "Nothing was written" in str(err.value)
    monkeypatch.undo()
    assert tree(tmp_path) == before


# --- other platforms: no flock, no SIGHUP, no PR_SET_PDEATHSIG ----------------------------------------------------------

def test_without_flock_a_live_holder_keeps_the_lock_and_a_dead_ones_is_taken_over(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys

    from bytesup import files
    from bytesup.store.runs import LOCK_FILE, run_is_live

    monkeypatch.setattr(files, "fcntl", None)       # Windows
    run_dir = tmp_path / "run"
    first = folder.RunLock(run_dir, ["bytesup", "run-all"])
    assert first.acquire() is None and run_is_live(run_dir)
    with pytest.raises(RunFolderError, match="is in use by another bytesup run"):
        folder.RunLock(run_dir, ["bytesup", "run"]).acquire()
    first.release()
    assert not (run_dir / LOCK_FILE).exists() and not run_is_live(run_dir)

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    run_dir.mkdir(exist_ok=True)
    (run_dir / LOCK_FILE).write_text(json.dumps({"pid": dead, "started_at": "earlier", "process_started": 1.0}))
    assert not run_is_live(run_dir)
    second = folder.RunLock(run_dir, ["bytesup", "run"])
    assert f"locked by a run that is no longer running (pid {dead}" in second.acquire()
    assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] == os.getpid()
    second.release()


def test_without_sighup_the_stop_signals_are_the_ones_there(monkeypatch):
    import signal

    monkeypatch.delattr(signal, "SIGHUP")        # Windows
    assert folder.stop_signals() == (signal.SIGINT, signal.SIGTERM)
    with folder.signals_raise():
        pass


def test_without_pdeathsig_a_thread_stops_the_run_when_its_parent_dies(monkeypatch):
    import time

    from bytesup.llama import process

    monkeypatch.setattr(process.sys, "platform", "darwin")
    assert process.die_with_parent_hook() is None
    monkeypatch.setattr(folder, "PARENT_POLL_S", 0.01)
    parents = iter([4242, 4242, 4242])
    monkeypatch.setattr(folder.os, "getppid", lambda: next(parents, 1))   # then re-parented to pid 1
    import signal

    before = {s: signal.getsignal(s) for s in folder.stop_signals()}
    try:
        with pytest.raises(folder.Terminated) as stopped:
            with folder.signals_raise():
                folder.die_with_parent()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    time.sleep(0.01)
    finally:  # a stopped run ignores further signals until it exits; this test's process goes on
        for s, handler in before.items():
            signal.signal(s, handler)
        folder._stopping.clear()
    assert stopped.value.args[0] == "SIGTERM"
