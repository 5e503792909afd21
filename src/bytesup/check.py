"""`bytesup check RUN`: do the course's statements hold in this run?

Two kinds of claims:

- general claims, true for any model on any host, checked on every run from whatever lessons it
  holds (probabilities are e^logprob, prefill beats decode per token, decode slows with context,
  the KV-cache formula, the sampler re-implementation, speculative output equal to plain output,
  decode efficiency in [0, 1]);
- published figures (files under `references/`), each with the scope it was measured in
  (model, quantization, hardware, engine, server flags) and a tolerance. A run outside that
  scope gets "not applicable" with what differs; inside it, the run's number is compared.

Every claim ends as pass, fail (with both numbers and the tolerance), inconclusive (the samples
cannot tell) or not applicable (with what differs or is missing). Results go to the terminal and to `check.md` / `check.json`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field, ValidationError

from .compare import Run, column_index, probability_fraction, token_text, top_tokens
from .errors import BytesupError
from .formulas import kv_bytes_per_token
from .paths import REPO_ROOT
from .render import fmt, measurement_label
from .escape import md_text
from .results import LessonResult, Measurement, Strict, Table
from .storage import write_json_atomic, write_text_atomic

PASS, FAIL, NA, INCONCLUSIVE = "pass", "fail", "not applicable", "inconclusive"
CHECK_SCHEMA_VERSION = 1


def references_dir() -> Path:
    return REPO_ROOT / "references"


@dataclass
class ClaimResult:
    id: str
    source: str            # "general" or the reference's name
    lesson: str
    claim: str
    status: str            # pass | fail | inconclusive | not applicable
    observed: str = ""
    expected: str = ""
    tolerance: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _find_lesson(run: Run, prefix: str) -> LessonResult | None:
    """The lesson whose id starts with `NN_` (ids may be renamed; the number is stable)."""
    for lid, result in run.results.items():
        if lid.startswith(prefix):
            return result
    return None


def _missing(run: Run, prefix: str, name: str) -> str:
    problem = next((p for p in run.problems if p.startswith(prefix)), None)
    if problem:
        return f"lesson {name} did not finish in this run ({problem})"
    return f"lesson {name} not in this run"


def _measurements(result: LessonResult, name: str) -> list[Measurement]:
    return [m for m in result.measurements if m.name == name]


def _spread(m: Measurement) -> str:
    return f"{fmt(m.median)} ({fmt(m.min)}–{fmt(m.max)}, {len(m.samples)} samples)"


# --- general claims ------------------------------------------------------------------------

def _token_tables(run: Run) -> list[tuple[str, Table, int, int, str]]:
    """(lesson, table, probability column, logprob column, probability unit) of every next-token table."""
    found = []
    for lid, result in run.results.items():
        for t in result.tables:
            if not t.name.startswith("top8_"):
                continue
            # The server's own probability (post-sampling at temperature 1 with no cuts) is the
            # independent number; a probability column computed from the logprob only shows the arithmetic.
            pi = column_index(t, "server probability")
            if pi is None:
                pi = column_index(t, "probability", "prob", "p")
            li = column_index(t, "logprob", "log probability")
            if pi is not None and li is not None:
                found.append((lid, t, pi, li, t.columns[pi].unit))
    return found


def _no_token_tables(run: Run) -> str:
    """Why a run has no next-token tables to check."""
    if _find_lesson(run, "04_") is None:
        return _missing(run, "04_", "04_next_token")
    return "lesson 04 has no top8_ table with probability and logprob columns"


# The server computes probabilities and logprobs in float32, each path with its own sum over the
# whole vocabulary. Summing n float32 numbers in two orders can differ by up to about n × 2^-24
# relative (2.9e-3 for SmolLM2's 49,152 tokens); seen: 1.7e-4 on SmolLM2, 1e-6 on a 4,096-token
# vocabulary. 1e-3 covers that and still catches a wrong softmax, which is off by whole percents.
EXP_RELATIVE_TOLERANCE = 1e-3


def claim_probability_is_exp_logprob(run: Run) -> list[ClaimResult]:
    text = "each probability in a next-token table equals e^logprob"
    tables = _token_tables(run)
    if not tables:
        why = _no_token_tables(run)
        return [ClaimResult("probability_is_exp_logprob", "general", "04", text, NA, detail=why)]
    worst, where, n = -1.0, "", 0
    worst_pair = (math.nan, math.nan)
    for lid, t, pi, li, unit in tables:
        for row in t.rows:
            if row[pi] is None:  # the token was not among the server's listed candidates
                continue
            try:
                p = probability_fraction(float(row[pi]), unit)
                lp = float(row[li])
            except (TypeError, ValueError):
                continue
            n += 1
            expected = math.exp(lp)
            err = abs(p - expected) / max(expected, 1e-300)
            if err > worst:
                worst, where, worst_pair = err, f"{t.name} token {token_text(row[column_index(t, 'token') or 0])!r}", (p, expected)
    if n == 0:
        return [ClaimResult("probability_is_exp_logprob", "general", "04", text, NA, detail="the next-token tables hold no numeric rows")]
    status = PASS if worst <= EXP_RELATIVE_TOLERANCE else FAIL
    return [ClaimResult(
        "probability_is_exp_logprob", "general", tables[0][0], text, status,
        observed=f"largest relative gap {worst:.2g} over {n} tokens in {len(tables)} tables",
        expected=f"p = {worst_pair[0]:.6g} vs e^logprob = {worst_pair[1]:.6g} ({where})",
        tolerance=f"relative {EXP_RELATIVE_TOLERANCE:g}",
    )]


def claim_top8_share_at_most_one(run: Run) -> list[ClaimResult]:
    text = "the top eight tokens hold at most all of the probability (share ≤ 1)"
    tables = _token_tables(run)
    if not tables:
        why = _no_token_tables(run)
        return [ClaimResult("top8_share_at_most_one", "general", "04", text, NA, detail=why)]
    shares = []
    for lid, t, pi, li, unit in tables:
        tops = top_tokens(t)
        probs = [p for p in (tops.probabilities if tops else []) if p is not None]
        shares.append((sum(probs), t.name))
    largest, name = max(shares)
    status = PASS if largest <= 1.0 + 1e-9 else FAIL
    return [ClaimResult("top8_share_at_most_one", "general", tables[0][0], text, status,
                        observed=f"largest share {largest:.4%} ({name})",
                        expected="≤ 100%", tolerance="1e-9",
                        detail="; ".join(f"{n}: {s:.2%}" for s, n in shares))]


def claim_prefill_faster_than_decode(run: Run) -> list[ClaimResult]:
    text = "prefill processes prompt tokens faster per token than decode generates them"
    lesson = _find_lesson(run, "04_")
    if lesson is None:
        return [ClaimResult("prefill_faster_than_decode", "general", "04", text, NA, detail=_missing(run, "04_", "04_next_token"))]
    prefill = _measurements(lesson, "prefill_tokens_per_s_long_prompt")
    decodes = _measurements(lesson, "decode_tokens_per_s_short_prompt") + _measurements(lesson, "decode_tokens_per_s_long_prompt")
    if not prefill or not decodes:
        return [ClaimResult("prefill_faster_than_decode", "general", lesson.lesson_id, text, NA,
                            detail="lesson 04 has no prefill_tokens_per_s_long_prompt or decode_tokens_per_s_* measurement")]
    p = prefill[0]
    d = max(decodes, key=lambda m: m.median)
    status = PASS if p.median > d.median else FAIL
    return [ClaimResult("prefill_faster_than_decode", "general", lesson.lesson_id, text, status,
                        observed=f"prefill {_spread(p)} tokens/s",
                        expected=f"> {d.name} {_spread(d)} tokens/s",
                        tolerance="medians compared",
                        detail=f"prefill is {p.median / d.median:.3g}× decode" if d.median > 0 else "")]


def _slower(subject: str, lesson: str, shallow: Measurement, deep: Measurement, what: tuple[str, str]) -> ClaimResult:
    text = "decode slows as the context grows"
    if deep.median < shallow.median:
        status, detail = PASS, f"{deep.median / shallow.median:.3g}× the speed at {what[1]} vs {what[0]}"
    elif deep.min <= shallow.max:
        status, detail = INCONCLUSIVE, ("the medians are in the wrong order and the samples' ranges overlap: "
                                        "these samples can show neither a slowdown nor a speed-up")
    else:
        status, detail = FAIL, f"every sample at {what[1]} is faster than every sample at {what[0]}"
    return ClaimResult("decode_slows_with_context", "general", lesson, f"{text} ({subject})", status,
                       observed=f"{what[1]}: {_spread(deep)} {deep.unit}",
                       expected=f"< {what[0]}: {_spread(shallow)} {shallow.unit}",
                       tolerance="the samples' [min, max] ranges", detail=detail)


def claim_decode_slows_with_context(run: Run) -> list[ClaimResult]:
    results = []
    l6 = _find_lesson(run, "06_")
    if l6 is None:
        results.append(ClaimResult("decode_slows_with_context", "general", "06", "decode slows as the context grows (depths of lesson 6)", NA,
                                   detail=_missing(run, "06_", "06_attention_kv_cache")))
    else:
        depths = [m for m in _measurements(l6, "decode_tokens_per_s_at_depth") if isinstance(m.settings.get("depth"), (int, float))]
        if len(depths) < 2:
            results.append(ClaimResult("decode_slows_with_context", "general", l6.lesson_id, "decode slows as the context grows (depths of lesson 6)", NA,
                                       detail="lesson 06 has fewer than two decode_tokens_per_s_at_depth measurements with a numeric depth"))
        else:
            depths.sort(key=lambda m: m.settings["depth"])
            lo, hi = depths[0], depths[-1]
            results.append(_slower("depths of lesson 6", l6.lesson_id, lo, hi,
                                   (f"depth {fmt(lo.settings['depth'])}", f"depth {fmt(hi.settings['depth'])}")))
    l4 = _find_lesson(run, "04_")
    if l4 is not None:
        short = _measurements(l4, "decode_tokens_per_s_short_prompt")
        long = _measurements(l4, "decode_tokens_per_s_long_prompt")
        if short and long:
            results.append(_slower("after a short vs a long prompt, lesson 4", l4.lesson_id, short[0], long[0], ("the short prompt", "the long prompt")))
    return results


def _model_hparams(result: LessonResult) -> list[dict[str, Any]]:
    """Dicts in the lesson's host values that carry the KV-cache hyperparameters."""
    found = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if any(k in value for k in ("n_layer", "block_count", "n_layers")):
                found.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(result.host_values)
    return found


