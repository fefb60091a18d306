"""The AutoGen adapter, driven through real ``AssistantAgent`` loops with a replayed
model (``ReplayChatCompletionClient``): nothing of AutoGen is mocked."""

from __future__ import annotations

import pytest

pytest.importorskip("autogen_agentchat")

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import HandoffMessage, ToolCallExecutionEvent
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
from autogen_core.tools import BaseStreamTool, FunctionTool, StaticStreamWorkbench, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient
from pydantic import BaseModel

from interlock import ActionDenied, ActionUndetermined, ApprovalRequired, Decision, Guard, Verdict
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.autogen import (
    ADAPTER,
    AGENT_ADAPTER,
    GuardedChatCompletionClient,
    GuardedWorkbench,
    estimate_usage,
    guard_agent,
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

INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family=ModelFamily.UNKNOWN,
    structured_output=False,
)


# -- a replayed model: real agent loops, nothing behind them ----------------------------


def calls(*asked: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (0, 0)) -> CreateResult:
    """One model turn asking for ``asked`` at once (ids ``call-1``, ``call-2``, ...)."""
    content = [
        FunctionCall(id=f"call-{i}", name=name, arguments=json.dumps(args))
        for i, (name, args) in enumerate(asked, 1)
    ]
    return CreateResult(
        finish_reason="function_calls", content=content, usage=RequestUsage(*tokens), cached=False
    )


def answer(text: str, tokens: tuple[int, int] = (0, 0)) -> CreateResult:
    return CreateResult(
        finish_reason="stop", content=text, usage=RequestUsage(*tokens), cached=False
    )


def replay(*turns: CreateResult) -> ReplayChatCompletionClient:
    return ReplayChatCompletionClient(list(turns), model_info=INFO)


