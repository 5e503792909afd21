"""Lesson 04 replayed from its recorded fixture: probabilities, softmax and the speed arithmetic."""

from __future__ import annotations

import json
import math
import shutil
import statistics

import numpy as np
import pytest
from lessonkit import QueuedServer, hand_context, recorded, recorded_exchanges

from bytesup.course import ceiling
from bytesup.course import published
from bytesup.course import nexttoken
from bytesup.course.loop import decode_passes
from bytesup.llama.responses import Completion, Timings, decode_tokens_per_s, prefill_tokens_per_s
from bytesup.store.facts.lesson04 import FilePass, NumpyOutcome, NumpyToken, PromptAgreement, ShownTable, ShownToken
from bytesup.store.plans.lesson04 import PROMPTS, TOP8, NumpyFiles, Plan, fresh, read
from bytesup.store.plans.stopping import StoppingRule
from bytesup.store.render import fmt, percent
from bytesup.store.results import load_result
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

LESSON = "04_next_token"
TOP8_TABLES = ["top8_capital_of_france", "top8_cat_sat", "top8_fibonacci", "top8_for_loop"]
# The server's own probability against e^logprob: both are float32 softmax values, so they agree to
# about 1e-6 relative; 1e-4 leaves room for another build's rounding and still catches a wrong token.
SERVER_PROB_REL_TOL = 1e-3  # float32 sums over the whole vocabulary in two orders (see check.EXP_RELATIVE_TOLERANCE)
MEASUREMENTS = ["prefill_tokens_per_s_long_prompt", "decode_tokens_per_s_short_prompt", "decode_tokens_per_s_long_prompt",
                "prefill_decode_ratio", "decode_ceiling_tokens_per_s", "decode_efficiency", "read_bandwidth_gb_per_s"]


def _exchanges(server: str = "main"):
    """The recorded exchanges with one server: the run's ("main") or the f32 width's ("f32")."""
    return [ex for ex in recorded_exchanges(LESSON) if ex.get("server", "main") == server]


@pytest.fixture(scope="module")
def _replayed(tmp_path_factory):
    """The recording replayed with its model files here (built the first time), so the numpy pass is recomputed."""
    from lessonkit import replay

    from bytesup.models.catalog import ensure_model

    ensure_model("smollm2-135m-q4_1")
    ensure_model("smollm2-135m-f32")
    return replay(LESSON, tmp_path_factory.mktemp("replay"))


# --- top eight ----------------------------------------------------------------------------------

def test_top8_tables_have_the_published_shape(result, lesson):
    for (name, prompt), expected in zip(PROMPTS, TOP8_TABLES, strict=True):
        assert name == expected
        t = result.table(name)
        assert [(c.name, c.unit) for c in t.columns] == [("rank", ""), ("token", ""), ("e^logprob", "%"),
                                                         ("server's prob", "%"), ("logprob", "")]
        assert repr(prompt) in t.title
        assert [r[0] for r in t.rows] == list(range(1, 9))
        assert any(n.startswith("Both probabilities come from the server, in two answers: e^logprob is the logprob it "
                                "gives at temperature 0") for n in t.notes), t.notes


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
    assert f"cover {percent(share)} of the probability" in notes[0]
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
    assert len(top8) == len(server) == len(PROMPTS)
    for body in top8:
        assert (body["n_predict"], body["n_probs"], body["temperature"], body["cache_prompt"], body["seed"]) == (1, 8, 0, False, 42)
    for body in server:  # temperature 1 alone, every cut off: the full softmax
        assert (body["n_predict"], body["n_probs"], body["temperature"], body["samplers"], body["top_k"], body["top_p"],
                body["min_p"], body["cache_prompt"], body["seed"]) == (1, 8, 1.0, ["temperature"], 0, 1.0, 0.0, False, 42)


def test_top8_rows_match_the_recorded_responses(result, lesson):
    completions = [ex for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("n_probs")]
    top8 = [ex for ex in completions if ex["request"]["post_sampling_probs"] is False]
    server = [ex for ex in completions if ex["request"]["post_sampling_probs"] is True]
    assert [ex["request"]["prompt"] for ex in top8] == [p for _, p in PROMPTS]
    assert [ex["request"]["prompt"] for ex in server] == [p for _, p in PROMPTS]
    fact = result.fact("top_tokens")
    assert list(fact) == TOP8_TABLES
    for (name, prompt), ex, theirs in zip(PROMPTS, top8, server, strict=True):
        listed = ex["response"]["completion_probabilities"][0]["top_logprobs"]
        by_id = {c["id"]: c["prob"] for c in theirs["response"]["completion_probabilities"][0]["top_probs"]}
        # The recorded candidates, most probable first, read straight from the raw JSON.
        expected = sorted(listed, key=lambda c: -c["logprob"])
        tokens = fact[name]["tokens"]
        assert fact[name]["prompt"] == prompt
        assert [t["id"] for t in tokens] == [c["id"] for c in expected]
        assert [t["rank"] for t in tokens] == list(range(1, len(expected) + 1))
        for t, c, row in zip(tokens, expected, result.table(name).rows, strict=True):
            assert t["logprob"] == c["logprob"] == row[4]
            assert t["probability"] == pytest.approx(math.exp(c["logprob"]), rel=1e-12)
            assert t["server_probability"] == by_id.get(c["id"])
            assert t["token"] == row[1] == repr(c["token"])
            assert row[3] == (pytest.approx(100 * by_id[c["id"]], rel=1e-12) if c["id"] in by_id else None)


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
    table = res.table("decode_vs_ceiling_main")
    rows = {r[0]: r for r in res.table("decode_vs_ceiling").rows}
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


def test_notes_follow_the_data(result):
    prefill = result.measurement("prefill_tokens_per_s_long_prompt")
    short = result.measurement("decode_tokens_per_s_short_prompt")
    long = result.measurement("decode_tokens_per_s_long_prompt")
    notes = result.table("prefill_vs_decode_main").notes
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


# --- the computations, against hand arithmetic ------------------------------------------------------


def test_speeds_take_the_first_repeats_prompt_lengths(lesson):
    def done(prompt_n, prompt_ms, predicted_ms):
        return Completion(content="", timings={"prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": 11,
                                               "predicted_ms": predicted_ms})
    # A later repeat may reuse a cached prompt (1 token evaluated): the lengths are the first repeat's.
    # Prefill 1,000 tokens in 500 ms = 2,000 tokens/s; decode 10 passes in 100 ms = 100 tokens/s, in 200 ms = 50.
    runs = lesson.TimedRuns(n_ctx=2048, n_long=1000, long=[done(1000, 500.0, 200.0), done(1, 1.0, 200.0)],
                            short=[done(5, 5.0, 100.0), done(1, 1.0, 100.0)])
    sp = lesson.speeds(runs)
    assert (sp.prompt_n, sp.short_prompt_n) == (1000, 5)
    assert sp.prefill[0] == 2000.0 and sp.decode_short == [100.0, 100.0] and sp.decode_long == [50.0, 50.0]


def test_decode_counts_the_passes_after_the_first_token():
    # 32 tokens in 310 ms: the first token's time belongs to the prompt, so 31 passes in 0.310 s = 100 tokens/s,
    # the same as the server's own 310 ÷ 31 = 10 ms per token. Counting 32 passes would give 103.2.
    t = Timings(prompt_n=5, prompt_ms=5.0, predicted_n=32, predicted_ms=310.0, predicted_per_token_ms=10.0)
    assert decode_passes(t) == 31
    assert decode_tokens_per_s(t) == pytest.approx(100.0)
    assert decode_tokens_per_s(t) == pytest.approx(1000.0 / t.predicted_per_token_ms)
    assert prefill_tokens_per_s(t) == pytest.approx(1000.0)  # 5 tokens in 5 ms


