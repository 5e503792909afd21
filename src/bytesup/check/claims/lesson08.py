"""The capstone's claims (lesson 8): decode efficiency within [0, 1] (lesson 4's too; a sanity check), the
decode-time model predicting every model it left out, refitted here from the lesson's samples, and the course's
title, decode memory-bound, width by width against the verdict lesson 8 shows and the one these fits give.

The decode-time model, t₁ = L × f + max(W ÷ B, n × c) (bytesup.course.decodetime states it for the lesson), is
fitted here with arithmetic of check's own: the same form, another way to the same least squares. Write c = κ ÷ B:
κ is the crossover, the bytes per parameter at which reading the weights takes as long as the arithmetic. For
one κ the step is L × f + max(W, κ × n) ÷ B, linear in f and 1 ÷ B, so the relative least squares
Σ (predicted ÷ measured step − 1)² has a closed form in those two (each at least 0). κ itself is searched:
every model's own W ÷ n, a fine logarithmic grid between the smallest and the largest, then a golden-section
refinement beside the best. Below the smallest W ÷ n every model waits on its weights and κ changes nothing;
from the largest on every model waits on its arithmetic and only κ ÷ B counts: so the search spans 0 and that
range, and where several κ fit equally well the smallest is taken (the arithmetic no larger than the steps
demand).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bytesup.course import published, robust
from bytesup.models import catalog
from bytesup.store.runs import Run
from bytesup.store.facts.lesson08 import DecodeModel, ModelSteps
from bytesup.store.results import LessonResult
from bytesup.store.render import fmt, measurement_label
from bytesup.check.verdicts import (COURSE, ITSELF, SANITY, FAIL, INCONCLUSIVE, NA, PASS, ClaimResult,
                                    find_lesson, judged, measurements, missing)
from bytesup.check.claims.common import L4, L8, grouped, lesson_fact, prediction_status, timing


# --- lessons 4, 7 and 8: ceilings ----------------------------------------------------------------

@grouped(SANITY)
@timing
def claim_decode_efficiency_in_unit_interval(run: Run) -> list[ClaimResult]:
    """Efficiency = measured ÷ ceiling; the ceiling comes from a measured bandwidth, so its spread
    widens what "at most 1" allows: the lowest efficiency the samples allow is
    min(efficiency) × median(bandwidth) ÷ max(bandwidth)."""
    cid, text = "decode_efficiency_in_unit_interval", "decode efficiency (measured ÷ bandwidth ceiling) lies between 0 and 1"
    results = []
    for prefix, name in (("04_", L4), ("08_", L8)):
        lesson = find_lesson(run, prefix)
        if lesson is None:
            results.append(ClaimResult(cid, "general", prefix[:2], text, NA, detail=missing(run, prefix, name)))
            continue
        effs = measurements(lesson, "decode_efficiency")
        if not effs:
            results.append(ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                       detail=f"lesson {lesson.lesson_id} has no decode_efficiency measurement"))
            continue
        bws = measurements(lesson, "read_bandwidth_gb_per_s")
        bandwidth_allowance = bws[0].max / bws[0].median if bws and bws[0].max > 0 and bws[0].median > 0 else 1.0
        for m in effs:
            label = text + measurement_label("", m.settings)
            if m.settings.get("cache_resident") is True:
                # Weights within the last-level cache need not come from the memory the bandwidth test read.
                results.append(ClaimResult(cid, "general", lesson.lesson_id, label, NA,
                                           detail="cache-resident: the weights fit in the last-level cache"))
                continue
            # A ceiling from a stated bandwidth (--bandwidth-gbs) has no measured spread to allow for.
            allowance = 1.0 if m.settings.get("bandwidth_gbs") is not None else bandwidth_allowance
            factor = 0.01 if m.unit.strip() in ("%", "percent") else 1.0
            kept = judged(m)  # an outlier (a stalled request) neither passes nor fails the claim
            med, lo, hi = m.median * factor, kept.low * factor, kept.high * factor
            if 0 < med <= 1:
                status, detail = PASS, ""
            elif hi > 0 and lo / allowance <= 1:
                status, detail = PASS, (f"the median is above 1, but within the measured spread: the lowest sample "
                                        f"{fmt(lo)} and the bandwidth's max/median {allowance:.3g} allow ≤ 1")
            else:
                status, detail = FAIL, ("no sample is above 0" if hi <= 0 else
                                        f"even the lowest sample {fmt(lo)} with the bandwidth's max/median {allowance:.3g} stays above 1")
            results.append(ClaimResult(cid, "general", lesson.lesson_id, label, status,
                                       observed=f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})", expected="0 < efficiency ≤ 1",
                                       tolerance=(f"the samples, and the bandwidth's max ÷ median ×{allowance:.3g}"
                                                  if allowance > 1.0005 else "the samples' spread"),
                                       detail=detail))
    return results


# --- the decode-time model, refitted from the samples ---------------------------------------------

# κ's logarithmic grid between the smallest and the largest bytes per parameter, then this many golden-section steps.
CROSSOVER_GRID = 2000
REFINE_STEPS = 80
# Three terms need three models to fit; leaving one out to predict it needs one more.
TERMS = 3


@dataclass(frozen=True)
class ModelSamples:
    """One model as check reads it: weight bytes W, parameters n, blocks L, and its step times (ms) at one
    sequence, 1000 ÷ each sample of the lesson's decode tokens/s."""
    name: str
    weight_bytes: float
    n_params: float
    n_layer: int
    steps_ms: tuple[float, ...]

    @property
    def step_ms(self) -> float:
        """The median step."""
        return statistics.median(self.steps_ms)


