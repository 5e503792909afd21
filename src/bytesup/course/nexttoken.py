"""Lesson 4's arithmetic, pure functions of numbers: softmax worked by hand, the speeds of prefill and decode from
the server's timings, the third clock (the server's timings against llama-bench's), and the numpy pass's two
figures that need no server (keeping only the last position, the answer through the layers).

The lesson records the answers and the timings; everything here is recomputed from them on every replay."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from bytesup.course.ceiling import Spread

SOFTMAX_LOGITS = [2.0, 1.0, 0.1]  # the lesson's worked example
SOFTMAX_SHIFT = 100.0             # added to every logit: only the gaps matter
SIGNIFICANT = 6                   # digits kept of numpy's figures (a replay on another CPU may differ further down)


@dataclass(frozen=True)
class SoftmaxExample:
    logits: list[float]
    exp: list[float]
    probs: list[float]
    sum: float
    shift: float
    probs_shifted: list[float]
    shift_max_abs_difference: float
    gap: float              # logits[0] − logits[1]
    p0_over_p1: float       # = e^gap
    e: float
    e_to_5: float


def softmax_example(logits: list[float] = SOFTMAX_LOGITS, shift: float = SOFTMAX_SHIFT) -> SoftmaxExample:
    """Softmax worked in numpy: e^logit, the probabilities, and the two facts the lesson states."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z)
    p = e / e.sum()
    shifted = np.exp(z + shift - (z + shift).max())  # the usual max-subtraction keeps e^102 finite
    p_shifted = shifted / shifted.sum()
    return SoftmaxExample(
        logits=z.tolist(), exp=e.tolist(), probs=p.tolist(), sum=float(p.sum()), shift=shift,
        probs_shifted=p_shifted.tolist(), shift_max_abs_difference=float(np.max(np.abs(p - p_shifted))),
        gap=float(z[0] - z[1]), p0_over_p1=float(p[0] / p[1]), e=float(np.e), e_to_5=float(np.exp(5.0)),
    )


def sig(x: float, digits: int = SIGNIFICANT) -> float:
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class LastOnly:
    """Lines 4 and 5 for every position against the last alone (lesson 4's "keep only the last position")."""

    name: str
    n_tokens: int
    n_vocab: int
    n_embd: int
    max_abs_logit_difference: float   # the last row of all N against the last position alone
    same_top: bool
    # The columns of its table, in order (name, unit), for the view (store.views.page.by_columns); the view shows
    # the prompt of the table `name`.
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "name": ("prompt", ""), "n_tokens": ("tokens N", ""), "max_abs_logit_difference": ("largest |Δlogit|", ""),
        "same_top": ("same top token", ""), "flops_all": ("FLOPs, all N positions", "FLOP"),
        "flops_last": ("FLOPs, the last alone", "FLOP"),
        "flops_saved": ("saved: (N − 1) × 2 × vocabulary × width", "FLOP")}

    @property
    def flops_all(self) -> int:
        return self.n_tokens * 2 * self.n_vocab * self.n_embd

    @property
    def flops_last(self) -> int:
        return 2 * self.n_vocab * self.n_embd

    @property
    def flops_saved(self) -> int:
        """(N − 1) × 2 × vocabulary × width."""
        return self.flops_all - self.flops_last


@dataclass(frozen=True)
class ThroughTheLayers:
    """The final top token's rank and probability when the final norm and output read the last position after each block."""

    name: str
    token_id: int
    token: str
    ranks: list[int]
    probabilities: list[float]

    @property
    def on_top_from(self) -> int | None:
        """The first block after which the token ranks first at every later block (1-based); None if never."""
        first = None
        for b, rank in enumerate(self.ranks, start=1):
            first = (first or b) if rank == 1 else None
        return first


@dataclass(frozen=True)
class Speeds:
    """Prefill and decode speeds from the server's timings (records: decode counts n − 1 passes)."""

    prompt_n: int           # tokens of the long prompt the server evaluated
    short_prompt_n: int
    prefill: list[float]    # tokens/s, long prompt
    decode_short: list[float]
    decode_long: list[float]

    @property
    def ratio(self) -> float:
        """Median prefill tokens/s ÷ median decode tokens/s after the short prompt."""
        return statistics.median(self.prefill) / statistics.median(self.decode_short)


BAND = 0.05  # the server may be this much off llama.cpp in process: its HTTP, slot and sampling cost no more
EDGE = 1e-12  # a ratio this close to the band's edge is on it (105 ÷ 100 − 1 is 0.05 and a few ulps)


