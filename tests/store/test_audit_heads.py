"""Each chain's head as this process last committed it: an append links to it without
reading it first, moves it with an UPDATE that matches only if it is still the head,
and reads it again when another writer — another process, a replica, a transaction
of this process it did not hear of — moved it meanwhile. So writers taking turns on
one database keep one valid chain per tenant, and a commit of a chain the process
knows runs the fewest statements it can (SQLite: four; PostgreSQL: one)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import interlock.store.sql_audit as sql_audit
from interlock.store import SqlStore
from interlock.store.sql import AuditEntry

T0 = 1_700_000_000_000_000


def entry(tenant: str, n: int) -> AuditEntry:
    body = json.dumps({"n": n, "tenant": tenant}, sort_keys=True)
    return (tenant, T0 + n, "decision", f"dec_{n}", "bot", "allow", body)


def head_reads(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tenants whose head ``store`` reads under the transaction's lock, in order
    (PostgreSQL reads a batch's heads in one statement, SQLite one by one)."""
    reads: list[str] = []
    name = "_lock_heads" if hasattr(store, "_lock_heads") else "_lock_head"
    read = getattr(store, name)

    def counted(cur: Any, tenants: Any) -> Any:
        reads.extend([tenants] if isinstance(tenants, str) else tenants)
        return read(cur, tenants)

    monkeypatch.setattr(store, name, counted)
    return reads


