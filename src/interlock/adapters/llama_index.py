"""The LlamaIndex adapter (``llama-index-core`` 0.14).

- **Tools**: ``guard.attach(tool)`` gates a ``FunctionTool`` in place. LlamaIndex has no
  per-call tool hook (the workflow agents' ``_call_tool`` is private), and a tool has
  many public doors — ``__call__``, ``call``, ``acall``, the ``fn`` / ``async_fn`` /
  ``real_fn`` attributes, ``to_langchain_tool`` — which all end in one of three private
  callables: ``_fn``, ``_async_fn``, ``_real_fn``. The gate replaces those three on the
  instance, so every door is judged, once. A refusal raises: the workflow agents
  (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``) turn any exception from a tool
  into ``ToolOutput(is_error=True)`` the model reads — LlamaIndex's "message" style.
- **Raise style**: an error from a tool never leaves ``agent.run``. One from the model's
  step does, so :func:`guard_agent` with ``refusal="raise"`` judges each tool call the
  model asks for at the end of ``achat_with_tools`` / ``astream_chat_with_tools`` (and
  their sync twins), raises a refusal there, and holds an allowed decision for the tool
  gate (one judgment, one record). ``ReActAgent`` parses its calls from text, outside
  any such method: it has the message style only.
- **Model calls**: ``guard.attach(llm)`` judges every ``chat`` / ``achat`` /
  ``stream_chat`` / ``astream_chat`` as an ``llm`` action, reserves the estimate on the
  policy's budgets before the model runs and commits the usage the response reports
  (``additional_kwargs`` token counts or ``raw.usage``; a stream: once, at its end),
  releasing on an error. ``*_with_tools`` go through these.

Example::

    from interlock.adapters.llama_index import guard_agent

    agent = FunctionAgent(tools=[FunctionTool.from_defaults(shell)], llm=llm)
    guard_agent(agent, guard)                # message style: the model reads refusals
    guard.attach(llm)                        # model calls judged and budgeted
    await agent.run("tidy up")
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import math
import weakref
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    CallKey,
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
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action
from interlock.errors import Blocked
from interlock.ledger.usage import Usage

try:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
    from llama_index.core.llms.llm import LLM
    from llama_index.core.tools import FunctionTool
    from workflows import Context
    from workflows.events import HumanResponseEvent, InputRequiredEvent
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the LlamaIndex adapter needs llama-index-core ({exc}): "
        "pip install 'interlock[llama-index]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.core.decision import Decision
    from interlock.guard import Guard, Mapper

__all__ = [
    "ADAPTER",
    "AGENT_ADAPTER",
    "APPROVING",
    "LLM_ADAPTER",
    "AgentAdapter",
    "ApprovalRequested",
    "FunctionToolAdapter",
    "LLMAdapter",
    "estimate_usage",
    "guard_agent",
    "unguard_agent",
]

Refusal = Literal["raise", "message"]
Estimator = Callable[[Sequence[ChatMessage], Mapping[str, Any]], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4


# -- decisions made when the model asked, used when the tool runs -----------------------


class _Holds:
    """Allowed decisions the tool-call screen made, by call (name and arguments),
    waiting for the tool gate to run the call under them."""

    def __init__(self) -> None:
        self._held: dict[CallKey, list[Decision]] = {}

    def hold(self, key: CallKey, decision: Decision) -> None:
        self._held.setdefault(key, []).append(decision)

    def take(self, key: CallKey) -> Decision | None:
        queue = self._held.get(key)
        if not queue:
            return None
        decision = queue.pop(0)
        if not queue:
            del self._held[key]
        return decision


#: guard → what its screens hold for its tool gates (weak: a guard that is gone takes
#: what it held with it, and a new guard never finds an old one's decisions)
_HOLDS: weakref.WeakKeyDictionary[Guard, _Holds] = weakref.WeakKeyDictionary()


def _holds(guard: Guard) -> _Holds:
    holds = _HOLDS.get(guard)
    if holds is None:
        holds = _HOLDS[guard] = _Holds()
    return holds


# -- the tool gate ------------------------------------------------------------------------


class _ToolGate:
    def __init__(
        self,
        guard: Guard,
        tool: FunctionTool,
        original: Callable[..., Any],
        mapper: Mapper | None = None,
    ) -> None:
        self.guard = guard
        self.tool = tool
        self.mapper = mapper
        self.ask_human = False
        self.approval_timeout: float | None = 300.0
        self.name = tool.metadata.get_name()
        self.signature = _signature(original)

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (positional ones bound to the function's
        parameters), without the workflow ``Context`` a tool may take."""
        named = dict(kwargs)
        if args and self.signature is not None:
            try:
                named = dict(self.signature.bind_partial(*args, **kwargs).arguments)
            except TypeError:
                named = {**kwargs, "args": list(args)}
        elif args:
            named = {**kwargs, "args": list(args)}
        context = self.tool.ctx_param_name
        if context is not None:
            named.pop(context, None)
        return named

    def action(self, arguments: dict[str, Any]) -> Action:
        metadata = self.tool.metadata
        schema = metadata.fn_schema.model_json_schema() if metadata.fn_schema else None
        return Action.tool(
            self.name, arguments, schema=schema, description=metadata.description or None
        )

    def decide(self, key: CallKey, action: Action) -> Decision | None:
        """A decision the screen holds for this call, else the verdict now (``None``:
        the mapper says the call is not ours)."""
        held = _holds(self.guard).take(key)
        if held is not None:
            return held
        if self.mapper is None:
            return self.guard.check(action)
        return self.guard.check_mapped(self.mapper, self.name, dict(action.arguments), self.tool)

    async def adecide(self, key: CallKey, action: Action) -> Decision | None:
        held = _holds(self.guard).take(key)
        if held is not None:
            return held
        if self.mapper is None:
            return await self.guard.acheck(action)
        return await self.guard.acheck_mapped(
            self.mapper, self.name, dict(action.arguments), self.tool
        )

    def refuse(self, decision: Decision, action: Action) -> Blocked:
        outcome = verdict_outcome(decision, action)
        assert outcome.error is not None
        return outcome.error


