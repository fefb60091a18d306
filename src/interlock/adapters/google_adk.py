"""The Google ADK adapter (``google-adk``).

Two ways in, both ADK's own extension points (nothing is patched):

- :class:`InterlockPlugin` — a runner-wide ``BasePlugin``:
  ``Runner(..., plugins=[InterlockPlugin(guard)])``. Every tool call of every agent the
  runner drives (sub-agents and ``AgentTool`` runs that inherit the runner's plugins
  included) is judged in ``before_tool_callback``; every model call is judged and
  reserved on the policy's budgets in ``before_model_callback``, committed from the
  response's ``usage_metadata`` in ``after_model_callback`` (once: at the response that
  is not a streamed fragment) and released in ``on_model_error_callback``. Plugins run
  before an agent's own callbacks and a plugin that answers a call short-circuits
  them, so no agent callback can run a call the plugin refused.
- :func:`guard_agent` — for users who do not own the ``Runner``: the same gate as the
  agent's own ``before_tool_callback`` / ``before_model_callback`` / ... composed with
  the callbacks already set (the gate runs *last* among the before-callbacks, so it
  judges the arguments the tool will receive, and first among the after-callbacks).
  ``guard.attach(agent)`` does this raise style; ``guard.detach(agent)`` restores the
  callbacks exactly.

Refusals: ``refusal="message"`` (the plugin's default) answers the call with
``{"error": ..., "interlock": verdict}``, which the model reads, and the loop goes on;
``refusal="raise"`` raises ``ActionDenied`` / ``ApprovalRequired`` /
``ActionUndetermined``. ADK wraps every exception a *plugin* raises in a
``RuntimeError("Error in plugin ...")`` with the refusal as its ``__cause__``
(:func:`refusal_of` finds it); the agent callbacks of :func:`guard_agent` raise the
refusal itself out of ``Runner.run_async``.

Approvals: ``on_approval="confirm"`` bridges a ``require_approval`` verdict to ADK's
tool confirmation: the call is answered with ``tool_context.request_confirmation(...)``
(the run pauses on ``adk_request_confirmation``); the user's confirmation decides the
Interlock approval (approve or deny, by ``adk-confirmation``) and the resumed call is
judged again, so it runs only on the grant; an approval already decided in Interlock
decides the resumed call the same way.

Example::

    from google.adk.runners import InMemoryRunner
    from interlock.adapters.google_adk import InterlockPlugin

    runner = InMemoryRunner(agent=agent, plugins=[InterlockPlugin(guard)])
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    CallKey,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    _Attached,
    call_key,
    pending_approval,
    register_adapter,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action, Context, normalise_arguments
from interlock.core.decision import Decision
from interlock.errors import Blocked
from interlock.ledger.usage import Usage

try:
    from google.adk.agents import LlmAgent
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.agent_tool import AgentTool
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.function_tool import FunctionTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the Google ADK adapter needs google-adk ({exc}): pip install 'interlock[google-adk]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard, Mapper
    from interlock.ledger.llm_call import LLMCall

__all__ = [
    "ADAPTER",
    "AgentAdapter",
    "InterlockPlugin",
    "estimate_usage",
    "guard_agent",
    "refusal_of",
    "tool_action",
    "unguard_agent",
    "usage_of",
]

log = logging.getLogger("interlock")

Refusal = Literal["raise", "message"]
OnApproval = Literal["refuse", "wait", "confirm"]
Estimator = Callable[[LlmRequest], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4

#: Who decides an Interlock approval when the ADK user confirms or rejects the call.
CONFIRMED_BY: Final = "adk-confirmation"

#: Tools whose work the model provider does: the call never reaches this process.
_SERVER_SIDE_TOOLS: Final = frozenset(
    {
        "GoogleSearchTool",
        "EnterpriseWebSearchTool",
        "VertexAiSearchTool",
        "UrlContextTool",
        "GoogleMapsGroundingTool",
        "BuiltInCodeExecutionTool",
    }
)


# -- one tool call as the guard sees it --------------------------------------------------


#: Declared schemas, by tool (a plain function's ``FunctionTool``, which ADK builds anew
#: every turn, by its function): building a declaration costs tens of microseconds.
_SCHEMAS: Final[weakref.WeakKeyDictionary[Any, dict[str, Any] | None]] = weakref.WeakKeyDictionary()


def _schema(tool: BaseTool) -> dict[str, Any] | None:
    """The JSON Schema of ``tool``'s arguments, from its function declaration."""
    key = tool.func if type(tool) is FunctionTool else tool
    try:
        return _SCHEMAS[key]
    except (KeyError, TypeError):  # not seen yet, or a key no weak reference can hold
        pass
    schema = _declared_schema(tool)
    with contextlib.suppress(TypeError):
        _SCHEMAS[key] = schema
    return schema


