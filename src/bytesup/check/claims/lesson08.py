"""The capstone's claims (lesson 8): decode efficiency within [0, 1] (lesson 4's too; a sanity check), the
decode-time model predicting every model it left out, refitted here from the lesson's samples, and the course's
title, decode memory-bound, width by width against the verdict lesson 8 shows and the one these fits give: it passes
where both say memory-bound, is inconclusive where either finds the width mixed, and fails where both say compute-bound,
a finding about the machine in the course's group (bytesup.check.verdicts.breaks), not a broken run.

The decode-time model, t₁ = L × (f + g × W ÷ params) + max(W ÷ B, params × c) with one c per weight type
(bytesup.course.decodetime states it for the lesson), is fitted here with arithmetic of check's own: the same form,
another way to the same least squares. Write each type's c = κ ÷ B: κ is that type's crossover, the bytes per
parameter at which reading its weights takes as long as its arithmetic. For given κ of every type the step is
L × f + L × W ÷ params × g + max(W, κ × params) ÷ B, linear in f, g and 1 ÷ B, so the relative least squares
Σ (predicted ÷ measured step − 1)² has a closed form in those three, each at least 0 (`_three_terms`: every set of
them solved by its normal equations, the best whose solution is not negative). The fit is made twice, with g and with g
held at 0, and g is kept only where it lowers the sum by more than the course's GAIN (bytesup.course.decodetime).
Each type's κ is searched in turn, the others held, until none moves: 0, its models' own W ÷ params, a fine logarithmic
grid from the smallest of them to KAPPA_SPAN times the largest, then a golden-section refinement beside the best (with
g, finer grids between the best's neighbours), until a round no longer lowers the sum. Below a type's smallest W ÷ params
its models wait on their weights and its κ changes nothing, so where several κ fit equally well the smallest is taken
(the arithmetic no larger than the steps demand).

A model is predicted by the terms fitted on the others only where another model shares its weight type: alone, its
c would come from its own step, and the claim is not applicable to it (`alone_in_its_type` names the sweep that
would test it).
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bytesup.course import decodetime, published, robust
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
    min(efficiency) × median(bandwidth) ÷ max(bandwidth), the max over every sample of the lesson's readings.

    A run fails the claim only where no sample is above 0. Above 1 beyond that allowance, the decode read its weights
    faster than any sample of the bandwidth reading: the reading (numpy's sum) is then no ceiling for the engine's
    kernels on this host, whose read rate also moves between stretches of minutes, so the claim cannot tell whether
    the run is off, and says so (inconclusive, with both rates)."""
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
        fastest = max((b.max for b in bws), default=0.0)
        bandwidth_allowance = fastest / bws[0].median if bws and fastest > 0 and bws[0].median > 0 else 1.0
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
            elif hi <= 0:
                status, detail = FAIL, "no sample is above 0"
            else:
                status, detail = INCONCLUSIVE, (
                    f"even the lowest sample {fmt(lo)} with the bandwidth's max/median {allowance:.3g} stays above 1: the "
                    f"decode read its weights faster than any sample of the run's bandwidth reading, so that reading "
                    f"(numpy's sum, a reference) is no ceiling for the engine's kernels on this host, and the claim "
                    f"cannot tell whether the run is off")
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
# With g, ZOOMS finer grids of ZOOM_POINTS steps between a κ's neighbours replace the golden-section steps.
ZOOMS, ZOOM_POINTS = 4, 64
# Three terms (f, B and one type's c) need three models to fit; leaving one out to predict it needs one more.
TERMS = 3
# Two losses within this fraction (plus TIE_FLOOR) of each other are equal: the smaller κ is taken.
TIE, TIE_FLOOR = 1e-9, 1e-15


