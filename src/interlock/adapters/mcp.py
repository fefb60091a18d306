"""The MCP adapter (the official Python SDK, ``mcp`` 2.x): the guard on both ends of
a ``tools/call``.

Server side, every ``tools/call`` a server receives is judged before the tool runs:

- :class:`InterlockMiddleware` — a server middleware, for
  ``MCPServer(name, middleware=[...])`` or ``server.middleware``;
- :func:`guard_server` / ``guard.attach(server)`` — installs that middleware in place
  (innermost, so it judges exactly what reaches the tool) and also gates the
  server's in-process ``MCPServer.call_tool``, which no middleware sees.

Client side, every ``tools/call`` a ``ClientSession`` sends is judged before it leaves,
and every sampling request a server makes of it is judged as a model call before its
sampling callback runs:

- :func:`guard_session` / ``guard.attach(session)`` — the gate sits on the session's
  ``send_request``, the one method ``call_tool`` (and ``mcp.Client.call_tool``, and a
  hand-built ``send_request(CallToolRequest(...))``) all go through, and on its
  ``dispatch_input_request``, through which every server request reaches the
  session's callbacks (a 2025-11-25 request, and the input requests of a 2026-07-28
  ``input_required`` result alike; see :mod:`interlock.adapters.mcp_sampling`).

A refusal is a ``CallToolResult`` with ``isError: true``: its text is the reason (and
the approval URL), and its ``_meta["interlock/decision"]`` carries the decision id,
the verdict, the rule ids and the approval id, so a program can act on it. A guarded
client may raise the ``Blocked`` error out of ``call_tool`` instead
(``refusal="raise"``). An allowed call's budget reservation is committed when the tool
completes and released when it fails (an ``isError`` result, a request for more
input, or an exception). The SDK is async only; there is no sync entry point to gate.

Example::

    from mcp.server.mcpserver import MCPServer
    from interlock.adapters.mcp import guard_server, guard_session

    server = MCPServer("tools")
    guard_server(server, guard)              # server side: every tools/call judged

    guard_session(session, guard)            # client side: every tools/call judged
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

from pydantic import TypeAdapter, ValidationError

from interlock.adapters.base import (
    Adapter,
    CallKey,
    PatchTarget,
    ToolBinding,
    adecide_starting,
    already_judged,
    arun_settled,
    call_key,
    register_adapter,
    verdict_outcome,
)
from interlock.core.action import Action, Context, normalise_arguments
from interlock.errors import MappingError, describe

try:
    from mcp import ClientSession
    from mcp.server import MCPServer, Server
    from mcp_types import (
        CallToolRequestParams,
        CallToolResult,
        CreateMessageRequest,
        ErrorData,
        InputRequiredResult,
        TextContent,
        Tool,
    )
    from mcp_types.methods import serialize_server_result
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"the MCP adapter needs mcp>=2.0,<3 ({exc}): pip install 'interlock[mcp]'"
    ) from exc

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext
    from mcp.server.context import CallNext, HandlerResult

    from interlock.core.decision import Decision
    from interlock.core.redaction import Redactor
    from interlock.guard import Guard, Mapper

__all__ = [
    "DECISION_META_KEY",
    "UNREADABLE_TOOL",
    "ClientSessionAdapter",
    "InterlockMiddleware",
    "LowLevelServerAdapter",
    "MCPServerAdapter",
    "decision_meta",
    "guard_server",
    "guard_session",
    "mcp_capabilities",
    "redacted_error",
    "refusal_result",
    "run_settled",
    "tool_action",
    "without_dead_link",
]

T = TypeVar("T")
Refusal = Literal["message", "raise"]
#: Finds a tool's definition (schema, description) by name; ``None`` when unknown.
ToolLookup = Callable[[str], Awaitable[Tool | None]]

#: Where a refusal's ``_meta`` carries the decision.
DECISION_META_KEY: Final = "interlock/decision"
#: The name a record gives a ``tools/call`` whose params name no tool it can read.
UNREADABLE_TOOL: Final = "(unreadable tools/call)"


# -- the action and the refusal --------------------------------------------------------


def tool_action(
    name: str,
    arguments: Mapping[str, Any] | None,
    tool: Tool | None = None,
    call_id: str | None = None,
    server: str | None = None,
    context: Context | None = None,
) -> Action:
    """The Action for one ``tools/call``: ``kind: mcp`` (a ``kind: tool`` rule applies
    to it too). ``tool`` (its definition, when known) gives the input schema the
    arguments are projected onto, the description, and the annotation hints
    (:func:`mcp_capabilities`); ``server`` (the upstream's name, as the operator
    configured it, never as the server calls itself) is the target ``mcp:<server>``;
    ``call_id`` (the JSON-RPC request id) is kept for correlation only, not as part
    of the intent. ``context`` is the caller's trusted context when the runtime knows
    it (a gateway session: the tenant and agent of the client's key)."""
    if context is not None:
        trusted = dataclasses.replace(context, call_id=call_id) if call_id else context
    else:
        trusted = Context(call_id=call_id) if call_id else Context()
    return Action(
        kind="mcp",
        name=name,
        arguments=normalise_arguments(arguments),
        target=f"mcp:{server}" if server else None,
        schema=tool.input_schema if tool is not None else None,
        description=tool.description if tool is not None else None,
        capabilities=mcp_capabilities(tool),
        context=trusted,
    )


def mcp_capabilities(tool: Tool | None) -> tuple[str, ...]:
    """A tool's annotation hints as the action's capabilities, with the protocol's
    defaults for a hint left out (and for a tool not known at all): not read-only,
    destructive, not idempotent, open-world. ``mcp:read-only``, ``mcp:destructive``,
    ``mcp:idempotent``, ``mcp:open-world``; rules read them as the parameters
    ``read_only``, ``destructive``, ``idempotent`` and ``open_world``.

    The hints are the server's claims: a rule may refuse on them (``destructive:
    true``) with no risk, but an allow rule that trusts ``read_only: true`` trusts
    the server."""
    hints = tool.annotations if tool is not None else None
    read_only = hints is not None and hints.read_only_hint is True
    destructive = not read_only and (hints is None or hints.destructive_hint is not False)
    idempotent = read_only or (hints is not None and hints.idempotent_hint is True)
    open_world = hints is None or hints.open_world_hint is not False
    flags = (
        ("mcp:read-only", read_only),
        ("mcp:destructive", destructive),
        ("mcp:idempotent", idempotent),
        ("mcp:open-world", open_world),
    )
    return tuple(name for name, on in flags if on)


def decision_meta(decision: Decision) -> dict[str, Any]:
    """What a refusal's ``_meta["interlock/decision"]`` holds: the decision id, the
    verdict, the rule ids, and the approval id and URL when there is an approval."""
    meta: dict[str, Any] = {
        "decision_id": decision.decision_id,
        "verdict": decision.verdict.value,
        "rule_ids": list(decision.rule_ids),
    }
    approval = decision.approval
    if approval is not None and approval.id is not None:
        meta["approval_id"] = approval.id
    if approval is not None and approval.url is not None:
        meta["approval_url"] = approval.url
    return meta


def without_dead_link(decision: Decision) -> Decision:
    """``decision`` without an approval URL that leads nowhere: with no store there is
    no approval record, and the policy's link template would point at ``pending``."""
    approval = decision.approval
    if approval is None or approval.url is None or approval.id is not None:
        return decision
    return decision._replace(approval=dataclasses.replace(approval, url=None))


def refusal_result(
    decision: Decision, action: Action | None = None, protocol_version: str | None = None
) -> dict[str, Any]:
    """The wire form of a refused ``tools/call``: an ``isError`` result whose text is
    the refusal (reason, approval URL, decision id) and whose ``_meta`` carries
    :func:`decision_meta`. Shaped for ``protocol_version`` when it is one the SDK
    knows, exactly as the server's own results are. An approval URL is given only
    where an approval exists (a store recorded it): never a link to ``pending``."""
    decision = without_dead_link(decision)
    text = verdict_outcome(decision, action).message or decision.reason
    if decision.decision_id:
        text = f"{text} (decision {decision.decision_id})"
    result = CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": text}],
            "isError": True,
            "_meta": {DECISION_META_KEY: decision_meta(decision)},
        }
    )
    wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    if protocol_version is None:
        return wire
    try:
        return serialize_server_result("tools/call", protocol_version, wire)
    except (KeyError, ValueError):  # a version the SDK does not know: the plain form
        return wire


