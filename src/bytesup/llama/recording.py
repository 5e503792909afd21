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

import heapq
import itertools
import json
import os
import socket
import threading
import time
from collections import defaultdict, deque
from typing import Any

import httpx
import orjson

from bytesup.errors import AnswerTooLarge, ReplayMiss
from bytesup.llama.sse import EventSplitter
from bytesup.llama.transport import AnswerBody, KeptAliveTransport

# The response extension that carries each body chunk's arrival time (ms after sending, rounded to the µs).
ARRIVALS = "bytesup.arrivals_ms"
# The response extension that carries the answer as the recording parsed it (no second parse in the client); set only
# where that parse met no NaN or infinity, which the recording keeps as the strings the server wrote.
PARSED = "bytesup.parsed"
# The response extension that carries the whole body as the recording read it (within its limits): the client does
# not read it a second time.
READ = "bytesup.read"
# The request extension that bounds an answer: {"max_bytes": n, "deadline": a time.perf_counter() value}.
LIMITS = "bytesup.limits"
MAX_ANSWER_ENV = "BYTESUP_MAX_ANSWER_MB"
# Headers that describe the body as it travelled: once it is read (and decoded) here they no longer hold.
_TRAVEL_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


def answer_limit(path: str, payload: Any) -> int:
    """The bytes an answer to this request may take, from what it asked: a /completion's generated tokens times what
    each brings (its text and, per listed candidate, id, text, bytes and probability), plus room for the settings
    it echoes; 16 MB for any other endpoint. BYTESUP_MAX_ANSWER_MB raises every limit to at least that."""
    floor = 0
    try:
        floor = int(float(os.environ.get(MAX_ANSWER_ENV) or 0) * 1e6)
    except ValueError:
        floor = 0
    limit = 16_000_000
    if path == "/completion" and isinstance(payload, dict):
        n_predict = payload.get("n_predict")
        tokens = n_predict if isinstance(n_predict, int) and 0 <= n_predict else 8192  # -1 or unset: to the context's end
        n_probs = payload.get("n_probs")
        candidates = n_probs if isinstance(n_probs, int) and n_probs > 0 else 0
        limit = 4_000_000 + (tokens + 1) * (512 + 512 * candidates)
    return max(limit, floor)


class _Deadline:
    """One armed deadline: the socket to shut when it passes, until `cancel`."""

    def __init__(self, sock: socket.socket):
        self.sock: socket.socket | None = sock

    def cancel(self) -> None:
        self.sock = None


