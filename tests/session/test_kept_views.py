"""The view a SQL history keeps of a session, and the one-statement step it lets
SQLite write (schema 14's ``session_step_usual``): a replica's kept view never hides
another's writes — a step, a settle, an expiry — from its next view or its next
append, and an append made after a kept view that went stale lands exactly as the
general path would (right seq, labels merged with what the other wrote). Each test
runs on SQLite and PostgreSQL (two store objects on one database: two replicas)."""

from __future__ import annotations

from collections.abc import Callable

from interlock.session.history import MemoryHistory, NewStep, SessionView
from interlock.store import SqlStore


def _call(name: str, decision: str | None = None, **kw: object) -> NewStep:
    return NewStep(kind="tool", name=name, verdict="allow", decision_id=decision, **kw)  # type: ignore[arg-type]


def _shape(view: SessionView) -> tuple[object, ...]:
    return (
        [(s.seq, s.name, s.labels, s.executed, s.fingerprints) for s in view.steps],
        view.labels,
        view.next_seq,
    )


def test_a_step_written_by_one_replica_is_seen_by_the_others_next_view_and_append(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    a = store.session_history()
    b = open_replica().session_history()
    a.append("acme", "s", _call("fetch", "d-1", labels=frozenset({"untrusted"})))
    assert a.view("acme", "s").next_seq == 2  # kept by A (and moved on by its append)
    b.append("acme", "s", _call("read_file", "d-2", labels=frozenset({"secret"})))
    seen = a.view("acme", "s")  # A's kept view is stale: B's step is read
    assert [s.name for s in seen.steps] == ["fetch", "read_file"]
    assert seen.labels == {"untrusted", "secret"}
    # B writes again, A appends after its (now stale) kept view: A's step gets the
    # next seq and keeps B's labels; B's clear is not undone
    b.append("acme", "s", _call("review", "d-3", clears=frozenset({"untrusted"})))
    step = a.append("acme", "s", _call("send", "d-4", labels=frozenset({"sent"})))
    assert step.seq == 4
    expected = ([1, 2, 3, 4], {"secret", "sent"}, 5)
    for history in (a, b):
        view = history.view("acme", "s")
        assert ([s.seq for s in view.steps], view.labels, view.next_seq) == expected


def test_appends_after_a_kept_view_match_the_memory_history(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    """Two replicas taking turns at random, each append made after whatever view it
    keeps (fresh or stale), with labels attached and cleared and the bound crossed:
    every view equals the in-process history's after the same operations."""
    import random

    rng = random.Random(18)
    replicas = [store.session_history(max_steps=5), open_replica().session_history(max_steps=5)]
    memory = MemoryHistory(max_steps=5)
    names = ["a", "b", "c", "d"]
    for i in range(60):
        history = rng.choice(replicas)
        op = rng.random()
        if op < 0.6:
            step = _call(
                f"t{i}",
                f"d-{i}",
                labels=frozenset(rng.sample(names, rng.randint(0, 2))),
                clears=frozenset(rng.sample(names, rng.randint(0, 1))),
            )
            got = history.append("acme", "s", step)
            assert got.seq == memory.append("acme", "s", step).seq
        elif op < 0.8:
            decision = f"d-{rng.randrange(max(i, 1))}"
            labels = frozenset(rng.sample(names, 1))
            ran = rng.random() < 0.7
            data = frozenset(rng.sample(range(100), rng.randint(0, 2)))
            history.settle("acme", "s", decision, executed=ran, fingerprints=data, labels=labels)
            memory.settle("acme", "s", decision, executed=ran, fingerprints=data, labels=labels)
        assert _shape(history.view("acme", "s")) == _shape(memory.view("acme", "s")), i


def test_a_settle_by_another_replica_is_seen_and_not_overwritten(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    a = store.session_history()
    b = open_replica().session_history()
    a.append("acme", "s", _call("read_file", "d-1"))
    assert a.view("acme", "s").steps[0].executed is None
    b.settle("acme", "s", "d-1", executed=True, labels=frozenset({"secret"}))
    # A's next append (after its stale view) keeps the label the settle added
    a.append("acme", "s", _call("send", "d-2"))
    view = a.view("acme", "s")
    assert view.labels == {"secret"} and view.steps[0].executed is True
    assert [s.seq for s in view.steps] == [1, 2]


def test_a_session_expired_and_begun_again_is_not_taken_for_the_kept_one(
    store: SqlStore,
    open_replica: Callable[..., SqlStore],
    clock,  # type: ignore[no-untyped-def]
) -> None:
    a = store.session_history(expire_after=60.0)
    b = open_replica().session_history(expire_after=60.0)
    a.append("acme", "s", _call("read_file", "d-1", labels=frozenset({"secret"})))
    a.append("acme", "s", _call("read_file", "d-2"))
    assert a.view("acme", "s").next_seq == 3  # A keeps version 2 of the session
    clock.advance(120)
    assert b.expire(60.0) == 1
    # begun again by B up to the same version and seq: only its creation differs
    b.append("acme", "s", _call("fetch", "d-3"))
    b.append("acme", "s", _call("fetch", "d-4"))
    step = a.append("acme", "s", _call("send", "d-5", labels=frozenset({"sent"})))
    assert step.seq == 3
    for history in (a, b):
        view = history.view("acme", "s")
        assert [s.name for s in view.steps] == ["fetch", "fetch", "send"]
        assert view.labels == {"sent"}  # the expired session's secret is gone with it


def test_a_kept_view_is_not_moved_on_past_a_write_it_did_not_see(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    """A's append lands after B's (the general path): A must not extend its old kept
    view by its own step, which would hide B's."""
    a = store.session_history()
    b = open_replica().session_history()
    a.append("acme", "s", _call("a1", "d-1"))
    b.append("acme", "s", _call("b1", "d-2", labels=frozenset({"secret"})))
    a.append("acme", "s", _call("a2", "d-3"))
    view = a.view("acme", "s")
    assert [s.name for s in view.steps] == ["a1", "b1", "a2"]
    assert view.labels == {"secret"}


GUARD_POLICY = """\
version: 1
default: deny
audit: {durability: process}
labels:
  - id: secrets
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: reads
    decision: allow
    reason: reads are fine
    name: read_file
  - id: mail
    decision: allow
    reason: mail is fine
    name: send_email
  - id: no-mail-after-secret
    decision: deny
    reason: no mail after a secret read
    name: send_email
    session:
      labels: [secret]
"""


def test_two_guards_on_one_database_see_each_others_steps_at_their_next_check(
    store_url: str,
) -> None:
    """Each guard keeps its view of the session and writes its step in one statement
    after it (SQLite's usual step; PostgreSQL's step riding the record's statement):
    a step the other guard wrote since is read at the next check, never hidden by
    the kept view — the secret read through B refuses A's mail right after, and a
    benign session next to it is untouched."""
    from interlock import Action, Context, Guard, Verdict
    from interlock.policy import load_policy_text

    def guard(session: str) -> Guard:
        return Guard(
            load_policy_text(GUARD_POLICY),
            store=store_url,
            reap_interval=None,
            context=Context(session_id=session),
        )

    notes = Action.tool("read_file", {"path": "/srv/notes.txt"})
    secret = Action.tool("read_file", {"path": "/srv/app/.env"})
    mail = Action.tool("send_email", {"to": "a@b.example", "body": "hello"})
    a, b, other = guard("s-1"), guard("s-1"), guard("s-2")
    try:
        for _ in range(3):  # both keep a view of the session, moved on by their steps
            assert a.check(notes).verdict is Verdict.ALLOW
            assert a.check(mail).verdict is Verdict.ALLOW
            assert other.check(mail).verdict is Verdict.ALLOW
        assert b.check(mail).verdict is Verdict.ALLOW
        assert b.check(secret).verdict is Verdict.ALLOW
        assert a.check(mail).verdict is Verdict.DENY  # B's step seen at A's next check
        assert a.check(notes).verdict is Verdict.ALLOW
        assert b.check(mail).verdict is Verdict.DENY
        assert other.check(mail).verdict is Verdict.ALLOW
        view = a.sessions.view("default", "s-1")  # type: ignore[union-attr]
        assert view.next_seq == 12 and view.labels == {"secret"}
        assert [s.seq for s in view.steps] == list(range(1, 12))
    finally:
        for g in (a, b, other):
            g.close()
