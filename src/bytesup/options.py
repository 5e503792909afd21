"""What a run is asked to do: `RunOptions`, the run's own options (server, folder, replay, repetitions…) as one
record with each option's command-line flag and help beside its field; `LessonOptions`, the base of the options a
lesson declares for itself (`class Options(LessonOptions)` in the lesson's file, read as `ctx.options.<name>`);
and the command line as it is shown and recorded."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import httpx

from bytesup.llama.client import DEFAULT_TIMEOUT_S, LlamaServer
from bytesup.errors import BytesupError, redact_url

MAX_TIMEOUT_S = 86400.0  # a day: past that a number of seconds is a typo (inf, 1e300), not a wait
MAX_REPEAT = 1000  # repetitions of each timed measurement; more would run for days


# --- a lesson's own options --------------------------------------------------------------------------------

class OptionError(BytesupError):
    """A lesson option the run cannot take: the run stops before it starts, with the command line's exit status 2."""

    exit_code = 2


class LessonOptions(BaseModel):
    """The base of a lesson's options. A lesson declares `class Options(LessonOptions)` with one field per option:
    its type, its bounds, its help (`description`) and, in `json_schema_extra`, a `hint` that says what a valid value
    looks like, and a `flag` when the command-line flag is not `--<name>` (`repeatable`: the flag is given once per
    item). The command line builds its flags, their help and the validation from these fields; a bad value stops
    the run before its first request, and a replay validates the recorded values the same way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def given(self) -> dict[str, Any]:
        """The options given, as the manifest records them (options not given are left out)."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def parse(cls, values: dict[str, Any]) -> "LessonOptions":
        """Validated options; a bad value is one BytesupError that names the option and what it needs."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise OptionError(cls.problem(exc)) from None

    @classmethod
    def flag(cls, name: str) -> str:
        return str(cls.extra(name).get("flag") or f"--{name.replace('_', '-')}")

    @classmethod
    def extra(cls, name: str) -> dict[str, Any]:
        extra = cls.model_fields[name].json_schema_extra
        return extra if isinstance(extra, dict) else {}

    @classmethod
    def problem(cls, exc: ValidationError) -> str:
        """One paragraph for a validation error: each bad option, its value, what it needs."""
        parts = []
        for error in exc.errors():
            name = str(error["loc"][0]) if error["loc"] else "?"
            known = name in cls.model_fields
            flag = cls.flag(name) if known else f"--{name.replace('_', '-')}"
            hint = cls.extra(name).get("hint") if known else None
            parts.append(f"{flag} {error.get('input')!r} is not valid ({error['msg'].rstrip('.').lower()}): "
                         f"{hint or 'see `bytesup run --help`'}")
        return "; ".join(parts) + "."


# Options more than one lesson takes are declared once, here, and named by each lesson's Options.
BandwidthGbs = Annotated[float | None, Field(
    default=None, gt=0, allow_inf_nan=False,
    description="a memory bandwidth (GB/s, a positive number) to compute the decode ceiling for, besides this host's "
                "measured one",
    json_schema_extra={"hint": "give a positive number of GB/s, e.g. --bandwidth-gbs 273"})]


# --- the run's own options ---------------------------------------------------------------------------------

def cli(*flags: str, help: str, **bounds: Any) -> dict[str, Any]:  # noqa: A002 (typer's own word)
    """A RunOptions field's command line: its flags, its help and any bounds (min, max, envvar)."""
    return {"cli": {"flags": flags, "help": help, **bounds}}


