"""Lesson 5's table rows: the loop, the samplers and their check against the server, seeded sampling, the latency
model and the loop seen from the client's clock. Each field is a column, in order, read by name."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bytesup.course.clientclock import OutsideView, StreamedRepeat
from bytesup.course.loop import CounterDelta, LatencyCheck
from bytesup.course.samplercheck import Applied, Distribution, SamplerCheck
from bytesup.store.rows import column


@dataclass(frozen=True)
class LoopStep:
    """One pass of the loop: the token it produced and that token's probability."""
    pass_no: int = column("pass")
    token: str = column("token sampled")
    id: int = column("id")
    probability: float | None = column("its probability")


@dataclass(frozen=True)
class CounterRow:
    counter: str = column("counter")
    before: float = column("before")
    after: float = column("after")
    delta: float = column("delta")


def counter_row(c: CounterDelta) -> CounterRow:
    return CounterRow(c.name, c.before, c.after, c.delta)


@dataclass(frozen=True)
class CandidateRow:
    rank: int = column("rank")
    token: str = column("token")
    id: int = column("id")
    probability: float = column("probability")
    cumulative: float = column("cumulative")


def top_candidates(dist: Distribution, k: int = 10) -> list[CandidateRow]:
    cum = np.cumsum(dist.probs)
    return [CandidateRow(i + 1, dist.texts[i], dist.ids[i], float(dist.probs[i]), float(cum[i])) for i in range(min(k, len(dist.ids)))]


@dataclass(frozen=True)
class AppliedRow:
    setting: str = column("setting")
    chain: str = column("chain", "in order")
    kept: int | None = column("kept", "tokens")
    kept_percent: float | None = column("original probability kept", "%")
    top_token: str | None = column("most probable token")
    top_before: float | None = column("its probability before")
    top_after: float | None = column("after")


def applied_row(a: Applied) -> AppliedRow:
    if a.ours is None:
        return AppliedRow(a.setting.label, a.setting.chain, None, None, None, None, None)
    return AppliedRow(a.setting.label, a.setting.chain, len(a.kept), a.kept_percent, a.top_token, a.top_before, a.top_after)


@dataclass(frozen=True)
class CheckRow:
    setting: str = column("setting")
    chain: str = column("chain", "in order")
    kept_ours: int | None = column("kept", "ours")
    kept_server: int | None = column("kept", "server")
    listed: int | None = column("listed by server")
    same_set: bool | None = column("same tokens")
    drawn: str | None = column("token the server drew")
    drawn_kept: bool | None = column("drawn token in our kept set")
    max_abs: float | None = column("max |Δp|")
    max_rel: float | None = column("max |Δp| / p")
    tolerance: float = column("tolerance", "relative")
    verdict: str = column("verdict")


def check_row(s: SamplerCheck) -> CheckRow:
    c, label, chain = s.cmp, s.setting.label, s.setting.chain
    if c is None:
        return CheckRow(label, chain, None, None, None, None, None, None, None, None, s.tolerance, s.verdict)
    return CheckRow(label, chain, c.kept_ours, c.kept_server, c.listed, c.same_set, s.drawn, c.sampled_in_kept, c.max_abs,
                    c.max_rel, s.tolerance, s.verdict)


@dataclass(frozen=True)
class SeededRun:
    run: int = column("run")
    seed: int = column("seed")
    text: str = column("text")                         # repr of the content
    tokens: list[int] = column("token ids")


@dataclass(frozen=True)
class LatencyRow:
    n: int = column("n", "tokens")
    row: str = column("row")
    predicted: float = column("predicted", "ms")
    measured: float = column("measured median", "ms")
    lowest: float = column("measured min", "ms")
    highest: float = column("measured max", "ms")
    error_pct: float = column("error", "%")
    predicted_n: list[int] = column("predicted_n", "per repeat")


def latency_row(c: LatencyCheck) -> LatencyRow:
    return LatencyRow(c.n, "fit" if c.fitted else "predicted", c.predicted, c.measured, min(c.totals), max(c.totals),
                      c.error_pct, c.predicted_n)


@dataclass(frozen=True)
class ClockRow:
    measure: str = column("measure")
    client: float = column("client", "ms")
    server: float = column("server", "ms")
    difference: float = column("client − server", "ms")
    field: str = column("server's field")


def clock_rows(view: OutsideView, n: int) -> list[ClockRow]:
    """Each client-side figure beside the server's figure it should match."""
    c, per_token, itl = view.client, view.per_token_ms, view.itl_percentiles()
    pairs = [("time to first token", c.ttft_median, view.prompt_ms, "prompt_ms"),
             *[(f"inter-token latency p{q}", itl[q], per_token, "predicted_per_token_ms") for q in itl],
             ("inter-token latency mean", view.itl_mean_ms, per_token, "predicted_per_token_ms"),
             ("end-to-end", c.end_to_end_median, view.server_total_ms, "prompt_ms + predicted_ms"),
             (f"TTFT + ITL p50 × (n − 1), n = {n}", view.predicted_end_to_end(n), view.server_predicted(n),
              "prompt_ms + predicted_per_token_ms × (n − 1)")]
    return [ClockRow(name, ours, theirs, ours - theirs, field) for name, ours, theirs, field in pairs]


@dataclass(frozen=True)
class RepeatRow:
    repeat: int = column("repeat")
    token_events: int = column("events with tokens")
    predicted_n: int = column("predicted_n")
    ttft: float = column("TTFT", "ms")
    prompt_ms: float = column("prompt_ms", "ms")
    ttft_gap: float = column("TTFT − prompt_ms", "ms")
    itl_median: float = column("ITL median", "ms")
    per_token: float = column("predicted_per_token_ms", "ms")
    end_to_end: float = column("end-to-end", "ms")
    server_total: float = column("prompt_ms + predicted_ms", "ms")
    overhead: float = column("client − server", "ms")
    one_by_one: bool = column("each token after the one before")
    fastest_gap: float = column("fastest gap", "ms")
    floor: float = column("n × fastest gap", "ms")


def repeat_row(r: StreamedRepeat) -> RepeatRow:
    c, t = r.client, r.timings
    return RepeatRow(r.repeat, r.token_events, t.predicted_n, c.ttft_ms, t.prompt_ms, r.ttft_gap_ms, r.itl_median_ms, r.per_token_ms,
                     c.end_to_end_ms, r.server_total_ms, r.overhead_ms, c.in_order and c.separate, r.fastest_gap_ms, r.floor_ms)
