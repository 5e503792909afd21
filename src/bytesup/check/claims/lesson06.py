"""Lesson 6's claims: decode slows as the context grows, the KV-cache bytes per token from the GGUF, and the
depth line fitted on the shallower half predicting the deeper depths."""

from __future__ import annotations

import math
import statistics

from bytesup.course import depthtime, robust
from bytesup.store.runs import Run
from bytesup.check.evidence import (
    FactShapeError,
    kv_rows,
    model_hyperparameters,
)
from bytesup.store.facts.lesson06 import DecodeAtDepth
from bytesup.store.render import fmt
from bytesup.store.results import LessonResult, Measurement
from bytesup.check.verdicts import (ITSELF, FAIL, INCONCLUSIVE, NA, PASS, ClaimResult, find_lesson, judged, measurements, missing,
                                    samples_text)
from bytesup.check.claims.common import L6, grouped, lesson_fact, timing


def _slower(subject: str, lesson: str, shallow: Measurement, deep: Measurement, what: tuple[str, str]) -> ClaimResult:
    text = "decode slows as the context grows"
    if deep.median < shallow.median:
        status, detail = PASS, f"{deep.median / shallow.median:.3g}× the speed at {what[1]} vs {what[0]}"
    elif judged(deep).low <= judged(shallow).high:
        status, detail = INCONCLUSIVE, ("the medians are in the wrong order and the samples' ranges overlap: "
                                        "these samples can show neither a slowdown nor a speed-up")
    else:
        status, detail = FAIL, f"every sample at {what[1]} is faster than every sample at {what[0]}"
    return ClaimResult("decode_slows_with_context", "general", lesson, f"{text} ({subject})", status,
                       observed=f"{what[1]}: {samples_text(deep)} {deep.unit}",
                       expected=f"< {what[0]}: {samples_text(shallow)} {shallow.unit}",
                       tolerance="the samples' [min, max] ranges, outliers left out (bytesup.course.robust)", detail=detail)


@grouped(ITSELF)
@timing
def claim_decode_slows_with_context(run: Run) -> list[ClaimResult]:
    results = []
    l6 = find_lesson(run, "06_")
    subject = "decode slows as the context grows (depths of lesson 6)"
    if l6 is None:
        results.append(ClaimResult("decode_slows_with_context", "general", "06", subject, NA, detail=missing(run, "06_", L6)))
    else:
        depths = [m for m in measurements(l6, "decode_tokens_per_s_at_depth") if isinstance(m.settings.get("depth"), (int, float))]
        if len(depths) < 2:
            results.append(ClaimResult("decode_slows_with_context", "general", l6.lesson_id, subject, NA,
                                       detail=("lesson 06 has fewer than two decode_tokens_per_s_at_depth measurements "
                                               "with a numeric depth")))
        else:
            depths.sort(key=lambda m: m.settings["depth"])
            lo, hi = depths[0], depths[-1]
            results.append(_slower("depths of lesson 6", l6.lesson_id, lo, hi,
                                   (f"depth {fmt(lo.settings['depth'])}", f"depth {fmt(hi.settings['depth'])}")))
    l4 = find_lesson(run, "04_")
    if l4 is not None:
        short = measurements(l4, "decode_tokens_per_s_short_prompt")
        long = measurements(l4, "decode_tokens_per_s_long_prompt")
        if short and long:
            results.append(_slower("after a short vs a long prompt, lesson 4", l4.lesson_id, short[0], long[0],
                                   ("the short prompt", "the long prompt")))
    return results


# --- lesson 6: KV-cache bytes -----------------------------------------------------------------

# llama.cpp's KV-cache types as (bytes per block, numbers per block), from ggml's block layouts:
# q8_0 = fp16 scale + 32 int8; q5_1 = fp16 scale + fp16 min + 4 bytes of high bits + 16 bytes of
# nibbles; q5_0 = the same without the min; q4_1 = fp16 scale + fp16 min + 16 bytes of nibbles;
# q4_0 and iq4_nl = fp16 scale + 16 bytes of nibbles.
CACHE_TYPE_BLOCKS = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (2 + 32, 32), "q5_1": (2 + 2 + 4 + 16, 32),
                     "q5_0": (2 + 4 + 16, 32), "q4_1": (2 + 2 + 16, 32), "q4_0": (2 + 16, 32), "iq4_nl": (2 + 16, 32)}
