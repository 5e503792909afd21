"""Reference files (`references/*.json`) of `bytesup check`: published figures, each with the scope
it was measured in (model, quantization, hardware, engine, server flags) and a tolerance.

A figure addresses the run's number by name: a measurement (`"measurement"`, with `settings`),
a fact a lesson stated (`"fact"`, `"key"`, `"row"`, `"field"`, e.g. lesson 4's `top_tokens`, which an older
run's tables became when it was loaded), or a table cell (`"table"`, `"row"`, `"column"`).

Units: `unit` is the unit of `published`. Facts hold probabilities as fractions of 1 (each fact's
model in `bytesup.store.facts` names its fields' units); a figure published in percent says `"unit": "%"` and check multiplies the
fact's fraction by 100 before comparing. Tolerances are in the figure's unit (percentage points
for "%").

A run outside a reference's scope gets "not applicable" with what differs; inside it, the run's
number is compared.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from bytesup.check.compare import token_text
from bytesup.course import published
from bytesup.store.runs import Run
from bytesup.errors import BytesupError
from bytesup.store.facts import FACTS, FactShapeError
from bytesup.store.facts.lesson04 import NAMED_BEFORE
from bytesup.paths import REPO_ROOT
from bytesup.store.render import fmt
from bytesup.store.results import LessonResult, Strict
from bytesup.check.verdicts import COURSE, FAIL, INCONCLUSIVE, NA, PASS, REFERENCE, ClaimResult, find_lesson, measurements, missing

REFERENCE_SCHEMA_VERSION = 1


def references_dir() -> Path:
    return REPO_ROOT / "references"


class ModelScope(Strict):
    name: str = Field(description="model name as the file and GGUF spell it, e.g. deepseek-coder-6.7b-instruct")
    sha256: str | None = Field(default=None, description="the model file's sha256: when given, only that exact file is in scope")
    quantization: str | None = Field(default=None, description="e.g. Q8_0; must appear in the file name")
    size_bytes: float | None = Field(default=None, description="published file size")
    size_tolerance: float = Field(default=0.05, description="relative tolerance on size_bytes")


class HardwareScope(Strict):
    name: str
    gpu_contains: list[str] = Field(default_factory=list, description="any of these in a GPU name (nvidia-smi) matches")
    cpu_contains: list[str] = Field(default_factory=list, description="any of these in the CPU model matches")
    cpu_only: bool = Field(default=False, description="any host without a GPU matches (llama.cpp's CPU backend)")


class EngineScope(Strict):
    name: str
    engines: list[str] = Field(default_factory=list, description="accepted values of the manifest's engine.engine")


class Scope(Strict):
    model: ModelScope
    hardware: HardwareScope | None = None
    engine: EngineScope | None = None
    flags: dict[str, str | None] = Field(default_factory=dict,
                                         description="server flags (canonical long names) the figures were measured with")


class Tolerance(Strict):
    relative: float | None = None
    absolute: float | None = None
    missing: int | None = Field(default=None, description="for a set of tokens: how many of the published ones may be absent")

    def allows(self, observed: float, expected: float) -> bool:
        gap = abs(observed - expected)
        ok = False
        if self.absolute is not None:
            ok = ok or gap <= self.absolute + 1e-12
        if self.relative is not None:
            ok = ok or gap <= self.relative * abs(expected) + 1e-12
        return ok

    def text(self, unit: str) -> str:
        parts = []
        if self.absolute is not None:
            parts.append(f"±{fmt(self.absolute)}" + (" percentage points" if unit == "%" else (f" {unit}" if unit else "")))
        if self.relative is not None:
            parts.append(f"±{self.relative:.0%} of the published value")
        if self.missing is not None:
            parts.append(f"at most {self.missing} absent")
        return " or ".join(parts) or "exact"


class Figure(Strict):
    id: str
    claim: str = Field(description="the published statement, in our words")
    lesson: str = Field(description="lesson id, e.g. 04_next_token (matched on its number)")
    measurement: str | None = Field(default=None, description="a measurement's name")
    settings: dict[str, Any] = Field(default_factory=dict, description="measurement settings the figure was taken with")
    fact: str | None = Field(default=None, description="a fact's name, e.g. top_tokens")
    key: str | None = Field(default=None, description="with fact: the entry of the fact, e.g. top8_capital_of_france")
    field: str | None = Field(default=None, description="with fact: the field of the selected row, e.g. probability or token")
    table: str | None = Field(default=None, description="older files: a table's name (with column)")
    column: str | None = None
    row: dict[str, Any] = Field(default_factory=dict,
                                description="{field or column: value} selecting one row, e.g. {\"token\": \" Paris\"} or {\"rank\": 1}")
    aggregate: Literal["cell", "sum", "set"] = "cell"
    rows: int | None = Field(default=None, description="for sum and set: the first N rows by rank")
    course_figure: str | None = Field(default=None, description=(
        "the figure's name in bytesup.course.published.LESSON4 (e.g. paris_logprob, fibonacci_top_two_percent[0]): "
        "`published` is read from there, never typed twice"))
    published: float | list[float] | str | list[str] = Field(
        description="a number, several runs' numbers, a token (the cell must equal it) or, with aggregate set, the tokens")
    unit: str = Field(default="", description="the unit of published; a fact's fractions are converted to it (% is ×100)")
    tolerance: Tolerance

    @model_validator(mode="before")
    @classmethod
    def _from_the_course(cls, data: Any) -> Any:
        """A figure that names its course figure takes `published` from bytesup.course.published."""
        if not isinstance(data, dict) or data.get("course_figure") is None:
            return data
        if "published" in data:
            raise ValueError(f"figure {data.get('id')!r} names course_figure {data['course_figure']!r} and also gives "
                             "published: give one of them")
        try:
            return {**data, "published": published.course_figure(str(data["course_figure"]))}
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None

    @model_validator(mode="after")
    def _one_address(self) -> "Figure":
        named = [n for n in ("measurement", "fact", "table") if getattr(self, n)]
        if len(named) != 1:
            raise ValueError(f"a figure names exactly one of measurement, fact or table (this one: {', '.join(named) or 'none'})")
        if self.fact and not self.field:
            raise ValueError("a figure that addresses a fact names its field")
        if self.table and not self.column:
            raise ValueError("a figure that addresses a table names its column")
        return self

    @property
    def is_tokens(self) -> bool:
        return isinstance(self.published, str) or self.aggregate == "set"


class Reference(Strict):
    schema_version: int = 1
    kind: Literal["bytesup-reference"] = "bytesup-reference"
    name: str
    source: str = Field(description="where the figures were published")
    measured_on: str | None = None
    scope: Scope
    figures: list[Figure]

    @property
    def group(self) -> str:
        """COURSE where the figures come from the course (some name a `course_figure` of bytesup.course.published),
        else REFERENCE: a file of figures taken from a recorded run."""
        return COURSE if any(f.course_figure for f in self.figures) else REFERENCE


def load_reference(path: Path) -> Reference:
    path = Path(path)
    if not path.is_file():
        raise BytesupError(f"Reference file {path} does not exist. The course's references live in {references_dir()}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise BytesupError(f"Reference file {path} is not valid JSON ({exc}).") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > REFERENCE_SCHEMA_VERSION:
        raise BytesupError(f"Reference file {path} has schema version {version}, newer than this bytesup reads "
                           f"({REFERENCE_SCHEMA_VERSION}). Update bytesup.")
    try:
        return Reference.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BytesupError(f"Reference file {path} does not have the reference layout: "
                           f"{'.'.join(map(str, first['loc']))}: {first['msg']}. See the files in {references_dir()}.") from None


def default_references() -> list[Path]:
    folder = references_dir()
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


# --- scope --------------------------------------------------------------------------------------

def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _size_text(n: float | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def scope_differences(run: Run, scope: Scope) -> list[str]:
    """What about the run lies outside the reference's scope (empty: in scope)."""
    diffs = []
    m = run.model_identity()
    file = str(m.get("file") or m.get("name") or "")
    want = scope.model
    size = m.get("size_bytes")
    if want.sha256:
        ok = m.get("sha256") == want.sha256
    else:
        ok = _norm(want.name) in _norm(file)
        if want.quantization:
            ok = ok and _norm(want.quantization) in _norm(file)
        if want.size_bytes and size:
            ok = ok and abs(size - want.size_bytes) <= want.size_tolerance * want.size_bytes
    if not ok and want.sha256:
        diffs.append(f"model is {file or 'unknown'} (sha256 {str(m.get('sha256') or 'unknown')[:12]}…), reference is "
                     f"{want.name} (sha256 {want.sha256[:12]}…)")
    elif not ok:
        ref = " ".join(x for x in (want.name, want.quantization) if x)
        diffs.append(f"model is {file or 'unknown'} ({_size_text(size)}), reference is {ref} ({_size_text(want.size_bytes)})")
    host = run.manifest.host
    if scope.hardware is not None:
        hw = scope.hardware
        gpus = host.gpus or []
        cpu = host.cpu or ""
        match = any(s.lower() in g.lower() for s in hw.gpu_contains for g in gpus) or any(s.lower() in cpu.lower() for s in hw.cpu_contains)
        match = match or (hw.cpu_only and bool(host) and not gpus)
        if not match:
            here = f"{cpu or 'unknown CPU'}" + (f" with GPU {', '.join(gpus)}" if gpus else ", no GPU")
            if not host:
                here = "unknown (the run has no manifest)"
            diffs.append(f"hardware is {here}, reference is {hw.name}")
    eng = run.manifest.engine
    first = next(iter(run.results.values()), None)
    engine = eng.engine or (first.server.get("engine") if first else None)
    if scope.engine is not None and scope.engine.engines and engine not in scope.engine.engines:
        diffs.append(f"engine is {engine or 'unknown'}, reference is {scope.engine.name}")
    flags = eng.flags if eng.flags is not None else (first.server.get("flags") if first else None)
    flags = flags or {}
    # A flag the run did not record (a server started outside bytesup) is unknown, not different.
    differing = [f"{k} {flags[k]} (reference {v})" for k, v in scope.flags.items()
                 if k in flags and str(flags[k]) != str(v)]
    if differing:
        diffs.append("server flags differ: " + ", ".join(differing))
    return diffs


