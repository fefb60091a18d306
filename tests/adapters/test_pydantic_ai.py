"""The PydanticAI adapter, driven through real ``Agent`` loops with a scripted
``FunctionModel`` (and ``TestModel``): nothing of the framework is mocked."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

import asyncio
import importlib
import inspect
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RequestUsage, RunUsage

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Decision,
    Guard,
    Usage,
    Verdict,
    load_policy_text,
)
from interlock.adapters import base
from interlock.adapters.base import adapter_for
from interlock.adapters.pydantic_ai import (
    ADAPTER,
    AgentAdapter,
    InterlockCapability,
    guard_toolset,
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

# -- a scripted model: real agent loops, nothing behind them ---------------------------


def tool_calls(
    *calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (0, 0)
) -> ModelResponse:
    """One model turn asking for ``calls`` at once (ids ``call-1``, ``call-2``, ...)."""
    parts: list[Any] = [
        ToolCallPart(name, args, tool_call_id=f"call-{i}")
        for i, (name, args) in enumerate(calls, 1)
    ]
    return ModelResponse(
        parts=parts, usage=RequestUsage(input_tokens=tokens[0], output_tokens=tokens[1])
    )


def answer(text: str, tokens: tuple[int, int] = (0, 0)) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart(text)], usage=RequestUsage(input_tokens=tokens[0], output_tokens=tokens[1])
    )


class Script:
    """A ``FunctionModel`` answering each request with the next scripted turn (also
    when streamed); ``fail`` makes every request raise. Records what it was asked."""

    def __init__(self, turns: list[ModelResponse], *, fail: bool = False) -> None:
        self.turns = list(turns)
        self.fail = fail
        self.requests: list[list[ModelMessage]] = []
        self.model = FunctionModel(
            self._answer, stream_function=self._stream, model_name="scripted"
        )

    def _next(self, messages: list[ModelMessage]) -> ModelResponse:
        self.requests.append(list(messages))
        if self.fail:
            raise RuntimeError("provider down")
        return self.turns.pop(0)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return self._next(messages)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        turn = self._next(messages)
        for part in turn.parts:
            if isinstance(part, TextPart):
                yield part.content
            elif isinstance(part, ToolCallPart):
                yield {
                    part.tool_call_id: DeltaToolCall(
                        name=part.tool_name,
                        json_args=part.args_as_json_str(),
                        tool_call_id=part.tool_call_id,
                    )
                }

    def tool_outputs(self) -> dict[str, str]:
        """What the model read for each tool call on its last request, by call id."""
        found: dict[str, str] = {}
        for message in self.requests[-1]:
            for part in message.parts:
                if hasattr(part, "tool_call_id") and getattr(part, "part_kind", "") in (
                    "tool-return",
                    "retry-prompt",
                ):
                    found[part.tool_call_id] = str(part.content)
        return found


MODES = ["sync", "async", "stream"]


def run(agent: Agent[Any, Any], mode: str, prompt: str | None = "go", **options: Any) -> Any:
    if mode == "sync":
        return agent.run_sync(prompt, **options)
    if mode == "async":
        return asyncio.run(agent.run(prompt, **options))

    if mode == "iter":

        async def iterate() -> Any:
            async with agent.iter(prompt, **options) as agent_run:
                async for _ in agent_run:
                    pass
            assert agent_run.result is not None
            return agent_run.result

        return asyncio.run(iterate())

    async def streamed() -> Any:
        async with agent.run_stream(prompt, **options) as result:
            output = await result.get_output()
        return SimpleNamespace(output=output, usage=result.usage)

    return asyncio.run(streamed())


class Bodies:
    """The table's tools in a ``FunctionToolset``, recording every body that ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.toolset: FunctionToolset[Any] = FunctionToolset()
        bodies = self

        @self.toolset.tool_plain
        def shell(command: str) -> str:
            """Run a shell command."""
            bodies.record("shell", command)
            return f"ran {command}"

        @self.toolset.tool_plain
        def pay(amount: float | str) -> str:
            """Pay an amount."""
            bodies.record("pay", amount)
            return f"paid {amount}"

        self.shell = shell

    def record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))


