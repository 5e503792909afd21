"""Lesson 6's arithmetic, pure functions of numbers: the KV cache's bytes per token, the bytes model and the line of
decode time against depth (course.depthtime), the prompt cache's timings, the positions generation processes with
and without a cache, and numpy's generation both ways.

The lesson records the answers and the timings; everything here is recomputed from them on every replay."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Sequence

import numpy as np

from bytesup.course import depthtime, formulas, published
from bytesup.course.loop import ServerTimes, decode_passes
from bytesup.errors import BytesupError
from bytesup.units import KiB, MiB

DEFAULT_CACHE_TYPE = "f16"  # llama.cpp's default for --cache-type-k and --cache-type-v

# Worked examples, from bytesup.course.published: the course's specimen (deepseek-coder-6.7b-instruct, head width
# = width ÷ heads, at lesson 4's 2,048-token context) and the 70B example of the outline and the podcast
# (at the podcast's four-thousand-token context). The podcast's KV figure is its (wrong) claim.
SPEC, BIG, PODCAST, LESSON4 = published.SPECIMEN, published.KV_70B, published.PODCAST_KV_70B, published.LESSON4
PODCAST_KV_BYTES = PODCAST["kilobytes_per_token"] * KiB   # the podcast's "32 KB", read as KiB
@dataclass(frozen=True)
class CacheSetup:
    """The server's context size and KV cache types, and where the types were found."""
    n_ctx: int
    type_k: str
    type_v: str
    type_source: str


class CacheTiming(Protocol):
    """One request of the prompt-cache test as its table shows it."""

    @property
    def label(self) -> str: ...
    @property
    def cache_prompt(self) -> bool: ...
    @property
    def cache_n(self) -> int: ...
    @property
    def prompt_n(self) -> int: ...
    @property
    def prompt_ms(self) -> float: ...


class Resent(Protocol):
    """One request of the no-cache loop: what the server processed and the tokens it gave."""

    @property
    def prompt_n(self) -> int: ...
    @property
    def prompt_ms(self) -> float: ...
    @property
    def tokens(self) -> list[int]: ...


class RequestTimes(ServerTimes, Protocol):
    """A request's timings, with the prompt positions it processed."""

    @property
    def prompt_n(self) -> int: ...


class Steps(Protocol):
    """A generation step by step (bytesup.models.forward.Generation)."""
    tokens: list[int]
    logits: list[np.ndarray]
    flops: list[int]


def element_bytes(cache_type: str) -> float:
    """Bytes per stored number of a llama.cpp KV cache type (formulas.CACHE_TYPE_BYTES; bytesup check keeps its own table)."""
    try:
        return formulas.CACHE_TYPE_BYTES[cache_type.lower()]
    except KeyError:
        raise BytesupError(f"Unknown KV cache type {cache_type!r}; known: {', '.join(formulas.CACHE_TYPE_BYTES)}.") from None


def kv_cache_types(props: dict, slots: list[dict] | None, flags: dict | None) -> tuple[str, str, str]:
    """(K type, V type, where they were found): /props, /slots, the server's flags, else the default."""
    def find(data: Any, keys: tuple[str, ...]) -> Any:
        if isinstance(data, dict):
            for k in keys:
                if isinstance(data.get(k), str):
                    return data[k]
            data = list(data.values())
        if isinstance(data, list):
            for v in data:
                found = find(v, keys)
                if found is not None:
                    return found
        return None

    for data, where in ((props, "/props"), (slots, "/slots")):
        k = find(data, ("cache_type_k", "type_k"))
        v = find(data, ("cache_type_v", "type_v"))
        if k or v:
            return (k or v).lower(), (v or k).lower(), where
    flags = flags or {}
    k = flags.get("--cache-type-k") or flags.get("-ctk")
    v = flags.get("--cache-type-v") or flags.get("-ctv")
    if k or v:
        return (k or DEFAULT_CACHE_TYPE).lower(), (v or DEFAULT_CACHE_TYPE).lower(), "server flags"
    return DEFAULT_CACHE_TYPE, DEFAULT_CACHE_TYPE, "llama.cpp's default (not reported by /props or /slots)"


@dataclass(frozen=True)
class PodcastCheck:
    """The podcast's 70B KV figures beside the computed ones."""
    computed: int                 # bytes per token, computed
    claimed: float                # the podcast's "32 KB" read as KiB, in bytes
    claimed_decimal: float        # the same read as 1,000-byte kilobytes
    per_megabyte_claim: float     # bytes of the podcast's tokens per megabyte at its own per-token figure
    follows: bool                 # that is about one megabyte (MiB or MB, within 10%)
    batch_tokens: int             # the podcast's batch: requests × context

    @property
    def ratio(self) -> float:
        return self.computed / self.claimed


