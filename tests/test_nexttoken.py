"""Lesson 4's arithmetic (bytesup.course.nexttoken) on hand arithmetic: softmax, the numpy
pass's two figures that need no server, and the third clock."""

from __future__ import annotations

import math

import pytest

from bytesup.course import nexttoken


def test_softmax_worked_by_hand():
    sm = nexttoken.softmax_example()
    # e^2 = 7.389056, e^1 = 2.718282, e^0.1 = 1.105171; their sum 11.212509;
    # 7.389056 / 11.212509 = 0.6590, 2.718282 / 11.212509 = 0.2424, 1.105171 / 11.212509 = 0.0986.
    # (At temperature 2 the same logits would give 0.5017, 0.3043, 0.1940.)
    assert sm.logits == [2.0, 1.0, 0.1]
    assert sm.exp == pytest.approx([7.389056, 2.718282, 1.105171], abs=1e-6)
    assert sm.probs == pytest.approx([0.6590, 0.2424, 0.0986], abs=1e-4)
    assert sm.probs_shifted == pytest.approx([0.6590, 0.2424, 0.0986], abs=1e-4)
    assert sm.sum == pytest.approx(1.0, abs=1e-12) and sm.shift == 100.0
    assert sm.gap == 1.0 and sm.p0_over_p1 == pytest.approx(2.718282, abs=1e-6)
    assert sm.e_to_5 == pytest.approx(148.4132, abs=1e-4)
    assert sm.shift_max_abs_difference < 1e-12
    # A naive softmax with explicit loops, on logits of the test's own.
    logits = [0.5, -1.0, 3.0, 0.0]
    exps = []
    for z in logits:
        exps.append(math.exp(z))
    total = 0.0
    for e in exps:
        total += e
    assert nexttoken.softmax_example(logits, shift=7.0).probs == pytest.approx([e / total for e in exps], rel=1e-12)
    two = nexttoken.softmax_example([0.0, 0.0], shift=5.0)
    assert two.probs == [0.5, 0.5] and two.shift_max_abs_difference == 0.0
    # A shift of 1,000: e^1002 overflows a float64 (its largest is about e^709.78); less the largest
    # shifted logit, 1,002, the exponents are 0, −1, −1.9 again, and so are the probabilities.
    far = nexttoken.softmax_example(shift=1000.0)
    assert far.probs_shifted == pytest.approx([0.6590, 0.2424, 0.0986], abs=1e-4) and far.shift_max_abs_difference < 1e-12

def test_first_block_on_top_and_the_flops_by_hand():
    def layers(ranks):
        return nexttoken.ThroughTheLayers("t", 0, "'x'", ranks, [0.0] * len(ranks))
    assert layers([3, 1, 2, 1, 1]).on_top_from == 4
    assert layers([1, 1, 1]).on_top_from == 1
    assert layers([2, 2]).on_top_from is None
    last = nexttoken.LastOnly("t", n_tokens=5, n_vocab=10, n_embd=4, max_abs_logit_difference=0.0, same_top=True)
    # 5 × 2 × 10 × 4 = 400 FLOPs for every position, 80 for the last, (5 − 1) × 80 = 320 saved.
    assert (last.flops_all, last.flops_last, last.flops_saved) == (400, 80, 320)

def test_the_third_clocks_arithmetic_by_hand():
    same = nexttoken.ThirdClock("x", (100.0, 110.0), (100.0, 110.0))
    assert same.ratio == 1.0 and same.inside_noise and same.samples_needed() is None
    apart = nexttoken.ThirdClock("x", (200.0, 220.0), (100.0, 100.0))
    assert apart.ratio == 2.1 and apart.low == 2.0 and apart.high == 2.2 and not apart.inside_noise
    # relative spread 20 ÷ 210 = 0.0952; (2 × 0.0952 ÷ 1.1)² = 0.03: one sample of each would do
    assert apart.samples_needed() == 1
