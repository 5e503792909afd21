"""Facts about the machine, the code and the packages, for the run manifest."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from datetime import datetime, timezone
from pathlib import Path

from bytesup.paths import REPO_ROOT

PACKAGES = ["bytesup", "numpy", "httpx", "pydantic", "typer", "rich", "gguf", "xllamacpp", "matplotlib"]
# Hashing a multi-GB model on every run costs more than it tells: above this size we digest
# the first 16 MiB (the GGUF header and metadata live there) plus the size, and say so.
FULL_HASH_LIMIT = 1_000_000_000
HEADER_DIGEST_BYTES = 16 * 1024 * 1024


def utc_now() -> str:
    """This host's clock now, in UTC to the second (ISO 8601): every time stamp a run writes."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model() -> str:
    """The CPU's name: /proc/cpuinfo on Linux, `sysctl machdep.cpu.brand_string` on macOS, else what Python's
    platform module tells (Windows names the CPU there; elsewhere it may be only the architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        brand = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if brand:
            return brand
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def available_memory() -> int | None:
    """Bytes of memory available now (psutil); None where it cannot tell (some containers)."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines()] if out else []


def own_addresses() -> set[str]:
    """This host's own IP addresses: a server reached at one of them runs here."""
    try:
        import psutil

        return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
                if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:
        return set()


def accelerators(engine: str | None) -> list[str]:
    """Devices other than the CPU that the server's engine can offload layers to."""
    if engine == "embedded":
        try:
            import xllamacpp

            return [f"{d['name']} ({d['description']})" for d in xllamacpp.get_device_info() if d["name"] != "CPU"]
        except Exception:
            return []
    found = gpus()
    if sys.platform == "darwin" and platform.machine() == "arm64":
        found.append("Apple GPU (Metal)")
    return found


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages; None where the OS keeps none (Windows has no os.getloadavg)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def host_facts() -> dict:
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "gpus": gpus(),
        "python": sys.version.split()[0],
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def repository_state() -> dict:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT)
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def file_digest(path: Path) -> dict:
    """sha256 of the whole file, or of its first 16 MiB plus its size above 1 GB (named in `digest`)."""
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return {"size_bytes": size, "digest": "sha256", "sha256": h.hexdigest()}
        h.update(f.read(HEADER_DIGEST_BYTES))
        h.update(str(size).encode())
        return {"size_bytes": size, "digest": "sha256 of the first 16 MiB + size", "sha256": h.hexdigest()}
