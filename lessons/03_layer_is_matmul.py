"""Lesson 3 — A layer is matrix multiplication.

A layer's work is y = Wx + b. This script works the algebra on tiny matrices (a linear map,
two maps composing into one, RMSNorm, and the nonlinearity that stops the composing), then
times numpy's matrix multiply on this host at the served model's own matrix shapes and a
course-sized 4,096 × 4,096 one: one token (a matrix-vector product, as in decode) against N
tokens at once (a matrix-matrix product, as in prefill). For each it reports time, GFLOP/s,
bytes moved, effective GB/s, arithmetic intensity and how much cheaper each token gets.

Its parts: `main` below, in the order of the lesson; the requests (numpy's BLAS library and the timed products, each
a host value); the arithmetic (this file's computation section); the view, its records, tables, notes and plots
(`bytesup.store.views.lesson03`). It has no plan of its own: every run asks the same.
"""

try:  # a Python without the project's packages: lessons/_venv.py re-runs this with .venv's, or says what to do
    import bytesup  # noqa: F401
except ImportError:
    import os
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_venv.py"), {"script": __file__})

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from bytesup.course import published
from bytesup.host import hostbench
from bytesup.lesson import LessonContext
from bytesup.store.views import lesson03
from bytesup.store.views.lesson03 import (Composition, LinearMap, MatmulRow, MatrixShape, MatvecSummary, Matrix, RmsNormExample,
                                          TimedMatrix, Vector)
from bytesup.units import GB

TITLE = "A layer is matrix multiplication"
# Nothing here is timed on a server (it times numpy on this host):
# a run reads the machine's pace (bytesup.run.pace) around the other lessons alone.
TIMES_THE_SERVER = False

# Tokens per product: 1 is one token (matvec); the rest are batches of tokens (matmul).
TOKEN_COUNTS = [1, 8, 64, 512, 2048]
# The published specimen's model width (4,096 for deepseek-coder-6.7b): a course-sized matrix.
COURSE_WIDTH = published.SPECIMEN["n_embd"]
# Products larger than the course-sized 4,096 × 4,096 × 2,048 one (about 69 GFLOP, under half a
# second on the course's 2-core host) are skipped, so the lesson stays quick with big models.
MAX_FLOPS = 2 * COURSE_WIDTH * COURSE_WIDTH * max(TOKEN_COUNTS)
DTYPE = "float32"
WORKED_SEED = 3  # the worked examples' random matrices
RMS_EPS = 1e-6  # RMSNorm's epsilon; llama models store theirs in the GGUF, typically 1e-5 or 1e-6
# Each timed sample repeats the product until one batch lasts this long (hostbench's min_time_s):
# a single small product is shorter than the timer's noise.
MIN_SAMPLE_S = 0.05
MIN_SAMPLES = 1  # timed samples of each product: the run's --repeat, at least one

# The model's matrices, as (label, tensor name); block 0 stands for every block.
MODEL_MATRICES = [("attention query (attn_q)", "blk.0.attn_q.weight"), ("feed-forward up (ffn_up)", "blk.0.ffn_up.weight"),
                  ("feed-forward down (ffn_down)", "blk.0.ffn_down.weight"), ("output (logits)", "output.weight")]


# --- the lesson ----------------------------------------------------------------------------------

def main(ctx: LessonContext):
    repeat = ctx.samples(MIN_SAMPLES)
    ctx.settings = {"dtype": DTYPE, "token_counts": TOKEN_COUNTS, "max_flops_per_product": MAX_FLOPS,
                    "repeats": repeat, "min_sample_s": MIN_SAMPLE_S, "worked_example_seed": WORKED_SEED}

    # 1. y = Wx + b on numbers small enough to check by hand: computed, never recorded.
    ctx.step("worked examples")
    inputs = worked_inputs(WORKED_SEED)
    ctx.tables.append(lesson03.linear_map(linear_map(inputs.w, inputs.x, inputs.b)))

    # 2. What numpy multiplies with on this host.
    ctx.step("BLAS library")
    ctx.tables.append(lesson03.blas(blas_library(ctx)))

    # 3. The model's own matrices, and a course-sized one.
    info = ctx.model_info()
    shapes = matrix_shapes(info)
    ctx.tables.append(lesson03.matrix_shapes(info, shapes))

    # 4. Matvec (one token) versus matmul (N tokens): each new shape timed at every planned N.
    timed = [time_matrix(ctx, s, repeat) for s in shapes if not s.duplicate]
    for t in timed:
        record_measurements(ctx, t)
    rows_of = [matmul_rows(t) for t in timed]
    lasted = [ms for t in timed for b in t.benches for ms in sample_ms(b)]
    summary = matvec_summary([r for rows in rows_of for r in rows])
    ctx.tables += lesson03.matvec_vs_matmul(timed, rows_of, summary, lasted,
                                            repeat=repeat, max_flops=MAX_FLOPS, min_sample_s=MIN_SAMPLE_S, dtype=DTYPE)
    ctx.plots.extend(lesson03.matmul_plots(timed, rows_of))

    # 5. RMSNorm keeps the numbers at a workable size.
    ctx.tables.append(lesson03.rmsnorm(rmsnorm_example(inputs.v)))

    # 6. Two linear maps are one linear map; a nonlinearity between them is not.
    ctx.tables.append(lesson03.composition(composition(inputs.w1, inputs.w2, inputs.x2)))

    # What this run shows: a lone token against a batch, first on the page with the time-per-token plot.
    ctx.shows(lesson03.shows(summary, [r for rows in rows_of for r in rows]), plot="time_per_token_vs_tokens")
    return ctx.finish()