class ApprovalRequested(InputRequiredEvent):
    """Written to the workflow's event stream when a tool call needs a human
    (``approve_in_workflow=True``): answer it with
    ``handler.ctx.send_event(HumanResponseEvent(response="approve" | "deny",
    approval_id=event.approval_id, user="alice"))``."""

    question: str
    approval_id: str
    tool_name: str
    tool_kwargs: dict[str, Any]
    reason: str


#: The answers that grant an approval; any other response denies it.
APPROVING: Final = frozenset({"approve", "approved", "yes", "y", "allow"})


async def _ask_a_human(gate: _ToolGate, approval_id: str, action: Action) -> None:
    """Bridge an Interlock approval to LlamaIndex's human-in-the-loop events: wait for
    a ``HumanResponseEvent`` carrying ``approval_id``, then record the human's answer
    on the guard's store. The workflow pauses the step and replays it when the answer
    arrives; the replayed call finds the same pending approval and reads the answer."""
    ctx = Context.get_step_context()
    question = ApprovalRequested(
        question=f"Approve {gate.name} {json.dumps(dict(action.arguments), default=str)}? ",
        approval_id=approval_id,
        tool_name=gate.name,
        tool_kwargs=dict(action.arguments),
        reason="this call needs a human",
    )
    answer = await ctx.wait_for_event(
        HumanResponseEvent,
        waiter_event=question,
        waiter_id=f"interlock-approval-{approval_id}",
        requirements={"approval_id": approval_id},
        timeout=gate.approval_timeout,
    )
    store = gate.guard.store
    if store is None:
        raise RuntimeError("approve_in_workflow needs a guard with a store")
    by = str(answer.get("user") or "workflow")
    if str(answer.response).strip().lower() in APPROVING:
        await asyncio.to_thread(
            store.approve, approval_id, by=by, reason="approved in the workflow"
        )
    else:
        await asyncio.to_thread(store.deny, approval_id, by=by, reason="denied in the workflow")


def _signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def _sync_gate(gate: _ToolGate, original: Callable[..., Any]) -> Callable[..., Any]:
    def gated(*args: Any, **kwargs: Any) -> Any:
        arguments = gate.arguments(args, kwargs)
        key = call_key(gate.name, arguments)
        if already_judged(gate.guard, key):
            return original(*args, **kwargs)
        action = gate.action(arguments)
        # an allow's commit carries the body's tool_invoke: one durable write before it
        decision, started = decide_starting(gate.guard, gate.name, lambda: gate.decide(key, action))
        if decision is None:
            return original(*args, **kwargs)
        if not decision.allowed:
            raise gate.refuse(decision, action)
        return run_settled(
            gate.guard, decision, lambda: original(*args, **kwargs), key, started=started
        )

    gated.__interlock_gate__ = gate  # type: ignore[attr-defined]
    gated.__wrapped_original__ = original  # type: ignore[attr-defined]
    return gated


