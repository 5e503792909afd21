"""Measure this host: memory read bandwidth and matrix-multiply speed, for the roofline lessons.

Every measurement is reported as all of its samples plus median, min and max, never as one
timing: on a shared machine a single number hides the noise the lesson wants students to see.
Everything returned is plain JSON data so it can be recorded and replayed.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from typing import Any

import numpy as np

from bytesup.units import GB, GiB, KiB, MiB

__all__ = ["summarize", "blas_info", "measure_read_bandwidth", "host_bandwidth", "last_level_cache", "physical_cores",
           "run_bandwidth_plan", "bandwidth_drift", "measure_matmul", "measure_matmul_peak", "random_matrix", "measure_matvec_bandwidth"]

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


SYS_CPU = "/sys/devices/system/cpu"
CACHE_MULTIPLE = 4          # the bandwidth test reads at least this many times the last-level cache
MIN_WORKING_SET = 256 * MiB  # and never less than this, whatever /sys says
RUN_SAMPLES = 15             # samples per reading of the run's bandwidth: enough for a median and a spread


def _parse_size(text: str) -> int | None:
    """'32768K', '260M', '1G' or a plain byte count (as /sys/.../cache/indexN/size writes them) in bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text or "", re.I)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": KiB, "M": MiB, "G": GiB}[m.group(2).upper()]


