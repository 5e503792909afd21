"""Lesson 4's facts: the next-token tables (`top_tokens`) and the forward pass in numpy (`numpy_pass`)."""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import Field, RootModel
from pydantic.dataclasses import dataclass

from bytesup.course.nexttoken import LastOnly, ThroughTheLayers
from bytesup.files import FileBytes
from bytesup.models import forward
from bytesup.models.gguf import read_vocabulary
from bytesup.store.facts import base
from bytesup.store.facts.base import RECORD, Record, Shown, fraction, number, shown, stated
from bytesup.store.rows import column


@dataclass(frozen=True, config=RECORD)
class ShownToken:
    """One candidate of a next-token table, as the lesson shows and states it; probabilities are fractions of 1."""
    rank: int = column("rank")
    id: int | None = column("id")            # None in a run written before the lesson stated facts (its tables show no id)
    token: str = column("token")              # the lesson's text of the token: repr() quotes, spacing visible
    # Both probabilities come from the server, from two answers: e^logprob of the logprob it gives at temperature 0,
    # and the `prob` it gives itself (post_sampling_probs, temperature 1 alone); shown as "e^logprob" and "server's prob".
    probability: float | None = column("e^logprob", "%")
    logprob: float | None = column("logprob")
    server_probability: float | None = column("server's prob", "%")  # None when the server did not list it


class ShownTable(Record):
    """One next-token table: the fact states its prompt and tokens; the view also shows its name, the prompt's
    length and what the server generated at temperature 0."""
    prompt: str | None         # None in a run written before the lesson stated facts
    tokens: list[ShownToken]   # by rank
    name: str | None = Field(default=None, exclude=True)
    prompt_n: int | None = Field(default=None, exclude=True)
    generated: str | None = Field(default=None, exclude=True)

    @property
    def share(self) -> float:
        """The probability the listed tokens hold together."""
        return sum(t.probability or 0.0 for t in self.tokens)

    @property
    def paired(self) -> int:
        return sum(t.server_probability is not None for t in self.tokens)

    def ranked(self) -> list[ShownToken]:
        return sorted(self.tokens, key=lambda t: t.rank)


# The next-token tables' columns that were renamed, by their name now: a table and a reference figure written
# before read the same column under its older name.
NAMED_BEFORE = {"e^logprob": "probability", "server's prob": "server probability"}


@stated("top_tokens")
class TopTokens(RootModel[dict[str, ShownTable]]):
    """Per next-token table (its name, e.g. top8_capital_of_france): the prompt and its ranked tokens."""

    # The unit of each token field a reference figure may address.
    units: ClassVar[dict[str, str]] = {"probability": "fraction", "server_probability": "fraction", "logprob": ""}

    def tables(self) -> dict[str, ShownTable]:
        return self.root


def top_tokens_from_tables(tables: list[Any]) -> TopTokens | None:
    """An older run's `top8_` tables read once by column name (rank, token, e^logprob or probability, server's prob
    or server probability, logprob; percent becomes a fraction), or None when it has none with a token column."""
    found: dict[str, ShownTable] = {}
    for table in tables:
        if not isinstance(table, dict) or not str(table.get("name", "")).startswith("top8_"):
            continue
        ti = base.column(table, "token", "piece")
        if ti is None:
            continue
        units = [str(c.get("unit", "")) if isinstance(c, dict) else "" for c in table.get("columns", [])]
        ri, pi = base.column(table, "rank"), base.column(table, "e^logprob", "probability", "prob", "p")
        si, li = base.column(table, "server's prob", "server probability"), base.column(table, "logprob", "log probability")

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


@dataclass(frozen=True, config=RECORD)
class NumpyToken:
    """One of numpy's most probable next tokens beside the server's probability of the same id."""
    rank: int = column("rank")
    id: int = column("id")
    token: str = column("token")              # from the file's own vocabulary, spacing visible
    probability: float = column("numpy", "%")
    server_probability: float | None = column("server", "%")  # e^logprob when the server listed this id among its eight
    difference: float | None = column("numpy − server", "points")  # probability − server_probability


