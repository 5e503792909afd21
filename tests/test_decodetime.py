"""The decode-time model (bytesup.course.decodetime) on hand arithmetic."""

from __future__ import annotations

import itertools
import math

import pytest

from bytesup.course import decodetime

MB = 1e6

# Models made by hand from B = 50 GB/s, c = 25 ps per parameter and f = 0.1 ms per block:
#   a: 100 MB, 100 M parameters, 20 blocks: read 2 ms, arithmetic 100e6 × 25e-12 s = 2.5 ms, fixed 20 × 0.1 = 2 ms
#      -> 2 + 2.5 = 4.5 ms (arithmetic)
#   b: 200 MB, 100 M, 20 blocks: read 4 ms, arithmetic 2.5 ms -> 6 ms (memory)
#   c: 400 MB, 100 M, 20 blocks: read 8 ms -> 10 ms (memory)
#   d: 1,000 MB, 1,000 M, 10 blocks: read 20 ms, arithmetic 25 ms, fixed 1 ms -> 26 ms (arithmetic)
# All four of one weight type, so one c holds for them.
A = decodetime.Width("a", 100 * MB, 100e6, "Q8_0", {1: 4.5, 2: 9.0, 4: 12.0}, 20)
B = decodetime.Width("b", 200 * MB, 100e6, "Q8_0", {1: 6.0}, 20)
C = decodetime.Width("c", 400 * MB, 100e6, "Q8_0", {1: 10.0}, 20)
D = decodetime.Width("d", 1000 * MB, 1000e6, "Q8_0", {1: 26.0}, 10)
TERMS = decodetime.Terms(gbs=50.0, arith=(("Q8_0", 25.0),), fixed_ms_per_block=0.1, fitted=())


def test_a_prediction_term_by_term():
    p = decodetime.predict(TERMS, "d", 1000 * MB, 1000e6, 10, "Q8_0")
    assert (p.memory_ms, p.arithmetic_ms, p.fixed_ms) == (pytest.approx(20.0), pytest.approx(25.0), pytest.approx(1.0))
    assert p.step_ms == pytest.approx(26.0) and p.tokens_per_s == pytest.approx(1000 / 26)
    # the overlapped terms' shares: 20 ÷ 26 and 25 ÷ 26 add to more than one
    assert p.shares() == {"memory": pytest.approx(20 / 26), "arithmetic": pytest.approx(25 / 26),
                          "fixed": pytest.approx(1 / 26)}
    assert p.verdict == decodetime.COMPUTE
    b = decodetime.predict(TERMS, "b", 200 * MB, 100e6, 20, "Q8_0")
    assert b.step_ms == pytest.approx(6.0) and b.verdict == decodetime.MEMORY
    assert decodetime.predict(TERMS, "c", 400 * MB, 100e6, 20, "Q8_0").step_ms == pytest.approx(10.0)
    assert TERMS.arith_gflops("Q8_0") == pytest.approx(80.0)  # 2 FLOPs in 25 ps


def test_the_terms_come_back_from_their_own_steps():
    terms = decodetime.fit([A, B, C, D])
    # the grid steps by 2.3% in B and 3% in c: the terms come back within a grid step or two
    assert terms.gbs == pytest.approx(50.0, rel=0.03)
    assert terms.c("Q8_0") == pytest.approx(25.0, rel=0.04) and terms.types == ("Q8_0",)
    assert terms.fixed_ms_per_block == pytest.approx(0.1, abs=0.008)
    assert terms.fixed_ms_per_bpp == 0.0  # made without g: the terms with it err no less
    assert terms.fitted == ("a", "b", "c", "d")
    for w in (A, B, C, D):
        assert abs(decodetime.error(decodetime.predict_width(terms, w), w.step_ms[1])) < 0.02


def test_each_model_is_predicted_by_the_others():
    held = decodetime.held_out([A, B, C, D])
    for w in (A, B, C, D):
        p = held[w.name]
        assert p is not None and abs(decodetime.error(p, w.step_ms[1])) < 0.05, (w.name, p)
    # d left out: a (arithmetic) still fixes c, b and c fix B and f, so d's 26 ms comes back
    assert held["d"] is not None and held["d"].verdict == decodetime.COMPUTE
    # with three models, leaving one out leaves two: too few for three terms
    assert decodetime.held_out([A, B, C]) == {"a": None, "b": None, "c": None}


def test_a_sum_of_the_terms_would_miss_these_steps():
    """The maximum, not the sum: the sum of a's terms is 2 + 2 + 2.5 = 6.5 ms, 44% over its 4.5 ms."""
    a = decodetime.predict(TERMS, "a", 100 * MB, 100e6, 20, "Q8_0")
    assert a.step_ms == pytest.approx(4.5)
    assert a.memory_ms + a.arithmetic_ms + a.fixed_ms == pytest.approx(6.5)


def test_a_model_that_does_not_fit_is_not_predicted_within_the_tolerance():
    """d twice as slow as the model says: the others' terms put it at 26 ms, so at a measured 52 ms the predicted
    tokens/s are 52 ÷ 26 − 1 = +100% of the measured."""
    slow = decodetime.Width("d", 1000 * MB, 1000e6, "Q8_0", {1: 52.0}, 10)
    p = decodetime.held_out([A, B, C, slow])["d"]
    assert p is not None and decodetime.error(p, slow.step_ms[1]) == pytest.approx(52 / 26 - 1, abs=0.05)
    assert abs(decodetime.error(p, slow.step_ms[1])) > decodetime.TOLERANCE


def test_too_few_models_or_no_single_step():
    with pytest.raises(ValueError, match="at least 3 models"):
        decodetime.fit([A, B])
    with pytest.raises(ValueError, match="no step time at P = 1 for e"):
        decodetime.fit([A, B, decodetime.Width("e", MB, 1e6, "F16", {2: 3.0})])