# -- judging one call ------------------------------------------------------------------


def _no_tools() -> ToolLookup:
    async def lookup(name: str) -> Tool | None:
        return None

    return lookup


def server_tools(server: MCPServer | Server[Any] | None) -> ToolLookup:
    """Look tools up in a server's own registry: ``MCPServer.list_tools()`` (schema
    and description), or a low-level ``Server``'s ``get_tool_input_schema``."""
    if isinstance(server, MCPServer):
        registry = server

        async def listed(name: str) -> Tool | None:
            return next((t for t in await registry.list_tools() if t.name == name), None)

        return listed
    if isinstance(server, Server) and server.get_tool_input_schema is not None:
        schema_of = server.get_tool_input_schema

        async def declared(name: str) -> Tool | None:
            schema = schema_of(name)
            return None if schema is None else Tool(name=name, input_schema=dict(schema))

        return declared
    return _no_tools()


def listed_tools(tools: Iterable[Tool] | None) -> ToolLookup:
    """Look tools up in a list a client got from ``list_tools()``."""
    by_name = {tool.name: tool for tool in tools or ()}

    async def lookup(name: str) -> Tool | None:
        return by_name.get(name)

    return lookup


@dataclass(frozen=True, slots=True)
class _Gate:
    """Judges one ``tools/call`` (shared by the server and the client side)."""

    guard: Guard
    mapper: Mapper | None
    lookup: ToolLookup
    #: the upstream's name at a gateway (the action's target ``mcp:<server>``)
    server: str | None = None
    #: the caller's trusted context at a gateway (from the client's key)
    context: Context | None = None

    async def decide(
        self, name: str, arguments: dict[str, Any] | None, call_id: str | None = None
    ) -> Decision | None:
        """The decision on the call, or ``None`` when the mapper passes it through."""
        try:
            tool = await self.lookup(name)
        except Exception as exc:  # no schema to project onto: fail closed
            problem = f"could not look up tool {name!r}: {describe(exc)}"
            return await self.unmappable(problem, name)
        if self.mapper is None:
            action = tool_action(name, arguments, tool, call_id, self.server, self.context)
            return await self.guard.acheck(action)
        return await self.guard.acheck_mapped(self.mapper, name, arguments or {}, tool)

    async def unmappable(
        self, problem: str, name: str | None = None, *, routed: bool = True
    ) -> Decision:
        """An undetermined decision, recorded by the guard, for a call it cannot read
        (``name``: the tool's, when the call names one; ``routed``: the call is this
        gate's server's). At a gateway the record is the caller's (the tenant and
        agent of the client's key), never the guard's."""
        if self.context is not None:
            server = self.server if routed else None
            known = tool_action(name or UNREADABLE_TOOL, None, None, None, server, self.context)
            return await self.guard.aunreadable(known, problem)

        def refuse(*_: Any) -> None:
            raise MappingError(problem)

        decision = await self.guard.acheck_mapped(refuse)
        assert decision is not None  # a mapper that raises is undetermined, never None
        return decision


