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
import sys
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
from .client import DEFAULT_TIMEOUT_S, LlamaServer, default_base_url
from .errors import BytesupError, ReplayMiss, RunFolderError, ServerStartError, ServerUnreachable
from .escape import md_text, rich_text
from .paths import lessons_dir, outputs_root
from .plots import write_plots
from .render import lesson_md
from .replay import RecordingTransport, ReplayTransport
from .results import LessonResult, Measurement, Plot, Series, Table, Column, load_result
from .runfolder import (DISK_FULL, DiskFull, RunLock, Terminated, differences, identity_differences, latest_unfinished,
                        new_run_dir, resume_command, set_aside, signals_raise)
from .storage import dumps, file_sha256, write_json_atomic, write_jsonl_atomic, write_text_atomic

MANIFEST_SCHEMA_VERSION = 1
# Flags of the user's server that a lesson's own servers set for themselves.
# Speculation too: a lesson's server decodes plainly unless the lesson asks for a draft; and --rpc: the
# user's rpc-servers serve one client at a time, and a lesson splits a model only where it says so.
NOT_INHERITED = {"--port", "--host", "--model", "--parallel", "--ctx-size", "--api-key", "--rpc", *engine.SPECULATIVE_FLAGS}
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
    timeout: float = DEFAULT_TIMEOUT_S
    # With no server given (--server, BYTESUP_SERVER) and none answering at the default URL,
    # start one on the default model for the length of the run (--no-start-server: fail instead).
    start_server: bool = True
    lesson_options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: shown_command(sys.argv))
    allow_modified: bool = False  # replay recordings whose sha256 no longer matches the manifest's
    model_mismatch_ok: bool = False  # go on when --model is not the file the server serves
    run_dir: Path | None = None  # the folder the run wrote to, set by run_lessons


def shown_command(argv: list[str]) -> list[str]:
    """sys.argv as a person typed it: `python -m bytesup` and the console script both read `bytesup`."""
    if not argv:
        return []
    first = Path(argv[0])
    if first.name in ("__main__.py", "bytesup"):
        return ["bytesup", *argv[1:]]
    if first.suffix == ".py":  # a lesson run as a script
        shown = first.relative_to(Path.cwd()) if first.is_absolute() and first.is_relative_to(Path.cwd()) else first
        return ["python", str(shown), *argv[1:]]
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


# --- what a run measures once --------------------------------------------------------

class RunShared:
    """Facts a run measures once and every lesson of it shares: this host's memory read bandwidth.

    The first lesson that asks takes the reading (before the run's decode work) and it is written to
    the manifest under "host_bandwidth"; every later lesson gets the same figure. A second reading
    after the decode work (the capstone's, or the runner's at the end of the run) gives the drift.
    A replay reads the recorded run's manifest and measures nothing."""

    def __init__(self, manifest: dict, save: Callable[[], None] = lambda: None,
                 replay_manifest: dict | None = None, replaying: bool = False):
        self.manifest = manifest
        self.save = save
        self.replaying = replaying
        self.recorded = (replay_manifest or {}).get("host_bandwidth") if replaying else None

    @property
    def bandwidth_record(self) -> dict | None:
        return self.recorded if self.replaying else self.manifest.get("host_bandwidth")

    def bandwidth_before(self, threads: int) -> dict | None:
        """The run's reading; None when replaying a run that recorded none (the caller falls back)."""
        if self.replaying:
            return (self.recorded or {}).get("before")
        record = self.manifest.get("host_bandwidth") or {}
        if (record.get("before") or {}).get("threads") != threads:
            from . import hostbench

            reading = hostbench.run_bandwidth(threads)
            reading["at"] = _now()
            record = {"before": json.loads(json.dumps(reading))}
            self.manifest["host_bandwidth"] = record
            self.save()
        return record["before"]

    def bandwidth_after(self) -> dict | None:
        """A second reading after the decode work, with the drift from the first (None without a first)."""
        if self.replaying:
            return (self.recorded or {}).get("after")
        record = self.manifest.get("host_bandwidth") or {}
        before = record.get("before")
        if not before:
            return None
        from . import hostbench

        reading = hostbench.run_bandwidth(before["threads"])
        reading["at"] = _now()
        record["after"] = json.loads(json.dumps(reading))
        record["drift"] = hostbench.bandwidth_drift(before["gb_per_s"], reading["gb_per_s"])
        self.save()
        return record["after"]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the context a lesson gets -------------------------------------------------------

