"""Lesson 7's view: the tables, notes and plots that show its figures. The records they render, one per figure, and
the arithmetic that makes them are in `store.facts.lesson07`; this module records nothing and measures nothing."""

from __future__ import annotations

from typing import Protocol

from bytesup.course import decodetime, formulas, published
from bytesup.course.stopping import Stop
from bytesup.host import hostbench
from bytesup.store.facts.lesson07 import (AttentionIntensity, BatchRow, BoundRidge, Ceiling, MeasuredPoint, Roofline,
                                          RooflinePoint)
from bytesup.store.plans.stopping import StoppingRule
from bytesup.store.results import Series
from bytesup.store.rows import cells, columns
from bytesup.store.views import show_narrowed
from bytesup.store.views.page import Page

H100 = published.H100  # the course's roofline example (published)
# The columns each wide table shows in the main text; every column is in the full table, under Details.
CEILING_SHOWN = ["quantity", "median", "unit", "samples", "how"]
POINTS_SHOWN = ["phase", "prompt tokens", "tokens per weight read", "arithmetic intensity", "attainable on this CPU",
                "bound on this CPU", "roofline speed on this CPU", "bound on H100"]
BATCH_SHOWN = ["parallel sequences", "aggregate decode", "per sequence", "aggregate ÷ baseline", "per sequence ÷ baseline",
               "tokens per llama_decode call", "intensity of one step", "bound on this CPU's roofline"]
MEASURED_SHOWN = ["phase", "intensity", "tokens/s", "reached", "this CPU's roof there", "the engine's roof there",
                  "closest roof"]
PAID = 1.1  # "batching paid" when the best aggregate beats P = 1 by more than 10%


class Served(Protocol):
    """The served model as the view names it."""

    @property
    def name(self) -> str: ...

    @property
    def n_params(self) -> int: ...

    @property
    def weight_type(self) -> str | None: ...

    @property
    def bytes_per_token(self) -> int: ...


# --- the roofline: ceilings, machines, points -----------------------------------------------------

def where_server(facts: dict) -> str:
    if facts["on_accelerator"]:
        return f"on {facts['accelerators'][0]}, not on this CPU"
    if not facts["local"]:
        return f"on {facts['url_host']}, not on this host"
    return "on this CPU"


def show_host_ceilings(page: Page, ceilings: list[Ceiling], bandwidth: dict, matmul: dict, blas: dict, blas_text: str,
                       model: Served, where: str) -> None:
    mm, peak_gflops = matmul, matmul["gflop_per_s"]
    show_narrowed(
        page, "host_ceilings", "This host's CPU: its two ceilings, measured",
        "This host's CPU ceilings, with each one's lowest and highest sample", columns(Ceiling), cells(ceilings),
        CEILING_SHOWN, formulas=[],
        notes=[
            f"Reading memory: {hostbench.describe_reading(bandwidth)}.",
            (f"Computing: a {mm['m']}-square {mm['dtype']} matmul does {mm['flops'] / 1e9:.4g} GFLOP in "
             f"{mm['seconds']['median'] * 1e3:.4g} ms (median): {peak_gflops['median']:.4g} GFLOP/s through {blas_text} "
             f"on {blas.get('logical_cpus')} logical CPUs."),
            (f"This is the CPU's {mm['dtype']} ceiling, measured as lesson 3 measured its matmuls; the server multiplies "
             f"{model.weight_type or 'its'} weights with its own kernels {where}, so its compute ceiling "
             f"can differ."),
        ],
    )


def show_rooflines(page: Page, roofs: list[Roofline], bw_median: float, peak_median: float, model: Served,
                   elsewhere: str | None) -> None:
    here, h100 = roofs[0], roofs[1]
    assert here.ridge is not None and h100.ridge is not None
    notes = [
        (f"This host's CPU: {peak_median:.4g} GFLOP/s ÷ {bw_median:.3g} GB/s = {here.ridge:.3g} FLOPs "
         f"per byte; work doing fewer FLOPs per byte read waits on memory."),
        (f"H100: {H100['peak_flop_s'] / 1e12:g} TFLOP/s ÷ {H100['bandwidth_bytes_per_s'] / 1e12:g} TB/s = "
         f"{h100.ridge:.1f} FLOPs per byte (the course rounds it to {H100['ridge_flops_per_byte']:g}), "
         f"{h100.ridge / here.ridge:.3g} × this CPU's ridge."),
        (f"{published.SPARK_NAME}: the course publishes its {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s but no FLOP/s, "
         f"so it gets a decode ceiling and no ridge point."),
        (f"The last column is each machine's bandwidth ÷ the {model.bytes_per_token:,} bytes of {model.name}: the most "
         f"tokens/s decode could reach there."),
    ]
    if elsewhere:
        notes.append(f"The server does not decode on this CPU ({elsewhere}): its own roofline is that "
                     f"machine's, and this CPU's row and the points below describe this host only.")
    page.table("rooflines", "Rooflines: ridge point = peak FLOP/s ÷ memory bytes/s",
               columns(Roofline, model=model.name), cells(roofs), notes=notes)


