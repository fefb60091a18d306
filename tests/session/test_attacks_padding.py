"""Padding attacks on the session history's bound (issue 18): an agent — or content
that steers it — makes cheap calls until an earlier step leaves the bounded history
(``session.max_steps``), then does what that step should have stopped. Each row runs
on the in-memory history and on a SQLite store's history; an attack row marked
``xfail(strict=True)`` is a hole still open (its reason says why), next to the benign
look-alikes that must keep passing.

Closed by judging what only dropped steps could tell as "cannot tell": a condition
that holds on the kept steps holds; one that does not, where a dropped step might
have made it hold, leaves the rule unevaluable (undetermined) — never a miss that
allows. A session's *past* narrows what "might" means: the counts of its executed
calls that left the history keep its whole-session counts exact (a per-session cap is
judged past the bound too), and the data its dropped steps brought in (a bounded
filter) makes a flow none of it may hold a sure miss."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MAX_PAST, MemoryHistory, SessionPast, SessionView
from interlock.store import open_store

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
MAX_STEPS = 6

POLICY = f"""\
version: 1
default: allow
session: {{max_steps: {MAX_STEPS}}}
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {{glob: ["**/.env"]}}
  - id: deleting
    attach: [destructive]
    name: delete_file
rules:
  - id: no-leak
    decision: deny
    reason: data a secret read returned may not leave
    name: send_mail
    session:
      flows_from: {{labels: [secret]}}
  - id: delete-cap
    decision: require_approval
    reason: more than two deletes in a session need a human
    name: delete_file
    session:
      after: {{labels: [destructive], at_least: 2}}
"""

#: a refusal is enough: a padding attack wins only when the last call is allowed
REFUSED = (Verdict.DENY, Verdict.UNDETERMINED, Verdict.REQUIRE_APPROVAL)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the session lives: this process, or a store's URL (PostgreSQL's skipped
    when no server answers, unless ``INTERLOCK_REQUIRE_POSTGRES=1``)."""
    if request.param == "memory":
        return "memory"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'pad.db'}"
    return str(request.getfixturevalue("postgres_url"))


def _guard(backend: str, policy_text: str, session_id: str) -> Iterator[Guard]:
    policy = load_policy_text(policy_text)
    context = Context(session_id=session_id)
    if backend == "memory":
        yield Guard(policy, context=context, sessions=MemoryHistory(max_steps=MAX_STEPS))
        return
    store = open_store(backend)
    with store, Guard(policy, context=context, store=store) as guarded:
        yield guarded


@pytest.fixture
def guard(backend: str) -> Iterator[Guard]:
    yield from _guard(backend, POLICY, "s-pad")


def _run(guard: Guard, name: str, result: str = "", **args: Any) -> None:
    """Call ``name`` through the guard as an agent would: allowed, run, its result kept."""

    def body(**_: Any) -> str:
        return result

    body.__name__ = name
    guarded = guard.protect(body)
    guarded(**args)


def _view(guard: Guard) -> SessionView:
    history = guard.sessions
    assert history is not None
    return history.view("default", "s-pad")


def _verdict(guard: Guard, name: str, **args: Any) -> Verdict:
    return guard.check(Action.tool(name, args)).verdict


def _pad_refused(guard: Guard, n: int) -> None:
    """Calls that only cost a check: each is a step, refused or not run."""
    for i in range(n):
        guard.check(Action.tool("list_dir", {"path": f"/tmp/{i}"}))


def _pad_with_data(guard: Guard, n: int) -> None:
    """Allowed calls that run and return (harmless) data."""
    for i in range(n):
        _run(guard, "read_file", f"line {i}: nothing to see here, just text", path=f"/tmp/{i}.txt")


# -- flows ---------------------------------------------------------------------------


def test_within_the_bound_the_secret_cannot_leave(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, MAX_STEPS - 2)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) is Verdict.DENY
    assert _verdict(guard, "send_mail", to="bob@corp.example", body="all good") is Verdict.ALLOW


def test_padding_with_cheap_calls_does_not_hide_a_flow(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_refused(guard, MAX_STEPS)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) in REFUSED


def test_padding_with_data_does_not_hide_a_flow(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, MAX_STEPS)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) in REFUSED


def test_the_secret_label_outlives_the_bound(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, 2 * MAX_STEPS)
    view = guard.sessions.view("default", "s-pad")  # type: ignore[union-attr]
    assert "secret" in view.labels
    assert len(view.steps) == MAX_STEPS


# -- counts --------------------------------------------------------------------------


