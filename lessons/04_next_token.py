"""Lesson 4 — The forward pass.

One forward pass turns a prompt into one probability for every vocabulary entry. This script
works softmax on three logits, asks the server for the eight most probable next tokens of the
four published prompts (full softmax, before any sampler), then times the two phases of
inference from the server's own timings: prefill of a long prompt and decode after a short and
after a long one. It ends with decode as a share of the bandwidth ceiling of lesson 1 and the
cost of one pass, about two FLOPs per parameter per token.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from bytesup import formulas, gguf_read, hostbench, measure
from bytesup.errors import BytesupError
from bytesup.runner import LessonContext, script_main

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

SOFTMAX_LOGITS = [2.0, 1.0, 0.1]  # the lesson's worked example
SOFTMAX_SHIFT = 100.0             # added to every logit: only the gaps matter

SHORT_PROMPT = "The capital of France is"
LONG_PROMPT_TOKENS = 1921         # the published long prompt's length
N_PREDICT = 32                    # tokens decoded per timed request
CONTEXT_MARGIN = 16               # tokens of context left free beyond prompt + n_predict

# Published figures of lesson 4 (DGX Spark, deepseek-coder-6.7b-instruct Q8_0, llama-server
# -c 2048 -ngl 99 --parallel 1, 2026-10-12; /work/shared/course/OUTLINE.md). References only.
PUBLISHED = {
    "prefill_tokens_per_s": [2379.0, 2408.0],   # the 1,921-token prefill, two runs
    "decode_short_tokens_per_s": 33.2,
    "decode_long_tokens_per_s": 29.6,
    "prefill_decode_ratio": 72.0,               # "about 72 times faster per token"
    "ceiling_tokens_per_s": 39.0,
    "decode_efficiency": 0.85,
    "bandwidth_gb_per_s": 273.0,
    "model_bytes": 7.16e9,
    "n_params": 6.74e9,
}


# --- small pure helpers --------------------------------------------------------------------

def token_text(token: str, raw: list[int] | None) -> str:
    """A token with its spacing visible: repr of its text, or of its bytes when they are not UTF-8."""
    if raw is not None:
        data = bytes(raw)
        try:
            return repr(data.decode("utf-8"))
        except UnicodeDecodeError:
            return repr(data)
    return repr(token)


def top_rows(completion) -> list[list[Any]]:
    """[rank, token, probability %, logprob] for the candidates of the first generated position."""
    first = completion.completion_probabilities[0]
    cands = sorted(first.top_logprobs or [], key=lambda c: -c.logprob)
    return [[rank, token_text(c.token, c.bytes), 100.0 * math.exp(c.logprob), c.logprob]
            for rank, c in enumerate(cands, start=1)]


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


def context_size(server) -> int:
    """Tokens of context one request may use: /props' generation settings, else the first slot."""
    n_ctx = (server.props().default_generation_settings or {}).get("n_ctx")
    if not n_ctx:
        slots = server.slots()
        n_ctx = slots[0].get("n_ctx") if slots else None
    if not n_ctx:
        raise BytesupError("The server reports no context size in /props or /slots, so the long prompt cannot be sized.")
    return int(n_ctx)


def percent(fraction: float) -> str:
    """A share as a percentage with three significant digits: 92.7%, 58.0%, 0.573%."""
    return f"{100 * fraction:.3g}%"


def spread(samples: list[float]) -> tuple[float, float, float]:
    return statistics.median(samples), min(samples), max(samples)


def _model_info(ctx: LessonContext) -> dict | None:
    """The served model's GGUF facts, or None when the file is not readable here."""
    try:
        return gguf_read.read_model_info(ctx.require_model())
    except BytesupError:
        return None


