"""One HTTP/1.1 connection: an asyncio protocol feeding httptools' response parser,
one exchange (request, response) at a time.

The protocol does no waiting of its own: it files what the parser reports (status,
headers, body chunks, the end, an error) and wakes the one coroutine waiting on the
exchange. Reading pauses while more than ``_HIGH_WATER`` bytes of body wait for that
coroutine (a slow agent slows the upstream, not the proxy's memory).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final, cast

import httptools

from ._errors import (
    ReadTimeout,
    RemoteProtocolError,
    ResponseTooLarge,
    UpstreamError,
    WriteTimeout,
)

__all__ = ["Connection"]

# Body bytes buffered before reading from the socket pauses; it resumes below the low mark.
_HIGH_WATER: Final = 256 * 1024
_LOW_WATER: Final = 64 * 1024


class _Refused(Exception):
    """Raised in a parser callback to stop parsing with ``error``."""

    def __init__(self, error: UpstreamError) -> None:
        super().__init__(str(error))
        self.error = error


class Connection(asyncio.Protocol):
    """A connection to ``origin``; ``lost`` is told once when it closes."""

    def __init__(self, origin: str, max_head: int, lost: Callable[[Connection], None]) -> None:
        self.origin = origin
        self.max_head = max_head
        self._lost = lost
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.idle_expiry: float | None = None  # a server's own Keep-Alive: timeout
        self._parser = httptools.HttpResponseParser(self)
        self._writable = True
        self._write_waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._reset(active=False)

    def _reset(self, *, active: bool) -> None:
        self.active = active  # an exchange is under way
        self.got_bytes = False  # any byte of its response came
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._head_size = 0  # the head's bytes, as the parser reports them
        self._head_fed = 0  # bytes fed to the parser before the head was complete
        self.head_done = False
        self._interim = False
        self._until_close = False
        self.chunks: deque[bytes] = deque()
        self._buffered = 0
        self.complete = False
        self.keep_alive = False
        self.error: UpstreamError | None = None

    # -- the exchange, from the client's side -------------------------------------------

    def send(self, request: bytes) -> None:
        """Begin an exchange by writing ``request``. A connection found closed raises
        with ``sent=False``: nothing went out."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise RemoteProtocolError(
                "the pooled connection was closed before the request",
                origin=self.origin,
                sent=False,
            )
        self._reset(active=True)
        transport.write(request)

    async def drain(self, timeout: float) -> None:
        """Wait until the request has been handed to the kernel (bounded)."""
        if self._writable or self.error is not None:
            return
        waiter = self._write_waiter = self._loop.create_future()
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            raise WriteTimeout(
                f"the request could not be written within {timeout} s", origin=self.origin
            ) from None
        finally:
            self._write_waiter = None

    async def wait(self, timeout: float) -> None:
        """Wait for news of the exchange (a head, a chunk, the end, an error): a
        :class:`ReadTimeout` when none comes within ``timeout``."""
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(timeout, _time_out, waiter, timeout, self.origin)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        """The next buffered body chunk (one must be there)."""
        chunk = self.chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= _LOW_WATER and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def finish(self) -> bool:
        """End the exchange; whether the connection can carry another one."""
        reusable = (
            self.complete
            and self.keep_alive
            and self.error is None
            and not self.closed
            and not self.chunks
            and self.transport is not None
            and not self.transport.is_closing()
        )
        self.active = False
        return reusable

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self._closed()

    def abort(self) -> None:
        """Close at once, unsent bytes dropped (the state of the exchange is unknown)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self._closed()

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, but are ones)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.active or self.complete:
            # Bytes nobody asked for (a late 408, garbage after a response): this
            # connection cannot be trusted with another request.
            self.keep_alive = False
            self.abort()
            return
        self.got_bytes = True
        if not self.head_done:
            self._head_fed += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if self.complete:  # bytes after the answer: it stands, the connection goes
                self.keep_alive = False
                self.abort()
            elif isinstance(cause, _Refused):
                self._fail(cause.error)
            else:  # a callback of ours failed: a bug, never a reusable connection
                self._fail(RemoteProtocolError(f"the response could not be read: {exc}"))
        except httptools.HttpParserUpgrade:
            self._fail(RemoteProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(RemoteProtocolError(f"a malformed response: {exc}"))
        else:
            if not self.head_done and self._head_fed > self.max_head:
                # The parser keeps a header line that is still arriving: bound it too.
                self._fail(self._too_large())
                return
            if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self.active and self.head_done and self._until_close and not self.complete:
            self.complete = True  # a body delimited by the connection's close
            self.keep_alive = False
            self._wake()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()
        if self.active and not self.complete and self.error is None:
            if self.got_bytes:
                message = "the upstream closed the connection before the response was complete"
            else:
                message = "the upstream closed the connection without answering"
            self._fail(RemoteProtocolError(message, origin=self.origin), close=False)
        self._wake_writer()

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        self._wake_writer()

    # -- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise _Refused(RemoteProtocolError("the upstream sent more than one response"))

    def on_status(self, status: bytes) -> None:
        self._count(len(status) + 16)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100, 103): the real one follows
            self._interim = True
            return
        self.status = status
        chunked = content_length = False
        for name, value in self.headers:
            if name == b"content-length":
                content_length = True
            elif name == b"transfer-encoding":
                chunked = chunked or b"chunked" in value.lower()
            elif name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
                raise _Refused(
                    RemoteProtocolError(
                        f"the upstream encoded its answer ({value.decode('latin-1')}) though "
                        "it was asked for identity"
                    )
                )
            elif name == b"keep-alive":
                self._read_keep_alive(value)
        self._until_close = not (chunked or content_length or status in (204, 304))
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False  # (its bytes still count against the head's cap)
            self.headers = []
            return
        self.keep_alive = self._parser.should_keep_alive() and not self._until_close
        self.complete = True
        self._wake()

    # -- inside ---------------------------------------------------------------------------

    def _count(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.max_head:
            raise _Refused(self._too_large())

    def _too_large(self) -> ResponseTooLarge:
        return ResponseTooLarge(
            f"the response's head is larger than {self.max_head} bytes", origin=self.origin
        )

    def _read_keep_alive(self, value: bytes) -> None:
        for part in value.split(b","):
            key, _, number = part.strip().partition(b"=")
            if key.strip().lower() == b"timeout" and number.strip().isdigit():
                # Believed a second early: the server's clock started before ours.
                self.idle_expiry = max(int(number) - 1.0, 0.0)

    def _fail(self, error: UpstreamError, *, close: bool = True) -> None:
        if not error.origin:
            error.origin = self.origin
        if self.error is None:
            self.error = error
        self.keep_alive = False
        if close:
            self.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_writer(self) -> None:
        waiter = self._write_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _closed(self) -> None:
        if not self.closed:
            self.closed = True
            self.idle_since = time.monotonic()
            self._lost(self)


def _time_out(waiter: asyncio.Future[None], timeout: float, origin: str) -> None:
    if not waiter.done():
        message = f"no byte of the response came within {timeout} s"
        waiter.set_exception(ReadTimeout(message, origin=origin))