# --- units ----------------------------------------------------------------------------------------

DIMENSIONLESS = {"", "×", "x", "ratio", "fraction", "share", "1"}
PERCENT = {"%", "percent"}

def _to_unit(value: float, unit: str, to_unit: str) -> float | None:
    """`value` in `unit` expressed in `to_unit`: the same, or % <-> a plain fraction; None otherwise."""
    u, t = unit.strip(), to_unit.strip()
    if u == t or (u in DIMENSIONLESS and t in DIMENSIONLESS):
        return value
    if u in DIMENSIONLESS and t in PERCENT:
        return value * 100.0
    if u in PERCENT and t in DIMENSIONLESS:
        return value / 100.0
    return None


def _unit_suffix(unit: str) -> str:
    return unit if unit in ("%", "×") else (f" {unit}" if unit else "")


def _published_text(fig: Figure) -> tuple[float, str]:
    if isinstance(fig.published, list):
        values = [float(v) for v in fig.published]
        med = statistics.median(values)
        return med, f"{' and '.join(fmt(v) for v in values)}{_unit_suffix(fig.unit)} (median {fmt(med)})"
    return float(fig.published), f"{fmt(float(fig.published))}{_unit_suffix(fig.unit)}"


# --- what a figure addresses ------------------------------------------------------------------

