"""Lesson 5 — Generating text

A forward pass gives one probability per vocabulary entry; text comes from a loop: pick one token,
append it, run the model again. This script makes the loop visible (n generated tokens, n passes,
counted by the server's own /metrics), applies greedy, temperature, top-k and top-p to a real
next-token distribution with the numpy re-implementations in `bytesup.course.sampling`, and checks them
against the probabilities the server itself keeps after its sampler chain (`bytesup.course.samplercheck`).
It shows that a seeded sampler repeats itself, fits total time = time to first token + time per output
token × (n − 1) from one length and predicts the others, and watches the loop from outside (a streamed
generation timed token by token on the client's clock, beside the server's own timings).

One pass per token is the loop's floor only while the model makes each token itself. Lesson 5b
(`05b_speculative_decoding`) lets a draft guess several tokens and the model check them in one pass:
the same text in fewer passes, measured on servers it starts, beside its arithmetic.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np

from bytesup.course import clientclock, published, samplercheck
from bytesup.course.clientclock import OutsideView, StreamedRepeat
from bytesup.course.loop import (CounterDelta, LatencyCheck, LatencyFit, counter_deltas, decode_calls_note, latency_check, latency_fit,
                                 worst_prediction)
from bytesup.course.samplercheck import (
    Applied,
    CheckSummary,
    Distribution,
    SamplerCheck,
    SamplerSetting,
    apply_setting,
    asked_candidates,
    needs_more,
)
from bytesup.errors import BytesupError
from bytesup.lesson import LessonContext
from bytesup.llama import timed as measure
from bytesup.llama.client import clock_info
from bytesup.llama.responses import Completion, StreamedCompletion, TokenProbabilities, shown_token
from bytesup.store.facts import lesson05 as facts05
from bytesup.store.results import Series
from bytesup.store.rows import cells, columns
from bytesup.store.tables import lesson05 as rows

TITLE = "Generating text"

SEED = 42
LOOP_PROMPT = "The cat sat on the"
LOOP_TOKENS = 16
# The lesson-4 prompt where the model's choice is genuinely open: samplers have something to cut.
SAMPLING_PROMPT = "def fibonacci(n):\n    if n"
REFERENCE_PROBS = 64          # first try at the full-softmax list; grown if a kept set needs more
MAX_REFERENCE_PROBS = 4096    # never ask for more candidates than this (keeps recordings small)
MAX_POST_PROBS = 32           # post-sampling candidates asked for at most
REL_TOL = 1e-5                # |Δp| / p allowed between our probabilities and the server's


# Temperature 1.0 leaves a chain's cut as is.
SAMPLER_SETTINGS = [
    SamplerSetting("greedy", ("temperature",), {"temperature": 0.0}),
    SamplerSetting("temperature 0.5", ("temperature",), {"temperature": 0.5}),
    SamplerSetting("temperature 1.0", ("temperature",), {"temperature": 1.0}),
    SamplerSetting("temperature 1.5", ("temperature",), {"temperature": 1.5}),
    SamplerSetting("top-k 5", ("top_k", "temperature"), {"top_k": 5, "temperature": 1.0}),
    SamplerSetting("top-k 10", ("top_k", "temperature"), {"top_k": 10, "temperature": 1.0}),
    SamplerSetting("top-p 0.5", ("top_p", "temperature"), {"top_p": 0.5, "temperature": 1.0}),
    SamplerSetting("top-p 0.9", ("top_p", "temperature"), {"top_p": 0.9, "temperature": 1.0}),
    SamplerSetting("top-k 10 → top-p 0.5 → temperature 1.5", ("top_k", "top_p", "temperature"),
                   {"top_k": 10, "top_p": 0.5, "temperature": 1.5}),
    SamplerSetting("top-p 0.9 → top-k 10 → temperature 0.5", ("top_p", "top_k", "temperature"),
                   {"top_p": 0.9, "top_k": 10, "temperature": 0.5}),
]
SEEDS = (1234, 1234, 5678)    # the same seed twice, then another
SEEDED_TOKENS = 12
FIT_N = 32                    # the length the latency model is fitted at
PREDICT_N = (8, 16, 64, 128)  # the lengths it predicts
STREAM_TOKENS = 128           # the streamed generation: 127 gaps per repeat, enough for a p99 to mean something
# The podcast's sequential-floor example (bytesup.course.published).
PODCAST_PASS_MS = published.PODCAST_SEQUENTIAL_FLOOR["pass_ms"]
PODCAST_TOKENS = published.PODCAST_SEQUENTIAL_FLOOR["tokens"]
PODCAST_FLOOR_S = published.PODCAST_SEQUENTIAL_FLOOR["floor_s"]


# --- requests: what the server (and this host) answer ----------------------------------------

@dataclass(frozen=True)
class LoopRequest:
    before: dict[str, float] | None     # /metrics before the generation (None: not served)
    done: Completion
    after: dict[str, float] | None


def request_loop(ctx: LessonContext) -> LoopRequest:
    """LOOP_TOKENS tokens after LOOP_PROMPT, between two readings of the server's counters."""
    try:
        before = ctx.server.metrics()
    except BytesupError:
        before = None
    # Greedy, seeded, no prompt cache: the same tokens and the same work every run.
    done = ctx.server.completion(LOOP_PROMPT, n_predict=LOOP_TOKENS, n_probs=1, post_sampling_probs=False,
                                 temperature=0, seed=SEED, cache_prompt=False, ignore_eos=True)
    after = ctx.server.metrics() if before is not None else None
    return LoopRequest(before, done, after)


