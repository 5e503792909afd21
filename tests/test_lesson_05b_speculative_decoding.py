"""Lesson 5b replayed from its recorded run: every speculative figure recomputed from the raw answers of the
servers it started, the streamed tokens in bursts, and the lesson's pieces on hand-made answers."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from bytesup.course import speculative
from bytesup.course.ceiling import Spread
from bytesup.store.plans.lesson05b import REPETITIVE, SHORT, current
from bytesup.store.views import lesson05b

from test_lesson_05_generating_text import _final_timings, _token_events

LESSON = "05b_speculative_decoding"
PLAN = current(2)  # the plan of the recorded run: two rounds, the short and the repeating prompt


def table(result, name):
    t = result.table(name)
    return [c.name + (f" ({c.unit})" if c.unit else "") for c in t.columns], t.rows


# --- speculative decoding, on servers the lesson started --------------------------------------------

def _by_server(exchanges) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for e in exchanges:
        if e["server"].startswith("spec-") and e["path"] == "/completion" and "stream" not in e:
            found.setdefault(e["server"], []).append(e)
    return found


def _decode(timings: dict) -> float:
    return 1000.0 * (timings["predicted_n"] - 1) / timings["predicted_ms"]


def test_speculative_requests_are_greedy_and_pinned(exchanges):
    spec = [e for answers in _by_server(exchanges).values() for e in answers]
    assert spec
    for e in spec:
        req = e["request"]
        assert req["temperature"] == 0 and req["seed"] is not None and req["cache_prompt"] is False
        assert req["ignore_eos"] is True and req["return_tokens"] is True


def test_speculative_client_clock_comes_from_the_recorded_streams(result, exchanges, lesson):
    """Bursts counted from the recorded arrival times with the lesson's threshold, beside the server's
    target passes (predicted_n − draft_n_accepted) of the same streamed request."""
    from bytesup.llama.timed import PINNED
    streams = {(e["server"], e["request"]["prompt"]): e for e in exchanges if "stream" in e and e["server"].startswith("spec-")}
    _, rows = table(result, "speculative_client_clock")
    assert len(rows) == len(streams) == 7  # the target alone on two prompts, four drafts, n-grams
    prompts = {"short": SHORT, "repetitive": REPETITIVE}
    for label, prompt, n, p50, p90, p99, inside, bursts, passes, largest in rows:
        e = streams[(f"spec-{label}", prompts[prompt])]
        assert {k: e["request"][k] for k in PINNED} == {**PINNED, "seed": PLAN.seed} and e["request"]["stream"] is True
        gaps = np.diff([at for _, at in _token_events(e)])
        plain_gaps = np.diff([at for _, at in _token_events(streams[(f"spec-{PLAN.targets[0]}", prompts[prompt])])])
        threshold = lesson.TOGETHER * float(np.median(plain_gaps))
        assert n == len(gaps) + 1 == PLAN.n_predict
        assert (p50, p90, p99) == pytest.approx(tuple(float(np.percentile(gaps, q)) for q in (50, 90, 99)))
        assert inside == int((gaps < threshold).sum()) and bursts == n - inside
        t = _final_timings(e)
        assert passes == t["predicted_n"] - t.get("draft_n_accepted", 0)
        assert largest >= 1 and (largest == 1) == (inside == 0)


def test_speculative_table_comes_from_the_recorded_counters(result, exchanges, lesson):
    """Drafted, accepted, acceptance, tokens per target pass, speed-up and the equality check,
    recomputed from the raw answers of each server."""
    _, rows = table(result, "speculative_measured")
    answers = _by_server(exchanges)
    prompts = {"short": SHORT, "repetitive": REPETITIVE}
    for target, kind, draft, k, prompt, median, lo, hi, drafted, accepted, acceptance, per_pass, speedup, same in rows:
        plain = [e for e in answers[f"spec-{target}"] if e["request"]["prompt"] == prompts[prompt]]
        plain_speed = statistics.median(_decode(e["response"]["timings"]) for e in plain)
        if kind == "none":
            assert median == pytest.approx(plain_speed) and speedup == 1 and per_pass == 1
            continue
        label = f"spec-{target}-draft-{draft}-k{k}" if draft else f"spec-{target}-{kind}"
        mine = answers[label]
        timings = [e["response"]["timings"] for e in mine]
        assert drafted == sum(t.get("draft_n", 0) for t in timings)
        assert accepted == sum(t.get("draft_n_accepted", 0) for t in timings)
        assert acceptance == pytest.approx(accepted / drafted)
        generated = sum(t["predicted_n"] for t in timings)
        assert per_pass == pytest.approx(generated / (generated - accepted))
        speeds = [_decode(t) for t in timings]
        assert (median, lo, hi) == pytest.approx((statistics.median(speeds), min(speeds), max(speeds)))
        assert speedup == pytest.approx(median / plain_speed)
        identical = all(e["response"]["tokens"] == plain[0]["response"]["tokens"] for e in mine)
        assert (same == "identical") == identical


def test_speculative_output_equals_plain_output(result):
    """The point of the section: at temperature 0 speculation changes the speed, not the text."""
    _, rows = table(result, "speculative_measured")
    assert [r[13] for r in rows if r[1] != "none"] and all(r[13] == "identical" for r in rows if r[1] != "none")
    assert any(r[9] for r in rows if r[1] != "none")          # something was drafted and accepted


def test_speculative_arithmetic_beside_the_measurement(result, lesson):
    _, rows = table(result, "speculative_vs_arithmetic")
    assert len(rows) == len(PLAN.targets) * (len(PLAN.drafts) * len(PLAN.draft_lengths) + 1)
    for (_label, _target, a, k, expected, measured, ratio, cost, drafted, check, ideal, predicted, speedup,
         measured_over_predicted) in rows:
        assert expected == pytest.approx(speculative.expected_tokens_per_pass(k, a))
        assert ratio == pytest.approx(measured / expected)
        assert ideal == pytest.approx(measured / (drafted * cost + 1))
        assert predicted == pytest.approx(measured / (drafted * cost + check))
        assert check >= 1 and predicted <= ideal
        assert measured_over_predicted == pytest.approx(speedup / predicted)


# --- speculative records by hand ------------------------------------------------------------------

def test_drafted_per_pass_by_hand(lesson):
    # 10 generated, 6 of them accepted drafts: 10 − 6 = 4 target passes; 8 drafted ÷ 4 = 2 per pass.
    assert speculative.Counts(generated=10, drafted=8, accepted=6, reported=True).drafted_per_pass == 2.0
    # 3 generated, 2 accepted: 1 pass, all 5 drafts in it.
    assert speculative.Counts(generated=3, drafted=5, accepted=2, reported=True).drafted_per_pass == 5.0
    # No pass at all: no ratio.
    assert math.isnan(speculative.Counts(generated=0, drafted=0, accepted=0, reported=False).drafted_per_pass)


def test_prompt_passes_take_the_first_repeats_length_and_the_median_time(lesson):
    from bytesup.llama.responses import Completion

    def done(prompt_n, prompt_ms):
        return Completion(content="", timings={"prompt_n": prompt_n, "prompt_ms": prompt_ms, "predicted_n": 1,
                                               "predicted_ms": 1.0})
    # A later repeat may find its prompt cached (1 token): the length is the first repeat's;
    # the time is the median of 30, 10 and 20 ms = 20 ms.
    plain = {("t", SHORT): [done(6, 30.0), done(1, 10.0), done(1, 20.0)],
             ("t", REPETITIVE): [done(40, 50.0), done(1, 70.0)]}
    assert lesson.prompt_passes(PLAN, plain, "t") == {SHORT: (6, 20.0), REPETITIVE: (40, 60.0)}


def test_plain_row_and_its_record(lesson):
    """A target alone: decode 63 tokens in 630, 700 and 900 ms (100, 90 and 70 tokens/s: median 90); its repeats agree
    or not; its record keeps every repeat's tokens and no flags."""
    from bytesup.llama.responses import Completion

    def done(ms, tokens):
        return Completion(content="", tokens=tokens, timings={"prompt_n": 5, "prompt_ms": 1.0, "predicted_n": 64,
                                                              "predicted_ms": ms})
    same = [done(630.0, [1, 2, 3]), done(700.0, [1, 2, 3]), done(900.0, [1, 2, 3])]
    row = lesson.plain_row(PLAN, "t", SHORT, same)
    assert (row.decode.median, row.decode.min, row.decode.max) == pytest.approx((90.0, 70.0, 100.0))
    assert (row.speculation, row.prompt, row.speedup, row.tokens_per_pass, row.same_tokens) == ("none", "short", 1.0, 1.0,
                                                                                                "reference")
    assert lesson.plain_row(PLAN, "t", SHORT, [done(630.0, [1, 2, 3])]).same_tokens == "reference"  # one repeat
    assert lesson.plain_row(PLAN, "t", SHORT, same[:2] + [done(900.0, [1, 2, 4])]).same_tokens == "repeats differ"
    record = lesson.run_record(row, same)
    assert record.model_dump() == {"label": "spec-t", "target": "t", "spec_type": "none", "draft": None, "draft_n_max": None,
                                   "prompt": "short", "server_flags": [], "tokens": [[1, 2, 3]] * 3}