def _top_answer(logprobs: dict[int, float], generated: int) -> dict:
    names = {5: " Paris", 7: " the", 9: " a", 11: " an"}
    return {"content": names[generated], "timings": {"prompt_n": 5, "prompt_ms": 1, "predicted_n": 1, "predicted_ms": 1},
            "completion_probabilities": [{"id": generated, "token": names[generated], "logprob": logprobs[generated],
                                          "top_logprobs": [{"id": i, "token": names[i], "logprob": lp} for i, lp in logprobs.items()]}]}


def _server_answer(probs: dict[int, float]) -> dict:
    names = {5: " Paris", 7: " the", 9: " a", 11: " an"}
    return {"content": " Paris", "timings": {"prompt_n": 5, "prompt_ms": 1, "predicted_n": 1, "predicted_ms": 1},
            "completion_probabilities": [{"id": 5, "token": " Paris", "prob": probs[5],
                                          "top_probs": [{"id": i, "token": names[i], "prob": p} for i, p in probs.items()]}]}


# Listed out of order on purpose: " the" 1/4, " Paris" 1/2, " a" 1/8. The server lists " Paris" 0.5002,
# " the" 0.2499 and " an", not " a".
HAND_TOP = _top_answer({7: math.log(0.25), 5: math.log(0.5), 9: math.log(0.125)}, generated=5)
HAND_SERVER = _server_answer({5: 0.5002, 7: 0.2499, 11: 0.1})


def test_top_tokens_and_the_largest_gap_by_hand(lesson):
    tokens = lesson.top_tokens(Completion.model_validate(HAND_TOP), Completion.model_validate(HAND_SERVER))
    assert [(t.rank, t.id, t.token) for t in tokens] == [(1, 5, "' Paris'"), (2, 7, "' the'"), (3, 9, "' a'")]
    assert [t.probability for t in tokens] == pytest.approx([0.5, 0.25, 0.125], rel=1e-12)
    assert [t.server_probability for t in tokens] == [0.5002, 0.2499, None]
    # |0.5002 − 0.5| = 0.0002 (relative 0.0004); |0.2499 − 0.25| = 0.0001 (relative 0.0004).
    gap = nexttoken.largest_gap(tokens)
    assert gap == (pytest.approx(2e-4), pytest.approx(4e-4))
    table = lesson.top_table(lesson.TopAnswers("t", "p", Completion.model_validate(HAND_TOP), Completion.model_validate(HAND_SERVER)))
    assert table.share == pytest.approx(0.875) and table.paired == 2 and table.generated == "' Paris'"
    alone = lesson.top_tokens(Completion.model_validate(HAND_TOP))
    assert all(t.server_probability is None for t in alone) and nexttoken.largest_gap(alone) is None


def test_an_answer_without_candidates_is_refused_in_one_paragraph(lesson):
    from bytesup.errors import BytesupError

    empty = {**HAND_TOP, "completion_probabilities": [{**HAND_TOP["completion_probabilities"][0], "top_logprobs": []}]}
    for answer in (empty, {**empty, "completion_probabilities": [{"id": 5, "token": " Paris", "logprob": -0.7}]}):
        with pytest.raises(BytesupError) as caught:
            lesson.top_tokens(Completion.model_validate(answer), Completion.model_validate(HAND_SERVER))
        text = str(caught.value)
        assert "/completion" in text and "completion_probabilities[0].top_logprobs" in text and "n_probs 8" in text
        assert "run the lesson against a llama-server you trust" in text and "\n" not in text


def test_logprobs_whose_exponent_is_zero_are_refused_in_one_paragraph(lesson):
    """Every logprob −1e308: e^logprob is 0, so the relative gap would divide by 0; the answer is refused instead."""
    from bytesup.errors import BytesupError

    from bytesup.llama.responses import parse

    # Every candidate at e^logprob = 0 is refused where the client reads the answer, before the lesson sees it.
    floor = _top_answer({5: -1e308, 7: -1e308, 9: -1e308}, generated=5)
    with pytest.raises(BytesupError) as caught:
        parse(Completion, floor, path="/completion", url="http://127.0.0.1:8099")
    text = str(caught.value)
    assert "/completion" in text and "completion_probabilities.0" in text and "below 2^-32" in text and "\n" not in text
    # One candidate far below any softmax's top eight is refused too; e^−745.2 is the last value above 0.
    low = _top_answer({5: math.log(0.5), 7: -800.0, 9: math.log(0.125)}, generated=5)
    with pytest.raises(BytesupError, match=r"top_logprobs\[1\]\.logprob = -800\.0"):
        lesson.top_tokens(Completion.model_validate(low))
    assert math.exp(-745.0) > 0 and lesson.top_tokens(Completion.model_validate(
        _top_answer({5: math.log(0.5), 7: -745.0, 9: math.log(0.125)}, generated=5)))[2].probability == math.exp(-745.0)


def test_pass_cost_by_hand(lesson):
    cost = ceiling.token_work(50_000_000, 100_000_000)
    # 2 × 50,000,000 = 1e8 FLOPs; ÷ 1e8 bytes = 1 FLOP per byte.
    assert (cost.flops, cost.flops_per_byte) == (1e8, 1.0)


# --- main on hand-made answers ------------------------------------------------------------------------

def _timed(prompt_n: int, prompt_ms: float, predicted_ms: float) -> dict:
    return {"content": "x", "timings": {"prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": 32, "predicted_ms": predicted_ms}}


# 100,000,000 bytes per token (the file is 120,000,000 bytes: decode reads the tensors, not the file) and 50,000,000 parameters.
HAND_INFO = {"hyperparameters": {"n_vocab": 10}, "n_params": 50_000_000, "tensor_bytes": 100_000_000, "file_size_bytes": 120_000_000}
# 20, 25 and 15 GB/s ÷ 1e8 bytes = 200, 250 and 150 tokens/s; the median ceiling is 200.
HAND_BW = {"gb_per_s": {"samples": [20.0, 25.0, 15.0], "median": 20.0, "min": 15.0, "max": 25.0},
           "threads": 2, "bytes_per_thread": 2**28, "bytes_per_sample": 2**29, "method": "np.add.reduce over 2 threads"}
LOCAL = {"host_bandwidth_applies": True, "reason": "the server decodes on this host's CPU, from this host's memory"}
REMOTE = {"host_bandwidth_applies": False, "reason": "the server runs on gpu-box, not on this host"}


def _run_hand(lesson, facts=LOCAL, given=None, bench=None):
    server = QueuedServer({
        # Four prompts, each asked twice (the full softmax, then the server's own probabilities).
        "/completion": [HAND_TOP, HAND_SERVER] * 4 + [
            # The long prompt (52 tokens): 52 in 26 ms = 2,000 tokens/s and in 20.8 ms = 2,500 tokens/s;
            # decode 31 passes in 620 ms = 50 tokens/s and in 775 ms = 40 tokens/s.
            _timed(52, 26.0, 620.0), _timed(52, 20.8, 775.0),
            # The short prompt: 31 passes in 310 ms = 100 tokens/s, in 248 ms = 125 tokens/s.
            _timed(5, 5.0, 310.0), _timed(5, 5.0, 248.0)],
        "/props": [{"default_generation_settings": {"n_ctx": 100}}],   # 100 − 32 − 16 = 52 tokens for the long prompt
        "/tokenize": [{"tokens": list(range(60))}],
    })
    ctx = hand_context(LESSON, server, bandwidth=HAND_BW,
                       host_values={"model_info": HAND_INFO, "server_facts": facts, "option_bandwidth_gbs": given, **(bench or {})})
    result = lesson.main(ctx)
    assert server.left() == {}
    return result, server


