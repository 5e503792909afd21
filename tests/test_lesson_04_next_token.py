"""Lesson 04 replayed from its recorded fixture: probabilities, softmax and the speed arithmetic."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import pytest
from lessonkit import recorded, recorded_exchanges

from bytesup import published
from bytesup.records import Completion
from bytesup.results import load_result
from bytesup.runner import RunOptions, run_lessons

LESSON = "04_next_token"
TOP8_TABLES = ["top8_capital_of_france", "top8_cat_sat", "top8_fibonacci", "top8_for_loop"]
# The server's own probability against e^logprob: both are float32 softmax values, so they agree to
# about 1e-6 relative; 1e-4 leaves room for another build's rounding and still catches a wrong token.
SERVER_PROB_REL_TOL = 1e-3  # float32 sums over the whole vocabulary in two orders (see check.EXP_RELATIVE_TOLERANCE)
MEASUREMENTS = ["prefill_tokens_per_s_long_prompt", "decode_tokens_per_s_short_prompt", "decode_tokens_per_s_long_prompt",
                "prefill_decode_ratio", "decode_ceiling_tokens_per_s", "decode_efficiency", "read_bandwidth_gb_per_s"]


def _exchanges():
    return recorded_exchanges(LESSON)


# --- top eight ----------------------------------------------------------------------------------

def test_top8_tables_have_the_published_shape(result, lesson):
    for (name, prompt), expected in zip(lesson.PROMPTS, TOP8_TABLES):
        assert name == expected
        t = result.table(name)
        assert [(c.name, c.unit) for c in t.columns] == [("rank", ""), ("token", ""), ("probability", "%"),
                                                         ("server probability", "%"), ("logprob", "")]
        assert repr(prompt) in t.title
        assert [r[0] for r in t.rows] == list(range(1, 9))


@pytest.mark.parametrize("name", TOP8_TABLES)
def test_probabilities_are_exp_logprob_in_descending_order(result, name, lesson):
    rows = result.table(name).rows
    for _, token, pct, _, logprob in rows:
        assert logprob <= 0
        assert pct == pytest.approx(100 * math.exp(logprob), rel=1e-12)
        assert token[0] in "'\"" or token.startswith("b'") or token.startswith('b"')  # spacing visible (repr)
    logprobs = [r[4] for r in rows]
    assert logprobs == sorted(logprobs, reverse=True)
    share = sum(r[2] for r in rows) / 100
    assert 0 < share <= 1
    notes = result.table(name).notes
    assert f"cover {lesson.percent(share)} of the probability" in notes[0]
    assert f"= {math.exp(rows[0][4]):.4g}" in notes[1]


@pytest.mark.parametrize("name", TOP8_TABLES)
def test_server_probability_matches_exp_logprob(result, name):
    """The server's own probability (temperature 1, no cuts) equals e^logprob within SERVER_PROB_REL_TOL."""
    rows = result.table(name).rows
    paired = [(r[3], r[2]) for r in rows if r[3] is not None]
    assert paired, "no token of the top eight among the server's eight"
    for server, ours in paired:
        assert server == pytest.approx(ours, rel=SERVER_PROB_REL_TOL)
    gap_abs = max(abs(q - p) / 100 for q, p in paired)
    gap_rel = max(abs(q - p) / p for q, p in paired)
    assert f"{len(paired)} of these {len(rows)} tokens" in result.table(name).notes[3]
    assert f"is {gap_abs:.2g} (relative: {gap_rel:.2g})" in result.table(name).notes[3]


def test_top8_requests_pin_their_settings(lesson):
    top8 = [ex["request"] for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("post_sampling_probs") is False]
    server = [ex["request"] for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("post_sampling_probs") is True]
    assert len(top8) == len(server) == len(lesson.PROMPTS)
    for body in top8:
        assert (body["n_predict"], body["n_probs"], body["temperature"], body["cache_prompt"], body["seed"]) == (1, 8, 0, False, 42)
    for body in server:  # temperature 1 alone, every cut off: the full softmax
        assert (body["n_predict"], body["n_probs"], body["temperature"], body["samplers"], body["top_k"], body["top_p"],
                body["min_p"], body["cache_prompt"], body["seed"]) == (1, 8, 1.0, ["temperature"], 0, 1.0, 0.0, False, 42)


