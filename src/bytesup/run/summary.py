"""What a run prints when it ends: each lesson's status and files, the count of each status (a skipped lesson is
neither ok nor failed: it measured nothing here, and says what enables it), and how to continue an incomplete run."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable

from bytesup.store.escape import rich_text
from bytesup.store.manifest import LessonEntry, Manifest
from bytesup.run.folder import resume_command
from bytesup.run.timing import split_rows


def status_counts(entries: list[LessonEntry]) -> str:
    """`8 ok, 1 skipped`: how many lessons ended with each status, ok first, then skipped, failed, the others."""
    order = ["ok", "skipped", "failed", "interrupted"]
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.status or "unknown"] = counts.get(e.status or "unknown", 0) + 1
    ranked = sorted(counts, key=lambda s: (order.index(s) if s in order else len(order), s))
    return ", ".join(f"{counts[s]} {s}" for s in ranked)


def print_summary(console: Console, run_dir: Path, manifest: Manifest, ran: list[str], resume: str | None = None) -> None:
    if not ran:
        console.print(f"Nothing to run: every lesson asked for is already saved in {rich_text(run_dir)}.", highlight=False)
        return

    table = RichTable(title=f"run folder {rich_text(run_dir)}")
    table.add_column("lesson")
    table.add_column("status")
    table.add_column("files / error")
    for lid in ran:
        e = manifest.lessons[lid]
        color = {"ok": "green", "failed": "red", "skipped": "cyan"}.get(e.status or "", "yellow")
        if e.status == "ok":
            files = f"{lid}.json, {lid}.md"
        elif e.status == "skipped":
            files = rich_text(f"nothing measured here; `{e.enable_command}` enables it")
        else:
            files = rich_text((e.error or "")[:160])
        table.add_row(lid, f"[{color}]{e.status}[/{color}]", files)
    console.print(table)
    split_table(console, manifest, ran)
    console.print(rich_text(status_counts([manifest.lessons[lid] for lid in ran])), highlight=False)
    if manifest.status != "complete":
        command = resume or resume_command(manifest.command, run_dir)
        console.print(f"The run is incomplete: `{rich_text(command)}` continues it.", highlight=False, soft_wrap=True)


def split_table(console: Console, manifest: Manifest, ran: list[str]) -> None:
    """Where the time of each lesson that ran went (run/timing.py), where the run split it."""
    rows = split_rows(Manifest(lessons={lid: manifest.lessons[lid] for lid in ran}))
    if not rows:
        return
    table = RichTable(title="where each lesson's time went (s)")
    table.add_column("lesson")
    for header in ("wall", "models", "servers", "requests", "llama-bench", "host", "rest"):
        table.add_column(header, justify="right")
    for lesson, *seconds in rows:  # the lesson by its number: the table fits 80 columns
        table.add_row(rich_text(lesson.split("_")[0]), *seconds)
    console.print(table)
