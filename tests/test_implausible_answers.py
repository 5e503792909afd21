"""Server answers no llama.cpp server sends (bytesup.llama.responses): a field missing, a number impossible, any
JSON at all: a record, or one paragraph naming the field and the server's build."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from bytesup.errors import BytesupError
from bytesup.options import RunOptions
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from faultkit import assert_one_paragraph, completion_with, json_values, manifest_of
from test_runner import lessons, URL  # noqa: F401 (lessons is a fixture)


def test_a_missing_field_names_the_real_server_build(lessons, tmp_path, httpx_mock):
    props = dict(load_fixture("props")["response"], build_info="b4321-abcdef")
    httpx_mock.add_response(url=URL + "/health", json={"status": "ok"}, is_reusable=True)
    httpx_mock.add_response(url=URL + "/props", json=props, is_reusable=True)
    httpx_mock.add_response(url=URL + "/v1/models", json=load_fixture("v1_models")["response"], is_reusable=True)
    broken = {k: v for k, v in load_fixture("completion_decode")["response"].items() if k != "timings"}
    httpx_mock.add_response(url=URL + "/completion", json=broken)
    out = tmp_path / "run"
    assert run_lessons(["02_decode"], RunOptions(server_url=URL, out=out)) == 1
    error = manifest_of(out)["lessons"]["02_decode"]["error"]
    assert "`timings`" in error and "server build: b4321-abcdef" in error


@pytest.mark.parametrize("change,field", [
    ({"completion_probabilities__0__top_logprobs__0__logprob": float("nan")}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": 5.0}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": float("-inf")}, "logprob"),
    ({"completion_probabilities__0__top_logprobs__0__logprob": -1e308}, None),  # finite and ≤ 0: a real (tiny) probability
    ({"timings__prompt_ms": -5.0}, "prompt_ms"),
    ({"timings__predicted_n": -1}, "predicted_n"),
    ({"timings__predicted_ms": 0.0, "timings__predicted_n": 5}, "timings"),
])
def test_numbers_no_server_sends_are_named_with_the_build(change, field):
    from bytesup.llama import responses
    from bytesup.errors import ImplausibleValue

    body = completion_with(**change)
    if field is None:
        responses.parse(responses.Completion, body, path="/completion")
        return
    with pytest.raises(ImplausibleValue) as err:
        responses.parse(responses.Completion, body, path="/completion", build="b4321-test")
    text = str(err.value)
    assert "/completion" in text and field in text and "b4321-test" in text and "no llama.cpp server sends" in text


def test_a_probability_past_one_is_named():
    from bytesup.llama import responses
    from bytesup.errors import ImplausibleValue

    body = json.loads(json.dumps(load_fixture("completion_post_sampling")["response"]))
    body["completion_probabilities"][0]["top_probs"][0]["prob"] = 7.5
    with pytest.raises(ImplausibleValue, match="prob = 7.5"):
        responses.parse(responses.Completion, body, path="/completion")


@settings(max_examples=80, deadline=None)
@given(data=json_values)
def test_any_json_as_a_server_answer_is_a_record_or_one_paragraph(data):
    from bytesup.llama import responses

    for model, path in ((responses.Completion, "/completion"), (responses.Props, "/props"), (responses.Tokenized, "/tokenize"),
                        (responses.Timings, "/completion")):
        try:
            responses.parse(model, data, path=path)
        except Exception as exc:  # noqa: BLE001 - a KeyError or a TypeError fails here too
            assert_one_paragraph(exc)


def test_the_promise_can_fail():
    assert_one_paragraph(BytesupError("The file is damaged. Re-run the lesson into a new folder."))
    for bad in (KeyError("x"), BytesupError("The file is damaged."), BytesupError("Line one.\nRe-run it."),
                BytesupError("The file is damaged; re-run the lesson")):
        with pytest.raises(AssertionError):
            assert_one_paragraph(bad)
