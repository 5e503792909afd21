"""`bytesup check` on recorded lesson runs, on doctored copies and on small constructed results."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from test_compare import L4, assemble_run, edit_manifest, invoke, read_result, write_result

from bytesup.check import checker
from bytesup.check.compare import load_run
from bytesup.errors import BytesupError
from bytesup.paths import REPO_ROOT
from bytesup.store.results import Column, LessonResult, Measurement, Table

ALL = ["01_model_on_disk", "02_tokens_and_embeddings", "03_layer_is_matmul", L4, "05_generating_text",
       "05b_speculative_decoding", "06_attention_kv_cache", "07_hardware_fit", "08_capstone_decode_memory_bound"]
SPARK = "lesson 4 on the DGX Spark"


def claims(report: checker.CheckReport, claim_id: str) -> list[checker.ClaimResult]:
    return [r for r in report.results if r.id == claim_id]


def only(report: checker.CheckReport, claim_id: str) -> checker.ClaimResult:
    found = claims(report, claim_id)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def full_run(tmp_path) -> Path:
    return assemble_run(tmp_path / "run", *ALL)


# --- the recorded runs ----------------------------------------------------------------------

def test_recorded_runs_pass_the_general_claims(full_run):
    report = checker.check_run(load_run(full_run))
    general = [r for r in report.results if r.source == "general"]
    # Arithmetic claims hold exactly on any run of any model.
    for claim_id in ("probability_is_exp_logprob", "top_tokens_match_server", "top8_share_at_most_one", "kv_bytes_formula",
                     "sampler_matches_server", "ridge_point_formula"):
        assert only(report, claim_id).status == checker.PASS, only(report, claim_id)
    # Timing claims: the verdict must follow from the recorded numbers, computed here again.
    l4 = read_result(full_run, L4)
    prefill = l4.measurement("prefill_tokens_per_s_long_prompt").median
    decode = max(l4.measurement("decode_tokens_per_s_short_prompt").median, l4.measurement("decode_tokens_per_s_long_prompt").median)
    assert only(report, "prefill_faster_than_decode").status == (checker.PASS if prefill > decode else checker.FAIL)
    l6 = read_result(full_run, "06_attention_kv_cache")
    depths = sorted((m for m in l6.measurements if m.name == "decode_tokens_per_s_at_depth"), key=lambda m: m.settings["depth"])
    slows = [r for r in claims(report, "decode_slows_with_context") if r.lesson.startswith("06")]
    deep, shallow = depths[-1], depths[0]
    assert slows[0].status == (checker.PASS if deep.median < shallow.median else
                               checker.INCONCLUSIVE if deep.min <= shallow.max else checker.FAIL)
    # Lesson 6's depth line: the checker's own line gives the lesson's held-out errors, to the printed digit.
    depth_claim = only(report, "depth_line_predicts_deeper_depths")
    line_t = l6.table("decode_at_depth_line")
    # Its model (bent at the knee where the run's cache puts one) and each prediction's spread, both computed again.
    held = [(r[0], r[5], r[6]) for r in line_t.rows if r[7] == "held out"]
    assert held and all(f"{d:,}: {e / 100:+.1%} (spread ±{sp / 100:.0%})" in depth_claim.detail
                        for d, e, sp in held), (held, depth_claim)
    # The fixture's host has a 32 MiB cache: d* = 1,456, and 1,536 came no slower than the line below it, so both fit one
    # line through the five fitted depths (the claim is judged here, and left out of the passes below).
    assert "knee d* = 1,456 not shown: depth 1,536 -13.1% (spread ±5%)" in depth_claim.detail
    missed = [sp for _, e, sp in held if abs(e) > 15]
    if not missed:
        assert depth_claim.status == checker.PASS
    else:
        assert depth_claim.status == (checker.INCONCLUSIVE if all(sp > 15 for sp in missed) else checker.FAIL) or (
            depth_claim.status == checker.INCONCLUSIVE and "widest depth" in depth_claim.detail)
    effs = claims(report, "decode_efficiency_in_unit_interval")
    l8 = read_result(full_run, "08_capstone_decode_memory_bound")
    assert len(effs) == 1 + sum(m.name == "decode_efficiency" for m in l8.measurements)
    short, long = l4.measurement("decode_tokens_per_s_short_prompt"), l4.measurement("decode_tokens_per_s_long_prompt")
    slows4 = [r for r in claims(report, "decode_slows_with_context") if r.lesson == L4]
    assert slows4[0].status == (checker.PASS if long.median < short.median else
                                checker.INCONCLUSIVE if long.min <= short.max else checker.FAIL)
    # The decode-time model: check refits it from the samples (tests/test_check_lesson08.py sets it beside the
    # lesson's table); a miss there is about this machine's timings.
    model_claim = only(report, "decode_model_predicts_every_width")
    assert model_claim.status != checker.NA, model_claim
    # The course's title per width, by check's own fits: a pass where they say memory-bound, a fail (a finding about the
    # machine, with the reason) where they say compute-bound, inconclusive where they find it mixed (the F16 models,
    # whose two terms lie within their steps' scatter); lesson 8 shows the same verdicts on this recording.
    shown = {r[0]: r[-1] for r in l8.table("decode_model").rows if r[1] is not None and "published" not in r[0]}
    titles = {r.claim.rsplit(": ", 1)[1]: r for r in claims(report, "decode_memory_bound_per_width")}
    assert set(titles) == set(shown) and len(titles) == 9  # the nine models of the plan the fixture followed
    for name, verdict in shown.items():
        assert titles[name].status == {"memory-bound": checker.PASS, "compute-bound": checker.FAIL,
                                       "mixed": checker.INCONCLUSIVE}[verdict], titles[name]
        assert titles[name].group == "course" and f"lesson 8: {verdict}; check: {verdict}" == titles[name].observed
    # The fixtures were recorded in runs of their own, each with its own server: put together they are no one run's
    # account of the machine, so agreement across lessons does not apply (tests/test_check_consistency.py).
    across = [r for r in general if r.id in ("default_decode_agrees_across_lessons", "prefill_128_agrees_across_lessons")]
    assert len(across) == 2 and all(r.status == checker.NA and "different servers of the run" in r.detail for r in across)
    shown_as_refitted = claims(report, "verdict_per_width_as_refitted")
    assert len(shown_as_refitted) == 9 and {r.status for r in shown_as_refitted} == {checker.PASS}
    general = [r for r in general if r.id not in ("decode_model_predicts_every_width", "decode_memory_bound_per_width",
                                                  "default_decode_agrees_across_lessons", "prefill_128_agrees_across_lessons",
                                                  "depth_line_predicts_deeper_depths")]
    # None is "not applicable": every lesson the claims need is in this run.
    assert [r for r in general if r.status == checker.NA] == []
    # Timings recorded on a busy machine could honestly fail; these recordings pass.
    assert {r.status for r in general} == {checker.PASS}, (
        "a general claim fails on the recorded fixtures: if it is a timing claim, the fixture was "
        f"recorded on a busy machine; re-record it. {[r for r in general if r.status != checker.PASS]}")


def test_the_dgx_spark_figures_do_not_apply_to_the_recorded_model(full_run):
    result = invoke("check", full_run)
    report = json.loads((full_run / "check.json").read_text(encoding="utf-8"))
    # Exit 1 only when a claim fails outside the course's group: on these recordings, at most a claim about this
    # machine's timings. The course's title fails for the widths that wait on the arithmetic here: findings, counted.
    failed = [c for c in report["claims"] if c["status"] == checker.FAIL and c["group"] != "course"]
    assert result.exit_code == (1 if failed else 0), result.output
    assert all(c["source"] == "general" and c["id"] == "decode_model_predicts_every_width" for c in failed), failed
    findings = [c for c in report["claims"] if c["status"] == checker.FAIL and c["group"] == "course"]
    assert findings and {c["id"] for c in findings} == {"decode_memory_bound_per_width"}
    spark = [c for c in report["claims"] if c["source"] == SPARK]
    assert len(spark) == 11  # " Paris" is one figure (its probability is e^logprob)
    assert {c["status"] for c in spark} == {checker.NA}
    model_file = Path(json.loads((full_run / "manifest.json").read_text())["model"]["path"]).name
    for c in spark:
        assert f"model is {model_file}" in c["detail"]
        assert "reference is deepseek-coder-6.7b-instruct Q8_0" in c["detail"]
    md = (full_run / "check.md").read_text(encoding="utf-8")
    assert f"All 11 figures: ➖ not applicable: model is {model_file}" in md
    assert "logprob -0.0756, e^-0.0756 = 92.7%" in md and "| 04_next_token | -0.0756 | ±0.011 |" in md
    assert f"{len(failed) + len(findings)} fail" in md and "Source: LLM Basics, lesson 4" in md


def test_check_json_names_a_reference_file_by_its_place_in_the_clone(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    mine = tmp_path / "elsewhere" / "mine.json"
    mine.parent.mkdir()
    shutil.copy2(REPO_ROOT / "references" / "smollm2-135m-q4_1_cpu.json", mine)
    invoke("check", run, "--reference", REPO_ROOT / "references" / "lesson04_dgx_spark.json", "--reference", mine)
    data = json.loads((run / "check.json").read_text(encoding="utf-8"))
    # The course's file reads the same in every clone; a file outside the clone can only be named where it is.
    assert [r["file"] for r in data["references"]] == ["references/lesson04_dgx_spark.json", str(mine.resolve())]


@pytest.mark.parametrize("check_json", sorted([*REPO_ROOT.glob("outputs/*/check.json"),
                                               *REPO_ROOT.glob("tests/fixtures/**/check.json")]),
                         ids=lambda p: p.parent.name)
def test_the_committed_checks_name_their_references_in_the_clone_not_on_one_machine(check_json):
    data = json.loads(check_json.read_text(encoding="utf-8"))
    files = [r["file"] for r in data["references"]]
    assert files and all(not Path(f).is_absolute() and (REPO_ROOT / f).is_file() for f in files), files
    assert not Path(data["run"]).is_absolute(), data["run"]


@pytest.mark.parametrize("where", ["fact", "table of an older run"])
def test_a_shown_server_probability_that_is_not_the_recorded_one_fails(tmp_path, where):
    run = assemble_run(tmp_path / "run", L4)
    result = read_result(run, L4)
    if where == "fact":
        # The lesson's top_tokens fact is what check reads, set against the server's answers
        # recorded in http/04_next_token.jsonl.
        result.facts["top_tokens"]["top8_fibonacci"]["tokens"][2]["server_probability"] *= 1.01
    else:
        # An older run (no top_tokens fact): its table is read by column name instead.
        del result.facts["top_tokens"]
        table = result.table("top8_fibonacci")
        p = [c.name for c in table.columns].index("server's prob")
        table.rows[2][p] *= 1.01
    write_result(run, result)
    cli = invoke("check", run)
    assert cli.exit_code == 1
    data = json.loads((run / "check.json").read_text(encoding="utf-8"))
    claims_by_id = {c["id"]: c for c in data["claims"]}
    shown = claims_by_id["top_tokens_match_server"]
    assert shown["status"] == checker.FAIL
    assert "top8_fibonacci rank 3 ' <': server probability" in shown["detail"] and "0.01" in shown["observed"]
    # The server's own numbers, read from the recording, still agree with e^logprob.
    assert claims_by_id["probability_is_exp_logprob"]["status"] == checker.PASS
    assert "recorded in http/04_next_token.jsonl" in claims_by_id["probability_is_exp_logprob"]["detail"]
    assert "❌ fail" in (run / "check.md").read_text(encoding="utf-8")


def test_a_top8_share_from_the_tables_when_nothing_was_recorded(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    shutil.rmtree(run / "http")
    result = read_result(run, L4)
    del result.facts["top_tokens"]  # an older run: no fact, so the tables are read by column name
    table = result.table("top8_cat_sat")
    cols = [c.name for c in table.columns]
    table.rows[0][cols.index("logprob")] = 0.0           # certainty, on top of seven others
    table.rows[0][cols.index("e^logprob")] = 100.0
    table.rows[0][cols.index("server's prob")] = 100.0
    write_result(run, result)
    report = checker.check_run(load_run(run))
    share = only(report, "top8_share_at_most_one")
    assert share.status == checker.FAIL and "the lesson's tables" in share.detail
    assert only(report, "probability_is_exp_logprob").status == checker.PASS
    assert only(report, "top_tokens_match_server").status == checker.NA


def test_missing_lessons_are_named_not_crashed_on(tmp_path):
    run = assemble_run(tmp_path / "run", "01_model_on_disk")
    report = checker.check_run(load_run(run))
    # Course arithmetic needs no lesson; every claim that needs one is not applicable.
    assert {r.status for r in report.results} == {checker.NA}
    details = " ".join(r.detail for r in report.results)
    for lesson in ("04_next_token", "05_generating_text", "06_attention_kv_cache", "07_hardware_fit"):
        assert f"lesson {lesson} not in this run" in details
    assert invoke("check", run).exit_code == 0


def test_a_failed_lesson_is_reported_as_such(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    (run / f"{L4}.json").unlink()
    edit_manifest(run, lambda m: m["lessons"][L4].update(status="failed", error="ServerTimeout: too slow"))
    report = checker.check_run(load_run(run))
    claim = only(report, "prefill_faster_than_decode")
    assert claim.status == checker.NA and "did not finish" in claim.detail and "too slow" in claim.detail


def test_check_on_a_folder_that_is_not_a_run(tmp_path):
    result = invoke("check", tmp_path)
    assert result.exit_code == 1 and "is not a bytesup run folder" in result.output


# --- references in scope ------------------------------------------------------------------

def as_if_on_the_spark(run: Path) -> None:
    """Doctor a run's identity into the published scope (model, GPU, engine, flags)."""
    def edit(m):
        m["model"] = {"path": "/models/deepseek-coder-6.7b-instruct.Q8_0.gguf", "size_bytes": 7_161_089_728, "sha256": "f" * 64}
        m["host"]["gpus"] = ["NVIDIA GB10, [N/A], 580.95.05"]
        m["engine"]["engine"] = "llama-server"
    edit_manifest(run, edit)


