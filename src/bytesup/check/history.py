"""`bytesup history [FOLDER|RUN ...]`: every run over time, grouped by what makes runs comparable.

Each run folder found (a folder given, or the folders directly inside one) is read lightly: its
manifest, the two lessons that hold the headline figures (4 and the capstone) and its check.json.
Folders that are not runs are skipped and counted.

- The table: one row per run with its date, host, engine and build, model, flags, headline
  figures (median, min–max of the samples), the capstone's verdicts and the checks.
- Groups: runs with the same setup (`identity.RunIdentity.setup_key`: machine, model, flags,
  lesson options) are comparable. Runs of another setup are another group, never joined by a line.
- Per group of two runs or more, a plot of each figure over time with the samples' min–max.
- Moves: between consecutive runs of one group, each figure gets `compare.verdict` (the rule of
  `bytesup compare`); a figure better or worse beyond the noise is said with what changed between
  the two runs (the software part of their identities), or that nothing recorded changed.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from bytesup.check.compare import DEFAULT_THRESHOLD, measure_text, verdict
from bytesup.errors import BytesupError
from bytesup.store.identity import FLAG, RunIdentity, differences, value_text
from bytesup.store.render import Block, Code, Figure, Heading, Ids, Link, Paragraph, TableBlock, anchor, html, html_page, markdown
from bytesup.store.plots import DATE_AXIS, Mark, svg_markup
from bytesup.store.results import LessonResult, Measurement, Plot, Series, load_result
from bytesup.store.manifest import Manifest
from bytesup.store.runs import LESSON_JSON, read_manifest
from bytesup.files import write_text_atomic
from bytesup.check.verdicts import FAIL, NA, PASS

NEXT_TOKEN = "04_next_token"
CAPSTONE = "08_capstone_decode_memory_bound"


@dataclass(frozen=True)
class Headline:
    """A headline figure: where it is read from, by name."""

    key: str
    title: str
    read: Callable[["RunRecord"], Measurement | None]


def _measurement(lesson: str, name: str) -> Callable[["RunRecord"], Measurement | None]:
    def read(run: "RunRecord") -> Measurement | None:
        result = run.results.get(lesson)
        if result is None:
            return None
        return next((m for m in result.measurements if m.name == name), None)
    return read


def _host_bandwidth(run: "RunRecord") -> Measurement | None:
    """The run's own reading of this host's memory bandwidth, before its decode work."""
    reading = (run.manifest.host_bandwidth.before or {}).get("gb_per_s") or {}
    samples = reading.get("samples")
    if not samples:
        return None
    return Measurement.of("host_bandwidth_gb_per_s", "GB/s", samples, higher_is_better=True)


FIGURES: tuple[Headline, ...] = (
    Headline("decode", "decode (tokens/s, short prompt)", _measurement(NEXT_TOKEN, "decode_tokens_per_s_short_prompt")),
    Headline("prefill", "prefill (tokens/s, long prompt)", _measurement(NEXT_TOKEN, "prefill_tokens_per_s_long_prompt")),
    Headline("bandwidth", "host bandwidth (GB/s)", _host_bandwidth),
    Headline("efficiency", "decode efficiency (%)", _measurement(NEXT_TOKEN, "decode_efficiency")),
)


@dataclass
class RunRecord:
    path: Path
    manifest: Manifest
    results: dict[str, LessonResult]
    identity: RunIdentity
    checks: dict[str, int] | None
    figures: dict[str, Measurement] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def when(self) -> str:
        return self.manifest.created_at or self.manifest.date or self.name

    def capstone(self) -> str:
        """The capstone's verdicts, counted: a fact when the lesson states it, else its sweep's verdict column."""
        result = self.results.get(CAPSTONE)
        if result is None:
            return "—"
        verdicts = result.facts.get("verdicts")
        if isinstance(verdicts, dict):
            found = [str(v) for v in verdicts.values()]
        else:  # runs older than the facts
            try:
                sweep = result.table("sweep")
            except KeyError:
                return "—"
            names = [c.name for c in sweep.columns]
            if "verdict" not in names:
                return "—"
            found = [str(row[names.index("verdict")]) for row in sweep.rows if row[names.index("verdict")] is not None]
        return ", ".join(f"{n} {v}" for v, n in Counter(found).items()) or "—"

    def checks_text(self) -> str:
        if self.checks is None:
            return "not checked"
        return f"{self.checks.get(PASS, 0)} pass, {self.checks.get(FAIL, 0)} fail, {self.checks.get(NA, 0)} n.a."


def _is_run(folder: Path) -> bool:
    return (folder / "manifest.json").is_file() or any(LESSON_JSON.match(p.name) for p in folder.iterdir() if p.is_file())


def read_record(folder: Path) -> RunRecord:
    """The parts of a run folder that history shows; a damaged one is a BytesupError."""
    manifest = read_manifest(folder) or Manifest()
    if not manifest.is_run():
        raise BytesupError(f"{folder / 'manifest.json'} is a {manifest.kind!r} file, not a run manifest")
    results: dict[str, LessonResult] = {}
    for lid in (NEXT_TOKEN, CAPSTONE):
        path = folder / f"{lid}.json"
        entry = manifest.lessons.get(lid)
        if path.is_file() and (entry is None or entry.status == "ok"):
            try:
                results[lid] = load_result(json.loads(path.read_text(encoding="utf-8")), str(path))
            except ValueError as exc:  # invalid JSON, or a record this bytesup cannot read
                raise BytesupError(f"{path} cannot be read ({str(exc).splitlines()[0]})") from None
    checks = None
    check_file = folder / "check.json"
    if check_file.is_file():
        try:
            counts = json.loads(check_file.read_text(encoding="utf-8")).get("counts")
            checks = counts if isinstance(counts, dict) else None
        except (ValueError, AttributeError):
            checks = None
    record = RunRecord(folder, manifest, results, RunIdentity.of(manifest, results.values()), checks)
    for fig in FIGURES:
        m = fig.read(record)
        if m is not None:
            record.figures[fig.key] = m
    return record


@dataclass
class Found:
    runs: list[RunRecord]
    skipped: list[tuple[Path, str]]


def find_runs(paths: list[Path]) -> Found:
    """Every run in `paths`: a path that is a run folder, or the folders directly inside one."""
    runs: list[RunRecord] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[Path] = set()
    for path in paths:
        if not path.is_dir():
            raise BytesupError(f"{path} is not a folder. Pass run folders, or a folder that holds them (default: outputs/).")
        candidates = [path] if _is_run(path) else sorted(p for p in path.iterdir() if p.is_dir())
        for folder in candidates:
            if folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            if not _is_run(folder):
                skipped.append((folder, "not a run folder"))
                continue
            try:
                runs.append(read_record(folder))
            except BytesupError as exc:
                skipped.append((folder, str(exc)))
    runs.sort(key=lambda r: (r.when, r.name))
    return Found(runs, skipped)


# --- groups and moves --------------------------------------------------------------------------

@dataclass
class Group:
    number: int
    runs: list[RunRecord]

    @property
    def identity(self) -> RunIdentity:
        return self.runs[0].identity

    def label(self) -> str:
        v = self.identity.values
        sha = str(v.get("model_sha256") or "")[:12]
        return (f"group {self.number}: {value_text(v.get('host'))} ({value_text(v.get('cpu'))}), "
                f"{value_text(v.get('model_file'))}" + (f" (sha256 {sha}…)" if sha else ""))


def group_runs(runs: list[RunRecord]) -> list[Group]:
    """Runs with one setup form one group, in the order of their first run."""
    by_key: dict[tuple[tuple[str, str], ...], list[RunRecord]] = {}
    for run in runs:
        by_key.setdefault(run.identity.setup_key(), []).append(run)
    return [Group(n, members) for n, members in enumerate(by_key.values(), 1)]


@dataclass(frozen=True)
class Move:
    figure: str
    before: RunRecord
    after: RunRecord
    verdict: str
    reason: str
    changes: tuple[str, ...]

    def sentence(self) -> str:
        what = ("what changed: " + "; ".join(self.changes)) if self.changes else (
            "nothing recorded changed between them (same engine, build, packages and code): "
            "the machine's state, or noise the samples missed")
        return f"{self.figure}: {self.verdict} ({self.reason}) from {self.before.name} to {self.after.name}; {what}."


def moves(group: Group, threshold: float) -> list[Move]:
    """Each figure that moved beyond the noise between consecutive runs of the group, with what changed."""
    out = []
    for fig in FIGURES:
        having = [r for r in group.runs if fig.key in r.figures]
        for before, after in zip(having, having[1:], strict=False):
            v, why = verdict(before.figures[fig.key], after.figures[fig.key], threshold)
            if v in ("better", "worse"):
                changes = tuple(f"{d.label} {value_text(d.a)} → {value_text(d.b)}"
                                for d in differences(before.identity, after.identity, "software"))
                out.append(Move(fig.title, before, after, v, why, changes))
    return out


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def skipped_text(n: int) -> str:
    return f"skipped {plural(n, 'folder')} that {'is' if n == 1 else 'are'} not a run"


# --- the page ------------------------------------------------------------------------------------

def _day(when: str) -> float | None:
    """The run's date as days since 1970-01-01 UTC (the date axis's numbers); a date without a zone is UTC."""
    try:
        moment = datetime.fromisoformat(when)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp() / 86400.0


def _dated(group: Group, fig: Headline) -> list[tuple[float, RunRecord]]:
    return [(d, r) for r in group.runs if fig.key in r.figures and (d := _day(r.when)) is not None]


def group_plots(group: Group) -> list[Plot]:
    """One plot per figure: the group's runs by date, medians joined, min–max shaded."""
    plots = []
    for fig in FIGURES:
        points = _dated(group, fig)
        if len(points) < 2:
            continue
        ms = [r.figures[fig.key] for _, r in points]
        plots.append(Plot(
            name=f"group{group.number}-{fig.key}", title=f"{fig.title}, group {group.number}",
            x_label=DATE_AXIS, y_label=ms[0].unit,
            series=[Series(label=f"group {group.number} ({len(points)} runs)", x=[d for d, _ in points],
                           y=[m.median for m in ms], y_min=[m.min for m in ms], y_max=[m.max for m in ms])]))
    return plots


