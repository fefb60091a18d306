"""The AutoGen adapter (``autogen-agentchat`` / ``autogen-core`` 0.7).

Where a call can be stopped in AutoGen, and what each place can do:

- **The workbench** (AutoGen's own extension point for tools): :class:`GuardedWorkbench`
  wraps any ``Workbench`` (the agent's ``StaticStreamWorkbench``, an ``McpWorkbench``)
  and judges ``call_tool`` before the tool runs. A refusal is the
  ``ToolResult(is_error=True)`` the model reads — AutoGen's "message" style.
- **The tool** (``BaseTool.run_json`` / ``run``): ``guard.attach(tool)`` gates every
  run of one tool object, also outside any agent. Under a workbench the refusal it
  raises becomes the same error result; called directly, it raises.
- **The model's answer** (``ChatCompletionClient.create`` / ``create_stream``): the one
  place a refusal can leave ``agent.run`` as an exception. An exception from a tool call
  (workbench or handoff) does not: ``AssistantAgent`` runs the calls in a task and waits
  for an end-of-stream marker the failed task never sends, so the run hangs. So raise
  style, and every handoff, is judged when the model *asks* for the call, before the
  agent runs it; the allowed decision is held and used by the workbench (one judgment,
  one record). A refused handoff raises in either style: AutoGen hands off whenever
  the model asks, whatever the handoff tool returns.
- **Budgets**: :class:`GuardedChatCompletionClient` checks and reserves every model
  call, commits ``CreateResult.usage`` after (a stream: its final ``CreateResult``,
  once), and releases on an error.

``guard.attach(agent)`` (raise style) or :func:`guard_agent` (either style) puts the
workbench gate and the call screen on an ``AssistantAgent``; ``guard.detach(agent)``
restores exactly what was there.

Example::

    from interlock.adapters.autogen import GuardedChatCompletionClient, guard_agent

    agent = AssistantAgent("ops", GuardedChatCompletionClient(client, guard), tools=[shell])
    guard_agent(agent, guard, refusal="message")
    await agent.run(task="tidy up")
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    CallKey,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    already_judged,
    arun_settled,
    call_key,
    inside_a_call,
    pending_approval,
    register_adapter,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action, Context
from interlock.deciders.base import CancelToken
from interlock.errors import Blocked
from interlock.ledger.usage import Usage

try:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import CancellationToken, FunctionCall
    from autogen_core.models import (
        ChatCompletionClient,
        CreateResult,
        LLMMessage,
        ModelCapabilities,
        ModelInfo,
        RequestUsage,
        SystemMessage,
        UserMessage,
    )
    from autogen_core.tools import (
        BaseTool,
        StreamTool,
        TextResultContent,
        ToolResult,
        ToolSchema,
        Workbench,
    )
    from autogen_core.tools import Tool as AutogenTool
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the AutoGen adapter needs autogen-agentchat ({exc}): pip install 'interlock[autogen]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.core.decision import Decision
    from interlock.guard import Guard, Mapper

__all__ = [
    "ADAPTER",
    "AGENT_ADAPTER",
    "AgentAdapter",
    "GuardedChatCompletionClient",
    "GuardedWorkbench",
    "ToolAdapter",
    "estimate_usage",
    "guard_agent",
    "tool_action",
]

Refusal = Literal["raise", "message"]
Estimator = Callable[[Sequence[LLMMessage], Mapping[str, Any]], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4


def _check_refusal(refusal: str) -> Refusal:
    if refusal not in ("raise", "message"):
        raise ValueError(f"refusal must be 'raise' or 'message', not {refusal!r}")
    return refusal  # type: ignore[return-value]


# -- one call as the guard sees it ------------------------------------------------------


def tool_action(
    name: str,
    arguments: Mapping[str, Any] | str | None,
    *,
    schema: Mapping[str, Any] | None = None,
    description: str | None = None,
    call_id: str | None = None,
) -> Action:
    """The Action for one tool call (``call_id``: the model's id, for correlation)."""
    return Action.tool(
        name,
        arguments,
        schema=dict(schema) if schema else None,
        description=description or None,
        context=Context(call_id=call_id) if call_id else Context(),
    )


def _parameters(schema: ToolSchema | Mapping[str, Any]) -> Mapping[str, Any] | None:
    parameters = schema.get("parameters")
    return parameters if isinstance(parameters, Mapping) else None


def _linked(token: CancellationToken | None) -> CancelToken | None:
    """An Interlock cancel token that AutoGen's ``token`` cancels (``None``: none)."""
    if token is None:
        return None
    cancel = CancelToken()
    token.add_callback(lambda: cancel.cancel("the AutoGen cancellation token was cancelled"))
    return cancel


async def _judge(
    guard: Guard,
    mapper: Mapper | None,
    action: Action,
    token: CancellationToken | None,
    subject: object = None,
) -> Decision | None:
    """The verdict on one call; ``None``: the mapper says it is not ours. A cancelled
    token (before or while judging) makes it undetermined, so the body never runs."""
    cancel = _linked(token)
    if mapper is None:
        return await guard.acheck(action, cancel=cancel)
    return await guard.acheck_mapped(
        mapper, action.name, dict(action.arguments), subject, cancel=cancel
    )


#: The task an agent's run goes on in, as its workbench saw it when listing tools.
#: ``AssistantAgent`` runs tool calls in a task of their own that outlives a cancelled
#: run; a call whose run is gone must not start its body when its decision arrives.
_RUN_TASK: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
    "interlock_autogen_run_task", default=None
)


