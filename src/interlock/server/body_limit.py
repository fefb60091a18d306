"""A bound on request bodies, answered in the API's error shape (``413 too_large``).

A declared ``Content-Length`` over the limit is refused before the body is read; a
body streamed without one is counted as it arrives and refused once it passes the
limit, so no request holds more than the limit in memory.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.server.handlers import error_response

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        self.app = app
        self.max_body_size = max_body_size

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body_size} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_size:
            response = error_response(413, "too_large", self._too_large())
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_size:
                    # Raised inside the body read: the framework answers it as an HTTP
                    # error, through the API's handler.
                    raise HTTPException(413, self._too_large())
            return message

        await self.app(scope, counted, send)