def test_the_verdict_rule():
    assert decodetime.waits_on(5.0, 4.0) == decodetime.MEMORY
    assert decodetime.waits_on(4.0, 5.0) == decodetime.COMPUTE
    assert decodetime.waits_on(4.0, 4.0) == decodetime.COMPUTE  # a tie is not memory-bound
    # the fixed cost never names the verdict: 3 ms of it beside 1 ms of reading and 2 of arithmetic
    assert decodetime.Prediction("x", 1.0, 2.0, 3.0).verdict == decodetime.COMPUTE


def test_lines_through_the_step_times():
    assert decodetime.step_line(A, (2, 4)) == decodetime.Line(pytest.approx(6.0), pytest.approx(1.5))
    with pytest.raises(ValueError, match="a: no step time at P = 8"):
        decodetime.step_line(A, (2, 8))
    with pytest.raises(ValueError, match="two distinct"):
        decodetime.least_squares([2.0, 2.0], [1.0, 3.0])


def test_the_published_spark_figures():
    t = decodetime.published_terms(7.16e9, 273.0, 33.2, (2379.0 + 2408.0) / 2, 6.74e9)
    # 7.16 GB ÷ 273 GB/s = 26.227 ms of 1000 ÷ 33.2 = 30.120 ms; prefill's 2,393.5 tokens/s: 0.4178 ms
    assert t["memory_ms"] == pytest.approx(26.2271, abs=1e-4) and t["measured_ms"] == pytest.approx(30.1205, abs=1e-4)
    assert t["arithmetic_ms"] == pytest.approx(0.41780, abs=1e-5)
    # the rest is what the larger term, the read, leaves: 30.1205 − 26.2271
    assert t["rest_ms"] == pytest.approx(30.1205 - 26.2271, abs=1e-3)
    assert t["memory_share"] == pytest.approx(0.8707, abs=1e-4)
    assert decodetime.waits_on(t["memory_ms"], t["arithmetic_ms"]) == decodetime.MEMORY
    # the same rule in bytes per parameter: c = 0.41780 ms ÷ 6.74e9 = 0.061988 ps; B × c = 273 × 0.061988e-3 =
    # 0.016923 bytes per parameter, against the specimen's 7.16 ÷ 6.74 = 1.06231, 62.8 × above it
    assert t["arith_ps"] == pytest.approx(0.061988, abs=1e-6)
    assert t["crossover"] == pytest.approx(0.016923, abs=1e-6)
    assert t["bytes_per_param"] == pytest.approx(1.06231, abs=1e-5)
    assert (t["bytes_per_param"] > t["crossover"]) == (t["memory_ms"] > t["arithmetic_ms"])


def test_the_batch_line_predicts_a_larger_batch():
    # steps of 12 and 16.5 ms at P = 2 and 4: b = 4.5 ÷ 2 = 2.25 ms per sequence, a = 12 − 4.5 = 7.5 ms;
    # at P = 8: 7.5 + 18 = 25.5 ms
    line, at8 = decodetime.batch_prediction({1: 5.6, 2: 12.0, 4: 16.5, 8: 24.5})
    assert line == decodetime.Line(pytest.approx(7.5), pytest.approx(2.25)) and at8 == pytest.approx(25.5)
    assert decodetime.batch_prediction({1: 5.6, 2: 12.0}) is None


def test_the_rule_and_the_arithmetic_at_their_edges():
    assert (decodetime.MEMORY, decodetime.COMPUTE, decodetime.MIXED) == ("memory-bound", "compute-bound", "mixed")
    # a compute-bound step: 100 MB in 2 ms against 100 M × 25 ps = 2.5 ms, + 2 ms
    assert decodetime.predict(TERMS, "a", 100 * MB, 100e6, 20, "Q8_0").step_ms == pytest.approx(4.5)
    # 200 tokens/s predicted against a 4 ms step measured (250 tokens/s): 200 × 4 ÷ 1000 − 1 = −20%
    assert decodetime.error(decodetime.Prediction("x", 5.0, 1.0, 0.0), 4.0) == pytest.approx(-0.2)


def test_least_squares_through_three_points():
    # x 1, 2, 4 (mean 7/3), y 8, 15, 22 (mean 15): Sxy = 28/3 + 0 + 35/3 = 21, Sxx = 14/3, slope 4.5,
    # intercept 15 − 4.5 × 7/3 = 4.5
    assert decodetime.least_squares([1.0, 2.0, 4.0], [8.0, 15.0, 22.0]) == (pytest.approx(4.5), pytest.approx(4.5))


def test_a_small_fixed_cost_comes_back_too():
    """f = 0.01 ms per block with the same B and c: the fit never forces a larger one."""
    widths = [decodetime.Width(w.name, w.weight_bytes, w.n_params, w.weight_type, {1: w.step_ms[1] - 0.09 * w.n_layer},
                               w.n_layer) for w in (A, B, C, D)]
    assert decodetime.fit(widths).fixed_ms_per_block == pytest.approx(0.01, abs=0.005)


def test_the_published_shares():
    t = decodetime.published_terms(7.16e9, 273.0, 33.2, 2393.5, 6.74e9)
    assert t["arithmetic_share"] == pytest.approx(0.41780 / 30.1205, abs=1e-4)
    assert t["rest_share"] == pytest.approx((30.1205 - 26.2271) / 30.1205, abs=1e-4)


