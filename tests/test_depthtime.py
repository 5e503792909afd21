"""Decode time at context depth (bytesup.course.depthtime) on hand arithmetic."""

from __future__ import annotations

import pytest

from bytesup.course import depthtime


def test_a_line_through_three_points_predicts_a_fourth():
    # 10, 11 and 12 ms at depths 0, 100 and 200: t(0) = 10 ms, s = 1 ms per 100 positions = 0.01 ms
    line = depthtime.fit_line([0, 100, 200, 400], [10.0, 11.0, 12.0, 14.5], fit_until=200)
    assert (line.t0_ms, line.slope_ms) == (pytest.approx(10.0), pytest.approx(0.01))
    assert line.fit_until == 200 and line.fitted == (0, 100, 200)
    # 10 + 400 × 0.01 = 14 ms at depth 400, which was not fitted; measured 14.5 ms
    assert line.ms_at(400) == pytest.approx(14.0)
    points = depthtime.predictions(line, [0, 100, 200, 400], [10.0, 11.0, 12.0, 14.5])
    deep = points[-1]
    assert (deep.depth, deep.measured_ms, deep.predicted_ms, deep.fitted) == (400, 14.5, pytest.approx(14.0), False)
    # 1000 ÷ 14 = 71.43 tokens/s predicted, 1000 ÷ 14.5 = 68.97 measured: 14.5 ÷ 14 − 1 = +3.57%
    assert deep.predicted_tokens_per_s == pytest.approx(1000 / 14)
    assert deep.measured_tokens_per_s == pytest.approx(1000 / 14.5)
    assert deep.error == pytest.approx(14.5 / 14 - 1)
    assert [p.role for p in points] == ["fitted", "fitted", "fitted", "held out"]
    assert depthtime.held_out(points) == [deep]


def test_a_point_off_the_line():
    # 10, 12, 11 ms at 0, 100, 200: x̄ = 100, ȳ = 11, Σ(x − x̄)(y − ȳ) = (−100)(−1) + 0 + 100 × 0 = 100,
    # Σ(x − x̄)² = 20,000: s = 0.005 ms, t(0) = 11 − 0.005 × 100 = 10.5 ms
    line = depthtime.fit_line([0, 100, 200], [10.0, 12.0, 11.0], fit_until=1000)
    assert (line.t0_ms, line.slope_ms) == (pytest.approx(10.5), pytest.approx(0.005))
    middle = depthtime.predictions(line, [100], [12.0])[0]
    # 11 ms predicted, 12 measured: 12 ÷ 11 − 1 = +9.09%; a depth at fit_until or below is fitted
    assert middle.predicted_ms == pytest.approx(11.0) and middle.error == pytest.approx(12 / 11 - 1)
    assert middle.fitted and middle.role == depthtime.FITTED


def test_only_the_depths_up_to_fit_until_are_fitted():
    # a far point at depth 300 would pull the line; it lies beyond fit_until = 200 and is not fitted
    line = depthtime.fit_line([0, 100, 200, 300], [10.0, 11.0, 12.0, 100.0], fit_until=200)
    assert (line.t0_ms, line.slope_ms) == (pytest.approx(10.0), pytest.approx(0.01)) and line.fitted == (0, 100, 200)
    assert depthtime.default_fit_until(2048) == 1024 and depthtime.default_fit_until(2047) == 1023
    default = depthtime.fit_line([0, 256, 512, 1024, 1536, 1904], [12.0, 14.0, 16.0, 20.0, 30.0, 40.0], depthtime.default_fit_until(2048))
    assert default.fitted == (0, 256, 512, 1024)


