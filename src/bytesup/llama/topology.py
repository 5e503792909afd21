"""Where a server's weights live: one process, or split across llama.cpp RPC servers.

A llama-server started with `--rpc host:port,…` treats each rpc-server as one more device (RPC0,
RPC1, …) and spreads the model's layers over them. What was placed where is printed in its log
while the model loads, for example

    load_tensors: offloaded 31/31 layers to GPU
    load_tensors:   CPU_Mapped model buffer size =    27.00 MiB
    load_tensors: RPC0[127.0.0.1:50061] model buffer size =    36.03 MiB

(the word GPU covers every offload device). `from_log` reads those lines into a topology record,
which the run manifest and lesson 9 keep; `describe` and `differs` are what `bytesup compare`
uses to tell two setups apart. Pure functions on text and dicts: no processes, no HTTP.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bytesup.units import MiB


_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers")
_BUFFER = re.compile(r"(?P<device>[A-Za-z][\w-]*(?:\[(?P<endpoint>[^\]]+)\])?) (?P<kind>model|KV) buffer size\s*=\s*"
                     r"(?P<mib>[\d.]+) MiB")


def endpoints(rpc_flag: str | None) -> list[str]:
    """The `--rpc` value as a list of host:port endpoints, in the order given."""
    return [e.strip() for e in (rpc_flag or "").split(",") if e.strip()]


def from_log(text: str, rpc_flag: str | None = None) -> dict[str, Any]:
    """A topology record from a llama-server log: the RPC endpoints given, the layers offloaded,
    and per device (in the order the log names them) the bytes of weights and of KV cache it holds.
    Buffer sizes are printed in MiB with two decimals, so bytes are exact to about 5 kB."""
    devices: dict[str, dict[str, Any]] = {}
    offloaded = total = None
    for line in text.splitlines():
        m = _OFFLOADED.search(line)
        if m:
            offloaded, total = int(m.group(1)), int(m.group(2))
            continue
        m = _BUFFER.search(line)
        if m:
            name = m.group("device")
            short = name.split("[", 1)[0]
            entry = devices.setdefault(name, {"device": short, "endpoint": m.group("endpoint"), "model_bytes": 0, "kv_bytes": 0})
            key = "model_bytes" if m.group("kind") == "model" else "kv_bytes"
            entry[key] += round(float(m.group("mib")) * MiB)
    rpc = endpoints(rpc_flag)
    return {"rpc": rpc, "nodes": max(1, len(rpc)), "layers_offloaded": offloaded, "layers_total": total,
            "devices": list(devices.values()), "source": "server log"}


def from_log_file(path: Path, rpc_flag: str | None = None) -> dict[str, Any]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        text = ""
    return from_log(text, rpc_flag)


def rpc_devices(topology: dict[str, Any]) -> list[dict[str, Any]]:
    """The devices that are rpc-servers (an endpoint in the log's name), in order."""
    return [d for d in topology.get("devices") or [] if d.get("endpoint")]


def describe(topology: dict[str, Any] | None) -> str:
    """One line for a comparison: 'one process' or the RPC nodes' hosts with their share of the weights
    (ports are left out: two runs on loopback rpc-servers at other free ports are the same setup)."""
    if not topology or not topology.get("rpc"):
        return "one process"
    by_endpoint = {d["endpoint"]: d for d in rpc_devices(topology)}
    parts = []
    for e in topology["rpc"]:
        d = by_endpoint.get(e)
        host = e.rsplit(":", 1)[0]
        parts.append(f"{host} ({d['model_bytes'] / MiB:.1f} MiB)" if d else host)
    layers = (f", {topology['layers_offloaded']}/{topology['layers_total']} layers offloaded"
              if topology.get("layers_total") else "")
    return f"{len(topology['rpc'])} RPC nodes: " + ", ".join(parts) + layers


def differs(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """'' when two servers had the same topology (one process each, or the same endpoints holding the
    same weights), else a phrase naming both: a difference of setup, never a regression."""
    da, db = describe(a), describe(b)
    return "" if da == db else f"different topology: {da} vs {db}"
