"""hostbench: shapes and arithmetic of the results, never the speed (the host is shared and noisy); where the
arithmetic needs exact times, the clock (and the product) are fakes and the expected numbers are worked by hand."""

from __future__ import annotations

import json
import inspect
import math
import os
import threading
import types

import numpy as np
import psutil
import pytest
import threadpoolctl

from bytesup.host import hostbench
from bytesup.host.hostbench import blas_info, measure_matmul, measure_matmul_peak, measure_read_bandwidth, summarize


def _check_summary(summary: dict, count: int) -> None:
    assert len(summary["samples"]) == count
    assert summary["median"] == pytest.approx(float(np.median(summary["samples"])))
    assert summary["min"] <= summary["median"] <= summary["max"]
    assert summary["min"] == min(summary["samples"]) and summary["max"] == max(summary["samples"])


@pytest.mark.parametrize("samples", [[3.0], [5.0, 1.0], [2.0, 9.0, 4.0, 4.0, 1.5], [1, 2, 3, 4]])
def test_summarize(samples):
    s = summarize(samples)
    _check_summary(s, len(samples))
    assert s["median"] == float(np.median(samples))
    assert all(isinstance(v, float) for v in s["samples"])
    assert json.loads(json.dumps(s)) == s


def test_summarize_needs_samples():
    with pytest.raises(ValueError):
        summarize([])


@pytest.mark.parametrize("m,k,n,dtype,itemsize", [(8, 16, 4, "float32", 4), (32, 64, 1, "float64", 8), (5, 7, 3, np.float32, 4)])
def test_matmul_arithmetic(m, k, n, dtype, itemsize):
    r = measure_matmul(m, k, n, dtype=dtype, repeats=3, min_time_s=0.002)
    assert (r["m"], r["k"], r["n"]) == (m, k, n)
    assert r["dtype"] == np.dtype(dtype).name
    assert r["flops"] == 2 * m * k * n
    assert r["bytes_moved"] == (m * k + k * n + m * n) * itemsize
    assert r["arithmetic_intensity"] == pytest.approx(r["flops"] / r["bytes_moved"])
    for key in ("seconds", "gflop_per_s", "gb_per_s"):
        _check_summary(r[key], 3)
    assert all(s > 0 for s in r["seconds"]["samples"])
    # Rates are per-sample conversions of the times, so they line up sample by sample.
    for s, g, b in zip(r["seconds"]["samples"], r["gflop_per_s"]["samples"], r["gb_per_s"]["samples"], strict=True):
        assert g == pytest.approx(r["flops"] / s / 1e9)
        assert b == pytest.approx(r["bytes_moved"] / s / 1e9)
    assert json.loads(json.dumps(r)) == r


def test_matmul_peak_is_square():
    r = measure_matmul_peak(size=16, repeats=2)
    assert (r["m"], r["k"], r["n"], r["size"]) == (16, 16, 16, 16)
    assert r["flops"] == 2 * 16**3
    _check_summary(r["gflop_per_s"], 2)


@pytest.mark.parametrize("threads", [1, 2])
def test_read_bandwidth_samples(threads):
    r = measure_read_bandwidth(threads, bytes_per_thread=2**20, repeats=3)
    assert r["threads"] == threads
    assert r["bytes_per_sample"] == threads * 2**20
    _check_summary(r["gb_per_s"], 3)
    _check_summary(r["seconds"], 3)
    assert all(g > 0 for g in r["gb_per_s"]["samples"])
    assert json.loads(json.dumps(r)) == r


def test_read_bandwidth_refuses_silly_arguments():
    with pytest.raises(ValueError):
        measure_read_bandwidth(0, bytes_per_thread=2**20)
    with pytest.raises(ValueError):
        measure_read_bandwidth(1, bytes_per_thread=2**60)  # far beyond any host's memory


def test_blas_info_is_json():
    info = blas_info()
    assert info["numpy_version"] == np.__version__
    assert isinstance(info["libraries"], list)
    assert json.loads(json.dumps(info)) == info


