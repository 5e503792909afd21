"""Lesson 5's view: the rows of its tables (the loop, the samplers and their check against the server, seeded
sampling, the latency model and the loop seen from the client's clock), each field a column in order, read by name,
and the tables, notes and plots built from the course's records and the lesson's plan. Nothing here asks the server
or reads a clock."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from bytesup.course import published
from bytesup.course.ceiling import Spread
from bytesup.course.clientclock import OutsideView, StreamedRepeat
from bytesup.course.loop import CounterDelta, LatencyCheck, LatencyFit, decode_calls_note, worst_prediction
from bytesup.course.samplercheck import Applied, CheckSummary, Distribution, SamplerCheck
from bytesup.llama.responses import Completion
from bytesup.store.plans.lesson05 import Plan
from bytesup.store.results import Column, Plot, Series, Table
from bytesup.store.rows import cells, column, columns, spread
from bytesup.store.views import pick, table

# The podcast's sequential-floor example (bytesup.course.published).
PODCAST_PASS_MS = published.PODCAST_SEQUENTIAL_FLOOR["pass_ms"]
PODCAST_TOKENS = published.PODCAST_SEQUENTIAL_FLOOR["tokens"]
PODCAST_FLOOR_S = published.PODCAST_SEQUENTIAL_FLOOR["floor_s"]


# --- the rows -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoopStep:
    """One pass of the loop: the token it produced and that token's probability."""
    pass_no: int = column("pass")
    token: str = column("token sampled")
    id: int = column("id")
    probability: float | None = column("its probability")


@dataclass(frozen=True)
class CounterRow:
    counter: str = column("counter")
    before: float = column("before")
    after: float = column("after")
    delta: float = column("delta")


def counter_row(c: CounterDelta) -> CounterRow:
    return CounterRow(c.name, c.before, c.after, c.delta)


@dataclass(frozen=True)
class CandidateRow:
    rank: int = column("rank")
    token: str = column("token")
    id: int = column("id")
    probability: float = column("probability")
    cumulative: float = column("cumulative")


def top_candidates(dist: Distribution, k: int = 10) -> list[CandidateRow]:
    cum = np.cumsum(dist.probs)
    return [CandidateRow(i + 1, dist.texts[i], dist.ids[i], float(dist.probs[i]), float(cum[i])) for i in range(min(k, len(dist.ids)))]


@dataclass(frozen=True)
class SettingRow:
    """A sampler setting by its label and its chain of samplers: the first two columns of both sampler tables."""
    setting: str = column("setting")
    chain: str = column("chain", "in order")


@dataclass(frozen=True)
class AppliedRow(SettingRow):
    kept: int | None = column("kept", "tokens")
    kept_percent: float | None = column("original probability kept", "%")
    top_token: str | None = column("most probable token")
    top_before: float | None = column("its probability before")
    top_after: float | None = column("after")


def applied_row(a: Applied) -> AppliedRow:
    if a.ours is None:
        return AppliedRow(a.setting.label, a.setting.chain, None, None, None, None, None)
    return AppliedRow(a.setting.label, a.setting.chain, len(a.kept), a.kept_percent, a.top_token, a.top_before, a.top_after)


@dataclass(frozen=True)
class CheckRow(SettingRow):
    kept_ours: int | None = column("kept", "ours")
    kept_server: int | None = column("kept", "server")
    listed: int | None = column("listed by server")
    same_set: bool | None = column("same tokens")
    drawn: str | None = column("token the server drew")
    drawn_kept: bool | None = column("drawn token in our kept set")
    max_abs: float | None = column("max |Δp|")
    max_rel: float | None = column("max |Δp| / p")
    tolerance: float = column("tolerance", "relative")
    verdict: str = column("verdict")


def check_row(s: SamplerCheck) -> CheckRow:
    c, label, chain = s.cmp, s.setting.label, s.setting.chain
    if c is None:
        return CheckRow(label, chain, None, None, None, None, None, None, None, None, s.tolerance, s.verdict)
    return CheckRow(label, chain, c.kept_ours, c.kept_server, c.listed, c.same_set, s.drawn, c.sampled_in_kept, c.max_abs,
                    c.max_rel, s.tolerance, s.verdict)


@dataclass(frozen=True)
class SeededRun:
    run: int = column("run")
    seed: int = column("seed")
    text: str = column("text")                         # repr of the content
    tokens: list[int] = column("token ids")


