"""Lesson 7: the roofline arithmetic and the batching sums, on hand-made numbers worked out here and
replayed from its recorded run."""

from __future__ import annotations

from collections import defaultdict

import pytest
from lessonkit import QueuedServer, hand_context, recorded_exchanges, run_bandwidth

from bytesup.course import formulas, published
from bytesup.course.ceiling import Spread
from bytesup.llama.responses import Completion, Timings, decode_tokens_per_s
from bytesup.store.facts.lesson07 import (BatchRow, BatchRun, BoundRidge, HostCeilings, RooflinePoint, _delta, blas_text,
                                          attention_intensity, batch_level, batch_row, bound_ridge, ceilings,
                                          decode_attention_cases, engine_roof_gflop_s, host_roofline, measured_points,
                                          parallel_levels, published_rooflines, roofline_points)
from bytesup.store.plans.lesson07 import current
from bytesup.store.rows import from_cells
from bytesup.store.views import lesson07

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
    # The run timed a prefill: the labels read the engine's ridge, its prefill's GFLOP/s ÷ the read bandwidth.
    mp = result.table("measured_points")
    engine_ridge = next(r for r in mp.rows if r[0].startswith("prefill"))[col(mp, "reached")] / bw_gbs
    assert engine_ridge < ridge
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
        assert row[bound_here] == ("memory" if row[inten] < engine_ridge else "compute")
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
        if e["path"] == "/completion" and e["server"].startswith("parallel-"):
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
            bw = result.measurement("read_bandwidth_gb_per_s").median
            mp = result.table("measured_points")
            engine_ridge = next(r for r in mp.rows if r[0].startswith("prefill"))[col(mp, "reached")] / bw
            bound = "memory" if per_call * decode_i < engine_ridge else "compute"
            assert row[col(t, "bound on this CPU's roofline")] == bound


def test_plots(result):
    names = {p.name: p for p in result.plots}
    assert names["roofline"].log_x and names["roofline"].log_y
    labels = {s.label.split(":")[0] for s in names["roofline"].series}
    assert labels >= {"roofline", "decode (N = 1) on the roof", "prefill (N tokens) on the roof", "the engine's roof",
                      "measured (median, min–max)"}
    assert [s.x for s in names["batching"].series][0] == [1, 2, 4, 8]