CACHE_TYPE_BYTES = {name: size / count for name, (size, count) in CACHE_TYPE_BLOCKS.items()}


def _kv_from_gguf(lesson: LessonResult) -> list[tuple[str, float, float]]:
    """(label, the measurement, check's number) for each kv_bytes_per_token measurement:
    layers × KV heads × head width × (bytes of a K element + bytes of a V element)."""
    h = model_hyperparameters(lesson)
    checked = []
    for m in measurements(lesson, "kv_bytes_per_token"):
        kinds = [str(m.settings.get(k, "f16")).lower() for k in ("cache_type_k", "cache_type_v")]
        if h is None or any(k not in CACHE_TYPE_BYTES for k in kinds):
            continue
        n_layer = int(h.get("n_layer") or h.get("block_count") or h.get("n_layers") or 0)
        n_head = int(h.get("n_head") or 1)
        n_head_kv = int(h.get("n_head_kv") or n_head)
        head_dim = int(h.get("head_dim") or int(h.get("n_embd") or 0) // n_head)
        expected = n_layer * n_head_kv * head_dim * (CACHE_TYPE_BYTES[kinds[0]] + CACHE_TYPE_BYTES[kinds[1]])
        label = (f"measurement kv_bytes_per_token from the GGUF ({n_layer} layers, {n_head_kv} KV heads, "
                 f"head width {head_dim}, {'/'.join(kinds)})")
        checked.append((label, m.median, expected))
    return checked


@grouped(ITSELF)
def claim_kv_bytes_formula(run: Run) -> list[ClaimResult]:
    """Lesson 6's KV-cache bytes recomputed: its measurement from the served model's GGUF
    hyperparameters and cache types (check's own table of bytes per element), and every row it
    shows (fact kv_examples, else its tables) from the row's own numbers."""
    cid, text = "kv_bytes_formula", "KV-cache bytes per token = 2 × layers × KV heads × head width × bytes per element"
    lesson = find_lesson(run, "06_")
    if lesson is None:
        return [ClaimResult(cid, "general", "06", text, NA, detail=missing(run, "06_", L6))]
    checked = _kv_from_gguf(lesson)
    try:
        rows = kv_rows(lesson)
    except FactShapeError as exc:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=f"lesson {lesson.lesson_id}'s fact {exc}")]
    for r in rows:
        checked.append((r.label, r.bytes_per_token, 2 * r.n_layer * r.n_head_kv * r.head_dim * r.bytes_per_element))
    if not checked:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 06 has neither a kv_bytes_per_token measurement with the model's hyperparameters "
                                   "nor KV rows (fact kv_examples, or a table with layers, KV heads, head width, bytes per element "
                                   "and bytes per token)")]
    bad = [(label, s, e) for label, s, e in checked if not math.isclose(s, e, rel_tol=1e-9, abs_tol=1e-9)]
    worst = bad[0] if bad else checked[0]
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{fmt(worst[1])} bytes per token ({worst[0]})", expected=f"{fmt(worst[2])} bytes recomputed",
                        tolerance="exact",
                        detail=f"{len(checked)} values recomputed" + (f", {len(bad)} differ: " + "; ".join(
                            f"{label}: {fmt(s)} vs {fmt(e)}" for label, s, e in bad[:4]) if bad else ""))]


# A line through the shallower half of lesson 6's depths predicts each deeper depth within this (lesson 6 states the same).
DEPTH_LINE_TOLERANCE = depthtime.TOLERANCE