def test_a_line_needs_two_distinct_depths():
    with pytest.raises(ValueError, match="at least two distinct depths up to 100; 0 measured there"):
        depthtime.fit_line([0, 500], [10.0, 15.0], fit_until=100)
    with pytest.raises(ValueError, match="at least two distinct depths up to 100; 50, 50 measured there"):
        depthtime.fit_line([50, 50], [10.0, 11.0], fit_until=100)
    with pytest.raises(ValueError, match="up to 10; none measured there"):
        depthtime.fit_line([100, 200], [10.0, 11.0], fit_until=10)
    with pytest.raises(ValueError, match="^3 depths but 2 times$"):
        depthtime.fit_line([0, 1, 2], [10.0, 11.0], fit_until=10)
    with pytest.raises(ValueError):  # every depth needs its time
        depthtime.predictions(depthtime.Line(10.0, 0.01, 100, (0, 100)), [0, 100, 200], [10.0, 11.0])
    # two distinct depths are enough
    assert depthtime.fit_line([0, 100], [10.0, 11.0], fit_until=100).slope_ms == pytest.approx(0.01)


def test_the_tolerance_is_fifteen_percent_either_way():
    assert depthtime.TOLERANCE == 0.15
    # predicted 10 ms (100 tokens/s) against measured 11.6 ms: 11.6 ÷ 10 − 1 = +16%, outside; 11.4 ms: +14%, inside
    assert depthtime.DepthPrediction(1536, 11.6, 10.0, False).error == pytest.approx(0.16)
    assert not depthtime.DepthPrediction(1536, 11.6, 10.0, False).within
    assert depthtime.DepthPrediction(1536, 11.4, 10.0, False).within
    # measured 8.4 ms: 8.4 ÷ 10 − 1 = −16%, outside; 8.6 ms: −14%, inside
    assert not depthtime.DepthPrediction(1536, 8.4, 10.0, False).within
    assert depthtime.DepthPrediction(1536, 8.6, 10.0, False).within


def test_a_line_below_zero_predicts_no_speed():
    # a line through scattered steps can give a step of 0 ms or less: no speed, no error, not within
    for predicted_ms in (0.0, -3.0):
        p = depthtime.DepthPrediction(0, 5.0, predicted_ms, True)
        assert p.predicted_tokens_per_s is None and p.error is None and not p.within
    # any step above 0 ms is a speed, a short one too: 0.5 ms is 2,000 tokens/s
    assert depthtime.DepthPrediction(0, 0.5, 0.5, True).predicted_tokens_per_s == 2000.0
    near = depthtime.DepthPrediction(1536, 10.0, 10.5, False)
    far = depthtime.DepthPrediction(1904, 10.0, 12.0, False)
    below = depthtime.DepthPrediction(0, 5.0, -1.0, True)
    # the worst is the furthest from measured, and a point without a speed is worse than any
    assert depthtime.worst([near, far]) is far and depthtime.worst([far, near]) is far
    assert depthtime.worst([near, below, far]) is below
    assert depthtime.worst([]) is None


def test_attentions_flops_per_position():
    # 4 × layers × heads × head width: SmolLM2-135M 4 × 30 × 9 × 64, the specimen 4 × 32 × 32 × 128
    assert depthtime.attention_flops_per_position(30, 9, 64) == 69_120
    assert depthtime.attention_flops_per_position(32, 32, 128) == 524_288


def test_the_slope_split_into_the_kv_read_and_the_rest():
    # s = 10 µs; 20,000 bytes of K and V at 20 GB/s = 1 µs, a tenth of s; the rest 9 µs does 69,120 FLOPs:
    # 69,120 ÷ 9e-6 s = 7.68 GFLOP/s
    sp = depthtime.Split(slope_ms=0.01, kv_bytes_per_token=20_000, bandwidth_gbs=20.0, flops_per_position=69_120)
    assert sp.kv_read_ms == pytest.approx(0.001) and sp.rest_ms == pytest.approx(0.009)
    assert sp.kv_share == pytest.approx(0.1)
    assert sp.rest_gflops == pytest.approx(7.68)
    assert sp.mostly == depthtime.ATTENTION_WORK == "attention's work"


