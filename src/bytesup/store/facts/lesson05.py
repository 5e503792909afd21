"""Lesson 5's facts: its samplers set against the server's (`sampler_comparisons`), and the loop seen from the
client's clock (`client_clock`)."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel

from bytesup.store.facts.base import Record, column, number, stated

Number = int | float  # kept as written: an int stays an int, so a stated fact reads back byte for byte


class SamplerComparison(Record):
    """One sampler setting against the server's post-sampling probabilities; None where it was not compared."""
    name: str
    max_relative_difference: Number | None  # max |Δp| ÷ p over the kept tokens
    tolerance: Number | None
    same_tokens: bool | None  # the same kept tokens as the server


@stated("sampler_comparisons")
class SamplerComparisons(RootModel[list[SamplerComparison]]):
    def rows(self) -> list[SamplerComparison]:
        return self.root


class StreamedRepeat(Record):
    """One streamed generation on both clocks, in ms (client: arrivals of the events; server: its timings)."""
    ttft_ms: Number
    prompt_ms: Number
    token_events: int
    tokens: int
    predicted_n: int
    itl_median_ms: Number
    predicted_per_token_ms: Number
    end_to_end_ms: Number
    server_total_ms: Number


@stated("client_clock")
class ClientClock(Record):
    n_predict: int
    clock: str  # the client's clock the arrivals were read from
    repeats: list[StreamedRepeat]


def sampler_comparisons_from_tables(tables: list[Any]) -> SamplerComparisons | None:
    """An older run's comparisons: the numbers of its table with a max |Δp| / p column (never its verdict text)."""
    for table in (t for t in tables if isinstance(t, dict)):
        ri = column(table, "max |δp| / p", "max relative difference")
        if ri is None:
            continue
        ti, si = column(table, "tolerance"), column(table, "same tokens")
        rows = []
        for r in (r for r in table.get("rows", []) if isinstance(r, list) and r):
            same = r[si] if si is not None and si < len(r) else None
            rows.append(SamplerComparison(
                name=str(r[0]), max_relative_difference=number(r[ri]) if ri < len(r) else None,
                tolerance=number(r[ti]) if ti is not None and ti < len(r) else None,
                same_tokens=same if isinstance(same, bool) else None))
        return SamplerComparisons(rows)
    return None
