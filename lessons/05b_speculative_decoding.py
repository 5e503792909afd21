"""Lesson 5b — Speculative decoding

Lesson 5's loop makes one token per pass of the model. A draft guesses several tokens ahead and the
model checks them all in one pass: every accepted guess is a token without a pass of its own. This
script measures it on servers it starts itself: the default model's f32 width alone, with a draft
(its own weights in q4_1 and q8_0) at two draft lengths, and with llama.cpp's draft-free n-gram
speculation; each beside the arithmetic of `bytesup.course.speculative` (1 + a + … + a^k tokens per
pass, and a speed-up predicted from the measured cost of each model's pass), and seen from outside
as tokens arriving in bursts on the client's clock.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bytesup.course import clientclock
from bytesup.course import speculative as spec
from bytesup.course.speculative import PassCost
from bytesup.lesson import LessonContext
from bytesup.llama import process as engine
from bytesup.llama import timed as measure
from bytesup.llama.client import clock_info
from bytesup.llama.responses import Completion, StreamedCompletion, Timings
from bytesup.models import catalog as models
from bytesup.models.gguf import read_model_info
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns

TITLE = "Speculative decoding"

SEED = 42
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
PROMPT_NAMES = {SPEC_PROMPT: "short", SPEC_REPETITIVE_PROMPT: "repetitive"}
NGRAM_DRAFT_MAX = 48                     # ngram-simple's m-gram: the most it drafts at once
FORMULA_AGREES = 0.05                    # measured tokens per pass within 5% of 1 + a + … + a^k: "agrees"
# A gap below this share of the plain target's median gap on the same prompt joins a token to the one
# before: tokens of one speculative pass arrive microseconds apart, passes a whole pass apart.
TOGETHER = 0.25
# Used only when no speculative server can be started here: the arithmetic on illustrative numbers.
SPEC_DRAFT = 4
SPEC_ACCEPT = (0.6, 0.8)
ILLUSTRATION_TOKENS = 128


# --- requests: what the servers (and this host) answer ----------------------------------------

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

def spec_counts(done: list[Completion]) -> spec.Counts:
    return spec.counts((c.timings.predicted_n, c.timings.draft_n, c.timings.draft_n_accepted) for c in done)


def model_cost(name: str, model: dict[str, Any], done: list[Completion]) -> PassCost:
    return PassCost(name, "target" if name in SPEC_TARGETS else "draft", model["weight_type"], model["tensor_bytes"],
                    measure.decode_samples(done))


def prompt_passes(plain: dict[tuple[str, str], list[Completion]], target: str) -> dict[str, tuple[int, float]]:
    """A target's prompt passes, a batch of tokens in one pass, on each prompt: (tokens, median prompt_ms)."""
    found = {}
    for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT):
        timings = [c.timings for c in plain[(target, prompt)]]
        found[prompt] = (timings[0].prompt_n, statistics.median(t.prompt_ms for t in timings))
    return found


class PlainRecord(BaseModel):
    """A run as the lesson keeps it in its settings (`speculative.runs`): what `bytesup check` compares."""
    label: str
    target: str
    spec_type: str
    draft: str | None
    draft_n_max: int | None
    prompt: str
    server_flags: list[str]
    tokens: list[list[int]]


class SpecRecord(PlainRecord):
    draft_n: list[int | None]
    draft_n_accepted: list[int | None]


class SpeculativeSettings(BaseModel):
    """What the lesson states of its speculative runs (the settings `speculative`)."""
    n_predict: int
    repeat: int
    temperature: int
    seed: int
    ctx_size: int
    prompts: dict[str, str]
    engine: dict[str, Any]
    runs: list[dict[str, Any]]


@dataclass(frozen=True)
class PlainRun:
    """A target alone on one prompt: the reference of the configurations on that prompt."""
    target: str
    prompt: str
    samples: list[float]
    tokens: list[list[int]]

    @property
    def repeats_agree(self) -> bool:
        return all(spec.first_difference(t, self.tokens[0]) is None for t in self.tokens)

    def record(self) -> PlainRecord:
        return PlainRecord(label=f"spec-{self.target}", target=self.target, spec_type="none", draft=None, draft_n_max=None,
                           prompt=PROMPT_NAMES[self.prompt], server_flags=[], tokens=self.tokens)


