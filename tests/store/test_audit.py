"""The audit log: one hash chain per tenant that names the first tampered record,
HMAC links under the audit key, filtered and paged reads, and the group-commit
writer. (Every kind of tampering, against the key and signed checkpoints together, is
in test_audit_tampering.py.)"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from interlock.errors import AuditFailure, StoreError
from interlock.store import AuditRow, AuditWriter, SqlStore
from interlock.store.chain import row_hash
from interlock.store.sql import AuditEntry

T0 = 1_700_000_000_000_000


def entry(
    tenant: str,
    n: int,
    *,
    ts_us: int | None = None,
    kind: str = "decision",
    agent: str | None = "bot",
    decision: str | None = "allow",
) -> AuditEntry:
    body = json.dumps({"n": n, "tenant": tenant}, sort_keys=True)
    return (tenant, T0 + n if ts_us is None else ts_us, kind, f"dec_{n}", agent, decision, body)


def execute(store: SqlStore, statement: str, *params: Any) -> None:
    """Raw SQL, as someone with write access to the database would run it."""
    with store.transaction() as cur:
        cur.execute(store.q(statement), params)


def chain(store: SqlStore, tenant: str) -> list[AuditRow]:
    return list(store.audit_chain(tenant))


def rehash(row: AuditRow, prev_hash: str, key: bytes | None = None) -> str:
    return row_hash(dataclasses.replace(row, prev_hash=prev_hash), key)


# -- appending and verifying ----------------------------------------------------------


def test_each_tenant_gets_its_own_sequence_and_a_chain_that_verifies(store: SqlStore) -> None:
    seqs = store.append_audit(
        [entry("acme", 1), entry("globex", 2), entry("acme", 3), entry("acme", 4)]
    )
    seqs += store.append_audit([entry("globex", 5), entry("acme", 6)])
    assert seqs == [1, 1, 2, 3, 2, 4]
    assert [r.seq for r in chain(store, "acme")] == [1, 2, 3, 4]
    assert [r.seq for r in chain(store, "globex")] == [1, 2]
    acme = chain(store, "acme")
    assert [r.prev_hash for r in acme[1:]] == [r.hash for r in acme[:-1]]
    assert store.audit_head("acme") == (4, acme[-1].hash)
    report = store.verify_audit()
    assert report.ok
    assert report.checked == {"acme": 4, "globex": 2}
    assert store.audit_tenants() == ["acme", "globex"]


def test_an_empty_log_verifies(store: SqlStore) -> None:
    report = store.verify_audit()
    assert report.ok
    assert report.checked == {}


# Five records for acme, three for globex; each tamper is on acme.
def edit(column: str, value: Any) -> Callable[[SqlStore], None]:
    def tamper(store: SqlStore) -> None:
        execute(
            store,
            f"UPDATE audit_events SET {column} = ? WHERE tenant = 'acme' AND seq = 3",
            value,
        )

    return tamper


def delete_record(seq: int) -> Callable[[SqlStore], None]:
    def tamper(store: SqlStore) -> None:
        execute(store, "DELETE FROM audit_events WHERE tenant = 'acme' AND seq = ?", seq)

    return tamper


def delete_head_row(store: SqlStore) -> None:
    execute(store, "DELETE FROM audit_heads WHERE tenant = 'acme'")


def swap_records_2_and_4(store: SqlStore) -> None:
    execute(store, "UPDATE audit_events SET seq = -2 WHERE tenant = 'acme' AND seq = 2")
    execute(store, "UPDATE audit_events SET seq = 2 WHERE tenant = 'acme' AND seq = 4")
    execute(store, "UPDATE audit_events SET seq = 4 WHERE tenant = 'acme' AND seq = -2")


def append_forged_record(store: SqlStore) -> None:
    last = chain(store, "acme")[-1]
    forged = AuditRow("acme", 6, last.ts_us + 1, "decision", "dec_x", "bot", "allow", "{}", "", "")
    execute(
        store,
        "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
        "body, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "acme",
        6,
        forged.ts_us,
        forged.kind,
        forged.decision_id,
        forged.agent,
        forged.decision,
        forged.body,
        last.hash,
        rehash(forged, last.hash),
    )


def edit_body_and_rehash_it(store: SqlStore) -> None:
    row = chain(store, "acme")[2]
    body = row.body.replace('"n"', '"N"')
    edited = dataclasses.replace(row, body=body)
    execute(
        store,
        "UPDATE audit_events SET body = ?, hash = ? WHERE tenant = 'acme' AND seq = 3",
        body,
        rehash(edited, row.prev_hash),
    )


TAMPERS = [
    ("edit the body", edit("body", '{"n":3,"tenant":"acme","refund":0}'), 3, "modified"),
    ("edit the decision", edit("decision", "deny"), 3, "modified"),
    ("edit the agent", edit("agent", "someone-else"), 3, "modified"),
    ("edit the kind", edit("kind", "note"), 3, "modified"),
    ("edit the timestamp", edit("ts_us", T0 - 1), 3, "modified"),
    ("edit the decision id", edit("decision_id", "dec_other"), 3, "modified"),
    ("edit the prev hash", edit("prev_hash", "f" * 64), 3, "prev_hash does not match"),
    ("edit the body and re-hash it", edit_body_and_rehash_it, 3, "modified"),
    ("delete a middle record", delete_record(3), 3, "record 3 is missing"),
    ("delete the newest record", delete_record(5), 5, "records 5..5 are missing"),
    ("delete the head row", delete_head_row, 5, "no head record"),
    ("swap two records' seq", swap_records_2_and_4, 2, "prev_hash does not match"),
    ("append a forged record", append_forged_record, 6, "unkeyed (plain SHA-256) after keyed"),
]

KEY = "the audit key of these tests"


@pytest.fixture
def keyed(open_replica: Callable[..., SqlStore]) -> SqlStore:
    """The store with an audit key on both back ends (PostgreSQL has none by default)."""
    return open_replica(audit_key=KEY)


@pytest.mark.parametrize(
    ("tamper", "seq", "problem"),
    [pytest.param(t, s, p, id=name) for name, t, s, p in TAMPERS],
)
def test_verify_names_the_tenant_and_record_of_every_tamper(
    keyed: SqlStore, tamper: Callable[[SqlStore], None], seq: int, problem: str
) -> None:
    store = keyed
    store.append_audit([entry("acme", n) for n in range(1, 6)])
    store.append_audit([entry("globex", n) for n in range(1, 4)])
    assert store.verify_audit().ok

    tamper(store)

    report = store.verify_audit()
    assert not report.ok
    assert len(report.breaks) == 1
    (found,) = report.breaks
    assert (found.tenant, found.seq) == ("acme", seq)
    assert problem in found.problem
    assert str(found).startswith(f"tenant 'acme', record {seq}:")
    assert report.checked == {"globex": 3}  # the other tenant's chain is intact
    assert store.verify_audit(tenant="globex").ok


def test_with_an_audit_key_a_chain_rehashed_without_the_key_fails(
    keyed: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    unkeyed = open_replica(audit_key=False)
    keyed.append_audit([entry("acme", n) for n in range(1, 5)])
    assert keyed.verify_audit().ok
    # Keyed records name their key: a verifier without it cannot pass them.
    (cannot,) = unkeyed.verify_audit().breaks
    assert "which this verifier does not have" in cannot.problem

    # A forger with write access but no key rewrites the whole chain with SHA-256 (and
    # clears the key ids, as unkeyed records have none).
    prev = "0" * 64
    for row in chain(keyed, "acme"):
        digest = rehash(dataclasses.replace(row, key_id=None), prev, key=None)
        execute(
            keyed,
            "UPDATE audit_events SET prev_hash = ?, hash = ?, key_id = NULL "
            "WHERE tenant = ? AND seq = ?",
            prev,
            digest,
            row.tenant,
            row.seq,
        )
        prev = digest
    execute(keyed, "UPDATE audit_heads SET hash = ?, key_id = NULL WHERE tenant = 'acme'", prev)

    (found,) = keyed.verify_audit().breaks
    assert (found.tenant, found.seq) == ("acme", 1)
    assert "records 1..4 are unkeyed (plain SHA-256) and no keyed record follows" in found.problem
    # Without the key, the same forgery passes: that is what the key is for.
    assert unkeyed.verify_audit().ok
    assert unkeyed.verify_audit().checked == {"acme": 4}
    assert unkeyed.verify_audit().unkeyed == {"acme": 4}


# -- appends from several replicas -----------------------------------------------------


def pause_after_first_head(
    replica: SqlStore, meet: threading.Barrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pause ``replica``'s first append once it holds a chain head (PostgreSQL locks a
    batch's heads in one statement, SQLite reads them one by one under its write
    lock), until the other replica has locked one too or 1 s passed."""
    name = "_lock_heads" if hasattr(replica, "_lock_heads") else "_lock_head"
    lock = getattr(replica, name)
    paused: list[bool] = []

    def pausing(cur: Any, tenants: Any) -> Any:
        heads = lock(cur, tenants)
        if not paused:
            paused.append(True)
            with contextlib.suppress(threading.BrokenBarrierError):
                meet.wait(1.0)
        return heads

    monkeypatch.setattr(replica, name, pausing)


