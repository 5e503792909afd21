"""The capstone's claims (lesson 8): decode efficiency within [0, 1] (lesson 4's too), and the decode-time model
predicting every model it left out."""

from __future__ import annotations

from bytesup.course import decodetime
from bytesup.course import published
from bytesup.store.runs import Run
from bytesup.store.facts.lesson08 import DecodeModel
from bytesup.store.render import fmt, measurement_label
from bytesup.check.verdicts import (FAIL, NA, PASS, ClaimResult, find_lesson, judged, measurements, missing)
from bytesup.check.claims.lesson06 import CACHE_TYPE_BYTES
from bytesup.check.claims.common import L4, L8, prediction_status


# --- lessons 4, 7 and 8: ceilings ----------------------------------------------------------------

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


# The bytes model with context against the published figures: a prediction within this of 29.6 passes.
BYTES_MODEL_TOLERANCE = 0.05


def _scalar(value: object) -> float:
    """One published number (published.LESSON4 also holds lists of two runs)."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"published figure {value!r} is not one number")
    return float(value)


def claim_bytes_model_with_context(run: Run) -> list[ClaimResult]:
    """Course arithmetic on published numbers, the same for every run: decode at depth d ≈ bandwidth ÷
    (weight bytes + KV bytes per token × d). The published short-prompt decode (33.2 tokens/s of the
    7.16 GB specimen) gives the bandwidth; the specimen's KV cache (no grouped-query attention:
    2 × 32 × 32 × 128 × 2 bytes per token) predicts the decode after lesson 4's 1,921-token prompt,
    published as 29.6 tokens/s."""
    text = ("decode after d tokens ≈ bandwidth ÷ (weight bytes + KV bytes per token × d), on the published "
            f"{published.SPARK_NAME} figures")
    spec, l4 = published.SPECIMEN, published.LESSON4
    n_layer, n_head_kv = int(spec["n_layer"]), published.SPECIMEN_N_HEAD_KV
    head_dim = int(spec["n_embd"]) // int(spec["n_head"])
    kv = 2 * n_layer * n_head_kv * head_dim * CACHE_TYPE_BYTES["f16"]
    weights, depth = float(spec["file_bytes"]), int(_scalar(l4["long_prompt_tokens"]))
    short = _scalar(l4["decode_short_tokens_per_s"])
    bandwidth = short * weights          # bytes/s: every weight read once per token
    predicted = bandwidth / (weights + kv * depth)
    pub = _scalar(l4["decode_long_tokens_per_s"])
    ok = abs(predicted / pub - 1) <= BYTES_MODEL_TOLERANCE
    return [ClaimResult("bytes_model_with_context", "general", "08", text, PASS if ok else FAIL,
                        observed=f"{predicted:.1f} tokens/s predicted at depth {depth:,}",
                        expected=f"{pub:g} tokens/s published", tolerance=f"±{BYTES_MODEL_TOLERANCE:.0%}",
                        detail=(f"KV = 2 × {n_layer} × {n_head_kv} × {head_dim} × 2 = {kv:,.0f} bytes per token; "
                                f"{short:g} tokens/s × {weights / 1e9:g} GB = "
                                f"{bandwidth / 1e9:.4g} GB/s; {bandwidth / 1e9:.4g} GB/s ÷ ({weights / 1e9:g} GB + "
                                f"{kv:,.0f} × {depth:,} bytes) = {predicted:.2f} tokens/s "
                                f"({predicted / pub - 1:+.1%}); course arithmetic, the same for every run"))]


# The decode-time model predicts each width's decode at P = 1 within this (the capstone states the same).
DECODE_MODEL_TOLERANCE = decodetime.TOLERANCE


def decode_model_check(fact: DecodeModel, tolerance: float = DECODE_MODEL_TOLERANCE) -> tuple[str, str, str]:
    """(status, observed, detail) of the decode-time model on the capstone's fact: for each model, the terms
    fitted by bytesup.course.decodetime on the *other* models' steps at P = 1, and its step predicted here as
    L × f + max(W ÷ B, n × c), set against 1000 ÷ its measured step time. A miss (or no model at all) is
    inconclusive rather than a failure when some model's step times at P = 1 scatter wider than the tolerance
    (their robust spread, bytesup.course.robust): such samples cannot tell a model that holds from one that
    does not."""
    scatter = max((w.step_spread.get("1", 0.0) for w in fact.widths), default=0.0)
    why = (f"; the steps at P = 1 scatter by up to {scatter:.0%} (interquartile range ÷ median), wider than "
           f"±{tolerance:.0%}: inconclusive" if scatter > tolerance else "")
    widths = [decodetime.Width(w.name, w.weight_bytes, w.n_params, w.weight_type,
                               {int(p): ms for p, ms in w.step_ms.items()}, w.n_layer)
              for w in fact.widths if "1" in w.step_ms]
    if len(widths) <= decodetime.MIN_FIT:
        return NA, "too few models", (f"{len(widths)} models with a step at P = 1; leaving one out needs at least "
                                      f"{decodetime.MIN_FIT + 1}")
    errors = []
    for k, w in enumerate(widths):
        terms = decodetime.fit([x for i, x in enumerate(widths) if i != k])
        step = w.n_layer * terms.fixed_ms_per_block + max(w.weight_bytes / terms.gbs / 1e6, w.n_params * terms.arith_ps / 1e9)
        errors.append((w.step_ms[1] / step - 1, w.name))  # predicted ÷ measured tokens/s − 1
    worst = max(errors, key=lambda e: abs(e[0]))
    status = prediction_status(worst[0], tolerance, scatter)
    return (status, f"furthest {worst[1]} {worst[0]:+.1%}",
            "each model by the terms of the others: " + "; ".join(f"{n}: {e:+.1%}" for e, n in errors)
            + (why if status != PASS else ""))


def claim_decode_model_predicts_every_width(run: Run) -> list[ClaimResult]:
    cid = "decode_model_predicts_every_width"
    text = "decode step = a cost per block + the slower of reading the weights and one token's arithmetic predicts every model"
    lesson = find_lesson(run, "08_")
    if lesson is None:
        return [ClaimResult(cid, "general", "08", text, NA, detail=missing(run, "08_", L8))]
    fact = lesson.stated(DecodeModel)
    if fact is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 08 recorded no step times at several P (a run before the decode-time model)")]
    status, observed, detail = decode_model_check(fact)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected="every width within the tolerance", tolerance=f"±{DECODE_MODEL_TOLERANCE:.0%}",
                        detail=detail)]
