"""The LangChain / LangGraph adapter.

Three ways in, from the framework's own hook outward:

- :class:`InterlockMiddleware` — an ``AgentMiddleware`` for
  ``langchain.agents.create_agent``: every tool call the agent makes is judged in
  ``wrap_tool_call`` / ``awrap_tool_call`` before the tool runs.
- :func:`guarded_tool_node` — the same gate for a plain LangGraph ``ToolNode``.
- :func:`guard_tool` / :class:`LangChainAdapter` — a tool judged wherever it is called
  from, including direct ``tool.invoke()``, which skips the middleware. The gate sits on
  ``BaseTool.run`` / ``arun``, the two methods every public entry point funnels through
  (invoke, batch and stream go to ``run``; their async twins to ``arun``), and on every
  attribute below them that can run the body — ``_run`` / ``_arun`` and, where the
  tool has them, ``func`` / ``coroutine``: a call that enters there directly is judged
  too. A tool with no coroutine has its ``ainvoke`` sent through ``arun`` (``BaseTool``'s
  own ``ainvoke``), so it is judged on the event loop, where cancelling the caller stops
  it before the body, not in the worker thread its class would run ``invoke`` in.
  A string (or positional) input is judged as the tool's own field, the one
  LangChain itself parses it as (``_to_args_and_kwargs``), never as ``{"input": ...}``.
  A refused call raises from inside LangChain's own ``run``, at the body, so callbacks
  see it: ``on_tool_start``, then ``on_tool_error`` with the refusal.

A refusal in the middleware is a ``ToolMessage(status="error")`` the model reads
(``refusal="message"``, the default) or the ``Blocked`` error raised out of
``agent.invoke`` (``refusal="raise"``). A guarded tool always raises. In every case the
tool body never runs on anything but allow.

The middleware also gates model calls (``wrap_model_call``) when the guard has a store:
each call is checked as an ``llm`` action and reserved on the policy's budgets before
the model runs, and committed from the response's ``usage_metadata`` after. A call
awaiting approval can be refused (default), waited for in place
(``on_approval="wait"``), turned into a LangGraph ``interrupt`` the graph resumes
from once a human has decided in Interlock (``on_approval="interrupt"``), or put to
a reviewer in the interrupt format of LangChain's own ``HumanInTheLoopMiddleware``,
whose decision on resume decides the Interlock approval (``on_approval="review"``).

Example::

    from langchain.agents import create_agent
    from interlock.adapters.langchain import InterlockMiddleware

    agent = create_agent(model, tools, middleware=[InterlockMiddleware(guard)])
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

from interlock.adapters.base import (
    Adapter,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    adecide_starting,
    already_judged,
    arun_settled,
    call_key,
    decide_starting,
    inside_a_call,
    pending_approval,
    register_adapter,
    run_settled,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, TrustedInputs, records_inputs
from interlock.core.action import Action, Context
from interlock.core.decision import Decision
from interlock.errors import ApprovalClosed, Blocked
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
    from langchain_core.tools import BaseTool, StructuredTool, Tool
    from langchain_core.tools.base import _get_runnable_config_param
    from langchain_core.utils.pydantic import get_fields
    from langgraph.config import get_config
    from langgraph.errors import GraphInterrupt
    from langgraph.prebuilt import ToolNode
    from langgraph.pregel import Pregel
    from langgraph.types import Command, interrupt
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"the LangChain adapter needs langchain, langchain-core and langgraph ({exc}): "
        "pip install 'interlock[langchain]'"
    ) from exc

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from interlock.guard import Guard, Mapper
    from interlock.store.records import ApprovalRecord
    from interlock.store.sql import SqlStore

__all__ = [
    "GraphAdapter",
    "InterlockMiddleware",
    "LangChainAdapter",
    "ToolNodeAdapter",
    "guard_tool",
    "guarded_tool_node",
    "resume_after_approval",
    "tool_action",
    "tool_arguments",
]

_R = TypeVar("_R")
log = logging.getLogger("interlock")

Refusal = Literal["message", "raise"]
OnApproval = Literal["refuse", "wait", "interrupt", "review"]
InterruptMode = Literal["batched", "per_call"]
ReviewDecision = Literal["approve", "edit", "reject", "respond"]

#: The decisions a reviewer may give (``HumanInTheLoopMiddleware``'s own four).
REVIEW_DECISIONS: Final[tuple[ReviewDecision, ...]] = ("approve", "edit", "reject", "respond")

#: Prepended to the result of a call a reviewer replaced (the model's message keeps its
#: own call): the model learns what ran instead.
EDIT_NOTICE: Final = (
    "Note: a human reviewer replaced this tool call before it ran, and Interlock judged "
    "the replacement again. Executed instead: {name} with arguments {args}."
)
Estimator = Callable[[ModelRequest[Any]], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN = 4


def tool_schema(tool: BaseTool | None) -> dict[str, Any] | None:
    """The JSON schema of what the model may pass the tool (injected args excluded)."""
    if tool is None:
        return None
    try:
        if isinstance(tool, Tool) and tool.args_schema is None:
            # A single-input Tool: its call schema describes ``Tool._run`` itself; its
            # one field, as LangChain declares it, is ``tool_input``.
            return {"type": "object", "properties": dict(tool.args)}
        schema = tool.tool_call_schema
        if isinstance(schema, Mapping):
            return dict(schema)
        render: Callable[[], Mapping[str, Any]] = getattr(
            schema, "model_json_schema", schema.schema
        )
        return dict(render())
    except Exception:  # a schema we cannot render: judge on the arguments alone
        return None


def tool_arguments(tool: BaseTool | None, tool_input: Any, tool_call_id: str | None = None) -> Any:
    """What a call of ``tool`` with ``tool_input`` is judged on: the arguments as its
    body receives them, named by the tool's own fields.

    A mapping stays as given (the middleware and the tool judge one call alike), unless
    LangChain hands the body its value positionally (a single-input ``Tool``). A string
    becomes the field LangChain itself parses it as: ``_to_args_and_kwargs`` gives what
    the body gets, and the schema's fields name it (``_parse_input`` validates a string
    as the first one) — so ``tool.invoke("rm -rf /")`` on ``shell(command)`` is judged as
    ``{"command": "rm -rf /"}``. Input LangChain refuses stays as given: it never
    reaches the body.
    """
    if tool is None or not isinstance(tool_input, (str, Mapping)):
        return tool_input
    if isinstance(tool_input, Mapping) and not isinstance(tool, Tool):
        return tool_input
    try:
        given = tool_input if isinstance(tool_input, str) else dict(tool_input)
        args, kwargs = tool._to_args_and_kwargs(given, tool_call_id)
    except Exception:  # LangChain refuses the input itself: the body never sees it
        return tool_input
    if not args:
        return tool_input
    return named_arguments(tool, args, kwargs)


def named_arguments(
    tool: BaseTool, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Positional ``args`` named by the tool's fields in order (a value beyond them
    as ``arg<i>``), then ``kwargs``."""
    names = _field_names(tool)
    named = {names[i] if i < len(names) else f"arg{i}": value for i, value in enumerate(args)}
    named.update(kwargs)
    return named


