"""Lesson 8 — Why LLM decode is memory-bound (capstone)

The lesson in four parts: its plan (bytesup.store.plans.lesson08: the models, the prompt, the samples and the
servers' shape, recorded once in the run), the requests and `main` here, the arithmetic of its figures
(bytesup.store.facts.lesson08, on bytesup.course.memory_bound and bytesup.course.decodetime), and its view
(bytesup.store.views.lesson08: the tables, their notes and the plot). `bytesup check` judges its claims.

Each decoded token reads every weight once, so decode can be no faster than memory bandwidth ÷ bytes per token. This
script tests that claim on the widths of one model (the same weights stored in fewer or more bytes each) and on larger
models: each on a server of its own, all up at once where they fit in memory together, decode timed going round the
models in turns (a slow spell of the machine then lands on every model alike), each asked for the top token after
"The capital of France is". Effective GB/s = bytes per token × tokens/s; efficiency compares it with the run's one
reading of this host's bandwidth (or --bandwidth-gbs). Points whose weights fit in the last-level cache are marked
cache-resident and kept out of the line. Stated rules that name no verdict describe the sweep
(bytesup.course.memory_bound): between neighbouring widths, whether the speed-up followed the bytes (effective GB/s flat
within the spread) or was no faster; a line tokens/s = the line's bandwidth ÷ bytes, equal relative weight per point,
with its uncertainty and which points lie on it; the free log-log slope, in words.

Then every model is explained (bytesup.course.decodetime): one sequence's step waits on the slower of reading the
weights and one token's arithmetic, plus a fixed cost per block that grows with the bytes per parameter,
t₁ = L × (f + g × W ÷ params) + max(W ÷ B, params × c), one B, one f and one g for every model and one c per weight type
(each type's kernels do their own arithmetic), fitted on every model's step.
Each model is predicted by the terms of the others (not one alone in its weight type: its c would come from its own
step). Its verdict, the term its step waits on, is named where every fit (all the models, and each leave-one-out set)
agrees, the model lies outside its type's band (two standard errors of the crossover, from the leave-one-out fits) and
its two terms differ by more than its steps scatter; else it is mixed: the page's one verdict per width. Each weight
type's crossover, B × c bytes per parameter, where reading a parameter's bytes takes as long as its arithmetic, is
stated, marked on the plot and applied to the published DGX Spark figures. The first server of each weight type also
decodes 2 and 4 sequences at once (the batch view: the weights read once for all) and times a 128-token prefill, the
engine's fastest arithmetic for that type, beside decode's. Samples follow one rule (bytesup.course.robust): a warm-up
per server, at least five samples, the median, outliers shown but never widening an allowance. The bytes model is
carried to context on the Spark's figures: tokens/s at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d).
The conclusion's every sentence is chosen by the run's numbers: where decode waits on memory and where on the
arithmetic, here and on the Spark, and what would move a width across the crossover.

Beside bytes and speed, each width's cost in accuracy: numpy's forward pass (bytesup.models.forward, lesson 4's) on
each width's file, found by the sha256 the catalog writes it with, over the plan's prompts; each position's next-token
distribution against the f32 width's, as llama-perplexity's --kl-divergence (bytesup.course.quantization), with how
each file was made, so the page says which widths are independent. A replay recomputes it where the files are there
and says where they are not.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import contextlib
import functools
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import Field, field_validator

from bytesup.course import decodetime, memory_bound, quantization
from bytesup.course.ceiling import BandwidthReference, server_bandwidth
from bytesup.errors import BytesupError
from bytesup.host import environment, hostbench
from bytesup.lesson import LessonContext, ModelQuery
from bytesup.llama import timed
from bytesup.llama.responses import Completion, shown_token
from bytesup.models import catalog
from bytesup.options import BandwidthGbs, LessonOptions
from bytesup.store.facts.lesson08 import (DecodeModel, ModelInfo, ModelRun, ModelSteps, QuantizationAccuracy,
                                          accuracy_of, crossover_of, decode_efficiency_samples, explained,
                                          fastest_memory_gbs, fit_rows, fit_terms, model_steps, model_summary,
                                          not_recomputed, prefill_rows, published_point, spark_context_prediction,
                                          spark_terms, sweep_points, sweep_row, top_answer, width_accuracy, width_file,
                                          width_logits)
from bytesup.store.plans.lesson08 import (MEMORY_SHARE, MIN_SAMPLES, PLAN_READS, PLAN_VALUE, AccuracyPlan, Plan,
                                          Served, batch_bodies, current_plan, flags_shape, in_turns, is_gguf_path,
                                          parse_sizes, plan_shape, read_plan)
from bytesup.store.views.lesson08 import (bandwidth_note, plot_decode_vs_bytes, servers_note, show_accuracy,
                                          show_conclusion, show_context_prediction, show_decode_model, show_fit,
                                          show_models, show_prefill, show_steps, show_sweep, shows,
                                          verdict_sentences)
from bytesup.units import GB, PINNED

TITLE = "Why LLM decode is memory-bound"

# The top token at temperature 0 from the full softmax (post_sampling_probs false); cache_prompt false.
TOP = {"n_predict": 1, "n_probs": 3, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}


class Options(LessonOptions):
    """This lesson's options (`ctx.options`): the models to sweep, and a bandwidth of your own for the ceiling."""

    sizes: list[str] | None = Field(
        default=None, min_length=1,
        description="the model presets to sweep, comma-separated on the command line (see `bytesup model build --list`)",
        json_schema_extra={"hint": "give one or more model names separated by commas, e.g. --sizes tiny-q8_0,small-q8_0 "
                                   "(`bytesup model build --list` names them)"})
    bandwidth_gbs: BandwidthGbs = None

    @field_validator("sizes", mode="before")
    @classmethod
    def _split_sizes(cls, value: Any) -> Any:
        """`--sizes a, b,,c` → ["a", "b", "c"]; a list is stripped the same way."""
        if value is None:
            return None
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list):
            return names  # pydantic says what is wrong with it
        return [n.strip() if isinstance(n, str) else n for n in names if not isinstance(n, str) or n.strip()]