def test_main_by_hand_on_a_remote_server(lesson):
    from lessonkit import QueuedServer, hand_context

    server = QueuedServer({})
    ctx = hand_context(LESSON, server, host_values={
        "server_facts": {"local": False, "reason": "the server runs on gpu-box, not on this host"}})
    result = lesson.main(ctx)
    notes = result.notes
    assert any("not measured" in n and "gpu-box" in n for n in notes)
    # k = 4, a = 0.6: 1 + 0.6 + 0.36 + 0.216 + 0.1296 = 2.3056 tokens a pass; 127 ÷ 2.3056 → 56 passes, + 1
    assert any("2.31 tokens on average" in n and "about 57 big-model passes instead of 128" in n for n in notes)
    # k = 4, a = 0.8: 1 + 0.8 + 0.64 + 0.512 + 0.4096 = 3.3616; 127 ÷ 3.3616 → 38 passes, + 1
    assert any("3.36 tokens on average" in n and "about 39 big-model passes" in n for n in notes)
    assert "speculative" not in result.settings and not result.tables and not result.measurements
    assert result.shows.text == ("This run measured no speculative decoding: it needs servers this script starts on "
                                 "this host, and the server runs on gpu-box, not on this host. The page shows the "
                                 "arithmetic on illustrative numbers only.")


