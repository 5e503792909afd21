"""Lesson 7 — The hardware fit

A machine has two ceilings: how fast it computes (FLOP/s) and how fast it reads memory (bytes/s).
Their ratio, the ridge point, is the arithmetic intensity (FLOPs per byte) a piece of work needs
before compute, not memory, limits it. This script measures both ceilings on this host's CPU (a
multi-threaded memory read and a numpy matmul), sets them beside the published H100 example and
the DGX Spark's published bandwidth, and places the served model's decode (about 2 FLOPs per
parameter over the bytes of one parameter) and its prefill of N tokens (N times that) on the
roofline, then where the server's decode and a timed prefill really were: the GFLOP/s they reached,
against this CPU's roof and the engine's own (its prefill's rate). Then it shows batching flip the
bottleneck: servers with 1, 2, 4 and 8 slots decode that many sequences at once, reading the
weights once per step for all of them, and the aggregate tokens/s is measured against the speed of
each sequence, with the server's /metrics counters as witness.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
from dataclasses import dataclass
from typing import Any

from bytesup.course import decodetime
from bytesup.course import formulas
from bytesup.host import hostbench
from bytesup.llama import timed as measure
from bytesup.course import published
from bytesup.course import robust
from bytesup.course.ceiling import Spread, ceiling_at
from bytesup.errors import BytesupError
from bytesup.llama.responses import Completion, decode_tokens_per_s
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns
from bytesup.lesson import LessonContext

TITLE = "The hardware fit"

GB = formulas.GB
MiB = 2**20
H100 = published.H100  # the course's roofline example (published)

PREFILL_TOKENS = (16, 128, 512, 2048)  # prompt lengths placed on the roofline besides decode (N = 1)
PARALLEL = (1, 2, 4, 8)  # slots (sequences decoded together) in the batching sweep
CTX_PER_SLOT = 512  # each slot's context: the short prompt plus the generated tokens fit easily
BATCH_N_PREDICT = 64  # tokens each sequence generates in one batch
BATCH_PROMPT = "The cat sat on the"
BATCH_SEED_BASE = 7000  # each request gets its own seed so recorded requests stay distinct
MATMUL_SIZE = 2048  # square float32 matmul for the compute ceiling: long enough to time reliably
PAID = 1.1  # "batching paid" when the best aggregate beats P = 1 by more than 10%
MEASURED_PREFILL_TOKENS = 128  # a prompt of one micro-batch, timed by the server, for the measured prefill point
PREDICTED, DECODE_CALLS = "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total"  # /metrics counters


# --- requests: the server, the host and the batches ---------------------------------------------

@dataclass(frozen=True)
class ServedModel:
    """What the server says it serves (/v1/models meta)."""
    name: str
    n_params: int
    tensor_bytes: int
    weight_type: str | None

    @property
    def bytes_per_token(self) -> int:
        return formulas.bytes_per_token({"tensor_bytes": self.tensor_bytes})


@dataclass(frozen=True)
class HostCeilings:
    """This host's two measured ceilings, as hostbench reports them (host values)."""
    bandwidth: dict  # the run's bandwidth reading: gb_per_s {samples, median, min, max}, threads, …
    blas: dict  # hostbench.blas_info()
    matmul: dict  # hostbench.measure_matmul_peak(): gflop_per_s {…}, seconds {…}, flops, m, k, n, dtype


@dataclass(frozen=True)
class BatchRun:
    """One batch: P completions sent at once, its wall time on this host's clock, /metrics around it."""
    completions: list[Completion]
    wall_s: float
    metrics_before: dict | None
    metrics_after: dict | None


def served_model(ctx: LessonContext) -> ServedModel:
    """Parameters and weight bytes as the server reports them (/v1/models meta: n_params, and size,
    the bytes of all its tensors); no model file is needed here."""
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 7 needs the served model's parameter count and size, and the server's "
                           "/v1/models gives no meta.n_params / meta.size. Is it a llama.cpp llama-server?")
    return ServedModel(served["name"], int(meta["n_params"]), int(meta["size"]), meta.get("ftype"))


def served_slots(server) -> int:
    """How many sequences the user's server decodes at once: /props total_slots, else /slots."""
    total = server.props().total_slots
    if total:
        return int(total)
    try:
        return max(1, len(server.slots()))
    except BytesupError:  # /slots disabled (--no-slots): one slot is all we may assume
        return 1


def measure_host_ceilings(ctx: LessonContext) -> HostCeilings:
    """The run's bandwidth reading (shared by lessons 1, 4, 6, 7 and 8) and a numpy matmul's FLOP/s."""
    ctx.step("measuring this host's memory read bandwidth")
    bw = ctx.run_bandwidth()
    ctx.step("measuring this host's matmul FLOP/s")
    blas = ctx.host("blas_info", hostbench.blas_info)
    mm = ctx.host("matmul_peak", lambda: hostbench.measure_matmul_peak(MATMUL_SIZE, repeats=ctx.repeat + 2))
    return HostCeilings(bw, blas, mm)


def measure_prefill(ctx: LessonContext) -> list[float]:
    """Prefill tokens/s of a MEASURED_PREFILL_TOKENS-token prompt on the run's server: one warm-up, then at
    least robust.MIN_SAMPLES timed ones. A run recorded before these requests replays without them."""
    plan = ctx.host_since("prefill_plan", lambda: {"warmup": 1, "samples": max(robust.MIN_SAMPLES, ctx.repeat),
                                                   "tokens": MEASURED_PREFILL_TOKENS},
                          before={"warmup": 0, "samples": 0, "tokens": MEASURED_PREFILL_TOKENS})
    if not plan["samples"]:
        return []
    ctx.step(f"timing a prefill of {plan['tokens']} tokens")
    ids = measure.long_prompt_tokens(ctx.server, plan["tokens"])
    done = measure.timed_completions(ctx.server, ids, 1, plan["warmup"] + plan["samples"])
    return measure.prefill_samples(done[plan["warmup"]:])


