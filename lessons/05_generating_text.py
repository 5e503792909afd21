"""Lesson 5 — Generating text

A forward pass gives one probability per vocabulary entry; text comes from a loop: pick one token,
append it, run the model again. This script makes the loop visible (n generated tokens, n passes,
counted by the server's own /metrics), applies greedy, temperature, top-k and top-p to a real
next-token distribution with the numpy re-implementations in `bytesup.course.sampling`, and checks them
against the probabilities the server itself keeps after its sampler chain. It shows that a seeded
sampler repeats itself, fits total time = time to first token + time per output token × (n − 1)
from one length and predicts the others, watches the loop from outside (a streamed generation
timed token by token on the client's clock, beside the server's own timings), and ends with
speculative decoding measured on servers
it starts itself: the f32 model alone, with a draft (its own weights in q4_1 and q8_0) at two draft
lengths, and with llama.cpp's draft-free n-gram speculation; each beside the arithmetic
1 + a + … + a^k and a speed-up predicted from the measured cost of each model's pass.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import contextlib
import functools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bytesup.course import clientclock
from bytesup.llama import process as engine
from bytesup.course import formulas
from bytesup.llama import timed as measure
from bytesup.models import catalog as models
from bytesup.course import published
from bytesup.course import sampling
from bytesup.llama.client import clock_info
from bytesup.errors import BytesupError
from bytesup.models.gguf import read_model_info
from bytesup.llama.responses import (
    Completion,
    StreamedCompletion,
    Timings,
    TokenProbabilities,
    decode_ms_per_token,
    decode_passes,
    shown_token,
)
from bytesup.store.results import Series
from bytesup.lesson import LessonContext

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


@dataclass(frozen=True)
class SamplerSetting:
    """A sampler chain: its label, the server's `samplers` order and their settings."""
    label: str
    samplers: tuple[str, ...]
    params: dict[str, float]

    @property
    def chain(self) -> str:
        return " → ".join(self.samplers)

    def steps(self) -> list[tuple[str, float]]:
        return [(name, self.params[name]) for name in self.samplers]


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
# Speculative decoding, measured on servers this script starts (on this host, like lessons 7 and 8).
# The target is the real model at its widest; the drafts are the same weights quantized.
SPEC_TARGETS = ("smollm2-135m-f32",)     # "smollm2-135m-f16" adds a second width (about 15 s more)
SPEC_DRAFTS = ("smollm2-135m-q4_1", "smollm2-135m-q8_0")
SPEC_DRAFT_LENGTHS = (4, 8)              # --spec-draft-n-max
SPEC_TOKENS = 64                         # tokens per request: a few seconds each on 2 cores
SPEC_REPEAT = 2                          # repeats per configuration at most (fewer with a lower --repeat)
SPEC_CTX = 512                           # context of each server: the longest prompt plus SPEC_TOKENS fit
SPEC_PROMPT = "The capital of France is"
# ngram-simple drafts from the text itself: it looks the last 12 tokens up earlier in the context and
# copies what followed (up to 48 tokens, llama.cpp's defaults). A text that repeats with a period of
# a few dozen tokens gives it something to find.
SPEC_REPETITIVE_PROMPT = ("Row, row, row your boat, gently down the stream. "
                          "Merrily, merrily, merrily, merrily, life is but a dream.\n") * 3
NGRAM_DRAFT_MAX = 48                     # ngram-simple's m-gram: the most it drafts at once
FORMULA_AGREES = 0.05                    # measured tokens per pass within 5% of 1 + a + … + a^k: "agrees"
# Used only when no speculative server can be started here: the arithmetic on illustrative numbers.
SPEC_DRAFT = 4
SPEC_ACCEPT = (0.6, 0.8)
# The podcast's sequential-floor example (bytesup.course.published).
PODCAST_PASS_MS = published.PODCAST_SEQUENTIAL_FLOOR["pass_ms"]
PODCAST_TOKENS = published.PODCAST_SEQUENTIAL_FLOOR["tokens"]
PODCAST_FLOOR_S = published.PODCAST_SEQUENTIAL_FLOOR["floor_s"]


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
        n_ask = asked_candidates(dist, a)
        checks.append(check_setting(dist, a, request_post_sampling(ctx, a.setting, n_ask) if n_ask else None))
    render_check(ctx, dist, applied, checks)
    ctx.fact("sampler_comparisons", [c.fact() for c in checks])

    # A seeded sampler repeats itself.
    ctx.step("seeded sampling")
    render_seeded(ctx, [SeededRun(i, seed, repr(done.content), done.tokens)
                        for i, (seed, done) in enumerate(zip(SEEDS, request_seeded(ctx), strict=True), start=1)])

    # Total time ≈ time to first token + time per output token × (n − 1), fitted at one length.
    ctx.step("fitting the latency model")
    fit = request_timed(ctx, FIT_N)
    model = latency_fit(fit)
    rows = [latency_row(model, n, fit if n == FIT_N else request_timed(ctx, n), n == FIT_N) for n in sorted({FIT_N, *PREDICT_N})]
    render_latency(ctx, model, fit, rows)

    # The same loop seen from outside: each token streamed and timed on arrival, beside the server's timings.
    # (A run recorded before the lesson streamed replays without this part.)
    if ctx.recorded("client_clock"):
        ctx.step(f"streaming {STREAM_TOKENS} tokens, each timed on arrival")
        clock = ctx.host("client_clock", clock_info)
        render_outside(ctx, clock, outside_view(request_streamed(ctx)))

    # Speculative decoding, on servers of our own.
    speculative(ctx, model)
    return ctx.finish()


def speculative(ctx: LessonContext, model: "LatencyFit") -> None:
    """The f32 target alone, with each draft at each draft length, and with n-gram speculation."""
    facts = ctx.server_facts()
    if not facts["local"]:
        ctx.note(f"Speculative decoding was not measured: it needs servers this script starts on this host, and "
                 f"{facts['reason']}.")
        render_speculative_illustration(ctx, model)
        return
    support = ctx.host("speculation_support", engine.speculation_support)
    if not support["supported"]:
        ctx.note(f"Speculative decoding was not measured: the {support['engine']} engine here cannot speculate "
                 f"({support['reason']}). Run this lesson with an engine that can (a llama-server build whose "
                 f"--help lists --spec-type, through LLAMA_SERVER) to measure it.")
        render_speculative_illustration(ctx, model)
        return
    repeat = min(SPEC_REPEAT, ctx.repeat)
    ctx.step("speculative decoding: the models (derived from the default model once)")
    spec_models = {n: ctx.host(f"spec_model_{n}", functools.partial(spec_model, n)) for n in (*SPEC_TARGETS, *SPEC_DRAFTS)}
    configs = spec_configs()
    # A run recorded before the lesson streamed replays without the streamed requests.
    done, streamed = request_spec_rounds(ctx, spec_servers(spec_models, configs), repeat, ctx.recorded("client_clock"))
    plain = {(n, p): done[(f"spec-{n}", p)] for n in (*SPEC_TARGETS, *SPEC_DRAFTS)
             for p in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT) if (f"spec-{n}", p) in done}

    # The cost of one pass of each model alone, and of the target's batched prompt passes.
    costs = [model_cost(name, spec_models[name], plain[(name, SPEC_PROMPT)]) for name in (*SPEC_TARGETS, *SPEC_DRAFTS)]
    batches = {name: prompt_passes(plain, name) for name in SPEC_TARGETS}
    render_spec_costs(ctx, costs, batches[SPEC_TARGETS[0]])

    # Every configuration measured, and the arithmetic beside it.
    ms = {c.name: c.ms_per_token for c in costs}
    plain_rows = [plain_run(name, prompt, plain[(name, prompt)]) for name in SPEC_TARGETS
                  for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT)]
    spec_rows = [spec_run(cfg, done[(cfg.label, cfg.prompt)], plain[(cfg.target, cfg.prompt)]) for cfg in configs]
    arithmetic = [spec_arithmetic(r, ms, batches[r.config.target]) for r in spec_rows]
    ctx.settings["speculative"] = {
        "n_predict": SPEC_TOKENS, "repeat": repeat, "temperature": 0, "seed": SEED, "ctx_size": SPEC_CTX,
        "prompts": {"short": SPEC_PROMPT, "repetitive": SPEC_REPETITIVE_PROMPT},
        "engine": support, "runs": [r.record() for r in plain_rows] + [r.record() for r in spec_rows],
    }
    render_spec_measured(ctx, repeat, plain_rows, spec_rows)
    render_spec_arithmetic(ctx, arithmetic)

    # How speculation looks from outside: one streamed request per configuration, timed on the client's clock.
    if streamed:
        render_spec_client_clock(ctx, [spec_stream(label, prompt, done_s, streamed) for (label, prompt), done_s in streamed.items()])


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


