"""`bytesup report RUN`: the run folder's README.md as one readable page, and with `--html` the
same page as report.html.

The page opens with a summary (`summary_blocks`): the run's identity (date, commit, engine, model), the machine
and its account (the terms the run measured: its bandwidth reading and, where lesson 8 states its decode-time
model, that model's terms), the capstone's conclusion where the run states it, the checks counted by kind, and
warnings (lessons skipped, failed or not run, a busy machine, checks that failed). The server flags that do
nothing on this host are marked so. Then the lessons' contents, every lesson's tables, measurements and plots in
lesson order (each lesson's JSON made into blocks by `render.lesson_blocks`, the one renderer, its title made a
section), the checks of `bytesup check`, and the manifest's details.

README.md links its plots (`plots/...`, beside it). report.html draws each plot inline as SVG from its record,
each with ids of its own, so the file alone is the whole page: no script, no font or stylesheet, nothing
fetched. Each lesson is a section; a table wider than MAX_COLUMNS or longer than MAX_ROWS is folded into
`<details>`; every table scrolls inside its own box; a print stylesheet lays the page out for paper. Links to the
run's files are relative: they open when the page is read in its folder, which the page says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bytesup.check import checker
from bytesup.check.overhead import overhead_blocks
from bytesup.check.verdicts import COURSE, FAIL, INCONCLUSIVE, NA, PASS, breaks
from bytesup.course import busy, decodetime
from bytesup.store.facts.lesson08 import DecodeModel
from bytesup.store.manifest import LessonEntry
from bytesup.store.runs import Run, load_run
from bytesup.store.plots import svg_markup
from bytesup.store.render import (
    Block,
    Bullets,
    Code,
    Details,
    Heading,
    Ids,
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
from bytesup.run.timing import split_blocks

CAPSTONE = "08_capstone_decode_memory_bound"
MAX_COLUMNS = 8   # a wider table is folded in report.html
MAX_ROWS = 12     # and so is a longer one
# llama-server flags that place work on a GPU: they do nothing where the engine has no accelerator.
GPU_FLAGS = frozenset({"--n-gpu-layers", "-ngl", "--gpu-layers", "--main-gpu", "-mg", "--split-mode", "-sm",
                       "--tensor-split", "-ts", "--spec-draft-ngl", "-ngld", "--n-gpu-layers-draft"})
# A lesson that ran and holds its result; any other status is named in the warnings.
OK = "ok"
SKIPPED = "skipped"


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "size unknown"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --- what the run recorded about its host and server ---------------------------------------------

def no_accelerator(run: Run) -> str | None:
    """Why the server had no GPU to use, from what the run recorded, or None when it may have had one (or the
    run cannot tell): the lessons' server facts (the engine's accelerators on this host), else the host's GPUs."""
    recorded = [r.host_values.get("server_facts") for r in run.results.values()]
    facts = [f for f in recorded if isinstance(f, dict)]
    if facts:
        if all(f.get("local") and not f.get("accelerators") for f in facts):
            return "the engine saw no GPU or other accelerator on this host"
        return None
    host = run.manifest.host
    url = run.manifest.engine.url or ""
    local = any(h in url for h in ("//127.", "//localhost", "//[::1]"))
    if host and host.gpus == [] and local:
        return "this host has no GPU"
    return None


def flag_parts(run: Run) -> tuple[Inline, ...] | None:
    """The server flags as code, and the ones that do nothing on this host named so."""
    flags = {k: v for k, v in (run.manifest.engine.flags or {}).items() if k != "--api-key"}
    if not flags:
        return None
    text = " ".join(k if v is None else f"{k} {v}" for k, v in flags.items())
    why = no_accelerator(run)
    idle = [k if v is None else f"{k} {v}" for k, v in flags.items() if k in GPU_FLAGS] if why else []
    if not idle:
        return (Code(text),)
    parts: list[Inline] = [Code(text), " ("]
    for n, flag in enumerate(idle):
        parts += ([", "] if n else []) + [Code(flag)]
    parts.append(f" {'does' if len(idle) == 1 else 'do'} nothing here: {why})")
    return tuple(parts)