@dataclass(frozen=True)
class ThirdClock:
    """One phase's speed from the server's timings against llama-bench's, in process: the ratio of the medians, how
    far that ratio can be trusted, and whether it lies within ±BAND of 1 (the server costs no more than llama.cpp
    itself), outside it, or cannot tell yet, with the samples each clock would need to tell."""

    phase: str
    server: tuple[float, ...]
    bench: tuple[float, ...]
    # The columns of its table, in order (name, unit), for the view (store.views.page.by_columns).
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "phase": ("phase", ""), "server_median": ("server median", "tokens/s"), "server_min": ("server min", "tokens/s"),
        "server_max": ("server max", "tokens/s"), "bench_median": ("llama-bench median", "tokens/s"),
        "bench_min": ("llama-bench min", "tokens/s"), "bench_max": ("llama-bench max", "tokens/s"),
        "ratio": ("server ÷ llama-bench", "×"), "low": ("ratio low", "×"), "high": ("ratio high", "×"),
        "verdict": ("verdict", ""), "needed": ("samples needed", "")}

    @property
    def server_median(self) -> float:
        return statistics.median(self.server)

    @property
    def server_min(self) -> float:
        return min(self.server)

    @property
    def server_max(self) -> float:
        return max(self.server)

    @property
    def bench_median(self) -> float:
        return statistics.median(self.bench)

    @property
    def bench_min(self) -> float:
        return min(self.bench)

    @property
    def bench_max(self) -> float:
        return max(self.bench)

    @property
    def ratio(self) -> float:
        return statistics.median(self.server) / statistics.median(self.bench)

    @property
    def uncertainty(self) -> float:
        """How far the ratio of the medians may be off: the root of the sum of the squares of each median's spread,
        its samples' (max − min) ÷ median ÷ √(samples)."""
        return math.sqrt(sum(_spread(s) ** 2 / len(s) for s in (self.server, self.bench)))

    @property
    def low(self) -> float:
        return self.ratio - self.uncertainty

    @property
    def high(self) -> float:
        return self.ratio + self.uncertainty

    @property
    def verdict(self) -> str:
        if 1 - BAND - EDGE <= self.low and self.high <= 1 + BAND + EDGE:
            return f"within ±{BAND:.0%}"
        if self.high < 1 - BAND or self.low > 1 + BAND:
            return f"outside ±{BAND:.0%}"
        return "cannot tell yet"

    @property
    def needed(self) -> int | None:
        return self.samples_needed()

    def samples_needed(self) -> int | None:
        """Samples of each clock for the ratio's uncertainty to end inside or outside ±BAND: each median's spread
        falls as 1/√n, so n ≥ (x_server² + x_bench²) ÷ (BAND − |ratio − 1|)², each x a clock's (max − min) ÷ median; None
        where the ratio lies on the band's edge (no number of samples tells)."""
        gap = abs(BAND - abs(self.ratio - 1.0))
        if gap < EDGE:
            return None
        return max(1, math.ceil(sum(_spread(s) ** 2 for s in (self.server, self.bench)) / gap ** 2))


def _spread(samples: tuple[float, ...]) -> float:
    return (max(samples) - min(samples)) / statistics.median(samples)


def third_clocks(sp: Speeds, turns: list[dict] | None, n_predict: int) -> list[ThirdClock] | None:
    """Server-timed prefill and decode against llama-bench's, when llama-bench ran at every turn."""
    if not turns or not all(t.get("available") for t in turns):
        return None
    prefill = tuple(x for t in turns for x in t["prefill_tokens_per_s"])
    decode = tuple(x for t in turns for x in t["decode_tokens_per_s"])
    return [ThirdClock(f"prefill, {sp.prompt_n:,}-token prompt", tuple(sp.prefill), prefill),
            ThirdClock(f"decode, {n_predict} tokens", tuple(sp.decode_short), decode)]


def largest_gap(tokens: Sequence[Any]) -> tuple[float, float] | None:
    """Largest |server probability − e^logprob| over the tokens (each with `probability`, e^logprob, and
    `server_probability`, None where the server did not list it), absolute (as a fraction) and relative; None if no
    pair. The lesson takes only tokens whose e^logprob is above 0."""
    pairs = [(t.server_probability, t.probability) for t in tokens if t.server_probability is not None]
    if not pairs:
        return None
    return max(abs(q - p) for q, p in pairs), max(abs(q - p) / p for q, p in pairs)


def median_min_max(samples: list[float] | tuple[float, ...]) -> tuple[float, float, float]:
    s = Spread.of(samples)
    return s.median, s.min, s.max
