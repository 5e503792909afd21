"""Lesson 5b's view: the records of its figures, one per figure (each field a column of its table), and the tables,
notes and plot that show them.

- `Cost`: one model alone, the cost of one of its passes (the table `speculative_costs`);
- `Measured`: the target alone or a speculative configuration, measured (`speculative_measured`);
- `Arithmetic`: a configuration's tokens per pass and speed-up beside the arithmetic (`speculative_vs_arithmetic`);
- `StreamRow`: one streamed request on the client's clock, in bursts (`speculative_client_clock`).

The lesson's arithmetic builds these records; this module renders them and records nothing."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bytesup.course import clientclock, speculative
from bytesup.course.ceiling import Spread
from bytesup.course.speculative import Stream
from bytesup.store.plans.lesson05b import Plan
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns, spread
from bytesup.store.views import show_narrowed
from bytesup.store.views.page import Page

# The columns each table shows in the main text; every column is in the full table, under Details.
COST_SHOWN = ["model", "role", "bytes per token", "decode median", "one pass", "÷ target pass", "weights read"]
MEASURED_SHOWN = ["speculation", "draft", "draft length", "prompt", "decode median", "acceptance", "speed-up",
                  "same tokens as plain"]
ARITHMETIC_SHOWN = ["configuration", "acceptance a", "k", "expected tokens per pass", "measured tokens per pass",
                    "predicted speed-up", "measured speed-up", "measured ÷ predicted"]
STREAM_SHOWN = ["configuration", "prompt", "tokens", "ITL p50", "ITL p99", "bursts", "target passes", "largest burst"]
FORMULA_AGREES = 0.05  # measured tokens per pass within 5% of 1 + a + … + a^k: "agrees"
# Where no speculative server can be started here: the arithmetic on illustrative numbers.
ILLUSTRATION_DRAFT, ILLUSTRATION_ACCEPT, ILLUSTRATION_TOKENS = 4, (0.6, 0.8), 128


# --- the records: one per figure ------------------------------------------------------------------

@dataclass(frozen=True)
class Cost:
    """One model alone: its decode speed, hence the cost of one of its passes, and the weights it reads per second."""
    model: str = column("model")
    role: str = column("role")
    weights: str | None = column("weights")
    bytes_per_token: int = column("bytes per token", "bytes")
    decode: Spread = spread("decode median", unit="tokens/s")
    one_pass: float = column("one pass", "ms")
    over_target: float = column("÷ target pass", "{target}")
    weights_read: float = column("weights read", "GB/s")


@dataclass(frozen=True)
class Measured:
    """The target alone (speculation "none": the reference) or a speculative configuration, on one prompt."""
    target: str = column("target")
    speculation: str = column("speculation", "--spec-type")
    draft: str | None = column("draft")
    draft_length: int | None = column("draft length", "max")
    prompt: str = column("prompt")
    decode: Spread = spread("decode median", unit="tokens/s")
    drafted: int | None = column("drafted", "tokens")
    accepted: int | None = column("accepted", "tokens")
    acceptance: float | None = column("acceptance")  # None: the server reported no draft counters
    tokens_per_pass: float = column("tokens per target pass")
    speedup: float = column("speed-up", "×")
    same_tokens: str = column("same tokens as plain")

    @property
    def label(self) -> str:
        """The configuration's server: spec-<target>-draft-<draft>-k<length>, spec-<target>-<type>, spec-<target>."""
        if self.speculation == "none":
            return f"spec-{self.target}"
        return (f"spec-{self.target}-draft-{self.draft}-k{self.draft_length}" if self.draft
                else f"spec-{self.target}-{self.speculation}")


@dataclass(frozen=True)
class Arithmetic:
    """A configuration's measured tokens per pass and speed-up beside 1 + a + … + a^k and the predicted speed-up."""
    label: str = column("configuration")
    target: str = column("target")
    acceptance: float | None = column("acceptance a")
    k: int = column("k", "draft length")
    expected: float | None = column("expected tokens per pass", "1 + a + … + a^k")
    tokens_per_pass: float = column("measured tokens per pass")
    over_expected: float | None = column("measured ÷ expected")
    draft_cost: float = column("draft pass ÷ target pass")
    drafted_per_pass: float = column("drafted per target pass")
    check_cost: float = column("check ÷ target pass")
    ideal: float = column("ideal speed-up", "×")
    predicted: float = column("predicted speed-up", "×")
    measured: float = column("measured speed-up", "×")
    over_predicted: float | None = column("measured ÷ predicted")


