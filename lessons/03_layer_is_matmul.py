"""Lesson 3 — A layer is matrix multiplication.

A layer's work is y = Wx + b. This script works the algebra on tiny matrices (a linear map,
two maps composing into one, RMSNorm, and the nonlinearity that stops the composing), then
times numpy's matrix multiply on this host at the served model's own matrix shapes and a
course-sized 4,096 × 4,096 one: one token (a matrix-vector product, as in decode) against N
tokens at once (a matrix-matrix product, as in prefill). For each it reports time, GFLOP/s,
bytes moved, effective GB/s, arithmetic intensity and how much cheaper each token gets.
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

from bytesup.host import hostbench
from bytesup.course import published
from bytesup.store.results import Series
from bytesup.lesson import LessonContext
from bytesup.store.rows import cells, column, columns

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


Vector = list[float]
Matrix = list[list[float]]


# --- requests: what is measured on this host -------------------------------------------------

def blas_library(ctx: LessonContext) -> dict[str, Any]:
    """The BLAS library numpy hands its products to, its threads and the CPUs (hostbench.blas_info)."""
    return ctx.host("blas_info", hostbench.blas_info)


def time_matrix(ctx: LessonContext, shape: "MatrixShape", repeat: int) -> "TimedMatrix":
    """numpy's W (M × K) @ X (K × N) on this host, for every planned N."""
    m, k = shape.m, shape.k
    counts, skipped = planned_counts(m, k)
    benches = [ctx.host(f"matmul_{m}x{k}x{n}", functools.partial(hostbench.measure_matmul, m, k, n, dtype=DTYPE, repeats=repeat,
                                                            min_time_s=MIN_SAMPLE_S))
               for n in ctx.track(counts, f"{shape.label}: {m} × {k}")]
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


def worked_inputs(seed: int = SEED) -> WorkedInputs:
    rng = np.random.default_rng(seed)
    small = lambda *shape: np.round(rng.uniform(-2, 2, size=shape), 1).tolist()  # noqa: E731
    w, x, b = small(2, 3), small(3), small(2)
    w1, w2, x2 = small(3, 3), small(2, 3), small(3)
    v = np.round(rng.normal(0, 3, size=8), 2).tolist()
    return WorkedInputs(w=w, x=x, b=b, w1=w1, w2=w2, x2=x2, v=v)


@dataclass(frozen=True)
class LinearMap:
    w: Matrix
    x: Vector
    b: Vector
    y: Vector  # y_i = (row i of W) · x + b_i

    @property
    def flops(self) -> int:
        """One multiply and one add per weight."""
        return 2 * len(self.w) * len(self.x)


def linear_map(w: Matrix, x: Vector, b: Vector) -> LinearMap:
    y = np.array(w) @ np.array(x) + np.array(b)
    return LinearMap(w=w, x=x, b=b, y=y.tolist())


@dataclass(frozen=True)
class OutputRow:
    i: int = column("output i")
    row: Vector = column("row i of W")
    x: Vector = column("x")
    b: float = column("b_i")
    y: float = column("y_i")


def output_rows(lin: LinearMap) -> list[OutputRow]:
    """y = Wx + b one output at a time: row i of W, x, b_i and y_i."""
    return [OutputRow(i, row, lin.x, lin.b[i], lin.y[i]) for i, row in enumerate(lin.w)]


def rms(v: np.ndarray) -> float:
    """Root mean square: the typical size of a vector's elements."""
    return float(np.sqrt(np.mean(np.square(v))))


def rms_norm(v: np.ndarray, eps: float = RMS_EPS) -> np.ndarray:
    """RMSNorm without its learned scale: divide by the root mean square (eps keeps it finite)."""
    return v / np.sqrt(np.mean(np.square(v)) + eps)


def silu(v: np.ndarray) -> np.ndarray:
    """SiLU, the nonlinearity of llama feed-forward blocks: v · sigmoid(v)."""
    return v / (1.0 + np.exp(-v))


@dataclass(frozen=True)
class RmsNormExample:
    v: Vector
    normed: Vector
    rms_before: float
    rms_after: float
    eps: float


def rmsnorm_example(v: Vector, eps: float = RMS_EPS) -> RmsNormExample:
    before = np.array(v)
    normed = rms_norm(before, eps)
    return RmsNormExample(v=v, normed=normed.tolist(), rms_before=rms(before), rms_after=rms(normed), eps=eps)


