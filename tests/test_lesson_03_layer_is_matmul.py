"""Lesson 03: its arithmetic against hand-worked numbers and naive loops, its main run on hand-made
host measurements, and its recorded run replayed byte for byte (the arithmetic of every row, never the speed)."""

from __future__ import annotations

import math

import pytest
from lessonkit import QueuedServer, hand_context

from bytesup.store.rows import cells, columns
from bytesup.store.views import lesson03, table

LESSON = "03_layer_is_matmul"


def _rows(result, name):
    table = result.table(name)
    cols = [c.name + (f" ({c.unit})" if c.unit else "") for c in table.columns]
    return [dict(zip(cols, row, strict=True)) for row in table.rows]


# --- naive references: explicit loops, nothing from the lesson -------------------------------------

def loop_matvec(w, x):
    out = []
    for row in w:
        acc = 0.0
        for j in range(len(x)):
            acc += row[j] * x[j]
        out.append(acc)
    return out


def loop_matmul(a, b):
    out = []
    for i in range(len(a)):
        row = []
        for j in range(len(b[0])):
            acc = 0.0
            for t in range(len(b)):
                acc += a[i][t] * b[t][j]
            row.append(acc)
        out.append(row)
    return out


def loop_silu(v):
    return [x / (1.0 + math.exp(-x)) for x in v]


# --- worked examples: hand arithmetic ---------------------------------------------------------------

def test_linear_map_on_small_integers(lesson):
    # W = [[1, 2], [3, 4]], x = [5, 6], b = [10, 20]:
    # y0 = 1·5 + 2·6 + 10 = 27;  y1 = 3·5 + 4·6 + 20 = 59  (Wx − b would give 7 and 19)
    lin = lesson.linear_map([[1.0, 2.0], [3.0, 4.0]], [5.0, 6.0], [10.0, 20.0])
    assert lin.y == [27.0, 59.0]
    assert lin.flops == 8  # 2 rows × 2 columns × (one multiply + one add)


def test_the_seeded_inputs_and_their_linear_map(lesson):
    inputs = lesson.worked_inputs(lesson.WORKED_SEED)
    assert inputs.w == [[-1.7, -1.1, 1.2], [0.3, -1.6, -0.3]]
    assert inputs.x == [-0.1, -1.4, 0.9]
    assert inputs.b == [-1.5, -0.4]
    lin = lesson.linear_map(inputs.w, inputs.x, inputs.b)
    # y0 = (−1.7)(−0.1) + (−1.1)(−1.4) + (1.2)(0.9) + (−1.5) = 0.17 + 1.54 + 1.08 − 1.5 = 1.29
    # y1 = (0.3)(−0.1) + (−1.6)(−1.4) + (−0.3)(0.9) + (−0.4) = −0.03 + 2.24 − 0.27 − 0.4 = 1.54
    assert lin.y == pytest.approx([1.29, 1.54], abs=1e-12)
    assert lin.y == pytest.approx([a + c for a, c in zip(loop_matvec(inputs.w, inputs.x), inputs.b, strict=True)], abs=1e-12)
    assert lin.flops == 12


def test_composition_on_small_integers(lesson):
    # W1 = [[1, 0], [1, 1]], W2 = [[2, 1]], x = [1, −1]
    # W1x = [1, 0]; W2(W1x) = 2·1 + 1·0 = 2
    # W2W1 = [[2·1 + 1·1, 2·0 + 1·1]] = [[3, 1]]; (W2W1)x = 3 − 1 = 2
    # SiLU(W1x) = [1/(1 + e^−1), 0] = [0.7310585786300049, 0]; W2 SiLU(W1x) = 1.4621171572600098
    c = lesson.composition([[1.0, 0.0], [1.0, 1.0]], [[2.0, 1.0]], [1.0, -1.0])
    assert c.w2w1 == [[3.0, 1.0]]
    assert c.two_steps == [2.0] and c.one_step == [2.0]
    assert c.max_abs_difference == 0.0
    assert c.with_silu == pytest.approx([1.4621171572600098], rel=1e-15)
    assert c.silu_max_abs_difference == pytest.approx(2.0 - 1.4621171572600098, rel=1e-14)


