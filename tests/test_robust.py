"""The outlier-robust sample rule (bytesup.course.robust) on hand-made samples."""

from __future__ import annotations

import pytest

from bytesup.course import robust


def test_a_stalled_request_in_a_row_of_93s_is_an_outlier():
    r = robust.judge([93.6, 94.5, 93.1, 7.4, 93.9])
    # median 93.6; deviations 0, 0.9, 0.5, 86.2, 0.3: MAD 0.5, × 1.4826 = 0.741, below the floor of 1% of 93.6,
    # so the scale is 0.936; 86.2 > 5 × 0.936 = 4.68
    assert r.median == 93.6
    assert r.scale == pytest.approx(0.936)
    assert r.outliers == (3,) and r.outlier_values == [7.4]
    assert r.kept == [93.6, 94.5, 93.1, 93.9] and (r.low, r.high) == (93.1, 94.5)
    # quartiles of 93.1, 93.6, 93.9, 94.5 (inclusive): 93.475 and 94.05
    assert (r.q1, r.q3) == (pytest.approx(93.475), pytest.approx(94.05))
    assert r.relative_iqr == pytest.approx(0.575 / 93.6)
    assert r.samples == (93.6, 94.5, 93.1, 7.4, 93.9) and r.to_json()["outliers"] == [3]
    assert "7.4 tokens/s (1 of 5" in robust.describe_outliers(r, "tokens/s")


def test_the_distance_is_stated_and_met_exactly():
    # median 100, MAD 2 (deviations 0, 2, 2, 2, x): scale 2.9652; 5 scales = 14.826
    inside = robust.judge([100.0, 98.0, 102.0, 98.0, 100.0 + 14.8])
    outside = robust.judge([100.0, 98.0, 102.0, 98.0, 100.0 + 14.9])
    assert inside.outliers == () and outside.outliers == (4,)


def test_identical_samples_do_not_make_a_small_difference_an_outlier():
    r = robust.judge([50.0, 50.0, 50.0, 50.0, 51.0])  # MAD 0: the floor, 1% of 50 = 0.5; 1 < 2.5
    assert r.outliers == () and r.scale == pytest.approx(0.5)
    assert robust.judge([50.0, 50.0, 50.0, 50.0, 53.0]).outliers == (4,)  # 3 > 2.5


def test_an_outlier_never_widens_the_spread():
    quiet = robust.judge([10.0, 10.2, 9.8, 10.1, 9.9])
    loud = robust.judge([10.0, 10.2, 9.8, 10.1, 9.9, 1000.0])
    assert loud.outliers == (5,)
    assert loud.relative_iqr == pytest.approx(quiet.relative_iqr * quiet.median / loud.median)
    assert (loud.low, loud.high) == (9.8, 10.2)


def test_few_samples_and_none():
    assert not robust.judge([1.0, 2.0]).enough and robust.judge([1.0] * robust.MIN_SAMPLES).enough
    # below five samples nothing is flagged: 157.9 beside 148.6 and 148.7 would be, among five
    assert robust.judge([148.6, 148.7, 157.9]).outliers == ()
    assert robust.judge([148.6, 148.7, 157.9, 148.7, 148.6]).outliers == (2,)
    one = robust.judge([3.0])
    assert (one.median, one.q1, one.q3, one.relative_iqr, one.outliers) == (3.0, 3.0, 3.0, 0.0, ())
    with pytest.raises(ValueError):
        robust.judge([])


def test_the_record_and_the_words():
    r = robust.judge([93.6, 94.5, 93.1, 7.4, 93.9])
    j = r.to_json()
    assert j["samples"] == [93.6, 94.5, 93.1, 7.4, 93.9] and j["outlier_mads"] == 5.0
    assert j["relative_iqr"] == pytest.approx(0.575 / 93.6)
    assert robust.describe_outliers(r, "tokens/s") == (
        "7.4 tokens/s (1 of 5, beyond 5 scaled MADs of the median 93.6; kept in the JSON, not used for the spread)")
    assert robust.describe_outliers(r).startswith("7.4 (1 of 5,")
    two = robust.judge([93.6, 94.5, 93.1, 7.4, 93.9, 8.1, 93.7, 93.8])
    assert robust.describe_outliers(two).startswith("7.4, 8.1 (2 of 8,")
    assert robust.describe_outliers(robust.judge([1.0] * 5)) == ""
    # a median of 0 has no relative spread
    assert robust.judge([0.0, 0.0, 0.0, 1.0, -1.0]).relative_iqr == 0.0


def test_a_sample_exactly_at_the_distance_is_kept():
    # identical samples: the scale is the floor, 1% of 100 = 1; 5 scales = 5: 105 is at the distance, kept
    assert robust.judge([100.0, 100.0, 100.0, 100.0, 105.0]).outliers == ()
    assert robust.judge([100.0, 100.0, 100.0, 100.0, 105.01]).outliers == (4,)
    with pytest.raises(ValueError, match="at least one sample"):
        robust.judge([])


def test_no_scale_no_outliers():
    # median 0 and MAD 0: the scale is 0, and nothing can be judged far from the median
    assert robust.judge([0.0, 0.0, 0.0, 0.0, 1.0]).outliers == ()