def plain_run(target: str, prompt: str, done: list[Completion]) -> PlainRun:
    return PlainRun(target, prompt, measure.decode_samples(done), [c.tokens for c in done])


@dataclass(frozen=True)
class SpecRun:
    """A speculative configuration against the plain target on the same prompt."""
    config: SpecConfig
    samples: list[float]
    base: float                       # the plain target's median decode speed on that prompt
    counts: spec.Counts
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

    def record(self) -> SpecRecord:
        c = self.config
        return SpecRecord(label=c.label, target=c.target, spec_type=c.spec_type, draft=c.draft, draft_n_max=c.draft_n_max,
                          prompt=c.prompt_name, server_flags=spec_flags(c.spec_type, c.draft, c.draft_n_max),
                          tokens=self.tokens, draft_n=self.draft_n, draft_n_accepted=self.draft_n_accepted)


def spec_run(cfg: SpecConfig, done: list[Completion], plain: list[Completion]) -> SpecRun:
    return SpecRun(cfg, measure.decode_samples(done), statistics.median(measure.decode_samples(plain)), spec_counts(done),
                   [spec.first_difference(c.tokens, plain[0].tokens) for c in done], [c.timings.draft_n for c in done],
                   [c.timings.draft_n_accepted for c in done], [c.tokens for c in done])


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
        return spec.target_passes(self.timings.predicted_n, self.timings.draft_n_accepted or 0)


def spec_stream(label: str, prompt: str, done: StreamedCompletion,
                streamed: dict[tuple[str, str], StreamedCompletion]) -> SpecStream:
    target = next(t for t in SPEC_TARGETS if label.startswith(f"spec-{t}"))
    plain = streamed[(f"spec-{target}", prompt)]
    plain_times = clientclock.client_times(plain.arrivals(), plain.ended_ms)
    return SpecStream(label, prompt, clientclock.client_times(done.arrivals(), done.ended_ms), done.timings,
                      statistics.median(plain_times.itl_ms))


@dataclass(frozen=True)
class ArithmeticRow:
    """A configuration's measured tokens per pass and speed-up beside 1 + a + … + a^k and the predicted speed-up."""
    label: str = column("configuration")
    target: str = column("target")
    acceptance: float | None = column("acceptance a")
    k: int = column("k", "draft length")
    expected: float | None = column("expected tokens per pass", "1 + a + … + a^k")
    tokens_per_pass: float = column("measured tokens per pass")
    over_expected: float | None = column("measured ÷ expected")
    draft_cost: float = column("draft pass ÷ target pass")
    drafted_per_pass: float = column("drafted per target pass")
    check_cost: float = column("check ÷ target pass")
    ideal: float = column("ideal speed-up", "×")
    predicted: float = column("predicted speed-up", "×")
    measured: float = column("measured speed-up", "×")
    over_predicted: float | None = column("measured ÷ predicted")


def spec_arithmetic(run: SpecRun, ms_per_token: dict[str, float], batches: dict[str, tuple[int, float]]) -> ArithmeticRow:
    cfg, counts = run.config, run.counts
    k = cfg.draft_n_max if cfg.draft and cfg.draft_n_max is not None else NGRAM_DRAFT_MAX
    draft_ms = ms_per_token[cfg.draft] if cfg.draft else 0.0
    p = spec.predict(counts, k, draft_ms, ms_per_token[cfg.target], batches[SPEC_PROMPT], batches[SPEC_REPETITIVE_PROMPT])
    label = f"{cfg.draft} k={k}" if cfg.draft else f"ngram-simple (m-gram ≤ {k})"
    return ArithmeticRow(label, cfg.target, counts.acceptance if counts.reported else None, k, p.expected,
                         counts.tokens_per_pass, counts.tokens_per_pass / p.expected if p.expected else None, p.draft_cost,
                         counts.drafted_per_pass, p.check_cost, p.ideal, p.predicted, run.speedup,
                         run.speedup / p.predicted if p.predicted > 0 else None)


