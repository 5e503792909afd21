"""Lesson 5 — Generating text

A forward pass gives one probability per vocabulary entry; text comes from a loop: pick one token,
append it, run the model again. This script makes the loop visible (n generated tokens, n passes,
counted by the server's own /metrics), applies greedy, temperature, top-k and top-p to a real
next-token distribution with the numpy re-implementations in `bytesup.sampling`, and checks them
against the probabilities the server itself keeps after its sampler chain. It shows that a seeded
sampler repeats itself, fits total time = time to first token + time per output token × (n − 1)
from one length and predicts the others, and ends with a computed note on speculative decoding.
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

from bytesup import measure, sampling
from bytesup.errors import BytesupError
from bytesup.records import (
    Completion,
    TokenProbabilities,
    decode_ms_per_token,
    shown_token,
)
from bytesup.results import Series
from bytesup.runner import LessonContext, script_main

TITLE = "Generating text"

SEED = 42
LOOP_PROMPT = "The cat sat on the"
LOOP_TOKENS = 16
# The lesson-4 prompt where the model's choice is genuinely open: samplers have something to cut.
SAMPLING_PROMPT = "def fibonacci(n):\n    if n"
REFERENCE_PROBS = 64          # first try at the full-softmax list; grown if a kept set needs more
MAX_REFERENCE_PROBS = 4096    # never ask for more candidates than this (keeps recordings small)
MAX_POST_PROBS = 32           # post-sampling candidates asked for at most
REL_TOL = 1e-5                # |Δp| / p allowed between our probabilities and the server's
# (label, the server's `samplers` order, their settings); temperature 1.0 leaves a chain's cut as is.
SAMPLER_SETTINGS: list[tuple[str, list[str], dict[str, float]]] = [
    ("greedy", ["temperature"], {"temperature": 0.0}),
    ("temperature 0.5", ["temperature"], {"temperature": 0.5}),
    ("temperature 1.0", ["temperature"], {"temperature": 1.0}),
    ("temperature 1.5", ["temperature"], {"temperature": 1.5}),
    ("top-k 5", ["top_k", "temperature"], {"top_k": 5, "temperature": 1.0}),
    ("top-k 10", ["top_k", "temperature"], {"top_k": 10, "temperature": 1.0}),
    ("top-p 0.5", ["top_p", "temperature"], {"top_p": 0.5, "temperature": 1.0}),
    ("top-p 0.9", ["top_p", "temperature"], {"top_p": 0.9, "temperature": 1.0}),
    ("top-k 10 → top-p 0.5 → temperature 1.5", ["top_k", "top_p", "temperature"],
     {"top_k": 10, "top_p": 0.5, "temperature": 1.5}),
    ("top-p 0.9 → top-k 10 → temperature 0.5", ["top_p", "top_k", "temperature"],
     {"top_p": 0.9, "top_k": 10, "temperature": 0.5}),
]
SEEDS = (1234, 1234, 5678)    # the same seed twice, then another
SEEDED_TOKENS = 12
FIT_N = 32                    # the length the latency model is fitted at
PREDICT_N = (8, 16, 64, 128)  # the lengths it predicts
# Speculative decoding, illustrative parameters (not measured here): draft length and the chance
# that the big model accepts each drafted token.
SPEC_DRAFT = 4
SPEC_ACCEPT = (0.6, 0.8)
# The podcast's sequential-floor example (podcast-what-is-a-forward-pass.txt): "five milliseconds"
# per forward pass, "five hundred tokens", "at least two and a half seconds".
PODCAST_PASS_MS = 5.0
PODCAST_TOKENS = 500
PODCAST_FLOOR_S = 2.5


# --- pure helpers (tested on their own) -------------------------------------------------

def steps_of(samplers: list[str], params: dict[str, float]) -> list[tuple[str, float]]:
    return [(name, params[name]) for name in samplers]


def post_sampling_body(samplers: list[str], params: dict[str, float], n_probs: int) -> dict[str, Any]:
    """One next token with the server's probabilities after the chain `samplers`.

    top_k 0, top_p 1.0 and min_p 0.0 switch off every cut that is not in the chain, so nothing
    else can trim; the seed pins the token drawn; cache_prompt false makes each request alike.
    """
    return {"n_predict": 1, "seed": SEED, "cache_prompt": False, "post_sampling_probs": True,
            "n_probs": n_probs, "samplers": samplers, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **params}


def compare_with_server(ref_ids: list[int], ours: np.ndarray, server: list[tuple[int, float]],
                        n_asked: int, sampled_id: int, relative: bool = False) -> dict[str, Any]:
    """Our kept probabilities (aligned with ref_ids) against the server's listed (id, p).

    The server lists its kept candidates, most probable first, at most `n_asked` of them: if it
    lists fewer, that is its whole kept set. `relative`: both sides are renormalized over the
    listed tokens first (for a temperature-only chain on a partial reference list).
    """
    pos = {tid: i for i, tid in enumerate(ref_ids)}
    kept = sampling.kept_indices(ours)
    kept_ids = [ref_ids[i] for i in kept]
    listed = [tid for tid, _ in server]
    complete = len(server) < n_asked
    missing = [tid for tid in listed if tid not in pos or ours[pos[tid]] <= 0]
    ours_p = np.array([ours[pos[tid]] if tid in pos else 0.0 for tid in listed])
    q = np.array([p for _, p in server])
    if relative and ours_p.sum() > 0:
        ours_p, q = ours_p / ours_p.sum(), q / q.sum()
    delta = np.abs(ours_p - q)
    rel = delta / np.where(q > 0, q, np.inf)
    same = (set(listed) == set(kept_ids)) if complete else (set(listed) == set(kept_ids[:len(listed)]))
    same = bool(same and not missing)
    max_rel = float(rel.max()) if rel.size else math.nan
    # relative mode knows only part of the reference, so a drawn token outside it is not a miss
    drawn_ok = sampled_id in set(kept_ids) or (relative and sampled_id not in pos)
    return {
        "kept_ours": None if relative else len(kept_ids),
        "kept_server": len(listed) if complete else None,
        "listed": len(listed),
        "server_listed_all": complete,
        "same_set": same,
        "max_abs": float(delta.max()) if delta.size else math.nan,
        "max_rel": max_rel,
        "sampled_in_kept": drawn_ok,
        "agree": same and drawn_ok and max_rel <= REL_TOL,
    }


def decode_calls_note(n_decode: float, predicted_n: int, prompt_n: int) -> str:
    """What the rise of n_decode_total (llama_decode calls) says about passes, from the counts alone.

    After the first token every further token needs its own pass, so predicted_n − 1 calls are
    decode; whatever is left over went to the prompt (the last of those calls also gives the first token).
    """
    later = max(predicted_n - 1, 0)
    prompt_calls = n_decode - later
    head = f"n_decode_total (calls of llama_decode) rose by {n_decode:g} for {predicted_n} tokens"
    if prompt_calls == 1:
        return (f"{head}: one pass per token. The {prompt_n}-token prompt went through in one pass that also gave "
                f"the first token, then {later} passes of one token each.")
    if prompt_calls > 1:
        return (f"{head}: {later} passes for the tokens after the first leave {prompt_calls:g} for the "
                f"{prompt_n}-token prompt: the server split it into batches, one pass each, the last giving the first token.")
    return (f"{head}: fewer calls than the {later + 1} a one-token-per-pass loop needs, so some pass produced more "
            "than one token.")


def latency_prediction(ttft_ms: float, tpot_ms: float, n: int) -> float:
    """Total time ≈ time to first token + time per output token × (n − 1)."""
    return ttft_ms + tpot_ms * (n - 1)


def speculative_tokens_per_pass(draft: int, accept: float) -> float:
    """Expected tokens per big-model pass with `draft` guesses each accepted with probability
    `accept` (independently): 1 + a + a² + … + a^draft."""
    return sum(accept ** i for i in range(draft + 1))


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"seed": SEED, "loop_prompt": LOOP_PROMPT, "sampling_prompt": SAMPLING_PROMPT,
                         "rel_tol": REL_TOL})
    _the_loop(ctx)
    _sampling(ctx)
    _seeded(ctx)
    ttft, tpot = _latency_model(ctx)
    _speculative_note(ctx, ttft, tpot)
    return ctx.finish()


def _the_loop(ctx: LessonContext) -> None:
    """n tokens, n passes: the server's counters before and after one generation."""
    ctx.step(f"generating {LOOP_TOKENS} tokens and counting passes")
    try:
        before = ctx.server.metrics()
    except BytesupError:
        before = None
    # Greedy, seeded, no prompt cache: the same tokens and the same work every run.
    done = ctx.server.completion(LOOP_PROMPT, n_predict=LOOP_TOKENS, n_probs=1, post_sampling_probs=False,
                                 temperature=0, seed=SEED, cache_prompt=False, ignore_eos=True)
    after = ctx.server.metrics() if before is not None else None
    rows = []
    for i, step in enumerate(done.completion_probabilities, start=1):
        p = math.exp(step.logprob) if step.logprob is not None else None
        rows.append([i, shown_token(step.token, step.bytes), step.id, p])
    t = done.timings
    ctx.table(
        "one_pass_per_token", f"The loop: {LOOP_TOKENS} tokens after {LOOP_PROMPT!r}, one per pass",
        [("pass", ""), ("token sampled", ""), ("id", ""), ("its probability", "")],
        rows,
        notes=[
            f"The server generated predicted_n = {t.predicted_n} tokens after a {t.prompt_n}-token prompt; "
            f"each row is one pass that produced one token, appended before the next pass.",
            f"Greedy (temperature 0) takes the most probable token each time; its probability averaged "
            f"{100 * statistics.fmean(r[3] for r in rows if r[3] is not None):.3g}% here.",
        ],
    )
    if before is None or after is None:
        ctx.note("The server does not serve /metrics (start it with --metrics): the passes were not counted.")
        return
    names = [k for k in before if k.startswith("llamacpp:") and k.endswith("_total")]
    counters = []
    for name in names:
        if name in after:
            counters.append([name, before[name], after[name], after[name] - before[name]])
    d = {r[0]: r[3] for r in counters}
    notes = []
    if "llamacpp:tokens_predicted_total" in d:
        notes.append(f"tokens_predicted_total rose by {d['llamacpp:tokens_predicted_total']:g}: "
                     f"{'equal to' if d['llamacpp:tokens_predicted_total'] == t.predicted_n else 'not'} "
                     f"predicted_n = {t.predicted_n}.")
    if "llamacpp:n_decode_total" in d:
        notes.append(decode_calls_note(d["llamacpp:n_decode_total"], t.predicted_n, t.prompt_n))
    if "llamacpp:prompt_tokens_total" in d:
        notes.append(f"prompt_tokens_total rose by {d['llamacpp:prompt_tokens_total']:g} "
                     f"(prompt_n = {t.prompt_n}).")
    ctx.table("metrics_delta", "The server's counters around that request (/metrics)",
              [("counter", ""), ("before", ""), ("after", ""), ("delta", "")], counters, notes=notes)