def test_what_the_run_shows_reads_the_measured_table(result):
    _, rows = table(result, "speculative_measured")
    plain = rows[0]
    drafts = [r for r in rows if r[1] == "draft-simple"]
    best = max(drafts, key=lambda r: r[12])
    ngram = next(r for r in rows if r[1] == "ngram-simple")
    text = result.shows.text
    assert text.startswith(f"Alone, {plain[0]} decodes {plain[5]:.3g} tokens/s on the {plain[4]} prompt.")
    assert f"{best[2]} drafting up to {best[3]} tokens, the target kept {100 * best[10]:.3g}% of the drafted" in text
    assert (f"{best[12]:.3g}× as fast" if best[12] >= 1 else f"at {best[12]:.3g}× the plain speed: slower") in text
    assert f"it kept {100 * ngram[10]:.3g}% and went {ngram[12]:.3g}× as fast." in text
    assert text.endswith("Every speculative run gave exactly the plain run's tokens.")
    # its plot: each configuration's speed-up at its tokens per target pass, from the same table
    plot = next(p for p in result.plots if p.name == result.shows.plot == "speculative_speedups")
    points = sorted((x, y) for s in plot.series[2:] for x, y in zip(s.x, s.y, strict=True))
    assert points == sorted((r[11], r[12]) for r in rows if r[1] != "none")
    top = max(r[11] for r in rows)
    assert plot.series[0].y == [1.0, 1.0] and plot.series[1].x == plot.series[1].y == [1.0, top]
    # the main tables have at most 8 columns; every column is in the full table under Details
    for name in ("speculative_costs", "speculative_measured", "speculative_vs_arithmetic"):
        main, full = result.table(f"{name}_main"), result.table(name)
        assert len(main.columns) <= 8 < len(full.columns) and full.detail and not main.detail
        assert all(set(map(str, r)) <= set(map(str, f)) for r, f in zip(main.rows, full.rows, strict=True))


