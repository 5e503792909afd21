"""The numpy samplers of bytesup.course.sampling on small hand-made distributions."""

from __future__ import annotations

import numpy as np
import pytest

from bytesup.course import sampling

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


# --- a 4-token example worked by hand, and naive references written as plain loops -------------

# Unsorted on purpose: the samplers must sort. Sorted: 0.4 (index 1), 0.3 (3), 0.2 (2), 0.1 (0).
FOUR = [0.1, 0.4, 0.2, 0.3]


def naive_softmax(logits):
    biggest = max(logits)
    exps = [np.exp(x - biggest) for x in logits]
    total = 0.0
    for e in exps:
        total += e
    return [e / total for e in exps]


def naive_ranking(probs):
    """Indices from the most to the least probable, the earlier first among equals (selection sort)."""
    left = list(range(len(probs)))
    ranked = []
    while left:
        best = left[0]
        for i in left:
            if probs[i] > probs[best]:
                best = i
        ranked.append(best)
        left.remove(best)
    return ranked


def naive_keep(probs, keep):
    total = sum(probs[i] for i in keep)
    return [probs[i] / total if i in keep else 0.0 for i in range(len(probs))]


def naive_temperature(probs, t):
    if t <= 0:
        return [1.0 if i == naive_ranking(probs)[0] else 0.0 for i in range(len(probs))]
    powered = [p ** (1.0 / t) for p in probs]
    total = sum(powered)
    return [w / total for w in powered]


def naive_top_k(probs, k):
    if k <= 0:
        k = len(probs)
    return naive_keep(probs, naive_ranking(probs)[:k])


def naive_top_p(probs, p_min, min_keep=1):
    total = sum(probs)
    keep, cumulative = [], 0.0
    for i in naive_ranking(probs):
        if cumulative >= p_min * total and len(keep) >= min_keep:
            break
        keep.append(i)
        cumulative += probs[i]
    return naive_keep(probs, keep)


def test_softmax_of_four_logits_by_hand():
    # logits 2, 1, 0, −1: e^0, e^−1, e^−2, e^−3 = 1, 0.367879, 0.135335, 0.049787; sum 1.553001
    expected = [0.643914, 0.236883, 0.087144, 0.032059]  # each ÷ 1.553001
    assert sampling.softmax([2.0, 1.0, 0.0, -1.0]) == pytest.approx(expected, abs=1e-6)
    assert naive_softmax([2.0, 1.0, 0.0, -1.0]) == pytest.approx(expected, abs=1e-6)
    # large logits do not overflow: the largest is subtracted first
    assert sampling.softmax([1000.0, 1000.0 + np.log(3.0)]) == pytest.approx([0.25, 0.75])
    assert sampling.softmax([-1000.0, -1000.0]) == pytest.approx([0.5, 0.5])


def test_temperature_on_four_tokens_by_hand():
    # T = 0.5 squares: 0.01, 0.16, 0.04, 0.09, sum 0.30
    assert sampling.temperature(FOUR, 0.5) == pytest.approx([1 / 30, 16 / 30, 4 / 30, 9 / 30])
    # T = 2 takes square roots: 0.316228, 0.632456, 0.447214, 0.547723, sum 1.943621
    assert sampling.temperature(FOUR, 2.0) == pytest.approx([0.162701, 0.325401, 0.230093, 0.281805], abs=1e-6)
    assert sampling.temperature(FOUR, 1.0) == pytest.approx(FOUR)
    assert list(sampling.temperature(FOUR, 0.0)) == [0.0, 1.0, 0.0, 0.0]
    # tiny probabilities are rescaled before exponentiating: [1e-200, 2e-200] squared and renormalized is 1:4
    assert sampling.temperature([1e-200, 2e-200], 0.5) == pytest.approx([0.2, 0.8])
    # a zero stays zero
    assert sampling.temperature([0.0, 0.25, 0.75], 0.5) == pytest.approx([0.0, 0.1, 0.9])  # 0.0625, 0.5625 ÷ 0.625


def test_top_k_on_four_tokens_by_hand():
    assert sampling.top_k(FOUR, 1) == pytest.approx([0.0, 1.0, 0.0, 0.0])
    assert sampling.top_k(FOUR, 2) == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])        # 0.4, 0.3 ÷ 0.7
    assert sampling.top_k(FOUR, 3) == pytest.approx([0.0, 4 / 9, 2 / 9, 3 / 9])     # 0.4, 0.2, 0.3 ÷ 0.9
    assert sampling.top_k(FOUR, 4) == pytest.approx(FOUR)
    # weights that do not sum to 1 are renormalized even when all are kept
    assert sampling.top_k([2.0, 1.0, 1.0], 0) == pytest.approx([0.5, 0.25, 0.25])
    assert sampling.top_k([2.0, 1.0, 1.0], 3) == pytest.approx([0.5, 0.25, 0.25])


