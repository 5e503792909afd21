"""Decode time at context depth from measured terms: the step with no context, and a cost per earlier position.

At depth d each decoded token's query attends to the d earlier positions in every layer: it reads each one's
key and value from the KV cache and does attention's work over it (the q·k dot product, the softmax, and its
share of the weighted sum of V). Nothing else in the step grows with the depth (the weights read, the other
arithmetic and the fixed costs: decodetime's terms), so the step is a line in d:

    t(d) = t(0) + d × s      (milliseconds per decoded token)

- t(0): the step with an empty context;
- s: the milliseconds one more earlier position adds. It splits into the KV read, one position's KV bytes
  at the run's bandwidth (KV bytes per token ÷ B), and the rest, s − KV read: attention's work per
  position, 4 × layers × heads × head width FLOPs (2 per element for q·k, 2 for V's weighted sum, in
  every query head of every layer), at the rate that rest implies.

Why not lesson 6's bytes model, bandwidth ÷ (weight bytes + KV bytes per token × d), alone: it charges each
earlier position its KV bytes at the bandwidth the weights are read at, so its slope is the KV read only.
On the DGX Spark's published figures (lesson 4: 33.2 tokens/s short, 29.6 after a 1,921-token prompt, the
short prompt taken as depth 0) that is the whole slope. On the 2-core course CPU the KV read is an eighth
to a fifth of s and attention's arithmetic the rest, and the bytes model falls to 0.65 of measured at
depth 1,904; the line, with s measured, does not assume what a position costs.

The line is fitted by least squares through the median ms per token at the depths up to `fit_until`
(half the context by default: on the default run 0, 256, 512 and 1,024) and predicts the deeper ones,
which it was not fitted on; those held-out depths are what TOLERANCE is checked on, as decodetime's
error: predicted ÷ measured tokens/s − 1. On the two committed 2-core runs the held-out depths 1,536 and
1,904 came at −3% and −6% (2026-12-01) and at −7% and −19% (2026-11-30, where the median step at depth
1,904 was shorter than at 1,536, 25.7 against 26.5 ms, on a host loaded 2.06 on its 2 cores: no line
through the shallower depths predicts that).

The knee. Every decoded token reads the K and V of all d earlier positions, KV bytes per position × d in all,
and the next token reads them again. While they fit in the last-level cache the next read finds them there;
beyond d* = cache bytes ÷ KV bytes per position they no longer fit, and each position may cost more (a read from
memory instead of the cache). So the step is two lines meeting at d*:

    t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*)

with d* computed from the cache size the run read and the model's KV bytes, never fitted; t(0) and s₁ are fitted
on the depths up to d*, s₂ on the fitted depths beyond it (least squares of t(d) − t(0) − s₁ × d* against d − d*).
The weights are not counted against the cache: on the course's models they are larger than the cache and stream
through it on every token, so either they evict the KV cache at every size (no knee at all, which the run then
shows as one line) or the cache keeps the more recently reused lines, the KV, and the knee is where the KV alone
fills it. Where d* lies beyond the deepest depth the model is the line. Where the fitted depths stop short of the
knee but two or more depths lie beyond it, the first of those is fitted too, so that s₂ is known and the deeper
ones are still held out. A depth beyond the knee with no fitted depth beyond it has no prediction: the run cannot
tell what a position costs there.

Whether the knee shows (`choose`). d* says where the cost per position may change, not that it does: on the 2-core
course machine (32 MiB of last-level cache, d* = 1,456 for SmolLM2) a sweep of twelve depths from 0 to 2,016 came
no slower per position past d* than before it, and its single samples scattered by ±10%. Bent there anyway, s₂
came from one noisy depth, once −2.07 µs per position, and the held-out 1,904 missed by +30%; the one line through
every fitted depth missed it by +14%. So the knee is used only where the run shows it, judged on the fitted depths
alone: every fitted depth past d* lies above the line through the depths below d*, predicted ÷ measured tokens/s − 1
more than that prediction's spread (below), and s₂ comes out above 0. Otherwise the model is one line, t(0) + d × s
by least squares through every fitted depth, below and past d*. A knee that is used thus always has s₂ > s₁ and
s₂ > 0.

How far a prediction can be trusted: the fit is linear in the fitted medians, so moving one fitted depth's median
by its samples' interquartile range moves every prediction by a fixed amount; the root of the sum of their squares
over the fitted depths (each depth's samples scatter independently of the others'), ÷ the predicted step, plus the
held-out depth's own interquartile range ÷ its median, is the prediction's spread. One depth just past the knee
fixes s₂ over a short lever (80 positions at d* = 1,456 and depth 1,536) and multiplies its scatter into the deeper
prediction; a spread wider than TOLERANCE cannot tell a model that holds from one that does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from bytesup.course import robust
from bytesup.course.decodetime import least_squares
from bytesup.course.formulas import GB

TOLERANCE = 0.15  # a held-out depth should be predicted within ±15% of its measured decode tokens/s
FITTED, HELD_OUT = "fitted", "held out"
KV_READ, ATTENTION_WORK = "the KV read", "attention's work"


@dataclass(frozen=True)
class Line:
    """t(d) = t0_ms + d × slope_ms, and the depths it was fitted on; with a knee, t0_ms + slope_ms × min(d, knee) +
    slope2_ms × max(0, d − knee)."""
    t0_ms: float
    slope_ms: float  # s (s₁ with a knee): per earlier position
    fit_until: int
    fitted: tuple[int, ...]
    knee: float | None = None        # d*, where the cost per position changes; None: no knee among the run's depths
    slope2_ms: float | None = None   # s₂, per position beyond d*; None: no knee, or no depth beyond it fitted

    def ms_at(self, depth: float) -> float | None:
        """The predicted step; None beyond a knee with no fitted depth beyond it (nothing says what s₂ is)."""
        if self.knee is None or depth <= self.knee:
            return self.t0_ms + depth * self.slope_ms
        if self.slope2_ms is None:
            return None
        return self.t0_ms + self.knee * self.slope_ms + (depth - self.knee) * self.slope2_ms

    @property
    def below(self) -> tuple[int, ...]:
        """The fitted depths t(0) and s₁ come from (all of them without a knee)."""
        return tuple(d for d in self.fitted if self.knee is None or d <= self.knee)

    @property
    def beyond(self) -> tuple[int, ...]:
        """The fitted depths s₂ comes from."""
        return tuple(d for d in self.fitted if self.knee is not None and d > self.knee)


@dataclass(frozen=True)
class DepthPrediction:
    """One depth: its measured median ms per token beside the line's, and whether the line was fitted on it."""
    depth: int
    measured_ms: float
    predicted_ms: float | None  # None: beyond a knee with no fitted depth beyond it
    fitted: bool
    spread: float | None = None  # the prediction's spread (module docstring) as a fraction; None: not computed
    # The columns of lesson 6's table of it, in order (name, unit; the error as a fraction, shown in %).
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "depth": ("depth", "tokens"), "measured_ms": ("measured median", "ms/token"),
        "predicted_ms": ("predicted", "ms/token"), "predicted_tokens_per_s": ("predicted", "tokens/s"),
        "measured_tokens_per_s": ("measured", "tokens/s"), "error": ("predicted ÷ measured − 1", "%"),
        "spread": ("spread of the prediction", "%"), "role": ("fitted or held out", "")}

    @property
    def predicted_tokens_per_s(self) -> float | None:
        """1000 ÷ the predicted step; None where there is no prediction, or the line gives a step of 0 ms or less (a
        line through scattered steps can fall below 0), which predicts no speed."""
        return 1e3 / self.predicted_ms if self.predicted_ms is not None and self.predicted_ms > 0 else None

    @property
    def measured_tokens_per_s(self) -> float:
        return 1e3 / self.measured_ms

    @property
    def error(self) -> float | None:
        """predicted ÷ measured tokens/s − 1 (None without a predicted speed)."""
        predicted = self.predicted_tokens_per_s
        return None if predicted is None else predicted / self.measured_tokens_per_s - 1

    @property
    def role(self) -> str:
        return FITTED if self.fitted else HELD_OUT

    @property
    def within(self) -> bool:
        return self.error is not None and abs(self.error) <= TOLERANCE

    @property
    def can_tell(self) -> bool:
        """Whether the prediction is sharp enough to judge: there is one, and its spread is within TOLERANCE."""
        return self.predicted_ms is not None and (self.spread is None or self.spread <= TOLERANCE)


