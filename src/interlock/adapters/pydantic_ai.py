"""The PydanticAI adapter (``pydantic-ai-slim`` 2.x).

PydanticAI's own extension point is the *capability*: :class:`InterlockCapability`
sits in ``Agent(capabilities=[...])`` (or is added to every run by
``guard.attach(agent)``) and judges

- every tool call in ``wrap_tool_execute`` — with the **validated** arguments the tool
  will receive, never the model's raw ``call.args`` — before the tool's own execution
  lifecycle runs; the body runs on ``allow`` only;
- every model request in ``wrap_model_request`` (when the guard has a store, or
  ``models=True``): checked as an ``llm`` action and reserved on the policy's budgets
  before the model runs, committed from the response's real ``usage`` after (a
  streamed run's final response included, once), released when the request fails.

A refused tool call is, as the user chooses:

- ``refusal="message"`` (default): ``ToolFailed(reason)`` — the model reads the
  refusal as the tool's failed result and the run goes on; it does **not** consume
  the tool's retry budget;
- ``refusal="retry"``: ``ModelRetry(reason)`` — the model reads it with PydanticAI's
  "fix the call and try again" framing; it **counts against the tool's retries**
  (``Agent(retries=...)`` / ``Tool(max_retries=...)``, default 1): a refusal more
  than the budget allows ends the run with ``UnexpectedModelBehavior``;
- ``refusal="raise"``: the ``Blocked`` error (``ActionDenied`` / ``ApprovalRequired``
  / ``ActionUndetermined``) propagates out of ``agent.run`` / ``run_sync`` /
  ``run_stream``.

A refused *model* request always raises: there is no model to read a refusal of its
own call.

Approvals (``on_approval``): ``"refuse"`` (the refusal above, with the approval URL),
``"wait"`` (wait for a human in place, then judge the identical call again), or
``"defer"`` — PydanticAI's own human-in-the-loop: the call is deferred with
PydanticAI's ``ApprovalRequired`` and the run ends with ``DeferredToolRequests``
(the approval id and URL in its ``metadata``); when the application resumes the run
with ``DeferredToolResults``, an approved call is judged again and the human's
approval in PydanticAI's flow decides the Interlock approval (an ``override_args``
edit is a new intent, judged again: a deny rule still denies it); a ``ToolDenied``
never runs the tool.

Side doors the capability cannot see (see ``docs/adapter-pydantic-ai.md``): a toolset
called directly (``toolset.call_tool(...)``: wrap it with :func:`guard_toolset`), the
tool's own Python function called directly, ``pydantic_ai.direct.model_request*``.

Example::

    from pydantic_ai import Agent
    from interlock.adapters.pydantic_ai import InterlockCapability

    agent = Agent(model, capabilities=[InterlockCapability(guard)])
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    adecide_starting,
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
from interlock.core.decision import Decision
from interlock.ledger.usage import Usage

try:
    from pydantic_ai import Agent, ModelRetry, ToolFailed
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired as DeferForApproval
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai.models import Model, ModelRequestContext
    from pydantic_ai.tools import RunContext, ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the PydanticAI adapter needs pydantic-ai-slim>=2.16,<3 ({exc}): "
        "pip install 'interlock[pydantic-ai]'"
    ) from exc

if TYPE_CHECKING:
    from pydantic_ai.toolsets.abstract import ToolsetTool

    from interlock.guard import Guard, Mapper
    from interlock.ledger.llm_call import LLMCall

__all__ = [
    "ADAPTER",
    "AgentAdapter",
    "InterlockCapability",
    "InterlockToolset",
    "approval_metadata",
    "estimate_usage",
    "guard_toolset",
    "model_name",
    "tool_action",
]

log = logging.getLogger("interlock")

Refusal = Literal["message", "retry", "raise"]
OnApproval = Literal["refuse", "wait", "defer"]
Estimator = Callable[[ModelRequestContext], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4


# -- one call as the guard sees it ------------------------------------------------------


def tool_action(
    tool_def: ToolDefinition, args: Mapping[str, Any] | None, call_id: str | None = None
) -> Action:
    """The Action for one call of the tool ``tool_def`` with its validated ``args``,
    projected onto the tool's declared schema. ``call_id`` (the model's tool call id)
    is kept for correlation only: it is not part of the intent."""
    return Action.tool(
        tool_def.name,
        dict(args or {}),
        schema=tool_def.parameters_json_schema,
        description=tool_def.description,
        context=Context(call_id=call_id) if call_id else Context(),
    )


def approval_metadata(decision: Decision) -> dict[str, Any]:
    """What a deferred call's ``DeferredToolRequests.metadata`` carries for a call that
    awaits an Interlock approval."""
    approval = decision.approval
    return {
        "interlock": "approval_required",
        "approval_id": approval.id if approval else None,
        "approval_url": approval.url if approval else None,
        "reason": decision.reason,
        "rule_ids": list(decision.rule_ids),
        "decision_id": decision.decision_id,
    }


class _Gate:
    """Judges the tool calls of one guard (shared by the capability and the toolset)."""

    def __init__(
        self,
        guard: Guard,
        mapper: Mapper | None,
        refusal: Refusal,
        on_approval: OnApproval,
        approval_timeout: float,
    ) -> None:
        if refusal not in ("message", "retry", "raise"):
            raise ValueError(f"refusal must be 'message', 'retry' or 'raise', not {refusal!r}")
        if on_approval not in ("refuse", "wait", "defer"):
            raise ValueError(
                f"on_approval must be 'refuse', 'wait' or 'defer', not {on_approval!r}"
            )
        if on_approval != "refuse" and guard.store is None:
            raise ValueError(
                f"on_approval={on_approval!r} needs a guard with a store, where approvals live"
            )
        if on_approval == "defer" and getattr(guard.decider, "serves_state", False):
            raise ValueError(
                "on_approval='defer' needs a local store: a remote guard's approvals are "
                "decided on the server, not by the agent's own process"
            )
        self.guard = guard
        self.mapper = mapper
        self.refusal = refusal
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout

    async def decide(
        self, tool_def: ToolDefinition, args: dict[str, Any], call_id: str | None
    ) -> Decision | None:
        if self.mapper is None:
            return await self.guard.acheck(tool_action(tool_def, args, call_id))
        return await self.guard.acheck_mapped(self.mapper, tool_def.name, args, tool_def)

    async def judge(
        self,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        call_id: str | None,
        approved_by_human: bool = False,
    ) -> Decision | None:
        """The verdict on one call, approvals handled as ``on_approval`` says (a
        refusal is raised, :meth:`refuse`)."""
        decision = await self.decide(tool_def, args, call_id)
        approval_id = None if decision is None else pending_approval(decision)
        if decision is None or approval_id is None:
            return decision
        if self.on_approval == "wait":
            await self.guard.await_approval(approval_id, self.approval_timeout)
            return await self.decide(tool_def, args, call_id) or decision
        if self.on_approval == "defer":
            if not approved_by_human:
                raise DeferForApproval(approval_metadata(decision))
            try:
                await asyncio.to_thread(self._approve, approval_id, tool_def.name)
            except Exception as exc:  # decided meanwhile, expired, ...: as it stands
                log.warning("interlock: a PydanticAI approval was not recorded: %s", exc)
            return await self.decide(tool_def, args, call_id) or decision
        return decision

    def _approve(self, approval_id: str, tool: str) -> None:
        """Record the approval a human gave in PydanticAI's deferred-tool flow (the
        application resumed the run with this exact call approved)."""
        store = self.guard.store
        assert store is not None  # on_approval='defer' is refused without one
        agent = self.guard.context.agent
        by = f"pydantic-ai:{agent}" if agent else "pydantic-ai"
        store.approve(
            approval_id,
            by=by,
            reason=f"approved in PydanticAI's deferred tool flow ({tool})",
            tenant=self.guard.context.tenant,
        )

    def refuse(
        self, decision: Decision, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> Exception:
        """The exception that refuses a call: read by the model, or the Blocked error."""
        outcome = verdict_outcome(decision, tool_action(tool_def, args))
        assert outcome.error is not None  # only called for a decision that is not allow
        message = outcome.message or decision.reason
        if self.refusal == "message":
            return ToolFailed(message)
        if self.refusal == "retry":
            return ModelRetry(message)
        return outcome.error


# -- the capability -------------------------------------------------------------------


def _trusted_inputs(messages: Sequence[ModelMessage]) -> Iterator[Input]:
    """The system prompt, the instructions and the user's prompts among ``messages``:
    not tool returns, retry prompts or the model's responses (nor the text parts of a
    user prompt that are not text: images, documents)."""
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        if message.instructions:
            yield Input("system", message.instructions)
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                yield Input("system", part.content)
            elif isinstance(part, UserPromptPart):
                content = part.content
                texts = [content] if isinstance(content, str) else content
                yield from (Input("user", t) for t in texts if isinstance(t, str))


def model_name(model: Model) -> str:
    """The model's name as pricing knows it (``model.model_name``), else its class."""
    name = getattr(model, "model_name", None)
    return name if isinstance(name, str) and name else type(model).__name__


