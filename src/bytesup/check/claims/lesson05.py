"""Lesson 5's claims: the samplers re-implemented in numpy against the server, and the streamed tokens on the
client's clock against the server's timings."""

from __future__ import annotations

from dataclasses import replace

import math

from bytesup.store.runs import Run
from bytesup.check.evidence import (
    FactShapeError,
    exchanges_path,
    RawStream,
    recorded_streams,
    sampler_comparisons,
)
from bytesup.store.results import LessonResult
from bytesup.check.verdicts import (ITSELF, SANITY, FAIL, INCONCLUSIVE, NA, PASS, ClaimResult, find_lesson, missing)
from bytesup.check.claims.common import L5, grouped, timing


# --- lessons 5 and 5b: samplers and speculative decoding ------------------------------------------------

# The loosest tolerance that can still show agreement: float32 sums over the vocabulary differ by
# up to about 2.9e-3 relative (see EXP_RELATIVE_TOLERANCE); a lesson's tolerance above 1e-3 would
# let a wrong sampler pass, so it fails the claim whatever its differences.
SAMPLER_TOLERANCE_CEILING = 1e-3


@grouped(ITSELF)
def claim_sampler_matches_server(run: Run) -> list[ClaimResult]:
    """Lesson 5's comparisons of its samplers with the server's post-sampling probabilities, judged
    from their numbers (never the lesson's verdict): each compared setting has max |Δp| / p within
    its tolerance, that tolerance within check's ceiling, and the same kept tokens."""
    cid, text = "sampler_matches_server", "the numpy re-implementation of the samplers gives the server's post-sampling probabilities"
    lesson = find_lesson(run, "05_")
    if lesson is None:
        return [ClaimResult(cid, "general", "05", text, NA, detail=missing(run, "05_", L5))]
    try:
        rows, source = sampler_comparisons(lesson)
    except FactShapeError as exc:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=f"lesson {lesson.lesson_id}'s fact {exc}")]
    checked, skipped, bad = [], [], []
    worst: tuple[float, float, str] | None = None
    for r in rows:
        if r.max_relative_difference is None and r.same_tokens is None:
            skipped.append(r.name)
            continue
        checked.append(r.name)
        problems = []
        if r.same_tokens is False:
            problems.append("the kept tokens differ")
        if r.max_relative_difference is not None:
            if r.tolerance is None:
                problems.append("no tolerance stated")
            else:
                if worst is None or r.max_relative_difference > worst[0]:
                    worst = (r.max_relative_difference, r.tolerance, r.name)
                if r.max_relative_difference > r.tolerance:
                    problems.append(f"max |Δp|/p {r.max_relative_difference:.3g} > tolerance {r.tolerance:.3g}")
                if r.tolerance > SAMPLER_TOLERANCE_CEILING:
                    problems.append(f"tolerance {r.tolerance:.3g} looser than check's ceiling {SAMPLER_TOLERANCE_CEILING:g}")
        if problems:
            bad.append(f"{r.name}: {', '.join(problems)}")
    if not checked:
        why = (f"lesson 05 compared no setting ({len(skipped)} not checked)" if skipped else
               "lesson 05 states no sampler_comparisons fact and has no table with a max |Δp| / p column")
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail=why)]
    detail = "; ".join(bad[:5])
    if skipped:
        detail += f"{'; ' if detail else ''}{len(skipped)} not checked by the lesson"
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{len(checked) - len(bad)} of {len(checked)} settings agree"
                                 + (f"; largest max |Δp|/p {worst[0]:.2g} ({worst[2]})" if worst else ""),
                        expected="every compared setting within its tolerance, with the same kept tokens",
                        tolerance=(f"relative {worst[1]:g} (the lesson's), at most {SAMPLER_TOLERANCE_CEILING:g}" if worst
                                   else "the same kept tokens"),
                        detail=detail + f"{'; ' if detail else ''}from {source}")]


# --- lesson 5: the loop seen from outside (streamed tokens on the client's clock) ----------------

def _streams(run: Run, cid: str, text: str) -> tuple[LessonResult | None, list[RawStream], ClaimResult | None]:
    """Lesson 5's recorded streams that ended with their timings, or the claim's 'not applicable'."""
    lesson = find_lesson(run, "05_")
    if lesson is None:
        return None, [], ClaimResult(cid, "general", "05", text, NA, detail=missing(run, "05_", L5))
    path = exchanges_path(run, lesson)
    streams = [s for s in recorded_streams(path) if s.timings is not None and s.token_events] if path is not None else []
    if not streams:
        return lesson, [], ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                       detail="lesson 05 recorded no streamed /completion with its final timings "
                                              "(a run made before the lesson streamed)")
    return lesson, streams, None


def _timing(stream: RawStream, name: str) -> float:
    value = (stream.timings or {}).get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


