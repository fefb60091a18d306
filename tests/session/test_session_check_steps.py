"""The session check's own steps, as the guard takes them on its quick path: the step
it records is the step the history's own type would make, the guard's context still
merges into the session check, a check inside a session check is that check, and a
labels-only check probes no argument."""

from __future__ import annotations

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.core.decision import Decision
from interlock.policy import load_policy_text
from interlock.policy.sessionrules import SessionFacts, _new_step, new_step
from interlock.session.history import MemoryHistory, NewStep, SessionView

POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
tools:
  fetch_url:
    labels: [untrusted]
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: a session that read a secret sends no mail
    name: send_mail
    session: {labels: [secret]}
  - id: no-shell
    decision: deny
    reason: no shell
    name: shell
"""


def _guard(**kwargs: object) -> tuple[Guard, MemoryHistory]:
    history = MemoryHistory()
    return Guard(load_policy_text(POLICY), sessions=history, **kwargs), history  # type: ignore[arg-type]


def test_the_quick_step_is_the_dataclass_step_field_for_field() -> None:
    labels, clears = frozenset({"secret"}), frozenset({"untrusted"})
    made = _new_step("tool", "read_file", "allow", "d-1", labels, clears)
    assert type(made) is NewStep
    assert made == NewStep("tool", "read_file", "allow", "d-1", labels, clears)
    assert made.fingerprints == frozenset() and made.trusted is False and made.executed is None
    with pytest.raises(AttributeError):
        made.name = "other"  # type: ignore[misc]  # still frozen


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_verdict_is_recorded_by_its_text(verdict: Verdict) -> None:
    policy = load_policy_text(POLICY)
    action = Action.tool("fetch_url", {"url": "https://a.example"}, context=Context(session_id="s"))
    decision = Decision(verdict=verdict, reason="r", decision_id="d-2")
    step = new_step(action, decision, SessionFacts.of(SessionView("", "s")), policy)
    assert step.verdict == verdict.value
    assert step.decision_id == "d-2"
    # only an allow attaches its tool's labels
    assert step.labels == (frozenset({"untrusted"}) if verdict is Verdict.ALLOW else frozenset())


def test_the_guards_own_context_still_names_the_session() -> None:
    guard, history = _guard(context=Context(tenant="acme", session_id="chat-1"))
    read = guard.check(Action.tool("read_file", {"path": "/srv/.env"}))
    assert read.verdict is Verdict.ALLOW
    assert history.view("acme", "chat-1").labels == frozenset({"secret"})
    mail = guard.check(Action.tool("send_mail", {"to": "bob@corp.example"}))
    assert mail.verdict is Verdict.DENY
    # a session of the same name under another tenant is another session
    other = Action.tool(
        "send_mail", {"to": "bob@corp.example"}, context=Context(tenant="other", session_id="x")
    )
    assert guard.check(other).verdict is Verdict.ALLOW


def test_a_check_inside_the_session_check_is_that_check() -> None:
    inner: list[Decision] = []
    asked: list[bool] = []
    context = Context(tenant="t", session_id="s")

    class Asking:  # an event sink that asks the same guard again, in the same thread
        def emit(self, event: object) -> None:
            if not asked:
                asked.append(True)
                inner.append(guard.check(Action.tool("shell", {"command": "ls"}, context=context)))

    guard, history = _guard(sink=Asking())
    guard.check(Action.tool("read_file", {"path": "/srv/.env"}, context=context))
    assert inner and inner[0].verdict is Verdict.DENY
    # one session check, one step: the inner check is the read's own check
    assert [s.name for s in history.view("t", "s").steps] == ["read_file"]
    # the same call outside any check is a check of its own, with its own step
    assert guard.check(Action.tool("shell", {"command": "ls"}, context=context)).verdict is (
        Verdict.DENY
    )
    assert [s.name for s in history.view("t", "s").steps] == ["read_file", "shell"]


def test_a_labels_only_check_probes_no_argument_and_a_probe_is_made_once() -> None:
    facts = SessionFacts.of(SessionView("t", "s"))
    assert facts._probes is None
    first = facts.probe_of(("arg", "to"), "bob@corp.example")
    assert facts.probe_of(("arg", "to"), "someone-else@corp.example") is first
    assert first  # an address of 16 characters has a probe