def run_page(run: RunRecord, base: Path | None) -> str:
    """A relative link from a page in `base` to the run's own page: report.html where the run has one, else its
    README.md; every character that could make it something other than a path is percent-encoded."""
    page = next((run.path / n for n in ("report.html", "README.md") if (run.path / n).is_file()), run.path)
    rel = os.path.relpath(page.resolve(), (base or Path.cwd()).resolve())
    rel = rel.replace(os.sep, "/")
    return quote(rel if rel.startswith("../") else f"./{rel}", safe="/.-_~")


def plot_links(group: Group, base: Path | None) -> dict[str, list[str]]:
    """For each of the group's plots (by name), the page of each point's run, in the points' order."""
    return {f"group{group.number}-{fig.key}": [run_page(r, base) for _, r in _dated(group, fig)] for fig in FIGURES}


def plot_marks(group: Group, threshold: float) -> dict[str, list[Mark]]:
    """For each of the group's plots (by name), a mark at each move `compare` judges real: at the later run's
    date, with the verdict and what changed between the two runs where it is known."""
    out: dict[str, list[Mark]] = {}
    for move in moves(group, threshold):
        fig = next(f for f in FIGURES if f.title == move.figure)
        day = _day(move.after.when)
        if day is None:
            continue
        what = "; ".join(move.changes) if move.changes else "nothing recorded changed"
        out.setdefault(f"group{group.number}-{fig.key}", []).append(Mark(day, f"{move.verdict}: {what}"))
    return out