def _least_squares(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(t(0), s) of the least-squares line through (depth, ms) points with two distinct depths or more."""
    n = len(points)
    mx, my = sum(d for d, _ in points) / n, sum(t for _, t in points) / n
    s = sum((d - mx) * (t - my) for d, t in points) / sum((d - mx) ** 2 for d, _ in points)
    return my - s * mx, s


def _fitted_until(ms: dict[int, float], fit_until: int, knee: float | None) -> int:
    """The deepest fitted depth: fit_until, or the first depth past d* where none past it is fitted and two or more
    lie past it (so that s₂ is known and a deeper one is still held out)."""
    past = sorted(d for d in ms if knee is not None and d > knee)
    return past[0] if len(past) >= 2 and past[0] > fit_until else fit_until


def _fit(ms: dict[int, float], until: int, knee: float | None) -> tuple[float, float, float | None] | None:
    """(t(0), s₁, s₂ or None) of t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*) through median steps `ms` at the
    depths up to `until`: t(0) and s₁ by least squares through those up to d*, s₂ by least squares through the origin
    of t(d) − t(0) − s₁ × d* against d − d* over those past d* (None: none there). Without a knee (None): the line
    t(0) + s × d through every depth up to `until`. None with fewer than two depths for t(0) and s₁."""
    low = [(d, t) for d, t in ms.items() if d <= until and (knee is None or d <= knee)]
    if len(low) < 2:
        return None
    t0, s1 = _least_squares(low)
    if knee is None:
        return t0, s1, None
    high = [(d - knee, t - t0 - s1 * knee) for d, t in ms.items() if knee < d <= until]
    return t0, s1, (sum(x * y for x, y in high) / sum(x * x for x, _ in high) if high else None)


def _predict(fit: tuple[float, float, float | None], knee: float | None, d: int) -> float | None:
    t0, s1, s2 = fit
    if knee is None or d <= knee:
        return t0 + s1 * d
    return None if s2 is None else t0 + s1 * knee + s2 * (d - knee)


def _spreads(ms: dict[int, float], iqr: dict[int, float], until: int, knee: float | None,
             targets: list[int]) -> dict[int, float]:
    """Each target depth's prediction spread under the model fitted up to `until`: the root of the sum of the squares
    of how far its prediction moves, as a fraction of it, when each fitted depth's median moves by its interquartile
    range, plus the target's own interquartile range ÷ its median."""
    fit = _fit(ms, until, knee)
    squares = {d: 0.0 for d in targets}
    for d in ms:
        if fit is None or d > until or iqr[d] == 0:
            continue
        moved = _fit({e: t + (iqr[d] if e == d else 0.0) for e, t in ms.items()}, until, knee)
        for h in targets:
            a, b = _predict(fit, knee, h), None if moved is None else _predict(moved, knee, h)
            if a is not None and a > 0 and b is not None:
                squares[h] += ((b - a) / a) ** 2
    return {d: math.sqrt(squares[d]) + iqr[d] / ms[d] for d in targets}


def _past_the_knee(ms: dict[int, float], iqr: dict[int, float], until: int,
                   knee: float) -> list[tuple[int, float | None, float]]:
    """Each fitted depth past d*: (depth, its step ÷ the step the line through the depths below d* gives it − 1 (None
    where that line gives 0 ms or less), that prediction's spread)."""
    below = math.floor(knee)
    line = _fit(ms, below, None)
    past = [d for d in ms if knee < d <= until]
    spreads = _spreads(ms, iqr, below, None, past)
    out: list[tuple[int, float | None, float]] = []
    for d in past:
        p = None if line is None else _predict(line, None, d)
        out.append((d, ms[d] / p - 1 if p is not None and p > 0 else None, spreads[d]))
    return out


def _not_shown(tested: list[tuple[int, float | None, float]], s2: float) -> str:
    """Why the fitted depths past d* (`_past_the_knee`) did not show the knee; s₂: the bent model's."""
    if any(e is None for _, e, _ in tested):
        return ", which gives no step there"
    if all(e is not None and e > spread for _, e, spread in tested):
        return f", but s₂ = {1e3 * s2:.4g} µs per position is no cost"
    if all(e is not None and e <= 0 for _, e, _ in tested):
        return ", no slower than that line"
    return ", not slower than it by more than the spread"


