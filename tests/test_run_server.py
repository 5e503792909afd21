"""The server a run talks to (bytesup.run.server): its URL checked, --model checked against what it serves, the
probe that reports what fails instead of dropping it, and a server swapped under a run stopping it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bytesup.cli.app import app
from bytesup.errors import BytesupError
from bytesup.options import RunOptions
from bytesup.run import server
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from fakes import FakeServer
from faultkit import cli, flat, lessons_dir  # noqa: F401 (lessons_dir is a fixture)
from test_runner import lessons, serve, URL  # noqa: F401 (lessons is a fixture)


def serve_models(httpx_mock, models: dict) -> None:
    httpx_mock.add_response(url=URL + "/health", json={"status": "ok"})
    httpx_mock.add_response(url=URL + "/props", json=load_fixture("props")["response"])
    httpx_mock.add_response(url=URL + "/v1/models", **models)


def test_a_server_without_v1_models_is_probed_without_it(httpx_mock):
    serve_models(httpx_mock, {"status_code": 404, "text": "File Not Found"})
    props, served = server.probe(URL, RunOptions(command=["t"]))
    assert props["build_info"] and served is None


def test_a_server_whose_v1_models_answers_is_probed_with_it(httpx_mock):
    serve_models(httpx_mock, {"json": load_fixture("v1_models")["response"]})
    _, served = server.probe(URL, RunOptions(command=["t"]))
    assert served is not None and served["data"][0]["id"] == load_fixture("v1_models")["response"]["data"][0]["id"]


@pytest.mark.parametrize(("models", "said"), [
    ({"status_code": 500, "text": "model failed to load"}, "HTTP 500"),
    ({"status_code": 200, "text": "<html>not json</html>"}, "not what a llama.cpp server sends"),
])
def test_a_v1_models_that_fails_otherwise_is_one_paragraph_that_says_what_to_do(httpx_mock, models, said):
    serve_models(httpx_mock, models)
    with pytest.raises(server.ModelsUnanswered) as caught:
        server.probe(URL, RunOptions(command=["t"]))
    message = str(caught.value)
    assert isinstance(caught.value, BytesupError) and "\n" not in message and said in message
    assert "answered /health and /props, but not /v1/models" in message and "restart it" in message


def swapping_server(flag: Path) -> FakeServer:
    """The default model's /props and /v1/models until `flag` exists, then tiny-q8_0's path and size."""
    props = load_fixture("props")["response"]
    models = load_fixture("v1_models")["response"]

    def now_props(_body):
        if flag.exists():
            return 200, {**props, "model_path": "/elsewhere/tiny-q8_0.gguf"}
        return 200, props

    def now_models(_body):
        if flag.exists():
            data = [{**models["data"][0], "meta": {**models["data"][0].get("meta", {}), "size": 123}}]
            return 200, {**models, "data": data}
        return 200, models

    return FakeServer({"/health": (200, {"status": "ok"}), "/props": now_props, "/v1/models": now_models})


def test_the_probe_waits_as_long_as_timeout_says(lessons, tmp_path, httpx_mock):
    httpx_mock.add_exception(httpx.ReadTimeout("slow"), url=URL + "/health")
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(tmp_path / "run"), "--timeout", "7"])
    assert res.exit_code == 1 and "within 7 s" in flat(res.output)


def test_a_server_address_without_a_scheme_gets_a_hint(lessons, tmp_path, httpx_mock):
    res = cli.invoke(app, ["run", "01_tokens", "--server", "127.0.0.1:8099", "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "--server http://127.0.0.1:8099" in flat(res.output)
    assert not httpx_mock.get_requests() and not (tmp_path / "run").exists()


def test_a_model_that_is_not_the_served_one_is_refused(lessons, tmp_path, httpx_mock):
    from gguf import GGMLQuantizationType as QT
    from test_gguf_read import write_model

    serve(httpx_mock)
    other = tmp_path / "other.gguf"
    write_model(other, QT.F16)
    out = tmp_path / "run"
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(other), "--out", str(out)])
    assert res.exit_code == 1 and "is not the model the server serves" in flat(res.output)
    assert "--model-mismatch-ok" in flat(res.output) and not out.exists()
    ok = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--model", str(other), "--out", str(out), "--model-mismatch-ok"])
    assert ok.exit_code == 0, ok.output


def test_own_server_and_server_exclude_each_other(tmp_path, lessons_dir):
    with pytest.raises(BytesupError, match="cannot be combined with --server"):
        run_lessons(["02_quick"], RunOptions(server_url="http://127.0.0.1:9", own_server=True, out=tmp_path / "run"))


def test_a_model_swapped_between_lessons_stops_the_run_naming_both(tmp_path, lessons_dir, monkeypatch):
    flag = tmp_path / "flag"
    monkeypatch.setenv("FLIP", str(flag))
    out = tmp_path / "run"
    with swapping_server(flag) as server:
        code = run_lessons(["02_quick", "03_quick"], RunOptions(server_url=server.url, out=out))
    assert code == 1
    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["lessons"]
    # 02 swapped the server while it ran: its own result is not saved either, and 03 never starts.
    assert entries["02_quick"]["status"] == "failed" and entries["03_quick"]["status"] == "pending"
    error = entries["02_quick"]["error"]
    assert "changed during the run" in error and "/elsewhere/tiny-q8_0.gguf" in error and "model tensor bytes" in error
    assert not (out / "02_quick.json").exists() and manifest["status"] == "incomplete"


def test_a_server_that_stays_the_same_passes_the_check(tmp_path, lessons_dir):
    out = tmp_path / "run"
    with swapping_server(tmp_path / "never") as server:
        assert run_lessons(["02_quick", "03_quick"], RunOptions(server_url=server.url, out=out)) == 0