def _declared_schema(tool: BaseTool) -> dict[str, Any] | None:
    try:
        declaration = tool._get_declaration()
    except Exception:  # a tool that cannot declare itself: no projection
        return None
    if declaration is None:
        return None
    raw = declaration.parameters_json_schema
    if isinstance(raw, Mapping):
        return dict(raw)
    if declaration.parameters is not None:
        properties = declaration.parameters.properties or {}
        return {"type": "object", "properties": {name: {} for name in properties}}
    return None


def tool_action(tool: BaseTool, arguments: Mapping[str, Any], call_id: str | None = None) -> Action:
    """The Action for one call of ``tool``: its arguments projected onto its declared
    parameters. ``call_id`` (the model's function call id) is kept for correlation."""
    return Action.tool(
        tool.name,
        dict(arguments),
        schema=_schema(tool),
        description=tool.description or None,
        context=Context(call_id=call_id) if call_id else Context(),
    )


def refusal_of(error: BaseException) -> Blocked | None:
    """The Interlock refusal behind ``error``: itself, or the ``__cause__`` of the
    ``RuntimeError`` ADK wraps a plugin's exception in; ``None`` when there is none."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, Blocked):
            return seen
        seen = seen.__cause__
    return None


# -- model calls: estimate, usage -------------------------------------------------------


def estimate_usage(request: LlmRequest) -> Usage:
    """A reservation for one model request: its contents' and instruction's characters
    / 4 as input tokens, ``config.max_output_tokens`` (when set) as output tokens."""
    parts = [content.model_dump_json(exclude_none=True) for content in request.contents]
    config = request.config
    instruction = config.system_instruction if config is not None else None
    chars = sum(len(p) for p in parts) + len(json.dumps(instruction, default=str))
    ceiling = config.max_output_tokens if config is not None else None
    output = ceiling if isinstance(ceiling, int) and ceiling > 0 else 0
    return Usage(math.ceil(chars / CHARS_PER_TOKEN), output)


def usage_of(metadata: types.GenerateContentResponseUsageMetadata | None) -> Usage | None:
    """Gemini's usage as input / output tokens (tool-use prompt tokens are input;
    thinking tokens are output, as they are billed); ``None`` when it counts nothing."""
    if metadata is None:
        return None
    tokens_in = (metadata.prompt_token_count or 0) + (metadata.tool_use_prompt_token_count or 0)
    tokens_out = (metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0)
    if not tokens_in and not tokens_out:
        return None
    return Usage(tokens_in, tokens_out)


def _model_label(model: object) -> str:
    if isinstance(model, BaseLlm):
        return model.model
    if isinstance(model, str) and model:
        return model
    return "(inherited)"


# -- the gate both ways in share --------------------------------------------------------

#: The call a gate allowed: its guard, its key and its very ``ToolContext`` (the one
#: object the plugin and the agent callbacks of one call share). The agent gate of the
#: same guard does not judge that call again unless a callback in between changed its
#: arguments; any other call, identical or not, has another ``ToolContext``.
_ALLOWED: contextvars.ContextVar[tuple[int, CallKey, object] | None] = contextvars.ContextVar(
    "interlock_adk_allowed", default=None
)


def _allowed_here(
    guard: Guard, tool: BaseTool, args: Mapping[str, Any], tool_context: object
) -> bool:
    """Whether ``guard`` already allowed this very call, with these arguments."""
    marker = _ALLOWED.get()
    return (
        marker is not None
        and marker[2] is tool_context
        and marker[0] == id(guard)
        and marker[1] == call_key(tool.name, args)
    )


#: Set in the task of an ``AgentTool`` call (ADK runs each call in a task of its own),
#: so seen by the run of the wrapped agent: that run's "user message" is the request
#: the parent *model* wrote — not the user's words, never recorded as trusted.
_IN_AGENT_TOOL: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "interlock_adk_in_agent_tool", default=False
)


def _trusted_inputs(callback_context: CallbackContext) -> Iterator[Input]:
    """The agent's own instructions, as written (a template: not filled in from the
    session state, which tools and models write), and the text of the user's message
    that started the run. A callable instruction is code, not text: not recorded."""
    # ADK's CallbackContext exposes the agent's name, not the agent: the one private read
    invocation = getattr(callback_context, "_invocation_context", None)
    agent = getattr(invocation, "agent", None)
    for attr in ("global_instruction", "static_instruction", "instruction"):
        instruction = getattr(agent, attr, None)
        if isinstance(instruction, str):
            yield Input("system", instruction)
    content = callback_context.user_content
    if content is not None and content.role in (None, "user"):
        for part in content.parts or ():
            if part.text and not part.thought:
                yield Input("user", part.text)


@dataclass(slots=True)
class _Held:
    """What waits to be settled — an allowed tool decision, or a model call under way —
    with the object whose identity keys it (kept alive) and the run it belongs to."""

    owner: object
    invocation_id: str
    settle: Decision | LLMCall
    #: the session steps the decision's outcome settles, claimed when it was allowed
    #: (the guard's table of pending steps forgets the oldest: a slow tool keeps its own)
    claimed: Sequence[tuple[str, tuple[str, str]]] = ()


class _Gate:
    """Judges tool calls and model calls for one guard; holds what must be settled."""

    def __init__(
        self,
        guard: Guard,
        *,
        refusal: Refusal,
        mapper: Mapper | None,
        on_approval: OnApproval,
        approval_timeout: float,
        models: bool,
        estimate: Estimator | None,
    ) -> None:
        self.guard = guard
        self.refusal = refusal
        self.mapper = mapper
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self.models = models
        self.estimate = estimate or estimate_usage
        # One plugin serves every run of its runner, concurrent ones included: what is
        # held is keyed by its own objects and swept per run.
        self._tools: dict[int, _Held] = {}
        self._calls: dict[int, _Held] = {}
        self._inputs = inputs_of(guard)

    # -- tools --------------------------------------------------------------------------

    async def _decide(
        self, tool: BaseTool, args: dict[str, Any], call_id: str | None
    ) -> Decision | None:
        if self.mapper is None:
            return await self.guard.acheck(tool_action(tool, args, call_id))
        arguments = normalise_arguments(dict(args))
        return await self.guard.acheck_mapped(self.mapper, tool.name, arguments, tool)

    async def before_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """``None``: the call may run (held for settling); a dict: ADK's answer to it;
        raises the refusal in raise style."""
        if isinstance(tool, AgentTool):
            _IN_AGENT_TOOL.set(True)
        if _allowed_here(self.guard, tool, args, tool_context):
            return None  # the plugin of this guard allowed this very call
        call_id = tool_context.function_call_id
        confirmation = tool_context.tool_confirmation
        decision = await self._decide(tool, args, call_id)
        approval_id = None if decision is None else pending_approval(decision)
        if approval_id is not None and self.on_approval == "wait":
            await self.guard.await_approval(approval_id, self.approval_timeout)
            decision = await self._decide(tool, args, call_id) or decision
        elif self.on_approval == "confirm" and decision is not None:
            answer = await self._bridge(tool, args, tool_context, decision, confirmation)
            if isinstance(answer, dict):
                return answer
            decision = answer
        if decision is None:  # not ours to judge
            return None
        if not decision.allowed:
            return self._refuse(decision, tool, args, call_id)
        sessions = self.guard._sessions
        claimed = sessions.claim(decision) if sessions is not None else ()
        self._tools[id(tool_context)] = _Held(
            tool_context, tool_context.invocation_id, decision, claimed
        )
        _ALLOWED.set((id(self.guard), call_key(tool.name, args), tool_context))
        return None

    async def _bridge(
        self,
        tool: BaseTool,
        args: dict[str, Any],
        tool_context: ToolContext,
        decision: Decision,
        confirmation: Any,
    ) -> Decision | dict[str, Any]:
        """ADK's tool confirmation as the Interlock approval of this call."""
        approval_id = pending_approval(decision)
        if confirmation is None:
            if approval_id is None:
                return decision
            message = str(verdict_outcome(decision).message)
            tool_context.request_confirmation(
                hint=message, payload={"interlock_approval": approval_id}
            )
            return {"error": message, "interlock": decision.verdict.value}
        if approval_id is not None:
            store = self.guard.store
            if store is None:  # a remote guard: the server's UI decides, not ADK
                return decision
            decide = store.approve if confirmation.confirmed else store.deny
            reason = "confirmed in ADK" if confirmation.confirmed else "rejected in ADK"
            await asyncio.to_thread(decide, approval_id, by=CONFIRMED_BY, reason=reason)
            decision = await self._decide(tool, args, tool_context.function_call_id) or decision
        if not confirmation.confirmed and decision.allowed:
            # The human in ADK said no: the call does not run, whatever else decided it.
            await self._settle_tool(_Held(tool_context, "", decision), spent=False)
            return {"error": "This tool call was rejected.", "interlock": "rejected"}
        return decision

    def _refuse(
        self, decision: Decision, tool: BaseTool, args: dict[str, Any], call_id: str | None
    ) -> dict[str, Any]:
        outcome = verdict_outcome(decision, tool_action(tool, args, call_id))
        assert outcome.error is not None  # only called for a decision that is not allow
        if self.refusal == "raise":
            raise outcome.error
        return {"error": outcome.message, "interlock": decision.verdict.value}

    async def after_tool(
        self, tool_context: ToolContext, *, spent: bool, result: object = None
    ) -> None:
        """Settle the call: its reservation, and its session step with what the tool
        returned (its fingerprints: a value the model copies from it later is known to
        come from this call) or the error it raised."""
        held = self._tools.pop(id(tool_context), None)
        if held is not None:
            await self._settle_tool(held, spent=spent, result=result)

    async def _settle_tool(self, held: _Held, *, spent: bool, result: object = None) -> None:
        decision = held.settle
        if not isinstance(decision, Decision):
            return
        sessions = self.guard._sessions
        if sessions is not None:  # the history may be SQL: off the event loop
            await asyncio.to_thread(
                functools.partial(
                    sessions.settle, decision, executed=spent, result=result, claimed=held.claimed
                )
            )
        if decision.reservation is None:
            return
        settle = self.guard.commit if spent else self.guard.release
        try:
            await asyncio.to_thread(settle, decision)
        except Exception:
            log.exception("interlock: could not settle %s", decision.decision_id)

    # -- models -------------------------------------------------------------------------

    async def before_model(
        self, callback_context: CallbackContext, request: LlmRequest
    ) -> LlmResponse | None:
        if records_inputs(self.guard) and not _IN_AGENT_TOOL.get():
            found = self._inputs.fresh(self.guard, _trusted_inputs(callback_context))
            if found:  # the history may be SQL: off the event loop
                await asyncio.to_thread(self._inputs.record, self.guard, found)
        if not self.models:
            return None
        name = request.model or _model_label(getattr(callback_context, "agent", None))
        call = self.guard.llm_call(name, estimate=self.estimate(request))
        try:
            await call.__aenter__()
        except Blocked as refusal:
            if self.refusal == "raise":
                raise
            return LlmResponse(
                content=types.Content(role="model", parts=[types.Part(text=str(refusal))]),
                error_code=f"INTERLOCK_{refusal.decision.verdict.value.upper()}",
                error_message=str(refusal),
                turn_complete=True,
            )
        actions = callback_context.actions  # the same object in the after/error callbacks
        self._calls[id(actions)] = _Held(actions, callback_context.invocation_id, call)
        return None

    async def after_model(self, callback_context: CallbackContext, response: LlmResponse) -> None:
        key = id(callback_context.actions)
        held = self._calls.get(key)
        if held is None or held.owner is not callback_context.actions:
            return
        call = held.settle
        assert not isinstance(call, Decision)
        usage = usage_of(response.usage_metadata)
        if usage is not None:
            call.record(usage)
        if response.partial:  # a streamed fragment: the call goes on
            return
        del self._calls[key]
        await call.__aexit__(None, None, None)

    async def model_failed(self, callback_context: CallbackContext, error: BaseException) -> None:
        held = self._calls.pop(id(callback_context.actions), None)
        if held is not None and not isinstance(held.settle, Decision):
            await held.settle.__aexit__(type(error), error, None)

    async def sweep(self, invocation_id: str) -> None:
        """Settle what no after-callback of this run settled (a plugin registered
        before this one answered the after-callback, a stream left half-read): the
        call happened, so it is committed — a model call with the usage it reported,
        else what it reserved (its cost is not known to be lower). A call that failed
        was released by the error callback already. Other runs' holds stay."""
        for held in _take(self._calls, invocation_id):
            if not isinstance(held.settle, Decision):
                await held.settle.__aexit__(None, None, None)
        for held in _take(self._tools, invocation_id):
            await self._settle_tool(held, spent=True)