@dataclass(frozen=True)
class VectorRow:
    vector: str = column("vector")
    values: Vector = column("values")
    rms: float = column("root mean square")


def rmsnorm_rows(rn: RmsNormExample) -> list[VectorRow]:
    return [VectorRow("before", rn.v, rn.rms_before), VectorRow("after", rn.normed, rn.rms_after)]


@dataclass(frozen=True)
class Composition:
    """Two linear maps applied in turn, the one matrix they make, and the same with SiLU between them."""
    w1: Matrix
    w2: Matrix
    x: Vector
    w2w1: Matrix            # W2 @ W1: one matrix
    two_steps: Vector       # W2 (W1 x)
    one_step: Vector        # (W2 W1) x
    max_abs_difference: float
    with_silu: Vector       # W2 SiLU(W1 x)
    silu_max_abs_difference: float  # from (W2 W1) x


def composition(w1: Matrix, w2: Matrix, x: Vector) -> Composition:
    a1, a2, v = np.array(w1), np.array(w2), np.array(x)
    two_steps = a2 @ (a1 @ v)
    product = a2 @ a1
    one_step = product @ v
    with_silu = a2 @ silu(a1 @ v)
    return Composition(w1=w1, w2=w2, x=x, w2w1=product.tolist(), two_steps=two_steps.tolist(), one_step=one_step.tolist(),
                       max_abs_difference=float(np.max(np.abs(two_steps - one_step))), with_silu=with_silu.tolist(),
                       silu_max_abs_difference=float(np.max(np.abs(with_silu - one_step))))


@dataclass(frozen=True)
class QuantityRow:
    quantity: str = column("quantity")
    value: Any = column("value")


def composition_rows(c: Composition) -> list[QuantityRow]:
    return [QuantityRow("W1", c.w1), QuantityRow("W2", c.w2), QuantityRow("x", c.x), QuantityRow("W2W1 (one matrix)", c.w2w1),
            QuantityRow("W2(W1x): two steps", c.two_steps), QuantityRow("(W2W1)x: one step", c.one_step),
            QuantityRow("max abs difference", c.max_abs_difference),
            QuantityRow("W2 SiLU(W1x): a nonlinearity between", c.with_silu),
            QuantityRow("max abs difference from (W2W1)x", c.silu_max_abs_difference)]


@dataclass(frozen=True)
class PropertyRow:
    name: str = column("property")
    value: Any = column("value")


def blas_rows(blas: dict[str, Any]) -> list[PropertyRow]:
    """numpy's BLAS as threadpoolctl reports it, and the thread settings in the environment."""
    lib = blas.get("blas") or {}
    return [PropertyRow("numpy", blas.get("numpy_version")), PropertyRow("BLAS", lib.get("internal_api")),
            PropertyRow("BLAS version", lib.get("version")), PropertyRow("CPU kernel", lib.get("architecture")),
            PropertyRow("threading layer", lib.get("threading_layer")), PropertyRow("BLAS threads", lib.get("num_threads")),
            PropertyRow("logical CPUs", blas.get("logical_cpus")),
            PropertyRow("thread settings in the environment",
                        ", ".join(f"{k}={v}" for k, v in blas.get("env", {}).items()) or "none")]


# --- computation: the shapes and the timings ---------------------------------------------------

@dataclass(frozen=True)
class MatrixShape:
    label: str
    tensor: str | None  # None: the course-sized matrix, in no model
    m: int              # rows: numbers out per token
    k: int              # columns: numbers in per token
    duplicate: bool     # the same M × K as a shape before it: not timed again

    @property
    def weights(self) -> int:
        return self.m * self.k


@dataclass(frozen=True)
class ShapeRow:
    label: str = column("matrix")
    tensor: str = column("tensor")
    m: int = column("M", "rows")
    k: int = column("K", "columns")
    weights: int = column("weights")


def shape_row(s: MatrixShape) -> ShapeRow:
    return ShapeRow(s.label, s.tensor or "—", s.m, s.k, s.weights)


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


@dataclass(frozen=True)
class TimedMatrix:
    """One matrix shape timed at each planned token count (hostbench.measure_matmul results, N = 1 first)."""
    shape: MatrixShape
    benches: list[dict[str, Any]]
    skipped: list[int]  # token counts not timed: products above MAX_FLOPS


def planned_counts(m: int, k: int) -> tuple[list[int], list[int]]:
    """(token counts to measure, token counts skipped for exceeding MAX_FLOPS); N = 1 is always measured."""
    run = [n for n in TOKEN_COUNTS if n == 1 or 2 * m * k * n <= MAX_FLOPS]
    return run, [n for n in TOKEN_COUNTS if n not in run]


