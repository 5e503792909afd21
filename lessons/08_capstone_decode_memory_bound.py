"""Lesson 8 — Why LLM decode is memory-bound (capstone)

Each decoded token reads every weight once, so decode can be no faster than memory bandwidth ÷
bytes per token. This script tests that claim across models of one family and one weight type
whose sizes span more than ten times: it builds (or reuses) the default presets, serves each in
turn on a server of its own, measures decode tokens/s, and compares each with its ceiling from
this host's measured read bandwidth. Efficiency = measured ÷ ceiling; a least-squares line
tokens/s = B ÷ bytes through the origin gives the bandwidth decode actually achieved, and a line
ms per token = fixed + bytes ÷ B' separates the part of each token's time that does not depend
on the model's size. The published DGX Spark run is shown for reference, and the conclusion is
worded by this run's numbers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from bytesup import formulas, hostbench, measure, models
from bytesup.errors import BytesupError
from bytesup.gguf_read import read_model_info
from bytesup.results import Series
from bytesup.runner import LessonContext, script_main

TITLE = "Why LLM decode is memory-bound"

GB = formulas.GB
MB = 1e6
MiB = 2**20

DEFAULT_SIZES = ("tiny-q8_0", "small-q8_0", "medium-q8_0")  # one family, one weight type, ~39× in bytes
PROMPT = "The capital of France is"  # short: the measurement is the decode after it
N_PREDICT = 64
CTX = 512  # the short prompt and the generated tokens fit; a small context keeps each server light
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

# Published reference run (course OUTLINE.md, lesson 4 figures and the specimen model):
# deepseek-coder-6.7b-instruct Q8_0 on a DGX Spark. Shown only in rows labelled "published".
PUBLISHED_LABEL = "deepseek-coder-6.7b Q8_0 on DGX Spark (published)"
PUBLISHED_DECODE_TOKENS_PER_S = 33.2  # "decode 33.2 tokens/s after a short prompt"
PUBLISHED_CEILING_TOKENS_PER_S = 39.0  # "ceiling 39 tokens/s"
PUBLISHED_MODEL_BYTES = 7.16e9  # "about 7.16 GB"
PUBLISHED_BANDWIDTH_GBS = 273.0  # "about 273 GB/s memory bandwidth"


# --- pure helpers (tested on their own) -------------------------------------------------

def fit_through_origin(x: list[float], y: list[float]) -> tuple[float, float | None]:
    """Least squares y = s·x: s = Σxy ÷ Σx²; R² = 1 − SS_res ÷ SS_tot about the mean (None below 2 points)."""
    slope = sum(a * b for a, b in zip(x, y)) / sum(a * a for a in x)
    if len(y) < 2:
        return slope, None
    mean = sum(y) / len(y)
    ss_tot = sum((b - mean) ** 2 for b in y)
    ss_res = sum((b - slope * a) ** 2 for a, b in zip(x, y))
    return slope, (1 - ss_res / ss_tot) if ss_tot > 0 else None


def fit_line(x: list[float], y: list[float]) -> tuple[float, float, float | None] | None:
    """Ordinary least squares y = a + b·x: (a, b, R²), or None with fewer than two distinct x."""
    n = len(x)
    if n < 2 or len(set(x)) < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sxx
    a0 = my - b * mx
    ss_tot = sum((c - my) ** 2 for c in y)
    ss_res = sum((c - a0 - b * a) ** 2 for a, c in zip(x, y))
    return a0, b, (1 - ss_res / ss_tot) if ss_tot > 0 else None


def decode_row(label: str, bytes_per_tok: float, bandwidth_gbs: float, samples: list[float] | None,
               published: float | None = None) -> list[Any]:
    """model, bytes per token, bandwidth, ceiling, measured median/min/max, efficiency median/min/max (%),
    effective bandwidth (GB/s), ms per token. `published` stands in for the samples of a published run."""
    ceiling = formulas.ceiling_tokens_per_s(bandwidth_gbs * GB, bytes_per_tok)
    if samples is not None:
        s = hostbench.summarize(samples)
        med, lo, hi = s["median"], s["min"], s["max"]
    else:
        med, lo, hi = published, None, None
    eff = lambda v: None if v is None else formulas.percent(formulas.efficiency(v, ceiling))  # noqa: E731
    return [label, bytes_per_tok, bandwidth_gbs, ceiling, med, lo, hi,
            eff(med), eff(lo), eff(hi), med * bytes_per_tok / GB, 1000.0 / med]


COLUMNS = [("model", ""), ("bytes per token", "bytes"),
           ("bandwidth", "GB/s"), ("ceiling", "tokens/s"), ("measured", "tokens/s"), ("measured min", "tokens/s"),
           ("measured max", "tokens/s"), ("efficiency", "%"), ("efficiency min", "%"), ("efficiency max", "%"),
           ("effective bandwidth", "GB/s"), ("time per token", "ms")]
C = {name: i for i, (name, _) in enumerate(COLUMNS)}


def conclusion(rows: list[list[Any]], bandwidth_gbs: float, slope_gbs: float, r2: float | None,
               line: tuple[float, float, float | None] | None) -> list[str]:
    """The capstone's conclusion, each sentence chosen and filled in by the measured rows."""
    effs = [r[C["efficiency"]] for r in rows]
    small, large = min(rows, key=lambda r: r[C["bytes per token"]]), max(rows, key=lambda r: r[C["bytes per token"]])
    out = []
    if len(rows) == 1:
        r = rows[0]
        out.append(f"One model was measured: {r[0]} decoded at {r[C['measured']]:,.4g} tokens/s, "
                   f"{effs[0]:.0f}% of its {r[C['ceiling']]:,.4g} tokens/s ceiling "
                   f"(min–max {r[C['efficiency min']]:.0f}–{r[C['efficiency max']]:.0f}%).")
    else:
        inside = [r[0] for r in rows if r[C["efficiency min"]] <= 100 <= r[C["efficiency max"]]]
        each = ", ".join(f"{r[0]} {e:.0f}%" for r, e in zip(rows, effs))
        out.append(f"Across {len(rows)} models decode reached {min(effs):.0f}–{max(effs):.0f}% of the bandwidth "
                   f"ceiling ({each}); "
                   + (f"the ceiling lies within the measured spread for {', '.join(inside)}."
                      if inside else "for none of them does the ceiling lie within the measured spread."))
        rb = large[C["bytes per token"]] / small[C["bytes per token"]]
        rt = small[C["measured"]] / large[C["measured"]]
        how = ("about as much as" if 0.8 <= rt / rb <= 1.25 else "less than" if rt < rb else "more than")
        out.append(f"From {small[0]} to {large[0]} the bytes per token grew {rb:.3g} × and decode slowed {rt:.3g} ×: "
                   f"{how} the {rb:.3g} × a purely memory-bound decode would show.")
        out.append(f"The line tokens/s = B ÷ bytes through the origin fits with B = {slope_gbs:.3g} GB/s, "
                   f"{100 * slope_gbs / bandwidth_gbs:.0f}% of the {bandwidth_gbs:.3g} GB/s measured"
                   + (f" (R² = {r2:.3f})." if r2 is not None else "."))
    if line is not None:
        fixed_ms, ms_per_byte, _ = line
        small_ms = small[C["time per token"]]
        predicted = fixed_ms + ms_per_byte * small[C["bytes per token"]]
        miss = predicted / small_ms - 1
        if ms_per_byte <= 0:
            out.append(f"Per-token time does not grow with the bytes here (slope {ms_per_byte * 1e9:.3g} ms per GB), "
                       f"so it does not split into a fixed part and a bandwidth part.")
        elif abs(miss) > 0.25:
            out.append(f"The line ms per token = {fixed_ms:.3g} ms + bytes ÷ {1e-6 / ms_per_byte:.3g} GB/s, set mostly by "
                       f"the larger models, misses {small[0]} by {100 * miss:+.0f}% ({predicted:.3g} ms predicted, "
                       f"{small_ms:.3g} ms measured): the models do not share one fixed-plus-bandwidth rule, so no fixed "
                       f"per-token cost is read from it.")
        elif fixed_ms <= 0:
            out.append(f"Per-token time fits bytes ÷ {1e-6 / ms_per_byte:.3g} GB/s with no positive fixed part "
                       f"(intercept {fixed_ms:.3g} ms): reading the weights accounts for the whole token.")
        else:
            share = [100 * fixed_ms / r[C["time per token"]] for r in (small, large)]
            out.append(f"Per-token time fits {fixed_ms:.3g} ms + bytes ÷ {1e-6 / ms_per_byte:.3g} GB/s: the fixed part "
                       f"is {share[0]:.2g}% of {small[0]}'s time per token and {share[1]:.2g}% of {large[0]}'s.")
    above = [r[0] for r in rows if r[C["efficiency"]] > 100]
    if above:
        out.append(f"{', '.join(above)} decoded faster than the ceiling allows: their weights likely stay in a CPU cache, "
                   f"which is faster than the main memory the bandwidth test read.")
    noisy = [r for r in rows if r[C["measured min"]] > 0 and r[C["measured max"]] / r[C["measured min"]] > 1.5]
    if noisy:
        out.append("The samples scatter widely ("
                   + ", ".join(f"{r[0]} {r[C['measured min']]:,.4g}–{r[C['measured max']]:,.4g} tokens/s" for r in noisy)
                   + "): something else was using this host's cores or memory; rerun on a quiet machine before "
                   "trusting the line.")
    if len(rows) == 1:
        verdict = (f"Verdict: at {effs[0]:.0f}% of its ceiling this model's decode is mostly reading weights, as a "
                   f"memory-bound workload's is; one model cannot show how speed follows size."
                   if effs[0] >= 50 else
                   f"Verdict: at {effs[0]:.0f}% of the ceiling, something besides reading the weights takes most "
                   f"of each token's time here; one model cannot tell more.")
    else:
        rb = large[C["bytes per token"]] / small[C["bytes per token"]]
        rt = small[C["measured"]] / large[C["measured"]]
        big_eff = large[C["efficiency"]]
        by_size = [r[C["efficiency"]] for r in sorted(rows, key=lambda r: r[C["bytes per token"]])]
        rising = all(a < b for a, b in zip(by_size, by_size[1:]))
        trend = (" Efficiency rises with size: the bigger the model, the larger the share of each token spent "
                 "reading weights." if rising else "")
        short = [f"{r[0]} reached {r[C['efficiency']]:.0f}%" for r in rows if r[C["efficiency"]] < 50]
        if big_eff >= 50 and rt / rb >= 0.8:
            verdict = (f"Verdict: decode follows the bandwidth line — speed fell {rt:.3g} × for {rb:.3g} × the bytes and "
                       f"the largest model runs at {big_eff:.0f}% of bandwidth ÷ bytes; "
                       + (f"decode is memory-bound at every size measured ({min(effs):.0f}–{max(effs):.0f}% of the "
                          f"ceiling)." if not short else
                          f"most of the time goes to reading weights, though {', '.join(short)} of its ceiling.")
                       + trend)
        elif big_eff >= 50:
            verdict = (f"Verdict: decode is memory-bound for the largest model ({big_eff:.0f}% of its ceiling), but speed "
                       f"fell only {rt:.3g} × for {rb:.3g} × the bytes: the smaller models lose a larger share of each "
                       f"token to costs that do not grow with size." + trend)
        elif rt / rb >= 0.8:
            verdict = (f"Verdict: speed follows size as a memory-bound decode's does (×{rt:.3g} slower for ×{rb:.3g} the "
                       f"bytes), but at only {min(effs):.0f}–{max(effs):.0f}% of the ceiling: decode read its weights at "
                       f"an effective {slope_gbs:.3g} GB/s, well below the {bandwidth_gbs:.3g} GB/s the bandwidth test "
                       f"reached." + trend)
        else:
            verdict = (f"Verdict: on this host no model came near its ceiling (the largest reached {big_eff:.0f}%): "
                       f"costs other than reading the weights dominate at these sizes, so the data do not show a "
                       f"memory-bound decode here." + trend)
    out.append(verdict)
    return out


