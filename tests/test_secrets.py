"""Secrets and the local file system: credentials in a URL or an API key never reach outputs or messages
(bytesup.errors.redact_url, bytesup.options.redact_command), and a path a server reports is read only when it
is a GGUF."""

from __future__ import annotations

import json

from bytesup.errors import BytesupError, redact_url
from bytesup.options import redact_command, RunOptions
from bytesup.run.runner import run_lessons

from conftest import load_fixture
from fakes import FakeServer
from faultkit import lessons_dir, SERVER  # noqa: F401 (lessons_dir is a fixture)


def test_credentials_in_a_url_never_reach_outputs_or_messages(tmp_path, lessons_dir, capsys):
    out = tmp_path / "run"
    with FakeServer(SERVER) as server:
        url = server.url.replace("http://", "http://alice:hunter2pw@")
        command = ["bytesup", "run", "02_quick", "--server", url]
        assert run_lessons(["02_quick"], RunOptions(server_url=url, out=out, command=command)) == 0
    for path in out.rglob("*"):
        if path.is_file():
            assert b"hunter2pw" not in path.read_bytes(), path
    assert "hunter2pw" not in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["engine"]["url"].startswith("http://***@127.0.0.1:")


def test_redaction_by_hand():
    assert redact_url("http://alice:pw@127.0.0.1:8301/x") == "http://***@127.0.0.1:8301/x"
    assert redact_url("see https://u@h and http://h2:1") == "see https://***@h and http://h2:1"
    assert redact_command(["--server", "http://a:b@h:1"]) == ["--server", "http://***@h:1"]
    assert "b@" not in str(BytesupError("No server at http://a:b@h:1"))


def test_a_server_reported_path_that_is_not_a_gguf_is_never_read(tmp_path, lessons_dir, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET: the combination is 1234\n" * 10)
    answers = dict(SERVER)
    answers["/props"] = (200, {**load_fixture("props")["response"], "model_path": str(secret)})
    out = tmp_path / "run"
    with FakeServer(answers) as server:
        assert run_lessons(["02_quick"], RunOptions(server_url=server.url, out=out)) == 0
    said = capsys.readouterr().err
    assert "TOPSECRE" not in said and "no GGUF file here; it was not read" in said and "--model" in said
    manifest = (out / "manifest.json").read_text()
    assert "TOPSECRE" not in manifest and "sha256" not in json.loads(manifest)["model"]
