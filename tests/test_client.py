"""The client's errors, with pytest-httpx standing in for a misbehaving server."""

from __future__ import annotations

import httpx
import pytest

from bytesup.llama.client import LlamaServer
from bytesup.errors import MalformedResponse, MissingField, ServerHTTPError, ServerTimeout, ServerUnreachable

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
