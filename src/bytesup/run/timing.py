"""How long a run took, and where each lesson's time went: the table the run's README and report show from the
manifest (each lesson's `time_split`, host/spent.py), and the line on what the run did before its first lesson
(models made, its own server started, the engines compared). A manifest written before the split gives none."""

from __future__ import annotations

from bytesup.store.escape import md_text
from bytesup.store.manifest import Manifest
from bytesup.store.render import Block, Paragraph, TableBlock

# (column, the split's field), in the order of the table.
COLUMNS = (("models", "models_s"), ("servers", "servers_s"), ("requests", "requests_s"), ("llama-bench", "llama_bench_s"),
           ("host measurements", "host_s"), ("rest", "rest_s"))
HEADERS = ("lesson", "wall (s)", *(f"{name} (s)" for name, _ in COLUMNS))
EXPLAINED = ("Each lesson's wall time, split: making models; starting and stopping servers; the recorded requests "
             "(while at least one was in flight); llama-bench; this host's own measurements (timings, file reads, "
             "the bandwidth reading); and the rest, the harness's own arithmetic and writing. The parts add up to the "
             "wall time.")


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def split_rows(manifest: Manifest) -> list[tuple[str, ...]]:
    """One row per lesson with a split (lesson order), then their total; none when no lesson has one."""
    splits = [(lid, e.time_split) for lid, e in sorted(manifest.lessons.items()) if e.time_split is not None]
    if not splits:
        return []
    rows = [(lid, _s(t.wall_s), *(_s(getattr(t, f)) for _, f in COLUMNS)) for lid, t in splits]
    if len(splits) > 1:
        total = {f: sum(getattr(t, f) or 0.0 for _, t in splits) for f in ("wall_s", *(f for _, f in COLUMNS))}
        rows.append(("all", _s(total["wall_s"]), *(_s(total[f]) for _, f in COLUMNS)))
    return rows


def before_lessons(manifest: Manifest) -> str | None:
    """What the run did before its first lesson, and how long each took; None when it recorded nothing of it."""
    parts = []
    made = manifest.models_made
    if made is not None:
        n = len(made.models)
        parts.append(f"{n} model{'s' if n != 1 else ''} ready, {len(made.made)} made in {made.seconds or 0:.1f} s"
                     if made.made else f"{n} model{'s' if n != 1 else ''} ready, none to make")
    if manifest.server_start_s is not None:
        parts.append(f"its own server started in {manifest.server_start_s:.1f} s")
    gap = manifest.engine_gap
    if gap is not None and gap.seconds is not None:
        parts.append(f"the engines compared in {gap.seconds:.1f} s")
    return f"Before its first lesson the run had {'; '.join(parts)}." if parts else None


def split_md(manifest: Manifest) -> list[str]:
    """The run folder's index: the line on what came before the lessons and the split's table (Markdown lines)."""
    lines = []
    first = before_lessons(manifest)
    if first:
        lines += ["", md_text(first)]
    rows = split_rows(manifest)
    if rows:
        lines += ["", "## Where each lesson's time went", "", md_text(EXPLAINED), "",
                  "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        lines += ["| " + " | ".join(md_text(c, cell=True) for c in row) + " |" for row in rows]
    return lines


def split_blocks(manifest: Manifest) -> list[Block]:
    """The report's section: the same line and table as blocks; none for a run that recorded neither."""
    rows = split_rows(manifest)
    first = before_lessons(manifest)
    if not rows and not first:
        return []
    blocks: list[Block] = []
    if rows:
        blocks.append(TableBlock("Where each lesson's time went", HEADERS, tuple(rows), level=2))
        blocks.append(Paragraph((EXPLAINED,)))
    if first:
        blocks.append(Paragraph((first,)))
    return blocks