def request_reference(ctx: LessonContext, n_probs: int) -> Completion:
    # temperature 0: the probabilities reported are the full softmax before any sampler,
    # whatever is picked; the seed and the uncached prompt keep the request identical every run.
    return ctx.server.completion(SAMPLING_PROMPT, n_predict=1, n_probs=n_probs, post_sampling_probs=False,
                                 temperature=0, seed=SEED, cache_prompt=False)


def request_distribution(ctx: LessonContext) -> "Distribution":
    """The full softmax after SAMPLING_PROMPT: REFERENCE_PROBS candidates, more if a chain's kept set needs them."""
    n_vocab = ctx.server.served_meta().get("n_vocab")
    asked = [REFERENCE_PROBS]
    cands = request_reference(ctx, REFERENCE_PROBS).first_position().candidates()
    if needs_more([c.probability for c in cands], SAMPLER_SETTINGS) and (n_vocab is None or len(cands) < n_vocab):
        asked.append(min(n_vocab or MAX_REFERENCE_PROBS, MAX_REFERENCE_PROBS))
        cands = request_reference(ctx, asked[-1]).first_position().candidates()
    return Distribution(ids=[c.id for c in cands], probs=np.array([c.probability for c in cands]),
                        texts=[shown_token(c.token, c.bytes) for c in cands], asked=asked, n_vocab=n_vocab)


def post_sampling_body(samplers: tuple[str, ...] | list[str], params: dict[str, float], n_probs: int) -> dict[str, Any]:
    """One next token with the server's probabilities after the chain `samplers`.

    top_k 0, top_p 1.0 and min_p 0.0 switch off every cut that is not in the chain, so nothing
    else can trim; the seed pins the token drawn; cache_prompt false makes each request alike.
    """
    return {"n_predict": 1, "seed": SEED, "cache_prompt": False, "post_sampling_probs": True,
            "n_probs": n_probs, "samplers": list(samplers), "top_k": 0, "top_p": 1.0, "min_p": 0.0, **params}


def request_post_sampling(ctx: LessonContext, setting: SamplerSetting, n_probs: int) -> TokenProbabilities:
    done = ctx.server.completion(SAMPLING_PROMPT, **post_sampling_body(setting.samplers, setting.params, n_probs))
    return done.first_position()


def request_seeded(ctx: LessonContext) -> list[Completion]:
    # temperature 1.0 with every cut off: a draw from the whole distribution; cache_prompt false and
    # ignore_eos keep the work and the length the same each time.
    ctx.settings["seeded"] = {"seeds": list(SEEDS), "n_predict": SEEDED_TOKENS}
    return [ctx.server.completion(LOOP_PROMPT, n_predict=SEEDED_TOKENS, temperature=1.0, seed=seed,
                                  top_k=0, top_p=1.0, min_p=0.0, cache_prompt=False, ignore_eos=True,
                                  return_tokens=True) for seed in SEEDS]


