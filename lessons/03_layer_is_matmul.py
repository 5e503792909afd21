"""Lesson 3 — A layer is matrix multiplication.

A layer's work is y = Wx + b. This script works the algebra on tiny matrices (a linear map,
two maps composing into one, RMSNorm, and the nonlinearity that stops the composing), then
times numpy's matrix multiply on this host at the served model's own matrix shapes and a
course-sized 4,096 × 4,096 one: one token (a matrix-vector product, as in decode) against N
tokens at once (a matrix-matrix product, as in prefill). For each it reports time, GFLOP/s,
bytes moved, effective GB/s, arithmetic intensity and how much cheaper each token gets.
"""

from __future__ import annotations

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os, runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

from typing import Any

import numpy as np

from bytesup import hostbench, published
from bytesup.results import Series
from bytesup.lesson import LessonContext

TITLE = "A layer is matrix multiplication"

# Tokens per product: 1 is one token (matvec); the rest are batches of tokens (matmul).
TOKEN_COUNTS = [1, 8, 64, 512, 2048]
# The published specimen's model width (4,096 for deepseek-coder-6.7b): a course-sized matrix.
COURSE_WIDTH = published.SPECIMEN["n_embd"]
# Products larger than the course-sized 4,096 × 4,096 × 2,048 one (about 69 GFLOP, under half a
# second on the course's 2-core host) are skipped, so the lesson stays quick with big models.
MAX_FLOPS = 2 * COURSE_WIDTH * COURSE_WIDTH * max(TOKEN_COUNTS)
DTYPE = "float32"
SEED = 3  # the worked examples' random matrices
RMS_EPS = 1e-6  # RMSNorm's epsilon; llama models store theirs in the GGUF, typically 1e-5 or 1e-6
# Each timed sample repeats the product until one batch lasts this long (hostbench's min_time_s):
# a single small product is shorter than the timer's noise.
MIN_SAMPLE_S = 0.05
# Worked-example differences below this are floating-point rounding; above it, a real change.
ROUNDING = 1e-9

# The model's matrices, as (label, tensor name); block 0 stands for every block.
MODEL_MATRICES = [
    ("attention query (attn_q)", "blk.0.attn_q.weight"),
    ("feed-forward up (ffn_up)", "blk.0.ffn_up.weight"),
    ("feed-forward down (ffn_down)", "blk.0.ffn_down.weight"),
    ("output (logits)", "output.weight"),
]


# --- the worked examples: small numpy arithmetic -----------------------------------------

def rms(v: np.ndarray) -> float:
    """Root mean square: the typical size of a vector's elements."""
    return float(np.sqrt(np.mean(np.square(v))))


def rms_norm(v: np.ndarray, eps: float = RMS_EPS) -> np.ndarray:
    """RMSNorm without its learned scale: divide by the root mean square (eps keeps it finite)."""
    return v / np.sqrt(np.mean(np.square(v)) + eps)


def silu(v: np.ndarray) -> np.ndarray:
    """SiLU, the nonlinearity of llama feed-forward blocks: v · sigmoid(v)."""
    return v / (1.0 + np.exp(-v))


def worked_examples(seed: int = SEED) -> dict[str, Any]:
    """The lesson's small examples, as plain JSON data (rounded inputs keep them readable)."""
    rng = np.random.default_rng(seed)
    small = lambda *shape: np.round(rng.uniform(-2, 2, size=shape), 1)  # noqa: E731
    w, x, b = small(2, 3), small(3), small(2)
    y = w @ x + b

    w1, w2, x2 = small(3, 3), small(2, 3), small(3)
    two_steps = w2 @ (w1 @ x2)
    product = w2 @ w1
    one_step = product @ x2
    with_silu = w2 @ silu(w1 @ x2)

    v = np.round(rng.normal(0, 3, size=8), 2)
    normed = rms_norm(v)
    return {
        "linear": {"W": w.tolist(), "x": x.tolist(), "b": b.tolist(), "y": y.tolist()},
        "composition": {
            "W1": w1.tolist(), "W2": w2.tolist(), "x": x2.tolist(), "W2W1": product.tolist(),
            "two_steps": two_steps.tolist(), "one_step": one_step.tolist(),
            "max_abs_difference": float(np.max(np.abs(two_steps - one_step))),
            "with_silu": with_silu.tolist(),
            "silu_max_abs_difference": float(np.max(np.abs(with_silu - one_step))),
        },
        "rmsnorm": {"v": v.tolist(), "normed": normed.tolist(), "rms_before": rms(v), "rms_after": rms(normed), "eps": RMS_EPS},
    }


