"""Lesson 4 — The forward pass.

One forward pass turns a prompt into one probability for every vocabulary entry. This script
works softmax on three logits, asks the server for the eight most probable next tokens of the
four published prompts (full softmax, before any sampler) beside the server's own probabilities
for them, then times the two phases of inference from the server's own timings: prefill of a
long prompt and decode after a short and after a long one. It ends with decode as a share of the
bandwidth ceiling of lesson 1 (where this host's bandwidth bounds the server, or at the bandwidth
given with --bandwidth-gbs) and the cost of one pass, about two FLOPs per parameter per token.
"""

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import math
import statistics
from typing import Any

import numpy as np

from bytesup import formulas, hostbench, measure, published
from bytesup.records import Completion, shown_token
from bytesup.lesson import LessonContext

TITLE = "The forward pass"

# The lesson's four prompts, with the table each one fills.
PROMPTS = [
    ("top8_capital_of_france", "The capital of France is"),
    ("top8_cat_sat", "The cat sat on the"),
    ("top8_fibonacci", "def fibonacci(n):\n    if n"),
    ("top8_for_loop", "for (int i = 0; i <"),
]
# One pass, eight candidates from the full softmax (post_sampling_probs false: before top-k,
# top-p or temperature touch it). Temperature 0 and a seed make the generated token repeatable;
# cache_prompt false makes each prompt a fresh forward pass from its first token.
TOP8 = {"n_predict": 1, "n_probs": 8, "temperature": 0, "post_sampling_probs": False, "cache_prompt": False, "seed": 42}
# The same eight, as the server's own probabilities: temperature 1.0 alone in the chain, with every
# cut off (top_k 0, top_p 1, min_p 0), leaves the full softmax, and post_sampling_probs reports it
# as probabilities the server computed rather than logprobs. Seed and cache_prompt as above.
SERVER_PROBS = {"n_predict": 1, "n_probs": 8, "temperature": 1.0, "samplers": ["temperature"], "top_k": 0,
                "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": True, "cache_prompt": False, "seed": 42}

SOFTMAX_LOGITS = [2.0, 1.0, 0.1]  # the lesson's worked example
SOFTMAX_SHIFT = 100.0             # added to every logit: only the gaps matter

SHORT_PROMPT = "The capital of France is"
LONG_PROMPT_TOKENS = published.LESSON4["long_prompt_tokens"]  # the published long prompt's length
N_PREDICT = 32                    # tokens decoded per timed request
CONTEXT_MARGIN = 16               # tokens of context left free beyond prompt + n_predict

# Published figures (bytesup.published: lesson 4 on the DGX Spark, its specimen model, lesson 7's
# H100 ridge point). References only: every comparison with them is computed.
PUB = published.LESSON4
PUB_HOST = published.SPARK_NAME
PUB_MODEL = published.SPECIMEN_NAME


# --- small pure helpers --------------------------------------------------------------------

def top_rows(completion: Completion, server: Completion | None = None) -> list[list[Any]]:
    """[rank, token, probability %, server probability %, logprob] for the first generated position.

    probability is e^logprob; server probability is the server's own post-sampling probability of
    the same token id from `server` (None when that token is not among the ones it listed).
    """
    first = completion.first_position()
    cands = sorted(first.top_logprobs or [], key=lambda c: -c.logprob)
    theirs = {c[0]: c[3] for c in server.first_position().candidates()} if server is not None else {}
    return [[rank, shown_token(c.token, c.bytes), 100.0 * math.exp(c.logprob),
             100.0 * theirs[c.id] if c.id in theirs else None, c.logprob]
            for rank, c in enumerate(cands, start=1)]


def largest_gap(rows: list[list[Any]]) -> tuple[float, float] | None:
    """Largest |server probability − e^logprob| over the rows, absolute (as a fraction) and relative; None if no pair."""
    pairs = [(r[3] / 100.0, math.exp(r[4])) for r in rows if r[3] is not None]
    if not pairs:
        return None
    return max(abs(q - p) for q, p in pairs), max(abs(q - p) / p for q, p in pairs)


