"""Views of lesson results and of runs, rendered from the JSON only and never parsed back: one list of blocks per page,
written as Markdown (`markdown`) or as a self-contained HTML page (`html`, `html_page`)."""

from __future__ import annotations

import html as _html
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Union
from urllib.parse import quote

from bytesup.course import busy
from bytesup.store.escape import md_code, md_literal
from bytesup.store.results import LessonResult, Measurement, Plot, Table


def fmt(value: Any) -> str:
    """One way to print a number everywhere: thousands separators, four significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "∞" if value > 0 else "−∞"
        if value != 0 and 1e4 <= abs(value) < 1e15:
            return f"{value:,.0f}"
        shown = f"{value:,.4g}"
        if shown.lstrip("-").isdigit() and len(shown.lstrip("-")) < 4 and abs(value - round(value)) > 1e-9 * abs(value):
            # a value that is not whole but rounds to one at four digits keeps them: 77.996 is 78.00, not 78
            return f"{value:#.4g}".rstrip(".")
        return shown
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


def percent(fraction: float) -> str:
    """A share as a percentage printed as `fmt` prints any number, so a probability reads the same in a sentence and
    in its table: 92.7%, 77.25%, 78.00% (77.996), 0.5731%."""
    return fmt(100 * fraction) + "%"


def cell(value: Any) -> str:
    return md_literal(fmt(value), newline="⏎", cell=True)


def header(name: str, unit: str) -> str:
    return f"{name} ({unit})" if unit else name


# --- the document: what a lesson (or a run, or a history) says, before any format -------------
#
# One page is a list of blocks. `markdown` and `html` write the same blocks; every plain str is text,
# shown as typed in either format (`md_literal`, `html.escape`): a token piece `_u_` or `` `tick` ``
# never becomes emphasis or code. What the page means as code is a `Code` part (shown as typed
# inside its span, `md_code`); a lesson's note is split into its own code spans and text by
# `note_parts`, which keeps the strings the lesson recorded as data (its cells, facts, names) text.

@dataclass(frozen=True)
class Code:
    """Inline code (an id, a flag list, a digest)."""

    text: str


@dataclass(frozen=True)
class Link:
    """A link inside the page (`#anchor`) or to a file beside it; `code`: its text shown as code (a file name)."""

    text: str
    href: str
    code: bool = False


Inline = Union[str, Code, Link]
# A note: a plain str is text; parts are text (str) and the lesson's own code spans (Code), see `note_parts`.
Note = Union[str, tuple[Inline, ...]]


@dataclass(frozen=True)
class Heading:
    level: int
    text: str
    anchor: str = ""


@dataclass(frozen=True)
class Paragraph:
    parts: tuple[Inline, ...]


@dataclass(frozen=True)
class Bullets:
    title: str
    items: tuple[Note, ...]
    level: int = 3


@dataclass(frozen=True)
class TableBlock:
    """A titled table: header cells, rows of values (numbers printed by `fmt`) or inline parts, notes."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    notes: tuple[Note, ...] = ()
    level: int = 3
    css: str = ""


@dataclass(frozen=True)
class Figure:
    title: str
    plot: Plot
    png: str = ""
    svg: str = ""
    level: int = 3


@dataclass(frozen=True)
class Details:
    """What a reader may skip: folded under its title in HTML (`<details>`), and in Markdown gathered into a
    section "Details" at the end of the page, in order."""

    title: str
    blocks: tuple["Block", ...]
    level: int = 3


Block = Union[Heading, Paragraph, Bullets, TableBlock, Figure, Details]


def demoted(blocks: list[Block]) -> list[Block]:
    """A page's title (level 1) made a section (level 2) of a larger page; what nests below it stays."""
    return [replace(b, level=2) if isinstance(b, Heading) and b.level == 1 else b for b in blocks]


def anchor(text: str) -> str:
    """GitHub's heading anchors (lower case, spaces to hyphens, punctuation dropped), also the HTML ids."""
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


# --- Markdown -----------------------------------------------------------------------------------

# What a link's target keeps as it is in Markdown; anything else (a space, a parenthesis, a bracket) is percent-encoded.
_HREF_SAFE = "/#.-_~%"


def _md_inline(part: Inline, in_cell: bool = False) -> str:
    newline = "⏎" if in_cell else " "
    if isinstance(part, Code):
        return md_code(part.text, newline, cell=in_cell)
    if isinstance(part, Link):
        text = md_code(part.text, newline, cell=in_cell) if part.code else md_literal(part.text, newline, cell=in_cell)
        return f"[{text}]({quote(part.href, safe=_HREF_SAFE)})"
    return md_literal(part, newline, cell=in_cell)


def _md_note(note: Note) -> str:
    if isinstance(note, str):
        return md_literal(note)
    return "".join(_md_inline(p) for p in note)