def podcast_check(per_token: int) -> PodcastCheck:
    """The podcast's 70B figures against `per_token`, the 70B example's KV bytes per token computed."""
    per_mb = PODCAST["tokens_per_megabyte"] * PODCAST_KV_BYTES   # the podcast's tokens × its own per-token figure
    return PodcastCheck(computed=per_token, claimed=PODCAST_KV_BYTES,
                        claimed_decimal=PODCAST["kilobytes_per_token"] * 1000, per_megabyte_claim=per_mb,
                        follows=min(abs(per_mb / MiB - 1), abs(per_mb / 1e6 - 1)) <= 0.1,
                        batch_tokens=PODCAST["batch_requests"] * PODCAST["context_tokens"])


@dataclass(frozen=True)
class DepthResult:
    """Decode at one context depth: every repeat's ms per token and tokens per second, and medians."""
    depth: int
    prompt_n: int
    ms_per_token: list[float]
    tokens_per_s: list[float]
    prefill_median: float | None  # None: the prompt came from the cache, nothing worth timing was prefilled
    cache_n: list[int] | None = None  # each repeat's tokens reused from the prompt cache (None: no cache asked)
    # The columns of its table, in order (name, unit), for the view (store.views.page.by_columns).
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "depth": ("depth", "tokens"), "prompt_n": ("prompt_n", "tokens"), "ms_median": ("decode median", "ms/token"),
        "ms_per_token": ("decode samples", "ms/token"), "median": ("decode median", "tokens/s"),
        "low": ("min", "tokens/s"), "high": ("max", "tokens/s"), "tokens_per_s": ("decode samples", "tokens/s"),
        "prefill_median": ("prefill median", "tokens/s")}

    @property
    def ms_median(self) -> float:
        return statistics.median(self.ms_per_token)

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_s)

    @property
    def low(self) -> float:
        return min(self.tokens_per_s)

    @property
    def high(self) -> float:
        return max(self.tokens_per_s)


def bytes_model_predictions(depths: list[int], measured: list[float], weight_bytes: float,
                            kv_bytes_per_tok: float) -> tuple[float, list[float]]:
    """The bytes model of decode with context: the bandwidth that the shallowest depth's decode read,
    (weight bytes + KV bytes per token × depth) × tokens/s, predicts every depth's tokens/s as
    bandwidth ÷ (weight bytes + KV bytes per token × depth). Returns (bandwidth in bytes/s, predictions)."""
    bandwidth = measured[0] * (weight_bytes + kv_bytes_per_tok * depths[0])
    return bandwidth, [formulas.decode_tokens_per_s_at_depth(bandwidth, weight_bytes, kv_bytes_per_tok, d) for d in depths]


@dataclass(frozen=True)
class BytesModelPoint:
    """One depth under the bytes model: what it reads per token, the speed that predicts, and the measured one."""
    depth: int
    bytes_per_token: float        # weights + KV bytes per token × depth
    predicted: float
    measured: DepthResult
    bandwidth: float              # bytes/s, from the shallowest depth
    # The columns of its table, in order (name, unit), for the view (store.views.page.by_columns).
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {
        "depth": ("depth", "tokens"), "bytes_per_token": ("bytes read per token", "bytes"),
        "predicted": ("predicted", "tokens/s"), "median": ("measured median", "tokens/s"),
        "low": ("measured min", "tokens/s"), "high": ("measured max", "tokens/s"), "ratio": ("measured ÷ predicted", "×")}

    @property
    def ratio(self) -> float:
        return self.measured.median / self.predicted

    @property
    def median(self) -> float:
        return self.measured.median

    @property
    def low(self) -> float:
        return self.measured.low

    @property
    def high(self) -> float:
        return self.measured.high


def bytes_model_points(depths: list[DepthResult], weight_bytes: float, kv_bytes_per_tok: float) -> list[BytesModelPoint]:
    bandwidth, predicted = bytes_model_predictions([d.depth for d in depths], [d.median for d in depths],
                                                   weight_bytes, kv_bytes_per_tok)
    return [BytesModelPoint(d.depth, weight_bytes + kv_bytes_per_tok * d.depth, p, d, bandwidth)
            for d, p in zip(depths, predicted, strict=True)]


@dataclass(frozen=True)
class AttentionShape:
    """What splitting the depth line's slope needs of a model: its KV bytes per token and attention's shape."""
    kv_bytes_per_token: float
    n_layer: int
    n_head: int
    head_dim: int

    @property
    def flops_per_position(self) -> int:
        return depthtime.attention_flops_per_position(self.n_layer, self.n_head, self.head_dim)