def test_the_seeded_composition_against_loops(lesson):
    inputs = lesson.worked_inputs(lesson.WORKED_SEED)
    assert inputs.w1 == [[0.1, -0.3, 0.3], [1.0, 1.8, -0.9], [0.6, 0.8, -0.8]]
    assert inputs.w2 == [[-2.0, 1.9, -0.8], [-0.7, 1.6, 0.3]]
    assert inputs.x2 == [-0.1, 1.1, -1.9]
    c = lesson.composition(inputs.w1, inputs.w2, inputs.x2)
    # W2W1 row 0: −2·0.1 + 1.9·1.0 − 0.8·0.6 = 1.22;  −2·(−0.3) + 1.9·1.8 − 0.8·0.8 = 3.38; ...
    expected_product = loop_matmul(inputs.w2, inputs.w1)
    assert expected_product[0][:2] == pytest.approx([1.22, 3.38], abs=1e-12)
    for got, want in zip(c.w2w1, expected_product, strict=True):
        assert got == pytest.approx(want, abs=1e-12)
    two_steps = loop_matvec(inputs.w2, loop_matvec(inputs.w1, inputs.x2))
    assert two_steps == pytest.approx([6.769, 7.083], abs=1e-12)
    assert c.two_steps == pytest.approx(two_steps, abs=1e-12)
    assert c.one_step == pytest.approx(loop_matvec(expected_product, inputs.x2), abs=1e-12)
    assert c.max_abs_difference < 1e-12
    with_silu = loop_matvec(inputs.w2, loop_silu(loop_matvec(inputs.w1, inputs.x2)))
    assert c.with_silu == pytest.approx(with_silu, rel=1e-12)
    assert c.silu_max_abs_difference == pytest.approx(max(abs(a - b) for a, b in zip(with_silu, two_steps, strict=True)), rel=1e-12)


def test_rmsnorm_by_hand(lesson):
    # v = [3, −4]: mean of squares (9 + 16)/2 = 12.5, root mean square √12.5 = 3.5355339059327378
    ex = lesson.rmsnorm_example([3.0, -4.0], eps=0.0)
    assert ex.rms_before == pytest.approx(3.5355339059327378, rel=1e-15)
    assert ex.normed == pytest.approx([3 / 3.5355339059327378, -4 / 3.5355339059327378], rel=1e-15)
    assert ex.normed == pytest.approx([0.848528137423857, -1.131370849898476], rel=1e-14)
    assert ex.rms_after == pytest.approx(1.0, rel=1e-15)
    # with the epsilon the divisor is √(12.5 + 1e-6)
    with_eps = lesson.rmsnorm_example([3.0, -4.0])
    assert with_eps.eps == 1e-6
    assert with_eps.normed[0] == pytest.approx(3 / math.sqrt(12.5 + 1e-6), rel=1e-15)
    assert with_eps.rms_after == pytest.approx(math.sqrt(12.5 / (12.5 + 1e-6)), rel=1e-15)


def test_the_seeded_rmsnorm_against_a_loop(lesson):
    v = lesson.worked_inputs(lesson.WORKED_SEED).v
    assert v == [3.01, -2.66, -0.88, 2.65, 1.74, 0.27, 2.01, -8.48]
    squares = 0.0
    for x in v:
        squares += x * x
    rms = math.sqrt(squares / len(v))
    ex = lesson.rmsnorm_example(v)
    assert ex.rms_before == pytest.approx(rms, rel=1e-12)
    assert ex.normed == pytest.approx([x / math.sqrt(squares / len(v) + 1e-6) for x in v], rel=1e-12)


def test_silu_and_rms(lesson):
    import numpy as np

    assert lesson.silu(np.array([0.0]))[0] == 0.0
    assert lesson.silu(np.array([1.0]))[0] == pytest.approx(0.7310585786300049, rel=1e-15)  # 1/(1 + e^−1)
    assert lesson.silu(np.array([-1.0]))[0] == pytest.approx(-0.2689414213699951, rel=1e-15)  # −1/(1 + e)
    assert lesson.rms(np.array([3.0, -4.0])) == pytest.approx(math.sqrt(12.5))