def test_top8_rows_match_the_recorded_responses(lesson):
    completions = [ex for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("n_probs")]
    top8 = [ex for ex in completions if ex["request"]["post_sampling_probs"] is False]
    server = [ex for ex in completions if ex["request"]["post_sampling_probs"] is True]
    assert [ex["request"]["prompt"] for ex in top8] == [p for _, p in lesson.PROMPTS]
    assert [ex["request"]["prompt"] for ex in server] == [p for _, p in lesson.PROMPTS]
    for ex, theirs in zip(top8, server):
        rows = lesson.top_rows(Completion.model_validate(ex["response"]), Completion.model_validate(theirs["response"]))
        listed = ex["response"]["completion_probabilities"][0]["top_logprobs"]
        assert sorted(r[4] for r in rows) == sorted(c["logprob"] for c in listed)
        by_id = {c["id"]: c["prob"] for c in theirs["response"]["completion_probabilities"][0]["top_probs"]}
        by_logprob = {c["logprob"]: c["id"] for c in listed}
        for r in rows:
            tid = by_logprob[r[4]]
            assert r[3] == (100 * by_id[tid] if tid in by_id else None)


# --- softmax ----------------------------------------------------------------------------------------

def test_softmax_example(result):
    rows = result.table("softmax").rows
    assert [r[0] for r in rows] == [2.0, 1.0, 0.1]
    probs = [r[2] for r in rows]
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    assert [r[1] for r in rows] == pytest.approx([math.exp(z) for z in (2.0, 1.0, 0.1)], rel=1e-12)
    assert [r[3] for r in rows] == pytest.approx(probs, abs=1e-12)  # +100 changes nothing
    assert probs[0] / probs[1] == pytest.approx(math.e, rel=1e-12)
    assert probs[0] == pytest.approx(0.659, abs=5e-4)


# --- prefill and decode ----------------------------------------------------------------------------------

def test_measurement_names(result):
    names = [m.name for m in result.measurements]
    for name in MEASUREMENTS:
        assert names.count(name) == 1, name


def test_long_prompt_has_the_requested_length(result):
    requested = result.settings["long_prompt_tokens"]
    prefill = result.measurement("prefill_tokens_per_s_long_prompt")
    assert prefill.settings["prompt_tokens"] == requested
    n_ctx = result.settings["n_ctx"]
    assert requested == min(1921, n_ctx - 32 - 16)
    long = [ex for ex in _exchanges() if ex["path"] == "/completion" and isinstance(ex["request"]["prompt"], list)]
    assert len(long) == result.settings["repeat"] >= 2
    for ex in long:
        assert len(ex["request"]["prompt"]) == requested
        assert ex["response"]["timings"]["prompt_n"] == requested
        assert ex["request"]["cache_prompt"] is False and ex["request"]["temperature"] == 0


def test_ratio_is_prefill_over_decode(result):
    prefill = result.measurement("prefill_tokens_per_s_long_prompt")
    decode = result.measurement("decode_tokens_per_s_short_prompt")
    ratio = result.measurement("prefill_decode_ratio")
    assert ratio.median == pytest.approx(prefill.median / decode.median, rel=1e-12)
    row = result.table("prefill_vs_decode").rows[-1]
    assert row[2] == ratio.median
    assert row[3] <= row[2] <= row[4]


def test_speeds_come_from_the_server_timings(result):
    long = [ex["response"]["timings"] for ex in _exchanges()
            if ex["path"] == "/completion" and isinstance(ex["request"]["prompt"], list)]
    prefill = result.measurement("prefill_tokens_per_s_long_prompt").samples
    decode_long = result.measurement("decode_tokens_per_s_long_prompt").samples
    assert prefill == pytest.approx([t["prompt_n"] / t["prompt_ms"] * 1000 for t in long], rel=1e-12)
    assert decode_long == pytest.approx([(t["predicted_n"] - 1) / t["predicted_ms"] * 1000 for t in long], rel=1e-12)
    table = result.table("prefill_vs_decode")
    decode_short = result.measurement("decode_tokens_per_s_short_prompt").samples
    assert [r[5] for r in table.rows[:3]] == [len(prefill), len(decode_short), len(decode_long)]
    assert table.rows[0][2:5] == [statistics.median(prefill), min(prefill), max(prefill)]


