"""Where a lesson's wall time goes: making models, starting and stopping servers, llama-bench, this host's own
measurements, the recorded requests, and the rest (the harness's own arithmetic and writing).

The parts are timed where they happen: `with spent("servers"):` around a server's start, and so on, into one
ledger for the process (a list of intervals on `time.perf_counter()`'s clock). The requests are the recorded
exchanges of a lesson: a `StampedList` notes when each one was appended, which is when its answer had been read,
so the exchange ran from that moment less its `elapsed_ms` to that moment.

`split` turns the intervals of one lesson into seconds per part that add up to its wall time: where parts
overlap (a model made while a server starts, llama-bench inside a host measurement, requests sent together from
several threads), each instant is counted once, for the most specific part (`PARTS`, first wins), and the rest
is what no part covers.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

# The parts, most specific first: an instant two parts cover is counted for the first of them.
MODELS, BENCH, SERVERS, REQUESTS, HOST = "models", "llama_bench", "servers", "requests", "host"
PARTS = (BENCH, MODELS, SERVERS, REQUESTS, HOST)

_lock = threading.Lock()
_intervals: list[tuple[str, float, float]] = []


@contextlib.contextmanager
def spent(part: str) -> Iterator[None]:
    """Time what runs inside as `part` of the current lesson (however it ends)."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; known: {', '.join(PARTS)}")
    start = time.perf_counter()
    try:
        yield
    finally:
        end = time.perf_counter()
        with _lock:
            _intervals.append((part, start, end))


def mark() -> int:
    """Where the ledger stands now: `since(mark())` later gives what was timed in between."""
    with _lock:
        return len(_intervals)


def since(at: int) -> list[tuple[str, float, float]]:
    with _lock:
        return list(_intervals[at:])


class StampedList(list):
    """A list (a lesson's recorded exchanges) that notes when each item was appended, on time.perf_counter()'s
    clock, beside it: `stamps` holds (when, item). Nothing is added to the items themselves."""

    def __init__(self, items: Iterable[Any] = ()):
        super().__init__(items)
        self.stamps: list[tuple[float, Any]] = []

    def append(self, item: Any) -> None:
        self.stamps.append((time.perf_counter(), item))
        super().append(item)

    def extend(self, items: Iterable[Any]) -> None:
        for item in items:
            self.append(item)

    def request_intervals(self) -> list[tuple[str, float, float]]:
        """(REQUESTS, start, end) of every exchange that says how long it took (its client wall time, elapsed_ms)."""
        found = []
        for at, item in self.stamps:
            elapsed = item.get("elapsed_ms") if isinstance(item, dict) else None
            if isinstance(elapsed, (int, float)) and elapsed >= 0:
                found.append((REQUESTS, at - elapsed / 1000.0, at))
        return found


@dataclass(frozen=True)
class Split:
    """A lesson's wall time in whole milliseconds, by part (`PARTS`), and the rest; they add up to `wall_ms`."""

    wall_ms: int
    parts_ms: dict[str, int]
    rest_ms: int

    def seconds(self) -> dict[str, float]:
        """{"wall_s", "<part>_s" for each part, "rest_s"}, in seconds to the millisecond."""
        return {"wall_s": self.wall_ms / 1000, **{f"{p}_s": ms / 1000 for p, ms in self.parts_ms.items()},
                "rest_s": self.rest_ms / 1000}


def split(start: float, end: float, intervals: Iterable[tuple[str, float, float]]) -> Split:
    """The window [start, end] (a lesson's wall time) split by the parts' intervals, each clipped to the window:
    every instant counted once, for the first of PARTS that covers it; the rest is the time none covers."""
    edges = {start, end}
    clipped = []
    for part, a, b in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            clipped.append((PARTS.index(part), a, b))
            edges.update((a, b))
    points = sorted(edges)
    seconds = dict.fromkeys(PARTS, 0.0)
    for a, b in itertools.pairwise(points):
        covering = [rank for rank, x, y in clipped if x <= a and b <= y]
        if covering:
            seconds[PARTS[min(covering)]] += b - a
    wall_ms = round((end - start) * 1000)
    parts_ms = {p: round(s * 1000) for p, s in seconds.items()}
    # Rounding each part may overshoot by a millisecond or two: the largest part gives it back, so the sum holds.
    over = sum(parts_ms.values()) - wall_ms
    if over > 0:
        largest = max(parts_ms, key=parts_ms.__getitem__)
        parts_ms[largest] -= over
    return Split(wall_ms, parts_ms, wall_ms - sum(parts_ms.values()))
