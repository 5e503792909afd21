"""Lesson 4 — The forward pass.

One forward pass turns a prompt into one probability for every vocabulary entry. This script
works softmax on three logits, asks the server for the eight most probable next tokens of the
four published prompts (full softmax, before any sampler) beside the server's own probabilities
for them. It runs the same forward pass in numpy from the GGUF's bytes (bytesup.models.forward: the lesson's
fifteen lines) and sets its top eight beside the server's, on the served file and, for the default
model, on its f32 width too; shows that keeping only the last position gives the same answer for
fewer FLOPs; and follows the final top token through the blocks. Then it times the two phases of
inference from the server's own timings: prefill of a long prompt and decode after a short and after
a long one. It ends with decode as a share of the
bandwidth ceiling of lesson 1 (where this host's bandwidth bounds the server, or at the bandwidth
given with --bandwidth-gbs) and the cost of one pass, about two FLOPs per parameter per token.

Its parts: the plan (store/plans/lesson04.py), the requests and main here, the arithmetic (course/nexttoken.py and
the computation section at the end), the view (store/views/lesson04.py).
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import Field, field_validator

from bytesup.course import ceiling, formulas, nexttoken, stopping
from bytesup.course.ceiling import Ceiling, Efficiency, TokenWork, token_work
from bytesup.course.nexttoken import LastOnly, Speeds, ThroughTheLayers, sig
from bytesup.errors import ImplausibleValue
from bytesup.lesson import LessonContext, ModelQuery
from bytesup.llama import build, timed
from bytesup.llama.responses import Completion, shown_token
from bytesup.models import catalog, forward, smollm2
from bytesup.options import BandwidthGbs, LessonOptions
from bytesup.store.facts.lesson04 import (FileAnswers, FilePass, NumpyOutcome, NumpyToken, PromptAgreement, ShownTable, ShownToken,
                                          TopTokens, as_key, file_pass)
from bytesup.store.plans.lesson04 import (BENCH_REPETITIONS, F32_WIDTH, MIN_REPEAT, N_PREDICT, READ_FROM, SERVER_PROBS,
                                          SHORT_PROMPT, TOP8, NumpyFiles, Plan, f32_server, fresh, from_older,
                                          long_prompt_length, read)
from bytesup.store.plans.lesson04 import PROMPTS  # noqa: F401 - the published prompts, read by other tests as lesson.PROMPTS
from bytesup.store.views import lesson04

TITLE = "The forward pass"
TOP_K = 8   # tokens compared per prompt, as the server lists them
# The default model's narrower widths: the numpy pass sets these against their f32 width a second time.
NARROWER_WIDTHS = {m.sha256 for m in smollm2.REAL_MODELS.values() if m.name != F32_WIDTH}


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    plan = the_plan(ctx)
    info = ctx.model_info()
    n_vocab = info["hyperparameters"]["n_vocab"] if info else None

    # 1. Softmax: scores become probabilities (worked here, on every run and replay).
    ctx.step("softmax")
    lesson04.show_softmax(ctx, nexttoken.softmax_example())

    # 2. The eight most probable next tokens of the four prompts (and any given with --prompt), beside the
    #    server's own probabilities.
    tables = [top_table(answers) for answers in ask_top_tokens(ctx, plan.prompts)]
    for t in tables:
        lesson04.show_top_tokens(ctx, t, n_vocab)
    ctx.fact(TopTokens({t.name or "": ShownTable(prompt=t.prompt, tokens=t.tokens) for t in tables}))

    # 3. The same pass in numpy from the file's bytes: its top eight beside the server's, on this file and the
    #    f32 width; keeping only the last position; the answer through the layers.
    ctx.step("the forward pass in numpy")
    numpy = the_pass_in_numpy(ctx, plan.numpy, tables)
    lesson04.show_numpy_pass(ctx, numpy, dict(plan.prompts))
    if numpy is not None:
        ctx.fact(numpy.fact())

    # 4. What one forward pass costs: every weight read once, two FLOPs per weight.
    cost = token_work(info["n_params"], formulas.bytes_per_token(info)) if info is not None else None
    if cost is not None:
        lesson04.show_cost(ctx, cost, n_vocab)

    # 5. Prefill and decode, from the server's timings, beside llama.cpp in process (llama-bench).
    ctx.step("prefill and decode")
    runs = time_prefill_and_decode(ctx, plan)
    ctx.settings = plan.settings(runs.n_ctx, runs.n_long, runs.long_stopped.to_json() if runs.long_stopped else None)
    sp = speeds(runs)
    record_speeds(ctx, sp)
    lesson04.show_prefill_decode(ctx, sp, runs.n_ctx, runs.n_long, cost, ctx.identity.get("server", {}).get("flags"),
                                 (runs.long_stopped, plan.long) if runs.long_stopped and plan.long else None)
    lesson04.show_third_clock(ctx, runs.in_process, nexttoken.third_clocks(sp, runs.in_process, N_PREDICT),
                              plan.bench_turns, plan.bench_warmup_tokens)

    # 6. Decode against the bandwidth ceiling of lesson 1 (bytesup.course.ceiling).
    ctx.step("read bandwidth")
    ceil, eff = decode_against_the_ceiling(ctx, cost, sp)
    lesson04.plot_speeds(ctx, sp, ceil, eff)

    # What this run shows: the first prompt's answer, and numpy's pass beside the server's (or, where it did not run,
    # prefill and decode against the ceiling), first on the page with its plot.
    ctx.shows(*lesson04.shows(tables, numpy, sp, ceil, eff))
    return ctx.finish()


def decode_against_the_ceiling(ctx: LessonContext, cost: TokenWork | None, sp: Speeds) -> tuple[Ceiling | None, Efficiency | None]:
    """Decode as a share of the bandwidth ceiling, recorded and shown; (None, None) where the model file is not readable."""
    if cost is None:
        ctx.note("The model file is not readable here (pass --model PATH.gguf), so the bandwidth ceiling and "
                 "the cost of one pass are not computed.")
        return None, None
    facts, reading = ctx.server_facts(), ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 6, 7 and 8
    ceil = ceiling.bandwidth_ceiling(cost.bytes, reading["gb_per_s"]["samples"],
                                     host_applies=bool(facts["host_bandwidth_applies"]), given_gbs=ctx.options.bandwidth_gbs)
    eff = ceiling.decode_efficiency(ceil, sp.decode_short)
    record_ceiling(ctx, ceil, eff, reading["threads"])
    lesson04.show_decode_vs_ceiling(ctx, ceil, eff, reading, facts["reason"])
    return ceil, eff


# --- the plan: what this run asks, recorded once ---------------------------------------------

class Options(LessonOptions):
    """This lesson's options (`ctx.options`): prompts of your own, and a bandwidth of your own for the decode ceiling."""

    prompts: list[str] | None = Field(
        default=None, min_length=1,
        description="a prompt of your own, repeatable (--prompt TEXT --prompt TEXT): added after the published four "
                    "to the next-token tables and the numpy forward pass",
        json_schema_extra={"flag": "--prompt", "repeatable": True,
                           "hint": "give each prompt some text, e.g. --prompt 'The capital of Italy is'"})
    bandwidth_gbs: BandwidthGbs = None

    @field_validator("prompts")
    @classmethod
    def _some_text(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not p.strip() for p in value):
            raise ValueError("a prompt is empty")
        return value