def depth_line_check(depths: dict[int, list[float]], fit_until: int, tolerance: float = DEPTH_LINE_TOLERANCE,
                     knee: float | None = None) -> tuple[str, str, str]:
    """(status, observed, detail) of lesson 6's depth model from its decode samples (tokens/s) at each depth: the
    checker's own fit of the median ms per token (1000 ÷ each sample) against the depth, and each deeper depth's
    predicted ÷ measured tokens/s − 1 = measured ms ÷ the model's ms − 1.

    The model: the line through the depths ≤ fit_until, bent at the knee d* where one lies among the depths (`_fit`,
    with the first depth past d* fitted too where none past it is and two or more lie past it), and only where the
    run shows it: every fitted depth past d* slower than the line through the depths below d* gives it, by more than
    that prediction's spread, and s₂ above 0. Otherwise one line through every fitted depth, below and past d*.

    The run cannot tell, and the claim is inconclusive rather than failed, where a held-out depth lies past the
    knee with no fitted depth past it (nothing says what s₂ is), or a miss comes with samples that scatter wider
    than the tolerance: a depth's interquartile range ÷ median (bytesup.course.robust), or the prediction's spread
    (the root of the sum of the squares of how far it moves when each fitted depth's median moves by its
    interquartile range, ÷ the prediction, plus the held-out depth's own interquartile range ÷ its median); or
    where a miss lies beyond the tolerance by less than that prediction's spread (`near`): its samples reach back
    inside, so no single sample may make the fail. The 2-core AMD EPYC's make runs of 2026-12-06 missed depth 1,904
    by −18.2% and +16.7%, each with a spread of ±10%, while 1,680 lay within 4% of the line both times."""
    ms = {d: statistics.median(1e3 / v for v in samples) for d, samples in sorted(depths.items()) if samples}
    iqr = {}
    for d, samples in depths.items():
        if samples:
            r = robust.judge([1e3 / v for v in samples])
            iqr[d] = r.q3 - r.q1
    given = knee
    if knee is not None and not any(d > knee for d in ms):
        knee = None  # no depth past it: the line
    until = _fitted_until(ms, fit_until, knee)
    fit = _fit(ms, until, knee)
    if fit is None and knee is not None:  # fewer than two depths below the knee: the line, as lesson 6 falls back to
        knee = None
        until = _fitted_until(ms, fit_until, None)
        fit = _fit(ms, until, None)
    tested, bent_s2 = None, 0.0
    if fit is not None and knee is not None and fit[2] is not None:  # is the knee there? judged on the fitted depths
        tested = _past_the_knee(ms, iqr, until, knee)
        above = all(e is not None and e > spread for _, e, spread in tested)
        if not (above and fit[2] > 0):
            bent_s2, knee = fit[2], None
            fit = _fit(ms, until, None)
    held = [d for d in ms if fit is not None and d > until]
    if fit is None or not held:
        low = [d for d in ms if d <= fit_until and (knee is None or d <= knee)]
        return NA, "too few depths", (f"{len(low)} depths up to {min(fit_until, knee or fit_until):,.0f} and "
                                      f"{len(ms) - len(low)} beyond: the model needs two and a depth to predict")
    spreads = _spreads(ms, iqr, until, knee, held)
    scatter = max(robust.judge(samples).relative_iqr for samples in depths.values() if samples)
    errors: list[tuple[float, int]] = []
    unknown: list[int] = []
    for d in held:
        p = _predict(fit, knee, d)
        if p is None:
            unknown.append(d)
        else:
            errors.append((ms[d] / p - 1 if p > 0 else math.inf, d))
    missed = [(e, d) for e, d in errors if abs(e) > tolerance]
    vague = [(e, d) for e, d in missed if max(scatter, spreads[d]) > tolerance]
    near = [(e, d) for e, d in missed if (e, d) not in vague and abs(e) - spreads[d] <= tolerance]
    if len(vague) + len(near) < len(missed):
        status = FAIL
    elif missed or unknown:
        status = INCONCLUSIVE
    else:
        status = PASS
    t0, s1, s2 = fit
    against = "" if tested is None else "; ".join(
        f"depth {d:,} at {ms[d]:.4g} ms" if e is None else f"depth {d:,} {e:+.1%} (spread ±{spread:.0%})"
        for d, e, spread in tested) + " against the line through the depths below it"
    if tested is not None and knee is None:
        why = "not shown: " + against + _not_shown(tested, bent_s2) + ", so one line; "
        model = (f"knee d* = {given:,.0f} {why}t(0) = {t0:.4g} ms, s = {1e3 * s1:.4g} µs per position, fitted on depths "
                 + ", ".join(f"{d:,}" for d in ms if d <= until))
    elif knee is None:
        model = ((f"knee d* = {given:,.0f} beyond the deepest depth or below the second, so the line; "
                  if given is not None else "")
                 + f"t(0) = {t0:.4g} ms, s = {1e3 * s1:.4g} µs per position, fitted on depths "
                 + ", ".join(f"{d:,}" for d in ms if d <= until))
    else:
        model = (f"knee d* = {knee:,.0f}" + ("" if tested is None else " shown: " + against)
                 + f"; t(0) = {t0:.4g} ms, s₁ = {1e3 * s1:.4g} µs per position, fitted on depths "
                 + ", ".join(f"{d:,}" for d in ms if d <= min(knee, until))
                 + (f"; s₂ = {1e3 * s2:.4g} µs per position past d*, fitted on depths "
                    + ", ".join(f"{d:,}" for d in ms if knee < d <= until) if s2 is not None else
                    "; no fitted depth past d*, so s₂ is unknown"))
    reasons = []
    if unknown:
        reasons.append(f"depth{'s' if len(unknown) > 1 else ''} {', '.join(f'{d:,}' for d in unknown)} past the knee "
                       "cannot be predicted: no depth past d* was fitted, so the run cannot tell what a position costs "
                       "there: inconclusive")
    if vague and status == INCONCLUSIVE:
        reasons.append("the samples scatter wider than the tolerance (" + "; ".join(
            f"{d:,}: prediction spread ±{spreads[d]:.0%}" for _, d in vague)
            + f"; widest depth ±{scatter:.0%}), wider than ±{tolerance:.0%}: inconclusive")
    if near and status == INCONCLUSIVE:
        reasons.append("; ".join(f"depth {d:,} misses by {e:+.1%}, beyond ±{tolerance:.0%} by less than its prediction "
                                 f"spread ±{spreads[d]:.0%}" for e, d in near)
                       + ": its samples reach back within the tolerance, and no single sample may make a fail: "
                       "inconclusive")
    worst = max(errors, key=lambda e: abs(e[0]), default=None)
    observed = (f"furthest depth {worst[1]:,} {worst[0]:+.1%}" if worst is not None else
                "no held-out depth predicted")
    return (status, observed, model + "; held out: " + "; ".join(
        f"{d:,}: {e:+.1%} (spread ±{spreads[d]:.0%})" for e, d in errors)
        + (("; " if errors else "") + "; ".join(reasons) if reasons else ""))


