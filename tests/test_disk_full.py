"""A full disk (bytesup.run.runner, bytesup.run.folder): the run stops, says how to resume, and keeps what it
saved."""

from __future__ import annotations

import errno

import pytest

from bytesup import files
from bytesup.cli.app import app
from bytesup.options import RunOptions
from bytesup.run import folder, runner
from bytesup.run.folder import DiskFull
from bytesup.run.runner import run_lessons

from faultkit import cli, manifest_of
from test_runner import lessons, serve, URL  # noqa: F401 (lessons is a fixture)


def _disk_full_for(monkeypatch, match: str) -> None:
    # The lessons' files are written by folder (save_lesson, keep_failed), the manifest by the runner.
    real = files.write_jsonl_atomic, files.write_json_atomic

    def full(path, data, _real):
        if match in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return _real(path, data)

    for module in (runner, folder):
        if hasattr(module, "write_jsonl_atomic"):
            monkeypatch.setattr(module, "write_jsonl_atomic", lambda p, d: full(p, d, real[0]))
        monkeypatch.setattr(module, "write_json_atomic", lambda p, d: full(p, d, real[1]))


def test_a_full_disk_stops_the_run_and_says_how_to_resume(lessons, tmp_path, httpx_mock, monkeypatch):
    serve(httpx_mock)
    out = tmp_path / "run"
    _disk_full_for(monkeypatch, "01_tokens.jsonl")
    with pytest.raises(DiskFull) as stopped:
        run_lessons(["01_tokens", "02_decode"], RunOptions(server_url=URL, out=out, command=["bytesup", "run-all", "--server", URL]))
    assert "No space left" in str(stopped.value) and f"--server {URL} --out {out.resolve()} --resume" in str(stopped.value)
    state = manifest_of(out)["lessons"]
    assert state["01_tokens"]["status"] == "failed" and state["02_decode"]["status"] == "pending"  # not attempted
    assert not any("/completion" in str(r.url) for r in httpx_mock.get_requests())


def test_a_full_disk_while_saving_the_manifest_is_a_message(lessons, tmp_path, httpx_mock, monkeypatch):
    serve(httpx_mock)
    _disk_full_for(monkeypatch, "manifest.json")
    res = cli.invoke(app, ["run", "01_tokens", "--server", URL, "--out", str(tmp_path / "run")])
    assert res.exit_code == 1 and "No space left" in res.output and isinstance(res.exception, SystemExit)