def test_main_on_hand_made_answers(lesson):
    result, server = _run_hand(lesson)
    # The requests: the pinned top-eight pair per prompt, then the 52-token prompt (the first 52 ids) and the short one.
    bodies = [body for _, path, body in server.requests if path == "/completion"]
    assert [b["post_sampling_probs"] for b in bodies[:8]] == [False, True] * 4
    assert [b["temperature"] for b in bodies[:8]] == [0, 1.0] * 4
    assert bodies[8]["prompt"] == list(range(52)) and bodies[10]["prompt"] == "The capital of France is"

    # Softmax, recomputed: 0.6590, 0.2424, 0.0986 (see test_softmax_worked_by_hand).
    assert [r[2] for r in result.table("softmax").rows] == pytest.approx([0.6590, 0.2424, 0.0986], abs=1e-4)

    # The top tokens: 50%, 25%, 12.5%, together 87.5%; the server's own 50.02% and 24.99%.
    table = result.table("top8_capital_of_france")
    assert [r[:3] for r in table.rows] == [[1, "' Paris'", pytest.approx(50.0)], [2, "' the'", pytest.approx(25.0)],
                                           [3, "' a'", pytest.approx(12.5)]]
    assert [r[3] for r in table.rows] == [pytest.approx(50.02), pytest.approx(24.99), None]
    assert table.notes[0] == "The top 3 cover 87.5% of the probability; the other 7 vocabulary entries share the remaining 12.5%."
    assert table.notes[2] == "At temperature 0 the server generated ' Paris', the rank-1 token."
    assert "for 2 of these 3 tokens" in table.notes[3] and "is 0.0002 (relative: 0.0004)" in table.notes[3]
    fact = result.fact("top_tokens")
    assert list(fact) == ["top8_capital_of_france", "top8_cat_sat", "top8_fibonacci", "top8_for_loop"]
    assert fact["top8_cat_sat"]["prompt"] == "The cat sat on the"
    assert fact["top8_capital_of_france"]["tokens"] == [
        {"rank": 1, "id": 5, "token": "' Paris'", "probability": pytest.approx(0.5), "logprob": pytest.approx(math.log(0.5)),
         "server_probability": 0.5002},
        {"rank": 2, "id": 7, "token": "' the'", "probability": pytest.approx(0.25), "logprob": pytest.approx(math.log(0.25)),
         "server_probability": 0.2499},
        {"rank": 3, "id": 9, "token": "' a'", "probability": pytest.approx(0.125), "logprob": pytest.approx(math.log(0.125)),
         "server_probability": None}]

    # One pass: 2 × 50,000,000 = 1e8 FLOPs over 1e8 bytes.
    cost = {r[0]: r[2] for r in result.table("cost_of_one_pass").rows}
    assert cost["bytes read (every weight once)"] == 100_000_000 and cost["FLOPs per token (2 per parameter)"] == 1e8
    assert cost["FLOPs per byte read"] == 1.0

    # Speeds: prefill 2,000 and 2,500; decode 100 and 125 after the short prompt, 50 and 40 after the long one.
    assert result.measurement("prefill_tokens_per_s_long_prompt").samples == pytest.approx([2000.0, 2500.0])
    assert result.measurement("decode_tokens_per_s_short_prompt").samples == pytest.approx([100.0, 125.0])
    assert result.measurement("decode_tokens_per_s_long_prompt").samples == pytest.approx([50.0, 40.0])
    # Ratio: median prefill 2,250 ÷ median decode 112.5 = 20; the spread 2,000 ÷ 125 = 16 to 2,500 ÷ 100 = 25.
    assert result.measurement("prefill_decode_ratio").samples == pytest.approx([20.0])
    assert result.table("prefill_vs_decode").rows[3][2:5] == pytest.approx([20.0, 16.0, 25.0])
    notes = result.table("prefill_vs_decode_main").notes
    assert "20.0× faster per token" in notes[0] and "ceil(52 ÷ 512) = 1 time(s) for 52 tokens" in notes[0]
    # 45 ÷ 112.5 = 40.0%; every long-prompt sample (40, 50) below every short-prompt one (100, 125).
    assert notes[1].startswith("Decode after the long prompt ran at 40.0% of its speed") and "beyond the spread" in notes[1]
    # 2,250 tokens/s × 1e8 FLOPs = 225 GFLOP/s; 112.5 × 1e8 = 11.25 GFLOP/s.
    assert "prefill did 225.00 GFLOP/s of weight arithmetic and decode 11.25 GFLOP/s" in notes[3]

    # The ceiling: 200, 250, 150 tokens/s; efficiency 100 ÷ 200 = 50%, 125 ÷ 200 = 62.5%.
    assert result.measurement("decode_ceiling_tokens_per_s").samples == pytest.approx([200.0, 250.0, 150.0])
    assert result.measurement("decode_ceiling_tokens_per_s").settings == {"bytes_per_token": 100_000_000, "threads": 2}
    assert result.measurement("decode_efficiency").samples == pytest.approx([50.0, 62.5])
    rows = {r[0]: r for r in result.table("decode_vs_ceiling").rows}
    assert rows["ceiling, CPU of this host: bandwidth ÷ bytes per token"][2:5] == pytest.approx([200.0, 150.0, 250.0])
    assert rows["decode ÷ ceiling, CPU of this host"][2:5] == pytest.approx([56.25, 50.0, 62.5])
    assert "of the 200.0 tokens/s that 20.0 GB/s allows for 0.1 GB per token (samples: 50–62.5%)" in \
        result.table("decode_vs_ceiling_main").notes[0]
    assert "decode_efficiency_given_bandwidth" not in [m.name for m in result.measurements]

    # What the run shows, without a numpy pass (recorded before it): the top token, the speeds and the ceiling above,
    # with the plot of each timed request's speed against the 200 tokens/s ceiling.
    assert result.shows.plot == "prefill_and_decode"
    assert result.shows.text == (
        "After 'The capital of France is' the model gives ' Paris' 50%. Prefill read the 52-token prompt at 2,250.0 "
        "tokens/s and decode after the short prompt made 112.5 tokens/s (medians of 2 and 2 requests): prefill was 20.0× "
        "faster per token. Decode reached 56.2% of the 200.0 tokens/s that this host's 20 GB/s of memory reads allow for "
        "0.1 GB per token.")
    plot = next(p for p in result.plots if p.name == "prefill_and_decode")
    assert [s.y for s in plot.series] == [[2000.0, 2500.0], [100.0, 125.0], [50.0, 40.0], [200.0, 200.0]]