def softmax_example(logits: list[float] = SOFTMAX_LOGITS, shift: float = SOFTMAX_SHIFT) -> dict[str, Any]:
    """Softmax worked in numpy: e^logit, the probabilities, and the two facts the lesson states."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z)
    p = e / e.sum()
    shifted = np.exp(z + shift - (z + shift).max())  # the usual max-subtraction keeps e^102 finite
    p_shifted = shifted / shifted.sum()
    return {
        "logits": z.tolist(), "exp": e.tolist(), "probs": p.tolist(), "sum": float(p.sum()),
        "shift": shift, "probs_shifted": p_shifted.tolist(),
        "shift_max_abs_difference": float(np.max(np.abs(p - p_shifted))),
        "gap": float(z[0] - z[1]), "p0_over_p1": float(p[0] / p[1]), "e": float(np.e), "e_to_5": float(np.exp(5.0)),
    }


def long_prompt_length(n_ctx: int, wanted: int = LONG_PROMPT_TOKENS, n_predict: int = N_PREDICT,
                       margin: int = CONTEXT_MARGIN) -> int:
    """The published prompt length, shortened when the server's context cannot hold it plus the decode."""
    return max(1, min(wanted, n_ctx - n_predict - margin))


def percent(fraction: float) -> str:
    """A share as a percentage with three significant digits: 92.7%, 58.0%, 0.573%."""
    return f"{100 * fraction:.3g}%"


def spread(samples: list[float]) -> tuple[float, float, float]:
    return statistics.median(samples), min(samples), max(samples)


def ceiling_figures(decode: list[float], bytes_per_tok: float, bandwidth_samples: list[float],
                    host_applies: bool, given_gbs: float | None) -> dict[str, Any]:
    """Ceilings (bandwidth × 1e9 ÷ bytes per token) and efficiencies (decode ÷ ceiling × 100, in %).

    The host's ceiling comes from each bandwidth sample (GB/s); efficiency against it only when
    its bandwidth bounds the server's decode (`host_applies`), each decode sample over the median
    ceiling. `given_gbs` (--bandwidth-gbs) gives a second ceiling and efficiency when set.
    """
    ceilings = [formulas.ceiling_tokens_per_s(b * formulas.GB, bytes_per_tok) for b in bandwidth_samples]
    out: dict[str, Any] = {"ceilings": ceilings, "ceiling": statistics.median(ceilings) if ceilings else None,
                           "efficiencies": None, "given_ceiling": None, "given_efficiencies": None}
    if host_applies and ceilings:
        out["efficiencies"] = [formulas.percent(formulas.efficiency(d, out["ceiling"])) for d in decode]
    if given_gbs:
        out["given_ceiling"] = formulas.ceiling_tokens_per_s(given_gbs * formulas.GB, bytes_per_tok)
        out["given_efficiencies"] = [formulas.percent(formulas.efficiency(d, out["given_ceiling"])) for d in decode]
    return out


