"""Lesson 8 — Why LLM decode is memory-bound (capstone)

Each decoded token reads every weight once, so decode can be no faster than memory bandwidth ÷
bytes per token. This script tests that claim on the widths of one model (the same weights stored
in fewer or more bytes each) and on larger models beyond them: it serves each on a server of its
own, all up at once where they fit in memory together, measures decode tokens/s going round the
models in turns (a slow spell of the machine then lands on every model alike), and asks each for
the top token after "The capital of France is". Effective GB/s = bytes per token × tokens/s; efficiency compares it with the
run's one reading of this host's bandwidth (or --bandwidth-gbs). Points whose weights fit in the
last-level cache are marked cache-resident and kept out of the fit. The verdicts follow stated
rules (bytesup.course.memory_bound): between neighbouring widths, memory-bound where effective GB/s stays flat
within the spread (tokens/s follows 1 ÷ bytes), compute-bound where fewer bytes are not faster; a
fit tokens/s = B ÷ bytes with equal relative weight per point gives the bandwidth decode achieved,
with its uncertainty, and which points lie on that line. Then every model is explained (bytesup.course.decodetime): one
sequence's step waits on the slower of reading the weights and one token's arithmetic, plus a fixed
cost per block, t₁ = L × f + max(W ÷ B, n × c), with one bandwidth, one arithmetic cost per parameter and
one cost per block fitted on every model's step; each model is predicted by the terms of the others, set beside
the measured, and the verdict is the term its step waits on, named where every fit (all the models, and each
leave-one-out set) agrees and mixed where one model's steps turn it over. The first server of each weight type
also decodes 2 and 4 sequences at once: the batch view, where the weights are read once for all; and
it times a 128-token prefill, the engine's fastest arithmetic for that weight type, set beside decode's.
Samples follow one rule (bytesup.course.robust): a warm-up per server, at least five samples, the
median, and outliers shown but never widening an allowance. The bytes model is then carried to
context: tokens/s at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d), applied to the
published DGX Spark figures.
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

from pydantic import Field, field_validator

from bytesup.course import decodetime
from bytesup.host import environment
from bytesup.course import formulas
from bytesup.host import hostbench
from bytesup.llama import timed as measure
from bytesup.models import catalog as models
from bytesup.course import published
from bytesup.course import robust
from bytesup.course import memory_bound as sweep
from bytesup.course.ceiling import BandwidthReference, Spread, ceiling_at, effective_gbs, server_bandwidth
from bytesup.errors import BytesupError
from bytesup.models.gguf import read_model_info
from bytesup.llama.responses import Completion, shown_token
from bytesup.store.facts.lesson08 import DecodeModel, ModelSteps
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns
from bytesup.lesson import LessonContext
from bytesup.options import BandwidthGbs, LessonOptions

TITLE = "Why LLM decode is memory-bound"

GB = formulas.GB
MB = 1e6

# The sweep, in one place: the widths of one model, then larger synthetic models beyond them.
# The default model's four widths, then models of other shapes: medium-q8_0 (16 blocks of 1,024) and large-q8_0
# (18 of 2,048) give the decode-time model three shapes, so its cost per block, its arithmetic per parameter and
# its bandwidth can be told apart. A run recorded before medium-q8_0 joined swept the others (SIZES_BEFORE_MEDIUM).
DEFAULT_SIZES = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32", "medium-q8_0",
                 "large-q8_0")
SIZES_BEFORE_MEDIUM = tuple(n for n in DEFAULT_SIZES if n != "medium-q8_0")
PROMPT = "The capital of France is"  # short: the measurement is the decode after it; its top token is the answer
N_PREDICT = 32
CTX = 256  # the short prompt and the generated tokens fit; a small context keeps each server light
# The top token at temperature 0 from the full softmax (post_sampling_probs false); cache_prompt false.
TOP = {"n_predict": 1, "n_probs": 3, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}
MEMORY_SHARE = 0.5  # a model is skipped when its file would take more than this share of the available memory
IN_TURNS = "sweep_in_turns"  # host value: this run's servers were up at once and its timed decodes went round them
# The decode-time model (bytesup.course.decodetime): t₁ = F + max(W ÷ B, n × c) from every model's step at P = 1,
# each model predicted by the terms of the others. The first model of each weight type also decodes 2 and 4
# sequences at once: the batch view, a line t(P) = a + b × P through those steps.
LEVELS = (2, 4)  # P besides the sweep's own P = 1 decodes, on the first model of each weight type
PREFILL_TOKENS = 128  # each weight type's timed prefill: one micro-batch, as lesson 7's measured prefill point
BATCH_SEED_BASE = 8000  # each request of a batch gets its own seed, so a replay answers each one exactly
MODEL_TOLERANCE = decodetime.TOLERANCE  # the model predicts a width's decode within ±15%

# The published reference run (bytesup.course.published): the specimen on the DGX Spark, lesson 4's figures.
PUBLISHED_LABEL = f"{published.SPECIMEN_NAME} on {published.SPARK_NAME} (published)"
PUBLISHED_BYTES = published.SPECIMEN["file_bytes"]
PUBLISHED_DECODE = published.LESSON4["decode_short_tokens_per_s"]


# --- requests: the models and their decodes ------------------------------------------------------

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


def default_sizes(ctx: LessonContext) -> list[str]:
    """The models swept without --sizes: DEFAULT_SIZES, or those of a run recorded before medium-q8_0 joined."""
    if ctx.options.sizes is not None:
        return list(DEFAULT_SIZES)
    return ctx.host_since("default_sizes", lambda: list(DEFAULT_SIZES), before=list(SIZES_BEFORE_MEDIUM))


def parse_sizes(value: Any, defaults: tuple[str, ...] | list[str] = DEFAULT_SIZES) -> list[str]:
    """--sizes as given by the CLI (a list) or as a comma-separated string; `defaults` when absent. Each is a
    preset name or the path of a GGUF file, which must exist."""
    if value is None:
        return list(defaults)
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in names if n and n.strip()]
    missing_files = [n for n in names if is_gguf_path(n) and not Path(n).is_file()]
    if missing_files:
        raise BytesupError(f"No GGUF file at {', '.join(missing_files)} in --sizes.")
    known = models.model_names()
    unknown = [n for n in names if n not in known and not is_gguf_path(n)]
    if unknown or not names:
        raise BytesupError(f"Unknown model(s) {', '.join(unknown) or '(none given)'} in --sizes. "
                           f"Models: {', '.join(known)}, or a path to a .gguf file.")
    return names


@dataclass(frozen=True)
class ModelInfo:
    """What the lesson needs of one model: from its GGUF header (a host value) or the server's meta."""
    name: str
    n_params: int
    tensor_bytes: int
    weight_type: str | None
    preset: str | None = None
    path: str | None = None
    architecture: str | None = None
    n_layer: int | None = None
    n_embd: int | None = None

    @classmethod
    def of(cls, summary: dict) -> "ModelInfo":
        return cls(summary["name"], summary["n_params"], summary["tensor_bytes"], summary.get("weight_type"),
                   summary.get("preset"), summary.get("path"), summary.get("architecture"), summary.get("n_layer"),
                   summary.get("n_embd"))

    @property
    def bytes_per_token(self) -> int:
        return formulas.bytes_per_token({"tensor_bytes": self.tensor_bytes})


@dataclass(frozen=True)
class TopAnswer:
    token: str  # as shown
    percent: float  # its probability, %


@dataclass(frozen=True)
class PrefillPlan:
    """Each weight type's timed prefill: warm-ups dropped, timed prefills kept, of a prompt of `tokens` tokens."""
    warmup: int
    samples: int
    tokens: int


@dataclass(frozen=True)
class SamplePlan:
    """How each server is sampled: warm-up decodes dropped, timed decodes kept, the P of the step-time lines, and
    the prefill timed on the first model of each weight type (None: a run recorded before it)."""
    warmup: int
    samples: int
    levels: tuple[int, ...]
    prefill: PrefillPlan | None = None

    def rounds(self, parallel: int) -> int:
        """Batches at P sequences: enough for `samples` per-sequence samples."""
        return math.ceil(self.samples / parallel)

    @property
    def slots(self) -> int:
        return max((1, *self.levels))


