"""The server a run talks to (bytesup.run.server): its probe reports what fails instead of dropping it."""

from __future__ import annotations

import pytest

from bytesup.errors import BytesupError
from bytesup.options import RunOptions
from bytesup.run import server

from conftest import load_fixture

URL = "http://127.0.0.1:8099"


def serve(httpx_mock, models: dict) -> None:
    httpx_mock.add_response(url=URL + "/health", json={"status": "ok"})
    httpx_mock.add_response(url=URL + "/props", json=load_fixture("props")["response"])
    httpx_mock.add_response(url=URL + "/v1/models", **models)


def test_a_server_without_v1_models_is_probed_without_it(httpx_mock):
    serve(httpx_mock, {"status_code": 404, "text": "File Not Found"})
    props, served = server.probe(URL, RunOptions(command=["t"]))
    assert props["build_info"] and served is None


def test_a_server_whose_v1_models_answers_is_probed_with_it(httpx_mock):
    serve(httpx_mock, {"json": load_fixture("v1_models")["response"]})
    _, served = server.probe(URL, RunOptions(command=["t"]))
    assert served is not None and served["data"][0]["id"] == load_fixture("v1_models")["response"]["data"][0]["id"]


@pytest.mark.parametrize(("models", "said"), [
    ({"status_code": 500, "text": "model failed to load"}, "HTTP 500"),
    ({"status_code": 200, "text": "<html>not json</html>"}, "not what a llama.cpp server sends"),
])
def test_a_v1_models_that_fails_otherwise_is_one_paragraph_that_says_what_to_do(httpx_mock, models, said):
    serve(httpx_mock, models)
    with pytest.raises(server.ModelsUnanswered) as caught:
        server.probe(URL, RunOptions(command=["t"]))
    message = str(caught.value)
    assert isinstance(caught.value, BytesupError) and "\n" not in message and said in message
    assert "answered /health and /props, but not /v1/models" in message and "restart it" in message
