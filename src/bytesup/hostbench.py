"""Measure this host: memory read bandwidth and matrix-multiply speed, for the roofline lessons.

Every measurement is reported as all of its samples plus median, min and max, never as one
timing: on a shared machine a single number hides the noise the lesson wants students to see.
Everything returned is plain JSON data so it can be recorded and replayed.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import numpy as np

__all__ = ["summarize", "blas_info", "measure_read_bandwidth", "host_bandwidth", "measure_matmul", "measure_matmul_peak"]

MiB = 2**20
GB = 1e9  # decimal, as bandwidth is usually quoted
_ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def summarize(samples: list[float]) -> dict:
    """{samples, median, min, max} of a non-empty list of numbers, as plain floats."""
    values = [float(s) for s in samples]
    if not values:
        raise ValueError("summarize() needs at least one sample")
    return {
        "samples": values,
        "median": float(np.median(values)),
        "min": min(values),
        "max": max(values),
    }


def blas_info() -> dict:
    """numpy version, the BLAS libraries threadpoolctl sees, CPU counts and the env vars that steer them."""
    from threadpoolctl import threadpool_info

    keep = ("user_api", "internal_api", "prefix", "version", "threading_layer", "architecture", "num_threads", "filepath")
    libs = []
    for lib in threadpool_info():
        # Only str/int/None survive: threadpoolctl may add richer objects in later versions.
        libs.append({k: lib.get(k) for k in keep if isinstance(lib.get(k), (str, int, type(None)))})
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except Exception:  # psutil cannot always tell on containers; the logical count is still useful
        physical = None
    return {
        "numpy_version": np.__version__,
        "libraries": libs,
        "blas": next((lib for lib in libs if lib.get("user_api") == "blas"), None),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical,
        "env": {k: os.environ[k] for k in _ENV_VARS if k in os.environ},
    }


def measure_read_bandwidth(threads: int, bytes_per_thread: int = 256 * MiB, repeats: int = 5) -> dict:
    """Memory read bandwidth with `threads` threads, each summing its own array.

    A sample is the bytes read by all threads divided by the time from the first thread's start
    to the last thread's finish, so the slowest thread bounds it. The arrays are much larger than
    any cache, so the sum streams from DRAM; numpy releases the GIL during the reduction, so the
    threads really run at once. One untimed warm-up round comes first.
    """
    if threads < 1 or repeats < 1:
        raise ValueError("threads and repeats must be at least 1")
    n_items = bytes_per_thread // 8
    if n_items < 1:
        raise ValueError("bytes_per_thread must be at least 8")
    total = n_items * 8 * threads
    _check_memory(total)

    rounds = repeats + 1
    starts = [[0.0] * threads for _ in range(rounds)]
    ends = [[0.0] * threads for _ in range(rounds)]
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    sink = [0] * threads  # keeps the sums alive so nothing is optimised away

    def worker(i: int) -> None:
        try:
            # Each thread allocates and writes its own array: pages are really backed (a fresh
            # zeroed array would read the shared zero page) and land near the thread that reads them.
            arr = np.empty(n_items, dtype=np.int64)
            arr.fill(1)
            # int64 add-reduce was the fastest reduction measured on the course host, so it is
            # the one most limited by memory rather than by arithmetic.
            for r in range(rounds):
                barrier.wait()
                t0 = time.perf_counter()
                s = np.add.reduce(arr)
                starts[r][i], ends[r][i] = t0, time.perf_counter()
                sink[i] += int(s)
            del arr
        except BaseException as exc:  # surface worker failures in the caller, and free the others
            errors.append(exc)
            barrier.abort()

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]

    seconds = [max(ends[r]) - min(starts[r]) for r in range(1, rounds)]
    return {
        "threads": threads,
        "bytes_per_thread": n_items * 8,
        "bytes_per_sample": total,
        "method": "np.add.reduce over an int64 array per thread, started together at a barrier",
        "seconds": summarize(seconds),
        "gb_per_s": summarize([total / s / GB for s in seconds]),
    }


def host_bandwidth(threads: int, repeats: int = 3) -> dict:
    """The lessons' one reading of this host's memory bandwidth (lessons 1, 4, 7 and 8 share it).

    256 MiB per thread, at most 2 GiB in all and never under 64 MiB per thread: far past any
    cache, so the reads come from memory; at least 3 samples.
    """
    per_thread = max(64 * MiB, min(256 * MiB, 2048 * MiB // max(threads, 1)))
    return measure_read_bandwidth(threads=threads, bytes_per_thread=per_thread, repeats=max(3, repeats))


def _check_memory(nbytes: int) -> None:
    """Refuse a test that would take more than half of the available memory."""
    try:
        import psutil

        available = psutil.virtual_memory().available
    except Exception:
        return
    if nbytes > available // 2:
        raise ValueError(
            f"The bandwidth test would allocate {nbytes / MiB:.0f} MiB but only {available / MiB:.0f} MiB "
            "are available; use fewer threads or a smaller bytes_per_thread."
        )


def measure_matmul(m: int, k: int, n: int, dtype: Any = "float32", repeats: int = 5, min_time_s: float = 0.05) -> dict:
    """Time W (m x k) @ X (k x n) with numpy; n=1 is the matrix-vector product of token generation.

    After a warm-up, the product is repeated enough times that one sample lasts at least
    `min_time_s` (a single small product is shorter than the timer's noise), and each sample
    reports the time per product. `bytes_moved` counts each matrix once: the least traffic the
    product can cause, which is what the roofline's arithmetic intensity uses.
    """
    if min(m, k, n) < 1 or repeats < 1:
        raise ValueError("m, k, n and repeats must be at least 1")
    dt = np.dtype(dtype)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((m, k), dtype=np.float32).astype(dt)
    x = rng.standard_normal((k, n), dtype=np.float32).astype(dt)
    out = np.empty((m, n), dtype=np.result_type(w, x))

    np.matmul(w, x, out=out)  # warm-up: BLAS thread start, page faults on `out`
    reps, elapsed = 1, 0.0
    while True:  # double the count until one batch lasts long enough, as timeit.autorange does
        t0 = time.perf_counter()
        for _ in range(reps):
            np.matmul(w, x, out=out)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time_s:
            break
        reps = reps * 2 if elapsed <= 0 else max(reps * 2, math.ceil(reps * min_time_s / elapsed))

    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            np.matmul(w, x, out=out)
        seconds.append((time.perf_counter() - t0) / reps)

    flops = 2 * m * k * n
    bytes_moved = (m * k + k * n + m * n) * dt.itemsize
    return {
        "m": m,
        "k": k,
        "n": n,
        "dtype": dt.name,
        "products_per_sample": reps,
        "seconds": summarize(seconds),
        "flops": flops,
        "bytes_moved": bytes_moved,
        "gflop_per_s": summarize([flops / s / 1e9 for s in seconds]),
        "gb_per_s": summarize([bytes_moved / s / GB for s in seconds]),
        "arithmetic_intensity": flops / bytes_moved,
    }


def measure_matmul_peak(size: int = 1024, dtype: Any = "float32", repeats: int = 5) -> dict:
    """FLOP/s of a square size x size matmul: the compute ceiling of this host's roofline."""
    result = measure_matmul(size, size, size, dtype=dtype, repeats=repeats)
    result["size"] = size
    return result
