"""Lesson 7 replayed from its recorded run: the roofline arithmetic and the batching sums."""

from __future__ import annotations

from collections import defaultdict

import pytest
from lessonkit import recorded_exchanges, run_bandwidth

from bytesup import published
from bytesup.records import Timings, decode_tokens_per_s

LESSON = "07_hardware_fit"


def col(table, name: str) -> int:
    return [c.name for c in table.columns].index(name)


def test_ridge_is_flops_over_bandwidth(result):
    t = result.table("rooflines")
    peak, bw, ridge = col(t, "peak compute"), col(t, "memory bandwidth"), col(t, "ridge point")
    for row in t.rows:
        if row[peak] is not None:
            assert row[ridge] == pytest.approx(row[peak] / row[bw])  # GFLOP/s ÷ GB/s = FLOPs per byte
    host = next(r for r in t.rows if r[0] == "this host's CPU")
    h100 = next(r for r in t.rows if r[0] == "H100")
    spark = next(r for r in t.rows if r[0] == published.SPARK_NAME)
    assert h100[peak] == published.H100["peak_flop_s"] / 1e9
    assert h100[ridge] == pytest.approx(published.H100["ridge_flops_per_byte"], abs=0.5)
    # The course gives the Spark's bandwidth only: a decode ceiling, no compute ceiling and no ridge.
    assert spark[peak] is None and spark[ridge] is None and spark[bw] == published.SPARK_BANDWIDTH_GB_PER_S
    n_bytes = _served_meta()["size"]
    ceiling = next(c.name for c in t.columns if c.name.startswith("decode ceiling, "))  # named after the served model
    for row in t.rows:
        assert row[col(t, ceiling)] == pytest.approx(row[bw] * 1e9 / n_bytes)
    assert host[peak] == pytest.approx(result.measurement("matmul_peak_gflop_per_s").median)
    assert host[bw] == pytest.approx(result.measurement("read_bandwidth_gb_per_s").median)
    assert result.measurement("ridge_point_flops_per_byte").samples == [pytest.approx(host[ridge])]
    # The host values the replay used are the recorded measurements.
    assert run_bandwidth(LESSON, result)["gb_per_s"]["median"] == pytest.approx(host[bw])


def _served_meta():
    """The /v1/models meta of the recorded run: the lesson's parameter count and weight bytes."""
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/v1/models":
            return e["response"]["data"][0]["meta"]
    raise AssertionError("no /v1/models exchange")