def test_within_the_bound_the_cap_holds(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, MAX_STEPS - 3)
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.REQUIRE_APPROVAL


def test_padding_does_not_reset_a_per_session_cap(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, MAX_STEPS)
    assert _verdict(guard, "delete_file", path="/tmp/c") in REFUSED


def test_refused_deletes_do_not_count_toward_the_cap(guard: Guard) -> None:
    """The benign look-alike: calls that did not run are not destructive operations."""
    for path in ("/tmp/a", "/tmp/b", "/tmp/c"):
        guard.check(Action.tool("delete_file", {"path": path}))  # decided, never run
    assert _verdict(guard, "delete_file", path="/tmp/d") is Verdict.ALLOW


# -- what a session longer than max_steps costs, and what it does not -----------------


def test_past_the_bound_a_flow_no_dropped_data_holds_is_a_miss(guard: Guard) -> None:
    """The session's past keeps the data its dropped steps brought in (a filter): a
    send that carries none of it is a sure miss (tests/session/test_long_sessions.py
    has the rest; before, every miss past the bound was undetermined)."""
    _pad_with_data(guard, MAX_STEPS + 1)
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example", "body": "hi"}))
    assert decision.verdict is Verdict.ALLOW, decision.reason


def test_past_the_bound_a_flow_dropped_data_may_hold_is_undetermined_and_says_why(
    guard: Guard,
) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, MAX_STEPS + 1)
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example", "body": KEY}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "no-leak" in decision.reason
    assert "session.max_steps" in decision.reason


def test_past_the_bound_a_found_flow_is_still_a_deny(guard: Guard) -> None:
    _pad_with_data(guard, MAX_STEPS)
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example", "body": KEY}))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("no-leak",)


def test_past_the_bound_a_whole_session_cap_is_exact(guard: Guard) -> None:
    """The session's past counts the dropped executed calls: a session that never
    deleted may delete, padded or not."""
    _pad_with_data(guard, MAX_STEPS + 1)  # step 1 dropped
    assert _verdict(guard, "delete_file", path="/tmp/a") is Verdict.ALLOW


def test_two_deletes_pushed_out_still_reach_the_cap(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, 2 * MAX_STEPS)
    _pad_refused(guard, MAX_STEPS)
    decision = guard.check(Action.tool("delete_file", {"path": "/tmp/c"}))
    assert decision.verdict is Verdict.REQUIRE_APPROVAL
    assert decision.rule_ids == ("delete-cap",)