def test_what_the_run_shows_follows_hand_made_rows():
    def row(spec, draft, k, prompt, median, acceptance, speedup, same):
        return lesson05b.Measured("t", spec, draft, k, prompt, Spread(median, median, median), None, None, acceptance, 1.0, speedup, same)

    plain = row("none", None, None, "short", 20.0, None, 1.0, "reference")
    fast = row("draft-simple", "d", 4, "short", 30.0, 0.9, 1.5, "identical")
    slow = row("draft-simple", "d", 4, "short", 15.0, 0.9, 0.75, "identical")
    ngram = row("ngram-simple", None, None, "repetitive", 60.0, 1.0, 3.0, "identical")
    assert lesson05b.shows([plain, fast, ngram]) == (
        "Alone, t decodes 20 tokens/s on the short prompt. With d drafting up to 4 tokens, the target kept 90% of the "
        "drafted tokens and decoding went 1.5× as fast (the best draft here). Drafting from the text itself (n-grams) "
        "on the repetitive prompt, it kept 100% and went 3× as fast. Every speculative run gave exactly the plain run's tokens.")
    slower = lesson05b.shows([plain, slow])
    assert (" Even with the best draft here, d drafting up to 4 tokens, the target kept 90% of the drafted tokens and "
            "decoding went at 0.75× the plain speed: slower, the draft's passes cost more than they saved.") in slower
    class Page:
        plots: list = []

        def plot(self, name, *args, **kw):
            self.plots.append(name)

    page = Page()
    assert lesson05b.plot_speedups(page, [plain]) is False and page.plots == []
    assert lesson05b.plot_speedups(page, [plain, fast, ngram]) is True and page.plots == ["speculative_speedups"]
    changed = row("draft-simple", "d", 4, "short", 30.0, 0.9, 1.5, "different")
    assert lesson05b.shows([plain, changed]).endswith(
        "1 of 1 speculative runs gave other tokens than the plain run: speculation should never change them.")


def test_rows_are_read_by_field_name(lesson):
    from bytesup.store.rows import cells, columns

    row = lesson05b.Measured("t", "none", None, None, "short", Spread(50.0, 40.0, 60.0), None, None, None, 1.0, 1.0, "reference")
    assert columns(lesson05b.Measured)[5] == ("decode median", "tokens/s") and len(columns(lesson05b.Measured)) == 14
    assert cells([row]) == [["t", "none", None, None, "short", 50.0, 40.0, 60.0, None, None, None, 1.0, 1.0, "reference"]]


def test_the_view_records_nothing():
    """The view only renders: it puts tables, notes and a plot on the page and asks nothing else of it."""
    import ast
    import inspect

    from bytesup.store import views

    # the view's own source, and the helpers of store.views it puts its tables on the page with
    tree = ast.parse(inspect.getsource(lesson05b) + "\n" + inspect.getsource(views))
    pages = {c.func.attr for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and isinstance(c.func.value, ast.Name) and c.func.value.id == "page"}
    assert pages == {"table", "note", "plot"}
    calls = {c.func.attr for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}
    assert not calls & {"measure", "fact", "host", "recorded", "local_server", "step", "completion"}


def test_the_plan_of_a_run_and_of_older_recordings(lesson):
    """A recorded plan is read as recorded; a run recorded before plans streamed only if it recorded the client's
    clock, and ran min(2, --repeat) rounds; a replay adds no host value the recording lacks."""
    from lessonkit import QueuedServer, hand_context

    def plan_of(host_values):
        ctx = hand_context(LESSON, QueuedServer({}), host_values=host_values)
        return lesson.the_plan(ctx), set(ctx.host_values)

    assert plan_of({"repeat": 3}) == (PLAN.model_copy(update={"stream": False}), {"repeat"})
    assert plan_of({"repeat": 1, "client_clock": {}}) == (current(1), {"repeat", "client_clock"})
    recorded = PLAN.model_copy(update={"n_predict": 16, "draft_lengths": [2]})
    assert plan_of({"plan": recorded.model_dump(), "client_clock": {}}) == (recorded, {"plan"})


def test_a_live_run_records_its_plan_once(lesson):
    """Live, the plan is today's, at most three rounds whatever --repeat, recorded as the one host value `plan`."""
    from lessonkit import QueuedServer

    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    ctx = LessonContext(LESSON, "live", server=QueuedServer({}).server, run=RunOptions(command=["test"], repeat=5),
                        model_path=None, sink=[], replay=None, progress=Reporter(None, LESSON))
    plan = lesson.the_plan(ctx)
    assert plan.rounds == 3 and plan.stream and ctx.host_values == {"repeat": 5, "plan": plan.model_dump()}
