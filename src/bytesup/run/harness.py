"""Where a request's time outside the server's timings goes, measured once in the run, after its lessons.

Every timed request's client wall time minus the server's `prompt_ms + predicted_ms` holds two things the lessons
cannot tell apart: what the server does outside its own timings (tokenizing, the top-n probabilities of every
generated token, building the JSON) and what bytesup does (sending, reading, parsing, checking and recording the
answer). Requests sent together also wait for a slot, which neither counts. So the run, once its lessons are done,
sends the same /completion (N_PREDICT tokens, greedy, seeded) to its own server from two clients in turns, in
pairs whose order alternates (at least MIN_PAIRS, at most PAIRS: see below):

- the run's own client (`RunOptions.client` over a `RecordingTransport`, every check on, as the lessons use it);
- a bare client (`llama.client.BareClient`: `http.client`, the body parsed by `json.loads`, nothing else).

Pair by pair, the bare client's part outside the timings is **the server's**; the run's client's part minus it is
**the harness's** (the machine's load, which moves both in one pair, cancels). The server's part can also move between
the two requests of a pair, by 2 to 4 ms where it is 1 to 2 (make runs of 2026-12-06), and that pair's difference
then measures the server. So each pair is also read on each client thread's CPU clock (`time.thread_time`), which a
server's delay does not move: a pair whose harness part differs from its CPU part by more than MOVED_MS is set aside
(kept in the manifest, not in the median), and the level takes another in its place, at most PAIRS more.

The split is taken at n_probs 0, at 8 and at the largest n_probs the run's lessons asked for, since the server's part
grows with the probabilities it writes. The harness's part is held to BUDGET_MS; the server's is reported, not
budgeted. Each level takes pairs until its verdict is settled: the harness's median further from its budget than twice
the median's standard error (bytesup.course.stopping's uncertainty, from the pairs' range), and at a level without a
budget, where nothing is judged, at MIN_PAIRS; else at PAIRS, or once the level's pairs have taken LEVEL_BUDGET_S.
`scripts/bench_harness.py` measures the same in one sitting, with a profile. A run of several lessons takes it (at
most about 15 s on a 2-core machine); a run of one lesson, such as a lesson run as a script, does not.
BYTESUP_HARNESS_PROBE=0 skips it; a replay never takes it."""

from __future__ import annotations

import http.client
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bytesup.check import overhead
from bytesup.course import stopping
from bytesup.errors import BytesupError
from bytesup.host import environment, quiet
from bytesup.llama.client import BareClient, LlamaServer
from bytesup.store.manifest import HarnessLevel, HarnessSplit

PROBE_ENV = "BYTESUP_HARNESS_PROBE"  # "0": the run does not split the harness's time
PROMPT = "The history of the printing press begins"
N_PREDICT = 32
PAIRS = 6
MIN_PAIRS = 3  # a median and a range of three: the fewest a settled verdict is taken from
LEVEL_BUDGET_S = 5.0  # a level's pairs stop once they have taken this long (about 2.7 s for six on 2 cores)
LEVELS = (0, 8)
BUDGET_MS = overhead.BUDGET_MS  # the harness's part, median ms per request, at n_probs 0 and 8
# A pair is set aside where its harness part (wall) and its CPU part differ by more than this (ms): the two requests
# waited apart beyond the server's timings and their own CPU. Against the native server on a 2-core AMD EPYC, 40 pairs
# at each of n_probs 0 and 8 differed by 0.07 ms at the median, 0.18 at the 90th percentile and 0.41 at most, but for
# one pair at n_probs 0 whose bare request's part read 5.82 ms: 4.34 ms.
MOVED_MS = overhead.MOVED_MS


def skipped_by_env() -> bool:
    return os.environ.get(PROBE_ENV, "1").strip().lower() in ("0", "no", "false", "off")


def request_body(n_probs: int, n_predict: int = N_PREDICT) -> dict[str, Any]:
    return {"n_predict": n_predict, "n_probs": n_probs, "temperature": 0, "seed": 42, "ignore_eos": True,
            "cache_prompt": True}