# --- the arithmetic with the clock (and where needed the product) replaced by fakes ------------

MiB = 2**20


def test_units():
    assert (hostbench.MiB, hostbench.GB) == (1_048_576, 1_000_000_000)
    assert (hostbench.CACHE_MULTIPLE, hostbench.MIN_WORKING_SET, hostbench.RUN_SAMPLES) == (4, 268_435_456, 15)
    assert hostbench.SYS_CPU == "/sys/devices/system/cpu"
    # the documented defaults: 256 MiB per thread, 5 samples
    defaults = inspect.signature(measure_read_bandwidth).parameters
    assert (defaults["bytes_per_thread"].default, defaults["repeats"].default) == (268_435_456, 5)
    defaults = inspect.signature(measure_matmul).parameters
    assert (defaults["repeats"].default, defaults["min_time_s"].default, defaults["dtype"].default) == (5, 0.05, "float32")
    defaults = inspect.signature(measure_matmul_peak).parameters
    assert (defaults["size"].default, defaults["repeats"].default) == (1024, 5)


def test_summarize_by_hand():
    with pytest.raises(ValueError, match=r"^summarize\(\) needs at least one sample$"):
        summarize([])
    assert summarize([1, 2, 3, 4]) == {"samples": [1.0, 2.0, 3.0, 4.0], "median": 2.5, "min": 1.0, "max": 4.0}
    assert summarize([2.0, 9.0, 4.0, 4.0, 1.5])["median"] == 4.0
    assert summarize([7]) == {"samples": [7.0], "median": 7.0, "min": 7.0, "max": 7.0}


class ThreadClocks:
    """perf_counter for the bandwidth workers: round r starts at 10 r; each round lasts durations[r];
    the second thread to ask starts and ends `lag` seconds after the first, whichever thread it is."""

    def __init__(self, durations, lag=0.0):
        self.durations, self.lag = durations, lag
        self.calls: dict[int, int] = {}
        self.order: list[int] = []
        self.lock = threading.Lock()

    def perf_counter(self):
        with self.lock:
            me = threading.get_ident()
            if me not in self.calls:
                self.calls[me] = 0
                self.order.append(me)
            n = self.calls[me]
            self.calls[me] += 1
            offset = self.lag * self.order.index(me)
        r, is_end = divmod(n, 2)
        return 10.0 * r + offset + (self.durations[r] if is_end else 0.0)


