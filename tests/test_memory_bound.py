"""The capstone's description of its sweep (steps, the line, the slope) on hand-made points, expected values worked
by hand. It names no verdict: that is the decode-time model's (tests/test_decodetime.py)."""

from __future__ import annotations

import math

import pytest

from bytesup.course import memory_bound

MB = 1e6
LLC_32MIB = 32 * 2**20

# The four widths of SmolLM2-135M as llama-bench measured them on 2 threads (the issue's table):
# bytes per token and tokens/s, repeated three times with a ±2% scatter.
WIDTHS = {"q4_1": (98.4 * MB, 125.0), "q8_0": (144.8 * MB, 141.0), "f16": (270.9 * MB, 99.0), "f32": (539.8 * MB, 50.0)}


def _point(name, nbytes, tps, llc=LLC_32MIB, n_params=134_515_008, scatter=0.02):
    return memory_bound.make_point(name, nbytes, [tps * (1 - scatter), tps, tps * (1 + scatter)], llc, n_params=n_params)


def _smollm2(llc=LLC_32MIB):
    return [_point(n, b, t, llc) for n, (b, t) in WIDTHS.items()]


def test_point_effective_bandwidth_and_cache_mark():
    p = memory_bound.make_point("x", 100 * MB, [40.0, 50.0, 60.0], llc_bytes=200 * MB)
    assert p["median"] == 50.0 and p["gbs"] == pytest.approx(5.0)  # 100 MB × 50 /s
    assert p["gbs_min"] == pytest.approx(4.0) and p["gbs_max"] == pytest.approx(6.0)
    assert p["spread"] == pytest.approx(0.5) and p["cache_resident"] is True
    assert memory_bound.make_point("y", 300 * MB, [1.0], llc_bytes=200 * MB)["cache_resident"] is False
    assert memory_bound.make_point("z", 300 * MB, [1.0], llc_bytes=None)["cache_resident"] is False
    with pytest.raises(ValueError):
        memory_bound.make_point("bad", 1.0, [], None)


def test_steps_of_the_issue():
    steps = {s["narrow"]: s for s in memory_bound.width_steps(_smollm2())}
    # f16 -> f32: 539.8/270.9 = 1.993 × the bytes, 99/50 = 1.98 × the speed: flat effective GB/s.
    assert steps["f16"]["outcome"] == memory_bound.FOLLOWS
    assert steps["f16"]["bytes_ratio"] == pytest.approx(1.9926, rel=1e-4)
    assert steps["f16"]["speedup"] == pytest.approx(1.98)
    # q8_0 -> f16: 1.871 × the bytes, only 141/99 = 1.424 × faster: faster by less than the bytes.
    assert steps["q8_0"]["outcome"] == memory_bound.LESS
    assert steps["q8_0"]["gbs_ratio"] == pytest.approx(1.4242 / 1.8708, rel=1e-3)
    # q4_1 -> q8_0: fewer bytes, but 125 < 141 tokens/s: no faster.
    assert steps["q4_1"]["outcome"] == memory_bound.NOT_FASTER
    assert steps["q4_1"]["speedup"] == pytest.approx(125 / 141)


def test_step_inconclusive_when_spread_exceeds_the_ratio():
    # 60, 80, 100, 120, 140: quartiles 80 and 120, a robust spread of 40 ÷ 100 = 40%
    a = memory_bound.make_point("narrow", 100 * MB, [60.0, 80.0, 100.0, 120.0, 140.0], None, n_params=1)
    b = memory_bound.make_point("wide", 120 * MB, [90.0, 95.0, 95.0, 95.0, 100.0], None, n_params=1)
    step = memory_bound.step_outcome(a, b)
    # allowance 0.4: flat (|ln(1.0526/1.2)| = 0.131 <= ln 1.4 = 0.336) and not faster (1.0526 <= 1.4).
    assert step["allowance"] == pytest.approx(0.4) and step["outcome"] == memory_bound.UNCLEAR