@dataclass(frozen=True)
class LatencyRow:
    n: int = column("n", "tokens")
    row: str = column("row")
    predicted: float = column("predicted", "ms")
    measured: Spread = spread("measured median", "measured min", "measured max", "ms")
    error_pct: float = column("error", "%")
    predicted_n: list[int] = column("predicted_n", "per repeat")


def latency_row(c: LatencyCheck) -> LatencyRow:
    return LatencyRow(c.n, "fit" if c.fitted else "predicted", c.predicted,
                      Spread(c.measured, min(c.totals), max(c.totals)), c.error_pct, c.predicted_n)


@dataclass(frozen=True)
class ClockRow:
    measure: str = column("measure")
    client: float = column("client", "ms")
    server: float = column("server", "ms")
    difference: float = column("client − server", "ms")
    field: str = column("server's field")


def clock_rows(view: OutsideView, n: int) -> list[ClockRow]:
    """Each client-side figure beside the server's figure it should match."""
    c, per_token, itl = view.client, view.per_token_ms, view.itl_percentiles()
    pairs = [("time to first token", c.ttft_median, view.prompt_ms, "prompt_ms"),
             *[(f"inter-token latency p{q}", itl[q], per_token, "predicted_per_token_ms") for q in itl],
             ("inter-token latency mean", view.itl_mean_ms, per_token, "predicted_per_token_ms"),
             ("end-to-end", c.end_to_end_median, view.server_total_ms, "prompt_ms + predicted_ms"),
             (f"TTFT + ITL p50 × (n − 1), n = {n}", view.predicted_end_to_end(n), view.server_predicted(n),
              "prompt_ms + predicted_per_token_ms × (n − 1)")]
    return [ClockRow(name, ours, theirs, ours - theirs, field) for name, ours, theirs, field in pairs]


@dataclass(frozen=True)
class RepeatRow:
    repeat: int = column("repeat")
    token_events: int = column("events with tokens")
    predicted_n: int = column("predicted_n")
    ttft: float = column("TTFT", "ms")
    prompt_ms: float = column("prompt_ms", "ms")
    ttft_gap: float = column("TTFT − prompt_ms", "ms")
    itl_median: float = column("ITL median", "ms")
    per_token: float = column("predicted_per_token_ms", "ms")
    end_to_end: float = column("end-to-end", "ms")
    server_total: float = column("prompt_ms + predicted_ms", "ms")
    overhead: float = column("client − server", "ms")
    one_by_one: bool = column("each token after the one before")
    fastest_gap: float = column("fastest gap", "ms")
    floor: float = column("n × fastest gap", "ms")


def repeat_row(r: StreamedRepeat) -> RepeatRow:
    c, t = r.client, r.timings
    return RepeatRow(r.repeat, r.token_events, t.predicted_n, c.ttft_ms, t.prompt_ms, r.ttft_gap_ms, r.itl_median_ms, r.per_token_ms,
                     c.end_to_end_ms, r.server_total_ms, r.overhead_ms, c.in_order and c.separate, r.fastest_gap_ms, r.floor_ms)


# --- tables, notes and plots ------------------------------------------------------

def one_pass_per_token(plan: Plan, done: Completion, steps: list[LoopStep]) -> Table:
    t = done.timings
    probs = [s.probability for s in steps if s.probability is not None]
    return table(
        "one_pass_per_token", f"The loop: {plan.loop_tokens} tokens after {plan.loop_prompt!r}, one per pass", LoopStep, steps,
        [
            (f"The server generated predicted_n = {t.predicted_n} tokens after a {t.prompt_n}-token prompt; "
             f"each row is one pass that produced one token, appended before the next pass."),
            (f"Greedy (temperature 0) takes the most probable token each time; its probability averaged "
             f"{100 * statistics.fmean(probs):.3g}% here."),
        ])


def metrics_delta(done: Completion, counters: list[CounterDelta]) -> Table:
    t = done.timings
    d = {c.name: c.delta for c in counters}
    notes = []
    if "llamacpp:tokens_predicted_total" in d:
        notes.append(f"tokens_predicted_total rose by {d['llamacpp:tokens_predicted_total']:g}: "
                     f"{'equal to' if d['llamacpp:tokens_predicted_total'] == t.predicted_n else 'not'} "
                     f"predicted_n = {t.predicted_n}.")
    if "llamacpp:n_decode_total" in d:
        notes.append(decode_calls_note(d["llamacpp:n_decode_total"], t.predicted_n, t.prompt_n))
    if "llamacpp:prompt_tokens_total" in d:
        notes.append(f"prompt_tokens_total rose by {d['llamacpp:prompt_tokens_total']:g} "
                     f"(prompt_n = {t.prompt_n}).")
    return table("metrics_delta", "The server's counters around that request (/metrics)", CounterRow,
                 [counter_row(c) for c in counters], notes)


