"""A check whose every session rule reads labels only is judged on the session's labels
(``MemoryHistory.labels_view``), without a snapshot of its steps: the same verdicts,
rule ids and recorded steps as a guard that reads the whole view for every call; and a
labels view read for anything but labels fails closed (undetermined, never a miss)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.session.policies import FLOWS, LABELS
from tests.session.test_session_prefilter import CALLS, CONTEXT, SECRET, ReadsEveryCall

from interlock import Action, Guard, Verdict, load_policy_text
from interlock.guard import _READS_LABELS, _READS_NOTHING, _READS_VIEW
from interlock.guard_sessions import SessionRecorder
from interlock.policy.engine import evaluate
from interlock.policy.sessionrules import SessionFacts, session_scope
from interlock.session.fingerprints import FORMAT_MARK, of_data
from interlock.session.history import MemoryHistory, NewStep

#: labels read by a rule of ``session:`` and by CEL's ``session.labels``; a count
AFTER_AND_CEL = """\
version: 1
default: allow
tools:
  vault_get: {labels: [secret]}
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: x
    name: send_email
    when: '"secret" in session.labels'
  - id: no-post-after-secret
    decision: deny
    reason: x
    name: http_post
    session: {labels: [secret]}
  - id: one-transfer-after-a-vault-read
    decision: deny
    reason: x
    name: transfer
    session:
      after: {name: vault_get}
"""


def _guards(text: str) -> tuple[Guard, MemoryHistory, Guard, MemoryHistory]:
    """A guard that reads what its rules read, and one that reads every call's view."""
    history = MemoryHistory()
    fast = Guard(load_policy_text(text), sessions=history)
    assert fast._session_reads is not None
    every = MemoryHistory()
    plain = Guard(load_policy_text(text), sessions=every)
    recorder = plain._sessions
    assert isinstance(recorder, SessionRecorder)
    plain._sessions = ReadsEveryCall(recorder.spec, every)
    return fast, history, plain, every


def _steps(history: MemoryHistory) -> list[Any]:
    view = history.view("acme", "s-1")
    return [(s.kind, s.name, s.verdict, s.labels, s.executed) for s in view.steps] + [view.labels]


@settings(max_examples=150, deadline=None)
@given(
    text=st.sampled_from([LABELS, FLOWS, AFTER_AND_CEL]),
    calls=st.lists(st.sampled_from(range(len(CALLS))), min_size=1, max_size=12),
)
def test_the_same_verdicts_and_steps_as_reading_the_whole_view(text: str, calls: list[int]) -> None:
    fast, history, plain, every = _guards(text)
    for n in calls:
        name, args = CALLS[n]
        action = Action(kind="tool", name=name, arguments=args, context=CONTEXT)
        got, want = fast.check(action), plain.check(action)
        assert (got.verdict, got.rule_ids) == (want.verdict, want.rule_ids), name
        if got.verdict is Verdict.ALLOW:
            result = SECRET if name == "vault_get" else f"result of {name}"
            fast._sessions.settle(got, executed=True, result=result)  # type: ignore[union-attr]
            plain._sessions.settle(want, executed=True, result=result)  # type: ignore[union-attr]
    assert _steps(history) == _steps(every)


def test_what_each_call_reads_of_its_session() -> None:
    fast, _, _, _ = _guards(AFTER_AND_CEL)
    reads = fast._session_reads
    assert reads is not None
    assert reads.needs("tool", "send_email") == _READS_LABELS  # CEL session.labels
    assert reads.needs("tool", "http_post") == _READS_LABELS  # session: {labels}
    assert reads.needs("tool", "transfer") == _READS_VIEW  # an after: counts steps
    assert reads.needs("tool", "read_file") == _READS_NOTHING
    mail = Action(kind="tool", name="send_email", arguments={}, context=CONTEXT)
    fast.sessions.append(  # type: ignore[union-attr]
        "acme", "s-1", NewStep("tool", "vault_get", "allow", "d-1", labels=frozenset({"secret"}))
    )
    facts = reads.facts(mail)
    assert facts.view is not None and facts.view.labels == {"secret"}
    assert facts.view.steps == ()  # no snapshot of the steps
    assert fast.check(mail).verdict is Verdict.DENY


def test_a_history_subclass_is_read_by_its_recorder() -> None:
    class Counting(MemoryHistory):
        pass

    guard = Guard(load_policy_text(LABELS), sessions=Counting())
    assert guard._session_reads is None


def test_the_labels_view_holds_the_labels_and_nothing_else() -> None:
    history = MemoryHistory()
    assert history.labels_view("acme", "s-1") == history.view("acme", "s-1")  # unknown: empty
    history.append("acme", "s-1", NewStep("tool", "vault_get", "allow", "d-1"))
    history.settle(
        "acme",
        "s-1",
        "d-1",
        executed=True,
        fingerprints=frozenset({FORMAT_MARK, 7}),
        labels=frozenset({"secret"}),
    )
    labels = history.labels_view("acme", "s-1")
    assert labels.labels == {"secret"} and labels.steps == () and labels.sources == ()
    assert labels.lost and labels.past.overflowed and labels.next_seq == 2
    kept = history.view("acme", "s-1")
    assert history.labels_view("acme", "s-1") is kept  # read since the write: the view itself


@pytest.mark.parametrize(
    ("rule", "args"),
    [
        ("session:\n      after: {name: vault_get}", {}),
        ("session:\n      flows_from: {labels: [secret]}", {"body": SECRET}),
        ("session:\n      provenance: {args: [to], from: [secret]}", {"to": SECRET}),
        ("when: 'session.ran(\"vault_get\")'", {}),
    ],
)
def test_a_labels_view_read_for_more_than_labels_fails_closed(
    rule: str, args: dict[str, Any]
) -> None:
    policy = load_policy_text(
        f"version: 1\ndefault: allow\nrules:\n  - id: r\n    decision: deny\n"
        f"    reason: x\n    {rule}\n"
    )
    history = MemoryHistory()
    secret = frozenset({"secret"})
    history.append("acme", "s-1", NewStep("tool", "vault_get", "allow", "d-1", labels=secret))
    history.settle("acme", "s-1", "d-1", executed=True, fingerprints=of_data(SECRET))
    action = Action(kind="tool", name="send_email", arguments=args, context=CONTEXT)
    with session_scope(SessionFacts.of(history.labels_view("acme", "s-1"))):
        assert evaluate(action, policy).verdict is Verdict.UNDETERMINED
    with session_scope(SessionFacts.of(history.view("acme", "s-1"))):
        assert evaluate(action, policy).verdict is Verdict.DENY  # the whole view: it holds
