"""Lesson 6's view: its tables, notes and plots, rendered from the records its arithmetic returned
(bytesup.course.kvcache, bytesup.course.depthtime) and its requests' records (bytesup.store.facts.lesson06).

It records nothing and measures nothing: each function writes to the lesson's page (`Page`: `table`, `note`,
`plot`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bytesup.course import depthtime, published
from bytesup.course.kvcache import (BIG, LESSON4, PODCAST, PODCAST_KV_BYTES, BytesModelPoint, CacheSetup, CacheVsNoCache,
                                    DepthModel, DepthResult, NumpyDecode, PodcastCheck, PromptCacheSummary,
                                    SparkSlope, growth_exponent, podcast_check, same_prefix, tokens_with_cache,
                                    tokens_without_cache)
from bytesup.store.facts.lesson06 import CacheRequest, CostRow, KvExample, ResendStep, WithAndWithout, with_and_without
from bytesup.store.plans.lesson06 import COST_N, DECODE_N, NUMPY_LENGTHS, NUMPY_N
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns
from bytesup.store.views.page import Page, by_columns
from bytesup.units import GiB, MiB


KV_COLUMNS = ["label", "n_layer", "n_head_kv", "head_dim", "cache_type", "bytes_per_element", "bytes_per_token",
              "kib_per_token", "context", "mib_at_context", "source"]


@dataclass(frozen=True)
class WayRow:
    way: str = column("way")
    requests: int = column("requests")
    positions: int = column("positions processed")
    ms: float = column("time", "ms")
    tokens: list[int] = column("tokens", "ids")


def way_rows(c: CacheVsNoCache) -> list[WayRow]:
    return [WayRow("one request (KV cache across passes)", 1, c.positions_cached, c.ms_cached, c.tokens),
            WayRow("re-send the growing text (no cache)", COST_N, c.positions_resent, c.ms_resent, c.generated)]


@dataclass(frozen=True)
class NumpyRow:
    n: int = column("tokens n")
    flops: WithAndWithout = with_and_without("FLOPs with the cache", "FLOPs recomputing", "FLOPs ratio", "FLOP")
    ms: WithAndWithout = with_and_without("time with the cache", "time recomputing", "time ratio", "ms")


def numpy_row(d: NumpyDecode, n: int) -> NumpyRow:
    fc, fr, mc, mr = d.totals(n)
    return NumpyRow(n, WithAndWithout(fc, fr), WithAndWithout(mc, mr))


# The columns each wide table shows in the main text (by field); every column is in the full table, under Details.
KV_MAIN = ["label", "n_layer", "n_head_kv", "head_dim", "bytes_per_element", "bytes_per_token", "context",
           "mib_at_context"]
DEPTH_MAIN = ["depth", "prompt_n", "ms_median", "median", "low", "high", "prefill_median"]
LINE_MAIN = ["depth", "measured_ms", "predicted_ms", "measured_tokens_per_s", "predicted_tokens_per_s", "error", "role"]


def narrowed(page: Page, name: str, title: str, full_title: str, record: type, full: list[str], keep: list[str],
             records: list[Any], notes: list[str], formulas: list[str], shown: dict[str, Any] | None = None) -> None:
    """The table `name`_main with the fields `keep` and the plain notes, then the full table `name` with every field
    `full` under Details, with the notes that give the formulas."""
    page.table(f"{name}_main", title, *by_columns(record, keep, records, shown), notes=notes)
    page.table(name, full_title, *by_columns(record, full, records, shown), notes=formulas).detail = True


def show_kv_cache_size(page: Page, examples: list[KvExample], served: KvExample | None,
                         info: dict | None, setup: CacheSetup) -> None:
    course, big = examples[-2], examples[-1]
    formulas = ["The 2 is K and V: every layer stores a key and a value vector of head width for every KV head."]
    notes = []
    if served is not None and info is not None:
        hp, weights = info["hyperparameters"], info["tensor_bytes"]
        groups = hp["n_head"] / hp["n_head_kv"]
        formulas.append(f"{served.label}: 2 × {served.n_layer} × {served.n_head_kv} × {served.head_dim} × "
                        f"{served.bytes_per_element:g} = {served.per_token:,} bytes per token.")
        notes += [
            (f"{served.label}: {served.per_token:,} bytes per token; a full {setup.n_ctx:,}-token context holds "
             f"{served.mib_at_context:.4g} MiB, {100 * served.per_token * setup.n_ctx / weights:.3g}% of the model's "
             f"{weights:,} bytes of weights."),
            (f"{hp['n_head']} query heads share {hp['n_head_kv']} KV heads ({groups:g} per KV head, grouped-query "
             f"attention): the cache is {groups:g} × smaller than one K and V per query head."
             if groups > 1 else
             f"Each of the {hp['n_head']} query heads has its own K and V (no grouped-query attention)."),
            f"Cache type {served.cache_type}: {setup.type_source}.",
        ]
    else:
        notes.append("The served model's file is not readable here (pass --model PATH.gguf, the file the server runs), "
                     "so its layers and KV heads are unknown and only the worked examples are computed; the rest of "
                     "the lesson needs only the server.")
    notes += [
        (f"{course.label}: {course.per_token:,} bytes ({course.kib_per_token:g} KiB) per token, "
        f"{course.mib_at_context / 1024:.3g} GiB at its {course.context:,}-token context."),
        *podcast_notes(big, podcast_check(big.per_token)),
    ]
    formula = "KV cache bytes per token = 2 × layers × KV heads × head width × bytes per element"
    narrowed(page, "kv_cache_size", "KV cache bytes per token", formula, KvExample, KV_COLUMNS, KV_MAIN, examples,
             notes, formulas, {"bytes_per_token": int})


def podcast_notes(big: KvExample, pod: PodcastCheck) -> list[str]:
    tokens = PODCAST["tokens_per_megabyte"]
    return [
        f"70B example: {big.per_token:,} bytes = {big.kib_per_token:g} KiB per token "
        f"({'equals' if big.per_token == BIG['bytes_per_token'] else 'differs from'} the published {BIG['bytes_per_token']:,}). "
        f"The podcast says about {PODCAST['kilobytes_per_token']} KB ({PODCAST_KV_BYTES:,} bytes): "
        + (f"{pod.ratio:.3g}× too small ({big.per_token / pod.claimed_decimal:.3g}× if KB means 1,000 bytes)." if pod.ratio > 1 else
           f"{1 / pod.ratio:.3g}× too large." if pod.ratio < 1 else "the same."),
        f"The podcast's \"one megabyte per {tokens} tokens\": {tokens} × its {PODCAST['kilobytes_per_token']} KB = "
        f"{pod.per_megabyte_claim / MiB:.3g} MiB ({pod.per_megabyte_claim / 1e6:.3g} MB), "
        + ("so it follows from the podcast's own per-token figure" if pod.follows else "which is not one megabyte either")
        + f"; computed, 1 MiB holds {MiB / big.per_token:.3g} tokens of the 70B cache, and {tokens} "
        f"tokens take {tokens * big.per_token / MiB:.4g} MiB.",
        (f"The podcast's batch of {PODCAST['batch_requests']} requests × {PODCAST['context_tokens']:,} tokens needs "
        f"{pod.batch_tokens * big.per_token / GiB:.4g} GiB of 70B KV cache "
        f"({pod.batch_tokens * PODCAST_KV_BYTES / GiB:.4g} GiB by its own figure)."),
    ]


def show_decode_vs_depth(page: Page, n_ctx: int, depths: list[DepthResult], repeat: int, load: Any, cores: Any,
                         past_knee: tuple[int, float] | None = None) -> None:
    """`past_knee`: the depth the plan put halfway from the knee d* to the deepest depth, and d* (None: none)."""
    widest = max(depths, key=lambda d: d.high / d.low)
    widest_ratio = widest.high / widest.low
    first, last = depths[0], depths[-1]
    change = 100 * (last.median - first.median) / first.median
    pub_short, pub_long = LESSON4["decode_short_tokens_per_s"], LESSON4["decode_long_tokens_per_s"]
    pub_change = 100 * (pub_long - pub_short) / pub_short
    title = f"Decode speed as the context grows ({DECODE_N} tokens decoded at each depth)"
    narrowed(
        page, "decode_vs_depth", title, f"{title}, with every sample", DepthResult, list(DepthResult.COLUMNS),
        DEPTH_MAIN, depths,
        formulas=["tokens/s = 1000 ÷ ms per token, sample by sample; the median, min and max are of those samples."],
        notes=[
            (f"Depths are fractions of the {n_ctx:,}-token context"
             + (f", except {past_knee[0]:,}, halfway from d* = {past_knee[1]:,.0f} (where the K and V fill the run's "
                "last-level cache) to the deepest depth, so that the slope past d* is fitted over more than a few "
                "positions" if past_knee is not None else "")
             + "; each decoded token attends to every earlier position, so each pass reads more of the KV cache the "
               "deeper it is."),
            (f"From depth {first.depth} to {last.depth:,} the median decode speed went from {first.median:.4g} to "
            f"{last.median:.4g} tokens/s ({change:+.3g}%); per token {first.ms_median:.4g} → {last.ms_median:.4g} ms."),
            (f"Published (lesson 4, {published.SPARK_NAME}): {pub_short:g} → {pub_long:g} tokens/s after a "
            f"{LESSON4['long_prompt_tokens']:,}-token prompt, {pub_change:+.3g}%."),
            f"{repeat} repeats per depth. The widest spread "
            f"at one depth is {widest_ratio:.3g}× (max ÷ min, at depth {widest.depth:,}): differences smaller than that are "
            f"noise" + (f"; the host's load average was {load[0]:g} on {cores} cores." if load and cores else "."),
            *cache_notes(depths),
        ],
    )


def cache_notes(depths: list[DepthResult]) -> list[str]:
    """What the prompt cache gave each depth, from the server's own timings (nothing for a run without it)."""
    if any(d.cache_n is None for d in depths):
        return []
    reused = "; ".join(f"depth {d.depth:,}: {', '.join(f'{n:,}' for n in d.cache_n or [])} reused, prompt_n {d.prompt_n}"
                       for d in depths)
    return [(f"Each depth's prompt came from the prompt cache: one prefill of the deepest, {max(d.depth for d in depths):,} "
             "tokens, then every depth as a prefix of it, deepest first (cache_prompt true). The server's timings say "
             f"how many tokens it reused (cache_n) and how many it evaluated (prompt_n): {reused}. So prefill is not "
             "timed here (lesson 4 and the prompt-cache table do); the decode after each depth is the same.")]