class Bodies:
    """The tools of the table, recording every body that ran and on which thread."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.threads: set[int] = set()
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

        self.shell = FunctionTool(shell, description="Run a shell command.")
        self.pay = FunctionTool(pay, description="Pay an amount.")
        self.tools = [self.shell, self.pay]

    def _record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))
            self.threads.add(threading.get_ident())


def tool_results(result: Any) -> dict[str, tuple[str, bool]]:
    """What the model was handed back, by call id: (content, is_error)."""
    return {
        r.call_id: (r.content, r.is_error)
        for m in result.messages
        if isinstance(m, ToolCallExecutionEvent)
        for r in m.content
    }


def run(agent: AssistantAgent, mode: str = "run", **options: Any) -> Any:
    async def go() -> Any:
        if mode == "run":
            return await agent.run(task="go", **options)
        last = None
        async for item in agent.run_stream(task="go", **options):
            last = item
        return last

    return asyncio.run(asyncio.wait_for(go(), 20))  # a hang is a failure, not a stall


def agent_for(row: Row, bodies: Bodies, refusal: str, stream: bool = False) -> AssistantAgent:
    guard = make_guard(row)
    client = replay(calls((row.tool, row.args), (row.tool, row.args)), answer("done"))
    agent = AssistantAgent(
        "bot", client, tools=bodies.tools, reflect_on_tool_use=True, model_client_stream=stream
    )
    return guard_agent(agent, guard, refusal=refusal, mapper=row.mapper)  # type: ignore[arg-type]


ids = [row.behaviour for row in ROWS]
MODES = ["run", "run_stream"]


# -- the verdict table, both styles, run and run_stream, two parallel calls ------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, mode: str
) -> None:
    bodies = Bodies()
    result = run(agent_for(row, bodies, "message", stream=mode == "run_stream"), mode)
    outputs = tool_results(result)
    assert set(outputs) == {"call-1", "call-2"}
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(
            not error and text.startswith(("ran", "paid")) for text, error in outputs.values()
        )
    else:
        assert bodies.ran == []
        assert all(error and row.says in text for text, error in outputs.values())
    assert result.messages[-1].content == "done"  # the loop went on


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_leaves_agent_run(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent = agent_for(row, bodies, "raise", stream=mode == "run_stream")
    if row.error is None:
        assert run(agent, mode).messages[-1].content == "done"
        assert len(bodies.ran) == 2
        return
    with pytest.raises(row.error) as caught:
        run(agent, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_each_call_is_judged_once_in_either_style(refusal: str) -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    client = replay(calls(("shell", {"command": "ls"})), answer("done"))
    agent = AssistantAgent("bot", client, tools=[bodies.shell], reflect_on_tool_use=True)
    guard_agent(agent, guard, refusal=refusal)  # type: ignore[arg-type]
    ADAPTER.attach(bodies.shell, guard)  # the tool itself guarded too: still once
    run(agent)
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_an_error_from_a_tool_call_would_hang_the_agent_which_is_why_raise_is_screened() -> None:
    """AutoGen 0.7.5's AssistantAgent waits for an end-of-stream marker that a failed
    tool task never sends: a raise from the workbench hangs ``agent.run``. The adapter
    never raises there under an agent; this shows the boundary it works around."""
    bodies = Bodies()
    gate = GuardedWorkbench(StaticWorkbench([bodies.shell]), Guard(POLICY), refusal="raise")
    client = replay(calls(("shell", {"command": "rm -rf /"})), answer("done"))
    agent = AssistantAgent("bot", client, workbench=gate)

    async def go() -> Any:
        return await asyncio.wait_for(agent.run(task="go"), 0.5)

    with pytest.raises(TimeoutError):
        asyncio.run(go())
    assert bodies.ran == []


# -- the store went away: undetermined, through a whole loop ----------------------------


def test_an_unreachable_store_refuses_tool_calls_in_a_whole_loop() -> None:
    row = STORE_UNREACHABLE
    bodies = Bodies()
    result = run(agent_for(row, bodies, "message"))
    assert bodies.ran == []
    assert all(error and row.says in text for text, error in tool_results(result).values())
    with pytest.raises(ActionUndetermined, match=row.says):
        run(agent_for(row, bodies, "raise"))
    assert bodies.ran == []


@pytest.mark.parametrize("stream", [False, True])
def test_an_unreachable_store_refuses_the_model_call_before_the_model(stream: bool) -> None:
    guard = make_guard(STORE_UNREACHABLE)
    bodies = Bodies()
    inner = replay(calls(("shell", {"command": "ls"})), answer("done"))
    agent = AssistantAgent(
        "bot",
        GuardedChatCompletionClient(inner, guard),
        tools=[bodies.shell],
        model_client_stream=stream,
    )
    with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
        run(agent)
    assert inner.total_usage().prompt_tokens == 0  # the model was never asked
    assert bodies.ran == []


# -- cancellation ---------------------------------------------------------------------------


def test_an_asyncio_cancelled_agent_run_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        client = replay(calls(("shell", {"command": "ls"})), answer("done"))
        agent = guard_agent(AssistantAgent("bot", client, tools=[bodies.shell]), guard)
        return await agent.run(task="go")

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


def test_an_asyncio_cancelled_run_json_never_runs_the_body() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        guard.attach(bodies.shell)
        try:
            return await bodies.shell.run_json({"command": "ls"}, CancellationToken())
        finally:
            guard.detach(bodies.shell)

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


def test_a_cancelled_autogen_token_means_the_body_does_not_run() -> None:
    bodies = Bodies()
    guard = Guard(POLICY)
    guard.attach(bodies.shell)
    token = CancellationToken()
    token.cancel()
    with pytest.raises(ActionUndetermined, match="cancel"):
        asyncio.run(bodies.shell.run_json({"command": "ls"}, token))
    gate = GuardedWorkbench(StaticWorkbench([bodies.pay]), guard)
    result = asyncio.run(gate.call_tool("pay", {"amount": 5}, token))
    assert result.is_error and "cancel" in result.to_text()
    assert bodies.ran == []


def test_an_autogen_token_cancelled_while_judged_means_the_body_does_not_run() -> None:
    from .conformance import GateDecider

    bodies = Bodies()
    gate = GateDecider()
    guard = Guard(POLICY, decider=gate)
    token = CancellationToken()
    client = replay(calls(("shell", {"command": "ls"})), answer("done"))
    agent = guard_agent(AssistantAgent("bot", client, tools=[bodies.shell]), guard)

    async def go() -> Any:
        task = asyncio.ensure_future(agent.run(task="go", cancellation_token=token))
        while not gate.entered.is_set():
            await asyncio.sleep(0.005)
        token.cancel()
        gate.release()
        try:
            return await asyncio.wait_for(task, 10)
        except (asyncio.CancelledError, Exception):
            return None

    asyncio.run(go())
    assert bodies.ran == []


# -- every entry point of a guarded tool is judged --------------------------------------


def _entry_points(
    bodies: Bodies, guard: Guard, args: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    shell = bodies.shell
    guard.attach(shell)
    token = CancellationToken()

    def agent_run() -> Any:
        client = replay(calls(("shell", args)), answer("done"))
        result = run(AssistantAgent("bot", client, tools=[shell]))
        ((text, is_error),) = tool_results(result).values()
        if is_error:
            raise ActionDenied(text, decision=Decision(verdict=Verdict.DENY, reason=text))
        return result

    async def stream_workbench() -> Any:
        async for item in StaticStreamWorkbench([shell]).call_tool_stream("shell", args, token):
            last = item
        if last.is_error:
            raise ActionDenied(last.to_text(), decision=Decision(verdict=Verdict.DENY, reason=""))
        return last

    async def workbench() -> Any:
        result = await StaticWorkbench([shell]).call_tool("shell", args, token)
        if result.is_error:
            raise ActionDenied(result.to_text(), decision=Decision(verdict=Verdict.DENY, reason=""))
        return result

    return {
        "run_json": lambda: asyncio.run(shell.run_json(args, token, call_id="c1")),
        "run (validated args)": lambda: asyncio.run(shell.run(shell.args_type()(**args), token)),
        "StaticWorkbench.call_tool": lambda: asyncio.run(workbench()),
        "StaticStreamWorkbench.call_tool_stream": lambda: asyncio.run(stream_workbench()),
        "AssistantAgent.run": agent_run,
    }


ENTRY_POINTS = list(_entry_points(Bodies(), Guard(POLICY), {}))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_deny_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(POLICY), {"command": "rm -rf /"})[entry]
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        call()
    assert bodies.ran == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_the_wrapped_function_is_the_documented_boundary() -> None:
    """``FunctionTool._func`` is the user's own function: calling it is not a tool call,
    and no guard sees it (private, and the function was the caller's to begin with)."""
    bodies = Bodies()
    Guard(POLICY).attach(bodies.shell)
    assert bodies.shell._func("rm -rf /") == "ran rm -rf /"
    assert bodies.ran == [("shell", "rm -rf /")]


def test_a_guarded_tool_dumped_and_loaded_is_a_new_unguarded_tool() -> None:
    bodies = Bodies()
    guard = Guard(POLICY)
    guard.attach(bodies.pay)
    assert guard.coverage(bodies.pay).unguarded == []
    loaded = FunctionTool.load_component(bodies.pay.dump_component())
    assert guard.coverage(loaded).unguarded == ["pay"]


# -- handoffs: judged when the model asks, a refusal raises in either style -------------


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_a_refused_handoff_never_hands_off(refusal: str) -> None:
    bodies = Bodies()
    client = replay(calls(("transfer_to_payer", {})), answer("done"))
    agent = AssistantAgent("bot", client, tools=[bodies.shell], handoffs=["payer"])
    guard_agent(agent, Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
    with pytest.raises(ActionDenied):
        run(agent)


def test_an_allowed_handoff_hands_off() -> None:
    from interlock import load_policy_text

    policy = load_policy_text(
        "version: 1\ndefault: deny\nrules:\n  - id: ho\n    decision: allow\n"
        "    reason: ok\n    name: transfer_to_payer\n"
    )
    client = replay(calls(("transfer_to_payer", {})), answer("done"))
    agent = guard_agent(AssistantAgent("bot", client, handoffs=["payer"]), Guard(policy))
    result = run(agent)
    assert isinstance(result.messages[-1], HandoffMessage)
    assert result.messages[-1].target == "payer"


# -- attach / detach ------------------------------------------------------------------------


def test_attaching_an_agent_then_detaching_restores_it_exactly() -> None:
    bodies = Bodies()
    rm = calls(("shell", {"command": "rm -rf /"}))
    client = replay(rm, rm, answer("done"))
    agent = AssistantAgent("bot", client, tools=[bodies.shell])
    workbenches, model = agent._workbench, agent._model_client
    guard = Guard(POLICY)
    guard.attach(agent)  # raise style
    guard.attach(agent)
    with pytest.raises(ActionDenied):
        run(agent)
    assert bodies.ran == []
    guard.detach(agent)
    assert agent._workbench is workbenches and agent._model_client is model
    assert "_workbench" in vars(agent)
    run(agent)
    assert bodies.ran == [("shell", "rm -rf /")]


def test_attaching_to_a_second_guard_is_refused() -> None:
    bodies = Bodies()
    agent = AssistantAgent("bot", replay(), tools=[bodies.pay])
    Guard(POLICY).attach(agent)
    Guard(POLICY).attach(bodies.shell)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(agent)
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(bodies.shell)
    finally:
        AGENT_ADAPTER.detach(agent)
        ADAPTER.detach(bodies.shell)


def test_a_refusal_style_that_does_not_exist_is_refused() -> None:
    agent = AssistantAgent("bot", replay())
    with pytest.raises(ValueError, match="refusal must be"):
        guard_agent(agent, Guard(POLICY), refusal="later")  # type: ignore[arg-type]
    assert not AGENT_ADAPTER.is_attached(agent)
    with pytest.raises(ValueError, match="refusal must be"):
        GuardedWorkbench(StaticWorkbench([]), Guard(POLICY), refusal="later")  # type: ignore[arg-type]


def test_adapter_for_finds_the_tool_and_the_agent_adapters() -> None:
    assert base.adapter_for(Bodies().shell) is ADAPTER
    assert base.adapter_for(AssistantAgent("bot", replay())) is AGENT_ADAPTER


@pytest.mark.parametrize("version", ["0.7.4", "0.8.0", "1.0.0"])
def test_an_autogen_outside_the_supported_range_is_refused(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda name: version)
    with pytest.raises(
        ImportError, match=r"autogen-agentchat>=0\.7\.5,<0\.8.*interlock\[autogen\]"
    ):
        type(ADAPTER)()
    with pytest.raises(ImportError, match=r"interlock\[autogen\]"):
        type(AGENT_ADAPTER)()


# -- coverage ------------------------------------------------------------------------------


def test_coverage_names_tools_handoffs_and_the_model() -> None:
    guard = Guard(POLICY)
    bodies = Bodies()
    agent = AssistantAgent("bot", replay(), tools=bodies.tools, handoffs=["payer"])
    coverage = guard.coverage(agent)
    assert coverage.unguarded == [
        "shell",
        "pay",
        "transfer_to_payer",
        "model:ReplayChatCompletionClient",
    ]
    guard_agent(agent, guard)
    assert guard.coverage(agent).unguarded == ["model:ReplayChatCompletionClient"]
    guarded_model = AssistantAgent("bot", GuardedChatCompletionClient(replay(), guard, name="m"))
    assert guard.coverage(guarded_model).unguarded == []
    assert guard.coverage(guarded_model).llms[0].label == "m"


# -- state: budgets, approvals ----------------------------------------------------------------


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

    return FunctionTool(paid_lookup, description="Look something up, at a cost.")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "create_stream"])