def default_fit_until(n_ctx: int) -> int:
    """Half the context: the depths up to it are fitted, the deeper ones predicted."""
    return n_ctx // 2


def fit_line(depths: list[int], ms_per_token: list[float], fit_until: int) -> Line:
    """The least-squares line through the (depth, ms per token) points at depths ≤ fit_until.
    Raises ValueError with fewer than two distinct depths there."""
    if len(depths) != len(ms_per_token):
        raise ValueError(f"{len(depths)} depths but {len(ms_per_token)} times")
    points = [(d, t) for d, t in zip(depths, ms_per_token, strict=True) if d <= fit_until]
    if len({d for d, _ in points}) < 2:
        raise ValueError(f"a line needs at least two distinct depths up to {fit_until:,}; "
                         f"{', '.join(f'{d:,}' for d, _ in points) or 'none'} measured there")
    t0, slope = least_squares([float(d) for d, _ in points], [t for _, t in points])
    return Line(t0, slope, fit_until, tuple(d for d, _ in points))


def knee_depth(cache_bytes: float | None, kv_bytes_per_position: float | None) -> float | None:
    """d* = cache bytes ÷ KV bytes per position: the depth whose K and V fill the cache; None where either is
    unknown or not positive."""
    if not cache_bytes or not kv_bytes_per_position or cache_bytes <= 0 or kv_bytes_per_position <= 0:
        return None
    return cache_bytes / kv_bytes_per_position


