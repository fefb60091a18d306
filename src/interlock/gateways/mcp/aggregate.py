"""Several upstream MCP servers behind one gateway, merged into one server for the
client: each upstream's tools and prompts under its name (``files__read_file``),
resources under their own URIs, every ``tools/call`` judged with the upstream's name
and the tool's annotations as facts, and routed to the upstream that has the tool.

What the gateway does with each client message:

- ``initialize`` and ``server/discover``: asked of every upstream, the answers
  merged (capabilities joined; the oldest protocol version, or the versions all of
  them support);
- ``tools/list``, ``prompts/list``, ``resources/list``, ``resources/templates/list``:
  asked of every upstream (every page), merged into one page; two tools or prompts
  under one name are refused with an error that names both upstreams;
- ``tools/call``: judged, then sent to its upstream under the upstream's own name;
- ``prompts/get``, ``completion/complete``, ``resources/read``,
  ``resources/subscribe``, ``resources/unsubscribe``: sent to the upstream that
  listed the prompt or the resource;
- ``ping``: answered by the gateway; ``logging/setLevel``: sent to every upstream
  that logs; any other request: sent to the upstream when there is only one, else
  ``-32601``;
- notifications: ``cancelled`` and ``progress`` to the upstream they concern, the
  others to every upstream; responses (to a server's request): to the upstream that
  asked.

Every request the gateway sends an upstream carries the gateway's own id, so the ids
of different clients' and upstreams' requests never meet; server-to-client requests
(sampling, elicitation, roots) get a gateway id on the way to the client and their
upstream id back on the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from interlock.adapters.base import call_key
from interlock.adapters.mcp import redacted_error, refusal_result, run_settled, tool_action
from interlock.adapters.mcp_approvals import approval_question
from interlock.adapters.mcp_sampling import SAMPLING_METHOD, Sampled
from interlock.gateways.mcp.approvals import DEFAULT_ELICITATION_TIMEOUT, InBandApprovals
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.gate import (
    PROTOCOL_VERSION_META,
    Allowed,
    Refused,
    ToolCallGate,
    ToolCatalog,
    protocol_version_of,
)
from interlock.gateways.mcp.messages import (
    INVALID_PARAMS,
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

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.gateways.mcp.clientio import ClientLine
    from interlock.gateways.mcp.upstreams import Upstream
    from interlock.guard import Guard

__all__ = [
    "INTERNAL_ERROR",
    "LISTINGS",
    "MAX_PAGES",
    "AggregateSession",
    "Link",
    "UpstreamGone",
    "merge_capabilities",
]

log = logging.getLogger("interlock.gateways.mcp")

#: JSON-RPC's internal error: an upstream failed or is gone.
INTERNAL_ERROR: Final = -32603
#: How long the gateway waits for an upstream's tools when it lists them itself.
OWN_REQUEST_TIMEOUT: Final = 30.0
#: How many pages of one listing the gateway reads from one upstream.
MAX_PAGES: Final = 100
SERVER_INFO: Final = {"name": "interlock-mcp-gateway", "version": "0.1.0"}

#: The listings the gateway merges: method → (the result's list key, renamed?).
LISTINGS: Final = {
    "tools/list": ("tools", True),
    "prompts/list": ("prompts", True),
    "resources/list": ("resources", False),
    "resources/templates/list": ("resourceTemplates", False),
}


class UpstreamGone(Exception):
    """The upstream exited (or its input closed) before it answered."""


class Unanswered(Exception):
    """An allowed call ended without a result: an error, a cancellation, an exit."""


@dataclass(slots=True)
class _Outbound:
    """A request the gateway sent an upstream, under the gateway's id."""

    method: str
    client_id: Any = None  # the client request it answers, if any
    waiter: asyncio.Future[dict[str, Any]] | None = None  # a gateway's own question
    answer: asyncio.Future[Any] | None = None  # an allowed tools/call's result
    settled: asyncio.Task[None] | None = None
    body: dict[str, Any] | None = None  # what was sent (a client request's)


@dataclass(slots=True)
class Link:
    """One upstream as this session sees it."""

    spec: UpstreamSpec
    conn: Upstream
    gate: ToolCallGate
    outbound: dict[int, _Outbound] = field(default_factory=dict)
    #: its server-to-client requests: its id → the gateway's id toward the client
    asked: dict[str, int] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    resources: set[str] = field(default_factory=set)
    templates: list[re.Pattern[str]] = field(default_factory=list)
    #: every tool it lists is in its gate's catalog (until it says they changed)
    listed: bool = False

    @property
    def name(self) -> str:
        return self.spec.name or ""

    @property
    def prefix(self) -> str:
        return self.spec.prefix