@dataclass(frozen=True)
class CostRow:
    model: str = column("model")
    role: str = column("role")
    weights: str | None = column("weights")
    bytes_per_token: int = column("bytes per token", "bytes")
    median: float = column("decode median", "tokens/s")
    min: float = column("min", "tokens/s")
    max: float = column("max", "tokens/s")
    one_pass: float = column("one pass", "ms")
    over_target: float = column("÷ target pass", SPEC_TARGETS[0])
    weights_read: float = column("weights read", "GB/s")


def cost_row(c: PassCost, target: PassCost) -> CostRow:
    return CostRow(c.name, c.role, c.weight_type, c.tensor_bytes, c.median, min(c.samples), max(c.samples), c.ms_per_token,
                   c.ms_per_token / target.ms_per_token, c.gb_per_s)


@dataclass(frozen=True)
class MeasuredRow:
    target: str = column("target")
    speculation: str = column("speculation", "--spec-type")
    draft: str | None = column("draft")
    draft_length: int | None = column("draft length", "max")
    prompt: str = column("prompt")
    median: float = column("decode median", "tokens/s")
    min: float = column("min", "tokens/s")
    max: float = column("max", "tokens/s")
    drafted: int | None = column("drafted", "tokens")
    accepted: int | None = column("accepted", "tokens")
    acceptance: float | None = column("acceptance")
    tokens_per_pass: float = column("tokens per target pass")
    speedup: float = column("speed-up", "×")
    same_tokens: str = column("same tokens as plain")


def plain_row(p: PlainRun) -> MeasuredRow:
    return MeasuredRow(p.target, "none", None, None, PROMPT_NAMES[p.prompt], statistics.median(p.samples), min(p.samples),
                       max(p.samples), None, None, None, 1.0, 1.0, "reference" if p.repeats_agree else "repeats differ")


def spec_row(s: SpecRun) -> MeasuredRow:
    c = s.config
    return MeasuredRow(c.target, c.spec_type, c.draft, c.draft_n_max, c.prompt_name, s.median, min(s.samples), max(s.samples),
                       s.counts.drafted, s.counts.accepted, s.acceptance, s.counts.tokens_per_pass, s.speedup, s.check)


@dataclass(frozen=True)
class StreamRow:
    configuration: str = column("configuration")
    prompt: str = column("prompt")
    tokens: int = column("tokens")
    itl_p50: float = column("ITL p50", "ms")
    itl_p90: float = column("ITL p90", "ms")
    itl_p99: float = column("ITL p99", "ms")
    inside_bursts: int = column("gaps inside a burst")
    bursts: int = column("bursts", "client")
    target_passes: int = column("target passes", "server")
    largest_burst: int = column("largest burst", "tokens")


def stream_row(r: SpecStream) -> StreamRow:
    gaps = r.client.itl_ms
    p50, p90, p99 = (clientclock.percentile(gaps, q) for q in (50, 90, 99))
    return StreamRow(r.label.removeprefix("spec-"), PROMPT_NAMES[r.prompt], r.client.n, p50, p90, p99,
                     sum(g < r.threshold_ms for g in gaps), len(r.bursts), r.server_passes, max(r.bursts))


# --- what the lesson records: measurements ----------------------------------------------------

def record_costs(ctx: LessonContext, costs: list[PassCost]) -> None:
    for c in costs:
        ctx.measure("spec_model_decode_tokens_per_s", "tokens/s", c.samples, higher_is_better=True,
                    settings={"model": c.name, "role": c.role, "n_predict": SPEC_TOKENS},
                    description="one model alone: (predicted_n − 1) ÷ predicted_ms, the cost of one of its passes")


def record_measured(ctx: LessonContext, plain: list[PlainRun], runs: list[SpecRun]) -> None:
    for p in plain:
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", p.samples, higher_is_better=True,
                    settings={"target": p.target, "spec_type": "none", "draft": None, "draft_n_max": None,
                              "prompt": PROMPT_NAMES[p.prompt], "n_predict": SPEC_TOKENS})
    for s in runs:
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", s.samples, higher_is_better=True, settings=s.settings())


# --- rendering: tables, notes and plots ------------------------------------------------------

