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
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import Field, field_validator

from bytesup.course import ceiling
from bytesup.course import formulas
from bytesup.models import forward
from bytesup.host import hostbench
from bytesup.llama import build as nativebuild
from bytesup.llama import timed as measure
from bytesup.models import catalog as models
from bytesup.course import published
from bytesup.models import smollm2 as realmodel
from bytesup.course.ceiling import Ceiling, Efficiency, Spread, TokenWork, token_work
from bytesup.llama.responses import Completion, shown_token
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns
from bytesup.store.facts import lesson04 as stated
from bytesup.lesson import LessonContext, ModelQuery
from bytesup.options import BandwidthGbs, LessonOptions

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
# The published long prompt's length.
LONG_PROMPT_TOKENS: int = published.LESSON4["long_prompt_tokens"]
N_PREDICT = 32                    # tokens decoded per timed request
BENCH_REPETITIONS = 1             # llama-bench's repetitions at each of its three turns: three samples a phase
CONTEXT_MARGIN = 16               # tokens of context left free beyond prompt + n_predict

# The numpy pass is set against the server a second time on the default model's weights in float32, where the
# server rounds no activations; that server holds only the four short prompts.
F32_WIDTH = "smollm2-135m-f32"
NARROWER_WIDTHS = {m.sha256 for m in realmodel.REAL_MODELS.values() if m.name != F32_WIDTH}
F32_SERVER = ["-c", "256", "--parallel", "1"]
TOP_K = 8                         # tokens compared per prompt, as the server lists them
SIGNIFICANT = 6                   # digits kept of numpy's figures (a replay on another CPU may differ further down)

# What ggml's CPU kernels round the activations to before a dot product with weights of each type (the
# vec_dot_type of type_traits_cpu in ggml-cpu.c); numpy keeps float32 throughout.
ACTIVATIONS_ROUNDED_TO = {"Q4_0": "Q8_0 (8 bits)", "Q4_1": "Q8_1 (8 bits)", "Q5_0": "Q8_0 (8 bits)", "Q5_1": "Q8_1 (8 bits)",
                          "Q8_0": "Q8_0 (8 bits)", "F16": "float16", "BF16": "bfloat16", "F32": None}

# Published figures (bytesup.course.published: lesson 4 on the DGX Spark, its specimen model, lesson 7's
# H100 ridge point). References only: every comparison with them is computed.
PUB: published.Lesson4Figures = published.LESSON4
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


def lesson_prompts(ctx: LessonContext) -> list[tuple[str, str]]:
    """The published four, then the prompts given with --prompt, in order (tables top8_prompt_1, top8_prompt_2, …)."""
    return PROMPTS + [(f"top8_prompt_{k}", text) for k, text in enumerate(ctx.options.prompts or [], start=1)]


def ask_top_tokens(ctx: LessonContext, prompts: list[tuple[str, str]]) -> list[TopAnswers]:
    return [TopAnswers(name, prompt, ctx.server.completion(prompt, **TOP8), ctx.server.completion(prompt, **SERVER_PROBS))
            for name, prompt in ctx.track(prompts, "top eight next tokens")]


def numpy_plan(ctx: LessonContext) -> dict[str, Any]:
    """The files the numpy pass reads, by path and sha256: the served GGUF and, when it is one of the default
    model's narrower widths, its f32 width (fetched or derived here the first time)."""
    served = ctx.readable_model()
    plan: dict[str, Any] = {"served": ctx.file_record(served) if served is not None else None, "f32": None}
    if plan["served"] is not None and plan["served"]["sha256"] in NARROWER_WIDTHS:
        plan["f32"] = ctx.file_record(models.ensure_model(F32_WIDTH))
    return plan


@dataclass(frozen=True)
class NumpyAsked:
    """What the numpy pass needs from servers: each prompt's token ids, and the f32 width's top eight."""

    ids: list[list[int]]
    f32: list[Completion] | None


def ask_for_the_numpy_pass(ctx: LessonContext, plan: dict[str, Any], prompts: list[str]) -> NumpyAsked:
    # The server's own tokenizer, with the special tokens a /completion prompt gets (add_special).
    ids = [ctx.server.tokenize(prompt, with_pieces=False, add_special=True).ids for prompt in prompts]
    f32 = None
    if plan["f32"] is not None:
        ctx.step("the f32 width's top eight")
        with ctx.local_server("f32", Path(plan["f32"]["path"]), F32_SERVER) as server:
            f32 = [server.completion(prompt, **TOP8) for prompt in prompts]
    return NumpyAsked(ids, f32)


@dataclass(frozen=True)
class TimedRuns:
    n_ctx: int
    n_long: int                    # tokens of the long prompt asked for
    long: list[Completion]
    short: list[Completion]
    in_process: list[dict[str, Any]] | None = None  # llama-bench before, between and after (None: not asked here)