def bandwidth_text(run: Run) -> str | None:
    """The run's reading of this host's memory bandwidth: median, range and samples before the lessons, and after."""
    bw = run.manifest.host_bandwidth

    def one(reading: dict[str, Any] | None) -> str | None:
        gbs = (reading or {}).get("gb_per_s") or {}
        if not isinstance(gbs.get("median"), (int, float)):
            return None
        samples = gbs.get("samples") or []
        return (f"{fmt(gbs['median'])} GB/s (median of {len(samples)} samples, {fmt(gbs.get('min'))}–{fmt(gbs.get('max'))})"
                if samples else f"{fmt(gbs['median'])} GB/s")

    before, after = one(bw.before), one(bw.after)
    if before is None:
        return None
    text = f"{before} before the lessons"
    if after is not None:
        text += f"; {after} after them"
        change = (bw.drift or {}).get("change")
        if isinstance(change, (int, float)):
            text += f" ({change:+.0%})"
    return text


def machine_load_text(run: Run) -> str | None:
    """What the run read of the machine's load around its lessons (bytesup.course.busy): the lessons during which it
    was busy, or that it was quiet during every one, with the highest load average; None for a run recorded before
    the readings."""
    verdicts = {lid: v for lid, r in sorted(run.results.items())
                if (v := busy.judge(r.host_values.get(busy.HOST_VALUE))) is not None}
    if not verdicts:
        return None
    loud = [lid for lid, v in verdicts.items() if v.busy]
    top = max(verdicts.values(), key=lambda v: -1.0 if v.highest_load is None else v.highest_load)
    if loud:
        return f"busy during {', '.join(loud)} (see the warnings), quiet during {len(verdicts) - len(loud)} of {len(verdicts)}"
    return f"quiet during each of the {len(verdicts)} lessons that read it; at most {top.load}"


def decode_terms(run: Run) -> str | None:
    """Lesson 8's decode-time model, its terms fitted here on every model it measured (bytesup.course.decodetime)."""
    result = run.results.get(CAPSTONE)
    fact = result.stated(DecodeModel) if result is not None else None
    if fact is None:
        return None
    widths = [decodetime.Width(w.name, w.weight_bytes, w.n_params, w.weight_type,
                               {int(p): ms for p, ms in w.step_ms.items()}, w.n_layer)
              for w in fact.widths if "1" in w.step_ms]
    try:
        terms = decodetime.fit(widths)
    except ValueError:
        return None
    arithmetic = ", ".join(f"{kind} {fmt(c)} ps" if c > 0 else f"{kind} hidden under its reading"
                           for kind, c in terms.arith)
    return (f"a decode step = L × (f + g × W ÷ params) + max(W ÷ B, params × c), fitted on {_plural(len(widths), 'model')}: "
            f"B = {fmt(terms.gbs)} GB/s (reading the weights), c per parameter by weight type {arithmetic} (one "
            f"token's arithmetic), f = {fmt(terms.fixed_ms_per_block)} ms per block and g = {fmt(terms.fixed_ms_per_bpp)} ms "
            f"more per block for each byte per parameter (the fixed cost)")


def capstone_verdicts(run: Run) -> list[tuple[str, str]]:
    """The capstone's verdict per model, (model, verdict): a fact, or the sweep table's verdict column in runs older
    than the facts; [] where the run has none."""
    result = run.results.get(CAPSTONE)
    if result is None:
        return []
    verdicts = result.facts.get("verdicts")
    if isinstance(verdicts, dict) and verdicts:
        return [(str(k), str(v)) for k, v in verdicts.items()]
    try:
        sweep = result.table("sweep")
    except KeyError:
        return []
    names = [c.name for c in sweep.columns]
    if "verdict" not in names or "model" not in names:
        return []
    return [(str(r[names.index("model")]), str(r[names.index("verdict")])) for r in sweep.rows
            if r[names.index("verdict")] is not None]


def models_by_verdict(run: Run) -> dict[str, list[str]]:
    """The capstone's models grouped by verdict, in the order the verdicts first appear."""
    out: dict[str, list[str]] = {}
    for model, v in capstone_verdicts(run):
        out.setdefault(v, []).append(model)
    return out


def capstone_conclusion(run: Run) -> str | None:
    """The capstone's conclusion where the run states it: a stated conclusion, else its verdict per model."""
    result = run.results.get(CAPSTONE)
    if result is None:
        return None
    stated = result.facts.get("conclusion")
    if isinstance(stated, str) and stated:
        return stated
    return "; ".join(f"{v}: {', '.join(models)}" for v, models in models_by_verdict(run).items()) or None


ROOFLINE = "07_hardware_fit"
ROOF_SIDES = {"compute": "compute-bound", "memory": "memory-bound"}  # lesson 7's side of a ridge, as a verdict


