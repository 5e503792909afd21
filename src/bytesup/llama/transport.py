"""`KeptAliveTransport`: the httpx transport a run reaches llama-server with, plain HTTP/1.1 on kept-alive sockets.

httpx's own transport (httpcore and h11, both pure Python) costs about 1.5 ms per request more than `http.client`
on a slow machine, which is more than a small model takes for a token. This one writes each request in one
`sendall` and reads the answer with the least work HTTP/1.1 allows: the status line, the header lines split at
their colon, then the body as its framing says (Content-Length, chunked, or to the connection's end). Everything
above the transport stays httpx.

- One socket per request at a time: an idle socket is kept for the next request to the same host and port, so
  threads sending at once each get one of their own.
- The timeouts are the client's (`timeout` extension): `connect` to open a socket, `write` to send, `read` for each
  wait on the answer.
- A kept socket the server has closed meanwhile (llama-server closes an idle one after a few seconds) is seen
  before anything is sent on it, and a fresh one is opened instead. A request whose sending fails on a kept socket
  is sent again once on a fresh one: the server read nothing of it. Once a request is sent, a connection that
  closes without an answer is an error (`RemoteProtocolError`), never a second request: a /completion is not free.
- A body that ends before its Content-Length or its last chunk raises `RemoteProtocolError` after the bytes that
  came; a socket is kept only after its answer was read to the end and the server did not ask to close it.
- A body whose Content-Length says how much comes can be read whole in one call (`AnswerBody.whole`), each wait for
  more cut at the answer's deadline as well as at the read timeout: the client reads its answers so, and a stream
  chunk by chunk as it arrives.
- `https://` URLs, and request bodies sent in chunks, go through httpx's own transport.
"""

from __future__ import annotations

import io
import select
import socket
import threading
import time
from typing import Any, Iterator

import httpx

# The most bytes asked of the socket per read: a streamed answer comes chunk by chunk as it arrives.
_READ = 1 << 16
# The longest status, header or chunk-size line read, and the most header lines (as http.client has them).
_MAX_LINE = 65536
_MAX_HEADERS = 100


class _Socket:
    """The `network_stream` extension of a response: what the watchdog needs to shut the socket at a deadline."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def get_extra_info(self, name: str) -> Any:
        return self._sock if name == "socket" else None


def _still_open(sock: socket.socket) -> bool:
    """Whether a kept socket can carry another request: nothing to read on it (a closed one reads as end of file)."""
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


class KeptAliveTransport(httpx.BaseTransport):
    """httpx's `BaseTransport` for http:// URLs, keeping sockets alive between requests."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[socket.socket]] = {}
        self._lock = threading.Lock()
        self._fallback: httpx.HTTPTransport | None = None
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http" or "transfer-encoding" in request.headers:
            if self._fallback is None:
                self._fallback = httpx.HTTPTransport()
            return self._fallback.handle_request(request)
        timeouts = request.extensions.get("timeout") or {}
        where = (url.host, url.port or 80)
        fields = request.headers.raw
        head = b"".join([request.method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\n",
                         *[b"%s: %s\r\n" % pair for pair in fields], b"\r\n"])
        if head.count(b"\n") != len(fields) + 2 or head.count(b"\r") != len(fields) + 2:
            raise httpx.LocalProtocolError("a header name or value holds a line break", request=request)
        sock = self._send(where, head + request.read(), timeouts)
        reader = sock.makefile("rb")
        try:
            sock.settimeout(timeouts.get("read"))
            status, reason, headers, framing, length, keep = _read_head(reader, request.method)
        except BaseException as exc:
            # Both: the socket's file descriptor stays open while the reader made on it is (and the traceback that
            # holds it may live on through a whole run's cleanup, with the server waiting on the connection).
            reader.close()
            sock.close()
            raise _translated(exc, request) from None
        body = AnswerBody(self, where, sock, reader, request, framing, length, keep)
        return httpx.Response(status, headers=headers, stream=body,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason,
                                          "network_stream": _Socket(sock)})

    def _send(self, where: tuple[str, int], message: bytes, timeouts: dict[str, float | None]) -> socket.socket:
        """A socket with `message` sent on it: a kept one, or a fresh one where none is kept or sending on it failed."""
        sock = self._kept(where)
        if sock is not None:
            try:
                sock.settimeout(timeouts.get("write"))
                sock.sendall(message)
                return sock
            except BaseException as exc:
                sock.close()
                if isinstance(exc, TimeoutError) or not isinstance(exc, OSError):
                    raise _translated(exc, None, writing=True) from None
                # Closed by the server meanwhile (a broken pipe, a reset): it read nothing of this request.
        try:
            sock = socket.create_connection(where, timeout=timeouts.get("connect"))
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc)) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeouts.get("write"))
            sock.sendall(message)
        except BaseException as exc:
            sock.close()
            raise _translated(exc, None, writing=True) from None
        return sock

    def _kept(self, where: tuple[str, int]) -> socket.socket | None:
        while True:
            with self._lock:
                kept = self._idle.get(where)
                sock = kept.pop() if kept else None
            if sock is None or _still_open(sock):
                return sock
            sock.close()

    def _keep(self, where: tuple[str, int], sock: socket.socket) -> None:
        with self._lock:
            if not self._closed:
                self._idle.setdefault(where, []).append(sock)
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for kept in idle.values():
            for sock in kept:
                sock.close()
        if self._fallback is not None:
            self._fallback.close()