def _template_pattern(template: str) -> re.Pattern[str] | None:
    """An RFC 6570 URI template as a regex (level 1–2: ``{x}`` one segment, ``{+x}``
    anything), to route a read of a URI the server only listed as a template."""
    parts: list[str] = []
    last = 0
    for match in re.finditer(r"\{([+#]?)[^}]*\}", template):
        parts.append(re.escape(template[last : match.start()]))
        parts.append(".+" if match.group(1) else "[^/?#]+")
        last = match.end()
    parts.append(re.escape(template[last:]))
    try:
        return re.compile("".join(parts) + r"\Z")
    except re.error:  # pragma: no cover - escaped text always compiles
        return None


def merge_capabilities(all_caps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The capabilities of the merged server: what any upstream offers (tasks left
    out: a task cannot be followed across upstreams)."""
    merged: dict[str, Any] = {}
    for caps in all_caps:
        for key, value in caps.items():
            if key == "tasks":
                continue
            if isinstance(value, Mapping):
                into = merged.setdefault(key, {})
                for flag, on in value.items():
                    if isinstance(on, bool):
                        into[flag] = bool(into.get(flag)) or on
                    else:
                        into.setdefault(flag, on)
            else:
                merged.setdefault(key, value)
    return merged


def _oldest(versions: Sequence[str]) -> str:
    return min(versions)  # protocol versions are dates: text order is time order


class AggregateSession:
    """One client, several upstreams (already started). Feed it the client's lines
    (:meth:`from_client`) and each upstream's (:meth:`from_upstream`); it answers
    through ``send`` (``send(line, related)``: ``related`` is the client request a
    message belongs to, for transports that care)."""

    def __init__(
        self,
        guard: Guard,
        config: GatewayConfig,
        links: Sequence[Link],
        send: Callable[[bytes, Any], None],
        *,
        sampling_timeout: float | None = DEFAULT_SAMPLING_TIMEOUT,
        approve_by_elicitation: bool = False,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
        context: Context | None = None,
    ) -> None:
        self.guard = guard
        self.config = config
        self.links = list(links)
        self._send = send
        self.sampling = SamplingGate(
            guard, timeout=sampling_timeout, expired=self._expired, context=context
        )
        self.approvals = (
            InBandApprovals(
                guard, lambda line: send(line, None), timeout=elicitation_timeout, context=context
            )
            if approve_by_elicitation
            else None
        )
        #: client calls whose approval is being put to the client's user
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._next_id = 0
        self._client_live: dict[str, tuple[Link, int] | None] = {}
        #: the gateway's id toward the client → (the upstream, its own id)
        self._server_asks: dict[int, tuple[Link, Any]] = {}
        #: progress tokens: the client's (→ the client request they report on) and
        #: the upstreams' (→ the upstream whose request the client reports on)
        self._client_tokens: dict[str, Any] = {}
        self._server_tokens: dict[str, Link] = {}
        self._protocol_version: str | None = None
        self._tools: dict[str, tuple[Link, str]] = {}
        self._prompts: dict[str, tuple[Link, str]] = {}
        self._settling: set[asyncio.Task[None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._initialized = False

    @classmethod
    def links_for(
        cls,
        guard: Guard,
        specs: Sequence[UpstreamSpec],
        connect: Callable[[UpstreamSpec], Upstream],
        context: Context | None = None,
    ) -> list[Link]:
        """One link per upstream; ``context``: the client's trusted context, when the
        transport knows it (every call of the session is judged with it)."""
        return [
            Link(spec, connect(spec), ToolCallGate(guard, ToolCatalog(), spec.name, context))
            for spec in specs
        ]

    # -- ids -----------------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def _forward(self, link: Link, body: dict[str, Any], outbound: _Outbound) -> int:
        """Send ``body`` (a request) to ``link`` under a new gateway id."""
        gid = self._new_id()
        link.outbound[gid] = outbound
        if not link.alive or not await link.conn.send(encode({**body, "id": gid})):
            link.outbound.pop(gid, None)
            raise UpstreamGone(f"{link.conn} is gone")
        return gid

    async def _ask(self, link: Link, method: str, params: Any) -> dict[str, Any]:
        """A request of the gateway's own to ``link``; its response's body."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        await self._forward(link, body, _Outbound(method, waiter=waiter))
        return await waiter

    def _reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self._send(result_reply(request_id, result), request_id)

    def _error(self, request_id: Any, code: int, message: str, data: Any = None) -> None:
        self._send(error_reply(request_id, code, message, data), request_id)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- from the client -----------------------------------------------------------------

    async def from_client(self, line: ClientLine) -> None:
        from interlock.gateways.mcp.clientio import TooLong

        if isinstance(line, TooLong):
            self._error(None, INVALID_REQUEST, "the message is over the size limit")
            return
        if line is None or not line.strip():
            return
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: refused a client message: %s", exc)
            self._error(exc.request_id, exc.code, str(exc))
            return
        await self.client_message(message)

    async def client_message(self, message: Message) -> None:
        """:meth:`from_client` for a message already read (the HTTP gateway's)."""
        if message.kind == "response":
            await self._client_answer(message)
        elif message.kind == "notification":
            await self._client_notification(message)
        else:
            await self._client_request(message)

    async def _client_request(self, message: Message) -> None:
        method = message.method or ""
        key = id_key(message.id)
        if key in self._client_live:
            log.warning("interlock mcp-gateway: refused a request reusing live id %r", message.id)
            self._error(message.id, INVALID_REQUEST, "the request id is already in use")
            return
        if method != TOOLS_CALL and disguised_tools_call(method):
            log.warning("interlock mcp-gateway: refused method %r (not tools/call)", method)
            self._error(message.id, METHOD_NOT_FOUND, f"method not found: {method}")
            return
        if method == TOOLS_CALL:
            await self._tools_call(message)
        elif method == "ping":
            self._reply(message.id, self._complete(message, {}))
        elif method in ("initialize", "server/discover"):
            if method == "initialize" and self.approvals is not None:
                self.approvals.learn(message)
            self._track(message)
            self._spawn(self._handshake(message))
        elif method in LISTINGS:
            self._track(message)
            self._spawn(self._listing(message, method))
        elif method == "logging/setLevel":
            self._track(message)
            self._spawn(self._broadcast(message, lambda link: "logging" in link.capabilities))
        else:
            link, rewritten = self._route(message, method)
            if link is None:
                self._error(message.id, rewritten["code"], rewritten["message"])
                return
            await self._relay_request(message, link, rewritten)

    def _track(self, message: Message, route: tuple[Link, int] | None = None) -> None:
        self._client_live[id_key(message.id)] = route

    def _done(self, client_id: Any) -> None:
        self._client_live.pop(id_key(client_id), None)

    def _complete(self, message: Message, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` as the request's protocol generation shapes it."""
        if protocol_version_of(message, None) is not None and "resultType" not in result:
            return {**result, "resultType": "complete"}
        return result

    async def _relay_request(
        self, message: Message, link: Link, body: dict[str, Any], allowed: Allowed | None = None
    ) -> None:
        if message.method in INPUT_METHODS:
            restored = await self.sampling.input_responses(body.get("params"), origin=link)
            if restored is not None:
                body = {**body, "params": restored}
        outbound = _Outbound(message.method or "", client_id=message.id, body=body)
        if allowed is not None:
            outbound.answer = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._settle(allowed, outbound.answer))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
            outbound.settled = task
        progress = _progress_token(body)
        if progress is not None:
            self._client_tokens[progress] = message.id
        try:
            gid = await self._forward(link, body, outbound)
        except UpstreamGone as exc:
            if outbound.answer is not None and not outbound.answer.done():
                outbound.answer.set_exception(Unanswered(str(exc)))
            self._error(message.id, INTERNAL_ERROR, str(exc))
            return
        self._track(message, (link, gid))

    def _route(self, message: Message, method: str) -> tuple[Link | None, dict[str, Any]]:
        """Where a request goes, and the body it goes with (names unprefixed); or
        ``(None, error)``."""
        body = dict(message.body)
        params = message.params if isinstance(message.params, Mapping) else {}
        alive = [link for link in self.links if link.alive]
        if method == "prompts/get":
            return self._by_name(body, params, "name", self._prompts, "prompt")
        if method == "completion/complete":
            found_ref = params.get("ref")
            ref: Mapping[str, Any] = found_ref if isinstance(found_ref, Mapping) else {}
            if ref.get("type") == "ref/prompt":
                found = self._unprefixed(ref.get("name"), self._prompts)
                if found is None:
                    return None, _bad(f"unknown prompt: {ref.get('name')!r}")
                link, name = found
                body["params"] = {**params, "ref": {**ref, "name": name}}
                return link, body
            return self._by_uri(body, ref.get("uri"), alive)
        if method.startswith("resources/"):
            return self._by_uri(body, params.get("uri"), alive)
        if len(alive) == 1:
            return alive[0], body
        return None, {"code": METHOD_NOT_FOUND, "message": f"method not found: {method}"}

    def _by_name(
        self,
        body: dict[str, Any],
        params: Mapping[str, Any],
        key: str,
        catalog: dict[str, tuple[Link, str]],
        what: str,
    ) -> tuple[Link | None, dict[str, Any]]:
        found = self._unprefixed(params.get(key), catalog)
        if found is None:
            return None, _bad(f"unknown {what}: {params.get(key)!r}")
        link, name = found
        body["params"] = {**params, key: name}
        return link, body

    def _unprefixed(
        self, name: Any, catalog: dict[str, tuple[Link, str]]
    ) -> tuple[Link, str] | None:
        """The upstream and its own name for a merged name: from the last listing, or
        (not listed yet) by its prefix."""
        if not isinstance(name, str):
            return None
        found = catalog.get(name)
        if found is not None:
            return found if found[0].alive else None
        alive = [link for link in self.links if link.alive]
        for link in alive:
            if link.prefix and name.startswith(link.prefix):
                return link, name[len(link.prefix) :]
        bare = [link for link in alive if not link.prefix]
        return (bare[0], name) if len(bare) == 1 else None

    def _by_uri(
        self, body: dict[str, Any], uri: Any, alive: Sequence[Link]
    ) -> tuple[Link | None, dict[str, Any]]:
        if not isinstance(uri, str):
            return None, _bad("the request names no resource uri")
        for link in alive:
            if uri in link.resources:
                return link, body
        for link in alive:
            if any(pattern.match(uri) for pattern in link.templates):
                return link, body
        with_resources = [link for link in alive if "resources" in link.capabilities]
        if len(with_resources) == 1:
            return with_resources[0], body
        return None, _bad(f"no upstream has listed the resource {uri!r}")

    async def _tools_call(self, message: Message) -> None:
        params = message.params
        name = params.get("name") if isinstance(params, Mapping) else None
        found = self._unprefixed(name, self._tools) if isinstance(name, str) else None
        gate = found[0].gate if found is not None else self.links[0].gate
        if not isinstance(params, Mapping) or not isinstance(name, str):
            problem = "the tools/call params are malformed"
            refused = await gate.malformed(message.id, problem, name, routed=found is not None)
            self._send(refused.reply, message.id)
            return
        if found is None:
            problem = f"unknown tool: {name!r}"
            refused = await gate.malformed(message.id, problem, name, routed=False)
            self._send(refused.reply, message.id)
            return
        link, original = found
        # answers to held sampling requests are settled whatever this call's verdict
        restored = await self.sampling.input_responses(params, origin=link)
        params = params if restored is None else restored
        answered = False
        if self.approvals is not None:
            params, answered = await self._answered_in_band(params, name)
        judged = {**params, "name": original}
        version = protocol_version_of(message, self._protocol_version)
        await self._learn_tools(link, original, params)
        verdict = await link.gate.judge_params(message.id, judged, version, shown_as=name)
        log.info(
            "interlock mcp-gateway: tools/call %r (id %r): %s [decision %s]",
            name,
            message.id,
            verdict.decision.verdict.value,
            verdict.decision.decision_id or "-",
        )
        if not isinstance(verdict, Allowed):
            # a call whose user answered already is not asked again at once
            if answered or not self._ask_in_band(message, link, judged, name, verdict):
                self._send(verdict.reply, message.id)
            return
        await self._relay_request(message, link, {**message.body, "params": judged}, verdict)

    def tool_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of the merged tool ``name``, as its upstream last listed it
        (``None``: not listed yet, or no such tool)."""
        found = self._tools.get(name)
        if found is None:
            return None
        link, original = found
        tool = link.gate.catalog.get(original)
        return None if tool is None else tool.input_schema

    async def _learn_tools(self, link: Link, name: str, params: Mapping[str, Any]) -> None:
        """A call of a tool not seen listed, before its upstream's tools all were: the
        gateway lists them itself first (every page, under the request's own protocol
        generation), so that the call is judged with the tool's schema, description
        and annotations whether or not the client listed them; never relayed."""
        if link.listed or link.gate.catalog.get(name) is not None:
            return
        meta = params.get("_meta")
        generation = {
            key: value
            for key, value in (meta.items() if isinstance(meta, Mapping) else ())
            if key.startswith("io.modelcontextprotocol/")
        }
        asked = {"_meta": generation} if generation else {}
        try:
            pages = await asyncio.wait_for(
                self._all_pages(link, "tools/list", asked), OWN_REQUEST_TIMEOUT
            )
        except (_ListingFailed, TimeoutError) as exc:
            log.warning("interlock mcp-gateway: could not list the tools of %s: %s", link.conn, exc)
            return
        link.gate.catalog.learn({"tools": [item for page, _ in pages for item in page]})
        link.listed = True

    # -- approvals through elicitation ---------------------------------------------------

    def _ask_in_band(
        self, message: Message, link: Link, judged: dict[str, Any], name: str, verdict: Refused
    ) -> bool:
        """Put the call's approval to the client's user, if it can be; False when it
        cannot (the refusal is sent as it is)."""
        approvals = self.approvals
        channel = approvals.channel(message, verdict.decision) if approvals else None
        approval = verdict.decision.approval
        if approvals is None or channel is None or approval is None or approval.id is None:
            return False
        arguments = judged.get("arguments")
        action = tool_action(name, arguments if isinstance(arguments, Mapping) else None)
        question = approval_question(verdict.decision, action, self.guard)
        if question is None:
            return False
        if channel == "result":
            call = call_key(name, action.arguments)
            self._reply(message.id, approvals.questions.ask(approval.id, call, question))
            return True
        key = id_key(message.id)
        self._track(message)
        self._asking[key] = asyncio.create_task(
            self._asking_then_relay(message, link, judged, name, verdict, question)
        )
        return True

    async def _asking_then_relay(
        self,
        message: Message,
        link: Link,
        judged: dict[str, Any],
        name: str,
        verdict: Refused,
        question: dict[str, Any],
    ) -> None:
        """Wait for the client's user (2025-11-25), then judge the call again: it runs
        once when approved, else it is refused as the approval now stands."""
        assert self.approvals is not None and verdict.decision.approval is not None
        approval_id = verdict.decision.approval.id
        assert approval_id is not None
        key = id_key(message.id)
        try:
            answer = await self.approvals.ask(question)
            again: Allowed | Refused = verdict
            if answer != "pending":
                await self.approvals.record(approval_id, answer)
                version = protocol_version_of(message, self._protocol_version)
                again = await link.gate.judge_params(message.id, judged, version, shown_as=name)
        finally:
            self._asking.pop(key, None)
            self._done(message.id)
        log.info(
            "interlock mcp-gateway: tools/call %r (id %r) after approval in band: %s [decision %s]",
            name,
            message.id,
            again.decision.verdict.value,
            again.decision.decision_id or "-",
        )
        if isinstance(again, Allowed):
            await self._relay_request(message, link, {**message.body, "params": judged}, again)
        else:
            self._send(again.reply, message.id)

    async def _answered_in_band(
        self, params: Mapping[str, Any], name: str
    ) -> tuple[Mapping[str, Any], bool]:
        """A retry's answers to approval questions about this very call (2026-07-28),
        each recorded; its params without them, and whether it carried any."""
        assert self.approvals is not None
        arguments = params.get("arguments")
        call = call_key(name, arguments if isinstance(arguments, Mapping) else {})
        stripped, answers = self.approvals.questions.take(params, call)
        for approval_id, answer in answers:
            await self.approvals.record(approval_id, answer)
        return (params if stripped is None else stripped), bool(answers)

    # -- handshakes and listings ---------------------------------------------------------

    async def _each(self, message: Message, links: Sequence[Link]) -> list[dict[str, Any]] | None:
        """Ask every one of ``links`` the client's request; their results, or ``None``
        (the client has been answered with the first failure)."""
        params = message.params

        async def one(link: Link) -> dict[str, Any]:
            return await self._ask(link, message.method or "", params)

        try:
            bodies = await asyncio.gather(*(one(link) for link in links))
        except UpstreamGone as exc:
            self._error(message.id, INTERNAL_ERROR, str(exc))
            return None
        results = []
        for link, body in zip(links, bodies, strict=True):
            if "error" in body:
                # The upstream's own code and data go on (the client reads them: an
                # unsupported protocol version's -32022 names the versions to re-probe
                # with); the message names the upstream.
                error = body["error"] if isinstance(body["error"], Mapping) else {}
                text = error.get("message", "an error")
                code = error.get("code")
                if not isinstance(code, int) or isinstance(code, bool):
                    code = INTERNAL_ERROR
                data = error.get("data", {"upstream": link.name, "error": body["error"]})
                problem = f"upstream {link.name!r} answered {message.method}: {text}"
                self._error(message.id, code, problem, data)
                return None
            result = body.get("result")
            results.append(result if isinstance(result, dict) else {})
        return results

    async def _handshake(self, message: Message) -> None:
        try:
            links = [link for link in self.links if link.alive]
            results = await self._each(message, links)
            if results is None:
                return
            for link, result in zip(links, results, strict=True):
                caps = result.get("capabilities")
                link.capabilities = dict(caps) if isinstance(caps, Mapping) else {}
            merged: dict[str, Any] = {
                "capabilities": merge_capabilities([link.capabilities for link in links])
            }
            if message.method == "initialize":
                versions = [r.get("protocolVersion") for r in results]
                named = [v for v in versions if isinstance(v, str)]
                if len(named) != len(versions):
                    self._error(message.id, INTERNAL_ERROR, "an upstream named no protocol version")
                    return
                self._protocol_version = _oldest(named)
                merged = {"protocolVersion": self._protocol_version, **merged}
                self._initialized = True
            else:
                supported = [set(r.get("supportedVersions") or ()) for r in results]
                common = sorted(set.intersection(*supported)) if supported else []
                if not common:
                    problem = "the upstreams support no protocol version in common"
                    self._error(message.id, INTERNAL_ERROR, problem)
                    return
                merged = {"supportedVersions": common, **merged, "resultType": "complete"}
            merged["serverInfo"] = dict(SERVER_INFO)
            instructions = [
                f"[{link.name}] {r['instructions']}"
                for link, r in zip(links, results, strict=True)
                if isinstance(r.get("instructions"), str) and r["instructions"]
            ]
            if instructions:
                merged["instructions"] = "\n\n".join(instructions)
            self._reply(message.id, merged)
        finally:
            self._done(message.id)

    async def _listing(self, message: Message, method: str) -> None:
        try:
            params = message.params if isinstance(message.params, Mapping) else {}
            if params.get("cursor") is not None:
                problem = "invalid cursor: the gateway lists everything in one page"
                self._error(message.id, INVALID_PARAMS, problem)
                return
            key, renamed = LISTINGS[method]
            links = [link for link in self.links if link.alive]
            try:
                pages = await asyncio.gather(
                    *(self._all_pages(link, method, params) for link in links)
                )
            except _ListingFailed as failed:
                self._error(message.id, INTERNAL_ERROR, str(failed), failed.data)
                return
            items, clash = self._merge(method, key, renamed, links, pages)
            if clash is not None:
                log.error("interlock mcp-gateway: %s", clash)
                self._error(message.id, INTERNAL_ERROR, clash)
                return
            first: dict[str, Any] = next((page[0][1] for page in pages if page), {})
            result = {k: v for k, v in first.items() if k not in (key, "nextCursor")}
            result[key] = items
            self._reply(message.id, self._complete(message, result))
        finally:
            self._done(message.id)

    async def _all_pages(
        self, link: Link, method: str, params: Mapping[str, Any]
    ) -> list[tuple[list[Any], dict[str, Any]]]:
        """Every page of one upstream's listing: (items, result) each."""
        pages: list[tuple[list[Any], dict[str, Any]]] = []
        cursor = None
        key = LISTINGS[method][0]
        for _ in range(MAX_PAGES):
            asked = dict(params)
            if cursor is not None:
                asked["cursor"] = cursor
            try:
                body = await self._ask(link, method, asked or None)
            except UpstreamGone as exc:
                raise _ListingFailed(str(exc), {"upstream": link.name}) from exc
            if "error" in body:
                error = body["error"] if isinstance(body["error"], Mapping) else {}
                if error.get("code") == METHOD_NOT_FOUND:
                    return pages  # it has none of these
                raise _ListingFailed(
                    f"upstream {link.name!r} answered {method}: {error.get('message', 'an error')}",
                    {"upstream": link.name, "error": body["error"]},
                )
            found = body.get("result")
            result: dict[str, Any] = found if isinstance(found, dict) else {}
            items = result.get(key)
            pages.append((items if isinstance(items, list) else [], result))
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return pages
        log.warning("interlock mcp-gateway: %s listed more than %d pages", link.conn, MAX_PAGES)
        return pages

    def _merge(
        self,
        method: str,
        key: str,
        renamed: bool,
        links: Sequence[Link],
        pages: Sequence[list[tuple[list[Any], dict[str, Any]]]],
    ) -> tuple[list[Any], str | None]:
        merged: list[Any] = []
        catalog: dict[str, tuple[Link, str]] = {}
        for link, link_pages in zip(links, pages, strict=True):
            items = [item for page, _ in link_pages for item in page if isinstance(item, dict)]
            if method == "tools/list":
                link.gate.catalog.learn({"tools": items})
                link.listed = True
            if method == "resources/list":
                link.resources = {i["uri"] for i in items if isinstance(i.get("uri"), str)}
            if method == "resources/templates/list":
                link.templates = [
                    p
                    for i in items
                    if isinstance(i.get("uriTemplate"), str)
                    and (p := _template_pattern(i["uriTemplate"])) is not None
                ]
            for item in items:
                if not renamed:
                    merged.append(item)
                    continue
                name = item.get("name")
                if not isinstance(name, str):
                    continue
                shown = link.prefix + name
                if shown in catalog:
                    other = catalog[shown][0].name
                    what = "tool" if method == "tools/list" else "prompt"
                    return [], (
                        f"two upstreams offer the {what} {shown!r}: {other!r} and {link.name!r}; "
                        "give them other names"
                    )
                catalog[shown] = (link, name)
                if method == "tools/list" and self._hidden(name, link):
                    continue
                merged.append({**item, "name": shown})
        if method == "tools/list":
            self._tools = catalog
        elif method == "prompts/list":
            self._prompts = catalog
        return merged, None

    def _hidden(self, name: str, link: Link) -> bool:
        """Leave a tool out of the list: asked for, and the policy refuses every call."""
        return self.config.hide_denied_tools and link.gate.never_allowed(name)

    async def _broadcast(self, message: Message, which: Callable[[Link], bool]) -> None:
        try:
            links = [link for link in self.links if link.alive and which(link)]
            results = await self._each(message, links)
            if results is not None:
                self._reply(message.id, self._complete(message, {}))
        finally:
            self._done(message.id)

    # -- client notifications and answers ------------------------------------------------

    async def _client_notification(self, message: Message) -> None:
        method = message.method or ""
        if method == TOOLS_CALL or disguised_tools_call(method):
            log.warning("interlock mcp-gateway: dropped a %r sent as a notification", method)
            return
        params = message.params if isinstance(message.params, Mapping) else {}
        if method == "notifications/cancelled":
            route = self._client_live.get(id_key(params.get("requestId")))
            asking = self._asking.get(id_key(params.get("requestId")))
            if asking is not None:  # never sent upstream: nothing to stop there
                asking.cancel()
                await asyncio.gather(asking, return_exceptions=True)
                return
            if route is None:
                return
            link, gid = route
            await self._cancelled(link, gid)
            await link.conn.send(encode({**message.body, "params": {**params, "requestId": gid}}))
            return
        if method == "notifications/progress":
            asker = self._server_tokens.get(str(params.get("progressToken")))
            if asker is not None and asker.alive:
                await asker.conn.send(message.raw)
            return
        for link in self.links:
            if link.alive:
                await link.conn.send(message.raw)

    async def _cancelled(self, link: Link, gid: int) -> None:
        """A cancelled allowed call is released, as in-process; the upstream's late
        answer still passes. Settled before the next client message is read."""
        outbound = link.outbound.get(gid)
        if outbound is not None and outbound.answer is not None and not outbound.answer.done():
            outbound.answer.set_exception(Unanswered("the client cancelled the call"))
            if outbound.settled is not None:
                await asyncio.wait([outbound.settled])

    async def _client_answer(self, message: Message) -> None:
        if self.approvals is not None and self.approvals.answered(message):
            return
        request_id = message.id
        asked = self._server_asks.pop(request_id, None) if isinstance(request_id, int) else None
        if asked is None:
            log.warning("interlock mcp-gateway: dropped an answer to no request: %r", request_id)
            return
        link, upstream_id = asked
        link.asked.pop(id_key(upstream_id), None)
        await self.sampling.answered(str(request_id), message.body)
        if link.alive:
            await link.conn.send(encode({**message.body, "id": upstream_id}))

    # -- from an upstream ----------------------------------------------------------------

    async def from_upstream(self, link: Link, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = parse_line(line)
        except NotAMessage as exc:
            log.warning("interlock mcp-gateway: dropped a line from %s: %s", link.conn, exc)
            return
        if message.kind == "response":
            await self._upstream_answer(link, message)
        elif message.kind == "request":
            await self._server_request(link, message)
        else:
            await self._upstream_notification(link, message)

    async def _server_request(self, link: Link, message: Message) -> None:
        """A server-to-client request, under a gateway id toward the client; a
        sampling request judged first (refused: the upstream answered here)."""
        method = message.method or ""
        sampling = method == SAMPLING_METHOD or disguised(method, SAMPLING_METHOD)
        if sampling and id_key(message.id) in link.asked:
            problem = "the request id is already in use"
            await link.conn.send(error_reply(message.id, INVALID_REQUEST, problem))
            return
        sampled: Sampled | None = None
        if sampling:
            verdict = await self.sampling.judge(
                method, message.params, server=link.name, call_id=id_key(message.id)
            )
            if isinstance(verdict, SamplingRefused):
                body = {"jsonrpc": "2.0", "id": message.id, "error": verdict.error}
                await link.conn.send(encode(body))
                return
            sampled = verdict
        gid = self._new_id()
        self._server_asks[gid] = (link, message.id)
        link.asked[id_key(message.id)] = gid
        if sampled is not None:
            self.sampling.hold(str(gid), sampled, origin=link, request_id=gid)
        token = _progress_token(message.body)
        if token is not None:
            self._server_tokens[token] = link
        self._send(encode({**message.body, "id": gid}), None)

    async def _expired(self, held: Held) -> None:
        """The client never answered a sampling request: both sides are told."""
        gid = held.request_id
        asked = self._server_asks.pop(gid, None) if isinstance(gid, int) else None
        cancel = {"requestId": gid, "reason": "the sampling request timed out"}
        self._send(
            encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}), None
        )
        if asked is None:
            return
        link, upstream_id = asked
        link.asked.pop(id_key(upstream_id), None)
        if link.alive:
            problem = "the client did not answer the sampling request in time"
            await link.conn.send(error_reply(upstream_id, REQUEST_TIMEOUT, problem))

    async def _upstream_notification(self, link: Link, message: Message) -> None:
        params = message.params if isinstance(message.params, Mapping) else {}
        if message.method == "notifications/cancelled":
            gid = link.asked.get(id_key(params.get("requestId")))
            if gid is None:
                return
            await self.sampling.abandon(str(gid), "the server cancelled it")
            body = {**message.body, "params": {**params, "requestId": gid}}
            self._send(encode(body), None)
            return
        if message.method == "notifications/tools/list_changed":
            link.listed = False
        related = None
        if message.method == "notifications/progress":
            related = self._client_tokens.get(str(params.get("progressToken")))
        self._send(message.raw, related)

    async def _upstream_answer(self, link: Link, message: Message) -> None:
        if not isinstance(message.id, int):
            log.warning("interlock mcp-gateway: dropped an answer from %s to no request", link.conn)
            return
        outbound = link.outbound.pop(message.id, None)
        if outbound is None:
            log.warning("interlock mcp-gateway: dropped an answer from %s to no request", link.conn)
            return
        if outbound.waiter is not None:
            if not outbound.waiter.done():
                outbound.waiter.set_result(message.body)
            return
        self._done(outbound.client_id)
        token = _progress_token(outbound.body) if outbound.body is not None else None
        if token is not None:
            self._client_tokens.pop(token, None)
        body = {**message.body, "id": outbound.client_id}
        result = body.get("result")
        if outbound.answer is not None:
            answer = outbound.answer
            if not answer.done():
                if "error" in body:
                    failed = f"the upstream answered an error: {body['error']}"
                    answer.set_exception(Unanswered(failed))
                else:
                    answer.set_result(result)
            if isinstance(result, dict) and result.get("isError"):
                body["result"] = redacted_error(result, self.guard.redactor)
        if outbound.method in INPUT_METHODS and input_required(result):
            body = await self._sampled_input(link, outbound, body, result)
        self._send(encode(body), outbound.client_id)

    async def _sampled_input(
        self, link: Link, outbound: _Outbound, body: dict[str, Any], result: Any
    ) -> dict[str, Any]:
        """A result that asks for input (2026-07-28): its sampling requests judged —
        held under the gateway's keys, or the whole result refused."""
        outcome = await self.sampling.input_required(result, server=link.name, origin=link)
        if outcome is None:
            return body
        if not isinstance(outcome, SamplingRefused):
            return {**body, "result": outcome}
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": outbound.client_id}
        if outbound.method == TOOLS_CALL:
            version = _version_of(outbound.body) or self._protocol_version
            reply["result"] = refusal_result(outcome.decision, outcome.action, version)
        else:
            reply["error"] = outcome.error
        return reply

    async def _settle(self, allowed: Allowed, answer: asyncio.Future[Any]) -> None:
        try:
            await run_settled(self.guard, allowed.decision, lambda: answer, allowed.key)
        except Unanswered:
            pass  # released by run_settled
        except Exception as exc:  # settling must never stop the relay
            log.warning("interlock mcp-gateway: could not settle a call: %s", exc)

    async def upstream_ended(self, link: Link) -> None:
        """``link`` exited: what it never answered is answered with an error (an
        allowed call's reservation released), its tools are gone from the list."""
        link.alive = False
        await self.sampling.abandon_from(link, f"{link.conn} exited")
        for gid, outbound in list(link.outbound.items()):
            if outbound.waiter is not None and not outbound.waiter.done():
                outbound.waiter.set_exception(UpstreamGone(f"{link.conn} exited"))
            if outbound.answer is not None and not outbound.answer.done():
                outbound.answer.set_exception(Unanswered(f"{link.conn} exited"))
            if outbound.client_id is not None:
                self._done(outbound.client_id)
                self._error(outbound.client_id, INTERNAL_ERROR, f"{link.conn} exited")
            link.outbound.pop(gid, None)
        for gid in link.asked.values():
            self._server_asks.pop(gid, None)
        link.asked.clear()
        self._tools = {name: found for name, found in self._tools.items() if found[0] is not link}
        self._prompts = {n: found for n, found in self._prompts.items() if found[0] is not link}
        if self._initialized and any(other.alive for other in self.links):
            changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
            self._send(encode(changed), None)

    async def close(self) -> None:
        """Wait for the reservations being settled; cancel what is left."""
        for task in [*self._tasks, *self._asking.values()]:
            task.cancel()
        await asyncio.gather(*self._asking.values(), return_exceptions=True)
        if self.approvals is not None:
            self.approvals.close()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*self._settling, return_exceptions=True)
        await self.sampling.close()


class _ListingFailed(Exception):
    def __init__(self, message: str, data: Any) -> None:
        super().__init__(message)
        self.data = data


def _bad(message: str) -> dict[str, Any]:
    return {"code": INVALID_PARAMS, "message": message}


def _version_of(body: Mapping[str, Any] | None) -> str | None:
    """The protocol version a client request's own ``_meta`` names."""
    params = body.get("params") if body is not None else None
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, Mapping) else None
    return version if isinstance(version, str) else None


def _progress_token(body: Mapping[str, Any]) -> str | None:
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    token = meta.get("progressToken") if isinstance(meta, Mapping) else None
    return None if token is None else str(token)