def _call_params(params: Mapping[str, Any] | None) -> CallToolRequestParams | str:
    """The validated ``tools/call`` params, or why they do not validate."""
    try:
        return CallToolRequestParams.model_validate(params or {}, by_name=False)
    except ValidationError as exc:
        return f"the tools/call params are malformed ({exc.error_count()} error(s))"


class _Unfinished(Exception):
    """Carries a result that says the tool did not complete, so that the reservation
    is released instead of committed."""

    def __init__(self, result: object) -> None:
        super().__init__("the tool did not complete")
        self.result = result


def _completed(result: object) -> bool:
    """False for an error result or a request for more input (the call is retried)."""
    if isinstance(result, Mapping):
        return not result.get("isError") and result.get("resultType") != "input_required"
    if isinstance(result, CallToolResult):
        return not result.is_error
    return not isinstance(result, InputRequiredResult)


async def run_settled(
    guard: Guard,
    decision: Decision,
    body: Callable[[], Awaitable[T]],
    call: CallKey,
    *,
    started: bool = False,
) -> T:
    """Run an allowed call: commit its reservation when the tool completed, release it
    when it failed — MCP reports a failed tool as an ``isError`` result, not a raise.
    A failed tool's error text is redacted before it goes on (the model reads it, and
    errors quote what they failed on: a connection string, an argument's value).
    ``started``: the decision's commit carried the ``tool_invoke`` already
    (:func:`~interlock.adapters.base.adecide_starting`)."""

    async def run() -> T:
        result = await body()
        if not _completed(result):
            raise _Unfinished(result)
        return result

    try:
        return await arun_settled(guard, decision, run, call, started=started)
    except _Unfinished as unfinished:
        return cast("T", redacted_error(unfinished.result, guard.redactor))


