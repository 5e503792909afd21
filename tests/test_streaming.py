"""Streamed /completion: SSE parsed into typed events stamped on arrival, recorded and replayed.

The normal path runs on streams recorded from the real embedded engine by
scripts/record_stream_fixtures.py; the broken streams are made here, on purpose, by a fake
server (cut, not JSON, no final event, never ending, silent)."""

from __future__ import annotations

import json

import httpx
import pytest

from bytesup.llama import sse
from bytesup.llama.client import LlamaServer
from bytesup.errors import ServerTimeout, StreamError
from bytesup.llama.responses import StreamedCompletion, TokenArrival
from bytesup.llama.recording import RecordingTransport, ReplayTransport

from conftest import load_fixture
from fakes import StreamingFakeServer


def recorded(name: str) -> dict:
    return load_fixture(f"stream_{name}")


def body(entry: dict) -> bytes:
    return b"".join(e["text"].encode("utf-8") for e in entry["stream"])


def replayed(entry: dict) -> StreamedCompletion:
    request = {k: v for k, v in entry["request"].items() if k not in ("prompt", "stream")}
    with LlamaServer("http://replay", transport=ReplayTransport([entry])) as server:
        return server.completion_stream(entry["request"]["prompt"], **request)


def chunked(data: bytes, size: int) -> httpx.MockTransport:
    """The recorded body again, in pieces of `size` bytes."""
    def handle(request: httpx.Request) -> httpx.Response:
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Pieces(pieces))
    return httpx.MockTransport(handle)


class _Pieces(httpx.SyncByteStream):
    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces

    def __iter__(self):
        yield from self.pieces


# --- the recorded streams ------------------------------------------------------------------

def test_one_event_per_token_then_the_final_one_with_timings():
    entry = recorded("cat")["streamed"]
    done = replayed(entry)
    n = entry["request"]["n_predict"]
    assert done.timings.predicted_n == n
    assert len(done.events) == n + 1
    assert [a.tokens for a in done.arrivals()] == list(range(1, n + 1))
    final = done.events[-1].event
    assert final.stop and final.timings is not None and final.content == ""
    assert all(len(e.event.completion_probabilities) == 1 for e in done.events[:-1])


def test_replay_gives_the_recorded_arrival_times_and_offsets():
    entry = recorded("cat")["streamed"]
    done = replayed(entry)
    assert [e.arrived_ms for e in done.events] == [e["arrived_ms"] for e in entry["stream"]]
    sizes = [len(e["text"].encode("utf-8")) for e in entry["stream"]]
    assert [e.offset for e in done.events] == [sum(sizes[:i]) for i in range(len(sizes))]
    assert done.ended_ms == entry["stream"][-1]["arrived_ms"]
    times = [e.arrived_ms for e in done.events]
    assert times == sorted(times)


def test_streamed_text_and_tokens_match_the_plain_answer():
    fixture = recorded("cat")
    done, plain = replayed(fixture["streamed"]), fixture["plain"]["response"]
    assert done.content == plain["content"]
    assert [t for e in done.events for t in e.event.tokens] == [p["id"] for p in plain["completion_probabilities"]]
    assert done.timings.prompt_n == plain["timings"]["prompt_n"]


def test_tokens_held_back_mid_character_arrive_together():
    """Each 🦙 is three tokens; the server sends none of them until the character is complete,
    so one event brings three tokens, and the two tokens of an unfinished character at the end
    come with the final event, with no text."""
    fixture = recorded("llama_emoji")
    done, plain = replayed(fixture["streamed"]), fixture["plain"]["response"]
    n = plain["timings"]["predicted_n"]
    assert done.timings.predicted_n == n
    counts = [a.tokens for a in done.arrivals()]
    assert counts[-1] == n and all(b - a >= 1 for a, b in zip([0, *counts], counts, strict=False))
    assert max(b - a for a, b in zip([0, *counts], counts, strict=False)) > 1
    whole = "".join(ch for ch in plain["content"] if ch != "\ufffd")
    assert done.content == whole and "🦙" in done.content
    for e in done.events[:-1]:
        assert bytes(e.event.completion_probabilities[0].bytes or []).decode("utf-8") == e.event.content


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_any_chunking_gives_the_same_events(size):
    """The recorded bytes fed again in small pieces: an emoji's four bytes split over chunks are
    joined before decoding, and every event is the same."""
    for name in ("llama_emoji", "cat"):
        entry = recorded(name)["streamed"]
        request = {k: v for k, v in entry["request"].items() if k not in ("prompt", "stream")}
        with LlamaServer("http://mock", transport=chunked(body(entry), size)) as server:
            again = server.completion_stream(entry["request"]["prompt"], **request)
        first = replayed(entry)
        assert [(e.offset, e.event) for e in again.events] == [(e.offset, e.event) for e in first.events]
        assert again.content == first.content


