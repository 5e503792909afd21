"""Replays read their recordings strictly (bytesup.store.runs.load_replay): a recording edited, truncated or not
made of exchanges fails its lesson with one paragraph, and the others replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, HealthCheck, settings, strategies as st

from bytesup.cli.app import app
from bytesup.errors import RunFolderError
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons
from bytesup.store.runs import load_replay

from faultkit import assert_one_paragraph, cli, console, json_values, live_run, manifest_of
from test_runner import lessons  # noqa: F401 (lessons is a fixture)


def _edit_decode_recording(live: Path) -> None:
    path = live / "http" / "02_decode.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row["response"]["timings"]["predicted_ms"] = 1.0  # a much faster decode than recorded
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def recorded_lesson(folder: Path, lines: list[str]) -> Path:
    from lessonkit import recorded

    source = recorded("01_model_on_disk")
    folder.mkdir(parents=True)
    (folder / "01_model_on_disk.json").write_bytes((source / "01_model_on_disk.json").read_bytes())
    (folder / "http").mkdir()
    (folder / "http" / "01_model_on_disk.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_modified_recording_fails_its_lesson_and_the_others_replay(lessons, tmp_path, httpx_mock):
    live = live_run(httpx_mock, tmp_path)
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
    live = live_run(httpx_mock, tmp_path)
    _edit_decode_recording(live)
    out = tmp_path / "replayed"
    con, buf = console()
    assert run_lessons(["02_decode"], RunOptions(replay=live, out=out, allow_modified=True), console=con) == 0
    diffs = manifest_of(out)["lessons"]["02_decode"]["replay_differences"]
    assert any(d.startswith("measurements[0].median") for d in diffs), diffs
    assert "differs from the recorded 02_decode.json" in buf.getvalue()


def test_a_recording_without_a_digest_is_still_compared_with_its_result(lessons, tmp_path, httpx_mock):
    live = live_run(httpx_mock, tmp_path)
    manifest = manifest_of(live)
    for entry in manifest["lessons"].values():
        entry.pop("http_sha256")  # a run recorded before digests existed
    (live / "manifest.json").write_text(json.dumps(manifest))
    _edit_decode_recording(live)
    out = tmp_path / "replayed"
    run_lessons(["02_decode"], RunOptions(replay=live, out=out))
    assert manifest_of(out)["lessons"]["02_decode"]["replay_differences"]


def test_a_truncated_recording_fails_that_lesson_with_a_message(lessons, tmp_path, httpx_mock):
    live = live_run(httpx_mock, tmp_path)
    path = live / "http" / "01_tokens.jsonl"
    path.write_text(path.read_text()[:-40])
    res = cli.invoke(app, ["run", "01_tokens", "02_decode", "--replay", str(live), "--out", str(tmp_path / "r"), "--allow-modified"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    lessons_state = manifest_of(tmp_path / "r")["lessons"]
    assert "Line 1 of" in lessons_state["01_tokens"]["error"] and "truncated or damaged" in lessons_state["01_tokens"]["error"]
    assert lessons_state["02_decode"]["status"] == "ok"


@pytest.mark.parametrize("line", ["[1, 2]", "42", '"text"', "null", "[" * 100_000 + "]" * 100_000])
def test_recording_lines_that_are_not_exchanges_are_one_paragraph(tmp_path, line):
    folder = recorded_lesson(tmp_path / "run", [line])
    with pytest.raises(RunFolderError, match="Line 1 of"):
        load_replay(folder, "01_model_on_disk", allow_modified=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(max_size=40) | json_values.map(json.dumps), max_size=4))
def test_any_recording_lines_replay_or_are_one_paragraph(tmp_path, lines):
    import shutil

    folder = tmp_path / "fuzzrun"
    shutil.rmtree(folder, ignore_errors=True)
    recorded_lesson(folder, [ln.replace("\n", " ") for ln in lines])
    try:
        load_replay(folder, "01_model_on_disk", allow_modified=True)
    except Exception as exc:  # noqa: BLE001 - whatever it is, it must keep the promise
        assert isinstance(exc, RunFolderError)
        assert_one_paragraph(exc)