def time_prefill_and_decode(ctx: LessonContext, repeat: int) -> TimedRuns:
    """`repeat` completions of N_PREDICT tokens after a long prompt (as long as the context allows)
    and after the short one, pinned as measure.PINNED says."""
    n_ctx = measure.context_size(ctx.server)
    n_long = long_prompt_length(n_ctx)
    long_ids = measure.long_prompt_tokens(ctx.server, n_long)
    ctx.settings = {"top8": TOP8, "server_probabilities": SERVER_PROBS, "timed": {**measure.PINNED, "n_predict": N_PREDICT},
                    "short_prompt": SHORT_PROMPT, "long_prompt_tokens": n_long, "n_ctx": n_ctx, "repeat": repeat}
    # A third clock, llama.cpp in process, interleaved with the timed requests: before, between and after them.
    bench: list[dict[str, Any] | None] = [llama_bench(ctx, "before", n_long)]
    long_runs = measure.timed_completions(ctx.server, long_ids, N_PREDICT, repeat, track=lambda r: ctx.track(r, "long prompt"))
    bench.append(llama_bench(ctx, "between", n_long))
    short_runs = measure.timed_completions(ctx.server, SHORT_PROMPT, N_PREDICT, repeat, track=lambda r: ctx.track(r, "short prompt"))
    bench.append(llama_bench(ctx, "after", n_long))
    turns = [b for b in bench if b is not None]
    return TimedRuns(n_ctx, n_long, long_runs, short_runs, turns if len(turns) == len(bench) else None)


def llama_bench(ctx: LessonContext, when: str, n_prompt: int) -> dict[str, Any] | None:
    """The native build's llama-bench on the served model, with the server's threads and the lesson's lengths
    (`-p` the long prompt, `-n` N_PREDICT), BENCH_REPETITIONS times: a host value. A run recorded before this
    clock existed gives None, and the lesson shows nothing of it, as that run did."""
    if not ctx.recorded(f"llama_bench_{when}"):
        return None

    def run() -> dict[str, Any]:
        model = ctx.readable_model()
        if model is None or not ctx.server_facts()["local"]:
            return {"available": False, "why": "the server is not on this host, or its model file is not readable here"}
        _, bin_dir, why = nativebuild.usable_build()
        if bin_dir is None:
            return {"available": False, "why": why}
        try:
            # llama-bench's own warm-up at its first turn only: the file is read and the code paths are warm after it.
            speeds = nativebuild.bench(bin_dir, model, n_prompt, N_PREDICT, ctx.server_threads(), BENCH_REPETITIONS,
                                       warmup=when == "before")
        except nativebuild.NativeBuildError as exc:
            return {"available": False, "why": str(exc)}
        return {"available": True, "threads": ctx.server_threads(), **speeds}

    return ctx.host(f"llama_bench_{when}", run)


@dataclass(frozen=True)
class BandwidthInputs:
    """The run's bandwidth reading, where the server decodes, and the bandwidth given with --bandwidth-gbs."""

    reading: dict[str, Any]
    facts: dict[str, Any]
    given_gbs: float | None


def bandwidth_inputs(ctx: LessonContext) -> BandwidthInputs:
    facts = ctx.server_facts()
    reading = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 6, 7 and 8
    return BandwidthInputs(reading, facts, ctx.options.bandwidth_gbs)


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


@dataclass(frozen=True)
class SoftmaxRow:
    logit: float = column("logit")
    exp: float = column("e^logit")
    probability: float = column("probability")
    shifted: float = column(f"probability after adding {SOFTMAX_SHIFT:g}")


def softmax_rows(sm: SoftmaxExample) -> list[SoftmaxRow]:
    return [SoftmaxRow(z, e, p, q) for z, e, p, q in zip(sm.logits, sm.exp, sm.probs, sm.probs_shifted, strict=True)]


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


@dataclass(frozen=True)
class TopRow:
    rank: int = column("rank")
    token: str = column("token")
    probability: float = column("probability", "%")
    server_probability: float | None = column("server probability", "%")
    logprob: float = column("logprob")


def top_row(k: TopToken) -> TopRow:
    return TopRow(k.rank, k.token, 100.0 * k.probability,
                  100.0 * k.server_probability if k.server_probability is not None else None, k.logprob)


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


def top_tokens_fact(tables: list[TopTokens]) -> stated.TopTokens:
    """The fact `top_tokens`: per table, its prompt and tokens, probabilities as fractions."""
    return stated.TopTokens({t.name: stated.ShownTable(
        prompt=t.prompt, tokens=[stated.ShownToken(rank=k.rank, id=k.id, token=k.token, probability=k.probability,
                                                   logprob=k.logprob, server_probability=k.server_probability)
                                 for k in t.tokens]) for t in tables})


def sig(x: float, digits: int = SIGNIFICANT) -> float:
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class NumpyToken:
    rank: int
    id: int
    token: str                         # from the file's own vocabulary, spacing visible
    probability: float                 # numpy's
    server_probability: float | None   # e^logprob when the server listed this id among its eight