def next_token_distribution(plan: Plan, dist: Distribution) -> Table:
    top, mass = top_candidates(dist), dist.listed_mass
    return table(
        "next_token_distribution", f"The next-token distribution after {plan.sampling_prompt!r} (full softmax, top 10)",
        CandidateRow, top, [
            (f"The server listed {len(dist.ids):,} candidates (n_probs asked: {', then '.join(str(a) for a in dist.asked)}); "
             f"the vocabulary has {dist.n_vocab if dist.n_vocab is not None else 'an unreported number of'} entries."),
            f"The listed candidates hold {100 * mass:.5g}% of the probability"
            + (f" (the whole vocabulary: their sum differs from 1 by {abs(mass - 1):.2g}, the server's "
               f"float rounding)." if dist.complete else "."),
            f"The top token has {100 * dist.probs[0]:.3g}%, the top ten {100 * top[-1].cumulative:.3g}%.",
        ])


def samplers_applied(dist: Distribution, applied: list[Applied]) -> Table:
    determined = [a for a in applied if a.ours is not None]
    return table(
        "samplers_applied", "Greedy, temperature, top-k and top-p on that distribution (numpy re-implementation)",
        AppliedRow, [applied_row(a) for a in applied], [
            ("Temperature T divides the logits by T (p^(1/T), renormalized): below 1 it sharpens the "
             "distribution, above 1 it flattens it; greedy keeps one token."),
            ("top-k keeps the k most probable tokens; top-p keeps the most probable ones until they add up to "
             "at least p; what is kept is renormalized to sum to 1."),
        ] + [
            f"{a.setting.label}: {len(a.kept):,} token(s) kept, {a.kept_percent:.4g}% of the original probability; the top "
            f"token goes from {100 * (a.top_before or 0):.3g}% to {100 * (a.top_after or 0):.3g}%." for a in determined
        ] + ([(f"{len(applied) - len(determined)} setting(s) could not be applied exactly: their kept set "
              f"lies beyond the {len(dist.ids):,} listed candidates.")] if len(determined) < len(applied) else []))


# The columns of a sampler check the main text shows; what the server listed and drew, the absolute differences and
# the tolerance are in the full table.
CHECK_SHOWN = ["setting", "chain", "kept_ours", "kept_server", "same_set", "max_rel", "verdict"]


def one_part_in(rel: float) -> str:
    """A relative difference in words: 1e-05 is 'one part in 100,000'."""
    return f"one part in {1 / rel:,.0f}" if rel > 0 else "nothing"


def sampler_check(plan: Plan, dist: Distribution, checks: list[SamplerCheck]) -> list[Table]:
    """The check in plain words (main table: kept sets, the largest relative difference, the verdict), then the
    full table under Details with the rule's formula and how each request was pinned."""
    summary = CheckSummary(checks)
    checked, mismatch, edge, largest = summary.checked, summary.mismatch, summary.edges, summary.largest_relative
    mass = dist.listed_mass
    plain = [
        (f"{len(summary.agree)} of the {len(checked)} settings checked agree with the server: every probability we "
         f"computed is the server's to within {one_part_in(plan.rel_tol)} of itself"
         + (f"; they differ for {', '.join(c.setting.label for c in mismatch)}." if mismatch else ".")),
        (f"The server computes in 32-bit floats, so its probabilities are not expected to equal ours exactly; the "
         f"largest difference seen is {largest:.2g} of the probability ({one_part_in(largest)})."),
    ]
    rule = [
        f"{len(summary.agree)} of the {len(checked)} settings checked agree with the server within |Δp| ≤ {plan.rel_tol:g} × p"
        + (f"; mismatch: {', '.join(c.setting.label for c in mismatch)}." if mismatch else "."),
        f"Tolerance {plan.rel_tol:g} relative: the server computes in 32-bit floats"
        + (f" (its whole-vocabulary list sums to 1 within {abs(mass - 1):.2g})" if dist.complete else "")
        + f"; the largest relative difference seen is {largest:.2g}.",
        ("Each request pins the chain with `samplers` and sets top_k 0, top_p 1.0, min_p 0.0, so only the "
         "listed samplers cut; we ask for one candidate more than we keep (at most "
         f"{plan.max_post_probs}), so a shorter list is the server's whole kept set (kept, server)."),
    ]
    if edge:
        rule.append(
            f"Where the server listed only part of a large kept set, the kept sets are still compared through "
            f"the renormalization: one token more or less would move every probability by about "
            f"{min(edge):.2g} relative or more, "
            f"{'above' if min(edge) > plan.rel_tol else 'NOT above'} the tolerance.")
    if any(c.setting.chain == "temperature" and c.relative for c in checked):
        rule.append(f"(relative): the reference list holds {100 * mass:.4g}% of the distribution, not all "
                    f"of it, so for temperature alone both sides were renormalized over the tokens the server listed.")
    unchecked = [c.setting.label for c in checks if c.cmp is None]
    if unchecked:
        plain.append(f"Not checked: {', '.join(unchecked)}; the kept set reaches beyond the {len(dist.ids):,} candidates "
                     f"listed (at most {plan.max_reference_probs:,} are asked for).")
    for c in checked:
        chain = c.setting.chain
        if chain.startswith("top_p →") and "top_k" in chain and c.verdict.startswith("agree"):
            plain.append(f"The chain {chain} agrees, so the server applied top-p before top-k, in the order given.")
    rows = [check_row(c) for c in checks]
    full = table("sampler_check", "Our samplers against the server's, every column, and the rule", CheckRow, rows, rule)
    full.detail = True
    return [table("sampler_check_main", "Our samplers against the server's post-sampling probabilities", CheckRow,
                  rows, plain, CHECK_SHOWN), full]


