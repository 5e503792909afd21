"""Lesson 8 — Why LLM decode is memory-bound (capstone)

Each decoded token reads every weight once, so decode can be no faster than memory bandwidth ÷
bytes per token. This script tests that claim across models of one family and one weight type
whose sizes span more than ten times: it builds (or reuses) the default presets, serves each in
turn on a server of its own, measures decode tokens/s, and compares each with its ceiling from
the bandwidth of the memory that feeds decode (this host's measured read bandwidth when the
servers decode on this CPU, else --bandwidth-gbs). Efficiency = measured ÷ ceiling; a
least-squares line tokens/s = B ÷ bytes through the origin gives the bandwidth decode actually
achieved, and a line ms per token = fixed + bytes ÷ B' tries to separate the part of each token's
time that does not depend on the model's size. The published DGX Spark run is shown for
reference, and the conclusion is worded by this run's numbers.
"""

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

from typing import Any

from bytesup import formulas, hostbench, measure, models, published
from bytesup.errors import BytesupError
from bytesup.gguf_read import read_model_info
from bytesup.results import Series
from bytesup.runner import LessonContext, script_main

TITLE = "Why LLM decode is memory-bound"

GB = formulas.GB
MB = 1e6

DEFAULT_SIZES = ("tiny-q8_0", "small-q8_0", "medium-q8_0")  # one family, one weight type, ~39× in bytes
PROMPT = "The capital of France is"  # short: the measurement is the decode after it
N_PREDICT = 64
CTX = 512  # the short prompt and the generated tokens fit; a small context keeps each server light
LINE_TOLERANCE = 0.25  # the fixed-plus-bandwidth line "holds" when it predicts every model within 25%

# The published reference run (bytesup.published): the specimen on the DGX Spark, lesson 4's figures.
PUBLISHED_LABEL = f"{published.SPECIMEN_NAME} on {published.SPARK_NAME} (published)"
PUBLISHED_BYTES = published.SPECIMEN["file_bytes"]
PUBLISHED_DECODE = published.LESSON4["decode_short_tokens_per_s"]


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


def decode_row(label: str, bytes_per_tok: float, bandwidth_gbs: float | None, samples: list[float] | None,
               published_tps: float | None = None) -> list[Any]:
    """model, bytes per token, bandwidth, ceiling, measured median/min/max, efficiency median/min/max (%),
    effective bandwidth (GB/s), ms per token. `published_tps` stands in for the samples of a published run;
    without a bandwidth the ceiling and efficiency cells stay empty."""
    ceiling = None if bandwidth_gbs is None else formulas.ceiling_tokens_per_s(bandwidth_gbs * GB, bytes_per_tok)
    if samples is not None:
        s = hostbench.summarize(samples)
        med, lo, hi = s["median"], s["min"], s["max"]
    else:
        med, lo, hi = published_tps, None, None
    eff = lambda v: None if v is None or ceiling is None else formulas.percent(formulas.efficiency(v, ceiling))  # noqa: E731
    return [label, bytes_per_tok, bandwidth_gbs, ceiling, med, lo, hi,
            eff(med), eff(lo), eff(hi), med * bytes_per_tok / GB, 1000.0 / med]


COLUMNS = [("model", ""), ("bytes per token", "bytes"),
           ("bandwidth", "GB/s"), ("ceiling", "tokens/s"), ("measured", "tokens/s"), ("measured min", "tokens/s"),
           ("measured max", "tokens/s"), ("efficiency", "%"), ("efficiency min", "%"), ("efficiency max", "%"),
           ("effective bandwidth", "GB/s"), ("time per token", "ms")]
C = {name: i for i, (name, _) in enumerate(COLUMNS)}


