"""Lesson 5b — Speculative decoding

Lesson 5's loop makes one token per pass of the model. A draft guesses several tokens ahead and the
model checks them all in one pass: every accepted guess is a token without a pass of its own. This
script measures it on servers it starts itself: the default model's f32 width alone, with a draft
(its own weights in q4_1 and q8_0) at two draft lengths, and with llama.cpp's draft-free n-gram
speculation; each beside the arithmetic of `bytesup.course.speculative` (1 + a + … + a^k tokens per
pass, and a speed-up predicted from the measured cost of each model's pass), and seen from outside
as tokens arriving in bursts on the client's clock.

Its parts: the plan (what it asks: bytesup.store.plans.lesson05b), then `main`, the requests, the arithmetic
(one record per figure, declared in the view) and what it records; the view (tables, notes, plot:
bytesup.store.views.lesson05b).
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import contextlib
import functools
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bytesup.course import clientclock, speculative
from bytesup.course.ceiling import Spread
from bytesup.course.speculative import Stream
from bytesup.lesson import LessonContext, ModelQuery
from bytesup.llama import process
from bytesup.llama.client import clock_info
from bytesup.llama.responses import Completion, StreamedCompletion
from bytesup.llama.shapes import ServerShape
from bytesup.llama.timed import decode_samples, streamed_completions, timed_completions
from bytesup.models import catalog
from bytesup.models.gguf import read_model_info
from bytesup.store.plans.lesson05b import READS, Plan, current, from_older, read
from bytesup.store.views import lesson05b
from bytesup.store.views.lesson05b import Arithmetic, Cost, Measured, StreamRow
from bytesup.units import GB

TITLE = "Speculative decoding"

NGRAM_DRAFT_MAX = 48  # ngram-simple's m-gram (llama.cpp's default): the most it drafts at once
# A gap below this share of the plain target's median gap on the same prompt joins a token to the one
# before: tokens of one speculative pass arrive microseconds apart, passes a whole pass apart.
TOGETHER = 0.25


def main(ctx: LessonContext):
    facts = ctx.server_facts()
    if not facts["local"]:
        ctx.note(f"Speculative decoding was not measured: it needs servers this script starts on this host, and "
                 f"{facts['reason']}.")
        lesson05b.show_illustration(ctx)
        ctx.shows(lesson05b.not_measured(f"it needs servers this script starts on this host, and {facts['reason']}"))
        return ctx.finish()
    support = ctx.host("speculation_support", process.speculation_support)
    if not support["supported"]:
        ctx.note(f"Speculative decoding was not measured: the {support['engine']} engine here cannot speculate "
                 f"({support['reason']}). Run this lesson with an engine that can (a llama-server build whose "
                 f"--help lists --spec-type, through LLAMA_SERVER) to measure it.")
        lesson05b.show_illustration(ctx)
        ctx.shows(lesson05b.not_measured(f"the {support['engine']} engine here cannot speculate ({support['reason']})"))
        return ctx.finish()
    plan = the_plan(ctx)
    ctx.step("speculative decoding: the models (derived from the default model once)")
    spec_models = {n: ctx.host(f"spec_model_{n}", functools.partial(spec_model, n)) for n in (*plan.targets, *plan.drafts)}
    configs = spec_configs(plan)
    if plan.stream:  # the streamed requests are timed on this clock
        ctx.host("client_clock", clock_info)
    done, streamed = request_spec_rounds(ctx, plan, spec_servers(plan, spec_models, configs))
    plain = {(n, p): done[(f"spec-{n}", p)] for n in (*plan.targets, *plan.drafts)
             for p in (plan.short, plan.repetitive) if (f"spec-{n}", p) in done}

    # The cost of one pass of each model alone, and of the target's batched prompt passes.
    costs = model_costs(plan, spec_models, plain)
    batches = {name: prompt_passes(plan, plain, name) for name in plan.targets}
    # Every configuration measured (the targets alone first: the reference), and the arithmetic beside it.
    alone = [(name, prompt) for name in plan.targets for prompt in (plan.short, plan.repetitive)]
    answers = [plain[k] for k in alone] + [done[(cfg.label, cfg.prompt)] for cfg in configs]
    rows = ([plain_row(plan, name, prompt, plain[(name, prompt)]) for name, prompt in alone]
            + [spec_row(plan, cfg, done[(cfg.label, cfg.prompt)], plain[(cfg.target, cfg.prompt)]) for cfg in configs])
    ms = {c.model: c.one_pass for c in costs}
    arithmetic = [spec_arithmetic(plan, cfg, spec_counts(done[(cfg.label, cfg.prompt)]), row.speedup, ms, batches[cfg.target])
                  for cfg, row in zip(configs, rows[len(alone):], strict=True)]
    streams = [spec_stream(plan, label, prompt, done_s, streamed) for (label, prompt), done_s in streamed.items()]

    ctx.settings["speculative"] = SpeculativeSettings(
        n_predict=plan.n_predict, repeat=plan.rounds, temperature=0, seed=plan.seed, ctx_size=plan.ctx_size,
        prompts=plan.prompts, engine=support,
        runs=[run_record(row, a).model_dump() for row, a in zip(rows, answers, strict=True)]).model_dump()
    record_costs(ctx, plan, costs, plain)
    record_measured(ctx, plan, rows, answers)
    lesson05b.show_costs(ctx, plan, costs, batches[plan.targets[0]])
    lesson05b.show_measured(ctx, plan, rows)
    lesson05b.show_arithmetic(ctx, plan, arithmetic)
    # How speculation looks from outside: one streamed request per configuration, timed on the client's clock.
    if streams:
        lesson05b.show_client_clock(ctx, plan, streams, [stream_row(plan, r) for r in streams], TOGETHER)

    # What this run shows: the plain speed, the best draft's and the n-grams' speed-ups, first on the page.
    ctx.shows(lesson05b.shows(rows), plot="speculative_speedups" if lesson05b.plot_speedups(ctx, rows) else None)
    return ctx.finish()


def the_plan(ctx: LessonContext) -> Plan:
    """What the lesson asks, recorded once in the run (the host value `plan`). A run recorded before plans existed is
    read from the host values it recorded, and store.plans.lesson05b upgrades it. Its rounds are --repeat capped at
    MAX_ROUNDS there: the lesson's own cap, not the run's rule for samples."""
    return ctx.plan(lambda: current(ctx.repeat).model_dump(mode="json"), read, from_older, READS)


# --- requests: what the servers (and this host) answer ----------------------------------------

def spec_model(name: str) -> dict[str, Any]:
    """A course model's file (fetched or derived the first time) and its bytes per token (a host value)."""
    path = catalog.ensure_model(name)
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


