"""The lesson runner: runs lessons into a run folder, one after the other. For each lesson it gives
a `LessonContext` (lesson.py) on a recording or replaying client, saves the result, and keeps the
run's manifest up to date; the folder (run/folder.py), the server (run/server.py) and the summary
(run/summary.py) are other modules' jobs.

A run folder (`outputs/<date>/`) holds `<id>.json`, `<id>.md`, `http/<id>.jsonl`,
`plots/`, `manifest.json` and `README.md`.
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from bytesup.course import busy
from bytesup.host import environment, load, quiet, spent
from bytesup.run.lessons import (UnknownLesson, discover_lessons, lesson_title, load_lesson, options_of, times_the_server,
                                 with_checked_options)
from bytesup.llama.client import BareClient, LlamaServer, default_base_url
from bytesup.errors import BytesupError, LessonSkipped, RunFolderError, ServerTimeout
from bytesup.llama.placement import is_loopback
from bytesup.store.escape import rich_text
from bytesup.lesson import LessonContext, Reporter, RunShared
from bytesup.options import RunOptions, redact_command
from bytesup.llama.recording import RecordingTransport, ReplayTransport
from bytesup.run.report import write_run_report
from bytesup.paths import REPO_ROOT, outputs_root
from bytesup.run.folder import (
    DISK_FULL,
    INDEX_MARK,
    DiskFull,
    RunLock,
    StoppedBeforeLessons,
    Terminated,
    choose_run_dir,
    die_with_parent,
    differences,
    estimate,
    first_request_estimate,
    identity_differences,
    keep_failed,
    resume_command,
    run_readme,
    save_lesson,
    raise_if_stopping,
    signals_raise,
)
from bytesup.store.manifest import (MANIFEST_KIND, MANIFEST_SCHEMA_VERSION, Engine, Host, LessonEntry, Manifest, ModelFile,
                                    ModelsMade, RecordedOptions, Repository, TimeSplit)
from bytesup.store.results import LessonResult
from bytesup.store.runs import load_replay, read_manifest
from bytesup.run.server import (
    ServerChanged,
    answers,
    check_model_matches,
    check_server_url,
    confirm_same_server,
    engine_facts,
    model_path_from,
    model_wanted,
    probe,
    server_given,
    start_run_server,
)
from bytesup.files import file_sha256, write_json_atomic, write_text_atomic
from bytesup.run.summary import print_summary
from bytesup.run.models import is_local, models_first
from bytesup.run import engines, harness, pace

# Set by scripts/run_course.sh: the run stops (as on SIGTERM) when `make run` dies, however it dies.
DIE_WITH_PARENT_ENV = "BYTESUP_DIE_WITH_PARENT"



@dataclass(frozen=True)
class RunEnd:
    """How a run ended: its exit code (0: every lesson ok or skipped) and the folder it wrote to."""

    exit_code: int
    run_dir: Path


def run_into_folder(lesson_ids: list[str], options: RunOptions, console: Console | None = None) -> RunEnd:
    """Run lessons into a run folder; returns the exit code and the folder. A server started for the
    run (`start_run_server`) is stopped when the run ends, however it ends. `options` is read, never written."""
    # The signal handlers cover the cleanup too: a second Ctrl-C never interrupts stopping the run's server.
    # A stop before the lessons began (they handle their own) is one paragraph once the cleanup is done.
    try:
        with signals_raise(), contextlib.ExitStack() as cleanup:
            if os.environ.get(DIE_WITH_PARENT_ENV):
                die_with_parent()
            return _run_lessons(lesson_ids, options, console or Console(stderr=True), cleanup)
    except KeyboardInterrupt as exc:
        raise StoppedBeforeLessons(exc) from None


def run_lessons(lesson_ids: list[str], options: RunOptions, console: Console | None = None) -> int:
    """`run_into_folder`'s exit code alone (0: every lesson ok or skipped)."""
    return run_into_folder(lesson_ids, options, console).exit_code


