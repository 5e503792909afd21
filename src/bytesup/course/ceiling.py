"""The bandwidth ceiling of decode, written once for lessons 1, 4, 7 and 8.

Each decoded token reads every weight once, so decode can be no faster than

    ceiling (tokens/s) = bandwidth (GB/s) × 1e9 ÷ bytes per token,

and decode's efficiency is its speed ÷ that ceiling. The run's bandwidth reading is this host's
CPU memory, read with the server's decode threads: it bounds the server only when the server
decodes on this host's CPU (`host_applies`, from the lesson's server facts). A bandwidth given
with --bandwidth-gbs is the user's statement of the memory that feeds the server's decode.

Everything here is a pure function of numbers: the lessons record the bandwidth reading and
the decode timings, and recompute these on replay.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bytesup.course import formulas

__all__ = ["Spread", "TokenWork", "token_work", "Ceiling", "CeilingSource", "Efficiency", "BandwidthReference", "ceiling_at",
           "bandwidth_ceiling", "efficiencies", "decode_efficiency", "server_bandwidth", "effective_gbs"]


@dataclass(frozen=True)
class Spread:
    """Median, lowest and highest of a non-empty list of samples."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: list[float] | tuple[float, ...]) -> "Spread":
        if not samples:
            raise ValueError("a spread needs at least one sample")
        return cls(statistics.median(samples), min(samples), max(samples))


@dataclass(frozen=True)
class TokenWork:
    """The work of one decoded token (one forward pass): every weight read once, about two FLOPs per weight."""

    params: int
    bytes: int
    flops: float
    flops_per_byte: float


def token_work(n_params: int, nbytes: int) -> TokenWork:
    flops = formulas.flops_per_token(n_params)
    return TokenWork(n_params, nbytes, flops, flops / nbytes)


@dataclass(frozen=True)
class CeilingSource:
    """One bandwidth and the ceiling it gives: a row of a lesson's ceiling table."""

    label: str            # where the bandwidth comes from, e.g. "this host, measured (median)"
    bandwidth_gbs: float
    tokens_per_s: float


@dataclass(frozen=True)
class Ceiling:
    """The ceilings one model's bytes per token meet on this host (and at a given bandwidth)."""

    bytes_per_token: float
    bandwidth_gbs: tuple[float, ...]   # the host's bandwidth samples, GB/s
    ceilings: tuple[float, ...]        # tokens/s, one per bandwidth sample
    host_applies: bool                 # whether this host's CPU bandwidth bounds the server's decode
    given_gbs: float | None = None     # --bandwidth-gbs
    given_ceiling: float | None = None  # tokens/s at the given bandwidth

    @property
    def median(self) -> float:
        """The host's ceiling: the median of the per-sample ceilings (tokens/s)."""
        return statistics.median(self.ceilings)

    @property
    def bandwidth(self) -> Spread:
        return Spread.of(self.bandwidth_gbs)

    @property
    def spread(self) -> Spread:
        return Spread.of(self.ceilings)

    def sources(self) -> list[CeilingSource]:
        """The given bandwidth's ceiling (when given), then the host's at its median, lowest and
        highest sample. Where the host's bandwidth does not bound the server its labels say that
        these are ceilings for CPU decode here, not for the server."""
        rows = []
        if self.given_gbs is not None and self.given_ceiling is not None:
            rows.append(CeilingSource("given (--bandwidth-gbs)", self.given_gbs, self.given_ceiling))
        scope = "" if self.host_applies else ", CPU decode here, not the server"
        for stat in ("median", "min", "max"):
            gbs = getattr(self.bandwidth, stat)
            rows.append(CeilingSource(f"this host, measured ({stat}{scope})", gbs, ceiling_at(gbs, self.bytes_per_token)))
        return rows


@dataclass(frozen=True)
class Efficiency:
    """Decode samples as a share of the ceilings (percent): against the host's median ceiling only
    where the host's bandwidth bounds the server, against the given bandwidth's ceiling when given."""

    decode: tuple[float, ...]          # tokens/s
    host: tuple[float, ...] | None     # % of the host's median ceiling
    given: tuple[float, ...] | None    # % of the --bandwidth-gbs ceiling


@dataclass(frozen=True)
class BandwidthReference:
    """The bandwidth that feeds the server's decode, where one is known."""

    gbs: float
    label: str
    host_cpu: bool  # True: this host's measured CPU bandwidth; False: given with --bandwidth-gbs


def ceiling_at(bandwidth_gbs: float, bytes_per_token: float) -> float:
    """tokens/s ≤ bandwidth (GB/s) × 1e9 ÷ bytes per token."""
    return formulas.ceiling_tokens_per_s(bandwidth_gbs * formulas.GB, bytes_per_token)


def bandwidth_ceiling(bytes_per_token: float, bandwidth_samples_gbs: list[float], *, host_applies: bool,
                      given_gbs: float | None = None) -> Ceiling:
    """The ceiling of each bandwidth sample, and of the given bandwidth when there is one."""
    if bytes_per_token <= 0:
        raise ValueError(f"bytes per token must be positive, not {bytes_per_token}")
    if given_gbs is not None and not given_gbs > 0:
        raise ValueError(f"a given bandwidth must be positive, not {given_gbs}")
    given = float(given_gbs) if given_gbs is not None else None
    return Ceiling(
        bytes_per_token=bytes_per_token,
        bandwidth_gbs=tuple(float(b) for b in bandwidth_samples_gbs),
        ceilings=tuple(ceiling_at(b, bytes_per_token) for b in bandwidth_samples_gbs),
        host_applies=host_applies,
        given_gbs=given,
        given_ceiling=ceiling_at(given, bytes_per_token) if given is not None else None,
    )


def efficiencies(decode: list[float] | tuple[float, ...], ceiling_tokens_per_s: float) -> list[float]:
    """Each decode sample ÷ the ceiling, in percent."""
    return [formulas.percent(formulas.efficiency(d, ceiling_tokens_per_s)) for d in decode]


def decode_efficiency(ceiling: Ceiling, decode: list[float] | tuple[float, ...]) -> Efficiency:
    """Decode's efficiency against the host's median ceiling (where it bounds the server) and the given one."""
    host = tuple(efficiencies(decode, ceiling.median)) if ceiling.host_applies and ceiling.ceilings else None
    given = tuple(efficiencies(decode, ceiling.given_ceiling)) if ceiling.given_ceiling is not None else None
    return Efficiency(decode=tuple(decode), host=host, given=given)


def server_bandwidth(host_median_gbs: float | None, *, host_applies: bool, given_gbs: float | None) -> BandwidthReference | None:
    """The bandwidth that bounds the server's decode: the given one when there is one (the user
    names the server's memory), else this host's median where this host's bandwidth applies,
    else none."""
    if given_gbs is not None:
        return BandwidthReference(float(given_gbs), "given with --bandwidth-gbs", host_cpu=False)
    if host_applies and host_median_gbs is not None:
        return BandwidthReference(float(host_median_gbs), "this host's CPU read (the run's reading)", host_cpu=True)
    return None


def effective_gbs(tokens_per_s: float, bytes_per_token: float) -> float:
    """The bandwidth a decode speed implies: bytes per token × tokens/s, in GB/s."""
    return tokens_per_s * bytes_per_token / formulas.GB
