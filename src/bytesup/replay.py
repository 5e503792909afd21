"""Record every HTTP exchange of a lesson, and serve a lesson from those recordings.

An exchange is one JSON line: server label, method, path, request JSON, status, response
(JSON, or text for /metrics) and elapsed milliseconds. Headers are never recorded, so an API
key cannot end up in a run folder.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from typing import Any

import httpx

from .errors import ReplayMiss


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
        body = response.read()
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        entry: dict[str, Any] = {
            "server": self.label,
            "method": request.method,
            "path": request.url.path,
            "request": _request_json(request),
            "status": response.status_code,
        }
        try:
            entry["response"] = json.loads(body)
        except ValueError:
            entry["response_text"] = body.decode("utf-8", errors="replace")
        entry["elapsed_ms"] = round(elapsed_ms, 3)
        self.sink.append(entry)
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)

    def close(self) -> None:
        self.inner.close()


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
        ctype = "application/json" if "response" in entry else "text/plain"
        return httpx.Response(entry["status"], headers={"content-type": ctype}, content=response_body(entry), request=request)