@dataclass(frozen=True)
class Agreement:
    """One prompt's numpy pass against the server's top eight."""

    name: str
    prompt: str
    n_tokens: int
    server_top: TopToken
    numpy: list[NumpyToken]
    set_agrees: bool                   # the same eight ids, in any order
    shared: int                        # ids both list
    largest_dp: float                  # largest |numpy − server| over the server's eight
    largest_dp_at: TopToken
    largest_dp_numpy: float
    kl_shared: float                   # KL(server ‖ numpy) over the shared ids, each renormalized over them
    at_server_ids: dict[int, float]    # numpy's probability of each of the server's eight
    largest_abs_logit: float           # numpy's largest |logit| (bytesup check sizes its f32 tolerance with it)

    @property
    def top_agrees(self) -> bool:
        return self.numpy[0].id == self.server_top.id


def agreement(name: str, prompt: str, server: list[TopToken], done: forward.Pass, shown: Callable[[int], str],
              k: int = TOP_K) -> Agreement:
    """Numpy's k most probable tokens beside the server's, with the largest gap and the KL divergence where both list."""
    probs = done.probs
    order = [int(i) for i in np.argsort(-probs, kind="stable")[:k]]
    theirs = {t.id: t.probability for t in server}
    ours = [NumpyToken(r, i, shown(i), sig(float(probs[i])), theirs.get(i)) for r, i in enumerate(order, start=1)]
    worst = max(server, key=lambda t: abs(float(probs[t.id]) - t.probability))
    both = [t for t in server if t.id in set(order)]
    p = np.array([t.probability for t in both])
    q = np.array([float(probs[t.id]) for t in both])
    p, q = p / p.sum(), q / q.sum()
    return Agreement(name, prompt, len(done.tokens), server[0], ours, set(order) == set(theirs), len(both),
                     sig(abs(float(probs[worst.id]) - worst.probability)), worst, sig(float(probs[worst.id])),
                     sig(float(np.sum(p * np.log(p / q)))), {t.id: sig(float(probs[t.id])) for t in server},
                     sig(float(np.max(np.abs(done.logits)))))


@dataclass(frozen=True)
class AgreementRow:
    prompt: str = column("prompt")
    tokens: int = column("tokens")
    server_top: str = column("server's top token")
    server: float = column("server", "%")
    numpy_top: str = column("numpy's top token")
    numpy: float = column("numpy", "%")
    same_top: bool = column("same top token")
    same_eight: bool = column("same top eight")
    largest_dp: float = column("largest |Δp|", "points")
    at: str = column("at")
    kl_shared: float = column("KL over the shared tokens", "nats")
    shared: int = column("shared")


def agreement_row(a: Agreement) -> AgreementRow:
    return AgreementRow(repr(a.prompt), a.n_tokens, a.server_top.token, 100 * a.server_top.probability, a.numpy[0].token,
                        100 * a.numpy[0].probability, a.top_agrees, a.set_agrees, 100 * a.largest_dp, a.largest_dp_at.token,
                        a.kl_shared, a.shared)


@dataclass(frozen=True)
class NumpyTopRow:
    rank: int = column("rank")
    token: str = column("token")
    numpy: float = column("numpy", "%")
    server: float | None = column("server", "%")
    difference: float | None = column("numpy − server", "points")


def numpy_top_row(t: NumpyToken) -> NumpyTopRow:
    return NumpyTopRow(t.rank, t.token, 100 * t.probability, 100 * t.server_probability if t.server_probability is not None else None,
                       100 * (t.probability - t.server_probability) if t.server_probability is not None else None)


@dataclass(frozen=True)
class LastOnly:
    """Lines 4 and 5 for every position against the last alone (lesson 4's "keep only the last position")."""

    name: str
    n_tokens: int
    n_vocab: int
    n_embd: int
    max_abs_logit_difference: float   # the last row of all N against the last position alone
    same_top: bool

    @property
    def flops_all(self) -> int:
        return self.n_tokens * 2 * self.n_vocab * self.n_embd

    @property
    def flops_last(self) -> int:
        return 2 * self.n_vocab * self.n_embd

    @property
    def flops_saved(self) -> int:
        """(N − 1) × 2 × vocabulary × width."""
        return self.flops_all - self.flops_last


@dataclass(frozen=True)
class LastOnlyRow:
    prompt: str = column("prompt")
    tokens: int = column("tokens N")
    largest: float = column("largest |Δlogit|")
    same_top: bool = column("same top token")
    flops_all: int = column("FLOPs, all N positions", "FLOP")
    flops_last: int = column("FLOPs, the last alone", "FLOP")
    flops_saved: int = column("saved: (N − 1) × 2 × vocabulary × width", "FLOP")


def last_only_row(x: LastOnly, prompt: str) -> LastOnlyRow:
    return LastOnlyRow(repr(prompt), x.n_tokens, x.max_abs_logit_difference, x.same_top, x.flops_all, x.flops_last,
                       x.flops_saved)


def last_only(model: forward.Model, name: str, done: forward.Pass) -> LastOnly:
    every = model.logits(done.hidden)  # (N, vocabulary): the final norm and the output matrix on every position
    return LastOnly(name, len(done.tokens), model.hp.n_vocab, model.hp.n_embd,
                    sig(float(np.max(np.abs(every[-1] - done.logits)))), int(np.argmax(every[-1])) == int(np.argmax(done.logits)))


