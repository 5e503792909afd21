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
from bytesup.check.claims.common import L6, grouped, prediction_status, timing


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


def depth_line_check(depths: dict[int, list[float]], fit_until: int,
                     tolerance: float = DEPTH_LINE_TOLERANCE) -> tuple[str, str, str]:
    """(status, observed, detail) of lesson 6's depth line from its decode samples (tokens/s) at each depth: the
    checker's own least-squares line of the median ms per token (1000 ÷ each sample) against the depth through
    the depths ≤ fit_until, and each deeper depth's predicted ÷ measured tokens/s − 1 = measured ms ÷ the line's
    ms − 1. A miss is inconclusive rather than a failure when a depth's samples scatter wider than the tolerance
    (interquartile range ÷ median, bytesup.course.robust)."""
    ms = {d: statistics.median(1e3 / v for v in samples) for d, samples in sorted(depths.items()) if samples}
    fitted = [(d, t) for d, t in ms.items() if d <= fit_until]
    held = [(d, t) for d, t in ms.items() if d > fit_until]
    if len(fitted) < 2 or not held:
        return NA, "too few depths", (f"{len(fitted)} depths up to {fit_until:,} and {len(held)} beyond: the line needs two "
                                      f"and a depth to predict")
    n = len(fitted)
    mx, my = sum(d for d, _ in fitted) / n, sum(t for _, t in fitted) / n
    slope = sum((d - mx) * (t - my) for d, t in fitted) / sum((d - mx) ** 2 for d, _ in fitted)
    line = {d: my + slope * (d - mx) for d, _ in held}
    errors = [(t / line[d] - 1 if line[d] > 0 else math.inf, d) for d, t in held]
    worst = max(errors, key=lambda e: abs(e[0]))
    scatter = max(robust.judge(samples).relative_iqr for samples in depths.values() if samples)
    status = prediction_status(worst[0], tolerance, scatter)
    return (status, f"furthest depth {worst[1]:,} {worst[0]:+.1%}",
            f"t(0) = {my - slope * mx:.4g} ms, s = {1e3 * slope:.4g} µs per position, fitted on depths "
            + ", ".join(f"{d:,}" for d, _ in fitted) + "; held out: " + "; ".join(f"{d:,}: {e:+.1%}" for e, d in errors)
            + (f"; a depth's samples scatter by up to {scatter:.0%}, wider than ±{tolerance:.0%}: inconclusive"
               if status == INCONCLUSIVE else ""))


@grouped(ITSELF)
@timing
def claim_depth_line_predicts_deeper_depths(run: Run) -> list[ClaimResult]:
    cid = "depth_line_predicts_deeper_depths"
    text = "decode time at depth d = t(0) + d × s, fitted on the shallower half, predicts the deeper depths"
    lesson = find_lesson(run, "06_")
    if lesson is None:
        return [ClaimResult(cid, "general", "06", text, NA, detail=missing(run, "06_", L6))]
    fact = lesson.stated(DecodeAtDepth)
    if fact is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 06 recorded no depth line (a run before it)")]
    depths = {int(m.settings["depth"]): list(m.samples or [m.median]) for m in measurements(lesson, "decode_tokens_per_s_at_depth")
              if isinstance(m.settings.get("depth"), (int, float))}
    status, observed, detail = depth_line_check(depths, fact.fit_until)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected=f"every depth beyond {fact.fit_until:,} within the tolerance",
                        tolerance=f"±{DEPTH_LINE_TOLERANCE:.0%}", detail=detail)]
