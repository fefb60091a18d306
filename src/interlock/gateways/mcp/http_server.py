"""The MCP gateway listening on streamable HTTP (``interlock mcp-gateway --http``):
one endpoint (``/mcp``) speaking the MCP streamable HTTP transport of both protocol
generations, with every ``tools/call`` judged as the stdio gateway judges it.

**Handshake generation (2025-11-25 and before).** A client's ``initialize`` POST
opens a session (``Mcp-Session-Id`` on the answer, a random 192-bit token); each
session has its own relay — its own upstream processes for stdio upstreams (a stdio
server serves one client), its own upstream session for HTTP ones. Then:

- ``POST`` a notification or a response: ``202``; a request: an SSE stream (when the
  client accepts one) carrying the messages that belong to the request and then its
  response — every event with an id, after a priming event, so a dropped
  connection can be resumed — or, for a client that accepts only JSON, the
  response as a JSON body;
- ``GET``: the session's stream for what the upstreams send unasked; with
  ``Last-Event-ID``, the stream that event was on, resumed after it (from a
  bounded in-memory store per session);
- ``DELETE``: the session ends, its upstreams are stopped;
- ``MCP-Protocol-Version``, when sent, must be the version ``initialize`` agreed.

**Per-request generation (2026-07-28).** A POST whose ``MCP-Protocol-Version`` names
it carries no session: its envelope (``_meta``) and its routing headers
(``Mcp-Method``, ``Mcp-Name``, which must match the body) are checked, and it is
relayed through one session per key kept for that generation; the answer is JSON,
or SSE once a message that belongs to the request comes first. Hanging up is
cancelling.

**Every request**: the Host and Origin headers checked against the allow-lists
(DNS rebinding: ``421``/``403``), the client's Interlock key (``401``/``403``; see
:mod:`~interlock.gateways.mcp.http_auth`), the body at most ``max_body_bytes``
(``413``), ``Content-Type: application/json`` (``415``), an acceptable ``Accept``
(``406``), one JSON-RPC message read strictly (a batch, a duplicate key: ``400``). A
session is its key's: another key presenting its id is told ``404``, as for an id
that never was. Sessions idle (no request, no open stream) for ``idle_timeout``
seconds end, and so does one whose upstreams have all gone; at most
``max_sessions`` are open at once (``503`` beyond).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from interlock.gateways.mcp import sse
from interlock.gateways.mcp.http_auth import Caller, Deciders, Refused, bearer
from interlock.gateways.mcp.http_events import Channel
from interlock.gateways.mcp.http_session import HttpSession
from interlock.gateways.mcp.messages import (
    INVALID_REQUEST,
    TOOLS_CALL,
    Message,
    NotAMessage,
    disguised_tools_call,
    error_reply,
    parse_body,
)
from interlock.gateways.mcp.relay import AggregateRelay, Relay, TransparentRelay
from interlock.gateways.mcp.stdio import DEFAULT_MAX_MESSAGE_BYTES, connect_upstream

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
    from interlock.gateways.mcp.relay import Send as CoreSend
    from interlock.gateways.mcp.upstreams import Upstream
    from interlock.guard import Guard

__all__ = [
    "DEFAULT_PORT",
    "HttpGateway",
    "HttpOptions",
    "RelayFactory",
    "relays_for",
]

log = logging.getLogger("interlock.gateways.mcp")

DEFAULT_PORT: Final = 8770
SESSION_HEADER: Final = "mcp-session-id"
VERSION_HEADER: Final = "mcp-protocol-version"
INTERNAL_ERROR: Final = -32603
#: The JSON-RPC error of a request whose headers say otherwise than its body (the SDK's
#: ``mcp_types.jsonrpc.HEADER_MISMATCH``; HTTP 400).
HEADER_MISMATCH: Final = -32020
_PARAM_PREFIX: Final = "mcp-param-"
#: Headers a request may carry once: two readers could take different copies.
_SINGLE: Final = (
    "authorization",
    "content-type",
    SESSION_HEADER,
    VERSION_HEADER,
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "host",
    "origin",
)
_LOCAL_BINDS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
_LOCAL_HOSTS: Final = ("127.0.0.1", "localhost", "[::1]")
_SSE_HEADERS: Final = {"cache-control": "no-cache, no-transform", "x-accel-buffering": "no"}
#: Seconds a session stays active after a streamed answer is handed to the server and
#: before the server starts it (from then on the stream itself keeps it busy).
_HANDOFF_GRACE: Final = 10.0

#: Builds a session's relay: ``(guard, the caller's context, send) -> Relay``.
RelayFactory = Callable[["Guard", "Context", "CoreSend"], Relay]


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How the gateway listens. ``allowed_hosts``: the Host values accepted
    (``None``: any); ``allowed_origins``: the Origin values accepted (a request
    without one is not a browser's, and passes). ``name:*`` matches any port."""

    path: str = "/mcp"
    max_sessions: int = 64
    idle_timeout: float = 1800.0
    max_body_bytes: int = 4 * 1024 * 1024
    max_events: int = 1024
    max_event_bytes: int = 16 * 1024 * 1024
    allowed_hosts: tuple[str, ...] | None = None
    allowed_origins: tuple[str, ...] = ()
    keepalive: float = 15.0

    @classmethod
    def for_bind(
        cls,
        host: str,
        *,
        allowed_hosts: tuple[str, ...] = (),
        allowed_origins: tuple[str, ...] = (),
        **options: Any,
    ) -> HttpOptions:
        """The options for listening on ``host``: a loopback bind accepts only the
        loopback names as Host, and only loopback pages as Origin (DNS rebinding
        cannot reach it from a web page), plus what is given."""
        if host in _LOCAL_BINDS:
            hosts: tuple[str, ...] | None = (
                *(name for local in _LOCAL_HOSTS for name in (local, f"{local}:*")),
                *allowed_hosts,
            )
            origins = (
                *(f"http://{name}" for local in _LOCAL_HOSTS for name in (local, f"{local}:*")),
                *allowed_origins,
            )
        else:
            hosts, origins = (allowed_hosts or None), allowed_origins
        return cls(allowed_hosts=hosts, allowed_origins=origins, **options)