def _reference(ctx: LessonContext, n_probs: int) -> Completion:
    # temperature 0: the probabilities reported are the full softmax before any sampler,
    # whatever is picked; the seed and the uncached prompt keep the request identical every run.
    return ctx.server.completion(SAMPLING_PROMPT, n_predict=1, n_probs=n_probs, post_sampling_probs=False,
                                 temperature=0, seed=SEED, cache_prompt=False)


def _sampling(ctx: LessonContext) -> None:
    ctx.step("the next-token distribution before sampling")
    meta = ctx.server.served_meta()
    n_vocab = meta.get("n_vocab")
    ref = _reference(ctx, REFERENCE_PROBS)
    cands = ref.first_position().candidates()

    def needs_more(cands) -> bool:
        probs = [c[3] for c in cands]
        for _, samplers, params in SAMPLER_SETTINGS:
            if samplers == ["temperature"]:
                continue
            try:
                sampling.apply_chain(probs, steps_of(samplers, params), total=1.0)
            except sampling.IncompleteDistribution:
                return True
        return False

    asked = [REFERENCE_PROBS]
    if needs_more(cands) and (n_vocab is None or len(cands) < n_vocab):
        bigger = min(n_vocab or MAX_REFERENCE_PROBS, MAX_REFERENCE_PROBS)
        asked.append(bigger)
        ref = _reference(ctx, bigger)
        cands = ref.first_position().candidates()
    ids = [c[0] for c in cands]
    probs = np.array([c[3] for c in cands])
    text_of = {c[0]: shown_token(c[1], c[2]) for c in cands}
    complete = n_vocab is not None and len(cands) >= n_vocab
    total = None if complete else 1.0
    listed_mass = float(probs.sum())

    cum = np.cumsum(probs)
    top_rows = [[i + 1, text_of[ids[i]], ids[i], float(probs[i]), float(cum[i])] for i in range(min(10, len(ids)))]
    ctx.table(
        "next_token_distribution", f"The next-token distribution after {SAMPLING_PROMPT!r} (full softmax, top 10)",
        [("rank", ""), ("token", ""), ("id", ""), ("probability", ""), ("cumulative", "")],
        top_rows,
        notes=[
            f"The server listed {len(cands):,} candidates (n_probs asked: {', then '.join(str(a) for a in asked)}); "
            f"the vocabulary has {n_vocab if n_vocab is not None else 'an unreported number of'} entries.",
            f"The listed candidates hold {100 * listed_mass:.5g}% of the probability"
            + (f" (the whole vocabulary: their sum differs from 1 by {abs(listed_mass - 1):.2g}, the server's "
               f"float rounding)." if complete else "."),
            f"The top token has {100 * probs[0]:.3g}%, the top ten {100 * cum[min(9, len(cum) - 1)]:.3g}%.",
        ],
    )

    # Our samplers on that distribution.
    ctx.step("applying the samplers in numpy")
    ours_by_label: dict[str, np.ndarray | None] = {}
    applied_rows = []
    for label, samplers, params in SAMPLER_SETTINGS:
        try:
            ours = sampling.apply_chain(probs, steps_of(samplers, params), total=total)
        except sampling.IncompleteDistribution:
            ours = None
        ours_by_label[label] = ours
        if ours is None:
            applied_rows.append([label, " → ".join(samplers), None, None, None, None, None])
            continue
        kept = sampling.kept_indices(ours)
        top = kept[0]
        applied_rows.append([label, " → ".join(samplers), len(kept), 100 * float(probs[kept].sum()),
                             text_of[ids[top]], float(probs[top]), float(ours[top])])
    determined = [r for r in applied_rows if r[2] is not None]
    ctx.table(
        "samplers_applied", "Greedy, temperature, top-k and top-p on that distribution (numpy re-implementation)",
        [("setting", ""), ("chain", "in order"), ("kept", "tokens"), ("original probability kept", "%"),
         ("most probable token", ""), ("its probability before", ""), ("after", "")],
        applied_rows,
        notes=[
            "Temperature T divides the logits by T (p^(1/T), renormalized): below 1 it sharpens the "
            "distribution, above 1 it flattens it; greedy keeps one token.",
            "top-k keeps the k most probable tokens; top-p keeps the most probable ones until they add up to "
            "at least p; what is kept is renormalized to sum to 1.",
        ] + [
            f"{r[0]}: {r[2]:,} token(s) kept, {r[3]:.4g}% of the original probability; the top token goes "
            f"from {100 * r[5]:.3g}% to {100 * r[6]:.3g}%." for r in determined
        ] + ([f"{len(applied_rows) - len(determined)} setting(s) could not be applied exactly: their kept set "
              f"lies beyond the {len(cands):,} listed candidates."] if len(determined) < len(applied_rows) else []),
    )

    # The server's own probabilities after its sampler chain.
    ctx.step("checking against the server's post-sampling probabilities")
    check_rows = []
    for label, samplers, params in ctx.track(SAMPLER_SETTINGS, "post-sampling checks"):
        ours = ours_by_label[label]
        relative = False
        if ours is None and samplers == ["temperature"]:
            # temperature alone keeps the whole vocabulary: with a partial reference list the
            # normalizer is unknown, so compare within the listed tokens
            ours = sampling.apply_chain(probs, steps_of(samplers, params))
            relative = True
        if ours is None:
            check_rows.append([label, " → ".join(samplers), None, None, None, None, None, None, None, None,
                               REL_TOL, "not checked"])
            continue
        n_kept = int(np.count_nonzero(ours))
        n_ask = min(MAX_POST_PROBS, len(ids)) if relative else min(n_kept + 1, MAX_POST_PROBS)
        body = post_sampling_body(samplers, params, n_ask)
        done = ctx.server.completion(SAMPLING_PROMPT, **body)
        step: TokenProbabilities = done.first_position()
        server = [(c[0], c[3]) for c in step.candidates()]
        cmp = compare_with_server(ids, ours, server, n_ask, step.id, relative=relative)
        check_rows.append([label, " → ".join(samplers), cmp["kept_ours"], cmp["kept_server"], cmp["listed"],
                           cmp["same_set"], shown_token(step.token, step.bytes), cmp["sampled_in_kept"],
                           cmp["max_abs"], cmp["max_rel"], REL_TOL,
                           ("agree" if cmp["agree"] else "mismatch") + (" (relative)" if relative else "")])
    checked = [r for r in check_rows if r[4] is not None]
    agree = [r for r in checked if r[11].startswith("agree")]
    mismatch = [r for r in checked if r[11].startswith("mismatch")]
    partial = [r for r in checked if r[3] is None and r[2] is not None and r[2] > 1]
    edge = [float(np.min(ours_by_label[r[0]][ours_by_label[r[0]] > 0])) for r in partial
            if ours_by_label[r[0]] is not None]
    notes = [
        f"{len(agree)} of the {len(checked)} settings checked agree with the server within |Δp| ≤ {REL_TOL:g} × p"
        + (f"; mismatch: {', '.join(r[0] for r in mismatch)}." if mismatch else "."),
        f"Tolerance {REL_TOL:g} relative: the server computes in 32-bit floats"
        + (f" (its whole-vocabulary list sums to 1 within {abs(listed_mass - 1):.2g})" if complete else "")
        + f"; the largest relative difference seen is {max(r[9] for r in checked):.2g}.",
        "Each request pins the chain with `samplers` and sets top_k 0, top_p 1.0, min_p 0.0, so only the "
        "listed samplers cut; we ask for one candidate more than we keep (at most "
        f"{MAX_POST_PROBS}), so a shorter list is the server's whole kept set (kept, server).",
    ]
    if edge:
        notes.append(
            f"Where the server listed only part of a large kept set, the kept sets are still compared through "
            f"the renormalization: one token more or less would move every probability by about "
            f"{min(edge):.2g} relative or more, "
            f"{'above' if min(edge) > REL_TOL else 'NOT above'} the tolerance.")
    if any(r[1] == "temperature" and r[11].endswith("(relative)") for r in checked):
        notes.append(f"(relative): the reference list holds {100 * listed_mass:.4g}% of the distribution, not all "
                     f"of it, so for temperature alone both sides were renormalized over the tokens the server listed.")
    unchecked = [r[0] for r in check_rows if r[4] is None]
    if unchecked:
        notes.append(f"Not checked: {', '.join(unchecked)}; the kept set reaches beyond the {len(ids):,} candidates "
                     f"listed (at most {MAX_REFERENCE_PROBS:,} are asked for).")
    for r in checked:
        if r[1].startswith("top_p →") and "top_k" in r[1] and r[11].startswith("agree"):
            notes.append(f"The chain {r[1]} agrees, so the server applied top-p before top-k, in the order given.")
    ctx.table(
        "sampler_check", "Our samplers against the server's post-sampling probabilities",
        [("setting", ""), ("chain", "in order"), ("kept", "ours"), ("kept", "server"), ("listed by server", ""),
         ("same tokens", ""), ("token the server drew", ""), ("drawn token in our kept set", ""),
         ("max |Δp|", ""), ("max |Δp| / p", ""), ("tolerance", "relative"), ("verdict", "")],
        check_rows, notes=notes,
    )
    if checked:
        ctx.note(f"Sampler check tolerance: |Δp| ≤ {REL_TOL:g} × p. The server works in 32-bit floats, so exact "
                 f"equality is not expected: the largest relative difference here was "
                 f"{max(r[9] for r in checked):.2g}"
                 + (f", and a kept set one token off would show as {min(edge):.2g} or more." if edge else "."))


