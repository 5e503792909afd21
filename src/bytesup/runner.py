"""The lesson runner: finds lessons, gives each a context, records or replays its HTTP
exchanges, and saves its result into a run folder after each lesson.

A run folder (`outputs/<date>/`) holds `<id>.json`, `<id>.md`, `http/<id>.jsonl`,
`plots/`, `manifest.json` and `README.md`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from . import engine, environment
from .client import LlamaServer, default_base_url
from .errors import BytesupError, RunFolderError, ServerUnreachable
from .escape import md_text, rich_text
from .paths import lessons_dir, outputs_root
from .plots import write_plots
from .render import lesson_md
from .replay import RecordingTransport, ReplayTransport
from .lesson import NOT_INHERITED, LessonContext, Reporter, RunShared
from .options import RunOptions, redact_command, shown_command
from .results import LessonResult
from .runs import MANIFEST_SCHEMA_VERSION, ReplaySource, load_replay, read_manifest

# Kept importable from here for code written against the runner (the lesson API now lives in lesson.py).
__all__ = ["NOT_INHERITED", "LessonContext", "Reporter", "RunShared", "RunOptions", "ReplaySource", "load_replay",
           "read_manifest", "shown_command", "run_lessons"]
from .runfolder import (DISK_FULL, DiskFull, RunLock, Terminated, differences, identity_differences, latest_unfinished,
                        new_run_dir, resume_command, set_aside, signals_raise)
from .storage import dumps, file_sha256, write_json_atomic, write_jsonl_atomic, write_text_atomic

INDEX_MARK = "<!-- bytesup index -->"
LESSON_FILE = re.compile(r"^(\d\d)_[a-z0-9_]+\.py$")


# --- lessons --------------------------------------------------------------------------

def discover_lessons() -> dict[str, Path]:
    folder = lessons_dir()
    if not folder.is_dir():
        return {}
    return {p.stem: p for p in sorted(folder.iterdir()) if LESSON_FILE.match(p.name)}


def load_lesson(lesson_id: str) -> ModuleType:
    lessons = discover_lessons()
    if lesson_id not in lessons:
        raise UnknownLesson(lesson_id, list(lessons))
    spec = importlib.util.spec_from_file_location(f"bytesup_lesson_{lesson_id}", lessons[lesson_id])
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def lesson_title(module: ModuleType) -> str:
    return getattr(module, "TITLE", None) or (module.__doc__ or "").strip().splitlines()[0]


class UnknownLesson(BytesupError):
    exit_code = 2

    def __init__(self, lesson_id: str, valid: list[str]):
        super().__init__(
            f"There is no lesson {lesson_id!r}. Valid lesson ids: {', '.join(valid) or '(none found)'}. "
            "`bytesup lessons` lists them with titles."
        )


# --- options --------------------------------------------------------------------------

def today_folder() -> Path:
    return outputs_root() / datetime.now(timezone.utc).date().isoformat()


# --- the run folder --------------------------------------------------------------------

def run_readme(run_dir: Path, manifest: dict) -> str:
    lines = [INDEX_MARK, f"# bytesup run {md_text(run_dir.name)}", ""]
    host = manifest.get("host", {})
    eng = manifest.get("engine", {})
    model = manifest.get("model", {})
    lines.append(md_text(f"Status: **{manifest.get('status')}** · host {host.get('hostname')} ({host.get('cpu')}, {host.get('cores')} cores)"))
    lines.append(md_text(f"· engine {eng.get('engine', '?')} {eng.get('build', '')} · model {model.get('path', '?')}"))
    lines.append("")
    lines.append("| lesson | status | result |")
    lines.append("|---|---|---|")
    for lid, entry in sorted(manifest.get("lessons", {}).items()):
        link = (f"[{md_text(entry.get('title', lid), cell=True)}]({lid}.md)" if entry.get("status") == "ok"
                else md_text(entry.get("error", "")[:200], cell=True))
        lines.append(f"| `{lid}` | {entry.get('status')} | {link} |")
    return "\n".join(lines) + "\n"


def save_lesson(run_dir: Path, result: LessonResult, exchanges: list[dict]) -> None:
    """Exchanges, plots and Markdown first, the JSON last: a result file means a complete lesson.
    The JSON is made first, so a result that cannot be written (NaN) leaves the folder as it was."""
    dumps(result.to_json(), where=str(run_dir / f"{result.lesson_id}.json"))
    write_jsonl_atomic(run_dir / "http" / f"{result.lesson_id}.jsonl", exchanges)
    write_plots(result, run_dir)
    write_text_atomic(run_dir / f"{result.lesson_id}.md", lesson_md(result))
    write_json_atomic(run_dir / f"{result.lesson_id}.json", result.to_json())


def _engine_facts(url: str, props: dict, models: dict | None) -> dict:
    port = None
    m = re.match(r"https?://[^/:]+:(\d+)", url)
    if m:
        port = int(m.group(1))
    info = engine.read_engine_info(port) if port and re.match(r"https?://(127\.0\.0\.1|localhost)", url) else None
    facts = dict(info) if info else _observed_engine(props)
    facts.update({"url": url, "props": props, "v1_models": models})
    # Prefill reads the weights once per micro-batch: what n_batch and n_ubatch the server runs with.
    from .formulas import batch_sizes

    facts["batching"] = batch_sizes(facts.get("flags"))
    return facts


def _observed_engine(props: dict) -> dict:
    """What /props tells of a server started outside bytesup; flags it does not show stay unknown."""
    build = props.get("build_info")
    n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    slots = props.get("total_slots")
    flags = {}
    if n_ctx and slots:
        flags = {"--ctx-size": str(int(n_ctx) * int(slots)), "--parallel": str(slots)}
    return {"engine": "embedded" if build == "b0-unknown" else "llama-server", "started_by": "not bytesup",
            "build": build, "flags": flags, "flags_source": "observed in /props; other flags unknown"}


def _model_path_from(props: dict, explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    served = props.get("model_path")
    if served and Path(served).is_file():
        return Path(served)
    return None


# --- a server for the run ------------------------------------------------------------------

MODEL_ENV = "BYTESUP_MODEL"


def _server_given(options: RunOptions) -> bool:
    return bool(options.server_url or os.environ.get("BYTESUP_SERVER"))


def _answers(url: str, api_key: str | None, timeout: float) -> bool:
    """False only when nothing listens at `url`. A server that answers, even with an error, is
    used as it is (the probe that follows reports what is wrong with it)."""
    with LlamaServer(url, api_key, timeout=timeout) as probe:
        try:
            probe.health()
        except ServerUnreachable:
            return False
        except BytesupError:
            return True
    return True


def model_for_run(options: RunOptions, console: Console) -> Path:
    """The GGUF a server started for the run loads: --model, else $BYTESUP_MODEL (a GGUF file or a
    model preset), else the default model, built or fetched the first time it is needed."""
    from . import models

    if options.model is not None:
        return options.model
    wanted = os.environ.get(MODEL_ENV)
    if wanted and Path(wanted).expanduser().is_file():
        return Path(wanted).expanduser()
    name = wanted or models.DEFAULT_MODEL
    with _spinner(console, f"model {name}: building or fetching it (once; later runs reuse the file)"):
        try:
            return models.ensure_model(name)
        except KeyError:
            raise BytesupError(
                f"{MODEL_ENV}={wanted} is neither a GGUF file nor a model preset. Set it to a .gguf path or "
                "a preset from `bytesup model build --list`, or unset it to use the default model."
            ) from None


def start_run_server(url: str, options: RunOptions, console: Console, cleanup: contextlib.ExitStack) -> engine.StartedServer:
    """Start a server for this run on a free port (so it never meets another run's or the user's);
    `cleanup` stops it and removes its state folder when the run ends, also on Ctrl-C or SIGTERM."""
    model = model_for_run(options, console)  # SIGTERM already raises like Ctrl-C here (signals_raise)
    port = engine.free_port()
    cleanup.callback(_stop_run_server, port)  # before starting: a start cut short is stopped too
    with _spinner(console, f"starting a server on {model.name}"):
        started = engine.start_server(model, ["--port", str(port)])
    console.print(escape(
        f"No server answers at {url}: started the {started.info['engine']} engine on {model.name} at {started.url} "
        "for this run; it stops when the run ends (--no-start-server: stop with an error instead)."
    ), highlight=False, soft_wrap=True)
    return started


@contextlib.contextmanager
def _spinner(console: Console, text: str) -> Iterator[None]:
    """A spinner with the time spent, on a terminal only (elsewhere it would leave blank lines)."""
    if not console.is_terminal:
        yield
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as progress:
        progress.add_task(escape(text), total=None)
        yield


def _stop_run_server(port: int) -> None:
    # The folder (pid, log, engine.json) belonged to this run only; the manifest keeps the facts.
    # A server that failed to start has no pid file left: its log stays for the error to point at.
    if engine.stop_server(port):
        shutil.rmtree(engine.state_dir_for(port), ignore_errors=True)


# --- running ---------------------------------------------------------------------------

def run_lessons(lesson_ids: list[str], options: RunOptions, console: Console | None = None) -> int:
    """Run lessons into a run folder. Returns the exit code (0: all ok). A server started for the
    run (`start_run_server`) is stopped when the run ends, however it ends."""
    with contextlib.ExitStack() as cleanup:
        return _run_lessons(lesson_ids, options, console or Console(stderr=True), cleanup)


def _run_lessons(lesson_ids: list[str], options: RunOptions, console: Console, cleanup: contextlib.ExitStack) -> int:
    available = discover_lessons()
    for lid in lesson_ids:
        if lid not in available:
            raise UnknownLesson(lid, list(available))
    if options.replay is None:
        check_server_url(options.server_url or default_base_url())
    run_dir, created = choose_run_dir(options, console)
    options.run_dir = run_dir
    lock = RunLock(run_dir, redact_command(options.command), created=created)
    taken_over = lock.acquire()
    try:
        if taken_over:
            console.print(f"[yellow]{rich_text(taken_over)}[/yellow]", highlight=False)
        with signals_raise():
            return _run_locked(run_dir, lesson_ids, options, console, cleanup)
    finally:
        lock.release()


def check_server_url(url: str) -> None:
    if not re.match(r"^https?://[^/]", url):
        raise BytesupError(
            f"The server address {url!r} is not a URL: it needs a scheme, as in "
            f"`--server http://{url.split('://')[-1] or '127.0.0.1:8099'}` (or set BYTESUP_SERVER the same way)."
        )


def choose_run_dir(options: RunOptions, console: Console) -> tuple[Path, bool]:
    """--out when given; else --resume continues the latest unfinished run under outputs/, and a
    new run gets the next free outputs/<date>[.N]. Returns (folder, created for this run)."""
    if options.out is not None:
        run_dir = options.out.resolve()
        if run_dir.exists() and not run_dir.is_dir():
            raise RunFolderError(f"{run_dir} exists and is not a folder. Choose another --out.")
        return run_dir, False
    root = outputs_root()
    if options.resume:
        found = latest_unfinished(root)
        if found is None:
            raise RunFolderError(
                f"--resume found no unfinished run under {root} to continue. Start a new run without "
                "--resume, or name the folder to continue with --out DIR."
            )
        console.print(f"Resuming {rich_text(found.resolve())}, the latest unfinished run.", highlight=False)
        return found.resolve(), False
    today = today_folder()
    run_dir = new_run_dir(root, today.name).resolve()
    if run_dir.name != today.name:
        console.print(f"Writing to {rich_text(run_dir)} ({rich_text(today.name)} already holds a run).", highlight=False)
    return run_dir, True


def _run_locked(run_dir: Path, lesson_ids: list[str], options: RunOptions, console: Console,
                cleanup: contextlib.ExitStack) -> int:
    manifest = read_manifest(run_dir) or {}
    entries = manifest.get("lessons", {})
    done = {lid for lid, e in entries.items() if e.get("status") == "ok"}

    # Refuse before any request is sent: nothing in the folder changes.
    todo = []
    clashes = []
    for lid in lesson_ids:
        exists = (run_dir / f"{lid}.json").exists()
        if exists and options.resume and lid in done:
            continue
        # A result file the manifest marks failed or interrupted is not a result: it is re-run.
        if exists and (lid in done or lid not in entries) and not options.force:
            clashes.append(lid)
        todo.append(lid)
    if clashes:
        if options.resume:
            raise RunFolderError(
                f"{run_dir} holds results for {', '.join(clashes)} that its manifest does not record. Nothing "
                "was changed. Replace them with --force, or write to another folder with --out DIR."
            )
        raise RunFolderError(
            f"{run_dir} already holds results for {', '.join(clashes)}. Nothing was changed. "
            "Write to another folder with --out DIR, continue an interrupted run with --resume, "
            "or replace those results with --force."
        )

    replay_manifest = read_manifest(options.replay) if options.replay else None
    if options.replay is not None and replay_manifest is None and not any((options.replay / f"{l}.json").exists() for l in todo):
        raise RunFolderError(f"{options.replay} is not a bytesup run folder (no manifest.json, no lesson results). Pass a folder written by `bytesup run`.")

    if options.model is not None and options.replay is None and not options.model.is_file():
        raise BytesupError(
            f"--model {options.model} is not a file here. Pass the GGUF the server runs (the lessons read "
            "its header and weights), or leave --model out to use the path the server reports in /props."
        )
    url = options.server_url or default_base_url()
    props: dict = {}
    models: dict | None = None
    started_for_run = False
    if options.replay is None and todo:
        if options.start_server and not _server_given(options) and not _answers(url, options.api_key, options.timeout):
            url = start_run_server(url, options, console, cleanup).url
            started_for_run = True
        with LlamaServer(url, options.api_key, timeout=options.timeout) as probe:
            probe.health()
            props = probe.props().model_dump(mode="json")
            try:
                models = probe.models().model_dump(mode="json")
            except BytesupError:
                models = None
        if options.model is not None and not options.model_mismatch_ok:
            check_model_matches(options.model, models)
    model_path = _model_path_from(props, options.model)

    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if options.replay is not None and replay_manifest is not None:
        base = {k: replay_manifest.get(k) for k in ("host", "engine", "model", "packages", "repository", "host_bandwidth")
                if k in replay_manifest or k != "host_bandwidth"}
        base["replayed_from"] = str(options.replay)
    else:
        base = {
            "host": environment.host_facts(),
            "packages": environment.package_versions(),
            "repository": environment.repository_state(),
            "engine": {**_engine_facts(url, props, models), "started_for_run": started_for_run} if todo else manifest.get("engine", {}),
            "model": ({"path": str(model_path), **environment.file_digest(model_path)} if model_path and model_path.is_file() else
                      {"path": str(model_path) if model_path else props.get("model_path"), "readable_here": False}),
        }
    base["options"] = {"repeat": options.repeat, "lesson_options": options.lesson_options}

    # Lessons kept from earlier must have measured what this run measures.
    kept = done - set(todo)
    if todo and kept and options.replay is None and not options.force:
        diffs = identity_differences(manifest, base)
        if diffs:
            raise RunFolderError(
                f"{run_dir} holds lessons ({', '.join(sorted(kept))}) measured with another configuration than "
                f"this run's: {'; '.join(diffs)}. Nothing was changed. Resume against the same server, model and "
                "settings, write this run to another folder with --out DIR, or mix them anyway with --force."
            )

    manifest.update({
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "kind": "bytesup-run",
        "date": run_dir.name,
        "created_at": manifest.get("created_at", now),
        "updated_at": now,
        "command": redact_command(options.command),
        "status": "incomplete",
        "load_average_before": environment.load_average(),
        # With nothing left to run, the facts recorded when the lessons ran stay as they were.
        **(base if todo or "host" not in manifest else {}),
    })
    lessons_state = manifest.setdefault("lessons", {})
    for lid in todo:
        lessons_state[lid] = {"status": "pending", "title": lesson_title(load_lesson(lid))}

    readme = run_dir / "README.md"
    had_report = readme.is_file() and INDEX_MARK not in readme.read_text(encoding="utf-8")
    resume = resume_command(options.command, run_dir)

    def save_manifest() -> None:
        manifest["updated_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        try:
            write_json_atomic(run_dir / "manifest.json", manifest)
            if not had_report:  # the one-page report (`bytesup report`) is refreshed at the end instead
                write_text_atomic(readme, run_readme(run_dir, manifest))
        except OSError as exc:
            if exc.errno in DISK_FULL:
                raise DiskFull(run_dir, None, resume) from None
            raise RunFolderError(f"Could not write the manifest of {run_dir}: {exc.strerror or exc}. "
                                 "Check that the folder is writable, then continue with "
                                 f"`{resume}`.") from None

    run_dir.mkdir(parents=True, exist_ok=True)
    save_manifest()
    shared = RunShared(manifest, save_manifest, replay_manifest, replaying=options.replay is not None)

    identity_cache: dict[str, Any] = {}

    def identity() -> dict:
        if not identity_cache:
            eng = manifest.get("engine", {})
            mdl = manifest.get("model", {})
            identity_cache.update({
                "model": {"file": Path(mdl.get("path") or "unknown").name, "size_bytes": mdl.get("size_bytes"),
                          "sha256": mdl.get("sha256"), "name": Path(mdl.get("path") or "unknown").stem},
                "server": {"engine": eng.get("engine"), "build": eng.get("build"), "flags": eng.get("flags")},
            })
        return identity_cache

    build = (manifest.get("engine") or {}).get("build") or props.get("build_info")
    failures = 0
    interrupted: KeyboardInterrupt | None = None
    disk_full: DiskFull | None = None
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        for lid in todo:
            module = load_lesson(lid)
            title = lesson_title(module)
            sink: list[dict] = []
            client: LlamaServer | None = None
            reporter = Reporter(progress, lid)
            entry = lessons_state[lid]
            # The commit per lesson too: a resumed run may hold lessons made by different code.
            entry.update({"status": "running", "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          "commit": (manifest.get("repository") or {}).get("commit")})
            try:
                save_manifest()
                replay = None
                if options.replay is not None:
                    replay = load_replay(options.replay, lid, (replay_manifest or {}).get("lessons", {}).get(lid, {}),
                                         options.allow_modified)
                    client = LlamaServer("http://replay", transport=ReplayTransport(replay.exchanges, "main", sink))
                else:
                    client = LlamaServer(url, options.api_key, timeout=options.timeout,
                                         transport=RecordingTransport(sink, "main"), build=build)
                ctx = LessonContext(lid, title, server=client, options=options, model_path=model_path,
                                    sink=sink, replay=replay, progress=reporter, shared=shared)
                entry["started_at"] = ctx.started_at
                ident = ctx.host("identity", identity)
                ctx.identity = ident
                result = module.main(ctx)
                save_lesson(run_dir, result, sink)
                entry.update({"status": "ok", "finished_at": result.finished_at, "json": f"{lid}.json", "markdown": f"{lid}.md",
                              "http_sha256": file_sha256(run_dir / "http" / f"{lid}.jsonl")})
                for key in ("error", "traceback", "failed_exchanges", "set_aside", "replay_differences"):
                    entry.pop(key, None)
                console.print(f"[green]✓[/green] {lid}: {rich_text(title)}")
                if replay is not None:
                    diffs = differences(replay.recorded, result.to_json())
                    if diffs:
                        entry["replay_differences"] = diffs
                        console.print(f"[yellow]! {lid}: the replayed result differs from the recorded {lid}.json "
                                      f"(the recording or the lesson changed):[/yellow] {rich_text('; '.join(diffs))}", highlight=False)
            except KeyboardInterrupt as exc:
                how = f"stopped by {exc.args[0]}" if isinstance(exc, Terminated) else "stopped by Ctrl-C"
                entry.update({"status": "interrupted", "error": f"{how} before the lesson finished"})
                interrupted = exc
            except OSError as exc:
                failures += 1
                if exc.errno not in DISK_FULL:
                    entry.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
                    console.print(f"[red]✗ {lid} failed with an unexpected error:[/red] {rich_text(f'{type(exc).__name__}: {exc}')}")
                else:
                    disk_full = DiskFull(exc.filename or run_dir, lid, resume)
                    entry.update({"status": "failed", "error": str(disk_full)})
            except BytesupError as exc:
                failures += 1
                entry.update({"status": "failed", "error": str(exc)})
                console.print(f"[red]✗ {lid} failed:[/red] {rich_text(exc)}", highlight=False)
            except Exception as exc:  # a bug in a lesson must not lose the other lessons' results
                failures += 1
                entry.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
                console.print(f"[red]✗ {lid} failed with an unexpected error:[/red] {rich_text(f'{type(exc).__name__}: {exc}')}")
            finally:
                if client is not None:
                    client.close()
                reporter.done()
                if entry["status"] != "ok":
                    _keep_failed(run_dir, lid, entry, sink)
                try:
                    save_manifest()
                except DiskFull as exc:
                    disk_full = disk_full or exc
            if interrupted is not None or disk_full is not None:
                break

    # The run's bandwidth again after its decode work, unless a lesson (the capstone) took it already.
    record = manifest.get("host_bandwidth") or {}
    if options.replay is None and record.get("before") and not record.get("after") and not interrupted:
        try:
            shared.bandwidth_after()
        except Exception as exc:  # a failed second reading must not lose the run
            record["after_error"] = f"{type(exc).__name__}: {exc}"
    statuses = [e.get("status") for e in lessons_state.values()]
    manifest["status"] = "complete" if all(s == "ok" for s in statuses) else "incomplete"
    manifest["load_average_after"] = environment.load_average()
    try:
        save_manifest()
    except DiskFull as exc:
        disk_full = disk_full or exc
    if disk_full is not None:
        raise disk_full
    if had_report:
        from .report import write_run_report

        write_run_report(run_dir, None, run_checks=(run_dir / "check.json").exists())
    print_summary(console, run_dir, manifest, todo, resume)
    if interrupted is not None:
        return 128 + interrupted.signum if isinstance(interrupted, Terminated) else 130
    return 1 if failures else 0


def _keep_failed(run_dir: Path, lesson_id: str, entry: dict, sink: list[dict]) -> None:
    """A lesson that did not finish: its earlier files go to stale/ (a result is replaced only by a
    successful one), and its exchanges so far are kept in http/<id>.failed.jsonl for diagnosis."""
    try:
        moved = set_aside(run_dir, lesson_id)
        if moved is not None:
            entry["set_aside"] = str(moved.relative_to(run_dir))
        if sink:
            write_jsonl_atomic(run_dir / "http" / f"{lesson_id}.failed.jsonl", sink)
            entry["failed_exchanges"] = f"http/{lesson_id}.failed.jsonl"
    except OSError:
        pass  # a full disk is reported by the manifest's save; the lesson's status says what happened


def check_model_matches(model: Path, models: dict | None) -> None:
    """--model must be the file the server serves: same parameter count and tensor bytes as the
    served model's `meta` in /v1/models (where the server lists them)."""
    from .gguf_read import read_model_info

    data = (models or {}).get("data") or []
    meta = (data[0].get("meta") if data and isinstance(data[0], dict) else None) or {}
    served_params, served_bytes = meta.get("n_params"), meta.get("size")
    if served_params is None and served_bytes is None:
        return
    info = read_model_info(model)
    mine = {"parameters": info["n_params"], "tensor bytes": info["tensor_bytes"]}
    served = {"parameters": served_params, "tensor bytes": served_bytes}
    diffs = [f"{k} {mine[k]:,} here, {served[k]:,} served" for k in mine if served[k] is not None and served[k] != mine[k]]
    if diffs:
        raise BytesupError(
            f"--model {model} is not the model the server serves ({data[0].get('id', '?')}): {'; '.join(diffs)}. "
            "The lessons would mix numbers of two models. Pass the GGUF the server runs, leave --model out "
            "to use the file the server reports, or go on anyway with --model-mismatch-ok."
        )


def print_summary(console: Console, run_dir: Path, manifest: dict, ran: list[str], resume: str | None = None) -> None:
    from rich.table import Table as RichTable

    if not ran:
        console.print(f"Nothing to run: every lesson asked for is already saved in {rich_text(run_dir)}.", highlight=False)
        return

    table = RichTable(title=f"run folder {rich_text(run_dir)}")
    table.add_column("lesson")
    table.add_column("status")
    table.add_column("files / error")
    for lid in ran:
        e = manifest["lessons"][lid]
        color = {"ok": "green", "failed": "red"}.get(e["status"], "yellow")
        table.add_row(lid, f"[{color}]{e['status']}[/{color}]", f"{lid}.json, {lid}.md" if e["status"] == "ok" else rich_text(e.get("error", "")[:160]))
    console.print(table)
    if manifest["status"] != "complete":
        command = resume or resume_command(manifest.get("command") or [], run_dir)
        console.print(f"The run is incomplete: `{rich_text(command)}` continues it.", highlight=False, soft_wrap=True)
