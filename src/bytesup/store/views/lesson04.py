"""Lesson 4's view: its tables, notes and plot, rendered from the records its arithmetic returned.

It records nothing and measures nothing: each function writes to the lesson's page (`Page`: `table`, `note`,
`plot`), and a figure's record is shown by its declared columns (`by_columns`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


from bytesup.course import ceiling, formulas, published
from bytesup.course.ceiling import Ceiling, Efficiency, Spread, TokenWork, token_work
from bytesup.course.nexttoken import BAND, LastOnly, SoftmaxExample, Speeds, ThirdClock, ThroughTheLayers, largest_gap
from bytesup.host import hostbench
from bytesup.llama import build
from bytesup.store.facts.lesson04 import FilePass, NumpyOutcome, NumpyToken, PromptAgreement, ShownTable, ShownToken
from bytesup.store.plans.lesson04 import BENCH_REPETITIONS, N_PREDICT
from bytesup.store.render import percent
from bytesup.store.results import Series
from bytesup.store.rows import cells, column, columns, spread
from bytesup.store.views import show_narrowed
from bytesup.store.views.page import Page, by_columns, stopped
from bytesup.units import GB, MiB

# Published figures (bytesup.course.published: lesson 4 on the DGX Spark, its specimen model, lesson 7's
# H100 ridge point). References only: every comparison with them is computed.
PUB: published.Lesson4Figures = published.LESSON4
SPECIMEN: dict[str, Any] = published.SPECIMEN
PUB_HOST = published.SPARK_NAME
PUB_MODEL = published.SPECIMEN_NAME
SOFTMAX_SHIFT = 100.0

# What ggml's CPU kernels round the activations to before a dot product with weights of each type (the
# vec_dot_type of type_traits_cpu in ggml-cpu.c); numpy keeps float32 throughout.
ACTIVATIONS_ROUNDED_TO = {"Q4_0": "Q8_0 (8 bits)", "Q4_1": "Q8_1 (8 bits)", "Q5_0": "Q8_0 (8 bits)", "Q5_1": "Q8_1 (8 bits)",
                          "Q8_0": "Q8_0 (8 bits)", "F16": "float16", "BF16": "bfloat16", "F32": None}
TOP_COLUMNS = ["rank", "token", "probability", "server_probability", "logprob"]
AGREEMENT_COLUMNS = ["prompt", "n_tokens", "server_token", "server_p", "numpy_token", "numpy_p", "top_agrees",
                     "set_agrees", "largest_abs_dp", "at_token", "kl_shared", "shared"]
NUMPY_COLUMNS = ["rank", "token", "probability", "server_probability", "difference"]
# The columns each wide table shows in the main text; every column is in the full table, under Details.
AGREEMENT_SHOWN = ["prompt", "server's top token", "server", "numpy's top token", "numpy", "same top token",
                   "largest |Δp|", "at"]
PHASE_SHOWN = ["phase", "unit", "median", "samples", f"published ({PUB_HOST})"]
CEILING_SHOWN = ["quantity", "unit", "median", f"published ({PUB_HOST})"]
CLOCK_SHOWN = ["phase", "server median", "llama-bench median", "server ÷ llama-bench", "verdict", "samples needed"]
KL_FORMULA = ("KL over the shared tokens = KL(server ‖ numpy) = Σ p·ln(p/q) over the ids both list, p the server's "
              "probability and q numpy's, each side renormalized over those ids.")


@dataclass(frozen=True)
class SoftmaxRow:
    logit: float = column("logit")
    exp: float = column("e^logit")
    probability: float = column("probability")
    shifted: float = column(f"probability after adding {SOFTMAX_SHIFT:g}")


def softmax_rows(sm: SoftmaxExample) -> list[SoftmaxRow]:
    return [SoftmaxRow(z, e, p, q) for z, e, p, q in zip(sm.logits, sm.exp, sm.probs, sm.probs_shifted, strict=True)]


@dataclass(frozen=True)
class QuantityRow:
    quantity: str = column("quantity")
    unit: str = column("unit")
    this_model: float = column("this model")
    pub: float = column(f"published ({PUB_MODEL})")


def cost_quantities(cost: TokenWork) -> list[QuantityRow]:
    """One pass of this model beside the published specimen's."""
    pub = token_work(SPECIMEN["n_params"], SPECIMEN["file_bytes"])
    return [QuantityRow("parameters", "", cost.params, pub.params),
            QuantityRow("bytes read (every weight once)", "bytes", cost.bytes, pub.bytes),
            QuantityRow("FLOPs per token (2 per parameter)", "FLOP", cost.flops, pub.flops),
            QuantityRow("FLOPs per byte read", "FLOP/byte", cost.flops_per_byte, pub.flops_per_byte)]


