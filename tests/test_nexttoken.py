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
    # Each median's spread: (max − min) ÷ median ÷ √n; the ratio's uncertainty the root of the sum of their squares.
    # Both clocks 100 and 110: a = b = 10 ÷ 105 = 0.0952, u = √(2 × 0.0952² ÷ 2) = 0.0952: the ratio 1 from 0.905
    # to 1.095, over both edges of ±5%: cannot tell yet; n ≥ (0.0952² + 0.0952²) ÷ 0.05² = 7.26: 8 of each.
    same = nexttoken.ThirdClock("x", (100.0, 110.0), (100.0, 110.0))
    assert same.ratio == 1.0 and same.uncertainty == pytest.approx(10 / 105)
    assert same.low == pytest.approx(1 - 10 / 105) and same.high == pytest.approx(1 + 10 / 105)
    assert same.verdict == "cannot tell yet" and same.samples_needed() == 8
    # 200 and 220 against 100 twice: 2.1 ± √(0.0952² ÷ 2) = 0.0673, from 2.033 to 2.167: outside ±5%; one sample of
    # each would do, 0.0952² ÷ (2.1 − 1 − 0.05)² = 0.008.
    apart = nexttoken.ThirdClock("x", (200.0, 220.0), (100.0, 100.0))
    assert apart.ratio == 2.1 and apart.low == pytest.approx(2.1 - 20 / 210 / 2 ** 0.5)
    assert apart.verdict == "outside ±5%" and apart.samples_needed() == 1
    # 100 and 102 against 100, 101, 100, 101: 101 ÷ 100.5 = 1.004975; a = 2 ÷ 101, b = 1 ÷ 100.5,
    # u = √(a² ÷ 2 + b² ÷ 4) = 0.01486: from 0.9901 to 1.0198, inside ±5%.
    near = nexttoken.ThirdClock("x", (100.0, 102.0), (100.0, 101.0, 100.0, 101.0))
    assert near.ratio == pytest.approx(101 / 100.5) and near.uncertainty == pytest.approx(0.014860, abs=1e-6)
    assert near.verdict == "within ±5%" and near.samples_needed() == 1
    # A ratio on the band's edge, 105 ÷ 100 with no spread: within, and no number of samples moves it off the edge.
    edge = nexttoken.ThirdClock("x", (105.0, 105.0), (100.0, 100.0))
    assert edge.verdict == "within ±5%" and edge.samples_needed() is None
    # Just past it: 106 ÷ 100 is outside.
    assert nexttoken.ThirdClock("x", (106.0, 106.0), (100.0, 100.0)).verdict == "outside ±5%"
