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
import itertools
import logging
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

from interlock.adapters.base import call_key
from interlock.adapters.mcp import (
    _call_params,
    redacted_error,
    refusal_result,
    run_settled,
    tool_action,
)
from interlock.adapters.mcp_approvals import approval_question, check_can_approve
from interlock.adapters.mcp_sampling import SAMPLING_METHOD
from interlock.gateways.mcp.approvals import DEFAULT_ELICITATION_TIMEOUT, InBandApprovals
from interlock.gateways.mcp.clientio import StdioClient, TooLong
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.gate import Allowed, Refused, ToolCallGate, protocol_version_of
from interlock.gateways.mcp.messages import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    REQUEST_TIMEOUT,
    TOOLS_CALL,
    Message,
    NotAMessage,
    disguised,
    disguised_tools_call,
    encode,
    error_reply,
    id_key,
    parse_line,
    progress_token,
    result_reply,
)
from interlock.gateways.mcp.relay import AggregateRelay, TransparentRelay, serve_stdio
from interlock.gateways.mcp.sampling import (
    DEFAULT_SAMPLING_TIMEOUT,
    INPUT_METHODS,
    Held,
    SamplingGate,
    SamplingRefused,
    input_required,
)
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

#: How many pages of its tools the gateway reads from the upstream, at most.
MAX_LISTING_PAGES: Final = 100
#: How long the gateway waits for the answer to a request of its own (a listing).
OWN_REQUEST_TIMEOUT: Final = 30.0

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
    version: str | None = None  # the protocol generation its reply is shaped for
    asking: asyncio.Task[None] | None = None  # its approval, put to the client's user
    own: asyncio.Future[dict[str, Any] | None] | None = None  # the gateway's own request
    whole: bool = False  # a tools/list from the first page (no cursor)


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
        sampling_timeout: float | None = DEFAULT_SAMPLING_TIMEOUT,
        approve_by_elicitation: bool = False,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
    ) -> None:
        self.guard = guard
        self.conn = conn
        self.hide_denied_tools = hide_denied_tools
        self.gate = ToolCallGate(guard, context=context)
        self._send = send
        self.sampling = SamplingGate(
            guard, timeout=sampling_timeout, expired=self._expired, context=context
        )
        self.approvals = (
            InBandApprovals(guard, self._unrelated, timeout=elicitation_timeout, context=context)
            if approve_by_elicitation
            else None
        )
        self._in_flight: dict[str, _InFlight] = {}
        #: progress tokens of the client's requests → the request they report on
        self._tokens: dict[str, Any] = {}
        self._protocol_version: str | None = None
        self._settling: set[asyncio.Task[None]] = set()
        #: every tool the upstream lists is in the catalog (until it says they changed)
        self._listed = False
        self._own_ids = itertools.count(1)

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
        routed = await self._route_from_upstream(line)
        if routed is not None:
            self._send(*routed)

    def _unrelated(self, line: bytes) -> None:
        """Send the client a message of the gateway's own that no request carries."""
        self._send(line, None)

    async def _to_upstream(self, line: bytes) -> None:
        """Send the upstream a line of the gateway's own (an answer on the client's
        behalf); nothing when its input is closed."""
        await self.conn.send(line)

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
            if self.approvals is not None and self.approvals.answered(message):
                return None
            await self.sampling.answered(id_key(message.id), message.body)
            return message.raw
        method = message.method or ""
        if method == "initialize" and self.approvals is not None:
            self.approvals.learn(message)
        if message.kind == "request" and method in INPUT_METHODS:
            message = await self._restored(message)
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
        flight = _InFlight(
            method, allowed, version=protocol_version_of(message, self._protocol_version)
        )
        if method == "tools/list":
            params = message.params if isinstance(message.params, dict) else {}
            flight.whole = params.get("cursor") is None
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
        answered = False
        if self.approvals is not None:
            message, answered = await self._answered_in_band(message)
        await self._learn_tools(message)
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
            # a call whose user answered already is not asked again (a dismissed
            # question must not come back at once, round after round)
            if answered or not self._ask_in_band(message, method, verdict):
                self._send(verdict.reply, message.id)
            return None
        if not self._track(message, method, verdict):  # pragma: no cover - checked above
            return None
        return message.raw

    # -- approvals through elicitation -------------------------------------------------

    def _ask_in_band(self, message: Message, method: str, verdict: Refused) -> bool:
        """Put the call's approval to the client's user, if it can be; False when it
        cannot (the refusal is sent as it is)."""
        approvals = self.approvals
        channel = approvals.channel(message, verdict.decision) if approvals else None
        call = _call_params(message.params) if channel is not None else None
        if approvals is None or call is None or isinstance(call, str):
            return False
        question = approval_question(
            verdict.decision, tool_action(call.name, call.arguments), self.guard
        )
        approval = verdict.decision.approval
        if question is None or approval is None or approval.id is None:
            return False
        if channel == "result":
            asking = approvals.questions.ask(
                approval.id, call_key(call.name, call.arguments), question
            )
            self._send(result_reply(message.id, asking), message.id)
            return True
        flight = _InFlight(method, version=protocol_version_of(message, self._protocol_version))
        flight.asking = asyncio.create_task(
            self._asking(message, method, verdict, question, approval.id)
        )
        self._in_flight[id_key(message.id)] = flight
        return True

    async def _asking(
        self,
        message: Message,
        method: str,
        verdict: Refused,
        question: dict[str, Any],
        approval_id: str,
    ) -> None:
        """Wait for the client's user (2025-11-25), then judge the call again: it runs
        once when approved, else it is refused as the approval now stands."""
        assert self.approvals is not None
        key = id_key(message.id)
        try:
            answer = await self.approvals.ask(question)
            if answer != "pending":
                await self.approvals.record(approval_id, answer)
                again = await self.gate.judge(message, self._protocol_version)
            else:
                again = verdict
        except asyncio.CancelledError:
            self._in_flight.pop(key, None)
            raise
        self._in_flight.pop(key, None)
        log.info(
            "interlock mcp-gateway: tools/call (id %r) after approval in band: %s [decision %s]",
            message.id,
            again.decision.verdict.value,
            again.decision.decision_id or "-",
        )
        if isinstance(again, Allowed) and self._track(message, method, again):
            await self._to_upstream(message.raw)
        elif not isinstance(again, Allowed):
            self._send(again.reply, message.id)

    async def _answered_in_band(self, message: Message) -> tuple[Message, bool]:
        """A retry carrying the client's answers to approval questions about this very
        call (2026-07-28): each recorded; the message without them, and whether it
        carried any."""
        assert self.approvals is not None
        call = _call_params(message.params)
        if isinstance(call, str):
            return message, False
        params, answers = self.approvals.questions.take(
            message.params, call_key(call.name, call.arguments)
        )
        for approval_id, answer in answers:
            await self.approvals.record(approval_id, answer)
        if params is None:
            return message, False
        body = {**message.body, "params": params}
        return Message(encode(body), body, message.kind), bool(answers)

    async def _cancelled(self, message: Message) -> None:
        """A cancelled allowed call is settled as failed (its reservation released),
        as a cancelled in-process call is; the upstream's late answer still passes.
        Its id stays in flight: the upstream may still be working under it. Settled
        before the next client message is read, so what follows sees the room back."""
        if message.method != "notifications/cancelled" or not isinstance(message.params, dict):
            return
        flight = self._in_flight.get(id_key(message.params.get("requestId")))
        if flight is not None and flight.asking is not None:
            flight.asking.cancel()  # never forwarded: nothing to stop upstream
            await asyncio.gather(flight.asking, return_exceptions=True)
            return
        if flight is not None and flight.answer is not None and not flight.answer.done():
            flight.answer.set_exception(Unanswered("the client cancelled the call"))
            if flight.settled is not None:
                await asyncio.wait([flight.settled])

    async def _route_from_upstream(self, line: bytes) -> tuple[bytes, Any] | None:
        """The bytes to send the client and the client request they belong to, or
        ``None`` (dropped, or answered here)."""
        if not line.strip():
            return None
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: dropped an upstream line: %s", exc)
            return None
        method = message.method or ""
        if message.kind == "request" and (
            method == SAMPLING_METHOD or disguised(method, SAMPLING_METHOD)
        ):
            forward = await self._sampling_request(message, method)
            return None if forward is None else (forward, None)
        if message.kind == "notification":
            await self._server_cancelled(message)
            if method == "notifications/tools/list_changed":
                self._listed = False
        if message.kind != "response":
            return message.raw, self._related(message)
        flight = self._in_flight.pop(id_key(message.id), None)
        if flight is None:
            return message.raw, message.id
        if flight.own is not None:  # the gateway's own question: answered here
            if not flight.own.done():
                flight.own.set_result(message.body)
            return None
        if flight.token is not None:
            self._tokens.pop(flight.token, None)
        result = message.body.get("result")
        if flight.method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            self._protocol_version = version if isinstance(version, str) else None
        elif flight.method == "tools/list":
            self.gate.catalog.learn(result)
            if flight.whole and isinstance(result, dict) and not result.get("nextCursor"):
                self._listed = True
            if self.hide_denied_tools and isinstance(result, dict):
                return self._without_denied(message, result), message.id
        elif flight.answer is not None:
            out = self._answered(message, flight.answer, result)
            return await self._sampled_input(message, flight, result) or out, message.id
        elif flight.method in INPUT_METHODS:
            return await self._sampled_input(message, flight, result) or message.raw, message.id
        return message.raw, message.id

    # -- the tools, listed before a call is judged --------------------------------------

    async def _learn_tools(self, message: Message) -> None:
        """A call of a tool the gateway has not seen listed, before every tool was: the
        gateway lists the upstream's tools itself first (every page), so that the call
        is judged with its schema and description, as in-process — whether or not the
        client listed them. The listing goes under the request's own protocol
        generation (its ``io.modelcontextprotocol/`` ``_meta``) and is never relayed."""
        params = message.params if isinstance(message.params, dict) else {}
        name = params.get("name")
        if self._listed or not isinstance(name, str) or self.gate.catalog.get(name) is not None:
            return
        meta = params.get("_meta")
        generation = {
            key: value
            for key, value in (meta.items() if isinstance(meta, dict) else ())
            if key.startswith("io.modelcontextprotocol/")
        }
        cursor: Any = None
        for _ in range(MAX_LISTING_PAGES):
            asked: dict[str, Any] = {}
            if generation:
                asked["_meta"] = generation
            if cursor is not None:
                asked["cursor"] = cursor
            body = await self._ask("tools/list", asked or None)
            result = body.get("result") if body is not None else None
            if not isinstance(result, dict):
                return  # no listing (an error, no answer): judged on what it has
            self.gate.catalog.learn(result)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                self._listed = True
                return

    async def _ask(self, method: str, params: Any) -> dict[str, Any] | None:
        """A request of the gateway's own to the upstream, under an id of its own that
        no live client request holds; its answer's body, or ``None`` (the upstream
        gone, or no answer within :data:`OWN_REQUEST_TIMEOUT`)."""
        while (key := f"interlock-gateway-{next(self._own_ids)}") in self._in_flight:
            continue
        flight = _InFlight(method, own=asyncio.get_running_loop().create_future())
        self._in_flight[key] = flight
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": key, "method": method}
        if params is not None:
            body["params"] = params
        assert flight.own is not None
        try:
            await self._to_upstream(encode(body))
            return await asyncio.wait_for(asyncio.shield(flight.own), OWN_REQUEST_TIMEOUT)
        except TimeoutError:
            log.warning("interlock mcp-gateway: the upstream did not answer its %s", method)
            return None
        finally:
            if self._in_flight.get(key) is flight:
                self._in_flight.pop(key, None)

    def _related(self, message: Message) -> Any:
        """The client request a server's notification reports on (its progress), or
        ``None``: a server-initiated request, a log line, a list change."""
        if message.method != "notifications/progress" or not isinstance(message.params, dict):
            return None
        return self._tokens.get(str(message.params.get("progressToken")))

    # -- sampling --------------------------------------------------------------------

    async def _sampling_request(self, message: Message, method: str) -> bytes | None:
        """A server's sampling request: judged; forwarded as it came and held until
        the client answers, or refused with the upstream answered here."""
        key = id_key(message.id)
        if key in self.sampling:
            await self._to_upstream(
                error_reply(message.id, INVALID_REQUEST, "the request id is already in use")
            )
            return None
        verdict = await self.sampling.judge(method, message.params, server=None, call_id=key)
        if isinstance(verdict, SamplingRefused):
            await self._to_upstream(
                encode({"jsonrpc": "2.0", "id": message.id, "error": verdict.error})
            )
            return None
        self.sampling.hold(key, verdict, origin=None, request_id=message.id)
        return message.raw

    async def _server_cancelled(self, message: Message) -> None:
        """The upstream cancelled a sampling request it made: released (the client,
        which gets the notification too, stops)."""
        if message.method == "notifications/cancelled" and isinstance(message.params, dict):
            key = id_key(message.params.get("requestId"))
            await self.sampling.abandon(key, "the server cancelled it")

    async def _expired(self, held: Held) -> None:
        """The client never answered a sampling request: both sides are told."""
        cancel = {"requestId": held.request_id, "reason": "the sampling request timed out"}
        self._unrelated(
            encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        )
        problem = "the client did not answer the sampling request in time"
        await self._to_upstream(error_reply(held.request_id, REQUEST_TIMEOUT, problem))

    async def _sampled_input(
        self, message: Message, flight: _InFlight, result: Any
    ) -> bytes | None:
        """A result that asks for input (2026-07-28): its sampling requests judged —
        held under the gateway's keys, or the whole result refused. ``None`` when it
        carries none."""
        if not input_required(result):
            return None
        outcome = await self.sampling.input_required(result, server=None, origin=None)
        if outcome is None:
            return None
        if isinstance(outcome, SamplingRefused):
            if flight.method == TOOLS_CALL:
                refusal = refusal_result(outcome.decision, outcome.action, flight.version)
                return result_reply(message.id, refusal)
            return encode({"jsonrpc": "2.0", "id": message.id, "error": outcome.error})
        return encode({**message.body, "result": outcome})

    async def _restored(self, message: Message) -> Message:
        """A retry whose answers to held sampling requests are settled and put back
        under the server's keys (the message unchanged when it carries none)."""
        params = await self.sampling.input_responses(message.params, origin=None)
        if params is None:
            return message
        body = {**message.body, "params": params}
        return Message(encode(body), body, message.kind)

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
        asking = [flight.asking for flight in self._in_flight.values() if flight.asking]
        for task in asking:
            task.cancel()
        await asyncio.gather(*asking, return_exceptions=True)
        if self.approvals is not None:
            self.approvals.close()
        for flight in self._in_flight.values():
            if flight.answer is not None and not flight.answer.done():
                flight.answer.set_exception(Unanswered("the upstream exited"))
            if flight.own is not None and not flight.own.done():
                flight.own.set_result(None)
        self._in_flight.clear()
        self._tokens.clear()
        await asyncio.gather(*self._settling, return_exceptions=True)
        await self.sampling.close("the gateway's session with the upstream ended")