def test_a_slope_the_kv_read_takes_whole():
    # 1,000,000 bytes at 1 GB/s = 1 ms; a slope of 2 ms is half of it, a tie: the KV read is named
    half = depthtime.Split(slope_ms=2.0, kv_bytes_per_token=1e6, bandwidth_gbs=1.0, flops_per_position=1000)
    assert half.kv_read_ms == 1.0 and half.rest_ms == 1.0 and half.mostly == depthtime.KV_READ == "the KV read"
    # 1000 FLOPs in 1 ms: 1e6 FLOP/s = 0.001 GFLOP/s
    assert half.rest_gflops == pytest.approx(0.001)
    # the read takes the whole slope (nothing left) or more: no rate
    whole = depthtime.Split(slope_ms=1.0, kv_bytes_per_token=1e6, bandwidth_gbs=1.0, flops_per_position=1000)
    assert whole.rest_ms == 0.0 and whole.rest_gflops is None and whole.kv_share == 1.0 and whole.mostly == depthtime.KV_READ
    assert depthtime.Split(0.5, 1e6, 1.0, 1000).rest_gflops is None


def test_the_published_spark_slope_is_its_kv_read():
    # 1000 ÷ 29.6 − 1000 ÷ 33.2 = 33.784 − 30.120 = 3.663 ms over 1,921 positions: 1.907 µs per position
    s = depthtime.published_slope_ms(33.2, 29.6, 1921)
    assert 1e3 * s == pytest.approx(1.907, abs=5e-4)
    assert s == pytest.approx((1000 / 29.6 - 1000 / 33.2) / 1921)
    # 524,288 bytes ÷ 273 GB/s = 1.920 µs: the KV read is the whole slope, to within 1%
    sp = depthtime.Split(s, 524_288, 273.0, depthtime.attention_flops_per_position(32, 32, 128))
    assert 1e3 * sp.kv_read_ms == pytest.approx(1.920, abs=5e-4)
    assert sp.kv_share == pytest.approx(1.0071, abs=1e-4)
    assert sp.rest_gflops is None and sp.mostly == depthtime.KV_READ


def test_a_prediction_is_shown_by_its_columns():
    from bytesup.store.views import page

    p = depthtime.DepthPrediction(depth=400, measured_ms=14.5, predicted_ms=14.0, fitted=False, spread=0.05)
    heads, rows = page.by_columns(depthtime.DepthPrediction, list(depthtime.DepthPrediction.COLUMNS), [p])
    assert [h for h, _ in heads] == ["depth", "measured median", "predicted", "predicted", "measured",
                                     "predicted ÷ measured − 1", "spread of the prediction", "fitted or held out"]
    # 1000 ÷ 14 = 71.43 predicted against 1000 ÷ 14.5 = 68.97 measured tokens/s: +3.57%, shown in percent.
    assert rows[0][:3] == [400, 14.5, 14.0] and rows[0][6:] == [pytest.approx(5.0), "held out"]
    assert rows[0][3:6] == [pytest.approx(1000 / 14), pytest.approx(1000 / 14.5), pytest.approx(100 * (14.5 / 14 - 1))]
    off = depthtime.DepthPrediction(depth=10, measured_ms=2.0, predicted_ms=-1.0, fitted=True)
    assert page.by_columns(depthtime.DepthPrediction, ["predicted_tokens_per_s", "error"], [off])[1] == [[None, None]]


# --- the knee: t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*) ----------------------------------------------

KNEE_DEPTHS = [0, 250, 500, 750, 1200, 1600]


def knee_steps(knee: float = 1000, s1: float = 0.01, s2: float = 0.03) -> list[float]:
    """10 ms at depth 0, 0.01 ms more per position up to the knee, 0.03 beyond: 10, 12.5, 15, 17.5, then
    20 + 0.03 × 200 = 26 and 20 + 0.03 × 600 = 38 ms at a knee of 1,000."""
    return [10 + s1 * min(d, knee) + s2 * max(0.0, d - knee) for d in KNEE_DEPTHS]