def redacted_error(result: object, redactor: Redactor) -> object:
    """``result`` with the text of an error result redacted (anything else as it is)."""
    if isinstance(result, CallToolResult):
        if not result.is_error:
            return result
        content = [
            block.model_copy(update={"text": redactor.redact(block.text)})
            if isinstance(block, TextContent)
            else block
            for block in result.content
        ]
        return result.model_copy(update={"content": content})
    if isinstance(result, Mapping) and result.get("isError"):
        blocks = result.get("content")
        if isinstance(blocks, list):
            wire = [
                {**block, "text": redactor.redact(block["text"])}
                if isinstance(block, Mapping) and isinstance(block.get("text"), str)
                else block
                for block in blocks
            ]
            return {**result, "content": wire}
    return result


# -- server side -----------------------------------------------------------------------

#: Guards whose middleware is handling the current tools/call (the call may have been
#: passed through by a mapper): ``MCPServer.call_tool`` underneath is not judged again.
_SERVING: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "interlock_mcp_serving", default=frozenset()
)


@contextlib.contextmanager
def _serving(guard: Guard, serving: bool = True) -> Iterator[None]:
    """Mark (or, with ``serving=False``, unmark) the enclosed code as inside a
    ``tools/call`` the middleware of ``guard`` handles."""
    ids = _SERVING.get()
    token = _SERVING.set(ids | {id(guard)} if serving else ids - {id(guard)})
    try:
        yield
    finally:
        _SERVING.reset(token)