@grouped(ITSELF)
@timing
def claim_depth_line_predicts_deeper_depths(run: Run) -> list[ClaimResult]:
    cid = "depth_line_predicts_deeper_depths"
    text = ("decode time at depth d = t(0) + d × s, fitted on the shallower half (bent where the KV cache outgrows the "
            "last-level cache, if the depths past it show it), predicts the deeper depths")
    found = lesson_fact(run, cid, text, L6, DecodeAtDepth, "lesson 06 recorded no depth line (a run before it)")
    if isinstance(found, list):
        return found
    lesson, fact = found
    depths = {int(m.settings["depth"]): list(m.samples or [m.median]) for m in measurements(lesson, "decode_tokens_per_s_at_depth")
              if isinstance(m.settings.get("depth"), (int, float))}
    kv = measurements(lesson, "kv_bytes_per_token")
    knee = fact.cache_bytes / kv[0].median if fact.cache_bytes and kv and kv[0].median > 0 else None
    status, observed, detail = depth_line_check(depths, fact.fit_until, knee=knee)
    where = ("" if knee is None else
             f"; d* = {fmt(fact.cache_bytes)} bytes of last-level cache ÷ {fmt(kv[0].median)} KV bytes per position")
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected=f"every held-out depth within the tolerance{where}",
                        tolerance=f"±{DEPTH_LINE_TOLERANCE:.0%}", detail=detail)]
