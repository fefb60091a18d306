"""The little of ASGI the proxy needs, without a framework on the request path: the
request's headers, its body (bounded), and answers written in two messages.

The proxy serves three routes, all ``POST`` with a JSON body; a router, request and
response objects, middleware and exception handlers would cost more per call than the
proxy's own work on the request (see BENCHMARKS.md, ``llm-proxy``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

__all__ = [
    "JSON",
    "Disconnected",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "TooLarge",
    "header_pairs",
    "read_body",
    "request_headers",
    "send_answer",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON: Final = (b"content-type", b"application/json")


class TooLarge(Exception):
    """The request's body is larger than the proxy reads."""


class Disconnected(Exception):
    """The client left before its request's body was read."""


def request_headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one, as
    Starlette's ``Headers.get`` read them)."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        key = name.decode("latin-1").lower()
        if key not in headers:
            headers[key] = value.decode("latin-1")
    return headers


async def read_body(receive: Receive, headers: dict[str, str], limit: int) -> bytes:
    """The whole body: :class:`TooLarge` past ``limit`` bytes (its declared length
    first), :class:`Disconnected` when the client leaves first."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    message = await receive()
    if message["type"] != "http.request":
        raise Disconnected
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > limit:
            raise TooLarge
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def header_pairs(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


async def send_answer(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    """A whole answer, framed by its ``content-length``."""
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
