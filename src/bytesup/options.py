"""What a run is asked to do: `RunOptions` (server, folder, replay, repetitions…), the lessons'
own options (`LessonOptions`: one typed, validated field per `ctx.option(name)`), and the command
line as it is shown and recorded."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bytesup.llama.client import DEFAULT_TIMEOUT_S
from bytesup.errors import BytesupError, redact_url

MAX_TIMEOUT_S = 86400.0  # a day: past that a number of seconds is a typo (inf, 1e300), not a wait
MAX_REPEAT = 1000  # repetitions of each timed measurement; more would run for days


class LessonOptions(BaseModel):
    """The lessons' own options, one field per `ctx.option(name)`. The CLI builds this once and a
    bad value stops the run before it starts; a replay validates the recorded values the same way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bandwidth_gbs: float | None = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="a memory bandwidth (GB/s, a positive number) to compute the decode ceiling for, besides this host's measured one "
                    "(lessons 1, 4 and 8)")
    sizes: list[str] | None = Field(
        default=None, min_length=1,
        description="capstone: the model presets to sweep, comma-separated on the command line (see `bytesup model build --list`)")

    prompts: list[str] | None = Field(
        default=None, min_length=1,
        description="lesson 4: a prompt of your own, repeatable (--prompt TEXT --prompt TEXT): added after the published four "
                    "to its next-token tables and its numpy forward pass")

    rpc: str | None = Field(
        default=None,
        description="lesson 9: host:port,… of rpc-servers to split the model across (default: two started on 127.0.0.1)")

    @field_validator("rpc")
    @classmethod
    def _rpc_endpoints(cls, value: str | None) -> str | None:
        """Each comma-separated endpoint is host:port with a port from 1 to 65535."""
        if value is None:
            return None
        ends = [e.strip() for e in value.split(",") if e.strip()]
        for end in ends:
            host, _, port = end.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{end!r} is not host:port")
        if not ends:
            raise ValueError("no endpoint given")
        return ",".join(ends)

    @field_validator("prompts")
    @classmethod
    def _some_text(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(not p.strip() for p in value):
            raise ValueError("a prompt is empty")
        return value

    @field_validator("sizes", mode="before")
    @classmethod
    def _split_sizes(cls, value: Any) -> Any:
        """`--sizes a, b,,c` → ["a", "b", "c"]; a list is stripped the same way."""
        if value is None:
            return None
        names = value.split(",") if isinstance(value, str) else value
        if not isinstance(names, list):
            return names  # pydantic says what is wrong with it
        return [n.strip() if isinstance(n, str) else n for n in names if not isinstance(n, str) or n.strip()]

    def given(self) -> dict[str, Any]:
        """The options given, as the manifest records them (options not given are left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def parse(cls, values: dict[str, Any]) -> "LessonOptions":
        """Validated options; a bad value is one BytesupError that names the option and what it needs."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise BytesupError(lesson_options_problem(exc)) from None


OPTION_HINTS = {
    "rpc": "give rpc-server endpoints as host:port separated by commas, e.g. --rpc 127.0.0.1:50052,127.0.0.1:50053",
    "bandwidth_gbs": "give a positive number of GB/s, e.g. --bandwidth-gbs 273",
    "prompts": "give each prompt some text, e.g. --prompt 'The capital of Italy is'",
    "sizes": ("give one or more model names separated by commas, e.g. --sizes tiny-q8_0,small-q8_0 "
              "(`bytesup model build --list` names them)"),
}


# Options whose command-line flag is not the field's name: one --prompt per prompt.
OPTION_FLAGS = {"prompts": "--prompt"}


def lesson_options_problem(exc: ValidationError) -> str:
    """One paragraph for a validation error of LessonOptions: each bad option, its value, what it needs."""
    parts = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "?"
        flag = OPTION_FLAGS.get(name, f"--{name.replace('_', '-')}")
        hint = OPTION_HINTS.get(name, "see `bytesup run --help`")
        parts.append(f"{flag} {error.get('input')!r} is not valid ({error['msg'].rstrip('.').lower()}): {hint}")
    return "; ".join(parts) + "."


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
    # Always start a server of the run's own on a free port (what `make run` does), even when one answers at the
    # default URL; it stops with the run, also when the run is killed.
    own_server: bool = False
    lesson_options: LessonOptions = field(default_factory=LessonOptions)  # a dict is validated into one
    command: list[str] = field(default_factory=lambda: shown_command(sys.argv))
    allow_modified: bool = False  # replay recordings whose sha256 no longer matches the manifest's
    model_mismatch_ok: bool = False  # go on when --model is not the file the server serves
    run_dir: Path | None = None  # the folder the run wrote to, set by run_lessons

    def __post_init__(self) -> None:
        if not isinstance(self.lesson_options, LessonOptions):
            self.lesson_options = LessonOptions.parse(dict(self.lesson_options))


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
    for arg in (redact_url(a) for a in argv):
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
