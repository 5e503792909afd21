"""Real llama.cpp in CI: the embedded engine started through scripts/start_server.sh on the tiny model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from bytesup.llama.process import free_port
from bytesup.models.catalog import SYNTHETIC_DEFAULT, ensure_model

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "BYTESUP_PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", str(ROOT / "scripts" / name), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_model(SYNTHETIC_DEFAULT)  # plumbing only: the fast synthetic model


def ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_start_answer_and_stop(tiny_model, tmp_path):
    port = str(free_port())
    started = script("start_server.sh", str(tiny_model), "--port", port)
    assert started.returncode == 0, started.stderr + started.stdout
    state = Path(os.environ["BYTESUP_STATE"]) / f"server-{port}"
    pid = int((state / "pid").read_text().split()[0])
    try:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
        done = httpx.post(f"{url}/completion", json={"prompt": "The capital of France is", "n_predict": 1, "n_probs": 8,
                                                     "temperature": 0, "seed": 42, "cache_prompt": False}, timeout=60).json()
        top = done["completion_probabilities"][0]["top_logprobs"]
        assert len(top) == 8 and all(c["logprob"] <= 0 for c in top)
        text = "def fibonacci(n):\n    if n == 0:"
        ids = [t["id"] for t in httpx.post(f"{url}/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]]
        assert httpx.post(f"{url}/detokenize", json={"tokens": ids}).json()["content"] == text
        info = json.loads((state / "engine.json").read_text())
        assert info["engine"] in ("embedded", "llama-server") and info["build"] and info["flags"]["--metrics"] is None
        assert info["flags"]["--host"] == "127.0.0.1"
        # The port is now taken: a second start refuses, and names the port.
        again = script("start_server.sh", str(tiny_model), "--port", port)
        assert again.returncode != 0 and port in again.stderr
    finally:
        stopped = script("stop_server.sh", "--port", port)
    assert stopped.returncode == 0
    # Ended: gone, or a zombie whose exit the system has not read yet (the script left the server to it).
    deadline = time.monotonic() + 5
    while not ended(pid):
        assert time.monotonic() < deadline, f"the server (pid {pid}) still runs after stop_server.sh"
        time.sleep(0.05)


def test_port_taken_by_another_program(tiny_model):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        res = script("start_server.sh", str(tiny_model), "--port", port)
    assert res.returncode != 0
    assert f"Port {port}" in res.stderr and "already in use" in res.stderr


def test_missing_model(tmp_path):
    res = script("start_server.sh", str(tmp_path / "nope.gguf"), "--port", str(free_port()))
    assert res.returncode != 0 and "nope.gguf" in res.stderr


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("just some text, not a model\n")
    res = script("start_server.sh", str(bad), "--port", str(free_port()))
    assert res.returncode != 0 and "not a GGUF" in res.stderr
