"""When a measurement has taken enough samples: one stopping rule, in the manner of pyperf and hyperfine.

A measurement takes its samples one at a time. After each one the rule reads what the samples say so far:

- fewer than `minimum`: go on;
- every figure the claims read is *tight*, its median's uncertainty at most `tight`: stop, "tight";
- `maximum` samples taken: stop, "maximum";
- the samples' own time has reached `budget_s`: stop, "budget";
- otherwise go on.

So a quiet machine stops at the minimum, a noisy one takes samples up to the maximum or the budget, and the
measurement says which of them stopped it.

A median's uncertainty, as a fraction of the median: u = 1.2533 × σ ÷ √n ÷ |median|, where 1.2533 σ ÷ √n is the
standard error of the median of n samples drawn from a normal spread of σ, and σ is read from the samples' range,
σ = (max − min) ÷ d₂(n), with d₂ the expected range of n normal samples in units of σ (the control-chart constant:
1.128 for two, 2.326 for five). The range is what few samples say best: with two samples their interquartile range
is half their range, which reads σ at about two fifths of what it is. From MIN_ROBUST samples on, the outliers of
`bytesup.course.robust` are left out of the range (one slow request on a shared machine does not hold the others
back), and from D2_UP_TO on σ is the interquartile range ÷ 1.349.

Everything the rule reads is recorded with the run (the server's timings in the recorded answers, or host values),
so a replay takes the same decisions from the same samples and asks for exactly the recorded requests.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

from bytesup.course import robust

T = TypeVar("T")

TIGHT, MAXIMUM, BUDGET = "tight", "maximum", "budget"
MEDIAN_SE = 1.2533  # the standard error of a median of normal samples, in units of σ ÷ √n: √(π / 2)
# d₂(n): the expected range of n samples from a normal distribution, in units of its σ.
D2 = {2: 1.128, 3: 1.693, 4: 2.059, 5: 2.326, 6: 2.534, 7: 2.704, 8: 2.847, 9: 2.970, 10: 3.078}
D2_UP_TO = max(D2)
IQR_SIGMAS = 1.349  # the interquartile range of a normal distribution, in units of its σ
MIN_ROBUST = robust.MIN_SAMPLES  # from here on outliers are named and left out


@dataclass(frozen=True)
class Rule:
    """When to stop: at least `minimum` samples, at most `maximum`; before that, once every figure's median is
    known to `tight` (a fraction of it) or the samples' own time has reached `budget_s` seconds. A sample is what the
    measurement repeats: one request, or one round of requests that gives several values of a figure."""

    minimum: int
    maximum: int
    tight: float
    budget_s: float

    def __post_init__(self) -> None:
        if self.minimum < 1:
            raise ValueError(f"a measurement takes one sample at least, not a minimum of {self.minimum}")
        if self.maximum < self.minimum:
            raise ValueError(f"the maximum ({self.maximum}) is below the minimum ({self.minimum})")
        if not self.tight > 0 or not self.budget_s > 0:
            raise ValueError("the tightness and the budget are more than 0")


@dataclass(frozen=True)
class Stop:
    """What stopped a measurement: after `samples` samples, `why` (TIGHT, MAXIMUM or BUDGET); the largest of its
    figures' median uncertainties then, and the samples' own time, in seconds."""

    samples: int
    why: str
    uncertainty: float
    spent_s: float

    def to_json(self) -> dict[str, object]:
        return {"samples": self.samples, "stopped_by": self.why, "median_uncertainty": round(self.uncertainty, 5),
                "spent_s": round(self.spent_s, 3)}


def sigma(samples: Sequence[float]) -> float:
    """σ of the samples, read from their range ÷ d₂(n) (outliers left out from MIN_ROBUST samples on), or from their
    interquartile range ÷ 1.349 beyond D2_UP_TO samples; 0 for one sample."""
    if len(samples) < 2:
        return 0.0
    kept = robust.judge(list(samples)).kept if len(samples) >= MIN_ROBUST else list(samples)
    if len(kept) < 2:
        return 0.0
    if len(kept) <= D2_UP_TO:
        return (max(kept) - min(kept)) / D2[len(kept)]
    q1, q3 = robust.quartiles(kept)
    return (q3 - q1) / IQR_SIGMAS


def median_uncertainty(samples: Sequence[float]) -> float:
    """The median's uncertainty as a fraction of it: 1.2533 × σ ÷ √n ÷ |median| (see the module); infinite for
    fewer than two samples or a median of 0."""
    if len(samples) < 2:
        return math.inf
    median = statistics.median(samples)
    if median == 0:
        return math.inf
    return MEDIAN_SE * sigma(samples) / math.sqrt(len(samples)) / abs(median)


def decide(rule: Rule, n: int, figures: Sequence[Sequence[float]], spent_s: float) -> Stop | None:
    """The rule after the `n`th sample: `figures` the values of every figure the claims read so far (a sample may give
    several values of one figure: a round of requests), `spent_s` the samples' own time so far. None: take another.
    A figure of fewer than two values is not known at all, however many samples were taken."""
    if n < rule.minimum:
        return None
    u = max((median_uncertainty(f) for f in figures), default=math.inf)
    if u <= rule.tight:
        return Stop(n, TIGHT, u, spent_s)
    if n >= rule.maximum:
        return Stop(n, MAXIMUM, u, spent_s)
    if spent_s >= rule.budget_s:
        return Stop(n, BUDGET, u, spent_s)
    return None


def take(rule: Rule, samples: Iterator[T], figures: Callable[[list[T]], Sequence[Sequence[float]]],
         seconds: Callable[[T], float]) -> tuple[list[T], Stop]:
    """Samples drawn from `samples` (an iterator that takes each one when asked: a request, a benchmark) until the
    rule stops: the samples, and what stopped them. `figures` reads the figures' samples from the samples taken,
    `seconds` one sample's own time. The iterator is closed once the rule stops; it holds `rule.maximum` samples."""
    taken: list[T] = []
    spent = 0.0
    try:
        for sample in samples:
            taken.append(sample)
            spent += seconds(sample)
            stop = decide(rule, len(taken), figures(taken), spent)
            if stop is not None:
                return taken, stop
    finally:
        close = getattr(samples, "close", None)
        if close is not None:
            close()
    raise ValueError(f"the samples ran out after {len(taken)}, before the rule stopped (its maximum: {rule.maximum})")
