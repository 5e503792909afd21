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

Its parts: the plan (what it asks: bytesup.store.plans.lesson07); the arithmetic, one record per figure
(bytesup.store.facts.lesson07); the view (tables, notes, plots: bytesup.store.views.lesson07); here `main`, the
requests and what it records.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup.course import formulas, robust, stopping
from bytesup.course.stopping import Stop
from bytesup.course.ceiling import Spread
from bytesup.errors import BytesupError
from bytesup.host import hostbench
from bytesup.lesson import LessonContext
from bytesup.llama.responses import decode_tokens_per_s
from bytesup.llama.shapes import ServerShape
from bytesup.llama.timed import concurrent_completions, long_prompt_tokens, prefill_samples, timed_completions
from bytesup.store.facts.lesson07 import (BatchLevel, BatchRun, HostCeilings, batch_level, batch_row, blas_text, bound_ridge,
                                          ceilings, decode_attention_cases, engine_roof_gflop_s, host_roofline,
                                          measured_points, parallel_levels, published_rooflines, roofline_points)
from bytesup.store.plans.lesson07 import MIN_BATCHES, READS, Plan, current, from_older, read
from bytesup.store.views import lesson07
from bytesup.units import PINNED

TITLE = "The hardware fit"


def main(ctx: LessonContext):
    facts = ctx.server_facts()
    own = facts["local"] and facts["model_readable"]  # servers of our own with 1…8 slots need the file, on this host
    plan = the_plan(ctx)
    ctx.settings.update({"pinned": PINNED, "own_servers": own, "repeat": plan.batches})
    model = served_model(ctx)
    elsewhere = None if facts["host_bandwidth_applies"] else facts["reason"]

    # 1. This host's CPU roofline (bandwidth, FLOP/s, ridge point) beside the published machines.
    host = measure_host_ceilings(ctx, plan)
    roofs = [host_roofline(host, model.bytes_per_token), *published_rooflines(model.bytes_per_token)]
    ridge, h100_ridge = roofs[0].ridge, roofs[1].ridge
    assert ridge is not None and h100_ridge is not None
    record_host_ceilings(ctx, host, ridge)
    lesson07.show_host_ceilings(ctx, ceilings(host), host.bandwidth, host.matmul, host.blas, blas_text(host), model,
                                lesson07.where_server(facts))
    lesson07.show_rooflines(ctx, roofs, host.bandwidth["gb_per_s"]["median"], host.matmul["gflop_per_s"]["median"],
                            model, elsewhere)

    # 2. Where decode and prefill sit: intensity = N tokens × 2 FLOPs per parameter ÷ weight bytes per read. A timed
    # prefill gives the engine's roof: left of its ridge a point waits on memory, right of it on arithmetic.
    prefill = measure_prefill(ctx, plan)
    labels = bound_ridge(ridge, engine_roof_gflop_s(model.n_params, prefill), host)
    batching = formulas.batch_sizes(ctx.identity.get("server", {}).get("flags"))
    points = roofline_points(model.n_params, model.bytes_per_token, batching["n_ubatch"], host, labels.ridge, h100_ridge)
    lesson07.show_roofline_points(ctx, points, model, host.peak_flop_s, labels, h100_ridge, batching)

    # 3. Batching flips the bottleneck: P sequences share each read of the weights.
    levels = list(plan.parallel) if own else parallel_levels(served_slots(ctx.server))
    ctx.settings.update({"parallel": levels, "batch_n_predict": plan.batch_n_predict, "ctx_per_slot": plan.ctx_per_slot})
    runs, stops = run_batches(ctx, plan, levels, own)
    measured = [batch_level(P, runs[P]) for P in levels]
    record_batches(ctx, measured)
    baseline = Spread.of(measured[0].per_sequence).median  # both ratios': one sequence alone, timed by the server
    dec_i = points[0].intensity
    rows = [batch_row(lv, baseline, dec_i, labels.ridge) for lv in measured]
    notes = lesson07.batching_notes(rows, baseline, dec_i, labels, h100_ridge, facts, own)
    if stops and plan.batch_rule is not None:
        ctx.settings["batches_stopped"] = {str(P): stop.to_json() for P, stop in stops.items()}
        notes.append(lesson07.batches_stopped(stops, plan.batch_rule))
    lesson07.show_batching(ctx, rows, notes)

    # 4. The measured points on the roofline: decode alone and the timed prefill, in GFLOP/s.
    reached = measured_points(model.n_params, dec_i, host, measured[0].per_sequence, prefill, plan.prefill.tokens)
    lesson07.show_measured_points(ctx, reached, model, plan.prefill.tokens)
    lesson07.plot_roofline(ctx, points, host.peak_flop_s, host.bandwidth_b_s, ridge, host.bandwidth["gb_per_s"]["median"],
                           host.matmul["gflop_per_s"]["median"], model, reached)

    # 5. Attention in decode: the podcast's figure, recomputed.
    lesson07.show_decode_attention(ctx, decode_attention_cases())
    lesson07.plot_batching(ctx, rows, model)

    # What this run shows: what bounds decode here, and whether batching paid, first on the page with the roofline.
    ctx.shows(lesson07.shows(model, points[0], labels, rows), plot="roofline")
    return ctx.finish()


