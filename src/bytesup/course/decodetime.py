"""Decode time from terms the run measures: reading the weights, the arithmetic, and a fixed cost.

One decode step of one sequence reads every weight once and does one token's arithmetic. The two
overlap: the cores compute on the rows already read while the next ones stream in, so the step
waits on the slower of the two, as on lesson 7's roofline:

    t₁ = L × (f + g × W ÷ params) + max(W ÷ B, params × c)      (milliseconds per step)

- W: the model's weight bytes; B: the bandwidth decode reads them at (one value for every model,
  a property of the memory and of the kernels' reads);
- n: its parameters; c: the arithmetic of one token per parameter, one value for each weight type (the
  single-token kernels of that type: they unpack and multiply its blocks in their own way);
- L: its blocks; f: the fixed cost of one block in a step (the graph's operations and the points where
  the threads wait for each other, which grow with the blocks, not with the weights); g: how much more a
  block costs for each byte a parameter takes (W ÷ params): F = L × (f + g × W ÷ params).

Why a maximum and not a sum: on the 2-core course machine the sum misses by 20-60% whatever its
terms. The narrowest widths of the default model (97 and 143 MB) decode in the same ~5.5 ms, so
their step waits on something other than their bytes; the widest ones (269 and 538 MB, and the
986 MB large-q8_0) take time in proportion to their bytes above that floor.

Why a cost per block and not one fixed cost: medium-q8_0 (224 MB, 16 blocks) decodes as fast as the
default model's q8_0 width (143 MB, 30 blocks). With one F for every model, the model left out missed
by up to 37% in two runs that swept both; with F = L × f, by at most 7% in those two, then 8% in two
make runs in a row and 18% in a third, whose narrowest width decoded 25% faster than in the others.

Why a block's fixed cost grows with the bytes per parameter (g): with f alone, the models left out missed in pairs
of one weight type and opposite sign, in four make runs on the 2-core course machine (nine models each): the default
model's q4_1 width by -6.9% to -11.3% and medium-q4_1 by +9.6% to +16.3%, while the default model's f16 and f32
widths missed by +6% to +11% and medium's by -7% to -11%. Solved pair by pair (the default model, 30 blocks, against
medium, 16), each weight type asked for its own f: about 0.05 ms per block for Q4_1, 0.07 for Q8_0, 0.14 for F16 and
0.21 for F32, rising with the bytes a parameter takes. With g beside f the worst model left out missed by 9.3% to
11.4% in the same four runs. Why a block should cost more for wider weights is not measured here; one reading is
that the threads wait at each block's end for the last rows, whose time grows with their bytes. Counting the
default model's Q8_0 embedding in the q4_1 file as Q8_0 arithmetic, and the medium models' untied embedding
(decode reads one row of it) out of n, was tried and made medium-q4_1's miss larger (+26.7% and +19.5%), so n stays
every parameter and the weight type stays the file's.

Why one c per weight type and not one for every model: each type has kernels of its own. On the 2-core
course machine F16's single-token kernels cost about 195 ps per parameter, Q8_0's about 81 and Q4_1's
about 64, while F32 waits on reading its weights. One c cannot fit them: with it, the f16 width missed by
+75% in every run of the six default models. With c taken per type from one model and applied to the
other model of the same type (B and f shared), nine models predicted F16 within -3.2/+2.9% and Q8_0
within +3.8/-2.9%. So every weight type of the default model has a second model among the models swept
(medium-q4_1, medium-f16, medium-f32 beside medium-q8_0 and large-q8_0).

The terms are fitted on every measured model's median step time at P = 1, by least squares of the
relative error: for each B of a fine logarithmic grid, f and g in closed form (never below 0; g stays 0 unless it
lowers the error) and each weight type's c (the errors separate by type once f is fixed: a parabola between the breakpoints of its models,
`type_cost`) in turns, with a joint step where each model stays on its side, until neither moves; then
the least error is sought between the grid points either side of the best one. Where several
fit equally well the smaller c is taken, then the smaller B: the arithmetic no larger than the steps
demand. A type whose models all wait on reading their weights shows no arithmetic of its own: its c is
0, and only the most it could be is known (`hidden_below`). B and that type's c trade exactly where its
models store the same bytes per parameter (all-F32 models store 4): the rule then reads their steps as
the memory's.

Each model is then predicted by the terms fitted on the *others* (leave one out): that prediction, not
the fit, is what the tolerance is checked on. A model cannot be predicted when it is alone in its weight
type (its c would come from its own step alone: `not_held_out`), or fewer than MIN_FIT others remain.

The verdict names what the step waits on beyond its fixed cost, the larger of the two overlapped
terms: memory-bound when reading the weights takes longer than the arithmetic, compute-bound when
the arithmetic takes as long or longer. The fixed cost is paid either way and stays out of the
verdict: on models of one shape it trades against c (only L × f + params × c is measured there), so a
rule that set it against the arithmetic would follow that trade, not the machine. Each
term's share is given as a fraction of the predicted step; the two overlapped terms' shares add to
more than the step they share.

The crossover, per weight type: W ÷ B = params × c where W ÷ params = B × c, so a model of type t waits on memory when it
stores more bytes per parameter than B × c_t (the bytes its type's arithmetic per parameter takes to read), on the
arithmetic when it stores as many or fewer (`crossover`). Reading one byte takes 1 ÷ B; a width crosses the line
when its bytes per parameter, B or its type's c move the product past its own bytes per parameter
(`bandwidth_to_cross`, `arithmetic_to_cross`).

A verdict is named only where the run can tell the two terms apart (`verdicts`): every set of terms the run fits
agrees on it (the terms of all the models and those of each leave-one-out fit), the model's bytes per parameter lie
further from its type's crossover than MARGIN standard errors of it (the fits' uncertainty), and its two terms differ
by more than its own steps scatter (`too_close`: the samples' uncertainty, the spread of its step samples times its
median step, in ms). Elsewhere the model is "mixed": its read and its arithmetic take times the run cannot tell apart.
The two uncertainties are apart: leaving one model out cannot move the c of a model alone in its weight type (its c
comes from its own step in every fit), so only its own spread says how well that c is known. The standard error u of a crossover is the
jackknife's over the leave-one-out fits (`crossover_u`): u² = (m − 1) ÷ m × Σ (κᵢ − κ̄)² over their m crossovers, the
spread of a fitted value that leaving out each model in turn shows, scaled to the whole run; the band a model is mixed
in (`mixed_band`) is MARGIN × u either side of the crossover, widened to every fit's crossover where those lie further
out. With one c for every model, the product B × c came out at 1.17-1.52 bytes per parameter in seven runs on the
2-core course machine and 0.82 in an eighth, so Q8_0's 1.0625 bytes per parameter turned over with one model left
out there; with c per type each type's crossover stands apart. In a make run of nine models on the 2-core machine
F16's crossover came out at 2.15 bytes per parameter with u = 0.12, and its two models, at 2.0, were named
compute-bound by every fit while their arithmetic took 7.4% longer than their read: within 2u, so mixed.

Several sequences in one step (P ≥ 2) are another regime: the weights are read once for all of them,
the arithmetic grows with P, and the server's step with two or more sequences costs more than this
model allows (lesson 7's batching table and the capstone's lines show it). `step_line` draws the line
step(P) = t₀ + Δt × P through a width's step times at P ≥ 2 for that view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TOLERANCE = 0.15  # the model should predict a model's decode tokens/s within ±15% of measured
# Enough models for the terms: B, f and the c of one weight type are three terms, so at least three models (the number
# of terms + 0); each further weight type adds a c of its own and brings the model that fits it. g needs models that
# differ in their blocks and their bytes per parameter; where they do not, it is 0 (it lowers no error).
MIN_FIT = 3
MEMORY, COMPUTE, MIXED = "memory-bound", "compute-bound", "mixed"
# A model within MARGIN standard errors of its type's crossover is mixed: two, as the sweep's line takes a point within
# two standard errors of its bandwidth (bytesup.course.memory_bound).
MARGIN = 2.0
ALONE = "alone in its weight type"  # why a model is not predicted by the others: no other model fits its c
# The grid B is fitted on: from 1 GB/s to 10 TB/s, GRID points evenly spaced on a log scale (steps of 2.3%).
B_RANGE_GBS = (1.0, 1e4)
GRID = 400
ROUNDS = 200  # the most rounds of f, then each weight type's c, at each B (they settle in far fewer)
# Two errors within SAME of each other (a fraction, plus NEAR) are equal: the smaller c, then the smaller B, is taken.
SAME, NEAR = 1e-9, 1e-12
# Then the least error is sought between the grid points either side of the grid's best, the lowest B of those that
# fit as well: ZOOMS grids of ZOOM_POINTS steps each, one inside the other (steps of 10⁻⁸ of B at the last).
ZOOMS, ZOOM_POINTS = 4, 64
# g is fitted where it lowers the error Σ (predicted ÷ measured − 1)² by more than GAIN: a hundredth of a percent on
# one model's step. Less than that is the grid's resolution, not the steps' (steps made exactly by terms without g
# are fitted to within 10⁻¹¹ with or without it); g lowered it by 0.003 to 0.010 in four make runs of nine models.
GAIN = 1e-8


@dataclass(frozen=True)
class Width:
    """One model as measured: its weights, and the median step time (ms) at each P measured."""
    name: str
    weight_bytes: float
    n_params: float
    weight_type: str
    step_ms: dict[int, float]
    n_layer: int = 1  # its blocks
    spread: float = 0.0  # the robust spread of its step samples at P = 1 (interquartile range ÷ median)


@dataclass(frozen=True)
class Line:
    intercept_ms: float
    slope_ms: float  # per sequence in the step


@dataclass(frozen=True)
class Terms:
    """B, f, g, and c per weight type: (the type as the GGUF names it, ps per parameter and token), in the order the
    types first appear among the models fitted. A c of 0 says that every model of its type waited on reading its
    weights: its arithmetic was hidden, never measured (`hidden`)."""
    gbs: float                            # B, GB/s
    arith: tuple[tuple[str, float], ...]  # c per weight type, picoseconds per parameter and token
    fixed_ms_per_block: float             # f
    fitted: tuple[str, ...]               # the models the terms come from
    fixed_ms_per_bpp: float = 0.0         # g: ms more per block for each byte per parameter

    def per_block_ms(self, bytes_per_param: float) -> float:
        """The fixed cost of one block of a model storing these bytes per parameter: f + g × W ÷ params."""
        return self.fixed_ms_per_block + self.fixed_ms_per_bpp * bytes_per_param

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.arith)

    def c(self, weight_type: str) -> float:
        """The arithmetic per parameter (ps) of one weight type; KeyError for a type no fitted model has."""
        for kind, ps in self.arith:
            if kind == weight_type:
                return ps
        raise KeyError(f"no arithmetic cost c for {weight_type}: the terms were fitted on {', '.join(self.types)}")

    def hidden(self, weight_type: str) -> bool:
        """Whether every model of this type waited on its weights, so its arithmetic was never seen (c = 0)."""
        return self.c(weight_type) == 0.0

    def arith_gflops(self, weight_type: str) -> float:
        """The single-token kernels' rate for one weight type: 2 FLOPs per parameter in c picoseconds."""
        c = self.c(weight_type)
        return 2.0 / c * 1e3 if c > 0 else math.inf


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