@dataclass(frozen=True)
class ModelSamples:
    """One model as check reads it: weight bytes W, its parameters (params), blocks L, its step times (ms) at one sequence,
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
        """The median step: 1000 ÷ the median of the tokens/s samples as measured, the median the lesson's tables and
        its measurement give them (a request that waited for another process moves a median by one sample at most)."""
        return 1e3 / statistics.median(1e3 / s for s in self.steps_ms)


@dataclass(frozen=True)
class StepTerms:
    """f (ms per block), 1 ÷ B (ms per byte), κ per weight type (its crossover, bytes per parameter): c = κ ÷ B, and g
    (ms more per block for each byte per parameter)."""
    per_block_ms: float
    ms_per_byte: float
    kappa: tuple[tuple[str, float], ...]  # (weight type, κ)
    per_bpp_ms: float = 0.0

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
        block = self.per_block_ms + self.per_bpp_ms * m.weight_bytes / m.n_params
        return m.n_layer * block + max(self.memory_ms(m), self.arithmetic_ms(m))


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


def _three_terms(a: np.ndarray, h: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((f, g, r), Σ (a f + h g + b r − 1)²) at its least with each of f, g and r ≥ 0, for each row of b ([rows,
    models]; a and h are [models]): each set of the three columns solved by its normal equations (Cramer's rule),
    fewer first, the least loss among the solutions that are not negative (a later set only where it errs less by
    more than TIE)."""
    rows, m = b.shape
    saa, sah, shh, sa, sh = float(a @ a), float(a @ h), float(h @ h), float(a.sum()), float(h.sum())
    sbb, sab, shb, sb = (b * b).sum(axis=1), b @ a, b @ h, b.sum(axis=1)
    zero = np.zeros(rows)

    def loss(f: np.ndarray, g: np.ndarray, r: np.ndarray) -> np.ndarray:
        return (m - 2 * (f * sa + g * sh + r * sb) + f * f * saa + g * g * shh + r * r * sbb
                + 2 * (f * g * sah + f * r * sab + g * r * shb))

    def pair(s11: Any, s12: Any, s22: Any, y1: Any, y2: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The normal equations of two columns (sums that are floats or arrays over the rows): ok, and the two."""
        det = s11 * s22 - s12 * s12
        ok = np.broadcast_to(det > 1e-12 * s11 * s22, (rows,))
        safe = np.where(ok, det, 1.0)
        return (ok, np.broadcast_to((y1 * s22 - y2 * s12) / safe, (rows,)),
                np.broadcast_to((s11 * y2 - s12 * y1) / safe, (rows,)))

    candidates = [(saa > 0, np.full(rows, sa / (saa or 1.0)), zero, zero),
                  (shh > 0, zero, np.full(rows, sh / (shh or 1.0)), zero),
                  (sbb > 0, zero, zero, sb / np.where(sbb > 0, sbb, 1.0))]
    ok, f, g = pair(saa, sah, shh, sa, sh)
    candidates.append((ok, f, g, zero))
    ok, f, r = pair(saa, sab, sbb, sa, sb)
    candidates.append((ok, f, zero, r))
    ok, g, r = pair(shh, shb, sbb, sh, sb)
    candidates.append((ok, zero, g, r))
    det = (saa * (shh * sbb - shb * shb) - sah * (sah * sbb - shb * sab) + sab * (sah * shb - shh * sab))
    ok = det > 1e-12 * saa * shh * sbb
    safe = np.where(ok, det, 1.0)
    f = (sa * (shh * sbb - shb * shb) - sah * (sh * sbb - shb * sb) + sab * (sh * shb - shh * sb)) / safe
    g = (saa * (sh * sbb - shb * sb) - sa * (sah * sbb - shb * sab) + sab * (sah * sb - sh * sab)) / safe
    r = (saa * (shh * sb - sh * shb) - sah * (sah * sb - sh * sab) + sa * (sah * shb - shh * sab)) / safe
    candidates.append((ok, f, g, r))
    best, least = [zero, zero, zero], np.full(rows, float(m))  # all 0: each model errs by −1
    for ok, f, g, r in candidates:
        tried = loss(f, g, r)
        better = ok & (f >= 0) & (g >= 0) & (r >= 0) & (tried < least * (1 - TIE) - TIE_FLOOR)
        best = [np.where(better, new, old) for new, old in zip((f, g, r), best, strict=True)]
        least = np.where(better, tried, least)
    return np.column_stack(best), least


def _least(losses: np.ndarray, kappas: np.ndarray) -> int:
    """The index of the least loss, the smallest κ among those equal to it."""
    close = losses <= losses.min() * (1 + TIE) + TIE_FLOOR
    return int(np.flatnonzero(close)[np.argmin(kappas[close])])


def fit_step_terms(models: list[ModelSamples]) -> StepTerms:
    """The terms that make Σ (predicted ÷ median step − 1)² least over `models` (see the module), g kept where it
    lowers that by more than the course's GAIN. ValueError with fewer than three models. The same models give the
    same terms: kept for the process, as the claims of one run fit the same sets (every model, and each leaving one
    out)."""
    return _fit_step_terms(tuple(models))


@functools.lru_cache(maxsize=64)
def _fit_step_terms(models: tuple[ModelSamples, ...]) -> StepTerms:
    if len(models) < TERMS:
        raise ValueError(f"three terms need at least {TERMS} models; {len(models)} given")
    held, held_loss = _fitted(tuple(models), False)
    grown, grown_loss = _fitted(tuple(models), True)
    return grown if grown_loss < held_loss - decodetime.GAIN else held


# One check asks for the same fit several times (the verdicts, the decode-time model and the title claim each leave
# the same models out), and a fit is some ten thousand small least squares: each set of models is fitted once.
@functools.lru_cache(maxsize=256)
def _fitted(models: tuple[ModelSamples, ...], grows: bool) -> tuple[StepTerms, float]:
    """The terms at their least loss, and that loss; g held at 0 unless `grows`."""
    kinds = list(dict.fromkeys(m.weight_type for m in models))
    ts = np.array([m.step_ms for m in models])
    w = np.array([m.weight_bytes for m in models]) / ts
    n = np.array([m.n_params for m in models]) / ts
    a = np.array([m.n_layer for m in models], dtype=float) / ts
    h = a * np.array([m.weight_bytes / m.n_params for m in models])

    def solve(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(f, g, 1 ÷ B) and the loss at each row of b, the relative max(W, κ × params) of each model."""
        if grows:
            return _three_terms(a, h, b)
        f, r, loss = _two_terms(a, b)
        return np.column_stack([f, np.zeros_like(f), r]), loss
    of = {k: np.array([m.weight_type == k for m in models]) for k in kinds}
    kappa = dict.fromkeys(kinds, 0.0)

    def at(kind: str, candidates: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        """The least loss over f and r at each κ of `kind` in `candidates`, the other types' κ as they are (`fixed`:
        max(W, κ × params) of each model at those)."""
        b = np.where(of[kind][None, :], np.maximum(w[None, :], candidates[:, None] * n[None, :]), fixed[None, :])
        return solve(b)[1]

    round_loss = math.inf
    for _ in range(ROUNDS):
        before, last = dict(kappa), round_loss
        for kind in kinds:
            ratios = sorted({m.weight_bytes / m.n_params for m in models if m.weight_type == kind})
            lo, hi = ratios[0], ratios[-1] * KAPPA_SPAN
            grid = np.unique(np.concatenate([[0.0, kappa[kind]], ratios,
                                             lo * (hi / lo) ** (np.arange(1, CROSSOVER_GRID) / CROSSOVER_GRID)]))
            fixed = np.maximum(w, np.array([kappa[m.weight_type] for m in models]) * n)
            losses = at(kind, grid, fixed)
            best = _least(losses, grid)
            k, loss = float(grid[best]), float(losses[best])
            # Golden-section steps between the best point's neighbours (the loss is smooth between breakpoints); with g,
            # finer grids between them instead, each a single evaluation (its rounds are many more)
            left, right = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
            for _ in range(ZOOMS if grows and right > left else 0):
                finer = np.linspace(left, right, ZOOM_POINTS + 1)
                losses = at(kind, finer, fixed)
                j = _least(losses, finer)
                if losses[j] < loss * (1 - 1e-12):
                    k, loss = float(finer[j]), float(losses[j])
                i = int(np.searchsorted(finer, k))
                left, right = float(finer[max(i - 1, 0)]), float(finer[min(i + 1, ZOOM_POINTS)])
            g = (math.sqrt(5) - 1) / 2
            for _ in range(REFINE_STEPS if not grows and right > left else 0):
                x1, x2 = right - g * (right - left), left + g * (right - left)
                l1, l2, mid = at(kind, np.array([x1, x2, (x1 + x2) / 2]), fixed)
                ends = left, right
                if l1 <= l2:
                    right = x2
                else:
                    left = x1
                if mid < loss * (1 - 1e-12):
                    k, loss = (x1 + x2) / 2, float(mid)
                if (left, right) == ends:  # the interval is as narrow as floats go: every later step would repeat this
                    break
            kappa[kind] = k
            round_loss = loss
        # Done where no κ moved, or where a round lowered the loss by less than TIE (with g the types' κ creep
        # together by ever smaller steps)
        if all(math.isclose(kappa[k], before[k], rel_tol=1e-12, abs_tol=1e-15) for k in kinds) or \
                round_loss > last * (1 - TIE) - TIE_FLOOR:
            break
    b = np.maximum(w, np.array([kappa[m.weight_type] for m in models]) * n)
    theta, final = solve(b[None, :])
    f, g, r = (float(v) for v in theta[0])
    return StepTerms(f, r, tuple((k, kappa[k]) for k in kinds), g), float(final[0])


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
    return (f"B = {terms.gbs:.4g} GB/s, c per parameter {cs}, f = {terms.per_block_ms * 1e3:.4g} µs per block, "
            f"g = {terms.per_bpp_ms * 1e3:.4g} µs more per block for each byte per parameter")


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
        detail += ("; refitted by check from each model's decode_tokens_per_s samples (its step 1000 ÷ their median) "
                   "and its W, n and L of its " + " or ".join(sorted(sources)))
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
# A model within MARGIN standard errors of its type's crossover is mixed: the course's rule
# (bytesup.course.decodetime.MARGIN), applied here to check's own fits.
MARGIN = decodetime.MARGIN


def waits_on(terms: StepTerms, m: ModelSamples) -> str:
    """The larger of the two overlapped terms: memory-bound where reading the weights takes longer than the arithmetic."""
    return MEMORY if terms.memory_ms(m) > terms.arithmetic_ms(m) else COMPUTE


@dataclass(frozen=True)
class Band:
    """One weight type's crossover κ under check's fit of every model, its standard error u by the jackknife over the
    fits that leave one model out (None with fewer than two of them), and the bytes per parameter a model of the
    type is mixed within: MARGIN × u either side of κ, and every such fit's κ."""
    crossover: float
    u: float | None
    low: float
    high: float

    def holds(self, bytes_per_param: float) -> bool:
        return self.low <= bytes_per_param <= self.high


def band_of(kind: str, every: StepTerms, fits: list[StepTerms]) -> Band:
    """The band of one weight type (see `Band`): u² = (m − 1) ÷ m × Σ (κᵢ − κ̄)² over the m fits' κᵢ."""
    k = every.crossover(kind)
    ks = [t.crossover(kind) for t in fits]
    u = None
    if len(ks) >= 2:
        mean = sum(ks) / len(ks)
        u = math.sqrt((len(ks) - 1) / len(ks) * sum((x - mean) ** 2 for x in ks))
    half = MARGIN * (u or 0.0)
    return Band(k, u, min([k - half, *ks]), max([k + half, *ks]))


def scatter_ms(m: ModelSamples) -> float:
    """How far a model's steps scatter: the robust spread of its step samples (bytesup.course.robust) times its median
    step, in ms."""
    return robust.judge(m.steps_ms).relative_iqr * m.step_ms


def too_close(m: ModelSamples, terms: StepTerms) -> bool:
    """Whether the model's read and its arithmetic, by `terms`, differ by no more than its own steps scatter."""
    return abs(terms.arithmetic_ms(m) - terms.memory_ms(m)) <= scatter_ms(m)


def judged_fits(models: list[ModelSamples]) -> tuple[StepTerms, list[StepTerms]]:
    """check's fit of every model, and each fit that leaves one out (where enough remain)."""
    return fit_step_terms(models), [h.terms for h in held_out(models)] if len(models) > TERMS else []


def check_verdicts(models: list[ModelSamples],
                   fitted: tuple[StepTerms, list[StepTerms]] | None = None) -> dict[str, str]:
    """Each model's verdict under check's fit of every model and under each fit that leaves one out (where enough
    remain; `fitted`, judged_fits(models), when already made): named where they all agree, the model's bytes per
    parameter lie outside its type's band and its two terms differ by more than its steps scatter; MIXED where leaving
    one model out turns it over, it lies within the band, or its terms are `too_close`."""
    every, fits = fitted or judged_fits(models)
    out = {}
    for m in models:
        named = {waits_on(t, m) for t in (every, *fits)}
        inside = band_of(m.weight_type, every, fits).holds(m.weight_bytes / m.n_params)
        out[m.name] = named.pop() if len(named) == 1 and not inside and not too_close(m, every) else MIXED
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


def band_text(m: ModelSamples, band: Band) -> str:
    """Why a model within its type's band is mixed, in the run's terms."""
    per_param = m.weight_bytes / m.n_params
    ratio = band.crossover / per_param
    terms = ["one token's arithmetic params × c", "reading the weights W ÷ B"]
    longer, shorter = terms if ratio >= 1 else terms[::-1]
    u = f"u = {band.u:.2g} by the jackknife over the fits that leave one model out; " if band.u is not None else ""
    if ratio <= 0:  # every model's fit hides the type's arithmetic, a fit that leaves one out does not
        return (f"its {per_param:.3g} bytes per parameter lie within its weight type's band ({u}band {band.low:.4g}–"
                f"{band.high:.4g}): the fit of every model hides the type's arithmetic under reading the weights "
                "(crossover 0), but a fit that leaves one model out puts the crossover at or above the model's bytes "
                "per parameter, so this run cannot tell which term it waits on")
    return (f"its {per_param:.3g} bytes per parameter lie within its weight type's band around the crossover "
            f"{band.crossover:.4g} ({u}band {band.low:.4g}–{band.high:.4g}): {longer} takes "
            f"{100 * (max(ratio, 1 / ratio) - 1):.2g}% longer than {shorter}, closer than this run's fits can tell "
            f"apart")


def terms_numbers(m: ModelSamples, terms: StepTerms) -> str:
    """A model's two terms by every model's terms, and its bytes per parameter against its type's crossover."""
    read, arithmetic = terms.memory_ms(m), terms.arithmetic_ms(m)
    if terms.crossover(m.weight_type) > 0:
        return (f"by every model's terms, reading the weights W ÷ B = {read:.3g} ms, one token's arithmetic params × c = "
                f"{arithmetic:.3g} ms; {m.weight_bytes / m.n_params:.3g} bytes per parameter against its weight type's "
                f"crossover B × c = {terms.crossover(m.weight_type):.3g}")
    return (f"by every model's terms, reading the weights W ÷ B = {read:.3g} ms, and one token's arithmetic hidden under "
            "it: every model of its weight type waited on reading its weights")


def title_verdict(m: ModelSamples, ours: str, terms: StepTerms, band: Band | None = None) -> tuple[str, str]:
    """(status, detail) of the course's title, decode is memory-bound, for one model, by the verdict check's own fits
    give it (`ours`), with the terms of every model (`terms`) and its type's band under check's fits (`band`) for the
    reason: a pass where it waits on memory, inconclusive where it is mixed, a fail where it waits on the arithmetic."""
    read, arithmetic = terms.memory_ms(m), terms.arithmetic_ms(m)
    numbers = terms_numbers(m, terms)
    if ours == MEMORY:
        return PASS, numbers
    if ours == MIXED:
        reasons = []
        if band is not None and band.holds(m.weight_bytes / m.n_params):
            reasons.append(band_text(m, band))
        if too_close(m, terms):
            reasons.append(f"its two terms lie {abs(arithmetic - read):.2g} ms apart, no more than the "
                           f"{scatter_ms(m):.2g} ms its own steps scatter (their spread times its median step), so "
                           f"its samples cannot tell them apart")
        if not reasons:
            reasons = ["leaving one model out turns over which term is the larger, so this run cannot tell"]
        return INCONCLUSIVE, f"check finds it mixed: {'; and '.join(reasons)} ({numbers})"
    # Checked, and it does not hold: a fail, in the course's group, where a fail is a finding about the machine and
    # model (bytesup.check.verdicts.breaks), not a broken run. Not "not applicable": the same claim passes for the
    # widths that wait on memory on this machine, so this machine is within what it claims.
    return FAIL, (f"the title does not hold for {m.name} on this machine: one token's arithmetic params × c = "
                  f"{arithmetic:.3g} ms takes longer than reading its weights W ÷ B = {read:.3g} ms, so its decode waits "
                  f"on the arithmetic ({numbers}). A finding about this machine, not a broken run: the course states "
                  f"the title for a machine whose arithmetic outpaces its memory (the {published.SPARK_NAME}'s GPU); "
                  f"this one's does not, at this many bytes per parameter")


def verdict_shown(stated: str | None, ours: str) -> tuple[str, str]:
    """(status, detail) of the verdict lesson 8 shows for a model (`stated`) against the one check's own fits give it:
    a pass where they are one, a fail where one says memory-bound and the other compute-bound, inconclusive where one
    finds it mixed and the other names it (the two fits lie at the edge of what the run can tell)."""
    if stated is None:
        return NA, "lesson 8 shows no verdict for it"
    if stated == ours:
        return PASS, ""
    if MIXED in (stated, ours):
        return INCONCLUSIVE, (f"{'check' if ours == MIXED else 'lesson 8'} finds it mixed, "
                              f"{'lesson 8' if ours == MIXED else 'check'} names it "
                              f"{stated if ours == MIXED else ours}: the two fits, the same form computed two ways, lie "
                              f"at the edge of what the run can tell")
    return FAIL, f"lesson 8 states {stated}, but every fit check makes on its samples gives {ours}"


@dataclass(frozen=True)
class Capstone:
    """The capstone's models with their samples, check's fits of them (every model, and each leaving one out), the
    verdict check's fits give each model (`ours`) and the one lesson 8 shows (`stated`)."""
    lesson: LessonResult
    models: list[ModelSamples]
    every: StepTerms
    fits: list[StepTerms]
    ours: dict[str, str]
    stated: dict[str, str]


def capstone_verdicts(run: Run, cid: str, text: str) -> Capstone | list[ClaimResult]:
    """The capstone's models, check's fits and both verdicts (`Capstone`); or the claim's one not-applicable result,
    and why."""
    found = lesson_fact(run, cid, text, L8, DecodeModel,
                        "lesson 08 states no decode-time model to give a verdict per width (a run before it)")
    if isinstance(found, list):
        return found
    lesson, fact = found
    models, _ = model_samples(lesson, fact)
    if len(models) < TERMS:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"{len(models)} models with decode samples; the terms need at least {TERMS}")]
    every, fits = judged_fits(models)
    return Capstone(lesson, models, every, fits, check_verdicts(models, (every, fits)), stated_verdicts(lesson))


