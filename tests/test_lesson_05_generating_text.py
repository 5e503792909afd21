"""Lesson 5 replayed from its recorded run: the loop's pass count, the samplers against the server's
post-sampling probabilities (from the result and straight from the recorded exchanges), seeded
sampling and the latency model's arithmetic."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from bytesup.course import sampling, samplercheck
from bytesup.course.loop import decode_calls_note
from bytesup.course.samplercheck import CheckSummary
from bytesup.store.plans.lesson05 import CURRENT
from bytesup.store.rows import cells
from bytesup.store.views import lesson05

LESSON = "05_generating_text"


def table(result, name):
    t = result.table(name)
    return [c.name + (f" ({c.unit})" if c.unit else "") for c in t.columns], t.rows


# --- the loop --------------------------------------------------------------------------

def test_one_pass_per_token(result, lesson):
    _, rows = table(result, "one_pass_per_token")
    assert [r[0] for r in rows] == list(range(1, CURRENT.loop_tokens + 1))
    assert all(0 < r[3] <= 1 for r in rows)


def test_metrics_count_one_decode_per_token(result, lesson):
    """Checked live: a short prompt goes through in one llama_decode call that also yields the
    first token, then one call per further token: n calls for n tokens."""
    _, rows = table(result, "metrics_delta")
    delta = {r[0]: r[3] for r in rows}
    for r in rows:
        assert r[3] == pytest.approx(r[2] - r[1])
    assert delta["llamacpp:tokens_predicted_total"] == CURRENT.loop_tokens
    assert delta["llamacpp:n_decode_total"] == CURRENT.loop_tokens
    notes = result.table("metrics_delta").notes
    assert decode_calls_note(delta["llamacpp:n_decode_total"], CURRENT.loop_tokens,
                                    int(delta["llamacpp:prompt_tokens_total"])) in notes


def test_metrics_delta_matches_the_recorded_exchanges(exchanges, lesson):
    metrics = [e for e in exchanges if e["path"] == "/metrics"]
    assert len(metrics) == 2
    from bytesup.llama.responses import parse_metrics
    before, after = (parse_metrics(m["response_text"]) for m in metrics)
    loop = next(e for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == CURRENT.loop_prompt
                and e["request"]["n_predict"] == CURRENT.loop_tokens and e["request"].get("n_probs") == 1)
    n = loop["response"]["timings"]["predicted_n"]
    assert n == CURRENT.loop_tokens
    assert after["llamacpp:n_decode_total"] - before["llamacpp:n_decode_total"] == n
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == n
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == loop["response"]["timings"]["prompt_n"]


# --- samplers vs the server ----------------------------------------------------------------

def test_every_setting_agrees_within_the_tolerance(result, lesson):
    cols, rows = table(result, "sampler_check")
    assert len(rows) == len(lesson.sampler_settings(CURRENT))
    for r in rows:
        label, kept_ours, kept_server, listed, same, drawn_ok, max_rel, tol, verdict = (
            r[0], r[2], r[3], r[4], r[5], r[7], r[9], r[10], r[11])
        assert tol == CURRENT.rel_tol
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
    refs = [e for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == CURRENT.sampling_prompt
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
    assert len(posts) == len(lesson.sampler_settings(CURRENT))
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
            assert abs(ours[pos[tid]] - q) <= CURRENT.rel_tol * q, (req["samplers"], tid)
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
    assert [r[0] for r in rows] == sorted({CURRENT.fit_n, *CURRENT.predict_n})
    for n, _kind, predicted, measured, lo, hi, err, predicted_n in rows:
        assert predicted == pytest.approx(ttft + tpot * (n - 1))
        assert lo <= measured <= hi
        assert err == pytest.approx(100 * (predicted - measured) / measured)
        assert predicted_n == [n] * len(predicted_n)
    errors = [m for m in result.measurements if m.name == "latency_model_error_pct"]
    assert sorted(m.settings["n_predict"] for m in errors) == sorted(CURRENT.predict_n)


def test_latency_fit_comes_from_the_recorded_timings(exchanges, lesson, result):
    fit = [e["response"]["timings"] for e in exchanges if e["path"] == "/completion"
           and e["request"]["prompt"] == CURRENT.loop_prompt and e["request"]["n_predict"] == CURRENT.fit_n]
    assert result.measurement("time_to_first_token_ms").samples == [t["prompt_ms"] for t in fit]
    per_token = [t["predicted_ms"] / (t["predicted_n"] - 1) for t in fit]
    assert result.measurement("decode_ms_per_token").samples == pytest.approx(per_token)
    assert result.measurement("decode_ms_per_token").median == pytest.approx(statistics.median(per_token))


# --- the loop from outside: the client's clock -------------------------------------------------------

def _streamed(exchanges, lesson):
    return [e for e in exchanges if "stream" in e and e["request"]["n_predict"] == CURRENT.stream_tokens]


def _token_events(e):
    """(tokens so far, arrival) of each recorded event that brought tokens, read straight from the line."""
    found, so_far = [], 0
    for ev in e["stream"]:
        data = json.loads(ev["text"].removeprefix("data: "))
        if data["tokens_predicted"] > so_far:
            found.append((data["tokens_predicted"], ev["arrived_ms"]))
            so_far = data["tokens_predicted"]
    return found


def _final_timings(e):
    return json.loads(e["stream"][-1]["text"].removeprefix("data: "))["timings"]


def test_client_clock_repeats_come_from_the_recorded_events(result, exchanges, lesson):
    streamed = _streamed(exchanges, lesson)
    _, rows = table(result, "client_clock_repeats")
    assert len(streamed) == len(rows) == result.host_values["repeat"]
    for row, e in zip(rows, streamed, strict=True):
        events, t = _token_events(e), _final_timings(e)
        times = [at for _, at in events]
        assert row[1] == len(events) == t["predicted_n"] == row[2] == CURRENT.stream_tokens
        assert row[3] == times[0] and row[4] == t["prompt_ms"]
        assert row[5] == pytest.approx(times[0] - t["prompt_ms"])
        assert row[6] == pytest.approx(statistics.median(np.diff(times)))
        assert row[7] == pytest.approx(t["predicted_ms"] / (t["predicted_n"] - 1))
        assert row[8] == e["stream"][-1]["arrived_ms"]
        assert row[10] == pytest.approx(row[8] - t["prompt_ms"] - t["predicted_ms"])
        assert row[11] == all(np.diff(times) > 0)
        assert row[13] == pytest.approx(CURRENT.stream_tokens * float(np.min(np.diff(times))))


def test_client_clock_percentiles_pool_every_repeat(result, exchanges, lesson):
    gaps = np.concatenate([np.diff([at for _, at in _token_events(e)]) for e in _streamed(exchanges, lesson)])
    rows = {r[0]: r for r in table(result, "client_clock")[1]}
    for q in (50, 90, 99):
        assert rows[f"inter-token latency p{q}"][1] == pytest.approx(float(np.percentile(gaps, q)))
    assert rows["inter-token latency mean"][1] == pytest.approx(float(gaps.mean()))
    timings = [_final_timings(e) for e in _streamed(exchanges, lesson)]
    per_token = sum(t["predicted_ms"] for t in timings) / sum(t["predicted_n"] - 1 for t in timings)
    assert all(rows[f"inter-token latency {k}"][2] == pytest.approx(per_token) for k in ("p50", "p90", "p99", "mean"))
    assert result.measurement("client_itl_ms").samples == pytest.approx(gaps.tolist())
    ttft = rows["time to first token"]
    assert ttft[1] >= ttft[2]  # the first token cannot reach the client before the server has sampled it
    assert next(p for p in result.plots if p.name == "client_clock_staircase").series[0].style == "steps"


def test_client_clock_fact_states_each_repeat(result, exchanges, lesson):
    fact = result.facts["client_clock"]
    assert fact["n_predict"] == CURRENT.stream_tokens
    for rep, e in zip(fact["repeats"], _streamed(exchanges, lesson), strict=True):
        assert rep["token_events"] == rep["predicted_n"] == _final_timings(e)["predicted_n"]
        assert rep["ttft_ms"] == _token_events(e)[0][1]


# --- pure helpers ---------------------------------------------------------------------------------

def test_compare_with_server_flags_a_wrong_kept_set(lesson):
    ids = [10, 11, 12, 13]
    ours = sampling.top_k([0.4, 0.3, 0.2, 0.1], 2)
    ok = samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.7), (11, 0.3 / 0.7)], 3, 10, CURRENT.rel_tol)
    assert ok.agree and ok.kept_server == 2 and ok.kept_ours == 2
    three = samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.9), (11, 0.3 / 0.9), (12, 0.2 / 0.9)], 3, 10, CURRENT.rel_tol)
    assert not three.agree and not three.same_set
    off = samplercheck.compare_with_server(ids, ours, [(10, 0.58), (11, 0.42)], 3, 10, CURRENT.rel_tol)
    assert not off.agree and off.max_rel > CURRENT.rel_tol
    drawn_elsewhere = samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.7), (11, 0.3 / 0.7)], 3, 13, CURRENT.rel_tol)
    assert not drawn_elsewhere.agree


def test_compare_with_server_on_a_token_outside_the_reference(lesson):
    ids = [10, 11, 12, 13]
    ours = sampling.top_k([0.4, 0.3, 0.2, 0.1], 2)             # 0.4 ÷ 0.7 = 0.571429, 0.3 ÷ 0.7 = 0.428571, 0, 0
    # The server lists 10 and 99, which our reference lacks: 99 counts as 0 on our side, so
    # |0.571429 − 0.75| = 0.178571 and |0 − 0.25| = 0.25; the larger is reported.
    out = samplercheck.compare_with_server(ids, ours, [(10, 0.75), (99, 0.25)], 3, 10, CURRENT.rel_tol)
    assert out.max_abs == pytest.approx(0.25) and not out.same_set and not out.agree
    assert (out.kept_ours, out.kept_server, out.listed, out.server_listed_all) == (2, 2, 2, True)
    # Relative mode with nothing of ours among the listed: no renormalization (the sum is 0), |0 − 1| = 1;
    # a drawn token outside a partial reference is not a miss.
    rel = samplercheck.compare_with_server(ids, ours, [(99, 1.0)], 3, 99, CURRENT.rel_tol, relative=True)
    assert rel.max_abs == 1.0 and rel.sampled_in_kept and rel.kept_ours is None
    # A listed probability of 0 (ours 0 too) adds no relative difference: 0 ÷ ∞ = 0, never 0 ÷ 0.
    zero = samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.7), (11, 0.3 / 0.7), (12, 0.0)], 4, 10, CURRENT.rel_tol)
    assert zero.max_rel == pytest.approx(0.0, abs=1e-12) and not zero.same_set
    # The server's whole kept set (1 listed, 3 asked) is {10}, ours {10, 11}: not the same set, though
    # every token it lists is one we keep.
    fewer = samplercheck.compare_with_server(ids, ours, [(10, 1.0)], 3, 10, CURRENT.rel_tol)
    assert not fewer.same_set and not fewer.agree and fewer.kept_server == 1
    # A drawn token we cut (13, in the reference, probability 0) is a miss, in relative mode too; in
    # absolute mode a drawn token outside the reference is one as well.
    for relative in (False, True):
        assert not samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.7)], 3, 13, CURRENT.rel_tol, relative=relative).sampled_in_kept
    assert not samplercheck.compare_with_server(ids, ours, [(10, 0.4 / 0.7)], 3, 99, CURRENT.rel_tol).sampled_in_kept


def test_needs_more_when_a_cutting_chain_keeps_unlisted_tokens(lesson):
    top_k = {k: lesson.SamplerSetting(f"top-k {k}", ("top_k", "temperature"), {"top_k": k, "temperature": 1.0})
             for k in (1, 10)}
    temperature = lesson.SamplerSetting("temperature 0.5", ("temperature",), {"temperature": 0.5})
    listed = [0.4, 0.3]                              # 0.7 listed, 0.3 of the distribution unlisted
    assert lesson.needs_more(listed, [temperature, top_k[10]])  # top-k 10 keeps more than the 2 listed
    assert not lesson.needs_more(listed, [temperature, top_k[1]])  # top-k 1 keeps 0.4 only
    assert not lesson.needs_more(listed, [temperature])  # temperature alone is never the reason to ask for more


def test_a_chain_that_needs_the_unlisted_mass_applies_to_nothing(lesson):
    setting = lesson.SamplerSetting("top-k 10", ("top_k", "temperature"), {"top_k": 10, "temperature": 1.0})
    partial = lesson.Distribution(ids=[10, 11], probs=np.array([0.4, 0.3]), texts=["'a'", "'b'"], asked=[2], n_vocab=None)
    applied = lesson.apply_setting(partial, setting)
    assert applied.ours is None and applied.kept == [] and applied.probs_kept == 0.0 and applied.kept_percent is None
    assert (applied.top_before, applied.top_after, applied.top_token) == (None, None, None)


def test_timed_requests_use_the_shared_pinned_settings(exchanges, lesson):
    from bytesup.llama.timed import PINNED
    timed = [e["request"] for e in exchanges if e["path"] == "/completion" and e["request"]["prompt"] == CURRENT.loop_prompt
             and e["request"]["n_predict"] in {CURRENT.fit_n, *CURRENT.predict_n} and "n_probs" not in e["request"]
             and not e["request"].get("stream")]
    assert len(timed) == len({CURRENT.fit_n, *CURRENT.predict_n}) * 2  # fixtures are recorded with --repeat 2
    streamed = [e["request"] for e in _streamed(exchanges, lesson)]
    assert len(streamed) == 2 and all(req["stream"] is True and req["prompt"] == CURRENT.loop_prompt for req in streamed)
    for req in timed + streamed:
        assert {k: req[k] for k in PINNED} == {**PINNED, "seed": CURRENT.seed}


# --- the sampler pipeline against a naive reference, on a 4-token distribution --------------------

PROBS = [0.45, 0.30, 0.17, 0.08]     # ids 10, 11, 12, 13; no cumulative sum falls on 0.5 or 0.9


def naive_temperature(p, t):
    if t <= 0:                                    # greedy: the most probable token only
        best = max(range(len(p)), key=lambda i: (p[i], -i))
        return [1.0 if i == best else 0.0 for i in range(len(p))]
    w = [x ** (1 / t) for x in p]
    return [x / sum(w) for x in w]


def naive_top_k(p, k):
    order = sorted(range(len(p)), key=lambda i: -p[i])
    keep = set(order[:k]) if k > 0 else set(order)
    kept = [x if i in keep else 0.0 for i, x in enumerate(p)]
    return [x / sum(kept) for x in kept]


def naive_top_p(p, top):
    order = sorted(range(len(p)), key=lambda i: -p[i])
    keep, cumulative = set(), 0.0
    for i in order:
        keep.add(i)
        cumulative += p[i]
        if cumulative >= top:
            break
    kept = [x if i in keep else 0.0 for i, x in enumerate(p)]
    return [x / sum(kept) for x in kept]


def naive_min_p(p, m):
    """llama.cpp's min-p: drop tokens below m × the top probability (0 keeps every token)."""
    kept = [x if x >= m * max(p) else 0.0 for x in p]
    return [x / sum(kept) for x in kept]


