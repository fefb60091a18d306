"""Every store wait is bounded by the check's deadline: a SQLite write lock another
process holds, a PostgreSQL row lock, the audit commit. The check answers
``undetermined`` in time, and the record it leaves behind is neither lost nor written
twice."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict, load_policy_text
from interlock.errors import StoreError, StoreUnavailable
from interlock.store import AuditWriter, SqlStore, open_store

TIMEOUT = 0.5
EPSILON = 1.5  # a noisy shared machine: the bound is TIMEOUT + EPSILON

POLICY = load_policy_text(
    """
version: 1
default: deny
budgets:
  - id: spend
    limit: 1000
    unit: USD
    scope: agent
    kind: tool
    name: lookup     # FREE (read) is not covered: it states no cost
rules:
  - id: ok
    decision: allow
    reason: fine
    name: [lookup, read]
"""
)

PAID = Action.tool("lookup", {"q": "x", "est_cost": 1})  # touches the store: a reservation
FREE = Action.tool("read", {"path": "a"})  # only its audit record touches the store


def _elapsed(started: float) -> float:
    return time.monotonic() - started


# -- SQLite: another process holds the write lock ------------------------------------------


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "interlock.db"


@pytest.fixture
def sqlite_guard(sqlite_path: Path) -> Iterator[Guard]:
    with Guard(POLICY, store=f"sqlite:///{sqlite_path}", context=Context(agent="bot")) as guard:
        assert guard.check(PAID).allowed  # the budget row exists; connections are open
        yield guard


class HeldLock:
    """The database's write lock, held by a connection of its own (another process's
    long transaction, as far as the guard can tell)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            self.conn.execute("COMMIT")
            self.conn.close()


@pytest.fixture
def held(sqlite_path: Path, sqlite_guard: Guard) -> Iterator[HeldLock]:
    lock = HeldLock(sqlite_path)
    yield lock
    lock.release()


@pytest.mark.parametrize("action", [PAID, FREE], ids=["reservation", "audit-only"])
def test_a_locked_sqlite_file_gives_undetermined_within_the_deadline(
    sqlite_guard: Guard, held: HeldLock, action: Action
) -> None:
    started = time.monotonic()
    decision = sqlite_guard.check(action, timeout=TIMEOUT)
    assert _elapsed(started) < TIMEOUT + EPSILON
    assert decision.verdict is Verdict.UNDETERMINED


@pytest.mark.parametrize("action", [PAID, FREE], ids=["reservation", "audit-only"])
def test_a_locked_sqlite_file_gives_undetermined_within_the_deadline_async(
    sqlite_guard: Guard, held: HeldLock, action: Action
) -> None:
    started = time.monotonic()
    decision = asyncio.run(sqlite_guard.acheck(action, timeout=TIMEOUT))
    assert _elapsed(started) < TIMEOUT + EPSILON
    assert decision.verdict is Verdict.UNDETERMINED


def _decision_bodies(store: SqlStore) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for row in store.audit_rows(kind="decision"):
        body = json.loads(row.body)
        found.setdefault(body["decision_id"], []).append(body)
    return found


def _decision_records(store: SqlStore) -> dict[str, list[str]]:
    return {
        key: [body["decision"] for body in bodies]
        for key, bodies in _decision_bodies(store).items()
    }


def test_the_record_of_a_check_past_its_deadline_is_written_once_and_says_undetermined(
    sqlite_guard: Guard, held: HeldLock
) -> None:
    decision = sqlite_guard.check(FREE, timeout=TIMEOUT)
    assert decision.verdict is Verdict.UNDETERMINED
    held.release()
    assert sqlite_guard.audit is not None and sqlite_guard.audit.flush(30)
    assert sqlite_guard.store is not None
    # "Undetermined, but the record may commit later": it did, once. The check's own
    # thread was committing it when its deadline passed, so the allow the policy reached
    # is on record — followed by the undetermined its caller was told, which supersedes it.
    records = _decision_bodies(sqlite_guard.store)[decision.decision_id]
    assert [r["decision"] for r in records] == ["allow", "undetermined"]
    assert records[1]["supersedes"] == "allow"
    assert records[1]["reason"] == decision.reason
    assert sqlite_guard.store.verify_audit().ok


