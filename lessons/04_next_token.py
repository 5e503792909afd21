"""Lesson 4 — The forward pass.

One forward pass turns a prompt into one probability for every vocabulary entry. This script
works softmax on three logits, asks the server for the eight most probable next tokens of the
four published prompts (full softmax, before any sampler) beside the server's own probabilities
for them, then times the two phases of inference from the server's own timings: prefill of a
long prompt and decode after a short and after a long one. It ends with decode as a share of the
bandwidth ceiling of lesson 1 (where this host's bandwidth bounds the server, or at the bandwidth
given with --bandwidth-gbs) and the cost of one pass, about two FLOPs per parameter per token.
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

from bytesup import ceiling, formulas, hostbench, measure, published
from bytesup.ceiling import Ceiling, Efficiency, Spread, TokenWork, token_work
from bytesup.records import Completion, shown_token
from bytesup.lesson import LessonContext

TITLE = "The forward pass"

# The lesson's four prompts, with the table each one fills.
PROMPTS = [
    ("top8_capital_of_france", "The capital of France is"),
    ("top8_cat_sat", "The cat sat on the"),
    ("top8_fibonacci", "def fibonacci(n):\n    if n"),
    ("top8_for_loop", "for (int i = 0; i <"),
]
# One pass, eight candidates from the full softmax (post_sampling_probs false: before top-k,
# top-p or temperature touch it). Temperature 0 and a seed make the generated token repeatable;
# cache_prompt false makes each prompt a fresh forward pass from its first token.
TOP8 = {"n_predict": 1, "n_probs": 8, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}
# The same eight, as the server's own probabilities: temperature 1.0 alone in the chain, with every
# cut off (top_k 0, top_p 1, min_p 0), leaves the full softmax, and post_sampling_probs reports it
# as probabilities the server computed rather than logprobs. Seed and cache_prompt as above.
SERVER_PROBS = {"n_predict": 1, "n_probs": 8, "temperature": 1.0, "samplers": ["temperature"], "top_k": 0,
                "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": False, "seed": 42}

SOFTMAX_LOGITS = [2.0, 1.0, 0.1]  # the lesson's worked example
SOFTMAX_SHIFT = 100.0             # added to every logit: only the gaps matter

SHORT_PROMPT = "The capital of France is"
# The published long prompt's length (published.LESSON4 mixes numbers and lists, hence the ignore).
LONG_PROMPT_TOKENS: int = published.LESSON4["long_prompt_tokens"]
N_PREDICT = 32                    # tokens decoded per timed request
CONTEXT_MARGIN = 16               # tokens of context left free beyond prompt + n_predict

# Published figures (bytesup.published: lesson 4 on the DGX Spark, its specimen model, lesson 7's
# H100 ridge point). References only: every comparison with them is computed.
PUB: dict[str, Any] = published.LESSON4
SPECIMEN: dict[str, Any] = published.SPECIMEN
PUB_HOST = published.SPARK_NAME
PUB_MODEL = published.SPECIMEN_NAME


# --- requests: the server's answers and the host's measurements ----------------------------------

@dataclass(frozen=True)
class TopAnswers:
    """One prompt's two answers: the full softmax as logprobs, and the server's own probabilities."""

    name: str
    prompt: str
    logprobs: Completion   # TOP8: temperature 0, post_sampling_probs false
    server: Completion     # SERVER_PROBS: temperature 1 alone, post_sampling_probs true


def ask_top_tokens(ctx: LessonContext) -> list[TopAnswers]:
    return [TopAnswers(name, prompt, ctx.server.completion(prompt, **TOP8), ctx.server.completion(prompt, **SERVER_PROBS))
            for name, prompt in ctx.track(PROMPTS, "top eight next tokens")]


@dataclass(frozen=True)
class TimedRuns:
    n_ctx: int
    n_long: int                    # tokens of the long prompt asked for
    long: list[Completion]
    short: list[Completion]


def time_prefill_and_decode(ctx: LessonContext, repeat: int) -> TimedRuns:
    """`repeat` completions of N_PREDICT tokens after a long prompt (as long as the context allows)
    and after the short one, pinned as measure.PINNED says."""
    n_ctx = measure.context_size(ctx.server)
    n_long = long_prompt_length(n_ctx)
    long_ids = measure.long_prompt_tokens(ctx.server, n_long)
    ctx.settings = {"top8": TOP8, "server_probabilities": SERVER_PROBS, "timed": {**measure.PINNED, "n_predict": N_PREDICT},
                    "short_prompt": SHORT_PROMPT, "long_prompt_tokens": n_long, "n_ctx": n_ctx, "repeat": repeat}
    long_runs = measure.timed_completions(ctx.server, long_ids, N_PREDICT, repeat, track=lambda r: ctx.track(r, "long prompt"))
    short_runs = measure.timed_completions(ctx.server, SHORT_PROMPT, N_PREDICT, repeat, track=lambda r: ctx.track(r, "short prompt"))
    return TimedRuns(n_ctx, n_long, long_runs, short_runs)


@dataclass(frozen=True)
class BandwidthInputs:
    """The run's bandwidth reading, where the server decodes, and the bandwidth given with --bandwidth-gbs."""

    reading: dict[str, Any]
    facts: dict[str, Any]
    given_gbs: float | None


