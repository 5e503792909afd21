"""Lesson 5 — Generating text

A forward pass gives one probability per vocabulary entry; text comes from a loop: pick one token,
append it, run the model again. This script makes the loop visible (n generated tokens, n passes,
counted by the server's own /metrics), applies greedy, temperature, top-k and top-p to a real
next-token distribution with the numpy re-implementations in `bytesup.sampling`, and checks them
against the probabilities the server itself keeps after its sampler chain. It shows that a seeded
sampler repeats itself, fits total time = time to first token + time per output token × (n − 1)
from one length and predicts the others, and ends with speculative decoding measured on servers
it starts itself: the f32 model alone, with a draft (its own weights in q4_1 and q8_0) at two draft
lengths, and with llama.cpp's draft-free n-gram speculation; each beside the arithmetic
1 + a + … + a^k and a speed-up predicted from the measured cost of each model's pass.
"""

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import contextlib
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from bytesup import engine, formulas, measure, sampling
from bytesup.errors import BytesupError
from bytesup.records import (
    Completion,
    TokenProbabilities,
    decode_ms_per_token,
    shown_token,
)
from bytesup.results import Series
from bytesup.lesson import LessonContext

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
# Speculative decoding, measured on servers this script starts (on this host, like lessons 7 and 8).
# The target is the real model at its widest; the drafts are the same weights quantized.
SPEC_TARGETS = ("smollm2-135m-f32",)     # "smollm2-135m-f16" adds a second width (about 15 s more)
SPEC_DRAFTS = ("smollm2-135m-q4_1", "smollm2-135m-q8_0")
SPEC_DRAFT_LENGTHS = (4, 8)              # --spec-draft-n-max
SPEC_TOKENS = 64                         # tokens per request: a few seconds each on 2 cores
SPEC_REPEAT = 2                          # repeats per configuration at most (fewer with a lower --repeat)
SPEC_CTX = 512                           # context of each server: the longest prompt plus SPEC_TOKENS fit
SPEC_PROMPT = "The capital of France is"
# ngram-simple drafts from the text itself: it looks the last 12 tokens up earlier in the context and
# copies what followed (up to 48 tokens, llama.cpp's defaults). A text that repeats with a period of
# a few dozen tokens gives it something to find.
SPEC_REPETITIVE_PROMPT = ("Row, row, row your boat, gently down the stream. "
                          "Merrily, merrily, merrily, merrily, life is but a dream.\n") * 3
NGRAM_DRAFT_MAX = 48                     # ngram-simple's m-gram: the most it drafts at once
FORMULA_AGREES = 0.05                    # measured tokens per pass within 5% of 1 + a + … + a^k: "agrees"
# Used only when no speculative server can be started here: the arithmetic on illustrative numbers.
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
    return formulas.expected_tokens_per_pass(draft, accept)


def first_difference(tokens: list[int], reference: list[int]) -> int | None:
    """The first position where two token lists differ (a shorter list differs where it ends); None if equal."""
    for i, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


def spec_counts(done: list[Completion]) -> dict[str, Any]:
    """Generated, drafted and accepted tokens over a configuration's repeats, and what follows from
    them. A server that drafted nothing reports no counters: drafted and accepted are then 0, and
    `reported` says whether any repeat carried them."""
    generated = sum(c.timings.predicted_n for c in done)
    drafted = sum(c.timings.draft_n or 0 for c in done)
    accepted = sum(c.timings.draft_n_accepted or 0 for c in done)
    passes = formulas.target_passes(generated, accepted)
    return {"generated": generated, "drafted": drafted, "accepted": accepted, "passes": passes,
            "reported": any(c.timings.draft_n is not None for c in done),
            "acceptance": formulas.acceptance_rate(drafted, accepted),
            "tokens_per_pass": formulas.tokens_per_target_pass(generated, accepted),
            "drafted_per_pass": drafted / passes if passes > 0 else math.nan}


