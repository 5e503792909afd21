"""Lesson 7's claim: the ridge point is the peak FLOP/s over the memory bandwidth."""

from __future__ import annotations

from bytesup.store.runs import Run
from bytesup.store.render import fmt
from bytesup.check.verdicts import (ITSELF, FAIL, NA, PASS, ClaimResult, find_lesson, measurements, missing)
from bytesup.check.claims.common import L7, grouped


FLOP_RATE_UNITS = {"flop/s": 1.0, "mflop/s": 1e6, "gflop/s": 1e9, "tflop/s": 1e12}
BYTE_RATE_UNITS = {"b/s": 1.0, "bytes/s": 1.0, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12, "gib/s": 2.0 ** 30}


@grouped(ITSELF)
def claim_ridge_point(run: Run) -> list[ClaimResult]:
    """Lesson 7's ridge point against the peak FLOP/s ÷ the bandwidth in bytes/s of its two
    measurements, each converted from its own unit."""
    cid, text = "ridge_point_formula", "ridge point = peak FLOP/s ÷ memory bandwidth (bytes/s)"
    lesson = find_lesson(run, "07_")
    if lesson is None:
        return [ClaimResult(cid, "general", "07", text, NA, detail=missing(run, "07_", L7))]
    ridge = measurements(lesson, "ridge_point_flops_per_byte")
    peak = measurements(lesson, "matmul_peak_gflop_per_s")
    bw = measurements(lesson, "read_bandwidth_gb_per_s")
    if not (ridge and peak and bw):
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 07 lacks ridge_point_flops_per_byte, matmul_peak_gflop_per_s or read_bandwidth_gb_per_s")]
    r, p, b = ridge[0], peak[0], bw[0]
    fp, fb = FLOP_RATE_UNITS.get(p.unit.strip().lower()), BYTE_RATE_UNITS.get(b.unit.strip().lower())
    if fp is None or fb is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"units check does not know: peak in {p.unit!r}, bandwidth in {b.unit!r}")]
    # The ridge point may be computed from the medians or per sample; either lies within these bounds.
    lo, hi = p.min * fp / (b.max * fb), p.max * fp / (b.min * fb)
    expected = p.median * fp / (b.median * fb)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, PASS if lo * (1 - 1e-9) <= r.median <= hi * (1 + 1e-9) else FAIL,
                        observed=f"{fmt(r.median)} FLOPs/byte",
                        expected=f"{fmt(expected)} from the medians ({fmt(p.median)} {p.unit} ÷ {fmt(b.median)} {b.unit})",
                        tolerance=f"range {fmt(lo)}–{fmt(hi)} from the samples' min/max")]
