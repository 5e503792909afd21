"""The capstone's sweep described: how decode's speed follows the bytes, width by width. Pure functions on measured
points. The verdict per width (memory-bound, compute-bound or mixed) is not made here: it is the decode-time model's
(bytesup.course.decodetime), which sets reading the weights against the arithmetic. These rules describe what the
sweep shows and name no verdict.

A point is one model file: its bytes per token and its decode tokens/s samples. From those:

- effective GB/s = bytes per token × tokens/s (what decode would have to read per second);
- cache-resident: the weights fit in the last-level cache (bytes ≤ LLC) and decode read them faster
  than the run's memory bandwidth reading allows (the point's slowest effective GB/s above the
  reading's fastest sample), so they came from the cache; such points are marked and kept out of the
  fit. Fitting by size alone is not enough: a virtual machine reports its host's whole cache (260 MiB
  on the course's 2-core machines), which other tenants share, and a width that fits but reads at
  memory speed is not being served from the cache;
- samples are judged by bytesup.course.robust: the median, and a spread (interquartile range ÷ median) of
  the samples that are not outliers, so one stalled request is shown but decides nothing;
- a step between neighbouring widths of one model (same parameters, fewer bytes per weight) is described
  by its speed-up against its bytes ratio: it followed the bytes when effective GB/s stays flat within the
  spread (tokens/s follows 1 ÷ bytes), it was no faster when fewer bytes were not faster, and in between
  it was faster by less than the bytes;
- the line: tokens/s = (the line's bandwidth) ÷ bytes with equal relative weight per point (in log space,
  the line's bandwidth is the geometric mean of the points' effective GB/s), with its standard error u, over
  the points a step that followed the bytes joins (see `analyse`); a point lies on the line when its effective
  GB/s is within the tolerance (or its own spread) of the line's bandwidth, widened by 2u. The line's bandwidth
  is a description of how fast these widths read, not the decode-time model's B;
- the free log-log slope k of tokens/s ∝ bytes^k: −1 when tokens/s follows 1 ÷ bytes, 0 when the bytes do
  not matter.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bytesup.course import robust
from bytesup.units import GB

# Effective GB/s "flat", a point "on the line", and "no faster" are judged within this relative
# tolerance, or within the points' own robust spread (bytesup.course.robust: interquartile range ÷ median of
# the samples that are not outliers) when that is wider.
TOLERANCE = 0.10

# What a step between neighbouring widths shows: its speed-up against its bytes ratio (no verdict).
FOLLOWS, NOT_FASTER, LESS, FASTER, UNCLEAR = (
    "followed the bytes", "no faster", "faster, by less than the bytes", "faster than the bytes", "too spread to tell")


def relative_range(samples: list[float]) -> float:
    """How far the samples range, relative to the lowest: max ÷ min − 1 (0 for one sample). Not a spread
    (`ceiling.Spread` is the median, lowest and highest; the robust spread is `robust.Robust.relative_iqr`)."""
    lo, hi = min(samples), max(samples)
    return hi / lo - 1 if lo > 0 else math.inf


def make_point(name: str, bytes_per_token: float, samples: list[float], llc_bytes: int | None,
               n_params: int | None = None, weight_type: str | None = None,
               memory_gbs_max: float | None = None) -> dict[str, Any]:
    """One measured width: tokens/s and effective GB/s (median, min, max), whether its weights fit in
    the last-level cache, and whether it is cache-resident (fits, and read faster than memory
    allows: above `memory_gbs_max`, the fastest sample of the run's bandwidth reading; with no
    reading, fitting is taken as resident)."""
    if not samples or min(samples) <= 0:
        raise ValueError(f"{name}: decode samples must be positive")
    med = statistics.median(samples)
    judged = robust.judge(samples)
    return {
        "name": name, "bytes": float(bytes_per_token), "n_params": n_params, "weight_type": weight_type,
        "samples": [float(s) for s in samples], "median": med, "min": min(samples), "max": max(samples),
        "spread": relative_range(samples), "robust_spread": judged.relative_iqr,
        "outliers": judged.outlier_values, "kept": judged.kept,
        "gbs": med * bytes_per_token / GB, "gbs_min": min(samples) * bytes_per_token / GB,
        "gbs_max": max(samples) * bytes_per_token / GB,
        "fits_in_cache": llc_bytes is not None and bytes_per_token <= llc_bytes,
        "cache_resident": (llc_bytes is not None and bytes_per_token <= llc_bytes
                           and (memory_gbs_max is None or min(samples) * bytes_per_token / GB > memory_gbs_max)),
    }


def step_outcome(narrow: dict, wide: dict, tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Compare two neighbouring widths (narrow has fewer bytes per token than wide): what the speed-up did against
    the bytes ratio, as `outcome`.

    bytes ratio R = wide ÷ narrow bytes; speed-up S = narrow ÷ wide median tokens/s; allowance
    a = the larger of the tolerance and each point's own robust spread (outliers never widen it). Then:
    - flat: |ln(S ÷ R)| ≤ ln(1 + a) (effective GB/s equal within a: tokens/s follows 1 ÷ bytes);
    - not faster: S ≤ 1 + a;
    - followed the bytes if flat and not "not faster"; no faster if not faster and not flat; too spread to
      tell if both (the spread is too wide for this bytes ratio); faster by less than the bytes if faster but
      by less than the bytes shrank; faster than the bytes if by more.
    """
    ratio = wide["bytes"] / narrow["bytes"]
    speedup = narrow["median"] / wide["median"]
    allowance = max(tolerance, narrow["robust_spread"], wide["robust_spread"])
    flat = abs(math.log(speedup / ratio)) <= math.log(1 + allowance)
    not_faster = speedup <= 1 + allowance
    if flat and not_faster:
        outcome = UNCLEAR
    elif flat:
        outcome = FOLLOWS
    elif not_faster:
        outcome = NOT_FASTER
    elif speedup < ratio:
        outcome = LESS
    else:
        outcome = FASTER
    return {"narrow": narrow["name"], "wide": wide["name"], "bytes_ratio": ratio, "speedup": speedup,
            "gbs_ratio": speedup / ratio, "allowance": allowance, "outcome": outcome,
            "cache_resident": narrow["cache_resident"] or wide["cache_resident"]}