def naive_chain(p, samplers, params):
    step = {"temperature": naive_temperature, "top_k": naive_top_k, "top_p": naive_top_p, "min_p": naive_min_p}
    for name in samplers:
        p = step[name](p, params[name])
    return p


def hand_distribution(lesson):
    return lesson.Distribution(ids=[10, 11, 12, 13], probs=np.array(PROBS), texts=["'a'", "'b'", "'c'", "'d'"],
                               asked=[64], n_vocab=4)


def test_a_distribution_is_complete_when_every_token_is_listed(lesson):
    # 4 listed of a 4-token vocabulary: complete, so the samplers get no outside mass (total None).
    whole = hand_distribution(lesson)
    assert whole.complete and whole.total is None
    assert whole.listed_mass == pytest.approx(0.45 + 0.30 + 0.17 + 0.08)
    # 4 listed of 5, or an unknown vocabulary: partial, the whole mass is 1.
    for n_vocab in (5, None):
        partial = lesson.Distribution(ids=whole.ids, probs=whole.probs, texts=whole.texts, asked=[64], n_vocab=n_vocab)
        assert not partial.complete and partial.total == 1.0


# Worked by hand:
# top-k 2:          0.45, 0.30 kept, ÷ 0.75                         → 0.6, 0.4
# top-p 0.5:        cumulative 0.45 < 0.5, 0.75 ≥ 0.5: two kept      → 0.6, 0.4
# top-p 0.9:        0.45, 0.75, 0.92 ≥ 0.9: three kept, ÷ 0.92      → 0.489130, 0.326087, 0.184783
# temperature 0.5:  p², 0.2025 + 0.09 + 0.0289 + 0.0064 = 0.3278    → 0.617755, 0.274558, 0.088164, 0.019524
# top-p 0.9 → top-k 10 → temperature 0.5: three kept, squared, 0.2025 + 0.09 + 0.0289 = 0.3214
#                                                                    → 0.630056, 0.280025, 0.089919
# top-k 10 → top-p 0.5 → temperature 1.5: 0.6, 0.4 to the power 2/3 = 0.711379, 0.542884 (sum 1.254262)
#                                                                    → 0.567169, 0.432831
HAND = {
    "greedy": [1.0, 0.0, 0.0, 0.0],
    "temperature 1.0": PROBS,
    "temperature 0.5": [0.617755, 0.274558, 0.088164, 0.019524],
    "top-k 5": PROBS,
    "top-k 10": PROBS,
    "top-p 0.5": [0.6, 0.4, 0.0, 0.0],
    "top-p 0.9": [0.489130, 0.326087, 0.184783, 0.0],
    "top-k 10 → top-p 0.5 → temperature 1.5": [0.567169, 0.432831, 0.0, 0.0],
    "top-p 0.9 → top-k 10 → temperature 0.5": [0.630056, 0.280025, 0.089919, 0.0],
}


