"""Lesson 5 replayed from its recorded run: the loop's pass count, the samplers against the server's
post-sampling probabilities (from the result and straight from the recorded exchanges), seeded
sampling and the latency model's arithmetic."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from bytesup import sampling

LESSON = "05_generating_text"


def table(result, name):
    t = result.table(name)
    return [c.name + (f" ({c.unit})" if c.unit else "") for c in t.columns], t.rows


# --- the loop --------------------------------------------------------------------------

def test_one_pass_per_token(result, lesson):
    _, rows = table(result, "one_pass_per_token")
    assert [r[0] for r in rows] == list(range(1, lesson.LOOP_TOKENS + 1))
    assert all(0 < r[3] <= 1 for r in rows)


def test_metrics_count_one_decode_per_token(result, lesson):
    """Checked live: a short prompt goes through in one llama_decode call that also yields the
    first token, then one call per further token: n calls for n tokens."""
    _, rows = table(result, "metrics_delta")
    delta = {r[0]: r[3] for r in rows}
    for r in rows:
        assert r[3] == pytest.approx(r[2] - r[1])
    assert delta["llamacpp:tokens_predicted_total"] == lesson.LOOP_TOKENS
    assert delta["llamacpp:n_decode_total"] == lesson.LOOP_TOKENS
    notes = result.table("metrics_delta").notes
    assert lesson.decode_calls_note(delta["llamacpp:n_decode_total"], lesson.LOOP_TOKENS,
                                    int(delta["llamacpp:prompt_tokens_total"])) in notes


def test_metrics_delta_matches_the_recorded_exchanges(exchanges, lesson):
    metrics = [e for e in exchanges if e["path"] == "/metrics"]
    assert len(metrics) == 2
    from bytesup.records import parse_metrics
    before, after = (parse_metrics(m["response_text"]) for m in metrics)
    loop = next(e for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == lesson.LOOP_PROMPT
                and e["request"]["n_predict"] == lesson.LOOP_TOKENS and e["request"].get("n_probs") == 1)
    n = loop["response"]["timings"]["predicted_n"]
    assert n == lesson.LOOP_TOKENS
    assert after["llamacpp:n_decode_total"] - before["llamacpp:n_decode_total"] == n
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == n
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == loop["response"]["timings"]["prompt_n"]


# --- samplers vs the server ----------------------------------------------------------------

def test_every_setting_agrees_within_the_tolerance(result, lesson):
    cols, rows = table(result, "sampler_check")
    assert len(rows) == len(lesson.SAMPLER_SETTINGS)
    for r in rows:
        label, kept_ours, kept_server, listed, same, drawn_ok, max_rel, tol, verdict = (
            r[0], r[2], r[3], r[4], r[5], r[7], r[9], r[10], r[11])
        assert tol == lesson.REL_TOL
        assert verdict.startswith("agree"), r
        assert same and drawn_ok, label
        assert max_rel <= tol, label
        if kept_server is not None:          # the server listed its whole kept set
            assert kept_server == kept_ours, label
            assert listed == kept_server


def test_expected_kept_counts(result):
    _, rows = table(result, "sampler_check")
    by = {r[0]: r for r in rows}
    assert by["greedy"][2] == by["greedy"][3] == 1
    assert by["top-k 5"][2] == by["top-k 5"][3] == 5
    assert by["top-k 10"][2] == by["top-k 10"][3] == 10
    assert by["top-p 0.5"][2] < by["top-p 0.9"][2]


def test_applied_table_matches_the_check(result):
    _, applied = table(result, "samplers_applied")
    _, check = table(result, "sampler_check")
    for a, c in zip(applied, check, strict=False):
        assert a[0] == c[0]
        if a[2] is not None and c[2] is not None:
            assert a[2] == c[2]


def _reference(exchanges, lesson):
    refs = [e for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == lesson.SAMPLING_PROMPT
            and e["request"].get("post_sampling_probs") is False]
    ref = max(refs, key=lambda e: e["request"]["n_probs"])
    top = ref["response"]["completion_probabilities"][0]["top_logprobs"]
    return [t["id"] for t in top], np.array([math.exp(t["logprob"]) for t in top])


def test_samplers_against_the_recorded_exchanges(exchanges, lesson):
    """Recomputed from the raw recordings, independent of the lesson's tables."""
    ids, probs = _reference(exchanges, lesson)
    meta = next(e for e in exchanges if e["path"] == "/v1/models")["response"]["data"][0]["meta"]
    complete = len(ids) >= meta["n_vocab"]
    pos = {t: i for i, t in enumerate(ids)}
    posts = [e for e in exchanges if e["path"] == "/completion" and e["request"].get("post_sampling_probs") is True]
    assert len(posts) == len(lesson.SAMPLER_SETTINGS)
    checked = 0
    for e in posts:
        req = e["request"]
        assert req["top_k"] if "top_k" in req["samplers"] else req["top_k"] == 0
        steps = [(name, req[name]) for name in req["samplers"]]
        try:
            ours = sampling.apply_chain(probs, steps, total=None if complete else 1.0)
        except sampling.IncompleteDistribution:
            # Temperature reshapes the whole distribution: with only the listed candidates (not all
            # 49,152) it cannot be recomputed exactly here, and the lesson says so instead.
            assert not complete and any(name == "temperature" for name, _ in steps), steps
            continue
        checked += 1
        step = e["response"]["completion_probabilities"][0]
        listed = [(t["id"], t["prob"]) for t in step["top_probs"]]
        kept_ids = [ids[i] for i in sampling.kept_indices(ours)]
        if len(listed) < req["n_probs"]:
            assert {t for t, _ in listed} == set(kept_ids), req["samplers"]
        else:
            assert {t for t, _ in listed} == set(kept_ids[:len(listed)]), req["samplers"]
        for tid, q in listed:
            assert abs(ours[pos[tid]] - q) <= lesson.REL_TOL * q, (req["samplers"], tid)
        assert ours[pos[step["id"]]] > 0      # the token the server drew is one we keep
    assert checked >= len(posts) // 2, f"only {checked} of {len(posts)} settings could be recomputed"


