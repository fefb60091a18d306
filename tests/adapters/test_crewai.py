"""The CrewAI adapter, driven through real ``Crew.kickoff`` loops with a fake model.

CrewAI cannot share the main environment (it needs mcp<2): these tests run in their own,
``make test-crewai`` (``.venv-crewai``); in the main environment they are skipped.
"""

from __future__ import annotations

import os

# No telemetry, tracing or network from CrewAI: set before it is imported.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

import pytest

pytest.importorskip("crewai")

import asyncio
import importlib
import json
import sys
import threading
from collections.abc import Callable
from typing import Any

from crewai import Agent, BaseLLM, Crew, Task
from crewai.hooks import register_before_tool_call_hook, unregister_before_tool_call_hook
from crewai.hooks.dispatch import HookAborted
from crewai.tools import BaseTool, tool
from crewai.tools.tool_failure import ToolFailure
from pydantic import BaseModel, Field

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Decision,
    Guard,
    Verdict,
)
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.base import adapter_for
from interlock.adapters.crewai import (
    AGENT_ADAPTER,
    CREW_ADAPTER,
    HOOKS,
    LLM_ADAPTER,
    TOOL_ADAPTER,
    ToolAdapter,
    estimate_usage,
    guard_agent,
    guard_crew,
    guard_llm,
    guard_tool,
    guard_tools,
    is_refusal,
)

from .conformance import (
    POLICY,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    approve_when_pending,
    assert_cancellation_never_runs,
    make_guard,
)

