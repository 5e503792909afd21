"""The machine's pace (bytesup.run.pace): the same short decode on the run's server before the first lesson and after
each one, kept with every lesson's readings of the machine, and never a reason for a run to fail."""

from __future__ import annotations

import http.client
import json

import pytest
from test_busy import LESSON, URL, serve, two_cores  # noqa: F401  (two_cores is a fixture)

from bytesup.course import busy
from bytesup.run import pace


class Server:
    """A bare client whose server answers each request with the next of `answers` (timings, or an error to raise)."""

    def __init__(self, *answers):
        self.answers, self.bodies = list(answers), []

    def timed(self, body: bytes):
        self.bodies.append(json.loads(body))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return 1.0, answer


def test_each_reading_is_tokens_per_second_from_the_servers_timings():
    # 16 tokens in 100 ms: 160 tokens/s; in 128 ms: 125; in 80 ms: 200.
    server = Server(*({"predicted_n": 16, "predicted_ms": ms} for ms in (100.0, 128.0, 80.0)))
    assert pace.read(server) == [160.0, 125.0, 200.0]
    assert server.bodies == [{"prompt": "The capital of France is", "n_predict": 16, "temperature": 0, "seed": 42,
                              "cache_prompt": False, "ignore_eos": True}] * 3


@pytest.mark.parametrize("bad", [ConnectionRefusedError(), http.client.HTTPException("status 500"),
                                 {"predicted_n": 16}, {"predicted_n": 16, "predicted_ms": 0}])
def test_a_failed_reading_gives_none_and_raises_nothing(bad):
    assert pace.read(Server({"predicted_n": 16, "predicted_ms": 100.0}, bad, bad)) is None


def readings_in_turn(monkeypatch, readings: list[list[float]]) -> list:
    """The pace on (BYTESUP_PACE unset), each reading's decodes the next of `readings`; the list of the bare clients
    read through, one a reading, to count them."""
    monkeypatch.delenv(pace.ENV, raising=False)
    taken, calls = iter(readings), []

    def read(bare):
        calls.append(bare)
        return next(taken)
    monkeypatch.setattr(pace, "read", read)
    return calls


def test_a_live_run_keeps_the_pace_around_each_lesson_and_a_replay_takes_none(two_cores, tmp_path, httpx_mock,  # noqa: F811
                                                                              monkeypatch):
    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons

    folder = tmp_path / "lessons"
    (folder / "02_decode.py").write_text(LESSON)
    serve(httpx_mock)
    two_cores(1.0)
    calls = readings_in_turn(monkeypatch, [[150.0] * 3, [149.0, 150.0, 151.0], [120.0, 124.0, 125.0]])
    live = tmp_path / "live"
    assert run_lessons(["01_decode", "02_decode"], RunOptions(server_url=URL, out=live)) == 0
    assert len(calls) == 3   # before the first lesson, then after each: the reading after one is the next's before
    first, second = (json.loads((live / f"0{i}_decode.json").read_text())["host_values"][busy.HOST_VALUE]
                     for i in (1, 2))
    assert first["pace"] == {"before": [150.0] * 3, "after": [149.0, 150.0, 151.0]}
    assert second["pace"] == {"before": [149.0, 150.0, 151.0], "after": [120.0, 124.0, 125.0]}
    # The pace wandering by 17% across lesson 2 is the machine's wander, not a busy lesson (bytesup.course.busy).
    assert not busy.judge(second).busy
    # check reads the three readings' medians once each: 150, 150 and 124.
    from bytesup.check.claims import consistency
    from bytesup.check.compare import load_run
    assert consistency.pace_medians(load_run(live)) == [150.0, 150.0, 124.0]
    calls.clear()
    assert run_lessons(["01_decode", "02_decode"], RunOptions(replay=live, out=tmp_path / "replayed")) == 0
    assert calls == []