def spec_configs(plan: Plan) -> list[SpecConfig]:
    configs = []
    for target in plan.targets:
        configs += [SpecConfig(target, "draft-simple", draft, k, plan.short) for draft in plan.drafts for k in plan.draft_lengths]
        configs.append(SpecConfig(target, "ngram-simple", None, None, plan.repetitive))
    return configs


@dataclass(frozen=True)
class SpecServer:
    label: str
    model: dict[str, Any]
    flags: list[str]
    prompts: list[str]


def spec_servers(plan: Plan, spec_models: dict[str, dict[str, Any]], configs: list[SpecConfig]) -> list[SpecServer]:
    """Each model alone (its decode speed is the cost of one of its passes; a target on both prompts),
    then one server per speculative configuration."""
    servers = [SpecServer(f"spec-{n}", spec_models[n], [], [plan.short, plan.repetitive] if n in plan.targets else [plan.short])
               for n in (*plan.targets, *plan.drafts)]
    for cfg in configs:
        draft_path = spec_models[cfg.draft]["path"] if cfg.draft else None
        servers.append(SpecServer(cfg.label, spec_models[cfg.target], spec_flags(cfg.spec_type, draft_path, cfg.draft_n_max),
                                  [cfg.prompt]))
    return servers


def request_spec_rounds(ctx: LessonContext, plan: Plan, servers: list[SpecServer]
                        ) -> tuple[dict[tuple[str, str], list[Completion]], dict[tuple[str, str], StreamedCompletion]]:
    """Greedy completions on servers of our own, all started first, then asked in turn, one round
    after another: a change in the machine's load while we measure falls on every configuration
    alike instead of on whichever ran at that moment. With the plan's `stream`, then one streamed request more
    on each target's server (the drafts alone are left out), for the client's clock."""
    with contextlib.ExitStack() as stack:
        clients = {}
        for s in servers:
            ctx.step(f"speculative decoding: starting {s.label}")
            shape = ServerShape(Path(s.model["path"]), slots=1, context=plan.ctx_size, extra=tuple(s.flags))
            clients[s.label] = stack.enter_context(ctx.local_server(s.label, shape))
        done: dict[tuple[str, str], list[Completion]] = {}
        ctx.step("speculative decoding: every configuration in turn")
        for _ in ctx.track(range(plan.rounds), "rounds over every configuration"):
            for s in servers:
                for prompt in s.prompts:
                    # PINNED: temperature 0 and a fixed seed, so every configuration must give the same text.
                    done.setdefault((s.label, prompt), []).extend(timed_completions(
                        clients[s.label], prompt, plan.n_predict, 1, seed=plan.seed, return_tokens=True))
        streamed: dict[tuple[str, str], StreamedCompletion] = {}
        drafts_alone = {f"spec-{n}" for n in plan.drafts}
        for s in (s for s in servers if plan.stream and s.label not in drafts_alone):
            ctx.step(f"speculative decoding: streaming on {s.label}")
            for prompt in s.prompts:
                streamed[(s.label, prompt)] = streamed_completions(clients[s.label], prompt, plan.n_predict, 1,
                                                                   seed=plan.seed)[0]
        return done, streamed