def test_a_verdict_is_named_only_where_every_fit_names_it():
    assert decodetime.agreed([decodetime.MEMORY, decodetime.MEMORY, decodetime.MEMORY]) == decodetime.MEMORY
    assert decodetime.agreed([decodetime.COMPUTE]) == decodetime.COMPUTE
    assert decodetime.agreed([decodetime.COMPUTE, decodetime.COMPUTE, decodetime.MEMORY]) == decodetime.MIXED
    assert decodetime.agreed([decodetime.MEMORY, decodetime.COMPUTE]) == decodetime.MIXED


# Six models of the course's shapes (MB, M parameters, blocks), their steps made by hand from B = 50 GB/s,
# c = 25 ps and f = 0.08 ms per block. Q8_0's 1.0625 bytes per parameter lies near the ridge, where B × c = 1.25:
# q8_0 reads 143 MB in 2.86 ms against 134.5 M × 25 ps = 3.36 ms of arithmetic (15% apart), while f32 reads
# 538.1 MB in 10.76 ms, 3.2 × its arithmetic.
SHAPES = [("q4_1", 96.6, 134.5, 30), ("q8_0", 143.0, 134.5, 30), ("f16", 269.1, 134.5, 30),
          ("f32", 538.1, 134.5, 30), ("medium", 224.1, 210.8, 16), ("large", 985.7, 927.5, 18)]
RIDGE = decodetime.Terms(gbs=50.0, arith=(("x", 25.0),), fixed_ms_per_block=0.08, fitted=())


def course_widths(scale: dict[str, float] | None = None) -> list[decodetime.Width]:
    out = []
    for name, mb, mparams, blocks in SHAPES:
        step = decodetime.predict(RIDGE, name, mb * MB, mparams * 1e6, blocks, "x").step_ms * (scale or {}).get(name, 1.0)
        out.append(decodetime.Width(name, mb * MB, mparams * 1e6, "x", {1: step}, blocks))
    return out


def test_every_fit_names_the_verdict_of_the_terms_that_made_the_steps():
    widths = course_widths()
    fits = decodetime.leave_one_out(widths)
    assert all(t is not None for t in fits.values())
    named = decodetime.verdicts(widths, decodetime.fit(widths), fits)
    # the naive reference: the verdict under the terms the steps were made from
    assert named == {w.name: decodetime.predict_width(RIDGE, w).verdict for w in widths}
    assert named == {"q4_1": decodetime.COMPUTE, "q8_0": decodetime.COMPUTE, "f16": decodetime.MEMORY, "f32": decodetime.MEMORY,
                     "medium": decodetime.COMPUTE, "large": decodetime.COMPUTE}


def test_one_fast_model_turns_the_widths_near_the_ridge_mixed_not_over():
    """q8_0 15% faster than the terms allow (as in a make run whose narrowest width decoded 25% faster than in
    the others): the fit without q8_0 finds the terms it was made from, and every fit still names q8_0
    compute-bound, but the fits' crossovers spread from 1.16 to 1.25 bytes per parameter, so their standard error u
    is 0.072 and the band about 1.05-1.34: q8_0 (1.0625), medium (1.063) and large (1.063) lie in it, mixed. q4_1,
    at 0.718, stays compute-bound, and f16 and f32, at 2 and 4, memory-bound. g stays 0 in every fit: no term that
    grows with the bytes per parameter explains one fast model in the middle of the widths."""
    widths = course_widths({"q8_0": 0.85})
    fits = decodetime.leave_one_out(widths)
    terms = decodetime.fit(widths)
    named = decodetime.verdicts(widths, terms, fits)
    assert named == {"q4_1": decodetime.COMPUTE, "q8_0": decodetime.MIXED, "f16": decodetime.MEMORY,
                     "f32": decodetime.MEMORY, "medium": decodetime.MIXED, "large": decodetime.MIXED}
    assert all(t is not None and t.fixed_ms_per_bpp == 0.0 for t in (terms, *fits.values()))
    assert decodetime.crossover_u(fits, "x") == pytest.approx(0.0717, abs=1e-4)
    assert decodetime.mixed_band(terms, fits, "x") == (pytest.approx(1.052, abs=1e-3), pytest.approx(1.339, abs=1e-3))
    without = fits["q8_0"]
    assert without is not None and without.gbs == pytest.approx(50.0, rel=1e-5)
    assert decodetime.predict(without, "q8_0", 143.0 * MB, 134.5e6, 30, "x").verdict == decodetime.COMPUTE


def test_a_fit_too_small_to_leave_one_out_adds_no_verdict():
    """With three models no leave-one-out fit exists: the verdicts are the full fit's alone."""
    fits = decodetime.leave_one_out([A, B, C])
    assert fits == {"a": None, "b": None, "c": None}
    assert decodetime.verdicts([A, B, C], TERMS, fits) == {"a": decodetime.COMPUTE, "b": decodetime.MEMORY, "c": decodetime.MEMORY}


def test_the_crossover_by_hand():
    """B = 50 GB/s and c = 25 ps: a parameter's arithmetic takes 25 ps, in which 50 GB/s reads 1.25 bytes. So b
    (2 bytes per parameter) waits on memory and a (1 byte per parameter) on the arithmetic, as their terms say."""
    assert decodetime.crossover(TERMS, "Q8_0") == pytest.approx(1.25)
    for w in (A, B, C, D):
        p = decodetime.predict_width(TERMS, w)
        assert (w.weight_bytes / w.n_params > decodetime.crossover(TERMS, "Q8_0")) == (p.verdict == decodetime.MEMORY), w.name
    # to move b (2 bytes per parameter) onto the arithmetic: B of at least 2 ÷ 25 ps = 80 GB/s;
    # to move a (1 byte per parameter) onto memory: c below 1 ÷ 50 GB/s = 20 ps
    assert decodetime.bandwidth_to_cross(2.0, TERMS, "Q8_0") == pytest.approx(80.0)
    assert decodetime.arithmetic_to_cross(1.0, TERMS) == pytest.approx(20.0)
    at80 = decodetime.Terms(80.0, (("Q8_0", 25.0),), 0.1, ())
    assert decodetime.crossover(at80, "Q8_0") == pytest.approx(2.0)
    assert decodetime.predict(at80, "b", 200 * MB, 100e6, 20, "Q8_0").verdict == decodetime.COMPUTE  # a tie is not memory-bound
    # the crossover moves with either term: c = 10 ps puts it at 0.5, below every model here
    assert decodetime.crossover(decodetime.Terms(50.0, (("Q8_0", 10.0),), 0.1, ()), "Q8_0") == pytest.approx(0.5)