def roofline_against_capstone(run: Run) -> str | None:
    """Where lesson 7's roofline puts the default model's decode on another side than the capstone's verdict for the
    same model, which is the run's: a sentence that says so and why they differ; None where they agree, or either is
    missing. Lesson 7 sets decode's FLOPs per byte against the engine's ridge, its prefill's arithmetic rate over the
    run's bandwidth, with no allowance for the samples' scatter; the capstone fits the measured steps of every model
    (decode's own arithmetic per parameter, which on a 2-core CPU ran 1.7 to 9 times slower than prefill's) and calls
    a model mixed where its two terms are too close to tell."""
    roofline = run.results.get(ROOFLINE)
    if roofline is None:
        return None
    model = str(roofline.model.get("name", ""))
    verdict = dict(capstone_verdicts(run)).get(model)
    try:
        points = roofline.table("roofline_points_main")
    except KeyError:
        return None
    names = [c.name for c in points.columns]
    if verdict is None or "phase" not in names or "bound on this CPU" not in names:
        return None
    side = next((str(r[names.index("bound on this CPU")]) for r in points.rows if r[names.index("phase")] == "decode"), None)
    if side not in ROOF_SIDES or ROOF_SIDES[side] == verdict:
        return None
    return (f"lesson 7's roofline puts {model}'s decode on the {side} side of the engine's ridge, which sets it "
            f"against the engine's prefill rate (decode's one-token kernels need not reach it) with nothing allowed for "
            f"the samples' scatter; the capstone times decode's own arithmetic on every model and finds it {verdict}: "
            f"its verdict is this run's")


# What a verdict says of a model's decode, for one model and for several (`found_sentence`).
WAITS = {"memory-bound": ("waits on memory", "wait on memory"),
         "compute-bound": ("waits on the arithmetic", "wait on the arithmetic"),
         "mixed": ("is mixed", "are mixed")}
NAMED_UP_TO = 3  # more models of one verdict are counted, not named: the verdicts' row names them all


def found_sentence(run: Run) -> str | None:
    """The run's answer to the course's question, first on the page: for how many of the capstone's models decode
    waits on memory here, and what the others' decode waits on. None without the capstone's verdicts."""
    by_verdict = models_by_verdict(run)
    if not by_verdict:
        return None
    parts = []
    for verdict, models in by_verdict.items():
        one, several = WAITS.get(verdict, (f"is {verdict}", f"are {verdict}"))
        if len(models) == 1:
            parts.append(f"{models[0]} {one}")
        elif len(models) <= NAMED_UP_TO:
            parts.append(f"{', '.join(models[:-1])} and {models[-1]} {several}")
        else:
            parts.append(f"{len(models)} models {several}")
        if verdict == "mixed":
            parts[-1] += " (the run cannot tell whether reading the weights or the arithmetic takes longer)"
    memory = len(by_verdict.get("memory-bound", []))
    return (f"What this run found: the course's title, decode is memory-bound, is shown on this machine for "
            f"{memory or 'none'} of the {_plural(sum(map(len, by_verdict.values())), 'model')} the capstone (lesson 8) "
            "measured: "
            + "; ".join(parts) + ". Why, and what would move a model across, in the capstone's conclusion.")


# The general claims set against the course's statements (its title, width by width), counted apart: their fails are
# findings about this machine and model, not a broken run (bytesup.check.verdicts.breaks).
COURSE_KIND = "general claims against the course (a fail is a finding about this machine)"


def check_kind(source: str, group: str) -> str:
    """What a claim is counted as in the summary: a general claim, one against the course, or a reference's figure."""
    if source != "general":
        return f"published figures ({source})"
    return COURSE_KIND if group == COURSE else "general claims"