def _metrics(server) -> dict | None:
    """/metrics counters, or None when the server does not serve them (no --metrics)."""
    try:
        return server.metrics()
    except BytesupError:
        return None


def batch_bodies(P: int, r: int) -> list[dict[str, Any]]:
    """The P requests of batch r: temperature 0 and cache_prompt false as measure.PINNED, so every batch
    does the same work (a full prefill, n_predict decoded tokens); only the seed differs, so each
    request is distinct; request i goes to slot i."""
    return [{**measure.PINNED, "n_predict": BATCH_N_PREDICT, "seed": BATCH_SEED_BASE + 1000 * P + 100 * r + i,
             "id_slot": i} for i in range(P)]


def run_batch(ctx: LessonContext, server, P: int, r: int, before: dict | None = None) -> BatchRun:
    """P completions sent at once, one per slot, between two readings of /metrics (`before` when the caller
    holds it already). The wall time is a host measurement (recorded)."""
    before = _metrics(server) if before is None else before
    done, live_wall = measure.concurrent_completions(server, BATCH_PROMPT, batch_bodies(P, r))
    wall = ctx.host(f"batch_wall_s_p{P}_r{r}", lambda: live_wall)
    return BatchRun(done, wall, before, _metrics(server))


def run_level(ctx: LessonContext, server, P: int, shared_reads: bool) -> list[BatchRun]:
    """ctx.repeat batches of P. On a server of our own nothing else runs between two batches, so one reading
    of /metrics is the counters after one batch and before the next (`shared_reads`)."""
    runs: list[BatchRun] = []
    for r in ctx.track(range(ctx.repeat), f"{P} at once"):
        runs.append(run_batch(ctx, server, P, r, runs[-1].metrics_after if shared_reads and runs else None))
    return runs


def run_batches(ctx: LessonContext, levels: list[int], own: bool) -> dict[int, list[BatchRun]]:
    """ctx.repeat batches per level: on servers of our own with P slots, else on the user's server. A run
    recorded before the readings were shared between batches replays with a reading on each side of each."""
    model = ctx.host("model_path", lambda: str(ctx.require_model())) if own else None  # a replay has no file
    shared = own and ctx.host_since("shared_metrics_reads", lambda: True, before=False)
    out = {}
    for P in levels:
        ctx.step(f"decoding {P} sequence(s) at once")
        if own:
            with ctx.local_server(f"parallel-{P}", model, ["--parallel", str(P), "-c", str(CTX_PER_SLOT * P)]) as srv:
                out[P] = run_level(ctx, srv, P, shared)
        else:
            out[P] = run_level(ctx, ctx.server, P, False)
    return out


# --- computation: pure, from the responses and the host's measurements ---------------------------

@dataclass(frozen=True)
class Roofline:
    """One machine's roofline: peak FLOP/s, memory bytes/s, their ratio, and the decode ceiling they give."""
    machine: str
    source: str
    peak_flop_s: float | None
    bandwidth_bytes_per_s: float
    ridge_flops_per_byte: float | None
    decode_ceiling_tokens_per_s: float


@dataclass(frozen=True)
class RooflinePoint:
    """A decode (N = 1) or a prefill of N tokens placed on this host's roofline: a row of its table as it is."""
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
    """A phase the server ran, placed at its intensity and the GFLOP/s it reached (tokens/s × FLOPs per token)."""
    phase: str
    intensity: float  # FLOPs per byte
    tokens_per_s: Spread
    gflop_s: Spread
    numpy_roof_gflop_s: float  # this CPU's roofline (numpy's matmul and read) at that intensity
    engine_roof_gflop_s: float | None  # the engine's: its prefill's GFLOP/s, and the same read bandwidth
    closest: str  # the roof the point lies nearer to (in ratio)


@dataclass(frozen=True)
class BatchLevel:
    """The batches of one level P, summed up: the samples, and the row of the batching table."""
    parallel: int
    wall_s: list[float]  # one per batch
    generated: list[list[int]]  # tokens each sequence generated, per batch
    aggregate: list[float]  # tokens/s of each batch: all its tokens ÷ its wall time
    per_sequence: list[float]  # tokens/s of each sequence, from its own timings
    predicted_delta: float | None  # /metrics tokens_predicted_total Δ over the batches (None: no /metrics)
    decode_calls_delta: float | None  # /metrics n_decode_total Δ

    @property
    def tokens_per_batch(self) -> int:
        return sum(self.generated[0])

    @property
    def tokens_generated(self) -> int:
        return sum(map(sum, self.generated))

    @property
    def tokens_per_call(self) -> float | None:
        """Tokens one llama_decode call generated: the sequences that shared one read of the weights."""
        if self.predicted_delta is None or not self.decode_calls_delta:
            return None
        return self.predicted_delta / self.decode_calls_delta


@dataclass(frozen=True)
class BatchRow:
    """A level against the baseline (one sequence alone) and placed on this host's roofline."""
    level: BatchLevel
    wall_ms: float
    aggregate: Spread
    per_sequence: Spread
    aggregate_ratio: float
    per_sequence_ratio: float
    intensity: float | None
    bound: str | None


@dataclass(frozen=True)
class AttentionIntensity:
    label: str
    seq_len: int
    head_dim: int
    group: float  # query heads per KV head
    flops: float
    bytes: float
    flops_per_byte: float


def decode_intensity(n_params: float, n_bytes: float) -> float:
    """FLOPs per byte of one decoded token: ~2 FLOPs per parameter, every weight byte read once."""
    return formulas.flops_per_token(n_params) / n_bytes


def attainable_flop_s(intensity: float, peak_flop_s: float, bandwidth_b_s: float) -> float:
    """The roofline: the lower of the compute ceiling and what the memory can feed."""
    return min(peak_flop_s, intensity * bandwidth_b_s)


def bound(intensity: float, ridge: float) -> str:
    """Which ceiling limits work of this intensity on a machine with this ridge point."""
    return "memory" if intensity < ridge else "compute"


def tokens_to_cross(ridge: float, intensity_per_token: float) -> int:
    """Smallest number of tokens per weight read whose intensity reaches the ridge."""
    return max(1, math.ceil(ridge / intensity_per_token))