class _Broken(Exception):
    """An answer that breaks HTTP/1.1 (`RemoteProtocolError` to the client)."""


# How a body is delimited.
_LENGTH, _CHUNKED, _TO_CLOSE = "length", "chunked", "to close"


def _line(reader: io.BufferedReader, what: str) -> bytes:
    line = reader.readline(_MAX_LINE + 1)
    if len(line) > _MAX_LINE:
        raise _Broken(f"a {what} line longer than {_MAX_LINE} bytes")
    return line


def _read_head(reader: io.BufferedReader, method: str) -> tuple[int, bytes, list[tuple[bytes, bytes]], str, int, bool]:
    """(status, reason, headers, framing, length, keep-alive) of an answer, after any informational (1xx) one."""
    while True:
        line = _line(reader, "status")
        if not line:
            raise _Broken("Server disconnected without sending a response.")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise _Broken(f"not an HTTP/1.1 status line: {line[:100]!r}")
        status = int(parts[1])
        headers: list[tuple[bytes, bytes]] = []
        while True:
            line = _line(reader, "header")
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise _Broken("the connection closed in the middle of the headers")
            if len(headers) >= _MAX_HEADERS:
                raise _Broken(f"more than {_MAX_HEADERS} header lines")
            if line[0] in b" \t" and headers:  # a folded line continues the header before it
                name, value = headers[-1]
                headers[-1] = (name, value + b" " + line.strip())
                continue
            name, colon, value = line.partition(b":")
            if not colon or not name.strip():
                raise _Broken(f"a header line without a name: {line[:100]!r}")
            headers.append((name.strip(), value.strip()))
        if status < 200 and status != 101:
            continue
        break
    reason = parts[2].strip() if len(parts) > 2 else b""
    connection = b""
    coding: bytes | None = None  # the last transfer coding named
    lengths = set()
    for name, value in headers:
        lower = name.lower()
        if lower == b"connection":
            connection += b"," + value.lower()
        elif lower == b"transfer-encoding":
            coding = value.lower().rsplit(b",", 1)[-1].strip()
        elif lower == b"content-length":
            lengths.add(value)
    keep = (b"close" not in connection) if parts[0] != b"HTTP/1.0" else (b"keep-alive" in connection)
    if method == "HEAD" or status in (204, 304):
        return status, reason, headers, _LENGTH, 0, keep
    if coding is not None:  # a transfer coding outranks a Content-Length; one that ends unchunked ends at the close
        return (status, reason, headers, _CHUNKED, 0, keep) if coding == b"chunked" else \
            (status, reason, headers, _TO_CLOSE, 0, False)
    if lengths:
        length = lengths.pop()
        if lengths or not length.isdigit():
            raise _Broken(f"a Content-Length that is no single number: {sorted(lengths | {length})!r}")
        return status, reason, headers, _LENGTH, int(length), keep
    return status, reason, headers, _TO_CLOSE, 0, False