def _seeded(ctx: LessonContext) -> None:
    ctx.step("seeded sampling")
    rows = []
    for seed in SEEDS:
        # temperature 1.0 with every cut off: a draw from the whole distribution; cache_prompt false and
        # ignore_eos keep the work and the length the same each time.
        done = ctx.server.completion(LOOP_PROMPT, n_predict=SEEDED_TOKENS, temperature=1.0, seed=seed,
                                     top_k=0, top_p=1.0, min_p=0.0, cache_prompt=False, ignore_eos=True,
                                     return_tokens=True)
        rows.append([len(rows) + 1, seed, repr(done.content), done.tokens])
    same = rows[0][3] == rows[1][3] and rows[0][2] == rows[1][2]
    differ = rows[0][3] != rows[2][3]
    ctx.table(
        "seeded_sampling", f"Seeded sampling at temperature 1.0 ({SEEDED_TOKENS} tokens)",
        [("run", ""), ("seed", ""), ("text", ""), ("token ids", "")], rows,
        notes=[
            f"Runs 1 and 2 (seed {rows[0][1]} twice): {'identical' if same else 'different'} text and tokens.",
            f"Run 3 (seed {rows[2][1]}): {'different from' if differ else 'the same as'} run 1, "
            f"{sum(a != b for a, b in zip(rows[0][3], rows[2][3]))} of {len(rows[0][3])} tokens differ.",
        ],
    )
    ctx.settings["seeded"] = {"seeds": list(SEEDS), "n_predict": SEEDED_TOKENS}