def spec_model(name: str) -> dict[str, Any]:
    """A course model's file (fetched or derived the first time) and its bytes per token (a host value)."""
    path = models.ensure_model(name)
    info = read_model_info(path)
    return {"name": name, "path": str(path), "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info.get("file_type") or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def spec_flags(spec_type: str, draft: str | None = None, n_max: int | None = None) -> list[str]:
    """llama-server's flags for one configuration (the same on the embedded engine)."""
    flags = ["--spec-type", spec_type]
    if draft is not None:
        flags += ["--spec-draft-model", draft]
    if n_max is not None:
        flags += ["--spec-draft-n-max", str(n_max)]
    return flags


@dataclass(frozen=True)
class SpecConfig:
    """One speculative configuration: a target with a draft model at a draft length, or with n-grams."""
    target: str
    spec_type: str
    draft: str | None
    draft_n_max: int | None
    prompt: str

    @property
    def label(self) -> str:
        return f"spec-{self.target}-draft-{self.draft}-k{self.draft_n_max}" if self.draft else f"spec-{self.target}-{self.spec_type}"

    @property
    def prompt_name(self) -> str:
        return PROMPT_NAMES[self.prompt]


PROMPT_NAMES = {SPEC_PROMPT: "short", SPEC_REPETITIVE_PROMPT: "repetitive"}


def spec_configs() -> list[SpecConfig]:
    configs = []
    for target in SPEC_TARGETS:
        configs += [SpecConfig(target, "draft-simple", draft, k, SPEC_PROMPT) for draft in SPEC_DRAFTS for k in SPEC_DRAFT_LENGTHS]
        configs.append(SpecConfig(target, "ngram-simple", None, None, SPEC_REPETITIVE_PROMPT))
    return configs


@dataclass(frozen=True)
class SpecServer:
    label: str
    model: dict[str, Any]
    flags: list[str]
    prompts: list[str]


def spec_servers(spec_models: dict[str, dict[str, Any]], configs: list[SpecConfig]) -> list[SpecServer]:
    """Each model alone (its decode speed is the cost of one of its passes; a target on both prompts),
    then one server per speculative configuration."""
    servers = [SpecServer(f"spec-{n}", spec_models[n], [], [SPEC_PROMPT, SPEC_REPETITIVE_PROMPT] if n in SPEC_TARGETS else [SPEC_PROMPT])
               for n in (*SPEC_TARGETS, *SPEC_DRAFTS)]
    for cfg in configs:
        draft_path = spec_models[cfg.draft]["path"] if cfg.draft else None
        servers.append(SpecServer(cfg.label, spec_models[cfg.target], spec_flags(cfg.spec_type, draft_path, cfg.draft_n_max),
                                  [cfg.prompt]))
    return servers


def request_spec_rounds(ctx: LessonContext, servers: list[SpecServer], repeat: int, stream: bool
                        ) -> tuple[dict[tuple[str, str], list[Completion]], dict[tuple[str, str], StreamedCompletion]]:
    """Greedy completions on servers of our own, all started first, then asked in turn, one round
    after another: a change in the machine's load while we measure falls on every configuration
    alike instead of on whichever ran at that moment. With `stream`, then one streamed request more
    on each target's server (the drafts alone are left out), for the client's clock."""
    with contextlib.ExitStack() as stack:
        clients = {}
        for s in servers:
            ctx.step(f"speculative decoding: starting {s.label}")
            clients[s.label] = stack.enter_context(
                ctx.local_server(s.label, Path(s.model["path"]), ["-c", str(SPEC_CTX), "--parallel", "1", *s.flags]))
        done: dict[tuple[str, str], list[Completion]] = {}
        ctx.step("speculative decoding: every configuration in turn")
        for _ in ctx.track(range(repeat), "rounds over every configuration"):
            for s in servers:
                for prompt in s.prompts:
                    # measure.PINNED: temperature 0 and a fixed seed, so every configuration must give the same text.
                    done.setdefault((s.label, prompt), []).extend(measure.timed_completions(
                        clients[s.label], prompt, SPEC_TOKENS, 1, seed=SEED, return_tokens=True))
        streamed: dict[tuple[str, str], StreamedCompletion] = {}
        drafts_alone = {f"spec-{n}" for n in SPEC_DRAFTS}
        for s in (s for s in servers if stream and s.label not in drafts_alone):
            ctx.step(f"speculative decoding: streaming on {s.label}")
            for prompt in s.prompts:
                streamed[(s.label, prompt)] = measure.streamed_completions(clients[s.label], prompt, SPEC_TOKENS, 1, seed=SEED)[0]
        return done, streamed


# --- computation: typed results from the answers ------------------------------------------------

@dataclass(frozen=True)
class LoopStep:
    """One pass of the loop: the token it produced and that token's probability."""
    pass_no: int
    token: str
    id: int
    probability: float | None

    def cells(self) -> list[Any]:
        return [self.pass_no, self.token, self.id, self.probability]


def loop_steps(done: Completion) -> list[LoopStep]:
    return [LoopStep(i, shown_token(step.token, step.bytes), step.id,
                     math.exp(step.logprob) if step.logprob is not None else None)
            for i, step in enumerate(done.completion_probabilities, start=1)]


@dataclass(frozen=True)
class CounterDelta:
    name: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    def cells(self) -> list[Any]:
        return [self.name, self.before, self.after, self.delta]


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> list[CounterDelta]:
    """llama.cpp's *_total counters read before and after, in the order the server lists them."""
    return [CounterDelta(name, before[name], after[name]) for name in before
            if name.startswith("llamacpp:") and name.endswith("_total") and name in after]


def decode_calls_note(n_decode: float, predicted_n: int, prompt_n: int) -> str:
    """What the rise of n_decode_total (llama_decode calls) says about passes, from the counts alone.

    After the first token every further token needs its own pass, so predicted_n − 1 calls are
    decode; whatever is left over went to the prompt (the last of those calls also gives the first token).
    """
    later = max(predicted_n - 1, 0)
    prompt_calls = n_decode - later
    head = f"n_decode_total (calls of llama_decode) rose by {n_decode:g} for {predicted_n} tokens"
    if prompt_calls == 1:
        return (f"{head}: one pass per token. The {prompt_n}-token prompt went through in one pass that also gave "
                f"the first token, then {later} passes of one token each.")
    if prompt_calls > 1:
        return (f"{head}: {later} passes for the tokens after the first leave {prompt_calls:g} for the "
                f"{prompt_n}-token prompt: the server split it into batches, one pass each, the last giving the first token.")
    return (f"{head}: fewer calls than the {later + 1} a one-token-per-pass loop needs, so some pass produced more "
            "than one token.")


@dataclass(frozen=True)
class Distribution:
    """The listed candidates of the full softmax, most probable first."""
    ids: list[int]
    probs: np.ndarray
    texts: list[str]
    asked: list[int]                  # n_probs of each reference request
    n_vocab: int | None

    @property
    def complete(self) -> bool:
        """The whole vocabulary is listed."""
        return self.n_vocab is not None and len(self.ids) >= self.n_vocab

    @property
    def total(self) -> float | None:
        """The whole distribution's mass for the samplers: None when it is all listed, else 1."""
        return None if self.complete else 1.0

    @property
    def listed_mass(self) -> float:
        return float(self.probs.sum())


def needs_more(probs: list[float], settings: list[SamplerSetting]) -> bool:
    """Whether some chain that cuts (not temperature alone) keeps tokens beyond the listed candidates."""
    for s in settings:
        if s.samplers == ("temperature",):
            continue
        try:
            sampling.apply_chain(probs, s.steps(), total=1.0)
        except sampling.IncompleteDistribution:
            return True
    return False


@dataclass(frozen=True)
class Applied:
    """A sampler chain applied in numpy to the listed candidates (ours None: not exactly computable)."""
    setting: SamplerSetting
    ours: np.ndarray | None
    kept: list[int] = field(default_factory=list)   # candidate positions kept, most probable first
    probs_kept: float = 0.0                          # original probability of the kept candidates
    top_before: float | None = None                  # the most probable kept token's probability, before
    top_after: float | None = None                   # and after the chain
    top_token: str | None = None

    @property
    def kept_percent(self) -> float | None:
        return None if self.ours is None else 100 * float(self.probs_kept)


def apply_setting(dist: Distribution, setting: SamplerSetting) -> Applied:
    try:
        ours = sampling.apply_chain(dist.probs, setting.steps(), total=dist.total)
    except sampling.IncompleteDistribution:
        return Applied(setting, None)
    kept = [int(i) for i in sampling.kept_indices(ours)]
    top = kept[0]
    return Applied(setting, ours, kept, probs_kept=float(dist.probs[kept].sum()), top_before=float(dist.probs[top]),
                   top_after=float(ours[top]), top_token=dist.texts[top])


def comparison_target(dist: Distribution, a: Applied) -> tuple[np.ndarray | None, bool]:
    """Our probabilities to compare with the server's, and whether relatively: temperature alone on a
    partial list keeps every token, so its normalizer is unknown and only ratios can be compared."""
    if a.ours is None and a.setting.samplers == ("temperature",):
        return sampling.apply_chain(dist.probs, a.setting.steps()), True
    return a.ours, False


def asked_candidates(dist: Distribution, a: Applied) -> int | None:
    """n_probs of the post-sampling request: one more than we keep, so a shorter list is the server's whole
    kept set (at most MAX_POST_PROBS); None when the setting cannot be checked."""
    ours, relative = comparison_target(dist, a)
    if ours is None:
        return None
    return min(MAX_POST_PROBS, len(dist.ids)) if relative else min(int(np.count_nonzero(ours)) + 1, MAX_POST_PROBS)


@dataclass(frozen=True)
class Comparison:
    """Our kept probabilities against the server's listed ones."""
    kept_ours: int | None             # None in relative mode
    kept_server: int | None           # None when the server's list was cut at n_probs
    listed: int
    server_listed_all: bool
    same_set: bool
    max_abs: float
    max_rel: float
    sampled_in_kept: bool
    agree: bool


def compare_with_server(ref_ids: list[int], ours: np.ndarray, server: list[tuple[int, float]],
                        n_asked: int, sampled_id: int, relative: bool = False) -> Comparison:
    """Our kept probabilities (aligned with ref_ids) against the server's listed (id, p).

    The server lists its kept candidates, most probable first, at most `n_asked` of them: if it
    lists fewer, that is its whole kept set. `relative`: both sides are renormalized over the
    listed tokens first (for a temperature-only chain on a partial reference list).
    """
    pos = {tid: i for i, tid in enumerate(ref_ids)}
    kept_ids = [ref_ids[i] for i in sampling.kept_indices(ours)]
    listed = [tid for tid, _ in server]
    complete = len(server) < n_asked
    missing = [tid for tid in listed if tid not in pos or ours[pos[tid]] <= 0]
    ours_p = np.array([ours[pos[tid]] if tid in pos else 0.0 for tid in listed])
    q = np.array([p for _, p in server])
    if relative and ours_p.sum() > 0:
        ours_p, q = ours_p / ours_p.sum(), q / q.sum()
    delta = np.abs(ours_p - q)
    rel = delta / np.where(q > 0, q, np.inf)
    same = (set(listed) == set(kept_ids)) if complete else (set(listed) == set(kept_ids[:len(listed)]))
    same = bool(same and not missing)
    max_rel = float(rel.max()) if rel.size else math.nan
    # relative mode knows only part of the reference, so a drawn token outside it is not a miss
    drawn_ok = sampled_id in set(kept_ids) or (relative and sampled_id not in pos)
    return Comparison(kept_ours=None if relative else len(kept_ids), kept_server=len(listed) if complete else None,
                      listed=len(listed), server_listed_all=complete, same_set=same,
                      max_abs=float(delta.max()) if delta.size else math.nan, max_rel=max_rel,
                      sampled_in_kept=drawn_ok, agree=same and drawn_ok and max_rel <= REL_TOL)


@dataclass(frozen=True)
class SamplerCheck:
    """One setting checked against the server (cmp None: not checked)."""
    setting: SamplerSetting
    cmp: Comparison | None = None
    relative: bool = False
    drawn: str | None = None          # the token the server drew
    edge: float | None = None         # our smallest kept probability (where the server listed part of the set)

    @property
    def verdict(self) -> str:
        if self.cmp is None:
            return "not checked"
        return ("agree" if self.cmp.agree else "mismatch") + (" (relative)" if self.relative else "")

    def cells(self) -> list[Any]:
        c = self.cmp
        if c is None:
            return [self.setting.label, self.setting.chain, None, None, None, None, None, None, None, None, REL_TOL, self.verdict]
        return [self.setting.label, self.setting.chain, c.kept_ours, c.kept_server, c.listed, c.same_set, self.drawn,
                c.sampled_in_kept, c.max_abs, c.max_rel, REL_TOL, self.verdict]

    def fact(self) -> dict[str, Any]:
        c = self.cmp
        rel = None if c is None or math.isnan(c.max_rel) else c.max_rel
        return {"name": self.setting.label, "max_relative_difference": rel, "tolerance": REL_TOL,
                "same_tokens": None if c is None else c.same_set}


def check_setting(dist: Distribution, a: Applied, step: TokenProbabilities | None) -> SamplerCheck:
    """Our chain against the server's answer to the same chain (step None: not asked)."""
    ours, relative = comparison_target(dist, a)
    if ours is None or step is None:
        return SamplerCheck(a.setting)
    n_ask = asked_candidates(dist, a)
    assert n_ask is not None
    cmp = compare_with_server(dist.ids, ours, [(c.id, c.probability) for c in step.candidates()], n_ask, step.id, relative=relative)
    partial = cmp.kept_server is None and cmp.kept_ours is not None and cmp.kept_ours > 1
    edge = float(np.min(a.ours[a.ours > 0])) if partial and a.ours is not None else None
    return SamplerCheck(a.setting, cmp, relative, shown_token(step.token, step.bytes), edge)


@dataclass(frozen=True)
class SeededRun:
    run: int
    seed: int
    text: str                         # repr of the content
    tokens: list[int]

    def cells(self) -> list[Any]:
        return [self.run, self.seed, self.text, self.tokens]


@dataclass(frozen=True)
class LatencyFit:
    """Time to first token and time per output token, medians over the fit's repeats."""
    ttft_samples: list[float]         # prompt_ms
    tpot_samples: list[float]         # predicted_ms ÷ (predicted_n − 1)

    @property
    def ttft(self) -> float:
        return statistics.median(self.ttft_samples)

    @property
    def tpot(self) -> float:
        return statistics.median(self.tpot_samples)

    def predict(self, n: int) -> float:
        return latency_prediction(self.ttft, self.tpot, n)


def latency_prediction(ttft_ms: float, tpot_ms: float, n: int) -> float:
    """Total time ≈ time to first token + time per output token × (n − 1)."""
    return ttft_ms + tpot_ms * (n - 1)


def latency_fit(fit: list[Completion]) -> LatencyFit:
    return LatencyFit([c.timings.prompt_ms for c in fit], [decode_ms_per_token(c.timings) for c in fit])


@dataclass(frozen=True)
class LatencyRow:
    n: int
    fitted: bool                      # the length the model was fitted at
    predicted: float
    totals: list[float]               # prompt_ms + predicted_ms per repeat
    predicted_n: list[int]

    @property
    def measured(self) -> float:
        return statistics.median(self.totals)

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted - self.measured) / self.measured

    @property
    def errors_pct(self) -> list[float]:
        return [100 * (self.predicted - m) / m for m in self.totals]

    def cells(self) -> list[Any]:
        return [self.n, "fit" if self.fitted else "predicted", self.predicted, self.measured, min(self.totals),
                max(self.totals), self.error_pct, self.predicted_n]


