"""Bounds on request bodies, answered in the API's error shape before any route runs.

| limit | default | answer |
| --- | --- | --- |
| size: ``max_body_size`` bytes | 1 MiB | ``413 too_large`` |
| JSON nesting: ``max_json_depth`` arrays and objects | 100 | ``400 too_deep`` |

A declared ``Content-Length`` over the size limit is refused before the body is read;
a body streamed without one is counted as it arrives and refused once it passes the
limit, so no request holds more than the limit in memory. The whole body (at most
the size limit) is then read here and its nesting measured — without parsing it, in
linear time — before it is handed on: every route, the fast check routes and the
FastAPI ones alike, gets a body no deeper than the limit. (Python's JSON parser
recurses: JSON nested about a thousand deep raises ``RecursionError`` inside it,
which a route would answer with a 500.)
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.server.handlers import error_response
from interlock.server.limits import DEFAULT_MAX_JSON_DEPTH, json_depth

__all__ = ["BodyLimitMiddleware"]


class _TooLarge(Exception):
    pass


def _content_length(scope: Scope) -> str | None:
    """The declared ``Content-Length`` (the first, as Starlette's ``Headers`` reads it),
    from the raw header list: no header object built per request. The server lowercases
    header names (ASGI)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return str(value.decode("latin-1"))
    return None


class BodyLimitMiddleware:
    """Refuses a request body over ``max_body_size`` bytes (413) or JSON nested
    deeper than ``max_json_depth`` (400), whatever the route."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_size: int,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    ) -> None:
        self.app = app
        self.max_body_size = max_body_size
        self.max_json_depth = max_json_depth

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body_size} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_size:
            await error_response(413, "too_large", self._too_large())(scope, receive, send)
            return
        try:
            first = await self._read_body(receive)
        except _TooLarge:
            await error_response(413, "too_large", self._too_large())(scope, receive, send)
            return
        body = first.get("body", b"")
        if self._too_deep(body):
            message = (
                f"the request's JSON is nested deeper than {self.max_json_depth} levels "
                "(the server's max_json_depth)"
            )
            await error_response(400, "too_deep", message)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            # The body once, as one message; then whatever the client sends next (a
            # disconnect, which long-polls listen for).
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive) -> Message:
        """The whole body as one ``http.request`` message — or the disconnect that cut
        it short, passed on as it came."""
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_body_size:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    def _too_deep(self, body: bytes) -> bool:
        # Counting the openers is a pass in C: a body with no more of them than the
        # limit cannot nest deeper, and most never need the measure.
        openers = body.count(b"[") + body.count(b"{")
        return openers > self.max_json_depth and json_depth(body) > self.max_json_depth
