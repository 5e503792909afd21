"""The client's errors, with pytest-httpx standing in for a misbehaving server."""

from __future__ import annotations

import json

import httpx
import pytest

from bytesup.llama.client import LlamaServer
from bytesup.errors import (
    ImplausibleValue,
    MalformedResponse,
    MissingField,
    ServerHTTPError,
    ServerTimeout,
    ServerUnreachable,
    StreamError,
)

from conftest import load_fixture

URL = "http://127.0.0.1:8099"


def test_unreachable_server_names_url_and_start_script(httpx_mock):
    httpx_mock.add_exception(httpx.ConnectError("refused"))
    with pytest.raises(ServerUnreachable) as exc:
        LlamaServer(URL).health()
    assert URL in str(exc.value) and "scripts/start_server.sh" in str(exc.value)


def test_timeout(httpx_mock):
    httpx_mock.add_exception(httpx.ReadTimeout("slow"))
    with pytest.raises(ServerTimeout) as exc:
        LlamaServer(URL, timeout=3).completion("x", n_predict=1)
    assert "/completion" in str(exc.value) and "3 s" in str(exc.value)


def test_http_error_shows_status_and_body(httpx_mock):
    httpx_mock.add_response(status_code=500, json={"error": {"message": "slot busy"}})
    with pytest.raises(ServerHTTPError) as exc:
        LlamaServer(URL).completion("x", n_predict=1)
    assert exc.value.status == 500 and "slot busy" in str(exc.value)


def test_missing_api_key_hint(httpx_mock):
    httpx_mock.add_response(status_code=401, json={"error": {"message": "Invalid API Key"}})
    with pytest.raises(ServerHTTPError, match="API key"):
        LlamaServer(URL).props()


def test_api_key_sent_as_bearer(httpx_mock):
    httpx_mock.add_response(json={"status": "ok"}, match_headers={"Authorization": "Bearer s3cret"})
    assert LlamaServer(URL, api_key="s3cret").health().status == "ok"


def test_not_json(httpx_mock):
    httpx_mock.add_response(text="<html>proxy error</html>")
    with pytest.raises(MalformedResponse, match="not JSON"):
        LlamaServer(URL).health()


def test_wrong_shape(httpx_mock):
    httpx_mock.add_response(json={"status": ["not", "a", "string"]})
    with pytest.raises(MalformedResponse):
        LlamaServer(URL).health()


def test_missing_field_is_named(httpx_mock):
    # A recorded completion with its timings removed: the lessons need them.
    body = dict(load_fixture("completion_decode")["response"])
    del body["timings"]
    httpx_mock.add_response(json=body)
    with pytest.raises(MissingField) as exc:
        LlamaServer(URL).completion("x", n_predict=1)
    assert exc.value.field == "timings"


def test_base_url_from_environment(monkeypatch, httpx_mock):
    monkeypatch.setenv("BYTESUP_SERVER", "http://127.0.0.1:9123")
    httpx_mock.add_response(url="http://127.0.0.1:9123/health", json={"status": "ok"})
    assert LlamaServer().health().status == "ok"


# --- an answer holds what was asked, and nothing twice ------------------------------------------------------------

def logprobs_answer(**timings) -> dict:
    body = json.loads(json.dumps(load_fixture("completion_logprobs")["response"]))
    body["timings"].update(timings)
    return body


def test_no_generated_token_for_a_request_that_asked_for_some_is_refused_on_arrival(httpx_mock):
    body = dict(load_fixture("completion_decode")["response"])
    body["timings"] = {**body["timings"], "predicted_n": 0}
    httpx_mock.add_response(json=body)
    with pytest.raises(ImplausibleValue) as exc:
        LlamaServer(URL).completion("x", n_predict=16)
    assert "/completion" in str(exc.value) and "timings.predicted_n = 0" in str(exc.value)


def test_more_positions_than_generated_tokens_are_refused(httpx_mock):
    body = logprobs_answer()
    body["completion_probabilities"] = body["completion_probabilities"] * 1_000
    httpx_mock.add_response(json=body)
    with pytest.raises(ImplausibleValue, match="number of completion_probabilities = 1000"):
        LlamaServer(URL).completion("x", n_predict=1, n_probs=8)


def test_fewer_positions_than_generated_tokens_are_refused_where_candidates_were_asked(httpx_mock):
    body = logprobs_answer(predicted_n=2, predicted_ms=5.0)
    httpx_mock.add_response(json=body)
    with pytest.raises(ImplausibleValue, match="predicted_n is 2"):
        LlamaServer(URL).completion("x", n_predict=2, n_probs=8)


