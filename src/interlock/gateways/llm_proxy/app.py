"""The proxy's ASGI app: ``POST /v1/chat/completions`` and ``POST /v1/responses``
(OpenAI) and ``POST /v1/messages`` (Anthropic), streamed and not.

One request is one model call, in this order — nothing reaches the upstream before
step 4:

1. the client's Interlock key → tenant and agent (401/403 otherwise): from the
   proxy's own store (:class:`~.auth.StoreKeys`), or from the shared server, which
   then judges every call with that key (:class:`~.shared.SharedServer`);
2. the body read (at most ``max_body`` bytes) and parsed: a JSON object naming a
   ``model`` (400 otherwise);
3. the guard's model-call path (:meth:`interlock.Guard.llm_call`): an ``llm``
   action, judged, its budget reserved from the proxy's estimate of the request, its
   record durable (at the policy's audit durability); a refusal answers in the
   provider's error format;
4. the upstream call with the proxy's own key (:mod:`interlock.gateways.http1`); then
   exactly one of: commit from the real usage (non-streamed: the response's
   ``usage``, committed once the answer has been sent; streamed: the metered usage
   at the end of the stream, or at the client's disconnect) or release (the upstream
   failed or answered an error, which is relayed as it came). A proxy that dies
   between an answer and its commit leaves the reservation open: the reaper charges
   it in full after its TTL — nothing is lost, the charge is the estimate's.

The tool calls in the answer are judged before the agent sees them: a non-streamed
answer's in :mod:`.tools`, a stream's held until complete in :mod:`.stream_tools`.

A plain ASGI app, no framework on the request path (:mod:`.asgi`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import orjson

from interlock.core.action import Context
from interlock.errors import Blocked, describe
from interlock.gateways.http1 import Limits, Target, Timeouts, UpstreamError
from interlock.guard import Guard
from interlock.ledger.estimate import estimate_model_call
from interlock.ledger.llm_call import LLMCall

from .asgi import (
    JSON,
    Disconnected,
    Receive,
    Scope,
    Send,
    TooLarge,
    read_body,
    request_headers,
    send_answer,
)
from .auth import Caller, Callers, StoreKeys
from .config import ProxyConfig, Upstream
from .flavours import Flavour, flavour_of
from .refusals import Provider, Refusal, refusal_for_decision
from .relay import Gate, SseRelay
from .response_items import ItemJudge, judge_response
from .response_stream import ResponsesRelay
from .responses import RESPONSES, ResponsesFlavour
from .sessions import SESSION_HEADER, TURN, ProxySessions, Turn, inbound_of, session_id_of
from .shared import SharedServer
from .stream_tools import tool_gate
from .tools import judge_tool_calls
from .upstream import UpstreamResponse, Upstreams, upstream_client

if TYPE_CHECKING:
    import httpx

__all__ = ["ProxyApp", "create_app"]

log = logging.getLogger("interlock")

_AnyFlavour = Flavour | ResponsesFlavour
_APIS: Final = {"openai": "chat", "anthropic": "messages"}
_RELAYED_HEADERS: Final = ("content-type", "request-id", "x-request-id", "retry-after")
#: the upstream client's bounds (a proxy holds one connection per call in flight, and
#: streams are long)
UPSTREAM_TIMEOUTS: Final = Timeouts(connect=10.0, read=600.0, write=60.0, pool=10.0)
UPSTREAM_LIMITS: Final = Limits(max_connections=1000, max_idle=100)
_SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


def create_app(
    guard: Guard | SharedServer,
    config: ProxyConfig,
    *,
    on_settled: Callable[[LLMCall], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    timeouts: Timeouts | None = None,
    limits: Limits | None = None,
) -> ProxyApp:
    """The proxy app judging with ``guard`` (which must have a SQL store: it holds
    the API keys), or through a :class:`SharedServer` with each client's own key.
    ``on_settled`` is told of each model call once its budget is settled (an
    observer: its failure is ignored); ``transport`` replaces the network with an
    httpx transport (``httpx.MockTransport``: a fake model in process);
    ``timeouts`` and ``limits`` bound the upstream client (:data:`UPSTREAM_TIMEOUTS`,
    :data:`UPSTREAM_LIMITS`)."""
    callers: Callers = guard if isinstance(guard, SharedServer) else StoreKeys(guard)
    return ProxyApp(
        callers,
        config,
        on_settled,
        timeouts or UPSTREAM_TIMEOUTS,
        limits or UPSTREAM_LIMITS,
        transport,
    )


class ProxyApp:
    """The ASGI app (see the module docstring); made by :func:`create_app`."""

    def __init__(
        self,
        callers: Callers,
        config: ProxyConfig,
        on_settled: Callable[[LLMCall], None] | None,
        timeouts: Timeouts,
        limits: Limits,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.callers = callers
        self.config = config
        self.on_settled = on_settled
        self.timeouts = timeouts
        self.limits = limits
        self.transport = transport
        self.client: Upstreams | None = None
        #: the sessions this process has seen (a policy that reads sessions)
        self.sessions = ProxySessions()
        self._settled: weakref.WeakSet[LLMCall] = weakref.WeakSet()
        # calls checked on the loop (Caller.inline): settled on the loop, deferred
        self._inline: weakref.WeakSet[LLMCall] = weakref.WeakSet()
        self._deferred: list[tuple[LLMCall, BaseException | None]] = []
        self._drain_scheduled = False
        openai, anthropic = config.openai, config.anthropic
        self.routes: dict[str, tuple[Provider, _AnyFlavour, Upstream | None, Target | None]] = {
            "/v1/chat/completions": _route("openai", flavour_of("openai"), openai),
            "/v1/responses": _route("openai", RESPONSES, openai),
            "/v1/messages": _route("anthropic", flavour_of("anthropic"), anthropic),
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    # -- lifespan ---------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        """Open the upstream client (on the serving loop) and the callers."""
        if self.client is None:
            targets = [route[3] for route in self.routes.values() if route[3] is not None]
            self.client = upstream_client(
                self.timeouts, self.limits, transport=self.transport, targets=targets
            )
            await self.callers.start()

    async def aclose(self) -> None:
        self.settle_deferred()  # before the store can close: nothing left open
        client, self.client = self.client, None
        if client is not None:
            await client.aclose()
            await self.callers.aclose()

    # -- one request ------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"])
        if route is None:
            refusal = Refusal(404, "not_found", f"this proxy does not serve {scope['path']}")
            await refusal.send(send, "openai")
            return
        provider = route[0]
        if scope["method"] != "POST":
            refusal = Refusal(405, "method_not_allowed", "this path takes POST only")
            headers, body = refusal.render(provider)
            headers.append((b"allow", b"POST"))
            await send_answer(send, 405, headers, body)
            return
        if self.client is None:  # served without a lifespan: open on the first call
            await self.start()
        await self._relay(scope, receive, send, *route)

    async def _relay(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        provider: Provider,
        flavour: _AnyFlavour,
        upstream: Upstream | None,
        target: Target | None,
    ) -> None:
        headers = request_headers(scope)
        caller = await self.callers.caller(headers)
        if isinstance(caller, Refusal):
            return await caller.send(send, provider)
        if upstream is None or target is None or self.client is None:
            refusal = Refusal(404, "not_configured", f"this proxy has no {provider} upstream")
            return await refusal.send(send, provider)
        body = await _read_json(receive, headers, self.config.max_body)
        if body is None:
            return None  # the client left
        if isinstance(body, Refusal):
            return await body.send(send, provider)
        unfit = flavour.unfit(body) if isinstance(flavour, ResponsesFlavour) else None
        if unfit is not None:
            return await unfit.send(send, provider)
        guard, context = caller.guard, caller.context
        turn: Turn | None = None
        server = caller.server_sessions
        if (
            server.active()
            if server is not None
            else guard._sessions is not None and guard.sessions is not None
        ):
            taken = await self._take_in(headers, body, provider, flavour, caller)
            if isinstance(taken, Refusal):
                return await taken.send(send, provider)
            context, turn = taken
        token = TURN.set(turn)
        try:
            await self._call(
                scope,
                receive,
                send,
                provider,
                flavour,
                upstream,
                target,
                headers,
                body,
                caller,
                context,
            )
        finally:
            TURN.reset(token)
        return None

    async def _take_in(
        self,
        headers: dict[str, str],
        body: dict[str, Any],
        provider: Provider,
        flavour: _AnyFlavour,
        caller: Caller,
    ) -> tuple[Context, Turn | None] | Refusal:
        """The request's session (see :mod:`.sessions`), with what it brings in
        recorded; or the refusal: a malformed session header (400), a history that
        cannot be written (503: a tool result left out would make its data read as
        new)."""
        guard, context = caller.guard, caller.context
        api = "responses" if isinstance(flavour, ResponsesFlavour) else _APIS[provider]
        inbound = inbound_of(api, body)
        session_id: str | None = None
        named = self.config.session_header and SESSION_HEADER in headers
        if api == "responses" and not named:
            session_id = self.sessions.continued(context, body)
        if session_id is None:
            session_id = session_id_of(headers, inbound, context, header=self.config.session_header)
        if session_id is None:
            message = f"{SESSION_HEADER} must be 1 to 256 printable ASCII characters"
            return Refusal(400, "invalid_request", message)
        context = dataclasses.replace(context, session_id=session_id)
        try:
            turn = await self.sessions.take_in(
                guard, context, inbound, inline=caller.inline, server=caller.server_sessions
            )
        except Exception as exc:
            log.error("interlock: session %s: the request's inputs not kept: %s", session_id, exc)
            message = (
                "Interlock could not decide, so the call was not made: the session's "
                f"history could not be written ({describe(exc)})"
            )
            return Refusal(503, "interlock_undetermined", message)
        server = caller.server_sessions
        if server is not None and not server.active():
            # the server kept nothing: its policy reads no sessions, and the request is
            # judged as one without (an approval's intent does not name a session)
            return caller.context, None
        return context, turn

    async def _call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        provider: Provider,
        flavour: _AnyFlavour,
        upstream: Upstream,
        target: Target,
        headers: dict[str, str],
        body: dict[str, Any],
        caller: Caller,
        context: Context,
    ) -> None:
        guard, client = caller.guard, self.client
        assert client is not None  # opened by _http
        streamed = body.get("stream") is True
        arguments = flavour.arguments(body)
        call = guard.llm_call(body["model"], context=context, arguments=arguments)
        try:
            if caller.inline:
                call.__enter__()
                self._inline.add(call)
            else:
                await call.__aenter__()
        except Blocked as exc:
            refusal = refusal_for_decision(exc)
            if refusal.status == 401:
                self.callers.forget(caller)
            return await refusal.send(send, provider)
        try:  # from here on the reservation is open: every way out settles it
            sent, asked_usage = flavour.upstream_body(body)
            answer = await client.send(
                "POST",
                target,
                flavour.upstream_headers(upstream, headers).items(),
                orjson.dumps(sent),
            )
        except BaseException as exc:
            await self._settle(call, failed=exc)
            if isinstance(exc, UpstreamError):
                message = f"the {provider} upstream could not be reached ({type(exc).__name__})"
                return await Refusal(502, "upstream_unreachable", message).send(send, provider)
            raise
        if answer.status_code >= 400:  # relayed as it came; nothing was spent
            return await self._upstream_error(call, answer, send)
        if not streamed:
            return await self._unstreamed(call, flavour, answer, guard, context, send)
        decision_id = call.decision.decision_id if call.decision is not None else None
        stream_headers = _stream_headers(decision_id, context.session_id)
        estimated = _estimated_input(arguments)
        if isinstance(flavour, ResponsesFlavour):
            relay: SseRelay | ResponsesRelay = self._stream_responses(
                call, flavour, answer, estimated, guard, context, stream_headers
            )
        else:
            gate = tool_gate(provider, guard, context, max_held_bytes=self.config.max_held_bytes)
            relay = self._stream(
                call,
                flavour,
                answer,
                estimated,
                gate,
                stream_headers,
                hide_usage=not asked_usage,
            )
        await relay(scope, receive, send)
        return None

    async def _upstream_error(self, call: LLMCall, answer: UpstreamResponse, send: Send) -> None:
        content = b""
        try:
            content = await answer.aread()
        except UpstreamError:
            pass
        finally:
            await answer.aclose()
            failed = RuntimeError(f"upstream {answer.status_code}")
            await self._settle(call, failed=failed)
        await send_answer(send, answer.status_code, _relayed(answer), content)

    async def _unstreamed(
        self,
        call: LLMCall,
        flavour: _AnyFlavour,
        answer: UpstreamResponse,
        guard: Guard,
        context: Context,
        send: Send,
    ) -> None:
        """Read, judge and answer; then commit. The answer goes first: a crash
        between the two leaves the reservation to the reaper, which charges it in
        full (module docstring)."""
        try:  # whatever ends this (a cancellation included), the call is settled once
            status, headers, content = await self._judged(call, flavour, answer, guard, context)
            await answer.aclose()
            await send_answer(send, status, headers, content)
        finally:
            await answer.aclose()
            await self._settle(call)

    async def _judged(
        self,
        call: LLMCall,
        flavour: _AnyFlavour,
        answer: UpstreamResponse,
        guard: Guard,
        context: Context,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        try:
            content = await answer.aread()
            reply = orjson.loads(content)
            if not isinstance(reply, dict):
                raise ValueError("the response is not a JSON object")
        except (UpstreamError, ValueError) as exc:
            # The call happened (2xx) but cannot be read, so its tool calls cannot be
            # judged: charged as reserved, and nothing of it reaches the agent.
            refusal = Refusal(502, "upstream_unreadable", f"the upstream's answer: {exc}")
            headers, body = refusal.render(flavour.provider)
            return refusal.status, headers, body
        usage = flavour.usage(reply)
        if usage is not None:
            call.record(usage)
        turn = TURN.get()
        if turn is not None and isinstance(flavour, ResponsesFlavour):
            turn.responded(reply.get("id"))
        if isinstance(flavour, ResponsesFlavour):
            refused = await judge_response(guard, reply, context)
        else:
            refused = await judge_tool_calls(guard, flavour.provider, reply, context)
        headers = [JSON, *(h for h in _relayed(answer) if h[0] != b"content-type")]
        if call.decision is not None:
            headers.append((b"x-interlock-decision-id", call.decision.decision_id.encode()))
        if context.session_id is not None:
            headers.append((SESSION_HEADER.encode(), context.session_id.encode()))
        if refused:
            content = orjson.dumps(reply)
        return answer.status_code, headers, content

    def _stream(
        self,
        call: LLMCall,
        flavour: Flavour,
        answer: UpstreamResponse,
        estimated_input: int,
        gate: Gate,
        headers: dict[str, str],
        *,
        hide_usage: bool,
    ) -> SseRelay:
        meter = flavour.meter(estimated_input)

        async def settle(failed: bool) -> None:
            if failed:
                broken = RuntimeError("the upstream stream failed")
                await self._settle(call, failed=broken)
                return
            call.record(meter.usage())
            await self._settle(call)

        return SseRelay(answer, meter, settle, headers=headers, hide_usage=hide_usage, gate=gate)

    def _stream_responses(
        self,
        call: LLMCall,
        flavour: ResponsesFlavour,
        answer: UpstreamResponse,
        estimated_input: int,
        guard: Guard,
        context: Context,
        headers: dict[str, str],
    ) -> ResponsesRelay:
        """A Responses stream: its tool calls held and judged (response_stream)."""
        meter = flavour.meter(estimated_input)

        async def settle(failed: bool) -> None:
            if failed:
                broken = RuntimeError("the upstream stream failed")
                await self._settle(call, failed=broken)
                return
            call.record(meter.usage())
            await self._settle(call)

        judge = ItemJudge(guard, context)
        return ResponsesRelay(answer, meter, settle, judge, headers=headers)

    async def _settle(self, call: LLMCall, *, failed: BaseException | None = None) -> None:
        """Commit (or release, when ``failed``) — once: a second call does nothing.

        A call checked on the loop (the embedded SQLite store) is settled on the loop
        too: a release at once (it goes before the answer, as before); a commit at
        the loop's next turn (``call_soon``), once the answer it follows has been
        sent and this request is done — while the client reads that answer. A
        worker thread settling it instead competed with the client's next request
        for the interpreter, and cost about twice the CPU (ADR 0020). A proxy that
        dies before the settlement leaves the reservation to the reaper, which
        charges it in full (module docstring): the same as before.

        Otherwise on the store's worker thread (or over HTTP to the shared server),
        shielded from cancellation."""
        if call in self._settled:
            return
        self._settled.add(call)
        if call in self._inline:
            self._deferred.append((call, failed))
            if failed is not None:  # a release goes before the answer: now
                self.settle_deferred()
            elif not self._drain_scheduled:
                self._drain_scheduled = True
                asyncio.get_running_loop().call_soon(self.settle_deferred)
            return
        kind = None if failed is None else type(failed)
        with anyio.CancelScope(shield=True):
            await call.__aexit__(kind, failed, None)
        self._told(call)

    def settle_deferred(self) -> int:
        """Settle every call queued by :meth:`_settle`, in order; how many. Never
        raises: a settlement that fails is logged (by the call), and the reaper
        settles its reservation after its TTL."""
        self._drain_scheduled = False
        done = 0
        while self._deferred:
            call, failed = self._deferred.pop(0)
            kind = None if failed is None else type(failed)
            try:
                call.__exit__(kind, failed, None)
            except Exception:  # a sink's failure: the settlement itself never raises
                log.exception("interlock: settling a model call failed")
            self._told(call)
            done += 1
        return done

    def _told(self, call: LLMCall) -> None:
        if self.on_settled is not None:
            with contextlib.suppress(Exception):  # an observer never changes the answer
                self.on_settled(call)


def _route(
    provider: Provider, flavour: _AnyFlavour, upstream: Upstream | None
) -> tuple[Provider, _AnyFlavour, Upstream | None, Target | None]:
    target = None if upstream is None else Target.of(upstream.base_url + flavour.path)
    return provider, flavour, upstream, target


def _stream_headers(decision_id: str | None, session_id: str | None) -> dict[str, str]:
    headers = {k.decode(): v.decode() for k, v in _SSE_HEADERS}
    if decision_id is not None:
        headers["x-interlock-decision-id"] = decision_id
    if session_id is not None:
        headers[SESSION_HEADER] = session_id
    return headers


def _estimated_input(arguments: dict[str, Any]) -> int:
    try:
        return estimate_model_call(arguments).input_tokens
    except Exception:
        return 0


def _relayed(answer: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    found = answer.headers
    return [
        (name.encode(), found[name].encode("latin-1")) for name in _RELAYED_HEADERS if name in found
    ]


async def _read_json(
    receive: Receive, headers: dict[str, str], limit: int
) -> dict[str, Any] | Refusal | None:
    """The request's JSON object, the refusal of it, or None: the client left."""
    try:
        raw = await read_body(receive, headers, limit)
    except TooLarge:
        return Refusal(413, "too_large", f"the request body is larger than {limit} bytes")
    except Disconnected:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return Refusal(400, "invalid_json", "the request body is not JSON")
    if not isinstance(body, dict):
        return Refusal(400, "invalid_request", "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Refusal(400, "invalid_request", "the request must name its model (a string)")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return Refusal(400, "invalid_request", "stream must be true or false")
    return body
