"""The machine's pace: the run's server decoding the same short request a few times before and after every lesson.

A lesson's speeds are taken minutes after another's, and a shared machine's speed moves over minutes: on a virtual
machine the host's other guests slow the cores and the memory without any process here using them, so neither the
load average nor the CPU time sees it. The pace does, on the quantity the lessons measure: READINGS decodes of
N_PREDICT tokens after a short prompt, greedy and seeded, on the run's server, each as tokens/s from the server's
own timings; and PREFILLS prefills of the carried text's first PREFILL_CHARS characters (about 128 tokens), one token
generated, each as prompt tokens/s. Prefill is arithmetic-bound where decode waits on memory, so a machine whose
cores are slowed by the host's other guests can slow one more than the other: each is read for itself. The
requests go through a bare client (`BareClient`): they are not the lesson's, so they are neither recorded with its
exchanges nor replayed.

A run of two or more lessons reads the pace before and after every lesson that times anything on a server (all but
those whose TIMES_THE_SERVER is False: lessons 1 to 3, which time the file, numpy and this host's memory); the
reading after one such lesson is the reading before the next, unless another lesson ran between. Each lesson keeps
its two readings with its readings of the machine's load
(the host value `machine_load`, key "pace"). `bytesup check` reads the machine's wander over the run from them: how
far the readings' medians lie from their median, the furthest but one, decode's and prefill's each, below which two
lessons' figures of one quantity cannot be told apart
(bytesup.check.claims.consistency). The wander is not a busy lesson (bytesup.course.busy): on a 2-core virtual
machine it was there in every run, some of it within one second.

`BYTESUP_PACE=0` skips it (the tests do, as they skip the harness's split); a replay never takes it.
"""

from __future__ import annotations

import http.client
import json
import os

from bytesup.llama.client import BareClient
from bytesup.llama.timed import corpus_text
from bytesup.units import PINNED

ENV = "BYTESUP_PACE"
PROMPT = "The capital of France is"
N_PREDICT = 16
READINGS = 3
PREFILL_CHARS = 585  # about 128 of SmolLM2's tokens: the prefill lessons 7 and 8 time
PREFILLS = 2


def skipped_by_env() -> bool:
    return os.environ.get(ENV, "").strip() == "0"


def body(n_predict: int = N_PREDICT) -> bytes:
    """The pace's request: the project's pinned settings (bytesup.units.PINNED), so every reading decodes the same
    n_predict tokens after the whole prompt."""
    return json.dumps({"prompt": PROMPT, "n_predict": n_predict, **PINNED}).encode()


def prefill_body() -> bytes:
    """The pace's prefill: the carried text's first PREFILL_CHARS characters, one token generated, pinned settings
    (cache_prompt false: the whole prompt is evaluated every time)."""
    return json.dumps({"prompt": corpus_text()[:PREFILL_CHARS], "n_predict": 1, **PINNED}).encode()


def prefill_tokens_per_s(timings: dict) -> float:
    """One prefill's speed from the server's timings: prompt_n tokens in prompt_ms."""
    return 1e3 * float(timings["prompt_n"]) / float(timings["prompt_ms"])


def tokens_per_s(timings: dict) -> float:
    """One decode's speed from the server's timings: predicted_n tokens in predicted_ms."""
    return 1e3 * float(timings["predicted_n"]) / float(timings["predicted_ms"])


def read(bare: BareClient, readings: int = READINGS, n_predict: int = N_PREDICT) -> list[float] | None:
    """`readings` decodes' tokens/s, in the order taken; None where a request failed or an answer had no usable
    timings (the pace is a sign of the machine, never a reason for a run to fail)."""
    return _speeds(bare, body(n_predict), readings, tokens_per_s)


def read_prefill(bare: BareClient, readings: int = PREFILLS) -> list[float] | None:
    """`readings` prefills' prompt tokens/s, in the order taken; None as for `read`."""
    return _speeds(bare, prefill_body(), readings, prefill_tokens_per_s)


def take(bare: BareClient) -> dict[str, list[float]] | None:
    """One reading of the pace: {"decode": tokens/s, "prefill": prompt tokens/s} (the latter left out where its
    requests failed); None where the decodes failed."""
    decode = read(bare)
    if decode is None:
        return None
    prefill = read_prefill(bare)
    return {"decode": decode, **({"prefill": prefill} if prefill else {})}


def around(before: dict[str, list[float]] | None, after: dict[str, list[float]] | None) -> dict[str, list[float]] | None:
    """A lesson's record of the pace (the host value machine_load's "pace"): the decodes before and after it as
    "before" and "after", the prefills as "prefill_before" and "prefill_after" where both were read."""
    if not before or not after:
        return None
    out = {"before": before["decode"], "after": after["decode"]}
    if before.get("prefill") and after.get("prefill"):
        out |= {"prefill_before": before["prefill"], "prefill_after": after["prefill"]}
    return out


def _speeds(bare: BareClient, raw: bytes, readings: int, speed) -> list[float] | None:
    out = []
    try:
        for _ in range(readings):
            _, timings = bare.timed(raw)
            out.append(round(speed(timings), 2))
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    return out