def estimate_usage(request_context: ModelRequestContext) -> Usage:
    """A reservation for one model request: the messages' characters / 4 as input
    tokens, ``model_settings['max_tokens']`` (when set) as output tokens."""
    chars = sum(len(_text_of(message)) for message in request_context.messages)
    settings = request_context.model_settings or {}
    ceiling = settings.get("max_tokens")
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(chars / CHARS_PER_TOKEN), max(output, 0))


def _text_of(message: ModelMessage) -> str:
    return json.dumps([repr(part) for part in message.parts])


def _record_usage(call: LLMCall, response: ModelResponse) -> None:
    """Record what the model reported; a response with no token counts keeps the
    estimate (the call happened, and its cost is not known to be lower)."""
    try:
        reported = Usage.of(response.usage)
    except ValueError:
        return
    if reported.total:
        call.record(reported)


class InterlockCapability(AbstractCapability[Any]):
    """Judge every tool call (and, with a store, every model request) of a PydanticAI
    agent before it runs.

    ``refusal``: ``"message"`` (``ToolFailed``: the model reads it, no retry spent),
    ``"retry"`` (``ModelRetry``: counts against the tool's retries) or ``"raise"``.
    ``mapper(name, args, tool_def)`` may replace the default action (``None``: not
    ours to judge). ``on_approval``: ``"refuse"``, ``"wait"`` or ``"defer"`` (see the
    module). ``models``: gate model requests (default: when the guard has a store);
    ``estimate(request_context)`` gives the reservation (default
    :func:`estimate_usage`).

    Example::

        agent = Agent(model, capabilities=[InterlockCapability(guard, refusal="raise")])
    """

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
        AgentAdapter.check_version()
        self.guard = guard
        self.gate = _Gate(guard, mapper, refusal, on_approval, approval_timeout)
        self.models = guard.store is not None if models is None else models
        self.estimate = estimate or estimate_usage
        self._inputs = inputs_of(guard)

    @property
    def refusal(self) -> Refusal:
        return self.gate.refusal

    def __repr__(self) -> str:
        return f"InterlockCapability(refusal={self.gate.refusal!r}, models={self.models})"

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Any:
        approved = bool(getattr(ctx, "tool_call_approved", False))
        # an allow's commit carries the body's tool_invoke: one durable write before it
        decision, started = await adecide_starting(
            self.guard,
            tool_def.name,
            lambda: self.gate.judge(tool_def, args, call.tool_call_id, approved),
        )
        if decision is None:  # not ours to judge
            return await handler(args)
        if not decision.allowed:
            raise self.gate.refuse(decision, tool_def, args)
        key = call_key(tool_def.name, args)
        return await arun_settled(self.guard, decision, lambda: handler(args), key, started=started)

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: Callable[[ModelRequestContext], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        # not in a tool's body: an agent a tool delegates to gets the calling model's words
        if records_inputs(self.guard) and not inside_a_call(self.guard):
            found = self._inputs.fresh(self.guard, _trusted_inputs(request_context.messages))
            if found:  # the history may be SQL: off the event loop
                await asyncio.to_thread(self._inputs.record, self.guard, found)
        if not self.models:
            return await handler(request_context)
        call = self.guard.llm_call(
            model_name(request_context.model), estimate=self.estimate(request_context)
        )
        await call.__aenter__()  # a refusal raises here: the model is never called
        try:
            response = await handler(request_context)
        except BaseException as exc:
            await call.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        _record_usage(call, response)
        await call.__aexit__(None, None, None)
        return response


# -- a toolset called directly: the side door the capability cannot see ---------------


class InterlockToolset(WrapperToolset[Any]):
    """A toolset whose ``call_tool`` judges every call — for code that calls a toolset
    directly (``toolset.call_tool(...)``), where no capability runs. Inside an agent
    whose :class:`InterlockCapability` (same guard) already judged the call, it is
    not judged again. Refusals as the capability's (``refusal``)."""

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        guard: Guard,
        *,
        refusal: Refusal = "raise",
        mapper: Mapper | None = None,
    ) -> None:
        super().__init__(wrapped)
        self._gate = _Gate(guard, mapper, refusal, "refuse", 0.0)

    @property
    def guard(self) -> Guard:
        return self._gate.guard

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        key = call_key(name, tool_args)
        if already_judged(self._gate.guard, key):  # the capability judged this very call
            return await super().call_tool(name, tool_args, ctx, tool)
        call_id = getattr(ctx, "tool_call_id", None)
        decision, started = await adecide_starting(
            self._gate.guard, name, lambda: self._gate.judge(tool.tool_def, tool_args, call_id)
        )
        if decision is None:
            return await super().call_tool(name, tool_args, ctx, tool)
        if not decision.allowed:
            raise self._gate.refuse(decision, tool.tool_def, tool_args)
        return await arun_settled(
            self._gate.guard,
            decision,
            lambda: super(InterlockToolset, self).call_tool(name, tool_args, ctx, tool),
            key,
            started=started,
        )


