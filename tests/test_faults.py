"""Faults a hostile tester found (issue 12), one section per case: each test fails on the code
before the fix. Bad server behaviour comes from pytest-httpx or the fakes in tests/fakes.py."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from bytesup.run import folder as runfolder
from bytesup import files as storage
from bytesup.run import runner as runner_module
from bytesup.cli.app import app
from bytesup.check.compare import load_run
from bytesup.errors import BytesupError, RunFolderError
from bytesup.run.folder import LOCK_FILE, DiskFull, RunLock
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from test_runner import LESSON_DECODE, URL, lessons, serve, snapshot  # noqa: F401 (lessons is a fixture)

cli = CliRunner()


def console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400, soft_wrap=True), buf


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def flat(text: str) -> str:
    return text.replace("\n", "")


def words(text: str) -> str:
    """Text as words, without the boxes and line breaks of typer's help and usage errors."""
    return " ".join(text.replace("│", " ").split())


# --- 1. two runs into one folder ------------------------------------------------------------

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


# --- 2. resume against another configuration ----------------------------------------------------

def _failed_second_lesson(httpx_mock, out: Path) -> None:
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out)) == 1
    httpx_mock.add_response(url=URL + "/completion", json=load_fixture("completion_decode")["response"], is_reusable=True)


def test_resume_against_another_build_or_settings_is_refused_with_the_differences(lessons, tmp_path, httpx_mock):
    out = tmp_path / "run"
    _failed_second_lesson(httpx_mock, out)
    manifest = manifest_of(out)
    manifest["engine"]["build"] = "b4000-other"   # the folder was measured on another build…
    manifest["options"]["repeat"] = 5              # …with other settings
    (out / "manifest.json").write_text(json.dumps(manifest))
    requests = len(httpx_mock.get_requests())
    with pytest.raises(RunFolderError) as refused:
        run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, resume=True))
    message = str(refused.value)
    assert "engine build: b4000-other in the folder, b0-unknown now" in message
    assert "--repeat: 5 in the folder, 3 now" in message and "--force" in message
    assert manifest_of(out)["lessons"]["02_decode"]["status"] == "failed"  # nothing changed
    assert len(httpx_mock.get_requests()) == requests + 3  # only the probe (health, props, models)
    # --force mixes them on purpose.
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, resume=True, force=True)) == 0


def test_resume_against_the_same_server_goes_on(lessons, tmp_path, httpx_mock):
    out = tmp_path / "run"
    _failed_second_lesson(httpx_mock, out)
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, resume=True)) == 0


# --- 3. replays verify their recordings --------------------------------------------------------

def _live(httpx_mock, tmp_path) -> Path:
    serve(httpx_mock)
    live = tmp_path / "live"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=live)) == 0
    return live


def _edit_decode_recording(live: Path) -> None:
    path = live / "http" / "02_decode.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["response"]["timings"]["predicted_ms"] = 1.0  # a much faster decode than recorded
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_modified_recording_fails_its_lesson_and_the_others_replay(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    assert all(e["http_sha256"] for e in manifest_of(live)["lessons"].values())
    _edit_decode_recording(live)
    out = tmp_path / "replayed"
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(replay=live, out=out)) == 1
    lessons_state = manifest_of(out)["lessons"]
    assert lessons_state["01_tokens"]["status"] == "ok"
    assert lessons_state["02_decode"]["status"] == "failed"
    assert "has changed since it was recorded" in lessons_state["02_decode"]["error"]
    assert "--allow-modified" in lessons_state["02_decode"]["error"]
    assert not (out / "02_decode.json").exists()


