"""Decode time from terms the run measures: reading the weights, the arithmetic, and a fixed cost.

One decode step with P sequences reads every weight once and does the arithmetic of P tokens:

    t(P) = W ÷ B + F + P × n × c_τ      (milliseconds per step)

- W: the model's weight bytes; B: the bandwidth decode reads them at (one value for every width,
  a property of the memory);
- F: the fixed cost of a step (one value: what does not grow with the weights nor with the tokens);
- n: its parameters; c_τ: the arithmetic cost per weight and token of its weight type τ (one value
  per type, a property of the kernels).

The terms are fitted from the engine itself: for each fitted width a line t(P) = a + b × P through
its measured step times at several P (a: the weights read plus the fixed cost, b: the arithmetic of
one token), then a = W ÷ B + F across the widths (B and F), and c_τ = b ÷ n. The model then predicts
what it was not fitted on: a width's decode at P = 1 from the pooled B and F, and a model whose
weight type was fitted on another (same c_τ, its own W and n).

The verdict follows the dominant term of the predicted time at P = 1: memory-bound when the weights'
read holds more than half of it (MAJORITY), compute-bound when the arithmetic does, fixed-cost-bound
when the fixed cost does, and mixed when no term holds more than half.
"""

from __future__ import annotations

from dataclasses import dataclass

MAJORITY = 0.5
TOLERANCE = 0.15  # the model should predict a width's decode tokens/s within ±15% of measured
MEMORY, COMPUTE, FIXED, MIXED = "memory-bound", "compute-bound", "fixed-cost-bound", "mixed"


@dataclass(frozen=True)
class Width:
    """One model as measured: its weights, and the median step time (ms) at each P measured."""
    name: str
    weight_bytes: float
    n_params: float
    weight_type: str
    step_ms: dict[int, float]


@dataclass(frozen=True)
class Line:
    intercept_ms: float
    slope_ms: float  # per sequence in the step


@dataclass(frozen=True)
class Terms:
    gbs: float                       # B
    fixed_ms: float                  # F
    arith_ns: dict[str, float]       # c_τ, ns per weight and token, by weight type
    fitted: tuple[str, ...]          # the widths the terms come from
    levels: tuple[int, ...]          # the P each width's line was fitted on


@dataclass(frozen=True)
class Prediction:
    name: str
    parallel: int
    memory_ms: float
    arithmetic_ms: float             # all P tokens of the step
    fixed_ms: float

    @property
    def step_ms(self) -> float:
        return self.memory_ms + self.arithmetic_ms + self.fixed_ms

    @property
    def tokens_per_s(self) -> float:
        """All sequences together: P tokens per step."""
        return 1e3 * self.parallel / self.step_ms

    def shares(self) -> dict[str, float]:
        t = self.step_ms
        return {"memory": self.memory_ms / t, "arithmetic": self.arithmetic_ms / t, "fixed": self.fixed_ms / t}

    @property
    def verdict(self) -> str:
        return dominant(self.shares())


def dominant(shares: dict[str, float]) -> str:
    """The verdict of the module's rule from the terms' shares of the predicted time."""
    name, share = max(shares.items(), key=lambda kv: kv[1])
    if share <= MAJORITY:
        return MIXED
    return {"memory": MEMORY, "arithmetic": COMPUTE, "fixed": FIXED}[name]


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


def fit(widths: list[Width], levels: tuple[int, ...]) -> Terms:
    """B and F from the intercepts against the weight bytes; c_τ from the slopes (the mean ns per weight
    over the widths of that type). Raises ValueError when the intercepts do not grow with the bytes (no
    bandwidth can be read from them) or fewer than two distinct sizes are fitted."""
    lines = {w.name: step_line(w, levels) for w in widths}
    fixed, per_byte_ms = least_squares([w.weight_bytes for w in widths], [lines[w.name].intercept_ms for w in widths])
    if per_byte_ms <= 0:
        raise ValueError("the step times' intercepts do not grow with the weight bytes: no bandwidth to fit")
    by_type: dict[str, list[float]] = {}
    for w in widths:
        by_type.setdefault(w.weight_type, []).append(1e6 * lines[w.name].slope_ms / w.n_params)
    arith = {t: sum(v) / len(v) for t, v in by_type.items()}
    return Terms(1e-6 / per_byte_ms, fixed, arith, tuple(w.name for w in widths), levels)


def lines(widths: list[Width], levels: tuple[int, ...]) -> dict[str, Line]:
    return {w.name: step_line(w, levels) for w in widths}


def predict(terms: Terms, name: str, weight_bytes: float, n_params: float, weight_type: str,
            parallel: int = 1) -> Prediction | None:
    """The predicted step at P sequences; None when the weight type's arithmetic was not fitted."""
    c = terms.arith_ns.get(weight_type)
    if c is None:
        return None
    return Prediction(name, parallel, weight_bytes / (terms.gbs * 1e9) * 1e3, parallel * n_params * c * 1e-6,
                      terms.fixed_ms)


def published_terms(weight_bytes: float, bandwidth_gbs: float, decode_tokens_per_s: float,
                    prefill_tokens_per_s: float) -> dict[str, float]:
    """The same terms from a published run's figures (no step times at several P): the weights read at the
    published bandwidth, the arithmetic at prefill's rate (matrix-matrix kernels: a lower bound for
    decode's), and what remains of the measured decode time (fixed cost and decode's extra arithmetic)."""
    measured = 1e3 / decode_tokens_per_s
    memory = weight_bytes / (bandwidth_gbs * 1e9) * 1e3
    arithmetic = 1e3 / prefill_tokens_per_s
    rest = measured - memory - arithmetic
    return {"measured_ms": measured, "memory_ms": memory, "arithmetic_ms": arithmetic, "rest_ms": rest,
            "memory_share": memory / measured, "arithmetic_share": arithmetic / measured, "rest_share": rest / measured}