def test_sampler_settings_against_hand_arithmetic_and_a_naive_reference(lesson):
    dist = hand_distribution(lesson)
    for setting in lesson.sampler_settings(CURRENT):
        applied = lesson.apply_setting(dist, setting)
        naive = naive_chain(PROBS, setting.samplers, setting.params)
        assert list(applied.ours) == pytest.approx(naive, abs=1e-12), setting.label
        if setting.label in HAND:
            assert list(applied.ours) == pytest.approx(HAND[setting.label], abs=1e-6), setting.label
        assert len(applied.kept) == sum(x > 0 for x in naive)
        assert applied.kept_percent == pytest.approx(100 * sum(p for p, x in zip(PROBS, naive, strict=True) if x > 0))
    # min-p is not one of the lesson's samplers: every request switches it off (0.0), which keeps every token.
    assert naive_min_p(PROBS, 0.0) == pytest.approx(PROBS)
    assert lesson.post_sampling_body(("top_k",), {"top_k": 2}, 3, CURRENT.seed)["min_p"] == 0.0
    # 0.2 × 0.45 = 0.09: min-p 0.2 would drop 0.08 (the request would then differ from the chain computed here)
    assert naive_min_p(PROBS, 0.2)[3] == 0.0


def test_a_wrong_kept_set_or_probability_is_a_mismatch(lesson):
    dist = hand_distribution(lesson)
    top_p = next(s for s in lesson.sampler_settings(CURRENT) if s.label == "top-p 0.5")
    applied = lesson.apply_setting(dist, top_p)
    assert lesson.asked_candidates(dist, applied, CURRENT.max_post_probs) == 3          # two kept, one more asked for

    def step(listed):
        from bytesup.llama.responses import TokenProbabilities
        return TokenProbabilities(id=10, token="a", prob=listed[0][1],
                                  top_probs=[{"id": i, "token": "x", "prob": p} for i, p in listed])

    right = lesson.check_setting(CURRENT, dist, applied, step([(10, 0.6), (11, 0.4)]))
    assert right.verdict == "agree" and right.fact() == {"name": "top-p 0.5", "max_relative_difference": pytest.approx(0.0, abs=1e-15),
                                                         "tolerance": CURRENT.rel_tol, "same_tokens": True}
    three = lesson.check_setting(CURRENT, dist, applied, step([(10, 0.45 / 0.92), (11, 0.30 / 0.92), (12, 0.17 / 0.92)]))
    assert three.verdict == "mismatch" and three.fact()["same_tokens"] is False
    # 0.6 against 0.6006 and 0.4 against 0.3994: |Δp| / p is 0.0006 / 0.6006 ≈ 1.0e-3 and 0.0006 / 0.3994 ≈ 1.5e-3,
    # the larger one reported, 150 times the tolerance
    off = lesson.check_setting(CURRENT, dist, applied, step([(10, 0.6006), (11, 0.3994)]))
    assert off.verdict == "mismatch" and off.fact()["max_relative_difference"] == pytest.approx(0.0006 / 0.3994)
    unchecked = lesson.check_setting(CURRENT, dist, lesson.Applied(top_p, None), None)
    assert (unchecked.verdict, unchecked.relative, unchecked.drawn, unchecked.edge) == ("not checked", False, None, None)
    assert lesson.check_setting(CURRENT, dist, applied, None).verdict == "not checked"     # computed, but not asked
    # The server lists the 3 asked for (0 for the third): its list was cut, so the edge is our smallest kept
    # probability, 0.3 ÷ 0.75 = 0.4 (top-p 0.5 keeps 0.45 and 0.30); a whole list (2 of 3) has no edge.
    assert lesson.check_setting(CURRENT, dist, applied, step([(10, 0.6), (11, 0.4), (12, 0.0)])).edge == pytest.approx(0.4)
    assert right.edge is None
    # Greedy keeps one token: with a single kept token there is no edge to show.
    greedy = lesson.apply_setting(dist, next(s for s in lesson.sampler_settings(CURRENT) if s.label == "greedy"))
    assert lesson.asked_candidates(dist, greedy, CURRENT.max_post_probs) == 2
    assert lesson.check_setting(CURRENT, dist, greedy, step([(10, 1.0), (11, 0.0)])).edge is None
    assert cells([lesson05.check_row(unchecked)]) == [["top-p 0.5", "top_p → temperature", *[None] * 8, CURRENT.rel_tol,
                                                          "not checked"]]
    assert cells([lesson05.check_row(right)]) == [["top-p 0.5", "top_p → temperature", 2, 2, 2, True, "'a'", True,
                                                      pytest.approx(0.0, abs=1e-15), pytest.approx(0.0, abs=1e-15),
                                                      CURRENT.rel_tol, "agree"]]
    summary = CheckSummary([right, three, off, unchecked])
    assert (len(summary.checked), summary.agree, summary.mismatch) == (3, [right], [three, off])
    # the largest |Δp| / p is the third token of `three`, kept by the server and not by us: |0 − p| ÷ p = 1
    # and `three` listed all 3 asked for, a cut list, so its edge is our smallest kept probability, 0.4
    assert summary.largest_relative == 1.0 and summary.edges == [pytest.approx(0.4)]
    assert CheckSummary([right, off]).largest_relative == pytest.approx(0.0006 / 0.3994)
    assert math.isnan(CheckSummary([unchecked]).largest_relative)
    assert unchecked.fact() == {"name": "top-p 0.5", "max_relative_difference": None, "tolerance": CURRENT.rel_tol,
                                "same_tokens": None}