class Rows:
    """The rows a fact or table figure addresses, as {field: value} dicts ranked by rank, with the
    unit of each field and the words that name them in a reason."""

    def __init__(self, rows: list[dict[str, Any]], units: dict[str, str], where: str):
        rank = [r.get("rank") for r in rows]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rank):
            rows = sorted(rows, key=lambda r: float(r["rank"]))
        self.rows, self.units, self.where = rows, units, where


def _fact_rows(lesson: LessonResult, fig: Figure) -> Rows | str:
    """The rows of `fig.fact` (entry `fig.key`), read through the fact's model when it has one, or why there are none."""
    assert fig.fact is not None
    model = FACTS.get(fig.fact)
    try:
        typed = lesson.stated(model) if model is not None else None
    except FactShapeError as exc:
        return f"lesson {lesson.lesson_id}'s fact {exc}"
    if fig.fact not in lesson.facts:
        return f"lesson {lesson.lesson_id} states no fact {fig.fact} (a run made before lessons stated it)"
    value: Any = typed.model_dump(mode="json") if typed is not None else lesson.facts[fig.fact]
    where = fig.fact
    if fig.key is not None:
        if not isinstance(value, dict) or fig.key not in value:
            return f"fact {fig.fact} has no entry {fig.key}"
        value, where = value[fig.key], f"{fig.fact}[{fig.key}]"
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, list)), [value])
    if not isinstance(value, list) or not all(isinstance(r, dict) for r in value):
        return f"fact {where} is not a list of rows"
    return Rows(list(value), dict(getattr(model, "units", {})), where)


