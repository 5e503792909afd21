"""The course's arithmetic (bytesup.course.formulas) against numbers worked by hand.

Every expected value is a literal, with its arithmetic in a comment; none is computed by calling
the function under test again.
"""

from __future__ import annotations

import math

import pytest

from bytesup.course import formulas
from bytesup.course import speculative


def test_units_and_cache_type_widths():
    assert formulas.GB == 1_000_000_000  # decimal gigabytes, as bandwidth is quoted
    # block bytes ÷ elements per block, from ggml's block layouts:
    assert formulas.CACHE_TYPE_BYTES == {
        "f32": 4.0, "f16": 2.0, "bf16": 2.0,
        "q8_0": 1.0625,   # 34 ÷ 32: 32 int8 + one f16 scale
        "q5_1": 0.75,     # 24 ÷ 32
        "q5_0": 0.6875,   # 22 ÷ 32
        "q4_1": 0.625,    # 20 ÷ 32
        "q4_0": 0.5625,   # 18 ÷ 32
        "iq4_nl": 0.5625,  # 18 ÷ 32
    }


def test_bytes_per_token_is_every_tensor_byte_once():
    assert formulas.bytes_per_token({"tensor_bytes": 98_400_000, "file_bytes": 99_000_000}) == 98_400_000
    # a float from JSON becomes whole bytes
    got = formulas.bytes_per_token({"tensor_bytes": 1234.0})
    assert got == 1234 and isinstance(got, int)


def test_ceiling_is_bandwidth_over_bytes_per_token():
    # 273 GB/s over a 4.9 GB model: 273e9 ÷ 4.9e9 = 55.714... tokens/s
    assert formulas.ceiling_tokens_per_s(273e9, 4.9e9) == pytest.approx(55.7142857)
    # 20 GB/s over 100 MB: 200 tokens/s (a doubled bandwidth would give 400)
    assert formulas.ceiling_tokens_per_s(20e9, 100e6) == pytest.approx(200.0)


def test_flops_per_token_is_two_per_parameter():
    assert formulas.flops_per_token(134_515_008) == 269_030_016.0  # 2 × 134,515,008
    assert formulas.flops_per_token(7) == 14.0


def test_kv_bytes_per_token_of_the_published_70b_example():
    # 2 (K and V) × 80 layers × 8 KV heads × 128 dims × 2 bytes (f16) = 327,680 bytes
    assert formulas.kv_bytes_per_token(80, 8, 128, 2.0) == 327_680
    # SmolLM2-135M: 30 layers, 3 KV heads, 64 dims, q8_0 (34/32 bytes): 2 × 30 × 3 × 64 × 1.0625 = 12,240
    assert formulas.kv_bytes_per_token(30, 3, 64, 34 / 32) == 12_240
    # each factor counts once: 2 × 1 × 1 × 1 × 1 = 2, 2 × 3 × 5 × 7 × 11 = 2,310
    assert formulas.kv_bytes_per_token(1, 1, 1, 1) == 2
    assert formulas.kv_bytes_per_token(3, 5, 7, 11) == 2_310


def test_ridge_point_and_efficiency():
    # 1 TFLOP/s over 100 GB/s: 10 FLOPs per byte
    assert formulas.ridge_point(1e12, 100e9) == pytest.approx(10.0)
    assert formulas.ridge_point(3.0, 4.0) == 0.75
    # 42 of a 56 tokens/s ceiling: 0.75
    assert formulas.efficiency(42.0, 56.0) == 0.75
    assert math.isnan(formulas.efficiency(42.0, 0.0))
    assert math.isnan(formulas.efficiency(42.0, -1.0))
    assert formulas.efficiency(0.0, 1e-9) == 0.0  # any positive ceiling divides
    assert formulas.percent(0.75) == 75.0
    assert formulas.percent(0.0123) == pytest.approx(1.23)


def test_server_threads_from_the_flag_else_the_physical_cores():
    assert formulas.server_threads({"--threads": "3"}, 6) == 3
    assert formulas.server_threads({"--threads": 1}, 6) == 1
    # no flag, an unreadable one, zero or negative (llama.cpp's -1: "default"): the physical cores
    assert formulas.server_threads(None, 6) == 6
    assert formulas.server_threads({}, 6) == 6
    assert formulas.server_threads({"--threads": None}, 6) == 6
    assert formulas.server_threads({"--threads": "many"}, 6) == 6
    assert formulas.server_threads({"--threads": "0"}, 6) == 6
    assert formulas.server_threads({"--threads": "-1"}, 6) == 6