# --- the shapes ----------------------------------------------------------------------------

def matrix_shapes(info: dict) -> list[dict]:
    """The model's matrices as (M rows, K columns), plus the course-sized square one.

    A GGUF shape lists ne[0] (the row length, K) first, so [K, M] is an M × K matrix.
    A model without output.weight reuses token_embd.weight for the logits (tied embeddings).
    Without model facts (info None) only the course-sized matrix is listed.
    Shapes already in the list are not measured twice.
    """
    by_name = {t["name"]: t for t in info["tensors"]} if info else {}
    wanted = list(MODEL_MATRICES)
    if "output.weight" not in by_name and "token_embd.weight" in by_name:
        wanted[-1] = ("output (tied to token_embd)", "token_embd.weight")
    shapes, seen = [], set()
    for label, name in wanted + [(f"course-sized {COURSE_WIDTH} × {COURSE_WIDTH}", None)]:
        if name is None:
            m = k = COURSE_WIDTH
        elif name in by_name and len(by_name[name]["shape"]) == 2:
            k, m = by_name[name]["shape"]
        else:
            continue
        shapes.append({"label": label, "tensor": name, "m": int(m), "k": int(k), "duplicate": (m, k) in seen})
        seen.add((m, k))
    return shapes


def planned_counts(m: int, k: int) -> tuple[list[int], list[int]]:
    """(token counts to measure, token counts skipped for exceeding MAX_FLOPS); N = 1 is always measured."""
    run = [n for n in TOKEN_COUNTS if n == 1 or 2 * m * k * n <= MAX_FLOPS]
    return run, [n for n in TOKEN_COUNTS if n not in run]


def row_for(label: str, bench: dict, base_ms_per_token: float) -> list[Any]:
    """One row of the matvec-versus-matmul table, computed from a hostbench.measure_matmul result."""
    m, k, n = bench["m"], bench["k"], bench["n"]
    seconds = bench["seconds"]["median"]
    flops = 2 * m * k * n
    ms_per_token = seconds * 1000.0 / n
    return [label, m, k, n, seconds * 1000.0, flops / seconds / 1e9, bench["bytes_moved"],
            bench["bytes_moved"] / seconds / 1e9, flops / bench["bytes_moved"], ms_per_token,
            ms_per_token / base_ms_per_token]


def shown(value: Any) -> str:
    """A hyperparameter for a note: the number, a per-layer range, or "not in the file"."""
    if isinstance(value, bool) or value is None:
        return "not in the file"
    if isinstance(value, (int, float)):
        return f"{value:,}"
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        low, high = min(value), max(value)
        return f"per layer {low:,}" if low == high else f"per layer {low:,}–{high:,}"
    return "not in the file as a number"


def sample_ms(bench: dict) -> list[float]:
    """How long each timed sample lasted: time per product × products per sample, in ms."""
    return [t * bench["products_per_sample"] * 1000.0 for t in bench["seconds"]["samples"]]


MATMUL_COLUMNS = [("matrix", ""), ("M", "rows"), ("K", "columns"), ("N", "tokens"), ("time", "ms, median"),
                  ("speed", "GFLOP/s"), ("bytes moved", "bytes"), ("effective bandwidth", "GB/s"),
                  ("arithmetic intensity", "FLOP/byte"), ("time per token", "ms"), ("time per token", "× N = 1")]