def the_plan(ctx: LessonContext) -> Plan:
    """The plan, recorded once as the host value `plan`. A run recorded before plans has none: the plan module
    reads its plan from the host values that run recorded (its numbered table of upgrades)."""
    return ctx.plan(lambda: fresh_plan(ctx).model_dump(mode="json"), read, from_older, READ_FROM)


def fresh_plan(ctx: LessonContext) -> Plan:
    """This run's plan: the prompts given, the runs of each timed request (the run's one rule, `ctx.samples`: --repeat,
    at least MIN_REPEAT), and the files the numpy pass reads, by path and sha256: the served GGUF and, when it is one of
    the default model's narrower widths, its f32 width (fetched or derived here)."""
    model = ctx.readable_model()
    served = ctx.file_record(model) if model is not None else None
    f32 = ctx.file_record(catalog.ensure_model(F32_WIDTH)) if served and served["sha256"] in NARROWER_WIDTHS else None
    return fresh(ctx.options.prompts, ctx.samples(MIN_REPEAT), NumpyFiles(served=served, f32=f32))


# --- requests: the server's answers and the host's measurements ----------------------------------

@dataclass(frozen=True)
class TopAnswers:
    """One prompt's two answers: the full softmax as logprobs, and the server's own probabilities."""

    name: str
    prompt: str
    logprobs: Completion   # TOP8: temperature 0, post_sampling_probs false
    server: Completion     # SERVER_PROBS: temperature 1 alone, post_sampling_probs true