def test_no_pace_is_read_around_a_lesson_that_times_nothing_on_the_server(two_cores, tmp_path, httpx_mock,  # noqa: F811
                                                                           monkeypatch):
    """Lessons 01 and 03 time decodes; 02 times nothing on a server (TIMES_THE_SERVER = False, as lessons 1 to 3 of the
    course say). The run reads the pace before 01 and after it, then not after 02, and reads it again before 03, since
    the reading after 01 is older than lesson 02: four readings, as many as pacing every lesson takes, and none kept
    with 02."""
    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons

    folder = tmp_path / "lessons"
    (folder / "02_host.py").write_text('"""A lesson of this host alone."""\nTITLE = "Host"\nTIMES_THE_SERVER = False\n'
                                       "def main(ctx):\n    return ctx.finish()\n")
    (folder / "03_decode.py").write_text(LESSON)
    serve(httpx_mock)
    two_cores(1.0)
    readings = [[150.0] * 3, [140.0] * 3, [130.0] * 3, [120.0] * 3]
    calls = readings_in_turn(monkeypatch, readings)
    live = tmp_path / "live"
    assert run_lessons(["01_decode", "02_host", "03_decode"], RunOptions(server_url=URL, out=live)) == 0
    assert len(calls) == 4
    kept = {lid: json.loads((live / f"{lid}.json").read_text())["host_values"][busy.HOST_VALUE].get("pace")
            for lid in ("01_decode", "02_host", "03_decode")}
    assert kept == {"01_decode": {"before": readings[0], "after": readings[1]}, "02_host": None,
                    "03_decode": {"before": readings[2], "after": readings[3]}}
    from bytesup.check.claims import consistency
    from bytesup.check.compare import load_run
    assert consistency.pace_medians(load_run(live)) == [150.0, 140.0, 130.0, 120.0]


def test_one_lesson_alone_reads_no_pace(two_cores, tmp_path, httpx_mock, monkeypatch):  # noqa: F811
    from bytesup.options import RunOptions
    from bytesup.run.runner import run_lessons

    serve(httpx_mock)
    two_cores(1.0)
    monkeypatch.delenv(pace.ENV, raising=False)
    monkeypatch.setattr(pace, "read", lambda bare: pytest.fail("a lesson run alone is not made longer by the pace"))
    assert run_lessons(["01_decode"], RunOptions(server_url=URL, out=tmp_path / "live")) == 0


def test_each_prefill_reading_is_prompt_tokens_per_second_from_the_servers_timings():
    # 128 tokens in 320 ms: 400 tokens/s; in 256 ms: 500.
    server = Server(*({"prompt_n": 128, "prompt_ms": ms} for ms in (320.0, 256.0)))
    assert pace.read_prefill(server) == [400.0, 500.0]
    sent = server.bodies[0]
    assert sent["n_predict"] == 1 and sent["cache_prompt"] is False and len(sent["prompt"]) == pace.PREFILL_CHARS
    assert server.bodies == [sent] * 2


def test_a_reading_takes_decodes_then_prefills_and_keeps_the_decodes_where_the_prefills_fail():
    decodes = [{"predicted_n": 16, "predicted_ms": 100.0}] * 3
    assert pace.take(Server(*decodes, {"prompt_n": 128, "prompt_ms": 320.0}, {"prompt_n": 128, "prompt_ms": 256.0})) \
        == {"decode": [160.0] * 3, "prefill": [400.0, 500.0]}
    assert pace.take(Server(*decodes, ConnectionRefusedError())) == {"decode": [160.0] * 3}
    assert pace.take(Server(ConnectionRefusedError())) is None


def test_a_lessons_record_of_the_pace_keeps_prefills_only_where_both_readings_have_them():
    before = {"decode": [150.0], "prefill": [400.0]}
    after = {"decode": [140.0], "prefill": [380.0]}
    assert pace.around(before, after) == {"before": [150.0], "after": [140.0], "prefill_before": [400.0],
                                          "prefill_after": [380.0]}
    assert pace.around(before, {"decode": [140.0]}) == {"before": [150.0], "after": [140.0]}
    assert pace.around(None, after) is None and pace.around(before, None) is None
