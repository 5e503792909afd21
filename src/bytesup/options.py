"""What a run is asked to do: `RunOptions` (server, folder, replay, repetitions…) and the command
line as it is shown and recorded."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import DEFAULT_TIMEOUT_S


@dataclass
class RunOptions:
    server_url: str | None = None
    api_key: str | None = None
    model: Path | None = None
    out: Path | None = None
    force: bool = False
    resume: bool = False
    replay: Path | None = None
    repeat: int = 3
    timeout: float = DEFAULT_TIMEOUT_S
    # With no server given (--server, BYTESUP_SERVER) and none answering at the default URL,
    # start one on the default model for the length of the run (--no-start-server: fail instead).
    start_server: bool = True
    lesson_options: dict[str, Any] = field(default_factory=dict)
    command: list[str] = field(default_factory=lambda: shown_command(sys.argv))
    allow_modified: bool = False  # replay recordings whose sha256 no longer matches the manifest's
    model_mismatch_ok: bool = False  # go on when --model is not the file the server serves
    run_dir: Path | None = None  # the folder the run wrote to, set by run_lessons


def shown_command(argv: list[str]) -> list[str]:
    """sys.argv as a person typed it: `python -m bytesup` and the console script both read `bytesup`."""
    if not argv:
        return []
    first = Path(argv[0])
    if first.name in ("__main__.py", "bytesup"):
        return ["bytesup", *argv[1:]]
    if first.suffix == ".py":  # a lesson run as a script
        shown = first.relative_to(Path.cwd()) if first.is_absolute() and first.is_relative_to(Path.cwd()) else first
        return ["python", str(shown), *argv[1:]]
    return [str(first.relative_to(Path.cwd())) if first.is_absolute() and first.is_relative_to(Path.cwd()) else argv[0], *argv[1:]]


def redact_command(argv: list[str]) -> list[str]:
    """The command line as recorded in the manifest: an API key is never written to outputs."""
    shown, hide_next = [], False
    for arg in argv:
        if hide_next:
            shown.append("***")
            hide_next = False
        elif arg == "--api-key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--api-key="):
            shown.append("--api-key=***")
        else:
            shown.append(arg)
    return shown
