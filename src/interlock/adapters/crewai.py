"""The CrewAI adapter (``crewai``).

Where the gate sits, and why there. CrewAI's own hooks (``before_tool_call``,
``before_llm_call``) *fail open*: any exception a hook raises other than CrewAI's own
``HookAborted`` is swallowed and the tool (or model) runs anyway. So the verdict is never
left to a hook: the gate sits on the tool itself — ``BaseTool.run`` / ``arun``, and every
attribute below them that runs the body (``_run`` / ``_arun``, and ``func`` on a
``@tool``) — and on the model itself (``BaseLLM.call`` / ``acall``). Every path CrewAI
takes to a tool goes through one of them: the native function-calling loop calls
``tool.run``, the ReAct loop calls the structured tool whose ``func`` is ``tool._run``,
and a direct call of any of them is judged as well. The body runs on allow only.

A refused tool call, inside a crew:

- ``refusal="raise"`` (default): the ``Blocked`` error (``ActionDenied`` /
  ``ApprovalRequired`` / ``ActionUndetermined``) comes out of ``crew.kickoff()``. It is
  also a ``HookAborted``, the one error CrewAI treats as a deliberate stop (never fed
  back to the model, never retried). CrewAI catches every exception a tool body raises
  and feeds it to the model, so the tool gate hands the refusal to an
  ``after_tool_call`` hook of this adapter, which re-raises it where CrewAI lets it out.
  If that hook is missing, the call is still refused (the body never ran); the model
  just reads the refusal instead.
- ``refusal="message"``: the tool returns a ``ToolFailure`` (CrewAI's own "this call
  did not succeed" result) carrying the reason and any approval URL; the model reads it
  and the loop goes on, and the failure is recorded on the task output
  (``tool_failures``) like any other.

A call that needs a human is refused (default), waited for in place
(``on_approval="wait"``), or asked at the console (``on_approval="ask"``: CrewAI's own
human-input prompt, whose answer decides the Interlock approval).

Called directly (``tool.run(...)``), a refused call raises (or, message style, returns
the ``ToolFailure``). Model calls are checked as ``llm`` actions and reserved on the
policy's budgets before the model runs, committed from the usage the LLM reports
(``get_token_usage_summary``) after, released if it raises; a refused model call
raises out of ``kickoff`` the same way.

Example::

    from crewai import Agent, Crew, Task
    from interlock.adapters.crewai import guard_crew

    crew = guard_crew(Crew(agents=[agent], tasks=[task]), guard, refusal="message")
    crew.kickoff()
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
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
    decide_starting,
    inside_a_call,
    pending_approval,
    register_adapter,
    run_settled,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action
from interlock.core.decision import Decision
from interlock.errors import ActionDenied, ActionUndetermined, ApprovalRequired, Blocked
from interlock.ledger.usage import Usage

try:
    from crewai import Crew
    from crewai.agents.agent_builder.base_agent import BaseAgent
    from crewai.hooks import (
        register_after_tool_call_hook,
        register_before_tool_call_hook,
        unregister_after_tool_call_hook,
        unregister_before_tool_call_hook,
    )
    from crewai.hooks.dispatch import HookAborted
    from crewai.hooks.tool_hooks import ToolCallHookContext
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools.base_tool import BaseTool, Tool
    from crewai.tools.tool_failure import ToolFailure, ToolFailureReason
except ImportError as exc:  # the extra is missing (or a crewai too old for these hooks)
    raise ImportError(
        f"the CrewAI adapter needs crewai>=1.15.29,<2 ({exc}): pip install 'interlock[crewai]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard, Mapper
    from interlock.ledger.llm_call import LLMCall

__all__ = [
    "AGENT_ADAPTER",
    "CREW_ADAPTER",
    "LLM_ADAPTER",
    "TOOL_ADAPTER",
    "AgentAdapter",
    "CrewAdapter",
    "LLMAdapter",
    "ToolAdapter",
    "crew_error",
    "estimate_usage",
    "guard_agent",
    "guard_crew",
    "guard_llm",
    "guard_tool",
    "guard_tools",
    "is_refusal",
    "run_inputs",
    "tool_action",
]

log = logging.getLogger("interlock")

Refusal = Literal["raise", "message"]
OnApproval = Literal["refuse", "wait", "ask"]
Estimator = Callable[[Any, Any], Usage]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4

#: The ``ToolFailure.code`` prefix of a refusal (``interlock:deny`` ...).
REFUSAL_CODE: Final = "interlock:"

#: Who decides an approval asked at the console (``on_approval="ask"``), and the
#: answers that approve it (anything else denies).
CONSOLE_APPROVER: Final = "crewai-console"
APPROVE_WORDS: Final = frozenset({"approve", "approved", "y", "yes"})


# -- refusals CrewAI lets out of kickoff as they are -------------------------------------


class _Aborted(HookAborted):  # type: ignore[misc]
    """CrewAI's deliberate stop, carrying a ``Blocked`` error: first in the MRO, so
    ``reason`` is the decision's (CrewAI reads it) and the ``Blocked`` initialiser
    runs, not ``HookAborted``'s."""

    source: Any = "interlock"
    decision: Decision  # set by the Blocked initialiser

    @property
    def reason(self) -> str:
        return self.decision.reason

    @reason.setter
    def reason(self, value: str) -> None:
        pass


