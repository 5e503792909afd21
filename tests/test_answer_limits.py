"""Answers too big, endless, trickling or compressed (bytesup.llama.client, bytesup.llama.recording): --timeout
bounds the whole answer, a size limit bounds its bytes, and one watchdog thread keeps every deadline."""

from __future__ import annotations

import json
import time

import pytest

from conftest import load_fixture
from faultkit import RawServer


def endless(wfile):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b" " * 65536
    for _ in range(2000):  # bounded: 130 MB at most, 50 ms apart
        wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        wfile.flush()
        time.sleep(0.05)


def trickle(wfile):
    wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    for _ in range(240):  # four bytes a second, for a minute at most: never a gap as long as the timeout
        wfile.write(b" ")
        wfile.flush()
        time.sleep(0.25)


@pytest.mark.parametrize("answer", [endless, trickle], ids=["endless", "trickle"])
def test_timeout_bounds_the_whole_answer(answer):
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import AnswerTooLarge, ServerTimeout
    from bytesup.llama.recording import RecordingTransport

    for transport in (None, "recording"):
        sink: list = []
        with RawServer(answer) as server:
            client = LlamaServer(server.url, timeout=1.0, transport=RecordingTransport(sink) if transport else None)
            began = time.monotonic()
            with pytest.raises((ServerTimeout, AnswerTooLarge)):
                client.completion("x", n_predict=1, n_probs=8)
            assert time.monotonic() - began < 4.0  # --timeout 1, and a little for the watchdog
            assert sink == []  # nothing recorded of an answer that never ended


def test_an_answer_past_its_limit_is_refused_and_not_recorded(monkeypatch):
    from bytesup.llama.client import LlamaServer
    from bytesup.errors import AnswerTooLarge
    from bytesup.llama.recording import RecordingTransport, answer_limit

    # One token with its eight candidates, and a text long enough to pass the limit for what was asked.
    limit = answer_limit("/completion", {"n_predict": 1, "n_probs": 8})
    probs = [{"id": 1, "token": "x", "bytes": [120], "logprob": -1.0,
              "top_logprobs": [{"id": i, "token": "x", "bytes": [120], "logprob": -3.0} for i in range(8)]}]
    body = json.dumps({"content": "x" * (limit + 1), "completion_probabilities": probs,
                       "timings": {"prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 1, "predicted_ms": 1.0}}).encode()
    assert len(body) > limit

    def big(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    sink: list = []
    with RawServer(big) as server:
        with pytest.raises(AnswerTooLarge, match="BYTESUP_MAX_ANSWER_MB"):
            LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
        assert sink == []
        monkeypatch.setenv("BYTESUP_MAX_ANSWER_MB", "100")  # the way to accept it on purpose
        done = LlamaServer(server.url, transport=RecordingTransport(sink)).completion("x", n_predict=1, n_probs=8)
        assert len(done.content) == limit + 1 and len(done.completion_probabilities) == 1 and len(sink) == 1


def test_limits_by_hand():
    from bytesup.llama.recording import answer_limit

    assert answer_limit("/completion", {"n_predict": 1, "n_probs": 8}) == 4_000_000 + 2 * (512 + 8 * 512)
    assert answer_limit("/completion", {"n_predict": 128}) == 4_000_000 + 129 * 512
    assert answer_limit("/completion", {"n_predict": -1}) == 4_000_000 + 8193 * 512
    assert answer_limit("/props", None) == 16_000_000


def test_a_gzip_answer_is_read_once_and_recorded_decoded():
    import gzip

    from bytesup.llama.client import LlamaServer
    from bytesup.llama.recording import RecordingTransport

    props = load_fixture("props")["response"]
    packed = gzip.compress(json.dumps(props).encode())

    def zipped(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(packed) + packed)

    sink: list = []
    with RawServer(zipped) as server:
        assert LlamaServer(server.url, transport=RecordingTransport(sink)).props().model_path == props["model_path"]
        assert LlamaServer(server.url).props().model_path == props["model_path"]
    assert sink[0]["response"] == props


@pytest.mark.parametrize("zipped", [False, True])
def test_a_recorded_answer_reaches_the_client_as_the_recording_read_it(monkeypatch, zipped):
    import gzip

    import httpx

    from bytesup.llama import client as client_module
    from bytesup.llama.client import LlamaServer
    from bytesup.llama.recording import READ, RecordingTransport

    props = load_fixture("props")["response"]
    body = json.dumps(props).encode()
    sent = gzip.compress(body) if zipped else body

    def answer(wfile):
        wfile.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + (b"Content-Encoding: gzip\r\n" if zipped else b"")
                    + b"Content-Length: %d\r\n\r\n" % len(sent) + sent)

    reads = []
    read_bounded = client_module.read_bounded
    monkeypatch.setattr(client_module, "read_bounded", lambda *args: reads.append(1) or read_bounded(*args))
    with RawServer(answer) as server:
        recording = RecordingTransport([])
        assert LlamaServer(server.url, transport=recording).props().model_path == props["model_path"]
        assert reads == []  # the client took the body the recording read
        response = recording.handle_request(httpx.Request("GET", server.url + "/props"))
        assert response.extensions[READ] == body and response.read() == body
        # a decoded body travels on without the headers of its travel; one that came as it is keeps them
        assert ("content-encoding" in response.headers, "content-length" in response.headers) == (False, not zipped)
        assert LlamaServer(server.url).props().model_path == props["model_path"] and reads == [1]


def test_one_thread_keeps_every_deadline_and_a_cancelled_one_never_fires():
    import socket as socketlib
    import threading

    from bytesup.llama import recording

    a, b = socketlib.socketpair()
    c, d = socketlib.socketpair()
    try:
        before = threading.active_count()
        kept = recording._WATCHDOG.arm(a, time.perf_counter() + 0.3)
        cancelled = recording._WATCHDOG.arm(c, time.perf_counter() + 0.1)
        cancelled.cancel()
        time.sleep(0.6)
        assert threading.active_count() <= before + 1  # one thread for all of them, not one per deadline
        assert kept.sock is None and a.recv(1) == b""  # shut at its deadline: a read returns at once
        d.sendall(b"x")
        assert c.recv(1) == b"x"  # the cancelled one's socket still works
    finally:
        for s in (a, b, c, d):
            s.close()