@dataclass(frozen=True)
class ThroughTheLayers:
    """The final top token's rank and probability when the final norm and output read the last position after each block."""

    name: str
    token_id: int
    token: str
    ranks: list[int]
    probabilities: list[float]

    @property
    def on_top_from(self) -> int | None:
        """The first block after which the token ranks first at every later block (1-based); None if never."""
        first = None
        for b, rank in enumerate(self.ranks, start=1):
            first = (first or b) if rank == 1 else None
        return first


def through_the_layers(model: forward.Model, name: str, done: forward.Pass, shown: Callable[[int], str]) -> ThroughTheLayers:
    logits = model.logits(done.last_after_block).astype(np.float64)  # (blocks, vocabulary)
    top = int(np.argmax(done.probs))
    ranks = 1 + np.sum(logits > logits[:, [top]], axis=1)
    probs = forward.softmax(logits, axis=-1)[:, top]
    return ThroughTheLayers(name, top, shown(top), [int(r) for r in ranks], [sig(float(p)) for p in probs])


@dataclass(frozen=True)
class NumpyPass:
    """The numpy pass over one file, against one server's answers."""

    file: str
    weight_type: str
    agreements: list[Agreement]
    last: list[LastOnly]
    layers: list[ThroughTheLayers]
    probs: list[np.ndarray]


def numpy_pass(path: Path, names: list[tuple[str, str]], ids: list[list[int]], server: list[list[TopToken]]) -> NumpyPass:
    """Lesson 4's fifteen lines in numpy on every prompt, then the comparisons with the server."""
    model = forward.Model(path)
    passes = forward.forward(model, ids)

    def shown(token_id: int) -> str:
        return shown_token("", list(model.token_bytes(token_id)))

    return NumpyPass(
        file=path.name, weight_type=model.file.type_name("blk.0.attn_q.weight"),
        agreements=[agreement(n, p, s, d, shown) for (n, p), s, d in zip(names, server, passes, strict=True)],
        last=[last_only(model, n, d) for (n, _), d in zip(names, passes, strict=True)],
        layers=[through_the_layers(model, n, d, shown) for (n, _), d in zip(names, passes, strict=True)],
        probs=[d.probs for d in passes])


def numpy_fact(done: NumpyPass | None, f32: NumpyPass | None, why_not: str | None) -> stated.NumpyPass:
    """The fact `numpy_pass`: per prompt and file, whether numpy's top token and top eight are the server's, and the gaps."""
    def one(n: NumpyPass) -> stated.FilePass:
        return stated.FilePass(file=n.file, weight_type=n.weight_type, prompts={a.name: stated.PromptAgreement(
            numpy_top_id=a.numpy[0].id, server_top_id=a.server_top.id, top_agrees=a.top_agrees, set_agrees=a.set_agrees,
            largest_abs_dp=a.largest_dp, kl_shared=a.kl_shared, shared=a.shared,
            probabilities_of_server_ids={str(i): v for i, v in a.at_server_ids.items()},
            largest_abs_logit=a.largest_abs_logit) for a in n.agreements})
    return stated.NumpyPass(recomputed=done is not None, why_not=why_not, served=one(done) if done else None,
                            f32=one(f32) if f32 else None)


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


@dataclass(frozen=True)
class ThirdClock:
    """One phase's speed from the server's timings against llama-bench's, in process: the ratio of the medians,
    the range the ratio spans over every pair of samples, and the samples that would resolve it."""

    phase: str
    server: tuple[float, ...]
    bench: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return statistics.median(self.server) / statistics.median(self.bench)

    @property
    def low(self) -> float:
        return min(self.server) / max(self.bench)

    @property
    def high(self) -> float:
        return max(self.server) / min(self.bench)

    @property
    def inside_noise(self) -> bool:
        """The two sets of samples overlap: every ratio from low to high is as likely, 1 among them."""
        return self.low <= 1.0 <= self.high

    @property
    def relative_spread(self) -> float:
        """The wider of the two sets' (max − min) ÷ median."""
        return max((max(s) - min(s)) / statistics.median(s) for s in (self.server, self.bench))

    def samples_needed(self) -> int | None:
        """Samples of each clock for the medians' difference to stand clear of the noise: the spread of a median
        falls about as 1/√n, so n ≥ (2 × relative spread ÷ |ratio − 1|)²; None when the ratio is exactly 1."""
        gap = abs(self.ratio - 1.0)
        return None if gap == 0 else max(1, math.ceil((2 * self.relative_spread / gap) ** 2))


def third_clocks(runs: TimedRuns, sp: "Speeds") -> list[ThirdClock] | None:
    """Server-timed prefill and decode against llama-bench's, when llama-bench ran at every turn."""
    turns = runs.in_process
    if not turns or not all(t.get("available") for t in turns):
        return None
    prefill = tuple(x for t in turns for x in t["prefill_tokens_per_s"])
    decode = tuple(x for t in turns for x in t["decode_tokens_per_s"])
    return [ThirdClock(f"prefill, {sp.prompt_n:,}-token prompt", tuple(sp.prefill), prefill),
            ThirdClock(f"decode, {N_PREDICT} tokens", tuple(sp.decode_short), decode)]