# --- shapes and timings: hand arithmetic ------------------------------------------------------------

def test_matmul_row_by_hand(lesson):
    # W 10 × 20 times 4 tokens in 2 ms: 2·10·20·4 = 1,600 FLOPs; bytes (200 + 80 + 40)·4 = 1,280
    bench = {"m": 10, "k": 20, "n": 4, "seconds": {"median": 0.002}, "bytes_moved": 1280}
    row = lesson.matmul_row("x", bench, base_ms_per_token=1.0)
    assert (row.label, row.m, row.k, row.n) == ("x", 10, 20, 4)
    assert row.ms == pytest.approx(2.0)
    assert row.gflop_per_s == pytest.approx(8e-4)      # 1,600 / 0.002 s / 1e9
    assert row.bytes_moved == 1280
    assert row.gb_per_s == pytest.approx(6.4e-4)       # 1,280 / 0.002 s / 1e9
    assert row.flop_per_byte == pytest.approx(1.25)    # 1,600 / 1,280
    assert row.ms_per_token == pytest.approx(0.5)      # 2 ms / 4 tokens
    assert row.vs_one_token == pytest.approx(0.5)      # 0.5 ms against 1 ms alone
    assert lesson.matmul_row("x", bench, base_ms_per_token=0.25).vs_one_token == pytest.approx(2.0)
    # the row is the table's: its fields are the columns, in order
    assert cells([row])[0][:4] == ["x", 10, 20, 4] and len(columns(lesson03.MatmulRow)) == len(cells([row])[0]) == 11


def _info(tensors):
    return {"tensors": [{"name": n, "shape": s} for n, s in tensors]}


def test_matrix_shapes_read_gguf_order_and_tied_output(lesson):
    info = _info([("token_embd.weight", [64, 1000]), ("blk.0.attn_q.weight", [64, 64]),
                  ("blk.0.ffn_up.weight", [64, 176]), ("blk.0.ffn_down.weight", [176, 64])])
    shapes = lesson.matrix_shapes(info)
    got = {s.tensor: (s.m, s.k) for s in shapes}
    assert got["blk.0.ffn_up.weight"] == (176, 64)  # [K, M] in the file is an M × K matrix
    assert got["blk.0.ffn_down.weight"] == (64, 176)
    assert got["token_embd.weight"] == (1000, 64)  # no output.weight: the logits reuse the embeddings
    assert got[None] == (4096, 4096)
    assert [s.weights for s in shapes] == [4096, 11264, 11264, 64000, 16777216]
    assert not any(s.duplicate for s in shapes)


def test_matrix_shapes_mark_duplicates_and_work_without_a_model(lesson):
    info = _info([("blk.0.attn_q.weight", [4096, 4096]), ("output.weight", [4096, 32256])])
    shapes = lesson.matrix_shapes(info)
    assert [s.duplicate for s in shapes] == [False, False, True]  # the course shape repeats attn_q
    only = lesson.matrix_shapes(None)
    assert [(s.m, s.k) for s in only] == [(4096, 4096)]



def test_matrix_shapes_use_output_weight_when_the_file_has_both(lesson):
    # output.weight [64, 500] is a 500 × 64 matrix; token_embd.weight [64, 1000] is not the logits then.
    info = _info([("token_embd.weight", [64, 1000]), ("output.weight", [64, 500])])
    shapes = lesson.matrix_shapes(info)
    assert [(s.label, s.tensor, s.m, s.k) for s in shapes][0] == ("output (logits)", "output.weight", 500, 64)


def test_planned_counts_skip_only_oversized_products(lesson):
    # the ceiling is 2 · 4,096 · 4,096 · 2,048 = 68,719,476,736 FLOPs
    assert lesson.MAX_FLOPS == 68_719_476_736
    assert lesson.planned_counts(4096, 4096) == ([1, 8, 64, 512, 2048], [])
    # 32,256 × 4,096 at N = 512: 135.3 GFLOP, over the ceiling; at N = 256 it would be under
    assert lesson.planned_counts(32256, 4096) == ([1, 8, 64], [512, 2048])
    assert lesson.planned_counts(10**9, 10**9) == ([1], [8, 64, 512, 2048])  # one token is always measured