def test_replicas_appending_to_the_same_tenants_in_opposite_order_both_commit(
    store: SqlStore, open_replica: Callable[..., SqlStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    store.append_audit([entry("acme", 0), entry("globex", 0)])
    first, second = open_replica(), open_replica()
    meet = threading.Barrier(2)

    # Force the interleaving: each append pauses after it locked its first chain head,
    # until the other has locked one too (or 1 s passed: a back end that serialises
    # whole transactions never gets there).
    for replica in (first, second):
        pause_after_first_head(replica, meet, monkeypatch)

    outcomes: dict[str, Any] = {}

    def append(name: str, replica: SqlStore, entries: list[AuditEntry]) -> None:
        try:
            outcomes[name] = replica.append_audit(entries)
        except StoreError as exc:
            outcomes[name] = exc

    threads = [
        threading.Thread(target=append, args=("ab", first, [entry("acme", 1), entry("globex", 1)])),
        threading.Thread(
            target=append, args=("ba", second, [entry("globex", 2), entry("acme", 2)])
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["ab", "ba"]
    assert all(isinstance(seqs, list) for seqs in outcomes.values()), outcomes
    assert store.verify_audit().checked == {"acme": 3, "globex": 3}


# -- reading --------------------------------------------------------------------------


@pytest.fixture
def varied_log(store: SqlStore) -> SqlStore:
    store.append_audit(
        [
            entry("acme", 1, ts_us=T0 + 10, agent="bot", decision="allow"),
            entry("acme", 2, ts_us=T0 + 20, agent="ops", decision="deny"),
            entry("globex", 3, ts_us=T0 + 20, agent="bot", decision="deny"),
            entry("acme", 4, ts_us=T0 + 30, kind="note", agent=None, decision=None),
            entry("globex", 5, ts_us=T0 + 40, agent="ops", decision="allow"),
            entry("acme", 6, ts_us=T0 + 50, agent="bot", decision="require_approval"),
        ]
    )
    return store


def ids(rows: Any) -> list[tuple[str, int]]:
    return [(row.tenant, row.seq) for row in rows]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, [("acme", 1), ("acme", 2), ("globex", 1), ("acme", 3), ("globex", 2), ("acme", 4)]),
        ({"tenant": "globex"}, [("globex", 1), ("globex", 2)]),
        ({"agent": "ops"}, [("acme", 2), ("globex", 2)]),
        ({"decision": "deny"}, [("acme", 2), ("globex", 1)]),
        ({"kind": "note"}, [("acme", 3)]),
        (
            {"since_us": T0 + 20},
            [("acme", 2), ("globex", 1), ("acme", 3), ("globex", 2), ("acme", 4)],
        ),
        ({"until_us": T0 + 20}, [("acme", 1)]),
        ({"since_us": T0 + 20, "until_us": T0 + 40}, [("acme", 2), ("globex", 1), ("acme", 3)]),
        ({"tenant": "acme", "agent": "bot", "decision": "allow"}, [("acme", 1)]),
        ({"tenant": "acme", "kind": "decision", "limit": 2}, [("acme", 1), ("acme", 2)]),
        ({"newest_first": True, "limit": 3}, [("acme", 4), ("globex", 2), ("acme", 3)]),
    ],
)
def test_audit_rows_match_every_filter_given(
    varied_log: SqlStore, filters: dict[str, Any], expected: list[tuple[str, int]]
) -> None:
    assert ids(varied_log.audit_rows(**filters)) == expected


def test_audit_rows_page_through_records_with_equal_timestamps_without_loss_or_repeat(
    store: SqlStore,
) -> None:
    # Seven records share one timestamp across two tenants: pages must break ties.
    same = [entry(t, n, ts_us=T0) for n, t in enumerate(["acme", "globex"] * 3 + ["acme"])]
    store.append_audit([entry("acme", 99, ts_us=T0 - 5), *same, entry("globex", 98, ts_us=T0 + 5)])
    everything = ids(store.audit_rows(page=1000))
    assert everything == [
        ("acme", 1),
        ("acme", 2),
        ("acme", 3),
        ("acme", 4),
        ("acme", 5),
        ("globex", 1),
        ("globex", 2),
        ("globex", 3),
        ("globex", 4),
    ]
    assert ids(store.audit_rows(page=2)) == everything
    assert ids(store.audit_rows(page=3, newest_first=True)) == everything[::-1]
    assert ids(store.audit_rows(page=2, limit=5)) == everything[:5]
    assert ids(store.audit_rows(page=2, limit=4, newest_first=True)) == everything[::-1][:4]
    assert ids(store.audit_chain("acme", page=2)) == everything[:5]


# -- the group-commit writer ------------------------------------------------------------


@pytest.mark.parametrize("durability", ["process", "power"])
def test_concurrent_writers_share_commits_and_every_record_lands_in_one_chain(
    store: SqlStore, durability: Any
) -> None:
    writer = AuditWriter(store, durability=durability)
    threads, per_thread = 8, 25
    start = threading.Barrier(threads)
    returned: list[tuple[str, int | None, str]] = []
    lock = threading.Lock()

    def write(index: int) -> None:
        tenant = ("acme", "globex")[index % 2]
        start.wait(10)
        for n in range(per_thread):
            marker = f"t{index}-{n}"
            seq = writer.write_record(tenant, "note", {"marker": marker})
            with lock:
                returned.append((tenant, seq, marker))

    workers = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    writer.close()

    assert len(returned) == threads * per_thread
    by_tenant: dict[str, list[int]] = defaultdict(list)
    for tenant, seq, _ in returned:
        assert seq is not None
        by_tenant[tenant].append(seq)
    for tenant, seqs in by_tenant.items():
        assert sorted(seqs) == list(range(1, len(seqs) + 1)), tenant
    bodies = {(r.tenant, r.seq): json.loads(r.body) for r in store.audit_rows()}
    assert len(bodies) == threads * per_thread
    for tenant, seq, marker in returned:
        assert bodies[(tenant, seq)]["marker"] == marker
        assert bodies[(tenant, seq)]["kind"] == "note"
    assert store.verify_audit().checked == {"acme": 100, "globex": 100}
    assert writer.batches < threads * per_thread  # group commit happened


def test_durability_none_does_not_wait_and_flush_makes_records_visible(store: SqlStore) -> None:
    writer = AuditWriter(store, durability="none")
    results = [writer.write_record("acme", "note", {"n": n}) for n in range(10)]
    assert results == [None] * 10
    assert writer.flush(10)
    assert [row.seq for row in store.audit_chain("acme")] == list(range(1, 11))
    writer.close()
    assert store.verify_audit().ok


def test_the_writer_stores_the_redacted_record(store: SqlStore) -> None:
    writer = AuditWriter(store)
    seq = writer.write_record(
        "acme", "note", {"agent": "bot", "decision": "allow", "api_key": "sk-live-abcdef123456"}
    )
    writer.close()
    (row,) = store.audit_rows()
    assert (row.tenant, row.seq, row.agent, row.decision) == ("acme", seq, "bot", "allow")
    assert "sk-live-abcdef123456" not in row.body


def test_a_writer_on_a_closed_store_fails_closed_without_hanging(store: SqlStore) -> None:
    store.close()
    writer = AuditWriter(store, timeout=20)
    started = time.monotonic()
    with pytest.raises(AuditFailure) as failed:
        writer.write_record("acme", "note", {"n": 1})
    assert isinstance(failed.value.__cause__, StoreError)  # the store said no: not a timeout
    assert time.monotonic() - started < 10
    writer.close(5)
    with pytest.raises(AuditFailure):
        writer.write_record("acme", "note", {"n": 2})  # a closed writer refuses at once