# -- a scripted model: real crews, nothing behind them -------------------------------------


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One model turn asking for ``calls`` at once (ids ``call-1``, ``call-2``, ...), in
    the OpenAI shape CrewAI's native tool loop reads."""
    return [
        {
            "id": f"call-{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls, 1)
    ]


class ScriptedLLM(BaseLLM):
    """Answers each call with the next scripted turn and counts ``tokens`` for it the
    way CrewAI's own providers do (``_track_token_usage_internal``); ``fail`` makes
    every call raise. Records the messages it was given."""

    turns: list[Any] = Field(default_factory=list)
    tokens: list[tuple[int, int]] = Field(default_factory=list)
    fail: bool = False
    seen: list[Any] = Field(default_factory=list)

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        if self.fail:
            raise RuntimeError("provider down")
        if self.tokens:
            tokens_in, tokens_out = self.tokens.pop(0)
            self._track_token_usage_internal(
                {
                    "prompt_tokens": tokens_in,
                    "completion_tokens": tokens_out,
                    "total_tokens": tokens_in + tokens_out,
                }
            )
        return self.turns.pop(0)

    async def acall(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        return self.call(messages, *args, **kwargs)

    def supports_function_calling(self) -> bool:
        return True


def scripted(*turns: Any, tokens: list[tuple[int, int]] | None = None, fail: bool = False) -> Any:
    return ScriptedLLM(model="scripted-model", turns=list(turns), tokens=tokens or [], fail=fail)


def tool_outputs(llm: ScriptedLLM) -> dict[str, str]:
    """The tool results the model read on its last call, by call id."""
    return {
        m["tool_call_id"]: m["content"]
        for m in llm.seen[-1]
        if isinstance(m, dict) and m.get("role") == "tool"
    }


def crew_of(llm: Any, tools: list[Any], **agent_options: Any) -> Crew:
    agent = Agent(
        role="ops",
        goal="tidy up",
        backstory="careful",
        llm=llm,
        tools=tools,
        verbose=False,
        **agent_options,
    )
    task = Task(description="tidy up", expected_output="a word", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False)


MODES = ["kickoff", "kickoff_async", "akickoff"]


def run(crew: Crew, mode: str) -> Any:
    if mode == "kickoff":
        return crew.kickoff()
    if mode == "kickoff_for_each":  # runs a copy of the crew per input
        (result,) = crew.kickoff_for_each(inputs=[{}])
        return result
    if mode == "kickoff_async":
        return asyncio.run(crew.kickoff_async())
    return asyncio.run(crew.akickoff())


class Bodies:
    """The tools of the table, recording every body that ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        bodies = self

        @tool("shell")
        def shell(command: str) -> str:
            """Run a shell command."""
            bodies.record("shell", command)
            return f"ran {command}"

        @tool("pay")
        def pay(amount: float | str) -> str:
            """Pay an amount."""
            bodies.record("pay", amount)
            return f"paid {amount}"

        self.shell = shell
        self.pay = pay
        self.tools: list[BaseTool] = [shell, pay]

    def record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))


def crew_for(row: Row, bodies: Bodies, refusal: str) -> tuple[Crew, ScriptedLLM]:
    guard = make_guard(row)
    llm = scripted(tool_calls((row.tool, row.args), (row.tool, row.args)), "done")
    tools = guard_tools(bodies.tools, guard, refusal=refusal, mapper=row.mapper)
    return crew_of(llm, tools), llm


ids = [row.behaviour for row in ROWS]


# -- the verdict table, both styles, sync and async, two parallel calls ----------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, mode: str
) -> None:
    bodies = Bodies()
    crew, llm = crew_for(row, bodies, "message")
    result = run(crew, mode)
    outputs = tool_outputs(llm)
    assert set(outputs) == {"call-1", "call-2"}
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(output.startswith(("ran", "paid")) for output in outputs.values())
        assert result.tasks_output[0].tool_failures == []
    else:
        assert bodies.ran == []
        assert all(row.says in output for output in outputs.values())
        assert all("interlock:" in output for output in outputs.values())
        # CrewAI records the refusals as the tool's own reported failures.
        failures = result.tasks_output[0].tool_failures
        assert [f.failure.code for f in failures] == [f"interlock:{row.verdict.value}"] * 2  # type: ignore[union-attr]
    assert result.raw == "done"  # the loop went on


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_leaves_kickoff(row: Row, mode: str) -> None:
    bodies = Bodies()
    crew, llm = crew_for(row, bodies, "raise")
    if row.error is None:
        assert run(crew, mode).raw == "done"
        assert len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run(crew, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict
    # A HookAborted: CrewAI's deliberate stop, never fed back to the model or retried.
    assert isinstance(caught.value, HookAborted)
    assert len(llm.seen) == 1  # the model was not asked again


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", MODES)
def test_an_unreachable_store_refuses_the_model_call_and_no_body_runs(
    refusal: str, mode: str
) -> None:
    row = STORE_UNREACHABLE
    bodies = Bodies()
    guard = make_guard(row)
    llm = scripted(tool_calls((row.tool, row.args)), "done")
    crew = guard_crew(crew_of(llm, bodies.tools), guard, refusal=refusal)  # type: ignore[arg-type]
    with pytest.raises(ActionUndetermined, match=row.says):
        run(crew, mode)
    assert llm.seen == []  # the model call was judged first, and refused
    assert bodies.ran == []
    # The tools alone, the model unguarded: the tool call is refused the same way.
    llm = scripted(tool_calls((row.tool, row.args)), "done")
    tools = guard_tools(Bodies().tools, make_guard(row), refusal=refusal)  # type: ignore[arg-type]
    crew = crew_of(llm, tools)
    if refusal == "raise":
        with pytest.raises(ActionUndetermined, match=row.says):
            run(crew, mode)
    else:
        assert run(crew, mode).raw == "done"
        assert row.says in tool_outputs(llm)["call-1"]
    assert bodies.ran == []


def test_a_call_cancelled_while_it_is_judged_never_runs() -> None:
    ran: list[str] = []

    @tool("shell")
    async def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return command

    async def call(guard: Guard) -> Any:
        return await guard_tool(shell, guard).arun(command="ls")

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(ran)))


# -- CrewAI's hooks fail open: why the gate is never a hook ------------------------------


def test_a_before_tool_call_hook_that_raises_lets_the_tool_run() -> None:
    def broken(context: Any) -> bool:
        raise RuntimeError("a guard that failed")

    bodies = Bodies()
    llm = scripted(tool_calls(("shell", {"command": "rm -rf /"})), "done")
    register_before_tool_call_hook(broken)
    try:
        assert crew_of(llm, [bodies.shell]).kickoff().raw == "done"
    finally:
        unregister_before_tool_call_hook(broken)
    assert bodies.ran == [
        ("shell", "rm -rf /")
    ]  # fail open: the reason this adapter gates the tool


def _registered() -> tuple[bool, bool]:
    from crewai.hooks import get_after_tool_call_hooks, get_before_tool_call_hooks

    from interlock.adapters import crewai as adapter

    return (
        adapter._open_slot in get_before_tool_call_hooks(),
        adapter._raise_refusal in get_after_tool_call_hooks(),
    )


def test_the_hooks_are_registered_only_while_a_tool_is_attached() -> None:
    shell = Bodies().shell
    guard = Guard(POLICY)
    users = HOOKS.users
    guard.attach(shell)
    assert HOOKS.users == users + 1
    assert _registered() == (True, True)
    guard.detach(shell)
    assert HOOKS.users == users
    assert _registered() == ((users > 0),) * 2


def test_without_the_hooks_a_raise_style_refusal_still_never_runs_the_body() -> None:
    bodies = Bodies()
    guarded = guard_tool(bodies.shell, Guard(POLICY))
    llm = scripted(tool_calls(("shell", {"command": "rm -rf /"})), "done")
    from crewai.hooks import register_after_tool_call_hook, unregister_after_tool_call_hook

    from interlock.adapters.crewai import _raise_refusal

    assert unregister_after_tool_call_hook(_raise_refusal)  # as if it were missing
    try:
        assert crew_of(llm, [guarded]).kickoff().raw == "done"
    finally:
        register_after_tool_call_hook(_raise_refusal)
    assert bodies.ran == []
    assert "no recursive deletes" in tool_outputs(llm)["call-1"]  # the model read it
    TOOL_ADAPTER.detach(guarded)


# -- every entry point of a guarded tool is judged --------------------------------------


class ShellTool(BaseTool):
    """A BaseTool subclass with its own sync and async bodies."""

    name: str = "shell"
    description: str = "Run a shell command."
    ran: list[str] = Field(default_factory=list)

    def _run(self, command: str) -> str:
        self.ran.append(command)
        return f"ran {command}"

    async def _arun(self, command: str) -> str:
        self.ran.append(command)
        return f"ran {command}"


def _async_shell(ran: list[tuple[str, Any]]) -> BaseTool:
    @tool("shell")
    async def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(("shell", command))
        return f"ran {command}"

    return shell


def _entry_points(
    bodies: Bodies, guard: Guard, args: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    command = args["command"]
    guarded = guard_tool(bodies.shell, guard)
    sub = guard_tool(ShellTool(ran=[]), guard)
    asynchronous = guard_tool(_async_shell(bodies.ran), guard)

    def subclass(call: Callable[[Any], Any]) -> Callable[[], Any]:
        def go() -> Any:
            result = call(sub)
            bodies.ran.extend(("shell", c) for c in sub.ran)  # type: ignore[attr-defined]
            return result

        return go

    def attached() -> Any:
        fresh = Bodies()
        fresh.ran = bodies.ran
        guard.attach(fresh.shell)
        try:
            return fresh.shell.run(**args)
        finally:
            guard.detach(fresh.shell)

    def in_crew(mode: str) -> Callable[[], Any]:
        def go() -> Any:
            llm = scripted(tool_calls(("shell", args)), "done")
            return run(crew_of(llm, [guarded]), mode)

        return go

    def alone(mode: str) -> Callable[[], Any]:
        def go() -> Any:
            llm = scripted(tool_calls(("shell", args)), "done")
            agent = Agent(role="ops", goal="tidy up", backstory="careful", llm=llm, tools=[guarded])
            if mode == "kickoff":
                return agent.kickoff("tidy up")
            return asyncio.run(agent.kickoff_async("tidy up"))

        return go

    return {
        "run(**kwargs)": lambda: guarded.run(**args),
        "run(positional)": lambda: guarded.run(command),
        "_run(**kwargs)": lambda: guarded._run(**args),
        "_run(positional)": lambda: guarded._run(command),
        "func": lambda: guarded.func(**args),
        "structured invoke(dict)": lambda: guarded.to_structured_tool().invoke(args),
        "structured invoke(json)": lambda: guarded.to_structured_tool().invoke(json.dumps(args)),
        "structured ainvoke": lambda: asyncio.run(guarded.to_structured_tool().ainvoke(args)),
        "structured func": lambda: guarded.to_structured_tool().func(**args),
        "async @tool run": lambda: asyncio.run(asyncio.to_thread(asynchronous.run, **args)),
        "async @tool arun": lambda: asyncio.run(asynchronous.arun(**args)),
        "async @tool _arun": lambda: asyncio.run(asynchronous._arun(**args)),
        "async @tool func": lambda: asyncio.run(asynchronous.func(**args)),
        "BaseTool subclass run": subclass(lambda t: t.run(**args)),
        "BaseTool subclass _run": subclass(lambda t: t._run(command)),
        "BaseTool subclass arun": subclass(lambda t: asyncio.run(t.arun(**args))),
        "BaseTool subclass _arun": subclass(lambda t: asyncio.run(t._arun(**args))),
        "guard.attach(tool) run": attached,
        "Crew.kickoff": in_crew("kickoff"),
        "Crew.kickoff_async": in_crew("kickoff_async"),
        "Crew.akickoff": in_crew("akickoff"),
        "Crew.kickoff_for_each (copies the crew)": in_crew("kickoff_for_each"),
        "Agent.kickoff (no crew)": alone("kickoff"),
        "Agent.kickoff_async (no crew)": alone("kickoff_async"),
    }


ENTRY_POINTS = list(_entry_points(Bodies(), Guard(POLICY), {"command": "ls"}))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_deny_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(POLICY), {"command": "rm -rf /"})[entry]
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        call()
    assert bodies.ran == []  # bypass count: 0


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_no_guarded_entry_point_exposes_the_unguarded_body_as_wrapped() -> None:
    bodies = Bodies()
    guarded = guard_tool(bodies.shell, Guard(POLICY))
    for attr in ("run", "arun", "_run", "_arun", "func"):
        assert not hasattr(getattr(guarded, attr), "__wrapped__"), attr
    structured = guarded.to_structured_tool()
    assert list(structured.args) == ["command"]  # the signature CrewAI reads is kept


def test_message_style_on_a_direct_call_returns_the_failure_the_model_would_read() -> None:
    bodies = Bodies()
    spoken = guard_tool(bodies.shell, Guard(POLICY), refusal="message")
    result = spoken.run(command="rm -rf /")
    assert isinstance(result, ToolFailure) and is_refusal(result)
    assert "no recursive deletes" in result.as_agent_message()
    assert bodies.ran == []


def test_a_refused_call_spends_no_usage_and_never_becomes_the_answer() -> None:
    ran: list[str] = []

    @tool("shell", result_as_answer=True, max_usage_count=1)
    def shell(command: str) -> str:
        """Run a shell command."""
        ran.append(command)
        return f"ran {command}"

    spoken = guard_tool(shell, Guard(POLICY), refusal="message")
    rm, ls = (tool_calls(("shell", {"command": c})) for c in ("rm -rf /", "ls"))
    result = crew_of(scripted(rm, ls, "done"), [spoken]).kickoff()
    assert ran == ["ls"]  # the refusal did not use up the tool's one use
    assert result.raw == "ran ls"  # the answer is the allowed call's, never the refusal


def test_a_guarded_call_is_never_served_from_crewais_cache() -> None:
    bodies = Bodies()
    guarded = guard_tool(bodies.shell, Guard(POLICY))
    ls = tool_calls(("shell", {"command": "ls"}))
    llm = scripted(ls, ls, "done")
    crew_of(llm, [guarded]).kickoff()  # crews cache tool results by default
    assert bodies.ran == [("shell", "ls"), ("shell", "ls")]  # judged and run each time
    assert guarded.cache_function({"command": "ls"}, "ran ls") is False


# -- guarded copies and in-place attach -------------------------------------------------------


def test_guard_tool_returns_a_copy_and_leaves_the_tool_unchanged() -> None:
    bodies = Bodies()
    before = dict(vars(bodies.shell))
    guarded = guard_tool(bodies.shell, Guard(POLICY))
    assert guarded is not bodies.shell
    assert (guarded.name, guarded.description) == (bodies.shell.name, bodies.shell.description)
    assert vars(bodies.shell) == before
    assert bodies.shell.run(command="rm -rf /") == "ran rm -rf /"  # the original: unguarded


def test_a_copy_of_a_guarded_tool_gets_only_its_own_guard() -> None:
    seen: list[Decision] = []
    first = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    second = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    twice = guard_tool(guard_tool(bodies.shell, first), second)
    twice.run(command="ls")
    assert len(seen) == 1


def test_a_refusal_style_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="refusal must be"):
        guard_tool(Bodies().shell, Guard(POLICY), refusal="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a guard with a store"):
        guard_tool(Bodies().shell, Guard(POLICY), on_approval="wait")
    with pytest.raises(TypeError, match="not a CrewAI BaseTool"):
        guard_tool(lambda: None, Guard(POLICY))


def test_tools_guarded_after_the_task_was_made_do_not_reach_the_task() -> None:
    """CrewAI copies the agent's tool list into the task when the task is made: a
    guarded *copy* given to the agent later never reaches it. ``guard.attach(crew)``
    (in place) does."""
    bodies = Bodies()
    rm = tool_calls(("shell", {"command": "rm -rf /"}))
    crew = crew_of(scripted(rm, "done"), [bodies.shell])
    crew.agents[0].tools = guard_tools([bodies.shell], Guard(POLICY))
    crew.kickoff()
    assert bodies.ran == [("shell", "rm -rf /")]  # the documented boundary
    bodies.ran.clear()
    crew = crew_of(scripted(rm, "done"), [bodies.shell])
    guard = Guard(POLICY)
    guard_crew(crew, guard, refusal="message", models=False)  # the table knows no model
    assert guard.coverage(crew).unguarded == ["model:scripted-model"]
    crew.kickoff()
    assert bodies.ran == []
    guard.detach(crew)


_MISSING = object()


def _state(parts: list[object]) -> list[dict[str, int]]:
    return [{name: id(value) for name, value in vars(part).items()} for part in parts]


@pytest.mark.parametrize("what", ["tool", "llm", "agent", "crew"])
def test_attach_then_detach_restores_everything_exactly(what: str) -> None:
    bodies = Bodies()
    llm = scripted("done")
    crew = crew_of(llm, bodies.tools)
    agent = crew.agents[0]
    obj: Any = {"tool": bodies.shell, "llm": llm, "agent": agent, "crew": crew}[what]
    parts: list[object] = [bodies.shell, bodies.pay, llm, agent, crew]
    held = [dict(vars(part)) for part in parts]
    before = _state(parts)
    users = HOOKS.users
    guard = Guard(POLICY)
    guard.attach(obj)
    during = _state(parts)
    assert during != before
    guard.attach(obj)
    assert _state(parts) == during
    guard.detach(obj)
    assert _state(parts) == before
    guard.detach(obj)
    assert _state(parts) == before
    assert HOOKS.users == users  # the global hooks: as they were
    del held


def test_attaching_to_a_second_guard_is_refused_and_changes_nothing() -> None:
    bodies = Bodies()
    crew = crew_of(scripted("done"), bodies.tools)
    first = Guard(POLICY)
    first.attach(bodies.pay)
    before = _state([bodies.shell])
    with pytest.raises(ValueError, match="another guard"):
        Guard(POLICY).attach(crew)
    assert _state([bodies.shell]) == before
    with pytest.raises(ValueError, match="another guard"):
        Guard(POLICY).attach(bodies.pay)
    first.detach(bodies.pay)


def test_adapter_for_finds_each_adapter() -> None:
    bodies = Bodies()
    crew = crew_of(scripted("done"), bodies.tools)
    assert adapter_for(bodies.shell) is TOOL_ADAPTER
    assert adapter_for(crew.agents[0].llm) is LLM_ADAPTER
    assert adapter_for(crew.agents[0]) is AGENT_ADAPTER
    assert adapter_for(crew) is CREW_ADAPTER


def test_coverage_names_what_is_guarded_and_what_crewai_makes_at_run_time() -> None:
    bodies = Bodies()
    crew = crew_of(scripted("done"), bodies.tools, allow_delegation=True)
    guard, other = Guard(POLICY), Guard(POLICY)
    assert set(guard.coverage(crew).unguarded) >= {"shell", "pay", "model:scripted-model"}
    guard.attach(crew)
    coverage = guard.coverage(crew)
    assert coverage.unguarded == ["delegation:ops"]  # made when a task runs: not gated
    assert "NOT guarded" in str(coverage)
    assert set(other.coverage(crew).unguarded) >= {"shell", "pay", "model:scripted-model"}
    assert guard.coverage(bodies.shell).unguarded == []
    guard.detach(crew)
    assert "shell" in guard.coverage(crew).unguarded


@pytest.mark.parametrize("version", ["1.15.28", "2.0.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda distribution: version)
    pattern = rf"crewai>=1.15.29,<2, not {version}.*interlock\[crewai\]"
    with pytest.raises(ImportError, match=pattern):
        ToolAdapter.check_version()
    with pytest.raises(ImportError, match=pattern):
        ToolAdapter()


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "crewai", None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "interlock.adapters.crewai")
    with pytest.raises(ImportError, match=r"pip install 'interlock\[crewai\]'"):
        importlib.import_module("interlock.adapters.crewai")


# -- state: budgets, approvals ------------------------------------------------------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def _records(guard: Guard, kind: str) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == kind]


def _paid_tools(fails: bool = False) -> list[BaseTool]:
    @tool("paid_lookup")
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        if fails:
            raise RuntimeError("upstream down")
        return "found"

    @tool("wire")
    def wire(amount: float) -> str:
        """Wire money."""
        raise AssertionError("the body must not run")

    return [paid_lookup, wire]


LOOKUP = ("paid_lookup", {"query": "a", "est_cost": 0.4})


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", MODES)
def test_an_allowed_tool_call_commits_its_reservation(
    stateful_guard: Guard, refusal: str, mode: str
) -> None:
    llm = scripted(tool_calls(LOOKUP), "done")
    tools = guard_tools(_paid_tools(), stateful_guard, refusal=refusal)
    assert run(crew_of(llm, tools), mode).raw == "done"
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)
    assert len(_records(stateful_guard, "tool")) == 1  # judged once


def test_a_tool_body_that_raises_releases_its_reservation(stateful_guard: Guard) -> None:
    llm = scripted(tool_calls(LOOKUP), "done")
    tools = guard_tools(_paid_tools(fails=True), stateful_guard)
    assert crew_of(llm, tools).kickoff().raw == "done"  # CrewAI fed the error back
    assert "upstream down" in tool_outputs(llm)["call-1"]
    assert _budget(stateful_guard, "tool-spend") == (0, 0)


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    crew_of(llm, guard_tools(_paid_tools(), stateful_guard, refusal="message")).kickoff()
    assert "https://approvals.example.com/a/" in tool_outputs(llm)["call-1"]
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    with pytest.raises(ApprovalRequired) as caught:
        crew_of(llm, guard_tools(_paid_tools(), stateful_guard)).kickoff()
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")


def _wire(ran: list[float]) -> BaseTool:
    @tool("wire")
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    return wire


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", MODES)
def test_on_approval_wait_runs_the_call_once_a_human_approves(
    stateful_guard: Guard, refusal: str, mode: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard)
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    tools = [
        guard_tool(
            _wire(ran),
            stateful_guard,
            refusal=refusal,  # type: ignore[arg-type]
            on_approval="wait",
            approval_timeout=60,
        )
    ]
    assert run(crew_of(llm, tools), mode).raw == "done"
    supervisor.join()
    assert ran == [5]
    assert tool_outputs(llm)["call-1"] == "wired 5.0"
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert approval.status.value == "claimed"  # the grant was used, once


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_on_approval_wait_refuses_when_the_human_denies(
    stateful_guard: Guard, refusal: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard, approve=False)
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    wire = guard_tool(_wire(ran), stateful_guard, refusal=refusal, on_approval="wait")  # type: ignore[arg-type]
    if refusal == "raise":
        with pytest.raises(ActionDenied, match="denied"):
            crew_of(llm, [wire]).kickoff()
    else:
        assert crew_of(llm, [wire]).kickoff().raw == "done"
        assert "denied" in tool_outputs(llm)["call-1"]
    supervisor.join()
    assert ran == []


# -- model calls: checked and reserved before, committed from real usage after ----------


@pytest.mark.parametrize("mode", MODES)
def test_every_model_call_is_checked_and_commits_its_real_usage(
    stateful_guard: Guard, mode: str
) -> None:
    lookup = ("paid_lookup", {"query": "q", "est_cost": 0.1})
    llm = scripted(tool_calls(lookup), "done", tokens=[(120, 30), (200, 5)])
    crew = guard_crew(crew_of(llm, _paid_tools()), stateful_guard)
    assert run(crew, mode).raw == "done"
    assert _budget(stateful_guard, "model-tokens") == (120 + 30 + 200 + 5, 0)
    records = _records(stateful_guard, "llm")
    assert [(r["decision"], r["action"]["name"]) for r in records] == [
        ("allow", "scripted-model")
    ] * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard, mode: str) -> None:
    llm = scripted("never")
    guard_llm(llm, stateful_guard, estimate=lambda *_: Tokens(2000, 0))
    with pytest.raises(ActionDenied, match="model-tokens") as caught:
        run(crew_of(llm, []), mode)
    assert llm.seen == []
    assert isinstance(caught.value, HookAborted)  # never retried by the agent
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["deny"]
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard) -> None:
    llm = scripted("never", fail=True)
    crew = guard_crew(crew_of(llm, [], max_retry_limit=0), stateful_guard)
    with pytest.raises(RuntimeError, match="provider down"):
        crew.kickoff()
    assert len(llm.seen) == 1
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


def test_a_model_that_counts_no_usage_is_charged_its_estimate(stateful_guard: Guard) -> None:
    llm = scripted("done")
    guard_llm(llm, stateful_guard, estimate=lambda *_: Tokens(40, 2))
    assert crew_of(llm, []).kickoff().raw == "done"
    assert _budget(stateful_guard, "model-tokens") == (42, 0)


def test_the_default_estimate_counts_the_messages_and_the_output_ceiling() -> None:
    messages = [{"role": "user", "content": "a" * 10}]
    chars = len(json.dumps(messages))
    llm = ScriptedLLM(model="m", max_tokens=50)
    assert estimate_usage(llm, messages) == Tokens(-(-chars // 4), 50)
    assert estimate_usage(scripted(), "abcd") == Tokens(1, 0)


def test_guard_agent_guards_its_tools_and_its_model(stateful_guard: Guard) -> None:
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done", tokens=[(10, 1), (10, 1)])
    crew = crew_of(llm, _paid_tools())
    guard_agent(crew.agents[0], stateful_guard, refusal="message")
    assert crew.kickoff().raw == "done"
    assert "requires approval" in tool_outputs(llm)["call-1"]
    assert _budget(stateful_guard, "model-tokens") == (22, 0)
    stateful_guard.detach(crew.agents[0])
    assert not LLM_ADAPTER.is_attached(llm)


class Answer(BaseModel):
    word: str


def test_a_structured_output_task_still_passes_the_model_gate(stateful_guard: Guard) -> None:
    llm = scripted('{"word": "done"}', tokens=[(5, 5)])
    crew = crew_of(llm, [])
    crew.tasks[0].output_pydantic = Answer
    guard_crew(crew, stateful_guard)
    result = crew.kickoff()
    assert "done" in result.raw
    assert _budget(stateful_guard, "model-tokens")[0] >= 10


# -- the ReAct loop (a model without native function calling) ----------------------------


class ReActLLM(ScriptedLLM):
    def supports_function_calling(self) -> bool:
        return False


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_the_react_loop_is_judged_in_either_style(refusal: str) -> None:
    bodies = Bodies()
    llm = ReActLLM(
        model="react",
        turns=[
            'Thought: tidy\nAction: shell\nAction Input: {"command": "rm -rf /"}',
            "Thought: ok\nFinal Answer: done",
        ],
    )
    crew = crew_of(llm, guard_tools([bodies.shell], Guard(POLICY), refusal=refusal))  # type: ignore[arg-type]
    if refusal == "raise":
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            crew.kickoff()
    else:
        assert crew.kickoff().raw == "done"
        assert "no recursive deletes" in json.dumps(llm.seen[-1])
    assert bodies.ran == []


# -- the document's examples run here (the main environment has no CrewAI) ---------------


def test_the_adapter_document_examples_run(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import re
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "adapter-crewai.md"
    fence = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
    found = fence.findall(doc.read_text())
    policy = next(body for lang, body in found if lang == "yaml")
    (tmp_path / "interlock.yaml").write_text(policy)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    for number, (lang, body) in enumerate(found, 1):
        if lang == "python":
            exec(compile(body, f"{doc.name} block {number}", "exec"), namespace)


# -- streaming: the stream is the call, committed once when it is done -------------------


def test_a_streamed_model_call_commits_its_real_usage_once(stateful_guard: Guard) -> None:
    llm = guard_llm(scripted("hello", tokens=[(7, 3)]), stateful_guard)
    session = llm.stream_events("hi")
    list(session)
    assert session.result == "hello"
    assert _budget(stateful_guard, "model-tokens") == (10, 0)
    assert len(_records(stateful_guard, "llm")) == 1


def test_a_streaming_crew_commits_every_model_call_once(stateful_guard: Guard) -> None:
    lookup = ("paid_lookup", {"query": "q", "est_cost": 0.1})
    llm = scripted(tool_calls(lookup), "done", tokens=[(10, 1), (20, 2)])
    crew = guard_crew(crew_of(llm, _paid_tools()), stateful_guard)
    crew.stream = True
    streaming = crew.kickoff()
    list(streaming)
    assert streaming.result.raw == "done"
    assert _budget(stateful_guard, "model-tokens") == (33, 0)
    assert _budget(stateful_guard, "tool-spend") == (100_000, 0)


def test_a_refused_streamed_call_never_reaches_the_model(stateful_guard: Guard) -> None:
    llm = guard_llm(scripted("never"), stateful_guard, estimate=lambda *_: Tokens(2000, 0))
    with pytest.raises(ActionDenied, match="model-tokens"):
        list(llm.stream_events("hi"))
    assert llm.seen == []
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


# -- the console bridge: CrewAI's own human-input prompt decides the approval ------------


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", ["kickoff", "akickoff"])
def test_on_approval_ask_runs_the_call_once_the_console_approves(
    stateful_guard: Guard, refusal: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts: list[str] = []
    monkeypatch.setattr("builtins.input", lambda *_: prompts.append("asked") or "approve")
    ran: list[float] = []
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    wire = guard_tool(_wire(ran), stateful_guard, refusal=refusal, on_approval="ask")  # type: ignore[arg-type]
    assert run(crew_of(llm, [wire]), mode).raw == "done"
    assert prompts == ["asked"] and ran == [5]
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert (approval.status.value, approval.decided_by) == ("claimed", "crewai-console")


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_on_approval_ask_refuses_what_the_console_does_not_approve(
    stateful_guard: Guard, refusal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("builtins.input", lambda *_: "not today")
    ran: list[float] = []
    llm = scripted(tool_calls(("wire", {"amount": 5})), "done")
    wire = guard_tool(_wire(ran), stateful_guard, refusal=refusal, on_approval="ask")  # type: ignore[arg-type]
    if refusal == "raise":
        with pytest.raises(ActionDenied, match="denied"):
            crew_of(llm, [wire]).kickoff()
    else:
        assert crew_of(llm, [wire]).kickoff().raw == "done"
        assert "denied" in tool_outputs(llm)["call-1"]
    assert ran == []
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert (approval.status.value, approval.decision_reason) == ("denied", "not today")


def test_a_crew_attached_and_dropped_is_never_taken_for_a_new_one() -> None:
    """The adapter keys what it attached by the object's id, so it keeps an attached
    crew alive until it is detached: a crew dropped while attached can never lend its
    id to a new one (which would then be refused as "attached to another guard", or
    taken for guarded). Found as a flake under load: a test's crew, never detached,
    was collected and a later test's crew got its id."""
    import gc

    first, second = Guard(POLICY), Guard(POLICY)
    crew = guard_crew(crew_of(scripted("done"), _paid_tools()), first)  # never detached
    crew_id = id(crew)
    del crew
    gc.collect()
    alive = [o for o in gc.get_objects() if isinstance(o, Crew) and id(o) == crew_id]
    assert len(alive) == 1  # still held: its id cannot be reused
    for _ in range(20):
        fresh = guard_crew(crew_of(scripted("done"), _paid_tools()), second)
        assert CREW_ADAPTER.guarded_by(fresh, second)
        CREW_ADAPTER.detach(fresh)
    CREW_ADAPTER.detach(alive.pop())
