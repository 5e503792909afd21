"""`bytesup report RUN`: the run folder's README.md as one readable page, and with `--html` the
same page as report.html.

The page holds the manifest's summary (host, engine, model, status), every lesson's tables,
measurements and plots in lesson order (each lesson's JSON made into blocks by `render.lesson_blocks`,
the one renderer, its title made a section), and the checks of `bytesup check`. README.md links
its plots (`plots/...`, beside it); report.html draws each plot inline as SVG from its record, so
the file alone is the whole page: no script, no font or stylesheet, nothing fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bytesup.check import checker as checks
from bytesup.check.overhead import overhead_blocks
from bytesup.store.manifest import LessonEntry
from bytesup.store.runs import Run, load_run
from bytesup.store.plots import svg_markup
from bytesup.store.render import (
    Block,
    Code,
    Heading,
    Inline,
    Link,
    Paragraph,
    TableBlock,
    anchor,
    cell_md,
    demoted,
    fmt,
    html,
    html_page,
    lesson_blocks,
    markdown,
)
from bytesup.files import write_text_atomic


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "size unknown"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def summary_rows(run: Run) -> list[tuple[str, Any]]:
    """(what, value or inline parts) for the manifest's summary; rows the manifest cannot fill are left out."""
    m = run.manifest
    host, eng, repo = m.host, m.engine, m.repository
    model = run.model_identity()
    flags = " ".join(k if v is None else f"{k} {v}" for k, v in (eng.flags or {}).items() if k not in ("--api-key",))
    rows: list[tuple[str, Any]] = [
        ("status", m.status if run.has_manifest else "no manifest"),
        ("created", m.created_at),
        ("updated", m.updated_at),
        ("host", f"{host.hostname or '?'}: {host.cpu or '?'}, {fmt(host.cores)} cores, "
                 f"{_size(host.memory_bytes)} memory" + (f", GPU {', '.join(host.gpus)}" if host.gpus else ", no GPU")
         if host else None),
        ("OS / Python", f"{host.os} / Python {host.python}" if host else None),
        ("engine", f"{eng.engine or '?'} ({eng.build or '?'})" if eng else None),
        ("server flags", Code(flags) if flags else None),
        ("model", (f"{model.get('file', '?')} ({_size(model.get('size_bytes'))}), sha256 ", Code(str(model.get("sha256", "?"))))
         if model else None),
        ("code", f"commit {repo.commit or '?'}" + (" (uncommitted changes)" if repo.dirty else "") if repo else None),
        ("packages", ", ".join(f"{k} {v}" for k, v in m.packages.items() if v) or None),
        ("load average before / after", f"{fmt(m.load_average_before)} / {fmt(m.load_average_after)}"
         if m.load_average_before is not None else None),
        ("command", Code(" ".join(m.command)) if m.command else None),
    ]
    return [(k, v) for k, v in rows if v is not None]


def summary_md(run: Run) -> list[str]:
    return ["| | |", "|---|---|"] + [f"| {cell_md(k)} | {cell_md(v)} |" for k, v in summary_rows(run)]


def report_blocks(run: Run, check_report: "checks.CheckReport | None", files: bool = True) -> list[Block]:
    """The whole page: summary, the lessons' index, every lesson in course order, the checks.
    `files`: a line of links to each lesson's own files under its section."""
    blocks: list[Block] = [Heading(1, f"bytesup run {run.name}", "top"),
                           TableBlock("", ("", ""), tuple(summary_rows(run)), css="summary")]
    entries = dict(run.manifest.lessons)
    for lid in run.results:
        entries.setdefault(lid, LessonEntry(status="ok", title=run.results[lid].title))
    index = []
    for lid, entry in sorted(entries.items()):
        result = run.results.get(lid)
        if result is not None:
            title: Any = Link(result.title, f"#{anchor(result.title)}")
        else:
            title = (entry.title or "") + (f": {entry.error[:200]}" if entry.error else "")
        index.append((Code(lid), entry.status or "?", title))
    blocks.append(TableBlock("Lessons", ("lesson", "status", "title"), tuple(index), level=2))
    if check_report is not None:
        blocks.append(Paragraph((f"Checks: {check_report.summary()} (",
                                 Link("details", f"#{anchor(f'Checks of run {run.name}')}"), ").")))
    blocks += overhead_blocks(run)
    for lid in sorted(run.results):
        result = run.results[lid]
        blocks += demoted(lesson_blocks(result))
        if files:
            links: list[Inline] = ["Files: ", Link(f"`{lid}.json`", f"{lid}.json"), " · ", Link(f"`{lid}.md`", f"{lid}.md")]
            if result.exchanges:
                links += [" · ", Link(f"`{result.exchanges}`", result.exchanges)]
            blocks.append(Paragraph(tuple(links)))
    if check_report is not None:
        blocks += checks.check_blocks(check_report, level=2)
    return blocks


def report_md(run: Run, check_report: "checks.CheckReport | None") -> str:
    return markdown(report_blocks(run, check_report))


def report_html(run: Run, check_report: "checks.CheckReport | None") -> str:
    """The same page as one self-contained HTML file: every plot drawn inline as SVG from its record."""
    return html_page(f"bytesup run {run.name}", [html(report_blocks(run, check_report), svg_markup)])


def write_run_report(path: Path, reference_files: list[Path] | None = None,
                     run_checks: bool = True, with_html: bool = False) -> tuple[list[Path], checks.CheckReport | None]:
    """Write README.md (and check.md / check.json, and report.html with `with_html`) in the run folder;
    returns the pages written."""
    run = load_run(path)
    report = None
    if run_checks:
        report = checks.check_run(run, reference_files)
        checks.write_report(report)
    readme = run.path / "README.md"
    write_text_atomic(readme, report_md(run, report))
    pages = [readme]
    if with_html:
        page = run.path / "report.html"
        write_text_atomic(page, report_html(run, report))
        pages.append(page)
    return pages, report