def per_width(run: Run, cid: str, text: str,
              judged: Callable[[Capstone, ModelSamples], dict[str, str]]) -> list[ClaimResult]:
    """One result per model the capstone fits, "{text}: {model}", its status and words from `judged`; or the claim's
    one not-applicable result (see capstone_verdicts)."""
    found = capstone_verdicts(run, cid, text)
    if isinstance(found, list):
        return found
    return [ClaimResult(cid, "general", found.lesson.lesson_id, f"{text}: {m.name}", **judged(found, m))
            for m in found.models]


@grouped(COURSE)
@timing
def claim_decode_memory_bound_per_width(run: Run) -> list[ClaimResult]:
    """The course's title claim, decode is memory-bound, for each model the capstone fits, by the verdict check's own
    fits give it (see title_verdict); the one lesson 8 shows is beside it, and set against check's in
    claim_verdict_per_width_as_refitted."""
    def judged(found: Capstone, m: ModelSamples) -> dict[str, str]:
        status, detail = title_verdict(m, found.ours[m.name], found.every, band_of(m.weight_type, found.every, found.fits))
        return {"status": status, "observed": f"lesson 8: {found.stated.get(m.name, 'no verdict shown')}; check: "
                                              f"{found.ours[m.name]}",
                "expected": MEMORY, "tolerance": (f"every fit (all models, and each leaving one out) agrees, beyond "
                                                  f"{MARGIN:g}u of the crossover and the model's own steps' scatter"),
                "detail": detail}
    return per_width(run, "decode_memory_bound_per_width", "decode is memory-bound (the course's title)", judged)


@grouped(ITSELF)
@timing
def claim_verdict_per_width_as_refitted(run: Run) -> list[ClaimResult]:
    """Lesson 8's verdict for each model (its decode_model table) against the one check's own fits of the lesson's
    samples give it (see verdict_shown): a page that names a width against its own samples is a run at odds with
    itself."""
    def judged(found: Capstone, m: ModelSamples) -> dict[str, str]:
        status, detail = verdict_shown(found.stated.get(m.name), found.ours[m.name])
        return {"status": status, "observed": f"lesson 8: {found.stated.get(m.name, 'no verdict shown')}",
                "expected": f"check: {found.ours[m.name]}", "tolerance": "the same verdict",
                "detail": detail + ("; " if detail else "") + terms_numbers(m, found.every)}
    return per_width(run, "verdict_per_width_as_refitted", "lesson 8's verdict per width is the one check's fits give",
                     judged)
