"""The capstone's verdict rules on hand-made points, expected values worked by hand."""

from __future__ import annotations

import math

import pytest

from bytesup import sweep

MB = 1e6
LLC_32MIB = 32 * 2**20

# The four widths of SmolLM2-135M as llama-bench measured them on 2 threads (the issue's table):
# bytes per token and tokens/s, repeated three times with a ±2% scatter.
WIDTHS = {"q4_1": (98.4 * MB, 125.0), "q8_0": (144.8 * MB, 141.0), "f16": (270.9 * MB, 99.0), "f32": (539.8 * MB, 50.0)}


def _point(name, nbytes, tps, llc=LLC_32MIB, n_params=134_515_008, scatter=0.02):
    return sweep.make_point(name, nbytes, [tps * (1 - scatter), tps, tps * (1 + scatter)], llc, n_params=n_params)


def _smollm2(llc=LLC_32MIB):
    return [_point(n, b, t, llc) for n, (b, t) in WIDTHS.items()]


def test_point_effective_bandwidth_and_cache_mark():
    p = sweep.make_point("x", 100 * MB, [40.0, 50.0, 60.0], llc_bytes=200 * MB)
    assert p["median"] == 50.0 and p["gbs"] == pytest.approx(5.0)  # 100 MB × 50 /s
    assert p["gbs_min"] == pytest.approx(4.0) and p["gbs_max"] == pytest.approx(6.0)
    assert p["spread"] == pytest.approx(0.5) and p["cache_resident"] is True
    assert sweep.make_point("y", 300 * MB, [1.0], llc_bytes=200 * MB)["cache_resident"] is False
    assert sweep.make_point("z", 300 * MB, [1.0], llc_bytes=None)["cache_resident"] is False
    with pytest.raises(ValueError):
        sweep.make_point("bad", 1.0, [], None)


def test_steps_of_the_issue():
    steps = {s["narrow"]: s for s in sweep.width_steps(_smollm2())}
    # f16 -> f32: 539.8/270.9 = 1.993 × the bytes, 99/50 = 1.98 × the speed: flat effective GB/s.
    assert steps["f16"]["verdict"] == sweep.MEMORY
    assert steps["f16"]["bytes_ratio"] == pytest.approx(1.9926, rel=1e-4)
    assert steps["f16"]["speedup"] == pytest.approx(1.98)
    # q8_0 -> f16: 1.871 × the bytes, only 141/99 = 1.424 × faster: partly memory-bound.
    assert steps["q8_0"]["verdict"] == sweep.PARTLY
    assert steps["q8_0"]["gbs_ratio"] == pytest.approx(1.4242 / 1.8708, rel=1e-3)
    # q4_1 -> q8_0: fewer bytes, but 125 < 141 tokens/s: compute-bound.
    assert steps["q4_1"]["verdict"] == sweep.COMPUTE
    assert steps["q4_1"]["speedup"] == pytest.approx(125 / 141)


def test_step_inconclusive_when_spread_exceeds_the_ratio():
    a = sweep.make_point("narrow", 100 * MB, [80.0, 120.0], None, n_params=1)   # spread 50%
    b = sweep.make_point("wide", 120 * MB, [90.0, 100.0], None, n_params=1)
    step = sweep.step_verdict(a, b)
    # allowance 0.5: flat (|ln(1.0526/1.2)| = 0.131 <= ln 1.5) and not faster (1.0526 <= 1.5).
    assert step["allowance"] == pytest.approx(0.5) and step["verdict"] == sweep.INCONCLUSIVE


def test_step_faster_than_the_bytes():
    a = sweep.make_point("narrow", 100 * MB, [300.0], None, n_params=1)
    b = sweep.make_point("wide", 200 * MB, [100.0], None, n_params=1)
    assert sweep.step_verdict(a, b)["verdict"] == sweep.FASTER  # 3 × faster for 2 × fewer bytes


def test_steps_only_between_widths_of_one_model():
    pts = _smollm2() + [_point("large-q8_0", 985.9 * MB, 20.0, n_params=927_541_248)]
    names = {(s["narrow"], s["wide"]) for s in sweep.width_steps(pts)}
    assert names == {("q4_1", "q8_0"), ("q8_0", "f16"), ("f16", "f32")}


