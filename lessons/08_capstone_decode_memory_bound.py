"""Lesson 8 — Why LLM decode is memory-bound (capstone)

Each decoded token reads every weight once, so decode can be no faster than memory bandwidth ÷
bytes per token. This script tests that claim on the widths of one model (the same weights stored
in fewer or more bytes each) and on larger models beyond them: it serves each in turn on a server
of its own, measures decode tokens/s with repeats, and asks each for the top token after "The
capital of France is". Effective GB/s = bytes per token × tokens/s; efficiency compares it with the
run's one reading of this host's bandwidth (or --bandwidth-gbs). Points whose weights fit in the
last-level cache are marked cache-resident and kept out of the fit. The verdicts follow stated
rules (bytesup.sweep): between neighbouring widths, memory-bound where effective GB/s stays flat
within the spread (tokens/s follows 1 ÷ bytes), compute-bound where fewer bytes are not faster; a
fit tokens/s = B ÷ bytes with equal relative weight per point gives the bandwidth decode achieved,
with its uncertainty, and which points lie on that line. The bytes model is then carried to
context: tokens/s at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d), applied to the
published DGX Spark figures.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup import environment, formulas, hostbench, measure, models, published, robust, sweep
from bytesup.ceiling import BandwidthReference, Spread, ceiling_at, effective_gbs, server_bandwidth
from bytesup.errors import BytesupError
from bytesup.gguf_read import read_model_info
from bytesup.records import Completion, shown_token
from bytesup.results import Series
from bytesup.lesson import LessonContext

TITLE = "Why LLM decode is memory-bound"

GB = formulas.GB
MB = 1e6

# The sweep, in one place: the widths of one model, then larger synthetic models beyond them.
DEFAULT_SIZES = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32", "large-q8_0")
PROMPT = "The capital of France is"  # short: the measurement is the decode after it; its top token is the answer
N_PREDICT = 32
CTX = 256  # the short prompt and the generated tokens fit; a small context keeps each server light
# The top token at temperature 0 from the full softmax (post_sampling_probs false); cache_prompt false.
TOP = {"n_predict": 1, "n_probs": 3, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}
MEMORY_SHARE = 0.5  # a model is skipped when its file would take more than this share of the available memory

# The published reference run (bytesup.published): the specimen on the DGX Spark, lesson 4's figures.
PUBLISHED_LABEL = f"{published.SPECIMEN_NAME} on {published.SPARK_NAME} (published)"
PUBLISHED_BYTES = published.SPECIMEN["file_bytes"]
PUBLISHED_DECODE = published.LESSON4["decode_short_tokens_per_s"]


# --- records ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelInfo:
    """What the lesson needs of one model: from its GGUF header (a host value) or the server's meta."""
    name: str
    n_params: int
    tensor_bytes: int
    weight_type: str | None
    preset: str | None = None
    path: str | None = None
    architecture: str | None = None
    n_layer: int | None = None
    n_embd: int | None = None

    @classmethod
    def of(cls, summary: dict) -> "ModelInfo":
        return cls(summary["name"], summary["n_params"], summary["tensor_bytes"], summary.get("weight_type"),
                   summary.get("preset"), summary.get("path"), summary.get("architecture"), summary.get("n_layer"),
                   summary.get("n_embd"))

    @property
    def bytes_per_token(self) -> int:
        return formulas.bytes_per_token({"tensor_bytes": self.tensor_bytes})


@dataclass(frozen=True)
class TopAnswer:
    token: str  # as shown
    percent: float  # its probability, %


@dataclass(frozen=True)
class ModelRun:
    """One model measured: its decode tokens/s samples and its top token after PROMPT."""
    info: ModelInfo
    decode: list[float]
    answer: TopAnswer


@dataclass(frozen=True)
class SweepRow:
    """One measured width: tokens/s, effective GB/s = tokens/s × bytes per token, and the efficiency
    against the bandwidth that feeds decode (None without one), with the sweep's verdict."""
    name: str
    weight_type: str | None
    bytes_per_token: float
    decode: Spread  # tokens/s
    effective: Spread  # GB/s
    efficiency: Spread | None  # % of the bandwidth
    answer: TopAnswer | None
    cache_resident: bool
    on_line: bool | None
    off_line_percent: float | None
    verdict: str