def test_samplers_are_pinned_in_every_post_sampling_request(exchanges):
    for e in exchanges:
        req = e["request"]
        if e["path"] == "/completion" and req.get("post_sampling_probs") is True:
            assert req["seed"] is not None and req["cache_prompt"] is False
            assert req["min_p"] == 0.0
            assert req["top_p"] == 1.0 or "top_p" in req["samplers"]
            assert req["top_k"] == 0 or "top_k" in req["samplers"]


# --- seeded sampling -------------------------------------------------------------------------

def test_same_seed_same_text(result):
    _, rows = table(result, "seeded_sampling")
    assert rows[0][1] == rows[1][1] != rows[2][1]
    assert rows[0][2] == rows[1][2] and rows[0][3] == rows[1][3]
    assert rows[0][3] != rows[2][3]


# --- latency model --------------------------------------------------------------------------

def test_latency_model_arithmetic(result, lesson):
    ttft = result.measurement("time_to_first_token_ms").median
    tpot = result.measurement("decode_ms_per_token").median
    _, rows = table(result, "latency_model")
    assert [r[0] for r in rows] == sorted({lesson.FIT_N, *lesson.PREDICT_N})
    for n, _kind, predicted, measured, lo, hi, err, predicted_n in rows:
        assert predicted == pytest.approx(ttft + tpot * (n - 1))
        assert lo <= measured <= hi
        assert err == pytest.approx(100 * (predicted - measured) / measured)
        assert predicted_n == [n] * len(predicted_n)
    errors = [m for m in result.measurements if m.name == "latency_model_error_pct"]
    assert sorted(m.settings["n_predict"] for m in errors) == sorted(lesson.PREDICT_N)


def test_latency_fit_comes_from_the_recorded_timings(exchanges, lesson, result):
    fit = [e["response"]["timings"] for e in exchanges if e["path"] == "/completion"
           and e["request"]["prompt"] == lesson.LOOP_PROMPT and e["request"]["n_predict"] == lesson.FIT_N]
    assert result.measurement("time_to_first_token_ms").samples == [t["prompt_ms"] for t in fit]
    per_token = [t["predicted_ms"] / (t["predicted_n"] - 1) for t in fit]
    assert result.measurement("decode_ms_per_token").samples == pytest.approx(per_token)
    assert result.measurement("decode_ms_per_token").median == pytest.approx(statistics.median(per_token))


# --- pure helpers ---------------------------------------------------------------------------------

def test_decode_calls_note(lesson):
    one = lesson.decode_calls_note(16, 16, 5)
    assert "one pass per token" in one and "5-token prompt went through in one pass" in one and "15 passes" in one
    split = lesson.decode_calls_note(18, 16, 1200)
    assert "leave 3 for the 1200-token prompt" in split and "one pass that" not in split
    fewer = lesson.decode_calls_note(10, 16, 5)
    assert "more than one token" in fewer and "one pass per token" not in fewer


def test_speculative_tokens_per_pass(lesson):
    assert lesson.speculative_tokens_per_pass(4, 0.0) == 1
    assert lesson.speculative_tokens_per_pass(4, 1.0) == 5
    assert lesson.speculative_tokens_per_pass(2, 0.5) == pytest.approx(1.75)


