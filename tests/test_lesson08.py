"""Lesson 8's parts below the lesson, each on hand-made input worked out here: its plan (bytesup.store.plans.lesson08)
and the plan each older recording followed, read from the host values it recorded; its figures' records and their
arithmetic (bytesup.store.facts.lesson08); and its view's notes (bytesup.store.views.lesson08).
tests/test_lesson_08_capstone_decode_memory_bound.py runs the lesson itself, and replays the fixture run through all
of them to the same files, byte for byte."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from bytesup.course import decodetime, memory_bound, published
from bytesup.course.ceiling import BandwidthReference, Spread
from bytesup.llama.responses import Completion
from bytesup.models.catalog import ensure_model
from bytesup.store.facts.lesson08 import (PUBLISHED_LABEL, Crossover, ModelExplained, ModelInfo, ModelRun, ModelSteps,
                                          PrefillRow, Side, StepRow, TypeCrossover,
                                          SweepRow, TopAnswer, crossover_of, decode_efficiency_samples,
                                          efficiency_percent, explained, fastest_memory_gbs,
                                          fit_rows, model_steps, models_row, prefill_rows, published_ceiling,
                                          published_point, spark_context_prediction, spark_explained, spark_terms,
                                          step_ms, step_row, sweep_row, top_answer, WidthAccuracy, made_from)
from bytesup.store.plans.lesson08 import (ACCURACY_PROMPTS, DEFAULT_SIZES, MIN_SAMPLES, PLAN_READS, PLAN_VALUE,
                                          UPGRADES, VERSION, Plan, PrefillPlan, current_plan, read_plan)
from bytesup.store.render import fmt
from bytesup.store.results import Measurement, SchemaError
from bytesup.store.rows import cells, columns
from bytesup.store.views.lesson08 import (conclusion, model_notes, plot_decode_vs_bytes, show_conclusion, shows,
                                          slope_note, spark_sentence, verdict_sentences)

LESSON = "08_capstone_decode_memory_bound"
TYPES = ("Q4_1", "Q8_0", "F16", "ALL_F32")


def terms_at(c: float, f: float = 0.08) -> decodetime.Terms:
    """B = 50 GB/s, f, and the same c for every weight type of the course's shapes."""
    return decodetime.Terms(50.0, tuple((k, c) for k in TYPES), f, ())
ROOT = Path(__file__).resolve().parents[1]
WIDTHS = ("smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32")
BEFORE_MEDIUM = ["smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32", "large-q8_0"]


# --- the plan -------------------------------------------------------------------------------------

