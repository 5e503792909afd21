"""`bytesup history`: runs found, grouped by setup, figures over time, and what moved them."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest
from test_compare import invoke

from bytesup.check import history
from bytesup.check.history import NEXT_TOKEN
from bytesup.store.plots import DATE_AXIS

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "outputs" / "2026-12-01-cpu2-smollm2"
DECODE = "decode_tokens_per_s_short_prompt"


def make_run(dest: Path, day: int, host: str = "vm", build: str = "xllamacpp 1", decode_scale: float = 1.0,
             lessons: tuple[str, ...] = (NEXT_TOKEN, history.CAPSTONE)) -> Path:
    """A run folder from the committed reference run: its manifest, lessons 4 and 8 and its checks, with
    the date, host, engine build and decode samples set here."""
    dest.mkdir(parents=True)
    manifest = json.loads((TEMPLATE / "manifest.json").read_text(encoding="utf-8"))
    manifest["created_at"] = f"2026-11-{day:02d}T10:00:00+00:00"
    manifest["host"]["hostname"] = host
    manifest["engine"]["build"] = build
    manifest["lessons"] = {lid: e for lid, e in manifest["lessons"].items() if lid in lessons}
    (dest / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    for lid in lessons:
        data = json.loads((TEMPLATE / f"{lid}.json").read_text(encoding="utf-8"))
        for m in data["measurements"]:
            if m["name"] == DECODE:
                m["samples"] = [s * decode_scale for s in m["samples"]]
                m["median"], m["min"], m["max"] = (v * decode_scale for v in (m["median"], m["min"], m["max"]))
        (dest / f"{lid}.json").write_text(json.dumps(data), encoding="utf-8")
    shutil.copy2(TEMPLATE / "check.json", dest / "check.json")
    return dest


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "outputs"
    make_run(root / "a", 1)
    make_run(root / "b", 2, decode_scale=1.01)                       # within the noise
    make_run(root / "c", 3, build="xllamacpp 2", decode_scale=1.5)   # the new build decodes 50% faster
    make_run(root / "spark", 2, host="spark", decode_scale=3.0)      # another machine: another group
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("not a run")
    return root


def test_runs_are_grouped_by_setup_and_non_runs_are_counted(runs):
    found = history.find_runs([runs])
    assert [r.name for r in found.runs] == ["a", "b", "spark", "c"]  # in date order
    assert [(p.name, why) for p, why in found.skipped] == [("notes", "not a run folder")]
    groups = history.group_runs(found.runs)
    assert [[r.name for r in g.runs] for g in groups] == [["a", "b", "c"], ["spark"]]


def test_a_move_beyond_the_noise_names_what_changed_and_noise_is_not_a_move(runs):
    found = history.find_runs([runs])
    group = history.group_runs(found.runs)[0]
    moved = [m for m in history.moves(group, 0.05) if m.figure.startswith("decode (")]
    assert len(moved) == 1  # a → b is within noise
    m = moved[0]
    assert (m.before.name, m.after.name, m.verdict) == ("b", "c", "better")
    assert m.changes == ("engine build xllamacpp 1 → xllamacpp 2",)
    assert "+48.5%" in m.reason
    # No move at a threshold above the change.
    assert not [x for x in history.moves(group, 0.60) if x.figure.startswith("decode (")]


def test_each_groups_plot_holds_only_its_own_runs(runs):
    found = history.find_runs([runs])
    main, spark = history.group_runs(found.runs)
    plots = history.group_plots(main)
    decode = next(p for p in plots if p.name == "group1-decode")
    [series] = decode.series
    medians = [r.figures["decode"].median for r in main.runs]
    # Dates on the x axis: days since 1970-01-01 UTC, the runs made at 10:00 on 1, 2 and 3 November 2026.
    first = (datetime(2026, 11, 1, 10, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds() / 86400
    assert decode.x_label == DATE_AXIS
    assert series.y == medians and series.x == [first, first + 1, first + 2]
    assert series.y_min == [r.figures["decode"].min for r in main.runs]
    assert history.group_plots(spark) == []  # one run: no line to draw


def test_history_cli_prints_the_table_and_writes_an_html_page(runs, tmp_path):
    result = invoke("history", runs)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "| date | run | group |" in out and "## Group 2: spark" in out
    assert "4 runs read; skipped 1 folder that is not a run" in result.stderr
    decode = next(r for r in history.find_runs([runs / "c"]).runs).figures["decode"]
    assert f"{decode.median:,.4g}" in out
    page = tmp_path / "history.html"
    result = invoke("history", runs, "--html", "--output", page)
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert text.count("<svg") == 4 and "<script" not in text  # four figures of group 1; group 2 has one run


def test_history_markdown_to_a_file_writes_its_plots_beside_it(runs, tmp_path):
    out = tmp_path / "h.md"
    assert invoke("history", runs / "a", runs / "c", "-o", out).exit_code == 0
    text = out.read_text(encoding="utf-8")
    assert "![decode (tokens/s, short prompt), group 1](h-plots/group1-decode.svg)" in text
    assert (tmp_path / "h-plots" / "group1-decode.svg").read_text().startswith("<svg")


def test_a_damaged_run_is_skipped_with_its_reason(runs):
    (runs / "b" / f"{NEXT_TOKEN}.json").write_text("{ not json")
    found = history.find_runs([runs])
    assert [p.name for p, _ in found.skipped] == ["b", "notes"]
    assert "cannot be read" in dict((p.name, w) for p, w in found.skipped)["b"]


def test_a_hundred_generated_runs_are_all_read(tmp_path):
    root = tmp_path / "outputs"
    for n in range(100):
        make_run(root / f"run{n:03d}", 1 + n % 28, host=f"host{n % 3}", decode_scale=1 + n / 100)
    found = history.find_runs([root])
    assert len(found.runs) == 100 and not found.skipped
    assert [len(g.runs) for g in history.group_runs(found.runs)] == [34, 33, 33]


def test_the_history_page_has_dates_on_its_axes_links_each_point_to_its_run_and_marks_the_moves(runs, tmp_path):
    (runs / "c" / "report.html").write_text("<!DOCTYPE html><title>c</title>", encoding="utf-8")
    (runs / "a" / "README.md").write_text("# a\n", encoding="utf-8")
    page_file = tmp_path / "history.html"
    result = invoke("history", runs, "--html", "--output", page_file)
    assert result.exit_code == 0, result.output
    page = page_file.read_text(encoding="utf-8")
    decode = page[page.index('id="plot-group1-decode-svg"'):]
    decode = decode[:decode.index("</svg>")]
    # The axis is written in dates (matplotlib's concise format: the days, and the year and month once).
    ticks = re.findall(r"<text[^>]*>([^<]+)</text>", decode)
    assert "date (UTC)" in ticks and any(t.startswith("2026-Nov") for t in ticks), ticks
    assert {"Nov-02", "Nov-03"} & set(ticks) or {"02", "03"} <= set(ticks), ticks
    assert not any("days since" in t or ":00" in t for t in ticks), ticks
    # Each point leads to its run's page, relative to the page: report.html where there is one, else README.md.
    assert re.findall(r'<a xlink:href="([^"]+)"', decode) == ["./outputs/a/README.md", "./outputs/b", "./outputs/c/report.html"]
    # The move compare judges real (b to c) is marked on the plot, with what changed.
    assert "better: engine build xllamacpp 1 → xllamacpp 2" in decode
    assert "better:" not in page[page.index('id="plot-group1-prefill-svg"'):]  # prefill did not move
    # The table's run names link to the same pages.
    assert '<a href="./outputs/c/report.html"><code>c</code></a>' in page


def test_a_link_to_a_run_is_always_a_relative_path(tmp_path):
    folder = make_run(tmp_path / "outputs" / "javascript:alert(1)", 1)
    (folder / "report.html").write_text("x", encoding="utf-8")
    [run] = history.find_runs([folder]).runs
    assert history.run_page(run, tmp_path) == "./outputs/javascript%3Aalert%281%29/report.html"
    assert history.run_page(run, tmp_path / "pages") == "../outputs/javascript%3Aalert%281%29/report.html"