def test_measured_points_from_the_recording(result):
    """The measured points recomputed from the recorded responses: decode alone from the P = 1 batches, prefill
    from the main server's timed 128-token prompts after the warm-up."""
    from bytesup.llama.responses import prefill_tokens_per_s

    t = result.table("measured_points")
    dec, pre = t.rows
    flops = 2 * _served_meta()["n_params"]
    per_seq = next(m for m in result.measurements
                   if m.name == "batch_per_sequence_decode_tokens_per_s" and m.settings["parallel"] == 1)
    assert dec[col(t, "tokens/s")] == pytest.approx(per_seq.median)
    assert dec[col(t, "reached")] == pytest.approx(per_seq.median * flops / 1e9)
    timed = [e for e in recorded_exchanges(LESSON) if e["path"] == "/completion" and e["server"] == "main"
             and e["request"].get("n_predict") == 1]
    plan = result.host_values["prefill_plan"]  # recorded before plans: the prefill's own host value
    assert len(timed) == plan["warmup"] + plan["samples"] and plan["samples"] >= 5
    speeds = sorted(prefill_tokens_per_s(Timings(**e["response"]["timings"])) for e in timed[plan["warmup"]:])
    assert pre[col(t, "tokens/s")] == pytest.approx(speeds[len(speeds) // 2])
    assert pre[col(t, "the engine's roof there")] == pytest.approx(pre[col(t, "reached")])


# --- pure computation, against hand arithmetic -------------------------------------------------

# A hand-made model: 50,000,000 parameters in 100,000,000 bytes, so decode does 2 × 5e7 = 1e8 FLOPs per
# 1e8 bytes read: exactly 1 FLOP per byte.
N_PARAMS, N_BYTES = 50_000_000, 100_000_000


def test_decode_intensity_by_hand(lesson):
    assert formulas.decode_intensity(N_PARAMS, N_BYTES) == 1.0
    # SmolLM2-135M Q4_1: 2 × 134,515,008 = 269,030,016 FLOPs over 96,576,768 bytes = 2.7857 FLOPs per byte.
    assert formulas.decode_intensity(134_515_008, 96_576_768) == pytest.approx(2.7857, abs=1e-4)
    assert formulas.decode_intensity(6.74e9, 7.16e9) == pytest.approx(1.8827, abs=1e-4)  # 13.48 ÷ 7.16


def test_roofline_helpers_by_hand():
    assert formulas.attainable_flop_s(2.0, 100.0, 10.0) == 20.0  # memory feeds 2 × 10 = 20 < 100
    assert formulas.attainable_flop_s(50.0, 100.0, 10.0) == 100.0  # 50 × 10 = 500 > 100: the compute roof
    assert formulas.bound(1.9, 5.0) == "memory" and formulas.bound(5.0, 5.0) == "compute"
    assert formulas.tokens_to_cross(295.2, 1.88) == 158  # 295.2 ÷ 1.88 = 157.02, rounded up
    assert formulas.tokens_to_cross(12.5, 1.0) == 13 and formulas.tokens_to_cross(1.0, 2.0) == 1
    assert parallel_levels(1) == [1]
    assert parallel_levels(6) == [1, 2, 4, 6]
    assert parallel_levels(32) == [1, 2, 4, 8, 16, 32]
    # 128 slots: 1, 2, 4, 8, then doubling up to 64 at most; 128 itself is past the cap. Whole numbers only.
    wide = parallel_levels(128)
    assert wide == [1, 2, 4, 8, 16, 32, 64] and all(type(n) is int for n in wide)
    # A wanted level above 64 is kept when the server has that many slots.
    assert parallel_levels(128, (1, 128)) == [1, 128]
    # 64 slots with levels 1 and 3 wanted: 3 doubled is 6, 12, 24, 48; 96 is past 64, so 64 itself is added.
    assert parallel_levels(64, (1, 3)) == [1, 3, 6, 12, 24, 48, 64]
    # 65 slots: past the cap of 64, so not a level of its own.
    assert parallel_levels(65) == [1, 2, 4, 8, 16, 32, 64]
    # Nothing wanted fits and the slots are past the cap: one slot.
    assert parallel_levels(80, (100,)) == [1]



def test_counter_delta_by_hand():
    # 130 − 100 = 30; a counter missing before counts from 0: 7 − 0 = 7; missing after, or no reading: None.
    assert _delta({"n": 130.0}, {"n": 100.0}, "n") == 30.0
    assert _delta({"n": 7.0}, {}, "n") == 7.0
    assert _delta({}, {"n": 1.0}, "n") is None
    assert _delta({"n": 7.0}, None, "n") is None and _delta(None, {"n": 1.0}, "n") is None


def test_h100_and_spark_rooflines_by_hand():
    h100, spark = published_rooflines(N_BYTES)
    # 989 TFLOP/s ÷ 3.35 TB/s = 295.22 FLOPs per byte (the course's 295).
    assert h100.ridge == pytest.approx(295.22, abs=0.005)
    assert h100.peak == 989_000.0 and h100.bandwidth == 3_350.0  # GFLOP/s, GB/s
    assert h100.decode_ceiling == pytest.approx(33_500.0)  # 3.35e12 ÷ 1e8 bytes
    # DGX Spark: 273 GB/s and no FLOP/s: 273e9 ÷ 1e8 = 2,730 tokens/s, no ridge.
    assert spark.peak is None and spark.ridge is None and spark.bandwidth == 273.0
    assert spark.decode_ceiling == pytest.approx(2_730.0)


def _host(bw_samples=(15.0, 16.0, 17.0), gflops=(190.0, 200.0, 210.0)):
    """Hand-made host readings: 16 GB/s and 200 GFLOP/s medians."""
    def spread(xs):
        return {"samples": list(xs), "median": sorted(xs)[len(xs) // 2], "min": min(xs), "max": max(xs)}

    bandwidth = {"threads": 2, "bytes_per_thread": 512 * 2**20, "bytes_per_sample": 1024 * 2**20,
                 "method": "np.add.reduce, by hand", "gb_per_s": spread(bw_samples), "llc_bytes": 256 * 2**20,
                 "llc_source": "by hand"}
    matmul = {"m": 2048, "k": 2048, "n": 2048, "size": 2048, "dtype": "float32", "flops": 2 * 2048**3,
              "seconds": spread([0.0859]), "gflop_per_s": spread(gflops)}
    blas = {"blas": {"internal_api": "openblas", "version": "0.3", "num_threads": 2}, "logical_cpus": 2}
    return bandwidth, blas, matmul


def test_host_roofline_by_hand():
    bandwidth, blas, matmul = _host()
    host = HostCeilings(bandwidth, blas, matmul)
    assert host.peak_flop_s == pytest.approx(200e9) and host.bandwidth_b_s == pytest.approx(16e9)
    roof = host_roofline(host, N_BYTES)
    assert roof.peak == pytest.approx(200.0) and roof.bandwidth == pytest.approx(16.0)
    assert roof.ridge == pytest.approx(12.5)  # 200 GFLOP/s ÷ 16 GB/s
    assert roof.decode_ceiling == pytest.approx(160.0)  # 16e9 B/s ÷ 1e8 B per token
    # The host table: each ceiling with its spread and how it was measured.
    bw_row, mm_row = ceilings(host)
    assert (bw_row.spread, bw_row.samples) == (Spread(16.0, 15.0, 17.0), 3)
    assert bw_row.how == "2 threads × 512 MiB, np.add.reduce"
    assert (mm_row.spread.median, mm_row.unit) == (200.0, "GFLOP/s")
    assert mm_row.how == "float32 2048×2048 @ 2048×2048, openblas 0.3, 2 threads"


def test_roofline_points_by_hand():
    bandwidth, blas, matmul = _host()  # 200 GFLOP/s, 16 GB/s: ridge 12.5
    points = roofline_points(N_PARAMS, N_BYTES, 512, HostCeilings(bandwidth, blas, matmul), 12.5, 295.22)
    # N, reads = ceil(N / 512), intensity = N / reads × 1 FLOP/byte, attainable = min(200, intensity × 16) GFLOP/s,
    # tokens/s = attainable ÷ 1e8 FLOPs per token.
    expected = [
        ("decode", 1, 1, 1.0, 16.0, "memory", 160.0, "memory"),
        ("prefill of 16", 16, 1, 16.0, 200.0, "compute", 2000.0, "memory"),  # 16 × 16 = 256 > 200
        ("prefill of 128", 128, 1, 128.0, 200.0, "compute", 2000.0, "memory"),  # 128 < 295.22
        ("prefill of 512", 512, 1, 512.0, 200.0, "compute", 2000.0, "compute"),
        ("prefill of 2048", 2048, 4, 512.0, 200.0, "compute", 2000.0, "compute"),  # 4 reads of 512
    ]
    for p, (phase, N, reads, inten, att, here_bound, tps, h100_bound) in zip(points, expected, strict=True):
        assert (p.phase, p.prompt_tokens, p.weight_reads) == (phase, N, reads)
        assert p.tokens_per_read == pytest.approx(N / reads) and p.intensity == pytest.approx(inten)
        assert p.attainable_gflop_s == pytest.approx(att) and p.tokens_per_s == pytest.approx(tps)
        assert (p.bound_here, p.bound_h100) == (here_bound, h100_bound)
    # Against an engine whose prefill reached 8 GFLOP/s, 8 ÷ 16 GB/s = a ridge of 0.5: decode at 1 FLOP/byte is right
    # of it, compute-bound, though numpy's roof (ridge 12.5) still lets it reach only 16 GFLOP/s.
    engine = roofline_points(N_PARAMS, N_BYTES, 512, HostCeilings(bandwidth, blas, matmul), 0.5, 295.22)
    assert [p.bound_here for p in engine] == ["compute"] * 5 and engine[0].attainable_gflop_s == pytest.approx(16.0)


def test_the_labels_read_the_engines_ridge_when_a_prefill_was_timed(lesson):
    """The ridge of the bound labels: 100 M parameters, 0.2 GFLOP per token; a prefill of 40 tokens/s reached 8 GFLOP/s,
    ÷ 16 GB/s = 0.5 FLOPs/byte; without a prefill, numpy's 12.5."""
    host = HostCeilings(*_host())
    engine = engine_roof_gflop_s(100_000_000, [30.0, 40.0, 50.0])
    assert engine == pytest.approx(8.0) and engine_roof_gflop_s(100_000_000, []) is None
    labels = bound_ridge(12.5, engine, host)
    assert labels.ridge == pytest.approx(0.5) and labels.name == "the engine's ridge" and labels.bandwidth_gb_s == 16.0
    numpy = bound_ridge(12.5, None, host)
    assert numpy.ridge == 12.5 and numpy.name == "this CPU's ridge"
    # The decode note says which ridge its label reads, and on which side decode sits (1 FLOP/byte).
    dec = roofline_points(50_000_000, 100_000_000, 512, host, labels.ridge, 295.22)[0]
    model = lesson.ServedModel("hand", 50_000_000, 100_000_000, "Q8_0")
    note = lesson07.decode_note(dec, model, host.peak_flop_s, labels)
    assert "at or right of the engine's ridge of 0.5 (its prefill's 8 GFLOP/s ÷ 16 GB/s" in note
    assert "compute-bound on this CPU" in note and "numpy's matmul ridge is 12.5" in note
    dec = roofline_points(50_000_000, 100_000_000, 512, host, numpy.ridge, 295.22)[0]
    assert lesson07.decode_note(dec, model, host.peak_flop_s, numpy).endswith(
        "below this CPU's ridge of 12.5: memory-bound, at most 16 GFLOP/s (8.0% of the matmul peak).")


def test_what_the_largest_batch_gain_shows(lesson):
    """Steps of 10 ms alone and 40 ms for 8 at once: 4 × the step for 8 × the tokens, 2 × the decode tokens/s;
    4 = s + (1 − s) × 8 gives s = (8 − 4) ÷ 7 = 57% shared. A step of 8 that took 9 × one alone shares nothing:
    s = (8 − 9) ÷ 7 = −14%, and the note says the model does not hold."""
    assert formulas.shared_share(8, 4.0) == pytest.approx(4 / 7)
    assert formulas.shared_share(8, 1.0) == 1.0 and formulas.shared_share(8, 8.0) == 0.0
    one, eight = _row(lesson, 1, 90, 100, 0.9), _row(lesson, 8, 180, 25, 1.8)
    note, formula = lesson07.gain_note(one, eight)
    assert note.startswith("What the P = 8 gain shows: 8 × the tokens per step, for 1.80 × the tokens/s of one")
    assert "a step of 8 took 4 × the step of one (40 ms against 10 ms), so decode ran 2 × as many tokens/s" in note
    assert "4 × lies between the two: about 57% of one sequence's step is shared by the batch" in note and "43% is each" in note
    assert formula.endswith("so at P = 8 φ = (8 − 4) ÷ 7 = 57%.") and "step(P) = step(1) × (φ + (1 − φ) × P)" in formula
    slow, slow_formula = lesson07.gain_note(one, _row(lesson, 8, 80, 100 / 9, 0.8))
    assert "φ = -14%, outside 0–100%" in slow_formula and "is shared by" not in slow
    assert "9 × lies outside the two: these steps are not one shared part and one per sequence." in slow
    assert lesson07.gain_note(one, one) is None


def _completion(predicted_n: int, predicted_ms: float) -> dict:
    return {"content": "", "timings": {"prompt_n": 6, "prompt_ms": 12.0, "predicted_n": predicted_n,
                                       "predicted_ms": predicted_ms}}


def test_aggregate_is_all_tokens_over_the_wall_time():
    c = [Completion(**_completion(64, 1260.0)), Completion(**_completion(64, 1575.0))]
    runs = [BatchRun([c[0], c[0]], 1.28, {"llamacpp:tokens_predicted_total": 10.0, "llamacpp:n_decode_total": 7.0},
                     {"llamacpp:tokens_predicted_total": 138.0, "llamacpp:n_decode_total": 87.0}),
            BatchRun([c[1], c[1]], 1.6, {"llamacpp:tokens_predicted_total": 138.0, "llamacpp:n_decode_total": 87.0},
                     {"llamacpp:tokens_predicted_total": 266.0, "llamacpp:n_decode_total": 167.0})]
    level = batch_level(2, runs)
    # 2 × 64 = 128 tokens in 1.28 s = 100 tokens/s; in 1.6 s = 80 tokens/s.
    assert level.aggregate == [pytest.approx(100.0), pytest.approx(80.0)]
    # (64 − 1) passes in 1,260 ms = 50 tokens/s; in 1,575 ms = 40 tokens/s.
    assert level.per_sequence == [pytest.approx(50.0)] * 2 + [pytest.approx(40.0)] * 2
    # /metrics: (138 − 10) + (266 − 138) = 256 tokens in (87 − 7) + (167 − 87) = 160 calls: 1.6 per call.
    assert level.predicted_delta == 256.0 and level.decode_calls_delta == 160.0
    assert level.tokens_per_call == pytest.approx(1.6)

    row = batch_row(level, baseline=100.0, dec_i=2.0, ridge=5.0)
    assert row.wall_ms == pytest.approx(1440.0)  # median of 1.28 s and 1.6 s
    assert (row.batches, row.tokens_per_batch, row.tokens_generated) == (2, 128, 256)
    assert (row.aggregate.median, row.aggregate.min, row.aggregate.max) == pytest.approx((90.0, 80.0, 100.0))
    assert (row.per_sequence.median, row.per_sequence.min, row.per_sequence.max) == pytest.approx((45.0, 40.0, 50.0))
    assert (row.predicted_delta, row.tokens_per_call) == pytest.approx((256.0, 1.6))
    assert row.aggregate_ratio == pytest.approx(0.9) and row.per_sequence_ratio == pytest.approx(0.45)
    assert row.intensity == pytest.approx(3.2) and row.bound == "memory"  # 1.6 × 2 = 3.2 < 5

    blind = batch_level(2, [BatchRun(r.completions, r.wall_s, None, None) for r in runs])
    assert blind.predicted_delta is None and blind.tokens_per_call is None
    row = batch_row(blind, 100.0, 2.0, 5.0)
    assert row.intensity is None and row.bound is None


def _row(lesson, P, agg, per, ratio, lo=None, hi=None):
    return BatchRow(P, 1, 64 * P, 1000.0, Spread(agg, lo or agg, hi or agg), Spread(per, per, per), ratio,
                    per / 100, 64 * P, None, None, None, None)


def test_batch_verdict_follows_the_numbers(lesson):
    paid = lesson07.batch_verdict([_row(lesson, 1, 100, 100, 1.0), _row(lesson, 4, 300, 75, 3.0)])
    assert paid.startswith("Batching paid") and "3.00" in paid and "P = 4" in paid
    flat = lesson07.batch_verdict([_row(lesson, 1, 100, 100, 1.0), _row(lesson, 4, 105, 26, 1.05)])
    assert flat.startswith("Batching did not pay") and "×1.05 at P = 4" in flat
    # Only what the numbers show: no cause is offered.
    assert "cost" not in flat and "because" not in flat


def test_spread_note(lesson):
    assert lesson07.spread_note([_row(lesson, 1, 105, 100, 1.0, 100, 110), _row(lesson, 2, 210, 100, 1.0, 200, 220)]) is None
    note = lesson07.spread_note([_row(lesson, 1, 105, 100, 1.0, 100, 110), _row(lesson, 8, 200, 20, 2.0, 100, 400)])
    assert "P = 8: 100–400" in note and "P = 1" not in note


def test_decode_attention_intensity_by_hand():
    # One head, S = 4,096 positions of width 128: 4·S·d = 2,097,152 FLOPs on 2·S·d FP16 numbers (4·S·d bytes).
    a = attention_intensity(4096, 128)
    assert a.flops == 2_097_152 == a.bytes and a.flops_per_byte == 1.0
    assert attention_intensity(4096, 128, group=8).flops_per_byte == 8.0
    one, seventy = decode_attention_cases()
    assert (one.group, seventy.group) == (1, 8.0)  # the 70B: 64 query heads over 8 KV heads


# --- main on hand-made answers ---------------------------------------------------------------

def _metrics_text(predicted: int, calls: int) -> str:
    return (f"# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {predicted}\n"
            f"llamacpp:n_decode_total {calls}\n")


def test_main_on_hand_made_answers(lesson):
    """A user's server with 2 slots whose model file is not readable here: the lesson measures it as it
    runs (P = 1 and 2, two batches each), every number worked out by hand below."""
    # /metrics before and after each batch: P = 1 batches add 64 tokens in 64 calls; P = 2 batches add
    # 128 tokens in 80 calls (1.6 sequences per step).
    counters = [(0, 0), (64, 64), (64, 64), (128, 128), (128, 128), (256, 208), (256, 208), (384, 288)]
    server = QueuedServer({
        "/v1/models": [{"data": [{"id": "models/hand.gguf", "meta": {"n_params": N_PARAMS, "size": N_BYTES,
                                                                        "ftype": "Q8_0"}}]}],
        "/props": [{"total_slots": 2}],
        "/metrics": [_metrics_text(*c) for c in counters],
        # P = 1: 63 passes in 630 ms (100 tokens/s), then in 700 ms (90 tokens/s); P = 2: 1,260 ms (50), 1,575 ms (40).
        "/completion": [_completion(64, 630.0), _completion(64, 700.0), *[_completion(64, 1260.0)] * 2,
                        *[_completion(64, 1575.0)] * 2],
    })
    bandwidth, blas, matmul = _host()
    facts = {"url_host": "127.0.0.1", "local": True, "model_readable": False, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": True, "reason": "by hand"}
    walls = {"batch_wall_s_p1_r0": 0.8, "batch_wall_s_p1_r1": 1.0, "batch_wall_s_p2_r0": 1.28, "batch_wall_s_p2_r1": 1.6}
    ctx = hand_context(LESSON, server, bandwidth=bandwidth,
                       host_values={"server_facts": facts, "blas_info": blas, "matmul_peak": matmul, **walls})
    result = lesson.main(ctx)
    assert server.left() == {}

    # The requests: pinned settings, one distinct seed per request, one slot each.
    sent = [body for _, path, body in server.requests if path == "/completion"]
    assert sorted(b["seed"] for b in sent) == [8000, 8100, 9000, 9001, 9100, 9101]  # 7000 + 1000·P + 100·r + i
    assert all(b["temperature"] == 0 and b["cache_prompt"] is False and b["n_predict"] == 64 for b in sent)

    roofs = {r[0]: r for r in result.table("rooflines").rows}
    # this host: 200 GFLOP/s, 16 GB/s, ridge 12.5, ceiling 16e9 ÷ 1e8 = 160 tokens/s.
    assert roofs["this host's CPU"][2:] == pytest.approx([200.0, 16.0, 12.5, 160.0])
    assert roofs["H100"][2:] == pytest.approx([989_000.0, 3_350.0, 295.22, 33_500.0], abs=0.005)
    assert result.measurement("ridge_point_flops_per_byte").samples == [pytest.approx(12.5)]

    pts = result.table("roofline_points")
    assert [r[col(pts, "arithmetic intensity")] for r in pts.rows] == pytest.approx([1, 16, 128, 512, 512])
    assert [r[col(pts, "attainable on this CPU")] for r in pts.rows] == pytest.approx([16, 200, 200, 200, 200])
    assert [r[col(pts, "roofline speed on this CPU")] for r in pts.rows] == pytest.approx([160, 2000, 2000, 2000, 2000])

    agg = {m.settings["parallel"]: m.samples for m in result.measurements if m.name == "batch_aggregate_decode_tokens_per_s"}
    # 64 tokens ÷ 0.8 s = 80, ÷ 1.0 s = 64; 128 tokens ÷ 1.28 s = 100, ÷ 1.6 s = 80.
    assert agg == {1: pytest.approx([80.0, 64.0]), 2: pytest.approx([100.0, 80.0])}
    per = {m.settings["parallel"]: m.samples for m in result.measurements
           if m.name == "batch_per_sequence_decode_tokens_per_s"}
    assert per == {1: pytest.approx([100.0, 90.0]), 2: pytest.approx([50.0, 50.0, 40.0, 40.0])}

    t = result.table("batching")
    one, two = t.rows
    # The baseline: one sequence alone, the median of 100 and 90 = 95 tokens/s.
    expect = {
        "parallel sequences": (1, 2), "batches": (2, 2), "tokens per batch": (64, 128),
        "batch wall time": (900.0, 1440.0), "aggregate decode": (72.0, 90.0),  # medians of (80, 64), (100, 80)
        "per sequence": (95.0, 45.0), "aggregate ÷ baseline": (72 / 95, 90 / 95),
        "per sequence ÷ baseline": (1.0, 45 / 95), "tokens generated (responses)": (128, 256),
        "tokens_predicted_total Δ (/metrics)": (128.0, 256.0),
        "tokens per llama_decode call": (1.0, 1.6),  # 128 ÷ 128; 256 ÷ 160
        "intensity of one step": (1.0, 1.6),  # × 1 FLOP per byte
    }
    for name, (a, b) in expect.items():
        assert (one[col(t, name)], two[col(t, name)]) == pytest.approx((a, b)), name
    assert one[col(t, "bound on this CPU's roofline")] == two[col(t, "bound on this CPU's roofline")] == "memory"
    main = result.table("batching_main")
    assert t.detail and len(main.columns) == 8 < len(t.columns)
    assert t.notes == lesson07.batching_formulas(from_cells(BatchRow, t.rows))
    assert t.notes[0] == lesson07.BATCH_FORMULAS[0] and t.notes[1].endswith("so at P = 2 φ = -11%, outside 0–100%.")
    notes = " ".join(main.notes)
    assert "Batching did not pay" in notes  # best 90 ÷ 95 < 1.1
    assert "1.60 generated tokens per llama_decode call (at most 2)" in notes
    assert "cannot start servers of its own" in notes
    # What the run shows says the same: the best aggregate, 90 at P = 2, is 90 ÷ 95 = 0.95 × one sequence alone
    assert result.shows.plot == "roofline"
    assert result.shows.text.endswith("Decoding several sequences at once did not pay here: the best, 2 at once, gave "
                                      "0.95× one sequence alone, not more than 10% above it.")
    # Hand-made rows that flip it: 200 tokens/s at P = 2 is 200 ÷ 95 = 2.11 ×, 1.6 sequences a step
    from dataclasses import replace

    rows = from_cells(BatchRow, t.rows)
    paid = [rows[0], replace(rows[1], aggregate=Spread(200.0, 200.0, 200.0), aggregate_ratio=200 / 95)]
    decode = RooflinePoint(*result.table("roofline_points").rows[0])
    labels = BoundRidge(ridge=4.0, engine_gflop_s=None, bandwidth_gb_s=10.0, numpy_ridge=4.0)
    model = lesson.ServedModel("hand", 50_000_000, 100_000_000, "Q8_0")
    said = lesson07.shows(model, decode, labels, paid)
    assert said.endswith("Decoding 2 sequences at once gave 200 tokens/s in all, 2.11× one sequence alone: on average "
                         "1.6 sequences shared each step, and so each read of the weights.")
    assert f"does {decode.intensity:.3g} FLOPs per byte of weights read, below this CPU's ridge of 4 " in said
    above = lesson07.shows(model, replace(decode, intensity=8.0, bound_here="compute"), labels, paid[:1])
    assert "does 8 FLOPs per byte of weights read, at or above this CPU's ridge of 4" in above
    assert "the roofline calls one sequence's decode compute-bound here" in above
    assert "What decode waits on, each term timed, is the capstone's verdict (lesson 8)." in above
    assert above.endswith("Only 1 sequence at a time could be decoded, so batching was not measured.")

    att = result.table("decode_attention_intensity")
    assert [r[col(att, "intensity")] for r in att.rows] == [1.0, 8.0]


def test_measured_points_by_hand():
    """100 M parameters in 100 MB: 2 FLOPs per byte, 0.2 GFLOP per token, on a CPU of 100 GFLOP/s and 10 GB/s."""
    bandwidth, blas, matmul = _host((10.0,), (100.0,))
    here = HostCeilings(bandwidth, blas, matmul)
    points = measured_points(100_000_000, 2.0, here, [40.0, 50.0, 60.0], [150.0, 200.0, 250.0, 210.0, 190.0], 128)
    dec, pre = points
    # decode: 50 tokens/s × 0.2 GFLOP = 10 GFLOP/s at 2 FLOPs/byte, where both roofs are 2 × 10 GB/s = 20 GFLOP/s
    assert (dec.phase, dec.intensity, dec.reached) == ("decode (P = 1)", 2.0, 10.0)
    assert dec.tokens_per_s == Spread(50.0, 40.0, 60.0)
    assert dec.numpy_roof == 20.0 and dec.engine_roof == 20.0 and dec.closest == "both"
    # prefill of 128: 256 FLOPs/byte; 200 tokens/s × 0.2 = 40 GFLOP/s, the engine's roof; numpy's is 100
    assert pre.phase == "prefill of 128" and pre.intensity == 256.0 and pre.reached == pytest.approx(40.0)
    assert pre.numpy_roof == 100.0 and pre.engine_roof == pytest.approx(40.0)
    assert pre.closest == "the engine's"
    # without a prefill: decode alone against this CPU's roof
    (alone,) = measured_points(100_000_000, 2.0, here, [40.0, 50.0, 60.0], [], 128)
    assert alone.engine_roof is None and alone.closest == "numpy's"
    assert formulas.closest_roof(30.0, {"a": 20.0, "b": 100.0}) == "a"  # 1.5 × a, 0.3 × b


def test_the_plan_of_a_run_and_of_older_recordings(lesson):
    """A recorded plan is read as recorded; a run recorded before plans is read from the host values it recorded
    (no prefill before `prefill_plan`, two /metrics readings per batch before `shared_metrics_reads`); a replay
    measures nothing and adds no host value the recording lacks."""
    def plan_of(host_values):
        ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values)
        return lesson.the_plan(ctx), ctx.host_values

    oldest, read = plan_of({"repeat": 3})
    assert (oldest.batches, oldest.matmul_repeats, oldest.prefill.samples, oldest.shared_metrics_reads) == (3, 5, 0, False)
    assert set(read) == {"repeat"}
    older, read = plan_of({"prefill_plan": {"warmup": 1, "samples": 5, "tokens": 128}, "shared_metrics_reads": True})
    assert (older.batches, older.prefill.warmup, older.prefill.samples, older.shared_metrics_reads) == (2, 1, 5, True)
    assert set(read) == {"repeat", "prefill_plan", "shared_metrics_reads"}
    recorded = current(samples=5, batches=4).model_copy(update={"batch_n_predict": 16}).model_dump()
    now, read = plan_of({"plan": recorded, "prefill_plan": {"warmup": 9, "samples": 9, "tokens": 9}})
    assert now.batch_n_predict == 16 and now.prefill.samples == 5 and now.batches == 4  # max(5, 4) timed prefills
    assert set(read) == {"plan"}


# 128-token prefills: 320 tokens/s (median of 380, 400, 400, 420, 440 ms: 400 ms) reach 32 GFLOP/s, an engine ridge
# of 32 ÷ 16 GB/s = 2 FLOPs/byte, right of decode (1) and of P = 2's step (1.6): both memory-bound. 100 tokens/s
# (1,280 ms) reach 10 GFLOP/s, a ridge of 0.625, left of both: the same steps become compute-bound.
@pytest.mark.parametrize("prefill_ms,tokens_s,engine,dec_closest,bound", [
    ((380.0, 400.0, 400.0, 420.0, 440.0), 320.0, 32.0, "both", "memory"),
    ((1200.0, 1280.0, 1280.0, 1300.0, 1400.0), 100.0, 10.0, "the engine's", "compute"),
])
def test_main_measures_a_prefill_and_places_both_phases(lesson, prefill_ms, tokens_s, engine, dec_closest, bound):
    """The same user's server, now with the prefill plan: one warm-up and five timed 128-token prompts (the warm-up's
    9,999 ms is not a sample), then the measured points against both roofs, and the labels read the engine's ridge."""
    counters = [(0, 0), (64, 64), (64, 64), (128, 128), (128, 128), (256, 208), (256, 208), (384, 288)]

    def prefill(ms: float) -> dict:
        return {"content": "", "timings": {"prompt_n": 128, "prompt_ms": ms, "predicted_n": 1, "predicted_ms": 0.0}}

    server = QueuedServer({
        "/v1/models": [{"data": [{"id": "models/hand.gguf", "meta": {"n_params": N_PARAMS, "size": N_BYTES,
                                                                        "ftype": "Q8_0"}}]}],
        "/props": [{"total_slots": 2}],
        "/metrics": [_metrics_text(*c) for c in counters],
        "/tokenize": [{"tokens": list(range(128))}],
        "/completion": [prefill(9999.0), *[prefill(ms) for ms in prefill_ms],
                        _completion(64, 630.0), _completion(64, 700.0), *[_completion(64, 1260.0)] * 2,
                        *[_completion(64, 1575.0)] * 2],
    })
    bandwidth, blas, matmul = _host()
    facts = {"url_host": "127.0.0.1", "local": True, "model_readable": False, "accelerators": [],
             "on_accelerator": False, "host_bandwidth_applies": True, "reason": "by hand"}
    walls = {"batch_wall_s_p1_r0": 0.8, "batch_wall_s_p1_r1": 1.0, "batch_wall_s_p2_r0": 1.28, "batch_wall_s_p2_r1": 1.6}
    ctx = hand_context(LESSON, server, bandwidth=bandwidth,
                       host_values={"server_facts": facts, "blas_info": blas, "matmul_peak": matmul, **walls,
                                    "prefill_plan": {"warmup": 1, "samples": 5, "tokens": 128}})
    result = lesson.main(ctx)
    assert server.left() == {}
    prompts = [b for _, path, b in server.requests if path == "/completion" and b["n_predict"] == 1]
    assert len(prompts) == 6 and all(b["prompt"] == list(range(128)) and b["cache_prompt"] is False for b in prompts)

    t = result.table("measured_points")
    dec, pre = t.rows
    # 0.1 GFLOP per token. decode alone: 95 tokens/s, 9.5 GFLOP/s at 1 FLOP/byte, where this CPU's roof is 16 GB/s × 1
    # and the engine's the lower of its prefill's GFLOP/s and 16
    assert dec[col(t, "reached")] == pytest.approx(9.5) and dec[col(t, "closest roof")] == dec_closest
    assert dec[col(t, "this CPU's roof there")] == pytest.approx(16.0)
    assert dec[col(t, "the engine's roof there")] == pytest.approx(min(engine, 16.0))
    # prefill: its tokens/s × 0.1 GFLOP at 128 FLOPs/byte: this CPU's roof 200, the engine's its own GFLOP/s
    assert pre[col(t, "tokens/s")] == pytest.approx(tokens_s) and pre[col(t, "reached")] == pytest.approx(engine)
    assert pre[col(t, "this CPU's roof there")] == pytest.approx(200.0)
    assert pre[col(t, "the engine's roof there")] == pytest.approx(engine) and pre[col(t, "closest roof")] == "the engine's"
    plot = next(p for p in result.plots if p.name == "roofline")
    measured = next(s for s in plot.series if s.label.startswith("measured"))
    assert measured.x == pytest.approx([1.0, 128.0]) and measured.y == pytest.approx([9.5, engine])
    roof = next(s for s in plot.series if s.label.startswith("the engine's roof"))
    assert roof.x[1] == pytest.approx(engine / 16.0)  # the plot's ridge is the labels' ridge
    # The labels: decode and P = 2's step (1.6 FLOPs/byte) against the engine's ridge; numpy's (12.5) says memory.
    pts, batches = result.table("roofline_points_main"), result.table("batching_main")
    assert pts.rows[0][col(pts, "bound on this CPU")] == bound
    assert [r[col(batches, "bound on this CPU's roofline")] for r in batches.rows] == [bound, bound]
    assert f"{'left of' if bound == 'memory' else 'at or right of'} the engine's ridge of {engine / 16:.3g}" in pts.notes[0]
    assert f"which reaches the engine's ridge ({engine / 16:.3g})" in " ".join(batches.notes)


def test_the_batch_line_predicts_the_largest_batch(lesson):
    """Per-sequence 178.6, 83.3, 60.6 and 40 tokens/s: steps of 5.6, 12, 16.5 and 25 ms. The line through P = 2
    and 4 has Δt = (16.5 − 12) ÷ 2 = 2.25 ms and t₀ = 12 − 4.5 = 7.5 ms: 7.5 + 8 × 2.25 = 25.5 ms at P = 8,
    so 25 measured is −2%; an aggregate of 8000 ÷ 25.5 = 314 tokens/s against 8000 ÷ 25 = 320; at P = 1 the
    line gives 9.75 ms against 5.6."""
    rows = [_row(lesson, P, 0, 1e3 / ms, 1.0) for P, ms in ((1, 5.6), (2, 12.0), (4, 16.5), (8, 25.0))]
    note, formula = lesson07.batch_line_note(rows)
    assert "5.6 ms, 12 ms, 16.5 ms, 25 ms at P = 1, 2, 4, 8" in note
    assert "carried on to P = 8, predicts 25.5 ms there, measured 25 (-2%)" in note and "gives 9.75 ms against 5.6" in note
    assert "t₀ = 7.5 ms, Δt = 2.25 ms per sequence" in formula and "an aggregate of 314 tokens/s against 320" in formula
    assert lesson07.batching_formulas(rows)[-1] == formula
    assert lesson07.batch_line_note(rows[:3]) is None  # nothing beyond P = 4 to predict


@pytest.mark.parametrize("shared,reads", [(True, 4), (False, 6)])
def test_one_metrics_reading_between_batches_on_a_server_of_our_own(lesson, shared, reads):
    """Three batches of 2: on a server of our own the counters after one batch are those before the next,
    so 3 + 1 = 4 readings instead of 2 × 3; each batch still spans its own rise (128 tokens, 80 calls)."""
    counters = [(0, 0), (128, 80), (256, 160), (384, 240)] if shared else \
        [(0, 0), (128, 80), (128, 80), (256, 160), (256, 160), (384, 240)]
    server = QueuedServer({"/metrics": [_metrics_text(*c) for c in counters],
                           "/completion": [_completion(64, 1260.0)] * 6})
    walls = {f"batch_wall_s_p2_r{r}": 1.28 for r in range(3)}
    ctx = hand_context(LESSON, server, host_values={"repeat": 3, **walls})
    plan = current(samples=5, batches=3).model_copy(update={"batch_rule": None})  # three batches, as before version 2
    runs, stop = lesson.run_level(ctx, ctx.server, plan, 2, shared)
    assert server.left() == {} and stop is None
    assert sum(path == "/metrics" for _, path, _ in server.requests) == reads
    level = batch_level(2, runs)
    assert level.predicted_delta == 384.0 and level.decode_calls_delta == 240.0


@pytest.mark.parametrize("per_sequence_ms,walls,taken,why", [
    # Two batches of 2 alike (50 tokens/s each, 128 tokens in 1.28 s): known exactly, the third never sent.
    ([1260.0] * 6, [1.28, 1.28, 1.28], 2, "tight"),
    # 50 then 40 tokens/s per sequence, the wall time alike: the per-sequence median goes on to the maximum, 3.
    ([1260.0, 1260.0, 1575.0, 1575.0, 1400.0, 1400.0], [1.28, 1.28, 1.28], 3, "maximum"),
])
def test_a_levels_batches_stop_when_its_medians_are_tight(lesson, per_sequence_ms, walls, taken, why):
    server = QueuedServer({"/metrics": [_metrics_text(128 * k, 80 * k) for k in range(taken + 1)],
                           "/completion": [_completion(64, ms) for ms in per_sequence_ms]})
    ctx = hand_context(LESSON, server, host_values={"repeat": 3, **{f"batch_wall_s_p2_r{r}": w for r, w in enumerate(walls)}})
    runs, stop = lesson.run_level(ctx, ctx.server, current(samples=5, batches=3), 2, True)
    assert len(runs) == taken and (stop.samples, stop.why) == (taken, why)
    assert server.left() == ({"/completion": 2} if taken == 2 else {})
    # The figures, one value a batch: the median per-sequence speed and every token ÷ the wall time.
    assert lesson.batch_figures(runs)[1] == [pytest.approx(100.0)] * taken
    note = lesson07.batches_stopped({2: stop}, current(samples=5, batches=3).batch_rule)
    assert note.startswith("Each level's batches stop once its median per-sequence speed and its median speed in all "
                           "are known within ±5%, at 2 batches at least and 3 at most (the run's --repeat)")
    assert note.endswith(": P = 2: 2 (tight, ±0%).") if why == "tight" else ": P = 2: 3 (the maximum, ±" in note


def test_the_view_records_nothing():
    """The view only renders: it puts tables and plots on the page and asks nothing else of it."""
    import ast
    import inspect

    from bytesup.store import views

    # the view's own source, and the helpers of store.views it puts its tables on the page with
    tree = ast.parse(inspect.getsource(lesson07) + "\n" + inspect.getsource(views))
    pages = {c.func.attr for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and isinstance(c.func.value, ast.Name) and c.func.value.id == "page"}
    assert pages == {"table", "plot"}
    calls = {c.func.attr for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}
    assert not calls & {"measure", "fact", "host", "recorded", "local_server", "step", "completion", "metrics"}


def test_a_live_run_records_its_plan_once(lesson):
    """Live, the plan is today's, with --repeat batches per level and at least five timed matmuls and prefills,
    recorded once as the host value `plan`, beside the samples the run's rule gave (`LessonContext.samples`)."""
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    ctx = LessonContext(LESSON, "live", server=QueuedServer({}).server, run=RunOptions(command=["test"], repeat=4),
                        model_path=None, sink=[], replay=None, progress=Reporter(None, LESSON))
    plan = lesson.the_plan(ctx)
    assert plan == current(samples=5, batches=4) and plan.matmul_repeats == plan.prefill.samples == 5  # max(5, 4)
    assert ctx.host_values == {"repeat": 4, "samples": 5, "batches": 4, "plan": plan.model_dump()}


def test_what_the_run_shows_reads_the_recorded_tables(result):
    decode = RooflinePoint(*result.table("roofline_points").rows[0])
    rows = from_cells(BatchRow, result.table("batching").rows)
    best = max(rows, key=lambda r: r.aggregate.median)
    text = result.shows.text
    assert f"does {decode.intensity:.3g} FLOPs per byte of weights read" in text
    assert f"one sequence's decode {decode.bound_here}-bound here, at most {decode.tokens_per_s:,.0f} tokens/s" in text
    assert (f"Decoding {best.parallel} sequences at once gave {best.aggregate.median:,.0f} tokens/s in all, "
            f"{best.aggregate_ratio:.2f}×") in text
    main, full = result.table("host_ceilings_main"), result.table("host_ceilings")
    assert [c.name for c in main.columns] == lesson07.CEILING_SHOWN and full.detail
    assert main.rows == [[r[0], r[1], r[4], r[5], r[6]] for r in full.rows]   # without min and max
    for name in ("roofline_points", "batching", "measured_points"):
        assert len(result.table(f"{name}_main").columns) <= 8 and result.table(name).detail


def test_the_blas_named_with_and_without_its_version():
    assert blas_text(HostCeilings({}, {"blas": {"internal_api": "openblas", "version": "0.3"}}, {})) == "openblas 0.3"
    assert blas_text(HostCeilings({}, {"blas": {"internal_api": "openblas"}}, {})) == "openblas"
    assert blas_text(HostCeilings({}, {}, {})) == "unknown BLAS"


def test_a_prefill_without_a_decode_is_still_placed():
    # No decode sample: the prefill of 128 alone, 200 tokens/s × 0.2 GFLOP = 40 GFLOP/s at 128 × 2 = 256 FLOPs/byte.
    bandwidth, blas, matmul = _host((10.0,), (100.0,))
    (pre,) = measured_points(100_000_000, 2.0, HostCeilings(bandwidth, blas, matmul), [], [150.0, 200.0, 250.0], 128)
    assert pre.phase == "prefill of 128" and pre.intensity == 256.0 and pre.reached == pytest.approx(40.0)


def test_a_batch_row_counts_the_first_batch_and_no_call_gives_no_tokens_per_call():
    # First batch: 2 sequences of 64 tokens (128); the second: 2 of 32. The row's tokens per batch is the first's.
    # /metrics counted 192 tokens but no llama_decode call: no tokens per call (not a division by 0).
    c64, c32 = Completion(**_completion(64, 1260.0)), Completion(**_completion(32, 620.0))
    runs = [BatchRun([c64, c64], 1.28, {"llamacpp:tokens_predicted_total": 0.0, "llamacpp:n_decode_total": 5.0},
                     {"llamacpp:tokens_predicted_total": 128.0, "llamacpp:n_decode_total": 5.0}),
            BatchRun([c32, c32], 0.64, {"llamacpp:tokens_predicted_total": 128.0, "llamacpp:n_decode_total": 5.0},
                     {"llamacpp:tokens_predicted_total": 192.0, "llamacpp:n_decode_total": 5.0})]
    level = batch_level(2, runs)
    assert level.predicted_delta == 192.0 and level.decode_calls_delta == 0.0 and level.tokens_per_call is None
    row = batch_row(level, baseline=100.0, dec_i=2.0, ridge=5.0)
    assert row.tokens_per_batch == 128 and row.tokens_generated == 192