@dataclass(frozen=True)
class PhaseRow:
    phase: str = column("phase")
    unit: str = column("unit")
    spread: Spread = spread()
    samples: int | None = column("samples")
    pub: float | str = column(f"published ({PUB_HOST})")


def phase_rows(sp: Speeds) -> list[PhaseRow]:
    pub_prefill = ", ".join(f"{v:,.0f}" for v in PUB["prefill_tokens_per_s"])
    return [PhaseRow(f"prefill, {sp.prompt_n:,}-token prompt", "tokens/s", Spread.of(sp.prefill), len(sp.prefill),
                     pub_prefill),
            PhaseRow(f"decode after the short prompt ({sp.short_prompt_n} tokens)", "tokens/s",
                     Spread.of(sp.decode_short), len(sp.decode_short), PUB["decode_short_tokens_per_s"]),
            PhaseRow(f"decode after the {sp.prompt_n:,}-token prompt", "tokens/s", Spread.of(sp.decode_long),
                     len(sp.decode_long), PUB["decode_long_tokens_per_s"]),
            PhaseRow("prefill per token ÷ decode (short prompt)", "×",
                     Spread(sp.ratio, min(sp.prefill) / max(sp.decode_short), max(sp.prefill) / min(sp.decode_short)),
                     None, PUB["prefill_decode_ratio"])]


@dataclass(frozen=True)
class CeilingRow:
    quantity: str = column("quantity")
    unit: str = column("unit")
    spread: Spread = spread()
    pub: float = column(f"published ({PUB_HOST})")


def ceiling_rows(ceil: Ceiling, eff: Efficiency) -> list[CeilingRow]:
    """Bandwidth, bytes per token, the ceiling and decode, beside the published figures; the efficiencies where
    they are computed (this host's where its bandwidth bounds decode, and at --bandwidth-gbs)."""
    per_token = ceil.bytes_per_token
    pub_ceiling, pub_eff = PUB["ceiling_tokens_per_s"], PUB["decode_efficiency_percent"]
    rows = [CeilingRow("read bandwidth, CPU of this host", "GB/s", Spread.of(ceil.bandwidth_gbs),
                       published.SPARK_BANDWIDTH_GB_PER_S),
            CeilingRow("bytes read per token (every weight once)", "bytes", Spread(per_token, per_token, per_token),
                       SPECIMEN["file_bytes"]),
            CeilingRow("ceiling, CPU of this host: bandwidth ÷ bytes per token", "tokens/s", Spread.of(ceil.ceilings),
                       pub_ceiling),
            CeilingRow("decode after the short prompt", "tokens/s", Spread.of(eff.decode), PUB["decode_short_tokens_per_s"])]
    if eff.host is not None:
        rows.append(CeilingRow("decode ÷ ceiling, CPU of this host", "%", Spread.of(eff.host), pub_eff))
    if ceil.given_ceiling is not None and eff.given is not None:
        g = ceil.given_ceiling
        rows.append(CeilingRow(f"ceiling at {ceil.given_gbs:g} GB/s (--bandwidth-gbs)", "tokens/s", Spread(g, g, g), pub_ceiling))
        rows.append(CeilingRow(f"decode ÷ ceiling at {ceil.given_gbs:g} GB/s", "%", Spread.of(eff.given), pub_eff))
    return rows


def show_softmax(page: Page, sm: SoftmaxExample) -> None:
    page.table("softmax", f"Softmax worked on {sm.logits}",
              columns(SoftmaxRow), cells(softmax_rows(sm)),
              notes=[f"The probabilities add up to {sm.sum:.15g}.",
                     f"Adding {sm.shift:g} to every logit changes them by at most {sm.shift_max_abs_difference:.1e}: only the gaps matter.",
                     (f"A gap of {sm.gap:g} between the first two logits gives p0/p1 = {sm.p0_over_p1:.6f}, and e = {sm.e:.6f}; "
                     f"a gap of 5 would be a factor of e^5 = {sm.e_to_5:.1f}.")])


