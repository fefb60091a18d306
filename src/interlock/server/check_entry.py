"""The check endpoints' raw ASGI entry: a well-formed ``POST /v1/check`` or
``/v1/check/batch`` answered ahead of the whole Starlette stack.

A check is the one request every agent makes on every tool call. Under load the
stack around it — the error and telemetry middleware, the metrics and body-limit
middleware, routing, the request object, the body replay — cost as much as the
check. This entry, the outermost middleware, answers a check that it can decide in
full: a body within the size and depth limits, a live key holding the ``check``
permission, JSON that ``orjson`` parses and the route's model accepts. Such a request
gets what the route would give it: the same model, the same trusted context (tenant
and agent from the key), the same guard call, the same bytes, the same metrics, worker
header and access log line.

Everything else goes on to the stack as if the entry were not there, with what the
entry already read of the body replayed: a refusal (413, 400, 401, 403, 422 ...) is
answered by the body limit, the routes and the error handlers, exactly as before —
same status, same body, same metric label. The entry never refuses anything itself,
so it cannot refuse differently. Once the guard has been asked, nothing is handed on
(the stack would decide the call twice): an error then is answered here, by the
app's own handlers.

``orjson`` is stricter than the route's parser (Python's ``json``): it refuses NaN,
lone surrogates, integers beyond 64 bits and text that is not UTF-8. It never accepts
what that parser refuses, and what both accept they read alike; a body only the route's
parser takes is handed on, and the route decides it (its model refuses most of those,
naming the field).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import orjson
from pydantic import BaseModel
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.core.decision import Decision
from interlock.server.api_models import ActionIn, BatchIn
from interlock.server.auth import ROLE_PERMISSIONS, Permission
from interlock.server.handlers import exception_response
from interlock.server.limits import json_depth
from interlock.server.routes.checks import answer_body, decide_one, to_action
from interlock.server.workers import WORKER_HEADER

if TYPE_CHECKING:
    from interlock.server.keys import ApiKey
    from interlock.server.metrics import AccessLog
    from interlock.server.state import ServerState

__all__ = ["CheckEntry"]

_Decide = Callable[["ServerState", BaseModel, "ApiKey"], Awaitable[Decision]]


async def _decide_one(state: ServerState, body: BaseModel, key: ApiKey) -> Decision:
    assert isinstance(body, ActionIn)
    return await decide_one(state, body, key)


async def _decide_batch(state: ServerState, body: BaseModel, key: ApiKey) -> Decision:
    assert isinstance(body, BatchIn)
    decision = await state.guard.acheck_batch([to_action(item, key) for item in body.actions])
    assert decision is not None  # the model refuses an empty list
    return decision


#: path → (the route's body model, how it is decided)
_ROUTES: Final[dict[str, tuple[type[BaseModel], _Decide]]] = {
    "/v1/check": (ActionIn, _decide_one),
    "/v1/check/batch": (BatchIn, _decide_batch),
}
_JSON: Final = b"application/json"


class _HandOn(Exception):
    """The request is not one the entry decides: the stack answers it."""


class CheckEntry:
    """ASGI middleware (outermost): answers a well-formed check itself and hands every
    other request, replayed, to ``app`` (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        state: ServerState,
        max_body_size: int,
        max_json_depth: int,
        worker: str | None = None,
        access: AccessLog | None = None,
    ) -> None:
        self.app = app
        self.state = state
        self.max_body_size = max_body_size
        self.max_json_depth = max_json_depth
        self.extra_headers = [(WORKER_HEADER.encode(), worker.encode("latin-1"))] if worker else []
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        read: list[Message] = []
        try:
            body = await self._body(scope, receive, read)
            key = await self._key(scope)
            model, decide = route
            try:
                payload = model.model_validate(orjson.loads(body))
            except Exception:  # refused (or worse): the stack answers it as it always has
                raise _HandOn from None
        except _HandOn:
            await self.app(scope, _replaying(read, receive), send)
            return
        status = 500  # unless answered
        try:
            status, headers, answer = await self._decided(scope, decide, payload, key)
            headers.extend(self.extra_headers)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
        finally:
            self.state.metrics.count_request("POST", scope["path"], status)
            if self.access is not None:
                self.access.note(scope, scope["path"], status, started)

    async def _decided(
        self, scope: Scope, decide: _Decide, payload: BaseModel, key: ApiKey
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The status, headers and body of the answer: the decision, or what the app's
        handlers make of a failure (never handed on: the guard has been asked)."""
        state = self.state
        started = time.perf_counter()
        try:
            answer = answer_body(state, await decide(state, payload, key), started)
        except Exception as exc:
            response = await exception_response(Request(scope), exc)
            return response.status_code, list(response.raw_headers), bytes(response.body)
        length = str(len(answer)).encode("latin-1")
        return 200, [(b"content-length", length), (b"content-type", _JSON)], answer

    async def _body(self, scope: Scope, receive: Receive, read: list[Message]) -> bytes:
        """The whole body, within the size and depth limits; every message received is
        kept in ``read`` for a replay."""
        for name, value in scope["headers"]:
            if name == b"content-length":  # the first, as the body limit reads it
                if value.isdigit() and int(value) > self.max_body_size:
                    raise _HandOn
                break
        chunks: list[bytes] = []
        received = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                raise _HandOn  # a disconnect: the stack sees it as before
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_body_size:
                raise _HandOn
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        openers = body.count(b"[") + body.count(b"{")
        if openers > self.max_json_depth and json_depth(body) > self.max_json_depth:
            raise _HandOn
        return body

    async def _key(self, scope: Scope) -> ApiKey:
        """The live key of the request's bearer token, holding the check permission."""
        header = None
        for name, value in scope["headers"]:
            if name == b"authorization":  # the first, as Starlette's Headers reads it
                header = value.decode("latin-1")
                break
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _HandOn
        keys = self.state.keys
        try:
            key = await keys.aauthenticate(token)
        except Exception:  # the store failed: the stack asks again, and answers that
            raise _HandOn from None
        if key is None or Permission.CHECK not in ROLE_PERMISSIONS[key.role]:
            raise _HandOn
        return key


def _replaying(read: list[Message], receive: Receive) -> Receive:
    """``receive`` with the messages already taken from it given back first."""
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
