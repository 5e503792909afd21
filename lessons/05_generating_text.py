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

Its parts: `main` below, in the order of the lesson; its plan, what it asks (`bytesup.store.plans.lesson05`); the
requests; the arithmetic (`bytesup.course.loop`, `sampling`, `samplercheck` and `clientclock`, and this file's
computation section); what it records; the view, its rows, tables, notes and plots (`bytesup.store.views.lesson05`).
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

import numpy as np

from bytesup.course import clientclock, samplercheck
from bytesup.course.clientclock import OutsideView
from bytesup.course.loop import LatencyCheck, LatencyFit, counter_deltas, latency_check, latency_fit
from bytesup.course.samplercheck import Applied, Distribution, SamplerCheck, SamplerSetting, apply_setting, asked_candidates, needs_more
from bytesup.errors import BytesupError
from bytesup.lesson import LessonContext
from bytesup.llama.client import clock_info
from bytesup.llama.responses import Completion, StreamedCompletion, TokenProbabilities, shown_token
from bytesup.llama.timed import streamed_completions, timed_completions
from bytesup.store.facts.lesson05 import ClientClock, SamplerComparison, SamplerComparisons, StreamedRepeat
from bytesup.store.plans.lesson05 import CURRENT, READS, Plan, from_older, read
from bytesup.store.views import lesson05
from bytesup.store.views.lesson05 import LoopStep, SeededRun

TITLE = "Generating text"
MIN_SAMPLES = 1  # timed requests at each length: the run's --repeat, at least one (a fit and a median need one)


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    plan = the_plan(ctx)
    ctx.settings.update({"seed": plan.seed, "loop_prompt": plan.loop_prompt, "sampling_prompt": plan.sampling_prompt,
                         "rel_tol": plan.rel_tol})

    # The loop: n tokens, n passes, counted by the server's own /metrics.
    ctx.step(f"generating {plan.loop_tokens} tokens and counting passes")
    loop = request_loop(ctx, plan)
    ctx.tables.append(lesson05.one_pass_per_token(plan, loop.done, loop_steps(loop.done)))
    counters = None
    if loop.before is None or loop.after is None:
        ctx.note("The server does not serve /metrics (start it with --metrics): the passes were not counted.")
    else:
        counters = counter_deltas(loop.before, loop.after)
        ctx.tables.append(lesson05.metrics_delta(loop.done, counters))

    # Greedy, temperature, top-k and top-p on a real next-token distribution, then against the server.
    ctx.step("the next-token distribution before sampling")
    dist = request_distribution(ctx, plan)
    ctx.tables.append(lesson05.next_token_distribution(plan, dist))
    ctx.step("applying the samplers in numpy")
    applied = [apply_setting(dist, s) for s in sampler_settings(plan)]
    ctx.tables.append(lesson05.samplers_applied(dist, applied))
    ctx.step("checking against the server's post-sampling probabilities")
    checks = []
    for a in ctx.track(applied, "post-sampling checks"):
        n_ask = asked_candidates(dist, a, plan.max_post_probs)
        checks.append(check_setting(plan, dist, a, request_post_sampling(ctx, plan, a.setting, n_ask) if n_ask else None))
    ctx.fact(SamplerComparisons([SamplerComparison.model_validate(c.fact()) for c in checks]))
    ctx.tables += lesson05.sampler_check(plan, dist, checks)
    if (note := lesson05.sampler_check_note(plan, checks)) is not None:
        ctx.note(note)

    # A seeded sampler repeats itself.
    ctx.step("seeded sampling")
    ctx.tables.append(lesson05.seeded_sampling(plan, [
        SeededRun(i, seed, repr(done.content), done.tokens)
        for i, (seed, done) in enumerate(zip(plan.seeds, request_seeded(ctx, plan), strict=True), start=1)]))

    # Total time ≈ time to first token + time per output token × (n − 1), fitted at one length.
    ctx.step("fitting the latency model")
    fit = request_timed(ctx, plan, plan.fit_n)
    model = latency_fit([c.timings for c in fit])
    lengths = [latency_check(model, n, [c.timings for c in (fit if n == plan.fit_n else request_timed(ctx, plan, n))],
                             n == plan.fit_n)
               for n in sorted({plan.fit_n, *plan.predict_n})]
    record_latency(ctx, plan, model, lengths)
    ctx.tables += lesson05.latency_model(plan, model, fit, lengths)
    ctx.plots.append(lesson05.latency_plot(lengths))

    # The same loop seen from outside: each token streamed and timed on arrival, beside the server's timings.
    if plan.stream_tokens is not None:
        n = plan.stream_tokens
        ctx.step(f"streaming {n} tokens, each timed on arrival")
        clock = ctx.host("client_clock", clock_info)
        view = outside_view(request_streamed(ctx, plan, n))
        record_outside(ctx, n, clock, view)
        ctx.tables += [lesson05.client_clock(n, clock, view), *lesson05.client_clock_repeats(n, view)]
        ctx.plots.append(lesson05.client_clock_plot(n, view))

    # What this run shows: a pass per token, and the time model against the measured totals, first on the page.
    ctx.shows(lesson05.shows(loop.done.timings.predicted_n, counters, model, lengths), plot="latency_model")
    return ctx.finish()