def test_a_record_still_queued_at_the_deadline_is_replaced_not_followed(
    sqlite_path: Path, sqlite_guard: Guard
) -> None:
    """While another check's commit holds the writer, a record waits in the next batch:
    when its caller's deadline passes it is rewritten in place — one record, saying what
    the caller was told."""
    lock = HeldLock(sqlite_path)
    first = threading.Thread(target=lambda: sqlite_guard.check(FREE, timeout=5))
    first.start()  # leads a commit that waits for the lock
    time.sleep(0.3)
    queued = sqlite_guard.check(FREE, timeout=TIMEOUT)  # queued behind it
    assert queued.verdict is Verdict.UNDETERMINED
    lock.release()
    first.join(30)
    assert sqlite_guard.audit is not None and sqlite_guard.audit.flush(30)
    assert sqlite_guard.store is not None
    records = _decision_bodies(sqlite_guard.store)[queued.decision_id]
    assert [r["decision"] for r in records] == ["undetermined"]
    assert "supersedes" not in records[0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_check_given_no_timeout_is_bounded_by_the_guard_default(
    sqlite_guard: Guard, held: HeldLock, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    import interlock.guard

    monkeypatch.setattr(interlock.guard, "DEFAULT_TIMEOUT", TIMEOUT)
    started = time.monotonic()
    if mode == "async":
        decision = asyncio.run(sqlite_guard.acheck(PAID))
    else:
        decision = sqlite_guard.check(PAID)
    assert _elapsed(started) < TIMEOUT + EPSILON
    assert decision.verdict is Verdict.UNDETERMINED


def test_the_sqlite_busy_timeout_is_a_url_parameter(sqlite_path: Path) -> None:
    store = open_store(f"sqlite:///{sqlite_path}?busy_timeout=0.2")
    try:
        assert store.busy_timeout == 0.2  # type: ignore[attr-defined]
        assert store.url == f"sqlite:///{sqlite_path}"  # the file is the path, not "…?…"
        lock = HeldLock(sqlite_path)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                store.rate_acquire(
                    tenant="t", limit_id="l", key="k", interval_us=1, window_us=1_000_000
                )
            assert _elapsed(started) < 0.2 + EPSILON
        finally:
            lock.release()
    finally:
        store.close()


@pytest.mark.parametrize(
    "query",
    ["busy_timeout=soon", "busy_timeout=-1", "bogus=1"],
    ids=["text", "negative", "unknown"],
)
def test_a_bad_sqlite_url_parameter_is_refused_by_name(sqlite_path: Path, query: str) -> None:
    with pytest.raises(StoreError, match=query.split("=", maxsplit=1)[0]):
        open_store(f"sqlite:///{sqlite_path}?{query}")


# -- PostgreSQL: a row lock held by another session ----------------------------------------


@pytest.fixture
def pg_guard(postgres_url: str) -> Iterator[Guard]:
    with Guard(POLICY, store=postgres_url, context=Context(agent="bot")) as guard:
        assert guard.check(PAID).allowed  # the budget row exists
        yield guard


@pytest.fixture
def budget_row_locked(pg_guard: Guard, postgres_url: str) -> Iterator[None]:
    """Another session holds the budget's row lock in an open transaction."""
    import psycopg

    from interlock.store.postgres import _split_url

    conninfo, own = _split_url(postgres_url)
    with psycopg.connect(conninfo, options=f"-c search_path={own['schema']}") as conn:
        conn.execute("SELECT * FROM budgets FOR UPDATE")
        yield
        conn.rollback()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_locked_postgres_row_gives_undetermined_within_the_deadline(
    pg_guard: Guard, budget_row_locked: None, mode: str
) -> None:
    started = time.monotonic()
    if mode == "async":
        decision = asyncio.run(pg_guard.acheck(PAID, timeout=TIMEOUT))
    else:
        decision = pg_guard.check(PAID, timeout=TIMEOUT)
    assert _elapsed(started) < TIMEOUT + EPSILON
    assert decision.verdict is Verdict.UNDETERMINED


def test_the_postgres_session_after_a_deadline_still_works(
    pg_guard: Guard, postgres_url: str
) -> None:
    """A statement cut at a check's deadline leaves no timeout behind on its pooled
    connection: the next checks (with and without a deadline) are allowed."""
    import psycopg

    from interlock.store.postgres import _split_url

    conninfo, own = _split_url(postgres_url)
    with psycopg.connect(conninfo, options=f"-c search_path={own['schema']}") as conn:
        conn.execute("SELECT * FROM budgets FOR UPDATE")
        assert pg_guard.check(PAID, timeout=TIMEOUT).verdict is Verdict.UNDETERMINED
        conn.rollback()
    for _ in range(3):
        assert pg_guard.check(PAID, timeout=5).allowed
        assert pg_guard.check(PAID).allowed


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("statement_timeout=abc", "statement_timeout"),
        ("lock_timeout=-1", "lock_timeout"),
        ("pool_timeout=0", "pool_timeout"),
        ("connect_timeout=x", "connect_timeout"),
    ],
)
def test_a_bad_postgres_timeout_parameter_is_refused_by_name(
    postgres_url: str, query: str, name: str
) -> None:
    with pytest.raises(StoreError, match=name):
        open_store(f"{postgres_url}&{query}")


