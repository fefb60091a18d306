"""``on_approval="interrupt"``: Interlock approvals and the SDK's run-state
interruptions, bridged both ways. Real ``Runner`` loops, a scripted model, a SQLite
store."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agents import Agent, Runner, RunState, function_tool
from agents.items import ToolApprovalItem

from interlock import ActionDenied, Blocked, Context, Guard, load_policy_text
from interlock.adapters.openai_agents import apply_interlock_decisions, guard_tools, reject

from .test_openai_agents import ScriptedModel, answer, final_input_outputs, tool_calls

POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
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
"""


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[Guard]:
    with Guard(
        load_policy_text(POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


class Run:
    """One agent whose scripted model asks for ``wire`` calls, turn by turn."""

    def __init__(self, guard: Guard, *turns: float, refusal: str = "message") -> None:
        self.guard = guard
        self.ran: list[float] = []
        ran = self.ran

        @function_tool
        def wire(amount: float) -> str:
            """Wire money."""
            ran.append(amount)
            return f"wired {amount}"

        script = [tool_calls(("wire", {"amount": a})) for a in turns] + [answer("done")]
        for turn, response in enumerate(script[:-1]):  # a call id per turn
            response.output[0].call_id = f"call-{turn + 1}"
        self.model = ScriptedModel(script)
        tools = guard_tools([wire], guard, refusal=refusal, on_approval="interrupt")  # type: ignore[arg-type]
        self.agent = Agent(name="bot", model=self.model, tools=tools)

    def run(self, start: Any, mode: str = "async") -> Any:
        if mode == "sync":
            return Runner.run_sync(self.agent, start)
        if mode == "async":
            return asyncio.run(Runner.run(self.agent, start))

        async def streamed() -> Any:
            result = Runner.run_streamed(self.agent, start)
            async for _ in result.stream_events():
                pass
            return result

        return asyncio.run(streamed())

    def approvals(self) -> list[Any]:
        assert self.guard.store is not None
        return list(reversed(self.guard.store.list_approvals()))


MODES = ["sync", "async", "streamed"]
STYLES = ["message", "raise"]


@pytest.mark.parametrize("mode", MODES)
def test_a_call_awaiting_approval_interrupts_the_run_with_the_sdks_item(
    guard: Guard, mode: str
) -> None:
    run = Run(guard, 500)
    result = run.run("pay", mode)
    assert result.final_output is None
    (item,) = result.interruptions
    assert isinstance(item, ToolApprovalItem)
    assert (item.tool_name, json.loads(item.arguments)) == ("wire", {"amount": 500})
    assert run.ran == []
    assert [a.status.value for a in run.approvals()] == ["pending"]


@pytest.mark.parametrize("refusal", STYLES)
@pytest.mark.parametrize("mode", MODES)
def test_approving_the_item_approves_in_interlock_and_runs_the_call_once(
    guard: Guard, mode: str, refusal: str
) -> None:
    run = Run(guard, 500, refusal=refusal)
    result = run.run("pay", mode)
    state = result.to_state()
    state.approve(result.interruptions[0])
    done = run.run(state, mode)
    assert done.final_output == "done"
    assert run.ran == [500]
    (approval,) = run.approvals()
    assert (approval.status.value, approval.decided_by) == ("claimed", "openai-agents-run-state")
    # running the approved state again cannot run it twice
    run.model.turns = [answer("done")]
    with contextlib.suppress(Blocked):
        run.run(state, mode)
    assert run.ran == [500]


def test_a_saved_state_resumed_twice_runs_the_call_once(guard: Guard) -> None:
    run = Run(guard, 500)
    result = run.run("pay")
    state = result.to_state()
    state.approve(result.interruptions[0])
    saved = state.to_string()  # approved, not yet resumed: the replay a thief would try
    assert run.run(state).final_output == "done"
    assert run.ran == [500]
    run.model.turns = [answer("done")]
    replay = asyncio.run(RunState.from_string(run.agent, saved))
    run.run(replay)
    assert run.ran == [500]  # the grant was used: the replay opened a new approval
    assert "requires approval" in final_input_outputs(run.model)["call-1"]
    assert [a.status.value for a in run.approvals()] == ["claimed", "pending"]


@pytest.mark.parametrize("mode", MODES)
def test_the_run_state_round_trip_keeps_the_binding(guard: Guard, mode: str) -> None:
    run = Run(guard, 500)
    result = run.run("pay", mode)
    saved = result.to_state().to_string()
    state = asyncio.run(RunState.from_string(run.agent, saved))
    (item,) = state.get_interruptions()
    state.approve(item)
    assert run.run(state, mode).final_output == "done"
    assert run.ran == [500]
    assert [a.status.value for a in run.approvals()] == ["claimed"]


@pytest.mark.parametrize("mode", MODES)
def test_rejecting_denies_in_interlock_and_never_runs(guard: Guard, mode: str) -> None:
    run = Run(guard, 500)
    result = run.run("pay", mode)
    state = result.to_state()
    reject(state, result.interruptions[0], guard, rejection_message="not this month")
    done = run.run(state, mode)
    assert run.ran == []
    assert final_input_outputs(run.model)["call-1"] == "not this month"
    assert done.final_output == "done"
    (approval,) = run.approvals()
    assert (approval.status.value, approval.reason) == ("denied", "wires need a human")
    assert approval.decision_reason == "not this month"


def test_a_bare_sdk_rejection_never_runs_and_leaves_the_approval_pending(guard: Guard) -> None:
    run = Run(guard, 500)
    result = run.run("pay")
    state = result.to_state()
    state.reject(result.interruptions[0])
    run.run(state)
    assert run.ran == []
    assert [a.status.value for a in run.approvals()] == ["pending"]  # lapses at its TTL


@pytest.mark.parametrize("refusal", STYLES)
@pytest.mark.parametrize("mode", MODES)
def test_an_approval_decided_in_interlock_runs_on_resume_without_asking_again(
    guard: Guard, mode: str, refusal: str
) -> None:
    run = Run(guard, 500, refusal=refusal)
    result = run.run("pay", mode)
    (approval,) = run.approvals()
    assert guard.store is not None
    guard.store.approve(approval.id, by="supervisor", reason="checked in the web UI")
    state = result.to_state()
    assert apply_interlock_decisions(state, guard) == 1  # no state.approve: Interlock decided
    done = run.run(state, mode)
    assert done.final_output == "done"
    assert run.ran == [500]
    (approval,) = run.approvals()
    assert (approval.status.value, approval.decided_by) == ("claimed", "supervisor")


def test_a_denial_in_interlock_is_carried_to_the_run_state(guard: Guard) -> None:
    run = Run(guard, 500)
    result = run.run("pay")
    assert guard.store is not None
    guard.store.deny(run.approvals()[0].id, by="supervisor", reason="not today")
    state = result.to_state()
    assert apply_interlock_decisions(state, guard) == 1
    assert run.run(state).final_output == "done"
    assert run.ran == []
    assert final_input_outputs(run.model)["call-1"] == "denied by supervisor: not today"


def test_undecided_approvals_stay_interrupted(guard: Guard) -> None:
    run = Run(guard, 500)
    state = run.run("pay").to_state()
    assert apply_interlock_decisions(state, guard) == 0
    assert len(run.run(state).interruptions) == 1
    assert run.ran == []


@pytest.mark.parametrize("refusal", STYLES)
def test_a_denial_in_interlock_stands_over_a_later_sdk_approval(guard: Guard, refusal: str) -> None:
    run = Run(guard, 500, refusal=refusal)
    result = run.run("pay")
    assert guard.store is not None
    guard.store.deny(run.approvals()[0].id, by="supervisor", reason="no")
    state = result.to_state()
    state.approve(result.interruptions[0])
    if refusal == "raise":
        with pytest.raises(ActionDenied, match="denied by supervisor"):
            run.run(state)
    else:
        run.run(state)
        assert "denied by supervisor" in final_input_outputs(run.model)["call-1"]
    assert run.ran == []


def test_an_sdk_approval_for_every_call_approves_no_later_call_in_interlock(
    guard: Guard,
) -> None:
    run = Run(guard, 500, 700)
    result = run.run("pay")
    state = result.to_state()
    state.approve(result.interruptions[0], always_approve=True)
    done = run.run(state)
    assert run.ran == [500]  # the later call opened its own approval, never shown
    assert "requires approval" in final_input_outputs(run.model)["call-2"]
    assert done.final_output == "done"
    statuses = [a.status.value for a in run.approvals()]
    assert statuses == ["claimed", "pending"]


def test_a_small_call_runs_without_interrupting(guard: Guard) -> None:
    run = Run(guard, 5)
    result = run.run("pay")
    assert result.interruptions == []
    assert run.ran == [5]
    assert run.approvals() == []


def test_guarding_again_joins_the_tools_own_needs_approval_once(guard: Guard) -> None:
    asked: list[str] = []

    async def own(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        asked.append(call_id)
        return False

    @function_tool(needs_approval=own)
    def wire(amount: float) -> str:
        """Wire money."""
        return f"wired {amount}"

    (once,) = guard_tools([wire], guard, on_approval="interrupt")
    (twice,) = guard_tools([once], guard, on_approval="interrupt")
    model = ScriptedModel([tool_calls(("wire", {"amount": 5})), answer("done")])
    result = Runner.run_sync(Agent(name="bot", model=model, tools=[twice]), "pay")
    assert result.final_output == "done"
    assert asked == ["call-1"]  # the tool's own check, once
    assert guard.store is not None
    rows = list(guard.store.audit_rows(kind="decision"))
    assert len(rows) == 1  # judged once, not once per layer
    (plain,) = guard_tools([twice], guard)
    assert plain.needs_approval is own


def test_an_interlock_decision_is_carried_by_intent_never_by_call_id(guard: Guard) -> None:
    first = Run(guard, 500)
    result = first.run("pay")
    assert guard.store is not None
    guard.store.approve(first.approvals()[0].id, by="supervisor")
    # another run whose model reuses the call id "call-1" for a bigger wire
    second = Run(guard, 9000)
    state = second.run("pay").to_state()
    assert apply_interlock_decisions(state, guard) == 0  # 500's approval is not 9000's
    assert len(second.run(state).interruptions) == 1
    assert second.ran == []
    carried = result.to_state()
    assert apply_interlock_decisions(carried, guard) == 1
    assert first.run(carried).final_output == "done"
    assert first.ran == [500]
