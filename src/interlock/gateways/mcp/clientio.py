"""The client's side of a stdio gateway: newline-delimited JSON-RPC on the process's
stdin and stdout (or any pair of binary streams).

Two threads, blocking reads of stdin and blocking writes to stdout, so that neither
descriptor is made non-blocking under a parent that shares it, and a large message
one way never waits on a large message the other way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from typing import IO, Any, Final

__all__ = ["TOO_LONG", "ClientLine", "StdioClient", "TooLong"]

log = logging.getLogger("interlock.gateways.mcp")


class TooLong:
    """Stands for a client line over the size limit (already discarded)."""


TOO_LONG: Final = TooLong()

#: What the client sent: one line (its newline included), an over-long line, or
#: ``None`` at the end of its input.
ClientLine = bytes | TooLong | None


class StdioClient:
    """One client on ``client_in`` / ``client_out`` (the process's stdin and stdout
    by default). :meth:`start` on the running loop, then :meth:`receive` lines and
    :meth:`send` lines; :meth:`close` flushes what was sent."""

    def __init__(
        self,
        client_in: IO[bytes] | None = None,
        client_out: IO[bytes] | None = None,
        *,
        max_message_bytes: int,
    ) -> None:
        self._in = client_in
        self._out = client_out
        self._limit = max_message_bytes
        self._to_client: queue.Queue[bytes | None] = queue.Queue()
        self._lines: asyncio.Queue[ClientLine] | None = None
        self._writer: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._lines = asyncio.Queue(maxsize=64)
        self._writer = threading.Thread(target=self._write, name="mcp-gateway-out", daemon=True)
        self._writer.start()
        reader = threading.Thread(
            target=self._read, args=(loop, self._lines), name="mcp-gateway-in", daemon=True
        )
        reader.start()

    async def receive(self) -> ClientLine:
        assert self._lines is not None, "start() first"
        return await self._lines.get()

    def send(self, line: bytes, related: Any = None) -> None:
        """Queue ``line`` for the client (``related``: the client request it belongs
        to; one stdout carries everything, so it is not needed here)."""
        self._to_client.put(line)

    async def close(self) -> None:
        self._to_client.put(None)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join)

    def _read(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[ClientLine]) -> None:
        stream = self._in if self._in is not None else os.fdopen(0, "rb", closefd=False)

        def put(item: ClientLine) -> None:
            asyncio.run_coroutine_threadsafe(lines.put(item), loop).result()

        try:
            while True:
                line = stream.readline(self._limit + 1)
                if not line:
                    break
                if len(line) > self._limit and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # drop the rest of it
                        line = stream.readline(self._limit)
                    put(TOO_LONG)
                    continue
                put(line)
        except (OSError, ValueError, RuntimeError) as exc:  # closed under us, or loop gone
            log.debug("client input ended: %s", exc)
        with contextlib.suppress(RuntimeError):
            put(None)

    def _write(self) -> None:
        stream = self._out if self._out is not None else os.fdopen(1, "wb", closefd=False)
        while (line := self._to_client.get()) is not None:
            try:
                stream.write(line)
                stream.flush()
            except (OSError, ValueError) as exc:
                log.warning("interlock mcp-gateway: the client's output closed: %s", exc)
                break