def percent(fraction: float) -> str:
    """A share as a percentage with three significant digits: 92.7%, 58.0%, 0.573%."""
    return f"{100 * fraction:.3g}%"


def median_min_max(samples: list[float] | tuple[float, ...]) -> tuple[float, float, float]:
    s = Spread.of(samples)
    return s.median, s.min, s.max


@dataclass(frozen=True)
class QuantityRow:
    quantity: str = column("quantity")
    unit: str = column("unit")
    this_model: float = column("this model")
    pub: float = column(f"published ({PUB_MODEL})")


def cost_quantities(cost: TokenWork) -> list[QuantityRow]:
    """One pass of this model beside the published specimen's."""
    pub = token_work(SPECIMEN["n_params"], SPECIMEN["file_bytes"])
    return [QuantityRow("parameters", "", cost.params, pub.params),
            QuantityRow("bytes read (every weight once)", "bytes", cost.bytes, pub.bytes),
            QuantityRow("FLOPs per token (2 per parameter)", "FLOP", cost.flops, pub.flops),
            QuantityRow("FLOPs per byte read", "FLOP/byte", cost.flops_per_byte, pub.flops_per_byte)]


@dataclass(frozen=True)
class PhaseRow:
    phase: str = column("phase")
    unit: str = column("unit")
    median: float = column("median")
    min: float = column("min")
    max: float = column("max")
    samples: int | None = column("samples")
    pub: float | str = column(f"published ({PUB_HOST})")


def phase_rows(sp: Speeds) -> list[PhaseRow]:
    pub_prefill = ", ".join(f"{v:,.0f}" for v in PUB["prefill_tokens_per_s"])
    return [PhaseRow(f"prefill, {sp.prompt_n:,}-token prompt", "tokens/s", *median_min_max(sp.prefill), len(sp.prefill),
                     pub_prefill),
            PhaseRow(f"decode after the short prompt ({sp.short_prompt_n} tokens)", "tokens/s",
                     *median_min_max(sp.decode_short), len(sp.decode_short), PUB["decode_short_tokens_per_s"]),
            PhaseRow(f"decode after the {sp.prompt_n:,}-token prompt", "tokens/s", *median_min_max(sp.decode_long),
                     len(sp.decode_long), PUB["decode_long_tokens_per_s"]),
            PhaseRow("prefill per token ÷ decode (short prompt)", "×", sp.ratio, min(sp.prefill) / max(sp.decode_short),
                     max(sp.prefill) / min(sp.decode_short), None, PUB["prefill_decode_ratio"])]


@dataclass(frozen=True)
class ClockRow:
    phase: str = column("phase")
    server_median: float = column("server median", "tokens/s")
    server_min: float = column("server min", "tokens/s")
    server_max: float = column("server max", "tokens/s")
    bench_median: float = column("llama-bench median", "tokens/s")
    bench_min: float = column("llama-bench min", "tokens/s")
    bench_max: float = column("llama-bench max", "tokens/s")
    ratio: float = column("server ÷ llama-bench", "×")
    low: float = column("ratio low", "×")
    high: float = column("ratio high", "×")
    verdict: str = column("verdict")
    samples_needed: int | None = column("samples needed")


def clock_row(c: ThirdClock) -> ClockRow:
    return ClockRow(c.phase, *median_min_max(list(c.server)), *median_min_max(list(c.bench)), c.ratio, c.low, c.high,
                    "inside the noise" if c.inside_noise else "outside the noise", c.samples_needed())


@dataclass(frozen=True)
class CeilingRow:
    quantity: str = column("quantity")
    unit: str = column("unit")
    median: float = column("median")
    min: float = column("min")
    max: float = column("max")
    pub: float = column(f"published ({PUB_HOST})")


def ceiling_rows(ceil: Ceiling, eff: Efficiency) -> list[CeilingRow]:
    """Bandwidth, bytes per token, the ceiling and decode, beside the published figures; the efficiencies where
    they are computed (this host's where its bandwidth bounds decode, and at --bandwidth-gbs)."""
    per_token = ceil.bytes_per_token
    pub_ceiling, pub_eff = PUB["ceiling_tokens_per_s"], PUB["decode_efficiency_percent"]
    rows = [CeilingRow("read bandwidth, CPU of this host", "GB/s", *median_min_max(ceil.bandwidth_gbs),
                       published.SPARK_BANDWIDTH_GB_PER_S),
            CeilingRow("bytes read per token (every weight once)", "bytes", per_token, per_token, per_token,
                       SPECIMEN["file_bytes"]),
            CeilingRow("ceiling, CPU of this host: bandwidth ÷ bytes per token", "tokens/s", *median_min_max(ceil.ceilings),
                       pub_ceiling),
            CeilingRow("decode after the short prompt", "tokens/s", *median_min_max(eff.decode), PUB["decode_short_tokens_per_s"])]
    if eff.host is not None:
        rows.append(CeilingRow("decode ÷ ceiling, CPU of this host", "%", *median_min_max(eff.host), pub_eff))
    if ceil.given_ceiling is not None and eff.given is not None:
        g = ceil.given_ceiling
        rows.append(CeilingRow(f"ceiling at {ceil.given_gbs:g} GB/s (--bandwidth-gbs)", "tokens/s", g, g, g, pub_ceiling))
        rows.append(CeilingRow(f"decode ÷ ceiling at {ceil.given_gbs:g} GB/s", "%", *median_min_max(eff.given), pub_eff))
    return rows


