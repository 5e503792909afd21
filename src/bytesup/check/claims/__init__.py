"""The general claims of `bytesup check`: true for any model on any host, checked on every run
from whatever lessons it holds.

Each claim is computed with check's own arithmetic from raw records: the server's recorded
answers (lesson 4's logprobs and post-sampling probabilities), measurements read by name, the
facts lessons state (`ctx.fact`) and the model's GGUF hyperparameters. Nothing here calls the
lessons' helpers or `bytesup.course.formulas`, so a lesson that computes a number wrongly fails the
check instead of agreeing with itself.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

from bytesup.course import decodetime, depthtime, robust
from bytesup.course import published
from bytesup.course.speculative import first_difference
from bytesup.store.runs import Run
from bytesup.check.evidence import (
    FactShapeError,
    RawNextToken,
    ShownTopTokens,
    exchanges_path,
    RawStream,
    kv_rows,
    model_hyperparameters,
    recorded_next_tokens,
    recorded_streams,
    sampler_comparisons,
    shown_top_tokens,
)
from bytesup.store.facts.lesson04 import FilePass, NumpyPass
from bytesup.store.facts.lesson06 import DecodeAtDepth
from bytesup.store.facts.lesson08 import DecodeModel
from bytesup.store.render import fmt, measurement_label
from bytesup.store.results import LessonResult, Measurement
from bytesup.check.verdicts import (FAIL, INCONCLUSIVE, NA, PASS, ClaimResult, find_lesson, judged, measurements, missing,
                                    samples_text)

L4, L5, L6, L7, L8 = "04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit", "08_capstone_decode_memory_bound"
L5B = "05b_speculative_decoding"


def _relative_gap(shown: float, expected: float) -> float:
    return abs(shown - expected) / max(abs(expected), 1e-300)


def _prompt_label(prompt: str | None) -> str:
    if prompt is None:
        return "a prompt of token ids"
    return repr(prompt if len(prompt) <= 40 else prompt[:37] + "…")


# --- lesson 4: probabilities ---------------------------------------------------------------

# The server computes probabilities and logprobs in float32, each path with its own sum over the
# whole vocabulary. Summing n float32 numbers in two orders can differ by up to about n × 2^-24
# relative (2.9e-3 for SmolLM2's 49,152 tokens); seen: 1.7e-4 on SmolLM2, 1e-6 on a 4,096-token
# vocabulary. 1e-3 covers that and still catches a wrong softmax, which is off by whole percents.
EXP_RELATIVE_TOLERANCE = 1e-3
# A number the lesson copied or computed from the recorded answer (e^logprob in float64, stored
# as a fraction or a percentage) agrees with check's recomputation far closer than this.
SHOWN_RELATIVE_TOLERANCE = 1e-6
# The logprobs of the top eight come in float32: their e^ can sum to 1 plus a few 1e-7 when the
# eight hold all the probability.
SHARE_TOLERANCE = 1e-6


def _recorded(run: Run, lesson: LessonResult) -> tuple[list[RawNextToken], str]:
    """Lesson 4's recorded answers with candidates, and the exchanges file's name ('' when none)."""
    path = exchanges_path(run, lesson)
    if path is None:
        return [], ""
    return recorded_next_tokens(path), path.relative_to(run.path).as_posix() if path.is_relative_to(run.path) else str(path)


def _shown(lesson: LessonResult) -> tuple[list[ShownTopTokens], str]:
    """(tables, '') or ([], why the lesson's fact cannot be read)."""
    try:
        return shown_top_tokens(lesson), ""
    except FactShapeError as exc:
        return [], f"lesson {lesson.lesson_id}'s fact {exc}"


def claim_probability_is_exp_logprob(run: Run) -> list[ClaimResult]:
    """The server's own post-sampling probability (temperature 1, no cuts: the full softmax) of each
    candidate equals e^logprob of its answer for the same prompt, both read from the recorded
    exchanges. A run without recorded exchanges falls back to the numbers the lesson showed."""
    cid, text = "probability_is_exp_logprob", "each probability in a next-token table equals e^logprob"
    lesson = find_lesson(run, "04_")
    if lesson is None:
        return [ClaimResult(cid, "general", "04", text, NA, detail=missing(run, "04_", L4))]
    answers, file = _recorded(run, lesson)
    pairs: list[tuple[str, float, float]] = []   # (where, probability, e^logprob)
    skipped = []
    for post in (a for a in answers if a.post_sampling):
        if not post.full_softmax():
            skipped.append(f"line {post.line} (not temperature 1 without cuts)")
            continue
        logs = next((a for a in answers if not a.post_sampling and a.prompt == post.prompt and a.prompt is not None), None)
        if logs is None:
            continue
        lp = logs.by_id()
        for c in post.candidates:
            if c.id in lp:
                pairs.append((f"{_prompt_label(post.prompt)} token {lp[c.id].text!r}", c.value, math.exp(lp[c.id].value)))
    source = f"the server's answers recorded in {file}"
    if not pairs:
        # An older run, or one made without recordings: the numbers the lesson showed.
        tables, why = _shown(lesson)
        if why:
            return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=why)]
        for t in tables:
            for row in t.tokens:
                p = row.server_probability if row.server_probability is not None else row.probability
                if p is not None and row.logprob is not None:
                    pairs.append((f"{t.key} token {row.token!r}", p, math.exp(row.logprob)))
        source = "the lesson's tables (no recorded post-sampling answers to read)"
        if not pairs:
            why = f"lesson {lesson.lesson_id} has no recorded post-sampling answers and no next-token table with probabilities and logprobs"
            return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail=why)]
    worst = max(pairs, key=lambda w: _relative_gap(w[1], w[2]))
    gap = _relative_gap(worst[1], worst[2])
    detail = f"from {source}" + (f"; skipped {', '.join(skipped)}" if skipped else "")
    return [ClaimResult(
        cid, "general", lesson.lesson_id, text, PASS if gap <= EXP_RELATIVE_TOLERANCE else FAIL,
        observed=f"largest relative gap {gap:.2g} over {len(pairs)} tokens",
        expected=f"p = {worst[1]:.6g} vs e^logprob = {worst[2]:.6g} ({worst[0]})",
        tolerance=f"relative {EXP_RELATIVE_TOLERANCE:g}", detail=detail)]


def _logprob_answer(answers: list[RawNextToken], table: ShownTopTokens) -> RawNextToken | None:
    """The recorded logprob answer a table shows: the one for its prompt; in an older run (no prompt
    named), the first whose candidates, ranked by logprob, are the table's tokens."""
    logs = [a for a in answers if not a.post_sampling]
    if table.prompt is not None:
        return next((a for a in logs if a.prompt == table.prompt), None)
    shown = [t.token for t in table.tokens]
    for a in logs:
        ranked = [c.text for c in sorted(a.candidates, key=lambda c: -c.value)]
        if ranked[: len(shown)] == shown:
            return a
    return None


