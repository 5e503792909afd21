"""The stopping rule (bytesup.course.stopping) on hand-made samples: tight ones stop at the minimum, scattered ones go
on to the maximum or the budget, and the stop says which."""

from __future__ import annotations

import math

import pytest

from bytesup.course import stopping
from bytesup.course.stopping import BUDGET, MAXIMUM, TIGHT, Rule, Stop, decide, median_uncertainty, take
from bytesup.store.plans.stopping import StoppingRule, up_to

RULE = Rule(minimum=2, maximum=5, tight=0.05, budget_s=100.0)


def test_the_medians_uncertainty_by_hand():
    # Two samples 100 and 104: σ = 4 ÷ 1.128 = 3.546, the median 102; u = 1.2533 × 3.546 ÷ √2 ÷ 102 = 0.0308.
    assert median_uncertainty([100.0, 104.0]) == pytest.approx(1.2533 * (4 / 1.128) / math.sqrt(2) / 102)
    assert median_uncertainty([100.0, 104.0]) == pytest.approx(0.0308, abs=1e-4)
    # Three: 100, 110, 104: σ = 10 ÷ 1.693, the median 104.
    assert median_uncertainty([100.0, 110.0, 104.0]) == pytest.approx(1.2533 * (10 / 1.693) / math.sqrt(3) / 104)
    # Identical samples are known exactly; one sample, or a median of 0, not at all.
    assert median_uncertainty([7.0, 7.0, 7.0]) == 0.0
    assert median_uncertainty([7.0]) == math.inf and median_uncertainty([-1.0, 1.0]) == math.inf
    # A slower sample among five is an outlier (bytesup.course.robust) and stays out of the range: 100 to 102.
    assert stopping.sigma([100.0, 101.0, 102.0, 101.0, 40.0]) == pytest.approx(2 / 2.059)  # four kept: d₂(4)
    # Beyond ten samples σ is the interquartile range ÷ 1.349: 1 … 12 has quartiles 3.75 and 9.25.
    assert stopping.sigma([float(x) for x in range(1, 13)]) == pytest.approx(5.5 / 1.349)


def test_tight_samples_stop_at_the_minimum():
    samples, stop = take(RULE, iter([100.0, 101.0, 150.0, 60.0, 100.0]), lambda s: [s], lambda _: 1.0)
    assert samples == [100.0, 101.0] and stop == Stop(2, TIGHT, median_uncertainty([100.0, 101.0]), 2.0)
    assert stop.to_json() == {"samples": 2, "stopped_by": "tight", "median_uncertainty": 0.00782, "spent_s": 2.0}


def test_the_minimum_is_taken_however_tight_the_first_samples_are():
    rule = Rule(minimum=3, maximum=5, tight=0.05, budget_s=1.0)
    samples, stop = take(rule, iter([100.0] * 5), lambda s: [s], lambda _: 10.0)  # the budget spent at once
    assert len(samples) == 3 and stop.why == TIGHT


def test_scattered_samples_go_on_to_the_maximum():
    scattered = [100.0, 130.0, 80.0, 120.0, 90.0, 100.0]
    samples, stop = take(RULE, iter(scattered), lambda s: [s], lambda _: 1.0)
    assert samples == scattered[:5] and (stop.samples, stop.why) == (5, MAXIMUM)
    assert stop.uncertainty == pytest.approx(median_uncertainty(scattered[:5])) and stop.uncertainty > RULE.tight


def test_scattered_samples_stop_when_their_own_time_reaches_the_budget():
    rule = Rule(minimum=2, maximum=10, tight=0.05, budget_s=25.0)
    samples, stop = take(rule, iter([100.0, 130.0, 80.0, 120.0, 90.0]), lambda s: [s], lambda _: 10.0)
    assert len(samples) == 3 and (stop.why, stop.spent_s) == (BUDGET, 30.0)


def test_every_figure_must_be_tight():
    # A request gives two figures (a prefill and a decode): the decode's scatter keeps the rule going.
    pairs = [(300.0, 80.0), (301.0, 90.0), (300.0, 70.0), (302.0, 85.0), (300.0, 81.0)]
    samples, stop = take(RULE, iter(pairs), lambda s: [[p for p, _ in s], [d for _, d in s]], lambda _: 1.0)
    assert len(samples) == 5 and stop.why == MAXIMUM
    assert decide(RULE, 2, [[300.0, 301.0], [80.0, 80.5]], 2.0) == Stop(2, TIGHT, median_uncertainty([80.0, 80.5]), 2.0)  # the larger


def test_a_round_of_requests_is_one_sample_of_several_values():
    # Each round gives two values of its figure: one round can be tight, its minimum being one round.
    rule = Rule(minimum=1, maximum=3, tight=0.05, budget_s=100.0)
    rounds, stop = take(rule, iter([(1389.0, 1336.0), (1397.0, 1348.0), (1650.0, 1800.0)]),
                        lambda taken: [[v for r in taken for v in r]], lambda _: 3.0)
    assert len(rounds) == 1 and (stop.samples, stop.why) == (1, TIGHT)
    # One value is not known at all: a round of one goes on.
    assert decide(rule, 1, [[1389.0]], 1.0) is None and decide(rule, 3, [[1389.0]], 1.0).why == MAXIMUM


def test_a_replay_takes_the_same_decisions_from_the_recorded_samples():
    # Live, samples come from a source that would go on; a replay reads the ones the live run recorded.
    live_source = iter([100.0, 112.0, 101.0, 99.0, 130.0, 140.0])
    live, live_stop = take(RULE, live_source, lambda s: [s], lambda x: x / 100)
    replayed, replay_stop = take(RULE, iter(list(live)), lambda s: [s], lambda x: x / 100)
    assert replayed == live and replay_stop == live_stop and live_stop.samples == 4


def test_the_source_is_closed_at_the_stop_and_may_not_run_out_first():
    closed = []

    def source():
        try:
            yield from [100.0, 100.0, 100.0]
        finally:
            closed.append(True)

    take(RULE, source(), lambda s: [s], lambda _: 1.0)
    assert closed == [True]
    with pytest.raises(ValueError, match="the samples ran out after 2, before the rule stopped"):
        take(RULE, iter([100.0, 200.0]), lambda s: [s], lambda _: 1.0)


def test_a_rule_that_cannot_be_applied_is_refused():
    with pytest.raises(ValueError, match="one sample at least"):
        Rule(minimum=0, maximum=3, tight=0.05, budget_s=10.0)
    with pytest.raises(ValueError, match="the maximum .2. is below the minimum .3."):
        Rule(minimum=3, maximum=2, tight=0.05, budget_s=10.0)
    with pytest.raises(ValueError, match="more than 0"):
        Rule(minimum=2, maximum=3, tight=0.0, budget_s=10.0)


def test_a_plans_rule_goes_up_to_the_runs_repeat():
    assert up_to(3, 2, 0.05, 30.0) == StoppingRule(minimum=2, maximum=3, tight=0.05, budget_s=30.0)
    assert up_to(1, 2, 0.05, 30.0).maximum == 2  # never below the minimum
    assert up_to(3, 2, 0.05, 30.0).rule() == Rule(2, 3, 0.05, 30.0)
    with pytest.raises(ValueError):
        up_to(3, 0, 0.05, 30.0)