def _mark_run_task() -> None:
    known = _RUN_TASK.get()
    if known is None or known.done():
        _RUN_TASK.set(asyncio.current_task())


async def _abandon_if_orphaned(guard: Guard, decision: Decision | None) -> None:
    """Raise ``CancelledError`` (giving back what ``decision`` holds) when the run this
    call belongs to was cancelled while the call was judged."""
    run = _RUN_TASK.get()
    if run is None or run is asyncio.current_task():
        return
    if not (run.done() or run.cancelling()):
        return
    if decision is not None and decision.reservation is not None:
        await asyncio.to_thread(guard.release, decision)
    raise asyncio.CancelledError("the agent run this call belongs to was cancelled")


def _refusal(decision: Decision, action: Action) -> Blocked:
    outcome = verdict_outcome(decision, action)
    assert outcome.error is not None  # only called for a decision that is not allow
    return outcome.error


# -- decisions made when the model asked, used when the call runs -----------------------


class _Holds:
    """Allowed decisions the call screen made, by the model's call id, waiting for the
    workbench to run the call (the same name and arguments) under them."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[CallKey, Decision]] = {}

    def hold(self, call_id: str, key: CallKey, decision: Decision) -> None:
        self._held[call_id] = (key, decision)

    def take(self, call_id: str | None, key: CallKey) -> Decision | None:
        if call_id is None:
            return None
        held = self._held.get(call_id)
        if held is None or held[0] != key:
            return None
        del self._held[call_id]
        return held[1]

    def __bool__(self) -> bool:
        return bool(self._held)

    def release_all(self, guard: Guard) -> None:
        held, self._held = list(self._held.values()), {}
        for _, decision in held:
            if decision.reservation is not None:
                guard.release(decision)


# -- the workbench gate -----------------------------------------------------------------


class GuardedWorkbench(Workbench):
    """A ``Workbench`` whose every ``call_tool`` is judged before ``workbench`` runs it.

    ``refusal="message"`` (default): a refused call is a ``ToolResult(is_error=True)``
    carrying the reason, which the model reads, and the run goes on.
    ``refusal="raise"``: the refusal is raised from ``call_tool`` — use it to call the
    workbench yourself; under an ``AssistantAgent`` use :func:`guard_agent`, which
    raises where ``agent.run`` lets it out (an exception from a tool call hangs it).

    Example::

        agent = AssistantAgent("ops", client, workbench=GuardedWorkbench(McpWorkbench(p), guard))
    """

    def __init__(
        self,
        workbench: Workbench,
        guard: Guard,
        *,
        refusal: Refusal = "message",
        mapper: Mapper | None = None,
        on_approval: Literal["refuse", "wait"] = "refuse",
        approval_timeout: float = 300.0,
    ) -> None:
        if on_approval not in ("refuse", "wait"):
            raise ValueError(f"on_approval must be 'refuse' or 'wait', not {on_approval!r}")
        if on_approval == "wait" and guard.store is None and guard._remote() is None:
            raise ValueError("on_approval='wait' needs a guard with a store")
        self.wrapped = workbench
        self.guard = guard
        self.refusal = _check_refusal(refusal)
        self.mapper = mapper
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self._schemas: dict[str, ToolSchema] = {}
        self._holds: _Holds | None = None

    async def list_tools(self) -> list[ToolSchema]:
        _mark_run_task()
        tools = list(await self.wrapped.list_tools())
        self._schemas = {tool["name"]: tool for tool in tools}
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        arguments = arguments or {}
        key = call_key(name, arguments)

        async def run() -> ToolResult:
            return await self.wrapped.call_tool(name, arguments, cancellation_token, call_id)

        if already_judged(self.guard, key):
            return await run()
        schema = self._schemas.get(name) or {"name": name}
        action = tool_action(
            name,
            arguments,
            schema=_parameters(schema),
            description=schema.get("description"),
            call_id=call_id,
        )
        decision = self._holds.take(call_id, key) if self._holds else None
        if decision is None:
            decision = await _judge(self.guard, self.mapper, action, cancellation_token, self)
        approval_id = None if decision is None else pending_approval(decision)
        if self.on_approval == "wait" and approval_id is not None:
            # A human decides in Interlock's approvals (console, webhook, CLI); the
            # identical call, judged again, claims the grant once.
            await self.guard.await_approval(approval_id, self.approval_timeout)

            decision = (
                await _judge(self.guard, self.mapper, action, cancellation_token, self) or decision
            )
        await _abandon_if_orphaned(self.guard, decision)
        if decision is None:  # not ours to judge
            return await run()
        if not decision.allowed:
            error = _refusal(decision, action)
            if self.refusal == "raise":
                raise error
            return ToolResult(
                name=name, result=[TextResultContent(content=str(error))], is_error=True
            )
        if cancellation_token is not None and cancellation_token.is_cancelled():
            await asyncio.to_thread(self.guard.release, decision)  # held, then cancelled
            raise asyncio.CancelledError("the AutoGen cancellation token was cancelled")
        return await arun_settled(self.guard, decision, run, key)

    def call_tool_stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> AsyncGenerator[Any, None]:
        """The streaming twin: judged as :meth:`call_tool`, yielding its one result
        (an ``AssistantAgent`` calls ``call_tool`` on a workbench like this one)."""

        async def one() -> AsyncGenerator[Any, None]:
            yield await self.call_tool(name, arguments, cancellation_token, call_id)

        return one()

    async def start(self) -> None:
        await self.wrapped.start()

    async def stop(self) -> None:
        await self.wrapped.stop()

    async def reset(self) -> None:
        await self.wrapped.reset()

    async def save_state(self) -> Mapping[str, Any]:
        return await self.wrapped.save_state()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self.wrapped.load_state(state)


# -- the tool gate (guard.attach(tool)) ---------------------------------------------------

#: The tools whose ``run`` is being entered from their own guarded ``run_json``: that
#: run was judged there. Consumed on entry, so a call made inside the body is judged.
_ENTERING: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "interlock_autogen_entering", default=frozenset()
)


class _ToolGate:
    def __init__(self, guard: Guard, tool: BaseTool[Any, Any], mapper: Mapper | None) -> None:
        self.guard = guard
        self.tool = tool
        self.mapper = mapper

    def action(self, arguments: Mapping[str, Any], call_id: str | None) -> Action:
        tool = self.tool
        return tool_action(
            tool.name,
            arguments,
            schema=_parameters(tool.schema),
            description=tool.description,
            call_id=call_id,
        )

    async def decide(
        self, arguments: Mapping[str, Any], token: CancellationToken | None, call_id: str | None
    ) -> tuple[Decision | None, Action]:
        action = self.action(arguments, call_id)
        decision = await _judge(self.guard, self.mapper, action, token, self.tool)
        if decision is not None and not decision.allowed:
            raise _refusal(decision, action)
        return decision, action


class _GatedRunJson:
    """``BaseTool.run_json`` behind the gate: every run of the tool passes it."""

    def __init__(self, gate: _ToolGate, original: Callable[..., Any]) -> None:
        self.gate = gate
        self.original = original

    async def __call__(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> Any:
        gate = self.gate
        key = call_key(gate.tool.name, args)

        async def run() -> Any:
            token = _ENTERING.set(_ENTERING.get() | {id(gate.tool)})
            try:
                return await self.original(args, cancellation_token, call_id=call_id)
            finally:
                _ENTERING.reset(token)

        if already_judged(gate.guard, key):  # the workbench gate judged this very call
            return await run()
        decision, _ = await gate.decide(args, cancellation_token, call_id)
        await _abandon_if_orphaned(gate.guard, decision)
        if decision is None:
            return await run()
        return await arun_settled(gate.guard, decision, run, key)


class _GatedRun:
    """``BaseTool.run(args_model, token)`` behind the gate, for a direct call; a run
    entered from the tool's own guarded ``run_json`` is not judged twice."""

    def __init__(self, gate: _ToolGate, original: Callable[..., Any]) -> None:
        self.gate = gate
        self.original = original

    async def __call__(self, args: Any, cancellation_token: CancellationToken) -> Any:
        gate = self.gate
        entering = _ENTERING.get()
        if id(gate.tool) in entering:
            token = _ENTERING.set(entering - {id(gate.tool)})
            try:
                return await self.original(args, cancellation_token)
            finally:
                _ENTERING.reset(token)
        arguments = args.model_dump() if hasattr(args, "model_dump") else dict(args)
        key = call_key(gate.tool.name, arguments)
        if already_judged(gate.guard, key):
            return await self.original(args, cancellation_token)
        decision, _ = await gate.decide(arguments, cancellation_token, None)
        if decision is None:
            return await self.original(args, cancellation_token)
        return await arun_settled(
            gate.guard, decision, lambda: self.original(args, cancellation_token), key
        )


