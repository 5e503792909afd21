"""Where a run's time goes: every lesson's wall time in the manifest and the run's README, and a one-line
estimate before the run from the latest earlier run measured with the same configuration."""

from __future__ import annotations

import json
from pathlib import Path

from bytesup.options import RunOptions
from bytesup.run.folder import estimate, fmt_seconds, run_readme
from bytesup.run.runner import run_lessons
from bytesup.store.manifest import Manifest

from test_runner import URL, lessons, serve  # noqa: F401 (lessons is a fixture)

IDENTITY = Manifest.model_validate({"model": {"sha256": "abc", "size_bytes": 10, "path": "/m/model.gguf"},
            "engine": {"engine": "embedded", "build": "b1", "flags": {"--threads": "2"}},
            "host": {"hostname": "h", "cpu": "c"}, "options": {"repeat": 3, "lesson_options": {}}})


def earlier(root: Path, name: str, seconds: dict[str, float], updated: str, **changes) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    manifest = {"schema_version": 1, **IDENTITY.to_json(), **changes, "updated_at": updated,
                "lessons": {lid: {"status": "ok", "seconds": s} for lid, s in seconds.items()}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_seconds_are_shown_in_whole_seconds_and_minutes():
    assert [fmt_seconds(s) for s in (0.4, 12.5, 59.6, 60, 185.2, 3599.4, 3600, 9000)] == [
        "0 s", "12 s", "1 min 00 s", "1 min 00 s", "3 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 30 min"]


def test_the_estimate_sums_the_latest_comparable_runs_lessons(tmp_path):
    earlier(tmp_path, "a", {"01_a": 10.0, "02_b": 20.0}, "2026-11-01T00:00:00+00:00")
    earlier(tmp_path, "b", {"01_a": 30.0, "02_b": 95.5}, "2026-11-02T00:00:00+00:00")
    earlier(tmp_path, "c", {"01_a": 1.0, "02_b": 1.0}, "2026-11-03T00:00:00+00:00",
            engine={"engine": "embedded", "build": "b2", "flags": {"--threads": "2"}})  # another build: not comparable
    earlier(tmp_path, "d", {"01_a": 1.0}, "2026-11-04T00:00:00+00:00")  # 02_b not timed there
    line = estimate(tmp_path, IDENTITY, ["01_a", "02_b"])
    assert line == "estimate: about 2 min 06 s for 2 lessons, as the comparable run b took"  # 30 + 95.5 = 125.5
    assert estimate(tmp_path, IDENTITY, ["01_a"]) == "estimate: about 1 s for 1 lesson, as the comparable run d took"
    assert estimate(tmp_path, IDENTITY, ["01_a"], skip=tmp_path / "d").endswith("as the comparable run b took")
    other_host = IDENTITY.model_copy(update={"host": IDENTITY.host.model_copy(update={"hostname": "other"})})
    assert estimate(tmp_path, other_host, ["01_a"]).startswith("estimate: none")


def test_the_run_records_each_lessons_wall_time_and_shows_it(lessons, tmp_path, httpx_mock, capsys):
    serve(httpx_mock)
    out = tmp_path / "run"
    assert run_lessons(["01_tokens"], RunOptions(server_url=URL, out=out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    seconds = manifest["lessons"]["01_tokens"]["seconds"]
    assert isinstance(seconds, float) and 0 <= seconds < 60 and manifest["lessons_seconds"] == seconds
    assert "estimate: none for 1 lesson" in capsys.readouterr().err
    readme = run_readme(out, Manifest.model_validate(manifest))
    assert "| lesson | status | time | result |" in readme and f"| `01_tokens` | ok | {fmt_seconds(seconds)} |" in readme


def test_a_run_at_another_repeat_is_scaled_by_the_repeats(tmp_path):
    earlier(tmp_path, "r3", {"01_a": 30.0, "02_b": 60.0}, "2026-11-01T00:00:00+00:00")  # --repeat 3
    many = IDENTITY.model_copy(update={"options": IDENTITY.options.model_copy(update={"repeat": 300})})
    assert estimate(tmp_path, many, ["01_a", "02_b"]) == (
        "estimate: at most about 2 h 30 min for 2 lessons: the run r3 took 1 min 30 s at --repeat 3, scaled to --repeat 300")
    other_host = many.model_copy(update={"host": many.host.model_copy(update={"hostname": "elsewhere"})})
    assert estimate(tmp_path, other_host, ["01_a"]).startswith("estimate: none")


def recorded_lesson(root: Path, name: str, lesson_id: str, paths: list[str], repeat: int, **changes) -> Path:
    folder = earlier(root, name, {lesson_id: 12.0}, "2026-11-05T00:00:00+00:00",
                     options={"repeat": repeat, "lesson_options": {}}, **changes)
    (folder / "http").mkdir()
    (folder / "http" / f"{lesson_id}.jsonl").write_text(
        "".join(json.dumps({"server": "main", "method": "POST", "path": p, "request": {}, "status": 200,
                            "response": {}, "elapsed_ms": 1.0}) + "\n" for p in paths))
    return folder


def test_with_no_comparable_run_the_length_comes_from_the_request_count_and_the_first_request(tmp_path):
    from bytesup.run.folder import first_request_estimate

    elsewhere = {"host": {"hostname": "another", "cpu": "c"}}
    recorded_lesson(tmp_path, "r2", "01_a", ["/tokenize", "/completion", "/completion", "/completion"], 2, **elsewhere)
    many = IDENTITY.model_copy(update={"options": IDENTITY.options.model_copy(update={"repeat": 1000})})
    assert estimate(tmp_path, many, ["01_a"]).startswith("estimate: none")
    said: list[str] = []
    found = first_request_estimate([tmp_path], many, ["01_a"], said.append)
    # 3 requests to /completion at --repeat 2, scaled to --repeat 1000: 3 × 1000 ÷ 2 = 1,500
    assert said == [("estimate: the lessons make about 1,500 requests to /completion at --repeat 1000 (01_a: 3 in r2 at "
                     "--repeat 2, scaled by the repeats); the run's length follows once the first is timed")]
    sink = found.sink("01_a")
    sink.append({"path": "/tokenize", "elapsed_ms": 4.0})
    assert len(said) == 1                                   # not a /completion: not timed
    sink.append({"path": "/completion", "elapsed_ms": 2000.0})
    sink.append({"path": "/completion", "elapsed_ms": 9000.0})
    # The recorded three took 1 ms each: 3 ms at --repeat 2, 1,500 ms at --repeat 1000; the first here took 2,000× the
    # recorded first (2 s against 1 ms): 1.5 s × 2,000 = 3,000 s.
    assert said[1:] == [("estimate: about 50 min 00 s for 1 lesson in requests to /completion: they took 2 s in the "
                         "recorded runs (at this run's --repeat), and this machine's first took 2e+03× the recorded one "
                         "of 01_a (2 s against 0.001 s); starting servers, making models, llama-bench and the lessons' "
                         "own arithmetic come on top")]
    assert [e["path"] for e in sink] == ["/tokenize", "/completion", "/completion"]


def test_the_first_request_scales_the_recorded_times_not_the_count(tmp_path):
    """A recording whose first request is short and the rest long: the first (10 ms) and three of 1 s at --repeat 1.
    Here the first takes 20 ms, twice the recorded one, so the lessons' requests take about 2 × 3.01 s = 6.02 s, where
    the count times the first (4 × 20 ms = 0.08 s) would say a 75th of it."""
    from bytesup.run.folder import first_request_estimate

    folder = recorded_lesson(tmp_path, "r1", "01_a", [], 1, host={"hostname": "another", "cpu": "c"})
    (folder / "http" / "01_a.jsonl").write_text("".join(
        json.dumps({"server": "main", "method": "POST", "path": "/completion", "request": {}, "status": 200,
                    "response": {}, "elapsed_ms": ms}) + "\n" for ms in (10.0, 1000.0, 1000.0, 1000.0)))
    one = IDENTITY.model_copy(update={"options": IDENTITY.options.model_copy(update={"repeat": 1})})
    said: list[str] = []
    found = first_request_estimate([tmp_path], one, ["01_a"], said.append)
    found.sink("01_a").append({"path": "/completion", "elapsed_ms": 20.0})
    assert said[-1].startswith("estimate: about 6 s for 1 lesson in requests to /completion: they took 3 s in the "
                               "recorded runs (at this run's --repeat), and this machine's first took 2× the recorded "
                               "one of 01_a (0.02 s against 0.01 s)")


def test_a_recording_without_times_falls_back_to_the_count(tmp_path):
    from bytesup.run.folder import first_request_estimate

    folder = recorded_lesson(tmp_path, "r1", "01_a", [], 1, host={"hostname": "another", "cpu": "c"})
    (folder / "http" / "01_a.jsonl").write_text("".join(
        json.dumps({"server": "main", "method": "POST", "path": "/completion", "request": {}, "status": 200,
                    "response": {}}) + "\n" for _ in range(3)))
    one = IDENTITY.model_copy(update={"options": IDENTITY.options.model_copy(update={"repeat": 1})})
    said: list[str] = []
    first_request_estimate([tmp_path], one, ["01_a"], said.append).sink("01_a").append(
        {"path": "/completion", "elapsed_ms": 2000.0})
    assert said[-1] == ("estimate: about 6 s for 1 lesson if each of about 3 requests to /completion took as long as "
                        "the first (2 s; the recordings time none); the other requests and the rest of each lesson "
                        "come on top")


def test_with_no_recorded_run_to_count_in_it_says_so(tmp_path):
    from bytesup.run.folder import first_request_estimate

    said: list[str] = []
    assert first_request_estimate([tmp_path], IDENTITY, ["01_a", "02_b"], said.append) is None
    assert said == [(f"estimate: nor from the lessons' requests: no recorded run of 01_a, 02_b under {tmp_path} to "
                     "count them in")]


def test_a_long_run_with_no_earlier_run_says_its_length_after_the_first_request(lessons, tmp_path, httpx_mock,
                                                                                 monkeypatch, capsys):
    serve(httpx_mock)
    root = tmp_path / "outputs"
    monkeypatch.setenv("BYTESUP_OUTPUTS", str(root))
    recorded_lesson(root, "earlier", "02_decode", ["/completion", "/completion"], 3, host={"hostname": "other"})
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=tmp_path / "run", repeat=999)) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "estimate: none for 1 lesson" in said
    # 2 requests at --repeat 3, scaled to 999: 666
    assert "the lessons make about 666 requests to /completion at --repeat 999 (02_decode: 2 in earlier" in said
    # The recorded two took 1 ms each: 666 ms at --repeat 999, times the first here against the recorded 1 ms.
    assert "estimate: about" in said and "1 lesson in requests to /completion: they took 1 s in the recorded runs" in said