def sampler_check_note(plan: Plan, checks: list[SamplerCheck]) -> str | None:
    """The lesson's note on the tolerance, where any setting was checked."""
    summary = CheckSummary(checks)
    edge, largest = summary.edges, summary.largest_relative
    if not summary.checked:
        return None
    return (f"The sampler check lets each probability differ from the server's by {one_part_in(plan.rel_tol)} of itself "
            f"(the rule's formula is under Details). The server works in 32-bit floats, so exact equality is not "
            f"expected: the largest difference here was {largest:.2g} of the probability"
            + (f", and a kept set one token off would move the probabilities by {min(edge):.2g} of themselves or more."
               if edge else "."))


def seeded_sampling(plan: Plan, runs: list[SeededRun]) -> Table:
    first, again, other = runs[0], runs[1], runs[2]
    same = first.tokens == again.tokens and first.text == again.text
    differ = first.tokens != other.tokens
    return table(
        "seeded_sampling", f"Seeded sampling at temperature 1.0 ({plan.seeded_tokens} tokens)", SeededRun, runs, [
            f"Runs 1 and 2 (seed {first.seed} twice): {'identical' if same else 'different'} text and tokens.",
            (f"Run 3 (seed {other.seed}): {'different from' if differ else 'the same as'} run 1, "
             f"{sum(a != b for a, b in zip(first.tokens, other.tokens, strict=False))} of {len(first.tokens)} tokens differ."),
        ])


LATENCY_SHOWN = ["n", "row", "predicted", "measured median", "error"]


def latency_model(plan: Plan, model: LatencyFit, fit: list[Completion], checks: list[LatencyCheck]) -> list[Table]:
    """The prediction against the measured medians in the main text (with the notes); every column, with the lowest
    and highest total and each repeat's predicted_n, under Details."""
    ttft, tpot = model.ttft, model.tpot
    worst, longest = worst_prediction(checks), checks[-1]
    floor_s = PODCAST_TOKENS * PODCAST_PASS_MS / 1000
    rows = [latency_row(c) for c in checks]
    full = table("latency_model", "Total time against the time model, every column", LatencyRow, rows, [])
    full.detail = True
    cols, shown = pick(columns(LatencyRow), cells(rows), LATENCY_SHOWN)
    return [Table(
        name="latency_model_main", title="Total time ≈ time to first token + time per output token × (n − 1)",
        columns=[Column(name=n, unit=u) for n, u in cols], rows=shown, notes=[
            (f"Fitted at n = {plan.fit_n} ({len(fit)} repeats): time to first token {ttft:.4g} ms (prompt_ms), "
             f"time per output token {tpot:.4g} ms (predicted_ms ÷ (predicted_n − 1))."),
            (f"Measured total = prompt_ms + predicted_ms; the largest prediction error is {worst.error_pct:+.3g}% at "
             f"n = {worst.n}."),
            (f"At n = {longest.n} the decode passes take {model.decode_share_pct(longest.n):.3g}% "
             f"of the predicted time: long outputs are paid for pass by pass."),
            (f"The podcast's floor (published example): {PODCAST_TOKENS} passes × {PODCAST_PASS_MS:g} ms = "
             f"{floor_s:g} s (it says {PODCAST_FLOOR_S:g} s: "
             f"{'consistent' if math.isclose(floor_s, PODCAST_FLOOR_S) else 'inconsistent'}); "
             f"at this run's {tpot:.3g} ms per pass, {PODCAST_TOKENS} tokens take at least "
             f"{model.predict(PODCAST_TOKENS) / 1000:.3g} s."),
        ]), full]