def _flags(identity: RunIdentity) -> str:
    return " ".join(k.removeprefix(FLAG) if v == "(set)" else f"{k.removeprefix(FLAG)} {v}"
                    for k, v in identity.entries("setup").items() if k.startswith(FLAG))


def history_blocks(found: Found, threshold: float = DEFAULT_THRESHOLD, plots: str | None = "",
                   base: Path | None = None) -> list[Block]:
    """The page. `plots`: None for no plots (the terminal), else the folder the SVG links point into. `base`: the
    folder the page is written to, for the links to each run's page (None: the terminal, no links)."""
    groups = group_runs(found.runs)
    group_of = {id(r): g.number for g in groups for r in g.runs}
    blocks: list[Block] = [Heading(1, "bytesup history", "top")]
    summary = (f"{plural(len(found.runs), 'run')} in {plural(len(groups), 'group')} of comparable runs "
               "(same machine, model, flags and lesson options)")
    if found.skipped:
        summary += f"; {skipped_text(len(found.skipped))}"
    blocks.append(Paragraph((summary + ". Moves are judged as ", Code("bytesup compare"), f" does, threshold {threshold:.0%}.")))
    rows = []
    for r in found.runs:
        v = r.identity.values
        name = Link(r.name, run_page(r, base), code=True) if base is not None else Code(r.name)
        rows.append((r.when[:19], name, group_of[id(r)], f"{value_text(v.get('host'))} ({value_text(v.get('cpu'))})",
                     f"{value_text(v.get('engine'))} {value_text(v.get('engine_build'))}",
                     (f"{value_text(v.get('model_file'))} ", Code(str(v.get("model_sha256") or "?")[:12])),
                     Code(_flags(r.identity)) if _flags(r.identity) else "—",
                     *(measure_text(r.figures.get(f.key)) for f in FIGURES), r.capstone(), r.checks_text()))
    blocks.append(TableBlock("Runs", ("date", "run", "group", "host", "engine and build", "model (sha256)", "flags",
                                      *(f.title for f in FIGURES), "capstone verdicts", "checks"), tuple(rows), level=2))
    for g in groups:
        blocks.append(Heading(2, "G" + g.label()[1:], anchor(g.label())))
        setup = "; ".join(f"{k} {value_text(v)}" for k, v in g.identity.entries("setup").items() if v is not None)
        blocks.append(Paragraph((f"{plural(len(g.runs), 'run')}: ", *_names(g), f". Setup: {setup}.")))
        found_moves = moves(g, threshold)
        if len(g.runs) > 1:
            blocks.append(Paragraph(("Moves beyond the noise: " + (f"{len(found_moves)}." if found_moves else "none."),)))
            blocks += [Paragraph((m.sentence(),)) for m in found_moves]
        if plots is not None:
            blocks += [Figure(p.title, p, svg=f"{plots}{p.name}.svg") for p in group_plots(g)]
    if found.skipped:
        blocks.append(TableBlock("Skipped folders", ("folder", "why"), tuple((Code(str(p)), why) for p, why in found.skipped), level=2))
    return blocks


