"""The plans of lessons 7 and 5b: what a run made now asks, what a run recorded before plans asked (read from its
host values by each plan's table of upgrades), and a plan this bytesup cannot read."""

from __future__ import annotations

import pytest

from bytesup.errors import SchemaError
from bytesup.store.plans import lesson05b, lesson07


def test_lesson07_plan_of_a_run_made_now():
    plan = lesson07.current(samples=5, batches=3)
    # three batches per level; the matmul timed and the prefill timed five times each, after one warm-up prefill
    assert (plan.batches, plan.matmul_repeats, plan.matmul_size) == (3, 5, 2048)
    assert (plan.prefill.warmup, plan.prefill.samples, plan.prefill.tokens) == (1, 5, 128)
    assert lesson07.current(samples=7, batches=7).prefill.samples == 7 and plan.shared_metrics_reads
    assert plan.parallel == [1, 2, 4, 8] and plan.ctx_per_slot == 512 and plan.batch_n_predict == 64
    # recorded as JSON and read back unchanged
    assert lesson07.read(plan.model_dump()) == plan


def test_lesson07_plan_upgraded_from_the_host_values_of_older_runs():
    # Before the prefill and the shared readings: no prefill, a reading on each side of every batch.
    first = lesson07.from_older({"repeat": 3, "matmul_peak": {"ignored": True}})
    assert (first.batches, first.matmul_repeats, first.prefill.samples, first.shared_metrics_reads) == (3, 5, 0, False)
    # With them: the recorded prefill plan as it was, even a larger one than now.
    later = lesson07.from_older(
        {"repeat": 2, "prefill_plan": {"warmup": 2, "samples": 9, "tokens": 64}, "shared_metrics_reads": True})
    assert (later.batches, later.prefill.warmup, later.prefill.samples, later.prefill.tokens) == (2, 2, 9, 64)
    assert later.shared_metrics_reads and later.schema_version == lesson07.VERSION


def test_lesson07_plan_version_2_puts_each_levels_batches_under_a_stopping_rule():
    from bytesup.store.plans.stopping import StoppingRule

    plan = lesson07.current(samples=5, batches=3)
    assert plan.schema_version == 2 and plan.batch_rule == StoppingRule(minimum=2, maximum=3, tight=0.05, budget_s=10.0)
    # A plan recorded at version 1 took `batches` of every level, as that run did.
    v1 = {**plan.model_dump(), "schema_version": 1}
    del v1["batch_rule"]
    assert lesson07.read(v1).batch_rule is None and lesson07.read(v1).batches == 3
    assert lesson07.from_older({"repeat": 3}).batch_rule is None


def test_lesson05b_plan_of_a_run_made_now_and_of_older_runs():
    plan = lesson05b.current(5)
    # At most three rounds, so that each median leaves one slow request out; fewer where --repeat asks for fewer.
    assert plan.rounds == 3 and lesson05b.current(3).rounds == 3 and lesson05b.current(1).rounds == 1
    assert plan.stream and plan.prompt_name(lesson05b.REPETITIVE) == "repetitive" and plan.short == lesson05b.SHORT
    assert lesson05b.read(plan.model_dump()) == plan
    # Before the lesson streamed: no client_clock host value, no streamed requests; at most two rounds then.
    old = lesson05b.from_older({"repeat": 3, "spec_model_x": {}})
    assert not old.stream and old.rounds == 2
    assert old.model_dump(exclude={"stream", "rounds"}) == plan.model_dump(exclude={"stream", "rounds"})
    streamed = lesson05b.from_older({"repeat": 1, "client_clock": {"clock": "time.perf_counter"}})
    assert streamed.stream and streamed.rounds == 1


@pytest.mark.parametrize("module, plan", [(lesson07, lesson07.current(samples=5, batches=2)),
                                          (lesson05b, lesson05b.current(2))])
def test_a_plan_no_bytesup_wrote_is_an_error(module, plan):
    newer = {**plan.model_dump(), "schema_version": module.VERSION + 1}
    with pytest.raises(SchemaError, match="newer than this bytesup"):
        module.read(newer)
    with pytest.raises(SchemaError, match="not an object"):
        module.read(["not", "a", "plan"])