def show_bytes_model(page: Page, points: list[BytesModelPoint], kv: float, weights: float) -> None:
    shallow, deep = points[0], points[-1]
    ratios = [p.ratio for p in points]
    page.table(
        "bytes_model_with_context", "Decode at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d)",
        *by_columns(BytesModelPoint, list(BytesModelPoint.COLUMNS), points),
        notes=[(f"Bandwidth from the shallowest depth: {shallow.measured.median:.4g} tokens/s × "
               f"{(weights + kv * shallow.depth) / 1e6:.4g} MB = {shallow.bandwidth / 1e9:.3g} GB/s; each deeper token "
               f"also reads {kv:,} bytes of KV cache per earlier position, so at depth {deep.depth:,} it reads "
               f"{100 * kv * deep.depth / weights:.3g}% more than the weights alone."),
               (f"Measured ÷ predicted ranges {min(ratios):.3g}–{max(ratios):.3g}: below 1 where attention's arithmetic "
               f"or other per-position work grows faster than its bytes; the capstone applies the same model to the "
               f"published DGX Spark figures.")],
    )


def show_depth_line(page: Page, m: DepthModel | None, why_not: str | None) -> None:
    if m is None:
        return page.note(f"No line of decode time against depth: {why_not}.")
    line = m.line
    title = ("Decode at depth d: t(d) = t(0) + d × s, fitted up to depth {:,}, predicting the deeper depths"
             if line.knee is None else
             "Decode at depth d: t(d) = t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*), d* = {:,.0f} from the last-level "
             "cache, fitted up to depth {:,}, predicting the deeper depths").format(
        *((line.fit_until,) if line.knee is None else (line.knee, line.fit_until)))
    plain = (f"Decode at depth d: a line through the depths up to {line.fit_until:,}, predicting the deeper depths"
             + ("" if line.knee is None else
                f", bent at d* = {line.knee:,.0f} where the K and V outgrow the last-level cache"))
    narrowed(page, "decode_at_depth_line", plain, title, depthtime.DepthPrediction,
             list(depthtime.DepthPrediction.COLUMNS), LINE_MAIN, m.points,
             notes=[held_out_note(m.held_out, line.knee), knee_note(m)],
             formulas=[fit_note(line, m.knee_test), split_note(m), spark_note(m.spark, m.split), SPREAD_NOTE])


