"""Table rows as named records (bytesup.store.rows): columns in field order, names filled in where a row asks."""

from dataclasses import dataclass

import pytest

from bytesup.course.ceiling import Spread
from bytesup.store.facts.lesson06 import WithAndWithout, with_and_without
from bytesup.store.rows import cells, column, columns, from_cells, spread
from bytesup.store.views import table


@dataclass(frozen=True)
class Ceiling:
    machine: str = column("machine")
    tokens_per_s: float = column("decode ceiling, {model}", "tokens/s")


def test_columns_in_field_order_and_names_filled_in():
    assert columns(Ceiling, model="tiny-q8_0") == [("machine", ""), ("decode ceiling, tiny-q8_0", "tokens/s")]
    assert columns(Ceiling) == [("machine", ""), ("decode ceiling, {model}", "tokens/s")]  # nothing to fill: as declared
    assert cells([Ceiling("H100", 33.5)]) == [["H100", 33.5]]


def test_every_field_is_a_column():
    @dataclass(frozen=True)
    class Loose:
        machine: str = column("machine")
        note: str = ""

    with pytest.raises(TypeError, match="every field of Loose"):
        columns(Loose)


@dataclass(frozen=True)
class Phase:
    phase: str = column("phase")
    speed: Spread = spread("decode", "decode min", "decode max", "tokens/s")
    samples: int = column("samples")


def test_a_spread_is_three_columns_its_median_lowest_and_highest():
    assert columns(Phase) == [("phase", ""), ("decode", "tokens/s"), ("decode min", "tokens/s"),
                              ("decode max", "tokens/s"), ("samples", "")]
    assert cells([Phase("short prompt", Spread.of([3.0, 1.0, 2.0]), 3)]) == [["short prompt", 2.0, 1.0, 3.0, 3]]
    narrowed = table("phases", "Phases", Phase, [Phase("long prompt", Spread(5.0, 4.0, 6.0), 2)], [], ["speed"])
    assert [c.name for c in narrowed.columns] == ["decode", "decode min", "decode max"]
    assert narrowed.rows == [[5.0, 4.0, 6.0]]


def test_a_stored_tables_rows_read_back_as_the_records_they_were():
    rows = [Phase("short prompt", Spread(2.0, 1.0, 3.0), 3), Phase("long prompt", Spread(5.0, 4.0, 6.0), 2)]
    assert from_cells(Phase, cells(rows)) == rows


@dataclass(frozen=True)
class Cost:
    n: int = column("n")
    positions: WithAndWithout = with_and_without("with a cache", "without", "ratio", "positions")


def test_a_part_the_value_computes_is_shown_and_not_read_back():
    rows = [Cost(8, WithAndWithout(23, 156))]  # its ratio, 156 ÷ 23, is a property of the value
    assert columns(Cost) == [("n", ""), ("with a cache", "positions"), ("without", "positions"), ("ratio", "×")]
    assert cells(rows) == [[8, 23, 156, 156 / 23]]
    assert from_cells(Cost, cells(rows)) == rows