def test_an_edited_recording_replays_with_allow_modified_and_its_differences_are_reported(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    _edit_decode_recording(live)
    out = tmp_path / "replayed"
    con, buf = console()
    assert run_lessons(["02_decode"], RunOptions(replay=live, out=out, allow_modified=True), console=con) == 0
    diffs = manifest_of(out)["lessons"]["02_decode"]["replay_differences"]
    assert any(d.startswith("measurements[0].median") for d in diffs), diffs
    assert "differs from the recorded 02_decode.json" in buf.getvalue()


def test_a_recording_without_a_digest_is_still_compared_with_its_result(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    manifest = manifest_of(live)
    for entry in manifest["lessons"].values():
        entry.pop("http_sha256")  # a run recorded before digests existed
    (live / "manifest.json").write_text(json.dumps(manifest))
    _edit_decode_recording(live)
    out = tmp_path / "replayed"
    run_lessons(["02_decode"], RunOptions(replay=live, out=out))
    assert manifest_of(out)["lessons"]["02_decode"]["replay_differences"]


def test_a_truncated_recording_fails_that_lesson_with_a_message(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    path = live / "http" / "01_tokens.jsonl"
    path.write_text(path.read_text()[:-40])
    res = cli.invoke(app, ["run", "01_tokens", "02_decode", "--replay", str(live), "--out", str(tmp_path / "r"), "--allow-modified"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    lessons_state = manifest_of(tmp_path / "r")["lessons"]
    assert "Line 1 of" in lessons_state["01_tokens"]["error"] and "truncated or damaged" in lessons_state["01_tokens"]["error"]
    assert lessons_state["02_decode"]["status"] == "ok"


# --- 4. rich markup inside data ----------------------------------------------------------------

def test_markup_in_a_server_error_body_is_printed_as_text(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_response(url=URL + "/completion", status_code=500, text="model [/red] crashed [bold]here", is_reusable=True)
    res = cli.invoke(app, ["run", "02_decode", "01_tokens", "--server", URL, "--out", str(tmp_path / "run")])
    assert res.exit_code == 1, res.output
    assert "[/red] crashed [bold]here" in flat(res.output)
    assert manifest_of(tmp_path / "run")["lessons"]["01_tokens"]["status"] == "ok"  # run-all went on


def test_markup_in_paths_is_printed_as_text(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(tmp_path / "m[/i].gguf"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "m[/i].gguf is not a file here" in flat(res.output)
    out = tmp_path / "x[/b]y[bold]z"
    assert cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)]).exit_code == 0
    again = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)])
    assert again.exit_code == 1 and f"{out} already holds results" in flat(again.output)


def test_the_resume_command_shows_a_path_with_brackets_whole(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    out = tmp_path / "a[bold]b"
    con, buf = console()
    run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=["bytesup", "run-all"]), console=con)
    assert f"bytesup run-all --out '{out}' --resume" in buf.getvalue()


# --- 5. Markdown and HTML injection ---------------------------------------------------------------

HOSTILE = {
    "name": "<script>alert(1)</script>",
    "link": "[click](javascript:alert(1))",
    "heading": "## heading",
    "file": "evil<b>|x.gguf",
}


def test_hostile_text_stays_text_in_every_markdown_file(tmp_path):
    from bytesup.run.report import report_md
    from bytesup.store.render import lesson_md
    from bytesup.store.results import Column, LessonResult, Table
    from bytesup.check.compare import Run
    from bytesup.store.manifest import Manifest

    result = LessonResult(
        lesson_id="01_model_on_disk", title=f"Model {HOSTILE['name']}", started_at="s", finished_at="f",
        model={"name": HOSTILE["name"], "file": HOSTILE["file"]}, server={"engine": "<i>e</i>", "build": HOSTILE["link"]},
        tables=[Table(name="t", title=HOSTILE["heading"], columns=[Column(name=HOSTILE["file"], unit="<u>")],
                      rows=[[HOSTILE["name"]], [HOSTILE["link"]], ["a\\|b"]], notes=[HOSTILE["heading"], HOSTILE["link"]])],
        notes=[HOSTILE["heading"], f"file {HOSTILE['file']}", "[x]: javascript:alert(1)"],
    )
    manifest = Manifest.model_validate({"status": "incomplete", "host": {"hostname": HOSTILE["name"]}, "engine": {"build": HOSTILE["link"]},
                "model": {"path": f"/m/{HOSTILE['file']}"},
                "lessons": {"01_model_on_disk": {"status": "ok", "title": HOSTILE["name"]},
                            "02_x": {"status": "failed", "error": f"{HOSTILE['heading']}\n{HOSTILE['name']} | x"}}})
    pages = {
        "lesson": lesson_md(result),
        "index": runfolder.run_readme(tmp_path / "evil<b>", manifest),
        "report": report_md(Run(path=tmp_path / "r", manifest=manifest, results={"01_model_on_disk": result}), None),
    }
    for name, text in pages.items():
        assert "<script" not in text and "<b>" not in text and "<i>" not in text and "<u>" not in text, name
        assert not re.search(r"(?<!\\)\]\(javascript:", text), name
        for line in text.splitlines():
            assert not line.startswith("## heading") and not line.startswith("- ## heading"), (name, line)
            assert not line.startswith("- [x]:"), (name, line)
            if line.startswith("| "):  # every table row keeps its number of cells
                assert line.replace("\\|", "").count("|") in (2, 3, 4, 5), (name, line)
    assert "&lt;script>alert(1)&lt;/script>" in pages["lesson"]


# --- 6. a failed lesson leaves no stale result -----------------------------------------------------

def test_a_failed_forced_lesson_sets_its_old_result_aside_and_resume_reruns_it(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    state = {"status": 200}
    good = load_fixture("completion_decode")["response"]
    httpx_mock.add_callback(lambda request: httpx.Response(state["status"], json=good if state["status"] == 200 else {"error": "boom"}),
                            url=URL + "/completion", is_reusable=True)
    out = tmp_path / "run"
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=out)) == 0
    old = (out / "02_decode.json").read_bytes()

    state["status"] = 500
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=out, force=True)) == 1
    entry = manifest_of(out)["lessons"]["02_decode"]
    assert entry["status"] == "failed"
    assert not (out / "02_decode.json").exists() and not (out / "02_decode.md").exists()
    assert (out / entry["set_aside"] / "02_decode.json").read_bytes() == old  # moved, not lost
    failed = [json.loads(ln) for ln in (out / entry["failed_exchanges"]).read_text().splitlines()]
    assert failed and failed[0]["status"] == 500  # kept for diagnosis
    assert "02_decode" not in load_run(out).results
    res = cli.invoke(app, ["check", str(out)])
    assert res.exit_code == 1 and "no lesson results" in flat(res.output)

    state["status"] = 200
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=out, resume=True)) == 0
    assert manifest_of(out)["lessons"]["02_decode"]["status"] == "ok" and (out / "02_decode.json").exists()


