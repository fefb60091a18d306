"""The OpenAI Agents SDK adapter (``openai-agents``).

Three ways in, from one tool outward:

- :func:`guard_tool` / :func:`guard_tools` — a guarded *copy* of a ``FunctionTool``. The
  gate replaces ``on_invoke_tool(ctx, args_json)``, the one callable every run of the
  tool goes through (the Runner, ``invoke_function_tool``, a direct call), and sits
  *outside* the tool's own error handling: ``function_tool`` turns an exception from the
  body into a message for the model, and a refusal must never be swallowed like that.
  ``refusal="raise"`` (default) raises ``ActionDenied`` / ``ApprovalRequired`` /
  ``ActionUndetermined`` out of ``Runner.run``; ``refusal="message"`` adds a
  ``ToolInputGuardrail`` that rejects the call with a message the model reads, so the
  run goes on (and the verdict shows up in the SDK's own guardrail results).
- :class:`FunctionToolAdapter` / :class:`AgentAdapter` — ``guard.attach(tool)`` patches
  ``on_invoke_tool`` in place; ``guard.attach(agent)`` swaps the agent's ``tools`` list
  for guarded copies, guards the tools its MCP servers list at run time, and gates
  every handoff (:func:`guard_handoff`: a transfer is an action, ``scope: handoff``).
  ``guard.detach(...)`` restores exactly what was there. Both raise on a refusal.
- ``on_approval="interrupt"`` bridges Interlock approvals and the SDK's run-state
  interruptions both ways: a call awaiting approval surfaces as a ``ToolApprovalItem``,
  ``state.approve(item)`` decides the Interlock approval, :func:`reject` and
  :func:`apply_interlock_decisions` carry decisions the other way.
- :class:`GuardedModel` — a ``Model`` whose every call is checked as an ``llm`` action
  and reserved on the policy's budgets before the wrapped model runs, then committed
  from the ``usage`` it reports (streaming included).

The Runner wraps any exception from a tool that is not one of its own
(``AgentsException``) in a ``UserError``. So a refusal raised here is an
``ActionDenied`` (etc.) that is *also* an ``AgentsException``: the Runner re-raises it
unchanged, with its ``run_data`` filled in, and ``except ActionDenied`` catches it.

Example::

    from agents import Agent, Runner
    from interlock.adapters.openai_agents import GuardedModel, guard_tools

    agent = Agent(
        name="ops",
        model=GuardedModel(model, guard),
        tools=guard_tools([shell, pay], guard, refusal="message"),
    )
    Runner.run_sync(agent, "tidy up")
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    adecide_starting,
    arun_settled,
    call_key,
    inside_a_call,
    pending_approval,
    register_adapter,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action, Context, normalise_arguments
from interlock.core.decision import Decision
from interlock.core.intent import intent_hash
from interlock.errors import (
    ActionDenied,
    ActionUndetermined,
    ApprovalClosed,
    ApprovalRequired,
    Blocked,
)
from interlock.ledger.usage import Usage

try:
    from agents import (
        Agent,
        AgentHooks,
        FunctionTool,
        Model,
        ModelProvider,
        ModelResponse,
        ModelSettings,
        ModelTracing,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
    )
    from agents.exceptions import AgentsException
    from agents.handoffs import Handoff, handoff
    from agents.items import TResponseInputItem, TResponseStreamEvent
    from agents.run_context import RunContextWrapper
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseCompletedEvent
except ImportError as exc:  # the extra is missing (tests/adapters: a missing framework)
    raise ImportError(
        f"the OpenAI Agents adapter needs openai-agents ({exc}): "
        "pip install 'interlock[openai-agents]'"
    ) from exc

if TYPE_CHECKING:
    from agents.agent_output import AgentOutputSchemaBase
    from agents.items import ToolApprovalItem
    from agents.run_state import RunState
    from agents.tool import Tool
    from openai.types.responses.response_prompt_param import ResponsePromptParam

    from interlock.guard import Guard, Mapper
    from interlock.ledger.llm_call import LLMCall
    from interlock.store.records import ApprovalRecord

__all__ = [
    "ADAPTER",
    "AGENT_ADAPTER",
    "AgentAdapter",
    "FunctionToolAdapter",
    "GuardedModel",
    "GuardedModelProvider",
    "apply_interlock_decisions",
    "estimate_usage",
    "guard_handoff",
    "guard_tool",
    "guard_tools",
    "handoff_action",
    "model_name",
    "reject",
    "runner_error",
    "tool_action",
]

log = logging.getLogger("interlock")

Refusal = Literal["raise", "message"]
OnApproval = Literal["refuse", "wait", "interrupt"]
Estimator = Callable[[str | None, str | list[TResponseInputItem], ModelSettings], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4

#: Tools the provider runs: the model's request never reaches this process.
_HOSTED_TOOLS: Final = frozenset(
    {
        "FileSearchTool",
        "WebSearchTool",
        "HostedMCPTool",
        "ImageGenerationTool",
        "CodeInterpreterTool",
        "ToolSearchTool",
        "ProgrammaticToolCallingTool",
    }
)


# -- refusals the Runner re-raises as they are ------------------------------------------


class _RunnerDenied(ActionDenied, AgentsException):
    """An ``ActionDenied`` the Runner re-raises unchanged (it is an ``AgentsException``)."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message, decision=decision)
        self.run_data = None  # OSError.__init__ does not chain to AgentsException's