@dataclass(frozen=True)
class MatmulRow:
    """One timed product W (M × K) @ X (K × N), in the units of the lesson's table: a row of it."""
    label: str = column("matrix")
    m: int = column("M", "rows")
    k: int = column("K", "columns")
    n: int = column("N", "tokens")
    ms: float = column("time", "ms, median")                       # median time of one product
    gflop_per_s: float = column("speed", "GFLOP/s")                # 2·M·K·N FLOPs over that time
    bytes_moved: int = column("bytes moved", "bytes")              # W, X and Y once each
    gb_per_s: float = column("effective bandwidth", "GB/s")        # bytes moved over that time
    flop_per_byte: float = column("arithmetic intensity", "FLOP/byte")
    ms_per_token: float = column("time per token", "ms")           # ms ÷ N
    vs_one_token: float = column("time per token", "× N = 1")      # ms_per_token ÷ the same matrix's at N = 1


def matmul_row(label: str, bench: dict, base_ms_per_token: float) -> MatmulRow:
    """A row of the matvec-versus-matmul table from a hostbench.measure_matmul result."""
    m, k, n = bench["m"], bench["k"], bench["n"]
    seconds = bench["seconds"]["median"]
    flops = 2 * m * k * n
    ms_per_token = seconds * 1000.0 / n
    return MatmulRow(label=label, m=m, k=k, n=n, ms=seconds * 1000.0, gflop_per_s=flops / seconds / 1e9,
                     bytes_moved=bench["bytes_moved"], gb_per_s=bench["bytes_moved"] / seconds / 1e9,
                     flop_per_byte=flops / bench["bytes_moved"], ms_per_token=ms_per_token,
                     vs_one_token=ms_per_token / base_ms_per_token)


def matmul_rows(timed: TimedMatrix) -> list[MatmulRow]:
    """The matrix's rows, each token count's time per token relative to N = 1 (timed first)."""
    base = timed.benches[0]["seconds"]["median"] * 1000.0
    return [matmul_row(timed.shape.label, b, base) for b in timed.benches]


def sample_ms(bench: dict) -> list[float]:
    """How long each timed sample lasted: time per product × products per sample, in ms."""
    return [t * bench["products_per_sample"] * 1000.0 for t in bench["seconds"]["samples"]]


@dataclass(frozen=True)
class MatvecSummary:
    """What the one-token products show against the batched ones, over every timed matrix."""
    max_intensity: float           # FLOP/byte of the most intense one-token product
    best_gflop_per_s: float        # the fastest one-token product
    best_batched_gflop_per_s: float | None  # the fastest product of N > 1 tokens (None: none timed)
    largest: MatmulRow             # the one-token product that moves the most bytes
    best_gb_per_s: float           # the highest effective bandwidth of a one-token product


def matvec_summary(rows: list[MatmulRow]) -> MatvecSummary:
    matvec = [r for r in rows if r.n == 1]
    batched = [r for r in rows if r.n > 1]
    return MatvecSummary(max_intensity=max(r.flop_per_byte for r in matvec),
                         best_gflop_per_s=max(r.gflop_per_s for r in matvec),
                         best_batched_gflop_per_s=max((r.gflop_per_s for r in batched), default=None),
                         largest=max(matvec, key=lambda r: r.bytes_moved),
                         best_gb_per_s=max(r.gb_per_s for r in matvec))


# --- rendering -------------------------------------------------------------------------------------

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


def render_linear_map(ctx: LessonContext, lin: LinearMap) -> None:
    ctx.table("linear_map", "y = Wx + b: each output is one row of W dotted with x, plus its bias",
              columns(OutputRow), cells(output_rows(lin)),
              notes=[(f"W has {len(lin.w)} rows and {len(lin.x)} columns: {len(lin.x)} numbers in, "
                      f"{len(lin.y)} out, {lin.flops} FLOPs (one multiply and one add per weight).")])


def render_blas(ctx: LessonContext, blas: dict[str, Any]) -> None:
    lib = blas.get("blas") or {}
    ctx.table("blas", "The BLAS library numpy multiplies with here",
              columns(PropertyRow), cells(blas_rows(blas)),
              notes=[(f"numpy hands every product below to {lib.get('internal_api', 'an unknown BLAS')} "
                      f"running {lib.get('num_threads', '?')} thread(s) on {blas.get('logical_cpus')} logical CPU(s).")])


