"""The smolagents adapter (``smolagents`` 1.x, from 1.20).

smolagents has no middleware or hook around a tool call, so the gate sits at the two
places every call passes:

- the tool: a guarded tool's ``forward`` — which ``Tool.__call__`` runs for every
  call, whatever its form (keywords, one positional value, one dict of inputs, with or
  without ``sanitize_inputs_outputs``) and whoever makes it: your code, a
  ``ToolCallingAgent``, the Python a ``CodeAgent``'s model writes, a ``ToolCollection``
  (MCP) tool. ``forward`` is patched on the *instance* (Python looks ``__call__`` up on
  the type, so an instance ``__call__`` would be skipped by ``tool(...)``). A refusal
  raises ``ActionDenied`` / ``ApprovalRequired`` / ``ActionUndetermined``;
- the agent: ``ToolCallingAgent.execute_tool_call(name, arguments)`` (also for managed
  agents, agents called as tools), which chooses the refusal style: ``"message"``
  (default) raises smolagents' ``AgentToolExecutionError`` — the error is fed back to
  the model and the loop goes on, as smolagents does for any failing tool; ``"raise"``
  raises the ``Blocked`` error out of ``agent.run``. A call the agent judged is not
  judged again in the tool's ``forward`` (one decision per call).

Model calls go through :class:`GuardedModel` (a ``smolagents.Model`` wrapping
another): each ``generate`` / ``generate_stream`` is checked as an ``llm`` action and
reserved on the policy's budgets before the wrapped model runs, and committed from the
``token_usage`` it reports (a stream: the sum of its deltas', once). smolagents wraps
any exception from the model in ``AgentGenerationError``, so a refused model call
ends ``agent.run`` with that error, the ``Blocked`` error as its ``__cause__``.

``guard.attach(agent)`` does all of it in place — the agent's tools, its
``execute_tool_call``, its managed agents, and (with a store) its model — and
``guard.detach(agent)`` restores exactly what was there.

smolagents is synchronous: there is no cancellation to honour, and a slow decision
ends in the guard's timeout (undetermined: the call does not run).

Example::

    from smolagents import ToolCallingAgent
    from interlock.adapters.smolagents import GuardedModel, guard_agent

    agent = guard_agent(ToolCallingAgent(tools=[shell], model=model), guard)
    agent.run("tidy up")
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import (
    Adapter,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    already_judged,
    call_key,
    decide_starting,
    pending_approval,
    register_adapter,
    run_settled,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action, Context
from interlock.core.decision import Decision
from interlock.ledger.usage import Usage

try:
    # smolagents ships no type information (no py.typed): its names are Any here
    from smolagents import (  # type: ignore[import-untyped]
        CodeAgent,
        Model,
        MultiStepAgent,
        Tool,
        ToolCallingAgent,
    )
    from smolagents.default_tools import FinalAnswerTool  # type: ignore[import-untyped]
    from smolagents.local_python_executor import (  # type: ignore[import-untyped]
        LocalPythonExecutor,
    )
    from smolagents.memory import TaskStep  # type: ignore[import-untyped]
    from smolagents.models import (  # type: ignore[import-untyped]
        ChatMessage,
        ChatMessageStreamDelta,
    )
    from smolagents.utils import AgentToolExecutionError  # type: ignore[import-untyped]
except ImportError as exc:  # the extra is missing
    raise ImportError(
        f"the smolagents adapter needs smolagents ({exc}): pip install 'interlock[smolagents]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard, Mapper
    from interlock.ledger.llm_call import LLMCall

__all__ = [
    "AGENT_ADAPTER",
    "TOOL_ADAPTER",
    "AgentAdapter",
    "GuardedModel",
    "ToolAdapter",
    "estimate_usage",
    "guard_agent",
    "guard_tool",
    "guard_tools",
    "tool_action",
    "tool_arguments",
]

Refusal = Literal["message", "raise"]
OnApproval = Literal["refuse", "wait"]

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4

#: The name smolagents gives the tool that ends a run with its answer.
FINAL_ANSWER: Final = "final_answer"


# -- one call as the guard sees it ------------------------------------------------------


def tool_schema(tool: Tool | MultiStepAgent) -> dict[str, Any]:
    """The JSON Schema of a tool's (or managed agent's) ``inputs``."""
    properties = {
        name: {k: v for k, v in spec.items() if k in ("type", "description", "enum")}
        for name, spec in (tool.inputs or {}).items()
    }
    required = [n for n, spec in (tool.inputs or {}).items() if not spec.get("nullable")]
    return {"type": "object", "properties": properties, "required": required}


def tool_arguments(
    tool: Tool | MultiStepAgent, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """A call's arguments by name, as the tool reads them: one dict of its inputs
    (``tool({"command": "ls"})``) is that dict, positional values are named in the
    order of ``tool.inputs``, keywords are kept."""
    single = len(args) == 1 and not kwargs and isinstance(args[0], dict)
    if single and all(key in (tool.inputs or {}) for key in args[0]):
        return dict(args[0])
    named = dict(zip(list(tool.inputs or {}), args, strict=False))
    if len(args) > len(named):  # more positional values than declared inputs
        named["args"] = list(args[len(named) :])
    named.update(kwargs)
    return named


def tool_action(
    tool: Tool | MultiStepAgent, arguments: Mapping[str, Any], call_id: str | None = None
) -> Action:
    """The Action for one call of ``tool`` with ``arguments`` (by name), projected onto
    the tool's declared ``inputs``."""
    return Action.tool(
        str(tool.name),
        dict(arguments),
        schema=tool_schema(tool),
        description=getattr(tool, "description", None),
        context=Context(call_id=call_id) if call_id else Context(),
    )


