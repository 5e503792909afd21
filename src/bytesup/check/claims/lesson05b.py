"""Lesson 5b's claim: at temperature 0, speculative decoding generates exactly the tokens of plain decoding."""

from __future__ import annotations

from bytesup.course.speculative import first_difference
from bytesup.store.runs import Run
from bytesup.check.verdicts import (ITSELF, FAIL, NA, PASS, ClaimResult, find_lesson, missing)
from bytesup.check.claims.common import L5B, grouped


@grouped(ITSELF)
def claim_speculative_equals_plain(run: Run) -> list[ClaimResult]:
    """Lesson 5b's speculative runs against its plain runs, token by token, from the token ids the
    lesson keeps in its settings (`speculative.runs`): a plain run (spec_type none) is the reference
    for every speculative run of the same target and prompt."""
    text = "at temperature 0, speculative decoding generates exactly the tokens of plain decoding"
    cid = "speculative_equals_plain"
    lesson = find_lesson(run, "05b_")
    if lesson is None:
        return [ClaimResult(cid, "general", "05b", text, NA, detail=missing(run, "05b_", L5B))]
    spec = lesson.settings.get("speculative")
    if not isinstance(spec, dict) or not spec.get("runs"):
        why = next((n for n in lesson.notes if n.startswith("Speculative decoding was not measured")), None)
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=why or "lesson 05b recorded no speculative runs (settings.speculative.runs)")]
    if spec.get("temperature") != 0:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"the runs were made at temperature {spec.get('temperature')!r}, not 0")]
    runs = spec["runs"]
    plain = {(r.get("target"), r.get("prompt")): r for r in runs if r.get("spec_type") in (None, "none") and r.get("tokens")}
    compared, bad, unmatched, lengths = 0, [], [], set()
    for r in runs:
        if r.get("spec_type") in (None, "none"):
            continue
        ref = plain.get((r.get("target"), r.get("prompt")))
        if ref is None:
            unmatched.append(r.get("label", "?"))
            continue
        reference = ref["tokens"][0]
        for i, tokens in enumerate(r.get("tokens") or []):
            compared += 1
            lengths.add(len(tokens))
            at = first_difference(tokens, reference)
            if at is not None:
                bad.append(f"{r.get('label', '?')} repeat {i + 1}: first differs at token {at + 1} of {len(reference)}")
    if compared == 0:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="no speculative run has a plain run of the same target and prompt to compare with"
                                   + (f" ({', '.join(unmatched)})" if unmatched else ""))]
    detail = "; ".join(bad[:5])
    if unmatched:
        detail += f"{'; ' if detail else ''}without a plain run to compare: {', '.join(unmatched)}"
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{compared - len(bad)} of {compared} speculative generations identical "
                                 f"({'/'.join(str(n) for n in sorted(lengths))} tokens each)",
                        expected="every token equal to the plain run's on the same target and prompt",
                        tolerance="exact", detail=detail)]