def check_counts(claims: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """(kind, counts) from the claims' (source, group, status): the general claims, those against the course, then
    each reference's published figures."""
    kinds: list[tuple[str, str]] = []
    kinded = [(check_kind(source, group), status) for source, group, status in claims]
    for kind in dict.fromkeys(["general claims", COURSE_KIND, *(k for k, _ in kinded)]):
        statuses = [status for k, status in kinded if k == kind]
        if not statuses:
            continue
        counts = {st: statuses.count(st) for st in (PASS, FAIL, INCONCLUSIVE, NA)}
        text = ", ".join(f"{n} {'not applicable' if st == NA else st}" for st, n in counts.items() if n or st in (PASS, FAIL))
        kinds.append((kind, text))
    return kinds


def checked_claims(run: Run, report: "checker.CheckReport | None") -> list[tuple[str, str, str]] | None:
    """(source, group, status) of each claim: from the checks just run, else from the run's check.json where
    `bytesup check` wrote one (a group it does not give counts as none); None when the run was not checked."""
    if report is not None:
        return [(r.source, r.group, r.status) for r in report.results]
    try:
        data = json.loads((run.path / "check.json").read_text(encoding="utf-8"))
        return [(str(c["source"]), str(c.get("group", "")), str(c["status"])) for c in data["claims"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def entry_reason(entry: LessonEntry) -> str:
    """Why a lesson did not give a result: the reason its entry records (a skipped lesson's `skip_reason`, with
    the command that enables it, `enable_command`, where recorded), else its error."""
    data = entry.model_dump(exclude_none=True)
    reason = next((str(data[k]) for k in ("skip_reason", "reason") if data.get(k)), None) or entry.error or ""
    enable = next((str(data[k]) for k in ("enable_command", "enable") if data.get(k)), None)
    if enable and enable not in reason:
        reason = f"{reason}; {enable} enables it" if reason else f"{enable} enables it"
    return reason[:300]


def warnings(run: Run, check_report: "checker.CheckReport | None") -> list[str]:
    """What a reader should know before trusting the figures below."""
    out = []
    m = run.manifest
    for lid, entry in sorted(m.lessons.items()):
        if entry.status == OK and lid in run.results:
            continue
        reason = entry_reason(entry)
        status = entry.status or "missing"
        out.append(f"{lid} {'was skipped: it measured nothing here' if status == SKIPPED else status}"
                   + (f": {reason}" if reason else ""))
    cores = m.host.cores if m.host else None
    for when, load in (("before", m.load_average_before), ("after", m.load_average_after)):
        if cores and load and load[0] > cores:
            out.append(f"The machine was busy {when} the run: a load average of {fmt(load[0])} on {cores} cores.")
    for lid, result in sorted(run.results.items()):
        verdict = busy.judge(result.host_values.get(busy.HOST_VALUE))
        if verdict is not None and verdict.busy:
            out.append(f"The machine was busy during {lid}: {'; '.join(verdict.reasons)}. Its timing claims are "
                       "inconclusive.")
    drift = m.host_bandwidth.drift or {}
    change = drift.get("change")
    if isinstance(change, (int, float)) and drift.get("ranges_overlap") is False:
        out.append(f"The memory bandwidth read {abs(change):.0%} {'lower' if change < 0 else 'higher'} after the lessons "
                   "than before them, beyond the samples' ranges: the machine's memory was not equally free during the run.")
    if m.repository and m.repository.dirty:
        out.append("The code had uncommitted changes: the commit does not name it exactly.")
    if check_report is not None:  # a fail against the course is a finding, counted in the summary, not a warning
        bad = [r for r in check_report.results if breaks(r)]
        out += [f"Check failed: {r.claim} ({r.lesson}): {r.observed}" for r in bad]
    return out


def identity_parts(run: Run) -> tuple[Inline, ...]:
    m = run.manifest
    model = run.model_identity()
    parts: list[Inline] = [f"Run {run.name}" + (f", {m.created_at}" if m.created_at else "")]
    if m.repository and m.repository.commit:
        parts += [" · code ", Code(m.repository.commit[:12]), " (uncommitted changes)" if m.repository.dirty else ""]
    if m.engine:
        parts.append(f" · engine {m.engine.engine or '?'} ({m.engine.build or 'unknown build'})")
    if model:
        parts.append(f" · model {model.get('file', '?')} ({_size(model.get('size_bytes'))})")
    parts.append(f" · status {m.status if run.has_manifest else 'no manifest'}")
    return tuple(p for p in parts if p)


def summary_blocks(run: Run, check_report: "checker.CheckReport | None") -> list[Block]:
    """The top of the page: who ran what where, what the run measured of the machine, the conclusion, the checks
    and the warnings."""
    m = run.manifest
    host = m.host
    account: list[tuple[str, Any]] = [
        ("machine", f"{host.hostname or '?'}: {host.cpu or '?'}, {fmt(host.cores)} cores, {_size(host.memory_bytes)} memory"
                    + (f", GPU {', '.join(host.gpus)}" if host.gpus else ", no GPU") if host else None),
        ("memory bandwidth (the run's reading)", bandwidth_text(run)),
        ("the machine's load (around each lesson)", machine_load_text(run)),
        ("decode-time model (lesson 8)", decode_terms(run)),
        ("the capstone's verdicts", "; ".join(t for t in (capstone_conclusion(run), roofline_against_capstone(run)) if t)
         or None),
        ("server flags", flag_parts(run)),
    ]
    claims = checked_claims(run, check_report)
    if claims:
        account.append(("checks", "; ".join(f"{kind}: {text}" for kind, text in check_counts(claims))))
    gap = m.engine_gap.sentence if m.engine_gap is not None else None  # the engines on this CPU, measured first
    answer = found_sentence(run)  # the course's question answered, before how it was measured
    blocks: list[Block] = [
        Heading(1, f"bytesup run {run.name}", "top"),
        Paragraph(identity_parts(run)),
        *([Paragraph((answer,))] if answer else []),
        *([Paragraph((gap,))] if gap else []),
        TableBlock("", ("", ""), tuple((k, v) for k, v in account if v is not None), css="summary"),
    ]
    found = warnings(run, check_report)
    blocks.append(Bullets("Warnings", tuple(found)) if found else Paragraph(("Warnings: none.",)))
    return blocks


def summary_rows(run: Run) -> list[tuple[str, Any]]:
    """(what, value or inline parts) for the manifest's details; rows the manifest cannot fill are left out."""
    m = run.manifest
    host, eng, repo = m.host, m.engine, m.repository
    model = run.model_identity()
    rows: list[tuple[str, Any]] = [
        ("status", m.status if run.has_manifest else "no manifest"),
        ("created", m.created_at),
        ("updated", m.updated_at),
        ("host", f"{host.hostname or '?'}: {host.cpu or '?'}, {fmt(host.cores)} cores, "
                 f"{_size(host.memory_bytes)} memory" + (f", GPU {', '.join(host.gpus)}" if host.gpus else ", no GPU")
         if host else None),
        ("OS / Python", f"{host.os} / Python {host.python}" if host else None),
        ("engine", f"{eng.engine or '?'} ({eng.build or '?'})" if eng else None),
        ("server flags", flag_parts(run)),
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


def contents_block(run: Run) -> TableBlock:
    """Every lesson of the run: its status (with the reason where it gave no result) and a link to its section."""
    entries = dict(run.manifest.lessons)
    for lid in run.results:
        entries.setdefault(lid, LessonEntry(status=OK, title=run.results[lid].title))
    index = []
    for lid, entry in sorted(entries.items()):
        result = run.results.get(lid)
        status = entry.status or "?"
        reason = entry_reason(entry) if status != OK else ""
        if result is not None:
            title: Any = (Link(result.title, f"#{anchor(result.title)}"), f": {reason[:200]}" if reason else "")
        else:
            title = (entry.title or "") + (f": {reason[:200]}" if reason else "")
        index.append((Code(lid), status, title))
    return TableBlock("Lessons", ("lesson", "status", "title"), tuple(index), level=2)


def files_paragraph(lid: str, exchanges: str | None) -> Paragraph:
    links: list[Inline] = ["Files: ", Link(f"{lid}.json", f"{lid}.json", code=True), " · ",
                           Link(f"{lid}.md", f"{lid}.md", code=True)]
    if exchanges:
        links += [" · ", Link(exchanges, exchanges, code=True)]
    return Paragraph(tuple(links))


def files_note(run: Run) -> Paragraph:
    before = "The links to the run's files (each lesson's JSON, Markdown and recorded exchanges) lead into the run folder "
    after = (": they open when this page is read there. A copy of the page alone keeps every table and plot, "
             "and those links lead nowhere.")
    return Paragraph((before, Code(run.name), after))


def lesson_sections(run: Run, files: bool = True) -> list[tuple[str, list[Block]]]:
    """(lesson id, its blocks) for every lesson with a result, in course order; one the manifest does not call ok
    (a skipped lesson) says so, with its reason, under its title."""
    out = []
    for lid in sorted(run.results):
        result = run.results[lid]
        blocks = demoted(lesson_blocks(result))
        entry = run.manifest.lessons.get(lid)
        if entry is not None and entry.status not in (OK, None):
            reason = entry_reason(entry)
            what = "skipped: it measured nothing on this machine" if entry.status == SKIPPED else f"not ok: {entry.status}"
            blocks.insert(1, Paragraph((f"This lesson was {what}" + (f" ({reason})." if reason else "."),)))
        if files:
            blocks.append(files_paragraph(lid, result.exchanges))
        out.append((lid, blocks))
    return out


def report_blocks(run: Run, check_report: "checker.CheckReport | None", files: bool = True) -> list[Block]:
    """The whole page: summary, the lessons' index, every lesson in course order, the checks, the run's details.
    `files`: a line of links to each lesson's own files under its section."""
    blocks = summary_blocks(run, check_report) + [contents_block(run)]
    if check_report is not None:
        blocks.append(Paragraph((f"Checks: {check_report.summary()} (",
                                 Link("details", f"#{anchor(f'Checks of run {run.name}')}"), ").")))
    if files:
        blocks.append(files_note(run))
    blocks += overhead_blocks(run)
    blocks += split_blocks(run.manifest)
    for _, section in lesson_sections(run, files):
        blocks += section
    if check_report is not None:
        blocks += checker.check_blocks(check_report, level=2)
    blocks.append(Details("The run's details: host, engine, packages, command",
                          (TableBlock("", ("", ""), tuple(summary_rows(run)), css="summary"),), level=3))
    return blocks


def report_md(run: Run, check_report: "checker.CheckReport | None") -> str:
    return markdown(report_blocks(run, check_report))


def folded(block: TableBlock) -> bool:
    """A table report.html folds: the raw measurements, the checks (the summary counts them and names each failure),
    and any table wider than MAX_COLUMNS or longer than MAX_ROWS; the summary never."""
    if block.css == "summary":
        return False
    return block.css in ("measurements", "checks") or len(block.headers) > MAX_COLUMNS or len(block.rows) > MAX_ROWS


REPORT_STYLE = """
ul.notes { font-size: 13px; color: #444; }
details.table .size { color: #666; font-size: 13px; }
table.summary { width: 100%; }
table.summary td:first-child { width: 16em; color: #444; }
@media (max-width: 600px) {
  table.summary td { display: block; width: auto; border: 0; padding: 0 4px; }
  table.summary td:first-child { width: auto; margin-top: .4em; font-weight: 600; }
  table.summary tr { display: block; border-bottom: 1px solid #ccc; padding-bottom: .3em; }
}
section.lesson { border-top: 2px solid #888; margin-top: 2em; }
header.summary { border-bottom: 2px solid #888; }
"""


def report_html(run: Run, check_report: "checker.CheckReport | None") -> str:
    """The same page as one self-contained HTML file: the summary first, then the contents, a section per lesson
    (long tables folded), the checks and the run's details; every plot drawn inline as SVG from its record."""
    ids = Ids()

    def part(blocks: list[Block]) -> str:
        return html(blocks, svg_markup, ids, folded)

    body = ['<header class="summary">', part(summary_blocks(run, check_report)), "</header>"]
    top: list[Block] = [contents_block(run)]
    if check_report is not None:
        top.append(Paragraph((f"Checks: {check_report.summary()} (",
                              Link("details", f"#{anchor(f'Checks of run {run.name}')}"), ").")))
    top.append(files_note(run))
    body += ['<nav class="contents">', part(top), "</nav>"]
    overhead = overhead_blocks(run) + split_blocks(run.manifest)
    if overhead:
        body += ["<section>", part(overhead), "</section>"]
    for lid, blocks in lesson_sections(run):
        body += [f'<section class="lesson" id="{ids(f"lesson-{anchor(lid)}")}">', part(blocks), "</section>"]
    if check_report is not None:
        body += ["<section>", part(checker.check_blocks(check_report, level=2)), "</section>"]
    body += ["<section>", part([Details("The run's details: host, engine, packages, command",
                                        (TableBlock("", ("", ""), tuple(summary_rows(run)), css="summary"),), level=3)]),
             "</section>"]
    return html_page(f"bytesup run {run.name}", body, REPORT_STYLE)


def write_run_report(path: Path, reference_files: list[Path] | None = None,
                     run_checks: bool = True, with_html: bool = False) -> tuple[list[Path], checker.CheckReport | None]:
    """Write README.md (and check.md / check.json, and report.html with `with_html`) in the run folder;
    returns the pages written."""
    run = load_run(path)
    report = None
    if run_checks:
        report = checker.check_run(run, reference_files)
        checker.write_report(report)
    readme = run.path / "README.md"
    write_text_atomic(readme, report_md(run, report))
    pages = [readme]
    if with_html:
        page = run.path / "report.html"
        write_text_atomic(page, report_html(run, report))
        pages.append(page)
    return pages, report