GOOD_FIT_PCT = 10.0  # a latency model that predicts every measured total within this many percent is said to hold


def shows(n: int, counters: list[CounterDelta] | None, model: LatencyFit, checks: list[LatencyCheck]) -> str:
    """What the run shows: the loop's `n` tokens in one pass each (counted by the server where it serves /metrics),
    and the time model TTFT + TPOT × (n − 1) against the measured totals."""
    calls = {c.name: c.delta for c in counters or []}.get("llamacpp:n_decode_total")
    if calls is None:
        text = (f"The server generated {n} tokens one pass at a time; it serves no pass counter (/metrics), so this "
                "run did not count the passes.")
    elif calls == n:
        text = f"Generating {n} tokens took {calls:g} passes of the model (the server's own count): one pass per token."
    else:
        text = (f"Generating {n} tokens took {calls:g} passes of the model (the server's own count), not one per token: "
                "the prompt went through in more than one.") if calls > n else (
            f"Generating {n} tokens took {calls:g} passes of the model (the server's own count), fewer than the tokens.")
    worst, longest = worst_prediction(checks), checks[-1]
    text += (f" Total time ≈ {model.ttft:.3g} ms to the first token + {model.tpot:.3g} ms for each token after it")
    if all(c.fitted for c in checks):
        return text + ", fitted at one length and not tried at another."
    if abs(worst.error_pct) <= GOOD_FIT_PCT:
        text += (f"; this predicts every measured total within {abs(worst.error_pct):.3g}% (up to n = {longest.n:,}, "
                 f"where the passes after the first take {model.decode_share_pct(longest.n):.3g}% of the time).")
    else:
        text += (f", but at n = {worst.n:,} it predicts {worst.predicted:,.0f} ms against {worst.measured:,.0f} ms "
                 f"measured ({worst.error_pct:+.3g}%): more than {GOOD_FIT_PCT:g}% off, so one time per token does not "
                 "describe this run.")
    return text


def latency_plot(checks: list[LatencyCheck]) -> Plot:
    xs = [float(c.n) for c in checks]
    return Plot(name="latency_model", title="Predicted vs measured total time", x_label="tokens generated (n)",
                y_label="total time (ms)", series=[
        Series(label="predicted: TTFT + TPOT × (n − 1)", x=xs, y=[c.predicted for c in checks], style="dashed"),
        Series(label="measured (median, min–max)", x=xs, y=[c.measured for c in checks], y_min=[min(c.totals) for c in checks],
               y_max=[max(c.totals) for c in checks], style="points"),
    ])