class _CrewDenied(_Aborted, ActionDenied):
    """An ``ActionDenied`` CrewAI treats as a deliberate stop (a ``HookAborted``)."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        ActionDenied.__init__(self, message, decision=decision)  # HookAborted's is skipped


class _CrewApprovalRequired(_Aborted, ApprovalRequired):
    """An ``ApprovalRequired`` CrewAI treats as a deliberate stop."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        ApprovalRequired.__init__(self, message, decision=decision)  # HookAborted's is skipped


class _CrewUndetermined(_Aborted, ActionUndetermined):
    """An ``ActionUndetermined`` CrewAI treats as a deliberate stop."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        ActionUndetermined.__init__(self, message, decision=decision)  # HookAborted's is skipped


_CREW_ERRORS: Final[dict[type[Blocked], type[Blocked]]] = {
    ActionDenied: _CrewDenied,
    ApprovalRequired: _CrewApprovalRequired,
    ActionUndetermined: _CrewUndetermined,
}


def crew_error(error: Blocked) -> Blocked:
    """``error`` as the same ``Blocked`` subclass that is also CrewAI's ``HookAborted``,
    so no executor feeds it back to the model or retries it: it leaves ``kickoff``."""
    if isinstance(error, _Aborted):
        return error
    twin = _CREW_ERRORS.get(type(error))
    if twin is None:
        return error
    converted = twin(str(error), decision=error.decision)
    converted.__cause__ = error.__cause__
    return converted


def is_refusal(result: object) -> bool:
    """Whether a tool result is the ``ToolFailure`` of a refusal (message style)."""
    code = getattr(result, "code", None)
    return (
        isinstance(result, ToolFailure) and isinstance(code, str) and code.startswith(REFUSAL_CODE)
    )


def _refusal_result(error: Blocked) -> Any:
    decision = error.decision
    return ToolFailure(
        message=str(error),
        reason=ToolFailureReason.TOOL_REPORTED,
        code=f"{REFUSAL_CODE}{decision.verdict.value}",
        details={"decision_id": decision.decision_id, "rule_ids": list(decision.rule_ids)},
    )


# -- the hand-over from a refused body to the after_tool_call hook ------------------------
#
# The before hook opens a slot for the call (in the context the executor runs the call
# in: hooks, body and after hook share it, parallel calls each have their own copy); a
# raise-style refusal puts its error there; the after hook raises it. Nothing else is
# decided in a hook.

_SLOT: contextvars.ContextVar[list[Blocked] | None] = contextvars.ContextVar(
    "interlock_crewai_refusal", default=None
)


#: The agent and task of the tool call under way (from the same before hook), for the
#: tool gate to record their trusted inputs when the models are not guarded here.
_RUN: contextvars.ContextVar[tuple[Any, Any]] = contextvars.ContextVar(
    "interlock_crewai_run", default=(None, None)
)


def _open_slot(context: Any) -> None:
    _SLOT.set([])
    _RUN.set((getattr(context, "agent", None), getattr(context, "task", None)))


def _raise_refusal(context: Any) -> None:
    slot = _SLOT.get()
    _SLOT.set(None)
    if slot:
        raise slot[0]  # a HookAborted: CrewAI lets it out of kickoff


class _Hooks:
    """The two global tool hooks, registered while any tool is attached."""

    def __init__(self) -> None:
        self._users = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                register_before_tool_call_hook(_open_slot)
                register_after_tool_call_hook(_raise_refusal)

    def release(self) -> None:
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0:
                unregister_before_tool_call_hook(_open_slot)
                unregister_after_tool_call_hook(_raise_refusal)

    @property
    def users(self) -> int:
        """How many attached tools hold the hooks registered (0: not registered)."""
        return self._users


HOOKS: Final = _Hooks()


# -- the user's words: recorded as trusted inputs of the session -------------------------

#: The crew input that carries a crew chat's history: only its user messages are the user's.
CHAT_INPUT: Final = "crew_chat_messages"


def _leaves(value: object) -> Iterator[str]:
    """The text of each leaf of a crew input: strings and numbers, in dicts and lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)


def _user_messages(value: object) -> Iterator[str]:
    """The user's messages of a crew chat's history (the assistant's are the model's)."""
    try:
        messages = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                yield content


def _crew_of(agent: Any, task: Any) -> Any:
    for owner in (agent, getattr(task, "agent", None)):
        crew = getattr(owner, "crew", None)
        if isinstance(crew, Crew):
            return crew
    return None


