"""`bytesup check RUN`: do the course's statements hold in this run?

Two kinds of claims:

- general claims (`bytesup.check.claims`, one module per lesson), true for any model on any host, checked on every
  run from whatever lessons it holds, each with check's own arithmetic on raw records: the server's recorded
  answers, measurements and facts read by name, the model's GGUF hyperparameters (probabilities are e^logprob and
  the lesson shows them, the top eight share at most 1, prefill beats decode per token, decode slows with context,
  the KV-cache formula, the sampler re-implementation within its tolerance, speculative output equal to plain
  output, streamed tokens after prompt_ms, one event per token and the two clocks' time per token, decode
  efficiency in [0, 1], the ridge point, the depth line and the decode-time model refitted from their samples, lesson
  8's verdict per width against check's own, and the course's title, decode memory-bound, width by width);
- figures in reference files (`bytesup.check.references`, files under `references/`), each with the scope it was
  measured in and a tolerance. A run outside that scope gets "not applicable" with what differs;
  inside it, the run's number is compared.

Every claim ends as pass, fail (with both numbers and the tolerance), inconclusive (the samples
cannot tell) or not applicable (with what differs or is missing), and belongs to one group
(bytesup.check.verdicts.GROUPS): this run against the course's published figures, against itself
(predictions and consistency), sanity checks (bounds any sound run meets, not evidence), or against
a reference run. The counts per group say what the passes are worth. Results go to the terminal
and to `check.md` / `check.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table as RichTable

from bytesup.host.environment import utc_now
from bytesup.check.claims import CACHE_TYPE_BYTES, EXP_RELATIVE_TOLERANCE, GENERAL_CLAIMS
from bytesup.store.runs import Run
from bytesup.store.escape import rich_text
from bytesup.store.render import Block, Code, Heading, Paragraph, TableBlock, anchor
from bytesup.store import render
from bytesup.check.references import (
    Reference,
    check_reference,
    default_references,
    load_reference,
    references_dir,
    scope_differences,
)
from bytesup.paths import in_the_clone
from bytesup.files import write_json_atomic, write_text_atomic
from bytesup.check.verdicts import COURSE, FAIL, GROUPS, INCONCLUSIVE, NA, PASS, ClaimResult, breaks

CHECK_SCHEMA_VERSION = 1

# Names other modules and tests use from here.
__all__ = ["CACHE_TYPE_BYTES", "CHECK_SCHEMA_VERSION", "EXP_RELATIVE_TOLERANCE", "FAIL", "GENERAL_CLAIMS", "INCONCLUSIVE", "NA", "PASS",
           "CheckReport", "ClaimResult", "Reference", "breaks", "check_reference", "check_run", "default_references", "load_reference",
           "markdown", "print_rich", "references_dir", "scope_differences", "write_report"]


# --- running the checks ------------------------------------------------------------------

@dataclass
class CheckReport:
    run: Run
    references: list[tuple[Path, Reference]]
    results: list[ClaimResult]
    checked_at: str

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, INCONCLUSIVE: 0, NA: 0}
        for r in self.results:
            out[r.status] += 1
        return out

    @property
    def failed(self) -> bool:
        """Whether a claim failed that says the run is off (`verdicts.breaks`): a fail against the course's
        statements is a finding about this machine and model, counted and shown, and does not make the run fail."""
        return any(breaks(r) for r in self.results)

    def counts_by_group(self) -> dict[str, dict[str, int]]:
        """{group: {status: count}} for every group that has a result, in GROUPS' order."""
        out = {g: {PASS: 0, FAIL: 0, INCONCLUSIVE: 0, NA: 0} for g in GROUPS}
        for r in self.results:
            out[r.group][r.status] += 1
        return {g: c for g, c in out.items() if sum(c.values())}

    def group_rows(self) -> list[tuple[str, int, int, int, int, str, str]]:
        """(group, passes, failures, inconclusives, not applicable, what a pass shows, what a fail shows) per group
        with a result."""
        return [(GROUPS[g][0], c[PASS], c[FAIL], c[INCONCLUSIVE], c[NA], GROUPS[g][1], GROUPS[g][2])
                for g, c in self.counts_by_group().items()]

    def summary(self) -> str:
        """The counts in one line; where some fails are findings against the course (`verdicts.breaks`), how many
        of them are, so that "5 fail" is not read as a broken run."""
        c = self.counts()
        findings = sum(1 for r in self.results if r.status == FAIL and not breaks(r))
        if not findings:
            failed = f"{c[FAIL]} fail"
        elif findings == c[FAIL]:
            failed = f"{c[FAIL]} fail (each a finding against the course, none that breaks the run)"
        else:
            failed = f"{c[FAIL]} fail ({findings} of them {'a finding' if findings == 1 else 'findings'} against the course)"
        return (f"{c[PASS]} pass, {failed}, " + (f"{c[INCONCLUSIVE]} inconclusive, " if c[INCONCLUSIVE] else "")
                + f"{c[NA]} not applicable")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": CHECK_SCHEMA_VERSION, "kind": "bytesup-check",
            "run": in_the_clone(self.run.path), "checked_at": self.checked_at,
            "references": [{"file": in_the_clone(p), "name": r.name, "source": r.source} for p, r in self.references],
            "counts": self.counts(), "counts_by_group": self.counts_by_group(), "claims": [r.to_json() for r in self.results],
        }