def top_notes(t: ShownTable, n_vocab: int | None) -> list[str]:
    top = t.tokens[0]
    share = t.share
    gap = largest_gap(t.tokens)
    n = len(t.tokens)
    rest = f"; the other {n_vocab - n:,} vocabulary entries share the remaining {percent(1 - share)}." if n_vocab else "."
    return [f"The top {n} cover {percent(share)} of the probability" + rest,
            (f"The top token {top.token} has logprob {top.logprob:.4f}: e^{top.logprob:.4f} = {top.probability:.4g}, "
            f"that is {percent(top.probability or 0.0)}."),
            f"At temperature 0 the server generated {t.generated}, "
            + ("the rank-1 token." if t.generated == top.token else "which is not the rank-1 token listed."),
            ("Both probabilities come from the server, in two answers: e^logprob is the logprob it gives at temperature 0, "
             "raised to e here; server's prob is the probability it gives itself (its prob, asked for separately: "
             "temperature 1.0 alone, no cuts, the full softmax), "
             + (f"for {t.paired} of these {n} tokens. The largest |server's prob − e^logprob| is {gap[0]:.2g} "
                f"(relative: {gap[1]:.2g})." if gap else "for none of these tokens."))]


def show_top_tokens(page: Page, t: ShownTable, n_vocab: int | None) -> None:
    page.table(t.name or "", f"The eight most probable next tokens after the prompt {t.prompt!r} ({t.prompt_n} tokens)",
               *by_columns(ShownToken, TOP_COLUMNS, t.tokens), notes=top_notes(t, n_vocab))


def show_numpy_vs_server(page: Page, name: str, n: FilePass, server_label: str, prompt_n: list[int],
                         more_notes: tuple[str, ...] = ()) -> None:
    agreements = list(n.prompts.values())
    agree, sets, k = sum(a.top_agrees for a in agreements), sum(a.set_agrees for a in agreements), len(agreements)
    worst = max(agreements, key=lambda a: a.largest_abs_dp)
    notes = [(f"numpy ran lesson 4's fifteen lines on the bytes of {n.file} ({n.weight_type} weights): each tensor "
             "dequantized with gguf when its block runs, the token ids from the server's /tokenize."),
             f"The top token agrees on {agree} of {k} prompts, the top-eight set on {sets} of {k}.",
             (f"The largest gap between numpy's probability and the server's, over the server's eight, is "
              f"{100 * worst.largest_abs_dp:.2g} points, at {worst.at_token} after "
              f"{worst.prompt!r}: numpy {100 * (worst.at_numpy or 0.0):.4g}% against the server's {100 * (worst.at_server or 0.0):.4g}%."),
             ("KL over the shared tokens (under Details) says how differently the two split the probability of the "
              "tokens both list: 0 when they split it alike, larger the more they differ.")]
    notes += [f"The server evaluated {pn} tokens for {a.prompt!r}, /tokenize gave {a.n_tokens}."
              for a, pn in zip(agreements, prompt_n, strict=True) if pn != a.n_tokens]
    notes += more_notes
    title = f"The same forward pass in numpy, from the file's bytes, against {server_label}"
    show_narrowed(page, name, title, f"{title}, every column",
                  *by_columns(PromptAgreement, AGREEMENT_COLUMNS, agreements, {"prompt": repr}), AGREEMENT_SHOWN,
                  notes, [KL_FORMULA])


def show_numpy_top8(page: Page, a: PromptAgreement) -> None:
    numpy: list[NumpyToken] = a.numpy or []
    page.table(f"numpy_{a.name}", f"numpy's eight most probable next tokens after {a.prompt!r}, beside the server's",
               *by_columns(NumpyToken, NUMPY_COLUMNS, numpy),
               notes=[(f"{sum(t.server_probability is not None for t in numpy)} of numpy's eight are among the server's eight; "
                      f"numpy's eight hold {percent(sum(t.probability for t in numpy))} of its probability.")])


def rounding_notes(served: FilePass, f32: FilePass, same: float) -> tuple[str, ...]:
    """Where the gap comes from: the same weights at two widths (numpy's probabilities on them differ by at most
    `same`), against the server on each."""
    gap_served = max(a.largest_abs_dp for a in served.prompts.values())
    gap_f32 = max(a.largest_abs_dp for a in f32.prompts.values())
    rounded = ACTIVATIONS_ROUNDED_TO.get(served.weight_type)
    notes = [(f"numpy gives the same probabilities on {served.file} and {f32.file} (largest difference {same:.2g}): the f32 "
             "file holds exactly the dequantized values of the narrower one."),
             f"Against the server, the largest |Δp| is {gap_served:.2g} on {served.file} and {gap_f32:.2g} on {f32.file}"
             + (f", {gap_served / gap_f32:.0f}× smaller." if gap_f32 > 0 and gap_served > gap_f32 else ".")]
    if rounded:
        notes.append(f"On {served.weight_type} weights the engine's CPU kernels round each activation vector to {rounded} before "
                     "its dot products with the weights; on F32 weights they keep float32 activations, as numpy does. "
                     f"What is left on {f32.file} comes from the engine's float32 sums (numpy sums in float64, then "
                     "rounds to float32) and its f16 KV cache.")
    return tuple(notes)


