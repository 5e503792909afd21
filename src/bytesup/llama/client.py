"""`LlamaServer`: a small httpx client for llama-server's HTTP API, returning pydantic records."""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any, Callable, Iterator, NamedTuple
from urllib.parse import urlsplit

import httpx

from bytesup.host import quiet
from bytesup.llama import responses
from bytesup.llama import sse
from bytesup.errors import (
    AnswerCutShort,
    AnswerTooLarge,
    BytesupError,
    MalformedResponse,
    ServerHTTPError,
    ServerTimeout,
    ServerUnreachable,
    StreamError,
)
from bytesup.llama.recording import (
    ARRIVALS,
    LIMITS,
    PARSED,
    READ,
    CutShort,
    DuplicateKey,
    ReplayTransport,
    answer_json,
    answer_limit,
    read_bounded,
    since_ms,
    watchdog,
)
from bytesup.llama.transport import KeptAliveTransport

_UNPARSED = object()
DEFAULT_URL = "http://127.0.0.1:8099"
# Seconds to wait for one answer. A lesson's longest request (a long prefill on a big model on a
# slow CPU) takes well under this; a hung server fails after 2 minutes instead of stalling.
DEFAULT_TIMEOUT_S = 120.0


def clock_info() -> dict[str, Any]:
    """The clock streamed events are stamped with (time.perf_counter): its implementation and resolution."""
    info = time.get_clock_info("perf_counter")
    return {"clock": "time.perf_counter", "implementation": info.implementation, "monotonic": info.monotonic,
            "resolution_s": info.resolution}


def default_base_url() -> str:
    return os.environ.get("BYTESUP_SERVER") or DEFAULT_URL