@dataclass(frozen=True)
class ModelRun:
    """One model measured: its decode tokens/s samples, its top token after PROMPT, and the per-sequence
    tokens/s of each sequence when P decoded together (empty for a model only predicted)."""
    info: ModelInfo
    decode: list[float]
    answer: TopAnswer
    together: dict[int, list[float]]
    prefill: list[float] = field(default_factory=list)  # prefill tokens/s samples (the first model of a weight type)


def _summary(path: str, preset: str | None) -> dict:
    """What the lesson needs from a GGUF header (recorded as a host value)."""
    info = read_model_info(path)
    hp = info["hyperparameters"]
    return {"preset": preset, "name": preset or path.rsplit("/", 1)[-1].removesuffix(".gguf"), "path": path,
            "architecture": info["architecture"], "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
            "n_params": info["n_params"], "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info["file_type"] or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def preset_summary(name: str) -> dict:
    """The header summary of a sweep model: a GGUF path as it is, a preset built or fetched here first when missing."""
    if is_gguf_path(name):
        return _summary(str(Path(name).resolve()), None)
    return _summary(str(models.ensure_model(name)), name)


def served_model(ctx: LessonContext, facts: dict) -> ModelInfo:
    """The user's model: from its GGUF when readable here, else from the server's /v1/models meta."""
    if facts["model_readable"]:
        return ModelInfo.of(ctx.host("model_info", lambda: _summary(str(ctx.require_model()), None)))
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 8 needs the served model's size: its file is not readable here and /v1/models "
                           "gives no meta.size. Pass --model PATH.gguf.")
    return ModelInfo(served["name"], int(meta["n_params"]), int(meta["size"]), meta.get("ftype"),
                     n_embd=meta.get("n_embd"))


def sample_plan(ctx: LessonContext) -> SamplePlan:
    """One warm-up decode per server, at least robust.MIN_SAMPLES timed ones, and LEVELS. A run recorded
    before this plan replays as it was measured: no warm-up, ctx.repeat decodes, no step-time lines."""
    plan = ctx.host_since("sample_plan", lambda: {"warmup": 1, "samples": max(robust.MIN_SAMPLES, ctx.repeat),
                                                  "levels": list(LEVELS)},
                          before={"warmup": 0, "samples": ctx.repeat, "levels": []})
    prefill = ctx.host_since("prefill_plan", lambda: {"warmup": 1, "samples": max(robust.MIN_SAMPLES, ctx.repeat),
                                                      "tokens": PREFILL_TOKENS}, before=None)
    return SamplePlan(plan["warmup"], plan["samples"], tuple(plan["levels"]),
                      PrefillPlan(prefill["warmup"], prefill["samples"], prefill["tokens"]) if prefill else None)


def matvec_reading(ctx: LessonContext, bw: dict | None) -> dict | None:
    """Bandwidth read the way decode reads (hostbench.measure_matvec_bandwidth) over the run's working set,
    with the server's threads; only where the host's bandwidth feeds decode. A run recorded before this
    reading replays without it."""
    if bw is None:
        return None
    return ctx.host_since("matvec_bandwidth", lambda: hostbench.measure_matvec_bandwidth(
        bw["threads"], bw.get("working_set_bytes") or bw["bytes_per_sample"]), before=None)


def batch_bodies(parallel: int, r: int) -> list[dict[str, Any]]:
    """The P requests of batch r, one per slot, measure.PINNED apart from a seed of their own."""
    return [{**measure.PINNED, "n_predict": N_PREDICT, "seed": BATCH_SEED_BASE + 100 * parallel + 10 * r + i,
             "id_slot": i} for i in range(parallel)]


def batches_at(srv, plan: SamplePlan, levels: tuple[int, ...]) -> dict[int, list[float]]:
    """Per-sequence decode tokens/s at each P of `levels`: plan.rounds(P) batches of P decodes sent at once."""
    together = {}
    for P in levels:
        batches = [measure.concurrent_completions(srv, PROMPT, batch_bodies(P, r))[0] for r in range(plan.rounds(P))]
        together[P] = [v for batch in batches for v in measure.decode_samples(batch)]
    return together


def prefill_at(srv, plan: SamplePlan, levels: tuple[int, ...]) -> list[float]:
    """Prefill tokens/s of a plan.prefill.tokens-token prompt (one token generated), after its warm-up; only on the
    first model of a weight type (`levels` given) and where the plan has a prefill."""
    if not levels or plan.prefill is None:
        return []
    ids = measure.long_prompt_tokens(srv, plan.prefill.tokens)
    done = measure.timed_completions(srv, ids, 1, plan.prefill.warmup + plan.prefill.samples)
    return measure.prefill_samples(done[plan.prefill.warmup:])


def measure_decode(ctx: LessonContext, srv, info: ModelInfo, plan: SamplePlan, levels: tuple[int, ...]) -> ModelRun:
    """The top token after PROMPT, the warm-up, plan.samples timed decodes of N_PREDICT tokens
    (measure.PINNED), then at each P of `levels` batches of P decodes sent at once, then the prefill."""
    answer = top_answer(srv.completion(PROMPT, **TOP))
    done = measure.timed_completions(srv, PROMPT, N_PREDICT, plan.warmup + plan.samples,
                                     track=lambda it: ctx.track(it, info.name))[plan.warmup:]
    return ModelRun(info, measure.decode_samples(done), answer, batches_at(srv, plan, levels),
                    prefill_at(srv, plan, levels))


@dataclass(frozen=True)
class Planned:
    """A model the sweep serves, and the P it also decodes at (LEVELS for the first of its weight type)."""
    name: str
    info: ModelInfo
    levels: tuple[int, ...]


def plan_sweep(ctx: LessonContext, sizes: list[str], available: int | None,
               plan: SamplePlan) -> tuple[list[Planned], list[str]]:
    """The models to serve, built or fetched first where missing; those too big for memory skipped. The first
    model of each weight type also decodes plan.levels sequences at once (its step-time line); a later one of
    the same type is left for the model to predict."""
    planned, skipped, seen = [], [], set()
    for name in sizes:
        ctx.step(f"building or reusing {name}")
        info = ModelInfo.of(ctx.host(f"model_{name}", functools.partial(preset_summary, name)))
        if available and info.tensor_bytes > MEMORY_SHARE * available:
            skipped.append(f"{name} ({info.tensor_bytes / GB:.3g} GB)")
            continue
        planned.append(Planned(name, info, () if info.weight_type in seen else plan.levels))
        seen.add(info.weight_type)
    return planned, skipped


def in_turns(ctx: LessonContext, planned: list[Planned], available: int | None) -> bool:
    """Whether every server is up at once and the timed decodes go round the models in turns: where the models
    fit in MEMORY_SHARE of the available memory together. A run recorded before turns replays one model after
    another, as it was measured."""
    fits = bool(available) and sum(p.info.tensor_bytes for p in planned) <= MEMORY_SHARE * (available or 0)
    return fits and bool(ctx.host_since(IN_TURNS, lambda: True, before=False))


def serve(ctx: LessonContext, p: Planned, plan: SamplePlan):
    """A server of its own for one model, with the user's server flags and plan.slots slots."""
    return ctx.local_server(f"preset-{p.name}", Path(p.info.path) if p.info.path else None,
                            ["-c", str(CTX * plan.slots), "--parallel", str(plan.slots)])


def sweep_in_turns(ctx: LessonContext, planned: list[Planned], plan: SamplePlan) -> list[ModelRun]:
    """Every model on a server of its own, all up at once: each one's answer and warm-up, then plan.samples rounds
    of one timed decode per model in turn, then each one's batches and prefill. Each server sees the same requests
    in the same order as one after another, but a slow spell of the machine lands on every model's samples alike,
    not on one model's median: the decode-time model compares the models with each other."""
    with contextlib.ExitStack() as stack:
        servers = []
        for p in planned:
            ctx.step(f"starting a server for {p.name}")
            servers.append(stack.enter_context(serve(ctx, p, plan)))
        answers = [top_answer(srv.completion(PROMPT, **TOP)) for srv in servers]
        for srv in servers:
            measure.timed_completions(srv, PROMPT, N_PREDICT, plan.warmup)
        done: list[list[Completion]] = [[] for _ in servers]
        for _ in ctx.track(range(plan.samples), f"decoding with the {len(servers)} models in turn"):
            for i, srv in enumerate(servers):
                done[i] += measure.timed_completions(srv, PROMPT, N_PREDICT, 1)
        runs = []
        for p, srv, answer, d in zip(planned, servers, answers, done, strict=True):
            if p.levels:
                ctx.step(f"decoding {' and '.join(map(str, p.levels))} sequences at once with {p.name}")
            runs.append(ModelRun(p.info, measure.decode_samples(d), answer, batches_at(srv, plan, p.levels),
                                 prefill_at(srv, plan, p.levels)))
    return runs


