"""Table rows as named records: a dataclass whose fields are a table's columns, in order.

Each field is declared with `column(name, unit)`, or, where one value is shown as several columns (a spread of
samples: its median, lowest and highest), with `spread(...)` or `family(...)`; `columns(Row)` gives what `ctx.table`
takes as its columns and `cells(rows)` the rows, each value read by its field's name, so a row can never hold a value
under another column's header. `from_cells(Row, rows)` reads a stored table's rows back as records.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from bytesup.course.ceiling import Spread

COLUMN = "bytesup.column"
FAMILY = "bytesup.family"
MAKE = "bytesup.make"

# One column of a field: the attribute of the field's value it shows (None: the value itself), its name and unit.
Part = tuple[str | None, str, str]


def column(name: str, unit: str = "") -> Any:
    """A dataclass field that is the table column `name` (in `unit`)."""
    return dataclasses.field(metadata={COLUMN: (name, unit)})


def family(make: Callable[..., Any], *parts: tuple[str, str, str]) -> Any:
    """A dataclass field whose value is shown as several columns, one per (attribute of the value, name, unit); `make`,
    a dataclass, builds the value back from those of its attributes that are its fields (one it computes, a property,
    is only read)."""
    return dataclasses.field(metadata={FAMILY: parts, MAKE: make})


def spread(median: str = "median", low: str = "min", high: str = "max", unit: str = "") -> Any:
    """A field holding a spread of samples (`course.ceiling.Spread`): three columns, its median, lowest and highest,
    headed `median`, `low` and `high`, each in `unit`."""
    return family(Spread, ("median", median, unit), ("min", low, unit), ("max", high, unit))


def parts(row_type: type) -> dict[str, list[Part]]:
    """Each field's columns, by field name, in field order."""
    found: dict[str, list[Part]] = {}
    for f in dataclasses.fields(row_type):
        if COLUMN in f.metadata:
            name, unit = f.metadata[COLUMN]
            found[f.name] = [(None, name, unit)]
        elif FAMILY in f.metadata:
            found[f.name] = list(f.metadata[FAMILY])
        else:
            raise TypeError(f"every field of {row_type.__name__} must be declared with column(name, unit)")
    return found


def values(row: Any, name: str, its_parts: list[Part]) -> list[Any]:
    """The cells of the field `name` of `row`: its value, or the attributes of it that its columns show."""
    value = getattr(row, name)
    return [value if attr is None else getattr(value, attr) for attr, _, _ in its_parts]


def columns(row_type: type, **fill: str) -> list[tuple[str, str]]:
    """(name, unit) of every column of a row type, in field order. With `fill`, names are filled in as
    templates (`column("decode ceiling, {model}")` with model="…"): a column named after what the run serves."""
    return [(name.format(**fill) if fill else name, unit)
            for its_parts in parts(row_type).values() for _, name, unit in its_parts]


def cells(rows: list[Any]) -> list[list[Any]]:
    """Each row's values, by field, in column order."""
    out = []
    for r in rows:
        row: list[Any] = []
        for f in dataclasses.fields(r):
            family_parts = f.metadata.get(FAMILY)
            row += values(r, f.name, list(family_parts)) if family_parts else [getattr(r, f.name)]
        out.append(row)
    return out


def from_cells(row_type: type, rows: list[list[Any]]) -> list[Any]:
    """Records of `row_type` from their cells, in column order (a stored table's rows): the inverse of `cells`."""
    out = []
    for row in rows:
        values = iter(row)
        args = []
        for f in dataclasses.fields(row_type):
            family_parts = f.metadata.get(FAMILY)
            if not family_parts:
                args.append(next(values))
                continue
            make = f.metadata[MAKE]
            given = {attr: next(values) for attr, _, _ in family_parts}
            args.append(make(**{g.name: given[g.name] for g in dataclasses.fields(make) if g.init}))
        out.append(row_type(*args))
    return out