class _RunnerApprovalRequired(ApprovalRequired, AgentsException):
    """An ``ApprovalRequired`` the Runner re-raises unchanged."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message, decision=decision)
        self.run_data = None


class _RunnerUndetermined(ActionUndetermined, AgentsException):
    """An ``ActionUndetermined`` the Runner re-raises unchanged."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message, decision=decision)
        self.run_data = None


_RUNNER_ERRORS: Final[dict[type[Blocked], type[Blocked]]] = {
    ActionDenied: _RunnerDenied,
    ApprovalRequired: _RunnerApprovalRequired,
    ActionUndetermined: _RunnerUndetermined,
}


def runner_error(error: Blocked) -> Blocked:
    """``error`` as the same ``Blocked`` subclass that is also an ``AgentsException``,
    so the Runner lets it through instead of wrapping it in a ``UserError``."""
    twin = _RUNNER_ERRORS.get(type(error))
    if twin is None:
        return error
    converted = twin(str(error), decision=error.decision)
    converted.__cause__ = error.__cause__
    return converted


# -- one tool call as the guard sees it -------------------------------------------------


def tool_action(
    tool: FunctionTool, arguments: str | Mapping[str, Any] | None, call_id: str | None = None
) -> Action:
    """The Action for one call of ``tool``: the model's JSON arguments projected onto
    the tool's ``params_json_schema``. ``call_id`` (the model's tool call id) is kept
    for correlation only: it is not part of the intent."""
    return Action.tool(
        tool.name,
        arguments,
        schema=tool.params_json_schema,
        description=tool.description,
        context=Context(call_id=call_id) if call_id else Context(),
    )


def _function_tool(tool: object) -> FunctionTool:
    """``tool`` if it is a ``FunctionTool``; a TypeError naming it otherwise."""
    if isinstance(tool, FunctionTool):
        return tool
    kind = type(tool).__name__
    name = getattr(tool, "name", None) or kind
    if kind in _HOSTED_TOOLS:
        raise TypeError(
            f"{kind} {name!r} is a hosted tool: it runs on the provider's side, so "
            "Interlock cannot gate it. Leave it out of a guarded agent."
        )
    raise TypeError(
        f"{kind} {name!r} is not a FunctionTool: the Runner executes it without "
        "on_invoke_tool, so this adapter cannot gate it. Wrap what it does in a "
        "@function_tool instead."
    )