# --- the lesson ---------------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    local = facts["local"]  # our own servers run on this host, with the user's server flags
    plan = recorded_plan(ctx)
    sizes = parse_sizes(ctx.options.sizes, plan.default_sizes) if local else []
    given = ctx.options.bandwidth_gbs
    ctx.settings.update({"pinned": PINNED, "top": TOP, "n_predict": plan.n_predict, "prompt": plan.prompt,
                         "local": local, "sizes": sizes, "repeat": ctx.repeat, "bandwidth_gbs": given,
                         "host_bandwidth_applies": facts["host_bandwidth_applies"], "tolerance": memory_bound.TOLERANCE,
                         "sample_plan": {"warmup": plan.warmup, "samples": plan.samples, "levels": list(plan.levels)},
                         "model_tolerance": decodetime.TOLERANCE})
    if plan.prefill is not None:
        ctx.settings["prefill_plan"] = plan.prefill.model_dump()

    # The run's bandwidth (taken before the decode work, shared by every lesson); only where it feeds decode.
    # Cache-resident is a question about this CPU's cache: only when our servers decode on it.
    bw = ctx.run_bandwidth() if facts["host_bandwidth_applies"] else None
    ref = server_bandwidth(bw["gb_per_s"]["median"] if bw else None, host_applies=facts["host_bandwidth_applies"],
                           given_gbs=given)
    llc = (bw or {}).get("llc_bytes") if facts["host_bandwidth_applies"] else None
    available = ctx.host("available_memory_bytes", environment.available_memory) if local else None
    matvec = matvec_reading(ctx, bw, plan)

    # 1. The sweep: each model on a server of its own; the answer, then the timed decodes at P = 1, 2 and 4.
    runs, skipped, turns = sweep_local(ctx, sizes, available, plan) if local else (sweep_remote(ctx, facts, plan), [], False)
    after = ctx.run_bandwidth_after() if bw is not None else None
    # What each width of the trained model costs in accuracy, from the files' bytes (after the timed work).
    accuracy = quantization_accuracy(ctx, runs, plan.accuracy)

    # 2. The points described (bytesup.course.memory_bound: stated rules, tested on their own), and one verdict per
    # width: the decode-time model's, from its terms fitted on every model's steps (bytesup.course.decodetime).
    memory_max = fastest_memory_gbs(bw, after)
    points = sweep_points(runs, llc, memory_max)
    analysis = memory_bound.analyse(points)
    answers = {r.info.name: r.answer for r in runs}
    steps = [model_steps(r) for r in runs]
    widths = [s.width() for s in steps]
    terms, why_not = fit_terms(widths)
    fits = decodetime.leave_one_out(widths) if terms is not None else {}
    model_rows = explained(widths, terms, plan.levels, fits) if terms is not None else []
    cross = crossover_of(widths, terms, fits, model_rows) if terms is not None else None
    verdicts = {r.model: r.waits_on for r in model_rows}
    rows = [sweep_row(p, analysis["line"][p["name"]], verdicts.get(p["name"]), ref.gbs if ref else None,
                      answers.get(p["name"])) for p in points]
    record_measurements(ctx, points, ref, plan)
    record_prefill(ctx, runs, plan)
    show_models(ctx, runs, points, llc, memory_max, bw, skipped, available, facts, local)
    show_sweep(ctx, rows, published_point(),
               verdict_sentences(points, analysis, answers, ref, llc, plan.prompt, verdicts, why_not),
               bandwidth_note(bw, ref, given, facts), plan,
               servers_note(plan_shape(None, plan), flags_shape(ctx.identity.get("server", {}).get("flags") or {}),
                            plan.levels, turns) if runs and local else None)
    if accuracy is not None:
        ctx.fact(accuracy)
        show_accuracy(ctx, accuracy, runs, points, plan.prompt, answers)
    show_steps(ctx, analysis["steps"])

    # 3. The fit and the run's bandwidth, before and after the decode work.
    record_fit(ctx, analysis, bw, after)
    show_fit(ctx, analysis, fit_rows(analysis, ref, bw, after, matvec), bw, after, ctx.run_bandwidth_drift())

    # 4. Every width explained: the decode-time model's terms from the step times, predicted beside measured, and
    # the crossover. The fact (for `bytesup check`) is recorded where the lesson decoded several sequences at once.
    spark = spark_terms()
    prefills = prefill_rows(runs, terms) if terms is not None else []
    if any(r.together for r in runs):
        record_decode_model(ctx, runs, steps)
    if any(r.together for r in runs) or terms is not None:
        show_decode_model(ctx, [w.name for w in widths], model_rows, terms, why_not, ref, spark, plan.levels, matvec,
                          cross, decodetime.not_held_out(widths))
        show_prefill(ctx, prefills, terms, plan)

    # 5. The bytes model with context, on the published figures; 6. the picture, on log-log axes, and what the run
    # shows; 7. the conclusion.
    show_context_prediction(ctx, spark_context_prediction(), published_point())
    plot_decode_vs_bytes(ctx, points, analysis["fit"], ref, cross, widths)
    ctx.shows(shows(cross, why_not, points), plot="decode_vs_bytes")  # what this run shows, first on the page
    show_conclusion(ctx, cross, why_not, spark, prefills, model_rows)
    return ctx.finish()