def client_clock(n: int, clock: dict[str, Any], view: OutsideView) -> Table:
    """The streamed generation of `n` tokens: the client's figures beside the server's."""
    c, reps = view.client, view.repeats
    per_token, itl, mean_itl = view.per_token_ms, view.itl_percentiles(), view.itl_mean_ms
    predicted, gaps, overheads = view.predicted_end_to_end(n), view.ttft_gaps_ms, view.overheads_ms
    return table(
        "client_clock", f"The loop from outside: {n} streamed tokens on the client's clock, beside the server's timings",
        ClockRow, clock_rows(view, n), [
            (f"{len(reps)} repeats of the latency model's request (greedy, seeded, no prompt cache) with stream: true. "
             f"Each event is stamped when its last byte reaches this process ({clock['clock']}, "
             f"{clock['implementation']}, resolution {clock['resolution_s']:.3g} s); times are ms after the request was sent. "
             f"Percentiles pool the {len(c.itl_ms)} gaps of every repeat (linear between ranks); the server's time per "
             f"token pools the repeats too (Σ predicted_ms ÷ Σ (predicted_n − 1)); TTFT and end-to-end are medians."),
            (f"Causality: {'in every repeat' if view.causal else 'NOT in every repeat:'} the first token reached the client after "
             f"the server's prompt_ms (TTFT − prompt_ms {min(gaps):.3g} to {max(gaps):.3g} ms), and "
             f"{'every' if view.counted else 'NOT every'} repeat had one event per generated token "
             f"({', '.join(str(r.token_events) for r in reps)} events for predicted_n "
             f"{', '.join(str(r.timings.predicted_n) for r in reps)})."),
            (f"The gap at the first token, {statistics.median(gaps):.3g} ms here, is work outside prompt_ms: before it, the "
             f"request travels over loopback, the server reads and parses its JSON, tokenizes the prompt and queues the task "
             f"for its slot; after it, the first token's event is built as JSON, framed as `data: …` and sent as one HTTP "
             f"chunk, then read and parsed here."),
            (f"Per token the two clocks see the same passes: the mean gap, {mean_itl:.4g} ms, is within "
             f"{abs(mean_itl - per_token):.2g} ms of predicted_per_token_ms ({per_token:.4g}), because each token pays the same "
             f"framing on both sides of a gap. The median ({itl[50]:.4g} ms) sits "
             f"{'below' if itl[50] < mean_itl else 'above'} the mean and p99 reaches {itl[99]:.4g} ms (the slowest gap "
             f"{max(c.itl_ms):.4g} ms): a few passes wait for a core (the server's threads, this client and anything else on the "
             f"machine share them), which a mean spreads over every token and percentiles show."),
            (f"End-to-end the client waits {statistics.median(overheads):.3g} ms more than the server's prompt_ms + "
             f"predicted_ms (median; {min(overheads):.3g} to {max(overheads):.3g}): HTTP, the JSON and framing of "
             f"{reps[0].token_events + 1} events and the final event's settings, and scheduling."),
            (f"Lesson 5's latency model on the client's clock: TTFT + ITL p50 × (n − 1) = {predicted:.4g} ms against "
             f"{c.end_to_end_median:.4g} ms measured ({100 * (predicted - c.end_to_end_median) / c.end_to_end_median:+.3g}%). "
             f"With the mean gap it would hold exactly (TTFT plus the mean gap × (n − 1) is the last token's arrival); "
             f"the model's claim is that one typical gap stands for every pass."),
        ])


# The columns of a streamed repeat the main text shows; the differences between the clocks are in the full table.
REPEAT_SHOWN = ["repeat", "token_events", "predicted_n", "ttft", "prompt_ms", "itl_median", "end_to_end", "floor"]


def client_clock_repeats(n: int, view: OutsideView) -> list[Table]:
    """Each repeat in the main text (8 columns, the notes), every column of it under Details."""
    reps, per_token = view.repeats, view.per_token_ms
    rows = [repeat_row(r) for r in reps]
    full = table("client_clock_repeats", "Each streamed repeat on both clocks, every column", RepeatRow, rows, [])
    full.detail = True
    return [table(
        "client_clock_repeats_main", "Each streamed repeat on both clocks, and the sequential floor", RepeatRow, rows, [
            (f"The sequential floor: a token's pass needs the token before it, so {n} tokens cannot take less than {n} × the "
             f"fastest gap. {'Every' if view.floor_held else 'NOT every'} repeat took at least that "
             f"(end-to-end ÷ floor {min(view.above_floor):.3g} to {max(view.above_floor):.3g}), and in "
             f"{sum(r.client.in_order and r.client.separate for r in reps)} of {len(reps)} repeats every token arrived "
             f"strictly after the one before it."),
            *([(f"The fastest gap ({view.fastest_gap_ms:.3g} ms) is shorter than the server's time per token ({per_token:.3g} ms): an "
                f"event that reaches the client late shortens the gap after it, so the floor read on the client's clock "
                f"is a loose one; the server's predicted_ms ÷ (predicted_n − 1) is the pass itself.")]
              if view.fastest_gap_ms < 0.5 * per_token else []),
        ], REPEAT_SHOWN), full]


def client_clock_plot(n: int, view: OutsideView) -> Plot:
    first = view.repeats[0]
    xs = [float(i) for i in range(1, first.client.n + 1)]
    return Plot(name="client_clock_staircase", title=f"Arrival of each token on the client's clock (repeat 1, n = {n})",
                x_label="token index", y_label="arrival (ms after sending)", series=[
        Series(label="client: arrival of token i", x=xs, y=first.client.times_ms, style="steps"),
        Series(label="server: prompt_ms + predicted_per_token_ms × (i − 1)", x=xs,
               y=[first.timings.prompt_ms + first.per_token_ms * (x - 1) for x in xs], style="dashed"),
    ])