class _GatedRunJsonStream:
    """``run_json_stream`` of a stream tool behind the gate (judged before the first
    item; the reservation settles when the stream ends)."""

    def __init__(self, gate: _ToolGate, original: Callable[..., Any]) -> None:
        self.gate = gate
        self.original = original

    def __call__(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> AsyncGenerator[Any, None]:
        gate = self.gate

        async def stream() -> AsyncGenerator[Any, None]:
            decision, _ = await gate.decide(args, cancellation_token, call_id)
            token = _ENTERING.set(_ENTERING.get() | {id(gate.tool)})
            try:
                spent = False
                try:
                    async for item in self.original(args, cancellation_token, call_id=call_id):
                        yield item
                    spent = True
                finally:
                    if decision is not None and decision.reservation is not None:
                        settle = gate.guard.commit if spent else gate.guard.release
                        await asyncio.to_thread(settle, decision)
            finally:
                _ENTERING.reset(token)

        return stream()


_GATES: Final = (_GatedRunJson, _GatedRun, _GatedRunJsonStream)


class ToolAdapter(Adapter):
    """Guards one AutoGen ``BaseTool`` in place: ``run_json`` (what the workbench and
    the handoff path call), ``run`` (a direct call with the validated model) and, for a
    stream tool, ``run_json_stream``. AutoGen has no per-tool hook; these are the
    tool's own entry points, patched on the instance only. A refusal raises."""

    framework = "autogen"
    distribution = "autogen-agentchat"
    supported = ("0.7.5", "0.8")
    extra = "autogen"
    targets = (PatchTarget(BaseTool, "run_json"), PatchTarget(BaseTool, "run"))

    def targets_for(self, obj: object) -> tuple[PatchTarget, ...]:
        if isinstance(obj, StreamTool):
            return (*self.targets, PatchTarget(BaseTool, "run_json_stream"))
        return self.targets

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        gate = _ToolGate(guard, obj, None)
        if target.attr == "run_json":
            return _GatedRunJson(gate, original)
        if target.attr == "run":
            return _GatedRun(gate, original)
        return _GatedRunJsonStream(gate, original)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [_tool_binding(obj, guard, owner=obj, attr="run_json")]


def _tool_guarded(tool: object, guard: Guard | None) -> bool:
    gate = getattr(tool, "run_json", None)
    return isinstance(gate, _GatedRunJson) and (guard is None or gate.gate.guard is guard)


def _tool_binding(tool: AutogenTool, guard: Guard | None, **where: Any) -> ToolBinding:
    return ToolBinding(
        tool.name,
        tool.description or None,
        dict(_parameters(tool.schema) or {}) or None,
        getattr(tool, "run_json", None),
        guarded=_tool_guarded(tool, guard),
        **where,
    )


# -- model calls: checked and reserved before, committed from real usage after ----------


def estimate_usage(messages: Sequence[LLMMessage], extra_create_args: Mapping[str, Any]) -> Usage:
    """A reservation for one model call: the messages' characters / 4 as input tokens,
    ``max_tokens`` (or ``max_completion_tokens``) from ``extra_create_args`` as output."""
    text = json.dumps([_dumped(m) for m in messages], default=str)
    ceiling = extra_create_args.get("max_tokens", extra_create_args.get("max_completion_tokens"))
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(len(text) / CHARS_PER_TOKEN), max(output, 0))