def test_recording_a_stream_writes_one_line_that_replays_the_same():
    entry = recorded("cat")["streamed"]
    sink: list[dict] = []
    request = {k: v for k, v in entry["request"].items() if k not in ("prompt", "stream")}
    inner = ReplayTransport([entry])
    with LlamaServer("http://replay", transport=RecordingTransport(sink, inner=inner)) as server:
        done = server.completion_stream(entry["request"]["prompt"], **request)
    assert len(sink) == 1
    line = json.loads(json.dumps(sink[0]))
    assert [e["text"] for e in line["stream"]] == [e["text"] for e in entry["stream"]]
    assert "stream_tail" not in line and "stream_error" not in line and line["request"]["stream"] is True
    # The client stamped with the recording's times, so the recorded line replays the same record.
    assert [e.arrived_ms for e in done.events] == [e["arrived_ms"] for e in line["stream"]]
    assert replayed(line) == done


def test_event_splitter_keeps_offsets_across_chunks():
    splitter = sse.EventSplitter()
    assert splitter.feed(b"data: {}\n", 1.0) == []
    first = splitter.feed(b"\ndata: {\"a\"", 2.0)
    assert [(e.offset, e.raw, e.arrived_ms) for e in first] == [(0, b"data: {}\n\n", 2.0)]
    assert splitter.pending == b'data: {"a"' and splitter.pending_offset == 10
    rest = splitter.feed(b": 1}\r\n\r\n: comment\n\n", 3.0)
    assert [(e.offset, e.arrived_ms) for e in rest] == [(10, 3.0), (28, 3.0)]
    assert sse.data(rest[0].raw) == '{"a": 1}' and sse.data(rest[1].raw) is None
    assert sse.data(b"data: one\ndata: two\n\n") == "one\ntwo"


# --- broken streams, on purpose --------------------------------------------------------------

def events(name: str = "cat") -> list[bytes]:
    return [e["text"].encode("utf-8") for e in recorded(name)["streamed"]["stream"]]


def ask(url: str, timeout: float = 10.0) -> StreamedCompletion:
    with LlamaServer(url, timeout=timeout) as server:
        return server.completion_stream("The cat sat on the", n_predict=16)


def test_a_stream_cut_mid_event_names_the_offset():
    parts = events()
    half = parts[2][: len(parts[2]) // 2]
    with StreamingFakeServer([parts[0], parts[1], half], chunked=False) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url)
    assert exc.value.offset == len(parts[0]) + len(parts[1])
    assert "middle of an event" in str(exc.value) and fake.url in str(exc.value)


def test_a_connection_cut_mid_chunk_names_the_offset():
    parts = events()
    with StreamingFakeServer([parts[0], parts[1][:40]], cut=True) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url)
    assert exc.value.offset == len(parts[0]) + 40
    assert "broke off" in str(exc.value) and f"byte {len(parts[0]) + 40:,}" in str(exc.value)


def test_an_event_that_is_not_json_names_the_offset():
    parts = events()
    broken = parts[1].replace(b'"content"', b"content", 1)
    with StreamingFakeServer([parts[0], broken, *parts[2:]]) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url)
    assert exc.value.offset == len(parts[0])
    assert "not JSON" in str(exc.value)


def test_a_stream_without_its_final_event_fails():
    parts = events()
    with StreamingFakeServer(parts[:-1]) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url)
    assert exc.value.offset == sum(len(p) for p in parts[:-1])
    assert "without its final event" in str(exc.value) and f"{len(parts) - 1} event(s)" in str(exc.value)


def test_a_stream_that_never_ends_fails_at_the_timeout():
    parts = events()
    with StreamingFakeServer([parts[0]], forever=b": still here\n\n", every_s=0.02) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url, timeout=0.5)
    assert "had not ended 0.5 s" in str(exc.value) and exc.value.offset > len(parts[0])


@pytest.mark.parametrize("recording", [False, True])
def test_a_stream_that_goes_silent_fails_at_the_timeout(recording):
    """The watchdog shuts the socket at the deadline, through the recording transport too."""
    parts = events()
    with StreamingFakeServer([parts[0], 30.0, *parts[1:]]) as fake:
        sink: list[dict] = []
        with LlamaServer(fake.url, timeout=0.5, transport=RecordingTransport(sink) if recording else None) as server:
            with pytest.raises(StreamError) as exc:
                server.completion_stream("The cat sat on the", n_predict=16)
    assert "had not ended 0.5 s" in str(exc.value) and exc.value.offset == len(parts[0])
    if recording:
        assert [e["text"] for e in sink[0]["stream"]] == [parts[0].decode("utf-8")]
        assert sink[0]["stream_error"] in ("ReadError", "RemoteProtocolError")


def test_a_stream_that_stalls_after_nearly_the_whole_timeout_still_ends_there():
    """A byte just before the deadline, then silence: the limit counts from sending, not from the last byte."""
    parts = events()
    with StreamingFakeServer([parts[0], 0.4, b"data: {", 30.0]) as fake:
        with pytest.raises(StreamError) as exc:
            ask(fake.url, timeout=0.6)
    assert "had not ended 0.6 s" in str(exc.value) and exc.value.offset == len(parts[0]) + len(b"data: {")


def test_no_answer_at_all_is_a_timeout():
    with StreamingFakeServer([]) as fake:
        fake.httpd.RequestHandlerClass.do_POST = lambda self: fake.stop.wait(30)  # never answers
        with pytest.raises(ServerTimeout):
            ask(fake.url, timeout=0.5)


def test_arrivals_count_tokens_from_tokens_predicted():
    done = replayed(recorded("llama_emoji")["streamed"])
    assert done.arrivals()[0] == TokenArrival(3, done.events[0].arrived_ms)
