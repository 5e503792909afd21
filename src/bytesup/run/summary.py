"""What a run prints when it ends: each lesson's status and files, and how to continue an incomplete run."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable

from bytesup.store.escape import rich_text
from bytesup.store.manifest import Manifest
from bytesup.run.folder import resume_command


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
        color = {"ok": "green", "failed": "red"}.get(e.status or "", "yellow")
        files = f"{lid}.json, {lid}.md" if e.status == "ok" else rich_text((e.error or "")[:160])
        table.add_row(lid, f"[{color}]{e.status}[/{color}]", files)
    console.print(table)
    if manifest.status != "complete":
        command = resume or resume_command(manifest.command, run_dir)
        console.print(f"The run is incomplete: `{rich_text(command)}` continues it.", highlight=False, soft_wrap=True)