def test_the_knee_is_the_cache_over_the_kv_bytes_per_position():
    # SmolLM2: 30 blocks × 3 KV heads × 64 × 2 (K and V) × 2 bytes (F16) = 23,040 bytes; 32 MiB ÷ that = 1,456.36
    assert depthtime.knee_depth(32 * 1024 * 1024, 30 * 3 * 64 * 2 * 2) == pytest.approx(1456.356, abs=1e-3)
    assert depthtime.knee_depth(None, 23040) is None and depthtime.knee_depth(33554432, None) is None
    assert depthtime.knee_depth(0, 23040) is None and depthtime.knee_depth(33554432, -1) is None


def test_a_knee_between_the_fitted_and_the_held_out_depths_is_fitted_by_hand():
    """Fitted up to half the context, 500, nothing lies past the knee at 1,000, and two depths do: the first, 1,200,
    is fitted too. t(0) and s₁ come from 0, 250, 500 and 750 (10 ms, 10 µs exactly), s₂ = (26 − 10 − 0.01 × 1,000)
    ÷ 200 = 0.03 ms, and 1,600 is predicted 20 + 0.03 × 600 = 38 ms: exactly what was measured."""
    ms = knee_steps()
    line = depthtime.fit_knee(KNEE_DEPTHS, ms, 500, 1000.0)
    assert (line.t0_ms, line.slope_ms, line.slope2_ms) == (pytest.approx(10), pytest.approx(0.01), pytest.approx(0.03))
    assert (line.fit_until, line.below, line.beyond) == (1200, (0, 250, 500, 750), (1200,))
    points = depthtime.predictions(line, KNEE_DEPTHS, ms)
    assert [p.depth for p in depthtime.held_out(points)] == [1600]
    assert points[-1].predicted_ms == pytest.approx(38.0) and points[-1].error == pytest.approx(0, abs=1e-9)
    # The line through the same shallow half predicts 10 + 0.01 × 1,600 = 26 ms: 38 ÷ 26 − 1 = +46.2% too fast.
    plain = depthtime.predictions(depthtime.fit_line(KNEE_DEPTHS, ms, 500), KNEE_DEPTHS, ms)
    assert plain[-1].error == pytest.approx(38 / 26 - 1) and not plain[-1].within


def test_without_a_knee_the_model_is_the_line():
    """No cache size, or d* beyond the deepest depth: fit_knee is fit_line on the same depths."""
    ms = [10 + 0.01 * d + (0.3 if d == 250 else 0) for d in KNEE_DEPTHS]
    line = depthtime.fit_line(KNEE_DEPTHS, ms, 500)
    for knee in (None, 1600.0, 11833.0):
        assert depthtime.fit_knee(KNEE_DEPTHS, ms, 500, knee) == line
    assert line.knee is None and line.slope2_ms is None and line.ms_at(1600) == pytest.approx(line.t0_ms + 1600 * line.slope_ms)
    # a knee past every fitted depth but below one held-out depth, with only that one past it: s₂ unknown
    one = depthtime.fit_knee(KNEE_DEPTHS, ms, 500, 1400.0)
    assert (one.fit_until, one.beyond, one.slope2_ms) == (500, (), None)
    assert one.ms_at(1200) == pytest.approx(one.t0_ms + 1200 * one.slope_ms) and one.ms_at(1600) is None
    last = depthtime.predictions(one, KNEE_DEPTHS, ms)[-1]
    assert (last.predicted_ms, last.predicted_tokens_per_s, last.error, last.within, last.can_tell) == (
        None, None, None, False, False)
    # the worst of the predicted ones only: 17.5 ÷ 17.6 − 1 = −0.57% at 750, against 22 ÷ 22.1 − 1 = −0.45% at 1,200
    assert depthtime.worst(depthtime.held_out(depthtime.predictions(one, KNEE_DEPTHS, ms))).depth == 750


def test_a_knee_needs_two_depths_below_it():
    with pytest.raises(ValueError, match="knee at depth 200 needs at least two distinct depths there; 0 measured"):
        depthtime.fit_knee(KNEE_DEPTHS, knee_steps(), 500, 200.0)