def _compare_table(table: ShownTopTokens, answers: list[RawNextToken]) -> tuple[int, list[str], tuple[float, str]]:
    """(tokens compared, problems, (largest relative gap, where)) of one shown table against the answers."""
    logs = _logprob_answer(answers, table)
    if logs is None:
        what = f"prompt {_prompt_label(table.prompt)}" if table.prompt is not None else "answer listing its tokens in this order"
        return 0, [f"{table.key}: no recorded {what}"], (0.0, "")
    post = next((a for a in answers if a.post_sampling and a.prompt == logs.prompt and a.prompt is not None and a.full_softmax()), None)
    ranked = sorted(logs.candidates, key=lambda c: -c.value)
    theirs = post.by_id() if post is not None else {}
    problems, worst, n = [], (0.0, ""), 0

    def gap(shown: float | None, expected: float, what: str, where: str) -> None:
        nonlocal worst
        if shown is None:
            problems.append(f"{where}: no {what} shown (expected {expected:.6g})")
            return
        g = _relative_gap(shown, expected)
        if g > worst[0]:
            worst = (g, f"{where} {what}")
        if g > SHOWN_RELATIVE_TOLERANCE:
            problems.append(f"{where}: {what} {shown:.6g} shown, {expected:.6g} from the recorded answer")

    for row in table.tokens:
        where = f"{table.key} rank {row.rank} {row.token!r}"
        if not 1 <= row.rank <= len(ranked):
            problems.append(f"{where}: the recorded answer lists {len(ranked)} candidates")
            continue
        raw = ranked[row.rank - 1]
        n += 1
        if (row.id is not None and row.id != raw.id) or row.token != raw.text:
            problems.append(f"{where}: the recorded answer's token at rank {row.rank} is {raw.text!r} (id {raw.id})")
            continue
        gap(row.logprob, raw.value, "logprob", where)
        gap(row.probability, math.exp(raw.value), "probability (e^logprob)", where)
        if raw.id in theirs:
            gap(row.server_probability, theirs[raw.id].value, "server probability", where)
        elif row.server_probability is not None:
            problems.append(f"{where}: server probability {row.server_probability:.6g} shown, but no recorded "
                            "post-sampling answer lists this token")
    return n, problems, worst


def claim_top_tokens_match_server(run: Run) -> list[ClaimResult]:
    """Every token lesson 4 shows against the server's recorded answer for the same prompt: the same
    token at the same rank, its logprob, its probability = e^logprob (so a softmax at another
    temperature fails), and the server's post-sampling probability."""
    cid = "top_tokens_match_server"
    text = "lesson 4's next-token tables show the server's recorded logprobs, e^logprob and post-sampling probabilities"
    lesson = find_lesson(run, "04_")
    if lesson is None:
        return [ClaimResult(cid, "general", "04", text, NA, detail=missing(run, "04_", L4))]
    tables, why = _shown(lesson)
    if why:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=why)]
    if not tables:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"lesson {lesson.lesson_id} states no top_tokens fact and has no top8_ table")]
    answers, file = _recorded(run, lesson)
    if not answers:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"lesson {lesson.lesson_id} has no recorded /completion answers with candidates to compare with")]
    total, problems, worst = 0, [], (0.0, "")
    for t in tables:
        n, probs, w = _compare_table(t, answers)
        total += n
        problems += probs
        worst = max(worst, w)
    return [ClaimResult(
        cid, "general", lesson.lesson_id, text, FAIL if problems else PASS,
        observed=f"{total} tokens in {len(tables)} tables (fact top_tokens); "
                 f"largest relative gap {worst[0]:.2g}" + (f" ({worst[1]})" if worst[1] else ""),
        expected=f"the answers recorded in {file}", tolerance=f"relative {SHOWN_RELATIVE_TOLERANCE:g}",
        detail="; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))]


def claim_top8_share_at_most_one(run: Run) -> list[ClaimResult]:
    """Σ e^logprob over the eight most probable candidates of each recorded answer is at most 1.
    A run without recorded answers falls back to the probabilities the lesson showed."""
    cid, text = "top8_share_at_most_one", "the top eight tokens hold at most all of the probability (share ≤ 1)"
    lesson = find_lesson(run, "04_")
    if lesson is None:
        return [ClaimResult(cid, "general", "04", text, NA, detail=missing(run, "04_", L4))]
    answers, file = _recorded(run, lesson)
    shares: list[tuple[float, str]] = []
    for a in answers:
        if not a.post_sampling and a.candidates:
            top = sorted((c.value for c in a.candidates), reverse=True)[:8]
            shares.append((sum(math.exp(lp) for lp in top), _prompt_label(a.prompt)))
    source = f"e^logprob of the answers recorded in {file}"
    if not shares:
        tables, why = _shown(lesson)
        if why:
            return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=why)]
        for t in tables:
            probs = [r.probability if r.probability is not None else (math.exp(r.logprob) if r.logprob is not None else None)
                     for r in t.tokens[:8]]
            known = [p for p in probs if p is not None]
            if known:
                shares.append((sum(known), t.key))
        source = "the lesson's tables (no recorded answers to read)"
    if not shares:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"lesson {lesson.lesson_id} has no recorded answers with logprobs and no next-token table")]
    largest, name = max(shares)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, PASS if largest <= 1.0 + SHARE_TOLERANCE else FAIL,
                        observed=f"largest share {largest:.4%} ({name})", expected="≤ 100%", tolerance=f"{SHARE_TOLERANCE:g}",
                        detail=f"from {source}: " + "; ".join(f"{n}: {s:.2%}" for s, n in shares))]


# --- lesson 4: the forward pass in numpy -------------------------------------------------------

# The recordings' server labels for the two files lesson 4's numpy pass reads.
NUMPY_SERVERS = {"served": "main", "f32": "f32"}
# Float16 keeps 11 significant bits: rounding a number to it moves it by at most 2^-11 of itself.
F16_RELATIVE_ROUNDING = 2.0 ** -11


def _numpy_pass(run: Run, cid: str, text: str) -> tuple[LessonResult | None, dict[str, FilePass], list[ClaimResult]]:
    """Lesson 4 and its fact numpy_pass as {width: the pass over that file}, or the result that says why there is none."""
    lesson = find_lesson(run, "04_")
    if lesson is None:
        return None, {}, [ClaimResult(cid, "general", "04", text, NA, detail=missing(run, "04_", L4))]
    try:
        fact = lesson.stated(NumpyPass)
    except FactShapeError as exc:
        return None, {}, [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=f"lesson {lesson.lesson_id}'s fact {exc}")]
    if fact is None:
        return None, {}, [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                      detail=f"lesson {lesson.lesson_id} states no numpy_pass fact (recorded before the numpy pass)")]
    if not fact.recomputed:
        return None, {}, [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                      detail=f"the numpy pass was not computed: {fact.why_not}")]
    return lesson, {w: part for w, part in (("served", fact.served), ("f32", fact.f32)) if part is not None}, []