def spec_flags(spec_type: str, draft: str | None = None, n_max: int | None = None) -> list[str]:
    """llama-server's flags for one configuration (the same on the embedded engine)."""
    flags = ["--spec-type", spec_type]
    if draft is not None:
        flags += ["--spec-draft-model", draft]
    if n_max is not None:
        flags += ["--spec-draft-n-max", str(n_max)]
    return flags


# --- the lesson ---------------------------------------------------------------------------

def main(ctx: LessonContext):
    ctx.settings.update({"seed": SEED, "loop_prompt": LOOP_PROMPT, "sampling_prompt": SAMPLING_PROMPT,
                         "rel_tol": REL_TOL})
    _the_loop(ctx)
    _sampling(ctx)
    _seeded(ctx)
    ttft, tpot = _latency_model(ctx)
    _speculative(ctx, ttft, tpot)
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
    """The arithmetic alone, on illustrative numbers: where no speculative server could run here."""
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


def _spec_model(name: str) -> dict[str, Any]:
    """A course model's file (fetched or derived the first time) and its bytes per token."""
    from bytesup import models
    from bytesup.gguf_read import read_model_info

    path = models.ensure_model(name)
    info = read_model_info(path)
    return {"name": name, "path": str(path), "tensor_bytes": info["tensor_bytes"],
            "weight_type": ((info.get("file_type") or {}).get("name") or "").removeprefix("MOSTLY_") or None}


def _draft_cost_note(draft: list[Any], target: list[Any]) -> str:
    """Bytes against time: a draft reading a share of the target's bytes but costing a larger share of its
    time is not limited by memory reads (its weights read per second stay below the target's)."""
    share_bytes, share_time = draft[3] / target[3], draft[8]
    head = (f"{draft[0]} reads {share_bytes:.2g} of the target's bytes per token and costs {share_time:.2g} of its "
            f"pass, reading {draft[9]:.3g} GB/s against the target's {target[9]:.3g} GB/s")
    if share_time > share_bytes * 1.2 and draft[9] < target[9]:
        return head + ": memory is not what limits it; unpacking quantized blocks is work too."
    return head + "."


def _spec_rounds(ctx: LessonContext, servers: list[tuple[str, dict[str, Any], list[str], list[str]]],
                 repeat: int) -> dict[tuple[str, str], list[Completion]]:
    """Greedy completions on servers of our own, all started first (label, model, flags, prompts), then
    asked in turn, one round after another: a change in the machine's load while we measure falls on
    every configuration alike instead of on whichever ran at that moment."""
    with contextlib.ExitStack() as stack:
        clients = {}
        for label, model, flags, _ in servers:
            ctx.step(f"speculative decoding: starting {label}")
            clients[label] = stack.enter_context(
                ctx.local_server(label, Path(model["path"]), ["-c", str(SPEC_CTX), "--parallel", "1", *flags]))
        done: dict[tuple[str, str], list[Completion]] = {}
        ctx.step("speculative decoding: every configuration in turn")
        for _ in ctx.track(range(repeat), "rounds over every configuration"):
            for label, _, _, prompts in servers:
                for prompt in prompts:
                    # measure.PINNED: temperature 0 and a fixed seed, so every configuration must give the same text.
                    done.setdefault((label, prompt), []).extend(measure.timed_completions(
                        clients[label], prompt, SPEC_TOKENS, 1, seed=SEED, return_tokens=True))
        return done


