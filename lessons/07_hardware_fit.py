"""Lesson 7 — The hardware fit

A machine has two ceilings: how fast it computes (FLOP/s) and how fast it reads memory (bytes/s).
Their ratio, the ridge point, is the arithmetic intensity (FLOPs per byte) a piece of work needs
before compute, not memory, limits it. This script measures both ceilings on this host's CPU (a
multi-threaded memory read and a numpy matmul), sets them beside the published H100 example and
the DGX Spark's published bandwidth, and places the served model's decode (about 2 FLOPs per
parameter over the bytes of one parameter) and its prefill of N tokens (N times that) on the
roofline. Then it shows batching flip the bottleneck: servers with 1, 2, 4 and 8 slots decode that
many sequences at once, reading the weights once per step for all of them, and the aggregate
tokens/s is measured against the speed of each sequence, with the server's /metrics counters as
witness.
"""

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
from typing import Any

from bytesup import formulas, hostbench, measure, published
from bytesup.errors import BytesupError
from bytesup.records import decode_tokens_per_s
from bytesup.results import Series
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


# --- pure helpers (tested on their own) -------------------------------------------------

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


# --- the server and what it serves -------------------------------------------------------

def served_model(ctx: LessonContext) -> dict:
    """Parameters and weight bytes as the server reports them (/v1/models meta: n_params, and size,
    the bytes of all its tensors); no model file is needed here."""
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 7 needs the served model's parameter count and size, and the server's "
                           "/v1/models gives no meta.n_params / meta.size. Is it a llama.cpp llama-server?")
    return {"name": served["name"], "n_params": int(meta["n_params"]), "tensor_bytes": int(meta["size"]),
            "weight_type": meta.get("ftype")}


def served_slots(server) -> int:
    """How many sequences the user's server decodes at once: /props total_slots, else /slots."""
    total = server.props().total_slots
    if total:
        return int(total)
    try:
        return max(1, len(server.slots()))
    except BytesupError:  # /slots disabled (--no-slots): one slot is all we may assume
        return 1


def _metrics(server) -> dict | None:
    """/metrics counters, or None when the server does not serve them (no --metrics)."""
    try:
        return server.metrics()
    except BytesupError:
        return None


def _delta(after: dict | None, before: dict | None, key: str) -> float | None:
    if after is None or before is None or key not in after:
        return None
    return after[key] - before.get(key, 0.0)


