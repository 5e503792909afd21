"""Markdown views of lesson results and of a run: rendered from the JSON only, never parsed back."""

from __future__ import annotations

import math
from typing import Any

from .escape import md_text
from .results import LessonResult, Measurement, Table


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


def table_md(table: Table) -> str:
    lines = [f"### {md_text(table.title)}", ""]
    lines.append("| " + " | ".join(cell(header(c.name, c.unit)) for c in table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    if table.notes:
        lines.append("")
        lines.extend(f"- {md_text(n)}" for n in table.notes)
    return "\n".join(lines) + "\n"


def measurement_label(name: str, settings: dict[str, Any]) -> str:
    """The name plus the settings that tell apart measurements of the same name."""
    if not settings:
        return name
    return f"{name} [" + ", ".join(f"{k}={fmt(v)}" for k, v in sorted(settings.items())) + "]"


def measurements_md(ms: list[Measurement]) -> str:
    lines = ["### Measurements", "", "| measurement | unit | median | min | max | samples |", "|---|---|---|---|---|---|"]
    for m in ms:
        lines.append(f"| {cell(measurement_label(m.name, m.settings))} | {cell(m.unit)} | {fmt(m.median)} | {fmt(m.min)} "
                     f"| {fmt(m.max)} | {len(m.samples)} |")
    return "\n".join(lines) + "\n"


def plot_files(result: LessonResult, name: str) -> tuple[str, str]:
    stem = f"plots/{result.lesson_id}-{name}"
    return f"{stem}.png", f"{stem}.svg"


def lesson_md(result: LessonResult) -> str:
    model = md_text(result.model.get("name") or result.model.get("file") or "unknown model")
    build = md_text(result.server.get("build") or "unknown build")
    parts = [
        f"# {md_text(result.title)}",
        "",
        f"`{result.lesson_id}` · {result.started_at} · model {model} · server {md_text(result.server.get('engine', '?'))} ({build})",
        "",
    ]
    for t in result.tables:
        parts.append(table_md(t))
    if result.measurements:
        parts.append(measurements_md(result.measurements))
    for p in result.plots:
        png, svg = plot_files(result, p.name)
        parts.append(f"### {md_text(p.title)}\n\n![{md_text(p.title)}]({png}) ([SVG]({svg}))\n")
    if result.notes:
        parts.append("### Notes\n\n" + "\n".join(f"- {md_text(n)}" for n in result.notes) + "\n")
    return "\n".join(parts)