def test_one_stalled_sample_is_flagged_and_changes_no_outcome():
    """The fresh run of issue 26: q8_0 at 93.6 (7.4–94.5) tokens/s made a ±1,172% allowance. The same
    rows with the 7.4 and without it give the same steps, each judged within ±10%."""
    mb = {"q4_1": 96.6, "q8_0": 143.0, "f16": 269.1}
    q4 = [131.4, 135.4, 130.9, 133.0, 129.8]
    q8 = [93.6, 94.5, 93.1, 7.4, 93.9]
    f16 = [64.6, 64.9, 64.1, 63.8, 65.0]
    stalled = [memory_bound.make_point(n, mb[n] * MB, v, None, n_params=1) for n, v in (("q4_1", q4), ("q8_0", q8), ("f16", f16))]
    assert stalled[1]["outliers"] == [7.4] and 7.4 not in stalled[1]["kept"]
    assert stalled[1]["samples"] == q8  # shown and kept in the JSON
    assert stalled[1]["robust_spread"] < 0.02  # 93.45 and 93.9 around 93.75
    quiet = [memory_bound.make_point(n, mb[n] * MB, [v for v in vals if v != 7.4], None, n_params=1)
             for n, vals in (("q4_1", q4), ("q8_0", q8), ("f16", f16))]
    with_it, without = memory_bound.width_steps(stalled), memory_bound.width_steps(quiet)
    assert [s["outcome"] for s in with_it] == [s["outcome"] for s in without]
    assert [s["allowance"] for s in with_it] == [0.1, 0.1]
    placed = {n: v["on_line"] for n, v in memory_bound.analyse(stalled)["line"].items()}
    assert placed == {n: v["on_line"] for n, v in memory_bound.analyse(quiet)["line"].items()}
    # the old rule, max ÷ min − 1, would have judged the q8_0 steps within ±1,177%
    assert memory_bound.relative_range(q8) == pytest.approx(94.5 / 7.4 - 1)


def test_step_faster_than_the_bytes():
    a = memory_bound.make_point("narrow", 100 * MB, [300.0], None, n_params=1)
    b = memory_bound.make_point("wide", 200 * MB, [100.0], None, n_params=1)
    assert memory_bound.step_outcome(a, b)["outcome"] == memory_bound.FASTER  # 3 × faster for 2 × fewer bytes


def test_steps_only_between_widths_of_one_model():
    pts = _smollm2() + [_point("large-q8_0", 985.9 * MB, 20.0, n_params=927_541_248)]
    names = {(s["narrow"], s["wide"]) for s in memory_bound.width_steps(pts)}
    assert names == {("q4_1", "q8_0"), ("q8_0", "f16"), ("f16", "f32")}


def test_fit_is_the_geometric_mean_of_effective_bandwidth():
    # Two exact points at 20 and 45 GB/s: the line's bandwidth sqrt(20 × 45) = 30 GB/s, equal weight for each.
    pts = [memory_bound.make_point("a", 10 * MB, [2000.0], None), memory_bound.make_point("b", 1000 * MB, [45.0], None)]
    fit = memory_bound.fit_bandwidth(pts)
    assert fit["gbs"] == pytest.approx(30.0)
    # One standard error: sd of ln 20, ln 45 over sqrt(2) = |ln 45 − ln 20| / 2.
    assert fit["u"] == pytest.approx(abs(math.log(45 / 20)) / 2)
    assert fit["gbs_low"] == pytest.approx(30 * math.exp(-fit["u"]))
    # The smallest point does not dominate: swapping which one is small leaves the line unchanged.
    swapped = [memory_bound.make_point("a", 1000 * MB, [20.0], None), memory_bound.make_point("b", 10 * MB, [4500.0], None)]
    assert memory_bound.fit_bandwidth(swapped)["gbs"] == pytest.approx(30.0)
    assert memory_bound.fit_bandwidth([]) is None


def test_fit_error_of_one_point_comes_from_its_samples():
    p = memory_bound.make_point("a", 1000 * MB, [9.0, 10.0, 11.0], None)
    fit = memory_bound.fit_bandwidth([p])
    logs = [math.log(x) for x in (9.0, 10.0, 11.0)]
    mean = sum(logs) / 3
    var = sum((x - mean) ** 2 for x in logs) / 2
    assert fit["gbs"] == pytest.approx(math.exp(mean))
    assert fit["u"] == pytest.approx(math.sqrt(var / 3))