def test_report_and_check_skip_a_result_the_manifest_marks_failed(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    manifest = manifest_of(live)
    manifest["lessons"]["02_decode"].update({"status": "failed", "error": "HTTP 500"})
    (live / "manifest.json").write_text(json.dumps(manifest))
    run = load_run(live)
    assert list(run.results) == ["01_tokens"]
    assert any("02_decode: failed" in p for p in run.problems)
    # --resume re-runs it, without calling its stale file a clash.
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=live, resume=True)) == 0
    assert manifest_of(live)["lessons"]["02_decode"]["status"] == "ok"


# --- 10. messages instead of tracebacks --------------------------------------------------------------

def test_model_build_into_a_folder_or_a_read_only_folder_says_what_to_do(tmp_path, monkeypatch):
    res = cli.invoke(app, ["model", "build", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "is a folder" in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    from bytesup.models import catalog as models

    def read_only(preset, path, *a, **kw):  # what a folder without write permission answers
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(models, "build_model", read_only)
    res = cli.invoke(app, ["model", "build", "tiny-q8_0", "--out", str(tmp_path / "ro" / "m.gguf"), "--force"])
    assert res.exit_code == 1 and "Could not write the model" in flat(res.output), res.output
    assert isinstance(res.exception, SystemExit)


def _disk_full_for(monkeypatch, match: str) -> None:
    # The lessons' files are written by runfolder (save_lesson, keep_failed), the manifest by the runner.
    real = storage.write_jsonl_atomic, storage.write_json_atomic

    def full(path, data, _real):
        if match in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return _real(path, data)

    for module in (runner_module, runfolder):
        if hasattr(module, "write_jsonl_atomic"):
            monkeypatch.setattr(module, "write_jsonl_atomic", lambda p, d: full(p, d, real[0]))
        monkeypatch.setattr(module, "write_json_atomic", lambda p, d: full(p, d, real[1]))


def test_a_full_disk_stops_the_run_and_says_how_to_resume(lessons, tmp_path, httpx_mock, monkeypatch):
    serve(httpx_mock)
    out = tmp_path / "run"
    _disk_full_for(monkeypatch, "01_tokens.jsonl")
    with pytest.raises(DiskFull) as stopped:
        run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=["bytesup", "run-all", "--server", URL]))
    assert "No space left" in str(stopped.value) and f"--server {URL} --out {out.resolve()} --resume" in str(stopped.value)
    state = manifest_of(out)["lessons"]
    assert state["01_tokens"]["status"] == "failed" and state["02_decode"]["status"] == "pending"  # not attempted
    assert not any("/completion" in str(r.url) for r in httpx_mock.get_requests())