_KV_COLUMNS = {
    "layers": ("layers", "n_layer", "blocks", "block_count"),
    "kv_heads": ("kv heads", "n_head_kv", "kv_heads", "head_count_kv"),
    "head_dim": ("head width", "head_dim", "head dim", "head dimension", "key_length"),
    "bytes": ("bytes per element", "bytes_per_element", "element bytes", "bytes/element"),
    "result": ("per token", "bytes per token", "kv bytes per token", "kv_bytes_per_token", "kv cache bytes per token"),
}

# Bytes per element of llama.cpp's KV cache types (block types: block bytes ÷ elements per block).
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                    "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


def _column_with_unit(table: Table, names: tuple[str, ...], unit: str) -> int | None:
    for i, c in enumerate(table.columns):
        if c.name.strip().lower() in names and c.unit.strip().lower() == unit:
            return i
    return None


def _kv_table_rows(result: LessonResult) -> list[tuple[str, list[float], float]]:
    """(label, [layers, kv heads, head width, bytes per element], bytes per token) of tables laid out that way."""
    rows = []
    for t in result.tables:
        idx = {key: column_index(t, *names) for key, names in _KV_COLUMNS.items() if key != "result"}
        idx["result"] = _column_with_unit(t, _KV_COLUMNS["result"], "bytes")
        if idx["result"] is None:
            idx["result"] = column_index(t, *_KV_COLUMNS["result"][1:])
        if any(v is None for v in idx.values()):
            continue
        for r in t.rows:
            try:
                args = [float(r[idx[k]]) for k in ("layers", "kv_heads", "head_dim", "bytes")]
                rows.append((f"{t.name}: {r[0]}", args, float(r[idx['result']])))
            except (TypeError, ValueError):
                continue
    return rows