def _matches(value: str, allowed: tuple[str, ...]) -> bool:
    value = value.lower()
    for pattern in (each.lower() for each in allowed):
        if value == pattern:
            return True
        if pattern.endswith(":*"):
            base, _, port = value.rpartition(":")
            if base == pattern[:-2] and port.isdigit():
                return True
    return False


def relays_for(
    config: GatewayConfig,
    env: Mapping[str, str],
    *,
    grace: float = 5.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    **session_options: Any,
) -> RelayFactory:
    """The relay of each session: the unnamed upstream relayed byte for byte, or the
    named ones merged — each session with upstreams of its own. ``session_options``:
    each session core's own (``sampling_timeout``, ``approve_by_elicitation``,
    ``elicitation_timeout``)."""

    def connect(spec: UpstreamSpec) -> Upstream:
        return connect_upstream(spec, env, max_message_bytes, grace)

    def make(guard: Guard, context: Context, send: CoreSend) -> Relay:
        if config.transparent:
            upstream = connect(config.upstreams[0])
            hide = config.hide_denied_tools
            return TransparentRelay(
                guard, upstream, send, hide_denied_tools=hide, context=context, **session_options
            )
        return AggregateRelay(guard, config, connect, send, context=context, **session_options)

    return make


def _error(
    status: int,
    message: str,
    *,
    code: int = INVALID_REQUEST,
    request_id: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    body = error_reply(request_id, code, message).rstrip(b"\n")
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _accepts(request: Request) -> tuple[bool, bool]:
    """Whether the client takes JSON, and SSE (RFC 9110 wildcards included)."""
    kinds = {
        part.split(";")[0].strip().lower() for part in request.headers.get("accept", "").split(",")
    }
    anything = "*/*" in kinds
    return (
        anything or bool(kinds & {"application/json", "application/*"}),
        anything or bool(kinds & {"text/event-stream", "text/*"}),
    )


class HttpGateway:
    """The gateway's sessions and its ASGI app (:meth:`app`).

    Example::

        gateway = HttpGateway(StoreKeys(guard, KeyStore(guard.store)),
                              relays_for(config, upstream_environment()),
                              HttpOptions.for_bind("127.0.0.1"))
        uvicorn.run(gateway.app(), host="127.0.0.1", port=8770)
    """

    def __init__(self, deciders: Deciders, make_relay: RelayFactory, options: HttpOptions) -> None:
        self.deciders = deciders
        self.make_relay = make_relay
        self.options = options
        self.sessions: dict[str, HttpSession] = {}
        #: the per-request generation's session of each key
        self.lanes: dict[str, HttpSession] = {}
        self._lane_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def app(self) -> Starlette:
        methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]
        route = Route(self.options.path, self._endpoint, methods=methods)
        return Starlette(routes=[route], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        reaper = asyncio.create_task(self._reap())
        try:
            yield
        finally:
            reaper.cancel()
            await self.close()

    async def close(self) -> None:
        """End every session (their upstreams stopped)."""
        everyone = [*self.sessions.values(), *self.lanes.values()]
        await asyncio.gather(*(self._end(s, "the gateway stopped") for s in everyone))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def open_sessions(self) -> int:
        return len(self.sessions) + len(self.lanes)

    # -- every request -------------------------------------------------------------------

    async def _endpoint(self, request: Request) -> Response:
        refused = self._refused_origin(request)
        if refused is not None:
            return refused
        if request.method not in ("GET", "POST", "DELETE"):
            return _error(405, "Method Not Allowed", headers={"allow": "GET, POST, DELETE"})
        for name in _SINGLE:
            if len(request.headers.getlist(name)) > 1:
                return _error(400, f"the {name} header appears more than once")
        token = bearer(request.headers.get("authorization"))
        caller = token if isinstance(token, Refused) else await self.deciders.authenticate(token)
        if isinstance(caller, Refused):
            headers = {"www-authenticate": "Bearer"} if caller.status == 401 else None
            return _error(caller.status, caller.message, headers=headers)
        if request.method == "POST":
            return await self._post(request, caller)
        if request.method == "GET":
            return await self._get(request, caller)
        return await self._delete(request, caller)

    def _refused_origin(self, request: Request) -> Response | None:
        """DNS rebinding: a Host not ours (``421``), a page's Origin not allowed (``403``)."""
        hosts = self.options.allowed_hosts
        host = request.headers.get("host", "")
        if hosts is not None and not _matches(host, hosts):
            log.warning("interlock mcp-gateway: refused a request for host %r", host[:100])
            return _error(421, "Misdirected Request: the Host header is not this gateway's")
        origin = request.headers.get("origin")
        if origin is not None and not _matches(origin, self.options.allowed_origins):
            log.warning("interlock mcp-gateway: refused a request from origin %r", origin[:100])
            return _error(403, "Forbidden: the Origin is not allowed")
        return None

    async def _body(self, request: Request) -> bytes | Response:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return _error(413, f"the body is over {limit} bytes")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return _error(413, f"the body is over {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _session(self, request: Request, caller: Caller) -> HttpSession | Response:
        """The session the request names, if it is the caller's."""
        session_id = request.headers.get(SESSION_HEADER)
        if session_id is None:
            return _error(400, "Bad Request: missing Mcp-Session-Id (initialize first)")
        session = self.sessions.get(session_id)
        if session is None or session.ended is not None or session.caller.key_id != caller.key_id:
            # Another key's session answers as one that does not exist.
            return _error(404, "Not Found: no such session (it ended, or never was)")
        version = request.headers.get(VERSION_HEADER)
        if version is not None and session.version is not None and version != session.version:
            problem = f"MCP-Protocol-Version {version!r} is not this session's ({session.version})"
            return _error(400, problem)
        return session

    # -- POST ----------------------------------------------------------------------------

    async def _post(self, request: Request, caller: Caller) -> Response:
        kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if kind != "application/json":
            return _error(415, "Unsupported Media Type: Content-Type must be application/json")
        takes_json, takes_sse = _accepts(request)
        if not (takes_json or takes_sse):
            return _error(406, "Not Acceptable: accept application/json or text/event-stream")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        try:
            message = parse_body(body)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: refused a client message: %s", exc)
            return _error(400, str(exc), code=exc.code, request_id=exc.request_id)
        method = message.method or ""
        tools_call = method == TOOLS_CALL or disguised_tools_call(method)
        if message.kind == "notification" and tools_call:
            log.warning("interlock mcp-gateway: refused a %r sent as a notification", method)
            return _error(400, "a tools/call is a request (with an id); not forwarded")
        version = request.headers.get(VERSION_HEADER)
        if version is not None and not _handshake_version(version):
            if request.headers.get(SESSION_HEADER) is not None:
                return _error(400, f"a request of protocol {version!r} carries no Mcp-Session-Id")
            return await self._modern(request, caller, message, takes_json, takes_sse)
        if request.headers.get(SESSION_HEADER) is None and message.method == "initialize":
            opened = await self._open(caller)
            if isinstance(opened, Response):
                return opened
            session: HttpSession | Response = opened
        else:
            session = self._session(request, caller)
        if isinstance(session, Response):
            return session
        return await self._deliver(session, message, takes_sse)

    async def _deliver(self, session: HttpSession, message: Message, takes_sse: bool) -> Response:
        assert session.id is not None
        headers = {SESSION_HEADER: session.id}
        session.touch()
        if message.kind != "request":
            await session.forward(message)
            return Response(status_code=202, headers=headers)
        opened = session.open_request(message, json_only=not takes_sse)
        if opened is None:
            return _error(400, "the request id is already in use", request_id=message.id)
        channel, forwarded = opened
        session.busy += 1
        try:
            await session.forward(forwarded)
            if not channel.json_only:
                stream = self._stream(session, channel, after=0, priming=True)
                return StreamingResponse(
                    stream, media_type="text/event-stream", headers={**_SSE_HEADERS, **headers}
                )
            answer = await session.answer_of(channel)
        finally:
            session.busy -= 1
            # An SSE answer's stream counts as busy only once the server starts it: until
            # then a grace keeps the reaper off (a loaded loop can take longer than a
            # short idle timeout, and the session ended under the client's answer).
            session.touch(_HANDOFF_GRACE if not channel.json_only else 0.0)
        if answer is None:
            return _error(500, "the session ended before the answer", code=INTERNAL_ERROR)
        return Response(answer, media_type="application/json", headers=headers)

    async def _stream(
        self, session: HttpSession, channel: Channel, *, after: int, priming: bool
    ) -> AsyncIterator[bytes]:
        """A connection reading ``channel`` from ``after``: until its response (a
        request's), the session's end, or a newer connection taking over."""
        reader = channel.take_over()
        channel.connected += 1
        session.busy += 1
        try:
            if priming:
                yield sse.event(b"", channel.event_id(after))
            cursor = after
            while True:
                progressed = False
                for seq, data in channel.after(cursor):
                    yield sse.event(data, channel.event_id(seq))
                    cursor, progressed = seq, True
                    channel.delivered = max(channel.delivered, seq)
                if cursor < channel.last_seq:
                    if not progressed:  # what is left was evicted (logged)
                        cursor = channel.last_seq
                    continue
                if channel.finished or not channel.reading(reader) or session.ended:
                    return
                if not await channel.changed(cursor, reader, self.options.keepalive):
                    yield sse.comment("keep-alive")
        finally:
            channel.connected -= 1
            session.busy -= 1
            session.touch()

    # -- GET and DELETE ------------------------------------------------------------------

    async def _get(self, request: Request, caller: Caller) -> Response:
        _, takes_sse = _accepts(request)
        if not takes_sse:
            return _error(406, "Not Acceptable: a GET stream is text/event-stream")
        version = request.headers.get(VERSION_HEADER)
        if version is not None and not _handshake_version(version):
            return _error(405, f"protocol {version!r} has no GET stream", headers={"allow": "POST"})
        session = self._session(request, caller)
        if isinstance(session, Response):
            return session
        assert session.id is not None
        headers = {**_SSE_HEADERS, SESSION_HEADER: session.id}
        session.touch()
        last = request.headers.get("last-event-id")
        if last is not None:
            found = session.events.find(last)
            if found is None:
                return _error(404, "Not Found: no stream of this session has that event id")
            channel, seq = found
            stream = self._stream(session, channel, after=seq, priming=False)
            return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
        standing = session.events.get_channel
        if standing.connected:
            return _error(409, "Conflict: this session's GET stream is already open")
        stream = self._stream(session, standing, after=standing.delivered, priming=True)
        return StreamingResponse(stream, media_type="text/event-stream", headers=headers)

    async def _delete(self, request: Request, caller: Caller) -> Response:
        session = self._session(request, caller)
        if isinstance(session, Response):
            return session
        await self._end(session, "the client ended it")
        return Response(status_code=204)

    # -- the per-request generation ------------------------------------------------------

    async def _modern(
        self,
        request: Request,
        caller: Caller,
        message: Message,
        takes_json: bool,
        takes_sse: bool,
    ) -> Response:
        from mcp.shared.inbound import (
            ERROR_CODE_HTTP_STATUS,
            InboundLadderRejection,
            classify_inbound_request,
            unsupported_protocol_version_rejection,
        )

        version = request.headers.get(VERSION_HEADER, "")
        if not takes_json:
            return _error(406, "Not Acceptable: accept application/json")
        if message.kind == "response":
            return _error(400, "a response answers no request at this protocol version")
        if message.kind == "notification":
            rejection = unsupported_protocol_version_rejection(version)
            if rejection is not None:
                return _error(400, rejection.message, code=rejection.code)
            return Response(status_code=202)  # nothing to act on (as the SDK's server)
        verdict = classify_inbound_request(message.body, headers=dict(request.headers))
        if isinstance(verdict, InboundLadderRejection):
            status = ERROR_CODE_HTTP_STATUS.get(verdict.code, 400)
            body = error_reply(message.id, verdict.code, verdict.message, verdict.data)
            return Response(body.rstrip(b"\n"), status_code=status, media_type="application/json")
        lane = await self._lane(caller)
        if isinstance(lane, Response):
            return lane
        lane.touch()
        if message.method == "tools/call":
            mismatch = _param_header_mismatch(lane.relay, message, request)
            if mismatch is not None:
                log.warning("interlock mcp-gateway: refused a tools/call: %s", mismatch)
                body = error_reply(message.id, HEADER_MISMATCH, mismatch)
                return Response(body.rstrip(b"\n"), status_code=400, media_type="application/json")
        opened = lane.open_request(message, json_only=not takes_sse)
        assert opened is not None  # renamed ids never meet
        channel, forwarded = opened
        await lane.forward(forwarded)
        lane.touch(_HANDOFF_GRACE)  # busy once the server starts the answer (as above)
        return _DeferredAnswer(lane, channel, self.options.keepalive)  # type: ignore[return-value]

    async def _lane(self, caller: Caller) -> HttpSession | Response:
        async with self._lane_lock:
            lane = self.lanes.get(caller.key_id)
            if lane is not None and lane.ended is None:
                return lane
            return await self._open(caller, modern=True)

    # -- sessions ------------------------------------------------------------------------

    async def _open(self, caller: Caller, *, modern: bool = False) -> HttpSession | Response:
        if self.open_sessions >= self.options.max_sessions:
            log.warning(
                "interlock mcp-gateway: refused a new session: %d are open", self.open_sessions
            )
            return _error(503, "Service Unavailable: too many open sessions", code=INTERNAL_ERROR)
        guard = self.deciders.guard_for(caller)
        session_id = None if modern else secrets.token_urlsafe(24)
        session = HttpSession(
            session_id,
            caller,
            guard,
            modern=modern,
            max_events=self.options.max_events,
            max_event_bytes=self.options.max_event_bytes,
        )
        # a session id of its own (not the Mcp-Session-Id, a bearer of the session):
        # session-aware rules see this client session's steps, no other's
        context = replace(caller.context, session_id=f"mcp-{secrets.token_hex(8)}")
        session.relay = self.make_relay(guard, context, session.send)
        if session_id is None:
            self.lanes[caller.key_id] = session
        else:
            self.sessions[session_id] = session
        # Busy while its upstreams start: a slow start (a process spawned on a loaded
        # machine) must not let the reaper end the session as idle before its first
        # request is even delivered (its client then got an empty answer).
        session.busy += 1
        try:
            await session.relay.start()
        except OSError as exc:
            self._forget(session)
            self.deciders.done_with(guard)
            log.error("interlock mcp-gateway: could not start the upstream: %s", exc)
            problem = f"could not start the upstream: {exc}"
            return _error(502, problem, code=INTERNAL_ERROR)
        finally:
            session.busy -= 1
            session.touch()
        watcher = asyncio.create_task(self._watch(session))
        self._tasks.add(watcher)
        watcher.add_done_callback(self._tasks.discard)
        log.info(
            "interlock mcp-gateway: session %s opened for %s (tenant %s)",
            session_id or "(2026-07-28)",
            caller.agent,
            caller.tenant,
        )
        return session

    def _forget(self, session: HttpSession) -> None:
        if session.id is None:
            if self.lanes.get(session.caller.key_id) is session:
                del self.lanes[session.caller.key_id]
        else:
            self.sessions.pop(session.id, None)

    async def _watch(self, session: HttpSession) -> None:
        assert session.relay is not None
        await session.relay.gone()
        await self._end(session, "its upstreams are gone")

    async def _end(self, session: HttpSession, reason: str) -> None:
        if session.ended is not None:
            return
        self._forget(session)  # its id answers 404 from now on
        await session.end(reason)
        self.deciders.done_with(session.guard)
        log.info("interlock mcp-gateway: session %s ended: %s", session.id or "-", reason)

    async def _reap(self) -> None:
        interval = min(5.0, max(self.options.idle_timeout / 4, 0.05))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for session in [*self.sessions.values(), *self.lanes.values()]:
                if session.busy == 0 and now - session.last_active > self.options.idle_timeout:
                    await self._end(session, "idle")


def _handshake_version(version: str) -> bool:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return version in HANDSHAKE_PROTOCOL_VERSIONS


class _DeferredAnswer:
    """The answer to a request of the per-request generation: a JSON body when the
    response is the first thing for it (its error's status from the protocol's
    table), else an SSE stream from the first message that belongs to it (or after
    ``keepalive`` seconds of silence, with keep-alive comments). The client hanging
    up first cancels the request."""

    def __init__(self, session: HttpSession, channel: Channel, keepalive: float) -> None:
        self.session = session
        self.channel = channel
        self.keepalive = keepalive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session, channel = self.session, self.channel
        hung_up = asyncio.Event()

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hung_up.set()
            channel.poke()

        listener = asyncio.create_task(listen())
        reader = channel.take_over()
        channel.connected += 1
        session.busy += 1
        try:
            await self._answer(send, reader, hung_up)
        finally:
            listener.cancel()
            channel.connected -= 1
            session.busy -= 1
            session.touch()
            session.events.forget(channel)

    async def _answer(self, send: Send, reader: int, hung_up: asyncio.Event) -> None:
        channel = self.channel
        streaming = False
        cursor = 0
        while True:
            pending = list(channel.after(cursor))
            if not streaming and pending:
                if channel.answered and pending[-1][0] == channel.last_seq and len(pending) == 1:
                    await self._json(send, pending[0][1])
                    return
                await self._start_sse(send)
                streaming = True
            for seq, data in pending:
                await self._body(send, sse.event(data))
                cursor = seq
            if not pending and cursor < channel.last_seq:  # evicted (logged)
                cursor = channel.last_seq
            if channel.finished and cursor >= channel.last_seq:
                if streaming:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            if hung_up.is_set():
                self.session.cancel(channel)
                return
            if not await channel.changed(cursor, reader, self.keepalive):
                if not streaming:
                    await self._start_sse(send)
                    streaming = True
                await self._body(send, sse.comment())

    async def _json(self, send: Send, data: bytes) -> None:
        from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS

        status = 200
        if b'"error"' in data:
            with contextlib.suppress(ValueError, AttributeError, TypeError):
                import orjson

                code = orjson.loads(data)["error"]["code"]
                status = ERROR_CODE_HTTP_STATUS.get(code, 200)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    @staticmethod
    async def _body(send: Send, data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    @staticmethod
    async def _start_sse(send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        headers += [(name.encode(), value.encode()) for name, value in _SSE_HEADERS.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})


def _param_header_mismatch(relay: Relay | None, message: Message, request: Request) -> str | None:
    """What is wrong with the ``Mcp-Param-*`` headers of a per-request ``tools/call``,
    or ``None``. An intermediary in front of the gateway may route on them, so each must
    say what the body says: the headers the tool's schema declares (``x-mcp-header``)
    are checked against the arguments by the SDK's own rule (present together and
    equal, or absent together; never twice); a header no declared argument stands
    behind, or any header for a tool the gateway has not seen listed, is refused — the
    client then lists the tools and calls again, as the protocol has it. A malformed
    call passes here: the relay answers it (``-32602``)."""
    from mcp.shared.inbound import (
        MCP_PARAM_HEADER_PREFIX,
        find_invalid_x_mcp_header,
        validate_mcp_param_headers,
        x_mcp_header_map,
    )

    params = message.params
    name = params.get("name") if isinstance(params, Mapping) else None
    arguments = params.get("arguments", {}) if isinstance(params, Mapping) else None
    if not isinstance(name, str) or not isinstance(arguments, Mapping) or relay is None:
        return None
    sent = {
        key.lower() for key, _ in request.headers.items() if key.lower().startswith(_PARAM_PREFIX)
    }
    schema = relay.tool_schema(name)
    if schema is None:
        if sent:
            return (
                f"Mcp-Param-* headers on a call of {name!r}, a tool the gateway has not "
                "seen listed: list the tools, then call again"
            )
        return None
    declared = (
        set()
        if find_invalid_x_mcp_header(schema) is not None
        else {
            f"{MCP_PARAM_HEADER_PREFIX}{token}".lower()
            for token in x_mcp_header_map(schema).values()
        }
    )
    undeclared = sorted(sent - declared)
    if undeclared:
        return f"{undeclared[0]} header stands for no argument of {name!r}"
    rejection = validate_mcp_param_headers(schema, arguments, request.headers)
    return None if rejection is None else rejection.message