# --- requests: the plan, the models and their decodes ----------------------------------------------

def recorded_plan(ctx: LessonContext) -> Plan:
    """The run's plan, recorded once as a host value; a replay reads the recorded run's, or for a run recorded
    before plans, the one it followed, from the host values it did record (bytesup.store.plans.lesson08). Its samples
    follow the run's one rule, ctx.samples: --repeat, and at least MIN_SAMPLES."""
    return ctx.plan(lambda: current_plan(ctx.samples(MIN_SAMPLES)).model_dump(mode="json"),
                    lambda stored: read_plan({PLAN_VALUE: stored}), read_plan, PLAN_READS)


def preset_summary(name: str) -> dict:
    """The header summary of a sweep model: a GGUF path as it is, a preset built or fetched here first when missing."""
    if is_gguf_path(name):
        return model_summary(str(Path(name).resolve()), None)
    return model_summary(str(catalog.ensure_model(name)), name)


def served_model(ctx: LessonContext, facts: dict) -> ModelInfo:
    """The user's model: from its GGUF when readable here, else from the server's /v1/models meta."""
    if facts["model_readable"]:
        return ModelInfo.of(ctx.host("model_info", lambda: model_summary(str(ctx.require_model()), None)))
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 8 needs the served model's size: its file is not readable here and /v1/models "
                           "gives no meta.size. Pass --model PATH.gguf.")
    return ModelInfo(served["name"], int(meta["n_params"]), int(meta["size"]), meta.get("ftype"),
                     n_embd=meta.get("n_embd"))