def cell_md(value: Any) -> str:
    """A table cell: a value printed by `fmt`, or inline parts."""
    if isinstance(value, (Code, Link)):
        return _md_inline(value, in_cell=True)
    if isinstance(value, tuple):
        return "".join(_md_inline(p, in_cell=True) for p in value)
    return cell(value)


def block_md(block: Block) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {md_literal(block.text)}\n"
    if isinstance(block, Paragraph):
        return "".join(_md_inline(p) for p in block.parts) + "\n"
    if isinstance(block, Bullets):
        return f"{'#' * block.level} {md_literal(block.title)}\n\n" + "\n".join(f"- {_md_note(n)}" for n in block.items) + "\n"
    if isinstance(block, Figure):
        title = md_literal(block.title)
        drawing = f"![{title}]({block.png}) ([SVG]({block.svg}))" if block.png else f"![{title}]({block.svg})"
        return f"{'#' * block.level} {title}\n\n{drawing}\n"
    if isinstance(block, Details):
        return f"{'#' * block.level} {md_literal(block.title)}\n\n" + markdown(list(block.blocks))
    lines = [f"{'#' * block.level} {md_literal(block.title)}", ""] if block.title else []
    lines.append("|" + "|".join(f" {cell(h)} " if h else " " for h in block.headers) + "|")
    lines.append("|" + "|".join("---" for _ in block.headers) + "|")
    for row in block.rows:
        lines.append("| " + " | ".join(cell_md(v) for v in row) + " |")
    if block.notes:
        lines.append("")
        lines.extend(f"- {_md_note(n)}" for n in block.notes)
    return "\n".join(lines) + "\n"


def markdown(blocks: list[Block]) -> str:
    """The page in Markdown: its blocks in order, then its Details (if any) in a section of their own at the end."""
    main: list[Block] = [b for b in blocks if not isinstance(b, Details)]
    folded = [b for b in blocks if isinstance(b, Details)]
    if folded:
        main.append(Heading(max(min(b.level for b in folded) - 1, 1), "Details", "details"))
        main += folded
    return "\n".join(block_md(b) for b in main)


# --- HTML ---------------------------------------------------------------------------------------

def _h(value: Any) -> str:
    return _html.escape(str(value), quote=True)


def _html_inline(part: Inline) -> str:
    if isinstance(part, Code):
        return f"<code>{_h(part.text)}</code>"
    if isinstance(part, Link):
        text = f"<code>{_h(part.text)}</code>" if part.code else _h(part.text)
        # Inside the page, or a file beside it; anything with a scheme (http:, javascript:) is not a link.
        if ":" in part.href or part.href.startswith("//"):
            return text
        return f'<a href="{_h(part.href)}">{text}</a>'
    return _h(part)


def _html_note(note: Note) -> str:
    return _h(note) if isinstance(note, str) else "".join(_html_inline(p) for p in note)


