"""hostbench: shapes and arithmetic of the results, never the speed (the host is shared and noisy)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bytesup.hostbench import blas_info, measure_matmul, measure_matmul_peak, measure_read_bandwidth, summarize


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
    for s, g, b in zip(r["seconds"]["samples"], r["gflop_per_s"]["samples"], r["gb_per_s"]["samples"]):
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