class InterlockMiddleware:
    """A server middleware that judges every ``tools/call`` before the tool runs.

    Any other message passes through untouched. A refused call is answered with
    :func:`refusal_result` (``isError: true``); the tool is never reached. ``server``
    (the ``MCPServer`` or low-level ``Server`` it guards) lets it look the tool up, so
    the arguments are projected onto the tool's input schema and the description
    helps infer the scope; without it the arguments are judged as sent. A
    ``mapper(name, arguments, tool)`` may replace the default action (``None``: not
    ours to judge, the call runs). A call this guard already allowed upstream in the
    same task (an in-process client guarded by the same guard) is not judged again.
    With ``approve_by_elicitation`` (a guard with a store of its own), a call that needs
    approval is first put to the client's user when the client supports form
    elicitation (:mod:`interlock.adapters.mcp_approvals`).

    Put it last in the list: a middleware inside it could rewrite the params after
    the verdict. :func:`guard_server` does that for you.

    Example::

        server = MCPServer("tools")
        server.middleware.append(InterlockMiddleware(guard, server=server))
    """

    __slots__ = ("_gate", "_in_band")

    def __init__(
        self,
        guard: Guard,
        *,
        mapper: Mapper | None = None,
        server: MCPServer | Server[Any] | None = None,
        approve_by_elicitation: bool = False,
    ) -> None:
        from interlock.adapters.mcp_approvals import ServerApprovals

        self._gate = _Gate(guard, mapper, server_tools(server))
        self._in_band = ServerApprovals(guard) if approve_by_elicitation else None

    @property
    def guard(self) -> Guard:
        return self._gate.guard

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        guard = self._gate.guard
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        call = _call_params(ctx.params)
        if not isinstance(call, str) and already_judged(guard, call_key(call.name, call.arguments)):
            return await call_next(ctx)
        with _serving(guard):
            return await self._judge(ctx, call_next, call)

    async def _judge(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, call: Any
    ) -> HandlerResult:
        if isinstance(call, str):  # fail closed rather than trust a laxer handler
            return refusal_result(await self._gate.unmappable(call), None, ctx.protocol_version)
        key = call_key(call.name, call.arguments)
        answered = False
        if self._in_band is not None:
            ctx, answered = await self._in_band.take_answers(ctx, key)
        # an allow's commit carries the tool's tool_invoke: one durable write before it
        decision, started = await adecide_starting(
            self._gate.guard,
            call.name,
            lambda: self._gate.decide(call.name, call.arguments, str(ctx.request_id)),
        )
        action = tool_action(call.name, call.arguments)
        if decision is not None and not decision.allowed and self._in_band and not answered:
            asked = await self._in_band.ask(ctx, key, decision, action)
            if isinstance(asked, dict):
                return asked  # the question, in an input_required result
            if asked in ("approve", "deny"):  # decided: judged again as it now stands
                decision = await self._gate.decide(call.name, call.arguments, str(ctx.request_id))
        if decision is None:
            return await call_next(ctx)
        if not decision.allowed:
            return refusal_result(decision, action, ctx.protocol_version)
        return await run_settled(
            self._gate.guard, decision, lambda: call_next(ctx), key, started=started
        )


@dataclass(frozen=True, slots=True)
class _ServerOptions:
    mapper: Mapper | None
    server: MCPServer | Server[Any]
    approve_by_elicitation: bool = False


@dataclass(frozen=True, slots=True)
class _ClientOptions:
    refusal: Refusal
    mapper: Mapper | None
    tools: tuple[Tool, ...]
    server: str | None = None


class _OptionsAdapter(Adapter):
    """An adapter whose attachments carry options (a mapper, a refusal style), kept
    per object until detach. Attaching again with the same guard and options changes
    nothing; with other options it is refused, like another guard."""

    def __init__(self) -> None:
        super().__init__()
        self._options: dict[int, object] = {}

    def _attach_with(self, obj: Any, guard: Guard, options: object) -> Any:
        if self.is_attached(obj):
            super().attach(obj, guard)  # refuses another guard
            if self._options[id(obj)] != options:
                raise ValueError("this object is attached with other options; detach it first")
            return obj
        self._options[id(obj)] = options
        try:
            return super().attach(obj, guard)
        except BaseException:
            del self._options[id(obj)]
            raise

    def detach(self, obj: Any) -> Any:
        super().detach(obj)
        self._options.pop(id(obj), None)
        return obj


class LowLevelServerAdapter(_OptionsAdapter):
    """Guards a low-level ``mcp.server.Server`` by adding :class:`InterlockMiddleware`
    last to its ``middleware`` list (a new list: detach puts the old one back)."""

    framework = "mcp lowlevel server"
    distribution = "mcp"
    supported = ("2.0", "3")
    extra = "mcp"
    targets = (PatchTarget(Server, "middleware"),)

    def attach(
        self,
        obj: Any,
        guard: Guard,
        *,
        mapper: Mapper | None = None,
        server: MCPServer | Server[Any] | None = None,
        approve_by_elicitation: bool = False,
    ) -> Any:
        """``server`` is whose registry the middleware looks tools up in (``obj``
        itself unless an ``MCPServer`` wraps it)."""
        if approve_by_elicitation:
            from interlock.adapters.mcp_approvals import check_can_approve

            check_can_approve(guard)
        options = _ServerOptions(mapper, server or obj, approve_by_elicitation)
        return self._attach_with(obj, guard, options)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        options = cast("_ServerOptions", self._options[id(obj)])
        middleware = InterlockMiddleware(
            guard,
            mapper=options.mapper,
            server=options.server,
            approve_by_elicitation=options.approve_by_elicitation,
        )
        return [*cast("list[Any]", original), middleware]

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """One binding for every ``tools/call`` the server answers (a low-level server
        has no registry to list): guarded when this guard's middleware is on it."""
        return [
            ToolBinding(
                "tools/call",
                "every tool call this server receives",
                None,
                owner=obj,
                attr="middleware",
                guarded=self.guarded_by(obj, guard),
            )
        ]


