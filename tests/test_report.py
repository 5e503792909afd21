"""`bytesup report`: one README.md page for a run folder."""

from __future__ import annotations

import hashlib
import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_check import ALL
from test_compare import L4, assemble_run, edit_manifest, fixture_run, invoke, read_result

from bytesup.store.escape import md_literal
from bytesup.store.render import anchor, demoted, fmt, lesson_blocks, lesson_md, markdown
from bytesup.run.report import report_html, report_md, write_run_report


def test_report_writes_one_page_with_summary_lessons_plots_and_checks(tmp_path):
    run = assemble_run(tmp_path / "run", *ALL)
    result = invoke("report", run)
    assert result.exit_code == 0, result.output
    assert f"wrote {run / 'README.md'}" in result.stdout
    page = (run / "README.md").read_text(encoding="utf-8")
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))

    assert page.startswith("# bytesup run run\n")
    assert f"| status | {manifest['status']} |" in page
    assert manifest["host"]["cpu"] in page and manifest["engine"]["build"] in page
    assert manifest["model"]["sha256"] in page and Path(manifest["model"]["path"]).name in page

    # Every lesson, in order, under its own section, with the tables its JSON holds.
    sections = [m.group(1) for m in re.finditer(r"^## (.+)$", page, re.M)]
    titles = [read_result(run, lid).title for lid in ALL]
    assert [s for s in sections if s in titles] == titles
    for lid in ALL:
        for table in read_result(run, lid).tables:
            assert f"### {md_literal(table.title)}" in page  # a title's own * and _ are escaped in Markdown
    # Plot links stay relative to the run folder, and the files are there.
    links = re.findall(r"\]\((plots/[^)]+)\)", page)
    assert links and all((run / link).is_file() for link in links)

    # The checks ran, were embedded and written beside the page.
    assert "## Checks of run run" in page and "### General claims" in page
    assert (run / "check.md").is_file() and (run / "check.json").is_file()
    report = json.loads((run / "check.json").read_text(encoding="utf-8"))
    failed = sum(c["status"] == "fail" for c in report["claims"])
    # the recorded runs fail at most the capstone's decode-time model, a timing claim of the machine they ran on, and
    # the course's title for the widths that wait on the arithmetic there (findings about that machine)
    assert {c["id"] for c in report["claims"] if c["status"] == "fail" and c["group"] != "course"} <= {
        "decode_model_predicts_every_width"}
    assert f"{failed} fail" in page
    assert not list(run.glob(".*.tmp"))


def test_the_page_names_lessons_that_failed(tmp_path):
    run = assemble_run(tmp_path / "run", "01_model_on_disk", L4)
    (run / f"{L4}.json").unlink()
    edit_manifest(run, lambda m: m["lessons"][L4].update(status="failed", error="ServerTimeout: the server did not answer"))
    assert invoke("report", run, "--no-checks").exit_code == 0
    page = (run / "README.md").read_text(encoding="utf-8")
    assert "| `04_next_token` | failed | The forward pass: ServerTimeout: the server did not answer |" in page
    assert "Checks of run" not in page and not (run / "check.md").exists()


def test_report_on_a_folder_that_is_not_a_run(tmp_path):
    result = invoke("report", tmp_path)
    assert result.exit_code == 1 and "is not a bytesup run folder" in result.output
    assert not (tmp_path / "README.md").exists()


def test_demoted_turns_lesson_titles_into_sections_only():
    result = read_result(fixture_run(L4), L4)
    md = lesson_md(result)
    out = markdown(demoted(lesson_blocks(result)))
    assert md.startswith("# The forward pass\n") and out.startswith("## The forward pass\n")
    assert out.count("\n### ") == md.count("\n### ") > 0
    assert out.removeprefix("#") == md



# --- report.html ---------------------------------------------------------------------------------

HOSTILE = "<script>alert('model')</script> & [x](javascript:alert(1))"


