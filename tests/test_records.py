"""Records parsed from responses recorded from the real embedded server (scripts/record_fixtures.py)."""

from __future__ import annotations

import math


from bytesup import records as r

from conftest import load_fixture


def parsed(model, name):
    return r.parse(model, load_fixture(name)["response"], path=load_fixture(name)["request"]["path"])


def test_completion_with_full_softmax_logprobs():
    done = parsed(r.Completion, "completion_logprobs")
    pos = done.completion_probabilities[0]
    assert pos.top_logprobs is not None and pos.top_probs is None
    assert len(pos.top_logprobs) == 8
    probs = [p for *_, p in pos.candidates()]
    assert probs == sorted(probs, reverse=True)
    assert all(0 < p <= 1 for p in probs) and sum(probs) <= 1 + 1e-9
    assert math.isclose(probs[0], math.exp(pos.top_logprobs[0].logprob))


def test_completion_with_post_sampling_probs():
    done = parsed(r.Completion, "completion_post_sampling")
    pos = done.completion_probabilities[0]
    assert pos.top_probs is not None and pos.top_logprobs is None
    # top_k 5 then temperature: five tokens kept, renormalized to 1.
    assert len(pos.top_probs) == 5
    assert math.isclose(sum(c.prob for c in pos.top_probs), 1.0, rel_tol=1e-4)


def test_byte_list_pieces_are_kept_as_bytes():
    tok = parsed(r.Tokenized, "tokenize_non_ascii")
    byte_pieces = [t for t in tok.tokens if isinstance(t.piece, list)]
    assert byte_pieces, "the recorded text should contain a piece that is not valid UTF-8"
    assert b"".join(t.piece_bytes for t in tok.tokens).decode("utf-8") == load_fixture("tokenize_non_ascii")["request"]["json"]["content"]


def test_tokenize_detokenize_round_trip_recorded():
    tok = parsed(r.Tokenized, "tokenize_paris")
    det = parsed(r.Detokenized, "detokenize")
    assert load_fixture("detokenize")["request"]["json"]["tokens"] == tok.ids
    assert det.content == load_fixture("tokenize_paris")["request"]["json"]["content"]


def test_speeds_follow_one_rule():
    t = parsed(r.Completion, "completion_decode").timings
    assert t.predicted_n == 16
    # First generated token belongs to the prompt phase: predicted_ms spans predicted_n - 1 passes.
    assert r.decode_passes(t) == 15
    assert math.isclose(r.decode_ms_per_token(t), t.predicted_ms / 15)
    assert math.isclose(r.decode_tokens_per_s(t), 15 * 1000 / t.predicted_ms)
    assert math.isclose(r.prefill_tokens_per_s(t), t.prompt_n * 1000 / t.prompt_ms)
    # This build divides the same way: its own per-token figure agrees with ours.
    assert math.isclose(t.predicted_per_token_ms, r.decode_ms_per_token(t), rel_tol=1e-6)


def test_metrics_text_parsed_into_numbers():
    values = r.parse_metrics(load_fixture("metrics")["response_text"])
    assert any(k.startswith("llamacpp:") for k in values)
    assert all(isinstance(v, float) for v in values.values())


def test_props_health_models_slots():
    assert parsed(r.Health, "health").status == "ok"
    props = parsed(r.Props, "props")
    assert props.model_path and props.model_path.endswith(".gguf")
    assert parsed(r.ModelList, "v1_models").data
    assert isinstance(load_fixture("slots")["response"], list)


def test_newer_server_fields_are_kept():
    body = dict(load_fixture("completion_decode")["response"])
    body["a_field_from_the_future"] = 1
    assert r.parse(r.Completion, body, path="/completion").a_field_from_the_future == 1