def test_postgres_timeout_parameters_reach_the_server(postgres_url: str) -> None:
    store = open_store(f"{postgres_url}&statement_timeout=7&lock_timeout=3")
    try:
        with store.transaction(write=False) as cur:
            cur.execute("SHOW statement_timeout")
            statement = cur.fetchone()[0]
            cur.execute("SHOW lock_timeout")
            lock = cur.fetchone()[0]
        assert (statement, lock) == ("7s", "3s")
    finally:
        store.close()


# -- the audit commit whose outcome is unknown ---------------------------------------------


class CommitsThenFails:
    """``append_audit`` that commits, then reports a lost connection once: the outcome
    of a commit cut at a deadline (the server may have committed it)."""

    def __init__(self, store: SqlStore) -> None:
        self.real = store.append_audit
        self.armed = True
        store.append_audit = self.append  # type: ignore[method-assign]

    def append(self, entries: Any, *, durable: bool = False) -> list[int]:
        seqs = self.real(entries, durable=durable)
        if self.armed:
            self.armed = False
            raise StoreUnavailable("server closed the connection unexpectedly")
        return seqs


def test_a_commit_of_unknown_outcome_is_never_written_twice(store: SqlStore) -> None:
    CommitsThenFails(store)
    writer = AuditWriter(store)
    seq = writer.write_record("acme", "note", {"n": 1})
    writer.close()
    assert [row.seq for row in store.audit_chain("acme")] == [seq] == [1]
    assert store.verify_audit().ok


def test_a_check_that_leads_a_commit_and_times_out_hands_it_over(
    sqlite_path: Path, sqlite_guard: Guard
) -> None:
    """The caller whose thread was committing leaves at its deadline; the writer thread
    finishes that commit: every record lands once."""
    lock = HeldLock(sqlite_path)
    decisions = [sqlite_guard.check(FREE, timeout=0.2) for _ in range(3)]
    threading.Timer(0.3, lock.release).start()
    assert sqlite_guard.audit is not None and sqlite_guard.audit.flush(30)
    assert sqlite_guard.store is not None
    records = _decision_records(sqlite_guard.store)
    for decision in decisions:
        assert decision.verdict is Verdict.UNDETERMINED
        assert records[decision.decision_id][-1] == "undetermined"
        assert len(records[decision.decision_id]) == len(set(records[decision.decision_id]))