def show_last_only(page: Page, last: list[LastOnly], prompts: dict[str, str]) -> None:
    first = last[0]
    spec_v, spec_d = SPECIMEN["n_vocab"], SPECIMEN["n_embd"]
    page.table("last_position_only", "Keep only the last position: the final norm and the output matrix on all N positions or on the last",
              *by_columns(LastOnly, list(LastOnly.COLUMNS), last, {"name": lambda name: repr(prompts[name])}),
              notes=[(f"Lines 4 and 5 read one position's vector and make {first.n_vocab:,} logits with a {first.n_vocab:,} × "
                      f"{first.n_embd:,} matvec: 2 × {first.n_vocab:,} × {first.n_embd:,} = {first.flops_last:,} FLOPs per position."),
                     (f"The last row of the all-positions product differs from the last position alone by at most "
                      f"{max(x.max_abs_logit_difference for x in last):.2g} in any logit (the two products add in another "
                      "order): the same answer, with the other N − 1 rows thrown away."),
                     (f"For {PUB_MODEL} (vocabulary {spec_v:,}, width {spec_d:,}) each position left out saves "
                      f"2 × {spec_v:,} × {spec_d:,} = {2 * spec_v * spec_d:,} FLOPs.")])


LAYER_COLUMNS = [("prompt", ""), ("final top token", ""), ("rank after block 1", ""), ("p after block 1", "%"),
                 ("ranks first from block", ""), ("p after the last block", "%")]


def show_through_the_layers(page: Page, layers: list[ThroughTheLayers], prompts: dict[str, str]) -> None:
    n_blocks = len(layers[0].ranks)
    columns = [("block", "")]
    for t in layers:
        columns += [(f"rank of {t.token}", ""), (f"p of {t.token}", "%")]
    rows = [[b + 1, *[v for t in layers for v in (t.ranks[b], 100 * t.probabilities[b])]] for b in range(n_blocks)]
    notes = []
    for t in layers:
        start = t.on_top_from
        notes.append(f"After {prompts[t.name]!r}, {t.token} "
                     + ("ranks first only after the last block" if start == n_blocks else
                        f"ranks first from block {start} of {n_blocks} on" if start else "never ranks first")
                     + f"; its probability is {percent(t.probabilities[0])} after block 1 and "
                     f"{percent(t.probabilities[-1])} after block {n_blocks}.")
    notes.append("Each row applies the final norm and the output matrix (lines 4 and 5) to the last position as it "
                 "leaves that block; the last row is the pass's own answer.")
    page.table("answer_through_the_layers_main", "The answer through the layers: where the final top token stands after "
               "the first block and from which block on it ranks first", LAYER_COLUMNS,
               [[repr(prompts[t.name]), t.token, t.ranks[0], 100 * t.probabilities[0], t.on_top_from,
                 100 * t.probabilities[-1]] for t in layers], notes=notes)
    page.table("answer_through_the_layers", "The answer through the layers: the final top token's rank and probability "
               "after each block", columns, rows).detail = True
    page.plot("answer_through_the_layers", "The final top token's probability after each block", "block", "probability (%)",
             [Series(label=f"{t.token} after {prompts[t.name]!r}", x=[float(b + 1) for b in range(n_blocks)],
                     y=[100 * p for p in t.probabilities]) for t in layers], log_y=True)


def show_numpy_pass(page: Page, done: NumpyOutcome | None, prompts: dict[str, str]) -> None:
    """numpy's pass against the server, and against the f32 width; keeping only the last position; the answer
    through the layers. Or a note: why not (None: a run recorded before the pass)."""
    if done is None:
        return page.note("This run was recorded before lesson 4 computed the forward pass in numpy, so it is not "
                         "recomputed here.")
    if done.served is None:
        return page.note(done.why_not or "")
    show_numpy_vs_server(page, "numpy_vs_server", done.served, "the server", done.prompt_n)
    for a in done.served.prompts.values():
        show_numpy_top8(page, a)
    if done.f32_missing is not None:
        page.note(done.f32_missing)
    elif done.f32 is not None and done.same is not None:
        show_numpy_vs_server(page, "numpy_vs_server_f32", done.f32, f"a server on the f32 width ({done.f32.file})",
                             done.f32_prompt_n, rounding_notes(done.served, done.f32, done.same))
    show_last_only(page, done.last, prompts)
    show_through_the_layers(page, done.layers, prompts)
    plot_numpy_vs_server(page, done)