def bandwidth_inputs(ctx: LessonContext) -> BandwidthInputs:
    facts = ctx.server_facts()
    reading = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 7 and 8
    return BandwidthInputs(reading, facts, ctx.option("bandwidth_gbs"))


# --- computation: pure functions of the answers and the readings --------------------------------

@dataclass(frozen=True)
class SoftmaxExample:
    logits: list[float]
    exp: list[float]
    probs: list[float]
    sum: float
    shift: float
    probs_shifted: list[float]
    shift_max_abs_difference: float
    gap: float              # logits[0] − logits[1]
    p0_over_p1: float       # = e^gap
    e: float
    e_to_5: float


def softmax_example(logits: list[float] = SOFTMAX_LOGITS, shift: float = SOFTMAX_SHIFT) -> SoftmaxExample:
    """Softmax worked in numpy: e^logit, the probabilities, and the two facts the lesson states."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z)
    p = e / e.sum()
    shifted = np.exp(z + shift - (z + shift).max())  # the usual max-subtraction keeps e^102 finite
    p_shifted = shifted / shifted.sum()
    return SoftmaxExample(
        logits=z.tolist(), exp=e.tolist(), probs=p.tolist(), sum=float(p.sum()), shift=shift,
        probs_shifted=p_shifted.tolist(), shift_max_abs_difference=float(np.max(np.abs(p - p_shifted))),
        gap=float(z[0] - z[1]), p0_over_p1=float(p[0] / p[1]), e=float(np.e), e_to_5=float(np.exp(5.0)),
    )


@dataclass(frozen=True)
class TopToken:
    rank: int
    id: int
    token: str                          # spacing visible (records.shown_token)
    probability: float                  # e^logprob, a fraction
    logprob: float
    server_probability: float | None    # the server's own probability of this id; None when it did not list it


@dataclass(frozen=True)
class TopTokens:
    """One prompt's most probable next tokens, and what the server generated at temperature 0."""

    name: str
    prompt: str
    prompt_n: int
    tokens: list[TopToken]
    generated: str

    @property
    def share(self) -> float:
        """The probability the listed tokens hold together."""
        return sum(t.probability for t in self.tokens)

    @property
    def paired(self) -> int:
        return sum(t.server_probability is not None for t in self.tokens)


def top_tokens(completion: Completion, server: Completion | None = None) -> list[TopToken]:
    """The first generated position's candidates, most probable first: probability is e^logprob;
    server probability is the server's own post-sampling probability of the same token id in `server`."""
    first = completion.first_position()
    cands = sorted(first.top_logprobs or [], key=lambda c: -c.logprob)
    theirs = {c.id: c.probability for c in server.first_position().candidates()} if server is not None else {}
    return [TopToken(rank, c.id, shown_token(c.token, c.bytes), math.exp(c.logprob), c.logprob, theirs.get(c.id))
            for rank, c in enumerate(cands, start=1)]


def top_table(answers: TopAnswers) -> TopTokens:
    first = answers.logprobs.first_position()
    return TopTokens(answers.name, answers.prompt, answers.logprobs.timings.prompt_n,
                     top_tokens(answers.logprobs, answers.server), shown_token(first.token, first.bytes))


def largest_gap(tokens: list[TopToken]) -> tuple[float, float] | None:
    """Largest |server probability − e^logprob| over the tokens, absolute (as a fraction) and relative; None if no pair."""
    pairs = [(t.server_probability, t.probability) for t in tokens if t.server_probability is not None]
    if not pairs:
        return None
    return max(abs(q - p) for q, p in pairs), max(abs(q - p) / p for q, p in pairs)


