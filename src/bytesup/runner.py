"""The lesson runner: finds lessons, gives each a context, records or replays its HTTP
exchanges, and saves its result into a run folder after each lesson.

A run folder (`outputs/<date>/`) holds `<id>.json`, `<id>.md`, `http/<id>.jsonl`,
`plots/`, `manifest.json` and `README.md`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from . import engine, environment
from .client import LlamaServer, default_base_url
from .errors import BytesupError, ReplayMiss, RunFolderError, ServerUnreachable
from .paths import lessons_dir, outputs_root
from .plots import write_plots
from .render import lesson_md
from .replay import RecordingTransport, ReplayTransport
from .results import LessonResult, Measurement, Plot, Series, Table, Column, load_result
from .storage import read_jsonl, write_json_atomic, write_jsonl_atomic, write_text_atomic

MANIFEST_SCHEMA_VERSION = 1
# Flags of the user's server that a lesson's own servers set for themselves.
# Speculation too: a lesson's server decodes plainly unless the lesson asks for a draft.
NOT_INHERITED = {"--port", "--host", "--model", "--parallel", "--ctx-size", "--api-key", *engine.SPECULATIVE_FLAGS}
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

@dataclass
class RunOptions:
    server_url: str | None = None
    api_key: str | None = None
    model: Path | None = None
    out: Path | None = None
    force: bool = False
    resume: bool = False
    replay: Path | None = None
    repeat: int = 3
    timeout: float = 600.0
    # With no server given (--server, BYTESUP_SERVER) and none answering at the default URL,
    # start one on the default model for the length of the run (--no-start-server: fail instead).
    start_server: bool = True
    lesson_options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: shown_command(sys.argv))


def shown_command(argv: list[str]) -> list[str]:
    """sys.argv as a person typed it: `python -m bytesup` and the console script both read `bytesup`."""
    if not argv:
        return []
    first = Path(argv[0])
    if first.name in ("__main__.py", "bytesup"):
        return ["bytesup", *argv[1:]]
    return [str(first.relative_to(Path.cwd())) if first.is_absolute() and first.is_relative_to(Path.cwd()) else argv[0], *argv[1:]]


def redact_command(argv: list[str]) -> list[str]:
    """The command line as recorded in the manifest: an API key is never written to outputs."""
    shown, hide_next = [], False
    for arg in argv:
        if hide_next:
            shown.append("***")
            hide_next = False
        elif arg == "--api-key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--api-key="):
            shown.append("--api-key=***")
        else:
            shown.append(arg)
    return shown


def today_folder() -> Path:
    return outputs_root() / datetime.now(timezone.utc).date().isoformat()


# --- the context a lesson gets -------------------------------------------------------

class LessonContext:
    """What a lesson's `main(ctx)` works with: the server client, the model, the options,
    a progress reporter, and the result being built. Live, it measures and records;
    replaying, it answers from the recorded run."""

    def __init__(self, lesson_id: str, title: str, *, server: LlamaServer, options: RunOptions,
                 model_path: Path | None, sink: list[dict], replay: "ReplaySource | None",
                 progress: "Reporter"):
        self.lesson_id = lesson_id
        self.title = title
        self.server = server
        self.options = options
        self._model_path = model_path
        self._sink = sink
        self._replay = replay
        self.progress = progress
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.host_values: dict[str, Any] = {}
        self.settings: dict[str, Any] = {}
        self.tables: list[Table] = []
        self.measurements: list[Measurement] = []
        self.notes: list[str] = []
        self.plots: list[Plot] = []
        self.identity: dict[str, Any] = {}

    @property
    def repeat(self) -> int:
        """Repetitions of each timed measurement (--repeat). Recorded like a host value, so a
        replay asks for exactly the requests the recorded run made, whatever --repeat it is given."""
        return self.host("repeat", lambda: max(1, self.options.repeat))

    @repeat.setter
    def repeat(self, value: int) -> None:
        self.options.repeat = self.host_values["repeat"] = int(value)

    @property
    def replaying(self) -> bool:
        return self._replay is not None

    def option(self, name: str, default: Any = None) -> Any:
        """A lesson option (--bandwidth-gbs, --sizes); recorded, so a replay sees the recorded run's."""
        return self.host(f"option_{name}", lambda: self.options.lesson_options.get(name, default))

    # host measurements -----------------------------------------------------------------
    def host(self, name: str, measure: Callable[[], Any]) -> Any:
        """A value measured on this host (timings, file reads); a replay returns the recorded value."""
        if self._replay is not None:
            if name not in self._replay.result.host_values:
                raise ReplayMiss(f"host value {name!r} of {self.lesson_id}", list(self._replay.result.host_values))
            value = self._replay.result.host_values[name]
        else:
            value = json.loads(json.dumps(measure()))  # exactly what a replay will see
        self.host_values[name] = value
        return value

    def readable_model(self) -> Path | None:
        """The served model's file when it is readable here; None for a remote server without --model.
        (A file that is there but is not a valid GGUF still fails when a lesson reads it.)"""
        return self._model_path if self._model_path is not None and self._model_path.is_file() else None

    def model_info(self) -> dict[str, Any] | None:
        """The served model's GGUF facts (`gguf_read.read_model_info`), recorded as a host value;
        None when no model file is readable here. A corrupt file raises its GGUFError."""
        from .gguf_read import read_model_info

        return self.host("model_info", lambda: read_model_info(p) if (p := self.readable_model()) else None)

    def require_model(self) -> Path:
        if self._model_path is None or not self._model_path.is_file():
            raise BytesupError(
                f"Lesson {self.lesson_id} reads the model file, but none is readable here "
                f"({self._model_path or 'the server did not say which file it serves'}). "
                "Pass --model PATH.gguf (the same file the server runs)."
            )
        return self._model_path

    # where the user's server runs -----------------------------------------------------------
    def server_facts(self) -> dict[str, Any]:
        """Where the user's server runs, decided once and recorded: on this host or not, on the CPU
        or an accelerator, and so whether this host's measured memory bandwidth bounds its decode."""
        return self.host("server_facts", self._server_facts)

    def _server_facts(self) -> dict[str, Any]:
        from urllib.parse import urlparse

        url_host = urlparse(self.server.base_url).hostname or ""
        local = _is_loopback(url_host) or url_host in environment.own_addresses()
        server = self.identity.get("server", {})
        ngl = (server.get("flags") or {}).get("--n-gpu-layers")
        offloads = ngl is None or str(ngl) != "0"  # llama.cpp offloads by default where it can
        devices = environment.accelerators(server.get("engine")) if local else []
        on_accelerator = local and offloads and bool(devices)
        if not local:
            reason = f"the server runs on {url_host}, not on this host"
        elif on_accelerator:
            reason = f"the server offloads layers (--n-gpu-layers {ngl or 'default'}) to {devices[0]}, whose memory feeds decode"
        else:
            reason = "the server decodes on this host's CPU, from this host's memory"
        return {"url_host": url_host, "local": local, "model_readable": bool(self._model_path and self._model_path.is_file()),
                "accelerators": devices, "on_accelerator": on_accelerator,
                "host_bandwidth_applies": local and not on_accelerator, "reason": reason}

    def inherited_flags(self) -> list[str]:
        """The user's server flags (threads, GPU layers, cache types…) for servers a lesson starts."""
        flags = self.identity.get("server", {}).get("flags") or {}
        return engine.flags_to_argv({k: v for k, v in flags.items() if k not in NOT_INHERITED})

    # servers of the lesson's own --------------------------------------------------------
    @contextlib.contextmanager
    def local_server(self, label: str, model: Path | None, flags: list[str]) -> Iterator[LlamaServer]:
        """Start a server of our own on a free port (lessons 7 and 8), recorded under `label`.
        It runs with the user's server flags (see `inherited_flags`), then `flags`."""
        if self._replay is not None:
            client = LlamaServer("http://replay", transport=ReplayTransport(self._replay.exchanges, label, self._sink))
            try:
                yield client
            finally:
                client.close()
            return
        port = engine.free_port()
        started = engine.start_server(model, [*self.inherited_flags(), "--port", str(port), *flags])
        client = LlamaServer(started.url, timeout=self.options.timeout,
                             transport=RecordingTransport(self._sink, label))
        try:
            yield client
        finally:
            client.close()
            engine.stop_server(port)
            # A throwaway port's state folder (pid, log) has nothing left to tell once stopped.
            shutil.rmtree(started.state_dir, ignore_errors=True)

    # building the result -----------------------------------------------------------------
    def step(self, text: str) -> None:
        self.progress.step(text)

    def track(self, items: Iterable[Any], text: str) -> Iterator[Any]:
        return self.progress.track(items, text)

    def table(self, name: str, title: str, columns: list[tuple[str, str]], rows: list[list[Any]], notes: list[str] | None = None) -> Table:
        t = Table(name=name, title=title, columns=[Column(name=n, unit=u) for n, u in columns], rows=rows, notes=notes or [])
        self.tables.append(t)
        return t

    def measure(self, name: str, unit: str, samples: list[float], **kw: Any) -> Measurement:
        m = Measurement.of(name, unit, samples, **kw)
        self.measurements.append(m)
        return m

    def note(self, text: str) -> None:
        self.notes.append(text)

    def plot(self, name: str, title: str, x_label: str, y_label: str, series: list[Series], **kw: Any) -> Plot:
        p = Plot(name=name, title=title, x_label=x_label, y_label=y_label, series=series, **kw)
        self.plots.append(p)
        return p

    def finish(self) -> LessonResult:
        finished = datetime.now(timezone.utc).isoformat(timespec="seconds")
        started = self.started_at
        host_values = self.host_values
        if self._replay is not None:
            started, finished = self._replay.result.started_at, self._replay.result.finished_at
            # Every host value of a replay is a recorded one; keep the recording's set and order
            # (a value read inside another's measurement is never asked for when replaying).
            host_values = self._replay.result.host_values
        return LessonResult(
            lesson_id=self.lesson_id, title=self.title, started_at=started, finished_at=finished,
            model=self.identity.get("model", {}), server=self.identity.get("server", {}),
            settings=self.settings, measurements=self.measurements, tables=self.tables,
            notes=self.notes, plots=self.plots, host_values=host_values,
            exchanges=f"http/{self.lesson_id}.jsonl", exchange_count=len(self._sink),
        )