# --- main on hand-made answers -------------------------------------------------------------------

def hand_answers(lesson, perturb=False):
    """Answers per request: the loop, the reference softmax over 4 tokens, the server's post-sampling
    probabilities (computed with the naive reference), seeded runs, and timed runs of 50 ms prompt
    and 10 ms per decode pass plus a fixed 31 ms."""
    logs = [math.log(p) for p in PROBS]

    def completion(body):
        n = body["n_predict"]
        if body.get("post_sampling_probs") is True:
            kept = naive_chain(PROBS, body["samplers"], body)
            if perturb and body["samplers"] == ["top_p", "temperature"] and body["top_p"] == 0.5:
                kept = naive_top_p(PROBS, 0.9)     # a server that kept three tokens instead of two
            listed = sorted(((i, p) for i, p in zip([10, 11, 12, 13], kept, strict=True) if p > 0), key=lambda x: -x[1])
            listed = listed[:body["n_probs"]]
            return {"content": "a", "timings": timings(5, 1), "completion_probabilities": [
                {"id": 10, "token": "a", "prob": listed[0][1],
                 "top_probs": [{"id": i, "token": "abcd"[i - 10], "prob": p} for i, p in listed]}]}
        if body.get("post_sampling_probs") is False and n == 1:   # the reference softmax
            return {"content": "a", "timings": timings(5, 1), "completion_probabilities": [
                {"id": 10, "token": "a", "logprob": logs[0],
                 "top_logprobs": [{"id": 10 + i, "token": "abcd"[i], "logprob": lp} for i, lp in enumerate(logs)]}]}
        if body.get("n_probs") == 1:                               # the loop: every step at probability 0.5
            return {"content": "x" * n, "timings": timings(5, n), "completion_probabilities": [
                {"id": 7, "token": "x", "logprob": math.log(0.5),
                 "top_logprobs": [{"id": 7, "token": "x", "logprob": math.log(0.5)}]} for _ in range(n)]}
        if body.get("temperature") == 1.0:                         # seeded
            tokens = [1, 2, 3, 4] if body["seed"] == 1234 else [1, 9, 3, 9]
            return {"content": "".join(map(str, tokens)), "tokens": tokens, "timings": timings(5, 4)}
        return {"content": "x" * n, "timings": timings(5, n)}

    def timings(prompt_n, n):
        return {"prompt_n": prompt_n, "prompt_ms": 50.0, "predicted_n": n, "predicted_ms": 10.0 * (n - 1) + 31.0,
                "predicted_per_token_ms": (10.0 * (n - 1) + 31.0) / (n - 1) if n > 1 else None}

    before = "llamacpp:prompt_tokens_total 100\nllamacpp:tokens_predicted_total 200\nllamacpp:n_decode_total 300\n"
    after = "llamacpp:prompt_tokens_total 105\nllamacpp:tokens_predicted_total 216\nllamacpp:n_decode_total 316\n"
    # 1 loop + 1 reference + 10 post-sampling + 3 seeded + 5 lengths × 2 repeats
    return {"/metrics": [before, after], "/v1/models": [{"data": [{"id": "hand.gguf", "meta": {"n_vocab": 4}}]}],
            "/completion": [completion] * 25}


