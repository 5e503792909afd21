"""What every lesson's view writes to, and how it shows a record by its declared columns (store.rows.column)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from bytesup.store.results import Series
from bytesup.store.rows import COLUMN

HUNDREDTHS = ("%", "points")  # a record holds fractions of 1; these columns show them × 100


class Page(Protocol):
    """Where a view writes: the lesson's context (`table`, `note`, `plot`)."""

    def table(self, name: str, title: str, columns: list[tuple[str, str]], rows: list[list[Any]],
              notes: list[str] | None = None) -> Any: ...
    def note(self, text: str) -> None: ...
    def plot(self, name: str, title: str, x_label: str, y_label: str, series: list[Series], **kw: Any) -> Any: ...


def by_columns(record: type, fields: Sequence[str], records: Sequence[Any],
               shown: dict[str, Any] | None = None) -> tuple[list[tuple[str, str]], list[list[Any]]]:
    """The columns `fields` of a record type (their declared name and unit: a field's column, or one the record
    computes, named in its `COLUMNS`) and each record's values under them: a fraction under % or points × 100, a
    field in `shown` through its function."""
    declared = {f.name: f.metadata[COLUMN] for f in dataclasses.fields(record) if COLUMN in f.metadata}
    declared.update(getattr(record, "COLUMNS", {}))
    heads = [declared[f] for f in fields]

    def value(r: Any, f: str, unit: str) -> Any:
        v = getattr(r, f)
        if shown and f in shown:
            return shown[f](v)
        return 100 * v if unit in HUNDREDTHS and v is not None else v
    return heads, [[value(r, f, unit) for f, (_, unit) in zip(fields, heads, strict=True)] for r in records]


def stopped(what: str, *args: Any) -> str:
    """One sentence on what stopped a measurement under its plan's stopping rule: `stopped(what, stop, rule)` or
    `stopped(what, unit, stop, rule)` (course.stopping.Stop, the plan's store.plans.stopping.StoppingRule; `unit` what
    it repeats, "sample" unless said): how many it took, and whether its medians were tight, or the maximum or the
    budget came first, with the medians' uncertainty then."""
    unit, stop, rule = args if len(args) == 3 else ("sample", *args)
    u = f"±{100 * stop.uncertainty:.2g}%" if stop.uncertainty != float("inf") else "not known"
    took = f"{what} took {stop.samples} {unit}{'s' if stop.samples != 1 else ''}"
    if stop.why == "tight":
        return (f"{took}: the stopping rule stopped it once its medians were known within ±{100 * rule.tight:g}% "
                f"(at {u}), {'at its minimum' if stop.samples == rule.minimum else f'above its minimum of {rule.minimum}'}.")
    if stop.why == "budget":
        return (f"{took}: the stopping rule stopped it when their own time, {stop.spent_s:.3g} s, reached its budget of "
                f"{rule.budget_s:g} s, its medians known to {u} (it stops at ±{100 * rule.tight:g}%).")
    return (f"{took}, the stopping rule's maximum (the run's --repeat), its medians known to {u} "
            f"(it stops earlier at ±{100 * rule.tight:g}%).")