def test_a_prediction_spread_by_hand():
    """Depths 0 and 100 fitted (10 and 11 ms), 200 held out (12 ms). Depth 0's interquartile range, 0.2 ms, moves the
    line to (0, 10.2) – (100, 11): 11.8 ms at 200, 0.2 ms off; depth 100 has none. √(0.2²) ÷ 12 + 200's own 0.1 ÷ 12
    = 0.025. Fitted depths have no spread."""
    line = depthtime.fit_line([0, 100, 200], [10.0, 11.0, 12.0], 100)
    assert depthtime.prediction_spreads(line, [0, 100, 200], [10.0, 11.0, 12.0], [0.2, 0.0, 0.1]) == [
        None, None, pytest.approx(0.025)]
    # two fitted depths each moving it: the root of the sum of squares. Depth 100 by 0.1 ms: the line through (0, 10)
    # and (100, 11.1) gives 12.2 at 200, 0.2 off; with depth 0's 0.2: √(0.04 + 0.04) ÷ 12 + 0.1 ÷ 12.
    assert depthtime.prediction_spreads(line, [0, 100, 200], [10.0, 11.0, 12.0], [0.2, 0.1, 0.1])[2] == pytest.approx(
        (0.08 ** 0.5 + 0.1) / 12)


def test_a_short_lever_past_the_knee_multiplies_the_scatter():
    """The knee at 1,150, 50 positions before the one fitted depth past it, 1,200 (23 ms): moving that depth's median
    by its 1 ms interquartile range (4.3% of it) moves s₂ by 1 ÷ 50 = 0.02 ms and the prediction at 1,600, 10 + 11.5 +
    0.03 × 450 = 35 ms, by 0.02 × 450 = 9 ms, 9× the move: a spread of 9 ÷ 35 = 25.7%, over ±15%, so the run cannot
    tell."""
    ms = knee_steps(1150)
    iqr = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    line = depthtime.fit_knee(KNEE_DEPTHS, ms, 500, 1150.0)
    assert line.ms_at(1600) == pytest.approx(35.0)
    spread = depthtime.prediction_spreads(line, KNEE_DEPTHS, ms, iqr)[-1]
    assert spread == pytest.approx(9 / 35)
    assert spread > depthtime.TOLERANCE and not depthtime.predictions(line, KNEE_DEPTHS, ms, iqr)[-1].can_tell


# --- whether the knee shows: the fitted depths past d* against the line below it -----------------------------------

def test_a_knee_the_fitted_depth_shows_is_used():
    """Steeper past the knee at 1,000 (0.03 ms per position against 0.01): the line through 0–750 gives 1,200 10 +
    12 = 22 ms, measured 26: 26 ÷ 22 − 1 = +18.2%, above it by more than the prediction's spread (0: the samples do not
    scatter). So the knee: s₂ = 0.03 and 1,600 predicted at 38 ms, as measured."""
    ms = knee_steps()
    line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, 1000.0, [0.0] * 6)
    assert test is not None and test.shown and test.above and test.knee == 1000.0
    assert test.below.fitted == (0, 250, 500, 750) and test.slope2_ms == pytest.approx(0.03)
    (past,) = test.past
    assert (past.depth, past.measured_ms, past.predicted_ms) == (1200, 26.0, pytest.approx(22.0))
    assert past.error == pytest.approx(26 / 22 - 1) and past.spread == 0.0
    assert line == depthtime.fit_knee(KNEE_DEPTHS, ms, 500, 1000.0)
    assert line.knee == 1000.0 and line.ms_at(1600) == pytest.approx(38.0)


