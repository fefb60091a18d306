"""Server-sent events, as streamable HTTP carries JSON-RPC messages in them: one
event per message (``event: message``, its JSON on one ``data:`` line), an ``id``
for resumption, a ``retry`` hint; and the parser for reading them back.

The parser splits lines on CR, LF and CRLF only (the SSE grammar): not on the other
characters :meth:`str.splitlines` treats as line ends (U+2028 in a JSON string is
text, not a line end), and it refuses an event over ``max_event_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["EventTooLarge", "SseEvent", "SseParser", "comment", "event"]

_NEWLINE: Final = b"\n"


def event(data: bytes, event_id: str | None = None, *, retry_ms: int | None = None) -> bytes:
    """One event: ``data`` is one line of JSON (a trailing newline is dropped), or
    empty for a priming event that carries only its ``id``."""
    parts: list[bytes] = []
    if event_id is not None:
        parts.append(b"id: " + event_id.encode("ascii") + _NEWLINE)
    if retry_ms is not None:
        parts.append(b"retry: %d\n" % retry_ms)
    if data:
        parts.append(b"event: message\ndata: " + data.rstrip(b"\r\n") + _NEWLINE)
    else:
        parts.append(b"data: \n")
    return b"".join(parts) + _NEWLINE


def comment(text: str = "") -> bytes:
    """A comment line (a keep-alive: readers ignore it)."""
    return b": " + text.encode("ascii", "replace") + b"\n\n"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One event as read: its ``data`` (the ``data:`` lines joined by newlines), the
    ``event`` type (``message`` when unnamed), its ``id`` and ``retry`` (ms), if any."""

    data: bytes
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class EventTooLarge(ValueError):
    """An event (or a line) grew past the limit."""


class SseParser:
    """Feed it the bytes of a stream as they come; it returns the events they
    complete. ``last_id`` is the stream's last event id (what ``Last-Event-ID``
    resumes from) and ``retry`` the last reconnection delay asked for (ms)."""

    __slots__ = ("_buffer", "_data", "_event", "_limit", "_skip_lf", "last_id", "retry")

    def __init__(self, max_event_bytes: int) -> None:
        self._limit = max_event_bytes
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._event = ""
        self._skip_lf = False
        self.last_id: str | None = None
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        buffer = self._buffer
        buffer += chunk
        start = 0
        while True:
            cr, lf = buffer.find(b"\r", start), buffer.find(b"\n", start)
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + 1
            if buffer[end] == 0x0D:  # CR: a following LF belongs to it
                if start < len(buffer):
                    if buffer[start] == 0x0A:
                        start += 1
                else:
                    self._skip_lf = True  # a CRLF split between two chunks
            done = self._line(line)
            if done is not None:
                events.append(done)
        del buffer[:start]
        if len(buffer) > self._limit:
            raise EventTooLarge(f"a line over {self._limit} bytes")
        return events

    def _line(self, line: bytes) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            if sum(len(part) + 1 for part in self._data) > self._limit:
                raise EventTooLarge(f"an event over {self._limit} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self.last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> SseEvent | None:
        data, name = self._data, self._event or "message"
        self._data, self._event = [], ""
        if not data:
            return None
        return SseEvent(b"\n".join(data), name, self.last_id, self.retry)