def aggregate_tokens_per_s(generated: list[int], wall_s: float) -> float:
    """All tokens the batch generated ÷ the batch's wall time."""
    return sum(generated) / wall_s


def parallel_levels(total_slots: int, wanted: tuple[int, ...] = PARALLEL) -> list[int]:
    """Powers of two up to the slots a remote server offers, and that count itself."""
    levels = [p for p in wanted if p <= total_slots]
    p = max(wanted) * 2
    while p <= min(total_slots, 64):
        levels.append(p)
        p *= 2
    if total_slots not in levels and total_slots <= 64:
        levels.append(total_slots)
    return sorted(set(levels)) or [1]


def host_roofline(host: HostCeilings, n_bytes: int) -> Roofline:
    """This host's CPU from its medians: matmul FLOP/s ÷ read bytes/s."""
    peak = host.matmul["gflop_per_s"]["median"] * 1e9
    bw_gbs = host.bandwidth["gb_per_s"]["median"]
    bw = bw_gbs * GB
    return Roofline("this host's CPU", "measured (medians)", peak, bw, formulas.ridge_point(peak, bw),
                    ceiling_at(bw_gbs, n_bytes))


def published_rooflines(n_bytes: int) -> list[Roofline]:
    """The H100 (published FLOP/s and bandwidth) and the DGX Spark (published bandwidth only)."""
    h100_bw, spark_gbs = H100["bandwidth_bytes_per_s"], published.SPARK_BANDWIDTH_GB_PER_S
    return [Roofline("H100", "published", H100["peak_flop_s"], h100_bw,
                     formulas.ridge_point(H100["peak_flop_s"], h100_bw), ceiling_at(h100_bw / GB, n_bytes)),
            Roofline(published.SPARK_NAME, "published bandwidth only", None, spark_gbs * GB, None,
                     ceiling_at(spark_gbs, n_bytes))]


def roofline_points(n_params: int, n_bytes: int, n_ubatch: int, host: Roofline, h100_ridge: float) -> list[RooflinePoint]:
    """Decode and prefills of PREFILL_TOKENS: a prefill of N reads the weights ceil(N ÷ n_ubatch) times,
    so its intensity is N ÷ reads × the decode's; attainable = min(peak, intensity × bandwidth)."""
    assert host.peak_flop_s is not None and host.ridge_flops_per_byte is not None
    dec_i = decode_intensity(n_params, n_bytes)
    flops_tok = formulas.flops_per_token(n_params)
    points = []
    for N in (1, *PREFILL_TOKENS):
        reads = formulas.prefill_weight_reads(N, n_ubatch)
        inten = N / reads * dec_i
        att = attainable_flop_s(inten, host.peak_flop_s, host.bandwidth_bytes_per_s)
        points.append(RooflinePoint("decode" if N == 1 else f"prefill of {N}", N, reads, N / reads, inten, att / 1e9,
                                    bound(inten, host.ridge_flops_per_byte), att / flops_tok, bound(inten, h100_ridge)))
    return points


def closest_roof(gflop_s: float, roofs: dict[str, float]) -> str:
    """The roof whose attainable GFLOP/s is nearest the measured one, as a ratio (|ln(measured ÷ roof)|);
    "both" when the roofs are one there (below both ridges they share the memory slope)."""
    if len(set(roofs.values())) == 1 and len(roofs) > 1:
        return "both"
    return min(roofs, key=lambda name: abs(math.log(gflop_s / roofs[name])))


def measured_points(n_params: int, dec_i: float, here: Roofline, decode: list[float],
                    prefill: list[float]) -> list[MeasuredPoint]:
    """Decode (one sequence alone, the batching table's baseline) and the timed prefill at their intensity and the
    GFLOP/s they reached, against this CPU's roofline and the engine's (the compute roof at its prefill's
    GFLOP/s: the fastest arithmetic the engine showed; memory at the same read bandwidth)."""
    assert here.peak_flop_s is not None
    flops_tok = formulas.flops_per_token(n_params)
    engine_peak = robust.judge(prefill).median * flops_tok if prefill else None
    out = []
    for phase, samples, inten in (("decode (P = 1)", decode, dec_i),
                                  (f"prefill of {MEASURED_PREFILL_TOKENS}", prefill, MEASURED_PREFILL_TOKENS * dec_i)):
        if not samples:
            continue
        tps = Spread.of(samples)
        gflops = Spread(tps.median * flops_tok / 1e9, tps.min * flops_tok / 1e9, tps.max * flops_tok / 1e9)
        numpy_roof = attainable_flop_s(inten, here.peak_flop_s, here.bandwidth_bytes_per_s) / 1e9
        engine_roof = (None if engine_peak is None else
                       attainable_flop_s(inten, engine_peak, here.bandwidth_bytes_per_s) / 1e9)
        roofs = {"numpy's": numpy_roof, **({"the engine's": engine_roof} if engine_roof is not None else {})}
        out.append(MeasuredPoint(phase, inten, tps, gflops, numpy_roof, engine_roof, closest_roof(gflops.median, roofs)))
    return out


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
        aggregate=[aggregate_tokens_per_s(g, w) for g, w in zip(generated, walls, strict=True)],
        per_sequence=[decode_tokens_per_s(c.timings) for run in runs for c in run.completions],
        predicted_delta=_sum_or_none([_delta(r.metrics_after, r.metrics_before, PREDICTED) for r in runs]),
        decode_calls_delta=_sum_or_none([_delta(r.metrics_after, r.metrics_before, DECODE_CALLS) for r in runs]))


def baseline_tokens_per_s(levels: list[BatchLevel]) -> float:
    """One baseline for both ratios: one sequence decoding alone, timed by the server (the first level)."""
    return Spread.of(levels[0].per_sequence).median


