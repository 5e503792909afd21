"""Typed errors. Each message is one paragraph that says what went wrong and what to do."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s]*@")


def redact_url(text: str) -> str:
    """A URL (or any text holding URLs) with its user name and password replaced by ***: credentials in
    `http://user:password@host` never reach outputs, logs or messages."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", str(text))


class BytesupError(Exception):
    """Base of every error we expect a user to see; the CLI prints it without a traceback. Its message
    never holds a URL's credentials (see `redact_url`)."""

    exit_code = 1

    def __init__(self, *args: object):
        super().__init__(*(redact_url(a) if isinstance(a, str) else a for a in args))


class EngineUnavailable(BytesupError):
    """The engine a step needs (a native llama-server, for RPC) is not on this machine."""

    exit_code = 3


class ServerUnreachable(BytesupError):
    def __init__(self, url: str, detail: str = ""):
        self.url = url
        super().__init__(
            f"No llama.cpp server answers at {url}{f' ({detail})' if detail else ''}. "
            "Start one with `scripts/start_server.sh` (or `bytesup server start`), "
            "or point at a running server with `--server URL` or the BYTESUP_SERVER variable."
        )


class AnswerCutShort(BytesupError):
    """The server answered, then its answer stopped before the end it announced (a Content-Length the body never
    reached, a chunked body without its last chunk, a connection reset mid-answer)."""

    def __init__(self, url: str, path: str, received: int, detail: str = ""):
        super().__init__(
            f"The server at {url} answered {path}, but its answer was cut short: the connection closed after "
            f"{received:,} bytes of the body{f' ({detail})' if detail else ''}. Nothing of it was used or recorded. "
            "The server may have crashed or been restarted mid-answer, or a proxy between cut it: read the server's "
            "log, then run again.")


class ServerTimeout(BytesupError):
    def __init__(self, url: str, path: str, timeout_s: float, machine: str = ""):
        self.url, self.path, self.timeout_s, self.machine = url, path, timeout_s, machine
        busy = machine.startswith("the machine was busy")
        super().__init__(
            f"The server at {url} did not answer {path} within {timeout_s:g} s"
            + (f"; {machine}" if machine else "") + ". "
            + ("Other programs were taking the cores the server computes on: stop them and run again, "
               if busy else "It may be busy with a long prompt or stuck; ")
            + "check its log (under .run/ for servers started by scripts/start_server.sh), or raise the limit with --timeout."
        )

    def on_machine(self, machine: str) -> "ServerTimeout":
        """The same timeout, saying what the run read of the machine meanwhile ("the machine was busy: load
        average 6.1 on 2 cores; …", or that it was not)."""
        return ServerTimeout(self.url, self.path, self.timeout_s, machine)


class ServerHTTPError(BytesupError):
    def __init__(self, url: str, method: str, path: str, status: int, body: str):
        self.status = status
        self.body = body
        hint = (
            "The server wants an API key: pass --api-key or set BYTESUP_API_KEY."
            if status in (401, 403)
            else "Check that the server build supports this request, and read its log."
        )
        super().__init__(f"{method} {path} on {url} failed with HTTP {status}: {body[:500]!r}. {hint}")


class MalformedResponse(BytesupError):
    def __init__(self, url: str, path: str, detail: str, body: str = ""):
        super().__init__(
            f"The answer to {path} from {url} is not what a llama.cpp server sends ({detail}). "
            f"First bytes: {body[:200]!r}. Is {url} really a llama-server? If it is, its build may be "
            "too old or too new for bytesup: report the build shown by `bytesup server status`."
        )


class AnswerTooLarge(BytesupError):
    def __init__(self, url: str, path: str, limit: int):
        super().__init__(
            f"The answer to {path} from {url} passed {limit:,} bytes, more than that request can need, so bytesup stopped "
            "reading it and recorded nothing of it. A llama.cpp server answering as asked stays far below this; is "
            f"{url} really a llama-server? To accept bigger answers anyway, set BYTESUP_MAX_ANSWER_MB (a floor, in MB, "
            "for every answer's limit) and run again.")


class ImplausibleValue(BytesupError):
    """`value` is shown after the field's name; Ellipsis where the reason says it all (a list's sum, say)."""

    def __init__(self, path: str, field: str, value: object, why: str, build: str | None):
        shown = "" if value is Ellipsis else f" = {value!r}"
        super().__init__(
            f"The server's answer to {path} gives {field}{shown}, which no llama.cpp server sends ({why}; server "
            f"build: {build or 'unknown'}). Nothing was computed from it. Check the server's log, and run the lesson "
            "against a llama-server you trust; if this build really sends it, report the build and the field.")


class StreamError(BytesupError):
    """A streamed answer that broke off, carried something that is not an event, or never finished."""

    def __init__(self, url: str, path: str, offset: int, detail: str, sample: bytes = b""):
        self.offset = offset
        shown = f" Bytes there: {sample[:120]!r}." if sample else ""
        super().__init__(
            f"The event stream answering {path} from {url} {detail}, at byte {offset:,} of the stream.{shown} "
            "A llama.cpp server streams one `data: {json}` event per token and ends with an event that "
            "carries `stop: true` and `timings`. Read the server's log for a crash or an overload, and "
            "re-run; if it repeats, report the build shown by `bytesup server status`."
        )


class MissingField(BytesupError):
    def __init__(self, path: str, field: str, build: str | None):
        self.field = field
        super().__init__(
            f"The server's answer to {path} has no field `{field}`, which this lesson needs "
            f"(server build: {build or 'unknown'}). Newer and older llama.cpp builds rename fields "
            "now and then: try the build the course was made with, or report the build and the field."
        )


class ReplayMiss(BytesupError):
    def __init__(self, request: str, nearest: list[str]):
        near = "; ".join(nearest[:3]) or "none"
        super().__init__(
            f"Replay has no recorded answer for {request}. The lesson asked for something the "
            f"recorded run did not (nearest recorded: {near}). Re-record the run against a live "
            "server, or replay a run made by the same version of the lesson."
        )


class LessonSkipped(BytesupError):
    """A lesson that measured nothing on this machine, and says why and what enables it (`ctx.skip` does the same
    from a lesson's main). The runner records the lesson as skipped, neither ok nor failed."""

    def __init__(self, reason: str, command: str):
        self.reason, self.command = reason, command
        super().__init__(f"{reason} (`{command}` enables it)")


class ServerStartError(BytesupError):
    pass


class RunFolderError(BytesupError):
    pass


class SchemaError(BytesupError):
    pass