@dataclass(frozen=True)
class PublishedPoint:
    """The course's published decode on the DGX Spark, set beside the sweep."""
    label: str
    weight_type: str
    bytes_per_token: float
    decode: float
    effective_gbs: float
    efficiency_percent: float  # of the Spark's published bandwidth
    ceiling_tokens_per_s: float


@dataclass(frozen=True)
class FitRow:
    quantity: str
    gbs: float
    low: float
    high: float
    percent_of_run: float | None
    points: str


@dataclass(frozen=True)
class ContextPrediction:
    """The bytes model with context on the published figures."""
    kv_bytes_per_token: float
    depth: int
    short: float  # tokens/s after a short prompt
    effective_gbs: float  # the bandwidth that short decode implies
    predicted: float  # tokens/s after `depth` tokens
    published: float
    error: float  # predicted ÷ published − 1


# --- requests: the models and their decodes ------------------------------------------------------

def _summary(path: str, preset: str | None) -> dict:
    """What the lesson needs from a GGUF header (recorded as a host value)."""
    info = read_model_info(path)
    hp = info["hyperparameters"]
    return {"preset": preset, "name": preset or path.rsplit("/", 1)[-1].removesuffix(".gguf"), "path": path,
            "architecture": info["architecture"], "n_layer": hp["n_layer"], "n_embd": hp["n_embd"],
            "n_params": info["n_params"], "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info["file_type"] or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def preset_summary(name: str) -> dict:
    """The header summary of a sweep model, built or fetched here first when it is missing."""
    return _summary(str(models.ensure_model(name)), name)


def served_model(ctx: LessonContext, facts: dict) -> ModelInfo:
    """The user's model: from its GGUF when readable here, else from the server's /v1/models meta."""
    if facts["model_readable"]:
        return ModelInfo.of(ctx.host("model_info", lambda: _summary(str(ctx.require_model()), None)))
    served = ctx.server.served_model()
    meta = served.get("meta", {})
    if not meta.get("n_params") or not meta.get("size"):
        raise BytesupError("Lesson 8 needs the served model's size: its file is not readable here and /v1/models "
                           "gives no meta.size. Pass --model PATH.gguf.")
    return ModelInfo(served["name"], int(meta["n_params"]), int(meta["size"]), meta.get("ftype"),
                     n_embd=meta.get("n_embd"))


def measure_decode(ctx: LessonContext, srv, info: ModelInfo) -> ModelRun:
    """The top token after PROMPT, then ctx.repeat timed decodes of N_PREDICT tokens (measure.PINNED)."""
    answer = top_answer(srv.completion(PROMPT, **TOP))
    done = measure.timed_completions(srv, PROMPT, N_PREDICT, ctx.repeat, track=lambda it: ctx.track(it, info.name))
    return ModelRun(info, measure.decode_samples(done), answer)


def sweep_local(ctx: LessonContext, sizes: list[str], available: int | None) -> tuple[list[ModelRun], list[str]]:
    """Each model on a server of its own, with the user's server flags; those too big for memory skipped."""
    runs, skipped = [], []
    for name in sizes:
        ctx.step(f"building or reusing {name}")
        info = ModelInfo.of(ctx.host(f"model_{name}", functools.partial(preset_summary, name)))
        if available and info.tensor_bytes > MEMORY_SHARE * available:
            skipped.append(f"{name} ({info.tensor_bytes / GB:.3g} GB)")
            continue
        ctx.step(f"decoding with {name}")
        with ctx.local_server(f"preset-{name}", Path(info.path) if info.path else None, ["-c", str(CTX), "--parallel", "1"]) as srv:
            runs.append(measure_decode(ctx, srv, info))
    return runs, skipped


def sweep_remote(ctx: LessonContext, facts: dict) -> list[ModelRun]:
    """Only the one model the user's server serves."""
    info = served_model(ctx, facts)
    ctx.step(f"decoding with {info.name} on the user's server")
    return [measure_decode(ctx, ctx.server, info)]


# --- computation: pure, from the responses, the model headers and the bandwidth ------------------

def top_answer(completion: Completion) -> TopAnswer:
    """The most probable first token of a completion and its probability (%), from the full softmax."""
    first = completion.first_position()
    best = max(first.top_logprobs or [], key=lambda c: c.logprob)
    return TopAnswer(shown_token(best.token, best.bytes), 100.0 * math.exp(best.logprob))


def parse_sizes(value: Any) -> list[str]:
    """--sizes as given by the CLI (a list) or as a comma-separated string; defaults when absent."""
    if value is None:
        return list(DEFAULT_SIZES)
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in names if n and n.strip()]
    known = models.model_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise BytesupError(f"Unknown model(s) {', '.join(unknown) or '(none given)'} in --sizes. "
                           f"Models: {', '.join(known)}.")
    return names


