"""One client session of the HTTP gateway: a relay (the session core and the
upstreams it owns: its own processes for stdio upstreams, its own upstream session
for HTTP ones) and the SSE streams its messages go out on.

Which stream a message from the core goes on (``send(line, related)``):

- a response: its request's stream (a response to no open request is dropped);
- a message that belongs to a request (``related``: its progress): that request's
  stream, when the client reads it as SSE; else the GET stream;
- anything else (a server's request, a list change, a log line): the GET stream —
  kept there until the client opens it; a server's *request* goes on a request's
  stream instead while no GET stream is open (the one being read, else the latest),
  so that a client that never opens one is still asked (and the upstream not left
  waiting).

A session of the per-request generation (2026-07-28, no ``Mcp-Session-Id``: one per
key, :attr:`HttpSession.modern`) renames each request's id (two requests of one
client may carry the same), gives each answer its own id back, has no GET stream,
answers a server's request itself (that generation cannot ask the client), and
cancels a request whose client hangs up before the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import count
from typing import TYPE_CHECKING, Any, Final

import orjson

from interlock.gateways.mcp.http_events import Channel, EventLog
from interlock.gateways.mcp.messages import (
    Message,
    encode,
    error_reply,
    id_key,
    parse_body,
)

if TYPE_CHECKING:
    from interlock.gateways.mcp.http_auth import Caller
    from interlock.gateways.mcp.relay import Relay
    from interlock.guard import Guard

__all__ = ["HttpSession"]

log = logging.getLogger("interlock.gateways.mcp")

INTERNAL_ERROR: Final = -32603
METHOD_NOT_FOUND: Final = -32601
#: How a cancelled request's stream ends (as the SDK's server transport ends it).
REQUEST_CANCELLED: Final = -32800


class HttpSession:
    """See the module docstring. ``relay`` is set (and started) by the gateway."""

    def __init__(
        self,
        session_id: str | None,
        caller: Caller,
        guard: Guard,
        *,
        modern: bool = False,
        max_events: int = 1024,
        max_event_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.id = session_id
        self.caller = caller
        self.guard = guard
        self.modern = modern
        self.relay: Relay | None = None
        self.events = EventLog(max_events=max_events, max_bytes=max_event_bytes)
        #: open requests: their id (as the core knows it) → their stream
        self.requests: dict[str, Channel] = {}
        #: the protocol version the session's ``initialize`` agreed
        self.version: str | None = None
        self.busy = 0
        self.last_active = time.monotonic()
        self.ended: str | None = None
        self._initialize: Channel | None = None
        self._lane_ids = count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def touch(self, grace: float = 0.0) -> None:
        """Active now (``grace``: and for that many seconds more, where a response
        is handed to the server to start later)."""
        self.last_active = time.monotonic() + grace

    # -- from the client -----------------------------------------------------------------

    def open_request(self, message: Message, *, json_only: bool) -> tuple[Channel, Message] | None:
        """A stream for a request, and the message as the core gets it; ``None``
        when its id is in use by an open request of this session."""
        forwarded = message
        if self.modern:
            lane_id = f"interlock-{next(self._lane_ids)}"
            forwarded = parse_body(encode({**message.body, "id": lane_id}))
        key = id_key(forwarded.id)
        if key in self.requests:
            return None
        channel = self.events.open(json_only=json_only, original_id=message.id)
        self.requests[key] = channel
        if message.method == "initialize":
            self._initialize = channel
        return channel, forwarded

    async def forward(self, message: Message) -> None:
        relay = self.relay
        assert relay is not None
        try:
            await relay.client_message(message)
        except Exception:  # the core must not fail; if it does, the request is answered
            log.exception("interlock mcp-gateway: the session core failed on a message")
            if message.kind == "request":
                problem = "the gateway failed on this request"
                self.send(error_reply(message.id, INTERNAL_ERROR, problem), message.id)
        if message.method == "notifications/cancelled" and not self.modern:
            self._cancelled(message)

    def _cancelled(self, message: Message) -> None:
        """The client cancelled a request: its stream ends, as the handshake
        generation's streams end only with a response, with ``-32800`` (what the
        SDK's own server transport answers); a late answer of the upstream's is
        dropped. (The core has told the upstream and released the call's budget.)"""
        params = message.params if isinstance(message.params, dict) else {}
        channel = self.requests.pop(id_key(params.get("requestId")), None)
        if channel is not None:
            reply = error_reply(channel.original_id, REQUEST_CANCELLED, "Request cancelled")
            if channel.json_only:
                channel.put(reply.rstrip(b"\n"), response=True)
            else:
                self.events.put(channel, reply.rstrip(b"\n"), response=True)

    def cancel(self, channel: Channel) -> None:
        """The client hung up on a request of the per-request generation: that is
        its cancellation (the upstream is told; a reservation is released)."""
        if channel.finished:
            return
        key = next((k for k, c in self.requests.items() if c is channel), None)
        if key is None:
            return
        del self.requests[key]
        channel.close()
        self.events.forget(channel)
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": key, "reason": "the client closed the request"},
        }
        self._spawn(self.forward(parse_body(encode(note))))

    async def answer_of(self, channel: Channel) -> bytes | None:
        """The response on a JSON-only stream (``None``: the session ended first)."""
        reader = channel.take_over()
        while not channel.finished:
            await channel.changed(channel.last_seq, reader, 3600.0)
        self.events.forget(channel)
        return channel.events[-1][1] if channel.answered and channel.events else None

    # -- from the core -------------------------------------------------------------------

    def send(self, line: bytes, related: Any) -> None:
        """The core's answer channel (see the module docstring)."""
        data = line.rstrip(b"\r\n")
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            log.warning("interlock mcp-gateway: dropped a message that is not JSON")
            return
        if not isinstance(body, dict):
            return
        if "method" not in body:
            self._response(data, body)
        elif "id" in body:
            self._server_request(data, body, related)
        else:
            self._notification(data, related)

    def _response(self, data: bytes, body: dict[str, Any]) -> None:
        channel = self.requests.pop(id_key(body.get("id")), None)
        if channel is None:
            log.warning("interlock mcp-gateway: dropped a response to no open request")
            return
        if self.modern:
            data = encode({**body, "id": channel.original_id}).rstrip(b"\n")
        if channel is self._initialize:
            self._initialize = None
            result = body.get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            self.version = version if isinstance(version, str) else self.version
        if channel.json_only:
            channel.put(data, response=True)
        else:
            self.events.put(channel, data, response=True)

    def _related(self, related: Any) -> Channel | None:
        """The SSE stream of the open request ``related`` names, if there is one."""
        channel = self.requests.get(id_key(related)) if related is not None else None
        return None if channel is None or channel.json_only else channel

    def _notification(self, data: bytes, related: Any) -> None:
        channel = self._related(related)
        if channel is not None:
            self.events.put(channel, data)
        elif not self.modern:
            self.events.put(self.events.get_channel, data)

    def _server_request(self, data: bytes, body: dict[str, Any], related: Any) -> None:
        if self.modern:
            problem = "the client cannot be asked: the 2026-07-28 generation over HTTP has no "
            refusal = error_reply(body.get("id"), METHOD_NOT_FOUND, problem + "back channel")
            self._spawn(self.forward(parse_body(refusal)))
            return
        channel = self._related(related)
        if channel is None and not self.events.get_channel.connected:
            streams = [c for c in self.requests.values() if not c.json_only]
            live = [c for c in streams if c.connected] or streams
            channel = live[-1] if live else None
        self.events.put(channel or self.events.get_channel, data)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the end -------------------------------------------------------------------------

    async def end(self, reason: str) -> None:
        """Stop the upstreams, answer what they never did with an error, close every
        stream (idempotent)."""
        if self.ended is not None:
            return
        self.ended = reason
        relay = self.relay
        if relay is not None:
            try:
                await relay.close()
            except Exception:  # pragma: no cover - closing must finish
                log.exception("interlock mcp-gateway: closing a session's upstreams failed")
        for channel in list(self.requests.values()):
            problem = f"the session ended ({reason}) before the answer"
            reply = error_reply(channel.original_id, INTERNAL_ERROR, problem).rstrip(b"\n")
            if channel.json_only:
                channel.put(reply, response=True)
            else:
                self.events.put(channel, reply, response=True)
        self.requests.clear()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.events.close()