def decode_note(dec: RooflinePoint, model: Served, peak_flop_s: float, labels: BoundRidge) -> str:
    """Where decode sits against the ridge its label is read at, and what numpy's roof would allow it."""
    head = (f"Decode: 2 × {model.n_params:,} parameters ÷ {model.bytes_per_token:,} bytes ({model.weight_type or 'weights'}) "
            f"= {dec.intensity:.3g} FLOPs per byte, ")
    share = f"{100 * dec.attainable_gflop_s * 1e9 / peak_flop_s:.1f}% of the matmul peak"
    if labels.engine_gflop_s is None:
        return (head + f"{'below' if dec.intensity < labels.ridge else 'at or above'} this CPU's ridge of "
                f"{labels.ridge:.3g}: {dec.bound_here}-bound, at most {dec.attainable_gflop_s:.4g} GFLOP/s ({share}).")
    return (head + f"{'left of' if dec.intensity < labels.ridge else 'at or right of'} the engine's ridge of "
            f"{labels.ridge:.3g} (its prefill's {labels.engine_gflop_s:.3g} GFLOP/s ÷ {labels.bandwidth_gb_s:.3g} GB/s, "
            f"the roof the plot draws the measured points against): {dec.bound_here}-bound on this CPU by the roofline. "
            f"The roofline calls a point left of a ridge memory-bound, right of it compute-bound: this CPU's column "
            f"reads the engine's ridge, the H100's its own. numpy's matmul ridge is {labels.numpy_ridge:.3g}; on numpy's "
            f"roof decode could reach {dec.attainable_gflop_s:.4g} GFLOP/s ({share}).")


def show_roofline_points(page: Page, points: list[RooflinePoint], model: Served, peak_flop_s: float, labels: BoundRidge,
                         h100_ridge: float, batching: dict) -> None:
    dec, best = points[0], points[-1]
    dec_i, n_ubatch = dec.intensity, batching["n_ubatch"]
    cross_here, cross_h100 = formulas.tokens_to_cross(labels.ridge, dec_i), formulas.tokens_to_cross(h100_ridge, dec_i)
    flops_tok = formulas.flops_per_token(model.n_params)
    show_narrowed(
        page, "roofline_points", f"Decode and prefill of {model.name} on this host's CPU roofline",
        f"Decode and prefill of {model.name} on this host's CPU roofline, every column",
        columns(RooflinePoint), cells(points), POINTS_SHOWN, formulas=[],
        notes=[
            decode_note(dec, model, peak_flop_s, labels),
            f"A prefill multiplies the weights by micro-batches of up to n_ubatch = {n_ubatch:,} tokens "
            f"({batching['source']}), so it reads every weight ceil(N ÷ {n_ubatch:,}) times and its intensity is "
            f"N ÷ ceil(N ÷ {n_ubatch:,}) × {dec_i:.3g}: never above {n_ubatch:,} × {dec_i:.3g} = {n_ubatch * dec_i:,.4g}. "
            f"From {cross_here} tokens per read on it reaches {labels.name}, and on the H100 from {cross_h100}"
            + ("" if cross_h100 <= n_ubatch else f", more than one micro-batch holds: on the H100 a prefill stays "
               f"memory-bound at n_ubatch = {n_ubatch:,}") + ".",
            (f"The roofline speed column is attainable FLOP/s ÷ {flops_tok / 1e9:.4g} GFLOP per token: "
             f"{dec.tokens_per_s:,.0f} tokens/s for decode, {best.tokens_per_s:,.0f} tokens/s for a {best.prompt_tokens}-token "
             f"prefill ({best.tokens_per_s / dec.tokens_per_s:.3g} × faster per token)."),
        ],
    )


