"""The harness's own share of each timed request, per lesson of a run: does bytesup distort what it measures?

Every recorded exchange keeps `elapsed_ms`: the client's wall time from handing the request to the
transport to reading the last byte of the answer (for a streamed answer, its final event), on the
monotonic clock. A /completion answer also carries the server's own `prompt_ms` and `predicted_ms`.
The difference is what the server's timings leave out: sending and reading the request, tokenizing
the prompt and queuing it for a slot, building and writing the answer's JSON (or its events), and
this process reading it. Read from the recordings alone, so a run recorded before this table existed
shows it too.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bytesup.course import stopping
from bytesup.course.clientclock import percentile
from bytesup.check.evidence import exchanges_path
from bytesup.store.render import Block, Code, Heading, Paragraph, TableBlock, fmt
from bytesup.store.manifest import HarnessSplit
from bytesup.store.runs import Run

# The harness's part of a request, median ms, at n_probs 0 and 8: judged on the run's split (run/harness.py).
BUDGET_MS = {0: 0.5, 8: 1.0}
UNSETTLED = "cannot tell yet"
# A pair of the split whose harness part (wall) and CPU part differ by more than this is set aside (run/harness.py).
MOVED_MS = 0.5


def settled(harness_ms: list[float], budget_ms: float | None) -> bool:
    """Whether a level's verdict can no longer move: its harness median further from the budget than twice the
    median's standard error (course.stopping.median_uncertainty × the median). No budget: nothing to settle.

    A median at or below zero settles nothing: the run's client does all the bare client does and more, so its part
    is never less than the bare one's, and pairs that say so measured the server instead. Its part outside its timings
    moved by as much between the two requests of a pair: in a make run of 2026-12-06 the bare client's part at n_probs
    8 read 2.19, 4.06 and 3.97 ms, the harness's −1.04 and −0.96 in the last two, which had settled "within"."""
    if budget_ms is None:
        return True
    median = statistics.median(harness_ms)
    if median <= 0:
        return False
    return abs(median - budget_ms) > 2 * stopping.median_uncertainty(harness_ms) * abs(median)


def within_budget(harness_ms: list[float], budget_ms: float | None) -> str:
    """A level's verdict: "" without a budget; "yes" or "no" where it is settled (`settled`); else UNSETTLED, as
    its pairs put the median within twice its standard error of the budget (a run's split takes at most six)."""
    if budget_ms is None:
        return ""
    if not settled(harness_ms, budget_ms):
        return UNSETTLED
    return "yes" if statistics.median(harness_ms) <= budget_ms else "no"


@dataclass(frozen=True)
class LessonOverhead:
    lesson_id: str
    overheads_ms: list[float]         # elapsed_ms − (prompt_ms + predicted_ms), one per timed request
    streamed: int                     # of which streamed

    @property
    def median(self) -> float:
        return statistics.median(self.overheads_ms)

    @property
    def p90(self) -> float:
        return percentile(self.overheads_ms, 90)

    @property
    def largest(self) -> float:
        return max(self.overheads_ms)


def _final_timings(exchange: dict[str, Any]) -> dict[str, Any] | None:
    """The server's timings of one /completion exchange: its JSON answer's, or a stream's final event's."""
    response = exchange.get("response")
    if isinstance(response, dict) and isinstance(response.get("timings"), dict):
        return response["timings"]
    for event in reversed(exchange.get("stream") or []):
        text = event.get("text", "") if isinstance(event, dict) else ""
        if text.startswith("data:"):
            try:
                data = json.loads(text[5:])
            except json.JSONDecodeError:
                return None
            return data.get("timings") if isinstance(data, dict) and isinstance(data.get("timings"), dict) else None
    return None


def request_overheads(path: Path) -> tuple[list[float], int]:
    """(elapsed_ms − (prompt_ms + predicted_ms) for each /completion with timings, how many were streamed)."""
    found, streamed = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            exchange = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue
        if not isinstance(exchange, dict) or exchange.get("path") != "/completion" or exchange.get("status") != 200:
            continue
        timings, elapsed = _final_timings(exchange), exchange.get("elapsed_ms")
        if timings is None or not isinstance(elapsed, (int, float)):
            continue
        prompt_ms, predicted_ms = timings.get("prompt_ms"), timings.get("predicted_ms")
        if not isinstance(prompt_ms, (int, float)) or not isinstance(predicted_ms, (int, float)):
            continue
        found.append(float(elapsed) - prompt_ms - predicted_ms)
        streamed += "stream" in exchange
    return found, streamed


def run_overheads(run: Run) -> list[LessonOverhead]:
    """One row per lesson of the run with timed requests, in lesson order."""
    rows = []
    for lid in sorted(run.results):
        path = exchanges_path(run, run.results[lid])
        if path is None:
            continue
        overheads, streamed = request_overheads(path)
        if overheads:
            rows.append(LessonOverhead(lid, overheads, streamed))
    return rows