def _html_cell(value: Any) -> str:
    if isinstance(value, (Code, Link)):
        return _html_inline(value)
    if isinstance(value, tuple):
        return "".join(_html_inline(p) for p in value)
    return _h(fmt(value))


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Ids:
    """The ids of one HTML page, each given once: a second heading of the same text gets `-2`, and so on."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, wanted: str) -> str:
        base = wanted or "section"
        out, n = base, 1
        while out in self.used:
            n += 1
            out = f"{base}-{n}"
        self.used.add(out)
        return out


# svg(plot, prefix): the plot as an inline <svg> whose own ids all begin with `prefix` (unique in the page).
SvgWriter = Callable[[Plot, str], str]
# fold(table): whether a table goes into <details> (closed) on this page.
Fold = Callable[[TableBlock], bool]


def _table_html(block: TableBlock) -> str:
    css = f' class="{_h(block.css)}"' if block.css else ""
    head = "<thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in block.headers) + "</tr></thead>" if any(block.headers) else ""
    out = [f'<div class="table-box"><table{css}>{head}<tbody>']
    for row in block.rows:
        out.append("<tr>" + "".join(f'<td class="num">{_html_cell(v)}</td>' if _numeric(v) else f"<td>{_html_cell(v)}</td>"
                                    for v in row) + "</tr>")
    out.append("</tbody></table></div>")
    if block.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_html_note(n)}</li>" for n in block.notes) + "</ul>")
    return "\n".join(out)


def block_html(block: Block, svg: "SvgWriter | None" = None, ids: "Ids | None" = None, fold: "Fold | None" = None) -> str:
    ids = ids if ids is not None else Ids()
    if isinstance(block, Heading):
        id_ = f' id="{_h(ids(block.anchor))}"' if block.anchor else ""
        return f"<h{block.level}{id_}>{_h(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return "<p>" + "".join(_html_inline(p) for p in block.parts) + "</p>"
    if isinstance(block, Bullets):
        return (f"<h{block.level}>{_h(block.title)}</h{block.level}>\n<ul>"
                + "".join(f"<li>{_html_note(n)}</li>" for n in block.items) + "</ul>")
    if isinstance(block, Figure):
        drawing = svg(block.plot, ids(anchor(f"plot {block.plot.name}")) + "-") if svg is not None else ""
        return f'<figure class="plot"><figcaption>{_h(block.title)}</figcaption>\n{drawing}</figure>'
    if isinstance(block, Details):
        return (f"<details><summary>{_h(block.title)}</summary>\n"
                + "\n".join(block_html(b, svg, ids, fold) for b in block.blocks) + "\n</details>")
    if fold is not None and fold(block):
        size = f"{len(block.rows):,} row{'s' if len(block.rows) != 1 else ''} × {len(block.headers)} columns"
        title = (f"<h{block.level}>{_h(block.title)}</h{block.level}> " if block.title else "")
        return (f'<details class="table"><summary>{title}<span class="size">({size})</span></summary>\n'
                + _table_html(replace(block, title="")) + "\n</details>")
    out = [f"<h{block.level}>{_h(block.title)}</h{block.level}>"] if block.title else []
    out.append(_table_html(block))
    return "\n".join(out)


# The rules every page uses; a page adds the rules of its own elements (`html_page(..., style=...)`).
STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 1em auto; max-width: 72em; padding: 0 1em; color: #222;
       overflow-wrap: break-word; }
.table-box { overflow-x: auto; max-width: 100%; margin: .5em 0 1em; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th { background: #f2f2f2; }
code { background: #f4f4f4; padding: 0 2px; overflow-wrap: anywhere; }
figure.plot { margin: 1em 1em 1em 0; display: inline-block; vertical-align: top; width: min(100%, 520px); }
figure.plot svg { width: 100%; height: auto; display: block; }
details { margin: .5em 0; }
details > summary { cursor: pointer; }
details > summary > h1, details > summary > h2, details > summary > h3, details > summary > h4 { display: inline; }
@media print {
  body { max-width: none; margin: 0; font-size: 10pt; }
  .table-box { overflow: visible; }
  table { font-size: 8pt; }
  th, td { overflow-wrap: anywhere; }
  td.num { white-space: normal; }
  h1, h2, h3 { break-after: avoid; }
  figure.plot, tr { break-inside: avoid; }
  a { color: inherit; }
}
"""

# No script, font or stylesheet from anywhere: the page's own policy forbids every fetch.
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def html_page(title: str, body: list[str], style: str = "") -> str:
    """A self-contained page: inline style, inline SVG, no script, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_h(title)}</title>\n<style>{STYLE}{style}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def html(blocks: list[Block], svg: "SvgWriter | None" = None, ids: "Ids | None" = None, fold: "Fold | None" = None) -> str:
    """The blocks as HTML; `ids` gathers the page's ids when it is written in several parts."""
    ids = ids if ids is not None else Ids()
    return "\n".join(block_html(b, svg, ids, fold) for b in blocks)


# --- a lesson -----------------------------------------------------------------------------------

def measurement_label(name: str, settings: dict[str, Any]) -> str:
    """The name plus the settings that tell apart measurements of the same name."""
    if not settings:
        return name
    return f"{name} [" + ", ".join(f"{k}={fmt(v)}" for k, v in sorted(settings.items())) + "]"


# A string recorded as data that holds one of these is kept as text wherever a note repeats it.
_MARKUP = re.compile(r"[`*_~<>&\[\]\\|#]")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def outside_strings(result: LessonResult) -> frozenset[str]:
    """The strings a lesson recorded as data (its cells, facts, model and server, settings, plot labels) that
    Markdown could read as syntax: the text from outside that its notes may quote (a token piece, a prompt,
    a model's name)."""
    found = _strings([[t.rows for t in result.tables], result.facts, result.model, result.server, result.settings,
                      [[s.label for s in p.series] for p in result.plots]])
    return frozenset(s for s in found if len(s) >= 2 and _MARKUP.search(s))


def note_parts(note: str, outside: "frozenset[str] | set[str]" = frozenset()) -> Note:
    """A lesson's note as inline parts: the lesson's own backtick spans (`--repeat`) become code, everything else
    is text. The strings it recorded as data (`outside`) are text wherever the note repeats them, backticks
    included, so a token piece such as '`tick` *star*' reads as typed; the longest is taken first."""
    taken = [False] * len(note)
    for s in sorted(outside, key=lambda x: (-len(x), x)):
        start = note.find(s)
        while start >= 0:
            if not any(taken[start:start + len(s)]):
                taken[start:start + len(s)] = [True] * len(s)
            start = note.find(s, start + 1)
    ticks = [i for i, ch in enumerate(note) if ch == "`" and not taken[i]]
    if len(ticks) < 2:
        return note
    parts: list[Inline] = []
    at = 0
    for a, b in zip(ticks[::2], ticks[1::2], strict=False):
        if note[at:a]:
            parts.append(note[at:a])
        parts.append(Code(note[a + 1:b]))
        at = b + 1
    if note[at:]:
        parts.append(note[at:])
    return tuple(parts)