def _call_id(ctx: object) -> str | None:
    call_id = getattr(ctx, "tool_call_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _decision_info(decision: Decision | None) -> dict[str, Any]:
    """What the guardrail reports in ``output_info``: plain data, so a ``RunState``
    holding it still serialises (the reason is in the refusal message, redacted)."""
    if decision is None:
        return {"interlock": "pass_through"}
    return {
        "interlock": decision.verdict.value,
        "rule_ids": list(decision.rule_ids),
        "decision_id": decision.decision_id,
    }


class _ToolGate:
    """Judges the calls of one tool. Its guardrail (message style) and its
    ``on_invoke_tool`` share the gate, so a call is judged once: the guardrail holds an
    allowed decision under the call's id and arguments, and the invoker settles it."""

    def __init__(
        self,
        guard: Guard,
        tool: FunctionTool,
        mapper: Mapper | None,
        on_approval: OnApproval = "refuse",
        approval_timeout: float = 300.0,
        reviewer: str = "openai-agents-run-state",
    ) -> None:
        self.guard = guard
        self.tool = tool
        self.mapper = mapper
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self.reviewer = reviewer
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._judge_in_guardrail, name="interlock"
        )
        self._held: dict[tuple[str, str], Decision | None] = {}
        # judged by needs_approval and not put to a human: the run executes it next
        self._vetted: dict[tuple[str, str], Decision | None] = {}
        # the tool's own needs_approval, before on_approval="interrupt" joined it
        self.own_needs_approval: bool | Callable[..., Any] = tool.needs_approval

    def _key(self, call_id: str | None, arguments: Any) -> tuple[str, str]:
        return (call_id or "", call_key(self.tool.name, arguments)[1])

    async def decide(
        self, args_json: str | Mapping[str, Any], call_id: str | None, ctx: object = None
    ) -> Decision | None:
        """The verdict on one call; ``None`` when the mapper says it is not ours. With
        ``on_approval="wait"``, a call that opened (or found) a pending approval waits
        for the human, then is judged again — the identical call claims the grant once;
        a denial, or no decision in time, is the verdict then. With
        ``on_approval="interrupt"``, a pending approval that the run state approved
        (``state.approve(item)``, seen in ``ctx``) is approved in Interlock as
        ``reviewer``, and the call judged again claims it once — unless this very
        check opened it: no interruption ever showed that one."""
        started = self._store_clock()
        decision = await self._decide_once(args_json, call_id)
        approval_id = None if decision is None else pending_approval(decision)
        if approval_id is None:
            return decision
        if self.on_approval == "wait":
            await self.guard.await_approval(approval_id, self.approval_timeout)
            decision = await self._decide_once(args_json, call_id) or decision
        elif self.on_approval == "interrupt" and _approved_in_run(ctx, self.tool.name, call_id):
            approved = await asyncio.to_thread(self._approve_shown, approval_id, started, call_id)
            if approved:
                decision = await self._decide_once(args_json, call_id) or decision
        return decision

    def _store_clock(self) -> int:
        store = self.guard.store
        return store.clock() if store is not None else 0

    def _approve_shown(self, approval_id: str, started: int, call_id: str | None) -> bool:
        """Approve ``approval_id`` as the reviewer if it existed before ``started``
        (an interruption showed it); False when it did not."""
        store = self.guard.store
        if store is None or store.get_approval(approval_id).created_us >= started:
            return False
        with contextlib.suppress(ApprovalClosed):  # decided in Interlock first: that stands
            store.approve(
                approval_id,
                by=self.reviewer,
                reason=f"approved in the OpenAI Agents run state (call {call_id!r})",
            )
        return True

    async def needs_approval(
        self, ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """The tool's ``needs_approval`` (``on_approval="interrupt"``): True — the SDK
        interrupts the run with a ``ToolApprovalItem`` — when the call awaits an Interlock
        approval; otherwise its decision is kept for the execution that follows."""
        decision = await self._decide_once(params, call_id)
        if decision is not None and pending_approval(decision) is not None:
            return True
        replaced = self._vetted.pop(self._key(call_id, params), None)
        self._vetted[self._key(call_id, params)] = decision
        if replaced is not None and replaced.reservation is not None:
            await asyncio.to_thread(_release_quietly, self.guard, replaced)
        return False

    def vetted(self, call_id: str | None, arguments: Any) -> tuple[bool, Decision | None]:
        key = self._key(call_id, arguments)
        if call_id is None or key not in self._vetted:
            return False, None
        return True, self._vetted.pop(key)

    async def _decide_once(
        self, args_json: str | Mapping[str, Any], call_id: str | None
    ) -> Decision | None:
        if self.mapper is None:
            return await self.guard.acheck(tool_action(self.tool, args_json, call_id))
        arguments = normalise_arguments(args_json)
        return await self.guard.acheck_mapped(self.mapper, self.tool.name, arguments, self.tool)

    def refusal(self, decision: Decision, args_json: str, call_id: str | None) -> Blocked:
        outcome = verdict_outcome(decision, tool_action(self.tool, args_json, call_id))
        assert outcome.error is not None  # only called for a decision that is not allow
        return runner_error(outcome.error)

    async def _judge_in_guardrail(
        self, data: ToolInputGuardrailData
    ) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        call_id, args_json = ctx.tool_call_id, ctx.tool_arguments
        vetted, decision = self.vetted(call_id, args_json)
        if not vetted:
            decision = await self.decide(args_json, call_id, ctx)
        if decision is not None and not decision.allowed:
            if self._interrupts(decision, ctx, call_id):
                # the SDK's pre-approval pass: the run is about to be interrupted for it
                return ToolGuardrailFunctionOutput.allow(_decision_info(decision))
            message = str(self.refusal(decision, args_json, call_id))
            return ToolGuardrailFunctionOutput.reject_content(message, _decision_info(decision))
        await self._hold(self._key(call_id, args_json), decision)
        return ToolGuardrailFunctionOutput.allow(_decision_info(decision))

    def _interrupts(self, decision: Decision, ctx: object, call_id: str | None) -> bool:
        """Whether the SDK will put this pending call to a human (``interrupt`` mode,
        the run state has not decided it yet)."""
        if self.on_approval != "interrupt" or pending_approval(decision) is None:
            return False
        status = getattr(ctx, "is_tool_approved", None)
        return callable(status) and call_id is not None and status(self.tool.name, call_id) is None

    async def _hold(self, key: tuple[str, str], decision: Decision | None) -> None:
        # The same call judged again (the SDK's pre-approval guardrail pass, a model
        # that repeats a call id) replaces the earlier decision: give its hold back.
        replaced = self._held.pop(key, None)
        self._held[key] = decision
        if replaced is not None and replaced.reservation is not None:
            await asyncio.to_thread(_release_quietly, self.guard, replaced)

    def take(self, call_id: str | None, args_json: str) -> tuple[bool, Decision | None]:
        """``(True, decision)`` when the guardrail judged this very call (same id, same
        arguments); ``(False, None)`` when it did not, and the invoker must judge."""
        key = self._key(call_id, args_json)
        if call_id is None or key not in self._held:
            return self.vetted(call_id, args_json)
        return True, self._held.pop(key)


def _release_quietly(guard: Guard, decision: Decision) -> None:
    try:
        guard.release(decision)
    except Exception:
        log.exception("interlock: could not release the reservation of %s", decision.decision_id)


class _GatedInvoker:
    """A ``FunctionTool.on_invoke_tool`` that judges the call first and runs the tool's
    own invoker (its error handling included) on allow only, committing the decision's
    reservation after it and releasing it if it raises."""

    def __init__(
        self,
        gate: _ToolGate,
        inner: Callable[[ToolContext[Any], str], Awaitable[Any]],
        refusal: Refusal,
    ) -> None:
        self.gate = gate
        self.inner = inner
        self.refusal = refusal

    async def __call__(self, ctx: ToolContext[Any], args_json: str) -> Any:
        call_id = _call_id(ctx)
        held, decision = self.gate.take(call_id, args_json)
        started = False
        if not held:  # no guardrail judged it: never run a call unjudged
            # (its allow's commit carries the body's tool_invoke: one durable write)
            decision, started = await adecide_starting(
                self.gate.guard,
                self.gate.tool.name,
                lambda: self.gate.decide(args_json, call_id, ctx),
            )
        if decision is None:  # not ours to judge
            return await self.inner(ctx, args_json)
        if not decision.allowed:
            error = self.gate.refusal(decision, args_json, call_id)
            if self.refusal == "message":
                return str(error)  # reached without the guardrail: the model still reads it
            raise error
        key = call_key(self.gate.tool.name, args_json)
        return await arun_settled(
            self.gate.guard, decision, lambda: self.inner(ctx, args_json), key, started=started
        )

    def __agents_bind_function_tool__(self, tool: FunctionTool) -> _GatedInvoker:
        """Called by ``FunctionTool.__post_init__`` when a guarded tool is copied: the
        copy gets the tool's own invoker bound to it, behind the same gate."""
        bind = getattr(self.inner, "__agents_bind_function_tool__", None)
        inner = bind(tool) if callable(bind) else self.inner
        return self if inner is self.inner else _GatedInvoker(self.gate, inner, self.refusal)


def _gated_by(tool: FunctionTool, guard: Guard) -> _GatedInvoker | None:
    invoker = tool.on_invoke_tool
    if isinstance(invoker, _GatedInvoker) and invoker.gate.guard is guard:
        return invoker
    return None


# -- guarded copies ---------------------------------------------------------------------


def guard_tool(
    tool: FunctionTool,
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    reviewer: str = "openai-agents-run-state",
) -> FunctionTool:
    """A guarded copy of ``tool`` (name, description, schema and settings kept); ``tool``
    itself is left as it was.

    ``on_approval`` says what a call that needs a human does: ``"refuse"`` (the refusal
    above, carrying the approval's id and URL) or ``"wait"`` (the tool call waits until
    the approval is decided or ``approval_timeout`` seconds pass, then the identical
    call is judged again and claims the grant once; needs a guard with a store). For a
    human step inside the SDK's own run state, ``"interrupt"``: a call awaiting an
    Interlock approval interrupts the run with the SDK's ``ToolApprovalItem`` (the tool's
    ``needs_approval``, combined with any it had); ``state.approve(item)`` approves the
    Interlock approval as ``reviewer`` and the resumed run executes the call once;
    :func:`reject` rejects it in both (a bare ``state.reject(item)`` never runs it
    either, but runs no code of ours: the Interlock approval lapses at its TTL); an
    approval decided in Interlock meanwhile stands: :func:`apply_interlock_decisions`
    carries it into the run state, and the resumed run executes (or refuses) the call
    without asking again.

    ``refusal="raise"`` raises ``ActionDenied`` / ``ApprovalRequired`` /
    ``ActionUndetermined`` out of ``Runner.run`` (they are also ``AgentsException``, so
    the Runner does not wrap them). ``refusal="message"`` appends a ``ToolInputGuardrail``
    named ``interlock`` that rejects the call with the refusal as the tool's output, so
    the model reads it and the run goes on. A ``mapper(name, arguments, tool)`` may
    replace the default action (``None``: not ours to judge, the call runs).

    A hosted tool (``WebSearchTool``, ``FileSearchTool``, ``HostedMCPTool``, ...) runs on
    the provider's side and is a TypeError, as is any other tool that is not a
    ``FunctionTool``.
    """
    if refusal not in ("raise", "message"):
        raise ValueError(f"refusal must be 'raise' or 'message', not {refusal!r}")
    if on_approval not in ("refuse", "wait", "interrupt"):
        raise ValueError(
            f"on_approval must be 'refuse', 'wait' or 'interrupt', not {on_approval!r}"
        )
    if on_approval != "refuse" and guard.store is None:
        raise ValueError(
            f"on_approval={on_approval!r} needs a guard with a store, where approvals live"
        )
    if not approval_timeout > 0:
        raise ValueError(f"approval_timeout must be positive, not {approval_timeout!r}")
    guarded = copy.copy(_function_tool(tool))  # FunctionTool.__copy__ rebinds its invoker
    inner = guarded.on_invoke_tool
    guardrails = list(guarded.tool_input_guardrails or ())  # a new list: tool keeps its own
    own_needs_approval = guarded.needs_approval
    earlier = _gated_by(guarded, guard)
    if earlier is not None:  # re-guarding with the same guard replaces, never stacks
        inner = earlier.inner
        guardrails = [g for g in guardrails if g is not earlier.gate.guardrail]
        own_needs_approval = earlier.gate.own_needs_approval
    gate = _ToolGate(guard, guarded, mapper, on_approval, approval_timeout, reviewer)
    gate.own_needs_approval = own_needs_approval
    guarded.needs_approval = (
        _either(own_needs_approval, gate.needs_approval)
        if on_approval == "interrupt"
        else own_needs_approval
    )
    guarded.on_invoke_tool = _GatedInvoker(gate, inner, refusal)
    if refusal == "message":
        # Last, so a guardrail of the user's that rejects runs first and no allowed
        # decision is held for a call that never reaches on_invoke_tool.
        guardrails.append(gate.guardrail)
    if guardrails or guarded.tool_input_guardrails is not None:
        guarded.tool_input_guardrails = guardrails
    return guarded


def guard_tools(
    tools: Iterable[FunctionTool],
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    reviewer: str = "openai-agents-run-state",
) -> list[FunctionTool]:
    """:func:`guard_tool` for each of ``tools``, in order (a TypeError names the first
    tool that cannot be gated, before anything is copied)."""
    tools = [_function_tool(tool) for tool in tools]
    return [
        guard_tool(
            tool,
            guard,
            refusal=refusal,
            mapper=mapper,
            on_approval=on_approval,
            approval_timeout=approval_timeout,
            reviewer=reviewer,
        )
        for tool in tools
    ]


def _approved_in_run(ctx: object, tool_name: str, call_id: str | None) -> bool:
    """Whether the run state approved this call (``state.approve(item)``)."""
    status = getattr(ctx, "is_tool_approved", None)
    return callable(status) and call_id is not None and status(tool_name, call_id) is True


def _either(
    own: bool | Callable[..., Any], ours: Callable[..., Awaitable[bool]]
) -> Callable[..., Awaitable[bool]]:
    """A ``needs_approval`` that asks when the tool's own setting does or Interlock
    holds the call for a human (ours always runs: it judges the call)."""
    if own is False:
        return ours

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        held = await ours(ctx, params, call_id)
        if own is True:
            return True
        answer = own(ctx, params, call_id)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer) or held

    return needs_approval


