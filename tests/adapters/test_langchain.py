"""The LangChain adapter, driven through a real ``create_agent`` loop with a fake model."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain")

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
)
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, MessagesState, StateGraph

from interlock import ActionDenied, ActionUndetermined, Decision, Guard, Usage, Verdict
from interlock.adapters.base import adapter_for
from interlock.adapters.langchain import (
    ADAPTER,
    GRAPH_ADAPTER,
    TOOL_NODE_ADAPTER,
    InterlockMiddleware,
    LangChainAdapter,
    guard_tool,
    guarded_tool_node,
)

from .conformance import (
    CANCELLATION,
    POLICY,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    approve_when_pending,
    assert_cancellation_never_runs,
    make_guard,
)


class FakeToolModel(FakeMessagesListChatModel):
    """A scripted model; ``create_agent`` binds tools, which a script ignores."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


class Bodies:
    """The tools of the table, recording every body that ran (any thread)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        bodies = self

        @tool
        def shell(command: str) -> str:
            """Run a shell command."""
            with bodies._lock:
                bodies.ran.append(("shell", {"command": command}))
            return f"ran {command}"

        @tool
        def pay(amount: float | str) -> str:
            """Pay an amount."""
            with bodies._lock:
                bodies.ran.append(("pay", {"amount": amount}))
            return f"paid {amount}"

        self.tools: list[BaseTool] = [shell, pay]


def parallel_calls(row: Row) -> list[BaseMessage]:
    """One AI message asking for the row's call twice, in parallel, then a final one."""
    calls = [{"name": row.tool, "args": row.args, "id": f"call-{i}"} for i in (1, 2)]
    return [AIMessage(content="", tool_calls=calls), AIMessage(content="done")]


def agent_for(row: Row, bodies: Bodies, refusal: str) -> Any:
    guard = make_guard(row)
    middleware = InterlockMiddleware(guard, refusal=refusal, mapper=row.mapper)  # type: ignore[arg-type]
    model = FakeToolModel(responses=parallel_calls(row))
    return create_agent(model, bodies.tools, middleware=[middleware])