def fit_knee(depths: list[int], ms_per_token: list[float], fit_until: int, knee: float | None) -> Line:
    """t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*) with d* = `knee` (module docstring): t(0) and s₁ by least
    squares through the fitted depths up to d*, s₂ through the fitted depths beyond it. The fitted depths are those up
    to `fit_until`, and the first depth beyond d* as well where none beyond it is fitted and two or more lie beyond.
    With no knee, or none below the deepest depth, this is `fit_line`. Raises ValueError with fewer than two
    distinct fitted depths up to d*."""
    if knee is None or not any(d > knee for d in depths):
        return fit_line(depths, ms_per_token, fit_until)
    if len(depths) != len(ms_per_token):
        raise ValueError(f"{len(depths)} depths but {len(ms_per_token)} times")
    beyond = sorted({d for d in depths if d > knee})
    until = beyond[0] if len(beyond) >= 2 and not any(d <= fit_until for d in beyond) else fit_until
    points = [(d, t) for d, t in zip(depths, ms_per_token, strict=True) if d <= until]
    below = [(d, t) for d, t in points if d <= knee]
    if len({d for d, _ in below}) < 2:
        raise ValueError(f"a line up to the knee at depth {knee:,.0f} needs at least two distinct depths there; "
                         f"{', '.join(f'{d:,}' for d, _ in below) or 'none'} measured")
    t0, s1 = least_squares([float(d) for d, _ in below], [t for _, t in below])
    over = [(d - knee, t - t0 - s1 * knee) for d, t in points if d > knee]
    s2 = sum(x * y for x, y in over) / sum(x * x for x, _ in over) if over else None
    return Line(t0, s1, until, tuple(d for d, _ in points), knee, s2)


@dataclass(frozen=True)
class KneeTest:
    """Whether the run shows the knee d*: the line through the fitted depths below d*, each fitted depth past d*
    predicted by it (its error and spread: `DepthPrediction`), and s₂ of the knee model on the same depths."""
    knee: float
    below: Line
    past: tuple[DepthPrediction, ...]
    slope2_ms: float

    @property
    def above(self) -> bool:
        """Every fitted depth past d* came slower than the line below d* gives it by more than that prediction's spread."""
        return all(p.error is not None and p.error > (p.spread or 0.0) for p in self.past)

    @property
    def shown(self) -> bool:
        """The knee is used: the depths past d* lie above the line below it (`above`) and s₂ is a cost (above 0)."""
        return bool(self.past) and self.above and self.slope2_ms > 0


def choose(depths: list[int], ms_per_token: list[float], fit_until: int, knee: float | None,
           iqr_ms: list[float]) -> tuple[Line, KneeTest | None]:
    """The model of the run (module docstring, "Whether the knee shows"): the knee model where d* lies among the depths
    and the fitted depths past it show it, else the one line through every fitted depth; and the test that chose
    (None where there is nothing to test: no knee among the depths, or no fitted depth past it). Raises ValueError as
    `fit_knee` does."""
    bent = fit_knee(depths, ms_per_token, fit_until, knee)
    if bent.knee is None or bent.slope2_ms is None:
        return bent, None
    below = fit_line(depths, ms_per_token, math.floor(bent.knee))
    past = tuple(p for p in predictions(below, depths, ms_per_token, iqr_ms) if p.depth in bent.beyond)
    test = KneeTest(bent.knee, below, past, bent.slope2_ms)
    return (bent if test.shown else fit_line(depths, ms_per_token, bent.fit_until)), test


