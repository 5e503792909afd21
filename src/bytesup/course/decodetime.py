"""Decode time from terms the run measures: reading the weights, the arithmetic, and a fixed cost.

One decode step of one sequence reads every weight once and does one token's arithmetic. The two
overlap: the cores compute on the rows already read while the next ones stream in, so the step
waits on the slower of the two, as on lesson 7's roofline:

    t₁ = L × f + max(W ÷ B, n × c)      (milliseconds per step)

- W: the model's weight bytes; B: the bandwidth decode reads them at (one value for every model,
  a property of the memory and of the kernels' reads);
- n: its parameters; c: the arithmetic of one token per parameter (one value for every model on one
  engine: the single-token kernels' speed);
- L: its blocks; f: the fixed cost of one block in a step (the graph's operations and the points where
  the threads wait for each other, which grow with the blocks, not with the weights): F = L × f.

Why a maximum and not a sum: on the 2-core course machine the sum misses by 20-60% whatever its
terms. The narrowest widths of the default model (97 and 143 MB) decode in the same ~5.5 ms, so
their step waits on something other than their bytes; the widest ones (269 and 538 MB, and the
986 MB large-q8_0) take time in proportion to their bytes above that floor.

Why a cost per block and not one fixed cost: medium-q8_0 (224 MB, 16 blocks) decodes as fast as the
default model's q8_0 width (143 MB, 30 blocks). With one F for every model, the model left out missed
by up to 37% in two runs that swept both; with F = L × f, by at most 7% in those two, then 8% in two
make runs in a row and 18% in a third, whose narrowest width decoded 25% faster than in the others.
With the models measured in turns (lesson 8's sweep), by at most 4%, then 8%, in two pairs of make runs
in a row and 12% in two from new clones; but by 17% (f16 and f32) in a recording made while the memory
read fast (B fitted at 75 GB/s, f32 at 9.3 ms a step), where one arithmetic cost for every weight type
is too few terms.

The terms are fitted on every measured model's median step time at P = 1, by least squares of the
relative error over a fine logarithmic grid of B and c (f follows in closed form for each pair, never
below 0). Each model is then predicted by the terms fitted on the *others* (leave one out): that
prediction, not the fit, is what the tolerance is checked on. A model cannot be predicted when fewer
than MIN_FIT others remain.

The verdict names what the step waits on beyond its fixed cost, the larger of the two overlapped
terms: memory-bound when reading the weights takes longer than the arithmetic, compute-bound when
the arithmetic takes as long or longer. The fixed cost is paid either way and stays out of the
verdict: on models of one shape it trades against c (only L × f + n × c is measured there), so a
rule that set it against the arithmetic would follow that trade, not the machine. Each
term's share is given as a fraction of the predicted step; the two overlapped terms' shares add to
more than the step they share.

The crossover: W ÷ B = n × c where W ÷ n = B × c, so a model waits on memory when it stores more bytes per
parameter than B × c (the bytes one parameter's arithmetic takes to read), on the arithmetic when it stores as many
or fewer (`crossover`). Reading one byte takes 1 ÷ B; a width crosses the line when its bytes per parameter, B or c
move the product past its own bytes per parameter (`bandwidth_to_cross`, `arithmetic_to_cross`).

A verdict is named only when every set of terms the run fits agrees on it: the terms of all the
models and those of each leave-one-out fit (`verdicts`). Where they disagree, the model is "mixed":
the run's own data cannot tell which of the two terms is the larger, because leaving out one model's
steps turns it over. On the 2-core course machine the product B × c (the bytes per parameter at
which the two terms are equal) came out at 1.17-1.52 in seven runs and 0.82 in an eighth, whose
narrowest width decoded 25% faster than in the others; Q8_0's 1.0625 bytes per parameter lies between,
so in that eighth run its verdict turned over with one model left out, and the rule names it mixed
there rather than memory-bound.

Several sequences in one step (P ≥ 2) are another regime: the weights are read once for all of them,
the arithmetic grows with P, and the server's step with two or more sequences costs more than this
model allows (lesson 7's batching table and the capstone's lines show it). `step_line` draws the line
t(P) = a + b × P through a width's step times at P ≥ 2 for that view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TOLERANCE = 0.15  # the model should predict a model's decode tokens/s within ±15% of measured
MIN_FIT = 3       # three terms need at least three models
MEMORY, COMPUTE, MIXED = "memory-bound", "compute-bound", "mixed"
# The grid the terms are fitted on: B from 1 GB/s to 10 TB/s, c from 0.1 ps to 10 ns per parameter,
# GRID points each, evenly spaced on a log scale (steps of 2.3% in B and 3% in c).
B_RANGE_GBS = (1.0, 1e4)
C_RANGE_PS = (0.1, 1e4)
GRID = 400


@dataclass(frozen=True)
class Width:
    """One model as measured: its weights, and the median step time (ms) at each P measured."""
    name: str
    weight_bytes: float
    n_params: float
    weight_type: str
    step_ms: dict[int, float]
    n_layer: int = 1  # its blocks


@dataclass(frozen=True)
class Line:
    intercept_ms: float
    slope_ms: float  # per sequence in the step


@dataclass(frozen=True)
class Terms:
    gbs: float                       # B, GB/s
    arith_ps: float                  # c, picoseconds per parameter and token
    fixed_ms_per_block: float        # f
    fitted: tuple[str, ...]          # the models the terms come from

    @property
    def arith_gflops(self) -> float:
        """The single-token kernels' rate: 2 FLOPs per parameter in c picoseconds."""
        return 2.0 / self.arith_ps * 1e3


