"""Records parsed from responses recorded from the real embedded server (scripts/record_fixtures.py), and from
hand-made bodies whose expected numbers are worked by hand."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from bytesup.course import loop
from bytesup.llama import responses
from bytesup.errors import MalformedResponse, MissingField

from conftest import load_fixture


def parsed(model, name):
    return responses.parse(model, load_fixture(name)["response"], path=load_fixture(name)["request"]["path"])


def test_completion_with_full_softmax_logprobs():
    done = parsed(responses.Completion, "completion_logprobs")
    pos = done.completion_probabilities[0]
    assert pos.top_logprobs is not None and pos.top_probs is None
    assert len(pos.top_logprobs) == 8
    probs = [p for *_, p in pos.candidates()]
    assert probs == sorted(probs, reverse=True)
    assert all(0 < p <= 1 for p in probs) and sum(probs) <= 1 + 1e-9
    assert math.isclose(probs[0], math.exp(pos.top_logprobs[0]["logprob"]))


def test_completion_with_post_sampling_probs():
    done = parsed(responses.Completion, "completion_post_sampling")
    pos = done.completion_probabilities[0]
    assert pos.top_probs is not None and pos.top_logprobs is None
    # top_k 5 then temperature: five tokens kept, renormalized to 1.
    assert len(pos.top_probs) == 5
    assert math.isclose(sum(c["prob"] for c in pos.top_probs), 1.0, rel_tol=1e-4)


def test_byte_list_pieces_are_kept_as_bytes():
    tok = parsed(responses.Tokenized, "tokenize_non_ascii")
    byte_pieces = [t for t in tok.tokens if isinstance(t.piece, list)]
    assert byte_pieces, "the recorded text should contain a piece that is not valid UTF-8"
    assert b"".join(t.piece_bytes for t in tok.tokens).decode("utf-8") == load_fixture("tokenize_non_ascii")["request"]["json"]["content"]


def test_tokenize_detokenize_round_trip_recorded():
    tok = parsed(responses.Tokenized, "tokenize_paris")
    det = parsed(responses.Detokenized, "detokenize")
    assert load_fixture("detokenize")["request"]["json"]["tokens"] == tok.ids
    assert det.content == load_fixture("tokenize_paris")["request"]["json"]["content"]


def test_speeds_follow_one_rule():
    t = parsed(responses.Completion, "completion_decode").timings
    assert t.predicted_n == 16
    # First generated token belongs to the prompt phase: predicted_ms spans predicted_n - 1 passes.
    assert loop.decode_passes(t) == 15
    assert math.isclose(loop.decode_ms_per_token(t), t.predicted_ms / 15)
    assert math.isclose(responses.decode_tokens_per_s(t), 15 * 1000 / t.predicted_ms)
    assert math.isclose(responses.prefill_tokens_per_s(t), t.prompt_n * 1000 / t.prompt_ms)
    # This build divides the same way: its own per-token figure agrees with ours.
    assert math.isclose(t.predicted_per_token_ms, loop.decode_ms_per_token(t), rel_tol=1e-6)


def test_metrics_text_parsed_into_numbers():
    values = responses.parse_metrics(load_fixture("metrics")["response_text"])
    assert any(k.startswith("llamacpp:") for k in values)
    assert all(isinstance(v, float) for v in values.values())


def test_props_health_models_slots():
    assert parsed(responses.Health, "health").status == "ok"
    props = parsed(responses.Props, "props")
    assert props.model_path and props.model_path.endswith(".gguf")
    assert parsed(responses.ModelList, "v1_models").data
    assert isinstance(load_fixture("slots")["response"], list)


def test_newer_server_fields_are_kept():
    body = dict(load_fixture("completion_decode")["response"])
    body["a_field_from_the_future"] = 1
    assert responses.parse(responses.Completion, body, path="/completion").a_field_from_the_future == 1


# --- hand-made bodies, expected values worked by hand -----------------------------------------

def timings(**fields):
    return responses.Timings.model_validate({"prompt_n": 10, "prompt_ms": 50.0, "predicted_n": 5, "predicted_ms": 80.0, **fields})


def test_decode_counts_n_minus_one_passes_like_the_servers_own_figure():
    # A 2026 build: 17 tokens, 320 ms of decode; its own figure is 320 ÷ 16 = 20 ms per token.
    t = timings(predicted_n=17, predicted_ms=320.0, predicted_per_token_ms=20.0, predicted_per_second=50.0)
    assert loop.decode_passes(t) == 16
    assert loop.decode_ms_per_token(t) == 20.0 == t.predicted_per_token_ms
    assert responses.decode_tokens_per_s(t) == 50.0 == t.predicted_per_second  # 1000 ÷ 20
    # An older build divided by predicted_n: 320 ÷ 17 = 18.82 ms; we still count 16 passes.
    old = timings(predicted_n=17, predicted_ms=320.0, predicted_per_token_ms=320 / 17)
    assert loop.decode_ms_per_token(old) == 20.0 != old.predicted_per_token_ms
    # 3 tokens in 30 ms: 2 passes of 15 ms, 66.67 tokens/s
    t3 = timings(predicted_n=3, predicted_ms=30.0)
    assert loop.decode_passes(t3) == 2 and loop.decode_ms_per_token(t3) == 15.0
    assert responses.decode_tokens_per_s(t3) == pytest.approx(66.666667)
    # 2 tokens in 8 ms: one pass, 125 tokens/s
    assert responses.decode_tokens_per_s(timings(predicted_n=2, predicted_ms=8.0)) == 125.0


def test_decode_of_one_token_or_none_has_no_speed():
    # one token came from the prompt pass: no decode pass at all
    for n in (0, 1):
        t = timings(predicted_n=n, predicted_ms=0.0)
        assert loop.decode_passes(t) == 0
        assert math.isnan(loop.decode_ms_per_token(t)) and math.isnan(responses.decode_tokens_per_s(t))
    # passes but no time measured: refused when read, and no speed from one built around the check (never an infinite one)
    with pytest.raises(ValidationError):
        timings(predicted_n=5, predicted_ms=0.0)
    zero = responses.Timings.model_construct(prompt_n=10, prompt_ms=50.0, predicted_n=5, predicted_ms=0.0)
    assert loop.decode_ms_per_token(zero) == 0.0 and math.isnan(responses.decode_tokens_per_s(zero))
    with pytest.raises(ValidationError):  # a negative count is no server's: refused when read (issue 23)
        timings(predicted_n=-3)


def test_prefill_tokens_per_s():
    assert responses.prefill_tokens_per_s(timings(prompt_n=10, prompt_ms=50.0)) == 200.0   # 10 × 1000 ÷ 50
    assert responses.prefill_tokens_per_s(timings(prompt_n=1921, prompt_ms=4000.0)) == 480.25  # 1921 ÷ 4 s
    assert responses.prefill_tokens_per_s(timings(prompt_n=3, prompt_ms=0.5)) == 6000.0  # under a millisecond still counts
    assert math.isnan(responses.prefill_tokens_per_s(responses.Timings.model_construct(prompt_n=10, prompt_ms=0.0)))  # refused when read


def test_timings_defaults_and_speculative_counts():
    t = timings()
    assert t.cache_n == 0 and t.draft_n is None and t.draft_n_accepted is None
    assert t.predicted_per_token_ms is None and t.prompt_per_second is None
    t = timings(draft_n=40, draft_n_accepted=30, cache_n=7)
    assert (t.draft_n, t.draft_n_accepted, t.cache_n) == (40, 30, 7)


def test_candidates_from_either_shape():
    full = responses.TokenProbabilities.model_validate({
        "id": 5, "token": " a", "logprob": math.log(0.5),
        "top_logprobs": [{"id": 5, "token": " a", "bytes": [32, 97], "logprob": math.log(0.5)},
                         {"id": 9, "token": " b", "logprob": math.log(0.25)}]})
    got = full.candidates()
    assert [(i, tok, raw) for i, tok, raw, _ in got] == [(5, " a", [32, 97]), (9, " b", None)]
    assert [p for *_, p in got] == [pytest.approx(0.5), pytest.approx(0.25)]  # e^ln 0.5, e^ln 0.25
    post = responses.TokenProbabilities.model_validate({
        "id": 5, "token": " a", "prob": 0.75,
        "top_probs": [{"id": 5, "token": " a", "prob": 0.75}, {"id": 2, "token": "c", "bytes": [99], "prob": 0.25}]})
    assert post.candidates() == [(5, " a", None, 0.75), (2, "c", [99], 0.25)]
    assert responses.TokenProbabilities.model_validate({"id": 1, "token": "x"}).candidates() == []


def test_first_position_needs_probabilities():
    body = {"content": "x", "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1, "predicted_ms": 1.0}}
    done = responses.Completion.model_validate(body)
    assert done.tokens == [] and done.completion_probabilities == []
    with pytest.raises(MissingField, match="completion_probabilities") as err:
        done.first_position("b7000")
    assert "b7000" in str(err.value) and err.value.field == "completion_probabilities"
    first = {"id": 3, "token": "a", "prob": 1.0, "top_probs": []}
    second = {"id": 4, "token": "b", "prob": 1.0, "top_probs": []}
    done = responses.Completion.model_validate({**body, "completion_probabilities": [first, second]})
    assert done.first_position().id == 3


def test_pieces_and_ids():
    assert responses.TokenPiece(id=1, piece=[0xE2, 0x82]).piece_bytes == b"\xe2\x82"
    assert responses.TokenPiece(id=1, piece="é").piece_bytes == b"\xc3\xa9"
    assert responses.Tokenized.model_validate({"tokens": [4, 5, 6]}).ids == [4, 5, 6]
    assert responses.Tokenized.model_validate({"tokens": [{"id": 7, "piece": "a"}, {"id": 8, "piece": [98]}]}).ids == [7, 8]


def test_shown_token():
    assert responses.shown_token(" the") == "' the'"
    assert responses.shown_token("ignored", [0x20, 0x61]) == "' a'"          # bytes win when given
    assert responses.shown_token("?", [0xE2, 0x82]) == "b'\\xe2\\x82'"       # half a UTF-8 character
    assert responses.shown_token("\n") == "'\\n'"


def test_parse_names_the_missing_field_and_the_build():
    with pytest.raises(MissingField) as err:
        responses.parse(responses.Completion, {"content": "x", "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1}},
                        path="/completion", build="b6500")
    assert err.value.field == "timings.predicted_ms"
    assert "/completion" in str(err.value) and "b6500" in str(err.value)
    with pytest.raises(MissingField) as err:
        responses.parse(responses.Health, {}, path="/health")
    assert err.value.field == "status" and "unknown" in str(err.value)


def test_parse_calls_a_wrong_type_malformed():
    with pytest.raises(MalformedResponse) as err:
        responses.parse(responses.Health, {"status": 5}, path="/health", url="http://h:1")
    text = str(err.value)
    assert "/health" in text and "http://h:1" in text and "status: " in text and "{'status': 5}" in text
    with pytest.raises(MalformedResponse, match=r"\(the body: "):
        responses.parse(responses.Health, [1, 2], path="/health", url="http://h:1")
    # a wrong type beside a missing field: the missing one is named
    with pytest.raises(MissingField, match=r"top_probs\.0\.prob"):
        responses.parse(responses.TokenProbabilities, {"id": 1, "token": "a", "top_probs": [{"id": "x", "token": "a"}]},
                        path="/completion")


def test_parse_metrics_by_hand():
    text = "\n".join([
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.",
        "# TYPE llamacpp:prompt_tokens_total counter",
        "llamacpp:prompt_tokens_total 1921",
        "",
        '  llamacpp:requests_processing{slot="0"} 2.5e1  ',
        "process_start_time 17 1700000000",
        "not a metric line",
        "broken_value abc",
        "9starts_with_a_digit 3",
        "llamacpp:n_decode_total 0",
    ])
    assert responses.parse_metrics(text) == {
        "llamacpp:prompt_tokens_total": 1921.0,
        'llamacpp:requests_processing{slot="0"}': 25.0,
        "process_start_time": 17.0,
        "llamacpp:n_decode_total": 0.0,
    }
    assert responses.parse_metrics("") == {}


def test_optional_fields_are_none_or_empty_when_absent():
    props = responses.Props.model_validate({})
    assert (props.build_info, props.model_path, props.total_slots, props.default_generation_settings) == (None, None, None, None)
    done = responses.Completion.model_validate({"content": "", "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1,
                                                                           "predicted_ms": 1.0}})
    assert (done.stop_type, done.tokens_evaluated, done.tokens_cached, done.generation_settings) == (None, None, None, None)
    assert done.tokens == [] and done.completion_probabilities == []
    t = done.timings
    assert (t.prompt_per_token_ms, t.prompt_per_second, t.predicted_per_token_ms, t.predicted_per_second) == (None,) * 4
    assert (t.draft_n, t.draft_n_accepted) == (None, None)
    pos = responses.TokenProbabilities.model_validate({"id": 1, "token": "a"})
    assert (pos.bytes, pos.logprob, pos.top_logprobs, pos.prob, pos.top_probs) == (None,) * 5
    listed = responses.TokenProbabilities.model_validate({"id": 1, "token": "a", "top_logprobs": [
        {"id": 1, "token": "a", "logprob": -1.0, "added": 2}]})
    # a candidate is the server's dict, checked, with the keys the project reads: one a newer server adds is left out
    assert listed.top_logprobs == [{"id": 1, "token": "a", "logprob": -1.0}]
    assert listed.candidates() == [responses.Candidate(1, "a", None, math.exp(-1.0))]
    post = responses.TokenProbabilities.model_validate({"id": 1, "token": "a", "top_probs": [
        {"id": 1, "token": "a", "bytes": [97], "prob": 0.5}]})
    assert post.candidates() == [responses.Candidate(1, "a", [97], 0.5)]
    assert responses.ModelList.model_validate({}).data == []
    # what a newer server adds is kept on every record
    assert responses.Health.model_validate({"status": "ok", "uptime": 3}).uptime == 3


def test_missing_probabilities_message():
    done = responses.Completion.model_validate({"content": "", "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1,
                                                                           "predicted_ms": 1.0}})
    with pytest.raises(MissingField) as err:
        done.first_position()
    assert str(err.value).startswith("The server's answer to /completion has no field `completion_probabilities`, "
                                     "which this lesson needs (server build: unknown).")


def test_a_negative_time_is_refused_when_read_and_never_a_speed():
    with pytest.raises(ValidationError):
        timings(predicted_n=3, predicted_ms=-10.0)
    # The arithmetic still gives no speed for one built around the check: −5 ms per pass, not −200 tokens/s.
    t = responses.Timings.model_construct(prompt_n=10, prompt_ms=-1.0, predicted_n=3, predicted_ms=-10.0)
    assert loop.decode_ms_per_token(t) == -5.0 and math.isnan(responses.decode_tokens_per_s(t))
    assert math.isnan(responses.prefill_tokens_per_s(t))


def test_a_malformed_nested_field_is_named_by_its_path():
    body = {"content": "x", "timings": {"prompt_n": "many", "prompt_ms": 1.0, "predicted_n": 1, "predicted_ms": 1.0}}
    with pytest.raises(MalformedResponse, match=r"\(timings\.prompt_n: "):
        responses.parse(responses.Completion, body, path="/completion", url="http://h:1")


def test_candidates_are_named_whichever_shape_came():
    from bytesup.llama.responses import TokenProbabilities

    # logprob -0.5 → e^-0.5 = 0.6065306597
    logs = TokenProbabilities.model_validate({"id": 1, "token": "a", "logprob": -0.5, "bytes": [97],
                                              "top_logprobs": [{"id": 7, "token": " b", "logprob": -0.5, "bytes": [32, 98]}]})
    (c,) = logs.candidates()
    assert (c.id, c.token, c.bytes) == (7, " b", [32, 98]) and abs(c.probability - 0.6065306597) < 1e-9
    probs = TokenProbabilities.model_validate({"id": 1, "token": "a", "prob": 0.25, "bytes": [97],
                                               "top_probs": [{"id": 9, "token": "c", "prob": 0.125, "bytes": [99]}]})
    assert probs.candidates()[0].probability == 0.125 and probs.candidates()[0].id == 9


@pytest.mark.parametrize("name,listed,field,value", [
    ("completion_logprobs", "top_logprobs", "logprob", -1e308),
    ("completion_logprobs", "top_logprobs", "logprob", -23.0),   # e^-23 < 2^-32
    ("completion_post_sampling", "top_probs", "prob", 1e-300),
])
def test_a_position_whose_every_candidate_is_next_to_impossible_is_refused(name, listed, field, value):
    from bytesup.errors import ImplausibleValue

    body = load_fixture(name)["response"]
    for c in body["completion_probabilities"][0][listed]:
        c[field] = value
    with pytest.raises(ImplausibleValue) as exc:
        responses.parse(responses.Completion, body, path="/completion")
    assert "completion_probabilities.0" in str(exc.value) and "2^-32" in str(exc.value)


def test_a_position_whose_best_candidate_is_at_the_bound_is_kept():
    body = load_fixture("completion_logprobs")["response"]
    for c in body["completion_probabilities"][0]["top_logprobs"]:
        c["logprob"] = -22.0   # e^-22 = 2.8e-10 > 2^-32 = 2.3e-10
    position = responses.parse(responses.Completion, body, path="/completion").completion_probabilities[0]
    assert sum(c.probability for c in position.candidates()) == pytest.approx(8 * math.exp(-22.0))


@pytest.mark.parametrize("change,speed", [
    ({"prompt_ms": 5e-324, "prompt_n": 7}, "prefill"),
    ({"predicted_ms": 5e-324, "predicted_n": 16}, "decode"),
])
def test_a_time_that_makes_a_speed_infinite_is_refused_when_read(change, speed):
    from bytesup.errors import ImplausibleValue

    body = load_fixture("completion_decode")["response"]
    body["timings"].update(change)
    with pytest.raises(ImplausibleValue, match=f"makes the {speed} speed infinite"):
        responses.parse(responses.Completion, body, path="/completion")


@pytest.mark.parametrize("name,listed,change,why", [
    ("completion_logprobs", "top_logprobs", lambda cs: [c.update(logprob=math.log(0.6)) for c in cs[:2]], "add up to"),
    ("completion_post_sampling", "top_probs", lambda cs: [c.update(prob=0.9) for c in cs], "add up to"),
    ("completion_logprobs", "top_logprobs", lambda cs: cs[2].update(id=cs[0]["id"]), "lists a token more than once"),
    ("completion_post_sampling", "top_probs", lambda cs: cs[1].update(id=cs[0]["id"]), "lists a token more than once"),
    ("completion_post_sampling", "top_probs", lambda cs: [c.update(prob=1e-12) for c in cs], "below 2^-32"),
])
def test_candidates_no_distribution_gives_are_refused(name, listed, change, why):
    """Two candidates at 0.6 each (or five at 0.9) add up to more than 1; a token listed twice is no list of a softmax."""
    from bytesup.errors import ImplausibleValue

    body = load_fixture(name)["response"]
    change(body["completion_probabilities"][0][listed])
    with pytest.raises(ImplausibleValue) as exc:
        responses.parse(responses.Completion, body, path="/completion")
    assert "completion_probabilities.0, which no llama.cpp server sends (" in str(exc.value) and why in str(exc.value)


@pytest.mark.parametrize("where", ["completion_probabilities__0__id", "completion_probabilities__0__top_logprobs__3__id",
                                   "tokens_evaluated"])
def test_a_negative_token_id_or_count_is_refused(where):
    from bytesup.errors import ImplausibleValue

    body = load_fixture("completion_logprobs")["response"]
    node, keys = body, where.split("__")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    node[keys[-1]] = -3
    with pytest.raises(ImplausibleValue, match="below the smallest possible value"):
        responses.parse(responses.Completion, body, path="/completion")


@pytest.mark.parametrize("value", [256, -1])
def test_a_byte_past_255_in_a_token_is_refused_not_a_crash_where_it_is_shown(value):
    from bytesup.errors import ImplausibleValue

    body = load_fixture("completion_logprobs")["response"]
    body["completion_probabilities"][0]["top_logprobs"][0]["bytes"] = [104, value]
    with pytest.raises(ImplausibleValue, match=r"top_logprobs\.0\.bytes\.1 = "):
        responses.parse(responses.Completion, body, path="/completion")
    pieces = {"tokens": [{"id": 5, "piece": [value]}]}
    with pytest.raises(ImplausibleValue, match="possible value"):
        responses.parse(responses.Tokenized, pieces, path="/tokenize")


@pytest.mark.parametrize("n_probs", [0, 8, 64])
def test_the_default_models_answers_of_32_tokens_read_as_asked(n_probs):
    """tests/fixtures/answers: the bytes the embedded server wrote for the harness's request (the default model, 32
    tokens, greedy), read as the client reads them: 32 positions of n_probs candidates each where it asked for some."""
    import json
    from pathlib import Path

    from bytesup.llama.recording import answer_json

    folder = Path(__file__).parent / "fixtures" / "answers"
    asked = json.loads((folder / f"harness_np{n_probs}.request.json").read_text())
    answer = responses.parse(responses.Completion, answer_json((folder / f"harness_np{n_probs}.json").read_bytes()),
                             path="/completion")
    responses.check_asked(answer, asked, path="/completion")
    assert answer.timings.predicted_n == 32 and answer.content.startswith(" with the invention of the printing press")
    assert len(answer.completion_probabilities) == (32 if n_probs else 0)
    assert {len(p.top_logprobs or []) for p in answer.completion_probabilities} <= {n_probs}
    if n_probs:
        first = answer.first_position().candidates()
        assert first[0] == (351, " with", [32, 119, 105, 116, 104], math.exp(-0.27088218927383423))
        assert first[1][:2] == (281, " in") and first[1].probability == pytest.approx(0.18695, abs=1e-5)  # e^-1.6 × e^-0.0769
