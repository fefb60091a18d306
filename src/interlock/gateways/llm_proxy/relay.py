"""A streamed (SSE) model response relayed event by event, metered, and settled
exactly once whatever ends it: the upstream's last event, an upstream failure, or
the client going away (then the budget is charged for what was streamed).

A :class:`Gate` (the tool-call holding of :mod:`.stream_tools`) sees each event
after the meter and says what is sent in its place: the event as it came, a
rewritten one, nothing yet (a tool call held), or several (a held call released).

A plain ASGI response rather than Starlette's ``StreamingResponse``: it must watch
for the client's ``http.disconnect`` while it waits on the upstream, and settle in a
``finally`` that no cancellation can skip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import anyio
import orjson

from interlock.gateways.http1 import UpstreamError

from .asgi import Receive, Scope, Send
from .flavours import StreamMeter
from .upstream import UpstreamResponse

__all__ = ["Gate", "SseRelay", "sse_events", "sse_frame", "sse_payload"]

Settle = Callable[[bool], Awaitable[None]]  # settle(failed): commit, or release when failed


class Gate(Protocol):
    """What stands between the upstream's events and the client."""

    async def feed(self, event: list[str], data: Any) -> list[bytes]:
        """The frames to send for one upstream ``event`` (its lines; ``data``: its
        parsed JSON, ``None`` when it has none, is ``[DONE]`` or is unreadable)."""
        ...

    async def end(self) -> list[bytes]:
        """The frames to send when the upstream's stream has ended cleanly."""
        ...


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[list[str]]:
    """The upstream's SSE events, each as its lines (a blank line ends one)."""
    event: list[str] = []
    async for line in lines:
        if line:
            event.append(line)
        elif event:
            yield event
            event = []
    if event:
        yield event


def sse_payload(event: list[str]) -> str:
    """An event's data (its ``data:`` lines joined), ``""`` when it has none."""
    return "\n".join(line[5:].removeprefix(" ") for line in event if line.startswith("data:"))


def sse_frame(event: list[str]) -> bytes:
    """An event's lines as one SSE frame."""
    return ("\n".join(event) + "\n\n").encode()


def _data(event: list[str]) -> Any:
    payload = sse_payload(event)
    if not payload or payload == "[DONE]":
        return None
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


class SseRelay:
    """The ASGI response for one upstream stream (already answered 2xx)."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        meter: StreamMeter,
        settle: Settle,
        *,
        headers: dict[str, str],
        hide_usage: bool,
        gate: Gate | None = None,
    ) -> None:
        self.upstream = upstream
        self.meter = meter
        self.settle = settle
        self.headers = headers
        self.hide_usage = hide_usage  # the OpenAI usage chunk the client did not ask for
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        failed = False
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in self.headers.items()],
                }
            )
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
                try:
                    async for event in sse_events(self.upstream.aiter_lines()):
                        received += 1
                        data = _data(event)
                        if isinstance(data, dict):
                            self.meter.feed(data)
                            if self.hide_usage and data.get("choices") == [] and data.get("usage"):
                                continue
                        if self.gate is None:
                            await _send(send, sse_frame(event))
                        else:
                            for frame in await self.gate.feed(event, data):
                                await _send(send, frame)
                    if self.gate is not None:
                        for frame in await self.gate.end():
                            await _send(send, frame)
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except UpstreamError:
                    # The upstream failed mid-stream: what it sent is charged (held
                    # tool calls included: generated, if never released); a failure
                    # before its first event is released.
                    failed = received == 0
                finally:
                    group.cancel_scope.cancel()
        except OSError:
            pass  # the client went away while we wrote: charged for what was streamed
        finally:
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()
                await self.settle(failed)

    @staticmethod
    async def _watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return


async def _send(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})