def top_tokens_fact(tables: list[TopTokens]) -> dict[str, Any]:
    """The fact `top_tokens`: per table, its prompt and tokens, probabilities as fractions."""
    return {t.name: {"prompt": t.prompt,
                     "tokens": [{"rank": k.rank, "id": k.id, "token": k.token, "probability": k.probability,
                                 "logprob": k.logprob, "server_probability": k.server_probability} for k in t.tokens]}
            for t in tables}


def long_prompt_length(n_ctx: int, wanted: int = LONG_PROMPT_TOKENS, n_predict: int = N_PREDICT,
                       margin: int = CONTEXT_MARGIN) -> int:
    """The published prompt length, shortened when the server's context cannot hold it plus the decode."""
    return max(1, min(wanted, n_ctx - n_predict - margin))


@dataclass(frozen=True)
class Speeds:
    """Prefill and decode speeds from the server's timings (records: decode counts n − 1 passes)."""

    prompt_n: int           # tokens of the long prompt the server evaluated
    short_prompt_n: int
    prefill: list[float]    # tokens/s, long prompt
    decode_short: list[float]
    decode_long: list[float]

    @property
    def ratio(self) -> float:
        """Median prefill tokens/s ÷ median decode tokens/s after the short prompt."""
        return statistics.median(self.prefill) / statistics.median(self.decode_short)


def speeds(runs: TimedRuns) -> Speeds:
    return Speeds(runs.long[0].timings.prompt_n, runs.short[0].timings.prompt_n, measure.prefill_samples(runs.long),
                  measure.decode_samples(runs.short), measure.decode_samples(runs.long))


def percent(fraction: float) -> str:
    """A share as a percentage with three significant digits: 92.7%, 58.0%, 0.573%."""
    return f"{100 * fraction:.3g}%"


# --- rendering: tables and their notes ---------------------------------------------------------

def spread(samples: list[float] | tuple[float, ...]) -> list[float]:
    s = Spread.of(samples)
    return [s.median, s.min, s.max]


def show_softmax(ctx: LessonContext, sm: SoftmaxExample) -> None:
    ctx.table("softmax", f"Softmax worked on {sm.logits}",
              [("logit", ""), ("e^logit", ""), ("probability", ""), (f"probability after adding {sm.shift:g}", "")],
              [[z, e, p, q] for z, e, p, q in zip(sm.logits, sm.exp, sm.probs, sm.probs_shifted, strict=True)],
              notes=[f"The probabilities add up to {sm.sum:.15g}.",
                     f"Adding {sm.shift:g} to every logit changes them by at most {sm.shift_max_abs_difference:.1e}: only the gaps matter.",
                     (f"A gap of {sm.gap:g} between the first two logits gives p0/p1 = {sm.p0_over_p1:.6f}, and e = {sm.e:.6f}; "
                     f"a gap of 5 would be a factor of e^5 = {sm.e_to_5:.1f}.")])


def top_notes(t: TopTokens, n_vocab: int | None) -> list[str]:
    top = t.tokens[0]
    share = t.share
    gap = largest_gap(t.tokens)
    n = len(t.tokens)
    rest = f"; the other {n_vocab - n:,} vocabulary entries share the remaining {percent(1 - share)}." if n_vocab else "."
    return [f"The top {n} cover {percent(share)} of the probability" + rest,
            (f"The top token {top.token} has logprob {top.logprob:.4f}: e^{top.logprob:.4f} = {top.probability:.4g}, "
            f"that is {percent(top.probability)}."),
            f"At temperature 0 the server generated {t.generated}, "
            + ("the rank-1 token." if t.generated == top.token else "which is not the rank-1 token listed."),
            (f"Server probability: the server's own probabilities for {t.paired} of these {n} tokens, asked for "
             f"separately (temperature 1.0 alone, no cuts: the full softmax); the largest |server probability − e^logprob| "
             f"is {gap[0]:.2g} (relative: {gap[1]:.2g})." if gap else
             "Server probability: none of these tokens is among the eight the server listed with its own probabilities.")]


