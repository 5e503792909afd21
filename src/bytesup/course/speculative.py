"""Speculative decoding's arithmetic: what a draft buys a target model, from counts and pass costs.

A draft (a small model, or n-grams looked up in the text itself) guesses k tokens; the target checks
them in one pass and keeps the guesses up to the first it disagrees with, plus a token of its own.
From the server's counters (predicted_n, draft_n, draft_n_accepted) come the acceptance and the
tokens per target pass; from each model's pass cost come the speed-up a round of drafting and
checking should give. Lesson 05b measures both; `bytesup check` compares speculative tokens with
plain ones through `first_difference`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from bytesup.course import clientclock


def expected_tokens_per_pass(draft_len: int, accept: float) -> float:
    """Tokens one target pass yields when `draft_len` drafted tokens are each accepted with
    probability `accept`, independently, and a rejection ends the run: 1 + a + a² + … + a^k
    (the 1 is the target's own token after the last accepted one)."""
    return sum(accept ** i for i in range(draft_len + 1))


def acceptance_rate(drafted: int, accepted: int) -> float:
    """Accepted ÷ drafted (the server's draft_n_accepted ÷ draft_n); NaN when nothing was drafted."""
    return accepted / drafted if drafted > 0 else math.nan


def target_passes(generated: int, accepted: int) -> int:
    """Target passes for `generated` tokens when `accepted` of them came from accepted drafts:
    every other token took a pass of its own (the prompt pass gives the first)."""
    return generated - accepted


def tokens_per_target_pass(generated: int, accepted: int) -> float:
    """generated ÷ (generated − accepted): 1 without speculation."""
    passes = target_passes(generated, accepted)
    return generated / passes if passes > 0 else math.nan


def predicted_speculative_speedup(tokens_per_pass: float, drafted_per_pass: float,
                                  draft_ms: float, target_ms: float, verify_ms: float | None = None) -> float:
    """Speed-up over plain decode, from measured costs: a round drafts `drafted_per_pass` tokens
    one draft pass each (`draft_ms`), then one target pass checks them (`verify_ms`, by default one
    plain target pass: the batch costs what one token costs while the target is memory-bound), and
    yields `tokens_per_pass` tokens. Plain decode makes one token per `target_ms`."""
    verify = target_ms if verify_ms is None else verify_ms
    round_ms = drafted_per_pass * draft_ms + verify
    return tokens_per_pass * target_ms / round_ms if round_ms > 0 else math.nan


def batch_pass_ms(tokens: float, small: tuple[float, float], large: tuple[float, float], floor_ms: float) -> float:
    """The time of one pass over `tokens` tokens at once, on the line through two measured passes
    (tokens, ms) of the same model, e.g. a short and a long prompt's prompt_ms. Never below
    `floor_ms`, the model's single-token pass: a batch does at least that work."""
    (n1, t1), (n2, t2) = small, large
    slope = (t2 - t1) / (n2 - n1) if n2 != n1 else 0.0
    return max(floor_ms, t1 + slope * (tokens - n1))


def first_difference(tokens: list, reference: list) -> int | None:
    """The first position where two token lists differ (a shorter list differs where it ends); None if equal."""
    for i, (a, b) in enumerate(zip(tokens, reference, strict=False)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


@dataclass(frozen=True)
class Counts:
    """Generated, drafted and accepted tokens over a configuration's repeats. A server that drafted
    nothing reports no counters: drafted and accepted are then 0, and `reported` is False."""
    generated: int
    drafted: int
    accepted: int
    reported: bool

    @property
    def passes(self) -> int:
        return target_passes(self.generated, self.accepted)

    @property
    def acceptance(self) -> float:
        return acceptance_rate(self.drafted, self.accepted)

    @property
    def tokens_per_pass(self) -> float:
        return tokens_per_target_pass(self.generated, self.accepted)

    @property
    def drafted_per_pass(self) -> float:
        return self.drafted / self.passes if self.passes > 0 else math.nan


def counts(answers: Iterable[tuple[int, int | None, int | None]]) -> Counts:
    """The counts over answers given as (predicted_n, draft_n, draft_n_accepted); None: not reported."""
    rows = list(answers)
    return Counts(generated=sum(n for n, _, _ in rows), drafted=sum(d or 0 for _, d, _ in rows),
                  accepted=sum(a or 0 for _, _, a in rows), reported=any(d is not None for _, d, _ in rows))


@dataclass(frozen=True)
class Prediction:
    """A configuration's arithmetic: 1 + a + … + a^k, the costs of a round, and the speed-ups they predict."""
    expected: float | None            # 1 + a + … + a^k (None: no acceptance to put in)
    draft_cost: float                 # draft pass ÷ target pass
    check_cost: float                 # check ÷ target pass
    ideal: float                      # speed-up with the check costed as one target pass
    predicted: float                  # with the check costed from the target's measured prompt passes


def predict(c: Counts, k: int, draft_ms: float, target_ms: float,
            short: tuple[float, float], long: tuple[float, float]) -> Prediction:
    """The arithmetic beside a measured configuration: `c` its counts, `k` its longest draft, `draft_ms`
    and `target_ms` one pass of each model alone (0 for a draft that costs no model pass), `short` and
    `long` two prompt passes of the target (tokens, ms) that a check of b tokens is costed between."""
    a = c.acceptance
    expected = expected_tokens_per_pass(k, a) if c.reported and not math.isnan(a) else None
    ideal = predicted_speculative_speedup(c.tokens_per_pass, c.drafted_per_pass, draft_ms, target_ms)
    verify_ms = batch_pass_ms(c.drafted_per_pass + 1, short, long, target_ms)
    predicted = predicted_speculative_speedup(c.tokens_per_pass, c.drafted_per_pass, draft_ms, target_ms, verify_ms)
    return Prediction(expected, draft_ms / target_ms, verify_ms / target_ms, ideal, predicted)


@dataclass(frozen=True)
class Stream:
    """One streamed request on a speculative server (or the target alone), on the client's clock, with the server's
    counters of the same request. A gap shorter than `threshold_ms` joins a token to the one before: the tokens of
    one speculative pass arrive microseconds apart, passes a whole pass apart."""
    label: str
    prompt: str
    client: clientclock.ClientTimes
    generated: int                    # predicted_n
    accepted: int                     # draft_n_accepted (0 without a draft)
    threshold_ms: float

    @property
    def bursts(self) -> list[int]:
        return clientclock.bursts(self.client.itl_ms, self.threshold_ms)

    @property
    def server_passes(self) -> int:
        """Target passes by the server's counters: generated − accepted."""
        return target_passes(self.generated, self.accepted)
