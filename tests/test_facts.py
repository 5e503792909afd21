"""Typed facts (`bytesup.store.facts`): stated once with `ctx.fact(model)`, stored under the model's name, read back
typed with `result.stated(Model)`; an older run's tables become the facts once, when its result is loaded."""

from __future__ import annotations

import pytest
from lessonkit import QueuedServer, hand_context
from pydantic import BaseModel, RootModel

from bytesup.store import facts
from bytesup.store.facts import lesson04, lesson06, lesson09
from bytesup.store.results import LessonResult, load_result, tables_to_facts


def result_json(lesson_id: str, tables=(), stated=None) -> dict:
    return LessonResult(lesson_id=lesson_id, title="t", started_at="s", finished_at="f", tables=list(tables),
                        facts=stated or {}).model_dump(mode="json")


def table(name: str, columns: list[tuple[str, str]], rows: list[list]) -> dict:
    return {"name": name, "title": name, "columns": [{"name": n, "unit": u} for n, u in columns], "rows": rows, "notes": []}


TOP8 = table("top8_cat_sat", [("rank", ""), ("token", ""), ("probability", "%"), ("server probability", "%"), ("logprob", "")],
             [[2, "' rug'", 25.0, None, -1.3862943611198906], [1, "' mat'", 50.0, 49.5, -0.6931471805599453]])


def test_a_fact_is_stated_under_its_models_name_and_read_back_typed():
    ctx = hand_context("09_beyond_one_machine", QueuedServer({}))
    back = ctx.fact(lesson09.DecodeSpeeds(whole=75.0, split=40.0))
    ctx.fact(lesson09.NetworkBytesPerToken(203520))
    assert ctx.facts == {"decode_tokens_per_s": {"whole": 75.0, "split": 40.0}, "network_bytes_per_token": 203520}
    result = LessonResult(lesson_id="09", title="t", started_at="s", finished_at="f", facts=ctx.facts)
    assert result.stated(lesson09.DecodeSpeeds) == back and result.stated(lesson09.NetworkBytesPerToken).root == 203520
    assert result.stated(lesson09.PrefillSpeeds) is None   # not stated


def test_a_fact_of_the_wrong_shape_says_where():
    with pytest.raises(facts.FactShapeError, match=r"kv_examples\[1\]\['head_dim'\]: field required"):
        facts.read({"kv_examples": [{"label": "a", "n_layer": 1, "n_head_kv": 1, "head_dim": 1, "bytes_per_element": 2,
                                     "bytes_per_token": 4}, {"label": "b", "n_layer": 1, "n_head_kv": 1}]},
                   lesson06.KvExamples)


def test_one_name_one_model():
    class Other(RootModel[int]):
        pass
    with pytest.raises(ValueError, match="two models state the fact 'network_bytes_per_token'"):
        facts.stated("network_bytes_per_token")(Other)
    with pytest.raises(TypeError, match="is not a stated fact"):
        facts.name_of(BaseModel)
    assert facts.FACTS["top_tokens"] is lesson04.TopTokens


def test_fraction_divides_percent_only():
    assert facts.fraction(92.7, "%") == pytest.approx(0.927) and facts.fraction(92.7, " percent ") == pytest.approx(0.927)
    assert facts.fraction(0.927, "") == 0.927 and facts.fraction(3, "fraction") == 3.0


# The same table with the heads lesson 4 writes since its two probabilities are named by the answer that gave each.
TOP8_NAMED = {**TOP8, "columns": [{"name": n, "unit": u} for n, u in
                                  [("rank", ""), ("token", ""), ("e^logprob", "%"), ("server's prob", "%"), ("logprob", "")]]}


@pytest.mark.parametrize("top8", [TOP8, TOP8_NAMED], ids=["probability, server probability", "e^logprob, server's prob"])
def test_an_older_runs_top8_table_becomes_the_fact_once_when_loaded(top8):
    result = load_result(result_json("04_next_token", [top8]), "older")
    shown = result.stated(lesson04.TopTokens).tables()["top8_cat_sat"]
    assert shown.prompt is None   # an older table does not name its prompt
    # Ranked by the rank column, percent to fractions: 50% is 0.5, 49.5% is 0.495, 25% is 0.25.
    assert [(t.rank, t.token, t.probability, t.server_probability, t.id) for t in shown.ranked()] == [
        (1, "' mat'", 0.5, pytest.approx(0.495), None), (2, "' rug'", 0.25, None, None)]
    assert shown.ranked()[0].logprob == -0.6931471805599453


def test_a_result_that_states_its_facts_is_left_as_it_is():
    given = {"top_tokens": {"t": {"prompt": "p", "tokens": []}}}
    data = result_json("04_next_token", [TOP8], given)
    assert tables_to_facts(data) is data
    assert tables_to_facts(result_json("04_next_token")) == result_json("04_next_token")   # no table, nothing to add
    assert tables_to_facts(result_json("03_layer_is_matmul", [TOP8]))["facts"] == {}        # lesson 3 states no such fact


def test_an_older_runs_kv_table_becomes_the_fact():
    kv = table("kv_cache_size", [("model", ""), ("layers", ""), ("KV heads", ""), ("head width", ""),
                                 ("bytes per element", ""), ("per token", "KiB"), ("per token", "bytes")],
               [["served", 30, 3, 64, 2, 22.5, 23040], ["odd", 30.5, 3, 64, 2, 1, 1]])
    rows = load_result(result_json("06_attention_kv_cache", [kv]), "older").stated(lesson06.KvExamples).rows()
    # 2 × 30 × 3 × 64 × 2 = 23,040 bytes, read from the column in bytes, not the one in KiB; 30.5 layers is no row.
    assert [(r.label, r.n_layer, r.bytes_per_token) for r in rows] == [("kv_cache_size: served", 30, 23040.0)]


def test_lesson_5s_facts_read_back_typed_and_as_written():
    from bytesup.store.facts import lesson05

    rows = [{"name": "greedy", "max_relative_difference": 0.0, "tolerance": 1e-05, "same_tokens": True},
            {"name": "top_k 40", "max_relative_difference": None, "tolerance": 1e-05, "same_tokens": None}]
    typed = lesson05.SamplerComparisons.model_validate(rows)
    assert typed.rows()[0].same_tokens is True and typed.rows()[1].max_relative_difference is None
    assert typed.model_dump(mode="json") == rows
    clock = {"n_predict": 128, "clock": "time.perf_counter", "repeats": [
        {"ttft_ms": 118.551, "prompt_ms": 113, "token_events": 128, "tokens": 128, "predicted_n": 128,
         "itl_median_ms": 35.99, "predicted_per_token_ms": 43.6, "end_to_end_ms": 5655.105, "server_total_ms": 5653.67}]}
    back = lesson05.ClientClock.model_validate(clock).model_dump(mode="json")
    assert back == clock and isinstance(back["repeats"][0]["prompt_ms"], int)  # 113 stays 113, not 113.0
    # an older run's table: its numbers, never its verdict text
    table = {"name": "sampler_check", "columns": [{"name": "setting"}, {"name": "same tokens"}, {"name": "max |Δp| / p"},
                                                  {"name": "tolerance"}, {"name": "verdict"}],
             "rows": [["top_p 0.9", True, 2e-6, 1e-5, "disagree"]]}
    old = lesson05.sampler_comparisons_from_tables([table])
    assert old is not None and old.model_dump(mode="json") == [
        {"name": "top_p 0.9", "max_relative_difference": 2e-6, "tolerance": 1e-5, "same_tokens": True}]
    assert lesson05.sampler_comparisons_from_tables([]) is None