def test_matvec_summary_picks_by_field(lesson):
    def row(label, n, gflops, bytes_moved, gbs, fpb):
        return lesson03.MatmulRow(label=label, m=1, k=1, n=n, ms=1.0, gflop_per_s=gflops, bytes_moved=bytes_moved,
                                gb_per_s=gbs, flop_per_byte=fpb, ms_per_token=1.0, vs_one_token=1.0)

    rows = [row("a", 1, 10.0, 100, 50.0, 0.4), row("a", 8, 80.0, 120, 9.0, 3.0),
            row("b", 1, 20.0, 900, 30.0, 0.45), row("b", 8, 60.0, 950, 8.0, 3.5)]
    s = lesson.matvec_summary(rows)
    assert s.max_intensity == 0.45 and s.best_gflop_per_s == 20.0 and s.best_batched_gflop_per_s == 80.0
    assert s.largest.label == "b" and s.best_gb_per_s == 50.0
    assert lesson.matvec_summary([rows[0]]).best_batched_gflop_per_s is None
    # N = 2 is batched too: the best batched product is the 2-token one, 15 GFLOP/s.
    assert lesson.matvec_summary([rows[0], row("a", 2, 15.0, 104, 40.0, 0.8)]).best_batched_gflop_per_s == 15.0


def test_each_shape_draws_its_matrix_once_for_every_n(lesson, monkeypatch):
    from bytesup.host import hostbench
    from bytesup.store.views.lesson03 import MatrixShape

    drawn, timed = [], []
    monkeypatch.setattr(hostbench, "random_matrix", lambda m, k, dtype: drawn.append((m, k, dtype)) or object())
    monkeypatch.setattr(hostbench, "measure_matmul", lambda m, k, n, w, **_: timed.append((n, w)) or {"n": n})

    class Ctx:
        def host(self, name, measure):
            return measure()

        def track(self, items, text):
            return items

    out = lesson.time_matrix(Ctx(), MatrixShape("q", "blk.0.attn_q.weight", 4096, 4096, False), repeat=1)
    assert drawn == [(4096, 4096, "float32")]  # once, for N = 1, 8, 64, 512 and 2,048
    assert [n for n, _ in timed] == [1, 8, 64, 512, 2048] and len({id(w) for _, w in timed}) == 1
    assert [b["n"] for b in out.benches] == [1, 8, 64, 512, 2048]


def test_sample_ms_and_shown(lesson):
    bench = {"products_per_sample": 10, "seconds": {"samples": [0.001, 0.002]}}
    assert lesson.sample_ms(bench) == pytest.approx([10.0, 20.0])
    assert lesson03.shown(4096) == "4,096"
    assert lesson03.shown(None) == "not in the file"
    assert lesson03.shown([11008, 11008]) == "per layer 11,008"
    assert lesson03.shown([8, 16]) == "per layer 8–16"


# --- main on hand-made host measurements ------------------------------------------------------------

TIMES = {1: 0.001, 8: 0.002, 64: 0.004, 512: 0.016, 2048: 0.032}  # median seconds per product
REPS = 100  # products per sample


def bench(m, k, n, median):
    samples = [median * 0.5, median * 1.5]  # their median is `median`
    flops = 2 * m * k * n
    return {"m": m, "k": k, "n": n, "dtype": "float32", "products_per_sample": REPS,
            "seconds": {"samples": samples, "median": median, "min": samples[0], "max": samples[1]},
            "flops": flops, "bytes_moved": (m * k + k * n + m * n) * 4,
            "gflop_per_s": {"samples": [flops / s / 1e9 for s in samples]}}