def harness_table(split: HarnessSplit) -> list[Block]:
    """The run's split of the time outside the server's timings (run/harness.py): one row per n_probs."""
    if split.skipped or not split.levels:
        return [Paragraph((f"The split into the server's part and the harness's: {split.skipped or 'not measured'}.",))]
    rows = []
    stopped = any(level.stopped_by for level in split.levels)  # pairs under a stopping rule: each level's own count
    for level in split.levels:
        budget = "" if level.budget_ms is None else level.budget_ms
        if not level.harness_ms:  # every pair set aside
            row: tuple = (level.n_probs, "", "", "", budget, UNSETTLED if level.budget_ms is not None else "")
        else:
            low, high = percentile(level.harness_ms, 10), percentile(level.harness_ms, 90)
            row = (level.n_probs, statistics.median(level.server_ms), statistics.median(level.harness_ms),
                   f"{fmt(low)} to {fmt(high)}", budget, within_budget(level.harness_ms, level.budget_ms))
        noted = f", {len(level.set_aside_ms)} set aside" if level.set_aside_ms else ""
        rows.append((*row, f"{len(level.harness_ms)}{noted} ({level.stopped_by or 'fixed'})") if stopped else row)
    aside = [(level.n_probs, level.set_aside_ms) for level in split.levels if level.set_aside_ms]
    sent = (f"sent up to {split.pairs} times (each level's pairs stop once its verdict against the budget is settled, "
            "the harness's median further from it than twice the median's standard error, or at once where no budget "
            "applies, after three pairs at least)") if stopped else f"sent {split.pairs} times"
    return [
        Paragraph((
            (f"Split once, after the lessons: the same /completion ({split.n_predict} tokens, greedy) {sent} "
            "from the run's own client and from a bare one (http.client, nothing but the answer read), in "
            "pairs whose order alternates. The bare client's part outside the timings is the server's; the run's "
            "client's part minus the bare one's, pair by pair, is the harness's, the part bytesup answers for. The "
            "server's part grows with the probabilities it writes for every token (n_probs); what a lesson's "
            "requests show beyond both, where they were sent together, is their wait for a free slot. \"Within "
            "budget\" is yes or no where the pairs settle it, and cannot tell yet where the median lies within twice "
            "its standard error of the budget, or at or below zero."
            + (f" A pair is set aside where its harness part and the same on the client threads' CPU clock differ by "
               f"more than {MOVED_MS:g} ms: its two requests waited apart beyond the server's timings, so it measured "
               "the server; the level took another in its place. Set aside: "
               + "; ".join(f"{len(ms)} at n_probs {n} (harness parts {', '.join(fmt(x) for x in ms)} ms)"
                           for n, ms in aside) + "."
               if aside else "")),)),
        TableBlock("", ("n_probs", "the server's part (ms)", "the harness's part (ms)", "harness p10 to p90 (ms)",
                        "budget (ms)", "within budget", *(("pairs (what stopped them)",) if stopped else ())),
                   tuple(rows)),
    ]


def overhead_blocks(run: Run) -> list[Block]:
    """The report's tables: every lesson's time outside the server's timings, and the run's split of it (no blocks
    when no lesson recorded a timed request)."""
    rows = run_overheads(run)
    if not rows:
        return []
    every = [x for r in rows for x in r.overheads_ms]
    split = run.manifest.harness_split
    blocks: list[Block] = [
        Heading(2, "The harness's own time per request"),
        Paragraph(((
            "Client wall time (from sending to the answer's last byte) minus the server's prompt_ms + predicted_ms, "
            "for every /completion of each lesson, from its recorded exchanges. It holds HTTP on the way in and out, "
            "tokenizing and queuing the prompt, building and writing the answer's JSON (or its events) and reading it "
            "here; requests sent together (lesson 7's batches) also wait there for a free slot, which the server's "
            "timings do not count."),)),
        TableBlock("", ("lesson", "requests", "streamed", "median (ms)", "p90 (ms)", "max (ms)"),
                   tuple((Code(r.lesson_id), len(r.overheads_ms), r.streamed, r.median, r.p90, r.largest) for r in rows)),
        Paragraph(((f"Over the run: {len(every)} requests, median {fmt(statistics.median(every))} ms, "
                    f"p90 {fmt(percentile(every, 90))} ms, max {fmt(max(every))} ms."),)),
    ]
    if split is not None:
        return blocks + harness_table(split)
    return blocks + [Paragraph((("This run did not split that time into the server's part and the harness's (it was "
                                "recorded before runs did, or with BYTESUP_HARNESS_PROBE=0), so the harness's budget "
                                f"({fmt(BUDGET_MS[0])} ms at n_probs 0, {fmt(BUDGET_MS[8])} ms at 8) is not judged here."),))]