@pytest.mark.parametrize("keep,n_probs", [(0, 8), (8, 7), (8, 1)])
def test_a_position_lists_between_one_and_n_probs_candidates(httpx_mock, keep, n_probs):
    body = logprobs_answer()
    position = body["completion_probabilities"][0]
    position["top_logprobs"] = position["top_logprobs"][:keep]
    httpx_mock.add_response(json=body)
    with pytest.raises(ImplausibleValue) as exc:
        LlamaServer(URL).completion("x", n_predict=1, n_probs=n_probs)
    assert f"completion_probabilities.0.top_logprobs = {keep}" in str(exc.value)
    assert f"1 to {n_probs} candidates" in str(exc.value)


def test_an_answer_that_holds_what_was_asked_passes(httpx_mock):
    httpx_mock.add_response(json=logprobs_answer())
    answer = LlamaServer(URL).completion("x", n_predict=1, n_probs=8)
    assert len(answer.completion_probabilities[0].top_logprobs) == 8


@pytest.mark.parametrize("text", [
    '{"content": "a", "content": "b", "timings": {}}',
    '{"status": "ok", "inner": {"logprob": -1.0, "logprob": -2.0}}',
])
def test_an_answer_that_repeats_a_key_is_malformed_and_recorded_as_it_came(text):
    from bytesup.llama.recording import RecordingTransport, ReplayTransport

    inner = httpx.MockTransport(lambda request: httpx.Response(200, content=text.encode(),
                                                               headers={"content-type": "application/json"}))
    sink: list = []
    with pytest.raises(MalformedResponse, match="appears twice in one JSON object"):
        LlamaServer(URL, transport=RecordingTransport(sink, inner=inner)).health()
    assert sink[0]["response_text"] == text and "response" not in sink[0]  # the evidence, both copies
    with pytest.raises(MalformedResponse, match="appears twice"):
        LlamaServer(URL, transport=ReplayTransport(sink)).health()


def test_a_streamed_event_that_repeats_a_key_is_refused():
    event = b'data: {"content": "a", "content": "b", "stop": false}\n\n'
    inner = httpx.MockTransport(lambda request: httpx.Response(200, stream=httpx.ByteStream(event),
                                                               headers={"content-type": "text/event-stream"}))
    with pytest.raises(StreamError, match="appears twice"):
        LlamaServer(URL, transport=inner).completion_stream("x", n_predict=1)


# --- an answer cut short is not a missing server --------------------------------------------------------------------

@pytest.mark.parametrize("head,body", [
    (b"Content-Length: 1000\r\n", b'{"status": "o'),                              # fewer bytes than announced
    (b"Transfer-Encoding: chunked\r\n", b"d\r\n{\"status\": \"o\r\n"),             # no last chunk
], ids=["content-length", "chunked"])
def test_an_answer_cut_short_says_so_and_is_not_recorded(head, body):
    from faultkit import RawServer

    from bytesup.errors import AnswerCutShort
    from bytesup.llama.recording import RecordingTransport

    def cut(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + head + b"\r\n" + body)
        wfile.flush()

    for recording in (False, True):
        sink: list = []
        with RawServer(cut) as server:
            client = LlamaServer(server.url, timeout=5, transport=RecordingTransport(sink) if recording else None)
            with pytest.raises(AnswerCutShort) as exc:
                client.health()
        text = str(exc.value)
        assert "answered /health, but its answer was cut short" in text and "No llama.cpp server answers" not in text
        assert "after 13 bytes of the body" in text and sink == []


def test_a_cut_answer_means_a_server_answers_there():
    from faultkit import RawServer

    from bytesup.options import RunOptions
    from bytesup.run.server import answers

    def cut(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}")

    with RawServer(cut) as server:
        assert answers(server.url, RunOptions(timeout=5.0)) is True   # never taken for "no server": no server is started in its place


def test_a_connection_closed_without_any_answer_says_so():
    from faultkit import RawServer

    with RawServer(lambda wfile: None) as server:
        with pytest.raises(ServerUnreachable, match="took the connection and closed it without an answer"):
            LlamaServer(server.url, timeout=5).health()


def test_more_positions_than_n_predict_are_refused_whatever_predicted_n_says(httpx_mock):
    body = logprobs_answer(predicted_n=1_000, predicted_ms=5_000.0)
    body["completion_probabilities"] = body["completion_probabilities"] * 1_000   # as many positions: still not asked
    httpx_mock.add_response(json=body)
    with pytest.raises(ImplausibleValue, match=r"completion_probabilities = 1000, .*and n_predict asked for 1;"):
        LlamaServer(URL).completion("x", n_predict=1, n_probs=8)