def main(ctx: LessonContext):
    repeat = max(2, ctx.repeat)  # at least two runs of each timed request, as published
    info = ctx.model_info()
    n_vocab = info["hyperparameters"]["n_vocab"] if info else None

    # 1. Softmax: scores become probabilities -----------------------------------------------
    ctx.step("softmax")
    sm = ctx.host("softmax_example", softmax_example)
    ctx.table("softmax", f"Softmax worked on {sm['logits']}",
              [("logit", ""), ("e^logit", ""), ("probability", ""), (f"probability after adding {sm['shift']:g}", "")],
              [[z, e, p, q] for z, e, p, q in zip(sm["logits"], sm["exp"], sm["probs"], sm["probs_shifted"])],
              notes=[f"The probabilities add up to {sm['sum']:.15g}.",
                     f"Adding {sm['shift']:g} to every logit changes them by at most {sm['shift_max_abs_difference']:.1e}: only the gaps matter.",
                     f"A gap of {sm['gap']:g} between the first two logits gives p0/p1 = {sm['p0_over_p1']:.6f}, and e = {sm['e']:.6f}; "
                     f"a gap of 5 would be a factor of e^5 = {sm['e_to_5']:.1f}."])

    # 2. The eight most probable next tokens of the four prompts --------------------------------
    for name, prompt in ctx.track(PROMPTS, "top eight next tokens"):
        done = ctx.server.completion(prompt, **TOP8)
        theirs = ctx.server.completion(prompt, **SERVER_PROBS)
        rows = top_rows(done, theirs)
        top_logprob = rows[0][4]
        share = sum(r[2] for r in rows) / 100.0
        first = done.first_position()
        picked = shown_token(first.token, first.bytes)
        gap = largest_gap(rows)
        matched = sum(r[3] is not None for r in rows)
        notes = [f"The top {len(rows)} cover {percent(share)} of the probability"
                 + (f"; the other {n_vocab - len(rows):,} vocabulary entries share the remaining {percent(1 - share)}." if n_vocab else "."),
                 f"The top token {rows[0][1]} has logprob {top_logprob:.4f}: e^{top_logprob:.4f} = {math.exp(top_logprob):.4g}, "
                 f"that is {percent(math.exp(top_logprob))}.",
                 f"At temperature 0 the server generated {picked}, "
                 + ("the rank-1 token." if picked == rows[0][1] else "which is not the rank-1 token listed."),
                 (f"Server probability: the server's own probabilities for {matched} of these {len(rows)} tokens, asked for "
                  f"separately (temperature 1.0 alone, no cuts: the full softmax); the largest |server probability − e^logprob| "
                  f"is {gap[0]:.2g} (relative: {gap[1]:.2g})." if gap else
                  "Server probability: none of these tokens is among the eight the server listed with its own probabilities.")]
        ctx.table(name, f"The eight most probable next tokens after the prompt {prompt!r} ({done.timings.prompt_n} tokens)",
                  [("rank", ""), ("token", ""), ("probability", "%"), ("server probability", "%"), ("logprob", "")],
                  rows, notes=notes)

    # 3. What one forward pass costs: every weight read once, two FLOPs per weight -------------------
    if info is not None:
        per_token = formulas.bytes_per_token(info)
        n_params = info["n_params"]
        flops = formulas.flops_per_token(n_params)
        pub_params, pub_bytes = published.SPECIMEN["n_params"], published.SPECIMEN["file_bytes"]
        pub_flops = formulas.flops_per_token(pub_params)
        intensity = flops / per_token
        ridge = published.H100["ridge_flops_per_byte"]
        ctx.table("cost_of_one_pass", "What one forward pass costs",
                  [("quantity", ""), ("unit", ""), ("this model", ""), (f"published ({PUB_MODEL})", "")],
                  [["parameters", "", n_params, pub_params],
                   ["bytes read (every weight once)", "bytes", per_token, pub_bytes],
                   ["FLOPs per token (2 per parameter)", "FLOP", flops, pub_flops],
                   ["FLOPs per byte read", "FLOP/byte", intensity, pub_flops / pub_bytes]],
                  notes=[f"2 × {n_params:,} parameters = {flops:,.0f} FLOPs per token, {intensity:.2f} per byte read"
                         + (f": {ridge / intensity:.0f}× below the {ridge:g} FLOP/byte an H100 needs to keep its arithmetic "
                            "units busy (published ridge point, lesson 7), so decode waits on memory."
                            if intensity < ridge else
                            f": at or above the {ridge:g} FLOP/byte of the H100's published ridge point (lesson 7)."),
                         f"One pass ends in {n_vocab:,} logits, one per vocabulary entry; softmax turns them into the probabilities above."])

    # 4. Prefill and decode, from the server's timings ------------------------------------------
    ctx.step("prefill and decode")
    n_ctx = measure.context_size(ctx.server)
    n_long = long_prompt_length(n_ctx)
    long_ids = measure.long_prompt_tokens(ctx.server, n_long)
    ctx.settings = {"top8": TOP8, "server_probabilities": SERVER_PROBS, "timed": {**measure.PINNED, "n_predict": N_PREDICT},
                    "short_prompt": SHORT_PROMPT, "long_prompt_tokens": n_long, "n_ctx": n_ctx, "repeat": repeat}
    long_runs = measure.timed_completions(ctx.server, long_ids, N_PREDICT, repeat, track=lambda r: ctx.track(r, "long prompt"))
    short_runs = measure.timed_completions(ctx.server, SHORT_PROMPT, N_PREDICT, repeat, track=lambda r: ctx.track(r, "short prompt"))
    prompt_n = long_runs[0].timings.prompt_n
    prefill = measure.prefill_samples(long_runs)
    decode_short = measure.decode_samples(short_runs)
    decode_long = measure.decode_samples(long_runs)
    p_med, d_med = statistics.median(prefill), statistics.median(decode_short)
    ratio = p_med / d_med
    flops_per_tok = formulas.flops_per_token(info["n_params"]) if info else None

    ctx.measure("prefill_tokens_per_s_long_prompt", "tokens/s", prefill, higher_is_better=True, settings={"prompt_tokens": prompt_n})
    ctx.measure("decode_tokens_per_s_short_prompt", "tokens/s", decode_short, higher_is_better=True,
                settings={"prompt_tokens": short_runs[0].timings.prompt_n, "n_predict": N_PREDICT})
    ctx.measure("decode_tokens_per_s_long_prompt", "tokens/s", decode_long, higher_is_better=True,
                settings={"prompt_tokens": prompt_n, "n_predict": N_PREDICT})
    ctx.measure("prefill_decode_ratio", "×", [ratio], higher_is_better=None,
                description="median prefill tokens/s ÷ median decode tokens/s after the short prompt")

    pub_ratio = PUB["prefill_decode_ratio"]
    batching = formulas.batch_sizes(ctx.identity.get("server", {}).get("flags"))
    reads = formulas.prefill_weight_reads(prompt_n, batching["n_ubatch"])
    if ratio > 1:
        ratio_note = (f"Prefill processed the prompt {ratio:.1f}× faster per token than decode produced new tokens "
                      f"(published: about {pub_ratio:.0f}× faster): prefill multiplies the weights by micro-batches "
                      f"of up to n_ubatch = {batching['n_ubatch']:,} tokens ({batching['source']}), so it read every "
                      f"weight ceil({prompt_n:,} ÷ {batching['n_ubatch']:,}) = {reads} time(s) for {prompt_n:,} tokens, "
                      f"about {prompt_n / reads:,.0f} tokens per read; decode reads every weight again for each token.")
    else:
        ratio_note = (f"Prefill processed the prompt at {ratio:.2f}× the per-token speed of decode: slower, not faster "
                      f"(published: about {pub_ratio:.0f}× faster).")
    d_long = statistics.median(decode_long)
    long_note = (f"Decode after the long prompt ran at {d_long / d_med:.1%} of its speed after the short one "
                 f"(published: {PUB['decode_long_tokens_per_s'] / PUB['decode_short_tokens_per_s']:.1%})")
    if max(decode_long) < min(decode_short):
        long_note += ("; every sample was slower than every short-prompt sample, beyond the spread: the weights are the "
                      "same, but each new token's attention reads the keys and values of every earlier position (lesson 6).")
    elif min(decode_long) > max(decode_short):
        long_note += "; every sample was faster than every short-prompt sample: the longer context did not slow decode measurably here."
    else:
        long_note += (f"; the samples overlap ({min(decode_long):,.1f}–{max(decode_long):,.1f} against "
                      f"{min(decode_short):,.1f}–{max(decode_short):,.1f} tokens/s), so the difference is within the spread.")
    pub_prefill = ", ".join(f"{v:,.0f}" for v in PUB["prefill_tokens_per_s"])
    ctx.table("prefill_vs_decode", f"Prefill of a {prompt_n:,}-token prompt versus decode, from the server's timings",
              [("phase", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), ("samples", ""), (f"published ({PUB_HOST})", "")],
              [[f"prefill, {prompt_n:,}-token prompt", "tokens/s", *spread(prefill), len(prefill), pub_prefill],
               [f"decode after the short prompt ({short_runs[0].timings.prompt_n} tokens)", "tokens/s", *spread(decode_short),
                len(decode_short), PUB["decode_short_tokens_per_s"]],
               [f"decode after the {prompt_n:,}-token prompt", "tokens/s", *spread(decode_long), len(decode_long),
                PUB["decode_long_tokens_per_s"]],
               ["prefill per token ÷ decode (short prompt)", "×", ratio, min(prefill) / max(decode_short),
                max(prefill) / min(decode_short), None, pub_ratio]],
              notes=[ratio_note, long_note,
                     f"Each request decoded {N_PREDICT} tokens at temperature 0 with end-of-text ignored, cache_prompt false; "
                     f"decode speed counts the {N_PREDICT - 1} passes after the first token, whose time belongs to the prompt. "
                     f"The context holds {n_ctx:,} tokens; the long prompt is {n_long:,} of them."]
              + ([f"Counting two FLOPs per parameter, prefill did {p_med * flops_per_tok / 1e9:,.2f} GFLOP/s of weight arithmetic "
                  f"and decode {d_med * flops_per_tok / 1e9:,.2f} GFLOP/s: the same weights, used for many tokens at once or one at a time."]
                 if flops_per_tok else []))

    # 5. Decode against the bandwidth ceiling of lesson 1 ----------------------------------------
    ctx.step("read bandwidth")
    if info is None:
        ctx.note("The model file is not readable here (pass --model PATH.gguf), so the bandwidth ceiling and "
                 "the cost of one pass are not computed.")
        return ctx.finish()
    facts = ctx.server_facts()
    applies = bool(facts["host_bandwidth_applies"])
    bw = ctx.run_bandwidth()  # the run's one reading, shared by lessons 1, 4, 7 and 8
    threads = bw["threads"]
    given_gbs = ctx.option("bandwidth_gbs")
    bw_samples = bw["gb_per_s"]["samples"]
    fig = ceiling_figures(decode_short, per_token, bw_samples, applies, given_gbs)
    ceilings, ceiling, effs = fig["ceilings"], fig["ceiling"], fig["efficiencies"]
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw_samples, higher_is_better=True, settings={"threads": threads})
    if effs is not None:
        ctx.measure("decode_ceiling_tokens_per_s", "tokens/s", ceilings, higher_is_better=None,
                    settings={"bytes_per_token": per_token, "threads": threads},
                    description="this host's read bandwidth × 1e9 ÷ bytes per token, per bandwidth sample")
        ctx.measure("decode_efficiency", "%", effs, higher_is_better=True,
                    description="decode tokens/s after the short prompt ÷ median ceiling × 100")
    if fig["given_ceiling"] is not None:
        ctx.measure("decode_ceiling_tokens_per_s_given_bandwidth", "tokens/s", [fig["given_ceiling"]], higher_is_better=None,
                    settings={"bandwidth_gbs": given_gbs}, description="--bandwidth-gbs × 1e9 ÷ bytes per token")
        ctx.measure("decode_efficiency_given_bandwidth", "%", fig["given_efficiencies"], higher_is_better=True,
                    settings={"bandwidth_gbs": given_gbs},
                    description="decode tokens/s after the short prompt ÷ the --bandwidth-gbs ceiling × 100")

    spark_bw, pub_bytes = published.SPARK_BANDWIDTH_GB_PER_S, published.SPECIMEN["file_bytes"]
    pub_ceiling, pub_decode, pub_eff = PUB["ceiling_tokens_per_s"], PUB["decode_short_tokens_per_s"], PUB["decode_efficiency_percent"]
    rows = [["read bandwidth, CPU of this host", "GB/s", *spread(bw_samples), spark_bw],
            ["bytes read per token (every weight once)", "bytes", per_token, per_token, per_token, pub_bytes],
            ["ceiling, CPU of this host: bandwidth ÷ bytes per token", "tokens/s", *spread(ceilings), pub_ceiling],
            ["decode after the short prompt", "tokens/s", *spread(decode_short), pub_decode]]
    notes = []
    if effs is not None:
        eff = statistics.median(effs)
        rows.append(["decode ÷ ceiling, CPU of this host", "%", *spread(effs), pub_eff])
        notes.append(f"Decode ran at {d_med:,.1f} tokens/s, {eff:.3g}% of the {ceiling:,.1f} tokens/s that "
                     f"{bw['gb_per_s']['median']:,.1f} GB/s allows for {per_token / formulas.GB:.4g} GB per token "
                     f"(samples: {min(effs):.3g}–{max(effs):.3g}%); {facts['reason']}.")
        if eff > 100:
            notes.append(f"Decode beat the ceiling: the server runs on this CPU, and {per_token / hostbench.MiB:.1f} MiB of "
                         "weights is small enough for part of it to stay in the CPU caches, which are faster than the "
                         "memory the bandwidth test streams from.")
    else:
        notes.append(f"This host's CPU memory bandwidth does not bound this server's decode: {facts['reason']}. The CPU "
                     "rows are for reference only; decode ÷ ceiling is "
                     + ("computed against --bandwidth-gbs only." if given_gbs else
                        "not computed (pass --bandwidth-gbs with the bandwidth of the memory that feeds decode)."))
    if fig["given_ceiling"] is not None:
        g, geffs = fig["given_ceiling"], fig["given_efficiencies"]
        rows.append([f"ceiling at {given_gbs:g} GB/s (--bandwidth-gbs)", "tokens/s", g, g, g, pub_ceiling])
        rows.append([f"decode ÷ ceiling at {given_gbs:g} GB/s", "%", *spread(geffs), pub_eff])
        notes.append(f"At the given {given_gbs:g} GB/s (--bandwidth-gbs) the ceiling is {g:,.1f} tokens/s, and decode "
                     f"reached {statistics.median(geffs):.3g}% of it (samples: {min(geffs):.3g}–{max(geffs):.3g}%).")
    notes.append(f"Published ({PUB_HOST}, {PUB_MODEL}): {spark_bw:g} GB/s ÷ {pub_bytes / formulas.GB:g} GB = "
                 f"{formulas.ceiling_tokens_per_s(spark_bw * formulas.GB, pub_bytes):.1f} tokens/s (published: about "
                 f"{pub_ceiling:.0f}); {pub_decode:g} ÷ {pub_ceiling:.0f} = {100 * pub_decode / pub_ceiling:.0f}% "
                 f"(published: {pub_eff:.0f}%). Those figures assume {spark_bw:g} GB/s; compare with them through --bandwidth-gbs.")
    reading = hostbench.describe_reading(bw)
    notes.append(f"Bandwidth: {reading}; ceilings come from each sample.")
    ctx.table("decode_vs_ceiling", "Decode against the bandwidth ceiling of lesson 1",
              [("quantity", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), (f"published ({PUB_HOST})", "")],
              rows, notes=notes)
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
