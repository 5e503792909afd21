"""Server-sent events as llama-server streams them: blocks of `field: value` lines (`data: {json}`),
each ended by a blank line, cut out of a byte stream whatever its chunking.

`EventSplitter.feed` takes the chunks in the order they arrived, each with its arrival time, and
returns the events it completed; an event is stamped with the arrival time of the chunk that
brought its last byte (that is when a reader could first use it). Offsets count bytes from the
start of the response body, so an error can say where in the stream it happened.
"""

from __future__ import annotations

from dataclasses import dataclass

# An event ends at a blank line; the SSE standard allows LF, CRLF (and CR) line ends.
_ENDS = (b"\n\n", b"\r\n\r\n")


@dataclass(frozen=True)
class RawEvent:
    """One event's bytes, its terminating blank line included, and where and when it arrived."""

    offset: int          # byte offset of its first byte in the body
    raw: bytes
    arrived_ms: float

    @property
    def end(self) -> int:
        return self.offset + len(self.raw)


class EventSplitter:
    """Cuts events out of a byte stream; bytes after the last blank line wait for the next chunk."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._start = 0          # body offset of the buffer's first byte
        self.received = 0        # bytes fed so far

    def feed(self, chunk: bytes, arrived_ms: float) -> list[RawEvent]:
        """The events that `chunk` completes (none when it ends mid-event)."""
        self._buffer += chunk
        self.received += len(chunk)
        done: list[RawEvent] = []
        while True:
            cut = _first_end(self._buffer)
            if cut is None:
                return done
            raw = bytes(self._buffer[:cut])
            del self._buffer[:cut]
            done.append(RawEvent(self._start, raw, arrived_ms))
            self._start += len(raw)

    @property
    def pending(self) -> bytes:
        """Bytes after the last complete event: a stream that ends here was cut mid-event."""
        return bytes(self._buffer)

    @property
    def pending_offset(self) -> int:
        return self._start


def _first_end(buffer: bytearray) -> int | None:
    """The index just past the first blank line in `buffer`, or None."""
    found = [(i, len(end)) for end in _ENDS if (i := buffer.find(end)) >= 0]
    if not found:
        return None
    i, n = min(found)
    return i + n


def fields(raw: bytes) -> list[tuple[str, str]]:
    """(field, value) for each line of one event's text; comment lines (starting ':') are left out.
    A line without a colon is a field with an empty value, as the standard says. Raises
    UnicodeDecodeError for bytes that are not UTF-8."""
    found = []
    for line in raw.decode("utf-8").splitlines():
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        found.append((name, value[1:] if value.startswith(" ") else value))
    return found


def data(raw: bytes) -> str | None:
    """The event's `data` lines joined by newlines (the standard's rule); None when it has none."""
    values = [value for name, value in fields(raw) if name == "data"]
    return "\n".join(values) if values else None
