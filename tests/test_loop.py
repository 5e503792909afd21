"""The generation loop's arithmetic on hand-made numbers (no server): decode passes, the server's counters read
around a request, and the latency model fitted at one length and set against others."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from bytesup.course import loop


@dataclass(frozen=True)
class Times:
    prompt_ms: float
    predicted_ms: float
    predicted_n: int


def test_decode_passes_leave_out_the_first_token():
    # 17 tokens in 320 ms: the first came from the prompt pass, 16 passes of 20 ms
    assert loop.decode_passes(Times(50.0, 320.0, 17)) == 16
    assert loop.decode_ms_per_token(Times(50.0, 320.0, 17)) == 20.0
    assert loop.decode_passes(Times(50.0, 0.0, 1)) == loop.decode_passes(Times(50.0, 0.0, 0)) == 0
    assert math.isnan(loop.decode_ms_per_token(Times(50.0, 0.0, 1)))
    assert loop.server_total_ms(Times(50.0, 320.0, 17)) == 370.0


def test_counter_deltas_keep_the_servers_totals_in_its_order():
    before = {"llamacpp:tokens_predicted_total": 200.0, "llamacpp:kv_cache_usage_ratio": 0.1,
              "llamacpp:n_decode_total": 300.0, "other_total": 1.0, "llamacpp:prompt_tokens_total": 100.0}
    after = {"llamacpp:n_decode_total": 316.0, "llamacpp:tokens_predicted_total": 216.0, "other_total": 9.0,
             "llamacpp:kv_cache_usage_ratio": 0.2}
    found = loop.counter_deltas(before, after)
    # a gauge, a counter not of llama.cpp, and one missing after are left out; the order is the first reading's
    assert [(c.name, c.before, c.after, c.delta) for c in found] == [
        ("llamacpp:tokens_predicted_total", 200.0, 216.0, 16.0), ("llamacpp:n_decode_total", 300.0, 316.0, 16.0)]


def test_decode_calls_note():
    one = loop.decode_calls_note(16, 16, 5)
    assert "one pass per token" in one and "5-token prompt went through in one pass" in one and "15 passes" in one
    split = loop.decode_calls_note(18, 16, 1200)
    assert "leave 3 for the 1200-token prompt" in split and "one pass that" not in split
    fewer = loop.decode_calls_note(10, 16, 5)
    assert "more than one token" in fewer and "one pass per token" not in fewer
    # 11 calls for 10 tokens: 10 − 1 = 9 passes after the first token leave 11 − 9 = 2 for the prompt.
    two = loop.decode_calls_note(11, 10, 600)
    assert "9 passes for the tokens after the first leave 2 for the 600-token prompt" in two
    # No token at all: max(0 − 1, 0) = 0 later passes, so a one-token-per-pass loop needs 0 + 1 = 1 call.
    none = loop.decode_calls_note(0, 0, 5)
    assert "fewer calls than the 1 a one-token-per-pass loop needs" in none


def test_latency_fit_divides_by_the_passes_after_the_first_token():
    # 32 tokens, predicted_ms 341: 31 decode passes of 11 ms, not 341 ÷ 32 = 10.66; prompts of 40, 60 and 80 ms
    fit = loop.latency_fit([Times(ms, 341.0, 32) for ms in (40.0, 80.0, 60.0)])
    assert fit.ttft_samples == [40.0, 80.0, 60.0] and fit.tpot_samples == [11.0, 11.0, 11.0]
    assert fit.ttft == 60.0 and fit.tpot == 11.0
    # n = 128: 60 + 11 × 127 = 1,457 ms, of which 1,397 ms are decode passes: 95.88%
    assert fit.predict(128) == 1457.0 == loop.latency_prediction(60.0, 11.0, 128)
    assert fit.decode_share_pct(128) == pytest.approx(100 * 1397 / 1457)
    assert fit.predict(1) == 60.0 and fit.decode_share_pct(1) == 0.0


def test_latency_check_against_repeats_by_hand():
    fit = loop.LatencyFit([50.0, 50.0], [11.0, 11.0])
    # n = 8: predicted 50 + 11 × 7 = 127; repeats of 50 + 101 = 151, 50 + 90 = 140 and 50 + 110 = 160 ms
    c = loop.latency_check(fit, 8, [Times(50.0, 101.0, 8), Times(50.0, 90.0, 8), Times(50.0, 110.0, 8)], fitted=False)
    assert (c.predicted, c.totals, c.predicted_n, c.measured) == (127.0, [151.0, 140.0, 160.0], [8, 8, 8], 151.0)
    assert c.error_pct == pytest.approx(100 * (127 - 151) / 151)
    assert c.errors_pct == pytest.approx([100 * -24 / 151, 100 * -13 / 140, 100 * -33 / 160])
    fitted = loop.latency_check(fit, 32, [Times(50.0, 500.0, 32)], fitted=True)       # error 100 × (391 − 550) ÷ 550
    close = loop.latency_check(fit, 16, [Times(50.0, 170.0, 16)], fitted=False)       # 215 against 220: −2.3%
    # the worst prediction is the largest |error| among lengths predicted, never the fitted one
    assert loop.worst_prediction([fitted, close, c]) is c
    assert loop.worst_prediction([fitted, close]) is close
    assert loop.worst_prediction([fitted]) is fitted


def test_one_decode_pass_and_the_whole_notes():
    # 2 tokens in 20 ms: one pass after the prompt's, 20 ms
    assert loop.decode_ms_per_token(Times(50.0, 20.0, 2)) == 20.0
    assert loop.decode_calls_note(16, 16, 5) == (
        "n_decode_total (calls of llama_decode) rose by 16 for 16 tokens: one pass per token. The 5-token prompt "
        "went through in one pass that also gave the first token, then 15 passes of one token each.")
    assert loop.decode_calls_note(18, 16, 1200).startswith("n_decode_total (calls of llama_decode) rose by 18 for 16 tokens: ")


def test_the_worst_prediction_is_never_the_fitted_length_even_when_every_error_is_small():
    fit = loop.LatencyFit([50.0], [11.0])
    fitted = loop.latency_check(fit, 32, [Times(50.0, 341.0, 32)], fitted=True)      # 391 against 391: 0%
    small = loop.latency_check(fit, 16, [Times(50.0, 166.0, 16)], fitted=False)      # 215 against 216: −0.46%
    assert abs(small.error_pct) < 1 and loop.worst_prediction([fitted, small]) is small