@dataclass(frozen=True)
class StepTerms:
    """f (ms per block), 1 ÷ B (ms per byte) and κ (the crossover, bytes per parameter): c = κ ÷ B."""
    per_block_ms: float
    ms_per_byte: float
    crossover: float

    @property
    def ms_per_param(self) -> float:
        return self.crossover * self.ms_per_byte

    @property
    def gbs(self) -> float:
        return 1e-6 / self.ms_per_byte if self.ms_per_byte > 0 else math.inf

    def memory_ms(self, m: ModelSamples) -> float:
        return m.weight_bytes * self.ms_per_byte

    def arithmetic_ms(self, m: ModelSamples) -> float:
        return m.n_params * self.ms_per_param

    def step_ms(self, m: ModelSamples) -> float:
        return m.n_layer * self.per_block_ms + max(self.memory_ms(m), self.arithmetic_ms(m))


def _two_terms(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(f, r, Σ (a f + b r − 1)²) at its least with f ≥ 0 and r ≥ 0: the normal equations' solution where both
    are ≥ 0, else the better of the two edges f = 0 and r = 0."""
    saa, sbb, sab = sum(x * x for x in a), sum(y * y for y in b), sum(x * y for x, y in zip(a, b, strict=True))
    sa, sb = sum(a), sum(b)

    def loss(f: float, r: float) -> float:
        return sum((x * f + y * r - 1) ** 2 for x, y in zip(a, b, strict=True))

    det = saa * sbb - sab * sab
    if det > 1e-12 * saa * sbb:
        f, r = (sa * sbb - sb * sab) / det, (saa * sb - sab * sa) / det
        if f >= 0 and r >= 0:
            return f, r, loss(f, r)
    edges = [(0.0, max(sb / sbb, 0.0)), (max(sa / saa, 0.0), 0.0)]
    return min(((f, r, loss(f, r)) for f, r in edges), key=lambda e: e[2])


def fit_step_terms(models: list[ModelSamples]) -> StepTerms:
    """The terms that make Σ (predicted ÷ median step − 1)² least over `models` (see the module). ValueError with
    fewer than three models."""
    if len(models) < TERMS:
        raise ValueError(f"three terms need at least {TERMS} models; {len(models)} given")
    ts = [m.step_ms for m in models]
    a = [m.n_layer / t for m, t in zip(models, ts, strict=True)]

    def at(kappa: float) -> tuple[float, float, float]:
        b = [max(m.weight_bytes, kappa * m.n_params) / t for m, t in zip(models, ts, strict=True)]
        return _two_terms(a, b)

    ratios = sorted({m.weight_bytes / m.n_params for m in models})
    lo, hi = ratios[0], ratios[-1]
    grid = [0.0, *ratios]
    if hi > lo:
        grid += [lo * (hi / lo) ** (i / CROSSOVER_GRID) for i in range(1, CROSSOVER_GRID)]
    grid.sort()
    losses = [at(k)[2] for k in grid]
    best = min(range(len(grid)), key=lambda i: (losses[i], grid[i]))
    kappa, loss = grid[best], losses[best]
    # Golden-section steps between the best point's neighbours (the loss is smooth between breakpoints).
    left, right = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(REFINE_STEPS if right > left else 0):
        x1, x2 = right - g * (right - left), left + g * (right - left)
        if at(x1)[2] <= at(x2)[2]:
            right = x2
        else:
            left = x1
        mid = (left + right) / 2
        if at(mid)[2] < loss * (1 - 1e-12):
            kappa, loss = mid, at(mid)[2]
    f, r, _ = at(kappa)
    return StepTerms(f, r, kappa)


@dataclass(frozen=True)
class HeldOut:
    """One model predicted by the terms of the others."""
    model: ModelSamples
    terms: StepTerms

    @property
    def error(self) -> float:
        """Predicted ÷ measured tokens/s − 1 = measured step ÷ predicted step − 1."""
        return self.model.step_ms / self.terms.step_ms(self.model) - 1


def held_out(models: list[ModelSamples]) -> list[HeldOut]:
    """Each model by the terms fitted on every other one (needs TERMS + 1 models)."""
    return [HeldOut(m, fit_step_terms([x for x in models if x is not m])) for m in models]


def alone_in_its_type(missed: ModelSamples, models: list[ModelSamples], types: dict[str, str]) -> str:
    """Where the model furthest off is the only one of its weight type: a clause saying why the terms of the others
    may not hold for it ("" where another model shares its type, or the types are not known)."""
    kind = types.get(missed.name)
    if not kind or any(types.get(m.name) == kind for m in models if m is not missed):
        return ""
    said = (f"; {missed.name} is the only {kind} model, so the terms fitted on the others hold one arithmetic cost c "
            f"per parameter of other weight types: a miss here says that {kind}'s arithmetic per parameter differs "
            "on this engine and CPU, which one c for every weight type cannot hold")
    second = second_model_of(kind)
    if second is None or any(m.name == second for m in models):
        return said
    names = ",".join([*(m.name for m in models), second])
    return (f"{said}; a second {kind} model in the sweep tests whether {kind}'s steps follow one c of their own: "
            f"bytesup run 08_capstone_decode_memory_bound --sizes {names}")


def second_model_of(kind: str) -> str | None:
    """The synthetic preset of medium shape in a weight type as the GGUF names it ("F16", "ALL_F32", "MOSTLY_Q4_1"),
    where the catalog has one."""
    wanted = kind.upper().removeprefix("ALL_").removeprefix("MOSTLY_")
    found = [name for name, p in catalog.PRESETS.items() if name.startswith("medium-") and p.weight_type == wanted]
    return found[0] if found else None


def decode_model_check(models: list[ModelSamples], tolerance: float,
                       types: dict[str, str] | None = None) -> tuple[str, str, str]:
    """(status, observed, detail) of the decode-time model on the models' samples at one sequence: each model
    predicted by the terms check fits on the others, within `tolerance` (predicted ÷ measured tokens/s − 1).
    A miss is inconclusive rather than a failure where some model's steps scatter wider than the tolerance
    (interquartile range ÷ median by bytesup.course.robust, the project's one rule for a spread, applied to the
    samples themselves): such samples cannot tell a model that holds from one that does not."""
    if len(models) <= TERMS:
        return NA, "too few models", (f"{len(models)} models with decode samples at one sequence; leaving one out "
                                      f"needs at least {TERMS + 1}")
    every = fit_step_terms(models)
    held = held_out(models)
    worst = max(held, key=lambda h: abs(h.error))
    scatter, scattered = max((robust.judge(m.steps_ms).relative_iqr, m.name) for m in models)
    status = prediction_status(worst.error, tolerance, scatter)
    detail = (f"every model's samples give B = {every.gbs:.4g} GB/s, c = {every.ms_per_param * 1e9:.4g} ps per "
              f"parameter, f = {every.per_block_ms * 1e3:.4g} µs per block (crossover {every.crossover:.3g} bytes per "
              "parameter); each model by the terms of the others: "
              + "; ".join(f"{h.model.name}: {h.error:+.1%}" for h in held))
    if status == INCONCLUSIVE:
        detail += (f"; {scattered}'s steps scatter by {scatter:.0%} (interquartile range ÷ median), wider than "
                   f"±{tolerance:.0%}: inconclusive")
    elif status == FAIL:
        detail += alone_in_its_type(worst.model, models, types or {})
    return status, f"furthest {worst.model.name} {worst.error:+.1%}", detail


def _model_numbers(lesson: LessonResult, width: ModelSteps) -> tuple[float, float, int, str]:
    """(W, n, L, where from) of one model: the GGUF header the lesson recorded as a host value, else its fact."""
    gguf = lesson.host_values.get(f"model_{width.name}")
    if isinstance(gguf, dict) and all(isinstance(gguf.get(k), (int, float)) for k in ("tensor_bytes", "n_params", "n_layer")):
        return float(gguf["tensor_bytes"]), float(gguf["n_params"]), int(gguf["n_layer"]), "GGUF"
    return width.weight_bytes, width.n_params, width.n_layer, "fact"


def model_samples(lesson: LessonResult, fact: DecodeModel) -> tuple[list[ModelSamples], list[str]]:
    """The models the fact names, each with its decode samples at one sequence (measurement decode_tokens_per_s of
    its preset) and its W, n and L; and the names without samples."""
    samples = {str(m.settings.get("preset")): [v for v in m.samples or [m.median] if v > 0]
               for m in measurements(lesson, "decode_tokens_per_s")}
    out, without = [], []
    for w in fact.widths:
        tokens_per_s = samples.get(w.name)
        if not tokens_per_s:
            without.append(w.name)
            continue
        weight_bytes, n_params, n_layer, _ = _model_numbers(lesson, w)
        out.append(ModelSamples(w.name, weight_bytes, n_params, n_layer, tuple(1e3 / v for v in tokens_per_s)))
    return out, without


@grouped(ITSELF)
@timing
def claim_decode_model_predicts_every_width(run: Run) -> list[ClaimResult]:
    cid = "decode_model_predicts_every_width"
    text = "decode step = a cost per block + the slower of reading the weights and one token's arithmetic predicts every model"
    found = lesson_fact(run, cid, text, L8, DecodeModel,
                        "lesson 08 states no decode-time model (a run before it measured several P)")
    if isinstance(found, list):
        return found
    lesson, fact = found
    models, without = model_samples(lesson, fact)
    status, observed, detail = decode_model_check(models, fact.tolerance, {w.name: w.weight_type for w in fact.widths})
    sources = {_model_numbers(lesson, w)[3] for w in fact.widths if w.name not in without}
    if sources:
        detail += ("; refitted by check from each model's decode_tokens_per_s samples (median of 1000 ÷ tokens/s) and "
                   "its W, n and L of its " + " or ".join(sorted(sources)))
    if without:
        detail += f"; without samples: {', '.join(without)}"
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected="every model within the tolerance the lesson states",
                        tolerance=f"±{fact.tolerance:.0%}", detail=detail)]


# --- the course's title, width by width -------------------------------------------------------------

MEMORY, COMPUTE, MIXED = "memory-bound", "compute-bound", "mixed"


def waits_on(terms: StepTerms, m: ModelSamples) -> str:
    """The larger of the two overlapped terms: memory-bound where reading the weights takes longer than the arithmetic."""
    return MEMORY if terms.memory_ms(m) > terms.arithmetic_ms(m) else COMPUTE


def check_verdicts(models: list[ModelSamples]) -> dict[str, str]:
    """Each model's verdict under check's fit of every model and under each fit that leaves one out (where enough
    remain): named where they all agree, MIXED where leaving one model out turns it over."""
    fits = [fit_step_terms(models)]
    if len(models) > TERMS:
        fits += [h.terms for h in held_out(models)]
    out = {}
    for m in models:
        named = {waits_on(t, m) for t in fits}
        out[m.name] = named.pop() if len(named) == 1 else MIXED
    return out


def stated_verdicts(lesson: LessonResult) -> dict[str, str]:
    """The verdict lesson 8 shows for each model: its decode_model table's "waits on" column."""
    table = next((t for t in lesson.tables if t.name == "decode_model"), None)
    if table is None:
        return {}
    names = [c.name for c in table.columns]
    if "model" not in names or "waits on" not in names:
        return {}
    return {str(r[names.index("model")]): str(r[names.index("waits on")]) for r in table.rows
            if r[names.index("waits on")] is not None}


def title_verdict(m: ModelSamples, stated: str | None, ours: str, terms: StepTerms) -> tuple[str, str]:
    """(status, detail) of the course's title, decode is memory-bound, for one model: its verdict as lesson 8 states
    it and as check's fits give it (`ours`), with the terms of every model (`terms`) for the reason."""
    read, arithmetic = terms.memory_ms(m), terms.arithmetic_ms(m)
    numbers = (f"by every model's terms, reading the weights W ÷ B = {read:.3g} ms, one token's arithmetic n × c = "
               f"{arithmetic:.3g} ms; {m.weight_bytes / m.n_params:.3g} bytes per parameter against the crossover "
               f"B × c = {terms.crossover:.3g}")
    if stated in (MEMORY, COMPUTE) and ours in (MEMORY, COMPUTE) and stated != ours:
        return FAIL, f"lesson 8 states {stated}, but every fit check makes on its samples gives {ours} ({numbers})"
    if MIXED in (ours, stated):
        return INCONCLUSIVE, (f"{'check' if ours == MIXED else 'lesson 8'} finds it mixed: leaving one model out turns "
                              f"over which term is the larger, so this run cannot tell ({numbers})")
    if ours == MEMORY:
        return PASS, numbers
    return NA, (f"the title does not hold for {m.name} on this machine: one token's arithmetic takes longer than reading "
                f"its weights ({numbers}). The course states it for a machine whose arithmetic outpaces its memory "
                f"(the {published.SPARK_NAME}'s GPU); this one's does not, at this many bytes per parameter")


@grouped(COURSE)
@timing
def claim_decode_memory_bound_per_width(run: Run) -> list[ClaimResult]:
    """The course's title claim, decode is memory-bound, for each model the capstone fits: set against the verdict
    lesson 8 states for it and the one check's own fits give (see title_verdict)."""
    cid, text = "decode_memory_bound_per_width", "decode is memory-bound (the course's title)"
    found = lesson_fact(run, cid, text, L8, DecodeModel,
                        "lesson 08 states no decode-time model to give a verdict per width (a run before it)")
    if isinstance(found, list):
        return found
    lesson, fact = found
    models, _ = model_samples(lesson, fact)
    if len(models) < TERMS:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"{len(models)} models with decode samples; the terms need at least {TERMS}")]
    every, ours, stated = fit_step_terms(models), check_verdicts(models), stated_verdicts(lesson)
    results = []
    for m in models:
        status, detail = title_verdict(m, stated.get(m.name), ours[m.name], every)
        results.append(ClaimResult(cid, "general", lesson.lesson_id, f"{text}: {m.name}", status,
                                   observed=f"lesson 8: {stated.get(m.name, 'no verdict shown')}; check: {ours[m.name]}",
                                   expected=MEMORY, tolerance="every fit (all models, and each leaving one out) agrees",
                                   detail=detail))
    return results
