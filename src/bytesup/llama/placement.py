"""Where the user's server runs, and so whether this host's CPU memory bandwidth bounds its decode.

`decide` is a pure rule over named, recorded inputs (`ServerSetup`): the host in the server's URL,
whether that host is this one, the server's --n-gpu-layers flag and the accelerators this host's
engine can offload to. The inputs are observed once per lesson (`LessonContext.server_facts`) and
the result is recorded as the host value `server_facts`, so a replay decides nothing again.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServerSetup:
    """What the rule is decided from; every field is observed on this host or read from the run's facts."""

    url_host: str  # the host part of the server's URL
    local: bool  # the server runs on this host (a loopback address or one of this host's own)
    n_gpu_layers: str | None  # the server's --n-gpu-layers flag; None when it was not given (llama.cpp then offloads)
    accelerators: list[str] = field(default_factory=list)  # devices the server's engine can offload to here
    model_readable: bool = False  # the served model's file is readable on this host


@dataclass(frozen=True)
class ServerFacts:
    url_host: str
    local: bool
    model_readable: bool
    accelerators: list[str]
    on_accelerator: bool  # the server decodes from an accelerator's memory
    host_bandwidth_applies: bool  # this host's measured CPU memory bandwidth bounds the server's decode
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The recorded form (the host value `server_facts`): these keys, in this order."""
        return {"url_host": self.url_host, "local": self.local, "model_readable": self.model_readable,
                "accelerators": list(self.accelerators), "on_accelerator": self.on_accelerator,
                "host_bandwidth_applies": self.host_bandwidth_applies, "reason": self.reason}


def offloads(n_gpu_layers: str | None) -> bool:
    """llama.cpp offloads layers by default where it can; only --n-gpu-layers 0 keeps every layer on the CPU."""
    return n_gpu_layers is None or str(n_gpu_layers) != "0"


def decide(setup: ServerSetup) -> ServerFacts:
    """This host's bandwidth bounds the server's decode only when the server runs here and decodes
    on the CPU: not when it runs elsewhere, nor when it offloads layers to an accelerator here."""
    on_accelerator = setup.local and offloads(setup.n_gpu_layers) and bool(setup.accelerators)
    if not setup.local:
        reason = f"the server runs on {setup.url_host}, not on this host"
    elif on_accelerator:
        reason = (f"the server offloads layers (--n-gpu-layers {setup.n_gpu_layers or 'default'}) to "
                  f"{setup.accelerators[0]}, whose memory feeds decode")
    else:
        reason = "the server decodes on this host's CPU, from this host's memory"
    return ServerFacts(url_host=setup.url_host, local=setup.local, model_readable=setup.model_readable,
                       accelerators=list(setup.accelerators), on_accelerator=on_accelerator,
                       host_bandwidth_applies=setup.local and not on_accelerator, reason=reason)


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback IP address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