class BareClient:
    """The least a client can do to send a /completion and read its answer: `http.client` on one kept connection,
    the body parsed by `json.loads` and nothing else (no pydantic, no recording, no checks). It is the yardstick
    the harness's own time is measured against: what a server's answer costs outside its timings with no harness."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S):
        url = urlsplit(base_url)
        self._where = (url.hostname or "127.0.0.1", url.port or 80, timeout)
        self._headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
        self._conn: http.client.HTTPConnection | None = None
        self.cpu_ms = 0.0  # this thread's CPU over the last request's wall time (time.thread_time), in ms

    def completion_ms(self, body: bytes) -> tuple[float, float]:
        """(client wall ms from sending `body` to the answer's last byte, the server's prompt_ms + predicted_ms)."""
        wall, timings = self.timed(body)
        return wall, float(timings["prompt_ms"]) + float(timings["predicted_ms"])

    def timed(self, body: bytes) -> tuple[float, dict[str, Any]]:
        """(client wall ms from sending `body` to the answer's last byte, the answer's `timings` as the server sent
        them). `cpu_ms` is then the CPU this thread spent over that wall time: what the least client costs."""
        for attempt in (0, 1):  # a kept connection the server closed meanwhile is opened again, once
            if self._conn is None:
                host, port, timeout = self._where
                self._conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                started, cpu = time.perf_counter(), time.thread_time()
                self._conn.request("POST", "/completion", body, self._headers)
                answer = self._conn.getresponse()
                data = answer.read()
                wall = (time.perf_counter() - started) * 1000.0
                self.cpu_ms = (time.thread_time() - cpu) * 1000.0
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt:
                    raise
                continue
            if answer.status != 200:
                raise http.client.HTTPException(f"status {answer.status}")
            return wall, json.loads(data)["timings"]
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Answer(NamedTuple):
    status: int
    body: bytes
    parsed: Any  # the JSON as the transport parsed it (a recording's strict parse), else _UNPARSED

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def _json_body(payload: Any) -> bytes:
    """A request's JSON as httpx writes it (`json=`): compact, UTF-8, no NaN."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class LlamaServer:
    """One llama-server, reached over HTTP.

    `transport` lets the runner record every exchange or replay a recorded run instead of
    talking to a server (see `bytesup.llama.recording`); by default a `KeptAliveTransport`.

    Each request is an `httpx.Request` with the client's headers and timeout, handed straight to the transport:
    the client's own sending (authentication flows, redirects, cookies, event hooks), none of which a
    llama-server answer needs, cost more per request than the transport itself.

    Before each completion, the client waits (`settle`, by default `host.quiet.settle`) until no other thread of
    the process is running: numpy's threads spin on a core for about 0.1 s after each product, and a decode sent
    then shares its cores with them. A replay waits for nothing (`settle` is None): no server is timed.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        build: str | None = None,
    ):
        self.base_url = (base_url or default_base_url()).rstrip("/")
        api_key = api_key if api_key is not None else os.environ.get("BYTESUP_API_KEY")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self._transport = transport if transport is not None else KeptAliveTransport()
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=self._transport
        )
        self._timeouts = self._http.timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}
        # The client's headers, with the server's Host, a JSON body's Content-Type and a Connection: close, made
        # once: a request then copies them and adds its Content-Length, where httpx would build them all again.
        self._headers: dict[tuple[bool, bool], httpx.Headers] = {}
        for body, close in ((False, False), (True, False), (False, True), (True, True)):
            made = httpx.Headers({"Host": self._http.base_url.netloc.decode("ascii")})
            made.update(self._http.headers)
            if body:
                made["Content-Type"] = "application/json"
            if close:
                made["Connection"] = "close"
            self._headers[body, close] = made
        self._build: str | None = build  # named in MissingField messages; /props sets it too
        self.settle: Callable[[], float] | None = None if isinstance(self._transport, ReplayTransport) else quiet.settle

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ---------------------------------------------------------------------

    def _request(self, method: str, path: str, payload: Any, extensions: dict[str, Any] | None = None,
                 close: bool = False) -> httpx.Request:
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = self._http.base_url.copy_with(raw_path=self._http.base_url.raw_path + path.lstrip("/").encode())
        headers = self._headers[payload is not None, close].copy()
        body = b""
        if payload is not None:
            body = _json_body(payload)
            headers["Content-Length"] = str(len(body))
        elif method in ("POST", "PUT", "PATCH"):  # an empty body's length, where httpx puts it: after the Host
            raw = headers.raw
            headers = httpx.Headers([raw[0], (b"Content-Length", b"0"), *raw[1:]])
        # Given its stream, httpx takes the headers as they are (as it would with `content=`, less its rebuilding).
        request = httpx.Request(method, url, headers=headers, stream=httpx.ByteStream(body),
                                extensions={"timeout": self._timeouts, **(extensions or {})})
        request.read()
        return request

    def _open(self, request: httpx.Request) -> httpx.Response:
        """The transport's answer to `request`, its body not read yet."""
        response = self._transport.handle_request(request)
        response.request = request
        return response

    def _send(self, method: str, path: str, payload: dict[str, Any] | None = None) -> _Answer:
        """One request whose whole answer must arrive within --timeout and within its size limit (`answer_limit`)."""
        limits = {"max_bytes": answer_limit(path, payload), "deadline": time.perf_counter() + self.timeout}
        request = self._request(method, path, payload, {LIMITS: limits})
        try:
            response = self._open(request)
            try:
                extensions = response.extensions
                body = extensions.get(READ)  # read (and bounded) by a recording already
                answer = _Answer(response.status_code, read_bounded(response, request) if body is None else body,
                                 extensions.get(PARSED, _UNPARSED))
            finally:
                response.close()
        except httpx.TimeoutException:
            raise ServerTimeout(self.base_url, path, self.timeout) from None
        except CutShort as exc:
            raise AnswerCutShort(self.base_url, path, exc.received, str(exc)[:200]) from None
        except httpx.RemoteProtocolError:
            raise ServerUnreachable(self.base_url, "something there took the connection and closed it without an "
                                    "answer: RemoteProtocolError") from None
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.base_url, type(exc).__name__) from None
        if answer.status >= 400:
            raise ServerHTTPError(self.base_url, method, path, answer.status, answer.text)
        return answer

    def request_json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """The answer's JSON: as a recording transport parsed it (the same strict parse, once), else parsed here."""
        answer = self._send(method, path, payload)
        if answer.parsed is not _UNPARSED:
            return answer.parsed
        try:
            return answer_json(answer.body)
        except DuplicateKey as exc:
            raise MalformedResponse(self.base_url, path, f"{exc}, so which value the server meant is unknowable and "
                                    "nothing of the answer was believed", answer.text) from None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            raise MalformedResponse(self.base_url, path, "not JSON", answer.text) from None

    def _get(self, model: type[responses.R], method: str, path: str, payload: dict[str, Any] | None = None) -> responses.R:
        data = self.request_json(method, path, payload)
        return responses.parse(model, data, path=path, url=self.base_url, build=self._build)

    # --- endpoints ---------------------------------------------------------------------

    def health(self) -> responses.Health:
        return self._get(responses.Health, "GET", "/health")

    def props(self) -> responses.Props:
        props = self._get(responses.Props, "GET", "/props")
        self._build = props.build_info
        return props

    def completion(self, prompt: str | list[int], **settings: Any) -> responses.Completion:
        """POST /completion. `settings` go into the body as given (n_predict, n_probs, seed…). The answer must
        hold what was asked (`responses.check_asked`): one position per generated token where n_probs asks for
        candidates, at most n_probs candidates in each."""
        if self.settle is not None:
            self.settle()
        answer = self._get(responses.Completion, "POST", "/completion", {"prompt": prompt, **settings})
        responses.check_asked(answer, settings, path="/completion", build=self._build)
        return answer

    def completion_stream(self, prompt: str | list[int], **settings: Any) -> responses.StreamedCompletion:
        """POST /completion with `stream: true`: the server's events, each stamped on arrival.

        Times are ms after the request was sent (connecting included: each stream opens its own
        connection), on the monotonic clock (time.perf_counter). The
        whole answer must end within the client's timeout (--timeout) after sending: at that moment
        a watchdog shuts the connection's socket, so a stream that keeps sending or has gone silent
        fails then, never later. A stream cut mid-event, an event that is not JSON, or a stream
        without its final event (`stop: true` with `timings`) fails with the byte offset where it
        went wrong.
        """
        path = "/completion"
        body = {"prompt": prompt, **settings, "stream": True}
        if self.settle is not None:
            self.settle()
        sent = time.perf_counter()
        try:
            # A connection of its own: llama-server may close a connection once it has streamed an
            # answer on it, and a request sent on it at that moment fails (RemoteProtocolError).
            resp = self._open(self._request("POST", path, body, close=True))
            try:
                if resp.status_code >= 400:
                    resp.read()
                    raise ServerHTTPError(self.base_url, "POST", path, resp.status_code, resp.text)
                timer = watchdog(resp, self.timeout - (time.perf_counter() - sent))
                try:
                    return self._read_stream(path, resp, sent)
                finally:
                    if timer is not None:
                        timer.cancel()
            finally:
                resp.close()
        except httpx.TimeoutException:
            raise ServerTimeout(self.base_url, path, self.timeout) from None
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.base_url, type(exc).__name__) from None

    def _timed_chunks(self, path: str, resp: httpx.Response, sent: float,
                      splitter: sse.EventSplitter) -> Iterator[tuple[float, bytes]]:
        """(arrival ms, chunk) for each body chunk: the transport's stamps when it gives them
        (recording or replaying), else this clock's. Fails past the deadline or when the body breaks."""
        stamps = resp.extensions.get(ARRIVALS)
        limit = answer_limit(path, json.loads(resp.request.content or b"null"))
        chunks = resp.iter_raw()
        n = 0
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TimeoutException:
                raise StreamError(self.base_url, path, splitter.received,
                                  f"went silent for {self.timeout:g} s (--timeout) before it ended") from None
            except httpx.TransportError as exc:
                if time.perf_counter() - sent >= self.timeout:  # the watchdog shut the socket
                    raise StreamError(self.base_url, path, splitter.received, self._too_long()) from None
                raise StreamError(self.base_url, path, splitter.received,
                                  f"broke off ({type(exc).__name__}: {exc})", splitter.pending) from None
            at = stamps[n] if stamps is not None and n < len(stamps) else since_ms(sent)
            n += 1
            if splitter.received + len(chunk) > limit:
                raise AnswerTooLarge(self.base_url, path, limit)
            yield at, chunk
            if time.perf_counter() - sent > self.timeout:
                raise StreamError(self.base_url, path, splitter.received, self._too_long())

    def _too_long(self) -> str:
        return f"had not ended {self.timeout:g} s (--timeout, the limit for one answer) after the request was sent"

    def _read_stream(self, path: str, resp: httpx.Response, sent: float) -> responses.StreamedCompletion:
        splitter = sse.EventSplitter()
        events: list[responses.ArrivedEvent] = []
        for at, chunk in self._timed_chunks(path, resp, sent, splitter):
            for raw in splitter.feed(chunk, at):
                events += self._event(path, raw)
        if splitter.pending:
            raise StreamError(self.base_url, path, splitter.pending_offset,
                              "ended in the middle of an event (no blank line after it)", splitter.pending)
        final = events[-1].event if events else None
        if final is None or not final.stop or final.timings is None:
            raise StreamError(self.base_url, path, splitter.received,
                              f"ended after {len(events)} event(s) without its final event (`stop: true` with `timings`)")
        streamed = responses.StreamedCompletion(events=events, timings=final.timings)
        responses.check_asked(streamed, json.loads(resp.request.content or b"{}"), path=path, build=self._build)
        return streamed

    def _event(self, path: str, raw: sse.RawEvent) -> list[responses.ArrivedEvent]:
        """The typed event of one block of the stream (none for a block without data, such as a comment)."""
        try:
            fields = sse.fields(raw.raw)
        except UnicodeDecodeError:
            raise StreamError(self.base_url, path, raw.offset, "sent an event that is not UTF-8 text", raw.raw) from None
        errors = [value for name, value in fields if name == "error"]
        if errors:
            raise StreamError(self.base_url, path, raw.offset, f"reported an error: {errors[0][:300]}")
        text = sse.data(raw.raw)
        if text is None:
            return []
        try:
            data = answer_json(text)
        except DuplicateKey as exc:
            raise StreamError(self.base_url, path, raw.offset, f"sent an event in which {exc}, so nothing of it was "
                              "believed", raw.raw) from None
        except json.JSONDecodeError as exc:
            raise StreamError(self.base_url, path, raw.offset, f"sent an event that is not JSON ({exc.msg})",
                              raw.raw) from None
        if isinstance(data, dict) and "error" in data:
            raise StreamError(self.base_url, path, raw.offset, f"reported an error: {json.dumps(data['error'])[:300]}")
        event = responses.parse(responses.StreamEvent, data, path=path, url=self.base_url, build=self._build)
        return [responses.ArrivedEvent(offset=raw.offset, arrived_ms=raw.arrived_ms, event=event)]

    def tokenize(self, content: str, with_pieces: bool = True, add_special: bool = False) -> responses.Tokenized:
        body = {"content": content, "with_pieces": with_pieces, "add_special": add_special}
        return self._get(responses.Tokenized, "POST", "/tokenize", body)

    def detokenize(self, tokens: list[int]) -> responses.Detokenized:
        return self._get(responses.Detokenized, "POST", "/detokenize", {"tokens": tokens})

    def metrics(self) -> dict[str, float]:
        """GET /metrics (needs the server's --metrics), parsed into numbers."""
        return responses.parse_metrics(self._send("GET", "/metrics").text)

    def slots(self) -> list[dict[str, Any]]:
        data = self.request_json("GET", "/slots")
        if not isinstance(data, list):
            raise MalformedResponse(self.base_url, "/slots", "expected a list of slots", str(data))
        return data

    def models(self) -> responses.ModelList:
        return self._get(responses.ModelList, "GET", "/v1/models")

    def served_meta(self) -> dict[str, Any]:
        """llama.cpp's `meta` of the served model, or {} where the server lists none: for lessons
        that show it beside their own numbers and go on without it."""
        try:
            return self.served_model().get("meta", {})
        except BytesupError:
            return {}

    def served_model(self) -> dict[str, Any]:
        """The first model of /v1/models: its id, a short name (the file's stem) and llama.cpp's
        `meta` (n_params, size = bytes of all tensors, n_vocab, n_ctx_train…); {} when none is listed."""
        data = self.models().data
        if not data:
            return {}
        model_id = str(data[0].get("id") or "served model")
        meta = data[0].get("meta")
        return {"id": model_id, "name": model_id.rsplit("/", 1)[-1].removesuffix(".gguf"),
                "meta": meta if isinstance(meta, dict) else {}}
