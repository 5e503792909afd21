"""Figures published in the course *LLM Basics*, for rows and notes labelled "published".

Lessons compute their own numbers; these are only the references they are set beside.
Sources: the course outline and lesson 4's text (DGX Spark, deepseek-coder-6.7b-instruct Q8_0,
llama-server `-c 2048 -ngl 99 --parallel 1`, 2026-10-12), and the lesson 6 and 7 examples of
the outline. `references/lesson04_dgx_spark.json` sets the lesson-4 figures in their scope with
tolerances for `bytesup check`, reading each from `LESSON4` by name (`course_figure`).
"""

from __future__ import annotations

import re
from typing import Any, TypedDict

# The specimen model of the published course.
SPECIMEN_NAME = "deepseek-coder-6.7b-instruct Q8_0"
SPECIMEN: dict[str, Any] = {
    "n_layer": 32, "n_embd": 4096, "n_head": 32, "n_ff": 11008, "n_vocab": 32256,
    "n_params": 6.74e9,        # "6.74 billion parameters"
    "file_bytes": 7.16e9,      # "about 7.16 GB"
}

# The published host.
SPARK_NAME = "DGX Spark"
SPARK_BANDWIDTH_GB_PER_S = 273.0   # "about 273 GB/s memory bandwidth"

# Lesson 4's observed figures on the DGX Spark, the one place they are typed: the reference file
# references/lesson04_dgx_spark.json names them (`"course": "paris_logprob"`) and takes its numbers from here.
class Lesson4Figures(TypedDict):
    paris_logprob: float
    paris_percent: float
    mat_percent: float
    fibonacci_top_two_percent: list[float]
    for_loop_top8_share_percent: float
    long_prompt_tokens: int
    prefill_tokens_per_s: list[float]
    decode_short_tokens_per_s: float
    decode_long_tokens_per_s: float
    ceiling_tokens_per_s: float
    decode_efficiency_percent: float
    prefill_decode_ratio: float


LESSON4: Lesson4Figures = {
    "paris_logprob": -0.0756,
    "paris_percent": 92.7,
    "mat_percent": 98.5,
    "fibonacci_top_two_percent": [31.0, 28.0],
    "for_loop_top8_share_percent": 58.0,
    "long_prompt_tokens": 1921,
    "prefill_tokens_per_s": [2379.0, 2408.0],   # two runs
    "decode_short_tokens_per_s": 33.2,
    "decode_long_tokens_per_s": 29.6,
    "ceiling_tokens_per_s": 39.0,
    "decode_efficiency_percent": 85.0,
    "prefill_decode_ratio": 72.0,               # "~72×"
}

# Lesson 6's worked example: a 70B model with 80 layers, 8 KV heads, head width 128, FP16.
KV_70B: dict[str, Any] = {"n_layer": 80, "n_head_kv": 8, "head_dim": 128, "bytes_per_element": 2, "bytes_per_token": 327_680,
                          # not in the course text: a 70B llama's query heads (Llama 2 70B: 64 heads over 8 KV heads)
                          "n_head": 64}

# Lesson 7's roofline example.
H100: dict[str, Any] = {"peak_flop_s": 989e12, "bandwidth_bytes_per_s": 3.35e12, "ridge_flops_per_byte": 295.0}

# Lesson 4's published run served the specimen with `-c 2048` (lesson-04-the-forward-pass.txt).
LESSON4_CONTEXT_TOKENS = 2048

# The specimen's KV heads, for lesson 6's worked example. Not stated in the course text: read from
# the specimen's GGUF metadata (attention.head_count_kv = 32, equal to its 32 heads: no grouped-query attention).
SPECIMEN_N_HEAD_KV = 32

# The podcast's claims about the same 70B example (podcast-what-is-a-forward-pass.txt). The podcast's
# KV figure is WRONG (the outline: "the podcast's '32 KB' is ten times too small"): lessons show these
# only labelled as the podcast's, beside the computed value.
PODCAST_KV_70B: dict[str, Any] = {
    "kilobytes_per_token": 32,     # "about thirty-two kilobytes per token per request"
    "tokens_per_megabyte": 30,     # "roughly one megabyte per thirty tokens"
    "batch_requests": 64,          # "a batch of sixty-four requests"
    "context_tokens": 4096,        # "each with a four-thousand-token context" (4K, taken as 4,096)
}

# The podcast's sequential floor (podcast-what-is-a-forward-pass.txt): "five milliseconds" per forward
# pass, "five hundred tokens", "at least two and a half seconds". Lesson 5 recomputes the product.
PODCAST_SEQUENTIAL_FLOOR: dict[str, Any] = {"pass_ms": 5.0, "tokens": 500, "floor_s": 2.5}

# The podcast's worked example of attention in one decode step (podcast-what-is-a-forward-pass.txt):
# "head dimension of one hundred twenty-eight and a sequence length of four thousand ninety-six comes
# out with an arithmetic intensity of about sixty-two". WRONG: lesson 7 recomputes it (about 1 FLOP
# per byte per query head sharing the K and V) and shows this figure only labelled as the podcast's.
PODCAST_DECODE_ATTENTION: dict[str, Any] = {"head_dim": 128, "seq_len": 4096, "flops_per_byte": 62}


def course_figure(name: str) -> float | list[float]:
    """A figure of LESSON4 by its name, or one run of a list of them ("fibonacci_top_two_percent[1]").
    KeyError (saying which names exist) for a name or index LESSON4 does not have."""
    m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", name)
    figures: dict[str, Any] = dict(LESSON4)
    if m is None or m.group(1) not in figures:
        raise KeyError(f"the course publishes no lesson-4 figure {name!r} (published.LESSON4 has {', '.join(figures)})")
    value = figures[m.group(1)]
    if m.group(2) is None:
        return [float(v) for v in value] if isinstance(value, list) else float(value)
    if not isinstance(value, list) or int(m.group(2)) >= len(value):
        raise KeyError(f"published.LESSON4[{m.group(1)!r}] has no run {m.group(2)} (it is {value!r})")
    return float(value[int(m.group(2))])