def check_line(line: tuple[float, float, float | None] | None, rows: list[list[Any]]) -> dict | None:
    """Whether ms per token = fixed + bytes ÷ B′ describes the models, decided once for every note and the table:
    'flat' (time does not grow with bytes), 'misses' (some model off by more than LINE_TOLERANCE),
    'no fixed part' (intercept ≤ 0) or 'holds'. The fixed time is read from the line only when it holds."""
    if line is None:
        return None
    fixed_ms, ms_per_byte, r2 = line
    worst = max(rows, key=lambda r: abs((fixed_ms + ms_per_byte * r[C["bytes per token"]]) / r[C["time per token"]] - 1))
    predicted = fixed_ms + ms_per_byte * worst[C["bytes per token"]]
    miss = predicted / worst[C["time per token"]] - 1
    if ms_per_byte <= 0:
        verdict = "flat"
    elif abs(miss) > LINE_TOLERANCE:
        verdict = "misses"
    elif fixed_ms <= 0:
        verdict = "no fixed part"
    else:
        verdict = "holds"
    return {"fixed_ms": fixed_ms, "ms_per_byte": ms_per_byte, "gbs": 1e-6 / ms_per_byte if ms_per_byte > 0 else None,
            "r2": r2, "worst": worst[0], "predicted_ms": predicted, "measured_ms": worst[C["time per token"]],
            "miss": miss, "verdict": verdict,
            "fixed_column": fixed_ms if verdict in ("holds", "no fixed part") else None}


def line_sentence(fit: dict, rows: list[list[Any]]) -> str:
    """The conclusion's sentence on the fixed-plus-bandwidth line, by check_line's verdict."""
    v = fit["verdict"]
    if v == "flat":
        return (f"Per-token time does not grow with the bytes here (slope {fit['ms_per_byte'] * 1e9:.3g} ms per GB), "
                f"so it does not split into a fixed part and a bandwidth part.")
    if v == "misses":
        return (f"The line ms per token = {fit['fixed_ms']:.3g} ms + bytes ÷ {fit['gbs']:.3g} GB/s misses {fit['worst']} "
                f"by {100 * fit['miss']:+.0f}% ({fit['predicted_ms']:.3g} ms predicted, {fit['measured_ms']:.3g} ms "
                f"measured): the models do not share one fixed-plus-bandwidth rule, so no fixed per-token cost is "
                f"read from it.")
    if v == "no fixed part":
        return (f"Per-token time fits bytes ÷ {fit['gbs']:.3g} GB/s with no positive fixed part (intercept "
                f"{fit['fixed_ms']:.3g} ms): reading the weights at that rate accounts for the whole token.")
    small, large = min(rows, key=lambda r: r[C["bytes per token"]]), max(rows, key=lambda r: r[C["bytes per token"]])
    share = [100 * fit["fixed_ms"] / r[C["time per token"]] for r in (small, large)]
    return (f"Per-token time fits {fit['fixed_ms']:.3g} ms + bytes ÷ {fit['gbs']:.3g} GB/s (every model within "
            f"{100 * LINE_TOLERANCE:.0f}%): the fixed part is {share[0]:.2g}% of {small[0]}'s time per token and "
            f"{share[1]:.2g}% of {large[0]}'s.")


def line_note(fit: dict) -> str:
    """The fit table's note on its second row, by the same verdict."""
    v = fit["verdict"]
    if v == "flat":
        return (f"The second fit's slope is {fit['ms_per_byte'] * 1e9:.3g} ms per GB: time per token does not grow with "
                f"the bytes, so it gives neither a bandwidth nor a fixed time.")
    if v == "misses":
        return (f"The second fit misses {fit['worst']} by {100 * fit['miss']:+.0f}% (more than "
                f"{100 * LINE_TOLERANCE:.0f}%), so its fixed time per token is left blank.")
    if v == "no fixed part":
        return (f"The second fit's intercept is {fit['fixed_ms']:.3g} ms: no positive fixed per-token cost to "
                f"separate from the weight reads.")
    return (f"The second fit predicts every model within {100 * LINE_TOLERANCE:.0f}% and gives each token a fixed "
            f"{fit['fixed_ms']:.3g} ms on top of its weight reads at {fit['gbs']:.3g} GB/s.")