def run_batch(ctx: LessonContext, server, P: int, r: int) -> tuple[list, float, dict | None, dict | None]:
    """P completions sent at once, one per slot; returns (completions, wall s, /metrics before, after)."""
    # temperature 0 and cache_prompt false as measure.PINNED: every batch does the same work
    # (a full prefill, n_predict decoded tokens); only the seed differs, so each request is distinct.
    bodies = [{**measure.PINNED, "n_predict": BATCH_N_PREDICT, "seed": BATCH_SEED_BASE + 1000 * P + 100 * r + i,
               "id_slot": i} for i in range(P)]
    before = _metrics(server)
    done, live_wall = measure.concurrent_completions(server, BATCH_PROMPT, bodies)
    wall = ctx.host(f"batch_wall_s_p{P}_r{r}", lambda: live_wall)
    return done, wall, before, _metrics(server)


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    # Our own servers with 1…8 slots need the model file and a server on this host.
    own = facts["local"] and facts["model_readable"]
    ctx.settings.update({"pinned": measure.PINNED, "own_servers": own, "repeat": ctx.repeat})
    info = served_model(ctx)
    n_params, n_bytes = info["n_params"], formulas.bytes_per_token(info)
    elsewhere = None if facts["host_bandwidth_applies"] else facts["reason"]

    # 1. This host's CPU roofline: bandwidth, FLOP/s, ridge point; and the published machines.
    ctx.step("measuring this host's memory read bandwidth")
    bw = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 7 and 8
    threads = bw["threads"]
    ctx.step("measuring this host's matmul FLOP/s")
    blas = ctx.host("blas_info", hostbench.blas_info)
    mm = ctx.host("matmul_peak", lambda: hostbench.measure_matmul_peak(MATMUL_SIZE, repeats=ctx.repeat + 2))
    bw_gbs, peak_gflops = bw["gb_per_s"], mm["gflop_per_s"]
    host_bw = bw_gbs["median"] * GB
    host_peak = peak_gflops["median"] * 1e9
    host_ridge = formulas.ridge_point(host_peak, host_bw)
    lib = blas.get("blas") or {}
    lib_text = f"{lib.get('internal_api', 'unknown BLAS')} {lib.get('version') or ''}".strip()
    if facts["on_accelerator"]:
        where_server = f"on {facts['accelerators'][0]}, not on this CPU"
    elif not facts["local"]:
        where_server = f"on {facts['url_host']}, not on this host"
    else:
        where_server = "on this CPU"
    ctx.table(
        "host_ceilings", "This host's CPU: its two ceilings, measured",
        [("quantity", ""), ("median", ""), ("min", ""), ("max", ""), ("unit", ""), ("samples", ""), ("how", "")],
        [
            ["memory read bandwidth", bw_gbs["median"], bw_gbs["min"], bw_gbs["max"], "GB/s", len(bw_gbs["samples"]),
             f"{bw['threads']} threads × {bw['bytes_per_thread'] / MiB:,.0f} MiB, np.add.reduce"],
            ["matmul compute", peak_gflops["median"], peak_gflops["min"], peak_gflops["max"], "GFLOP/s",
             len(peak_gflops["samples"]), f"{mm['dtype']} {mm['m']}×{mm['k']} @ {mm['k']}×{mm['n']}, {lib_text}, "
             f"{lib.get('num_threads')} threads"],
        ],
        notes=[
            f"Reading memory: {hostbench.describe_reading(bw)}.",
            f"Computing: a {mm['m']}-square {mm['dtype']} matmul does {mm['flops'] / 1e9:.4g} GFLOP in "
            f"{mm['seconds']['median'] * 1e3:.4g} ms (median): {peak_gflops['median']:.4g} GFLOP/s through {lib_text} "
            f"on {blas.get('logical_cpus')} logical CPUs.",
            f"This is the CPU's {mm['dtype']} ceiling, measured as lesson 3 measured its matmuls; the server multiplies "
            f"{info.get('weight_type') or 'its'} weights with its own kernels {where_server}, so its compute ceiling "
            f"can differ.",
        ],
    )
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw_gbs["samples"], higher_is_better=True,
                settings={"threads": threads}, description=bw["method"])
    ctx.measure("matmul_peak_gflop_per_s", "GFLOP/s", peak_gflops["samples"], higher_is_better=None,
                settings={"size": mm["size"], "dtype": mm["dtype"], "blas": lib_text},
                description="square matmul with numpy: the compute ceiling of this host's CPU roofline")
    ctx.measure("ridge_point_flops_per_byte", "FLOPs/byte", [host_ridge], higher_is_better=None,
                description="median matmul FLOP/s ÷ median read bandwidth, this host's CPU")

    h100_ridge = formulas.ridge_point(H100["peak_flop_s"], H100["bandwidth_bytes_per_s"])
    spark_bw = published.SPARK_BANDWIDTH_GB_PER_S * GB
    roof_rows = [
        ["this host's CPU", "measured (medians)", host_peak / 1e9, host_bw / GB, host_ridge,
         formulas.ceiling_tokens_per_s(host_bw, n_bytes)],
        ["H100", "published", H100["peak_flop_s"] / 1e9, H100["bandwidth_bytes_per_s"] / GB, h100_ridge,
         formulas.ceiling_tokens_per_s(H100["bandwidth_bytes_per_s"], n_bytes)],
        [published.SPARK_NAME, "published bandwidth only", None, spark_bw / GB, None,
         formulas.ceiling_tokens_per_s(spark_bw, n_bytes)],
    ]
    roof_notes = [
        f"This host's CPU: {peak_gflops['median']:.4g} GFLOP/s ÷ {bw_gbs['median']:.3g} GB/s = {host_ridge:.3g} FLOPs "
        f"per byte; work doing fewer FLOPs per byte read waits on memory.",
        f"H100: {H100['peak_flop_s'] / 1e12:g} TFLOP/s ÷ {H100['bandwidth_bytes_per_s'] / 1e12:g} TB/s = "
        f"{h100_ridge:.1f} FLOPs per byte (the course rounds it to {H100['ridge_flops_per_byte']:g}), "
        f"{h100_ridge / host_ridge:.3g} × this CPU's ridge.",
        f"{published.SPARK_NAME}: the course publishes its {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s but no FLOP/s, "
        f"so it gets a decode ceiling and no ridge point.",
        f"The last column is each machine's bandwidth ÷ the {n_bytes:,} bytes of {info['name']}: the most tokens/s "
        f"decode could reach there.",
    ]
    if elsewhere:
        roof_notes.append(f"The server does not decode on this CPU ({elsewhere}): its own roofline is that "
                          f"machine's, and this CPU's row and the points below describe this host only.")
    ctx.table(
        "rooflines", "Rooflines: ridge point = peak FLOP/s ÷ memory bytes/s",
        [("machine", ""), ("source", ""), ("peak compute", "GFLOP/s"), ("memory bandwidth", "GB/s"),
         ("ridge point", "FLOPs/byte"), (f"decode ceiling, {info['name']}", "tokens/s")],
        roof_rows, notes=roof_notes,
    )

    # 2. Where decode and prefill sit: intensity = N tokens × 2 FLOPs per parameter ÷ weight bytes.
    dec_i = decode_intensity(n_params, n_bytes)
    flops_tok = formulas.flops_per_token(n_params)
    batching = formulas.batch_sizes(ctx.identity.get("server", {}).get("flags"))
    n_ubatch = batching["n_ubatch"]
    points = []
    for N in (1, *PREFILL_TOKENS):
        reads = formulas.prefill_weight_reads(N, n_ubatch)
        inten = N / reads * dec_i
        att = attainable_flop_s(inten, host_peak, host_bw)
        points.append(["decode" if N == 1 else f"prefill of {N}", N, reads, N / reads, inten, att / 1e9,
                       bound(inten, host_ridge), att / flops_tok, bound(inten, h100_ridge)])
    dec_row = points[0]
    cross_here = tokens_to_cross(host_ridge, dec_i)
    cross_h100 = tokens_to_cross(h100_ridge, dec_i)
    prefill_best = points[-1]
    ctx.table(
        "roofline_points", f"Decode and prefill of {info['name']} on this host's CPU roofline",
        [("phase", ""), ("prompt tokens", "N"), ("weight reads", "ceil(N ÷ n_ubatch)"),
         ("tokens per weight read", ""), ("arithmetic intensity", "FLOPs/byte"),
         ("attainable on this CPU", "GFLOP/s"), ("bound on this CPU", ""), ("roofline speed on this CPU", "tokens/s"),
         ("bound on H100", "")],
        points,
        notes=[
            f"Decode: 2 × {n_params:,} parameters ÷ {n_bytes:,} bytes ({info.get('weight_type') or 'weights'}) = "
            f"{dec_i:.3g} FLOPs per byte, {'below' if dec_i < host_ridge else 'at or above'} this CPU's ridge of "
            f"{host_ridge:.3g}: {dec_row[6]}-bound, "
            f"at most {dec_row[5]:.4g} GFLOP/s ({100 * dec_row[5] * 1e9 / host_peak:.1f}% of the matmul peak).",
            f"A prefill multiplies the weights by micro-batches of up to n_ubatch = {n_ubatch:,} tokens "
            f"({batching['source']}), so it reads every weight ceil(N ÷ {n_ubatch:,}) times and its intensity is "
            f"N ÷ ceil(N ÷ {n_ubatch:,}) × {dec_i:.3g}: never above {n_ubatch:,} × {dec_i:.3g} = {n_ubatch * dec_i:,.4g}. "
            f"From {cross_here} tokens per read on it reaches this CPU's ridge, and on the H100 from {cross_h100}"
            + ("" if cross_h100 <= n_ubatch else f", more than one micro-batch holds: on the H100 a prefill stays "
               f"memory-bound at n_ubatch = {n_ubatch:,}") + ".",
            f"The roofline speed column is attainable FLOP/s ÷ {flops_tok / 1e9:.4g} GFLOP per token: "
            f"{dec_row[7]:,.0f} tokens/s for decode, {prefill_best[7]:,.0f} tokens/s for a {prefill_best[1]}-token "
            f"prefill ({prefill_best[7] / dec_row[7]:.3g} × faster per token).",
        ],
    )
    lo = min(0.1, dec_i / 2)
    hi = max(4 * max(p[4] for p in points), 4 * host_ridge)
    ctx.plot(
        "roofline", f"This host's CPU roofline with {info['name']}", "arithmetic intensity (FLOPs/byte)",
        "attainable GFLOP/s",
        [
            Series(label=f"roofline: {bw_gbs['median']:.3g} GB/s, {peak_gflops['median']:.4g} GFLOP/s (this CPU)",
                   x=[lo, host_ridge, hi], y=[lo * host_bw / 1e9, host_peak / 1e9, host_peak / 1e9], style="dashed"),
            Series(label="decode (N = 1)", x=[dec_row[4]], y=[dec_row[5]], style="points"),
            Series(label="prefill (N tokens)", x=[p[4] for p in points[1:]], y=[p[5] for p in points[1:]],
                   style="points"),
        ],
        log_x=True, log_y=True,
    )

    # 3. Batching flips the bottleneck: P sequences share each read of the weights.
    levels = list(PARALLEL) if own else parallel_levels(served_slots(ctx.server))
    # Recorded: a replay starts no server and has no model file.
    model = ctx.host("model_path", lambda: str(ctx.require_model())) if own else None
    ctx.settings.update({"parallel": levels, "batch_n_predict": BATCH_N_PREDICT, "ctx_per_slot": CTX_PER_SLOT})
    batches: dict[int, dict[str, Any]] = {}
    for P in levels:
        ctx.step(f"decoding {P} sequence(s) at once")
        if own:
            with ctx.local_server(f"parallel-{P}", model, ["--parallel", str(P), "-c", str(CTX_PER_SLOT * P)]) as srv:
                runs = [run_batch(ctx, srv, P, r) for r in ctx.track(range(ctx.repeat), f"{P} at once")]
        else:
            runs = [run_batch(ctx, ctx.server, P, r) for r in ctx.track(range(ctx.repeat), f"{P} at once")]
        walls = [w for _, w, _, _ in runs]
        generated = [[c.timings.predicted_n for c in done] for done, _, _, _ in runs]
        agg = [aggregate_tokens_per_s(g, w) for g, w in zip(generated, walls)]
        per_seq = [decode_tokens_per_s(c.timings) for done, _, _, _ in runs for c in done]
        d_pred = [_delta(a, b, "llamacpp:tokens_predicted_total") for _, _, b, a in runs]
        d_dec = [_delta(a, b, "llamacpp:n_decode_total") for _, _, b, a in runs]
        batches[P] = {"walls": walls, "generated": generated, "agg": agg, "per_seq": per_seq,
                      "d_pred": None if None in d_pred else sum(d_pred), "d_dec": None if None in d_dec else sum(d_dec)}
        ctx.measure("batch_aggregate_decode_tokens_per_s", "tokens/s", agg, higher_is_better=True,
                    settings={"parallel": P}, description="tokens generated by the batch ÷ its wall time (host clock)")
        ctx.measure("batch_per_sequence_decode_tokens_per_s", "tokens/s", per_seq, higher_is_better=True,
                    settings={"parallel": P}, description="each sequence's decode speed from its own timings")

    base = levels[0]
    # One baseline for both speeds: one sequence decoding alone, timed by the server (P = base).
    baseline = hostbench.summarize(batches[base]["per_seq"])["median"]
    rows = []
    for P in levels:
        b = batches[P]
        a, s = hostbench.summarize(b["agg"]), hostbench.summarize(b["per_seq"])
        rows.append(batch_row(P, b, a, s, baseline, dec_i, host_ridge))
    first, last = rows[0], rows[-1]
    notes = []
    if len(rows) > 1:
        notes += [
            f"With {last[0]} sequences at once the server generated {last[4]:,.0f} tokens/s in all, "
            f"{last[10]:.2f} × the baseline of {baseline:,.0f} tokens/s (one sequence alone at P = {base}, timed by "
            f"the server); each sequence ran at {last[7]:,.0f} tokens/s, {last[11]:.2f} × the same baseline.",
            _batch_verdict(rows),
        ]
    else:
        notes.append(f"The server offers {first[0]} slot, so no batch of more than {first[0]} sequence could be "
                     f"measured: {first[4]:,.0f} tokens/s.")
    notes += [
        f"Both ratio columns divide by the same baseline, {baseline:,.0f} tokens/s: the median per-sequence decode at "
        f"P = {base}. At P = {base} the aggregate is {first[10]:.2f} × it, because the wall time also holds the "
        f"prefill and the HTTP round trips.",
        f"One step reads the weights once and does the arithmetic of every token it decodes: intensity = tokens "
        f"per llama_decode call (from /metrics: tokens_predicted_total Δ ÷ n_decode_total Δ) × {dec_i:.3g} "
        f"FLOPs/byte, which reaches this CPU's ridge ({host_ridge:.3g}) from {cross_here} tokens per call on "
        f"(the H100's from {cross_h100}).",
        "Aggregate = tokens generated ÷ the batch's wall time on this host's clock; per sequence = "
        "(predicted_n − 1) ÷ predicted_ms from each response.",
    ]
    if any(r[14] is None for r in rows):
        notes.append("The server serves no /metrics counters for some levels, so their tokens per call and "
                     "intensity are left blank rather than assumed to be P.")
    spread = _spread_note(rows)
    if spread:
        notes.append(spread)
    if last[14] is not None and last[0] > 1:
        together = (f"on average {last[14]:.1f} sequences shared each step, and so each read of the weights"
                    if last[14] >= 1.5 else "the sequences mostly ran one at a time, each step with its own weight read")
        notes.append(f"/metrics: tokens_predicted_total rose by {last[13]:,.0f} over the {last[1]} batches of "
                     f"{last[0]} (the responses say {last[12]:,}), {last[14]:.2f} generated tokens per llama_decode "
                     f"call (at most {last[0]}): {together}.")
    if elsewhere:
        notes.append(f"These batches decoded {where_server}: the last column places them on this CPU's roofline "
                     f"only for comparison.")
    if not own:
        why = (f"it runs on {facts['url_host']}" if not facts["local"] else
               "its model file is not readable here (pass --model PATH.gguf)")
        notes.append(f"This script cannot start servers of its own for the sweep ({why}): the user's server was "
                     f"measured as it runs, with up to {levels[-1]} of its slots.")
    ctx.table(
        "batching", "Batching: P sequences decoded at once",
        [("parallel sequences", "P"), ("batches", ""), ("tokens per batch", ""), ("batch wall time", "ms"),
         ("aggregate decode", "tokens/s"), ("aggregate min", "tokens/s"), ("aggregate max", "tokens/s"),
         ("per sequence", "tokens/s"), ("per sequence min", "tokens/s"), ("per sequence max", "tokens/s"),
         ("aggregate ÷ baseline", "×"), ("per sequence ÷ baseline", "×"), ("tokens generated (responses)", ""),
         ("tokens_predicted_total Δ (/metrics)", ""), ("tokens per llama_decode call", ""),
         ("intensity of one step", "FLOPs/byte"), ("bound on this CPU's roofline", "")],
        rows, notes=notes,
    )
    _decode_attention(ctx, info)
    ctx.plot(
        "batching", f"Batching {info['name']}: aggregate vs per-sequence decode", "parallel sequences P", "tokens/s",
        [
            Series(label="aggregate (all sequences)", x=[r[0] for r in rows], y=[r[4] for r in rows],
                   y_min=[r[5] for r in rows], y_max=[r[6] for r in rows]),
            Series(label="per sequence", x=[r[0] for r in rows], y=[r[7] for r in rows],
                   y_min=[r[8] for r in rows], y_max=[r[9] for r in rows]),
        ],
    )
    return ctx.finish()


