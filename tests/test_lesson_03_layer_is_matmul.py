"""Lesson 03 replayed from its recorded fixture: the arithmetic of every row, never the speed."""

from __future__ import annotations

import math

import numpy as np
import pytest


LESSON = "03_layer_is_matmul"


def _rows(result, name):
    table = result.table(name)
    cols = [c.name + (f" ({c.unit})" if c.unit else "") for c in table.columns]
    return [dict(zip(cols, row)) for row in table.rows]


# --- replayed result ------------------------------------------------------------------------

def test_every_row_is_consistent_arithmetic(result):
    rows = _rows(result, "matvec_vs_matmul")
    assert rows
    for r in rows:
        m, k, n = r["M (rows)"], r["K (columns)"], r["N (tokens)"]
        seconds = r["time (ms, median)"] / 1000.0
        flops = 2 * m * k * n
        assert r["speed (GFLOP/s)"] == pytest.approx(flops / seconds / 1e9, rel=1e-12)
        assert r["bytes moved (bytes)"] == (m * k + k * n + m * n) * 4  # float32
        assert r["arithmetic intensity (FLOP/byte)"] == pytest.approx(flops / r["bytes moved (bytes)"], rel=1e-12)
        assert r["effective bandwidth (GB/s)"] == pytest.approx(r["bytes moved (bytes)"] / seconds / 1e9, rel=1e-12)
        assert r["time per token (ms)"] == pytest.approx(r["time (ms, median)"] / n, rel=1e-12)


def test_time_per_token_is_relative_to_one_token(result):
    rows = _rows(result, "matvec_vs_matmul")
    by_matrix: dict[str, list[dict]] = {}
    for r in rows:
        by_matrix.setdefault(r["matrix"], []).append(r)
    for matrix, group in by_matrix.items():
        assert group[0]["N (tokens)"] == 1, matrix
        assert group[0]["time per token (× N = 1)"] == 1.0
        base = group[0]["time per token (ms)"]
        for r in group:
            assert r["time per token (× N = 1)"] == pytest.approx(r["time per token (ms)"] / base, rel=1e-12)
        assert [r["N (tokens)"] for r in group] == sorted(r["N (tokens)"] for r in group)


def test_matvec_intensity_is_about_half_a_flop_per_byte(result):
    # one token: 2·M·K FLOPs over about 4·M·K bytes of float32 weights
    for r in _rows(result, "matvec_vs_matmul"):
        if r["N (tokens)"] == 1:
            assert 0.45 < r["arithmetic intensity (FLOP/byte)"] < 0.5


def test_measurements_match_the_table(result):
    rows = {(r["M (rows)"], r["K (columns)"], r["N (tokens)"]): r for r in _rows(result, "matvec_vs_matmul")}
    gflops = [m for m in result.measurements if m.name == "matmul_gflop_per_s"]
    per_token = {(m.settings["m"], m.settings["k"], m.settings["n"]): m for m in result.measurements if m.name == "matmul_ms_per_token"}
    assert len(gflops) == len(rows) == len(per_token)
    for g in gflops:
        key = (g.settings["m"], g.settings["k"], g.settings["n"])
        assert g.settings["dtype"] == "float32" and g.higher_is_better is True
        assert key in rows
        t = per_token[key]
        assert t.higher_is_better is False
        m, k, n = key
        # each sample pair is the same timing seen two ways
        for gs, ts in zip(g.samples, t.samples):
            assert gs == pytest.approx(2 * m * k * n / (ts * n / 1000.0) / 1e9, rel=1e-9)
        assert t.median * n == pytest.approx(rows[key]["time (ms, median)"], rel=1e-12)
        assert len(g.samples) == result.settings["repeats"]