# --- the plan: recorded once; a run recorded before plans is read from what it recorded -----------------

def the_plan(ctx: LessonContext) -> Plan:
    """The current plan, recorded once as the host value `plan`; a replay reads the recorded one, and a run recorded
    before plans is read from the host values it recorded (bytesup.store.plans.lesson05)."""
    return ctx.plan(lambda: CURRENT.model_dump(mode="json"), read, from_older, READS)


def sampler_settings(plan: Plan) -> list[SamplerSetting]:
    return [SamplerSetting(s.label, tuple(s.samplers), dict(s.params)) for s in plan.samplers]


# --- requests: what the server (and this host) answer ----------------------------------------

@dataclass(frozen=True)
class LoopRequest:
    before: dict[str, float] | None     # /metrics before the generation (None: not served)
    done: Completion
    after: dict[str, float] | None


def request_loop(ctx: LessonContext, plan: Plan) -> LoopRequest:
    """The plan's loop tokens after its loop prompt, between two readings of the server's counters."""
    try:
        before = ctx.server.metrics()
    except BytesupError:
        before = None
    # Greedy, seeded, no prompt cache: the same tokens and the same work every run.
    done = ctx.server.completion(plan.loop_prompt, n_predict=plan.loop_tokens, n_probs=1, post_sampling_probs=False,
                                 temperature=0, seed=plan.seed, cache_prompt=False, ignore_eos=True)
    after = ctx.server.metrics() if before is not None else None
    return LoopRequest(before, done, after)


def request_reference(ctx: LessonContext, plan: Plan, n_probs: int) -> Completion:
    # temperature 0: the probabilities reported are the full softmax before any sampler,
    # whatever is picked; the seed and the uncached prompt keep the request identical every run.
    return ctx.server.completion(plan.sampling_prompt, n_predict=1, n_probs=n_probs, post_sampling_probs=False,
                                 temperature=0, seed=plan.seed, cache_prompt=False)


def request_distribution(ctx: LessonContext, plan: Plan) -> Distribution:
    """The full softmax after the sampling prompt: the plan's first count of candidates, more if a chain's kept set
    needs them."""
    n_vocab = ctx.server.served_meta().get("n_vocab")
    asked = [plan.reference_probs]
    cands = request_reference(ctx, plan, plan.reference_probs).first_position().candidates()
    if needs_more([c.probability for c in cands], sampler_settings(plan)) and (n_vocab is None or len(cands) < n_vocab):
        asked.append(min(n_vocab or plan.max_reference_probs, plan.max_reference_probs))
        cands = request_reference(ctx, plan, asked[-1]).first_position().candidates()
    return Distribution(ids=[c.id for c in cands], probs=np.array([c.probability for c in cands]),
                        texts=[shown_token(c.token, c.bytes) for c in cands], asked=asked, n_vocab=n_vocab)


def post_sampling_body(samplers: tuple[str, ...] | list[str], params: dict[str, float], n_probs: int,
                       seed: int) -> dict[str, Any]:
    """One next token with the server's probabilities after the chain `samplers`.

    top_k 0, top_p 1.0 and min_p 0.0 switch off every cut that is not in the chain, so nothing
    else can trim; the seed pins the token drawn; cache_prompt false makes each request alike.
    """
    return {"n_predict": 1, "seed": seed, "cache_prompt": False, "post_sampling_probs": True,
            "n_probs": n_probs, "samplers": list(samplers), "top_k": 0, "top_p": 1.0, "min_p": 0.0, **params}


def request_post_sampling(ctx: LessonContext, plan: Plan, setting: SamplerSetting, n_probs: int) -> TokenProbabilities:
    done = ctx.server.completion(plan.sampling_prompt, **post_sampling_body(setting.samplers, setting.params, n_probs, plan.seed))
    return done.first_position()