def test_top_p_on_four_tokens_by_hand():
    # sorted cumulative: 0.4, 0.7, 0.9, 1.0
    assert sampling.top_p(FOUR, 0.3) == pytest.approx([0.0, 1.0, 0.0, 0.0])          # 0.4 ≥ 0.3
    assert sampling.top_p(FOUR, 0.5) == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])      # 0.7 ≥ 0.5
    assert sampling.top_p(FOUR, 0.75) == pytest.approx([0.0, 4 / 9, 2 / 9, 3 / 9])   # 0.9 ≥ 0.75
    assert sampling.top_p(FOUR, 0.95) == pytest.approx(FOUR)                          # 1.0 ≥ 0.95
    assert sampling.top_p(FOUR, 0.3, min_keep=3) == pytest.approx([0.0, 4 / 9, 2 / 9, 3 / 9])
    assert sampling.top_p(FOUR, 0.3, min_keep=10) == pytest.approx(FOUR)  # never more than there are
    # unnormalized weights: p is a share of their sum. [2, 1, 1] is 0.5, 0.25, 0.25; 0.6 needs two
    assert sampling.top_p([2.0, 1.0, 1.0], 0.6) == pytest.approx([2 / 3, 1 / 3, 0.0])
    assert sampling.top_p([2.0, 1.0, 1.0], 1.0) == pytest.approx([0.5, 0.25, 0.25])


def test_samplers_match_the_naive_references():
    assert sampling.softmax([2.0, 1.0, 0.0, -1.0]) == pytest.approx(naive_softmax([2.0, 1.0, 0.0, -1.0]))
    for t in (0.0, 0.25, 0.5, 1.0, 2.0):
        assert sampling.temperature(FOUR, t) == pytest.approx(naive_temperature(FOUR, t)), t
    for k in (0, 1, 2, 3, 4):
        assert sampling.top_k(FOUR, k) == pytest.approx(naive_top_k(FOUR, k)), k
    for p_min in (0.1, 0.3, 0.5, 0.75, 0.95):
        for min_keep in (1, 2, 3):
            assert sampling.top_p(FOUR, p_min, min_keep=min_keep) == pytest.approx(naive_top_p(FOUR, p_min, min_keep))
    rng = np.random.default_rng(1)
    for _ in range(10):
        p = list(rng.dirichlet(np.ones(7)))
        assert sampling.temperature(p, 0.7) == pytest.approx(naive_temperature(p, 0.7))
        assert sampling.top_k(p, 3) == pytest.approx(naive_top_k(p, 3))
        assert sampling.top_p(p, 0.8) == pytest.approx(naive_top_p(p, 0.8))
        assert list(sampling.order(p)) == naive_ranking(p)


def test_chain_on_four_tokens_by_hand():
    # top-k 3 keeps 0.4, 0.2, 0.3 (÷ 0.9); temperature 0.5 squares them: 16, 4, 9 ÷ 29
    out = sampling.apply_chain(FOUR, [("top_k", 3), ("temperature", 0.5)])
    assert out == pytest.approx([0.0, 16 / 29, 4 / 29, 9 / 29])
    assert out == pytest.approx(naive_temperature(naive_top_k(FOUR, 3), 0.5))
    # temperature 0.5 first: 1, 16, 4, 9 (÷ 30); then top-p 0.8 of that: 16/30 = 0.533, + 9/30 = 0.833 ≥ 0.8
    assert sampling.apply_chain(FOUR, [("temperature", 0.5), ("top_p", 0.8)]) == pytest.approx([0.0, 16 / 25, 0.0, 9 / 25])
    # no steps: the weights normalized
    assert sampling.apply_chain([2.0, 1.0, 1.0], []) == pytest.approx([0.5, 0.25, 0.25])
    assert sampling.apply(FOUR, "top_k", 2.0) == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])
    assert sampling.apply(FOUR, "top_p", 0.5) == pytest.approx([0.0, 4 / 7, 0.0, 3 / 7])
    assert sampling.apply(FOUR, "temperature", 2) == pytest.approx(naive_temperature(FOUR, 2.0))


def test_order_kept_and_greedy_by_hand():
    assert list(sampling.order(FOUR)) == [1, 3, 2, 0]
    assert list(sampling.order([0.2, 0.5, 0.2, 0.1])) == [1, 0, 2, 3]  # equals keep their order
    assert list(sampling.kept_indices([0.0, 0.6, 0.0, 0.4])) == [1, 3]  # zeros are not kept
    assert sampling.greedy(FOUR) == 1
    assert list(sampling.normalize([2.0, 0.0, 2.0])) == [0.5, 0.0, 0.5]  # a zero is a valid probability