def agent_for(
    row: Row, bodies: Bodies, refusal: str, **options: Any
) -> tuple[Agent[Any, Any], Script, Guard]:
    guard = make_guard(row)
    # two calls in one turn: a retry-style refusal of both spends one retry (per turn)
    script = Script([tool_calls((row.tool, row.args), (row.tool, row.args)), answer("done")])
    capability = InterlockCapability(
        guard,
        refusal=refusal,  # type: ignore[arg-type]
        mapper=row.mapper,
        models=False,
        **options,
    )
    agent = Agent(script.model, toolsets=[bodies.toolset], capabilities=[capability])
    return agent, script, guard


ids = [row.behaviour for row in ROWS]


# -- the verdict table: every row, each refusal style, sync / async / streamed ----------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("refusal", ["message", "retry"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_the_model_reads_the_refusal_and_the_body_runs_only_on_allow(
    row: Row, refusal: str, mode: str
) -> None:
    bodies = Bodies()
    agent, script, _ = agent_for(row, bodies, refusal)
    result = run(agent, mode)
    assert result.output == "done"  # the loop went on
    outputs = script.tool_outputs()
    assert len(outputs) == 2
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(output.startswith(("ran", "paid")) for output in outputs.values())
    else:
        assert bodies.ran == []
        assert all(row.says in output for output in outputs.values())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_propagates(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent, _, _ = agent_for(row, bodies, "raise")
    if row.error is None:
        assert run(agent, mode).output == "done"
        assert len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run(agent, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_an_unreachable_store_refuses_the_first_model_request_and_nothing_runs(
    refusal: str,
) -> None:
    bodies = Bodies()
    guard = make_guard(STORE_UNREACHABLE)
    script = Script([tool_calls(("shell", {"command": "ls"})), answer("done")])
    capability = InterlockCapability(guard, refusal=refusal)  # type: ignore[arg-type]
    agent = Agent(script.model, toolsets=[bodies.toolset], capabilities=[capability])
    with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
        agent.run_sync("go")
    assert script.requests == []  # the model was never called
    assert bodies.ran == []


def test_an_unreachable_store_refuses_a_tool_call_when_models_are_not_gated() -> None:
    bodies = Bodies()
    guard = make_guard(STORE_UNREACHABLE)
    script = Script([tool_calls(("shell", {"command": "ls"})), answer("done")])
    agent = Agent(
        script.model,
        toolsets=[bodies.toolset],
        capabilities=[InterlockCapability(guard, models=False)],
    )
    assert agent.run_sync("go").output == "done"
    assert bodies.ran == []
    assert STORE_UNREACHABLE.says in script.tool_outputs()["call-1"]


async def test_a_run_cancelled_while_its_tool_call_is_judged_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        script = Script([tool_calls(("shell", {"command": "ls"})), answer("done")])
        agent = Agent(
            script.model,
            toolsets=[bodies.toolset],
            capabilities=[InterlockCapability(guard, models=False)],
        )
        return await agent.run("go")

    await assert_cancellation_never_runs(call, lambda: len(bodies.ran))


async def test_a_run_cancelled_while_its_model_request_is_judged_never_calls_the_model() -> None:
    scripts: list[Script] = []

    async def call(guard: Guard) -> Any:
        script = Script([answer("done")])
        scripts.append(script)
        agent = Agent(script.model, capabilities=[InterlockCapability(guard, models=True)])
        return await agent.run("go")

    await assert_cancellation_never_runs(call, lambda: sum(len(s.requests) for s in scripts))


def test_the_guard_judges_the_validated_arguments_not_the_models_raw_json() -> None:
    seen: list[Any] = []
    guard = Guard(POLICY, on_decision=lambda d, action, *_: seen.append(action.arguments))
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def repeat(times: int) -> str:
        """Repeat."""
        return "x" * times

    # The model sends a JSON string with the number as text; the tool receives (and
    # the guard judges) the validated dict: {"times": 3}, an int.
    call = ToolCallPart("repeat", json.dumps({"times": "3"}), tool_call_id="c")
    script = Script([ModelResponse(parts=[call]), answer("done")])
    agent = Agent(
        script.model, toolsets=[toolset], capabilities=[InterlockCapability(guard, models=False)]
    )
    agent.run_sync("go")
    assert seen == [{"times": 3}]


# -- ModelRetry counts against the tool's retries; ToolFailed does not --------------------

RM = ("shell", {"command": "rm -rf /"})


def _refused_thrice(refusal: str, **agent_options: Any) -> tuple[Agent[Any, Any], Bodies]:
    bodies = Bodies()
    script = Script([tool_calls(RM), tool_calls(RM), tool_calls(RM), answer("done")])
    capability = InterlockCapability(Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
    agent = Agent(
        script.model, toolsets=[bodies.toolset], capabilities=[capability], **agent_options
    )
    return agent, bodies


def test_retry_style_refusals_beyond_the_tools_retry_budget_end_the_run() -> None:
    agent, bodies = _refused_thrice("retry")  # default budget: 1 retry per tool
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 1"):
        agent.run_sync("go")
    assert bodies.ran == []


def test_retry_style_refusals_count_per_turn_not_per_call() -> None:
    bodies = Bodies()
    script = Script([tool_calls(RM, RM, RM), answer("done")])
    capability = InterlockCapability(Guard(POLICY), refusal="retry")
    agent = Agent(script.model, toolsets=[bodies.toolset], capabilities=[capability])
    assert agent.run_sync("go").output == "done"  # three refusals, one turn: one retry
    assert bodies.ran == []


def test_retry_style_refusals_within_a_raised_budget_let_the_run_finish() -> None:
    agent, bodies = _refused_thrice("retry", retries=3)
    assert agent.run_sync("go").output == "done"
    assert bodies.ran == []


def test_message_style_refusals_spend_no_retries() -> None:
    agent, bodies = _refused_thrice("message")  # default budget of 1, three refusals
    assert agent.run_sync("go").output == "done"
    assert bodies.ran == []


def test_a_refusal_style_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="refusal must be"):
        InterlockCapability(Guard(POLICY), refusal="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_approval must be"):
        InterlockCapability(Guard(POLICY), on_approval="interrupt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a guard with a store"):
        InterlockCapability(Guard(POLICY), on_approval="defer")


# -- every entry point: judged, a deny never runs the body -------------------------------


def _ctx() -> RunContext[Any]:
    return RunContext(deps=None, model=TestModel(), usage=RunUsage())


async def _call_directly(toolset: Any, args: dict[str, Any]) -> Any:
    ctx = _ctx()
    tools = await toolset.get_tools(ctx)
    return await toolset.call_tool("shell", args, ctx, tools["shell"])


def _entry_points(
    bodies: Bodies, guard: Guard, args: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    def agent(**options: Any) -> Agent[Any, Any]:
        script = Script([tool_calls(("shell", args)), answer("done")])
        return Agent(script.model, toolsets=[bodies.toolset], **options)

    def guarded() -> Agent[Any, Any]:
        return agent(capabilities=[InterlockCapability(guard, refusal="raise", models=False)])

    async def iterate() -> Any:
        async with guarded().iter("go") as agent_run:
            async for _ in agent_run:
                pass
        return agent_run.result

    async def events() -> Any:
        async with guarded().run_stream_events("go") as stream:
            async for _ in stream:
                pass

    def stream_sync() -> Any:
        with guarded().run_stream_sync("go") as result:
            return result.get_output()

    def attached() -> Any:
        return guard.attach(agent()).run_sync("go")

    def attached_under_override() -> Any:
        attached_agent = guard.attach(agent())
        with attached_agent.override(capabilities=[]):  # replaces constructor capabilities only
            return attached_agent.run_sync("go")

    def test_model() -> Any:
        model = TestModel(call_tools=["shell"])
        toolset: FunctionToolset[Any] = FunctionToolset()

        @toolset.tool_plain
        def shell(command: str = args.get("command", "")) -> str:
            """Run a shell command."""
            bodies.record("shell", command)
            return "ran"

        capability = InterlockCapability(guard, refusal="raise", models=False)
        # TestModel invents its arguments: judge what it sends, the tool's default
        return Agent(model, toolsets=[toolset], capabilities=[capability]).run_sync("go")

    return {
        "Agent.run_sync": lambda: guarded().run_sync("go"),
        "Agent.run": lambda: asyncio.run(guarded().run("go")),
        "Agent.run_stream": lambda: run(guarded(), "stream"),
        "Agent.run_stream_sync": stream_sync,
        "Agent.run_stream_events": lambda: asyncio.run(events()),
        "Agent.iter": lambda: asyncio.run(iterate()),
        "guard.attach(agent)": attached,
        "guard.attach(agent) under agent.override(capabilities=[])": attached_under_override,
        "guard_toolset(...).call_tool": lambda: asyncio.run(
            _call_directly(guard_toolset(bodies.toolset, guard), args)
        ),
        "TestModel": test_model,
    }


#: ``agent.override(capabilities=...)`` exists in newer 2.x releases only
_OVERRIDES_CAPABILITIES = "capabilities" in inspect.signature(Agent.override).parameters
ENTRY_POINTS = [
    e
    for e in _entry_points(Bodies(), Guard(POLICY), {})
    if e != "TestModel" and (_OVERRIDES_CAPABILITIES or "override" not in e)
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_deny_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(POLICY), {"command": "rm -rf /"})[entry]
    if entry.startswith("guard.attach"):  # attach is message style: the model reads it
        call()
    else:
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            call()
    assert bodies.ran == []  # bypass count: 0


@pytest.mark.parametrize("entry", [*ENTRY_POINTS, "TestModel"])
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_a_guarded_toolset_in_a_guarded_agent_judges_each_call_once() -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    script = Script([tool_calls(("shell", {"command": "ls"})), answer("done")])
    agent = Agent(
        script.model,
        toolsets=[guard_toolset(bodies.toolset, guard)],
        capabilities=[InterlockCapability(guard, models=False)],
    )
    agent.run_sync("go")
    assert bodies.ran == [("shell", "ls")]
    assert len(seen) == 1


def test_the_calls_of_a_toolset_that_is_not_a_function_toolset_pass_the_capability() -> None:
    """Any toolset the agent's loop calls — a wrapper, an MCP server's — goes through
    the same tool manager, so through ``wrap_tool_execute``."""
    bodies = Bodies()
    guard = Guard(POLICY)
    wrapped = bodies.toolset.filtered(lambda ctx, tool_def: True)
    script = Script([tool_calls(RM, ("shell", {"command": "ls"})), answer("done")])
    agent = Agent(
        script.model, toolsets=[wrapped], capabilities=[InterlockCapability(guard, models=False)]
    )
    assert agent.run_sync("go").output == "done"
    assert bodies.ran == [("shell", "ls")]
    (binding,) = guard.coverage(agent).tools
    assert binding.name.startswith("toolset:FilteredToolset") and binding.guarded


def test_the_boundary_a_toolset_or_function_called_directly_is_not_judged() -> None:
    """What no capability can see: code calling the toolset (or the function) itself.
    Documented in docs/adapter-pydantic-ai.md; close it with guard_toolset / protect."""
    bodies = Bodies()
    asyncio.run(_call_directly(bodies.toolset, {"command": "rm -rf /"}))
    bodies.shell("rm -rf /")
    assert bodies.ran == [("shell", "rm -rf /"), ("shell", "rm -rf /")]


# -- budgets: model requests reserved before, committed from real usage after ------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def _records(guard: Guard, kind: str) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == kind]


def _paid_toolset() -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        return "found"

    return toolset


LOOKUP = ("paid_lookup", {"query": "q", "est_cost": 0.4})


@pytest.mark.parametrize("mode", [*MODES, "iter"])
def test_every_model_request_commits_its_real_usage_once(stateful_guard: Guard, mode: str) -> None:
    script = Script([tool_calls(LOOKUP, tokens=(120, 30)), answer("done", (200, 5))])
    agent = Agent(
        script.model,
        toolsets=[_paid_toolset()],
        capabilities=[InterlockCapability(stateful_guard)],
    )
    result = run(agent, mode)
    usage = result.usage
    assert usage.input_tokens and usage.output_tokens
    # what PydanticAI reports for the run (a streamed FunctionModel counts its own)
    spent = usage.input_tokens + usage.output_tokens
    assert _budget(stateful_guard, "model-tokens") == (spent, 0)
    if mode != "stream":
        assert spent == 120 + 30 + 200 + 5
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow", "allow"]
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_request_over_budget_never_reaches_the_model(
    stateful_guard: Guard, mode: str
) -> None:
    script = Script([answer("never")])
    capability = InterlockCapability(stateful_guard, estimate=lambda _: Usage(2000, 0))
    with pytest.raises(ActionDenied, match="model-tokens"):
        run(Agent(script.model, capabilities=[capability]), mode)
    assert script.requests == []
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard, mode: str) -> None:
    script = Script([answer("never")], fail=True)
    agent = Agent(script.model, capabilities=[InterlockCapability(stateful_guard)])
    with pytest.raises(RuntimeError, match="provider down"):
        run(agent, mode)
    assert len(script.requests) == 1
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


def test_a_stream_abandoned_early_settles_its_reservation_once(stateful_guard: Guard) -> None:
    script = Script([answer("a long answer " * 20, (10, 2))])
    agent = Agent(script.model, capabilities=[InterlockCapability(stateful_guard)])

    async def consume() -> None:
        async with agent.run_stream("go") as result:
            async for _ in result.stream_text(delta=True):
                break

    asyncio.run(consume())
    _, reserved = _budget(stateful_guard, "model-tokens")
    assert reserved == 0  # settled, not left open
    assert len(_records(stateful_guard, "llm")) == 1


def test_a_model_the_estimate_names_no_output_for_is_reserved_from_its_prompt() -> None:
    from interlock.adapters.pydantic_ai import estimate_usage

    seen: list[Usage] = []

    def spy(request_context: Any) -> Usage:
        seen.append(estimate_usage(request_context))
        return seen[-1]

    guard = Guard(load_policy_text(_ALLOW_MODELS))
    script = Script([answer("ok")])
    agent = Agent(
        script.model,
        capabilities=[InterlockCapability(guard, models=True, estimate=spy)],
        model_settings={"max_tokens": 64},
    )
    agent.run_sync("x" * 40)
    assert seen and seen[0].input_tokens >= 10 and seen[0].output_tokens == 64


_ALLOW_MODELS = """
version: 1
default: deny
rules:
  - id: models-ok
    decision: allow
    reason: fine
    kind: llm
"""


# -- approvals: refuse, wait, or PydanticAI's own deferred tools ---------------------------

APPROVAL_POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
  - id: wires-need-a-human
    decision: require_approval
    reason: wires need a human
    name: wire
  - id: no-huge-wires
    decision: deny
    reason: no wires over 1000
    name: wire
    when: "args.amount > 1000"
"""


@pytest.fixture
def approval_guard(tmp_path: Path) -> Any:
    from interlock import Context

    with Guard(
        load_policy_text(APPROVAL_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


def _wire_agent(
    guard: Guard, ran: list[float], *turns: ModelResponse, **options: Any
) -> tuple[Agent[Any, Any], Script]:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    script = Script(list(turns) or [tool_calls(("wire", {"amount": 5})), answer("done")])
    capability = InterlockCapability(guard, **options)
    output: Any = [str, DeferredToolRequests]
    agent = Agent(script.model, toolsets=[toolset], capabilities=[capability], output_type=output)
    return agent, script


def test_a_refusal_for_approval_carries_the_approval_url(approval_guard: Guard) -> None:
    ran: list[float] = []
    agent, script = _wire_agent(approval_guard, ran)
    assert agent.run_sync("go").output == "done"
    assert "https://approvals.example.com/a/" in script.tool_outputs()["call-1"]
    agent, _ = _wire_agent(approval_guard, ran, refusal="raise")
    with pytest.raises(ApprovalRequired) as caught:
        agent.run_sync("go")
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")
    assert ran == []


@pytest.mark.parametrize("mode", MODES)
def test_on_approval_wait_runs_the_call_once_a_human_approves(
    approval_guard: Guard, mode: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(approval_guard)
    agent, _ = _wire_agent(approval_guard, ran, on_approval="wait", approval_timeout=60)
    assert run(agent, mode).output == "done"
    supervisor.join()
    assert ran == [5]
    assert approval_guard.store is not None
    (approval,) = approval_guard.store.list_approvals()
    assert approval.status.value == "claimed"


def test_on_approval_wait_refuses_when_the_human_denies(approval_guard: Guard) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(approval_guard, approve=False)
    agent, script = _wire_agent(approval_guard, ran, on_approval="wait", approval_timeout=60)
    assert agent.run_sync("go").output == "done"
    supervisor.join()
    assert ran == []
    assert "denied" in script.tool_outputs()["call-1"]


def _deferred(guard: Guard, ran: list[float]) -> tuple[Agent[Any, Any], Any]:
    agent, _ = _wire_agent(
        guard,
        ran,
        tool_calls(("wire", {"amount": 5})),
        answer("done"),
        on_approval="defer",
    )
    first = agent.run_sync("go")
    return agent, first


def test_on_approval_defer_ends_the_run_with_pydantic_ais_deferred_requests(
    approval_guard: Guard,
) -> None:
    ran: list[float] = []
    _, first = _deferred(approval_guard, ran)
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    (call,) = requests.approvals
    assert (call.tool_name, call.args) == ("wire", {"amount": 5})
    meta = requests.metadata[call.tool_call_id]
    assert meta["interlock"] == "approval_required"
    assert meta["approval_url"].startswith("https://approvals.example.com/a/")
    assert approval_guard.store is not None
    (approval,) = approval_guard.store.list_approvals(status="pending")
    assert approval.id == meta["approval_id"]
    assert ran == []


def test_approving_in_pydantic_ais_flow_decides_the_interlock_approval(
    approval_guard: Guard,
) -> None:
    ran: list[float] = []
    agent, first = _deferred(approval_guard, ran)
    (call,) = first.output.approvals
    results = DeferredToolResults(approvals={call.tool_call_id: True})
    resumed = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    assert resumed.output == "done"
    assert ran == [5]
    assert approval_guard.store is not None
    (approval,) = approval_guard.store.list_approvals()
    assert approval.status.value == "claimed"  # approved by the human's answer, used once
    assert approval.decided_by == "pydantic-ai:bot"


def test_an_edit_in_pydantic_ais_flow_is_a_new_intent_judged_again(approval_guard: Guard) -> None:
    ran: list[float] = []
    agent, first = _deferred(approval_guard, ran)
    (call,) = first.output.approvals
    edited = DeferredToolResults(
        approvals={call.tool_call_id: ToolApproved(override_args={"amount": 5000})}
    )
    resumed = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=edited)
    assert resumed.output == "done"
    assert ran == []  # the edited call is denied by policy, whatever the human approved
    assert approval_guard.store is not None
    statuses = sorted(a.status.value for a in approval_guard.store.list_approvals())
    assert statuses == ["pending"]  # the original stays undecided; the edit needed none


def test_an_edit_the_policy_allows_with_approval_runs_with_the_edited_arguments(
    approval_guard: Guard,
) -> None:
    ran: list[float] = []
    agent, first = _deferred(approval_guard, ran)
    (call,) = first.output.approvals
    edited = DeferredToolResults(
        approvals={call.tool_call_id: ToolApproved(override_args={"amount": 7})}
    )
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=edited)
    assert ran == [7]
    assert approval_guard.store is not None
    by_status = sorted(a.status.value for a in approval_guard.store.list_approvals())
    assert by_status == ["claimed", "pending"]  # the edit's own approval, claimed once


def test_an_approval_denied_in_interlock_meanwhile_wins_over_pydantic_ais_approval(
    approval_guard: Guard,
) -> None:
    ran: list[float] = []
    agent, first = _deferred(approval_guard, ran)
    (call,) = first.output.approvals
    assert approval_guard.store is not None
    approval_id = first.output.metadata[call.tool_call_id]["approval_id"]
    approval_guard.store.deny(approval_id, by="supervisor", reason="no")
    results = DeferredToolResults(approvals={call.tool_call_id: True})
    resumed = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    assert resumed.output == "done"
    assert ran == []  # Interlock's record is the source of truth


def test_a_denial_in_pydantic_ais_flow_never_runs_the_tool(approval_guard: Guard) -> None:
    ran: list[float] = []
    agent, first = _deferred(approval_guard, ran)
    (call,) = first.output.approvals
    denied = DeferredToolResults(approvals={call.tool_call_id: ToolDenied("not today")})
    resumed = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=denied)
    assert resumed.output == "done"
    assert ran == []


# -- attach / detach, coverage, versions ---------------------------------------------------

_MISSING = object()


def test_attaching_an_agent_then_detaching_restores_iter_exactly() -> None:
    bodies = Bodies()
    rm = tool_calls(RM)
    script = Script([rm, answer("done"), rm, answer("done")])
    agent = Agent(script.model, toolsets=[bodies.toolset])
    guard = Guard(POLICY)
    assert "iter" not in vars(agent)
    guard.attach(agent)
    patched = vars(agent)["iter"]
    guard.attach(agent)  # idempotent
    assert vars(agent)["iter"] is patched
    agent.run_sync("go")
    assert bodies.ran == []
    guard.detach(agent)
    assert "iter" not in vars(agent)
    guard.detach(agent)
    agent.run_sync("go")
    assert bodies.ran == [("shell", "rm -rf /")]


def test_attaching_an_agent_built_with_the_guards_capability_judges_each_call_once() -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    script = Script([tool_calls(("shell", {"command": "ls"})), answer("done")])
    capability = InterlockCapability(guard, models=False)
    agent = guard.attach(Agent(script.model, toolsets=[bodies.toolset], capabilities=[capability]))
    agent.run_sync("go")
    assert bodies.ran == [("shell", "ls")]
    assert len(seen) == 1
    guard.detach(agent)
    assert "iter" not in vars(agent)


def test_attaching_to_a_second_guard_is_refused() -> None:
    agent = Agent(TestModel())
    Guard(POLICY).attach(agent)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(agent)
    finally:
        ADAPTER.detach(agent)


def test_coverage_names_every_tool_and_the_model() -> None:
    bodies = Bodies()
    guard, other = Guard(POLICY), Guard(POLICY)
    agent = Agent(TestModel(), toolsets=[bodies.toolset], capabilities=[InterlockCapability(guard)])
    coverage = guard.coverage(agent)
    assert {b.name: b.guarded for b in coverage.tools} == {"shell": True, "pay": True}
    assert [m.label for m in coverage.llms] == ["test"]
    assert coverage.unguarded == ["model:test"]  # no store: model requests not gated
    assert set(other.coverage(agent).unguarded) == {"shell", "pay", "model:test"}
    assert adapter_for(agent) is ADAPTER


@pytest.mark.parametrize("version", ["2.15.0", "3.0.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda distribution: version)
    pattern = rf"pydantic-ai-slim>=2.16,<3, not {version}.*interlock\[pydantic-ai\]"
    with pytest.raises(ImportError, match=pattern):
        AgentAdapter()
    with pytest.raises(ImportError, match=pattern):
        InterlockCapability(Guard(POLICY))


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "interlock.adapters.pydantic_ai")
    with pytest.raises(ImportError, match=r"pip install 'interlock\[pydantic-ai\]'"):
        importlib.import_module("interlock.adapters.pydantic_ai")