def _run_lessons(lesson_ids: list[str], options: RunOptions, console: Console, cleanup: contextlib.ExitStack) -> RunEnd:
    available = discover_lessons()
    for lid in lesson_ids:
        if lid not in available:
            raise UnknownLesson(lid, list(available))
    twice = sorted({lid for lid in lesson_ids if lesson_ids.count(lid) > 1})
    if twice:  # a lesson named again would replace its own result: each runs once, in the order first named
        lesson_ids = list(dict.fromkeys(lesson_ids))
        console.print(rich_text(f"{', '.join(twice)} {'is' if len(twice) == 1 else 'are'} named more than once on the "
                                f"command line; {'it runs' if len(twice) == 1 else 'each runs'} once."), highlight=False)
    # A bad lesson option, or one no lesson of the run takes, stops the run here, before its folder and any request.
    options = with_checked_options(lesson_ids, options)
    if options.replay is None:
        check_server_url(options.server_url or default_base_url())
    run_dir, created = choose_run_dir(options, console)
    lock = RunLock(run_dir, redact_command(options.command), created=created)
    taken_over = lock.acquire()
    try:
        if taken_over:
            console.print(f"[yellow]{rich_text(taken_over)}[/yellow]", highlight=False)
        return RunEnd(_run_locked(run_dir, lesson_ids, options, console, cleanup), run_dir)
    finally:
        lock.release()


# --- before any request: what to run, and refusals ------------------------------------------------

def lessons_to_run(run_dir: Path, lesson_ids: list[str], options: RunOptions, entries: dict[str, LessonEntry]) -> list[str]:
    """The lessons this run (re)makes; a result it would overwrite without --force stops it here,
    before any request is sent, with nothing in the folder changed."""
    done = {lid for lid, e in entries.items() if e.status == "ok"}
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
    return todo


def _replay_manifest(options: RunOptions, todo: list[str]) -> Manifest | None:
    if options.replay is None:
        return None
    replay_manifest = read_manifest(options.replay)
    if replay_manifest is None and not any((options.replay / f"{lid}.json").exists() for lid in todo):
        raise RunFolderError(f"{options.replay} is not a bytesup run folder (no manifest.json, no lesson results). "
                             "Pass a folder written by `bytesup run`.")
    return replay_manifest


@dataclass
class ServerSeen:
    """The run's server as probed once before the lessons (nothing when replaying or nothing to run)."""

    url: str
    props: dict[str, Any]
    models: dict | None = None
    started_for_run: bool = False
    models_made: ModelsMade | None = None  # the models made before the first lesson (run/models.py)
    start_s: float | None = None  # the run's own server's start, in seconds


def _server_for_run(options: RunOptions, todo: list[str], console: Console, cleanup: contextlib.ExitStack) -> ServerSeen:
    if options.model is not None and options.replay is None and not options.model.is_file():
        raise BytesupError(
            f"--model {options.model} is not a file here. Pass the GGUF the server runs (the lessons read "
            "its header and weights), or leave --model out to use the path the server reports in /props."
        )
    seen = ServerSeen(url=options.server_url or default_base_url(), props={})
    if options.own_server and server_given(options):
        raise BytesupError("--own-server starts the run's own server, so it cannot be combined with --server or "
                           "BYTESUP_SERVER. Drop one of them.")
    if options.replay is None and todo:
        if options.own_server or (options.start_server and not server_given(options)
                                  and not answers(seen.url, options)):
            wanted = model_wanted(options)
            made = models_first(options, todo, console, wanted, local=True)
            seen.models_made = made.record()
            began = time.monotonic()
            model = made.paths[wanted] if isinstance(wanted, str) else wanted
            seen.url = start_run_server(seen.url, options, console, cleanup, model).url
            seen.start_s = round(time.monotonic() - began, 2)
            seen.started_for_run = True
        seen.props, seen.models = probe(seen.url, options)
        if options.model is not None and not options.model_mismatch_ok:
            check_model_matches(options.model, seen.models)
        if seen.models_made is None:
            served = model_path_from(seen.props, options.model)
            seen.models_made = models_first(options, todo, console, served, is_local(seen.url)).record()
    return seen