def predictions(line: Line, depths: list[int], ms_per_token: list[float],
                iqr_ms: list[float] | None = None) -> list[DepthPrediction]:
    """Every depth predicted by the line, each marked fitted or held out; with each depth's interquartile range
    (ms), each prediction's spread (module docstring)."""
    spreads = None if iqr_ms is None else prediction_spreads(line, depths, ms_per_token, iqr_ms)
    return [DepthPrediction(d, t, line.ms_at(d), d <= line.fit_until, None if spreads is None else spreads[i])
            for i, (d, t) in enumerate(zip(depths, ms_per_token, strict=True))]


def prediction_spreads(line: Line, depths: list[int], ms_per_token: list[float],
                       iqr_ms: list[float]) -> list[float | None]:
    """Per held-out depth: √(Σ over the fitted depths of how far the prediction moves when that depth's median moves
    by its interquartile range, squared) (the fit is linear in the medians, so refitting with one median moved gives
    each move exactly), ÷ the predicted step, plus the depth's own interquartile range ÷ its median. None for a
    fitted depth, and where there is no prediction or it is 0 ms or less."""
    squares = [0.0] * len(depths)
    for i, d in enumerate(depths):
        if d > line.fit_until or iqr_ms[i] == 0:
            continue
        moved = refit(line, depths, [t + (iqr_ms[i] if j == i else 0.0) for j, t in enumerate(ms_per_token)])
        for k, e in enumerate(depths):
            a, b = line.ms_at(e), moved.ms_at(e)
            if a is not None and b is not None:
                squares[k] += (b - a) ** 2
    out: list[float | None] = []
    for k, e in enumerate(depths):
        predicted = line.ms_at(e)
        out.append(None if e <= line.fit_until or predicted is None or predicted <= 0 else
                   math.sqrt(squares[k]) / predicted + iqr_ms[k] / ms_per_token[k])
    return out


def refit(line: Line, depths: list[int], ms_per_token: list[float]) -> Line:
    """The same model fitted again, on the same depths, to other times."""
    if line.knee is None:
        return fit_line(depths, ms_per_token, line.fit_until)
    return fit_knee(depths, ms_per_token, line.fit_until, line.knee)


def interquartile_ms(samples: list[float]) -> float:
    """Q3 − Q1 of a depth's ms per token, outliers left out (bytesup.course.robust)."""
    r = robust.judge(samples)
    return r.q3 - r.q1


def held_out(points: list[DepthPrediction]) -> list[DepthPrediction]:
    return [p for p in points if not p.fitted]


def worst(points: list[DepthPrediction]) -> DepthPrediction | None:
    """The predicted point furthest from measured: one without a predicted speed first; None for no points with a
    prediction."""
    return max((p for p in points if p.predicted_ms is not None),
               key=lambda p: float("inf") if p.error is None else abs(p.error), default=None)


def attention_flops_per_position(n_layer: int, n_head: int, head_dim: int) -> int:
    """FLOPs one more earlier position costs a decoded token: q·k (2 per element) and its part of V's weighted
    sum (2 per element), in every query head of every layer."""
    return 4 * n_layer * n_head * head_dim


@dataclass(frozen=True)
class Split:
    """The slope s split into reading one position's K and V at a bandwidth, and the rest."""
    slope_ms: float
    kv_bytes_per_token: float
    bandwidth_gbs: float
    flops_per_position: int

    @property
    def kv_read_ms(self) -> float:
        return self.kv_bytes_per_token / (self.bandwidth_gbs * GB) * 1e3

    @property
    def rest_ms(self) -> float:
        return self.slope_ms - self.kv_read_ms

    @property
    def kv_share(self) -> float:
        return self.kv_read_ms / self.slope_ms

    @property
    def rest_gflops(self) -> float | None:
        """The rate attention's work per position runs at if the rest is all of it; None when the KV read
        alone takes the whole slope or more."""
        return self.flops_per_position / (self.rest_ms * 1e-3) / GB if self.rest_ms > 0 else None

    @property
    def mostly(self) -> str:
        """The larger part of the slope: the KV read, or attention's work (the rest)."""
        return KV_READ if self.kv_read_ms >= self.rest_ms else ATTENTION_WORK


def published_slope_ms(short_tokens_per_s: float, long_tokens_per_s: float, positions: int) -> float:
    """s from two published decode speeds: the step's growth from a short prompt (taken as depth 0) to one of
    `positions` tokens, per position."""
    return (1e3 / long_tokens_per_s - 1e3 / short_tokens_per_s) / positions