def numpy_series(done: NumpyOutcome) -> list[Series]:
    """Per file, numpy's probability (%) of each of its eight tokens the server listed too, against the server's."""
    series = []
    for part in (done.served, done.f32):
        if part is None:
            continue
        pairs = [(100 * t.server_probability, 100 * t.probability) for a in part.prompts.values() for t in a.numpy or []
                 if t.server_probability is not None]
        if pairs:
            series.append(Series(label=f"{part.file} ({part.weight_type} weights)", x=[x for x, _ in pairs],
                                 y=[y for _, y in pairs], style="points"))
    return series


def plot_numpy_vs_server(page: Page, done: NumpyOutcome) -> None:
    """numpy's probability of each of its eight tokens against the server's, where the server listed it, one series
    per file, beside the line where they are equal (log axes)."""
    series = numpy_series(done)
    if not series:
        return
    values = [v for s in series for v in (*s.x, *s.y)]
    lo, hi = min(values), max(values)
    series.append(Series(label="numpy = server", x=[lo, hi], y=[lo, hi], style="dashed"))
    page.plot("numpy_vs_server", "numpy's probability of each next token against the server's", "the server's probability (%)",
              "numpy's probability (%)", series, log_x=True, log_y=True)


def show_cost(page: Page, cost: TokenWork, n_vocab: int | None) -> None:
    ridge = published.H100["ridge_flops_per_byte"]
    intensity = cost.flops_per_byte
    page.table("cost_of_one_pass", "What one forward pass costs", columns(QuantityRow), cells(cost_quantities(cost)),
              notes=[f"2 × {cost.params:,} parameters = {cost.flops:,.0f} FLOPs per token, {intensity:.2f} per byte read"
                     + (f": {ridge / intensity:.0f}× below the {ridge:g} FLOP/byte an H100 needs to keep its arithmetic "
                        "units busy (published ridge point, lesson 7), so decode waits on memory."
                        if intensity < ridge else
                        f": at or above the {ridge:g} FLOP/byte of the H100's published ridge point (lesson 7)."),
                     f"One pass ends in {n_vocab:,} logits, one per vocabulary entry; softmax turns them into the probabilities above."])


def ratio_note(sp: Speeds, batching: dict[str, Any]) -> str:
    pub_ratio = PUB["prefill_decode_ratio"]
    if sp.ratio <= 1:
        return (f"Prefill processed the prompt at {sp.ratio:.2f}× the per-token speed of decode: slower, not faster "
                f"(published: about {pub_ratio:.0f}× faster).")
    reads = formulas.prefill_weight_reads(sp.prompt_n, batching["n_ubatch"])
    return (f"Prefill processed the prompt {sp.ratio:.1f}× faster per token than decode produced new tokens "
            f"(published: about {pub_ratio:.0f}× faster): prefill multiplies the weights by micro-batches "
            f"of up to n_ubatch = {batching['n_ubatch']:,} tokens ({batching['source']}), so it read every "
            f"weight ceil({sp.prompt_n:,} ÷ {batching['n_ubatch']:,}) = {reads} time(s) for {sp.prompt_n:,} tokens, "
            f"about {sp.prompt_n / reads:,.0f} tokens per read; decode reads every weight again for each token.")


def long_note(sp: Speeds) -> str:
    short, long = sp.decode_short, sp.decode_long
    text = (f"Decode after the long prompt ran at {statistics.median(long) / statistics.median(short):.1%} of its speed "
            f"after the short one (published: {PUB['decode_long_tokens_per_s'] / PUB['decode_short_tokens_per_s']:.1%})")
    if max(long) < min(short):
        return text + ("; every sample was slower than every short-prompt sample, beyond the spread: the weights are the "
                       "same, but each new token's attention reads the keys and values of every earlier position (lesson 6).")
    if min(long) > max(short):
        return text + "; every sample was faster than every short-prompt sample: the longer context did not slow decode measurably here."
    return text + (f"; the samples overlap ({min(long):,.1f}–{max(long):,.1f} against "
                   f"{min(short):,.1f}–{max(short):,.1f} tokens/s), so the difference is within the spread.")


