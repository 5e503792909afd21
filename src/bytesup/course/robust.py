"""The one rule for judging repeated samples: median, a robust spread, and outliers named, not obeyed.

Used wherever samples decide something (the capstone's sweep, `bytesup check`'s verdicts):

- each server's first timed request is a warm-up and is not a sample (the caller drops it);
- a judgement takes at least MIN_SAMPLES samples;
- the centre is the median; the spread is the interquartile range of the samples that are not
  outliers, relative to the median (`relative_iqr`);
- an outlier is a sample further from the median than OUTLIER_MADS scaled median absolute
  deviations (MAD × 1.4826, the standard deviation of normal samples), with the scale never below
  MIN_SCALE of the median, so that identical samples do not make a 1% difference an outlier; with
  fewer than MIN_SAMPLES samples nothing is flagged (three samples cannot say which one is odd);
- outliers are shown and kept in the JSON, but they never widen an allowance: the spread and the
  range (`low`, `high`) are those of the other samples.

On a shared 2-core machine one request now and then waits for another process (a sample of 7.4
tokens/s in a row of 93): without this rule that one sample made a ±1,172% allowance.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

MIN_SAMPLES = 5
OUTLIER_MADS = 5.0
MAD_TO_SIGMA = 1.4826
MIN_SCALE = 0.01


@dataclass(frozen=True)
class Robust:
    """The robust summary of one list of samples (see the module's rule)."""

    samples: tuple[float, ...]
    median: float
    scale: float                 # MAD × 1.4826, at least MIN_SCALE × |median|
    outliers: tuple[int, ...]    # indices into `samples`
    low: float                   # lowest and highest sample that is not an outlier
    high: float
    q1: float                    # quartiles of the samples that are not outliers
    q3: float

    @property
    def kept(self) -> list[float]:
        return [s for i, s in enumerate(self.samples) if i not in self.outliers]

    @property
    def outlier_values(self) -> list[float]:
        return [self.samples[i] for i in self.outliers]

    @property
    def relative_iqr(self) -> float:
        """(Q3 − Q1) ÷ median of the samples that are not outliers: the spread every tolerance is set against."""
        return (self.q3 - self.q1) / abs(self.median) if self.median else 0.0

    @property
    def enough(self) -> bool:
        return len(self.samples) >= MIN_SAMPLES

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["samples"] = list(self.samples)
        out["outliers"] = list(self.outliers)
        out["relative_iqr"] = self.relative_iqr
        out["outlier_mads"] = OUTLIER_MADS
        return out


def quartiles(values: list[float]) -> tuple[float, float]:
    """Q1 and Q3 by linear interpolation between order statistics (numpy's default); one value gives itself twice."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def judge(samples: list[float] | tuple[float, ...]) -> Robust:
    """Median, scale, outliers and the kept samples' range and quartiles (see the module's rule)."""
    values = tuple(float(s) for s in samples)
    if not values:
        raise ValueError("judging samples needs at least one sample")
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    scale = max(MAD_TO_SIGMA * mad, MIN_SCALE * abs(med))
    outliers = tuple(i for i, v in enumerate(values)
                     if len(values) >= MIN_SAMPLES and scale > 0 and abs(v - med) > OUTLIER_MADS * scale)
    kept = [v for i, v in enumerate(values) if i not in outliers]
    q1, q3 = quartiles(kept)
    return Robust(values, med, scale, outliers, min(kept), max(kept), q1, q3)


def describe_outliers(r: Robust, unit: str = "") -> str:
    """'' without outliers, else e.g. '7.4 tokens/s (1 of 6, beyond 5 scaled MADs of 93.6; not used for the spread)'."""
    if not r.outliers:
        return ""
    vals = ", ".join(f"{v:.3g}" for v in r.outlier_values) + (f" {unit}" if unit else "")
    return (f"{vals} ({len(r.outliers)} of {len(r.samples)}, beyond {OUTLIER_MADS:g} scaled MADs of the median "
            f"{r.median:.3g}; kept in the JSON, not used for the spread)")