def manifest_facts(options: RunOptions, replay_manifest: Manifest | None, seen: ServerSeen, model_path: Path | None,
                   earlier: Manifest, todo: list[str]) -> Manifest:
    """What the manifest records of the host, engine, model and options (a replay: the recorded run's), as the
    fields of a Manifest that this run sets."""
    if options.replay is not None and replay_manifest is not None:
        recorded = replay_manifest.model_copy(deep=True)
        facts = Manifest(host=recorded.host, engine=recorded.engine, model=recorded.model, packages=recorded.packages,
                         repository=recorded.repository, replayed_from=str(options.replay))
        if recorded.host_bandwidth:
            facts.host_bandwidth = recorded.host_bandwidth
    else:
        engine_seen = {**engine_facts(seen.url, seen.props, seen.models), "started_for_run": seen.started_for_run}
        model = ({"path": str(model_path), **environment.file_digest(model_path)} if model_path and model_path.is_file() else
                 {"path": str(model_path) if model_path else seen.props.get("model_path"), "readable_here": False})
        facts = Manifest(
            host=Host.model_validate(environment.host_facts()),
            packages=environment.package_versions(),
            repository=Repository.model_validate(environment.repository_state()),
            engine=Engine.model_validate(engine_seen) if todo else earlier.engine,
            model=ModelFile.model_validate(model),
        )
    facts.options = RecordedOptions(repeat=options.repeat, lesson_options=dict(options.lesson_options))
    return facts


class ManifestFile:
    """The run's manifest.json (and, until a report replaces it, its README.md index), saved after every change."""

    def __init__(self, run_dir: Path, manifest: Manifest, resume: str):
        self.run_dir = run_dir
        self.manifest = manifest
        self.resume = resume
        readme = run_dir / "README.md"
        self.readme = readme
        self.had_report = readme.is_file() and INDEX_MARK not in readme.read_text(encoding="utf-8")

    def save(self) -> None:
        self.manifest.updated_at = environment.utc_now()
        try:
            write_json_atomic(self.run_dir / "manifest.json", self.manifest.to_json())
            if not self.had_report:  # the one-page report (`bytesup report`) is refreshed at the end instead
                write_text_atomic(self.readme, run_readme(self.run_dir, self.manifest))
        except OSError as exc:
            if exc.errno in DISK_FULL:
                raise DiskFull(self.run_dir, None, self.resume) from None
            raise RunFolderError(f"Could not write the manifest of {self.run_dir}: {exc.strerror or exc}. "
                                 "Check that the folder is writable, then continue with "
                                 f"`{self.resume}`.") from None


def lesson_identity(manifest: Manifest) -> dict[str, Any]:
    """The model and server every lesson's result names (recorded as the host value `identity`)."""
    eng, mdl = manifest.engine, manifest.model
    return {
        "model": {"file": Path(mdl.path or "unknown").name, "size_bytes": mdl.size_bytes,
                  "sha256": mdl.sha256, "name": Path(mdl.path or "unknown").stem},
        "server": {"engine": eng.engine, "build": eng.build, "flags": eng.flags},
    }


# --- the machine's load around each lesson --------------------------------------------------------

def outside_servers(seen: ServerSeen, options: RunOptions) -> list[int]:
    """The pids of the run's server where it runs here but the run did not start it (its CPU time is the run's own,
    not another process's load); [] otherwise."""
    if options.replay is not None or seen.started_for_run:
        return []
    url = urlparse(seen.url)
    return load.listening_pids(url.port) if url.port and is_loopback(url.hostname or "") else []


def record_machine_load(ctx: LessonContext, watch: load.Watch | None, result: LessonResult,
                        drift_before: dict | None, paced: dict[str, list[float]] | None = None) -> None:
    """The lesson's readings of the machine's load (bytesup.course.busy) as its host value, which the page and
    `bytesup check` read, with the run's pace before and after it where taken (bytesup.run.pace); a replay keeps the
    recorded run's, and a run recorded before the readings has none."""
    def measure() -> dict:
        assert watch is not None  # a live run always has its watch
        drift = ctx.run_bandwidth_drift()
        extra: dict[str, Any] = {"pace": paced} if paced else {}
        if drift and drift != drift_before:  # this lesson took the run's second bandwidth reading
            extra["drift"] = {"change": drift.get("change"), "ranges_overlap": drift.get("ranges_overlap")}
        extra["collapsed"] = busy.collapses([m.model_dump(mode="json") for m in result.measurements])
        return watch.record("after", extra)

    record = ctx.host_since(busy.HOST_VALUE, measure)
    if record is not None:
        result.host_values[busy.HOST_VALUE] = record