def test_main_with_a_given_bandwidth_on_a_remote_server(lesson):
    result, _ = _run_hand(lesson, facts=REMOTE, given=50.0)
    names = [m.name for m in result.measurements]
    assert "decode_efficiency" not in names and "decode_ceiling_tokens_per_s" not in names
    # 50 GB/s ÷ 1e8 bytes = 500 tokens/s; decode 100 and 125 → 20% and 25%.
    assert result.measurement("decode_ceiling_tokens_per_s_given_bandwidth").samples == pytest.approx([500.0])
    assert result.measurement("decode_efficiency_given_bandwidth").samples == pytest.approx([20.0, 25.0])
    rows = {r[0]: r for r in result.table("decode_vs_ceiling").rows}
    assert rows["ceiling at 50 GB/s (--bandwidth-gbs)"][2:5] == pytest.approx([500.0, 500.0, 500.0])
    assert rows["decode ÷ ceiling at 50 GB/s"][2:5] == pytest.approx([22.5, 20.0, 25.0])
    notes = result.table("decode_vs_ceiling_main").notes
    assert "does not bound this server's decode: the server runs on gpu-box" in notes[0]
    assert "computed against --bandwidth-gbs only." in notes[0]
    assert notes[1].startswith("At the given 50 GB/s (--bandwidth-gbs) the ceiling is 500.0 tokens/s, and decode reached 22.5%")


def test_main_without_the_model_file(lesson):
    server = QueuedServer({
        "/completion": [HAND_TOP, HAND_SERVER] * 4 + [_timed(52, 26.0, 620.0), _timed(52, 20.8, 775.0),
                                                      _timed(5, 5.0, 310.0), _timed(5, 5.0, 248.0)],
        "/props": [{"default_generation_settings": {"n_ctx": 100}}],
        "/tokenize": [{"tokens": list(range(60))}],
    })
    ctx = hand_context(LESSON, server, host_values={"model_info": None, "numpy_plan": {"served": None, "f32": None}})
    result = lesson.main(ctx)
    assert [t.name for t in result.tables][-1] == "prefill_vs_decode"
    assert result.notes[0].startswith("The model file is not readable here") and "not computed in numpy" in result.notes[0]
    assert result.fact("numpy_pass")["recomputed"] is False
    assert "bandwidth ceiling and the cost of one pass are not computed" in result.notes[1]
    assert result.table("top8_cat_sat").notes[0] == "The top 3 cover 87.5% of the probability."
    # No ceiling without the file: the opening says the speeds only, and claims no share of a ceiling.
    assert result.shows.text.endswith("prefill was 20.0× faster per token.") and result.shows.plot == "prefill_and_decode"


def test_a_run_recorded_before_the_numpy_pass_says_so(lesson):
    """No numpy_plan in the recording: nothing asked for it, nothing taken from it, one note."""
    result, server = _run_hand(lesson)
    assert result.notes[0] == ("This run was recorded before lesson 4 computed the forward pass in numpy, so it is not "
                               "recomputed here.")
    assert not any(t.name.startswith("numpy") for t in result.tables) and "numpy_pass" not in result.facts
    assert not any(path == "/tokenize" and body.get("add_special") for _, path, body in server.requests)


# --- the numpy pass, recomputed from the file on replay --------------------------------------------------

def test_numpy_gives_the_servers_top_token_on_every_prompt(result):
    fact = result.fact("numpy_pass")
    assert fact["recomputed"] is True and fact["served"]["file"] == "smollm2-135m-q4_1.gguf"
    for name in TOP8_TABLES:
        one = fact["served"]["prompts"][name]
        assert one["numpy_top_id"] == one["server_top_id"] == result.fact("top_tokens")[name]["tokens"][0]["id"]
        assert fact["f32"]["prompts"][name]["top_agrees"] and fact["f32"]["prompts"][name]["set_agrees"]


def test_the_f32_width_agrees_far_closer_than_the_rounded_one(result):
    # On F32 weights the server keeps float32 activations: what is left is float32 summation order and the
    # f16 KV cache, well under 2e-3 in any listed probability; on Q4_1 it rounds activations to 8 bits.
    fact = result.fact("numpy_pass")
    served = max(v["largest_abs_dp"] for v in fact["served"]["prompts"].values())
    f32 = max(v["largest_abs_dp"] for v in fact["f32"]["prompts"].values())
    assert f32 < 2e-3 < served
    assert f"{served:.2g} on smollm2-135m-q4_1.gguf and {f32:.2g} on smollm2-135m-f32.gguf" in \
        " ".join(result.table("numpy_vs_server_f32_main").notes)
    # numpy's own probabilities are the same on both files: the f32 file holds the dequantized Q4_1 values.
    assert "(largest difference 0)" in " ".join(result.table("numpy_vs_server_f32_main").notes)


def test_the_server_columns_are_the_recorded_answers(result, lesson):
    top8 = [ex for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("post_sampling_probs") is False]
    f32 = [ex for ex in _exchanges("f32") if ex["path"] == "/completion"]
    assert [ex["request"] for ex in f32] == [{"prompt": p, **TOP8} for _, p in PROMPTS]
    for table, answers in (("numpy_vs_server", top8), ("numpy_vs_server_f32", f32)):
        for row, ex in zip(result.table(table).rows, answers, strict=True):
            best = max(ex["response"]["completion_probabilities"][0]["top_logprobs"], key=lambda c: c["logprob"])
            assert row[2] == repr(best["token"]) and row[3] == pytest.approx(100 * math.exp(best["logprob"]), rel=1e-12)
            assert row[6] == (row[2] == row[4])


def test_token_ids_come_from_the_servers_tokenizer(result, lesson):
    asked = [ex for ex in _exchanges() if ex["path"] == "/tokenize" and ex["request"].get("add_special") is True]
    assert [ex["request"]["content"] for ex in asked] == [p for _, p in PROMPTS]
    top8 = [ex for ex in _exchanges() if ex["path"] == "/completion" and ex["request"].get("post_sampling_probs") is False]
    for row, ex, done in zip(result.table("numpy_vs_server").rows, asked, top8, strict=True):
        # One row per token id, and the server evaluated exactly those tokens for its answer.
        assert row[1] == len(ex["response"]["tokens"]) == done["response"]["timings"]["prompt_n"]


def test_numpy_names_its_tokens_as_the_server_does(result):
    for name in TOP8_TABLES:
        server = {t["id"]: t for t in result.fact("top_tokens")[name]["tokens"]}
        rows = result.table(f"numpy_{name}").rows
        assert [r[0] for r in rows] == list(range(1, 9))
        assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
        shared = [r for r in rows if r[3] is not None]
        assert shared
        by_token = {t["token"]: t for t in server.values()}
        for r in shared:  # the token text read from the GGUF's vocabulary is the server's text for the same id
            assert r[1] in by_token and r[3] == pytest.approx(100 * by_token[r[1]]["probability"], rel=1e-12)
            assert r[4] == pytest.approx(r[2] - r[3], abs=1e-9)


def test_keeping_only_the_last_position(result):
    info = result.host_values["model_info"]["hyperparameters"]
    v, d = info["n_vocab"], info["n_embd"]
    for row in result.table("last_position_only").rows:
        _, n, diff, same, every, last, saved = row
        assert (every, last, saved) == (n * 2 * v * d, 2 * v * d, (n - 1) * 2 * v * d)
        assert diff < 1e-3 and same is True
    assert f"2 × {v:,} × {d:,} = {2 * v * d:,} FLOPs per position" in result.table("last_position_only").notes[0]


def test_the_answer_through_the_layers_ends_in_the_pass(result):
    info = result.host_values["model_info"]["hyperparameters"]
    table = result.table("answer_through_the_layers")
    assert [r[0] for r in table.rows] == list(range(1, info["n_layer"] + 1))
    final = table.rows[-1]
    tops = [r[5] for r in result.table("numpy_vs_server").rows]
    assert final[1::2] == [1, 1, 1, 1]
    assert final[2::2] == pytest.approx(tops, rel=1e-4)
    plot = next(p for p in result.plots if p.name == "answer_through_the_layers")
    assert [s.y for s in plot.series] == [[r[2 + 2 * k] for r in table.rows] for k in range(4)]
    # " Paris" is not the answer until the last blocks: far down the ranking after block 1.
    assert table.rows[0][1] > 100


