"""The stdio MCP gateway: spawn the upstream server, relay newline-delimited
JSON-RPC both ways, and gate every ``tools/call`` before the upstream sees it.

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
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Mapping, Sequence
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
from interlock.adapters.mcp_approvals import approval_question, check_can_approve, record_answer
from interlock.adapters.mcp_sampling import SAMPLING_METHOD
from interlock.gateways.mcp.aggregate import AggregateSession, Link
from interlock.gateways.mcp.approvals import DEFAULT_ELICITATION_TIMEOUT, InBandApprovals
from interlock.gateways.mcp.clientio import StdioClient
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
    result_reply,
)
from interlock.gateways.mcp.sampling import (
    DEFAULT_SAMPLING_TIMEOUT,
    INPUT_METHODS,
    Held,
    SamplingGate,
    SamplingRefused,
    input_required,
)
from interlock.gateways.mcp.upstreams import StdioUpstream

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "AggregateGateway",
    "StdioGateway",
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


class _TooLong:
    """Stands for a client line over the size limit (already discarded)."""


_TOO_LONG: Final = _TooLong()


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
    version: str | None = None  # the protocol generation its reply is shaped for
    asking: asyncio.Task[None] | None = None  # its approval, put to the client's user


class StdioGateway:
    """One client on ``client_in`` / ``client_out`` (binary streams; the process's
    stdin and stdout by default), one upstream spawned from ``command``.

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
        self.guard = guard
        self.hide_denied_tools = hide_denied_tools
        self.gate = ToolCallGate(guard)
        self.sampling = SamplingGate(guard, timeout=sampling_timeout, expired=self._expired)
        self.approvals = (
            InBandApprovals(guard, self._send, timeout=elicitation_timeout)
            if approve_by_elicitation
            else None
        )
        self._upstream: asyncio.StreamWriter | None = None
        self.command = list(command)
        self.env = dict(env) if env is not None else upstream_environment()
        self._in = client_in
        self._out = client_out
        self._limit = max_message_bytes
        self._grace = grace
        self._in_flight: dict[str, _InFlight] = {}
        self._protocol_version: str | None = None
        self._to_client: queue.Queue[bytes | None] = queue.Queue()
        self._settling: set[asyncio.Task[None]] = set()

    # -- the client's side (threads) ---------------------------------------------------

    def _read_client(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[Any]) -> None:
        stream = self._in if self._in is not None else os.fdopen(0, "rb", closefd=False)

        def put(item: Any) -> None:
            asyncio.run_coroutine_threadsafe(lines.put(item), loop).result()

        try:
            while True:
                line = stream.readline(self._limit + 1)
                if not line:
                    break
                if len(line) > self._limit and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # drop the rest of it
                        line = stream.readline(self._limit)
                    put(_TOO_LONG)
                    continue
                put(line)
        except (OSError, ValueError, RuntimeError) as exc:  # closed under us, or loop gone
            log.debug("client input ended: %s", exc)
        with contextlib.suppress(RuntimeError):
            put(None)

    def _write_client(self) -> None:
        stream = self._out if self._out is not None else os.fdopen(1, "wb", closefd=False)
        while (line := self._to_client.get()) is not None:
            try:
                stream.write(line)
                stream.flush()
            except (OSError, ValueError) as exc:
                log.warning("interlock mcp-gateway: the client's output closed: %s", exc)
                break

    def _send(self, line: bytes) -> None:
        self._to_client.put(line)

    # -- running -----------------------------------------------------------------------

    async def run(self) -> int:
        """Relay until the upstream exits; its exit code (128 + N for signal N)."""
        loop = asyncio.get_running_loop()
        process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self.env,
            limit=self._limit,
        )
        self._upstream = process.stdin
        writer = threading.Thread(target=self._write_client, name="mcp-gateway-out", daemon=True)
        writer.start()
        lines: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
        reader = threading.Thread(
            target=self._read_client, args=(loop, lines), name="mcp-gateway-in", daemon=True
        )
        reader.start()
        from_client = asyncio.create_task(self._from_client(process, lines))
        try:
            await self._from_upstream(process)
            code = await process.wait()
        finally:
            from_client.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await from_client
            await self._abandon_in_flight()
            self._to_client.put(None)
            await asyncio.to_thread(writer.join)
        return code if code >= 0 else 128 - code

    async def _from_client(
        self, process: asyncio.subprocess.Process, lines: asyncio.Queue[Any]
    ) -> None:
        assert process.stdin is not None
        while (line := await lines.get()) is not None:
            forward = await self._route_from_client(line)
            if forward is None:
                continue
            try:
                process.stdin.write(forward)
                await process.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                log.warning("interlock mcp-gateway: the upstream's input closed")
                return
        # The client is done: let the upstream finish and exit on its own, then insist.
        with contextlib.suppress(OSError):
            process.stdin.close()
        for stop in (process.terminate, process.kill):
            try:
                await asyncio.wait_for(process.wait(), self._grace)
                return
            except TimeoutError:
                log.warning("interlock mcp-gateway: the upstream did not exit; stopping it")
                with contextlib.suppress(ProcessLookupError):
                    stop()

    async def _from_upstream(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:  # over the limit: asyncio has dropped the line's bytes
                log.warning("interlock mcp-gateway: dropped an upstream message over the limit")
                continue
            if not line:
                return
            out = await self._route_from_upstream(line)
            if out is not None:
                self._send(out)

    async def _to_upstream(self, line: bytes) -> None:
        """Send the upstream a line of the gateway's own (an answer on the client's
        behalf); nothing when its input is closed."""
        if self._upstream is None:
            return
        try:
            self._upstream.write(line)
            await self._upstream.drain()
        except (BrokenPipeError, ConnectionResetError):
            log.warning("interlock mcp-gateway: the upstream's input closed")

    # -- routing -----------------------------------------------------------------------

    async def _route_from_client(self, line: bytes | _TooLong) -> bytes | None:
        """The bytes to forward upstream, or ``None`` (answered or dropped here)."""
        if isinstance(line, _TooLong):
            self._send(error_reply(None, INVALID_REQUEST, "the message is over the size limit"))
            return None
        if not line.strip():
            return None
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: refused a client message: %s", exc)
            self._send(error_reply(exc.request_id, exc.code, str(exc)))
            return None
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
            self._send(error_reply(message.id, INVALID_REQUEST, "the request id is already in use"))
            return False
        flight = _InFlight(
            method, allowed, version=protocol_version_of(message, self._protocol_version)
        )
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
            self._send(error_reply(message.id, METHOD_NOT_FOUND, f"method not found: {method}"))
            return None
        if id_key(message.id) in self._in_flight:
            self._track(message, method)  # refuses it: the id is live
            return None
        answered = False
        if self.approvals is not None:
            message, answered = await self._answered_in_band(message)
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
                self._send(verdict.reply)
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
            self._send(result_reply(message.id, asking))
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
                await record_answer(self.guard, approval_id, answer, self.approvals.client_name)
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
            self._send(again.reply)

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
            await record_answer(self.guard, approval_id, answer, self.approvals.client_name)
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

    async def _route_from_upstream(self, line: bytes) -> bytes | None:
        """The bytes to send the client, or ``None`` (dropped, or answered here)."""
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
            return await self._sampling_request(message, method)
        if message.kind == "notification":
            await self._server_cancelled(message)
            return message.raw
        if message.kind != "response":
            return message.raw
        flight = self._in_flight.pop(id_key(message.id), None)
        if flight is None:
            return message.raw
        result = message.body.get("result")
        if flight.method == "initialize" and isinstance(result, dict):
            version = result.get("protocolVersion")
            self._protocol_version = version if isinstance(version, str) else None
        elif flight.method == "tools/list":
            self.gate.catalog.learn(result)
            if self.hide_denied_tools and isinstance(result, dict):
                return self._without_denied(message, result)
        elif flight.answer is not None:
            out = self._answered(message, flight.answer, result)
            return await self._sampled_input(message, flight, result) or out
        elif flight.method in INPUT_METHODS:
            return await self._sampled_input(message, flight, result) or message.raw
        return message.raw

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
        self._send(
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
        self._in_flight.clear()
        await asyncio.gather(*self._settling, return_exceptions=True)
        await self.sampling.close("the gateway's session with the upstream ended")


class AggregateGateway:
    """One client on stdin/stdout, several named upstreams spawned from ``config``,
    merged into one server (:mod:`interlock.gateways.mcp.aggregate`).

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
        if any(spec.command is None for spec in config.upstreams):
            raise ValueError("an HTTP upstream needs the HTTP gateway")
        if approve_by_elicitation:
            check_can_approve(guard)
        self._approve_by_elicitation = approve_by_elicitation
        self._elicitation_timeout = elicitation_timeout
        self.guard = guard
        self.config = config
        self.env = dict(env) if env is not None else upstream_environment()
        self._client = StdioClient(client_in, client_out, max_message_bytes=max_message_bytes)
        self._limit = max_message_bytes
        self._grace = grace
        self._sampling_timeout = sampling_timeout

    def _connect(self, spec: UpstreamSpec) -> StdioUpstream:
        assert spec.command is not None
        return StdioUpstream(
            spec.name,
            spec.command,
            env={**self.env, **spec.env},
            max_message_bytes=self._limit,
            grace=self._grace,
        )

    async def run(self) -> int:
        """Relay until the client leaves or every upstream has exited. The first
        non-zero exit code of an upstream (0 when all exited cleanly)."""
        links = AggregateSession.links_for(self.guard, self.config.upstreams, self._connect)
        started: list[Link] = []
        try:
            for link in links:
                try:
                    await link.conn.start()
                except OSError as exc:
                    raise OSError(f"{link.conn}: {exc}") from exc
                started.append(link)
        except BaseException:
            await asyncio.gather(*(link.conn.stop() for link in started), return_exceptions=True)
            raise
        self._client.start()
        session = AggregateSession(
            self.guard,
            self.config,
            links,
            self._client.send,
            sampling_timeout=self._sampling_timeout,
            approve_by_elicitation=self._approve_by_elicitation,
            elicitation_timeout=self._elicitation_timeout,
        )
        pumps = [asyncio.create_task(self._pump(session, link)) for link in links]
        from_client = asyncio.create_task(self._from_client(session))
        everyone_gone: asyncio.Future[list[None]] = asyncio.gather(*pumps)
        try:
            waiting: list[asyncio.Future[Any]] = [from_client, everyone_gone]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            from_client.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await from_client
            codes = await asyncio.gather(*(link.conn.stop() for link in links))
            for pump in pumps:
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            await session.close()
            await self._client.close()
        return next((code for code in codes if code != 0), 0)

    async def _from_client(self, session: AggregateSession) -> None:
        while (line := await self._client.receive()) is not None:
            await session.from_client(line)

    async def _pump(self, session: AggregateSession, link: Link) -> None:
        async for line in link.conn.lines():
            await session.from_upstream(link, line)
        code = await link.conn.wait()
        log.warning("interlock mcp-gateway: %s exited (code %d)", link.conn, code)
        await session.upstream_ended(link)