def test_slope():
    pts = [memory_bound.make_point(n, b * MB, [1000.0 / b], None) for n, b in (("a", 1), ("b", 10), ("c", 100))]
    s = memory_bound.fit_slope(pts)
    assert s["slope"] == pytest.approx(-1.0) and s["se"] == pytest.approx(0.0, abs=1e-12) and s["n"] == 3
    assert memory_bound.fit_slope(pts[:1]) is None


def test_analyse_the_issue_widths():
    out = memory_bound.analyse(_smollm2())
    assert [s["outcome"] for s in out["steps"]] == [memory_bound.NOT_FASTER, memory_bound.LESS, memory_bound.FOLLOWS]
    # The line goes through the two widths of the step that followed the bytes: sqrt(26.82 × 26.99) GB/s.
    assert out["basis"] == ["f16", "f32"]
    assert out["fit"]["gbs"] == pytest.approx(math.sqrt(270.9 * 99 * 539.8 * 50) / 1e3, rel=1e-3)
    assert out["line"]["f32"]["on_line"] and out["line"]["f16"]["on_line"]
    assert out["line"]["q4_1"]["on_line"] is False and out["line"]["q4_1"]["residual"] < -0.5
    assert all("verdict" not in x for x in out["line"].values())  # the line names no verdict


def test_cache_resident_points_are_marked_and_kept_out_of_the_fit():
    # A 260 MiB last-level cache holds q4_1, q8_0 and f16 (258 MiB): only f32 is fitted.
    pts = _smollm2(llc=260 * 2**20)
    out = memory_bound.analyse(pts)
    assert all(out["line"][k] == {"on_line": None, "residual": None} for k in ("q4_1", "q8_0", "f16"))
    assert out["basis"] == ["f32"] and out["fit"]["gbs"] == pytest.approx(
        math.exp(sum(math.log(539.8e6 * t / 1e9) for t in (49.0, 50.0, 51.0)) / 3))
    # The step into f32 still says what the data show, marked as touching the cache.
    step = next(s for s in out["steps"] if s["wide"] == "f32")
    assert step["outcome"] == memory_bound.FOLLOWS and step["cache_resident"] is True
    # A cache-resident point far above the line does not drag the fit.
    fast = pts + [memory_bound.make_point("tiny", 5 * MB, [9000.0], 260 * 2**20, n_params=5)]
    assert memory_bound.analyse(fast)["fit"]["gbs"] == pytest.approx(out["fit"]["gbs"])


def test_points_judged_against_the_line():
    # A synthetic 1 GB q8_0 model at 20 GB/s lies below the 26.9 GB/s line of f16/f32; a 1.86 GB f16 at 27 on it.
    pts = _smollm2() + [_point("large-q8_0", 985.9 * MB, 20.0, n_params=9), _point("large-f16", 1855 * MB, 14.5, n_params=9)]
    out = memory_bound.analyse(pts)
    line = out["line"]
    assert line["large-f16"]["on_line"] is True  # 1855 MB × 14.5 = 26.9 GB/s
    assert line["large-q8_0"]["on_line"] is False and line["large-q8_0"]["residual"] < -0.2  # 19.7 GB/s
    step = next(s for s in out["steps"] if s["wide"] == "large-f16")
    assert step["outcome"] == memory_bound.LESS  # 1.88 × the bytes, 1.38 × faster
    assert out["basis"] == ["f16", "f32"]


