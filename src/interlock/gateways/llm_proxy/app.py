"""The proxy's Starlette app: ``POST /v1/chat/completions`` and ``POST /v1/responses``
(OpenAI) and ``POST /v1/messages`` (Anthropic), streamed and not.

One request is one model call, in this order — nothing reaches the upstream before
step 4:

1. the client's Interlock key → tenant and agent (401/403 otherwise);
2. the body read (at most ``max_body`` bytes) and parsed: a JSON object naming a
   ``model`` (400 otherwise);
3. the guard's model-call path (:meth:`interlock.Guard.llm_call`): an ``llm``
   action, judged, its budget reserved from the proxy's estimate of the request; a
   refusal answers in the provider's error format;
4. the upstream call with the proxy's own key; then exactly one of: commit from the
   real usage (non-streamed: the response's ``usage``; streamed: the metered usage at
   the end of the stream, or at the client's disconnect) or release (the upstream
   failed or answered an error, which is relayed as it came).

The tool calls in the answer are judged before the agent sees them: a non-streamed
answer's in :mod:`.tools`, a stream's held until complete in :mod:`.stream_tools`.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from interlock.core.action import Context
from interlock.errors import Blocked
from interlock.guard import Guard
from interlock.ledger.estimate import estimate_model_call
from interlock.ledger.llm_call import LLMCall
from interlock.server.keys import ApiKey, KeyStore
from interlock.store.sql import SqlStore

from .auth import authenticate
from .config import ProxyConfig, Upstream
from .flavours import Flavour, flavour_of
from .refusals import Provider, Refusal, refusal_for_decision
from .relay import Gate, SseRelay
from .response_items import ItemJudge, judge_response
from .response_stream import ResponsesRelay
from .responses import RESPONSES, ResponsesFlavour
from .stream_tools import tool_gate
from .tools import judge_tool_calls

__all__ = ["create_app"]

RUNTIME = "llm-proxy"
_AnyFlavour = Flavour | ResponsesFlavour
_RELAYED_HEADERS = ("content-type", "request-id", "x-request-id", "retry-after")


def create_app(
    guard: Guard,
    config: ProxyConfig,
    *,
    on_settled: Callable[[LLMCall], None] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Starlette:
    """The proxy app for ``guard`` (which must have a SQL store: it holds the API
    keys). ``on_settled`` is told of each model call once its budget is settled
    (an observer: its failure is ignored)."""
    if not isinstance(guard.store, SqlStore):
        raise ValueError("the LLM proxy needs a guard with a SQL store (it holds the API keys)")
    proxy = _Proxy(guard, config, KeyStore(guard.store), on_settled)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=10.0)
        # A proxy holds one upstream connection per call in flight (streams are long).
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport) as client:
            proxy.client = client
            yield
            proxy.client = None

    routes = [
        Route("/v1/chat/completions", proxy.openai, methods=["POST"]),
        Route("/v1/responses", proxy.responses, methods=["POST"]),
        Route("/v1/messages", proxy.anthropic, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


class _Proxy:
    def __init__(
        self,
        guard: Guard,
        config: ProxyConfig,
        keys: KeyStore,
        on_settled: Callable[[LLMCall], None] | None,
    ) -> None:
        self.guard = guard
        self.config = config
        self.keys = keys
        self.on_settled = on_settled
        self.client: httpx.AsyncClient | None = None
        self._settled: weakref.WeakSet[LLMCall] = weakref.WeakSet()

    async def openai(self, request: Request) -> Response:
        return await self._handle(request, "openai", self.config.openai)

    async def anthropic(self, request: Request) -> Response:
        return await self._handle(request, "anthropic", self.config.anthropic)

    async def responses(self, request: Request) -> Response:
        return await self._handle(request, "openai", self.config.openai, RESPONSES)

    async def _handle(
        self,
        request: Request,
        provider: Provider,
        upstream: Upstream | None,
        flavour: _AnyFlavour | None = None,
    ) -> Response:
        answer = await self._relay(request, provider, upstream, flavour)
        return answer.response(provider) if isinstance(answer, Refusal) else answer

    async def _relay(
        self,
        request: Request,
        provider: Provider,
        upstream: Upstream | None,
        flavour: _AnyFlavour | None,
    ) -> Response | Refusal:
        key = await authenticate(request, self.keys)
        if isinstance(key, Refusal):
            return key
        if upstream is None or self.client is None:
            return Refusal(404, "not_configured", f"this proxy has no {provider} upstream")
        body = await _read_json(request, self.config.max_body)
        if isinstance(body, Refusal):
            return body
        flavour = flavour or flavour_of(provider)
        streamed = body.get("stream") is True
        unfit = flavour.unfit(body) if isinstance(flavour, ResponsesFlavour) else None
        if unfit is not None:
            return unfit
        context = _context(key)
        arguments = flavour.arguments(body)
        call = self.guard.llm_call(body["model"], context=context, arguments=arguments)
        try:
            await call.__aenter__()
        except Blocked as exc:
            return refusal_for_decision(exc)
        try:  # from here on the reservation is open: every way out settles it
            sent, asked_usage = flavour.upstream_body(body)
            outbound = self.client.build_request(
                "POST",
                upstream.base_url + flavour.path,
                content=orjson.dumps(sent),
                headers=flavour.upstream_headers(upstream, request.headers),
            )
            answer = await self.client.send(outbound, stream=streamed)
        except BaseException as exc:
            await self._settle(call, failed=exc)
            if isinstance(exc, httpx.HTTPError):
                message = f"the {provider} upstream could not be reached ({type(exc).__name__})"
                return Refusal(502, "upstream_unreachable", message)
            raise
        if answer.status_code >= 400:  # relayed as it came; nothing was spent
            content = b""
            try:
                content = await answer.aread()
            except httpx.HTTPError:
                pass
            finally:
                await answer.aclose()
                await self._settle(call, failed=RuntimeError(f"upstream {answer.status_code}"))
            return Response(content, answer.status_code, headers=_relayed(answer))
        if streamed:
            estimated = _estimated_input(arguments)
            if isinstance(flavour, ResponsesFlavour):
                return self._stream_responses(call, flavour, answer, estimated, context)
            gate = tool_gate(
                provider, self.guard, context, max_held_bytes=self.config.max_held_bytes
            )
            return self._stream(call, flavour, answer, estimated, gate, hide_usage=not asked_usage)
        return await self._unstreamed(call, flavour, answer, context)

    async def _unstreamed(
        self, call: LLMCall, flavour: _AnyFlavour, answer: httpx.Response, context: Context
    ) -> Response | Refusal:
        try:  # whatever ends this (a cancellation included), the call is settled once
            return await self._judged(call, flavour, answer, context)
        finally:
            await answer.aclose()
            await self._settle(call)

    async def _judged(
        self, call: LLMCall, flavour: _AnyFlavour, answer: httpx.Response, context: Context
    ) -> Response | Refusal:
        try:
            content = await answer.aread()
            reply = orjson.loads(content)
            if not isinstance(reply, dict):
                raise ValueError("the response is not a JSON object")
        except (httpx.HTTPError, ValueError) as exc:
            # The call happened (2xx) but cannot be read, so its tool calls cannot be
            # judged: charged as reserved, and nothing of it reaches the agent.
            return Refusal(502, "upstream_unreadable", f"the upstream's answer: {exc}")
        usage = flavour.usage(reply)
        if usage is not None:
            call.record(usage)
        if isinstance(flavour, ResponsesFlavour):
            refused = await judge_response(self.guard, reply, context)
        else:
            refused = await judge_tool_calls(self.guard, flavour.provider, reply, context)
        headers = _relayed(answer)
        headers.pop("content-type", None)
        if call.decision is not None:
            headers["x-interlock-decision-id"] = call.decision.decision_id
        if not refused:
            return Response(
                content, answer.status_code, headers=headers, media_type="application/json"
            )
        return JSONResponse(reply, answer.status_code, headers=headers)

    def _stream(
        self,
        call: LLMCall,
        flavour: Flavour,
        answer: httpx.Response,
        estimated_input: int,
        gate: Gate,
        *,
        hide_usage: bool,
    ) -> Response:
        meter = flavour.meter(estimated_input)

        async def settle(failed: bool) -> None:
            if failed:
                await self._settle(call, failed=RuntimeError("the upstream stream failed"))
                return
            call.record(meter.usage())
            await self._settle(call)

        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        if call.decision is not None:
            headers["x-interlock-decision-id"] = call.decision.decision_id
        relay = SseRelay(answer, meter, settle, headers=headers, hide_usage=hide_usage, gate=gate)
        return _AsgiResponse(relay)

    def _stream_responses(
        self,
        call: LLMCall,
        flavour: ResponsesFlavour,
        answer: httpx.Response,
        estimated_input: int,
        context: Context,
    ) -> Response:
        """A Responses stream: its tool calls held and judged (response_stream)."""
        meter = flavour.meter(estimated_input)

        async def settle(failed: bool) -> None:
            if failed:
                await self._settle(call, failed=RuntimeError("the upstream stream failed"))
                return
            call.record(meter.usage())
            await self._settle(call)

        headers = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
        if call.decision is not None:
            headers["x-interlock-decision-id"] = call.decision.decision_id
        judge = ItemJudge(self.guard, context)
        return _AsgiResponse(ResponsesRelay(answer, meter, settle, judge, headers=headers))

    async def _settle(self, call: LLMCall, *, failed: BaseException | None = None) -> None:
        """Commit (or release, when ``failed``) — once: a second call does nothing.
        Shielded from cancellation."""
        if call in self._settled:
            return
        self._settled.add(call)
        kind = None if failed is None else type(failed)
        with anyio.CancelScope(shield=True):
            await call.__aexit__(kind, failed, None)
        if self.on_settled is not None:
            with contextlib.suppress(Exception):  # an observer never changes the answer
                self.on_settled(call)


class _AsgiResponse(Response):
    """A Starlette response that hands the ASGI call to ``app``."""

    def __init__(self, app: SseRelay | ResponsesRelay) -> None:
        self.app = app
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _context(key: ApiKey) -> Context:
    """The trusted context: from the key only."""
    return Context(tenant=key.tenant, agent=key.identity, runtime=RUNTIME)


def _estimated_input(arguments: dict[str, Any]) -> int:
    try:
        return estimate_model_call(arguments).input_tokens
    except Exception:
        return 0


def _relayed(answer: httpx.Response) -> dict[str, str]:
    return {name: answer.headers[name] for name in _RELAYED_HEADERS if name in answer.headers}


async def _read_json(request: Request, limit: int) -> dict[str, Any] | Refusal:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return Refusal(413, "too_large", f"the request body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return Refusal(413, "too_large", f"the request body is larger than {limit} bytes")
        chunks.append(chunk)
    try:
        body = orjson.loads(b"".join(chunks))
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
