"""Lesson 7's figures: one typed record per figure (each field a column of its table), and the pure arithmetic that
makes each from what the lesson measured; the view (`store.views.lesson07`) renders them, and nothing here measures or
records.

- what was measured: `HostCeilings` (this host's bandwidth reading and matmul, as hostbench reports them), `BatchRun`
  (one batch of P completions, its wall time, /metrics around it) and `BatchLevel` (the samples of one level P);
- `Ceiling`: this host's two ceilings, measured (the table `host_ceilings`);
- `Roofline`: a machine's roofline and the decode ceiling it gives (`rooflines`);
- `RooflinePoint`: decode or a prefill of N tokens placed on this CPU's roofline (`roofline_points`), with
  `BoundRidge`, the ridge its "bound" labels read against;
- `MeasuredPoint`: where the server's decode and timed prefill were, against both roofs (`measured_points`);
- `BatchRow`: one level P of the batching sweep against one sequence alone (`batching`);
- `AttentionIntensity`: attention's FLOPs per byte in one decode step (`decode_attention_intensity`)."""

from __future__ import annotations

from dataclasses import dataclass

from bytesup.course import formulas, published, robust
from bytesup.course.ceiling import Spread, ceiling_at
from bytesup.course.formulas import attainable_flop_s, bound
from bytesup.llama.responses import Completion, decode_tokens_per_s
from bytesup.store.rows import column, spread
from bytesup.units import GB, MiB

PREFILL_TOKENS = (16, 128, 512, 2048)  # prompt lengths placed on the roofline besides decode (N = 1)
PREDICTED, DECODE_CALLS = "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total"  # /metrics counters


# --- what the lesson measured ---------------------------------------------------------------------

@dataclass(frozen=True)
class HostCeilings:
    """This host's two measured ceilings, as hostbench reports them (host values), and their medians in base units."""
    bandwidth: dict  # the run's bandwidth reading: gb_per_s {samples, median, min, max}, threads, …
    blas: dict  # hostbench.blas_info()
    matmul: dict  # hostbench.measure_matmul_peak(): gflop_per_s {…}, seconds {…}, flops, m, k, n, dtype

    @property
    def peak_flop_s(self) -> float:
        return self.matmul["gflop_per_s"]["median"] * 1e9

    @property
    def bandwidth_b_s(self) -> float:
        return self.bandwidth["gb_per_s"]["median"] * GB


@dataclass(frozen=True)
class BatchRun:
    """One batch: P completions sent at once, its wall time on this host's clock, /metrics around it."""
    completions: list[Completion]
    wall_s: float
    metrics_before: dict | None
    metrics_after: dict | None


# --- the records: one per figure ------------------------------------------------------------------

@dataclass(frozen=True)
class BoundRidge:
    """The ridge the "bound" labels are read against: the engine's, its prefill's GFLOP/s ÷ the read bandwidth, where
    the run timed a prefill (the roof the plot draws the measured points against), else numpy's matmul ridge.
    Left of it a point is memory-bound, right of it compute-bound."""
    ridge: float
    engine_gflop_s: float | None
    bandwidth_gb_s: float
    numpy_ridge: float

    @property
    def name(self) -> str:
        return "this CPU's ridge" if self.engine_gflop_s is None else "the engine's ridge"


@dataclass(frozen=True)
class Ceiling:
    """One of this host's two ceilings, measured, with how."""
    quantity: str = column("quantity")
    spread: Spread = spread()
    unit: str = column("unit")
    samples: int = column("samples")
    how: str = column("how")


@dataclass(frozen=True)
class Roofline:
    """One machine's roofline: peak compute, memory bandwidth, their ratio, and the decode ceiling they give."""
    machine: str = column("machine")
    source: str = column("source")
    peak: float | None = column("peak compute", "GFLOP/s")
    bandwidth: float = column("memory bandwidth", "GB/s")
    ridge: float | None = column("ridge point", "FLOPs/byte")
    decode_ceiling: float = column("decode ceiling, {model}", "tokens/s")


@dataclass(frozen=True)
class RooflinePoint:
    """A decode (N = 1) or a prefill of N tokens placed on this host's roofline."""
    phase: str = column("phase")
    prompt_tokens: int = column("prompt tokens", "N")
    weight_reads: int = column("weight reads", "ceil(N ÷ n_ubatch)")
    tokens_per_read: float = column("tokens per weight read")
    intensity: float = column("arithmetic intensity", "FLOPs/byte")
    attainable_gflop_s: float = column("attainable on this CPU", "GFLOP/s")
    bound_here: str = column("bound on this CPU")
    tokens_per_s: float = column("roofline speed on this CPU", "tokens/s")  # attainable FLOP/s ÷ FLOPs per token
    bound_h100: str = column("bound on H100")