def test_in_scope_figures_are_compared_with_their_tolerance(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    as_if_on_the_spark(run)
    result = read_result(run, L4)
    del result.facts["top_tokens"]  # an older run's tables, read by column name
    table = result.table("top8_capital_of_france")
    cols = [c.name for c in table.columns]
    table.rows[0][cols.index("token")] = repr(" Paris")
    table.rows[0][cols.index("logprob")] = -0.08
    table.rows[0][cols.index("e^logprob")] = 100 * math.exp(-0.08)   # 92.3%: within 1 point of 92.7
    speed = result.measurement("decode_tokens_per_s_short_prompt")
    speed.samples, speed.median, speed.min, speed.max = [30.0, 31.0], 30.5, 30.0, 31.0   # 8% under 33.2: within 10%
    long = result.measurement("decode_tokens_per_s_long_prompt")
    long.samples, long.median, long.min, long.max = [20.0, 21.0], 20.5, 20.0, 21.0       # 31% under 29.6: fails
    write_result(run, result)
    report = checker.check_run(load_run(run))
    got = {r.id: r for r in report.results if r.source == SPARK}
    assert got["paris_logprob"].status == checker.PASS and got["paris_logprob"].observed == "-0.08"
    assert "paris_probability" not in got  # one figure: the probability is e^logprob
    assert got["decode_short"].status == checker.PASS
    assert got["decode_long"].status == checker.FAIL
    assert got["decode_long"].observed == "20.5 tokens/s" and got["decode_long"].expected == "29.6 tokens/s"
    assert got["decode_long"].tolerance == "±10% of the published value" and "-9.1" in got["decode_long"].detail
    # The tiny model's tables hold no " mat": the figure cannot be found, so it does not apply.
    assert got["mat_probability"].status == checker.NA and "no row with token ' mat'" in got["mat_probability"].detail
    # The prefill figure is for a 1,921-token prompt: the recorded run used the same length.
    assert got["prefill_1921"].status in (checker.PASS, checker.FAIL)
    assert got["prefill_1921"].expected == "2,379 and 2,408 tokens/s (median 2,394)"
    # A published figure that does not hold on the course's own machine is a finding, not a broken run: the exit status
    # follows the other groups' fails alone.
    assert not checker.breaks(got["decode_long"])
    broken = [r.claim for r in report.results if checker.breaks(r)]
    assert invoke("check", run).exit_code == (1 if broken else 0), broken


def test_scope_differences_name_each_difference(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    as_if_on_the_spark(run)
    edit_manifest(run, lambda m: m["engine"]["flags"].update({"--ctx-size": "4096"}))
    ref = checker.load_reference(checker.references_dir() / "lesson04_dgx_spark.json")
    diffs = checker.scope_differences(load_run(run), ref.scope)
    assert diffs == ["server flags differ: --ctx-size 4096 (reference 2048)"]
    edit_manifest(run, lambda m: m["host"].update(gpus=[]))
    diffs = checker.scope_differences(load_run(run), ref.scope)
    assert diffs[0].startswith("hardware is ") and diffs[0].endswith("no GPU, reference is NVIDIA DGX Spark (GB10)")


def test_a_broken_reference_file_gets_a_clear_message(tmp_path, full_run):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "source": "y", "scope": {}, "figures": []}))
    with pytest.raises(BytesupError, match="scope.model"):
        checker.load_reference(bad)
    result = invoke("check", full_run, "--reference", bad)
    assert result.exit_code == 1 and "does not have the reference layout" in result.output
    assert invoke("check", full_run, "--reference", tmp_path / "none.json").exit_code == 1