def _answer_for(answers: list[RawNextToken], server: str, prompt: str) -> RawNextToken | None:
    return next((a for a in answers if a.server == server and not a.post_sampling and a.prompt == prompt), None)


def _prompts(lesson: LessonResult) -> dict[str, str]:
    tables, _ = _shown(lesson)
    return {t.key: t.prompt for t in tables if t.prompt is not None}


def claim_numpy_top_token_is_the_servers(run: Run) -> list[ClaimResult]:
    """numpy's most probable token, for each prompt and file, is the top candidate of the server's recorded
    answer for the same prompt on the same file (read from the exchanges, not from the lesson's tables)."""
    cid, text = "numpy_top_token_is_the_servers", "the numpy forward pass over the GGUF gives the server's top token on every prompt"
    lesson, fact, na = _numpy_pass(run, cid, text)
    if lesson is None:
        return na
    answers, file = _recorded(run, lesson)
    prompts = _prompts(lesson)
    results = []
    for width, server in NUMPY_SERVERS.items():
        part = fact.get(width)
        if part is None:
            continue
        checked, agree, problems = 0, 0, []
        for name, one in part.prompts.items():
            answer = _answer_for(answers, server, prompts.get(name, ""))
            if answer is None or not answer.candidates:
                problems.append(f"{name}: no recorded answer from server {server!r} for its prompt")
                continue
            best = max(answer.candidates, key=lambda c: c.value)
            checked += 1
            agree += one.numpy_top_id == best.id
            if one.numpy_top_id != best.id:
                problems.append(f"{_prompt_label(prompts[name])}: numpy's top id {one.numpy_top_id}, the server's "
                                f"{best.id} ({best.text!r})")
        results.append(ClaimResult(
            cid, "general", lesson.lesson_id, f"{text} ({part.file})", FAIL if problems or not checked else PASS,
            observed=f"{agree} of {checked} prompts agree",
            expected=f"the top candidate of each answer of server {server!r} recorded in {file}", tolerance="the same token id",
            detail="; ".join(problems)))
    return results


def claim_numpy_f32_within_rounding(run: Run) -> list[ClaimResult]:
    """On the f32 width the engine keeps float32 activations, as numpy does; what is left is float32 summation
    order (about 1e-7 relative) and the f16 KV cache. Counted as if one float16 rounding, 2^-11 relative, fell
    on every logit: a logit z moves by at most 2^-11 × |z|, and a logit change δ moves a probability by at
    most δ / 4 (the softmax's steepest slope, p(1 − p) ≤ 1/4). So each listed probability may differ from
    numpy's by 2^-11 × (numpy's largest |logit|) / 4 for that prompt, and no more."""
    cid = "numpy_f32_within_rounding"
    text = "on the f32 width, numpy's probabilities are the server's within the f16 KV cache's rounding"
    lesson, fact, na = _numpy_pass(run, cid, text)
    if lesson is None:
        return na
    part = fact.get("f32")
    if part is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="the run's numpy pass has no f32 width (only the default model's narrower widths have one)")]
    answers, file = _recorded(run, lesson)
    prompts = _prompts(lesson)
    worst: tuple[float, float, str] = (0.0, 0.0, "")   # (|Δp|, its tolerance, where)
    problems = []
    for name, one in part.prompts.items():
        answer = _answer_for(answers, "f32", prompts.get(name, ""))
        ours, logit = one.probabilities_of_server_ids, one.largest_abs_logit
        if answer is None:
            problems.append(f"{name}: no recorded f32 answer")
            continue
        tolerance = F16_RELATIVE_ROUNDING * abs(logit) / 4
        for c in answer.candidates:
            if str(c.id) not in ours:
                problems.append(f"{_prompt_label(prompts[name])}: numpy states no probability for id {c.id}")
                continue
            gap = abs(float(ours[str(c.id)]) - math.exp(c.value))
            if gap / tolerance > worst[0] / max(worst[1], 1e-300):
                worst = (gap, tolerance, f"{_prompt_label(prompts[name])} token {c.text!r}")
            if gap > tolerance:
                problems.append(f"{_prompt_label(prompts[name])} token {c.text!r}: |Δp| {gap:.2g} > {tolerance:.2g}")
    return [ClaimResult(
        cid, "general", lesson.lesson_id, text, FAIL if problems or not worst[2] else PASS,
        observed=f"largest |Δp| {worst[0]:.2g} ({worst[2]})" if worst[2] else "nothing compared",
        expected=f"≤ {worst[1]:.2g}, against the f32 answers recorded in {file}",
        tolerance="2^-11 × numpy's largest |logit| ÷ 4 per prompt", detail="; ".join(problems[:5]))]


# --- lessons 4 and 6: speeds ------------------------------------------------------------------

def claim_prefill_faster_than_decode(run: Run) -> list[ClaimResult]:
    cid, text = "prefill_faster_than_decode", "prefill processes prompt tokens faster per token than decode generates them"
    lesson = find_lesson(run, "04_")
    if lesson is None:
        return [ClaimResult(cid, "general", "04", text, NA, detail=missing(run, "04_", L4))]
    prefill = measurements(lesson, "prefill_tokens_per_s_long_prompt")
    decodes = measurements(lesson, "decode_tokens_per_s_short_prompt") + measurements(lesson, "decode_tokens_per_s_long_prompt")
    if not prefill or not decodes:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 04 has no prefill_tokens_per_s_long_prompt or decode_tokens_per_s_* measurement")]
    p = prefill[0]
    d = max(decodes, key=lambda m: m.median)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, PASS if p.median > d.median else FAIL,
                        observed=f"prefill {samples_text(p)} tokens/s", expected=f"> {d.name} {samples_text(d)} tokens/s",
                        tolerance="medians compared",
                        detail=f"prefill is {p.median / d.median:.3g}× decode" if d.median > 0 else "")]


def _slower(subject: str, lesson: str, shallow: Measurement, deep: Measurement, what: tuple[str, str]) -> ClaimResult:
    text = "decode slows as the context grows"
    if deep.median < shallow.median:
        status, detail = PASS, f"{deep.median / shallow.median:.3g}× the speed at {what[1]} vs {what[0]}"
    elif judged(deep).low <= judged(shallow).high:
        status, detail = INCONCLUSIVE, ("the medians are in the wrong order and the samples' ranges overlap: "
                                        "these samples can show neither a slowdown nor a speed-up")
    else:
        status, detail = FAIL, f"every sample at {what[1]} is faster than every sample at {what[0]}"
    return ClaimResult("decode_slows_with_context", "general", lesson, f"{text} ({subject})", status,
                       observed=f"{what[1]}: {samples_text(deep)} {deep.unit}",
                       expected=f"< {what[0]}: {samples_text(shallow)} {shallow.unit}",
                       tolerance="the samples' [min, max] ranges, outliers left out (bytesup.course.robust)", detail=detail)


