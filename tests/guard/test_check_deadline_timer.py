"""The async check's deadline: a timer only where the decider suspends.

``Guard.acheck`` bounds the decider by the check's timeout. A decider that answers
without suspending (a policy decided in memory, most checks) cannot be interrupted by
a timer, so none is armed for it; one that suspends is bounded, cancelled and timed
out exactly as under ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from interlock import Action, CancelToken, Decision, Guard, Verdict, load_policy_text
from interlock.errors import DecisionTimeout

POLICY = load_policy_text("version: 1\ndefault: allow\n")
SHELL = Action.tool("shell", {"command": "ls"})


class TimerCountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the timers armed on it (``asyncio.timeout`` arms one
    through ``call_at``)."""

    def __init__(self) -> None:
        super().__init__()
        self.timers = 0

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        self.timers += 1
        return super().call_at(when, callback, *args, context=context)


class Decider:
    """Answers allow after ``pauses`` suspensions of ``seconds`` each; notes what it saw."""

    def __init__(self, pauses: int = 0, seconds: float = 0.0) -> None:
        self.pauses = pauses
        self.seconds = seconds
        self.seen: list[str] = []

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        return Decision(verdict=Verdict.ALLOW, reason="sync allow")

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        try:
            for _ in range(self.pauses):
                await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.seen.append("cancelled")
            raise
        self.seen.append("done")
        return Decision(verdict=Verdict.ALLOW, reason=f"allowed after {self.pauses} pauses")


def _run(loop: TimerCountingLoop, work: Any) -> Any:
    try:
        return loop.run_until_complete(work)
    finally:
        loop.close()


def test_a_decider_that_never_suspends_arms_no_timer() -> None:
    loop = TimerCountingLoop()
    guard = Guard(POLICY, decider=Decider(pauses=0), timeout=5)
    decision = _run(loop, guard.acheck(SHELL))
    assert decision.verdict is Verdict.ALLOW
    assert decision.reason == "allowed after 0 pauses"
    assert loop.timers == 0


def test_a_decider_that_suspends_is_bounded_by_a_timer_and_answers() -> None:
    loop = TimerCountingLoop()
    decider = Decider(pauses=3)
    guard = Guard(POLICY, decider=decider, timeout=5)
    decision = _run(loop, guard.acheck(SHELL))
    assert decision.verdict is Verdict.ALLOW
    assert decision.reason == "allowed after 3 pauses"  # every resumption reached it
    assert decider.seen == ["done"]
    assert loop.timers == 1


async def test_a_decider_past_the_timeout_is_cancelled_and_undetermined() -> None:
    decider = Decider(pauses=2, seconds=0.2)
    guard = Guard(POLICY, decider=decider, timeout=0.05)
    decision = await guard.acheck(SHELL)
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, DecisionTimeout)
    assert decider.seen == ["cancelled"]  # the decider saw its cancellation


async def test_a_cancelled_check_cancels_the_suspended_decider_and_reraises() -> None:
    decider = Decider(pauses=1, seconds=5)
    guard = Guard(POLICY, decider=decider, timeout=10)
    task = asyncio.create_task(guard.acheck(SHELL))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert decider.seen == ["cancelled"]


async def test_a_decider_raising_before_it_suspends_is_undetermined() -> None:
    class Raising(Decider):
        async def adecide(
            self, action: Action, *, deadline: float | None, cancel: CancelToken | None
        ) -> Decision:
            raise RuntimeError("no verdict here")

    decision = await Guard(POLICY, decider=Raising(), timeout=5).acheck(SHELL)
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, RuntimeError)


async def test_a_decider_raising_timeout_error_itself_is_a_timed_out_check() -> None:
    """As under ``asyncio.timeout``: a TimeoutError out of the decider is a timeout."""

    class Raising(Decider):
        async def adecide(
            self, action: Action, *, deadline: float | None, cancel: CancelToken | None
        ) -> Decision:
            await asyncio.sleep(0)
            raise TimeoutError

    decision = await Guard(POLICY, decider=Raising(), timeout=5).acheck(SHELL)
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, DecisionTimeout)