def apply_interlock_decisions(state: RunState[Any, Any], guard: Guard) -> int:
    """Carry the decisions made in Interlock (web UI, ``interlock approvals``,
    ``store.approve`` / ``store.deny``) over to the run state's interruptions: an
    approved call is approved in the run state, a denied one rejected with the
    approver's reason. Returns how many it carried; the rest stay pending. A decision
    is matched to an interruption by the call's intent (the tool and its exact
    arguments, as the guard judges them), never by the model's call id. The resumed run
    then executes each approved call once (the identical call claims the grant) and
    never a denied one. Looks at the 100 newest decided approvals."""
    store = guard.store
    if store is None:
        raise ValueError("apply_interlock_decisions needs a guard with a store")
    decided: dict[str, ApprovalRecord] = {}
    for status in ("denied", "approved"):  # newest first: the first found stands
        for record in store.list_approvals(status=status):
            decided.setdefault(record.intent_hash, record)
    carried = 0
    for item in state.get_interruptions():
        tool = _tool_named(item)
        if tool is None:
            continue
        action = tool_action(tool, item.arguments)
        found = decided.get(
            intent_hash(action.with_context(action.context.merged_over(guard.context)))
        )
        if found is None:
            continue
        if found.status.value == "approved":
            state.approve(item)
        else:
            why = f": {found.decision_reason}" if found.decision_reason else ""
            state.reject(item, rejection_message=f"denied by {found.decided_by}{why}")
        carried += 1
    return carried