def claim_decode_slows_with_context(run: Run) -> list[ClaimResult]:
    results = []
    l6 = find_lesson(run, "06_")
    subject = "decode slows as the context grows (depths of lesson 6)"
    if l6 is None:
        results.append(ClaimResult("decode_slows_with_context", "general", "06", subject, NA, detail=missing(run, "06_", L6)))
    else:
        depths = [m for m in measurements(l6, "decode_tokens_per_s_at_depth") if isinstance(m.settings.get("depth"), (int, float))]
        if len(depths) < 2:
            results.append(ClaimResult("decode_slows_with_context", "general", l6.lesson_id, subject, NA,
                                       detail=("lesson 06 has fewer than two decode_tokens_per_s_at_depth measurements "
                                               "with a numeric depth")))
        else:
            depths.sort(key=lambda m: m.settings["depth"])
            lo, hi = depths[0], depths[-1]
            results.append(_slower("depths of lesson 6", l6.lesson_id, lo, hi,
                                   (f"depth {fmt(lo.settings['depth'])}", f"depth {fmt(hi.settings['depth'])}")))
    l4 = find_lesson(run, "04_")
    if l4 is not None:
        short = measurements(l4, "decode_tokens_per_s_short_prompt")
        long = measurements(l4, "decode_tokens_per_s_long_prompt")
        if short and long:
            results.append(_slower("after a short vs a long prompt, lesson 4", l4.lesson_id, short[0], long[0],
                                   ("the short prompt", "the long prompt")))
    return results


# --- lesson 6: KV-cache bytes -----------------------------------------------------------------

# llama.cpp's KV-cache types as (bytes per block, numbers per block), from ggml's block layouts:
# q8_0 = fp16 scale + 32 int8; q5_1 = fp16 scale + fp16 min + 4 bytes of high bits + 16 bytes of
# nibbles; q5_0 = the same without the min; q4_1 = fp16 scale + fp16 min + 16 bytes of nibbles;
# q4_0 and iq4_nl = fp16 scale + 16 bytes of nibbles.
CACHE_TYPE_BLOCKS = {"f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (2 + 32, 32), "q5_1": (2 + 2 + 4 + 16, 32),
                     "q5_0": (2 + 4 + 16, 32), "q4_1": (2 + 2 + 16, 32), "q4_0": (2 + 16, 32), "iq4_nl": (2 + 16, 32)}
CACHE_TYPE_BYTES = {name: size / count for name, (size, count) in CACHE_TYPE_BLOCKS.items()}


def _kv_from_gguf(lesson: LessonResult) -> list[tuple[str, float, float]]:
    """(label, the measurement, check's number) for each kv_bytes_per_token measurement:
    layers × KV heads × head width × (bytes of a K element + bytes of a V element)."""
    h = model_hyperparameters(lesson)
    checked = []
    for m in measurements(lesson, "kv_bytes_per_token"):
        kinds = [str(m.settings.get(k, "f16")).lower() for k in ("cache_type_k", "cache_type_v")]
        if h is None or any(k not in CACHE_TYPE_BYTES for k in kinds):
            continue
        n_layer = int(h.get("n_layer") or h.get("block_count") or h.get("n_layers") or 0)
        n_head = int(h.get("n_head") or 1)
        n_head_kv = int(h.get("n_head_kv") or n_head)
        head_dim = int(h.get("head_dim") or int(h.get("n_embd") or 0) // n_head)
        expected = n_layer * n_head_kv * head_dim * (CACHE_TYPE_BYTES[kinds[0]] + CACHE_TYPE_BYTES[kinds[1]])
        label = (f"measurement kv_bytes_per_token from the GGUF ({n_layer} layers, {n_head_kv} KV heads, "
                 f"head width {head_dim}, {'/'.join(kinds)})")
        checked.append((label, m.median, expected))
    return checked


def claim_kv_bytes_formula(run: Run) -> list[ClaimResult]:
    """Lesson 6's KV-cache bytes recomputed: its measurement from the served model's GGUF
    hyperparameters and cache types (check's own table of bytes per element), and every row it
    shows (fact kv_examples, else its tables) from the row's own numbers."""
    cid, text = "kv_bytes_formula", "KV-cache bytes per token = 2 × layers × KV heads × head width × bytes per element"
    lesson = find_lesson(run, "06_")
    if lesson is None:
        return [ClaimResult(cid, "general", "06", text, NA, detail=missing(run, "06_", L6))]
    checked = _kv_from_gguf(lesson)
    try:
        rows = kv_rows(lesson)
    except FactShapeError as exc:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=f"lesson {lesson.lesson_id}'s fact {exc}")]
    for r in rows:
        checked.append((r.label, r.bytes_per_token, 2 * r.n_layer * r.n_head_kv * r.head_dim * r.bytes_per_element))
    if not checked:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 06 has neither a kv_bytes_per_token measurement with the model's hyperparameters "
                                   "nor KV rows (fact kv_examples, or a table with layers, KV heads, head width, bytes per element "
                                   "and bytes per token)")]
    bad = [(label, s, e) for label, s, e in checked if not math.isclose(s, e, rel_tol=1e-9, abs_tol=1e-9)]
    worst = bad[0] if bad else checked[0]
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{fmt(worst[1])} bytes per token ({worst[0]})", expected=f"{fmt(worst[2])} bytes recomputed",
                        tolerance="exact",
                        detail=f"{len(checked)} values recomputed" + (f", {len(bad)} differ: " + "; ".join(
                            f"{label}: {fmt(s)} vs {fmt(e)}" for label, s, e in bad[:4]) if bad else ""))]


# --- lessons 5 and 5b: samplers and speculative decoding ------------------------------------------------

# The loosest tolerance that can still show agreement: float32 sums over the vocabulary differ by
# up to about 2.9e-3 relative (see EXP_RELATIVE_TOLERANCE); a lesson's tolerance above 1e-3 would
# let a wrong sampler pass, so it fails the claim whatever its differences.
SAMPLER_TOLERANCE_CEILING = 1e-3