def latency_row(model: LatencyFit, n: int, runs: list[Completion], fitted: bool) -> LatencyRow:
    return LatencyRow(n, fitted, model.predict(n), [c.timings.prompt_ms + c.timings.predicted_ms for c in runs],
                      [c.timings.predicted_n for c in runs])


@dataclass(frozen=True)
class StreamedRepeat:
    """One streamed generation on both clocks: the client's arrival times and the server's timings."""
    repeat: int
    client: clientclock.ClientTimes
    timings: Timings
    token_events: int                 # events that brought tokens

    @property
    def server_total_ms(self) -> float:
        return self.timings.prompt_ms + self.timings.predicted_ms

    @property
    def per_token_ms(self) -> float:
        return decode_ms_per_token(self.timings)

    @property
    def ttft_gap_ms(self) -> float:
        return self.client.ttft_ms - self.timings.prompt_ms

    @property
    def overhead_ms(self) -> float:
        """End-to-end on the client minus the server's own prompt_ms + predicted_ms."""
        return self.client.end_to_end_ms - self.server_total_ms

    @property
    def floor_ms(self) -> float:
        return clientclock.sequential_floor_ms(self.client.n, min(self.client.itl_ms))

    def fact(self) -> dict[str, Any]:
        t = self.timings
        return {"ttft_ms": self.client.ttft_ms, "prompt_ms": t.prompt_ms, "token_events": self.token_events,
                "tokens": self.client.n, "predicted_n": t.predicted_n, "itl_median_ms": statistics.median(self.client.itl_ms),
                "predicted_per_token_ms": self.per_token_ms, "end_to_end_ms": self.client.end_to_end_ms,
                "server_total_ms": self.server_total_ms}

    def cells(self) -> list[Any]:
        c, t = self.client, self.timings
        return [self.repeat, self.token_events, t.predicted_n, c.ttft_ms, t.prompt_ms, self.ttft_gap_ms,
                statistics.median(c.itl_ms), self.per_token_ms, c.end_to_end_ms, self.server_total_ms, self.overhead_ms,
                c.in_order and c.separate, min(c.itl_ms), self.floor_ms]


