"""Lesson 3's view: the records of the worked examples, of the matrices timed and of their products, and the
tables, notes and plots that show them. Each table is built from the records by their declared columns
(`store.rows.column`); nothing here times a product or asks the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from bytesup.store.results import Plot, Series, Table
from bytesup.store.rows import column
from bytesup.store.views import table
from bytesup.units import MiB

Vector = list[float]
Matrix = list[list[float]]
# Worked-example differences below this are floating-point rounding; above it, a real change.
ROUNDING = 1e-9


# --- the records ------------------------------------------------------------------------------------

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


@dataclass(frozen=True)
class RmsNormExample:
    v: Vector
    normed: Vector
    rms_before: float
    rms_after: float
    eps: float


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


@dataclass(frozen=True)
class TimedMatrix:
    """One matrix shape timed at each planned token count (hostbench.measure_matmul results, N = 1 first)."""
    shape: MatrixShape
    benches: list[dict[str, Any]]
    skipped: list[int]  # token counts not timed: products above the lesson's most FLOPs


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


# The columns of a timed product the main text shows; times, bytes and bandwidth are in the full table.
MATMUL_SHOWN = ["label", "m", "k", "n", "gflop_per_s", "flop_per_byte", "vs_one_token"]


@dataclass(frozen=True)
class MatvecSummary:
    """What the one-token products show against the batched ones, over every timed matrix."""
    max_intensity: float           # FLOP/byte of the most intense one-token product
    best_gflop_per_s: float        # the fastest one-token product
    best_batched_gflop_per_s: float | None  # the fastest product of N > 1 tokens (None: none timed)
    largest: MatmulRow             # the one-token product that moves the most bytes
    best_gb_per_s: float           # the highest effective bandwidth of a one-token product



# --- tables, notes and plots ----------------------------------------------------------------------

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


def linear_map(lin: LinearMap) -> Table:
    return table("linear_map", "y = Wx + b: each output is one row of W dotted with x, plus its bias",
                 OutputRow, output_rows(lin),
                 [(f"W has {len(lin.w)} rows and {len(lin.x)} columns: {len(lin.x)} numbers in, "
                   f"{len(lin.y)} out, {lin.flops} FLOPs (one multiply and one add per weight).")])


def blas(library: dict[str, Any]) -> Table:
    lib = library.get("blas") or {}
    return table("blas", "The BLAS library numpy multiplies with here", PropertyRow, blas_rows(library),
                 [(f"numpy hands every product below to {lib.get('internal_api', 'an unknown BLAS')} "
                   f"running {lib.get('num_threads', '?')} thread(s) on {library.get('logical_cpus')} logical CPU(s).")])


def matrix_shapes(info: dict | None, shapes: list[MatrixShape]) -> Table:
    if info:
        hp = info["hyperparameters"]
        about = (f"The served model has width {shown(hp.get('n_embd'))}, feed-forward width {shown(hp.get('n_ff'))} "
                 f"and a vocabulary of {shown(hp.get('n_vocab'))}; a matrix of M rows turns K numbers per token into M.")
    else:
        about = "The model file is not readable here (pass --model PATH.gguf), so only the course-sized matrix is timed."
    return table("matrix_shapes", "The matrices timed: the served model's own, and a course-sized one",
                 ShapeRow, [shape_row(s) for s in shapes],
                 [about]
                 + [f"{s.label} has the same shape as a matrix above, so it is not timed again." for s in shapes if s.duplicate])


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
            f"The largest, {largest.label} ({largest.bytes_moved / MiB:,.1f} MiB), streamed at {largest.gb_per_s:,.1f} GB/s{cached}"]


def shows(summary: MatvecSummary, rows: list[MatmulRow]) -> str:
    """What the run shows: a lone token's products against batched ones, in speed and in time per token."""
    best_one = summary.best_gflop_per_s
    text = (f"One token at a time, numpy's matrix products ran at most {best_one:,.1f} GFLOP/s here: at "
            f"{summary.max_intensity:.2f} FLOP per byte or less, each weight read from memory is used for two FLOPs.")
    batched = [r for r in rows if r.n > 1]
    if summary.best_batched_gflop_per_s is None or not batched:
        return text + " No product of several tokens was timed, so this run has no batched speed to set it against."
    cheapest = min(batched, key=lambda r: r.vs_one_token)
    text += (f" Batched, the same matrices reached {summary.best_batched_gflop_per_s:,.1f} GFLOP/s, and a token of "
             f"{cheapest.label} cost {cheapest.vs_one_token:.3f}× a lone token's time at N = {cheapest.n:,}")
    if best_one < summary.best_batched_gflop_per_s / 2:
        return text + ": reading the weights, not the arithmetic, holds a lone token back."
    return text + ": on this host a lone token is not held back much by reading the weights."


