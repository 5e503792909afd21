"""The decode-time model (bytesup.course.decodetime) on hand arithmetic."""

from __future__ import annotations

import pytest

from bytesup.course import decodetime as dt

MB = 1e6

# Two widths made by hand from B = 20 GB/s, F = 1 ms, c = 0.02 ns per weight (type A) and 0.01 ns (type B),
# 100 M parameters each: 100 MB read in 5 ms, 200 MB in 10 ms; the arithmetic of one token 2 ms and 1 ms.
A = dt.Width("a", 100 * MB, 100e6, "A", {2: 5 + 1 + 2 * 2, 4: 5 + 1 + 4 * 2})    # 10 and 14 ms
B = dt.Width("b", 200 * MB, 100e6, "B", {2: 10 + 1 + 2 * 1, 4: 10 + 1 + 4 * 1})  # 13 and 15 ms


def test_lines_through_the_step_times():
    assert dt.step_line(A, (2, 4)) == dt.Line(pytest.approx(6.0), pytest.approx(2.0))
    assert dt.step_line(B, (2, 4)) == dt.Line(pytest.approx(11.0), pytest.approx(1.0))
    with pytest.raises(ValueError, match="a: no step time at P = 8"):
        dt.step_line(A, (2, 8))


def test_the_terms_come_back():
    terms = dt.fit([A, B], (2, 4))
    # intercepts 6 and 11 ms over 100 and 200 MB: 5 ms per 100 MB, 1e-6 ÷ 5e-8 = 20 GB/s; F = 6 − 5 = 1 ms
    assert terms.gbs == pytest.approx(20.0) and terms.fixed_ms == pytest.approx(1.0)
    # slopes 2 and 1 ms over 100 M weights: 2e6 ns ÷ 1e8 = 0.02 and 0.01 ns per weight
    assert terms.arith_ns == {"A": pytest.approx(0.02), "B": pytest.approx(0.01)}
    assert terms.fitted == ("a", "b") and terms.levels == (2, 4)


def test_prediction_of_a_model_not_fitted():
    terms = dt.fit([A, B], (2, 4))
    # 1,000 MB of type A, 500 M weights: 50 ms to read, 500e6 × 0.02 ns = 10 ms of arithmetic, 1 ms fixed
    p = dt.predict(terms, "big", 1000 * MB, 500e6, "A")
    assert p is not None
    assert (p.memory_ms, p.arithmetic_ms, p.fixed_ms) == (pytest.approx(50.0), pytest.approx(10.0), pytest.approx(1.0))
    assert p.step_ms == pytest.approx(61.0) and p.tokens_per_s == pytest.approx(1000 / 61)
    assert p.shares()["memory"] == pytest.approx(50 / 61) and p.verdict == dt.MEMORY
    # P = 1 of width a: 5 + 2 + 1 = 8 ms, 125 tokens/s; at P = 8: 5 + 16 + 1 = 22 ms for 8 tokens, 363.6 tokens/s
    one = dt.predict(terms, "a", 100 * MB, 100e6, "A")
    eight = dt.predict(terms, "a", 100 * MB, 100e6, "A", parallel=8)
    assert one is not None and eight is not None
    assert one.tokens_per_s == pytest.approx(125.0) and eight.tokens_per_s == pytest.approx(8000 / 22)
    assert eight.verdict == dt.COMPUTE  # 16 of 22 ms
    assert dt.predict(terms, "c", MB, 1e6, "Q4_0") is None  # no arithmetic fitted for that type


def test_no_bandwidth_when_the_intercepts_do_not_grow():
    flat = dt.Width("f", 200 * MB, 100e6, "B", {2: 8.0, 4: 10.0})  # intercept 6, as a's at twice the bytes
    with pytest.raises(ValueError, match="do not grow"):
        dt.fit([A, flat], (2, 4))
    with pytest.raises(ValueError, match="two distinct"):
        dt.fit([A], (2, 4))


def test_the_verdict_rule():
    assert dt.dominant({"memory": 0.51, "arithmetic": 0.39, "fixed": 0.1}) == dt.MEMORY
    assert dt.dominant({"memory": 0.5, "arithmetic": 0.4, "fixed": 0.1}) == dt.MIXED  # half is not most
    assert dt.dominant({"memory": 0.3, "arithmetic": 0.6, "fixed": 0.1}) == dt.COMPUTE
    assert dt.dominant({"memory": 0.2, "arithmetic": 0.2, "fixed": 0.6}) == dt.FIXED


def test_the_published_spark_figures():
    t = dt.published_terms(7.16e9, 273.0, 33.2, (2379.0 + 2408.0) / 2)
    # 7.16 GB ÷ 273 GB/s = 26.227 ms of 1000 ÷ 33.2 = 30.120 ms; prefill's 2,393.5 tokens/s: 0.4178 ms
    assert t["memory_ms"] == pytest.approx(26.2271, abs=1e-4) and t["measured_ms"] == pytest.approx(30.1205, abs=1e-4)
    assert t["arithmetic_ms"] == pytest.approx(0.41780, abs=1e-5)
    assert t["rest_ms"] == pytest.approx(30.1205 - 26.2271 - 0.4178, abs=1e-3)
    assert t["memory_share"] == pytest.approx(0.8707, abs=1e-4)