@dataclass(frozen=True)
class OutsideView:
    """The repeats of the streamed generation, and their gaps pooled."""
    repeats: list[StreamedRepeat]

    @property
    def client(self) -> clientclock.Summary:
        return clientclock.summarize([r.client for r in self.repeats])

    @property
    def prompt_ms(self) -> float:
        return statistics.median(r.timings.prompt_ms for r in self.repeats)

    @property
    def per_token_ms(self) -> float:
        """The server's time per token over every repeat, as the client's gaps are pooled:
        Σ predicted_ms ÷ Σ (predicted_n − 1)."""
        return (sum(r.timings.predicted_ms for r in self.repeats)
                / sum(decode_passes(r.timings) for r in self.repeats))

    @property
    def server_total_ms(self) -> float:
        return statistics.median(r.server_total_ms for r in self.repeats)


def outside_view(done: list[StreamedCompletion]) -> OutsideView:
    return OutsideView([StreamedRepeat(i, clientclock.client_times(s.arrivals(), s.ended_ms), s.timings, len(s.arrivals()))
                        for i, s in enumerate(done, start=1)])


def speculative_tokens_per_pass(draft: int, accept: float) -> float:
    """Expected tokens per big-model pass with `draft` guesses each accepted with probability
    `accept` (independently): 1 + a + a² + … + a^draft."""
    return formulas.expected_tokens_per_pass(draft, accept)


def first_difference(tokens: list[int], reference: list[int]) -> int | None:
    """The first position where two token lists differ (a shorter list differs where it ends); None if equal."""
    for i, (a, b) in enumerate(zip(tokens, reference, strict=False)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


@dataclass(frozen=True)
class SpecCounts:
    """Generated, drafted and accepted tokens over a configuration's repeats. A server that drafted
    nothing reports no counters: drafted and accepted are then 0, and `reported` is False."""
    generated: int
    drafted: int
    accepted: int
    reported: bool

    @property
    def passes(self) -> int:
        return formulas.target_passes(self.generated, self.accepted)

    @property
    def acceptance(self) -> float:
        return formulas.acceptance_rate(self.drafted, self.accepted)

    @property
    def tokens_per_pass(self) -> float:
        return formulas.tokens_per_target_pass(self.generated, self.accepted)

    @property
    def drafted_per_pass(self) -> float:
        return self.drafted / self.passes if self.passes > 0 else math.nan


def spec_counts(done: list[Completion]) -> SpecCounts:
    return SpecCounts(generated=sum(c.timings.predicted_n for c in done),
                      drafted=sum(c.timings.draft_n or 0 for c in done),
                      accepted=sum(c.timings.draft_n_accepted or 0 for c in done),
                      reported=any(c.timings.draft_n is not None for c in done))


@dataclass(frozen=True)
class ModelCost:
    """One model alone: its decode speed per repeat, hence the cost of one of its passes."""
    name: str
    role: str                         # target | draft
    weight_type: str | None
    tensor_bytes: int
    samples: list[float]              # decode tokens/s

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def ms_per_token(self) -> float:
        return 1000.0 / self.median

    @property
    def gb_per_s(self) -> float:
        """Weights read per second."""
        return self.tensor_bytes * self.median / formulas.GB


def model_cost(name: str, model: dict[str, Any], done: list[Completion]) -> ModelCost:
    return ModelCost(name, "target" if name in SPEC_TARGETS else "draft", model["weight_type"], model["tensor_bytes"],
                     measure.decode_samples(done))


def prompt_passes(plain: dict[tuple[str, str], list[Completion]], target: str) -> dict[str, tuple[int, float]]:
    """A target's prompt passes, a batch of tokens in one pass, on each prompt: (tokens, median prompt_ms)."""
    found = {}
    for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT):
        timings = [c.timings for c in plain[(target, prompt)]]
        found[prompt] = (timings[0].prompt_n, statistics.median(t.prompt_ms for t in timings))
    return found


@dataclass(frozen=True)
class PlainRun:
    """A target alone on one prompt: the reference of the configurations on that prompt."""
    target: str
    prompt: str
    samples: list[float]
    tokens: list[list[int]]

    @property
    def repeats_agree(self) -> bool:
        return all(first_difference(t, self.tokens[0]) is None for t in self.tokens)

    def cells(self) -> list[Any]:
        return [self.target, "none", None, None, PROMPT_NAMES[self.prompt], statistics.median(self.samples), min(self.samples),
                max(self.samples), None, None, None, 1.0, 1.0, "reference" if self.repeats_agree else "repeats differ"]

    def record(self) -> dict[str, Any]:
        return {"label": f"spec-{self.target}", "target": self.target, "spec_type": "none", "draft": None,
                "draft_n_max": None, "prompt": PROMPT_NAMES[self.prompt], "server_flags": [], "tokens": self.tokens}


def plain_run(target: str, prompt: str, done: list[Completion]) -> PlainRun:
    return PlainRun(target, prompt, measure.decode_samples(done), [c.tokens for c in done])


