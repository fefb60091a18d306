"""``on_approval="review"``: one approval, not two. A call that needs a human raises the
interrupt LangChain's own ``HumanInTheLoopMiddleware`` raises; the reviewer's decision
on resume decides the Interlock approval. Real ``create_agent`` loops, a scripted
model, ``InMemorySaver``."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from interlock import ApprovalRequired, Context, Guard, load_policy_text
from interlock.adapters.langchain import InterlockMiddleware, resume_after_approval

from .test_langchain import FakeToolModel

POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
  - id: small-wires
    decision: allow
    reason: small wires are fine
    name: wire
    when: "args.amount <= 10"
  - id: wires-need-a-human
    decision: require_approval
    reason: wires need a human
    name: wire
    when: "args.amount > 10"
  - id: no-huge-wires
    decision: deny
    reason: no wire over 1000
    name: wire
    when: "args.amount > 1000"
"""


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[Guard]:
    with Guard(
        load_policy_text(POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


class Loop:
    """One agent on one thread: a scripted model asking for ``wire`` calls, a
    checkpointer, the bodies that ran."""

    def __init__(
        self, guard: Guard, *turns: list[float], mode: str = "sync", **options: Any
    ) -> None:
        self.ran: list[float] = []
        self.mode = mode
        self.guard = guard
        ran = self.ran

        @tool
        def wire(amount: float) -> str:
            """Wire money."""
            ran.append(amount)
            return f"wired {amount}"

        script: list[BaseMessage] = [
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "wire", "args": {"amount": a}, "id": f"w{t}-{i}"}
                    for i, a in enumerate(amounts)
                ],
            )
            for t, amounts in enumerate(turns)
        ]
        script.append(AIMessage("done"))
        self.agent = create_agent(
            FakeToolModel(responses=script),
            [wire],
            middleware=[InterlockMiddleware(guard, on_approval="review", **options)],
            checkpointer=InMemorySaver(),
        )
        self.config: Any = {"configurable": {"thread_id": "t1"}}

    def invoke(self, value: Any, config: Any = None) -> dict[str, Any]:
        config = config or self.config
        if self.mode == "async":
            return asyncio.run(self.agent.ainvoke(value, config))  # type: ignore[no-any-return]
        return self.agent.invoke(value, config)  # type: ignore[no-any-return]

    def start(self) -> dict[str, Any]:
        return self.invoke({"messages": [("user", "pay the invoices")]})

    def resume(self, *decisions: dict[str, Any]) -> dict[str, Any]:
        return self.invoke(Command(resume={"decisions": list(decisions)}))

    def approvals(self) -> list[Any]:
        assert self.guard.store is not None
        return list(reversed(self.guard.store.list_approvals()))  # oldest first