def client_session() -> Context:
    """The trusted context of one client's session at the gateway: a session id of its
    own (random, never the transport's), so that session-aware rules see what this
    client's agent already did and read — and nothing of another client's."""
    from interlock.core.action import Context

    return Context(session_id=f"mcp-{secrets.token_hex(8)}")


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
        sampling_timeout: float | None = DEFAULT_SAMPLING_TIMEOUT,
        approve_by_elicitation: bool = False,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
    ) -> None:
        if not command:
            raise ValueError("the upstream command is empty")
        if approve_by_elicitation:
            check_can_approve(guard)
        self.guard = guard
        self.hide_denied_tools = hide_denied_tools
        self._options: dict[str, Any] = {
            "sampling_timeout": sampling_timeout,
            "approve_by_elicitation": approve_by_elicitation,
            "elicitation_timeout": elicitation_timeout,
        }
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
            self.guard,
            upstream,
            client.send,
            hide_denied_tools=self.hide_denied_tools,
            context=client_session(),
            **self._options,
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
        sampling_timeout: float | None = DEFAULT_SAMPLING_TIMEOUT,
        approve_by_elicitation: bool = False,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
    ) -> None:
        if approve_by_elicitation:
            check_can_approve(guard)
        self._options: dict[str, Any] = {
            "sampling_timeout": sampling_timeout,
            "approve_by_elicitation": approve_by_elicitation,
            "elicitation_timeout": elicitation_timeout,
        }
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
        relay = AggregateRelay(
            self.guard,
            self.config,
            self._connect,
            self._client.send,
            context=client_session(),
            **self._options,
        )
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