def render_shapes(ctx: LessonContext, info: dict | None, shapes: list[MatrixShape]) -> None:
    if info:
        hp = info["hyperparameters"]
        about = (f"The served model has width {shown(hp.get('n_embd'))}, feed-forward width {shown(hp.get('n_ff'))} "
                 f"and a vocabulary of {shown(hp.get('n_vocab'))}; a matrix of M rows turns K numbers per token into M.")
    else:
        about = "The model file is not readable here (pass --model PATH.gguf), so only the course-sized matrix is timed."
    ctx.table("matrix_shapes", "The matrices timed: the served model's own, and a course-sized one",
              columns(ShapeRow), cells([shape_row(s) for s in shapes]),
              notes=[about]
              + [f"{s.label} has the same shape as a matrix above, so it is not timed again." for s in shapes if s.duplicate])


def record_measurements(ctx: LessonContext, timed: TimedMatrix) -> None:
    """Every sample of the matrix's products, as GFLOP/s and as ms per token."""
    s = timed.shape
    for b in timed.benches:
        settings = {"m": s.m, "k": s.k, "n": b["n"], "dtype": b["dtype"]}
        ctx.measure("matmul_gflop_per_s", "GFLOP/s", b["gflop_per_s"]["samples"], higher_is_better=True, settings=settings,
                    description=f"{s.label}: W ({s.m} × {s.k}) times {b['n']} token vector(s)")
        ctx.measure("matmul_ms_per_token", "ms", [t * 1000.0 / b["n"] for t in b["seconds"]["samples"]],
                    higher_is_better=False, settings=settings, description=f"{s.label}: time per token")


def batching_note(rows: list[MatmulRow]) -> str:
    """One matrix: a lone token against its largest batch."""
    first, last = rows[0], rows[-1]
    return (f"{first.label}: one token runs at {first.gflop_per_s:,.1f} GFLOP/s ({first.flop_per_byte:.2f} FLOP/byte); "
            f"{last.n:,} tokens together run at {last.gflop_per_s:,.1f} GFLOP/s ({last.flop_per_byte:,.0f} FLOP/byte), "
            f"so each token costs {last.vs_one_token:.3f}× the time of a lone token ({1 / last.vs_one_token:,.1f}× cheaper).")


def matvec_notes(summary: MatvecSummary) -> list[str]:
    """Why a lone token is slow: its intensity, its speed against the batched products', its bandwidth."""
    best_one, best_many = summary.best_gflop_per_s, summary.best_batched_gflop_per_s
    speed = ""
    if best_many is not None:
        verdict = ("so reading the weights, not the arithmetic, holds a lone token back." if best_one < best_many / 2 else
                   "so on this host the lone token is not held back much.")
        speed = (f" The fastest of them, {best_one:,.1f} GFLOP/s, is {best_one / best_many:.1%} of the fastest batched "
                 f"product's {best_many:,.1f} GFLOP/s, {verdict}")
    largest = summary.largest
    cached = (f"; smaller ones, which can stay in the CPU caches between repeats, reached up to {summary.best_gb_per_s:,.1f} GB/s."
              if summary.best_gb_per_s > largest.gb_per_s else ".")
    return [(f"One token at a time, every matrix runs at {summary.max_intensity:.2f} FLOP/byte or less: a matrix-vector "
             f"product reads each weight to do two FLOPs with it.{speed}"),
            f"The largest, {largest.label} ({largest.bytes_moved / 2**20:,.1f} MiB), streamed at {largest.gb_per_s:,.1f} GB/s{cached}"]