def main(ctx: LessonContext):
    repeat = max(2, ctx.repeat)  # at least two runs of each timed request, as published
    info = ctx.host("model_info", lambda: _model_info(ctx))
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
        rows = top_rows(done)
        top_logprob = rows[0][3]
        share = sum(r[2] for r in rows) / 100.0
        picked = token_text(done.completion_probabilities[0].token, done.completion_probabilities[0].bytes)
        notes = [f"The top {len(rows)} cover {percent(share)} of the probability"
                 + (f"; the other {n_vocab - len(rows):,} vocabulary entries share the remaining {percent(1 - share)}." if n_vocab else "."),
                 f"The top token {rows[0][1]} has logprob {top_logprob:.4f}: e^{top_logprob:.4f} = {math.exp(top_logprob):.4g}, "
                 f"that is {percent(math.exp(top_logprob))}.",
                 f"At temperature 0 the server generated {picked}, "
                 + ("the rank-1 token." if picked == rows[0][1] else "which is not the rank-1 token listed.")]
        ctx.table(name, f"The eight most probable next tokens after the prompt {prompt!r} ({done.timings.prompt_n} tokens)",
                  [("rank", ""), ("token", ""), ("probability", "%"), ("logprob", "")], rows, notes=notes)

    # 3. What one forward pass costs: every weight read once, two FLOPs per weight -------------------
    pub = PUBLISHED
    if info is not None:
        per_token = formulas.bytes_per_token(info)
        n_params = info["n_params"]
        flops = formulas.flops_per_token(n_params)
        pub_flops = formulas.flops_per_token(pub["n_params"])
        ctx.table("cost_of_one_pass", "What one forward pass costs",
                  [("quantity", ""), ("unit", ""), ("this model", ""), ("published (deepseek-coder 6.7B)", "")],
                  [["parameters", "", n_params, pub["n_params"]],
                   ["bytes read (every weight once)", "bytes", per_token, pub["model_bytes"]],
                   ["FLOPs per token (2 per parameter)", "FLOP", flops, pub_flops],
                   ["FLOPs per byte read", "FLOP/byte", flops / per_token, pub_flops / pub["model_bytes"]]],
                  notes=[f"2 × {n_params:,} parameters = {flops:,.0f} FLOPs per token, {flops / per_token:.2f} per byte read: "
                         "decode does about two FLOPs for each weight it reads, far too few to keep the arithmetic units busy (lessons 3 and 7).",
                         f"One pass ends in {n_vocab:,} logits, one per vocabulary entry; softmax turns them into the probabilities above."])

    # 4. Prefill and decode, from the server's timings ------------------------------------------
    ctx.step("prefill and decode")
    n_ctx = context_size(ctx.server)
    n_long = long_prompt_length(n_ctx)
    long_ids = measure.long_prompt_tokens(ctx.server, n_long)
    ctx.settings = {"top8": TOP8, "timed": {**measure.PINNED, "n_predict": N_PREDICT}, "short_prompt": SHORT_PROMPT,
                    "long_prompt_tokens": n_long, "n_ctx": n_ctx, "repeat": repeat}
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

    pub_prefill = ", ".join(f"{v:,.0f}" for v in pub["prefill_tokens_per_s"])
    ctx.table("prefill_vs_decode", f"Prefill of a {prompt_n:,}-token prompt versus decode, from the server's timings",
              [("phase", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), ("samples", ""), ("published (DGX Spark)", "")],
              [[f"prefill, {prompt_n:,}-token prompt", "tokens/s", *spread(prefill), len(prefill), pub_prefill],
               [f"decode after the short prompt ({short_runs[0].timings.prompt_n} tokens)", "tokens/s", *spread(decode_short),
                len(decode_short), pub["decode_short_tokens_per_s"]],
               [f"decode after the {prompt_n:,}-token prompt", "tokens/s", *spread(decode_long), len(decode_long),
                pub["decode_long_tokens_per_s"]],
               ["prefill per token ÷ decode (short prompt)", "×", ratio, min(prefill) / max(decode_short),
                max(prefill) / min(decode_short), None, pub["prefill_decode_ratio"]]],
              notes=[f"Prefill processed the prompt {ratio:.1f}× faster per token than decode produced new tokens "
                     f"(published: about {pub['prefill_decode_ratio']:.0f}×): prefill reads each weight once for all "
                     f"{prompt_n:,} tokens, decode reads every weight again for each token.",
                     f"Decode after the long prompt ran at {statistics.median(decode_long) / d_med:.1%} of its speed after the short one "
                     f"(published: {pub['decode_long_tokens_per_s'] / pub['decode_short_tokens_per_s']:.1%}); the weights are the same, "
                     "but attention reads every earlier position (lesson 6).",
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
    threads = formulas.server_threads(ctx.identity.get("server", {}).get("flags"))
    per_thread = max(32 * hostbench.MiB, min(256 * hostbench.MiB, 4096 * hostbench.MiB // threads))
    bw = ctx.host("read_bandwidth", lambda: hostbench.measure_read_bandwidth(threads=threads, bytes_per_thread=per_thread,
                                                                             repeats=max(3, repeat)))
    given_gbs = ctx.option("bandwidth_gbs")
    bw_samples = bw["gb_per_s"]["samples"]
    ceilings = [formulas.ceiling_tokens_per_s(b * formulas.GB, per_token) for b in bw_samples]
    ceiling = statistics.median(ceilings)
    efficiencies = [formulas.efficiency(d, ceiling) for d in decode_short]
    ctx.measure("read_bandwidth_gb_per_s", "GB/s", bw_samples, higher_is_better=True, settings={"threads": bw["threads"]})
    ctx.measure("decode_ceiling_tokens_per_s", "tokens/s", ceilings, higher_is_better=None,
                settings={"bytes_per_token": per_token, "threads": bw["threads"]})
    ctx.measure("decode_efficiency", "fraction", efficiencies, higher_is_better=True,
                description="decode tokens/s after the short prompt ÷ median ceiling")

    eff = statistics.median(efficiencies)
    rows = [["read bandwidth of this host", "GB/s", *spread(bw_samples), pub["bandwidth_gb_per_s"]],
            ["bytes read per token (every weight once)", "bytes", per_token, per_token, per_token, pub["model_bytes"]],
            ["ceiling: bandwidth ÷ bytes per token", "tokens/s", ceiling, min(ceilings), max(ceilings), pub["ceiling_tokens_per_s"]],
            ["decode after the short prompt", "tokens/s", *spread(decode_short), pub["decode_short_tokens_per_s"]],
            ["decode ÷ ceiling", "%", 100 * eff, 100 * min(efficiencies), 100 * max(efficiencies), 100 * pub["decode_efficiency"]]]
    notes = [f"Decode ran at {d_med:,.1f} tokens/s, {eff:.0%} of the {ceiling:,.1f} tokens/s that {bw['gb_per_s']['median']:,.1f} GB/s "
             f"allows for {per_token / formulas.GB:.4g} GB per token (samples: {min(efficiencies):.0%}–{max(efficiencies):.0%}). "
             f"Published: {pub['decode_short_tokens_per_s']} of {pub['ceiling_tokens_per_s']:.0f} tokens/s, "
             f"{pub['decode_short_tokens_per_s'] / pub['ceiling_tokens_per_s']:.0%}.",
             f"Bandwidth: {bw['threads']} thread(s) (the server's thread count) summing {bw['bytes_per_thread'] / hostbench.MiB:.0f} MiB "
             f"each, {len(bw_samples)} samples."]
    if eff > 1:
        notes.append(f"Decode beat the ceiling: {per_token / hostbench.MiB:.1f} MiB of weights can stay in the CPU caches, "
                     "which are faster than the memory the bandwidth test streams from.")
    if given_gbs:
        given_ceiling = formulas.ceiling_tokens_per_s(given_gbs * formulas.GB, per_token)
        rows.append([f"ceiling at {given_gbs:g} GB/s (--bandwidth-gbs)", "tokens/s", given_ceiling, given_ceiling, given_ceiling, None])
        rows.append([f"decode ÷ ceiling at {given_gbs:g} GB/s", "%", 100 * d_med / given_ceiling,
                     100 * min(decode_short) / given_ceiling, 100 * max(decode_short) / given_ceiling, None])
    ctx.table("decode_vs_ceiling", "Decode against the bandwidth ceiling of lesson 1",
              [("quantity", ""), ("unit", ""), ("median", ""), ("min", ""), ("max", ""), ("published (DGX Spark)", "")],
              rows, notes=notes)
    return ctx.finish()


if __name__ == "__main__":
    script_main(__file__)