def test_no_memory_bound_step_fits_every_point_beyond_the_cache():
    pts = [memory_bound.make_point(n, b * MB, [t], None) for n, b, t in (("a", 100, 100.0), ("b", 200, 50.0), ("c", 400, 20.0))]
    out = memory_bound.analyse(pts)  # no parameter counts: no steps
    assert out["steps"] == [] and out["basis"] == ["a", "b", "c"]
    assert out["fit"]["gbs"] == pytest.approx((10 * 10 * 8) ** (1 / 3))
    v = {k: x["on_line"] for k, x in out["line"].items()}
    # c: 8 vs 9.28 GB/s, −14% (|ln| = 0.148), beyond ±10% (0.0953) alone; but the line's standard error over three
    # scattered points is u = sqrt(var(ln 10, ln 10, ln 8) ÷ 3) = 0.0744, and 0.0953 + 2u = 0.244 covers it.
    assert out["fit"]["u"] == pytest.approx(0.0744, abs=5e-4)
    assert v == {"a": True, "b": True, "c": True}
    far = memory_bound.make_point("d", 800 * MB, [8.0], None)  # 6.4 GB/s: |ln(6.4 / 9.28)| = 0.372 > 0.244
    assert memory_bound.on_line(far, out["fit"]) == (False, pytest.approx(6.4 / out["fit"]["gbs"] - 1))


def test_fitting_in_the_cache_is_not_enough_to_be_cache_resident():
    # 200 MB of weights under a 260 MiB cache (272.6 MB). Memory's fastest sample: 30 GB/s.
    slow = memory_bound.make_point("f16", 200 * MB, [100.0, 110.0, 120.0], 260 * 2**20, memory_gbs_max=30.0)
    # slowest effective read 100 × 200 MB = 20 GB/s ≤ 30: read at memory speed, not resident.
    assert slow["fits_in_cache"] and not slow["cache_resident"]
    fast = memory_bound.make_point("q4", 200 * MB, [160.0, 170.0], 260 * 2**20, memory_gbs_max=30.0)
    # slowest effective read 160 × 200 MB = 32 GB/s > 30: only the cache delivers that.
    assert fast["fits_in_cache"] and fast["cache_resident"]
    big = memory_bound.make_point("f32", 400 * MB, [160.0], 260 * 2**20, memory_gbs_max=30.0)
    assert not big["fits_in_cache"] and not big["cache_resident"]
    assert memory_bound.make_point("no reading", 200 * MB, [1.0], 260 * 2**20)["cache_resident"]


def test_on_the_line_allows_for_the_uncertainty_of_the_fitted_bandwidth():
    # A line at 11.49 GB/s known to u = 0.0376 (its standard error, in log space); a point reading 10.12 GB/s is
    # 11.9% below: beyond ±10% alone (ln 1.1 = 0.0953 < |ln(10.12/11.49)| = 0.1270) but within
    # ±10% widened by two standard errors (0.0953 + 0.0752 = 0.1705).
    fit = {"gbs": 11.49, "u": 0.0376}
    p = memory_bound.make_point("large", 1000 * MB, [10.12, 10.12, 10.12], None)
    lies, residual = memory_bound.on_line(p, fit)
    assert lies and residual == pytest.approx(10.12 / 11.49 - 1)
    assert not memory_bound.on_line(p, {"gbs": 11.49, "u": 0.0})[0]
    # 20% below stays off the line: 0.2231 > 0.1705.
    assert not memory_bound.on_line(memory_bound.make_point("far", 1000 * MB, [9.19] * 3, None), fit)[0]


# --- more rules, each on points made by hand ---------------------------------------------------

def test_constants():
    assert memory_bound.GB == 1e9 and memory_bound.TOLERANCE == 0.10
    assert (memory_bound.FOLLOWS, memory_bound.NOT_FASTER, memory_bound.LESS, memory_bound.FASTER, memory_bound.UNCLEAR) == (
        "followed the bytes", "no faster", "faster, by less than the bytes", "faster than the bytes",
        "too spread to tell")
    # the outcomes describe a speed-up and name no verdict
    assert not any("bound" in o for o in (memory_bound.FOLLOWS, memory_bound.NOT_FASTER, memory_bound.LESS, memory_bound.FASTER,
                                          memory_bound.UNCLEAR))