def batch_row(P: int, b: dict, agg: dict, per_seq: dict, baseline: float, dec_i: float, ridge: float) -> list[Any]:
    """One row of the batching table. The step's intensity comes from the tokens each llama_decode call
    generated (/metrics), not from P: a slot that waits does not share the weight read."""
    per_call = b["d_pred"] / b["d_dec"] if b["d_pred"] is not None and b["d_dec"] else None
    inten = per_call * dec_i if per_call is not None else None
    return [P, len(b["walls"]), sum(b["generated"][0]), 1e3 * hostbench.summarize(b["walls"])["median"],
            agg["median"], agg["min"], agg["max"], per_seq["median"], per_seq["min"], per_seq["max"],
            agg["median"] / baseline, per_seq["median"] / baseline, sum(map(sum, b["generated"])),
            b["d_pred"], per_call, inten, bound(inten, ridge) if inten is not None else None]


def attention_intensity(seq_len: int, head_dim: int, group: float = 1.0, bytes_per_element: float = 2.0) -> dict:
    """One decode step of attention for one KV head over seq_len cached positions of width head_dim:
    q·K (2·S·d FLOPs) and the weighted sum of V (2·S·d) for each of the `group` query heads sharing
    that KV head, against K and V read once (2·S·d elements). About 1 FLOP per byte per query head in FP16."""
    flops = 4 * seq_len * head_dim * group
    nbytes = 2 * seq_len * head_dim * bytes_per_element
    return {"flops": flops, "bytes": nbytes, "flops_per_byte": flops / nbytes}