@dataclass(frozen=True)
class StreamRow:
    """One streamed request: the gaps between its tokens, and its bursts beside the server's target passes."""
    configuration: str = column("configuration")
    prompt: str = column("prompt")
    tokens: int = column("tokens")
    itl_p50: float = column("ITL p50", "ms")
    itl_p90: float = column("ITL p90", "ms")
    itl_p99: float = column("ITL p99", "ms")
    inside_bursts: int = column("gaps inside a burst")
    bursts: int = column("bursts", "client")
    target_passes: int = column("target passes", "server")
    largest_burst: int = column("largest burst", "tokens")


# --- the tables -------------------------------------------------------------------------------------

def shows(rows: list[Measured]) -> str:
    """What the run shows: the target's plain speed, the best draft model's and the n-gram speculation's speed-ups
    with their acceptance, and whether every speculative run gave the plain run's tokens."""
    plain = [r for r in rows if r.speculation == "none"]
    runs = [r for r in rows if r.speculation != "none"]
    text = (f"Alone, {plain[0].target} decodes {plain[0].decode.median:.3g} tokens/s on the {plain[0].prompt} prompt."
            if plain else "")
    drafts = [r for r in runs if r.speculation == "draft-simple" and r.acceptance is not None]
    if drafts:
        best = max(drafts, key=lambda r: r.speedup)
        text += (f" {'With' if best.speedup >= 1 else 'Even with the best draft here,'} {best.draft} drafting up to "
                 f"{best.draft_length} tokens, the target kept "
                 f"{100 * (best.acceptance or 0):.3g}% of the drafted tokens and decoding went "
                 + (f"{best.speedup:.3g}× as fast (the best draft here)." if best.speedup >= 1 else
                    f"at {best.speedup:.3g}× the plain speed: slower, the draft's passes cost more than they saved."))
    ngram = [r for r in runs if r.speculation == "ngram-simple" and r.acceptance is not None]
    if ngram:
        r = ngram[0]
        text += (f" Drafting from the text itself (n-grams) on the {r.prompt} prompt, it kept {100 * (r.acceptance or 0):.3g}% "
                 + (f"and went {r.speedup:.3g}× as fast." if r.speedup >= 1 else f"and went at {r.speedup:.3g}× the plain speed."))
    if not runs:
        return text + " No speculative configuration ran."
    mismatched = [r for r in runs if r.same_tokens != "identical"]
    text += (" Every speculative run gave exactly the plain run's tokens." if not mismatched else
             f" {len(mismatched)} of {len(runs)} speculative runs gave other tokens than the plain run: speculation "
             "should never change them.")
    return text.strip()


def plot_speedups(page: Page, rows: list[Measured]) -> bool:
    """Each speculative configuration's speed-up against its tokens per target pass, a series per draft (and one for
    n-grams), beside the plain speed (1 ×); False, and no plot, where no speculative configuration ran."""
    runs = [r for r in rows if r.speculation != "none"]
    if not runs:
        return False
    kinds = list(dict.fromkeys((r.speculation, r.draft) for r in runs))
    top = max(r.tokens_per_pass for r in runs)
    series = [Series(label="plain decode (1 ×)", x=[1.0, top], y=[1.0, 1.0], style="dashed"),
              Series(label="drafts at no cost, a check as one pass: speed-up = tokens per pass", x=[1.0, top],
                     y=[1.0, top], style="line")]
    for spec_type, draft in kinds:
        mine = [r for r in runs if (r.speculation, r.draft) == (spec_type, draft)]
        series.append(Series(label=f"draft {draft}" if draft else spec_type, x=[r.tokens_per_pass for r in mine],
                             y=[r.speedup for r in mine], style="points"))
    page.plot("speculative_speedups", "Speed-up against tokens per target pass", "tokens per target pass",
              "speed-up over plain decode (×)", series)
    return True


def not_measured(why: str) -> str:
    """What a run that could not speculate shows: nothing measured, and why."""
    return f"This run measured no speculative decoding: {why}. The page shows the arithmetic on illustrative numbers only."