def test_the_shipped_references_load():
    files = checker.default_references()
    assert files, "references/*.json missing"
    for path in files:
        ref = checker.load_reference(path)
        assert ref.source and ref.figures
        for fig in ref.figures:
            assert fig.measurement or fig.fact or fig.table
    # The shipped files address lesson 4's numbers by fact; their probabilities are in percent.
    for path in files:
        for fig in checker.load_reference(path).figures:
            assert fig.table is None, (path.name, fig.id)
            if fig.fact == "top_tokens" and fig.field == "probability":
                assert fig.unit == "%", (path.name, fig.id)


# --- constructed results: each claim's failing side -------------------------------------------

def m(name: str, unit: str, samples: list[float], **kw) -> Measurement:
    return Measurement.of(name, unit, samples, **kw)


def lesson(lesson_id: str, measurements=(), tables=(), host_values=None) -> LessonResult:
    return LessonResult(lesson_id=lesson_id, title=lesson_id, started_at="2026-01-01T00:00:00+00:00",
                        finished_at="2026-01-01T00:00:01+00:00", measurements=list(measurements),
                        tables=list(tables), host_values=host_values or {})


def run_of(tmp_path: Path, *results: LessonResult):
    folder = tmp_path / "made"
    folder.mkdir(exist_ok=True)
    for r in results:
        write_result(folder, r)
    return load_run(folder)


def depth(d: int, samples: list[float]) -> Measurement:
    return m("decode_tokens_per_s_at_depth", "tokens/s", samples, settings={"depth": d}, higher_is_better=True)


@pytest.mark.parametrize("shallow,deep,status", [
    ([100, 110], [50, 60], checker.PASS),        # slower at depth
    ([100, 110], [105, 130], checker.INCONCLUSIVE),  # faster median, ranges overlap: cannot tell
    ([100, 110], [120, 130], checker.FAIL),      # every deep sample is faster
    # one stalled deep sample (7.4 among 120s) is an outlier: it cannot make the ranges overlap
    ([100, 101, 102, 100, 101], [120, 121, 122, 7.4, 121], checker.FAIL),
])
def test_decode_slows_with_context(tmp_path, shallow, deep, status):
    run = run_of(tmp_path, lesson("06_attention_kv_cache", [depth(0, shallow), depth(512, [80.0]), depth(1900, deep)]))
    claim = only(checker.check_run(run, []), "decode_slows_with_context")
    assert claim.status == status
    assert "depth 1,900" in claim.observed and "depth 0" in claim.expected