def test_read_bandwidth_is_bytes_over_seconds(monkeypatch):
    # one thread of 8 MiB = 8,388,608 bytes; the warm-up round (5 s) is not a sample
    clock = ThreadClocks([5.0, 0.001, 0.004, 0.002])
    monkeypatch.setattr(hostbench, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    r = measure_read_bandwidth(1, bytes_per_thread=8 * MiB, repeats=3)
    assert (r["threads"], r["bytes_per_thread"], r["bytes_per_sample"]) == (1, 8_388_608, 8_388_608)
    assert r["seconds"]["samples"] == pytest.approx([0.001, 0.004, 0.002])
    # 8,388,608 ÷ 0.001 s = 8.388608 GB/s; ÷ 0.004 = 2.097152; ÷ 0.002 = 4.194304
    assert r["gb_per_s"]["samples"] == pytest.approx([8.388608, 2.097152, 4.194304])
    assert r["gb_per_s"]["median"] == pytest.approx(4.194304)
    assert r["method"] == "np.add.reduce over an int64 array per thread, started together at a barrier"


def test_read_bandwidth_of_two_threads_is_bounded_by_the_slowest(monkeypatch):
    # the second thread starts and ends 1 ms later: a sample spans first start to last end = lag + duration
    clock = ThreadClocks([5.0, 0.001, 0.003], lag=0.001)
    monkeypatch.setattr(hostbench, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    r = measure_read_bandwidth(2, bytes_per_thread=8 * MiB + 5, repeats=2)
    assert r["bytes_per_thread"] == 8_388_608  # whole int64 items: 5 bytes left out
    assert r["bytes_per_sample"] == 16_777_216
    assert r["seconds"]["samples"] == pytest.approx([0.002, 0.004])
    # 16,777,216 ÷ 0.002 = 8.388608 GB/s, ÷ 0.004 = 4.194304 GB/s (a doubled figure would be 16.78)
    assert r["gb_per_s"]["samples"] == pytest.approx([8.388608, 4.194304])


def test_a_failing_worker_fails_the_reading(monkeypatch):
    def broken():
        raise RuntimeError("clock broke")

    monkeypatch.setattr(hostbench, "time", types.SimpleNamespace(perf_counter=broken))
    with pytest.raises(RuntimeError, match="clock broke"):
        measure_read_bandwidth(2, bytes_per_thread=MiB, repeats=1)
    with pytest.raises(RuntimeError, match="clock broke"):
        measure_read_bandwidth(1, bytes_per_thread=MiB, repeats=1)


def test_read_bandwidth_argument_limits():
    for threads, repeats in ((0, 1), (1, 0), (-1, 1)):
        with pytest.raises(ValueError, match="^threads and repeats must be at least 1$"):
            measure_read_bandwidth(threads, bytes_per_thread=MiB, repeats=repeats)
    with pytest.raises(ValueError, match="^bytes_per_thread must be at least 8$"):
        measure_read_bandwidth(1, bytes_per_thread=7, repeats=1)
    r = measure_read_bandwidth(1, bytes_per_thread=8, repeats=1)  # the smallest: one int64
    assert r["bytes_per_sample"] == 8 and len(r["seconds"]["samples"]) == 1


class FailFirstAllocation:
    """numpy whose first np.empty fails: one worker dies before the barrier, the other finds it broken."""

    def __init__(self):
        self.lock, self.failed = threading.Lock(), False

    def empty(self, *args, **kwargs):
        with self.lock:
            first, self.failed = not self.failed, True
        if first:
            raise MemoryError("no room for the array")
        return np.empty(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(np, name)


def test_the_worker_error_is_raised_not_the_broken_barrier(monkeypatch):
    monkeypatch.setattr(hostbench, "np", FailFirstAllocation())
    with pytest.raises(MemoryError, match="no room for the array"):
        measure_read_bandwidth(2, bytes_per_thread=MiB, repeats=1)


def test_memory_check_allows_half_of_what_is_available(monkeypatch):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=100 * MiB))
    hostbench._check_memory(50 * MiB)  # exactly half: allowed
    with pytest.raises(ValueError, match="would allocate 51 MiB but only 100 MiB are available"):
        hostbench._check_memory(51 * MiB)

    def no_reading():
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", no_reading)
    hostbench._check_memory(2**60)  # cannot tell: no refusal


class FakeProduct:
    """numpy with matmul replaced: each product advances a fake clock by the next of `costs` (then by `then`)."""

    def __init__(self, costs, then):
        self.now, self.costs, self.then, self.products = 0.0, list(costs), then, 0

    def matmul(self, *args, **kwargs):
        self.products += 1
        self.now += self.costs.pop(0) if self.costs else self.then

    def perf_counter(self):
        return self.now

    def __getattr__(self, name):
        return getattr(np, name)


def test_matmul_repeats_the_product_until_a_sample_is_long_enough(monkeypatch):
    # each product takes 1/64 s; a sample must last 1/16 s: one product is too short, so the count
    # becomes max(2, ceil(1 × (1/16) ÷ (1/64))) = 4, which lasts 4/64 = 1/16 s
    fake = FakeProduct([], then=1 / 64)
    monkeypatch.setattr(hostbench, "np", fake)
    monkeypatch.setattr(hostbench, "time", fake)
    r = measure_matmul(8, 16, 4, repeats=3, min_time_s=1 / 16)
    assert r["products_per_sample"] == 4
    assert r["seconds"]["samples"] == [1 / 64] * 3
    # 1 warm-up + 1 + 4 while sizing (the batch of 4 is the first sample) + 2 more samples × 4
    assert fake.products == 1 + 1 + 4 + 8
    # flops 2 × 8 × 16 × 4 = 1024; bytes (8·16 + 16·4 + 8·4) × 4 = (128 + 64 + 32) × 4 = 896
    assert (r["flops"], r["bytes_moved"]) == (1024, 896)
    # 1024 ÷ (1/64 s) = 65,536 FLOP/s = 6.5536e-5 GFLOP/s; 896 × 64 = 57,344 B/s = 5.7344e-5 GB/s
    assert r["gflop_per_s"]["samples"] == pytest.approx([6.5536e-5] * 3)
    assert r["gb_per_s"]["samples"] == pytest.approx([5.7344e-5] * 3)
    assert r["arithmetic_intensity"] == pytest.approx(1.142857)  # 1024 ÷ 896 = 8/7


def test_matmul_that_measures_zero_doubles_the_count(monkeypatch):
    # warm-up free, the first single product measures 0 s: the count doubles to 2; then 1/32 s each
    fake = FakeProduct([0.0, 0.0], then=1 / 32)
    monkeypatch.setattr(hostbench, "np", fake)
    monkeypatch.setattr(hostbench, "time", fake)
    r = measure_matmul(2, 2, 1, dtype="float64", repeats=2, min_time_s=1 / 16)
    assert r["products_per_sample"] == 2 and r["seconds"]["samples"] == [1 / 32, 1 / 32]
    assert (r["flops"], r["bytes_moved"]) == (8, 64)  # 2·2·2·1; (4 + 2 + 2) × 8 bytes
    assert r["gflop_per_s"]["median"] == pytest.approx(2.56e-7)  # 8 × 32 = 256 FLOP/s
    # a long enough first product keeps the count at 1
    fake = FakeProduct([], then=1.0)
    monkeypatch.setattr(hostbench, "np", fake)
    monkeypatch.setattr(hostbench, "time", fake)
    assert measure_matmul(2, 2, 1, repeats=1, min_time_s=1.0)["products_per_sample"] == 1


def test_matmul_grows_the_count_by_at_least_double(monkeypatch):
    # the first single product measures 0 s: 2 products; those take 2 × 3/128 = 6/128 s < 8/128 (1/16),
    # so the count becomes max(2 × 2, ceil(2 × 8/6 = 2.67) = 3) = 4, lasting 12/128 s
    fake = FakeProduct([0.0, 0.0], then=3 / 128)
    monkeypatch.setattr(hostbench, "np", fake)
    monkeypatch.setattr(hostbench, "time", fake)
    r = measure_matmul(2, 2, 1, repeats=1, min_time_s=1 / 16)
    assert r["products_per_sample"] == 4 and r["seconds"]["samples"] == [3 / 128]
    assert fake.products == 1 + 1 + 2 + 4  # the warm-up, then batches of 1, 2 and 4: the last is the one sample


def test_the_sizings_last_batch_is_the_first_sample(monkeypatch):
    # products of 1/8 s, then 1/4 s from the third on: the warm-up (1/8), a sizing batch of one (1/8 s, long enough
    # for 1/16), then two more samples of one product, 1/4 s each. The first sample is the sizing's 1/8 s.
    fake = FakeProduct([1 / 8, 1 / 8], then=1 / 4)
    monkeypatch.setattr(hostbench, "np", fake)
    monkeypatch.setattr(hostbench, "time", fake)
    r = measure_matmul(2, 2, 1, repeats=3, min_time_s=1 / 16)
    assert r["products_per_sample"] == 1 and r["seconds"]["samples"] == [1 / 8, 1 / 4, 1 / 4]
    assert fake.products == 4


def test_a_matrix_drawn_once_is_the_one_multiplied_and_must_fit(monkeypatch):
    w = hostbench.random_matrix(3, 2)
    assert w.dtype == np.float32 and w.shape == (3, 2)
    assert np.array_equal(w, np.random.default_rng(0).standard_normal((3, 2), dtype=np.float32))
    multiplied = []
    real = np.matmul
    monkeypatch.setattr(hostbench.np, "matmul", lambda a, b, out: multiplied.append(a) or real(a, b, out=out))
    r = measure_matmul(3, 2, 1, repeats=1, min_time_s=0.0, w=w)
    assert r["flops"] == 12 and multiplied and all(a is w for a in multiplied)
    multiplied.clear()
    measure_matmul(3, 2, 1, repeats=1, min_time_s=0.0)  # drawn here: the same numbers
    assert np.array_equal(multiplied[0], w)
    with pytest.raises(ValueError, match="^w must be 3 x 2 float32, not 2 x 3 float32$"):
        measure_matmul(3, 2, 1, w=w.T.copy())
    with pytest.raises(ValueError, match="^w must be 3 x 2 float64, not 3 x 2 float32$"):
        measure_matmul(3, 2, 1, dtype="float64", w=w)


def test_matmul_refuses_empty_shapes():
    for shape in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        with pytest.raises(ValueError, match="^m, k, n and repeats must be at least 1$"):
            measure_matmul(*shape)
    with pytest.raises(ValueError, match="^m, k, n and repeats must be at least 1$"):
        measure_matmul(1, 1, 1, repeats=0)
    assert measure_matmul(1, 1, 1, repeats=1, min_time_s=0.0)["flops"] == 2


def test_parse_size():
    assert hostbench._parse_size("32768K") == 33_554_432   # 32,768 × 1,024
    assert hostbench._parse_size("260M") == 272_629_760    # 260 × 1,048,576
    assert hostbench._parse_size("1G") == 1_073_741_824
    assert hostbench._parse_size("48KiB") == 49_152
    assert hostbench._parse_size(" 2 m ") == 2_097_152
    assert hostbench._parse_size("512") == 512
    for bad in ("", "abc", "12X", "1.5M", None):
        assert hostbench._parse_size(bad) is None


def _cache(root, name, level, kind, size):
    folder = root / "cpu0" / "cache" / name
    folder.mkdir(parents=True)
    for file, text in (("level", level), ("type", kind), ("size", size)):
        if text is not None:
            (folder / file).write_text(f"{text}\n")
    return folder


def test_last_level_cache_from_a_fake_sys(tmp_path):
    _cache(tmp_path, "index00", 4, None, "1G")             # unreadable, listed first: skipped, the rest still read
    _cache(tmp_path, "index0", 1, "Data", "48K")
    _cache(tmp_path, "index1", 1, "Instruction", "32K")
    _cache(tmp_path, "index2", 2, "Unified", "2048K")
    l3 = _cache(tmp_path, "index3", 3, "Unified", "32768K")
    _cache(tmp_path, "index4", 4, "Instruction", "1G")     # an instruction cache never counts
    _cache(tmp_path, "index5", 4, None, "1G")              # unreadable: skipped
    _cache(tmp_path, "index6", 4, "Unified", "lots")       # size not understood: skipped
    (tmp_path / "cpu0" / "cache" / "uevent").write_text("")
    assert hostbench.last_level_cache(str(tmp_path)) == {"bytes": 33_554_432, "level": 3, "source": str(l3 / "size")}


def test_last_level_cache_prefers_the_larger_of_one_level(tmp_path):
    _cache(tmp_path, "index2", 3, "Unified", "16M")
    big = _cache(tmp_path, "index3", 3, "Unified", "32M")
    _cache(tmp_path, "index4", 3, "Unified", "8M")
    _cache(tmp_path, "index5", 2, "Unified", "64M")  # larger, but a lower level
    _cache(tmp_path, "index6", 3, "Unified", "32M")  # as large: the first one found stays
    assert hostbench.last_level_cache(str(tmp_path)) == {"bytes": 33_554_432, "level": 3, "source": str(big / "size")}
    assert hostbench.last_level_cache(str(tmp_path / "none")) == {"bytes": None, "level": None, "source": None}


def test_physical_cores_from_a_fake_sys(tmp_path, monkeypatch):
    for cpu, siblings in (("cpu0", "0,2"), ("cpu1", "1,3"), ("cpu2", "0,2"), ("cpu3", "1,3"), ("cpu4", "4")):
        (tmp_path / cpu / "topology").mkdir(parents=True)
        (tmp_path / cpu / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    (tmp_path / "cpu5").mkdir()              # no topology: skipped
    (tmp_path / "cpufreq" / "topology").mkdir(parents=True)  # not a cpuN folder
    (tmp_path / "cpufreq" / "topology" / "thread_siblings_list").write_text("9")
    assert hostbench.physical_cores(str(tmp_path)) == 3  # {0,2}, {1,3}, {4}
    # without /sys: psutil's physical count, else the logical CPUs, else 1
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 99 if logical else 7)
    assert hostbench.physical_cores(str(tmp_path / "none")) == 7
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert hostbench.physical_cores(str(tmp_path / "none")) == 5
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert hostbench.physical_cores(str(tmp_path / "none")) == 1


def test_run_bandwidth_plan_by_hand():
    # 2 threads, 32 MiB cache: max(256 MiB, 4 × 32 MiB) = 256 MiB, 128 MiB each
    assert hostbench.run_bandwidth_plan(2, 32 * MiB) == {
        "threads": 2, "llc_bytes": 32 * MiB, "cache_multiple": 4, "bytes_per_thread": 134_217_728,
        "working_set_bytes": 268_435_456, "samples": 15}
    # 2 threads, 260 MiB cache: 4 × 260 = 1040 MiB, 520 MiB each
    p = hostbench.run_bandwidth_plan(2, 260 * MiB)
    assert (p["bytes_per_thread"], p["working_set_bytes"]) == (520 * MiB, 1040 * MiB)
    # 3 threads, 100 MiB: 400 MiB ÷ 3 = 133.3 MiB, rounded up to 134 MiB each, 402 MiB in all
    p = hostbench.run_bandwidth_plan(3, 100 * MiB)
    assert (p["bytes_per_thread"], p["working_set_bytes"]) == (134 * MiB, 402 * MiB)
    # no cache known, 3 threads: 256 ÷ 3 = 85.3 -> 86 MiB
    assert hostbench.run_bandwidth_plan(3, None)["bytes_per_thread"] == 86 * MiB
    # 4 threads: 64 MiB each exactly (no rounding up of a whole MiB)
    assert hostbench.run_bandwidth_plan(4, None)["bytes_per_thread"] == 64 * MiB
    # whole bytes, never a float
    assert all(isinstance(hostbench.run_bandwidth_plan(t, None)["bytes_per_thread"], int) for t in (1, 3, 7))
    # threads below 1 count as 1
    assert hostbench.run_bandwidth_plan(0, None)["threads"] == 1
    assert hostbench.run_bandwidth_plan(0, None)["bytes_per_thread"] == 256 * MiB


def test_run_bandwidth_passes_the_plan_and_adds_the_cache(monkeypatch):
    calls = []

    def fake_measure(threads, bytes_per_thread, repeats):
        calls.append((threads, bytes_per_thread, repeats))
        return {"threads": threads, "bytes_per_sample": threads * bytes_per_thread, "gb_per_s": {"median": 1.0}}

    monkeypatch.setattr(hostbench, "measure_read_bandwidth", fake_measure)
    llc = {"bytes": 100 * MiB, "level": 3, "source": "/sys/x/size"}
    r = hostbench.run_bandwidth(3, llc, samples=4)
    assert calls == [(3, 134 * MiB, 4)]
    assert r == {"threads": 3, "bytes_per_sample": 402 * MiB, "gb_per_s": {"median": 1.0}, "working_set_bytes": 402 * MiB,
                 "llc_bytes": 100 * MiB, "llc_level": 3, "llc_source": "/sys/x/size", "cache_multiple": 4}
    monkeypatch.setattr(hostbench, "last_level_cache", lambda: {"bytes": None, "level": None, "source": None})
    r = hostbench.run_bandwidth(2)
    assert calls[-1] == (2, 128 * MiB, 15) and r["llc_bytes"] is None


def test_host_bandwidth_sizes(monkeypatch):
    calls = []
    monkeypatch.setattr(hostbench, "measure_read_bandwidth",
                        lambda threads, bytes_per_thread, repeats: calls.append((threads, bytes_per_thread, repeats)))
    hostbench.host_bandwidth(1)            # 256 MiB (2048 MiB ÷ 1 is more than 256)
    hostbench.host_bandwidth(16, repeats=5)  # 2048 ÷ 16 = 128 MiB
    hostbench.host_bandwidth(64, repeats=1)  # 2048 ÷ 64 = 32 MiB, raised to 64 MiB; repeats at least 3
    hostbench.host_bandwidth(0)            # counted as 1 thread for the size
    assert calls == [(1, 256 * MiB, 3), (16, 128 * MiB, 5), (64, 64 * MiB, 3), (0, 256 * MiB, 3)]
    assert all(isinstance(nbytes, int) for _, nbytes, _ in calls)


def test_bandwidth_drift_by_hand():
    before = {"median": 20.0, "min": 19.0, "max": 21.0}
    d = hostbench.bandwidth_drift(before, {"median": 18.0, "min": 17.0, "max": 19.0})
    assert d == {"before_median": 20.0, "after_median": 18.0, "change": pytest.approx(-0.1), "ranges_overlap": True}
    assert hostbench.bandwidth_drift(before, {"median": 18.0, "min": 17.0, "max": 18.9})["ranges_overlap"] is False
    assert hostbench.bandwidth_drift(before, {"median": 23.0, "min": 21.0, "max": 24.0}) == {
        "before_median": 20.0, "after_median": 23.0, "change": pytest.approx(0.15), "ranges_overlap": True}
    assert hostbench.bandwidth_drift(before, {"median": 23.0, "min": 21.1, "max": 24.0})["ranges_overlap"] is False
    assert math.isnan(hostbench.bandwidth_drift({"median": 0.0, "min": 0.0, "max": 0.0}, before)["change"])


def test_describe_reading_by_hand():
    bw = {"gb_per_s": {"samples": [20.1, 19.9, 20.0], "median": 20.0, "min": 19.9, "max": 20.1},
          "threads": 2, "bytes_per_sample": 256 * MiB}
    text = ("this host's memory read bandwidth for the run: 20 GB/s (median of 3 samples, 19.9–20.1) with 2 thread(s), "
            "the server's decode threads, over 256 MiB")
    assert hostbench.describe_reading(bw) == text
    # 256 MiB over a 32 MiB cache: 8 ×
    assert hostbench.describe_reading({**bw, "llc_bytes": 32 * MiB, "llc_source": "/sys/x/size"}) == (
        text + ", 8 × the 32 MiB last-level cache (/sys/x/size)")
    assert hostbench.describe_reading({**bw, "llc_bytes": 1024 * MiB, "llc_source": None}) == (
        text + ", 0.25 × the 1,024 MiB last-level cache (reported by the OS)")


def test_blas_info_keeps_plain_fields(monkeypatch):
    blas = {"user_api": "blas", "internal_api": "openblas", "prefix": "libopenblas", "version": "0.3.27",
            "threading_layer": "pthreads", "architecture": "Haswell", "num_threads": 2, "filepath": "/lib/x.so"}
    monkeypatch.setattr(threadpoolctl, "threadpool_info",
                        lambda: [{"user_api": "openmp", "num_threads": 4, "rich": object()}, {**blas, "extra": 1, "version": object()}])
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 6 if logical else 3)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("UNRELATED", "x")
    info = blas_info()
    # the kept keys, None where missing; an object (the blas entry's version) is left out, and so are other keys
    openmp = {"user_api": "openmp", "internal_api": None, "prefix": None, "version": None, "threading_layer": None,
              "architecture": None, "num_threads": 4, "filepath": None}
    expected_blas = {"user_api": "blas", "internal_api": "openblas", "prefix": "libopenblas", "threading_layer": "pthreads",
                     "architecture": "Haswell", "num_threads": 2, "filepath": "/lib/x.so"}
    assert info["libraries"] == [openmp, expected_blas]
    assert info["blas"] == expected_blas
    assert (info["logical_cpus"], info["physical_cores"], info["env"]) == (6, 3, {"OMP_NUM_THREADS": "2"})
    steer = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "3"}
    for name, value in steer.items():
        monkeypatch.setenv(name, value)
    assert blas_info()["env"] == steer
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: [])

    def cannot_tell(logical=True):
        raise RuntimeError("no /sys")

    monkeypatch.setattr(psutil, "cpu_count", cannot_tell)
    info = blas_info()
    assert info["blas"] is None and info["physical_cores"] is None and info["libraries"] == []