def _tool_named(item: ToolApprovalItem) -> FunctionTool | None:
    """The function tool of the item's agent that the interrupted call is for."""
    tools = getattr(item.agent, "tools", None) or []
    return next(
        (t for t in tools if isinstance(t, FunctionTool) and t.name == item.tool_name), None
    )


def reject(
    state: RunState[Any, Any],
    item: ToolApprovalItem,
    guard: Guard,
    *,
    rejection_message: str | None = None,
    by: str = "openai-agents-run-state",
) -> None:
    """``state.reject(item)``, and deny the Interlock approval the call awaits, as
    ``by``: the SDK runs no code of ours for a rejected call, so this is where
    Interlock learns of it. The resumed run never executes the call; the model reads
    ``rejection_message`` (or the SDK's default)."""
    state.reject(item, rejection_message=rejection_message)
    tool = _tool_named(item)
    store = guard.store
    if tool is None or store is None:
        return
    decision = guard.check(
        tool_action(tool, item.arguments, getattr(item.raw_item, "call_id", None))
    )
    approval_id = pending_approval(decision)
    if approval_id is not None:
        with contextlib.suppress(ApprovalClosed):
            store.deny(approval_id, by=by, reason=rejection_message or "rejected in the run state")


def _guarded_list(tools: Iterable[Tool], guard: Guard) -> list[Tool]:
    """Guarded copies (raise style) of ``tools``; one already gated by ``guard`` stays."""
    checked = [_function_tool(tool) for tool in tools]
    return [tool if _gated_by(tool, guard) else guard_tool(tool, guard) for tool in checked]


# -- handoffs: a transfer to another agent is an action too -------------------------------

#: The scope of a handoff action (a custom scope: rules match it with ``scope: handoff``).
HANDOFF_SCOPE: Final = "handoff"


def handoff_action(target: Handoff[Any, Any], input_json: str | None = None) -> Action:
    """The Action for one handoff: ``kind: tool`` named by the tool the model calls
    (``transfer_to_<agent>``), ``scope: handoff``, ``target: agent:<name>``, the
    model's input (if the handoff takes one) as arguments."""
    return Action.tool(
        target.tool_name,
        input_json or {},
        schema=target.input_json_schema or None,
        description=target.tool_description,
        target=f"agent:{target.agent_name}",
        scope=HANDOFF_SCOPE,
    )


