"""``session.expire_after`` in the in-memory history: idle sessions are forgotten (as
the SQL store's reaper forgets them), checked by the first write at most every
``expire_after / 16`` seconds. Before, the in-memory history kept them until it was
full, whatever the policy said."""

from __future__ import annotations

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory, NewStep

HOUR = 3600.0


def _step(name: str, labels: frozenset[str] = frozenset()) -> NewStep:
    return NewStep(kind="tool", name=name, verdict="allow", labels=labels)


def test_an_idle_session_is_forgotten_by_a_later_write() -> None:
    now = [1_000_000.0]
    history = MemoryHistory(expire_after=HOUR, clock=lambda: now[0])
    history.append("t", "idle", _step("read_file", frozenset({"secret"})))
    history.append("t", "busy", _step("x"))
    now[0] += HOUR / 2
    history.append("t", "busy", _step("x"))  # within the hour: both kept
    assert history.view("t", "idle").labels == {"secret"}
    now[0] += HOUR / 2 + 1
    history.append("t", "busy", _step("x"))  # "idle" has been idle for an hour and a second
    assert history.view("t", "idle").labels == frozenset()
    assert history.view("t", "idle").next_seq == 1
    assert history.view("t", "busy").next_seq == 4
    assert history.sessions_forgotten == 0  # expired, not forgotten: never refused


def test_a_demoted_session_expires_too() -> None:
    now = [1_000_000.0]
    history = MemoryHistory(max_sessions=1, expire_after=HOUR, clock=lambda: now[0])
    history.append("t", "old", _step("read_file", frozenset({"secret"})))
    history.append("t", "new", _step("x"))  # demotes "old": its labels kept
    assert history.view("t", "old").labels == {"secret"}
    now[0] += 2 * HOUR
    history.append("t", "new", _step("x"))
    assert history.view("t", "old").labels == frozenset()


def test_sweeps_are_spaced_out() -> None:
    """Sweeps run at most every expire_after / 16 seconds; each forgets the sessions
    idle for longer than expire_after (one idle exactly that long stays)."""
    now = [1_000_000.0]
    history = MemoryHistory(expire_after=16.0, clock=lambda: now[0])
    history.append("t", "a", _step("read_file", frozenset({"secret"})))
    now[0] += 1.5  # a sweep (every second here): nothing idle yet
    history.append("t", "b", _step("x"))
    now[0] += 16.0  # "a" idle 17.5 s, "b" 16 s
    history.append("t", "c", _step("x"))
    assert history.view("t", "a").labels == frozenset()
    assert history.view("t", "b").next_seq == 2  # idle exactly 16 s: kept


def test_without_expire_after_nothing_expires() -> None:
    now = [1_000_000.0]
    history = MemoryHistory(clock=lambda: now[0])
    history.append("t", "a", _step("read_file", frozenset({"secret"})))
    now[0] += 365 * 24 * HOUR
    history.append("t", "b", _step("x"))
    assert history.view("t", "a").labels == {"secret"}


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_expire_after_must_be_a_positive_number(bad: float) -> None:
    with pytest.raises(ValueError, match="expire_after"):
        MemoryHistory(expire_after=bad)


def test_a_guard_applies_the_policys_expire_after() -> None:
    policy = load_policy_text(
        """\
version: 1
default: allow
session: {expire_after: 2h}
labels:
  - {id: secrets, attach: [secret], name: read_file}
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: a session that read a secret sends no mail
    name: send_mail
    session: {labels: [secret]}
"""
    )
    guard = Guard(policy, context=Context(session_id="s"))
    history = guard._session_history
    assert isinstance(history, MemoryHistory) and history._expire_after == 2 * HOUR
    guard.protect(lambda: "k", name="read_file")()
    assert guard.check(Action.tool("send_mail", {"to": "a@b.example"})).verdict is Verdict.DENY