class LessonContext:
    """What a lesson's `main(ctx)` works with: the server client, the model, the options,
    a progress reporter, and the result being built. Live, it measures and records;
    replaying, it answers from the recorded run."""

    def __init__(self, lesson_id: str, title: str, *, server: LlamaServer, options: RunOptions,
                 model_path: Path | None, sink: list[dict], replay: "ReplaySource | None",
                 progress: "Reporter", shared: RunShared | None = None):
        self.lesson_id = lesson_id
        self.shared = shared if shared is not None else RunShared({}, replaying=replay is not None)
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
        self.facts: dict[str, Any] = {}
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

    # the run's bandwidth -----------------------------------------------------------------
    def server_threads(self) -> int:
        """Threads the user's server decodes with (its --threads, else llama.cpp's physical cores)."""
        from .formulas import server_threads

        return server_threads(self.identity.get("server", {}).get("flags"))

    def run_bandwidth(self) -> dict:
        """This host's memory read bandwidth for the whole run (hostbench.run_bandwidth: a working set
        of at least 4 × the last-level cache, the server's decode threads, RUN_SAMPLES samples),
        taken once and shared by every lesson; a replay returns the recorded run's. A run recorded
        before readings were shared replays the lesson's own recorded reading instead."""
        reading = self.shared.bandwidth_before(self.server_threads())
        if reading is None:  # replaying a run whose lessons each measured their own
            return self.host("read_bandwidth", lambda: None)
        return reading

    def run_bandwidth_after(self) -> dict | None:
        """The run's second reading, taken now, after the decode work (None when replaying a run without one)."""
        return self.shared.bandwidth_after()

    def run_bandwidth_drift(self) -> dict | None:
        return (self.shared.bandwidth_record or {}).get("drift")

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
        # Stopped and its state folder removed on every way out: an exception, Ctrl-C, SIGTERM
        # (see runfolder.signals_raise), and by the kernel if this process is killed outright.
        failed_to_start = False
        try:
            try:
                started = engine.start_server(model, [*self.inherited_flags(), "--port", str(port), *flags],
                                              die_with_parent=True)
            except ServerStartError:
                failed_to_start = True
                raise
            client = LlamaServer(started.url, timeout=self.options.timeout,
                                 transport=RecordingTransport(self._sink, label))
            try:
                yield client
            finally:
                client.close()
        finally:
            engine.stop_server(port)
            # A throwaway port's state folder (pid, log) has nothing left to tell once its server is
            # stopped; a server that failed to start keeps its log, which the error points at.
            if not failed_to_start:
                shutil.rmtree(engine.state_dir_for(port), ignore_errors=True)

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

    def fact(self, name: str, value: Any) -> Any:
        """A named value of the result (JSON: numbers, strings, lists, dicts) that `check` and
        `compare` read by name instead of from a table's presentation."""
        self.facts[name] = json.loads(json.dumps(value))
        return self.facts[name]

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
            notes=self.notes, plots=self.plots, facts=self.facts, host_values=host_values,
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
    recorded: dict = field(default_factory=dict)  # the recorded <id>.json, to compare the replay with


def load_replay(run_dir: Path, lesson_id: str, entry: dict | None = None, allow_modified: bool = False) -> ReplaySource:
    """A recorded lesson: its result and exchanges. The exchanges must still have the sha256 the
    manifest recorded (`entry`), unless `allow_modified`; a damaged file is a RunFolderError."""
    from pydantic import ValidationError

    json_path = run_dir / f"{lesson_id}.json"
    if not json_path.is_file():
        raise RunFolderError(
            f"{run_dir} has no recorded result for {lesson_id} ({json_path.name} is missing). "
            "Replay a run folder written by `bytesup run` that includes this lesson."
        )
    try:
        recorded = json.loads(json_path.read_text(encoding="utf-8"))
        result = load_result(json.loads(json.dumps(recorded)), str(json_path))
    except (ValueError, ValidationError) as exc:
        raise RunFolderError(f"{json_path} is damaged ({str(exc).splitlines()[0]}), so {lesson_id} cannot be replayed. "
                             "The other lessons are replayed; re-record this one against a live server.") from None
    http = run_dir / (result.exchanges or f"http/{lesson_id}.jsonl")
    if not http.is_file():
        return ReplaySource(result=result, exchanges=[], recorded=recorded)
    expected = (entry or {}).get("http_sha256")
    if expected and not allow_modified and file_sha256(http) != expected:
        raise RunFolderError(
            f"{http} has changed since it was recorded (its sha256 differs from the one in the run's "
            f"manifest.json), so {lesson_id} was not replayed from it. Replay an unmodified copy of the run, "
            "or pass --allow-modified to replay a recording you edited on purpose."
        )
    exchanges = []
    for n, line in enumerate(http.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            exchanges.append(json.loads(line))
        except ValueError as exc:
            raise RunFolderError(
                f"Line {n} of {http} is not valid JSON ({exc.msg}): the recording is truncated or damaged, "
                f"so {lesson_id} cannot be replayed. The other lessons are replayed; re-record this one "
                "against a live server."
            ) from None
    return ReplaySource(result=result, exchanges=exchanges, recorded=recorded)


# --- the run folder --------------------------------------------------------------------

def read_manifest(run_dir: Path) -> dict | None:
    path = run_dir / "manifest.json"
    if not path.is_file():
        return None
    from .results import upgrade

    return upgrade(json.loads(path.read_text(encoding="utf-8")), "run manifest", str(path), MANIFEST_SCHEMA_VERSION)


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


# --- a lesson run as a script ----------------------------------------------------------

def script_main(lesson_file: str) -> None:
    """`python lessons/NN_name.py [--server URL] [--out DIR] [--replay RUN_DIR] [--model GGUF] …`"""
    from .cli import app

    lesson_id = Path(lesson_file).stem
    sys.exit(app(["run", lesson_id, "--print", *sys.argv[1:]], prog_name=f"python lessons/{lesson_id}.py", standalone_mode=True))
