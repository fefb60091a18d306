"""The SSE streams of one HTTP gateway session, and the bounded in-memory event
store that lets a client resume one (``Last-Event-ID``).

A :class:`Channel` is one logical stream: a request's (the messages that belong to
it, then its response) or the session's GET stream (what the server sends unasked).
Every message put on a channel is kept as an event numbered in that channel, so
its id, ``<channel>-<seq>``, names the stream it belongs to and its place there,
and is unique in the session. A connection reads a channel from a position
(:meth:`Channel.after`); a client that lost its connection reconnects with the last
id it saw and reads on from there — never another stream's messages. One
connection reads a channel at a time: a newer one takes over.

The store is bounded (:class:`EventLog`: ``max_events`` and ``max_bytes`` per
session): past either bound the oldest events go first, and a finished request's
channel is forgotten once none of its events is left.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterator
from typing import Final

__all__ = ["GET_CHANNEL", "Channel", "EventLog"]

log = logging.getLogger("interlock.gateways.mcp")

#: The number of a session's GET stream.
GET_CHANNEL: Final = 0


class Channel:
    """One stream of a session (see the module docstring). ``answered`` once it
    carries its request's response; ``closed`` when the session ended first."""

    __slots__ = (
        "_changed",
        "_readers",
        "answered",
        "closed",
        "connected",
        "delivered",
        "events",
        "json_only",
        "last_seq",
        "number",
        "original_id",
    )

    def __init__(self, number: int, *, json_only: bool = False, original_id: object = None) -> None:
        self.number = number
        #: the client accepts no SSE: only the response goes here (the rest: GET)
        self.json_only = json_only
        #: the id the client gave its request (the per-request generation's are renamed)
        self.original_id = original_id
        self.events: deque[tuple[int, bytes]] = deque()
        self.last_seq = 0
        #: the last event a connection has been given
        self.delivered = 0
        self.answered = False
        self.closed = False
        #: connections reading it now
        self.connected = 0
        self._changed = asyncio.Event()
        self._readers = 0

    def event_id(self, seq: int) -> str:
        return f"{self.number}-{seq}"

    @property
    def finished(self) -> bool:
        return self.answered or self.closed

    def put(self, data: bytes, *, response: bool = False) -> int:
        self.last_seq += 1
        self.events.append((self.last_seq, data))
        if response:
            self.answered = True
        self._changed.set()
        return self.last_seq

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    def take_over(self) -> int:
        """A new connection reads this channel: the one before it stops."""
        self._readers += 1
        self._changed.set()
        return self._readers

    def reading(self, reader: int) -> bool:
        return reader == self._readers

    def after(self, seq: int) -> Iterator[tuple[int, bytes]]:
        """The events kept after ``seq`` (a gap when older ones were evicted)."""
        if self.events and self.events[0][0] > seq + 1:
            log.warning(
                "interlock mcp-gateway: stream %d resumed after event %d, but events up to %d "
                "were no longer kept",
                self.number,
                seq,
                self.events[0][0] - 1,
            )
        for number, data in list(self.events):
            if number > seq:
                yield number, data

    def poke(self) -> None:
        """Wake its readers (to look at something else that changed)."""
        self._changed.set()

    async def changed(self, seen: int, reader: int, timeout: float) -> bool:
        """Wait until there is an event after ``seen``, the channel ends or another
        reader takes over (True), or ``timeout`` seconds pass (False)."""
        self._changed.clear()
        if self.last_seq > seen or self.finished or not self.reading(reader):
            return True
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        return True


class EventLog:
    """The channels of one session and the bound on the events they keep."""

    def __init__(self, *, max_events: int = 1024, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.channels: dict[int, Channel] = {GET_CHANNEL: Channel(GET_CHANNEL)}
        self._next = GET_CHANNEL
        self._order: deque[tuple[Channel, int, int]] = deque()  # (channel, seq, size)
        self._bytes = 0

    @property
    def get_channel(self) -> Channel:
        return self.channels[GET_CHANNEL]

    def open(self, *, json_only: bool = False, original_id: object = None) -> Channel:
        self._next += 1
        channel = Channel(self._next, json_only=json_only, original_id=original_id)
        self.channels[channel.number] = channel
        return channel

    def put(self, channel: Channel, data: bytes, *, response: bool = False) -> None:
        seq = channel.put(data, response=response)
        self._order.append((channel, seq, len(data)))
        self._bytes += len(data)
        while len(self._order) > self.max_events or (
            self._bytes > self.max_bytes and len(self._order) > 1
        ):
            self._evict()

    def _evict(self) -> None:
        channel, seq, size = self._order.popleft()
        self._bytes -= size
        while channel.events and channel.events[0][0] <= seq:
            channel.events.popleft()
        if not channel.events and channel.finished and channel.number != GET_CHANNEL:
            self.channels.pop(channel.number, None)

    def find(self, event_id: str) -> tuple[Channel, int] | None:
        """The channel an event id names and the position in it, if it is known."""
        number, dash, seq = event_id.partition("-")
        if not dash or not number.isdigit() or not seq.isdigit():
            return None
        channel = self.channels.get(int(number))
        return None if channel is None else (channel, int(seq))

    def forget(self, channel: Channel) -> None:
        """A channel no connection can resume (a JSON answer's)."""
        if channel.number != GET_CHANNEL:
            self.channels.pop(channel.number, None)

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