def _runs_code_elsewhere(agent: object) -> bool:
    """A ``CodeAgent`` whose executor is not the local one (e2b, docker, modal, ...):
    it re-creates its tools from their source inside the sandbox, where no guard runs."""
    if not isinstance(agent, CodeAgent):
        return False
    return not isinstance(getattr(agent, "python_executor", None), LocalPythonExecutor)


_ELSEWHERE: Final = (
    "a CodeAgent with a remote executor re-creates its tools from their source inside "
    "the sandbox, where no guard runs: Interlock cannot gate them there"
)


def _is_final_answer(tool: object) -> bool:
    return isinstance(tool, FinalAnswerTool) or getattr(tool, "name", None) == FINAL_ANSWER


def _trusted_inputs(agent: MultiStepAgent) -> Iterator[Input]:
    instructions = getattr(agent, "instructions", None)
    if isinstance(instructions, str):
        yield Input("system", instructions)
    for step in agent.memory.steps:
        if isinstance(step, TaskStep):
            yield Input("user", step.task)


class _Gate:
    """Judges the tool calls of one guard (shared by tools and agents)."""

    def __init__(
        self,
        guard: Guard,
        mapper: Mapper | None = None,
        on_approval: OnApproval = "refuse",
        approval_timeout: float = 300.0,
    ) -> None:
        if on_approval not in ("refuse", "wait"):
            raise ValueError(f"on_approval must be 'refuse' or 'wait', not {on_approval!r}")
        if on_approval == "wait" and guard.store is None:
            raise ValueError("on_approval='wait' needs a guard with a store, where approvals live")
        self.guard = guard
        self.mapper = mapper
        self.on_approval = on_approval
        self.approval_timeout = approval_timeout
        #: the agent attached first (not a managed one): whose user and instructions
        #: are trusted inputs of the session
        self.root: Callable[[], MultiStepAgent | None] = lambda: None
        self._inputs = inputs_of(guard)

    def record_inputs(self) -> None:
        """Record the root agent's instructions and the tasks it was given as trusted
        inputs — not a managed agent's task, which its manager's *model* wrote, nor
        smolagents' own system prompt (its tool descriptions may be an MCP server's)."""
        agent = self.root()
        if agent is not None and records_inputs(self.guard):
            self._inputs.record(self.guard, _trusted_inputs(agent))

    def _decide_once(
        self, tool: Tool | MultiStepAgent, arguments: dict[str, Any]
    ) -> Decision | None:
        if self.mapper is None:
            return self.guard.check(tool_action(tool, arguments))
        return self.guard.check_mapped(self.mapper, str(tool.name), arguments, tool)

    def decide(self, tool: Tool | MultiStepAgent, arguments: dict[str, Any]) -> Decision | None:
        """The verdict; with ``on_approval="wait"``, a pending approval is waited for
        and the identical call judged again (it claims the grant once)."""
        decision = self._decide_once(tool, arguments)
        approval_id = None if decision is None else pending_approval(decision)
        if self.on_approval == "wait" and approval_id is not None:
            self.guard.wait_for_approval(approval_id, self.approval_timeout)
            decision = self._decide_once(tool, arguments) or decision
        return decision

    def run(
        self,
        tool: Tool | MultiStepAgent,
        arguments: dict[str, Any],
        body: Callable[[], Any],
        refuse: Callable[[Exception], Exception] | None = None,
    ) -> Any:
        """Judge the call, run ``body`` on allow only (settling its reservation), raise
        the refusal (``refuse`` turns the Blocked error into another) otherwise."""
        self.record_inputs()  # before the call is judged: its provenance reads them
        # an allow's commit carries the body's tool_invoke: one durable write before it
        decision, started = decide_starting(
            self.guard, str(tool.name), lambda: self.decide(tool, arguments)
        )
        if decision is None:  # not ours to judge
            return body()
        if not decision.allowed:
            outcome = verdict_outcome(decision, tool_action(tool, arguments))
            assert outcome.error is not None
            raise refuse(outcome.error) if refuse else outcome.error
        key = call_key(str(tool.name), arguments)
        return run_settled(self.guard, decision, body, key, started=started)