def _translated(exc: BaseException, request: httpx.Request | None, writing: bool = False) -> BaseException:
    """The httpx error for what went wrong on the socket (any other exception as it is)."""
    if isinstance(exc, _Broken):
        return httpx.RemoteProtocolError(str(exc), request=request)
    if isinstance(exc, TimeoutError):
        return (httpx.WriteTimeout if writing else httpx.ReadTimeout)(str(exc) or "timed out", request=request)
    if isinstance(exc, OSError):
        return (httpx.WriteError if writing else httpx.ReadError)(f"{type(exc).__name__}: {exc}", request=request)
    return exc


class AnswerBody(httpx.SyncByteStream):
    """An answer's body as it arrives: each read gives what has come, up to the end its framing sets; or, where its
    Content-Length tells how much comes, the whole of it at once (`whole`)."""

    def __init__(self, transport: KeptAliveTransport, where: tuple[str, int], sock: socket.socket,
                 reader: io.BufferedReader, request: httpx.Request, framing: str, length: int, keep: bool):
        self._transport, self._where, self._sock, self._reader = transport, where, sock, reader
        self._request, self._framing, self._length, self._keep = request, framing, length, keep
        self._ended = False
        self._closed = False
        self.received = 0  # bytes of the body `whole` has read

    @property
    def length(self) -> int | None:
        """The body's length as its Content-Length gives it; None where it comes in chunks or until the close."""
        return self._length if self._framing == _LENGTH else None

    def whole(self, deadline: float | None = None) -> bytes | None:
        """The whole body in one piece, where its Content-Length says how much comes and nothing of it was read yet;
        None otherwise (then read it chunk by chunk). Each wait for more bytes ends at the read timeout and at
        `deadline` (a time.perf_counter() value), whichever comes first, so a body that trickles in past the deadline
        fails there (ReadTimeout), with no thread to watch it. A body cut short raises RemoteProtocolError, a reset
        ReadError, after the `received` bytes."""
        if self._framing != _LENGTH or self._ended or self._closed or self.received:
            return None
        sock, read1, left = self._sock, self._reader.read1, self._length
        parts = []
        try:
            timeout = sock.gettimeout()  # the read timeout, set for the answer's head
            while left:
                if deadline is not None:
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0:
                        raise TimeoutError("the answer did not end within the limit for one answer")
                    sock.settimeout(remaining if timeout is None else min(timeout, remaining))
                data = read1(left)
                if not data:
                    raise _Broken(f"peer closed connection without sending complete message body: received "
                                  f"{self.received} bytes, expected {self._length}")
                parts.append(data)
                self.received += len(data)
                left -= len(data)
        except BaseException as exc:
            self.close()
            raise _translated(exc, self._request) from None
        self._ended = True
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunked() if self._framing == _CHUNKED else self._delimited()
        except BaseException as exc:
            self.close()
            raise _translated(exc, self._request) from None
        self._ended = True

    def _delimited(self) -> Iterator[bytes]:
        read, left, received = self._reader.read1, self._length, 0
        while left or self._framing == _TO_CLOSE:
            data = read(min(left, _READ) if self._framing == _LENGTH else _READ)
            if not data:
                if self._framing == _TO_CLOSE:
                    return
                raise _Broken(f"peer closed connection without sending complete message body: received {received} "
                              f"bytes, expected {self._length}")
            received += len(data)
            left -= len(data)
            yield data

    def _chunked(self) -> Iterator[bytes]:
        read, received = self._reader.read1, 0
        while True:
            line = _line(self._reader, "chunk size")
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise _Broken(f"peer closed connection without sending complete message body: received {received} "
                              f"bytes, then {line[:40]!r} where a chunk's size belongs") from None
            if size < 0:
                raise _Broken(f"a negative chunk size: {line[:40]!r}")
            if size == 0:
                while _line(self._reader, "trailer") not in (b"\r\n", b"\n", b""):
                    pass
                return
            while size:
                data = read(min(size, _READ))
                if not data:
                    raise _Broken(f"peer closed connection without sending complete message body: received {received} "
                                  "bytes, in the middle of a chunk")
                received += len(data)
                size -= len(data)
                yield data
            if self._reader.readline(3) not in (b"\r\n", b"\n"):
                raise _Broken(f"a chunk not followed by a line end, after {received} bytes")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        if self._ended and self._keep:
            self._transport._keep(self._where, self._sock)
        else:
            self._sock.close()