def claim_sampler_matches_server(run: Run) -> list[ClaimResult]:
    """Lesson 5's comparisons of its samplers with the server's post-sampling probabilities, judged
    from their numbers (never the lesson's verdict): each compared setting has max |Δp| / p within
    its tolerance, that tolerance within check's ceiling, and the same kept tokens."""
    cid, text = "sampler_matches_server", "the numpy re-implementation of the samplers gives the server's post-sampling probabilities"
    lesson = find_lesson(run, "05_")
    if lesson is None:
        return [ClaimResult(cid, "general", "05", text, NA, detail=missing(run, "05_", L5))]
    try:
        rows, source = sampler_comparisons(lesson)
    except FactShapeError as exc:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL, detail=f"lesson {lesson.lesson_id}'s fact {exc}")]
    checked, skipped, bad = [], [], []
    worst: tuple[float, float, str] | None = None
    for r in rows:
        if r.max_relative_difference is None and r.same_tokens is None:
            skipped.append(r.name)
            continue
        checked.append(r.name)
        problems = []
        if r.same_tokens is False:
            problems.append("the kept tokens differ")
        if r.max_relative_difference is not None:
            if r.tolerance is None:
                problems.append("no tolerance stated")
            else:
                if worst is None or r.max_relative_difference > worst[0]:
                    worst = (r.max_relative_difference, r.tolerance, r.name)
                if r.max_relative_difference > r.tolerance:
                    problems.append(f"max |Δp|/p {r.max_relative_difference:.3g} > tolerance {r.tolerance:.3g}")
                if r.tolerance > SAMPLER_TOLERANCE_CEILING:
                    problems.append(f"tolerance {r.tolerance:.3g} looser than check's ceiling {SAMPLER_TOLERANCE_CEILING:g}")
        if problems:
            bad.append(f"{r.name}: {', '.join(problems)}")
    if not checked:
        why = (f"lesson 05 compared no setting ({len(skipped)} not checked)" if skipped else
               "lesson 05 states no sampler_comparisons fact and has no table with a max |Δp| / p column")
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail=why)]
    detail = "; ".join(bad[:5])
    if skipped:
        detail += f"{'; ' if detail else ''}{len(skipped)} not checked by the lesson"
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{len(checked) - len(bad)} of {len(checked)} settings agree"
                                 + (f"; largest max |Δp|/p {worst[0]:.2g} ({worst[2]})" if worst else ""),
                        expected="every compared setting within its tolerance, with the same kept tokens",
                        tolerance=(f"relative {worst[1]:g} (the lesson's), at most {SAMPLER_TOLERANCE_CEILING:g}" if worst
                                   else "the same kept tokens"),
                        detail=detail + f"{'; ' if detail else ''}from {source}")]


def claim_speculative_equals_plain(run: Run) -> list[ClaimResult]:
    """Lesson 5b's speculative runs against its plain runs, token by token, from the token ids the
    lesson keeps in its settings (`speculative.runs`): a plain run (spec_type none) is the reference
    for every speculative run of the same target and prompt."""
    text = "at temperature 0, speculative decoding generates exactly the tokens of plain decoding"
    cid = "speculative_equals_plain"
    lesson = find_lesson(run, "05b_")
    if lesson is None:
        return [ClaimResult(cid, "general", "05b", text, NA, detail=missing(run, "05b_", L5B))]
    spec = lesson.settings.get("speculative")
    if not isinstance(spec, dict) or not spec.get("runs"):
        why = next((n for n in lesson.notes if n.startswith("Speculative decoding was not measured")), None)
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=why or "lesson 05b recorded no speculative runs (settings.speculative.runs)")]
    if spec.get("temperature") != 0:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"the runs were made at temperature {spec.get('temperature')!r}, not 0")]
    runs = spec["runs"]
    plain = {(r.get("target"), r.get("prompt")): r for r in runs if r.get("spec_type") in (None, "none") and r.get("tokens")}
    compared, bad, unmatched, lengths = 0, [], [], set()
    for r in runs:
        if r.get("spec_type") in (None, "none"):
            continue
        ref = plain.get((r.get("target"), r.get("prompt")))
        if ref is None:
            unmatched.append(r.get("label", "?"))
            continue
        reference = ref["tokens"][0]
        for i, tokens in enumerate(r.get("tokens") or []):
            compared += 1
            lengths.add(len(tokens))
            at = first_difference(tokens, reference)
            if at is not None:
                bad.append(f"{r.get('label', '?')} repeat {i + 1}: first differs at token {at + 1} of {len(reference)}")
    if compared == 0:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="no speculative run has a plain run of the same target and prompt to compare with"
                                   + (f" ({', '.join(unmatched)})" if unmatched else ""))]
    detail = "; ".join(bad[:5])
    if unmatched:
        detail += f"{'; ' if detail else ''}without a plain run to compare: {', '.join(unmatched)}"
    return [ClaimResult(cid, "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{compared - len(bad)} of {compared} speculative generations identical "
                                 f"({'/'.join(str(n) for n in sorted(lengths))} tokens each)",
                        expected="every token equal to the plain run's on the same target and prompt",
                        tolerance="exact", detail=detail)]


# --- lessons 4, 7 and 8: ceilings ----------------------------------------------------------------

def claim_decode_efficiency_in_unit_interval(run: Run) -> list[ClaimResult]:
    """Efficiency = measured ÷ ceiling; the ceiling comes from a measured bandwidth, so its spread
    widens what "at most 1" allows: the lowest efficiency the samples allow is
    min(efficiency) × median(bandwidth) ÷ max(bandwidth)."""
    cid, text = "decode_efficiency_in_unit_interval", "decode efficiency (measured ÷ bandwidth ceiling) lies between 0 and 1"
    results = []
    for prefix, name in (("04_", L4), ("08_", L8)):
        lesson = find_lesson(run, prefix)
        if lesson is None:
            results.append(ClaimResult(cid, "general", prefix[:2], text, NA, detail=missing(run, prefix, name)))
            continue
        effs = measurements(lesson, "decode_efficiency")
        if not effs:
            results.append(ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                       detail=f"lesson {lesson.lesson_id} has no decode_efficiency measurement"))
            continue
        bws = measurements(lesson, "read_bandwidth_gb_per_s")
        bandwidth_allowance = bws[0].max / bws[0].median if bws and bws[0].max > 0 and bws[0].median > 0 else 1.0
        for m in effs:
            label = text + measurement_label("", m.settings)
            if m.settings.get("cache_resident") is True:
                # Weights within the last-level cache need not come from the memory the bandwidth test read.
                results.append(ClaimResult(cid, "general", lesson.lesson_id, label, NA,
                                           detail="cache-resident: the weights fit in the last-level cache"))
                continue
            # A ceiling from a stated bandwidth (--bandwidth-gbs) has no measured spread to allow for.
            allowance = 1.0 if m.settings.get("bandwidth_gbs") is not None else bandwidth_allowance
            factor = 0.01 if m.unit.strip() in ("%", "percent") else 1.0
            kept = judged(m)  # an outlier (a stalled request) neither passes nor fails the claim
            med, lo, hi = m.median * factor, kept.low * factor, kept.high * factor
            if 0 < med <= 1:
                status, detail = PASS, ""
            elif hi > 0 and lo / allowance <= 1:
                status, detail = PASS, (f"the median is above 1, but within the measured spread: the lowest sample "
                                        f"{fmt(lo)} and the bandwidth's max/median {allowance:.3g} allow ≤ 1")
            else:
                status, detail = FAIL, ("no sample is above 0" if hi <= 0 else
                                        f"even the lowest sample {fmt(lo)} with the bandwidth's max/median {allowance:.3g} stays above 1")
            results.append(ClaimResult(cid, "general", lesson.lesson_id, label, status,
                                       observed=f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})", expected="0 < efficiency ≤ 1",
                                       tolerance=(f"the samples, and the bandwidth's max ÷ median ×{allowance:.3g}"
                                                  if allowance > 1.0005 else "the samples' spread"),
                                       detail=detail))
    return results