def answers(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_the_interrupt_is_the_one_human_in_the_loop_raises(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode)
    paused = loop.start()
    (pending,) = paused["__interrupt__"]
    value = pending.value
    (request,) = value["action_requests"]
    assert (request["name"], request["args"]) == ("wire", {"amount": 500})
    assert value["review_configs"] == [
        {"action_name": "wire", "allowed_decisions": ["approve", "edit", "reject", "respond"]}
    ]
    description = request["description"]
    assert description.startswith("Tool execution requires approval\n\nTool: wire")
    assert "wires need a human" in description and "https://approvals.example.com/a/" in description
    (approval,) = loop.approvals()
    assert value["interlock"]["approval_id"] == approval.id
    assert approval.status.value == "pending"
    assert loop.ran == []


@pytest.mark.parametrize("mode", MODES)
def test_approve_decides_the_interlock_approval_and_runs_the_call_once(
    guard: Guard, mode: str
) -> None:
    loop = Loop(guard, [500], mode=mode)
    loop.start()
    done = loop.resume({"type": "approve"})
    assert loop.ran == [500]
    (answer,) = answers(done)
    assert (answer.status, answer.content) == ("success", "wired 500.0")
    assert done["messages"][-1].content == "done"
    (approval,) = loop.approvals()
    assert approval.status.value == "claimed"  # approved, then used once
    assert approval.decided_by == "langgraph-reviewer"
    assert "thread 't1'" in (approval.decision_reason or "")
    # resuming again, or replaying the thread, cannot run it twice
    loop.resume({"type": "approve"})
    assert loop.ran == [500]


@pytest.mark.parametrize("mode", MODES)
def test_per_call_mode_answers_by_interrupt_id(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode, interrupt_mode="per_call")
    (pending,) = loop.start()["__interrupt__"]
    assert pending.value["type"] == "tool_approval"
    assert (pending.value["name"], pending.value["args"]) == ("wire", {"amount": 500})
    assert pending.value["tool_call_id"] == "w0-0"
    assert {b["properties"]["type"]["const"] for b in pending.response_schema["oneOf"]} == {
        "approve",
        "edit",
        "reject",
        "respond",
    }
    loop.invoke(Command(resume={pending.id: {"type": "approve"}}))
    assert loop.ran == [500]


@pytest.mark.parametrize("mode", MODES)
def test_reject_denies_the_approval_and_the_model_reads_why(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode)
    loop.start()
    done = loop.resume({"type": "reject", "message": "not this month"})
    assert loop.ran == []
    (answer,) = answers(done)
    assert answer.status == "error"
    assert answer.content == "User rejected the tool call for `wire` with reason: not this month"
    (approval,) = loop.approvals()
    assert approval.status.value == "denied"
    assert approval.decided_by == "langgraph-reviewer"
    assert "not this month" in (approval.decision_reason or "")


def test_respond_denies_the_approval_and_the_model_reads_the_answer(guard: Guard) -> None:
    loop = Loop(guard, [500])
    loop.start()
    done = loop.resume({"type": "respond", "message": "paid by hand already"})
    assert loop.ran == []
    (answer,) = answers(done)
    assert (answer.status, answer.content) == ("success", "paid by hand already")
    assert [a.status.value for a in loop.approvals()] == ["denied"]


@pytest.mark.parametrize("mode", MODES)
def test_an_edit_to_an_allowed_call_runs_only_the_edit(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode)
    loop.start()
    done = loop.resume({"type": "edit", "edited_action": {"name": "wire", "args": {"amount": 5}}})
    assert loop.ran == [5]  # the original never ran
    (answer,) = answers(done)
    assert "a human reviewer replaced this tool call" in str(answer.content)
    assert str(answer.content).endswith("wired 5.0")
    (original,) = loop.approvals()
    assert original.status.value == "denied"  # the replaced call cannot be approved later
    assert "replaced" in (original.decision_reason or "")


@pytest.mark.parametrize("mode", MODES)
def test_an_edit_to_a_denied_call_is_denied(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode)
    loop.start()
    edit = {"type": "edit", "edited_action": {"name": "wire", "args": {"amount": 5000}}}
    done = loop.resume(edit)
    assert loop.ran == []
    (answer,) = answers(done)
    assert answer.status == "error"
    assert "no wire over 1000" in str(answer.content)


@pytest.mark.parametrize("mode", MODES)
def test_an_edit_that_needs_approval_is_put_to_the_reviewer_again(guard: Guard, mode: str) -> None:
    loop = Loop(guard, [500], mode=mode)
    loop.start()
    edit = {"type": "edit", "edited_action": {"name": "wire", "args": {"amount": 600}}}
    again = loop.resume(edit)
    (pending,) = again["__interrupt__"]
    assert pending.value["action_requests"][0]["args"] == {"amount": 600}
    assert loop.ran == []
    done = loop.resume({"type": "approve"})
    assert loop.ran == [600]  # the edit, once; never the original
    assert answers(done)[0].status == "success"
    first, second = loop.approvals()
    assert (first.status.value, second.status.value) == ("denied", "claimed")


@pytest.mark.parametrize("mode", MODES)
def test_an_approval_decided_in_interlock_runs_on_a_resume_without_a_decision(
    guard: Guard, mode: str
) -> None:
    loop = Loop(guard, [500], mode=mode)
    paused = loop.start()
    approval_id = paused["__interrupt__"][0].value["interlock"]["approval_id"]
    assert guard.store is not None
    guard.store.approve(approval_id, by="supervisor", reason="checked in the web UI")
    loop.invoke(resume_after_approval())
    assert loop.ran == [500]
    (approval,) = loop.approvals()
    assert (approval.status.value, approval.decided_by) == ("claimed", "supervisor")


def test_a_denial_in_interlock_stands_over_a_later_approve(guard: Guard) -> None:
    loop = Loop(guard, [500])
    paused = loop.start()
    assert guard.store is not None
    guard.store.deny(paused["__interrupt__"][0].value["interlock"]["approval_id"], by="supervisor")
    done = loop.resume({"type": "approve"})
    assert loop.ran == []
    assert "denied by supervisor" in str(answers(done)[0].content)


def test_a_resume_without_a_decision_asks_again(guard: Guard) -> None:
    loop = Loop(guard, [500])
    loop.start()
    again = loop.invoke(resume_after_approval())
    assert len(again["__interrupt__"]) == 1
    assert loop.ran == []
    loop.resume({"type": "approve"})
    assert loop.ran == [500]


def test_replaying_the_thread_cannot_run_the_approved_call_twice(guard: Guard) -> None:
    loop = Loop(guard, [500])
    loop.start()
    loop.resume({"type": "approve"})
    assert loop.ran == [500]
    history = list(loop.agent.get_state_history(loop.config))
    before_tools = [s for s in history if s.next == ("tools",)]
    assert before_tools
    for snapshot in before_tools:
        replayed = loop.invoke(None, snapshot.config)
        assert loop.ran == [500]
        for message in answers(replayed):
            if message.tool_call_id == "w0-0" and message.status == "error":
                assert "requires approval" in str(message.content)


def test_a_decision_for_one_call_is_not_used_for_another(guard: Guard) -> None:
    loop = Loop(guard, [500, 700], mode="sync", interrupt_mode="per_call")
    paused = loop.start()
    by_amount = {i.value["args"]["amount"]: i for i in paused["__interrupt__"]}
    assert set(by_amount) == {500, 700}
    still = loop.invoke(Command(resume={by_amount[500].id: {"type": "approve"}}))
    assert loop.ran == [500]  # only the call the decision was for
    (left,) = still["__interrupt__"]
    assert left.value["args"] == {"amount": 700}
    statuses = {a.action["arguments"]["amount"]: a.status.value for a in loop.approvals()}
    assert statuses == {500: "claimed", 700: "pending"}


def test_a_later_call_is_never_approved_by_an_earlier_answer(guard: Guard) -> None:
    loop = Loop(guard, [500], [800])
    loop.start()
    second = loop.resume({"type": "approve"})
    assert loop.ran == [500]
    (pending,) = second["__interrupt__"]  # the next call asks anew
    assert pending.value["action_requests"][0]["args"] == {"amount": 800}
    loop.resume({"type": "reject"})
    assert loop.ran == [500]


@pytest.mark.parametrize("refusal", ["message", "raise"])
def test_an_answer_given_after_the_approval_lapsed_decides_nothing(
    tmp_path: Path, refusal: str
) -> None:
    brief = POLICY.replace("approvals:\n", "approvals:\n  ttl: 1\n")
    with Guard(
        load_policy_text(brief),
        store=f"sqlite:///{tmp_path / 'brief.db'}",
        context=Context(agent="bot"),
    ) as guard:
        loop = Loop(guard, [500], refusal=refusal)
        loop.start()
        time.sleep(1.1)  # the approval the reviewer was shown lapses
        if refusal == "raise":
            with pytest.raises(ApprovalRequired):
                loop.resume({"type": "approve"})
        else:
            done = loop.resume({"type": "approve"})
            (answer,) = answers(done)
            assert answer.status == "error"
            assert "requires approval" in str(answer.content)
        assert loop.ran == []
        lapsed, reopened = loop.approvals()
        # the answer was for the lapsed one: the new one was never shown, stays pending
        assert (lapsed.status.value, reopened.status.value) == ("expired", "pending")


def test_review_options_are_checked(guard: Guard) -> None:
    with pytest.raises(ValueError, match="interrupt_mode"):
        InterlockMiddleware(guard, on_approval="review", interrupt_mode="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed_decisions"):
        InterlockMiddleware(guard, on_approval="review", allowed_decisions=["shrug"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="needs a guard with a store"):
        InterlockMiddleware(Guard(load_policy_text(POLICY)), on_approval="review")


def test_a_decision_that_is_not_allowed_is_refused_and_decides_nothing(guard: Guard) -> None:
    loop = Loop(guard, [500], allowed_decisions=["approve", "reject"])
    loop.start()
    with pytest.raises(ValueError, match="not allowed"):
        loop.resume({"type": "edit", "edited_action": {"name": "wire", "args": {"amount": 5}}})
    assert loop.ran == []
    assert [a.status.value for a in loop.approvals()] == ["pending"]


def test_a_plain_langgraph_tool_node_reviews_the_same_way(guard: Guard) -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    from interlock.adapters.langchain import guarded_tool_node

    ran: list[float] = []

    @tool
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    graph = StateGraph(MessagesState)
    graph.add_node("tools", guarded_tool_node([wire], guard, on_approval="review"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "plain"}}
    ask = AIMessage(content="", tool_calls=[{"name": "wire", "args": {"amount": 50}, "id": "p1"}])
    paused = app.invoke({"messages": [ask]}, config)
    (pending,) = paused["__interrupt__"]
    assert pending.value["action_requests"][0]["args"] == {"amount": 50}
    done = app.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert ran == [50]
    assert answers(done)[0].content == "wired 50.0"
