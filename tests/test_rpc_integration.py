"""Lesson 9 live: the default model whole, then split across two rpc-servers on loopback, on the cached native
build (scripts/build_llama_server.sh; `make test` builds it once per machine). Skipped when the build is absent.
One repeat per setup: about a minute on 2 cores."""

from __future__ import annotations

import json

import psutil
import pytest

from bytesup.llama import process
from bytesup.models import catalog
from bytesup.llama import build
from bytesup.llama import rpc
from bytesup.llama import topology
from bytesup.run.runner import RunOptions, run_lessons

LESSON_ID = "09_beyond_one_machine"

pytestmark = pytest.mark.skipif(
    rpc.native_bin_dir() is None,
    reason="the native llama.cpp build with RPC is absent: run `bash scripts/build_llama_server.sh` (make test does)")


def test_lesson_9_live_on_loopback_rpc_servers(tmp_path, monkeypatch):
    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    model = catalog.ensure_model(catalog.DEFAULT_MODEL)
    port = process.free_port()
    # The run's own server: the lesson only probes it; its two setups are servers of its own.
    started = process.start_server(model, ["--port", str(port), "-t", "2"], die_with_parent=True)
    try:
        out = tmp_path / "run"
        code = run_lessons([LESSON_ID], RunOptions(server_url=started.url, out=out, repeat=1, command=["test"]))
    finally:
        process.stop_server(port)
    manifest = json.loads((out / "manifest.json").read_text())
    assert code == 0, manifest["lessons"][LESSON_ID]
    result = json.loads((out / f"{LESSON_ID}.json").read_text())
    facts = result["facts"]

    # The manifest shows the split: two rpc-servers on loopback, every layer offloaded, each holding weights.
    split = manifest["topologies"][f"{LESSON_ID}/split"]
    nodes = topology.rpc_devices(split)
    assert [d["endpoint"].split(":")[0] for d in nodes] == ["127.0.0.1", "127.0.0.1"]
    assert split["layers_offloaded"] == split["layers_total"] > 0
    assert all(d["model_bytes"] > 1_000_000 for d in nodes) and facts["weights_bytes_per_node"] == [d["model_bytes"] for d in nodes]
    assert manifest["topologies"][f"{LESSON_ID}/whole"]["rpc"] == []

    # Tables compare one node with two, with real speeds.
    setups = {t["name"]: t for t in result["tables"]}["setups"]["rows"]
    assert [r[0] for r in setups] == ["whole", "split"] and [r[1] for r in setups] == [1, 2]
    assert facts["decode_tokens_per_s"]["whole"] > 0 and facts["decode_tokens_per_s"]["split"] > 0
    assert facts["network_bytes_per_token"] == 576 * 4 * 3 + 49152 * 4

    # Nothing is left running: the rpc-servers were stopped with the split server.
    for endpoint in result["host_values"]["rpc_endpoints"]:
        listening = [c for c in psutil.net_connections(kind="tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == int(endpoint.rsplit(":", 1)[1])]
        assert listening == [], endpoint


def test_start_server_script_splits_records_and_stops_its_rpc_servers(monkeypatch):
    """scripts/start_server.sh MODEL --rpc …: the native build drives two rpc-servers started with
    `bytesup server start-rpc`; engine.json records the split; scripts/stop_server.sh stops all three."""
    import subprocess
    from pathlib import Path

    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    root = Path(__file__).resolve().parents[1]
    model = catalog.ensure_model(catalog.DEFAULT_MODEL)
    nodes = [rpc.start_rpc_server(process.free_port(), 1) for _ in range(2)]
    port = process.free_port()
    endpoints = ",".join(n.endpoint for n in nodes)
    try:
        res = subprocess.run(["bash", str(root / "scripts" / "start_server.sh"), str(model), "--port", str(port), "-c", "256",
                              "--rpc", endpoints], capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stderr
        info = json.loads((process.state_dir_for(port) / "engine.json").read_text())
        assert info["engine"] == "llama-server" and info["command"] == str(rpc.native_program("llama-server"))
        assert info["flags"]["--rpc"] == endpoints
        split = info["topology"]
        # (the log lists the nodes' buffers in its own order, not always --rpc's)
        assert sorted(d["endpoint"] for d in topology.rpc_devices(split)) == sorted(n.endpoint for n in nodes)
        assert split["layers_offloaded"] == split["layers_total"] == 31
        res = subprocess.run(["bash", str(root / "scripts" / "stop_server.sh"), "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0 and res.stdout.count("stopped the rpc-server") == 2, res.stdout
        assert [rpc.owned_rpc_pid(n.port)[0] for n in nodes] == [None, None]
        assert not any(psutil.pid_exists(n.pid) and psutil.Process(n.pid).status() != psutil.STATUS_ZOMBIE for n in nodes)
    finally:
        process.stop_server(port)
        for n in nodes:
            rpc.stop_rpc_server(n.port)


def test_the_real_build_passed_its_smoke_test_on_this_cpu_and_passes_it_again():
    record, bin_dir, why = build.usable_build()
    assert record is not None and bin_dir is not None, why
    here = build.this_cpu().key
    assert record["smoke"][here]["ok"] is True and record["variant"] in build.VARIANTS
    again = build.smoke_test(bin_dir)
    assert again["ok"] is True, again["detail"]
    assert again["detail"].startswith(f"{catalog.SYNTHETIC_DEFAULT}.gguf: ") and again["cpu_key"] == here


def test_start_server_script_serves_on_the_native_build_and_names_its_variant(monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.delenv("BYTESUP_ENGINE", raising=False)
    root = Path(__file__).resolve().parents[1]
    model = catalog.ensure_model(catalog.SYNTHETIC_DEFAULT)
    port = process.free_port()
    env = {**__import__("os").environ, "BYTESUP_PYTHON": sys.executable}
    try:
        res = subprocess.run(["bash", str(root / "scripts" / "start_server.sh"), str(model), "--port", str(port)],
                             capture_output=True, text=True, timeout=180, env=env)
        assert res.returncode == 0, res.stderr
        assert "engine: the cached native build (" in res.stdout
        info = json.loads((process.state_dir_for(port) / "engine.json").read_text())
        assert info["engine"] == "llama-server" and info["choice"]["source"] == "native build"
        native_build = info["choice"]["native_build"]
        assert native_build["variant"] == process.build_variant(info) in build.VARIANTS
        assert native_build["smoke_here"]["ok"] is True and native_build["built_on"]["cpu_key"]
    finally:
        process.stop_server(port)