SPREAD_NOTE = ("The spread of a held-out prediction: the root of the sum of the squares of how far it moves when each "
               "fitted depth's median moves by its samples' interquartile range (the fit is linear in them), ÷ the "
               "predicted step, plus the depth's own interquartile range ÷ its median; a miss whose spread is wider than "
               f"±{100 * depthtime.TOLERANCE:.0f}% cannot tell a model that holds from one that does not.")


def _depths(ds: tuple[int, ...]) -> str:
    return ", ".join(f"{d:,}" for d in ds)


def fit_note(line: depthtime.Line, test: depthtime.KneeTest | None = None) -> str:
    if line.knee is None:
        where = ("every fitted depth, below and past d*" if test is not None else "the depths up to half the context")
        return (f"The least-squares line through the median ms per token at {where} "
                f"({_depths(line.fitted)}): t(0) = {line.t0_ms:.4g} ms and s = {1e3 * line.slope_ms:.4g} µs per "
                "earlier position; the error is predicted ÷ measured tokens/s − 1.")
    beyond = (f"s₂ = {1e3 * line.slope2_ms:.4g} µs per position beyond it, through the fitted depths past d* "
              f"({_depths(line.beyond)})" if line.slope2_ms is not None else
              "s₂ unknown: no fitted depth lies beyond d*")
    return (f"t(0) = {line.t0_ms:.4g} ms and s₁ = {1e3 * line.slope_ms:.4g} µs per earlier position by least squares "
            f"through the median ms per token at the depths up to d* ({_depths(line.below)}); " + beyond
            + "; the error is predicted ÷ measured tokens/s − 1.")