def batch_row(level: BatchLevel, baseline: float, dec_i: float, ridge: float) -> BatchRow:
    """A level against the baseline. The step's intensity comes from the tokens each llama_decode call
    generated (/metrics), not from P: a slot that waits does not share the weight read."""
    agg, per_seq = Spread.of(level.aggregate), Spread.of(level.per_sequence)
    per_call = level.tokens_per_call
    inten = per_call * dec_i if per_call is not None else None
    return BatchRow(level, 1e3 * Spread.of(level.wall_s).median, agg, per_seq, agg.median / baseline,
                    per_seq.median / baseline, inten, bound(inten, ridge) if inten is not None else None)


def attention_intensity(seq_len: int, head_dim: int, group: float = 1.0, bytes_per_element: float = 2.0,
                        label: str = "") -> AttentionIntensity:
    """One decode step of attention for one KV head over seq_len cached positions of width head_dim:
    q·K (2·S·d FLOPs) and the weighted sum of V (2·S·d) for each of the `group` query heads sharing
    that KV head, against K and V read once (2·S·d elements). About 1 FLOP per byte per query head in FP16."""
    flops = 4 * seq_len * head_dim * group
    nbytes = 2 * seq_len * head_dim * bytes_per_element
    return AttentionIntensity(label, seq_len, head_dim, group, flops, nbytes, flops / nbytes)


def decode_attention_cases() -> list[AttentionIntensity]:
    """The podcast's decode-attention example recomputed: no grouped-query attention, and the 70B's groups."""
    pod, kv70 = published.PODCAST_DECODE_ATTENTION, published.KV_70B
    S, d = pod["seq_len"], pod["head_dim"]
    return [attention_intensity(S, d, 1, label="one query head per KV head (no grouped-query attention, "
                                                "e.g. the course's specimen)"),
            attention_intensity(S, d, kv70["n_head"] / kv70["n_head_kv"],
                                label=f"the 70B example: {kv70['n_head']} query heads share {kv70['n_head_kv']} KV heads")]


def blas_text(host: HostCeilings) -> str:
    """The BLAS numpy multiplies with, and its version: named in the host table and in the matmul's settings."""
    lib = host.blas.get("blas") or {}
    return f"{lib.get('internal_api', 'unknown BLAS')} {lib.get('version') or ''}".strip()


# The tables' rows, one named record per row: each field is a column (bytesup.store.rows).

@dataclass(frozen=True)
class CeilingRow:
    quantity: str = column("quantity")
    median: float = column("median")
    min: float = column("min")
    max: float = column("max")
    unit: str = column("unit")
    samples: int = column("samples")
    how: str = column("how")


def ceiling_rows(host: HostCeilings) -> list[CeilingRow]:
    """The read bandwidth and the matmul FLOP/s, each with how it was measured."""
    bw, mm, blas = host.bandwidth, host.matmul, host.blas
    bw_gbs, peak_gflops = bw["gb_per_s"], mm["gflop_per_s"]
    return [
        CeilingRow("memory read bandwidth", bw_gbs["median"], bw_gbs["min"], bw_gbs["max"], "GB/s", len(bw_gbs["samples"]),
                   f"{bw['threads']} threads × {bw['bytes_per_thread'] / MiB:,.0f} MiB, np.add.reduce"),
        CeilingRow("matmul compute", peak_gflops["median"], peak_gflops["min"], peak_gflops["max"], "GFLOP/s",
                   len(peak_gflops["samples"]), (f"{mm['dtype']} {mm['m']}×{mm['k']} @ {mm['k']}×{mm['n']}, "
                                                 f"{blas_text(host)}, {(blas.get('blas') or {}).get('num_threads')} threads")),
    ]


@dataclass(frozen=True)
class RooflineRow:
    machine: str = column("machine")
    source: str = column("source")
    peak: float | None = column("peak compute", "GFLOP/s")
    bandwidth: float = column("memory bandwidth", "GB/s")
    ridge: float | None = column("ridge point", "FLOPs/byte")
    decode_ceiling: float = column("decode ceiling, {model}", "tokens/s")


def roofline_row(r: Roofline) -> RooflineRow:
    return RooflineRow(r.machine, r.source, None if r.peak_flop_s is None else r.peak_flop_s / 1e9,
                       r.bandwidth_bytes_per_s / GB, r.ridge_flops_per_byte, r.decode_ceiling_tokens_per_s)


@dataclass(frozen=True)
class MeasuredRow:
    phase: str = column("phase")
    intensity: float = column("intensity", "FLOPs/byte")
    tokens_per_s: float = column("tokens/s", "tokens/s")
    tokens_per_s_min: float = column("tokens/s min", "tokens/s")
    tokens_per_s_max: float = column("tokens/s max", "tokens/s")
    reached: float = column("reached", "GFLOP/s")
    numpy_roof: float = column("this CPU's roof there", "GFLOP/s")
    engine_roof: float | None = column("the engine's roof there", "GFLOP/s")
    closest: str = column("closest roof")


def measured_row(m: MeasuredPoint) -> MeasuredRow:
    return MeasuredRow(m.phase, m.intensity, m.tokens_per_s.median, m.tokens_per_s.min, m.tokens_per_s.max,
                       m.gflop_s.median, m.numpy_roof_gflop_s, m.engine_roof_gflop_s, m.closest)


@dataclass(frozen=True)
class BatchTableRow:
    parallel: int = column("parallel sequences", "P")
    batches: int = column("batches")
    tokens_per_batch: int = column("tokens per batch")
    wall_ms: float = column("batch wall time", "ms")
    aggregate: float = column("aggregate decode", "tokens/s")
    aggregate_min: float = column("aggregate min", "tokens/s")
    aggregate_max: float = column("aggregate max", "tokens/s")
    per_sequence: float = column("per sequence", "tokens/s")
    per_sequence_min: float = column("per sequence min", "tokens/s")
    per_sequence_max: float = column("per sequence max", "tokens/s")
    aggregate_ratio: float = column("aggregate ÷ baseline", "×")
    per_sequence_ratio: float = column("per sequence ÷ baseline", "×")
    tokens_generated: int = column("tokens generated (responses)")
    predicted_delta: float | None = column("tokens_predicted_total Δ (/metrics)")
    tokens_per_call: float | None = column("tokens per llama_decode call")
    intensity: float | None = column("intensity of one step", "FLOPs/byte")
    bound: str | None = column("bound on this CPU's roofline")


