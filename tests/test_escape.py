"""Text from outside is text everywhere: in table cells, notes, headers and code spans, in Markdown and in HTML.

The Markdown is read back by a CommonMark parser with GitHub's tables and strikethrough (markdown-it, which rich
brings), so each test asks what a reader sees, not which backslashes were written."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from bytesup.store.escape import md_code, md_literal, md_text
from bytesup.store.render import Code, html, lesson_blocks, lesson_md, note_parts, outside_strings
from bytesup.store.results import Column, LessonResult, Table

HOSTILE = ["_u_", "__b__", "`tick`", "*star*", "**bold**", "~~gone~~", "a\\*b", "\\", "x\\", "<img src=x onerror=alert(1)>",
           "&amp;", "[x](javascript:alert(1))", "![i](http://192.0.2.1/x.png)", "# heading", "- item", "1. one", "> quote",
           "a | b", "``", "_", "*", "e\\_x", "<!-- c -->", "snake_case_name"]


def reader() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


class Seen(HTMLParser):
    """The text a browser shows, and the tags it would make."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.tags: list[str] = []
        self.code: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "code":
            self._in_code += 1
            self.code.append("")

    def handle_endtag(self, tag):
        if tag == "code":
            self._in_code -= 1

    def handle_data(self, data):
        self.text.append(data)
        if self._in_code:
            self.code[-1] += data


def seen(markup: str) -> Seen:
    parser = Seen()
    parser.feed(markup)
    return parser


@pytest.mark.parametrize("text", HOSTILE)
def test_outside_text_reads_as_typed_in_a_paragraph_and_in_a_cell(text):
    para = seen(reader().render(md_literal(text)))
    assert "".join(para.text).strip() == text
    assert set(para.tags) <= {"p"}, para.tags
    cell = seen(reader().render(f"| h |\n|---|\n| {md_literal(text, cell=True)} |\n"))
    assert "".join(cell.text).split("h", 1)[1].strip() == text
    assert set(cell.tags) <= {"table", "thead", "tbody", "tr", "th", "td"}, cell.tags
    # md_text in a cell is the same escape (compare's tables use it)
    assert md_text(text, cell=True) == md_literal(text, cell=True)


@pytest.mark.parametrize("text", ["bytesup run --model /m/<img src=x>.gguf", "a`b", "``x``", "`", "&amp; &lt;", "a|b", " x "])
def test_a_code_span_shows_its_text_as_typed(text):
    out = seen(reader().render(md_code(text)))
    assert out.code == [text]
    cell = seen(reader().render(f"| h |\n|---|\n| {md_code(text, cell=True)} |\n"))
    assert cell.code == out.code


def test_words_joined_by_underscores_and_plain_text_keep_their_bytes():
    # Committed lesson pages replay byte for byte: what Markdown cannot misread is written as it is.
    for text in ("token_embd.weight", "n_ubatch = 512", "blk.0.attn_norm.weight", "i < j", "[depth=512]", "08_capstone"):
        assert md_literal(text) == text
    assert md_text("`--repeat` is kept") == "`--repeat` is kept"  # a lesson's own sentence keeps its code spans


def test_a_note_keeps_its_own_code_spans_and_quotes_recorded_text_as_typed():
    piece = "'… `tick` *star*'"
    note = f"The top token {piece} has logprob -0.1; pin the chain with `samplers` and `-n 32`."
    parts = note_parts(note, frozenset({piece}))
    assert [p.text for p in parts if isinstance(p, Code)] == ["samplers", "-n 32"]
    assert "".join(p if isinstance(p, str) else f"`{p.text}`" for p in parts) == note
    md = seen(reader().render("".join(md_literal(p) if isinstance(p, str) else md_code(p.text) for p in parts)))
    assert piece in "".join(md.text) and md.code == ["samplers", "-n 32"] and "em" not in md.tags
    # An odd backtick is text, and a note without recorded text is left as one string.
    assert note_parts("one ` only") == "one ` only"


def hostile_result() -> LessonResult:
    """A lesson whose cells, header, title, model name and notes hold text from outside."""
    return LessonResult(
        lesson_id="04_next_token", title="Top *tokens* after `x`", started_at="2026-12-01T00:00:00+00:00",
        finished_at="2026-12-01T00:00:01+00:00", model={"name": "_a_ `b` <em>c</em>"}, server={"engine": "e", "build": "*b*"},
        tables=[Table(name="t", title="The prompt '__p__'", columns=[Column(name="piece", unit="_u_"), Column(name="p")],
                      rows=[[p, 0.5] for p in HOSTILE],
                      notes=["The top token '`tick`' beats '_u_'; the chain is pinned with `samplers`."])],
        notes=["Model _a_ `b` <em>c</em> answered; see `bytesup check`."])


def test_a_lesson_page_shows_outside_text_as_typed_in_markdown():
    result = hostile_result()
    assert "'`tick`'" not in outside_strings(result)  # the cell holds `tick` alone: the note quotes it
    out = seen(reader().render(lesson_md(result)))
    text = "".join(out.text)
    for s in [*HOSTILE, "_a_ `b` <em>c</em>", "Top *tokens* after `x`", "The prompt '__p__'", "piece (_u_)", "*b*"]:
        assert s in text, s
    assert not {"em", "strong", "del", "s", "img", "a", "h4", "blockquote", "ol"} & set(out.tags), set(out.tags)
    # Only the lessons' own code spans are code: the lesson id and the two commands of the notes.
    assert out.code == ["04_next_token", "samplers", "bytesup check"]


def test_a_lesson_page_shows_outside_text_as_typed_in_html():
    result = hostile_result()
    out = seen(html(lesson_blocks(result)))
    text = "".join(out.text)
    for s in [*HOSTILE, "_a_ `b` <em>c</em>", "Top *tokens* after `x`", "The top token '`tick`' beats '_u_'"]:
        assert s in text, s
    assert not {"em", "strong", "img", "a", "script"} & set(out.tags)
    assert out.code == ["04_next_token", "samplers", "bytesup check"]


def test_a_link_target_from_a_file_stays_one_target():
    from bytesup.store.render import Link, Paragraph, markdown

    text = markdown([Paragraph(("Files: ", Link("http/a (1)].jsonl", "http/a (1)].jsonl", code=True)))])
    out = reader().render(text)
    assert '<a href="http/a%20%281%29%5D.jsonl"><code>http/a (1)].jsonl</code></a>' in out