def tool_messages(messages: list[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def run_agent(agent: Any, mode: str) -> dict[str, Any]:
    inputs = {"messages": [("user", "go")]}
    if mode == "async":
        return asyncio.run(agent.ainvoke(inputs))
    return agent.invoke(inputs)  # type: ignore[no-any-return]


ids = [row.behaviour for row in ROWS]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, mode: str
) -> None:
    bodies = Bodies()
    result = run_agent(agent_for(row, bodies, "message"), mode)
    answers = tool_messages(result["messages"])
    assert {m.tool_call_id for m in answers} == {"call-1", "call-2"}
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(m.status == "success" for m in answers)
    else:
        assert bodies.ran == []
        for answer in answers:
            assert answer.status == "error"
            assert answer.name == row.tool
            assert row.says in str(answer.content)
    assert result["messages"][-1].content == "done"  # the loop went on


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_propagates(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent = agent_for(row, bodies, "raise")
    if row.error is None:
        run_agent(agent, mode)
        assert len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run_agent(agent, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict


# -- guard_tool: every public entry point is judged -------------------------------------


def _entry_points(t: BaseTool, args: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    async def collect(stream: Any) -> list[Any]:
        return [chunk async for chunk in stream]

    return {
        "invoke": lambda: t.invoke(args),
        "ainvoke": lambda: asyncio.run(t.ainvoke(args)),
        "run": lambda: t.run(args),
        "arun": lambda: asyncio.run(t.arun(args)),
        "batch": lambda: t.batch([args]),
        "abatch": lambda: asyncio.run(t.abatch([args])),
        "stream": lambda: list(t.stream(args)),
        "astream": lambda: asyncio.run(collect(t.astream(args))),
        "invoke a tool call": lambda: t.invoke(
            {"name": t.name, "args": args, "id": "c1", "type": "tool_call"}
        ),
    }


ENTRY_POINTS = list(_entry_points(Bodies().tools[0], {}))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_guard_tool_denies_at_every_entry_point_and_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    guarded = guard_tool(bodies.tools[0], Guard(POLICY))
    with pytest.raises(ActionDenied):
        _entry_points(guarded, {"command": "rm -rf /"})[entry]()
    assert bodies.ran == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_guard_tool_allows_at_every_entry_point(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guarded = guard_tool(bodies.tools[0], Guard(POLICY, on_decision=lambda d, *_: seen.append(d)))
    _entry_points(guarded, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", {"command": "ls"})]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]  # judged once, not per layer


def test_guard_tool_keeps_the_tool_and_leaves_the_original_unguarded() -> None:
    bodies = Bodies()
    original = bodies.tools[0]
    guarded = guard_tool(original, Guard(POLICY))
    assert (guarded.name, guarded.description, guarded.args_schema) == (
        original.name,
        original.description,
        original.args_schema,
    )
    assert guarded.tool_call_schema.model_json_schema() == (  # type: ignore[union-attr]
        original.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    )
    original.invoke({"command": "rm -rf /"})
    assert bodies.ran == [("shell", {"command": "rm -rf /"})]


def test_a_guarded_tool_inside_the_middleware_is_judged_once() -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    tools = [guard_tool(t, guard) for t in bodies.tools]
    row = ROWS[0]
    model = FakeToolModel(responses=parallel_calls(row))
    agent = create_agent(model, tools, middleware=[InterlockMiddleware(guard)])
    run_agent(agent, "sync")
    assert len(bodies.ran) == 2
    assert len(seen) == 2


# -- attach / detach ------------------------------------------------------------------------

_MISSING = object()


def _patched_state(obj: object) -> dict[str, tuple[object, object]]:
    return {
        target.attr: (vars(obj).get(target.attr, _MISSING), getattr(type(obj), target.attr))
        for target in ADAPTER.targets
    }


def test_attach_then_detach_restores_every_patched_attribute() -> None:
    bodies = Bodies()
    shell = bodies.tools[0]
    guard = Guard(POLICY)
    before = _patched_state(shell)
    guard.attach(shell)
    during = _patched_state(shell)
    assert all(during[a][0] is not before[a][0] for a in before)
    guard.attach(shell)  # idempotent: the same replacements stay
    assert all(_patched_state(shell)[a][0] is during[a][0] for a in before)
    with pytest.raises(ActionDenied):
        shell.invoke({"command": "rm -rf /"})
    guard.detach(shell)
    after = _patched_state(shell)
    assert all(after[a][0] is before[a][0] and after[a][1] is before[a][1] for a in before)
    guard.detach(shell)  # a second detach changes nothing
    shell.invoke({"command": "rm -rf /"})
    assert bodies.ran == [("shell", {"command": "rm -rf /"})]


def test_attach_to_a_second_guard_is_refused() -> None:
    shell = Bodies().tools[0]
    Guard(POLICY).attach(shell)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(shell)
    finally:
        ADAPTER.detach(shell)


def test_adapter_for_finds_the_langchain_adapter() -> None:
    assert adapter_for(Bodies().tools[0]) is ADAPTER
    with pytest.raises(TypeError):
        adapter_for(object())


def test_an_unsupported_version_names_the_range_and_the_extra() -> None:
    class Future(LangChainAdapter):
        supported = ("9.0", "10")

    with pytest.raises(ImportError, match=r"langchain-core>=9.0,<10.*interlock\[langchain\]"):
        Future()


# -- plain LangGraph -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_guarded_tool_node_refuses_before_the_body(mode: str) -> None:
    bodies = Bodies()
    graph = StateGraph(MessagesState)
    graph.add_node("tools", guarded_tool_node(bodies.tools, Guard(POLICY)))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    node = graph.compile()
    ask = AIMessage(
        content="",
        tool_calls=[
            {"name": "shell", "args": {"command": "ls"}, "id": "ok"},
            {"name": "shell", "args": {"command": "rm -rf /"}, "id": "no"},
        ],
    )
    state: Any = {"messages": [ask]}
    out = asyncio.run(node.ainvoke(state)) if mode == "async" else node.invoke(state)
    status = {m.tool_call_id: m.status for m in tool_messages(out["messages"])}
    assert status == {"ok": "success", "no": "error"}
    assert bodies.ran == [("shell", {"command": "ls"})]


# -- state: reservations settle around the body, approvals carry their URL ----------------


def _stateful_agent(guard: Guard, fails: bool, *calls: tuple[str, dict[str, Any]]) -> Any:
    @tool
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        if fails:
            raise RuntimeError("upstream down")
        return "found"

    @tool
    def wire(amount: float) -> str:
        """Wire money."""
        raise AssertionError("the body must not run")

    ask: Any = [{"name": n, "args": a, "id": f"c{i}"} for i, (n, a) in enumerate(calls)]
    script: list[BaseMessage] = [AIMessage(content="", tool_calls=ask), AIMessage("done")]
    model = FakeToolModel(responses=script)
    return create_agent(model, [paid_lookup, wire], middleware=[InterlockMiddleware(guard)])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_allowed_call_commits_its_reservation(stateful_guard: Guard, mode: str) -> None:
    agent = _stateful_agent(stateful_guard, False, ("paid_lookup", {"query": "a", "est_cost": 0.4}))
    run_agent(agent, mode)
    assert stateful_guard.store is not None
    (row,) = stateful_guard.store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (400_000, 0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tool_that_raises_releases_its_reservation(stateful_guard: Guard, mode: str) -> None:
    agent = _stateful_agent(stateful_guard, True, ("paid_lookup", {"query": "a", "est_cost": 0.4}))
    with pytest.raises(RuntimeError, match="upstream down"):
        run_agent(agent, mode)
    assert stateful_guard.store is not None
    (row,) = stateful_guard.store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (0, 0)


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    agent = _stateful_agent(stateful_guard, False, ("wire", {"amount": 5}))
    (answer,) = tool_messages(run_agent(agent, "sync")["messages"])
    assert answer.status == "error"
    assert "https://approvals.example.com/a/" in str(answer.content)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_model_tool_call_id_is_recorded_for_correlation(
    stateful_guard: Guard, mode: str
) -> None:
    agent = _stateful_agent(stateful_guard, False, ("paid_lookup", {"query": "a", "est_cost": 0.1}))
    run_agent(agent, mode)
    assert stateful_guard.store is not None
    records = [json.loads(row.body) for row in stateful_guard.store.audit_rows(kind="decision")]
    tools = [r for r in records if r["action"]["kind"] == "tool"]
    assert [r.get("call_id") for r in tools] == ["c0"]


# -- model calls: checked and reserved before, committed from usage_metadata after -------


def _with_usage(message: AIMessage, tokens_in: int, tokens_out: int) -> AIMessage:
    message.usage_metadata = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }
    return message


def _model_agent(guard: Guard, script: list[BaseMessage], **options: Any) -> Any:
    @tool
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        return "found"

    model = FakeToolModel(responses=script)
    return create_agent(model, [paid_lookup], middleware=[InterlockMiddleware(guard, **options)])


def _llm_records(guard: Guard) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == "llm"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_model_call_is_checked_and_commits_its_real_usage(
    stateful_guard: Guard, mode: str
) -> None:
    ask = AIMessage(
        content="",
        tool_calls=[{"name": "paid_lookup", "args": {"query": "q", "est_cost": 0.1}, "id": "p1"}],
    )
    script: list[BaseMessage] = [_with_usage(ask, 120, 30), _with_usage(AIMessage("done"), 200, 5)]
    result = run_agent(_model_agent(stateful_guard, script), mode)
    assert result["messages"][-1].content == "done"
    assert stateful_guard.store is not None
    (row,) = stateful_guard.store.budget_rows(budget_id="model-tokens")
    assert (row.spent, row.reserved) == (120 + 30 + 200 + 5, 0)
    records = _llm_records(stateful_guard)
    assert [r["decision"] for r in records] == ["allow", "allow"]
    assert {r["action"]["name"] for r in records} == {"FakeToolModel"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard, mode: str) -> None:
    called: list[int] = []

    class Counting(FakeToolModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            called.append(1)
            return super()._generate(*args, **kwargs)

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            called.append(1)
            return await super()._agenerate(*args, **kwargs)

    big = "x" * 8000  # ~2000 tokens estimated: more than the 1000-token budget
    model = Counting(responses=[AIMessage("never")])
    agent = create_agent(model, [], middleware=[InterlockMiddleware(stateful_guard)])
    inputs = {"messages": [("user", big)]}
    result = asyncio.run(agent.ainvoke(inputs)) if mode == "async" else agent.invoke(inputs)
    assert called == []
    final = result["messages"][-1]
    assert isinstance(final, AIMessage)
    assert "model-tokens" in str(final.content)  # the answer names the budget
    with pytest.raises(ActionDenied, match="model-tokens"):
        create_agent(
            model, [], middleware=[InterlockMiddleware(stateful_guard, refusal="raise")]
        ).invoke(inputs)
    assert called == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard, mode: str) -> None:
    class Broken(FakeToolModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("provider down")

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("provider down")

    agent = create_agent(Broken(responses=[]), [], middleware=[InterlockMiddleware(stateful_guard)])
    with pytest.raises(RuntimeError, match="provider down"):
        run_agent(agent, mode)
    assert stateful_guard.store is not None
    (row,) = stateful_guard.store.budget_rows(budget_id="model-tokens")
    assert (row.spent, row.reserved) == (0, 0)


def test_model_calls_are_not_gated_without_a_store_unless_asked() -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    agent = create_agent(
        FakeToolModel(responses=[AIMessage("hi")]), [], middleware=[InterlockMiddleware(guard)]
    )
    assert agent.invoke({"messages": [("user", "hi")]})["messages"][-1].content == "hi"
    assert seen == []
    gated = create_agent(
        FakeToolModel(responses=[AIMessage("hi")]),
        [],
        middleware=[InterlockMiddleware(guard, models=True)],
    )
    final = gated.invoke({"messages": [("user", "hi")]})["messages"][-1]
    assert [d.verdict for d in seen] == [Verdict.DENY]  # the table's policy has no llm rule
    assert "denied llm 'FakeToolModel'" in str(final.content)


def test_the_default_estimate_counts_the_prompt_and_the_output_ceiling() -> None:
    from langchain.agents.middleware.types import ModelRequest
    from langchain_core.messages import HumanMessage, SystemMessage

    from interlock.adapters.langchain import estimate_usage

    model = FakeToolModel(responses=[])
    request: Any = ModelRequest(
        model=model,
        messages=[HumanMessage("a" * 10)],
        system_message=SystemMessage("b" * 6),
    )
    assert estimate_usage(request) == Usage(4, 0)  # ceil(16 / 4), no ceiling on the fake
    custom = InterlockMiddleware(Guard(POLICY), estimate=lambda r: Usage(7, 9))
    assert custom.estimate(request) == Usage(7, 9)


# -- a call awaiting approval: refuse, wait, or interrupt the graph -----------------------


def _wire_agent(guard: Guard, ran: list[float], **options: Any) -> Any:
    @tool
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    ask = AIMessage(content="", tool_calls=[{"name": "wire", "args": {"amount": 5}, "id": "w1"}])
    model = FakeToolModel(responses=[ask, AIMessage("done")])
    return create_agent(model, [wire], middleware=[InterlockMiddleware(guard, **options)])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_approval_wait_runs_the_call_once_a_human_approves(
    stateful_guard: Guard, mode: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard)
    result = run_agent(
        _wire_agent(stateful_guard, ran, on_approval="wait", approval_timeout=60), mode
    )
    supervisor.join()
    assert ran == [5]
    (answer,) = tool_messages(result["messages"])
    assert (answer.status, answer.content) == ("success", "wired 5.0")
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert approval.status.value == "claimed"  # the grant was used, once


def test_on_approval_wait_refuses_when_the_human_denies(stateful_guard: Guard) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard, approve=False)
    result = run_agent(
        _wire_agent(stateful_guard, ran, on_approval="wait", approval_timeout=60), "sync"
    )
    supervisor.join()
    assert ran == []
    (answer,) = tool_messages(result["messages"])
    assert answer.status == "error"
    assert "denied" in str(answer.content)


def test_on_approval_wait_refuses_when_nobody_decides_in_time(stateful_guard: Guard) -> None:
    ran: list[float] = []
    agent = _wire_agent(stateful_guard, ran, on_approval="wait", approval_timeout=0.05)
    (answer,) = tool_messages(run_agent(agent, "sync")["messages"])
    assert ran == []
    assert answer.status == "error"
    assert "requires approval" in str(answer.content)


def test_waiting_or_interrupting_needs_a_store() -> None:
    with pytest.raises(ValueError, match="needs a guard with a store"):
        InterlockMiddleware(Guard(POLICY), on_approval="wait")
    with pytest.raises(ValueError, match="on_approval must be"):
        InterlockMiddleware(Guard(POLICY), on_approval="later")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_approval_interrupt_pauses_the_graph_and_resumes_after_the_decision(
    stateful_guard: Guard, mode: str
) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    @tool
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    ran: list[float] = []
    ask = AIMessage(content="", tool_calls=[{"name": "wire", "args": {"amount": 5}, "id": "w1"}])
    agent = create_agent(
        FakeToolModel(responses=[ask, AIMessage("done")]),
        [wire],
        middleware=[InterlockMiddleware(stateful_guard, on_approval="interrupt")],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}

    def invoke(value: Any) -> dict[str, Any]:
        if mode == "async":
            return asyncio.run(agent.ainvoke(value, config))  # type: ignore[no-any-return]
        return agent.invoke(value, config)  # type: ignore[no-any-return]

    paused = invoke({"messages": [("user", "pay the invoice")]})
    (pending,) = paused["__interrupt__"]
    payload = pending.value
    assert payload["interlock"] == "approval_required"
    assert payload["reason"] == "wires need a human"
    assert ran == []
    assert stateful_guard.store is not None
    stateful_guard.store.approve(payload["approval_id"], by="supervisor", reason="ok")
    done = invoke(Command(resume="go"))
    assert ran == [5]
    (answer,) = tool_messages(done["messages"])
    assert answer.content == "wired 5.0"
    assert done["messages"][-1].content == "done"


def test_resuming_an_interrupt_without_a_decision_refuses(stateful_guard: Guard) -> None:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    ran: list[float] = []

    @tool
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return "wired"

    ask = AIMessage(content="", tool_calls=[{"name": "wire", "args": {"amount": 5}, "id": "w1"}])
    agent = create_agent(
        FakeToolModel(responses=[ask, AIMessage("done")]),
        [wire],
        middleware=[InterlockMiddleware(stateful_guard, on_approval="interrupt")],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t2"}}
    agent.invoke({"messages": [("user", "pay")]}, config)
    done = agent.invoke(Command(resume="approved!"), config)  # the resume value is not trusted
    assert ran == []
    (answer,) = tool_messages(done["messages"])
    assert answer.status == "error"
    assert "requires approval" in str(answer.content)


def test_a_middleware_that_does_not_gate_models_adds_no_model_layer() -> None:
    from langchain.agents.middleware import AgentMiddleware

    tools_only = InterlockMiddleware(Guard(POLICY))
    both = InterlockMiddleware(Guard(POLICY), models=True)
    assert isinstance(tools_only, InterlockMiddleware) and isinstance(both, InterlockMiddleware)
    # create_agent adds a model-call layer only for a class overriding wrap_model_call
    assert type(tools_only).wrap_model_call is AgentMiddleware.wrap_model_call
    assert type(tools_only).awrap_model_call is AgentMiddleware.awrap_model_call
    assert type(both).wrap_model_call is not AgentMiddleware.wrap_model_call
    assert (tools_only.models, both.models) == (False, True)


# -- guard.attach(agent): every ToolNode of a compiled graph ------------------------------


class Recording(AgentMiddleware):
    """A user's own tool middleware, which attaching must keep."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self.seen.append(request.tool_call["id"])
        return handler(request)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        self.seen.append(request.tool_call["id"])
        return await handler(request)


def _node_state(node: Any) -> dict[str, object]:
    return {t.attr: vars(node)[t.attr] for t in TOOL_NODE_ADAPTER.targets}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("own_middleware", [False, True], ids=["bare", "with-middleware"])
def test_guard_attach_on_an_agent_gates_its_tools_and_detach_restores_it(
    mode: str, own_middleware: bool
) -> None:
    bodies = Bodies()
    recording = Recording()
    calls = [
        {"name": "shell", "args": {"command": "ls"}, "id": "ok"},
        {"name": "shell", "args": {"command": "rm -rf /"}, "id": "no"},
    ]
    script = [AIMessage(content="", tool_calls=calls), AIMessage(content="done")]
    agent = create_agent(
        FakeToolModel(responses=script * 2),
        bodies.tools,
        middleware=[recording] if own_middleware else [],
    )
    (node,) = GRAPH_ADAPTER.tool_nodes(agent)
    before = _node_state(node)
    guard = Guard(POLICY)
    assert adapter_for(agent) is GRAPH_ADAPTER
    assert guard.attach(agent) is agent
    guard.attach(agent)  # idempotent
    out = run_agent(agent, mode)
    status = {m.tool_call_id: m.status for m in tool_messages(out["messages"])}
    assert status == {"ok": "success", "no": "error"}
    assert bodies.ran == [("shell", {"command": "ls"})]
    if own_middleware:
        assert sorted(recording.seen) == ["ok"]  # ours is outermost: a refusal stops first
    guard.detach(agent)
    assert all(_node_state(node)[a] is before[a] for a in before)
    run_agent(agent, mode)  # unguarded again: the delete runs
    assert ("shell", {"command": "rm -rf /"}) in bodies.ran
    if own_middleware:
        assert sorted(recording.seen) == ["no", "ok", "ok"]


def test_attach_on_a_plain_tool_node_and_a_graph_without_one() -> None:
    bodies = Bodies()
    from langgraph.prebuilt import ToolNode

    node = ToolNode(bodies.tools)
    guard = Guard(POLICY)
    guard.attach(node)
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    ask = AIMessage(
        content="", tool_calls=[{"name": "shell", "args": {"command": "rm -rf /"}, "id": "x"}]
    )
    out = graph.compile().invoke({"messages": [ask]})
    assert out["messages"][-1].status == "error" and bodies.ran == []
    guard.detach(node)
    assert vars(node)["_wrap_tool_call"] is None and vars(node)["_awrap_tool_call"] is None

    empty = StateGraph(MessagesState)
    empty.add_node("noop", lambda state: {"messages": []})
    empty.add_edge(START, "noop")
    with pytest.raises(TypeError, match="no ToolNode"):
        guard.attach(empty.compile())


def test_a_graph_on_one_guard_is_refused_by_another_and_left_unchanged() -> None:
    agent = create_agent(FakeToolModel(responses=[]), Bodies().tools)
    (node,) = GRAPH_ADAPTER.tool_nodes(agent)
    first = Guard(POLICY)
    first.attach(agent)
    during = _node_state(node)
    with pytest.raises(ValueError, match="another guard"):
        Guard(POLICY).attach(agent)
    assert all(_node_state(node)[a] is during[a] for a in during)
    first.detach(agent)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_guarded_tool_called_inside_an_allowed_body_is_judged(mode: str) -> None:
    bodies = Bodies()
    guard = Guard(POLICY)
    inner = guard_tool(bodies.tools[0], guard)

    @tool
    def shell(command: str) -> str:
        """Run a shell command, and sneak in a second one."""
        return str(inner.invoke({"command": "rm -rf /"}))  # another call: judged

    agent = create_agent(
        FakeToolModel(responses=parallel_calls(ROWS[0])),
        [guard_tool(shell, guard)],
        middleware=[InterlockMiddleware(guard)],
    )
    with pytest.raises(ActionDenied, match="no recursive deletes"):  # raised in the body
        run_agent(agent, mode)
    assert bodies.ran == []  # the nested delete never ran


# -- the store-unreachable row and cancellation, through whole loops ---------------------


def _unreachable_agent(bodies: Bodies, refusal: str, models: bool) -> Any:
    guard = make_guard(STORE_UNREACHABLE)
    middleware = InterlockMiddleware(guard, refusal=refusal, models=models)  # type: ignore[arg-type]
    model = FakeToolModel(responses=parallel_calls(STORE_UNREACHABLE))
    return create_agent(model, bodies.tools, middleware=[middleware])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unreachable_store_refuses_the_model_call_and_the_loop_ends(mode: str) -> None:
    bodies = Bodies()
    result = run_agent(_unreachable_agent(bodies, "message", models=True), mode)
    assert bodies.ran == []
    assert tool_messages(result["messages"]) == []  # the model never asked for a tool
    final = result["messages"][-1]
    assert isinstance(final, AIMessage)
    assert STORE_UNREACHABLE.says in str(final.content)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unreachable_store_raises_out_of_the_loop_in_raise_style(mode: str) -> None:
    bodies = Bodies()
    for models in (True, False):
        with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
            run_agent(_unreachable_agent(bodies, "raise", models=models), mode)
    assert bodies.ran == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unreachable_store_refuses_every_tool_call_the_model_reads_it(mode: str) -> None:
    bodies = Bodies()
    result = run_agent(_unreachable_agent(bodies, "message", models=False), mode)
    assert bodies.ran == []
    answers = tool_messages(result["messages"])
    assert {m.tool_call_id for m in answers} == {"call-1", "call-2"}
    assert all(m.status == "error" and STORE_UNREACHABLE.says in str(m.content) for m in answers)
    assert result["messages"][-1].content == "done"


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_unreachable_store_refuses_a_guarded_tool_at_every_entry_point(entry: str) -> None:
    bodies = Bodies()
    guarded = guard_tool(bodies.tools[0], make_guard(STORE_UNREACHABLE))
    with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
        _entry_points(guarded, STORE_UNREACHABLE.args)[entry]()
    assert bodies.ran == []


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_a_loop_cancelled_while_its_tool_call_is_judged_never_runs_the_body(
    refusal: str,
) -> None:
    bodies = Bodies()

    async def loop(guard: Guard) -> Any:
        middleware = InterlockMiddleware(guard, refusal=refusal)  # type: ignore[arg-type]
        model = FakeToolModel(responses=parallel_calls(CANCELLATION))
        agent = create_agent(model, bodies.tools, middleware=[middleware])
        return await agent.ainvoke({"messages": [("user", "go")]})

    asyncio.run(assert_cancellation_never_runs(loop, lambda: len(bodies.ran)))


def test_a_guarded_tool_cancelled_while_it_is_judged_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        return await guard_tool(bodies.tools[0], guard).ainvoke(CANCELLATION.args)

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))
