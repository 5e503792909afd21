"""Text from a server, a file or a model stays text (bytesup.store.escape): no rich markup, Markdown or HTML
from it reaches a console, a page or a cell as markup."""

from __future__ import annotations

import re

from bytesup.cli.app import app
from bytesup.run import folder

from faultkit import cli, flat, manifest_of
from test_runner import lessons, serve, URL  # noqa: F401 (lessons is a fixture)


HOSTILE = {
    "name": "<script>alert(1)</script>",
    "link": "[click](javascript:alert(1))",
    "heading": "## heading",
    "file": "evil<b>|x.gguf",
}


def test_markup_in_a_server_error_body_is_printed_as_text(lessons, tmp_path, httpx_mock):
    serve(httpx_mock, decode=False)
    httpx_mock.add_response(url=URL + "/completion", status_code=500, text="model [/red] crashed [bold]here", is_reusable=True)
    res = cli.invoke(app, ["run", "02_decode", "01_tokens", "--server", URL, "--out", str(tmp_path / "run")])
    assert res.exit_code == 1, res.output
    assert "[/red] crashed [bold]here" in flat(res.output)
    assert manifest_of(tmp_path / "run")["lessons"]["01_tokens"]["status"] == "ok"  # run-all went on


def test_markup_in_paths_is_printed_as_text(lessons, tmp_path, httpx_mock):
    serve(httpx_mock)
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(tmp_path / "m[/i].gguf"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "m[/i].gguf is not a file here" in flat(res.output)
    out = tmp_path / "x[/b]y[bold]z"
    assert cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)]).exit_code == 0
    again = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(out)])
    assert again.exit_code == 1 and f"{out} already holds results" in flat(again.output)


def test_hostile_text_stays_text_in_every_markdown_file(tmp_path):
    from bytesup.run.report import report_md
    from bytesup.store.render import lesson_md
    from bytesup.store.results import Column, LessonResult, Table
    from bytesup.check.compare import Run
    from bytesup.store.manifest import Manifest

    result = LessonResult(
        lesson_id="01_model_on_disk", title=f"Model {HOSTILE['name']}", started_at="s", finished_at="f",
        model={"name": HOSTILE["name"], "file": HOSTILE["file"]}, server={"engine": "<i>e</i>", "build": HOSTILE["link"]},
        tables=[Table(name="t", title=HOSTILE["heading"], columns=[Column(name=HOSTILE["file"], unit="<u>")],
                      rows=[[HOSTILE["name"]], [HOSTILE["link"]], ["a\\|b"]], notes=[HOSTILE["heading"], HOSTILE["link"]])],
        notes=[HOSTILE["heading"], f"file {HOSTILE['file']}", "[x]: javascript:alert(1)"],
    )
    manifest = Manifest.model_validate({"status": "incomplete", "host": {"hostname": HOSTILE["name"]}, "engine": {"build": HOSTILE["link"]},
                "model": {"path": f"/m/{HOSTILE['file']}"},
                "lessons": {"01_model_on_disk": {"status": "ok", "title": HOSTILE["name"]},
                            "02_x": {"status": "failed", "error": f"{HOSTILE['heading']}\n{HOSTILE['name']} | x"}}})
    pages = {
        "lesson": lesson_md(result),
        "index": folder.run_readme(tmp_path / "evil<b>", manifest),
        "report": report_md(Run(path=tmp_path / "r", manifest=manifest, results={"01_model_on_disk": result}), None),
    }
    for name, text in pages.items():
        assert "<script" not in text and "<b>" not in text and "<i>" not in text and "<u>" not in text, name
        assert not re.search(r"(?<!\\)\]\(javascript:", text), name
        for line in text.splitlines():
            assert not line.startswith("## heading") and not line.startswith("- ## heading"), (name, line)
            assert not line.startswith("- [x]:"), (name, line)
            if line.startswith("| "):  # every table row keeps its number of cells
                assert line.replace("\\|", "").count("|") in (2, 3, 4, 5), (name, line)
    assert "&lt;script>alert(1)&lt;/script>" in pages["lesson"]


def test_token_pieces_with_markdown_characters_stay_text_in_a_cell():
    from bytesup.store.escape import md_text

    assert md_text("`code` *em* ~~gone~~", cell=True) == "\\`code\\` \\*em\\* \\~\\~gone\\~\\~"
    assert md_text(" *", cell=True) == " \\*"
    assert md_text("`--repeat`") == "`--repeat`"  # outside a cell, a lesson's own note keeps its code spans


def test_a_lesson_table_with_such_pieces_renders_them_escaped(tmp_path):
    from bytesup.store.render import lesson_md
    from bytesup.store.results import Column, LessonResult, Table

    result = LessonResult(lesson_id="04_next_token", title="T", started_at="a", finished_at="b",
                          tables=[Table(name="t", title="Top", columns=[Column(name="piece", unit="")],
                                        rows=[["`x`"], ["**bold**"]])])
    text = lesson_md(result)
    assert "| \\`x\\` |" in text and "| \\*\\*bold\\*\\* |" in text
