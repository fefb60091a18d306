"""The API's audit reader: one tenant's chain after a sequence number, filtered, read
in pages — on SQLite and PostgreSQL."""

from __future__ import annotations

from interlock.server.audit_query import AuditFilter, audit_page, audit_stream
from interlock.store import SqlStore
from interlock.store.chain import encode_body


def fill(store: SqlStore) -> None:
    """Seven acme records (decision ids d1..d7, every third one a deny by bot-b) and
    two globex ones, interleaved."""
    entries = []
    for i in range(1, 8):
        verdict, agent = ("deny", "bot-b") if i % 3 == 0 else ("allow", "bot-a")
        entries.append(
            ("acme", 1_000 + i, "decision", f"d{i}", agent, verdict, encode_body({"i": i}))
        )
        if i % 4 == 0:
            entries.append(
                ("globex", 1_000 + i, "decision", f"g{i}", "bot-a", "allow", encode_body({}))
            )
    store.append_audit(entries)


def test_a_stream_reads_every_page_of_one_tenant_in_order(store: SqlStore) -> None:
    fill(store)
    rows = list(audit_stream(store, AuditFilter("acme"), page=2))
    assert [row.decision_id for row in rows] == [f"d{i}" for i in range(1, 8)]
    assert [row.seq for row in rows] == list(range(1, 8))
    assert {row.tenant for row in rows} == {"acme"}


def test_a_page_starts_after_since_seq_and_stops_at_limit(store: SqlStore) -> None:
    fill(store)
    page = audit_page(store, AuditFilter("acme", since_seq=2), limit=3)
    assert [row.seq for row in page] == [3, 4, 5]


def test_filters_combine(store: SqlStore) -> None:
    fill(store)
    denies = list(audit_stream(store, AuditFilter("acme", decision="deny", agent="bot-b"), page=1))
    assert [row.decision_id for row in denies] == ["d3", "d6"]
    (one,) = audit_page(store, AuditFilter("acme", decision_id="d5"), limit=10)
    assert one.seq == 5
    assert audit_page(store, AuditFilter("acme", decision_id="g4"), limit=10) == []
    assert audit_page(store, AuditFilter("acme", kind="approval"), limit=10) == []