def width_steps(points: list[dict], tolerance: float = TOLERANCE) -> list[dict]:
    """Steps between neighbouring widths of the same model (same parameter count), narrow to wide."""
    groups: dict[Any, list[dict]] = {}
    for p in points:
        if p.get("n_params") is not None:
            groups.setdefault(p["n_params"], []).append(p)
    steps = []
    for members in groups.values():
        members = sorted(members, key=lambda p: p["bytes"])
        steps += [step_outcome(a, b, tolerance) for a, b in zip(members, members[1:], strict=False)]
    return sorted(steps, key=lambda s: next(p["bytes"] for p in points if p["name"] == s["narrow"]))


def fit_bandwidth(points: list[dict]) -> dict[str, Any] | None:
    """The line tokens/s = (the line's bandwidth) ÷ bytes with equal relative weight per point: its ln is the mean
    of ln(effective GB/s).

    The uncertainty is one standard error of that mean in log space: the scatter between points
    (over n − 1) and each point's own scatter of ln samples, both divided down by the counts.
    Returns the line's bandwidth (GB/s) as `gbs`, its relative error u (× e^±u), and the points used; None
    without points."""
    if not points:
        return None
    n = len(points)
    logs = [[math.log(s * p["bytes"] / GB) for s in p["kept"]] for p in points]
    means = [statistics.fmean(x) for x in logs]
    center = statistics.fmean(means)
    between = statistics.variance(means) / n if n > 1 else 0.0
    within = sum((statistics.variance(x) / len(x) if len(x) > 1 else 0.0) for x in logs) / n**2
    u = math.sqrt(between + within)
    b = math.exp(center)
    return {"gbs": b, "u": u, "gbs_low": b * math.exp(-u), "gbs_high": b * math.exp(u),
            "points": [p["name"] for p in points], "n": n}


def fit_slope(points: list[dict]) -> dict[str, Any] | None:
    """Free log-log slope k in tokens/s ∝ bytes^k over the points (−1 when tokens/s follows 1 ÷ bytes, 0 when the
    bytes do not matter), with its standard error (None below three points); None with fewer than two distinct
    sizes."""
    xs = [math.log(p["bytes"]) for p in points]
    ys = [math.log(p["median"]) for p in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    se = None
    if len(xs) > 2:
        res = sum((y - my - k * (x - mx)) ** 2 for x, y in zip(xs, ys, strict=True))
        se = math.sqrt(res / (len(xs) - 2) / sxx)
    return {"slope": k, "se": se, "n": len(xs)}


def on_line(point: dict, fit: dict, tolerance: float = TOLERANCE) -> tuple[bool, float]:
    """(lies on the line, relative residual effective GB/s ÷ the line's bandwidth − 1): within the tolerance or the
    point's robust spread, whichever is wider, widened by two standard errors of the line's bandwidth itself (the
    line is measured too: a point just past ±10% of an uncertain line is not off it)."""
    residual = point["gbs"] / fit["gbs"] - 1
    allowance = max(tolerance, point["robust_spread"])
    return abs(math.log(point["gbs"] / fit["gbs"])) <= math.log(1 + allowance) + 2 * fit["u"], residual


def analyse(points: list[dict], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Steps, the line, the slope, and each point against the line, by the rules of this module's docstring.

    The line is drawn through the points that a step which followed the bytes joins (they read at one rate),
    leaving out cache-resident ones; when no step followed the bytes, through every point that is not
    cache-resident and not the narrow end of a step that was no faster or faster by less than the bytes;
    failing that, through every point that is not cache-resident. Each point's place (`line`): on the line or
    not, and its residual (None for a cache-resident point). No verdict is named here.
    """
    steps = width_steps(points, tolerance)
    outside = [p for p in points if not p["cache_resident"]]
    joined = {name for s in steps if s["outcome"] == FOLLOWS for name in (s["narrow"], s["wide"])}
    held_back = {s["narrow"] for s in steps if s["outcome"] in (NOT_FASTER, LESS)}
    basis = ([p for p in outside if p["name"] in joined]
             or [p for p in outside if p["name"] not in held_back] or outside)
    fit = fit_bandwidth(basis)
    slope = fit_slope(outside)
    line: dict[str, dict[str, Any]] = {}
    for p in points:
        if p["cache_resident"]:
            line[p["name"]] = {"on_line": None, "residual": None}
            continue
        assert fit is not None  # this point is outside the caches, so the basis has at least one point
        lies, residual = on_line(p, fit, tolerance)
        line[p["name"]] = {"on_line": lies, "residual": residual}
    return {"steps": steps, "fit": fit, "slope": slope, "basis": [p["name"] for p in basis],
            "line": line, "tolerance": tolerance}