def _names(group: Group) -> list[Any]:
    parts: list[Any] = []
    for n, r in enumerate(group.runs):
        parts += ([", "] if n else []) + [Code(r.name)]
    return parts


def history_markdown(found: Found, threshold: float = DEFAULT_THRESHOLD, plots: str | None = None,
                     base: Path | None = None) -> str:
    return markdown(history_blocks(found, threshold, plots, base))


def history_html(found: Found, threshold: float = DEFAULT_THRESHOLD, base: Path | None = None) -> str:
    """The history as one self-contained page, each group's plots drawn inline as SVG: each point a link to its
    run's page (relative to `base`, the page's folder), each move judged real marked with what changed."""
    groups = group_runs(found.runs)
    links: dict[str, list[str]] = {}
    marks: dict[str, list[Mark]] = {}
    for g in groups:
        links.update(plot_links(g, base))
        marks.update(plot_marks(g, threshold))

    def svg(plot: Plot, prefix: str) -> str:
        return svg_markup(plot, prefix, links.get(plot.name), marks.get(plot.name))

    return html_page("bytesup history", [html(history_blocks(found, threshold, "", base), svg, Ids())])


def write_history(found: Found, output: Path, as_html: bool, threshold: float = DEFAULT_THRESHOLD) -> list[Path]:
    """history.html (plots inline), or Markdown with its plots as SVG files in `<name>-plots/` beside it."""
    base = output.parent
    if as_html:
        write_text_atomic(output, history_html(found, threshold, base))
        return [output]
    folder = output.with_name(f"{output.stem}-plots")
    written = [output]
    for group in group_runs(found.runs):
        marks = plot_marks(group, threshold)
        for plot in group_plots(group):
            path = folder / f"{plot.name}.svg"
            write_text_atomic(path, svg_markup(plot, marks=marks.get(plot.name)))
            written.append(path)
    write_text_atomic(output, history_markdown(found, threshold, f"{folder.name}/", base))
    return written
