"""Before a timed request: wait until no other thread of this process is using a core.

A lesson computes with numpy between its requests (lesson 4's pass, lesson 8's accuracy, the host's bandwidth
readings). numpy's OpenBLAS keeps its worker threads spinning on a core for a while after each multi-threaded call
(its THREAD_TIMEOUT: 2^28 cycles, about 0.1 s), in case more work comes. On a 2-core machine a request sent in that
window shares a core with the spin, and the server's decode is slower for it. Measured with the native server,
32-token decodes of the default model in interleaved rounds (median tokens/s):
- a 2-core AMD EPYC, 10 rounds: 146 after another decode, 132 right after a numpy matmul, 147 when the matmul was
  followed by a 0.3 s pause, and 154 against 155 with OPENBLAS_NUM_THREADS=1;
- a 2-core Xeon, 12 rounds: 92.0 after another decode, 80.4 right after a 512 × 512 matmul, 87.2 after a
  4096 × 4096 gemv, 90.0 after the matmul and a 0.3 s pause, and 91.0 after the matmul and `settle`, which waited
  104 ms (the median of 12; 105 ms at most).

Telling OpenBLAS to stop spinning sooner (OPENBLAS_THREAD_TIMEOUT) slows numpy's own small products (on the EPYC a
gemv went from 24 to 57 µs), so the lessons wait instead: `settle` reads each thread's state in /proc and returns
once no other thread of the process is running (state R), or after LIMIT_S.

Only the main thread waits: threads that send requests together (lesson 7's batches) are the lesson's own, so the
batch settles once, before its threads start. Where /proc is not there (not Linux), nothing waits.

The cycle collector is the other thing of this process that can take a request's time. A run keeps every lesson's
records, pages and arrays in one process, and a full collection walks all of them: in a process holding 1.3 million
objects, one took 269 ms, and the request it fell in read 270 ms outside the server's timings where its neighbours read
0.8 to 1.1 (the run's split, `bytesup.run.harness.probe`, on the default model at n_probs 8, 2-core AMD EPYC,
2026-12-06). So a
run collects once before each lesson, where nothing is timed, and freezes what survives (`freeze_heap`): the later
collections walk only what came after it."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

TASKS = Path("/proc/self/task")
LIMIT_S = 0.3  # the longest wait: about three times the spin OpenBLAS keeps up after a call
STEP_S = 0.002  # how often the threads' states are read while waiting


def state(tid: int, tasks: Path = TASKS) -> str | None:
    """The scheduler's one-letter state of thread `tid` (R running, S sleeping…), or None once it is gone. The
    state is the first field after the command name's closing parenthesis (a name may hold spaces and brackets)."""
    try:
        text = (tasks / str(tid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 1:].split()
    return fields[0] if fields else None


def others(tasks: Path = TASKS, me: int | None = None) -> list[int]:
    """The thread ids of this process but the calling thread's."""
    me = threading.get_native_id() if me is None else me
    try:
        names = os.listdir(tasks)
    except OSError:
        return []
    return [int(name) for name in names if name.isdigit() and int(name) != me]


def running(tids: list[int], tasks: Path = TASKS) -> list[int]:
    """Those of `tids` that are running (or ready to run) now."""
    return [tid for tid in tids if state(tid, tasks) == "R"]


def settle(limit_s: float = LIMIT_S, step_s: float = STEP_S, tasks: Path = TASKS) -> float:
    """Wait until no other thread of this process is running, or `limit_s`; the seconds waited (0.0 at once in a
    thread other than the main one, or without `tasks`)."""
    if threading.current_thread() is not threading.main_thread() or not tasks.is_dir():
        return 0.0
    began = time.perf_counter()
    tids = others(tasks)
    while True:
        waited = time.perf_counter() - began
        if waited >= limit_s or not running(tids, tasks):
            return waited
        time.sleep(step_s)


def freeze_heap() -> None:
    """Collect the cycles of this process now, then move every object left into the collector's permanent
    generation (gc.freeze), where no later collection walks it. `thaw_heap` hands them back."""
    gc.collect()
    gc.freeze()


def thaw_heap() -> None:
    """Give the objects `freeze_heap` set aside back to the collector (at the end of a run)."""
    gc.unfreeze()
