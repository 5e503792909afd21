"""`bytesup report`: one README.md page for a run folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_check import ALL
from test_compare import L4, assemble_run, edit_manifest, fixture_run, invoke, read_result

from bytesup.render import lesson_md
from bytesup.report import demote


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
    assert "0 fail" in page
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


def test_demote_turns_lesson_titles_into_sections_only():
    md = lesson_md(read_result(fixture_run(L4), L4))
    out = demote(md)
    assert out.startswith("## The forward pass")
    assert out.count("\n### ") == md.count("\n### ")
    assert demote("# A\n```\n# not a heading\n```\n") == "## A\n```\n# not a heading\n```"