def knee_note(m: DepthModel) -> str:
    c = m.cache
    if c is None:
        return "No knee is placed: the model is the line."
    if c.knee is None or c.cache_bytes is None or c.kv_bytes_per_position is None:
        return f"No knee is placed, so the model is the line: {c.why_none}."
    source = f" ({c.cache_source})" if c.cache_source else ""
    head = (f"The knee: the run's last-level cache, {c.cache_bytes / MiB:,.0f} MiB{source}, holds the K and V of "
            f"d* = {c.cache_bytes:,.0f} ÷ {c.kv_bytes_per_position:,.0f} bytes per position = {c.knee:,.0f} positions")
    depths = [p.depth for p in m.points]
    if m.why_no_knee is not None:
        return head + f"; the model stays the line, because {m.why_no_knee}."
    if m.line.knee is None and m.knee_test is None:
        return (head + f", beyond the deepest depth, {max(depths):,}: every depth's K and V fit in the cache, so the "
                "model is the line.")
    before = max((d for d in depths if d <= c.knee), default=None)
    after = min(d for d in depths if d > c.knee)
    return (head + f", between depths {before:,} and {after:,}: below it a token's K and V reads can come from the "
            "cache, beyond it they no longer fit and may come from memory."
            + ("" if m.knee_test is None else " " + knee_test_note(m.knee_test)))


def knee_test_note(t: depthtime.KneeTest) -> str:
    """Whether the fitted depths past d* showed the knee, in one sentence from their steps against the line below d*."""
    past = "; ".join(f"{p.depth:,} took {p.measured_ms:.4g} ms per token where the line gives {p.predicted_ms:.4g} ms "
                     + ("(no step at all)" if p.error is None else
                        f"({100 * p.error:+.1f}%, the prediction's spread ±{100 * (p.spread or 0.0):.0f}%)")
                     for p in t.past if p.predicted_ms is not None)
    head = (f"Against the line through the depths below d* ({_depths(t.below.fitted)}), depth"
            f"{'s' if len(t.past) > 1 else ''} {past}")
    if any(p.error is None for p in t.past):
        return (head + ": a line that gives no step there cannot show the knee, so the model is one line through "
                "every fitted depth.")
    if t.shown:
        return (head + f": slower by more than that spread, so the knee shows in this run, and past d* the model "
                f"takes s₂ = {1e3 * t.slope2_ms:.4g} µs per position.")
    if t.above:
        return (head + f": above it, yet s₂ = {1e3 * t.slope2_ms:.4g} µs per position is no cost, so the model is "
                "one line through every fitted depth.")
    beyond = ("" if all(p.error is not None and p.error <= 0 for p in t.past) else
              f" beyond the spread of {'their predictions' if len(t.past) > 1 else 'its prediction'}")
    return (head + f": no slower than the line through the shallower ones{beyond}, so the KV cache leaving the "
            "last-level cache did not show in this run, and the model is one line through every fitted depth.")