def sweep_local(ctx: LessonContext, sizes: list[str], available: int | None,
                plan: SamplePlan) -> tuple[list[ModelRun], list[str]]:
    """Each model on a server of its own, with the user's server flags (plan_sweep), measured in turns where they
    fit in memory together (sweep_in_turns), else one after another."""
    planned, skipped = plan_sweep(ctx, sizes, available, plan)
    if in_turns(ctx, planned, available):
        return sweep_in_turns(ctx, planned, plan), skipped
    runs = []
    for p in planned:
        ctx.step(f"decoding with {p.name}")
        with serve(ctx, p, plan) as srv:
            runs.append(measure_decode(ctx, srv, p.info, plan, p.levels))
    return runs, skipped


def sweep_remote(ctx: LessonContext, facts: dict, plan: SamplePlan) -> list[ModelRun]:
    """Only the one model the user's server serves (one slot assumed: no step-time lines)."""
    info = served_model(ctx, facts)
    ctx.step(f"decoding with {info.name} on the user's server")
    return [measure_decode(ctx, ctx.server, info, plan, ())]


# --- computation: pure, from the responses, the model headers and the bandwidth ------------------

@dataclass(frozen=True)
class ModelRow:
    """One model set beside the decode-time model: its measured step times, the terms of the run's fit, and its
    prediction by the terms fitted on the other models (None when too few others)."""
    name: str
    weight_type: str | None
    step_ms: dict[int, float]  # median ms per step at each P measured
    explained: decodetime.Prediction  # by the terms fitted on every model
    prediction: decodetime.Prediction | None  # by the terms fitted on the others
    line: decodetime.Line | None  # t(P) = a + b × P through its steps at LEVELS, where measured
    verdict: str  # decodetime.verdicts: named where every fit of the run agrees, else mixed

    @property
    def measured(self) -> float:
        """Decode tokens/s at P = 1: 1000 ÷ the median step time, outliers left out."""
        return 1e3 / self.step_ms[1]

    @property
    def error(self) -> float | None:
        """predicted ÷ measured tokens/s − 1."""
        return None if self.prediction is None else decodetime.error(self.prediction, self.step_ms[1])


@dataclass(frozen=True)
class SweepRow:
    """One measured width: tokens/s, effective GB/s = tokens/s × bytes per token, and the efficiency
    against the bandwidth that feeds decode (None without one), with the sweep's verdict."""
    name: str
    weight_type: str | None
    bytes_per_token: float
    decode: Spread  # tokens/s
    effective: Spread  # GB/s
    efficiency: Spread | None  # % of the bandwidth
    answer: TopAnswer | None
    cache_resident: bool
    on_line: bool | None
    off_line_percent: float | None
    verdict: str


@dataclass(frozen=True)
class PublishedPoint:
    """The course's published decode on the DGX Spark, set beside the sweep."""
    label: str
    weight_type: str
    bytes_per_token: float
    decode: float
    effective_gbs: float
    efficiency_percent: float  # of the Spark's published bandwidth
    ceiling_tokens_per_s: float


@dataclass(frozen=True)
class FitRow:
    """A bandwidth beside the run's: the fitted B, a reading of the host; a row of its table as it is."""
    quantity: str = column("quantity")
    gbs: float = column("bandwidth", "GB/s")
    low: float = column("low", "GB/s")
    high: float = column("high", "GB/s")
    percent_of_run: float | None = column("of the run's bandwidth", "%")
    points: str = column("points")


@dataclass(frozen=True)
class ContextPrediction:
    """The bytes model with context on the published figures."""
    kv_bytes_per_token: float
    depth: int
    short: float  # tokens/s after a short prompt
    effective_gbs: float  # the bandwidth that short decode implies
    predicted: float  # tokens/s after `depth` tokens
    published: float
    error: float  # predicted ÷ published − 1


def top_answer(completion: Completion) -> TopAnswer:
    """The most probable first token of a completion and its probability (%), from the full softmax."""
    first = completion.first_position()
    best = max(first.top_logprobs or [], key=lambda c: c.logprob)
    return TopAnswer(shown_token(best.token, best.bytes), 100.0 * math.exp(best.logprob))


def is_gguf_path(name: str) -> bool:
    """--sizes takes a GGUF file as well as a preset name: a name ending in .gguf is a path."""
    return name.lower().endswith(".gguf")


def fastest_memory_gbs(before: dict | None, after: dict | None) -> float | None:
    """The run's fastest memory-bandwidth sample (before or after the decode work): above it, only a cache reads."""
    if before is None:
        return None
    return max(before["gb_per_s"]["max"], (after or {}).get("gb_per_s", {}).get("max", 0))


def sweep_points(runs: list[ModelRun], llc: int | None, memory_max: float | None) -> list[dict]:
    """bytesup.course.memory_bound's points: bytes per token and the decode samples of each model."""
    return [sweep.make_point(r.info.name, r.info.bytes_per_token, r.decode, llc, n_params=r.info.n_params,
                             weight_type=r.info.weight_type, memory_gbs_max=memory_max) for r in runs]


def efficiency_percent(gbs: float, ref_gbs: float) -> float:
    """Effective GB/s as a share of the bandwidth, %."""
    return formulas.percent(gbs / ref_gbs)


def decode_efficiency_samples(samples: list[float], bytes_per_token: float, ref_gbs: float) -> list[float]:
    """Each decode sample's effective GB/s (tokens/s × bytes per token) ÷ the bandwidth, %."""
    return [efficiency_percent(effective_gbs(v, bytes_per_token), ref_gbs) for v in samples]


def sweep_row(p: dict, verdict: dict, ref_gbs: float | None, answer: TopAnswer | None) -> SweepRow:
    """A point with its verdict (sweep.analyse) and its efficiency against `ref_gbs`."""
    eff = None if not ref_gbs else Spread(efficiency_percent(p["gbs"], ref_gbs), efficiency_percent(p["gbs_min"], ref_gbs),
                                          efficiency_percent(p["gbs_max"], ref_gbs))
    return SweepRow(p["name"], p.get("weight_type"), p["bytes"], Spread(p["median"], p["min"], p["max"]),
                    Spread(p["gbs"], p["gbs_min"], p["gbs_max"]), eff, answer, p["cache_resident"], verdict["on_line"],
                    None if verdict["residual"] is None else 100 * verdict["residual"], verdict["verdict"])


def published_point() -> PublishedPoint:
    """33.2 tokens/s × 7.16 GB = 237.7 GB/s of the Spark's 273 GB/s (ceiling 273 ÷ 7.16 = 38.1 tokens/s)."""
    gbs = effective_gbs(PUBLISHED_DECODE, PUBLISHED_BYTES)
    return PublishedPoint(PUBLISHED_LABEL, "Q8_0", PUBLISHED_BYTES, PUBLISHED_DECODE, gbs,
                          100 * gbs / published.SPARK_BANDWIDTH_GB_PER_S,
                          ceiling_at(published.SPARK_BANDWIDTH_GB_PER_S, PUBLISHED_BYTES))