def _dumped(message: object) -> object:
    dump = getattr(message, "model_dump", None)
    return dump() if callable(dump) else message


def model_name(client: ChatCompletionClient) -> str:
    """The model's name as the client knows it (``model`` of its create arguments,
    as the OpenAI and Azure clients keep it), else the client's class name."""
    for holder in ("_create_args", "_raw_config"):
        config = getattr(client, holder, None)
        if isinstance(config, Mapping) and isinstance(config.get("model"), str):
            return str(config["model"])
    return type(client).__name__


def _record(call: Any, usage: RequestUsage | None) -> None:
    """Record what the provider reported; no token counts keeps the estimate."""
    if usage is None:
        return
    reported = Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0)
    if reported.total:
        call.record(reported)


class _DelegatingClient(ChatCompletionClient):
    """Everything but ``create`` / ``create_stream`` is the wrapped client's."""

    def __init__(self, client: ChatCompletionClient) -> None:
        self.wrapped = client

    async def close(self) -> None:
        await self.wrapped.close()

    def actual_usage(self) -> RequestUsage:
        return self.wrapped.actual_usage()

    def total_usage(self) -> RequestUsage:
        return self.wrapped.total_usage()

    def count_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[AutogenTool | ToolSchema] = []
    ) -> int:
        return self.wrapped.count_tokens(messages, tools=tools)

    def remaining_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[AutogenTool | ToolSchema] = []
    ) -> int:
        return self.wrapped.remaining_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.wrapped.capabilities

    @property
    def model_info(self) -> ModelInfo:
        return self.wrapped.model_info