HAND_MODEL = {
    "tensors": [{"name": "token_embd.weight", "shape": [64, 300000]},      # tied output: 300,000 × 64
                {"name": "blk.0.attn_q.weight", "shape": [4, 4]},
                {"name": "blk.0.ffn_up.weight", "shape": [4, 8]},          # 8 × 4
                {"name": "blk.0.ffn_down.weight", "shape": [8, 4]}],       # 4 × 8
    "hyperparameters": {"n_embd": 4, "n_ff": 8, "n_vocab": 300000},
}
BLAS = {"numpy_version": "9.9", "blas": {"internal_api": "openblas", "version": "1.0", "architecture": "Haswell",
                                         "threading_layer": "pthreads", "num_threads": 3},
        "logical_cpus": 4, "env": {"OMP_NUM_THREADS": "3"}}


def hand_values():
    values = {"model_info": HAND_MODEL, "blas_info": BLAS}
    for m, k, counts in [(4, 4, TIMES), (8, 4, TIMES), (4, 8, TIMES), (4096, 4096, TIMES)]:
        for n, t in counts.items():
            values[f"matmul_{m}x{k}x{n}"] = bench(m, k, n, t)
    for n in (1, 8, 64, 512):  # N = 2,048 is over the ceiling for 300,000 × 64
        values[f"matmul_300000x64x{n}"] = bench(300000, 64, n, 0.004 if n == 1 else TIMES[n])
    return values


@pytest.fixture(scope="module")
def hand_result(lesson):
    server = QueuedServer({})
    result = lesson.main(hand_context(LESSON, server, host_values=hand_values()))
    assert server.requests == [] and server.left() == {}  # the lesson asks the server nothing
    return result


def test_main_computes_the_worked_examples_without_recording_them(hand_result):
    assert "worked_examples" not in hand_result.host_values  # hand_context would fail on a value it lacks
    lin = _rows(hand_result, "linear_map")
    assert [r["y_i"] for r in lin] == pytest.approx([1.29, 1.54], abs=1e-12)  # worked by hand above
    assert [r["b_i"] for r in lin] == [-1.5, -0.4]
    assert "12 FLOPs" in hand_result.table("linear_map").notes[0]
    composition = dict(hand_result.table("composition").rows)
    assert composition["W2(W1x): two steps"] == pytest.approx([6.769, 7.083], abs=1e-12)
    assert composition["max abs difference"] < 1e-12
    rmsnorm = {r["vector"]: r for r in _rows(hand_result, "rmsnorm")}
    assert rmsnorm["after"]["root mean square"] == pytest.approx(1.0, abs=1e-6)


def test_main_renders_the_blas_reading(hand_result):
    values = dict(hand_result.table("blas").rows)
    assert values["numpy"] == "9.9" and values["BLAS threads"] == 3 and values["logical CPUs"] == 4
    assert values["thread settings in the environment"] == "OMP_NUM_THREADS=3"
    assert hand_result.table("blas").notes == ["numpy hands every product below to openblas running 3 thread(s) on 4 logical CPU(s)."]


def test_main_lists_the_model_shapes(hand_result):
    rows = [(r["tensor"], r["M (rows)"], r["K (columns)"], r["weights"]) for r in _rows(hand_result, "matrix_shapes")]
    assert rows == [("blk.0.attn_q.weight", 4, 4, 16), ("blk.0.ffn_up.weight", 8, 4, 32), ("blk.0.ffn_down.weight", 4, 8, 32),
                    ("token_embd.weight", 300000, 64, 19200000), ("—", 4096, 4096, 16777216)]
    assert hand_result.table("matrix_shapes").notes[0].startswith("The served model has width 4, feed-forward width 8")