def test_matvec_bandwidth_is_the_matrix_bytes_over_each_products_time(monkeypatch):
    """8 MiB asked: 8,388,608 ÷ (4 × 4,096) = 512 rows of 16 KiB; the warm-up product is not timed."""
    ticks = iter([10.0, 10.001, 20.0, 20.004, 30.0, 30.002])
    monkeypatch.setattr(hostbench, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    r = hostbench.measure_matvec_bandwidth(1, 8 * MiB, repeats=3)
    assert (r["rows"], r["columns"], r["bytes_per_sample"]) == (512, 4096, 8_388_608)
    assert r["seconds"]["samples"] == pytest.approx([0.001, 0.004, 0.002])
    assert r["gb_per_s"]["samples"] == pytest.approx([8.388608, 2.097152, 4.194304])
    with pytest.raises(ValueError):
        hostbench.measure_matvec_bandwidth(0, MiB)


def test_matvec_bandwidth_really_multiplies():
    r = hostbench.measure_matvec_bandwidth(2, 4 * MiB, repeats=2)
    assert r["threads"] == 2 and len(r["gb_per_s"]["samples"]) == 2 and r["gb_per_s"]["min"] > 0


# --- other platforms: no /sys ---------------------------------------------------------------------------------------

def test_macos_cache_size_comes_from_sysctl(monkeypatch, tmp_path):
    import subprocess
    import sys

    asked = []

    def sysctl(argv, **kwargs):
        asked.append(argv[-1])
        known = {"hw.perflevel0.l2cachesize": "16777216\n"}   # an Apple M-series chip: no L3, 16 MiB of L2
        out = known.get(argv[-1])
        return subprocess.CompletedProcess(argv, 0 if out else 1, out or "", "")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(subprocess, "run", sysctl)
    found = hostbench.last_level_cache(str(tmp_path / "no-sys"))
    assert found == {"bytes": 16 * 2**20, "level": 2, "source": "sysctl hw.perflevel0.l2cachesize"}
    assert asked == ["hw.l3cachesize", "hw.perflevel0.l2cachesize"]


@pytest.mark.parametrize("platform", ["win32", "darwin"])
def test_no_cache_size_is_said_and_the_floor_used(monkeypatch, tmp_path, platform):
    import subprocess
    import sys

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", "unknown oid"))
    found = hostbench.last_level_cache(str(tmp_path / "no-sys"))
    assert found == {"bytes": None, "level": None, "source": None}
    plan = hostbench.run_bandwidth_plan(4, found["bytes"])
    assert plan["working_set_bytes"] == hostbench.MIN_WORKING_SET == 256 * 2**20
    reading = {"gb_per_s": {"median": 10.0, "min": 9.0, "max": 11.0, "samples": [10.0] * 15}, "threads": 4,
               "bytes_per_sample": plan["working_set_bytes"], "llc_bytes": None}
    assert "this OS reported no last-level cache size, so the working set is the 256 MiB floor" in \
        hostbench.describe_reading(reading)