def _async_gate(gate: _ToolGate, original: Callable[..., Any]) -> Callable[..., Any]:
    async def gated(*args: Any, **kwargs: Any) -> Any:
        arguments = gate.arguments(args, kwargs)
        key = call_key(gate.name, arguments)
        if already_judged(gate.guard, key):
            return await original(*args, **kwargs)
        action = gate.action(arguments)
        decision, started = await adecide_starting(
            gate.guard, gate.name, lambda: gate.adecide(key, action)
        )
        approval_id = None if decision is None else pending_approval(decision)
        if approval_id is not None and gate.ask_human:
            await _ask_a_human(gate, approval_id, action)
            decision = await gate.adecide(key, action)  # the identical call claims it
        if decision is None:
            return await original(*args, **kwargs)
        if not decision.allowed:
            raise gate.refuse(decision, action)
        return await arun_settled(
            gate.guard, decision, lambda: original(*args, **kwargs), key, started=started
        )

    gated.__interlock_gate__ = gate  # type: ignore[attr-defined]
    gated.__wrapped_original__ = original  # type: ignore[attr-defined]
    return gated


class FunctionToolAdapter(Adapter):
    """Guards a ``FunctionTool`` in place: its three private callables (``_fn``,
    ``_async_fn``, ``_real_fn``), where every public door of the tool ends — there is
    no per-call hook to stand on instead. A refusal raises (under a workflow agent: the
    ``ToolOutput(is_error=True)`` the model reads)."""

    framework = "llama-index"
    distribution = "llama-index-core"
    supported = ("0.14", "0.15")
    extra = "llama-index"
    targets = (
        PatchTarget(FunctionTool, "_fn"),
        PatchTarget(FunctionTool, "_async_fn"),
        PatchTarget(FunctionTool, "_real_fn"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._mappers: dict[int, Mapper | None] = {}

    def attach(self, obj: Any, guard: Guard, *, mapper: Mapper | None = None) -> Any:
        """As :meth:`Adapter.attach`; ``mapper`` turns a call into the actions judged."""
        if not self.is_attached(obj):
            self._mappers[id(obj)] = mapper
        return super().attach(obj, guard)

    def detach(self, obj: Any) -> Any:
        self._mappers.pop(id(obj), None)
        return super().detach(obj)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        real = getattr(obj, "_real_fn", None) or original
        gate = _ToolGate(guard, obj, real, self._mappers.get(id(obj)))
        if target.attr == "_async_fn" or (
            target.attr == "_real_fn" and inspect.iscoroutinefunction(original)
        ):
            return _async_gate(gate, original)
        return _sync_gate(gate, original)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [_tool_binding(obj, guard, owner=obj, attr="_async_fn")]


def _tool_guarded(tool: object, guard: Guard | None) -> bool:
    gate = getattr(getattr(tool, "_async_fn", None), "__interlock_gate__", None)
    return isinstance(gate, _ToolGate) and (guard is None or gate.guard is guard)


def _tool_binding(tool: Any, guard: Guard | None, **where: Any) -> ToolBinding:
    metadata = tool.metadata
    name = metadata.get_name()
    if not isinstance(tool, FunctionTool):
        return ToolBinding(
            name,
            metadata.description or None,
            None,
            guarded=False,
            note=f"a {type(tool).__name__}: only FunctionTool is gated (wrap what it does "
            "in a FunctionTool)",
            **where,
        )
    schema = metadata.fn_schema.model_json_schema() if metadata.fn_schema else None
    return ToolBinding(
        name,
        metadata.description or None,
        schema,
        tool.real_fn,
        guarded=_tool_guarded(tool, guard),
        **where,
    )


# -- model calls: checked and reserved before, committed from real usage after ----------


def estimate_usage(messages: Sequence[ChatMessage], kwargs: Mapping[str, Any]) -> Usage:
    """A reservation for one model call: the messages' characters / 4 as input tokens,
    ``max_tokens`` from the call's keyword arguments (when given) as output tokens."""
    text = json.dumps([m.model_dump(mode="json") for m in messages], default=str)
    ceiling = kwargs.get("max_tokens")
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(len(text) / CHARS_PER_TOKEN), max(output, 0))


def reported_usage(response: ChatResponse) -> Usage | None:
    """The token counts a response reports: its ``additional_kwargs`` (as the OpenAI
    and Anthropic integrations put them) or the provider's ``raw`` response's
    ``usage``; ``None`` when it reports none."""
    candidates: list[Any] = [response.additional_kwargs]
    raw = response.raw
    if raw is not None:
        candidates.append(
            raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
        )
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            usage = Usage.of(candidate)
        except ValueError:
            continue
        if usage.total:
            return usage
    return None


def model_name(llm: LLM) -> str:
    """The model's name (``model`` / ``model_name`` of the LLM), else its class name."""
    for attr in ("model", "model_name"):
        value = getattr(llm, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(llm).__name__


#: The LLMs (by id) a gated call is running in: a model method that calls another of
#: its own (``achat`` → ``chat`` in some integrations) is one call, judged once.
_INSIDE: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "interlock_llama_index_inside", default=frozenset()
)


@contextlib.contextmanager
def _inside(llm_id: int) -> Iterator[None]:
    token = _INSIDE.set(_INSIDE.get() | {llm_id})
    try:
        yield
    finally:
        _INSIDE.reset(token)


class _ModelGate:
    def __init__(self, guard: Guard, llm: LLM, estimate: Estimator | None = None) -> None:
        self.guard = guard
        self.llm_id = id(llm)
        self.name = model_name(llm)
        self.estimate = estimate or estimate_usage

    def nested(self) -> bool:
        return self.llm_id in _INSIDE.get()

    def call(self, messages: Sequence[ChatMessage], kwargs: Mapping[str, Any]) -> Any:
        return self.guard.llm_call(self.name, estimate=self.estimate(messages, kwargs))


def _record(call: Any, response: ChatResponse | None) -> None:
    usage = None if response is None else reported_usage(response)
    if usage is not None:
        call.record(usage)


def _gated_chat(gate: _ModelGate, original: Callable[..., Any]) -> Callable[..., Any]:
    def chat(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        if gate.nested():
            return original(messages, **kwargs)  # type: ignore[no-any-return]
        with gate.call(messages, kwargs) as call, _inside(gate.llm_id):
            response: ChatResponse = original(messages, **kwargs)
            _record(call, response)
        return response

    chat.__interlock_gate__ = gate  # type: ignore[attr-defined]
    return chat


def _gated_achat(gate: _ModelGate, original: Callable[..., Any]) -> Callable[..., Any]:
    async def achat(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        if gate.nested():
            return await original(messages, **kwargs)  # type: ignore[no-any-return]
        async with gate.call(messages, kwargs) as call:
            with _inside(gate.llm_id):
                response: ChatResponse = await original(messages, **kwargs)
            _record(call, response)
        return response

    achat.__interlock_gate__ = gate  # type: ignore[attr-defined]
    return achat


def _gated_stream_chat(gate: _ModelGate, original: Callable[..., Any]) -> Callable[..., Any]:
    def stream_chat(messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        if gate.nested():
            return original(messages, **kwargs)
        call = gate.call(messages, kwargs)
        call.__enter__()  # before the first chunk: a refusal calls nothing
        try:
            with _inside(gate.llm_id):
                stream = original(messages, **kwargs)
        except BaseException as exc:
            call.__exit__(type(exc), exc, None)
            raise

        def chunks() -> Generator[ChatResponse, None, None]:
            last: ChatResponse | None = None
            failure: BaseException | None = None
            try:
                for last in stream:
                    yield last
            except BaseException as exc:
                failure = exc
                raise
            finally:
                if failure is None:
                    _record(call, last)
                call.__exit__(type(failure) if failure else None, failure, None)

        return chunks()

    stream_chat.__interlock_gate__ = gate  # type: ignore[attr-defined]
    return stream_chat


def _gated_astream_chat(gate: _ModelGate, original: Callable[..., Any]) -> Callable[..., Any]:
    async def astream_chat(messages: Sequence[ChatMessage], **kwargs: Any) -> Any:
        if gate.nested():
            return await original(messages, **kwargs)
        call = gate.call(messages, kwargs)
        await call.__aenter__()  # before the first chunk: a refusal calls nothing
        try:
            with _inside(gate.llm_id):
                stream = await original(messages, **kwargs)
        except BaseException as exc:
            await call.__aexit__(type(exc), exc, None)
            raise

        async def chunks() -> AsyncGenerator[ChatResponse, None]:
            last: ChatResponse | None = None
            failure: BaseException | None = None
            try:
                async for last in stream:
                    yield last
            except BaseException as exc:
                failure = exc
                raise
            finally:
                if failure is None:
                    _record(call, last)
                await call.__aexit__(type(failure) if failure else None, failure, None)

        return chunks()

    astream_chat.__interlock_gate__ = gate  # type: ignore[attr-defined]
    return astream_chat


_MODEL_GATES: Final = {
    "chat": _gated_chat,
    "achat": _gated_achat,
    "stream_chat": _gated_stream_chat,
    "astream_chat": _gated_astream_chat,
}


class LLMAdapter(Adapter):
    """Guards an ``LLM`` in place: ``chat`` / ``achat`` / ``stream_chat`` /
    ``astream_chat`` (what the agents and ``*_with_tools`` call) are judged as ``llm``
    actions and budgeted. LlamaIndex's instrumentation events observe a call but
    cannot stop it, so the methods themselves are wrapped, on this instance only."""

    framework = "llama-index-llm"
    distribution = "llama-index-core"
    supported = ("0.14", "0.15")
    extra = "llama-index"
    targets = tuple(PatchTarget(LLM, attr) for attr in _MODEL_GATES)
    inspects_models = True

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        return _MODEL_GATES[target.attr](_ModelGate(guard, obj), original)

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        gate = getattr(vars(obj).get("achat"), "__interlock_gate__", None)
        guarded = isinstance(gate, _ModelGate) and (guard is None or gate.guard is guard)
        return [
            LLMBinding(
                model_name(obj),
                obj.achat,
                owner=obj,
                attr="achat",
                guarded=guarded,
                note=None if guarded else "guard.attach(llm) judges and budgets its calls",
            )
        ]


# -- raise style: the tool calls the model asks for, judged in its step -----------------


class _Screen:
    """Judges the tool calls in a function-calling model's answer (the end of a
    ``*_with_tools`` call); a refusal raises out of the model's step, and so out of
    ``agent.run``; an allowed decision is held for the tool gate."""

    def __init__(
        self,
        guard: Guard,
        llm: Any,
        tools: Callable[[], Mapping[str, Any]],
        mapper: Mapper | None = None,
    ) -> None:
        self.guard = guard
        self.llm = llm
        self.tools = tools
        self.mapper = mapper

    def _actions(self, response: ChatResponse) -> list[tuple[CallKey, Action]]:
        selections = self.llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        tools = self.tools()
        out = []
        for selection in selections or []:
            name, arguments = selection.tool_name, dict(selection.tool_kwargs or {})
            tool = tools.get(name)
            if isinstance(tool, FunctionTool):
                gate = _ToolGate(self.guard, tool, tool.real_fn)
                action = gate.action(gate.arguments((), arguments))
            else:
                action = Action.tool(name, arguments)
            out.append((call_key(name, dict(action.arguments)), action))
        return out

    def screen(self, response: ChatResponse) -> None:
        held: list[Decision] = []
        try:
            for key, action in self._actions(response):
                if self.mapper is None:
                    decision: Decision | None = self.guard.check(action)
                else:
                    arguments = dict(action.arguments)
                    decision = self.guard.check_mapped(self.mapper, action.name, arguments, None)
                if decision is None:
                    continue
                if not decision.allowed:
                    outcome = verdict_outcome(decision, action)
                    assert outcome.error is not None
                    raise outcome.error
                held.append(decision)
                _holds(self.guard).hold(key, decision)
        except BaseException:
            for decision in held:
                self.guard.release(decision)
            raise

    async def ascreen(self, response: ChatResponse) -> None:
        await asyncio.to_thread(self.screen, response)


def _screened(screen: _Screen, attr: str, original: Callable[..., Any]) -> Callable[..., Any]:
    if attr == "chat_with_tools":

        def chat_with_tools(*args: Any, **kwargs: Any) -> Any:
            response = original(*args, **kwargs)
            screen.screen(response)
            return response

        return chat_with_tools
    if attr == "achat_with_tools":

        async def achat_with_tools(*args: Any, **kwargs: Any) -> Any:
            response = await original(*args, **kwargs)
            await screen.ascreen(response)
            return response

        return achat_with_tools
    if attr == "stream_chat_with_tools":

        def stream_chat_with_tools(*args: Any, **kwargs: Any) -> Any:
            def chunks() -> Generator[Any, None, None]:
                last = None
                for last in original(*args, **kwargs):
                    yield last
                if last is not None:
                    screen.screen(last)

            return chunks()

        return stream_chat_with_tools

    async def astream_chat_with_tools(*args: Any, **kwargs: Any) -> Any:
        stream = await original(*args, **kwargs)

        async def chunks() -> AsyncGenerator[Any, None]:
            last = None
            async for last in stream:
                yield last
            if last is not None:
                await screen.ascreen(last)

        return chunks()

    return astream_chat_with_tools


_SCREENED: Final = (
    "chat_with_tools",
    "achat_with_tools",
    "stream_chat_with_tools",
    "astream_chat_with_tools",
)


class _ScreenAdapter(Adapter):
    """Puts the tool-call screen on a function-calling LLM (raise style); used by
    :func:`guard_agent`, never found by ``adapter_for``."""

    framework = "llama-index-screen"
    distribution = "llama-index-core"
    supported = ("0.14", "0.15")
    extra = "llama-index"
    targets = tuple(PatchTarget(LLM, attr) for attr in _SCREENED)

    def __init__(self) -> None:
        super().__init__()
        self.tools: dict[int, tuple[Callable[[], Mapping[str, Any]], Mapper | None]] = {}

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        tools, mapper = self.tools[id(obj)]
        return _screened(_Screen(guard, obj, tools, mapper), target.attr, original)


_SCREEN = _ScreenAdapter()


def _agents(agent: Any) -> list[Any]:
    """The workflow agents in ``agent`` (an ``AgentWorkflow``: each of its agents)."""
    inner = getattr(agent, "agents", None)
    return list(inner.values()) if isinstance(inner, Mapping) else [agent]


def _function_tools(agent: Any) -> list[FunctionTool]:
    tools = []
    for tool in getattr(agent, "tools", None) or []:
        if isinstance(tool, FunctionTool):
            tools.append(tool)
        elif callable(tool) and not hasattr(tool, "metadata"):
            raise TypeError(
                f"{getattr(tool, '__name__', tool)!r} is a plain function: the agent makes "
                "its FunctionTool at run time, where no guard can reach it; pass "
                "FunctionTool.from_defaults(fn) instead"
            )
        else:
            name = getattr(getattr(tool, "metadata", None), "name", type(tool).__name__)
            raise TypeError(
                f"{type(tool).__name__} {name!r} is not a FunctionTool: it cannot be gated"
            )
    return tools


def _trusted_inputs(
    agent: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Iterator[Input]:
    """The system prompts of the agents in ``agent`` (as the operator wrote them) and
    the user's message and history given to ``run`` — not what the workflow builds
    from them: ``ReActAgent`` hands tool observations to the model as *user*
    messages, and the state prompt puts tool-written state into the user's."""
    for one in _agents(agent):
        prompt = getattr(one, "system_prompt", None)
        if isinstance(prompt, str):
            yield Input("system", prompt)
    user_msg = kwargs.get("user_msg")
    if user_msg is None and args and isinstance(args[0], (str, ChatMessage)):
        user_msg = args[0]
    history = kwargs.get("chat_history") or []
    for message in [*history, user_msg]:
        if isinstance(message, str):
            yield Input("user", message)
        elif isinstance(message, ChatMessage) and message.role == MessageRole.USER:
            yield Input("user", message.content or "")


class _RecordingRun:
    """A workflow agent's ``run``, recording its trusted inputs first (when the guard
    reads sessions; not in the body of a tool call: an agent run by a tool gets the
    calling model's words)."""

    def __init__(self, guard: Guard, agent: Any, inner: Callable[..., Any]) -> None:
        self.guard = guard
        self.agent = agent
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if records_inputs(self.guard) and not inside_a_call(self.guard):
            found = _trusted_inputs(self.agent, args, kwargs)
            inputs_of(self.guard).record(self.guard, found)
        return self.inner(*args, **kwargs)


def guard_agent(
    agent: Any,
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    approve_in_workflow: bool = False,
    approval_timeout: float | None = 300.0,
) -> Any:
    """Guard every tool of a workflow agent (``FunctionAgent``, ``ReActAgent``, or each
    agent of an ``AgentWorkflow``) in place and return it. ``refusal="message"``: the
    model reads a refusal as the tool's error output and the run goes on; ``"raise"``:
    each call is judged when a function-calling model asks for it and a refusal raises
    out of ``agent.run`` (not for ``ReActAgent``, which has no such step).
    ``approve_in_workflow=True`` (needs a guard with a store): a call that needs a
    human pauses the workflow with an :class:`ApprovalRequested` event (an
    ``InputRequiredEvent``) and goes on when a ``HumanResponseEvent`` answers it.
    :func:`unguard_agent` undoes it. A TypeError names a tool that cannot be gated,
    before anything is changed."""
    if approve_in_workflow and guard.store is None:
        raise ValueError("approve_in_workflow needs a guard with a store")
    if refusal not in ("raise", "message"):
        raise ValueError(f"refusal must be 'raise' or 'message', not {refusal!r}")
    agents = _agents(agent)
    tools = [tool for one in agents for tool in _function_tools(one)]
    if refusal == "raise":
        for one in agents:
            if type(one).__name__ == "ReActAgent":
                raise ValueError(
                    "a ReActAgent parses its tool calls from text, outside any step a "
                    "refusal can leave agent.run from: use refusal='message'"
                )
    for tool in tools:
        if not ADAPTER.guarded_by(tool, guard):
            ADAPTER.attach(tool, guard, mapper=mapper)
        gate = getattr(vars(tool).get("_async_fn"), "__interlock_gate__", None)
        if isinstance(gate, _ToolGate):
            gate.ask_human = approve_in_workflow
            gate.approval_timeout = approval_timeout
    if refusal == "raise":
        for one in agents:
            llm = one.llm
            by_name = {t.metadata.get_name(): t for t in _function_tools(one)}
            _SCREEN.tools[id(llm)] = (_constant(by_name), mapper)
            _SCREEN.attach(llm, guard)
    if not isinstance(vars(agent).get("run"), _RecordingRun):
        # no hook sees the user's message before the workflow builds on it: the one
        # instance attribute guard_agent sets (unguard_agent removes it)
        object.__setattr__(agent, "run", _RecordingRun(guard, agent, agent.run))
    return agent


def _constant(tools: dict[str, FunctionTool]) -> Callable[[], Mapping[str, Any]]:
    return lambda: tools


def unguard_agent(agent: Any) -> Any:
    """Undo :func:`guard_agent`: every tool and model restored exactly."""
    if isinstance(vars(agent).get("run"), _RecordingRun):
        del vars(agent)["run"]
    for one in _agents(agent):
        for tool in getattr(one, "tools", None) or []:
            if isinstance(tool, FunctionTool):
                ADAPTER.detach(tool)
        llm = getattr(one, "llm", None)
        if llm is not None:
            _SCREEN.detach(llm)
            _SCREEN.tools.pop(id(llm), None)
    return agent


class AgentAdapter(Adapter):
    """``guard.attach(agent)`` for a workflow agent (``FunctionAgent``, ``ReActAgent``)
    or an ``AgentWorkflow``: :func:`guard_agent` in message style (LlamaIndex's own);
    ``guard.detach(agent)`` is :func:`unguard_agent`. Nothing on the agent itself is
    patched: its tools are, each in place. ``guard.coverage(agent)`` lists every tool
    of every agent in it, and each agent's model."""

    framework = "llama-index-agent"
    distribution = "llama-index-core"
    supported = ("0.14", "0.15")
    extra = "llama-index"
    targets = ()
    inspects_models = True

    def can_wrap(self, obj: object) -> bool:
        from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent

        return isinstance(obj, (BaseWorkflowAgent, AgentWorkflow))

    def attach(self, obj: Any, guard: Guard) -> Any:
        record = self._attached.get(id(obj))
        if record is not None and record.guard is not guard:
            raise ValueError("this object is attached to another guard; detach it first")
        guard_agent(obj, guard)
        return super().attach(obj, guard)

    def detach(self, obj: Any) -> Any:
        if self.is_attached(obj):
            unguard_agent(obj)
        return super().detach(obj)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [
            _tool_binding(tool, guard, container=one.tools, key=index)
            for one in _agents(obj)
            for index, tool in enumerate(getattr(one, "tools", None) or [])
        ]

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        return [
            binding
            for one in _agents(obj)
            if getattr(one, "llm", None) is not None
            for binding in LLM_ADAPTER.llm_bindings(one.llm, guard)
        ]


ADAPTER = register_adapter(FunctionToolAdapter())
LLM_ADAPTER = register_adapter(LLMAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
