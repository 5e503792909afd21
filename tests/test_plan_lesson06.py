"""Lesson 6's plan (store.plans.lesson06): read from an older run's host values, fresh, and its depths by hand."""

from __future__ import annotations

import pytest

from bytesup.store.plans import lesson06

SERVED = {"file": "m.gguf", "path": "/m.gguf", "sha256": "ab"}


def test_a_run_recorded_before_plans_is_read_from_its_host_values():
    # The first runs: every repeat prefilled its depth, no numpy generation.
    assert lesson06.from_older({"repeat": 3}) == lesson06.Plan(repeat=3, depths_from_cache=False, numpy=None)
    numpy = lesson06.from_older({"repeat": 2, "numpy_plan": {"served": SERVED, "float32_bytes": 540_000_000},
                                 "depths_from_cache": True})
    assert numpy == lesson06.Plan(repeat=2, depths_from_cache=True,
                                  numpy=lesson06.NumpyFile(served=SERVED, float32_bytes=540_000_000))
    assert lesson06.READ_FROM == ["repeat", "numpy_plan", "depths_from_cache"]


def test_a_fresh_plan_reads_back_as_recorded():
    plan = lesson06.fresh(3, lesson06.NumpyFile(served=None, float32_bytes=None))
    assert (plan.version, plan.repeat, plan.depths_from_cache, plan.numpy) == (lesson06.VERSION, 3, True,
                                                                               lesson06.NumpyFile(served=None, float32_bytes=None))
    assert lesson06.read(plan.model_dump(mode="json")) == plan


def test_the_depths_and_the_cache_prompt_by_hand():
    # 2,048 tokens: 0, 256, 512, 1,024, 1,536 and int(0.93 × 2,048) = 1,904, below 2,048 − 16 − 1 = 2,031.
    assert lesson06.depth_plan(2048) == [0, 256, 512, 1024, 1536, 1904]
    # 64 tokens: 0, 8, 16, 32, 48 and 59 capped at 64 − 16 − 1 = 47, where 48 is capped too: one depth 47.
    assert lesson06.depth_plan(64) == [0, 8, 16, 32, 47]
    assert lesson06.cache_prompt_len(2048) == 512 and lesson06.cache_prompt_len(400) == 300


def test_a_plan_of_another_shape_is_refused_in_one_paragraph():
    from bytesup.errors import BytesupError

    stored = lesson06.fresh(2, lesson06.NumpyFile(served=None, float32_bytes=None)).model_dump(mode="json")
    for bad, where in (({**stored, "repeat": "two"}, "repeat"), ({**stored, "depths": [0, 8]}, "depths")):
        with pytest.raises(BytesupError) as caught:
            lesson06.read(bad)
        text = str(caught.value)
        assert text.startswith("The plan lesson 06 recorded") and f": {where}: " in text and "\n" not in text
        assert "record the lesson again" in text
    # An older run with no repeat recorded: refused, not guessed.
    with pytest.raises(BytesupError, match="repeat: input should be a valid integer"):
        lesson06.from_older({"numpy_plan": {"served": None, "float32_bytes": None}})


def test_the_depths_past_a_knee_by_hand():
    """2,048 tokens and d* = 32 MiB ÷ 23,040 = 1,456.36, between the fitted half (1,024) and the deepest (1,904):
    1,536, 80 positions past d*, gives way to int((1,456.36 + 1,904) ÷ 2) = 1,680, 224 past it. A knee at or below
    half the context, or past the deepest depth, leaves the fractions as they are."""
    fractions = [0, 256, 512, 1024, 1536, 1904]
    assert lesson06.depth_plan(2048, knee=33554432 / 23040) == [0, 256, 512, 1024, 1680, 1904]
    for knee in (None, 700.0, 1024.0, 1904.0, 11833.0):
        assert lesson06.depth_plan(2048, knee=knee) == fractions
    # 64 tokens, d* = 40: nothing lay between 32 and 47, so one depth is added, int(87 ÷ 2) = 43
    assert lesson06.depth_plan(64, knee=40.0) == [0, 8, 16, 32, 43, 47]


def test_a_recorded_plan_of_version_3_keeps_its_depths():
    """A plan recorded before version 4 decodes at the fractions of the context alone; a fresh one moves them."""
    v3 = {"version": 3, "repeat": 3, "depths_from_cache": True, "numpy": None}
    assert lesson06.read(v3) == lesson06.Plan(version=3, repeat=3, depths_from_cache=True, numpy=None, depths_past_knee=False)
    fresh = lesson06.fresh(3, lesson06.NumpyFile(served=None, float32_bytes=None))
    assert (fresh.version, fresh.depths_past_knee) == (lesson06.VERSION, True)
    assert lesson06.read(fresh.model_dump(mode="json")) == fresh
    assert lesson06.from_older({"repeat": 3}).depths_past_knee is False


def test_a_recorded_plan_of_version_4_keeps_its_prompt_cache_rounds():
    """Version 5 put the prompt cache test's rounds under a stopping rule: at least one, at most --repeat. A plan
    recorded before it takes `repeat` rounds, as that run did."""
    from bytesup.store.plans.stopping import StoppingRule

    v4 = {"version": 4, "repeat": 3, "depths_from_cache": True, "numpy": None, "depths_past_knee": True}
    assert lesson06.read(v4).cache_rounds is None and lesson06.read(v4).version == 4
    assert lesson06.from_older({"repeat": 3}).cache_rounds is None
    fresh = lesson06.fresh(3, lesson06.NumpyFile(served=None, float32_bytes=None))
    assert fresh.version == 6 and fresh.cache_rounds == StoppingRule(minimum=1, maximum=3, tight=0.10, budget_s=8.0)
    assert lesson06.read(fresh.model_dump(mode="json")) == fresh
    assert lesson06.fresh(1, lesson06.NumpyFile(served=None, float32_bytes=None)).cache_rounds.maximum == 1


def test_a_recorded_plan_of_version_5_keeps_its_own_rule():
    """Version 6 loosened the prompt cache test's rule to ±10% and 8 s of prefill; a plan recorded at version 5 holds
    ±5% and 15 s, and its replay stops where that run stopped."""
    from bytesup.store.plans.stopping import StoppingRule

    rule = {"minimum": 1, "maximum": 3, "tight": 0.05, "budget_s": 15.0}
    v5 = {"version": 5, "repeat": 3, "depths_from_cache": True, "numpy": None, "depths_past_knee": True,
          "cache_rounds": rule}
    plan = lesson06.read(v5)
    assert plan.version == 5 and plan.cache_rounds == StoppingRule(**rule)