def last_level_cache(sys_cpu: str = SYS_CPU) -> dict:
    """The largest cache level of cpu0 as the OS reports it: {"bytes", "level", "source"} (bytes None if unknown).

    On a virtual machine this is the cache the hypervisor shows, often the whole socket's, shared with
    other tenants: an upper bound on what a model's weights could find there.
    """
    best: dict[str, Any] = {"bytes": None, "level": None, "source": None}
    base = os.path.join(sys_cpu, "cpu0", "cache")
    try:
        entries = sorted(e for e in os.listdir(base) if e.startswith("index"))
    except OSError:
        return _sysctl_cache() if sys.platform == "darwin" else best
    for entry in entries:
        folder = os.path.join(base, entry)
        try:
            with open(os.path.join(folder, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(folder, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(folder, "size")) as f:
                size = _parse_size(f.read().strip())
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size is None:
            continue
        if best["level"] is None or level > best["level"] or (level == best["level"] and size > best["bytes"]):
            best = {"bytes": size, "level": level, "source": os.path.join(folder, "size")}
    return best


def _sysctl_cache() -> dict:
    """macOS, which has no /sys: the largest cache `sysctl` reports (hw.l3cachesize, else the performance
    cores' L2, else hw.l2cachesize); bytes None where it reports none."""
    import subprocess

    for level, key in ((3, "hw.l3cachesize"), (2, "hw.perflevel0.l2cachesize"), (2, "hw.l2cachesize")):
        try:
            out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            break
        size = _parse_size(out.stdout.strip()) if out.returncode == 0 else None
        if size:
            return {"bytes": size, "level": level, "source": f"sysctl {key}"}
    return {"bytes": None, "level": None, "source": None}


def physical_cores(sys_cpu: str = SYS_CPU) -> int:
    """Physical cores, as llama.cpp counts them for its default thread count (cpu_get_num_math):
    distinct thread-sibling sets in /sys, else psutil's physical count, else the logical CPUs."""
    sets = set()
    try:
        for entry in os.listdir(sys_cpu):
            if re.fullmatch(r"cpu\d+", entry):
                try:
                    with open(os.path.join(sys_cpu, entry, "topology", "thread_siblings_list")) as f:
                        sets.add(f.read().strip())
                except OSError:
                    continue
    except OSError:
        pass
    if sets:
        return len(sets)
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
        if n:
            return int(n)
    except Exception:  # psutil cannot always tell on containers
        pass
    return os.cpu_count() or 1


def run_bandwidth_plan(threads: int, llc_bytes: int | None) -> dict:
    """How the run's bandwidth reading is taken: a working set of at least CACHE_MULTIPLE × the
    last-level cache (and MIN_WORKING_SET), split over `threads` threads in whole MiB."""
    threads = max(1, int(threads))
    working = max(MIN_WORKING_SET, CACHE_MULTIPLE * (llc_bytes or 0))
    per_thread = -(-working // threads // MiB) * MiB  # rounded up to whole MiB
    return {"threads": threads, "llc_bytes": llc_bytes, "cache_multiple": CACHE_MULTIPLE,
            "bytes_per_thread": per_thread, "working_set_bytes": per_thread * threads, "samples": RUN_SAMPLES}


def run_bandwidth(threads: int, llc: dict | None = None, samples: int = RUN_SAMPLES) -> dict:
    """One reading of the run's bandwidth (see run_bandwidth_plan), with what it was sized by."""
    llc = llc if llc is not None else last_level_cache()
    plan = run_bandwidth_plan(threads, llc.get("bytes"))
    reading = measure_read_bandwidth(plan["threads"], plan["bytes_per_thread"], repeats=samples)
    return {**reading, "working_set_bytes": plan["working_set_bytes"], "llc_bytes": llc.get("bytes"),
            "llc_level": llc.get("level"), "llc_source": llc.get("source"), "cache_multiple": CACHE_MULTIPLE}


def bandwidth_drift(before: dict, after: dict) -> dict:
    """How the run's bandwidth moved between its two readings (GB/s summaries): the change of the
    median, relative to the first, and whether the two readings' [min, max] ranges overlap."""
    b, a = before["median"], after["median"]
    return {"before_median": b, "after_median": a, "change": (a - b) / b if b else math.nan,
            "ranges_overlap": before["min"] <= after["max"] and after["min"] <= before["max"]}


def describe_reading(bw: dict) -> str:
    """The one sentence every lesson prints about the run's bandwidth reading (its figure and how it was taken)."""
    g = bw["gb_per_s"]
    text = (f"this host's memory read bandwidth for the run: {g['median']:.3g} GB/s (median of {len(g['samples'])} "
            f"samples, {g['min']:.3g}–{g['max']:.3g}) with {bw['threads']} thread(s), the server's decode threads, "
            f"over {bw['bytes_per_sample'] / MiB:,.0f} MiB")
    llc = bw.get("llc_bytes")
    if llc:
        text += (f", {bw['bytes_per_sample'] / llc:.3g} × the {llc / MiB:,.0f} MiB last-level cache "
                 f"({bw.get('llc_source') or 'reported by the OS'})")
    elif "llc_bytes" in bw:  # asked and none reported (a reading recorded before the cache was kept has no key)
        text += (f"; this OS reported no last-level cache size, so the working set is the {MIN_WORKING_SET / MiB:,.0f} "
                 "MiB floor, which may not be larger than the cache")
    return text


def host_bandwidth(threads: int, repeats: int = 3) -> dict:
    """A quick reading of this host's memory bandwidth (lessons share the run's reading instead,
    `LessonContext.run_bandwidth`): 256 MiB per thread, at most 2 GiB in all, at least 3 samples."""
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


def random_matrix(m: int, k: int, dtype: Any = "float32") -> np.ndarray:
    """The W `measure_matmul` multiplies, drawn once for several N (the output matrix of the default model, 49,152 ×
    576, took 0.72 s to draw on a 2-core AMD EPYC): the same numbers `measure_matmul` draws itself."""
    return np.random.default_rng(0).standard_normal((m, k), dtype=np.float32).astype(np.dtype(dtype))


def measure_matmul(m: int, k: int, n: int, dtype: Any = "float32", repeats: int = 5, min_time_s: float = 0.05,
                   w: np.ndarray | None = None) -> dict:
    """Time W (m x k) @ X (k x n) with numpy; n=1 is the matrix-vector product of token generation. `w`: W as
    `random_matrix` draws it, for a caller that times several N on one matrix; else drawn here.

    After a warm-up, the product is repeated enough times that one sample lasts at least
    `min_time_s` (a single small product is shorter than the timer's noise), and each sample
    reports the time per product. The sizing's last batch, the first of that many products to last long enough, is
    the first sample: it is timed as every later one is, and a product of half a second (the output matrix at 2,048
    tokens) is not run once more for nothing. `bytes_moved` counts each matrix once: the least traffic the
    product can cause, which is what the roofline's arithmetic intensity uses.
    """
    if min(m, k, n) < 1 or repeats < 1:
        raise ValueError("m, k, n and repeats must be at least 1")
    dt = np.dtype(dtype)
    if w is None:
        w = random_matrix(m, k, dt)
    elif w.shape != (m, k) or w.dtype != dt:
        raise ValueError(f"w must be {m} x {k} {dt.name}, not {' x '.join(map(str, w.shape))} {w.dtype.name}")
    x = np.random.default_rng(1).standard_normal((k, n), dtype=np.float32).astype(dt)
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

    seconds = [elapsed / reps]  # the sizing's last batch: `reps` products that lasted long enough
    for _ in range(repeats - 1):
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


MATVEC_COLUMNS = 4096  # a row of 16 KiB in float32: rows stream from memory one after another


def measure_matvec_bandwidth(threads: int, matrix_bytes: int, repeats: int = 15) -> dict:
    """Memory bandwidth read the way decode reads its weights: y = A @ x, one float32 matrix-vector product
    over a matrix far larger than any cache, with `threads` BLAS threads (threadpoolctl), after one untimed
    warm-up. A sample is the matrix's bytes ÷ the product's time (x and y are a few KiB and stay cached)."""
    from threadpoolctl import threadpool_limits

    if threads < 1 or repeats < 1:
        raise ValueError("threads and repeats must be at least 1")
    rows = max(1, matrix_bytes // (4 * MATVEC_COLUMNS))
    _check_memory(rows * MATVEC_COLUMNS * 4)
    a = np.empty((rows, MATVEC_COLUMNS), dtype=np.float32)
    a.fill(1.0 / MATVEC_COLUMNS)  # written, so every page is backed and nothing reads the shared zero page
    x = np.ones(MATVEC_COLUMNS, dtype=np.float32)
    y = np.empty(rows, dtype=np.float32)
    seconds = []
    with threadpool_limits(threads, user_api="blas"):
        np.matmul(a, x, out=y)  # warm-up: BLAS threads start, the first pass faults nothing in
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.matmul(a, x, out=y)
            seconds.append(time.perf_counter() - t0)
    if not math.isclose(float(y[0]), 1.0, rel_tol=1e-3):  # each row sums to one: the product really ran
        raise RuntimeError(f"the matrix-vector product gave {float(y[0])} instead of 1")
    return {
        "threads": threads,
        "rows": rows,
        "columns": MATVEC_COLUMNS,
        "bytes_per_sample": a.nbytes,
        "method": "numpy float32 matrix-vector product (BLAS gemv) over a matrix beyond the caches",
        "seconds": summarize(seconds),
        "gb_per_s": summarize([a.nbytes / s / GB for s in seconds]),
    }


def measure_matmul_peak(size: int = 1024, dtype: Any = "float32", repeats: int = 5) -> dict:
    """FLOP/s of a square size x size matmul: the compute ceiling of this host's roofline."""
    result = measure_matmul(size, size, size, dtype=dtype, repeats=repeats)
    result["size"] = size
    return result