def render_illustration(ctx: LessonContext) -> None:
    """The arithmetic alone, on illustrative numbers: where no speculative server could run here."""
    n = ILLUSTRATION_TOKENS
    for a in SPEC_ACCEPT:
        per_pass = spec.expected_tokens_per_pass(SPEC_DRAFT, a)
        passes = math.ceil((n - 1) / per_pass)
        ctx.note(
            f"Speculative decoding (illustrative, not run): a draft model guesses {SPEC_DRAFT} tokens and the big "
            f"model checks them in one pass; if each guess is accepted with probability {a:g}, a pass yields "
            f"{per_pass:.3g} tokens on average, so {n} tokens need about {passes + 1} big-model passes instead of {n}, "
            f"before the draft model's own time.")


def draft_cost_note(draft: PassCost, target: PassCost) -> str:
    """Bytes against time: a draft reading a share of the target's bytes but costing a larger share of its
    time is not limited by memory reads (its weights read per second stay below the target's)."""
    share_bytes, share_time = draft.tensor_bytes / target.tensor_bytes, draft.ms_per_token / target.ms_per_token
    head = (f"{draft.name} reads {share_bytes:.2g} of the target's bytes per token and costs {share_time:.2g} of its "
            f"pass, reading {draft.gb_per_s:.3g} GB/s against the target's {target.gb_per_s:.3g} GB/s")
    if share_time > share_bytes * 1.2 and draft.gb_per_s < target.gb_per_s:
        return head + ": memory is not what limits it; unpacking quantized blocks is work too."
    return head + "."