def matvec_vs_matmul(timed: list[TimedMatrix], rows_of: list[list[MatmulRow]], summary: MatvecSummary,
                     lasted: list[float], *, repeat: int, max_flops: float, min_sample_s: float, dtype: str) -> list[Table]:
    """Every timed product, matrix by matrix (`rows_of`, in the order of `timed`); `lasted`: each sample's ms.
    The main table has the shapes, speeds, intensities and relative times; the full one, with the times and bytes
    and how they were timed, goes under Details."""
    rows = [r for matrix_rows in rows_of for r in matrix_rows]
    notes = [batching_note(matrix_rows) for matrix_rows in rows_of if len(matrix_rows) > 1]
    notes += matvec_notes(summary)
    skipped = [(t.shape.label, n) for t in timed for n in t.skipped]
    if skipped:
        notes.append("Skipped to keep the lesson quick (products above "
                     f"{max_flops / 1e9:,.0f} GFLOP): " + "; ".join(f"{label} at N = {n:,}" for label, n in skipped) + ".")
    how = (f"Times are medians of {repeat} samples; each sample repeats the product enough times to last about "
           f"{min_sample_s * 1000:g} ms (measured: {min(lasted):,.0f}–{max(lasted):,.0f} ms). "
           f"Bytes moved count W, X and Y once each, in {dtype}.")
    main = table("matvec_vs_matmul_main", "One token (matvec) versus N tokens (matmul), measured with numpy on this host",
                 MatmulRow, rows, notes, MATMUL_SHOWN)
    full = table("matvec_vs_matmul", "Every timed product, with its time, bytes and bandwidth", MatmulRow, rows, [how])
    full.detail = True
    return [main, full]


def matmul_plots(timed: list[TimedMatrix], rows_of: list[list[MatmulRow]]) -> list[Plot]:
    """Speed, and time per token against a lone token's, over the tokens per product: a line per matrix."""
    def series(value: Callable[[MatmulRow], float]) -> list[Series]:
        return [Series(label=f"{t.shape.label} ({t.shape.m} × {t.shape.k})", x=[r.n for r in matrix_rows],
                       y=[value(r) for r in matrix_rows]) for t, matrix_rows in zip(timed, rows_of, strict=True)]

    return [Plot(name="gflops_vs_tokens", title="Matrix multiply speed against tokens per product",
                 x_label="tokens per product (N)", y_label="GFLOP/s", series=series(lambda r: r.gflop_per_s),
                 log_x=True, log_y=True),
            Plot(name="time_per_token_vs_tokens", title="Time per token, relative to one token alone",
                 x_label="tokens per product (N)", y_label="time per token (× N = 1)",
                 series=series(lambda r: r.vs_one_token), log_x=True, log_y=True)]


def rmsnorm(rn: RmsNormExample) -> Table:
    return table("rmsnorm", "RMSNorm: divide a vector by its root mean square", VectorRow, rmsnorm_rows(rn),
                 [f"The root mean square goes from {rn.rms_before:.4f} to {rn.rms_after:.6f} "
                  + (f"(1 up to the epsilon {rn.eps:g})" if abs(rn.rms_after - 1) < 10 * rn.eps else
                     f"(not 1: the epsilon {rn.eps:g} matters for a vector this small)")
                  + "; a model then multiplies by its learned scale (attn_norm, ffn_norm)."])


def composition(c: Composition) -> Table:
    linear = (f"Without a nonlinearity the two layers equal the single matrix W2W1 to {c.max_abs_difference:.1e} "
              "(floating-point rounding): stacking linear layers adds no depth." if c.max_abs_difference < ROUNDING else
              f"Without a nonlinearity the two steps differ from W2W1 by {c.max_abs_difference:.3g}, more than "
              "rounding: check the example.")
    nonlinear = (f"With SiLU between them the result moves by up to {c.silu_max_abs_difference:.3f}, and no single "
                 "matrix reproduces it for every x: the nonlinearity is what makes depth." if c.silu_max_abs_difference > ROUNDING else
                 "With SiLU between them this x gives the same result as W2W1: try another x to see them part.")
    return table("composition", "Two linear maps compose into one: W2(W1x) = (W2W1)x", QuantityRow,
                 composition_rows(c), [linear, nonlinear])


