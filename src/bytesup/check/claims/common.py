"""What the claims of every lesson share: the lessons' ids and one rule for a prediction's status."""

from __future__ import annotations

from bytesup.check.verdicts import FAIL, INCONCLUSIVE, PASS

L4, L5, L6, L7, L8 = "04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit", "08_capstone_decode_memory_bound"
L5B = "05b_speculative_decoding"


def prediction_status(worst_error: float, tolerance: float, scatter: float) -> str:
    """PASS where the worst prediction lies within the tolerance; a miss is INCONCLUSIVE where the samples it was
    measured from scatter wider than the tolerance (they cannot tell a model that holds from one that does not),
    else FAIL."""
    if abs(worst_error) <= tolerance:
        return PASS
    return INCONCLUSIVE if scatter > tolerance else FAIL