def ask_top_tokens(ctx: LessonContext, prompts: list[tuple[str, str]]) -> list[TopAnswers]:
    return [TopAnswers(name, prompt, ctx.server.completion(prompt, **TOP8),
                       ctx.server.completion(prompt, **SERVER_PROBS))
            for name, prompt in ctx.track(prompts, "top eight next tokens")]


@dataclass(frozen=True)
class NumpyAsked:
    """What the numpy pass needs from servers: each prompt's token ids, and the f32 width's top eight."""

    ids: list[list[int]]
    f32: list[Completion] | None


def ask_for_the_numpy_pass(ctx: LessonContext, files: NumpyFiles, prompts: list[str]) -> NumpyAsked:
    # The server's own tokenizer, with the special tokens a /completion prompt gets (add_special).
    ids = [ctx.server.tokenize(prompt, with_pieces=False, add_special=True).ids for prompt in prompts]
    f32 = None
    if files.f32 is not None:
        ctx.step("the f32 width's top eight")
        with ctx.local_server("f32", f32_server(Path(files.f32["path"]))) as server:
            f32 = [server.completion(prompt, **TOP8) for prompt in prompts]
    return NumpyAsked(ids, f32)


@dataclass(frozen=True)
class TimedRuns:
    n_ctx: int
    n_long: int                    # tokens of the long prompt asked for
    long: list[Completion]
    short: list[Completion]
    in_process: list[dict[str, Any]] | None = None  # llama-bench at each of the plan's turns (None: not asked here)
    long_stopped: stopping.Stop | None = None        # what stopped the long prompt's requests (None: no rule)


def time_prefill_and_decode(ctx: LessonContext, plan: Plan) -> TimedRuns:
    """Completions of N_PREDICT tokens after a long prompt (as long as the context allows), as many as the plan's
    stopping rule takes (or `plan.repeat`), and `plan.repeat` after the short one, pinned as units.PINNED says, with
    llama-bench at the plan's turns: before them, between the two prompts' (before version 4) and after them."""
    n_ctx = timed.context_size(ctx.server)
    n_long = long_prompt_length(n_ctx)
    long_ids = timed.long_prompt_tokens(ctx.server, n_long)
    bench: list[dict[str, Any] | None] = [llama_bench(ctx, plan, "before", n_long)]
    long_runs, stopped = time_the_long_prompt(ctx, plan, long_ids)
    if "between" in plan.bench_turns:
        bench.append(llama_bench(ctx, plan, "between", n_long))
    short_runs = timed.timed_completions(ctx.server, SHORT_PROMPT, N_PREDICT, plan.repeat,
                                         track=lambda r: ctx.track(r, "short prompt"))
    bench.append(llama_bench(ctx, plan, "after", n_long))
    turns = [b for b in bench if b is not None]
    return TimedRuns(n_ctx, n_long, long_runs, short_runs, turns if len(turns) == len(bench) else None, stopped)


def time_the_long_prompt(ctx: LessonContext, plan: Plan, ids: list[int]) -> tuple[list[Completion], stopping.Stop | None]:
    """The long prompt's timed requests: under the plan's stopping rule, one at a time until the median prefill and
    the median decode after it are tight (or the rule's maximum or budget: their server time); `plan.repeat` of them
    in a plan without one."""
    track = functools.partial(ctx.track, text="long prompt")
    if plan.long is None:
        return timed.timed_completions(ctx.server, ids, N_PREDICT, plan.repeat, track=track), None
    rule = plan.long.rule()
    asked = (timed.timed_completions(ctx.server, ids, N_PREDICT, 1)[0] for _ in track(range(rule.maximum)))
    return stopping.take(rule, asked, lambda done: [timed.prefill_samples(done), timed.decode_samples(done)],
                         server_seconds)