# --- progress ------------------------------------------------------------------------

class Reporter:
    """Rich progress: one line for the lesson and its step, one bar for repeated work."""

    def __init__(self, progress: Progress | None, lesson_id: str):
        self.progress = progress
        self.lesson_id = lesson_id
        self.task = progress.add_task(f"{lesson_id}", total=None) if progress else None

    def step(self, text: str) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=f"{self.lesson_id}: {text}")

    def track(self, items: Iterable[Any], text: str) -> Iterator[Any]:
        items = list(items)
        if self.progress is None:
            yield from items
            return
        sub = self.progress.add_task(f"  {text}", total=len(items))
        for item in items:
            yield item
            self.progress.advance(sub)
        self.progress.remove_task(sub)

    def done(self) -> None:
        if self.progress is not None:
            self.progress.remove_task(self.task)


# --- replay sources --------------------------------------------------------------------

@dataclass
class ReplaySource:
    result: LessonResult
    exchanges: list[dict]


def load_replay(run_dir: Path, lesson_id: str) -> ReplaySource:
    json_path = run_dir / f"{lesson_id}.json"
    if not json_path.is_file():
        raise RunFolderError(
            f"{run_dir} has no recorded result for {lesson_id} ({json_path.name} is missing). "
            "Replay a run folder written by `bytesup run` that includes this lesson."
        )
    result = load_result(json.loads(json_path.read_text(encoding="utf-8")), str(json_path))
    http = run_dir / (result.exchanges or f"http/{lesson_id}.jsonl")
    exchanges = read_jsonl(http) if http.is_file() else []
    return ReplaySource(result=result, exchanges=exchanges)