def run_by_hand(lesson, perturb=False):
    from lessonkit import QueuedServer, hand_context

    server = QueuedServer(hand_answers(lesson, perturb))
    ctx = hand_context(LESSON, server, host_values={
        "server_facts": {"local": False, "reason": "the server runs on gpu-box, not on this host"}})
    result = lesson.main(ctx)
    assert server.left() == {}
    return result


@pytest.fixture(scope="module")
def by_hand(lesson):
    return run_by_hand(lesson)


def test_main_by_hand_the_loop_and_its_counters(by_hand, lesson):
    loop = by_hand.table("one_pass_per_token")
    assert [r[3] for r in loop.rows] == [0.5] * CURRENT.loop_tokens
    assert "averaged 50% here" in loop.notes[1]
    delta = {r[0]: r[3] for r in by_hand.table("metrics_delta").rows}
    assert delta == {"llamacpp:prompt_tokens_total": 5, "llamacpp:tokens_predicted_total": 16, "llamacpp:n_decode_total": 16}
    # 16 calls for 16 tokens: 15 for the tokens after the first, 1 for the 5-token prompt
    assert "one pass per token" in by_hand.table("metrics_delta").notes[1]


def test_main_by_hand_the_samplers(by_hand, lesson):
    cumulative = [r[4] for r in by_hand.table("next_token_distribution").rows]
    assert cumulative == pytest.approx([0.45, 0.75, 0.92, 1.0])
    applied = {r[0]: r for r in by_hand.table("samplers_applied").rows}
    assert applied["top-p 0.5"][2] == 2 and applied["top-p 0.5"][3] == pytest.approx(75.0)
    assert applied["top-p 0.9"][2] == 3 and applied["top-p 0.9"][6] == pytest.approx(0.489130, abs=1e-6)
    assert applied["temperature 0.5"][6] == pytest.approx(0.617755, abs=1e-6)
    facts = by_hand.fact("sampler_comparisons")
    assert [f["name"] for f in facts] == [s.label for s in lesson.sampler_settings(CURRENT)]
    assert all(f["same_tokens"] is True and f["max_relative_difference"] <= f["tolerance"] == 1e-5 for f in facts)