def test_the_crossover_range_over_the_fits_lies_within_the_mixed_band():
    """q8_0 15% fast (as above): the fits' crossovers lie between 1.16 and 1.25 bytes per parameter, above Q8_0's
    1.0625, so no fit turns a Q8_0 model over; they are mixed because they lie within 2u of the crossover. The
    band holds the range, and a model is mixed exactly where it lies within the band."""
    widths = course_widths({"q8_0": 0.85})
    terms, fits = decodetime.fit(widths), decodetime.leave_one_out(widths)
    low, high = decodetime.crossover_range(terms, fits, "x")
    every = [decodetime.crossover(t, "x") for t in (terms, *fits.values()) if t is not None]
    assert (low, high) == (min(every), max(every)) and len(every) == 7
    assert 1.0625 < low < high and low == pytest.approx(1.162, abs=1e-3)
    named = decodetime.verdicts(widths, terms, fits)
    band = decodetime.mixed_band(terms, fits, "x")
    assert band[0] <= low and high <= band[1]
    for w in widths:
        per_param = w.weight_bytes / w.n_params
        inside = band[0] <= per_param <= band[1]
        assert (named[w.name] == decodetime.MIXED) == inside, (w.name, per_param, band)
    assert decodetime.crossover_range(TERMS, {"a": None}, "Q8_0") == (1.25, 1.25)


def test_a_model_within_two_standard_errors_of_its_crossover_is_mixed():
    """Hand-made fits: every model's terms give Q8_0 a crossover of 50 GB/s × 25 ps = 1.25 bytes per parameter, the
    three fits that leave one model out 1.2, 1.25 and 1.3 (c = 24, 25, 26 ps). Their mean is 1.25, and u² = 2 ÷ 3 ×
    (0.05² + 0 + 0.05²) = 0.003333, u = 0.0577: the band is 1.25 ± 0.1155, 1.1345-1.3655. Every fit names a model at
    1.13 or 1.14 bytes per parameter compute-bound (at 1.14 its arithmetic takes 9.6% longer than its read), and one
    at 1.36 or 1.37 memory-bound: 1.14 and 1.36 lie within the band, mixed; 1.13 and 1.37 outside it, named."""
    terms = decodetime.Terms(50.0, (("Q8_0", 25.0),), 0.1, ())
    fits: dict[str, decodetime.Terms | None] = {
        n: decodetime.Terms(50.0, (("Q8_0", c),), 0.1, ()) for n, c in (("a", 24.0), ("b", 25.0), ("c", 26.0))}
    fits["alone"] = None  # a model that cannot be left out adds no fit
    u = math.sqrt(2 / 3 * 0.005)
    assert decodetime.crossover_u(fits, "Q8_0") == pytest.approx(u)
    assert decodetime.mixed_band(terms, fits, "Q8_0") == (pytest.approx(1.25 - 2 * u), pytest.approx(1.25 + 2 * u))
    widths = [decodetime.Width(f"at {bpp}", bpp * 100 * MB, 100e6, "Q8_0", {1: 5.0}, 20)
              for bpp in (1.13, 1.14, 1.36, 1.37)]
    # every fit on its own names each of them alike
    assert {w.name: {decodetime.predict_width(t, w).verdict for t in (terms, *fits.values()) if t} for w in widths} == {
        "at 1.13": {decodetime.COMPUTE}, "at 1.14": {decodetime.COMPUTE}, "at 1.36": {decodetime.MEMORY},
        "at 1.37": {decodetime.MEMORY}}
    assert decodetime.verdicts(widths, terms, fits) == {"at 1.13": decodetime.COMPUTE, "at 1.14": decodetime.MIXED,
                                                        "at 1.36": decodetime.MIXED, "at 1.37": decodetime.MEMORY}
    # fits that agree on the crossover give u = 0 and no band beyond it: each model is named by its side
    same = {n: terms for n in "abc"}
    assert decodetime.crossover_u(same, "Q8_0") == 0.0 and decodetime.mixed_band(terms, same, "Q8_0") == (1.25, 1.25)
    assert set(decodetime.verdicts(widths, terms, same).values()) == {decodetime.COMPUTE, decodetime.MEMORY}
    # one fit alone has no standard error: only the fits' range
    assert decodetime.crossover_u({"a": fits["a"]}, "Q8_0") is None


def test_a_model_whose_terms_differ_by_less_than_its_steps_scatter_is_mixed():
    """B = 50 GB/s, c = 25 ps, f = 0.1 ms per block, and no fit that leaves one model out (so no band beyond the
    crossover, 1.25): a model of 120 MB and 100 M parameters (1.2 bytes per parameter) in 20 blocks reads its weights in
    2.4 ms and does its arithmetic in 2.5 ms, 0.1 ms apart, in a step of 2 + 2.5 = 4.5 ms. Steps that scatter by 2.3%
    (0.1035 ms) cannot tell the two terms apart: mixed; by 2.2% (0.099 ms) they can: compute-bound."""
    terms = decodetime.Terms(50.0, (("Q8_0", 25.0),), 0.1, ())
    fits: dict[str, decodetime.Terms | None] = {"a": None}

    def width(spread: float) -> decodetime.Width:
        return decodetime.Width("w", 120 * MB, 100e6, "Q8_0", {1: 4.5}, 20, spread)

    p = decodetime.predict_width(terms, width(0.0))
    assert (p.memory_ms, p.arithmetic_ms, p.step_ms) == (pytest.approx(2.4), pytest.approx(2.5), pytest.approx(4.5))
    assert decodetime.too_close(width(0.023), terms) and not decodetime.too_close(width(0.022), terms)
    assert decodetime.verdicts([width(0.023)], terms, fits) == {"w": decodetime.MIXED}
    assert decodetime.verdicts([width(0.022)], terms, fits) == {"w": decodetime.COMPUTE}