def check_run(run: Run, reference_files: list[Path] | None = None) -> CheckReport:
    files = list(reference_files) if reference_files else default_references()
    refs = [(Path(p), load_reference(Path(p))) for p in files]
    results: list[ClaimResult] = []
    for claim in GENERAL_CLAIMS:
        results.extend(claim(run))
    for _, ref in refs:
        results.extend(check_reference(run, ref))
    return CheckReport(run, refs, results, utc_now())


MARK = {PASS: "✅ pass", FAIL: "❌ fail", INCONCLUSIVE: "❔ inconclusive", NA: "➖ not applicable"}
CLAIM_HEADERS = ("lesson", "result", "observed")
GROUP_HEADERS = ("group", "pass", "fail", "inconclusive", "not applicable", "a pass shows", "a fail shows")
GENERAL_TITLE = "General claims (any model, any host)"


def _row(r: ClaimResult) -> tuple[str, ...]:
    return (r.claim, r.lesson, MARK[r.status], r.observed, r.expected, r.tolerance, r.detail)


def _general_by_group(report: CheckReport) -> list[tuple[str, list[ClaimResult]]]:
    """The general claims' results per group, in GROUPS' order, groups without one left out."""
    general = [r for r in report.results if r.source == "general"]
    return [(g, rows) for g in GROUPS if (rows := [r for r in general if r.group == g])]


def _reference_heading(ref: Reference) -> str:
    return f"{'Published figures' if ref.group == COURSE else 'Reference run'}: {ref.name}"


def check_blocks(report: CheckReport, level: int = 1) -> list[Block]:
    """The checks as a page's blocks (Markdown in check.md, a section of the run's report)."""
    sub = level + 1
    blocks: list[Block] = [
        Heading(level, f"Checks of run {report.run.name}", anchor(f"Checks of run {report.run.name}")),
        Paragraph((f"{report.summary()} · checked {report.checked_at}",)),
        TableBlock("What a pass and a fail are worth", GROUP_HEADERS, tuple(report.group_rows()), level=sub, css="checks"),
        Heading(sub, GENERAL_TITLE),
    ]
    for group, rows in _general_by_group(report):
        blocks.append(TableBlock(GROUPS[group][0][0].upper() + GROUPS[group][0][1:], ("claim", *CLAIM_HEADERS, "expected",
                                 "tolerance", "detail"), tuple(_row(r) for r in rows), level=sub + 1, css="checks"))
    for path, ref in report.references:
        rows = [r for r in report.results if r.source == ref.name]
        scope = ref.scope
        blocks += [
            Heading(sub, _reference_heading(ref)),
            Paragraph((f"Group: {GROUPS[ref.group][0]}. Source: {ref.source}"
                       + (f" (measured {ref.measured_on})" if ref.measured_on else ""),)),
            Paragraph((f"Scope: {scope.model.name} {scope.model.quantization or ''}".rstrip()
                       + (f" (sha256 {scope.model.sha256[:12]}…)" if scope.model.sha256 else "")
                       + (f" · {scope.hardware.name}" if scope.hardware else "")
                       + (f" · {scope.engine.name}" if scope.engine else "")
                       + (f" · {' '.join(f'{k} {v}' for k, v in scope.flags.items())}" if scope.flags else ""),
                       " · file ", Code(path.name))),
        ]
        na = [r for r in rows if r.status == NA]
        if rows and len(na) == len(rows) and len({r.detail for r in rows}) == 1:
            blocks += [Paragraph((f"All {len(rows)} figures: {MARK[NA]}: ", rows[0].detail, ".")),
                       TableBlock("", ("figure", "lesson", "published", "tolerance"),
                                  tuple((r.claim, r.lesson, r.expected, r.tolerance) for r in rows), css="checks")]
        else:
            blocks.append(TableBlock("", ("figure", *CLAIM_HEADERS, "published", "tolerance", "detail"),
                                     tuple(_row(r) for r in rows), css="checks"))
    return blocks