@dataclass(frozen=True)
class SpecRun:
    """A speculative configuration against the plain target on the same prompt."""
    config: SpecConfig
    samples: list[float]
    base: float                       # the plain target's median decode speed on that prompt
    counts: SpecCounts
    first_differences: list[int | None]
    draft_n: list[int | None]
    draft_n_accepted: list[int | None]
    tokens: list[list[int]]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def speedup(self) -> float:
        return self.median / self.base

    @property
    def identical(self) -> bool:
        return all(d is None for d in self.first_differences)

    @property
    def check(self) -> str:
        bad = [d for d in self.first_differences if d is not None]
        return "identical" if not bad else f"differ from token {min(bad) + 1}"

    @property
    def acceptance(self) -> float | None:
        return self.counts.acceptance if self.counts.reported else None

    def settings(self) -> dict[str, Any]:
        c = self.config
        return {"target": c.target, "spec_type": c.spec_type, "draft": c.draft, "draft_n_max": c.draft_n_max,
                "prompt": c.prompt_name, "n_predict": SPEC_TOKENS}

    def cells(self) -> list[Any]:
        c = self.config
        return [c.target, c.spec_type, c.draft, c.draft_n_max, c.prompt_name, self.median, min(self.samples),
                max(self.samples), self.counts.drafted, self.counts.accepted, self.acceptance,
                self.counts.tokens_per_pass, self.speedup, self.check]

    def record(self) -> dict[str, Any]:
        c = self.config
        return {"label": c.label, "target": c.target, "spec_type": c.spec_type, "draft": c.draft, "draft_n_max": c.draft_n_max,
                "prompt": c.prompt_name, "server_flags": spec_flags(c.spec_type, c.draft, c.draft_n_max),
                "tokens": self.tokens, "draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted}


def spec_run(cfg: SpecConfig, done: list[Completion], plain: list[Completion]) -> SpecRun:
    return SpecRun(cfg, measure.decode_samples(done), statistics.median(measure.decode_samples(plain)), spec_counts(done),
                   [first_difference(c.tokens, plain[0].tokens) for c in done], [c.timings.draft_n for c in done],
                   [c.timings.draft_n_accepted for c in done], [c.tokens for c in done])


# A gap below this share of the plain target's median gap on the same prompt joins a token to the one
# before: tokens of one speculative pass arrive microseconds apart, passes a whole pass apart.
TOGETHER = 0.25


@dataclass(frozen=True)
class SpecStream:
    """One streamed request on a speculative server (or the plain target), on the client's clock."""
    label: str
    prompt: str
    client: clientclock.ClientTimes
    timings: Timings
    plain_gap_ms: float               # the plain target's median gap on the same prompt

    @property
    def threshold_ms(self) -> float:
        return TOGETHER * self.plain_gap_ms

    @property
    def bursts(self) -> list[int]:
        return clientclock.bursts(self.client.itl_ms, self.threshold_ms)

    @property
    def server_passes(self) -> int:
        """Target passes by the server's counters: generated − accepted."""
        return formulas.target_passes(self.timings.predicted_n, self.timings.draft_n_accepted or 0)

    def cells(self) -> list[Any]:
        gaps = self.client.itl_ms
        return [self.label.removeprefix("spec-"), PROMPT_NAMES[self.prompt], self.client.n,
                *[clientclock.percentile(gaps, q) for q in clientclock.PERCENTILES],
                sum(g < self.threshold_ms for g in gaps), len(self.bursts), self.server_passes, max(self.bursts)]


def spec_stream(label: str, prompt: str, done: StreamedCompletion,
                streamed: dict[tuple[str, str], StreamedCompletion]) -> SpecStream:
    target = next(t for t in SPEC_TARGETS if label.startswith(f"spec-{t}"))
    plain = streamed[(f"spec-{target}", prompt)]
    plain_times = clientclock.client_times(plain.arrivals(), plain.ended_ms)
    return SpecStream(label, prompt, clientclock.client_times(done.arrivals(), done.ended_ms), done.timings,
                      statistics.median(plain_times.itl_ms))


@dataclass(frozen=True)
class SpecArithmetic:
    """A configuration's measured tokens per pass and speed-up beside 1 + a + … + a^k and the predicted speed-up."""
    label: str
    target: str
    acceptance: float | None
    k: int
    expected: float | None            # 1 + a + … + a^k
    tokens_per_pass: float
    draft_cost: float                 # draft pass ÷ target pass
    drafted_per_pass: float
    check_cost: float                 # check ÷ target pass
    ideal: float                      # speed-up with the check costed as one target pass
    predicted: float                  # with the check costed from the measured prompt passes
    measured: float

    @property
    def over_expected(self) -> float | None:
        return self.tokens_per_pass / self.expected if self.expected else None

    @property
    def over_predicted(self) -> float | None:
        return self.measured / self.predicted if self.predicted > 0 else None

    def cells(self) -> list[Any]:
        return [self.label, self.target, self.acceptance, self.k, self.expected, self.tokens_per_pass, self.over_expected,
                self.draft_cost, self.drafted_per_pass, self.check_cost, self.ideal, self.predicted, self.measured,
                self.over_predicted]


def spec_arithmetic(run: SpecRun, ms_per_token: dict[str, float], batches: dict[str, tuple[int, float]]) -> SpecArithmetic:
    cfg, counts = run.config, run.counts
    a = counts.acceptance
    k = cfg.draft_n_max if cfg.draft and cfg.draft_n_max is not None else NGRAM_DRAFT_MAX
    expected = formulas.expected_tokens_per_pass(k, a) if counts.reported and not math.isnan(a) else None
    draft_ms = ms_per_token[cfg.draft] if cfg.draft else 0.0
    target_ms = ms_per_token[cfg.target]
    ideal = formulas.predicted_speculative_speedup(counts.tokens_per_pass, counts.drafted_per_pass, draft_ms, target_ms)
    verify_ms = formulas.batch_pass_ms(counts.drafted_per_pass + 1, batches[SPEC_PROMPT], batches[SPEC_REPETITIVE_PROMPT],
                                       target_ms)
    predicted = formulas.predicted_speculative_speedup(counts.tokens_per_pass, counts.drafted_per_pass, draft_ms, target_ms,
                                                       verify_ms)
    label = f"{cfg.draft} k={k}" if cfg.draft else f"ngram-simple (m-gram ≤ {k})"
    return SpecArithmetic(label, cfg.target, a if counts.reported else None, k, expected, counts.tokens_per_pass,
                          draft_ms / target_ms, counts.drafted_per_pass, verify_ms / target_ms, ideal, predicted, run.speedup)


# --- rendering: tables, notes and plots ------------------------------------------------------

def render_loop(ctx: LessonContext, done: Completion, steps: list[LoopStep]) -> None:
    t = done.timings
    probs = [s.probability for s in steps if s.probability is not None]
    ctx.table(
        "one_pass_per_token", f"The loop: {LOOP_TOKENS} tokens after {LOOP_PROMPT!r}, one per pass",
        [("pass", ""), ("token sampled", ""), ("id", ""), ("its probability", "")],
        [s.cells() for s in steps],
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
    ctx.table("metrics_delta", "The server's counters around that request (/metrics)",
              [("counter", ""), ("before", ""), ("after", ""), ("delta", "")], [c.cells() for c in counters], notes=notes)


def render_distribution(ctx: LessonContext, dist: Distribution) -> None:
    cum = np.cumsum(dist.probs)
    top = [[i + 1, dist.texts[i], dist.ids[i], float(dist.probs[i]), float(cum[i])] for i in range(min(10, len(dist.ids)))]
    mass = dist.listed_mass
    ctx.table(
        "next_token_distribution", f"The next-token distribution after {SAMPLING_PROMPT!r} (full softmax, top 10)",
        [("rank", ""), ("token", ""), ("id", ""), ("probability", ""), ("cumulative", "")],
        top,
        notes=[
            (f"The server listed {len(dist.ids):,} candidates (n_probs asked: {', then '.join(str(a) for a in dist.asked)}); "
             f"the vocabulary has {dist.n_vocab if dist.n_vocab is not None else 'an unreported number of'} entries."),
            f"The listed candidates hold {100 * mass:.5g}% of the probability"
            + (f" (the whole vocabulary: their sum differs from 1 by {abs(mass - 1):.2g}, the server's "
               f"float rounding)." if dist.complete else "."),
            f"The top token has {100 * dist.probs[0]:.3g}%, the top ten {100 * cum[min(9, len(cum) - 1)]:.3g}%.",
        ],
    )


def render_applied(ctx: LessonContext, dist: Distribution, applied: list[Applied]) -> None:
    def cells(a: Applied) -> list[Any]:
        if a.ours is None:
            return [a.setting.label, a.setting.chain, None, None, None, None, None]
        return [a.setting.label, a.setting.chain, len(a.kept), a.kept_percent, a.top_token, a.top_before, a.top_after]

    determined = [a for a in applied if a.ours is not None]
    ctx.table(
        "samplers_applied", "Greedy, temperature, top-k and top-p on that distribution (numpy re-implementation)",
        [("setting", ""), ("chain", "in order"), ("kept", "tokens"), ("original probability kept", "%"),
         ("most probable token", ""), ("its probability before", ""), ("after", "")],
        [cells(a) for a in applied],
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
    checked = [c for c in checks if c.cmp is not None]
    agree = [c for c in checked if c.verdict.startswith("agree")]
    mismatch = [c for c in checked if c.verdict.startswith("mismatch")]
    edge = [c.edge for c in checked if c.edge is not None]
    largest = max(c.cmp.max_rel for c in checked if c.cmp is not None) if checked else math.nan
    mass = dist.listed_mass
    notes = [
        f"{len(agree)} of the {len(checked)} settings checked agree with the server within |Δp| ≤ {REL_TOL:g} × p"
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
        [("setting", ""), ("chain", "in order"), ("kept", "ours"), ("kept", "server"), ("listed by server", ""),
         ("same tokens", ""), ("token the server drew", ""), ("drawn token in our kept set", ""),
         ("max |Δp|", ""), ("max |Δp| / p", ""), ("tolerance", "relative"), ("verdict", "")],
        [c.cells() for c in checks], notes=notes,
    )
    if checked:
        ctx.note(f"Sampler check tolerance: |Δp| ≤ {REL_TOL:g} × p. The server works in 32-bit floats, so exact "
                 f"equality is not expected: the largest relative difference here was {largest:.2g}"
                 + (f", and a kept set one token off would show as {min(edge):.2g} or more." if edge else "."))


def render_seeded(ctx: LessonContext, runs: list[SeededRun]) -> None:
    first, again, other = runs[0], runs[1], runs[2]
    same = first.tokens == again.tokens and first.text == again.text
    differ = first.tokens != other.tokens
    ctx.table(
        "seeded_sampling", f"Seeded sampling at temperature 1.0 ({SEEDED_TOKENS} tokens)",
        [("run", ""), ("seed", ""), ("text", ""), ("token ids", "")], [r.cells() for r in runs],
        notes=[
            f"Runs 1 and 2 (seed {first.seed} twice): {'identical' if same else 'different'} text and tokens.",
            (f"Run 3 (seed {other.seed}): {'different from' if differ else 'the same as'} run 1, "
             f"{sum(a != b for a, b in zip(first.tokens, other.tokens, strict=False))} of {len(first.tokens)} tokens differ."),
        ],
    )
    ctx.settings["seeded"] = {"seeds": list(SEEDS), "n_predict": SEEDED_TOKENS}


def render_latency(ctx: LessonContext, model: LatencyFit, fit: list[Completion], rows: list[LatencyRow]) -> None:
    ttft, tpot = model.ttft, model.tpot
    ctx.measure("time_to_first_token_ms", "ms", model.ttft_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="prompt_ms: the prompt pass, which yields the first token")
    ctx.measure("decode_ms_per_token", "ms", model.tpot_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="predicted_ms / (predicted_n − 1)")
    for r in rows:
        if not r.fitted:
            ctx.measure("latency_model_error_pct", "%", r.errors_pct, higher_is_better=None, settings={"n_predict": r.n},
                        description="(predicted − measured) ÷ measured total time, per repeat")
    worst = max(rows, key=lambda r: abs(r.error_pct) if not r.fitted else -1)
    longest = rows[-1]
    floor_s = PODCAST_TOKENS * PODCAST_PASS_MS / 1000
    ctx.table(
        "latency_model", "Total time ≈ time to first token + time per output token × (n − 1)",
        [("n", "tokens"), ("row", ""), ("predicted", "ms"), ("measured median", "ms"), ("measured min", "ms"),
         ("measured max", "ms"), ("error", "%"), ("predicted_n", "per repeat")],
        [r.cells() for r in rows],
        notes=[
            (f"Fitted at n = {FIT_N} ({len(fit)} repeats): time to first token {ttft:.4g} ms (prompt_ms), "
             f"time per output token {tpot:.4g} ms (predicted_ms ÷ (predicted_n − 1))."),
            (f"Measured total = prompt_ms + predicted_ms; the largest prediction error is {worst.error_pct:+.3g}% at "
             f"n = {worst.n}."),
            (f"At n = {longest.n} the decode passes take {100 * tpot * (longest.n - 1) / longest.predicted:.3g}% "
             f"of the predicted time: long outputs are paid for pass by pass."),
            (f"The podcast's floor (published example): {PODCAST_TOKENS} passes × {PODCAST_PASS_MS:g} ms = "
             f"{floor_s:g} s (it says {PODCAST_FLOOR_S:g} s: "
             f"{'consistent' if math.isclose(floor_s, PODCAST_FLOOR_S) else 'inconsistent'}); "
             f"at this run's {tpot:.3g} ms per pass, {PODCAST_TOKENS} tokens take at least "
             f"{model.predict(PODCAST_TOKENS) / 1000:.3g} s."),
        ],
    )
    xs = [float(r.n) for r in rows]
    ctx.plot("latency_model", "Predicted vs measured total time", "tokens generated (n)", "total time (ms)", [
        Series(label="predicted: TTFT + TPOT × (n − 1)", x=xs, y=[r.predicted for r in rows], style="dashed"),
        Series(label="measured (median, min–max)", x=xs, y=[r.measured for r in rows], y_min=[min(r.totals) for r in rows],
               y_max=[max(r.totals) for r in rows], style="points"),
    ])


def render_outside(ctx: LessonContext, clock: dict[str, Any], view: OutsideView) -> None:
    c, reps = view.client, view.repeats
    n = STREAM_TOKENS
    per_token, prompt_ms, total = view.per_token_ms, view.prompt_ms, view.server_total_ms
    itl = {q: c.itl_percentile(q) for q in clientclock.PERCENTILES}
    mean_itl = statistics.fmean(c.itl_ms)
    predicted = clientclock.predicted_end_to_end(c.ttft_median, itl[50], n)
    settings = {"n_predict": n, "stream": True}
    ctx.measure("client_ttft_ms", "ms", c.ttft_ms, higher_is_better=False, settings=settings,
                description="the first token's arrival on the client's clock, ms after the request was sent")
    ctx.measure("client_itl_ms", "ms", c.itl_ms, higher_is_better=False, settings=settings,
                description="gaps between consecutive tokens' arrivals, every repeat pooled")
    ctx.measure("client_end_to_end_ms", "ms", c.end_to_end_ms, higher_is_better=False, settings=settings,
                description="the final event's arrival")
    ctx.measure("client_minus_server_ms", "ms", [r.overhead_ms for r in reps], higher_is_better=False, settings=settings,
                description="end-to-end on the client minus prompt_ms + predicted_ms")
    ctx.fact("client_clock", {"n_predict": n, "clock": clock["clock"], "repeats": [r.fact() for r in reps]})
    rows = [
        ["time to first token", c.ttft_median, prompt_ms, c.ttft_median - prompt_ms, "prompt_ms"],
        *[[f"inter-token latency p{q}", itl[q], per_token, itl[q] - per_token, "predicted_per_token_ms"] for q in itl],
        ["inter-token latency mean", mean_itl, per_token, mean_itl - per_token, "predicted_per_token_ms"],
        ["end-to-end", c.end_to_end_median, total, c.end_to_end_median - total, "prompt_ms + predicted_ms"],
        [f"TTFT + ITL p50 × (n − 1), n = {n}", predicted, prompt_ms + per_token * (n - 1),
         predicted - (prompt_ms + per_token * (n - 1)), "prompt_ms + predicted_per_token_ms × (n − 1)"],
    ]
    gaps = [r.ttft_gap_ms for r in reps]
    overheads = [r.overhead_ms for r in reps]
    slowest = max(c.itl_ms)
    causal = all(g >= 0 for g in gaps)
    counted = all(r.token_events == r.timings.predicted_n for r in reps)
    ctx.table(
        "client_clock", f"The loop from outside: {n} streamed tokens on the client's clock, beside the server's timings",
        [("measure", ""), ("client", "ms"), ("server", "ms"), ("client − server", "ms"), ("server's field", "")], rows,
        notes=[
            (f"{len(reps)} repeats of the latency model's request (greedy, seeded, no prompt cache) with stream: true. "
             f"Each event is stamped when its last byte reaches this process ({clock['clock']}, "
             f"{clock['implementation']}, resolution {clock['resolution_s']:.3g} s); times are ms after the request was sent. "
             f"Percentiles pool the {len(c.itl_ms)} gaps of every repeat (linear between ranks); the server's time per "
             f"token pools the repeats too (Σ predicted_ms ÷ Σ (predicted_n − 1)); TTFT and end-to-end are medians."),
            (f"Causality: {'in every repeat' if causal else 'NOT in every repeat:'} the first token reached the client after "
             f"the server's prompt_ms (TTFT − prompt_ms {min(gaps):.3g} to {max(gaps):.3g} ms), and "
             f"{'every' if counted else 'NOT every'} repeat had one event per generated token "
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
             f"{slowest:.4g} ms): a few passes wait for a core (the server's threads, this client and anything else on the "
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
    floors = [r.client.end_to_end_ms >= r.floor_ms for r in reps]
    ctx.table(
        "client_clock_repeats", "Each streamed repeat on both clocks, and the sequential floor",
        [("repeat", ""), ("events with tokens", ""), ("predicted_n", ""), ("TTFT", "ms"), ("prompt_ms", "ms"),
         ("TTFT − prompt_ms", "ms"), ("ITL median", "ms"), ("predicted_per_token_ms", "ms"), ("end-to-end", "ms"),
         ("prompt_ms + predicted_ms", "ms"), ("client − server", "ms"), ("each token after the one before", ""),
         ("fastest gap", "ms"), ("n × fastest gap", "ms")],
        [r.cells() for r in reps],
        notes=[
            (f"The sequential floor: a token's pass needs the token before it, so {n} tokens cannot take less than {n} × the "
             f"fastest gap. {'Every' if all(floors) else 'NOT every'} repeat took at least that "
             f"(end-to-end ÷ floor {min(r.client.end_to_end_ms / r.floor_ms for r in reps):.3g} to "
             f"{max(r.client.end_to_end_ms / r.floor_ms for r in reps):.3g}), and in "
             f"{sum(r.client.in_order and r.client.separate for r in reps)} of {len(reps)} repeats every token arrived "
             f"strictly after the one before it."),
            *([(f"The fastest gap ({fastest:.3g} ms) is shorter than the server's time per token ({per_token:.3g} ms): an "
                f"event that reaches the client late shortens the gap after it, so the floor read on the client's clock "
                f"is a loose one; the server's predicted_ms ÷ (predicted_n − 1) is the pass itself.")]
              if (fastest := min(min(r.client.itl_ms) for r in reps)) < 0.5 * per_token else []),
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


def render_speculative_illustration(ctx: LessonContext, model: LatencyFit) -> None:
    """The arithmetic alone, on illustrative numbers: where no speculative server could run here."""
    n = max(PREDICT_N)
    plain = model.predict(n)
    for a in SPEC_ACCEPT:
        per_pass = speculative_tokens_per_pass(SPEC_DRAFT, a)
        passes = math.ceil((n - 1) / per_pass)
        ctx.note(
            f"Speculative decoding (illustrative, not run): a draft model guesses {SPEC_DRAFT} tokens and the big "
            f"model checks them in one pass; if each guess is accepted with probability {a:g}, a pass yields "
            f"{per_pass:.3g} tokens on average, so {n} tokens need about {passes + 1} big-model passes instead of {n}: "
            f"{model.predict(passes + 1):.4g} ms instead of {plain:.4g} ms with this run's "
            f"TTFT and TPOT, before the draft model's own time.")


def draft_cost_note(draft: ModelCost, target: ModelCost) -> str:
    """Bytes against time: a draft reading a share of the target's bytes but costing a larger share of its
    time is not limited by memory reads (its weights read per second stay below the target's)."""
    share_bytes, share_time = draft.tensor_bytes / target.tensor_bytes, draft.ms_per_token / target.ms_per_token
    head = (f"{draft.name} reads {share_bytes:.2g} of the target's bytes per token and costs {share_time:.2g} of its "
            f"pass, reading {draft.gb_per_s:.3g} GB/s against the target's {target.gb_per_s:.3g} GB/s")
    if share_time > share_bytes * 1.2 and draft.gb_per_s < target.gb_per_s:
        return head + ": memory is not what limits it; unpacking quantized blocks is work too."
    return head + "."


def render_spec_costs(ctx: LessonContext, costs: list[ModelCost], batches: dict[str, tuple[int, float]]) -> None:
    target = costs[0]
    for c in costs:
        ctx.measure("spec_model_decode_tokens_per_s", "tokens/s", c.samples, higher_is_better=True,
                    settings={"model": c.name, "role": c.role, "n_predict": SPEC_TOKENS},
                    description="one model alone: (predicted_n − 1) ÷ predicted_ms, the cost of one of its passes")
    drafts = [c for c in costs if c.role == "draft"]
    (batch_n, batch_ms), (long_n, long_ms) = batches[SPEC_PROMPT], batches[SPEC_REPETITIVE_PROMPT]
    ctx.table(
        "speculative_costs", f"The cost of one pass: each model alone, {SPEC_TOKENS} tokens after {SPEC_PROMPT!r}",
        [("model", ""), ("role", ""), ("weights", ""), ("bytes per token", "bytes"), ("decode median", "tokens/s"),
         ("min", "tokens/s"), ("max", "tokens/s"), ("one pass", "ms"), ("÷ target pass", target.name),
         ("weights read", "GB/s")],
        [[c.name, c.role, c.weight_type, c.tensor_bytes, c.median, min(c.samples), max(c.samples), c.ms_per_token,
          c.ms_per_token / target.ms_per_token, c.gb_per_s] for c in costs],
        notes=[
            "One pass of a model costs 1 ÷ its decode speed. A draft pass costs "
            + ", ".join(f"{c.ms_per_token / target.ms_per_token:.2g} of a target pass ({c.name})" for c in drafts) + ".",
            *[draft_cost_note(c, target) for c in drafts],
            (f"The target's prompt passes take several tokens at once, as checking a draft does: {batch_n} tokens "
             f"in {batch_ms:.3g} ms ({batch_ms / target.ms_per_token:.3g} × one decode pass), {long_n} tokens in "
             f"{long_ms:.3g} ms ({long_ms / target.ms_per_token:.3g} ×). A check of b tokens is costed on the line "
             f"through these two (never below one decode pass)."),
        ],
    )


def render_spec_measured(ctx: LessonContext, repeat: int, plain: list[PlainRun], spec: list[SpecRun]) -> None:
    for p in plain:
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", p.samples, higher_is_better=True,
                    settings={"target": p.target, "spec_type": "none", "draft": None, "draft_n_max": None,
                              "prompt": PROMPT_NAMES[p.prompt], "n_predict": SPEC_TOKENS})
    for s in spec:
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", s.samples, higher_is_better=True, settings=s.settings())
    mismatched = [s.config.label for s in spec if not s.identical]
    no_counters = [s.config.label for s in spec if not s.counts.reported]
    drafts = [s for s in spec if s.config.spec_type == "draft-simple"]
    best = max(drafts, key=lambda s: s.speedup) if drafts else None
    ngram = [s for s in spec if s.config.spec_type == "ngram-simple"]
    notes = [
        (f"All at temperature 0 with seed {SEED}, {SPEC_TOKENS} tokens, {repeat} repeat(s) each, one server per "
         f"configuration (llama-server's flags: --spec-type, --spec-draft-model, --spec-draft-n-max). Acceptance = "
         f"draft_n_accepted ÷ draft_n; tokens per target pass = generated ÷ (generated − accepted); speed-up = "
         f"decode median ÷ the same target's median without a draft on the same prompt."),
        ("Check: every speculative run produced exactly the tokens of the plain run." if not mismatched else
         f"Check FAILED: {', '.join(mismatched)} produced other tokens than the plain run."),
    ]
    if best is not None:
        c = best.config
        notes.append(f"The best draft here, {c.draft} at k = {c.draft_n_max}: {100 * best.acceptance:.3g}% accepted, "
                     f"{best.counts.tokens_per_pass:.3g} tokens per target pass, {best.speedup:.3g} × the plain decode speed."
                     if best.acceptance is not None else f"{c.draft} at k = {c.draft_n_max} reported no draft counters.")
    if ngram:
        r = ngram[0]
        notes.append(f"n-gram speculation drafts from the text itself, at no model cost: on the repeating text "
                     f"{r.counts.drafted} tokens drafted, {r.counts.accepted} accepted, {r.counts.tokens_per_pass:.3g} "
                     f"tokens per target pass, {r.speedup:.3g} × plain.")
    if no_counters:
        notes.append(f"No draft counters (draft_n) in the answers of {', '.join(no_counters)}: nothing was drafted.")
    ctx.table(
        "speculative_measured", "Speculative decoding, measured: target alone, with a draft model, with n-grams",
        [("target", ""), ("speculation", "--spec-type"), ("draft", ""), ("draft length", "max"), ("prompt", ""),
         ("decode median", "tokens/s"), ("min", "tokens/s"), ("max", "tokens/s"), ("drafted", "tokens"),
         ("accepted", "tokens"), ("acceptance", ""), ("tokens per target pass", ""), ("speed-up", "×"),
         ("same tokens as plain", "")],
        [p.cells() for p in plain] + [s.cells() for s in spec], notes=notes,
    )


def render_spec_client_clock(ctx: LessonContext, rows: list[SpecStream]) -> None:
    plain = [r for r in rows if r.label in {f"spec-{t}" for t in SPEC_TARGETS}]
    spec = [r for r in rows if r not in plain]
    matched = [r for r in spec if len(r.bursts) == r.server_passes]
    notes = [
        (f"One streamed request per configuration, {SPEC_TOKENS} tokens at temperature 0, after the measured rounds. "
         f"Tokens arriving less than {TOGETHER:g} × the plain target's median gap after the one before count as "
         f"arriving together (a burst); the server's target passes are predicted_n − draft_n_accepted."),
        (f"Bursts seen on the client's clock equal the server's target passes in {len(matched)} of {len(spec)} "
         f"speculative runs" + (f" (not: {', '.join(r.label.removeprefix('spec-') for r in spec if r not in matched)})"
                                if len(matched) < len(spec) else "") + ": each burst is one pass of the target model."),
    ]
    if plain and spec:
        best = max(spec, key=lambda r: r.client.n / len(r.bursts))
        p = next(r for r in plain if r.prompt == best.prompt)
        inside = [g for g in best.client.itl_ms if g < best.threshold_ms]
        between = [g for g in best.client.itl_ms if g >= best.threshold_ms]
        plain_p50, best_p50 = (clientclock.percentile(r.client.itl_ms, 50) for r in (p, best))
        notes.append(
            f"From outside, speculation is tokens in bursts. On the {PROMPT_NAMES[best.prompt]} prompt the plain target's "
            f"median gap is {plain_p50:.3g} ms (one pass per token); {best.label.removeprefix('spec-')} gave {best.client.n} "
            f"tokens in {len(best.bursts)} bursts, up to {max(best.bursts)} at once, with gaps of "
            f"{statistics.median(inside) if inside else math.nan:.3g} ms inside a burst (the delivery of the next event) and "
            f"{statistics.median(between) if between else math.nan:.3g} ms between bursts (a target pass), median. Its median "
            f"ITL, {best_p50:.3g} ms, would make it {plain_p50 / best_p50:.3g} × faster per token; its end-to-end time, "
            f"{best.client.end_to_end_ms:.4g} ms against {p.client.end_to_end_ms:.4g} ms plain, is the speed-up a user "
            f"waits for. A median ITL does not describe a speculative server; the bursts and the time between them do.")
    ctx.table(
        "speculative_client_clock", "Speculative decoding from outside: the gaps between streamed tokens",
        [("configuration", ""), ("prompt", ""), ("tokens", ""), ("ITL p50", "ms"), ("ITL p90", "ms"), ("ITL p99", "ms"),
         ("gaps inside a burst", ""), ("bursts", "client"), ("target passes", "server"), ("largest burst", "tokens")],
        [r.cells() for r in rows], notes=notes)
    short = [r for r in rows if r.prompt == SPEC_PROMPT]
    ctx.plot("speculative_client_clock", f"Arrival of each token, {SPEC_TOKENS} tokens after {SPEC_PROMPT!r}",
             "token index", "arrival (ms after sending)",
             [Series(label=r.label.removeprefix("spec-"), x=[float(i) for i in range(1, r.client.n + 1)], y=r.client.times_ms,
                     style="steps") for r in short])


def render_spec_arithmetic(ctx: LessonContext, rows: list[SpecArithmetic]) -> None:
    def named(r: SpecArithmetic) -> str:
        return r.label if len(SPEC_TARGETS) == 1 else f"{r.label} on {r.target}"

    rated = [r for r in rows if r.over_expected is not None]
    over = [r for r in rated if (r.over_expected or 0) > 1 + FORMULA_AGREES]
    under = [r for r in rated if (r.over_expected or 0) < 1 - FORMULA_AGREES]
    agree = [r for r in rated if abs((r.over_expected or 0) - 1) <= FORMULA_AGREES]
    notes = [
        ("Expected tokens per pass 1 + a + … + a^k takes the measured acceptance a and the longest draft k, "
         "and supposes each drafted token is accepted independently with the same a."),
    ]
    if agree:
        notes.append(f"Within {100 * FORMULA_AGREES:g}% of the formula: {', '.join(named(r) for r in agree)}.")
    if over:
        notes.append(
            f"Measured above the formula ({', '.join(named(r) for r in over)}): acceptances are not independent. "
            "Where the text is predictable the draft agrees for many tokens in a row, and where it is not it "
            "misses at once; the same a spread evenly over every position gives fewer long runs.")
    if under:
        notes.append(
            f"Measured below the formula ({', '.join(named(r) for r in under)}): not every pass has a full draft. "
            "Drafts stop at the tokens left to generate, and n-gram drafts exist only where the last tokens "
            "were seen before and are as long as what followed them then.")
    notes.append(
        "Predicted speed-up = tokens per pass × target pass ÷ (drafted per pass × draft pass + check): the "
        "draft's passes are paid in full. With the check costed as one target pass (a memory-bound target "
        "reads its weights once for the whole batch) it is the ideal; with the check costed from the target's "
        "measured prompt passes it is the prediction for this host.")
    scored = [r for r in rows if r.over_predicted is not None]
    if scored:
        lo = min(scored, key=lambda r: r.over_predicted or 0)
        hi = max(scored, key=lambda r: r.over_predicted or 0)
        notes.append(
            f"Measured ÷ predicted runs from {lo.over_predicted:.3g} ({named(lo)}) to {hi.over_predicted:.3g} ({named(hi)}). "
            f"What the prediction leaves out: the draft also reads the accepted tokens before drafting again, each round "
            f"samples and compares on the host, and a check pass of b tokens is not exactly a prompt pass of b tokens.")
    drafted = [r for r in rows if r.draft_cost > 0]
    if drafted:
        ratios = sorted({round(r.draft_cost, 3) for r in drafted})
        checks = [r.check_cost for r in drafted]
        notes.append(
            f"When speculation pays: each drafted token costs c = draft pass ÷ target pass "
            f"({', '.join(f'{c:.2g}' for c in ratios)} here) and the check costs v target passes (1 for a "
            f"memory-bound target; {min(checks):.3g}–{max(checks):.3g} here), so a round that drafts k tokens pays "
            f"only if it yields more than k × c + v tokens. It pays most with a draft much cheaper than the target "
            f"(c near 0, as n-grams are) and a target that is memory-bound, whose pass costs about the same for "
            f"one token or several because the weights are read once either way (lesson 8 gives that verdict per "
            f"width). A draft that is the same small model, only quantized, costs a sizeable share of a target "
            f"pass on a few CPU cores, so even a high acceptance buys less than the tokens per pass suggest.")
    ctx.table(
        "speculative_vs_arithmetic", "Measured against the arithmetic: tokens per pass and speed-up",
        [("configuration", ""), ("target", ""), ("acceptance a", ""), ("k", "draft length"),
         ("expected tokens per pass", "1 + a + … + a^k"), ("measured tokens per pass", ""), ("measured ÷ expected", ""),
         ("draft pass ÷ target pass", ""), ("drafted per target pass", ""), ("check ÷ target pass", ""),
         ("ideal speed-up", "×"), ("predicted speed-up", "×"), ("measured speed-up", "×"), ("measured ÷ predicted", "")],
        [r.cells() for r in rows], notes=notes,
    )


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