def show_top_tokens(ctx: LessonContext, t: TopTokens, n_vocab: int | None) -> None:
    ctx.table(t.name, f"The eight most probable next tokens after the prompt {t.prompt!r} ({t.prompt_n} tokens)",
              [("rank", ""), ("token", ""), ("probability", "%"), ("server probability", "%"), ("logprob", "")],
              [[k.rank, k.token, 100.0 * k.probability,
                100.0 * k.server_probability if k.server_probability is not None else None, k.logprob] for k in t.tokens],
              notes=top_notes(t, n_vocab))


def show_cost(ctx: LessonContext, cost: TokenWork, n_vocab: int | None) -> None:
    pub = token_work(SPECIMEN["n_params"], SPECIMEN["file_bytes"])
    ridge = published.H100["ridge_flops_per_byte"]
    intensity = cost.flops_per_byte
    ctx.table("cost_of_one_pass", "What one forward pass costs",
              [("quantity", ""), ("unit", ""), ("this model", ""), (f"published ({PUB_MODEL})", "")],
              [["parameters", "", cost.params, pub.params],
               ["bytes read (every weight once)", "bytes", cost.bytes, pub.bytes],
               ["FLOPs per token (2 per parameter)", "FLOP", cost.flops, pub.flops],
               ["FLOPs per byte read", "FLOP/byte", intensity, pub.flops_per_byte]],
              notes=[f"2 × {cost.params:,} parameters = {cost.flops:,.0f} FLOPs per token, {intensity:.2f} per byte read"
                     + (f": {ridge / intensity:.0f}× below the {ridge:g} FLOP/byte an H100 needs to keep its arithmetic "
                        "units busy (published ridge point, lesson 7), so decode waits on memory."
                        if intensity < ridge else
                        f": at or above the {ridge:g} FLOP/byte of the H100's published ridge point (lesson 7)."),
                     f"One pass ends in {n_vocab:,} logits, one per vocabulary entry; softmax turns them into the probabilities above."])


def measure_speeds(ctx: LessonContext, sp: Speeds) -> None:
    ctx.measure("prefill_tokens_per_s_long_prompt", "tokens/s", sp.prefill, higher_is_better=True, settings={"prompt_tokens": sp.prompt_n})
    ctx.measure("decode_tokens_per_s_short_prompt", "tokens/s", sp.decode_short, higher_is_better=True,
                settings={"prompt_tokens": sp.short_prompt_n, "n_predict": N_PREDICT})
    ctx.measure("decode_tokens_per_s_long_prompt", "tokens/s", sp.decode_long, higher_is_better=True,
                settings={"prompt_tokens": sp.prompt_n, "n_predict": N_PREDICT})
    ctx.measure("prefill_decode_ratio", "×", [sp.ratio], higher_is_better=None,
                description="median prefill tokens/s ÷ median decode tokens/s after the short prompt")


def ratio_note(sp: Speeds, batching: dict[str, Any]) -> str:
    pub_ratio = PUB["prefill_decode_ratio"]
    if sp.ratio <= 1:
        return (f"Prefill processed the prompt at {sp.ratio:.2f}× the per-token speed of decode: slower, not faster "
                f"(published: about {pub_ratio:.0f}× faster).")
    reads = formulas.prefill_weight_reads(sp.prompt_n, batching["n_ubatch"])
    return (f"Prefill processed the prompt {sp.ratio:.1f}× faster per token than decode produced new tokens "
            f"(published: about {pub_ratio:.0f}× faster): prefill multiplies the weights by micro-batches "
            f"of up to n_ubatch = {batching['n_ubatch']:,} tokens ({batching['source']}), so it read every "
            f"weight ceil({sp.prompt_n:,} ÷ {batching['n_ubatch']:,}) = {reads} time(s) for {sp.prompt_n:,} tokens, "
            f"about {sp.prompt_n / reads:,.0f} tokens per read; decode reads every weight again for each token.")


def long_note(sp: Speeds) -> str:
    short, long = sp.decode_short, sp.decode_long
    text = (f"Decode after the long prompt ran at {statistics.median(long) / statistics.median(short):.1%} of its speed "
            f"after the short one (published: {PUB['decode_long_tokens_per_s'] / PUB['decode_short_tokens_per_s']:.1%})")
    if max(long) < min(short):
        return text + ("; every sample was slower than every short-prompt sample, beyond the spread: the weights are the "
                       "same, but each new token's attention reads the keys and values of every earlier position (lesson 6).")
    if min(long) > max(short):
        return text + "; every sample was faster than every short-prompt sample: the longer context did not slow decode measurably here."
    return text + (f"; the samples overlap ({min(long):,.1f}–{max(long):,.1f} against "
                   f"{min(short):,.1f}–{max(short):,.1f} tokens/s), so the difference is within the spread.")