def test_main_matmul_rows_by_hand(hand_result):
    rows = {(r["M (rows)"], r["K (columns)"], r["N (tokens)"]): r for r in _rows(hand_result, "matvec_vs_matmul")}
    assert len(rows) == 5 * 4 + 4  # N = 2,048 skipped for the 300,000 × 64 matrix
    # attn_q, N = 8, 2 ms: 2·4·4·8 = 256 FLOPs, bytes (16 + 32 + 32)·4 = 320
    r = rows[(4, 4, 8)]
    assert r["time (ms, median)"] == pytest.approx(2.0)
    assert r["speed (GFLOP/s)"] == pytest.approx(1.28e-4)          # 256 / 0.002 / 1e9
    assert r["bytes moved (bytes)"] == 320
    assert r["effective bandwidth (GB/s)"] == pytest.approx(1.6e-4)  # 320 / 0.002 / 1e9
    assert r["arithmetic intensity (FLOP/byte)"] == pytest.approx(0.8)
    assert r["time per token (ms)"] == pytest.approx(0.25)          # 2 ms / 8
    assert r["time per token (× N = 1)"] == pytest.approx(0.25)     # against 1 ms alone
    # the tied output, N = 512 in 16 ms against 4 ms alone: 16/512 = 0.03125 ms per token, ÷ 4 = 0.0078125
    r = rows[(300000, 64, 512)]
    assert r["time per token (× N = 1)"] == pytest.approx(0.0078125)
    assert r["bytes moved (bytes)"] == (19_200_000 + 32_768 + 153_600_000) * 4
    # the course-sized matrix at N = 2,048: 68,719,476,736 FLOPs in 32 ms
    r = rows[(4096, 4096, 2048)]
    assert r["speed (GFLOP/s)"] == pytest.approx(2147.483648)
    assert r["arithmetic intensity (FLOP/byte)"] == pytest.approx(512.0)  # 2·4096 ÷ (4 · 4) for square W, X, Y
    assert r["time per token (× N = 1)"] == pytest.approx(0.015625)  # (32/2048) ms ÷ 1 ms


def test_the_main_matmul_table_is_the_full_one_narrowed(hand_result):
    """The main text shows seven of the full table's columns, in the view's order, each cell the full table's own."""
    main, full = hand_result.table("matvec_vs_matmul_main"), hand_result.table("matvec_vs_matmul")
    heads = [(c.name, c.unit) for c in main.columns]
    assert heads == [("matrix", ""), ("M", "rows"), ("K", "columns"), ("N", "tokens"), ("speed", "GFLOP/s"),
                     ("arithmetic intensity", "FLOP/byte"), ("time per token", "× N = 1")]
    at = [[(c.name, c.unit) for c in full.columns].index(h) for h in heads]
    assert main.rows == [[row[i] for i in at] for row in full.rows] and len(main.rows) == 24
    with pytest.raises(KeyError):
        table("t", "t", lesson03.MatmulRow, [], [], ["label", "seconds"])  # not a field of the record


def test_main_matmul_notes_by_hand(hand_result):
    notes = hand_result.table("matvec_vs_matmul_main").notes + hand_result.table("matvec_vs_matmul").notes
    assert ("course-sized 4096 × 4096: one token runs at 33.6 GFLOP/s (0.50 FLOP/byte); 2,048 tokens together run at "
            "2,147.5 GFLOP/s (512 FLOP/byte), so each token costs 0.016× the time of a lone token (64.0× cheaper).") in notes
    # 33.554432 of 2,147.483648 GFLOP/s is 1.5625%
    assert any("The fastest of them, 33.6 GFLOP/s, is 1.6% of the fastest batched product's 2,147.5 GFLOP/s, "
               "so reading the weights, not the arithmetic, holds a lone token back." in n for n in notes)
    # the largest matvec moves (19,200,000 + 64 + 300,000)·4 = 78,000,256 bytes = 74.4 MiB in 4 ms: 19.5 GB/s;
    # the course-sized one moves 67,141,632 bytes in 1 ms: 67.1 GB/s
    assert ("The largest, output (tied to token_embd) (74.4 MiB), streamed at 19.5 GB/s; smaller ones, which can stay "
            "in the CPU caches between repeats, reached up to 67.1 GB/s.") in notes
    assert "Skipped to keep the lesson quick (products above 69 GFLOP): output (tied to token_embd) at N = 2,048." in notes
    # samples last 0.5 · 1 ms · 100 = 50 ms up to 1.5 · 32 ms · 100 = 4,800 ms: how they were timed goes with the full table
    assert notes[-1].startswith("Times are medians of 2 samples;") and "(measured: 50–4,800 ms)" in notes[-1]
    assert hand_result.table("matvec_vs_matmul").detail and hand_result.table("matvec_vs_matmul").notes == notes[-1:]
    # What the run shows: 33.6 GFLOP/s alone, 2,147.5 batched; the cheapest batched token is the tied output's at
    # N = 512, 16/512 ms ÷ 4 ms = 0.0078 (the course matrix's at N = 2,048 is 32/2048 ÷ 1 = 0.016)
    assert hand_result.shows.plot == "time_per_token_vs_tokens"
    assert hand_result.shows.text == (
        "One token at a time, numpy's matrix products ran at most 33.6 GFLOP/s here: at 0.50 FLOP per byte or less, "
        "each weight read from memory is used for two FLOPs. Batched, the same matrices reached 2,147.5 GFLOP/s, and a "
        "token of output (tied to token_embd) cost 0.008× a lone token's time at N = 512: reading the weights, not the "
        "arithmetic, holds a lone token back.")