def test_efficiency_is_decode_over_ceiling(result):
    info = result.host_values["model_info"]
    assert result.host_values["server_facts"]["host_bandwidth_applies"] is True  # recorded on this host's CPU
    bw = result.measurement("read_bandwidth_gb_per_s")
    ceiling = result.measurement("decode_ceiling_tokens_per_s")
    decode = result.measurement("decode_tokens_per_s_short_prompt")
    eff = result.measurement("decode_efficiency")
    assert eff.unit == "%" and bw.higher_is_better is True
    assert ceiling.samples == pytest.approx([b * 1e9 / info["tensor_bytes"] for b in bw.samples], rel=1e-12)
    assert eff.median == pytest.approx(100 * decode.median / ceiling.median, rel=1e-12)
    assert eff.samples == pytest.approx([100 * d / ceiling.median for d in decode.samples], rel=1e-12)
    rows = {r[0]: r for r in result.table("decode_vs_ceiling").rows}
    assert rows["decode ÷ ceiling, CPU of this host"][2] == pytest.approx(eff.median, rel=1e-12)
    assert rows["decode ÷ ceiling, CPU of this host"][5] == published.LESSON4["decode_efficiency_percent"]  # labelled reference
    names = [m.name for m in result.measurements]
    assert "decode_ceiling_tokens_per_s_given_bandwidth" not in names  # no --bandwidth-gbs when recorded
    assert result.host_values["option_bandwidth_gbs"] is None


def _replay_with(tmp_path, **host_values):
    """The recorded run replayed with some host values changed (an option, the server's facts)."""
    source = tmp_path / "source"
    shutil.copytree(recorded(LESSON), source)
    path = source / f"{LESSON}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["host_values"].update(host_values)
    path.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    assert run_lessons([LESSON], RunOptions(replay=source, out=out, command=["test"])) == 0
    return load_result(json.loads((out / f"{LESSON}.json").read_text(encoding="utf-8")), LESSON)


def test_given_bandwidth_on_a_server_the_host_bandwidth_does_not_bound(tmp_path):
    facts = {**json.loads((recorded(LESSON) / f"{LESSON}.json").read_text())["host_values"]["server_facts"],
             "local": False, "host_bandwidth_applies": False, "reason": "the server runs on gpu-box, not on this host"}
    res = _replay_with(tmp_path, option_bandwidth_gbs=273.0, server_facts=facts)
    per_token = res.host_values["model_info"]["tensor_bytes"]
    names = [m.name for m in res.measurements]
    assert "decode_efficiency" not in names and "decode_ceiling_tokens_per_s" not in names
    assert "read_bandwidth_gb_per_s" in names
    given = res.measurement("decode_ceiling_tokens_per_s_given_bandwidth")
    eff = res.measurement("decode_efficiency_given_bandwidth")
    decode = res.measurement("decode_tokens_per_s_short_prompt")
    assert given.settings == eff.settings == {"bandwidth_gbs": 273.0}
    assert given.samples == [pytest.approx(273.0 * 1e9 / per_token, rel=1e-12)]
    assert eff.unit == "%"
    assert eff.samples == pytest.approx([100 * d / given.samples[0] for d in decode.samples], rel=1e-12)
    table = res.table("decode_vs_ceiling")
    rows = {r[0]: r for r in table.rows}
    assert "decode ÷ ceiling, CPU of this host" not in rows
    assert rows["decode ÷ ceiling at 273 GB/s"][2] == pytest.approx(eff.median, rel=1e-12)
    assert any("does not bound this server's decode: the server runs on gpu-box" in n for n in table.notes)
    assert not any("CPU caches" in n for n in table.notes)


def test_given_bandwidth_beside_the_host_bandwidth(tmp_path):
    res = _replay_with(tmp_path, option_bandwidth_gbs=100.0)
    names = [m.name for m in res.measurements]
    for name in ("decode_efficiency", "decode_ceiling_tokens_per_s", "decode_efficiency_given_bandwidth",
                 "decode_ceiling_tokens_per_s_given_bandwidth"):
        assert names.count(name) == 1, name
    per_token = res.host_values["model_info"]["tensor_bytes"]
    assert res.measurement("decode_ceiling_tokens_per_s_given_bandwidth").median == pytest.approx(100.0 * 1e9 / per_token)