def test_spread_by_hand():
    assert memory_bound.relative_range([2.0, 3.0]) == 0.5      # 3 ÷ 2 − 1
    assert memory_bound.relative_range([4.0, 5.0, 4.5]) == 0.25  # 5 ÷ 4 − 1
    assert memory_bound.relative_range([7.0]) == 0.0
    assert memory_bound.relative_range([0.0, 1.0]) == math.inf
    assert memory_bound.relative_range([0.5, 1.0]) == 1.0      # below 1 tokens/s is still a ratio: 1 ÷ 0.5 − 1


def test_make_point_by_hand():
    p = memory_bound.make_point("q8_0", 50 * MB, [110.0, 90.0, 100.0], llc_bytes=int(50 * MB), n_params=7, weight_type="q8_0",
                                memory_gbs_max=4.4)
    assert p == {"name": "q8_0", "bytes": 50e6, "n_params": 7, "weight_type": "q8_0", "samples": [110.0, 90.0, 100.0],
                 "median": 100.0, "min": 90.0, "max": 110.0,
                 "spread": pytest.approx(2 / 9),             # 110 ÷ 90 − 1
                 "robust_spread": pytest.approx(0.1),        # quartiles 95 and 105, ÷ 100
                 "outliers": [], "kept": [110.0, 90.0, 100.0],
                 "gbs": pytest.approx(5.0),                   # 100 × 50 MB
                 "gbs_min": pytest.approx(4.5), "gbs_max": pytest.approx(5.5),
                 "fits_in_cache": True,                       # 50 MB ≤ 50 MB
                 "cache_resident": True}                      # slowest 4.5 GB/s > 4.4
    # slowest read exactly at memory's fastest: not faster than memory, not resident
    at = memory_bound.make_point("x", 50 * MB, [90.0, 100.0], llc_bytes=int(50 * MB), memory_gbs_max=4.5)
    assert at["fits_in_cache"] and not at["cache_resident"]
    # one byte over the cache
    over = memory_bound.make_point("x", 50 * MB + 1, [90.0], llc_bytes=int(50 * MB))
    assert not over["fits_in_cache"] and not over["cache_resident"]
    for bad in ([], [1.0, 0.0], [-2.0]):
        with pytest.raises(ValueError, match="^x: decode samples must be positive$"):
            memory_bound.make_point("x", MB, bad, None)


def _one(name, mbytes, tps, n_params=1, llc=None, memory_gbs_max=None):
    return memory_bound.make_point(name, mbytes * MB, [tps], llc, n_params=n_params, memory_gbs_max=memory_gbs_max)


def test_step_outcome_by_hand():
    # 100 MB at 200/s, 200 MB at 100/s: R = 2, S = 2, effective GB/s 20 and 20: followed the bytes
    step = memory_bound.step_outcome(_one("n", 100, 200.0), _one("w", 200, 100.0))
    assert step == {"narrow": "n", "wide": "w", "bytes_ratio": 2.0, "speedup": 2.0, "gbs_ratio": 1.0, "allowance": 0.1,
                    "outcome": memory_bound.FOLLOWS, "cache_resident": False}
    # the edges are inside: |ln(S ÷ R)| = ln 1.25 with a tolerance of 0.25 is flat (S = 2.5, R = 2)
    assert memory_bound.step_outcome(_one("n", 100, 250.0), _one("w", 200, 100.0), tolerance=0.25)["outcome"] == memory_bound.FOLLOWS
    # ... and S = 1.25 = 1 + 0.25 is "not faster" (R = 4, far from flat): no faster
    assert memory_bound.step_outcome(_one("n", 100, 125.0), _one("w", 400, 100.0), tolerance=0.25)["outcome"] == memory_bound.NOT_FASTER
    # S = 1.5 < R = 4 beyond both edges: faster by less; S = 6 > R = 4 (S ÷ R = 1.5 > 1.25): faster than the bytes
    assert memory_bound.step_outcome(_one("n", 100, 150.0), _one("w", 400, 100.0), tolerance=0.25)["outcome"] == memory_bound.LESS
    assert memory_bound.step_outcome(_one("n", 100, 600.0), _one("w", 400, 100.0), tolerance=0.25)["outcome"] == memory_bound.FASTER
    # the allowance is the widest of the tolerance and both robust spreads: the wide point's 0.5 here
    # (quartiles 75 and 125 of 50, 75, 100, 125, 150, ÷ 100)
    wide = memory_bound.make_point("w", 200 * MB, [50.0, 75.0, 100.0, 125.0, 150.0], None, n_params=1)
    assert memory_bound.step_outcome(_one("n", 100, 200.0), wide)["allowance"] == 0.5