SPARK_ROUNDING = 0.05  # tokens/s: half the last digit of the published decode figures
NO_SHAPE = "the served model's file is not readable here, so its KV bytes per token and heads are unknown"


@dataclass(frozen=True)
class SparkSlope:
    """The published figures' slope split at the published bandwidth, and the range of its KV share that the
    figures' rounding allows."""
    split: depthtime.Split
    kv_share_low: float
    kv_share_high: float


@dataclass(frozen=True)
class CacheKnee:
    """Where the KV cache leaves the last-level cache: d* = cache bytes ÷ KV bytes per position (None: `why_none`)."""
    cache_bytes: float | None
    cache_source: str | None
    kv_bytes_per_position: float | None
    knee: float | None
    why_none: str | None


def cache_knee(cache: tuple[float | None, str | None, str | None], shape: AttentionShape | None) -> CacheKnee:
    """d* from the run's last-level cache (bytes, where the size came from, or why there is none) and the served
    model's KV bytes per position."""
    size, source, why = cache
    kv = shape.kv_bytes_per_token if shape is not None else None
    if shape is None:
        why = NO_SHAPE
    elif size is None:
        why = why or "this run recorded no last-level cache size"
    knee = depthtime.knee_depth(size, kv)
    return CacheKnee(size, source, kv, knee, None if knee is not None else why)


@dataclass(frozen=True)
class DepthModel:
    """t(d) = t(0) + d × s on the run's depths, bent at the knee d* where it lies among them and the depths past it
    show it (s₁, s₂); each slope split at the run's bandwidth (None: `why_no_split` says why), and the published
    Spark's slope split the same way. `why_no_knee`: why the model is one line though d* lies among the depths (too
    few depths below it); `knee_test`: the fitted depths past d* against the line below it, which chose the model."""
    line: depthtime.Line
    points: list[depthtime.DepthPrediction]
    shape: AttentionShape | None
    split: depthtime.Split | None
    why_no_split: str | None
    spark: SparkSlope
    cache: CacheKnee | None = None
    split2: depthtime.Split | None = None
    why_no_knee: str | None = None
    knee_test: depthtime.KneeTest | None = None

    @property
    def held_out(self) -> list[depthtime.DepthPrediction]:
        return depthtime.held_out(self.points)


def spark_slope(specimen: AttentionShape) -> SparkSlope:
    """s = (1000 ÷ 29.6 − 1000 ÷ 33.2) ÷ 1,921 ms from lesson 4's figures, against the specimen's KV bytes per
    token (the worked example's) at 273 GB/s; the share again with each figure moved by its rounding."""
    short, long, n = LESSON4["decode_short_tokens_per_s"], LESSON4["decode_long_tokens_per_s"], LESSON4["long_prompt_tokens"]

    def split(slope_ms: float) -> depthtime.Split:
        return depthtime.Split(slope_ms, specimen.kv_bytes_per_token, published.SPARK_BANDWIDTH_GB_PER_S,
                               specimen.flops_per_position)

    steepest = split(depthtime.published_slope_ms(short + SPARK_ROUNDING, long - SPARK_ROUNDING, n))
    flattest = split(depthtime.published_slope_ms(short - SPARK_ROUNDING, long + SPARK_ROUNDING, n))
    return SparkSlope(split(depthtime.published_slope_ms(short, long, n)), steepest.kv_share, flattest.kv_share)


def depth_model(depths: list[DepthResult], n_ctx: int, shape: AttentionShape | None, bandwidth_gbs: float | None,
                why_no_bandwidth: str | None, specimen: AttentionShape,
                cache: tuple[float | None, str | None, str | None] = (None, None, None)) -> DepthModel:
    """The model through the median ms per token (depthtime.choose): the line through the depths up to half the
    context, bent at d* where the run's last-level cache (`cache`: bytes, source, or why none) and the model's KV
    bytes place it among the depths and the fitted depths past it show it, else one line through every fitted depth;
    every depth predicted by it with its spread, and each slope split where the run's bandwidth and the model's shape
    are known; beside it the published Spark's slope split with the specimen's shape. ValueError when fewer than two
    depths lie in the fitted half."""
    at, ms = [d.depth for d in depths], [d.ms_median for d in depths]
    iqr = [depthtime.interquartile_ms(d.ms_per_token) for d in depths]
    knee = cache_knee(cache, shape)
    fit_until, why_no_knee, test = depthtime.default_fit_until(n_ctx), None, None
    try:
        line, test = depthtime.choose(at, ms, fit_until, knee.knee, iqr)
    except ValueError as exc:  # too few depths below the knee: the line, and why
        line, why_no_knee = depthtime.fit_line(at, ms, fit_until), str(exc)
    split = split2 = None
    why = NO_SHAPE if shape is None else why_no_bandwidth
    if shape is not None and bandwidth_gbs is not None:
        def at_bandwidth(slope_ms: float) -> depthtime.Split:
            return depthtime.Split(slope_ms, shape.kv_bytes_per_token, bandwidth_gbs, shape.flops_per_position)
        split, why = at_bandwidth(line.slope_ms), None
        split2 = at_bandwidth(line.slope2_ms) if line.slope2_ms is not None else None
    return DepthModel(line, depthtime.predictions(line, at, ms, iqr), shape, split, why, spark_slope(specimen),
                      knee, split2, why_no_knee, test)


