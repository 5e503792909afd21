"""The client-clock arithmetic on hand-made arrival times (no server)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bytesup.course import clientclock as cc


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    values = [7.9, 8.1, 8.0, 12.5, 7.7, 30.2, 8.3]
    assert cc.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_by_hand():
    # Sorted 1, 2, 3, 4: p50 sits halfway between ranks 1 and 2; p90 at rank 2.7.
    assert cc.percentile([4, 1, 3, 2], 50) == 2.5
    assert cc.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert cc.percentile([5.0], 99) == 5.0
    assert math.isnan(cc.percentile([], 50))
    with pytest.raises(ValueError):
        cc.percentile([1.0], 101)


def test_token_times_expand_events_that_bring_several_tokens():
    # The second event brought tokens 2-4 at once (held back mid-character, or a speculative burst).
    assert cc.token_times([(1, 30.0), (4, 38.0), (5, 47.0)]) == [30.0, 38.0, 38.0, 38.0, 47.0]
    with pytest.raises(ValueError):
        cc.token_times([(3, 1.0), (2, 2.0)])


def test_client_times_of_a_hand_made_stream():
    run = cc.client_times([(1, 28.0), (2, 36.0), (3, 44.5), (4, 52.0)], ended_ms=52.4)
    assert run.n == 4 and run.ttft_ms == 28.0
    assert run.itl_ms == [8.0, 8.5, 7.5]
    assert run.in_order and run.separate
    assert cc.predicted_end_to_end(run.ttft_ms, 8.0, run.n) == 52.0
    assert cc.sequential_floor_ms(run.n, min(run.itl_ms)) == 30.0


def test_a_burst_is_in_order_but_not_separate():
    run = cc.client_times([(1, 10.0), (3, 20.0)], ended_ms=21.0)
    assert run.itl_ms == [10.0, 0.0] and run.in_order and not run.separate
    late = cc.client_times([(1, 10.0), (2, 20.0)], ended_ms=15.0)
    assert not late.in_order


def test_summary_pools_the_gaps_of_every_repeat():
    runs = [cc.client_times([(1, 20.0), (2, 28.0), (3, 36.0)], 36.5),
            cc.client_times([(1, 24.0), (2, 34.0), (3, 43.0)], 43.2)]
    s = cc.summarize(runs)
    assert s.itl_ms == [8.0, 8.0, 10.0, 9.0]
    assert s.ttft_median == 22.0 and s.end_to_end_median == pytest.approx(39.85)
    assert s.itl_percentile(50) == 8.5 and s.n == [3, 3]


def test_bursts_of_a_speculative_stream():
    # Gaps of a draft run: tokens 2-4 came with one pass (0.05 ms apart), 5 and 6 with the next.
    gaps = [95.0, 0.05, 0.04, 96.0, 0.06]
    assert cc.bursts(gaps, threshold_ms=10.0) == [1, 3, 2]
    assert cc.bursts([], threshold_ms=10.0) == [1]
    assert cc.bursts([8.0, 8.0], threshold_ms=2.0) == [1, 1, 1]   # a plain run: every token its own pass
    assert sum(cc.bursts(gaps, 10.0)) == len(gaps) + 1
