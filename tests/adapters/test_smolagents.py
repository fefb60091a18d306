"""The smolagents adapter, driven through real ``ToolCallingAgent`` / ``CodeAgent``
loops with a scripted ``smolagents.Model`` subclass: nothing of the framework is
mocked."""

from __future__ import annotations

import pytest

pytest.importorskip("smolagents")

import importlib
import json
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

from smolagents import (
    CodeAgent,
    Model,
    Tool,
    ToolCallingAgent,
    ToolCollection,
    tool,
)
from smolagents.local_python_executor import PythonExecutor
from smolagents.models import (
    ChatMessage,
    ChatMessageStreamDelta,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    ChatMessageToolCallStreamDelta,
    MessageRole,
)
from smolagents.monitoring import LogLevel, TokenUsage
from smolagents.utils import AgentGenerationError

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Context,
    Decision,
    Guard,
    Usage,
    Verdict,
    load_policy_text,
)
from interlock.adapters import base
from interlock.adapters.base import adapter_for
from interlock.adapters.smolagents import (
    AGENT_ADAPTER,
    TOOL_ADAPTER,
    AgentAdapter,
    GuardedModel,
    ToolAdapter,
    guard_agent,
    guard_tool,
    guard_tools,
)

from .conformance import (
    POLICY,
    POLICY_YAML,
    ROWS,
    STORE_UNREACHABLE,
    GateDecider,
    Row,
    approve_when_pending,
    make_guard,
)

# -- a scripted model: real agent loops, nothing behind them ---------------------------


def tool_calls(*calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (0, 0)) -> ChatMessage:
    """One model turn asking for ``calls`` at once (ids ``call-1``, ``call-2``, ...)."""
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=None,
        tool_calls=[
            ChatMessageToolCall(
                function=ChatMessageToolCallFunction(name=name, arguments=args),
                id=f"call-{i}",
                type="function",
            )
            for i, (name, args) in enumerate(calls, 1)
        ],
        token_usage=TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1]),
    )


def answer(text: str = "done", tokens: tuple[int, int] = (0, 0)) -> ChatMessage:
    return tool_calls(("final_answer", {"answer": text}), tokens=tokens)


def code(source: str, tokens: tuple[int, int] = (0, 0)) -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=f"Thought: go\n<code>\n{source}\n</code>",
        token_usage=TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1]),
    )


class ScriptedModel(Model):
    """Answers each call with the next scripted turn (also as a stream of deltas);
    ``fail`` makes every call raise. Records what it was asked."""

    def __init__(self, *turns: ChatMessage, fail: bool = False) -> None:
        super().__init__(model_id="scripted-model")
        self.turns = list(turns)
        self.fail = fail
        self.asked: list[list[Any]] = []

    def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
        self.asked.append(list(messages))
        if self.fail:
            raise RuntimeError("provider down")
        return self.turns.pop(0)

    def generate_stream(
        self, messages: list[Any], *args: Any, **kwargs: Any
    ) -> Generator[ChatMessageStreamDelta]:
        turn = self.generate(messages, *args, **kwargs)
        for index, call in enumerate(turn.tool_calls or []):
            yield ChatMessageStreamDelta(
                tool_calls=[
                    ChatMessageToolCallStreamDelta(
                        index=index,
                        id=call.id,
                        type="function",
                        function=ChatMessageToolCallFunction(
                            name=call.function.name,
                            arguments=json.dumps(call.function.arguments),
                        ),
                    )
                ]
            )
        if turn.content:
            yield ChatMessageStreamDelta(content=str(turn.content))
        yield ChatMessageStreamDelta(token_usage=turn.token_usage)

    def seen(self) -> str:
        """Everything the model was shown on its last call, as text."""
        return json.dumps(
            [m.dict() if hasattr(m, "dict") else m for m in self.asked[-1]], default=str
        )