def test_shapes_come_from_the_model(result, lesson):
    info = result.host_values["model_info"]
    hp = info["hyperparameters"]
    shapes = {r["tensor"]: (r["M (rows)"], r["K (columns)"]) for r in _rows(result, "matrix_shapes")}
    assert shapes["blk.0.attn_q.weight"] == (hp["n_embd"], hp["n_embd"])
    assert shapes["blk.0.ffn_up.weight"] == (hp["n_ff"], hp["n_embd"])
    assert shapes["blk.0.ffn_down.weight"] == (hp["n_embd"], hp["n_ff"])
    # The output matrix: output.weight, or token_embd itself when the model ties them.
    assert shapes.get("output.weight", shapes.get("token_embd.weight")) == (hp["n_vocab"], hp["n_embd"])
    assert shapes["—"] == (lesson.COURSE_WIDTH, lesson.COURSE_WIDTH)


def test_plot_has_one_series_per_timed_matrix(result):
    plot = next(p for p in result.plots if p.name == "gflops_vs_tokens")
    assert plot.log_x and plot.log_y
    timed = {r["matrix"] for r in _rows(result, "matvec_vs_matmul")}
    assert len(plot.series) == len(timed)
    for s in plot.series:
        assert s.x[0] == 1 and all(y > 0 for y in s.y)


def test_linear_map_example(result):
    lin = result.host_values["worked_examples"]["linear"]
    for i, row in enumerate(_rows(result, "linear_map")):
        expected = sum(w * x for w, x in zip(row["row i of W"], row["x"])) + row["b_i"]
        assert row["y_i"] == pytest.approx(expected, abs=1e-12)
        assert row["row i of W"] == lin["W"][i]


def test_composition_and_nonlinearity(result):
    c = result.host_values["worked_examples"]["composition"]
    product = np.array(c["W2"]) @ np.array(c["W1"])
    assert np.allclose(product, c["W2W1"], atol=1e-12)
    assert c["max_abs_difference"] < 1e-12
    assert np.allclose(c["two_steps"], c["one_step"], atol=1e-12)
    assert c["silu_max_abs_difference"] > 1e-3  # the nonlinearity breaks the composition
    values = dict(result.table("composition").rows)
    assert values["max abs difference"] == c["max_abs_difference"]


def test_rmsnorm_gives_root_mean_square_one(result):
    rn = result.host_values["worked_examples"]["rmsnorm"]
    assert rn["rms_after"] == pytest.approx(1.0, abs=1e-5)
    assert rn["rms_before"] == pytest.approx(math.sqrt(sum(v * v for v in rn["v"]) / len(rn["v"])), rel=1e-12)
    assert rn["rms_before"] != pytest.approx(1.0, abs=0.1)  # the example does change the vector's size
    ratios = [a / b for a, b in zip(rn["normed"], rn["v"])]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-12)  # one common scale


def test_blas_table_reports_the_recorded_library(result):
    values = dict(result.table("blas").rows)
    blas = result.host_values["blas_info"]
    assert values["BLAS threads"] == (blas["blas"] or {}).get("num_threads")
    assert values["numpy"] == blas["numpy_version"]


# --- pure functions ---------------------------------------------------------------------------

def test_rms_norm_and_silu(lesson):
    v = np.array([3.0, -4.0])
    assert lesson.rms(v) == pytest.approx(math.sqrt(12.5))
    assert lesson.rms(lesson.rms_norm(v, eps=0.0)) == pytest.approx(1.0)
    assert lesson.silu(np.array([0.0]))[0] == 0.0
    assert lesson.silu(np.array([20.0]))[0] == pytest.approx(20.0, rel=1e-6)


def test_worked_examples_are_deterministic(lesson):
    assert lesson.worked_examples() == lesson.worked_examples()
    assert lesson.worked_examples(1) != lesson.worked_examples(2)


def _info(tensors):
    return {"tensors": [{"name": n, "shape": s} for n, s in tensors]}