def held_out_note(held: list[depthtime.DepthPrediction], knee: float | None = None) -> str:
    if not held:
        return "No depth lies beyond the fitted ones, so none is held out."
    unknown = [p for p in held if p.predicted_ms is None]
    worst = depthtime.worst(held)
    within = [p for p in held if p.within]
    text = ""
    if worst is not None:
        text = (f"Held out, predicted by a model not fitted on them: {len(within)} of {len(held)} depths within "
                f"±{100 * depthtime.TOLERANCE:.0f}% of measured; the worst, depth {worst.depth:,}, "
                + (f"at {100 * worst.error:+.1f}%." if worst.error is not None else
                   f"where the model gives a step of {worst.predicted_ms:.4g} ms: no speed at all."))
    if unknown:
        text += (" " if text else "") + (
            f"The run cannot tell what a position costs beyond the knee at depth{'s' if len(unknown) > 1 else ''} "
            f"{_depths(tuple(p.depth for p in unknown))}: no fitted depth lies beyond d*, so s₂ is unknown (the knee "
            "needs two depths past d*, one to fit s₂ and one to predict).")
    vague = [p for p in held if p.predicted_ms is not None and p.spread is not None and not p.within and not p.can_tell]
    if vague:
        text += (f" The run cannot tell whether the model holds at depth{'s' if len(vague) > 1 else ''} "
                 + ", ".join(f"{p.depth:,} (spread ±{100 * p.spread:.0f}%)" for p in vague if p.spread is not None)
                 + f": the samples scatter wider than ±{100 * depthtime.TOLERANCE:.0f}% once carried into the "
                 "prediction" + (", and s₂, fitted over the short span from d* to the first depth past it, multiplies "
                                 "that scatter." if knee is not None and any(p.depth > knee for p in vague) else "."))
    return text


def split_note(m: DepthModel) -> str:
    sp, shape = m.split, m.shape
    if sp is None or shape is None:
        return f"The KV read is not split out of s: {m.why_no_split}."
    s = "s" if m.line.knee is None else "s₁"
    rest = (f"The rest, {1e3 * sp.rest_ms:.3g} µs, is attention's work per position: 4 × {shape.n_layer} layers × "
            f"{shape.n_head} heads × {shape.head_dim} = {sp.flops_per_position:,} FLOPs (q·k and V's weighted sum, 2 "
            f"each per element), at {sp.rest_gflops:.3g} GFLOP/s." if sp.rest_gflops is not None else
            "The KV read alone takes s or more: at that bandwidth nothing is left for attention's arithmetic.")
    text = (f"At the run's bandwidth reading, {sp.bandwidth_gbs:.3g} GB/s (median), one position's "
            f"{sp.kv_bytes_per_token:,.0f} bytes of K and V take {1e3 * sp.kv_read_ms:.3g} µs to read: "
            f"{100 * sp.kv_share:.2g}% of {s}. " + rest + f" Here {s} is mostly {sp.mostly}.")
    s2 = m.split2
    if s2 is None:
        return text
    # s₂ > s₁ wherever the knee is used (course.depthtime.choose): the extra cost per position past the cache
    return text + (f" Beyond d*, the same read is {100 * s2.kv_share:.2g}% of s₂ = {1e3 * s2.slope_ms:.3g} µs; s₂ − s₁ "
                   f"= {1e3 * (s2.slope_ms - sp.slope_ms):+.3g} µs per position is "
                   f"{(s2.slope_ms - sp.slope_ms) / sp.kv_read_ms:.2g}× the KV read at the bandwidth.")


def spark_note(spark: SparkSlope, here: depthtime.Split | None) -> str:
    sp = spark.split
    short, long, n = LESSON4["decode_short_tokens_per_s"], LESSON4["decode_long_tokens_per_s"], LESSON4["long_prompt_tokens"]
    return (f"Published ({published.SPARK_NAME}, lesson 4, {published.SPECIMEN_NAME}): {short:g} → {long:g} tokens/s "
            f"after a {n:,}-token prompt, so s = (1000 ÷ {long:g} − 1000 ÷ {short:g}) ÷ {n:,} = {1e3 * sp.slope_ms:.4g} µs "
            f"per position; its KV read, {sp.kv_bytes_per_token:,.0f} bytes ÷ {sp.bandwidth_gbs:g} GB/s = "
            f"{1e3 * sp.kv_read_ms:.4g} µs, is {100 * sp.kv_share:.0f}% of it ({100 * spark.kv_share_low:.0f}–"
            f"{100 * spark.kv_share_high:.0f}% within the figures' rounding): there s is mostly {sp.mostly}"
            + (f", here mostly {here.mostly} ({100 * here.kv_share:.2g}% the KV read)." if here is not None else "."))