def batch_table_row(r: BatchRow) -> BatchTableRow:
    lv = r.level
    return BatchTableRow(lv.parallel, len(lv.wall_s), lv.tokens_per_batch, r.wall_ms, r.aggregate.median, r.aggregate.min,
                         r.aggregate.max, r.per_sequence.median, r.per_sequence.min, r.per_sequence.max,
                         r.aggregate_ratio, r.per_sequence_ratio, lv.tokens_generated, lv.predicted_delta,
                         lv.tokens_per_call, r.intensity, r.bound)


@dataclass(frozen=True)
class AttentionRow:
    case: str = column("case")
    positions: int = column("positions", "S")
    head_width: int = column("head width", "d")
    group: float = column("query heads per KV head", "g")
    flops: float = column("FLOPs")
    bytes: float = column("K and V bytes (FP16)", "bytes")
    intensity: float = column("intensity", "FLOPs/byte")
    podcast: float = column("the podcast", "FLOPs/byte")


def attention_row(a: AttentionIntensity) -> AttentionRow:
    """A case beside the podcast's own figure."""
    return AttentionRow(a.label, a.seq_len, a.head_dim, a.group, a.flops, a.bytes, a.flops_per_byte,
                        published.PODCAST_DECODE_ATTENTION["flops_per_byte"])


# --- what the lesson records: measurements, never from a rendering function ---------------------

def record_host_ceilings(ctx: LessonContext, host: HostCeilings, here: Roofline) -> None:
    """The two ceilings' samples, and the ridge point they give."""
    bw, mm = host.bandwidth, host.matmul
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=True,
                settings={"threads": bw["threads"]}, description=bw["method"])
    ctx.measure("matmul_peak_gflop_per_s", "GFLOP/s", mm["gflop_per_s"]["samples"], higher_is_better=None,
                settings={"size": mm["size"], "dtype": mm["dtype"], "blas": blas_text(host)},
                description="square matmul with numpy: the compute ceiling of this host's CPU roofline")
    assert here.ridge_flops_per_byte is not None
    ctx.measure("ridge_point_flops_per_byte", "FLOPs/byte", [here.ridge_flops_per_byte], higher_is_better=None,
                description="median matmul FLOP/s ÷ median read bandwidth, this host's CPU")


def record_batches(ctx: LessonContext, levels: list[BatchLevel]) -> None:
    for lv in levels:
        ctx.measure("batch_aggregate_decode_tokens_per_s", "tokens/s", lv.aggregate, higher_is_better=True,
                    settings={"parallel": lv.parallel},
                    description="tokens generated by the batch ÷ its wall time (host clock)")
        ctx.measure("batch_per_sequence_decode_tokens_per_s", "tokens/s", lv.per_sequence, higher_is_better=True,
                    settings={"parallel": lv.parallel}, description="each sequence's decode speed from its own timings")


# --- rendering: tables, notes and plots ----------------------------------------------------------

def where_server(facts: dict) -> str:
    if facts["on_accelerator"]:
        return f"on {facts['accelerators'][0]}, not on this CPU"
    if not facts["local"]:
        return f"on {facts['url_host']}, not on this host"
    return "on this CPU"


def show_host_ceilings(ctx: LessonContext, host: HostCeilings, model: ServedModel, where: str) -> None:
    bw, mm, blas = host.bandwidth, host.matmul, host.blas
    peak_gflops = mm["gflop_per_s"]
    lib_text = blas_text(host)
    ctx.table(
        "host_ceilings", "This host's CPU: its two ceilings, measured", columns(CeilingRow), cells(ceiling_rows(host)),
        notes=[
            f"Reading memory: {hostbench.describe_reading(bw)}.",
            (f"Computing: a {mm['m']}-square {mm['dtype']} matmul does {mm['flops'] / 1e9:.4g} GFLOP in "
             f"{mm['seconds']['median'] * 1e3:.4g} ms (median): {peak_gflops['median']:.4g} GFLOP/s through {lib_text} "
             f"on {blas.get('logical_cpus')} logical CPUs."),
            (f"This is the CPU's {mm['dtype']} ceiling, measured as lesson 3 measured its matmuls; the server multiplies "
             f"{model.weight_type or 'its'} weights with its own kernels {where}, so its compute ceiling "
             f"can differ."),
        ],
    )


def show_rooflines(ctx: LessonContext, roofs: list[Roofline], host: HostCeilings, model: ServedModel,
                   elsewhere: str | None) -> None:
    here, h100 = roofs[0], roofs[1]
    assert here.ridge_flops_per_byte is not None and h100.ridge_flops_per_byte is not None
    bw_med, peak_med = host.bandwidth["gb_per_s"]["median"], host.matmul["gflop_per_s"]["median"]
    notes = [
        (f"This host's CPU: {peak_med:.4g} GFLOP/s ÷ {bw_med:.3g} GB/s = {here.ridge_flops_per_byte:.3g} FLOPs "
         f"per byte; work doing fewer FLOPs per byte read waits on memory."),
        (f"H100: {H100['peak_flop_s'] / 1e12:g} TFLOP/s ÷ {H100['bandwidth_bytes_per_s'] / 1e12:g} TB/s = "
         f"{h100.ridge_flops_per_byte:.1f} FLOPs per byte (the course rounds it to {H100['ridge_flops_per_byte']:g}), "
         f"{h100.ridge_flops_per_byte / here.ridge_flops_per_byte:.3g} × this CPU's ridge."),
        (f"{published.SPARK_NAME}: the course publishes its {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s but no FLOP/s, "
         f"so it gets a decode ceiling and no ridge point."),
        (f"The last column is each machine's bandwidth ÷ the {model.bytes_per_token:,} bytes of {model.name}: the most "
         f"tokens/s decode could reach there."),
    ]
    if elsewhere:
        notes.append(f"The server does not decode on this CPU ({elsewhere}): its own roofline is that "
                     f"machine's, and this CPU's row and the points below describe this host only.")
    ctx.table(
        "rooflines", "Rooflines: ridge point = peak FLOP/s ÷ memory bytes/s",
        columns(RooflineRow, model=model.name), cells([roofline_row(r) for r in roofs]),
        notes=notes,
    )