def test_writers_taking_turns_on_one_database_keep_one_chain_per_tenant(
    store: SqlStore, open_replica: Callable[..., SqlStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = open_replica()
    reads = {id(w): head_reads(w, monkeypatch) for w in (store, other)}
    written = {"acme": 0, "globex": 0}
    for n in range(40):
        # Mostly alternating (the head each knows is stale), every fourth turn the same
        # writer again (the head it knows is current); every third batch two tenants.
        writer = (store, other)[(n // 2) % 2 if n % 4 == 0 else n % 2]
        batch = [entry("acme", n)]
        if n % 3 == 0:
            batch = [entry("globex", n), entry("acme", n + 100), entry("globex", n + 200)]
        seqs = writer.append_audit(batch)
        for (tenant, *_), seq in zip(batch, seqs, strict=True):
            written[tenant] += 1
            assert seq == written[tenant]  # each chain continues where it is, no gap
    report = store.verify_audit()
    assert report.ok, report.breaks
    assert report.checked == written
    # Both paths ran: heads linked to unread, and heads read again after the other
    # writer moved them.
    every_read = reads[id(store)] + reads[id(other)]
    assert 0 < len(every_read) < sum(written.values())
    assert {"acme", "globex"} <= set(every_read)


def test_a_head_moved_by_hand_is_read_again_not_linked_to_blindly(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append_audit([entry("acme", 1), entry("acme", 2)])
    reads = head_reads(store, monkeypatch)
    store.append_audit([entry("acme", 3)])
    assert reads == []  # known: not read
    with store.transaction() as cur:  # someone moves the head back by one
        cur.execute(store.q("SELECT hash FROM audit_events WHERE tenant = 'acme' AND seq = 2"))
        (previous,) = cur.fetchone()
        cur.execute(
            store.q("UPDATE audit_heads SET seq = 2, hash = ? WHERE tenant = 'acme'"), (previous,)
        )
        cur.execute(store.q("DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 3"))
    assert store.append_audit([entry("acme", 4)]) == [3]  # after the head as it is now
    assert reads == ["acme"]
    assert store.verify_audit().checked == {"acme": 3}


def test_a_store_forgets_the_heads_it_knows_past_its_bound(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_audit, "_KNOWN_HEADS", 3)
    for n in range(10):
        store.append_audit([entry(f"t{n}", n)])
        assert len(store._known_heads) <= 3
    reads = head_reads(store, monkeypatch)
    assert store.append_audit([entry("t0", 100)]) == [2]
    assert reads == ["t0"]  # forgotten, so read
    assert store.verify_audit().ok


# -- the statements a commit runs -----------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_sqlite_commit_of_a_known_chain_is_four_statements(store: SqlStore) -> None:
    conn = store._connection()  # type: ignore[attr-defined]
    assert isinstance(conn, sqlite3.Connection)
    sent: list[str] = []
    conn.set_trace_callback(lambda sql: sent.append(" ".join(sql.split()[:3]).upper()))
    try:
        store.append_audit([entry("acme", 1)])  # not known yet: read under the lock
        assert sent == [
            "BEGIN IMMEDIATE",
            "SELECT SEQ, HASH,",  # no head yet: made, then read
            "INSERT INTO AUDIT_HEADS",
            "SELECT SEQ, HASH,",
            "UPDATE AUDIT_HEADS SET",
            "INSERT INTO AUDIT_EVENTS",
            "COMMIT",
        ]
        sent.clear()
        store.append_audit([entry("acme", n) for n in range(2, 10)])  # known: 8 rows
        assert sent == [
            "BEGIN IMMEDIATE",
            "UPDATE AUDIT_HEADS SET",
            "INSERT INTO AUDIT_EVENTS",
            "COMMIT",
        ]
    finally:
        conn.set_trace_callback(None)
    assert store.verify_audit().checked == {"acme": 9}


@contextmanager
def statements() -> Iterator[list[str]]:
    """The first word of every statement psycopg sends (``BEGIN``/``COMMIT`` too)."""
    import psycopg

    sent: list[str] = []
    real = psycopg.Cursor.execute

    def counting(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query).split(None, 1)[0].upper())
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgresql_commit_of_a_known_chain_is_one_statement(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    with statements() as sent:
        store.append_audit([entry("acme", 1)])  # not known: locked and read first
        assert sent == ["BEGIN", "SELECT", "SELECT", "INSERT", "SELECT", "WITH", "COMMIT"]
        sent.clear()
        store.append_audit([entry("acme", n) for n in range(2, 10)])
        assert sent == ["WITH"]  # one round trip: head moved and rows inserted, or neither
        sent.clear()
        store.append_audit([entry("acme", 10), entry("globex", 1), entry("acme", 11)])
        assert sent[0] == "BEGIN" and sent[-1] == "COMMIT"  # two chains: locked first
        assert sent.count("WITH") == 1
        sent.clear()
        open_replica().append_audit([entry("acme", 12)])  # another replica moves the head
        sent.clear()
        assert store.append_audit([entry("acme", 13)]) == [13]
        assert sent == ["WITH", "BEGIN", "SELECT", "WITH", "COMMIT"]  # stale: read, again
        sent.clear()
        store.append_audit([entry("acme", 14)], durable=True)  # power: its own transaction
        assert sent[:2] == ["BEGIN", "SET"]
    assert store.verify_audit().checked == {"acme": 14, "globex": 1}


@pytest.mark.slow
def test_processes_writing_one_database_at_once_keep_one_chain_per_tenant(
    store: SqlStore, store_url: str, spawn_worker: Callable[..., Any]
) -> None:
    """Three processes, each a group-commit writer of 4 threads over the same two
    chains (the head each knows goes stale at every turn of another), killed with
    SIGKILL while writing: every record one reported durable is there with its
    marker, at a place no other report names, and each chain verifies."""
    writers = [
        spawn_worker("audit-writer", store_url, "--threads", "4", "--tenants", "acme,globex")
        for _ in range(3)
    ]
    reported = [writer.expect("seq", timeout=30) for writer in writers]
    for writer in writers:  # each has written: now all three are writing at once
        for _ in range(40):
            reported.append(writer.expect("seq", timeout=30))
    for writer in writers:
        writer.kill()
        reported += writer.read_all()
    report = store.verify_audit()
    assert report.ok, report.breaks
    bodies = {(row.tenant, row.seq): json.loads(row.body) for row in store.audit_rows()}
    for message in reported:
        assert bodies[(message["tenant"], message["seq"])]["marker"] == message["marker"]
    assert len({(m["tenant"], m["seq"]) for m in reported}) == len(reported)
    assert sum(report.checked.values()) == len(bodies)