def test_every_model_call_commits_the_usage_it_reported_exactly_once(
    stateful_guard: Guard, stream: bool
) -> None:
    inner = replay(
        calls(("paid_lookup", {"query": "q", "est_cost": 0.1}), tokens=(120, 30)),
        answer("done", (200, 5)),
    )
    agent = AssistantAgent(
        "bot",
        GuardedChatCompletionClient(inner, stateful_guard),
        tools=[_lookup()],
        reflect_on_tool_use=True,
        model_client_stream=stream,
    )
    guard_agent(agent, stateful_guard)
    result = run(agent)
    assert result.messages[-1].content == "done"
    # what each CreateResult reported, committed once per call
    assert _budget(stateful_guard, "model-tokens") == (120 + 30 + 200 + 5, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow", "allow"]
    assert _budget(stateful_guard, "tool-spend") == (100_000, 0)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "create_stream"])
def test_a_model_call_over_budget_never_reaches_the_model(
    stateful_guard: Guard, stream: bool
) -> None:
    inner = replay(answer("never"))
    client = GuardedChatCompletionClient(inner, stateful_guard, estimate=lambda *_: Tokens(2000, 0))
    with pytest.raises(ActionDenied, match="model-tokens"):
        run(AssistantAgent("bot", client, model_client_stream=stream))
    assert inner.total_usage().prompt_tokens == 0
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


