"""Lesson 8's plan (bytesup.store.plans.lesson08): the plan a run records now, and the plan each older recording
followed, read from the host values it recorded, step by step through the table of upgrades."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bytesup.store.plans.lesson08 import (DEFAULT_SIZES, PLAN_READS, PLAN_VALUE, UPGRADES, VERSION, Plan,
                                          PrefillPlan, current_plan, read_plan)
from bytesup.store.results import SchemaError

ROOT = Path(__file__).resolve().parents[1]
BEFORE_MEDIUM = ["smollm2-135m-q4_1", "smollm2-135m-q8_0", "smollm2-135m-f16", "smollm2-135m-f32", "large-q8_0"]


def host_values(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["host_values"]


def test_the_plan_of_a_run_made_now():
    plan = current_plan(2)
    assert plan.schema_version == VERSION == len(UPGRADES)
    assert plan.default_sizes == DEFAULT_SIZES and "medium-q8_0" in plan.default_sizes
    assert (plan.prompt, plan.n_predict, plan.context_per_slot) == ("The capital of France is", 32, 256)
    # At least five samples (bytesup.course.robust), more with --repeat; one warm-up; batches at P = 2 and 4.
    assert (plan.warmup, plan.samples, plan.levels) == (1, 5, (2, 4))
    assert current_plan(7).samples == 7 and current_plan(7).prefill == PrefillPlan(warmup=1, samples=7, tokens=128)
    assert plan.matvec and plan.in_turns
    # Four slots of 256 tokens: 1,024; two of 4 sequences make 8 samples, three of 2 make 6.
    assert (plan.slots, plan.context, plan.rounds(4), plan.rounds(2), plan.rounds(1)) == (4, 1024, 2, 3, 5)


def test_a_recorded_plan_reads_back_as_itself():
    plan = current_plan(3)
    recorded = json.loads(json.dumps(plan.model_dump(mode="json")))
    assert read_plan({PLAN_VALUE: recorded, "repeat": 3}) == plan
    # the plan wins over any older value the run also holds
    assert read_plan({PLAN_VALUE: recorded, "repeat": 3, "sample_plan": {"warmup": 0}}) == plan


def test_a_run_recorded_before_the_sample_plan():
    """Both committed runs under outputs/: --repeat 3 timed decodes, no warm-up, no batches, no prefill, no numpy
    reading, one model after another, and the default models before medium-q8_0 joined."""
    for run in ("2026-11-30-cpu2-smollm2", "2026-12-01-cpu2-smollm2"):
        values = host_values(ROOT / "outputs" / run / "08_capstone_decode_memory_bound.json")
        plan = read_plan({n: v for n, v in values.items() if n in PLAN_READS})
        assert plan.schema_version == VERSION and list(plan.default_sizes) == BEFORE_MEDIUM
        assert (plan.warmup, plan.samples, plan.levels, plan.prefill) == (0, 3, (), None)
        assert (plan.matvec, plan.in_turns, plan.slots, plan.context) == (False, False, 1, 256)


def test_the_fixture_recorded_before_plans_followed_the_plan_of_today():
    """The fixture holds every older value (sample plan, numpy reading, medium-q8_0, turns, prefill) and --repeat 2:
    its upgraded plan is the one a run made now records."""
    values = host_values(ROOT / "tests/fixtures/runs/08_capstone_decode_memory_bound/08_capstone_decode_memory_bound.json")
    assert PLAN_VALUE not in values and values["repeat"] == 2
    assert read_plan(values) == current_plan(2)


def test_each_step_reads_its_own_host_value():
    base = {"repeat": 2}
    sample_plan = {"warmup": 1, "samples": 5, "levels": [2, 4]}
    assert (read_plan({**base, "sample_plan": sample_plan}).levels, read_plan(base).levels) == ((2, 4), ())
    assert read_plan({**base, "matvec_bandwidth": {"gb_per_s": {}}}).matvec is True
    assert list(read_plan({**base, "default_sizes": list(DEFAULT_SIZES)}).default_sizes) == list(DEFAULT_SIZES)
    assert read_plan({**base, "sweep_in_turns": True}).in_turns is True
    prefill = read_plan({**base, "prefill_plan": {"warmup": 1, "samples": 5, "tokens": 128}}).prefill
    assert prefill == PrefillPlan(warmup=1, samples=5, tokens=128)
    # one change alone leaves the rest as the first version had it
    turns = read_plan({**base, "sweep_in_turns": True})
    assert (turns.warmup, turns.samples, turns.prefill, turns.matvec) == (0, 2, None, False)


def test_an_intermediate_version_goes_through_the_later_steps_only():
    """A plan recorded at version 3 (before turns and prefills) takes steps 3 and 4 from the values beside it."""
    v3 = {**current_plan(2).model_dump(mode="json"), "schema_version": 3, "in_turns": False, "prefill": None}
    plan = read_plan({PLAN_VALUE: v3, "repeat": 2, "sweep_in_turns": True})
    assert plan.in_turns is True and plan.prefill is None and plan.schema_version == VERSION


def test_a_plan_newer_than_this_bytesup_is_an_error():
    newer = {**current_plan(2).model_dump(mode="json"), "schema_version": VERSION + 1}
    with pytest.raises(SchemaError, match="newer than this bytesup"):
        read_plan({PLAN_VALUE: newer, "repeat": 2})
    assert isinstance(read_plan({"repeat": 1}), Plan)
