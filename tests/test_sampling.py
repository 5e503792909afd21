"""The numpy samplers of bytesup.sampling on small hand-made distributions."""

from __future__ import annotations

import numpy as np
import pytest

from bytesup import sampling

# Dyadic probabilities: their sums are exact in binary floating point, so boundaries are exact.
P = [0.5, 0.25, 0.125, 0.0625, 0.0625]


def kept(p):
    return list(sampling.kept_indices(p))


def test_softmax_sums_to_one_and_ignores_a_shift():
    a = sampling.softmax([2.0, 1.0, 0.1])
    assert a.sum() == pytest.approx(1.0)
    assert np.allclose(a, sampling.softmax([102.0, 101.0, 100.1]))
    assert a[0] / a[1] == pytest.approx(np.e)


def test_greedy_takes_the_largest_and_the_first_of_equals():
    assert sampling.greedy([0.1, 0.6, 0.3]) == 1
    assert sampling.greedy([0.4, 0.4, 0.2]) == 0


def test_temperature_one_changes_nothing_and_matches_logits_divided():
    logits = np.array([2.0, 1.0, 0.1, -1.0])
    p = sampling.softmax(logits)
    assert np.allclose(sampling.temperature(p, 1.0), p)
    for t in (0.5, 1.5, 3.0):
        assert np.allclose(sampling.temperature(p, t), sampling.softmax(logits / t))


def test_temperature_towards_zero_becomes_greedy():
    p = np.array([0.3, 0.45, 0.25])
    tops = [sampling.temperature(p, t)[1] for t in (1.0, 0.5, 0.1, 0.02)]
    assert tops == sorted(tops) and tops[-1] > 0.9999
    assert list(sampling.temperature(p, 0.0)) == [0.0, 1.0, 0.0]
    assert list(sampling.temperature(p, -1.0)) == [0.0, 1.0, 0.0]


def test_high_temperature_flattens():
    p = np.array([0.7, 0.2, 0.1])
    flat = sampling.temperature(p, 100.0)
    assert np.allclose(flat, 1 / 3, atol=0.01)
    assert sampling.temperature(p, 1.5)[0] < 0.7 < sampling.temperature(p, 0.5)[0]


def test_top_k_keeps_the_k_largest_renormalized():
    p = [0.1, 0.4, 0.2, 0.3]
    out = sampling.top_k(p, 2)
    assert kept(out) == [1, 3]
    assert out[1] == pytest.approx(0.4 / 0.7) and out[3] == pytest.approx(0.3 / 0.7)
    assert out.sum() == pytest.approx(1.0)


def test_top_k_ties_go_to_the_earlier_candidate_and_k_stays_k():
    out = sampling.top_k([0.1, 0.3, 0.3, 0.3], 2)
    assert kept(out) == [1, 2]
    assert np.count_nonzero(out) == 2


def test_top_k_zero_or_larger_than_the_list_keeps_all():
    assert np.allclose(sampling.top_k(P, 0), P)
    assert np.allclose(sampling.top_k(P, 99), P)


def test_top_p_keeps_until_the_cumulative_reaches_p():
    assert kept(sampling.top_p(P, 0.75)) == [0, 1]            # 0.5 + 0.25 == 0.75 exactly: reached
    assert kept(sampling.top_p(P, 0.75 + 1e-9)) == [0, 1, 2]  # just above: one more
    assert kept(sampling.top_p(P, 0.5)) == [0]
    assert kept(sampling.top_p(P, 0.3)) == [0]                # the first token alone already reaches p
    assert kept(sampling.top_p(P, 1.0)) == [0, 1, 2, 3, 4]


def test_top_p_min_keep():
    assert kept(sampling.top_p(P, 0.3, min_keep=3)) == [0, 1, 2]


def test_top_p_sorts_first():
    out = sampling.top_p([0.125, 0.5, 0.25, 0.125], 0.7)
    assert kept(out) == [1, 2]
    assert out[1] == pytest.approx(2 / 3)


def test_every_sampler_output_sums_to_one():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.dirichlet(np.ones(12))
        for name, value in (("temperature", 0.7), ("temperature", 0.0), ("top_k", 3), ("top_p", 0.6)):
            assert sampling.apply(p, name, value).sum() == pytest.approx(1.0)


def test_chain_order_matters():
    p = [0.4, 0.3, 0.2, 0.1]
    k_then_p = sampling.apply_chain(p, [("top_k", 3), ("top_p", 0.5)])
    p_then_k = sampling.apply_chain(p, [("top_p", 0.5), ("top_k", 3)])
    assert kept(k_then_p) == [0, 1]   # top-3 renormalized: 0.444, 0.333 -> 0.778 >= 0.5 at two
    assert kept(p_then_k) == [0, 1]   # 0.4, 0.7 -> two, then top-3 keeps both
    q = [0.3, 0.25, 0.25, 0.2]
    assert kept(sampling.apply_chain(q, [("top_k", 2), ("top_p", 0.5)])) == [0]    # 0.3/0.55 = 0.545
    assert kept(sampling.apply_chain(q, [("top_p", 0.5), ("top_k", 2)])) == [0, 1]  # 0.3, 0.55


def test_chain_temperature_after_a_cut_works_on_the_kept_set():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    out = sampling.apply_chain(p, [("top_k", 2), ("temperature", 0.5)])
    assert out[0] == pytest.approx(0.25 / (0.25 + 0.0625))


def test_a_partial_list_gives_exact_answers_or_refuses():
    listed = [0.5, 0.2]  # the top two of a distribution whose total is 1
    assert kept(sampling.top_p(listed, 0.6, total=1.0)) == [0, 1]
    assert kept(sampling.top_p(listed, 0.5, total=1.0)) == [0]
    with pytest.raises(sampling.IncompleteDistribution):
        sampling.top_p(listed, 0.9, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution):
        sampling.temperature(listed, 0.5, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution):
        sampling.top_k(listed, 3, total=1.0)
    assert kept(sampling.top_k(listed, 2, total=1.0)) == [0, 1]
    assert list(sampling.temperature(listed, 0.0, total=1.0)) == [1.0, 0.0]
    # Without `total` the list is taken as the whole distribution: 0.5 / 0.7 < 0.9 keeps both.
    assert kept(sampling.top_p(listed, 0.9)) == [0, 1]
    # After a cut the rest of a chain runs on the kept (complete) set.
    out = sampling.apply_chain(listed, [("top_k", 2), ("temperature", 2.0)], total=1.0)
    assert out.sum() == pytest.approx(1.0)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        sampling.normalize([])
    with pytest.raises(ValueError):
        sampling.normalize([0.5, -0.1])
    with pytest.raises(ValueError):
        sampling.apply([0.5, 0.5], "min_p", 0.1)