# --- rendering: tables and their notes ---------------------------------------------------------

def show_softmax(ctx: LessonContext, sm: SoftmaxExample) -> None:
    ctx.table("softmax", f"Softmax worked on {sm.logits}",
              columns(SoftmaxRow), cells(softmax_rows(sm)),
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
              columns(TopRow), cells([top_row(k) for k in t.tokens]),
              notes=top_notes(t, n_vocab))


def show_numpy_vs_server(ctx: LessonContext, name: str, n: NumpyPass, server_label: str, prompt_n: list[int],
                         more_notes: tuple[str, ...] = ()) -> None:
    agree, sets, k = sum(a.top_agrees for a in n.agreements), sum(a.set_agrees for a in n.agreements), len(n.agreements)
    worst = max(n.agreements, key=lambda a: a.largest_dp)
    notes = [(f"numpy ran lesson 4's fifteen lines on the bytes of {n.file} ({n.weight_type} weights): each tensor "
             "dequantized with gguf when its block runs, the token ids from the server's /tokenize."),
             f"The top token agrees on {agree} of {k} prompts, the top-eight set on {sets} of {k}.",
             (f"The largest |Δp| over the server's eight is {worst.largest_dp:.2g}, at {worst.largest_dp_at.token} after "
              f"{worst.prompt!r}: numpy {100 * worst.largest_dp_numpy:.4g}% against the server's "
              f"{100 * worst.largest_dp_at.probability:.4g}%."),
             ("KL over the shared tokens is KL(server ‖ numpy) = Σ p·ln(p/q) over the ids both list, each side "
              "renormalized over them: 0 when they split their share alike.")]
    notes += [f"The server evaluated {pn} tokens for {a.prompt!r}, /tokenize gave {a.n_tokens}."
              for a, pn in zip(n.agreements, prompt_n, strict=True) if pn != a.n_tokens]
    notes += more_notes
    ctx.table(name, f"The same forward pass in numpy, from the file's bytes, against {server_label}",
              columns(AgreementRow), cells([agreement_row(a) for a in n.agreements]), notes=notes)


def show_numpy_top8(ctx: LessonContext, a: Agreement) -> None:
    ctx.table(f"numpy_{a.name}", f"numpy's eight most probable next tokens after {a.prompt!r}, beside the server's",
              columns(NumpyTopRow), cells([numpy_top_row(t) for t in a.numpy]),
              notes=[(f"{sum(t.server_probability is not None for t in a.numpy)} of numpy's eight are among the server's eight; "
                     f"numpy's eight hold {percent(sum(t.probability for t in a.numpy))} of its probability.")])


def rounding_notes(served: NumpyPass, f32: NumpyPass) -> tuple[str, ...]:
    """Where the gap comes from: the same weights at two widths, against the server on each."""
    gap_served = max(a.largest_dp for a in served.agreements)
    gap_f32 = max(a.largest_dp for a in f32.agreements)
    same = max(float(np.max(np.abs(p - q))) for p, q in zip(served.probs, f32.probs, strict=True))
    rounded = ACTIVATIONS_ROUNDED_TO.get(served.weight_type)
    notes = [(f"numpy gives the same probabilities on {served.file} and {f32.file} (largest difference {same:.2g}): the f32 "
             "file holds exactly the dequantized values of the narrower one."),
             f"Against the server, the largest |Δp| is {gap_served:.2g} on {served.file} and {gap_f32:.2g} on {f32.file}"
             + (f", {gap_served / gap_f32:.0f}× smaller." if gap_f32 > 0 and gap_served > gap_f32 else ".")]
    if rounded:
        notes.append(f"On {served.weight_type} weights the engine's CPU kernels round each activation vector to {rounded} before "
                     "its dot products with the weights; on F32 weights they keep float32 activations, as numpy does. "
                     f"What is left on {f32.file} comes from float32 sums taken in another order and the f16 KV cache.")
    return tuple(notes)


def show_last_only(ctx: LessonContext, last: list[LastOnly], prompts: dict[str, str]) -> None:
    first = last[0]
    spec_v, spec_d = SPECIMEN["n_vocab"], SPECIMEN["n_embd"]
    ctx.table("last_position_only", "Keep only the last position: the final norm and the output matrix on all N positions or on the last",
              columns(LastOnlyRow), cells([last_only_row(x, prompts[x.name]) for x in last]),
              notes=[(f"Lines 4 and 5 read one position's vector and make {first.n_vocab:,} logits with a {first.n_vocab:,} × "
                      f"{first.n_embd:,} matvec: 2 × {first.n_vocab:,} × {first.n_embd:,} = {first.flops_last:,} FLOPs per position."),
                     (f"The last row of the all-positions product differs from the last position alone by at most "
                      f"{max(x.max_abs_logit_difference for x in last):.2g} in any logit (the two products add in another "
                      "order): the same answer, with the other N − 1 rows thrown away."),
                     (f"For {PUB_MODEL} (vocabulary {spec_v:,}, width {spec_d:,}) each position left out saves "
                      f"2 × {spec_v:,} × {spec_d:,} = {2 * spec_v * spec_d:,} FLOPs.")])