def test_main_by_hand_a_server_that_keeps_another_set(lesson):
    result = run_by_hand(lesson, perturb=True)
    facts = {f["name"]: f for f in result.fact("sampler_comparisons")}
    assert facts["top-p 0.5"]["same_tokens"] is False
    assert all(f["same_tokens"] for name, f in facts.items() if name != "top-p 0.5")
    assert "mismatch: top-p 0.5" in result.table("sampler_check").notes[0]
    assert result.table("sampler_check_main").notes[0].endswith("; they differ for top-p 0.5.")


def test_main_by_hand_seeded_and_latency(by_hand):
    notes = by_hand.table("seeded_sampling").notes
    assert "identical text and tokens" in notes[0] and "2 of 4 tokens differ" in notes[1]
    # fit at n = 32: prompt 50 ms; decode (10 × 31 + 31) ÷ 31 = 11 ms per pass
    assert by_hand.measurement("time_to_first_token_ms").samples == [50.0, 50.0]
    assert by_hand.measurement("decode_ms_per_token").samples == [11.0, 11.0]
    rows = {r[0]: r for r in by_hand.table("latency_model").rows}
    # n = 8: predicted 50 + 11 × 7 = 127; measured 50 + 70 + 31 = 151; error 100 × (127 − 151) ÷ 151
    assert rows[8][2] == 127.0 and rows[8][3] == 151.0 and rows[8][6] == pytest.approx(-2400 / 151)
    # n = 128: predicted 50 + 11 × 127 = 1,447; measured 50 + 1,270 + 31 = 1,351
    assert rows[128][2] == 1447.0 and rows[128][3] == 1351.0 and rows[128][6] == pytest.approx(9600 / 1351)
    errors = {m.settings["n_predict"]: m.samples for m in by_hand.measurements if m.name == "latency_model_error_pct"}
    assert sorted(errors) == [8, 16, 64, 128] and errors[8] == [pytest.approx(-2400 / 151)] * 2
    # What the run shows: 16 decode calls for 16 tokens; the model misses n = 8 by −15.9%, more than 10%
    assert by_hand.shows.plot == "latency_model"
    assert by_hand.shows.text == (
        "Generating 16 tokens took 16 passes of the model (the server's own count): one pass per token. Total time ≈ "
        "50 ms to the first token + 11 ms for each token after it, but at n = 8 it predicts 127 ms against 151 ms "
        "measured (-15.9%): more than 10% off, so one time per token does not describe this run.")


