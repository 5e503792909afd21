"""Lesson 4's claims: the server's recorded next-token answers against the tables the lesson shows, the numpy
forward pass against the server, and prefill against decode."""

from __future__ import annotations

import math

from bytesup.course import published
from bytesup.store.runs import Run
from bytesup.check.evidence import (
    FactShapeError,
    RawNextToken,
    ShownTopTokens,
    exchanges_path,
    recorded_next_tokens,
    shown_top_tokens,
)
from bytesup.store.facts.lesson04 import FilePass, NumpyPass
from bytesup.store.results import LessonResult
from bytesup.check.verdicts import (ITSELF, SANITY, FAIL, NA, PASS, ClaimResult, find_lesson, measurements, missing,
                                    samples_text)
from bytesup.check.claims.common import L4, grouped, timing


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


@grouped(ITSELF)
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


@grouped(ITSELF)
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


@grouped(SANITY)
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


@grouped(ITSELF)
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


@grouped(ITSELF)
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

def prefill_ratio_reason(ratio: float, ridge: float | None, bytes_per_param: float | None) -> str:
    """The run's prefill ÷ decode beside the course's, and why they differ. Prefill's tokens share each read of the
    weights, so it waits on arithmetic, 2 FLOPs per parameter and token; decode reads every weight for each token.
    Both at their ceilings, prefill ÷ decode = (peak ÷ 2n) ÷ (bandwidth ÷ W) = the ridge point × W/n ÷ 2."""
    course = published.LESSON4["prefill_decode_ratio"]
    spark_bpp = float(published.SPECIMEN["file_bytes"]) / float(published.SPECIMEN["n_params"])
    text = (f"prefill is {ratio:.3g}× decode; the course's {course:g}× was measured on the {published.SPARK_NAME}'s GPU "
            f"({published.SPECIMEN_NAME}). Prefill's tokens share each read of the weights and wait on arithmetic "
            "(2 FLOPs per parameter and token); decode reads every weight for each token. Both at their ceilings, "
            "prefill ÷ decode ≈ the ridge point (peak FLOP/s ÷ bandwidth) × bytes per parameter ÷ 2: the course's "
            f"{course:g}× at {spark_bpp:.3g} bytes per parameter takes a ridge near {2 * course / spark_bpp:.0f} FLOPs/byte, "
            "a GPU's")
    if ridge is None or bytes_per_param is None:
        return text + "; this run has no ridge point (lesson 7) or no model size (lesson 4) to size this machine's"
    than = "less" if ridge < 2 * course / spark_bpp else "no less"
    return (text + f"; this machine's ridge is {ridge:.3g} FLOPs/byte (lesson 7), so at {bytes_per_param:.3g} bytes per "
            f"parameter about {ridge * bytes_per_param / 2:.3g}×: it does {than} arithmetic per byte read than that GPU")


def _bytes_per_param(lesson: LessonResult) -> float | None:
    info = lesson.host_values.get("model_info")
    if not isinstance(info, dict):
        return None
    n, w = info.get("n_params"), info.get("tensor_bytes")
    return float(w) / float(n) if isinstance(n, (int, float)) and isinstance(w, (int, float)) and n > 0 else None


@grouped(ITSELF)
@timing
def claim_prefill_faster_than_decode(run: Run) -> list[ClaimResult]:
    """Prefill beats decode per token, from the lesson's medians; the ratio stands beside the course's, with the
    reason this machine's differs (prefill_ratio_reason)."""
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
    l7 = find_lesson(run, "07_")
    ridges = measurements(l7, "ridge_point_flops_per_byte") if l7 is not None else []
    detail = (prefill_ratio_reason(p.median / d.median, ridges[0].median if ridges else None, _bytes_per_param(lesson))
              if d.median > 0 else "")
    return [ClaimResult(cid, "general", lesson.lesson_id, text, PASS if p.median > d.median else FAIL,
                        observed=f"prefill {samples_text(p)} tokens/s"
                                 + (f": {p.median / d.median:.3g}× decode (the course: "
                                    f"{published.LESSON4['prefill_decode_ratio']:g}×)" if d.median > 0 else ""),
                        expected=f"> {d.name} {samples_text(d)} tokens/s",
                        tolerance="medians compared", detail=detail)]
