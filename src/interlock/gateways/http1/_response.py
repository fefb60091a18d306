"""A response whose head has arrived: its status and headers, and its body to read
— whole, in chunks or in lines — once."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Final, final

from ._connection import Connection
from ._errors import ReadTimeout, ResponseTooLarge

__all__ = ["Response"]

_utf8: Final = codecs.getincrementaldecoder("utf-8")


@final
class Response:
    """``status_code``; ``headers``: names in lower case, a repeated header's values
    joined with ``", "``; ``raw_headers`` as they came. The body is read once, with
    :meth:`aread`, :meth:`aiter_bytes` or :meth:`aiter_lines`; :meth:`aclose` (or
    ``async with``) gives the connection back — to the pool when the body was read to
    its end, else it is closed."""

    __slots__ = (
        "_connection",
        "_done",
        "_max_body",
        "_read_timeout",
        "headers",
        "raw_headers",
        "status_code",
    )

    def __init__(
        self,
        connection: Connection,
        done: Callable[[Connection, bool], None],
        *,
        read_timeout: float,
        max_body: int,
    ) -> None:
        self._connection: Connection | None = connection
        self._done = done
        self._read_timeout = read_timeout
        self._max_body = max_body
        self.status_code = connection.status
        self.raw_headers = connection.headers
        headers: dict[str, str] = {}
        for raw_name, raw_value in connection.headers:
            name = raw_name.decode("latin-1")
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.headers = headers

    @property
    def is_closed(self) -> bool:
        return self._connection is None

    async def aread(self) -> bytes:
        """The whole body (at most ``Limits.max_body`` bytes)."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.aiter_bytes():
            size += len(chunk)
            if size > self._max_body:
                await self.aclose()
                raise ResponseTooLarge(f"the response's body is larger than {self._max_body} bytes")
            parts.append(chunk)
        return b"".join(parts)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive; the connection goes back once it ends."""
        connection = self._connection
        if connection is None:
            return
        timeout = self._read_timeout
        while True:
            if connection.chunks:
                yield connection.take()
            elif connection.error is not None:
                error = connection.error
                self._close()
                raise error
            elif connection.complete:
                self._close()
                return
            else:
                try:
                    await connection.wait(timeout)
                except ReadTimeout:
                    self._close()  # mid-body: the connection cannot be reused
                    raise

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines (UTF-8, ending in ``\\n``, ``\\r\\n`` or ``\\r``, which
        are not kept), as SSE reads them."""
        decoder = _utf8("replace")
        pending = ""
        async for chunk in self.aiter_bytes():
            text = pending + decoder.decode(chunk)
            held = ""
            if text.endswith("\r"):  # perhaps the first half of a \r\n
                text, held = text[:-1], "\r"
            if "\r" in text:
                text = text.replace("\r\n", "\n").replace("\r", "\n")
            lines = text.split("\n")
            pending = lines.pop() + held
            for line in lines:
                yield line
        tail = pending + decoder.decode(b"", final=True)
        if tail:
            yield tail.removesuffix("\r")

    async def aclose(self) -> None:
        self._close()

    def close(self) -> None:
        """:meth:`aclose`, for a ``finally`` that cannot await."""
        self._close()

    def _close(self) -> None:
        connection = self._connection
        if connection is None:
            return
        self._connection = None
        self._done(connection, connection.finish())

    async def __aenter__(self) -> Response:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close()
