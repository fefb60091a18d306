"""Judging a ``tools/call`` at the gateway, exactly as the in-process adapter does.

The action is :func:`interlock.adapters.mcp.tool_action` (through the adapter's own
gate), and a refusal is :func:`interlock.adapters.mcp.refusal_result`, so one policy
gives the same verdict and the same refusal in-process and here. The tool's input
schema and description, which that action is built with, come from the upstream's
own ``tools/list`` answers as they pass through (:class:`ToolCatalog`); a tool not
listed yet is judged on its arguments as sent, like a guarded client without a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from interlock.adapters.mcp import (
    _call_params,
    _Gate,
    refusal_result,
    tool_action,
)
from interlock.gateways.mcp.messages import (
    INVALID_PARAMS,
    Message,
    error_reply,
    result_reply,
)

try:
    from mcp_types import Tool
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"the MCP gateway needs mcp>=2.0,<3 ({exc}): pip install 'interlock[mcp]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.adapters.base import CallKey
    from interlock.core.action import Context
    from interlock.core.decision import Decision
    from interlock.guard import Guard

__all__ = ["PROTOCOL_VERSION_META", "Allowed", "Refused", "ToolCallGate", "ToolCatalog"]

#: Where a request of the 2026-07-28 generation carries its protocol version.
PROTOCOL_VERSION_META: Final = "io.modelcontextprotocol/protocolVersion"
#: How much of an unreadable call's tool name its record keeps.
_MAX_NAME_SHOWN: Final = 200


class ToolCatalog:
    """The upstream's tools by name, learnt from the ``tools/list`` results relayed to
    the client (every page; a later listing replaces an earlier entry)."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def learn(self, result: Any) -> None:
        tools = result.get("tools") if isinstance(result, Mapping) else None
        for item in tools if isinstance(tools, list) else ():
            try:
                tool = Tool.model_validate(item, by_name=False)
            except ValidationError:
                continue  # a tool the SDK cannot read: judged on its arguments as sent
            self._tools[tool.name] = tool

    async def lookup(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)


@dataclass(frozen=True, slots=True)
class Allowed:
    """Forward the call; settle ``decision`` when its response comes back."""

    decision: Decision
    key: CallKey


@dataclass(frozen=True, slots=True)
class Refused:
    """Answer the client with ``reply``; the upstream never sees the call."""

    reply: bytes
    decision: Decision


def protocol_version_of(message: Message, negotiated: str | None) -> str | None:
    """The protocol version a reply to ``message`` is shaped for: the request's own
    ``_meta`` (the per-request generation), else the one ``initialize`` agreed."""
    params = message.params
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, Mapping) else None
    return version if isinstance(version, str) else negotiated


class ToolCallGate:
    """Judges the ``tools/call`` requests a client sends through the gateway to one
    upstream (``server``: its name, a fact the policy can match; ``None`` for the
    single unnamed upstream). ``context`` is the caller's trusted context when the
    transport knows who the client is (the HTTP gateway: the tenant and agent of the
    client's key); ``None`` leaves the guard's own."""

    __slots__ = ("_gate", "catalog", "context", "guard", "server")

    def __init__(
        self,
        guard: Guard,
        catalog: ToolCatalog | None = None,
        server: str | None = None,
        context: Context | None = None,
    ) -> None:
        self.guard = guard
        self.catalog = catalog or ToolCatalog()
        self.server = server
        self.context = context
        self._gate = _Gate(guard, None, self.catalog.lookup, server, context)

    async def judge(self, message: Message, protocol_version: str | None) -> Allowed | Refused:
        """The verdict on one ``tools/call`` request: forward it, or the reply that
        refuses it (an ``isError`` result, or ``-32602`` for malformed params)."""
        version = protocol_version_of(message, protocol_version)
        return await self.judge_params(message.id, message.params, version)

    async def judge_params(
        self,
        request_id: Any,
        params: Any,
        protocol_version: str | None,
        *,
        shown_as: str | None = None,
    ) -> Allowed | Refused:
        """The verdict on a ``tools/call`` with these params (the tool's name as the
        upstream knows it); a refusal answers ``request_id`` and names the tool
        ``shown_as`` (the name the client called, when the gateway renamed it)."""
        from interlock.adapters.base import call_key

        call = _call_params(params if isinstance(params, Mapping) else None)
        if isinstance(call, str) or not isinstance(params, Mapping):
            problem = call if isinstance(call, str) else "the tools/call params are not an object"
            named = params.get("name") if isinstance(params, Mapping) else None
            return await self.malformed(request_id, problem, named)
        judged = await self._gate.decide(call.name, call.arguments, str(request_id))
        assert judged is not None  # only a mapper passes a call through; none here
        decision = judged
        if decision.allowed:
            return Allowed(decision, call_key(call.name, call.arguments))
        action = tool_action(shown_as or call.name, call.arguments)
        wire = refusal_result(decision, action, protocol_version)
        return Refused(result_reply(request_id, wire), decision)

    def never_allowed(self, name: str) -> bool:
        """The policy refuses every call of this tool by the guard's caller, whatever
        its arguments (see :func:`interlock.policy.reach.never_allowed`): its server
        and its annotations, as listed, are tested; nothing is certain without a
        local policy (a remote guard), so nothing is."""
        from interlock.adapters.mcp import mcp_capabilities
        from interlock.policy.extract import mcp_params
        from interlock.policy.reach import never_allowed

        policy = self.guard.policy
        context = (
            self.context.merged_over(self.guard.context) if self.context else self.guard.context
        )
        if policy is None:
            return False
        target = f"mcp:{self.server}" if self.server else None
        known = mcp_params(target, mcp_capabilities(self.catalog.get(name)))
        if target is not None:
            known["target"] = target
        return never_allowed(policy, "mcp", name, context.tenant, context.agent, known)

    async def malformed(
        self, request_id: Any, problem: str, name: Any = None, *, routed: bool = True
    ) -> Refused:
        """``-32602`` for a call that cannot be read, recorded as undetermined — as
        the caller's (``context``), naming the tool it names (``name``, when text)
        and this upstream, unless the call is no upstream's (``routed=False``)."""
        named = name[:_MAX_NAME_SHOWN] if isinstance(name, str) and name else None
        decision = await self._gate.unmappable(problem, named, routed=routed)
        data = {"decision_id": decision.decision_id} if decision.decision_id else None
        return Refused(error_reply(request_id, INVALID_PARAMS, problem, data), decision)