def show_measured_points(page: Page, measured: list[MeasuredPoint], model: Served, prefill_tokens: int) -> None:
    if not measured:
        return
    prefill = any(m.engine_roof is not None for m in measured)
    notes = [(f"GFLOP/s reached = tokens/s × {formulas.flops_per_token(model.n_params) / 1e9:.4g} GFLOP per token "
              f"(2 per parameter); decode is one sequence alone (the batching table's baseline)"
              + (f", prefill a {prefill_tokens}-token prompt timed by the server after a warm-up." if prefill
                 else "; this run timed no prefill of its own, so there is no engine roof.")),
             "Closest: the roof whose value at the point's intensity is nearest the point, as a ratio."]
    if prefill:
        notes.append("The engine's roof: its compute ceiling is the GFLOP/s its own prefill reached (the fastest "
                     "arithmetic it showed), its memory slope the same read bandwidth; prefill lies on it by construction.")
    for m in measured:
        notes.append(f"{m.phase}: {m.reached:.3g} GFLOP/s, {100 * m.reached / m.numpy_roof:.0f}% "
                     f"of this CPU's roofline at {m.intensity:.3g} FLOPs/byte"
                     + (f" and {100 * m.reached / m.engine_roof:.0f}% of the engine's" if m.engine_roof else "")
                     + ("; both roofs are the memory slope there." if m.closest == "both" else
                        f"; closest to {m.closest} roof."))
    show_narrowed(page, "measured_points",
                  f"Where {model.name}'s decode and prefill were: measured GFLOP/s at their intensity",
                  f"Where {model.name}'s decode and prefill were, every column", columns(MeasuredPoint), cells(measured),
                  MEASURED_SHOWN, notes, [])


def plot_roofline(page: Page, points: list[RooflinePoint], peak_flop_s: float, bandwidth_b_s: float, ridge: float,
                  bw_median: float, peak_median: float, model: Served, measured: list[MeasuredPoint]) -> None:
    """The roofline, the phases where it puts them, and where the server's measured phases are."""
    dec = points[0]
    lo = min(0.1, dec.intensity / 2)
    hi = max(4 * max(p.intensity for p in points), 4 * ridge)
    bw, peak = bandwidth_b_s, peak_flop_s
    series = [
        Series(label=f"roofline: {bw_median:.3g} GB/s, {peak_median:.4g} GFLOP/s (this CPU)",
               x=[lo, ridge, hi], y=[lo * bw / 1e9, peak / 1e9, peak / 1e9], style="dashed"),
        Series(label="decode (N = 1) on the roof", x=[dec.intensity], y=[dec.attainable_gflop_s], style="points"),
        Series(label="prefill (N tokens) on the roof", x=[p.intensity for p in points[1:]],
               y=[p.attainable_gflop_s for p in points[1:]], style="points"),
    ]
    engine = next((m for m in measured if m.phase.startswith("prefill")), None)
    if engine is not None:
        top = engine.reached * 1e9
        series.append(Series(label=f"the engine's roof: its prefill's {engine.reached:.3g} GFLOP/s",
                             x=[lo, top / bw, hi], y=[lo * bw / 1e9, top / 1e9, top / 1e9], style="dashed"))
    if measured:
        flops_tok = formulas.flops_per_token(model.n_params)
        series.append(Series(label="measured (median, min–max)", x=[m.intensity for m in measured],
                             y=[m.reached for m in measured], y_min=[m.tokens_per_s.min * flops_tok / 1e9 for m in measured],
                             y_max=[m.tokens_per_s.max * flops_tok / 1e9 for m in measured], style="points"))
    page.plot("roofline", f"This host's CPU roofline with {model.name}", "arithmetic intensity (FLOPs/byte)",
              "attainable GFLOP/s", series, log_x=True, log_y=True)


# --- batching ---------------------------------------------------------------------------------------

