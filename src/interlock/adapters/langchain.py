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

The middleware also gates model calls (``wrap_model_call``) when the guard has a store:
each call is checked as an ``llm`` action and reserved on the policy's budgets before
the model runs, and committed from the response's ``usage_metadata`` after. A call
awaiting approval can be refused (default), waited for in place
(``on_approval="wait"``), or turned into a LangGraph ``interrupt`` the graph resumes
from once a human has decided (``on_approval="interrupt"``).

Example::

    from langchain.agents import create_agent
    from interlock.adapters.langchain import InterlockMiddleware

    agent = create_agent(model, tools, middleware=[InterlockMiddleware(guard)])
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from interlock.adapters.base import (
    Adapter,
    PatchTarget,
    ToolBinding,
    already_judged,
    arun_settled,
    call_key,
    pending_approval,
    register_adapter,
    run_settled,
    verdict_outcome,
)
from interlock.core.action import Action, Context
from interlock.core.decision import Decision
from interlock.errors import Blocked
from interlock.ledger.usage import Usage

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.prebuilt import ToolNode
    from langgraph.pregel import Pregel
    from langgraph.types import interrupt
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
    "GraphAdapter",
    "InterlockMiddleware",
    "LangChainAdapter",
    "ToolNodeAdapter",
    "guard_tool",
    "guarded_tool_node",
    "tool_action",
]