class Bodies:
    """The table's tools, recording every body that ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        bodies = self

        @tool
        def shell(command: str) -> str:
            """Run a shell command.

            Args:
                command: The command.
            """
            bodies.record("shell", command)
            return f"ran {command}"

        @tool
        def pay(amount: str) -> str:
            """Pay an amount.

            Args:
                amount: How much.
            """
            bodies.record("pay", amount)
            return f"paid {amount}"

        self.shell = shell
        self.pay = pay
        self.tools = [shell, pay]

    def record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))


def _agent(model: Model, tools: list[Any], **options: Any) -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=tools, model=model, max_steps=4, verbosity_level=LogLevel.OFF, **options
    )


def run(agent: Any, mode: str, task: str = "go") -> Any:
    if mode == "stream":
        steps = list(agent.run(task, stream=True))
        return steps[-1].output
    return agent.run(task)


MODES = ["run", "stream"]


def agent_for(row: Row, bodies: Bodies, refusal: str, mode: str) -> tuple[Any, ScriptedModel]:
    guard = make_guard(row)
    model = ScriptedModel(tool_calls((row.tool, row.args), (row.tool, row.args)), answer())
    agent = _agent(model, bodies.tools, stream_outputs=mode == "stream")
    guard_agent(agent, guard, refusal=refusal, mapper=row.mapper, models=False)  # type: ignore[arg-type]
    return agent, model


def _row_args(row: Row) -> Row:
    return row  # pay takes a string here; the table's numbers are judged as sent


ids = [row.behaviour for row in ROWS]


# -- the verdict table: both styles, run and stream ----------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_feeds_the_refusal_back_and_runs_only_on_allow(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent, model = agent_for(row, bodies, "message", mode)
    assert run(agent, mode) == "done"  # the loop went on
    if row.runs:
        assert len(bodies.ran) == 2
    else:
        assert bodies.ran == []
        assert row.says in model.seen()  # the model read the refusal


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_propagates(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent, _ = agent_for(row, bodies, "raise", mode)
    if row.error is None:
        assert run(agent, mode) == "done"
        assert len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run(agent, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict


@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_a_guarded_tool_called_directly_raises_and_runs_only_on_allow(row: Row) -> None:
    bodies = Bodies()
    target = bodies.shell if row.tool == "shell" else bodies.pay
    guard_tool(target, make_guard(row), mapper=row.mapper)
    if row.error is None:
        target(**row.args)
        assert len(bodies.ran) == 1
        return
    with pytest.raises(row.error):
        target(**row.args)
    assert bodies.ran == []


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_an_unreachable_store_refuses_the_first_model_call_and_nothing_runs(refusal: str) -> None:
    bodies = Bodies()
    guard = make_guard(STORE_UNREACHABLE)
    model = ScriptedModel(tool_calls(("shell", {"command": "ls"})), answer())
    agent = guard_agent(_agent(model, bodies.tools), guard, refusal=refusal)  # type: ignore[arg-type]
    with pytest.raises(AgentGenerationError) as caught:  # smolagents wraps model errors
        agent.run("go")
    assert isinstance(caught.value.__cause__, ActionUndetermined)
    assert STORE_UNREACHABLE.says in str(caught.value.__cause__)
    assert model.asked == []
    assert bodies.ran == []


def test_an_unreachable_store_refuses_a_tool_call_when_models_are_not_gated() -> None:
    bodies = Bodies()
    model = ScriptedModel(tool_calls(("shell", {"command": "ls"})), answer())
    agent = guard_agent(_agent(model, bodies.tools), make_guard(STORE_UNREACHABLE), models=False)
    assert agent.run("go") == "done"
    assert bodies.ran == []
    assert STORE_UNREACHABLE.says in model.seen()


def test_sync_only_a_decision_slower_than_the_timeout_is_undetermined_and_never_runs() -> None:
    """smolagents has no async path, so nothing to cancel: a slow decision ends in the
    guard's timeout. The decision that arrives later (allow) runs nothing."""
    bodies = Bodies()
    gate = GateDecider()
    guard = Guard(POLICY, decider=gate, timeout=0.05)
    model = ScriptedModel(tool_calls(("shell", {"command": "ls"})), answer())
    agent = guard_agent(_agent(model, bodies.tools), guard, refusal="raise")
    try:
        with pytest.raises(ActionUndetermined, match="timeout"):
            agent.run("go")
    finally:
        gate.release()
    threading.Event().wait(0.05)
    assert gate.entered.is_set()
    assert bodies.ran == []