def test_what_the_run_shows_follows_hand_made_rows(lesson):
    def row(label, n, gflops, vs):
        return lesson03.MatmulRow(label=label, m=1, k=1, n=n, ms=1.0, gflop_per_s=gflops, bytes_moved=100,
                                  gb_per_s=1.0, flop_per_byte=0.5 if n == 1 else 4.0, ms_per_token=1.0, vs_one_token=vs)

    # a lone token at 30 of a batch's 40 GFLOP/s (more than half): not held back much
    rows = [row("a", 1, 30.0, 1.0), row("a", 8, 40.0, 0.75)]
    said = lesson03.shows(lesson.matvec_summary(rows), rows)
    assert "at most 30.0 GFLOP/s" in said and "reached 40.0 GFLOP/s, and a token of a cost 0.750× a lone token's time at N = 8" in said
    assert said.endswith("on this host a lone token is not held back much by reading the weights.")
    # at 10 of 40 it is held back; only one token timed: nothing to set it against
    held = [row("a", 1, 10.0, 1.0), row("a", 8, 40.0, 0.25)]
    assert lesson03.shows(lesson.matvec_summary(held), held).endswith("holds a lone token back.")
    alone = lesson03.shows(lesson.matvec_summary(held[:1]), held[:1])
    assert alone.endswith("No product of several tokens was timed, so this run has no batched speed to set it against.")


def test_main_measurements_by_hand(hand_result):
    by_key = {(m.name, m.settings["m"], m.settings["k"], m.settings["n"]): m for m in hand_result.measurements}
    assert len(by_key) == 2 * 24
    per_token = by_key[("matmul_ms_per_token", 4, 4, 8)]
    assert per_token.samples == pytest.approx([0.125, 0.375])  # 1 ms and 3 ms over 8 tokens
    gflops = by_key[("matmul_gflop_per_s", 4, 4, 8)]
    assert gflops.samples == pytest.approx([2.56e-4, 256 / 0.003 / 1e9])
    assert gflops.higher_is_better is True and per_token.higher_is_better is False


def test_main_plots_one_series_per_timed_matrix(hand_result):
    plot = next(p for p in hand_result.plots if p.name == "time_per_token_vs_tokens")
    assert [s.label for s in plot.series][-1] == "course-sized 4096 × 4096 (4096 × 4096)"
    assert plot.series[0].x == [1, 8, 64, 512, 2048]
    assert plot.series[0].y == pytest.approx([1.0, 0.25, 0.0625, 0.03125, 0.015625])  # (t / N) ÷ 1 ms
    tied = plot.series[3]
    assert tied.x == [1, 8, 64, 512] and tied.y[0] == 1.0


def test_main_without_a_model_times_only_the_course_matrix(lesson):
    values = {k: v for k, v in hand_values().items() if k.startswith("matmul_4096x4096") or k == "blas_info"}
    result = lesson.main(hand_context(LESSON, QueuedServer({}), host_values={**values, "model_info": None}))
    assert [r[0] for r in result.table("matrix_shapes").rows] == ["course-sized 4096 × 4096"]
    assert result.table("matrix_shapes").notes[0].startswith("The model file is not readable here")
    assert {r[3] for r in result.table("matvec_vs_matmul").rows} == {1, 8, 64, 512, 2048}