def conclusion(rows: list[list[Any]], ref: dict | None, slope_gbs: float, r2: float | None, fit: dict | None,
               reason: str = "") -> list[str]:
    """The capstone's conclusion, each sentence chosen and filled in by the measured rows. `ref` is the
    bandwidth of the ceilings ({"gbs", "label", "host_cpu"}) or None when none applies (`reason` says why)."""
    small, large = min(rows, key=lambda r: r[C["bytes per token"]]), max(rows, key=lambda r: r[C["bytes per token"]])
    effs = [r[C["efficiency"]] for r in rows] if ref else []
    out = []
    if len(rows) == 1:
        r = rows[0]
        out.append(f"One model was measured: {r[0]} decoded at {r[C['measured']]:,.4g} tokens/s, "
                   + (f"{effs[0]:.0f}% of its {r[C['ceiling']]:,.4g} tokens/s ceiling "
                      f"(min–max {r[C['efficiency min']]:.0f}–{r[C['efficiency max']]:.0f}%)." if ref else
                      f"an effective {r[C['effective bandwidth']]:.3g} GB/s (tokens/s × bytes per token)."))
    else:
        if ref:
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
        out.append(f"The line tokens/s = B ÷ bytes through the origin fits with B = {slope_gbs:.3g} GB/s"
                   + (f", {100 * slope_gbs / ref['gbs']:.0f}% of the {ref['gbs']:.3g} GB/s {ref['label']}" if ref else "")
                   + (f" (R² = {r2:.3f})." if r2 is not None else "."))
    if not ref:
        out.append(f"Efficiency cannot be judged against this host's CPU bandwidth: {reason}. Pass --bandwidth-gbs "
                   f"with the bandwidth of the memory that feeds decode to get ceilings.")
    if fit is not None:
        out.append(line_sentence(fit, rows))
    above = [r for r in rows if ref and r[C["efficiency"]] > 100]
    if above:
        names = ", ".join(r[0] for r in above)
        weights = ", ".join(f"{r[C['bytes per token']] / MB:.3g} MB" for r in above)
        out.append(f"{names} decoded faster than the ceiling allows: "
                   + (f"their {weights} of weights may stay in the CPU caches, which are faster than the main "
                      f"memory the bandwidth test read."
                      if ref["host_cpu"] else
                      f"the {ref['gbs']:.3g} GB/s {ref['label']} is below what fed decode."))
    noisy = [r for r in rows if r[C["measured min"]] > 0 and r[C["measured max"]] / r[C["measured min"]] > 1.5]
    if noisy:
        out.append("The samples scatter widely ("
                   + ", ".join(f"{r[0]} {r[C['measured min']]:,.4g}–{r[C['measured max']]:,.4g} tokens/s" for r in noisy)
                   + "): rerun with more repeats on a quiet machine before trusting the line.")
    out.append(_verdict(rows, ref, slope_gbs, effs, small, large))
    return out


def _verdict(rows, ref, slope_gbs, effs, small, large) -> str:
    if len(rows) == 1:
        if not ref:
            return (f"Verdict: one model and no bandwidth that applies to its decode: these data cannot show whether "
                    f"decode is memory-bound (its effective bandwidth was {rows[0][C['effective bandwidth']]:.3g} GB/s).")
        return (f"Verdict: at {effs[0]:.0f}% of its ceiling this model's decode is mostly reading weights, as a "
                f"memory-bound workload's is; one model cannot show how speed follows size."
                if effs[0] >= 50 else
                f"Verdict: at {effs[0]:.0f}% of the ceiling, something besides reading the weights takes most "
                f"of each token's time here; one model cannot tell more.")
    rb = large[C["bytes per token"]] / small[C["bytes per token"]]
    rt = small[C["measured"]] / large[C["measured"]]
    follows = 0.8 <= rt / rb <= 1.25
    if not ref:
        if follows:
            return (f"Verdict: speed follows size as a memory-bound decode's does (×{rt:.3g} slower for ×{rb:.3g} the "
                    f"bytes), at an effective {slope_gbs:.3g} GB/s; how close that is to the memory's bandwidth needs "
                    f"--bandwidth-gbs.")
        return (f"Verdict: speed fell {rt:.3g} × for {rb:.3g} × the bytes, "
                + ("less than the bytes grew: part of each token's time does not grow with the model's size."
                   if rt < rb else "more than the bytes grew: not one bandwidth line for every size."))
    big_eff = large[C["efficiency"]]
    by_size = [r[C["efficiency"]] for r in sorted(rows, key=lambda r: r[C["bytes per token"]])]
    trend = (" Efficiency rises with size: the bigger the model, the larger the share of each token spent "
             "reading weights." if all(a < b for a, b in zip(by_size, by_size[1:])) else "")
    short = [f"{r[0]} reached {r[C['efficiency']]:.0f}%" for r in rows if r[C["efficiency"]] < 50]
    if big_eff >= 50 and follows:
        return (f"Verdict: decode follows the bandwidth line — speed fell {rt:.3g} × for {rb:.3g} × the bytes and "
                f"the largest model runs at {big_eff:.0f}% of bandwidth ÷ bytes; "
                + (f"decode is memory-bound at every size measured ({min(effs):.0f}–{max(effs):.0f}% of the "
                   f"ceiling)." if not short else
                   f"most of the time goes to reading weights, though {', '.join(short)} of its ceiling.")
                + trend)
    if big_eff >= 50 and rt < rb:
        return (f"Verdict: decode is memory-bound for the largest model ({big_eff:.0f}% of its ceiling), but speed "
                f"fell only {rt:.3g} × for {rb:.3g} × the bytes: the smaller models lose a larger share of each "
                f"token to costs that do not grow with size." + trend)
    if big_eff >= 50:
        return (f"Verdict: decode is memory-bound for the largest model ({big_eff:.0f}% of its ceiling), and speed "
                f"fell {rt:.3g} × for {rb:.3g} × the bytes, more than the bytes grew." + trend)
    if follows:
        return (f"Verdict: speed follows size as a memory-bound decode's does (×{rt:.3g} slower for ×{rb:.3g} the "
                f"bytes), but at only {min(effs):.0f}–{max(effs):.0f}% of the ceiling: decode read its weights at "
                f"an effective {slope_gbs:.3g} GB/s, below the {ref['gbs']:.3g} GB/s {ref['label']}." + trend)
    return (f"Verdict: the largest model reached only {big_eff:.0f}% of its ceiling and speed did not follow size "
            f"(×{rt:.3g} slower for ×{rb:.3g} the bytes): the data do not show a memory-bound decode here." + trend)


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


