"""Lesson 8's view: its tables, their notes and its plot, rendered from the records of its figures
(`store.facts.lesson08`) by their declared columns, onto a `Page` (the lesson's context). It records nothing and
measures nothing; every number in a note comes from a record, the analysis of the sweep or the run's readings.

In the order of the page: `show_models`, `show_sweep` (with `verdict_sentences`, `bandwidth_note` and `servers_note`),
`show_accuracy` (with `accuracy_sentences`), `show_steps`,
`show_fit` (with `slope_note`), `show_decode_model` (with `model_notes` and `crossover_note`), `show_prefill`,
`show_context_prediction`, `plot_decode_vs_bytes`, and the page's last words, `show_conclusion` (`conclusion`); the
opening, `shows`, the crossover and each model's side of it. The models, the sweep, the decode-time model and the
prefill show at most 8 columns in the main text (`*_SHOWN`), every column in their full tables under Details.

One verdict per width, the decode-time model's (memory-bound, compute-bound or mixed): the sweep's steps and its line
describe the speeds and name none, and the line's bandwidth is named so, never B, which is the model's."""

from __future__ import annotations

import math
from typing import Any, Protocol

from bytesup.course import decodetime, published, robust
from bytesup.course import memory_bound
from bytesup.course.ceiling import BandwidthReference
from bytesup.host import hostbench
from bytesup.models import catalog
from bytesup.llama.shapes import ServerShape
from bytesup.store.facts.lesson08 import (PUBLISHED_BYTES, PUBLISHED_DECODE, PUBLISHED_LABEL, SOURCE_WIDTH,
                                          AccuracyRow, ArithmeticRow, ContextRow, Crossover, FitRow, ModelExplained,
                                          ModelRun, ModelsRow, PrefillRow, QuantizationAccuracy, Side, StepRow,
                                          SweepRow, TopAnswer, TypeCrossover, UnfitRow, WidthAccuracy, accuracy_row,
                                          arithmetic_rows, exact_copy_of, models_row, published_ceiling,
                                          spark_explained, spark_verdict, step_row)
from bytesup.store.plans.lesson08 import MEMORY_SHARE, Plan, PrefillPlan
from bytesup.store.render import fmt
from bytesup.store.results import Series
from bytesup.store.rows import cells, columns
from bytesup.store.views import show_narrowed
from bytesup.units import GB, MB, MiB


class Page(Protocol):
    """Where a view puts its tables and plots (a LessonContext)."""

    def table(self, name: str, title: str, columns: list[tuple[str, str]], rows: list[list[Any]],
              notes: list[str] | None = None) -> Any: ...

    def plot(self, name: str, title: str, x_label: str, y_label: str, series: list[Series], **kw: Any) -> Any: ...

    def note(self, text: str) -> None: ...