@dataclass(frozen=True)
class Prediction:
    name: str
    memory_ms: float
    arithmetic_ms: float
    fixed_ms: float

    @property
    def step_ms(self) -> float:
        return self.fixed_ms + max(self.memory_ms, self.arithmetic_ms)

    @property
    def tokens_per_s(self) -> float:
        return 1e3 / self.step_ms

    def shares(self) -> dict[str, float]:
        """Each term ÷ the predicted step (the overlapped memory and arithmetic shares add to more than 1)."""
        t = self.step_ms
        return {"memory": self.memory_ms / t, "arithmetic": self.arithmetic_ms / t, "fixed": self.fixed_ms / t}

    @property
    def verdict(self) -> str:
        return waits_on(self.memory_ms, self.arithmetic_ms)


def waits_on(memory_ms: float, arithmetic_ms: float) -> str:
    """The module's rule: the larger of the two overlapped terms names what the step waits on beyond its fixed cost."""
    return MEMORY if memory_ms > arithmetic_ms else COMPUTE


def log_grid(low: float, high: float) -> np.ndarray:
    """GRID points from low to high, evenly spaced on a log scale, each rounded to 12 significant digits: the same
    values on every CPU. numpy's geomspace gives the last bit of some points differently where its vectorised power
    differs (AVX-512 against AVX2), and a fit on those points then differs in its last digits from one machine to
    the next."""
    ratio = math.log(high / low) / (GRID - 1)
    return np.array([float(f"{low * math.exp(k * ratio):.12g}") for k in range(GRID)], dtype=float)