def test_ceiling_figures(lesson):
    fig = lesson.ceiling_figures([10.0, 20.0], 2e9, [4.0, 8.0, 6.0], True, 50.0)
    assert fig["ceilings"] == [2.0, 4.0, 3.0] and fig["ceiling"] == 3.0
    assert fig["efficiencies"] == pytest.approx([100 * 10 / 3, 100 * 20 / 3])
    assert fig["given_ceiling"] == 25.0
    assert fig["given_efficiencies"] == [40.0, 80.0]
    off = lesson.ceiling_figures([10.0], 2e9, [4.0], False, None)
    assert off["efficiencies"] is None and off["given_ceiling"] is None and off["ceilings"] == [2.0]


def test_notes_follow_the_data(result):
    prefill = result.measurement("prefill_tokens_per_s_long_prompt")
    short = result.measurement("decode_tokens_per_s_short_prompt")
    long = result.measurement("decode_tokens_per_s_long_prompt")
    notes = result.table("prefill_vs_decode").notes
    ratio = prefill.median / short.median
    assert ("faster per token than decode" in notes[0]) == (ratio > 1)
    assert ("slower, not faster" in notes[0]) == (ratio <= 1)
    assert ("attention reads" in notes[1]) == (long.max < short.min)
    assert ("within the spread" in notes[1]) == (long.max >= short.min and long.min <= short.max)


def test_cost_of_one_pass_is_two_flops_per_parameter(result):
    rows = {r[0]: r for r in result.table("cost_of_one_pass").rows}
    n_params = result.host_values["model_info"]["n_params"]
    assert rows["parameters"][2] == n_params
    assert rows["FLOPs per token (2 per parameter)"][2] == 2 * n_params
    assert rows["FLOPs per token (2 per parameter)"][3] == pytest.approx(13.48e9)


# --- pure functions ---------------------------------------------------------------------------------------

def test_top_rows_and_largest_gap(lesson):
    top = Completion.model_validate({"content": "", "timings": {"prompt_n": 1, "prompt_ms": 1, "predicted_n": 1, "predicted_ms": 1},
                                     "completion_probabilities": [{"id": 1, "token": " a", "logprob": math.log(0.5), "top_logprobs": [
                                         {"id": 2, "token": "b", "logprob": math.log(0.25)},
                                         {"id": 1, "token": " a", "logprob": math.log(0.5)}]}]})
    theirs = Completion.model_validate({"content": "", "timings": {"prompt_n": 1, "prompt_ms": 1, "predicted_n": 1, "predicted_ms": 1},
                                        "completion_probabilities": [{"id": 1, "token": " a", "prob": 0.5, "top_probs": [
                                            {"id": 1, "token": " a", "prob": 0.5001}]}]})
    rows = lesson.top_rows(top, theirs)
    assert [r[1] for r in rows] == ["' a'", "'b'"]
    assert rows[0][3] == pytest.approx(50.01) and rows[1][3] is None
    gap = lesson.largest_gap(rows)
    assert gap == (pytest.approx(1e-4), pytest.approx(2e-4))
    assert lesson.largest_gap([r[:3] + [None] + r[4:] for r in rows]) is None
    assert lesson.top_rows(top)[0][3] is None


def test_long_prompt_length(lesson):
    assert lesson.long_prompt_length(2048) == 1921
    assert lesson.long_prompt_length(1024) == 1024 - 32 - 16
    assert lesson.long_prompt_length(10) == 1


def test_softmax_example_function(lesson):
    sm = lesson.softmax_example([0.0, 0.0], shift=5.0)
    assert sm["probs"] == [0.5, 0.5] and sm["shift_max_abs_difference"] == 0.0
    assert lesson.softmax_example()["sum"] == pytest.approx(1.0)


def test_percent(lesson):
    assert lesson.percent(0.927) == "92.7%"
    assert lesson.percent(0.58) == "58%"
    assert lesson.percent(0.005731) == "0.573%"