def markdown(report: CheckReport, heading: str = "#") -> str:
    return render.markdown(check_blocks(report, len(heading)))


def write_report(report: CheckReport) -> tuple[Path, Path]:
    md, js = report.run.path / "check.md", report.run.path / "check.json"
    write_text_atomic(md, markdown(report))
    write_json_atomic(js, report.to_json())
    return md, js


STATUS_STYLE = {PASS: "green", FAIL: "bold red", INCONCLUSIVE: "yellow", NA: "dim"}


def print_rich(report: CheckReport, console) -> None:
    def table(title: str, caption: str | None, rows: list[ClaimResult], with_detail: bool) -> None:
        t = RichTable(title=rich_text(title), title_justify="left", caption=rich_text(caption) if caption else None, caption_justify="left")
        cols = ["claim", "lesson", "result", "observed", "expected", "tolerance"] + (["detail"] if with_detail else [])
        for col in cols:
            t.add_column(col, overflow="fold")
        for r in rows:
            style = STATUS_STYLE[r.status]
            cells = [rich_text(r.claim), r.lesson, f"[{style}]{r.status}[/{style}]",
                     rich_text(r.observed), rich_text(r.expected), rich_text(r.tolerance)]
            t.add_row(*(cells + ([rich_text(r.detail)] if with_detail else [])))
        console.print(t)

    # The terminal's table keeps to what a pass shows; a line after it says what the course's fails are.
    counts = RichTable(title="what each pass is worth", title_justify="left")
    for col in GROUP_HEADERS[:-1]:
        counts.add_column(col, overflow="fold")
    for g, passes, fails, inconclusive, na, shows, _ in report.group_rows():
        counts.add_row(rich_text(g), str(passes), f"[{STATUS_STYLE[FAIL]}]{fails}[/{STATUS_STYLE[FAIL]}]" if fails else "0",
                       str(inconclusive), str(na), rich_text(shows))
    for group, rows in _general_by_group(report):
        table(f"general claims: {GROUPS[group][0]}", None, rows, True)
    for _, ref in report.references:
        rows = [r for r in report.results if r.source == ref.name]
        shared_na = bool(rows) and all(r.status == NA for r in rows) and len({r.detail for r in rows}) == 1
        caption = f"group: {GROUPS[ref.group][0]}\nsource: {ref.source}"
        if shared_na:
            caption += f"\nall {len(rows)} figures not applicable: {rows[0].detail}"
        table(_reference_heading(ref).lower(), caption, rows, not shared_na)
    console.print(counts)
    findings = report.counts_by_group().get(COURSE, {}).get(FAIL, 0)
    if findings:
        console.print(rich_text(f"{findings} fail{'s' if findings > 1 else ''} against the course: {GROUPS[COURSE][2]}."))
    console.print(f"[bold]{report.summary()}[/bold]", soft_wrap=True)
