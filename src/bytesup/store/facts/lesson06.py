"""Lesson 6's facts: the rows of its KV-bytes table (`kv_examples`) and the line of decode time against context
depth (`decode_at_depth`); and the records of its request tables (the prompt cache, the cost formula, the requests
without a cache), each shown by its declared columns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import RootModel, field_serializer
from pydantic.dataclasses import dataclass as pydantic_dataclass

from bytesup.store.facts import base
from bytesup.store.facts.base import RECORD, Record, Shown, number, shown, stated
from bytesup.store.rows import column, family
from bytesup.units import KiB, MiB


@pydantic_dataclass(frozen=True, config=RECORD)
class KvExample:
    """One row of the KV table: a model's shape and cache type, and the bytes per token the lesson computed from them
    (stated, bytes per element as a float); the view also shows the cache type, the context it is costed at and
    where the figures come from."""
    label: str = column("model")
    n_layer: int = column("layers")
    n_head_kv: int = column("KV heads")
    head_dim: int = column("head width")
    bytes_per_element: float | int = column("bytes per element")  # as given: a published whole number shows as one
    bytes_per_token: float = column("per token", "bytes")            # shown in whole bytes (per_token)
    cache_type: Annotated[str | None, Shown] = shown("cache type")
    context: Annotated[int | None, Shown] = shown("context", "tokens")
    source: Annotated[str | None, Shown] = shown("source")
    # Columns the record computes from its fields.
    COLUMNS: ClassVar[dict[str, tuple[str, str]]] = {"kib_per_token": ("per token", "KiB"),
                                                     "mib_at_context": ("per request at that context", "MiB")}

    @field_serializer("bytes_per_element")
    def _as_stated(self, value: float | int) -> float:
        return float(value)

    @property
    def per_token(self) -> int:
        """Bytes per token as the table shows it (whole bytes)."""
        return int(self.bytes_per_token)

    @property
    def kib_per_token(self) -> float:
        return self.bytes_per_token / KiB

    @property
    def mib_at_context(self) -> float:
        return self.bytes_per_token * (self.context or 0) / MiB


@stated("kv_examples")
class KvExamples(RootModel[list[KvExample]]):
    def rows(self) -> list[KvExample]:
        return self.root


class HeldOutDepth(Record):
    """A depth the line was not fitted on, and how far the line's prediction of it was from measured."""
    depth: int
    error: float | None  # predicted ÷ measured tokens/s − 1; None where there is no prediction or it is 0 ms or less
    spread: float | None = None  # the prediction's spread (course.depthtime), a fraction; None: not recorded


@stated("decode_at_depth")
class DecodeAtDepth(Record):
    """t(d) = t(0) + d × s through the median decode steps at the depths up to `fit_until` (s₁, bent at `knee` into
    s₂), the deeper depths it predicts, and the KV read's part of s at the run's bandwidth (None where no reading
    applies or was recorded, or the served model's shape is unknown)."""
    t0_ms: float
    slope_ms_per_position: float
    fit_until: int
    tolerance: float  # a held-out depth is predicted within this
    held_out: list[HeldOutDepth]
    bandwidth_gbs: float | None
    kv_read_ms_per_position: float | None
    # The knee: the last-level cache the run read (bytes), d* = that ÷ KV bytes per position where the model is bent
    # there (None: d* lies beyond the depths, or the fitted depths past it did not show it: course.depthtime.choose),
    # and s₂ beyond it (None: no knee, or no depth beyond it fitted).
    cache_bytes: float | None = None
    knee: float | None = None
    slope2_ms_per_position: float | None = None


# --- records of the figures, each shown by its declared columns (store.views.lesson06) -----------------------

@dataclass(frozen=True)
class CacheRequest:
    """One request of the prompt-cache test and the server's timings of it: a row of its table."""
    repeat: int = column("repeat")
    label: str = column("request")
    cache_prompt: bool = column("cache_prompt")
    cache_n: int = column("cache_n", "tokens reused")
    prompt_n: int = column("prompt_n", "tokens processed")
    prompt_ms: float = column("time to first token", "ms")