# Two results in two groups: TTFT ≥ prompt_ms is a bound any sound recording meets, one event per token a consistency.
def claim_stream_causality(run: Run) -> list[ClaimResult]:
    """The first token cannot reach the client before the server has sampled it: the client's time
    to first token (from sending the request) is at least the server's prompt_ms (from the slot
    starting on the prompt to that token). And the stream has one event per generated token."""
    results = []
    cid, text = "stream_first_token_after_prompt", "a streamed token reaches the client after the server's prompt_ms (TTFT ≥ prompt_ms)"
    lesson, streams, na = _streams(run, cid, text)
    if na is not None:
        return [replace(na, group=SANITY), ClaimResult("stream_one_event_per_token", "general", na.lesson,
                                "a stream has one event per generated token (events = predicted_n)", NA, detail=na.detail)]
    assert lesson is not None
    gaps = [(s.token_events[0][1] - _timing(s, "prompt_ms"), s.line) for s in streams]
    early = [f"line {line}: {g:.3g} ms" for g, line in gaps if not g >= 0]
    results.append(ClaimResult(
        cid, "general", lesson.lesson_id, text, FAIL if early else PASS, group=SANITY,
        observed=f"TTFT − prompt_ms from {min(g for g, _ in gaps):.3g} to {max(g for g, _ in gaps):.3g} ms over {len(streams)} streams",
        expected="≥ 0 ms", tolerance="none: both clocks are monotonic and the server's interval lies inside the client's",
        detail="; ".join(early[:5]) or f"from the streams recorded in {lesson.exchanges}"))
    cid, text = "stream_one_event_per_token", "a stream has one event per generated token (events = predicted_n)"
    lost, grouped = [], []
    for s in streams:
        n = _timing(s, "predicted_n")
        if s.token_events[-1][0] != n:
            lost.append(f"line {s.line}: the events count {s.token_events[-1][0]} tokens, predicted_n {n:g}")
        elif len(s.token_events) != n:
            grouped.append(f"line {s.line}: {len(s.token_events)} events for {n:g} tokens")
    status = FAIL if lost else INCONCLUSIVE if grouped else PASS
    detail = "; ".join((lost or grouped)[:5])
    if grouped and not lost:
        detail += (": some events brought several tokens (held back by the server mid-character, or accepted "
                   "together by speculative decoding), so one event per pass cannot be told here")
    results.append(ClaimResult(
        cid, "general", lesson.lesson_id, text, status,
        observed=", ".join(str(len(s.token_events)) for s in streams) + " events with tokens",
        expected="predicted_n = " + ", ".join(f"{_timing(s, 'predicted_n'):g}" for s in streams),
        tolerance="exact", detail=detail or "every generated token came in an event of its own"))
    return results


@grouped(ITSELF)
@timing
def claim_stream_clocks_agree(run: Run) -> list[ClaimResult]:
    """The median gap between streamed tokens on the client's clock against the server's
    predicted_ms ÷ (predicted_n − 1), within a tolerance derived per stream.

    A client gap is a server pass plus the change in delivery delay from one event to the next.
    So the mean gap, (last arrival − first arrival) ÷ (n − 1), equals the server's per-token time
    up to (last token's delay − first token's) ÷ (n − 1). The first token's delay is at most
    TTFT − prompt_ms (which also holds the request's own handling), and the last token's event is
    taken to be delivered no slower than that, so the difference is at most TTFT − prompt_ms. The
    server's figure is a mean of its passes and the client's a median of its gaps; a median lies
    within one standard deviation σ of the mean, and the client's gaps vary at least as much as the
    passes. Tolerance = σ of the client's gaps + (TTFT − prompt_ms) ÷ (n − 1). Where it reaches the
    per-token time itself the client's clock cannot resolve a pass (a very small model, whose pass
    is as short as delivering an event, a slow link, a client that reads in bursts, or a machine so
    busy that the gaps vary as much as a pass lasts): not applicable."""
    cid, text = "stream_clocks_agree", "the median inter-token gap on the client's clock agrees with the server's time per token"
    lesson, streams, na = _streams(run, cid, text)
    if na is not None:
        return [na]
    assert lesson is not None
    # A speculative server sends a pass's accepted tokens together: its gaps are not passes (lesson 5 shows them apart).
    plain = [s for s in streams if (s.timings or {}).get("draft_n") is None]
    if not plain:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail="every recorded stream is a speculative one")]
    rows, unresolved = [], []
    for s in plain:
        gaps = s.gaps()
        n, prompt_ms, predicted_ms = len(gaps) + 1, _timing(s, "prompt_ms"), _timing(s, "predicted_ms")
        if len(gaps) < 2 or _timing(s, "predicted_n") < 2:
            continue
        per_token = predicted_ms / (_timing(s, "predicted_n") - 1)
        ordered = sorted(gaps)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        mean = sum(gaps) / len(gaps)
        sigma = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
        delay = max(s.token_events[0][1] - prompt_ms, 0.0)
        tolerance = sigma + delay / (n - 1)
        if tolerance >= per_token:
            unresolved.append(f"line {s.line}: tolerance {tolerance:.3g} ms ≥ {per_token:.3g} ms per token")
            continue
        rows.append((abs(median - per_token) / tolerance, s.line, median, per_token, sigma, delay, n, tolerance))
    if not rows:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=("the client's clock cannot resolve a pass here: its gaps vary as much as a pass "
                                    "lasts (a pass as short as delivering an event, as on a very small model; a slow "
                                    "link; a client that reads in bursts; or a machine too busy to keep the passes "
                                    "even): " + "; ".join(unresolved[:3])) if unresolved
                            else "no stream has two gaps or more")]
    worst = max(rows)
    _, line, median, per_token, sigma, delay, n, tolerance = worst
    ok = all(r[0] <= 1 for r in rows)
    return [ClaimResult(
        cid, "general", lesson.lesson_id, text, PASS if ok else FAIL,
        observed=f"median gap {median:.4g} ms (line {line}; the stream furthest off, of {len(rows)} without speculation)",
        expected=f"predicted_ms ÷ (predicted_n − 1) = {per_token:.4g} ms",
        tolerance=f"±{tolerance:.3g} ms = σ {sigma:.3g} + {delay:.3g} ÷ {n - 1}",
        detail=("σ: the standard deviation of the stream's gaps (a median lies within σ of the mean); the second "
                "term: the first token's delivery delay at most, TTFT − prompt_ms, spread over the n − 1 gaps"
                + (f"; not resolved: {'; '.join(unresolved[:3])}" if unresolved else "")))]