def _table_rows(lesson: LessonResult, fig: Figure) -> Rows | str:
    """An older reference's table: its rows keyed by lower-cased column name (the first of equal names)."""
    table = next((t for t in lesson.tables if t.name == fig.table), None)
    if table is None:
        return f"lesson {lesson.lesson_id} has no table {fig.table}"
    names = [c.name.strip().lower() for c in table.columns]
    units: dict[str, str] = {}
    for n, c in zip(names, table.columns, strict=True):
        units.setdefault(n, c.unit)
        if n in NAMED_BEFORE:  # a figure written before lesson 4's columns were renamed addresses the older name
            units.setdefault(NAMED_BEFORE[n], c.unit)
    rows = []
    for r in table.rows:
        row: dict[str, Any] = {}
        for n, cell in zip(names, r, strict=False):
            row.setdefault(n, cell)
            if n in NAMED_BEFORE:
                row.setdefault(NAMED_BEFORE[n], cell)
        rows.append(row)
    return Rows(rows, units, f"table {fig.table}")


def _field(fig: Figure) -> str:
    return (fig.field if fig.fact else (fig.column or "").strip().lower()) or ""


def _cell_matches(cell: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(cell) == float(want)
        except (TypeError, ValueError):
            return False
    return token_text(cell) == str(want)


def _select(rows: Rows, fig: Figure) -> list[dict[str, Any]] | str:
    chosen = rows.rows
    for key, want in fig.row.items():
        k = key if fig.fact else key.strip().lower()
        if chosen and all(k not in r for r in chosen):
            return f"{rows.where} has no {'field' if fig.fact else 'column'} {key}"
        chosen = [r for r in chosen if _cell_matches(r.get(k), want)]
    if not chosen:
        sel = ", ".join(f"{k} {v!r}" for k, v in fig.row.items())
        return f"{rows.where} has no row with {sel} (the top tokens differ)"
    return chosen


def _addressed(run: Run, fig: Figure) -> tuple[LessonResult | None, Rows | str]:
    prefix = fig.lesson[:3]
    lesson = find_lesson(run, prefix)
    if lesson is None:
        return None, missing(run, prefix, fig.lesson)
    return lesson, (_fact_rows(lesson, fig) if fig.fact else _table_rows(lesson, fig))


def _observe(run: Run, fig: Figure) -> tuple[float | None, str]:
    """(observed value in the figure's unit, '') or (None, why not applicable)."""
    if fig.measurement:
        lesson = find_lesson(run, fig.lesson[:3])
        if lesson is None:
            return None, missing(run, fig.lesson[:3], fig.lesson)
        ms = measurements(lesson, fig.measurement)
        if not ms:
            return None, f"lesson {lesson.lesson_id} has no measurement {fig.measurement}"
        fitting = [m for m in ms if all(m.settings.get(k) == v for k, v in fig.settings.items())]
        if not fitting:
            got = "; ".join(", ".join(f"{k}={fmt(m.settings.get(k))}" for k in fig.settings) for m in ms)
            want = ", ".join(f"{k}={fmt(v)}" for k, v in fig.settings.items())
            return None, f"the run measured {fig.measurement} with {got}, the reference with {want}"
        m = fitting[0]
        value = _to_unit(m.median, m.unit, fig.unit)
        if value is None:
            return None, f"units differ: the run's {fig.measurement} is in {m.unit or '(none)'}, the reference in {fig.unit or '(none)'}"
        return value, ""
    _, rows = _addressed(run, fig)
    if isinstance(rows, str):
        return None, rows
    field = _field(fig)
    unit = rows.units.get(field, "")
    if fig.aggregate == "sum":
        chosen = rows.rows[: fig.rows] if fig.rows else rows.rows
        cells = [r.get(field) for r in chosen]
    else:
        selected = _select(rows, fig)
        if isinstance(selected, str):
            return None, selected
        cells = [selected[0].get(field)]
    try:
        total = sum(float(c) for c in cells if c is not None)
    except (TypeError, ValueError):
        return None, f"{rows.where}'s {field} is not a number"
    if not cells or all(c is None for c in cells):
        return None, f"{rows.where} has no {field} there"
    value = _to_unit(total, unit, fig.unit)
    if value is None:
        return None, f"units differ: {rows.where}'s {field} is in {unit or '(none)'}, the reference in {fig.unit or '(none)'}"
    return value, ""


def _check_tokens(run: Run, fig: Figure, base: dict[str, Any]) -> ClaimResult:
    """A token figure: one row's token equal to a token, or the set of the first N tokens (aggregate set)."""
    _, rows = _addressed(run, fig)
    if isinstance(rows, str):
        return ClaimResult(status=NA, detail=rows, **base)
    field = _field(fig)
    if rows.rows and all(field not in r for r in rows.rows):
        return ClaimResult(status=NA, detail=f"{rows.where} has no {field}", **base)
    if fig.aggregate == "set":
        want = [str(t) for t in (fig.published if isinstance(fig.published, list) else [fig.published])]
        got = [token_text(r.get(field)) for r in rows.rows[: fig.rows or len(want)]]
        absent = [t for t in want if t not in got]
        ok = len(absent) <= (fig.tolerance.missing or 0)
        return ClaimResult(status=PASS if ok else FAIL, observed=", ".join(repr(t) for t in got),
                           detail=("all present" if not absent else "absent: " + ", ".join(repr(t) for t in absent)), **base)
    selected = _select(rows, fig)
    if isinstance(selected, str):
        return ClaimResult(status=NA, detail=selected, **base)
    got_token = token_text(selected[0].get(field))
    ok = got_token == fig.published
    return ClaimResult(status=PASS if ok else FAIL, observed=repr(got_token),
                       detail="the same token" if ok else f"the run's token is {got_token!r}", **base)


def exact_probability(run: Run, fig: Figure) -> float | None:
    """For a reference figure that is the probability of one of lesson 4's top tokens: the same token's probability in
    the run's own numpy pass from the served file's bytes (lesson 4's fact `numpy_pass`, computed with no rounding of
    the activations), in percent; None for any other figure, or where the run has no such pass."""
    if fig.fact != "top_tokens" or fig.field != "probability" or fig.key is None or fig.aggregate == "sum":
        return None
    lesson, rows = _addressed(run, fig)
    if lesson is None or isinstance(rows, str):
        return None
    selected = _select(rows, fig)
    passed = lesson.facts.get("numpy_pass")
    if isinstance(selected, str) or not isinstance(passed, dict) or not passed.get("recomputed"):
        return None
    served = passed.get("served")
    prompts = served.get("prompts") if isinstance(served, dict) else None
    prompt = prompts.get(fig.key) if isinstance(prompts, dict) else None
    ids = prompt.get("probabilities_of_server_ids") if isinstance(prompt, dict) else None
    found = ids.get(str(selected[0].get("id"))) if isinstance(ids, dict) else None
    return 100.0 * float(found) if isinstance(found, (int, float)) and not isinstance(found, bool) else None


def rounding_explains(observed: float, expected: float, exact: float | None, fig: Figure) -> str | None:
    """Why a probability that misses the reference cannot judge the run: where this run's server gives what numpy's
    exact pass gives (within the figure's tolerance) and the reference lies outside it from that exact value, the
    reference holds its own engine's rounding of the activations (another CPU's kernels round them in other places,
    lesson 4's numpy comparison shows by how much), not what the file computes. None where it does not explain it."""
    if exact is None or not fig.tolerance.allows(observed, exact) or fig.tolerance.allows(expected, exact):
        return None
    return (f"this run's server gives {fmt(observed)}% and numpy's pass from the file's bytes (no rounding of the "
            f"activations, lesson 4) {fmt(exact)}%: the server computes what the file holds. The reference's "
            f"{fmt(expected)}% lies {abs(expected - exact):.3g} points from that exact value, so it holds its own "
            "engine's rounding of the activations (kernels for another CPU round them in other places), and cannot "
            "judge this run")


def check_reference(run: Run, ref: Reference) -> list[ClaimResult]:
    diffs = scope_differences(run, ref.scope)
    results = []
    for fig in ref.figures:
        if fig.is_tokens:
            shown = fig.published if isinstance(fig.published, list) else [fig.published]
            expected, pub_text = math.nan, ", ".join(repr(t) for t in shown)
        else:
            expected, pub_text = _published_text(fig)
        base = dict(id=fig.id, source=ref.name, group=ref.group, lesson=fig.lesson, claim=fig.claim, expected=pub_text,
                    tolerance=fig.tolerance.text(fig.unit) if not isinstance(fig.published, str) else "exact")
        if diffs:
            results.append(ClaimResult(status=NA, detail="; ".join(diffs), **base))
            continue
        if fig.is_tokens:
            results.append(_check_tokens(run, fig, base))
            continue
        observed, why = _observe(run, fig)
        if observed is None:
            results.append(ClaimResult(status=NA, detail=why, **base))
            continue
        ok = fig.tolerance.allows(observed, expected)
        off = f"{observed - expected:+,.4g}" + (" percentage points" if fig.unit == "%" else _unit_suffix(fig.unit))
        rounding = None if ok else rounding_explains(observed, expected, exact_probability(run, fig), fig)
        results.append(ClaimResult(status=PASS if ok else (INCONCLUSIVE if rounding else FAIL),
                                   observed=f"{fmt(observed)}{_unit_suffix(fig.unit)}",
                                   detail=f"off by {off}" + (f"; inconclusive: {rounding}" if rounding else ""), **base))
    return results

