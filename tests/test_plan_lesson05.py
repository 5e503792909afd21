"""Lesson 5's plan: a run recorded before plans is read from what it recorded, and a recorded plan reads back as it was."""

from __future__ import annotations

import json

import pytest

from bytesup.errors import BytesupError
from bytesup.store.plans.lesson05 import ASKED_BEFORE_PLANS, CURRENT, PLAN_VERSION, STREAM_TOKENS, from_older, read


def test_a_run_recorded_before_plans_asks_what_it_did():
    streamed = from_older({"client_clock": {"clock": "time.perf_counter"}})  # it streamed: it recorded its clock
    quiet = from_older({})
    assert streamed.schema_version == quiet.schema_version == PLAN_VERSION == 2
    assert streamed.stream_tokens == STREAM_TOKENS == 128 and quiet.stream_tokens is None
    # Everything else is what those runs asked, word for word: 16 loop tokens, seed 42, lengths 8 to 128.
    for plan in (streamed, quiet):
        assert (plan.loop_tokens, plan.seed, plan.fit_n, plan.predict_n) == (16, 42, 32, [8, 16, 64, 128])
        assert plan.seeds == [1234, 1234, 5678] and plan.rel_tol == 1e-5 and len(plan.samplers) == 10
    assert quiet.model_dump(exclude={"stream_tokens", "schema_version"}) == {
        **ASKED_BEFORE_PLANS, "samplers": [s.model_dump() for s in quiet.samplers]}


def test_the_current_plan_reads_back_from_its_record_with_ints_kept():
    recorded = json.loads(json.dumps(CURRENT.model_dump(mode="json")))  # what a run's host value holds
    plan = read(recorded)
    assert plan == CURRENT and plan.stream_tokens == 128
    top_k = next(s for s in plan.samplers if s.label == "top-k 5")
    # The request body sends top_k 5, never 5.0, and temperature 1.0 as a float.
    assert type(top_k.params["top_k"]) is int and type(top_k.params["temperature"]) is float


def test_a_plan_newer_than_this_bytesup_or_not_an_object_is_refused():
    with pytest.raises(BytesupError, match="newer than this bytesup"):
        read({**CURRENT.model_dump(mode="json"), "schema_version": 3})
    with pytest.raises(BytesupError, match="not an object"):
        read([1, 2])