def server_seconds(c: Completion) -> float:
    """A request's own time by the server's timings: its prefill and its decode."""
    return (c.timings.prompt_ms + c.timings.predicted_ms) / 1000


def llama_bench(ctx: LessonContext, plan: Plan, when: str, n_prompt: int) -> dict[str, Any] | None:
    """The native build's llama-bench on the served model, with the server's threads and the lesson's lengths
    (`-p` the long prompt, `-n` N_PREDICT), BENCH_REPETITIONS times: a host value (None where the plan has none).
    At the first turn a warm-up: a short prefill first (the plan's bench_warmup_tokens), or llama-bench's own."""
    if not plan.llama_bench:
        return None

    def run() -> dict[str, Any]:
        model = ctx.readable_model()
        if model is None or not ctx.server_facts()["local"]:
            return {"available": False, "why": "the server is not on this host, or its model file is not readable here"}
        _, bin_dir, why = build.usable_build()
        if bin_dir is None:
            return {"available": False, "why": why}
        try:
            # A warm-up at the first turn only: the file is read and the code paths are warm after it.
            first, short = when == plan.bench_turns[0], plan.bench_warmup_tokens
            speeds = build.bench(bin_dir, model, n_prompt, N_PREDICT, ctx.server_threads(), BENCH_REPETITIONS,
                                 warmup=first and short is None, warmup_prompt=short if first else None)
        except build.NativeBuildError as exc:
            return {"available": False, "why": str(exc)}
        return {"available": True, "threads": ctx.server_threads(), **speeds}

    return ctx.host(f"llama_bench_{when}", run)


def record_speeds(ctx: LessonContext, sp: Speeds) -> None:
    n = N_PREDICT
    ctx.measure("prefill_tokens_per_s_long_prompt", "tokens/s", sp.prefill, higher_is_better=True, settings={"prompt_tokens": sp.prompt_n})
    ctx.measure("decode_tokens_per_s_short_prompt", "tokens/s", sp.decode_short, higher_is_better=True,
                settings={"prompt_tokens": sp.short_prompt_n, "n_predict": n})
    ctx.measure("decode_tokens_per_s_long_prompt", "tokens/s", sp.decode_long, higher_is_better=True,
                settings={"prompt_tokens": sp.prompt_n, "n_predict": n})
    ctx.measure("prefill_decode_ratio", "×", [sp.ratio], higher_is_better=None,
                description="median prefill tokens/s ÷ median decode tokens/s after the short prompt")


def record_ceiling(ctx: LessonContext, ceil: Ceiling, eff: Efficiency, threads: int) -> None:
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", list(ceil.bandwidth_gbs), higher_is_better=True, settings={"threads": threads})
    if eff.host is not None:
        ctx.measure("decode_ceiling_tokens_per_s", "tokens/s", list(ceil.ceilings), higher_is_better=None,
                    settings={"bytes_per_token": ceil.bytes_per_token, "threads": threads},
                    description="this host's read bandwidth × 1e9 ÷ bytes per token, per bandwidth sample")
        ctx.measure("decode_efficiency", "%", list(eff.host), higher_is_better=True,
                    description="decode tokens/s after the short prompt ÷ median ceiling × 100")
    if ceil.given_ceiling is not None and eff.given is not None:
        ctx.measure("decode_ceiling_tokens_per_s_given_bandwidth", "tokens/s", [ceil.given_ceiling], higher_is_better=None,
                    settings={"bandwidth_gbs": ceil.given_gbs}, description="--bandwidth-gbs × 1e9 ÷ bytes per token")
        ctx.measure("decode_efficiency_given_bandwidth", "%", list(eff.given), higher_is_better=True,
                    settings={"bandwidth_gbs": ceil.given_gbs},
                    description="decode tokens/s after the short prompt ÷ the --bandwidth-gbs ceiling × 100")


