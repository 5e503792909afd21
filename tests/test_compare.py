"""`bytesup compare` on recorded lesson runs (tests/fixtures/runs), some of them doctored."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bytesup.check import compare
from bytesup.cli.app import app
from bytesup.errors import BytesupError, RunFolderError, SchemaError
from bytesup.store.results import LessonResult, load_result

RUNS = Path(__file__).parent / "fixtures" / "runs"


# --- helpers (test_check and test_report import them) ------------------------------------

def fixture_run(lesson_id: str) -> Path:
    folder = RUNS / lesson_id
    assert (folder / f"{lesson_id}.json").is_file(), f"no recorded fixture run for {lesson_id}"
    return folder


def assemble_run(dest: Path, *lesson_ids: str) -> Path:
    """A multi-lesson run folder from single-lesson fixture runs; the manifest is the first
    fixture's, with every lesson's entry."""
    dest.mkdir(parents=True)
    manifest = None
    for lid in lesson_ids:
        src = fixture_run(lid)
        for name in (f"{lid}.json", f"{lid}.md"):
            shutil.copy2(src / name, dest / name)
        for sub in ("http", "plots"):
            if (src / sub).is_dir():
                shutil.copytree(src / sub, dest / sub, dirs_exist_ok=True)
        m = json.loads((src / "manifest.json").read_text(encoding="utf-8"))
        if manifest is None:
            manifest = {**m, "lessons": {}}
        manifest["lessons"].update(m["lessons"])
    manifest["date"] = dest.name
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return dest


def read_result(run: Path, lesson_id: str) -> LessonResult:
    return load_result(json.loads((run / f"{lesson_id}.json").read_text(encoding="utf-8")), lesson_id)


def write_result(run: Path, result: LessonResult) -> None:
    (run / f"{result.lesson_id}.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2), encoding="utf-8")


def scale_measurement(run: Path, lesson_id: str, name: str, factor: float) -> None:
    result = read_result(run, lesson_id)
    m = result.measurement(name)
    m.samples = [s * factor for s in m.samples]
    m.median, m.min, m.max = statistics.median(m.samples), min(m.samples), max(m.samples)
    write_result(run, result)


def apart(run: Path, lesson_id: str, name: str, factor: float) -> float:
    """`factor`, or further from 1 if needed so that the scaled samples' range cannot overlap the
    recorded one (fixtures recorded on a busy machine can spread more than 2×)."""
    m = read_result(run, lesson_id).measurement(name)
    spread = m.max / m.min
    return min(factor, factor / spread) if factor < 1 else max(factor, factor * spread)


def edit_manifest(run: Path, edit) -> None:
    path = run / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def row(c: compare.Comparison, name: str) -> compare.Row:
    return next(r for r in c.rows if r.name == name)


L4 = "04_next_token"


@pytest.fixture
def two_runs(tmp_path):
    a = assemble_run(tmp_path / "A", L4)
    b = assemble_run(tmp_path / "B", L4)
    return a, b


# --- verdicts ---------------------------------------------------------------------------

def test_a_run_against_itself_is_the_same_everywhere(two_runs):
    a, b = two_runs
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    result = read_result(a, L4)
    assert len(c.rows) == len(result.measurements)
    assert {r.verdict for r in c.rows} == {"same"}
    assert all(r.ratio == pytest.approx(1.0) for r in c.rows)
    assert c.identity == []
    tables = {t.table for t in c.tables}
    assert tables == {t.name for t in result.tables if t.name.startswith("top8_")}
    assert all(t.change == "same tokens, same order" and t.max_abs_dlogprob == 0 and t.verdict == "same" for t in c.tables)


def test_a_halved_decode_speed_is_worse_and_fails_on_regression(two_runs, tmp_path):
    a, b = two_runs
    factor = apart(a, L4, "decode_tokens_per_s_short_prompt", 0.5)
    scale_measurement(b, L4, "decode_tokens_per_s_short_prompt", factor)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    r = row(c, "decode_tokens_per_s_short_prompt")
    assert r.verdict == "worse"
    assert r.ratio == pytest.approx(factor)
    assert c.regressions == [r]

    report = tmp_path / "report.md"
    plain = invoke("compare", a, b, "--format", "md", "--output", report)
    assert plain.exit_code == 0, plain.output
    failing = invoke("compare", a, b, "--fail-on-regression", "--format", "md", "--output", report)
    assert failing.exit_code == 3
    assert "regression" in failing.output and "decode_tokens_per_s_short_prompt" in failing.output
    text = report.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if "decode_tokens_per_s_short_prompt" in ln)
    assert f"| {factor:.3f}× | worse" in line
    assert "1 worse" in text


def test_a_faster_run_is_better_and_does_not_fail(two_runs):
    a, b = two_runs
    factor = apart(a, L4, "prefill_tokens_per_s_long_prompt", 2.0)
    scale_measurement(b, L4, "prefill_tokens_per_s_long_prompt", factor)
    result = invoke("compare", a, b, "--fail-on-regression", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    got = {m["name"]: m for m in data["measurements"]}
    assert got["prefill_tokens_per_s_long_prompt"]["verdict"] == "better"
    assert got["prefill_tokens_per_s_long_prompt"]["ratio"] == pytest.approx(factor)
    assert data["regressions"] == 0


def test_small_changes_are_within_noise_and_the_threshold_is_the_users(two_runs):
    a, b = two_runs
    # Shrink the spread to one value so the ranges cannot overlap: only the threshold decides.
    for run in (a, b):
        result = read_result(run, L4)
        m = result.measurement("decode_tokens_per_s_long_prompt")
        m.samples = [m.median] * len(m.samples)
        m.min = m.max = m.median
        write_result(run, result)
    scale_measurement(b, L4, "decode_tokens_per_s_long_prompt", 0.92)
    at5 = row(compare.compare_runs(compare.load_run(a), compare.load_run(b), compare.parse_threshold("5%")),
              "decode_tokens_per_s_long_prompt")
    at10 = row(compare.compare_runs(compare.load_run(a), compare.load_run(b), compare.parse_threshold("10%")),
               "decode_tokens_per_s_long_prompt")
    assert at5.verdict == "worse"
    assert at10.verdict == "within noise" and "threshold" in at10.reason
    assert invoke("compare", a, b, "--threshold", "10%", "--fail-on-regression").exit_code == 0
    assert invoke("compare", a, b, "--threshold", "5%", "--fail-on-regression").exit_code == 3


def test_overlapping_samples_are_within_noise(two_runs):
    a, b = two_runs
    result = read_result(b, L4)
    m = result.measurement("decode_tokens_per_s_short_prompt")
    # 30% slower median, but one sample reaches A's range.
    m.samples = [m.samples[0] * 0.7, read_result(a, L4).measurement("decode_tokens_per_s_short_prompt").max]
    m.median, m.min, m.max = statistics.median(m.samples), min(m.samples), max(m.samples)
    write_result(b, result)
    r = row(compare.compare_runs(compare.load_run(a), compare.load_run(b)), "decode_tokens_per_s_short_prompt")
    assert r.verdict == "within noise" and "overlap" in r.reason


def test_other_settings_units_or_model_are_not_comparable(two_runs):
    a, b = two_runs
    result = read_result(b, L4)
    result.measurement("prefill_tokens_per_s_long_prompt").settings["prompt_tokens"] = 1000
    result.measurement("decode_efficiency").unit = "fraction"
    write_result(b, result)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    pre = row(c, "prefill_tokens_per_s_long_prompt")
    assert pre.verdict == "not comparable" and "prompt_tokens 1,921 vs 1,000" in pre.reason
    eff = row(c, "decode_efficiency")
    assert eff.verdict == "not comparable" and "units differ" in eff.reason

    edit_manifest(b, lambda m: m["model"].update(path="/models/small-q8_0.gguf", sha256="0" * 64))
    for r in (read_result(b, L4),):
        r.model.update(file="small-q8_0.gguf", sha256="0" * 64)
        write_result(b, r)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    recorded = Path(json.loads((a / "manifest.json").read_text())["model"]["path"]).name
    assert {r.verdict for r in c.rows} == {"not comparable"}
    assert all(f"different model: {recorded} vs small-q8_0.gguf" in r.reason for r in c.rows)
    assert {t.verdict for t in c.tables} == {"not comparable"}
    assert ("model file", recorded, "small-q8_0.gguf") in c.identity


def test_only_what_differs_is_shown_above_the_table(two_runs):
    a, b = two_runs

    def threads(m):
        m["engine"]["flags"]["--threads"] = "1"
        m["engine"]["flags"]["--port"] = "9999"  # where it listened is not an identity
        m["engine"]["build"] = "llama.cpp b9999"

    edit_manifest(b, threads)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    keys = [k for k, _, _ in c.identity]
    assert keys == ["engine build", "flag --threads"]
    assert c.identity[1] == ("flag --threads", None, "1")
    md = compare.markdown(c)
    assert "| flag --threads | (not set) | 1 |" in md and "--port" not in md and "| host |" not in md


def test_next_token_tables_report_set_order_and_logprob_changes(two_runs):
    a, b = two_runs
    result = read_result(b, L4)
    cat_sat = result.facts["top_tokens"]["top8_cat_sat"]["tokens"]   # compare reads the fact, not the table
    cat_sat[0]["rank"], cat_sat[1]["rank"] = 2, 1        # the first two swap places
    cat_sat[2]["logprob"] += 0.25                        # one token moves by 0.25
    result.facts["top_tokens"]["top8_fibonacci"]["tokens"][-1]["token"] = repr(" brand-new")   # one token replaced
    write_result(b, result)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    cat = next(x for x in c.tables if x.table == "top8_cat_sat")
    assert cat.change == "same tokens, order changed"
    assert cat.max_abs_dlogprob == pytest.approx(0.25)
    a_rows = read_result(a, L4).facts["top_tokens"]["top8_cat_sat"]["tokens"]
    assert cat.top_a[0] == eval(a_rows[0]["token"]) and cat.top_b[0] == eval(a_rows[1]["token"])
    assert cat.title == result.table("top8_cat_sat").title   # the title of the table of that name
    fib = next(x for x in c.tables if x.table == "top8_fibonacci")
    assert fib.change.startswith("set changed") and "' brand-new'" in fib.change
    assert fib.verdict == "changed"


# --- clear messages instead of tracebacks --------------------------------------------------

def test_a_folder_that_is_not_a_run_gets_a_clear_message(tmp_path, two_runs):
    a, _ = two_runs
    empty = tmp_path / "holiday-photos"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello")
    result = invoke("compare", a, empty)
    assert result.exit_code == 1
    assert "is not a bytesup run folder" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    missing = invoke("compare", a, tmp_path / "nowhere")
    assert missing.exit_code == 1 and "does not exist" in missing.output


def test_a_newer_schema_gets_a_clear_message(two_runs):
    a, b = two_runs
    data = json.loads((b / f"{L4}.json").read_text(encoding="utf-8"))
    data["schema_version"] = 99
    (b / f"{L4}.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SchemaError, match="newer than this bytesup"):
        compare.load_run(b)
    result = invoke("compare", a, b)
    assert result.exit_code == 1 and "schema version 99" in result.output and "Update bytesup" in result.output

    edit_manifest(a, lambda m: m.update(schema_version=7))
    result = invoke("compare", a, b)
    assert result.exit_code == 1 and "run manifest schema version 7" in result.output


def test_a_damaged_result_gets_a_clear_message(two_runs):
    a, b = two_runs
    data = json.loads((b / f"{L4}.json").read_text(encoding="utf-8"))
    del data["measurements"][0]["samples"]
    (b / f"{L4}.json").write_text(json.dumps(data), encoding="utf-8")
    result = invoke("compare", a, b)
    assert result.exit_code == 1 and "measurements.0.samples" in result.output


def test_lessons_on_one_side_only_are_named(tmp_path):
    a = assemble_run(tmp_path / "A", "01_model_on_disk", L4)
    b = assemble_run(tmp_path / "B", L4)
    c = compare.compare_runs(compare.load_run(a), compare.load_run(b))
    assert c.only_a == ["01_model_on_disk"] and c.only_b == []
    assert "only in A" in c.missing_paragraph() and "01_model_on_disk" in c.missing_paragraph()
    result = invoke("compare", a, b, "--format", "md")
    assert result.exit_code == 0 and "01_model_on_disk" in result.stdout

    other = assemble_run(tmp_path / "C", "01_model_on_disk")
    with pytest.raises(RunFolderError, match="no lesson in common"):
        compare.compare_runs(compare.load_run(b), compare.load_run(other))
    assert invoke("compare", b, other).exit_code == 1


def test_the_rich_table_prints_every_measurement(two_runs):
    a, b = two_runs
    scale_measurement(b, L4, "decode_tokens_per_s_short_prompt", apart(a, L4, "decode_tokens_per_s_short_prompt", 0.5))
    result = CliRunner().invoke(app, ["compare", str(a), str(b)], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for m in read_result(a, L4).measurements:
        assert m.name in result.stdout
    assert "worse" in result.stdout and "top8_cat_sat" in result.stdout


@pytest.mark.parametrize("text,value", [("10%", 0.10), ("5", 0.05), (" 2.5 % ", 0.025), ("-10%", 0.10)])
def test_parse_threshold(text, value):
    assert compare.parse_threshold(text) == pytest.approx(value)


def test_parse_threshold_rejects_words():
    with pytest.raises(BytesupError, match="not a percentage"):
        compare.parse_threshold("ten")


def test_token_text_reads_the_lessons_quoted_tokens():
    assert compare.token_text("' Paris'") == " Paris"
    assert compare.token_text('"it\'s"') == "it's"
    assert compare.token_text("b'\\xf0'") == "b'\\xf0'"
    assert compare.token_text(5) == "5"


def test_a_measurement_without_a_value_is_not_comparable():
    from bytesup.store.results import Measurement

    a = Measurement.of("decode_tokens_per_s", "tokens/s", [100.0, 110.0], higher_is_better=True)
    b = Measurement.of("decode_tokens_per_s", "tokens/s", [float("nan")], higher_is_better=True)
    assert compare.verdict(a, b, 0.05) == ("not comparable", "no finite value in B")
    assert compare.ratio_of(a, b) is None


def test_facts_are_same_or_changed():
    from bytesup.store.results import Measurement

    a = Measurement.of("kv_bytes_per_token", "bytes", [4096.0])
    assert compare.verdict(a, Measurement.of("kv_bytes_per_token", "bytes", [4096.0]), 0.05)[0] == "same"
    assert compare.verdict(a, Measurement.of("kv_bytes_per_token", "bytes", [8192.0]), 0.05) == ("changed", "change +100.0%")


def test_one_outlier_cannot_make_a_change_look_like_noise():
    """The issue's case: a 7.4 in a row of 93s. Without the rule B's range (7.4-94.5) overlaps A's."""
    from bytesup.store.results import Measurement

    a = Measurement.of("decode_tokens_per_s", "tokens/s", [50.0, 51.0, 52.0, 50.5, 51.5], higher_is_better=True)
    b = Measurement.of("decode_tokens_per_s", "tokens/s", [93.6, 94.5, 7.4, 93.0, 94.0, 93.8], higher_is_better=True)
    assert a.min <= b.max and b.min <= a.max  # the raw ranges overlap
    assert compare.judged_range(b)[:2] == (93.0, 94.5)  # by hand: 7.4 is 86 from the median, far past 5 scaled MADs
    assert not compare.ranges_overlap(a, b)
    assert compare.verdict(a, b, 0.05)[0] == "better"
    assert compare.outliers_text(a, b) == "outliers, shown but not used: B 7.4 (1 of 6)"
    # Fewer than five samples flag nothing, so a range of four still decides as before.
    short = Measurement.of("decode_tokens_per_s", "tokens/s", [93.6, 94.5, 7.4, 93.0], higher_is_better=True)
    assert compare.ranges_overlap(a, short) and compare.outliers_text(a, short) == ""


def test_an_outlier_is_named_in_the_compared_row(two_runs):
    a, b = two_runs
    result = read_result(b, L4)
    m = result.measurement("decode_tokens_per_s_short_prompt")
    v = m.median
    m.samples = [v * 0.99, v, v * 1.01, v * 0.995, v * 1.005, v / 20]
    m.median, m.min, m.max = statistics.median(m.samples), min(m.samples), max(m.samples)
    write_result(b, result)
    r = row(compare.compare_runs(compare.load_run(a), compare.load_run(b)), "decode_tokens_per_s_short_prompt")
    assert "outliers, shown but not used: B" in r.reason
