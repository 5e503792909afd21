"""Table rows as named records: a dataclass whose fields are a table's columns, in order.

Each field is declared with `column(name, unit)`; `columns(Row)` gives what `ctx.table` takes as its
columns and `cells(rows)` the rows, each value read by its field's name, so a row can never hold a
value under another column's header.
"""

from __future__ import annotations

import dataclasses
from typing import Any

COLUMN = "bytesup.column"


def column(name: str, unit: str = "") -> Any:
    """A dataclass field that is the table column `name` (in `unit`)."""
    return dataclasses.field(metadata={COLUMN: (name, unit)})


def columns(row_type: type, **fill: str) -> list[tuple[str, str]]:
    """(name, unit) of every column of a row type, in field order. With `fill`, names are filled in as
    templates (`column("decode ceiling, {model}")` with model="…"): a column named after what the run serves."""
    found = [f.metadata.get(COLUMN) for f in dataclasses.fields(row_type)]
    if any(c is None for c in found):
        raise TypeError(f"every field of {row_type.__name__} must be declared with column(name, unit)")
    return [(name.format(**fill) if fill else name, unit) for name, unit in (c for c in found if c is not None)]


def cells(rows: list[Any]) -> list[list[Any]]:
    """Each row's values, by field, in column order."""
    return [[getattr(r, f.name) for f in dataclasses.fields(r)] for r in rows]