def test_matrix_shapes_read_gguf_order_and_tied_output(lesson):
    info = _info([("token_embd.weight", [64, 1000]), ("blk.0.attn_q.weight", [64, 64]),
                  ("blk.0.ffn_up.weight", [64, 176]), ("blk.0.ffn_down.weight", [176, 64])])
    shapes = lesson.matrix_shapes(info)
    got = {s["tensor"]: (s["m"], s["k"]) for s in shapes}
    assert got["blk.0.ffn_up.weight"] == (176, 64)  # [K, M] in the file is an M × K matrix
    assert got["blk.0.ffn_down.weight"] == (64, 176)
    assert got["token_embd.weight"] == (1000, 64)  # no output.weight: the logits reuse the embeddings
    assert got[None] == (lesson.COURSE_WIDTH, lesson.COURSE_WIDTH)
    assert not any(s["duplicate"] for s in shapes)


def test_matrix_shapes_mark_duplicates_and_work_without_a_model(lesson):
    info = _info([("blk.0.attn_q.weight", [4096, 4096]), ("output.weight", [4096, 32256])])
    shapes = lesson.matrix_shapes(info)
    assert [s["duplicate"] for s in shapes] == [False, False, True]  # the course shape repeats attn_q
    only = lesson.matrix_shapes(None)
    assert [(s["m"], s["k"]) for s in only] == [(lesson.COURSE_WIDTH, lesson.COURSE_WIDTH)]


def test_planned_counts_skip_only_oversized_products(lesson):
    assert lesson.planned_counts(4096, 4096) == (lesson.TOKEN_COUNTS, [])
    run, skipped = lesson.planned_counts(32256, 4096)
    assert run[0] == 1 and 2048 in skipped
    assert all(2 * 32256 * 4096 * n <= lesson.MAX_FLOPS for n in run if n > 1)
    assert lesson.planned_counts(10**9, 10**9)[0] == [1]  # one token is always measured


def test_row_for(lesson):
    bench = {"m": 10, "k": 20, "n": 4, "seconds": {"median": 0.002}, "bytes_moved": (200 + 80 + 40) * 4}
    row = lesson.row_for("x", bench, base_ms_per_token=1.0)
    assert row[4] == pytest.approx(2.0)               # ms
    assert row[5] == pytest.approx(1600 / 0.002 / 1e9)  # GFLOP/s
    assert row[8] == pytest.approx(1600 / 1280)        # FLOP/byte
    assert row[9] == pytest.approx(0.5) and row[10] == pytest.approx(0.5)
    assert len(row) == len(lesson.MATMUL_COLUMNS)


def test_sample_length_note_comes_from_the_setting_and_the_data(result, lesson):
    assert result.settings["min_sample_s"] == lesson.MIN_SAMPLE_S
    note = next(n for n in result.table("matvec_vs_matmul").notes if n.startswith("Times are medians"))
    assert f"about {lesson.MIN_SAMPLE_S * 1000:g} ms" in note
    benches = [v for k, v in result.host_values.items() if k.startswith("matmul_")]
    lasted = [ms for b in benches for ms in lesson.sample_ms(b)]
    assert f"(measured: {min(lasted):,.0f}–{max(lasted):,.0f} ms)" in note


def test_sample_ms_and_shown(lesson):
    bench = {"products_per_sample": 10, "seconds": {"samples": [0.001, 0.002]}}
    assert lesson.sample_ms(bench) == pytest.approx([10.0, 20.0])
    assert lesson.shown(4096) == "4,096"
    assert lesson.shown(None) == "not in the file"
    assert lesson.shown([11008, 11008]) == "per layer 11,008"
    assert lesson.shown([8, 16]) == "per layer 8–16"


def _ctx(lesson, model_path):
    from bytesup.client import LlamaServer
    from bytesup.runner import LessonContext, Reporter, RunOptions

    return LessonContext(LESSON, lesson.TITLE, server=LlamaServer("http://127.0.0.1:9"), options=RunOptions(),
                         model_path=model_path, sink=[], replay=None, progress=Reporter(None, LESSON))


def test_model_info_skips_only_a_missing_model(tmp_path, lesson):
    from bytesup.gguf_read import GGUFError

    assert _ctx(lesson, None).model_info() is None
    assert _ctx(lesson, tmp_path / "missing.gguf").model_info() is None
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 12)  # a GGUF magic with a header cut short
    with pytest.raises(GGUFError):
        _ctx(lesson, bad).model_info()