def show_prefill_decode(ctx: LessonContext, sp: Speeds, runs: TimedRuns, cost: TokenWork | None) -> None:
    batching = formulas.batch_sizes(ctx.identity.get("server", {}).get("flags"))
    p_med, d_med = statistics.median(sp.prefill), statistics.median(sp.decode_short)
    pub_prefill = ", ".join(f"{v:,.0f}" for v in PUB["prefill_tokens_per_s"])
    notes = [ratio_note(sp, batching), long_note(sp),
             (f"Each request decoded {N_PREDICT} tokens at temperature 0 with end-of-text ignored, cache_prompt false; "
             f"decode speed counts the {N_PREDICT - 1} passes after the first token, whose time belongs to the prompt. "
             f"The context holds {runs.n_ctx:,} tokens; the long prompt is {runs.n_long:,} of them.")]
    if cost is not None:
        notes.append(f"Counting two FLOPs per parameter, prefill did {p_med * cost.flops / 1e9:,.2f} GFLOP/s of weight arithmetic "
                     f"and decode {d_med * cost.flops / 1e9:,.2f} GFLOP/s: the same weights, used for many tokens at once "
                     "or one at a time.")
    ctx.table("prefill_vs_decode", f"Prefill of a {sp.prompt_n:,}-token prompt versus decode, from the server's timings",
              [("phase", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), ("samples", ""), (f"published ({PUB_HOST})", "")],
              [[f"prefill, {sp.prompt_n:,}-token prompt", "tokens/s", *spread(sp.prefill), len(sp.prefill), pub_prefill],
               [f"decode after the short prompt ({sp.short_prompt_n} tokens)", "tokens/s", *spread(sp.decode_short),
                len(sp.decode_short), PUB["decode_short_tokens_per_s"]],
               [f"decode after the {sp.prompt_n:,}-token prompt", "tokens/s", *spread(sp.decode_long), len(sp.decode_long),
                PUB["decode_long_tokens_per_s"]],
               ["prefill per token ÷ decode (short prompt)", "×", sp.ratio, min(sp.prefill) / max(sp.decode_short),
                max(sp.prefill) / min(sp.decode_short), None, PUB["prefill_decode_ratio"]]],
              notes=notes)


def measure_ceiling(ctx: LessonContext, ceil: Ceiling, eff: Efficiency, threads: int) -> None:
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