def test_the_grid_is_log_spaced_from_end_to_end_and_rounded_to_twelve_digits():
    """GRID points from 1 to 10,000: the first 1, the last 10,000 (1 × e^(399 × ln(10⁴) ÷ 399)), each the one before
    times 10^(4 ÷ 399) = 1.02335..., and every point written in 12 significant digits reads back as itself."""
    grid = decodetime.log_grid(1.0, 1e4)
    assert len(grid) == decodetime.GRID == 400
    assert grid[0] == 1.0 and grid[-1] == 1e4
    step = 10 ** (4 / 399)
    assert all(abs(b / a - step) < 1e-10 for a, b in zip(grid[:-1], grid[1:], strict=True))
    assert all(float(f"{x:.12g}") == x for x in grid)
    assert grid[200] == float(f"{10 ** (4 * 200 / 399):.12g}")


# Seven models of the course's shapes in three weight types, their steps made by hand from B = 50 GB/s, f = 0.08 ms
# per block and one c per type: Q8_0 25 ps, F16 60 ps, F32 10 ps. Q8_0 and F16 wait on their arithmetic (f16 reads
# 269.1 MB in 5.38 ms against 134.5 M × 60 ps = 8.07 ms), F32 on its weights (538.1 MB in 10.76 ms against 1.35 ms),
# so F32's c is hidden: only the most it could be shows, 4 bytes per parameter ÷ 50 GB/s = 80 ps.
TYPED = decodetime.Terms(gbs=50.0, arith=(("Q8_0", 25.0), ("F16", 60.0), ("F32", 10.0)), fixed_ms_per_block=0.08,
                         fitted=())
TYPED_SHAPES = [("q8_0", "Q8_0", 143.0, 134.5, 30), ("medium-q8_0", "Q8_0", 224.1, 210.8, 16),
                ("large-q8_0", "Q8_0", 985.7, 927.5, 18), ("f16", "F16", 269.0, 134.5, 30),
                ("medium-f16", "F16", 421.6, 210.8, 16), ("f32", "F32", 538.0, 134.5, 30),
                ("medium-f32", "F32", 843.2, 210.8, 16)]


def typed_widths(terms: decodetime.Terms = TYPED, extra: tuple = ()) -> list[decodetime.Width]:
    out = []
    for name, kind, mb, mparams, blocks in (*TYPED_SHAPES, *extra):
        step = decodetime.predict(terms, name, mb * MB, mparams * 1e6, blocks, kind).step_ms
        out.append(decodetime.Width(name, mb * MB, mparams * 1e6, kind, {1: step}, blocks))
    return out


def test_one_c_per_weight_type_comes_back_from_its_steps():
    """B within the grid's step (it is sought between grid points, so much closer here), f and each seen type's c
    back, F32's hidden (0, at most 80 ps), and every model predicted by the others within 1%."""
    widths = typed_widths()
    terms = decodetime.fit(widths)
    assert terms.types == ("Q8_0", "F16", "F32")
    assert terms.gbs == pytest.approx(50.0, rel=0.023)
    assert terms.fixed_ms_per_block == pytest.approx(0.08, rel=0.01)
    assert terms.c("Q8_0") == pytest.approx(25.0, rel=0.01) and terms.c("F16") == pytest.approx(60.0, rel=0.01)
    assert terms.hidden("F32") and decodetime.hidden_below(terms, widths) == {"F32": pytest.approx(80.0, rel=0.01)}
    held = decodetime.held_out(widths)
    for w in widths:
        p = held[w.name]
        assert p is not None and abs(decodetime.error(p, w.step_ms[1])) < 0.01, (w.name, p)
    assert decodetime.verdicts(widths, terms, decodetime.leave_one_out(widths)) == {
        "q8_0": decodetime.COMPUTE, "medium-q8_0": decodetime.COMPUTE, "large-q8_0": decodetime.COMPUTE,
        "f16": decodetime.COMPUTE, "medium-f16": decodetime.COMPUTE, "f32": decodetime.MEMORY,
        "medium-f32": decodetime.MEMORY}


def test_one_c_for_every_type_would_miss_f16():
    """The same steps with every model of one type: one c cannot hold F16's 60 ps beside Q8_0's 25, and the f16
    models left out miss by more than the tolerance."""
    widths = [decodetime.Width(w.name, w.weight_bytes, w.n_params, "x", w.step_ms, w.n_layer) for w in typed_widths()]
    held = decodetime.held_out(widths)
    worst = max(abs(decodetime.error(p, w.step_ms[1])) for w in widths if (p := held[w.name]) is not None)
    assert worst > decodetime.TOLERANCE