def table_block(table: Table, outside: "frozenset[str]" = frozenset()) -> TableBlock:
    return TableBlock(table.title, tuple(header(c.name, c.unit) for c in table.columns),
                      tuple(tuple(row) for row in table.rows), tuple(note_parts(n, outside) for n in table.notes))


def measurements_block(ms: list[Measurement]) -> TableBlock:
    return TableBlock("Measurements", ("measurement", "unit", "median", "min", "max", "samples"),
                      tuple((measurement_label(m.name, m.settings), m.unit, m.median, m.min, m.max, len(m.samples)) for m in ms),
                      css="measurements")


def table_md(table: Table) -> str:
    return block_md(table_block(table))


def measurements_md(ms: list[Measurement]) -> str:
    return block_md(measurements_block(ms))


def plot_files(result: LessonResult, name: str) -> tuple[str, str]:
    stem = f"plots/{result.lesson_id}-{name}"
    return f"{stem}.png", f"{stem}.svg"


def busy_warning(result: LessonResult) -> Paragraph | None:
    """The warning a lesson's page opens with where its readings show a busy machine (bytesup.course.busy.judge);
    None for a quiet one and for a lesson recorded without readings."""
    verdict = busy.judge(result.host_values.get(busy.HOST_VALUE))
    if verdict is None or not verdict.busy:
        return None
    opening = f"Warning: {verdict.sentence()}. The timings below are this machine's under that load, not its own: "
    return Paragraph((opening, Code("bytesup check"),
                      f" calls the timing claims that read them inconclusive. (The rule: {busy.RULE}.)"))


SHOWS = "What this run shows"
# The course's glossary, from a run folder under outputs/ (outputs/<run>/<lesson>.md).
GLOSSARY = "docs/glossary.md"
GLOSSARY_HREF = "../../" + GLOSSARY


def shows_blocks(result: LessonResult) -> list[Block]:
    """The page's opening: what the run shows (its sentences, the plot that shows it) and where its words are explained."""
    assert result.shows is not None
    blocks: list[Block] = [Heading(3, SHOWS, anchor(f"{result.lesson_id} {SHOWS}")), Paragraph((result.shows.text,))]
    shown = next((p for p in result.plots if p.name == result.shows.plot), None)
    if shown is not None:
        png, svg = plot_files(result, shown.name)
        blocks.append(Figure(shown.title, shown, png, svg, level=4))
    blocks.append(Paragraph(("The words this page uses are explained in the course's glossary, ",
                             Link(GLOSSARY, GLOSSARY_HREF, code=True), ".")))
    return blocks


def lesson_blocks(result: LessonResult) -> list[Block]:
    """What a lesson's page says: title, a busy machine's warning, where it ran, tables, measurements, plots, notes.

    A lesson that says what its run shows (`result.shows`) opens with it, and keeps its main text short: its
    tables marked `detail` (full tables, formulas) and its raw measurements go under one Details block at the
    end (folded in HTML, a section at the end in Markdown), and the plot it opens with is not drawn twice."""
    outside = outside_strings(result)
    warning = busy_warning(result)
    blocks: list[Block] = [
        Heading(1, result.title, anchor(result.title)),
        *([warning] if warning else []),
        Paragraph((Code(result.lesson_id), f" · {result.started_at} · model ",
                   str(result.model.get("name") or result.model.get("file") or "unknown model"),
                   " · server ", str(result.server.get("engine", "?")), " (", str(result.server.get("build") or "unknown build"), ")")),
    ]
    opened = result.shows is not None
    if opened:
        blocks += shows_blocks(result)
    blocks += [table_block(t, outside) for t in result.tables if not t.detail]
    folded: list[Block] = [replace(table_block(t, outside), level=4) for t in result.tables if t.detail]
    if result.measurements:
        m = measurements_block(result.measurements)
        if opened:
            folded.append(replace(m, level=4))
        else:
            blocks.append(m)
    for p in result.plots:
        if opened and result.shows is not None and p.name == result.shows.plot:
            continue
        png, svg = plot_files(result, p.name)
        blocks.append(Figure(p.title, p, png, svg))
    if result.notes:
        blocks.append(Bullets("Notes", tuple(note_parts(n, outside) for n in result.notes)))
    if folded:
        blocks.append(Details(f"{result.title}: the full tables, the formulas and the raw measurements", tuple(folded)))
    return blocks


def lesson_md(result: LessonResult) -> str:
    return markdown(lesson_blocks(result))
