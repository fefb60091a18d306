"""Demotion attacks on the in-memory history's session bound (issue 18): the
in-memory history keeps the steps of at most ``max_sessions`` sessions; past it the
least recently written are *demoted* (their steps given up). A demoted session must
not start its whole-session counts again: an agent — or whoever can open sessions on
the same guard — that makes other sessions busy until its own is demoted would
otherwise reset a per-session cap. Each attack row sits next to a benign look-alike
that must keep passing."""

from __future__ import annotations

from typing import Any

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory

POLICY = """\
version: 1
default: allow
labels:
  - id: deleting
    attach: [destructive]
    name: delete_file
rules:
  - id: delete-cap
    decision: require_approval
    reason: more than two deletes in a session need a human
    name: delete_file
    session:
      after: {labels: [destructive], at_least: 2}
  - id: cel-cap
    decision: deny
    reason: at most three sends a session
    name: send_mail
    when: session.count("send_mail") >= 3
"""


def _guards(history: MemoryHistory) -> tuple[Guard, Guard]:
    policy = load_policy_text(POLICY)
    mine = Guard(policy, context=Context(session_id="s-mine"), sessions=history)
    other = Guard(policy, context=Context(session_id="s-other"), sessions=history)
    return mine, other


def _run(guard: Guard, name: str, **args: Any) -> None:
    def body(**_: Any) -> str:
        return "done"

    body.__name__ = name
    guard.protect(body)(**args)


def _demote(other: Guard) -> None:
    """Another session's call: with ``max_sessions=1`` it demotes the first session."""
    _run(other, "list_dir", path="/tmp")


def test_a_demoted_session_keeps_its_destructive_count() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _run(mine, "delete_file", path="/tmp/b")
    _demote(other)
    assert history.view("default", "s-mine").steps == ()  # demoted: its steps are gone
    verdict = mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict
    assert verdict is Verdict.REQUIRE_APPROVAL


def test_a_demoted_session_keeps_its_cel_count() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    for i in range(3):
        _run(mine, "send_mail", to=f"x{i}@example.com")
    _demote(other)
    assert mine.check(Action.tool("send_mail", {"to": "y@example.com"})).verdict is Verdict.DENY


def test_counts_stay_exact_across_demotions_and_resumption() -> None:
    """One delete, demoted; a second, demoted again; the third is the one over the cap
    (exact, not "cannot tell": benign work below the cap keeps running)."""
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _demote(other)
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/b"})).verdict is Verdict.ALLOW
    _run(mine, "delete_file", path="/tmp/b")
    _demote(other)
    _run(mine, "list_dir", path="/tmp")
    _demote(other)
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict is (
        Verdict.REQUIRE_APPROVAL
    )


def test_benign_a_demoted_session_below_the_cap_still_runs() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _run(mine, "send_mail", to="a@example.com")
    _demote(other)
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/b"})).verdict is Verdict.ALLOW
    assert mine.check(Action.tool("send_mail", {"to": "b@example.com"})).verdict is Verdict.ALLOW


def test_benign_refused_calls_are_not_counted_after_demotion() -> None:
    """Only executed calls count: checks that were never run leave no count behind."""
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    for i in range(4):
        mine.check(Action.tool("delete_file", {"path": f"/tmp/{i}"}))  # decided, never run
    _demote(other)
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/x"})).verdict is Verdict.ALLOW


def _decided(guard: Guard, name: str, **args: Any) -> str:
    decision = guard.check(Action.tool(name, args))
    assert decision.verdict is Verdict.ALLOW
    return decision.decision_id


def test_a_call_that_ran_after_its_session_was_demoted_is_counted() -> None:
    """Decided, the session demoted while the body ran, then settled as run: counted
    (twice settled, counted once)."""
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    running = _decided(mine, "delete_file", path="/tmp/b")
    _demote(other)
    for _ in range(2):
        history.settle("default", "s-mine", running, executed=True)
    assert history.view("default", "s-mine").past.counts[0].n == 2
    verdict = mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict
    assert verdict is Verdict.REQUIRE_APPROVAL


def test_benign_a_call_settled_as_not_run_after_demotion_is_not_counted() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    failed = _decided(mine, "delete_file", path="/tmp/b")
    _demote(other)
    history.settle("default", "s-mine", failed, executed=False)
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict is Verdict.ALLOW


def test_a_run_the_demoted_session_cannot_place_leaves_its_counts_unknown() -> None:
    """A call settled as run that the remnant does not know (its step left before the
    session was demoted): its count cannot be told — undetermined, never a reset."""
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _demote(other)
    history.settle("default", "s-mine", "dec_unknown", executed=True)
    assert history.view("default", "s-mine").past.overflowed
    verdict = mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict
    assert verdict is Verdict.UNDETERMINED


# -- past the remnants' bound: a session forgotten before it expired -------------------
#
# The history keeps up to ``max_sessions × 100`` demoted sessions (100 here). Opening
# more sessions than that, each running one call, used to forget the oldest whole: it
# came back as a new session, its caps counting from zero and its labels gone.


def _flood(history: MemoryHistory, sessions: int) -> None:
    """``sessions`` other sessions each run a call (each leaves a remnant: its count)."""
    policy = load_policy_text(POLICY)
    for i in range(sessions):
        _run(
            Guard(policy, context=Context(session_id=f"s-flood-{i}"), sessions=history), "list_dir"
        )


def test_a_session_forgotten_past_the_remnants_bound_does_not_start_its_cap_again() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, _ = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _run(mine, "delete_file", path="/tmp/b")
    _flood(history, 101)
    assert history.sessions_forgotten >= 1
    decision = mine.check(Action.tool("delete_file", {"path": "/tmp/c"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "forgotten" in decision.reason
    # a step appended after it was forgotten does not make it new again
    _run(mine, "list_dir", path="/tmp")
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict is (
        Verdict.UNDETERMINED
    )


def test_a_forgotten_session_keeps_refusing_after_it_is_demoted_again() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, other = _guards(history)
    for i in range(3):
        _run(mine, "send_mail", to=f"x{i}@example.com")
    _flood(history, 101)
    _run(mine, "list_dir", path="/tmp")  # back as a session of its own
    _demote(other)  # and demoted again
    assert mine.check(Action.tool("send_mail", {"to": "y@example.com"})).verdict is (
        Verdict.UNDETERMINED
    )


def test_benign_sessions_within_the_remnants_bound_are_not_forgotten() -> None:
    history = MemoryHistory(max_sessions=1)
    mine, _ = _guards(history)
    _run(mine, "delete_file", path="/tmp/a")
    _flood(history, 99)  # 99 remnants and mine: within the 100 kept
    assert history.sessions_forgotten == 0
    assert mine.check(Action.tool("delete_file", {"path": "/tmp/c"})).verdict is Verdict.ALLOW


def test_benign_new_sessions_after_many_forgotten_ones_run_untouched() -> None:
    """The filter of forgotten sessions says "not forgotten" of sessions never seen
    (false positives ≈ 2e-8 at this size): 2,000 new sessions after 399 forgotten."""
    history = MemoryHistory(max_sessions=1)
    _flood(history, 500)
    assert history.sessions_forgotten == 399  # 500 less the one kept and 100 remnants
    policy = load_policy_text(POLICY)
    refused = 0
    for i in range(2_000):
        guard = Guard(policy, context=Context(session_id=f"s-new-{i}"), sessions=history)
        verdict = guard.check(Action.tool("delete_file", {"path": "/tmp/a"})).verdict
        refused += verdict is not Verdict.ALLOW
    assert refused == 0