def show_depth_plot(page: Page, depths: list[DepthResult], points: list[BytesModelPoint] | None,
                      model: DepthModel | None) -> None:
    xs = [float(d.depth) for d in depths]
    series = [Series(label="median (min–max band)", x=xs, y=[d.median for d in depths],
                     y_min=[d.low for d in depths], y_max=[d.high for d in depths])]
    if points is not None:
        series.append(Series(label="bytes model: bandwidth ÷ (weights + KV × depth)", x=xs, y=[p.predicted for p in points],
                             style="dashed"))
    if model is not None:
        line = model.line
        at = sorted({*(float(p.depth) for p in model.points), *([] if line.knee is None else [line.knee])})
        speeds = [(d, 1e3 / t) for d in at if (t := line.ms_at(d)) is not None and t > 0]
        label = (f"line fitted up to depth {line.fit_until:,}: 1000 ÷ (t(0) + d × s)" if line.knee is None else
                 f"knee model fitted up to depth {line.fit_until:,}: 1000 ÷ (t(0) + s₁ × min(d, d*) + s₂ × max(0, d − d*))")
        series.append(Series(label=label, x=[x for x, _ in speeds], y=[y for _, y in speeds], style="dashed"))
        knee = line.knee if model.knee_test is None else model.knee_test.knee  # marked where it was tested, too
        if knee is not None:
            ys = [d.low for d in depths] + [d.high for d in depths] + [y for _, y in speeds]
            series.append(Series(label=f"d* = {knee:,.0f}: the K and V fill the last-level cache",
                                 x=[knee, knee], y=[min(ys), max(ys)], style="dashed"))
    page.plot("decode_vs_depth", "Decode speed vs context depth", "context depth (tokens)", "decode tokens/s", series)


def show_prompt_cache(page: Page, length: int, requests: list[CacheRequest], s: PromptCacheSummary) -> None:
    cold = all(r.cache_n == 0 for r in s.first)
    full_match = all(r.prompt_n == 1 and r.cache_n + r.prompt_n == length for r in s.second)
    page.table(
        "prompt_cache", f"The same {length:,}-token prompt with and without the prompt cache (slot 0)",
        columns(CacheRequest), cells(requests),
        notes=[
            (f"First request with the cache on: cache_n = {', '.join(str(r.cache_n) for r in s.first)} "
            f"({'cold, as intended' if cold else 'NOT cold'}); the second: cache_n = "
            f"{', '.join(str(r.cache_n) for r in s.second)} of {length:,}, prompt_n = "
            f"{', '.join(str(r.prompt_n) for r in s.second)}."),
            f"Time to first token: {statistics.median(s.cached_ms):.4g} ms cached vs "
            f"{statistics.median(s.uncached_ms):.4g} ms with cache_prompt false (medians): "
            + (f"{s.speedup:.3g}× faster, the cached prefix skipping prefill." if s.speedup > 1 else
               f"the cached request was not faster ({s.speedup:.3g}×)."),
        ] + ([
            ("Even on a full match the second request processed 1 token: the server re-evaluates the last prompt "
            "position so that it has logits to sample the first token from.")
        ] if full_match else []) + [
            f"After another prompt used the slot, the first prompt came back with cache_n = {s.restored:,}"
            + (": the server restored it from its host-memory prompt cache, so a different prompt alone does not "
               "make a cache cold." if s.restored > 0 else ": the slot's cache had been replaced."),
        ],
    )


def show_cost_formula(page: Page, p: int, rows: list[CostRow]) -> None:
    a, b = rows[-2], rows[-1]
    page.table(
        "cost_formula", f"Positions processed to generate n tokens after a {p}-token prompt",
        columns(CostRow), cells(rows),
        notes=[
            (f"With a cache: the prompt once, then one new position per pass, {p} + n − 1. Without: pass i re-reads "
            f"all {p} + i − 1 positions, n × {p} + n(n − 1)/2 in all."),
            (f"Growth from n = {a.n:,} to {b.n:,}: positions with a cache ∝ "
            f"n^{growth_exponent(a.n, a.positions.with_cache, b.n, b.positions.with_cache):.2f}, without ∝ "
            f"n^{growth_exponent(a.n, a.positions.without, b.n, b.positions.without):.2f}; attention pairs with a cache ∝ "
            f"n^{growth_exponent(a.n, a.pairs.with_cache, b.n, b.pairs.with_cache):.2f}, without ∝ "
            f"n^{growth_exponent(a.n, a.pairs.without, b.n, b.pairs.without):.2f} "
            f"(the podcast's n and n² vs n² and n³)."),
        ],
    )