@dataclass(frozen=True)
class RunOptions:
    """The run's own options, one record from the command line to the runner, read and never written: every lesson
    of a run reads the same record (a lesson's own number of samples is `LessonContext.samples`). A field with `cli`
    metadata is a flag of `bytesup run` and `bytesup run-all` (its help is the flag's); the others are set by the
    code. The folder a run wrote to is what the runner returns (`run.runner.run_into_folder`), not an option."""

    server_url: str | None = field(default=None, metadata=cli(
        "--server", help="llama-server URL (default $BYTESUP_SERVER or http://127.0.0.1:8099)"))
    api_key: str | None = field(default=None, metadata=cli(
        "--api-key", envvar="BYTESUP_API_KEY", help="API key of the server (never written to outputs)"))
    model: Path | None = field(default=None, metadata=cli("--model", help=(
        "the GGUF the server runs (default: /props model_path when readable here); also what a server "
        "started for the run loads")))
    out: Path | None = field(default=None, metadata=cli("--out", help=(
        "run folder (default: a new outputs/<UTC date>/, or outputs/<date>.N when that exists; "
        "BYTESUP_OUTPUTS moves outputs/)")))
    force: bool = field(default=False, metadata=cli("--force", help=(
        "replace lesson results that already exist in the run folder; with --resume, mix with lessons "
        "measured on another configuration")))
    resume: bool = field(default=False, metadata=cli("--resume", help=(
        "continue an incomplete run (without --out: the latest unfinished one under outputs/): skip "
        "lessons saved, re-run failed and interrupted ones")))
    replay: Path | None = field(default=None, metadata=cli(
        "--replay", help="serve the lessons from a recorded run folder instead of a server"))
    repeat: int = field(default=3, metadata=cli("--repeat", min=1, max=MAX_REPEAT, help=(
        f"samples of each timed measurement, 1 to {MAX_REPEAT}: every lesson takes this many, or the minimum its "
        "statistics need when that is more (5 for a median with its spread); a measurement under a stopping rule takes "
        "at most this many, fewer once its medians are as tight as its claims need; each lesson records how many it "
        "took")))
    timeout: float = field(default=DEFAULT_TIMEOUT_S, metadata=cli("--timeout", min=0.1, max=MAX_TIMEOUT_S, help=(
        "seconds to wait for one server answer, and for the first contact (default 120: a hung server "
        f"fails after 2 minutes; raise it for big models on slow machines, up to {MAX_TIMEOUT_S:g})")))
    start_server: bool = field(default=True, metadata=cli("--start-server/--no-start-server", help=(
        "with no --server or BYTESUP_SERVER and nothing answering at the default URL, start a server "
        "(llama-server when found, else the embedded engine) "
        "on the default model (BYTESUP_MODEL: another preset or GGUF) for the length of the run; "
        "--no-start-server stops with an error instead")))
    own_server: bool = field(default=False, metadata=cli("--own-server", help=(
        "always start a server of the run's own on a free port (the default model, BYTESUP_MODEL or --model), even "
        "when one answers at the default URL; it stops with the run, also when the run is killed (what make run does)")))
    allow_modified: bool = field(default=False, metadata=cli("--allow-modified", help=(
        "with --replay: replay recordings (http/*.jsonl) whose sha256 differs from the one in the run's "
        "manifest, i.e. edited on purpose")))
    model_mismatch_ok: bool = field(default=False, metadata=cli("--model-mismatch-ok", help=(
        "go on when --model differs (parameter count or tensor bytes) from the model the server serves")))
    # The lessons' options given, by field name, validated once by the Options of the lessons named in
    # `lessons_checked` (`run.lessons.check_lesson_options`); the runner validates options not checked for its lessons.
    lesson_options: dict[str, Any] = field(default_factory=dict)
    lessons_checked: tuple[str, ...] | None = None
    command: list[str] = field(default_factory=lambda: shown_command(sys.argv))


    def client(self, url: str, transport: httpx.BaseTransport | None = None, build: str | None = None,
               with_key: bool = True) -> LlamaServer:
        """The one way a run makes a client of a server: `url`, the run's --api-key (`with_key`; a server a lesson
        starts, or a replay, takes none), the run's --timeout for every answer, and the transport that records or
        replays."""
        return LlamaServer(url, self.api_key if with_key else None, timeout=self.timeout, transport=transport,
                           build=build)


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