def guard_toolset(
    toolset: AbstractToolset[Any],
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
) -> InterlockToolset:
    """``toolset`` behind the guard for direct ``call_tool`` calls (see
    :class:`InterlockToolset`); pass the result to ``Agent(toolsets=[...])`` too."""
    return InterlockToolset(toolset, guard, refusal=refusal, mapper=mapper)


# -- attach / detach, coverage -----------------------------------------------------------


def _capabilities_of(agent: Agent[Any, Any]) -> list[AbstractCapability[Any]]:
    found: list[AbstractCapability[Any]] = []
    agent.root_capability.apply(found.append)
    return found


class AgentAdapter(Adapter):
    """``guard.attach(agent)`` adds an :class:`InterlockCapability` (message style) to
    every run of ``agent``: its ``iter`` — which ``run``, ``run_sync``, ``run_stream``,
    ``run_stream_sync`` and ``run_stream_events`` all enter — passes the capability as
    a run capability (none when the agent was built with one of this guard's: a call
    is judged once).
    PydanticAI binds constructor capabilities once, at ``Agent(...)``, so a run
    capability is its one way in afterwards; it also survives
    ``agent.override(capabilities=[...])``, which replaces the constructor's."""

    framework = "pydantic-ai"
    distribution = "pydantic-ai-slim"
    # 2.0 has the capability hooks; ToolFailed (the message style) arrived in 2.16
    supported = ("2.16", "3")
    extra = "pydantic-ai"
    targets = (PatchTarget(Agent, "iter"),)

    inspects_models = True

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        if any(
            isinstance(cap, InterlockCapability) and cap.guard is guard
            for cap in _capabilities_of(obj)
        ):
            return original  # built with this guard's capability: judging twice is noise
        capability = InterlockCapability(guard)

        def iter(*args: Any, capabilities: Sequence[Any] | None = None, **kwargs: Any) -> Any:
            return original(*args, capabilities=[*(capabilities or ()), capability], **kwargs)

        iter.interlock_capability = capability  # type: ignore[attr-defined]
        return iter

    def _guarded(self, agent: Agent[Any, Any], guard: Guard | None) -> bool:
        if self.guarded_by(agent, guard):
            return True
        return any(
            isinstance(cap, InterlockCapability) and (guard is None or cap.guard is guard)
            for cap in _capabilities_of(agent)
        )

    def _gates_models(self, agent: Agent[Any, Any], guard: Guard | None) -> bool:
        attached = vars(agent).get("iter")
        caps = [getattr(attached, "interlock_capability", None), *_capabilities_of(agent)]
        return any(
            isinstance(cap, InterlockCapability)
            and cap.models
            and (guard is None or cap.guard is guard)
            for cap in caps
        )

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """The agent's function tools, one by one, and each other toolset (MCP servers,
        toolsets of its capabilities) as one binding: every call the agent's loop makes
        passes the capability; direct ``toolset.call_tool`` does not."""
        agent: Agent[Any, Any] = obj
        guarded = self._guarded(agent, guard)
        bindings: list[ToolBinding] = []
        for toolset in agent.toolsets:
            if isinstance(toolset, FunctionToolset):
                for name, tool in toolset.tools.items():
                    bindings.append(
                        ToolBinding(
                            name,
                            tool.description,
                            None,
                            tool.function,
                            container=toolset.tools,
                            key=name,
                            guarded=guarded,
                        )
                    )
            else:
                bindings.append(
                    ToolBinding(
                        f"toolset:{toolset.label}",
                        "the tools this toolset lists at run time",
                        None,
                        container=agent.toolsets,
                        guarded=guarded,
                    )
                )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        agent: Agent[Any, Any] = obj
        model = agent.model
        label = model_name(model) if isinstance(model, Model) else (model or "(the run's model)")
        gated = self._gates_models(agent, guard)
        note = None if gated else "model requests are gated only with a store (or models=True)"
        return [LLMBinding(str(label), owner=agent, attr="model", guarded=gated, note=note)]


ADAPTER = register_adapter(AgentAdapter())
