"""Reading one tenant's audit chain in ``seq`` order, filtered, in pages.

The store's own readers walk a chain whole (``audit_chain``) or every tenant by time
(``audit_rows``); the API reads one tenant after a sequence number, by decision id,
kind, verdict or agent. Each page is one indexed query on ``(tenant, seq)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from interlock.store.records import AuditRow
from interlock.store.sql import SqlStore

__all__ = ["AuditFilter", "audit_page", "audit_stream"]

_COLUMNS = "tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash"


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Records of ``tenant`` after ``since_seq`` matching every filter given."""

    tenant: str
    since_seq: int = 0
    decision_id: str | None = None
    kind: str | None = None
    decision: str | None = None
    agent: str | None = None


def audit_page(store: SqlStore, where: AuditFilter, limit: int) -> list[AuditRow]:
    """At most ``limit`` records, oldest first."""
    clauses = ["tenant = ?", "seq > ?"]
    params: list[Any] = [where.tenant, where.since_seq]
    for column, value in (
        ("decision_id", where.decision_id),
        ("kind", where.kind),
        ("decision", where.decision),
        ("agent", where.agent),
    ):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    sql = (
        f"SELECT {_COLUMNS} FROM audit_events WHERE {' AND '.join(clauses)} "
        f"ORDER BY seq LIMIT {int(limit)}"
    )
    with store.transaction(write=False) as cur:
        cur.execute(store.q(sql), params)
        return [_row(raw) for raw in cur.fetchall()]


def audit_stream(store: SqlStore, where: AuditFilter, *, page: int = 1000) -> Iterator[AuditRow]:
    """Every matching record, oldest first, read a page at a time."""
    since = where.since_seq
    while True:
        batch = audit_page(store, _after(where, since), page)
        yield from batch
        if len(batch) < page:
            return
        since = batch[-1].seq


def _after(where: AuditFilter, since: int) -> AuditFilter:
    return replace(where, since_seq=since)


def _row(raw: Any) -> AuditRow:
    return AuditRow(
        tenant=str(raw[0]),
        seq=int(raw[1]),
        ts_us=int(raw[2]),
        kind=str(raw[3]),
        decision_id=raw[4],
        agent=raw[5],
        decision=raw[6],
        body=str(raw[7]),
        prev_hash=str(raw[8]),
        hash=str(raw[9]),
    )