# Rates in the units lessons measure them, in FLOP/s and bytes/s.
FLOP_RATE_UNITS = {"flop/s": 1.0, "mflop/s": 1e6, "gflop/s": 1e9, "tflop/s": 1e12}
BYTE_RATE_UNITS = {"b/s": 1.0, "bytes/s": 1.0, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12, "gib/s": 2.0 ** 30}


def claim_ridge_point(run: Run) -> list[ClaimResult]:
    """Lesson 7's ridge point against the peak FLOP/s ÷ the bandwidth in bytes/s of its two
    measurements, each converted from its own unit."""
    cid, text = "ridge_point_formula", "ridge point = peak FLOP/s ÷ memory bandwidth (bytes/s)"
    lesson = find_lesson(run, "07_")
    if lesson is None:
        return [ClaimResult(cid, "general", "07", text, NA, detail=missing(run, "07_", L7))]
    ridge = measurements(lesson, "ridge_point_flops_per_byte")
    peak = measurements(lesson, "matmul_peak_gflop_per_s")
    bw = measurements(lesson, "read_bandwidth_gb_per_s")
    if not (ridge and peak and bw):
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 07 lacks ridge_point_flops_per_byte, matmul_peak_gflop_per_s or read_bandwidth_gb_per_s")]
    r, p, b = ridge[0], peak[0], bw[0]
    fp, fb = FLOP_RATE_UNITS.get(p.unit.strip().lower()), BYTE_RATE_UNITS.get(b.unit.strip().lower())
    if fp is None or fb is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=f"units check does not know: peak in {p.unit!r}, bandwidth in {b.unit!r}")]
    # The ridge point may be computed from the medians or per sample; either lies within these bounds.
    lo, hi = p.min * fp / (b.max * fb), p.max * fp / (b.min * fb)
    expected = p.median * fp / (b.median * fb)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, PASS if lo * (1 - 1e-9) <= r.median <= hi * (1 + 1e-9) else FAIL,
                        observed=f"{fmt(r.median)} FLOPs/byte",
                        expected=f"{fmt(expected)} from the medians ({fmt(p.median)} {p.unit} ÷ {fmt(b.median)} {b.unit})",
                        tolerance=f"range {fmt(lo)}–{fmt(hi)} from the samples' min/max")]


# The bytes model with context against the published figures: a prediction within this of 29.6 passes.
BYTES_MODEL_TOLERANCE = 0.05


def _scalar(value: object) -> float:
    """One published number (published.LESSON4 also holds lists of two runs)."""
    if not isinstance(value, (int, float)):
        raise TypeError(f"published figure {value!r} is not one number")
    return float(value)


def claim_bytes_model_with_context(run: Run) -> list[ClaimResult]:
    """Course arithmetic on published numbers, the same for every run: decode at depth d ≈ bandwidth ÷
    (weight bytes + KV bytes per token × d). The published short-prompt decode (33.2 tokens/s of the
    7.16 GB specimen) gives the bandwidth; the specimen's KV cache (no grouped-query attention:
    2 × 32 × 32 × 128 × 2 bytes per token) predicts the decode after lesson 4's 1,921-token prompt,
    published as 29.6 tokens/s."""
    text = ("decode after d tokens ≈ bandwidth ÷ (weight bytes + KV bytes per token × d), on the published "
            f"{published.SPARK_NAME} figures")
    spec, l4 = published.SPECIMEN, published.LESSON4
    n_layer, n_head_kv = int(spec["n_layer"]), published.SPECIMEN_N_HEAD_KV
    head_dim = int(spec["n_embd"]) // int(spec["n_head"])
    kv = 2 * n_layer * n_head_kv * head_dim * CACHE_TYPE_BYTES["f16"]
    weights, depth = float(spec["file_bytes"]), int(_scalar(l4["long_prompt_tokens"]))
    short = _scalar(l4["decode_short_tokens_per_s"])
    bandwidth = short * weights          # bytes/s: every weight read once per token
    predicted = bandwidth / (weights + kv * depth)
    pub = _scalar(l4["decode_long_tokens_per_s"])
    ok = abs(predicted / pub - 1) <= BYTES_MODEL_TOLERANCE
    return [ClaimResult("bytes_model_with_context", "general", "08", text, PASS if ok else FAIL,
                        observed=f"{predicted:.1f} tokens/s predicted at depth {depth:,}",
                        expected=f"{pub:g} tokens/s published", tolerance=f"±{BYTES_MODEL_TOLERANCE:.0%}",
                        detail=(f"KV = 2 × {n_layer} × {n_head_kv} × {head_dim} × 2 = {kv:,.0f} bytes per token; "
                                f"{short:g} tokens/s × {weights / 1e9:g} GB = "
                                f"{bandwidth / 1e9:.4g} GB/s; {bandwidth / 1e9:.4g} GB/s ÷ ({weights / 1e9:g} GB + "
                                f"{kv:,.0f} × {depth:,} bytes) = {predicted:.2f} tokens/s "
                                f"({predicted / pub - 1:+.1%}); course arithmetic, the same for every run"))]


# --- lesson 5: the loop seen from outside (streamed tokens on the client's clock) ----------------

def _streams(run: Run, cid: str, text: str) -> tuple[LessonResult | None, list[RawStream], ClaimResult | None]:
    """Lesson 5's recorded streams that ended with their timings, or the claim's 'not applicable'."""
    lesson = find_lesson(run, "05_")
    if lesson is None:
        return None, [], ClaimResult(cid, "general", "05", text, NA, detail=missing(run, "05_", L5))
    path = exchanges_path(run, lesson)
    streams = [s for s in recorded_streams(path) if s.timings is not None and s.token_events] if path is not None else []
    if not streams:
        return lesson, [], ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                                       detail="lesson 05 recorded no streamed /completion with its final timings "
                                              "(a run made before the lesson streamed)")
    return lesson, streams, None