def batch_verdict(rows: list[BatchRow]) -> str:
    """What the sweep shows, in words chosen by its numbers (only what the numbers say): the best
    aggregate against the same baseline as every ratio of the table (one sequence alone)."""
    best = max(rows, key=lambda r: r.aggregate.median)
    first = rows[0]
    if best.parallel != first.parallel and best.aggregate_ratio > PAID and best.aggregate.median > first.aggregate.median * PAID:
        return (f"Batching paid: the best aggregate, {best.aggregate.median:,.0f} tokens/s at P = {best.parallel}, "
                f"is {best.aggregate_ratio:.2f} × one sequence alone.")
    return (f"Batching did not pay in this run: no P beat one sequence alone by more than {100 * (PAID - 1):.0f}% "
            f"(best ×{best.aggregate_ratio:.2f} at P = {best.parallel}).")


def spread_note(rows: list[BatchRow]) -> str | None:
    """A warning when a level's aggregate samples differ by more than 1.5 ×."""
    noisy = [r for r in rows if r.aggregate.min > 0 and r.aggregate.max / r.aggregate.min > 1.5]
    if not noisy:
        return None
    return ("The aggregate samples scatter widely ("
            + ", ".join(f"P = {r.parallel}: {r.aggregate.min:,.0f}–{r.aggregate.max:,.0f} tokens/s" for r in noisy)
            + "): read the shape with care, or rerun with more repeats on a quiet machine.")


def batch_line_note(rows: list[BatchRow]) -> tuple[str, str] | None:
    """The batch view's prediction (bytesup.course.decodetime.batch_prediction): the line through the steps at
    P = 2 and 4 set against the step measured at the largest P, and against P = 1; in words, then its formula."""
    steps = {r.parallel: 1e3 / r.per_sequence.median for r in rows if r.per_sequence.median > 0}
    last = max(steps, default=0)
    predicted = decodetime.batch_prediction(steps, (2, 4), last) if last > 4 else None
    if predicted is None:
        return None
    line, at_last = predicted
    alone = line.intercept_ms + line.slope_ms
    text = ("A step with P sequences took " + ", ".join(f"{ms:.3g} ms" for ms in steps.values())
            + f" at P = {', '.join(map(str, steps))}. A straight line through the steps at P = 2 and 4, carried on to "
            f"P = {last}, predicts {at_last:.3g} ms there, measured {steps[last]:.3g} "
            f"({100 * (steps[last] / at_last - 1):+.0f}%).")
    if 1 in steps:
        text += (f" At P = 1 the same line gives {alone:.3g} ms against {steps[1]:.3g} measured: one sequence alone "
                 f"is another regime, the one the capstone's decode-time model explains.")
    formula = (f"The batch line: a step takes 1000 ÷ the per-sequence tokens/s; the line step(P) = t₀ + Δt × P through "
               f"P = 2 and 4 has t₀ = {line.intercept_ms:.3g} ms, Δt = {line.slope_ms:.3g} ms per sequence; its error at "
               f"P = {last} is predicted ÷ measured aggregate − 1, an aggregate of {1e3 * last / at_last:,.0f} tokens/s "
               f"against {1e3 * last / steps[last]:,.0f}.")
    return text, formula


def gain_note(first: BatchRow, last: BatchRow) -> tuple[str, str] | None:
    """What the largest batch's gain says about the two terms of a step: the part P sequences share (reading the
    weights, the step's fixed cost) and each sequence's own (chiefly its arithmetic), from the server-timed steps;
    in words, then its formula."""
    if first.parallel != 1 or last.parallel <= 1 or last.per_sequence.median <= 0 or first.per_sequence.median <= 0:
        return None
    P, step_1, step_P = last.parallel, 1e3 / first.per_sequence.median, 1e3 / last.per_sequence.median
    ratio = step_P / step_1
    shared = formulas.shared_share(P, ratio)
    text = (f"What the P = {P} gain shows: {P} × the tokens per step, for {last.aggregate_ratio:.2f} × the tokens/s of one "
            f"sequence alone (the aggregate, on the batch's wall time). On the server's clock a step of {P} took "
            f"{ratio:.3g} × the step of one ({step_P:.3g} ms against {step_1:.3g} ms), so decode ran {P / ratio:.3g} × as "
            f"many tokens/s. A step spent only reading the weights would be shared whole by the batch ({P} ×, the same "
            f"step time); one spent only on each token's arithmetic would not be shared at all (1 ×, {P} × the step time).")
    head = f"The shares of a step: step(P) = step(1) × (φ + (1 − φ) × P), so at P = {P} "
    if not 0 <= shared <= 1:
        return (text + f" {ratio:.3g} × lies outside the two: these steps are not one shared part and one per sequence.",
                head + f"φ = {100 * shared:.0f}%, outside 0–100%.")
    return (text + (f" {ratio:.3g} × lies between the two: about {100 * shared:.0f}% of one sequence's step is shared by "
                    f"the batch (the weight read and the step's fixed cost) and {100 * (1 - shared):.0f}% is each "
                    f"sequence's own (chiefly its arithmetic)."),
            head + f"φ = ({P} − {ratio:.3g}) ÷ {P - 1} = {100 * shared:.0f}%.")