def test_a_model_alone_in_its_weight_type_is_not_held_out():
    """A Q4_1 model beside them: its c comes from its own step alone, so it is not predicted, and says why; it
    still takes part in every other model's fit."""
    terms = decodetime.Terms(50.0, (*TYPED.arith, ("Q4_1", 20.0)), 0.08, ())
    widths = typed_widths(terms, (("q4_1", "Q4_1", 76.0, 134.5, 30),))
    assert decodetime.not_held_out(widths) == {"q4_1": decodetime.ALONE}
    fits = decodetime.leave_one_out(widths)
    assert fits["q4_1"] is None and decodetime.held_out(widths, fits)["q4_1"] is None
    other = fits["f16"]
    assert other is not None and "q4_1" in other.fitted and other.c("Q4_1") == pytest.approx(20.0, rel=0.01)


def test_each_types_crossover_flips_its_verdict_where_c_passes_w_over_n_b():
    """f16 stores 2 bytes per parameter; at 50 GB/s they take 40 ps to read. F16's c at 39 ps: crossover 1.95, f16
    waits on memory; at 41 ps: 2.05, on the arithmetic. Q8_0's verdict does not move with F16's c."""
    f16, q8 = typed_widths()[3], typed_widths()[0]
    for c, verdict in ((39.0, decodetime.MEMORY), (41.0, decodetime.COMPUTE)):
        terms = decodetime.Terms(50.0, (("Q8_0", 25.0), ("F16", c)), 0.08, ())
        assert decodetime.crossover(terms, "F16") == pytest.approx(c * 0.05)
        assert decodetime.predict_width(terms, f16).verdict == verdict
        assert decodetime.predict_width(terms, q8).verdict == decodetime.COMPUTE
        assert (f16.weight_bytes / f16.n_params > decodetime.crossover(terms, "F16")) == (verdict == decodetime.MEMORY)
    assert decodetime.bandwidth_to_cross(2.0, TYPED, "F16") == pytest.approx(2.0 / 60e-3)
    assert decodetime.bandwidth_to_cross(4.0, decodetime.Terms(50.0, (("F32", 0.0),), 0.0, ()), "F32") == math.inf
    with pytest.raises(KeyError, match="^'no arithmetic cost c for Q4_1: the terms were fitted on "):
        TYPED.c("Q4_1")


# --- the module's small parts, each by hand -----------------------------------------------------------

def test_the_records_are_frozen_and_a_width_has_one_block_unless_told():
    import dataclasses

    w = decodetime.Width("a", 1e6, 1e6, "Q8_0", {1: 1.0})
    t = decodetime.Terms(10.0, (("Q8_0", 1.0),), 0.1, ("a",))
    for record, name in ((w, "name"), (t, "gbs"), (decodetime.Line(1.0, 2.0), "slope_ms"),
                         (decodetime.predict_width(t, w), "name")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, None)
    assert w.n_layer == 1


def test_the_grid_runs_from_1_gbs_to_10_tbs_and_its_ends_are_exact():
    grid = decodetime.log_grid(*decodetime.B_RANGE_GBS)
    assert (grid[0], grid[-1], len(grid)) == (1.0, 1e4, decodetime.GRID)
    # Steps of (10⁴)^(1/399) = 1.0233: 2.3% each.
    assert grid[1] / grid[0] == pytest.approx(1e4 ** (1 / 399), rel=1e-11)


def test_a_types_c_its_rate_and_the_bandwidth_to_cross_by_hand():
    t = decodetime.Terms(50.0, (("Q4_1", 0.5), ("F16", 40.0), ("ALL_F32", 0.0)), 0.08, ())
    assert t.types == ("Q4_1", "F16", "ALL_F32")
    # 2 FLOPs in 0.5 ps: 4,000 GFLOP/s; in 40 ps: 50; a hidden c (0) has no rate of its own.
    assert t.arith_gflops("Q4_1") == pytest.approx(4000.0) and t.arith_gflops("F16") == pytest.approx(50.0)
    assert t.arith_gflops("ALL_F32") == math.inf
    # 2 bytes per parameter read in 0.5 ps: 4,000 GB/s; in 40 ps: 50 GB/s; hidden: never.
    assert decodetime.bandwidth_to_cross(2.0, t, "Q4_1") == pytest.approx(4000.0)
    assert decodetime.bandwidth_to_cross(2.0, t, "F16") == pytest.approx(50.0)
    assert decodetime.bandwidth_to_cross(2.0, t, "ALL_F32") == math.inf
    with pytest.raises(KeyError, match="no arithmetic cost c for Q8_0: the terms were fitted on Q4_1, F16, ALL_F32"):
        t.c("Q8_0")


def test_hidden_below_is_only_for_a_hidden_type_with_models():
    """ALL_F32 hidden with one model of 4 bytes per parameter at B = 50 GB/s: 4 ÷ 50 GB/s = 80 ps at most. F16's c is
    hidden too but no model has it: nothing to say."""
    t = decodetime.Terms(50.0, (("Q8_0", 20.0), ("F16", 0.0), ("ALL_F32", 0.0)), 0.08, ())
    widths = [decodetime.Width("f32", 400e6, 100e6, "ALL_F32", {1: 9.0}), decodetime.Width("q8", 106e6, 100e6, "Q8_0", {1: 3.0})]
    assert decodetime.hidden_below(t, widths) == {"ALL_F32": pytest.approx(80.0)}


def test_why_a_model_is_not_held_out_in_words():
    widths = [decodetime.Width(n, 1e8, 1e8, k, {1: 1.0}) for n, k in (("a", "Q8_0"), ("b", "Q8_0"), ("c", "F16"))]
    assert decodetime.not_held_out(widths) == {"a": "fewer than 3 other models", "b": "fewer than 3 other models",
                                               "c": "alone in its weight type"}
    assert decodetime.ALONE == "alone in its weight type"