class _Watchdog:
    """One thread for every deadline of the process (started at the first): arming one costs a heap push, where a
    timer thread per request would cost more than the request's own handling here (about 2 ms)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._count = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, sock: socket.socket, at: float) -> _Deadline:
        entry = _Deadline(sock)
        with self._cond:
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (at, next(self._count), entry))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bytesup-deadlines", daemon=True)
                self._thread.start()
            elif earliest is None or at < earliest:
                self._cond.notify()
        return entry

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][2].sock is None:  # cancelled: the answer ended in time
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                at, _, entry = self._heap[0]
                now = time.perf_counter()
                if at > now:
                    self._cond.wait(at - now)
                    continue
                heapq.heappop(self._heap)
                sock, entry.sock = entry.sock, None
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:  # already closed
                        pass


_WATCHDOG = _Watchdog()


def watchdog(resp: httpx.Response, seconds: float) -> _Deadline | None:
    """Shut the answer's socket `seconds` from now, so a blocked read returns at once (`.cancel()` once the answer
    is read); None where the answer has no socket (a recording replayed, a test's transport)."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if not isinstance(sock, socket.socket):
        return None
    return _WATCHDOG.arm(sock, time.perf_counter() + max(seconds, 0.0))


class CutShort(httpx.TransportError):
    """An answer whose status and headers came, whose body then broke off: `received` bytes of it had arrived."""

    def __init__(self, message: str, received: int, request: httpx.Request):
        super().__init__(message, request=request)
        self.received = received


def read_bounded(response: httpx.Response, request: httpx.Request) -> bytes:
    """The whole (decoded) body, within the request's limits: past `max_bytes` the answer is closed and
    AnswerTooLarge raised; past `deadline` a timeout, however steadily the bytes trickle in."""
    limits = request.extensions.get(LIMITS) or {}
    max_bytes, deadline = limits.get("max_bytes"), limits.get("deadline")
    # The raw body where nothing encodes it (the usual answer): the same bytes, without httpx's decoding layers.
    plain = not response.is_stream_consumed and "content-encoding" not in response.headers
    stream = response.stream
    if plain and isinstance(stream, AnswerBody) and stream.length is not None:  # the usual answer, read at once
        if max_bytes is not None and stream.length > max_bytes:
            response.close()
            raise AnswerTooLarge(f"{request.url.scheme}://{request.url.netloc.decode()}", request.url.path, max_bytes)
        try:
            whole = stream.whole(deadline)
        except httpx.TransportError as exc:
            raise _read_failed(exc, deadline, stream.received, request) from None
        if whole is not None:
            return whole
    timer = watchdog(response, deadline - time.perf_counter()) if deadline is not None else None
    body = bytearray()
    try:
        for chunk in response.iter_raw() if plain else response.iter_bytes():
            body += chunk
            if max_bytes is not None and len(body) > max_bytes:
                response.close()
                raise AnswerTooLarge(f"{request.url.scheme}://{request.url.netloc.decode()}", request.url.path, max_bytes)
            if deadline is not None and time.perf_counter() > deadline:
                raise httpx.ReadTimeout("the answer did not end within the limit for one answer", request=request)
    except httpx.TransportError as exc:
        raise _read_failed(exc, deadline, len(body), request) from None
    finally:
        if timer is not None:
            timer.cancel()
    return bytes(body)


def _read_failed(exc: httpx.TransportError, deadline: float | None, received: int,
                 request: httpx.Request) -> httpx.TransportError:
    """What a body that broke off after `received` bytes raises: a timeout where the deadline passed (the watchdog
    shut the socket, or the last wait ended there) or a read waited too long, else CutShort."""
    if deadline is not None and time.perf_counter() >= deadline:
        return httpx.ReadTimeout("the answer did not end within the limit for one answer", request=request)
    if isinstance(exc, httpx.TimeoutException):
        return exc
    return CutShort(f"{type(exc).__name__}: {exc}", received, request)


def settled_headers(headers: httpx.Headers) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.items() if k.lower() not in _TRAVEL_HEADERS]


class DuplicateKey(ValueError):
    """A JSON object that names one key twice: which copy the sender meant is unknowable, so the text is malformed."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"the key {key!r} appears twice in one JSON object")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` for json.loads: an object, or DuplicateKey where a key repeats."""
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen.add(key)
    return found


# What `exact_json` returns where the strict parse must decide (a NaN, a repeated key, anything not plain JSON).
UNDECIDED = object()
# Every digit as a 0, to find runs of 19 digits (`long_integer`).
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def long_integer(body: bytes) -> bool:
    """Whether `body` holds a run of 19 digits or more after anything but a decimal point: an integer that may need
    64 bits or more, which orjson reads as a float. (A server writes a small probability's 17 digits after a point and
    its zeros, -0.0018616351298987865: a fraction, not an integer.)"""
    digits = body.translate(_DIGITS_AS_ZEROS)
    at = digits.find(_LONG_DIGITS)
    while at >= 0:
        if at == 0 or digits[at - 1] != 0x2E:  # no "." before the run
            return True
        end = at + len(_LONG_DIGITS)
        while end < len(digits) and digits[end] == 0x30:
            end += 1
        at = digits.find(_LONG_DIGITS, end)
    return False


ESCAPES_READ = 64  # escapes `escapes_colon` reads one by one before it searches the rest of a text
_ESCAPE = b"\\u003"  # the start of a colon written as an escape (\\u003a), or of a digit or ;<=>?


def colons(data: bytes) -> int:
    """How many colons `data` holds, by bytes.count. numpy counted a 27 KB answer's in 3 µs where bytes.count took 19
    to 34 in a loop (a 2-core Xeon), but in a live request, its code out of the caches after the server's decode, the
    four counts of an answer at n_probs 8 took 73 to 76 µs of the client's CPU by numpy and 32 by bytes.count (the
    native server, 30 requests a try, twice, on a 2-core AMD EPYC, 2026-12-07)."""
    return data.count(b":")


