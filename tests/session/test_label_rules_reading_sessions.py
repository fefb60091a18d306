"""A label rule that reads the session is tested with the check's session facts set
(the facts are set only for label rules that read them): it attaches its labels when
its session condition holds, and only then; the usual label rules (a path, a URL)
attach theirs with no facts set."""

from __future__ import annotations

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory

POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
  - id: written-after-secret
    attach: [tainted]
    name: write_file
    when: '"secret" in session.labels'
rules:
  - id: no-mail-when-tainted
    decision: deny
    reason: no mail from a tainted session
    name: send_mail
    session:
      labels: [tainted]
"""

PLAIN = POLICY.split("  - id: written-after-secret", maxsplit=1)[0] + "rules: []\n"


def test_which_label_rules_read_the_session() -> None:
    reading = load_policy_text(POLICY).sessions
    plain = load_policy_text(PLAIN).sessions
    assert reading is not None and reading.label_rules_read_sessions
    assert plain is not None and not plain.label_rules_read_sessions


@pytest.mark.parametrize("secret_first", [True, False])
def test_a_label_rule_reading_the_session_sees_it(secret_first: bool) -> None:
    guard = Guard(
        load_policy_text(POLICY), context=Context(session_id="s"), sessions=MemoryHistory()
    )
    path = "/srv/app/.env" if secret_first else "/srv/app/README"
    assert guard.check(Action.tool("read_file", {"path": path})).verdict is Verdict.ALLOW
    assert guard.check(Action.tool("write_file", {"path": "/tmp/x"})).verdict is Verdict.ALLOW
    view = guard.sessions.view("default", "s")  # type: ignore[union-attr]
    assert ("tainted" in view.labels) is secret_first
    expect = Verdict.DENY if secret_first else Verdict.ALLOW
    assert guard.check(Action.tool("send_mail", {"to": "a@corp.example"})).verdict is expect


def test_the_usual_label_rule_attaches_without_facts_set() -> None:
    guard = Guard(
        load_policy_text(PLAIN), context=Context(session_id="s"), sessions=MemoryHistory()
    )
    guard.check(Action.tool("read_file", {"path": "/srv/app/.env"}))
    view = guard.sessions.view("default", "s")  # type: ignore[union-attr]
    assert view.labels == {"secret"}