def show_through_the_layers(ctx: LessonContext, layers: list[ThroughTheLayers], prompts: dict[str, str]) -> None:
    n_blocks = len(layers[0].ranks)
    columns = [("block", "")]
    for t in layers:
        columns += [(f"rank of {t.token}", ""), (f"p of {t.token}", "%")]
    rows = [[b + 1, *[v for t in layers for v in (t.ranks[b], 100 * t.probabilities[b])]] for b in range(n_blocks)]
    notes = []
    for t in layers:
        start = t.on_top_from
        notes.append(f"After {prompts[t.name]!r}, {t.token} "
                     + ("ranks first only after the last block" if start == n_blocks else
                        f"ranks first from block {start} of {n_blocks} on" if start else "never ranks first")
                     + f"; its probability is {percent(t.probabilities[0])} after block 1 and "
                     f"{percent(t.probabilities[-1])} after block {n_blocks}.")
    notes.append("Each row applies the final norm and the output matrix (lines 4 and 5) to the last position as it "
                 "leaves that block; the last row is the pass's own answer.")
    ctx.table("answer_through_the_layers", "The answer through the layers: the final top token's rank and probability after each block",
              columns, rows, notes=notes)
    ctx.plot("answer_through_the_layers", "The final top token's probability after each block", "block", "probability (%)",
             [Series(label=f"{t.token} after {prompts[t.name]!r}", x=[float(b + 1) for b in range(n_blocks)],
                     y=[100 * p for p in t.probabilities]) for t in layers], log_y=True)


def the_pass_in_numpy(ctx: LessonContext, tables: list[TopTokens]) -> None:
    """Lesson 4's fifteen lines in numpy on the file's bytes, set against the server's tables (bytesup.models.forward)."""
    plan = ctx.host_since("numpy_plan", lambda: numpy_plan(ctx))
    if plan is None:
        ctx.note("This run was recorded before lesson 4 computed the forward pass in numpy, so it is not recomputed here.")
        return
    if plan["served"] is None:
        return not_computed(ctx, "The model file is not readable here (pass --model PATH.gguf), so the forward pass is "
                                 "not computed in numpy.")
    names = [(t.name, t.prompt) for t in tables]
    asked = ask_for_the_numpy_pass(ctx, plan, [prompt for _, prompt in names])
    served = ctx.file_with(plan["served"])
    if served is None:
        return not_computed(ctx, ctx.file_not_here(plan["served"], "The numpy pass"))
    done = numpy_pass(served, names, asked.ids, [t.tokens for t in tables])
    show_numpy_vs_server(ctx, "numpy_vs_server", done, "the server", [t.prompt_n for t in tables])
    for a in done.agreements:
        show_numpy_top8(ctx, a)
    f32 = None
    if asked.f32 is not None:
        f32_path = ctx.file_with(plan["f32"])
        if f32_path is None:
            ctx.note(ctx.file_not_here(plan["f32"], "The numpy pass"))
        else:
            f32 = numpy_pass(f32_path, names, asked.ids, [top_tokens(c) for c in asked.f32])
            show_numpy_vs_server(ctx, "numpy_vs_server_f32", f32, f"a server on the f32 width ({f32.file})",
                                 [c.timings.prompt_n for c in asked.f32], rounding_notes(done, f32))
    show_last_only(ctx, done.last, dict(names))
    show_through_the_layers(ctx, done.layers, dict(names))
    ctx.fact(numpy_fact(done, f32, None))


def not_computed(ctx: LessonContext, why: str) -> None:
    ctx.note(why)
    ctx.fact(numpy_fact(None, None, why))


