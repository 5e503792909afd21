"""Table rows as named records (bytesup.store.rows): columns in field order, names filled in where a row asks."""

from dataclasses import dataclass

import pytest

from bytesup.store.rows import cells, column, columns


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
