"""`bytesup compare`, `bytesup history`, `bytesup check`, `bytesup report`."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from bytesup.check import checker
from bytesup.check import compare
from bytesup.check import history
from bytesup.cli.common import fail
from bytesup.paths import outputs_root
from bytesup.errors import BytesupError
from bytesup.store.escape import rich_text
from bytesup.run.report import write_run_report
from bytesup.store.runs import load_run
from bytesup.files import write_text_atomic


class CompareFormat(str, Enum):
    table = "table"
    md = "md"
    json = "json"


RunArg = Annotated[Path, typer.Argument(help="a run folder written by `bytesup run` (e.g. outputs/2026-10-12)", show_default=False)]
ReferenceOpt = Annotated[Optional[list[Path]], typer.Option(
    "--reference", "-r",
    help="a reference file of published figures (JSON, see references/); repeat for several. "
         "Default: every references/*.json")]


def register(app: typer.Typer) -> None:
    """Add `compare`, `check` and `report` to the `bytesup` app (cli/app.py calls this once)."""

    @app.command("compare")
    def compare_cmd(
        run_a: Annotated[Path, typer.Argument(help="the baseline run folder (A)", show_default=False)],
        run_b: Annotated[Path, typer.Argument(help="the run folder to judge against it (B)", show_default=False)],
        threshold: Annotated[str, typer.Option(
            "--threshold", "-t",
            help="smallest change that counts, as a percentage of A (e.g. 10%). Smaller changes, and changes "
                 "whose samples' min–max ranges overlap, are 'within noise'")] = "5%",
        format_: Annotated[CompareFormat, typer.Option(
            "--format", "-f",
            help="table: a Rich table in the terminal; md: Markdown ready to paste; json: the full comparison")] = CompareFormat.table,
        output: Annotated[Optional[Path], typer.Option(
            "--output", "-o",
            help="write the report to FILE (md or json; with --format table the file's suffix picks: .json gives JSON, "
                 "anything else Markdown) instead of printing it")] = None,
        fail_on_regression: Annotated[bool, typer.Option(
            "--fail-on-regression",
            help="exit with status 3 when any measurement is worse beyond the threshold (for scripts and CI)",
        )] = False,
    ) -> None:
        """Compare two runs measurement by measurement: A, B, B ÷ A and a verdict.

        Rows are joined on the lesson and the measurement's name, settings and unit. Verdicts: better / worse (beyond the
        threshold, in the direction the measurement calls better), within noise (the samples' min–max ranges overlap, or the
        change is under the threshold), same / changed (facts such as byte counts), not comparable (another model, other settings
        or units: the row says which).

        Above the table: only what differs between the runs (host, CPU, engine build, flags, packages, model). Next-token tables
        (top8_*) are compared token by token: set and order of the top tokens, the largest |Δ logprob|, the top token's
        probability.

        \b
        Example, after a llama.cpp upgrade:
          bytesup compare outputs/2026-10-12 outputs/2026-11-30 \\
              --threshold 10% --format md --output changes.md
        """
        out, err = Console(), Console(stderr=True)
        try:
            limit = compare.parse_threshold(threshold)
            a, b = compare.load_run(run_a), compare.load_run(run_b)
            comparison = compare.compare_runs(a, b, limit)
        except BytesupError as exc:
            raise fail(exc) from None
        fmt_ = format_
        if output is not None and fmt_ is CompareFormat.table:
            fmt_ = CompareFormat.json if output.suffix.lower() == ".json" else CompareFormat.md
        if fmt_ is CompareFormat.table:
            compare.print_rich(comparison, out)
        else:
            text = (compare.markdown(comparison) if fmt_ is CompareFormat.md
                    else json.dumps(comparison.to_json(), indent=2, ensure_ascii=False) + "\n")
            if output is not None:
                write_text_atomic(output, text)
                err.print(rich_text(f"wrote {output} ({compare.summary_line(comparison)})"), highlight=False, soft_wrap=True)
            else:
                typer.echo(text, nl=False)
        for problem in a.problems + b.problems:
            err.print(f"[yellow]note:[/yellow] {rich_text(problem)}", highlight=False, soft_wrap=True)
        if fail_on_regression and comparison.regressions:
            names = ", ".join(f"{r.lesson}/{r.label}" for r in comparison.regressions)
            err.print(f"[bold red]{len(comparison.regressions)} regression(s) beyond {limit:.0%}:[/bold red] {rich_text(names)}",
                      highlight=False, soft_wrap=True)
            raise typer.Exit(3)

    @app.command("history")
    def history_cmd(
        paths: Annotated[Optional[list[Path]], typer.Argument(
            help="run folders, or folders that hold them (default: outputs/)", show_default=False)] = None,
        output: Annotated[Optional[Path], typer.Option(
            "--output", "-o", help="write the history to FILE (Markdown, its plots as SVG in FILE's name + '-plots/' beside it; "
                                   "with --html one self-contained page) instead of printing it")] = None,
        as_html: Annotated[bool, typer.Option(
            "--html", help="write one self-contained page, plots inline (to --output, else history.html here)")] = False,
        threshold: Annotated[str, typer.Option(
            "--threshold", "-t", help="smallest change that counts, as in `bytesup compare`")] = "5%",
    ) -> None:
        """Every run over time: its headline figures, grouped by what makes runs comparable, and what moved them.

        Reads each run folder given, or each folder directly inside a folder given (outputs/ by default); folders that are not
        runs are skipped and counted. A table gives each run's date, host, engine and build, model, flags, decode and prefill
        tokens/s, host bandwidth, decode efficiency, the capstone's verdicts and the checks. Runs with the same machine, model,
        server flags and lesson options form a group; for each group, a plot of each figure by date with the samples' min–max
        (runs of different groups are never joined), each point a link to its run's page, and the figures that moved beyond
        the noise between consecutive runs (compare's rule) with what changed between them (engine build, packages, code),
        listed and marked on the plot.

        \b
        Example:
          bytesup history --html -o outputs/history.html
        """
        err = Console(stderr=True)
        try:
            limit = compare.parse_threshold(threshold)
            found = history.find_runs(list(paths) if paths else [outputs_root()])
            if as_html and output is None:
                output = Path("history.html")
            written = history.write_history(found, output, as_html, limit) if output is not None else None
        except BytesupError as exc:
            raise fail(exc) from None
        if written is None:
            typer.echo(history.history_markdown(found, limit), nl=False)
        skipped = f"; {history.skipped_text(len(found.skipped))}" if found.skipped else ""
        err.print(rich_text(f"{history.plural(len(found.runs), 'run')} read{skipped}"), highlight=False, soft_wrap=True)
        for folder, why in found.skipped:
            err.print(rich_text(f"  skipped {folder}: {why}"), highlight=False, soft_wrap=True)
        if written is not None:
            err.print(rich_text(f"wrote {written[0]}" + (f" and {len(written) - 1} plots" if len(written) > 1 else "")),
                      highlight=False, soft_wrap=True)

    @app.command("check")
    def check_cmd(
        run: RunArg,
        reference: ReferenceOpt = None,
        write: Annotated[bool, typer.Option("--write/--no-write", help="write check.md and check.json into the run folder")] = True,
    ) -> None:
        """Check a run against the course, against itself, and against published figures and reference runs.

        Every claim is computed with the checker's own arithmetic from the run's raw records (the recorded HTTP
        exchanges, the measurements' samples, the facts the lessons state, the GGUF's hyperparameters), from whatever
        lessons the run holds, and belongs to one group; the results are counted per group, so a pass and a fail say
        what they are worth.

        The course: its title, decode is memory-bound, width by width (by the verdict check's own fits of lesson 8's
        steps give: a pass where the width waits on memory, inconclusive where it is mixed, a fail where it waits on the
        arithmetic, with the reason), and the course's published figures (the DGX Spark's, from references/). A fail
        here is a finding about this machine and model, not a broken run.

        The run against itself: the server's probabilities equal e^logprob and lesson 4 shows the server's tokens, numpy's
        forward pass gives the server's token, prefill beats decode (its ratio beside the course's 72×), decode slows as
        the context grows, the KV-cache bytes from the GGUF, the samplers re-implemented within their tolerance,
        speculative decoding generates the plain tokens, one streamed event per token and the client's gaps against the
        server's time per token, the ridge point, lesson 6's depth line and the capstone's decode-time model predicting
        what they left out (±15%), lesson 8's verdict per width the one check's own fits give, and one quantity agreeing
        across lessons: the default model's decode at one sequence
        (lessons 4, 5, 5 streamed, 5b, 6 at depth 0, 7 at P = 1, 8) and its prefill of 128 tokens (lessons 7 and 8),
        within their pooled spread and never less than ±10% (lessons minutes apart), else naming the lessons and the settings of
        their server shapes that differ (-c, --parallel, engine, a server of their own, servers taken in turns).

        Sanity checks: bounds any sound run meets (the top eight share at most 1, decode efficiency between 0 and 1,
        the first streamed token after prompt_ms); they are not evidence for the course.

        A reference run: the project's own figures, taken from an earlier recorded run of the default model
        (references/): agreement with the project, not with the course.

        A reference file's figures carry their scope (model, quantization, hardware, engine, server flags) and a
        tolerance; a run outside the scope gets "not applicable" with what differs. --reference uses other files.

        Each claim ends as pass, fail (both numbers and the tolerance), inconclusive (the samples cannot tell) or not
        applicable (with what differs or is missing). Exit status 1 when a claim fails outside the course's group (a
        fail against the course is a finding about this machine, shown and counted, not a broken run).
        Writes check.md and check.json into the run folder.
        """
        out, err = Console(), Console(stderr=True)
        try:
            loaded = load_run(run)
            if not loaded.results:
                raise BytesupError(
                    f"{run} holds no lesson results that can be checked"
                    + (f" ({'; '.join(loaded.problems)})" if loaded.problems else "")
                    + ". Run the lessons into it first (`bytesup run-all --out RUN --resume`), or pass another run folder."
                )
            report = checker.check_run(loaded, reference)
            paths = checker.write_report(report) if write else None
        except BytesupError as exc:
            raise fail(exc) from None
        checker.print_rich(report, out)
        for problem in loaded.problems:
            err.print(f"[yellow]note:[/yellow] {rich_text(problem)}", highlight=False, soft_wrap=True)
        if paths:
            err.print(rich_text(f"wrote {paths[0]} and {paths[1].name}"), highlight=False, soft_wrap=True)
        if report.failed:
            raise typer.Exit(1)

    @app.command("report")
    def report_cmd(
        run: RunArg,
        reference: ReferenceOpt = None,
        run_checks: Annotated[bool, typer.Option("--checks/--no-checks", help=(
            "run `bytesup check` and embed its results (also writes check.md, check.json)"))] = True,
        with_html: Annotated[bool, typer.Option("--html", help=(
            "also write RUN/report.html: the same page, self-contained (plots inline as SVG, no script, nothing fetched)"))] = False,
    ) -> None:
        """Write the run's README.md as one readable page: what ran where, every lesson, the checks.

        The page starts with a summary: the run's date, commit, engine and model, the machine and what the run measured of
        it (its memory bandwidth, lesson 8's decode-time terms), the capstone's verdicts, the checks counted by kind, and
        warnings (skipped or failed lessons with their reasons, a busy machine, failed checks); server flags that do nothing
        on this host say so. Then the lessons' contents, every lesson's tables, measurements and plots in lesson order, the
        results of `bytesup check` and the manifest's details. Open it in any Markdown viewer; plot links point into plots/
        beside it. With --html, report.html beside it holds the same page for a browser, a section per lesson, long tables
        folded, every plot drawn inline from the lesson's JSON: one file that opens offline and prints on paper.
        """
        err = Console(stderr=True)
        try:
            pages, report = write_run_report(run, reference, run_checks, with_html)
        except BytesupError as exc:
            raise fail(exc) from None
        out = Console()
        out.print(rich_text(f"wrote {pages[0]}" + (f" (checks: {report.summary()})" if report else "")), highlight=False, soft_wrap=True)
        for page in pages[1:]:
            out.print(rich_text(f"wrote {page}"), highlight=False, soft_wrap=True)
        if report is not None and report.failed:
            err.print("[yellow]some checks failed: see the Checks section of the page[/yellow]")