def fit_rows(analysis: dict, ref: BandwidthReference | None, before: dict | None, after: dict | None,
             matvec: dict | None = None) -> list[FitRow]:
    """The fitted B (with its standard-error range), then the run's bandwidth readings around the decode work,
    and numpy's matrix-vector product where the run measured it."""
    rows = []
    fit = analysis["fit"]
    if fit:
        rows.append(FitRow("tokens/s = B ÷ bytes (equal relative weight per point)", fit["gbs"], fit["gbs_low"],
                           fit["gbs_high"], 100 * fit["gbs"] / ref.gbs if ref else None, ", ".join(analysis["basis"])))
    # Every row against the same reference: --bandwidth-gbs when given, else the reading before the work.
    if before is not None:
        g = before["gb_per_s"]
        rows.append(FitRow("this host's read bandwidth, before the decode work", g["median"], g["min"], g["max"],
                           100 * (g["median"] / ref.gbs) if ref else None, ""))  # exactly 100 when it is the reference
        if after is not None:
            a = after["gb_per_s"]
            rows.append(FitRow("this host's read bandwidth, after the decode work", a["median"], a["min"], a["max"],
                               100 * a["median"] / ref.gbs if ref else None, ""))
    if matvec is not None:
        m = matvec["gb_per_s"]
        rows.append(FitRow(f"numpy's float32 matrix-vector product over {matvec['bytes_per_sample'] / MB:,.0f} MB, "
                           f"{matvec['threads']} thread(s), before the decode work", m["median"], m["min"], m["max"],
                           100 * m["median"] / ref.gbs if ref else None, ""))
    return rows


def step_ms(tokens_per_s: list[float]) -> float:
    """The median time per decode step (ms) of per-sequence tokens/s samples, outliers left out (bytesup.course.robust)."""
    return statistics.median(1e3 / v for v in robust.judge(tokens_per_s).kept)


def step_spread(tokens_per_s: list[float]) -> float:
    """The robust spread (interquartile range ÷ median, bytesup.course.robust) of the step times of these samples."""
    return robust.judge([1e3 / v for v in tokens_per_s]).relative_iqr


def model_widths(runs: list[ModelRun]) -> list[decodetime.Width]:
    """Every measured model as the decode-time model sees it: weights, parameters, type, step times."""
    return [decodetime.Width(r.info.name, r.info.bytes_per_token, r.info.n_params, r.info.weight_type or "?",
                             {1: step_ms(r.decode), **{P: step_ms(v) for P, v in r.together.items()}},
                             r.info.n_layer or 1)
            for r in runs]


def fit_terms(widths: list[decodetime.Width]) -> tuple[decodetime.Terms | None, str]:
    """The terms from every model's step at P = 1, or None and why not."""
    try:
        return decodetime.fit(widths), ""
    except ValueError as e:
        return None, str(e)


def model_rows(widths: list[decodetime.Width], runs: list[ModelRun], terms: decodetime.Terms) -> list[ModelRow]:
    """Each model's measured step times beside the run's terms, its prediction by the others' terms, and the
    verdict every fit agrees on."""
    fits = decodetime.leave_one_out(widths)
    held = decodetime.held_out(widths, fits)
    verdicts = decodetime.verdicts(widths, terms, fits)
    rows = []
    for w, r in zip(widths, runs, strict=True):
        line = decodetime.step_line(w, LEVELS) if all(P in w.step_ms for P in LEVELS) else None
        rows.append(ModelRow(w.name, r.info.weight_type, w.step_ms,
                             decodetime.predict(terms, w.name, w.weight_bytes, w.n_params, w.n_layer), held[w.name],
                             line, verdicts[w.name]))
    return rows


@dataclass(frozen=True)
class PrefillPoint:
    """One weight type's prefill beside decode's arithmetic: prefill tokens/s (outliers left out of the median and
    range), the GFLOP/s that is at 2 FLOPs per parameter and token, and the one-token arithmetic n × c of the run's
    terms."""
    name: str
    weight_type: str | None
    tokens_per_s: Spread
    n_params: float
    decode_arithmetic_ms: float

    @property
    def gflops(self) -> float:
        return formulas.flops_per_token(self.n_params) * self.tokens_per_s.median / 1e9

    @property
    def ms_per_token(self) -> float:
        return 1e3 / self.tokens_per_s.median

    @property
    def decode_over_prefill(self) -> float:
        """How many times longer one token's arithmetic takes in decode (n × c) than a token of prefill."""
        return self.decode_arithmetic_ms / self.ms_per_token


def prefill_points(runs: list[ModelRun], terms: decodetime.Terms) -> list[PrefillPoint]:
    """Every model with a timed prefill, set beside the arithmetic the run's terms give one token of its decode."""
    out = []
    for r in runs:
        if r.prefill:
            kept = robust.judge(r.prefill)
            out.append(PrefillPoint(r.info.name, r.info.weight_type, Spread(statistics.median(kept.kept), kept.low, kept.high),
                                    r.info.n_params, r.info.n_params * terms.arith_ps * 1e-9))
    return out


def spark_terms() -> dict[str, float]:
    """The same terms from the published DGX Spark figures (bytesup.course.decodetime.published_terms)."""
    prefill = published.LESSON4["prefill_tokens_per_s"]
    return decodetime.published_terms(PUBLISHED_BYTES, published.SPARK_BANDWIDTH_GB_PER_S, PUBLISHED_DECODE,
                                      sum(prefill) / len(prefill))


def spark_verdict(spark: dict[str, float]) -> str:
    """The decode-time model's rule on the published terms (the rest counted as the fixed cost)."""
    return decodetime.waits_on(spark["memory_ms"], spark["arithmetic_ms"])