# -- every entry point of a guarded tool --------------------------------------------------


class ShellTool(Tool):
    name = "shell"
    description = "Run a shell command."
    inputs = {"command": {"type": "string", "description": "The command."}}  # noqa: RUF012
    output_type = "string"

    def __init__(self, bodies: Bodies) -> None:
        super().__init__()
        self.bodies = bodies
        self.setups = 0

    def setup(self) -> None:
        self.setups += 1
        self.is_initialized = True

    def forward(self, command: str) -> str:
        self.bodies.record("shell", command)
        return f"ran {command}"


def _entry_points(bodies: Bodies, guard: Guard, args: dict[str, Any]) -> dict[str, Any]:
    command = args["command"]

    def decorated() -> Any:
        return guard_tool(bodies.shell, guard)

    def subclassed() -> Any:
        return guard_tool(ShellTool(bodies), guard)

    def agent_run(stream: bool = False, refusal: str = "raise") -> Any:
        model = ScriptedModel(tool_calls(("shell", args)), answer())
        agent = _agent(model, [bodies.shell], stream_outputs=stream)
        return run(guard_agent(agent, guard, refusal=refusal), "stream" if stream else "run")  # type: ignore[arg-type]

    def code_agent() -> Any:
        model = ScriptedModel(
            code(f"shell(command={command!r})\nfinal_answer('done')"),
            code("final_answer('refused')"),  # after a refusal: the model reads it
        )
        agent = CodeAgent(tools=[bodies.shell], model=model, verbosity_level=LogLevel.OFF)
        return guard.attach(agent).run("go")

    def tool_collection() -> Any:
        collection = ToolCollection([ShellTool(bodies)])  # what from_mcp / from_hub hand back
        (only,) = guard_tools(collection.tools, guard)
        return only(command=command)

    def managed() -> Any:
        inner_model = ScriptedModel(tool_calls(("shell", args)), answer("inner"))
        inner = _agent(inner_model, [bodies.shell], name="helper", description="Helps.")
        outer_model = ScriptedModel(
            tool_calls(("helper", {"task": "do it", "additional_args": {}})), answer()
        )
        outer = _agent(outer_model, [], managed_agents=[inner])
        guard_agent(outer, guard, refusal="raise")
        return outer.run("go")

    return {
        "tool(command=...)": lambda: decorated()(command=command),
        "tool(positional)": lambda: decorated()(command),
        "tool({inputs dict})": lambda: decorated()({"command": command}),
        "tool(..., sanitize_inputs_outputs=True)": lambda: decorated()(
            command=command, sanitize_inputs_outputs=True
        ),
        "tool.forward(...)": lambda: decorated().forward(command),
        "Tool subclass: tool(...)": lambda: subclassed()(command=command),
        "Tool subclass: tool.forward(...)": lambda: subclassed().forward(command=command),
        "ToolCallingAgent.run": agent_run,
        "ToolCallingAgent.run(stream=True)": lambda: agent_run(stream=True),
        "CodeAgent: a tool call in the model's code": code_agent,
        "ToolCollection tools": tool_collection,
        "managed agent: the inner agent's tool": managed,
    }