def test_without_the_recorded_file_the_numpy_pass_is_not_recomputed(tmp_path, monkeypatch):
    """A copy of the recording whose files are nowhere here: the lesson says so, and takes nothing from the recording."""
    source = recorded(LESSON)
    run = tmp_path / "run"
    shutil.copytree(source, run)
    path = run / f"{LESSON}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for entry in data["host_values"]["numpy_plan"].values():
        entry["path"] = str(tmp_path / "gone" / entry["file"])
    path.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setenv("BYTESUP_MODELS", str(tmp_path / "no-models"))
    out = tmp_path / "replayed"
    assert run_lessons([LESSON], RunOptions(replay=run, out=out, command=["test"])) == 0
    replayed = load_result(json.loads((out / f"{LESSON}.json").read_text(encoding="utf-8")), LESSON)
    assert not any(t.name.startswith("numpy") or t.name in ("last_position_only", "answer_through_the_layers")
                   for t in replayed.tables)
    fact = replayed.fact("numpy_pass")
    assert fact["recomputed"] is False and fact["served"] is None
    assert "The numpy pass over smollm2-135m-q4_1.gguf is not recomputed: no file with its recorded sha256" in replayed.notes[0]


# --- the numpy pass's arithmetic by hand -----------------------------------------------------------------

def test_agreement_by_hand(lesson):
    from bytesup.models.forward import Pass

    # numpy: ids 0..4 hold 0.4, 0.3, 0.2, 0.06, 0.04; the server lists id 1 first (0.5), then 0 (0.3), then 4 (0.1).
    probs = np.array([0.4, 0.3, 0.2, 0.06, 0.04])
    done = Pass(tokens=[1, 2], hidden=np.zeros((2, 1)), last_after_block=np.zeros((1, 1)), logits=np.log(probs), probs=probs)
    server = [ShownToken(rank, i, f"'t{i}'", p, math.log(p), None) for rank, i, p in ((1, 1, 0.5), (2, 0, 0.3), (3, 4, 0.1))]
    a = lesson.agreement("t", "p", server, done, lambda i: f"'t{i}'", k=3)
    assert [t.id for t in a.numpy] == [0, 1, 2] and [t.server_probability for t in a.numpy] == [0.3, 0.5, None]
    # numpy − server where both list: id 0 0.4 − 0.3 = 0.1, id 1 0.3 − 0.5 = −0.2.
    assert [t.difference for t in a.numpy] == [pytest.approx(0.1), pytest.approx(-0.2), None]
    assert a.top_agrees is False and a.set_agrees is False and a.shared == 2 and a.n_tokens == 2
    # |Δp|: id 1 0.2, id 0 0.1, id 4 0.06: the largest is 0.2 at id 1, where numpy says 0.3.
    assert a.largest_abs_dp == pytest.approx(0.2) and a.at_token == "'t1'" and a.at_numpy == pytest.approx(0.3)
    # Shared ids 1 and 0: the server's 0.5, 0.3 renormalized to 0.625, 0.375; numpy's 0.3, 0.4 to 3/7, 4/7.
    kl = 0.625 * math.log(0.625 / (3 / 7)) + 0.375 * math.log(0.375 / (4 / 7))
    assert a.kl_shared == pytest.approx(kl, rel=1e-5)


def test_main_runs_the_numpy_pass_on_a_preset(lesson, tmp_path):
    """Hand-made answers on the tiny preset: the lesson's tables are forward.forward's numbers beside the server's."""
    from bytesup.host import environment
    from bytesup.models import forward
    from bytesup.models.catalog import ensure_model

    model = ensure_model("tiny-q8_0")
    plan = {"served": {"file": model.name, "path": str(model), "sha256": environment.file_digest(model)["sha256"]}, "f32": None}
    # The published four, then one prompt given with --prompt.
    ids = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14], [15, 16]]
    server = QueuedServer({
        "/completion": [HAND_TOP, HAND_SERVER] * 5 + [_timed(52, 26.0, 620.0), _timed(52, 20.8, 775.0),
                                                      _timed(5, 5.0, 310.0), _timed(5, 5.0, 248.0)],
        "/props": [{"default_generation_settings": {"n_ctx": 100}}],
        "/tokenize": [{"tokens": t} for t in ids] + [{"tokens": list(range(60))}],
    })
    ctx = hand_context(LESSON, server, bandwidth=HAND_BW, model_path=model,
                       host_values={"model_info": HAND_INFO, "server_facts": LOCAL, "option_bandwidth_gbs": None,
                                    "numpy_plan": plan, "option_prompts": ["The capital of Italy is"]})
    result = lesson.main(ctx)
    assert server.left() == {}
    # The given prompt comes after the published four, in its own table, its requests pinned like theirs.
    asked = [body for _, path, body in server.requests if path in ("/completion", "/tokenize")]
    assert [b.get("prompt", b.get("content")) for b in asked][8:10] == ["The capital of Italy is"] * 2
    assert asked[14]["content"] == "The capital of Italy is" and asked[14]["add_special"] is True
    assert "'The capital of Italy is'" in result.table("top8_prompt_1").title
    assert list(result.fact("top_tokens"))[-1] == "top8_prompt_1"
    assert [r[0] for r in result.table("numpy_vs_server").rows][-1] == "'The capital of Italy is'"
    assert len(result.table("answer_through_the_layers").columns) == 1 + 2 * 5
    expected = forward.forward(forward.Model(model), ids)
    for row, done in zip(result.table("numpy_vs_server").rows, expected, strict=True):
        top = int(np.argmax(done.probs))
        assert row[1] == len(done.tokens) and row[5] == pytest.approx(100 * float(done.probs[top]), rel=1e-5)
        # The server's eight are HAND_TOP's: ' Paris' 1/2, ' the' 1/4, ' a' 1/8 (ids 5, 7, 9).
        gaps = {i: abs(float(done.probs[i]) - p) for i, p in ((5, 0.5), (7, 0.25), (9, 0.125))}
        assert row[8] == pytest.approx(100 * max(gaps.values()), rel=1e-5)
        assert row[2] == "' Paris'" and row[6] == (top == 5)
    assert "numpy_vs_server_f32" not in [t.name for t in result.tables]  # a preset has no f32 width to ask
    assert result.fact("numpy_pass")["recomputed"] is True
    # numpy's eight on the tiny preset share no id with the hand-made server's three: no plot of the two, none named.
    assert result.shows.plot is None and "numpy_vs_server" not in [p.name for p in result.plots]


def test_bytesup_check_passes_the_numpy_claims_on_the_recording():
    from bytesup.check import checker
    from bytesup.check.compare import load_run

    report = checker.check_run(load_run(recorded(LESSON)), [])
    found = {(r.id, r.status) for r in report.results if r.id.startswith("numpy_")}
    assert found == {("numpy_top_token_is_the_servers", checker.PASS), ("numpy_f32_within_rounding", checker.PASS)}
    assert len([r for r in report.results if r.id == "numpy_top_token_is_the_servers"]) == 2  # the file and its f32 width


def test_a_given_prompt_is_checked_before_any_request(lesson):
    from bytesup.errors import BytesupError

    assert lesson.Options.parse({"prompts": ["a b", "c"]}).prompts == ["a b", "c"]
    with pytest.raises(BytesupError, match=r"--prompt \['x', ' '\] is not valid \(value error, a prompt is empty\)"):
        lesson.Options.parse({"prompts": ["x", " "]})