@dataclass(frozen=True)
class MeasuredPoint:
    """A phase the server ran, at its intensity and the GFLOP/s it reached (tokens/s × FLOPs per token)."""
    phase: str = column("phase")
    intensity: float = column("intensity", "FLOPs/byte")
    tokens_per_s: Spread = spread("tokens/s", "tokens/s min", "tokens/s max", "tokens/s")
    reached: float = column("reached", "GFLOP/s")
    numpy_roof: float = column("this CPU's roof there", "GFLOP/s")  # numpy's matmul and read at that intensity
    engine_roof: float | None = column("the engine's roof there", "GFLOP/s")  # its prefill's GFLOP/s, same read
    closest: str = column("closest roof")  # the roof the point lies nearer to (in ratio)


@dataclass(frozen=True)
class BatchRow:
    """A level P against the baseline (one sequence alone), placed on this host's roofline."""
    parallel: int = column("parallel sequences", "P")
    batches: int = column("batches")
    tokens_per_batch: int = column("tokens per batch")
    wall_ms: float = column("batch wall time", "ms")
    aggregate: Spread = spread("aggregate decode", "aggregate min", "aggregate max", "tokens/s")
    per_sequence: Spread = spread("per sequence", "per sequence min", "per sequence max", "tokens/s")
    aggregate_ratio: float = column("aggregate ÷ baseline", "×")
    per_sequence_ratio: float = column("per sequence ÷ baseline", "×")
    tokens_generated: int = column("tokens generated (responses)")
    predicted_delta: float | None = column("tokens_predicted_total Δ (/metrics)")
    tokens_per_call: float | None = column("tokens per llama_decode call")
    intensity: float | None = column("intensity of one step", "FLOPs/byte")
    bound: str | None = column("bound on this CPU's roofline")


@dataclass(frozen=True)
class AttentionIntensity:
    """Attention in one decode step, for one KV head, beside the podcast's own figure."""
    label: str = column("case")
    seq_len: int = column("positions", "S")
    head_dim: int = column("head width")  # no letter: d is lesson 6's depth, g the capstone's cost per block
    group: float = column("query heads per KV head")
    flops: float = column("FLOPs")
    bytes: float = column("K and V bytes (FP16)", "bytes")
    flops_per_byte: float = column("intensity", "FLOPs/byte")
    podcast: float = column("the podcast", "FLOPs/byte")


# --- the arithmetic: pure, from the responses and the host's measurements --------------------

def parallel_levels(total_slots: int, wanted: tuple[int, ...] = (1, 2, 4, 8)) -> list[int]:
    """Powers of two up to the slots a remote server offers, and that count itself."""
    levels = [p for p in wanted if p <= total_slots]
    p = max(wanted) * 2
    while p <= min(total_slots, 64):
        levels.append(p)
        p *= 2
    if total_slots not in levels and total_slots <= 64:
        levels.append(total_slots)
    return sorted(set(levels)) or [1]


def blas_text(host: HostCeilings) -> str:
    """The BLAS numpy multiplies with, and its version: named in the host table and in the matmul's settings."""
    lib = host.blas.get("blas") or {}
    return f"{lib.get('internal_api', 'unknown BLAS')} {lib.get('version') or ''}".strip()


def ceilings(host: HostCeilings) -> list[Ceiling]:
    """The read bandwidth and the matmul FLOP/s, each with how it was measured."""
    bw, mm, blas = host.bandwidth, host.matmul, host.blas
    bw_gbs, peak_gflops = bw["gb_per_s"], mm["gflop_per_s"]
    return [
        Ceiling("memory read bandwidth", Spread(bw_gbs["median"], bw_gbs["min"], bw_gbs["max"]), "GB/s", len(bw_gbs["samples"]),
                f"{bw['threads']} threads × {bw['bytes_per_thread'] / MiB:,.0f} MiB, np.add.reduce"),
        Ceiling("matmul compute", Spread(peak_gflops["median"], peak_gflops["min"], peak_gflops["max"]), "GFLOP/s",
                len(peak_gflops["samples"]), (f"{mm['dtype']} {mm['m']}×{mm['k']} @ {mm['k']}×{mm['n']}, "
                                              f"{blas_text(host)}, {(blas.get('blas') or {}).get('num_threads')} threads")),
    ]