class MCPServerAdapter(_OptionsAdapter):
    """Guards an ``MCPServer``: the middleware on its low-level server (every
    transport), and ``MCPServer.call_tool`` itself, the in-process entry point no
    middleware sees (it is judged once when reached through the middleware)."""

    framework = "mcp server"
    distribution = "mcp"
    supported = ("2.0", "3")
    extra = "mcp"
    targets = (PatchTarget(MCPServer, "call_tool"),)

    def attach(
        self,
        obj: Any,
        guard: Guard,
        *,
        mapper: Mapper | None = None,
        approve_by_elicitation: bool = False,
    ) -> Any:
        """Install both gates, or neither."""
        lowlevel = _lowlevel(obj)
        was_attached = LOW_LEVEL.is_attached(lowlevel)
        LOW_LEVEL.attach(
            lowlevel,
            guard,
            mapper=mapper,
            server=obj,
            approve_by_elicitation=approve_by_elicitation,
        )
        try:
            options = _ServerOptions(mapper, obj, approve_by_elicitation)
            return self._attach_with(obj, guard, options)
        except BaseException:
            if not was_attached:
                LOW_LEVEL.detach(lowlevel)
            raise

    def detach(self, obj: Any) -> Any:
        if self.is_attached(obj):
            LOW_LEVEL.detach(_lowlevel(obj))
        return super().detach(obj)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        options = cast("_ServerOptions", self._options[id(obj)])
        gate = _Gate(guard, options.mapper, server_tools(obj))

        async def call_tool(name: str, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            key = call_key(name, arguments)
            if already_judged(guard, key):
                return await original(name, arguments, *args, **kwargs)
            if id(guard) in _SERVING.get():  # the call the middleware passed through:
                with _serving(guard, False):  # a call made inside its tool is a new one
                    return await original(name, arguments, *args, **kwargs)
            decision = await gate.decide(name, arguments)
            if decision is None:
                return await original(name, arguments, *args, **kwargs)
            if not decision.allowed:
                wire = refusal_result(decision, tool_action(name, arguments))
                return CallToolResult.model_validate(wire, by_name=False)
            return await run_settled(
                guard, decision, lambda: original(name, arguments, *args, **kwargs), key
            )

        return call_tool

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """The tools registered on the server (its tool manager), guarded when both
        gates — the low-level middleware and ``call_tool`` — hold ``guard``; then its
        resources, resource templates and prompts, which no gate here judges (only
        ``tools/call`` passes it)."""
        guarded = self.guarded_by(obj, guard) and LOW_LEVEL.guarded_by(_lowlevel(obj), guard)
        manager = getattr(obj, "_tool_manager", None)
        listed = manager.list_tools() if manager is not None else []
        tools = [
            ToolBinding(
                str(tool.name),
                getattr(tool, "description", None) or None,
                dict(getattr(tool, "parameters", None) or {}) or None,
                getattr(tool, "fn", None),
                owner=obj,
                attr="call_tool",
                guarded=guarded,
            )
            for tool in listed
        ]
        return tools + _unjudged_reads(obj)


def _unjudged_reads(server: MCPServer) -> list[ToolBinding]:
    """A binding, not guarded, for each resource, resource template and prompt the
    server registers: ``resources/read`` and ``prompts/get`` run their functions
    without passing the gate."""
    resources = getattr(server, "_resource_manager", None)
    prompts = getattr(server, "_prompt_manager", None)
    found: list[tuple[str, Any]] = []
    with contextlib.suppress(Exception):  # a manager we cannot read: nothing to name
        if resources is not None:
            found += [(f"resource:{r.uri}", r) for r in resources.list_resources()]
            found += [(f"resource:{t.uri_template}", t) for t in resources.list_templates()]
        if prompts is not None:
            found += [(f"prompt:{p.name}", p) for p in prompts.list_prompts()]
    return [
        ToolBinding(
            name,
            getattr(item, "description", None) or None,
            None,
            getattr(item, "fn", None),
            owner=server,
            guarded=False,
            note="resources/read and prompts/get are not judged: only tools/call is",
        )
        for name, item in found
    ]


def _lowlevel(server: MCPServer) -> Server[Any]:
    # MCPServer exposes its chain only as a read-only property over this list (the
    # SDK's own in-memory transport reaches the low-level server the same way).
    return server._lowlevel_server


# -- client side -----------------------------------------------------------------------


def _sent_call(request: Any) -> CallToolRequestParams | str:
    """The params of an outgoing ``tools/call``, as the wire will carry them."""
    try:
        wire = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    except Exception as exc:
        return f"the tools/call request cannot be serialised: {describe(exc)}"
    return _call_params(wire.get("params"))


def _as_result(result_type: Any, wire: dict[str, Any]) -> Any:
    """The refusal parsed as the caller asked ``send_request`` to parse the reply."""
    if isinstance(result_type, TypeAdapter):
        return result_type.validate_python(wire, by_name=False)
    return result_type.model_validate(wire, by_name=False)


class ClientSessionAdapter(_OptionsAdapter):
    """Guards a ``ClientSession`` at ``send_request``: ``call_tool`` sends through it,
    and so does anyone building a ``CallToolRequest`` by hand, so no public path
    skips the gate. Other requests pass through untouched. And at
    ``dispatch_input_request``: a server's sampling request is judged as a model call
    before the session's sampling callback runs (the server's other requests pass)."""

    framework = "mcp client"
    distribution = "mcp"
    supported = ("2.0", "3")
    extra = "mcp"
    targets = (
        PatchTarget(ClientSession, "send_request"),
        PatchTarget(ClientSession, "dispatch_input_request"),
    )

    def attach(
        self,
        obj: Any,
        guard: Guard,
        *,
        refusal: Refusal = "message",
        mapper: Mapper | None = None,
        tools: Iterable[Tool] | None = None,
        server: str | None = None,
    ) -> Any:
        if refusal not in ("message", "raise"):
            raise ValueError(f"refusal must be 'message' or 'raise', not {refusal!r}")
        options = _ClientOptions(refusal, mapper, tuple(tools or ()), server)
        return self._attach_with(obj, guard, options)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        options = cast("_ClientOptions", self._options[id(obj)])
        if target.attr == "dispatch_input_request":
            return _gated_input(guard, original, options.server)
        gate = _Gate(guard, options.mapper, listed_tools(options.tools))
        session: ClientSession = obj

        async def send_request(request: Any, result_type: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(request, "method", None) != "tools/call":
                return await original(request, result_type, *args, **kwargs)
            call = _sent_call(request)
            key = None if isinstance(call, str) else call_key(call.name, call.arguments)
            if key is not None and already_judged(guard, key):
                return await original(request, result_type, *args, **kwargs)
            if isinstance(call, str):
                decision: Decision | None = await gate.unmappable(call)
                action = None
            else:
                decision = await gate.decide(call.name, call.arguments)
                action = tool_action(call.name, call.arguments)
            if decision is None:
                return await original(request, result_type, *args, **kwargs)
            if not decision.allowed:
                outcome = verdict_outcome(decision, action)
                if options.refusal == "raise" and outcome.error is not None:
                    raise outcome.error
                wire = refusal_result(decision, action, session.protocol_version)
                return _as_result(result_type, wire)
            assert key is not None  # an unmappable call is never allowed
            return await run_settled(
                guard, decision, lambda: original(request, result_type, *args, **kwargs), key
            )

        return send_request

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """One binding for every ``tools/call`` the session sends (the tools live on
        the server): guarded when ``send_request`` holds this guard's gate."""
        return [
            ToolBinding(
                "tools/call",
                "every tool call this session sends",
                None,
                owner=obj,
                attr="send_request",
                guarded=self.guarded_by(obj, guard),
            )
        ]


def _gated_input(guard: Guard, original: Callable[..., Any], server: str | None) -> Any:
    """``dispatch_input_request`` with a server's sampling request judged first: a
    refusal is the ``-1`` error a client rejecting it answers (the callback never
    runs); an allowed one's reservation is committed from the callback's answer and
    released when it answers an error, raises or is cancelled."""
    from interlock.adapters.mcp_sampling import Sampled, judge_sampling, rejection

    async def dispatch_input_request(ctx: Any, request: Any) -> Any:
        if not isinstance(request, CreateMessageRequest):
            return await original(ctx, request)
        params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
        call_id = str(getattr(ctx, "request_id", "") or "") or None
        verdict = await judge_sampling(guard, params, server=server, call_id=call_id)
        if not isinstance(verdict, Sampled):
            error = rejection(*verdict)
            return ErrorData(code=error["code"], message=error["message"], data=error["data"])
        try:
            result = await original(ctx, request)
        except BaseException as exc:
            await verdict.release(f"the sampling callback raised {describe(exc)}")
            raise
        if isinstance(result, ErrorData):
            await verdict.release(f"the sampling callback answered an error: {result.message}")
            return result
        await verdict.commit(result.model_dump(by_alias=True, mode="json", exclude_none=True))
        return result

    return dispatch_input_request


LOW_LEVEL = register_adapter(LowLevelServerAdapter())
SERVER = register_adapter(MCPServerAdapter())
CLIENT = register_adapter(ClientSessionAdapter())


def guard_server(
    server: MCPServer | Server[Any],
    guard: Guard,
    *,
    mapper: Mapper | None = None,
    approve_by_elicitation: bool = False,
) -> Any:
    """Judge every ``tools/call`` ``server`` receives, on every transport, and (for an
    ``MCPServer``) every in-process ``server.call_tool``. In place; returns ``server``.
    ``guard.detach(server)`` restores exactly what was there.

    ``approve_by_elicitation=True`` puts a call that needs approval to the client's
    user first, when the client supports form elicitation: their answer decides the
    approval (:mod:`interlock.adapters.mcp_approvals` — it makes whoever answers the
    client's prompts an approver). Needs a guard with a store, not a remote one
    (ValueError)."""
    if isinstance(server, MCPServer):
        return SERVER.attach(
            server, guard, mapper=mapper, approve_by_elicitation=approve_by_elicitation
        )
    return LOW_LEVEL.attach(
        server, guard, mapper=mapper, approve_by_elicitation=approve_by_elicitation
    )


def guard_session(
    session: ClientSession,
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    tools: Iterable[Tool] | None = None,
    server: str | None = None,
) -> ClientSession:
    """Judge every ``tools/call`` ``session`` sends, and every sampling request the
    server makes of it (an ``llm`` action named ``mcp-sampling``; see
    :mod:`interlock.adapters.mcp_sampling`). A refused call comes back as the
    ``isError`` result a server would send (``refusal="message"``), or raises
    ``ActionDenied`` / ``ApprovalRequired`` / ``ActionUndetermined`` out of
    ``call_tool`` (``refusal="raise"``); a refused sampling request never reaches the
    sampling callback, and the server gets error ``-1``. ``tools`` (from
    ``session.list_tools()``) gives each tool's input schema and description to
    judge against; ``server`` names the server for the policy (the sampling action's
    target ``mcp:<server>``: your name for it, never the one it gives itself). In
    place; ``guard.detach(session)`` restores exactly what was there."""
    return cast(
        "ClientSession",
        CLIENT.attach(session, guard, refusal=refusal, mapper=mapper, tools=tools, server=server),
    )
