"""``verify_audit`` on a live store: records landing while the chain is walked are not
a break (each record and its head move in one transaction; the head is read once the
chain is walked, and the records appended meanwhile are walked up to it), while a
record appended without its head, or a head moved past missing records, still is.
Both back ends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from interlock.store import AuditRow, AuditWriter, SqlStore


def _write(store: SqlStore, count: int, tenant: str = "acme") -> None:
    writer = AuditWriter(store)
    for n in range(count):
        writer.write_record(tenant, "note", {"n": n})
    writer.close()


def _appending_during_the_walk(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch, count: int
) -> list[int]:
    """Make ``count`` records land after the walk's first page is read (between its
    rows), as a busy writer's would; returns the seqs the walk was handed."""
    real = store.audit_chain
    seen: list[int] = []
    landed = False

    def walking(tenant: str, **options: Any) -> Iterator[AuditRow]:
        nonlocal landed
        for row in real(tenant, **options):
            seen.append(row.seq)
            yield row
            if not landed:
                landed = True
                _write(store, count)

    monkeypatch.setattr(store, "audit_chain", walking)
    return seen


def test_records_landing_during_the_walk_are_not_a_break(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(store, 3)
    seen = _appending_during_the_walk(store, monkeypatch, 2)
    report = store.verify_audit()
    assert report.ok, report
    assert report.checked == {"acme": 5}
    assert seen == [1, 2, 3, 4, 5]  # the first page (1-3), then the two that landed


def test_a_record_without_its_head_is_still_a_break(store: SqlStore) -> None:
    _write(store, 3)
    with store.transaction() as cur:  # the head moved back: the last record is unheaded
        cur.execute(
            store.q("SELECT hash FROM audit_events WHERE tenant = ? AND seq = 2"), ("acme",)
        )
        (hash_2,) = cur.fetchone()
        cur.execute(
            store.q("UPDATE audit_heads SET seq = 2, hash = ? WHERE tenant = ?"), (hash_2, "acme")
        )
    report = store.verify_audit()
    assert not report.ok
    assert [(b.tenant, b.seq) for b in report.breaks] == [("acme", 3)]


def test_a_head_past_missing_records_is_still_a_break(store: SqlStore) -> None:
    _write(store, 4)
    with store.transaction() as cur:  # the tail cut, the head left where it was
        cur.execute(store.q("DELETE FROM audit_events WHERE tenant = ? AND seq > 2"), ("acme",))
    report = store.verify_audit()
    assert not report.ok
    assert report.breaks[0].tenant == "acme"
