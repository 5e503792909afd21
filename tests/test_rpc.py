"""bytesup.llama.rpc: finding the native build, starting and stopping rpc-servers on loopback only, and the
scripts' serve/stop. A stand-in rpc-server (a Python script that listens where it is told) takes the
real one's place, so these run without the native build."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from bytesup.llama import rpc
from bytesup.cli.app import app
from bytesup.llama.process import free_port
from bytesup.errors import BytesupError

FAKE = textwrap.dedent("""\
    import socket, sys, time
    args = sys.argv[1:]
    host, port = args[args.index("-H") + 1], int(args[args.index("-p") + 1])
    print("fake rpc-server", " ".join(args), flush=True)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen()
    while True:
        conn, _ = s.accept()
        conn.close()
""")


@pytest.fixture
def fake_rpc_server(tmp_path, monkeypatch) -> Path:
    script = tmp_path / "fake_rpc.py"
    script.write_text(FAKE)
    program = tmp_path / "rpc-server"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    program.chmod(0o755)
    monkeypatch.setenv("RPC_SERVER", str(program))
    return program


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_refuses_to_bind_anything_but_loopback(fake_rpc_server):
    with pytest.raises(BytesupError, match="no authentication"):
        rpc.start_rpc_server(free_port(), 1, host="0.0.0.0")
    assert not any(rpc.rpc_state_dir(0).parent.glob("rpc-*"))


def test_start_listens_on_loopback_and_stop_ends_it(fake_rpc_server):
    port = free_port()
    server = rpc.start_rpc_server(port, 1)
    try:
        assert server.endpoint == f"127.0.0.1:{port}" and _alive(server.pid)
        assert "-H 127.0.0.1 -p %d -t 1" % port in server.log_path.read_text()
        assert rpc.owned_rpc_pid(port) == (server.pid, None)
        with pytest.raises(BytesupError, match="already runs"):
            rpc.start_rpc_server(port, 1)
        assert len(rpc.connect_seconds(server.endpoint, samples=3)) == 3
    finally:
        assert rpc.stop_rpc_server(port) is True
    assert not _alive(server.pid) and rpc.stop_rpc_server(port) is False


def test_loopback_servers_are_stopped_on_an_error(fake_rpc_server):
    pids = []
    with pytest.raises(RuntimeError), rpc.loopback_rpc_servers([1, 1]) as started:
        pids = [s.pid for s in started]
        assert len({s.port for s in started}) == 2 and all(_alive(p) for p in pids)
        raise RuntimeError("a lesson failed halfway")
    assert pids and not any(_alive(p) for p in pids)


def test_stop_endpoints_touches_only_what_bytesup_started_on_loopback(fake_rpc_server):
    ours = rpc.start_rpc_server(free_port(), None)
    other = free_port()
    stopped = rpc.stop_rpc_endpoints(f"{ours.endpoint},127.0.0.1:{other},10.0.0.9:50052")
    assert stopped == [ours.endpoint] and not _alive(ours.pid)


def test_serve_refuses_rpc_on_the_embedded_engine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BYTESUP_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert rpc.serve(["m.gguf", "--rpc", "127.0.0.1:50052"]) == 3
    assert "needs a native llama-server built with RPC" in capsys.readouterr().err
    assert "LLAMA_SERVER" not in os.environ


def test_cli_start_rpc_and_stop_rpc(fake_rpc_server):
    port = free_port()
    res = CliRunner().invoke(app, ["server", "start-rpc", "--port", str(port), "--threads", "1"])
    assert res.exit_code == 0, res.output
    assert f"127.0.0.1:{port}" in res.output
    pid, _ = rpc.owned_rpc_pid(port)
    assert pid and _alive(pid)
    res = CliRunner().invoke(app, ["server", "stop-rpc", "--port", str(port)])
    assert res.exit_code == 0 and "stopped" in res.output and not _alive(pid)