def _decode_attention(ctx: LessonContext, info: dict) -> None:
    """The podcast's decode-attention intensity, recomputed."""
    pod = published.PODCAST_DECODE_ATTENTION
    S, d = pod["seq_len"], pod["head_dim"]
    kv70 = published.KV_70B
    cases = [("one query head per KV head (no grouped-query attention, e.g. the course's specimen)", 1),
             (f"the 70B example: 64 query heads share {kv70['n_head_kv']} KV heads", 64 / kv70["n_head_kv"])]
    rows = []
    for label, g in cases:
        a = attention_intensity(S, d, g)
        rows.append([label, S, d, g, a["flops"], a["bytes"], a["flops_per_byte"], pod["flops_per_byte"]])
    one = rows[0][6]
    ctx.table(
        "decode_attention_intensity", f"Attention in one decode step: FLOPs per byte over {S:,} cached positions",
        [("case", ""), ("positions", "S"), ("head width", "d"), ("query heads per KV head", "g"), ("FLOPs", ""),
         ("K and V bytes (FP16)", "bytes"), ("intensity", "FLOPs/byte"), ("the podcast", "FLOPs/byte")],
        rows,
        notes=[f"Per query head: q·K is 2·S·d FLOPs and the weighted sum of V another 2·S·d, 4·S·d = "
               f"{4 * S * d:,} FLOPs, against K and V of 2·S·d FP16 numbers = {4 * S * d:,} bytes: {one:g} FLOP per "
               f"byte, g FLOPs per byte when g query heads share one KV head.",
               f"The podcast says about {pod['flops_per_byte']} FLOPs per byte for head width {d} and {S:,} positions: "
               f"{pod['flops_per_byte'] / one:.0f} × the arithmetic above. Its conclusion stands (far below any ridge "
               f"point: memory-bound), by a wider margin than it says."],
    )


def _batch_verdict(rows: list[list[Any]]) -> str:
    """What the sweep shows, in words chosen by its numbers (only what the numbers say): the best
    aggregate against the same baseline as every ratio of the table (one sequence alone)."""
    best = max(rows, key=lambda r: r[4])
    first = rows[0]
    if best[0] != first[0] and best[10] > PAID and best[4] > first[4] * PAID:
        return (f"Batching paid: the best aggregate, {best[4]:,.0f} tokens/s at P = {best[0]}, is {best[10]:.2f} × one "
                f"sequence alone.")
    return (f"Batching did not pay in this run: no P beat one sequence alone by more than {100 * (PAID - 1):.0f}% "
            f"(best ×{best[10]:.2f} at P = {best[0]}).")


def _spread_note(rows: list[list[Any]]) -> str | None:
    """A warning when a level's aggregate samples differ by more than 1.5 ×."""
    noisy = [r for r in rows if r[5] > 0 and r[6] / r[5] > 1.5]
    if not noisy:
        return None
    return ("The aggregate samples scatter widely (" + ", ".join(f"P = {r[0]}: {r[5]:,.0f}–{r[6]:,.0f} tokens/s" for r in noisy)
            + "): read the shape with care, or rerun with more repeats on a quiet machine.")


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