def fastest_memory_gbs(before: dict | None, after: dict | None) -> float | None:
    """The run's fastest memory-bandwidth sample (before or after the decode work): above it, only a cache reads."""
    if before is None:
        return None
    return max(before["gb_per_s"]["max"], (after or {}).get("gb_per_s", {}).get("max", 0))


def sweep_points(runs: list[ModelRun], llc: int | None, memory_max: float | None) -> list[dict]:
    """bytesup.sweep's points: bytes per token and the decode samples of each model."""
    return [sweep.make_point(r.info.name, r.info.bytes_per_token, r.decode, llc, n_params=r.info.n_params,
                             weight_type=r.info.weight_type, memory_gbs_max=memory_max) for r in runs]


def efficiency_percent(gbs: float, ref_gbs: float) -> float:
    """Effective GB/s as a share of the bandwidth, %."""
    return formulas.percent(gbs / ref_gbs)


def decode_efficiency_samples(samples: list[float], bytes_per_token: float, ref_gbs: float) -> list[float]:
    """Each decode sample's effective GB/s (tokens/s × bytes per token) ÷ the bandwidth, %."""
    return [efficiency_percent(effective_gbs(v, bytes_per_token), ref_gbs) for v in samples]


def sweep_row(p: dict, verdict: dict, ref_gbs: float | None, answer: TopAnswer | None) -> SweepRow:
    """A point with its verdict (sweep.analyse) and its efficiency against `ref_gbs`."""
    eff = None if not ref_gbs else Spread(efficiency_percent(p["gbs"], ref_gbs), efficiency_percent(p["gbs_min"], ref_gbs),
                                          efficiency_percent(p["gbs_max"], ref_gbs))
    return SweepRow(p["name"], p.get("weight_type"), p["bytes"], Spread(p["median"], p["min"], p["max"]),
                    Spread(p["gbs"], p["gbs_min"], p["gbs_max"]), eff, answer, p["cache_resident"], verdict["on_line"],
                    None if verdict["residual"] is None else 100 * verdict["residual"], verdict["verdict"])


def published_point() -> PublishedPoint:
    """33.2 tokens/s × 7.16 GB = 237.7 GB/s of the Spark's 273 GB/s (ceiling 273 ÷ 7.16 = 38.1 tokens/s)."""
    gbs = effective_gbs(PUBLISHED_DECODE, PUBLISHED_BYTES)
    return PublishedPoint(PUBLISHED_LABEL, "Q8_0", PUBLISHED_BYTES, PUBLISHED_DECODE, gbs,
                          100 * gbs / published.SPARK_BANDWIDTH_GB_PER_S,
                          ceiling_at(published.SPARK_BANDWIDTH_GB_PER_S, PUBLISHED_BYTES))


def fit_rows(analysis: dict, ref: BandwidthReference | None, before: dict | None, after: dict | None) -> list[FitRow]:
    """The fitted B (with its standard-error range), then the run's bandwidth readings around the decode work."""
    rows = []
    fit = analysis["fit"]
    if fit:
        rows.append(FitRow("tokens/s = B ÷ bytes (equal relative weight per point)", fit["gbs"], fit["gbs_low"],
                           fit["gbs_high"], 100 * fit["gbs"] / ref.gbs if ref else None, ", ".join(analysis["basis"])))
    # Every row against the same reference: --bandwidth-gbs when given, else the reading before the work.
    if before is not None:
        g = before["gb_per_s"]
        rows.append(FitRow("this host's read bandwidth, before the decode work", g["median"], g["min"], g["max"],
                           100 * (g["median"] / ref.gbs) if ref else None, ""))  # exactly 100 when it is the reference
        if after is not None:
            a = after["gb_per_s"]
            rows.append(FitRow("this host's read bandwidth, after the decode work", a["median"], a["min"], a["max"],
                               100 * a["median"] / ref.gbs if ref else None, ""))
    return rows


