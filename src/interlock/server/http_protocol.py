"""One write per small response.

uvicorn's httptools protocol writes a response's head (``http.response.start``) and
its body (``http.response.body``) to the connection as two writes: two system calls,
two TCP segments, the client woken twice — for a check, whose answer is a few hundred
bytes, the costliest thing the server does per request. :class:`CoalescingProtocol`
is that protocol with a transport that holds a small write back until the next write
or the end of the loop's turn, whichever comes first, and then sends what it holds
with it: the head and the body of a response decided in one turn go out as one
write. The bytes are the same and in the same order; nothing is held past the turn
that wrote it (a streamed body's later chunks, a long-poll, go out in their own turns
as before); a close sends what is held first, an abort drops it as the transport
drops its own buffer.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HOLD_LIMIT", "CoalescingProtocol", "CoalescingTransport"]

#: Writes up to this size are held back for the next one (a response's head is
#: well under it); larger ones go out at once, after whatever is held.
HOLD_LIMIT: Final = 16 * 1024


class CoalescingTransport:
    """A transport proxy: ``write`` holds one small chunk back until the next write or
    the end of the loop's turn; everything else is the transport's, what is held going
    out first where the order matters (close, write_eof, a protocol switch)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:  # the head, now with its body
            self._held = None
            self._transport.write(held + bytes(data))
        elif len(data) <= HOLD_LIMIT and not self._transport.is_closing():
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write what is held (the end of the turn that wrote it)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():  # (lost meanwhile: as a write would be)
                self._transport.write(held)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.flush()
        self._transport.set_protocol(protocol)

    # what uvicorn asks per request, forwarded without the detour through __getattr__
    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def get_write_buffer_size(self) -> int:
        held = self._held
        return self._transport.get_write_buffer_size() + (len(held) if held else 0)

    def __getattr__(self, name: str) -> Any:  # the rest of the transport's interface
        return getattr(self._transport, name)


class CoalescingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing: Any = CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)
