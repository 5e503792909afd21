"""What every typed fact shares: the registry by name, the strict model a fact is (`Record`, or a `RECORD` pydantic
dataclass whose fields are a figure's columns), reading a stored fact back as its model, and the one conversion of a
probability shown in percent to a fraction of 1."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bytesup.store.rows import COLUMN

# {stored name: model}: every fact a lesson states, filled by `stated`.
FACTS: dict[str, type[BaseModel]] = {}

M = TypeVar("M", bound=type[BaseModel])
F = TypeVar("F", bound=BaseModel)


class Record(BaseModel):
    """A fact, or a part of one, that holds its declared fields and no other."""
    model_config = ConfigDict(extra="forbid")


# A figure's record is a pydantic dataclass: the fact states it, and its fields' columns (store.rows.column) are what
# the view shows of it. A field the fact does not state (`Shown`, excluded) is None in a fact read back.
RECORD = ConfigDict(extra="forbid")
Shown = Field(exclude=True)


def shown(name: str, unit: str = "") -> Any:
    """A column of the view that the fact does not state: None in a fact read back."""
    return dataclasses.field(default=None, metadata={COLUMN: (name, unit)})


class FactShapeError(ValueError):
    """A fact a result states does not have the shape of its model."""


def stated(name: str) -> Callable[[M], M]:
    """Class decorator: the model is the fact stored under `name` (one name, one model)."""
    def register(model: M) -> M:
        if name in FACTS and FACTS[name] is not model:
            raise ValueError(f"two models state the fact {name!r}: {FACTS[name].__name__} and {model.__name__}")
        FACTS[name] = model
        model.__fact_name__ = name  # type: ignore[attr-defined]
        return model
    return register


def name_of(model: type[BaseModel]) -> str:
    name = getattr(model, "__fact_name__", None)
    if name is None or FACTS.get(name) is not model:
        raise TypeError(f"{model.__name__} is not a stated fact (decorate it with facts.stated(name))")
    return name


def _where(name: str, loc: tuple[Any, ...]) -> str:
    text = name
    for part in loc:
        text += f"[{part!r}]" if isinstance(part, str) else f"[{part}]"
    return text


def read(facts: dict[str, Any], model: type[F]) -> F | None:
    """The fact `model` states, typed; None when the result does not state it; FactShapeError when its
    stored value does not have the model's shape (naming where, e.g. top_tokens['t']['tokens'][0]['rank'])."""
    name = name_of(model)
    if name not in facts:
        return None
    try:
        return model.model_validate(facts[name])
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(p for p in first["loc"] if p != "root" and not (isinstance(p, str) and p.startswith("function-")))
        raise FactShapeError(f"{_where(name, loc)}: {first['msg'].lower()}") from None


def fraction(value: float, unit: str) -> float:
    """A probability as a fraction of 1: a value shown in percent divided by 100, any other unit as it is."""
    return float(value) / 100.0 if unit.strip() in ("%", "percent") else float(value)


def column(table: dict[str, Any], *names: str) -> int | None:
    """The index of the first column of a stored table (a dict, before validation) with one of `names`, lower case."""
    lowered = [str(c.get("name", "")).strip().lower() for c in table.get("columns", []) if isinstance(c, dict)]
    return next((lowered.index(n) for n in names if n in lowered), None)


def number(value: Any) -> float | None:
    """A table cell as a number, or None (text, a bool, a missing cell)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