def run_inputs(agent: Any, task: Any) -> list[Input]:
    """The trusted inputs of a run of ``agent`` on ``task``: the agent's role, goal and
    backstory (the operator's words); for a task of the agent's crew, its description
    and expected output as written (before CrewAI's planner appends its plan, or the
    history of a crew chat is appended) and the crew's kickoff inputs (a chat history
    input: its user messages). A task not in the crew's ``tasks`` gives nothing: the
    delegation tools make one from the delegating model's words.

    Example::

        inputs_of(guard).record(guard, run_inputs(agent, task))
    """
    found = [
        Input("system", text)
        for attr in ("role", "goal", "backstory")
        if isinstance(text := getattr(agent, attr, None), str)
    ]
    crew = _crew_of(agent, task)
    if task is None or crew is None or not any(t is task for t in crew.tasks or ()):
        return found
    description = getattr(task, "_original_description", None)
    if description is None and not getattr(crew, "planning", False):
        description = task.description  # never interpolated, and no plan appended
    expected = getattr(task, "_original_expected_output", None) or task.expected_output
    found += [Input("user", text) for text in (description, expected) if isinstance(text, str)]
    given = getattr(crew, "_inputs", None)
    for key, value in (given if isinstance(given, Mapping) else {}).items():
        texts = _user_messages(value) if key == CHAT_INPUT else _leaves(value)
        found += [Input("user", text) for text in texts]
    return found


def _record_run(guard: Guard, agent: Any, task: Any) -> None:
    """Record the trusted inputs of this run, once per session: only when the guard
    reads sessions, and never inside a call it allowed (a crew run as a tool: the
    calling model wrote its inputs)."""
    if agent is None or not records_inputs(guard) or inside_a_call(guard):
        return
    inputs_of(guard).record(guard, run_inputs(agent, task))


async def _arecord_run(guard: Guard, agent: Any, task: Any) -> None:
    if agent is None or not records_inputs(guard) or inside_a_call(guard):
        return
    inputs = inputs_of(guard)
    fresh = inputs.fresh(guard, run_inputs(agent, task))
    if fresh:  # recording may write to a store: off the event loop
        await asyncio.to_thread(inputs.record, guard, fresh)


# -- one tool call as the guard sees it -------------------------------------------------


def _field_names(tool: Any) -> list[str]:
    schema = getattr(tool, "args_schema", None)
    fields = getattr(schema, "model_fields", None)
    return list(fields) if isinstance(fields, Mapping) else []


def _tool_schema(tool: Any) -> dict[str, Any] | None:
    schema = getattr(tool, "args_schema", None)
    try:
        return dict(schema.model_json_schema()) if schema is not None else None
    except Exception:  # a schema we cannot render: judge on the arguments alone
        return None