@dataclass(frozen=True, config=RECORD)
class PromptAgreement:
    """numpy's pass on one prompt against the server's top eight: the fact states the ids and the gaps, the view
    shows them with the prompt and the tokens' text."""
    numpy_top_id: int
    server_top_id: int
    top_agrees: bool = column("same top token")
    set_agrees: bool = column("same top eight")    # the same eight ids, in any order
    largest_abs_dp: float = column("largest |Δp|", "points")  # largest |numpy − server| over the server's eight
    kl_shared: float = column("KL over the shared tokens", "nats")  # KL(server ‖ numpy) over the shared ids, renormalized
    shared: int = column("shared")                # ids both list
    probabilities_of_server_ids: dict[str, float] = column("numpy's probability of each of the server's eight")  # by id
    largest_abs_logit: float = column("numpy's largest |logit|")  # bytesup check sizes its f32 tolerance with it
    name: Annotated[str | None, Shown] = None     # the prompt's next-token table
    prompt: Annotated[str | None, Shown] = shown("prompt")
    n_tokens: Annotated[int | None, Shown] = shown("tokens")
    server_token: Annotated[str | None, Shown] = shown("server's top token")
    server_p: Annotated[float | None, Shown] = shown("server", "%")
    numpy_token: Annotated[str | None, Shown] = shown("numpy's top token")
    numpy_p: Annotated[float | None, Shown] = shown("numpy", "%")
    at_token: Annotated[str | None, Shown] = shown("at")           # the server's token with the largest |Δp|
    at_server: Annotated[float | None, Shown] = None               # the server's probability of it
    at_numpy: Annotated[float | None, Shown] = None                # numpy's
    numpy: Annotated[list[NumpyToken] | None, Shown] = None        # numpy's eight, by rank


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


@dataclasses.dataclass(frozen=True)
class NumpyOutcome:
    """What the numpy pass gave, for the fact and the view: the served file's part against the server (None with
    `why_not`), and the f32 width's where it ran (`f32_missing`: why not, where its file is not here); with the
    prompts' lengths as each server evaluated them, numpy's largest difference between the two files, and the two
    figures of the served file's pass (course.nexttoken.LastOnly and ThroughTheLayers, by prompt)."""
    served: FilePass | None
    why_not: str | None = None
    prompt_n: list[int] = dataclasses.field(default_factory=list)
    f32: FilePass | None = None
    f32_prompt_n: list[int] = dataclasses.field(default_factory=list)
    f32_missing: str | None = None
    same: float | None = None
    last: list[LastOnly] = dataclasses.field(default_factory=list)
    layers: list[ThroughTheLayers] = dataclasses.field(default_factory=list)

    def fact(self) -> NumpyPass:
        return NumpyPass(recomputed=self.served is not None, why_not=self.why_not, served=self.served, f32=self.f32)


# --- the numpy pass: what it computes from a file, kept for the process -----------------------------------

@dataclasses.dataclass(frozen=True)
class FileAnswers:
    """What numpy computes from one file for the prompts: each prompt's pass, the logits of its every position (the
    final norm and the output matrix on each: N × vocabulary) and of its last position after each block (blocks ×
    vocabulary), the file's weight type, width and vocabulary size, and its vocabulary (each token's bytes)."""

    passes: list[forward.Pass]
    every: list[np.ndarray]
    after_block: list[np.ndarray]
    weight_type: str
    n_vocab: int
    n_embd: int
    vocabulary: tuple[str | None, list[str]]  # the tokenizer's kind and every token's piece

    def token_bytes(self, token_id: int) -> bytes:
        kind, pieces = self.vocabulary
        return forward.piece_bytes(pieces[token_id], kind)


def as_key(ids: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(p) for p in ids)


def file_pass(path: Path, sha256: str, ids: tuple[tuple[int, ...], ...]) -> FileAnswers:
    """Lesson 4's fifteen lines in numpy on every prompt, and the logits the figures read. Each sum is taken in float64
    and rounded to float32 (bytesup.models.forward), so any CPU gives the same bits; kept per sha256 for the process
    (the served width and the f32 width), wherever the file was found, as the same bytes give the same answer."""
    return _file_pass(FileBytes(sha256, Path(path)), ids)


@functools.lru_cache(maxsize=2)
def _file_pass(file: FileBytes, ids: tuple[tuple[int, ...], ...]) -> FileAnswers:
    path = file.path
    model = forward.Model(path)
    passes = forward.forward(model, [list(p) for p in ids])
    answers = FileAnswers(passes, [model.logits(d.hidden) for d in passes], [model.logits(d.last_after_block) for d in passes],
                          model.file.type_name("blk.0.attn_q.weight"), model.hp.n_vocab, model.hp.n_embd,
                          read_vocabulary(path))
    for array in [*answers.every, *answers.after_block, *(a for d in passes for a in (d.hidden, d.last_after_block, d.logits, d.probs))]:
        array.setflags(write=False)
    return answers