def host_values(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["host_values"]


def test_the_plan_of_a_run_made_now():
    plan = current_plan(5)
    assert plan.schema_version == VERSION == len(UPGRADES)
    assert plan.default_sizes == DEFAULT_SIZES and "medium-q8_0" in plan.default_sizes
    assert (plan.prompt, plan.n_predict, plan.context_per_slot) == ("The capital of France is", 32, 256)
    # The samples the lesson asks (ctx.samples: at least five, more with --repeat); one warm-up; P = 2 and 4.
    assert MIN_SAMPLES == 5 and (plan.warmup, plan.samples, plan.levels) == (1, 5, (2, 4))
    assert plan.accuracy is not None and plan.accuracy.reference == "smollm2-135m-f32"
    assert [p.text for p in plan.accuracy.prompts][0] == plan.prompt and len(plan.accuracy.prompts) == 4
    assert current_plan(7).samples == 7 and current_plan(7).prefill == PrefillPlan(warmup=1, samples=7, tokens=128)
    assert plan.matvec and plan.in_turns
    # Four slots of 256 tokens: 1,024; two of 4 sequences make 8 samples, three of 2 make 6.
    assert (plan.slots, plan.context, plan.rounds(4), plan.rounds(2), plan.rounds(1)) == (4, 1024, 2, 3, 5)


def test_a_recorded_plan_reads_back_as_itself():
    plan = current_plan(3)
    recorded = json.loads(json.dumps(plan.model_dump(mode="json")))
    assert read_plan({PLAN_VALUE: recorded, "repeat": 3}) == plan
    # the plan wins over any older value the run also holds
    assert read_plan({PLAN_VALUE: recorded, "repeat": 3, "sample_plan": {"warmup": 0}}) == plan


def test_a_run_recorded_before_the_sample_plan():
    """Both committed runs under outputs/: --repeat 3 timed decodes, no warm-up, no batches, no prefill, no numpy
    reading, one model after another, and the default models before medium-q8_0 joined."""
    for run in ("2026-11-30-cpu2-smollm2", "2026-12-01-cpu2-smollm2"):
        values = host_values(ROOT / "outputs" / run / "08_capstone_decode_memory_bound.json")
        plan = read_plan({n: v for n, v in values.items() if n in PLAN_READS})
        assert plan.schema_version == VERSION and list(plan.default_sizes) == BEFORE_MEDIUM
        assert (plan.warmup, plan.samples, plan.levels, plan.prefill) == (0, 3, (), None)
        assert (plan.matvec, plan.in_turns, plan.slots, plan.context) == (False, False, 1, 256)
        # The accuracy reads the width files, not the recording: an older run gets it on replay.
        assert plan.accuracy == current_plan(5).accuracy


def test_the_fixture_followed_the_plan_of_today_but_its_warm_ups():
    """The fixture was recorded with --repeat 2 under version 7: the plan of today (its nine models, a second of each
    weight type) but for its warm-ups, as long as its timed decodes (version 8 shortened them)."""
    values = host_values(ROOT / "tests/fixtures/runs/08_capstone_decode_memory_bound/08_capstone_decode_memory_bound.json")
    assert values["repeat"] == 2 and values[PLAN_VALUE]["schema_version"] == 7 and VERSION == 8
    assert read_plan(values) == current_plan(5).model_copy(update={"warmup_tokens": None})
    assert len(read_plan(values).default_sizes) == 9 and read_plan(values).warmup_n_predict == 32


def test_a_plan_of_version_7_warms_up_with_whole_decodes():
    """Version 8 made each server's warm-up decode WARMUP_TOKENS long; a plan recorded before it warmed up with
    n_predict tokens, and replays so."""
    v7 = {**current_plan(5).model_dump(mode="json"), "schema_version": 7}
    del v7["warmup_tokens"]
    old = read_plan({PLAN_VALUE: v7, "repeat": 2})
    assert (old.warmup_tokens, old.warmup_n_predict, old.schema_version) == (None, 32, VERSION)
    now = current_plan(5)
    assert (now.warmup, now.warmup_tokens, now.warmup_n_predict, now.n_predict) == (1, 8, 8, 32)
    assert read_plan({"repeat": 2}).warmup_n_predict == 32  # before plans: the timed decodes' length too


def test_a_plan_of_version_6_keeps_its_six_models():
    """Version 7 added medium-q4_1, medium-f16 and medium-f32 to the models swept without --sizes; a run recorded
    with an older plan, or before plans, swept the models it named, and its upgraded plan names the same."""
    v6 = {**current_plan(5).model_dump(mode="json"), "schema_version": 6, "default_sizes": list(DEFAULT_SIZES[:6])}
    assert read_plan({PLAN_VALUE: v6, "repeat": 2}).default_sizes == DEFAULT_SIZES[:6]
    assert read_plan({"repeat": 2, "default_sizes": list(DEFAULT_SIZES[:6])}).default_sizes == DEFAULT_SIZES[:6]
    assert list(read_plan({"repeat": 2}).default_sizes) == BEFORE_MEDIUM
    assert DEFAULT_SIZES[6:] == ("medium-q4_1", "medium-f16", "medium-f32")


def test_each_step_reads_its_own_host_value():
    base = {"repeat": 2}
    sample_plan = {"warmup": 1, "samples": 5, "levels": [2, 4]}
    assert (read_plan({**base, "sample_plan": sample_plan}).levels, read_plan(base).levels) == ((2, 4), ())
    assert read_plan({**base, "matvec_bandwidth": {"gb_per_s": {}}}).matvec is True
    assert list(read_plan({**base, "default_sizes": list(DEFAULT_SIZES)}).default_sizes) == list(DEFAULT_SIZES)
    assert read_plan({**base, "sweep_in_turns": True}).in_turns is True
    prefill = read_plan({**base, "prefill_plan": {"warmup": 1, "samples": 5, "tokens": 128}}).prefill
    assert prefill == PrefillPlan(warmup=1, samples=5, tokens=128)
    # one change alone leaves the rest as the first version had it
    turns = read_plan({**base, "sweep_in_turns": True})
    assert (turns.warmup, turns.samples, turns.prefill, turns.matvec) == (0, 2, None, False)


def test_an_intermediate_version_goes_through_the_later_steps_only():
    """A plan recorded at version 3 (before turns and prefills) takes steps 3 and 4 from the values beside it."""
    v3 = {**current_plan(2).model_dump(mode="json"), "schema_version": 3, "in_turns": False, "prefill": None}
    plan = read_plan({PLAN_VALUE: v3, "repeat": 2, "sweep_in_turns": True})
    assert plan.in_turns is True and plan.prefill is None and plan.schema_version == VERSION


def test_a_plan_newer_than_this_bytesup_is_an_error():
    newer = {**current_plan(2).model_dump(mode="json"), "schema_version": VERSION + 1}
    with pytest.raises(SchemaError, match="newer than this bytesup"):
        read_plan({PLAN_VALUE: newer, "repeat": 2})
    assert isinstance(read_plan({"repeat": 1}), Plan)


# --- the figures --------------------------------------------------------------------------------------

def test_spark_context_prediction():
    sp = spark_context_prediction()
    # deepseek-coder-6.7b: no grouped-query attention, 2 × 32 layers × 32 KV heads × 128 × 2 bytes.
    assert sp.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288
    # 33.2 tokens/s × 7.16 GB = 237.712 GB/s; ÷ (7.16e9 + 524,288 × 1,921 = 8,167,157,248 bytes) = 29.106 tokens/s.
    assert published_point().effective == pytest.approx(237.712)  # the bandwidth its short-prompt decode read
    assert sp.predicted == pytest.approx(237.712e9 / 8_167_157_248) == pytest.approx(29.106, abs=0.001)
    assert sp.published == published.LESSON4["decode_long_tokens_per_s"] == 29.6
    assert sp.error_percent == pytest.approx(100 * (29.106 / 29.6 - 1), abs=1e-2)  # −1.7%


def test_published_point_by_hand():
    pub = published_point()
    assert pub.effective == pytest.approx(237.712)  # 33.2 × 7.16 GB
    assert pub.efficiency == pytest.approx(87.074, abs=0.001)  # 237.712 ÷ 273
    assert published_ceiling() == pytest.approx(38.128, abs=0.001)  # 273 ÷ 7.16
    assert (pub.decode_min, pub.decode_max, pub.verdict) == (None, None, None)  # one figure, no samples


def test_effective_gbs_and_efficiency_by_hand():
    # 70.7 tokens/s × 98,362,432 bytes = 6,954,223,942 bytes/s = 6.954 GB/s; of 10 GB/s: 69.54%.
    assert decode_efficiency_samples([70.7], 98_362_432, 10.0) == [pytest.approx(69.542, abs=0.001)]
    assert efficiency_percent(6.0, 8.0) == 75.0
    p = memory_bound.make_point("w", 98_362_432, [68.0, 70.7, 73.0], None, weight_type="Q8_0")
    line = {"on_line": True, "residual": -0.02}
    row = sweep_row(p, line, decodetime.MEMORY, 10.0, TopAnswer("' Paris'", 77.1))
    assert (row.decode, row.decode_min, row.decode_max) == (70.7, 68.0, 73.0)
    # 68 × 98,362,432 = 6,688,645,376; 73 × 98,362,432 = 7,180,457,536.
    assert row.effective == pytest.approx(6.95422, abs=1e-5)
    assert (row.effective_min, row.effective_max) == (pytest.approx(6.688645376), pytest.approx(7.180457536))
    assert (row.efficiency, row.efficiency_min, row.efficiency_max) == (
        pytest.approx(69.5422, abs=1e-4), pytest.approx(66.88645376), pytest.approx(71.80457536))
    assert row.off_line_percent == pytest.approx(-2.0) and row.on_line == "yes" and row.verdict == decodetime.MEMORY
    # The table's cells by column name: each value under its own header.
    (values,) = cells([row])
    C = dict(zip([name for name, _ in columns(SweepRow)], values, strict=True))
    assert C["effective"] == row.effective and C["server's top token"] == "' Paris'" and C["server's top token probability"] == 77.1
    assert C["on the line"] == "yes" and C["cache-resident"] == "no" and C["efficiency min"] == row.efficiency_min
    # Without a bandwidth, no efficiency.
    bare = sweep_row(p, line, None, None, None)
    assert (bare.efficiency, bare.efficiency_min, bare.efficiency_max, bare.top_token) == (None, None, None, None)
    assert bare.verdict is None  # no decode-time model, no verdict


def test_top_answer_is_the_most_probable_candidate():
    c = Completion(content=" Paris", timings={"prompt_n": 6, "prompt_ms": 5.0, "predicted_n": 1, "predicted_ms": 0.0},
                   completion_probabilities=[{"id": 1, "token": " Paris", "logprob": -0.26, "top_logprobs": [
                       {"id": 2, "token": " the", "logprob": -2.0}, {"id": 1, "token": " Paris", "logprob": -0.26},
                       {"id": 3, "token": " a", "logprob": -3.0}]}])
    answer = top_answer(c)
    assert answer.token == "' Paris'" and answer.percent == pytest.approx(77.105, abs=0.001)  # e^−0.26


def test_fastest_memory_sample():
    before, after = {"gb_per_s": {"max": 16.9}}, {"gb_per_s": {"max": 16.5}}
    assert fastest_memory_gbs(before, after) == 16.9
    assert fastest_memory_gbs(before, {"gb_per_s": {"max": 17.2}}) == 17.2
    assert fastest_memory_gbs(before, None) == 16.9 and fastest_memory_gbs(None, after) is None
    # A slow host (0.5 GB/s at best) with an "after" reading that has no bandwidth: 0.5, nothing invented.
    assert fastest_memory_gbs({"gb_per_s": {"max": 0.5}}, {}) == 0.5
    assert fastest_memory_gbs({"gb_per_s": {"max": 0.5}}, {"gb_per_s": {}}) == 0.5


def _points(llc=None):
    # widths of one model (f16 → f32 memory-bound, q8_0 → f16 partly) and a cache-resident small one
    mk = lambda n, b, t, p=1: memory_bound.make_point(n, b, [t * 0.99, t, t * 1.01], llc, n_params=p)  # noqa: E731
    return [mk("tiny", 5e6, 3000.0, 2), mk("q8_0", 144.8e6, 141.0), mk("f16", 270.9e6, 99.0), mk("f32", 539.8e6, 50.0)]


def test_verdict_sentences():
    pts = _points(llc=32 * 2**20)
    analysis = memory_bound.analyse(pts)
    ref = BandwidthReference(40.0, "this host's CPU read", host_cpu=True)
    answers = {n: TopAnswer("' Paris'", pct) for n, pct in (("q8_0", 60.0), ("f16", 61.0), ("f32", 61.0))}
    verdicts = {"tiny": decodetime.COMPUTE, "q8_0": decodetime.COMPUTE, "f16": decodetime.MIXED, "f32": decodetime.MEMORY}
    row = sweep_row(pts[3], analysis["line"]["f32"], verdicts["f32"], ref.gbs, answers["f32"])
    assert row.effective == pytest.approx(539.8e6 * 50 / 1e9)  # 26.99 GB/s
    assert row.efficiency == pytest.approx(100 * 26.99 / 40)
    assert row.verdict == decodetime.MEMORY and row.on_line == "yes" and row.cache_resident == "no"
    tiny = sweep_row(pts[0], analysis["line"]["tiny"], verdicts["tiny"], ref.gbs, None)
    assert tiny.cache_resident == "yes" and tiny.verdict == decodetime.COMPUTE and tiny.on_line is None
    text = " ".join(verdict_sentences(pts, analysis, answers, ref, 32 * 2**20, "The capital of France is", verdicts))
    # f16 → f32: 1.99 × the bytes, 1.98 × as fast (flat); q8_0 → f16: 1.87 × the bytes, 1.42 × as fast
    assert "From f32 to f16" in text and "tokens/s followed 1 ÷ bytes." in text
    assert "From f16 to q8_0 the bytes per token shrank 1.87 × and decode got 1.42 × as fast" in text
    assert "faster, but by less than the bytes shrank." in text
    assert "tiny: the weights fit in the 32 MiB last-level cache" in text
    assert "The same top token at every width" in text and "random weights" not in text
    assert "through f16, f32" in text and "the line's bandwidth at 26.9 GB/s" in text
    assert "The server's answer after 'The capital of France is': q8_0 ' Paris' (60%)" in text
    assert "at 60% to 61% (the server's own arithmetic)" in text  # as the table prints them, four digits at most
    # One verdict per width, the decode-time model's, in one sentence; the steps and the line name none.
    assert ("Verdict, the decode-time model's (below: the term each width's step waits on, named where the run tells "
            "the two terms apart, mixed where they lie within its type's band around the crossover or within the "
            "width's own steps' scatter): compute-bound: tiny, q8_0; mixed: f16; memory-bound: f32.") in text
    assert text.count("memory-bound") == 1 and text.count("compute-bound") == 1
    assert "partly" not in text and " B = " not in text and "B ÷ bytes" not in text
    assert math.isfinite(analysis["fit"]["gbs"])
    # Without the model: no verdict, and why.
    bare = " ".join(verdict_sentences(pts, analysis, answers, ref, 32 * 2**20, "x", {},
                                      "the three terms need at least 3 models; 2 measured"))
    assert "No verdict per width: the decode-time model could not be fitted (the three terms need at least 3" in bare
    assert "memory-bound" not in bare and "compute-bound" not in bare


def test_fit_rows_share_one_reference():
    from bytesup.course.ceiling import BandwidthReference

    analysis = {"fit": {"gbs": 12.0, "gbs_low": 11.0, "gbs_high": 13.0}, "basis": ["a", "b"]}
    before, after = {"gb_per_s": {"median": 10.0, "min": 9.0, "max": 11.0}}, {"gb_per_s": {"median": 8.0, "min": 7.0, "max": 9.0}}
    # Given 20 GB/s (--bandwidth-gbs): the fit 12 ÷ 20 = 60%, the readings 10 ÷ 20 = 50% and 8 ÷ 20 = 40%.
    given = fit_rows(analysis, BandwidthReference(20.0, "given", False), before, after)
    assert [r.percent_of_run for r in given] == [pytest.approx(60.0), pytest.approx(50.0), pytest.approx(40.0)]
    # The host's own reading as the reference: 12 ÷ 10 = 120%, 100%, 8 ÷ 10 = 80%.
    host = fit_rows(analysis, BandwidthReference(10.0, "host", True), before, after)
    assert [r.percent_of_run for r in host] == [pytest.approx(120.0), pytest.approx(100.0), pytest.approx(80.0)]


def test_step_ms_is_1000_over_the_median_tokens_per_s():
    # the 7.4 tokens/s is an outlier (kept out of the spread), and the median of the five is 93.6: 10.684 ms a step
    assert step_ms([93.6, 94.5, 93.1, 7.4, 93.9]) == pytest.approx(1000 / 93.6)
    assert step_ms([100.0, 50.0]) == pytest.approx(1000 / 75)  # not the median of 10 and 20 ms, 15 ms (66.7 tokens/s)


def test_a_models_decode_is_one_figure_in_the_sweep_and_in_its_step():
    """Four samples of 100, 50, 80 and 90 tokens/s: the sweep's decode is their median, 85 tokens/s; the model's row
    says the same 85 measured, its step 1000 ÷ 85 = 11.765 ms (the median of the four steps, 11.806 ms, would give it
    as 84.7). Five of 93.6, 94.5, 93.1, 7.4 and 93.9 (the 7.4 an outlier): 93.6 in both, a step of 10.684 ms (leaving
    the outlier out of the median would say 93.75)."""
    terms = terms_at(25.0)
    for samples, median in (([100.0, 50.0, 80.0, 90.0], 85.0), ([93.6, 94.5, 93.1, 7.4, 93.9], 93.6)):
        info = ModelInfo("q8", 100_000_000, 106_250_000, "Q8_0", n_layer=30)
        run = ModelRun(info, samples, TopAnswer("x", 1.0), {})
        point = memory_bound.make_point("q8", info.bytes_per_token, samples, None, n_params=info.n_params)
        sweep = sweep_row(point, {"on_line": None, "residual": None}, None, None, None)
        (row,) = explained([model_steps(run).width()], terms, (), {"q8": None})
        assert sweep.decode == median and row.measured == pytest.approx(median, rel=1e-12)
        assert row.step_1 == pytest.approx(1000 / median, rel=1e-12)
        (sweep_cells,), (model_cells,) = cells([sweep]), cells([row])
        shown = {fmt(c[[n for n, _ in columns(t)].index(name)]) for c, t, name in (
            (sweep_cells, SweepRow, "decode"), (model_cells, ModelExplained, "measured"))}
        assert shown == {fmt(median)}


def test_a_verdict_that_one_model_turns_over_is_shown_mixed():
    """Six models' steps made by hand from B = 50 GB/s, c = 25 ps for every type and f = 0.08 ms per block, q8_0's 15%
    faster: f16, alone in its type, can take its step on its own c or on the memory, and the fits that leave one
    model out disagree, so it is mixed in the table and the notes; the Q8_0 models keep their verdict."""
    terms = terms_at(25.0)
    shapes = [("q4_1", "Q4_1", 96.6e6, 134.5e6, 30, 1.0), ("q8_0", "Q8_0", 143.0e6, 134.5e6, 30, 0.85),
              ("f16", "F16", 269.1e6, 134.5e6, 30, 1.0), ("f32", "ALL_F32", 538.1e6, 134.5e6, 30, 1.0),
              ("medium", "Q8_0", 224.1e6, 210.8e6, 16, 1.0), ("large", "Q8_0", 985.7e6, 927.5e6, 18, 1.0)]
    widths = [decodetime.Width(n, b, p, t, {1: decodetime.predict(terms, n, b, p, L, t).step_ms * s}, L)
              for n, t, b, p, L, s in shapes]
    rows = explained(widths, decodetime.fit(widths), (2, 4))
    assert [r.waits_on for r in rows] == ["compute-bound", "compute-bound", "mixed", "memory-bound", "compute-bound",
                                          "compute-bound"]
    assert all(r.step_2 is None and r.line_a is None and r.line_b is None for r in rows)  # no steps at P = 2 and 4
    assert [r.model for r in rows if r.error_percent is None] == ["q4_1", "f16", "f32"]  # each alone in its type
    notes = " ".join(model_notes(rows, decodetime.fit(widths), None, spark_terms(), (2, 4), None, None,
                                 decodetime.not_held_out(widths)))
    assert "Here: memory-bound f32; compute-bound q4_1, q8_0, medium, large; mixed f16." in notes
    assert ("Not predicted, alone in its weight type: q4_1, f16, f32 (the c of each would come from its own step "
            "alone; a second model of each type in --sizes tests it).") in notes


def test_a_slow_prefill_sample_is_an_outlier_not_the_range():
    """Prefills of 500, 510, 490, 505 and one of 50 tokens/s: the 50 is beyond 5 scaled MADs, so the range is that of
    the other four, 490-510; the median is that of all five, 500, as the prefill's measurement gives it. 2 × 100 M ×
    500 = 100 GFLOP/s and 2 ms a token, against decode's 100 M × 25 ps = 2.5 ms."""
    samples = [500.0, 510.0, 490.0, 505.0, 50.0]
    run = ModelRun(ModelInfo("q4", 100_000_000, 60_000_000, "Q4_1"), [], TopAnswer("x", 1.0), {}, samples)
    (row,) = prefill_rows([run, ModelRun(run.info, [], run.answer, {})], terms_at(25.0, f=0.1))
    assert (row.model, row.weights, row.prefill) == ("q4", "Q4_1", Spread(500.0, 490.0, 510.0))
    assert row.prefill.median == Measurement.of("prefill_tokens_per_s", "tokens/s", samples).median
    assert [name for name, _ in columns(PrefillRow)][2:5] == ["prefill", "prefill low", "prefill high"]
    assert row.gflops == pytest.approx(100.0) and row.ms_per_token == pytest.approx(2.0)
    assert row.decode_arithmetic_ms == pytest.approx(2.5) and row.decode_over_prefill == pytest.approx(1.25)


def test_a_model_its_steps_and_its_row():
    """A model of 100 M parameters in 106.25 MB (1.0625 bytes each), 30 blocks: its step at P = 1 from 80 and 100
    tokens/s (median 90, 11.11 ms), at P = 2 from 40 tokens/s twice (25 ms)."""
    info = ModelInfo("q8", 100_000_000, 106_250_000, "Q8_0", n_layer=30, n_embd=576, architecture="llama")
    steps = model_steps(ModelRun(info, [80.0, 100.0], TopAnswer("x", 1.0), {2: [40.0, 40.0]}))
    assert steps == ModelSteps(name="q8", weight_bytes=106_250_000, n_params=100_000_000, n_layer=30, weight_type="Q8_0",
                               step_ms={"1": 1000 / 90, "2": 25.0}, step_spread=steps.step_spread)
    assert steps.step_spread["2"] == 0.0 and steps.step_spread["1"] > 0
    width = steps.width()
    assert (width.step_ms, width.n_layer, width.weight_bytes) == ({1: 1000 / 90, 2: 25.0}, 30, 106_250_000)
    # A model without a weight type or blocks in its header: "?" and one block, as the fact states it.
    bare = model_steps(ModelRun(ModelInfo("x", 1, 2, None), [10.0], TopAnswer("x", 1.0), {}))
    assert (bare.weight_type, bare.n_layer, bare.step_ms) == ("?", 1, {"1": 100.0})
    point = memory_bound.make_point("q8", info.bytes_per_token, [80.0, 100.0], 128 * 2**20, n_params=info.n_params)
    row = models_row(info, point)
    assert (row.bytes_per_token, row.bytes_per_parameter, row.fits_in_cache, row.blocks) == (106_250_000, 1.0625, "yes", 30)


def test_a_step_row_and_the_published_figures_in_the_models_terms():
    st = {"narrow": "q4", "wide": "q8", "bytes_ratio": 1.8, "speedup": 1.5, "gbs_ratio": 0.83, "allowance": 0.12,
          "cache_resident": False, "outcome": memory_bound.LESS}
    assert cells([step_row(st)]) == [["q4", "q8", 1.8, 1.5, 0.83, 12.0, "no", "faster, by less than the bytes"]]
    assert columns(StepRow)[-1] == ("speed-up against the bytes", "")  # a description, not a verdict column
    # 7.16 GB ÷ 273 GB/s = 26.23 ms to read the weights, of 1000 ÷ 33.2 = 30.12 ms a token: 87% of it.
    row = spark_explained(spark_terms())
    assert row.model == PUBLISHED_LABEL and row.memory_ms == pytest.approx(26.2271, abs=1e-4)
    assert row.step_ms == pytest.approx(1000 / 33.2) and row.measured == 33.2
    assert row.memory_share == pytest.approx(100 * 26.2271 / (1000 / 33.2), abs=1e-2) and row.waits_on == "memory-bound"
    assert row.step_1 is None and row.predicted is None and row.error_percent is None


# --- the crossover, the slope in words, the plot and the conclusion ------------------------------------

# The course's six shapes (MB, M parameters, blocks) as in test_a_verdict_that_one_model_turns_over_is_shown_mixed:
# bytes per parameter 96.6 ÷ 134.5 = 0.718, 143 ÷ 134.5 = 1.0632, 269.1 ÷ 134.5 = 2.0007, 538.1 ÷ 134.5 = 4.0007,
# 224.1 ÷ 210.8 = 1.0631, 985.7 ÷ 927.5 = 1.0627.
SHAPES = [("q4_1", "Q4_1", 96.6e6, 134.5e6, 30), ("q8_0", "Q8_0", 143.0e6, 134.5e6, 30),
          ("f16", "F16", 269.1e6, 134.5e6, 30), ("f32", "ALL_F32", 538.1e6, 134.5e6, 30),
          ("medium", "Q8_0", 224.1e6, 210.8e6, 16), ("large", "Q8_0", 985.7e6, 927.5e6, 18)]


def _crossover(terms: decodetime.Terms):
    """The six shapes, their steps made from `terms`, judged by `terms` alone (no leave-one-out fit): each model's
    side is its bytes per parameter against B × c."""
    widths = [decodetime.Width(n, b, p, t, {1: decodetime.predict(terms, n, b, p, L, t).step_ms}, L)
              for n, t, b, p, L in SHAPES]
    fits = {w.name: None for w in widths}
    rows = explained(widths, terms, (), fits)
    return crossover_of(widths, terms, fits, rows), widths, rows


def test_the_crossover_and_each_models_side():
    """B = 50 GB/s and c = 25 ps: 25 ps of arithmetic per parameter is the time 50 GB/s takes to read 1.25 bytes."""
    cross, widths, rows = _crossover(terms_at(25.0))
    assert [(t.weight_type, t.bytes_per_param, t.low, t.high) for t in cross.types] == [
        (k, pytest.approx(1.25), pytest.approx(1.25), pytest.approx(1.25)) for k in TYPES]
    assert cross.byte_ps == pytest.approx(20.0)  # 1 ÷ 50 GB/s
    side = {s.model: (round(s.bytes_per_param, 4), s.waits_on) for s in cross.sides}
    assert side == {"q4_1": (0.7182, "compute-bound"), "q8_0": (1.0632, "compute-bound"), "f16": (2.0007, "memory-bound"),
                    "f32": (4.0007, "memory-bound"), "medium": (1.0631, "compute-bound"), "large": (1.0627, "compute-bound")}
    assert [r.waits_on for r in rows] == [side[w.name][1] for w in widths]  # the table's verdicts, the same
    # c = 10 ps moves the crossover to 0.5 bytes per parameter, below every model: every one waits on memory
    low, _, _ = _crossover(terms_at(10.0))
    assert low.of("Q4_1").bytes_per_param == pytest.approx(0.5) and {s.waits_on for s in low.sides} == {"memory-bound"}
    # F16's c alone at 45 ps: its crossover 2.25 passes f16's 2 bytes per parameter, and only f16 turns over
    f16 = decodetime.Terms(50.0, tuple((k, 45.0 if k == "F16" else 25.0) for k in TYPES), 0.08, ())
    moved, _, _ = _crossover(f16)
    assert moved.of("F16").bytes_per_param == pytest.approx(2.25)
    assert {s.model: s.waits_on for s in moved.sides} == {**{n: v for n, (_, v) in side.items()}, "f16": "compute-bound"}


def test_the_model_notes_state_the_crossover_and_the_published_rule():
    terms = terms_at(25.0)
    cross, _, rows = _crossover(terms)
    notes = " ".join(model_notes(rows, terms, None, spark_terms(), (2, 4), None, cross))
    assert ("at B × c bytes per parameter with its type's c: Q4_1 1.25, Q8_0 1.25, F16 1.25, ALL_F32 1.25. A model "
            "storing more bytes per parameter than its type's crossover waits on memory") in notes
    assert ("B = 50 GB/s, f = 0.08 ms per block and g = 0 ms more per block for each byte per parameter for every "
            "model, and c per parameter Q4_1 25 ps, Q8_0 25 ps") in notes
    assert ("Here (bytes per parameter): memory-bound f16 (2), f32 (4); compute-bound q4_1 (0.718), q8_0 (1.06), "
            "medium (1.06), large (1.06).") in notes
    # the Spark: 0.4178 ms ÷ 6.74e9 parameters = 0.062 ps; 273 GB/s × 0.062 ps = 0.0169; 7.16 ÷ 6.74 = 1.06, 62.8×
    assert ("prefill's rate gives 0.062 ps of arithmetic per parameter, so its crossover is 273 GB/s × 0.062 ps = 0.017 "
            "bytes per parameter (a lower bound, as that arithmetic is); the specimen stores 1.06, 62.8× the "
            "crossover.") in notes
    # one value per letter: B and c are this run's alone (50 GB/s and 25 ps), never the Spark's
    assert "c per parameter Q4_1 25 ps" in notes and "c = 0.062" not in notes and "B = 273" not in notes


class _Page:
    def __init__(self):
        self.plots, self.notes = [], []

    def table(self, *a, **kw):
        raise AssertionError("no table expected")

    def plot(self, name, title, x_label, y_label, series, **kw):
        self.plots.append(series)

    def note(self, text):
        self.notes.append(text)


def test_the_plot_draws_the_crossover_of_the_shape_most_widths_share():
    """At 134.5 M parameters in 30 blocks, B × c = 1.25 bytes per parameter is 168.125 MB per token; below it the
    model's step is 30 × 0.08 + 134.5 M × 25 ps = 2.4 + 3.3625 ms, 173.5 tokens/s, and at 538.1 MB it is
    2.4 + 10.762 ms, 75.98 tokens/s."""
    terms = terms_at(25.0)
    cross, widths, _ = _crossover(terms)
    points = [memory_bound.make_point(w.name, w.weight_bytes, [1e3 / w.step_ms[1]], None, n_params=int(w.n_params))
              for w in widths]
    page = _Page()
    plot_decode_vs_bytes(page, points, memory_bound.analyse(points)["fit"], None, cross, widths)
    (series,) = page.plots
    curve, *markers = series[-5:]
    assert [m.label for m in markers] == [f"{k}'s crossover B × c = 1.25 bytes per parameter (168 MB at 134.5 M "
                                          f"parameters)" for k in TYPES]
    marker = markers[0]
    assert marker.x == [pytest.approx(168.125)] * 2 and marker.style == "dashed"
    every_y = [y for s in series[:-5] for y in (*s.y, *(s.y_min or []), *(s.y_max or []))]
    assert marker.y == [min(every_y), max(every_y)]  # spans what is drawn, no further
    assert curve.label == "decode-time model at 134.5 M parameters in 30 blocks, each width with its type's c"
    # the four widths of that shape, each by its own type's terms: q4_1 and q8_0 on the arithmetic, 2.4 + 3.3625 ms;
    # f32 538.1 MB read in 10.762 ms, + 2.4 ms
    assert curve.x == [pytest.approx(96.6), pytest.approx(143.0), pytest.approx(269.1), pytest.approx(538.1)]
    assert curve.y[0] == pytest.approx(1e3 / 5.7625) and curve.y[-1] == pytest.approx(1e3 / (2.4 + 10.762))
    # without the model's terms, neither is drawn
    bare = _Page()
    plot_decode_vs_bytes(bare, points, None, None)
    assert not any("crossover" in s.label or "decode-time" in s.label for s in bare.plots[0])


@pytest.mark.parametrize("slope, words", [
    ({"slope": -1.05, "se": 0.05, "n": 4}, ("2^α = 0.48, within two standard errors of −1 (1.0): the speeds are "
                                            "consistent with each width waiting on its bytes.")),
    ({"slope": -0.808, "se": 0.086, "n": 5}, ("2^α = 0.57, 2.2 standard errors from −1 and 9.4 from 0: the time per "
                                              "token grows with the bytes but by less than in proportion")),
    ({"slope": -0.05, "se": 0.1, "n": 3}, "within two standard errors of 0 (0.5): the speeds barely follow the bytes."),
    ({"slope": -0.5, "se": 0.5, "n": 3}, "within two standard errors of both −1 and 0, too uncertain"),
    ({"slope": -1.5, "se": 0.1, "n": 4}, "5.0 standard errors steeper than −1: tokens/s fell faster than the bytes"),
    ({"slope": 0.5, "se": 0.1, "n": 3}, "5.0 standard errors above 0: more bytes were faster"),
    ({"slope": -1.0, "se": None, "n": 2}, "two widths give no standard error"),
])
def test_the_slope_in_words(slope, words):
    note = slope_note(slope)
    assert note.startswith(f"Free log-log slope over the {slope['n']} widths beyond the cache: tokens/s ∝ bytes^α")
    assert "A slope of −1 would mean every width waits on its bytes alone" in note and words in note
    assert len(re.findall(r"(?<!\^)α = ", note)) == 1  # one value of α on the page: the measured one (2^α is not α)
    # only a slope near −1 says the speeds follow the bytes
    assert ("consistent with each width waiting on its bytes" in note) == (words.endswith("waiting on its bytes."))


def test_the_conclusion_follows_the_numbers():
    """The same six shapes under three sets of terms: each moves the crossovers, and the sentences move with them."""
    spark = spark_terms()
    text = conclusion(_crossover(terms_at(25.0))[0], "", spark)
    assert text[0] == ("Conclusion. On this machine reading one byte takes 1 ÷ B = 20 ps (B = 50 GB/s) and one "
                       "parameter's arithmetic c depends on its weight type's kernels: Q4_1 25 ps, Q8_0 25 ps, F16 25 "
                       "ps, ALL_F32 25 ps. So reading a parameter's weights takes as long as its arithmetic at B × c = "
                       "Q4_1 1.25, Q8_0 1.25, F16 1.25, ALL_F32 1.25 bytes per parameter.")
    assert text[1] == ("Decode waits on memory where a model stores more bytes per parameter than its type's crossover, "
                       "clear of its band and of its own steps' scatter: f16 (2), f32 (4); their weights take longer "
                       "to read than their arithmetic takes.")
    assert text[2] == ("It waits on the arithmetic where a model stores fewer bytes per parameter than its type's "
                       "crossover, clear of its band and of its own steps' scatter: q4_1 (0.718), q8_0 (1.06), medium "
                       "(1.06), large (1.06); their weights arrive before the arithmetic on them is done.")
    assert text[3] == ("Whichever term a step waits on, it also pays f = 0.08 ms per block, and g = 0 ms more per block "
                       "for each byte a parameter takes (the graph's operations and the threads' waits).")
    assert text[4].startswith("The published DGX Spark figures in the same terms:")
    # f16 (2.0007 bytes per parameter) crosses at 2.0007 ÷ 25 ps = 80.03 GB/s, 1.6 × B; q8_0, the widest of the
    # compute-bound ones against its type's crossover (1.0632), at 1.0632 ÷ 50 GB/s = 21.26 ps, 25 ÷ 21.26 = 1.18 × as
    # fast
    assert text[5] == ("To move f16 (F16, 2 bytes per parameter) onto the arithmetic: store it in 1.25 bytes per "
                       "parameter or fewer at its type's c, or read memory at 80 GB/s or more (1.6× B, with c as it is).")
    assert text[6].startswith("To move q8_0 (Q8_0, 1.06 bytes per parameter) onto memory: arithmetic under 21.3 ps per "
                              "parameter (1.18× as fast as its type's 25 ps")
    assert len(text) == 7
    # c = 60 ps: the crossovers rise to 3 bytes per parameter, and only f32 (4) waits on memory: one model, "its"
    one = conclusion(_crossover(terms_at(60.0))[0], "", spark)
    assert one[1] == ("Decode waits on memory where a model stores more bytes per parameter than its type's crossover, "
                      "clear of its band and of its own steps' scatter: f32 (4); its weights take longer to read than "
                      "its arithmetic takes.")
    # c = 10 ps: the crossovers fall to 0.5, below every model; no sentence may name one that waits on arithmetic
    fast = conclusion(_crossover(terms_at(10.0))[0], "", spark)
    assert "B × c = Q4_1 0.5, Q8_0 0.5, F16 0.5, ALL_F32 0.5 bytes per parameter." in fast[0]
    assert fast[2] == "No model measured here waits on the arithmetic under every fit."
    assert not any("onto memory" in s or "It waits on the arithmetic where" in s for s in fast)
    # q4_1, now the nearest to its crossover (0.718 against 0.5), crosses at 0.7182 ÷ 10 ps = 71.8 GB/s
    assert "To move q4_1 (Q4_1, 0.718 bytes per parameter) onto the arithmetic" in " ".join(fast)
    assert "read memory at 71.8 GB/s or more" in " ".join(fast)
    # c = 100 ps: 5 bytes per parameter, above every model: none waits on memory, and none is moved onto arithmetic
    slow = conclusion(_crossover(terms_at(100.0))[0], "", spark)
    assert slow[1] == "No model measured here waits on memory under every fit."
    assert not any("onto the arithmetic" in s or "Decode waits on memory where" in s for s in slow)
    assert "To move f32 (ALL_F32, 4 bytes per parameter) onto memory: arithmetic under 80 ps per parameter" in " ".join(slow)
    # a type whose arithmetic was hidden names no bandwidth that would move it
    hidden = dataclasses.replace(_crossover(terms_at(25.0))[0], types=tuple(
        dataclasses.replace(t, c_ps=0.0, bytes_per_param=0.0, low=0.0, high=0.0, hidden_below=80.0)
        if t.weight_type in ("F16", "ALL_F32") else t for t in _crossover(terms_at(25.0))[0].types))
    said = " ".join(conclusion(hidden, "", spark))
    assert "F16 hidden under its reading (at most 80 ps), ALL_F32 hidden under its reading (at most 80 ps)" in said
    assert "f16 (F16, 2 bytes per parameter) never showed its arithmetic" in said


def test_the_conclusion_says_how_well_the_model_predicted():
    """The verdicts rest on the model: the conclusion says how many models the others' terms predicted within ±15%."""
    terms = terms_at(25.0)
    cross, _, rows = _crossover(terms)
    untested = conclusion(cross, "", spark_terms(), None, rows)  # no leave-one-out fit: nothing predicted
    assert ("Of these 6 models none can be left out to test the model on one it has not seen (each needs another of "
            "its weight type), so these verdicts are untested.") in untested
    within = [dataclasses.replace(r, error_percent=e) for r, e in zip(rows, (2.0, -15.0, 3.0, 1.0, -4.0, 0.5), strict=True)]
    assert ("The model behind these verdicts predicted each of the 6 models it could leave out within ±15% from the "
            "others' terms." in conclusion(cross, "", spark_terms(), None, within))
    alone = [dataclasses.replace(r, error_percent=None if r.model == "f16" else 1.0) for r in rows]
    assert ("predicted each of the 5 models it could leave out within ±15% from the others' terms (f16 could not be "
            "left out: no other model shares its weight type).") in " ".join(conclusion(cross, "", spark_terms(), None, alone))
    missed = [dataclasses.replace(r, error_percent=e) for r, e in zip(rows, (2.0, 36.0, -24.0, 1.0, -4.0, 0.5), strict=True)]
    text = conclusion(cross, "", spark_terms(), None, missed)
    assert ("The model behind these verdicts predicted 4 of 6 models within ±15% from the others' terms (the furthest, "
            "q8_0, at +36%): they are this run's best reading, not a settled one.") in text
    assert not any("predicted each of" in s for s in text)
    # missed, and two alone in their types: one bracket says both
    both = [dataclasses.replace(r, error_percent=None if r.model in ("q4_1", "f16") else r.error_percent) for r in missed]
    assert ("predicted 3 of 4 models within ±15% from the others' terms (the furthest, q8_0, at +36%; q4_1, f16 could "
            "not be left out: no other model shares their weight type): they are this run's best reading, not a settled "
            "one.") in " ".join(conclusion(cross, "", spark_terms(), None, both))
    assert len(conclusion(cross, "", spark_terms())) == len(text) - 1  # without rows, no such sentence


def typed_crossover(terms: decodetime.Terms) -> Crossover:
    """q4 compute-bound, q8 mixed (Q8_0's crossover 1.25 with u = 0.1: the band 1.05-1.45 holds its 1.06 bytes per
    parameter; the fits' own crossovers 1-1.3 lie within it but for the lowest), f16 memory-bound."""
    types = tuple(TypeCrossover(k, terms.c(k), 1.25, *((1.0, 1.3) if k == "Q8_0" else (1.25, 1.25)),
                                *((None, 0.1, 1.0, 1.45) if k == "Q8_0" else ()))
                  for k in ("Q4_1", "Q8_0", "F16"))
    return Crossover(types, terms, (Side("q4", "Q4_1", 0.7, "compute-bound"), Side("q8", "Q8_0", 1.06, "mixed"),
                                    Side("f16", "F16", 2.0, "memory-bound")))


def test_a_mixed_model_is_said_to_lie_within_its_band():
    terms = terms_at(25.0)
    cross = typed_crossover(terms)
    text = " ".join(conclusion(cross, "", spark_terms()))
    assert ("Q8_0 1.25 (1–1.45), F16 1.25 bytes per parameter (in brackets, the band a model of the type is mixed in: "
            "2 standard errors u of its crossover either side (u from the fits that leave one model out), or further "
            "where one of those fits puts it)") in text
    # 1.25 ÷ 1.06 = 1.179: its arithmetic takes 18% longer than its read
    assert ("Mixed, where this run cannot tell which of the two terms is the larger: q8 (1.06 bytes per parameter: its "
            "arithmetic takes 18% longer than its read, within Q8_0's band 1–1.45 around its crossover 1.25 (u 0.1)).") in text
    assert ("For q8, more samples, or models of other shapes, would narrow what the run cannot tell and show which side "
            "it lies on.") in text
    assert "To move q4 (Q4_1, 0.7 bytes per parameter) onto memory" in text
    assert "No model" not in text


def test_without_the_model_the_conclusion_says_what_it_cannot_say():
    page = _Page()
    show_conclusion(page, None, "the terms need at least 3 models; 2 measured", spark_terms())
    assert page.notes[0] == ("Conclusion: this run cannot say where its decode waits on memory and where on the "
                             "arithmetic: the decode-time model could not be fitted (the terms need at least 3 "
                             "models; 2 measured). Measure at least 4 models (three terms, and one model left out to "
                             "test them), two of each weight type.")
    assert len(page.notes) == 2 and page.notes[1].startswith("The published DGX Spark figures")
    assert not any("waits on memory where" in n or "To move" in n for n in page.notes)


def test_what_the_run_shows_follows_the_crossover():
    """The opening states each type's B × c and each model's verdict with its bytes per parameter; terms that move the
    crossovers move the sentence (the sides as in test_the_crossover_and_each_models_side)."""
    text = shows(_crossover(terms_at(25.0))[0], "", [])
    assert text == ("On this machine reading a parameter's weights takes as long as its arithmetic at B × c = Q4_1 1.25, "
                    "Q8_0 1.25, F16 1.25, ALL_F32 1.25 bytes per parameter by weight type, with B = 50 GB/s and c per "
                    "parameter Q4_1 25 ps, Q8_0 25 ps, F16 25 ps, ALL_F32 25 ps, fitted on 6 models. In bytes per "
                    "parameter: f16 (2), f32 (4) wait on memory; q4_1 (0.718), q8_0 (1.06), medium (1.06), large "
                    "(1.06) wait on the arithmetic.")
    # c = 10 ps: 50 × 10 ÷ 1000 = 0.5 bytes per parameter, below every model: all six wait on memory
    low = shows(_crossover(terms_at(10.0))[0], "", [])
    assert "B × c = Q4_1 0.5, Q8_0 0.5, F16 0.5, ALL_F32 0.5 bytes per parameter" in low
    assert low.endswith("In bytes per parameter: q4_1 (0.718), q8_0 (1.06), f16 (2), f32 (4), medium (1.06), large "
                        "(1.06) wait on memory.")
    # one model on each side, one mixed, and the fits' range
    cross = typed_crossover(terms_at(25.0))
    assert shows(cross, "", []).endswith("Q8_0 1.25 (1–1.45), F16 1.25 bytes per parameter by weight type (in "
                                         "brackets, where a model is mixed), with B = 50 GB/s and c per parameter Q4_1 "
                                         "25 ps, Q8_0 25 ps, F16 25 ps, fitted on 3 models. In bytes per parameter: f16 "
                                         "(2) waits on memory; q4 (0.7) waits on the arithmetic; q8 (1.06) is mixed "
                                         "(the two terms too close to tell).")


def test_without_the_model_the_run_shows_what_it_measured():
    """No fit: why not, and each model's median with the GB/s it reads: 106.25 MB × 90 tokens/s = 9.56 GB/s,
    200 MB × 45 tokens/s = 9 GB/s."""
    points = [{"name": "q8", "bytes": 106_250_000, "median": 90.0}, {"name": "f16", "bytes": 200_000_000, "median": 45.0}]
    assert shows(None, "the terms need at least 3 models; 2 measured", points) == (
        "The decode-time model could not be fitted (the terms need at least 3 models; 2 measured), so this run "
        "does not say which term its decode waits on. It measured q8 90 tokens/s at 106 MB per token (9.56 GB/s "
        "read); f16 45 tokens/s at 200 MB per token (9 GB/s read).")


def test_the_published_figures_under_the_same_rule():
    """273 GB/s reads a byte in 3.66 ps; 0.062 ps of arithmetic per parameter; 1.06 bytes per parameter is 62.8 × the
    crossover of 0.0169: memory-bound, 87% of its step reading. This machine's decode ÷ prefill, when measured, beside."""
    spark = spark_terms()
    assert spark["crossover"] == pytest.approx(273 * (1e3 / 2393.5) / 6.74e9 * 1e9 * 1e-3, rel=1e-9)
    info = ModelInfo("q4", 100_000_000, 60_000_000, "Q4_1")
    runs = [ModelRun(info, [], TopAnswer("x", 1.0), {}, [500.0] * 5), ModelRun(info, [], TopAnswer("x", 1.0), {}, [1000.0] * 5)]
    prefill = prefill_rows(runs, terms_at(25.0, f=0.1))  # 2.5 ms ÷ 2 ms = 1.25×, ÷ 1 ms = 2.5×
    sentence = spark_sentence(spark, prefill)
    assert ("273 GB/s reads a byte in 3.66 ps and prefill's rate gives 0.062 ps of arithmetic per parameter (a lower "
            "bound: decode's kernels are slower), a crossover of 0.017 bytes per parameter; the specimen's Q8_0 stores "
            "1.06, 62.8× the crossover, so its decode is memory-bound, reading the weights taking 87% of its step.") in sentence
    assert sentence.endswith("only if decode's arithmetic per token were more than 62.8× prefill's; on this machine it "
                             "was 1.2–2.5×.")
    # figures whose arithmetic outweighs the read: compute-bound, and no sentence about what would make it so
    flipped = {**spark, "memory_ms": 0.1, "crossover": 2.0}
    other = spark_sentence(flipped, [])
    assert "so its decode is compute-bound" in other and "would wait on the arithmetic only if" not in other


# --- what each width costs in accuracy ----------------------------------------------------------------

def test_the_accuracy_prompts_are_smollm2s_tokens():
    """The plan's token ids are what SmolLM2's server answered lesson 4 for the same prompts (its recorded /tokenize,
    add_special), and they spell each prompt in the model file's own vocabulary."""
    from lessonkit import recorded_exchanges

    from bytesup.models import forward
    from bytesup.store.plans import lesson04

    asked = {e["request"]["content"]: e["response"]["tokens"] for e in recorded_exchanges("04_next_token")
             if e["path"] == "/tokenize" and e["request"].get("add_special")}
    texts = dict(lesson04.PROMPTS)
    model = forward.Model(ensure_model("smollm2-135m-q4_1"))
    for name, text, ids in ACCURACY_PROMPTS:
        assert list(ids) == asked[text] and text == texts.get(f"top8_{name}")
        assert b"".join(model.token_bytes(t) for t in ids).decode("utf-8") == text


def test_a_widths_logits_are_kept_per_sha256_wherever_the_file_is(tmp_path, monkeypatch):
    """The same bytes at another path (a run recorded in another checkout) are not passed through numpy again, and
    the answer is theirs; other bytes under another sha256 are."""
    import shutil

    from bytesup.files import file_sha256
    from bytesup.models import forward
    from bytesup.store.facts import lesson04, lesson08

    tiny, other = ensure_model("tiny-q8_0"), ensure_model("tiny-q4_1")
    copy = tmp_path / "elsewhere" / tiny.name
    copy.parent.mkdir()
    shutil.copyfile(tiny, copy)
    passes = []
    original = forward.forward
    monkeypatch.setattr(forward, "forward", lambda model, ids, **kw: passes.append(model) or original(model, ids, **kw))
    ids = ((1, 2, 3), (4, 5))
    for name, run, kept in (("lesson 8", lesson08.width_logits, lesson08._width_logits),
                            ("lesson 4", lesson04.file_pass, lesson04._file_pass)):
        kept.cache_clear()
        passes.clear()
        first = run(str(tiny), file_sha256(tiny), ids)
        assert run(str(copy), file_sha256(copy), ids) is first and len(passes) == 1, name
        assert run(str(other), file_sha256(other), ids) is not first and len(passes) == 2, name


def _width(name: str, **kw) -> WidthAccuracy:

    base = dict(name=name, made_from=made_from(name), file=f"{name}.gguf", positions=29, mean_kl=0.0, max_kl=0.0,
                same_top=29, largest_dp=0.0, dp_prompt="The capital of France is", dp_position=5, dp_token="' Paris'",
                dp_reference=0.772, dp_width=0.772, top_token="' Paris'", top_probability=0.772)
    return WidthAccuracy(**{**base, **kw})


Q4, Q8, F16, F32 = WIDTHS
PROMPT = "The capital of France is"


def _accuracy(*widths):
    from bytesup.store.facts.lesson08 import QuantizationAccuracy

    return QuantizationAccuracy(reference=F32, measure="KL by hand", prompts=[PROMPT, "The cat sat on the"],
                                prompt_tokens=[5, 5], widths=list(widths))


def _rows(acc):
    """Sizes 100, 150, 270, 540 MB and decodes 80, 60, 40, 20 tokens/s."""
    from bytesup.store.facts.lesson08 import accuracy_row

    size = {Q4: 100e6, Q8: 150e6, F16: 270e6, F32: 540e6}
    speed = {Q4: 80.0, Q8: 60.0, F16: 40.0, F32: 20.0}
    return [accuracy_row(w, ModelInfo(w.name, 100, int(size[w.name]), None), speed[w.name]) for w in acc.widths]


def test_the_accuracy_row_by_hand():
    acc = _accuracy(_width(Q8, mean_kl=0.003, same_top=27, top_probability=0.713))
    (row,) = _rows(acc)
    # 27 of 29 positions: 93.10%; 150e6 bytes: 150 MB; 0.713: 71.3%.
    assert (row.size, row.decode, row.mean_kl, row.top_percent) == (150.0, 60.0, 0.003, pytest.approx(71.3))
    assert row.same_top == pytest.approx(100 * 27 / 29) and row.made_from == "q4_1's values quantized again to Q8_0"
    assert len(dataclasses.fields(row)) <= 8


def test_the_accuracy_sentences_follow_the_records():
    from bytesup.store.views.lesson08 import accuracy_sentences

    q8 = _width(Q8, mean_kl=0.00277, max_kl=0.0138, same_top=27, largest_dp=0.0586, dp_position=1, dp_token="'-'",
                dp_reference=0.421, dp_width=0.479, top_probability=0.765)
    acc = _accuracy(_width(Q4), q8, _width(F32))
    text = " ".join(accuracy_sentences(acc, _rows(acc), PROMPT))
    assert "Only smollm2-135m-q4_1 was quantized from the trained weights" in text
    assert ("smollm2-135m-q4_1: the same distribution as smollm2-135m-f32 at all 29 positions, to the last bit (KL 0, "
            "no probability moved): smollm2-135m-f32 holds smollm2-135m-q4_1's values exactly, so they agree by "
            "construction") in text
    # 5.86 points, after the first token of the five of the prompt
    assert ("smollm2-135m-q8_0: KL 0.00277 nats per token against smollm2-135m-f32 (at most 0.0138 at one position), "
            "the same top token at 27 of 29 positions; the largest change of any token's probability is 5.9 points, "
            "'-' after the first 1 of the 5 tokens of 'The capital of France is': 42.1% under smollm2-135m-f32, 47.9% "
            "under smollm2-135m-q8_0.") in text
    assert ("After 'The capital of France is' numpy gives every width the top token ' Paris', as smollm2-135m-f32 "
            "(77.2%): its probability moved under smollm2-135m-q8_0 to 76.5%.") in text
    # 150 ÷ 540 MB = 0.28× the bytes, 60 ÷ 20 = 3× the speed
    assert "smollm2-135m-q8_0 0.28× the bytes and 3× the speed for KL 0.00277" in text
    assert ("What quantizing cost is measured on smollm2-135m-q8_0 alone (smollm2-135m-q4_1 agrees with "
            "smollm2-135m-f32 by construction): the most, KL 0.00277, on smollm2-135m-q8_0") in text

    # q8_0 identical too: no cost measured; q4_1 apart from f32: measured, not by construction.
    same = _accuracy(_width(Q4), _width(Q8), _width(F32))
    text = " ".join(accuracy_sentences(same, _rows(same), PROMPT))
    assert ("smollm2-135m-q8_0: the same distribution as smollm2-135m-f32 at all 29 positions, to the last bit (KL 0, "
            "no probability moved).") in text
    assert "What quantizing cost is measured on smollm2-135m-q8_0 alone" in text and ": none moved any probability." in text
    assert "at the same probability under every width." in text
    apart = _accuracy(_width(Q4, mean_kl=0.01, max_kl=0.02, largest_dp=0.1, dp_width=0.672), _width(F32))
    text = " ".join(accuracy_sentences(apart, _rows(apart), PROMPT))
    assert "by construction" not in text and "smollm2-135m-q4_1: KL 0.01 nats per token" in text
    only_built = _accuracy(_width(Q4), _width(F32))
    assert "agrees with smollm2-135m-f32 by construction: this run measures no cost of quantizing." in \
        " ".join(accuracy_sentences(only_built, _rows(only_built), PROMPT))

    # The top token changes: said so, with each width's.
    moved = _accuracy(_width(Q8, mean_kl=0.2, max_kl=0.5, same_top=20, largest_dp=0.4, top_token="' the'",
                             top_probability=0.4), _width(F32))
    assert ("After 'The capital of France is' numpy's top token changed against smollm2-135m-f32's ' Paris' (77.2%): "
            "smollm2-135m-q8_0 ' the' (40%).") in " ".join(accuracy_sentences(moved, _rows(moved), PROMPT))


def test_the_accuracy_says_what_it_did_not_recompute():
    from bytesup.store.views.lesson08 import accuracy_sentences

    gone = _width(Q8, not_recomputed="The accuracy over smollm2-135m-q8_0.gguf is not recomputed: no file.",
                  positions=None, mean_kl=None, max_kl=None, same_top=None, largest_dp=None, top_token=None,
                  top_probability=None)
    acc = _accuracy(_width(Q4), gone, _width(F32))
    rows = _rows(acc)
    assert rows[1].mean_kl is None and rows[1].same_top is None and rows[1].top_percent is None
    text = " ".join(accuracy_sentences(acc, rows, PROMPT))
    assert "Not recomputed: smollm2-135m-q8_0. The accuracy over smollm2-135m-q8_0.gguf is not recomputed" in text
    # q4_1 agrees by construction, and q8_0, the width that would measure a cost, is missing: said so.
    assert ("Every narrower width recomputed here agrees with smollm2-135m-f32 by construction, so no cost of "
            "quantizing is measured without smollm2-135m-q8_0.") in text
    assert "at the same probability under every width recomputed." in text
    no_ref = _accuracy(*[_width(n, not_recomputed="The accuracy against smollm2-135m-f32 is not recomputed: no file.")
                         for n in (Q4, F32)])
    said = accuracy_sentences(no_ref, _rows(no_ref), PROMPT)
    assert said[-1] == "Not recomputed: The accuracy against smollm2-135m-f32 is not recomputed: no file."


def test_the_server_answers_beside_numpys():
    from bytesup.store.views.lesson08 import server_sentence

    q4, f32 = _width(Q4), _width(F32)
    apart = server_sentence([q4, f32], {Q4: TopAnswer("' Paris'", 77.996), F32: TopAnswer("' Paris'", 77.27)}, f32, PROMPT)
    # each probability as its table prints it, four significant digits, and named by whose arithmetic gave it
    # 77.996 is not 78: its four digits are kept (bytesup.store.render.fmt)
    assert apart is not None and ("the server's against numpy's: smollm2-135m-q4_1 ' Paris' 78.00% against ' Paris' "
                                  "77.2%") in apart
    assert "A top token's probability is given by two computations, named apart: the server's" in apart
    assert "yet the server gave 78.00% and 77.27%: the engine's own arithmetic" in apart
    alike = server_sentence([q4, f32], {Q4: TopAnswer("' Paris'", 77.3), F32: TopAnswer("' Paris'", 77.3)}, f32, PROMPT)
    assert alike is not None and "yet the server gave" not in alike
    assert server_sentence([q4, f32], {}, f32, PROMPT) is None


def test_where_the_largest_change_lies():
    from bytesup.course.quantization import Agreement
    from bytesup.store.facts.lesson08 import width_accuracy

    # Rows 0-4 are the first prompt's five positions, 5-9 the second's: row 7 is after its first 3 tokens.
    agree = Agreement(10, 0.001, 0.004, 9, 0.0123456, 7, 42, 0.5, 0.4876544)
    w = width_accuracy(Q8, "q8.gguf", agree, [(PROMPT, 5), ("The cat sat on the", 5)], "' mat'", ("' Paris'", 0.76543))
    assert (w.dp_prompt, w.dp_position, w.largest_dp, w.top_probability) == ("The cat sat on the", 3, 0.01235, 0.7654)
    with pytest.raises(ValueError, match="beyond the prompts"):
        width_accuracy(Q8, "q8.gguf", dataclasses.replace(agree, dp_row=10), [(PROMPT, 5), ("x", 5)], "", ("", 0.0))


def test_the_servers_note_names_the_shape_and_why():
    from bytesup.llama.shapes import ServerShape
    from bytesup.store.views.lesson08 import servers_note

    note = servers_note(ServerShape.per_slot(None, 4, 256), ServerShape(None, 1, 2048), (2, 4), True)
    assert "4 slots, context 1,024 (256 per slot), all up at once" in note
    assert "also decodes 2 and 4 sequences at once, which takes 4 slots" in note
    assert "has 1 slot, context 2,048: a one-sequence figure here may differ" in note
    old = servers_note(ServerShape.per_slot(None, 1, 256), ServerShape(None, 1, 256), (), False)
    assert "1 slot, context 256, one after another: one sequence at a time takes one slot." in old
    assert old.endswith("has the same shape.")
    assert "run's own server" not in servers_note(ServerShape.per_slot(None, 1, 256), None, (), False)


def test_a_hidden_types_arithmetic_is_left_blank_not_zero():
    """F32's c = 0 (hidden: its models all waited on reading): its row has no arithmetic and no arithmetic share, and
    the note says why; the others keep theirs (q8_0: 134.5e6 × 25 ps = 3.3625 ms, of a step of 30 × 0.08 + 3.3625)."""
    terms = decodetime.Terms(50.0, tuple((k, 0.0 if k == "ALL_F32" else 25.0) for k in TYPES), 0.08, ())
    _, _, rows = _crossover(terms)
    by = {r.model: r for r in rows}
    assert by["f32"].arithmetic_ms is None and by["f32"].arithmetic_share is None
    assert by["q8_0"].arithmetic_ms == pytest.approx(3.3625)
    assert by["q8_0"].arithmetic_share == pytest.approx(100 * 3.3625 / (2.4 + 3.3625))
    notes = model_notes(rows, terms, None, spark_terms(), ())
    assert any("An arithmetic left blank (f32) was hidden under the reading" in n for n in notes)


def test_how_far_a_model_lies_from_its_crossover_by_hand():
    """Crossover 1.5 bytes per parameter. At 0.75: the arithmetic takes 1.5 ÷ 0.75 = 2× the read, 100% longer. At 3:
    the read takes 3 ÷ 1.5 = 2× the arithmetic, 100% longer too (not 1.5 ÷ 3 − 1 = −50%). At the crossover: 0. A
    crossover of 0 (every model of the type hidden under its reading) is no distance: infinitely far."""
    q4 = TypeCrossover("Q4_1", c_ps=60.0, bytes_per_param=1.5, low=1.4, high=1.6)
    assert q4.apart(0.75) == pytest.approx(1.0)
    assert q4.apart(3.0) == pytest.approx(1.0)
    assert q4.apart(1.5) == 0.0
    assert TypeCrossover("F32", c_ps=0.0, bytes_per_param=0.0, low=0.0, high=0.0).apart(4.0) == math.inf


def test_a_side_is_too_close_where_its_terms_differ_by_no_more_than_its_scatter():
    """Read 5 ms and arithmetic 7 ms differ by 2 ms: too close at a scatter of exactly 2 ms, not at 1.9; where any
    of the three is unknown it is never too close."""
    side = Side("m", "Q4_1", 0.7, "arithmetic", read_ms=5.0, arithmetic_ms=7.0, scatter_ms=2.0)
    assert side.too_close
    assert not Side("m", "Q4_1", 0.7, "arithmetic", read_ms=5.0, arithmetic_ms=7.0, scatter_ms=1.9).too_close
    for missing in ({"read_ms": None}, {"arithmetic_ms": None}, {"scatter_ms": None}):
        values = {"read_ms": 5.0, "arithmetic_ms": 5.0, "scatter_ms": 2.0, **missing}
        assert not Side("m", "Q4_1", 0.7, "arithmetic", **values).too_close
