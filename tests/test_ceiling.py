"""The bandwidth ceiling (bytesup.course.ceiling), against numbers worked by hand."""

from __future__ import annotations

import pytest

from bytesup.course import ceiling


def test_published_example_by_hand():
    # 273 GB/s ÷ 7.16e9 bytes per token = 273 / 7.16 = 38.128 tokens/s; 33.2 ÷ 38.128 = 0.8707 → 87.07%.
    c = ceiling.bandwidth_ceiling(7.16e9, [273.0], host_applies=True)
    assert c.ceilings == pytest.approx((38.1285,), abs=1e-4)
    assert c.median == pytest.approx(38.1285, abs=1e-4)
    eff = ceiling.decode_efficiency(c, [33.2])
    assert eff.host == pytest.approx((87.07,), abs=0.01)
    assert eff.given is None
    assert ceiling.ceiling_at(273.0, 7.16e9) == pytest.approx(38.1285, abs=1e-4)


def test_each_sample_gives_its_ceiling_and_decode_is_over_the_median():
    # 1e8 bytes per token: 10, 12, 11 GB/s → 100, 120, 110 tokens/s; median 110.
    c = ceiling.bandwidth_ceiling(1e8, [10.0, 12.0, 11.0], host_applies=True)
    assert c.ceilings == pytest.approx((100.0, 120.0, 110.0))
    assert c.median == pytest.approx(110.0)
    assert c.spread == ceiling.Spread(pytest.approx(110.0), pytest.approx(100.0), pytest.approx(120.0))
    assert c.bandwidth == ceiling.Spread(11.0, 10.0, 12.0)
    # decode 55 and 88 tokens/s over 110: 50% and 80%.
    eff = ceiling.decode_efficiency(c, [55.0, 88.0])
    assert eff.decode == (55.0, 88.0)
    assert eff.host == pytest.approx((50.0, 80.0))


def test_given_bandwidth_and_a_host_that_does_not_apply():
    # The host's 10 GB/s does not bound the server: no efficiency against it. Given 20 GB/s ÷ 1e8 = 200 tokens/s;
    # decode 55 and 88 → 27.5% and 44%.
    c = ceiling.bandwidth_ceiling(1e8, [10.0], host_applies=False, given_gbs=20)
    assert c.given_gbs == 20.0
    assert c.given_ceiling == pytest.approx(200.0)
    assert c.ceilings == pytest.approx((100.0,))
    eff = ceiling.decode_efficiency(c, [55.0, 88.0])
    assert eff.host is None
    assert eff.given == pytest.approx((27.5, 44.0))


def test_sources_are_the_given_row_then_median_min_max():
    c = ceiling.bandwidth_ceiling(2e8, [10.0, 30.0, 20.0], host_applies=True, given_gbs=50.0)
    rows = c.sources()
    # 50 GB/s ÷ 2e8 = 250; 20, 10, 30 GB/s ÷ 2e8 = 100, 50, 150 tokens/s.
    assert [r.label for r in rows] == ["given (--bandwidth-gbs)", "this host, measured (median)",
                                       "this host, measured (min)", "this host, measured (max)"]
    assert [r.bandwidth_gbs for r in rows] == [50.0, 20.0, 10.0, 30.0]
    assert [r.tokens_per_s for r in rows] == pytest.approx([250.0, 100.0, 50.0, 150.0])
    elsewhere = ceiling.bandwidth_ceiling(2e8, [10.0], host_applies=False).sources()
    assert [r.label for r in elsewhere] == [f"this host, measured ({s}, CPU decode here, not the server)"
                                           for s in ("median", "min", "max")]


def test_the_server_bandwidth_prefers_the_given_one():
    given = ceiling.server_bandwidth(12.0, host_applies=True, given_gbs=273)
    assert given == ceiling.BandwidthReference(273.0, "given with --bandwidth-gbs", host_cpu=False)
    host = ceiling.server_bandwidth(12.0, host_applies=True, given_gbs=None)
    assert host is not None and host.gbs == 12.0 and host.host_cpu
    assert ceiling.server_bandwidth(12.0, host_applies=False, given_gbs=None) is None
    assert ceiling.server_bandwidth(None, host_applies=True, given_gbs=None) is None


def test_effective_bandwidth():
    # 100 tokens/s × 1e8 bytes = 1e10 bytes/s = 10 GB/s; 33.2 × 7.16e9 = 237.7 GB/s.
    assert ceiling.effective_gbs(100.0, 1e8) == pytest.approx(10.0)
    assert ceiling.effective_gbs(33.2, 7.16e9) == pytest.approx(237.712)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        ceiling.bandwidth_ceiling(0, [10.0], host_applies=True)
    with pytest.raises(ValueError):
        ceiling.bandwidth_ceiling(1e8, [10.0], host_applies=True, given_gbs=0)
    with pytest.raises(ValueError):
        ceiling.Spread.of([])


def test_bad_inputs_are_refused_with_the_value_named():
    with pytest.raises(ValueError, match=r"^bytes per token must be positive, not -1$"):
        ceiling.bandwidth_ceiling(-1, [10.0], host_applies=True)
    with pytest.raises(ValueError, match=r"^a given bandwidth must be positive, not 0$"):
        ceiling.bandwidth_ceiling(1e8, [10.0], host_applies=True, given_gbs=0)
    with pytest.raises(ValueError, match=r"^a spread needs at least one sample$"):
        ceiling.Spread.of([])


def test_small_but_positive_inputs_are_accepted():
    # Half a byte per token at 1 GB/s: 1e9 ÷ 0.5 = 2e9 tokens/s; a given 0.5 GB/s: 0.5e9 ÷ 0.5 = 1e9.
    c = ceiling.bandwidth_ceiling(0.5, [1.0], host_applies=True, given_gbs=0.5)
    assert c.ceilings == pytest.approx((2e9,)) and c.given_ceiling == pytest.approx(1e9)


def test_a_ceiling_without_a_given_bandwidth_has_no_given_row():
    c = ceiling.Ceiling(1e8, (10.0,), (100.0,), host_applies=True)
    assert c.given_gbs is None and c.given_ceiling is None
    assert [r.label for r in c.sources()][0] == "this host, measured (median)"
    # A given bandwidth without its ceiling is no row either: 3 rows, the host's.
    half = ceiling.Ceiling(1e8, (10.0,), (100.0,), host_applies=True, given_gbs=20.0)
    assert len(half.sources()) == 3


def test_the_host_reference_is_labelled_as_the_runs_reading():
    host = ceiling.server_bandwidth(12.0, host_applies=True, given_gbs=None)
    assert host == ceiling.BandwidthReference(12.0, "this host's CPU read (the run's reading)", host_cpu=True)


def test_token_work_is_two_flops_per_weight_over_the_bytes_read():
    # 134,515,008 parameters (SmolLM2-135M) in 96,576,768 bytes of Q4_1 tensors:
    # 2 × 134,515,008 = 269,030,016 FLOPs per token; ÷ 96,576,768 bytes = 2.785660 FLOPs per byte.
    work = ceiling.token_work(134_515_008, 96_576_768)
    assert (work.params, work.bytes) == (134_515_008, 96_576_768)
    assert work.flops == 269_030_016
    assert work.flops_per_byte == pytest.approx(2.785660, rel=1e-6)
    # 50 M weights in 100 MB (two bytes each): 1e8 FLOPs, one FLOP per byte.
    assert ceiling.token_work(50_000_000, 100_000_000).flops_per_byte == 1.0