def test_the_errors_say_what_is_missing():
    with pytest.raises(ValueError, match="^no step time at P = 1 for a, b$"):
        decodetime.fit([decodetime.Width(n, 1e8, 1e8, "Q8_0", {2: 1.0}) for n in ("a", "b")])
    with pytest.raises(ValueError, match="^the terms need at least 3 models; 2 measured$"):
        decodetime.fit([decodetime.Width(n, 1e8, 1e8, "Q8_0", {1: 1.0}) for n in ("a", "b")])
    with pytest.raises(ValueError, match="^w: no step time at P = 2, 4$"):
        decodetime.step_line(decodetime.Width("w", 1e8, 1e8, "Q8_0", {1: 1.0}), (2, 4))
    with pytest.raises(ValueError, match="^a line needs at least two distinct x values$"):
        decodetime.least_squares([1.0, 1.0], [2.0, 3.0])
    with pytest.raises(ValueError):
        decodetime.least_squares([1.0, 2.0], [2.0])


def test_the_least_squares_line_off_the_origin_by_hand():
    """Through (2, 10), (4, 14) and (6, 19): x̄ = 4, ȳ = 43 ÷ 3; slope = ((−2)(10 − 43/3) + 0 + 2(19 − 43/3)) ÷ 8 =
    2 × 9 ÷ 8 = 2.25; intercept 43/3 − 2.25 × 4 = 5.3333."""
    a, b = decodetime.least_squares([2.0, 4.0, 6.0], [10.0, 14.0, 19.0])
    assert b == pytest.approx(2.25) and a == pytest.approx(43 / 3 - 9.0)


def test_f_and_c_come_back_where_the_blocks_grow_with_the_parameters():
    # f = 0.1 ms per block and c = 25 ps per parameter, weights so small that every step waits on its arithmetic:
    #   s: 1 MB, 100 M parameters, 20 blocks: 100e6 × 25e-12 s = 2.5 ms + 20 × 0.1 = 2 ms -> 4.5 ms (read at 1 GB/s: 1 ms)
    #   m: 2 MB, 200 M, 41 blocks: 5 ms + 4.1 ms -> 9.1 ms (read 2 ms)
    #   l: 4 MB, 400 M, 80 blocks: 10 ms + 8 ms -> 18 ms (read 4 ms)
    # Blocks per million parameters are 0.2, 0.205 and 0.2: f and c nearly trade one for the other, so f fitted with
    # c fixed, then c with f fixed, creeps; f fitted with each c following it lands on both at once. Every model
    # waits on its arithmetic at every B of the grid, so the error is 0 from its first B on: B = 1 GB/s.
    widths = [decodetime.Width("s", 1 * MB, 100e6, "Q8_0", {1: 4.5}, 20),
              decodetime.Width("m", 2 * MB, 200e6, "Q8_0", {1: 9.1}, 41),
              decodetime.Width("l", 4 * MB, 400e6, "Q8_0", {1: 18.0}, 80)]
    terms = decodetime.fit(widths)
    assert terms.gbs == 1.0
    assert terms.fixed_ms_per_block == pytest.approx(0.1, rel=1e-9)
    assert terms.c("Q8_0") == pytest.approx(25.0, rel=1e-9)


def test_no_small_step_of_the_terms_lowers_the_error():
    # Steps off any line (two models of 100 MB, 50 M parameters at 7.7 and 7.0 ms): the fit is the least of
    # Σ (predicted ÷ measured − 1)², predicted = blocks × (f + g × W ÷ params) + max(W ÷ B, params × c). Here g lowers the sum
    # (0.00483 without it, 0.00452 with it) and f goes to its bound, 0. For w0 at the fitted terms (B ≈ 18.26 GB/s,
    # g ≈ 0.046 ms per byte per parameter, c ≈ 56.6 ps): 20 × 0.046 × 2 + max(100 MB ÷ 18.26 GB/s = 5.48 ms,
    # 50e6 × 56.6 ps = 2.83 ms) = 7.32 ms, 5% under 7.7. Moving B, g or c by 0.1% either way, alone or together, or f
    # off its bound, gives no smaller sum.
    widths = [decodetime.Width("w0", 100 * MB, 50e6, "Q8_0", {1: 7.7}, 20),
              decodetime.Width("w1", 400 * MB, 400e6, "Q8_0", {1: 23.1}, 10),
              decodetime.Width("w2", 100 * MB, 50e6, "Q8_0", {1: 7.0}, 20),
              decodetime.Width("w3", 424 * MB, 400e6, "Q8_0", {1: 24.684}, 30)]
    terms = decodetime.fit(widths)
    assert terms.gbs == pytest.approx(18.26, rel=1e-3) and terms.fixed_ms_per_block == 0.0
    assert terms.fixed_ms_per_bpp == pytest.approx(0.046, rel=1e-2) and terms.c("Q8_0") == pytest.approx(56.6, rel=1e-3)

    def error(gbs: float, f: float, g: float, c: float) -> float:
        t = decodetime.Terms(gbs, (("Q8_0", c),), f, (), g)
        return sum((decodetime.predict_width(t, w).step_ms / w.step_ms[1] - 1) ** 2 for w in widths)

    least = error(terms.gbs, 0.0, terms.fixed_ms_per_bpp, terms.c("Q8_0"))
    for b, g, c in itertools.product((0.999, 1.0, 1.001), repeat=3):
        for f in (0.0, 1e-4):
            assert error(terms.gbs * b, f, terms.fixed_ms_per_bpp * g, terms.c("Q8_0") * c) >= least * (1 - 1e-9)


def test_the_grid_between_other_ends():
    # From 10 to 1,000 GB/s: steps of 100^(1/399); the middle point (k = 199.5) would be 100; k = 199 is
    # 10 × 100^(199/399) = 99.42457296 (rounded to 12 digits).
    grid = decodetime.log_grid(10.0, 1000.0)
    assert (grid[0], grid[-1]) == (10.0, 1000.0) and grid[199] == pytest.approx(99.4245729643, rel=1e-11)