def show_prefill_decode(page: Page, sp: Speeds, n_ctx: int, n_long: int, cost: TokenWork | None,
                        server_flags: dict[str, Any] | None, long_stopped: tuple[Any, Any] | None = None) -> None:
    """The two phases' table; `long_stopped`: what stopped the long prompt's requests and the plan's rule (None: the
    plan times `repeat` of them)."""
    batching = formulas.batch_sizes(server_flags)
    p_med, d_med = statistics.median(sp.prefill), statistics.median(sp.decode_short)
    notes = [ratio_note(sp, batching), long_note(sp),
             (f"Each request decoded {N_PREDICT} tokens at temperature 0 with end-of-text ignored, cache_prompt false; "
             f"decode speed counts the {N_PREDICT - 1} passes after the first token, whose time belongs to the prompt. "
             f"The context holds {n_ctx:,} tokens; the long prompt is {n_long:,} of them.")]
    if long_stopped is not None:
        notes.append(stopped("The long prompt", *long_stopped) + " Its median prefill and the median decode after it "
                     "both count.")
    if cost is not None:
        notes.append(f"Counting two FLOPs per parameter, prefill did {p_med * cost.flops / 1e9:,.2f} GFLOP/s of weight arithmetic "
                     f"and decode {d_med * cost.flops / 1e9:,.2f} GFLOP/s: the same weights, used for many tokens at once "
                     "or one at a time.")
    title = f"Prefill of a {sp.prompt_n:,}-token prompt versus decode, from the server's timings"
    show_narrowed(page, "prefill_vs_decode", title, f"{title}, with each one's lowest and highest sample",
                  columns(PhaseRow), cells(phase_rows(sp)), PHASE_SHOWN, notes,
                  [("The ratio's lowest and highest pair the extreme samples: the slowest prefill ÷ the fastest decode, "
                    "the fastest prefill ÷ the slowest decode.")])


def turns_text(turns: tuple[str, ...], warmup_tokens: int | None) -> str:
    """When llama-bench ran: "before (after its own warm-up run), between and after", or "before (after a 32-token
    prefill as its warm-up) and after"."""
    warm = "its own warm-up run" if warmup_tokens is None else f"a {warmup_tokens}-token prefill as its warm-up"
    named = [f"{turns[0]} (after {warm})", *turns[1:]]
    return ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]


def show_third_clock(page: Page, in_process: list[dict[str, Any]] | None, clocks: list[ThirdClock] | None,
                     turns: tuple[str, ...] = ("before", "between", "after"), warmup_tokens: int | None = None) -> None:
    """The server's timings beside llama.cpp in process (llama-bench) at the plan's `turns`, or one line on how to
    get it."""
    if in_process is None:
        return  # a run recorded before this clock: shown as it was
    if clocks is None:
        why = next((t.get("why") for t in in_process if not t.get("available")), "")
        page.note(f"llama-bench, llama.cpp in process, was not run beside the server ({why}); `bash "
                 f"{build.BUILD_SCRIPT}` builds it once, and the next run sets it beside the server's timings.")
        return
    threads = in_process[0].get("threads")
    title = "Three clocks: the server's timings beside llama.cpp in process (llama-bench)"
    show_narrowed(page, "third_clock", title, f"{title}, every column",
                  *by_columns(ThirdClock, list(ThirdClock.COLUMNS), clocks), CLOCK_SHOWN,
                  notes=[(f"llama-bench ran {BENCH_REPETITIONS} repetition{'s' if BENCH_REPETITIONS > 1 else ''} "
                      f"{turns_text(turns, warmup_tokens)} the timed requests "
                     f"({len(clocks[0].bench)} samples a phase), on the same file with {threads} threads, `-p` the long "
                     f"prompt's length and `-n {N_PREDICT}`: no HTTP, no slot, no sampling. Its build is the native one "
                     "(scripts/build_llama_server.sh), which may not be the server's engine."),
                     (f"The server's own work (HTTP, its slot, sampling) should cost at most ±{BAND:.0%} against "
                      "llama.cpp in process: the verdict says whether the ratio lies within that band, outside it, or "
                      "cannot tell yet, from the ratio's low and high (the medians' own spread). The samples needed are "
                      "how many each clock would need for low and high to end on one side of the band's edge; the "
                      "spread of a median shrinks with the square root of its samples.")],
                  formulas=[("Ratio low and high = ratio ∓ √(x_server² ÷ n_server + x_bench² ÷ n_bench), x_server and x_bench "
                             "each clock's (max − min) ÷ median; samples needed of each clock ≥ (x_server² + x_bench²) ÷ "
                             f"({BAND:.0%} − |ratio − 1|)².")])


