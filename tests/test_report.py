"""`bytesup report`: one README.md page for a run folder."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from test_check import ALL
from test_compare import L4, assemble_run, edit_manifest, fixture_run, invoke, read_result

from bytesup.store.render import anchor, demoted, fmt, lesson_blocks, lesson_md, markdown
from bytesup.run.report import write_run_report


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
            assert f"### {table.title}" in page
    # Plot links stay relative to the run folder, and the files are there.
    links = re.findall(r"\]\((plots/[^)]+)\)", page)
    assert links and all((run / link).is_file() for link in links)

    # The checks ran, were embedded and written beside the page.
    assert "## Checks of run run" in page and "### General claims" in page
    assert (run / "check.md").is_file() and (run / "check.json").is_file()
    report = json.loads((run / "check.json").read_text(encoding="utf-8"))
    failed = sum(c["status"] == "fail" for c in report["claims"])
    # the recorded runs fail at most the capstone's decode-time model, a timing claim of the machine they ran on
    assert {c["id"] for c in report["claims"] if c["status"] == "fail"} <= {"decode_model_predicts_every_width"}
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
    """A run whose model name, file and server build come from someone who wants to run a script."""
    run = assemble_run(dest, *lesson_ids)
    edit_manifest(run, lambda m: (m["model"].update(path=f"/models/{HOSTILE}.gguf"), m["engine"].update(build=HOSTILE)))
    for lid in lesson_ids:
        result = read_result(run, lid)
        result.model["name"] = HOSTILE
        (run / f"{lid}.json").write_text(json.dumps(result.to_json()), encoding="utf-8")
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
        for table in lesson.tables:
            assert f">{html.escape(table.title)}</h3>" in page
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


def test_run_all_with_report_replays_a_committed_run_and_prints_both_pages(tmp_path):
    out = tmp_path / "replayed"
    committed = Path(__file__).resolve().parents[1] / "outputs" / "2026-12-01-cpu2-smollm2"
    result = invoke("run-all", "--replay", committed, "--out", out, "--report")
    assert result.exit_code == 0, result.output
    assert f"page: {out / 'report.html'}" in result.output.replace("\n", "")
    page = (out / "report.html").read_text(encoding="utf-8")
    titles = [json.loads(p.read_text(encoding="utf-8"))["title"] for p in sorted(committed.glob("0*.json"))]
    assert len(titles) == 10
    positions = [page.index(f'<h2 id="{anchor(t)}">') for t in titles]
    assert positions == sorted(positions)  # course order