def matvec_reading(ctx: LessonContext, bw: dict | None, plan: Plan) -> dict | None:
    """Bandwidth read the way decode reads (hostbench.measure_matvec_bandwidth) over the run's working set,
    with the server's threads; only where the host's bandwidth feeds decode and the plan takes it."""
    if bw is None or not plan.matvec:
        return None
    return ctx.host("matvec_bandwidth", lambda: hostbench.measure_matvec_bandwidth(
        bw["threads"], bw.get("working_set_bytes") or bw["bytes_per_sample"]))


def batches_at(srv, plan: Plan, levels: tuple[int, ...]) -> dict[int, list[float]]:
    """Per-sequence decode tokens/s at each P of `levels`: plan.rounds(P) batches of P decodes sent at once."""
    together = {}
    for P in levels:
        batches = [timed.concurrent_completions(srv, plan.prompt, batch_bodies(P, r, plan.n_predict))[0]
                   for r in range(plan.rounds(P))]
        together[P] = [v for batch in batches for v in timed.decode_samples(batch)]
    return together


def prefill_at(srv, plan: Plan, levels: tuple[int, ...]) -> list[float]:
    """Prefill tokens/s of a plan.prefill.tokens-token prompt (one token generated), after its warm-up; only on the
    first model of a weight type (`levels` given) and where the plan has a prefill."""
    if not levels or plan.prefill is None:
        return []
    ids = timed.long_prompt_tokens(srv, plan.prefill.tokens)
    done = timed.timed_completions(srv, ids, 1, plan.prefill.warmup + plan.prefill.samples)
    return timed.prefill_samples(done[plan.prefill.warmup:])


def measure_decode(ctx: LessonContext, srv, info: ModelInfo, plan: Plan, levels: tuple[int, ...]) -> ModelRun:
    """The top token after the prompt, the warm-up (plan.warmup_n_predict tokens), plan.samples timed decodes of
    plan.n_predict tokens (PINNED), then at each P of `levels` batches of P decodes sent at once, then the prefill."""
    answer = top_answer(srv.completion(plan.prompt, **TOP))
    if plan.warmup_tokens is None:  # before version 8 the warm-ups were as long as the timed decodes, in one go
        done = timed.timed_completions(srv, plan.prompt, plan.n_predict, plan.warmup + plan.samples,
                                       track=lambda it: ctx.track(it, info.name))[plan.warmup:]
    else:
        timed.timed_completions(srv, plan.prompt, plan.warmup_tokens, plan.warmup)
        done = timed.timed_completions(srv, plan.prompt, plan.n_predict, plan.samples,
                                       track=lambda it: ctx.track(it, info.name))
    return ModelRun(info, timed.decode_samples(done), answer, batches_at(srv, plan, levels), prefill_at(srv, plan, levels))


def models_to_serve(ctx: LessonContext, sizes: list[str], available: int | None,
                    plan: Plan) -> tuple[list[Served], list[str]]:
    """The models to serve, built or fetched first where missing; those too big for memory skipped. The first
    model of each weight type also decodes plan.levels sequences at once (its step-time line); a later one of
    the same type is left for the model to predict."""
    served, skipped, seen = [], [], set()
    for name in sizes:
        ctx.step(f"building or reusing {name}")
        info = ModelInfo.of(ctx.host(f"model_{name}", functools.partial(preset_summary, name)))
        if available and info.tensor_bytes > MEMORY_SHARE * available:
            skipped.append(f"{name} ({info.tensor_bytes / GB:.3g} GB)")
            continue
        served.append(Served(name, info, () if info.weight_type in seen else plan.levels))
        seen.add(info.weight_type)
    return served, skipped


def serve(ctx: LessonContext, s: Served, plan: Plan):
    """A server of its own for one model, with the user's server flags and the plan's shape."""
    return ctx.local_server(f"preset-{s.name}", plan_shape(Path(s.info.path) if s.info.path else None, plan))


