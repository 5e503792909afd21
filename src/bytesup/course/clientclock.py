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
`StreamedRepeat` and `OutsideView` set those beside the server's own timings of the same generation.

Percentiles interpolate linearly between the two nearest ranks (numpy's default method, and the
one `vllm bench serve` reports): the q-th percentile of sorted x[0..n−1] is at rank (n − 1) × q / 100.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from bytesup.course.loop import ServerTimes, decode_ms_per_token, decode_passes, server_total_ms

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


# --- both clocks: the client's arrivals beside the server's timings ----------------------------------

@dataclass(frozen=True)
class StreamedRepeat:
    """One streamed generation on both clocks: the client's arrival times and the server's timings."""
    repeat: int
    client: ClientTimes
    timings: ServerTimes
    token_events: int                 # events that brought tokens

    @property
    def server_total_ms(self) -> float:
        return server_total_ms(self.timings)

    @property
    def per_token_ms(self) -> float:
        return decode_ms_per_token(self.timings)

    @property
    def ttft_gap_ms(self) -> float:
        return self.client.ttft_ms - self.timings.prompt_ms

    @property
    def overhead_ms(self) -> float:
        """End-to-end on the client minus the server's own prompt_ms + predicted_ms."""
        return self.client.end_to_end_ms - self.server_total_ms

    @property
    def itl_median_ms(self) -> float:
        return statistics.median(self.client.itl_ms)

    @property
    def fastest_gap_ms(self) -> float:
        return min(self.client.itl_ms)

    @property
    def floor_ms(self) -> float:
        return sequential_floor_ms(self.client.n, self.fastest_gap_ms)

    def fact(self) -> dict[str, float | int]:
        t = self.timings
        return {"ttft_ms": self.client.ttft_ms, "prompt_ms": t.prompt_ms, "token_events": self.token_events,
                "tokens": self.client.n, "predicted_n": t.predicted_n, "itl_median_ms": self.itl_median_ms,
                "predicted_per_token_ms": self.per_token_ms, "end_to_end_ms": self.client.end_to_end_ms,
                "server_total_ms": self.server_total_ms}


@dataclass(frozen=True)
class OutsideView:
    """The repeats of one streamed generation, their gaps pooled, beside the server's timings."""
    repeats: list[StreamedRepeat]

    @property
    def client(self) -> Summary:
        return summarize([r.client for r in self.repeats])

    @property
    def prompt_ms(self) -> float:
        return statistics.median(r.timings.prompt_ms for r in self.repeats)

    @property
    def per_token_ms(self) -> float:
        """The server's time per token over every repeat, as the client's gaps are pooled:
        Σ predicted_ms ÷ Σ (predicted_n − 1)."""
        return (sum(r.timings.predicted_ms for r in self.repeats)
                / sum(decode_passes(r.timings) for r in self.repeats))

    @property
    def server_total_ms(self) -> float:
        return statistics.median(r.server_total_ms for r in self.repeats)

    def itl_percentiles(self) -> dict[int, float]:
        """The pooled gaps at each of PERCENTILES."""
        return {q: self.client.itl_percentile(q) for q in PERCENTILES}

    @property
    def itl_mean_ms(self) -> float:
        return statistics.fmean(self.client.itl_ms)

    def predicted_end_to_end(self, n: int) -> float:
        """The latency model on the client's clock: median TTFT + ITL p50 × (n − 1)."""
        return predicted_end_to_end(self.client.ttft_median, self.client.itl_percentile(50), n)

    def server_predicted(self, n: int) -> float:
        """The same model on the server's clock: prompt_ms + predicted_per_token_ms × (n − 1)."""
        return self.prompt_ms + self.per_token_ms * (n - 1)

    @property
    def ttft_gaps_ms(self) -> list[float]:
        return [r.ttft_gap_ms for r in self.repeats]

    @property
    def overheads_ms(self) -> list[float]:
        return [r.overhead_ms for r in self.repeats]

    @property
    def causal(self) -> bool:
        """In every repeat the first token reached the client after the server's prompt_ms."""
        return all(g >= 0 for g in self.ttft_gaps_ms)

    @property
    def counted(self) -> bool:
        """Every repeat had one event per generated token."""
        return all(r.token_events == r.timings.predicted_n for r in self.repeats)

    @property
    def floor_held(self) -> bool:
        """Every repeat took at least its sequential floor."""
        return all(r.client.end_to_end_ms >= r.floor_ms for r in self.repeats)

    @property
    def above_floor(self) -> list[float]:
        """End-to-end ÷ the sequential floor, per repeat (at least 1 for a loop of one token at a time); infinite
        where two tokens shared an event, so the fastest gap and the floor are 0."""
        return [r.client.end_to_end_ms / r.floor_ms if r.floor_ms > 0 else math.inf for r in self.repeats]

    @property
    def fastest_gap_ms(self) -> float:
        return min(r.fastest_gap_ms for r in self.repeats)