class GuardedChatCompletionClient(_DelegatingClient):
    """A ``ChatCompletionClient`` whose every call is judged as an ``llm`` action named
    after the model and reserved on the policy's budgets before ``client`` runs; the
    ``usage`` of its ``CreateResult`` is committed after (a stream: once, from its final
    result), and the reservation released if it raises or the stream is abandoned
    before its result. A refused call raises out of ``agent.run`` and never reaches
    ``client``.

    Example::

        agent = AssistantAgent("ops", GuardedChatCompletionClient(client, guard))
    """

    def __init__(
        self,
        client: ChatCompletionClient,
        guard: Guard,
        *,
        name: str | None = None,
        estimate: Estimator | None = None,
    ) -> None:
        super().__init__(client)
        self.guard = guard
        self.model_name = name or model_name(client)
        self.estimate = estimate or estimate_usage

    def _llm_call(
        self, messages: Sequence[LLMMessage], extra_create_args: Mapping[str, Any]
    ) -> Any:
        estimate = self.estimate(messages, extra_create_args)
        return self.guard.llm_call(self.model_name, estimate=estimate)

    async def create(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[AutogenTool | ToolSchema] = [],
        tool_choice: AutogenTool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[Any] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> CreateResult:
        async with self._llm_call(messages, extra_create_args) as call:
            _raise_if_cancelled(cancellation_token)
            result = await self.wrapped.create(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=extra_create_args,
                cancellation_token=cancellation_token,
            )
            _record(call, result.usage)
        return result

    def create_stream(
        self,
        messages: Sequence[LLMMessage],
        *,
        tools: Sequence[AutogenTool | ToolSchema] = [],
        tool_choice: AutogenTool | Literal["auto", "required", "none"] = "auto",
        json_output: bool | type[Any] | None = None,
        extra_create_args: Mapping[str, Any] = {},
        cancellation_token: CancellationToken | None = None,
    ) -> AsyncGenerator[str | CreateResult, None]:
        async def stream() -> AsyncGenerator[str | CreateResult, None]:
            call = self._llm_call(messages, extra_create_args)
            await call.__aenter__()  # before the first chunk: a refusal calls nothing
            chunks = self.wrapped.create_stream(
                messages,
                tools=tools,
                tool_choice=tool_choice,
                json_output=json_output,
                extra_create_args=extra_create_args,
                cancellation_token=cancellation_token,
            )
            completed = False
            failure: BaseException | None = None
            try:
                _raise_if_cancelled(cancellation_token)
                async for chunk in chunks:
                    if isinstance(chunk, CreateResult) and not completed:
                        _record(call, chunk.usage)
                        completed = True
                    yield chunk
            except BaseException as exc:
                # Closed after the final result: the call happened and is spent.
                failure = None if completed and isinstance(exc, GeneratorExit) else exc
                raise
            finally:
                await chunks.aclose()
                if failure is None and not completed:
                    failure = RuntimeError("the stream ended without a final result")
                await call.__aexit__(type(failure) if failure else None, failure, None)

        return stream()


def _raise_if_cancelled(token: CancellationToken | None) -> None:
    if token is not None and token.is_cancelled():
        raise asyncio.CancelledError("the AutoGen cancellation token was cancelled")


# -- the call screen: tool calls judged when the model asks for them --------------------


def _trusted_inputs(messages: Sequence[LLMMessage]) -> Iterator[Input]:
    """The user's messages among ``messages`` (text parts), and the system messages
    when ``messages`` are the agent's own: the caller picks."""
    for message in messages:
        if isinstance(message, SystemMessage):
            yield Input("system", message.content)
        elif isinstance(message, UserMessage) and message.source == "user":
            content = message.content
            texts = [content] if isinstance(content, str) else content
            yield from (Input("user", t) for t in texts if isinstance(t, str))


class _CallScreen(_DelegatingClient):
    """Judges the function calls in each model answer before the agent runs them:
    ``screened`` names the calls it judges (``None``: every one). A refused call
    raises here, out of ``agent.run``; an allowed one is held for the workbench."""

    def __init__(
        self,
        client: ChatCompletionClient,
        guard: Guard,
        mapper: Mapper | None,
        holds: _Holds,
        schemas: Callable[[], Mapping[str, ToolSchema]],
        screened: frozenset[str] | None,
        handoffs: frozenset[str],
    ) -> None:
        super().__init__(client)
        self.guard = guard
        self.mapper = mapper
        self.holds = holds
        self.schemas = schemas
        self.screened = screened
        self.handoffs = handoffs
        self.on_approval: Literal["refuse", "wait"] = "refuse"
        self.approval_timeout = 300.0
        #: the agent's own system messages (not memory's, which it adds per call)
        self.system: Callable[[], Sequence[LLMMessage]] = tuple

    async def _record_inputs(self, messages: Sequence[LLMMessage]) -> None:
        """Record the agent's system message and the user's messages (source
        ``user``) as trusted inputs — not when this agent runs as a tool of another
        (its task is what that agent's model wrote), not other agents' messages, tool
        results or memory."""
        if not records_inputs(self.guard) or inside_a_call(self.guard):
            return
        inputs = inputs_of(self.guard)
        found = inputs.fresh(self.guard, _trusted_inputs([*self.system(), *messages]))
        if found:  # the history may be SQL: off the event loop
            await asyncio.to_thread(inputs.record, self.guard, found)

    async def _screen(self, result: CreateResult, token: CancellationToken | None) -> None:
        # The agent runs every call of a turn before it asks the model again: what is
        # still held now was never run (a tool no workbench had), so give it back.
        if self.holds:
            await asyncio.to_thread(self.holds.release_all, self.guard)
        if not isinstance(result.content, list):
            return
        schemas = self.schemas()
        try:
            for call in result.content:
                if not isinstance(call, FunctionCall):
                    continue
                if self.screened is not None and call.name not in self.screened:
                    continue
                schema = schemas.get(call.name) or {"name": call.name}
                action = tool_action(
                    call.name,
                    call.arguments,
                    schema=_parameters(schema),
                    description=schema.get("description"),
                    call_id=call.id,
                )
                decision = await _judge(self.guard, self.mapper, action, token, self)
                approval_id = None if decision is None else pending_approval(decision)
                if self.on_approval == "wait" and approval_id is not None:
                    await self.guard.await_approval(approval_id, self.approval_timeout)
                    again = await _judge(self.guard, self.mapper, action, token, self)
                    decision = again or decision
                if decision is None:
                    continue
                if not decision.allowed:
                    raise _refusal(decision, action)
                if call.name in self.handoffs:  # it happens once the agent sees it
                    if decision.reservation is not None:
                        await asyncio.to_thread(self.guard.commit, decision)
                    continue
                self.holds.hold(call.id, call_key(call.name, call.arguments), decision)
        except BaseException:
            await asyncio.to_thread(self.holds.release_all, self.guard)
            raise

    async def create(self, messages: Sequence[LLMMessage], **options: Any) -> CreateResult:
        await self._record_inputs(messages)
        result = await self.wrapped.create(messages, **options)
        await self._screen(result, options.get("cancellation_token"))
        return result

    def create_stream(
        self, messages: Sequence[LLMMessage], **options: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        _mark_run_task()

        async def stream() -> AsyncGenerator[str | CreateResult, None]:
            await self._record_inputs(messages)
            chunks = self.wrapped.create_stream(messages, **options)
            try:
                async for chunk in chunks:
                    if isinstance(chunk, CreateResult):
                        await self._screen(chunk, options.get("cancellation_token"))
                    yield chunk
            finally:
                await chunks.aclose()

        return stream()


# -- attach / detach an agent --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    refusal: Refusal
    mapper: Mapper | None
    on_approval: Literal["refuse", "wait"]
    approval_timeout: float


class AgentAdapter(Adapter):
    """Guards an ``AssistantAgent``: its workbenches become :class:`GuardedWorkbench`
    gates and its model client a call screen that judges what the model asks for
    (every call in raise style, the handoffs in message style). ``AssistantAgent``
    takes both at construction and has no setter, so attach swaps its ``_workbench``
    and ``_model_client`` attributes on the instance; detach puts them back."""

    framework = "autogen-agent"
    distribution = "autogen-agentchat"
    supported = ("0.7.5", "0.8")
    extra = "autogen"
    targets = (
        PatchTarget(AssistantAgent, "_workbench"),
        PatchTarget(AssistantAgent, "_model_client"),
    )
    inspects_models = True

    def __init__(self) -> None:
        super().__init__()
        self._styles: dict[int, _Options] = {}
        self._holds: dict[int, _Holds] = {}

    def attach(
        self,
        obj: Any,
        guard: Guard,
        *,
        refusal: Refusal = "raise",
        mapper: Mapper | None = None,
        on_approval: Literal["refuse", "wait"] = "refuse",
        approval_timeout: float = 300.0,
    ) -> Any:
        """As :meth:`Adapter.attach`, with the refusal style (``"raise"``: a refused
        call raises out of ``agent.run``; ``"message"``: the model reads it) and what a
        call that needs a human does (see :func:`guard_agent`)."""
        if not self.is_attached(obj):
            if on_approval not in ("refuse", "wait"):
                raise ValueError(f"on_approval must be 'refuse' or 'wait', not {on_approval!r}")
            if on_approval == "wait" and guard.store is None and guard._remote() is None:
                raise ValueError("on_approval='wait' needs a guard with a store")
            options = _Options(_check_refusal(refusal), mapper, on_approval, approval_timeout)
            self._styles[id(obj)] = options
            self._holds[id(obj)] = _Holds()
        try:
            return super().attach(obj, guard)
        except BaseException:
            if not self.is_attached(obj):
                self._styles.pop(id(obj), None)
                self._holds.pop(id(obj), None)
            raise

    def detach(self, obj: Any) -> Any:
        self._styles.pop(id(obj), None)
        self._holds.pop(id(obj), None)
        return super().detach(obj)

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        options, holds = self._styles[id(obj)], self._holds[id(obj)]
        if target.attr == "_workbench":
            gates = []
            for workbench in original:
                gate = GuardedWorkbench(
                    workbench,
                    guard,
                    refusal="message",
                    mapper=options.mapper,
                    on_approval=options.on_approval,
                    approval_timeout=options.approval_timeout,
                )
                gate._holds = holds
                gates.append(gate)
            return gates
        agent: AssistantAgent = obj
        handoffs = frozenset(agent._handoffs)
        screen = _CallScreen(
            original,
            guard,
            options.mapper,
            holds,
            lambda: _schemas(agent),
            None if options.refusal == "raise" else handoffs,
            handoffs,
        )
        screen.on_approval = options.on_approval
        screen.approval_timeout = options.approval_timeout
        screen.system = lambda: agent._system_messages
        return screen

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        agent: AssistantAgent = obj
        bindings: list[ToolBinding] = []
        for index, workbench in enumerate(agent._workbench):
            gated = isinstance(workbench, GuardedWorkbench) and (
                guard is None or workbench.guard is guard
            )
            inner = workbench.wrapped if isinstance(workbench, GuardedWorkbench) else workbench
            tools = getattr(inner, "_tools", None)
            if isinstance(tools, list):
                for tool in tools:
                    binding = _tool_binding(tool, guard, container=agent._workbench, key=index)
                    if gated:
                        binding = _with_guarded(binding)
                    bindings.append(binding)
            else:  # tools it lists at run time (an MCP workbench)
                bindings.append(
                    ToolBinding(
                        f"workbench:{type(inner).__name__}",
                        "the tools this workbench lists at run time",
                        None,
                        container=agent._workbench,
                        key=index,
                        guarded=gated,
                    )
                )
        screened = self._screen_of(agent, guard) is not None
        for tool in agent._handoff_tools:
            binding = _tool_binding(tool, guard, owner=agent, attr="_model_client")
            bindings.append(
                _with_guarded(binding)
                if screened
                else ToolBinding(
                    binding.name,
                    binding.description,
                    binding.schema,
                    binding.callable,
                    owner=agent,
                    attr="_model_client",
                    guarded=False,
                    note="a handoff: judged only when guard.attach(agent) screens "
                    "the model's calls",
                )
            )
        return bindings

    @staticmethod
    def _screen_of(agent: AssistantAgent, guard: Guard | None) -> _CallScreen | None:
        client = agent._model_client
        if isinstance(client, _CallScreen) and (guard is None or client.guard is guard):
            return client
        return None

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        agent: AssistantAgent = obj
        client: ChatCompletionClient = agent._model_client
        while isinstance(client, _CallScreen):
            client = client.wrapped
        guarded = isinstance(client, GuardedChatCompletionClient) and (
            guard is None or client.guard is guard
        )
        label = (
            client.model_name
            if isinstance(client, GuardedChatCompletionClient)
            else model_name(client)
        )
        note = None if guarded else "wrap it: GuardedChatCompletionClient(client, guard)"
        return [
            LLMBinding(
                label, client.create, owner=agent, attr="_model_client", guarded=guarded, note=note
            )
        ]


def _with_guarded(binding: ToolBinding) -> ToolBinding:
    return ToolBinding(
        binding.name,
        binding.description,
        binding.schema,
        binding.callable,
        owner=binding.owner,
        attr=binding.attr,
        container=binding.container,
        key=binding.key,
        guarded=True,
    )


def _schemas(agent: AssistantAgent) -> dict[str, ToolSchema]:
    """The schemas of the agent's tools and handoffs, as its workbenches last listed
    them (a guarded workbench remembers) plus the handoff tools."""
    schemas: dict[str, ToolSchema] = {}
    for workbench in agent._workbench:
        if isinstance(workbench, GuardedWorkbench):
            schemas.update(workbench._schemas)
    for tool in agent._handoff_tools:
        schemas[tool.name] = tool.schema
    return schemas


def guard_agent(
    agent: AssistantAgent,
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    on_approval: Literal["refuse", "wait"] = "refuse",
    approval_timeout: float = 300.0,
) -> AssistantAgent:
    """Guard ``agent`` in place and return it: every tool call (through its workbenches)
    and every handoff is judged before it runs. ``refusal="message"``: the model reads
    a refused tool call as an error result and the run goes on; ``"raise"``: the
    refusal raises out of ``agent.run``. A refused handoff raises in either style.
    ``on_approval="wait"`` (a guard with a store): a call that needs a human waits up
    to ``approval_timeout`` seconds for one to decide in Interlock's approvals, then is
    judged again (the identical call claims the grant once).
    ``guard.detach(agent)`` undoes it."""
    return AGENT_ADAPTER.attach(  # type: ignore[no-any-return]
        agent,
        guard,
        refusal=refusal,
        mapper=mapper,
        on_approval=on_approval,
        approval_timeout=approval_timeout,
    )


ADAPTER = register_adapter(ToolAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