def _take(holds: dict[int, _Held], invocation_id: str) -> list[_Held]:
    """Remove and return the holds of one run."""
    keys = [key for key, held in holds.items() if held.invocation_id == invocation_id]
    return [holds.pop(key) for key in keys]


# -- the runner-wide plugin --------------------------------------------------------------


class InterlockPlugin(BasePlugin):
    """Judges every tool call and model call of the runner it is given to.

    ``refusal`` (``"message"``: the model reads it; ``"raise"``: the refusal comes out
    of ``run_async`` wrapped in ADK's plugin ``RuntimeError``, see :func:`refusal_of`),
    ``mapper`` (a :class:`~interlock.guard.Mapper` instead of the default action),
    ``on_approval`` (``"refuse"``, ``"wait"`` for the human, ``"confirm"`` through
    ADK's tool confirmation), ``models`` (``False``: tool calls only), ``estimate``
    (the reservation of one ``LlmRequest``, default :func:`estimate_usage`).

    Example::

        runner = Runner(agent=agent, app_name="ops", session_service=sessions,
                        plugins=[InterlockPlugin(guard, refusal="message")])
    """

    def __init__(
        self,
        guard: Guard,
        *,
        refusal: Refusal = "message",
        mapper: Mapper | None = None,
        on_approval: OnApproval = "refuse",
        approval_timeout: float = 300.0,
        models: bool = True,
        estimate: Estimator | None = None,
        name: str = "interlock",
    ) -> None:
        super().__init__(name=name)
        self.guard = guard
        self.gate = _Gate(
            guard,
            refusal=refusal,
            mapper=mapper,
            on_approval=on_approval,
            approval_timeout=approval_timeout,
            models=models,
            estimate=estimate,
        )

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return await self.gate.before_tool(tool, tool_args, tool_context)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        await self.gate.after_tool(tool_context, spent=True, result=result)
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        await self.gate.after_tool(tool_context, spent=False, result=error)
        return None

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        return await self.gate.before_model(callback_context, llm_request)

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        await self.gate.after_model(callback_context, llm_response)
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        await self.gate.model_failed(callback_context, error)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        await self.gate.sweep(invocation_context.invocation_id)