class _GatedHandoff:
    """A ``Handoff.on_invoke_handoff`` that judges the handoff first and transfers on
    allow only; a refusal raises (a handoff returns an agent: there is no message for
    the model to read), as an error the Runner lets through."""

    def __init__(
        self,
        guard: Guard,
        target: Handoff[Any, Any],
        inner: Callable[[RunContextWrapper[Any], str], Awaitable[Any]],
    ) -> None:
        self.guard = guard
        self.target = target
        self.inner = inner

    async def __call__(self, ctx: RunContextWrapper[Any], input_json: str) -> Any:
        action = handoff_action(self.target, input_json)
        decision, started = await adecide_starting(
            self.guard, self.target.tool_name, lambda: self.guard.acheck(action)
        )
        outcome = verdict_outcome(decision, action)
        if outcome.error is not None:
            raise runner_error(outcome.error)
        key = call_key(self.target.tool_name, input_json or {})
        return await arun_settled(
            self.guard, decision, lambda: self.inner(ctx, input_json), key, started=started
        )


def guard_handoff(target: Agent[Any] | Handoff[Any, Any], guard: Guard) -> Handoff[Any, Any]:
    """A guarded copy of a handoff (an ``Agent`` becomes ``handoff(agent)`` first):
    every transfer is judged as :func:`handoff_action` and a refusal raises out of
    ``Runner.run``. Put it in ``Agent(handoffs=[...])``; ``guard.attach(agent)`` does
    it for every handoff the agent has."""
    made = handoff(target) if isinstance(target, Agent) else target
    inner = made.on_invoke_handoff
    if isinstance(inner, _GatedHandoff):
        if inner.guard is guard:
            return made
        inner = inner.inner
    guarded = copy.copy(made)
    guarded.on_invoke_handoff = _GatedHandoff(guard, guarded, inner)
    return guarded


def _handoff_guarded(target: object, guard: Guard | None) -> bool:
    invoker = getattr(target, "on_invoke_handoff", None)
    return isinstance(invoker, _GatedHandoff) and (guard is None or invoker.guard is guard)


def handoff_binding(
    target: Agent[Any] | Handoff[Any, Any], guard: Guard | None, **where: Any
) -> ToolBinding:
    """How the guard sees one handoff of an agent."""
    if isinstance(target, Agent):
        return ToolBinding(
            f"handoff:{target.name}",
            f"a handoff to agent {target.name!r}",
            None,
            guarded=False,
            note="a plain Agent in handoffs: guard.attach(agent) or guard_handoff() gates it",
            **where,
        )
    return ToolBinding(
        target.tool_name,
        f"a handoff to agent {target.agent_name!r}",
        dict(target.input_json_schema or {}),
        target.on_invoke_handoff,
        guarded=_handoff_guarded(target, guard),
        note=f"the transfer is judged; agent {target.agent_name!r}'s own tools and model "
        "only if that agent is guarded too",
        **where,
    )


# -- model calls: checked and reserved before, committed from real usage after ----------


def model_name(model: Model) -> str:
    """The model's name as pricing knows it (the ``model`` attribute of the SDK's own
    models), else its class name."""
    for attr in ("model", "model_name", "name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def estimate_usage(
    system_instructions: str | None,
    input: str | list[TResponseInputItem],
    model_settings: ModelSettings,
) -> Usage:
    """A reservation for one model request: the instructions' and input's characters / 4
    as input tokens, ``model_settings.max_tokens`` (when set) as output tokens."""
    text = input if isinstance(input, str) else json.dumps(input, default=str)
    chars = len(text) + len(system_instructions or "")
    ceiling = model_settings.max_tokens
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(chars / CHARS_PER_TOKEN), max(output, 0))


#: The roles of input items that are the user's or the operator's words.
_TRUSTED_ROLES: Final = frozenset({"user", "system", "developer"})


def _trusted_inputs(
    system_instructions: str | None, input: str | list[TResponseInputItem]
) -> Iterator[Input]:
    """The instructions and the user's, system and developer messages of one model
    request: not tool outputs, the model's messages, or the summary of the history the
    SDK writes at a handoff (an assistant message). Text parts only."""
    if system_instructions:
        yield Input("system", system_instructions)
    items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else input
    for item in items:
        if not isinstance(item, Mapping) or item.get("role") not in _TRUSTED_ROLES:
            continue
        if item.get("type", "message") != "message":
            continue
        role, content = str(item["role"]), item.get("content")
        if isinstance(content, str):
            yield Input(role, content, id=item.get("id"))
            continue
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and part.get("type") == "input_text":
                yield Input(role, str(part.get("text", "")))


async def _arecord_inputs(
    guard: Guard, system_instructions: str | None, input: str | list[TResponseInputItem]
) -> None:
    """Record the trusted inputs of one model request — not inside the body of a tool
    call (an agent run as a tool: its input is what the calling model wrote)."""
    if not records_inputs(guard) or inside_a_call(guard):
        return
    inputs = inputs_of(guard)
    found = inputs.fresh(guard, _trusted_inputs(system_instructions, input))
    if found:  # the history may be SQL: off the event loop
        await asyncio.to_thread(inputs.record, guard, found)