def show_illustration(page: Page) -> None:
    """The arithmetic alone, on illustrative numbers: where no speculative server could run here."""
    n, k = ILLUSTRATION_TOKENS, ILLUSTRATION_DRAFT
    for a in ILLUSTRATION_ACCEPT:
        per_pass = speculative.expected_tokens_per_pass(k, a)
        passes = math.ceil((n - 1) / per_pass)
        page.note(
            f"Speculative decoding (illustrative, not run): a draft model guesses {k} tokens and the big "
            f"model checks them in one pass; if each guess is accepted with probability {a:g}, a pass yields "
            f"{per_pass:.3g} tokens on average, so {n} tokens need about {passes + 1} big-model passes instead of {n}, "
            f"before the draft model's own time.")


def draft_cost_note(draft: Cost, target: Cost) -> str:
    """Bytes against time: a draft reading a share of the target's bytes but costing a larger share of its
    time is not limited by memory reads (its weights read per second stay below the target's)."""
    share_bytes, share_time = draft.bytes_per_token / target.bytes_per_token, draft.one_pass / target.one_pass
    head = (f"{draft.model} reads {share_bytes:.2g} of the target's bytes per token and costs {share_time:.2g} of its "
            f"pass, reading {draft.weights_read:.3g} GB/s against the target's {target.weights_read:.3g} GB/s")
    if share_time > share_bytes * 1.2 and draft.weights_read < target.weights_read:
        return head + ": memory is not what limits it; unpacking quantized blocks is work too."
    return head + "."


def show_costs(page: Page, plan: Plan, costs: list[Cost], batches: dict[str, tuple[int, float]]) -> None:
    target = costs[0]
    drafts = [c for c in costs if c.role == "draft"]
    (batch_n, batch_ms), (long_n, long_ms) = batches[plan.short], batches[plan.repetitive]
    show_narrowed(
        page, "speculative_costs", f"The cost of one pass: each model alone, {plan.n_predict} tokens after {plan.short!r}",
        "The cost of one pass, every column", [(name, unit.format(target=plan.targets[0])) for name, unit in columns(Cost)],
        cells(costs), COST_SHOWN, formulas=[],
        notes=[
            "One pass of a model costs 1 ÷ its decode speed. A draft pass costs "
            + ", ".join(f"{c.one_pass / target.one_pass:.2g} of a target pass ({c.model})" for c in drafts) + ".",
            *[draft_cost_note(c, target) for c in drafts],
            (f"The target's prompt passes take several tokens at once, as checking a draft does: {batch_n} tokens "
             f"in {batch_ms:.3g} ms ({batch_ms / target.one_pass:.3g} × one decode pass), {long_n} tokens in "
             f"{long_ms:.3g} ms ({long_ms / target.one_pass:.3g} ×). A check of b tokens is costed on the line "
             f"through these two (never below one decode pass)."),
        ],
    )