def fit(widths: list[Width]) -> Terms:
    """B, c and f from the models' median step times at P = 1 (see the module). Raises ValueError with
    fewer than MIN_FIT models or a model without a step time at P = 1."""
    missing = [w.name for w in widths if 1 not in w.step_ms]
    if missing:
        raise ValueError(f"no step time at P = 1 for {', '.join(missing)}")
    if len(widths) < MIN_FIT:
        raise ValueError(f"the three terms need at least {MIN_FIT} models; {len(widths)} measured")
    w = np.array([x.weight_bytes for x in widths], dtype=float)
    n = np.array([x.n_params for x in widths], dtype=float)
    blocks = np.array([x.n_layer for x in widths], dtype=float)
    t = np.array([x.step_ms[1] for x in widths], dtype=float)
    gbs, ps = log_grid(*B_RANGE_GBS), log_grid(*C_RANGE_PS)
    core = np.maximum(w[None, None, :] / (gbs[:, None, None] * 1e9),
                      n[None, None, :] * ps[None, :, None] * 1e-12) * 1e3           # ms, [B, c, model]
    # f minimising Σ ((L f + core) ÷ t − 1)² for each (B, c): Σ L (t − core) ÷ t² over Σ L² ÷ t², at least 0.
    per_block = np.clip((blocks * (t - core) / t**2).sum(axis=2) / (blocks**2 / t**2).sum(), 0.0, None)
    err = (((per_block[:, :, None] * blocks + core) / t - 1) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return Terms(float(gbs[i]), float(ps[j]), float(per_block[i, j]), tuple(x.name for x in widths))


def predict(terms: Terms, name: str, weight_bytes: float, n_params: float, n_layer: int) -> Prediction:
    """The predicted step of one sequence, term by term."""
    return Prediction(name, weight_bytes / (terms.gbs * 1e9) * 1e3, n_params * terms.arith_ps * 1e-9,
                      n_layer * terms.fixed_ms_per_block)


def leave_one_out(widths: list[Width]) -> dict[str, Terms | None]:
    """The terms fitted on every model but each one, keyed by the one left out (None when fewer than MIN_FIT others)."""
    out: dict[str, Terms | None] = {}
    for k, w in enumerate(widths):
        others = [x for i, x in enumerate(widths) if i != k]
        out[w.name] = fit(others) if len(others) >= MIN_FIT else None
    return out


def held_out(widths: list[Width], fits: dict[str, Terms | None] | None = None) -> dict[str, Prediction | None]:
    """Each model predicted by the terms fitted on the others (None when fewer than MIN_FIT others); `fits` is
    leave_one_out(widths) when already computed."""
    fits = leave_one_out(widths) if fits is None else fits
    out: dict[str, Prediction | None] = {}
    for w in widths:
        terms = fits[w.name]
        out[w.name] = None if terms is None else predict(terms, w.name, w.weight_bytes, w.n_params, w.n_layer)
    return out


def crossover(terms: Terms) -> float:
    """The bytes per parameter at which reading the weights takes as long as the arithmetic: B × c (GB/s × ps is
    10⁻³ bytes). A model with more bytes per parameter waits on memory, with as many or fewer on the arithmetic."""
    return terms.gbs * terms.arith_ps * 1e-3


def crossover_range(terms: Terms, fits: dict[str, Terms | None]) -> tuple[float, float]:
    """The lowest and highest crossover of the terms of every model and of each leave-one-out fit: a model whose
    bytes per parameter lie between them is named by some fits memory-bound and by others compute-bound (mixed)."""
    every = [crossover(t) for t in (terms, *fits.values()) if t is not None]
    return min(every), max(every)


def bandwidth_to_cross(bytes_per_param: float, terms: Terms) -> float:
    """The bandwidth (GB/s) at which a model of these bytes per parameter reads its weights in its arithmetic's
    time: bytes per parameter ÷ c. Faster memory than that turns a memory-bound model compute-bound."""
    return bytes_per_param / (terms.arith_ps * 1e-3)


def arithmetic_to_cross(bytes_per_param: float, terms: Terms) -> float:
    """The arithmetic per parameter (ps) that takes as long as reading these bytes per parameter: bytes per
    parameter ÷ B. Faster arithmetic than that turns a compute-bound model memory-bound."""
    return bytes_per_param / (terms.gbs * 1e-3)


def agreed(named: list[str]) -> str:
    """One verdict where every fit names the same one, MIXED where they differ."""
    return named[0] if len(set(named)) == 1 else MIXED


def verdicts(widths: list[Width], terms: Terms, fits: dict[str, Terms | None]) -> dict[str, str]:
    """Each model's verdict under the terms of every model (`terms`) and under each leave-one-out fit (`fits`):
    named where they all agree, MIXED where they do not (see the module)."""
    every = [terms, *(t for t in fits.values() if t is not None)]
    return {w.name: agreed([predict(t, w.name, w.weight_bytes, w.n_params, w.n_layer).verdict for t in every])
            for w in widths}


def error(prediction: Prediction, measured_step_ms: float) -> float:
    """predicted ÷ measured tokens/s − 1, against a measured step of one sequence."""
    return prediction.tokens_per_s / (1e3 / measured_step_ms) - 1


def least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line y = intercept + slope × x; needs two distinct x."""
    n = len(xs)
    if n != len(ys) or len(set(xs)) < 2:
        raise ValueError("a line needs at least two distinct x values")
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def step_line(width: Width, levels: tuple[int, ...]) -> Line:
    """t(P) = a + b × P through the width's median step times at `levels`."""
    missing = [p for p in levels if p not in width.step_ms]
    if missing:
        raise ValueError(f"{width.name}: no step time at P = {', '.join(map(str, missing))}")
    a, b = least_squares([float(p) for p in levels], [width.step_ms[p] for p in levels])
    return Line(a, b)


def batch_prediction(step_ms: dict[int, float], fit_levels: tuple[int, ...] = (2, 4),
                     at: int = 8) -> tuple[Line, float] | None:
    """The batch view's own prediction: the line through the steps at `fit_levels` and the step it predicts at
    P = `at` (ms); None when a level is missing."""
    if any(p not in step_ms for p in fit_levels):
        return None
    a, b = least_squares([float(p) for p in fit_levels], [step_ms[p] for p in fit_levels])
    return Line(a, b), a + b * at


def published_terms(weight_bytes: float, bandwidth_gbs: float, decode_tokens_per_s: float,
                    prefill_tokens_per_s: float, n_params: float) -> dict[str, float]:
    """The same terms from a published run's figures (no step times of several models): the weights read at
    the published bandwidth, the arithmetic at prefill's rate (matrix-matrix kernels: a lower bound for
    decode's), and what remains of the measured decode time beyond the larger of the two (the fixed cost).
    The same rule then: c = the arithmetic ÷ n, the crossover B × c in bytes per parameter, and the model's own
    bytes per parameter W ÷ n beside it (a lower bound on c makes the crossover a lower bound too)."""
    measured = 1e3 / decode_tokens_per_s
    memory = weight_bytes / (bandwidth_gbs * 1e9) * 1e3
    arithmetic = 1e3 / prefill_tokens_per_s
    rest = measured - max(memory, arithmetic)
    arith_ps = arithmetic / n_params * 1e9
    return {"measured_ms": measured, "memory_ms": memory, "arithmetic_ms": arithmetic, "rest_ms": rest,
            "memory_share": memory / measured, "arithmetic_share": arithmetic / measured, "rest_share": rest / measured,
            "arith_ps": arith_ps, "crossover": bandwidth_gbs * arith_ps * 1e-3, "bytes_per_param": weight_bytes / n_params}
