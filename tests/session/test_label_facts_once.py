"""A step's label rules read the facts the engine already took of the call (not a
second extraction), and still the right ones: same labels as extracting anew, and a
fresh extraction whenever the facts at hand are of another call or policy."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.core.decision import Decision
from interlock.policy import load_policy_text, sessionrules
from interlock.policy.engine import evaluate
from interlock.session.history import MemoryHistory

POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env", "**/.ssh/**"]}
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: no mail once a secret was read
    name: send_mail
    session:
      labels: [secret]
"""


def _guard() -> Guard:
    return Guard(
        load_policy_text(POLICY), context=Context(session_id="s"), sessions=MemoryHistory()
    )


def _count_extractions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = sessionrules.facts_for

    def counted(action: Any, policy: Any) -> Any:
        calls.append(action)
        return real(action, policy)

    monkeypatch.setattr(sessionrules, "facts_for", counted)
    return calls


@pytest.mark.parametrize(
    ("path", "labelled"),
    [("/srv/app/.env", True), ("/home/u/.ssh/id_ed25519", True), ("/srv/app/README", False)],
)
def test_a_label_rule_reads_the_checks_own_facts(
    monkeypatch: pytest.MonkeyPatch, path: str, labelled: bool
) -> None:
    extractions = _count_extractions(monkeypatch)
    guard = _guard()
    assert guard.check(Action.tool("read_file", {"path": path})).verdict is Verdict.ALLOW
    assert extractions == []  # the engine's facts were used
    view = guard.sessions.view("default", "s")  # type: ignore[union-attr]
    assert ("secret" in view.labels) is labelled
    expect = Verdict.DENY if labelled else Verdict.ALLOW
    assert guard.check(Action.tool("send_mail", {"to": "a@corp.example"})).verdict is expect


def test_facts_of_another_call_are_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    extractions = _count_extractions(monkeypatch)
    policy = load_policy_text(POLICY)
    state = sessionrules.SessionFacts.of(MemoryHistory().view("default", "s"))
    judged = Action.tool("read_file", {"path": "/srv/app/README"})
    other = Action.tool("read_file", {"path": "/srv/app/.env"})
    with sessionrules.session_scope(state):
        decision = evaluate(judged, policy)
    assert state.evaluated is not None and state.evaluated[0] is judged
    allowed = Decision(verdict=Verdict.ALLOW, reason="ok")
    attach, _ = sessionrules.step_labels(other, allowed, state, policy)
    assert attach == frozenset({"secret"})  # its own facts, extracted anew
    assert extractions == [other]
    attach, _ = sessionrules.step_labels(judged, decision, state, policy)
    assert attach == frozenset()
    assert extractions == [other]  # the judged call's facts were at hand