def largest_n_probs(http_dir: Path) -> int:
    """The largest n_probs any /completion of the run's recorded exchanges asked for (0 where none asked)."""
    largest = 0
    for path in sorted(http_dir.glob("*.jsonl")) if http_dir.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                exchange = json.loads(line)
            except json.JSONDecodeError:
                continue
            request = exchange.get("request") if isinstance(exchange, dict) else None
            if isinstance(request, dict) and exchange.get("path") == "/completion":
                n = request.get("n_probs")
                if isinstance(n, int) and not isinstance(n, bool) and n > largest:
                    largest = n
    return largest


def levels_for(largest: int) -> tuple[int, ...]:
    """LEVELS, and the run's largest n_probs beside them where it is larger."""
    return (*LEVELS, largest) if largest > max(LEVELS) else LEVELS


def split_pairs(own_ms: list[float], bare_ms: list[float]) -> tuple[list[float], list[float]]:
    """(the server's parts, the harness's parts) of paired requests: each client's part outside the server's
    timings, the bare one's as the server's, and the run's client's minus the bare one's, pair by pair."""
    if len(own_ms) != len(bare_ms):
        raise ValueError("the two clients' parts must come in pairs")
    return list(bare_ms), [own - bare for own, bare in zip(own_ms, bare_ms, strict=True)]


def outside_ms(client: LlamaServer, body: dict[str, Any], cpu_ms: list[float] | None = None) -> float:
    """The run's client's part of one request outside the server's timings: its wall time minus prompt_ms +
    predicted_ms. The client's wait for a quiet process (`host.quiet.settle`) is made here, before the clock
    starts, and not inside the completion, where the clock would count it as the harness's. With `cpu_ms`, the CPU
    this thread spent over the request's wall time is appended to it (ms)."""
    settle, client.settle = client.settle, None
    try:
        if settle is not None:
            settle()
        started, cpu = time.perf_counter(), time.thread_time()
        done = client.completion(PROMPT, **body)
        if cpu_ms is not None:
            cpu_ms.append((time.thread_time() - cpu) * 1000.0)
    finally:
        client.settle = settle
    wall = (time.perf_counter() - started) * 1000.0
    return wall - done.timings.prompt_ms - done.timings.predicted_ms


def waited_alike(part_ms: float, cpu_part_ms: float, moved_ms: float | None = None) -> bool:
    """Whether a pair's harness part stands: the run's client's part minus the bare one's (wall) within `moved_ms`
    (MOVED_MS) of the same on the threads' CPU clock, so the two requests waited alike beyond the server's timings."""
    return abs(part_ms - cpu_part_ms) <= (MOVED_MS if moved_ms is None else moved_ms)


def stop_after(harness_ms: list[float], budget_ms: float | None, pairs: int, min_pairs: int = MIN_PAIRS,
               spent_s: float = 0.0, budget_s: float = LEVEL_BUDGET_S, set_aside: int = 0) -> str | None:
    """What stops a level after its pairs so far (`harness_ms`, one a pair kept; `set_aside` more were set aside): its
    verdict settled (stopping.TIGHT) from `min_pairs` on (never more than `pairs`), `pairs` kept or `pairs` set aside
    (stopping.MAXIMUM), or `budget_s` spent (stopping.BUDGET); None: another pair."""
    taken = len(harness_ms)
    if set_aside >= pairs:
        return stopping.MAXIMUM
    if taken < min(min_pairs, pairs):
        return None
    if overhead.settled(harness_ms, budget_ms):
        return stopping.TIGHT
    if taken >= pairs:
        return stopping.MAXIMUM
    return stopping.BUDGET if spent_s >= budget_s else None