# --- requests: what is measured on this host -------------------------------------------------

def blas_library(ctx: LessonContext) -> dict[str, Any]:
    """The BLAS library numpy hands its products to, its threads and the CPUs (hostbench.blas_info)."""
    return ctx.host("blas_info", hostbench.blas_info)


def time_matrix(ctx: LessonContext, shape: MatrixShape, repeat: int) -> TimedMatrix:
    """numpy's W (M × K) @ X (K × N) on this host, for every planned N."""
    m, k = shape.m, shape.k
    counts, skipped = planned_counts(m, k)
    w = functools.cache(functools.partial(hostbench.random_matrix, m, k, DTYPE))  # drawn once, for every N (a replay: never)

    def timed(n: int) -> dict:
        return hostbench.measure_matmul(m, k, n, dtype=DTYPE, repeats=repeat, min_time_s=MIN_SAMPLE_S, w=w())

    benches = [ctx.host(f"matmul_{m}x{k}x{n}", functools.partial(timed, n)) for n in ctx.track(counts, f"{shape.label}: {m} × {k}")]
    return TimedMatrix(shape, benches, skipped)


# --- computation: the worked examples ----------------------------------------------------------

@dataclass(frozen=True)
class WorkedInputs:
    """The worked examples' inputs: random numbers rounded to one or two decimals, readable by hand."""
    w: Matrix   # 2 × 3, with x and b: y = Wx + b
    x: Vector
    b: Vector
    w1: Matrix  # 3 × 3, then W2 (2 × 3), applied to x2: the composition
    w2: Matrix
    x2: Vector
    v: Vector   # 8 numbers for RMSNorm


def worked_inputs(seed: int = WORKED_SEED) -> WorkedInputs:
    rng = np.random.default_rng(seed)
    small = lambda *shape: np.round(rng.uniform(-2, 2, size=shape), 1).tolist()  # noqa: E731
    w, x, b = small(2, 3), small(3), small(2)
    w1, w2, x2 = small(3, 3), small(2, 3), small(3)
    v = np.round(rng.normal(0, 3, size=8), 2).tolist()
    return WorkedInputs(w=w, x=x, b=b, w1=w1, w2=w2, x2=x2, v=v)


def linear_map(w: Matrix, x: Vector, b: Vector) -> LinearMap:
    y = np.array(w) @ np.array(x) + np.array(b)
    return LinearMap(w=w, x=x, b=b, y=y.tolist())


def rms(v: np.ndarray) -> float:
    """Root mean square: the typical size of a vector's elements."""
    return float(np.sqrt(np.mean(np.square(v))))


def rms_norm(v: np.ndarray, eps: float = RMS_EPS) -> np.ndarray:
    """RMSNorm without its learned scale: divide by the root mean square (eps keeps it finite)."""
    return v / np.sqrt(np.mean(np.square(v)) + eps)


def silu(v: np.ndarray) -> np.ndarray:
    """SiLU, the nonlinearity of llama feed-forward blocks: v · sigmoid(v)."""
    return v / (1.0 + np.exp(-v))


def rmsnorm_example(v: Vector, eps: float = RMS_EPS) -> RmsNormExample:
    before = np.array(v)
    normed = rms_norm(before, eps)
    return RmsNormExample(v=v, normed=normed.tolist(), rms_before=rms(before), rms_after=rms(normed), eps=eps)


def composition(w1: Matrix, w2: Matrix, x: Vector) -> Composition:
    a1, a2, v = np.array(w1), np.array(w2), np.array(x)
    two_steps = a2 @ (a1 @ v)
    product = a2 @ a1
    one_step = product @ v
    with_silu = a2 @ silu(a1 @ v)
    return Composition(w1=w1, w2=w2, x=x, w2w1=product.tolist(), two_steps=two_steps.tolist(), one_step=one_step.tolist(),
                       max_abs_difference=float(np.max(np.abs(two_steps - one_step))), with_silu=with_silu.tolist(),
                       silu_max_abs_difference=float(np.max(np.abs(with_silu - one_step))))