def tool_arguments(tool: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of one call as the body receives them: positional values named by
    the tool's fields in order (a value beyond them as ``arg<i>``), then the keywords."""
    names = _field_names(tool)
    named = {names[i] if i < len(names) else f"arg{i}": value for i, value in enumerate(args)}
    named.update(kwargs)
    return named


def tool_action(tool: Any, arguments: Mapping[str, Any]) -> Action:
    """The Action for one call of a CrewAI tool, projected onto its args schema."""
    return Action.tool(
        str(tool.name),
        dict(arguments),
        schema=_tool_schema(tool),
        description=getattr(tool, "description", None) or None,
    )


@dataclass(frozen=True, slots=True)
class _Options:
    refusal: Refusal = "raise"
    mapper: Mapper | None = None
    on_approval: OnApproval = "refuse"
    approval_timeout: float = 300.0


def _checked_options(guard: Guard, options: _Options) -> _Options:
    if options.refusal not in ("raise", "message"):
        raise ValueError(f"refusal must be 'raise' or 'message', not {options.refusal!r}")
    if options.on_approval not in ("refuse", "wait", "ask"):
        raise ValueError(
            f"on_approval must be 'refuse', 'wait' or 'ask', not {options.on_approval!r}"
        )
    if options.on_approval != "refuse" and guard.store is None:
        raise ValueError(
            f"on_approval={options.on_approval!r} needs a guard with a store, where approvals live"
        )
    return options


class _Gate:
    """Judges the calls of one tool (shared by every layer of it)."""

    def __init__(self, guard: Guard, tool: Any, options: _Options) -> None:
        self.guard = guard
        self.tool = tool
        self.options = options
        self._schema: tuple[dict[str, Any] | None] | None = None

    def action(self, arguments: Mapping[str, Any]) -> Action:
        if self._schema is None:  # rendered once: pydantic's schema is slow to build
            self._schema = (_tool_schema(self.tool),)
        return Action.tool(
            str(self.tool.name),
            dict(arguments),
            schema=self._schema[0],
            description=getattr(self.tool, "description", None) or None,
        )

    def decide(self, arguments: dict[str, Any]) -> Decision | None:
        """The verdict on one call; ``None`` when the mapper says it is not ours. A call
        that opened (or found) a pending approval waits for a human (``"wait"``) or
        asks one at the console (``"ask"``), then is judged again: the identical call
        claims the grant once; a denial, or no decision in time, is the verdict then."""
        decision = self._decide_once(arguments)
        approval_id = None if decision is None else pending_approval(decision)
        if approval_id is None or self.options.on_approval == "refuse":
            return decision
        assert decision is not None
        if self.options.on_approval == "ask":
            self._ask(approval_id, decision, arguments)
        else:
            self.guard.wait_for_approval(approval_id, self.options.approval_timeout)
        return self._decide_once(arguments) or decision

    async def adecide(self, arguments: dict[str, Any]) -> Decision | None:
        decision = await self._adecide_once(arguments)
        approval_id = None if decision is None else pending_approval(decision)
        if approval_id is None or self.options.on_approval == "refuse":
            return decision
        assert decision is not None
        if self.options.on_approval == "ask":
            await asyncio.to_thread(self._ask, approval_id, decision, arguments)
        else:
            await self.guard.await_approval(approval_id, self.options.approval_timeout)
        return await self._adecide_once(arguments) or decision

    def _ask(self, approval_id: str, decision: Decision, arguments: dict[str, Any]) -> None:
        """Ask the human at the console, the way CrewAI's own approval gates do
        (``ToolCallHookContext.request_human_input``), and record the answer as the
        approval's decision. A store that refuses it (a self-approval rule) leaves the
        approval pending: the call stays refused."""
        approval = decision.approval
        url = f"\nApproval: {approval.url}" if approval is not None and approval.url else ""
        shown = json.dumps(arguments, default=str, sort_keys=True)
        prompt = (
            f"Interlock: tool '{self.tool.name}' needs approval ({decision.reason}).\n"
            f"Arguments: {shown}{url}"
        )
        context = ToolCallHookContext(
            tool_name=str(self.tool.name), tool_input=arguments, tool=None
        )
        answer = context.request_human_input(
            prompt, default_message="Type 'approve' to run it, anything else to refuse:"
        )
        store = self.guard.store
        assert store is not None  # on_approval="ask" needs a store (checked when guarded)
        try:
            if answer.strip().lower() in APPROVE_WORDS:
                store.approve(approval_id, by=CONSOLE_APPROVER, reason="approved at the console")
            else:
                store.deny(approval_id, by=CONSOLE_APPROVER, reason=answer.strip() or "refused")
        except Exception:
            log.exception("interlock: could not record the console's answer on %s", approval_id)

    def _decide_once(self, arguments: dict[str, Any]) -> Decision | None:
        if self.options.mapper is None:
            return self.guard.check(self.action(arguments))
        return self.guard.check_mapped(self.options.mapper, self.tool.name, arguments, self.tool)

    async def _adecide_once(self, arguments: dict[str, Any]) -> Decision | None:
        if self.options.mapper is None:
            return await self.guard.acheck(self.action(arguments))
        return await self.guard.acheck_mapped(
            self.options.mapper, self.tool.name, arguments, self.tool
        )

    def refuse(self, decision: Decision, arguments: dict[str, Any]) -> Any:
        """The refusal: a ``ToolFailure`` the model reads (message style), or the error
        raised, handed to the after hook first so it leaves ``kickoff``."""
        error = verdict_outcome(decision, self.action(arguments)).error
        assert error is not None  # only called for a decision that is not allow
        if self.options.refusal == "message":
            return _refusal_result(error)
        error = crew_error(error)
        slot = _SLOT.get()
        if slot is not None:
            slot.append(error)
        raise error


# -- the layers of one tool: the outermost one judges, the ones below pass it once -------

#: layer → the layers below it that the same call passes through
_BELOW: Final[dict[str, frozenset[str]]] = {
    "run": frozenset({"_run", "func"}),
    "arun": frozenset({"_arun", "func"}),
    "_run": frozenset({"func"}),
    "_arun": frozenset({"func"}),
    "func": frozenset(),
}

_PASSES: contextvars.ContextVar[dict[int, set[str]]] = contextvars.ContextVar(
    "interlock_crewai_passes"
)


@contextlib.contextmanager
def _passing(tool: Any, layers: frozenset[str]) -> Iterator[None]:
    token = _PASSES.set({**_PASSES.get({}), id(tool): set(layers)})
    try:
        yield
    finally:
        _PASSES.reset(token)


def _passes(tool: Any, layer: str) -> bool:
    """Whether this call of ``tool`` was judged above ``layer`` (used up here)."""
    granted = _PASSES.get({}).get(id(tool))
    if granted is not None and layer in granted:
        granted.discard(layer)
        return True
    return False


def _guarded_sync(gate: _Gate, original: Callable[..., Any], layer: str) -> Any:
    tool, guard, below = gate.tool, gate.guard, _BELOW[layer]

    @functools.wraps(original)  # CrewAI reads the body's signature (structured tools)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _passes(tool, layer):
            return original(*args, **kwargs)

        def call() -> Any:
            with _passing(tool, below):
                return original(*args, **kwargs)

        arguments = tool_arguments(tool, args, kwargs)
        key = call_key(tool.name, arguments)
        if already_judged(guard, key):
            return call()
        _record_run(guard, *_RUN.get())
        decision, started = decide_starting(guard, tool.name, lambda: gate.decide(arguments))
        if decision is None:
            return call()
        if not decision.allowed:
            return gate.refuse(decision, arguments)
        return run_settled(guard, decision, call, key, started=started)

    return _seal(guarded, original)


def _guarded_async(gate: _Gate, original: Callable[..., Any], layer: str) -> Any:
    tool, guard, below = gate.tool, gate.guard, _BELOW[layer]

    @functools.wraps(original)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        if _passes(tool, layer):
            return await original(*args, **kwargs)

        async def call() -> Any:
            with _passing(tool, below):
                return await original(*args, **kwargs)

        arguments = tool_arguments(tool, args, kwargs)
        key = call_key(tool.name, arguments)
        if already_judged(guard, key):
            return await call()
        await _arecord_run(guard, *_RUN.get())
        decision, started = await adecide_starting(
            guard, tool.name, lambda: gate.adecide(arguments)
        )
        if decision is None:
            return await call()
        if not decision.allowed:
            return gate.refuse(decision, arguments)
        return await arun_settled(guard, decision, call, key, started=started)

    return _seal(guarded, original)


def _never_cache(original: Callable[..., Any]) -> Any:
    """A tool's ``cache_function`` that never caches a guarded call's result: CrewAI
    serves a cached result before the tool runs, so a cached call would skip the
    decision (and a cached refusal would outlive the approval that lifts it)."""

    def cache_function(args: Any = None, result: Any = None) -> bool:
        return False

    cache_function.__interlock_original__ = original  # type: ignore[attr-defined]
    return cache_function


def _seal(guarded: Any, original: Callable[..., Any]) -> Any:
    """Keep ``original``'s signature on ``guarded`` (CrewAI reads it to build a
    structured tool's schema) without ``functools.wraps``' ``__wrapped__``, a public
    road to the unguarded body."""
    with contextlib.suppress(TypeError, ValueError):  # none to keep: CrewAI reads none
        guarded.__signature__ = inspect.signature(original)
    guarded.__dict__.pop("__wrapped__", None)
    guarded.__interlock_original__ = original  # for coverage (tool_binding)
    return guarded


def _unguarded(body: Any) -> Any:
    """The body behind a guarded one (itself when it is not guarded)."""
    return getattr(body, "__interlock_original__", body)


# -- attach / detach --------------------------------------------------------------------


class ToolAdapter(Adapter):
    """Guards a CrewAI ``BaseTool`` in place: ``run`` / ``arun`` and the bodies below
    them (``_run`` / ``_arun``, ``func`` on a ``@tool``), per instance. CrewAI has no
    tool hook that fails closed, and a direct call reaches no hook at all: so these are
    patched, and the hooks only carry a raise-style refusal out of ``kickoff``. Its
    ``cache_function`` is replaced too: a guarded call's result is never cached."""

    framework = "crewai"
    distribution = "crewai"
    # 1.15.29: the first whose executors (the ReAct loop too) let a HookAborted raised
    # by an after_tool_call hook out of kickoff; before it a raise-style refusal was fed
    # to the model (the body still never ran).
    supported = ("1.15.29", "2")
    extra = "crewai"
    targets = (
        PatchTarget(BaseTool, "run"),
        PatchTarget(BaseTool, "arun"),
        PatchTarget(BaseTool, "_run"),
        PatchTarget(BaseTool, "_arun"),
        PatchTarget(BaseTool, "cache_function"),
    )

    def __init__(self) -> None:
        super().__init__()
        self._options: dict[int, _Options] = {}

    def targets_for(self, obj: object) -> tuple[PatchTarget, ...]:
        if isinstance(obj, Tool) and callable(getattr(obj, "func", None)):
            return (*self.targets, PatchTarget(Tool, "func"))
        return self.targets

    def attach_with(self, obj: Any, guard: Guard, options: _Options) -> Any:
        """:meth:`attach` with a refusal style, mapper and approval behaviour."""
        if self.is_attached(obj):
            return self.attach(obj, guard)
        self._options[id(obj)] = _checked_options(guard, options)
        try:
            return self.attach(obj, guard)
        finally:
            self._options.pop(id(obj), None)

    def attach(self, obj: Any, guard: Guard) -> Any:
        fresh = not self.is_attached(obj)
        attached = super().attach(obj, guard)
        if fresh:
            HOOKS.acquire()
        return attached

    def detach(self, obj: Any) -> Any:
        if self.is_attached(obj):
            super().detach(obj)
            HOOKS.release()
        return obj

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        if target.attr == "cache_function":
            return _never_cache(original)
        gate = _Gate(guard, obj, self._options.get(id(obj), _Options()))
        if target.attr in ("arun", "_arun") or inspect.iscoroutinefunction(original):
            return _guarded_async(gate, original, target.attr)
        return _guarded_sync(gate, original, target.attr)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [tool_binding(obj, self.guarded_by(obj, guard), owner=obj, attr="run")]


def tool_binding(tool: Any, guarded: bool, **where: Any) -> ToolBinding:
    """How the guard sees one CrewAI tool."""
    body = _unguarded(getattr(tool, "func", None)) or _unguarded(tool._run)
    return ToolBinding(
        str(tool.name),
        getattr(tool, "description", None) or None,
        _tool_schema(tool),
        body,
        guarded=guarded,
        **where,
    )


# -- model calls: checked and reserved before, committed from real usage after ----------


def estimate_usage(llm: Any, messages: Any) -> Usage:
    """A reservation for one model call: the messages' characters / 4 as input tokens,
    the LLM's ``max_tokens`` (when set) as output tokens."""
    text = messages if isinstance(messages, str) else json.dumps(messages, default=str)
    ceiling = getattr(llm, "max_tokens", None)
    output = int(ceiling) if isinstance(ceiling, (int, float)) and ceiling > 0 else 0
    return Usage(math.ceil(len(text) / CHARS_PER_TOKEN), output)


def _usage_so_far(llm: Any) -> Any:
    try:
        return llm.get_token_usage_summary()
    except Exception:  # an LLM that keeps no counters: the estimate stands
        return None


def _record_usage(call: LLMCall, llm: Any, before: Any) -> None:
    """Record what the LLM counted during the call (its lifetime counters, after minus
    before); a call that counted nothing keeps the estimate."""
    after = _usage_so_far(llm)
    if before is None or after is None:
        return
    try:
        spent = after.delta_since(before)
        used = Usage(int(spent.prompt_tokens), int(spent.completion_tokens))
    except Exception:
        return
    if used.total:
        call.record(used)


@dataclass(frozen=True, slots=True)
class _ModelGate:
    guard: Guard
    llm: Any
    estimate: Estimator

    def llm_call(self, messages: Any) -> LLMCall:
        name = str(getattr(self.llm, "model", None) or type(self.llm).__name__)
        return self.guard.llm_call(name, estimate=self.estimate(self.llm, messages))


def _messages(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return args[0] if args else kwargs.get("messages", "")


def _guarded_call(gate: _ModelGate, original: Callable[..., Any]) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        _record_run(gate.guard, kwargs.get("from_agent"), kwargs.get("from_task"))
        try:
            with gate.llm_call(_messages(args, kwargs)) as spent:
                before = _usage_so_far(gate.llm)
                result = original(*args, **kwargs)
                _record_usage(spent, gate.llm, before)
        except Blocked as exc:
            raise crew_error(exc) from exc.__cause__
        return result

    return _seal(call, original)


def _guarded_acall(gate: _ModelGate, original: Callable[..., Any]) -> Any:
    @functools.wraps(original)
    async def acall(*args: Any, **kwargs: Any) -> Any:
        await _arecord_run(gate.guard, kwargs.get("from_agent"), kwargs.get("from_task"))
        try:
            async with gate.llm_call(_messages(args, kwargs)) as spent:
                before = _usage_so_far(gate.llm)
                result = await original(*args, **kwargs)
                _record_usage(spent, gate.llm, before)
        except Blocked as exc:
            raise crew_error(exc) from exc.__cause__
        return result

    return _seal(acall, original)


class LLMAdapter(Adapter):
    """Guards a CrewAI ``BaseLLM`` in place at ``call`` / ``acall`` (``stream_events``
    goes through ``call``). The ``before_llm_call`` hook fails open and no
    ``after_llm_call`` hook runs when the model raises, so a reservation made there
    could be neither refused reliably nor released: the model's own methods are
    patched instead, per instance."""

    framework = "crewai-llm"
    distribution = "crewai"
    supported = ToolAdapter.supported
    extra = "crewai"
    targets = (PatchTarget(BaseLLM, "call"), PatchTarget(BaseLLM, "acall"))
    inspects_models = True

    def __init__(self) -> None:
        super().__init__()
        self._estimates: dict[int, Estimator] = {}

    def attach_with(self, obj: Any, guard: Guard, estimate: Estimator | None) -> Any:
        if estimate is None or self.is_attached(obj):
            return self.attach(obj, guard)
        self._estimates[id(obj)] = estimate
        try:
            return self.attach(obj, guard)
        finally:
            self._estimates.pop(id(obj), None)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        gate = _ModelGate(guard, obj, self._estimates.get(id(obj), estimate_usage))
        if target.attr == "acall":
            return _guarded_acall(gate, original)
        return _guarded_call(gate, original)

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        return [llm_binding(obj, self.guarded_by(obj, guard), owner=obj, attr="call")]


def llm_binding(llm: Any, guarded: bool, **where: Any) -> LLMBinding:
    label = str(getattr(llm, "model", None) or type(llm).__name__)
    return LLMBinding(label, _unguarded(llm.call), guarded=guarded, **where)


# -- agents and crews: their tools and models -----------------------------------------------


def _runtime_tools(agent: Any) -> list[ToolBinding]:
    """The tools CrewAI makes for ``agent`` only when a task runs: never in its
    ``tools``, so never gated here."""
    found: list[ToolBinding] = []
    if getattr(agent, "allow_delegation", False):
        found.append(
            ToolBinding(
                f"delegation:{agent.role}",
                "Delegate work / Ask question to coworker (made at run time)",
                None,
                owner=agent,
                attr="allow_delegation",
                guarded=False,
                note="CrewAI makes the delegation tools when a task runs: not gated",
            )
        )
    for attr, what in (("mcps", "MCP servers"), ("apps", "platform apps")):
        if getattr(agent, attr, None):
            found.append(
                ToolBinding(
                    f"{attr}:{agent.role}",
                    f"the tools of the agent's {what} (listed at run time)",
                    None,
                    owner=agent,
                    attr=attr,
                    guarded=False,
                    note=f"the tools of {what} are made at run time: not gated",
                )
            )
    return found


@dataclass(slots=True)
class _Held:
    obj: object  # held strongly until detach (as the base's): its id is never reused meanwhile
    guard: Guard
    tools: list[Any]
    llms: list[Any]


class _ContainerAdapter(Adapter):
    """Attaches the tools and models of an agent (or of every agent and task of a crew)
    through :data:`TOOL_ADAPTER` and :data:`LLM_ADAPTER`; detach undoes exactly what
    this attach attached."""

    distribution = "crewai"
    supported = ToolAdapter.supported
    extra = "crewai"
    targets = ()
    inspects_models = True

    def __init__(self) -> None:
        super().__init__()
        self._held: dict[int, _Held] = {}
        self._options: _Options = _Options()
        self._estimate: Estimator | None = None
        self._models = True
        self._lock = threading.RLock()

    def parts(self, obj: Any) -> tuple[list[Any], list[Any]]:
        """The tools and models of ``obj`` (each once)."""
        raise NotImplementedError

    def is_attached(self, obj: object) -> bool:
        return id(obj) in self._held

    def guarded_by(self, obj: object, guard: Guard | None) -> bool:
        held = self._held.get(id(obj))
        return held is not None and (guard is None or held.guard is guard)

    def attach_with(
        self,
        obj: Any,
        guard: Guard,
        options: _Options,
        estimate: Estimator | None = None,
        models: bool = True,
    ) -> Any:
        with self._lock:  # the options below are read by attach: one attach at a time
            self._options, self._estimate = _checked_options(guard, options), estimate
            self._models = models
            try:
                return self.attach(obj, guard)
            finally:
                self._options, self._estimate, self._models = _Options(), None, True

    def attach(self, obj: Any, guard: Guard) -> Any:
        if not self.can_wrap(obj):
            raise TypeError(f"the {self.framework} adapter cannot guard a {type(obj).__name__}")
        held = self._held.get(id(obj))
        if held is not None:
            if held.guard is not guard:
                raise ValueError("this object is attached to another guard; detach it first")
            return obj
        tools, llms = self.parts(obj)
        if not self._models:
            llms = []
        for part in (*tools, *llms):  # refuse before changing anything
            owner = TOOL_ADAPTER if isinstance(part, BaseTool) else LLM_ADAPTER
            record = owner._attached.get(id(part))
            if record is not None and record.guard is not guard:
                raise ValueError(f"{part!r} is attached to another guard; detach it first")
        held = _Held(obj, guard, [], [])
        for tool in tools:
            if not TOOL_ADAPTER.is_attached(tool):
                TOOL_ADAPTER.attach_with(tool, guard, self._options)
                held.tools.append(tool)
        for llm in llms:
            if not LLM_ADAPTER.is_attached(llm):
                LLM_ADAPTER.attach_with(llm, guard, self._estimate)
                held.llms.append(llm)
        self._held[id(obj)] = held
        return obj

    def detach(self, obj: Any) -> Any:
        held = self._held.pop(id(obj), None)
        if held is None:
            return obj
        for tool in held.tools:
            TOOL_ADAPTER.detach(tool)
        for llm in held.llms:
            LLM_ADAPTER.detach(llm)
        return obj

    def _agent_bindings(
        self, agent: Any, guard: Guard | None
    ) -> tuple[list[ToolBinding], list[LLMBinding]]:
        tools = [
            tool_binding(tool, TOOL_ADAPTER.guarded_by(tool, guard), container=agent.tools, key=i)
            for i, tool in enumerate(agent.tools or [])
        ]
        llms = [
            llm_binding(llm, LLM_ADAPTER.guarded_by(llm, guard), owner=agent, attr=attr)
            for attr in ("llm", "function_calling_llm")
            if isinstance(llm := getattr(agent, attr, None), BaseLLM)
        ]
        return tools + _runtime_tools(agent), llms


def _agent_parts(agent: Any) -> tuple[list[Any], list[Any]]:
    tools = [tool for tool in agent.tools or [] if isinstance(tool, BaseTool)]
    llms = [
        llm
        for attr in ("llm", "function_calling_llm")
        if isinstance(llm := getattr(agent, attr, None), BaseLLM)
    ]
    return tools, llms


def _unique(items: Iterable[Any]) -> list[Any]:
    seen: dict[int, Any] = {}
    for item in items:
        seen.setdefault(id(item), item)
    return list(seen.values())


class AgentAdapter(_ContainerAdapter):
    """Guards every tool in an agent's ``tools`` and its model(s)."""

    framework = "crewai-agent"

    def can_wrap(self, obj: object) -> bool:
        return isinstance(obj, BaseAgent)

    def parts(self, obj: Any) -> tuple[list[Any], list[Any]]:
        return _agent_parts(obj)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return self._agent_bindings(obj, guard)[0]

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        return self._agent_bindings(obj, guard)[1]


class CrewAdapter(_ContainerAdapter):
    """Guards the tools and models of every agent of a crew, the tools its tasks carry,
    and its ``manager_llm`` / ``function_calling_llm`` / ``planning_llm`` when they are
    model objects."""

    framework = "crewai-crew"

    def can_wrap(self, obj: object) -> bool:
        return isinstance(obj, Crew)

    def _agents(self, crew: Any) -> list[Any]:
        agents = list(crew.agents or [])
        agents += [t.agent for t in crew.tasks or [] if isinstance(t.agent, BaseAgent)]
        if isinstance(getattr(crew, "manager_agent", None), BaseAgent):
            agents.append(crew.manager_agent)
        return _unique(agents)

    def parts(self, obj: Any) -> tuple[list[Any], list[Any]]:
        tools: list[Any] = []
        llms: list[Any] = []
        for agent in self._agents(obj):
            agent_tools, agent_llms = _agent_parts(agent)
            tools += agent_tools
            llms += agent_llms
        for task in obj.tasks or []:
            tools += [tool for tool in task.tools or [] if isinstance(tool, BaseTool)]
        for attr in ("manager_llm", "function_calling_llm", "planning_llm"):
            if isinstance(llm := getattr(obj, attr, None), BaseLLM):
                llms.append(llm)
        return _unique(tools), _unique(llms)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        bindings: list[ToolBinding] = []
        for agent in self._agents(obj):
            bindings += self._agent_bindings(agent, guard)[0]
        for task in obj.tasks or []:
            bindings += [
                tool_binding(
                    tool, TOOL_ADAPTER.guarded_by(tool, guard), container=task.tools, key=i
                )
                for i, tool in enumerate(task.tools or [])
                if isinstance(tool, BaseTool)
            ]
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        bindings: list[LLMBinding] = []
        for agent in self._agents(obj):
            bindings += self._agent_bindings(agent, guard)[1]
        for attr in ("manager_llm", "function_calling_llm", "planning_llm"):
            if isinstance(llm := getattr(obj, attr, None), BaseLLM):
                guarded = LLM_ADAPTER.guarded_by(llm, guard)
                bindings.append(llm_binding(llm, guarded, owner=obj, attr=attr))
        return bindings


TOOL_ADAPTER = register_adapter(ToolAdapter())
LLM_ADAPTER = register_adapter(LLMAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
CREW_ADAPTER = register_adapter(CrewAdapter())


# -- the functions users call ----------------------------------------------------------------


def guard_tool(
    tool: Any,
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
) -> Any:
    """A guarded copy of a CrewAI ``BaseTool`` (``tool`` itself is left as it was):
    every entry point — ``run``, ``arun``, ``_run``, ``_arun``, ``func``, and the
    structured tool CrewAI makes from it — is judged before the body runs.

    ``refusal``: ``"raise"`` (the ``Blocked`` error, out of ``kickoff`` too) or
    ``"message"`` (a ``ToolFailure`` the model reads). ``mapper(name, args, tool)`` may
    replace the default action (``None``: not ours to judge). A call that needs a
    human (needs a store): ``on_approval="wait"`` waits in place for the approval to be
    decided (approvals page, CLI, webhook); ``"ask"`` asks at the console, CrewAI's
    own human-input prompt, and records the answer as the approval's decision; then
    the identical call is judged again, which claims the grant once.
    """
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"a {type(tool).__name__} is not a CrewAI BaseTool: give agents BaseTool "
            "instances (crewai.tools.tool / BaseTool subclasses) to guard them"
        )
    options = _Options(refusal, mapper, on_approval, approval_timeout)
    copy = tool.model_copy()
    originals = TOOL_ADAPTER.originals(tool)
    if originals is not None:  # a copy of a guarded tool: its gates stay behind
        TOOL_ADAPTER.restore(copy, originals)
    return TOOL_ADAPTER.attach_with(copy, guard, options)


def guard_tools(tools: Iterable[Any], guard: Guard, **options: Any) -> list[Any]:
    """:func:`guard_tool` for each of ``tools``, in order."""
    return [guard_tool(tool, guard, **options) for tool in tools]


def guard_llm(llm: Any, guard: Guard, *, estimate: Estimator | None = None) -> Any:
    """Guard a CrewAI ``BaseLLM`` in place (``estimate(llm, messages)`` gives the
    reservation, default :func:`estimate_usage`) and return it."""
    return LLM_ADAPTER.attach_with(llm, guard, estimate)


def guard_agent(
    agent: Any,
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    estimate: Estimator | None = None,
    models: bool = True,
) -> Any:
    """Guard an agent's tools and model(s) in place (as :func:`guard_tool` and
    :func:`guard_llm`; ``models=False``: its tools only); ``guard.detach(agent)``
    undoes it."""
    options = _Options(refusal, mapper, on_approval, approval_timeout)
    return AGENT_ADAPTER.attach_with(agent, guard, options, estimate, models)


def guard_crew(
    crew: Any,
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    estimate: Estimator | None = None,
    models: bool = True,
) -> Any:
    """Guard the tools and models of every agent and task of a crew in place
    (``models=False``: the tools only); ``guard.detach(crew)`` undoes it.

    Example::

        guard_crew(crew, guard, refusal="message")
        crew.kickoff()
    """
    options = _Options(refusal, mapper, on_approval, approval_timeout)
    return CREW_ADAPTER.attach_with(crew, guard, options, estimate, models)