def test_kv_bytes_formula_on_an_older_runs_table(tmp_path):
    """A run without the kv_examples fact: rows read from a table laid out with KV columns."""
    hp = {"model_info": {"hyperparameters": {"n_layer": 32, "n_head": 32, "n_head_kv": 32, "head_dim": 128}}}
    names = [("model", ""), ("layers", ""), ("KV heads", ""), ("head width", ""), ("bytes per element", ""),
             ("per token", "bytes"), ("per token", "KiB")]
    table = Table(name="kv_cache_size", title="KV", columns=[Column(name=n, unit=u) for n, u in names],
                  rows=[["70B example", 80, 8, 128, 2.0, 327680, 320.0]])   # 2 × 80 × 8 × 128 × 2 = 327,680
    f16 = {"cache_type_k": "f16", "cache_type_v": "f16"}
    # 2 × 32 × 32 × 128 × 2 = 524,288 bytes
    good = lesson("06_attention_kv_cache", [m("kv_bytes_per_token", "bytes", [524288], settings=f16)], [table], hp)
    assert only(checker.check_run(run_of(tmp_path, good), []), "kv_bytes_formula").status == checker.PASS
    # K in q8_0 (34 bytes per 32), V in f16: 32 × 32 × 128 × (1.0625 + 2) = 131,072 × 3.0625 = 401,408
    q8 = lesson("06_attention_kv_cache", [m("kv_bytes_per_token", "bytes", [401408],
                                            settings={"cache_type_k": "q8_0", "cache_type_v": "f16"})], [], hp)
    assert only(checker.check_run(run_of(tmp_path, q8), []), "kv_bytes_formula").status == checker.PASS
    table.rows[0][5] = 32768    # the podcast's figure
    bad = lesson("06_attention_kv_cache", [], [table], hp)
    claim = only(checker.check_run(run_of(tmp_path, bad), []), "kv_bytes_formula")
    assert claim.status == checker.FAIL and "32,768" in claim.observed and "327,680" in claim.expected


def test_sampler_numbers_of_an_older_runs_table(tmp_path):
    """A run without the sampler_comparisons fact: the numbers of its table, never its verdict text, become the fact
    when the run is loaded (results.tables_to_facts)."""
    names = [("setting", ""), ("same tokens", ""), ("max |Δp| / p", ""), ("tolerance", "relative"), ("verdict", "")]
    cols = [Column(name=n, unit=u) for n, u in names]

    def claim_of(rows):
        table = Table(name="sampler_check", title="s", columns=cols, rows=rows)
        return only(checker.check_run(run_of(tmp_path, lesson("05_generating_text", tables=[table])), []), "sampler_matches_server")

    claim = claim_of([["greedy", True, 0.0, 1e-5, "agree"], ["top_k 40", None, None, 1e-5, "not checked"]])
    assert claim.status == checker.PASS and "1 of 1" in claim.observed and "1 not checked" in claim.detail
    claim = claim_of([["top_p 0.9", True, 3e-3, 1e-5, "agree"]])
    assert claim.status == checker.FAIL and "0.003 > tolerance" in claim.detail
    # Numbers within the tolerance pass whatever the verdict says.
    claim = claim_of([["top_p 0.9", True, 2e-6, 1e-5, "disagree"]])
    assert claim.status == checker.PASS and "from fact sampler_comparisons" in claim.detail


@pytest.mark.parametrize("eff,unit,bandwidth,status", [
    ([0.7, 0.8], "fraction", None, checker.PASS),
    ([95.0, 105.0], "%", None, checker.PASS),            # median 100%: at most 1
    ([1.05, 1.2], "fraction", [20.0, 22.0, 25.0], checker.PASS),   # bandwidth max/median 1.136 allows 1.05
    ([1.3, 1.4], "fraction", [20.0, 22.0, 25.0], checker.INCONCLUSIVE),   # 1.3 ÷ 1.136 = 1.14: faster than any sample
    ([1.25, 1.4], "fraction", [20.0, 22.0, 25.0, 30.0], checker.PASS),    # max/median 30 ÷ 23.5 = 1.277: 1.25 ÷ 1.277 = 0.979
    ([1.3, 1.4], "fraction", [20.0, 22.0, 25.0, 30.0], checker.INCONCLUSIVE),   # 1.3 ÷ 1.277 = 1.018
    ([-0.1, -0.2], "fraction", None, checker.FAIL),
    ([-0.1, -0.2], "fraction", [20.0, 22.0, 25.0], checker.FAIL),
])
def test_decode_efficiency_between_0_and_1(tmp_path, eff, unit, bandwidth, status):
    ms = [m("decode_efficiency", unit, eff, higher_is_better=True)]
    if bandwidth:
        ms.append(m("read_bandwidth_gb_per_s", "GB/s", bandwidth))
    report = checker.check_run(run_of(tmp_path, lesson("04_next_token", ms)), [])
    claim = next(r for r in claims(report, "decode_efficiency_in_unit_interval") if r.lesson == "04_next_token")
    assert claim.status == status


def test_decode_efficiency_allows_the_fastest_sample_of_every_bandwidth_reading(tmp_path):
    # The ceiling is the first reading's median, 22 GB/s; the reading after the lessons once read 28.6 GB/s, so
    # efficiency may reach 28.6 ÷ 22 = 1.3: a lowest sample of 1.25 passes, where the first reading alone
    # (max 25 ÷ 22 = 1.136) would leave it above 1. An efficiency above every reading says so in words.
    def claim_of(eff, after):
        ms = [m("decode_efficiency", "fraction", eff, higher_is_better=True),
              m("read_bandwidth_gb_per_s", "GB/s", [20.0, 22.0, 25.0]), m("read_bandwidth_gb_per_s", "GB/s", after)]
        report = checker.check_run(run_of(tmp_path, lesson("04_next_token", ms)), [])
        return next(r for r in claims(report, "decode_efficiency_in_unit_interval") if r.lesson == "04_next_token")
    assert claim_of([1.25, 1.3], [19.0, 21.0, 28.6]).status == checker.PASS
    above = claim_of([1.25, 1.3], [19.0, 21.0, 26.0])
    assert above.status == checker.INCONCLUSIVE and "faster than any sample" in above.detail
    assert "max/median 1.18" in above.detail     # 26 ÷ 22


def test_ridge_point_is_peak_over_bandwidth(tmp_path):
    ms = [m("matmul_peak_gflop_per_s", "GFLOP/s", [90.0, 100.0]), m("read_bandwidth_gb_per_s", "GB/s", [20.0, 25.0])]
    ok = lesson("07_hardware_fit", ms + [m("ridge_point_flops_per_byte", "FLOPs/byte", [95.0 / 22.5])])
    assert only(checker.check_run(run_of(tmp_path, ok), []), "ridge_point_formula").status == checker.PASS
    wrong = lesson("07_hardware_fit", ms + [m("ridge_point_flops_per_byte", "FLOPs/byte", [95.0 / 22.5 * 8])])   # bits, not bytes
    assert only(checker.check_run(run_of(tmp_path, wrong), []), "ridge_point_formula").status == checker.FAIL


# --- the default model's own reference -------------------------------------------------------

OWN = "lesson 4 on SmolLM2-135M-Instruct Q4_1 (bytesup's own reference, CPU)"
OWN_FILE = Path(__file__).resolve().parents[1] / "references" / "smollm2-135m-q4_1_cpu.json"