def hostile_run(dest: Path, *lesson_ids: str) -> Path:
    """A run whose model name, file and server build come from someone who wants to run a script. Its manifest
    records the sha256 of each lesson's JSON as written here, where the fixture's kept one."""
    run = assemble_run(dest, *lesson_ids)
    edit_manifest(run, lambda m: (m["model"].update(path=f"/models/{HOSTILE}.gguf"), m["engine"].update(build=HOSTILE)))
    written = {}
    for lid in lesson_ids:
        result = read_result(run, lid)
        result.model["name"] = HOSTILE
        raw = json.dumps(result.to_json()).encode("utf-8")
        (run / f"{lid}.json").write_bytes(raw)
        written[lid] = hashlib.sha256(raw).hexdigest()

    def recorded(m: dict) -> None:
        for lid, entry in m["lessons"].items():
            if entry.get("json_sha256") and lid in written:
                entry["json_sha256"] = written[lid]

    edit_manifest(run, recorded)
    return run


def test_report_html_is_one_page_with_every_lesson_plot_and_check_and_escapes_outside_text(tmp_path):
    run = hostile_run(tmp_path / "run", *ALL)
    result = invoke("report", run, "--html")
    assert result.exit_code == 0, result.output
    assert f"wrote {run / 'report.html'}" in result.stdout
    page = (run / "report.html").read_text(encoding="utf-8")

    for lid in ALL:
        lesson = read_result(run, lid)
        assert re.search(rf'<h2 id="{re.escape(anchor(lesson.title))}">', page), lid
        for table in lesson.tables:   # a table of the lesson's Details is one level lower, inside them
            assert f">{html.escape(table.title)}</h{4 if table.detail else 3}>" in page
    plots = sum(len(read_result(run, lid).plots) for lid in ALL)
    assert plots > 0 and page.count("<svg") == plots
    assert '<table class="checks">' in page and "✅ pass" in page and "Checks of run run" in page

    # Nothing to fetch and nothing to run: no script, no outside URL in any attribute, a policy that forbids both.
    assert "<script" not in page.lower().replace("&lt;script", "")
    assert not re.search(r"""(?:src|href)=["']?(?:https?:|//|javascript:)""", page, re.I)
    assert "default-src 'none'" in page
    assert html.escape(HOSTILE) in page and HOSTILE not in page


def test_run_all_report_writes_the_html_page_beside_the_readme(tmp_path):
    run = assemble_run(tmp_path / "run", L4)
    pages, checked = write_run_report(run, None, run_checks=False, with_html=True)
    assert [p.name for p in pages] == ["README.md", "report.html"] and checked is None
    page = (run / "report.html").read_text(encoding="utf-8")
    # The same blocks as README.md: every row of the lesson's Markdown tables is in the page, cell for cell.
    result = read_result(run, L4)
    numeric = ' class="num"'

    def td(v) -> str:
        return f"<td{numeric if isinstance(v, (int, float)) and not isinstance(v, bool) else ''}>{html.escape(fmt(v))}</td>"

    for table in result.tables:
        for row in table.rows:
            assert "<tr>" + "".join(td(v) for v in row) + "</tr>" in page


# --- the page's summary, sections and validity -----------------------------------------------------