def _speculative(ctx: LessonContext, ttft: float, tpot: float) -> None:
    facts = ctx.server_facts()
    if not facts["local"]:
        ctx.note(f"Speculative decoding was not measured: it needs servers this script starts on this host, and "
                 f"{facts['reason']}.")
        _speculative_note(ctx, ttft, tpot)
        return
    support = ctx.host("speculation_support", engine.speculation_support)
    if not support["supported"]:
        ctx.note(f"Speculative decoding was not measured: the {support['engine']} engine here cannot speculate "
                 f"({support['reason']}). Run this lesson with an engine that can (a llama-server build whose "
                 f"--help lists --spec-type, through LLAMA_SERVER) to measure it.")
        _speculative_note(ctx, ttft, tpot)
        return

    repeat = min(SPEC_REPEAT, ctx.repeat)
    prompt_name = {SPEC_PROMPT: "short", SPEC_REPETITIVE_PROMPT: "repetitive"}
    ctx.step("speculative decoding: the models (derived from the default model once)")
    spec_models = {n: ctx.host(f"spec_model_{n}", lambda n=n: _spec_model(n)) for n in (*SPEC_TARGETS, *SPEC_DRAFTS)}

    # Each model alone (its decode speed is the cost of one of its passes); the target with a draft
    # model; the target with n-gram speculation on the text that repeats.
    servers = [(f"spec-{n}", spec_models[n], [],
                [SPEC_PROMPT, SPEC_REPETITIVE_PROMPT] if n in SPEC_TARGETS else [SPEC_PROMPT])
               for n in (*SPEC_TARGETS, *SPEC_DRAFTS)]
    configs = []
    for target in SPEC_TARGETS:
        for draft in SPEC_DRAFTS:
            for k in SPEC_DRAFT_LENGTHS:
                configs.append({"target": target, "spec_type": "draft-simple", "draft": draft, "draft_n_max": k,
                                "prompt": SPEC_PROMPT, "label": f"spec-{target}-draft-{draft}-k{k}"})
        configs.append({"target": target, "spec_type": "ngram-simple", "draft": None, "draft_n_max": None,
                        "prompt": SPEC_REPETITIVE_PROMPT, "label": f"spec-{target}-ngram-simple"})
    for cfg in configs:
        draft_path = spec_models[cfg["draft"]]["path"] if cfg["draft"] else None
        servers.append((cfg["label"], spec_models[cfg["target"]], spec_flags(cfg["spec_type"], draft_path, cfg["draft_n_max"]),
                        [cfg["prompt"]]))
    done = _spec_rounds(ctx, servers, repeat)
    plain = {(n, p): done[(f"spec-{n}", p)] for n in (*SPEC_TARGETS, *SPEC_DRAFTS)
             for p in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT) if (f"spec-{n}", p) in done}
    spec = [(cfg, done[(cfg["label"], cfg["prompt"])]) for cfg in configs]

    # The costs of one pass of each model, measured alone.
    def decode(done: list[Completion]) -> list[float]:
        return measure.decode_samples(done)

    ms_per_token = {name: 1000.0 / statistics.median(decode(plain[(name, SPEC_PROMPT)]))
                    for name in (*SPEC_TARGETS, *SPEC_DRAFTS)}
    cost_rows = []
    for name in (*SPEC_TARGETS, *SPEC_DRAFTS):
        samples = decode(plain[(name, SPEC_PROMPT)])
        m = spec_models[name]
        med = statistics.median(samples)
        role = "target" if name in SPEC_TARGETS else "draft"
        ctx.measure("spec_model_decode_tokens_per_s", "tokens/s", samples, higher_is_better=True,
                    settings={"model": name, "role": role, "n_predict": SPEC_TOKENS},
                    description="one model alone: (predicted_n − 1) ÷ predicted_ms, the cost of one of its passes")
        cost_rows.append([name, role, m["weight_type"], m["tensor_bytes"], med, min(samples), max(samples),
                          ms_per_token[name], ms_per_token[name] / ms_per_token[SPEC_TARGETS[0]],
                          m["tensor_bytes"] * med / formulas.GB])
    target0 = SPEC_TARGETS[0]
    # Each target's prompt passes: a batch of tokens in one pass, at two sizes (what checking a draft costs).
    batches: dict[str, dict[str, tuple[int, float]]] = {}
    for name in SPEC_TARGETS:
        for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT):
            timings = [c.timings for c in plain[(name, prompt)]]
            batches.setdefault(name, {})[prompt] = (timings[0].prompt_n, statistics.median(t.prompt_ms for t in timings))
    batch_n, batch_ms = batches[target0][SPEC_PROMPT]
    long_n, long_ms = batches[target0][SPEC_REPETITIVE_PROMPT]
    ctx.table(
        "speculative_costs", f"The cost of one pass: each model alone, {SPEC_TOKENS} tokens after {SPEC_PROMPT!r}",
        [("model", ""), ("role", ""), ("weights", ""), ("bytes per token", "bytes"), ("decode median", "tokens/s"),
         ("min", "tokens/s"), ("max", "tokens/s"), ("one pass", "ms"), ("÷ target pass", target0),
         ("weights read", "GB/s")],
        cost_rows,
        notes=[
            "One pass of a model costs 1 ÷ its decode speed. A draft pass costs "
            + ", ".join(f"{r[8]:.2g} of a target pass ({r[0]})" for r in cost_rows if r[1] == "draft") + ".",
            *[_draft_cost_note(r, cost_rows[0]) for r in cost_rows if r[1] == "draft"],
            f"The target's prompt passes take several tokens at once, as checking a draft does: {batch_n} tokens "
            f"in {batch_ms:.3g} ms ({batch_ms / ms_per_token[target0]:.3g} × one decode pass), {long_n} tokens in "
            f"{long_ms:.3g} ms ({long_ms / ms_per_token[target0]:.3g} ×). A check of b tokens is costed on the line "
            f"through these two (never below one decode pass).",
        ],
    )

    # The table: every configuration, with its speed, its counters and the equality check.
    rows, arith_rows, runs_record = [], [], []
    for name in SPEC_TARGETS:
        for prompt in (SPEC_PROMPT, SPEC_REPETITIVE_PROMPT):
            done = plain[(name, prompt)]
            samples = decode(done)
            ctx.measure("spec_decode_tokens_per_s", "tokens/s", samples, higher_is_better=True,
                        settings={"target": name, "spec_type": "none", "draft": None, "draft_n_max": None,
                                  "prompt": prompt_name[prompt], "n_predict": SPEC_TOKENS})
            same = all(first_difference(c.tokens, done[0].tokens) is None for c in done)
            rows.append([name, "none", None, None, prompt_name[prompt], statistics.median(samples), min(samples),
                         max(samples), None, None, None, 1.0, 1.0,
                         "reference" if same else "repeats differ"])
            runs_record.append({"label": f"spec-{name}", "target": name, "spec_type": "none", "draft": None,
                                "draft_n_max": None, "prompt": prompt_name[prompt], "server_flags": [],
                                "tokens": [c.tokens for c in done]})
    no_counters, mismatched = [], []
    for cfg, done in spec:
        ref = plain[(cfg["target"], cfg["prompt"])]
        base = statistics.median(decode(ref))
        samples = decode(done)
        counts = spec_counts(done)
        if not counts["reported"]:
            no_counters.append(cfg["label"])
        diffs = [first_difference(c.tokens, ref[0].tokens) for c in done]
        bad = [d for d in diffs if d is not None]
        check = "identical" if not bad else f"differ from token {min(bad) + 1}"
        if bad:
            mismatched.append(cfg["label"])
        measured = statistics.median(samples) / base
        settings = {"target": cfg["target"], "spec_type": cfg["spec_type"], "draft": cfg["draft"],
                    "draft_n_max": cfg["draft_n_max"], "prompt": prompt_name[cfg["prompt"]], "n_predict": SPEC_TOKENS}
        ctx.measure("spec_decode_tokens_per_s", "tokens/s", samples, higher_is_better=True, settings=settings)
        rows.append([cfg["target"], cfg["spec_type"], cfg["draft"], cfg["draft_n_max"], prompt_name[cfg["prompt"]],
                     statistics.median(samples), min(samples), max(samples), counts["drafted"], counts["accepted"],
                     counts["acceptance"] if counts["reported"] else None,
                     counts["tokens_per_pass"], measured, check])
        runs_record.append({"label": cfg["label"], **{k: settings[k] for k in ("target", "spec_type", "draft", "draft_n_max", "prompt")},
                            "server_flags": spec_flags(cfg["spec_type"], cfg["draft"], cfg["draft_n_max"]),
                            "tokens": [c.tokens for c in done],
                            "draft_n": [c.timings.draft_n for c in done],
                            "draft_n_accepted": [c.timings.draft_n_accepted for c in done]})
        # The arithmetic beside it.
        a = counts["acceptance"]
        k = cfg["draft_n_max"] if cfg["draft"] else NGRAM_DRAFT_MAX
        expected = formulas.expected_tokens_per_pass(k, a) if counts["reported"] and not math.isnan(a) else None
        draft_ms = ms_per_token[cfg["draft"]] if cfg["draft"] else 0.0
        target_ms = ms_per_token[cfg["target"]]
        ideal = formulas.predicted_speculative_speedup(counts["tokens_per_pass"], counts["drafted_per_pass"],
                                                       draft_ms, target_ms)
        verify_ms = formulas.batch_pass_ms(counts["drafted_per_pass"] + 1, batches[cfg["target"]][SPEC_PROMPT],
                                           batches[cfg["target"]][SPEC_REPETITIVE_PROMPT], target_ms)
        predicted = formulas.predicted_speculative_speedup(counts["tokens_per_pass"], counts["drafted_per_pass"],
                                                           draft_ms, target_ms, verify_ms)
        label = f"{cfg['draft']} k={k}" if cfg["draft"] else f"ngram-simple (m-gram ≤ {k})"
        arith_rows.append([label, cfg["target"], a if counts["reported"] else None, k, expected, counts["tokens_per_pass"],
                           counts["tokens_per_pass"] / expected if expected else None,
                           draft_ms / target_ms, counts["drafted_per_pass"], verify_ms / target_ms, ideal, predicted,
                           measured, measured / predicted if predicted > 0 else None])

    ctx.settings["speculative"] = {
        "n_predict": SPEC_TOKENS, "repeat": repeat, "temperature": 0, "seed": SEED, "ctx_size": SPEC_CTX,
        "prompts": {"short": SPEC_PROMPT, "repetitive": SPEC_REPETITIVE_PROMPT},
        "engine": support, "runs": runs_record,
    }
    draft_rows = [r for r in rows if r[1] == "draft-simple"]
    best = max(draft_rows, key=lambda r: r[12]) if draft_rows else None
    ngram_rows = [r for r in rows if r[1] == "ngram-simple"]
    notes = [
        f"All at temperature 0 with seed {SEED}, {SPEC_TOKENS} tokens, {repeat} repeat(s) each, one server per "
        f"row (llama-server's flags: --spec-type, --spec-draft-model, --spec-draft-n-max). Acceptance = "
        f"draft_n_accepted ÷ draft_n; tokens per target pass = generated ÷ (generated − accepted); speed-up = "
        f"decode median ÷ the same target's median without a draft on the same prompt.",
        ("Check: every speculative run produced exactly the tokens of the plain run." if not mismatched else
         f"Check FAILED: {', '.join(mismatched)} produced other tokens than the plain run."),
    ]
    if best is not None:
        notes.append(f"The best draft here, {best[2]} at k = {best[3]}: {100 * best[10]:.3g}% accepted, "
                     f"{best[11]:.3g} tokens per target pass, {best[12]:.3g} × the plain decode speed."
                     if best[10] is not None else f"{best[2]} at k = {best[3]} reported no draft counters.")
    if ngram_rows:
        r = ngram_rows[0]
        notes.append(f"n-gram speculation drafts from the text itself, at no model cost: on the repeating text "
                     f"{r[8]} tokens drafted, {r[9]} accepted, {r[11]:.3g} tokens per target pass, "
                     f"{r[12]:.3g} × plain.")
    if no_counters:
        notes.append(f"No draft counters (draft_n) in the answers of {', '.join(no_counters)}: nothing was drafted.")
    ctx.table(
        "speculative_measured", "Speculative decoding, measured: target alone, with a draft model, with n-grams",
        [("target", ""), ("speculation", "--spec-type"), ("draft", ""), ("draft length", "max"), ("prompt", ""),
         ("decode median", "tokens/s"), ("min", "tokens/s"), ("max", "tokens/s"), ("drafted", "tokens"),
         ("accepted", "tokens"), ("acceptance", ""), ("tokens per target pass", ""), ("speed-up", "×"),
         ("same tokens as plain", "")],
        rows, notes=notes,
    )

    # Compare with the arithmetic.
    def named(row: list[Any]) -> str:
        return row[0] if len(SPEC_TARGETS) == 1 else f"{row[0]} on {row[1]}"

    over = [r for r in arith_rows if r[6] is not None and r[6] > 1 + FORMULA_AGREES]
    under = [r for r in arith_rows if r[6] is not None and r[6] < 1 - FORMULA_AGREES]
    agree = [r for r in arith_rows if r[6] is not None and abs(r[6] - 1) <= FORMULA_AGREES]
    arith_notes = [
        "Expected tokens per pass 1 + a + … + a^k takes the measured acceptance a and the longest draft k, "
        "and supposes each drafted token is accepted independently with the same a.",
    ]
    if agree:
        arith_notes.append(f"Within {100 * FORMULA_AGREES:g}% of the formula: {', '.join(named(r) for r in agree)}.")
    if over:
        arith_notes.append(
            f"Measured above the formula ({', '.join(named(r) for r in over)}): acceptances are not independent. "
            "Where the text is predictable the draft agrees for many tokens in a row, and where it is not it "
            "misses at once; the same a spread evenly over every position gives fewer long runs.")
    if under:
        arith_notes.append(
            f"Measured below the formula ({', '.join(named(r) for r in under)}): not every pass has a full draft. "
            "Drafts stop at the tokens left to generate, and n-gram drafts exist only where the last tokens "
            "were seen before and are as long as what followed them then.")
    arith_notes.append(
        "Predicted speed-up = tokens per pass × target pass ÷ (drafted per pass × draft pass + check): the "
        "draft's passes are paid in full. With the check costed as one target pass (a memory-bound target "
        "reads its weights once for the whole batch) it is the ideal; with the check costed from the target's "
        "measured prompt passes it is the prediction for this host.")
    scored = [r for r in arith_rows if r[13] is not None]
    if scored:
        lo, hi = min(scored, key=lambda r: r[13]), max(scored, key=lambda r: r[13])
        arith_notes.append(
            f"Measured ÷ predicted runs from {lo[13]:.3g} ({named(lo)}) to {hi[13]:.3g} ({named(hi)}). What the prediction "
            f"leaves out: the draft also reads the accepted tokens before drafting again, each round samples and "
            f"compares on the host, and a check pass of b tokens is not exactly a prompt pass of b tokens.")
    drafted = [r for r in arith_rows if r[7] > 0]
    if drafted:
        ratios = sorted({round(r[7], 3) for r in drafted})
        checks = [r[9] for r in drafted]
        arith_notes.append(
            f"When speculation pays: each drafted token costs c = draft pass ÷ target pass "
            f"({', '.join(f'{c:.2g}' for c in ratios)} here) and the check costs v target passes (1 for a "
            f"memory-bound target; {min(checks):.3g}–{max(checks):.3g} here), so a round that drafts k tokens pays "
            f"only if it yields more than k × c + v tokens. It pays most with a draft much cheaper than the target "
            f"(c near 0, as n-grams are) and a target that is memory-bound, whose pass costs about the same for "
            f"one token or several because the weights are read once either way (lesson 8 gives that verdict per "
            f"width). A draft that is the same small model, only quantized, costs a sizeable share of a target "
            f"pass on a few CPU cores, so even a high acceptance buys less than the tokens per pass suggest.")
    ctx.table(
        "speculative_vs_arithmetic", "Measured against the arithmetic: tokens per pass and speed-up",
        [("configuration", ""), ("target", ""), ("acceptance a", ""), ("k", "draft length"), ("expected tokens per pass", "1 + a + … + a^k"),
         ("measured tokens per pass", ""), ("measured ÷ expected", ""), ("draft pass ÷ target pass", ""),
         ("drafted per target pass", ""), ("check ÷ target pass", ""), ("ideal speed-up", "×"),
         ("predicted speed-up", "×"), ("measured speed-up", "×"), ("measured ÷ predicted", "")],
        arith_rows, notes=arith_notes,
    )


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
