"""Lesson 6's arithmetic (bytesup.course.kvcache) on hand arithmetic: KV bytes per token, cache types, the bytes
model, the positions and attention pairs with and without a cache, and the published Spark's slope."""

from __future__ import annotations

import pytest

from bytesup.course import kvcache
from bytesup.errors import BytesupError


def test_attention_pairs_by_brute_force():
    for p, n in ((1, 1), (3, 4), (16, 8)):
        with_cache = sum(i + 1 for i in range(p))           # the prompt: position i sees i + 1 positions
        seq = p
        for _ in range(n - 1):                               # each new position sees itself and all before
            seq += 1
            with_cache += seq
        without = sum(sum(i + 1 for i in range(p + k)) for k in range(n))
        assert kvcache.attention_pairs_with_cache(p, n) == with_cache
        assert kvcache.attention_pairs_without_cache(p, n) == without


def test_growth_exponent():
    assert kvcache.growth_exponent(10, 100.0, 100, 10_000.0) == pytest.approx(2.0)


def test_element_bytes():
    assert kvcache.element_bytes("f16") == 2
    assert kvcache.element_bytes("F32") == 4
    assert kvcache.element_bytes("q8_0") == 34 / 32
    with pytest.raises(BytesupError, match="q3_k"):
        kvcache.element_bytes("q3_k")


def test_kv_cache_types():
    assert kvcache.kv_cache_types({}, [{"id": 0}], {})[:2] == ("f16", "f16")
    assert kvcache.kv_cache_types({}, None, {"--cache-type-k": "q8_0"})[:2] == ("q8_0", "f16")
    assert kvcache.kv_cache_types({"x": {"cache_type_k": "Q4_0", "cache_type_v": "q4_0"}}, None, {}) == ("q4_0", "q4_0", "/props")


def test_unknown_element_type_lists_the_known_ones():
    with pytest.raises(BytesupError) as err:
        kvcache.element_bytes("q3_k")
    assert str(err.value) == ("Unknown KV cache type 'q3_k'; known: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, "
                              "iq4_nl.")


def test_kv_cache_types_every_spelling_and_source():
    types = kvcache.kv_cache_types
    # Either key spelling, case folded; a half that is missing takes the other half's type.
    assert types({"cache_type_k": "Q8_0"}, None, None) == ("q8_0", "q8_0", "/props")
    assert types({"type_v": "Q4_0"}, None, None) == ("q4_0", "q4_0", "/props")
    assert types({"type_k": "f32", "cache_type_v": "Q8_0"}, None, None) == ("f32", "q8_0", "/props")
    # /slots, nested in a slot; /props comes first, /slots before the flags.
    assert types({}, [{"id": 0, "params": {"type_k": "q5_0", "type_v": "q5_1"}}], None) == ("q5_0", "q5_1", "/slots")
    assert types({}, [{"cache_type_v": "q4_1"}], {"-ctk": "f32"}) == ("q4_1", "q4_1", "/slots")
    assert types({"cache_type_k": "q8_0"}, [{"type_k": "q4_0"}], {"-ctk": "f32"})[2] == "/props"
    # The flags, short and long spellings; a half not given is llama.cpp's default, f16.
    assert types({}, None, {"-ctk": "Q4_1"}) == ("q4_1", "f16", "server flags")
    assert types({}, None, {"-ctv": "Q8_0"}) == ("f16", "q8_0", "server flags")
    assert types({}, None, {"--cache-type-v": "q5_0"}) == ("f16", "q5_0", "server flags")
    assert types({}, [], None) == ("f16", "f16", "llama.cpp's default (not reported by /props or /slots)")


def test_bytes_model_predictions():
    # 100 MB of weights, 1 MB of KV per token: 50 tokens/s at depth 0 reads 5 GB/s; at depth 100 each
    # token reads 200 MB, so 25 tokens/s.
    bandwidth, predicted = kvcache.bytes_model_predictions([0, 100], [50.0, 30.0], 100e6, 1e6)
    assert bandwidth == pytest.approx(5e9)
    assert predicted == pytest.approx([50.0, 25.0])
    # Starting from a non-zero depth: 40 tokens/s at depth 20 reads 40 × 120 MB = 4.8 GB/s.
    bandwidth, predicted = kvcache.bytes_model_predictions([20, 220], [40.0, 10.0], 100e6, 1e6)
    assert bandwidth == pytest.approx(4.8e9) and predicted[1] == pytest.approx(4.8e9 / 320e6)