def test_a_step_touching_the_cache_is_marked_from_either_end():
    llc = int(150 * MB)
    resident = _one("n", 100, 200.0, llc=llc)
    assert resident["cache_resident"]
    assert memory_bound.step_outcome(resident, _one("w", 200, 100.0))["cache_resident"] is True
    assert memory_bound.step_outcome(_one("n", 100, 200.0), _one("w", 140, 150.0, llc=llc))["cache_resident"] is True
    assert memory_bound.step_outcome(_one("n", 100, 200.0), _one("w", 200, 100.0))["cache_resident"] is False


def test_width_steps_group_sort_and_order():
    pts = [_one("a-500", 500, 10.0, n_params=1), _one("b-400", 400, 10.0, n_params=2), _one("a-300", 300, 10.0, n_params=1),
           _one("b-100", 100, 10.0, n_params=2), _one("b-200", 200, 10.0, n_params=2), _one("solo", 50, 10.0, n_params=None)]
    steps = memory_bound.width_steps(pts)
    # steps join neighbours within a model, narrow to wide, and are listed by the narrow end's bytes
    assert [(s["narrow"], s["wide"]) for s in steps] == [("b-100", "b-200"), ("b-200", "b-400"), ("a-300", "a-500")]
    assert [s["bytes_ratio"] for s in steps] == [2.0, 2.0, pytest.approx(5 / 3)]
    assert memory_bound.width_steps([_one("only", 100, 1.0)]) == []


def test_fit_through_three_points_by_hand():
    # effective GB/s 10, 20 and 40 (100, 200 and 400 MB, 100 tokens/s each). tokens/s = L ÷ bytes with equal
    # relative weight is least squares in log space: ln L = mean(ln 10, ln 20, ln 40) = ln 20, so the line's
    # bandwidth L = 20 GB/s (not the decode-time model's B).
    pts = [_one("a", 100, 100.0), _one("b", 200, 100.0), _one("c", 400, 100.0)]
    fit = memory_bound.fit_bandwidth(pts)
    assert fit["gbs"] == pytest.approx(20.0)
    # u: the logs are ln 20 − ln 2, ln 20, ln 20 + ln 2; their variance (over n − 1 = 2) is (ln 2)² = 0.480453,
    # ÷ n = 0.160151; one sample each adds nothing; u = √0.160151 = 0.400189
    assert fit["u"] == pytest.approx(0.400189, abs=1e-6)
    # L × e^±u: e^0.400189 = 1.492106, so 20 ÷ 1.492106 = 13.40387 and 20 × 1.492106 = 29.84212
    assert fit["gbs_low"] == pytest.approx(13.40387, abs=1e-4) and fit["gbs_high"] == pytest.approx(29.84212, abs=1e-4)
    assert fit["points"] == ["a", "b", "c"] and fit["n"] == 3
    # not the plain least squares of tokens/s against 1 ÷ bytes through the origin, which the narrowest
    # point would dominate: Σxy ÷ Σx² with x = 10, 5, 2.5 /GB and y = 100 is 1750 ÷ 131.25 = 13.33 GB/s


def test_fit_error_adds_the_points_own_scatter():
    # two points at 10 and 40 GB/s as medians of samples e^±0.1 around them
    lo = math.exp(-0.1)
    pts = [memory_bound.make_point("a", 100 * MB, [100 * lo, 100.0, 100 / lo], None),
           memory_bound.make_point("b", 400 * MB, [100 * lo, 100.0, 100 / lo], None)]
    fit = memory_bound.fit_bandwidth(pts)
    assert fit["gbs"] == pytest.approx(20.0)  # √(10 × 40)
    # between: var(ln 10, ln 40) = (ln 4)² ÷ 2 = 0.960906, ÷ 2 points = 0.480453
    # within: each point's ln samples −0.1, 0, +0.1 around its mean: variance 0.01, ÷ 3 samples = 0.003333;
    # summed over both and ÷ n² = 4: 0.001667. u = √(0.480453 + 0.001667) = √0.482120 = 0.694349
    assert fit["u"] == pytest.approx(0.694349, abs=1e-6)