# --- arithmetic: typed results from the answers, one record per figure ------------------------------

def spec_counts(done: list[Completion]) -> speculative.Counts:
    return speculative.counts((c.timings.predicted_n, c.timings.draft_n, c.timings.draft_n_accepted) for c in done)


def model_costs(plan: Plan, spec_models: dict[str, dict[str, Any]],
                plain: dict[tuple[str, str], list[Completion]]) -> list[Cost]:
    """Each model alone on the short prompt, the first target first: its decode speed, hence the cost of one of its
    passes (against the target's), and the weights it reads per second."""
    names = (*plan.targets, *plan.drafts)
    samples = {n: decode_samples(plain[(n, plan.short)]) for n in names}
    target_ms = 1000.0 / statistics.median(samples[names[0]])
    costs = []
    for n in names:
        model, decode = spec_models[n], Spread.of(samples[n])
        costs.append(Cost(n, "target" if n in plan.targets else "draft", model["weight_type"], model["tensor_bytes"],
                          decode, 1000.0 / decode.median, 1000.0 / decode.median / target_ms,
                          model["tensor_bytes"] * decode.median / GB))
    return costs


def prompt_passes(plan: Plan, plain: dict[tuple[str, str], list[Completion]], target: str) -> dict[str, tuple[int, float]]:
    """A target's prompt passes, a batch of tokens in one pass, on each prompt: (tokens, median prompt_ms)."""
    found = {}
    for prompt in (plan.short, plan.repetitive):
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


def run_record(row: Measured, done: list[Completion]) -> PlainRecord:
    """A row's run as the settings keep it for `bytesup check`: its server's flags and every repeat's tokens, and a
    speculative run's draft counters."""
    tokens = [c.tokens for c in done]
    if row.speculation == "none":
        return PlainRecord(label=row.label, target=row.target, spec_type="none", draft=None, draft_n_max=None,
                           prompt=row.prompt, server_flags=[], tokens=tokens)
    return SpecRecord(label=row.label, target=row.target, spec_type=row.speculation, draft=row.draft,
                      draft_n_max=row.draft_length, prompt=row.prompt,
                      server_flags=spec_flags(row.speculation, row.draft, row.draft_length), tokens=tokens,
                      draft_n=[c.timings.draft_n for c in done], draft_n_accepted=[c.timings.draft_n_accepted for c in done])


def plain_row(plan: Plan, target: str, prompt: str, done: list[Completion]) -> Measured:
    """A target alone on one prompt: the reference of the configurations on that prompt, its repeats agreeing."""
    samples, tokens = decode_samples(done), [c.tokens for c in done]
    agree = all(speculative.first_difference(t, tokens[0]) is None for t in tokens)
    return Measured(target, "none", None, None, plan.prompt_name(prompt), Spread.of(samples), None, None,
                    None, 1.0, 1.0, "reference" if agree else "repeats differ")