def test_fit_is_the_geometric_mean_of_effective_bandwidth():
    # Two exact points at 20 and 45 GB/s: B = sqrt(20 × 45) = 30 GB/s, equal weight for each.
    pts = [sweep.make_point("a", 10 * MB, [2000.0], None), sweep.make_point("b", 1000 * MB, [45.0], None)]
    fit = sweep.fit_bandwidth(pts)
    assert fit["gbs"] == pytest.approx(30.0)
    # One standard error: sd of ln 20, ln 45 over sqrt(2) = |ln 45 − ln 20| / 2.
    assert fit["u"] == pytest.approx(abs(math.log(45 / 20)) / 2)
    assert fit["gbs_low"] == pytest.approx(30 * math.exp(-fit["u"]))
    # The smallest point does not dominate: swapping which one is small leaves B unchanged.
    swapped = [sweep.make_point("a", 1000 * MB, [20.0], None), sweep.make_point("b", 10 * MB, [4500.0], None)]
    assert sweep.fit_bandwidth(swapped)["gbs"] == pytest.approx(30.0)
    assert sweep.fit_bandwidth([]) is None


def test_fit_error_of_one_point_comes_from_its_samples():
    p = sweep.make_point("a", 1000 * MB, [9.0, 10.0, 11.0], None)
    fit = sweep.fit_bandwidth([p])
    logs = [math.log(x) for x in (9.0, 10.0, 11.0)]
    mean = sum(logs) / 3
    var = sum((x - mean) ** 2 for x in logs) / 2
    assert fit["gbs"] == pytest.approx(math.exp(mean))
    assert fit["u"] == pytest.approx(math.sqrt(var / 3))


def test_slope():
    pts = [sweep.make_point(n, b * MB, [1000.0 / b], None) for n, b in (("a", 1), ("b", 10), ("c", 100))]
    s = sweep.fit_slope(pts)
    assert s["slope"] == pytest.approx(-1.0) and s["se"] == pytest.approx(0.0, abs=1e-12) and s["n"] == 3
    assert sweep.fit_slope(pts[:1]) is None


def test_analyse_the_issue_widths():
    out = sweep.analyse(_smollm2())
    v = {k: x["verdict"] for k, x in out["verdicts"].items()}
    assert v == {"q4_1": sweep.COMPUTE, "q8_0": sweep.PARTLY, "f16": sweep.MEMORY, "f32": sweep.MEMORY}
    # The line goes through the memory-bound step's two widths: B = sqrt(26.82 × 26.99) GB/s.
    assert out["basis"] == ["f16", "f32"]
    assert out["fit"]["gbs"] == pytest.approx(math.sqrt(270.9 * 99 * 539.8 * 50) / 1e3, rel=1e-3)
    assert out["verdicts"]["f32"]["on_line"] and out["verdicts"]["f16"]["on_line"]
    assert out["verdicts"]["q4_1"]["on_line"] is False and out["verdicts"]["q4_1"]["residual"] < -0.5


def test_cache_resident_points_are_marked_and_kept_out_of_the_fit():
    # A 260 MiB last-level cache holds q4_1, q8_0 and f16 (258 MiB): only f32 is fitted.
    pts = _smollm2(llc=260 * 2**20)
    out = sweep.analyse(pts)
    v = {k: x["verdict"] for k, x in out["verdicts"].items()}
    assert v["q4_1"] == v["q8_0"] == v["f16"] == "cache-resident"
    assert out["basis"] == ["f32"] and out["fit"]["gbs"] == pytest.approx(
        math.exp(sum(math.log(539.8e6 * t / 1e9) for t in (49.0, 50.0, 51.0)) / 3))
    # The step into f32 still says what the data show, marked as touching the cache.
    step = next(s for s in out["steps"] if s["wide"] == "f32")
    assert step["verdict"] == sweep.MEMORY and step["cache_resident"] is True
    # A cache-resident point far above the line does not drag the fit.
    fast = pts + [sweep.make_point("tiny", 5 * MB, [9000.0], 260 * 2**20, n_params=5)]
    assert sweep.analyse(fast)["fit"]["gbs"] == pytest.approx(out["fit"]["gbs"])