def test_a_full_disk_while_saving_the_manifest_is_a_message(lessons, tmp_path, httpx_mock, monkeypatch):
    serve(httpx_mock)
    _disk_full_for(monkeypatch, "manifest.json")
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "No space left" in res.output and isinstance(res.exception, SystemExit)


# --- 11. small ones ---------------------------------------------------------------------------------

def test_the_probe_waits_as_long_as_timeout_says(lessons, tmp_path, httpx_mock):
    httpx_mock.add_exception(httpx.ReadTimeout("slow"), url=URL + "/health")
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(tmp_path / "run"), "--timeout", "7"])
    assert res.exit_code == 1 and "within 7 s" in flat(res.output)


def test_the_default_request_timeout_is_two_minutes_and_help_says_so():
    assert RunOptions().timeout == 120
    res = cli.invoke(app, ["run", "--help"])
    assert "default 120" in words(res.output)


def test_a_server_address_without_a_scheme_gets_a_hint(lessons, tmp_path, httpx_mock):
    res = cli.invoke(app, ["run", "01_tokens", "--server", "127.0.0.1:8099", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "--server http://127.0.0.1:8099" in flat(res.output)
    assert not httpx_mock.get_requests() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "0"])
def test_bandwidth_must_be_positive_and_finite(value, tmp_path):
    res = cli.invoke(app, ["run", "01_model_on_disk", "--bandwidth-gbs", value, "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "give a positive number" in words(res.output) and not (tmp_path / "run").exists()


def test_nan_is_never_written_to_json(tmp_path):
    from bytesup.files import write_json_atomic

    with pytest.raises(BytesupError, match=r"not a finite number.*rows\[0\]\[1\]"):
        write_json_atomic(tmp_path / "x.json", {"rows": [[1.0, float("nan")]]})
    assert not (tmp_path / "x.json").exists()


def test_check_fails_on_a_run_with_no_results(tmp_path):
    folder = tmp_path / "empty-run"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"schema_version": 1, "kind": "bytesup-run", "status": "incomplete", "lessons": {}}))
    res = cli.invoke(app, ["check", str(folder)])
    assert res.exit_code == 1 and "no lesson results" in flat(res.output)


def test_the_resume_hint_repeats_the_runs_own_options_without_the_key(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    out = tmp_path / "run"
    con, buf = console()
    command = ["bytesup", "run-all", "--server", URL, "--repeat", "2", "--api-key", "sk-hidden", "--force"]
    run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=command), console=con)
    assert f"bytesup run-all --server {URL} --repeat 2 --out {out.resolve()} --resume" in buf.getvalue()
    assert "sk-hidden" not in buf.getvalue()