def sweep_in_turns(ctx: LessonContext, served: list[Served], plan: Plan) -> list[ModelRun]:
    """Every model on a server of its own, all up at once: each one's answer and warm-up, then plan.samples rounds
    of one timed decode per model in turn, then each one's batches and prefill. Each server sees the same requests
    in the same order as one after another, but a slow spell of the machine lands on every model's samples alike,
    not on one model's median: the decode-time model compares the models with each other."""
    with contextlib.ExitStack() as stack:
        servers = []
        for s in served:
            ctx.step(f"starting a server for {s.name}")
            servers.append(stack.enter_context(serve(ctx, s, plan)))
        answers = [top_answer(srv.completion(plan.prompt, **TOP)) for srv in servers]
        for srv in servers:
            timed.timed_completions(srv, plan.prompt, plan.warmup_n_predict, plan.warmup)
        done: list[list[Completion]] = [[] for _ in servers]
        for _ in ctx.track(range(plan.samples), f"decoding with the {len(servers)} models in turn"):
            for i, srv in enumerate(servers):
                done[i] += timed.timed_completions(srv, plan.prompt, plan.n_predict, 1)
        runs = []
        for s, srv, answer, d in zip(served, servers, answers, done, strict=True):
            if s.levels:
                ctx.step(f"decoding {' and '.join(map(str, s.levels))} sequences at once with {s.name}")
            runs.append(ModelRun(s.info, timed.decode_samples(d), answer, batches_at(srv, plan, s.levels),
                                 prefill_at(srv, plan, s.levels)))
    return runs


def sweep_local(ctx: LessonContext, sizes: list[str], available: int | None,
                plan: Plan) -> tuple[list[ModelRun], list[str], bool]:
    """Each model on a server of its own, with the user's server flags (models_to_serve), measured in turns where
    they fit in memory together (sweep_in_turns), else one after another; and whether in turns."""
    served, skipped = models_to_serve(ctx, sizes, available, plan)
    if in_turns(plan, served, available):
        return sweep_in_turns(ctx, served, plan), skipped, True
    runs = []
    for s in served:
        ctx.step(f"decoding with {s.name}")
        with serve(ctx, s, plan) as srv:
            runs.append(measure_decode(ctx, srv, s.info, plan, s.levels))
    return runs, skipped, False


def sweep_remote(ctx: LessonContext, facts: dict, plan: Plan) -> list[ModelRun]:
    """Only the one model the user's server serves (one slot assumed: no step-time lines)."""
    info = served_model(ctx, facts)
    ctx.step(f"decoding with {info.name} on the user's server")
    return [measure_decode(ctx, ctx.server, info, plan, ())]


# --- the accuracy: numpy's forward pass on each width's file ------------------------------------------

def quantization_accuracy(ctx: LessonContext, runs: list[ModelRun], plan: AccuracyPlan | None,
                          logits_of: Callable[..., tuple[np.ndarray, tuple[bytes, ...]]] = width_logits
                          ) -> QuantizationAccuracy | None:
    """What each width of the trained model the sweep measured costs in accuracy against the plan's reference width:
    numpy's pass on each file found here by its sha256 (ctx.file_with), or why not. None where the plan has no
    accuracy or the sweep measured the trained model at one width at most."""
    widths = [(r.info, f) for r in runs if (f := width_file(r.info)) is not None]
    if plan is None or len(widths) < 2:
        return None
    ctx.step("numpy's forward pass on each width's file")
    ids, lengths = tuple(p.ids for p in plan.prompts), [(p.text, len(p.ids)) for p in plan.prompts]
    files = {info.name: f for info, f in widths}
    if plan.reference not in files:
        why = (f"the accuracy is measured against {plan.reference}, which this run did not sweep "
               f"(add it to --sizes)")
        return accuracy_of(plan.reference, lengths, not_recomputed(widths, why))
    paths = {name: ctx.file_with(f) for name, f in files.items()}  # each file's sha256 read once
    reference_path = paths[plan.reference]
    if reference_path is None:
        why = ctx.file_not_here(files[plan.reference], f"The accuracy against {plan.reference}")
        return accuracy_of(plan.reference, lengths, not_recomputed(widths, why))
    reference, vocabulary = logits_of(str(reference_path), files[plan.reference]["sha256"], ids)

    def shown(token_id: int) -> str:
        return shown_token("", list(vocabulary[token_id]))

    out = []
    for info, f in widths:
        path = paths[info.name]
        if path is None:
            out += not_recomputed([(info, f)], ctx.file_not_here(f, "The accuracy"))
            continue
        logits, _ = logits_of(str(path), f["sha256"], ids)
        agree = quantization.agreement(reference, logits)
        top_id, top_p = quantization.top_token(logits[len(ids[0]) - 1])
        out.append(width_accuracy(info.name, f["file"], agree, lengths, shown(agree.dp_token), (shown(top_id), top_p)))
    return accuracy_of(plan.reference, lengths, out)