# --- the forward pass in numpy: the file's bytes against the server's tables ---------------------

def the_pass_in_numpy(ctx: LessonContext, files: NumpyFiles | None,
                      tables: list[ShownTable]) -> NumpyOutcome | None:
    """Lesson 4's fifteen lines in numpy on the file's bytes against the server's tables (bytesup.models.forward), and
    on the f32 width against a server of its own; None for a run recorded before the pass."""
    if files is None:
        return None
    if files.served is None:
        return NumpyOutcome(None, "The model file is not readable here (pass --model PATH.gguf), so the forward "
                                  "pass is not computed in numpy.")
    names = [(t.name or "", t.prompt or "") for t in tables]
    asked = ask_for_the_numpy_pass(ctx, files, [prompt for _, prompt in names])
    served = ctx.file_with(files.served)
    if served is None:
        return NumpyOutcome(None, ctx.file_not_here(files.served, "The numpy pass"))
    done, probs = numpy_pass(served, file_pass(served, files.served["sha256"], as_key(asked.ids)), names, [t.tokens for t in tables])
    outcome = NumpyOutcome(done.part, prompt_n=[t.prompt_n or 0 for t in tables], last=done.last, layers=done.layers)
    if asked.f32 is None or files.f32 is None:
        return outcome
    f32_path = ctx.file_with(files.f32)
    if f32_path is None:
        return replace(outcome, f32_missing=ctx.file_not_here(files.f32, "The numpy pass"))
    f32, f32_probs = numpy_pass(f32_path, file_pass(f32_path, files.f32["sha256"], as_key(asked.ids)), names,
                                [top_tokens(c) for c in asked.f32])
    return replace(outcome, f32=f32.part, f32_prompt_n=[c.timings.prompt_n for c in asked.f32],
                               same=max(float(np.max(np.abs(p - q))) for p, q in zip(probs, f32_probs, strict=True)))


# --- computation: pure functions of the answers and the file ----------------------------------------

def top_tokens(completion: Completion, server: Completion | None = None) -> list[ShownToken]:
    """The first generated position's candidates, most probable first: probability is e^logprob; server
    probability is the server's own post-sampling probability of the same token id in `server`. An answer that lists
    no candidate, or one whose e^logprob is 0, is refused: a softmax gives its most probable tokens more than that."""
    first = completion.first_position()
    field = "completion_probabilities[0].top_logprobs"
    if not first.top_logprobs:
        raise ImplausibleValue("/completion", field, first.top_logprobs, f"n_probs {TOP8['n_probs']} was asked, so "
                               "it lists that many candidates, the most probable first", None)
    for k, c in enumerate(first.top_logprobs):
        if math.exp(c["logprob"]) == 0.0:
            raise ImplausibleValue("/completion", f"{field}[{k}].logprob", c["logprob"], "e^logprob is 0 in float64, and a "
                                   "softmax gives each of its most probable tokens far more than that", None)
    cands = sorted(first.top_logprobs, key=lambda c: -c["logprob"])
    theirs = {c.id: c.probability for c in server.first_position().candidates()} if server is not None else {}
    return [ShownToken(rank, c["id"], shown_token(c["token"], c.get("bytes")), math.exp(c["logprob"]), c["logprob"],
                       theirs.get(c["id"])) for rank, c in enumerate(cands, start=1)]


def top_table(answers: TopAnswers) -> ShownTable:
    first = answers.logprobs.first_position()
    return ShownTable(prompt=answers.prompt, tokens=top_tokens(answers.logprobs, answers.server), name=answers.name,
                      prompt_n=answers.logprobs.timings.prompt_n, generated=shown_token(first.token, first.bytes))


