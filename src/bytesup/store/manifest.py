"""The run manifest (`manifest.json` of a run folder) as a typed record, with its own schema version and upgrades.

`Manifest` says what a run was asked to do and where it ran: the command, the host, the packages, the code's
commit, the engine and the model it served, the options, the run's bandwidth readings and, per lesson, its
`LessonEntry` (status, files, time, error). The runner writes it after every change; compare, check, history
and report read it back through these types.

Its schema version and upgrade steps are the manifest's alone: `MANIFEST_UPGRADES[n]` turns version n into
n + 1, and the lesson results (`results.SCHEMA_VERSION`, `results.UPGRADES`) move on their own.

Fields this bytesup does not know (written by a newer bytesup, or by an older one before a field was dropped)
are kept as they were read and written back unchanged on a resume; nothing here reads them. A known field
with a value of the wrong type is a damaged manifest, a RunFolderError.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bytesup.errors import RunFolderError
from bytesup.store.results import upgrade

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}
MANIFEST_KIND = "bytesup-run"


class Record(BaseModel):
    """A part of the manifest: unknown fields are kept (see the module's docstring); true when it holds anything."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def __bool__(self) -> bool:
        return bool(self.model_dump(exclude_defaults=True))


class Host(Record):
    hostname: str | None = None
    os: str | None = None
    cpu: str | None = None
    cores: int | None = None
    memory_bytes: int | None = None
    gpus: list[str] | None = None
    python: str | None = None


class Repository(Record):
    commit: str | None = None
    dirty: bool | None = None


class Engine(Record):
    """The server the lessons measured, as probed at the start (run/server.engine_facts); more fields are kept."""

    engine: str | None = None
    build: str | None = None
    build_info: str | None = None
    flags: dict[str, Any] | None = None
    topology: Any = None  # a server split across rpc-servers (llama/topology)
    url: str | None = None
    started_for_run: bool | None = None


class ModelFile(Record):
    path: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    readable_here: bool | None = None


class RecordedOptions(Record):
    """The options recorded: --repeat and the lesson options given (by field name; {} when none was given)."""

    repeat: int | None = None
    lesson_options: dict[str, Any] | None = None


class HostBandwidth(Record):
    """The run's memory bandwidth readings (hostbench.run_bandwidth) before and after its decode work."""

    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    after_error: str | None = None


class TimeSplit(Record):
    """Where a lesson's wall time went, in seconds (host/spent.py): making models, starting and stopping servers,
    the recorded requests (the time at least one was in flight: for requests one at a time, the sum of their client
    wall times), llama-bench, this host's own measurements (`ctx.host`: timings, file reads, the bandwidth reading),
    and the rest, the harness's own arithmetic and writing. The parts add up to `wall_s`. Written by runs made since
    the split was recorded; None in older manifests."""

    wall_s: float | None = None
    models_s: float | None = None
    servers_s: float | None = None
    requests_s: float | None = None
    llama_bench_s: float | None = None
    host_s: float | None = None
    rest_s: float | None = None
    requests: int | None = None  # recorded exchanges


class ModelsMade(Record):
    """The models the run made ready before its first lesson (its own server's, and those its lessons declare):
    every one by name, those made now (built, fetched or derived) and the seconds that took."""

    models: list[str] = Field(default_factory=list)
    made: list[str] = Field(default_factory=list)
    seconds: float | None = None
    failed: dict[str, str] | None = None  # by name: why it could not be made (the lessons asking try again)


class EngineGap(Record):
    """The embedded engine against the native build on this CPU, measured once before the lessons (run/engines.py):
    each engine's instruction sets and, where both are ready, one prefill's and one decode's tokens per second on
    each and the ratios embedded ÷ native; where only the embedded one is, what it leaves unused here and the command
    that builds the native one. `sentence` says it in words; `skipped` says why nothing was measured."""

    sentence: str | None = None
    model: str | None = None
    embedded: dict[str, Any] | None = None
    native: dict[str, Any] | None = None
    decode_ratio: float | None = None
    prefill_ratio: float | None = None
    unused_by_embedded: list[str] | None = None
    enable_command: str | None = None
    skipped: str | None = None
    seconds: float | None = None
    load_average: list[float] | None = None  # when the engines were measured


class HarnessLevel(Record):
    """One n_probs of the harness's split (run/harness.py): per pair of requests, the server's part outside its
    timings (the bare client's) and the harness's (the run's client's part minus the bare one's), in ms."""

    n_probs: int
    server_ms: list[float] = Field(default_factory=list)
    harness_ms: list[float] = Field(default_factory=list)
    budget_ms: float | None = None  # the harness's median may take at most this (None: no budget at this n_probs)
    stopped_by: str | None = None  # what stopped its pairs (course.stopping's words); None: a split of fixed pairs
    harness_cpu_ms: list[float] = Field(default_factory=list)  # each kept pair's harness part on the threads' CPU clock
    set_aside_ms: list[float] = Field(default_factory=list)  # the harness parts of the pairs set aside (run/harness.py)


class HarnessSplit(Record):
    """Where a request's time outside the server's timings goes, measured once after the lessons (run/harness.py);
    `skipped` says why nothing was measured."""

    n_predict: int | None = None
    pairs: int | None = None
    prompt: str | None = None
    levels: list[HarnessLevel] = Field(default_factory=list)
    skipped: str | None = None
    seconds: float | None = None
    load_average: list[float] | None = None


class LessonEntry(Record):
    """One lesson of the run: pending, running, ok, skipped (it measured nothing here: `skip_reason`, and the command
    that enables it, `enable_command`), failed or interrupted, with its files and time."""

    status: str | None = None
    title: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    commit: str | None = None
    json_file: str | None = Field(default=None, alias="json")
    markdown: str | None = None
    http_sha256: str | None = None
    json_sha256: str | None = None  # of <id>.json as the run wrote it; None in manifests written before it was kept
    seconds: float | None = None
    error: str | None = None
    traceback: str | None = None
    failed_exchanges: str | None = None
    set_aside: str | None = None
    replay_differences: list[str] | None = None
    skip_reason: str | None = None
    enable_command: str | None = None
    time_split: TimeSplit | None = None  # None: written before lessons' time was split


class Manifest(Record):
    """A run folder's manifest.json."""

    schema_version: int = MANIFEST_SCHEMA_VERSION
    kind: str | None = None
    date: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    command: list[str] = Field(default_factory=list)
    status: str | None = None
    load_average_before: list[float] | None = None
    host: Host = Field(default_factory=Host)
    packages: dict[str, str | None] = Field(default_factory=dict)
    repository: Repository = Field(default_factory=Repository)
    engine: Engine = Field(default_factory=Engine)
    model: ModelFile = Field(default_factory=ModelFile)
    options: RecordedOptions | None = None  # None: written before options were recorded
    replayed_from: str | None = None
    host_bandwidth: HostBandwidth = Field(default_factory=HostBandwidth)
    topologies: dict[str, Any] = Field(default_factory=dict)
    lessons: dict[str, LessonEntry] = Field(default_factory=dict)
    lessons_seconds: float | None = None
    models_made: ModelsMade | None = None  # None: a replay, or written before models were made first
    server_start_s: float | None = None  # the run's own server's start, where the run started one
    engine_gap: EngineGap | None = None  # None: a replay, skipped by BYTESUP_ENGINE_GAP=0, or an older run
    harness_split: HarnessSplit | None = None  # None: a replay, skipped by BYTESUP_HARNESS_PROBE=0, or an older run
    load_average_after: list[float] | None = None

    @classmethod
    def parse(cls, data: Any, where: str) -> "Manifest":
        """`data` (a manifest's JSON) upgraded through the manifest's own steps and typed; a damaged
        one is a SchemaError or a RunFolderError of one paragraph."""
        data = upgrade(data, "run manifest", where, MANIFEST_SCHEMA_VERSION, MANIFEST_UPGRADES)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(map(str, first["loc"]))
            raise RunFolderError(f"{where} is not a run manifest this bytesup can read: {at}: {first['msg'].rstrip('.')}. "
                                 "The run folder is damaged or was edited: re-run the lessons into a new folder "
                                 "(or restore manifest.json from a copy).") from None

    def to_json(self) -> dict[str, Any]:
        """What manifest.json holds: the schema version, then every field that holds something, unknown ones too."""
        return {"schema_version": self.schema_version,
                **self.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude={"schema_version"})}

    def is_run(self) -> bool:
        """Whether it says it is a bytesup run's manifest (an old one says nothing)."""
        return self.kind in (None, MANIFEST_KIND)
