"""The lesson result record (what `<lesson>.json` holds) and its schema versions.

JSON is the source of truth; Markdown and plots are rendered from it (see `render`, `plots`).
"""

from __future__ import annotations

import statistics
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from bytesup.errors import SchemaError
from bytesup.store import facts

F = TypeVar("F", bound=BaseModel)

SCHEMA_VERSION = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Measurement(Strict):
    """A measured quantity with every sample; compare joins runs on (lesson, name, unit, settings)."""

    name: str = Field(description="stable identifier, units in the name where it helps")
    unit: str
    samples: list[float]
    median: float
    min: float
    max: float
    description: str = ""
    settings: dict[str, Any] = Field(default_factory=dict, description="what identifies the configuration measured")
    higher_is_better: bool | None = Field(default=None, description="None: a fact, not a score")

    @classmethod
    def of(cls, name: str, unit: str, samples: list[float], **kw: Any) -> "Measurement":
        if not samples:
            raise ValueError(f"measurement {name} has no samples")
        values = [float(s) for s in samples]
        return cls(name=name, unit=unit, samples=values, median=statistics.median(values),
                   min=min(values), max=max(values), **kw)


class Column(Strict):
    name: str
    unit: str = ""


class Table(Strict):
    name: str
    title: str
    columns: list[Column]
    rows: list[list[Any]]
    notes: list[str] = Field(default_factory=list, description="sentences computed from the rows")
    detail: bool = Field(default=False, description=("shown under the page's Details, not in its main text (a full table "
                                                     "beside its narrowed one, a formula); written to JSON only when true"))


class Series(Strict):
    label: str
    x: list[float]
    y: list[float]
    y_min: list[float] | None = None
    y_max: list[float] | None = None
    style: str = "line"  # line | points | dashed | steps


class Plot(Strict):
    name: str
    title: str
    x_label: str
    y_label: str
    series: list[Series]
    log_x: bool = False
    log_y: bool = False


class Shows(Strict):
    """What a run shows, opening its lesson's page: sentences computed from the run's records, with their numbers,
    and the name of the one plot of the result that shows it (None: the lesson has no such plot)."""

    text: str
    plot: str | None = None


class LessonResult(Strict):
    schema_version: int = SCHEMA_VERSION
    lesson_id: str
    title: str
    started_at: str
    finished_at: str
    model: dict[str, Any] = Field(default_factory=dict, description="the served model's identity")
    server: dict[str, Any] = Field(default_factory=dict, description="engine and build")
    settings: dict[str, Any] = Field(default_factory=dict, description="pinned request settings and options")
    measurements: list[Measurement] = Field(default_factory=list)
    tables: list[Table] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    plots: list[Plot] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict,
                                  description=("named values `check` and `compare` read: figures the lesson computed "
                                               "and the facts its claims need"))
    host_values: dict[str, Any] = Field(default_factory=dict, description="host measurements, replayed as recorded")
    exchanges: str | None = Field(default=None, description="the lesson's HTTP exchanges, relative to the run folder")
    exchange_count: int = 0
    shows: Shows | None = Field(default=None, description="what the run shows, first on the page; written only when set")

    def table(self, name: str) -> Table:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """The JSON written to `<lesson>.json`; a lesson without facts writes no `facts` key, one that says not what
        it shows no `shows` key, and a table of the main text no `detail` key."""
        data = self.model_dump(mode="json")
        if not data["facts"]:
            del data["facts"]
        if data["shows"] is None:
            del data["shows"]
        for table in data["tables"]:
            if not table["detail"]:
                del table["detail"]
        return data

    def fact(self, name: str) -> Any:
        """A fact as stored (JSON); `stated` reads it back typed."""
        if name not in self.facts:
            raise KeyError(name)
        return self.facts[name]

    def stated(self, model: type[F]) -> F | None:
        """The fact `model` declares (`bytesup.store.facts`), typed; None when the lesson does not state it;
        facts.FactShapeError when the stored value does not have the model's shape."""
        return facts.read(self.facts, model)

    def measurement(self, name: str) -> Measurement:
        for m in self.measurements:
            if m.name == name:
                return m
        raise KeyError(name)


# Step-by-step upgrades of an older lesson result: UPGRADES[n] turns version n into n + 1. The run manifest has
# its own table and version (manifest.MANIFEST_UPGRADES): a bump of one never runs the other's steps.
UPGRADES: dict[int, Any] = {}


def upgrade(data: Any, kind: str, where: str, current: int, steps: dict[int, Any]) -> dict[str, Any]:
    """`data` brought to schema version `current` through `steps`, the upgrade table of its own kind."""
    if not isinstance(data, dict):
        raise SchemaError(f"{where} holds a JSON {type(data).__name__}, not an object: it is not a bytesup {kind}. "
                          "Point at a file written by `bytesup run`.")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaError(f"{where} has no integer schema_version: it is not a bytesup {kind}. "
                          "Point at a file written by `bytesup run`.")
    if version < current and any(v not in steps for v in range(version, current)):
        raise SchemaError(f"{where} has {kind} schema version {version}, which no bytesup ever wrote (this one reads "
                          f"version {current}): the file is damaged or not bytesup's. Re-run the lessons into a new folder.")
    if version > current:
        raise SchemaError(
            f"{where} was written with {kind} schema version {version}, newer than this bytesup "
            f"understands ({current}). Update bytesup (git pull, then make install) to read it."
        )
    while version < current:
        data = steps[version](data)
        version = data["schema_version"]
    return data


# Facts an older run shows only in its tables, read from them once: {lesson number: [(fact model, reader)]}.
# Version 1 spans runs written before and after lessons stated facts (a bump would rewrite every recorded file),
# so this step runs on any result whose lesson states the fact not, and only then.
FACTS_FROM_TABLES: dict[str, list[tuple[type[BaseModel], Any]]] = {
    "04": [(facts.lesson04.TopTokens, facts.lesson04.top_tokens_from_tables)],
    "05": [(facts.lesson05.SamplerComparisons, facts.lesson05.sampler_comparisons_from_tables)],
    "06": [(facts.lesson06.KvExamples, facts.lesson06.kv_examples_from_tables)],
}


def tables_to_facts(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a current lesson result, as JSON) with the facts its lesson states today filled in from its tables
    where it predates them; a result that states them, or has no such table, is returned unchanged."""
    steps = FACTS_FROM_TABLES.get(str(data.get("lesson_id", "")).split("_")[0], [])
    found = {}
    for model, from_tables in steps:
        name = facts.name_of(model)
        if name in (data.get("facts") or {}):
            continue
        value = from_tables(data.get("tables") or [])
        if value is not None:
            found[name] = value.model_dump(mode="json")
    return {**data, "facts": {**(data.get("facts") or {}), **found}} if found else data


def load_result(data: dict[str, Any], where: str) -> LessonResult:
    return LessonResult.model_validate(tables_to_facts(upgrade(data, "lesson result", where, SCHEMA_VERSION, UPGRADES)))