def spark_context_prediction() -> ContextPrediction:
    """The bytes model with context on the published figures: the specimen's KV cache (no grouped-query
    attention: 32 KV heads, FP16) per token, the effective bandwidth its short-prompt decode implies, and
    the speed it predicts after lesson 4's long prompt."""
    spec = published.SPECIMEN
    kv = formulas.kv_bytes_per_token(spec["n_layer"], published.SPECIMEN_N_HEAD_KV, spec["n_embd"] // spec["n_head"], 2)
    depth = published.LESSON4["long_prompt_tokens"]
    short = published.LESSON4["decode_short_tokens_per_s"]
    effective = short * PUBLISHED_BYTES  # bytes/s that a decode of 33.2 tokens/s read
    predicted = formulas.decode_tokens_per_s_at_depth(effective, PUBLISHED_BYTES, kv, depth)
    measured = published.LESSON4["decode_long_tokens_per_s"]
    return ContextPrediction(kv, depth, short, effective / GB, predicted, measured, predicted / measured - 1)


# The tables' rows, one named record per row: each field is a column (bytesup.store.rows).

def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


@dataclass(frozen=True)
class ModelsTableRow:
    model: str = column("model")
    architecture: str | None = column("architecture")
    weights: str | None = column("weights")
    blocks: int | None = column("blocks")
    width: int | None = column("width")
    parameters: int = column("parameters")
    bytes_per_token: float = column("bytes per token", "bytes")
    bytes_per_parameter: float = column("bytes per parameter")
    fits_in_cache: str = column("fits in the cache")
    cache_resident: str = column("cache-resident")


def models_table_row(r: ModelRun, p: dict) -> ModelsTableRow:
    """A model as its header (or the server) describes it, beside its point's bytes and cache marks."""
    i = r.info
    return ModelsTableRow(i.name, i.architecture, i.weight_type, i.n_layer, i.n_embd, i.n_params, p["bytes"],
                          p["bytes"] / i.n_params, yes_no(p["fits_in_cache"]), yes_no(p["cache_resident"]))


@dataclass(frozen=True)
class SweepTableRow:
    model: str = column("model")
    weights: str | None = column("weights")
    bytes_per_token: float = column("bytes per token", "bytes")
    decode: float = column("decode", "tokens/s")
    decode_min: float | None = column("decode min", "tokens/s")
    decode_max: float | None = column("decode max", "tokens/s")
    effective: float = column("effective", "GB/s")
    effective_min: float | None = column("effective min", "GB/s")
    effective_max: float | None = column("effective max", "GB/s")
    efficiency: float | None = column("efficiency", "%")
    efficiency_min: float | None = column("efficiency min", "%")
    efficiency_max: float | None = column("efficiency max", "%")
    top_token: str | None = column("top token")
    top_token_percent: float | None = column("top token probability", "%")
    cache_resident: str | None = column("cache-resident")
    on_line: str | None = column("on the line")
    off_line_percent: float | None = column("off the line", "%")
    verdict: str | None = column("verdict")


def sweep_table_row(r: SweepRow) -> SweepTableRow:
    eff = r.efficiency
    return SweepTableRow(r.name, r.weight_type, r.bytes_per_token, r.decode.median, r.decode.min, r.decode.max,
                         r.effective.median, r.effective.min, r.effective.max, eff.median if eff else None,
                         eff.min if eff else None, eff.max if eff else None, r.answer.token if r.answer else None,
                         r.answer.percent if r.answer else None, yes_no(r.cache_resident),
                         None if r.on_line is None else yes_no(r.on_line), r.off_line_percent, r.verdict)


def published_table_row(pub: PublishedPoint) -> SweepTableRow:
    """The published point in the sweep's columns: one decode figure, no samples, no verdict."""
    return SweepTableRow(pub.label, pub.weight_type, pub.bytes_per_token, pub.decode, None, None, pub.effective_gbs,
                         None, None, pub.efficiency_percent, None, None, None, None, None, None, None, None)


@dataclass(frozen=True)
class StepTableRow:
    narrower: str = column("narrower")
    wider: str = column("wider")
    bytes_ratio: float = column("bytes ratio", "×")
    speedup: float = column("speed-up", "×")
    gbs_ratio: float = column("effective GB/s ratio", "×")
    allowance_percent: float = column("judged within", "%")
    cache_resident: str = column("cache-resident width")
    verdict: str = column("verdict")


def step_table_row(st: dict) -> StepTableRow:
    """A step between neighbouring widths (bytesup.course.memory_bound.analyse)."""
    return StepTableRow(st["narrow"], st["wide"], st["bytes_ratio"], st["speedup"], st["gbs_ratio"], 100 * st["allowance"],
                        yes_no(st["cache_resident"]), st["verdict"])


@dataclass(frozen=True)
class UnfitRow:
    model: str = column("model")
    why_not: str = column("why not")


@dataclass(frozen=True)
class DecodeModelRow:
    """A model beside the decode-time model. The step columns are the sweep's P = 1 and LEVELS."""
    model: str = column("model")
    weights: str | None = column("weights")
    step_1: float | None = column("step at P = 1", "ms")
    step_2: float | None = column("step at P = 2", "ms")
    step_4: float | None = column("step at P = 4", "ms")
    line_a: float | None = column("batch line a", "ms")
    line_b: float | None = column("batch line b", "ms per sequence")
    memory_ms: float = column("read the weights", "ms")
    arithmetic_ms: float = column("arithmetic", "ms")
    fixed_ms: float = column("fixed", "ms")
    step_ms: float = column("fit's step", "ms")
    predicted: float | None = column("predicted", "tokens/s")
    measured: float = column("measured", "tokens/s")
    error_percent: float | None = column("predicted ÷ measured − 1", "%")
    memory_share: float = column("read share", "%")
    arithmetic_share: float = column("arithmetic share", "%")
    fixed_share: float = column("fixed share", "%")
    waits_on: str = column("waits on")


def decode_model_row(r: ModelRow) -> DecodeModelRow:
    e, p = r.explained, r.prediction
    shares = e.shares()
    return DecodeModelRow(r.name, r.weight_type, r.step_ms.get(1), r.step_ms.get(2), r.step_ms.get(4),
                          r.line.intercept_ms if r.line else None, r.line.slope_ms if r.line else None,
                          e.memory_ms, e.arithmetic_ms, e.fixed_ms, e.step_ms, p.tokens_per_s if p else None, r.measured,
                          None if r.error is None else 100 * r.error, 100 * shares["memory"], 100 * shares["arithmetic"],
                          100 * shares["fixed"], r.verdict)


def spark_decode_model_row(spark: dict[str, float]) -> DecodeModelRow:
    """The published figures in the same terms: no steps of their own, the rest counted as the fixed cost."""
    return DecodeModelRow(f"{published.SPECIMEN_NAME} on {published.SPARK_NAME} (published)", "Q8_0", None, None, None,
                          None, None, spark["memory_ms"], spark["arithmetic_ms"], spark["rest_ms"], spark["measured_ms"],
                          None, PUBLISHED_DECODE, None, 100 * spark["memory_share"], 100 * spark["arithmetic_share"],
                          100 * spark["rest_share"], spark_verdict(spark))


@dataclass(frozen=True)
class PrefillRow:
    model: str = column("model")
    weights: str | None = column("weights")
    median: float = column("prefill", "tokens/s")
    low: float = column("prefill min", "tokens/s")
    high: float = column("prefill max", "tokens/s")
    gflops: float = column("reached", "GFLOP/s")
    ms_per_token: float = column("prefill per token", "ms")
    decode_arithmetic_ms: float = column("decode's arithmetic per token, n × c", "ms")
    decode_over_prefill: float = column("decode ÷ prefill", "×")


def prefill_row(p: PrefillPoint) -> PrefillRow:
    t = p.tokens_per_s
    return PrefillRow(p.name, p.weight_type, t.median, t.min, t.max, p.gflops, p.ms_per_token, p.decode_arithmetic_ms,
                      p.decode_over_prefill)


@dataclass(frozen=True)
class ContextRow:
    case: str = column("case")
    weight_bytes: float = column("weight bytes", "bytes")
    kv_bytes_per_token: float = column("KV bytes per token", "bytes")
    depth: int = column("depth", "tokens")
    predicted: float = column("predicted", "tokens/s")
    published: float = column("published", "tokens/s")
    error_percent: float = column("predicted ÷ published − 1", "%")


def context_row(sp: ContextPrediction) -> ContextRow:
    return ContextRow(f"{published.SPECIMEN_NAME} on {published.SPARK_NAME}", PUBLISHED_BYTES, sp.kv_bytes_per_token,
                      sp.depth, sp.predicted, sp.published, 100 * sp.error)


# --- what the lesson records: measurements and facts, never from a rendering function ----------

def record_measurements(ctx: LessonContext, points: list[dict], ref: BandwidthReference | None) -> None:
    for p in points:
        setting = {"preset": p["name"], "bytes_per_token": p["bytes"]}
        ctx.measure("decode_tokens_per_s", "tokens/s", p["samples"], higher_is_better=True, settings=setting,
                    description=f"decode after a short prompt, n_predict {N_PREDICT}, from the server's timings")
        if ref:
            ctx.measure("decode_efficiency", "%", decode_efficiency_samples(p["samples"], p["bytes"], ref.gbs),
                        # A stated bandwidth is part of the configuration; a measured one is not (it
                        # varies run to run, and runs must still join on these settings to compare).
                        higher_is_better=True,
                        settings={**setting, "cache_resident": p["cache_resident"],
                                  **({} if ref.host_cpu else {"bandwidth_gbs": ref.gbs})},
                        description=f"effective GB/s of each decode sample ÷ the bandwidth, {ref.label}")


def record_fit(ctx: LessonContext, analysis: dict, bw: dict | None, after: dict | None) -> None:
    """The fitted B, and the run's bandwidth readings before and after the decode work."""
    fit = analysis["fit"]
    if fit:
        ctx.measure("fit_bandwidth_gb_per_s", "GB/s", [fit["gbs"]], higher_is_better=True,
                    settings={"models": analysis["basis"]},
                    description="geometric mean of effective GB/s over the points the data show memory-bound")
    if bw is not None:
        ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=True,
                    settings={"threads": bw["threads"]}, description=bw["method"])
        if after is not None:
            ctx.measure("read_bandwidth_gb_per_s_after", "GB/s", after["gb_per_s"]["samples"], higher_is_better=True,
                        settings={"threads": after["threads"]}, description=after["method"])


def record_decode_model(ctx: LessonContext, runs: list[ModelRun], widths: list[decodetime.Width]) -> None:
    """The samples of every P and the model's inputs as a fact, for `bytesup check` to recompute."""
    for r in runs:
        for P, samples in r.together.items():
            ctx.measure("decode_tokens_per_s_per_sequence", "tokens/s", samples, higher_is_better=True,
                        settings={"preset": r.info.name, "parallel": P},
                        description=f"each of {P} sequences decoded together, from its own timings")
    spreads = {r.info.name: {"1": step_spread(r.decode), **{str(P): step_spread(v) for P, v in r.together.items()}}
               for r in runs}
    ctx.fact(DecodeModel(
        form="L * f + max(W / B, n * c) at P = 1, each model predicted by the others", tolerance=MODEL_TOLERANCE,
        widths=[ModelSteps(name=w.name, weight_bytes=w.weight_bytes, n_params=w.n_params, n_layer=w.n_layer,
                           weight_type=w.weight_type, step_ms={str(P): ms for P, ms in w.step_ms.items()},
                           step_spread=spreads[w.name])
                for w in widths]))