def test_points_judged_against_the_line():
    # A synthetic 1 GB q8_0 model at 20 GB/s lies below the 26.9 GB/s line of f16/f32; a 1.86 GB f16 at 27 on it.
    pts = _smollm2() + [_point("large-q8_0", 985.9 * MB, 20.0, n_params=9), _point("large-f16", 1855 * MB, 14.5, n_params=9)]
    out = sweep.analyse(pts)
    v = {k: x["verdict"] for k, x in out["verdicts"].items()}
    assert v["large-f16"] == sweep.MEMORY  # its step from large-q8_0 is partly; it is the wide end, on the line
    assert v["large-q8_0"] == sweep.PARTLY  # 1.88 × the bytes, 1.38 × faster
    assert out["basis"] == ["f16", "f32"]


def test_no_memory_bound_step_fits_every_point_beyond_the_cache():
    pts = [sweep.make_point(n, b * MB, [t], None) for n, b, t in (("a", 100, 100.0), ("b", 200, 50.0), ("c", 400, 20.0))]
    out = sweep.analyse(pts)  # no parameter counts: no steps
    assert out["steps"] == [] and out["basis"] == ["a", "b", "c"]
    assert out["fit"]["gbs"] == pytest.approx((10 * 10 * 8) ** (1 / 3))
    v = {k: x["verdict"] for k, x in out["verdicts"].items()}
    # c: 8 vs 9.28 GB/s, −14% (|ln| = 0.148), beyond ±10% (0.0953) alone; but B's standard error over three
    # scattered points is u = sqrt(var(ln 10, ln 10, ln 8) ÷ 3) = 0.0744, and 0.0953 + 2u = 0.244 covers it.
    assert out["fit"]["u"] == pytest.approx(0.0744, abs=5e-4)
    assert v == {"a": sweep.MEMORY, "b": sweep.MEMORY, "c": sweep.MEMORY}
    far = sweep.make_point("d", 800 * MB, [8.0], None)  # 6.4 GB/s: |ln(6.4 / 9.28)| = 0.372 > 0.244
    assert sweep.on_line(far, out["fit"]) == (False, pytest.approx(6.4 / out["fit"]["gbs"] - 1))


def test_fitting_in_the_cache_is_not_enough_to_be_cache_resident():
    # 200 MB of weights under a 260 MiB cache (272.6 MB). Memory's fastest sample: 30 GB/s.
    slow = sweep.make_point("f16", 200 * MB, [100.0, 110.0, 120.0], 260 * 2**20, memory_gbs_max=30.0)
    # slowest effective read 100 × 200 MB = 20 GB/s ≤ 30: read at memory speed, not resident.
    assert slow["fits_in_cache"] and not slow["cache_resident"]
    fast = sweep.make_point("q4", 200 * MB, [160.0, 170.0], 260 * 2**20, memory_gbs_max=30.0)
    # slowest effective read 160 × 200 MB = 32 GB/s > 30: only the cache delivers that.
    assert fast["fits_in_cache"] and fast["cache_resident"]
    big = sweep.make_point("f32", 400 * MB, [160.0], 260 * 2**20, memory_gbs_max=30.0)
    assert not big["fits_in_cache"] and not big["cache_resident"]
    assert sweep.make_point("no reading", 200 * MB, [1.0], 260 * 2**20)["cache_resident"]


def test_on_the_line_allows_for_the_uncertainty_of_the_fitted_bandwidth():
    # B = 11.49 GB/s known to u = 0.0376 (its standard error, in log space); a point reading 10.12 GB/s is
    # 11.9% below: beyond ±10% alone (ln 1.1 = 0.0953 < |ln(10.12/11.49)| = 0.1270) but within
    # ±10% widened by two standard errors (0.0953 + 0.0752 = 0.1705).
    fit = {"gbs": 11.49, "u": 0.0376}
    p = sweep.make_point("large", 1000 * MB, [10.12, 10.12, 10.12], None)
    lies, residual = sweep.on_line(p, fit)
    assert lies and residual == pytest.approx(10.12 / 11.49 - 1)
    assert not sweep.on_line(p, {"gbs": 11.49, "u": 0.0})[0]
    # 20% below stays off the line: 0.2231 > 0.1705.
    assert not sweep.on_line(sweep.make_point("far", 1000 * MB, [9.19] * 3, None), fit)[0]