def show_measured(page: Page, plan: Plan, rows: list[Measured]) -> None:
    runs = [r for r in rows if r.speculation != "none"]
    mismatched = [r.label for r in runs if r.same_tokens != "identical"]
    no_counters = [r.label for r in runs if r.acceptance is None]
    drafts = [r for r in runs if r.speculation == "draft-simple"]
    best = max(drafts, key=lambda r: r.speedup) if drafts else None
    ngram = [r for r in runs if r.speculation == "ngram-simple"]
    formulas = [
        (f"All at temperature 0 with seed {plan.seed}, {plan.n_predict} tokens, {plan.rounds} repeat(s) each, one server "
         f"per configuration (llama-server's flags: --spec-type, --spec-draft-model, --spec-draft-n-max). Acceptance = "
         f"draft_n_accepted ÷ draft_n; tokens per target pass = generated ÷ (generated − accepted); speed-up = "
         f"decode median ÷ the same target's median without a draft on the same prompt."),
    ]
    notes = [
        (f"All at temperature 0 with seed {plan.seed}, {plan.n_predict} tokens, {plan.rounds} repeat(s) each, one server "
         "per configuration. The acceptance is the share of the drafted tokens that the target kept; the speed-up is "
         "the decode speed over the same target's without a draft, on the same prompt (the formulas are under Details)."),
        ("Check: every speculative run produced exactly the tokens of the plain run." if not mismatched else
         f"Check FAILED: {', '.join(mismatched)} produced other tokens than the plain run."),
    ]
    if best is not None:
        notes.append(f"The best draft here, {best.draft} at k = {best.draft_length}: {100 * best.acceptance:.3g}% accepted, "
                     f"{best.tokens_per_pass:.3g} tokens per target pass, {best.speedup:.3g} × the plain decode speed."
                     if best.acceptance is not None else f"{best.draft} at k = {best.draft_length} reported no draft counters.")
    if ngram:
        r = ngram[0]
        notes.append(f"n-gram speculation drafts from the text itself, at no model cost: on the repeating text "
                     f"{r.drafted} tokens drafted, {r.accepted} accepted, {r.tokens_per_pass:.3g} "
                     f"tokens per target pass, {r.speedup:.3g} × plain.")
    if no_counters:
        notes.append(f"No draft counters (draft_n) in the answers of {', '.join(no_counters)}: nothing was drafted.")
    show_narrowed(page, "speculative_measured",
                  "Speculative decoding, measured: target alone, with a draft model, with n-grams",
                  "Speculative decoding, measured, every column", columns(Measured), cells(rows), MEASURED_SHOWN,
                  notes, formulas)


def show_arithmetic(page: Page, plan: Plan, rows: list[Arithmetic]) -> None:
    def named(r: Arithmetic) -> str:
        return r.label if len(plan.targets) == 1 else f"{r.label} on {r.target}"

    rated = [r for r in rows if r.over_expected is not None]
    over = [r for r in rated if (r.over_expected or 0) > 1 + FORMULA_AGREES]
    under = [r for r in rated if (r.over_expected or 0) < 1 - FORMULA_AGREES]
    agree = [r for r in rated if abs((r.over_expected or 0) - 1) <= FORMULA_AGREES]
    formulas = [
        ("Expected tokens per pass 1 + a + … + a^k takes the measured acceptance a and the longest draft k, "
         "and supposes each drafted token is accepted independently with the same a."),
        ("Predicted speed-up = tokens per pass × target pass ÷ (drafted per pass × draft pass + check): the "
         "draft's passes are paid in full. With the check costed as one target pass (a memory-bound target "
         "reads its weights once for the whole batch) it is the ideal; with the check costed from the target's "
         "measured prompt passes it is the prediction for this host."),
    ]
    notes = [
        ("The expected tokens per pass suppose that the target keeps each drafted token with the same chance a, the "
         "measured acceptance, whatever became of the tokens before it, up to the longest draft k (the formula is "
         "under Details)."),
    ]
    if agree:
        notes.append(f"Within {100 * FORMULA_AGREES:g}% of the formula: {', '.join(named(r) for r in agree)}.")
    if over:
        notes.append(
            f"Measured above the formula ({', '.join(named(r) for r in over)}): acceptances are not independent. "
            "Where the text is predictable the draft agrees for many tokens in a row, and where it is not it "
            "misses at once; the same a spread evenly over every position gives fewer long runs.")
    if under:
        notes.append(
            f"Measured below the formula ({', '.join(named(r) for r in under)}): not every pass has a full draft. "
            "Drafts stop at the tokens left to generate, and n-gram drafts exist only where the last tokens "
            "were seen before and are as long as what followed them then.")
    notes.append(
        "The predicted speed-up is the tokens a round yields over the time the round takes: every draft pass, paid "
        "in full, and the target's check of the draft, costed from the target's measured prompt passes (the "
        "formula is under Details).")
    scored = [r for r in rows if r.over_predicted is not None]
    if scored:
        lo = min(scored, key=lambda r: r.over_predicted or 0)
        hi = max(scored, key=lambda r: r.over_predicted or 0)
        notes.append(
            f"Measured ÷ predicted runs from {lo.over_predicted:.3g} ({named(lo)}) to {hi.over_predicted:.3g} ({named(hi)}). "
            f"What the prediction leaves out: the draft also reads the accepted tokens before drafting again, each round "
            f"samples and compares on the host, and a check pass of b tokens is not exactly a prompt pass of b tokens.")
    drafted = [r for r in rows if r.draft_cost > 0]
    if drafted:
        ratios = sorted({round(r.draft_cost, 3) for r in drafted})
        checks = [r.check_cost for r in drafted]
        notes.append(
            f"When speculation pays: each drafted token costs r = draft pass ÷ target pass "
            f"({', '.join(f'{c:.2g}' for c in ratios)} here) and the check costs v target passes (1 for a "
            f"memory-bound target; {min(checks):.3g}–{max(checks):.3g} here), so a round that drafts k tokens pays "
            f"only if it yields more than k × r + v tokens. It pays most with a draft much cheaper than the target "
            f"(r near 0, as n-grams are) and a target that is memory-bound, whose pass costs about the same for "
            f"one token or several because the weights are read once either way (lesson 8 gives that verdict per "
            f"width). A draft that is the same small model, only quantized, costs a sizeable share of a target "
            f"pass on a few CPU cores, so even a high acceptance buys less than the tokens per pass suggest.")
    show_narrowed(page, "speculative_vs_arithmetic", "Measured against the arithmetic: tokens per pass and speed-up",
                  "Measured against the arithmetic, every column", columns(Arithmetic), cells(rows), ARITHMETIC_SHOWN,
                  notes, formulas)


