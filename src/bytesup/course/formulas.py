"""The course's arithmetic, in one place, so lessons and checks compute it the same way."""

from __future__ import annotations

import math
from typing import Any

from bytesup.units import GB  # noqa: F401 - the course's decimal gigabyte, read by lessons as formulas.GB

# Bytes per element of llama.cpp's KV cache types (block types: block bytes ÷ elements per block).
CACHE_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                    "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


def bytes_per_token(model_info: dict[str, Any]) -> int:
    """Bytes read from memory per decoded token: every weight once (lesson 1's rule).

    Strictly, the embedding table contributes one row per token, not all of it; the course
    counts the whole file's tensors, and so do we, so ceilings match the published ones.
    """
    return int(model_info["tensor_bytes"])


def ceiling_tokens_per_s(bandwidth_bytes_per_s: float, bytes_per_tok: float) -> float:
    """The bandwidth ceiling: no decode can be faster than reading every weight once per token."""
    return bandwidth_bytes_per_s / bytes_per_tok


def flops_per_token(n_params: float) -> float:
    """About 2 FLOPs (one multiply, one add) per parameter per token."""
    return 2.0 * n_params


def kv_bytes_per_token(n_layer: int, n_head_kv: int, head_dim: int, bytes_per_element: float) -> float:
    """K and V (the 2) for every layer, KV head and head dimension."""
    return 2 * n_layer * n_head_kv * head_dim * bytes_per_element


def ridge_point(flops_per_s: float, bytes_per_s: float) -> float:
    """FLOPs per byte where a kernel stops being memory-bound and becomes compute-bound."""
    return flops_per_s / bytes_per_s


def decode_intensity(n_params: float, n_bytes: float) -> float:
    """FLOPs per byte of one decoded token: ~2 FLOPs per parameter, every weight byte read once."""
    return flops_per_token(n_params) / n_bytes


def closest_roof(gflop_s: float, roofs: dict[str, float]) -> str:
    """The roof whose attainable GFLOP/s is nearest the measured one, as a ratio (|ln(measured ÷ roof)|);
    "both" when the roofs are one there (below both ridges they share the memory slope)."""
    if len(set(roofs.values())) == 1 and len(roofs) > 1:
        return "both"
    return min(roofs, key=lambda name: abs(math.log(gflop_s / roofs[name])))


def attainable_flop_s(intensity: float, peak_flop_s: float, bandwidth_b_s: float) -> float:
    """The roofline: the lower of the compute ceiling and what the memory can feed at this intensity."""
    return min(peak_flop_s, intensity * bandwidth_b_s)


def bound(intensity: float, ridge: float) -> str:
    """Which ceiling limits work of this intensity on a machine with this ridge point."""
    return "memory" if intensity < ridge else "compute"


def tokens_to_cross(ridge: float, intensity_per_token: float) -> int:
    """Smallest number of tokens per weight read whose intensity reaches the ridge."""
    return max(1, math.ceil(ridge / intensity_per_token))


def shared_share(parallel: int, step_ratio: float) -> float:
    """The share s of one sequence's step that `parallel` sequences decoded together share (reading the weights, the
    step's fixed cost), from their step ÷ one sequence's step = s + (1 − s) × P: s = (P − ratio) ÷ (P − 1)."""
    return (parallel - step_ratio) / (parallel - 1)


def efficiency(measured: float, ceiling: float) -> float:
    return measured / ceiling if ceiling > 0 else math.nan


def server_threads(flags: dict[str, Any] | None, physical_cores: int) -> int:
    """Threads the server decodes with: its --threads flag, else llama.cpp's default, the physical
    cores (cpu_get_num_math; `hostbench.physical_cores()`), not os.cpu_count()'s logical CPUs."""
    value = (flags or {}).get("--threads")
    try:
        n = int(value) if value is not None else -1
    except ValueError:
        n = -1
    return n if n > 0 else physical_cores


# llama.cpp's defaults for -b (logical batch) and -ub (micro-batch): /props does not report them.
DEFAULT_N_BATCH = 2048
DEFAULT_N_UBATCH = 512


def batch_sizes(flags: dict[str, Any] | None) -> dict[str, Any]:
    """n_batch and n_ubatch the server prefills with: its -b/-ub flags, else llama.cpp's defaults,
    clamped as llama.cpp clamps them (n_batch ≤ the context, n_ubatch ≤ n_batch)."""
    flags = flags or {}

    def flag(name: str) -> int | None:
        try:
            value = int(flags[name]) if flags.get(name) is not None else None
        except ValueError:
            value = None
        return value if value and value > 0 else None

    n_batch, n_ubatch, n_ctx = flag("--batch-size"), flag("--ubatch-size"), flag("--ctx-size")
    source = "server flags" if n_batch or n_ubatch else "llama.cpp's defaults; /props does not report them"
    n_batch = n_batch or DEFAULT_N_BATCH
    if n_ctx:
        n_batch = min(n_batch, n_ctx)
    n_ubatch = min(n_ubatch or DEFAULT_N_UBATCH, n_batch)
    return {"n_batch": n_batch, "n_ubatch": n_ubatch, "source": source}


def prefill_weight_reads(prompt_tokens: int, n_ubatch: int) -> int:
    """Times a prefill reads every weight: llama.cpp multiplies the weights by one micro-batch of at
    most n_ubatch tokens at a time, so ceil(prompt tokens ÷ n_ubatch)."""
    return max(1, math.ceil(prompt_tokens / max(1, n_ubatch)))


def decode_tokens_per_s_at_depth(bandwidth_bytes_per_s: float, weight_bytes: float, kv_bytes_per_tok: float,
                                 depth: float) -> float:
    """The bytes model of decode with context: each token reads every weight and the KV cache of
    the `depth` tokens before it, so tokens/s ≈ bandwidth ÷ (weight bytes + KV bytes per token × depth)."""
    return bandwidth_bytes_per_s / (weight_bytes + kv_bytes_per_tok * depth)


def percent(x: float) -> float:
    return 100.0 * x
