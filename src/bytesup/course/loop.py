"""The generation loop in numbers: the decode passes inside a server's timings, its counters read before and
after a request, and the latency model total ≈ time to first token + time per output token × (n − 1), fitted
at one length and set against others. Lesson 5 asks; this module computes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Protocol, Sequence


class ServerTimes(Protocol):
    """What a server reports of one generation's time (llama.cpp's `timings`)."""

    @property
    def prompt_ms(self) -> float: ...

    @property
    def predicted_ms(self) -> float: ...

    @property
    def predicted_n(self) -> int: ...


def decode_passes(t: ServerTimes) -> int:
    """Decode passes inside `predicted_ms`.

    The first generated token is sampled from the logits of the prompt pass, and `prompt_ms`
    runs until that token is sampled; so `predicted_ms` holds `predicted_n - 1` passes.
    Builds from 2026 compute `predicted_per_token_ms` the same way; older ones divided by
    `predicted_n`. We apply one rule to every build so that runs compare; the server's own
    `predicted_per_second` stays in the raw record.
    """
    return max(t.predicted_n - 1, 0)


def decode_ms_per_token(t: ServerTimes) -> float:
    n = decode_passes(t)
    return t.predicted_ms / n if n > 0 else float("nan")


def server_total_ms(t: ServerTimes) -> float:
    """The server's own time for the whole generation: prompt_ms + predicted_ms."""
    return t.prompt_ms + t.predicted_ms


# --- the server's counters ---------------------------------------------------------------------------

@dataclass(frozen=True)
class CounterDelta:
    name: str
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before


def counter_deltas(before: dict[str, float], after: dict[str, float]) -> list[CounterDelta]:
    """llama.cpp's *_total counters read before and after, in the order the server lists them."""
    return [CounterDelta(name, before[name], after[name]) for name in before
            if name.startswith("llamacpp:") and name.endswith("_total") and name in after]


def decode_calls_note(n_decode: float, predicted_n: int, prompt_n: int) -> str:
    """What the rise of n_decode_total (llama_decode calls) says about passes, from the counts alone.

    After the first token every further token needs its own pass, so predicted_n − 1 calls are
    decode; whatever is left over went to the prompt (the last of those calls also gives the first token).
    """
    later = max(predicted_n - 1, 0)
    prompt_calls = n_decode - later
    head = f"n_decode_total (calls of llama_decode) rose by {n_decode:g} for {predicted_n} tokens"
    if prompt_calls == 1:
        return (f"{head}: one pass per token. The {prompt_n}-token prompt went through in one pass that also gave "
                f"the first token, then {later} passes of one token each.")
    if prompt_calls > 1:
        return (f"{head}: {later} passes for the tokens after the first leave {prompt_calls:g} for the "
                f"{prompt_n}-token prompt: the server split it into batches, one pass each, the last giving the first token.")
    return (f"{head}: fewer calls than the {later + 1} a one-token-per-pass loop needs, so some pass produced more "
            "than one token.")


# --- the latency model -------------------------------------------------------------------------------

def latency_prediction(ttft_ms: float, tpot_ms: float, n: int) -> float:
    """Total time ≈ time to first token + time per output token × (n − 1)."""
    return ttft_ms + tpot_ms * (n - 1)


@dataclass(frozen=True)
class LatencyFit:
    """Time to first token and time per output token, medians over the fit's repeats."""
    ttft_samples: list[float]         # prompt_ms
    tpot_samples: list[float]         # predicted_ms ÷ (predicted_n − 1)

    @property
    def ttft(self) -> float:
        return statistics.median(self.ttft_samples)

    @property
    def tpot(self) -> float:
        return statistics.median(self.tpot_samples)

    def predict(self, n: int) -> float:
        return latency_prediction(self.ttft, self.tpot, n)

    def decode_share_pct(self, n: int) -> float:
        """The part of the predicted time at length n that the decode passes take, in %."""
        return 100 * self.tpot * (n - 1) / self.predict(n)


def latency_fit(fit: Sequence[ServerTimes]) -> LatencyFit:
    return LatencyFit([t.prompt_ms for t in fit], [decode_ms_per_token(t) for t in fit])


@dataclass(frozen=True)
class LatencyCheck:
    """The model's prediction at one length against the repeats measured there."""
    n: int
    fitted: bool                      # the length the model was fitted at
    predicted: float
    totals: list[float]               # prompt_ms + predicted_ms per repeat
    predicted_n: list[int]

    @property
    def measured(self) -> float:
        return statistics.median(self.totals)

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted - self.measured) / self.measured

    @property
    def errors_pct(self) -> list[float]:
        return [100 * (self.predicted - m) / m for m in self.totals]


def latency_check(model: LatencyFit, n: int, runs: Sequence[ServerTimes], fitted: bool) -> LatencyCheck:
    return LatencyCheck(n, fitted, model.predict(n), [server_total_ms(t) for t in runs], [t.predicted_n for t in runs])


def worst_prediction(checks: Sequence[LatencyCheck]) -> LatencyCheck:
    """The length predicted (not fitted) with the largest |error|; the first check when every one was fitted."""
    return max(checks, key=lambda c: abs(c.error_pct) if not c.fitted else -1)
