"""What a narrower width costs in accuracy: its next-token distributions against a reference width's, the measure of
llama.cpp's `llama-perplexity --kl-divergence`, on logits a forward pass gave at the same positions.

At every position the reference's distribution P and the width's Q each come from a softmax over the whole
vocabulary; the cost is the Kullback-Leibler divergence KL(P ‖ Q) = Σ P(t) × (ln P(t) − ln Q(t)) in nats, 0 exactly
where the two logits are the same and never below it, averaged over the positions. Beside it: at how many positions
the most probable token is the same, and the largest change of any token's probability, where it happened.

Pure functions of arrays: a lesson gives them the logits, each row one position (positions × vocabulary)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIGNIFICANT = 4  # digits kept of each figure: a float64 sum on another CPU may differ far below them


def sig(x: float, digits: int = SIGNIFICANT) -> float:
    """x to `digits` significant digits (0 stays 0)."""
    return float(f"{x:.{digits}g}")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """ln of the softmax of each row, in float64: z − max z − ln Σ e^(z − max z)."""
    z = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    shifted = z - np.max(z, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def kl_divergence(reference: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(P ‖ Q) of each row in nats, P the softmax of `reference`'s row and Q of `logits`' (same shape)."""
    reference, logits = np.atleast_2d(reference), np.atleast_2d(logits)
    if reference.shape != logits.shape:
        raise ValueError(f"the reference's logits {reference.shape} and the width's {logits.shape} differ in shape")
    ln_p, ln_q = log_softmax(reference), log_softmax(logits)
    return np.sum(np.exp(ln_p) * (ln_p - ln_q), axis=-1)


@dataclass(frozen=True)
class Agreement:
    """A width's distributions against the reference's over `positions` positions: the mean and the largest KL
    (nats), how many positions have the same most probable token, and the largest change |ΔP| of any token's
    probability, at which row and token id, with its probability under each."""

    positions: int
    mean_kl: float
    max_kl: float
    same_top: int
    largest_dp: float
    dp_row: int
    dp_token: int
    dp_reference: float
    dp_width: float

    @property
    def identical(self) -> bool:
        """The same distribution at every position, to the last bit of float64."""
        return self.max_kl == 0.0 and self.largest_dp == 0.0


def agreement(reference: np.ndarray, logits: np.ndarray) -> Agreement:
    """`logits` (positions × vocabulary) against `reference`'s at the same positions."""
    reference, logits = np.atleast_2d(reference), np.atleast_2d(logits)
    kl = kl_divergence(reference, logits)
    p, q = np.exp(log_softmax(reference)), np.exp(log_softmax(logits))
    dp = np.abs(p - q)
    row, token = np.unravel_index(int(np.argmax(dp)), dp.shape)
    same = np.argmax(reference, axis=-1) == np.argmax(logits, axis=-1)
    # KL of two distributions is ≥ 0; a float64 sum of terms that cancel may land a hair below it: that is 0.
    return Agreement(positions=int(kl.shape[0]), mean_kl=max(0.0, float(np.mean(kl))), max_kl=max(0.0, float(np.max(kl))),
                     same_top=int(np.sum(same)), largest_dp=float(dp[row, token]), dp_row=int(row), dp_token=int(token),
                     dp_reference=float(p[row, token]), dp_width=float(q[row, token]))


def top_token(logits: np.ndarray) -> tuple[int, float]:
    """The most probable token of one row of logits and its probability."""
    ln_p = log_softmax(logits)[0]
    best = int(np.argmax(ln_p))
    return best, float(np.exp(ln_p[best]))