def show_decode_vs_ceiling(page: Page, ceil: Ceiling, eff: Efficiency, reading: dict[str, Any], reason: str) -> None:
    per_token = ceil.bytes_per_token
    spark_bw, pub_bytes = published.SPARK_BANDWIDTH_GB_PER_S, SPECIMEN["file_bytes"]
    pub_ceiling, pub_decode, pub_eff = PUB["ceiling_tokens_per_s"], PUB["decode_short_tokens_per_s"], PUB["decode_efficiency_percent"]
    notes = []
    if eff.host is not None:
        effs = eff.host
        median_eff = statistics.median(effs)
        notes.append(f"Decode ran at {statistics.median(eff.decode):,.1f} tokens/s, {median_eff:.3g}% of the "
                     f"{ceil.median:,.1f} tokens/s that "
                     f"{ceil.bandwidth.median:,.1f} GB/s allows for {per_token / GB:.4g} GB per token "
                     f"(samples: {min(effs):.3g}–{max(effs):.3g}%); {reason}.")
        if median_eff > 100:
            notes.append(f"Decode beat the ceiling: the server runs on this CPU, and {per_token / MiB:.1f} MiB of "
                         "weights is small enough for part of it to stay in the CPU caches, which are faster than the "
                         "memory the bandwidth test streams from.")
    else:
        notes.append(f"This host's CPU memory bandwidth does not bound this server's decode: {reason}. The CPU "
                     "rows are for reference only; decode ÷ ceiling is "
                     + ("computed against --bandwidth-gbs only." if ceil.given_gbs else
                        "not computed (pass --bandwidth-gbs with the bandwidth of the memory that feeds decode)."))
    if ceil.given_ceiling is not None and eff.given is not None:
        g, geffs = ceil.given_ceiling, eff.given
        notes.append(f"At the given {ceil.given_gbs:g} GB/s (--bandwidth-gbs) the ceiling is {g:,.1f} tokens/s, and decode "
                     f"reached {statistics.median(geffs):.3g}% of it (samples: {min(geffs):.3g}–{max(geffs):.3g}%).")
    notes.append(f"Published ({PUB_HOST}, {PUB_MODEL}): {spark_bw:g} GB/s ÷ {pub_bytes / GB:g} GB = "
                 f"{ceiling.ceiling_at(spark_bw, pub_bytes):.1f} tokens/s (published: about "
                 f"{pub_ceiling:.0f}); {pub_decode:g} ÷ {pub_ceiling:.0f} = {100 * pub_decode / pub_ceiling:.0f}% "
                 f"(published: {pub_eff:.0f}%). Those figures assume {spark_bw:g} GB/s; compare with them through --bandwidth-gbs.")
    notes.append(f"Bandwidth: {hostbench.describe_reading(reading)}; ceilings come from each sample.")
    title = "Decode against the bandwidth ceiling of lesson 1"
    show_narrowed(page, "decode_vs_ceiling", title, f"{title}, with each one's lowest and highest sample",
                  columns(CeilingRow), cells(ceiling_rows(ceil, eff)), CEILING_SHOWN, notes,
                  [("Ceiling = bandwidth × 1e9 ÷ bytes per token, one per bandwidth sample; decode ÷ ceiling = each "
                    "decode sample ÷ the median ceiling × 100.")])



# --- the speeds, plotted, and what this run shows -------------------------------------------------------

def plot_speeds(page: Page, sp: Speeds, ceil: Ceiling | None, eff: Efficiency | None) -> None:
    """Each timed request's prefill and decode speed (log y), beside the bandwidth ceiling where one is computed."""
    series = [Series(label=label, x=[float(k) for k in range(1, len(ys) + 1)], y=list(ys), style="points")
              for label, ys in ((f"prefill, {sp.prompt_n:,}-token prompt", sp.prefill),
                                (f"decode after the short prompt ({sp.short_prompt_n} tokens)", sp.decode_short),
                                (f"decode after the {sp.prompt_n:,}-token prompt", sp.decode_long))]
    n = float(max(len(sp.prefill), len(sp.decode_short), len(sp.decode_long)))
    if ceil is not None and eff is not None and eff.host is not None:
        series.append(Series(label=f"decode's ceiling: this host's {ceil.bandwidth.median:,.3g} GB/s ÷ bytes per token",
                             x=[1.0, n], y=[ceil.median, ceil.median], style="dashed"))
    if ceil is not None and ceil.given_ceiling is not None:
        series.append(Series(label=f"decode's ceiling at {ceil.given_gbs:g} GB/s (--bandwidth-gbs)", x=[1.0, n],
                             y=[ceil.given_ceiling, ceil.given_ceiling], style="dashed"))
    page.plot("prefill_and_decode", "Prefill and decode speed of each timed request, against the bandwidth ceiling",
              "timed request", "tokens/s", series, log_y=True)