# -- the tool: forward, the one callable every call of it runs ---------------------------


class _GuardedForward:
    """A tool's ``forward``, judged first. Holds the original (``inner``) for detach."""

    def __init__(self, gate: _Gate, tool: Tool, inner: Callable[..., Any]) -> None:
        self.gate = gate
        self.tool = tool
        self.inner = inner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = tool_arguments(self.tool, args, kwargs)
        if already_judged(self.gate.guard, call_key(str(self.tool.name), arguments)):
            return self.inner(*args, **kwargs)  # the agent judged this very call
        return self.gate.run(self.tool, arguments, lambda: self.inner(*args, **kwargs))


def _forward_guard(tool: object) -> Guard | None:
    forward = vars(tool).get("forward")
    return forward.gate.guard if isinstance(forward, _GuardedForward) else None


def guard_tool(
    tool: Tool,
    guard: Guard,
    *,
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
) -> Tool:
    """Guard ``tool`` in place (its ``forward``) and return it: every call is judged,
    a refusal raises. ``guard.detach(tool)`` undoes it. (With a ``mapper`` or
    ``on_approval``; ``guard.attach(tool)`` is the same with neither.)"""
    if _is_final_answer(tool):
        raise TypeError("final_answer returns the run's answer: it is not an action to guard")
    TOOL_ADAPTER.options[id(tool)] = _Gate(guard, mapper, on_approval, approval_timeout)
    try:
        return TOOL_ADAPTER.attach(tool, guard)
    finally:
        TOOL_ADAPTER.options.pop(id(tool), None)


def guard_tools(tools: Iterable[Tool], guard: Guard, **options: Any) -> list[Tool]:
    """:func:`guard_tool` for each of ``tools`` (``final_answer`` left as it is) — e.g.
    ``guard_tools(ToolCollection.from_mcp(...).tools, guard)``."""
    return [t if _is_final_answer(t) else guard_tool(t, guard, **options) for t in tools]


class ToolAdapter(Adapter):
    """Guards a ``Tool`` in place at ``forward`` (raise style). smolagents has no hook
    around a tool call; ``forward`` is the one callable ``Tool.__call__`` runs."""

    framework = "smolagents"
    distribution = "smolagents"
    supported = ("1.20", "2")
    extra = "smolagents"
    targets = (PatchTarget(Tool, "forward"),)

    def __init__(self) -> None:
        super().__init__()
        self.options: dict[int, _Gate] = {}

    def attach(self, obj: Any, guard: Guard) -> Any:
        owner = _forward_guard(obj)
        if owner is not None and not self.is_attached(obj):  # guarded with its agent
            if owner is not guard:
                raise ValueError("this object is attached to another guard; detach it first")
            return obj
        return super().attach(obj, guard)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        gate = self.options.get(id(obj)) or _Gate(guard)
        return _GuardedForward(gate, obj, original)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        return [tool_binding(obj, guard)]