# --- the run folder --------------------------------------------------------------------

def read_manifest(run_dir: Path) -> dict | None:
    path = run_dir / "manifest.json"
    if not path.is_file():
        return None
    from .results import upgrade

    return upgrade(json.loads(path.read_text(encoding="utf-8")), "run manifest", str(path), MANIFEST_SCHEMA_VERSION)


def run_readme(run_dir: Path, manifest: dict) -> str:
    lines = [INDEX_MARK, f"# bytesup run {run_dir.name}", ""]
    host = manifest.get("host", {})
    eng = manifest.get("engine", {})
    model = manifest.get("model", {})
    lines.append(f"Status: **{manifest.get('status')}** · host {host.get('hostname')} ({host.get('cpu')}, {host.get('cores')} cores)")
    lines.append(f"· engine {eng.get('engine', '?')} {eng.get('build', '')} · model {model.get('path', '?')}")
    lines.append("")
    lines.append("| lesson | status | result |")
    lines.append("|---|---|---|")
    for lid, entry in sorted(manifest.get("lessons", {}).items()):
        link = f"[{entry.get('title', lid)}]({lid}.md)" if entry.get("status") == "ok" else entry.get("error", "")[:200].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{lid}` | {entry.get('status')} | {link} |")
    return "\n".join(lines) + "\n"


def save_lesson(run_dir: Path, result: LessonResult, exchanges: list[dict]) -> None:
    """Exchanges, plots and Markdown first, the JSON last: a result file means a complete lesson."""
    write_jsonl_atomic(run_dir / "http" / f"{result.lesson_id}.jsonl", exchanges)
    write_plots(result, run_dir)
    write_text_atomic(run_dir / f"{result.lesson_id}.md", lesson_md(result))
    write_json_atomic(run_dir / f"{result.lesson_id}.json", result.model_dump(mode="json"))


def _engine_facts(url: str, props: dict, models: dict | None) -> dict:
    port = None
    m = re.match(r"https?://[^/:]+:(\d+)", url)
    if m:
        port = int(m.group(1))
    info = engine.read_engine_info(port) if port and re.match(r"https?://(127\.0\.0\.1|localhost)", url) else None
    facts = dict(info) if info else _observed_engine(props)
    facts.update({"url": url, "props": props, "v1_models": models})
    return facts


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


def _answers(url: str, api_key: str | None) -> bool:
    """False only when nothing listens at `url`. A server that answers, even with an error, is
    used as it is (the probe that follows reports what is wrong with it)."""
    with LlamaServer(url, api_key, timeout=30) as probe:
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
    model = model_for_run(options, console)
    cleanup.enter_context(_sigterm_as_interrupt())
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


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the run the way Ctrl-C does: the lesson is marked interrupted and cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    run_dir = (options.out or today_folder()).resolve()
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"{run_dir} exists and is not a folder. Choose another --out.")
    manifest = read_manifest(run_dir) or {}
    done = {lid for lid, e in manifest.get("lessons", {}).items() if e.get("status") == "ok"}

    # Refuse before any request is sent: nothing in the folder changes.
    todo = []
    clashes = []
    for lid in lesson_ids:
        exists = (run_dir / f"{lid}.json").exists()
        if exists and options.resume and lid in done:
            continue
        if exists and not options.force:
            clashes.append(lid)
        todo.append(lid)
    if clashes:
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
        if options.start_server and not _server_given(options) and not _answers(url, options.api_key):
            url = start_run_server(url, options, console, cleanup).url
            started_for_run = True
        with LlamaServer(url, options.api_key, timeout=30) as probe:
            probe.health()
            props = probe.props().model_dump(mode="json")
            try:
                models = probe.models().model_dump(mode="json")
            except BytesupError:
                models = None
    model_path = _model_path_from(props, options.model)

    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if options.replay is not None and replay_manifest is not None:
        base = {k: replay_manifest.get(k) for k in ("host", "engine", "model", "packages", "repository")}
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

    def save_manifest() -> None:
        manifest["updated_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_json_atomic(run_dir / "manifest.json", manifest)
        if not had_report:  # the one-page report (`bytesup report`) is refreshed at the end instead
            write_text_atomic(readme, run_readme(run_dir, manifest))

    run_dir.mkdir(parents=True, exist_ok=True)
    save_manifest()

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

    failures = 0
    interrupted = False
    columns = [SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        for lid in todo:
            module = load_lesson(lid)
            title = lesson_title(module)
            sink: list[dict] = []
            replay = load_replay(options.replay, lid) if options.replay else None
            if replay is not None:
                transport = ReplayTransport(replay.exchanges, "main", sink)
                client = LlamaServer("http://replay", transport=transport)
            else:
                client = LlamaServer(url, options.api_key, timeout=options.timeout, transport=RecordingTransport(sink, "main"))
            reporter = Reporter(progress, lid)
            ctx = LessonContext(lid, title, server=client, options=options, model_path=model_path,
                                sink=sink, replay=replay, progress=reporter)
            entry = lessons_state[lid]
            # The commit per lesson too: a resumed run may hold lessons made by different code.
            entry.update({"status": "running", "started_at": ctx.started_at,
                          "commit": (manifest.get("repository") or {}).get("commit")})
            try:
                ident = ctx.host("identity", identity)
                ctx.identity = ident
                result = module.main(ctx)
                save_lesson(run_dir, result, sink)
                entry.update({"status": "ok", "finished_at": result.finished_at, "json": f"{lid}.json", "markdown": f"{lid}.md"})
                entry.pop("error", None)
                console.print(f"[green]✓[/green] {lid}: {title}")
            except KeyboardInterrupt:
                entry.update({"status": "interrupted", "error": "stopped by Ctrl-C (or SIGTERM) before the lesson finished"})
                interrupted = True
            except BytesupError as exc:
                failures += 1
                entry.update({"status": "failed", "error": str(exc)})
                console.print(f"[red]✗ {lid} failed:[/red] {exc}")
            except Exception as exc:  # a bug in a lesson must not lose the other lessons' results
                failures += 1
                entry.update({"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
                console.print(f"[red]✗ {lid} failed with an unexpected error:[/red] {type(exc).__name__}: {exc}")
            finally:
                client.close()
                reporter.done()
                save_manifest()
            if interrupted:
                break

    statuses = [e.get("status") for e in lessons_state.values()]
    manifest["status"] = "complete" if all(s == "ok" for s in statuses) else "incomplete"
    manifest["load_average_after"] = environment.load_average()
    save_manifest()
    if had_report:
        from .report import write_run_report

        write_run_report(run_dir, None, run_checks=(run_dir / "check.json").exists())
    print_summary(console, run_dir, manifest, todo)
    if interrupted:
        return 130
    return 1 if failures else 0


def print_summary(console: Console, run_dir: Path, manifest: dict, ran: list[str]) -> None:
    from rich.table import Table as RichTable

    if not ran:
        console.print(f"Nothing to run: every lesson asked for is already saved in {run_dir}.")
        return

    table = RichTable(title=f"run folder {run_dir}")
    table.add_column("lesson")
    table.add_column("status")
    table.add_column("files / error")
    for lid in ran:
        e = manifest["lessons"][lid]
        color = {"ok": "green", "failed": "red"}.get(e["status"], "yellow")
        table.add_row(lid, f"[{color}]{e['status']}[/{color}]", f"{lid}.json, {lid}.md" if e["status"] == "ok" else e.get("error", "")[:160])
    console.print(table)
    if manifest["status"] != "complete":
        console.print(f"The run is incomplete: `bytesup run-all --out {run_dir} --resume` continues it.")


# --- a lesson run as a script ----------------------------------------------------------

def script_main(lesson_file: str) -> None:
    """`python lessons/NN_name.py [--server URL] [--out DIR] [--replay RUN_DIR] [--model GGUF] …`"""
    from .cli import app

    lesson_id = Path(lesson_file).stem
    sys.exit(app(["run", lesson_id, "--print", *sys.argv[1:]], prog_name=f"python lessons/{lesson_id}.py", standalone_mode=True))