def show_no_cache_requests(page: Page, p: int, steps: list[ResendStep]) -> None:
    total = sum(s.prompt_n for s in steps)
    series = tokens_without_cache(p, COST_N)
    page.table(
        "no_cache_requests", f"{COST_N} tokens, one request per token, each re-sending the whole text (cache_prompt false)",
        columns(ResendStep), cells(steps),
        notes=[
            (f"prompt_n adds up to {total:,}; the series {COST_N} × {p} + {COST_N}·{COST_N - 1}/2 = "
            f"{series:,} ({'equal' if total == series else 'NOT equal'})."),
        ],
    )


def show_cache_vs_no_cache(page: Page, p: int, c: CacheVsNoCache) -> None:
    t = c.timings
    ratio_n, ratio_ms = c.positions_resent / c.positions_cached, c.ms_resent / c.ms_cached
    same = c.generated == c.tokens
    page.table(
        "cache_vs_no_cache", f"Generating {COST_N} tokens with and without the KV cache",
        columns(WayRow), cells(way_rows(c)),
        notes=[
            (f"With the cache: prompt_n {t.prompt_n} + {c.decode_passes} decode passes = {c.positions_cached} positions "
            f"(formula: {tokens_with_cache(p, COST_N)}); without: {c.positions_resent:,}, {ratio_n:.3g}× as many."),
            (f"Time: {c.ms_cached:.4g} ms (prompt_ms + predicted_ms) vs {c.ms_resent:.4g} ms (sum of prompt_ms): "
            f"{ratio_ms:.3g}× the time for {ratio_n:.3g}× the positions."),
            (f"The {COST_N} tokens are the same both ways: here the cache changed the cost, not the result."
             if same else
             f"The tokens differ between the two ways from generated token "
             f"{next(i for i, (a, b) in enumerate(zip(c.generated + [None], c.tokens + [None], strict=False), 1) if a != b)} on, "
             f"although both decode greedily from the same prompt."),
        ],
    )


def show_numpy_decode(page: Page, d: NumpyDecode | str | None, server_tokens: list[int]) -> None:
    """numpy's generation both ways beside the server's tokens, or why numpy did not generate (None: a run recorded
    before it did)."""
    if d is None:
        return page.note("This run was recorded before lesson 6 generated text in numpy, so that is not recomputed here.")
    if isinstance(d, str):
        return page.note(d)
    fc, fr, mc, mr = d.totals(NUMPY_N)
    shared = same_prefix(d.cached.tokens, server_tokens)
    k = growth_exponent(NUMPY_LENGTHS[-2], d.totals(NUMPY_LENGTHS[-2])[1], NUMPY_N, fr)
    notes = [
        (f"numpy generated {NUMPY_N} tokens greedily after the same {d.prompt_n}-token prompt both ways: "
         + ("the same tokens" if d.cached.tokens == d.recomputed.tokens else "different tokens")
         + (", every logit the same to the last bit: each sum is taken in float64 and rounded to float32, so the "
            "order in which the two ways add does not show." if d.largest_logit_difference == 0 else
            f", every logit within {d.largest_logit_difference:.2g}: the same sums, added in another order.")),
        (f"With the cache the first step runs the prompt's {d.prompt_n} positions and each later one a single position; "
         f"recomputing runs all {d.prompt_n} + i − 1 at step i. Over {NUMPY_N} tokens that is {fr / fc:.3g}× the FLOPs "
         f"({fr:,} against {fc:,}) and took {mr / mc:.3g}× the time."),
        (f"Counted as 2 FLOPs per weight of every block for each position computed, 4 × heads × head width per block for "
         "each position a new one attends to, and the output matrix on the last position only. The recomputed FLOPs "
         f"grow as n^{k:.2f} from {NUMPY_LENGTHS[-2]} to {NUMPY_N} tokens: on the way to n² as n outgrows the prompt."),
        (f"The server's own {len(server_tokens)} greedy tokens from this prompt (above) "
         + (f"are numpy's first {len(server_tokens)}." if shared == len(server_tokens) else
            f"agree with numpy's for the first {shared}: the server rounds activations on this file's weight type, numpy "
            "does not (lesson 4).")
         ),
        ("The times are numpy's on this host's CPU, one BLAS thread, every block dequantized beforehand; on a replay "
         "they are the recorded run's, while the tokens and FLOPs are recomputed."),
    ]
    page.table("numpy_cache_vs_recompute", "numpy from the file's bytes: generating with the KV cache and recomputing every prefix",
              columns(NumpyRow), cells([numpy_row(d, n) for n in NUMPY_LENGTHS]), notes=notes)
    xs = [float(n) for n in range(1, NUMPY_N + 1)]
    page.plot("numpy_cache_vs_recompute", "numpy: time to generate n tokens, with the KV cache and recomputing every prefix",
             "tokens generated n", "time (ms)",
             [Series(label="with the KV cache", x=xs, y=[d.totals(n)[2] for n in range(1, NUMPY_N + 1)], style="points"),
              Series(label="recomputing every prefix", x=xs, y=[d.totals(n)[3] for n in range(1, NUMPY_N + 1)], style="points")])