def test_batch_sizes_defaults_flags_and_clamps():
    assert formulas.DEFAULT_N_BATCH == 2048 and formulas.DEFAULT_N_UBATCH == 512
    defaults = "llama.cpp's defaults; /props does not report them"
    assert formulas.batch_sizes(None) == {"n_batch": 2048, "n_ubatch": 512, "source": defaults}
    assert formulas.batch_sizes({"--threads": "2"}) == {"n_batch": 2048, "n_ubatch": 512, "source": defaults}
    # flags given: taken as they are
    assert formulas.batch_sizes({"--batch-size": "1024", "--ubatch-size": "256"}) == {
        "n_batch": 1024, "n_ubatch": 256, "source": "server flags"}
    # only -ub: n_batch stays 2048, the source is still the flags
    assert formulas.batch_sizes({"--ubatch-size": 128}) == {"n_batch": 2048, "n_ubatch": 128, "source": "server flags"}
    # only -b below the default micro-batch: n_ubatch = min(512, 256) = 256
    assert formulas.batch_sizes({"--batch-size": "256"}) == {"n_batch": 256, "n_ubatch": 256, "source": "server flags"}
    # n_ubatch larger than n_batch: clamped to n_batch
    assert formulas.batch_sizes({"--batch-size": "256", "--ubatch-size": "512"})["n_ubatch"] == 256
    # a context of 1024 clamps the default n_batch 2048 to 1024; n_ubatch 512 stays
    assert formulas.batch_sizes({"--ctx-size": "1024"}) == {"n_batch": 1024, "n_ubatch": 512, "source": defaults}
    # a context of 300: n_batch 300, and n_ubatch min(512, 300) = 300
    assert formulas.batch_sizes({"--ctx-size": 300}) == {"n_batch": 300, "n_ubatch": 300, "source": defaults}
    # a context larger than n_batch leaves n_batch alone
    assert formulas.batch_sizes({"--ctx-size": "8192", "--batch-size": "4096"})["n_batch"] == 4096
    # unreadable, zero or negative values count as not given
    for bad in ("x", "0", "-5", None):
        assert formulas.batch_sizes({"--batch-size": bad, "--ubatch-size": bad, "--ctx-size": bad}) == {
            "n_batch": 2048, "n_ubatch": 512, "source": defaults}
    # a flag of 1 is a real flag
    assert formulas.batch_sizes({"--batch-size": "1"}) == {"n_batch": 1, "n_ubatch": 1, "source": "server flags"}


def test_prefill_reads_the_weights_once_per_micro_batch():
    # ceil(N ÷ n_ubatch)
    assert formulas.prefill_weight_reads(1921, 512) == 4  # 1921 / 512 = 3.75 -> 4
    assert formulas.prefill_weight_reads(512, 512) == 1
    assert formulas.prefill_weight_reads(513, 512) == 2
    assert formulas.prefill_weight_reads(1024, 512) == 2
    assert formulas.prefill_weight_reads(1025, 512) == 3
    assert formulas.prefill_weight_reads(7, 2) == 4  # 3.5 -> 4
    assert formulas.prefill_weight_reads(1, 512) == 1
    # never fewer than one read, and a micro-batch of 0 counts as 1 token per batch
    assert formulas.prefill_weight_reads(0, 512) == 1
    assert formulas.prefill_weight_reads(5, 0) == 5
    assert formulas.prefill_weight_reads(5, 1) == 5


def test_decode_at_depth_reads_the_weights_and_the_kv_cache():
    # B ÷ (W + KV × d): 20 GB/s, 100 MB of weights, 12,240 bytes of KV per token
    # at d = 0: 20e9 ÷ 100e6 = 200 tokens/s
    assert formulas.decode_tokens_per_s_at_depth(20e9, 100e6, 12_240, 0) == pytest.approx(200.0)
    # at d = 4096: 100e6 + 12,240 × 4096 = 100e6 + 50,135,040 = 150,135,040 bytes;
    # 20e9 ÷ 150,135,040: 150,135,040 × 133 = 19,967,960,320, and the 32,039,680 left ÷ 150,135,040 = 0.213406
    assert formulas.decode_tokens_per_s_at_depth(20e9, 100e6, 12_240, 4096) == pytest.approx(133.213406, rel=1e-7)
    # small numbers: 100 ÷ (10 + 2 × 5) = 5
    assert formulas.decode_tokens_per_s_at_depth(100, 10, 2, 5) == 5.0


