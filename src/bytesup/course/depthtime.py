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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bytesup.course.decodetime import least_squares
from bytesup.course.formulas import GB

TOLERANCE = 0.15  # a held-out depth should be predicted within ±15% of its measured decode tokens/s
FITTED, HELD_OUT = "fitted", "held out"
KV_READ, ATTENTION_WORK = "the KV read", "attention's work"


@dataclass(frozen=True)
class Line:
    """t(d) = t0_ms + d × slope_ms, and the depths it was fitted on."""
    t0_ms: float
    slope_ms: float  # s: per earlier position
    fit_until: int
    fitted: tuple[int, ...]

    def ms_at(self, depth: int) -> float:
        return self.t0_ms + depth * self.slope_ms


@dataclass(frozen=True)
class DepthPrediction:
    """One depth: its measured median ms per token beside the line's, and whether the line was fitted on it."""
    depth: int
    measured_ms: float
    predicted_ms: float
    fitted: bool
    # The columns of lesson 6's table of it, in order (name, unit; the error as a fraction, shown in %).
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "depth": ("depth", "tokens"), "measured_ms": ("measured median", "ms/token"),
        "predicted_ms": ("predicted", "ms/token"), "predicted_tokens_per_s": ("predicted", "tokens/s"),
        "measured_tokens_per_s": ("measured", "tokens/s"), "error": ("predicted ÷ measured − 1", "%"),
        "role": ("fitted or held out", "")}

    @property
    def predicted_tokens_per_s(self) -> float | None:
        """1000 ÷ the predicted step; None where the line gives a step of 0 ms or less (a line through scattered
        steps can fall below 0), which predicts no speed."""
        return 1e3 / self.predicted_ms if self.predicted_ms > 0 else None

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


def predictions(line: Line, depths: list[int], ms_per_token: list[float]) -> list[DepthPrediction]:
    """Every depth predicted by the line, each marked fitted or held out."""
    return [DepthPrediction(d, t, line.ms_at(d), d <= line.fit_until)
            for d, t in zip(depths, ms_per_token, strict=True)]


def held_out(points: list[DepthPrediction]) -> list[DepthPrediction]:
    return [p for p in points if not p.fitted]


def worst(points: list[DepthPrediction]) -> DepthPrediction | None:
    """The point furthest from measured: one without a predicted speed first; None for no points."""
    return max(points, key=lambda p: float("inf") if p.error is None else abs(p.error), default=None)


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
