"""The generation loop seen from the client: arithmetic on the arrival times of streamed tokens.

Times are ms after the request was sent, on the client's monotonic clock. A streamed answer gives
(tokens generated so far, arrival ms) for each event that brought tokens (`StreamedCompletion.arrivals`);
from those come what serving benchmarks report on the client side:
- time to first token (TTFT): the arrival of the first token;
- inter-token latency (ITL): the gap between one token's arrival and the next one's. Tokens that
  came in one event (held back by the server mid-character, or accepted together by speculative
  decoding) share its arrival, so the gaps between them are 0;
- end-to-end time: the arrival of the final event;
and the checks of the loop: every token arrived after the one before it, and n tokens took at least
n × the fastest gap (each pass takes at least that long, and they cannot overlap).

Percentiles interpolate linearly between the two nearest ranks (numpy's default method, and the
one `vllm bench serve` reports): the q-th percentile of sorted x[0..n−1] is at rank (n − 1) × q / 100.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) by linear interpolation between closest ranks; NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def token_times(arrivals: Sequence[tuple[int, float]]) -> list[float]:
    """One arrival time per token, from (tokens so far, arrival ms) per event: an event that
    raised the count by k gives k tokens its time."""
    times: list[float] = []
    for so_far, at in arrivals:
        if so_far < len(times):
            raise ValueError(f"the token count went down from {len(times)} to {so_far}")
        times += [at] * (so_far - len(times))
    return times


def gaps(times: Sequence[float]) -> list[float]:
    """Inter-token latencies: each token's arrival minus the one before it."""
    return [b - a for a, b in zip(times, times[1:], strict=False)]


@dataclass(frozen=True)
class ClientTimes:
    """One streamed generation on the client's clock."""

    times_ms: list[float]             # each token's arrival
    end_to_end_ms: float              # the final event's arrival

    @property
    def n(self) -> int:
        return len(self.times_ms)

    @property
    def ttft_ms(self) -> float:
        return self.times_ms[0] if self.times_ms else math.nan

    @property
    def itl_ms(self) -> list[float]:
        return gaps(self.times_ms)

    @property
    def in_order(self) -> bool:
        """Every token arrived no earlier than the one before it, and the final event last."""
        return all(g >= 0 for g in self.itl_ms) and (not self.times_ms or self.end_to_end_ms >= self.times_ms[-1])

    @property
    def separate(self) -> bool:
        """Every token arrived strictly after the one before it: one token per event."""
        return all(g > 0 for g in self.itl_ms)


def client_times(arrivals: Sequence[tuple[int, float]], ended_ms: float) -> ClientTimes:
    return ClientTimes(token_times(arrivals), ended_ms)


def predicted_end_to_end(ttft_ms: float, itl_ms: float, n: int) -> float:
    """Lesson 5's latency model on the client's clock: TTFT + ITL × (n − 1)."""
    return ttft_ms + itl_ms * (n - 1)


def sequential_floor_ms(n: int, fastest_itl_ms: float) -> float:
    """n passes one after another, none faster than the fastest gap seen: n × that gap."""
    return n * fastest_itl_ms


def bursts(gaps_ms: Sequence[float], threshold_ms: float) -> list[int]:
    """Sizes of the runs of tokens that arrived together, in order: a gap below `threshold_ms` joins
    a token to the one before it (a speculative pass's accepted tokens come one event each, microseconds
    apart), a longer gap starts a new run. n tokens always make at least one run."""
    sizes = [1]
    for g in gaps_ms:
        if g < threshold_ms:
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


@dataclass(frozen=True)
class Summary:
    """Repeats of one generation pooled: TTFT and end-to-end per repeat, every gap of every repeat."""

    ttft_ms: list[float]
    end_to_end_ms: list[float]
    itl_ms: list[float]
    n: list[int]

    def itl_percentile(self, q: float) -> float:
        return percentile(self.itl_ms, q)

    @property
    def ttft_median(self) -> float:
        return statistics.median(self.ttft_ms)

    @property
    def end_to_end_median(self) -> float:
        return statistics.median(self.end_to_end_ms)


def summarize(runs: Sequence[ClientTimes]) -> Summary:
    return Summary([r.ttft_ms for r in runs], [r.end_to_end_ms for r in runs],
                   [g for r in runs for g in r.itl_ms], [r.n for r in runs])