# --- replayed result ------------------------------------------------------------------------------

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
        for gs, ts in zip(g.samples, t.samples, strict=True):
            assert gs == pytest.approx(2 * m * k * n / (ts * n / 1000.0) / 1e9, rel=1e-9)
        assert t.median * n == pytest.approx(rows[key]["time (ms, median)"], rel=1e-12)
        assert len(g.samples) == result.settings["repeats"]


def test_shapes_come_from_the_model(result):
    info = result.host_values["model_info"]
    hp = info["hyperparameters"]
    shapes = {r["tensor"]: (r["M (rows)"], r["K (columns)"]) for r in _rows(result, "matrix_shapes")}
    assert shapes["blk.0.attn_q.weight"] == (hp["n_embd"], hp["n_embd"])
    assert shapes["blk.0.ffn_up.weight"] == (hp["n_ff"], hp["n_embd"])
    assert shapes["blk.0.ffn_down.weight"] == (hp["n_embd"], hp["n_ff"])
    # The output matrix: output.weight, or token_embd itself when the model ties them.
    assert shapes.get("output.weight", shapes.get("token_embd.weight")) == (hp["n_vocab"], hp["n_embd"])
    assert shapes["—"] == (4096, 4096)


def test_the_replayed_worked_examples_are_the_hand_worked_ones(result):
    # the recorded run's tables hold the same numbers as the hand arithmetic above
    assert [r["y_i"] for r in _rows(result, "linear_map")] == pytest.approx([1.29, 1.54], abs=1e-12)
    values = dict(result.table("composition").rows)
    assert values["W2W1 (one matrix)"][0][:2] == pytest.approx([1.22, 3.38], abs=1e-12)
    assert values["W2(W1x): two steps"] == pytest.approx([6.769, 7.083], abs=1e-12)
    assert values["max abs difference"] < 1e-12
    assert values["max abs difference from (W2W1)x"] > 1e-3  # the nonlinearity breaks the composition


def test_sample_length_note_comes_from_the_setting_and_the_data(result, lesson):
    assert result.settings["min_sample_s"] == lesson.MIN_SAMPLE_S
    note = next(n for n in result.table("matvec_vs_matmul").notes if n.startswith("Times are medians"))
    # what the run shows reads the table's rows: the fastest lone and batched speeds, the cheapest batched token
    rows = result.table("matvec_vs_matmul").rows
    lone, batched = [r for r in rows if r[3] == 1], [r for r in rows if r[3] > 1]
    cheapest = min(batched, key=lambda r: r[10])
    assert f"ran at most {max(r[5] for r in lone):,.1f} GFLOP/s" in result.shows.text
    assert f"reached {max(r[5] for r in batched):,.1f} GFLOP/s, and a token of {cheapest[0]} cost {cheapest[10]:.3f}×" in result.shows.text
    assert f"about {lesson.MIN_SAMPLE_S * 1000:g} ms" in note
    benches = [v for k, v in result.host_values.items() if k.startswith("matmul_")]
    lasted = [t * b["products_per_sample"] * 1000.0 for b in benches for t in b["seconds"]["samples"]]
    assert f"(measured: {min(lasted):,.0f}–{max(lasted):,.0f} ms)" in note


def test_blas_table_reports_the_recorded_library(result):
    values = dict(result.table("blas").rows)
    blas = result.host_values["blas_info"]
    assert values["BLAS threads"] == (blas["blas"] or {}).get("num_threads")
    assert values["numpy"] == blas["numpy_version"]


def _ctx(lesson, model_path):
    from bytesup.llama.client import LlamaServer
    from bytesup.lesson import LessonContext, Reporter
    from bytesup.options import RunOptions

    return LessonContext(LESSON, lesson.TITLE, server=LlamaServer("http://127.0.0.1:9"), run=RunOptions(),
                         model_path=model_path, sink=[], replay=None, progress=Reporter(None, LESSON))


def test_model_info_skips_only_a_missing_model(tmp_path, lesson):
    from bytesup.models.gguf import GGUFError

    assert _ctx(lesson, None).model_info() is None
    assert _ctx(lesson, tmp_path / "missing.gguf").model_info() is None
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 12)  # a GGUF magic with a header cut short
    with pytest.raises(GGUFError):
        _ctx(lesson, bad).model_info()
