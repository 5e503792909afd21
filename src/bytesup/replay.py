"""Record every HTTP exchange of a lesson, and serve a lesson from those recordings.

An exchange is one JSON line: server label, method, path, request JSON, status, response
(JSON, or text for /metrics) and elapsed milliseconds. Headers are never recorded, so an API
key cannot end up in a run folder.

A streamed answer (`text/event-stream`) is recorded in the same line as `stream`: each event's
text with its arrival time in ms after the request was sent (`arrived_ms`), `stream_tail`
for bytes after the last event when the stream broke off, and `stream_error` naming the error
that broke it. The times are taken here, as each
chunk passes to the client, and handed to the client in the response's extensions under
`ARRIVALS` (one per chunk): the client stamps with them, so what a lesson computes live and
what a replay computes from the recording are the same numbers.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from typing import Any

import httpx

from .errors import ReplayMiss
from .sse import EventSplitter

# The response extension that carries each body chunk's arrival time (ms after sending, rounded to the µs).
ARRIVALS = "bytesup.arrivals_ms"


def since_ms(started: float) -> float:
    """ms on the monotonic clock since `started` (a time.perf_counter() value), rounded to the µs
    as recordings keep it."""
    return round((time.perf_counter() - started) * 1000.0, 3)


def is_event_stream(headers: httpx.Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "text/event-stream"


def _request_json(request: httpx.Request) -> Any:
    body = request.content
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


def exchange_key(label: str, method: str, path: str, request_json: Any) -> str:
    return json.dumps([label, method, path, request_json], sort_keys=True, ensure_ascii=False)


class RecordingTransport(httpx.BaseTransport):
    """Passes requests to a real transport and appends each exchange to `sink`."""

    def __init__(self, sink: list[dict[str, Any]], label: str = "main", inner: httpx.BaseTransport | None = None):
        self.sink = sink
        self.label = label
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.perf_counter()
        response = self.inner.handle_request(request)
        entry: dict[str, Any] = {
            "server": self.label,
            "method": request.method,
            "path": request.url.path,
            "request": _request_json(request),
            "status": response.status_code,
        }
        if is_event_stream(response.headers):
            arrivals: list[float] = []
            stream = _RecordedStream(response, entry, arrivals, started, self.sink)
            return httpx.Response(response.status_code, headers=response.headers, stream=stream, request=request,
                                  extensions={**response.extensions, ARRIVALS: arrivals})
        body = response.read()
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        try:
            entry["response"] = json.loads(body)
        except ValueError:
            entry["response_text"] = body.decode("utf-8", errors="replace")
        entry["elapsed_ms"] = round(elapsed_ms, 3)
        self.sink.append(entry)
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)

    def close(self) -> None:
        self.inner.close()


class _RecordedStream(httpx.SyncByteStream):
    """Passes a streamed body on chunk by chunk, stamping each chunk's arrival, and writes the
    exchange (events, times, any tail) to the sink once the body is read to its end or closed."""

    def __init__(self, response: httpx.Response, entry: dict[str, Any], arrivals: list[float], started: float,
                 sink: list[dict[str, Any]]):
        self.response, self.entry, self.arrivals, self.started, self.sink = response, entry, arrivals, started, sink
        self.splitter = EventSplitter()
        self.events: list[dict[str, Any]] = []
        self.written = False

    def __iter__(self):
        try:
            for chunk in self.response.stream:
                if not chunk:
                    continue
                at = since_ms(self.started)
                self.arrivals.append(at)
                self.events += [{"arrived_ms": e.arrived_ms, "text": e.raw.decode("utf-8", errors="replace")}
                                for e in self.splitter.feed(chunk, at)]
                yield chunk
        except Exception as exc:  # kept in the line, for whoever reads a failed lesson's exchanges
            self.entry["stream_error"] = type(exc).__name__
            raise
        finally:
            self._write()

    def _write(self) -> None:
        if self.written:
            return
        self.written = True
        self.entry["stream"] = self.events
        if self.splitter.pending:
            self.entry["stream_tail"] = {"arrived_ms": self.arrivals[-1],
                                         "text": self.splitter.pending.decode("utf-8", errors="replace")}
        self.entry["elapsed_ms"] = since_ms(self.started)
        self.sink.append(self.entry)

    def close(self) -> None:
        self._write()
        self.response.close()


class _Chunks(httpx.SyncByteStream):
    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def __iter__(self):
        yield from self.chunks


def response_body(entry: dict[str, Any]) -> bytes:
    if "response" in entry:
        return json.dumps(entry["response"], ensure_ascii=False).encode("utf-8")
    return entry.get("response_text", "").encode("utf-8")


class ReplayTransport(httpx.BaseTransport):
    """Answers each request with the next recorded answer to the same request; fails loudly otherwise."""

    def __init__(self, exchanges: list[dict[str, Any]], label: str = "main", sink: list[dict[str, Any]] | None = None):
        self.label = label
        self.sink = sink
        self.queues: dict[str, deque] = defaultdict(deque)
        for e in exchanges:
            if e.get("server", "main") == label:
                self.queues[exchange_key(label, e["method"], e["path"], e.get("request"))].append(e)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        payload = _request_json(request)
        key = exchange_key(self.label, request.method, request.url.path, payload)
        queue = self.queues.get(key)
        if not queue:
            shown = f"{request.method} {request.url.path} {json.dumps(payload, ensure_ascii=False)[:300]} (server {self.label})"
            nearest = [k[:200] for k, q in self.queues.items() if q and f'"{request.url.path}"' in k]
            raise ReplayMiss(shown, nearest)
        entry = queue.popleft()
        if self.sink is not None:
            self.sink.append(entry)
        if "stream" in entry:
            parts = [*entry["stream"], *([entry["stream_tail"]] if "stream_tail" in entry else [])]
            return httpx.Response(entry["status"], headers={"content-type": "text/event-stream"},
                                  stream=_Chunks([p["text"].encode("utf-8") for p in parts]), request=request,
                                  extensions={ARRIVALS: [p["arrived_ms"] for p in parts]})
        ctype = "application/json" if "response" in entry else "text/plain"
        return httpx.Response(entry["status"], headers={"content-type": ctype}, content=response_body(entry), request=request)