def claim_kv_bytes_formula(run: Run) -> list[ClaimResult]:
    """Recompute the lesson's KV-cache bytes: its measurement from the served model's GGUF
    hyperparameters and cache types, and every row of its table from the row's own numbers."""
    text = "KV-cache bytes per token = 2 × layers × KV heads × head width × bytes per element"
    lesson = _find_lesson(run, "06_")
    if lesson is None:
        return [ClaimResult("kv_bytes_formula", "general", "06", text, NA, detail=_missing(run, "06_", "06_attention_kv_cache"))]
    checked: list[tuple[str, float, float]] = []
    hparams = _model_hparams(lesson)
    for m in _measurements(lesson, "kv_bytes_per_token"):
        kinds = [str(m.settings.get(k, "f16")).lower() for k in ("cache_type_k", "cache_type_v")]
        if not hparams or any(k not in CACHE_TYPE_BYTES for k in kinds):
            continue
        h = hparams[0]
        n_layer = h.get("n_layer") or h.get("block_count") or h.get("n_layers")
        n_head_kv = h.get("n_head_kv") or h.get("n_head")
        head_dim = h.get("head_dim") or ((h.get("n_embd") or 0) // (h.get("n_head") or 1))
        # K and V may have different types: half the formula's 2 for each.
        expected = sum(kv_bytes_per_token(n_layer, n_head_kv, head_dim, CACHE_TYPE_BYTES[k]) / 2 for k in kinds)
        checked.append((f"measurement kv_bytes_per_token from the GGUF ({n_layer} layers, {n_head_kv} KV heads, "
                        f"head width {head_dim}, {'/'.join(kinds)})", m.median, expected))
    for label, args, stated in _kv_table_rows(lesson):
        checked.append((label, stated, kv_bytes_per_token(int(args[0]), int(args[1]), int(args[2]), args[3])))
    if not checked:
        return [ClaimResult("kv_bytes_formula", "general", lesson.lesson_id, text, NA,
                            detail="lesson 06 has neither a kv_bytes_per_token measurement with the model's hyperparameters "
                                   "nor a table with layers, KV heads, head width, bytes per element and bytes per token")]
    bad = [(l, s, e) for l, s, e in checked if not math.isclose(s, e, rel_tol=1e-9, abs_tol=1e-9)]
    worst = bad[0] if bad else checked[0]
    return [ClaimResult("kv_bytes_formula", "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{fmt(worst[1])} bytes per token ({worst[0]})", expected=f"{fmt(worst[2])} bytes recomputed",
                        tolerance="exact",
                        detail=f"{len(checked)} values recomputed" + (f", {len(bad)} differ: " + "; ".join(
                            f"{l}: {fmt(s)} vs {fmt(e)}" for l, s, e in bad[:4]) if bad else ""))]


AGREE = re.compile(r"^(ok|pass|passed|agree|agrees|match|matches|same|✓|yes)\b", re.I)
SKIPPED = re.compile(r"^(not checked|skipped|n/a|not applicable|—)", re.I)


def claim_sampler_matches_server(run: Run) -> list[ClaimResult]:
    """Lesson 5's verdicts, and its recorded differences against its recorded tolerance: a row
    that says "agree" must have max |Δp| / p within the tolerance and the same kept tokens."""
    text = "the numpy re-implementation of the samplers gives the server's post-sampling probabilities"
    lesson = _find_lesson(run, "05_")
    if lesson is None:
        return [ClaimResult("sampler_matches_server", "general", "05", text, NA, detail=_missing(run, "05_", "05_generating_text"))]
    checked, skipped, bad = [], [], []
    worst = None
    for t in lesson.tables:
        vi = column_index(t, "verdict")
        if vi is None:
            continue
        ri = column_index(t, "max |δp| / p", "max |Δp| / p".lower(), "max relative difference")
        ti = column_index(t, "tolerance")
        si = column_index(t, "same tokens")
        for r in t.rows:
            label, verdict = f"{t.name} {r[0]}", str(r[vi]).strip()
            if SKIPPED.match(verdict):
                skipped.append(label)
                continue
            checked.append(label)
            problems = []
            if not AGREE.match(verdict):
                problems.append(f"verdict {verdict!r}")
            if ri is not None and ti is not None and isinstance(r[ri], (int, float)) and isinstance(r[ti], (int, float)):
                if worst is None or r[ri] > worst[0]:
                    worst = (float(r[ri]), float(r[ti]), label)
                if r[ri] > r[ti]:
                    problems.append(f"max |Δp|/p {r[ri]:.3g} > tolerance {r[ti]:.3g}")
            if si is not None and r[si] is False:
                problems.append("the kept tokens differ")
            if problems:
                bad.append(f"{label}: {', '.join(problems)}")
    if not checked:
        why = "lesson 05 has no table with a verdict column" if not skipped else f"lesson 05 checked no setting ({len(skipped)} not checked)"
        return [ClaimResult("sampler_matches_server", "general", lesson.lesson_id, text, NA, detail=why)]
    return [ClaimResult("sampler_matches_server", "general", lesson.lesson_id, text, FAIL if bad else PASS,
                        observed=f"{len(checked) - len(bad)} of {len(checked)} settings agree"
                                 + (f"; largest max |Δp|/p {worst[0]:.2g} ({worst[2]})" if worst else ""),
                        expected="every checked setting agrees",
                        tolerance=f"relative {worst[1]:g} (the lesson's)" if worst else "the lesson's verdicts",
                        detail="; ".join(bad[:5]) + (f"{'; ' if bad else ''}{len(skipped)} not checked by the lesson" if skipped else ""))]


def _first_difference(tokens: list[Any], reference: list[Any]) -> int | None:
    for i, (a, b) in enumerate(zip(tokens, reference)):
        if a != b:
            return i
    return None if len(tokens) == len(reference) else min(len(tokens), len(reference))


def claim_speculative_equals_plain(run: Run) -> list[ClaimResult]:
    """Lesson 5's speculative runs against its plain runs, token by token, from the token ids the
    lesson keeps in its settings (`speculative.runs`): a plain run (spec_type none) is the reference
    for every speculative run of the same target and prompt."""
    text = "at temperature 0, speculative decoding generates exactly the tokens of plain decoding"
    cid = "speculative_equals_plain"
    lesson = _find_lesson(run, "05_")
    if lesson is None:
        return [ClaimResult(cid, "general", "05", text, NA, detail=_missing(run, "05_", "05_generating_text"))]
    spec = lesson.settings.get("speculative")
    if not isinstance(spec, dict) or not spec.get("runs"):
        why = next((n for n in lesson.notes if n.startswith("Speculative decoding was not measured")), None)
        return [ClaimResult(cid, "general", lesson.lesson_id, text, NA,
                            detail=why or "lesson 05 recorded no speculative runs (settings.speculative.runs)")]
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
            at = _first_difference(tokens, reference)
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


def claim_decode_efficiency_in_unit_interval(run: Run) -> list[ClaimResult]:
    """Efficiency = measured ÷ ceiling; the ceiling comes from a measured bandwidth, so its spread
    widens what "at most 1" allows: the lowest efficiency the samples allow is
    min(efficiency) × median(bandwidth) ÷ max(bandwidth)."""
    text = "decode efficiency (measured ÷ bandwidth ceiling) lies between 0 and 1"
    results = []
    for prefix, name in (("04_", "04_next_token"), ("08_", "08_capstone_decode_memory_bound")):
        lesson = _find_lesson(run, prefix)
        if lesson is None:
            results.append(ClaimResult("decode_efficiency_in_unit_interval", "general", prefix[:2], text, NA, detail=_missing(run, prefix, name)))
            continue
        effs = _measurements(lesson, "decode_efficiency")
        if not effs:
            results.append(ClaimResult("decode_efficiency_in_unit_interval", "general", lesson.lesson_id, text, NA,
                                       detail=f"lesson {lesson.lesson_id} has no decode_efficiency measurement"))
            continue
        bws = _measurements(lesson, "read_bandwidth_gb_per_s")
        bandwidth_allowance = 1.0
        if bws and bws[0].max > 0:
            bandwidth_allowance = bws[0].max / bws[0].median
        for m in effs:
            if m.settings.get("cache_resident") is True:
                # Weights within the last-level cache need not come from the memory the bandwidth test read.
                results.append(ClaimResult("decode_efficiency_in_unit_interval", "general", lesson.lesson_id,
                                           text + measurement_label("", m.settings), NA,
                                           detail="cache-resident: the weights fit in the last-level cache"))
                continue
            # A ceiling from a stated bandwidth (--bandwidth-gbs) has no measured spread to allow for.
            given = m.settings.get("bandwidth_gbs") is not None
            allowance = 1.0 if given else bandwidth_allowance
            factor = 0.01 if m.unit.strip() in ("%", "percent") else 1.0
            med, lo, hi = m.median * factor, m.min * factor, m.max * factor
            label = text + measurement_label("", m.settings)
            if 0 < med <= 1:
                status, detail = PASS, ""
            elif hi > 0 and lo / allowance <= 1:
                status, detail = PASS, (f"the median is above 1, but within the measured spread: the lowest sample "
                                        f"{fmt(lo)} and the bandwidth's max/median {allowance:.3g} allow ≤ 1")
            else:
                status, detail = FAIL, ("no sample is above 0" if hi <= 0 else
                                        f"even the lowest sample {fmt(lo)} with the bandwidth's max/median {allowance:.3g} stays above 1")
            results.append(ClaimResult("decode_efficiency_in_unit_interval", "general", lesson.lesson_id, label, status,
                                       observed=f"{fmt(med)} ({fmt(lo)}–{fmt(hi)})", expected="0 < efficiency ≤ 1",
                                       tolerance=f"the samples, and the bandwidth's max ÷ median ×{allowance:.3g}" if allowance > 1.0005 else "the samples' spread",
                                       detail=detail))
    return results


def claim_ridge_point(run: Run) -> list[ClaimResult]:
    text = "ridge point = peak FLOP/s ÷ memory bandwidth (bytes/s)"
    lesson = _find_lesson(run, "07_")
    if lesson is None:
        return [ClaimResult("ridge_point_formula", "general", "07", text, NA, detail=_missing(run, "07_", "07_hardware_fit"))]
    ridge = _measurements(lesson, "ridge_point_flops_per_byte")
    peak = _measurements(lesson, "matmul_peak_gflop_per_s")
    bw = _measurements(lesson, "read_bandwidth_gb_per_s")
    if not (ridge and peak and bw):
        return [ClaimResult("ridge_point_formula", "general", lesson.lesson_id, text, NA,
                            detail="lesson 07 lacks ridge_point_flops_per_byte, matmul_peak_gflop_per_s or read_bandwidth_gb_per_s")]
    r, p, b = ridge[0], peak[0], bw[0]
    # The ridge point may be computed from the medians or per sample; either lies within these bounds.
    lo, hi = p.min / b.max, p.max / b.min
    expected = p.median / b.median
    status = PASS if lo * (1 - 1e-9) <= r.median <= hi * (1 + 1e-9) else FAIL
    return [ClaimResult("ridge_point_formula", "general", lesson.lesson_id, text, status,
                        observed=f"{fmt(r.median)} FLOPs/byte", expected=f"{fmt(expected)} from the medians",
                        tolerance=f"range {fmt(lo)}–{fmt(hi)} from the samples' min/max")]


# The bytes model with context against the published figures: a prediction within this of 29.6 passes.
BYTES_MODEL_TOLERANCE = 0.05


def claim_bytes_model_with_context(run: Run) -> list[ClaimResult]:
    """Course arithmetic, the same for every run: decode at depth d ≈ bandwidth ÷ (weight bytes + KV bytes
    per token × d). The published short-prompt decode (33.2 tokens/s of the 7.16 GB specimen) gives the
    bandwidth; the specimen's KV cache (no grouped-query attention: 2 × 32 × 32 × 128 × 2 bytes per
    token) predicts the decode after lesson 4's 1,921-token prompt, published as 29.6 tokens/s."""
    from . import published
    from .formulas import decode_tokens_per_s_at_depth

    text = ("decode after d tokens ≈ bandwidth ÷ (weight bytes + KV bytes per token × d), on the published "
            f"{published.SPARK_NAME} figures")
    spec, l4 = published.SPECIMEN, published.LESSON4
    kv = kv_bytes_per_token(spec["n_layer"], published.SPECIMEN_N_HEAD_KV, spec["n_embd"] // spec["n_head"], 2)
    effective = l4["decode_short_tokens_per_s"] * spec["file_bytes"]
    predicted = decode_tokens_per_s_at_depth(effective, spec["file_bytes"], kv, l4["long_prompt_tokens"])
    pub = l4["decode_long_tokens_per_s"]
    ok = abs(predicted / pub - 1) <= BYTES_MODEL_TOLERANCE
    return [ClaimResult("bytes_model_with_context", "general", "08", text, PASS if ok else FAIL,
                        observed=f"{predicted:.1f} tokens/s predicted at depth {l4['long_prompt_tokens']:,}",
                        expected=f"{pub:g} tokens/s published",
                        tolerance=f"±{BYTES_MODEL_TOLERANCE:.0%}",
                        detail=(f"KV = 2 × {spec['n_layer']} × {published.SPECIMEN_N_HEAD_KV} × "
                                f"{spec['n_embd'] // spec['n_head']} × 2 = {kv:,.0f} bytes per token; "
                                f"{l4['decode_short_tokens_per_s']:g} tokens/s × {spec['file_bytes'] / 1e9:g} GB = "
                                f"{effective / 1e9:.4g} GB/s; {effective / 1e9:.4g} GB/s ÷ ({spec['file_bytes'] / 1e9:g} GB + "
                                f"{kv:,.0f} × {l4['long_prompt_tokens']:,} bytes) = {predicted:.2f} tokens/s "
                                f"({predicted / pub - 1:+.1%}); course arithmetic, the same for every run"))]


GENERAL_CLAIMS: list[Callable[[Run], list[ClaimResult]]] = [
    claim_probability_is_exp_logprob,
    claim_top8_share_at_most_one,
    claim_prefill_faster_than_decode,
    claim_decode_slows_with_context,
    claim_kv_bytes_formula,
    claim_sampler_matches_server,
    claim_speculative_equals_plain,
    claim_decode_efficiency_in_unit_interval,
    claim_ridge_point,
    claim_bytes_model_with_context,
]


# --- reference files --------------------------------------------------------------------

class ModelScope(Strict):
    name: str = Field(description="model name as the file and GGUF spell it, e.g. deepseek-coder-6.7b-instruct")
    sha256: str | None = Field(default=None, description="the model file's sha256: when given, only that exact file is in scope")
    quantization: str | None = Field(default=None, description="e.g. Q8_0; must appear in the file name")
    size_bytes: float | None = Field(default=None, description="published file size")
    size_tolerance: float = Field(default=0.05, description="relative tolerance on size_bytes")


class HardwareScope(Strict):
    name: str
    gpu_contains: list[str] = Field(default_factory=list, description="any of these in a GPU name (nvidia-smi) matches")
    cpu_contains: list[str] = Field(default_factory=list, description="any of these in the CPU model matches")
    cpu_only: bool = Field(default=False, description="any host without a GPU matches (llama.cpp's CPU backend)")


class EngineScope(Strict):
    name: str
    engines: list[str] = Field(default_factory=list, description="accepted values of the manifest's engine.engine")


class Scope(Strict):
    model: ModelScope
    hardware: HardwareScope | None = None
    engine: EngineScope | None = None
    flags: dict[str, str | None] = Field(default_factory=dict, description="server flags (canonical long names) the figures were measured with")


class Tolerance(Strict):
    relative: float | None = None
    absolute: float | None = None
    missing: int | None = Field(default=None, description="for a set of tokens: how many of the published ones may be absent")

    def allows(self, observed: float, expected: float) -> bool:
        gap = abs(observed - expected)
        ok = False
        if self.absolute is not None:
            ok = ok or gap <= self.absolute + 1e-12
        if self.relative is not None:
            ok = ok or gap <= self.relative * abs(expected) + 1e-12
        return ok

    def text(self, unit: str) -> str:
        parts = []
        if self.absolute is not None:
            parts.append(f"±{fmt(self.absolute)}" + (" percentage points" if unit == "%" else (f" {unit}" if unit else "")))
        if self.relative is not None:
            parts.append(f"±{self.relative:.0%} of the published value")
        if self.missing is not None:
            parts.append(f"at most {self.missing} absent")
        return " or ".join(parts) or "exact"


class Figure(Strict):
    id: str
    claim: str = Field(description="the published statement, in our words")
    lesson: str = Field(description="lesson id, e.g. 04_next_token (matched on its number)")
    measurement: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="measurement settings the figure was taken with")
    table: str | None = None
    row: dict[str, Any] = Field(default_factory=dict, description="{column: value} selecting one row, e.g. {\"token\": \" Paris\"} or {\"rank\": 1}")
    column: str | None = None
    aggregate: Literal["cell", "sum", "set"] = "cell"
    rows: int | None = Field(default=None, description="for sum and set: the first N rows by rank")
    published: float | list[float] | str | list[str] = Field(
        description="a number, several runs' numbers, a token (the cell must equal it) or, with aggregate set, the tokens")
    unit: str = ""
    tolerance: Tolerance


class Reference(Strict):
    schema_version: int = 1
    kind: Literal["bytesup-reference"] = "bytesup-reference"
    name: str
    source: str = Field(description="where the figures were published")
    measured_on: str | None = None
    scope: Scope
    figures: list[Figure]


REFERENCE_SCHEMA_VERSION = 1


def load_reference(path: Path) -> Reference:
    path = Path(path)
    if not path.is_file():
        raise BytesupError(f"Reference file {path} does not exist. The course's references live in {references_dir()}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BytesupError(f"Reference file {path} is not valid JSON ({exc}).") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > REFERENCE_SCHEMA_VERSION:
        raise BytesupError(f"Reference file {path} has schema version {version}, newer than this bytesup reads ({REFERENCE_SCHEMA_VERSION}). Update bytesup.")
    try:
        return Reference.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BytesupError(f"Reference file {path} does not have the reference layout: "
                           f"{'.'.join(map(str, first['loc']))}: {first['msg']}. See the files in {references_dir()}.") from None


def default_references() -> list[Path]:
    folder = references_dir()
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _size_text(n: float | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def scope_differences(run: Run, scope: Scope) -> list[str]:
    """What about the run lies outside the reference's scope (empty: in scope)."""
    diffs = []
    m = run.model_identity()
    file = str(m.get("file") or m.get("name") or "")
    want = scope.model
    size = m.get("size_bytes")
    if want.sha256:
        ok = m.get("sha256") == want.sha256
    else:
        ok = _norm(want.name) in _norm(file)
        if want.quantization:
            ok = ok and _norm(want.quantization) in _norm(file)
        if want.size_bytes and size:
            ok = ok and abs(size - want.size_bytes) <= want.size_tolerance * want.size_bytes
    if not ok and want.sha256:
        diffs.append(f"model is {file or 'unknown'} (sha256 {str(m.get('sha256') or 'unknown')[:12]}…), reference is "
                     f"{want.name} (sha256 {want.sha256[:12]}…)")
    elif not ok:
        ref = " ".join(x for x in (want.name, want.quantization) if x)
        diffs.append(f"model is {file or 'unknown'} ({_size_text(size)}), reference is {ref} ({_size_text(want.size_bytes)})")
    host = (run.manifest or {}).get("host") or {}
    if scope.hardware is not None:
        hw = scope.hardware
        gpus = host.get("gpus") or []
        cpu = str(host.get("cpu") or "")
        match = any(s.lower() in g.lower() for s in hw.gpu_contains for g in gpus) or any(s.lower() in cpu.lower() for s in hw.cpu_contains)
        match = match or (hw.cpu_only and bool(host) and not gpus)
        if not match:
            here = f"{cpu or 'unknown CPU'}" + (f" with GPU {', '.join(gpus)}" if gpus else ", no GPU")
            if not host:
                here = "unknown (the run has no manifest)"
            diffs.append(f"hardware is {here}, reference is {hw.name}")
    eng = (run.manifest or {}).get("engine") or {}
    first = next(iter(run.results.values()), None)
    engine = eng.get("engine") or (first.server.get("engine") if first else None)
    if scope.engine is not None and scope.engine.engines and engine not in scope.engine.engines:
        diffs.append(f"engine is {engine or 'unknown'}, reference is {scope.engine.name}")
    flags = eng.get("flags") if eng.get("flags") is not None else (first.server.get("flags") if first else None)
    flags = flags or {}
    # A flag the run did not record (a server started outside bytesup) is unknown, not different.
    differing = [f"{k} {flags[k]} (reference {v})" for k, v in scope.flags.items()
                 if k in flags and str(flags[k]) != str(v)]
    if differing:
        diffs.append("server flags differ: " + ", ".join(differing))
    return diffs


DIMENSIONLESS = {"", "×", "x", "ratio", "fraction", "share", "1"}
PERCENT = {"%", "percent"}


def _to_unit(value: float, unit: str, to_unit: str) -> float | None:
    """`value` in `unit` expressed in `to_unit`: the same, or % <-> a plain fraction; None otherwise."""
    u, t = unit.strip(), to_unit.strip()
    if u == t or (u in DIMENSIONLESS and t in DIMENSIONLESS):
        return value
    if u in DIMENSIONLESS and t in PERCENT:
        return value * 100.0
    if u in PERCENT and t in DIMENSIONLESS:
        return value / 100.0
    return None


def _unit_suffix(unit: str) -> str:
    return unit if unit in ("%", "×") else (f" {unit}" if unit else "")


def _published_text(fig: Figure) -> tuple[float, str]:
    if isinstance(fig.published, str) or fig.aggregate == "set":
        raise ValueError("token figures are checked by _check_tokens")
    if isinstance(fig.published, list):
        med = statistics.median(fig.published)
        vals = " and ".join(fmt(float(v)) for v in fig.published)
        return med, f"{vals}{_unit_suffix(fig.unit)} (median {fmt(med)})"
    return float(fig.published), f"{fmt(float(fig.published))}{_unit_suffix(fig.unit)}"


def _observe(run: Run, fig: Figure) -> tuple[float | None, str]:
    """(observed value in the figure's unit, '') or (None, why not applicable)."""
    prefix = fig.lesson[:3]
    lesson = _find_lesson(run, prefix)
    if lesson is None:
        return None, _missing(run, prefix, fig.lesson)
    if fig.measurement:
        ms = _measurements(lesson, fig.measurement)
        if not ms:
            return None, f"lesson {lesson.lesson_id} has no measurement {fig.measurement}"
        fitting = [m for m in ms if all(m.settings.get(k) == v for k, v in fig.settings.items())]
        if not fitting:
            got = "; ".join(", ".join(f"{k}={fmt(m.settings.get(k))}" for k in fig.settings) for m in ms)
            want = ", ".join(f"{k}={fmt(v)}" for k, v in fig.settings.items())
            return None, f"the run measured {fig.measurement} with {got}, the reference with {want}"
        m = fitting[0]
        value = _to_unit(m.median, m.unit, fig.unit)
        if value is None:
            return None, f"units differ: the run's {fig.measurement} is in {m.unit or '(none)'}, the reference in {fig.unit or '(none)'}"
        return value, ""
    if fig.table:
        table = next((t for t in lesson.tables if t.name == fig.table), None)
        if table is None:
            return None, f"lesson {lesson.lesson_id} has no table {fig.table}"
        ci = column_index(table, (fig.column or "").lower())
        if ci is None:
            return None, f"table {fig.table} has no column {fig.column}"
        unit = table.columns[ci].unit
        ri = column_index(table, "rank")
        rows = list(table.rows)
        if ri is not None:
            rows.sort(key=lambda r: float(r[ri]))
        if fig.aggregate == "sum":
            chosen = rows[: fig.rows] if fig.rows else rows
            total = sum(float(r[ci]) for r in chosen)
            value = _to_unit(total, unit, fig.unit)
        else:
            chosen = rows
            for key, want in fig.row.items():
                ki = column_index(table, key.lower())
                if ki is None:
                    return None, f"table {fig.table} has no column {key}"
                chosen = [r for r in chosen if _cell_matches(r[ki], want)]
            if not chosen:
                sel = ", ".join(f"{k} {v!r}" for k, v in fig.row.items())
                return None, f"table {fig.table} has no row with {sel} (the top tokens differ)"
            value = _to_unit(float(chosen[0][ci]), unit, fig.unit)
        if value is None:
            return None, f"units differ: column {fig.column} is in {unit or '(none)'}, the reference in {fig.unit or '(none)'}"
        return value, ""
    return None, "the reference names neither a measurement nor a table"


def _sorted_rows(table: Table) -> list[list[Any]]:
    ri = column_index(table, "rank")
    rows = list(table.rows)
    if ri is not None:
        rows.sort(key=lambda r: float(r[ri]))
    return rows


def _check_tokens(run: Run, fig: Figure, base: dict[str, Any]) -> ClaimResult:
    """A token figure: one cell equal to a token, or the set of the first N tokens (aggregate set)."""
    prefix = fig.lesson[:3]
    lesson = _find_lesson(run, prefix)
    table = next((t for t in lesson.tables if t.name == fig.table), None) if lesson else None
    ci = column_index(table, (fig.column or "").lower()) if table is not None else None
    if lesson is None:
        return ClaimResult(status=NA, detail=_missing(run, prefix, fig.lesson), **base)
    if table is None or ci is None:
        return ClaimResult(status=NA, detail=f"lesson {lesson.lesson_id} has no table {fig.table} with a column {fig.column}", **base)
    rows = _sorted_rows(table)
    if fig.aggregate == "set":
        want = [str(t) for t in (fig.published if isinstance(fig.published, list) else [fig.published])]
        got = [token_text(r[ci]) for r in rows[: fig.rows or len(want)]]
        absent = [t for t in want if t not in got]
        ok = len(absent) <= (fig.tolerance.missing or 0)
        return ClaimResult(status=PASS if ok else FAIL, observed=", ".join(repr(t) for t in got),
                           detail=("all present" if not absent else "absent: " + ", ".join(repr(t) for t in absent)), **base)
    chosen = rows
    for key, value in fig.row.items():
        ki = column_index(table, key.lower())
        if ki is None:
            return ClaimResult(status=NA, detail=f"table {fig.table} has no column {key}", **base)
        chosen = [r for r in chosen if _cell_matches(r[ki], value)]
    if not chosen:
        sel = ", ".join(f"{k} {v!r}" for k, v in fig.row.items())
        return ClaimResult(status=NA, detail=f"table {fig.table} has no row with {sel}", **base)
    got_token = token_text(chosen[0][ci])
    ok = got_token == fig.published
    return ClaimResult(status=PASS if ok else FAIL, observed=repr(got_token),
                       detail="the same token" if ok else f"the run's token is {got_token!r}", **base)


def _cell_matches(cell: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(cell) == float(want)
        except (TypeError, ValueError):
            return False
    return token_text(cell) == str(want)


def check_reference(run: Run, ref: Reference) -> list[ClaimResult]:
    diffs = scope_differences(run, ref.scope)
    results = []
    for fig in ref.figures:
        tokens = isinstance(fig.published, str) or fig.aggregate == "set"
        if tokens:
            shown = fig.published if isinstance(fig.published, list) else [fig.published]
            expected, pub_text = math.nan, ", ".join(repr(t) for t in shown)
        else:
            expected, pub_text = _published_text(fig)
        base = dict(id=fig.id, source=ref.name, lesson=fig.lesson, claim=fig.claim, expected=pub_text,
                    tolerance=fig.tolerance.text(fig.unit) if not isinstance(fig.published, str) else "exact")
        if diffs:
            results.append(ClaimResult(status=NA, detail="; ".join(diffs), **base))
            continue
        if tokens:
            results.append(_check_tokens(run, fig, base))
            continue
        observed, why = _observe(run, fig)
        if observed is None:
            results.append(ClaimResult(status=NA, detail=why, **base))
            continue
        ok = fig.tolerance.allows(observed, expected)
        unit = fig.unit
        off = f"{observed - expected:+,.4g}" + (" percentage points" if unit == "%" else _unit_suffix(unit))
        results.append(ClaimResult(status=PASS if ok else FAIL, observed=f"{fmt(observed)}{_unit_suffix(unit)}",
                                   detail=f"off by {off}", **base))
    return results


# --- running the checks ------------------------------------------------------------------

@dataclass
class CheckReport:
    run: Run
    references: list[tuple[Path, Reference]]
    results: list[ClaimResult]
    checked_at: str

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, INCONCLUSIVE: 0, NA: 0}
        for r in self.results:
            out[r.status] += 1
        return out

    @property
    def failed(self) -> bool:
        return self.counts()[FAIL] > 0

    def summary(self) -> str:
        c = self.counts()
        return (f"{c[PASS]} pass, {c[FAIL]} fail, " + (f"{c[INCONCLUSIVE]} inconclusive, " if c[INCONCLUSIVE] else "")
                + f"{c[NA]} not applicable")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": CHECK_SCHEMA_VERSION, "kind": "bytesup-check",
            "run": str(self.run.path), "checked_at": self.checked_at,
            "references": [{"file": str(p), "name": r.name, "source": r.source} for p, r in self.references],
            "counts": self.counts(), "claims": [r.to_json() for r in self.results],
        }


def check_run(run: Run, reference_files: list[Path] | None = None) -> CheckReport:
    files = list(reference_files) if reference_files else default_references()
    refs = [(Path(p), load_reference(Path(p))) for p in files]
    results: list[ClaimResult] = []
    for claim in GENERAL_CLAIMS:
        results.extend(claim(run))
    for _, ref in refs:
        results.extend(check_reference(run, ref))
    return CheckReport(run, refs, results, datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _cell(text: Any) -> str:
    return md_text(text, newline="⏎", cell=True)


MARK = {PASS: "✅ pass", FAIL: "❌ fail", INCONCLUSIVE: "❔ inconclusive", NA: "➖ not applicable"}


def markdown(report: CheckReport, heading: str = "#") -> str:
    lines = [f"{heading} Checks of run {md_text(report.run.name)}", "",
             f"{report.summary()} · checked {report.checked_at}", ""]
    general = [r for r in report.results if r.source == "general"]
    lines += [f"{heading}# General claims (any model, any host)", "",
              "| claim | lesson | result | observed | expected | tolerance | detail |", "|---|---|---|---|---|---|---|"]
    for r in general:
        lines.append(f"| {_cell(r.claim)} | {_cell(r.lesson)} | {MARK[r.status]} | {_cell(r.observed)} | {_cell(r.expected)} | {_cell(r.tolerance)} | {_cell(r.detail)} |")
    lines.append("")
    for path, ref in report.references:
        rows = [r for r in report.results if r.source == ref.name]
        scope = ref.scope
        lines += [f"{heading}# Published figures: {md_text(ref.name)}", "",
                  md_text(f"Source: {ref.source}" + (f" (measured {ref.measured_on})" if ref.measured_on else "")), "",
                  md_text(f"Scope: {scope.model.name} {scope.model.quantization or ''}".rstrip()
                          + (f" (sha256 {scope.model.sha256[:12]}…)" if scope.model.sha256 else "")
                          + (f" · {scope.hardware.name}" if scope.hardware else "")
                          + (f" · {scope.engine.name}" if scope.engine else "")
                          + (f" · {' '.join(f'{k} {v}' for k, v in scope.flags.items())}" if scope.flags else ""))
                  + f" · file `{md_text(path.name)}`", ""]
        na = [r for r in rows if r.status == NA]
        if rows and len(na) == len(rows) and len({r.detail for r in rows}) == 1:
            lines += [f"All {len(rows)} figures: ➖ not applicable: {md_text(rows[0].detail)}.", "",
                      "| figure | lesson | published | tolerance |", "|---|---|---|---|"]
            lines += [f"| {_cell(r.claim)} | {_cell(r.lesson)} | {_cell(r.expected)} | {_cell(r.tolerance)} |" for r in rows]
        else:
            lines += ["| figure | lesson | result | observed | published | tolerance | detail |", "|---|---|---|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {_cell(r.claim)} | {_cell(r.lesson)} | {MARK[r.status]} | {_cell(r.observed)} | {_cell(r.expected)} | {_cell(r.tolerance)} | {_cell(r.detail)} |")
        lines.append("")
    return "\n".join(lines)


def write_report(report: CheckReport) -> tuple[Path, Path]:
    md, js = report.run.path / "check.md", report.run.path / "check.json"
    write_text_atomic(md, markdown(report))
    write_json_atomic(js, report.to_json())
    return md, js


STATUS_STYLE = {PASS: "green", FAIL: "bold red", INCONCLUSIVE: "yellow", NA: "dim"}


def print_rich(report: CheckReport, console) -> None:
    from .escape import rich_text as escape
    from rich.table import Table as RichTable

    def table(title: str, caption: str | None, rows: list[ClaimResult], with_detail: bool) -> None:
        t = RichTable(title=escape(title), title_justify="left", caption=escape(caption) if caption else None, caption_justify="left")
        cols = ["claim", "lesson", "result", "observed", "expected", "tolerance"] + (["detail"] if with_detail else [])
        for col in cols:
            t.add_column(col, overflow="fold")
        for r in rows:
            style = STATUS_STYLE[r.status]
            cells = [escape(r.claim), r.lesson, f"[{style}]{r.status}[/{style}]", escape(r.observed), escape(r.expected), escape(r.tolerance)]
            t.add_row(*(cells + ([escape(r.detail)] if with_detail else [])))
        console.print(t)

    table("general claims (any model, any host)", None, [r for r in report.results if r.source == "general"], True)
    for _, ref in report.references:
        rows = [r for r in report.results if r.source == ref.name]
        shared_na = bool(rows) and all(r.status == NA for r in rows) and len({r.detail for r in rows}) == 1
        caption = f"source: {ref.source}"
        if shared_na:
            caption += f"\nall {len(rows)} figures not applicable: {rows[0].detail}"
        table(f"published: {ref.name}", caption, rows, not shared_na)
    console.print(f"[bold]{report.summary()}[/bold]")