@dataclass(frozen=True)
class PromptCacheSummary:
    first: list[CacheTiming]      # the cold requests with the cache on
    second: list[CacheTiming]     # the same prompt again, cache on
    cached_ms: list[float]
    uncached_ms: list[float]
    restored: int                 # cache_n of the first prompt after the filler used the slot

    @property
    def speedup(self) -> float:
        return statistics.median(self.uncached_ms) / statistics.median(self.cached_ms)


def prompt_cache_summary(requests: Sequence[CacheTiming], again: str) -> PromptCacheSummary:
    """The cold and warm requests with the cache on, their times against the cache off, and what `again` (the first
    prompt after another) reused."""
    first = [r for r in requests if r.label == "first, cache_prompt true"]
    second = [r for r in requests if r.label == "second, cache_prompt true"]
    return PromptCacheSummary(first=first, second=second, cached_ms=[r.prompt_ms for r in second],
                              uncached_ms=[r.prompt_ms for r in requests if not r.cache_prompt],
                              restored=next(r.cache_n for r in requests if r.label == again))


def tokens_with_cache(prompt: int, n: int) -> int:
    """Positions run through the model to generate n tokens with a KV cache: the prompt once, then
    one new position per pass (the last token drawn is never fed back)."""
    return prompt + n - 1


def tokens_without_cache(prompt: int, n: int) -> int:
    """Without a cache every pass re-reads the whole sequence: Σ (prompt + i − 1) for i = 1 … n."""
    return n * prompt + n * (n - 1) // 2


def attention_pairs_with_cache(prompt: int, n: int) -> int:
    """Query-key pairs scored: the prompt's causal triangle, then each new position × all before it."""
    return prompt * (prompt + 1) // 2 + sum(prompt + i - 1 for i in range(2, n + 1))


def attention_pairs_without_cache(prompt: int, n: int) -> int:
    """Without a cache each pass scores the whole causal triangle of its sequence again."""
    return sum((prompt + i - 1) * (prompt + i) // 2 for i in range(1, n + 1))


def growth_exponent(n1: int, v1: float, n2: int, v2: float) -> float:
    """k in v ∝ n^k between two points."""
    return math.log(v2 / v1) / math.log(n2 / n1)


@dataclass(frozen=True)
class CacheVsNoCache:
    timings: RequestTimes         # the one request's
    tokens: list[int]             # its tokens
    generated: list[int]          # the re-sent requests' tokens, in order
    positions_resent: int         # Σ prompt_n of the re-sent requests
    ms_resent: float              # Σ prompt_ms of the re-sent requests

    @property
    def decode_passes(self) -> int:
        return decode_passes(self.timings)

    @property
    def positions_cached(self) -> int:
        """The prompt once, then one position per decode pass."""
        return self.timings.prompt_n + self.decode_passes

    @property
    def ms_cached(self) -> float:
        return self.timings.prompt_ms + self.timings.predicted_ms


def cache_vs_no_cache(timings: RequestTimes, tokens: list[int], steps: Sequence[Resent]) -> CacheVsNoCache:
    return CacheVsNoCache(timings=timings, tokens=tokens, generated=[t for s in steps for t in s.tokens],
                          positions_resent=sum(s.prompt_n for s in steps), ms_resent=sum(s.prompt_ms for s in steps))


@dataclass(frozen=True)
class NumpyDecode:
    """numpy's greedy generation with a KV cache and recomputing every prefix; times as recorded."""
    prompt_n: int
    cached: Steps
    recomputed: Steps
    cached_ms: list[float]
    recomputed_ms: list[float]

    @property
    def largest_logit_difference(self) -> float:
        return max(float(np.max(np.abs(a - b))) for a, b in zip(self.cached.logits, self.recomputed.logits, strict=True))

    def totals(self, n: int) -> tuple[int, int, float, float]:
        """FLOPs and milliseconds of the first n tokens: cached, recomputed."""
        return (sum(self.cached.flops[:n]), sum(self.recomputed.flops[:n]), sum(self.cached_ms[:n]), sum(self.recomputed_ms[:n]))


def same_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two generations share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
