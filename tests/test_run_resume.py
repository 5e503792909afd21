"""Resuming a run (bytesup.run.runner, bytesup.run.folder): into the same folder only with the same configuration,
a failed lesson re-run and its stale result set aside, the next free folder of the day, and the command that
continues a run."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from bytesup.check.compare import load_run
from bytesup.cli.app import app
from bytesup.errors import RunFolderError
from bytesup.options import RunOptions
from bytesup.run import folder
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from faultkit import cli, console, flat, live_run, manifest_of, ROOT
from test_runner import lessons, serve, URL  # noqa: F401 (lessons is a fixture)


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


def test_the_resume_command_shows_a_path_with_brackets_whole(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    out = tmp_path / "a[bold]b"
    con, buf = console()
    run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=["bytesup", "run-all"]), console=con)
    assert f"bytesup run-all --out '{out}' --resume" in buf.getvalue()


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
    live = live_run(httpx_mock, tmp_path)
    manifest = manifest_of(live)
    manifest["lessons"]["02_decode"].update({"status": "failed", "error": "HTTP 500"})
    (live / "manifest.json").write_text(json.dumps(manifest))
    run = load_run(live)
    assert list(run.results) == ["01_tokens"]
    assert any("02_decode: failed" in p for p in run.problems)
    # --resume re-runs it, without calling its stale file a clash.
    assert run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=live, resume=True)) == 0
    assert manifest_of(live)["lessons"]["02_decode"]["status"] == "ok"


def test_the_resume_hint_repeats_the_runs_own_options_without_the_key(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_exception(httpx.ConnectError("refused"), url=URL + "/completion")
    out = tmp_path / "run"
    con, buf = console()
    command = ["bytesup", "run-all", "--server", URL, "--repeat", "2", "--api-key", "sk-hidden", "--force"]
    run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=command), console=con)
    assert f"bytesup run-all --server {URL} --repeat 2 --out {out.resolve()} --resume" in buf.getvalue()
    assert "sk-hidden" not in buf.getvalue()


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


def test_the_resume_command_of_a_make_run_is_a_make_run(monkeypatch, tmp_path):
    command = ["bytesup", "run-all", "--own-server", "--report", "--repeat", "5", "--out", "old", "--force"]
    monkeypatch.delenv(folder.MAKE_RUN_ENV, raising=False)
    assert folder.resume_command(command, tmp_path / "r") == (
        f"bytesup run-all --own-server --report --repeat 5 --out {tmp_path / 'r'} --resume")
    monkeypatch.setenv(folder.MAKE_RUN_ENV, "make run MODEL=tiny-q8_0")
    assert folder.resume_command(command, tmp_path / "r") == (
        f"make run MODEL=tiny-q8_0 ARGS='--repeat 5 --out {tmp_path / 'r'} --resume'")


def test_run_course_starts_the_run_with_its_own_server_and_a_make_resume():
    script = (ROOT / "scripts" / "run_course.sh").read_text()
    assert "exec \"$py\" -m bytesup run-all --own-server --report" in script
    assert "BYTESUP_DIE_WITH_PARENT=1" in script and "BYTESUP_MAKE_RUN=" in script
    assert "start_server.sh" not in script  # no server outside the run, for make's trap to stop too early
