"""The LlamaIndex adapter, driven through real workflow agents (``FunctionAgent``,
``ReActAgent``, ``AgentWorkflow``) with LlamaIndex's own ``MockFunctionCallingLLM``
scripted as the model: nothing of LlamaIndex is mocked."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from llama_index.core.agent.workflow import (
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from interlock import ActionDenied, ActionUndetermined, Decision, Guard, Verdict
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.llama_index import (
    ADAPTER,
    AGENT_ADAPTER,
    LLM_ADAPTER,
    estimate_usage,
    guard_agent,
    unguard_agent,
)

from .conformance import (
    POLICY,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    assert_cancellation_never_runs,
    make_guard,
)

# -- a scripted model: real workflow agents, nothing behind them ----------------------


def calls(*asked: tuple[str, dict[str, Any]]) -> ChatMessage:
    """One model turn asking for ``asked`` at once (ids ``call-1``, ``call-2``, ...)."""
    blocks = [
        ToolCallBlock(tool_call_id=f"call-{i}", tool_name=name, tool_kwargs=args)
        for i, (name, args) in enumerate(asked, 1)
    ]
    return ChatMessage(role="assistant", blocks=blocks)


def answer(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


class ScriptedLLM(MockFunctionCallingLLM):
    """Answers each call with the next scripted turn, reporting ``tokens`` as the
    OpenAI integration does (``additional_kwargs``)."""

    def __init__(self, turns: list[ChatMessage], tokens: tuple[int, int] = (0, 0)) -> None:
        super().__init__()
        script = list(turns)
        self._response_generator = lambda messages, **kw: script.pop(0)
        self._tokens = tokens  # type: ignore[misc]

    def _report(self, response: ChatResponse) -> ChatResponse:
        tokens_in, tokens_out = self._tokens
        response.additional_kwargs.update(prompt_tokens=tokens_in, completion_tokens=tokens_out)
        return response

    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return self._report(super().chat(messages, **kwargs))

    def stream_chat(self, messages: Any, **kwargs: Any) -> Any:
        return (self._report(chunk) for chunk in super().stream_chat(messages, **kwargs))

    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        chunks = await super().astream_chat(messages, **kwargs)

        async def reported() -> Any:
            async for chunk in chunks:
                yield self._report(chunk)

        return reported()


class Bodies:
    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        bodies = self

        def shell(command: str) -> str:
            """Run a shell command."""
            bodies._record("shell", command)
            return f"ran {command}"

        async def pay(amount: float | str) -> str:
            """Pay an amount."""
            bodies._record("pay", amount)
            return f"paid {amount}"

        self.shell = FunctionTool.from_defaults(shell)
        self.pay = FunctionTool.from_defaults(async_fn=pay)
        self.tools = [self.shell, self.pay]

    def _record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))


def run(agent: Any) -> tuple[Any, dict[str, tuple[str, bool]]]:
    """Run ``agent``; its final output and what each tool call gave the model."""

    async def go() -> tuple[Any, dict[str, tuple[str, bool]]]:
        handler = agent.run("go")
        results: dict[str, tuple[str, bool]] = {}
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):
                results[event.tool_id] = (
                    str(event.tool_output.content),
                    event.tool_output.is_error,
                )
        return await handler, results

    return asyncio.run(asyncio.wait_for(go(), 20))


def agent_for(row: Row, bodies: Bodies, refusal: str, streaming: bool) -> FunctionAgent:
    llm = ScriptedLLM([calls((row.tool, row.args), (row.tool, row.args)), answer("done")])
    agent = FunctionAgent(tools=bodies.tools, llm=llm, streaming=streaming)
    return guard_agent(agent, make_guard(row), refusal=refusal, mapper=row.mapper)  # type: ignore[arg-type]


ids = [row.behaviour for row in ROWS]
STREAMING = [True, False]


@pytest.mark.parametrize(
    "streaming", STREAMING, ids=["astream_chat_with_tools", "achat_with_tools"]
)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, streaming: bool
) -> None:
    bodies = Bodies()
    output, results = run(agent_for(row, bodies, "message", streaming))
    assert set(results) == {"call-1", "call-2"}
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(
            not error and text.startswith(("ran", "paid")) for text, error in results.values()
        )
    else:
        assert bodies.ran == []
        assert all(error and row.says in text for text, error in results.values())
    assert str(output) == "done"


@pytest.mark.parametrize(
    "streaming", STREAMING, ids=["astream_chat_with_tools", "achat_with_tools"]
)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_leaves_agent_run(
    row: Row, streaming: bool
) -> None:
    bodies = Bodies()
    agent = agent_for(row, bodies, "raise", streaming)
    if row.error is None:
        output, _ = run(agent)
        assert str(output) == "done" and len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run(agent)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict


def test_a_react_agent_reads_the_refusal_and_has_no_raise_style() -> None:
    bodies = Bodies()
    react_turns = [
        answer('Thought: tidy\nAction: shell\nAction Input: {"command": "rm -rf /"}'),
        answer("Thought: refused\nAnswer: done"),
    ]
    agent = ReActAgent(tools=bodies.tools, llm=ScriptedLLM(react_turns))
    guard_agent(agent, Guard(POLICY))
    output, results = run(agent)
    assert bodies.ran == [] and str(output) == "done"
    ((text, error),) = results.values()
    assert error and "no recursive deletes" in text
    with pytest.raises(ValueError, match="ReActAgent"):
        guard_agent(
            ReActAgent(tools=Bodies().tools, llm=ScriptedLLM([])), Guard(POLICY), refusal="raise"
        )


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_an_agent_workflow_guards_every_agent(refusal: str) -> None:
    bodies = Bodies()
    llm = ScriptedLLM([calls(("shell", {"command": "rm -rf /"})), answer("done")])
    agent = FunctionAgent(name="ops", description="ops", tools=bodies.tools, llm=llm)
    workflow = guard_agent(AgentWorkflow(agents=[agent]), Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
    if refusal == "message":
        _, results = run(workflow)
        assert all(error for _, error in results.values())
    else:
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            run(workflow)
    assert bodies.ran == []
    unguard_agent(workflow)
    assert Guard(POLICY).coverage(bodies.shell).unguarded == ["shell"]


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_each_call_is_judged_once(refusal: str) -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    llm = ScriptedLLM([calls(("shell", {"command": "ls"})), answer("done")])
    run(guard_agent(FunctionAgent(tools=bodies.tools, llm=llm), guard, refusal=refusal))  # type: ignore[arg-type]
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_a_plain_function_the_agent_wraps_is_guarded_too() -> None:
    ran: list[str] = []

    def loose(command: str) -> str:
        """Loose."""
        ran.append(command)
        return command

    llm = ScriptedLLM([calls(("loose", {"command": "x"})), answer("done")])
    agent = guard_agent(FunctionAgent(tools=[loose], llm=llm), Guard(POLICY))
    _, results = run(agent)  # the policy knows no 'loose': default deny
    assert ran == [] and all(error for _, error in results.values())


# -- the store went away; cancellation -----------------------------------------------------


def test_an_unreachable_store_refuses_tool_and_model_calls_in_a_whole_loop() -> None:
    row = STORE_UNREACHABLE
    bodies = Bodies()
    _, results = run(agent_for(row, bodies, "message", True))
    assert bodies.ran == []
    assert all(error and row.says in text for text, error in results.values())
    guard = make_guard(row)
    llm = ScriptedLLM([calls(("shell", {"command": "ls"})), answer("done")])
    guard.attach(llm)
    bodies = Bodies()
    with pytest.raises(ActionUndetermined, match=row.says):
        run(guard_agent(FunctionAgent(tools=bodies.tools, llm=llm), guard))
    assert bodies.ran == []


def test_a_cancelled_agent_run_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        llm = ScriptedLLM([calls(("pay", {"amount": 5})), answer("done")])
        return await guard_agent(FunctionAgent(tools=bodies.tools, llm=llm), guard).run("go")

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


def test_a_cancelled_acall_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        guard.attach(bodies.pay)
        try:
            return await bodies.pay.acall(amount=5)
        finally:
            guard.detach(bodies.pay)

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


# -- every public door of a guarded tool is judged ------------------------------------------


def _entry_points(bodies: Bodies, guard: Guard, command: str) -> dict[str, Callable[[], Any]]:
    shell, pay = bodies.shell, bodies.pay
    guard.attach(shell)
    guard.attach(pay)
    amount = 5 if command == "ls" else "lots"  # pay: allowed, or undetermined

    def agent_run() -> Any:
        llm = ScriptedLLM([calls(("shell", {"command": command})), answer("done")])
        _, results = run(FunctionAgent(tools=[shell], llm=llm))
        ((text, error),) = results.values()
        if error:
            raise ActionDenied(text, decision=Decision(verdict=Verdict.DENY, reason=text))

    return {
        "__call__": lambda: shell(command=command),
        "__call__ (positional)": lambda: shell(command),
        "call": lambda: shell.call(command=command),
        "acall": lambda: asyncio.run(shell.acall(command=command)),
        "fn": lambda: shell.fn(command),
        "async_fn": lambda: asyncio.run(shell.async_fn(command=command)),
        "real_fn": lambda: shell.real_fn(command),
        "async tool: call": lambda: pay.call(amount=amount),
        "async tool: real_fn": lambda: asyncio.run(pay.real_fn(amount)),
        "FunctionAgent.run": agent_run,
    }


ENTRY_POINTS = list(_entry_points(Bodies(), Guard(POLICY), "ls"))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_refusal_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(POLICY), "rm -rf /")[entry]
    expected = ActionUndetermined if entry.startswith("async tool") else ActionDenied
    with pytest.raises(expected):
        call()
    assert bodies.ran == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, "ls")[entry]()
    assert len(bodies.ran) == 1
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


# -- attach / detach, version range, coverage --------------------------------------------


def test_attaching_a_tool_and_an_llm_then_detaching_restores_them_exactly() -> None:
    bodies = Bodies()
    llm = ScriptedLLM([])
    guard = Guard(POLICY)
    before_tool, before_llm = dict(vars(bodies.shell)), dict(vars(llm))
    guard.attach(bodies.shell)
    guard.attach(llm)
    guard.attach(bodies.shell)
    with pytest.raises(ActionDenied):
        bodies.shell(command="rm -rf /")
    guard.detach(bodies.shell)
    guard.detach(llm)
    assert vars(bodies.shell) == before_tool
    assert {k: id(v) for k, v in vars(llm).items()} == {k: id(v) for k, v in before_llm.items()}
    bodies.shell(command="rm -rf /")
    assert bodies.ran == [("shell", "rm -rf /")]


def test_guard_agent_then_unguard_agent_restores_tools_and_model() -> None:
    bodies = Bodies()
    llm = ScriptedLLM([])
    agent = FunctionAgent(tools=bodies.tools, llm=llm)
    before = [dict(vars(t)) for t in bodies.tools], {k: id(v) for k, v in vars(llm).items()}
    guard_agent(agent, Guard(POLICY), refusal="raise")
    assert "astream_chat_with_tools" in vars(llm)
    unguard_agent(agent)
    assert [dict(vars(t)) for t in bodies.tools] == before[0]
    assert {k: id(v) for k, v in vars(llm).items()} == before[1]


def test_attaching_to_a_second_guard_is_refused() -> None:
    bodies = Bodies()
    Guard(POLICY).attach(bodies.shell)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(bodies.shell)
    finally:
        ADAPTER.detach(bodies.shell)


def test_adapter_for_finds_the_tool_and_the_llm_adapters() -> None:
    assert base.adapter_for(Bodies().shell) is ADAPTER
    assert base.adapter_for(ScriptedLLM([])) is LLM_ADAPTER


@pytest.mark.parametrize("version", ["0.13.6", "0.15.0", "1.0.0"])
def test_a_llama_index_outside_the_supported_range_is_refused(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda name: version)
    for adapter in (ADAPTER, LLM_ADAPTER):
        with pytest.raises(
            ImportError, match=r"llama-index-core>=0\.14,<0\.15.*interlock\[llama-index\]"
        ):
            type(adapter)()


def test_coverage_follows_the_tool_and_the_model() -> None:
    guard = Guard(POLICY)
    bodies = Bodies()
    llm = ScriptedLLM([])
    assert guard.coverage(bodies.shell).unguarded == ["shell"]
    assert guard.coverage(llm).unguarded == ["model:ScriptedLLM"]
    guard.attach(bodies.shell)
    guard.attach(llm)
    assert guard.coverage(bodies.shell).unguarded == []
    assert guard.coverage(llm).unguarded == []
    (binding,) = guard.coverage(bodies.shell).tools
    assert binding.schema is not None and "command" in binding.schema["properties"]


# -- budgets --------------------------------------------------------------------------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def _records(guard: Guard, kind: str) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == kind]


def _lookup() -> FunctionTool:
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        return "found"

    return FunctionTool.from_defaults(paid_lookup)


LOOKUP = ("paid_lookup", {"query": "q", "est_cost": 0.1})


@pytest.mark.parametrize("streaming", STREAMING, ids=["astream_chat", "achat"])
def test_every_model_call_commits_the_usage_it_reported_exactly_once(
    stateful_guard: Guard, streaming: bool
) -> None:
    llm = ScriptedLLM([calls(LOOKUP), answer("done")], tokens=(120, 30))
    stateful_guard.attach(llm)
    agent = guard_agent(
        FunctionAgent(tools=[_lookup()], llm=llm, streaming=streaming), stateful_guard
    )
    output, _ = run(agent)
    assert str(output) == "done"
    assert _budget(stateful_guard, "model-tokens") == (2 * 150, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow", "allow"]
    assert _budget(stateful_guard, "tool-spend") == (100_000, 0)


def test_the_sync_model_calls_are_budgeted_too(stateful_guard: Guard) -> None:
    llm = ScriptedLLM([answer("one"), answer("two")], tokens=(10, 2))
    stateful_guard.attach(llm)
    assert str(llm.chat([ChatMessage(role="user", content="hi")]).message.content) == "one"
    chunks = list(llm.stream_chat([ChatMessage(role="user", content="hi")]))
    assert chunks[-1].message.content == "two"
    assert _budget(stateful_guard, "model-tokens") == (24, 0)


@pytest.mark.parametrize("streaming", STREAMING, ids=["astream_chat", "achat"])
def test_a_model_call_over_budget_never_reaches_the_model(
    stateful_guard: Guard, streaming: bool
) -> None:
    llm = ScriptedLLM([answer("never")])
    LLM_ADAPTER.attach(llm, stateful_guard)
    for attr in ("chat", "achat", "stream_chat", "astream_chat"):
        vars(llm)[attr].__interlock_gate__.estimate = lambda *_: Tokens(2000, 0)
    with pytest.raises(ActionDenied, match="model-tokens"):
        run(FunctionAgent(tools=[_lookup()], llm=llm, streaming=streaming))
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


class _Failing(ScriptedLLM):
    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        raise RuntimeError("provider down")

    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        async def chunks() -> Any:
            yield ChatResponse(message=answer("part"), delta="part")
            raise RuntimeError("provider down")

        return chunks()


@pytest.mark.parametrize("streaming", STREAMING, ids=["astream_chat", "achat"])
def test_a_model_that_raises_releases_its_reservation(
    stateful_guard: Guard, streaming: bool
) -> None:
    llm = _Failing([])
    stateful_guard.attach(llm)
    with pytest.raises(RuntimeError, match="provider down"):
        run(FunctionAgent(tools=[_lookup()], llm=llm, streaming=streaming))
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


def test_the_default_estimate_counts_the_messages_and_the_output_ceiling() -> None:
    message = ChatMessage(role="user", content="a" * 40)
    chars = len(json.dumps([message.model_dump(mode="json")]))
    assert estimate_usage([message], {"max_tokens": 50}) == Tokens(-(-chars // 4), 50)


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    ran: list[float] = []

    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return "wired"

    llm = ScriptedLLM([calls(("wire", {"amount": 5})), answer("done")])
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(wire)], llm=llm)
    _, results = run(guard_agent(agent, stateful_guard))
    assert "https://approvals.example.com/a/" in results["call-1"][0]
    assert ran == []


# -- approvals: Interlock's approval bridged to the workflow's human-in-the-loop events ----


@pytest.mark.parametrize("response", ["approve", "no"])
def test_a_call_that_needs_a_human_pauses_the_workflow_until_one_answers(
    stateful_guard: Guard, response: str
) -> None:
    from workflows.events import HumanResponseEvent

    from interlock.adapters.llama_index import ApprovalRequested

    ran: list[float] = []

    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    llm = ScriptedLLM([calls(("wire", {"amount": 5})), answer("done")])
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(wire)], llm=llm)
    guard_agent(agent, stateful_guard, approve_in_workflow=True, approval_timeout=20)

    async def go() -> tuple[Any, list[Any], dict[str, tuple[str, bool]]]:
        handler = agent.run("pay")
        asked: list[Any] = []
        results: dict[str, tuple[str, bool]] = {}
        async for event in handler.stream_events():
            if isinstance(event, ApprovalRequested):
                asked.append(event)
                handler.ctx.send_event(  # type: ignore[union-attr]
                    HumanResponseEvent(
                        response=response, approval_id=event.approval_id, user="alice"
                    )
                )
            elif isinstance(event, ToolCallResult):
                results[event.tool_id] = (
                    str(event.tool_output.content),
                    event.tool_output.is_error,
                )
        return await handler, asked, results

    output, asked, results = asyncio.run(asyncio.wait_for(go(), 30))
    assert str(output) == "done"
    assert [(e.tool_name, e.tool_kwargs) for e in asked] == [("wire", {"amount": 5})]
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    if response == "approve":
        assert ran == [5] and results["call-1"] == ("wired 5", False)
        assert approval.status.value == "claimed"
    else:
        assert ran == [] and results["call-1"][1] and "denied" in results["call-1"][0]


def test_approving_in_the_workflow_needs_a_store() -> None:
    agent = FunctionAgent(tools=Bodies().tools, llm=ScriptedLLM([]))
    with pytest.raises(ValueError, match="needs a guard with a store"):
        guard_agent(agent, Guard(POLICY), approve_in_workflow=True)


@pytest.mark.parametrize(
    "streaming", [False, True], ids=["chat_with_tools", "stream_chat_with_tools"]
)
def test_the_sync_tool_call_screen_refuses_before_any_tool_runs(streaming: bool) -> None:
    bodies = Bodies()
    llm = ScriptedLLM([calls(("shell", {"command": "rm -rf /"}))])
    guard_agent(FunctionAgent(tools=bodies.tools, llm=llm), Guard(POLICY), refusal="raise")
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        if streaming:
            list(llm.stream_chat_with_tools(bodies.tools, user_msg="go"))
        else:
            llm.chat_with_tools(bodies.tools, user_msg="go")
    assert bodies.ran == []


def test_attaching_an_agent_guards_its_tools_and_coverage_names_the_model() -> None:
    guard = Guard(POLICY)
    bodies = Bodies()
    llm = ScriptedLLM([calls(("shell", {"command": "rm -rf /"})), answer("done")])
    agent = FunctionAgent(tools=bodies.tools, llm=llm)
    assert base.adapter_for(agent) is AGENT_ADAPTER
    assert guard.coverage(agent).unguarded == ["shell", "pay", "model:ScriptedLLM"]
    guard.attach(agent)
    guard.attach(agent)
    assert guard.coverage(agent).unguarded == ["model:ScriptedLLM"]
    guard.attach(llm)
    assert guard.coverage(agent).unguarded == []
    guard.detach(llm)  # the table's policy has no rule for models
    with pytest.raises(ValueError, match="another guard"):
        Guard(POLICY).attach(agent)
    _, results = run(agent)
    assert bodies.ran == [] and all(error for _, error in results.values())
    guard.detach(agent)
    assert guard.coverage(agent).unguarded == ["shell", "pay", "model:ScriptedLLM"]