def test_what_the_run_shows_reads_the_run(result):
    ttft = result.measurement("time_to_first_token_ms").median
    tpot = result.measurement("decode_ms_per_token").median
    _, rows = table(result, "latency_model")
    worst = max((r for r in rows if r[1] != "fit"), key=lambda r: abs(r[6]))
    calls = {r[0]: r[3] for r in result.table("metrics_delta").rows}["llamacpp:n_decode_total"]
    # the main table: n, row, predicted, measured median, error of each row; the samples' range under Details
    main = result.table("latency_model_main")
    assert [c.name for c in main.columns] == lesson05.LATENCY_SHOWN and result.table("latency_model").detail
    assert main.rows == [[r[0], r[1], r[2], r[3], r[6]] for r in rows]
    text = result.shows.text
    assert text.startswith(f"Generating {CURRENT.loop_tokens} tokens took {calls:g} passes of the model")
    assert f"Total time ≈ {ttft:.3g} ms to the first token + {tpot:.3g} ms for each token after it" in text
    if abs(worst[6]) <= 10:
        assert f"within {abs(worst[6]):.3g}%" in text
    else:
        assert f"at n = {worst[0]:,} it predicts {worst[2]:,.0f} ms against {worst[3]:,.0f} ms measured ({worst[6]:+.3g}%)" in text