class _Failing(ReplayChatCompletionClient):
    async def create(self, *args: Any, **kwargs: Any) -> CreateResult:
        raise RuntimeError("provider down")

    def create_stream(self, *args: Any, **kwargs: Any) -> Any:
        async def chunks() -> Any:
            yield "partial"
            raise RuntimeError("provider down")

        return chunks()


@pytest.mark.parametrize("stream", [False, True], ids=["create", "create_stream"])
def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard, stream: bool) -> None:
    client = GuardedChatCompletionClient(_Failing([], model_info=INFO), stateful_guard)
    with pytest.raises(RuntimeError, match="provider down"):
        run(AssistantAgent("bot", client, model_client_stream=stream))
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


def test_a_stream_abandoned_before_its_result_releases_and_one_after_commits(
    stateful_guard: Guard,
) -> None:
    async def consume(stop_at_result: bool) -> None:
        inner = ReplayChatCompletionClient(["a few words"], model_info=INFO)
        client = GuardedChatCompletionClient(inner, stateful_guard)
        stream = client.create_stream([])
        async for chunk in stream:
            if isinstance(chunk, CreateResult) == stop_at_result:
                break
        await stream.aclose()

    asyncio.run(consume(stop_at_result=False))
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    asyncio.run(consume(stop_at_result=True))
    spent, reserved = _budget(stateful_guard, "model-tokens")
    assert spent > 0 and reserved == 0  # the replayed model's own count of its stream