# --- the models ---------------------------------------------------------------------------

def _summary(path: str, preset: str | None) -> dict:
    """What the lesson needs from a GGUF header (recorded as a host value)."""
    info = read_model_info(path)
    hp = info["hyperparameters"]
    return {"preset": preset, "name": preset or path.rsplit("/", 1)[-1].removesuffix(".gguf"), "path": path,
            "architecture": info["architecture"], "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
            "n_params": info["n_params"], "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info["file_type"] or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def served_model(ctx: LessonContext, facts: dict) -> dict:
    """The user's model: from its GGUF when readable here, else from the server's /v1/models meta."""
    if facts["model_readable"]:
        return ctx.host("model_info", lambda: _summary(str(ctx.require_model()), None))
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 8 needs the served model's size: its file is not readable here and /v1/models "
                           "gives no meta.size. Pass --model PATH.gguf.")
    return {"preset": None, "name": served["name"], "architecture": None, "n_embd": meta.get("n_embd"),
            "n_params": int(meta["n_params"]), "tensor_bytes": int(meta["size"]), "weight_type": meta.get("ftype")}


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    local = facts["local"]  # our own servers run on this host, with the user's server flags
    sizes = parse_sizes(ctx.option("sizes")) if local else []
    given = ctx.option("bandwidth_gbs")
    ctx.settings.update({"pinned": measure.PINNED, "n_predict": N_PREDICT, "prompt": PROMPT, "local": local,
                         "sizes": sizes, "repeat": ctx.repeat, "bandwidth_gbs": given,
                         "host_bandwidth_applies": facts["host_bandwidth_applies"]})

    # The bandwidth first, while no server of ours is loading or decoding; only when it feeds decode.
    bw = None
    if facts["host_bandwidth_applies"]:
        ctx.step("measuring this host's memory read bandwidth")
        threads = formulas.server_threads(ctx.identity.get("server", {}).get("flags"))
        bw = ctx.host("read_bandwidth", lambda: hostbench.host_bandwidth(threads, ctx.repeat))
        ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw["gb_per_s"]["samples"], higher_is_better=True,
                    settings={"threads": threads}, description=bw["method"])
    if given is not None:
        ref = {"gbs": float(given), "label": "given with --bandwidth-gbs", "host_cpu": False}
    elif bw is not None:
        ref = {"gbs": bw["gb_per_s"]["median"], "label": "this host's CPU read", "host_cpu": True}
    else:
        ref = None

    # 1. The models: same family and weight type, sizes spanning more than ten times.
    infos, samples = [], []
    if local:
        for name in sizes:
            ctx.step(f"building or reusing {name}")
            info = ctx.host(f"model_{name}", lambda: _summary(str(models.ensure_model(name)), name))
            ctx.step(f"decoding with {name}")
            with ctx.local_server(f"preset-{name}", info["path"], ["-c", str(CTX), "--parallel", "1"]) as srv:
                done = measure.timed_completions(srv, PROMPT, N_PREDICT, ctx.repeat,
                                                 track=lambda it: ctx.track(it, name))
            infos.append(info)
            samples.append(measure.decode_samples(done))
    else:
        info = served_model(ctx, facts)
        ctx.step(f"decoding with {info['name']} on the user's server")
        done = measure.timed_completions(ctx.server, PROMPT, N_PREDICT, ctx.repeat,
                                         track=lambda it: ctx.track(it, info["name"]))
        infos.append(info)
        samples.append(measure.decode_samples(done))

    sizes_b = [formulas.bytes_per_token(i) for i in infos]
    span = max(sizes_b) / min(sizes_b)
    families = sorted({f"{i.get('architecture') or 'architecture unknown'} {i.get('weight_type') or ''}".strip()
                       for i in infos})
    model_notes = [f"{len(infos)} model(s), {', '.join(families)}; bytes per token from "
                   f"{min(sizes_b) / MB:,.4g} MB to {max(sizes_b) / MB:,.4g} MB, a span of {span:.3g} ×."]
    if local and (span < 10 or len(families) > 1):
        model_notes.append(f"Caution: these presets span {span:.3g} × in {len(families)} family/type combination(s); "
                           f"the comparison is cleanest with one family and type over 10 × or more.")
    if not local:
        model_notes.append(f"Only the one model the user's server serves was measured ({facts['reason']}); the size "
                           f"sweep needs servers this script starts on this host.")
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
        row = decode_row(info["name"], b, ref["gbs"] if ref else None, s)
        rows.append(row)
        setting = {"preset": info["name"], "bytes_per_token": b}
        ctx.measure("decode_tokens_per_s", "tokens/s", s, higher_is_better=True, settings=setting,
                    description=f"decode after a short prompt, n_predict {N_PREDICT}, from the server's timings")
        if ref:
            ctx.measure("decode_efficiency", "%", [formulas.percent(formulas.efficiency(v, row[C["ceiling"]])) for v in s],
                        # A stated bandwidth is part of the configuration; a measured one is not (it
                        # varies run to run, and runs must still join on these settings to compare).
                        higher_is_better=True, settings={**setting, **({} if ref["host_cpu"] else {"bandwidth_gbs": ref["gbs"]})},
                        description=f"each decode sample ÷ (bandwidth ÷ bytes per token); bandwidth {ref['label']}")

    # 3. The fits: tokens/s against 1 ÷ bytes, and time per token against bytes.
    inv = [1.0 / r[C["bytes per token"]] for r in rows]
    slope, r2 = fit_through_origin(inv, [r[C["measured"]] for r in rows])
    slope_gbs = slope / GB
    fit = check_line(fit_line([r[C["bytes per token"]] for r in rows], [r[C["time per token"]] for r in rows]), rows)
    ctx.measure("fit_bandwidth_gb_per_s", "GB/s", [slope_gbs], higher_is_better=True,
                settings={"models": [r[0] for r in rows]},
                description="least-squares slope of median tokens/s against 1 ÷ bytes per token, through the origin")

    pub = decode_row(PUBLISHED_LABEL, PUBLISHED_BYTES, published.SPARK_BANDWIDTH_GB_PER_S, None, PUBLISHED_DECODE)
    course_ceiling = published.LESSON4["ceiling_tokens_per_s"]
    if bw is not None:
        gbs = bw["gb_per_s"]
        used = f"the ceilings use {ref['gbs']:g} GB/s given with --bandwidth-gbs; " if given is not None else ""
        bw_note = (f"Bandwidth: {used}this host's CPU read {gbs['median']:.3g} GB/s (median, {bw['threads']} threads; samples "
                   f"{gbs['min']:.3g}–{gbs['max']:.3g}); min and max columns are the extreme decode samples.")
    elif ref:
        bw_note = (f"Bandwidth: {ref['gbs']:g} GB/s given with --bandwidth-gbs; this host's CPU bandwidth was not "
                   f"measured, because {facts['reason']}.")
    else:
        bw_note = "No ceiling or efficiency is shown for the models measured here; their effective bandwidth is."
    ctx.table(
        "decode_vs_ceiling", "Decode against the bandwidth ceiling (ceiling = bandwidth ÷ bytes per token)",
        COLUMNS, rows + [pub],
        notes=conclusion(rows, ref, slope_gbs, r2, fit, facts["reason"]) + [
            bw_note,
            f"Published reference: {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s ÷ {PUBLISHED_BYTES / GB:g} GB = "
            f"{pub[C['ceiling']]:.1f} tokens/s, and {PUBLISHED_DECODE:g} tokens/s is "
            f"{pub[C['efficiency']]:.0f}% of it (the course rounds the ceiling to {course_ceiling:g}: "
            f"{100 * PUBLISHED_DECODE / course_ceiling:.0f}%)"
            + (f"; {'the largest model here' if len(rows) > 1 else 'the model here'} reached "
               f"{max(rows, key=lambda r: r[C['bytes per token']])[C['efficiency']]:.0f}%." if ref else "."),
        ],
    )
    fit_rows = [["tokens/s = B ÷ bytes (through the origin)", slope_gbs,
                 100 * slope_gbs / ref["gbs"] if ref else None, None, r2, len(rows)]]
    if fit is not None:
        fit_rows.append(["ms per token = fixed + bytes ÷ B′", fit["gbs"],
                         100 * fit["gbs"] / ref["gbs"] if ref and fit["gbs"] else None, fit["fixed_column"],
                         fit["r2"], len(rows)])
    ctx.table(
        "bandwidth_fit", "What bandwidth did decode achieve? Least-squares fits over the measured models",
        [("fit", ""), ("effective bandwidth", "GB/s"), ("of the ceilings' bandwidth", "%"),
         ("fixed time per token", "ms"), ("R²", ""), ("models", "")],
        fit_rows,
        notes=[
            f"B = Σ(tokens/s ÷ bytes) ÷ Σ(1 ÷ bytes²) over the medians: {slope_gbs:.3g} GB/s"
            + (f" against the {ref['gbs']:.3g} GB/s {ref['label']}" if ref else "")
            + ". R² is taken about the mean, so a line that explains less than the mean would show below 0"
            + (f"; here {r2:.3f}." if r2 is not None else "; one point gives none."),
        ] + ([line_note(fit)] if fit else []),
    )

    # 4. The picture: measured points against the bandwidth line, on log-log axes.
    xs = [r[C["bytes per token"]] / MB for r in rows]
    lo, hi = min(xs) / 2, max(max(xs), PUBLISHED_BYTES / MB) * 2
    spark = published.SPARK_BANDWIDTH_GB_PER_S
    ctx.plot(
        "decode_vs_bytes", "Decode tokens/s against bytes per token", "bytes per token (MB)", "decode tokens/s",
        [
            Series(label="measured (median, min–max)", x=xs, y=[r[C["measured"]] for r in rows],
                   y_min=[r[C["measured min"]] for r in rows], y_max=[r[C["measured max"]] for r in rows], style="points"),
            *([Series(label=f"ceiling: {ref['gbs']:.3g} GB/s ÷ bytes ({ref['label']})", x=[lo, hi],
                      y=[ref["gbs"] * GB / (lo * MB), ref["gbs"] * GB / (hi * MB)], style="dashed")] if ref else []),
            Series(label=f"fit: {slope_gbs:.3g} GB/s ÷ bytes", x=[lo, hi],
                   y=[slope / (lo * MB), slope / (hi * MB)], style="dashed"),
            Series(label=f"ceiling: {spark:g} GB/s ÷ bytes ({published.SPARK_NAME}, published)", x=[lo, hi],
                   y=[spark * GB / (lo * MB), spark * GB / (hi * MB)], style="dashed"),
            Series(label=PUBLISHED_LABEL, x=[PUBLISHED_BYTES / MB], y=[PUBLISHED_DECODE], style="points"),
        ],
        log_x=True, log_y=True,
    )
    return ctx.finish()


if __name__ == "__main__":
    script_main(__file__)