def show_client_clock(page: Page, plan: Plan, streams: list[Stream], rows: list[StreamRow], together: float) -> None:
    plain = [r for r in streams if r.label in {f"spec-{t}" for t in plan.targets}]
    runs = [r for r in streams if r not in plain]
    matched = [r for r in runs if len(r.bursts) == r.server_passes]
    notes = [
        (f"One streamed request per configuration, {plan.n_predict} tokens at temperature 0, after the measured rounds. "
         f"Tokens arriving less than {together:g} × the plain target's median gap after the one before count as "
         f"arriving together (a burst); the server's target passes are predicted_n − draft_n_accepted."),
        (f"Bursts seen on the client's clock equal the server's target passes in {len(matched)} of {len(runs)} "
         f"speculative runs" + (f" (not: {', '.join(r.label.removeprefix('spec-') for r in runs if r not in matched)})"
                                if len(matched) < len(runs) else "") + ": each burst is one pass of the target model."),
    ]
    if plain and runs:
        best = max(runs, key=lambda r: r.client.n / len(r.bursts))
        p = next(r for r in plain if r.prompt == best.prompt)
        inside = [g for g in best.client.itl_ms if g < best.threshold_ms]
        between = [g for g in best.client.itl_ms if g >= best.threshold_ms]
        plain_p50, best_p50 = (clientclock.percentile(r.client.itl_ms, 50) for r in (p, best))
        notes.append(
            f"From outside, speculation is tokens in bursts. On the {plan.prompt_name(best.prompt)} prompt the plain "
            f"target's median gap is {plain_p50:.3g} ms (one pass per token); {best.label.removeprefix('spec-')} gave "
            f"{best.client.n} tokens in {len(best.bursts)} bursts, up to {max(best.bursts)} at once, with gaps of "
            f"{statistics.median(inside) if inside else math.nan:.3g} ms inside a burst (the delivery of the next event) and "
            f"{statistics.median(between) if between else math.nan:.3g} ms between bursts (a target pass), median. Its median "
            f"ITL, {best_p50:.3g} ms, would make it {plain_p50 / best_p50:.3g} × faster per token; its end-to-end time, "
            f"{best.client.end_to_end_ms:.4g} ms against {p.client.end_to_end_ms:.4g} ms plain, is the speed-up a user "
            f"waits for. A median ITL does not describe a speculative server; the bursts and the time between them do.")
    show_narrowed(page, "speculative_client_clock", "Speculative decoding from outside: the gaps between streamed tokens",
                  "Speculative decoding from outside, every column", columns(StreamRow), cells(rows), STREAM_SHOWN,
                  notes, [])
    short = [r for r in streams if r.prompt == plan.short]
    page.plot("speculative_client_clock", f"Arrival of each token, {plan.n_predict} tokens after {plan.short!r}",
              "token index", "arrival (ms after sending)",
              [Series(label=r.label.removeprefix("spec-"), x=[float(i) for i in range(1, r.client.n + 1)], y=r.client.times_ms,
                      style="steps") for r in short])