def spark_context_prediction() -> ContextPrediction:
    """The bytes model with context on the published figures: the specimen's KV cache (no grouped-query
    attention: 32 KV heads, FP16) per token, the effective bandwidth its short-prompt decode implies, and
    the speed it predicts after lesson 4's long prompt."""
    spec = published.SPECIMEN
    kv = formulas.kv_bytes_per_token(spec["n_layer"], published.SPECIMEN_N_HEAD_KV, spec["n_embd"] // spec["n_head"], 2)
    depth = published.LESSON4["long_prompt_tokens"]
    short = published.LESSON4["decode_short_tokens_per_s"]
    effective = short * PUBLISHED_BYTES  # bytes/s that a decode of 33.2 tokens/s read
    predicted = formulas.decode_tokens_per_s_at_depth(effective, PUBLISHED_BYTES, kv, depth)
    measured = published.LESSON4["decode_long_tokens_per_s"]
    return ContextPrediction(kv, depth, short, effective / GB, predicted, measured, predicted / measured - 1)


# --- rendering: tables, notes and the plot ------------------------------------------------------

def show_models(ctx: LessonContext, runs: list[ModelRun], points: list[dict], llc: int | None, memory_max: float | None,
                bw: dict | None, skipped: list[str], available: int | None, facts: dict, local: bool) -> None:
    notes = [("Widths of one model share its parameters and differ in bytes per parameter; a step between "
              "neighbouring widths changes only how many bytes decode reads (and the arithmetic to unpack them).")]
    if llc and memory_max:
        notes.append(f"Fits in the cache: bytes per token ≤ the {llc / 2**20:,.0f} MiB last-level cache "
                     f"({(bw or {}).get('llc_source') or 'reported by the OS'}); on a virtual machine that is the cache "
                     f"the hypervisor reports, shared with other tenants, so an upper bound on what stays there. "
                     f"Cache-resident: it fits, and even its slowest sample read faster than the {memory_max:,.3g} GB/s "
                     f"of the run's fastest memory-bandwidth sample, which only a cache can deliver.")
    if skipped:
        assert available is not None
        notes.append(f"Skipped for memory: {', '.join(skipped)}, more than {100 * MEMORY_SHARE:.0f}% of the "
                     f"{available / GB:.3g} GB available.")
    if not local:
        notes.append(f"Only the one model the user's server serves was measured ({facts['reason']}); the sweep needs "
                     f"servers this script starts on this host.")
    ctx.table(
        "models", "The models: widths of one model, and larger models beyond them",
        [("model", ""), ("architecture", ""), ("weights", ""), ("blocks", ""), ("width", ""), ("parameters", ""),
         ("bytes per token", "bytes"), ("bytes per parameter", ""), ("fits in the cache", ""), ("cache-resident", "")],
        [[r.info.name, r.info.architecture, r.info.weight_type, r.info.n_layer, r.info.n_embd, r.info.n_params,
          p["bytes"], p["bytes"] / r.info.n_params, "yes" if p["fits_in_cache"] else "no",
          "yes" if p["cache_resident"] else "no"] for r, p in zip(runs, points, strict=True)],
        notes=notes,
    )


def record_measurements(ctx: LessonContext, points: list[dict], ref: BandwidthReference | None) -> None:
    for p in points:
        setting = {"preset": p["name"], "bytes_per_token": p["bytes"]}
        ctx.measure("decode_tokens_per_s", "tokens/s", p["samples"], higher_is_better=True, settings=setting,
                    description=f"decode after a short prompt, n_predict {N_PREDICT}, from the server's timings")
        if ref:
            ctx.measure("decode_efficiency", "%", decode_efficiency_samples(p["samples"], p["bytes"], ref.gbs),
                        # A stated bandwidth is part of the configuration; a measured one is not (it
                        # varies run to run, and runs must still join on these settings to compare).
                        higher_is_better=True,
                        settings={**setting, "cache_resident": p["cache_resident"],
                                  **({} if ref.host_cpu else {"bandwidth_gbs": ref.gbs})},
                        description=f"effective GB/s of each decode sample ÷ the bandwidth, {ref.label}")


def verdict_sentences(points: list[dict], analysis: dict, answers: dict[str, TopAnswer],
                      ref: BandwidthReference | None, llc_bytes: int | None) -> list[str]:
    """The conclusion, each sentence chosen and filled in by the analysis of this run's points."""
    out = []
    fit, steps, verdicts = analysis["fit"], analysis["steps"], analysis["verdicts"]
    tol = 100 * analysis["tolerance"]
    for st in steps:
        how = {sweep.MEMORY: "effective GB/s stayed flat: tokens/s follows 1 ÷ bytes, memory-bound",
               sweep.COMPUTE: "fewer bytes were not faster: compute-bound",
               sweep.PARTLY: "faster, but by less than the bytes shrank: partly memory-bound",
               sweep.FASTER: "faster than the bytes alone explain",
               sweep.INCONCLUSIVE: "the spread is too wide to tell memory- from compute-bound"}[st["verdict"]]
        out.append(f"From {st['wide']} to {st['narrow']} the bytes per token shrank {st['bytes_ratio']:.3g} × and decode "
                   f"got {st['speedup']:.3g} × as fast (effective GB/s × {st['gbs_ratio']:.3g}, judged within "
                   f"±{100 * st['allowance']:.0f}%): {how}"
                   + (" (a cache-resident width takes part)." if st["cache_resident"] else "."))
    cached = [p["name"] for p in points if p["cache_resident"]]
    if cached:
        assert llc_bytes is not None
        out.append(f"{', '.join(cached)}: the weights fit in the {llc_bytes / 2**20:,.0f} MiB last-level cache the OS "
                   f"reports and were read faster than memory delivers, so they came from the cache; marked "
                   f"cache-resident and kept out of the fit.")
    fitting = [p["name"] for p in points if p["fits_in_cache"] and not p["cache_resident"]]
    if fitting:
        out.append(f"{', '.join(fitting)}: the weights fit in that cache by size, yet decode read them no faster than "
                   "memory delivers, so they are treated as read from memory (the cache is shared, and it holds "
                   "more than the weights).")
    if fit:
        on = [n for n, v in verdicts.items() if v["on_line"]]
        off = [f"{n} {100 * v['residual']:+.0f}%" for n, v in verdicts.items() if v["on_line"] is False]
        out.append(f"The line tokens/s = B ÷ bytes through {', '.join(analysis['basis'])} (equal relative weight per "
                   f"point) gives B = {fit['gbs']:.3g} GB/s (one standard error {fit['gbs_low']:.3g}–{fit['gbs_high']:.3g})"
                   + (f", {100 * fit['gbs'] / ref.gbs:.0f}% of the {ref.gbs:.3g} GB/s {ref.label}" if ref else "")
                   + f". On the line (within ±{tol:.0f}% or the point's own spread, widened by two standard errors of B): "
                     f"{', '.join(on) or 'none'}"
                   + (f"; off it: {', '.join(off)}." if off else "."))
    trained = {n: a for n, a in answers.items() if not models.is_synthetic(n)}
    if answers:
        same = sorted({a.token for a in trained.values()})
        out.append(f"The answer after {PROMPT!r}: " + ", ".join(f"{n} {a.token} ({a.percent:.1f}%)" for n, a in answers.items())
                   + "." + (" The same top token at every width of the trained model, for fewer bytes: why people "
                            "quantize." if len(trained) > 1 and len(same) == 1 else
                            " The top token changed between widths of the trained model." if len(trained) > 1 else "")
                   + (" The synthetic models' random weights give no meaningful answer."
                      if len(trained) < len(answers) else ""))
    flagged = [f"{p['name']} {', '.join(f'{v:.3g}' for v in p['outliers'])} tokens/s" for p in points if p["outliers"]]
    out.append(("Outliers (beyond " + f"{robust.OUTLIER_MADS:g} scaled MADs of a width's median; shown in min and max, "
                "kept in the JSON, never widening an allowance): " + ("; ".join(flagged) if flagged else "none") + "."))
    by_verdict: dict[str, list[str]] = {}
    for n, v in verdicts.items():
        by_verdict.setdefault(v["verdict"], []).append(n)
    out.append("Verdict: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in by_verdict.items()) + ".")
    return out


def bandwidth_note(bw: dict | None, ref: BandwidthReference | None, given: Any, facts: dict) -> str:
    if bw is not None:
        note = f"Bandwidth: {hostbench.describe_reading(bw)}."
        if given is not None:
            note += f" Efficiencies use the {float(given):g} GB/s given with --bandwidth-gbs."
        return note
    if ref:
        return (f"Bandwidth: {ref.gbs:g} GB/s given with --bandwidth-gbs; this host's CPU bandwidth does not "
                f"apply, because {facts['reason']}.")
    return (f"No efficiency is shown: this host's CPU bandwidth does not bound these servers ({facts['reason']}); "
            f"pass --bandwidth-gbs with the bandwidth of the memory that feeds decode.")


SWEEP_COLUMNS = [("model", ""), ("weights", ""), ("bytes per token", "bytes"), ("decode", "tokens/s"),
                 ("decode min", "tokens/s"), ("decode max", "tokens/s"), ("effective", "GB/s"),
                 ("effective min", "GB/s"), ("effective max", "GB/s"), ("efficiency", "%"), ("efficiency min", "%"),
                 ("efficiency max", "%"), ("top token", ""), ("top token probability", "%"),
                 ("cache-resident", ""), ("on the line", ""), ("off the line", "%"), ("verdict", "")]


def sweep_table_row(r: SweepRow) -> list[Any]:
    eff = r.efficiency
    return [r.name, r.weight_type, r.bytes_per_token, r.decode.median, r.decode.min, r.decode.max, r.effective.median,
            r.effective.min, r.effective.max, eff.median if eff else None, eff.min if eff else None,
            eff.max if eff else None, r.answer.token if r.answer else None, r.answer.percent if r.answer else None,
            "yes" if r.cache_resident else "no", None if r.on_line is None else ("yes" if r.on_line else "no"),
            r.off_line_percent, r.verdict]


def published_table_row(pub: PublishedPoint) -> list[Any]:
    return [pub.label, pub.weight_type, pub.bytes_per_token, pub.decode, None, None, pub.effective_gbs, None, None,
            pub.efficiency_percent, None, None, None, None, None, None, None, None]


def show_sweep(ctx: LessonContext, rows: list[SweepRow], pub: PublishedPoint, sentences: list[str], bw_note: str) -> None:
    ctx.table(
        "sweep", f"Decode across widths: bytes per token, tokens/s, effective GB/s and the answer after {PROMPT!r}",
        SWEEP_COLUMNS, [*map(sweep_table_row, rows), published_table_row(pub)],
        notes=[*sentences,
               bw_note,
               (f"Effective GB/s = bytes per token × tokens/s; efficiency = effective ÷ bandwidth. {ctx.repeat} timed "
                f"decodes of {N_PREDICT} tokens per model, min and max the extreme samples."),
               (f"Published reference: {pub.decode:g} tokens/s × {pub.bytes_per_token / GB:g} GB = {pub.effective_gbs:.3g} "
                f"GB/s, {pub.efficiency_percent:.0f}% of the {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s "
                f"{published.SPARK_NAME} (ceiling {pub.ceiling_tokens_per_s:.1f} tokens/s; the course rounds it to "
                f"{published.LESSON4['ceiling_tokens_per_s']:g} and quotes "
                f"{published.LESSON4['decode_efficiency_percent']:g}%).")],
    )


def show_steps(ctx: LessonContext, steps: list[dict]) -> None:
    if not steps:
        return
    ctx.table(
        "steps", "Steps between neighbouring widths of one model",
        [("narrower", ""), ("wider", ""), ("bytes ratio", "×"), ("speed-up", "×"), ("effective GB/s ratio", "×"),
         ("judged within", "%"), ("cache-resident width", ""), ("verdict", "")],
        [[st["narrow"], st["wide"], st["bytes_ratio"], st["speedup"], st["gbs_ratio"], 100 * st["allowance"],
          "yes" if st["cache_resident"] else "no", st["verdict"]] for st in steps],
        notes=[(f"Bytes ratio = wider ÷ narrower bytes per token; speed-up = narrower ÷ wider median tokens/s. "
                f"Memory-bound: |ln(speed-up ÷ bytes ratio)| ≤ ln(1 + a), effective GB/s flat; compute-bound: "
                f"speed-up ≤ 1 + a, fewer bytes not faster; both at once: inconclusive; faster by less than the "
                f"bytes: partly memory-bound. a = the larger of ±{100 * sweep.TOLERANCE:.0f}% and each width's own "
                f"robust spread (interquartile range ÷ median of its samples that are not outliers; bytesup.robust).")],
    )


def show_fit(ctx: LessonContext, analysis: dict, rows: list[FitRow], bw: dict | None, after: dict | None) -> None:
    fit, slope = analysis["fit"], analysis["slope"]
    if fit:
        ctx.measure("fit_bandwidth_gb_per_s", "GB/s", [fit["gbs"]], higher_is_better=True,
                    settings={"models": analysis["basis"]},
                    description="geometric mean of effective GB/s over the points the data show memory-bound")
    notes = [("B = exp(mean of ln effective GB/s) over the points used: each point weighs the same, whatever its "
              "size; the range is one standard error (the scatter between points and within each point's samples).")]
    if slope:
        notes.append(f"Free log-log slope over every point beyond the cache: tokens/s ∝ bytes^{slope['slope']:.3g}"
                     + (f" ± {slope['se']:.2g}" if slope["se"] is not None else "")
                     + f" ({slope['n']} points); a purely memory-bound decode gives −1.")
    if bw is not None:
        g = bw["gb_per_s"]
        ctx.measure("read_bandwidth_gb_per_s", "GB/s", g["samples"], higher_is_better=True,
                    settings={"threads": bw["threads"]}, description=bw["method"])
        if after is not None:
            a = after["gb_per_s"]
            drift = ctx.run_bandwidth_drift() or hostbench.bandwidth_drift(g, a)
            ctx.measure("read_bandwidth_gb_per_s_after", "GB/s", a["samples"], higher_is_better=True,
                        settings={"threads": after["threads"]}, description=after["method"])
            notes.append(f"Drift of the run's bandwidth over the decode work: {g['median']:.3g} → {a['median']:.3g} GB/s "
                         f"({100 * drift['change']:+.0f}%); the two readings' ranges "
                         + ("overlap." if drift["ranges_overlap"] else
                            "do not overlap: efficiencies against the first reading carry that uncertainty."))
    ctx.table("bandwidth_fit", "What bandwidth did decode achieve?",
              [("quantity", ""), ("bandwidth", "GB/s"), ("low", "GB/s"), ("high", "GB/s"),
               ("of the run's bandwidth", "%"), ("points", "")],
              [[r.quantity, r.gbs, r.low, r.high, r.percent_of_run, r.points] for r in rows], notes=notes)


def show_context_prediction(ctx: LessonContext, sp: ContextPrediction) -> None:
    spec = published.SPECIMEN
    ctx.table(
        "bytes_model_with_context", "Decode at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d)",
        [("case", ""), ("weight bytes", "bytes"), ("KV bytes per token", "bytes"), ("depth", "tokens"),
         ("predicted", "tokens/s"), ("published", "tokens/s"), ("predicted ÷ published − 1", "%")],
        [[f"{published.SPECIMEN_NAME} on {published.SPARK_NAME}", PUBLISHED_BYTES, sp.kv_bytes_per_token, sp.depth,
          sp.predicted, sp.published, 100 * sp.error]],
        notes=[(f"The specimen has no grouped-query attention: KV = 2 × {spec['n_layer']} layers × "
                f"{published.SPECIMEN_N_HEAD_KV} KV heads × {spec['n_embd'] // spec['n_head']} "
                f"× 2 bytes = {sp.kv_bytes_per_token:,.0f} bytes per token."),
               (f"Its short-prompt decode of {sp.short:g} tokens/s read {sp.effective_gbs:.3g} GB/s; at that rate, "
                f"after {sp.depth:,} tokens each token also reads {sp.kv_bytes_per_token * sp.depth / GB:.3g} GB "
                f"of KV cache: {sp.predicted:.1f} tokens/s predicted, {sp.published:g} published "
                f"({100 * sp.error:+.1f}%). Lesson 6 sets the same model against this run's own depths.")],
    )


def plot_decode_vs_bytes(ctx: LessonContext, points: list[dict], fit: dict | None, ref: BandwidthReference | None) -> None:
    """Tokens/s against bytes per token on log-log axes, with the fitted line and the bandwidth's."""
    xs = [p["bytes"] / MB for p in points]
    lo, hi = min(xs) / 2, max(max(xs), PUBLISHED_BYTES / MB) * 2

    def line(gbs: float) -> list[float]:
        return [gbs * GB / (lo * MB), gbs * GB / (hi * MB)]

    mem = [p for p in points if not p["cache_resident"]]
    cached = [p for p in points if p["cache_resident"]]
    series = []
    for group, label in ((mem, "measured (median, min–max)"), (cached, "cache-resident (kept out of the fit)")):
        if group:
            series.append(Series(label=label, x=[p["bytes"] / MB for p in group], y=[p["median"] for p in group],
                                 y_min=[p["min"] for p in group], y_max=[p["max"] for p in group], style="points"))
    if fit:
        series.append(Series(label=f"fit: {fit['gbs']:.3g} GB/s ÷ bytes", x=[lo, hi], y=line(fit["gbs"]), style="dashed"))
    if ref:
        series.append(Series(label=f"{ref.gbs:.3g} GB/s ÷ bytes ({ref.label})", x=[lo, hi], y=line(ref.gbs),
                             style="dashed"))
    series.append(Series(label=PUBLISHED_LABEL, x=[PUBLISHED_BYTES / MB], y=[PUBLISHED_DECODE], style="points"))
    ctx.plot("decode_vs_bytes", "Decode tokens/s against bytes per token", "bytes per token (MB)", "decode tokens/s",
             series, log_x=True, log_y=True)


# --- the lesson ---------------------------------------------------------------------------------

def main(ctx: LessonContext):
    facts = ctx.server_facts()
    local = facts["local"]  # our own servers run on this host, with the user's server flags
    sizes = parse_sizes(ctx.option("sizes")) if local else []
    given = ctx.option("bandwidth_gbs")
    ctx.settings.update({"pinned": measure.PINNED, "top": TOP, "n_predict": N_PREDICT, "prompt": PROMPT, "local": local,
                         "sizes": sizes, "repeat": ctx.repeat, "bandwidth_gbs": given,
                         "host_bandwidth_applies": facts["host_bandwidth_applies"], "tolerance": sweep.TOLERANCE})

    # The run's bandwidth (taken before the decode work, shared by every lesson); only where it feeds decode.
    # Cache-resident is a question about this CPU's cache: only when our servers decode on it.
    bw = ctx.run_bandwidth() if facts["host_bandwidth_applies"] else None
    ref = server_bandwidth(bw["gb_per_s"]["median"] if bw else None, host_applies=facts["host_bandwidth_applies"],
                           given_gbs=given)
    llc = (bw or {}).get("llc_bytes") if facts["host_bandwidth_applies"] else None
    available = ctx.host("available_memory_bytes", environment.available_memory) if local else None

    # 1. The sweep: each model on a server of its own; the answer, then the timed decodes.
    runs, skipped = sweep_local(ctx, sizes, available) if local else (sweep_remote(ctx, facts), [])
    after = ctx.run_bandwidth_after() if bw is not None else None

    # 2. The points and their verdicts (bytesup.sweep: stated rules, tested on their own).
    memory_max = fastest_memory_gbs(bw, after)
    points = sweep_points(runs, llc, memory_max)
    analysis = sweep.analyse(points)
    show_models(ctx, runs, points, llc, memory_max, bw, skipped, available, facts, local)
    answers = {r.info.name: r.answer for r in runs}
    rows = [sweep_row(p, analysis["verdicts"][p["name"]], ref.gbs if ref else None, answers.get(p["name"]))
            for p in points]
    record_measurements(ctx, points, ref)
    show_sweep(ctx, rows, published_point(), verdict_sentences(points, analysis, answers, ref, llc),
               bandwidth_note(bw, ref, given, facts))
    show_steps(ctx, analysis["steps"])

    # 3. The fit and the run's bandwidth, before and after the decode work.
    show_fit(ctx, analysis, fit_rows(analysis, ref, bw, after), bw, after)

    # 4. The bytes model with context, on the published figures.
    show_context_prediction(ctx, spark_context_prediction())

    # 5. The picture: tokens/s against bytes per token on log-log axes, with the fitted line.
    plot_decode_vs_bytes(ctx, points, analysis["fit"], ref)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