ENTRY_POLICY = load_policy_text(
    POLICY_YAML
    + """
  - id: helper
    decision: allow
    reason: the helper may be asked
    name: helper
"""
)
ENTRY_POINTS = list(_entry_points(Bodies(), Guard(ENTRY_POLICY), {"command": "ls"}))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_deny_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(ENTRY_POLICY), {"command": "rm -rf /"})[entry]
    if entry.startswith(("CodeAgent", "managed")):
        call()  # the refusal is fed back to the (outer) model
    else:
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            call()
    assert bodies.ran == []  # bypass count: 0


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(ENTRY_POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", "ls")]
    shell = [d for d in seen if d.rule_ids == ("allow-shell",)]
    assert [d.verdict for d in shell] == [Verdict.ALLOW]


def test_a_collected_agents_record_does_not_hold_a_new_agent_with_its_id() -> None:
    """The patch records are keyed by ``id``: once an attached agent is collected, a new
    agent may get its id. The record of the old one must not make the new one "attached
    to another guard" (the full run's flake), nor count as guarded."""
    from interlock.adapters.smolagents import _Patched

    other = Guard(POLICY)
    agent = CodeAgent(tools=[Bodies().shell], model=ScriptedModel(), verbosity_level=LogLevel.OFF)
    AGENT_ADAPTER._patched[id(agent)] = _Patched(other)  # a collected agent's, same id
    assert not AGENT_ADAPTER.is_attached(agent)
    guard = Guard(POLICY)
    assert guard.attach(agent) is agent
    assert AGENT_ADAPTER.guarded_by(agent, guard) and not AGENT_ADAPTER.guarded_by(agent, other)
    with pytest.raises(ValueError, match="another guard"):  # a live record still holds
        other.attach(agent)
    guard.detach(agent)
    assert not AGENT_ADAPTER.is_attached(agent)


def test_setup_runs_once_and_is_not_a_call() -> None:
    bodies = Bodies()
    shell = guard_tool(ShellTool(bodies), Guard(POLICY))
    with pytest.raises(ActionDenied):
        shell(command="rm -rf /")
    shell(command="ls")
    assert shell.setups == 1 and bodies.ran == [("shell", "ls")]


def test_the_boundary_the_class_function_called_directly_is_not_judged() -> None:
    """What an instance patch cannot see: the tool class's own ``forward`` called with
    the instance passed by hand. Documented in docs/adapter-smolagents.md."""
    bodies = Bodies()
    shell = guard_tool(ShellTool(bodies), Guard(POLICY))
    type(shell).forward(shell, command="rm -rf /")
    assert bodies.ran == [("shell", "rm -rf /")]


def test_the_codeagent_boundary_python_the_model_writes_is_not_a_tool_call(
    tmp_path: Path,
) -> None:
    """A CodeAgent runs the Python its model writes. Tool calls in it are judged (the
    tool's ``forward``); anything else that code does is not a tool call, and no tool
    gate sees it. With ``os`` authorised, the model's ``os.system(...)`` runs — the
    guard judged nothing — while the denied tool call in the same code never runs.
    Contain model-written code with the executor (its import allow-list, a remote
    sandbox), not with a tool gate."""
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    marker = tmp_path / "os-system-ran"
    source = f"import os\nos.system('touch {marker}')\nshell(command='rm -rf /')"
    model = ScriptedModel(code(source), code("final_answer('done')"))
    agent = CodeAgent(
        tools=[bodies.shell],
        model=model,
        verbosity_level=LogLevel.OFF,
        additional_authorized_imports=["os"],
    )
    guard.attach(agent).run("go")
    assert marker.exists()  # arbitrary Python: not a tool call, not judged
    assert bodies.ran == []  # the tool call in the same code: judged, denied
    assert [d.verdict for d in seen] == [Verdict.DENY]
    assert "no recursive deletes" in model.seen()
    # Without the import authorised, the executor (not Interlock) refuses it:
    model = ScriptedModel(code("import os\nos.system('true')"), code("final_answer('done')"))
    agent = CodeAgent(tools=[bodies.shell], model=model, verbosity_level=LogLevel.OFF)
    guard.attach(agent).run("go")
    assert "Import of os is not allowed" in model.seen()
    assert len(seen) == 1


class _Sandbox(PythonExecutor):
    """Stands for a remote executor (e2b, docker, ...): it would run the tools'
    source inside the sandbox."""

    def send_tools(self, tools: dict[str, Tool]) -> None:
        return None

    def send_variables(self, variables: dict[str, Any]) -> None:
        return None

    def __call__(self, code_action: str) -> Any:
        raise AssertionError("not run")


def test_a_codeagent_with_a_remote_executor_is_refused_and_reported_unguarded() -> None:
    bodies = Bodies()
    agent = CodeAgent(tools=[bodies.shell], model=ScriptedModel(), verbosity_level=LogLevel.OFF)
    agent.python_executor = _Sandbox()
    guard = Guard(POLICY)
    with pytest.raises(TypeError, match="remote executor"):
        guard.attach(agent)
    assert "forward" not in vars(bodies.shell)  # nothing was patched
    (binding,) = guard.coverage(agent).tools
    assert not binding.guarded and "sandbox" in (binding.note or "")


# -- budgets: model calls reserved before, committed from real usage after -----------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def _records(guard: Guard, kind: str) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == kind]


def _paid_lookup() -> Tool:
    @tool
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost.

        Args:
            query: What.
            est_cost: What it costs.
        """
        return "found"

    return paid_lookup


#: smolagents' system prompt alone is ~900 tokens: reserve less in these small budgets
SMALL = {"estimate": lambda *_: Usage(100, 0)}


LOOKUP = ("paid_lookup", {"query": "q", "est_cost": 0.4})


@pytest.mark.parametrize("mode", MODES)
def test_every_model_call_commits_its_real_usage_once(stateful_guard: Guard, mode: str) -> None:
    model = ScriptedModel(tool_calls(LOOKUP, tokens=(120, 30)), answer("done", (200, 5)))
    agent = _agent(model, [_paid_lookup()], stream_outputs=mode == "stream")
    guard_agent(agent, stateful_guard, **SMALL)
    assert run(agent, mode) == "done"
    assert _budget(stateful_guard, "model-tokens") == (120 + 30 + 200 + 5, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow", "allow"]
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard, mode: str) -> None:
    inner = ScriptedModel(answer())
    model = GuardedModel(inner, stateful_guard, estimate=lambda *_: Usage(2000, 0))
    agent = _agent(model, [], stream_outputs=mode == "stream")
    with pytest.raises(AgentGenerationError) as caught:
        run(agent, mode)
    assert isinstance(caught.value.__cause__, ActionDenied)
    assert "model-tokens" in str(caught.value.__cause__)
    assert inner.asked == []
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


@pytest.mark.parametrize("mode", MODES)
def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard, mode: str) -> None:
    inner = ScriptedModel(answer(), fail=True)
    model = GuardedModel(inner, stateful_guard, **SMALL)
    agent = _agent(model, [], stream_outputs=mode == "stream")
    with pytest.raises(AgentGenerationError, match="provider down"):
        run(agent, mode)
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


@pytest.mark.parametrize(("deltas", "settled"), [(1, (0, 0)), (99, (205, 0))])
def test_a_stream_closed_early_is_released_and_one_read_to_its_usage_is_spent(
    stateful_guard: Guard, deltas: int, settled: tuple[int, int]
) -> None:
    model = GuardedModel(ScriptedModel(answer("done", (200, 5))), stateful_guard, **SMALL)
    stream = model.generate_stream([{"role": "user", "content": "hi"}])
    for index, _ in enumerate(stream, 1):
        if index >= deltas:
            break
    stream.close()
    assert _budget(stateful_guard, "model-tokens") == settled


def test_a_guarded_model_is_still_the_wrapped_model_for_the_agent() -> None:
    inner = ScriptedModel(answer())
    model = GuardedModel(inner, Guard(POLICY))
    assert model.model_id == "scripted-model"
    assert model.turns is inner.turns  # anything else is the wrapped model's


# -- approvals: smolagents has no human-in-the-loop of its own; refuse or wait -------------


def _wire_agent(
    guard: Guard, ran: list[str], **options: Any
) -> tuple[ToolCallingAgent, ScriptedModel]:
    @tool
    def wire(amount: str) -> str:
        """Wire money.

        Args:
            amount: How much.
        """
        ran.append(amount)
        return f"wired {amount}"

    model = ScriptedModel(tool_calls(("wire", {"amount": "5"})), answer())
    agent = _agent(model, [wire])
    guard_agent(agent, guard, models=False, **options)
    return agent, model


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    ran: list[str] = []
    agent, model = _wire_agent(stateful_guard, ran)
    assert agent.run("go") == "done"
    assert "https://approvals.example.com/a/" in model.seen()
    agent, _ = _wire_agent(stateful_guard, ran, refusal="raise")
    with pytest.raises(ApprovalRequired) as caught:
        agent.run("go")
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")
    assert ran == []


@pytest.mark.parametrize("approve", [True, False])
def test_on_approval_wait_runs_the_call_only_once_a_human_approves(
    stateful_guard: Guard, approve: bool
) -> None:
    ran: list[str] = []
    supervisor = approve_when_pending(stateful_guard, approve=approve)
    agent, model = _wire_agent(stateful_guard, ran, on_approval="wait", approval_timeout=60)
    assert agent.run("go") == "done"
    supervisor.join()
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    if approve:
        assert ran == ["5"]
        assert approval.status.value == "claimed"
    else:
        assert ran == []
        assert "denied" in model.seen()


def test_on_approval_wait_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs a guard with a store"):
        guard_agent(_agent(ScriptedModel(), []), Guard(POLICY), on_approval="wait")
    with pytest.raises(ValueError, match="refusal must be"):
        guard_agent(_agent(ScriptedModel(), []), Guard(POLICY), refusal="later")  # type: ignore[arg-type]


# -- attach / detach, coverage, versions -----------------------------------------------------


def test_attaching_an_agent_then_detaching_restores_everything(tmp_path: Path) -> None:
    bodies = Bodies()
    model = ScriptedModel(
        tool_calls(("shell", {"command": "rm -rf /"})),
        answer(),
        tool_calls(("shell", {"command": "rm -rf /"})),
        answer(),
    )
    agent = _agent(model, bodies.tools)
    models_ok = POLICY_YAML + "  - {id: m, decision: allow, reason: ok, kind: llm}\n"
    guard = Guard(load_policy_text(models_ok), store=f"sqlite:///{tmp_path / 's.db'}")
    inner = agent.model

    def patched() -> list[object]:
        parts = (agent, *bodies.tools)
        return [vars(o).get(a) for o in parts for a in ("execute_tool_call", "forward", "model")]

    before = patched()
    guard.attach(agent)
    assert isinstance(agent.model, GuardedModel)
    guard.attach(agent)  # idempotent
    assert not isinstance(agent.model.wrapped, GuardedModel)
    agent.run("go")
    assert bodies.ran == []
    guard.detach(agent)
    assert patched() == before and agent.model is inner
    agent.run("go")
    assert bodies.ran == [("shell", "rm -rf /")]


def test_attaching_to_a_second_guard_is_refused() -> None:
    bodies = Bodies()
    agent = _agent(ScriptedModel(), bodies.tools)
    Guard(POLICY).attach(agent)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(agent)
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(bodies.shell)
    finally:
        AGENT_ADAPTER.detach(agent)


def test_coverage_names_the_tools_the_managed_agents_and_the_model() -> None:
    bodies = Bodies()
    guard, other = Guard(POLICY), Guard(POLICY)
    helper = _agent(ScriptedModel(), [], name="helper", description="Helps.")
    agent = guard.attach(_agent(ScriptedModel(), bodies.tools, managed_agents=[helper]))
    coverage = guard.coverage(agent)
    assert {b.name: b.guarded for b in coverage.tools} == {
        "shell": True,
        "pay": True,
        "helper": True,
    }
    assert coverage.unguarded == ["model:scripted-model"]  # no store: not wrapped
    assert set(other.coverage(agent).unguarded) == {
        "shell",
        "pay",
        "helper",
        "model:scripted-model",
    }
    assert adapter_for(agent) is AGENT_ADAPTER
    assert adapter_for(bodies.shell) is TOOL_ADAPTER
    AGENT_ADAPTER.detach(agent)


@pytest.mark.parametrize("version", ["1.19.0", "2.0.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda distribution: version)
    pattern = rf"smolagents>=1.20,<2, not {version}.*interlock\[smolagents\]"
    with pytest.raises(ImportError, match=pattern):
        ToolAdapter()
    with pytest.raises(ImportError, match=pattern):
        AgentAdapter()


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "smolagents", None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "interlock.adapters.smolagents")
    with pytest.raises(ImportError, match=r"pip install 'interlock\[smolagents\]'"):
        importlib.import_module("interlock.adapters.smolagents")


def test_the_guard_context_names_the_agent_in_records(stateful_guard: Guard) -> None:
    assert stateful_guard.context == Context(agent="bot")
