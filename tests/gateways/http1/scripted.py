"""A real TCP server on 127.0.0.1 whose answers are scripted per request, to drive
the HTTP/1.1 client into every corner a misbehaving upstream can take it.

The server reads each request (its head, then ``content-length`` bytes of body) and
hands it to the script with the stream's writer; the script writes whatever bytes it
likes (well-formed or not) and says whether the connection reads another request.
Every request is recorded with the index of the connection it came on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["Request", "Scripted", "answer"]


@dataclass(frozen=True)
class Request:
    connection: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


#: script(request, writer) -> whether the connection reads another request
Script = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]


def answer(body: bytes = b"ok", status: int = 200, *headers: str) -> bytes:
    """A well-formed answer framed by its content-length."""
    head = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@dataclass
class Scripted:
    script: Script
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    #: set when a connection's client side closed (EOF read between requests)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None
    port: int = 0

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def url(self, path: str = "/v1/x") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.connections
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    self.closed.set()
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Request(index, method, path, headers, body)
                self.requests.append(request)
                if not await self.script(request, writer):
                    return
        except asyncio.CancelledError:
            return  # the test is over (a cancelled handler would be logged as an error)
        finally:
            writer.close()