def test_input_checks_by_case():
    for bad in ([], [[0.5, 0.5]], [0.5, -0.1], [0.5, float("inf")], [0.5, float("nan")], [0.0, 0.0]):
        with pytest.raises(ValueError):
            sampling.normalize(bad)
    with pytest.raises(ValueError, match="^unknown sampler 'min_p'; re-implemented: temperature, top_k, top_p$"):
        sampling.apply(FOUR, "min_p", 0.1)


def test_incomplete_lists_say_how_much_they_hold():
    listed = [0.5, 0.2]  # 0.7 of the distribution
    with pytest.raises(sampling.IncompleteDistribution, match="temperature 0.5 needs the whole distribution: "
                       "the 2 listed candidates hold 0.7 of it"):
        sampling.temperature(listed, 0.5, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution, match="top-k 0 needs the whole distribution"):
        sampling.top_k(listed, 0, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution, match="top-p 1 needs the whole distribution"):
        sampling.top_p(listed, 1.0, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution,
                       match=r"^top-p 0.9: the 2 listed candidates hold only 0\.7 of the distribution$"):
        sampling.top_p(listed, 0.9, total=1.0)
    # the cumulative share of all of them: 0.5 + 0.2 + 0.1 = 0.8
    with pytest.raises(sampling.IncompleteDistribution, match=r"hold only 0\.8 of the distribution$"):
        sampling.top_p([0.5, 0.2, 0.1], 0.9, total=1.0)
    # the listed mass against a total of 2: 0.5 ÷ 2 = 0.25 ≥ 0.2 keeps one
    assert sampling.top_p(listed, 0.2, total=2.0) == pytest.approx([1.0, 0.0])
    # a complete list passes with its total given
    assert sampling.temperature([0.25, 0.75], 1.0, total=1.0) == pytest.approx([0.25, 0.75])
    assert sampling.top_k([0.25, 0.75], 0, total=1.0) == pytest.approx([0.25, 0.75])
    # a chain whose first step cuts works on the kept set after it: top-p 0.6 keeps 0.5 and 0.2 (0.7 ≥ 0.6),
    # renormalized 5/7, 2/7; temperature 0.5 then squares them: 25, 4 ÷ 29
    assert sampling.apply_chain(listed, [("top_p", 0.6), ("temperature", 0.5)], total=1.0) == pytest.approx([25 / 29, 4 / 29])


def test_input_messages_and_a_single_candidate():
    assert list(sampling.normalize([3.0])) == [1.0]
    assert list(sampling.temperature([0.2], 0.5)) == [1.0] and sampling.greedy([0.2]) == 0
    with pytest.raises(ValueError, match="^a probability vector must be one-dimensional and non-empty$"):
        sampling.normalize([])
    with pytest.raises(ValueError, match="^a probability vector must be one-dimensional and non-empty$"):
        sampling.normalize([[0.5], [0.5]])
    with pytest.raises(ValueError, match="^probabilities must be finite and non-negative$"):
        sampling.normalize([0.5, -0.5])
    with pytest.raises(ValueError, match="^probabilities must not all be zero$"):
        sampling.normalize([0.0, 0.0])


def test_incomplete_share_is_of_the_given_total():
    # 0.5 + 0.2 = 0.7 listed of a total of 2: 0.35 of it
    with pytest.raises(sampling.IncompleteDistribution,
                       match=r"^temperature 2 needs the whole distribution: the 2 listed candidates hold 0\.35 of it$"):
        sampling.temperature([0.5, 0.2], 2.0, total=2.0)
    # a list holding all but a billionth of its total counts as complete (rounding); a millionth short does not
    assert sampling.temperature([0.5, 0.5 - 5e-10], 1.0, total=1.0) == pytest.approx([0.5, 0.5])
    with pytest.raises(sampling.IncompleteDistribution):
        sampling.temperature([0.5, 0.5 - 1e-6], 1.0, total=1.0)
    with pytest.raises(sampling.IncompleteDistribution):
        sampling.temperature([0.5, 0.5 - 1.5e-9], 1.0, total=1.0)


def test_top_p_when_rounding_leaves_the_whole_vector_just_under_p():
    # eleven 0.1s: numpy's cumulative sum ends at 0.9999999999999998 of their sum, below the p asked for
    # (the largest float under 1); the whole vector is kept, each 1/11
    assert sampling.top_p([0.1] * 11, 0.9999999999999999) == pytest.approx([1 / 11] * 11)