def test_the_default_estimate_counts_the_messages_and_the_output_ceiling() -> None:
    from autogen_core.models import UserMessage

    message = UserMessage(content="a" * 40, source="user")
    chars = len(json.dumps([message.model_dump()]))
    assert estimate_usage([message], {"max_tokens": 50}) == Tokens(-(-chars // 4), 50)
    assert estimate_usage([], {}) == Tokens(1, 0)


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_a_tool_reservation_commits_once_in_either_style(
    stateful_guard: Guard, refusal: str
) -> None:
    client = replay(calls(("paid_lookup", {"query": "a", "est_cost": 0.4})), answer("done"))
    agent = AssistantAgent("bot", client, tools=[_lookup()])
    run(guard_agent(agent, stateful_guard, refusal=refusal))  # type: ignore[arg-type]
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)
    assert len(_records(stateful_guard, "tool")) == 1
    assert [r.get("call_id") for r in _records(stateful_guard, "tool")] == ["call-1"]


def _wire(ran: list[float]) -> FunctionTool:
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    return FunctionTool(wire, description="Wire money.")


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    ran: list[float] = []
    client = replay(calls(("wire", {"amount": 5})), answer("done"))
    result = run(guard_agent(AssistantAgent("bot", client, tools=[_wire(ran)]), stateful_guard))
    assert "https://approvals.example.com/a/" in tool_results(result)["call-1"][0]
    client = replay(calls(("wire", {"amount": 5})), answer("done"))
    agent = AssistantAgent("bot", client, tools=[_wire(ran)])
    with pytest.raises(ApprovalRequired) as caught:
        run(guard_agent(agent, stateful_guard, refusal="raise"))
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")
    assert ran == []


@pytest.mark.parametrize("approve", [True, False])
def test_a_workbench_that_waits_runs_the_call_once_a_human_decides(
    stateful_guard: Guard, approve: bool
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard, approve=approve)
    gate = GuardedWorkbench(
        StaticWorkbench([_wire(ran)]), stateful_guard, on_approval="wait", approval_timeout=30
    )
    client = replay(calls(("wire", {"amount": 5})), answer("done"))
    result = run(AssistantAgent("bot", client, workbench=gate))
    supervisor.join()
    text, is_error = tool_results(result)["call-1"]
    if approve:
        assert (ran, text, is_error) == ([5.0], "wired 5.0", False)
    else:
        assert ran == [] and is_error and "denied" in text


@pytest.mark.parametrize("refusal", ["message", "raise"])
@pytest.mark.parametrize("mode", MODES)
def test_a_guarded_agent_that_waits_runs_the_call_once_a_human_approves(
    stateful_guard: Guard, refusal: str, mode: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard)
    client = replay(calls(("wire", {"amount": 5})), answer("done"))
    agent = AssistantAgent(
        "bot", client, tools=[_wire(ran)], model_client_stream=mode == "run_stream"
    )
    guard_agent(
        agent,
        stateful_guard,
        refusal=refusal,
        on_approval="wait",
        approval_timeout=30,  # type: ignore[arg-type]
    )
    result = run(agent, mode)
    supervisor.join()
    assert ran == [5.0]
    if mode == "run":
        assert tool_results(result)["call-1"] == ("wired 5.0", False)
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert approval.status.value == "claimed"
    assert len(_records(stateful_guard, "tool")) == 2  # asked, then claimed: no third


def test_on_approval_wait_needs_a_store() -> None:
    agent = AssistantAgent("bot", replay())
    with pytest.raises(ValueError, match="needs a guard with a store"):
        guard_agent(agent, Guard(POLICY), on_approval="wait")
    assert not AGENT_ADAPTER.is_attached(agent)
    with pytest.raises(ValueError, match="needs a guard with a store"):
        GuardedWorkbench(StaticWorkbench([]), Guard(POLICY), on_approval="wait")


# -- a stream tool: run_json_stream is a door too ------------------------------------------


class _Command(BaseModel):
    command: str


class _Output(BaseModel):
    text: str


class _StreamingShell(BaseStreamTool[_Command, _Output, _Output]):
    def __init__(self) -> None:
        super().__init__(_Command, _Output, "shell", "Run a shell command, streaming.")
        self.ran: list[str] = []

    async def run(self, args: _Command, cancellation_token: CancellationToken) -> _Output:
        self.ran.append(args.command)
        return _Output(text=f"ran {args.command}")

    async def run_stream(self, args: _Command, cancellation_token: CancellationToken) -> Any:
        self.ran.append(args.command)
        yield _Output(text="working")
        yield _Output(text=f"ran {args.command}")


@pytest.mark.parametrize(("command", "runs"), [("ls", True), ("rm -rf /", False)])
def test_a_stream_tool_is_judged_once_on_its_stream_door(command: str, runs: bool) -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    tool = _StreamingShell()
    guard.attach(tool)

    async def go() -> list[Any]:
        bench = StaticStreamWorkbench([tool])
        return [
            item
            async for item in bench.call_tool_stream(
                "shell", {"command": command}, CancellationToken()
            )
        ]

    items = asyncio.run(go())
    assert tool.ran == ([command] if runs else [])
    assert items[-1].is_error is (not runs)
    assert len(seen) == 1
    guard.detach(tool)
    assert "run_json_stream" not in vars(tool)