def main(ctx: LessonContext):
    repeat = ctx.repeat
    ctx.settings = {"dtype": DTYPE, "token_counts": TOKEN_COUNTS, "max_flops_per_product": MAX_FLOPS,
                    "repeats": repeat, "min_sample_s": MIN_SAMPLE_S, "worked_example_seed": SEED}

    # 1. y = Wx + b on numbers small enough to check by hand -------------------------------
    ctx.step("worked examples")
    ex = ctx.host("worked_examples", worked_examples)
    lin = ex["linear"]
    ctx.table("linear_map", "y = Wx + b: each output is one row of W dotted with x, plus its bias",
              [("output i", ""), ("row i of W", ""), ("x", ""), ("b_i", ""), ("y_i", "")],
              [[i, row, lin["x"], lin["b"][i], lin["y"][i]] for i, row in enumerate(lin["W"])],
              notes=[f"W has {len(lin['W'])} rows and {len(lin['x'])} columns: {len(lin['x'])} numbers in, "
                     f"{len(lin['y'])} out, {2 * len(lin['W']) * len(lin['x'])} FLOPs (one multiply and one add per weight)."])

    # 2. What numpy multiplies with on this host -------------------------------------------
    ctx.step("BLAS library")
    blas = ctx.host("blas_info", hostbench.blas_info)
    lib = blas.get("blas") or {}
    ctx.table("blas", "The BLAS library numpy multiplies with here",
              [("property", ""), ("value", "")],
              [["numpy", blas.get("numpy_version")], ["BLAS", lib.get("internal_api")], ["BLAS version", lib.get("version")],
               ["CPU kernel", lib.get("architecture")], ["threading layer", lib.get("threading_layer")],
               ["BLAS threads", lib.get("num_threads")], ["logical CPUs", blas.get("logical_cpus")],
               ["thread settings in the environment", ", ".join(f"{k}={v}" for k, v in blas.get("env", {}).items()) or "none"]],
              notes=[f"numpy hands every product below to {lib.get('internal_api', 'an unknown BLAS')} "
                     f"running {lib.get('num_threads', '?')} thread(s) on {blas.get('logical_cpus')} logical CPU(s)."])

    # 3. The model's own matrices ----------------------------------------------------------
    info = ctx.model_info()
    shapes = matrix_shapes(info)
    if info:
        hp = info["hyperparameters"]
        about = (f"The served model has width {shown(hp.get('n_embd'))}, feed-forward width {shown(hp.get('n_ff'))} "
                 f"and a vocabulary of {shown(hp.get('n_vocab'))}; a matrix of M rows turns K numbers per token into M.")
    else:
        about = "The model file is not readable here (pass --model PATH.gguf), so only the course-sized matrix is timed."
    ctx.table("matrix_shapes", "The matrices timed: the served model's own, and a course-sized one",
              [("matrix", ""), ("tensor", ""), ("M", "rows"), ("K", "columns"), ("weights", "")],
              [[s["label"], s["tensor"] or "—", s["m"], s["k"], s["m"] * s["k"]] for s in shapes],
              notes=[about]
              + [f"{s['label']} has the same shape as a matrix above, so it is not timed again."
                 for s in shapes if s["duplicate"]])

    # 4. Matvec (one token) versus matmul (N tokens) ---------------------------------------
    rows, skipped, series_gflops, series_rel, all_benches = [], [], [], [], []
    for s in shapes:
        if s["duplicate"]:
            continue
        m, k = s["m"], s["k"]
        counts, skip = planned_counts(m, k)
        skipped += [(s["label"], n) for n in skip]
        benches = []
        for n in ctx.track(counts, f"{s['label']}: {m} × {k}"):
            benches.append(ctx.host(f"matmul_{m}x{k}x{n}", lambda m=m, k=k, n=n: hostbench.measure_matmul(
                m, k, n, dtype=DTYPE, repeats=repeat, min_time_s=MIN_SAMPLE_S)))
        base = benches[0]["seconds"]["median"] * 1000.0  # N = 1 comes first
        all_benches += benches
        shape_rows = [row_for(s["label"], b, base) for b in benches]
        rows += shape_rows
        for b in benches:
            settings = {"m": m, "k": k, "n": b["n"], "dtype": b["dtype"]}
            ctx.measure("matmul_gflop_per_s", "GFLOP/s", b["gflop_per_s"]["samples"], higher_is_better=True, settings=settings,
                        description=f"{s['label']}: W ({m} × {k}) times {b['n']} token vector(s)")
            ctx.measure("matmul_ms_per_token", "ms", [t * 1000.0 / b["n"] for t in b["seconds"]["samples"]],
                        higher_is_better=False, settings=settings, description=f"{s['label']}: time per token")
        series_gflops.append(Series(label=f"{s['label']} ({m} × {k})", x=[r[3] for r in shape_rows], y=[r[5] for r in shape_rows]))
        series_rel.append(Series(label=f"{s['label']} ({m} × {k})", x=[r[3] for r in shape_rows], y=[r[10] for r in shape_rows]))

    notes = []
    for s in shapes:
        mine = [r for r in rows if r[0] == s["label"]]
        if len(mine) > 1:
            first, last = mine[0], mine[-1]
            notes.append(f"{s['label']}: one token runs at {first[5]:,.1f} GFLOP/s ({first[8]:.2f} FLOP/byte); "
                         f"{last[3]:,} tokens together run at {last[5]:,.1f} GFLOP/s ({last[8]:,.0f} FLOP/byte), "
                         f"so each token costs {last[10]:.3f}× the time of a lone token ({1 / last[10]:,.1f}× cheaper).")
    matvec = [r for r in rows if r[3] == 1]
    batched = [r for r in rows if r[3] > 1]
    biggest = max(matvec, key=lambda r: r[6])
    best_one, best_many = max(r[5] for r in matvec), max((r[5] for r in batched), default=None)
    notes.append(f"One token at a time, every matrix runs at under {max(r[8] for r in matvec):.2f} FLOP/byte: a matrix-vector "
                 "product reads each weight to do two FLOPs with it."
                 + ("" if best_many is None else
                    f" The fastest of them, {best_one:,.1f} GFLOP/s, is {best_one / best_many:.1%} of the fastest batched product's "
                    f"{best_many:,.1f} GFLOP/s, " + ("so reading the weights, not the arithmetic, holds a lone token back."
                                                      if best_one < best_many / 2 else
                                                      "so on this host the lone token is not held back much.")))
    notes.append(f"The largest, {biggest[0]} ({biggest[6] / 2**20:,.1f} MiB), streamed at {biggest[7]:,.1f} GB/s"
                 + (f"; smaller ones, which can stay in the CPU caches between repeats, reached up to "
                    f"{max(r[7] for r in matvec):,.1f} GB/s." if max(r[7] for r in matvec) > biggest[7] else "."))
    if skipped:
        notes.append("Skipped to keep the lesson quick (products above "
                     f"{MAX_FLOPS / 1e9:,.0f} GFLOP): " + "; ".join(f"{label} at N = {n:,}" for label, n in skipped) + ".")
    lasted = [ms for b in all_benches for ms in sample_ms(b)]
    notes.append(f"Times are medians of {repeat} samples; each sample repeats the product enough times to last about "
                 f"{MIN_SAMPLE_S * 1000:g} ms (measured: {min(lasted):,.0f}–{max(lasted):,.0f} ms). "
                 f"Bytes moved count W, X and Y once each, in {DTYPE}.")
    ctx.table("matvec_vs_matmul", "One token (matvec) versus N tokens (matmul), measured with numpy on this host",
              MATMUL_COLUMNS, rows, notes=notes)
    ctx.plot("gflops_vs_tokens", "Matrix multiply speed against tokens per product", "tokens per product (N)", "GFLOP/s",
             series_gflops, log_x=True, log_y=True)
    ctx.plot("time_per_token_vs_tokens", "Time per token, relative to one token alone", "tokens per product (N)",
             "time per token (× N = 1)", series_rel, log_x=True, log_y=True)

    # 5. RMSNorm ---------------------------------------------------------------------------
    rn = ex["rmsnorm"]
    ctx.table("rmsnorm", "RMSNorm: divide a vector by its root mean square",
              [("vector", ""), ("values", ""), ("root mean square", "")],
              [["before", rn["v"], rn["rms_before"]], ["after", rn["normed"], rn["rms_after"]]],
              notes=[f"The root mean square goes from {rn['rms_before']:.4f} to {rn['rms_after']:.6f} "
                     + (f"(1 up to the epsilon {rn['eps']:g})" if abs(rn["rms_after"] - 1) < 10 * rn["eps"] else
                        f"(not 1: the epsilon {rn['eps']:g} matters for a vector this small)")
                     + "; a model then multiplies by its learned scale (attn_norm, ffn_norm)."])

    # 6. Two linear maps are one linear map; a nonlinearity between them is not ------------
    c = ex["composition"]
    ctx.table("composition", "Two linear maps compose into one: W2(W1x) = (W2W1)x",
              [("quantity", ""), ("value", "")],
              [["W1", c["W1"]], ["W2", c["W2"]], ["x", c["x"]], ["W2W1 (one matrix)", c["W2W1"]],
               ["W2(W1x): two steps", c["two_steps"]], ["(W2W1)x: one step", c["one_step"]],
               ["max abs difference", c["max_abs_difference"]],
               ["W2 SiLU(W1x): a nonlinearity between", c["with_silu"]],
               ["max abs difference from (W2W1)x", c["silu_max_abs_difference"]]],
              notes=[(f"Without a nonlinearity the two layers equal the single matrix W2W1 to {c['max_abs_difference']:.1e} "
                      "(floating-point rounding): stacking linear layers adds no depth."
                      if c["max_abs_difference"] < ROUNDING else
                      f"Without a nonlinearity the two steps differ from W2W1 by {c['max_abs_difference']:.3g}, more than "
                      "rounding: check the example."),
                     (f"With SiLU between them the result moves by up to {c['silu_max_abs_difference']:.3f}, and no single "
                      "matrix reproduces it for every x: the nonlinearity is what makes depth."
                      if c["silu_max_abs_difference"] > ROUNDING else
                      "With SiLU between them this x gives the same result as W2W1: try another x to see them part.")])
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli import lesson_script_main

    lesson_script_main(__file__)