def shows(tables: list[ShownTable], done: NumpyOutcome | None, sp: Speeds, ceil: Ceiling | None,
          eff: Efficiency | None) -> tuple[str, str | None]:
    """What the run shows, and the plot that shows it: the first prompt's top token, then the numpy pass against the
    server where it was computed (plot numpy_vs_server, where numpy's eight and the server's share a token); where it
    was not, prefill and decode against the bandwidth ceiling (plot prefill_and_decode). Only what the numbers say."""
    first = tables[0]
    top = first.tokens[0]
    opening = f"After {first.prompt!r} the model gives {top.token} {percent(top.probability or 0.0)}."
    if done is not None and done.served is not None and first.name in done.served.prompts:
        plot = "numpy_vs_server" if numpy_series(done) else None
        return opening + " " + numpy_shows(done, done.served.prompts[first.name], top.token), plot
    return " ".join([opening, speeds_shows(sp), *ceiling_shows(ceil, eff)]), "prefill_and_decode"


def numpy_shows(done: NumpyOutcome, first: PromptAgreement, server_token: str) -> str:
    """The numpy pass against the server in one or two sentences: its answer to the first prompt, on how many prompts
    its top token is the server's, its largest gap; then the f32 width's, where it ran."""
    assert done.served is not None
    agreements = list(done.served.prompts.values())
    agree, k = sum(a.top_agrees for a in agreements), len(agreements)
    gap = max(a.largest_abs_dp for a in agreements)
    gives = (f"gives {first.numpy_token} {percent(first.numpy_p or 0.0)}" if first.top_agrees else
             f"gives {first.numpy_token} {percent(first.numpy_p or 0.0)} first, not {server_token}")
    same = f"all {k} prompts" if agree == k else f"only {agree} of {k} prompts"
    text = (f"The same forward pass in numpy from the file's bytes ({done.served.weight_type} weights) {gives} and "
            f"agrees with the server's top token on {same}; over the server's eight most probable tokens the two "
            f"differ by at most {100 * gap:.2g} points.")
    if done.f32 is None:
        return text
    f32 = list(done.f32.prompts.values())
    gap32, agree32 = max(a.largest_abs_dp for a in f32), sum(a.top_agrees for a in f32)
    where = "falls to" if gap32 < gap else "is"
    return text + (f" Against a server on the f32 width, where the engine rounds no activation, the largest difference "
                   f"{where} {100 * gap32:.2g} points" + (", with the same top token on every prompt." if agree32 == len(f32)
                                                             else f", with the same top token on {agree32} of {len(f32)} prompts."))


def speeds_shows(sp: Speeds) -> str:
    prefill, decode = statistics.median(sp.prefill), statistics.median(sp.decode_short)
    head = (f"Prefill read the {sp.prompt_n:,}-token prompt at {prefill:,.1f} tokens/s and decode after the short prompt "
            f"made {decode:,.1f} tokens/s (medians of {len(sp.prefill)} and {len(sp.decode_short)} requests): ")
    if sp.ratio > 1:
        return head + f"prefill was {sp.ratio:.1f}× faster per token."
    return head + f"prefill was no faster per token ({sp.ratio:.2f}×)."


def ceiling_shows(ceil: Ceiling | None, eff: Efficiency | None) -> list[str]:
    """Decode against the ceiling, in one sentence: this host's where its bandwidth bounds the server, else the given
    one's; none where neither was computed."""
    if ceil is None or eff is None:
        return []
    per_token = f"{ceil.bytes_per_token / GB:.3g} GB per token"
    if eff.host is not None:
        share = statistics.median(eff.host)
        limit = f"{ceil.median:,.1f} tokens/s that this host's {ceil.bandwidth.median:.3g} GB/s of memory reads allow for {per_token}"
    elif eff.given is not None and ceil.given_ceiling is not None:
        share = statistics.median(eff.given)
        limit = f"{ceil.given_ceiling:,.1f} tokens/s that the given {ceil.given_gbs:g} GB/s allows for {per_token}"
    else:
        return ["This host's memory bandwidth does not bound the server's decode, so no ceiling is set against it."]
    if share > 100:
        return [f"Decode ran above the {limit}: {share:.3g}% of it."]
    return [f"Decode reached {share:.3g}% of the {limit}."]
