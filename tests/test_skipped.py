"""A lesson that measures nothing on this machine is skipped, neither ok nor failed: the runner records why and the
command that enables it, the summary and the run's README count it, and run-all, check and report do not fail on it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bytesup.cli.app import app
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons
from bytesup.store.runs import load_run

from conftest import load_fixture
from lessonkit import QueuedServer, hand_context

URL = "http://127.0.0.1:8099"
ENABLE = "bash scripts/build_llama_server.sh"
WHY = "Not measured: this lesson needs a native llama-server, and this machine has none."

LESSON_OK = '''"""Measures."""
TITLE = "Measures (test)"
def main(ctx):
    ctx.table("t", "T", [("x", "")], [[ctx.host("x", lambda: 1)]])
    return ctx.finish()
'''

LESSON_SKIP = f'''"""Skips from main."""
TITLE = "Skips (test)"
def main(ctx):
    if not ctx.host("engine_here", lambda: False):
        return ctx.skip({WHY!r}, {ENABLE!r})
    ctx.table("t", "T", [("x", "")], [[2]])
    return ctx.finish()
'''

LESSON_RAISES = f'''"""Skips from deep inside."""
from bytesup.errors import LessonSkipped
TITLE = "Raises (test)"
def measure(ctx):
    raise LessonSkipped({WHY!r}, {ENABLE!r})
def main(ctx):
    measure(ctx)
    return ctx.finish()
'''


@pytest.fixture
def lessons(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "lessons"
    folder.mkdir()
    (folder / "01_ok.py").write_text(LESSON_OK)
    (folder / "02_skip.py").write_text(LESSON_SKIP)
    (folder / "03_raises.py").write_text(LESSON_RAISES)
    monkeypatch.setenv("BYTESUP_LESSONS", str(folder))
    return folder


def serve(httpx_mock) -> None:
    for name, path in [("health", "/health"), ("props", "/props"), ("v1_models", "/v1/models")]:
        httpx_mock.add_response(url=URL + path, json=load_fixture(name)["response"], is_reusable=True, is_optional=True)


def test_a_skipped_lesson_is_recorded_with_why_and_what_enables_it(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    buf = io.StringIO()
    assert run_lessons(["01_ok", "02_skip", "03_raises"], RunOptions(server_url=URL, out=out, command=["t"]),
                       console=Console(file=buf, width=300)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    entries = manifest["lessons"]
    assert [entries[lid]["status"] for lid in ("01_ok", "02_skip", "03_raises")] == ["ok", "skipped", "skipped"]
    for lid in ("02_skip", "03_raises"):
        assert (entries[lid]["skip_reason"], entries[lid]["enable_command"]) == (WHY, ENABLE)
        assert "error" not in entries[lid] and "failed_exchanges" not in entries[lid]
        # Its page says why, as the lesson's note.
        assert json.loads((out / f"{lid}.json").read_text())["notes"] == [WHY] and WHY in (out / f"{lid}.md").read_text()
    assert "skip_reason" not in entries["01_ok"] and "enable_command" not in entries["01_ok"]
    printed = " ".join(buf.getvalue().split())
    assert "1 ok, 2 skipped" in printed and f"`{ENABLE}` enables it" in printed
    readme = (out / "README.md").read_text()
    assert "| `02_skip` | skipped |" in readme and "nothing measured here" in readme


def test_check_and_report_count_a_skipped_lesson_as_neither_ok_nor_failed(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["01_ok", "02_skip"], RunOptions(server_url=URL, out=out, command=["t"])) == 0
    run = load_run(out)
    assert list(run.results) == ["01_ok", "02_skip"]  # its page is shown
    assert [p for p in run.problems if p.startswith("02_skip")] == [
        f"02_skip: skipped, nothing measured here ({WHY}); `{ENABLE}` enables it"]
    checked = CliRunner().invoke(app, ["check", str(out)])
    assert checked.exit_code == 0, checked.output
    assert "skipped" in " ".join(checked.output.split())
    reported = CliRunner().invoke(app, ["report", str(out)])
    assert reported.exit_code == 0, reported.output
    assert "| `02_skip` | skipped |" in (out / "README.md").read_text()


def test_a_skipped_lesson_replays_as_skipped_and_resume_tries_it_again(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["01_ok", "02_skip"], RunOptions(server_url=URL, out=out, command=["t"])) == 0
    again = tmp_path / "replay"
    assert run_lessons(["01_ok", "02_skip"], RunOptions(replay=out, out=again, command=["t"])) == 0
    assert json.loads((again / "manifest.json").read_text())["lessons"]["02_skip"]["status"] == "skipped"
    assert (again / "02_skip.json").read_text() == (out / "02_skip.json").read_text()
    # With the engine there now, a resume measures it: the skip's fields go.
    (lessons / "02_skip.py").write_text(LESSON_SKIP.replace("lambda: False", "lambda: True"))
    assert run_lessons(["01_ok", "02_skip"], RunOptions(server_url=URL, out=out, resume=True, command=["t"])) == 0
    entry = json.loads((out / "manifest.json").read_text())["lessons"]["02_skip"]
    assert entry["status"] == "ok" and "skip_reason" not in entry and "enable_command" not in entry


def test_lesson_9_without_an_rpc_engine_is_skipped_with_the_build_command():
    from bytesup.run.lessons import load_lesson

    lesson = load_lesson("09_beyond_one_machine")
    model = {"name": "m", "path": "/m.gguf", "n_layer": 30, "n_embd": 576, "n_vocab": 49152, "tensor_bytes": 1000}
    ctx = hand_context("09_beyond_one_machine", QueuedServer({}),
                       host_values={"model": model, "option_rpc": None, "rpc_engine_available": False},
                       identity={"server": {"flags": {"--threads": "2"}}})
    result = lesson.main(ctx)
    assert ctx.skipped is not None and result.notes == [lesson.NO_RPC_ENGINE]
    assert ctx.skipped.reason == lesson.NO_RPC_ENGINE and "scripts/build_llama_server.sh" in ctx.skipped.command
    assert "bytesup run 09_beyond_one_machine" in ctx.skipped.command
