"""The stdio MCP gateway: spawn the upstream server, relay newline-delimited
JSON-RPC both ways, and gate every ``tools/call`` before the upstream sees it.

:class:`RelaySession` is the transparent relay's core, whatever carries the client's
messages (this module's stdio, or the HTTP gateway): fed the client's lines
(:meth:`~RelaySession.from_client`) and the upstream's
(:meth:`~RelaySession.from_upstream`), it answers through ``send(line, related)``,
``related`` being the client request a message belongs to (a response, a progress
notification) or ``None``. :class:`StdioGateway` is that core between the process's
stdin/stdout (:class:`~interlock.gateways.mcp.clientio.StdioClient`) and one spawned
upstream; :class:`AggregateGateway` the merging core
(:mod:`~interlock.gateways.mcp.aggregate`) between stdin/stdout and several.

Every message is forwarded as the exact bytes read; a message is parsed only to
route it (which response answers which request) and to judge a ``tools/call``. The
client's side runs on two threads (blocking reads of stdin, blocking writes to
stdout), so neither descriptor is made non-blocking under a parent that shares it,
and a large message one way never waits on a large message the other way. The
upstream is an asyncio subprocess with private pipes. stdout carries JSON-RPC
only; the gateway logs to stderr, and the upstream's stderr is inherited.

Shutdown: the client closing stdin closes the upstream's stdin, and the gateway
waits for the upstream to exit (terminating it after ``grace`` seconds); the
upstream exiting ends the gateway with the upstream's exit code.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

from interlock.adapters.mcp import redacted_error, run_settled
from interlock.gateways.mcp.clientio import StdioClient, TooLong
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.gate import Allowed, ToolCallGate
from interlock.gateways.mcp.messages import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    TOOLS_CALL,
    Message,
    NotAMessage,
    disguised_tools_call,
    encode,
    error_reply,
    id_key,
    parse_line,
    progress_token,
)
from interlock.gateways.mcp.relay import AggregateRelay, TransparentRelay, serve_stdio
from interlock.gateways.mcp.upstreams import StdioUpstream, Upstream

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.gateways.mcp.clientio import ClientLine
    from interlock.guard import Guard

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "AggregateGateway",
    "RelaySession",
    "StdioGateway",
    "connect_upstream",
    "upstream_environment",
]

log = logging.getLogger("interlock.gateways.mcp")

#: The longest line (one JSON-RPC message) relayed either way.
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024

#: What the upstream inherits from the gateway's environment by default: enough to
#: find programs and a home directory, none of the gateway's own secrets.
_INHERITED: Final = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SYSTEMROOT",
    "APPDATA",
    "LOCALAPPDATA",
    "USERPROFILE",
)


def upstream_environment(
    extra: Mapping[str, str] | None = None, *, inherit_all: bool = False
) -> dict[str, str]:
    """The upstream's environment: PATH, HOME and the locale from ours (everything,
    with ``inherit_all``), then ``extra`` on top."""
    if inherit_all:
        env = dict(os.environ)
    else:
        env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    env.update(extra or {})
    return env


class Unanswered(Exception):
    """An allowed call ended without a result: the upstream answered an error or
    exited first, or the client cancelled the call."""


@dataclass(slots=True)
class _InFlight:
    """A client request the upstream has not answered yet."""

    method: str
    allowed: Allowed | None = None
    answer: asyncio.Future[Any] | None = None
    settled: asyncio.Task[None] | None = None
    token: str | None = None  # its progress token


class RelaySession:
    """One client, one unnamed upstream (already started), every message relayed as
    the bytes read and every ``tools/call`` judged first. Feed it the client's lines
    (:meth:`from_client`, or :meth:`client_message` parsed) and the upstream's
    (:meth:`from_upstream`); it writes to the upstream itself and answers the client
    through ``send(line, related)``."""

    def __init__(
        self,
        guard: Guard,
        conn: Upstream,
        send: Callable[[bytes, Any], None],
        *,
        hide_denied_tools: bool = False,
        context: Context | None = None,
    ) -> None:
        self.guard = guard
        self.conn = conn
        self.hide_denied_tools = hide_denied_tools
        self.gate = ToolCallGate(guard, context=context)
        self._send = send
        self._in_flight: dict[str, _InFlight] = {}
        #: progress tokens of the client's requests → the request they report on
        self._tokens: dict[str, Any] = {}
        self._protocol_version: str | None = None
        self._settling: set[asyncio.Task[None]] = set()

    async def from_client(self, line: ClientLine) -> None:
        """Judge and forward one line of the client's (``None``: its input ended)."""
        if line is None:
            return
        forward = await self._route_from_client(line)
        if forward is not None:
            await self.conn.send(forward)

    async def client_message(self, message: Message) -> None:
        """:meth:`from_client` for a message already read (the HTTP gateway's)."""
        forward = await self._route_message(message)
        if forward is not None:
            await self.conn.send(forward)

    async def from_upstream(self, line: bytes) -> None:
        routed = self._route_from_upstream(line)
        if routed is not None:
            self._send(*routed)

    async def upstream_ended(self) -> None:
        await self._abandon_in_flight()

    async def close(self) -> None:
        await self._abandon_in_flight()

    # -- routing -----------------------------------------------------------------------

    async def _route_from_client(self, line: bytes | TooLong) -> bytes | None:
        """The bytes to forward upstream, or ``None`` (answered or dropped here)."""
        if isinstance(line, TooLong):
            problem = "the message is over the size limit"
            self._send(error_reply(None, INVALID_REQUEST, problem), None)
            return None
        if not line.strip():
            return None
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: refused a client message: %s", exc)
            self._send(error_reply(exc.request_id, exc.code, str(exc)), exc.request_id)
            return None
        return await self._route_message(message)

    async def _route_message(self, message: Message) -> bytes | None:
        if message.kind == "response":
            return message.raw
        method = message.method or ""
        if method == TOOLS_CALL or disguised_tools_call(method):
            return await self._tools_call(message, method)
        if message.kind == "notification":
            await self._cancelled(message)
            return message.raw
        if not self._track(message, method):
            return None
        return message.raw

    def _track(self, message: Message, method: str, allowed: Allowed | None = None) -> bool:
        key = id_key(message.id)
        if key in self._in_flight:
            log.warning("interlock mcp-gateway: refused a request reusing live id %r", message.id)
            problem = "the request id is already in use"
            self._send(error_reply(message.id, INVALID_REQUEST, problem), message.id)
            return False
        flight = _InFlight(method, allowed)
        token = progress_token(message.body)
        if token is not None:
            flight.token = token
            self._tokens[token] = message.id
        if allowed is not None:
            flight.answer = asyncio.get_running_loop().create_future()
            answer = flight.answer
            task = asyncio.create_task(self._settle(allowed, answer), name=f"settle {key}")
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
            flight.settled = task
        self._in_flight[key] = flight
        return True

    async def _tools_call(self, message: Message, method: str) -> bytes | None:
        if message.kind == "notification":
            log.warning("interlock mcp-gateway: dropped a %r sent as a notification", method)
            return None
        if method != TOOLS_CALL:
            log.warning("interlock mcp-gateway: refused method %r (not tools/call)", method)
            reply = error_reply(message.id, METHOD_NOT_FOUND, f"method not found: {method}")
            self._send(reply, message.id)
            return None
        if id_key(message.id) in self._in_flight:
            self._track(message, method)  # refuses it: the id is live
            return None
        verdict = await self.gate.judge(message, self._protocol_version)
        name = (message.params or {}).get("name") if isinstance(message.params, dict) else None
        log.info(
            "interlock mcp-gateway: tools/call %r (id %r): %s [decision %s]",
            name,
            message.id,
            verdict.decision.verdict.value,
            verdict.decision.decision_id or "-",
        )
        if not isinstance(verdict, Allowed):
            self._send(verdict.reply, message.id)
            return None
        if not self._track(message, method, verdict):  # pragma: no cover - checked above
            return None
        return message.raw

    async def _cancelled(self, message: Message) -> None:
        """A cancelled allowed call is settled as failed (its reservation released),
        as a cancelled in-process call is; the upstream's late answer still passes.
        Its id stays in flight: the upstream may still be working under it. Settled
        before the next client message is read, so what follows sees the room back."""
        if message.method != "notifications/cancelled" or not isinstance(message.params, dict):
            return
        flight = self._in_flight.get(id_key(message.params.get("requestId")))
        if flight is not None and flight.answer is not None and not flight.answer.done():
            flight.answer.set_exception(Unanswered("the client cancelled the call"))
            if flight.settled is not None:
                await asyncio.wait([flight.settled])

    def _route_from_upstream(self, line: bytes) -> tuple[bytes, Any] | None:
        """The bytes to send the client and the client request they belong to, or
        ``None`` (dropped)."""
        if not line.strip():
            return None
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: dropped an upstream line: %s", exc)
            return None
        if message.kind != "response":
            return message.raw, self._related(message)
        flight = self._in_flight.pop(id_key(message.id), None)
        if flight is None:
            return message.raw, message.id
        if flight.token is not None:
            self._tokens.pop(flight.token, None)
        result = message.body.get("result")
        if flight.method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            self._protocol_version = version if isinstance(version, str) else None
        elif flight.method == "tools/list":
            self.gate.catalog.learn(result)
            if self.hide_denied_tools and isinstance(result, dict):
                return self._without_denied(message, result), message.id
        elif flight.answer is not None:
            return self._answered(message, flight.answer, result), message.id
        return message.raw, message.id

    def _related(self, message: Message) -> Any:
        """The client request a server's notification reports on (its progress), or
        ``None``: a server-initiated request, a log line, a list change."""
        if message.method != "notifications/progress" or not isinstance(message.params, dict):
            return None
        return self._tokens.get(str(message.params.get("progressToken")))

    def _without_denied(self, message: Message, result: dict[str, Any]) -> bytes:
        """The listing without the tools the policy refuses every call of (the bytes
        as they came when it leaves none out)."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return message.raw
        kept = [
            tool
            for tool in tools
            if not (
                isinstance(tool, dict)
                and isinstance(tool.get("name"), str)
                and self.gate.never_allowed(tool["name"])
            )
        ]
        if len(kept) == len(tools):
            return message.raw
        return encode({**message.body, "result": {**result, "tools": kept}})

    def _answered(self, message: Message, answer: asyncio.Future[Any], result: Any) -> bytes:
        """Settle an allowed call's reservation from its response, and redact the text
        of an error result (it may quote what it failed on), as in-process."""
        if not answer.done():
            if "error" in message.body:
                answer.set_exception(
                    Unanswered(f"the upstream answered an error: {message.body['error']}")
                )
            else:
                answer.set_result(result)
        if isinstance(result, dict) and result.get("isError"):
            redacted = redacted_error(result, self.guard.redactor)
            if redacted != result:
                return encode({**message.body, "result": redacted})
        return message.raw

    async def _settle(self, allowed: Allowed, answer: asyncio.Future[Any]) -> None:
        try:
            await run_settled(self.guard, allowed.decision, lambda: answer, allowed.key)
        except Unanswered:
            pass  # released by run_settled
        except Exception as exc:  # settling must never stop the relay
            log.warning("interlock mcp-gateway: could not settle a call: %s", exc)

    async def _abandon_in_flight(self) -> None:
        """The upstream is gone: what it never answered is released, not charged."""
        for flight in self._in_flight.values():
            if flight.answer is not None and not flight.answer.done():
                flight.answer.set_exception(Unanswered("the upstream exited"))
        self._in_flight.clear()
        self._tokens.clear()
        await asyncio.gather(*self._settling, return_exceptions=True)


class StdioGateway:
    """One client on ``client_in`` / ``client_out`` (binary streams; the process's
    stdin and stdout by default), one upstream spawned from ``command``, relayed
    byte for byte (:class:`RelaySession`).

    Example::

        gateway = StdioGateway(Guard.from_file("interlock.yaml"), ["python", "server.py"])
        code = asyncio.run(gateway.run())
    """

    def __init__(
        self,
        guard: Guard,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        client_in: IO[bytes] | None = None,
        client_out: IO[bytes] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        grace: float = 5.0,
        hide_denied_tools: bool = False,
    ) -> None:
        if not command:
            raise ValueError("the upstream command is empty")
        self.guard = guard
        self.hide_denied_tools = hide_denied_tools
        self.command = list(command)
        self.env = dict(env) if env is not None else upstream_environment()
        self._in = client_in
        self._out = client_out
        self._limit = max_message_bytes
        self._grace = grace

    async def run(self) -> int:
        """Relay until the upstream exits; its exit code (128 + N for signal N)."""
        client = StdioClient(self._in, self._out, max_message_bytes=self._limit)
        upstream = StdioUpstream(
            None, self.command, env=self.env, max_message_bytes=self._limit, grace=self._grace
        )
        relay = TransparentRelay(
            self.guard, upstream, client.send, hide_denied_tools=self.hide_denied_tools
        )
        return await serve_stdio(client, relay)


class AggregateGateway:
    """One client on stdin/stdout, several named upstreams from ``config`` (spawned,
    or reached over streamable HTTP), merged into one server
    (:mod:`interlock.gateways.mcp.aggregate`).

    Example::

        config = GatewayConfig((parse_upstream("files=python files.py"),
                                parse_upstream("mail=python mail.py")))
        code = asyncio.run(AggregateGateway(guard, config).run())
    """

    def __init__(
        self,
        guard: Guard,
        config: GatewayConfig,
        *,
        env: Mapping[str, str] | None = None,
        client_in: IO[bytes] | None = None,
        client_out: IO[bytes] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        grace: float = 5.0,
    ) -> None:
        self.guard = guard
        self.config = config
        self.env = dict(env) if env is not None else upstream_environment()
        self._client = StdioClient(client_in, client_out, max_message_bytes=max_message_bytes)
        self._limit = max_message_bytes
        self._grace = grace

    def _connect(self, spec: UpstreamSpec) -> Upstream:
        return connect_upstream(spec, self.env, self._limit, self._grace)

    async def run(self) -> int:
        """Relay until the client leaves or every upstream has exited. The first
        non-zero exit code of an upstream (0 when all exited cleanly)."""
        relay = AggregateRelay(self.guard, self.config, self._connect, self._client.send)
        return await serve_stdio(self._client, relay)


def connect_upstream(
    spec: UpstreamSpec, env: Mapping[str, str], max_message_bytes: int, grace: float
) -> Upstream:
    """The upstream ``spec`` names: a process to spawn (with ``env`` and its own
    ``env:`` on top), or a streamable-HTTP server (with its own ``headers:``)."""
    if spec.url is not None:
        from interlock.gateways.mcp.http_upstream import HttpUpstream

        return HttpUpstream(
            spec.name, spec.url, headers=spec.headers, max_message_bytes=max_message_bytes
        )
    assert spec.command is not None
    return StdioUpstream(
        spec.name,
        spec.command,
        env={**env, **spec.env},
        max_message_bytes=max_message_bytes,
        grace=grace,
    )