def show_decode_vs_ceiling(ctx: LessonContext, ceil: Ceiling, eff: Efficiency, inputs: BandwidthInputs) -> None:
    per_token = ceil.bytes_per_token
    reason = inputs.facts["reason"]
    spark_bw, pub_bytes = published.SPARK_BANDWIDTH_GB_PER_S, SPECIMEN["file_bytes"]
    pub_ceiling, pub_decode, pub_eff = PUB["ceiling_tokens_per_s"], PUB["decode_short_tokens_per_s"], PUB["decode_efficiency_percent"]
    rows = [["read bandwidth, CPU of this host", "GB/s", *spread(ceil.bandwidth_gbs), spark_bw],
            ["bytes read per token (every weight once)", "bytes", per_token, per_token, per_token, pub_bytes],
            ["ceiling, CPU of this host: bandwidth ÷ bytes per token", "tokens/s", *spread(ceil.ceilings), pub_ceiling],
            ["decode after the short prompt", "tokens/s", *spread(eff.decode), pub_decode]]
    notes = []
    if eff.host is not None:
        effs = eff.host
        median_eff = statistics.median(effs)
        rows.append(["decode ÷ ceiling, CPU of this host", "%", *spread(effs), pub_eff])
        notes.append(f"Decode ran at {statistics.median(eff.decode):,.1f} tokens/s, {median_eff:.3g}% of the "
                     f"{ceil.median:,.1f} tokens/s that "
                     f"{ceil.bandwidth.median:,.1f} GB/s allows for {per_token / formulas.GB:.4g} GB per token "
                     f"(samples: {min(effs):.3g}–{max(effs):.3g}%); {reason}.")
        if median_eff > 100:
            notes.append(f"Decode beat the ceiling: the server runs on this CPU, and {per_token / hostbench.MiB:.1f} MiB of "
                         "weights is small enough for part of it to stay in the CPU caches, which are faster than the "
                         "memory the bandwidth test streams from.")
    else:
        notes.append(f"This host's CPU memory bandwidth does not bound this server's decode: {reason}. The CPU "
                     "rows are for reference only; decode ÷ ceiling is "
                     + ("computed against --bandwidth-gbs only." if ceil.given_gbs else
                        "not computed (pass --bandwidth-gbs with the bandwidth of the memory that feeds decode)."))
    if ceil.given_ceiling is not None and eff.given is not None:
        g, geffs = ceil.given_ceiling, eff.given
        rows.append([f"ceiling at {ceil.given_gbs:g} GB/s (--bandwidth-gbs)", "tokens/s", g, g, g, pub_ceiling])
        rows.append([f"decode ÷ ceiling at {ceil.given_gbs:g} GB/s", "%", *spread(geffs), pub_eff])
        notes.append(f"At the given {ceil.given_gbs:g} GB/s (--bandwidth-gbs) the ceiling is {g:,.1f} tokens/s, and decode "
                     f"reached {statistics.median(geffs):.3g}% of it (samples: {min(geffs):.3g}–{max(geffs):.3g}%).")
    notes.append(f"Published ({PUB_HOST}, {PUB_MODEL}): {spark_bw:g} GB/s ÷ {pub_bytes / formulas.GB:g} GB = "
                 f"{ceiling.ceiling_at(spark_bw, pub_bytes):.1f} tokens/s (published: about "
                 f"{pub_ceiling:.0f}); {pub_decode:g} ÷ {pub_ceiling:.0f} = {100 * pub_decode / pub_ceiling:.0f}% "
                 f"(published: {pub_eff:.0f}%). Those figures assume {spark_bw:g} GB/s; compare with them through --bandwidth-gbs.")
    notes.append(f"Bandwidth: {hostbench.describe_reading(inputs.reading)}; ceilings come from each sample.")
    ctx.table("decode_vs_ceiling", "Decode against the bandwidth ceiling of lesson 1",
              [("quantity", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), (f"published ({PUB_HOST})", "")],
              rows, notes=notes)


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    repeat = max(2, ctx.repeat)  # at least two runs of each timed request, as published
    info = ctx.model_info()
    n_vocab = info["hyperparameters"]["n_vocab"] if info else None

    # 1. Softmax: scores become probabilities (worked here, on every run and replay).
    ctx.step("softmax")
    show_softmax(ctx, softmax_example())

    # 2. The eight most probable next tokens of the four prompts, beside the server's own probabilities.
    tables = [top_table(answers) for answers in ask_top_tokens(ctx)]
    for t in tables:
        show_top_tokens(ctx, t, n_vocab)
    ctx.fact("top_tokens", top_tokens_fact(tables))

    # 3. What one forward pass costs: every weight read once, two FLOPs per weight.
    cost = token_work(info["n_params"], formulas.bytes_per_token(info)) if info is not None else None
    if cost is not None:
        show_cost(ctx, cost, n_vocab)

    # 4. Prefill and decode, from the server's timings.
    ctx.step("prefill and decode")
    runs = time_prefill_and_decode(ctx, repeat)
    sp = speeds(runs)
    measure_speeds(ctx, sp)
    show_prefill_decode(ctx, sp, runs, cost)

    # 5. Decode against the bandwidth ceiling of lesson 1 (bytesup.ceiling).
    ctx.step("read bandwidth")
    if cost is None:
        ctx.note("The model file is not readable here (pass --model PATH.gguf), so the bandwidth ceiling and "
                 "the cost of one pass are not computed.")
        return ctx.finish()
    inputs = bandwidth_inputs(ctx)
    ceil = ceiling.bandwidth_ceiling(cost.bytes, inputs.reading["gb_per_s"]["samples"],
                                     host_applies=bool(inputs.facts["host_bandwidth_applies"]), given_gbs=inputs.given_gbs)
    eff = ceiling.decode_efficiency(ceil, sp.decode_short)
    measure_ceiling(ctx, ceil, eff, inputs.reading["threads"])
    show_decode_vs_ceiling(ctx, ceil, eff, inputs)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