def test_podcast_figures_follow_within_ten_percent_of_a_mib_or_a_mb(monkeypatch):
    big = 2 * 80 * 8 * 128 * 2  # the 70B example's KV bytes per token: 327,680
    # "32 KB" read as 1,000-byte kilobytes: 32 × 1,000 = 32,000 bytes
    assert kvcache.podcast_check(big).claimed_decimal == 32_000
    # tokens per "megabyte" × 32,768 bytes: within 10% of 1,048,576 (MiB) or of 1,000,000 (MB)?
    for tokens, per_mb, follows in [
        (30, 983_040, True),      # 0.9375 MiB (off 6.25%), 0.983 MB (off 1.7%)
        (34, 1_114_112, True),    # 1.0625 MiB (off 6.25%), 1.114 MB (off 11.4%): MiB only
        (28, 917_504, True),      # 0.875 MiB (off 12.5%), 0.9175 MB (off 8.25%): MB only
        (10, 327_680, False),     # 0.3125 MiB (off 68.75%), 0.328 MB (off 67.2%): neither
        (64, 2_097_152, False),   # 2 MiB (off 100%), 2.097 MB (off 109.7%): neither
    ]:
        monkeypatch.setitem(kvcache.PODCAST, "tokens_per_megabyte", tokens)
        pod = kvcache.podcast_check(big)
        assert (pod.per_megabyte_claim, pod.follows) == (per_mb, follows), tokens


def test_the_spark_slope_by_hand():
    # (1000 ÷ 29.6 − 1000 ÷ 33.2) ÷ 1,921 = (33.784 − 30.120) ÷ 1,921 = 1.907 µs; 524,288 B ÷ 273 GB/s = 1.920 µs
    # The specimen: 2 × 32 layers × 32 KV heads × 128 × 2 bytes = 524,288 bytes per token; 32 heads of 128.
    spark = kvcache.spark_slope(kvcache.AttentionShape(524_288, 32, 32, 128))
    assert 1e3 * spark.split.slope_ms == pytest.approx(1.907, abs=5e-4)
    assert 1e3 * spark.split.kv_read_ms == pytest.approx(1.920, abs=5e-4)
    assert spark.split.kv_bytes_per_token == 524_288 and spark.split.flops_per_position == 4 * 32 * 32 * 128
    assert spark.split.kv_share == pytest.approx(1.0071, abs=1e-4)
    # each figure moved by 0.05 tokens/s: 33.25 → 29.55 gives 1.960 µs (98.0%), 33.15 → 29.65 gives 1.854 µs (103.6%)
    assert spark.kv_share_low == pytest.approx(0.9797, abs=1e-4) and spark.kv_share_high == pytest.approx(1.0360, abs=1e-4)


def _depths_on(steps: dict[int, float]) -> list[kvcache.DepthResult]:
    return [kvcache.DepthResult(depth=d, prompt_n=1, ms_per_token=[t, t], tokens_per_s=[1e3 / t] * 2, prefill_median=None)
            for d, t in steps.items()]


def test_the_depth_model_places_the_knee_from_the_cache_and_falls_back_to_the_line():
    """Steps 10 ms + 0.01 ms per position up to 1,200 and 0.03 beyond, at a 4,096-token context (fitted half 2,048):
    a cache of 1,200 × 128 bytes bends the model there, where the depths past it come slower; no cache, or one
    holding fewer positions than the second depth, leaves the line, and says why."""
    steps = {d: 10 + 0.01 * min(d, 1200) + 0.03 * max(0, d - 1200) for d in (0, 512, 1024, 2048, 3072, 3800)}
    shape, specimen = kvcache.AttentionShape(128.0, 2, 4, 8), kvcache.AttentionShape(524_288.0, 32, 32, 128)
    bent = kvcache.depth_model(_depths_on(steps), 4096, shape, 12.8, None, specimen, (1200 * 128, "hand", None))
    assert (bent.line.knee, bent.line.slope_ms, bent.line.slope2_ms) == (1200, pytest.approx(0.01), pytest.approx(0.03))
    assert bent.why_no_knee is None and bent.split2 is not None and bent.split2.slope_ms == pytest.approx(0.03)
    assert bent.cache == kvcache.CacheKnee(1200 * 128, "hand", 128.0, 1200, None)
    # 2,048 came 22 + 0.03 × 848 = 47.44 ms against the line below d*'s 30.48: the knee shows
    assert bent.knee_test is not None and bent.knee_test.shown and bent.knee_test.past[0].depth == 2048
    # no slower past 1,200 (its steps as at 1,200, 22 ms): the knee does not show, the model is one line through every
    # fitted depth, 0–2,048, and nothing is split past d*
    flat = kvcache.depth_model(_depths_on({d: 10 + 0.01 * min(d, 1200) for d in steps}), 4096, shape, 12.8, None,
                               specimen, (1200 * 128, "hand", None))
    assert flat.knee_test is not None and not flat.knee_test.shown and flat.why_no_knee is None
    assert (flat.line.knee, flat.line.fitted, flat.split2) == (None, (0, 512, 1024, 2048), None)
    none = kvcache.depth_model(_depths_on(steps), 4096, shape, 12.8, None, specimen, (None, None, "no size"))
    assert none.line.knee is None and none.cache.why_none == "no size" and none.split2 is None and none.knee_test is None
    tiny = kvcache.depth_model(_depths_on(steps), 4096, shape, 12.8, None, specimen, (100 * 128, "hand", None))
    assert tiny.line.knee is None and tiny.why_no_knee.startswith("a line up to the knee at depth 100 needs at least two")