def request_seeded(ctx: LessonContext, plan: Plan) -> list[Completion]:
    # temperature 1.0 with every cut off: a draw from the whole distribution; cache_prompt false and
    # ignore_eos keep the work and the length the same each time.
    ctx.settings["seeded"] = {"seeds": list(plan.seeds), "n_predict": plan.seeded_tokens}
    return [ctx.server.completion(plan.loop_prompt, n_predict=plan.seeded_tokens, temperature=1.0, seed=seed,
                                  top_k=0, top_p=1.0, min_p=0.0, cache_prompt=False, ignore_eos=True,
                                  return_tokens=True) for seed in plan.seeds]


def request_timed(ctx: LessonContext, plan: Plan, n: int) -> list[Completion]:
    # PINNED (greedy, seeded, ignore_eos, no prompt cache): every repeat does the same work; the run's samples (the
    # latency fit takes one or more).
    return timed_completions(ctx.server, plan.loop_prompt, n, ctx.samples(MIN_SAMPLES),
                             track=lambda r: ctx.track(r, f"n = {n}"), seed=plan.seed)


def request_streamed(ctx: LessonContext, plan: Plan, n: int) -> list[StreamedCompletion]:
    # The latency model's request (PINNED, the loop prompt), streamed: the same work every repeat.
    return streamed_completions(ctx.server, plan.loop_prompt, n, ctx.samples(MIN_SAMPLES),
                                track=lambda r: ctx.track(r, f"streamed, n = {n}"), seed=plan.seed)


# --- computation: typed results from the answers ------------------------------------------------

def loop_steps(done: Completion) -> list[LoopStep]:
    return [LoopStep(i, shown_token(step.token, step.bytes), step.id,
                     math.exp(step.logprob) if step.logprob is not None else None)
            for i, step in enumerate(done.completion_probabilities, start=1)]


def check_setting(plan: Plan, dist: Distribution, a: Applied, step: TokenProbabilities | None) -> SamplerCheck:
    """Our chain against the server's answer to the same chain (step None: not asked)."""
    answer = None if step is None else samplercheck.ServerAnswer([(c.id, c.probability) for c in step.candidates()], step.id,
                                                                  shown_token(step.token, step.bytes))
    return samplercheck.check_setting(dist, a, answer, plan.rel_tol, plan.max_post_probs)


def outside_view(done: list[StreamedCompletion]) -> OutsideView:
    return OutsideView([clientclock.StreamedRepeat(i, clientclock.client_times(s.arrivals(), s.ended_ms), s.timings, len(s.arrivals()))
                        for i, s in enumerate(done, start=1)])


# --- what the lesson records: measurements and facts --------------------------------------------

def record_latency(ctx: LessonContext, plan: Plan, model: LatencyFit, checks: list[LatencyCheck]) -> None:
    ctx.measure("time_to_first_token_ms", "ms", model.ttft_samples, higher_is_better=False,
                settings={"n_predict": plan.fit_n}, description="prompt_ms: the prompt pass, which yields the first token")
    ctx.measure("decode_ms_per_token", "ms", model.tpot_samples, higher_is_better=False,
                settings={"n_predict": plan.fit_n}, description="predicted_ms / (predicted_n − 1)")
    for c in checks:
        if not c.fitted:
            ctx.measure("latency_model_error_pct", "%", c.errors_pct, higher_is_better=None, settings={"n_predict": c.n},
                        description="(predicted − measured) ÷ measured total time, per repeat")


def record_outside(ctx: LessonContext, n: int, clock: dict[str, Any], view: OutsideView) -> None:
    c, settings = view.client, {"n_predict": n, "stream": True}
    ctx.measure("client_ttft_ms", "ms", c.ttft_ms, higher_is_better=False, settings=settings,
                description="the first token's arrival on the client's clock, ms after the request was sent")
    ctx.measure("client_itl_ms", "ms", c.itl_ms, higher_is_better=False, settings=settings,
                description="gaps between consecutive tokens' arrivals, every repeat pooled")
    ctx.measure("client_end_to_end_ms", "ms", c.end_to_end_ms, higher_is_better=False, settings=settings,
                description="the final event's arrival")
    ctx.measure("client_minus_server_ms", "ms", view.overheads_ms, higher_is_better=False, settings=settings,
                description="end-to-end on the client minus prompt_ms + predicted_ms")
    ctx.fact(ClientClock(n_predict=n, clock=clock["clock"],
                         repeats=[StreamedRepeat.model_validate(r.fact()) for r in view.repeats]))


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