def weight_types(widths: list[Width]) -> tuple[str, ...]:
    """The weight types of the models, in the order they first appear."""
    return tuple(dict.fromkeys(w.weight_type for w in widths))


def first_within(loss: np.ndarray) -> np.ndarray:
    """Along the last axis, the first index whose loss is within SAME of the least (the tie rules)."""
    return np.argmax(loss <= loss.min(axis=-1, keepdims=True) * (1 + SAME) + NEAR, axis=-1)


def type_cost(fixed: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The c (ps) of one weight type at each B, with the fixed costs held: the least of Σ (F + max(p, q c) − 1)² over
    its models (F = the fixed cost ÷ t, p = the read ÷ t, both [B, model]; q = params ÷ t per ps; its models in order of
    W ÷ params). Between two of the models' breakpoints p ÷ q the sum is a parabola in c, least at the models that wait on
    the arithmetic: c = Σ q (1 − F) ÷ Σ q², kept within its segment; below the first breakpoint it does not depend on
    c, and c = 0 there (no arithmetic beyond what the steps show)."""
    breaks = p / q                                    # [B, model]: the c at which each model turns compute-bound
    rest = 1 - fixed                                  # [B, model]
    candidates = [np.zeros(len(p))]
    for k in range(1, len(q) + 1):
        inner = (q[:k] * rest[:, :k]).sum(axis=1) / (q[:k] ** 2).sum()
        upper = breaks[:, k] if k < len(q) else np.full(len(p), np.inf)
        candidates.append(np.clip(inner, breaks[:, k - 1], upper))
    cs = np.stack(candidates, axis=1)                 # [B, segment]
    pred = fixed[:, None, :] + np.maximum(p[:, None, :], q[None, None, :] * cs[:, :, None])
    loss = ((pred - 1) ** 2).sum(axis=2)
    return np.take_along_axis(cs, first_within(loss)[:, None], axis=1)[:, 0]


def nonneg_pair(x1: np.ndarray, x2: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(θ₁, θ₂) ≥ 0 making Σ (x1 θ₁ + x2 θ₂ − y)² least along the last axis of each row ([B, model] each): θ₁ alone
    (θ₂ = 0), unless both together or θ₂ alone err less by more than SAME (θ₂ is f's partner g: 0 unless it helps)."""
    s11, s22, s12 = (x1 * x1).sum(axis=1), (x2 * x2).sum(axis=1), (x1 * x2).sum(axis=1)
    s1y, s2y = (x1 * y).sum(axis=1), (x2 * y).sum(axis=1)

    def loss(t1: np.ndarray, t2: np.ndarray) -> np.ndarray:
        return ((x1 * t1[:, None] + x2 * t2[:, None] - y) ** 2).sum(axis=1)

    t1 = np.clip(s1y / np.where(s11 > 0, s11, 1.0), 0.0, None)
    t2 = np.zeros_like(t1)
    best = loss(t1, t2)
    det = s11 * s22 - s12 * s12
    ok = det > 1e-12 * s11 * s22
    safe = np.where(ok, det, 1.0)
    both1, both2 = (s1y * s22 - s2y * s12) / safe, (s11 * s2y - s12 * s1y) / safe
    alone2 = np.clip(s2y / np.where(s22 > 0, s22, 1.0), 0.0, None)
    for c1, c2, allowed in ((both1, both2, ok & (both1 >= 0) & (both2 >= 0)), (np.zeros_like(t1), alone2, s22 > 0)):
        tried = loss(c1, c2)
        better = allowed & (tried < best * (1 - SAME) - NEAR)
        t1, t2, best = np.where(better, c1, t1), np.where(better, c2, t2), np.where(better, tried, best)
    return t1, t2


def settle(widths: list[Width], gbs: np.ndarray,
           grows: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """At each B of `gbs`: f, g, each weight type's c (in weight_types' order) and the error Σ (predicted ÷ t − 1)²,
    alternating f and g in closed form (at least 0, `nonneg_pair`) with each type's c (`type_cost`) until none
    moves. With `grows` False, g is held at 0."""
    kinds = weight_types(widths)
    t = np.array([x.step_ms[1] for x in widths], dtype=float)
    a = np.array([x.n_layer for x in widths], dtype=float) / t            # f's part of each relative step
    h = a * np.array([x.weight_bytes / x.n_params for x in widths]) * grows  # g's part (0 where g is held at 0)
    q = np.array([x.n_params for x in widths], dtype=float) * 1e-9 / t    # c's part, per ps
    p = np.array([x.weight_bytes for x in widths], dtype=float)[None, :] / (gbs[:, None] * 1e6) / t[None, :]
    groups = [sorted((i for i, x in enumerate(widths) if x.weight_type == kind),
                     key=lambda i: widths[i].weight_bytes / widths[i].n_params) for kind in kinds]
    of_type = [kinds.index(x.weight_type) for x in widths]
    member = np.array([[x.weight_type == kind for x in widths] for kind in kinds], dtype=float)  # [type, model]

    def costs(f: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each type's c with f and g fixed (the errors separate by type), and the error."""
        fixed = a[None, :] * f[:, None] + h[None, :] * g[:, None]
        c = np.stack([type_cost(fixed[:, k], p[:, k], q[k]) for k in groups], axis=1)
        pred = fixed + np.maximum(p, q[None, :] * c[:, of_type])
        return c, ((pred - 1) ** 2).sum(axis=1)

    def joint(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """f and g at the least error with each model kept on its side (reading or arithmetic) and each type's c
        following them: c = (Σ q − f Σ q a − g Σ q h) ÷ Σ q² over its models on the arithmetic's side, so each relative
        step is linear in f and g."""
        on = q[None, :] * c[:, of_type] > p                                 # [B, model]: waits on the arithmetic
        sqq, sq, sqa, sqh = ((on * w) @ member.T for w in (q ** 2, q, q * a, q * h))   # [B, type]
        sqq = np.where(sqq > 0, sqq, 1.0)
        va = np.where(on, a - q * (sqa / sqq)[:, of_type], a)
        vh = np.where(on, h - q * (sqh / sqq)[:, of_type], h)
        u = np.where(on, q * (sq / sqq)[:, of_type] - 1, p - 1)
        return nonneg_pair(va, vh, -u)

    f, g = np.zeros(len(gbs)), np.zeros(len(gbs))
    c, err = costs(f, g)
    for _ in range(ROUNDS):
        # f and g in closed form with every c fixed, or with each c following them where that errs less; then each
        # c again
        rest = 1 - np.maximum(p, q[None, :] * c[:, of_type])
        plain = nonneg_pair(np.broadcast_to(a, rest.shape), np.broadcast_to(h, rest.shape), rest)
        c_plain, err_plain = costs(*plain)
        both = joint(c)
        c_both, err_both = costs(*both)
        take = err_both <= err_plain
        f_new, g_new = np.where(take, both[0], plain[0]), np.where(take, both[1], plain[1])
        c_new, err_new = np.where(take[:, None], c_both, c_plain), np.where(take, err_both, err_plain)
        settled = (np.allclose(f_new, f, rtol=1e-12, atol=1e-15) and np.allclose(g_new, g, rtol=1e-12, atol=1e-15)
                   and np.allclose(c_new, c, rtol=1e-12, atol=1e-12))
        f, g, c, err = f_new, g_new, c_new, err_new
        if settled:
            break
    return f, g, c, err


def fit(widths: list[Width]) -> Terms:
    """B, f, g and c per weight type from the models' median step times at P = 1 (see the module): g = 0 unless the
    terms with g err less than those without by more than GAIN (g and B trade where models of one shape differ only
    in their bytes, so g is fitted only where the steps ask for it). Raises ValueError with fewer than MIN_FIT models
    or a model without a step time at P = 1."""
    missing = [w.name for w in widths if 1 not in w.step_ms]
    if missing:
        raise ValueError(f"no step time at P = 1 for {', '.join(missing)}")
    if len(widths) < MIN_FIT:
        raise ValueError(f"the terms need at least {MIN_FIT} models; {len(widths)} measured")
    held, held_err = fit_grid(widths, grows=False)
    free, free_err = fit_grid(widths, grows=True)
    return free if free_err < held_err - GAIN else held


def fit_grid(widths: list[Width], grows: bool) -> tuple[Terms, float]:
    """The terms at the least error over B's grid and the finer grids around its best point, and that error; g held
    at 0 unless `grows`."""
    gbs = log_grid(*B_RANGE_GBS)
    f, g, c, err = settle(widths, gbs, grows)
    i = int(first_within(err))
    best = (float(gbs[i]), f[i], g[i], c[i], err[i])
    # The least error between the grid points either side, the lowest B of those equal: ZOOMS finer grids in turn,
    # each between the points either side of the best so far.
    low, high = float(gbs[max(i - 1, 0)]), float(gbs[min(i + 1, len(gbs) - 1)])
    for _ in range(ZOOMS):
        finer = low * (high / low) ** (np.arange(ZOOM_POINTS + 1) / ZOOM_POINTS)
        f, g, c, err = settle(widths, finer, grows)
        j = int(first_within(err))
        as_good = err[j] <= best[4] * (1 + SAME) + NEAR
        if as_good and (err[j] < best[4] * (1 - SAME) - NEAR or finer[j] < best[0]):
            best = (float(finer[j]), f[j], g[j], c[j], err[j])
        k = int(np.searchsorted(finer, best[0]))  # the best B's place among the finer points
        low, high = float(finer[max(k - 1, 0)]), float(finer[min(k + 1, ZOOM_POINTS)])
    return Terms(best[0], tuple((kind, float(best[3][k])) for k, kind in enumerate(weight_types(widths))),
                 float(best[1]), tuple(x.name for x in widths), float(best[2])), float(best[4])


def predict(terms: Terms, name: str, weight_bytes: float, n_params: float, n_layer: int,
            weight_type: str) -> Prediction:
    """The predicted step of one sequence, term by term, with the c of its weight type."""
    return Prediction(name, weight_bytes / (terms.gbs * 1e9) * 1e3, n_params * terms.c(weight_type) * 1e-9,
                      n_layer * terms.per_block_ms(weight_bytes / n_params))


def predict_width(terms: Terms, w: Width) -> Prediction:
    return predict(terms, w.name, w.weight_bytes, w.n_params, w.n_layer, w.weight_type)


def not_held_out(widths: list[Width]) -> dict[str, str]:
    """Why a model cannot be predicted by the terms of the others, keyed by its name: ALONE where no other model
    shares its weight type (its c would come from its own step alone), or too few others for the terms."""
    out = {}
    for k, w in enumerate(widths):
        others = [x for i, x in enumerate(widths) if i != k]
        if not any(x.weight_type == w.weight_type for x in others):
            out[w.name] = ALONE
        elif len(others) < MIN_FIT:
            out[w.name] = f"fewer than {MIN_FIT} other models"
    return out


def leave_one_out(widths: list[Width]) -> dict[str, Terms | None]:
    """The terms fitted on every model but each one, keyed by the one left out (None where `not_held_out` says
    why not)."""
    why = not_held_out(widths)
    return {w.name: None if w.name in why else fit([x for i, x in enumerate(widths) if i != k])
            for k, w in enumerate(widths)}


def held_out(widths: list[Width], fits: dict[str, Terms | None] | None = None) -> dict[str, Prediction | None]:
    """Each model predicted by the terms fitted on the others (None where it cannot be); `fits` is
    leave_one_out(widths) when already computed."""
    fits = leave_one_out(widths) if fits is None else fits
    out: dict[str, Prediction | None] = {}
    for w in widths:
        terms = fits[w.name]
        out[w.name] = None if terms is None else predict_width(terms, w)
    return out


def crossover(terms: Terms, weight_type: str) -> float:
    """The bytes per parameter at which reading the weights takes as long as the arithmetic, for one weight type:
    B × c (GB/s × ps is 10⁻³ bytes). A model of that type with more bytes per parameter waits on memory, with as
    many or fewer on the arithmetic."""
    return terms.gbs * terms.c(weight_type) * 1e-3


def crossover_range(terms: Terms, fits: dict[str, Terms | None], weight_type: str) -> tuple[float, float]:
    """The lowest and highest crossover of one weight type under the terms of every model and of each leave-one-out
    fit: a model of that type whose bytes per parameter lie between them is named by some fits memory-bound and by
    others compute-bound (mixed)."""
    every = [crossover(t, weight_type) for t in (terms, *fits.values()) if t is not None]
    return min(every), max(every)


def crossover_u(fits: dict[str, Terms | None], weight_type: str) -> float | None:
    """The standard error u of one weight type's crossover (bytes per parameter), by the jackknife over the fits that
    leave one model out: u² = (m − 1) ÷ m × Σ (κᵢ − κ̄)² over the m crossovers of those fits. None with fewer than two
    such fits: the run then has no measure of how far its crossover may lie off."""
    every = [crossover(t, weight_type) for t in fits.values() if t is not None]
    m = len(every)
    if m < 2:
        return None
    mean = sum(every) / m
    return math.sqrt((m - 1) / m * sum((k - mean) ** 2 for k in every))


def mixed_band(terms: Terms, fits: dict[str, Terms | None], weight_type: str) -> tuple[float, float]:
    """The bytes per parameter within which a model of this weight type is mixed: MARGIN × u either side of the
    crossover of every model's terms, and at least from the lowest to the highest crossover of the fits that leave one
    model out (`crossover_range`: a model between them is turned over by one of them)."""
    k = crossover(terms, weight_type)
    low, high = crossover_range(terms, fits, weight_type)
    u = crossover_u(fits, weight_type) or 0.0
    return min(low, k - MARGIN * u), max(high, k + MARGIN * u)


def bandwidth_to_cross(bytes_per_param: float, terms: Terms, weight_type: str) -> float:
    """The bandwidth (GB/s) at which a model of these bytes per parameter and this weight type reads its weights in
    its arithmetic's time: bytes per parameter ÷ c. Faster memory than that turns a memory-bound model
    compute-bound (infinite where the type's arithmetic was hidden: c = 0)."""
    c = terms.c(weight_type)
    return bytes_per_param / (c * 1e-3) if c > 0 else math.inf


def arithmetic_to_cross(bytes_per_param: float, terms: Terms) -> float:
    """The arithmetic per parameter (ps) that takes as long as reading these bytes per parameter: bytes per
    parameter ÷ B. Faster arithmetic than that turns a compute-bound model memory-bound."""
    return bytes_per_param / (terms.gbs * 1e-3)


def hidden_below(terms: Terms, widths: list[Width]) -> dict[str, float]:
    """For each weight type whose arithmetic was hidden (c = 0), the most c (ps) could be with its models still
    waiting on their weights: the least of their W ÷ (params × B)."""
    return {kind: min(arithmetic_to_cross(w.weight_bytes / w.n_params, terms) for w in widths if w.weight_type == kind)
            for kind in terms.types if terms.hidden(kind) and any(w.weight_type == kind for w in widths)}


def agreed(named: list[str]) -> str:
    """One verdict where every fit names the same one, MIXED where they differ."""
    return named[0] if len(set(named)) == 1 else MIXED


def too_close(w: Width, terms: Terms) -> bool:
    """Whether the model's read and its arithmetic, by `terms`, differ by no more than its own steps scatter: the
    spread of its step samples at P = 1 times its median step (ms)."""
    p = predict_width(terms, w)
    return abs(p.arithmetic_ms - p.memory_ms) <= w.spread * w.step_ms[1]


def within_band(w: Width, terms: Terms, fits: dict[str, Terms | None]) -> bool:
    """Whether the model's bytes per parameter lie within its weight type's `mixed_band`."""
    low, high = mixed_band(terms, fits, w.weight_type)
    return low <= w.weight_bytes / w.n_params <= high


def verdicts(widths: list[Width], terms: Terms, fits: dict[str, Terms | None]) -> dict[str, str]:
    """Each model's verdict under the terms of every model (`terms`) and under each leave-one-out fit (`fits`):
    named where they all agree, the model lies outside its type's `mixed_band` and its two terms are not `too_close`;
    MIXED otherwise (see the module)."""
    every = [terms, *(t for t in fits.values() if t is not None)]
    return {w.name: MIXED if within_band(w, terms, fits) or too_close(w, terms) else
            agreed([predict_width(t, w).verdict for t in every]) for w in widths}


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
    """step(P) = t₀ + Δt × P through the width's median step times at `levels`."""
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
    The same rule then: c = the arithmetic ÷ params, the crossover B × c in bytes per parameter, and the model's own
    bytes per parameter W ÷ params beside it (a lower bound on c makes the crossover a lower bound too)."""
    measured = 1e3 / decode_tokens_per_s
    memory = weight_bytes / (bandwidth_gbs * 1e9) * 1e3
    arithmetic = 1e3 / prefill_tokens_per_s
    rest = measured - max(memory, arithmetic)
    arith_ps = arithmetic / n_params * 1e9
    return {"measured_ms": measured, "memory_ms": memory, "arithmetic_ms": arithmetic, "rest_ms": rest,
            "memory_share": memory / measured, "arithmetic_share": arithmetic / measured, "rest_share": rest / measured,
            "arith_ps": arith_ps, "crossover": bandwidth_gbs * arith_ps * 1e-3, "bytes_per_param": weight_bytes / n_params}