@dataclass(frozen=True)
class WithAndWithout:
    """One quantity with a KV cache and without one (every position recomputed), and how many times more without."""
    with_cache: float
    without: float

    @property
    def ratio(self) -> float:
        return self.without / self.with_cache


def with_and_without(with_cache: str, without: str, ratio: str, unit: str = "") -> Any:
    """A `WithAndWithout` field: three columns, with the cache, without it (in `unit`) and their ratio (×)."""
    return family(WithAndWithout, ("with_cache", with_cache, unit), ("without", without, unit), ("ratio", ratio, "×"))


@dataclass(frozen=True)
class CostRow:
    """Generating n tokens after a prompt: positions and attention pairs, with and without a cache (n passes)."""
    n: int = column("n", "tokens")
    passes: int = column("passes")
    positions: WithAndWithout = with_and_without("with a KV cache", "without", "ratio", "positions")
    pairs: WithAndWithout = with_and_without("attention pairs with cache", "attention pairs without", "ratio")


@dataclass(frozen=True)
class ResendStep:
    """One request of the no-cache loop: the text sent and what the server processed."""
    request: int = column("request")
    sent: int = column("tokens sent")
    prompt_n: int = column("prompt_n", "tokens processed")
    prompt_ms: float = column("prompt_ms", "ms")
    tokens: list[int] = column("token generated", "id")


# How an older run's tables named the columns (lower case), and the bytes-per-token column's names.
_COLUMNS = {
    "n_layer": ("layers", "n_layer", "blocks", "block_count"),
    "n_head_kv": ("kv heads", "n_head_kv", "kv_heads", "head_count_kv"),
    "head_dim": ("head width", "head_dim", "head dim", "head dimension", "key_length"),
    "bytes_per_element": ("bytes per element", "bytes_per_element", "element bytes", "bytes/element"),
}
_PER_TOKEN = ("per token", "bytes per token", "kv bytes per token", "kv_bytes_per_token", "kv cache bytes per token")


def _per_token_column(table: dict[str, Any]) -> int | None:
    """The bytes-per-token column: one of the names with the unit bytes (a table may also show KiB)."""
    for i, c in enumerate(table.get("columns", [])):
        if isinstance(c, dict) and str(c.get("name", "")).strip().lower() in _PER_TOKEN \
                and str(c.get("unit", "")).strip().lower() == "bytes":
            return i
    return base.column(table, *_PER_TOKEN[1:])


def kv_examples_from_tables(tables: list[Any]) -> KvExamples | None:
    """An older run's KV rows: every row of every table laid out with the four inputs and bytes per token."""
    rows = []
    for table in (t for t in tables if isinstance(t, dict)):
        idx = {key: base.column(table, *names) for key, names in _COLUMNS.items()}
        out = _per_token_column(table)
        if out is None or any(i is None for i in idx.values()):
            continue
        for row in (r for r in table.get("rows", []) if isinstance(r, list) and r):
            where = [*idx.items(), ("bytes_per_token", out)]
            values = {key: number(row[i]) if i is not None and i < len(row) else None for key, i in where}
            counts = [values[k] for k in ("n_layer", "n_head_kv", "head_dim")]
            if any(v is None for v in values.values()) or any(v is not None and not float(v).is_integer() for v in counts):
                continue
            rows.append(KvExample(label=f"{table.get('name')}: {row[0]}", n_layer=int(values["n_layer"] or 0),
                                  n_head_kv=int(values["n_head_kv"] or 0), head_dim=int(values["head_dim"] or 0),
                                  bytes_per_element=float(values["bytes_per_element"] or 0),
                                  bytes_per_token=float(values["bytes_per_token"] or 0)))
    return KvExamples(rows) if rows else None