def timeout_on_machine(exc: BytesupError, watch: load.Watch | None) -> BytesupError:
    """A request that timed out, said with what the run read of the machine meanwhile (busy or not)."""
    if not isinstance(exc, ServerTimeout) or watch is None:
        return exc
    try:
        verdict = watch.verdict()
    except Exception:  # the reading must not hide the timeout
        return exc
    return exc.on_machine(verdict.sentence()) if verdict is not None else exc


def time_split(start: float, ledger_at: int, sink: list[dict]) -> TimeSplit:
    """A lesson's wall time since `start` (time.perf_counter()) split by part: what the ledger timed since
    `ledger_at`, and the exchanges `sink` (a StampedList) recorded."""
    requests = sink.request_intervals() if isinstance(sink, spent.StampedList) else []
    parts = spent.split(start, time.perf_counter(), [*spent.since(ledger_at), *requests])
    return TimeSplit(**parts.seconds(), requests=len(requests))


# --- the run ---------------------------------------------------------------------------------------

def _run_locked(run_dir: Path, lesson_ids: list[str], options: RunOptions, console: Console,
                cleanup: contextlib.ExitStack) -> int:
    manifest = read_manifest(run_dir) or Manifest()
    entries = manifest.lessons
    done = {lid for lid, e in entries.items() if e.status == "ok"}
    todo = lessons_to_run(run_dir, lesson_ids, options, entries)
    replay_manifest = _replay_manifest(options, todo)
    seen = _server_for_run(options, todo, console, cleanup)
    model_path = model_path_from(seen.props, options.model, console)
    now = environment.utc_now()
    base = manifest_facts(options, replay_manifest, seen, model_path, manifest, todo)

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

    manifest.schema_version = MANIFEST_SCHEMA_VERSION
    manifest.kind = MANIFEST_KIND
    manifest.date = run_dir.name
    manifest.created_at = manifest.created_at or now
    manifest.updated_at = now
    manifest.command = redact_command(options.command)
    manifest.status = "incomplete"
    manifest.load_average_before = environment.load_average()
    # With nothing left to run, the facts recorded when the lessons ran stay as they were.
    if todo or not manifest.host:
        for name in base.model_fields_set:
            setattr(manifest, name, getattr(base, name))
    lessons_state = manifest.lessons
    for lid in todo:
        lessons_state[lid] = LessonEntry(status="pending", title=lesson_title(load_lesson(lid)))
    if seen.models_made is not None:  # live: what was made before the first lesson, and the run's server's start
        manifest.models_made, manifest.server_start_s = seen.models_made, seen.start_s

    resume = resume_command(options.command, run_dir)
    manifest_file = ManifestFile(run_dir, manifest, resume)
    save_manifest = manifest_file.save

    run_dir.mkdir(parents=True, exist_ok=True)
    save_manifest()
    shared = RunShared(manifest, save_manifest, replay_manifest, replaying=options.replay is not None)

    identity_cache: dict[str, Any] = {}

    def identity() -> dict:
        if not identity_cache:
            identity_cache.update(lesson_identity(manifest))
        return identity_cache

    first_timed = None
    if todo and options.replay is None:
        line = estimate(outputs_root(), manifest, todo, skip=run_dir)
        console.print(rich_text(line), highlight=False)
        if line.startswith("estimate: none"):  # no earlier run timed these: from their request counts instead
            first_timed = first_request_estimate(list(dict.fromkeys([outputs_root(), REPO_ROOT / "outputs"])),
                                                 manifest, todo, lambda text: console.print(rich_text(text), highlight=False),
                                                 skip=run_dir)
        if not engines.skipped_by_env():  # the embedded engine against the native build on this CPU, once
            gap = manifest.engine_gap = engines.compare(options, model_path)
            console.print(rich_text(gap.sentence or f"engines not compared: {gap.skipped}"), highlight=False,
                          soft_wrap=True)
            save_manifest()
    build = manifest.engine.build or seen.props.get("build_info")
    servers_here = outside_servers(seen, options)
    # The machine's pace before and after each lesson that times the server, in a live run of several
    # (bytesup.run.pace): the reading after one such lesson is the reading before the next, where none came between.
    pacer = (cleanup.enter_context(contextlib.closing(BareClient(seen.url, options.api_key, options.timeout)))
             if options.replay is None and len(todo) > 1 and not pace.skipped_by_env() else None)
    last_pace: dict[str, list[float]] | None = None
    failures = 0
    interrupted: KeyboardInterrupt | None = None
    disk_full: DiskFull | None = None
    server_changed: ServerChanged | None = None
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    cleanup.callback(quiet.thaw_heap)  # each lesson freezes what came before it (host.quiet.freeze_heap)
    with Progress(*columns, console=console, transient=True) as progress:
        for lid in todo:
            module = load_lesson(lid)
            title = lesson_title(module)
            sink: list[dict] = (first_timed.sink(lid) if first_timed is not None and not first_timed.done
                                else spent.StampedList())  # when each exchange ended: the time split's requests
            client: LlamaServer | None = None
            reporter = Reporter(progress, lid)
            watch: load.Watch | None = None
            entry = lessons_state[lid]
            # The commit per lesson too: a resumed run may hold lessons made by different code.
            entry.status, entry.started_at, entry.commit = "running", environment.utc_now(), manifest.repository.commit
            began = time.monotonic()
            ledger_at, split_from = spent.mark(), time.perf_counter()
            try:
                quiet.freeze_heap()  # no collection walks the earlier lessons' objects inside a timed request
                save_manifest()
                replay = None
                if options.replay is not None:
                    replay = load_replay(options.replay, lid, replay_manifest.lessons.get(lid) if replay_manifest else None,
                                         options.allow_modified)
                    client = options.client("http://replay", ReplayTransport(replay.exchanges, "main", sink), with_key=False)
                else:
                    # The server must still serve what it served at the start, before and after the lesson.
                    confirm_same_server(seen.url, options, seen.props, seen.models, lid)
                    client = options.client(seen.url, RecordingTransport(sink, "main"), build=build)
                ctx = LessonContext(lid, title, server=client, run=options, model_path=model_path, sink=sink, replay=replay,
                                    progress=reporter, shared=shared, options_type=options_of(module),
                                    stop_check=raise_if_stopping)
                entry.started_at = ctx.started_at
                ident = ctx.host("identity", identity)
                ctx.identity = ident
                drift_before = ctx.run_bandwidth_drift()
                if options.replay is None:
                    watch = ctx.load_watch = load.Watch(os.cpu_count(), ctx.server_threads(), lambda: servers_here)
                    watch.start()
                pacing = pacer if pacer is not None and times_the_server(module) else None
                pace_before, last_pace = last_pace, None
                if pacing is not None and pace_before is None:  # the first such lesson, or the one before took none
                    pace_before = pace.take(pacing)
                try:
                    result = module.main(ctx)
                except LessonSkipped as exc:  # raised from inside the lesson: its page says why, as ctx.skip's does
                    result = ctx.skip(exc.reason, exc.command)
                last_pace = pace.take(pacing) if pacing is not None else None
                paced = pace.around(pace_before, last_pace)
                record_machine_load(ctx, watch, result, drift_before, paced)
                raise_if_stopping()  # a stop whose exception was lost inside the lesson
                if options.replay is None:
                    confirm_same_server(seen.url, options, seen.props, seen.models, lid)
                save_lesson(run_dir, result, sink)
                skipped = ctx.skipped
                entry.status = "skipped" if skipped else "ok"
                entry.finished_at, entry.json_file, entry.markdown = result.finished_at, f"{lid}.json", f"{lid}.md"
                entry.http_sha256 = file_sha256(run_dir / "http" / f"{lid}.jsonl")
                entry.json_sha256 = file_sha256(run_dir / f"{lid}.json")
                entry.error = entry.traceback = entry.failed_exchanges = entry.set_aside = entry.replay_differences = None
                entry.skip_reason = skipped.reason if skipped else None
                entry.enable_command = skipped.command if skipped else None
                if skipped:
                    console.print(f"[cyan]–[/cyan] {lid}: {rich_text(title)}: skipped, nothing measured here; "
                                  f"`{rich_text(skipped.command)}` enables it", highlight=False)
                else:
                    console.print(f"[green]✓[/green] {lid}: {rich_text(title)}")
                if replay is not None:
                    diffs = differences(replay.recorded, result.to_json())
                    if diffs:
                        entry.replay_differences = diffs
                        console.print(f"[yellow]! {lid}: the replayed result differs from the recorded {lid}.json "
                                      f"(the recording or the lesson changed):[/yellow] {rich_text('; '.join(diffs))}", highlight=False)
            except KeyboardInterrupt as exc:
                how = f"stopped by {exc.args[0]}" if isinstance(exc, Terminated) else "stopped by Ctrl-C"
                entry.status, entry.error = "interrupted", f"{how} before the lesson finished"
                interrupted = exc
            except OSError as exc:
                failures += 1
                if exc.errno not in DISK_FULL:
                    entry.status, entry.error, entry.traceback = "failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()
                    console.print(f"[red]✗ {lid} failed with an unexpected error:[/red] {rich_text(f'{type(exc).__name__}: {exc}')}")
                else:
                    disk_full = DiskFull(exc.filename or run_dir, lid, resume)
                    entry.status, entry.error = "failed", str(disk_full)
            except ServerChanged as exc:  # nothing more can be measured on this server: the run stops, resumable
                failures += 1
                entry.status, entry.error = "failed", str(exc)
                console.print(f"[red]✗ {lid}: the run stopped:[/red] {rich_text(exc)}", highlight=False)
                server_changed = exc
            except BytesupError as exc:
                failures += 1
                exc = timeout_on_machine(exc, watch)
                entry.status, entry.error = "failed", str(exc)
                console.print(f"[red]✗ {lid} failed:[/red] {rich_text(exc)}", highlight=False)
            except Exception as exc:  # a bug in a lesson must not lose the other lessons' results
                failures += 1
                entry.status, entry.error, entry.traceback = "failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()
                console.print(f"[red]✗ {lid} failed with an unexpected error:[/red] {rich_text(f'{type(exc).__name__}: {exc}')}")
            finally:
                if client is not None:
                    client.close()
                reporter.done()
                entry.seconds = round(time.monotonic() - began, 1)  # the lesson's wall time, whatever its end
                if options.replay is None:  # where that time went (host/spent.py); a replay measures nothing
                    entry.time_split = time_split(split_from, ledger_at, sink)
                if entry.status not in ("ok", "skipped"):
                    keep_failed(run_dir, lid, entry, sink)
                try:
                    save_manifest()
                except DiskFull as exc:
                    disk_full = disk_full or exc
            if interrupted is not None or disk_full is not None or server_changed is not None:
                break

    # The run's bandwidth again after its decode work, unless a lesson (the capstone) took it already.
    record = manifest.host_bandwidth
    if options.replay is None and record.before and not record.after and not interrupted:
        try:
            shared.bandwidth_after()
        except Exception as exc:  # a failed second reading must not lose the run
            manifest.host_bandwidth.after_error = f"{type(exc).__name__}: {exc}"
    # Where the requests' time outside the server's timings went: the server's part and the harness's, once, in a run
    # of several lessons (a lesson run on its own, as a script, is not made 15 s longer for it).
    if options.replay is None and not interrupted and not server_changed and len(todo) > 1 and not harness.skipped_by_env():
        quiet.freeze_heap()  # as before a lesson: the split's requests are timed as the lessons' are
        split = manifest.harness_split = harness.probe(options.client(seen.url, RecordingTransport([], "probe"), build=build),
                                                       BareClient(seen.url, options.api_key, options.timeout),
                                                       run_dir / "http", harness.PAIRS, harness.N_PREDICT)
        console.print(rich_text(harness.sentence(split)), highlight=False, soft_wrap=True)
        try:
            save_manifest()
        except DiskFull as exc:
            disk_full = disk_full or exc
    times = [e.seconds for e in lessons_state.values()]
    if all(t is not None for t in times):
        manifest.lessons_seconds = round(sum(t for t in times if t is not None), 1)
    # A skipped lesson ran to its end: it measured nothing on this machine, and says what enables it.
    manifest.status = "complete" if all(e.status in ("ok", "skipped") for e in lessons_state.values()) else "incomplete"
    manifest.load_average_after = environment.load_average()
    try:
        save_manifest()
    except DiskFull as exc:
        disk_full = disk_full or exc
    if disk_full is not None:
        raise disk_full
    if manifest_file.had_report:
        write_run_report(run_dir, None, run_checks=(run_dir / "check.json").exists(), with_html=(run_dir / "report.html").exists())
    print_summary(console, run_dir, manifest, todo, resume)
    if interrupted is not None:
        return 128 + interrupted.signum if isinstance(interrupted, Terminated) else 130
    return 1 if failures else 0