def test_what_the_run_shows_follows_hand_made_counts_and_times():
    from bytesup.course.loop import CounterDelta, LatencyCheck, LatencyFit

    model = LatencyFit(ttft_samples=[20.0], tpot_samples=[5.0])
    # predicted at n = 11: 20 + 5 × 10 = 70 ms; measured 72 ms is −2.78%, 100 ms is −30%
    close = [LatencyCheck(4, True, 35.0, [35.0], [4]), LatencyCheck(11, False, 70.0, [72.0], [11])]
    far = [close[0], LatencyCheck(11, False, 70.0, [100.0], [11])]
    passes = [CounterDelta("llamacpp:n_decode_total", 100.0, 111.0)]
    said = lesson05.shows(11, passes, model, close)
    assert said == ("Generating 11 tokens took 11 passes of the model (the server's own count): one pass per token. "
                    "Total time ≈ 20 ms to the first token + 5 ms for each token after it; this predicts every measured "
                    "total within 2.78% (up to n = 11, where the passes after the first take 71.4% of the time).")
    assert lesson05.shows(11, passes, model, far).endswith(
        "at n = 11 it predicts 70 ms against 100 ms measured (-30%): more than 10% off, so one time per token does not "
        "describe this run.")
    assert "not one per token" in lesson05.shows(10, passes, model, close)
    assert lesson05.shows(11, None, model, close).startswith(
        "The server generated 11 tokens one pass at a time; it serves no pass counter (/metrics), so this run did not count")
    assert lesson05.shows(11, passes, model, close[:1]).endswith(", fitted at one length and not tried at another.")


def test_main_by_hand_measures_no_speculation(by_hand):
    # speculative decoding is lesson 5b's: lesson 5 neither asks for nor states it
    assert "speculative" not in by_hand.settings and not [t for t in by_hand.tables if t.name.startswith("speculative")]
    assert not [m for m in by_hand.measurements if m.name.startswith("spec_")]


def test_main_follows_the_recorded_plan(lesson):
    from lessonkit import QueuedServer, hand_context

    # A plan that predicts one length and streams nothing: the fit at n = 32 and n = 8, two repeats each, so
    # 1 loop + 1 reference + 10 post-sampling + 3 seeded + 2 × 2 timed = 19 of the 25 answers.
    plan = {**CURRENT.model_dump(mode="json"), "predict_n": [8], "stream_tokens": None}
    server = QueuedServer(hand_answers(lesson))
    ctx = hand_context(LESSON, server, host_values={
        "plan": plan, "client_clock": {"clock": "never asked"},
        "server_facts": {"local": False, "reason": "the server runs on gpu-box, not on this host"}})
    result = lesson.main(ctx)
    assert server.left() == {"/completion": 6}
    assert [r[0] for r in result.table("latency_model").rows] == [8, 32]
    assert "client_clock" not in [t.name for t in result.tables] and "client_clock" not in result.facts