def render_matmul(ctx: LessonContext, timed: list[TimedMatrix], repeat: int) -> None:
    rows_of = [matmul_rows(t) for t in timed]
    rows = [r for matrix_rows in rows_of for r in matrix_rows]
    notes = [batching_note(matrix_rows) for matrix_rows in rows_of if len(matrix_rows) > 1]
    notes += matvec_notes(matvec_summary(rows))
    skipped = [(t.shape.label, n) for t in timed for n in t.skipped]
    if skipped:
        notes.append("Skipped to keep the lesson quick (products above "
                     f"{MAX_FLOPS / 1e9:,.0f} GFLOP): " + "; ".join(f"{label} at N = {n:,}" for label, n in skipped) + ".")
    lasted = [ms for t in timed for b in t.benches for ms in sample_ms(b)]
    notes.append(f"Times are medians of {repeat} samples; each sample repeats the product enough times to last about "
                 f"{MIN_SAMPLE_S * 1000:g} ms (measured: {min(lasted):,.0f}–{max(lasted):,.0f} ms). "
                 f"Bytes moved count W, X and Y once each, in {DTYPE}.")
    ctx.table("matvec_vs_matmul", "One token (matvec) versus N tokens (matmul), measured with numpy on this host",
              columns(MatmulRow), cells(rows), notes=notes)

    def series(value) -> list[Series]:
        return [Series(label=f"{t.shape.label} ({t.shape.m} × {t.shape.k})", x=[r.n for r in matrix_rows],
                       y=[value(r) for r in matrix_rows]) for t, matrix_rows in zip(timed, rows_of, strict=True)]

    ctx.plot("gflops_vs_tokens", "Matrix multiply speed against tokens per product", "tokens per product (N)", "GFLOP/s",
             series(lambda r: r.gflop_per_s), log_x=True, log_y=True)
    ctx.plot("time_per_token_vs_tokens", "Time per token, relative to one token alone", "tokens per product (N)",
             "time per token (× N = 1)", series(lambda r: r.vs_one_token), log_x=True, log_y=True)


def render_rmsnorm(ctx: LessonContext, rn: RmsNormExample) -> None:
    ctx.table("rmsnorm", "RMSNorm: divide a vector by its root mean square",
              columns(VectorRow), cells(rmsnorm_rows(rn)),
              notes=[f"The root mean square goes from {rn.rms_before:.4f} to {rn.rms_after:.6f} "
                     + (f"(1 up to the epsilon {rn.eps:g})" if abs(rn.rms_after - 1) < 10 * rn.eps else
                        f"(not 1: the epsilon {rn.eps:g} matters for a vector this small)")
                     + "; a model then multiplies by its learned scale (attn_norm, ffn_norm)."])


def render_composition(ctx: LessonContext, c: Composition) -> None:
    linear = (f"Without a nonlinearity the two layers equal the single matrix W2W1 to {c.max_abs_difference:.1e} "
              "(floating-point rounding): stacking linear layers adds no depth." if c.max_abs_difference < ROUNDING else
              f"Without a nonlinearity the two steps differ from W2W1 by {c.max_abs_difference:.3g}, more than "
              "rounding: check the example.")
    nonlinear = (f"With SiLU between them the result moves by up to {c.silu_max_abs_difference:.3f}, and no single "
                 "matrix reproduces it for every x: the nonlinearity is what makes depth." if c.silu_max_abs_difference > ROUNDING else
                 "With SiLU between them this x gives the same result as W2W1: try another x to see them part.")
    ctx.table("composition", "Two linear maps compose into one: W2(W1x) = (W2W1)x",
              columns(QuantityRow), cells(composition_rows(c)),
              notes=[linear, nonlinear])


# --- the lesson ----------------------------------------------------------------------------------

def main(ctx: LessonContext):
    repeat = ctx.repeat
    ctx.settings = {"dtype": DTYPE, "token_counts": TOKEN_COUNTS, "max_flops_per_product": MAX_FLOPS,
                    "repeats": repeat, "min_sample_s": MIN_SAMPLE_S, "worked_example_seed": SEED}

    # 1. y = Wx + b on numbers small enough to check by hand: computed, never recorded.
    ctx.step("worked examples")
    inputs = worked_inputs(SEED)
    render_linear_map(ctx, linear_map(inputs.w, inputs.x, inputs.b))

    # 2. What numpy multiplies with on this host.
    ctx.step("BLAS library")
    render_blas(ctx, blas_library(ctx))

    # 3. The model's own matrices, and a course-sized one.
    info = ctx.model_info()
    shapes = matrix_shapes(info)
    render_shapes(ctx, info, shapes)

    # 4. Matvec (one token) versus matmul (N tokens): each new shape timed at every planned N.
    timed = [time_matrix(ctx, s, repeat) for s in shapes if not s.duplicate]
    for t in timed:
        record_measurements(ctx, t)
    render_matmul(ctx, timed, repeat)

    # 5. RMSNorm keeps the numbers at a workable size.
    render_rmsnorm(ctx, rmsnorm_example(inputs.v))

    # 6. Two linear maps are one linear map; a nonlinearity between them is not.
    render_composition(ctx, composition(inputs.w1, inputs.w2, inputs.x2))
    return ctx.finish()


if __name__ == "__main__":
    from bytesup.cli.app import lesson_script_main

    lesson_script_main(__file__)
