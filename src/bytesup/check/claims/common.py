"""What the claims of every lesson share: the lessons' ids, a claim's group, the lesson and fact a claim reads
(`lesson_fact`), one rule for a prediction's status, and the busy-machine rule for a timing claim (`busy_during`,
`unless_busy`, `timing`)."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Callable, TypeVar

from pydantic import BaseModel

from bytesup.check.verdicts import FAIL, GROUPS, INCONCLUSIVE, NA, PASS, ClaimResult, find_lesson, missing
from bytesup.course import busy
from bytesup.store.results import LessonResult
from bytesup.store.runs import Run

Claim = Callable[[Run], list[ClaimResult]]

L4, L5, L6, L7, L8 = "04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit", "08_capstone_decode_memory_bound"
L5B = "05b_speculative_decoding"
F = TypeVar("F", bound=BaseModel)


def lesson_fact(run: Run, cid: str, text: str, lesson_id: str, fact_type: type[F],
                without: str) -> tuple[LessonResult, F] | list[ClaimResult]:
    """The lesson a claim reads (`lesson_id`, found by its number) and the fact of `fact_type` it states; where the run
    holds no such lesson, or the lesson states no such fact (`without` says why), the claim's one not-applicable result."""
    number = lesson_id.split("_")[0]
    lesson = find_lesson(run, f"{number}_")
    if lesson is None:
        return [ClaimResult(cid, "general", number, text, NA, detail=missing(run, f"{number}_", lesson_id))]
    fact = lesson.stated(fact_type)
    if fact is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail=without)]
    return lesson, fact


def prediction_status(worst_error: float, tolerance: float, scatter: float) -> str:
    """PASS where the worst prediction lies within the tolerance; a miss is INCONCLUSIVE where the samples it was
    measured from scatter wider than the tolerance (they cannot tell a model that holds from one that does not),
    else FAIL."""
    if abs(worst_error) <= tolerance:
        return PASS
    return INCONCLUSIVE if scatter > tolerance else FAIL


def grouped(group: str) -> Callable[[Claim], Claim]:
    """Puts every result of a claim in `group` (one of bytesup.check.verdicts.GROUPS)."""
    if group not in GROUPS:
        raise ValueError(f"no claim group {group!r}")

    def mark(claim: Claim) -> Claim:
        @functools.wraps(claim)
        def in_group(run: Run) -> list[ClaimResult]:
            return [replace(r, group=group) for r in claim(run)]
        return in_group
    return mark


def busy_during(run: Run, *lessons: str) -> str | None:
    """Why the machine was busy while any of `lessons` (ids, or their "NN_" prefixes) measured, by the one rule
    (bytesup.course.busy.judge on each lesson's recorded readings); None where every one of them was quiet or
    recorded no readings (a run recorded before them)."""
    found = []
    for name in lessons:
        result = run.results.get(name) or find_lesson(run, name.split("_")[0] + "_")
        verdict = busy.judge(result.host_values.get(busy.HOST_VALUE)) if result is not None else None
        if verdict is not None and verdict.busy:
            found.append(f"during {result.lesson_id if result else name}: {'; '.join(verdict.reasons)}")
    return "; ".join(found) or None


def unless_busy(run: Run, result: ClaimResult, *lessons: str) -> ClaimResult:
    """A timing claim's result as `bytesup check` gives it: where the machine was busy while `lessons` (by default the
    result's own lesson) measured, a pass or a fail becomes INCONCLUSIVE, "inconclusive: the machine was busy", with
    what it would have been; any other result, and every result of a quiet machine, is left as it is."""
    if result.status not in (PASS, FAIL):
        return result
    why = busy_during(run, *(lessons or (result.lesson,)))
    if why is None:
        return result
    detail = (f"inconclusive: the machine was busy {why}; on these timings alone it would "
              f"{'pass' if result.status == PASS else 'fail'}" + (f" ({result.detail})" if result.detail else ""))
    return replace(result, status=INCONCLUSIVE, detail=detail)


def timing(claim: Claim) -> Claim:
    """Marks a claim that judges timings (speeds, predictions of times): each of its results goes through
    `unless_busy` for the lesson it names."""
    @functools.wraps(claim)
    def judged_unless_busy(run: Run) -> list[ClaimResult]:
        return [unless_busy(run, r) for r in claim(run)]
    return judged_unless_busy
