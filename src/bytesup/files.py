"""Files written atomically: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bytesup.errors import BytesupError

try:  # flock: Linux, macOS and the BSDs; Windows has none, and a run folder's lock falls back to its holder's pid
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` for the block to write (by name, with any writer); when the block ends
    without an error it is flushed to disk and renamed to ``path``, otherwise removed. A reader of ``path`` sees
    the old file or the whole new one, never a part, also after a crash or Ctrl-C."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        # mkstemp makes the file private (0600); results are meant to be read like any other file.
        if hasattr(os, "fchmod"):  # not on Windows, where mkstemp's file is readable anyway
            os.fchmod(fd, 0o666 & ~_umask())
        os.close(fd)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def dumps(data: Any, where: str = "a JSON file") -> str:
    """JSON text; NaN and infinity are refused (they are not JSON, and no reader agrees on them)."""
    try:
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        raise BytesupError(
            f"{where} was not written: it would hold a value that is not a finite number (NaN or infinity) "
            f"at {_first_non_finite(data) or 'some field'}. It comes from a server's answer or an option: read the "
            "server's answers in the lesson's exchanges (http/<lesson>.failed.jsonl) and check the options that feed it "
            "(for example --bandwidth-gbs must be a positive number), then run the lesson again."
        ) from None


def _first_non_finite(data: Any, at: str = "") -> str | None:
    if isinstance(data, float) and not math.isfinite(data):
        return at or "the top level"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        found = _first_non_finite(value, f"{at}.{key}" if isinstance(key, str) else f"{at}[{key}]")
        if found:
            return found.lstrip(".")
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, dumps(data, where=str(path)))


def write_jsonl_atomic(path: Path, rows: list[Any]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass(frozen=True)
class FileBytes:
    """A file's bytes, named by their sha256, and a path that holds them (the caller has checked it). Two are equal
    when their sha256 is: what is computed from the bytes and kept under this key serves the same bytes found at
    another path (a run recorded in another checkout, a copy of the model)."""

    sha256: str
    path: Path = field(compare=False)


def file_sha256(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- a lock on a file, on every platform -------------------------------------------------------------------------

def has_flock() -> bool:
    """Whether this OS has flock, the lock the kernel drops when its holder dies (not Windows)."""
    return fcntl is not None


def process_started(pid: int) -> float | None:
    """When process `pid` started (psutil's create time), or None where it is gone or cannot be read."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:
        return None


def holder_alive(holder: dict) -> bool:
    """Whether the process a lock file names still runs: the same pid, started at the same time (so a reused pid
    is no holder), on this host. Where flock is missing this is how a lock left by a dead run is told apart."""
    import socket

    pid, started = holder.get("pid"), holder.get("process_started")
    if not isinstance(pid, int) or holder.get("host") not in (None, socket.gethostname()):
        return False
    now = process_started(pid)
    if now is None:
        return False
    return started is None or abs(now - float(started)) < 1.0