def request_timed(ctx: LessonContext, n: int) -> list[Completion]:
    # measure.PINNED (greedy, seeded, ignore_eos, no prompt cache): every repeat does the same work.
    return measure.timed_completions(ctx.server, LOOP_PROMPT, n, ctx.repeat,
                                     track=lambda r: ctx.track(r, f"n = {n}"), seed=SEED)


def request_streamed(ctx: LessonContext) -> list[StreamedCompletion]:
    # The latency model's request (measure.PINNED, LOOP_PROMPT), streamed: the same work every repeat.
    return measure.streamed_completions(ctx.server, LOOP_PROMPT, STREAM_TOKENS, ctx.repeat,
                                        track=lambda r: ctx.track(r, f"streamed, n = {STREAM_TOKENS}"), seed=SEED)


# --- computation: typed results from the answers ------------------------------------------------

def loop_steps(done: Completion) -> list[rows.LoopStep]:
    return [rows.LoopStep(i, shown_token(step.token, step.bytes), step.id,
                     math.exp(step.logprob) if step.logprob is not None else None)
            for i, step in enumerate(done.completion_probabilities, start=1)]


def check_setting(dist: Distribution, a: Applied, step: TokenProbabilities | None) -> SamplerCheck:
    """Our chain against the server's answer to the same chain (step None: not asked)."""
    answer = None if step is None else samplercheck.ServerAnswer([(c.id, c.probability) for c in step.candidates()], step.id,
                                                                  shown_token(step.token, step.bytes))
    return samplercheck.check_setting(dist, a, answer, REL_TOL, MAX_POST_PROBS)


def outside_view(done: list[StreamedCompletion]) -> OutsideView:
    return OutsideView([StreamedRepeat(i, clientclock.client_times(s.arrivals(), s.ended_ms), s.timings, len(s.arrivals()))
                        for i, s in enumerate(done, start=1)])


# --- what the lesson records: measurements and facts --------------------------------------------

def record_latency(ctx: LessonContext, model: LatencyFit, checks: list[LatencyCheck]) -> None:
    ctx.measure("time_to_first_token_ms", "ms", model.ttft_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="prompt_ms: the prompt pass, which yields the first token")
    ctx.measure("decode_ms_per_token", "ms", model.tpot_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="predicted_ms / (predicted_n − 1)")
    for c in checks:
        if not c.fitted:
            ctx.measure("latency_model_error_pct", "%", c.errors_pct, higher_is_better=None, settings={"n_predict": c.n},
                        description="(predicted − measured) ÷ measured total time, per repeat")


def record_outside(ctx: LessonContext, clock: dict[str, Any], view: OutsideView) -> None:
    c, settings = view.client, {"n_predict": STREAM_TOKENS, "stream": True}
    ctx.measure("client_ttft_ms", "ms", c.ttft_ms, higher_is_better=False, settings=settings,
                description="the first token's arrival on the client's clock, ms after the request was sent")
    ctx.measure("client_itl_ms", "ms", c.itl_ms, higher_is_better=False, settings=settings,
                description="gaps between consecutive tokens' arrivals, every repeat pooled")
    ctx.measure("client_end_to_end_ms", "ms", c.end_to_end_ms, higher_is_better=False, settings=settings,
                description="the final event's arrival")
    ctx.measure("client_minus_server_ms", "ms", view.overheads_ms, higher_is_better=False, settings=settings,
                description="end-to-end on the client minus prompt_ms + predicted_ms")
    ctx.fact(facts05.ClientClock(n_predict=STREAM_TOKENS, clock=clock["clock"],
                                 repeats=[facts05.StreamedRepeat.model_validate(r.fact()) for r in view.repeats]))


# --- rendering: tables, notes and plots ------------------------------------------------------

def render_loop(ctx: LessonContext, done: Completion, steps: list[rows.LoopStep]) -> None:
    t = done.timings
    probs = [s.probability for s in steps if s.probability is not None]
    ctx.table(
        "one_pass_per_token", f"The loop: {LOOP_TOKENS} tokens after {LOOP_PROMPT!r}, one per pass",
        columns(rows.LoopStep), cells(steps),
        notes=[
            (f"The server generated predicted_n = {t.predicted_n} tokens after a {t.prompt_n}-token prompt; "
             f"each row is one pass that produced one token, appended before the next pass."),
            (f"Greedy (temperature 0) takes the most probable token each time; its probability averaged "
             f"{100 * statistics.fmean(probs):.3g}% here."),
        ],
    )