class _RecordingHooks(AgentHooks[Any]):
    """An agent's ``hooks``, recording the trusted inputs of each model request in
    ``on_llm_start`` (the SDK awaits it before the model is called); every hook is
    also the agent's own (``inner``), when it had some."""

    def __init__(self, inner: AgentHooks[Any] | None, guard: Guard) -> None:
        self.inner = inner
        self.guard = guard

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        await _arecord_inputs(self.guard, system_prompt, input_items)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


def _record_usage(call: LLMCall, usage: object) -> None:
    """Record what the provider reported; a response with no token counts keeps the
    estimate (the call happened, and its cost is not known to be lower)."""
    if usage is None:
        return
    try:
        reported = Usage.of(usage)
    except ValueError:
        return
    if reported.total:
        call.record(reported)


async def _aclose(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if callable(close):
        await close()


class GuardedModel(Model):
    """A ``Model`` whose every call is judged as an ``llm`` action named after the model
    and reserved on the policy's budgets before ``model`` runs; the ``usage`` it reports
    is committed after (released if it raises or the stream is abandoned). A refused
    call raises the ``Blocked`` error (an ``AgentsException`` too) and never reaches
    ``model``.

    ``name`` is the model name for rules and pricing (default: ``model.model``);
    ``estimate(system_instructions, input, model_settings)`` gives the reservation
    (default :func:`estimate_usage`).

    Example::

        agent = Agent(name="ops", model=GuardedModel(OpenAIResponsesModel(...), guard))
    """

    def __init__(
        self,
        model: Model,
        guard: Guard,
        *,
        name: str | None = None,
        estimate: Estimator | None = None,
    ) -> None:
        self.wrapped = model
        self.guard = guard
        self.model_name = name or model_name(model)
        self.estimate = estimate or estimate_usage
        self._inputs = inputs_of(guard)

    async def _record_inputs(
        self, system_instructions: str | None, input: str | list[TResponseInputItem]
    ) -> None:
        await _arecord_inputs(self.guard, system_instructions, input)

    def _llm_call(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
    ) -> LLMCall:
        estimate = self.estimate(system_instructions, input, model_settings)
        return self.guard.llm_call(self.model_name, estimate=estimate)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
        **kwargs: Any,
    ) -> ModelResponse:
        await self._record_inputs(system_instructions, input)
        try:
            async with self._llm_call(system_instructions, input, model_settings) as call:
                response = await self.wrapped.get_response(
                    system_instructions,
                    input,
                    model_settings,
                    tools,
                    output_schema,
                    handoffs,
                    tracing,
                    previous_response_id=previous_response_id,
                    conversation_id=conversation_id,
                    prompt=prompt,
                    **kwargs,
                )
                _record_usage(call, response.usage)
        except Blocked as exc:
            raise runner_error(exc) from exc.__cause__
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        await self._record_inputs(system_instructions, input)
        call = self._llm_call(system_instructions, input, model_settings)
        try:
            await call.__aenter__()  # before the first event: a refusal calls nothing
        except Blocked as exc:
            raise runner_error(exc) from exc.__cause__
        stream = self.wrapped.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
            **kwargs,
        )
        completed = False
        failure: BaseException | None = None
        try:
            async for event in stream:
                if isinstance(event, ResponseCompletedEvent):
                    _record_usage(call, event.response.usage)
                    completed = True
                yield event
        except BaseException as exc:
            # Closed after the completed event: the call happened and is spent.
            failure = None if completed and isinstance(exc, GeneratorExit) else exc
            raise
        finally:
            await _aclose(stream)
            await call.__aexit__(type(failure) if failure else None, failure, None)

    def get_retry_advice(self, request: Any) -> Any:
        """Never retry a refusal (it is an abort, which no retry policy can override);
        anything else is the wrapped model's to advise on."""
        if isinstance(request.error, Blocked):
            from agents.retry import ModelRetryAdvice, ModelRetryNormalizedError

            return ModelRetryAdvice(
                suggested=False,
                reason=str(request.error),
                normalized=ModelRetryNormalizedError(is_abort=True),
            )
        advise = getattr(self.wrapped, "get_retry_advice", None)
        return advise(request) if callable(advise) else None

    def _supports_default_prompt_cache_key(self) -> bool:
        supports = getattr(self.wrapped, "_supports_default_prompt_cache_key", None)
        return bool(supports()) if callable(supports) else False

    async def _cleanup_on_run_end(self, owner: object) -> None:
        cleanup = getattr(self.wrapped, "_cleanup_on_run_end", None)
        if callable(cleanup):
            await cleanup(owner)

    async def close(self) -> None:
        close = getattr(self.wrapped, "close", None)
        if callable(close):
            await close()


class GuardedModelProvider(ModelProvider):
    """A ``ModelProvider`` whose models are :class:`GuardedModel`: for agents that name
    their model as a string. ``RunConfig(model_provider=GuardedModelProvider(...))``."""

    def __init__(
        self, provider: ModelProvider, guard: Guard, *, estimate: Estimator | None = None
    ) -> None:
        self.wrapped = provider
        self.guard = guard
        self.estimate = estimate

    def get_model(self, model_name: str | None) -> Model:
        model = self.wrapped.get_model(model_name)
        if isinstance(model, GuardedModel) and model.guard is self.guard:
            return model
        return GuardedModel(model, self.guard, name=model_name, estimate=self.estimate)

    async def aclose(self) -> None:
        close = getattr(self.wrapped, "aclose", None)
        if callable(close):
            await close()