def _timed(ctx: LessonContext, n: int) -> list[Completion]:
    # measure.PINNED (greedy, seeded, ignore_eos, no prompt cache): every repeat does the same work.
    return measure.timed_completions(ctx.server, LOOP_PROMPT, n, ctx.repeat,
                                     track=lambda r: ctx.track(r, f"n = {n}"), seed=SEED)


def _latency_model(ctx: LessonContext) -> tuple[float, float]:
    ctx.step("fitting the latency model")
    fit = _timed(ctx, FIT_N)
    ttft_samples = [c.timings.prompt_ms for c in fit]
    tpot_samples = [decode_ms_per_token(c.timings) for c in fit]
    ttft, tpot = statistics.median(ttft_samples), statistics.median(tpot_samples)
    ctx.measure("time_to_first_token_ms", "ms", ttft_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="prompt_ms: the prompt pass, which yields the first token")
    ctx.measure("decode_ms_per_token", "ms", tpot_samples, higher_is_better=False,
                settings={"n_predict": FIT_N}, description="predicted_ms / (predicted_n − 1)")

    rows, series_n, pred_y, meas_y, meas_min, meas_max = [], [], [], [], [], []
    for n in sorted({FIT_N, *PREDICT_N}):
        runs = fit if n == FIT_N else _timed(ctx, n)
        totals = [c.timings.prompt_ms + c.timings.predicted_ms for c in runs]
        predicted = latency_prediction(ttft, tpot, n)
        errors = [100 * (predicted - m) / m for m in totals]
        measured = statistics.median(totals)
        rows.append([n, "fit" if n == FIT_N else "predicted", predicted, measured, min(totals), max(totals),
                     100 * (predicted - measured) / measured, [c.timings.predicted_n for c in runs]])
        if n != FIT_N:
            ctx.measure("latency_model_error_pct", "%", errors, higher_is_better=None, settings={"n_predict": n},
                        description="(predicted − measured) ÷ measured total time, per repeat")
        series_n.append(n)
        pred_y.append(predicted)
        meas_y.append(measured)
        meas_min.append(min(totals))
        meas_max.append(max(totals))
    worst = max(rows, key=lambda r: abs(r[6]) if r[1] != "fit" else -1)
    ctx.table(
        "latency_model", "Total time ≈ time to first token + time per output token × (n − 1)",
        [("n", "tokens"), ("row", ""), ("predicted", "ms"), ("measured median", "ms"), ("measured min", "ms"),
         ("measured max", "ms"), ("error", "%"), ("predicted_n", "per repeat")],
        rows,
        notes=[
            f"Fitted at n = {FIT_N} ({len(fit)} repeats): time to first token {ttft:.4g} ms (prompt_ms), "
            f"time per output token {tpot:.4g} ms (predicted_ms ÷ (predicted_n − 1)).",
            f"Measured total = prompt_ms + predicted_ms; the largest prediction error is {worst[6]:+.3g}% at "
            f"n = {worst[0]}.",
            f"At n = {max(series_n)} the decode passes take {100 * tpot * (max(series_n) - 1) / pred_y[-1]:.3g}% "
            f"of the predicted time: long outputs are paid for pass by pass.",
            f"The podcast's floor (published example): {PODCAST_TOKENS} passes × {PODCAST_PASS_MS:g} ms = "
            f"{PODCAST_TOKENS * PODCAST_PASS_MS / 1000:g} s (it says {PODCAST_FLOOR_S:g} s: "
            f"{'consistent' if math.isclose(PODCAST_TOKENS * PODCAST_PASS_MS / 1000, PODCAST_FLOOR_S) else 'inconsistent'}); "
            f"at this run's {tpot:.3g} ms per pass, {PODCAST_TOKENS} tokens take at least "
            f"{latency_prediction(ttft, tpot, PODCAST_TOKENS) / 1000:.3g} s.",
        ],
    )
    ctx.plot("latency_model", "Predicted vs measured total time", "tokens generated (n)", "total time (ms)", [
        Series(label="predicted: TTFT + TPOT × (n − 1)", x=series_n, y=pred_y, style="dashed"),
        Series(label="measured (median, min–max)", x=series_n, y=meas_y, y_min=meas_min, y_max=meas_max,
               style="points"),
    ])
    return ttft, tpot


def _speculative_note(ctx: LessonContext, ttft: float, tpot: float) -> None:
    n = max(PREDICT_N)
    plain = latency_prediction(ttft, tpot, n)
    for a in SPEC_ACCEPT:
        per_pass = speculative_tokens_per_pass(SPEC_DRAFT, a)
        passes = math.ceil((n - 1) / per_pass)
        ctx.note(
            f"Speculative decoding (illustrative, not run): a draft model guesses {SPEC_DRAFT} tokens and the big "
            f"model checks them in one pass; if each guess is accepted with probability {a:g}, a pass yields "
            f"{per_pass:.3g} tokens on average, so {n} tokens need about {passes + 1} big-model passes instead of {n}: "
            f"{latency_prediction(ttft, tpot, passes + 1):.4g} ms instead of {plain:.4g} ms with this run's "
            f"TTFT and TPOT, before the draft model's own time.")


if __name__ == "__main__":
    script_main(__file__)