def _timing(stream: RawStream, name: str) -> float:
    value = (stream.timings or {}).get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def claim_stream_causality(run: Run) -> list[ClaimResult]:
    """The first token cannot reach the client before the server has sampled it: the client's time
    to first token (from sending the request) is at least the server's prompt_ms (from the slot
    starting on the prompt to that token). And the stream has one event per generated token."""
    results = []
    cid, text = "stream_first_token_after_prompt", "a streamed token reaches the client after the server's prompt_ms (TTFT ≥ prompt_ms)"
    lesson, streams, na = _streams(run, cid, text)
    if na is not None:
        return [na, ClaimResult("stream_one_event_per_token", "general", na.lesson,
                                "a stream has one event per generated token (events = predicted_n)", NA, detail=na.detail)]
    assert lesson is not None
    gaps = [(s.token_events[0][1] - _timing(s, "prompt_ms"), s.line) for s in streams]
    early = [f"line {line}: {g:.3g} ms" for g, line in gaps if not g >= 0]
    results.append(ClaimResult(
        cid, "general", lesson.lesson_id, text, FAIL if early else PASS,
        observed=f"TTFT − prompt_ms from {min(g for g, _ in gaps):.3g} to {max(g for g, _ in gaps):.3g} ms over {len(streams)} streams",
        expected="≥ 0 ms", tolerance="none: both clocks are monotonic and the server's interval lies inside the client's",
        detail="; ".join(early[:5]) or f"from the streams recorded in {lesson.exchanges}"))
    cid, text = "stream_one_event_per_token", "a stream has one event per generated token (events = predicted_n)"
    lost, grouped = [], []
    for s in streams:
        n = _timing(s, "predicted_n")
        if s.token_events[-1][0] != n:
            lost.append(f"line {s.line}: the events count {s.token_events[-1][0]} tokens, predicted_n {n:g}")
        elif len(s.token_events) != n:
            grouped.append(f"line {s.line}: {len(s.token_events)} events for {n:g} tokens")
    status = FAIL if lost else INCONCLUSIVE if grouped else PASS
    detail = "; ".join((lost or grouped)[:5])
    if grouped and not lost:
        detail += (": some events brought several tokens (held back by the server mid-character, or accepted "
                   "together by speculative decoding), so one event per pass cannot be told here")
    results.append(ClaimResult(
        cid, "general", lesson.lesson_id, text, status,
        observed=", ".join(str(len(s.token_events)) for s in streams) + " events with tokens",
        expected="predicted_n = " + ", ".join(f"{_timing(s, 'predicted_n'):g}" for s in streams),
        tolerance="exact", detail=detail or "every generated token came in an event of its own"))
    return results


def claim_stream_clocks_agree(run: Run) -> list[ClaimResult]:
    """The median gap between streamed tokens on the client's clock against the server's
    predicted_ms ÷ (predicted_n − 1), within a tolerance derived per stream.

    A client gap is a server pass plus the change in delivery delay from one event to the next.
    So the mean gap, (last arrival − first arrival) ÷ (n − 1), equals the server's per-token time
    up to (last token's delay − first token's) ÷ (n − 1). The first token's delay is at most
    TTFT − prompt_ms (which also holds the request's own handling), and the last token's event is
    taken to be delivered no slower than that, so the difference is at most TTFT − prompt_ms. The
    server's figure is a mean of its passes and the client's a median of its gaps; a median lies
    within one standard deviation σ of the mean, and the client's gaps vary at least as much as the
    passes. Tolerance = σ of the client's gaps + (TTFT − prompt_ms) ÷ (n − 1). Where it reaches the
    per-token time itself the client's clock cannot resolve a pass (a very small model, whose pass
    is as short as delivering an event, a slow link, a client that reads in bursts, or a machine so
    busy that the gaps vary as much as a pass lasts): not applicable."""
    cid, text = "stream_clocks_agree", "the median inter-token gap on the client's clock agrees with the server's time per token"
    lesson, streams, na = _streams(run, cid, text)
    if na is not None:
        return [na]
    assert lesson is not None
    # A speculative server sends a pass's accepted tokens together: its gaps are not passes (lesson 5 shows them apart).
    plain = [s for s in streams if (s.timings or {}).get("draft_n") is None]
    if not plain:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA, detail="every recorded stream is a speculative one")]
    rows, unresolved = [], []
    for s in plain:
        gaps = s.gaps()
        n, prompt_ms, predicted_ms = len(gaps) + 1, _timing(s, "prompt_ms"), _timing(s, "predicted_ms")
        if len(gaps) < 2 or _timing(s, "predicted_n") < 2:
            continue
        per_token = predicted_ms / (_timing(s, "predicted_n") - 1)
        ordered = sorted(gaps)
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        mean = sum(gaps) / len(gaps)
        sigma = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps))
        delay = max(s.token_events[0][1] - prompt_ms, 0.0)
        tolerance = sigma + delay / (n - 1)
        if tolerance >= per_token:
            unresolved.append(f"line {s.line}: tolerance {tolerance:.3g} ms ≥ {per_token:.3g} ms per token")
            continue
        rows.append((abs(median - per_token) / tolerance, s.line, median, per_token, sigma, delay, n, tolerance))
    if not rows:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=("the client's clock cannot resolve a pass here: its gaps vary as much as a pass "
                                    "lasts (a pass as short as delivering an event, as on a very small model; a slow "
                                    "link; a client that reads in bursts; or a machine too busy to keep the passes "
                                    "even): " + "; ".join(unresolved[:3])) if unresolved
                            else "no stream has two gaps or more")]
    worst = max(rows)
    _, line, median, per_token, sigma, delay, n, tolerance = worst
    ok = all(r[0] <= 1 for r in rows)
    return [ClaimResult(
        cid, "general", lesson.lesson_id, text, PASS if ok else FAIL,
        observed=f"median gap {median:.4g} ms (line {line}; the stream furthest off, of {len(rows)} without speculation)",
        expected=f"predicted_ms ÷ (predicted_n − 1) = {per_token:.4g} ms",
        tolerance=f"±{tolerance:.3g} ms = σ {sigma:.3g} + {delay:.3g} ÷ {n - 1}",
        detail=("σ: the standard deviation of the stream's gaps (a median lies within σ of the mean); the second "
                "term: the first token's delivery delay at most, TTFT − prompt_ms, spread over the n − 1 gaps"
                + (f"; not resolved: {'; '.join(unresolved[:3])}" if unresolved else "")))]
# The decode-time model predicts each width's decode at P = 1 within this (the capstone states the same).
DECODE_MODEL_TOLERANCE = decodetime.TOLERANCE


def prediction_status(worst_error: float, tolerance: float, scatter: float) -> str:
    """PASS where the worst prediction lies within the tolerance; a miss is INCONCLUSIVE where the samples it was
    measured from scatter wider than the tolerance (they cannot tell a model that holds from one that does not),
    else FAIL."""
    if abs(worst_error) <= tolerance:
        return PASS
    return INCONCLUSIVE if scatter > tolerance else FAIL


