"""What a run shows, first on its lesson's page, and the page's Details: the record (`Shows`, `Table.detail`), the
context's `shows`, and how a hand-made result is rendered in Markdown and HTML."""

from __future__ import annotations

import re

import pytest
from lessonkit import hand_context

from bytesup.store.render import html, lesson_blocks, lesson_md
from bytesup.store.results import Column, LessonResult, Measurement, Plot, Series, Shows, Table, load_result


def hand_result(shows: Shows | None, detail: bool = True) -> LessonResult:
    narrow = Table(name="speeds", title="Speeds", columns=[Column(name="run"), Column(name="tokens/s")],
                   rows=[["a", 12.5], ["b", 25.0]], notes=["b decodes twice as fast as a."])
    full = Table(name="speeds_full", title="Speeds, every column", columns=[Column(name=f"c{i}") for i in range(10)],
                 rows=[list(range(10))], notes=["spread = max ÷ min − 1"], detail=detail)
    plot = Plot(name="speed", title="Speed per run", x_label="run", y_label="tokens/s",
                series=[Series(label="median", x=[1.0, 2.0], y=[12.5, 25.0])])
    other = Plot(name="other", title="Another plot", x_label="x", y_label="y", series=[Series(label="s", x=[1.0], y=[1.0])])
    return LessonResult(lesson_id="99_hand", title="A hand-made lesson", started_at="t0", finished_at="t1",
                        tables=[narrow, full], measurements=[Measurement.of("tokens_per_s", "tokens/s", [12.0, 13.0])],
                        plots=[plot, other], notes=["A closing note."], shows=shows)


def test_json_holds_shows_and_detail_only_where_set_and_reads_back():
    plain = hand_result(None, detail=False).to_json()
    assert "shows" not in plain and all("detail" not in t for t in plain["tables"])
    data = hand_result(Shows(text="b is twice as fast as a (25 against 12.5 tokens/s).", plot="speed")).to_json()
    assert data["shows"] == {"text": "b is twice as fast as a (25 against 12.5 tokens/s).", "plot": "speed"}
    assert "detail" not in data["tables"][0] and data["tables"][1]["detail"] is True
    back = load_result(data, "hand")
    assert back.shows == Shows(text="b is twice as fast as a (25 against 12.5 tokens/s).", plot="speed")
    assert [t.detail for t in back.tables] == [False, True]


def test_a_result_without_shows_renders_as_before():
    page = lesson_md(hand_result(None, detail=False))
    assert "What this run shows" not in page and "## Details" not in page and "glossary" not in page
    # tables in order, the raw measurements in the main text, then the plots and the notes
    heads = re.findall(r"^#+ (.+)$", page, re.M)
    assert heads == ["A hand-made lesson", "Speeds", "Speeds, every column", "Measurements", "Speed per run",
                     "Another plot", "Notes"]


def test_markdown_opens_with_what_the_run_shows_and_ends_with_the_details():
    text = "b is twice as fast as a (25 against 12.5 tokens/s)."
    page = lesson_md(hand_result(Shows(text=text, plot="speed")))
    heads = re.findall(r"^(#+) (.+)$", page, re.M)
    assert heads == [("#", "A hand-made lesson"), ("###", "What this run shows"), ("####", "Speed per run"),
                     ("###", "Speeds"), ("###", "Another plot"), ("###", "Notes"), ("##", "Details"),
                     ("###", "A hand-made lesson: the full tables, the formulas and the raw measurements"),
                     ("####", "Speeds, every column"), ("####", "Measurements")]
    opening = page.split("### Speeds\n")[0]
    assert text in opening and "](plots/99_hand-speed.png)" in opening
    assert "[`docs/glossary.md`](../../docs/glossary.md)" in opening
    # the plot it opens with is drawn once; the formula stays with its full table, under Details
    assert page.count("plots/99_hand-speed.png") == 1
    assert page.index("spread = max ÷ min − 1") > page.index("## Details")


def test_html_opens_with_what_the_run_shows_and_folds_the_details():
    drawn: list[str] = []

    def svg(plot, prefix):
        drawn.append(plot.name)
        return f"<svg id='{prefix}x'></svg>"

    text = "b is twice as fast as a (25 against 12.5 tokens/s) <&>."
    page = html(lesson_blocks(hand_result(Shows(text=text, plot="speed"))), svg)
    assert drawn == ["speed", "other"]
    assert page.index("What this run shows") < page.index("b is twice as fast") < page.index("<h3>Speeds</h3>")
    assert "(25 against 12.5 tokens/s) &lt;&amp;&gt;." in page
    assert '<a href="../../docs/glossary.md"><code>docs/glossary.md</code></a>' in page
    folded = page[page.index("<details>"):page.index("</details>")]
    assert "Speeds, every column" in folded and "Measurements" in folded and "spread = max" in folded
    assert "<h3>Speeds</h3>" not in folded and "Notes" not in folded


def test_a_shows_without_its_plot_has_no_figure():
    page = lesson_md(hand_result(Shows(text="Only words.")))
    opening = page.split("### Speeds\n")[0]
    assert "Only words." in opening and "![" not in opening
    assert page.count("plots/99_hand-speed.png") == 1   # drawn where it always was


def test_the_context_records_what_the_run_shows_and_refuses_a_plot_it_did_not_draw():
    ctx = hand_context("99_hand", server=None)
    assert ctx.finish().shows is None
    ctx.plot("speed", "Speed per run", "run", "tokens/s", [Series(label="median", x=[1.0], y=[2.0])])
    with pytest.raises(ValueError, match="'nope'"):
        ctx.shows("text", plot="nope")
    ctx.shows("It decodes 2 tokens/s.", plot="speed")
    assert ctx.finish().shows == Shows(text="It decodes 2 tokens/s.", plot="speed")


def committed_results():
    """Every lesson result committed under outputs/ and tests/fixtures/runs/ that says what its run shows."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for path in sorted([*root.glob("outputs/*/[0-9]*.json"), *root.glob("tests/fixtures/runs/*/[0-9]*.json")]):
        data = json.loads(path.read_text(encoding="utf-8"))
        if "shows" in data:
            yield path.relative_to(root), load_result(data, str(path))


def test_every_committed_page_that_opens_with_what_it_shows_has_readable_main_tables():
    found = list(committed_results())
    assert {str(p).split("/")[-1].split("_")[0] for p, _ in found} >= {"01", "02", "03", "05", "05b", "07", "09"}
    for path, result in found:
        assert result.shows is not None and result.shows.text, path
        assert result.shows.plot is None or result.shows.plot in [p.name for p in result.plots], path
        wide = [(t.name, len(t.columns)) for t in result.tables if not t.detail and len(t.columns) > 8]
        assert not wide, (path, wide)