def test_a_flatter_cost_past_the_knee_leaves_one_line_through_every_fitted_depth():
    """Flatter past the knee (0.005 ms per position from 1,000): 1,200 came at 21 ms against the line's 22 below d*,
    −4.5%, so the model is one line through all five fitted depths. By hand: x̄ = 2,700 ÷ 5 = 540, ȳ = 76 ÷ 5 = 15.2,
    Σ(x − x̄)(y − ȳ) = 2,808 + 783 + 8 + 483 + 3,828 = 7,910, Σ(x − x̄)² = 291,600 + 84,100 + 1,600 + 44,100 + 435,600
    = 857,000: s = 7,910 ÷ 857,000 = 9.23 µs, t(0) = 15.2 − 540 s = 10.216 ms; 1,600 predicted at 24.98 ms against 23
    measured, −7.9%. The knee's s₂, 5 µs, is never used."""
    ms = knee_steps(s2=0.005)
    assert ms[4:] == [pytest.approx(21.0), pytest.approx(23.0)]
    line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, 1000.0, [0.0] * 6)
    assert test is not None and not test.shown and not test.above and test.slope2_ms == pytest.approx(0.005)
    assert test.past[0].error == pytest.approx(21 / 22 - 1)
    s = 7910 / 857000
    assert (line.knee, line.slope2_ms, line.fitted, line.fit_until) == (None, None, (0, 250, 500, 750, 1200), 1200)
    assert (line.t0_ms, line.slope_ms) == (pytest.approx(15.2 - 540 * s), pytest.approx(s))
    deep = depthtime.predictions(line, KNEE_DEPTHS, ms)[-1]
    assert not deep.fitted and deep.predicted_ms == pytest.approx(15.2 + 1060 * s)
    assert deep.error == pytest.approx(23 / (15.2 + 1060 * s) - 1) and round(100 * deep.error, 1) == -7.9


def test_the_run_that_missed_by_thirty_percent():
    """The 2-core machine's run (medians, ms per token): 6.01, 7.17, 8.23, 10.12 at 0–1,024, 11.44 at 1,680, 14.32 at
    1,904, d* = 1,456. The line through 0–1,024 (x̄ = 448, ȳ = 7.8825, s₁ = 2,286.72 ÷ 573,440 = 3.988 µs, t(0) = 6.096
    ms) gives 1,680 12.795 ms: it came −10.6%, faster, and the knee's s₂ would be −2.07 µs, predicting 1,904 +30.5% off.
    One line through the five: x̄ = 694.4, ȳ = 8.594, s = 5,792.992 ÷ 1,787,699.2 = 3.2405 µs, t(0) = 6.3438 ms;
    1,904 at 12.514 ms, +14.4%."""
    depths, ms = [0, 256, 512, 1024, 1680, 1904], [6.01, 7.17, 8.23, 10.12, 11.44, 14.32]
    knee = depthtime.knee_depth(32 * 1024 * 1024, 23040)
    bent = depthtime.fit_knee(depths, ms, 1024, knee)
    assert 1e3 * bent.slope2_ms == pytest.approx(-2.07, abs=5e-3)
    assert ms[-1] / bent.ms_at(1904) - 1 == pytest.approx(0.305, abs=5e-4)
    line, test = depthtime.choose(depths, ms, 1024, knee, [0.0] * 6)
    assert test is not None and not test.shown and test.below.slope_ms == pytest.approx(2286.72 / 573440)
    assert test.past[0].predicted_ms == pytest.approx(7.8825 + (1680 - 448) * 2286.72 / 573440)
    assert round(100 * test.past[0].error, 1) == -10.6
    s = 5792.992 / 1787699.2
    assert (line.knee, line.fitted) == (None, (0, 256, 512, 1024, 1680))
    assert (line.t0_ms, line.slope_ms) == (pytest.approx(8.594 - 694.4 * s), pytest.approx(s))
    assert round(100 * (14.32 / line.ms_at(1904) - 1), 1) == 14.4


@pytest.mark.parametrize("step,shown", [(23.12, True), (23.08, False)])
def test_the_knee_shows_only_above_the_spread_of_its_prediction(step, shown):
    """The line below d* = 1,000 gives 1,200 22 ms exactly (no scatter below); 1,200's own interquartile range is 5% of
    its step, so the prediction's spread is 0.05. At 23.12 ms it came 23.12 ÷ 22 − 1 = +5.09%, above by more than
    that: the knee. At 23.08, +4.91%: within it, one line."""
    ms = knee_steps()[:4] + [step, 38.0]
    line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, 1000.0, [0.0] * 4 + [0.05 * step, 0.0])
    assert test is not None and test.past[0].spread == pytest.approx(0.05)
    assert test.past[0].error == pytest.approx(step / 22 - 1)
    assert test.shown is shown and (line.knee == 1000.0) is shown and test.above is shown