def _line_note(line: tuple[float, float, float | None], smallest_ms: float) -> str:
    fixed_ms, ms_per_byte, _ = line
    if ms_per_byte <= 0:
        return (f"The second fit's slope is {ms_per_byte * 1e9:.3g} ms per GB: with these points time per token does "
                f"not grow with the bytes, so no bandwidth can be read from it.")
    if fixed_ms <= 0:
        return (f"The second fit's intercept is {fixed_ms:.3g} ms: within these points' noise there is no fixed "
                f"per-token cost to separate from the weight reads.")
    return (f"The second fit gives each token a fixed {fixed_ms:.3g} ms on top of its weight reads; the smallest "
            f"model's whole token takes {smallest_ms:.3g} ms.")


def parse_sizes(value: Any) -> list[str]:
    """--sizes as given by the CLI (a list) or as a comma-separated string; defaults when absent."""
    if value is None:
        return list(DEFAULT_SIZES)
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in names if n and n.strip()]
    unknown = [n for n in names if n not in models.PRESETS]
    if unknown or not names:
        raise BytesupError(f"Unknown model preset(s) {', '.join(unknown) or '(none given)'} in --sizes. "
                           f"Presets: {', '.join(models.PRESETS)}.")
    return names


def bandwidth_bytes_per_thread(threads: int) -> int:
    """256 MiB per thread, at most 2 GiB in all, never under 64 MiB (well past any cache)."""
    return max(64 * MiB, min(256 * MiB, 2048 * MiB // max(threads, 1)))


# --- host side --------------------------------------------------------------------------

def locality(ctx: LessonContext) -> dict:
    """Local (we may start our own servers) or remote (measure only what the user's server serves)."""
    url_host = urlparse(ctx.server.base_url).hostname or ""
    try:
        model = str(ctx.require_model())
    except BytesupError:
        model = None
    return {"url_host": url_host, "model_path": model, "local": url_host in LOCAL_HOSTS and model is not None}


def _summary(path: str, preset: str | None) -> dict:
    info = read_model_info(path)
    hp = info["hyperparameters"]
    return {"preset": preset, "name": preset or path.rsplit("/", 1)[-1].removesuffix(".gguf"), "path": path,
            "architecture": info["architecture"], "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
            "n_params": info["n_params"], "tensor_bytes": info["tensor_bytes"], "file_size_bytes": info["file_size_bytes"],
            "weight_type": ((info["file_type"] or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def build_preset(name: str) -> dict:
    """Build the preset's model if it is not there yet, and read its header."""
    return _summary(str(models.ensure_model(name)), name)


def served_model(ctx: LessonContext, where: dict) -> dict:
    if where["model_path"]:
        return ctx.host("model_info", lambda: _summary(where["model_path"], None))
    data = ctx.server.models().data
    meta = (data[0].get("meta") if data else None) or {}
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 8 needs the served model's size: its file is not readable here and /v1/models "
                           "gives no meta.size. Pass --model PATH.gguf.")
    name = str(data[0].get("id") or "served model").rsplit("/", 1)[-1].removesuffix(".gguf")
    return {"preset": None, "name": name, "architecture": None, "n_params": int(meta["n_params"]),
            "tensor_bytes": int(meta["size"]), "weight_type": meta.get("ftype")}


def _thread_flags(ctx: LessonContext) -> list[str]:
    """Our servers decode with the user's --threads when it set one (else llama.cpp's default)."""
    threads = (ctx.identity.get("server", {}).get("flags") or {}).get("--threads")
    return ["--threads", str(threads)] if threads not in (None, "", "-1") else []


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    where = ctx.host("user_server", lambda: locality(ctx))
    # Recorded, because a replay's repeat is the replaying command's, not the recorded run's.
    repeat = ctx.host("repeat", lambda: ctx.repeat)
    # Recorded too: a replay must sweep the presets the recorded run swept, whatever --sizes it is given.
    sizes = ctx.host("sizes", lambda: parse_sizes(ctx.option("sizes")) if where["local"] else [])
    ctx.settings.update({"pinned": measure.PINNED, "n_predict": N_PREDICT, "prompt": PROMPT, "local": where["local"],
                         "sizes": sizes, "repeat": repeat})

    # The bandwidth first, while no server of ours is loading or decoding.
    ctx.step("measuring this host's memory read bandwidth")
    threads = formulas.server_threads(ctx.identity.get("server", {}).get("flags"))
    bw = ctx.host("read_bandwidth", lambda: hostbench.measure_read_bandwidth(
        threads=threads, bytes_per_thread=bandwidth_bytes_per_thread(threads), repeats=repeat + 2))
    bw_gbs = bw["gb_per_s"]["median"]
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=None,
                settings={"threads": bw["threads"], "bytes_per_thread": bw["bytes_per_thread"]}, description=bw["method"])

    # 1. The models: same family and weight type, sizes spanning more than ten times.
    infos, samples = [], []
    if where["local"]:
        for name in sizes:
            ctx.step(f"building or reusing {name}")
            info = ctx.host(f"model_{name}", lambda: build_preset(name))
            ctx.step(f"decoding with {name}")
            flags = ["-c", str(CTX), "--parallel", "1", *_thread_flags(ctx)]
            with ctx.local_server(f"preset-{name}", info["path"], flags) as srv:
                done = measure.timed_completions(srv, PROMPT, N_PREDICT, repeat,
                                                 track=lambda it: ctx.track(it, name))
            infos.append(info)
            samples.append(measure.decode_samples(done))
    else:
        info = served_model(ctx, where)
        ctx.step(f"decoding with {info['name']} on the user's server")
        done = measure.timed_completions(ctx.server, PROMPT, N_PREDICT, repeat,
                                         track=lambda it: ctx.track(it, info["name"]))
        infos.append(info)
        samples.append(measure.decode_samples(done))

    sizes_b = [formulas.bytes_per_token(i) for i in infos]
    span = max(sizes_b) / min(sizes_b)
    families = sorted({f"{i.get('architecture') or 'architecture unknown'} {i.get('weight_type') or ''}".strip()
                       for i in infos})
    model_notes = [f"{len(infos)} model(s), {', '.join(families)}; bytes per token from "
                   f"{min(sizes_b) / MB:,.4g} MB to {max(sizes_b) / MB:,.4g} MB, a span of {span:.3g} ×."]
    if where["local"] and (span < 10 or len(families) > 1):
        model_notes.append(f"Caution: these presets span {span:.3g} × in {len(families)} family/type combination(s); "
                           f"the comparison is cleanest with one family and type over 10 × or more.")
    if not where["local"]:
        model_notes.append(f"The server at {where['url_host']} is remote or its model file is not readable here, so "
                           f"only the one model it serves was measured; the size sweep needs servers this script "
                           f"starts itself.")
    ctx.table(
        "models", "The models: one family, one weight type, several sizes",
        [("model", ""), ("architecture", ""), ("weights", ""), ("blocks", ""), ("width", ""), ("parameters", ""),
         ("bytes per token", "bytes"), ("× smallest", "")],
        [[i["name"], i.get("architecture"), i.get("weight_type"), i.get("n_layer"), i.get("n_embd"), i["n_params"], b,
          b / min(sizes_b)] for i, b in zip(infos, sizes_b)],
        notes=model_notes,
    )

    # 2. Measured decode against the ceiling: bandwidth ÷ bytes per token.
    rows = []
    for info, b, s in zip(infos, sizes_b, samples):
        row = decode_row(info["name"], b, bw_gbs, s)
        rows.append(row)
        setting = {"preset": info["name"], "bytes_per_token": b}
        ceiling = row[C["ceiling"]]
        ctx.measure("decode_tokens_per_s", "tokens/s", s, higher_is_better=True, settings=setting,
                    description=f"decode after a short prompt, n_predict {N_PREDICT}, from the server's timings")
        ctx.measure("decode_efficiency", "%", [formulas.percent(formulas.efficiency(v, ceiling)) for v in s],
                    higher_is_better=True, settings=setting,
                    description="each decode sample ÷ (median read bandwidth ÷ bytes per token)")

    # 3. The fits: tokens/s against 1 ÷ bytes, and time per token against bytes.
    inv = [1.0 / r[C["bytes per token"]] for r in rows]
    slope, r2 = fit_through_origin(inv, [r[C["measured"]] for r in rows])
    slope_gbs = slope / GB
    line = fit_line([r[C["bytes per token"]] for r in rows], [r[C["time per token"]] for r in rows])
    ctx.measure("fit_bandwidth_gb_per_s", "GB/s", [slope_gbs], higher_is_better=True,
                settings={"models": [r[0] for r in rows]},
                description="least-squares slope of median tokens/s against 1 ÷ bytes per token, through the origin")

    published = decode_row(PUBLISHED_LABEL, PUBLISHED_MODEL_BYTES, PUBLISHED_BANDWIDTH_GBS, None,
                           PUBLISHED_DECODE_TOKENS_PER_S)
    ctx.table(
        "decode_vs_ceiling", "Decode against the bandwidth ceiling (ceiling = bandwidth ÷ bytes per token)",
        COLUMNS, rows + [published],
        notes=conclusion(rows, bw_gbs, slope_gbs, r2, line) + [
            f"Bandwidth: this host's median read of {bw_gbs:.3g} GB/s ({bw['threads']} threads; samples "
            f"{bw['gb_per_s']['min']:.3g}–{bw['gb_per_s']['max']:.3g}); min and max columns are the extreme decode samples.",
            f"Published reference: {PUBLISHED_BANDWIDTH_GBS:g} GB/s ÷ {PUBLISHED_MODEL_BYTES / GB:g} GB = "
            f"{published[C['ceiling']]:.1f} tokens/s, and {PUBLISHED_DECODE_TOKENS_PER_S:g} tokens/s is "
            f"{published[C['efficiency']]:.0f}% of it (the course rounds the ceiling to {PUBLISHED_CEILING_TOKENS_PER_S:g}: "
            f"{100 * PUBLISHED_DECODE_TOKENS_PER_S / PUBLISHED_CEILING_TOKENS_PER_S:.0f}%); "
            f"{'the largest model here' if len(rows) > 1 else 'the model here'} reached "
            f"{max(rows, key=lambda r: r[C['bytes per token']])[C['efficiency']]:.0f}%.",
        ],
    )
    fit_rows = [["tokens/s = B ÷ bytes (through the origin)", slope_gbs, 100 * slope_gbs / bw_gbs, None, r2, len(rows)]]
    if line is not None:
        fixed_ms, ms_per_byte, r2_line = line
        line_gbs = 1e-6 / ms_per_byte if ms_per_byte > 0 else None
        fit_rows.append(["ms per token = fixed + bytes ÷ B′", line_gbs,
                         100 * line_gbs / bw_gbs if line_gbs else None, fixed_ms, r2_line, len(rows)])
    ctx.table(
        "bandwidth_fit", "What bandwidth did decode achieve? Least-squares fits over the measured models",
        [("fit", ""), ("effective bandwidth", "GB/s"), ("of measured bandwidth", "%"), ("fixed time per token", "ms"),
         ("R²", ""), ("models", "")],
        fit_rows,
        notes=[
            f"B = Σ(tokens/s ÷ bytes) ÷ Σ(1 ÷ bytes²) over the medians: {slope_gbs:.3g} GB/s against {bw_gbs:.3g} GB/s "
            f"read by the bandwidth test. R² is taken about the mean, so a line that explains less than the mean "
            f"would show below 0" + (f"; here {r2:.3f}." if r2 is not None else "; one point gives none."),
        ] + ([_line_note(line, min(r[C["time per token"]] for r in rows))] if line else []),
    )

    # 4. The picture: measured points against the bandwidth line, on log-log axes.
    xs = [r[C["bytes per token"]] / MB for r in rows]
    lo, hi = min(xs) / 2, max(max(xs), PUBLISHED_MODEL_BYTES / MB) * 2
    ctx.plot(
        "decode_vs_bytes", "Decode tokens/s against bytes per token", "bytes per token (MB)", "decode tokens/s",
        [
            Series(label="measured (median, min–max)", x=xs, y=[r[C["measured"]] for r in rows],
                   y_min=[r[C["measured min"]] for r in rows], y_max=[r[C["measured max"]] for r in rows], style="points"),
            Series(label=f"ceiling: {bw_gbs:.3g} GB/s ÷ bytes (this host)", x=[lo, hi],
                   y=[bw_gbs * GB / (lo * MB), bw_gbs * GB / (hi * MB)], style="dashed"),
            Series(label=f"fit: {slope_gbs:.3g} GB/s ÷ bytes", x=[lo, hi],
                   y=[slope / (lo * MB), slope / (hi * MB)], style="dashed"),
            Series(label=f"ceiling: {PUBLISHED_BANDWIDTH_GBS:g} GB/s ÷ bytes (DGX Spark, published)", x=[lo, hi],
                   y=[PUBLISHED_BANDWIDTH_GBS * GB / (lo * MB), PUBLISHED_BANDWIDTH_GBS * GB / (hi * MB)], style="dashed"),
            Series(label="DGX Spark, deepseek-coder-6.7b Q8_0 (published)", x=[PUBLISHED_MODEL_BYTES / MB],
                   y=[PUBLISHED_DECODE_TOKENS_PER_S], style="points"),
        ],
        log_x=True, log_y=True,
    )
    return ctx.finish()


if __name__ == "__main__":
    script_main(__file__)