def test_fit_error_of_a_point_with_two_samples():
    # samples 100 e^−0.1 and 100 e^0.1 at 100 MB: ln GB/s = ln 10 ± 0.1, variance (over 1) 0.02, ÷ 2 samples = 0.01;
    # one point: nothing between points, u = √0.01 = 0.1, L = 10
    p = memory_bound.make_point("a", 100 * MB, [100 * math.exp(-0.1), 100 * math.exp(0.1)], None)
    fit = memory_bound.fit_bandwidth([p])
    assert fit["gbs"] == pytest.approx(10.0) and fit["u"] == pytest.approx(0.1)


def test_slope_of_four_points_by_hand():
    # ln bytes 0, 1, 2, 3 (mean 1.5, Sxx 2.25 + 0.25 + 0.25 + 2.25 = 5); ln tokens/s 0, −1, −2, −4 (mean −1.75)
    # Sxy = (−1.5)(1.75) + (−0.5)(0.75) + (0.5)(−0.25) + (1.5)(−2.25) = −6.5: k = −6.5 ÷ 5 = −1.3
    pts = [memory_bound.make_point(str(i), math.exp(i), [math.exp(y)], None) for i, y in ((0, 0.0), (1, -1.0), (2, -2.0), (3, -4.0))]
    s = memory_bound.fit_slope(pts)
    assert s["slope"] == pytest.approx(-1.3) and s["n"] == 4
    # residuals −0.2, 0.1, 0.4, −0.3: squares sum 0.30; se = √(0.30 ÷ (4 − 2) ÷ 5) = √0.03 = 0.173205
    assert s["se"] == pytest.approx(0.173205, abs=1e-6)


def test_slope_by_hand():
    # ln bytes 0, 1, 2 and ln tokens/s 0, −1, −3: mean x 1, mean y −4/3, Sxx 2, Sxy = −4/3 − 5/3 = −3: k = −1.5
    pts = [memory_bound.make_point(str(i), math.exp(i), [math.exp(y)], None) for i, y in ((0, 0.0), (1, -1.0), (2, -3.0))]
    s = memory_bound.fit_slope(pts)
    assert s["slope"] == pytest.approx(-1.5) and s["n"] == 3
    # residuals −1/6, 1/3, −1/6: sum of squares 1/6; se = √(1/6 ÷ (3 − 2) ÷ 2) = √(1/12) = 0.288675
    assert s["se"] == pytest.approx(0.288675, abs=1e-6)
    two = memory_bound.fit_slope(pts[:2])
    assert two == {"slope": pytest.approx(-1.0), "se": None, "n": 2}
    assert memory_bound.fit_slope([_one("a", 100, 1.0), _one("b", 100, 2.0)]) is None  # one size only


def test_on_line_by_hand():
    fit = {"gbs": 20.0, "u": 0.0}
    # 21 GB/s: ln 1.05 = 0.0488 ≤ ln 1.1 = 0.0953: on the line, residual +0.05
    lies, residual = memory_bound.on_line(_one("p", 210, 100.0), fit)
    assert lies and residual == pytest.approx(0.05)
    # 25 GB/s: ln 1.25 = 0.223 > 0.0953, off; with a tolerance of 0.25 exactly on the edge: on
    assert memory_bound.on_line(_one("p", 250, 100.0), fit) == (False, pytest.approx(0.25))
    assert memory_bound.on_line(_one("p", 250, 100.0), fit, tolerance=0.25)[0]
    # the point's own robust spread widens it: samples 60, 80, 100, 120, 140 (quartiles 80 and 120: 0.4),
    # median 100 -> 25 GB/s, ln 1.25 = 0.223 ≤ ln 1.4 = 0.336
    wide = memory_bound.make_point("p", 250 * MB, [60.0, 80.0, 100.0, 120.0, 140.0], None)
    assert memory_bound.on_line(wide, fit)[0]
    # The line's own error widens it by 2u: 25 GB/s with u = 0.07: 0.0953 + 0.14 = 0.2353 ≥ 0.2231
    assert memory_bound.on_line(_one("p", 250, 100.0), {"gbs": 20.0, "u": 0.07})[0]
    assert not memory_bound.on_line(_one("p", 250, 100.0), {"gbs": 20.0, "u": 0.06})[0]  # 0.0953 + 0.12 = 0.2153 < 0.2231
    # symmetric in log space: 16 GB/s is ln 0.8 = −0.223 below
    assert memory_bound.on_line(_one("p", 160, 100.0), fit) == (False, pytest.approx(-0.2))


