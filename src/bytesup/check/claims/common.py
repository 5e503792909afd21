"""What the claims of every lesson share: the lessons' ids, a claim's group, and one rule for a prediction's status."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Callable

from bytesup.check.verdicts import FAIL, GROUPS, INCONCLUSIVE, PASS, ClaimResult
from bytesup.store.runs import Run

Claim = Callable[[Run], list[ClaimResult]]

L4, L5, L6, L7, L8 = "04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit", "08_capstone_decode_memory_bound"
L5B = "05b_speculative_decoding"


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
