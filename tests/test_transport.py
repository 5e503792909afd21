"""The clients' transport (bytesup.llama.transport): kept-alive sockets, a stale one replaced before anything is
sent on it, never a request sent twice once it went out, the client's timeouts, IPv6, chunked answers."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from bytesup.errors import AnswerTooLarge, BytesupError, ServerTimeout, ServerUnreachable
from bytesup.llama import transport
from bytesup.llama.client import LlamaServer
from bytesup.llama.recording import LIMITS, CutShort, RecordingTransport, read_bounded
from bytesup.llama.transport import KeptAliveTransport

OK = json.dumps({"status": "ok"}).encode()


def answer(body: bytes = OK, *head: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
            + b"".join(h + b"\r\n" for h in head) + b"\r\n" + body)


class KeptServer:
    """A loopback server that reads request after request on each connection it accepts and writes what
    `reply(n)` gives for the n-th request it read (counted from 0 over all connections): bytes, or a list of bytes
    and of seconds to wait. None, as the reply or in its list, closes the connection there without a word more.
    It notes each request as (connection number, request line, headers)."""

    def __init__(self, reply, family: int = socket.AF_INET, host: str = "127.0.0.1"):
        self.reply = reply
        self.requests: list[tuple[int, str, dict[str, str]]] = []
        self.connections = 0
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind((host, 0))
        self.listener.listen(8)
        port = self.listener.getsockname()[1]
        self.url = f"http://[{host}]:{port}" if family == socket.AF_INET6 else f"http://{host}:{port}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                number = self.connections
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        reader = conn.makefile("rb")
        try:
            while line := reader.readline():
                headers = {}
                while (h := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = h.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                reader.read(int(headers.get("content-length") or 0))
                with self.lock:
                    n = len(self.requests)
                    self.requests.append((number, line.decode("latin-1").strip(), headers))
                data = self.reply(n)
                if data is None:
                    return
                for part in data if isinstance(data, list) else [data]:
                    if part is None:
                        return
                    if isinstance(part, float):
                        time.sleep(part)
                    else:
                        conn.sendall(part)
        except OSError:
            pass
        finally:
            reader.close()
            conn.close()

    def __enter__(self) -> "KeptServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()


def test_requests_one_after_another_share_one_connection():
    with KeptServer(lambda n: answer()) as server, LlamaServer(server.url) as client:
        for _ in range(3):
            assert client.health().status == "ok"
    assert server.connections == 1 and [r[0] for r in server.requests] == [0, 0, 0]


def test_a_kept_connection_the_server_closed_is_replaced_before_anything_is_sent_on_it():
    # The first answer, then the server drops the connection without a word, as llama-server does past its idle limit.
    with KeptServer(lambda n: [answer(), None] if n == 0 else answer()) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok"
        kept = next(iter(client._transport._idle.values()))[0]
        deadline = time.monotonic() + 5
        while transport._still_open(kept) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.health().status == "ok"
    assert server.connections == 2 and [r[0] for r in server.requests] == [0, 1]


def test_a_request_sent_is_never_sent_again_when_the_connection_closes_without_an_answer():
    with KeptServer(lambda n: answer() if n == 0 else None) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok"
        with pytest.raises(ServerUnreachable, match="closed it without an answer"):
            client.completion("x", n_predict=1)
    assert len(server.requests) == 2  # the /completion reached the server once, and was not repeated


def test_a_request_whose_sending_fails_on_a_kept_socket_goes_once_more_on_a_fresh_one(monkeypatch):
    with KeptServer(lambda n: answer()) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok"
        kept = next(iter(client._transport._idle.values()))[0]
        kept.shutdown(socket.SHUT_WR)  # sending on it fails (broken pipe) before a byte leaves
        monkeypatch.setattr(transport, "_still_open", lambda sock: True)  # as if it closed just after the check
        assert client.health().status == "ok"
    assert server.connections == 2 and len(server.requests) == 2


def test_an_answer_that_asks_to_close_leaves_no_connection_kept():
    with KeptServer(lambda n: answer(OK, b"Connection: close")) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok"
        assert client.health().status == "ok"
        assert not any(client._transport._idle.values())
    assert server.connections == 2


def test_a_chunked_answer_is_read_whole_and_its_connection_kept():
    body = json.dumps({"status": "ok", "pad": "x" * 5000}).encode()
    chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 700]), body[i:i + 700]) for i in range(0, len(body), 700))
               + b"0\r\n\r\n")
    with KeptServer(lambda n: [chunked[:900], 0.05, chunked[900:]]) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok" and client.health().status == "ok"
    assert server.connections == 1


def test_a_body_that_comes_in_pieces_is_read_whole_and_its_connection_kept():
    body = json.dumps({"status": "ok", "pad": "é" * 40000}).encode()
    head = answer(body)[:-len(body)]
    pieces = [head + body[:1000], 0.05, body[1000:1001], 0.05, body[1001:70000], 0.05, body[70000:]]
    with KeptServer(lambda n: pieces) as server, LlamaServer(server.url) as client:
        for _ in range(2):
            request = client._request("GET", "/health", None, {LIMITS: {"max_bytes": len(body), "deadline": None}})
            response = client._open(request)
            assert isinstance(response.stream, transport.AnswerBody) and response.stream.length == len(body)
            assert read_bounded(response, request) == body and response.stream.received == len(body)
            response.close()
    assert server.connections == 1 and len(server.requests) == 2


def test_a_body_cut_short_in_pieces_says_how_much_came_and_is_not_kept():
    with KeptServer(lambda n: [answer(b"x" * 100)[:-100] + b"x" * 30, 0.05, b"x" * 20, None]) as server, \
            LlamaServer(server.url) as client:
        request = client._request("GET", "/health", None, {LIMITS: {}})
        response = client._open(request)
        with pytest.raises(CutShort, match="received 50 bytes, expected 100") as cut:
            read_bounded(response, request)
        assert cut.value.received == 50
        response.close()
        assert not any(client._transport._idle.values())


def test_a_body_past_its_limit_is_refused_by_its_length_before_it_is_read():
    with KeptServer(lambda n: [answer(b"x" * 100)[:-100], 5.0]) as server, LlamaServer(server.url) as client:
        request = client._request("GET", "/health", None, {LIMITS: {"max_bytes": 99}})
        response = client._open(request)
        began = time.monotonic()
        with pytest.raises(AnswerTooLarge):
            read_bounded(response, request)
        assert time.monotonic() - began < 1.0 and not any(client._transport._idle.values())


def test_a_body_that_trickles_ends_at_the_deadline_not_at_the_read_timeout():
    pieces = [answer(b"x" * 100)[:-100]] + [b"x", 0.1] * 60
    with KeptServer(lambda n: pieces) as server, LlamaServer(server.url, timeout=10) as client:
        request = client._request("GET", "/health", None, {LIMITS: {"deadline": time.perf_counter() + 0.5}})
        response = client._open(request)
        began = time.monotonic()
        with pytest.raises(httpx.ReadTimeout, match="did not end within the limit for one answer"):
            read_bounded(response, request)
        assert 0.3 < time.monotonic() - began < 2.0


def test_the_api_key_and_the_request_line_go_out_as_written():
    with KeptServer(lambda n: answer()) as server, LlamaServer(server.url, api_key="s3cret") as client:
        with pytest.raises(BytesupError):
            client.completion("x", n_predict=1)  # the answer is no completion: only the request matters here
    _, line, headers = server.requests[0]
    assert line == "POST /completion HTTP/1.1" and headers["authorization"] == "Bearer s3cret"
    assert headers["content-type"] == "application/json" and headers["host"] == server.url.split("//")[1]


@pytest.mark.parametrize("url", ["http://127.0.0.1:8099", "http://[::1]:8404/", "http://localhost"])
@pytest.mark.parametrize("method, payload", [("POST", {"prompt": "é", "n_predict": 2}), ("GET", None), ("POST", None)])
def test_a_request_carries_the_headers_and_body_httpx_would_give_it(url, method, payload):
    client = LlamaServer(url, api_key="k")
    made = client._request(method, "/completion", payload, {"bytesup.limits": {}})
    body = None if payload is None else json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    headers = client._http.headers.copy()
    if payload is not None:
        headers["Content-Type"] = "application/json"
    httpx_made = httpx.Request(method, made.url, headers=headers, content=body)
    assert made.headers.multi_items() == httpx_made.headers.multi_items() and made.content == httpx_made.content
    assert made.extensions["bytesup.limits"] == {} and made.extensions["timeout"] == client._http.timeout.as_dict()


def test_an_answer_that_does_not_come_is_a_timeout():
    with KeptServer(lambda n: [30.0]) as server, LlamaServer(server.url, timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(ServerTimeout):
            client.health()
    assert time.monotonic() - started < 5


def test_nothing_listening_is_unreachable():
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    with pytest.raises(ServerUnreachable, match="ConnectError"):
        LlamaServer(f"http://127.0.0.1:{port}", timeout=2).health()


def test_an_ipv6_server_is_reached():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        server = KeptServer(lambda n: answer(), socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with server, LlamaServer(server.url) as client:
        assert client.health().status == "ok"
    assert server.requests[0][2]["host"] == server.url.split("//")[1]


def test_requests_sent_together_each_get_a_socket_of_their_own():
    with KeptServer(lambda n: [0.2, answer()]) as server, LlamaServer(server.url) as client:
        threads = [threading.Thread(target=client.health) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(server.requests) == 3 and server.connections == 3
        assert client.health().status == "ok" and server.connections == 3  # a kept one served the fourth


def test_the_recording_records_through_it_and_replays_alike():
    sink: list = []
    with KeptServer(lambda n: answer()) as server:
        with LlamaServer(server.url, transport=RecordingTransport(sink)) as client:
            assert client.health().status == "ok" and client.health().status == "ok"
    assert [e["response"] for e in sink] == [{"status": "ok"}] * 2 and server.connections == 1


def test_https_goes_through_httpx_own_transport(monkeypatch):
    seen = []

    def handle(self, request):
        seen.append(str(request.url))
        return httpx.Response(200, json={"status": "ok"})

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle)
    assert LlamaServer("https://llama.example:8443").health().status == "ok"
    assert seen == ["https://llama.example:8443/health"]


def test_a_closed_transport_keeps_no_socket():
    with KeptServer(lambda n: answer()) as server:
        kept = KeptAliveTransport()
        with httpx.Client(transport=kept) as client:
            assert client.get(server.url + "/health").json() == {"status": "ok"}
        assert kept._idle == {}


def test_a_header_with_a_line_break_is_never_sent():
    with KeptServer(lambda n: answer()) as server, LlamaServer(server.url, api_key="k\r\nX-Injected: 1") as client:
        with pytest.raises(ServerUnreachable, match="LocalProtocolError"):
            client.health()
    assert server.requests == []


def test_an_answer_without_a_length_ends_with_its_connection():
    head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
    with KeptServer(lambda n: [head, 0.05, OK, None]) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok" and client.health().status == "ok"
        assert not any(client._transport._idle.values())
    assert server.connections == 2


def test_an_informational_answer_before_the_answer_is_passed_over():
    with KeptServer(lambda n: b"HTTP/1.1 100 Continue\r\n\r\n" + answer()) as server, LlamaServer(server.url) as client:
        assert client.health().status == "ok" and client.health().status == "ok"
    assert server.connections == 1