def render_metrics(ctx: LessonContext, done: Completion, counters: list[CounterDelta]) -> None:
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
    ctx.table("metrics_delta", "The server's counters around that request (/metrics)", columns(rows.CounterRow),
              cells([rows.counter_row(c) for c in counters]), notes=notes)


def render_distribution(ctx: LessonContext, dist: Distribution) -> None:
    top, mass = rows.top_candidates(dist), dist.listed_mass
    ctx.table(
        "next_token_distribution", f"The next-token distribution after {SAMPLING_PROMPT!r} (full softmax, top 10)",
        columns(rows.CandidateRow), cells(top),
        notes=[
            (f"The server listed {len(dist.ids):,} candidates (n_probs asked: {', then '.join(str(a) for a in dist.asked)}); "
             f"the vocabulary has {dist.n_vocab if dist.n_vocab is not None else 'an unreported number of'} entries."),
            f"The listed candidates hold {100 * mass:.5g}% of the probability"
            + (f" (the whole vocabulary: their sum differs from 1 by {abs(mass - 1):.2g}, the server's "
               f"float rounding)." if dist.complete else "."),
            f"The top token has {100 * dist.probs[0]:.3g}%, the top ten {100 * top[-1].cumulative:.3g}%.",
        ],
    )


def render_applied(ctx: LessonContext, dist: Distribution, applied: list[Applied]) -> None:
    determined = [a for a in applied if a.ours is not None]
    ctx.table(
        "samplers_applied", "Greedy, temperature, top-k and top-p on that distribution (numpy re-implementation)",
        columns(rows.AppliedRow), cells([rows.applied_row(a) for a in applied]),
        notes=[
            ("Temperature T divides the logits by T (p^(1/T), renormalized): below 1 it sharpens the "
             "distribution, above 1 it flattens it; greedy keeps one token."),
            ("top-k keeps the k most probable tokens; top-p keeps the most probable ones until they add up to "
             "at least p; what is kept is renormalized to sum to 1."),
        ] + [
            f"{a.setting.label}: {len(a.kept):,} token(s) kept, {a.kept_percent:.4g}% of the original probability; the top "
            f"token goes from {100 * (a.top_before or 0):.3g}% to {100 * (a.top_after or 0):.3g}%." for a in determined
        ] + ([(f"{len(applied) - len(determined)} setting(s) could not be applied exactly: their kept set "
              f"lies beyond the {len(dist.ids):,} listed candidates.")] if len(determined) < len(applied) else []),
    )


def render_check(ctx: LessonContext, dist: Distribution, applied: list[Applied], checks: list[SamplerCheck]) -> None:
    summary = CheckSummary(checks)
    checked, mismatch, edge, largest = summary.checked, summary.mismatch, summary.edges, summary.largest_relative
    mass = dist.listed_mass
    notes = [
        f"{len(summary.agree)} of the {len(checked)} settings checked agree with the server within |Δp| ≤ {REL_TOL:g} × p"
        + (f"; mismatch: {', '.join(c.setting.label for c in mismatch)}." if mismatch else "."),
        f"Tolerance {REL_TOL:g} relative: the server computes in 32-bit floats"
        + (f" (its whole-vocabulary list sums to 1 within {abs(mass - 1):.2g})" if dist.complete else "")
        + f"; the largest relative difference seen is {largest:.2g}.",
        ("Each request pins the chain with `samplers` and sets top_k 0, top_p 1.0, min_p 0.0, so only the "
         "listed samplers cut; we ask for one candidate more than we keep (at most "
         f"{MAX_POST_PROBS}), so a shorter list is the server's whole kept set (kept, server)."),
    ]
    if edge:
        notes.append(
            f"Where the server listed only part of a large kept set, the kept sets are still compared through "
            f"the renormalization: one token more or less would move every probability by about "
            f"{min(edge):.2g} relative or more, "
            f"{'above' if min(edge) > REL_TOL else 'NOT above'} the tolerance.")
    if any(c.setting.chain == "temperature" and c.relative for c in checked):
        notes.append(f"(relative): the reference list holds {100 * mass:.4g}% of the distribution, not all "
                     f"of it, so for temperature alone both sides were renormalized over the tokens the server listed.")
    unchecked = [c.setting.label for c in checks if c.cmp is None]
    if unchecked:
        notes.append(f"Not checked: {', '.join(unchecked)}; the kept set reaches beyond the {len(dist.ids):,} candidates "
                     f"listed (at most {MAX_REFERENCE_PROBS:,} are asked for).")
    for c in checked:
        chain = c.setting.chain
        if chain.startswith("top_p →") and "top_k" in chain and c.verdict.startswith("agree"):
            notes.append(f"The chain {chain} agrees, so the server applied top-p before top-k, in the order given.")
    ctx.table(
        "sampler_check", "Our samplers against the server's post-sampling probabilities",
        columns(rows.CheckRow), cells([rows.check_row(c) for c in checks]), notes=notes,
    )
    if checked:
        ctx.note(f"Sampler check tolerance: |Δp| ≤ {REL_TOL:g} × p. The server works in 32-bit floats, so exact "
                 f"equality is not expected: the largest relative difference here was {largest:.2g}"
                 + (f", and a kept set one token off would show as {min(edge):.2g} or more." if edge else "."))