# --- what the lesson records: measurements and facts, never from a rendering function ----------

def record_measurements(ctx: LessonContext, points: list[dict], ref: BandwidthReference | None, plan: Plan) -> None:
    for p in points:
        setting = {"preset": p["name"], "bytes_per_token": p["bytes"]}
        ctx.measure("decode_tokens_per_s", "tokens/s", p["samples"], higher_is_better=True, settings=setting,
                    description=f"decode after a short prompt, n_predict {plan.n_predict}, from the server's timings")
        if ref:
            ctx.measure("decode_efficiency", "%", decode_efficiency_samples(p["samples"], p["bytes"], ref.gbs),
                        # A stated bandwidth is part of the configuration; a measured one is not (it
                        # varies run to run, and runs must still join on these settings to compare).
                        higher_is_better=True,
                        settings={**setting, "cache_resident": p["cache_resident"],
                                  **({} if ref.host_cpu else {"bandwidth_gbs": ref.gbs})},
                        description=f"effective GB/s of each decode sample ÷ the bandwidth, {ref.label}")


def record_prefill(ctx: LessonContext, runs: list[ModelRun], plan: Plan) -> None:
    """Every timed prefill, whether or not the decode-time model could be fitted."""
    for r in runs:
        if r.prefill and plan.prefill is not None:
            ctx.measure("prefill_tokens_per_s", "tokens/s", r.prefill, higher_is_better=True,
                        settings={"preset": r.info.name, "prompt_tokens": plan.prefill.tokens},
                        description="prefill of a prompt of prompt_tokens tokens, one generated, from the server's timings")


def record_fit(ctx: LessonContext, analysis: dict, bw: dict | None, after: dict | None) -> None:
    """The line's bandwidth, and the run's bandwidth readings before and after the decode work."""
    fit = analysis["fit"]
    if fit:
        ctx.measure("fit_bandwidth_gb_per_s", "GB/s", [fit["gbs"]], higher_is_better=True,
                    settings={"models": analysis["basis"]},
                    description="the line's bandwidth: geometric mean of effective GB/s over the widths a step that "
                                "followed the bytes joins (a description, not the decode-time model's B)")
    if bw is not None:
        ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=True,
                    settings={"threads": bw["threads"]}, description=bw["method"])
        if after is not None:
            ctx.measure("read_bandwidth_gb_per_s_after", "GB/s", after["gb_per_s"]["samples"], higher_is_better=True,
                        settings={"threads": after["threads"]}, description=after["method"])


def record_decode_model(ctx: LessonContext, runs: list[ModelRun], steps: list[ModelSteps]) -> None:
    """The samples of every P and the model's inputs as a fact, for `bytesup check` to recompute."""
    for r in runs:
        for P, samples in r.together.items():
            ctx.measure("decode_tokens_per_s_per_sequence", "tokens/s", samples, higher_is_better=True,
                        settings={"preset": r.info.name, "parallel": P},
                        description=f"each of {P} sequences decoded together, from its own timings")
    ctx.fact(DecodeModel(form="L * f + max(W / B, n * c) at P = 1, each model predicted by the others",
                         tolerance=decodetime.TOLERANCE, widths=steps))


def models_needed(query: ModelQuery) -> list[str]:
    """The models a live run makes before its first lesson for this one: the sweep's (--sizes, else the plan's),
    where it sweeps (on this host); a GGUF path or an unknown name is left to the lesson."""
    if not query.local:
        return []
    sizes = query.options.sizes or current_plan(query.repeat).default_sizes
    return [n for n in sizes if n in catalog.model_names()]


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