# --- computation: the shapes and the timings ---------------------------------------------------

def matrix_shapes(info: dict | None) -> list[MatrixShape]:
    """The model's matrices as (M rows, K columns), plus the course-sized square one.

    A GGUF shape lists ne[0] (the row length, K) first, so [K, M] is an M × K matrix.
    A model without output.weight reuses token_embd.weight for the logits (tied embeddings).
    Without model facts (info None) only the course-sized matrix is listed.
    Shapes already in the list are marked duplicate, so they are not measured twice.
    """
    by_name = {t["name"]: t for t in info["tensors"]} if info else {}
    wanted: list[tuple[str, str | None]] = list(MODEL_MATRICES)
    if "output.weight" not in by_name and "token_embd.weight" in by_name:
        wanted[-1] = ("output (tied to token_embd)", "token_embd.weight")
    shapes: list[MatrixShape] = []
    seen: set[tuple[int, int]] = set()
    for label, name in wanted + [(f"course-sized {COURSE_WIDTH} × {COURSE_WIDTH}", None)]:
        if name is None:
            m = k = COURSE_WIDTH
        elif name in by_name and len(by_name[name]["shape"]) == 2:
            k, m = (int(d) for d in by_name[name]["shape"])
        else:
            continue
        shapes.append(MatrixShape(label=label, tensor=name, m=m, k=k, duplicate=(m, k) in seen))
        seen.add((m, k))
    return shapes


def planned_counts(m: int, k: int) -> tuple[list[int], list[int]]:
    """(token counts to measure, token counts skipped for exceeding MAX_FLOPS); N = 1 is always measured."""
    run = [n for n in TOKEN_COUNTS if n == 1 or 2 * m * k * n <= MAX_FLOPS]
    return run, [n for n in TOKEN_COUNTS if n not in run]


def matmul_row(label: str, bench: dict, base_ms_per_token: float) -> MatmulRow:
    """A row of the matvec-versus-matmul table from a hostbench.measure_matmul result."""
    m, k, n = bench["m"], bench["k"], bench["n"]
    seconds = bench["seconds"]["median"]
    flops = 2 * m * k * n
    ms_per_token = seconds * 1000.0 / n
    return MatmulRow(label=label, m=m, k=k, n=n, ms=seconds * 1000.0, gflop_per_s=flops / seconds / 1e9,
                     bytes_moved=bench["bytes_moved"], gb_per_s=bench["bytes_moved"] / seconds / GB,
                     flop_per_byte=flops / bench["bytes_moved"], ms_per_token=ms_per_token,
                     vs_one_token=ms_per_token / base_ms_per_token)


def matmul_rows(timed: TimedMatrix) -> list[MatmulRow]:
    """The matrix's rows, each token count's time per token relative to N = 1 (timed first)."""
    base = timed.benches[0]["seconds"]["median"] * 1000.0
    return [matmul_row(timed.shape.label, b, base) for b in timed.benches]


def sample_ms(bench: dict) -> list[float]:
    """How long each timed sample lasted: time per product × products per sample, in ms."""
    return [t * bench["products_per_sample"] * 1000.0 for t in bench["seconds"]["samples"]]


def matvec_summary(rows: list[MatmulRow]) -> MatvecSummary:
    matvec = [r for r in rows if r.n == 1]
    batched = [r for r in rows if r.n > 1]
    return MatvecSummary(max_intensity=max(r.flop_per_byte for r in matvec),
                         best_gflop_per_s=max(r.gflop_per_s for r in matvec),
                         best_batched_gflop_per_s=max((r.gflop_per_s for r in batched), default=None),
                         largest=max(matvec, key=lambda r: r.bytes_moved),
                         best_gb_per_s=max(r.gb_per_s for r in matvec))


# --- what the lesson records: every sample of every product ------------------------------------

def record_measurements(ctx: LessonContext, timed: TimedMatrix) -> None:
    """Every sample of the matrix's products, as GFLOP/s and as ms per token."""
    s = timed.shape
    for b in timed.benches:
        settings = {"m": s.m, "k": s.k, "n": b["n"], "dtype": b["dtype"]}
        ctx.measure("matmul_gflop_per_s", "GFLOP/s", b["gflop_per_s"]["samples"], higher_is_better=True, settings=settings,
                    description=f"{s.label}: W ({s.m} × {s.k}) times {b['n']} token vector(s)")
        ctx.measure("matmul_ms_per_token", "ms", [t * 1000.0 / b["n"] for t in b["seconds"]["samples"]],
                    higher_is_better=False, settings=settings, description=f"{s.label}: time per token")


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
