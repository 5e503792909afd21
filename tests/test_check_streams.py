"""`bytesup check`'s claims on lesson 5's streamed tokens, on its run recorded from the real engine,
then with one number planted wrong in a copy of the recording (deliberately broken)."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from bytesup.check import checker
from bytesup.check.compare import load_run

from lessonkit import recorded

LESSON = "05_generating_text"


def streams_of(run_dir):
    path = run_dir / "http" / f"{LESSON}.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return path, lines


def claim(run_dir, claim_id: str) -> checker.ClaimResult:
    found = [r for r in checker.check_run(load_run(run_dir), []).results if r.id == claim_id]
    assert len(found) == 1, found
    return found[0]


def planted(tmp_path, change) -> object:
    """A copy of the recorded run whose streamed exchanges `change(line)` edits in place."""
    run_dir = tmp_path / "run"
    shutil.copytree(recorded(LESSON), run_dir)
    path, lines = streams_of(run_dir)
    for line in lines:
        if "stream" in line:
            change(line)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return run_dir


def payload(event):
    return json.loads(event["text"].removeprefix("data: "))


def set_payload(event, data):
    event["text"] = "data: " + json.dumps(data, ensure_ascii=False) + "\n\n"


def test_the_recorded_streams_pass_every_claim():
    run_dir = recorded(LESSON)
    for cid in ("stream_first_token_after_prompt", "stream_one_event_per_token", "stream_clocks_agree"):
        assert claim(run_dir, cid).status == checker.PASS, claim(run_dir, cid)


def derived(line) -> tuple[float, float, float]:
    """(median gap, tolerance, server ms per token) of one recorded stream, worked here from its events:
    tolerance = σ of the gaps + (TTFT − prompt_ms) ÷ (n − 1)."""
    events = [(payload(e), e["arrived_ms"]) for e in line["stream"]]
    times = [at for data, at in events if not data.get("stop")]
    timings = events[-1][0]["timings"]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    tol = statistics.pstdev(gaps) + (times[0] - timings["prompt_ms"]) / (len(times) - 1)
    return statistics.median(gaps), tol, timings["predicted_ms"] / (timings["predicted_n"] - 1)


def resolved(line) -> bool:
    """A stream without speculation whose tolerance is below its time per token."""
    if "stream" not in line or "draft_n" in payload(line["stream"][-1])["timings"]:
        return False
    _, tol, per_token = derived(line)
    return tol < per_token


def test_the_tolerance_is_the_one_derived_from_the_gaps():
    _, lines = streams_of(recorded(LESSON))
    mine = [derived(x) for x in lines if resolved(x)]
    assert mine, "no stream of the recording is resolved: re-record it on a quieter machine"
    shown = claim(recorded(LESSON), "stream_clocks_agree")
    assert any(shown.tolerance.startswith(f"±{tol:.3g} ms") for _, tol, _ in mine), shown


def plant_per_token(factor_of_tolerance: float):
    """Set each resolved stream's predicted_ms so that its time per token lies `factor` tolerances from
    its median gap (the other streams are left alone)."""
    def change(line):
        if not resolved(line):
            return
        median, tol, _ = derived(line)
        data = payload(line["stream"][-1])
        data["timings"]["predicted_ms"] = (median + factor_of_tolerance * tol) * (data["timings"]["predicted_n"] - 1)
        set_payload(line["stream"][-1], data)
    return change


@pytest.mark.parametrize("factor", [1.5, 3.0])
def test_a_server_time_per_token_beyond_the_tolerance_fails(tmp_path, factor):
    result = claim(planted(tmp_path, plant_per_token(factor)), "stream_clocks_agree")
    assert result.status == checker.FAIL, result


def test_a_server_time_per_token_inside_the_tolerance_passes(tmp_path):
    result = claim(planted(tmp_path, plant_per_token(0.5)), "stream_clocks_agree")
    assert result.status == checker.PASS, result


def test_a_first_token_before_prompt_ms_fails(tmp_path):
    def early(line):
        data = payload(line["stream"][-1])
        data["timings"]["prompt_ms"] = line["stream"][0]["arrived_ms"] + 1.0
        set_payload(line["stream"][-1], data)
    result = claim(planted(tmp_path, early), "stream_first_token_after_prompt")
    assert result.status == checker.FAIL and "-1 ms" in result.detail


def test_a_token_missing_from_the_stream_fails(tmp_path):
    def more(line):
        data = payload(line["stream"][-1])
        data["timings"]["predicted_n"] += 1
        set_payload(line["stream"][-1], data)
    result = claim(planted(tmp_path, more), "stream_one_event_per_token")
    assert result.status == checker.FAIL and "predicted_n 129" in result.detail


def test_an_event_that_brings_two_tokens_is_inconclusive(tmp_path):
    def merged(line):
        del line["stream"][5]        # token 6 now arrives with token 7's event, as a held-back token would
    result = claim(planted(tmp_path, merged), "stream_one_event_per_token")
    assert result.status == checker.INCONCLUSIVE and "127 events for 128 tokens" in result.detail


def test_a_client_that_read_the_stream_at_once_cannot_resolve_a_pass(tmp_path):
    def buffered(line):
        end = line["stream"][-1]["arrived_ms"]
        for e in line["stream"]:
            e["arrived_ms"] = end
    result = claim(planted(tmp_path, buffered), "stream_clocks_agree")
    assert result.status == checker.NA and "cannot resolve a pass" in result.detail


def test_a_run_without_streams_is_not_applicable(tmp_path):
    def plain(line):
        del line["stream"]
        line["response_text"] = ""
    run_dir = planted(tmp_path, plain)
    for cid in ("stream_first_token_after_prompt", "stream_one_event_per_token", "stream_clocks_agree"):
        assert claim(run_dir, cid).status == checker.NA