# -- attach / detach ----------------------------------------------------------------------


class FunctionToolAdapter(Adapter):
    """Guards a ``FunctionTool`` in place at ``on_invoke_tool`` (raise style). The SDK
    has no hook that every run of a tool passes besides this dataclass field itself —
    guardrails run only inside the Runner — so this is the one patch; it is per tool."""

    framework = "openai-agents"
    distribution = "openai-agents"
    supported = ("0.24", "0.25")
    extra = "openai-agents"
    targets = (PatchTarget(FunctionTool, "on_invoke_tool"),)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        if isinstance(original, _GatedInvoker) and original.gate.guard is guard:
            return original  # a guarded copy: judging it twice would record it twice
        return _GatedInvoker(_ToolGate(guard, obj, None), original, "raise")

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [tool_binding(obj, guard, owner=obj, attr="on_invoke_tool")]


def _guarded(tool: FunctionTool, guard: Guard | None) -> bool:
    invoker = tool.on_invoke_tool
    return isinstance(invoker, _GatedInvoker) and (guard is None or invoker.gate.guard is guard)


def tool_binding(tool: Tool, guard: Guard | None, **where: Any) -> ToolBinding:
    """How the guard sees one tool of the SDK (hosted tools: never guarded)."""
    name = str(getattr(tool, "name", type(tool).__name__))
    if not isinstance(tool, FunctionTool):
        return ToolBinding(
            name,
            None,
            None,
            guarded=False,
            note=f"a {type(tool).__name__} does not run through on_invoke_tool: "
            "nothing in this process can gate it",
            **where,
        )
    return ToolBinding(
        tool.name,
        tool.description or None,
        dict(tool.params_json_schema),
        tool.on_invoke_tool,
        guarded=_guarded(tool, guard),
        **where,
    )


class AgentAdapter(Adapter):
    """Guards every tool of an ``Agent`` (raise style): ``tools`` becomes a list of
    guarded copies, the tools its MCP servers list at run time (``get_mcp_tools``)
    are guarded as they arrive, and every handoff is judged before the transfer
    (:func:`guard_handoff`). A hosted tool in ``tools`` is a TypeError, and then
    nothing is patched."""

    framework = "openai-agents-agent"
    distribution = "openai-agents"
    supported = ("0.24", "0.25")
    extra = "openai-agents"
    targets = (
        PatchTarget(Agent, "tools"),
        PatchTarget(Agent, "get_mcp_tools"),
        PatchTarget(Agent, "handoffs"),
        PatchTarget(Agent, "hooks"),
    )

    inspects_models = True

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """Its ``tools``, its handoffs (named by the tool the model calls), and one
        binding per MCP server for the tools it lists at run time (guarded when
        ``guard.attach(agent)`` holds ``get_mcp_tools``)."""
        agent: Agent[Any] = obj
        bindings = [
            tool_binding(tool, guard, container=agent.tools, key=index)
            for index, tool in enumerate(agent.tools)
        ]
        bindings.extend(
            handoff_binding(h, guard, container=agent.handoffs, key=index)
            for index, h in enumerate(agent.handoffs)
        )
        for server in agent.mcp_servers:
            bindings.append(
                ToolBinding(
                    f"mcp:{server.name}",
                    "the tools this MCP server lists at run time",
                    None,
                    owner=agent,
                    attr="get_mcp_tools",
                    guarded=self.guarded_by(agent, guard),
                )
            )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        """Its ``model``: guarded when it is a :class:`GuardedModel` of ``guard``. A
        model named by a string (or none) is resolved by the run's model provider,
        which the agent does not know."""
        agent: Agent[Any] = obj
        model = agent.model
        if isinstance(model, Model):
            guarded = isinstance(model, GuardedModel) and (guard is None or model.guard is guard)
            label = model_name(model.wrapped if isinstance(model, GuardedModel) else model)
            call = model.get_response
            return [LLMBinding(label, call, owner=agent, attr="model", guarded=guarded)]
        return [
            LLMBinding(
                model or "(the run's default)",
                owner=agent,
                attr="model",
                guarded=False,
                note="resolved by the run's model provider: pass "
                "RunConfig(model_provider=GuardedModelProvider(provider, guard))",
            )
        ]

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        if target.attr == "tools":
            return _guarded_list(original, guard)
        if target.attr == "handoffs":
            return [guard_handoff(h, guard) for h in original]
        if target.attr == "hooks":  # the SDK's own hook: the trusted inputs of the session
            return _RecordingHooks(original, guard)
        list_mcp_tools: Callable[[RunContextWrapper[Any]], Awaitable[list[Tool]]] = original

        async def get_mcp_tools(run_context: RunContextWrapper[Any]) -> list[Tool]:
            return _guarded_list(await list_mcp_tools(run_context), guard)

        return get_mcp_tools


ADAPTER = register_adapter(FunctionToolAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
