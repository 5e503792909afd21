"""Lesson 04 replayed from its recorded fixture: probabilities, softmax and the speed arithmetic."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from lessonkit import recorded, replay

from bytesup.records import Completion
from bytesup.runner import load_lesson

LESSON = "04_next_token"
TOP8_TABLES = ["top8_capital_of_france", "top8_cat_sat", "top8_fibonacci", "top8_for_loop"]
MEASUREMENTS = ["prefill_tokens_per_s_long_prompt", "decode_tokens_per_s_short_prompt", "decode_tokens_per_s_long_prompt",
                "prefill_decode_ratio", "decode_ceiling_tokens_per_s", "decode_efficiency", "read_bandwidth_gb_per_s"]


@pytest.fixture(scope="module")
def lesson():
    return load_lesson(LESSON)


@pytest.fixture()
def result(tmp_path):
    return replay(LESSON, tmp_path)


def _exchanges():
    path = recorded(LESSON) / "http" / f"{LESSON}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- top eight ----------------------------------------------------------------------------------

def test_top8_tables_have_the_published_shape(result, lesson):
    for (name, prompt), expected in zip(lesson.PROMPTS, TOP8_TABLES):
        assert name == expected
        t = result.table(name)
        assert [(c.name, c.unit) for c in t.columns] == [("rank", ""), ("token", ""), ("probability", "%"), ("logprob", "")]
        assert repr(prompt) in t.title
        assert [r[0] for r in t.rows] == list(range(1, 9))


@pytest.mark.parametrize("name", TOP8_TABLES)
def test_probabilities_are_exp_logprob_in_descending_order(result, name, lesson):
    rows = result.table(name).rows
    for _, token, pct, logprob in rows:
        assert logprob <= 0
        assert pct == pytest.approx(100 * math.exp(logprob), rel=1e-12)
        assert token[0] in "'\"" or token.startswith("b'") or token.startswith('b"')  # spacing visible (repr)
    logprobs = [r[3] for r in rows]
    assert logprobs == sorted(logprobs, reverse=True)
    share = sum(r[2] for r in rows) / 100
    assert 0 < share <= 1
    notes = result.table(name).notes
    assert f"cover {lesson.percent(share)} of the probability" in notes[0]
    assert f"= {math.exp(rows[0][3]):.4g}" in notes[1]


def test_top8_requests_pin_their_settings():
    for ex in _exchanges():
        if ex["path"] == "/completion" and ex["request"].get("n_probs"):
            body = ex["request"]
            assert (body["n_predict"], body["n_probs"], body["temperature"], body["post_sampling_probs"],
                    body["cache_prompt"], body["seed"]) == (1, 8, 0, False, False, 42)


def test_top8_rows_match_the_recorded_responses(lesson):
    top8 = [ex for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("n_probs")]
    assert [ex["request"]["prompt"] for ex in top8] == [p for _, p in lesson.PROMPTS]
    for ex in top8:
        rows = lesson.top_rows(Completion.model_validate(ex["response"]))
        listed = ex["response"]["completion_probabilities"][0]["top_logprobs"]
        assert sorted(r[3] for r in rows) == sorted(c["logprob"] for c in listed)


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
    bw = result.measurement("read_bandwidth_gb_per_s")
    ceiling = result.measurement("decode_ceiling_tokens_per_s")
    decode = result.measurement("decode_tokens_per_s_short_prompt")
    eff = result.measurement("decode_efficiency")
    assert ceiling.samples == pytest.approx([b * 1e9 / info["tensor_bytes"] for b in bw.samples], rel=1e-12)
    assert eff.median == pytest.approx(decode.median / ceiling.median, rel=1e-12)
    assert eff.samples == pytest.approx([d / ceiling.median for d in decode.samples], rel=1e-12)
    rows = {r[0]: r for r in result.table("decode_vs_ceiling").rows}
    assert rows["decode ÷ ceiling"][2] == pytest.approx(100 * eff.median, rel=1e-12)
    assert rows["decode ÷ ceiling"][5] == 85.0  # the published reference, labelled as such


def test_cost_of_one_pass_is_two_flops_per_parameter(result):
    rows = {r[0]: r for r in result.table("cost_of_one_pass").rows}
    n_params = result.host_values["model_info"]["n_params"]
    assert rows["parameters"][2] == n_params
    assert rows["FLOPs per token (2 per parameter)"][2] == 2 * n_params
    assert rows["FLOPs per token (2 per parameter)"][3] == pytest.approx(13.48e9)


# --- pure functions ---------------------------------------------------------------------------------------

def test_token_text_shows_spacing_and_bytes(lesson):
    assert lesson.token_text(" Paris", [32, 80, 97, 114, 105, 115]) == "' Paris'"
    assert lesson.token_text(" ==", None) == "' =='"
    assert lesson.token_text("\ufffd", [0xF0]) == "b'\\xf0'"


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