def decode_model_check(fact: DecodeModel, tolerance: float = DECODE_MODEL_TOLERANCE) -> tuple[str, str, str]:
    """(status, observed, detail) of the decode-time model on the capstone's fact: for each model, the terms
    fitted by bytesup.course.decodetime on the *other* models' steps at P = 1, and its step predicted here as
    L × f + max(W ÷ B, n × c), set against 1000 ÷ its measured step time. A miss (or no model at all) is
    inconclusive rather than a failure when some model's step times at P = 1 scatter wider than the tolerance
    (their robust spread, bytesup.course.robust): such samples cannot tell a model that holds from one that
    does not."""
    scatter = max((w.step_spread.get("1", 0.0) for w in fact.widths), default=0.0)
    why = (f"; the steps at P = 1 scatter by up to {scatter:.0%} (interquartile range ÷ median), wider than "
           f"±{tolerance:.0%}: inconclusive" if scatter > tolerance else "")
    widths = [decodetime.Width(w.name, w.weight_bytes, w.n_params, w.weight_type,
                               {int(p): ms for p, ms in w.step_ms.items()}, w.n_layer)
              for w in fact.widths if "1" in w.step_ms]
    if len(widths) <= decodetime.MIN_FIT:
        return NA, "too few models", (f"{len(widths)} models with a step at P = 1; leaving one out needs at least "
                                      f"{decodetime.MIN_FIT + 1}")
    errors = []
    for k, w in enumerate(widths):
        terms = decodetime.fit([x for i, x in enumerate(widths) if i != k])
        step = w.n_layer * terms.fixed_ms_per_block + max(w.weight_bytes / terms.gbs / 1e6, w.n_params * terms.arith_ps / 1e9)
        errors.append((w.step_ms[1] / step - 1, w.name))  # predicted ÷ measured tokens/s − 1
    worst = max(errors, key=lambda e: abs(e[0]))
    status = prediction_status(worst[0], tolerance, scatter)
    return (status, f"furthest {worst[1]} {worst[0]:+.1%}",
            "each model by the terms of the others: " + "; ".join(f"{n}: {e:+.1%}" for e, n in errors)
            + (why if status != PASS else ""))


def claim_decode_model_predicts_every_width(run: Run) -> list[ClaimResult]:
    cid = "decode_model_predicts_every_width"
    text = "decode step = a cost per block + the slower of reading the weights and one token's arithmetic predicts every model"
    lesson = find_lesson(run, "08_")
    if lesson is None:
        return [ClaimResult(cid, "general", "08", text, NA, detail=missing(run, "08_", L8))]
    fact = lesson.stated(DecodeModel)
    if fact is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 08 recorded no step times at several P (a run before the decode-time model)")]
    status, observed, detail = decode_model_check(fact)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected="every width within the tolerance", tolerance=f"±{DECODE_MODEL_TOLERANCE:.0%}",
                        detail=detail)]


# A line through the shallower half of lesson 6's depths predicts each deeper depth within this (lesson 6 states the same).
DEPTH_LINE_TOLERANCE = depthtime.TOLERANCE


def depth_line_check(depths: dict[int, list[float]], fit_until: int,
                     tolerance: float = DEPTH_LINE_TOLERANCE) -> tuple[str, str, str]:
    """(status, observed, detail) of lesson 6's depth line from its decode samples (tokens/s) at each depth: the
    checker's own least-squares line of the median ms per token (1000 ÷ each sample) against the depth through
    the depths ≤ fit_until, and each deeper depth's predicted ÷ measured tokens/s − 1 = measured ms ÷ the line's
    ms − 1. A miss is inconclusive rather than a failure when a depth's samples scatter wider than the tolerance
    (interquartile range ÷ median, bytesup.course.robust)."""
    ms = {d: statistics.median(1e3 / v for v in samples) for d, samples in sorted(depths.items()) if samples}
    fitted = [(d, t) for d, t in ms.items() if d <= fit_until]
    held = [(d, t) for d, t in ms.items() if d > fit_until]
    if len(fitted) < 2 or not held:
        return NA, "too few depths", (f"{len(fitted)} depths up to {fit_until:,} and {len(held)} beyond: the line needs two "
                                      f"and a depth to predict")
    n = len(fitted)
    mx, my = sum(d for d, _ in fitted) / n, sum(t for _, t in fitted) / n
    slope = sum((d - mx) * (t - my) for d, t in fitted) / sum((d - mx) ** 2 for d, _ in fitted)
    line = {d: my + slope * (d - mx) for d, _ in held}
    errors = [(t / line[d] - 1 if line[d] > 0 else math.inf, d) for d, t in held]
    worst = max(errors, key=lambda e: abs(e[0]))
    scatter = max(robust.judge(samples).relative_iqr for samples in depths.values() if samples)
    status = prediction_status(worst[0], tolerance, scatter)
    return (status, f"furthest depth {worst[1]:,} {worst[0]:+.1%}",
            f"t(0) = {my - slope * mx:.4g} ms, s = {1e3 * slope:.4g} µs per position, fitted on depths "
            + ", ".join(f"{d:,}" for d, _ in fitted) + "; held out: " + "; ".join(f"{d:,}: {e:+.1%}" for e, d in errors)
            + (f"; a depth's samples scatter by up to {scatter:.0%}, wider than ±{tolerance:.0%}: inconclusive"
               if status == INCONCLUSIVE else ""))


def claim_depth_line_predicts_deeper_depths(run: Run) -> list[ClaimResult]:
    cid = "depth_line_predicts_deeper_depths"
    text = "decode time at depth d = t(0) + d × s, fitted on the shallower half, predicts the deeper depths"
    lesson = find_lesson(run, "06_")
    if lesson is None:
        return [ClaimResult(cid, "general", "06", text, NA, detail=missing(run, "06_", L6))]
    fact = lesson.stated(DecodeAtDepth)
    if fact is None:
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail="lesson 06 recorded no depth line (a run before it)")]
    depths = {int(m.settings["depth"]): list(m.samples or [m.median]) for m in measurements(lesson, "decode_tokens_per_s_at_depth")
              if isinstance(m.settings.get("depth"), (int, float))}
    status, observed, detail = depth_line_check(depths, fact.fit_until)
    return [ClaimResult(cid, "general", lesson.lesson_id, text, status, observed=observed,
                        expected=f"every depth beyond {fact.fit_until:,} within the tolerance",
                        tolerance=f"±{DEPTH_LINE_TOLERANCE:.0%}", detail=detail)]


GENERAL_CLAIMS: list[Callable[[Run], list[ClaimResult]]] = [
    claim_probability_is_exp_logprob,
    claim_top_tokens_match_server,
    claim_top8_share_at_most_one,
    claim_numpy_top_token_is_the_servers,
    claim_numpy_f32_within_rounding,
    claim_prefill_faster_than_decode,
    claim_decode_slows_with_context,
    claim_kv_bytes_formula,
    claim_sampler_matches_server,
    claim_speculative_equals_plain,
    claim_stream_causality,
    claim_stream_clocks_agree,
    claim_decode_efficiency_in_unit_interval,
    claim_ridge_point,
    claim_bytes_model_with_context,
    claim_decode_model_predicts_every_width,
    claim_depth_line_predicts_deeper_depths,
]