def show_roofline_points(ctx: LessonContext, points: list[RooflinePoint], model: ServedModel, here: Roofline,
                         h100_ridge: float, batching: dict) -> None:
    assert here.peak_flop_s is not None and here.ridge_flops_per_byte is not None
    dec, best = points[0], points[-1]
    dec_i, ridge, n_ubatch = dec.intensity, here.ridge_flops_per_byte, batching["n_ubatch"]
    cross_here, cross_h100 = tokens_to_cross(ridge, dec_i), tokens_to_cross(h100_ridge, dec_i)
    flops_tok = formulas.flops_per_token(model.n_params)
    ctx.table(
        "roofline_points", f"Decode and prefill of {model.name} on this host's CPU roofline",
        columns(RooflinePoint), cells(points),
        notes=[
            (f"Decode: 2 × {model.n_params:,} parameters ÷ {model.bytes_per_token:,} bytes ({model.weight_type or 'weights'}) "
             f"= {dec_i:.3g} FLOPs per byte, {'below' if dec_i < ridge else 'at or above'} this CPU's ridge of "
             f"{ridge:.3g}: {dec.bound_here}-bound, "
             f"at most {dec.attainable_gflop_s:.4g} GFLOP/s ({100 * dec.attainable_gflop_s * 1e9 / here.peak_flop_s:.1f}% "
             f"of the matmul peak)."),
            f"A prefill multiplies the weights by micro-batches of up to n_ubatch = {n_ubatch:,} tokens "
            f"({batching['source']}), so it reads every weight ceil(N ÷ {n_ubatch:,}) times and its intensity is "
            f"N ÷ ceil(N ÷ {n_ubatch:,}) × {dec_i:.3g}: never above {n_ubatch:,} × {dec_i:.3g} = {n_ubatch * dec_i:,.4g}. "
            f"From {cross_here} tokens per read on it reaches this CPU's ridge, and on the H100 from {cross_h100}"
            + ("" if cross_h100 <= n_ubatch else f", more than one micro-batch holds: on the H100 a prefill stays "
               f"memory-bound at n_ubatch = {n_ubatch:,}") + ".",
            (f"The roofline speed column is attainable FLOP/s ÷ {flops_tok / 1e9:.4g} GFLOP per token: "
             f"{dec.tokens_per_s:,.0f} tokens/s for decode, {best.tokens_per_s:,.0f} tokens/s for a {best.prompt_tokens}-token "
             f"prefill ({best.tokens_per_s / dec.tokens_per_s:.3g} × faster per token)."),
        ],
    )


def plot_roofline(ctx: LessonContext, points: list[RooflinePoint], here: Roofline, host: HostCeilings,
                  model: ServedModel, measured: list[MeasuredPoint]) -> None:
    """The roofline, the phases where it puts them, and where the server's measured phases are."""
    assert here.peak_flop_s is not None and here.ridge_flops_per_byte is not None
    dec = points[0]
    lo = min(0.1, dec.intensity / 2)
    hi = max(4 * max(p.intensity for p in points), 4 * here.ridge_flops_per_byte)
    bw, peak = here.bandwidth_bytes_per_s, here.peak_flop_s
    series = [
        Series(label=f"roofline: {host.bandwidth['gb_per_s']['median']:.3g} GB/s, "
                     f"{host.matmul['gflop_per_s']['median']:.4g} GFLOP/s (this CPU)",
               x=[lo, here.ridge_flops_per_byte, hi], y=[lo * bw / 1e9, peak / 1e9, peak / 1e9], style="dashed"),
        Series(label="decode (N = 1) on the roof", x=[dec.intensity], y=[dec.attainable_gflop_s], style="points"),
        Series(label="prefill (N tokens) on the roof", x=[p.intensity for p in points[1:]],
               y=[p.attainable_gflop_s for p in points[1:]], style="points"),
    ]
    engine = next((m for m in measured if m.phase.startswith("prefill")), None)
    if engine is not None:
        top = engine.gflop_s.median * 1e9
        ridge = top / bw
        series.append(Series(label=f"the engine's roof: its prefill's {engine.gflop_s.median:.3g} GFLOP/s",
                             x=[lo, ridge, hi], y=[lo * bw / 1e9, top / 1e9, top / 1e9], style="dashed"))
    if measured:
        series.append(Series(label="measured (median, min–max)", x=[m.intensity for m in measured],
                             y=[m.gflop_s.median for m in measured], y_min=[m.gflop_s.min for m in measured],
                             y_max=[m.gflop_s.max for m in measured], style="points"))
    ctx.plot("roofline", f"This host's CPU roofline with {model.name}", "arithmetic intensity (FLOPs/byte)",
             "attainable GFLOP/s", series, log_x=True, log_y=True)


def show_measured_points(ctx: LessonContext, measured: list[MeasuredPoint], model: ServedModel) -> None:
    if not measured:
        return
    prefill = any(m.engine_roof_gflop_s is not None for m in measured)
    notes = [(f"GFLOP/s reached = tokens/s × {formulas.flops_per_token(model.n_params) / 1e9:.4g} GFLOP per token "
              f"(2 per parameter); decode is one sequence alone (the batching table's baseline)"
              + (f", prefill a {MEASURED_PREFILL_TOKENS}-token prompt timed by the server after a warm-up." if prefill
                 else "; this run timed no prefill of its own, so there is no engine roof.")),
             "Closest: the roof whose value at the point's intensity is nearest the point, as a ratio."]
    if prefill:
        notes.append("The engine's roof: its compute ceiling is the GFLOP/s its own prefill reached (the fastest "
                     "arithmetic it showed), its memory slope the same read bandwidth; prefill lies on it by construction.")
    for m in measured:
        notes.append(f"{m.phase}: {m.gflop_s.median:.3g} GFLOP/s, {100 * m.gflop_s.median / m.numpy_roof_gflop_s:.0f}% "
                     f"of this CPU's roofline at {m.intensity:.3g} FLOPs/byte"
                     + (f" and {100 * m.gflop_s.median / m.engine_roof_gflop_s:.0f}% of the engine's"
                        if m.engine_roof_gflop_s else "")
                     + ("; both roofs are the memory slope there." if m.closest == "both" else
                        f"; closest to {m.closest} roof."))
    ctx.table(
        "measured_points", f"Where {model.name}'s decode and prefill were: measured GFLOP/s at their intensity",
        columns(MeasuredRow), cells([measured_row(m) for m in measured]),
        notes=notes)