def show_cost(ctx: LessonContext, cost: TokenWork, n_vocab: int | None) -> None:
    ridge = published.H100["ridge_flops_per_byte"]
    intensity = cost.flops_per_byte
    ctx.table("cost_of_one_pass", "What one forward pass costs", columns(QuantityRow), cells(cost_quantities(cost)),
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
    notes = [ratio_note(sp, batching), long_note(sp),
             (f"Each request decoded {N_PREDICT} tokens at temperature 0 with end-of-text ignored, cache_prompt false; "
             f"decode speed counts the {N_PREDICT - 1} passes after the first token, whose time belongs to the prompt. "
             f"The context holds {runs.n_ctx:,} tokens; the long prompt is {runs.n_long:,} of them.")]
    if cost is not None:
        notes.append(f"Counting two FLOPs per parameter, prefill did {p_med * cost.flops / 1e9:,.2f} GFLOP/s of weight arithmetic "
                     f"and decode {d_med * cost.flops / 1e9:,.2f} GFLOP/s: the same weights, used for many tokens at once "
                     "or one at a time.")
    ctx.table("prefill_vs_decode", f"Prefill of a {sp.prompt_n:,}-token prompt versus decode, from the server's timings",
              columns(PhaseRow), cells(phase_rows(sp)), notes=notes)


def show_third_clock(ctx: LessonContext, runs: TimedRuns, clocks: list[ThirdClock] | None) -> None:
    """The server's timings beside llama.cpp in process (llama-bench), or one line on how to get it."""
    if runs.in_process is None:
        return  # a run recorded before this clock: shown as it was
    if clocks is None:
        why = next((t.get("why") for t in runs.in_process if not t.get("available")), "")
        ctx.note(f"llama-bench, llama.cpp in process, was not run beside the server ({why}); `bash "
                 f"{nativebuild.BUILD_SCRIPT}` builds it once, and the next run sets it beside the server's timings.")
        return
    threads = runs.in_process[0].get("threads")
    ctx.table("third_clock", "Three clocks: the server's timings beside llama.cpp in process (llama-bench)",
              columns(ClockRow), cells([clock_row(c) for c in clocks]),
              notes=[(f"llama-bench ran {BENCH_REPETITIONS} repetition{'s' if BENCH_REPETITIONS > 1 else ''} before (after "
                      "its own warm-up run), between and after the timed requests "
                     f"({len(clocks[0].bench)} samples a phase), on the same file with {threads} threads, `-p` the long "
                     f"prompt's length and `-n {N_PREDICT}`: no HTTP, no slot, no sampling. Its build is the native one "
                     "(scripts/build_llama_server.sh), which may not be the server's engine."),
                     ("A ratio is inside the noise when the samples overlap: some pair of them gives 1. The samples "
                     "needed are each clock's for the medians' difference to stand clear of the spread seen here "
                     "(n ≥ (2 × relative spread ÷ |ratio − 1|)², as a median's spread falls about as 1/√n).")])


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
    notes = []
    if eff.host is not None:
        effs = eff.host
        median_eff = statistics.median(effs)
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
        notes.append(f"At the given {ceil.given_gbs:g} GB/s (--bandwidth-gbs) the ceiling is {g:,.1f} tokens/s, and decode "
                     f"reached {statistics.median(geffs):.3g}% of it (samples: {min(geffs):.3g}–{max(geffs):.3g}%).")
    notes.append(f"Published ({PUB_HOST}, {PUB_MODEL}): {spark_bw:g} GB/s ÷ {pub_bytes / formulas.GB:g} GB = "
                 f"{ceiling.ceiling_at(spark_bw, pub_bytes):.1f} tokens/s (published: about "
                 f"{pub_ceiling:.0f}); {pub_decode:g} ÷ {pub_ceiling:.0f} = {100 * pub_decode / pub_ceiling:.0f}% "
                 f"(published: {pub_eff:.0f}%). Those figures assume {spark_bw:g} GB/s; compare with them through --bandwidth-gbs.")
    notes.append(f"Bandwidth: {hostbench.describe_reading(inputs.reading)}; ceilings come from each sample.")
    ctx.table("decode_vs_ceiling", "Decode against the bandwidth ceiling of lesson 1",
              columns(CeilingRow), cells(ceiling_rows(ceil, eff)), notes=notes)


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    repeat = max(2, ctx.repeat)  # at least two runs of each timed request, as published
    info = ctx.model_info()
    n_vocab = info["hyperparameters"]["n_vocab"] if info else None

    # 1. Softmax: scores become probabilities (worked here, on every run and replay).
    ctx.step("softmax")
    show_softmax(ctx, softmax_example())

    # 2. The eight most probable next tokens of the four prompts (and any given with --prompt), beside the
    #    server's own probabilities.
    tables = [top_table(answers) for answers in ask_top_tokens(ctx, lesson_prompts(ctx))]
    for t in tables:
        show_top_tokens(ctx, t, n_vocab)
    ctx.fact(top_tokens_fact(tables))

    # 3. The same pass in numpy from the file's bytes: its top eight beside the server's, on this file and the
    #    f32 width; keeping only the last position; the answer through the layers.
    ctx.step("the forward pass in numpy")
    the_pass_in_numpy(ctx, tables)

    # 4. What one forward pass costs: every weight read once, two FLOPs per weight.
    cost = token_work(info["n_params"], formulas.bytes_per_token(info)) if info is not None else None
    if cost is not None:
        show_cost(ctx, cost, n_vocab)

    # 5. Prefill and decode, from the server's timings, beside llama.cpp in process (llama-bench).
    ctx.step("prefill and decode")
    runs = time_prefill_and_decode(ctx, repeat)
    sp = speeds(runs)
    measure_speeds(ctx, sp)
    show_prefill_decode(ctx, sp, runs, cost)
    show_third_clock(ctx, runs, third_clocks(runs, sp))

    # 6. Decode against the bandwidth ceiling of lesson 1 (bytesup.course.ceiling).
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
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)


def models_needed(query: ModelQuery) -> list[str]:
    """The models a live run makes before its first lesson for this one: the f32 width, where the served model is
    one of the default model's narrower widths (numpy_plan's rule)."""
    return [F32_WIDTH] if query.served_sha256 in NARROWER_WIDTHS else []