def test_one_delete_pushed_out_leaves_room_for_one_more(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    _pad_with_data(guard, 2 * MAX_STEPS)
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")  # one kept, one in the past
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.REQUIRE_APPROVAL


def test_a_call_that_runs_after_its_step_left_makes_counts_undetermined(guard: Guard) -> None:
    """The step of a decided call is pushed out before its outcome is known: its run
    is counted nowhere, so the session's counts cannot be told from then on."""
    decided = guard.check(Action.tool("delete_file", {"path": "/tmp/a"}))
    assert decided.verdict is Verdict.ALLOW
    _pad_with_data(guard, MAX_STEPS)
    history = guard.sessions
    assert history is not None
    history.settle("default", "s-pad", str(decided.decision_id), executed=True)
    decision = guard.check(Action.tool("delete_file", {"path": "/tmp/b"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "delete-cap" in decision.reason


def test_an_unknown_decision_within_the_bound_changes_nothing(guard: Guard) -> None:
    history = guard.sessions
    assert history is not None
    _run(guard, "delete_file", path="/tmp/a")
    history.settle("default", "s-pad", "dec_unknown", executed=True)
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW


def test_too_many_kinds_of_dropped_calls_overflow_the_past(guard: Guard, backend: str) -> None:
    """Past :data:`MAX_PAST` kinds of executed calls the counts are not kept: a cap
    that reaches them is undetermined again (as without a past)."""
    for i in range(MAX_PAST + 1):
        _run(guard, f"tool_{i}")
    _pad_with_data(guard, MAX_STEPS)
    view = _view(guard)
    assert view.past.overflowed
    if backend != "memory":  # the table keeps every kind: a fresh read overflows too
        with open_store(backend) as store:
            fresh = store.session_history(max_steps=MAX_STEPS).view("default", "s-pad").past
            assert fresh.overflowed and fresh.counts == ()
    decision = guard.check(Action.tool("delete_file", {"path": "/tmp/a"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "session.max_steps" in decision.reason


def test_a_kept_view_and_a_fresh_read_agree_on_the_past(guard: Guard, backend: str) -> None:
    """The SQL history's kept view (moved on by each append) counts what the table
    holds, and the in-memory one what it dropped."""
    _run(guard, "delete_file", path="/tmp/a")
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, 2 * MAX_STEPS)
    kept = _view(guard).past
    assert not kept.overflowed
    assert {(c.name, c.labels, c.n) for c in kept.counts} == {
        ("delete_file", frozenset({"destructive"}), 2),
        ("read_file", frozenset(), MAX_STEPS),  # 14 steps, 6 kept: 8 dropped
    }
    if backend != "memory":
        with open_store(backend) as store:
            fresh = store.session_history(max_steps=MAX_STEPS).view("default", "s-pad").past
        assert sorted(fresh.counts, key=repr) == sorted(kept.counts, key=repr)


def test_expiry_forgets_the_past(guard: Guard, backend: str) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, 2 * MAX_STEPS)
    history = guard.sessions
    assert history is not None
    assert history.expire(-3600.0) == 1  # everything idle for over -1 h: all
    assert _view(guard).past == SessionPast()
    if backend != "memory":
        with open_store(backend) as store, store.transaction(write=False) as cur:
            cur.execute("SELECT count(*) FROM session_past")
            assert cur.fetchone()[0] == 0
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.ALLOW


def test_calls_no_session_condition_reads_are_untouched_past_the_bound(guard: Guard) -> None:
    _pad_with_data(guard, 2 * MAX_STEPS)
    assert _verdict(guard, "list_dir", path="/tmp") is Verdict.ALLOW


WINDOWED = f"""\
version: 1
default: allow
session: {{max_steps: {MAX_STEPS}}}
rules:
  - id: no-mail-right-after-a-fetch
    decision: deny
    reason: no mail within two steps of a fetch
    name: send_mail
    session:
      after: {{name: fetch_url, within: 2}}
  - id: sliding-cap
    decision: require_approval
    reason: two deletes within four steps need a human
    name: delete_file
    session:
      after: {{name: delete_file, within: 4, at_least: 2}}
  - id: cel-ran
    decision: deny
    reason: never mail in a session that ran drop_table
    name: send_mail
    when: session.ran("drop_table")
"""


def test_a_window_within_the_kept_steps_is_judged_past_the_bound(tmp_path: Path) -> None:
    guard = Guard(
        load_policy_text(WINDOWED),
        context=Context(session_id="w"),
        sessions=MemoryHistory(max_steps=MAX_STEPS),
    )
    _pad_with_data(guard, 2 * MAX_STEPS)
    _run(guard, "fetch_url", "<p>hello</p>", url="https://blog.example")
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example"}))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("no-mail-right-after-a-fetch",)
    # a sliding cap within the kept steps: exact
    _run(guard, "delete_file", path="/tmp/a")
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.REQUIRE_APPROVAL
    # a sliding cap longer than the kept steps: the past has no positions
    _pad_with_data(guard, MAX_STEPS)
    history = MemoryHistory(max_steps=3)
    wide = Guard(load_policy_text(WINDOWED), context=Context(session_id="w"), sessions=history)
    _run(wide, "delete_file", path="/tmp/a")
    _pad_with_data(wide, 3)
    decision = wide.check(Action.tool("delete_file", {"path": "/tmp/b"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "sliding-cap" in decision.reason


CEL_COUNTS = f"""\
version: 1
default: allow
session: {{max_steps: {MAX_STEPS}}}
rules:
  - id: cel-ran
    decision: deny
    reason: never mail in a session that ran drop_table
    name: send_mail
    when: session.ran("drop_table")
  - id: cel-count
    decision: require_approval
    reason: a third delete needs a human
    name: delete_file
    when: session.count("delete_*") >= 2
"""


@pytest.fixture
def cel_guard(backend: str) -> Iterator[Guard]:
    yield from _guard(backend, CEL_COUNTS, "s-pad")


def test_cel_counts_are_exact_past_the_bound(cel_guard: Guard) -> None:
    guard = cel_guard
    _pad_with_data(guard, 2 * MAX_STEPS)
    # "never ran" is known: the past counts every executed call that left
    assert _verdict(guard, "send_mail", to="bob@corp.example") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/a")
    _pad_with_data(guard, MAX_STEPS)
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, MAX_STEPS)
    decision = guard.check(Action.tool("delete_file", {"path": "/tmp/c"}))
    assert decision.verdict is Verdict.REQUIRE_APPROVAL
    assert decision.rule_ids == ("cel-count",)
    _run(guard, "drop_table", table="users")
    _pad_with_data(guard, MAX_STEPS)
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example"}))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("cel-ran",)