def test_the_command_line_takes_repeated_prompts(monkeypatch):
    from typer.testing import CliRunner

    from bytesup.cli import app

    seen = {}
    monkeypatch.setattr(app, "_run", lambda ids, options, **kw: seen.update(ids=ids, options=options))
    done = CliRunner().invoke(app.app, ["run", "04_next_token", "--prompt", "The capital of Italy is", "--prompt", "1, 2, 3,"])
    assert done.exit_code == 0, done.output
    assert seen["options"].lesson_options == {"prompts": ["The capital of Italy is", "1, 2, 3,"]}
    empty = CliRunner().invoke(app.app, ["run", "04_next_token", "--prompt", " "])
    assert empty.exit_code == 2 and "--prompt" in empty.output and "a prompt is empty" in empty.output


@pytest.mark.parametrize("given", [None, ["The capital of Italy is"]])
def test_the_prompts_of_a_live_run(lesson, given):
    """Live (no recording), with and without --prompt: the published four first, then the given ones."""
    from bytesup.lesson import LessonContext, Reporter

    ctx = LessonContext(LESSON, "t", server=QueuedServer({}).server, model_path=None, sink=[], replay=None,
                        run=RunOptions(command=["t"], lesson_options={"prompts": given}), progress=Reporter(None, LESSON),
                        options_type=lesson.Options)
    assert lesson.fresh_plan(ctx).prompts == PROMPTS + [("top8_prompt_1", p) for p in given or []]
    assert ctx.host_values["option_prompts"] == given


# llama-bench's samples at its three turns: prefill median 2,050 tokens/s, decode 50 tokens/s every time.
HAND_BENCH = {
    "llama_bench_before": {"available": True, "threads": 2, "prefill_tokens_per_s": [2000.0, 2100.0], "decode_tokens_per_s": [50.0, 50.0]},
    "llama_bench_between": {"available": True, "threads": 2, "prefill_tokens_per_s": [2200.0, 2000.0], "decode_tokens_per_s": [50.0, 50.0]},
    "llama_bench_after": {"available": True, "threads": 2, "prefill_tokens_per_s": [2100.0, 2000.0], "decode_tokens_per_s": [50.0, 50.0]},
}


def test_the_third_clock_by_hand(lesson):
    from bytesup.store.views import lesson04

    result, _ = _run_hand(lesson, bench=HAND_BENCH)
    rows = {r[0]: r for r in result.table("third_clock").rows}
    prefill, decode = rows["prefill, 52-token prompt"], rows["decode, 32 tokens"]
    # Prefill: the server's 2,000 and 2,500 (median 2,250) over llama-bench's median 2,050 = 1.0976. Spreads
    # x_server = 500 ÷ 2,250 = 0.2222 (2 samples) and x_bench = 200 ÷ 2,050 = 0.0976 (6):
    # u = √(x_server² ÷ 2 + x_bench² ÷ 6) = 0.1621, so the ratio runs from 0.9355 to 1.2597, over both edges of ±5%:
    # cannot tell yet; (x_server² + x_bench²) ÷ (0.05 − 0.0976)² = 26.04:
    # 27 samples of each.
    u = ((500 / 2250) ** 2 / 2 + (200 / 2050) ** 2 / 6) ** 0.5
    assert prefill[1:4] == [2250.0, 2000.0, 2500.0] and prefill[4:7] == [2050.0, 2000.0, 2200.0]
    assert prefill[7:10] == [pytest.approx(2250 / 2050), pytest.approx(2250 / 2050 - u), pytest.approx(2250 / 2050 + u)]
    assert prefill[10:] == ["cannot tell yet", 27]
    # Decode: 100 and 125 (median 112.5) over 50 = 2.25 ± √(0.2222² ÷ 2) = 0.157: outside ±5%; 0.2222² ÷ 1.2² < 1.
    assert decode[7:] == [pytest.approx(2.25), pytest.approx(2.25 - (25 / 112.5) / 2 ** 0.5),
                          pytest.approx(2.25 + (25 / 112.5) / 2 ** 0.5), "outside ±5%", 1]
    main, full = result.table("third_clock_main"), result.table("third_clock")
    assert "6 samples a phase" in main.notes[0]  # the hand-made turns hold two samples each
    # The main text: the phase, both medians, their ratio, the verdict and the samples needed; the rule in words there,
    # its formula with every column under Details.
    assert [c.name for c in main.columns] == lesson04.CLOCK_SHOWN and full.detail and len(full.columns) == 12
    assert main.rows[0] == ["prefill, 52-token prompt", 2250.0, 2050.0, pytest.approx(2250 / 2050), "cannot tell yet", 27]
    assert "square root" in main.notes[1] and "≥" not in main.notes[1]
    assert "samples needed of each clock ≥ (x_server² + x_bench²) ÷ (5% − |ratio − 1|)²" in full.notes[0]


def test_without_the_native_build_the_third_clock_says_how_to_get_it(lesson):
    missing = {k: {"available": False, "why": "no native build is cached"} for k in HAND_BENCH}
    result, _ = _run_hand(lesson, bench=missing)
    assert "third_clock" not in [t.name for t in result.tables]
    assert any("no native build is cached" in n and "scripts/build_llama_server.sh" in n for n in result.notes)


def test_a_run_recorded_before_the_third_clock_shows_nothing_of_it(lesson):
    result, _ = _run_hand(lesson)
    assert "third_clock" not in [t.name for t in result.tables]
    assert not any("llama-bench" in n for n in result.notes)


def test_a_recorded_plan_is_read_as_it_is(lesson):
    """A run recorded with a plan replays from it alone: its prompts, its repeat and its parts, no older host value."""
    plan = fresh(None, 2, NumpyFiles(served=None, f32=None)).model_dump(mode="json")
    result, server = _run_hand(lesson, bench={"plan": plan, **HAND_BENCH})
    assert result.notes[0].startswith("The model file is not readable here") and "not computed in numpy" in result.notes[0]
    assert result.fact("numpy_pass")["recomputed"] is False and "third_clock" in [t.name for t in result.tables]
    assert result.settings["repeat"] == 2 and result.settings["long_prompt_tokens"] == 52
    assert [t.name for t in result.tables if t.name.startswith("top8_")] == [name for name, _ in PROMPTS]
    assert not any(path == "/tokenize" and body.get("add_special") for _, path, body in server.requests)


