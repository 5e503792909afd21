"""The client-clock arithmetic on hand-made arrival times (no server)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from bytesup.course import clientclock


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    values = [7.9, 8.1, 8.0, 12.5, 7.7, 30.2, 8.3]
    assert clientclock.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_by_hand():
    # Sorted 1, 2, 3, 4: p50 sits halfway between ranks 1 and 2; p90 at rank 2.7.
    assert clientclock.percentile([4, 1, 3, 2], 50) == 2.5
    assert clientclock.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert clientclock.percentile([5.0], 99) == 5.0
    assert math.isnan(clientclock.percentile([], 50))
    with pytest.raises(ValueError):
        clientclock.percentile([1.0], 101)


def test_token_times_expand_events_that_bring_several_tokens():
    # The second event brought tokens 2-4 at once (held back mid-character, or a speculative burst).
    assert clientclock.token_times([(1, 30.0), (4, 38.0), (5, 47.0)]) == [30.0, 38.0, 38.0, 38.0, 47.0]
    with pytest.raises(ValueError):
        clientclock.token_times([(3, 1.0), (2, 2.0)])


def test_client_times_of_a_hand_made_stream():
    run = clientclock.client_times([(1, 28.0), (2, 36.0), (3, 44.5), (4, 52.0)], ended_ms=52.4)
    assert run.n == 4 and run.ttft_ms == 28.0
    assert run.itl_ms == [8.0, 8.5, 7.5]
    assert run.in_order and run.separate
    assert clientclock.predicted_end_to_end(run.ttft_ms, 8.0, run.n) == 52.0
    assert clientclock.sequential_floor_ms(run.n, min(run.itl_ms)) == 30.0


def test_a_burst_is_in_order_but_not_separate():
    run = clientclock.client_times([(1, 10.0), (3, 20.0)], ended_ms=21.0)
    assert run.itl_ms == [10.0, 0.0] and run.in_order and not run.separate
    late = clientclock.client_times([(1, 10.0), (2, 20.0)], ended_ms=15.0)
    assert not late.in_order


def test_summary_pools_the_gaps_of_every_repeat():
    runs = [clientclock.client_times([(1, 20.0), (2, 28.0), (3, 36.0)], 36.5),
            clientclock.client_times([(1, 24.0), (2, 34.0), (3, 43.0)], 43.2)]
    s = clientclock.summarize(runs)
    assert s.itl_ms == [8.0, 8.0, 10.0, 9.0]
    assert s.ttft_median == 22.0 and s.end_to_end_median == pytest.approx(39.85)
    assert s.itl_percentile(50) == 8.5 and s.n == [3, 3]


def test_bursts_of_a_speculative_stream():
    # Gaps of a draft run: tokens 2-4 came with one pass (0.05 ms apart), 5 and 6 with the next.
    gaps = [95.0, 0.05, 0.04, 96.0, 0.06]
    assert clientclock.bursts(gaps, threshold_ms=10.0) == [1, 3, 2]
    assert clientclock.bursts([], threshold_ms=10.0) == [1]
    assert clientclock.bursts([8.0, 8.0], threshold_ms=2.0) == [1, 1, 1]   # a plain run: every token its own pass
    assert sum(clientclock.bursts(gaps, 10.0)) == len(gaps) + 1


# --- both clocks: StreamedRepeat and OutsideView -------------------------------------------------------

class Times:
    def __init__(self, prompt_ms, predicted_ms, predicted_n):
        self.prompt_ms, self.predicted_ms, self.predicted_n = prompt_ms, predicted_ms, predicted_n


def hand_view():
    # Two repeats of 4 tokens. Repeat 1: arrivals 28, 36, 44.5, 52 and the final event at 53; the server says
    # prompt 25 ms and 3 passes in 24 ms. Repeat 2: arrivals 30, 40, 40, 49 (tokens 2 and 3 in one event),
    # final at 51; prompt 31 ms, 3 passes in 27 ms.
    one = clientclock.StreamedRepeat(1, clientclock.client_times([(1, 28.0), (2, 36.0), (3, 44.5), (4, 52.0)], 53.0),
                                     Times(25.0, 24.0, 4), 4)
    two = clientclock.StreamedRepeat(2, clientclock.client_times([(1, 30.0), (3, 40.0), (4, 49.0)], 51.0), Times(31.0, 27.0, 4), 3)
    return one, two, clientclock.OutsideView([one, two])


def test_a_streamed_repeat_on_both_clocks_by_hand():
    one, two, _ = hand_view()
    assert one.server_total_ms == 49.0 and one.per_token_ms == 8.0 and one.ttft_gap_ms == 3.0
    assert one.overhead_ms == 53.0 - 49.0
    assert one.itl_median_ms == 8.0 and one.fastest_gap_ms == 7.5 and one.floor_ms == 4 * 7.5
    # gaps 10, 0, 9: the median 9, the fastest 0, so the floor says nothing (0 ms)
    assert two.itl_median_ms == 9.0 and two.fastest_gap_ms == 0.0 and two.floor_ms == 0.0
    assert one.fact() == {"ttft_ms": 28.0, "prompt_ms": 25.0, "token_events": 4, "tokens": 4, "predicted_n": 4,
                          "itl_median_ms": 8.0, "predicted_per_token_ms": 8.0, "end_to_end_ms": 53.0, "server_total_ms": 49.0}


def test_the_outside_view_pools_repeats_by_hand():
    one, two, view = hand_view()
    # prompt_ms 25 and 31: median 28; Σ predicted_ms ÷ Σ passes = (24 + 27) ÷ (3 + 3) = 8.5
    assert view.prompt_ms == 28.0 and view.per_token_ms == 8.5
    assert view.server_total_ms == statistics.median([49.0, 58.0])
    # the gaps of both repeats pooled: 8, 8.5, 7.5, 10, 0, 9
    assert view.itl_mean_ms == pytest.approx(43 / 6)
    assert view.itl_percentiles() == {q: pytest.approx(float(np.percentile([8, 8.5, 7.5, 10, 0, 9], q))) for q in (50, 90, 99)}
    # TTFT median (28 + 30) ÷ 2 = 29, ITL p50 8.25: 29 + 8.25 × 3 = 53.75; the server's 28 + 8.5 × 3 = 53.5
    assert view.predicted_end_to_end(4) == pytest.approx(53.75) and view.server_predicted(4) == 53.5
    assert view.ttft_gaps_ms == [3.0, -1.0] and view.overheads_ms == [4.0, -7.0]
    assert not view.causal                              # repeat 2's first token came 1 ms before prompt_ms ended
    assert not view.counted                             # repeat 2 brought 4 tokens in 3 events
    assert view.fastest_gap_ms == 0.0
    # floors 30 and 0: both held (53 ≥ 30, 51 ≥ 0); end-to-end ÷ floor 53 ÷ 30, and 51 ÷ 0 is infinite
    assert view.floor_held and view.above_floor == [53.0 / 30.0, math.inf]
    alone = clientclock.OutsideView([one])
    assert alone.causal and alone.counted and alone.above_floor == [53.0 / 30.0]