def test_compare_with_server_flags_a_wrong_kept_set(lesson):
    ids = [10, 11, 12, 13]
    ours = sampling.top_k([0.4, 0.3, 0.2, 0.1], 2)
    ok = lesson.compare_with_server(ids, ours, [(10, 0.4 / 0.7), (11, 0.3 / 0.7)], 3, 10)
    assert ok.agree and ok.kept_server == 2 and ok.kept_ours == 2
    three = lesson.compare_with_server(ids, ours, [(10, 0.4 / 0.9), (11, 0.3 / 0.9), (12, 0.2 / 0.9)], 3, 10)
    assert not three.agree and not three.same_set
    off = lesson.compare_with_server(ids, ours, [(10, 0.58), (11, 0.42)], 3, 10)
    assert not off.agree and off.max_rel > lesson.REL_TOL
    drawn_elsewhere = lesson.compare_with_server(ids, ours, [(10, 0.4 / 0.7), (11, 0.3 / 0.7)], 3, 13)
    assert not drawn_elsewhere.agree


def test_timed_requests_use_the_shared_pinned_settings(exchanges, lesson):
    from bytesup.measure import PINNED
    timed = [e["request"] for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == lesson.LOOP_PROMPT
             and e["request"]["n_predict"] in {lesson.FIT_N, *lesson.PREDICT_N} and "n_probs" not in e["request"]]
    assert len(timed) == len({lesson.FIT_N, *lesson.PREDICT_N}) * 2  # fixtures are recorded with --repeat 2
    for req in timed:
        assert {k: req[k] for k in PINNED} == {**PINNED, "seed": lesson.SEED}


# --- speculative decoding, on servers the lesson started --------------------------------------------

def _by_server(exchanges) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for e in exchanges:
        if e["server"].startswith("spec-") and e["path"] == "/completion":
            found.setdefault(e["server"], []).append(e)
    return found


def _decode(timings: dict) -> float:
    return 1000.0 * (timings["predicted_n"] - 1) / timings["predicted_ms"]


def test_speculative_requests_are_greedy_and_pinned(exchanges):
    spec = [e for answers in _by_server(exchanges).values() for e in answers]
    assert spec
    for e in spec:
        req = e["request"]
        assert req["temperature"] == 0 and req["seed"] is not None and req["cache_prompt"] is False
        assert req["ignore_eos"] is True and req["return_tokens"] is True


def test_speculative_table_comes_from_the_recorded_counters(result, exchanges, lesson):
    """Drafted, accepted, acceptance, tokens per target pass, speed-up and the equality check,
    recomputed from the raw answers of each server."""
    _, rows = table(result, "speculative_measured")
    answers = _by_server(exchanges)
    prompts = {"short": lesson.SPEC_PROMPT, "repetitive": lesson.SPEC_REPETITIVE_PROMPT}
    for target, kind, draft, k, prompt, median, lo, hi, drafted, accepted, acceptance, per_pass, speedup, same in rows:
        plain = [e for e in answers[f"spec-{target}"] if e["request"]["prompt"] == prompts[prompt]]
        plain_speed = statistics.median(_decode(e["response"]["timings"]) for e in plain)
        if kind == "none":
            assert median == pytest.approx(plain_speed) and speedup == 1 and per_pass == 1
            continue
        label = f"spec-{target}-draft-{draft}-k{k}" if draft else f"spec-{target}-{kind}"
        mine = answers[label]
        timings = [e["response"]["timings"] for e in mine]
        assert drafted == sum(t.get("draft_n", 0) for t in timings)
        assert accepted == sum(t.get("draft_n_accepted", 0) for t in timings)
        assert acceptance == pytest.approx(accepted / drafted)
        generated = sum(t["predicted_n"] for t in timings)
        assert per_pass == pytest.approx(generated / (generated - accepted))
        speeds = [_decode(t) for t in timings]
        assert (median, lo, hi) == pytest.approx((statistics.median(speeds), min(speeds), max(speeds)))
        assert speedup == pytest.approx(median / plain_speed)
        identical = all(e["response"]["tokens"] == plain[0]["response"]["tokens"] for e in mine)
        assert (same == "identical") == identical


def test_speculative_output_equals_plain_output(result):
    """The point of the section: at temperature 0 speculation changes the speed, not the text."""
    _, rows = table(result, "speculative_measured")
    assert [r[13] for r in rows if r[1] != "none"] and all(r[13] == "identical" for r in rows if r[1] != "none")
    assert any(r[9] for r in rows if r[1] != "none")          # something was drafted and accepted


def test_speculative_arithmetic_beside_the_measurement(result, lesson):
    from bytesup import formulas

    _, rows = table(result, "speculative_vs_arithmetic")
    assert len(rows) == len(lesson.SPEC_TARGETS) * (len(lesson.SPEC_DRAFTS) * len(lesson.SPEC_DRAFT_LENGTHS) + 1)
    for (_label, _target, a, k, expected, measured, ratio, cost, drafted, check, ideal, predicted, speedup,
         measured_over_predicted) in rows:
        assert expected == pytest.approx(formulas.expected_tokens_per_pass(k, a))
        assert ratio == pytest.approx(measured / expected)
        assert ideal == pytest.approx(measured / (drafted * cost + 1))
        assert predicted == pytest.approx(measured / (drafted * cost + check))
        assert check >= 1 and predicted <= ideal
        assert measured_over_predicted == pytest.approx(speedup / predicted)
