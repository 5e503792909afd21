"""The samplers of llama.cpp, re-implemented in plain numpy: greedy, temperature, top-k, top-p.

Each sampler takes a probability vector over some candidates and returns a new vector of the
same length: zero for every candidate it drops, the kept ones renormalized to sum to 1. Chains
apply samplers in order, as llama.cpp's `samplers` list does. Candidates keep their positions,
so a result lines up with the token ids it came with.

llama.cpp's rules, as these functions follow them:
- temperature T > 0 divides the logits by T, which is p^(1/T) renormalized; T <= 0 keeps only
  the most probable candidate (greedy);
- top-k keeps the k most probable candidates (k <= 0: all); ties at the edge go to the earlier
  candidate, since the order among equal probabilities is the engine's choice;
- top-p sorts the candidates and keeps them until the cumulative probability reaches p
  (cumulative >= p), never fewer than `min_keep`; p >= 1 keeps all;
- min-p and the rest are not re-implemented.

A probability vector is usually the whole distribution. It can also be the top n candidates
the server listed (`n_probs`), whose probabilities add up to less than 1: pass `total=1.0`
(the whole distribution's mass) and a sampler either gives the exact answer from the listed
candidates alone or raises `IncompleteDistribution`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

__all__ = [
    "IncompleteDistribution", "softmax", "normalize", "order", "greedy", "temperature", "top_k", "top_p",
    "apply", "apply_chain", "kept_indices",
]

SAMPLERS = ("temperature", "top_k", "top_p")


class IncompleteDistribution(ValueError):
    """The listed candidates do not hold enough of the distribution to apply a sampler exactly."""


def _as_probs(probs: Sequence[float] | np.ndarray) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError("a probability vector must be one-dimensional and non-empty")
    if np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ValueError("probabilities must be finite and non-negative")
    if p.sum() <= 0:
        raise ValueError("probabilities must not all be zero")
    return p


def softmax(logits: Sequence[float] | np.ndarray) -> np.ndarray:
    """e^logit / Σ e^logit, computed stably (the largest logit is subtracted first)."""
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(x - np.max(x))
    return e / e.sum()


def normalize(probs: Sequence[float] | np.ndarray) -> np.ndarray:
    p = _as_probs(probs)
    return p / p.sum()


def order(probs: Sequence[float] | np.ndarray) -> np.ndarray:
    """Candidate indices from the most to the least probable; equal ones keep their order."""
    p = np.asarray(probs, dtype=np.float64)
    return np.argsort(-p, kind="stable")


def kept_indices(probs: Sequence[float] | np.ndarray) -> np.ndarray:
    """Indices of the candidates with non-zero probability, most probable first."""
    p = np.asarray(probs, dtype=np.float64)
    idx = order(p)
    return idx[p[idx] > 0]


def _one_hot(n: int, i: int) -> np.ndarray:
    out = np.zeros(n)
    out[i] = 1.0
    return out


def greedy(probs: Sequence[float] | np.ndarray) -> int:
    """The index of the most probable candidate (the first one among equals)."""
    return int(order(_as_probs(probs))[0])


def _check_complete(p: np.ndarray, total: float | None, what: str) -> None:
    if total is not None and p.sum() < total * (1 - 1e-9):
        raise IncompleteDistribution(
            f"{what} needs the whole distribution: the {p.size} listed candidates hold "
            f"{p.sum() / total:.6g} of it"
        )


def temperature(probs: Sequence[float] | np.ndarray, t: float, total: float | None = None) -> np.ndarray:
    """p^(1/t), renormalized (the same as softmax(logits / t)); t <= 0 is greedy."""
    p = _as_probs(probs)
    if t <= 0:
        return _one_hot(p.size, greedy(p))
    _check_complete(p, total, f"temperature {t:g}")
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    w = np.exp((logp - logp.max()) / t)
    return w / w.sum()


def top_k(probs: Sequence[float] | np.ndarray, k: int, total: float | None = None) -> np.ndarray:
    """Keep the k most probable candidates, renormalized; k <= 0 keeps all."""
    p = _as_probs(probs)
    if k <= 0 or k > p.size:
        _check_complete(p, total, f"top-k {k}")
        return p / p.sum()
    out = np.zeros_like(p)
    keep = order(p)[:k]
    out[keep] = p[keep]
    return out / out.sum()


def top_p(probs: Sequence[float] | np.ndarray, p_min: float, min_keep: int = 1, total: float | None = None) -> np.ndarray:
    """Keep the most probable candidates until their cumulative probability reaches p_min
    (cumulative >= p_min), at least `min_keep` of them; renormalized. p_min >= 1 keeps all."""
    p = _as_probs(probs)
    if p_min >= 1.0:
        _check_complete(p, total, f"top-p {p_min:g}")
        return p / p.sum()
    mass = p.sum() if total is None else float(total)
    idx = order(p)
    cumulative = np.cumsum(p[idx]) / mass
    reached = np.nonzero(cumulative >= p_min)[0]
    if reached.size == 0:
        if total is None:  # rounding: the whole vector sums to just under p_min
            n_keep = p.size
        else:
            raise IncompleteDistribution(
                f"top-p {p_min:g}: the {p.size} listed candidates hold only {cumulative[-1]:.6g} of the distribution"
            )
    else:
        n_keep = int(reached[0]) + 1
    n_keep = max(n_keep, min(min_keep, p.size))
    out = np.zeros_like(p)
    keep = idx[:n_keep]
    out[keep] = p[keep]
    return out / out.sum()


def apply(probs: Sequence[float] | np.ndarray, name: str, value: float, total: float | None = None) -> np.ndarray:
    """One sampler by llama.cpp's name: 'temperature', 'top_k' or 'top_p'."""
    if name == "temperature":
        return temperature(probs, float(value), total)
    if name == "top_k":
        return top_k(probs, int(value), total)
    if name == "top_p":
        return top_p(probs, float(value), total=total)
    raise ValueError(f"unknown sampler {name!r}; re-implemented: {', '.join(SAMPLERS)}")


def apply_chain(probs: Sequence[float] | np.ndarray, steps: Iterable[tuple[str, float]],
                total: float | None = None) -> np.ndarray:
    """Samplers in order, each on the previous one's output, e.g. [('top_k', 10), ('temperature', 0.5)].

    `total`: the mass of the whole distribution when `probs` lists only part of it. After the
    first sampler that drops candidates, the rest work on a complete (renormalized) vector.
    """
    p = _as_probs(probs)
    if total is None:
        p = p / p.sum()
    for name, value in steps:
        # A sampler given part of a distribution either raises or keeps only listed candidates,
        # renormalized: from then on the vector is the whole (kept) distribution.
        p = apply(p, name, value, total)
        total = None
    return p