def host_roofline(host: HostCeilings, n_bytes: int) -> Roofline:
    """This host's CPU from its medians: matmul FLOP/s ÷ read bytes/s."""
    peak, bw = host.peak_flop_s, host.bandwidth_b_s
    return Roofline("this host's CPU", "measured (medians)", peak / 1e9, bw / GB, formulas.ridge_point(peak, bw),
                    ceiling_at(host.bandwidth["gb_per_s"]["median"], n_bytes))


def published_rooflines(n_bytes: int) -> list[Roofline]:
    """The H100 (published FLOP/s and bandwidth) and the DGX Spark (published bandwidth only)."""
    h100 = published.H100
    peak, h100_bw, spark_gbs = h100["peak_flop_s"], h100["bandwidth_bytes_per_s"], published.SPARK_BANDWIDTH_GB_PER_S
    return [Roofline("H100", "published", peak / 1e9, h100_bw / GB, formulas.ridge_point(peak, h100_bw),
                     ceiling_at(h100_bw / GB, n_bytes)),
            Roofline(published.SPARK_NAME, "published bandwidth only", None, spark_gbs * GB / GB, None,
                     ceiling_at(spark_gbs, n_bytes))]


def engine_roof_gflop_s(n_params: int, prefill: list[float]) -> float | None:
    """The engine's compute roof: the GFLOP/s its timed prefill reached (median tokens/s × FLOPs per token), the
    fastest arithmetic it showed; None when the run timed no prefill."""
    return Spread.of(prefill).median * formulas.flops_per_token(n_params) / 1e9 if prefill else None


def bound_ridge(ridge: float, engine_gflop_s: float | None, host: HostCeilings) -> BoundRidge:
    """The ridge the bound labels use, the roof the plot draws the measured points against: the engine's (its roof ÷
    the read bandwidth) where the run timed a prefill, else numpy's matmul ridge."""
    bw_gbs = host.bandwidth["gb_per_s"]["median"]
    if engine_gflop_s is None:
        return BoundRidge(ridge, None, bw_gbs, ridge)
    return BoundRidge(engine_gflop_s * 1e9 / host.bandwidth_b_s, engine_gflop_s, bw_gbs, ridge)


def roofline_points(n_params: int, n_bytes: int, n_ubatch: int, host: HostCeilings, ridge: float,
                    h100_ridge: float) -> list[RooflinePoint]:
    """Decode and prefills of PREFILL_TOKENS: a prefill of N reads the weights ceil(N ÷ n_ubatch) times,
    so its intensity is N ÷ reads × the decode's; attainable = min(peak, intensity × bandwidth) on numpy's roof.
    The bound is against `ridge`: the engine's where the run timed a prefill, else numpy's."""
    dec_i = formulas.decode_intensity(n_params, n_bytes)
    flops_tok = formulas.flops_per_token(n_params)
    points = []
    for N in (1, *PREFILL_TOKENS):
        reads = formulas.prefill_weight_reads(N, n_ubatch)
        inten = N / reads * dec_i
        att = attainable_flop_s(inten, host.peak_flop_s, host.bandwidth_b_s)
        points.append(RooflinePoint("decode" if N == 1 else f"prefill of {N}", N, reads, N / reads, inten, att / 1e9,
                                    bound(inten, ridge), att / flops_tok, bound(inten, h100_ridge)))
    return points


def measured_points(n_params: int, dec_i: float, host: HostCeilings, decode: list[float], prefill: list[float],
                    prefill_tokens: int) -> list[MeasuredPoint]:
    """Decode (one sequence alone, the batching table's baseline) and the timed prefill at their intensity and the
    GFLOP/s they reached, against this CPU's roofline and the engine's (the compute roof at its prefill's
    GFLOP/s: the fastest arithmetic the engine showed; memory at the same read bandwidth)."""
    flops_tok = formulas.flops_per_token(n_params)
    engine_peak = robust.judge(prefill).median * flops_tok if prefill else None
    out = []
    for phase, samples, inten in (("decode (P = 1)", decode, dec_i),
                                  (f"prefill of {prefill_tokens}", prefill, prefill_tokens * dec_i)):
        if not samples:
            continue
        tps = Spread.of(samples)
        reached = tps.median * flops_tok / 1e9
        numpy_roof = attainable_flop_s(inten, host.peak_flop_s, host.bandwidth_b_s) / 1e9
        engine_roof = None if engine_peak is None else attainable_flop_s(inten, engine_peak, host.bandwidth_b_s) / 1e9
        roofs = {"numpy's": numpy_roof, **({"the engine's": engine_roof} if engine_roof is not None else {})}
        out.append(MeasuredPoint(phase, inten, tps, reached, numpy_roof, engine_roof,
                                 formulas.closest_roof(reached, roofs)))
    return out


