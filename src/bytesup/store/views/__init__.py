"""The views of the lessons: one module per lesson (`lesson08`), holding its tables, notes and plots.

A view renders the records a lesson's arithmetic returned, by their declared columns (`store.rows.column`); it
records nothing and measures nothing, so a replay renders the same page from the same records."""

from typing import Any, Sequence

from bytesup.store.results import Column, Table
from bytesup.store.rows import parts, values


def table(name: str, title: str, row_type: type, rows: list[Any], notes: list[str],
          fields: Sequence[str] | None = None) -> Table:
    """The table `name` of `rows`, every one a `row_type`, by its declared columns. With `fields`, only those fields'
    columns, in that order: the record narrowed for the main text, whose every column is in its full table under
    Details. A name `fields` holds that `row_type` lacks is a KeyError."""
    declared = parts(row_type)
    shown = list(declared) if fields is None else list(fields)
    return Table(name=name, title=title, columns=[Column(name=n, unit=u) for f in shown for _, n, u in declared[f]],
                 rows=[[cell for f in shown for cell in values(r, f, declared[f])] for r in rows], notes=notes)


def pick(columns: list[tuple[str, str]], rows: list[list[Any]], keep: list[str]) -> tuple[list[tuple[str, str]], list[list[Any]]]:
    """The columns named in `keep` (in that order) and each row's cells of them: a table narrowed for the main text,
    whose full version goes under Details. A name `keep` holds that `columns` lacks is a KeyError."""
    names = [name for name, _ in columns]
    at = []
    for name in keep:
        if name not in names:
            raise KeyError(name)
        at.append(names.index(name))
    return [columns[i] for i in at], [[row[i] for i in at] for row in rows]


def show_narrowed(page: Any, name: str, title: str, full_title: str, cols: list[tuple[str, str]], rows: list[list[Any]],
                  keep: list[str], notes: list[str], formulas: list[str]) -> None:
    """On `page` (a lesson's context, `page.table`): the table `name`_main with the columns `keep` and the notes, then
    the full table `name` under Details (marked `detail`) with the notes that give the formulas."""
    shown_cols, shown_rows = pick(cols, rows, keep)
    page.table(f"{name}_main", title, shown_cols, shown_rows, notes=notes)
    page.table(name, full_title, cols, rows, notes=formulas).detail = True