def tool_binding(tool: Tool, guard: Guard | None, **where: Any) -> ToolBinding:
    owner = _forward_guard(tool)
    return ToolBinding(
        str(tool.name),
        tool.description,
        tool_schema(tool),
        tool.forward,
        owner=tool,
        attr="forward",
        guarded=owner is not None and (guard is None or owner is guard),
        **where,
    )


# -- model calls: checked and reserved before, committed from real usage after ----------


def estimate_usage(messages: list[Any], kwargs: Mapping[str, Any]) -> Usage:
    """A reservation for one model call: the messages' characters / 4 as input tokens,
    ``max_tokens`` (when passed) as output tokens."""
    text = json.dumps([m.dict() if hasattr(m, "dict") else m for m in messages], default=str)
    ceiling = kwargs.get("max_tokens")
    output = ceiling if isinstance(ceiling, int) and not isinstance(ceiling, bool) else 0
    return Usage(math.ceil(len(text) / CHARS_PER_TOKEN), max(output, 0))


def _reported(token_usage: object) -> Usage | None:
    if token_usage is None:
        return None
    try:
        usage = Usage.of(token_usage)
    except ValueError:
        return None
    return usage if usage.total else None


class GuardedModel(Model):  # type: ignore[misc]
    """A ``smolagents.Model`` whose every call is judged as an ``llm`` action named
    after the model (``model.model_id``) and reserved on the policy's budgets before
    ``model`` runs; the ``token_usage`` it reports is committed after (a stream: its
    deltas' summed, once at its end), released if it raises. Other attributes are the
    wrapped model's.

    Example::

        agent = ToolCallingAgent(tools=[...], model=GuardedModel(model, guard))
    """

    def __init__(
        self,
        model: Model,
        guard: Guard,
        *,
        name: str | None = None,
        estimate: Callable[[list[Any], Mapping[str, Any]], Usage] | None = None,
    ) -> None:
        super().__init__(
            flatten_messages_as_text=model.flatten_messages_as_text,
            tool_name_key=model.tool_name_key,
            tool_arguments_key=model.tool_arguments_key,
            model_id=model.model_id,
        )
        self.wrapped = model
        self.guard = guard
        self.model_name = name or model.model_id or type(model).__name__
        self.estimate = estimate or estimate_usage

    def __getattr__(self, name: str) -> Any:
        # only reached for what this wrapper does not have: the wrapped model's
        wrapped = self.__dict__.get("wrapped")
        if wrapped is None:
            raise AttributeError(name)
        return getattr(wrapped, name)

    def _llm_call(self, messages: list[Any], kwargs: Mapping[str, Any]) -> LLMCall:
        return self.guard.llm_call(self.model_name, estimate=self.estimate(messages, kwargs))

    def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
        with self._llm_call(messages, kwargs) as call:
            message = self.wrapped.generate(messages, *args, **kwargs)
            usage = _reported(message.token_usage)
            if usage is not None:
                call.record(usage)
        return message

    def generate_stream(
        self, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Generator[ChatMessageStreamDelta]:
        call = self._llm_call(messages, kwargs)
        call.__enter__()  # before the first delta: a refusal calls nothing
        seen = Usage()
        failure: BaseException | None = None
        try:
            for delta in self.wrapped.generate_stream(messages, *args, **kwargs):
                usage = _reported(delta.token_usage)
                if usage is not None:
                    seen = Usage(
                        seen.input_tokens + usage.input_tokens,
                        seen.output_tokens + usage.output_tokens,
                    )
                yield delta
        except GeneratorExit as exc:
            # Closed early: spent if the model reported usage already, else given back.
            failure = None if seen.total else exc
            raise
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if seen.total and failure is None:
                call.record(seen)
            call.__exit__(type(failure) if failure else None, failure, None)

    def parse_tool_calls(self, message: ChatMessage) -> ChatMessage:
        return self.wrapped.parse_tool_calls(message)


# -- the agent: execute_tool_call chooses the refusal style ------------------------------


@dataclass(frozen=True, slots=True)
class _Options:
    gate: _Gate
    refusal: Refusal = "message"
    models: bool | None = None
    estimate: Callable[[list[Any], Mapping[str, Any]], Usage] | None = None


@dataclass(slots=True)
class _Patched:
    guard: Guard
    undo: list[Callable[[], None]] = field(default_factory=list)
    # the object patched: an id alone is reused once the object is collected (a new
    # agent then read as "attached to another guard")
    target: Callable[[], object | None] = lambda: None


def _set(obj: object, attr: str, value: Any, record: _Patched) -> None:
    missing = attr not in vars(obj)
    before = vars(obj).get(attr)

    def undo() -> None:
        if missing:
            vars(obj).pop(attr, None)
        else:
            object.__setattr__(obj, attr, before)

    object.__setattr__(obj, attr, value)
    record.undo.append(undo)


class _GuardedExecute:
    """``ToolCallingAgent.execute_tool_call``, judged first: the refusal is the
    agent's error for the model (``"message"``) or the Blocked error (``"raise"``)."""

    def __init__(
        self, gate: _Gate, agent: ToolCallingAgent, inner: Callable[..., Any], refusal: Refusal
    ) -> None:
        self.gate = gate
        self.agent = agent
        self.inner = inner
        self.refusal = refusal

    def __call__(self, tool_name: str, arguments: dict[str, Any] | str) -> Any:
        available = {**self.agent.tools, **self.agent.managed_agents}
        tool = available.get(tool_name)
        if tool is None or _is_final_answer(tool):  # unknown: the agent's own error
            return self.inner(tool_name, arguments)
        named = (
            dict(arguments)
            if isinstance(arguments, dict)
            else tool_arguments(tool, (arguments,), {})
        )
        substitute = getattr(self.agent, "_substitute_state_variables", None)
        if callable(substitute) and isinstance(arguments, dict):
            named = dict(substitute(arguments))  # what the tool will receive
        return self.gate.run(
            tool, named, lambda: self.inner(tool_name, arguments), refuse=self._refuse
        )

    def _refuse(self, error: Exception) -> Exception:
        if self.refusal == "raise":
            return error
        refusal: Exception = AgentToolExecutionError(str(error), self.agent.logger)
        refusal.__cause__ = error
        return refusal


def guard_agent(
    agent: MultiStepAgent,
    guard: Guard,
    *,
    refusal: Refusal = "message",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    models: bool | None = None,
    estimate: Callable[[list[Any], Mapping[str, Any]], Usage] | None = None,
) -> MultiStepAgent:
    """Guard ``agent`` in place and return it (``guard.attach(agent)`` with options):
    its tools (each ``forward``), its ``execute_tool_call`` (a ``ToolCallingAgent``:
    the refusal style), its managed agents, recursively, and — when ``models`` (default:
    the guard has a store) — its model, as a :class:`GuardedModel` (``estimate``: its
    reservation per call, default :func:`estimate_usage`)."""
    if refusal not in ("message", "raise"):
        raise ValueError(f"refusal must be 'message' or 'raise', not {refusal!r}")
    gate = _Gate(guard, mapper, on_approval, approval_timeout)
    AGENT_ADAPTER.pending[id(agent)] = _Options(gate, refusal, models, estimate)
    try:
        return AGENT_ADAPTER.attach(agent, guard)
    finally:
        AGENT_ADAPTER.pending.pop(id(agent), None)


class AgentAdapter(Adapter):
    """Guards a ``MultiStepAgent`` (``ToolCallingAgent``, ``CodeAgent``) in place: see
    :func:`guard_agent`. Many objects are touched (the agent, its tools, its managed
    agents), so attach and detach keep their own undo list."""

    framework = "smolagents-agent"
    distribution = "smolagents"
    supported = ("1.20", "2")
    extra = "smolagents"
    targets = (PatchTarget(MultiStepAgent, "execute_tool_call"),)

    inspects_models = True

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[int, _Options] = {}
        self._patched: dict[int, _Patched] = {}

    def _record(self, obj: object) -> _Patched | None:
        """The patch record of ``obj`` itself (not of a collected object whose id it
        now has: that stale record is dropped)."""
        record = self._patched.get(id(obj))
        if record is not None and record.target() is not obj:
            del self._patched[id(obj)]
            return None
        return record

    def is_attached(self, obj: object) -> bool:
        return self._record(obj) is not None

    def guarded_by(self, obj: object, guard: Guard | None) -> bool:
        record = self._record(obj)
        return record is not None and (guard is None or record.guard is guard)

    def attach(self, obj: Any, guard: Guard) -> Any:
        if not isinstance(obj, MultiStepAgent):
            raise TypeError(f"the smolagents adapter cannot guard a {type(obj).__name__}")
        record = self._record(obj)
        if record is not None:
            if record.guard is not guard:
                raise ValueError("this object is attached to another guard; detach it first")
            return obj
        options = self.pending.get(id(obj)) or _Options(_Gate(guard))
        if options.gate.root() is None:
            options.gate.root = weakref.ref(obj)
        record = _Patched(guard, target=weakref.ref(obj))
        try:
            self._attach_into(obj, guard, options, record)
        except BaseException:
            for undo in reversed(record.undo):
                undo()
            raise
        self._patched[id(obj)] = record
        return obj

    def _attach_into(
        self,
        agent: MultiStepAgent,
        guard: Guard,
        options: _Options,
        record: _Patched,
    ) -> None:
        if _runs_code_elsewhere(agent):
            raise TypeError(f"{_ELSEWHERE} (use the local executor, or gate in the sandbox)")
        gate = options.gate
        for tool in agent.tools.values():
            owner = _forward_guard(tool)
            if _is_final_answer(tool) or owner is guard:
                continue
            if owner is not None:
                raise ValueError(f"tool {tool.name!r} is guarded by another guard; detach it first")
            _set(tool, "forward", _GuardedForward(gate, tool, tool.forward), record)
        if isinstance(agent, ToolCallingAgent):
            execute = _GuardedExecute(gate, agent, agent.execute_tool_call, options.refusal)
            _set(agent, "execute_tool_call", execute, record)
        for managed in agent.managed_agents.values():
            if isinstance(managed, MultiStepAgent) and not self.is_attached(managed):
                self._attach_into(managed, guard, options, record)
        models = guard.store is not None if options.models is None else options.models
        if models and not isinstance(agent.model, GuardedModel):
            model = GuardedModel(agent.model, guard, estimate=options.estimate)
            _set(agent, "model", model, record)

    def detach(self, obj: Any) -> Any:
        record = self._record(obj)
        if record is not None:
            del self._patched[id(obj)]
            for undo in reversed(record.undo):
                undo()
        return obj

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        """Its tools (``final_answer`` aside: it returns the answer, it is no action)
        and its managed agents, each guarded when its calls pass ``guard``."""
        agent: MultiStepAgent = obj
        bindings = [
            tool_binding(tool, guard, container=agent.tools, key=name)
            for name, tool in agent.tools.items()
            if not _is_final_answer(tool)
        ]
        if _runs_code_elsewhere(agent):
            bindings = [
                ToolBinding(b.name, b.description, b.schema, guarded=False, note=_ELSEWHERE)
                for b in bindings
            ]
        for name, managed in agent.managed_agents.items():
            bindings.append(
                ToolBinding(
                    name,
                    getattr(managed, "description", None),
                    tool_schema(managed),
                    container=agent.managed_agents,
                    key=name,
                    guarded=self.guarded_by(agent, guard) and isinstance(agent, ToolCallingAgent),
                    note=None
                    if isinstance(agent, ToolCallingAgent)
                    else "a CodeAgent calls a managed agent from its code: attach that agent",
                )
            )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        agent: MultiStepAgent = obj
        model = agent.model
        guarded = isinstance(model, GuardedModel) and (guard is None or model.guard is guard)
        label = (
            model.model_name
            if isinstance(model, GuardedModel)
            else (model.model_id or type(model).__name__)
        )
        note = None if guarded else "wrap it in GuardedModel (attach does, with a store)"
        return [LLMBinding(str(label), owner=agent, attr="model", guarded=guarded, note=note)]


TOOL_ADAPTER = register_adapter(ToolAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