# -- per-agent callbacks ------------------------------------------------------------------

#: The callback fields of an ``LlmAgent`` the gate joins, and where it goes in each:
#: last among the before-callbacks (it judges what the tool or model will receive, and
#: a callback of the user's that answers the call first means nothing runs), first among
#: the after- and error-callbacks (an earlier one that answers would skip it).
_FIELDS: Final = (
    ("before_tool_callback", "last"),
    ("after_tool_callback", "first"),
    ("on_tool_error_callback", "first"),
    ("before_model_callback", "last"),
    ("after_model_callback", "first"),
    ("on_model_error_callback", "first"),
    ("after_agent_callback", "first"),
)


class _AgentCallbacks:
    """The gate as plain agent callbacks (``LlmAgent`` calls them by keyword)."""

    def __init__(self, gate: _Gate) -> None:
        self.gate = gate

    async def before_tool_callback(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return await self.gate.before_tool(tool, args, tool_context)

    async def after_tool_callback(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any
    ) -> None:
        await self.gate.after_tool(tool_context, spent=True, result=tool_response)

    async def on_tool_error_callback(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> None:
        await self.gate.after_tool(tool_context, spent=False, result=error)

    async def before_model_callback(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        return await self.gate.before_model(callback_context, llm_request)

    async def after_model_callback(
        self, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> None:
        await self.gate.after_model(callback_context, llm_response)

    async def on_model_error_callback(
        self, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> None:
        await self.gate.model_failed(callback_context, error)

    async def after_agent_callback(self, callback_context: CallbackContext) -> None:
        await self.gate.sweep(callback_context.invocation_id)


def _ours(callback: object) -> _AgentCallbacks | None:
    owner = getattr(callback, "__self__", None)
    return owner if isinstance(owner, _AgentCallbacks) else None


def _gated_by(agent: LlmAgent, guard: Guard | None) -> bool:
    for callback in agent.canonical_before_tool_callbacks:
        owner = _ours(callback)
        if owner is not None and (guard is None or owner.gate.guard is guard):
            return True
    return False


def _gate_of(callback: object, guard: Guard | None) -> bool:
    """Whether ``callback`` is a gate of ``guard`` (``None``: of any guard)."""
    owner = _ours(callback)
    return owner is not None and (guard is None or owner.gate.guard is guard)


def _composed(existing: Any, ours: Callable[..., Any], where: str, guard: Guard) -> list[Any]:
    """The callbacks already there (one, a list or none) with ``ours`` joined
    ``where``; an earlier gate of the same guard is replaced, never stacked (another
    guard's gate stays: both judge)."""
    listed = [] if existing is None else existing if isinstance(existing, list) else [existing]
    theirs = [c for c in listed if not _gate_of(c, guard)]
    return [*theirs, ours] if where == "last" else [ours, *theirs]


def guard_agent(
    agent: LlmAgent,
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    models: bool = True,
    estimate: Estimator | None = None,
) -> LlmAgent:
    """Guard ``agent`` (in place; returned) through its own callback fields, composed
    with the callbacks already there. Guarding again replaces the earlier gate; use
    ``guard.attach(agent)`` / ``guard.detach(agent)`` to restore the fields exactly.
    Only ``agent`` itself: its sub-agents and ``AgentTool`` agents are not guarded —
    give the runner an :class:`InterlockPlugin` for those."""
    gate = _Gate(
        guard,
        refusal=refusal,
        mapper=mapper,
        on_approval=on_approval,
        approval_timeout=approval_timeout,
        models=models,
        estimate=estimate,
    )
    callbacks = _AgentCallbacks(gate)
    for field_name, where in _FIELDS:
        ours = getattr(callbacks, field_name)
        composed = _composed(getattr(agent, field_name), ours, where, guard)
        object.__setattr__(agent, field_name, composed)
    return agent


def unguard_agent(agent: LlmAgent, guard: Guard | None = None) -> LlmAgent:
    """Take the gate of :func:`guard_agent` of ``guard`` (``None``: of every guard)
    out of ``agent``'s callback lists; the other callbacks stay as they are."""
    for field_name, _ in _FIELDS:
        existing = getattr(agent, field_name)
        if isinstance(existing, list):
            kept = [c for c in existing if not _gate_of(c, guard)]
            object.__setattr__(agent, field_name, kept)
    return agent


# -- attach / detach / coverage -----------------------------------------------------------


class AgentAdapter(Adapter):
    """``guard.attach(agent)``: :func:`guard_agent` raise style on an ``LlmAgent``'s
    callback fields (ADK's own per-agent hook; nothing patched), restored exactly by
    ``guard.detach(agent)``."""

    framework = "google-adk"
    distribution = "google-adk"
    supported = ("2.0", "3")
    extra = "google-adk"
    targets = tuple(PatchTarget(LlmAgent, field_name) for field_name, _ in _FIELDS)

    inspects_models = True

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        raise AssertionError("attach installs all fields at once")  # pragma: no cover

    def attach(self, obj: Any, guard: Guard) -> Any:
        if not isinstance(obj, LlmAgent):
            raise TypeError(f"the {self.framework} adapter cannot guard a {type(obj).__name__}")
        record = self._attached.get(id(obj))
        if record is not None:
            if record.guard is not guard:
                raise ValueError("this object is attached to another guard; detach it first")
            return obj
        record = _Attached(obj, guard)
        for field_name, _ in _FIELDS:
            record.originals[field_name] = getattr(obj, field_name)
        guard_agent(obj, guard)
        self._attached[id(obj)] = record
        return obj

    @staticmethod
    def restore(obj: object, originals: dict[str, object]) -> None:
        for attr, original in originals.items():
            object.__setattr__(obj, attr, original)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """Its tools (a server-side one: never guarded), its code executor (nothing
        judges model-written code), and its sub-agents (each has its own callbacks)."""
        agent: LlmAgent = obj
        guarded = _gated_by(agent, guard)
        bindings = [_tool_binding(tool, agent, i, guarded) for i, tool in enumerate(agent.tools)]
        executor = agent.code_executor
        if executor is not None:
            kind = type(executor).__name__
            bindings.append(
                ToolBinding(
                    f"code_executor:{kind}",
                    "code the model writes, run without a tool call",
                    None,
                    owner=agent,
                    attr="code_executor",
                    guarded=False,
                    note="runs on the model provider's side"
                    if kind == "BuiltInCodeExecutor"
                    else "runs model-written code in this process with no tool call to judge",
                )
            )
        for index, sub in enumerate(agent.sub_agents):
            sub_guarded = isinstance(sub, LlmAgent) and _gated_by(sub, guard)
            bindings.append(
                ToolBinding(
                    f"sub_agent:{sub.name}",
                    sub.description or None,
                    None,
                    container=agent.sub_agents,
                    key=index,
                    guarded=sub_guarded,
                    note=None
                    if sub_guarded
                    else "a sub-agent has its own callbacks: attach it too, or give the "
                    "runner an InterlockPlugin",
                )
            )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        agent: LlmAgent = obj
        return [
            LLMBinding(
                _model_label(agent.model),
                owner=agent,
                attr="model",
                guarded=_gated_by(agent, guard),
                note=None if _gated_by(agent, guard) else "or give the runner an InterlockPlugin",
            )
        ]


def _tool_binding(tool: Any, agent: LlmAgent, index: int, guarded: bool) -> ToolBinding:
    kind = type(tool).__name__
    name = str(getattr(tool, "name", None) or getattr(tool, "__name__", kind))
    where: dict[str, Any] = {"container": agent.tools, "key": index}
    if kind in _SERVER_SIDE_TOOLS:
        return ToolBinding(
            name,
            None,
            None,
            guarded=False,
            note=f"a {kind} runs on the model provider's side: nothing in this process sees it",
            **where,
        )
    note = None
    if kind == "AgentTool" and not getattr(tool, "include_plugins", True):
        note = "include_plugins=False: its agent's own calls skip the runner's plugins"
    elif kind.endswith("Toolset"):
        note = "a toolset: the tools it lists at run time pass the same callbacks"
    description = getattr(tool, "description", None) or getattr(tool, "__doc__", None)
    return ToolBinding(
        name,
        description if isinstance(description, str) else None,
        _schema(tool) if isinstance(tool, BaseTool) else None,
        tool if callable(tool) else None,
        guarded=guarded,
        note=note,
        **where,
    )


ADAPTER = register_adapter(AgentAdapter())