def test_a_live_run_records_its_plan_once_and_replays_from_it(lesson):
    """Live, without the model file: the plan is one host value (this version, the published prompts, at least two
    runs of each timed request, no file for numpy); replayed from that recording, the lesson gives the same tables."""
    from bytesup.lesson import LessonContext, Reporter

    def answers():
        return QueuedServer({
            "/completion": [HAND_TOP, HAND_SERVER] * 4 + [_timed(52, 26.0, 620.0), _timed(52, 20.8, 775.0),
                                                          _timed(5, 5.0, 310.0), _timed(5, 5.0, 248.0)],
            "/props": [{"default_generation_settings": {"n_ctx": 100}}],
            "/tokenize": [{"tokens": list(range(60))}]})

    server = answers()
    ctx = LessonContext(LESSON, "t", server=server.server, model_path=None, sink=[], replay=None,
                        run=RunOptions(command=["t"], repeat=1), progress=Reporter(None, LESSON), options_type=lesson.Options)
    live = lesson.main(ctx)
    assert server.left() == {}
    assert read(live.host_values["plan"]) == Plan(
        prompts=PROMPTS, repeat=2, llama_bench=True, numpy=NumpyFiles(served=None, f32=None),
        long=StoppingRule(minimum=2, maximum=2, tight=0.05, budget_s=30.0), bench_turns=("before", "after"),
        bench_warmup_tokens=32)
    # --repeat 1, at least two runs of each timed request: the run's rule, recorded beside --repeat.
    assert (live.host_values["repeat"], live.host_values["samples"]) == (1, 2)
    assert "numpy_plan" not in live.host_values and live.settings["repeat"] == 2
    # The long prompt's rule could take no more than two: its maximum stopped it, the prefills 2,000 and 2,500
    # tokens/s known to 1.2533 × (500 ÷ 1.128) ÷ √2 ÷ 2,250 = 17.5%.
    assert live.settings["long_prompt_stopped"] == {"samples": 2, "stopped_by": "maximum", "median_uncertainty": 0.17459,
                                                    "spent_s": 1.442}
    again = lesson.main(hand_context(LESSON, answers(), host_values=live.host_values))
    assert [(t.name, t.rows, t.notes) for t in again.tables] == [(t.name, t.rows, t.notes) for t in live.tables]
    assert again.facts == live.facts and again.notes == live.notes


def _live(lesson, long: list[dict], repeat: int = 3):
    """A live run without the model file, at --repeat `repeat`: the long prompt answered by `long` in turn (as many as
    the lesson asks), the short prompt by three answers of 100 tokens/s."""
    from bytesup.lesson import LessonContext, Reporter

    server = QueuedServer({
        "/completion": [HAND_TOP, HAND_SERVER] * 4 + long + [_timed(5, 5.0, 310.0)] * repeat,
        "/props": [{"default_generation_settings": {"n_ctx": 100}}],
        "/tokenize": [{"tokens": list(range(60))}]})
    ctx = LessonContext(LESSON, "t", server=server.server, model_path=None, sink=[], replay=None,
                        run=RunOptions(command=["t"], repeat=repeat), progress=Reporter(None, LESSON),
                        options_type=lesson.Options)
    return lesson.main(ctx), server


def test_the_long_prompt_stops_at_two_requests_when_their_medians_are_tight(lesson):
    # Prefill 2,000 and 2,020 tokens/s, decode 50 and 50.5 after them: the larger uncertainty, the prefill's,
    # 1.2533 × (20 ÷ 1.128) ÷ √2 ÷ 2,010 = 0.78%, within ±5%. The third answer is never asked for.
    tight = [_timed(52, 26.0, 620.0), _timed(52, 52 / 2.02, 620 / 1.01), _timed(52, 40.0, 900.0)]
    result, server = _live(lesson, tight)
    assert server.left() == {"/completion": 1}
    stop = result.settings["long_prompt_stopped"]
    assert (stop["samples"], stop["stopped_by"], stop["median_uncertainty"]) == (2, "tight", 0.00782)
    assert result.measurement("prefill_tokens_per_s_long_prompt").samples == pytest.approx([2000.0, 2020.0])
    assert len(result.measurement("decode_tokens_per_s_short_prompt").samples) == 3  # the short prompt: --repeat
    note = next(n for n in result.table("prefill_vs_decode_main").notes if n.startswith("The long prompt took"))
    assert note == ("The long prompt took 2 samples: the stopping rule stopped it once its medians were known within ±5% "
                    "(at ±0.78%), at its minimum. Its median prefill and the median decode after it both count.")


def test_scattered_long_prompt_samples_go_on_to_the_maximum(lesson):
    # Prefill 2,000 then 2,500 (±17%): a third request, and --repeat 3 is the most.
    scattered = [_timed(52, 26.0, 620.0), _timed(52, 20.8, 775.0), _timed(52, 23.0, 700.0)]
    result, server = _live(lesson, scattered)
    assert server.left() == {}
    assert result.settings["long_prompt_stopped"]["stopped_by"] == "maximum"
    assert len(result.measurement("prefill_tokens_per_s_long_prompt").samples) == 3
    note = next(n for n in result.table("prefill_vs_decode_main").notes if n.startswith("The long prompt took"))
    assert note.startswith("The long prompt took 3 samples, the stopping rule's maximum (the run's --repeat)")


# --- what this run shows ------------------------------------------------------------------------------------

def test_what_the_run_shows_reads_the_recorded_pass(result):
    """The fixture's opening: the first table's top token, numpy's answer and its largest gaps on both widths, each
    number the records' own; the plot it opens with is numpy against the server; every main table is at most 8 wide."""
    top = result.fact("top_tokens")["top8_capital_of_france"]["tokens"][0]
    numpy = result.fact("numpy_pass")
    paris = numpy["served"]["prompts"]["top8_capital_of_france"]
    gap = max(a["largest_abs_dp"] for a in numpy["served"]["prompts"].values())
    gap32 = max(a["largest_abs_dp"] for a in numpy["f32"]["prompts"].values())
    numpy_p = next(r[5] for r in result.table("numpy_vs_server").rows if r[0] == "'The capital of France is'")
    assert paris["numpy_top_id"] == paris["server_top_id"] == top["id"] and gap32 < gap
    assert result.shows.plot == "numpy_vs_server"
    assert result.shows.text == (
        f"After 'The capital of France is' the model gives ' Paris' {fmt(100 * top['probability'])}%. The same forward "
        f"pass in numpy from the file's bytes (Q4_1 weights) gives ' Paris' {fmt(numpy_p)}% and agrees with the server's "
        f"top token on all 4 prompts; over the server's eight most probable tokens the two differ by at most "
        f"{100 * gap:.2g} points. Against a server on the f32 width, where the engine rounds no activation, the largest "
        f"difference falls to {100 * gap32:.2g} points, with the same top token on every prompt.")
    assert "77.19%" in result.shows.text and "4.9 points" in result.shows.text and "0.065 points" in result.shows.text


def test_the_main_tables_are_their_full_tables_named_columns(result):
    from bytesup.store.views import lesson04

    assert not [(t.name, len(t.columns)) for t in result.tables if not t.detail and len(t.columns) > 8]
    for name in ("numpy_vs_server", "numpy_vs_server_f32"):
        main, full = result.table(f"{name}_main"), result.table(name)
        assert full.detail and not main.detail and len(full.columns) == 12
        at = [[c.name for c in full.columns].index(k) for k in lesson04.AGREEMENT_SHOWN]
        assert [c.name for c in main.columns] == lesson04.AGREEMENT_SHOWN
        assert main.rows == [[row[i] for i in at] for row in full.rows]
        assert full.notes == [lesson04.KL_FORMULA] and not any("Σ" in n for n in main.notes)
    # Prefill against decode and decode against the ceiling: their lowest and highest samples under Details.
    for name, shown in (("prefill_vs_decode", lesson04.PHASE_SHOWN), ("decode_vs_ceiling", lesson04.CEILING_SHOWN)):
        main, full = result.table(f"{name}_main"), result.table(name)
        assert full.detail and [c.name for c in main.columns] == shown and "min" not in shown
        at = [[c.name for c in full.columns].index(k) for k in shown]
        assert main.rows == [[row[i] for i in at] for row in full.rows] and len(full.notes) == 1
    # The layers: one row per prompt in the main text, read from the full table's block rows under Details.
    main, full = result.table("answer_through_the_layers_main"), result.table("answer_through_the_layers")
    assert full.detail and len(main.columns) == 6
    for k, row in enumerate(main.rows):
        ranks = [r[1 + 2 * k] for r in full.rows]
        first = next(b for b in range(len(ranks)) if all(r == 1 for r in ranks[b:])) + 1
        assert row[2:] == [ranks[0], full.rows[0][2 + 2 * k], first, full.rows[-1][2 + 2 * k]]