# --- rendering: tables, notes and the plot ------------------------------------------------------

def show_models(ctx: LessonContext, runs: list[ModelRun], points: list[dict], llc: int | None, memory_max: float | None,
                bw: dict | None, skipped: list[str], available: int | None, facts: dict, local: bool) -> None:
    notes = [("Widths of one model share its parameters and differ in bytes per parameter; a step between "
              "neighbouring widths changes only how many bytes decode reads (and the arithmetic to unpack them).")]
    if llc and memory_max:
        notes.append(f"Fits in the cache: bytes per token ≤ the {llc / 2**20:,.0f} MiB last-level cache "
                     f"({(bw or {}).get('llc_source') or 'reported by the OS'}); on a virtual machine that is the cache "
                     f"the hypervisor reports, shared with other tenants, so an upper bound on what stays there. "
                     f"Cache-resident: it fits, and even its slowest sample read faster than the {memory_max:,.3g} GB/s "
                     f"of the run's fastest memory-bandwidth sample, which only a cache can deliver.")
    if skipped:
        assert available is not None
        notes.append(f"Skipped for memory: {', '.join(skipped)}, more than {100 * MEMORY_SHARE:.0f}% of the "
                     f"{available / GB:.3g} GB available.")
    if not local:
        notes.append(f"Only the one model the user's server serves was measured ({facts['reason']}); the sweep needs "
                     f"servers this script starts on this host.")
    ctx.table(
        "models", "The models: widths of one model, and larger models beyond them",
        columns(ModelsTableRow), cells([models_table_row(r, p) for r, p in zip(runs, points, strict=True)]),
        notes=notes,
    )