def escapes_colon(text: bytes) -> bool:
    """Whether valid JSON `text` writes a character of U+0030..U+003F as an escape in a string ("\\u003a" is a colon):
    read escape by escape from backslash to backslash (each found by memchr; 2 µs for 27 KB with 9 escapes on a 2-core
    Xeon, where `in` takes 14), and past the first ESCAPES_READ escapes by a search for "\\u003" in the rest, which may
    also find one after an escaped backslash (a text then left to the strict parse, only slower)."""
    find = text.find
    at = find(b"\\")
    for _ in range(ESCAPES_READ):
        if at < 0:
            return False
        if text.startswith(_ESCAPE, at):
            return True
        at = find(b"\\", at + 2)  # past the escape's backslash and the character after it
    return at >= 0 and find(_ESCAPE, at) >= 0


def exact_json(body: bytes) -> Any:
    """The JSON value of `body` where it is plain JSON with no repeated key, no NaN or infinity written as such and no
    integer past 64 bits: the value `answer_json` and `strict_json` give, read by orjson and checked in about a quarter
    of the time json.loads takes with a hook per object. UNDECIDED otherwise, for them to decide.

    orjson reads an integer outside -2^63..2^64-1 as a float, of 2^63 or more, which it writes out again with an
    exponent (`1.8446744073709552e+19`: every float from 1e16 on has its "e+"). So where the value written out again
    holds no "+", every integer of the text was read as the integer it is; where it holds one (a large float, or a "+"
    in a string), `long_integer` leaves a body with 19 digits in a row after anything but a decimal point to the strict
    parse, in a string too.

    The parser keeps one copy of a repeated key, so the value is checked against the text: every colon of JSON text is
    a key's or one inside a string. Written out again, the value has one colon per key it holds and the colons of
    its strings, so where the body writes no colon as an escape (\\u003a), its count of colons exceeds the value's by
    the keys lost to repeats and the colons their copies held, and the two counts are equal only where no key
    repeats. (Numbers are read alike: the parser rounds decimal text to the nearest double as float() does.)"""
    try:
        value = orjson.loads(body)
        if isinstance(value, (dict, list, int, float)):
            written = orjson.dumps(value)
            if b"+" in written and long_integer(body):
                return UNDECIDED
            if isinstance(value, (dict, list)) and (escapes_colon(body) or colons(body) != colons(written)):
                return UNDECIDED
    except (ValueError, TypeError):  # not JSON to orjson, or a value it would not write out again
        return UNDECIDED
    return value


def answer_json(body: bytes | str) -> Any:
    """A server's JSON answer as the client reads it: DuplicateKey where an object repeats a key."""
    value = exact_json(body if isinstance(body, bytes) else body.encode("utf-8", errors="surrogatepass"))
    return json.loads(body, object_pairs_hook=unique_keys) if value is UNDECIDED else value


def strict_json(body: bytes) -> Any:
    """JSON as a recording keeps it: strict, so NaN and infinities a server sends stay as the strings it wrote.
    An object that repeats a key raises DuplicateKey: such an answer is kept as the text that came, never
    normalized to one of its copies."""
    return json.loads(body, parse_constant=lambda name: name, object_pairs_hook=unique_keys)


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
    value = exact_json(body)  # what json.loads gives, where orjson reads it
    if value is not UNDECIDED:
        return value
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
        self.inner = inner or KeptAliveTransport()

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
        try:
            body = read_bounded(response, request)  # too big or too slow: nothing is recorded
        finally:
            response.close()
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        extensions: dict[str, Any] = {READ: body}
        value = exact_json(body)
        if value is not UNDECIDED:  # the client reads this value (see `answer_json`) without parsing the body again
            entry["response"] = extensions[PARSED] = value
        else:
            constants: list[str] = []
            try:
                def constant(name: str) -> str:  # NaN, Infinity: the recording keeps them as text, the client reparses
                    constants.append(name)
                    return name

                entry["response"] = json.loads(body, parse_constant=constant, object_pairs_hook=unique_keys)
                if not constants:
                    extensions[PARSED] = entry["response"]
            except (ValueError, RecursionError):
                entry["response_text"] = body.decode("utf-8", errors="replace")
        entry["elapsed_ms"] = round(elapsed_ms, 3)
        self.sink.append(entry)
        # The body is read and decoded here: the client gets it without the headers of its travel (a gzip
        # Content-Encoding would make the client decode it a second time), where it came in any other form than this.
        headers = response.headers
        travelled = "content-encoding" in headers or "transfer-encoding" in headers
        return httpx.Response(response.status_code, headers=settled_headers(headers) if travelled else headers,
                              stream=httpx.ByteStream(body), request=request, extensions=extensions)

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