@dataclass(frozen=True)
class BatchLevel:
    """The samples of one level P: what the lesson records of it, and what its row of the batching table sums up."""
    parallel: int
    wall_s: list[float]  # one per batch
    generated: list[list[int]]  # tokens each sequence generated, per batch
    aggregate: list[float]  # tokens/s of each batch: all its tokens ÷ its wall time
    per_sequence: list[float]  # tokens/s of each sequence, from its own timings
    predicted_delta: float | None  # /metrics tokens_predicted_total Δ over the batches (None: no /metrics)
    decode_calls_delta: float | None  # /metrics n_decode_total Δ

    @property
    def tokens_per_call(self) -> float | None:
        """Tokens one llama_decode call generated: the sequences that shared one read of the weights."""
        if self.predicted_delta is None or not self.decode_calls_delta:
            return None
        return self.predicted_delta / self.decode_calls_delta


def _delta(after: dict | None, before: dict | None, key: str) -> float | None:
    if after is None or before is None or key not in after:
        return None
    return after[key] - before.get(key, 0.0)


def _sum_or_none(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def batch_level(P: int, runs: list[BatchRun]) -> BatchLevel:
    """The samples of one level: aggregate tokens/s per batch, per-sequence tokens/s from each response's
    timings, and the /metrics counters' rise over all its batches."""
    generated = [[c.timings.predicted_n for c in run.completions] for run in runs]
    walls = [run.wall_s for run in runs]
    return BatchLevel(
        P, walls, generated,
        aggregate=[sum(g) / w for g, w in zip(generated, walls, strict=True)],  # all its tokens ÷ its wall time
        per_sequence=[decode_tokens_per_s(c.timings) for run in runs for c in run.completions],
        predicted_delta=_sum_or_none([_delta(r.metrics_after, r.metrics_before, PREDICTED) for r in runs]),
        decode_calls_delta=_sum_or_none([_delta(r.metrics_after, r.metrics_before, DECODE_CALLS) for r in runs]))


def batch_row(level: BatchLevel, baseline: float, dec_i: float, ridge: float) -> BatchRow:
    """A level against the baseline. The step's intensity comes from the tokens each llama_decode call
    generated (/metrics), not from P: a slot that waits does not share the weight read."""
    agg, per_seq = Spread.of(level.aggregate), Spread.of(level.per_sequence)
    per_call = level.tokens_per_call
    inten = per_call * dec_i if per_call is not None else None
    return BatchRow(level.parallel, len(level.wall_s), sum(level.generated[0]), 1e3 * Spread.of(level.wall_s).median,
                    agg, per_seq, agg.median / baseline,
                    per_seq.median / baseline, sum(map(sum, level.generated)), level.predicted_delta, per_call, inten,
                    bound(inten, ridge) if inten is not None else None)


def attention_intensity(seq_len: int, head_dim: int, group: float = 1.0, bytes_per_element: float = 2.0,
                        label: str = "") -> AttentionIntensity:
    """One decode step of attention for one KV head over seq_len cached positions of width head_dim:
    q·K (2·S·d FLOPs) and the weighted sum of V (2·S·d) for each of the `group` query heads sharing
    that KV head, against K and V read once (2·S·d elements). About 1 FLOP per byte per query head in FP16."""
    flops = 4 * seq_len * head_dim * group
    nbytes = 2 * seq_len * head_dim * bytes_per_element
    return AttentionIntensity(label, seq_len, head_dim, group, flops, nbytes, flops / nbytes,
                              published.PODCAST_DECODE_ATTENTION["flops_per_byte"])


def decode_attention_cases() -> list[AttentionIntensity]:
    """The podcast's decode-attention example recomputed: no grouped-query attention, and the 70B's groups."""
    pod, kv70 = published.PODCAST_DECODE_ATTENTION, published.KV_70B
    S, d = pod["seq_len"], pod["head_dim"]
    return [attention_intensity(S, d, 1, label="one query head per KV head (no grouped-query attention, "
                                                "e.g. the course's specimen)"),
            attention_intensity(S, d, kv70["n_head"] / kv70["n_head_kv"],
                                label=f"the 70B example: {kv70['n_head']} query heads share {kv70['n_head_kv']} KV heads")]


