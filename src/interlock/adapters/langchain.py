"""The LangChain / LangGraph adapter.

Three ways in, from the framework's own hook outward:

- :class:`InterlockMiddleware` — an ``AgentMiddleware`` for
  ``langchain.agents.create_agent``: every tool call the agent makes is judged in
  ``wrap_tool_call`` / ``awrap_tool_call`` before the tool runs.
- :func:`guarded_tool_node` — the same gate for a plain LangGraph ``ToolNode``.
- :func:`guard_tool` / :class:`LangChainAdapter` — a tool judged wherever it is called
  from, including direct ``tool.invoke()``, which skips the middleware. The gate sits on
  ``BaseTool.run`` / ``arun``, the two methods every public entry point funnels through
  (invoke, batch and stream go to ``run``; their async twins to ``arun``).

A refusal in the middleware is a ``ToolMessage(status="error")`` the model reads
(``refusal="message"``, the default) or the ``Blocked`` error raised out of
``agent.invoke`` (``refusal="raise"``). A guarded tool always raises. In every case the
tool body never runs on anything but allow.

Example::

    from langchain.agents import create_agent
    from interlock.adapters.langchain import InterlockMiddleware

    agent = create_agent(model, tools, middleware=[InterlockMiddleware(guard)])
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from interlock.adapters.base import (
    Adapter,
    PatchTarget,
    already_judged,
    arun_settled,
    register_adapter,
    run_settled,
    verdict_outcome,
)
from interlock.core.action import Action, Context
from interlock.core.decision import Decision

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt import ToolNode
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"the LangChain adapter needs langchain, langchain-core and langgraph ({exc}): "
        "pip install 'interlock[langchain]'"
    ) from exc

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

    from interlock.guard import Guard, Mapper

__all__ = [
    "InterlockMiddleware",
    "LangChainAdapter",
    "guard_tool",
    "guarded_tool_node",
    "tool_action",
]

Refusal = Literal["message", "raise"]


def tool_schema(tool: BaseTool | None) -> dict[str, Any] | None:
    """The JSON schema of what the model may pass the tool (injected args excluded)."""
    if tool is None:
        return None
    try:
        schema = tool.tool_call_schema
        if isinstance(schema, Mapping):
            return dict(schema)
        render: Callable[[], Mapping[str, Any]] = getattr(
            schema, "model_json_schema", schema.schema
        )
        return dict(render())
    except Exception:  # a schema we cannot render: judge on the arguments alone
        return None


def tool_action(
    name: str, arguments: Any, tool: BaseTool | None = None, call_id: str | None = None
) -> Action:
    """The Action for one LangChain tool call. ``call_id`` (the model's tool call id)
    is kept in the context for correlation only: it is not part of the intent."""
    return Action.tool(
        name,
        arguments,
        schema=tool_schema(tool),
        description=tool.description if tool is not None else None,
        context=Context(call_id=call_id) if call_id else Context(),
    )


class _Gate:
    """Judges one tool call and runs it only on allow (shared by every entry point)."""

    def __init__(self, guard: Guard, mapper: Mapper | None) -> None:
        self.guard = guard
        self.mapper = mapper

    def decide(
        self, name: str, arguments: Any, tool: BaseTool | None, call_id: str | None = None
    ) -> Decision | None:
        if self.mapper is None:
            return self.guard.check(tool_action(name, arguments, tool, call_id))
        return self.guard.check_mapped(self.mapper, name, arguments, tool)

    async def adecide(
        self, name: str, arguments: Any, tool: BaseTool | None, call_id: str | None = None
    ) -> Decision | None:
        if self.mapper is None:
            return await self.guard.acheck(tool_action(name, arguments, tool, call_id))
        return await self.guard.acheck_mapped(self.mapper, name, arguments, tool)


class InterlockMiddleware(AgentMiddleware):
    """Judge every tool call of a ``create_agent`` agent before the tool runs.

    ``refusal="message"`` answers a refused call with an error ``ToolMessage`` carrying
    the reason (and the approval URL), so the model reads it and the loop goes on;
    ``refusal="raise"`` raises ``ActionDenied`` / ``ApprovalRequired`` /
    ``ActionUndetermined`` out of ``agent.invoke``. A ``mapper(name, args, tool)``
    may replace the default action (``None``: not ours to judge, the call runs).
    """

    def __init__(
        self, guard: Guard, *, refusal: Refusal = "message", mapper: Mapper | None = None
    ) -> None:
        super().__init__()
        if refusal not in ("message", "raise"):
            raise ValueError(f"refusal must be 'message' or 'raise', not {refusal!r}")
        self.guard = guard
        self.refusal = refusal
        self._gate = _Gate(guard, mapper)

    @property
    def name(self) -> str:
        return "InterlockMiddleware"

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        decision = self._gate.decide(call["name"], call.get("args"), request.tool, call.get("id"))
        if decision is None:
            return handler(request)
        if not decision.allowed:
            return self._refuse(request, decision)
        return run_settled(self.guard, decision, lambda: handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        call = request.tool_call
        decision = await self._gate.adecide(
            call["name"], call.get("args"), request.tool, call.get("id")
        )
        if decision is None:
            return await handler(request)
        if not decision.allowed:
            return self._refuse(request, decision)
        return await arun_settled(self.guard, decision, lambda: handler(request))

    def _refuse(self, request: ToolCallRequest, decision: Decision) -> ToolMessage:
        call = request.tool_call
        outcome = verdict_outcome(decision, Action.tool(call["name"], call.get("args")))
        if self.refusal == "raise" and outcome.error is not None:
            raise outcome.error
        return ToolMessage(
            content=outcome.message or decision.reason,
            tool_call_id=call.get("id") or "",
            name=call["name"],
            status="error",
        )


def guarded_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    **options: Any,
) -> ToolNode:
    """A LangGraph ``ToolNode`` whose every tool call is judged first (sync and async),
    with the same refusal styles as :class:`InterlockMiddleware`."""
    middleware = InterlockMiddleware(guard, refusal=refusal, mapper=mapper)
    return ToolNode(
        tools,
        wrap_tool_call=middleware.wrap_tool_call,
        awrap_tool_call=middleware.awrap_tool_call,
        **options,
    )


class LangChainAdapter(Adapter):
    """Guards a ``BaseTool`` in place at ``run`` / ``arun`` (no framework hook reaches a
    direct ``tool.invoke()``, so this is the one patch; it is per instance)."""

    framework = "langchain"
    distribution = "langchain-core"
    supported = ("1.0", "2")
    extra = "langchain"
    targets = (PatchTarget(BaseTool, "run"), PatchTarget(BaseTool, "arun"))

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        tool: BaseTool = obj
        gate = _Gate(guard, None)
        if target.attr == "arun":

            async def arun(tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
                if already_judged(guard):
                    return await original(tool_input, *args, **kwargs)
                decision = await gate.adecide(tool.name, tool_input, tool)
                if decision is None:
                    return await original(tool_input, *args, **kwargs)
                _raise_unless_allowed(decision, tool, tool_input)
                return await arun_settled(
                    guard, decision, lambda: original(tool_input, *args, **kwargs)
                )

            return arun

        def run(tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if already_judged(guard):
                return original(tool_input, *args, **kwargs)
            decision = gate.decide(tool.name, tool_input, tool)
            if decision is None:
                return original(tool_input, *args, **kwargs)
            _raise_unless_allowed(decision, tool, tool_input)
            return run_settled(guard, decision, lambda: original(tool_input, *args, **kwargs))

        return run


def _raise_unless_allowed(decision: Decision, tool: BaseTool, tool_input: Any) -> None:
    outcome = verdict_outcome(decision, Action.tool(tool.name, tool_input))
    if outcome.error is not None:
        raise outcome.error


ADAPTER = register_adapter(LangChainAdapter())


def guard_tool(tool: BaseTool, guard: Guard) -> BaseTool:
    """A guarded copy of ``tool`` (name, description and args schema kept): every entry
    point — invoke, ainvoke, run, arun, batch, abatch, stream, astream — is judged and
    raises the ``Blocked`` error on anything but allow. ``tool`` itself is untouched."""
    copy = tool.model_copy()
    for target in ADAPTER.targets:  # a copy of an attached tool drops its replacements
        vars(copy).pop(target.attr, None)
    return ADAPTER.attach(copy, guard)  # type: ignore[no-any-return]
