"""The floor of the ``llm-proxy`` benchmark: the least a relay process in Python can
do for a call — splice bytes. Each client connection gets one connection to the
upstream, and every byte is copied across as it comes, both ways, by asyncio
protocols on uvloop: no HTTP parsing at all, so no key, no policy, no body, nothing
per request but two more socket reads and writes and two more process wake-ups.
No real proxy can be leaner; what it adds to a call is what the extra hop alone costs
on this machine.

Run as ``python -m bench.llm_splice PORT UPSTREAM_HOST:UPSTREAM_PORT``; it answers
until terminated.
"""

from __future__ import annotations

import asyncio
import sys

__all__ = ["main"]


class _Half(asyncio.Protocol):
    """One side of a spliced pair: what it reads is written to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def _client_side(host: str, port: int) -> _Half:
    downstream = _Half()

    async def connect() -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(_Half, host, port)
        except OSError:
            if downstream.transport is not None:
                downstream.transport.close()
            return
        upstream.peer, downstream.peer = downstream, upstream
        for data in downstream.pending:
            upstream.transport.write(data)  # type: ignore[union-attr]
        downstream.pending.clear()

    asyncio.get_running_loop().create_task(connect())
    return downstream


async def _serve(port: int, upstream: str) -> None:
    host, _, upstream_port = upstream.rpartition(":")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _client_side(host, int(upstream_port)), "127.0.0.1", port
    )
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    import uvloop

    uvloop.run(_serve(int(argv[0]), argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