def the_plan(ctx: LessonContext) -> Plan:
    """What the lesson asks, recorded once in the run (the host value `plan`): the matmul and the prefill each take the
    run's samples for a median with its spread (at least robust.MIN_SAMPLES), each level P its batches (at least one).
    A run recorded before plans existed is read from the host values it recorded (store.plans.lesson07 upgrades it)."""
    def fresh() -> dict[str, Any]:
        return current(samples=ctx.samples(robust.MIN_SAMPLES),
                       batches=ctx.samples(MIN_BATCHES, name="batches")).model_dump(mode="json")
    return ctx.plan(fresh, read, from_older, READS)


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


def measure_host_ceilings(ctx: LessonContext, plan: Plan) -> HostCeilings:
    """The run's bandwidth reading (shared by lessons 1, 4, 6, 7 and 8) and a numpy matmul's FLOP/s."""
    ctx.step("measuring this host's memory read bandwidth")
    bw = ctx.run_bandwidth()
    ctx.step("measuring this host's matmul FLOP/s")
    blas = ctx.host("blas_info", hostbench.blas_info)
    mm = ctx.host("matmul_peak", lambda: hostbench.measure_matmul_peak(plan.matmul_size, repeats=plan.matmul_repeats))
    return HostCeilings(bw, blas, mm)


def measure_prefill(ctx: LessonContext, plan: Plan) -> list[float]:
    """Prefill tokens/s of the plan's prompt on the run's server: its warm-up, then its timed samples (none: no prefill)."""
    p = plan.prefill
    if not p.samples:
        return []
    ctx.step(f"timing a prefill of {p.tokens} tokens")
    ids = long_prompt_tokens(ctx.server, p.tokens)
    done = timed_completions(ctx.server, ids, 1, p.warmup + p.samples)
    return prefill_samples(done[p.warmup:])


def _metrics(server) -> dict | None:
    """/metrics counters, or None when the server does not serve them (no --metrics)."""
    try:
        return server.metrics()
    except BytesupError:
        return None


def batch_bodies(plan: Plan, P: int, r: int) -> list[dict[str, Any]]:
    """The P requests of batch r: temperature 0 and cache_prompt false as PINNED, so every batch does the same work
    (a full prefill, n_predict decoded tokens); only the seed differs, so each request is distinct; request i goes
    to slot i."""
    return [{**PINNED, "n_predict": plan.batch_n_predict, "seed": plan.batch_seed_base + 1000 * P + 100 * r + i,
             "id_slot": i} for i in range(P)]


def run_batch(ctx: LessonContext, server, plan: Plan, P: int, r: int, before: dict | None = None) -> BatchRun:
    """P completions sent at once, one per slot, between two readings of /metrics (`before` when the caller
    holds it already). The wall time is a host measurement (recorded)."""
    before = _metrics(server) if before is None else before
    done, live_wall = concurrent_completions(server, plan.batch_prompt, batch_bodies(plan, P, r))
    wall = ctx.host(f"batch_wall_s_p{P}_r{r}", lambda: live_wall)
    return BatchRun(done, wall, before, _metrics(server))