def test_the_plots_points_are_the_tables(result):
    plot = next(p for p in result.plots if p.name == "numpy_vs_server")
    served, f32, line = plot.series
    pairs = [(r[3], r[2]) for name in TOP8_TABLES for r in result.table(f"numpy_{name}").rows if r[3] is not None]
    assert served.x == pytest.approx([x for x, _ in pairs], rel=1e-12) and served.y == pytest.approx([y for _, y in pairs], rel=1e-12)
    assert len(f32.x) > 0 and line.x == line.y and plot.log_x and plot.log_y
    speeds = next(p for p in result.plots if p.name == "prefill_and_decode")
    assert [s.y for s in speeds.series[:3]] == [result.measurement(m).samples for m in MEASUREMENTS[:3]]
    assert speeds.series[3].y == [result.measurement("decode_ceiling_tokens_per_s").median] * 2


def _agreement(name: str, server: tuple[str, float], numpy: tuple[str, float], gap: float) -> PromptAgreement:
    return PromptAgreement(numpy_top_id=1 if numpy[0] == server[0] else 2, server_top_id=1,
                           top_agrees=numpy[0] == server[0], set_agrees=True, largest_abs_dp=gap, kl_shared=0.0,
                           shared=8, probabilities_of_server_ids={}, largest_abs_logit=1.0, name=name, prompt=name,
                           server_token=server[0], server_p=server[1], numpy_token=numpy[0], numpy_p=numpy[1],
                           numpy=[NumpyToken(1, 1, numpy[0], numpy[1], server[1] if numpy[0] == server[0] else None,
                                             None)])


HAND_TABLES = [ShownTable(prompt="The capital of France is", name="a",
                          tokens=[ShownToken(1, 1, "' Paris'", 0.5, math.log(0.5), 0.5)])]
# Prefill 2,000 and 2,500 (median 2,250) over decode 100 and 125 (median 112.5): 20×.
HAND_SPEEDS = nexttoken.Speeds(52, 5, [2000.0, 2500.0], [100.0, 125.0], [50.0, 40.0])


def _shows(done=None, speeds=HAND_SPEEDS, ceil=None, eff=None):
    from bytesup.store.views import lesson04

    return lesson04.shows(HAND_TABLES, done, speeds, ceil, eff)


def test_what_the_run_shows_follows_numpy_by_hand():
    agree = FilePass(file="m.gguf", weight_type="Q8_0", prompts={
        "a": _agreement("a", ("' Paris'", 0.5), ("' Paris'", 0.52), 0.02),
        "b": _agreement("b", ("' cat'", 0.1), ("' cat'", 0.09), 0.03)})
    text, plot = _shows(NumpyOutcome(agree))
    assert plot == "numpy_vs_server"
    assert text == ("After 'The capital of France is' the model gives ' Paris' 50%. The same forward pass in numpy from "
                    "the file's bytes (Q8_0 weights) gives ' Paris' 52% and agrees with the server's top token on all 2 "
                    "prompts; over the server's eight most probable tokens the two differ by at most 3 points.")
    # numpy puts another token first on the first prompt: the sentence says so, and on how many prompts it agrees.
    other = FilePass(file="m.gguf", weight_type="Q8_0", prompts={
        "a": _agreement("a", ("' Paris'", 0.5), ("' the'", 0.4), 0.2), "b": agree.prompts["b"]})
    text, _ = _shows(NumpyOutcome(other))
    assert "gives ' the' 40% first, not ' Paris' and agrees with the server's top token on only 1 of 2 prompts" in text
    assert "at most 20 points" in text and "all 2" not in text
    # The f32 width closer: "falls to"; not closer: "is", and its own count of agreeing prompts.
    f32 = FilePass(file="m-f32.gguf", weight_type="F32", prompts={"a": _agreement("a", ("' Paris'", 0.5), ("' Paris'", 0.5), 0.001)})
    text, _ = _shows(NumpyOutcome(agree, f32=f32, same=0.0))
    assert text.endswith("the largest difference falls to 0.1 points, with the same top token on every prompt.")
    wide = FilePass(file="m-f32.gguf", weight_type="F32", prompts={"a": _agreement("a", ("' Paris'", 0.5), ("' the'", 0.4), 0.2)})
    text, _ = _shows(NumpyOutcome(agree, f32=wide, same=0.0))
    assert text.endswith("the largest difference is 20 points, with the same top token on 0 of 1 prompts.")
    assert "falls" not in text


def test_what_the_run_shows_without_numpy_is_the_speeds_and_the_ceiling_by_hand():
    from bytesup.course.ceiling import Ceiling, Efficiency

    # 20 GB/s ÷ 1e8 bytes = 200 tokens/s; decode 100 and 125 are 50% and 62.5% of it, median 56.25%.
    ceil = Ceiling(1e8, (20.0,), (200.0,), host_applies=True)
    eff = Efficiency((100.0, 125.0), (50.0, 62.5), None)
    for done in (None, NumpyOutcome(None, "The model file is not readable here.")):
        text, plot = _shows(done, ceil=ceil, eff=eff)
        assert plot == "prefill_and_decode" and "numpy" not in text
        assert text == ("After 'The capital of France is' the model gives ' Paris' 50%. Prefill read the 52-token prompt "
                        "at 2,250.0 tokens/s and decode after the short prompt made 112.5 tokens/s (medians of 2 and 2 "
                        "requests): prefill was 20.0× faster per token. Decode reached 56.2% of the 200.0 tokens/s that "
                        "this host's 20 GB/s of memory reads allow for 0.1 GB per token.")
    # Decode above the ceiling (2 GB/s: 20 tokens/s; decode 500% and 625%): the sentence says above, not "reached".
    text, _ = _shows(ceil=Ceiling(1e8, (2.0,), (20.0,), host_applies=True), eff=Efficiency((100.0, 125.0), (500.0, 625.0), None))
    assert text.endswith("Decode ran above the 20.0 tokens/s that this host's 2 GB/s of memory reads allow for 0.1 GB per "
                         "token: 562% of it.")
    # A remote server with a given bandwidth: the given ceiling; with none, no ceiling is claimed.
    given = Ceiling(1e8, (20.0,), (200.0,), host_applies=False, given_gbs=50.0, given_ceiling=500.0)
    text, _ = _shows(ceil=given, eff=Efficiency((100.0, 125.0), None, (20.0, 25.0)))
    assert text.endswith("Decode reached 22.5% of the 500.0 tokens/s that the given 50 GB/s allows for 0.1 GB per token.")
    text, _ = _shows(ceil=Ceiling(1e8, (20.0,), (200.0,), host_applies=False), eff=Efficiency((100.0, 125.0), None, None))
    assert text.endswith("This host's memory bandwidth does not bound the server's decode, so no ceiling is set against it.")
    # No ceiling at all (the model file not readable): the speeds alone; prefill slower than decode is said so.
    slow = nexttoken.Speeds(52, 5, [50.0, 60.0], [100.0, 125.0], [50.0, 40.0])
    text, _ = _shows(speeds=slow)
    assert text.endswith("(medians of 2 and 2 requests): prefill was no faster per token (0.49×).") and "Decode" not in text