def show_models(page: Page, runs: list[ModelRun], points: list[dict], llc: int | None, memory_max: float | None,
                bw: dict | None, skipped: list[str], available: int | None, facts: dict, local: bool) -> None:
    notes = [("Widths of one model share its parameters and differ in bytes per parameter; a step between "
              "neighbouring widths changes only how many bytes decode reads (and the arithmetic to unpack them).")]
    if llc and memory_max:
        notes.append(f"Fits in the cache: bytes per token ≤ the {llc / MiB:,.0f} MiB last-level cache "
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
    show_narrowed(page, "models", "The models: widths of one model, and larger models beyond them",
                  "The models, every column: their architecture and whether they fit in the cache", columns(ModelsRow),
                  cells([models_row(r.info, p) for r, p in zip(runs, points, strict=True)]), MODELS_SHOWN, notes, [])


# The columns each wide table shows in the main text; every column is in the full table, under Details.
MODELS_SHOWN = ["model", "weights", "blocks", "hidden size", "parameters", "bytes per token", "bytes per parameter",
                "cache-resident"]
SWEEP_SHOWN = ["model", "weights", "bytes per token", "decode", "effective", "efficiency", "server's top token",
               "verdict"]
PREFILL_SHOWN = ["model", "weights", "prefill", "reached", "prefill per token", "decode's arithmetic per token, params × c",
                 "decode ÷ prefill"]
MODEL_SHOWN = ["model", "weights", "read the weights", "arithmetic", "fixed", "predicted", "measured", "waits on"]
ARITHMETIC_SHOWN = ["weights", "c", "c at most (hidden)", "crossover B × c", "its standard error u", "mixed from", "mixed to",
                    "its models (bytes per parameter)"]


STEP_WORDS = {memory_bound.FOLLOWS: "effective GB/s stayed flat: tokens/s followed 1 ÷ bytes",
              memory_bound.NOT_FASTER: "fewer bytes were not faster",
              memory_bound.LESS: "faster, but by less than the bytes shrank",
              memory_bound.FASTER: "faster than the bytes alone explain",
              memory_bound.UNCLEAR: "the spread is too wide to tell a speed-up from none at this bytes ratio"}


def verdict_sentences(points: list[dict], analysis: dict, answers: dict[str, TopAnswer],
                      ref: BandwidthReference | None, llc_bytes: int | None, prompt: str,
                      verdicts: dict[str, str], why_not: str = "") -> list[str]:
    """The sweep's sentences, each chosen and filled in by the analysis of this run's points; the verdict per width is
    the decode-time model's (`verdicts`, empty where it could not be fitted, and then `why_not`)."""
    out = []
    fit, steps, line = analysis["fit"], analysis["steps"], analysis["line"]
    tol = 100 * analysis["tolerance"]
    for st in steps:
        out.append(f"From {st['wide']} to {st['narrow']} the bytes per token shrank {st['bytes_ratio']:.3g} × and decode "
                   f"got {st['speedup']:.3g} × as fast (effective GB/s × {st['gbs_ratio']:.3g}, judged within "
                   f"±{100 * st['allowance']:.0f}%): {STEP_WORDS[st['outcome']]}"
                   + (" (a cache-resident width takes part)." if st["cache_resident"] else "."))
    cached = [p["name"] for p in points if p["cache_resident"]]
    if cached:
        assert llc_bytes is not None
        out.append(f"{', '.join(cached)}: the weights fit in the {llc_bytes / MiB:,.0f} MiB last-level cache the OS "
                   f"reports and were read faster than memory delivers, so they came from the cache; marked "
                   f"cache-resident and kept out of the line.")
    fitting = [p["name"] for p in points if p["fits_in_cache"] and not p["cache_resident"]]
    if fitting:
        out.append(f"{', '.join(fitting)}: the weights fit in that cache by size, yet decode read them no faster than "
                   "memory delivers, so they are treated as read from memory (the cache is shared, and it holds "
                   "more than the weights).")
    if fit:
        on = [n for n, v in line.items() if v["on_line"]]
        off = [f"{n} {100 * v['residual']:+.0f}%" for n, v in line.items() if v["on_line"] is False]
        out.append(f"The line tokens/s = the line's bandwidth ÷ bytes through {', '.join(analysis['basis'])} (equal "
                   f"relative weight per point) puts the line's bandwidth at {fit['gbs']:.3g} GB/s (one standard error "
                   f"{fit['gbs_low']:.3g}–{fit['gbs_high']:.3g})"
                   + (f", {100 * fit['gbs'] / ref.gbs:.0f}% of the {ref.gbs:.3g} GB/s {ref.label}" if ref else "")
                   + f": how fast those widths read, a description and not a verdict. On the line (within ±{tol:.0f}% "
                     f"or the point's own spread, widened by two standard errors of the line's bandwidth): "
                     f"{', '.join(on) or 'none'}"
                   + (f"; off it: {', '.join(off)}." if off else "."))
    trained = {n: a for n, a in answers.items() if not catalog.is_synthetic(n)}
    if answers:
        same = sorted({a.token for a in trained.values()})
        low, high = (min(a.percent for a in trained.values()), max(a.percent for a in trained.values())) if trained \
            else (0.0, 0.0)
        out.append(f"The server's answer after {prompt!r}: "
                   + ", ".join(f"{n} {a.token} ({fmt(a.percent)}%)" for n, a in answers.items())
                   + "." + ((f" The same top token at every width of the trained model, at {fmt(low)}% to {fmt(high)}%"
                             if high > low else " The same top token, at the same probability, at every width of the "
                             "trained model") + " (the server's own arithmetic); what each width's values cost in "
                            "accuracy is measured apart, below." if len(trained) > 1 and len(same) == 1 else
                            " The top token changed between widths of the trained model." if len(trained) > 1 else "")
                   + (" The synthetic models' random weights give no meaningful answer."
                      if len(trained) < len(answers) else ""))
    flagged = [f"{p['name']} {', '.join(f'{v:.3g}' for v in p['outliers'])} tokens/s" for p in points if p["outliers"]]
    out.append(("Outliers (beyond " + f"{robust.OUTLIER_MADS:g} scaled MADs of a width's median; shown in min and max, "
                "kept in the JSON, never widening an allowance): " + ("; ".join(flagged) if flagged else "none") + "."))
    if verdicts:
        by_verdict: dict[str, list[str]] = {}
        for n, v in verdicts.items():
            by_verdict.setdefault(v, []).append(n)
        out.append("Verdict, the decode-time model's (below: the term each width's step waits on, named where the "
                   "run tells the two terms apart, mixed where they lie within its type's band around the crossover "
                   "or within the width's own steps' scatter): "
                   + "; ".join(f"{k}: {', '.join(v)}" for k, v in by_verdict.items())
                   + ". The steps and the line above describe the speeds; they name no verdict.")
    else:
        out.append(f"No verdict per width: the decode-time model could not be fitted ({why_not or 'no steps'}); the "
                   f"steps and the line above describe the speeds and name no verdict.")
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


def servers_note(shape: ServerShape, run_shape: ServerShape | None, levels: tuple[int, ...], turns: bool) -> str:
    """Which server shape every model of the sweep ran on and why, beside the run's own server's."""
    why = (f"the first model of each weight type also decodes {' and '.join(map(str, levels))} sequences at once, "
           f"which takes {shape.slots} slots, and every model gets the same shape so that their one-sequence steps are "
           f"measured alike; a one-sequence decode uses one slot of it" if levels else
           "one sequence at a time takes one slot")
    out = (f"Servers: each model on a server of its own, with the user's server flags and {shape.text()}"
           + (", all up at once, the timed decodes going round them in turns" if turns else ", one after another")
           + f": {why}.")
    if run_shape is not None:
        if (run_shape.slots, run_shape.context) == (shape.slots, shape.context):
            out += " The run's own server, where the other lessons measure the default model, has the same shape."
        else:
            out += (f" The run's own server, where the other lessons measure the default model, has "
                    f"{run_shape.text()}: a one-sequence figure here may differ from theirs by the shape as well as by "
                    f"the time it was taken.")
    return out


def show_sweep(page: Page, rows: list[SweepRow], pub: SweepRow, sentences: list[str], bw_note: str,
               plan: Plan, servers: str | None = None) -> None:
    show_narrowed(
        page, "sweep", f"Decode across widths: bytes per token, tokens/s, effective GB/s and the answer after {plan.prompt!r}",
        "Decode across widths, every column: the ranges of the samples, the answer's probability and the line",
        columns(SweepRow), cells([*rows, pub]), SWEEP_SHOWN, formulas=[],
        notes=[*sentences,
               bw_note,
               (f"Effective GB/s = bytes per token × tokens/s; efficiency = effective ÷ bandwidth. {plan.samples} timed "
                f"decodes of {plan.n_predict} tokens per model"
                + (f" after {plan.warmup} warm-up decode{'s' if plan.warmup > 1 else ''} (not a sample)" if plan.warmup
                   else "") + ", min and max the extreme samples."),
               *([servers] if servers else []),
               (f"Published reference: {pub.decode:g} tokens/s × {pub.bytes_per_token / GB:g} GB = {pub.effective:.3g} "
                f"GB/s, {pub.efficiency:.0f}% of the {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s "
                f"{published.SPARK_NAME} (ceiling {published_ceiling():.1f} tokens/s; the course rounds it to "
                f"{published.LESSON4['ceiling_tokens_per_s']:g} and quotes "
                f"{published.LESSON4['decode_efficiency_percent']:g}%).")],
    )


def where_in(w: WidthAccuracy, acc: QuantizationAccuracy) -> str:
    """Where the width's largest |ΔP| lies: after a whole prompt, or after its first tokens."""
    tokens = dict(zip(acc.prompts, acc.prompt_tokens, strict=True)).get(w.dp_prompt or "")
    if w.dp_position == tokens:
        return f"after {w.dp_prompt!r}"
    return f"after the first {w.dp_position} of the {tokens} tokens of {w.dp_prompt!r}"


def made_sentence(acc: QuantizationAccuracy) -> str:
    """How each width was made, and so which are independent of the reference."""
    ref = acc.reference
    out = "How each width was made: " + "; ".join(f"{w.name}, {w.made_from}" for w in acc.widths if w.made_from) + "."
    if any(w.name == SOURCE_WIDTH for w in acc.widths) and exact_copy_of(SOURCE_WIDTH, ref):
        out += (f" Only {SOURCE_WIDTH} was quantized from the trained weights, which no file here holds; every other "
                f"width is made from its values. So {ref} is {SOURCE_WIDTH} decoded, not the trained model: KL against "
                f"it measures what a width loses from {SOURCE_WIDTH}'s values, and what {SOURCE_WIDTH} itself lost "
                f"cannot be measured here.")
    return out


def width_sentence(w: WidthAccuracy, acc: QuantizationAccuracy) -> str:
    """One recomputed width against the reference, in its numbers."""
    ref = acc.reference
    if w.identical:
        return (f"{w.name}: the same distribution as {ref} at all {w.positions} positions, to the last bit (KL 0, no "
                f"probability moved)" + (f": {ref} holds {w.name}'s values exactly, so they agree by construction, "
                                         f"which says nothing of what {w.name}'s own quantization cost."
                                         if exact_copy_of(w.name, ref) else "."))
    assert w.dp_reference is not None and w.dp_width is not None and w.largest_dp is not None
    return (f"{w.name}: KL {w.mean_kl:.3g} nats per token against {ref} (at most {w.max_kl:.3g} at one position), the "
            f"same top token at {w.same_top} of {w.positions} positions; the largest change of any token's probability "
            f"is {100 * w.largest_dp:.2g} points, {w.dp_token} {where_in(w, acc)}: {100 * w.dp_reference:.1f}% under "
            f"{ref}, {100 * w.dp_width:.1f}% under {w.name}.")


def top_token_sentence(done: list[WidthAccuracy], reference: WidthAccuracy, prompt: str, partial: bool = False) -> str:
    """The top token after the lesson's prompt at every width recomputed (`partial`: not every width was), against
    the reference's, from numpy's pass."""
    ref, token = reference.name, reference.top_token
    changed = [w for w in done if w.top_token != token]
    p = {w.name: fmt(100 * (w.top_probability or 0.0)) for w in done}  # as the table prints it
    if changed:
        return (f"After {prompt!r} numpy's top token changed against {ref}'s {token} ({p[ref]}%): "
                + ", ".join(f"{w.name} {w.top_token} ({p[w.name]}%)" for w in changed) + ".")
    moved = [w for w in done if w.top_probability != reference.top_probability]
    every = "every width recomputed" if partial else "every width"
    return (f"After {prompt!r} numpy gives {every} the top token {token}, as {ref} ({p[ref]}%)"
            + (": its probability moved under " + ", ".join(f"{w.name} to {p[w.name]}%" for w in moved) + "."
               if moved else f", at the same probability under {every}."))


def trade_sentences(done: list[WidthAccuracy], rows: dict[str, AccuracyRow], ref: str,
                    missing: list[str] | None = None) -> list[str]:
    """What fewer bytes bought and cost against the reference: bytes, speed and KL of each narrower width recomputed,
    and which of those costs is measured rather than zero by construction (`missing`: the widths not recomputed)."""
    base = rows[ref]
    others = [w for w in done if w.name != ref]
    if not others:
        return []
    parts = [f"{w.name} {rows[w.name].size / base.size:.2g}× the bytes and {rows[w.name].decode / base.decode:.2g}× "
             f"the speed for KL {w.mean_kl:.3g}" for w in others]
    out = [f"Against {ref}'s bytes and speed: " + "; ".join(parts) + "."]
    built = [w.name for w in others if w.identical and exact_copy_of(w.name, ref)]
    measured = [w for w in others if w.name not in built]
    if measured:
        worst = max(measured, key=lambda w: w.mean_kl or 0.0)
        out.append(f"What quantizing cost is measured on {', '.join(w.name for w in measured)}"
                   + (f" alone ({', '.join(built)} agrees with {ref} by construction)" if built else "")
                   + (f": the most, KL {worst.mean_kl:.3g}, on {worst.name}, for {rows[worst.name].size / base.size:.2g}× "
                      f"{ref}'s bytes." if (worst.mean_kl or 0.0) > 0 else ": none moved any probability."))
    elif missing:
        out.append(f"Every narrower width recomputed here agrees with {ref} by construction, so no cost of quantizing "
                   f"is measured without {', '.join(missing)}.")
    else:
        out.append(f"Every narrower width here agrees with {ref} by construction: this run measures no cost of "
                   f"quantizing.")
    return out


def server_sentence(done: list[WidthAccuracy], answers: dict[str, TopAnswer], reference: WidthAccuracy,
                    prompt: str) -> str | None:
    """The server's answers after the prompt beside numpy's, and where widths numpy finds identical got different
    answers from the server, that the engine's own arithmetic moved them."""
    pairs = [(w, answers[w.name]) for w in done if w.name in answers and w.top_probability is not None]
    if not pairs:
        return None
    out = (f"A top token's probability is given by two computations, named apart: the server's (the sweep above, by "
           f"its engine's own arithmetic) and numpy's (this table, the weights' values alone, from the file's bytes); "
           f"they differ by what the engine rounds (lesson 4). After {prompt!r}, the server's against numpy's: "
           + ", ".join(f"{w.name} {a.token} {fmt(a.percent)}% against {w.top_token} "
                       f"{fmt(100 * (w.top_probability or 0))}%" for w, a in pairs) + ".")
    ref = answers.get(reference.name)
    apart = [(w, a) for w, a in pairs if w.identical and w.name != reference.name and ref is not None
             and f"{a.token} {fmt(a.percent)}" != f"{ref.token} {fmt(ref.percent)}"]
    if apart and ref is not None:
        out += (" " + "; ".join(f"{w.name} and {reference.name} give the same distributions in numpy, yet the server "
                                f"gave {fmt(a.percent)}% and {fmt(ref.percent)}%" for w, a in apart)
                + ": the engine's own arithmetic (its kernels multiply a quantized width's weights by activations "
                  "rounded to 8-bit blocks) moves its answer as well, so the server's figures mix what the weights' "
                  "values cost with the engine's rounding; numpy's are the weights' values alone.")
    return out


def accuracy_sentences(acc: QuantizationAccuracy, rows: list[AccuracyRow], prompt: str,
                       answers: dict[str, TopAnswer] | None = None) -> list[str]:
    """The accuracy's sentences, each chosen and filled in by the records: how each width was made, the measure, each
    width against the reference, the top token after the lesson's prompt, and the bytes each width saved for it."""
    out = [made_sentence(acc)]
    missing = [w for w in acc.widths if w.not_recomputed]
    reasons = sorted({w.not_recomputed or "" for w in missing})
    done = [w for w in acc.widths if not w.not_recomputed]
    out.append(f"KL: {acc.measure}: {sum(acc.prompt_tokens)} positions of {len(acc.prompts)} prompts "
               f"({', '.join(repr(p) for p in acc.prompts)}). Each sum is taken in float64 and rounded to float32, so "
               f"a replay on any CPU recomputes the same figures.")
    reference = next((w for w in done if w.name == acc.reference), None)
    if reference is None:
        out.append("Not recomputed: " + " ".join(reasons))
        return out
    out += [width_sentence(w, acc) for w in done if w.name != acc.reference]
    if missing:
        out.append("Not recomputed: " + ", ".join(w.name for w in missing) + ". " + " ".join(reasons))
    out.append(top_token_sentence(done, reference, prompt, bool(missing)))
    server = server_sentence(done, answers or {}, reference, prompt)
    if server:
        out.append(server)
    out += trade_sentences(done, {r.model: r for r in rows}, acc.reference, [w.name for w in missing])
    return out


def show_accuracy(page: Page, acc: QuantizationAccuracy, runs: list[ModelRun], points: list[dict], prompt: str,
                  answers: dict[str, TopAnswer] | None = None) -> None:
    """The widths of the trained model: how each was made, its size and its speed beside what it costs in accuracy."""
    info = {r.info.name: r.info for r in runs}
    decode = {p["name"]: p["median"] for p in points}
    rows = [accuracy_row(w, info[w.name], decode[w.name]) for w in acc.widths]
    page.table("quantization", f"What each width of the trained model costs in accuracy against {acc.reference}, "
                               "beside its bytes and its speed", columns(AccuracyRow), cells(rows),
               notes=accuracy_sentences(acc, rows, prompt, answers))


def show_steps(page: Page, steps: list[dict]) -> None:
    if not steps:
        return
    page.table(
        "steps", "Steps between neighbouring widths of one model", columns(StepRow), cells([step_row(st) for st in steps]),
        notes=[(f"Bytes ratio = wider ÷ narrower bytes per token; speed-up = narrower ÷ wider median tokens/s. "
                f"Followed the bytes: |ln(speed-up ÷ bytes ratio)| ≤ ln(1 + ε), effective GB/s flat; no faster: "
                f"speed-up ≤ 1 + ε; both at once: too spread to tell; otherwise faster by less than the bytes, or "
                f"faster than the bytes. ε = the larger of ±{100 * memory_bound.TOLERANCE:.0f}% and each width's own "
                f"robust spread (interquartile range ÷ median of its samples that are not outliers; bytesup.course.robust)."),
               ("These describe the speed-up against the bytes and name no verdict: a step that was faster by less "
                "than the bytes may join a width that waits on memory to one that waits on arithmetic, or two that "
                "each pay a cost the bytes do not change. The verdict per width is the decode-time model's.")],
    )


def slope_note(slope: dict) -> str:
    """The free log-log slope α (tokens/s ∝ bytes^α) in words: what −1 and 0 would mean, and where α lies from them in
    its standard errors (two of them: "within")."""
    k, se, n = slope["slope"], slope["se"], slope["n"]
    head = (f"Free log-log slope over the {n} widths beyond the cache: tokens/s ∝ bytes^α with α = {k:.3g}"
            + (f" ± {se:.2g}" if se is not None else "") + ". A slope of −1 would mean every width waits on its bytes "
            "alone (twice the bytes, half the tokens/s); a slope of 0 that the bytes do not matter (every step waits on "
            f"something else). Doubling the bytes here multiplies tokens/s by 2^α = {2 ** k:.2f}")
    if se is None or se == 0:
        return head + (": two widths give no standard error, so the slope says how they compare and nothing more."
                       if se is None else ".")
    near_one, near_zero = abs(k + 1) <= 2 * se, abs(k) <= 2 * se
    if near_one and near_zero:
        return head + ": within two standard errors of both −1 and 0, too uncertain to tell them apart."
    if near_one:
        return head + (f", within two standard errors of −1 ({abs(k + 1) / se:.1f}): the speeds are consistent with "
                       "each width waiting on its bytes.")
    if near_zero:
        return head + (f", within two standard errors of 0 ({abs(k) / se:.1f}): the speeds barely follow the bytes.")
    if k < -1:
        return head + (f", {abs(k + 1) / se:.1f} standard errors steeper than −1: tokens/s fell faster than the bytes "
                       "grew, more than reading them alone explains.")
    if k > 0:
        return head + f", {k / se:.1f} standard errors above 0: more bytes were faster, which neither term explains."
    return head + (f", {abs(k + 1) / se:.1f} standard errors from −1 and {abs(k) / se:.1f} from 0: the time per token "
                   "grows with the bytes but by less than in proportion, so part of each step does not grow with them "
                   "(the arithmetic, the fixed cost). The decode-time model below separates the parts.")


def show_fit(page: Page, analysis: dict, rows: list[FitRow], bw: dict | None, after: dict | None,
             drift: dict | None) -> None:
    """The line's bandwidth beside the run's readings; `drift` is the run's recorded drift between them, if any."""
    slope = analysis["slope"]
    notes = [("The line's bandwidth = exp(mean of ln effective GB/s) over the points used: each point weighs the "
              "same, whatever its size; the range is one standard error (the scatter between points and within each "
              "point's samples). It describes how fast those widths read; B, the rate decode's kernels read the "
              "weights at, is the decode-time model's, below.")]
    if slope:
        notes.append(slope_note(slope))
    if bw is not None:
        g = bw["gb_per_s"]
        if after is not None:
            a = after["gb_per_s"]
            drift = drift or hostbench.bandwidth_drift(g, a)
            notes.append(f"Drift of the run's bandwidth over the decode work: {g['median']:.3g} → {a['median']:.3g} GB/s "
                         f"({100 * drift['change']:+.0f}%); the two readings' ranges "
                         + ("overlap." if drift["ranges_overlap"] else
                            "do not overlap: efficiencies against the first reading carry that uncertainty."))
    page.table("bandwidth_fit", "What bandwidth did decode achieve?", columns(FitRow), cells(rows), notes=notes)


def sides_text(sides: list[Side]) -> str:
    return ", ".join(f"{s.model} ({s.bytes_per_param:.3g})" for s in sides)


def c_text(cross: Crossover) -> str:
    """c per weight type in one phrase: the types whose arithmetic the steps showed, then those it was hidden in."""
    seen = [f"{t.weight_type} {t.c_ps:.3g} ps" for t in cross.seen]
    hidden = [f"{t.weight_type} hidden under its reading (at most {t.hidden_below:.3g} ps)" for t in cross.types
              if t.hidden]
    return ", ".join([*seen, *hidden])


def crossovers_text(cross: Crossover, spread: bool = True) -> str:
    """Each seen type's crossover B × c in bytes per parameter, with the band a model of it is mixed in where
    `spread`."""
    def one(t: TypeCrossover) -> str:
        low, high = t.band
        wide = f" ({low:.3g}–{high:.3g})" if spread and high > low else ""
        return f"{t.weight_type} {t.bytes_per_param:.3g}{wide}"
    return ", ".join(one(t) for t in cross.seen) or "none (every type's arithmetic was hidden)"


BAND_WORDS = (f"the band a model of the type is mixed in: {decodetime.MARGIN:g} standard errors u of its crossover "
              "either side (u from the fits that leave one model out), or further where one of those fits puts it")


def bracketed(cross: Crossover, words: str = BAND_WORDS) -> str:
    """What the brackets of `crossovers_text` hold, where any type has a band."""
    return f" (in brackets, {words})" if any(t.band[1] > t.band[0] for t in cross.seen) else ""


def mixed_text(cross: Crossover, sides: list[Side]) -> str:
    """Each mixed model with why: its bytes per parameter, how much longer one of its two terms takes than the other,
    and what the run cannot tell that from: its type's band around the crossover, its own steps' scatter, or both."""
    def one(s: Side) -> str:
        t = cross.of(s.weight_type)
        low, high = t.band
        reasons = []
        if low <= s.bytes_per_param <= high:
            u = f" (u {t.u:.2g})" if t.u is not None else ""
            reasons.append(f"within {t.weight_type}'s band {low:.4g}–{high:.4g} around its crossover "
                           f"{t.bytes_per_param:.4g}{u}")
        if s.too_close and s.read_ms is not None and s.arithmetic_ms is not None and s.scatter_ms is not None:
            reasons.append(f"{abs(s.arithmetic_ms - s.read_ms):.2g} ms apart, no more than the {s.scatter_ms:.2g} ms "
                           f"its own steps scatter")
        if t.hidden or not reasons:
            return f"{s.model} ({s.bytes_per_param:.3g} bytes per parameter: " + (
                "; ".join(reasons) or "turned over by a fit that leaves one model out") + ")"
        longer, shorter = ("its arithmetic", "its read") if t.bytes_per_param >= s.bytes_per_param else (
            "its read", "its arithmetic")
        return (f"{s.model} ({s.bytes_per_param:.3g} bytes per parameter: {longer} takes "
                f"{100 * t.apart(s.bytes_per_param):.2g}% longer than {shorter}, " + ", and ".join(reasons) + ")")
    return "; ".join(one(s) for s in sides)


def crossover_note(cross: Crossover) -> str:
    """The crossover of each weight type in bytes per parameter, the band around it, and each model's side."""
    sides = "; ".join(f"{v} {sides_text(cross.waiting_on(v))}" for v in (decodetime.MEMORY, decodetime.COMPUTE,
                                                                          decodetime.MIXED) if cross.waiting_on(v))
    hidden = [t.weight_type for t in cross.types if t.hidden]
    return (f"The crossover, per weight type: a model reads its parameter's bytes in as long as its arithmetic takes "
            f"where W ÷ B = params × c, that is at B × c bytes per parameter with its type's c: {crossovers_text(cross)}"
            f"{bracketed(cross)}. A model storing more "
            f"bytes per parameter than its type's crossover waits on memory, one storing as many or fewer on the "
            f"arithmetic, one inside its type's band, or whose two terms differ by no more than its own steps scatter, is "
            f"mixed: its read and its arithmetic lie closer than the run can tell apart."
            + (f" {', '.join(hidden)}: every model waited on its weights, so no crossover is seen, only that it lies "
               f"below their bytes per parameter." if hidden else "")
            + f" Here (bytes per parameter): {sides}. The plot marks each crossover at the default model's parameters.")


def model_notes(rows: list[ModelExplained], terms: decodetime.Terms, ref: BandwidthReference | None,
                spark: dict[str, float], levels: tuple[int, ...], matvec: dict | None = None,
                cross: Crossover | None = None, not_held: dict[str, str] | None = None) -> list[str]:
    errors = {r.model: r.error_percent for r in rows if r.error_percent is not None}  # predicted ÷ measured − 1, %
    unheld: dict[str, list[str]] = {}
    for name, why in (not_held or {}).items():
        unheld.setdefault(why, []).append(name)
    within = [n for n, e in errors.items() if abs(e) <= 100 * decodetime.TOLERANCE]
    worst = max(errors.items(), key=lambda kv: abs(kv[1]), default=None)
    waits = {v: [r.model for r in rows if r.waits_on == v]
             for v in (decodetime.MEMORY, decodetime.COMPUTE, decodetime.MIXED)}
    notes = [
        (f"One sequence's step waits on the slower of reading the weights and doing one token's arithmetic, plus a "
         f"fixed cost per block that grows with the bytes per parameter: t₁ = L × (f + g × W ÷ params) + max(W ÷ B, params × c), "
         f"with one c per weight type (each type's kernels do their own arithmetic). Fitted on the {len(rows)} models' "
         f"median steps at P = 1 (least squares of the relative error): B = {terms.gbs:.3g} GB/s, "
         f"f = {terms.fixed_ms_per_block:.3g} ms per block and g = {terms.fixed_ms_per_bpp:.3g} ms more per block for "
         f"each byte per parameter for every model, and c per parameter "
         + (c_text(cross) if cross is not None else ", ".join(f"{k} {c:.3g} ps" for k, c in terms.arith))
         + " (the table below); the fit's columns are these terms, set against every model."),
        ("The predicted column is each model by the terms fitted on the others alone: what the model says of a "
         "model it has not seen. "
         + (f"Within ±{100 * decodetime.TOLERANCE:.0f}% of measured: {len(within)} of {len(errors)}"
            + (f"; the furthest, {worst[0]}, at {worst[1]:+.0f}%." if worst else ".")
            if errors else f"No model can be left out (at least {decodetime.MIN_FIT + 1} models, two of a weight "
                           f"type).")
         + "".join(f" Not predicted, {why}: {', '.join(names)}" + (
             (" (its c would come from its own step alone; a second model of its type in --sizes tests it)."
              if len(names) == 1 else " (the c of each would come from its own step alone; a second model of each "
                                      "type in --sizes tests it).")
             if why == decodetime.ALONE else ".") for why, names in unheld.items())),
        ("The verdict is what the step waits on beyond its fixed cost: memory-bound when reading the weights takes "
         "longer than the arithmetic, compute-bound when the arithmetic takes as long or longer, under the terms of "
         "every model and under each fit that leaves one model out. Where those fits disagree it is mixed: one "
         "model's steps would turn it over, so the run cannot tell the two terms apart. So it is where its bytes per "
         f"parameter lie within {decodetime.MARGIN:g} standard errors u of its type's crossover, u the jackknife's over "
         "the fits that leave one model out (u² = (m − 1) ÷ m × Σ (κᵢ − κ̄)² over their m crossovers): the two terms "
         "then differ by less than the run's own fits move them; and where its two terms differ by no more than its own "
         "steps scatter (the spread of its step samples times its median step): the samples cannot tell them apart, "
         "which is all that is known of the c of a model alone in its weight type. The fixed cost is paid either "
         "way and is left out: on the widths of one model only its sum with params × c is measured, so f, g and c trade against "
         "each other there. Here: "
         + "; ".join(f"{v} {', '.join(names)}" for v, names in waits.items() if names) + "."),
        ("The read and arithmetic shares overlap (they run at once), so the shares of one row add to more than "
         "100%: each says how much of the step that term alone would take."
         + (" An arithmetic left blank (" + ", ".join(r.model for r in rows if r.arithmetic_ms is None)
            + ") was hidden under the reading: every model of its weight type waited on reading its weights, so the "
              "run never saw its arithmetic, only the most it could be (the table below)."
            if any(r.arithmetic_ms is None for r in rows) else "")),
        *([crossover_note(cross)] if cross is not None else []),
    ]
    # A model with a batch line has its steps at every P of `levels`: the jump from one sequence to two, then Δt.
    lines = [(r.model, (r.step_2 or 0.0) - (r.step_1 or 0.0), r.line_b) for r in rows if r.line_b is not None]
    if lines:
        jumps = [f"{name} {jump:.3g} ms, then {dt:.3g} ms per sequence" for name, jump, dt in lines]
        dearer = all(jump > dt for _, jump, dt in lines)
        notes.append(
            f"Several sequences in one step are another regime: the weights are read once for all of them. The line "
            f"through the steps at P = {' and '.join(map(str, levels))} is step(P) = t₀ + Δt × P: slope Δt "
            f"(each further sequence) and intercept t₀. From one sequence to two the step grows by: {'; '.join(jumps)}. "
            + ("The second sequence costs more than each further one, so the one-sequence terms are not carried to "
               "batches; lesson 7's batching table measures them." if dearer else
               "Lesson 7's batching table measures batches on the default model."))
    if ref:
        notes.append(f"B is {100 * terms.gbs / ref.gbs:.0f}% of the {ref.gbs:.3g} GB/s {ref.label}, the bandwidth numpy's "
                     f"multi-threaded sum reached: B is what decode's own kernels read the weights at, and it feeds the "
                     f"model; the numpy reading is the memory's as numpy sees it.")
    if matvec is not None:
        notes.append(f"Read the way decode reads (numpy's float32 matrix-vector product over "
                     f"{matvec['bytes_per_sample'] / MB:,.0f} MB with {matvec['threads']} thread(s)): "
                     f"{matvec['gb_per_s']['median']:.3g} GB/s, so B is {100 * terms.gbs / matvec['gb_per_s']['median']:.0f}% "
                     f"of it. B feeds the model: it is fitted on the engine's own steps; both numpy readings stay "
                     f"beside it, one reading each per run.")
    notes.append(
        f"The published {published.SPARK_NAME} figures in the same terms: {PUBLISHED_BYTES / GB:g} GB ÷ "
        f"{published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s = {spark['memory_ms']:.1f} ms to read the weights of "
        f"{spark['measured_ms']:.1f} ms per token ({PUBLISHED_DECODE:g} tokens/s); the arithmetic at prefill's rate "
        f"{spark['arithmetic_ms']:.2f} ms (a lower bound: prefill's kernels are matrix-matrix); the remaining "
        f"{spark['rest_ms']:.1f} ms is the fixed cost. The step waits on memory for "
        f"{100 * spark['memory_share']:.0f}% of it: {spark_verdict(spark)}. The same rule in bytes per parameter: "
        f"prefill's rate gives {spark['arith_ps']:.2g} ps of arithmetic per parameter, so its crossover is "
        f"{published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s × {spark['arith_ps']:.2g} ps = {spark['crossover']:.2g} bytes per "
        f"parameter (a lower bound, as that arithmetic is); the specimen stores {spark['bytes_per_param']:.3g}, "
        f"{spark['bytes_per_param'] / spark['crossover']:.3g}× the crossover.")
    return notes


def show_decode_model(page: Page, names: list[str], rows: list[ModelExplained], terms: decodetime.Terms | None,
                      why_not: str, ref: BandwidthReference | None, spark: dict[str, float], levels: tuple[int, ...],
                      matvec: dict | None = None, cross: Crossover | None = None,
                      not_held: dict[str, str] | None = None) -> None:
    """Every model explained by the run's terms, and the published figures in the same terms, then c and the crossover
    of each weight type; without terms, why not."""
    if terms is None:
        page.table("decode_model", "Decode time from measured terms", columns(UnfitRow),
                   cells([UnfitRow(name, why_not) for name in names]))
        return
    show_narrowed(
        page, "decode_model", "Every model explained: reading the weights, one token's arithmetic and a fixed cost per step",
        "Every model explained, every column: the steps at each P, the batch line and each term's share",
        columns(ModelExplained), cells([*rows, spark_explained(spark)]), MODEL_SHOWN, formulas=[],
        notes=model_notes(rows, terms, ref, spark, levels, matvec, cross, not_held))
    if cross is not None:
        show_narrowed(page, "arithmetic_per_type", "One token's arithmetic per parameter c, and the crossover B × c, per "
                      "weight type", "One token's arithmetic per parameter c per weight type, every column: its rate",
                      columns(ArithmeticRow), cells(arithmetic_rows(cross)), ARITHMETIC_SHOWN,
                      notes=[(f"c is fitted per weight type, B = {terms.gbs:.3g} GB/s and f for every model. A type "
                              f"whose models all waited on reading their weights shows no arithmetic of its own: c = 0 "
                              f"fits its steps as well as any c up to the one shown, the least of its models' "
                              f"W ÷ (params × B)."),
                             (f"u: the crossover's standard error, the jackknife's over the fits that leave one model "
                              f"out (u² = (m − 1) ÷ m × Σ (κᵢ − κ̄)² over their m crossovers κᵢ). A model of the type "
                              f"storing between 'mixed from' and 'mixed to' bytes per parameter is mixed: within "
                              f"{decodetime.MARGIN:g}u of the crossover, or between the crossovers of those fits where "
                              f"they lie further out.")],
                      formulas=["One token's rate = 2 FLOPs per parameter in c picoseconds: 2000 ÷ c GFLOP/s."])


def prefill_notes(rows: list[PrefillRow], terms: decodetime.Terms, plan: PrefillPlan) -> list[str]:
    seen = [(r, r.decode_over_prefill) for r in rows if r.decode_over_prefill is not None]
    hidden = [f"{r.model} ({r.weights})" for r in rows if r.decode_over_prefill is None]
    return [
        (f"A prompt of {plan.tokens} tokens, one micro-batch, on the first model of each weight type: {plan.samples} "
         f"timed prefills after {plan.warmup} warm-up{'' if plan.warmup == 1 else 's'}, from the server's "
         f"prompt_ms; reached = 2 FLOPs per parameter × tokens/s. Prefill runs matrix-matrix kernels, each weight "
         f"read once for all {plan.tokens} tokens: the fastest arithmetic the engine shows for that weight type."),
        *([("Decode's one-token arithmetic, params × c with its weight type's c ("
            + ", ".join(f"{r.weights} {terms.c(r.weights or '?'):.3g} ps per parameter" for r, _ in seen)
            + f"), takes {min(x for _, x in seen):.2g}× ({min(seen, key=lambda e: e[1])[0].model}) to "
              f"{max(x for _, x in seen):.2g}× ({max(seen, key=lambda e: e[1])[0].model}) the time of a token of "
              f"prefill: decode's kernels (matrix-vector, one token at a time) are not prefill's, so the model fits "
              f"c on decode's own steps instead of taking prefill's rate, which would put each width's arithmetic that "
              f"many times too low.")] if seen else []),
        *([f"No decode arithmetic beside {', '.join(hidden)}: its type's c is hidden under the reading."]
          if hidden else []),
    ]


def show_prefill(page: Page, rows: list[PrefillRow], terms: decodetime.Terms | None, plan: Plan) -> None:
    """Each weight type's prefill beside decode's arithmetic (nothing for a run without prefills or without terms)."""
    if not rows or plan.prefill is None or terms is None:
        return
    show_narrowed(page, "prefill_per_width", "Prefill per weight type: the engine's fastest arithmetic, beside decode's",
                  "Prefill per weight type, every column: the ranges of the samples", columns(PrefillRow), cells(rows),
                  PREFILL_SHOWN, prefill_notes(rows, terms, plan.prefill), [])


def show_context_prediction(page: Page, sp: ContextRow, pub: SweepRow) -> None:
    """The bytes model with context, from the published point's decode and effective GB/s."""
    spec = published.SPECIMEN
    page.table(
        "bytes_model_with_context", "Decode at depth d ≈ bandwidth ÷ (weight bytes + KV bytes per token × d)",
        columns(ContextRow), cells([sp]),
        notes=[(f"The specimen has no grouped-query attention: KV = 2 × {spec['n_layer']} layers × "
                f"{published.SPECIMEN_N_HEAD_KV} KV heads × {spec['n_embd'] // spec['n_head']} "
                f"× 2 bytes = {sp.kv_bytes_per_token:,.0f} bytes per token."),
               (f"Its short-prompt decode of {pub.decode:g} tokens/s read {pub.effective:.3g} GB/s; at that rate, "
                f"after {sp.depth:,} tokens each token also reads {sp.kv_bytes_per_token * sp.depth / GB:.3g} GB "
                f"of KV cache: {sp.predicted:.1f} tokens/s predicted, {sp.published:g} published "
                f"({sp.error_percent:+.1f}%). Lesson 6 sets the same model against this run's own depths.")],
    )


def plot_shape(widths: list[decodetime.Width]) -> decodetime.Width | None:
    """The shape the plot draws the model for: the parameters and blocks most widths share (the first such on a tie)."""
    counts: dict[tuple[float, int], int] = {}
    for w in widths:
        counts[(w.n_params, w.n_layer)] = counts.get((w.n_params, w.n_layer), 0) + 1
    if not counts:
        return None
    shape = max(counts, key=lambda k: counts[k])  # the first of the most common, in the widths' order
    return next(w for w in widths if (w.n_params, w.n_layer) == shape)


def model_series(shape: decodetime.Width, cross: Crossover, widths: list[decodetime.Width], lo: float, hi: float,
                 y_range: tuple[float, float]) -> list[Series]:
    """The decode-time model's tokens/s at each width of `shape`'s parameters and blocks, each with its weight type's
    c, joined in order of bytes per token (MB); and a vertical marker at each seen weight type's crossover, n × B × c
    bytes, spanning `y_range`, where it lies between `lo` and `hi`."""
    t, n, L = cross.terms, shape.n_params, shape.n_layer
    same = sorted((w for w in widths if (w.n_params, w.n_layer) == (n, L)), key=lambda w: w.weight_bytes)
    out = [Series(label=f"decode-time model at {n / 1e6:.1f} M parameters in {L} blocks, each width with its type's c",
                  x=[w.weight_bytes / MB for w in same],
                  y=[decodetime.predict_width(t, w).tokens_per_s for w in same], style="dashed")]
    for kind in cross.seen:
        at = kind.bytes_per_param * n / MB
        if lo <= at <= hi:
            out.append(Series(label=f"{kind.weight_type}'s crossover B × c = {kind.bytes_per_param:.3g} bytes per "
                                    f"parameter ({at:,.0f} MB at {n / 1e6:.1f} M parameters)",
                              x=[at, at], y=list(y_range), style="dashed"))
    return out


def plot_decode_vs_bytes(page: Page, points: list[dict], fit: dict | None, ref: BandwidthReference | None,
                         cross: Crossover | None = None, widths: list[decodetime.Width] | None = None) -> None:
    """Tokens/s against bytes per token on log-log axes, with the line's bandwidth and the run's, and where the
    decode-time model was fitted, its prediction of each width of the shape most widths share and each weight type's
    crossover at that shape."""
    xs = [p["bytes"] / MB for p in points]
    lo, hi = min(xs) / 2, max(max(xs), PUBLISHED_BYTES / MB) * 2

    def line(gbs: float) -> list[float]:
        return [gbs * GB / (lo * MB), gbs * GB / (hi * MB)]

    mem = [p for p in points if not p["cache_resident"]]
    cached = [p for p in points if p["cache_resident"]]
    series = []
    for group, label in ((mem, "measured (median, min–max)"), (cached, "cache-resident (kept out of the line)")):
        if group:
            series.append(Series(label=label, x=[p["bytes"] / MB for p in group], y=[p["median"] for p in group],
                                 y_min=[p["min"] for p in group], y_max=[p["max"] for p in group], style="points"))
    if fit:
        series.append(Series(label=f"the line's bandwidth: {fit['gbs']:.3g} GB/s ÷ bytes", x=[lo, hi],
                             y=line(fit["gbs"]), style="dashed"))
    if ref:
        series.append(Series(label=f"{ref.gbs:.3g} GB/s ÷ bytes ({ref.label})", x=[lo, hi], y=line(ref.gbs),
                             style="dashed"))
    series.append(Series(label=PUBLISHED_LABEL, x=[PUBLISHED_BYTES / MB], y=[PUBLISHED_DECODE], style="points"))
    shape = plot_shape(widths or [])
    if cross is not None and shape is not None:
        ys = [y for s in series for y in (*s.y, *(s.y_min or []), *(s.y_max or []))]
        series += model_series(shape, cross, widths or [], lo, hi, (min(ys), max(ys)))
    page.plot("decode_vs_bytes", "Decode tokens/s against bytes per token", "bytes per token (MB)", "decode tokens/s",
              series, log_x=True, log_y=True)


# --- the conclusion: the page's last words, from the run's numbers ----------------------------------

def nearest(sides: list[Side], cross: Crossover, largest: bool) -> list[Side]:
    """The sides nearest their type's crossover from one side: those sharing the largest (or smallest) ratio of their
    bytes per parameter to it, of the types whose crossover was seen (every other where none was)."""
    def ratio(s: Side) -> float:
        kind = cross.of(s.weight_type)
        return math.inf if kind.hidden else s.bytes_per_param / kind.bytes_per_param

    finite = [s for s in sides if math.isfinite(ratio(s))]
    key = ratio if finite else (lambda s: s.bytes_per_param)
    edge = (max if largest else min)(key(s) for s in finite or sides)
    return [s for s in finite or sides if math.isclose(key(s), edge, rel_tol=1e-9)]


def spark_sentence(spark: dict[str, float], prefill: list[PrefillRow]) -> str:
    verdict = spark_verdict(spark)
    times = spark["bytes_per_param"] / spark["crossover"]
    out = (f"The published {published.SPARK_NAME} figures in the same terms: {published.SPARK_BANDWIDTH_GB_PER_S:g} GB/s "
           f"reads a byte in {1e3 / published.SPARK_BANDWIDTH_GB_PER_S:.3g} ps and prefill's rate gives "
           f"{spark['arith_ps']:.2g} ps of arithmetic per parameter (a lower bound: decode's kernels are slower), a "
           f"crossover of {spark['crossover']:.2g} bytes per parameter; the specimen's Q8_0 stores "
           f"{spark['bytes_per_param']:.3g}, {times:.3g}× the crossover, so its decode is {verdict}, reading the weights "
           f"taking {100 * spark['memory_share']:.0f}% of its step.")
    if verdict == decodetime.MEMORY:
        out += (f" It would wait on the arithmetic only if decode's arithmetic per token were more than {times:.3g}× "
                f"prefill's")
        ratios = [r.decode_over_prefill for r in prefill if r.decode_over_prefill is not None]
        if ratios:
            lo, hi = min(ratios), max(ratios)
            out += f"; on this machine it was {lo:.2g}–{hi:.2g}×" if hi > lo else f"; on this machine it was {lo:.2g}×"
        out += "."
    return out


def tested_sentence(rows: list[ModelExplained]) -> str:
    """How far the verdicts can be trusted: how many models the terms of the others predicted within the tolerance."""
    errors = [(r.model, r.error_percent) for r in rows if r.error_percent is not None]
    tol = 100 * decodetime.TOLERANCE
    if not errors:
        return (f"Of these {len(rows)} models none can be left out to test the model on one it has not seen (each "
                f"needs another of its weight type), so these verdicts are untested.")
    within = [n for n, e in errors if abs(e) <= tol]
    untested = [r.model for r in rows if r.error_percent is None]
    alone = (f"{', '.join(untested)} could not be left out: no other model shares {'its' if len(untested) == 1 else 'their'}"
             f" weight type" if untested else "")
    if len(within) == len(errors):
        return (f"The model behind these verdicts predicted each of the {len(errors)} models it could leave out within "
                f"±{tol:.0f}% from the others' terms{f' ({alone})' if alone else ''}.")
    name, worst = max(errors, key=lambda ne: abs(ne[1]))
    return (f"The model behind these verdicts predicted {len(within)} of {len(errors)} models within ±{tol:.0f}% from "
            f"the others' terms (the furthest, {name}, at {worst:+.0f}%{f'; {alone}' if alone else ''}): they are "
            f"this run's best reading, not a settled one.")


def possessive(sides: list[Side]) -> str:
    """'its' for one model, 'their' for several."""
    return "its" if len(sides) == 1 else "their"


def conclusion(cross: Crossover | None, why_not: str, spark: dict[str, float],
               prefill: list[PrefillRow] | None = None, rows: list[ModelExplained] | None = None) -> list[str]:
    """The capstone's conclusion, every sentence chosen by the numbers: where this machine's decode waits on memory
    and where on the arithmetic, and why, and how well the model behind it predicted models it had not seen (`rows`,
    when given); the published figures in the same terms; what would move a width across."""
    prefill = prefill or []
    if cross is None:
        return [(f"Conclusion: this run cannot say where its decode waits on memory and where on the arithmetic: the "
                 f"decode-time model could not be fitted ({why_not or 'no steps'}). Measure at least "
                 f"{decodetime.MIN_FIT + 1} models (three terms, and one model left out to test them), two of each "
                 f"weight type."),
                spark_sentence(spark, prefill)]
    t = cross.terms
    out = [(f"Conclusion. On this machine reading one byte takes 1 ÷ B = {cross.byte_ps:.3g} ps (B = {t.gbs:.3g} GB/s) "
            f"and one parameter's arithmetic c depends on its weight type's kernels: {c_text(cross)}. So reading a "
            f"parameter's weights takes as long as its arithmetic at B × c = {crossovers_text(cross)} bytes per "
            f"parameter{bracketed(cross)}.")]
    memory, compute, mixed = (cross.waiting_on(v) for v in (decodetime.MEMORY, decodetime.COMPUTE, decodetime.MIXED))
    out.append(f"Decode waits on memory where a model stores more bytes per parameter than its type's crossover, "
               f"clear of its band and of its own steps' scatter: "
               f"{sides_text(memory)}; {possessive(memory)} weights take longer to read than {possessive(memory)} "
               f"arithmetic takes." if memory else "No model measured here waits on memory under every fit.")
    out.append(f"It waits on the arithmetic where a model stores fewer bytes per parameter than its type's crossover, "
               f"clear of its band and of its own steps' scatter: {sides_text(compute)}; {possessive(compute)} weights "
               f"arrive before the arithmetic on them is done." if compute else
               "No model measured here waits on the arithmetic under every fit.")
    if mixed:
        out.append(f"Mixed, where this run cannot tell which of the two terms is the larger: "
                   f"{mixed_text(cross, mixed)}.")
    out.append(f"Whichever term a step waits on, it also pays f = {t.fixed_ms_per_block:.3g} ms per block, and "
               f"g = {t.fixed_ms_per_bpp:.3g} ms more per block for each byte a parameter takes (the graph's "
               f"operations and the threads' waits).")
    if rows is not None:
        out.append(tested_sentence(rows))
    out.append(spark_sentence(spark, prefill))
    if memory:
        near = nearest(memory, cross, largest=False)
        s, kind = near[0], cross.of(near[0].weight_type)
        names = f"{', '.join(n.model for n in near)} ({s.weight_type}, {s.bytes_per_param:.3g} bytes per parameter)"
        if kind.hidden:
            its, it = ("its", "it") if len(near) == 1 else ("their", "them")
            out.append(f"{names} never showed {its} arithmetic: {its} type's c is at most {kind.hidden_below:.3g} ps, "
                       f"so this run cannot say what would move {it} onto the arithmetic beyond a narrower width.")
        else:
            need = decodetime.bandwidth_to_cross(s.bytes_per_param, t, s.weight_type)
            out.append(f"To move {names} onto the arithmetic: store it in {kind.bytes_per_param:.3g} bytes per "
                       f"parameter or fewer at its type's c, or read memory at {need:.3g} GB/s or more "
                       f"({need / t.gbs:.2g}× B, with c as it is).")
    if compute:
        near = nearest(compute, cross, largest=True)
        s, kind = near[0], cross.of(near[0].weight_type)
        need = decodetime.arithmetic_to_cross(s.bytes_per_param, t)
        out.append(f"To move {', '.join(n.model for n in near)} ({s.weight_type}, {s.bytes_per_param:.3g} bytes per "
                   f"parameter) onto memory: arithmetic under {need:.3g} ps per parameter ({kind.c_ps / need:.3g}× "
                   f"as fast as its type's {kind.c_ps:.3g} ps: more cores, or kernels that do more per cycle), or a "
                   f"weight type whose kernels are that fast at more bytes per parameter.")
    if mixed:
        out.append(f"For {', '.join(s.model for s in mixed)}, more samples, or models of other shapes, would narrow "
                   f"what the run cannot tell and show which side {'it lies' if len(mixed) == 1 else 'they lie'} on.")
    return out


def show_conclusion(page: Page, cross: Crossover | None, why_not: str, spark: dict[str, float],
                    prefill: list[PrefillRow] | None = None, rows: list[ModelExplained] | None = None) -> None:
    """The conclusion as the page's last words (its notes, after the plot)."""
    for sentence in conclusion(cross, why_not, spark, prefill, rows):
        page.note(sentence)


# --- what this run shows: the page's opening, from the run's numbers ----------------------------------

def shows(cross: Crossover | None, why_not: str, points: list[dict]) -> str:
    """What the run shows: the crossover B × c of each weight type and each model's verdict against its type's, with
    its bytes per parameter; where no model was fitted, why not and what the sweep measured (each model's median decode
    and the effective GB/s it reads at)."""
    if cross is None:
        measured = "; ".join(f"{p['name']} {p['median']:.3g} tokens/s at {p['bytes'] / MB:.3g} MB per token "
                             f"({p['bytes'] * p['median'] / GB:.3g} GB/s read)" for p in points)
        return (f"The decode-time model could not be fitted ({why_not or 'no steps'}), so this run does not say which "
                f"term its decode waits on. It measured {measured}.")
    t = cross.terms
    text = (f"On this machine reading a parameter's weights takes as long as its arithmetic at B × c = "
            f"{crossovers_text(cross)} bytes per parameter by weight type{bracketed(cross, 'where a model is mixed')}, "
            f"with "
            f"B = {t.gbs:.3g} GB/s and c per parameter {c_text(cross)}, fitted on {len(cross.sides)} models.")
    said = {decodetime.MEMORY: ("waits", "wait", "on memory"), decodetime.COMPUTE: ("waits", "wait", "on the arithmetic"),
            decodetime.MIXED: ("is", "are", "mixed (the two terms too close to tell)")}
    verdicts = [f"{sides_text(on)} {one if len(on) == 1 else many} {words}"
                for v, (one, many, words) in said.items() if (on := cross.waiting_on(v))]
    return text + f" In bytes per parameter: {'; '.join(verdicts)}."