def batching_formulas(rows: list[BatchRow]) -> list[str]:
    """The formulas behind the batching notes, with the full table under Details."""
    found = [gain_note(rows[0], rows[-1]) if len(rows) > 1 else None, batch_line_note(rows)]
    return BATCH_FORMULAS + [note[1] for note in found if note is not None]


def batching_notes(rows: list[BatchRow], baseline: float, dec_i: float, labels: BoundRidge, h100_ridge: float,
                   facts: dict, own: bool) -> list[str]:
    first, last = rows[0], rows[-1]
    base, P_last = first.parallel, last.parallel
    cross_here, cross_h100 = formulas.tokens_to_cross(labels.ridge, dec_i), formulas.tokens_to_cross(h100_ridge, dec_i)
    notes = []
    if len(rows) > 1:
        notes += [
            (f"With {P_last} sequences at once the server generated {last.aggregate.median:,.0f} tokens/s in all, "
             f"{last.aggregate_ratio:.2f} × the baseline of {baseline:,.0f} tokens/s (one sequence alone at P = {base}, "
             f"timed by the server); each sequence ran at {last.per_sequence.median:,.0f} tokens/s, "
             f"{last.per_sequence_ratio:.2f} × the same baseline."),
            batch_verdict(rows),
            *[n[0] for n in (gain_note(first, last),) if n],
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
         f"FLOPs/byte, which reaches {labels.name} ({labels.ridge:.3g}) from {cross_here} tokens per call on "
         f"(the H100's from {cross_h100})."),
        ("The aggregate counts every sequence's tokens over the batch's time on this host's clock; per sequence is "
         "each response's own decode speed, timed by the server (the formulas are under Details)."),
    ]
    if any(r.tokens_per_call is None for r in rows):
        notes.append("The server serves no /metrics counters for some levels, so their tokens per call and "
                     "intensity are left blank rather than assumed to be P.")
    notes += [n for n in (spread_note(rows),) if n]
    notes += [n[0] for n in (batch_line_note(rows),) if n]
    per_call = last.tokens_per_call
    if per_call is not None and P_last > 1:
        together = (f"on average {per_call:.1f} sequences shared each step, and so each read of the weights"
                    if per_call >= 1.5 else "the sequences mostly ran one at a time, each step with its own weight read")
        notes.append(f"/metrics: tokens_predicted_total rose by {last.predicted_delta:,.0f} over the "
                     f"{last.batches} batches of {P_last} (the responses say {last.tokens_generated:,}), "
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


BATCH_FORMULAS = [("Aggregate = tokens generated ÷ the batch's wall time on this host's clock; per sequence = "
                   "(predicted_n − 1) ÷ predicted_ms from each response.")]


def batches_stopped(stops: dict[int, Stop], rule: StoppingRule) -> str:
    """What stopped each level's batches under the plan's stopping rule, in one note."""
    parts = []
    for P, stop in stops.items():
        u = f"±{100 * stop.uncertainty:.2g}%" if stop.uncertainty != float("inf") else "not known"
        why = {"tight": "tight", "maximum": "the maximum", "budget": f"the budget of {rule.budget_s:g} s"}[stop.why]
        parts.append(f"P = {P}: {stop.samples} ({why}, {u})")
    return (f"Each level's batches stop once its median per-sequence speed and its median speed in all are known within "
            f"±{100 * rule.tight:g}%, at {rule.minimum} batches at least and {rule.maximum} at most (the run's --repeat), "
            f"or when their wall time reaches {rule.budget_s:g} s: " + "; ".join(parts) + ".")


def show_batching(page: Page, rows: list[BatchRow], notes: list[str]) -> None:
    """The batching table in the main text (8 columns, the notes), every column with the formulas under Details."""
    show_narrowed(page, "batching", "Batching: P sequences decoded at once",
                  "Batching, every column: the batches' times, the ranges of their speeds, the counters",
                  columns(BatchRow), cells(rows), BATCH_SHOWN, notes, batching_formulas(rows))


def shows(model: Served, decode: RooflinePoint, labels: BoundRidge, rows: list[BatchRow]) -> str:
    """What the run shows: where one sequence's decode sits against the ridge its label reads (so what bounds it), and
    whether decoding several sequences at once paid (the rule of `batch_verdict`)."""
    ridge = (f"this CPU's ridge of {labels.ridge:.3g} (its matmul's FLOP/s over its memory's bytes/s)"
             if labels.engine_gflop_s is None else
             f"the engine's ridge of {labels.ridge:.3g} (its prefill's {labels.engine_gflop_s:.3g} GFLOP/s over "
             f"{labels.bandwidth_gb_s:.3g} GB/s read)")
    text = (f"Decoding {model.name} does {decode.intensity:.3g} FLOPs per byte of weights read, "
            f"{'below' if decode.intensity < labels.ridge else 'at or above'} {ridge}: the roofline calls one sequence's "
            f"decode {decode.bound_here}-bound here, at most {decode.tokens_per_s:,.0f} tokens/s on this CPU's roofline. "
            f"What decode waits on, each term timed, is the capstone's verdict (lesson 8).")
    best, first = max(rows, key=lambda r: r.aggregate.median), rows[0]
    if len(rows) < 2:
        return text + f" Only {first.parallel} sequence at a time could be decoded, so batching was not measured."
    if best.parallel != first.parallel and best.aggregate_ratio > PAID and best.aggregate.median > first.aggregate.median * PAID:
        shared = (f": on average {best.tokens_per_call:.1f} sequences shared each step, and so each read of the weights."
                  if best.tokens_per_call is not None and best.tokens_per_call >= 1.5 else ".")
        return text + (f" Decoding {best.parallel} sequences at once gave {best.aggregate.median:,.0f} tokens/s in all, "
                       f"{best.aggregate_ratio:.2f}× one sequence alone{shared}")
    return text + (f" Decoding several sequences at once did not pay here: the best, {best.parallel} at once, gave "
                   f"{best.aggregate_ratio:.2f}× one sequence alone, not more than {100 * (PAID - 1):.0f}% above it.")


def plot_batching(page: Page, rows: list[BatchRow], model: Served) -> None:
    Ps = [float(r.parallel) for r in rows]
    page.plot(
        "batching", f"Batching {model.name}: aggregate vs per-sequence decode", "parallel sequences P", "tokens/s",
        [Series(label="aggregate (all sequences)", x=Ps, y=[r.aggregate.median for r in rows],
                y_min=[r.aggregate.min for r in rows], y_max=[r.aggregate.max for r in rows]),
         Series(label="per sequence", x=Ps, y=[r.per_sequence.median for r in rows],
                y_min=[r.per_sequence.min for r in rows], y_max=[r.per_sequence.max for r in rows])],
    )


# --- attention --------------------------------------------------------------------------------------

def show_decode_attention(page: Page, cases: list[AttentionIntensity]) -> None:
    """The podcast's decode-attention intensity, recomputed."""
    pod = published.PODCAST_DECODE_ATTENTION
    S, d = pod["seq_len"], pod["head_dim"]
    one = cases[0].flops_per_byte
    page.table(
        "decode_attention_intensity", f"Attention in one decode step: FLOPs per byte over {S:,} cached positions",
        columns(AttentionIntensity), cells(cases),
        notes=[(f"Per query head, over S positions of head width d_h: q·K is 2·S·d_h FLOPs and the weighted sum of V "
                f"another 2·S·d_h, 4·S·d_h = {4 * S * d:,} FLOPs, against K and V of 2·S·d_h FP16 numbers = "
                f"{4 * S * d:,} bytes: {one:g} FLOP per byte, and {one:g} more for each further query head that shares "
                f"the KV head."),
               (f"The podcast says about {pod['flops_per_byte']} FLOPs per byte for head width {d} and {S:,} positions: "
                f"{pod['flops_per_byte'] / one:.0f} × the arithmetic above. Its conclusion stands (far below any ridge "
                f"point: memory-bound), by a wider margin than it says.")],
    )
