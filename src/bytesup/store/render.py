"""Views of lesson results and of runs, rendered from the JSON only and never parsed back: one list of blocks per page,
written as Markdown (`markdown`) or as a self-contained HTML page (`html`, `html_page`)."""

from __future__ import annotations

import html as _html
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Union

from bytesup.store.escape import md_text
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
        return f"{value:,.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return str(value)


def cell(value: Any) -> str:
    return md_text(fmt(value), newline="⏎", cell=True)


def header(name: str, unit: str) -> str:
    return f"{name} ({unit})" if unit else name


# --- the document: what a lesson (or a run, or a history) says, before any format -------------
#
# One page is a list of blocks. `markdown` and `html` write the same blocks; every string that
# comes from outside stays a plain str here and is escaped by the writer for its format.

@dataclass(frozen=True)
class Code:
    """Inline code (an id, a flag list, a digest)."""

    text: str


@dataclass(frozen=True)
class Link:
    text: str
    href: str


Inline = Union[str, Code, Link]


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
    items: tuple[str, ...]
    level: int = 3


@dataclass(frozen=True)
class TableBlock:
    """A titled table: header cells, rows of values (numbers printed by `fmt`) or inline parts, notes."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    notes: tuple[str, ...] = ()
    level: int = 3
    css: str = ""


@dataclass(frozen=True)
class Figure:
    title: str
    plot: Plot
    png: str = ""
    svg: str = ""
    level: int = 3


Block = Union[Heading, Paragraph, Bullets, TableBlock, Figure]


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

def _md_inline(part: Inline, in_cell: bool = False) -> str:
    if isinstance(part, Code):
        return f"`{md_text(part.text, cell=in_cell)}`"
    if isinstance(part, Link):
        return f"[{md_text(part.text, cell=in_cell)}]({part.href})"
    return md_text(part, newline="⏎" if in_cell else " ", cell=in_cell)


def cell_md(value: Any) -> str:
    """A table cell: a value printed by `fmt`, or inline parts."""
    if isinstance(value, (Code, Link)):
        return _md_inline(value, in_cell=True)
    if isinstance(value, tuple):
        return "".join(_md_inline(p, in_cell=True) for p in value)
    return cell(value)


def block_md(block: Block) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {md_text(block.text)}\n"
    if isinstance(block, Paragraph):
        return "".join(_md_inline(p) for p in block.parts) + "\n"
    if isinstance(block, Bullets):
        return f"{'#' * block.level} {md_text(block.title)}\n\n" + "\n".join(f"- {md_text(n)}" for n in block.items) + "\n"
    if isinstance(block, Figure):
        drawing = f"![{md_text(block.title)}]({block.png}) ([SVG]({block.svg}))" if block.png else f"![{md_text(block.title)}]({block.svg})"
        return f"{'#' * block.level} {md_text(block.title)}\n\n{drawing}\n"
    lines = [f"{'#' * block.level} {md_text(block.title)}", ""] if block.title else []
    lines.append("|" + "|".join(f" {cell(h)} " if h else " " for h in block.headers) + "|")
    lines.append("|" + "|".join("---" for _ in block.headers) + "|")
    for row in block.rows:
        lines.append("| " + " | ".join(cell_md(v) for v in row) + " |")
    if block.notes:
        lines.append("")
        lines.extend(f"- {md_text(n)}" for n in block.notes)
    return "\n".join(lines) + "\n"


def markdown(blocks: list[Block]) -> str:
    return "\n".join(block_md(b) for b in blocks)


# --- HTML ---------------------------------------------------------------------------------------

def _h(value: Any) -> str:
    return _html.escape(str(value), quote=True)


def _html_inline(part: Inline) -> str:
    if isinstance(part, Code):
        return f"<code>{_h(part.text)}</code>"
    if isinstance(part, Link):
        # Inside the page, or a file beside it; anything with a scheme (http:, javascript:) is not a link.
        if ":" in part.href or part.href.startswith("//"):
            return _h(part.text)
        href = part.href
        return f'<a href="{_h(href)}">{_h(part.text)}</a>'
    return _h(part)


def _html_cell(value: Any) -> str:
    if isinstance(value, (Code, Link)):
        return _html_inline(value)
    if isinstance(value, tuple):
        return "".join(_html_inline(p) for p in value)
    return _h(fmt(value))


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def block_html(block: Block, svg: "Callable[[Plot], str] | None" = None) -> str:
    if isinstance(block, Heading):
        anchor = f' id="{_h(block.anchor)}"' if block.anchor else ""
        return f"<h{block.level}{anchor}>{_h(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        return "<p>" + "".join(_html_inline(p) for p in block.parts) + "</p>"
    if isinstance(block, Bullets):
        return (f"<h{block.level}>{_h(block.title)}</h{block.level}>\n<ul>"
                + "".join(f"<li>{_h(n)}</li>" for n in block.items) + "</ul>")
    if isinstance(block, Figure):
        drawing = svg(block.plot) if svg is not None else ""
        return (f'<figure class="plot"><figcaption>{_h(block.title)}</figcaption>\n{drawing}</figure>')
    css = f' class="{_h(block.css)}"' if block.css else ""
    out = [f"<h{block.level}>{_h(block.title)}</h{block.level}>"] if block.title else []
    head = "<thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in block.headers) + "</tr></thead>" if any(block.headers) else ""
    out.append(f"<table{css}>{head}<tbody>")
    for row in block.rows:
        out.append("<tr>" + "".join(f'<td class="num">{_html_cell(v)}</td>' if _numeric(v) else f"<td>{_html_cell(v)}</td>"
                                    for v in row) + "</tr>")
    out.append("</tbody></table>")
    if block.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{_h(n)}</li>" for n in block.notes) + "</ul>")
    return "\n".join(out)


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; display: block; overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 2px 6px; vertical-align: top; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
code { background: #f4f4f4; padding: 0 2px; overflow-wrap: break-word; }
section.lesson { border-top: 2px solid #888; margin-top: 2em; }
figure.plot { margin: 1em 0; }
figure.plot svg { width: 100%; max-width: 640px; height: auto; display: block; }
.pass { color: #176b17; } .fail { color: #b00; font-weight: bold; } .na, .inconclusive { color: #777; }
ul.notes { font-size: 13px; color: #444; }
"""

