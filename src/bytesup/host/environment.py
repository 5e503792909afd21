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

from bytesup.errors import BytesupError
from bytesup.paths import REPO_ROOT
from bytesup.units import GB, MiB

PACKAGES = ["bytesup", "numpy", "httpx", "pydantic", "typer", "rich", "gguf", "xllamacpp", "matplotlib"]
# Hashing a multi-GB model on every run costs more than it tells: above this size we digest
# the first 16 MiB (the GGUF header and metadata live there) plus the size, and say so.
FULL_HASH_LIMIT = int(GB)
HEADER_DIGEST_BYTES = 16 * MiB


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


class AcceleratorsUnknown(BytesupError):
    """This host could not say which accelerators a server's engine can offload to: an error, never an empty list."""

    def __init__(self, tool: str, detail: str):
        self.tool, self.detail = tool, detail
        super().__init__(
            f"This host could not tell which accelerators the server's engine can use: {tool} {detail}. Without that, "
            "whether the server decodes from this host's memory or from an accelerator's is unknown, and with it "
            f"whether this host's bandwidth bounds its decode. Repair {tool} (run it by hand to see why it fails), or "
            "start the server with --n-gpu-layers 0 so that it decodes on the CPU.")


def gpus() -> list[str]:
    """The NVIDIA GPUs nvidia-smi lists; [] where there is no nvidia-smi. An nvidia-smi that is there but fails is an
    AcceleratorsUnknown: a GPU that could not be listed is not the absence of one."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AcceleratorsUnknown("nvidia-smi", f"could not be run ({type(exc).__name__}: {exc})") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[:300]
        raise AcceleratorsUnknown("nvidia-smi", f"failed with exit code {done.returncode}" + (f" ({said!r})" if said else ""))
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def own_addresses() -> set[str]:
    """This host's own IP addresses: a server reached at one of them runs here."""
    try:
        import psutil

        return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs
                if a.family in (socket.AF_INET, socket.AF_INET6)}
    except Exception:
        return set()


def accelerators(engine: str | None) -> list[str]:
    """Devices other than the CPU that the server's engine can offload layers to; [] when there is none. A host that
    cannot tell (the embedded engine's device query or nvidia-smi fails) raises AcceleratorsUnknown."""
    if engine == "embedded":
        try:
            import xllamacpp

            return [f"{d['name']} ({d['description']})" for d in xllamacpp.get_device_info() if d["name"] != "CPU"]
        except Exception as exc:  # an import error, a device query that fails, a device record without its keys
            raise AcceleratorsUnknown("the embedded engine (xllamacpp.get_device_info)",
                                      f"failed ({type(exc).__name__}: {exc})") from None
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
    """The host as the manifest records it. GPUs that could not be listed are recorded as unknown (None), with the
    error beside them (`gpus_error`), never as none."""
    facts: dict = {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "gpus": None,
        "python": sys.version.split()[0],
    }
    try:
        facts["gpus"] = gpus()
    except AcceleratorsUnknown as exc:
        facts["gpus_error"] = str(exc)
    return facts


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


# The digests read so far in this process, by file as `stat` knows it: a run hashes the same model file in several
# lessons (its record, then finding it again by sha256), and a file written since has another mtime or ctime.
_digests: dict[tuple[str, int, int, int, int, int], dict] = {}


def file_digest(path: Path) -> dict:
    """sha256 of the whole file, or of its first 16 MiB plus its size above 1 GB (named in `digest`). Read once per
    process for a file whose path, device, inode, size and change times are unchanged."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _digests:
        _digests[key] = _read_digest(path, st.st_size)
    return dict(_digests[key])


def _read_digest(path: Path, size: int) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return {"size_bytes": size, "digest": "sha256", "sha256": h.hexdigest()}
        h.update(f.read(HEADER_DIGEST_BYTES))
        h.update(str(size).encode())
        return {"size_bytes": size, "digest": "sha256 of the first 16 MiB + size", "sha256": h.hexdigest()}