class Page(HTMLParser):
    """What report.html holds, element by element: ids, classes, internal links, the body's first element, and the
    text outside code, style and svg."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.classes: set[str] = set()
        self.targets: list[str] = []
        self.hrefs: list[str] = []
        self.body_children: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.stack: list[str] = []
        self.style = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"])
        self.classes.update((a.get("class") or "").split())
        for key in ("href", "xlink:href"):
            if a.get(key):
                (self.targets if a[key].startswith("#") else self.hrefs).append(a[key])
        if self.stack and self.stack[-1] == "body":
            self.body_children.append((tag, a.get("class") or ""))
        if tag not in ("meta", "br", "img", "path", "use", "rect", "circle", "line", "polyline", "stop"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop() == tag:
                break

    def handle_data(self, data):
        if "style" in self.stack and "svg" not in self.stack:
            self.style += data
        elif not {"code", "style", "svg", "title"} & set(self.stack):
            self.text.append(data)


def parse(page: str) -> Page:
    parsed = Page()
    parsed.feed(page)
    return parsed


def test_report_html_is_valid_and_opens_with_the_summary(tmp_path):
    run = assemble_run(tmp_path / "run", *ALL)
    pages, report = write_run_report(run, None, run_checks=True, with_html=True)
    page = pages[1].read_text(encoding="utf-8")
    parsed = parse(page)

    # Unique ids, the plots' own among them, and every link inside the page (and inside each plot) has its target.
    assert len(parsed.ids) == len(set(parsed.ids)) > 100
    refs = re.findall(r'(?:href="#|url\(#)([^")]+)', page)
    assert refs and set(refs) <= set(parsed.ids)
    assert page.count("<svg") == sum(len(read_result(run, lid).plots) for lid in ALL)
    # The summary comes first; then the contents, one section per lesson with a result, the checks.
    assert parsed.body_children[0] == ("header", "summary") and parsed.body_children[1] == ("nav", "contents")
    lessons = [c for c in parsed.body_children if c == ("section", "lesson")]
    assert len(lessons) == len(ALL)
    head = page[:page.index("</header>")]
    assert '<table class="summary">' in head and "Warnings" in head and "checks" in head
    general = [r for r in report.results if r.source == "general"] if report is not None else []
    assert f"general claims: {sum(r.status == 'pass' for r in general if r.group != 'course')} pass" in head
    assert (f"general claims against the course (a fail is a finding about this machine): "
            f"{sum(r.status == 'pass' for r in general if r.group == 'course')} pass") in head
    # a fail against the course is a finding, counted above, and no warning
    assert any(r.status == "fail" and r.group == "course" for r in general) and "Check failed: decode is memory-bound" not in head
    # No raw Markdown anywhere in the text: the files are code, the notes' code spans are code.
    text = "".join(parsed.text)
    assert "`" not in text and "Files: " in text
    assert f'<a href="{L4}.json"><code>{L4}.json</code></a>' in page
    # Every class a style rule names is used by an element of the page.
    named = set(re.findall(r"\.([A-Za-z][\w-]*)", re.sub(r"\{[^}]*\}", "{}", parsed.style)))
    assert named and named <= parsed.classes, named - parsed.classes
    # Long and wide tables are folded: lesson 1's tensors (in its Details), every measurements table.
    tensors = page.index(">Every tensor in the file</h4>")
    assert page.rfind('<details class="table">', 0, tensors) > page.rfind("</details>", 0, tensors)
    assert all(len(re.findall(r"<th>", t)) <= 8 or '<details class="table">' in page[max(0, page.find(t) - 400):page.find(t)]
               for t in re.findall(r"<table>.*?</table>", page, re.S))


def test_the_summary_gives_the_runs_account_of_the_machine_and_the_capstone(tmp_path):
    from bytesup.course import decodetime
    from bytesup.run.report import summary_blocks
    from bytesup.store.facts.lesson08 import DecodeModel
    from bytesup.store.runs import load_run

    run = load_run(assemble_run(tmp_path / "run", L4, "08_capstone_decode_memory_bound"))
    page = markdown(summary_blocks(run, None))
    reading = run.manifest.host_bandwidth.before["gb_per_s"]
    assert f"{fmt(reading['median'])} GB/s (median of {len(reading['samples'])} samples" in page
    # The terms are decodetime's fit of the capstone's own steps at one sequence.
    fact = run.results["08_capstone_decode_memory_bound"].stated(DecodeModel)
    terms = decodetime.fit([decodetime.Width(w.name, w.weight_bytes, w.n_params, w.weight_type,
                                             {int(p): v for p, v in w.step_ms.items()}, w.n_layer) for w in fact.widths])
    assert f"B = {fmt(terms.gbs)} GB/s" in page and f"f = {fmt(terms.fixed_ms_per_block)} ms per block" in page
    # The engine saw no accelerator: the GPU flag is there, marked as doing nothing.
    assert "`--n-gpu-layers 99` does nothing here" in page


def test_a_gpu_flag_is_not_marked_where_the_engine_saw_an_accelerator(tmp_path):
    from bytesup.run.report import summary_blocks
    from bytesup.store.runs import load_run

    path = assemble_run(tmp_path / "run", L4)
    result = read_result(path, L4)
    result.host_values["server_facts"]["accelerators"] = ["CUDA0"]
    (path / f"{L4}.json").write_text(json.dumps(result.to_json()), encoding="utf-8")
    page = markdown(summary_blocks(load_run(path), None))
    assert "--n-gpu-layers 99" in page and "does nothing" not in page


@pytest.mark.parametrize("result_kept", [False, True])
def test_a_skipped_lesson_is_shown_skipped_with_its_reason_never_ok(tmp_path, result_kept):
    from bytesup.run.report import lesson_sections
    from bytesup.store.runs import load_run

    nine = "09_beyond_one_machine"
    run = assemble_run(tmp_path / "run", L4, nine)
    reason, command = "the embedded engine has no rpc-server", "bash scripts/build_llama_server.sh"
    edit_manifest(run, lambda m: m["lessons"][nine].update(status="skipped", skip_reason=reason, enable_command=command))
    loaded = load_run(run)
    if result_kept:  # a skipped lesson's page, kept to say what it did not measure
        loaded.results[nine] = read_result(run, nine)
    else:
        loaded.results.pop(nine, None)
    md = report_md(loaded, None)
    row = next(line for line in md.splitlines() if line.startswith(f"| `{nine}` |"))
    assert "| skipped |" in row and f"{reason}; {command} enables it" in row and "| ok |" not in row
    assert f"- {nine} was skipped: it measured nothing here: {reason}; {command} enables it" in md
    page = report_html(loaded, None)
    assert f"{nine} was skipped" in page[:page.index("</header>")]
    if result_kept:
        [blocks] = [b for lid, b in lesson_sections(loaded) if lid == nine]
        assert markdown(blocks[:2]).endswith(f"This lesson was skipped: it measured nothing on this machine ({reason}; "
                                             f"{command} enables it).\n")
        assert f'id="lesson-{nine}"' in page
    else:
        assert f'id="lesson-{nine}"' not in page


def test_a_model_path_with_markup_stays_one_code_span_in_the_readme(tmp_path):
    from markdown_it import MarkdownIt

    run = assemble_run(tmp_path / "run", L4)
    command = ["bytesup", "run-all", "--model", "/m/<img src=x>`&amp;|x`.gguf"]
    edit_manifest(run, lambda m: m.update(command=command))
    pages, _ = write_run_report(run, None, run_checks=False, with_html=True)
    row = next(line for line in pages[0].read_text(encoding="utf-8").splitlines() if line.startswith("| command |"))
    rendered = MarkdownIt("commonmark").enable("table").render("| | |\n|---|---|\n" + row + "\n")
    assert html.unescape(re.search(r"<code>(.*?)</code>", rendered).group(1)) == " ".join(command)
    assert f"<code>{html.escape(' '.join(command))}</code>" in pages[1].read_text(encoding="utf-8")


def test_the_summary_counts_the_checks_by_kind_from_check_json_when_none_were_run(tmp_path):
    from bytesup.run.report import summary_blocks
    from bytesup.store.runs import load_run

    run = assemble_run(tmp_path / "run", L4)
    claims = [{"source": "general", "status": s} for s in ("pass", "pass", "fail", "not applicable")]
    claims += [{"source": "lesson 4 on the DGX Spark", "status": "not applicable"}] * 3
    (run / "check.json").write_text(json.dumps({"claims": claims}), encoding="utf-8")
    page = markdown(summary_blocks(load_run(run), None))
    assert ("| checks | general claims: 2 pass, 1 fail, 1 not applicable; published figures (lesson 4 on the DGX Spark): "
            "0 pass, 0 fail, 3 not applicable |") in page
    (run / "check.json").write_text("{ damaged", encoding="utf-8")
    assert "| checks |" not in markdown(summary_blocks(load_run(run), None))


def test_the_page_opens_with_what_the_run_found_from_the_capstones_verdicts(tmp_path):
    """Hand-made verdicts in the capstone's facts: the sentence counts the models whose decode waits on memory, names
    up to three of a verdict and counts more, and says what "mixed" means where a model is."""
    from bytesup.run.report import CAPSTONE, found_sentence, summary_blocks
    from bytesup.store.runs import load_run

    run = load_run(assemble_run(tmp_path / "run", L4, CAPSTONE))

    def found(verdicts: dict[str, str]) -> str | None:
        run.results[CAPSTONE] = run.results[CAPSTONE].model_copy(update={"facts": {"verdicts": verdicts}})
        return found_sentence(run)

    assert found({"a": "memory-bound", "b": "memory-bound", "c": "compute-bound"}) == (
        "What this run found: the course's title, decode is memory-bound, is shown on this machine for 2 of the 3 models "
        "the capstone (lesson 8) measured: a and b wait on memory; c waits on the arithmetic. Why, and what would move "
        "a model across, in the capstone's conclusion.")
    mixed = found({f"m{k}": "mixed" for k in range(4)} | {"q": "compute-bound"})
    assert mixed is not None and mixed.startswith("What this run found: the course's title, decode is memory-bound, "
                                                  "is shown on this machine for none of the 5 models")
    assert ("measured: 4 models are mixed (the run cannot tell whether reading the weights or the arithmetic takes "
            "longer); q waits on the arithmetic.") in mixed
    # It stands second on the page, under the run's identity and before the engines and the summary table.
    found({"a": "memory-bound"})
    page = markdown(summary_blocks(run, None))
    assert page.index("What this run found: the course's title") < page.index("| machine |")
    del run.results[CAPSTONE]  # a run without the capstone: no sentence, and the page opens as before
    assert found_sentence(run) is None and "What this run found" not in markdown(summary_blocks(run, None))


def test_the_verdicts_row_names_where_lesson_7s_roofline_puts_the_default_model_on_another_side(tmp_path):
    """Lesson 7's decode row says which side of the engine's ridge the default model's decode lies; the capstone's
    verdict for that model is the run's. Hand-made verdicts: the same side says nothing more, another says both."""
    from bytesup.run.report import CAPSTONE, ROOFLINE, roofline_against_capstone, summary_blocks
    from bytesup.store.runs import load_run

    run = load_run(assemble_run(tmp_path / "run", ROOFLINE, CAPSTONE))
    model = str(run.results[ROOFLINE].model["name"])
    points = run.results[ROOFLINE].table("roofline_points_main")
    names = [c.name for c in points.columns]
    side = next(r[names.index("bound on this CPU")] for r in points.rows if r[names.index("phase")] == "decode")
    assert side in ("compute", "memory")
    other = "memory" if side == "compute" else "compute"

    def against(verdict: str) -> str | None:
        run.results[CAPSTONE] = run.results[CAPSTONE].model_copy(update={"facts": {"verdicts": {model: verdict}}})
        return roofline_against_capstone(run)

    assert against(f"{side}-bound") is None
    assert against(f"{other}-bound") == (
        f"lesson 7's roofline puts {model}'s decode on the {side} side of the engine's ridge, which sets it against the "
        "engine's prefill rate (decode's one-token kernels need not reach it) with nothing allowed for the samples' "
        f"scatter; the capstone times decode's own arithmetic on every model and finds it {other}-bound: its verdict "
        "is this run's")
    mixed = against("mixed")
    assert mixed is not None and mixed.endswith("finds it mixed: its verdict is this run's")
    assert f"| the capstone's verdicts | mixed: {model}; lesson 7's roofline puts" in markdown(summary_blocks(run, None))
    del run.results[ROOFLINE]
    assert roofline_against_capstone(run) is None


