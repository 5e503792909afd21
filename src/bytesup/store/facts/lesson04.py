"""Lesson 4's facts: the next-token tables (`top_tokens`) and the forward pass in numpy (`numpy_pass`)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, RootModel

from bytesup.store.facts.base import column, fraction, number, stated


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShownToken(Record):
    """One candidate as the lesson showed it; probabilities are fractions of 1."""
    rank: int
    id: int | None            # None in a run written before the lesson stated facts (its tables show no id)
    token: str                # the lesson's text of the token: repr() quotes, spacing visible
    probability: float | None  # e^logprob
    logprob: float | None
    server_probability: float | None  # the server's own post-sampling probability; None when it did not list it


class ShownTable(Record):
    prompt: str | None         # None in a run written before the lesson stated facts
    tokens: list[ShownToken]   # by rank

    def ranked(self) -> list[ShownToken]:
        return sorted(self.tokens, key=lambda t: t.rank)


@stated("top_tokens")
class TopTokens(RootModel[dict[str, ShownTable]]):
    """Per next-token table (its name, e.g. top8_capital_of_france): the prompt and its ranked tokens."""

    # The unit of each token field a reference figure may address.
    units: ClassVar[dict[str, str]] = {"probability": "fraction", "server_probability": "fraction", "logprob": ""}

    def tables(self) -> dict[str, ShownTable]:
        return self.root


def top_tokens_from_tables(tables: list[Any]) -> TopTokens | None:
    """An older run's `top8_` tables read once by column name (rank, token, probability, server probability,
    logprob; percent becomes a fraction), or None when it has none with a token column."""
    found: dict[str, ShownTable] = {}
    for table in tables:
        if not isinstance(table, dict) or not str(table.get("name", "")).startswith("top8_"):
            continue
        ti = column(table, "token", "piece")
        if ti is None:
            continue
        units = [str(c.get("unit", "")) if isinstance(c, dict) else "" for c in table.get("columns", [])]
        ri, pi = column(table, "rank"), column(table, "probability", "prob", "p")
        si, li = column(table, "server probability"), column(table, "logprob", "log probability")

        def cell(row: list[Any], i: int | None) -> float | None:
            x = number(row[i]) if i is not None and i < len(row) else None
            return x if x is not None and math.isfinite(x) else None

        rows = []
        for n, row in enumerate(r for r in table.get("rows", []) if isinstance(r, list)):
            rank = cell(row, ri)
            p, s = cell(row, pi), cell(row, si)
            rows.append(ShownToken(
                rank=int(rank) if rank is not None else n + 1, id=None, token=str(row[ti]),
                probability=None if p is None or pi is None else fraction(p, units[pi]), logprob=cell(row, li),
                server_probability=None if s is None or si is None else fraction(s, units[si])))
        found[str(table["name"])] = ShownTable(prompt=None, tokens=sorted(rows, key=lambda t: t.rank))
    return TopTokens(found) if found else None


class PromptAgreement(Record):
    """numpy's pass on one prompt against the server's top eight."""
    numpy_top_id: int
    server_top_id: int
    top_agrees: bool
    set_agrees: bool                 # the same eight ids, in any order
    largest_abs_dp: float            # largest |numpy − server| over the server's eight
    kl_shared: float                 # KL(server ‖ numpy) over the shared ids, each renormalized over them
    shared: int                      # ids both list
    probabilities_of_server_ids: dict[str, float]  # numpy's probability of each of the server's eight, by id
    largest_abs_logit: float         # numpy's largest |logit|


class FilePass(Record):
    file: str
    weight_type: str
    prompts: dict[str, PromptAgreement]  # by table name


@stated("numpy_pass")
class NumpyPass(Record):
    """The forward pass in numpy over the served file (`served`) and its f32 width (`f32`), or why not."""
    recomputed: bool
    why_not: str | None
    served: FilePass | None
    f32: FilePass | None