def test_above_the_line_with_no_cost_past_the_knee_is_one_line():
    """A line that falls below d* (−0.01 ms per position: 20, 17.5, 15, 12.5 ms), 1,200 at 9 ms, above its 8 ms: +12.5%,
    and no scatter. Yet s₂ = (9 − 20 + 10) ÷ 200 = −0.005 ms is no cost, so no knee: a negative s₂ never predicts."""
    ms = [20 - 0.01 * d for d in KNEE_DEPTHS[:4]] + [9.0, 10.0]
    line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, 1000.0, [0.0] * 6)
    assert test is not None and test.above and test.slope2_ms == pytest.approx(-0.005) and not test.shown
    assert line.knee is None and line.slope2_ms is None


def test_nothing_to_test_without_a_fitted_depth_past_the_knee():
    """No knee, one past every depth, or a knee with only one depth past it (not fitted, so s₂ unknown): no test."""
    ms = knee_steps()
    for knee in (None, 1600.0, 1400.0):
        line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, knee, [0.0] * 6)
        assert test is None and line == depthtime.fit_knee(KNEE_DEPTHS, ms, 500, knee)


def test_a_line_below_the_knee_that_gives_no_step_cannot_show_it():
    """Steps falling 0.03 ms per position below d* = 1,000 (30, 22.5, 15, 7.5 ms): the line through them gives 1,200
    30 − 36 = −6 ms, no step, so 1,200's 10 ms has no error against it and cannot show the knee, though the bent model's
    s₂ = (10 − 30 + 30) ÷ 200 = 0.05 ms is a cost: one line, and the page says why."""
    from bytesup.store.views.lesson06 import knee_test_note

    ms = [30 - 0.03 * d for d in KNEE_DEPTHS[:4]] + [10.0, 12.0]
    line, test = depthtime.choose(KNEE_DEPTHS, ms, 500, 1000.0, [0.0] * 6)
    assert test is not None and test.slope2_ms == pytest.approx(0.05) and not test.above and not test.shown
    assert test.past[0].predicted_ms == pytest.approx(-6.0) and test.past[0].error is None
    assert line.knee is None and line.fitted == (0, 250, 500, 750, 1200)
    assert knee_test_note(test) == (
        "Against the line through the depths below d* (0, 250, 500, 750), depth 1,200 took 10 ms per token where the "
        "line gives -6 ms (no step at all): a line that gives no step there cannot show the knee, so the model is one "
        "line through every fitted depth.")


def test_a_knee_says_which_depths_lie_below_it_and_needs_a_time_for_each():
    # Knee at 200: depths 300, 400 and 500 all lie past it, none below; 50 twice is one distinct depth.
    with pytest.raises(ValueError, match="^a line up to the knee at depth 200 needs at least two distinct depths there; "
                                         "none measured$"):
        depthtime.fit_knee([300, 400, 500], [10.0, 11.0, 12.0], 500, 200.0)
    with pytest.raises(ValueError, match="; 50, 50 measured$"):
        depthtime.fit_knee([50, 50, 300, 400], [10.0, 10.5, 11.0, 12.0], 500, 200.0)
    with pytest.raises(ValueError, match="^3 depths but 2 times$"):
        depthtime.fit_knee([0, 100, 300], [10.0, 11.0], 500, 200.0)


def test_a_depths_interquartile_range_by_hand():
    # 1, 2, 3, 4, 5 ms (no outlier): inclusive quartiles Q1 = 2 and Q3 = 4, so Q3 − Q1 = 2 ms.
    assert depthtime.interquartile_ms([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0