def test_decode_intensity_and_attainable(result):
    meta = _served_meta()
    roof = result.table("rooflines")
    host = next(r for r in roof.rows if r[0] == "this host's CPU")
    peak_gflops, bw_gbs, ridge = host[2], host[3], host[4]
    h100_ridge = next(r for r in roof.rows if r[0] == "H100")[4]
    t = result.table("roofline_points")
    n, inten, att, bound_here = col(t, "tokens per weight read"), col(t, "arithmetic intensity"), \
        col(t, "attainable on this CPU"), col(t, "bound on this CPU")
    N, reads = col(t, "prompt tokens"), col(t, "weight reads")
    decode = t.rows[0]
    assert decode[n] == 1
    assert decode[inten] == pytest.approx(2 * meta["n_params"] / meta["size"])
    for row in t.rows:
        # llama.cpp's default n_ubatch of 512: a prefill of N tokens reads the weights ceil(N / 512) times.
        assert row[reads] == -(-row[N] // 512)
        assert row[n] == pytest.approx(row[N] / row[reads])
        assert row[inten] == pytest.approx(row[n] * decode[inten])
        assert row[att] == pytest.approx(min(peak_gflops, row[inten] * bw_gbs))
        assert row[bound_here] == ("memory" if row[inten] < ridge else "compute")
        assert row[col(t, "bound on H100")] == ("memory" if row[inten] < h100_ridge else "compute")
        tokens_s = row[col(t, "roofline speed on this CPU")]
        assert tokens_s == pytest.approx(row[att] * 1e9 / (2 * meta["n_params"]))
    assert "bound on DGX Spark" not in [c.name for c in t.columns]
    assert {r[N] for r in t.rows} >= {1, 16, 128, 512, 2048}
    assert next(r for r in t.rows if r[N] == 2048)[reads] == 4


def _recorded_completions():
    """Completions of the recorded run, grouped by server label and repeat (from the seed)."""
    by = defaultdict(list)
    for e in recorded_exchanges(LESSON):
        if e["path"] == "/completion":
            P = int(e["server"].split("-")[1])
            r = (e["request"]["seed"] - 7000 - 1000 * P) // 100
            by[(P, r)].append(e)
    return by


def test_aggregate_is_tokens_over_wall_time(result):
    t = result.table("batching")
    groups = _recorded_completions()
    levels = [r[0] for r in t.rows]
    assert levels == [1, 2, 4, 8]
    for P in levels:
        walls = [result.host_values[f"batch_wall_s_p{P}_r{r}"] for r in range(result.host_values["repeat"])]
        agg = next(m for m in result.measurements
                   if m.name == "batch_aggregate_decode_tokens_per_s" and m.settings == {"parallel": P})
        per_seq = next(m for m in result.measurements
                       if m.name == "batch_per_sequence_decode_tokens_per_s" and m.settings == {"parallel": P})
        expected, speeds = [], []
        for r, wall in enumerate(walls):
            batch = groups[(P, r)]
            assert len(batch) == P  # P distinct requests per batch
            assert sorted(e["request"]["id_slot"] for e in batch) == list(range(P))
            assert all(e["request"]["temperature"] == 0 and e["request"]["cache_prompt"] is False for e in batch)
            expected.append(sum(e["response"]["timings"]["predicted_n"] for e in batch) / wall)
            speeds += [decode_tokens_per_s(Timings(**e["response"]["timings"])) for e in batch]
        assert agg.samples == pytest.approx(expected)
        assert sorted(per_seq.samples) == pytest.approx(sorted(speeds))
        row = next(x for x in t.rows if x[0] == P)
        assert row[col(t, "tokens generated (responses)")] == sum(
            e["response"]["timings"]["predicted_n"] for r in range(len(walls)) for e in groups[(P, r)])
        # The /metrics counter agrees with the responses.
        assert row[col(t, "tokens_predicted_total Δ (/metrics)")] == row[col(t, "tokens generated (responses)")]
        # One baseline for both ratios: one sequence alone (the per-sequence median at P = 1).
        baseline = t.rows[0][col(t, "per sequence")]
        assert row[col(t, "aggregate ÷ baseline")] == pytest.approx(row[col(t, "aggregate decode")] / baseline)
        assert row[col(t, "per sequence ÷ baseline")] == pytest.approx(row[col(t, "per sequence")] / baseline)
        # The step's intensity comes from the tokens per llama_decode call /metrics reports, not from P.
        per_call = row[col(t, "tokens per llama_decode call")]
        if per_call is not None:
            decode_i = 2 * _served_meta()["n_params"] / _served_meta()["size"]
            assert row[col(t, "intensity of one step")] == pytest.approx(per_call * decode_i)


def test_plots(result):
    names = {p.name: p for p in result.plots}
    assert names["roofline"].log_x and names["roofline"].log_y
    assert {s.label.split(":")[0] for s in names["roofline"].series} >= {"roofline", "decode (N = 1)", "prefill (N tokens)"}
    assert [s.x for s in names["batching"].series][0] == [1, 2, 4, 8]


# --- pure helpers --------------------------------------------------------------------------

def test_helpers(lesson):
    assert lesson.decode_intensity(6.74e9, 7.16e9) == pytest.approx(2 * 6.74 / 7.16)
    assert lesson.attainable_flop_s(2.0, 100.0, 10.0) == 20.0
    assert lesson.attainable_flop_s(50.0, 100.0, 10.0) == 100.0
    assert lesson.bound(1.9, 5.0) == "memory" and lesson.bound(5.0, 5.0) == "compute"
    assert lesson.tokens_to_cross(295.2, 1.88) == 158
    assert lesson.tokens_to_cross(1.0, 2.0) == 1
    assert lesson.aggregate_tokens_per_s([64, 64], 0.5) == 256.0
    assert lesson.parallel_levels(1) == [1]
    assert lesson.parallel_levels(6) == [1, 2, 4, 6]
    assert lesson.parallel_levels(32) == [1, 2, 4, 8, 16, 32]


def test_batch_verdict_follows_the_numbers(lesson):
    # columns used: 0 P, 4 aggregate, 7 per sequence, 10 aggregate ÷ the baseline (one sequence alone)
    def row(P, agg, per, ratio):
        r = [None] * 17
        r[0], r[4], r[7], r[10] = P, agg, per, ratio
        return r

    paid = lesson._batch_verdict([row(1, 100, 100, 1.0), row(4, 300, 75, 3.0)])
    assert paid.startswith("Batching paid") and "3.00" in paid and "P = 4" in paid
    flat = lesson._batch_verdict([row(1, 100, 100, 1.0), row(4, 105, 26, 1.05)])
    assert flat.startswith("Batching did not pay") and "×1.05 at P = 4" in flat
    # Only what the numbers show: no cause is offered.
    assert "cost" not in flat and "because" not in flat


def test_spread_note(lesson):
    def row(P, lo, hi):
        r = [None] * 17
        r[0], r[5], r[6] = P, lo, hi
        return r

    assert lesson._spread_note([row(1, 100, 110), row(2, 200, 220)]) is None
    note = lesson._spread_note([row(1, 100, 110), row(8, 100, 400)])
    assert "P = 8: 100–400" in note and "P = 1" not in note


def test_batch_row_intensity_from_metrics(lesson):
    b = {"walls": [0.5, 0.5], "generated": [[64, 64], [64, 64]], "d_pred": 256.0, "d_dec": 160.0}
    agg, per = {"median": 256.0, "min": 250.0, "max": 260.0}, {"median": 90.0, "min": 80.0, "max": 95.0}
    row = lesson.batch_row(2, b, agg, per, baseline=100.0, dec_i=2.0, ridge=5.0)
    # 256 tokens over 160 llama_decode calls: 1.6 tokens per call, intensity 1.6 × 2 = 3.2 FLOPs/byte.
    assert row[14] == pytest.approx(1.6) and row[15] == pytest.approx(3.2) and row[16] == "memory"
    assert row[10] == pytest.approx(2.56) and row[11] == pytest.approx(0.9)
    no_metrics = lesson.batch_row(2, {**b, "d_pred": None, "d_dec": None}, agg, per, 100.0, 2.0, 5.0)
    assert no_metrics[14] is None and no_metrics[15] is None and no_metrics[16] is None


def test_decode_attention_intensity(lesson):
    # One head, S = 4,096 positions of width 128: 4·S·d FLOPs on 2·S·d FP16 numbers (4·S·d bytes).
    a = lesson.attention_intensity(4096, 128)
    assert a["flops"] == 4 * 4096 * 128 == a["bytes"] and a["flops_per_byte"] == pytest.approx(1.0)
    assert lesson.attention_intensity(4096, 128, group=8)["flops_per_byte"] == pytest.approx(8.0)