def _field_names(tool: BaseTool) -> list[str]:
    """The tool's fields in order, as LangChain parses input: its args model's fields
    (the first is what a string is validated as), else ``tool.args``."""
    try:
        schema = tool.args_schema
        if schema is not None and not isinstance(schema, dict):
            return list(get_fields(schema))
        return list(tool.args)
    except Exception:  # a tool whose fields cannot be read: its values stay unnamed
        return []


def tool_action(
    name: str, arguments: Any, tool: BaseTool | None = None, call_id: str | None = None
) -> Action:
    """The Action for one LangChain tool call (arguments as :func:`tool_arguments`
    names them). ``call_id`` (the model's tool call id) is kept in the context for
    correlation only: it is not part of the intent."""
    return Action.tool(
        name,
        tool_arguments(tool, arguments),
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
    checked again then, so the resume value is never trusted as an approval), or
    ``"review"`` (the interrupt ``HumanInTheLoopMiddleware`` raises, so the same UI
    answers it, and the reviewer's decision on resume decides the Interlock approval:
    see :meth:`_review`). All but ``"refuse"`` need a guard with a store;
    ``"interrupt"`` and ``"review"`` need a graph with a checkpointer and a
    ``thread_id``.

    ``"review"`` takes ``interrupt_mode`` (``"batched"``: the value is
    ``{"action_requests": [...], "review_configs": [...]}`` and the answer
    ``{"decisions": [decision]}``; ``"per_call"``: the value is
    ``{"type": "tool_approval", ...}`` and the answer the decision itself, keyed by the
    interrupt's id), ``allowed_decisions`` (of ``approve``, ``edit``, ``reject``,
    ``respond``), ``reviewer`` (the identity recorded as the approval's decider) and
    ``description_prefix``. Each value also carries ``"interlock"``: the approval's id,
    URL, reason and rules. One interrupt per tool call (each runs as its own task).

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
        # A policy that reads sessions also needs the model-call layer: it records the
        # user's messages and the system prompt there, as trusted inputs.
        gated = gated or guard._sessions is not None
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
        interrupt_mode: InterruptMode = "batched",
        allowed_decisions: Sequence[ReviewDecision] = REVIEW_DECISIONS,
        reviewer: str = "langgraph-reviewer",
        description_prefix: str = "Tool execution requires approval",
    ) -> None:
        super().__init__()
        if refusal not in ("message", "raise"):
            raise ValueError(f"refusal must be 'message' or 'raise', not {refusal!r}")
        if on_approval not in ("refuse", "wait", "interrupt", "review"):
            raise ValueError(
                "on_approval must be 'refuse', 'wait', 'interrupt' or 'review', "
                f"not {on_approval!r}"
            )
        if interrupt_mode not in ("batched", "per_call"):
            raise ValueError(
                f"interrupt_mode must be 'batched' or 'per_call', not {interrupt_mode!r}"
            )
        unknown = [d for d in allowed_decisions if d not in REVIEW_DECISIONS]
        if unknown or not allowed_decisions:
            raise ValueError(f"allowed_decisions must be some of {REVIEW_DECISIONS}: {unknown}")
        if on_approval != "refuse" and guard.store is None:
            raise ValueError(
                f"on_approval={on_approval!r} needs a guard with a store, where approvals live"
            )
        self.guard = guard
        self.refusal = refusal
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        self.interrupt_mode = interrupt_mode
        self.allowed_decisions = tuple(dict.fromkeys(allowed_decisions))
        self.reviewer = reviewer
        self.description_prefix = description_prefix
        self.models = guard.store is not None if models is None else models
        self.estimate = estimate or estimate_usage
        self._gate = _Gate(guard, mapper)
        self._inputs = TrustedInputs()

    @property
    def name(self) -> str:
        return "InterlockMiddleware"

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        if self.on_approval == "review":
            return self._review(request, handler)
        call = request.tool_call

        def decide() -> Decision | None:  # again after an approval is decided
            return self._gate.decide(call["name"], call.get("args"), request.tool, call.get("id"))

        # an allow's commit carries the tool's tool_invoke: one durable write before it
        decision, started = decide_starting(self.guard, call["name"], decide)
        if decision is None:
            return handler(request)
        if self._awaits_human(decision):
            decision = self._after_approval(decision, decide)
        if not decision.allowed:
            return self._refuse(request, decision)
        key = call_key(call["name"], call.get("args"))
        return run_settled(self.guard, decision, lambda: handler(request), key, started=started)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if self.on_approval == "review":
            return await self._areview(request, handler)
        call = request.tool_call
        decision, started = await adecide_starting(
            self.guard,
            call["name"],
            lambda: self._gate.adecide(
                call["name"], call.get("args"), request.tool, call.get("id")
            ),
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
        return await arun_settled(
            self.guard, decision, lambda: handler(request), key, started=started
        )

    # -- review: HumanInTheLoopMiddleware's interrupt decides the Interlock approval ------

    def _review(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Judge the call; while it awaits a human, interrupt the graph with the
        reviewer's request, and apply the answer it resumes with to the approval.

        LangGraph runs this task again from the start on every resume, handing each
        ``interrupt`` its answer by position, so the walk is replayed each time: an
        answer already applied is applied again and changes nothing. ``approve``
        approves the pending approval as ``reviewer`` and the call is checked again,
        which claims it once; ``reject`` / ``respond`` deny it and the model reads the
        answer; ``edit`` replaces the call with the reviewer's, judged from scratch (it
        may run, be refused, or await approval in turn), and the replaced call's
        approval is denied once the task is done. An answer for an approval that did
        not exist before this run of the task (a replay of the thread, a resume meant
        for another call) decides nothing: the call is refused, its approval pending.
        A decision made in Interlock first (web UI, ``store.approve``) stands: the
        call is checked before any answer is read.
        """
        store = self._review_store()
        review = _Review(request, store.clock())
        try:
            result = self._review_walk(store, review, handler)
        except GraphInterrupt:
            raise  # the task runs again on resume: nothing it replaced is settled yet
        except BaseException:
            self._deny_replaced(store, review)
            raise
        self._deny_replaced(store, review)
        return result

    def _review_walk(
        self,
        store: SqlStore,
        review: _Review,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        while True:
            decision = self._gate.decide(*review.call_parts())
            if decision is None:  # not ours to judge
                return review.finish(handler(review.request))
            approval_id = pending_approval(decision)
            if approval_id is None:
                break
            value, schema = self._review_interrupt(review.request, decision)
            answer = interrupt(value, response_schema=schema)
            if review.opened_here(store.get_approval(approval_id)):
                return self._refuse(review.request, decision)  # an answer for another
            choice = self._choice(answer, review.request)
            if choice is None:
                continue  # no decision in it: ask again
            answered = self._apply_choice(store, approval_id, choice, review)
            if answered is not None:
                return answered
        if not decision.allowed:
            return self._refuse(review.request, decision)
        call = review.request.tool_call
        key = call_key(call["name"], call.get("args"))
        return review.finish(
            run_settled(self.guard, decision, lambda: handler(review.request), key)
        )

    async def _areview(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """The async twin of :meth:`_review` (store calls run off the event loop)."""
        store = self._review_store()
        review = _Review(request, store.clock())
        try:
            result = await self._areview_walk(store, review, handler)
        except GraphInterrupt:
            raise
        except BaseException:
            await asyncio.to_thread(self._deny_replaced, store, review)
            raise
        await asyncio.to_thread(self._deny_replaced, store, review)
        return result

    async def _areview_walk(
        self,
        store: SqlStore,
        review: _Review,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        while True:
            decision = await self._gate.adecide(*review.call_parts())
            if decision is None:
                return review.finish(await handler(review.request))
            approval_id = pending_approval(decision)
            if approval_id is None:
                break
            value, schema = self._review_interrupt(review.request, decision)
            answer = interrupt(value, response_schema=schema)
            record = await asyncio.to_thread(store.get_approval, approval_id)
            if review.opened_here(record):
                return self._refuse(review.request, decision)
            choice = self._choice(answer, review.request)
            if choice is None:
                continue
            answered = await asyncio.to_thread(
                self._apply_choice, store, approval_id, choice, review
            )
            if answered is not None:
                return answered
        if not decision.allowed:
            return self._refuse(review.request, decision)
        call = review.request.tool_call
        key = call_key(call["name"], call.get("args"))
        return review.finish(
            await arun_settled(self.guard, decision, lambda: handler(review.request), key)
        )

    def _review_store(self) -> SqlStore:
        store = self.guard.store
        if store is None:  # pragma: no cover - __init__ refuses review without a store
            raise RuntimeError("on_approval='review' needs a guard with a store")
        return store

    def _review_interrupt(
        self, request: ToolCallRequest, decision: Decision
    ) -> tuple[Any, dict[str, Any] | None]:
        """The interrupt value (``HumanInTheLoopMiddleware``'s format) and, per call,
        the JSON schema of the answer."""
        call = request.tool_call
        name, args = call["name"], dict(call.get("args") or {})
        approval = decision.approval
        link = f" ({approval.url})" if approval is not None and approval.url else ""
        description = (
            f"{self.description_prefix}\n\nTool: {name}\nArgs: {args}\n\n"
            f"Interlock: {decision.reason}{link}"
        )
        interlock = approval_payload(decision)
        value: dict[str, Any]
        if self.interrupt_mode == "per_call":
            value = {
                "type": "tool_approval",
                "tool_call_id": call.get("id") or "",
                "name": name,
                "args": args,
                "description": description,
                "interlock": interlock,
            }
            return value, _decision_json_schema(self.allowed_decisions)
        value = {
            "action_requests": [{"name": name, "args": args, "description": description}],
            "review_configs": [
                {"action_name": name, "allowed_decisions": list(self.allowed_decisions)}
            ],
            "interlock": interlock,
        }
        return value, None

    def _choice(self, answer: Any, request: ToolCallRequest) -> dict[str, Any] | None:
        """The reviewer's decision in ``answer`` (``None``: it holds none); a
        decision of a kind not allowed, or more than one, is a ValueError (as
        ``HumanInTheLoopMiddleware`` raises)."""
        if isinstance(answer, Mapping) and "decisions" in answer:
            decisions = answer["decisions"]
            if not isinstance(decisions, Sequence) or isinstance(decisions, str):
                raise ValueError(f"decisions must be a list, not {type(decisions).__name__}")
            if not decisions:
                return None
            if len(decisions) != 1:
                raise ValueError(
                    f"Number of human decisions ({len(decisions)}) does not match "
                    "number of hanging tool calls (1)."
                )
            answer = decisions[0]
        if answer is None:
            return None
        kind = answer.get("type") if isinstance(answer, Mapping) else None
        if kind not in self.allowed_decisions:
            raise ValueError(
                f"Unexpected human decision: {answer!r}. Decision type {kind!r} is not "
                f"allowed for tool {request.tool_call['name']!r}. Expected one of "
                f"{list(self.allowed_decisions)}."
            )
        return dict(answer)

    def _apply_choice(
        self, store: SqlStore, approval_id: str, choice: dict[str, Any], review: _Review
    ) -> ToolMessage | None:
        """Decide the approval as the reviewer chose: the message the model reads
        instead of the result (reject, respond), or ``None`` to judge the call again."""
        kind = choice["type"]
        where = _where(review.request)
        if kind == "approve":
            self._decide_approval(store, approval_id, True, f"approved {where}")
            return None
        if kind == "edit":
            review.edit(choice.get("edited_action"), approval_id)
            return None
        reason = f"{kind} {where}: {choice.get('message') or 'no reason given'}"
        self._decide_approval(store, approval_id, False, reason)
        return _answer_message(review.request, choice)

    def _decide_approval(self, store: SqlStore, approval_id: str, approve: bool, why: str) -> None:
        decide = store.approve if approve else store.deny
        with contextlib.suppress(ApprovalClosed):  # decided in Interlock first: that stands
            decide(approval_id, by=self.reviewer, reason=why)

    def _deny_replaced(self, store: SqlStore, review: _Review) -> None:
        """Deny the approvals of the calls a reviewer's edit replaced (the task is
        done: no resume walks through them again)."""
        for approval_id in review.replaced:
            self._decide_approval(store, approval_id, False, "replaced by the reviewer's edit")

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
        # inside a call this guard allowed (an agent run as a tool) the "user" is the
        # calling model: its words are not the user's
        if records_inputs(self.guard) and not inside_a_call(self.guard):
            self._record_inputs(request)
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
        # inside a call this guard allowed (an agent run as a tool) the "user" is the
        # calling model: its words are not the user's
        if records_inputs(self.guard) and not inside_a_call(self.guard):
            await asyncio.to_thread(self._record_inputs, request)
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

    def _record_inputs(self, request: ModelRequest[Any]) -> None:
        """Record the system prompt and the user's messages as trusted inputs of the
        session, each once (keyed by its id, else its text); not a summary of the
        history LangChain put in a human message. A failure is logged: the
        user's own values then read as untrusted, the stricter reading."""
        found: list[BaseMessage] = [
            m
            for m in request.messages
            # a summary LangChain wrote of the history (SummarizationMiddleware) is a
            # human message, but the model's words about tool results too: not trusted
            if m.type == "human" and m.additional_kwargs.get("lc_source") != "summarization"
        ]
        if request.system_message is not None:
            found.insert(0, request.system_message)
        self._inputs.record(
            self.guard,
            (
                Input(
                    message.type,
                    message.text if isinstance(message.content, list) else message.content,
                    id=message.id,
                )
                for message in found
            ),
        )

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


class _Review:
    """One tool call under review: the request as the reviewer left it (an edit
    replaces it), the approvals of the calls it replaced, and when this run of the
    task began (store clock, µs)."""

    def __init__(self, request: ToolCallRequest, started_us: int) -> None:
        self.request = request
        self.started_us = started_us
        self.executed: dict[str, Any] | None = None
        self.replaced: list[str] = []

    def call_parts(self) -> tuple[str, Any, BaseTool | None, str | None]:
        call = self.request.tool_call
        return call["name"], call.get("args"), self.request.tool, call.get("id")

    def opened_here(self, record: ApprovalRecord) -> bool:
        """Whether the approval was opened by this run of the task: no interrupt ever
        showed it, so an answer read now was given for something else."""
        return record.created_us >= self.started_us

    def edit(self, edited: Any, approval_id: str) -> None:
        """Replace the call by the reviewer's (a tool the agent has, a dict of args)."""
        if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
            raise ValueError(f"an edit needs edited_action with name and args, not {edited!r}")
        name = edited.get("name") or self.request.tool_call["name"]
        call: Any = {**self.request.tool_call, "name": name, "args": dict(edited["args"])}
        if name == self.request.tool_call["name"]:
            self.request = self.request.override(tool_call=call)
        else:
            tools = getattr(self.request.runtime, "tools", None) or []
            tool = next((t for t in tools if t.name == name), None)
            if tool is None:
                raise ValueError(f"the reviewer's edit names {name!r}, which is not a tool here")
            self.request = self.request.override(tool_call=call, tool=tool)
        self.executed = {"name": name, "args": dict(edited["args"])}
        if approval_id not in self.replaced:
            self.replaced.append(approval_id)

    def finish(self, result: _R) -> _R:
        """The result, with the notice that a reviewer's call ran instead of the
        model's."""
        if self.executed is None or not isinstance(result, ToolMessage):
            return result
        notice = EDIT_NOTICE.format(
            name=self.executed["name"], args=json.dumps(self.executed["args"], default=str)
        )
        content = result.content
        updated: Any
        if isinstance(content, str):
            updated = f"{notice}\n\nTool response:\n{content}" if content else notice
        else:
            updated = [{"type": "text", "text": notice}, *content]
        return cast("_R", result.model_copy(update={"content": updated}))


def _where(request: ToolCallRequest) -> str:
    """Where a reviewer's decision came from, for the approval's record."""
    try:
        thread = get_config().get("configurable", {}).get("thread_id")
    except Exception:  # outside a graph run: no thread to name
        thread = None
    call_id = request.tool_call.get("id")
    return f"on resume of LangGraph thread {thread!r} (tool call {call_id!r})"


def _answer_message(request: ToolCallRequest, choice: Mapping[str, Any]) -> ToolMessage:
    """What the model reads for a rejected call or a reviewer's answer (the text
    ``HumanInTheLoopMiddleware`` gives)."""
    call = request.tool_call
    name, call_id = call["name"], call.get("id") or ""
    if choice["type"] == "respond":
        content = str(choice.get("message") or "")
    elif reason := choice.get("message"):
        content = f"User rejected the tool call for `{name}` with reason: {reason}"
    else:
        content = (
            f"User rejected the tool call for `{name}` with id {call_id}. The tool was not "
            "executed. Do not retry this tool call unless the user explicitly requests it."
        )
    status: Literal["success", "error"] = "success" if choice["type"] == "respond" else "error"
    return ToolMessage(content=content, name=name, tool_call_id=call_id, status=status)


def _decision_json_schema(allowed: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of one reviewer decision (the per-call interrupt's
    ``response_schema``)."""
    message = {"type": "string"}
    branches: dict[str, dict[str, Any]] = {
        "approve": {"properties": {"type": {"const": "approve"}}, "required": ["type"]},
        "reject": {
            "properties": {"type": {"const": "reject"}, "message": message},
            "required": ["type"],
        },
        "respond": {
            "properties": {"type": {"const": "respond"}, "message": message},
            "required": ["type", "message"],
        },
        "edit": {
            "properties": {
                "type": {"const": "edit"},
                "edited_action": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "args": {"type": "object"}},
                    "required": ["name", "args"],
                },
            },
            "required": ["type", "edited_action"],
        },
    }
    return {"oneOf": [{"type": "object", **branches[kind]} for kind in allowed]}


def resume_after_approval() -> Command[Any]:
    """The ``Command`` that resumes a graph interrupted by ``on_approval="review"``
    after the approval was decided in Interlock (web UI, ``interlock approvals``,
    ``store.approve``): it carries no decision, so the call is checked again, and runs
    once if approved, is refused if denied, or is put to the reviewer again if still
    pending."""
    return Command(resume={"decisions": []})


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


# -- a guarded tool: every way to its body judged ------------------------------------------

#: The attributes below ``run`` / ``arun`` that run the body.
_BODY_LAYERS: Final = frozenset({"_run", "_arun", "func", "coroutine"})
#: What each body layer may call on its way to the body (``_arun`` runs ``_run`` in a
#: thread when the tool has no async body).
_BELOW: Final[dict[str, frozenset[str]]] = {
    "_run": frozenset({"func"}),
    "_arun": frozenset({"_run", "func", "coroutine"}),
    "func": frozenset(),
    "coroutine": frozenset(),
}


class _Pass:
    """One judged call of one tool on its way down to the body: each layer below the
    one that judged it lets it through once, unjudged; or, for a refused call, the
    refusal the first body layer raises (inside LangChain's own ``run``, so its
    callbacks report it)."""

    __slots__ = ("layers", "refusal")

    def __init__(self, layers: frozenset[str], refusal: Blocked | None = None) -> None:
        self.layers = set(layers)
        self.refusal = refusal


_PASSES: contextvars.ContextVar[dict[int, _Pass]] = contextvars.ContextVar("interlock_lc_passes")


@contextlib.contextmanager
def _passing(
    tool: BaseTool, layers: frozenset[str], refusal: Blocked | None = None
) -> Iterator[_Pass]:
    granted = _Pass(layers, refusal)
    token = _PASSES.set({**_PASSES.get({}), id(tool): granted})
    try:
        yield granted
    finally:
        _PASSES.reset(token)


def _passes(tool: BaseTool, layer: str) -> bool:
    """Whether this call of ``tool`` was judged above ``layer`` (used up here); raises
    the refusal a refused call carries down."""
    granted = _PASSES.get({}).get(id(tool))
    if granted is None:
        return False
    if granted.refusal is not None:
        refusal, granted.refusal = granted.refusal, None
        raise refusal
    if layer in granted.layers:
        granted.layers.discard(layer)
        return True
    return False


def _refusal(decision: Decision, tool: BaseTool, arguments: Any) -> Blocked | None:
    return verdict_outcome(decision, Action.tool(tool.name, arguments)).error


def _body_kwargs(
    tool: BaseTool, callee: Callable[..., Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of a direct body call that are the tool's own: not the run
    manager, callbacks, the run's config or injected values (LangChain's own filter)."""
    own = tool._filter_injected_args(dict(kwargs))
    config = _get_runnable_config_param(callee)
    if config is not None:
        own.pop(config, None)
    return own


def _refuse_through(tool: BaseTool, error: Blocked, run: Callable[[], Any]) -> Any:
    """Raise ``error`` from inside LangChain's ``run``, at the body, so its callbacks
    see the call start and fail with the refusal; if LangChain stops before the body
    (it refuses the input), raise the refusal all the same."""
    with _passing(tool, frozenset(), error) as refused:
        try:
            run()
        except BaseException:
            if refused.refusal is None:  # raised at the body: LangChain passed it on
                raise
        raise error


async def _arefuse_through(
    tool: BaseTool, error: Blocked, run: Callable[[], Awaitable[Any]]
) -> Any:
    """The async twin of :func:`_refuse_through`."""
    with _passing(tool, frozenset(), error) as refused:
        try:
            await run()
        except BaseException:
            if refused.refusal is None:
                raise
        raise error


def _guarded_run(tool: BaseTool, gate: _Gate, original: Callable[..., Any]) -> Any:
    guard = gate.guard

    def run(tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            with _passing(tool, _BODY_LAYERS):
                return original(tool_input, *args, **kwargs)

        key = call_key(tool.name, tool_input)
        if already_judged(guard, key):  # the middleware judged this very call
            return call()
        arguments = tool_arguments(tool, tool_input, kwargs.get("tool_call_id"))
        decision, started = decide_starting(
            guard, tool.name, lambda: gate.decide(tool.name, arguments, tool)
        )
        if decision is None:
            return call()
        error = _refusal(decision, tool, arguments)
        if error is not None:
            return _refuse_through(tool, error, lambda: original(tool_input, *args, **kwargs))
        return run_settled(guard, decision, call, key, started=started)

    return run


def _guarded_arun(tool: BaseTool, gate: _Gate, original: Callable[..., Any]) -> Any:
    guard = gate.guard

    async def arun(tool_input: str | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            with _passing(tool, _BODY_LAYERS):
                return await original(tool_input, *args, **kwargs)

        key = call_key(tool.name, tool_input)
        if already_judged(guard, key):
            return await call()
        arguments = tool_arguments(tool, tool_input, kwargs.get("tool_call_id"))
        decision, started = await adecide_starting(
            guard, tool.name, lambda: gate.adecide(tool.name, arguments, tool)
        )
        if decision is None:
            return await call()
        error = _refusal(decision, tool, arguments)
        if error is not None:
            return await _arefuse_through(
                tool, error, lambda: original(tool_input, *args, **kwargs)
            )
        return await arun_settled(guard, decision, call, key, started=started)

    return arun


def _guarded_body(tool: BaseTool, gate: _Gate, original: Callable[..., Any], layer: str) -> Any:
    """``_run`` or ``func``: passes a call judged above, judges one that enters here."""
    guard = gate.guard
    below = _BELOW[layer]

    @functools.wraps(original)  # LangChain reads the body's signature (run_manager, config)
    def body(*args: Any, **kwargs: Any) -> Any:
        if _passes(tool, layer):
            return original(*args, **kwargs)

        def call() -> Any:
            with _passing(tool, below):
                return original(*args, **kwargs)

        arguments = named_arguments(tool, args, _body_kwargs(tool, original, kwargs))
        key = call_key(tool.name, arguments)
        if already_judged(guard, key):
            return call()
        decision = gate.decide(tool.name, arguments, tool)
        if decision is None:
            return call()
        error = _refusal(decision, tool, arguments)
        if error is not None:
            raise error
        return run_settled(guard, decision, call, key)

    body.__interlock_original__ = original  # type: ignore[attr-defined]
    return body


def _guarded_abody(tool: BaseTool, gate: _Gate, original: Callable[..., Any], layer: str) -> Any:
    """``_arun`` or ``coroutine``: the async twin of :func:`_guarded_body`."""
    guard = gate.guard
    below = _BELOW[layer]

    @functools.wraps(original)
    async def abody(*args: Any, **kwargs: Any) -> Any:
        if _passes(tool, layer):
            return await original(*args, **kwargs)

        async def call() -> Any:
            with _passing(tool, below):
                return await original(*args, **kwargs)

        arguments = named_arguments(tool, args, _body_kwargs(tool, original, kwargs))
        key = call_key(tool.name, arguments)
        if already_judged(guard, key):
            return await call()
        decision = await gate.adecide(tool.name, arguments, tool)
        if decision is None:
            return await call()
        error = _refusal(decision, tool, arguments)
        if error is not None:
            raise error
        return await arun_settled(guard, decision, call, key)

    abody.__interlock_original__ = original  # type: ignore[attr-defined]
    return abody


def _ainvoke_in_a_thread(tool: object) -> bool:
    """Whether ``tool.ainvoke`` runs the sync ``invoke`` in a worker thread (a
    ``StructuredTool`` / ``Tool`` without a coroutine): the sync check would run there,
    where cancelling the awaiting task cannot stop it."""
    owner = getattr(type(tool), "ainvoke", None)
    return (
        owner in (StructuredTool.ainvoke, Tool.ainvoke) and getattr(tool, "coroutine", None) is None
    )


def _judged_on_the_loop(tool: BaseTool) -> Any:
    """``ainvoke`` through ``arun`` (``BaseTool``'s own ``ainvoke``), so the call is
    judged on the event loop, where a cancellation stops it before the body; the
    body still runs in a worker thread (``_arun``'s default)."""

    async def ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        return await BaseTool.ainvoke(tool, input, config, **kwargs)

    return ainvoke


class LangChainAdapter(Adapter):
    """Guards a ``BaseTool`` in place: ``run`` / ``arun`` (no framework hook reaches a
    direct ``tool.invoke()``), and every attribute below them that runs the body —
    ``_run`` / ``_arun``, and ``func`` / ``coroutine`` where the tool has them — so
    no side door is left open. Per instance."""

    framework = "langchain"
    distribution = "langchain-core"
    supported = ("1.0", "2")
    extra = "langchain"
    targets = (
        PatchTarget(BaseTool, "run"),
        PatchTarget(BaseTool, "arun"),
        PatchTarget(BaseTool, "_run"),
        PatchTarget(BaseTool, "_arun"),
    )

    def targets_for(self, obj: object) -> tuple[PatchTarget, ...]:
        bodies = tuple(
            PatchTarget(type(obj), attr)
            for attr in ("func", "coroutine")
            if callable(getattr(obj, attr, None))
        )
        threaded = (PatchTarget(type(obj), "ainvoke"),) if _ainvoke_in_a_thread(obj) else ()
        return self.targets + bodies + threaded

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        tool: BaseTool = obj
        gate = _Gate(guard, None)
        attr = target.attr
        if attr == "ainvoke":
            return _judged_on_the_loop(tool)
        if attr == "run":
            return _guarded_run(tool, gate, original)
        if attr == "arun":
            return _guarded_arun(tool, gate, original)
        if attr in ("_arun", "coroutine"):
            return _guarded_abody(tool, gate, original, attr)
        return _guarded_body(tool, gate, original, attr)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [tool_binding(obj, self.guarded_by(obj, guard), owner=obj, attr="run")]


def tool_binding(tool: BaseTool, guarded: bool, **where: Any) -> ToolBinding:
    """How the guard sees one LangChain tool (its body, its call schema)."""
    body = _unguarded(getattr(tool, "func", None)) or _unguarded(getattr(tool, "coroutine", None))
    body = body or _unguarded(tool._run)
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


def _unguarded(body: Any) -> Any:
    """The body behind a guarded one (itself when it is not guarded)."""
    return getattr(body, "__interlock_original__", body)


def _interlock_middleware(root: object) -> list[InterlockMiddleware]:
    """The :class:`InterlockMiddleware` s whose hooks ``root`` (a node's function, a
    tool-call wrapper) is composed of: followed through closures, bound methods and
    partials only, a bounded number of steps."""
    found: list[InterlockMiddleware] = []
    todo: list[object] = [root]
    seen: set[int] = set()
    while todo and len(seen) < 256:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        owner = item if isinstance(item, InterlockMiddleware) else getattr(item, "__self__", None)
        if isinstance(owner, InterlockMiddleware):
            found.append(owner)
            continue
        if isinstance(item, functools.partial):
            todo.extend((item.func, *item.args, *item.keywords.values()))
        elif callable(item):
            for cell in getattr(item, "__closure__", None) or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    todo.append(cell.cell_contents)
            todo.append(getattr(item, "__wrapped__", None))
    return found


def _chat_model_in(root: object) -> BaseChatModel | None:
    """The chat model a ``create_agent`` model node calls (found in its closures)."""
    todo: list[object] = [root]
    seen: set[int] = set()
    while todo and len(seen) < 256:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, BaseChatModel):
            return item
        bound = getattr(item, "bound", None)  # a model with tools bound: RunnableBinding
        if isinstance(bound, BaseChatModel):
            return bound
        if callable(item):
            for cell in getattr(item, "__closure__", None) or ():
                with contextlib.suppress(ValueError):
                    todo.append(cell.cell_contents)
    return None


def _agent_model_node(graph: Pregel[Any, Any, Any, Any]) -> Any:
    """The model node of a ``create_agent`` graph (its function is
    ``create_agent``'s own), else ``None``."""
    node = graph.nodes.get("model")
    func = getattr(getattr(node, "bound", None), "func", None)
    qualname = getattr(func, "__qualname__", "")
    return node if qualname.startswith("create_agent.") else None


def _middleware_in(wrapper: object, guard: Guard | None) -> bool:
    """Whether an :class:`InterlockMiddleware` of ``guard`` is among the functions a
    ``ToolNode`` tool-call wrapper is composed of (``create_agent`` composes the
    agent's middleware into closures)."""
    return any(guard is None or m.guard is guard for m in _interlock_middleware(wrapper))


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

    inspects_models = True

    def __init__(self, nodes: ToolNodeAdapter) -> None:
        super().__init__()
        self.nodes = nodes

    def can_wrap(self, obj: object) -> bool:
        return isinstance(obj, Pregel)

    def tool_nodes(self, graph: Pregel[Any, Any, Any, Any]) -> list[ToolNode]:
        return [n.bound for n in graph.nodes.values() if isinstance(n.bound, ToolNode)]

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """The tools of its ``ToolNode`` s, then every other node but the start and a
        ``create_agent`` model node: what such a node runs directly (a tool called
        inside it, an API) passes no gate here."""
        graph: Pregel[Any, Any, Any, Any] = obj
        bindings = [
            b for node in self.tool_nodes(graph) for b in self.nodes.tool_bindings(node, guard)
        ]
        model_node = _agent_model_node(graph)
        for name, node in graph.nodes.items():
            if name == "__start__" or node is model_node or isinstance(node.bound, ToolNode):
                continue
            bindings.append(
                ToolBinding(
                    f"node:{name}",
                    "a graph node that is not a ToolNode",
                    None,
                    container=graph.nodes,
                    key=name,
                    guarded=False,
                    note="what it runs directly is not judged: give it guarded tools "
                    "(guard_tool) or route its tool calls through a ToolNode",
                )
            )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        """The model of a ``create_agent`` graph: guarded when an
        :class:`InterlockMiddleware` of ``guard`` gates its calls (a guard with a
        store, or ``models=True``)."""
        graph: Pregel[Any, Any, Any, Any] = obj
        node = _agent_model_node(graph)
        if node is None:
            return []
        paths = [getattr(node.bound, "func", None), getattr(node.bound, "afunc", None)]
        guarded = all(
            any(m.models and (guard is None or m.guard is guard) for m in _interlock_middleware(p))
            for p in paths
            if p is not None
        )
        model = _chat_model_in(paths[0])
        return [
            LLMBinding(
                model_name(model) if model is not None else "model",
                owner=graph.nodes,
                attr="model",
                guarded=guarded,
                note=None
                if guarded
                else "its calls are not judged or budgeted: InterlockMiddleware(guard) with "
                "a store (or models=True) gates them",
            )
        ]

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
    point — invoke, ainvoke, run, arun, batch, abatch, stream, astream — and every
    attribute that runs the body (``_run``, ``_arun``, ``func``, ``coroutine``) is
    judged and raises the ``Blocked`` error on anything but allow. ``tool`` itself is
    untouched."""
    copy = tool.model_copy()
    originals = ADAPTER.originals(tool)
    if originals is not None:  # a copy of a guarded tool: its own guard's gates stay behind
        ADAPTER.restore(copy, originals)
    return ADAPTER.attach(copy, guard)  # type: ignore[no-any-return]
