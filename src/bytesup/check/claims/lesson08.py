"""The capstone's claims (lesson 8): decode efficiency within [0, 1] (lesson 4's too; a sanity check), the
decode-time model predicting every model it left out, refitted here from the lesson's samples, and the course's
title, decode memory-bound, width by width against the verdict lesson 8 shows and the one these fits give.

The decode-time model, t₁ = L × f + max(W ÷ B, n × c) with one c per weight type (bytesup.course.decodetime states
it for the lesson), is fitted here with arithmetic of check's own: the same form, another way to the same least
squares. Write each type's c = κ ÷ B: κ is that type's crossover, the bytes per parameter at which reading its
weights takes as long as its arithmetic. For given κ of every type the step is L × f + max(W, κ × n) ÷ B, linear in
f and 1 ÷ B, so the relative least squares Σ (predicted ÷ measured step − 1)² has a closed form in those two (each at
least 0). Each type's κ is searched in turn, the others held, until none moves: 0, its models' own W ÷ n, a fine
logarithmic grid from the smallest of them to KAPPA_SPAN times the largest, then a golden-section refinement beside
the best. Below a type's smallest W ÷ n its models wait on their weights and its κ changes nothing, so where several
κ fit equally well the smallest is taken (the arithmetic no larger than the steps demand).

A model is predicted by the terms fitted on the others only where another model shares its weight type: alone, its
c would come from its own step, and the claim is not applicable to it (`alone_in_its_type` names the sweep that
would test it).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass

import numpy as np

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

# Each type's κ on a logarithmic grid from its smallest bytes per parameter to KAPPA_SPAN times its largest, then
# this many golden-section steps; and at most ROUNDS rounds over the types (they settle in a few).
CROSSOVER_GRID = 2000
KAPPA_SPAN = 1000.0
REFINE_STEPS = 80
ROUNDS = 50
# Three terms (f, B and one type's c) need three models to fit; leaving one out to predict it needs one more.
TERMS = 3
# Two losses within this fraction (plus TIE_FLOOR) of each other are equal: the smaller κ is taken.
TIE, TIE_FLOOR = 1e-9, 1e-15


@dataclass(frozen=True)
class ModelSamples:
    """One model as check reads it: weight bytes W, parameters n, blocks L, its step times (ms) at one sequence,
    1000 ÷ each sample of the lesson's decode tokens/s, and its weight type ("" where not known: such models share
    one c)."""
    name: str
    weight_bytes: float
    n_params: float
    n_layer: int
    steps_ms: tuple[float, ...]
    weight_type: str = ""

    @property
    def step_ms(self) -> float:
        """The median step, the outliers among the tokens/s samples left out (bytesup.course.robust, on the samples
        as measured): a request that waited for another process neither moves the centre nor decides the fit."""
        outliers = robust.judge([1e3 / s for s in self.steps_ms]).outliers
        return statistics.median(s for i, s in enumerate(self.steps_ms) if i not in outliers)


@dataclass(frozen=True)
class StepTerms:
    """f (ms per block), 1 ÷ B (ms per byte) and κ per weight type (its crossover, bytes per parameter): c = κ ÷ B."""
    per_block_ms: float
    ms_per_byte: float
    kappa: tuple[tuple[str, float], ...]  # (weight type, κ)

    def crossover(self, weight_type: str = "") -> float:
        return dict(self.kappa)[weight_type]

    def ms_per_param(self, weight_type: str = "") -> float:
        return self.crossover(weight_type) * self.ms_per_byte

    @property
    def gbs(self) -> float:
        return 1e-6 / self.ms_per_byte if self.ms_per_byte > 0 else math.inf

    def memory_ms(self, m: ModelSamples) -> float:
        return m.weight_bytes * self.ms_per_byte

    def arithmetic_ms(self, m: ModelSamples) -> float:
        return m.n_params * self.ms_per_param(m.weight_type)

    def step_ms(self, m: ModelSamples) -> float:
        return m.n_layer * self.per_block_ms + max(self.memory_ms(m), self.arithmetic_ms(m))


def _two_terms(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(f, r, Σ (a f + b r − 1)²) at its least with f ≥ 0 and r ≥ 0, for each row of b ([rows, models]; a is
    [models]): the normal equations' solution where both are ≥ 0, else the better of the two edges f = 0 and r = 0."""
    saa, sa = float(a @ a), float(a.sum())
    sbb, sab, sb = (b * b).sum(axis=1), b @ a, b.sum(axis=1)

    def loss(f: np.ndarray, r: np.ndarray) -> np.ndarray:
        return ((a[None, :] * f[:, None] + b * r[:, None] - 1) ** 2).sum(axis=1)

    det = saa * sbb - sab * sab
    ok = det > 1e-12 * saa * sbb
    safe = np.where(ok, det, 1.0)
    f_in, r_in = (sa * sbb - sb * sab) / safe, (saa * sb - sab * sa) / safe
    inside = ok & (f_in >= 0) & (r_in >= 0)
    f_r, r_r = np.zeros_like(sb), np.clip(sb / np.where(sbb > 0, sbb, 1.0), 0.0, None)
    f_f, r_f = np.full_like(sb, max(sa / saa, 0.0)), np.zeros_like(sb)
    l_r, l_f = loss(f_r, r_r), loss(f_f, r_f)
    edge_f = l_f < l_r
    f = np.where(inside, f_in, np.where(edge_f, f_f, f_r))
    r = np.where(inside, r_in, np.where(edge_f, r_f, r_r))
    return f, r, loss(f, r)