Refusal = Literal["message", "raise"]
OnApproval = Literal["refuse", "wait", "interrupt"]
Estimator = Callable[[ModelRequest[Any]], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN = 4


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
    """Judge every tool call (and, with a store, every model call) of a
    ``create_agent`` agent before it runs.

    ``refusal="message"`` answers a refused tool call with an error ``ToolMessage``
    carrying the reason (and the approval URL), so the model reads it and the loop goes
    on; ``refusal="raise"`` raises ``ActionDenied`` / ``ApprovalRequired`` /
    ``ActionUndetermined`` out of ``agent.invoke``. A ``mapper(name, args, tool)``
    may replace the default action (``None``: not ours to judge, the call runs).

    ``on_approval`` says what a tool call that needs a human does: ``"refuse"`` (the
    refusal above, with the approval to decide), ``"wait"`` (block until the approval
    is decided or ``approval_timeout`` seconds pass, then check the identical call
    again, which claims the grant once), or ``"interrupt"`` (a LangGraph ``interrupt``
    carrying the approval; resume the graph after a human decides — the call is
    checked again then, so the resume value is never trusted as an approval). The two
    last need a guard with a store; ``"interrupt"`` needs a graph with a checkpointer.

    ``models`` gates model calls: ``None`` (default) does so when the guard has a
    store, so budgets see every call. ``estimate`` gives the reservation for a
    request (default: the prompt's characters / 4 as input tokens and the model's
    ``max_tokens`` as output tokens); the real ``usage_metadata`` is committed after.
    """

    def __new__(cls, guard: Guard, *args: Any, models: bool | None = None, **kwargs: Any) -> Any:
        # ``create_agent`` adds a model-call layer for every middleware whose class
        # overrides ``wrap_model_call`` — a few hundred µs per turn even when it only
        # passes through. A middleware that does not gate models is made of a subclass
        # without the override, so it costs nothing there.
        gated = guard.store is not None if models is None else models
        made = _ToolCallsOnly if cls is InterlockMiddleware and not gated else cls
        return super().__new__(made)

    def __init__(
        self,
        guard: Guard,
        *,
        refusal: Refusal = "message",
        mapper: Mapper | None = None,
        on_approval: OnApproval = "refuse",
        approval_timeout: float = 300.0,
        models: bool | None = None,
        estimate: Estimator | None = None,
    ) -> None:
        super().__init__()
        if refusal not in ("message", "raise"):
            raise ValueError(f"refusal must be 'message' or 'raise', not {refusal!r}")
        if on_approval not in ("refuse", "wait", "interrupt"):
            raise ValueError(
                f"on_approval must be 'refuse', 'wait' or 'interrupt', not {on_approval!r}"
            )
        if on_approval != "refuse" and guard.store is None:
            raise ValueError(
                f"on_approval={on_approval!r} needs a guard with a store, where approvals live"
            )
        self.guard = guard
        self.refusal = refusal
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self.models = guard.store is not None if models is None else models
        self.estimate = estimate or estimate_usage
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

        def decide() -> Decision | None:  # again after an approval is decided
            return self._gate.decide(call["name"], call.get("args"), request.tool, call.get("id"))

        decision = decide()
        if decision is None:
            return handler(request)
        if self._awaits_human(decision):
            decision = self._after_approval(decision, decide)
        if not decision.allowed:
            return self._refuse(request, decision)
        key = call_key(call["name"], call.get("args"))
        return run_settled(self.guard, decision, lambda: handler(request), key)

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
        if self._awaits_human(decision):
            decision = await self._aafter_approval(
                decision,
                lambda: self._gate.adecide(
                    call["name"], call.get("args"), request.tool, call.get("id")
                ),
            )
        if not decision.allowed:
            return self._refuse(request, decision)
        key = call_key(call["name"], call.get("args"))
        return await arun_settled(self.guard, decision, lambda: handler(request), key)

    # -- approvals: refuse, wait, or interrupt the graph --------------------------------

    def _awaits_human(self, decision: Decision) -> bool:
        return self.on_approval != "refuse" and pending_approval(decision) is not None

    def _after_approval(
        self, decision: Decision, decide: Callable[[], Decision | None]
    ) -> Decision:
        approval_id = decision.approval.id if decision.approval else None
        assert approval_id is not None  # _awaits_human checked it
        if self.on_approval == "interrupt":
            interrupt(approval_payload(decision))
        else:
            self.guard.wait_for_approval(approval_id, self.approval_timeout)
        return decide() or decision

    async def _aafter_approval(
        self, decision: Decision, decide: Callable[[], Awaitable[Decision | None]]
    ) -> Decision:
        approval_id = decision.approval.id if decision.approval else None
        assert approval_id is not None  # _awaits_human checked it
        if self.on_approval == "interrupt":
            interrupt(approval_payload(decision))
        else:
            await self.guard.await_approval(approval_id, self.approval_timeout)
        return await decide() or decision

    # -- model calls: checked and reserved before, committed from real usage after ------

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        if not self.models:
            return handler(request)
        call = self.guard.llm_call(model_name(request.model), estimate=self.estimate(request))
        try:
            call.__enter__()
        except Blocked as exc:
            return self._refuse_model(exc)
        try:
            response = handler(request)
        except BaseException as exc:
            call.__exit__(type(exc), exc, exc.__traceback__)
            raise
        _record_usage(call, response)
        call.__exit__(None, None, None)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        if not self.models:
            return await handler(request)
        call = self.guard.llm_call(model_name(request.model), estimate=self.estimate(request))
        try:
            await call.__aenter__()
        except Blocked as exc:
            return self._refuse_model(exc)
        try:
            response = await handler(request)
        except BaseException as exc:
            await call.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        _record_usage(call, response)
        await call.__aexit__(None, None, None)
        return response

    def _refuse_model(self, error: Blocked) -> AIMessage:
        """A refused model call ends the loop with an answer that says why (message
        style), or raises (raise style)."""
        if self.refusal == "raise":
            raise error
        return AIMessage(content=str(error))

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


class _ToolCallsOnly(InterlockMiddleware):
    """An :class:`InterlockMiddleware` that does not gate model calls (see ``__new__``)."""

    wrap_model_call = AgentMiddleware.wrap_model_call
    awrap_model_call = AgentMiddleware.awrap_model_call


def approval_payload(decision: Decision) -> dict[str, Any]:
    """What a LangGraph ``interrupt`` carries for a call awaiting approval."""
    approval = decision.approval
    return {
        "interlock": "approval_required",
        "approval_id": approval.id if approval else None,
        "approval_url": approval.url if approval else None,
        "reason": decision.reason,
        "rule_ids": list(decision.rule_ids),
        "decision_id": decision.decision_id,
    }


def model_name(model: BaseChatModel) -> str:
    """The model's name as pricing knows it (``model_name`` or ``model``), else its
    class name."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def estimate_usage(request: ModelRequest[Any]) -> Usage:
    """A reservation for one model request: the prompt's characters / 4 as input
    tokens, the model's ``max_tokens`` (when it sets one) as output tokens."""
    chars = sum(len(str(m.content)) for m in request.messages)
    if request.system_message is not None:
        chars += len(str(request.system_message.content))
    ceiling = getattr(request.model, "max_tokens", None)
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(chars / CHARS_PER_TOKEN), max(output, 0))