def run_level(ctx: LessonContext, server, plan: Plan, P: int, shared_reads: bool) -> tuple[list[BatchRun], Stop | None]:
    """The plan's batches of P: `plan.batches`, or as many as its stopping rule takes (and what stopped them). On a
    server of our own nothing else runs between two batches, so one reading of /metrics is the counters after one
    batch and before the next (`shared_reads`)."""
    runs: list[BatchRun] = []
    rule = plan.batch_rule.rule() if plan.batch_rule is not None else None

    def batches():
        for r in ctx.track(range(rule.maximum if rule else plan.batches), f"{P} at once"):
            runs.append(run_batch(ctx, server, plan, P, r, runs[-1].metrics_after if shared_reads and runs else None))
            yield runs[-1]

    if rule is None:
        return list(batches()), None
    taken, stop = stopping.take(rule, batches(), batch_figures, lambda run: run.wall_s)
    return taken, stop


def batch_figures(runs: list[BatchRun]) -> list[list[float]]:
    """The figures a level's batches stop on, one value a batch: its median per-sequence decode speed (the server's
    timings) and its aggregate speed, every token it generated ÷ its wall time (a recorded host value)."""
    return [[statistics.median(decode_tokens_per_s(c.timings) for c in run.completions) for run in runs],
            [sum(c.timings.predicted_n for c in run.completions) / run.wall_s for run in runs]]


def run_batches(ctx: LessonContext, plan: Plan, levels: list[int],
                own: bool) -> tuple[dict[int, list[BatchRun]], dict[int, Stop]]:
    """The plan's batches per level: on servers of our own with P slots, else on the user's server; and what stopped
    each level's batches, where the plan has a stopping rule."""
    model = Path(ctx.host("model_path", lambda: str(ctx.require_model()))) if own else None  # a replay has no file
    out, stops = {}, {}
    for P in levels:
        ctx.step(f"decoding {P} sequence(s) at once")
        if model is not None:
            with ctx.local_server(f"parallel-{P}", ServerShape.per_slot(model, P, plan.ctx_per_slot)) as srv:
                out[P], stop = run_level(ctx, srv, plan, P, plan.shared_metrics_reads)
        else:
            out[P], stop = run_level(ctx, ctx.server, plan, P, False)
        if stop is not None:
            stops[P] = stop
    return out, stops


# --- what the lesson records: measurements ---------------------------------------------------------

def record_host_ceilings(ctx: LessonContext, host: HostCeilings, ridge: float) -> None:
    """The two ceilings' samples, and the ridge point they give."""
    bw, mm = host.bandwidth, host.matmul
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=True,
                settings={"threads": bw["threads"]}, description=bw["method"])
    ctx.measure("matmul_peak_gflop_per_s", "GFLOP/s", mm["gflop_per_s"]["samples"], higher_is_better=None,
                settings={"size": mm["size"], "dtype": mm["dtype"], "blas": blas_text(host)},
                description="square matmul with numpy: the compute ceiling of this host's CPU roofline")
    ctx.measure("ridge_point_flops_per_byte", "FLOPs/byte", [ridge], higher_is_better=None,
                description="median matmul FLOP/s ÷ median read bandwidth, this host's CPU")


def record_batches(ctx: LessonContext, levels: list[BatchLevel]) -> None:
    for lv in levels:
        ctx.measure("batch_aggregate_decode_tokens_per_s", "tokens/s", lv.aggregate, higher_is_better=True,
                    settings={"parallel": lv.parallel},
                    description="tokens generated by the batch ÷ its wall time (host clock)")
        ctx.measure("batch_per_sequence_decode_tokens_per_s", "tokens/s", lv.per_sequence, higher_is_better=True,
                    settings={"parallel": lv.parallel}, description="each sequence's decode speed from its own timings")


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