def verdict_sentences(points: list[dict], analysis: dict, answers: dict[str, TopAnswer],
                      ref: BandwidthReference | None, llc_bytes: int | None) -> list[str]:
    """The conclusion, each sentence chosen and filled in by the analysis of this run's points."""
    out = []
    fit, steps, verdicts = analysis["fit"], analysis["steps"], analysis["verdicts"]
    tol = 100 * analysis["tolerance"]
    for st in steps:
        how = {sweep.MEMORY: "effective GB/s stayed flat: tokens/s follows 1 ÷ bytes, memory-bound",
               sweep.COMPUTE: "fewer bytes were not faster: compute-bound",
               sweep.PARTLY: "faster, but by less than the bytes shrank: partly memory-bound",
               sweep.FASTER: "faster than the bytes alone explain",
               sweep.INCONCLUSIVE: "the spread is too wide to tell memory- from compute-bound"}[st["verdict"]]
        out.append(f"From {st['wide']} to {st['narrow']} the bytes per token shrank {st['bytes_ratio']:.3g} × and decode "
                   f"got {st['speedup']:.3g} × as fast (effective GB/s × {st['gbs_ratio']:.3g}, judged within "
                   f"±{100 * st['allowance']:.0f}%): {how}"
                   + (" (a cache-resident width takes part)." if st["cache_resident"] else "."))
    cached = [p["name"] for p in points if p["cache_resident"]]
    if cached:
        assert llc_bytes is not None
        out.append(f"{', '.join(cached)}: the weights fit in the {llc_bytes / 2**20:,.0f} MiB last-level cache the OS "
                   f"reports and were read faster than memory delivers, so they came from the cache; marked "
                   f"cache-resident and kept out of the fit.")
    fitting = [p["name"] for p in points if p["fits_in_cache"] and not p["cache_resident"]]
    if fitting:
        out.append(f"{', '.join(fitting)}: the weights fit in that cache by size, yet decode read them no faster than "
                   "memory delivers, so they are treated as read from memory (the cache is shared, and it holds "
                   "more than the weights).")
    if fit:
        on = [n for n, v in verdicts.items() if v["on_line"]]
        off = [f"{n} {100 * v['residual']:+.0f}%" for n, v in verdicts.items() if v["on_line"] is False]
        out.append(f"The line tokens/s = B ÷ bytes through {', '.join(analysis['basis'])} (equal relative weight per "
                   f"point) gives B = {fit['gbs']:.3g} GB/s (one standard error {fit['gbs_low']:.3g}–{fit['gbs_high']:.3g})"
                   + (f", {100 * fit['gbs'] / ref.gbs:.0f}% of the {ref.gbs:.3g} GB/s {ref.label}" if ref else "")
                   + f". On the line (within ±{tol:.0f}% or the point's own spread, widened by two standard errors of B): "
                     f"{', '.join(on) or 'none'}"
                   + (f"; off it: {', '.join(off)}." if off else "."))
    trained = {n: a for n, a in answers.items() if not models.is_synthetic(n)}
    if answers:
        same = sorted({a.token for a in trained.values()})
        out.append(f"The answer after {PROMPT!r}: " + ", ".join(f"{n} {a.token} ({a.percent:.1f}%)" for n, a in answers.items())
                   + "." + (" The same top token at every width of the trained model, for fewer bytes: why people "
                            "quantize." if len(trained) > 1 and len(same) == 1 else
                            " The top token changed between widths of the trained model." if len(trained) > 1 else "")
                   + (" The synthetic models' random weights give no meaningful answer."
                      if len(trained) < len(answers) else ""))
    flagged = [f"{p['name']} {', '.join(f'{v:.3g}' for v in p['outliers'])} tokens/s" for p in points if p["outliers"]]
    out.append(("Outliers (beyond " + f"{robust.OUTLIER_MADS:g} scaled MADs of a width's median; shown in min and max, "
                "kept in the JSON, never widening an allowance): " + ("; ".join(flagged) if flagged else "none") + "."))
    by_verdict: dict[str, list[str]] = {}
    for n, v in verdicts.items():
        by_verdict.setdefault(v["verdict"], []).append(n)
    out.append("Verdict: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in by_verdict.items()) + ".")
    return out


def bandwidth_note(bw: dict | None, ref: BandwidthReference | None, given: Any, facts: dict) -> str:
    if bw is not None:
        note = f"Bandwidth: {hostbench.describe_reading(bw)}."
        if given is not None:
            note += f" Efficiencies use the {float(given):g} GB/s given with --bandwidth-gbs."
        return note
    if ref:
        return (f"Bandwidth: {ref.gbs:g} GB/s given with --bandwidth-gbs; this host's CPU bandwidth does not "
                f"apply, because {facts['reason']}.")
    return (f"No efficiency is shown: this host's CPU bandwidth does not bound these servers ({facts['reason']}); "
            f"pass --bandwidth-gbs with the bandwidth of the memory that feeds decode.")


def show_sweep(ctx: LessonContext, rows: list[SweepRow], pub: PublishedPoint, sentences: list[str], bw_note: str,
               plan: SamplePlan) -> None:
    ctx.table(
        "sweep", f"Decode across widths: bytes per token, tokens/s, effective GB/s and the answer after {PROMPT!r}",
        columns(SweepTableRow), cells([*map(sweep_table_row, rows), published_table_row(pub)]),
        notes=[*sentences,
               bw_note,
               (f"Effective GB/s = bytes per token × tokens/s; efficiency = effective ÷ bandwidth. {plan.samples} timed "
                f"decodes of {N_PREDICT} tokens per model"
                + (f" after {plan.warmup} warm-up decode{'s' if plan.warmup > 1 else ''} (not a sample)" if plan.warmup
                   else "") + ", min and max the extreme samples."),
               (f"Published reference: {pub.decode:g} tokens/s × {pub.bytes_per_token / GB:g} GB = {pub.effective_gbs:.3g} "
                f"GB/s, {pub.efficiency_percent:.0f}% of the {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s "
                f"{published.SPARK_NAME} (ceiling {pub.ceiling_tokens_per_s:.1f} tokens/s; the course rounds it to "
                f"{published.LESSON4['ceiling_tokens_per_s']:g} and quotes "
                f"{published.LESSON4['decode_efficiency_percent']:g}%).")],
    )


def show_steps(ctx: LessonContext, steps: list[dict]) -> None:
    if not steps:
        return
    ctx.table(
        "steps", "Steps between neighbouring widths of one model",
        columns(StepTableRow), cells([step_table_row(st) for st in steps]),
        notes=[(f"Bytes ratio = wider ÷ narrower bytes per token; speed-up = narrower ÷ wider median tokens/s. "
                f"Memory-bound: |ln(speed-up ÷ bytes ratio)| ≤ ln(1 + a), effective GB/s flat; compute-bound: "
                f"speed-up ≤ 1 + a, fewer bytes not faster; both at once: inconclusive; faster by less than the "
                f"bytes: partly memory-bound. a = the larger of ±{100 * sweep.TOLERANCE:.0f}% and each width's own "
                f"robust spread (interquartile range ÷ median of its samples that are not outliers; bytesup.course.robust).")],
    )


def show_fit(ctx: LessonContext, analysis: dict, rows: list[FitRow], bw: dict | None, after: dict | None) -> None:
    slope = analysis["slope"]
    notes = [("B = exp(mean of ln effective GB/s) over the points used: each point weighs the same, whatever its "
              "size; the range is one standard error (the scatter between points and within each point's samples).")]
    if slope:
        notes.append(f"Free log-log slope over every point beyond the cache: tokens/s ∝ bytes^{slope['slope']:.3g}"
                     + (f" ± {slope['se']:.2g}" if slope["se"] is not None else "")
                     + f" ({slope['n']} points); a purely memory-bound decode gives −1.")
    if bw is not None:
        g = bw["gb_per_s"]
        if after is not None:
            a = after["gb_per_s"]
            drift = ctx.run_bandwidth_drift() or hostbench.bandwidth_drift(g, a)
            notes.append(f"Drift of the run's bandwidth over the decode work: {g['median']:.3g} → {a['median']:.3g} GB/s "
                         f"({100 * drift['change']:+.0f}%); the two readings' ranges "
                         + ("overlap." if drift["ranges_overlap"] else
                            "do not overlap: efficiencies against the first reading carry that uncertainty."))
    ctx.table("bandwidth_fit", "What bandwidth did decode achieve?", columns(FitRow), cells(rows), notes=notes)


def model_notes(rows: list[ModelRow], terms: decodetime.Terms, ref: BandwidthReference | None,
                spark: dict[str, float], matvec: dict | None = None) -> list[str]:
    errors = {r.name: r.error for r in rows if r.error is not None}
    within = [n for n, e in errors.items() if abs(e) <= MODEL_TOLERANCE]
    worst = max(errors.items(), key=lambda kv: abs(kv[1]), default=None)
    waits = {v: [r.name for r in rows if r.verdict == v]
             for v in (decodetime.MEMORY, decodetime.COMPUTE, decodetime.MIXED)}
    notes = [
        (f"One sequence's step waits on the slower of reading the weights and doing one token's arithmetic, plus a "
         f"fixed cost per block: t₁ = L × f + max(W ÷ B, n × c). Fitted on the {len(rows)} models' median steps at "
         f"P = 1 (least squares of the relative error): B = {terms.gbs:.3g} GB/s, c = {terms.arith_ps:.3g} ps per "
         f"parameter ({terms.arith_gflops:.3g} GFLOP/s at one token) and f = {terms.fixed_ms_per_block:.3g} ms per "
         f"block; the fit's columns are these terms, set against every model."),
        ("The predicted column is each model by the terms fitted on the others alone: what the model says of a "
         "model it has not seen. "
         + (f"Within ±{100 * MODEL_TOLERANCE:.0f}% of measured: {len(within)} of {len(errors)}"
            + (f"; the furthest, {worst[0]}, at {100 * worst[1]:+.0f}%." if worst else ".")
            if errors else f"Too few models to leave one out (at least {decodetime.MIN_FIT + 1}).")),
        ("The verdict is what the step waits on beyond its fixed cost: memory-bound when reading the weights takes "
         "longer than the arithmetic, compute-bound when the arithmetic takes as long or longer, under the terms of "
         "every model and under each fit that leaves one model out. Where those fits disagree it is mixed: one "
         "model's steps would turn it over, so the run cannot tell the two terms apart. The fixed cost is paid either "
         "way and is left out: on the widths of one model only L × f + n × c is measured, so f and c trade against "
         "each other there. Here: "
         + "; ".join(f"{v} {', '.join(names)}" for v, names in waits.items() if names) + "."),
        ("The read and arithmetic shares overlap (they run at once), so the shares of one row add to more than "
         "100%: each says how much of the step that term alone would take."),
    ]
    lines = [(r, r.line) for r in rows if r.line is not None]
    if lines:
        jumps = [f"{r.name} {r.step_ms[2] - r.step_ms[1]:.3g} ms, then {line.slope_ms:.3g} ms per sequence"
                 for r, line in lines]
        dearer = all(r.step_ms[2] - r.step_ms[1] > line.slope_ms for r, line in lines)
        notes.append(
            f"Several sequences in one step are another regime: the weights are read once for all of them. The line "
            f"through the steps at P = {' and '.join(map(str, LEVELS))} has slope b (each further sequence) and "
            f"intercept a. From one sequence to two the step grows by: {'; '.join(jumps)}. "
            + ("The second sequence costs more than each further one, so the one-sequence terms are not carried to "
               "batches; lesson 7's batching table measures them." if dearer else
               "Lesson 7's batching table measures batches on the default model."))
    if ref:
        notes.append(f"B is {100 * terms.gbs / ref.gbs:.0f}% of the {ref.gbs:.3g} GB/s {ref.label}, the bandwidth numpy's "
                     f"multi-threaded sum reached: B is what decode's own kernels read the weights at, and it feeds the "
                     f"model; the numpy reading is the memory's as numpy sees it.")
    if matvec is not None:
        notes.append(f"Read the way decode reads (numpy's float32 matrix-vector product over "
                     f"{matvec['bytes_per_sample'] / MB:,.0f} MB with {matvec['threads']} thread(s)): "
                     f"{matvec['gb_per_s']['median']:.3g} GB/s, so B is {100 * terms.gbs / matvec['gb_per_s']['median']:.0f}% "
                     f"of it. B feeds the model: it is fitted on the engine's own steps; both numpy readings stay "
                     f"beside it, one reading each per run.")
    notes.append(
        f"The published {published.SPARK_NAME} figures in the same terms: {PUBLISHED_BYTES / GB:g} GB ÷ "
        f"{published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s = {spark['memory_ms']:.1f} ms to read the weights of "
        f"{spark['measured_ms']:.1f} ms per token ({PUBLISHED_DECODE:g} tokens/s); the arithmetic at prefill's rate "
        f"{spark['arithmetic_ms']:.2f} ms (a lower bound: prefill's kernels are matrix-matrix); the remaining "
        f"{spark['rest_ms']:.1f} ms is the fixed cost. The step waits on memory for "
        f"{100 * spark['memory_share']:.0f}% of it: {spark_verdict(spark)}.")
    return notes


def show_decode_model(ctx: LessonContext, widths: list[decodetime.Width], rows: list[ModelRow],
                      terms: decodetime.Terms | None, why_not: str, ref: BandwidthReference | None,
                      spark: dict[str, float], matvec: dict | None = None) -> None:
    if terms is None:
        ctx.table("decode_model", "Decode time from measured terms", columns(UnfitRow),
                  cells([UnfitRow(w.name, why_not) for w in widths]))
        return
    ctx.table(
        "decode_model", "Every model explained: reading the weights, one token's arithmetic and a fixed cost per step",
        columns(DecodeModelRow), cells([*map(decode_model_row, rows), spark_decode_model_row(spark)]),
        notes=model_notes(rows, terms, ref, spark, matvec))


def prefill_notes(points: list[PrefillPoint], terms: decodetime.Terms, plan: PrefillPlan) -> list[str]:
    slowest = max(points, key=lambda p: p.decode_over_prefill)
    fastest = min(points, key=lambda p: p.decode_over_prefill)
    return [
        (f"A prompt of {plan.tokens} tokens, one micro-batch, on the first model of each weight type: {plan.samples} "
         f"timed prefills after {plan.warmup} warm-up{'' if plan.warmup == 1 else 's'}, from the server's "
         f"prompt_ms; reached = 2 FLOPs per parameter × tokens/s. Prefill runs matrix-matrix kernels, each weight "
         f"read once for all {plan.tokens} tokens: the fastest arithmetic the engine shows for that weight type."),
        (f"Decode's one-token arithmetic, n × c at the run's c = {terms.arith_ps:.3g} ps per parameter "
         f"({terms.arith_gflops:.3g} GFLOP/s), takes {fastest.decode_over_prefill:.2g}× ({fastest.name}) to "
         f"{slowest.decode_over_prefill:.2g}× ({slowest.name}) the time of a token of prefill: decode's kernels "
         f"(matrix-vector, one token at a time) are not prefill's, so the model fits c on decode's own steps instead of "
         f"taking prefill's rate, which would put each width's arithmetic that many times too low."),
    ]


def record_prefill(ctx: LessonContext, runs: list[ModelRun], plan: SamplePlan) -> None:
    """Every timed prefill, whether or not the decode-time model could be fitted."""
    for r in runs:
        if r.prefill and plan.prefill is not None:
            ctx.measure("prefill_tokens_per_s", "tokens/s", r.prefill, higher_is_better=True,
                        settings={"preset": r.info.name, "prompt_tokens": plan.prefill.tokens},
                        description="prefill of a prompt of prompt_tokens tokens, one generated, from the server's timings")


def show_prefill(ctx: LessonContext, runs: list[ModelRun], terms: decodetime.Terms | None, plan: SamplePlan) -> None:
    """Each weight type's prefill beside decode's arithmetic (nothing for a run without prefills or without terms)."""
    points = [] if terms is None else prefill_points(runs, terms)
    if not points or plan.prefill is None or terms is None:
        return
    ctx.table("prefill_per_width", "Prefill per weight type: the engine's fastest arithmetic, beside decode's",
              columns(PrefillRow), cells([prefill_row(p) for p in points]), notes=prefill_notes(points, terms, plan.prefill))


def show_context_prediction(ctx: LessonContext, sp: ContextPrediction) -> None:
    spec = published.SPECIMEN
    ctx.table(
        "bytes_model_with_context", "Decode at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d)",
        columns(ContextRow), cells([context_row(sp)]),
        notes=[(f"The specimen has no grouped-query attention: KV = 2 × {spec['n_layer']} layers × "
                f"{published.SPECIMEN_N_HEAD_KV} KV heads × {spec['n_embd'] // spec['n_head']} "
                f"× 2 bytes = {sp.kv_bytes_per_token:,.0f} bytes per token."),
               (f"Its short-prompt decode of {sp.short:g} tokens/s read {sp.effective_gbs:.3g} GB/s; at that rate, "
                f"after {sp.depth:,} tokens each token also reads {sp.kv_bytes_per_token * sp.depth / GB:.3g} GB "
                f"of KV cache: {sp.predicted:.1f} tokens/s predicted, {sp.published:g} published "
                f"({100 * sp.error:+.1f}%). Lesson 6 sets the same model against this run's own depths.")],
    )


def plot_decode_vs_bytes(ctx: LessonContext, points: list[dict], fit: dict | None, ref: BandwidthReference | None) -> None:
    """Tokens/s against bytes per token on log-log axes, with the fitted line and the bandwidth's."""
    xs = [p["bytes"] / MB for p in points]
    lo, hi = min(xs) / 2, max(max(xs), PUBLISHED_BYTES / MB) * 2

    def line(gbs: float) -> list[float]:
        return [gbs * GB / (lo * MB), gbs * GB / (hi * MB)]

    mem = [p for p in points if not p["cache_resident"]]
    cached = [p for p in points if p["cache_resident"]]
    series = []
    for group, label in ((mem, "measured (median, min–max)"), (cached, "cache-resident (kept out of the fit)")):
        if group:
            series.append(Series(label=label, x=[p["bytes"] / MB for p in group], y=[p["median"] for p in group],
                                 y_min=[p["min"] for p in group], y_max=[p["max"] for p in group], style="points"))
    if fit:
        series.append(Series(label=f"fit: {fit['gbs']:.3g} GB/s ÷ bytes", x=[lo, hi], y=line(fit["gbs"]), style="dashed"))
    if ref:
        series.append(Series(label=f"{ref.gbs:.3g} GB/s ÷ bytes ({ref.label})", x=[lo, hi], y=line(ref.gbs),
                             style="dashed"))
    series.append(Series(label=PUBLISHED_LABEL, x=[PUBLISHED_BYTES / MB], y=[PUBLISHED_DECODE], style="points"))
    ctx.plot("decode_vs_bytes", "Decode tokens/s against bytes per token", "bytes per token (MB)", "decode tokens/s",
             series, log_x=True, log_y=True)


# --- the lesson ---------------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    local = facts["local"]  # our own servers run on this host, with the user's server flags
    sizes = parse_sizes(ctx.options.sizes, default_sizes(ctx)) if local else []
    given = ctx.options.bandwidth_gbs
    ctx.settings.update({"pinned": measure.PINNED, "top": TOP, "n_predict": N_PREDICT, "prompt": PROMPT, "local": local,
                         "sizes": sizes, "repeat": ctx.repeat, "bandwidth_gbs": given,
                         "host_bandwidth_applies": facts["host_bandwidth_applies"], "tolerance": sweep.TOLERANCE})

    # The run's bandwidth (taken before the decode work, shared by every lesson); only where it feeds decode.
    # Cache-resident is a question about this CPU's cache: only when our servers decode on it.
    bw = ctx.run_bandwidth() if facts["host_bandwidth_applies"] else None
    ref = server_bandwidth(bw["gb_per_s"]["median"] if bw else None, host_applies=facts["host_bandwidth_applies"],
                           given_gbs=given)
    llc = (bw or {}).get("llc_bytes") if facts["host_bandwidth_applies"] else None
    available = ctx.host("available_memory_bytes", environment.available_memory) if local else None
    matvec = matvec_reading(ctx, bw)

    # 1. The sweep: each model on a server of its own; the answer, then the timed decodes at P = 1, 2 and 4.
    plan = sample_plan(ctx)
    ctx.settings.update({"sample_plan": {"warmup": plan.warmup, "samples": plan.samples, "levels": list(plan.levels)},
                         "model_tolerance": MODEL_TOLERANCE})
    if plan.prefill is not None:
        ctx.settings["prefill_plan"] = {"warmup": plan.prefill.warmup, "samples": plan.prefill.samples,
                                        "tokens": plan.prefill.tokens}
    runs, skipped = sweep_local(ctx, sizes, available, plan) if local else (sweep_remote(ctx, facts, plan), [])
    after = ctx.run_bandwidth_after() if bw is not None else None

    # 2. The points and their verdicts (bytesup.course.memory_bound: stated rules, tested on their own).
    memory_max = fastest_memory_gbs(bw, after)
    points = sweep_points(runs, llc, memory_max)
    analysis = sweep.analyse(points)
    answers = {r.info.name: r.answer for r in runs}
    rows = [sweep_row(p, analysis["verdicts"][p["name"]], ref.gbs if ref else None, answers.get(p["name"]))
            for p in points]
    record_measurements(ctx, points, ref)
    record_prefill(ctx, runs, plan)
    show_models(ctx, runs, points, llc, memory_max, bw, skipped, available, facts, local)
    show_sweep(ctx, rows, published_point(), verdict_sentences(points, analysis, answers, ref, llc),
               bandwidth_note(bw, ref, given, facts), plan)
    show_steps(ctx, analysis["steps"])

    # 3. The fit and the run's bandwidth, before and after the decode work.
    record_fit(ctx, analysis, bw, after)
    show_fit(ctx, analysis, fit_rows(analysis, ref, bw, after, matvec), bw, after)

    # 4. Every width explained: the decode-time model's terms from the step times, predicted beside measured.
    widths = model_widths(runs)
    terms, why_not = fit_terms(widths)
    if any(r.together for r in runs):
        record_decode_model(ctx, runs, widths)
        explained = [] if terms is None else model_rows(widths, runs, terms)
        show_decode_model(ctx, widths, explained, terms, why_not, ref, spark_terms(), matvec)
        show_prefill(ctx, runs, terms, plan)

    # 5. The bytes model with context, on the published figures.
    show_context_prediction(ctx, spark_context_prediction())

    # 6. The picture: tokens/s against bytes per token on log-log axes, with the fitted line.
    plot_decode_vs_bytes(ctx, points, analysis["fit"], ref)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