def test_the_crossovers_standard_error_from_two_fits():
    # Crossovers B × c × 10⁻³: 10 × 10 = 0.1 and 10 × 30 = 0.3 bytes per parameter; mean 0.2;
    # u² = (2 − 1) ÷ 2 × (0.1² + 0.1²) = 0.01, u = 0.1. One fit alone gives no u.
    fits: dict[str, decodetime.Terms | None] = {"a": decodetime.Terms(10.0, (("Q8_0", 10.0),), 0.0, ()),
                                                "b": decodetime.Terms(10.0, (("Q8_0", 30.0),), 0.0, ())}
    assert decodetime.crossover_u(fits, "Q8_0") == pytest.approx(0.1, rel=1e-12)
    assert decodetime.crossover_u({"a": fits["a"], "b": None}, "Q8_0") is None


def test_the_band_and_the_scatter_hold_their_ends():
    # B = 100 GB/s, c = 10 ps: the crossover is 100 × 10 × 10⁻³ = 1 byte per parameter; with no leave-one-out fit the
    # band is [1, 1], and a model of exactly 1 byte per parameter lies within it.
    terms = decodetime.Terms(100.0, (("Q8_0", 10.0),), 0.0, ())
    assert decodetime.within_band(decodetime.Width("x", 1e8, 1e8, "Q8_0", {1: 1.0}), terms, {})
    # c = 15 ps: 100 MB read at 100 GB/s is 1 ms, 100 M parameters × 15 ps = 1.5 ms; they differ by 0.5 ms, exactly
    # the scatter of a model whose 5 ms steps spread 10%: too close to call.
    close = decodetime.Terms(100.0, (("Q8_0", 15.0),), 0.0, ())
    assert decodetime.too_close(decodetime.Width("w", 1e8, 1e8, "Q8_0", {1: 5.0}, 1, 0.1), close)
    assert not decodetime.too_close(decodetime.Width("w", 1e8, 1e8, "Q8_0", {1: 5.0}, 1, 0.09), close)


def test_a_block_that_costs_more_for_wider_weights():
    """Terms with g: f = 0.05 ms per block and g = 0.04 ms more per block for each byte per parameter. By hand, a model
    of 30 blocks at 2 bytes per parameter pays 30 × (0.05 + 0.04 × 2) = 3.9 ms of fixed cost, one of 16 blocks at 4
    bytes 16 × (0.05 + 0.16) = 3.36 ms."""
    t = decodetime.Terms(50.0, (("F16", 60.0),), 0.05, (), 0.04)
    assert t.per_block_ms(2.0) == pytest.approx(0.13) and t.per_block_ms(4.0) == pytest.approx(0.21)
    p = decodetime.predict(t, "f16", 269e6, 134.5e6, 30, "F16")
    # read 269 MB at 50 GB/s = 5.38 ms, arithmetic 134.5 M × 60 ps = 8.07 ms: 3.9 + 8.07
    assert p.fixed_ms == pytest.approx(3.9) and p.step_ms == pytest.approx(11.97)
    assert decodetime.predict(t, "m", 843.2e6, 210.8e6, 16, "F16").fixed_ms == pytest.approx(3.36)


# The course's shapes in four weight types, two shapes each (30 blocks of 134.5 M parameters and 16 of 210.8 M), their
# steps made by hand from B = 50 GB/s, f = 0.03 ms per block, g = 0.045 ms per block and byte per parameter, and
# c of 60, 75, 100 and 10 ps: each type asks for its own fixed cost per block (f + g × W ÷ params), as the course
# machine's steps did, and one f for every type misses them in pairs of opposite sign.
GROWN = decodetime.Terms(50.0, (("Q4_1", 60.0), ("Q8_0", 75.0), ("F16", 100.0), ("F32", 10.0)), 0.03, (), 0.045)
GROWN_SHAPES = [("q4_1", "Q4_1", 96.6, 134.5, 30), ("medium-q4_1", "Q4_1", 131.9, 210.8, 16),
                ("q8_0", "Q8_0", 143.0, 134.5, 30), ("medium-q8_0", "Q8_0", 224.1, 210.8, 16),
                ("f16", "F16", 269.1, 134.5, 30), ("medium-f16", "F16", 421.7, 210.8, 16),
                ("f32", "F32", 538.1, 134.5, 30), ("medium-f32", "F32", 843.2, 210.8, 16)]


def test_g_comes_back_where_each_type_asks_for_its_own_fixed_cost():
    widths = typed_widths(GROWN, tuple(GROWN_SHAPES))[len(TYPED_SHAPES):]
    terms = decodetime.fit(widths)
    assert terms.fixed_ms_per_bpp == pytest.approx(0.045, rel=0.01)
    assert terms.fixed_ms_per_block == pytest.approx(0.03, rel=0.03)
    assert terms.c("Q4_1") == pytest.approx(60.0, rel=0.01) and terms.c("F16") == pytest.approx(100.0, rel=0.01)
    held = decodetime.held_out(widths)
    for w in widths:
        p = held[w.name]
        assert p is not None and abs(decodetime.error(p, w.step_ms[1])) < 0.01, (w.name, p)
    # The naive reference: with g held at 0 the best fit misses the models left out in pairs by type, opposite in sign
    # for the narrowest and the widest weights.
    plain, _ = decodetime.fit_grid(widths, grows=False)
    miss = {w.name: decodetime.error(decodetime.predict_width(plain, w), w.step_ms[1]) for w in widths}
    assert miss["q4_1"] * miss["medium-q4_1"] < 0 and miss["f32"] * miss["medium-f32"] < 0
    assert miss["q4_1"] * miss["f32"] < 0
    assert max(abs(e) for e in miss.values()) > 0.02