def measure_level(client: LlamaServer, bare: BareClient, n_probs: int, pairs: int = PAIRS,
                  n_predict: int = N_PREDICT, warm_up: bool = True) -> HarnessLevel:
    """One n_probs: a warm-up from each client (the prompt cached, both connections open), then pairs in turns, the
    order alternating, until `stop_after` says (at most `pairs`)."""
    body = request_body(n_probs, n_predict)
    raw = json.dumps({"prompt": PROMPT, **body}).encode()
    if warm_up:
        outside_ms(client, body)
        bare.completion_ms(raw)
    own_ms: list[float] = []
    bare_ms: list[float] = []
    cpu_parts: list[float] = []
    aside: list[float] = []
    began, budget, why = time.monotonic(), BUDGET_MS.get(n_probs), None
    while why is None:
        own_cpu: list[float] = []
        if (len(own_ms) + len(aside)) % 2:
            quiet.settle()
            wall, timed = bare.completion_ms(raw)
            bare_cpu = bare.cpu_ms
            own = outside_ms(client, body, own_cpu)
        else:
            own = outside_ms(client, body, own_cpu)
            quiet.settle()
            wall, timed = bare.completion_ms(raw)
            bare_cpu = bare.cpu_ms
        part, cpu_part = own - (wall - timed), own_cpu[0] - bare_cpu
        if waited_alike(part, cpu_part):
            own_ms.append(own)
            bare_ms.append(wall - timed)
            cpu_parts.append(cpu_part)
        else:
            aside.append(part)
        why = stop_after(split_pairs(own_ms, bare_ms)[1], budget, pairs, spent_s=time.monotonic() - began,
                         set_aside=len(aside))
    server, harness = split_pairs(own_ms, bare_ms)
    return HarnessLevel(n_probs=n_probs, server_ms=[round(x, 3) for x in server],
                        harness_ms=[round(x, 3) for x in harness], budget_ms=budget, stopped_by=why,
                        harness_cpu_ms=[round(x, 3) for x in cpu_parts], set_aside_ms=[round(x, 3) for x in aside])


def probe(client: LlamaServer, bare: BareClient, http_dir: Path, pairs: int = PAIRS,
          n_predict: int = N_PREDICT) -> HarnessSplit:
    """The split on the run's server (see the module), at every level of `levels_for` the run's recorded exchanges
    in `http_dir`; a failure is said in `skipped`, and the run goes on. Both clients are closed."""
    began = time.monotonic()
    split = HarnessSplit(n_predict=n_predict, pairs=pairs, prompt=PROMPT)
    try:
        split.levels = [measure_level(client, bare, n, pairs, n_predict, warm_up=not k)
                        for k, n in enumerate(levels_for(largest_n_probs(http_dir)))]
        split.load_average = environment.load_average()
    except (BytesupError, OSError, ValueError, KeyError, http.client.HTTPException) as exc:  # an aside: said, and the run goes on
        split.skipped = f"the split was not measured: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        bare.close()
        client.close()
    split.seconds = round(time.monotonic() - began, 1)
    return split


def sentence(split: HarnessSplit) -> str:
    """The split in one line for the run's log."""
    if split.skipped or not split.levels:
        return f"harness's own time: {split.skipped or 'not measured'}"
    parts = []
    for level in split.levels:
        aside = f", {len(level.set_aside_ms)} set aside" if level.set_aside_ms else ""
        taken = f" ({len(level.harness_ms)} pairs{aside}, {level.stopped_by})" if level.stopped_by else ""
        if not level.harness_ms:
            parts.append(f"n_probs {level.n_probs}{taken}: every pair set aside, the server's part moving between "
                         "its two requests")
            continue
        harness, server = statistics.median(level.harness_ms), statistics.median(level.server_ms)
        verdict = {"yes": "within", "no": "over"}.get(overhead.within_budget(level.harness_ms, level.budget_ms),
                                                     overhead.UNSETTLED)
        budget = "" if level.budget_ms is None else f", budget {level.budget_ms:g} ms: {verdict}"
        parts.append(f"n_probs {level.n_probs}{taken}: the harness {harness:.2f} ms{budget}; the server outside its "
                     f"timings {server:.2f} ms")
    most = "up to " if any(level.stopped_by for level in split.levels) else ""
    return (f"harness's own time per request ({most}{split.pairs} pairs against a bare client, {split.n_predict} tokens): "
            + "; ".join(parts))