def render_seeded(ctx: LessonContext, runs: list[rows.SeededRun]) -> None:
    first, again, other = runs[0], runs[1], runs[2]
    same = first.tokens == again.tokens and first.text == again.text
    differ = first.tokens != other.tokens
    ctx.table(
        "seeded_sampling", f"Seeded sampling at temperature 1.0 ({SEEDED_TOKENS} tokens)",
        columns(rows.SeededRun), cells(runs),
        notes=[
            f"Runs 1 and 2 (seed {first.seed} twice): {'identical' if same else 'different'} text and tokens.",
            (f"Run 3 (seed {other.seed}): {'different from' if differ else 'the same as'} run 1, "
             f"{sum(a != b for a, b in zip(first.tokens, other.tokens, strict=False))} of {len(first.tokens)} tokens differ."),
        ],
    )


def render_latency(ctx: LessonContext, model: LatencyFit, fit: list[Completion], checks: list[LatencyCheck]) -> None:
    ttft, tpot = model.ttft, model.tpot
    worst, longest = worst_prediction(checks), checks[-1]
    floor_s = PODCAST_TOKENS * PODCAST_PASS_MS / 1000
    ctx.table(
        "latency_model", "Total time ≈ time to first token + time per output token × (n − 1)",
        columns(rows.LatencyRow), cells([rows.latency_row(c) for c in checks]),
        notes=[
            (f"Fitted at n = {FIT_N} ({len(fit)} repeats): time to first token {ttft:.4g} ms (prompt_ms), "
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
        ],
    )
    xs = [float(c.n) for c in checks]
    ctx.plot("latency_model", "Predicted vs measured total time", "tokens generated (n)", "total time (ms)", [
        Series(label="predicted: TTFT + TPOT × (n − 1)", x=xs, y=[c.predicted for c in checks], style="dashed"),
        Series(label="measured (median, min–max)", x=xs, y=[c.measured for c in checks], y_min=[min(c.totals) for c in checks],
               y_max=[max(c.totals) for c in checks], style="points"),
    ])


def render_outside(ctx: LessonContext, clock: dict[str, Any], view: OutsideView) -> None:
    c, reps, n = view.client, view.repeats, STREAM_TOKENS
    per_token, itl, mean_itl = view.per_token_ms, view.itl_percentiles(), view.itl_mean_ms
    predicted, gaps, overheads = view.predicted_end_to_end(n), view.ttft_gaps_ms, view.overheads_ms
    ctx.table(
        "client_clock", f"The loop from outside: {n} streamed tokens on the client's clock, beside the server's timings",
        columns(rows.ClockRow), cells(rows.clock_rows(view, n)),
        notes=[
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
        ],
    )
    ctx.table(
        "client_clock_repeats", "Each streamed repeat on both clocks, and the sequential floor",
        columns(rows.RepeatRow), cells([rows.repeat_row(r) for r in reps]),
        notes=[
            (f"The sequential floor: a token's pass needs the token before it, so {n} tokens cannot take less than {n} × the "
             f"fastest gap. {'Every' if view.floor_held else 'NOT every'} repeat took at least that "
             f"(end-to-end ÷ floor {min(view.above_floor):.3g} to {max(view.above_floor):.3g}), and in "
             f"{sum(r.client.in_order and r.client.separate for r in reps)} of {len(reps)} repeats every token arrived "
             f"strictly after the one before it."),
            *([(f"The fastest gap ({view.fastest_gap_ms:.3g} ms) is shorter than the server's time per token ({per_token:.3g} ms): an "
                f"event that reaches the client late shortens the gap after it, so the floor read on the client's clock "
                f"is a loose one; the server's predicted_ms ÷ (predicted_n − 1) is the pass itself.")]
              if view.fastest_gap_ms < 0.5 * per_token else []),
        ],
    )
    first = reps[0]
    xs = [float(i) for i in range(1, first.client.n + 1)]
    ctx.plot("client_clock_staircase", f"Arrival of each token on the client's clock (repeat 1, n = {n})", "token index",
             "arrival (ms after sending)", [
                 Series(label="client: arrival of token i", x=xs, y=first.client.times_ms, style="steps"),
                 Series(label="server: prompt_ms + predicted_per_token_ms × (i − 1)", x=xs,
                        y=[first.timings.prompt_ms + first.per_token_ms * (x - 1) for x in xs], style="dashed"),
             ])


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"seed": SEED, "loop_prompt": LOOP_PROMPT, "sampling_prompt": SAMPLING_PROMPT,
                         "rel_tol": REL_TOL})

    # The loop: n tokens, n passes, counted by the server's own /metrics.
    ctx.step(f"generating {LOOP_TOKENS} tokens and counting passes")
    loop = request_loop(ctx)
    render_loop(ctx, loop.done, loop_steps(loop.done))
    if loop.before is None or loop.after is None:
        ctx.note("The server does not serve /metrics (start it with --metrics): the passes were not counted.")
    else:
        render_metrics(ctx, loop.done, counter_deltas(loop.before, loop.after))

    # Greedy, temperature, top-k and top-p on a real next-token distribution, then against the server.
    ctx.step("the next-token distribution before sampling")
    dist = request_distribution(ctx)
    render_distribution(ctx, dist)
    ctx.step("applying the samplers in numpy")
    applied = [apply_setting(dist, s) for s in SAMPLER_SETTINGS]
    render_applied(ctx, dist, applied)
    ctx.step("checking against the server's post-sampling probabilities")
    checks = []
    for a in ctx.track(applied, "post-sampling checks"):
        n_ask = asked_candidates(dist, a, MAX_POST_PROBS)
        checks.append(check_setting(dist, a, request_post_sampling(ctx, a.setting, n_ask) if n_ask else None))
    ctx.fact(facts05.SamplerComparisons([facts05.SamplerComparison.model_validate(c.fact()) for c in checks]))
    render_check(ctx, dist, applied, checks)

    # A seeded sampler repeats itself.
    ctx.step("seeded sampling")
    render_seeded(ctx, [rows.SeededRun(i, seed, repr(done.content), done.tokens)
                        for i, (seed, done) in enumerate(zip(SEEDS, request_seeded(ctx), strict=True), start=1)])

    # Total time ≈ time to first token + time per output token × (n − 1), fitted at one length.
    ctx.step("fitting the latency model")
    fit = request_timed(ctx, FIT_N)
    model = latency_fit([c.timings for c in fit])
    lengths = [latency_check(model, n, [c.timings for c in (fit if n == FIT_N else request_timed(ctx, n))], n == FIT_N)
               for n in sorted({FIT_N, *PREDICT_N})]
    record_latency(ctx, model, lengths)
    render_latency(ctx, model, fit, lengths)

    # The same loop seen from outside: each token streamed and timed on arrival, beside the server's timings.
    # (A run recorded before the lesson streamed replays without this part.)
    if ctx.recorded("client_clock"):
        ctx.step(f"streaming {STREAM_TOKENS} tokens, each timed on arrival")
        clock = ctx.host("client_clock", clock_info)
        view = outside_view(request_streamed(ctx))
        record_outside(ctx, clock, view)
        render_outside(ctx, clock, view)

    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
