"""The facts lessons state, typed: one module per lesson (`lesson04`, `lesson05`, `lesson06`, `lesson08`, `lesson09`), each a pydantic model
per fact with the name it is stored under in `<lesson>.json`. A lesson states one with `ctx.fact(model)`; the
checker and `compare` read it back with `result.stated(Model)`, typed, and never parse a table for it. A run
written before its lesson stated a fact gets it from its tables once, when the result is loaded
(`results.load_result`, through `tables_to_facts`)."""

from bytesup.store.facts.base import FACTS, FactShapeError, fraction, name_of, read, stated
from bytesup.store.facts import lesson04, lesson05, lesson06, lesson08, lesson09

__all__ = ["FACTS", "FactShapeError", "fraction", "name_of", "read", "stated", "lesson04", "lesson05", "lesson06", "lesson08", "lesson09"]