# No script, font or stylesheet from anywhere: the page's own policy forbids every fetch.
POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def html_page(title: str, body: list[str]) -> str:
    """A self-contained page: inline style, inline SVG, no script, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_h(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def html(blocks: list[Block], svg: "Callable[[Plot], str] | None" = None) -> str:
    return "\n".join(block_html(b, svg) for b in blocks)


# --- a lesson -----------------------------------------------------------------------------------

def measurement_label(name: str, settings: dict[str, Any]) -> str:
    """The name plus the settings that tell apart measurements of the same name."""
    if not settings:
        return name
    return f"{name} [" + ", ".join(f"{k}={fmt(v)}" for k, v in sorted(settings.items())) + "]"


def table_block(table: Table) -> TableBlock:
    return TableBlock(table.title, tuple(header(c.name, c.unit) for c in table.columns),
                      tuple(tuple(row) for row in table.rows), tuple(table.notes))


def measurements_block(ms: list[Measurement]) -> TableBlock:
    return TableBlock("Measurements", ("measurement", "unit", "median", "min", "max", "samples"),
                      tuple((measurement_label(m.name, m.settings), m.unit, m.median, m.min, m.max, len(m.samples)) for m in ms))


def table_md(table: Table) -> str:
    return block_md(table_block(table))


def measurements_md(ms: list[Measurement]) -> str:
    return block_md(measurements_block(ms))


def plot_files(result: LessonResult, name: str) -> tuple[str, str]:
    stem = f"plots/{result.lesson_id}-{name}"
    return f"{stem}.png", f"{stem}.svg"


def lesson_blocks(result: LessonResult) -> list[Block]:
    """What a lesson's page says: title, where it ran, tables, measurements, plots, notes."""
    blocks: list[Block] = [
        Heading(1, result.title, anchor(result.title)),
        Paragraph((Code(result.lesson_id), f" · {result.started_at} · model ",
                   str(result.model.get("name") or result.model.get("file") or "unknown model"),
                   " · server ", str(result.server.get("engine", "?")), " (", str(result.server.get("build") or "unknown build"), ")")),
    ]
    blocks += [table_block(t) for t in result.tables]
    if result.measurements:
        blocks.append(measurements_block(result.measurements))
    for p in result.plots:
        png, svg = plot_files(result, p.name)
        blocks.append(Figure(p.title, p, png, svg))
    if result.notes:
        blocks.append(Bullets("Notes", tuple(result.notes)))
    return blocks


def lesson_md(result: LessonResult) -> str:
    return markdown(lesson_blocks(result))
