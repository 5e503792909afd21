"""`bytesup report RUN`: the run folder's README.md as one readable page.

The page holds the manifest's summary (host, engine, model, status), every lesson's tables,
measurements and plots in lesson order (rendered from each lesson's JSON by the one renderer,
`render.lesson_md`, with headings pushed one level down), and the checks of `bytesup check`.
Plot links stay `plots/...`: the README lives in the run folder, beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import check as checks
from .overhead import overhead_md
from .runs import Run, load_run
from .escape import md_text
from .render import fmt, lesson_md
from .storage import write_text_atomic


def _cell(text: Any) -> str:
    return md_text(text, cell=True)


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "size unknown"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def _anchor(text: str) -> str:
    """GitHub's heading anchors: lower case, spaces to hyphens, punctuation dropped."""
    out = []
    for ch in text.strip().lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


def demote(markdown: str) -> str:
    """Make a lesson's title (`# `) a section (`## `) of the page; its tables (`### `) already
    nest below that. Fenced code is left alone."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("# "):
            line = "#" + line
        lines.append(line)
    return "\n".join(lines)


def summary_md(run: Run) -> list[str]:
    m = run.manifest or {}
    host = m.get("host") or {}
    eng = m.get("engine") or {}
    model = run.model_identity()
    flags = " ".join(k if v is None else f"{k} {v}" for k, v in (eng.get("flags") or {}).items() if k not in ("--api-key",))
    repo = m.get("repository") or {}
    lines = ["| | |", "|---|---|"]
    rows = [
        ("status", m.get("status", "no manifest")),
        ("created", m.get("created_at")),
        ("updated", m.get("updated_at")),
        ("host", f"{host.get('hostname', '?')}: {host.get('cpu', '?')}, {fmt(host.get('cores'))} cores, "
                 f"{_size(host.get('memory_bytes'))} memory" + (f", GPU {', '.join(host['gpus'])}" if host.get("gpus") else ", no GPU")
         if host else None),
        ("OS / Python", f"{host.get('os')} / Python {host.get('python')}" if host else None),
        ("engine", f"{eng.get('engine', '?')} ({eng.get('build', '?')})" if eng else None),
        ("server flags", f"`{flags}`" if flags else None),
        ("model", f"{model.get('file', '?')} ({_size(model.get('size_bytes'))}), sha256 `{model.get('sha256', '?')}`" if model else None),
        ("code", f"commit {repo.get('commit') or '?'}" + (" (uncommitted changes)" if repo.get("dirty") else "") if repo else None),
        ("packages", ", ".join(f"{k} {v}" for k, v in (m.get("packages") or {}).items() if v) or None),
        ("load average before / after", f"{fmt(m.get('load_average_before'))} / {fmt(m.get('load_average_after'))}"
         if m.get("load_average_before") is not None else None),
        ("command", f"`{' '.join(m['command'])}`" if m.get("command") else None),
    ]
    lines += [f"| {k} | {_cell(v)} |" for k, v in rows if v is not None]
    return lines


def report_md(run: Run, check_report: "checks.CheckReport | None") -> str:
    m = run.manifest or {}
    lines = [f"# bytesup run {md_text(run.name)}", ""]
    lines += summary_md(run) + [""]
    lines += ["## Lessons", "", "| lesson | status | title |", "|---|---|---|"]
    entries = dict(m.get("lessons") or {})
    for lid in run.results:
        entries.setdefault(lid, {"status": "ok", "title": run.results[lid].title})
    for lid, entry in sorted(entries.items()):
        result = run.results.get(lid)
        if result is not None:
            title = f"[{_cell(result.title)}](#{_anchor(result.title)})"
        else:
            title = _cell(entry.get("title", "") + (f": {entry['error'][:200]}" if entry.get("error") else ""))
        lines.append(f"| `{lid}` | {entry.get('status', '?')} | {title} |")
    if check_report is not None:
        lines.append(f"\nChecks: {check_report.summary()} ([details](#checks-of-run-{_anchor(run.name)})).")
    lines.append("")
    lines += overhead_md(run)
    for lid in sorted(run.results):
        lines += [demote(lesson_md(run.results[lid])).rstrip(), "", f"Files: [`{lid}.json`]({lid}.json) · [`{lid}.md`]({lid}.md)"
                  + (f" · [`{run.results[lid].exchanges}`]({run.results[lid].exchanges})" if run.results[lid].exchanges else ""), ""]
    if check_report is not None:
        lines += [checks.markdown(check_report, heading="##").rstrip(), ""]
    return "\n".join(lines)


def write_run_report(path: Path, reference_files: list[Path] | None = None,
                     run_checks: bool = True) -> tuple[Path, checks.CheckReport | None]:
    """Write README.md (and check.md / check.json) in the run folder; returns the README's path."""
    run = load_run(path)
    report = None
    if run_checks:
        report = checks.check_run(run, reference_files)
        checks.write_report(report)
    readme = run.path / "README.md"
    write_text_atomic(readme, report_md(run, report))
    return readme, report
