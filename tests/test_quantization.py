"""What a width costs in accuracy (bytesup.course.quantization): KL divergence, top-token agreement and the largest
change of a probability, each against hand arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bytesup.course.quantization import agreement, kl_divergence, log_softmax, sig, top_token


def test_kl_of_a_three_token_distribution_by_hand():
    # P = (1/2, 1/4, 1/4), Q = (1/4, 1/2, 1/4): KL(P ‖ Q) = 1/2 ln 2 + 1/4 ln(1/2) + 0 = 1/4 ln 2.
    p = np.log([0.5, 0.25, 0.25])
    q = np.log([0.25, 0.5, 0.25]) + 3.0  # a constant added to every logit changes no probability
    assert kl_divergence(p, q)[0] == pytest.approx(0.25 * math.log(2), rel=1e-12)
    # and the other way round: 1/4 ln(1/2) + 1/2 ln 2 = 1/4 ln 2 too, by the symmetry of this pair
    assert kl_divergence(q, p)[0] == pytest.approx(0.25 * math.log(2), rel=1e-12)


def test_identical_logits_give_zero_exactly_and_kl_is_never_negative():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(7, 50)).astype(np.float32)
    assert np.all(kl_divergence(a, a) == 0.0)
    same = agreement(a, a)
    assert same.identical and same.mean_kl == 0.0 and same.largest_dp == 0.0 and same.same_top == 7
    b = a + rng.normal(scale=0.3, size=a.shape).astype(np.float32)
    kl = kl_divergence(a, b)
    assert np.all(kl > 0.0)
    assert not agreement(a, b).identical


def test_agreement_by_hand():
    # Two positions over three tokens. Position 0 the same; position 1: P = (0.5, 0.25, 0.25), Q = (0.25, 0.5, 0.25).
    ref = np.log(np.array([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]]))
    width = np.log(np.array([[0.2, 0.3, 0.5], [0.25, 0.5, 0.25]]))
    a = agreement(ref, width)
    assert a.positions == 2 and a.same_top == 1  # token 2 at both first; token 0 against token 1 at the second
    assert a.mean_kl == pytest.approx(0.25 * math.log(2) / 2, rel=1e-12)
    assert a.max_kl == pytest.approx(0.25 * math.log(2), rel=1e-12)
    # |ΔP| = 0.25 at tokens 0 and 1 of position 1: the first of them
    assert (a.largest_dp, a.dp_row, a.dp_token) == (pytest.approx(0.25), 1, 0)
    assert (a.dp_reference, a.dp_width) == (pytest.approx(0.5), pytest.approx(0.25))


def test_log_softmax_and_the_top_token():
    z = np.array([2.0, 1.0, 0.1])
    e = np.exp(z)
    assert np.exp(log_softmax(z))[0] == pytest.approx(e / e.sum())
    token, p = top_token(z)
    assert token == 0 and p == pytest.approx(e[0] / e.sum())


def test_shapes_must_agree_and_figures_keep_four_digits():
    with pytest.raises(ValueError, match="differ in shape"):
        kl_divergence(np.zeros((2, 3)), np.zeros((2, 4)))
    assert sig(0.0027661027) == 0.002766 and sig(0.0) == 0.0