def test_a_missing_field_names_the_real_server_build(lessons, tmp_path, httpx_mock):
    props = dict(load_fixture("props")["response"], build_info="b4321-abcdef")
    httpx_mock.add_response(url=URL + "/health", json={"status": "ok"}, is_reusable=True)
    httpx_mock.add_response(url=URL + "/props", json=props, is_reusable=True)
    httpx_mock.add_response(url=URL + "/v1/models", json=load_fixture("v1_models")["response"], is_reusable=True)
    broken = {k: v for k, v in load_fixture("completion_decode")["response"].items() if k != "timings"}
    httpx_mock.add_response(url=URL + "/completion", json=broken)
    out = tmp_path / "run"
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=out)) == 1
    error = manifest_of(out)["lessons"]["02_decode"]["error"]
    assert "`timings`" in error and "server build: b4321-abcdef" in error


LESSON_WATCH = '''"""Reads its own manifest entry while it runs."""
import json
TITLE = "Watch (test)"
def main(ctx):
    from bytesup.store.runs import read_manifest
    status = ctx.host("status", lambda: read_manifest(ctx.run.out).lessons["04_watch"].status)
    ctx.table("s", "Status", [("status", "")], [[status]])
    return ctx.finish()
'''


def test_the_manifest_marks_a_lesson_running_while_it_runs(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    (lessons / "04_watch.py").write_text(LESSON_WATCH)
    out = tmp_path / "run"
    assert run_lessons(["04_watch"], RunOptions(server_url=URL, out=out)) == 0
    assert json.loads((out / "04_watch.json").read_text())["host_values"]["status"] == "running"


def test_a_model_that_is_not_the_served_one_is_refused(lessons, tmp_path, httpx_mock):
    from gguf import GGMLQuantizationType as QT
    from test_gguf_read import write_model

    serve(httpx_mock)
    other = tmp_path / "other.gguf"
    write_model(other, QT.F16)
    out = tmp_path / "run"
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(other), "--out", str(out)])
    assert res.exit_code == 1 and "is not the model the server serves" in flat(res.output)
    assert "--model-mismatch-ok" in flat(res.output) and not out.exists()
    ok = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(other), "--out", str(out), "--model-mismatch-ok"])
    assert ok.exit_code == 0, ok.output


# --- 12. a second run on the same day ---------------------------------------------------------------

def test_a_run_without_out_takes_the_next_free_folder_of_the_day(lessons, httpx_mock):
    serve(httpx_mock)
    root = Path(os.environ["BYTESUP_OUTPUTS"])
    today = datetime.now(timezone.utc).date().isoformat()
    con, buf = console()
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL), console=con) == 0
    assert manifest_of(root / today)["status"] == "complete"
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL), console=con) == 0
    assert manifest_of(root / f"{today}.2")["status"] == "complete"
    assert f"{today}.2 ({today} already holds a run)" in buf.getvalue()
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL])
    assert res.exit_code == 0 and (root / f"{today}.3" / "01_tokens.json").exists()


def test_resume_without_out_continues_the_latest_unfinished_run(lessons, httpx_mock):
    root = Path(os.environ["BYTESUP_OUTPUTS"])
    today = datetime.now(timezone.utc).date().isoformat()
    with pytest.raises(RunFolderError, match="no unfinished run"):
        run_lessons(["01_tokens"], RunOptions(server_url=URL, resume=True))
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    run_lessons(["01_tokens"], RunOptions(server_url=URL))                       # outputs/<today>, complete
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL)) == 1  # <today>.2, incomplete
    httpx_mock.add_response(url=URL + "/completion", json=load_fixture("completion_decode")["response"], is_reusable=True)
    con, buf = console()
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, resume=True), console=con) == 0
    assert manifest_of(root / f"{today}.2")["status"] == "complete"
    assert f"Resuming {root.resolve() / (today + '.2')}" in buf.getvalue()
    assert not (root / f"{today}.3").exists()


def test_a_damaged_manifest_is_one_clear_error_not_a_traceback(lessons, tmp_path, httpx_mock):
    live = _live(httpx_mock, tmp_path)
    (live / "manifest.json").write_text("{bad", encoding="utf-8")
    result = cli.invoke(app, ["run", "01_tokens", "--replay", str(live), "--out", str(tmp_path / "replayed")])
    assert result.exit_code != 0
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no exception escaped
    assert "manifest.json is not valid JSON" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "replayed").exists()