def batch_verdict(rows: list[BatchRow]) -> str:
    """What the sweep shows, in words chosen by its numbers (only what the numbers say): the best
    aggregate against the same baseline as every ratio of the table (one sequence alone)."""
    best = max(rows, key=lambda r: r.aggregate.median)
    first = rows[0]
    if (best.level.parallel != first.level.parallel and best.aggregate_ratio > PAID
            and best.aggregate.median > first.aggregate.median * PAID):
        return (f"Batching paid: the best aggregate, {best.aggregate.median:,.0f} tokens/s at P = {best.level.parallel}, "
                f"is {best.aggregate_ratio:.2f} × one sequence alone.")
    return (f"Batching did not pay in this run: no P beat one sequence alone by more than {100 * (PAID - 1):.0f}% "
            f"(best ×{best.aggregate_ratio:.2f} at P = {best.level.parallel}).")


def spread_note(rows: list[BatchRow]) -> str | None:
    """A warning when a level's aggregate samples differ by more than 1.5 ×."""
    noisy = [r for r in rows if r.aggregate.min > 0 and r.aggregate.max / r.aggregate.min > 1.5]
    if not noisy:
        return None
    return ("The aggregate samples scatter widely ("
            + ", ".join(f"P = {r.level.parallel}: {r.aggregate.min:,.0f}–{r.aggregate.max:,.0f} tokens/s" for r in noisy)
            + "): read the shape with care, or rerun with more repeats on a quiet machine.")


def batching_notes(rows: list[BatchRow], baseline: float, dec_i: float, ridge: float, h100_ridge: float,
                   facts: dict, own: bool) -> list[str]:
    first, last = rows[0], rows[-1]
    base, P_last = first.level.parallel, last.level.parallel
    cross_here, cross_h100 = tokens_to_cross(ridge, dec_i), tokens_to_cross(h100_ridge, dec_i)
    notes = []
    if len(rows) > 1:
        notes += [
            (f"With {P_last} sequences at once the server generated {last.aggregate.median:,.0f} tokens/s in all, "
             f"{last.aggregate_ratio:.2f} × the baseline of {baseline:,.0f} tokens/s (one sequence alone at P = {base}, "
             f"timed by the server); each sequence ran at {last.per_sequence.median:,.0f} tokens/s, "
             f"{last.per_sequence_ratio:.2f} × the same baseline."),
            batch_verdict(rows),
        ]
    else:
        notes.append(f"The server offers {base} slot, so no batch of more than {base} sequence could be "
                     f"measured: {first.aggregate.median:,.0f} tokens/s.")
    notes += [
        (f"Both ratio columns divide by the same baseline, {baseline:,.0f} tokens/s: the median per-sequence decode at "
         f"P = {base}. At P = {base} the aggregate is {first.aggregate_ratio:.2f} × it, because the wall time also holds "
         f"the prefill and the HTTP round trips."),
        (f"One step reads the weights once and does the arithmetic of every token it decodes: intensity = tokens "
         f"per llama_decode call (from /metrics: tokens_predicted_total Δ ÷ n_decode_total Δ) × {dec_i:.3g} "
         f"FLOPs/byte, which reaches this CPU's ridge ({ridge:.3g}) from {cross_here} tokens per call on "
         f"(the H100's from {cross_h100})."),
        ("Aggregate = tokens generated ÷ the batch's wall time on this host's clock; per sequence = "
         "(predicted_n − 1) ÷ predicted_ms from each response."),
    ]
    if any(r.level.tokens_per_call is None for r in rows):
        notes.append("The server serves no /metrics counters for some levels, so their tokens per call and "
                     "intensity are left blank rather than assumed to be P.")
    spread = spread_note(rows)
    if spread:
        notes.append(spread)
    line_note = batch_line_note(rows)
    if line_note:
        notes.append(line_note)
    per_call = last.level.tokens_per_call
    if per_call is not None and P_last > 1:
        together = (f"on average {per_call:.1f} sequences shared each step, and so each read of the weights"
                    if per_call >= 1.5 else "the sequences mostly ran one at a time, each step with its own weight read")
        notes.append(f"/metrics: tokens_predicted_total rose by {last.level.predicted_delta:,.0f} over the "
                     f"{len(last.level.wall_s)} batches of {P_last} (the responses say {last.level.tokens_generated:,}), "
                     f"{per_call:.2f} generated tokens per llama_decode call (at most {P_last}): {together}.")
    if not facts["host_bandwidth_applies"]:
        notes.append(f"These batches decoded {where_server(facts)}: the last column places them on this CPU's roofline "
                     f"only for comparison.")
    if not own:
        why = (f"it runs on {facts['url_host']}" if not facts["local"] else
               "its model file is not readable here (pass --model PATH.gguf)")
        notes.append(f"This script cannot start servers of its own for the sweep ({why}): the user's server was "
                     f"measured as it runs, with up to {P_last} of its slots.")
    return notes