def response_usage(response: object) -> Usage | None:
    """The summed ``usage_metadata`` of the AI messages in a model response, or
    ``None`` when the model reported none."""
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    messages: list[BaseMessage]
    if isinstance(response, ModelResponse):
        messages = list(response.result)
    elif isinstance(response, AIMessage):
        messages = [response]
    else:
        return None
    total: Usage | None = None
    for message in messages:
        metadata = getattr(message, "usage_metadata", None)
        if not metadata:
            continue
        usage = Usage.of(metadata)
        total = (
            usage
            if total is None
            else Usage(
                total.input_tokens + usage.input_tokens, total.output_tokens + usage.output_tokens
            )
        )
    return total


def _record_usage(call: Any, response: object) -> None:
    usage = response_usage(response)
    if usage is not None:
        call.record(usage)


def guarded_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    **options: Any,
) -> ToolNode:
    """A LangGraph ``ToolNode`` whose every tool call is judged first (sync and async),
    with the same refusal and approval styles as :class:`InterlockMiddleware`."""
    middleware = InterlockMiddleware(
        guard,
        refusal=refusal,
        mapper=mapper,
        on_approval=on_approval,
        approval_timeout=approval_timeout,
        models=False,
    )
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
                key = call_key(tool.name, tool_input)
                if already_judged(guard, key):
                    return await original(tool_input, *args, **kwargs)
                decision = await gate.adecide(tool.name, tool_input, tool)
                if decision is None:
                    return await original(tool_input, *args, **kwargs)
                _raise_unless_allowed(decision, tool, tool_input)
                return await arun_settled(
                    guard, decision, lambda: original(tool_input, *args, **kwargs), key
                )

            return arun

        def run(tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            key = call_key(tool.name, tool_input)
            if already_judged(guard, key):
                return original(tool_input, *args, **kwargs)
            decision = gate.decide(tool.name, tool_input, tool)
            if decision is None:
                return original(tool_input, *args, **kwargs)
            _raise_unless_allowed(decision, tool, tool_input)
            return run_settled(guard, decision, lambda: original(tool_input, *args, **kwargs), key)

        return run

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [tool_binding(obj, self.guarded_by(obj, guard), owner=obj, attr="run")]


def tool_binding(tool: BaseTool, guarded: bool, **where: Any) -> ToolBinding:
    """How the guard sees one LangChain tool (its body, its call schema)."""
    body = getattr(tool, "func", None) or getattr(tool, "coroutine", None) or tool._run
    schema: dict[str, Any] | None = None
    try:
        schema_type: Any = tool.tool_call_schema
        if isinstance(schema_type, Mapping):
            schema = dict(schema_type)
        elif hasattr(schema_type, "model_json_schema"):
            schema = schema_type.model_json_schema()
        else:  # a pydantic v1 model
            schema = schema_type.schema()
    except Exception:  # a tool whose schema cannot be rendered still gets a binding
        schema = None
    return ToolBinding(tool.name, tool.description or None, schema, body, guarded=guarded, **where)


def _middleware_in(wrapper: object, guard: Guard | None) -> bool:
    """Whether an :class:`InterlockMiddleware` of ``guard`` is among the functions a
    ``ToolNode`` tool-call wrapper is composed of (``create_agent`` composes the
    agent's middleware into closures): followed through closures, bound methods and
    partials only, a bounded number of steps."""
    todo: list[object] = [wrapper]
    seen: set[int] = set()
    while todo and len(seen) < 256:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        owner = getattr(item, "__self__", None)
        if isinstance(owner, InterlockMiddleware):
            if guard is None or owner.guard is guard:
                return True
            continue
        if isinstance(item, functools.partial):
            todo.extend((item.func, *item.args, *item.keywords.values()))
        elif callable(item):
            for cell in getattr(item, "__closure__", None) or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    todo.append(cell.cell_contents)
            todo.append(getattr(item, "__wrapped__", None))
    return False


def _raise_unless_allowed(decision: Decision, tool: BaseTool, tool_input: Any) -> None:
    outcome = verdict_outcome(decision, Action.tool(tool.name, tool_input))
    if outcome.error is not None:
        raise outcome.error


class ToolNodeAdapter(Adapter):
    """Guards a LangGraph ``ToolNode`` in place: our wrapper goes outermost around any
    ``wrap_tool_call`` / ``awrap_tool_call`` the node already has (``create_agent``
    puts the agent's middleware there), so nothing it did is lost and ``detach`` puts
    back exactly what was there. Refusals are error ``ToolMessage`` s the model reads."""

    framework = "langgraph"
    distribution = "langgraph"
    supported = ("1.0", "2")
    extra = "langchain"
    # async first: its wrapper is built while the sync one is still the original
    targets = (PatchTarget(ToolNode, "_awrap_tool_call"), PatchTarget(ToolNode, "_wrap_tool_call"))

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        gate = InterlockMiddleware(guard, models=False)
        if target.attr == "_wrap_tool_call":
            if original is None:
                return gate.wrap_tool_call
            inner_sync = original

            def wrap_tool_call(request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
                return gate.wrap_tool_call(request, lambda r: inner_sync(r, handler))

            return wrap_tool_call
        if original is None:
            # Without an async wrapper the node runs its sync wrapper on the async
            # path too; when there is one, leaving this None keeps that (patched) path.
            return gate.awrap_tool_call if obj._wrap_tool_call is None else None
        inner_async = original

        async def awrap_tool_call(request: ToolCallRequest, handler: Callable[..., Any]) -> Any:
            return await gate.awrap_tool_call(request, lambda r: inner_async(r, handler))

        return awrap_tool_call

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """The node's tools: guarded when the node's tool-call wrapper holds this
        guard's middleware (``attach``, ``guarded_tool_node``, or ``create_agent``'s
        ``middleware=[InterlockMiddleware(guard)]``), or the tool itself is attached."""
        node: ToolNode = obj
        sync_path = node._wrap_tool_call
        async_path = node._awrap_tool_call or sync_path  # the node's own fallback
        whole = _middleware_in(sync_path, guard) and _middleware_in(async_path, guard)
        return [
            tool_binding(
                tool,
                whole or ADAPTER.guarded_by(tool, guard),
                container=node.tools_by_name,
                key=name,
            )
            for name, tool in node.tools_by_name.items()
        ]


class GraphAdapter(Adapter):
    """Guards every ``ToolNode`` of a compiled LangGraph graph — the agent
    ``create_agent`` returns, or your own ``StateGraph(...).compile()``."""

    framework = "langgraph-graph"
    distribution = "langgraph"
    supported = ("1.0", "2")
    extra = "langchain"
    targets = ()

    def __init__(self, nodes: ToolNodeAdapter) -> None:
        super().__init__()
        self.nodes = nodes

    def can_wrap(self, obj: object) -> bool:
        return isinstance(obj, Pregel)

    def tool_nodes(self, graph: Pregel[Any, Any, Any, Any]) -> list[ToolNode]:
        return [n.bound for n in graph.nodes.values() if isinstance(n.bound, ToolNode)]

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [b for node in self.tool_nodes(obj) for b in self.nodes.tool_bindings(node, guard)]

    def is_attached(self, obj: object) -> bool:
        return isinstance(obj, Pregel) and any(
            self.nodes.is_attached(n) for n in self.tool_nodes(obj)
        )

    def attach(self, obj: Any, guard: Guard) -> Any:
        if not self.can_wrap(obj):
            raise TypeError(f"the LangGraph adapter cannot guard a {type(obj).__name__}")
        nodes = self.tool_nodes(obj)
        if not nodes:
            raise TypeError("this graph has no ToolNode to guard; guard its tools instead")
        for node in nodes:  # all or nothing: a node on another guard refuses first
            record = self.nodes._attached.get(id(node))
            if record is not None and record.guard is not guard:
                raise ValueError("this graph is attached to another guard; detach it first")
        for node in nodes:
            self.nodes.attach(node, guard)
        return obj

    def detach(self, obj: Any) -> Any:
        if isinstance(obj, Pregel):
            for node in self.tool_nodes(obj):
                self.nodes.detach(node)
        return obj


ADAPTER = register_adapter(LangChainAdapter())
TOOL_NODE_ADAPTER = register_adapter(ToolNodeAdapter())
GRAPH_ADAPTER = register_adapter(GraphAdapter(TOOL_NODE_ADAPTER))


def guard_tool(tool: BaseTool, guard: Guard) -> BaseTool:
    """A guarded copy of ``tool`` (name, description and args schema kept): every entry
    point — invoke, ainvoke, run, arun, batch, abatch, stream, astream — is judged and
    raises the ``Blocked`` error on anything but allow. ``tool`` itself is untouched."""
    copy = tool.model_copy()
    for target in ADAPTER.targets:  # a copy of an attached tool drops its replacements
        vars(copy).pop(target.attr, None)
    return ADAPTER.attach(copy, guard)  # type: ignore[no-any-return]