def test_the_default_models_reference_applies_to_a_default_run_and_passes(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    ref = checker.load_reference(OWN_FILE)
    assert ref.scope.model.sha256 == json.loads((run / "manifest.json").read_text())["model"]["sha256"]
    results = checker.check_reference(load_run(run), ref)
    assert len(results) == 16 and all(r.status == checker.PASS for r in results), [r for r in results if r.status != checker.PASS]
    paris = next(r for r in results if r.id == "paris_top_token")
    assert paris.observed == "' Paris'" and paris.expected == "' Paris'"


def _doctor_top8(run: Path, table: str, edit) -> None:
    """Edit a top-eight table as an older run (no top_tokens fact) would show it."""
    result = read_result(run, L4)
    del result.facts["top_tokens"]
    t = next(t for t in result.tables if t.name == table)
    edit(t.rows)
    write_result(run, result)


def _doctor_top_tokens(run: Path, key: str, edit) -> None:
    """Edit the top_tokens fact lesson 4 states, which check reads before any table."""
    result = read_result(run, L4)
    edit(result.facts["top_tokens"][key]["tokens"])
    write_result(run, result)


def test_a_doctored_fact_fails_the_reference(tmp_path):
    ref = checker.load_reference(OWN_FILE)
    run = assemble_run(tmp_path / "run", L4)
    # ' Paris' (77.19% recorded) pushed to rank 2 with ' the' at rank 1, and two of the eight replaced.
    def swap(tokens):
        tokens[0]["rank"], tokens[1]["rank"] = 2, 1
        tokens[6]["token"], tokens[7]["token"] = "' Rome'", "' Berlin'"
    _doctor_top_tokens(run, "top8_capital_of_france", swap)
    by_id = {r.id: r for r in checker.check_reference(load_run(run), ref)}
    assert by_id["paris_top_token"].status == checker.FAIL and "' the'" in by_id["paris_top_token"].detail
    assert by_id["paris_top8"].status == checker.FAIL
    assert by_id["cat_sat_top_token"].status == checker.PASS


def test_a_doctored_default_run_fails_the_reference(tmp_path):
    ref = checker.load_reference(OWN_FILE)
    run = assemble_run(tmp_path / "run", L4)
    # ' Paris' pushed down to rank 2 and ' the' made the top token; one more token of the eight replaced.
    def swap(rows):
        rows[0][0], rows[1][0] = 2, 1
        rows[7][1] = "' Berlin'"
        rows[6][1] = "' Rome'"
    _doctor_top8(run, "top8_capital_of_france", swap)
    by_id = {r.id: r for r in checker.check_reference(load_run(run), ref)}
    assert by_id["paris_top_token"].status == checker.FAIL and "' the'" in by_id["paris_top_token"].detail
    assert by_id["paris_top_probability"].status == checker.FAIL  # the top token's probability is now ' the''s
    assert by_id["paris_top8"].status == checker.FAIL  # two of the eight absent, one allowed
    assert by_id["cat_sat_top_token"].status == checker.PASS


def test_one_absent_token_of_eight_is_within_the_tolerance(tmp_path):
    ref = checker.load_reference(OWN_FILE)
    run = assemble_run(tmp_path / "run", L4)
    _doctor_top8(run, "top8_cat_sat", lambda rows: rows[7].__setitem__(1, "' dog'"))
    by_id = {r.id: r for r in checker.check_reference(load_run(run), ref)}
    assert by_id["cat_sat_top8"].status == checker.PASS and "' dog'" not in by_id["cat_sat_top8"].detail
    assert "absent" in by_id["cat_sat_top8"].detail


def test_the_reference_is_out_of_scope_for_another_file_or_a_gpu_host(tmp_path):
    ref = checker.load_reference(OWN_FILE)
    run = assemble_run(tmp_path / "run", L4)
    edit_manifest(run, lambda m: m["model"].update(sha256="0" * 64))
    assert all(r.status == checker.NA and "sha256 000000000000" in r.detail for r in checker.check_reference(load_run(run), ref))
    run2 = assemble_run(tmp_path / "run2", L4)
    edit_manifest(run2, lambda m: m["host"].update(gpus=["NVIDIA H200"]))
    assert all(r.status == checker.NA and "reference is any CPU" in r.detail for r in checker.check_reference(load_run(run2), ref))


def test_efficiency_at_most_one_skips_cache_resident_points(tmp_path):
    ms = [m("decode_efficiency", "%", [130.0, 140.0], settings={"preset": "tiny", "cache_resident": True}),
          m("decode_efficiency", "%", [60.0, 70.0], settings={"preset": "big", "cache_resident": False})]
    report = checker.check_run(run_of(tmp_path, lesson("08_capstone_decode_memory_bound", ms)), [])
    got = {r.claim: r for r in claims(report, "decode_efficiency_in_unit_interval") if r.lesson.startswith("08")}
    statuses = sorted(r.status for r in got.values())
    assert statuses == [checker.NA, checker.PASS]
    assert any("cache-resident" in r.detail for r in got.values() if r.status == checker.NA)


def test_reference_tolerances_are_consistent():
    ref = checker.load_reference(checker.references_dir() / "lesson04_dgx_spark.json")
    fig = {f.id: f for f in ref.figures}
    # The ratio's tolerance covers its parts' worst case: (1 + prefill's) ÷ (1 − decode's) − 1.
    tp, td = fig["prefill_1921"].tolerance.relative, fig["decode_short"].tolerance.relative
    assert fig["prefill_decode_ratio"].tolerance.relative == pytest.approx((1 + tp) / (1 - td) - 1, abs=1e-3)
    # The ceiling is the arithmetic 273 ÷ 7.16, not the printed 39; efficiency compares like with like.
    assert fig["decode_ceiling"].published == pytest.approx(273 / 7.16, abs=0.005)
    assert fig["decode_efficiency"].published == pytest.approx(100 * 33.2 / (273 / 7.16), abs=0.005)
    assert fig["decode_efficiency"].tolerance.relative == fig["decode_short"].tolerance.relative
    # One " Paris" figure; its logprob tolerance is about ±1 percentage point of the 92.7%.
    assert "paris_probability" not in fig
    t = fig["paris_logprob"].tolerance.absolute
    assert 100 * (math.exp(-0.0756 + t) - math.exp(-0.0756)) == pytest.approx(1.0, abs=0.05)


# --- lesson 6's depth line ---------------------------------------------------------------------

def depth_line_lesson(deep_ms: dict[int, float], scatter: float = 0.0) -> LessonResult:
    """Decode at depths 0, 256, 512 and 1,024 on the line t = 10 + 0.01 × d ms (10, 12.56, 15.12 and 20.24 ms, five
    samples each, the middle three spread by `scatter` of the step), and the deeper depths at `deep_ms`."""
    steps = {d: 10 + 0.01 * d for d in (0, 256, 512, 1024)} | deep_ms
    ms = [(1 - scatter, 1 - scatter / 2, 1.0, 1 + scatter / 2, 1 + scatter)]
    return lesson("06_attention_kv_cache", [depth(d, [1e3 / (t * k) for k in ms[0]]) for d, t in steps.items()]
                  ).model_copy(update={"facts": {"decode_at_depth": {
                      "t0_ms": 10.0, "slope_ms_per_position": 0.01, "fit_until": 1024, "tolerance": 0.15, "held_out": [],
                      "bandwidth_gbs": None, "kv_read_ms_per_position": None}}})


@pytest.mark.parametrize("k,status", [(1.0, checker.PASS), (1.1, checker.PASS), (1.16, checker.FAIL), (0.84, checker.FAIL)])
def test_depth_line_claim_fails_beyond_its_tolerance(tmp_path, k, status):
    """The line through the shallow half puts depth 1,536 at 10 + 15.36 = 25.36 ms (measured so) and 1,904 at
    29.04 ms, measured k × that: predicted ÷ measured tokens/s − 1 = k − 1, so +10% passes and ±16% fail."""
    result = depth_line_lesson({1536: 25.36, 1904: 29.04 * k})
    claim = only(checker.check_run(run_of(tmp_path, result), []), "depth_line_predicts_deeper_depths")
    assert claim.status == status, claim
    assert "t(0) = 10 ms, s = 10 µs per position, fitted on depths 0, 256, 512, 1,024" in claim.detail
    assert f"1,904: {k - 1:+.1%}" in claim.detail and claim.tolerance == "±15%"


def test_depth_line_claim_numbers_by_hand():
    """Measured steps 1.16 × and 0.84 × the line's 29.04 ms at depth 1,904: +16.0% and −16.0%, outside ±15%; 1.1 ×:
    +10.0%, inside. A planted tolerance of 1e9 turns the first two into passes, so these fail then."""
    from bytesup.check.claims import depth_line_check
    base = {d: [1e3 / (10 + 0.01 * d)] for d in (0, 256, 512, 1024)}
    for k, status in ((1.16, checker.FAIL), (0.84, checker.FAIL), (1.1, checker.PASS)):
        st, observed, _ = depth_line_check({**base, 1904: [1e3 / (29.04 * k)]}, 1024)
        assert st == status and observed == f"furthest depth 1,904 {k - 1:+.1%}", (k, st, observed)


@pytest.mark.parametrize("k,spread,status", [(1.167, 0.10, checker.INCONCLUSIVE), (0.818, 0.10, checker.INCONCLUSIVE),
                                              (1.30, 0.10, checker.FAIL), (1.167, 0.0, checker.FAIL)])
def test_a_miss_within_its_own_spread_of_the_tolerance_cannot_fail(k, spread, status):
    """The line through 0–1,024 puts 1,904 at 29.04 ms; measured k × that, its five samples an interquartile range of
    `spread` × the step (the fitted depths tight), so its prediction's spread is ±spread. +16.7% and −18.2% with ±10%
    lie beyond ±15% by less than 10%: inconclusive, with the reason (the 2-core runs of 2026-12-06). +30% lies 20%
    beyond, more than its spread, and +16.7% with tight samples 1.7% beyond: failures."""
    from bytesup.check.claims import depth_line_check
    steps = {d: 10 + 0.01 * d for d in (0, 256, 512, 1024)} | {1536: 25.36, 1904: 29.04 * k}
    st, observed, detail = depth_line_check(knee_samples(steps, {1904: spread}), 1024)
    assert (st, observed) == (status, f"furthest depth 1,904 {k - 1:+.1%}"), detail
    assert f"1,904: {k - 1:+.1%} (spread ±{spread:.0%})" in detail
    reason = (f"depth 1,904 misses by {k - 1:+.1%}, beyond ±15% by less than its prediction spread ±10%: its samples "
              "reach back within the tolerance, and no single sample may make a fail: inconclusive")
    assert (reason in detail) is (status == checker.INCONCLUSIVE), detail


def test_depth_line_claim_cannot_tell_from_scattered_samples(tmp_path):
    """The same +16% miss, with each depth's samples spread by 20% (interquartile range ÷ median 20%, wider than
    ±15%): inconclusive. Too few depths: not applicable."""
    result = depth_line_lesson({1904: 29.04 * 1.16}, scatter=0.4)
    claim = only(checker.check_run(run_of(tmp_path, result), []), "depth_line_predicts_deeper_depths")
    assert claim.status == checker.INCONCLUSIVE and "inconclusive" in claim.detail, claim
    from bytesup.check.claims import depth_line_check
    assert depth_line_check({0: [100.0], 2000: [50.0]}, 1024)[0] == checker.NA
    assert depth_line_check({0: [100.0], 256: [90.0]}, 1024)[0] == checker.NA  # nothing beyond the fitted half


# --- lesson 6's knee: the cost per position changes where the KV cache outgrows the last-level cache ------------------

KV_PER_POSITION = 23040.0  # SmolLM2: 30 blocks × 3 KV heads × 64 × 2 (K and V) × 2 bytes


def knee_ms(d: int, knee: float, s2: float = 0.03) -> float:
    """10 ms, 0.01 ms more per position up to the knee, s2 beyond it."""
    return 10 + 0.01 * min(d, knee) + s2 * max(0.0, d - knee)


def knee_samples(steps: dict[int, float], spread: dict[int, float] | None = None) -> dict[int, list[float]]:
    """Five tokens/s samples per depth, each step × (1 ± spread, 1 ± spread/2, 1): an interquartile range of
    spread × the step."""
    out = {}
    for d, t in steps.items():
        k = (spread or {}).get(d, 0.0)
        out[d] = [1e3 / (t * f) for f in (1 - 2 * k, 1 - k / 2, 1.0, 1 + k / 2, 1 + 2 * k)]
    return out


def knee_lesson(steps: dict[int, float], cache_bytes: float | None) -> LessonResult:
    kv = m("kv_bytes_per_token", "bytes", [KV_PER_POSITION], higher_is_better=None)
    return lesson("06_attention_kv_cache", [kv] + [depth(d, s) for d, s in knee_samples(steps).items()]
                  ).model_copy(update={"facts": {"decode_at_depth": {
                      "t0_ms": 10.0, "slope_ms_per_position": 0.01, "fit_until": 1024, "tolerance": 0.15, "held_out": [],
                      "bandwidth_gbs": None, "kv_read_ms_per_position": None, "cache_bytes": cache_bytes}}})


DEPTHS = (0, 256, 512, 1024, 1536, 1904)


def test_the_knee_model_predicts_where_the_line_fails(tmp_path):
    """Steps bent at 1,200 positions: 10, 12.56, 15.12 and 20.24 ms up to 1,024, then 22 + 0.03 × 336 = 32.08 and
    22 + 0.03 × 704 = 43.12 ms. The cache of 1,200 × 23,040 bytes puts d* there: t(0) and s₁ from 0–1,024, s₂ =
    10.08 ÷ 336 = 0.03 from 1,536, and 1,904 predicted at 43.12 ms exactly. The line alone predicts 10 + 19.04 =
    29.04 ms: 43.12 ÷ 29.04 − 1 = +48.5%, a failure."""
    steps = {d: knee_ms(d, 1200) for d in DEPTHS}
    claim = only(checker.check_run(run_of(tmp_path, knee_lesson(steps, 1200 * KV_PER_POSITION)), []),
                 "depth_line_predicts_deeper_depths")
    assert claim.status == checker.PASS, claim
    # 1,536 came 32.08 ÷ 25.36 − 1 = +26.5% against the line through the depths below d*: the knee shows
    assert ("knee d* = 1,200 shown: depth 1,536 +26.5% (spread ±0%) against the line through the depths below it; "
            "t(0) = 10 ms, s₁ = 10 µs per position, fitted on depths 0, 256, 512, 1,024") in claim.detail
    assert "s₂ = 30 µs per position past d*, fitted on depths 1,536; held out: 1,904: +0.0%" in claim.detail
    assert "d* = 27,648,000 bytes of last-level cache ÷ 23,040 KV bytes per position" in claim.expected
    (tmp_path / "line").mkdir()
    (tmp_path / "big").mkdir()
    without = only(checker.check_run(run_of(tmp_path / "line", knee_lesson(steps, None)), []),
                   "depth_line_predicts_deeper_depths")
    assert without.status == checker.FAIL and without.observed == "furthest depth 1,904 +48.5%", without
    # a cache so large that d* lies past every depth: the line, and its failure
    big = only(checker.check_run(run_of(tmp_path / "big", knee_lesson(steps, 4000 * KV_PER_POSITION)), []),
               "depth_line_predicts_deeper_depths")
    assert big.status == checker.FAIL and "knee d* = 4,000 beyond the deepest depth or below the second, so the line" in big.detail
    # a cache so small that only depth 0 lies below d*: no s₁ to fit, so the line too (lesson 6 falls back the same way)
    from bytesup.check.claims import depth_line_check
    st, observed, detail = depth_line_check(knee_samples(steps), 1024, knee=100.0)
    assert (st, observed) == (checker.FAIL, "furthest depth 1,904 +48.5%") and detail.startswith("knee d* = 100 beyond")


def test_the_knee_model_fails_beyond_its_tolerance():
    """The same knee, depth 1,904 measured 1.2 × 43.12 ms with tight samples: +20.0%, a failure; 1.1 ×: a pass."""
    from bytesup.check.claims import depth_line_check
    steps = {d: knee_ms(d, 1200) for d in DEPTHS}
    for k, status in ((1.2, checker.FAIL), (0.8, checker.FAIL), (1.1, checker.PASS)):
        st, observed, _ = depth_line_check(knee_samples({**steps, 1904: 43.12 * k}), 1024, knee=1200.0)
        assert (st, observed) == (status, f"furthest depth 1,904 {k - 1:+.1%}"), k


def test_the_knee_model_cannot_tell_without_a_depth_past_the_knee_fitted():
    """d* at 1,700: only 1,904 lies past it, so no depth there is fitted and s₂ is unknown: inconclusive with the
    reason, never a failure, however far 1,904 lies from the line. 1,536, below the knee, is still predicted by the
    line, and a miss there with tight samples is a failure."""
    from bytesup.check.claims import depth_line_check
    steps = {d: knee_ms(d, 1700, s2=0.2) for d in DEPTHS}
    st, observed, detail = depth_line_check(knee_samples(steps), 1024, knee=1700.0)
    assert st == checker.INCONCLUSIVE and observed.startswith("furthest depth 1,536 "), detail
    assert "s₁ = 10 µs per position, fitted on depths 0, 256, 512, 1,024; no fitted" in detail
    assert "depth 1,904 past the knee cannot be predicted: no depth past d* was fitted" in detail
    assert "no fitted depth past d*, so s₂ is unknown" in detail
    st, observed, _ = depth_line_check(knee_samples({**steps, 1536: 25.36 * 1.2}), 1024, knee=1700.0)
    assert (st, observed) == (checker.FAIL, "furthest depth 1,536 +20.0%")


def test_the_knee_model_cannot_tell_from_a_short_lever():
    """d* at 1,500, 36 positions before 1,536, the one depth that fixes s₂, steep past it (0.1 ms per position): 25 +
    3.6 = 28.6 ms against the line's 25.36 below d*, +12.8%, so the knee shows, with tight samples and with 1,536's
    spread by 4% alike. 1,904 measured 1.3 × its prediction of 25 + 40.4 = 65.4 ms. With tight samples that is a
    failure. With 1,536's samples spread by 4% (its interquartile range; every depth's under ±15%), s₂ moves by 0.04 ×
    28.6 ÷ 36 and the prediction at 1,904 by 404 ÷ 36 = 11.2× that, 12.8 ms of 65.4: a spread of ±20%, so the miss is
    inconclusive."""
    from bytesup.check.claims import depth_line_check
    steps = {d: knee_ms(d, 1500, s2=0.1) for d in DEPTHS} | {1904: knee_ms(1904, 1500, s2=0.1) * 1.3}
    st, observed, detail = depth_line_check(knee_samples(steps), 1024, knee=1500.0)
    assert (st, observed) == (checker.FAIL, "furthest depth 1,904 +30.0%")
    assert detail.startswith("knee d* = 1,500 shown: depth 1,536 +12.8% (spread ±0%)")
    st, observed, detail = depth_line_check(knee_samples(steps, {1536: 0.04}), 1024, knee=1500.0)
    assert (st, observed) == (checker.INCONCLUSIVE, "furthest depth 1,904 +30.0%"), detail
    assert detail.startswith("knee d* = 1,500 shown: depth 1,536 +12.8% (spread ±4%)")
    assert "1,904: prediction spread ±20%" in detail and "inconclusive" in detail


@pytest.mark.parametrize("steps", [
    {d: knee_ms(d, 1200) for d in DEPTHS},                                    # steeper past d*: the knee
    {d: knee_ms(d, 1200, s2=0.0) for d in DEPTHS},                            # flat past d*: one line
    {d: knee_ms(d, 1200, s2=0.005) for d in DEPTHS} | {1904: 30.0},           # flatter: one line
    {0: 6.01, 256: 7.17, 512: 8.23, 1024: 10.12, 1536: 11.44, 1904: 14.32},   # faster past d*: one line
], ids=["steeper", "flat", "flatter", "faster"])
def test_the_claims_choice_of_model_is_the_lessons(steps):
    """check chooses between the knee and the line with its own arithmetic; on the same steps it chooses as lesson 6
    does (course.depthtime.choose) and finds the held-out depth's error the lesson finds."""
    from bytesup.check.claims import depth_line_check
    from bytesup.course import depthtime

    at, ms = list(steps), list(steps.values())
    line, test = depthtime.choose(at, ms, 1024, 1200.0, [0.0] * len(at))
    _, observed, detail = depth_line_check(knee_samples(steps), 1024, knee=1200.0)
    assert test is not None and detail.startswith(f"knee d* = 1,200 {'shown' if test.shown else 'not shown'}:")
    assert observed == f"furthest depth 1,904 {steps[1904] / line.ms_at(1904) - 1:+.1%}"


# No slower past d* = 1,200 than at it: 10, 12.56, 15.12, 20.24 ms up to 1,024, 22 at 1,536. The line through all five
# fitted depths by hand: x̄ = 3,328 ÷ 5 = 665.6, ȳ = 79.92 ÷ 5 = 15.984, Σ(x − x̄)(y − ȳ) = 65,474.56 − 5 × 665.6 ×
# 15.984 = 12,279.808, Σ(x − x̄)² = 3,735,552 − 5 × 665.6² = 1,520,435.2.
FLAT_S = 12279.808 / 1520435.2
FLAT_1904 = 15.984 + (1904 - 665.6) * FLAT_S  # 25.99 ms


@pytest.mark.parametrize("k,status", [(1.3, checker.FAIL), (0.7, checker.FAIL), (1.1, checker.PASS)])
def test_a_knee_the_run_does_not_show_leaves_one_line(k, status):
    """1,536 came 22 ÷ 25.36 − 1 = −13.2% against the line through the depths below d* = 1,200: no slower, so one line
    through every fitted depth, 0–1,536 (s = 8.08 µs, t(0) = 10.61 ms), predicting 1,904 at 25.99 ms. Measured 1.3 ×
    that with tight samples: +30.0%, a failure; 0.7 ×: −30.0%, a failure; 1.1 ×: a pass. The bent model, s₂ = (22 −
    22) ÷ 336 = 0, is never used."""
    from bytesup.check.claims import depth_line_check
    steps = {d: knee_ms(d, 1200, s2=0.0) for d in DEPTHS} | {1904: FLAT_1904 * k}
    st, observed, detail = depth_line_check(knee_samples(steps), 1024, knee=1200.0)
    assert (st, observed) == (status, f"furthest depth 1,904 {k - 1:+.1%}"), detail
    assert detail.startswith(
        "knee d* = 1,200 not shown: depth 1,536 -13.2% (spread ±0%) against the line through the depths below it, "
        f"no slower than that line, so one line; t(0) = {15.984 - 665.6 * FLAT_S:.4g} ms, s = {1e3 * FLAT_S:.4g} µs per "
        "position, fitted on depths 0, 256, 512, 1,024, 1,536; held out: 1,904")
    assert round(1e3 * FLAT_S, 2) == 8.08 and round(15.984 - 665.6 * FLAT_S, 2) == 10.61


@pytest.mark.parametrize("k,shown", [(1.051, True), (1.049, False)])
def test_the_claims_knee_shows_only_above_the_spread(k, shown):
    """The line below d* = 1,200 gives 1,536 25.36 ms; 1,536's samples spread by 5% of its step (no other depth's), so
    that prediction's spread is ±5%. At 1.051 × 25.36 ms it came +5.1%, above by more: the knee, with s₂ from it. At
    1.049 ×, +4.9%: within, so one line through the five."""
    from bytesup.check.claims import depth_line_check
    steps = {d: knee_ms(d, 1200, s2=0.0) for d in DEPTHS} | {1536: 25.36 * k, 1904: 30.0}
    _, _, detail = depth_line_check(knee_samples(steps, {1536: 0.05}), 1024, knee=1200.0)
    head = f"knee d* = 1,200 {'shown' if shown else 'not shown'}: depth 1,536 {k - 1:+.1%} (spread ±5%)"
    assert detail.startswith(head), detail
    assert ("s₂ = " in detail) is shown and ("so one line" in detail) is not shown


def test_the_claims_line_below_the_knee_that_gives_no_step():
    """Steps falling 0.03 ms per position up to 1,024 (40, 32.32, 24.64, 9.28 ms): the line through them gives 1,536
    40 − 46.08 = −6.08 ms, no step, so 1,536 (10 ms) cannot show the knee at d* = 1,200: one line through the five."""
    from bytesup.check.claims import depth_line_check
    steps = {d: 40 - 0.03 * d for d in (0, 256, 512, 1024)} | {1536: 10.0, 1904: 12.0}
    _, _, detail = depth_line_check(knee_samples(steps), 1024, knee=1200.0)
    assert detail.startswith("knee d* = 1,200 not shown: depth 1,536 at 10 ms against the line through the depths below "
                             "it, which gives no step there, so one line; t(0) = "), detail
    assert "fitted on depths 0, 256, 512, 1,024, 1,536; held out: 1,904" in detail and "s₂" not in detail


def test_the_claim_on_the_run_that_missed_by_thirty_percent():
    """The 2-core run's medians (tests/test_depthtime.py): 1,680 came −10.6% against the line below d* = 1,456, so one
    line through 0–1,680 predicts 1,904 (14.32 ms, three samples 13.5, 14.32, 14.4) +14.4% off, within ±15%: a pass,
    where the knee's s₂ of −2.07 µs per position missed by +30%."""
    from bytesup.check.claims import depth_line_check
    ms = {0: 6.01, 256: 7.17, 512: 8.23, 1024: 10.12, 1680: 11.44}
    samples = {d: [1e3 / t] * 3 for d, t in ms.items()} | {1904: [1e3 / 13.5, 1e3 / 14.32, 1e3 / 14.4]}
    st, observed, detail = depth_line_check(samples, 1024, knee=33554432 / KV_PER_POSITION)
    assert (st, observed) == (checker.PASS, "furthest depth 1,904 +14.4%"), detail
    assert detail.startswith("knee d* = 1,456 not shown: depth 1,680 -10.6% (spread ±0%)")


def test_the_issues_run_by_its_costs_per_position():
    """The 2-core AMD EPYC's default run: 21.4, 5.6, 7.1, 13.3 and 23.8 µs per position between its depths, 39.05 ms
    at 1,904. The line through 0–1,024 misses 1,904 by +20.0% (a failure); with d* = 32 MiB ÷ 23,040 bytes =
    1,456, s₂ from 1,536 predicts it at −1.4%."""
    from bytesup.check.claims import depth_line_check
    costs = (21.4, 5.6, 7.1, 13.3, 23.8)
    steps = {1904: 39.05}
    for i in range(len(costs) - 1, -1, -1):  # back from 1,904: each depth's step less its span × its cost
        a, b = DEPTHS[i], DEPTHS[i + 1]
        steps[a] = steps[b] - (b - a) * costs[i] / 1e3
    line = depth_line_check(knee_samples(steps), 1024)
    knee = depth_line_check(knee_samples(steps), 1024, knee=33554432 / KV_PER_POSITION)
    assert line[:2] == (checker.FAIL, "furthest depth 1,904 +20.0%")
    assert knee[:2] == (checker.PASS, "furthest depth 1,904 -1.4%")
