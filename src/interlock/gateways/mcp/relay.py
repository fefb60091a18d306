"""One client's side of the gateway, whatever carries the client's messages: a
session core (:class:`~interlock.gateways.mcp.stdio.RelaySession`, one upstream byte
for byte; :class:`~interlock.gateways.mcp.aggregate.AggregateSession`, several
merged) with the upstreams it owns and a task per upstream pumping what it sends
into the core.

A relay is :meth:`~Relay.start`-ed (the upstreams spawned or connected: an
``OSError`` when one cannot be), fed the client's lines or parsed messages, and
:meth:`~Relay.close`-d (the upstreams stopped, what they still send relayed while
they stop, the budgets of unanswered calls given back), which returns an exit code.
:meth:`~Relay.gone` ends when every upstream has. :func:`serve_stdio` runs one on
the process's stdin/stdout; the HTTP gateway runs one per client session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from interlock.gateways.mcp.aggregate import AggregateSession, Link

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.gateways.mcp.clientio import ClientLine, StdioClient
    from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
    from interlock.gateways.mcp.messages import Message
    from interlock.gateways.mcp.stdio import RelaySession
    from interlock.gateways.mcp.upstreams import Upstream
    from interlock.guard import Guard

__all__ = ["AggregateRelay", "Relay", "Send", "TransparentRelay", "serve_stdio"]

log = logging.getLogger("interlock.gateways.mcp")

#: How a core answers the client: ``send(line, related)``.
Send = Callable[[bytes, Any], None]


class Relay:
    """A session core, its upstreams and their pumps (see the module docstring)."""

    def __init__(self, upstreams: Sequence[Upstream]) -> None:
        self.upstreams = list(upstreams)
        self._pumps: list[asyncio.Task[None]] = []
        self._gone: asyncio.Future[Any] | None = None
        self._closed: int | None = None

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of the tool the client calls ``name``, as last listed
        (``None``: not listed yet, or no such tool)."""
        return None

    async def start(self) -> None:
        started: list[Upstream] = []
        try:
            for upstream in self.upstreams:
                try:
                    await upstream.start()
                except OSError as exc:
                    raise OSError(f"{upstream}: {exc}") from exc
                started.append(upstream)
        except BaseException:
            await asyncio.gather(*(up.stop() for up in started), return_exceptions=True)
            raise
        self._pumps = [asyncio.create_task(self._pump(up)) for up in self.upstreams]
        self._gone = asyncio.gather(*self._pumps, return_exceptions=True)

    async def gone(self) -> None:
        """Until every upstream is gone."""
        assert self._gone is not None, "start() first"
        await asyncio.shield(self._gone)

    async def from_client(self, line: ClientLine) -> None:
        raise NotImplementedError

    async def client_message(self, message: Message) -> None:
        raise NotImplementedError

    async def _pump(self, upstream: Upstream) -> None:
        raise NotImplementedError

    async def _close_core(self) -> None:
        raise NotImplementedError

    async def close(self) -> int:
        """Stop the upstreams (what they still send is relayed), settle what they
        never answered; the exit code (closing twice returns the first one's)."""
        if self._closed is not None:
            return self._closed
        codes = await asyncio.gather(*(up.stop() for up in self.upstreams), return_exceptions=True)
        for outcome in await asyncio.gather(*self._pumps, return_exceptions=True):
            if isinstance(outcome, Exception):  # pragma: no cover - a bug, not an input
                log.error("interlock mcp-gateway: an upstream's pump failed: %r", outcome)
        await self._close_core()
        numbers = [code if isinstance(code, int) else 1 for code in codes]
        self._closed = self._exit_code(numbers)
        return self._closed

    def _exit_code(self, codes: list[int]) -> int:
        return next((code for code in codes if code != 0), 0)


class TransparentRelay(Relay):
    """One unnamed upstream, relayed byte for byte; the exit code is its own."""

    def __init__(
        self,
        guard: Guard,
        upstream: Upstream,
        send: Send,
        *,
        hide_denied_tools: bool = False,
        context: Context | None = None,
        **options: Any,
    ) -> None:
        """``options``: the session's own (``sampling_timeout``,
        ``approve_by_elicitation``, ``elicitation_timeout``)."""
        from interlock.gateways.mcp.stdio import RelaySession

        super().__init__([upstream])
        self.session: RelaySession = RelaySession(
            guard,
            upstream,
            send,
            hide_denied_tools=hide_denied_tools,
            context=context,
            **options,
        )

    async def from_client(self, line: ClientLine) -> None:
        await self.session.from_client(line)

    async def client_message(self, message: Message) -> None:
        await self.session.client_message(message)

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        tool = self.session.gate.catalog.get(name)
        return None if tool is None else tool.input_schema

    async def _pump(self, upstream: Upstream) -> None:
        async for line in upstream.lines():
            await self.session.from_upstream(line)
        await self.session.upstream_ended()

    async def _close_core(self) -> None:
        await self.session.close()

    def _exit_code(self, codes: list[int]) -> int:
        return codes[0]


class AggregateRelay(Relay):
    """Several named upstreams merged into one server; the exit code is the first
    non-zero one (0 when all ended cleanly)."""

    def __init__(
        self,
        guard: Guard,
        config: GatewayConfig,
        connect: Callable[[UpstreamSpec], Upstream],
        send: Send,
        *,
        context: Context | None = None,
        **options: Any,
    ) -> None:
        """``options``: the session's own (``sampling_timeout``,
        ``approve_by_elicitation``, ``elicitation_timeout``)."""
        links = AggregateSession.links_for(guard, config.upstreams, connect, context)
        super().__init__([link.conn for link in links])
        self.links = links
        self.session = AggregateSession(guard, config, links, send, context=context, **options)

    async def from_client(self, line: ClientLine) -> None:
        await self.session.from_client(line)

    async def client_message(self, message: Message) -> None:
        await self.session.client_message(message)

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        return self.session.tool_schema(name)

    async def _pump(self, upstream: Upstream) -> None:
        link = next(link for link in self.links if link.conn is upstream)
        await self._pump_link(link)

    async def _pump_link(self, link: Link) -> None:
        async for line in link.conn.lines():
            await self.session.from_upstream(link, line)
        code = await link.conn.wait()
        log.warning("interlock mcp-gateway: %s exited (code %d)", link.conn, code)
        await self.session.upstream_ended(link)

    async def _close_core(self) -> None:
        await self.session.close()


async def serve_stdio(client: StdioClient, relay: Relay) -> int:
    """Run ``relay`` for the client on stdin/stdout until the client's input ends or
    every upstream is gone; the relay's exit code."""
    await relay.start()
    client.start()

    async def from_client() -> None:
        while (line := await client.receive()) is not None:
            await relay.from_client(line)

    reading = asyncio.create_task(from_client())
    upstreams = asyncio.ensure_future(relay.gone())
    try:
        await asyncio.wait([reading, upstreams], return_when=asyncio.FIRST_COMPLETED)
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        try:
            code = await relay.close()
        finally:
            upstreams.cancel()
            await client.close()
    return code