def test_analyse_line_through_a_memory_bound_step_and_points_off_it():
    pts = [_one("m-100", 100, 200.0), _one("m-200", 200, 100.0),   # 20 and 20 GB/s, R = S = 2: followed the bytes
           _one("above", 50, 600.0, n_params=None),               # 30 GB/s
           _one("below", 400, 25.0, n_params=None),               # 10 GB/s
           _one("near", 300, 70.0, n_params=None)]                # 21 GB/s
    out = memory_bound.analyse(pts)
    assert out["basis"] == ["m-100", "m-200"] and out["fit"]["gbs"] == pytest.approx(20.0) and out["fit"]["u"] == 0.0
    assert out["tolerance"] == 0.10 and [s["outcome"] for s in out["steps"]] == [memory_bound.FOLLOWS]
    v = out["line"]
    assert v["above"] == {"on_line": False, "residual": pytest.approx(0.5)}
    assert v["below"] == {"on_line": False, "residual": pytest.approx(-0.5)}
    assert v["near"] == {"on_line": True, "residual": pytest.approx(0.05)}
    assert v["m-100"] == v["m-200"] == {"on_line": True, "residual": pytest.approx(0.0)}
    assert out["slope"]["n"] == 5


def test_analyse_without_a_memory_bound_step_leaves_out_the_narrow_end():
    # a (100 MB, 120/s) to b (200 MB, 100/s): S = 1.2, R = 2: faster by less than the bytes; a is held back
    pts = [_one("a", 100, 120.0), _one("b", 200, 100.0), _one("c", 400, 50.0, n_params=None)]  # b and c: 20 GB/s
    out = memory_bound.analyse(pts)
    assert out["basis"] == ["b", "c"] and out["fit"]["gbs"] == pytest.approx(20.0)
    v = out["line"]
    assert out["steps"][0]["outcome"] == memory_bound.LESS
    assert v["a"] == {"on_line": False, "residual": pytest.approx(-0.4)}  # 12 ÷ 20 − 1
    assert v["b"]["on_line"] is v["c"]["on_line"] is True


def test_analyse_falls_back_to_every_point_beyond_the_cache():
    # b fits a 1 GB cache and reads at 30 GB/s, above memory's 25: resident. a reads at 12 GB/s, at memory speed.
    # The step a -> b: S = 120/150 = 0.8, no faster, so a is held back, and a is all there is.
    a = _one("a", 100, 120.0, llc=int(1000 * MB), memory_gbs_max=25.0)
    b = _one("b", 200, 150.0, llc=int(1000 * MB), memory_gbs_max=25.0)
    assert not a["cache_resident"] and b["cache_resident"]
    out = memory_bound.analyse([a, b])
    assert out["basis"] == ["a"] and out["fit"]["gbs"] == pytest.approx(12.0)
    assert out["steps"][0]["outcome"] == memory_bound.NOT_FASTER and out["line"]["a"]["on_line"] is True
    assert out["line"]["b"] == {"on_line": None, "residual": None}
    assert out["steps"][0]["cache_resident"] is True
    # every point resident: no fit, no slope
    only = memory_bound.analyse([b])
    assert only["fit"] is None and only["slope"] is None and only["basis"] == []