# --- what this run shows ---------------------------------------------------------------------------------------

def shows(c: CacheVsNoCache, depths: list[DepthResult], model: DepthModel | None,
          served: KvExample | None) -> tuple[str, str]:
    """What the run shows, and the plot that shows it: what the KV cache saved (positions and time, with it and
    re-sending the text without it), then how decode changed with depth (the line's t(0) and cost per position, and
    how many held-out depths it predicted), with the served model's KV bytes per position where they are known."""
    ratio_n, ratio_ms = c.positions_resent / c.positions_cached, c.ms_resent / c.ms_cached
    saving = (f"Generating {COST_N} tokens with the KV cache processed {c.positions_cached:,} positions in "
              f"{c.ms_cached:.4g} ms; re-sending the growing text without it processed {c.positions_resent:,} "
              f"({ratio_n:.3g}× as many) in {c.ms_resent:.4g} ms ({ratio_ms:.3g}× the time).")
    first, last = depths[0], depths[-1]
    went = "slowed" if last.median < first.median else "did not slow" if last.median == first.median else "sped up"
    depth = (f"Decode {went} from {first.median:.4g} tokens/s at depth {first.depth:,} to {last.median:.4g} at depth "
             f"{last.depth:,}")
    if served is not None:
        depth += f", each earlier position adding {served.per_token:,} bytes of K and V to read"
    if model is None:
        return " ".join([saving, depth + "."]), "decode_vs_depth"
    line, held = model.line, model.held_out
    s = "s" if line.knee is None else "s₁"
    fit = (f"a line through the depths up to {line.fit_until:,} gives t(0) = {line.t0_ms:.4g} ms and {s} = "
           f"{1e3 * line.slope_ms:.4g} µs per earlier position")
    if line.knee is not None:
        fit += f", bent at d* = {line.knee:,.0f}" + ("" if line.slope2_ms is None else
                                                    f" into s₂ = {1e3 * line.slope2_ms:.4g} µs")
    elif model.knee_test is not None:
        fit += f", not bent at d* = {model.knee_test.knee:,.0f}, which the depths past it did not show"
    if not held:
        verdict = ", and no deeper depth was left to predict."
    else:
        within, unknown = sum(p.within for p in held), sum(p.predicted_ms is None for p in held)
        verdict = (f", and predicted {within} of the {len(held)} deeper depth{'s' if len(held) > 1 else ''} within "
                   f"±{100 * depthtime.TOLERANCE:.0f}% of measured"
                   + (f" (the furthest, depth {worst.depth:,}, by {100 * worst.error:+.1f}%)"
                      if (worst := depthtime.worst(held)) is not None and worst.error is not None else "")
                   + (f"; it has no prediction for {unknown}, past d* with no fitted depth beyond it" if unknown else "")
                   + (f"; the samples scatter too widely to tell whether it holds at {vague} of them (spread over "
                      f"±{100 * depthtime.TOLERANCE:.0f}%)." if (vague := sum(p.predicted_ms is not None and not p.within
                                                                          and not p.can_tell for p in held)) else "."))
    return " ".join([saving, depth + "; " + fit + verdict]), "decode_vs_depth"