def test_a_lessons_plot_drawn_for_its_files_gives_the_page_its_svg_without_drawing_again(tmp_path, monkeypatch):
    """write_plots draws the PNG, the SVG and the page's SVG (text as text) on one figure; the page's svg_markup then
    takes the kept one, the same bytes as a drawing of its own, and draws no figure."""
    from bytesup.store import plots
    from bytesup.store.results import LessonResult, Plot, Series

    plot = Plot(name="p", title="a <title>", x_label="x", y_label="y",
                series=[Series(label="s", x=[1.0, 2.0, 4.0], y=[3.0, 1.0, 2.0])])
    result = LessonResult(lesson_id="99_plot", title="t", started_at="", finished_at="", plots=[plot])
    monkeypatch.setattr(plots, "_drawings", type(plots._drawings)())
    fresh = plots.svg_markup(plot, "f-")
    monkeypatch.setattr(plots, "_drawings", type(plots._drawings)())
    figures = []
    drawn = plots._figure
    monkeypatch.setattr(plots, "_figure", lambda *a: figures.append(a) or drawn(*a))
    written = plots.write_plots(result, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["plots/99_plot-p.png", "plots/99_plot-p.svg"]
    assert written[0].read_bytes().startswith(b"\x89PNG") and b"<svg" in written[1].read_bytes()
    assert len(figures) == 1
    assert plots.svg_markup(plot, "f-") == fresh and len(figures) == 1
    assert 'id="f-svg"' in fresh and "<text" in fresh and "<text" not in written[1].read_text()  # outlines in the file