def batch_line_note(rows: list[BatchRow]) -> str | None:
    """The batch view's prediction (bytesup.course.decodetime.batch_prediction): the line through the steps at
    P = 2 and 4 set against the step measured at the largest P, and against P = 1."""
    steps = {r.level.parallel: 1e3 / r.per_sequence.median for r in rows if r.per_sequence.median > 0}
    last = max(steps, default=0)
    predicted = decodetime.batch_prediction(steps, (2, 4), last) if last > 4 else None
    if predicted is None:
        return None
    line, at_last = predicted
    alone = line.intercept_ms + line.slope_ms
    text = ("A step with P sequences takes 1000 ÷ the per-sequence tokens/s: "
            + ", ".join(f"{ms:.3g} ms" for ms in steps.values()) + f" at P = {', '.join(map(str, steps))}. "
            f"The line through P = 2 and 4 (a = {line.intercept_ms:.3g} ms, b = {line.slope_ms:.3g} ms per "
            f"sequence) predicts {at_last:.3g} ms at P = {last}, measured {steps[last]:.3g} "
            f"({100 * (steps[last] / at_last - 1):+.0f}%: predicted ÷ measured aggregate − 1), an aggregate of "
            f"{1e3 * last / at_last:,.0f} tokens/s against {1e3 * last / steps[last]:,.0f}.")
    if 1 in steps:
        text += (f" At P = 1 the same line gives {alone:.3g} ms against {steps[1]:.3g} measured: one sequence alone "
                 f"is another regime, the one the capstone's decode-time model explains.")
    return text


def show_batching(ctx: LessonContext, rows: list[BatchRow], notes: list[str]) -> None:
    ctx.table(
        "batching", "Batching: P sequences decoded at once", columns(BatchTableRow), cells([batch_table_row(r) for r in rows]),
        notes=notes,
    )


def plot_batching(ctx: LessonContext, rows: list[BatchRow], model: ServedModel) -> None:
    Ps = [r.level.parallel for r in rows]
    ctx.plot(
        "batching", f"Batching {model.name}: aggregate vs per-sequence decode", "parallel sequences P", "tokens/s",
        [
            Series(label="aggregate (all sequences)", x=[float(p) for p in Ps], y=[r.aggregate.median for r in rows],
                   y_min=[r.aggregate.min for r in rows], y_max=[r.aggregate.max for r in rows]),
            Series(label="per sequence", x=[float(p) for p in Ps], y=[r.per_sequence.median for r in rows],
                   y_min=[r.per_sequence.min for r in rows], y_max=[r.per_sequence.max for r in rows]),
        ],
    )


def show_decode_attention(ctx: LessonContext, cases: list[AttentionIntensity]) -> None:
    """The podcast's decode-attention intensity, recomputed."""
    pod = published.PODCAST_DECODE_ATTENTION
    S, d = pod["seq_len"], pod["head_dim"]
    one = cases[0].flops_per_byte
    ctx.table(
        "decode_attention_intensity", f"Attention in one decode step: FLOPs per byte over {S:,} cached positions",
        columns(AttentionRow), cells([attention_row(a) for a in cases]),
        notes=[(f"Per query head: q·K is 2·S·d FLOPs and the weighted sum of V another 2·S·d, 4·S·d = "
                f"{4 * S * d:,} FLOPs, against K and V of 2·S·d FP16 numbers = {4 * S * d:,} bytes: {one:g} FLOP per "
                f"byte, g FLOPs per byte when g query heads share one KV head."),
               (f"The podcast says about {pod['flops_per_byte']} FLOPs per byte for head width {d} and {S:,} positions: "
                f"{pod['flops_per_byte'] / one:.0f} × the arithmetic above. Its conclusion stands (far below any ridge "
                f"point: memory-bound), by a wider margin than it says.")],
    )


# --- the lesson ---------------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    # Our own servers with 1…8 slots need the model file and a server on this host.
    own = facts["local"] and facts["model_readable"]
    ctx.settings.update({"pinned": measure.PINNED, "own_servers": own, "repeat": ctx.repeat})
    model = served_model(ctx)
    elsewhere = None if facts["host_bandwidth_applies"] else facts["reason"]

    # 1. This host's CPU roofline (bandwidth, FLOP/s, ridge point) beside the published machines.
    host = measure_host_ceilings(ctx)
    roofs = [host_roofline(host, model.bytes_per_token), *published_rooflines(model.bytes_per_token)]
    here, h100_ridge = roofs[0], roofs[1].ridge_flops_per_byte
    assert here.ridge_flops_per_byte is not None and h100_ridge is not None
    record_host_ceilings(ctx, host, here)
    show_host_ceilings(ctx, host, model, where_server(facts))
    show_rooflines(ctx, roofs, host, model, elsewhere)

    # 2. Where decode and prefill sit: intensity = N tokens × 2 FLOPs per parameter ÷ weight bytes per read.
    batching = formulas.batch_sizes(ctx.identity.get("server", {}).get("flags"))
    points = roofline_points(model.n_params, model.bytes_per_token, batching["n_ubatch"], here, h100_ridge)
    show_roofline_points(ctx, points, model, here, h100_ridge, batching)
    prefill = measure_prefill(ctx)

    # 3. Batching flips the bottleneck: P sequences share each read of the weights.
    levels = list(PARALLEL) if own else parallel_levels(served_slots(ctx.server))
    ctx.settings.update({"parallel": levels, "batch_n_predict": BATCH_N_PREDICT, "ctx_per_slot": CTX_PER_SLOT})
    runs = run_batches(ctx, levels, own)
    measured = [batch_level(P, runs[P]) for P in levels]
    record_batches(ctx, measured)
    baseline = baseline_tokens_per_s(measured)
    dec_i = points[0].intensity
    rows = [batch_row(lv, baseline, dec_i, here.ridge_flops_per_byte) for lv in measured]
    show_batching(ctx, rows, batching_notes(rows, baseline, dec_i, here.ridge_flops_per_byte, h100_ridge, facts, own))

    # 4. The measured points on the roofline: decode alone and the timed prefill, in GFLOP/s.
    reached = measured_points(model.n_params, dec_i, here, measured[0].per_sequence, prefill)
    show_measured_points(ctx, reached, model)
    plot_roofline(ctx, points, here, host, model, reached)

    # 5. Attention in decode: the podcast's figure, recomputed.
    show_decode_attention(ctx, decode_attention_cases())
    plot_batching(ctx, rows, model)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