def render_spec_costs(ctx: LessonContext, costs: list[PassCost], batches: dict[str, tuple[int, float]]) -> None:
    target = costs[0]
    drafts = [c for c in costs if c.role == "draft"]
    (batch_n, batch_ms), (long_n, long_ms) = batches[SPEC_PROMPT], batches[SPEC_REPETITIVE_PROMPT]
    ctx.table(
        "speculative_costs", f"The cost of one pass: each model alone, {SPEC_TOKENS} tokens after {SPEC_PROMPT!r}",
        columns(CostRow), cells([cost_row(c, target) for c in costs]),
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


def render_spec_measured(ctx: LessonContext, repeat: int, plain: list[PlainRun], runs: list[SpecRun]) -> None:
    mismatched = [s.config.label for s in runs if not s.identical]
    no_counters = [s.config.label for s in runs if not s.counts.reported]
    drafts = [s for s in runs if s.config.spec_type == "draft-simple"]
    best = max(drafts, key=lambda s: s.speedup) if drafts else None
    ngram = [s for s in runs if s.config.spec_type == "ngram-simple"]
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
    ctx.table("speculative_measured", "Speculative decoding, measured: target alone, with a draft model, with n-grams",
              columns(MeasuredRow), cells([plain_row(p) for p in plain] + [spec_row(s) for s in runs]), notes=notes)


def render_spec_client_clock(ctx: LessonContext, rows: list[SpecStream]) -> None:
    plain = [r for r in rows if r.label in {f"spec-{t}" for t in SPEC_TARGETS}]
    runs = [r for r in rows if r not in plain]
    matched = [r for r in runs if len(r.bursts) == r.server_passes]
    notes = [
        (f"One streamed request per configuration, {SPEC_TOKENS} tokens at temperature 0, after the measured rounds. "
         f"Tokens arriving less than {TOGETHER:g} × the plain target's median gap after the one before count as "
         f"arriving together (a burst); the server's target passes are predicted_n − draft_n_accepted."),
        (f"Bursts seen on the client's clock equal the server's target passes in {len(matched)} of {len(runs)} "
         f"speculative runs" + (f" (not: {', '.join(r.label.removeprefix('spec-') for r in runs if r not in matched)})"
                                if len(matched) < len(runs) else "") + ": each burst is one pass of the target model."),
    ]
    if plain and runs:
        best = max(runs, key=lambda r: r.client.n / len(r.bursts))
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
    ctx.table("speculative_client_clock", "Speculative decoding from outside: the gaps between streamed tokens",
              columns(StreamRow), cells([stream_row(r) for r in rows]), notes=notes)
    short = [r for r in rows if r.prompt == SPEC_PROMPT]
    ctx.plot("speculative_client_clock", f"Arrival of each token, {SPEC_TOKENS} tokens after {SPEC_PROMPT!r}",
             "token index", "arrival (ms after sending)",
             [Series(label=r.label.removeprefix("spec-"), x=[float(i) for i in range(1, r.client.n + 1)], y=r.client.times_ms,
                     style="steps") for r in short])


def render_spec_arithmetic(ctx: LessonContext, rows: list[ArithmeticRow]) -> None:
    def named(r: ArithmeticRow) -> str:
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
    ctx.table("speculative_vs_arithmetic", "Measured against the arithmetic: tokens per pass and speed-up",
              columns(ArithmeticRow), cells(rows), notes=notes)


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    if not facts["local"]:
        ctx.note(f"Speculative decoding was not measured: it needs servers this script starts on this host, and "
                 f"{facts['reason']}.")
        render_illustration(ctx)
        return ctx.finish()
    support = ctx.host("speculation_support", engine.speculation_support)
    if not support["supported"]:
        ctx.note(f"Speculative decoding was not measured: the {support['engine']} engine here cannot speculate "
                 f"({support['reason']}). Run this lesson with an engine that can (a llama-server build whose "
                 f"--help lists --spec-type, through LLAMA_SERVER) to measure it.")
        render_illustration(ctx)
        return ctx.finish()
    repeat = min(SPEC_REPEAT, ctx.repeat)
    ctx.step("speculative decoding: the models (derived from the default model once)")
    spec_models = {n: ctx.host(f"spec_model_{n}", functools.partial(spec_model, n)) for n in (*SPEC_TARGETS, *SPEC_DRAFTS)}
    configs = spec_configs()
    # The streamed requests: a run recorded before the lesson streamed replays without them.
    stream = ctx.recorded("client_clock")
    if stream:
        ctx.host("client_clock", clock_info)
    done, streamed = request_spec_rounds(ctx, spec_servers(spec_models, configs), repeat, stream)
    plain = {(n, p): done[(f"spec-{n}", p)] for n in (*SPEC_TARGETS, *SPEC_DRAFTS)
             for p in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT) if (f"spec-{n}", p) in done}

    # The cost of one pass of each model alone, and of the target's batched prompt passes.
    costs = [model_cost(name, spec_models[name], plain[(name, SPEC_PROMPT)]) for name in (*SPEC_TARGETS, *SPEC_DRAFTS)]
    batches = {name: prompt_passes(plain, name) for name in SPEC_TARGETS}
    # Every configuration measured, and the arithmetic beside it.
    ms = {c.name: c.ms_per_token for c in costs}
    plain_rows = [plain_run(name, prompt, plain[(name, prompt)]) for name in SPEC_TARGETS
                  for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT)]
    spec_rows = [spec_run(cfg, done[(cfg.label, cfg.prompt)], plain[(cfg.target, cfg.prompt)]) for cfg in configs]
    arithmetic = [spec_arithmetic(r, ms, batches[r.config.target]) for r in spec_rows]
    streams = [spec_stream(label, prompt, done_s, streamed) for (label, prompt), done_s in streamed.items()]

    ctx.settings["speculative"] = SpeculativeSettings(
        n_predict=SPEC_TOKENS, repeat=repeat, temperature=0, seed=SEED, ctx_size=SPEC_CTX,
        prompts={"short": SPEC_PROMPT, "repetitive": SPEC_REPETITIVE_PROMPT}, engine=support,
        runs=[p.record().model_dump() for p in plain_rows] + [s.record().model_dump() for s in spec_rows]).model_dump()
    record_costs(ctx, costs)
    record_measured(ctx, plain_rows, spec_rows)
    render_spec_costs(ctx, costs, batches[SPEC_TARGETS[0]])
    render_spec_measured(ctx, repeat, plain_rows, spec_rows)
    render_spec_arithmetic(ctx, arithmetic)
    # How speculation looks from outside: one streamed request per configuration, timed on the client's clock.
    if streams:
        render_spec_client_clock(ctx, streams)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