def spec_row(plan: Plan, cfg: SpecConfig, done: list[Completion], plain: list[Completion]) -> Measured:
    """A speculative configuration against the plain target on the same prompt: its speed-up over the target's median,
    its counters, and whether every repeat gave the plain run's tokens."""
    samples, counts = decode_samples(done), spec_counts(done)
    decode, base = Spread.of(samples), statistics.median(decode_samples(plain))
    bad = [d for d in (speculative.first_difference(c.tokens, plain[0].tokens) for c in done) if d is not None]
    return Measured(cfg.target, cfg.spec_type, cfg.draft, cfg.draft_n_max, plan.prompt_name(cfg.prompt), decode,
                    counts.drafted, counts.accepted, counts.acceptance if counts.reported else None,
                    counts.tokens_per_pass, decode.median / base,
                    "identical" if not bad else f"differ from token {min(bad) + 1}")


def spec_arithmetic(plan: Plan, cfg: SpecConfig, counts: speculative.Counts, speedup: float, ms_per_token: dict[str, float],
                    batches: dict[str, tuple[int, float]]) -> Arithmetic:
    """A configuration's counts and measured speed-up beside 1 + a + … + a^k and the speed-up its pass costs predict."""
    k = cfg.draft_n_max if cfg.draft and cfg.draft_n_max is not None else NGRAM_DRAFT_MAX
    draft_ms = ms_per_token[cfg.draft] if cfg.draft else 0.0
    p = speculative.predict(counts, k, draft_ms, ms_per_token[cfg.target], batches[plan.short], batches[plan.repetitive])
    label = f"{cfg.draft} k={k}" if cfg.draft else f"ngram-simple (m-gram ≤ {k})"
    return Arithmetic(label, cfg.target, counts.acceptance if counts.reported else None, k, p.expected,
                      counts.tokens_per_pass, counts.tokens_per_pass / p.expected if p.expected else None, p.draft_cost,
                      counts.drafted_per_pass, p.check_cost, p.ideal, p.predicted, speedup,
                      speedup / p.predicted if p.predicted > 0 else None)


def spec_stream(plan: Plan, label: str, prompt: str, done: StreamedCompletion,
                streamed: dict[tuple[str, str], StreamedCompletion]) -> Stream:
    """A streamed request on the client's clock; its bursts are split at TOGETHER × the plain target's median gap."""
    target = next(t for t in plan.targets if label.startswith(f"spec-{t}"))
    plain = streamed[(f"spec-{target}", prompt)]
    plain_times = clientclock.client_times(plain.arrivals(), plain.ended_ms)
    return Stream(label, prompt, clientclock.client_times(done.arrivals(), done.ended_ms), done.timings.predicted_n,
                  done.timings.draft_n_accepted or 0, TOGETHER * statistics.median(plain_times.itl_ms))


def stream_row(plan: Plan, r: Stream) -> StreamRow:
    gaps = r.client.itl_ms
    p50, p90, p99 = (clientclock.percentile(gaps, q) for q in (50, 90, 99))
    return StreamRow(r.label.removeprefix("spec-"), plan.prompt_name(r.prompt), r.client.n, p50, p90, p99,
                     sum(g < r.threshold_ms for g in gaps), len(r.bursts), r.server_passes, max(r.bursts))


# --- what the lesson records: measurements ----------------------------------------------------

def record_costs(ctx: LessonContext, plan: Plan, costs: list[Cost], plain: dict[tuple[str, str], list[Completion]]) -> None:
    for c in costs:
        ctx.measure("spec_model_decode_tokens_per_s", "tokens/s", decode_samples(plain[(c.model, plan.short)]),
                    higher_is_better=True, settings={"model": c.model, "role": c.role, "n_predict": plan.n_predict},
                    description="one model alone: (predicted_n − 1) ÷ predicted_ms, the cost of one of its passes")


def record_measured(ctx: LessonContext, plan: Plan, rows: list[Measured], answers: list[list[Completion]]) -> None:
    for row, done in zip(rows, answers, strict=True):
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", decode_samples(done), higher_is_better=True,
                    settings={"target": row.target, "spec_type": row.speculation, "draft": row.draft,
                              "draft_n_max": row.draft_length, "prompt": row.prompt, "n_predict": plan.n_predict})


def models_needed(query: ModelQuery) -> list[str]:
    """The models a live run makes before its first lesson for this one: the plan's targets and drafts, where the
    lesson starts servers of its own (on this host)."""
    plan = current(query.repeat)
    return [*plan.targets, *plan.drafts] if query.local else []


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