def agreement(name: str, prompt: str, server: list[ShownToken], done: forward.Pass, shown: Callable[[int], str],
              k: int = TOP_K) -> PromptAgreement:
    """Numpy's k most probable tokens beside the server's, with the largest gap and the KL divergence where both list."""
    probs = done.probs
    order = [int(i) for i in np.argsort(-probs, kind="stable")[:k]]
    theirs = {t.id: t.probability or 0.0 for t in server}
    ours = [NumpyToken(r, i, shown(i), sig(float(probs[i])), theirs.get(i),
                       sig(float(probs[i])) - theirs[i] if i in theirs else None) for r, i in enumerate(order, start=1)]
    worst = max(server, key=lambda t: abs(float(probs[t.id]) - (t.probability or 0.0)))
    both = [t for t in server if t.id in set(order)]
    p = np.array([t.probability for t in both])
    q = np.array([float(probs[t.id]) for t in both])
    p, q = p / p.sum(), q / q.sum()
    top = server[0]
    return PromptAgreement(
        numpy_top_id=ours[0].id, server_top_id=top.id or 0, top_agrees=ours[0].id == top.id,
        set_agrees=set(order) == set(theirs), largest_abs_dp=sig(abs(float(probs[worst.id]) - (worst.probability or 0.0))),
        kl_shared=sig(float(np.sum(p * np.log(p / q)))), shared=len(both),
        probabilities_of_server_ids={str(t.id): sig(float(probs[t.id])) for t in server},
        largest_abs_logit=sig(float(np.max(np.abs(done.logits)))), name=name, prompt=prompt, n_tokens=len(done.tokens),
        server_token=top.token, server_p=top.probability, numpy_token=ours[0].token, numpy_p=ours[0].probability,
        at_token=worst.token, at_server=worst.probability, at_numpy=sig(float(probs[worst.id])), numpy=ours)


def last_only(file: FileAnswers, name: str, done: forward.Pass, every: np.ndarray) -> LastOnly:
    """`every`: (N, vocabulary), the final norm and the output matrix on every position."""
    return LastOnly(name, len(done.tokens), file.n_vocab, file.n_embd,
                    sig(float(np.max(np.abs(every[-1] - done.logits)))), int(np.argmax(every[-1])) == int(np.argmax(done.logits)))


def through_the_layers(name: str, done: forward.Pass, after_block: np.ndarray, shown: Callable[[int], str]) -> ThroughTheLayers:
    logits = after_block.astype(np.float64)  # (blocks, vocabulary)
    top = int(np.argmax(done.probs))
    ranks = 1 + np.sum(logits > logits[:, [top]], axis=1)
    probs = forward.softmax(logits, axis=-1)[:, top]
    return ThroughTheLayers(name, top, shown(top), [int(r) for r in ranks], [sig(float(p)) for p in probs])


@dataclass(frozen=True)
class NumpyPass:
    """The numpy pass over one file against one server's answers: the fact's part, and the two figures of its own."""

    part: FilePass
    last: list[LastOnly]
    layers: list[ThroughTheLayers]


def numpy_pass(path: Path, file: FileAnswers, names: list[tuple[str, str]],
               server: list[list[ShownToken]]) -> tuple[NumpyPass, list[np.ndarray]]:
    """Lesson 4's fifteen lines in numpy on every prompt (`file_pass`), then the comparisons with the server; and numpy's
    probabilities."""
    passes = file.passes

    def shown(token_id: int) -> str:
        return shown_token("", list(file.token_bytes(token_id)))

    part = FilePass(file=path.name, weight_type=file.weight_type,
                    prompts={n: agreement(n, p, s, d, shown) for (n, p), s, d in zip(names, server, passes, strict=True)})
    return NumpyPass(part, [last_only(file, n, d, e) for (n, _), d, e in zip(names, passes, file.every, strict=True)],
                     [through_the_layers(n, d, a, shown) for (n, _), d, a in zip(names, passes, file.after_block, strict=True)]), \
        [d.probs for d in passes]


def speeds(runs: TimedRuns) -> Speeds:
    return Speeds(runs.long[0].timings.prompt_n, runs.short[0].timings.prompt_n, timed.prefill_samples(runs.long),
                  timed.decode_samples(runs.short), timed.decode_samples(runs.long))


def models_needed(query: ModelQuery) -> list[str]:
    """The models a live run makes before its first lesson for this one: the f32 width, where the served model is
    one of the default model's narrower widths (numpy_plan's rule)."""
    return [F32_WIDTH] if query.served_sha256 in NARROWER_WIDTHS else []


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