def _least(losses: np.ndarray, kappas: np.ndarray) -> int:
    """The index of the least loss, the smallest κ among those equal to it."""
    close = losses <= losses.min() * (1 + TIE) + TIE_FLOOR
    return int(np.flatnonzero(close)[np.argmin(kappas[close])])


def fit_step_terms(models: list[ModelSamples]) -> StepTerms:
    """The terms that make Σ (predicted ÷ median step − 1)² least over `models` (see the module). ValueError with
    fewer than three models."""
    if len(models) < TERMS:
        raise ValueError(f"three terms need at least {TERMS} models; {len(models)} given")
    return _fitted(tuple(models))


# One check asks for the same fit several times (the verdicts, the decode-time model and the title claim each leave
# the same models out), and a fit is some ten thousand small least squares: each set of models is fitted once.
@functools.lru_cache(maxsize=256)
def _fitted(models: tuple[ModelSamples, ...]) -> StepTerms:
    kinds = list(dict.fromkeys(m.weight_type for m in models))
    ts = np.array([m.step_ms for m in models])
    w = np.array([m.weight_bytes for m in models]) / ts
    n = np.array([m.n_params for m in models]) / ts
    a = np.array([m.n_layer for m in models], dtype=float) / ts
    of = {k: np.array([m.weight_type == k for m in models]) for k in kinds}
    kappa = dict.fromkeys(kinds, 0.0)

    def at(kind: str, candidates: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        """The least loss over f and r at each κ of `kind` in `candidates`, the other types' κ as they are (`fixed`:
        max(W, κ × n) of each model at those)."""
        b = np.where(of[kind][None, :], np.maximum(w[None, :], candidates[:, None] * n[None, :]), fixed[None, :])
        return _two_terms(a, b)[2]

    for _ in range(ROUNDS):
        before = dict(kappa)
        for kind in kinds:
            ratios = sorted({m.weight_bytes / m.n_params for m in models if m.weight_type == kind})
            lo, hi = ratios[0], ratios[-1] * KAPPA_SPAN
            grid = np.unique(np.concatenate([[0.0, kappa[kind]], ratios,
                                             lo * (hi / lo) ** (np.arange(1, CROSSOVER_GRID) / CROSSOVER_GRID)]))
            fixed = np.maximum(w, np.array([kappa[m.weight_type] for m in models]) * n)
            losses = at(kind, grid, fixed)
            best = _least(losses, grid)
            k, loss = float(grid[best]), float(losses[best])
            # Golden-section steps between the best point's neighbours (the loss is smooth between breakpoints).
            left, right = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
            g = (math.sqrt(5) - 1) / 2
            for _ in range(REFINE_STEPS if right > left else 0):
                x1, x2 = right - g * (right - left), left + g * (right - left)
                l1, l2, mid = at(kind, np.array([x1, x2, (x1 + x2) / 2]), fixed)
                if l1 <= l2:
                    right = x2
                else:
                    left = x1
                if mid < loss * (1 - 1e-12):
                    k, loss = (x1 + x2) / 2, float(mid)
            kappa[kind] = k
        if all(math.isclose(kappa[k], before[k], rel_tol=1e-12, abs_tol=1e-15) for k in kinds):
            break
    b = np.maximum(w, np.array([kappa[m.weight_type] for m in models]) * n)
    f, r, _ = _two_terms(a, b[None, :])
    return StepTerms(float(f[0]), float(r[0]), tuple((k, kappa[k]) for k in kinds))


@dataclass(frozen=True)
class HeldOut:
    """One model predicted by the terms of the others."""
    model: ModelSamples
    terms: StepTerms

    @property
    def error(self) -> float:
        """Predicted ÷ measured tokens/s − 1 = measured step ÷ predicted step − 1."""
        return self.model.step_ms / self.terms.step_ms(self.model) - 1


def alone(models: list[ModelSamples]) -> list[ModelSamples]:
    """The models no other shares the weight type of: their c would come from their own steps alone."""
    return [m for m in models if not any(x.weight_type == m.weight_type for x in models if x is not m)]


def held_out(models: list[ModelSamples]) -> list[HeldOut]:
    """Each model that shares its weight type with another, by the terms fitted on every other one (needs TERMS + 1
    models)."""
    lonely = alone(models)
    return [HeldOut(m, fit_step_terms([x for x in models if x is not m])) for m in models if m not in lonely]


def alone_in_its_type(model: ModelSamples, models: list[ModelSamples]) -> str:
    """Why a model the only one of its weight type cannot be predicted by the others, and where the catalog has a
    second model of its type, the sweep that would test it."""
    kind = model.weight_type
    said = (f"{model.name} is the only {kind} model: its arithmetic per parameter c would come from its own step "
            f"alone, so the terms of the others cannot predict it")
    second = second_model_of(kind)
    if second is None or any(m.name == second for m in models):
        return said
    names = ",".join([*(m.name for m in models), second])
    return (f"{said}; a second {kind} model in the sweep tests it: "
            f"bytesup run 08_capstone_decode_memory_bound --sizes {names}")


def second_model_of(kind: str) -> str | None:
    """The synthetic preset of medium shape in a weight type as the GGUF names it ("F16", "ALL_F32", "MOSTLY_Q4_1"),
    where the catalog has one."""
    wanted = kind.upper().removeprefix("ALL_").removeprefix("MOSTLY_")
    found = [name for name, p in catalog.PRESETS.items() if name.startswith("medium-") and p.weight_type == wanted]
    return found[0] if found else None


def terms_text(terms: StepTerms, models: list[ModelSamples] | None = None) -> str:
    """B, c per weight type and f in words. A type whose crossover came out 0 had every model wait on reading its
    weights: its c is hidden, and only the most it could be is said (its models' fewest bytes per parameter ÷ B),
    where `models` give them."""
    def c_text(kind: str, kappa: float) -> str:
        name = kind or "every model"
        if kappa > 0:
            return f"{name} {terms.ms_per_param(kind) * 1e9:.4g} ps (crossover {kappa:.3g})"
        fewest = min((m.weight_bytes / m.n_params for m in models or [] if m.weight_type == kind), default=None)
        if fewest is None:
            return f"{name} hidden under its reading"
        return (f"{name} hidden under its reading (at most {fewest * terms.ms_per_byte * 1e9:.4g} ps; crossover below "
                f"{fewest:.3g})")
    cs = ", ".join(c_text(k, kappa) for k, kappa in terms.kappa)
    return (f"B = {terms.gbs:.4g} GB/s, c per parameter {cs}, f = {terms.per_block_ms * 1e3:.4g} µs per block")


def decode_model_check(models: list[ModelSamples], tolerance: float) -> tuple[str, str, str]:
    """(status, observed, detail) of the decode-time model on the models' samples at one sequence: each model that
    shares its weight type with another predicted by the terms check fits on the others, within `tolerance`
    (predicted ÷ measured tokens/s − 1). A miss is inconclusive rather than a failure where some model's steps
    scatter wider than the tolerance (interquartile range ÷ median by bytesup.course.robust, the project's one rule
    for a spread, applied to the samples themselves): such samples cannot tell a model that holds from one that
    does not. A model alone in its weight type is left to `alone_in_its_type`."""
    if len(models) <= TERMS:
        return NA, "too few models", (f"{len(models)} models with decode samples at one sequence; leaving one out "
                                      f"needs at least {TERMS + 1}")
    held = held_out(models)
    if not held:
        return NA, "no model shares its weight type", ("each model is the only one of its weight type, so none can be "
                                                       "predicted by the terms of the others")
    every = fit_step_terms(models)
    worst = max(held, key=lambda h: abs(h.error))
    scatter, scattered = max((robust.judge(m.steps_ms).relative_iqr, m.name) for m in models)
    status = prediction_status(worst.error, tolerance, scatter)
    detail = (f"every model's samples give {terms_text(every, models)}; each model by the terms of the others: "
              + "; ".join(f"{h.model.name}: {h.error:+.1%}" for h in held))
    if status == INCONCLUSIVE:
        detail += (f"; {scattered}'s steps scatter by {scatter:.0%} (interquartile range ÷ median), wider than "
                   f"±{tolerance:.0%}: inconclusive")
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
        out.append(ModelSamples(w.name, weight_bytes, n_params, n_layer, tuple(1e3 / v for v in tokens_per_s),
                                w.weight_type))
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
    status, observed, detail = decode_model_check(models, fact.tolerance)
    sources = {_model_numbers(lesson, w)[3] for w in fact.widths if w.name not in without}
    if sources:
        detail += ("; refitted by check from each model's decode_tokens_per_s samples (median of 1000 ÷ tokens/s, "
                   "outliers left out) and its W, n and L of its " + " or ".join(sorted(sources)))
    if without:
        detail += f"; without samples: {', '.join(without)}"
    results = [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                           expected="every model that shares its weight type within the tolerance the lesson states",
                           tolerance=f"±{fact.tolerance:.0%}", detail=detail)]
    if len(models) > TERMS:
        results += [ClaimResult(cid, "general", lesson.lesson_id, f"{text}: {m.name}", NA,
                                observed=f"alone in its weight type ({m.weight_type})",
                                expected="predicted by the terms of the others", detail=alone_in_its_type(m, models))
                    for m in alone(models)]
    return results


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
    if terms.crossover(m.weight_type) > 0:
        numbers = (f"by every model's terms, reading the weights W ÷ B = {read:.3g} ms, one token's arithmetic n × c = "
                   f"{arithmetic:.3g} ms; {m.weight_bytes / m.n_params:.3g} bytes per parameter against its weight "
                   f"type's crossover B × c = {terms.crossover(m.weight_type):.3g}")
    else:
        numbers = (f"by every model's terms, reading the weights W ÷ B = {read:.3g} ms, and one token's arithmetic hidden "
                   "under it: every model of its weight type waited on reading its weights")
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
