"""The CLI in-process (typer's CliRunner): what it printed and what it wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from bytesup.cli import app
from bytesup.engine import free_port
from bytesup.models import SYNTHETIC_DEFAULT, ensure_model, file_sha256

runner = CliRunner()


def test_lessons_lists_every_lesson_with_its_title():
    res = runner.invoke(app, ["lessons"])
    assert res.exit_code == 0
    for lid in ("01_model_on_disk", "04_next_token", "08_capstone_decode_memory_bound"):
        assert lid in res.output
    assert "The forward pass" in res.output


def test_model_build_list_and_build(tmp_path):
    listed = runner.invoke(app, ["model", "build", "--list"])
    assert listed.exit_code == 0 and "smollm2-135m-q4_1 *" in listed.output
    out = tmp_path / "m.gguf"
    built = runner.invoke(app, ["model", "build", SYNTHETIC_DEFAULT, "--out", str(out)])
    assert built.exit_code == 0 and out.is_file()
    assert file_sha256(out) in built.output.replace("\n", "")


def test_model_build_unknown_preset():
    res = runner.invoke(app, ["model", "build", "enormous-q2"])
    assert res.exit_code != 0 and "tiny-q8_0" in res.output


@pytest.mark.integration
def test_server_start_status_stop(tmp_path):
    port = free_port()
    started = runner.invoke(app, ["server", "start", str(ensure_model(SYNTHETIC_DEFAULT)), "--port", str(port), "-t", "2"])
    try:
        assert started.exit_code == 0, started.output
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["status"] == "ok"
        status = runner.invoke(app, ["server", "status", "--port", str(port)])
        info = json.loads(status.output)
        assert info["running"] and info["health"] == "ok" and info["flags"]["--threads"] == "2"
        assert info["answer"]["predicted_n"] == 4
    finally:
        stopped = runner.invoke(app, ["server", "stop", "--port", str(port)])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert not (Path(os.environ["BYTESUP_STATE"]) / f"server-{port}" / "pid").exists()