def test_expected_tokens_per_pass():
    # 1 + a + a² + … + a^k
    assert speculative.expected_tokens_per_pass(0, 0.7) == 1.0    # no draft: the target's own token
    assert speculative.expected_tokens_per_pass(4, 0.0) == 1.0
    assert speculative.expected_tokens_per_pass(8, 1.0) == 9.0
    assert speculative.expected_tokens_per_pass(3, 0.5) == 1.875  # 1 + 0.5 + 0.25 + 0.125
    assert speculative.expected_tokens_per_pass(2, 0.8) == pytest.approx(2.44)  # 1 + 0.8 + 0.64


def test_acceptance_and_target_passes():
    assert speculative.acceptance_rate(40, 30) == 0.75
    assert math.isnan(speculative.acceptance_rate(0, 0))
    assert speculative.acceptance_rate(1, 1) == 1.0
    # 64 tokens, 40 from accepted drafts: 24 target passes, 64 ÷ 24 = 2.667 tokens per pass
    assert speculative.target_passes(64, 40) == 24
    assert speculative.tokens_per_target_pass(64, 40) == pytest.approx(2.6666667)
    assert speculative.tokens_per_target_pass(64, 0) == 1.0  # no speculation: one token per pass
    assert speculative.tokens_per_target_pass(1, 0) == 1.0
    assert math.isnan(speculative.tokens_per_target_pass(10, 10))


def test_predicted_speculative_speedup():
    # 2.5 tokens per round of 4 drafts at 2 ms and one 20 ms target pass:
    # round = 4 × 2 + 20 = 28 ms; plain decode 20 ms per token; 2.5 × 20 ÷ 28 = 1.7857
    assert speculative.predicted_speculative_speedup(2.5, 4, 2.0, 20.0) == pytest.approx(1.7857143)
    # a verify pass given apart: round = 4 × 2 + 30 = 38 ms; 2.5 × 20 ÷ 38 = 1.3158
    assert speculative.predicted_speculative_speedup(2.5, 4, 2.0, 20.0, verify_ms=30.0) == pytest.approx(1.3157895)
    assert speculative.predicted_speculative_speedup(3.0, 2, 5.0, 10.0, verify_ms=0.0) == 3.0  # 3 × 10 ÷ (2 × 5 + 0)
    # a round shorter than 1 ms still divides: 1 × 0.25 + 0.5 = 0.75 ms; 2 × 0.5 ÷ 0.75 = 1.3333
    assert speculative.predicted_speculative_speedup(2.0, 1, 0.25, 0.5) == pytest.approx(1.3333333)
    assert math.isnan(speculative.predicted_speculative_speedup(2.0, 0, 1.0, 0.0))  # a round of 0 ms
    assert math.isnan(speculative.predicted_speculative_speedup(2.0, 0, 1.0, 10.0, verify_ms=0.0))


def test_batch_pass_ms_on_the_line_through_two_passes():
    # (8 tokens, 20 ms) and (72 tokens, 52 ms): slope 32 ÷ 64 = 0.5 ms per token
    small, large = (8, 20.0), (72, 52.0)
    assert speculative.batch_pass_ms(8, small, large, 1.0) == 20.0
    assert speculative.batch_pass_ms(72, small, large, 1.0) == 52.0
    assert speculative.batch_pass_ms(5, small, large, 1.0) == 18.5    # 20 + 0.5 × (5 − 8)
    assert speculative.batch_pass_ms(100, small, large, 1.0) == 66.0  # 20 + 0.5 × 92
    # never below the single-token pass
    assert speculative.batch_pass_ms(5, small, large, 19.0) == 19.0
    assert speculative.batch_pass_ms(0, small, large, 16.5) == 16.5   # line gives 16 < 16.5
    # two passes of the same size: flat at the first one's time
    assert speculative.batch_pass_ms(50, (8, 20.0), (8, 30.0), 1.0) == 20.0
