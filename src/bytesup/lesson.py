"""The lesson API: what a lesson's `main(ctx)` works with.

`LessonContext` holds the server client, the model, the run's options (`ctx.run`), the lesson's own options
(`ctx.options`, typed by the lesson's `Options`), a progress reporter (`Reporter`)
and the result being built; live, it measures and records, replaying, it answers from the recorded
run. `RunShared` holds what a run measures once for all its lessons (this host's bandwidth).
Lessons import `LessonContext` from here; the runner (`runner.run_lessons`) makes one per lesson.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel
from rich.progress import Progress, TaskID

from bytesup import paths
from bytesup.llama import process
from bytesup.host import environment
from bytesup.host import hostbench
from bytesup.host import load
from bytesup.host.spent import HOST, SERVERS, spent
from bytesup.llama.client import LlamaServer
from bytesup.errors import BytesupError, LessonSkipped, ReplayMiss, ServerStartError
from bytesup.course.formulas import server_threads
from bytesup.models.gguf import read_model_info
from bytesup.options import LessonOptions, RunOptions
from bytesup.llama.recording import RecordingTransport, ReplayTransport
from bytesup.store import facts
from bytesup.store.results import Column, LessonResult, Measurement, Plot, Series, Shows, Table
from bytesup.store.manifest import HostBandwidth, Manifest
from bytesup.store.runs import ReplaySource
from bytesup.llama.placement import ServerSetup, decide, is_loopback, offloads
from bytesup.llama.shapes import ServerShape

# Flags of the user's server that a lesson's own servers set for themselves.
# Speculation too: a lesson's server decodes plainly unless the lesson asks for a draft; and --rpc: the
# user's rpc-servers serve one client at a time, and a lesson splits a model only where it says so.
NOT_INHERITED = {"--port", "--host", "--model", "--parallel", "--ctx-size", "--api-key", "--rpc", *process.SPECULATIVE_FLAGS}


# --- what a run measures once --------------------------------------------------------

T = TypeVar("T")
PLAN = "plan"  # the host value a lesson's plan is recorded as (bytesup.store.plans)

class RunShared:
    """Facts a run measures once and every lesson of it shares: this host's memory read bandwidth.

    The first lesson that asks takes the reading (before the run's decode work) and it is written to
    the manifest under "host_bandwidth"; every later lesson gets the same figure. A second reading
    after the decode work (the capstone's, or the runner's at the end of the run) gives the drift.
    A replay reads the recorded run's manifest and measures nothing."""

    def __init__(self, manifest: Manifest, save: Callable[[], None] = lambda: None,
                 replay_manifest: Manifest | None = None, replaying: bool = False):
        self.manifest = manifest
        self.save = save
        self.replaying = replaying
        self.recorded = replay_manifest.host_bandwidth if replaying and replay_manifest else HostBandwidth()

    @property
    def bandwidth_record(self) -> HostBandwidth:
        return self.recorded if self.replaying else self.manifest.host_bandwidth

    def bandwidth_before(self, threads: int) -> dict | None:
        """The run's reading; None when replaying a run that recorded none (the caller falls back)."""
        if self.replaying:
            return self.recorded.before
        before = self.manifest.host_bandwidth.before
        if before is None or before.get("threads") != threads:
            with spent(HOST):
                reading = hostbench.run_bandwidth(threads)
            reading["at"] = environment.utc_now()
            self.manifest.host_bandwidth = HostBandwidth(before=json.loads(json.dumps(reading)))
            self.save()
        return self.manifest.host_bandwidth.before

    def bandwidth_after(self) -> dict | None:
        """A second reading after the decode work, with the drift from the first (None without a first)."""
        if self.replaying:
            return self.recorded.after
        record = self.manifest.host_bandwidth
        before = record.before
        if not before:
            return None
        with spent(HOST):
            reading = hostbench.run_bandwidth(before["threads"])
        reading["at"] = environment.utc_now()
        record.after = json.loads(json.dumps(reading))
        record.drift = hostbench.bandwidth_drift(before["gb_per_s"], reading["gb_per_s"])
        self.save()
        return record.after



# --- the models a lesson will ask for -------------------------------------------------

@dataclass(frozen=True)
class ModelQuery:
    """What a lesson's `models_needed(query) -> list[str]` reads to name the models (the catalog's names) it will
    ask for on a live run, without running: the runner makes them before the first lesson, with a progress bar,
    so making a model is never lesson time. The lesson still asks for them (`catalog.ensure_model`) and finds them.

    `served`: the served model's file when readable here (its `served_sha256`); `local`: whether the run's server
    is on this host, where the lessons start servers of their own; `repeat`: the run's --repeat as `ctx.repeat`
    reads it; `options`: the lesson's own options, as `ctx.options` reads them."""

    served: Path | None
    served_sha256: str | None
    local: bool
    repeat: int
    options: Any


# --- the context a lesson gets -------------------------------------------------------

class LessonContext:
    """What a lesson's `main(ctx)` works with: the server client, the model, the options,
    a progress reporter, and the result being built. Live, it measures and records;
    replaying, it answers from the recorded run."""

    def __init__(self, lesson_id: str, title: str, *, server: LlamaServer, run: RunOptions,
                 model_path: Path | None, sink: list[dict], replay: ReplaySource | None,
                 progress: Reporter, shared: RunShared | None = None, options_type: type[LessonOptions] = LessonOptions,
                 stop_check: Callable[[], None] | None = None):
        self.lesson_id = lesson_id
        self.shared = shared if shared is not None else RunShared(Manifest(), replaying=replay is not None)
        self.title = title
        self.server = server
        self.run = run
        self._options_type = options_type
        self._options: LessonOptions | None = None
        self._repeat: int | None = None
        self._sample_minimums: dict[str, int] = {}
        self._model_path = model_path
        self._sink = sink
        self._replay = replay
        self.progress = progress
        # Raises when the run was told to stop but Python dropped the exception (the runner's raise_if_stopping):
        # looked at while a server of the lesson's own starts, which may take minutes.
        self._stop_check = stop_check
        self.started_at = environment.utc_now()
        self.host_values: dict[str, Any] = {}
        self.settings: dict[str, Any] = {}
        self.tables: list[Table] = []
        self.measurements: list[Measurement] = []
        self.notes: list[str] = []
        self.plots: list[Plot] = []
        self.facts: dict[str, Any] = {}
        self.identity: dict[str, Any] = {}
        self.server_shapes: dict[str, dict[str, Any]] = {}  # the shape of each server of the lesson's own, by label
        self.skipped: LessonSkipped | None = None  # set by `skip`: the lesson measured nothing here
        self.load_watch: load.Watch | None = None  # set by the runner on a live run: the machine read between turns

    def samples(self, minimum: int, name: str = "samples") -> int:
        """How many samples one timed measurement takes, by the run's one rule: the run's --repeat, and at least
        `minimum`, what the lesson's statistics need (`robust.MIN_SAMPLES` for a median with its spread).

        The number is recorded as the host value `name`, so a replay asks for exactly the requests the recorded run
        made, whatever --repeat it is given and whatever minimum the lesson declares by then; a run recorded before
        the lesson asked gets the rule applied to its recorded --repeat. A lesson with two rules gives each its own
        `name`: one name with two minimums is a mistake in the lesson, a ValueError."""
        if minimum < 1:
            raise ValueError(f"a measurement takes at least one sample, not {minimum}")
        declared = self._sample_minimums.setdefault(name, minimum)
        if declared != minimum:
            raise ValueError(f"samples {name!r} were declared with the minimum {declared}, now {minimum}: "
                             "give each rule its own name")

        def rule() -> int:
            return max(minimum, self.repeat)

        if not self.recorded(name):
            return rule()
        return int(self.host(name, rule))

    @property
    def repeat(self) -> int:
        """The run's --repeat, as every lesson reads it (`samples` applies the rule: at least the lesson's minimum).
        Recorded like a host value, so a replay asks for exactly the requests the recorded run made, whatever
        --repeat it is given."""
        if self._repeat is not None:
            return self._repeat
        return self.host("repeat", lambda: max(1, self.run.repeat))

    @repeat.setter
    def repeat(self, value: int) -> None:
        """This lesson's repetitions from now on, recorded as the host value `repeat`; the run's options, which
        every lesson shares, are left as they are."""
        self._repeat = self.host_values["repeat"] = int(value)

    @property
    def replaying(self) -> bool:
        return self._replay is not None

    @property
    def options(self) -> Any:
        """The lesson's own options, an instance of the lesson's `Options` (`ctx.options.bandwidth_gbs`), typed and
        validated. When the lesson first reads them, each is recorded as the host value `option_<name>`, so a replay
        sees the recorded run's values (validated the same way) and asks for exactly its requests; a run recorded
        before an option existed replays with it not given."""
        if self._options is None:
            values = {name: self.host_since(f"option_{name}", functools.partial(self.run.lesson_options.get, name))
                      for name in self._options_type.model_fields}
            self._options = self._options_type.parse({k: v for k, v in values.items() if v is not None})
        return self._options

    # host measurements -----------------------------------------------------------------
    def host(self, name: str, measure: Callable[[], Any]) -> Any:
        """A value measured on this host (timings, file reads); a replay returns the recorded value."""
        if self._replay is not None:
            if name not in self._replay.result.host_values:
                raise ReplayMiss(f"host value {name!r} of {self.lesson_id}", list(self._replay.result.host_values))
            value = self._replay.result.host_values[name]
        else:
            with spent(HOST):  # the lesson's time split: this host's own measurements
                value = json.loads(json.dumps(measure()))  # exactly what a replay will see
        self.host_values[name] = value
        return value

    @contextlib.contextmanager
    def timing_host(self) -> Iterator[None]:
        """Work that times this host itself, step by step (numpy's timed generation in lesson 6): in the lesson's time
        split it is this host's measurement, not the harness's own arithmetic. It runs alike live and in a replay."""
        with spent(HOST):
            yield

    def recorded(self, name: str) -> bool:
        """Whether this run has the host value `name`: always when live; when replaying, whether
        the recorded run measured it. A run recorded before a lesson took a measurement replays
        without that part (and gives its recorded files again, byte for byte)."""
        return self._replay is None or name in self._replay.result.host_values

    def plan(self, fresh: Callable[[], Any], read: Callable[[Any], T], older: Callable[[dict[str, Any]], T],
             reads: Iterable[str]) -> T:
        """The lesson's plan (bytesup.store.plans), recorded once as the host value `plan`: live, `fresh()` (its JSON),
        read back with `read`; a replay reads the recorded run's the same way. A run recorded before its lesson had a
        plan is handed to `older`, the plan module's table of upgrades, with those host values of `reads` it recorded,
        so the lesson itself never asks what an older run did."""
        if self.replaying and not self.recorded(PLAN):
            return older({name: self.host(name, lambda: None) for name in reads if self.recorded(name)})
        return read(self.host(PLAN, fresh))

    def host_since(self, name: str, measure: Callable[[], Any], before: Any = None) -> Any:
        """`host(name, measure)` for a value a lesson began to record later: a replay of a run recorded
        before it existed returns `before` (what that run did; None: the lesson then says what it did not
        compute), never a guess, so older recordings still replay."""
        if not self.recorded(name):
            return before
        return self.host(name, measure)

    # the run's bandwidth -----------------------------------------------------------------
    def server_threads(self) -> int:
        """Threads the user's server decodes with (its --threads, else llama.cpp's physical cores)."""
        return server_threads(self.identity.get("server", {}).get("flags"), hostbench.physical_cores())

    def run_bandwidth(self) -> dict:
        """This host's memory read bandwidth for the whole run (hostbench.run_bandwidth: a working set
        of at least 4 × the last-level cache, the server's decode threads, RUN_SAMPLES samples),
        taken once and shared by every lesson; a replay returns the recorded run's. A run recorded
        before readings were shared replays the lesson's own recorded reading instead."""
        reading = self.shared.bandwidth_before(self.server_threads())
        if reading is None:  # replaying a run whose lessons each measured their own
            return self.host("read_bandwidth", lambda: None)
        return reading

    def run_bandwidth_since(self) -> dict | None:
        """`run_bandwidth()` for a lesson that began to read it later: None when replaying a run that recorded
        no reading (none in its manifest, none of the lesson's own), never a guess, so older recordings still replay."""
        if self.replaying and self.shared.bandwidth_record.before is None and not self.recorded("read_bandwidth"):
            return None
        return self.run_bandwidth()

    def run_bandwidth_after(self) -> dict | None:
        """The run's second reading, taken now, after the decode work (None when replaying a run without one)."""
        return self.shared.bandwidth_after()

    def run_bandwidth_drift(self) -> dict | None:
        return self.shared.bandwidth_record.drift

    def readable_model(self) -> Path | None:
        """The served model's file when it is readable here; None for a remote server without --model.
        (A file that is there but is not a valid GGUF still fails when a lesson reads it.)"""
        return self._model_path if self._model_path is not None and self._model_path.is_file() else None

    def model_info(self) -> dict[str, Any] | None:
        """The served model's GGUF facts (`gguf.read_model_info`), recorded as a host value;
        None when no model file is readable here. A corrupt file raises its GGUFError."""
        return self.host("model_info", lambda: read_model_info(p) if (p := self.readable_model()) else None)

    def require_model(self) -> Path:
        if self._model_path is None or not self._model_path.is_file():
            raise BytesupError(
                f"Lesson {self.lesson_id} reads the model file, but none is readable here "
                f"({self._model_path or 'the server did not say which file it serves'}). "
                "Pass --model PATH.gguf (the same file the server runs)."
            )
        return self._model_path

    # files a lesson computes from, on every run and replay ----------------------------------
    @staticmethod
    def file_record(path: Path) -> dict[str, Any]:
        """What a replay needs to find a file again: its name, its path here and its sha256."""
        return {"file": path.name, "path": str(path), "sha256": environment.file_digest(path)["sha256"]}

    def file_with(self, record: dict[str, Any] | None) -> Path | None:
        """The recorded file, here: --model, its recorded path or its name under models/, only with the recorded sha256."""
        if record is None:
            return None
        given = self.readable_model()
        for path in [*([given] if given else []), Path(record["path"]), paths.models_dir() / record["file"]]:
            if path.is_file() and environment.file_digest(path)["sha256"] == record["sha256"]:
                return path
        return None

    @staticmethod
    def file_not_here(record: dict[str, Any], what: str) -> str:
        return (f"{what} over {record['file']} is not recomputed: no file with its recorded sha256 "
                f"({record['sha256'][:12]}…) is at {record['path']} or in models/ here. Build or fetch it "
                "(`bytesup model build` names the course's models) or pass it with --model.")

    # where the user's server runs -----------------------------------------------------------
    def server_facts(self) -> dict[str, Any]:
        """Where the user's server runs, decided once and recorded: on this host or not, on the CPU
        or an accelerator, and so whether this host's measured memory bandwidth bounds its decode."""
        return self.host("server_facts", self._server_facts)

    def _server_facts(self) -> dict[str, Any]:
        return decide(self.server_setup()).to_json()

    def server_setup(self) -> ServerSetup:
        """What `serverfacts.decide` needs, observed here: the URL's host, whether it is this host,
        the server's --n-gpu-layers, and (for a server on this host) the accelerators its engine sees."""
        url_host = urlparse(self.server.base_url).hostname or ""
        local = is_loopback(url_host) or url_host in environment.own_addresses()
        server = self.identity.get("server", {})
        ngl = (server.get("flags") or {}).get("--n-gpu-layers")
        n_gpu_layers = None if ngl is None else str(ngl)
        found: list[str] = []
        if local:
            try:
                found = environment.accelerators(server.get("engine"))
            except environment.AcceleratorsUnknown as exc:
                if offloads(n_gpu_layers):  # the answer decides where decode reads from: the lesson stops, saying why
                    raise
                # --n-gpu-layers 0: every layer stays on the CPU whatever devices there are; the page says what failed.
                self.note(f"This host could not list its accelerators ({exc.tool} {exc.detail}); the server keeps every "
                          "layer on the CPU (--n-gpu-layers 0), so this host's memory feeds its decode all the same.")
        return ServerSetup(url_host=url_host, local=local, n_gpu_layers=n_gpu_layers, accelerators=found,
                           model_readable=self.readable_model() is not None)

    def inherited_flags(self) -> list[str]:
        """The user's server flags (threads, GPU layers, cache types…) for servers a lesson starts."""
        flags = self.identity.get("server", {}).get("flags") or {}
        return process.flags_to_argv({k: v for k, v in flags.items() if k not in NOT_INHERITED})

    # servers of the lesson's own --------------------------------------------------------
    @contextlib.contextmanager
    def local_server(self, label: str, shape: ServerShape | Path | None, flags: list[str] | None = None,
                     native: bool = False) -> Iterator[LlamaServer]:
        """Start a server of our own on a free port (lessons 4, 5b, 7, 8 and 9), its exchanges recorded under `label`.

        `shape` is a `ServerShape` (model, slots, context, extra flags, native), recorded as the host value
        `server_shape_<label>` and kept in `server_shapes`; the older form, a model and raw `flags` (and `native`),
        is still taken and records no shape. The server runs with the user's server flags (see `inherited_flags`),
        then the shape's; on the one engine choice (`process.choose_engine`), a native llama-server only when native."""
        if isinstance(shape, ServerShape):
            if flags is not None or native:
                raise TypeError("local_server takes a ServerShape alone: its flags and native are the shape's")
            self.server_shapes[label] = shape.to_json()
            if self.recorded(f"server_shape_{label}"):
                self.host(f"server_shape_{label}", shape.to_json)
            model, flags, native = shape.model, shape.argv(), shape.native
        else:
            model, flags = shape, list(flags or [])
        if self._replay is not None:
            client = self.run.client("http://replay", ReplayTransport(self._replay.exchanges, label, self._sink), with_key=False)
            try:
                yield client
            finally:
                client.close()
            return
        self.turn(f"starting the server {label}")
        port = process.free_port()
        # Stopped and its state folder removed on every way out: an exception, Ctrl-C, SIGTERM
        # (see run.folder.signals_raise), and by the kernel if this process is killed outright.
        failed_to_start = False
        try:
            try:
                with spent(SERVERS):  # the lesson's time split: starting its servers
                    started = process.start_server(model, [*self.inherited_flags(), "--port", str(port), *flags],
                                                   die_with_parent=True, native=native, answer_s=self.run.timeout,
                                                   stop_check=self._stop_check)
            except ServerStartError:
                failed_to_start = True
                raise
            client = self.run.client(started.url, RecordingTransport(self._sink, label), with_key=False)
            try:
                yield client
            finally:
                client.close()
        finally:
            with spent(SERVERS):  # and stopping them
                process.stop_server(port)
            # A throwaway port's state folder (pid, log) has nothing left to tell once its server is
            # stopped; a server that failed to start keeps its log, which the error points at.
            if not failed_to_start:
                shutil.rmtree(process.state_dir_for(port), ignore_errors=True)

    # building the result -----------------------------------------------------------------
    def step(self, text: str) -> None:
        self.progress.step(text)

    def track(self, items: Iterable[Any], text: str) -> Iterator[Any]:
        """The items, with a progress bar; between items (a lesson's turns) the machine's load is read."""
        for item in self.progress.track(items, text):
            yield item
            self.turn()

    def turn(self, at: str = "") -> None:
        """Read the machine's load between a lesson's turns (live only; `load.Watch.turn` keeps them spaced)."""
        if self.load_watch is not None:
            self.load_watch.turn(at)

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

    def fact(self, stated: BaseModel | str, value: Any = None) -> Any:
        """State a fact of the result, which `check` and `compare` read instead of a table's presentation.

        Typed: `ctx.fact(TopTokens(...))`, a model of `bytesup.store.facts` that names where it is stored;
        the checker reads it back with `result.stated(TopTokens)`. Untyped, for a lesson that declares no
        model yet: `ctx.fact(name, value)` with a JSON value (numbers, strings, lists, dicts)."""
        if isinstance(stated, BaseModel):
            self.facts[facts.name_of(type(stated))] = json.loads(json.dumps(stated.model_dump(mode="json")))
            return stated
        self.facts[stated] = json.loads(json.dumps(value))
        return self.facts[stated]

    def plot(self, name: str, title: str, x_label: str, y_label: str, series: list[Series], **kw: Any) -> Plot:
        p = Plot(name=name, title=title, x_label=x_label, y_label=y_label, series=series, **kw)
        self.plots.append(p)
        return p

    def skip(self, reason: str, command: str) -> LessonResult:
        """End a lesson that measures nothing on this machine: `reason`, one paragraph that says what is missing, is
        the page's note, and the runner records the lesson as skipped (neither ok nor failed) with the reason and
        `command`, the command that enables it. Returns the result to return from main."""
        self.skipped = LessonSkipped(reason, command)
        self.note(reason)
        return self.finish()

    def shows(self, text: str, plot: str | None = None) -> Shows:
        """What this run shows, the page's opening: one to three sentences the lesson's view computed from its
        records (`store.views`), and the name of the plot (one of `ctx.plot`'s) that shows it."""
        if plot is not None and plot not in [p.name for p in self.plots]:
            raise ValueError(f"{self.lesson_id} says what it shows with the plot {plot!r}, which it did not draw")
        self.shown = Shows(text=text, plot=plot)
        return self.shown

    def finish(self) -> LessonResult:
        finished = environment.utc_now()
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
            shows=getattr(self, "shown", None),
        )


# --- progress ------------------------------------------------------------------------

class Reporter:
    """Rich progress: one line for the lesson and its step, one bar for repeated work."""

    def __init__(self, progress: Progress | None, lesson_id: str):
        self.progress = progress
        self.lesson_id = lesson_id
        self.task: TaskID | None = progress.add_task(f"{lesson_id}", total=None) if progress else None

    def step(self, text: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"{self.lesson_id}: {text}")

    def track(self, items: Iterable[Any], text: str) -> Iterator[Any]:
        items = list(items)
        if self.progress is None:
            yield from items
            return
        sub = self.progress.add_task(f"  {text}", total=len(items))
        try:  # a measurement its stopping rule ends early closes the bar too
            for item in items:
                yield item
                self.progress.advance(sub)
        finally:
            self.progress.remove_task(sub)

    def done(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.remove_task(self.task)
